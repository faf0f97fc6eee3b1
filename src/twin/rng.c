/* xoshiro256** (Blackman and Vigna) with splitmix64 seeding. Deterministic across platforms:
 * only integer arithmetic until the final conversion to double. */
#include <math.h>

#include "twin/rng.h"

uint64_t eerl__splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void eerl__rng_seed(struct eerl__rng *r, uint64_t seed, uint64_t stream)
{
    uint64_t x = seed ^ (stream * 0xd1b54a32d192ed03ull);
    int i;

    for (i = 0; i < 4; i++)
        r->s[i] = eerl__splitmix64(&x);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t eerl__rng_u64(struct eerl__rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;

    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double eerl__rng_uniform(struct eerl__rng *r)
{
    return ((double)(eerl__rng_u64(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

double eerl__rng_normal(struct eerl__rng *r)
{
    double u1 = eerl__rng_uniform(r), u2 = eerl__rng_uniform(r);

    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

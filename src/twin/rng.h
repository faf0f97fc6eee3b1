/* Seeded pseudo-random numbers for the twin: xoshiro256** seeded through splitmix64. Owns only
 * its 32-byte state; no globals, so every stream (workload, divergence) is reproducible alone. */
#ifndef EERL_TWIN_RNG_H
#define EERL_TWIN_RNG_H

#include <stdint.h>

struct eerl__rng {
    uint64_t s[4];
};

/* Seeds from (seed, stream): different streams of one seed are independent. */
void eerl__rng_seed(struct eerl__rng *r, uint64_t seed, uint64_t stream);
uint64_t eerl__rng_u64(struct eerl__rng *r);
/* Uniform in (0, 1), never 0 or 1. */
double eerl__rng_uniform(struct eerl__rng *r);
/* Standard normal (Box-Muller; one value per call, the pair's second half is dropped so the
 * number of draws per value is fixed and streams stay aligned across settings). */
double eerl__rng_normal(struct eerl__rng *r);
/* splitmix64 step, also used to hash (seed, id) pairs. */
uint64_t eerl__splitmix64(uint64_t *x);

#endif

/* Workload generator. N = C = G unless the dynamic-sampling filter is on (then the tokens of
 * groups with nonzero advantage). The lognormal draw for response i of update u is exp(mu_u + sigma
 * z) with mu_u = log(median) + drift u; divergence d multiplies all lengths of a run by one
 * lognormal factor exp(d z) (the policy drifting apart between runs: a run's responses stay
 * longer or shorter) and those of each update by another exp(d z) (sampling), both from the
 * run's own stream, leaving the shared stream untouched. */
#include <math.h>

#include "eerl/error.h"
#include "twin/workload.h"

int eerl__wl_size_index(char size)
{
    switch (size) {
    case 'S':
        return 0;
    case 'M':
        return 1;
    case 'L':
        return 2;
    default:
        return EERL_EINVAL;
    }
}

static int params_ok(const struct eerl__wl_params *p)
{
    return p->seq_limit >= 1 && p->len_median >= 1 && p->len_sigma > 0 && p->len_sigma < 5 &&
           p->p_zero >= 0 && p->p_zero < 1 && isfinite(p->drift) &&
           (p->dyn_filter == 0 || p->dyn_filter == 1) &&
           (p->overlong_filter == 0 || p->overlong_filter == 1);
}

int eerl__wl_init(struct eerl__wl *w, const struct eerl__wl_params *p, char size, uint64_t seed,
                  uint64_t run_id, double divergence)
{
    int i = eerl__wl_size_index(size);

    if (i < 0 || !params_ok(p) || !(divergence >= 0 && divergence < 1))
        return EERL_EINVAL;
    if (!p->P[i] || !p->K[i] || p->B[i] != p->P[i] * p->K[i])
        return EERL_EINVAL;
    w->p = *p;
    w->P = p->P[i];
    w->K = p->K[i];
    w->B = p->B[i];
    w->div_sigma = divergence;
    eerl__rng_seed(&w->rng, seed, 1);
    eerl__rng_seed(&w->div, seed ^ (run_id * 0x9e3779b97f4a7c15ull), 2 + run_id);
    w->run_f = divergence > 0 ? exp(0.7 * divergence * eerl__rng_normal(&w->div)) : 1.0;
    return 0;
}

void eerl__wl_next(struct eerl__wl *w, unsigned u, struct eerl__wl_batch *ret)
{
    double mu = log(w->p.len_median) + w->p.drift * u;
    double f = 1.0, lim = w->p.seq_limit;
    struct eerl__wl_batch b = {0};
    unsigned g, k;

    if (w->div_sigma > 0)
        f = w->run_f * exp(w->div_sigma * eerl__rng_normal(&w->div));
    for (g = 0; g < w->P; g++) {
        double group = 0, kept = 0;
        int zero = eerl__rng_uniform(&w->rng) < w->p.p_zero;

        for (k = 0; k < w->K; k++) {
            double len = floor(exp(mu + w->p.len_sigma * eerl__rng_normal(&w->rng)) * f) + 1;

            if (len >= lim) {
                len = lim;
                b.n_trunc++;
            } else {
                kept += len;
            }
            group += len;
            if (len > b.L)
                b.L = len;
        }
        b.G += group;
        /* Every group is in the loss mask (zero advantage included) unless the dynamic-sampling
         * filter drops it; the draw happens either way so the stream does not depend on it. With
         * overlong filtering the truncated responses are scored and trained on by no one. */
        if (!zero || !w->p.dyn_filter)
            b.C += w->p.overlong_filter ? kept : group;
    }
    b.N = b.C;
    b.n_resp = w->P * w->K;
    b.mean_len = b.G / b.n_resp;
    *ret = b;
}

static double phi(double x)
{
    return 0.5 * erfc(-x / sqrt(2.0));
}

int eerl__wl_expected(const struct eerl__wl_params *p, char size, unsigned u,
                      struct eerl__wl_batch *ret)
{
    int i = eerl__wl_size_index(size);
    double mu, s, c, lc, mean, emax = 0, n;
    int j, steps = 256;

    if (i < 0 || !params_ok(p) || !p->P[i] || !p->K[i])
        return EERL_EINVAL;
    mu = log(p->len_median) + p->drift * u;
    s = p->len_sigma;
    c = p->seq_limit;
    lc = log(c);
    n = (double)p->P[i] * p->K[i];
    /* E[min(X, c)] for lognormal X, closed form. */
    mean = exp(mu + s * s / 2) * phi((lc - mu - s * s) / s) + c * (1 - phi((lc - mu) / s));
    /* E[max of n clipped draws] = integral over [0, c] of 1 - F(x)^n (midpoint rule in x). */
    for (j = 0; j < steps; j++) {
        double x = c * (j + 0.5) / steps;
        double F = phi((log(x) - mu) / s);

        emax += (1 - pow(F, n)) * (c / steps);
    }
    ret->G = n * mean;
    ret->C = p->overlong_filter ? n * exp(mu + s * s / 2) * phi((lc - mu - s * s) / s) : ret->G;
    if (p->dyn_filter)
        ret->C *= 1 - p->p_zero;
    ret->N = ret->C;
    ret->L = emax;
    ret->mean_len = mean;
    ret->n_resp = (unsigned)n;
    ret->n_trunc = (unsigned)(n * (1 - phi((lc - mu) / s)) + 0.5);
    return 0;
}

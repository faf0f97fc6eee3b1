/* Workload generator. N = C = G unless the dynamic-sampling filter is on (then the tokens of
 * groups with nonzero advantage). The lognormal draw for response i of update u is exp(mu_u +
 * sigma_u z) with mu_u = log(median) + shift(u) and sigma_u = sigma spread(u), the scenario's
 * (steady: shift = drift u, spread 1, as before scenarios existed); divergence d multiplies all
 * lengths of a run by one lognormal factor exp(d z) (the policy drifting apart between runs: a
 * run's responses stay longer or shorter) and those of each update by another exp(d z) (sampling),
 * both from the run's own stream, leaving the shared stream untouched. The length level (when
 * len_upd_sd > 0) shifts every log length of update u by x_u, an AR(2) process drawn from a stream
 * of its own keyed by the seed alone, so every setting of a seed sees it, and scales that update's
 * shape by exp(len_upd_shape x_u). */
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

int eerl__wl_scenario_ok(const struct eerl_twin_scenario *s)
{
    switch (s->kind) {
    case EERL_TWIN_SCENARIO_STEADY:
        return s->factor == 0 && s->spread == 0 && s->tau == 0 && s->span == 0 && s->at == 0;
    case EERL_TWIN_SCENARIO_GROWING:
        return s->factor >= 0.01 && s->factor <= 100 && s->span >= 1;
    case EERL_TWIN_SCENARIO_COLLAPSING:
        return s->factor >= 0.01 && s->factor <= 100 && s->spread >= 0.05 && s->spread <= 1 &&
               s->tau > 0 && s->tau <= 1e6;
    case EERL_TWIN_SCENARIO_STEP:
        return s->factor >= 0.01 && s->factor <= 100;
    default:
        return 0;
    }
}

void eerl__wl_scenario_at(const struct eerl__wl_params *p, unsigned u, double *ret_shift,
                          double *ret_spread)
{
    const struct eerl_twin_scenario *s = &p->scn;
    double shift = 0, spread = 1;

    switch (s->kind) {
    case EERL_TWIN_SCENARIO_GROWING:
        shift = log(s->factor) * (s->span > 1 ? fmin(1.0, (double)u / (s->span - 1)) : 1.0);
        break;
    case EERL_TWIN_SCENARIO_COLLAPSING: {
        double f = 1 - exp(-(double)u / s->tau);
        shift = log(s->factor) * f;
        spread = 1 + (s->spread - 1) * f;
        break;
    }
    case EERL_TWIN_SCENARIO_STEP:
        shift = u >= s->at ? log(s->factor) : 0;
        break;
    default: /* steady: the preset's fitted drift */
        shift = p->drift * u;
        break;
    }
    *ret_shift = shift;
    *ret_spread = spread;
}

/* An AR(2) process is stationary inside the triangle |ar2| < 1, ar1 + ar2 < 1, ar2 - ar1 < 1
 * (kept a little inside, so its innovation sd stays above 0). */
static int ar_stationary(const struct eerl__wl_params *p)
{
    double a1 = p->len_upd_ar1, a2 = p->len_upd_ar2, m = 1e-3;

    return isfinite(a1) && isfinite(a2) && a2 > -1 + m && a1 + a2 < 1 - m && a2 - a1 < 1 - m;
}

static int params_ok(const struct eerl__wl_params *p)
{
    return eerl__wl_scenario_ok(&p->scn) && p->seq_limit >= 1 && p->len_median >= 1 &&
           p->len_sigma > 0 && p->len_sigma < 5 && p->p_zero >= 0 && p->p_zero < 1 &&
           p->len_upd_sd >= 0 && p->len_upd_sd < 3 && ar_stationary(p) &&
           fabs(p->len_upd_shape) <= 2 && isfinite(p->drift) &&
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
    w->replay = NULL;
    w->n_replay = 0;
    eerl__rng_seed(&w->rng, seed, 1);
    w->seed = seed;
    w->lat_next = 0;
    w->lat_x = w->lat_xp = 0;
    eerl__rng_seed(&w->div, seed ^ (run_id * 0x9e3779b97f4a7c15ull), 2 + run_id);
    w->run_f = divergence > 0 ? exp(0.7 * divergence * eerl__rng_normal(&w->div)) : 1.0;
    return 0;
}

/* x_u of the length level, an AR(2) process started in its stationary law: x_0 = sd z_0, x_1 =
 * r1 x_0 + sd sqrt(1 - r1^2) z_1 with r1 = ar1 / (1 - ar2) its lag-1 correlation, then x_u = ar1
 * x_(u-1) + ar2 x_(u-2) + e z_u with e the innovation sd that keeps the variance sd^2; one draw per
 * update from the seed's own stream, a function of (seed, u) whatever the order of calls (updates
 * in order cost one draw each, another order replays the stream from update 0). */
static double length_level(struct eerl__wl *w, unsigned u)
{
    double sd = w->p.len_upd_sd, a1 = w->p.len_upd_ar1, a2 = w->p.len_upd_ar2;
    double r1 = a1 / (1 - a2);
    double e = sd * sqrt((1 + a2) * ((1 - a2) * (1 - a2) - a1 * a1) / (1 - a2));

    if (sd == 0)
        return 0;
    if (u + 1 == w->lat_next)
        return w->lat_x;
    if (u < w->lat_next)
        w->lat_next = 0;
    if (w->lat_next == 0) {
        eerl__rng_seed(&w->lat, w->seed ^ 0x2545f4914f6cdd1dull, 7);
        w->lat_x = w->lat_xp = 0;
    }
    while (w->lat_next <= u) {
        double z = eerl__rng_normal(&w->lat), x;

        if (w->lat_next == 0)
            x = sd * z;
        else if (w->lat_next == 1)
            x = r1 * w->lat_x + sd * sqrt(1 - r1 * r1) * z;
        else
            x = a1 * w->lat_x + a2 * w->lat_xp + e * z;
        w->lat_xp = w->lat_x;
        w->lat_x = x;
        w->lat_next++;
    }
    return w->lat_x;
}

void eerl__wl_next(struct eerl__wl *w, unsigned u, struct eerl__wl_batch *ret)
{
    double shift, spread, mu, sigma, x;
    double f = 1.0, lim = w->p.seq_limit;
    struct eerl__wl_batch b = {0};
    unsigned g, k;

    if (w->replay && u < w->n_replay && w->div_sigma == 0) {
        *ret = w->replay[u];
        return;
    }
    eerl__wl_scenario_at(&w->p, u, &shift, &spread);
    x = spread * length_level(w, u);
    mu = log(w->p.len_median) + shift + x;
    sigma = w->p.len_sigma * spread * exp(w->p.len_upd_shape * x);
    if (w->div_sigma > 0)
        f = w->run_f * exp(w->div_sigma * eerl__rng_normal(&w->div));
    for (g = 0; g < w->P; g++) {
        double group = 0, kept = 0;
        int zero = eerl__rng_uniform(&w->rng) < w->p.p_zero;

        for (k = 0; k < w->K; k++) {
            double len = floor(exp(mu + sigma * eerl__rng_normal(&w->rng)) * f) + 1;

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

int eerl__wl_draw(const struct eerl__wl_params *p, char size, uint64_t seed, unsigned n,
                  struct eerl__wl_batch *ret)
{
    struct eerl__wl w;
    unsigned u;
    int e = eerl__wl_init(&w, p, size, seed, 0, 0);

    if (e < 0)
        return e;
    for (u = 0; u < n; u++)
        eerl__wl_next(&w, u, &ret[u]);
    return 0;
}

static double phi(double x)
{
    return 0.5 * erfc(-x / sqrt(2.0));
}

/* Expected response tokens, kept tokens (below the limit), longest response and share at the limit
 * of n lognormal(mu, s) draws cut at c. */
struct moments {
    double mean, kept, emax, trunc;
};

static struct moments cut_moments(double mu, double s, double c, double n)
{
    struct moments m;
    double lc = log(c);
    int j, steps = 256;

    /* E[min(X, c)] for lognormal X, closed form. */
    m.kept = exp(mu + s * s / 2) * phi((lc - mu - s * s) / s);
    m.trunc = 1 - phi((lc - mu) / s);
    m.mean = m.kept + c * m.trunc;
    /* E[max of n clipped draws] = integral over [0, c] of 1 - F(x)^n (midpoint rule in x). */
    m.emax = 0;
    for (j = 0; j < steps; j++) {
        double x = c * (j + 0.5) / steps;
        double F = phi((log(x) - mu) / s);

        m.emax += (1 - pow(F, n)) * (c / steps);
    }
    return m;
}

int eerl__wl_expected(const struct eerl__wl_params *p, char size, unsigned u,
                      struct eerl__wl_batch *ret)
{
    int i = eerl__wl_size_index(size);
    double mu, s, c, n, shift, spread;
    struct moments m = {0, 0, 0, 0};

    if (i < 0 || !params_ok(p) || !p->P[i] || !p->K[i])
        return EERL_EINVAL;
    eerl__wl_scenario_at(p, u, &shift, &spread);
    mu = log(p->len_median) + shift;
    s = p->len_sigma * spread;
    c = p->seq_limit;
    n = (double)p->P[i] * p->K[i];
    if (p->len_upd_sd == 0) {
        m = cut_moments(mu, s, c, n);
    } else {
        /* Averaged over the length level x ~ N(0, sd^2) (its stationary law): midpoint rule over
         * z in [-5, 5], x = sd z, weights the normal density, normalised. */
        int j, nodes = 41;
        double wsum = 0;

        for (j = 0; j < nodes; j++) {
            double z = -5 + 10.0 * (j + 0.5) / nodes, wt = exp(-z * z / 2);
            double x = spread * p->len_upd_sd * z;
            struct moments a = cut_moments(mu + x, s * exp(p->len_upd_shape * x), c, n);

            m.mean += wt * a.mean;
            m.kept += wt * a.kept;
            m.emax += wt * a.emax;
            m.trunc += wt * a.trunc;
            wsum += wt;
        }
        m.mean /= wsum;
        m.kept /= wsum;
        m.emax /= wsum;
        m.trunc /= wsum;
    }
    ret->G = n * m.mean;
    ret->C = p->overlong_filter ? n * m.kept : ret->G;
    if (p->dyn_filter)
        ret->C *= 1 - p->p_zero;
    ret->N = ret->C;
    ret->L = m.emax;
    ret->mean_len = m.mean;
    ret->n_resp = (unsigned)n;
    ret->n_trunc = (unsigned)(n * m.trunc + 0.5);
    return 0;
}

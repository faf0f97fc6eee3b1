/* Owns the governor predictor's fit and prediction (see predictor.h) and Appendix B's forward
 * test. Features with no spread (L pinned at the token limit) are dropped before standardizing;
 * collinear ones are dropped by the pivoted QR in lsq.c. Nothing here allocates after
 * eerl__pred_work_init, except the public forward test, which owns its own memory. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eerl/error.h"
#include "core/lsq.h"
#include "core/predictor.h"

#define SD_RTOL 1e-6
#define LSQ_RTOL 1e-9

int eerl__layout_of(eerl_mode mode)
{
    switch (mode) {
    case EERL_MODE_DRAINED:
        return EERL__LAYOUT_OVERLAP;
    case EERL_MODE_INFLIGHT:
        return EERL__LAYOUT_WHOLE;
    default:
        return EERL__LAYOUT_SEQ;
    }
}

int eerl__pred_work_init(struct eerl__pred_work *w, size_t cap)
{
    memset(w, 0, sizeof(*w));
    if (cap == 0)
        return EERL_EINVAL;
    w->X = calloc(cap * (EERL__F_COUNT + 1), sizeof(double));
    w->y = calloc(cap, sizeof(double));
    w->feat = calloc(cap * EERL__F_COUNT, sizeof(double));
    w->tgt = calloc(cap, sizeof(double));
    if (!w->X || !w->y || !w->feat || !w->tgt) {
        eerl__pred_work_free(w);
        return EERL_ENOMEM;
    }
    w->cap = cap;
    return 0;
}

void eerl__pred_work_free(struct eerl__pred_work *w)
{
    if (!w)
        return;
    free(w->X);
    free(w->y);
    free(w->feat);
    free(w->tgt);
    memset(w, 0, sizeof(*w));
}

/* A raw token count as the model's form takes it: log(1 + x), or x itself (linear). */
static double fx(const struct eerl__model *m, double x)
{
    return m->linear ? x : log1p(x);
}

/* A target as the model's form fits it: log(y), or y itself. */
static double fy(const struct eerl__model *m, double y)
{
    return m->linear ? y : log(y);
}

/* Feature f of a row of raw token counts as the model sees it: standardized. */
static double zfeat(const struct eerl__model *m, const double *row, int f)
{
    return (fx(m, row[f]) - m->mean[f]) / m->sd[f];
}

/* The fitted column whose coefficient stands least out of the noise, if it is under min_t
 * standard errors (from the residual variance and the inverse of the normal matrix, intercept
 * included, at most EERL__F_COUNT + 1 columns): its index in cols, else -1 (also when the
 * statistics cannot be formed). */
static int weakest_column(const struct eerl__model *r, const int *cols, int nc, const double *x,
                          const double *y, size_t n, const double *beta, double min_t)
{
    double A[EERL__F_COUNT + 1][2 * (EERL__F_COUNT + 1)], z[EERL__F_COUNT + 1], rss = 0, s2;
    double t_min = INFINITY;
    int p = nc + 1, a, b, c, weakest = -1;
    size_t i;

    memset(A, 0, sizeof(A));
    for (i = 0; i < n; i++) {
        double fit = beta[0];

        z[0] = 1;
        for (c = 0; c < nc; c++) {
            int f = cols[c];
            z[c + 1] = zfeat(r, x + i * EERL__F_COUNT, f);
            fit += beta[c + 1] * z[c + 1];
        }
        rss += (fy(r, y[i]) - fit) * (fy(r, y[i]) - fit);
        for (a = 0; a < p; a++)
            for (b = 0; b < p; b++)
                A[a][b] += z[a] * z[b];
    }
    s2 = rss / (double)(n - (size_t)p);
    for (a = 0; a < p; a++)
        A[a][p + a] = 1;
    for (c = 0; c < p; c++) { /* Gauss-Jordan: the normal matrix is positive definite */
        double piv = A[c][c];

        if (!(piv > 1e-12))
            return -1;
        for (b = 0; b < 2 * p; b++)
            A[c][b] /= piv;
        for (a = 0; a < p; a++) {
            double k = A[a][c];

            if (a == c)
                continue;
            for (b = 0; b < 2 * p; b++)
                A[a][b] -= k * A[c][b];
        }
    }
    for (c = 0; c < nc; c++) {
        double t = fabs(beta[c + 1]) / sqrt(s2 * A[c + 1][p + c + 1]);

        if (t < t_min) {
            t_min = t;
            weakest = c;
        }
    }
    return t_min < min_t ? weakest : -1;
}

int eerl__model_fit(struct eerl__model *m, unsigned want, const double *x, const double *y,
                    size_t n, struct eerl__pred_work *w)
{
    return eerl__model_fit_form(m, want, x, y, n, w, 0.0, 0);
}

int eerl__model_fit_form(struct eerl__model *m, unsigned want, const double *x, const double *y,
                         size_t n, struct eerl__pred_work *w, double min_t, int linear)
{
    struct eerl__model r;
    int f, cols[EERL__F_COUNT], nc = 0, c, weak, pinned = 0;
    double beta[EERL__F_COUNT + 1];
    unsigned rank;
    size_t i;
    int err;

    if (n == 0 || n > w->cap)
        return EERL_EINVAL;
    for (i = 0; i < n; i++)
        if (!(y[i] > 0) || !isfinite(y[i]))
            return EERL_EINVAL;
    memset(&r, 0, sizeof(r));
    r.want = want;
    r.linear = linear != 0;
    if (r.linear) {
        r.floor = y[0];
        for (i = 1; i < n; i++)
            r.floor = fmin(r.floor, y[i]);
        r.floor *= 0.5;
    }
    for (f = 0; f < EERL__F_COUNT; f++) {
        double mean = 0, var = 0;

        if (!(want & (1u << f)))
            continue;
        for (i = 0; i < n; i++)
            mean += fx(&r, x[i * EERL__F_COUNT + f]);
        mean /= (double)n;
        for (i = 0; i < n; i++) {
            double d = fx(&r, x[i * EERL__F_COUNT + f]) - mean;
            var += d * d;
        }
        var /= (double)n;
        r.mean[f] = mean;
        r.sd[f] = sqrt(var);
        /* A feature that does not vary carries no information about the target. */
        if (!(r.sd[f] > SD_RTOL * (1.0 + fabs(mean)))) {
            pinned = 1;
            continue;
        }
        cols[nc++] = f;
    }
    for (;;) {
        for (i = 0; i < n; i++) {
            w->X[i] = 1.0;
            w->y[i] = fy(&r, y[i]);
            for (c = 0; c < nc; c++) {
                f = cols[c];
                w->X[(size_t)(c + 1) * n + i] = zfeat(&r, x + i * EERL__F_COUNT, f);
            }
        }
        err = eerl__lsq_solve(w->X, n, (size_t)nc + 1, w->y, LSQ_RTOL, beta, &rank);
        if (err < 0)
            return err;
        /* With min_t, in a model with a pinned count: drop the count whose coefficient stands
         * least out of the noise, one at a time (near-collinear counts are each weak beside the
         * other and strong alone), and refit; needs every column kept by the solver and a
         * residual degree of freedom. */
        if (!(min_t > 0) || !pinned || nc == 0 || rank != (unsigned)nc + 1 || n <= (size_t)nc + 1)
            break;
        weak = weakest_column(&r, cols, nc, x, y, n, beta, min_t);
        if (weak < 0)
            break;
        for (c = weak; c + 1 < nc; c++)
            cols[c] = cols[c + 1];
        nc--;
    }
    r.b0 = beta[0];
    for (c = 0; c < nc; c++) {
        f = cols[c];
        r.beta[f] = beta[c + 1];
        if (beta[c + 1] != 0)
            r.used |= 1u << f;
    }
    r.fitted = 1;
    *m = r;
    return 0;
}

double eerl__model_predict(const struct eerl__model *m, const double *x)
{
    double s = m->b0;
    int f;

    for (f = 0; f < EERL__F_COUNT; f++)
        if (m->used & (1u << f))
            s += m->beta[f] * zfeat(m, x, f);
    return m->linear ? fmax(s, m->floor) : exp(s);
}

void eerl__obs_parts(int layout, const eerl_obs *o, struct eerl__parts *out)
{
    const double *pt = o->phase_time_s, *pe = o->phase_energy_j;
    struct eerl__parts r;

    memset(&r, 0, sizeof(r));
    r.t = o->time_s;
    r.e = o->energy_j;
    if (layout == EERL__LAYOUT_SEQ) {
        r.t_gen = pt[EERL_PHASE_GEN];
        r.t_train = pt[EERL_PHASE_LOGPROB] + pt[EERL_PHASE_TRAIN];
        r.t_rest = r.t - r.t_gen - r.t_train;
    } else {
        if (o->flags & EERL_OBS_ARRIVALS) {
            r.t_gen = o->arrival_s[EERL_POOL_GEN];
            r.t_train = o->arrival_s[EERL_POOL_TRAIN];
        } else {
            r.t_gen = pt[EERL_PHASE_GEN];
            r.t_train = pt[EERL_PHASE_LOGPROB] + pt[EERL_PHASE_TRAIN];
        }
        r.t_rest = r.t - (r.t_gen > r.t_train ? r.t_gen : r.t_train);
    }
    if (layout != EERL__LAYOUT_SEQ && (o->flags & EERL_OBS_POOL_ENERGY)) {
        r.e_gen = o->pool_energy_j[EERL_POOL_GEN];
        r.e_train = o->pool_energy_j[EERL_POOL_TRAIN];
    } else {
        r.e_gen = pe[EERL_PHASE_GEN];
        r.e_train = pe[EERL_PHASE_LOGPROB] + pe[EERL_PHASE_TRAIN];
    }
    r.e_rest = r.e - r.e_gen - r.e_train;
    if (r.t_rest < 0)
        r.t_rest = 0;
    if (r.e_rest < 0)
        r.e_rest = 0;
    *out = r;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double eerl__median(double *v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double part_of(const struct eerl__parts *x, enum eerl__part part)
{
    switch (part) {
    case EERL__PART_E:
        return x->e;
    case EERL__PART_T_GEN:
        return x->t_gen;
    case EERL__PART_T_TRAIN:
        return x->t_train;
    case EERL__PART_E_GEN:
        return x->e_gen;
    case EERL__PART_E_TRAIN:
        return x->e_train;
    default:
        return x->t;
    }
}

double eerl__pred_error_sd(const struct eerl__pred *p, const eerl_obs *const *obs, size_t n,
                           enum eerl__part part, double *scratch)
{
    struct eerl__parts m, q;
    double mid, pred;
    size_t i;

    if (n < 2)
        return 0;
    for (i = 0; i < n; i++) {
        eerl__obs_parts(p->layout, obs[i], &m);
        eerl__pred_predict(p, obs[i], &q);
        pred = part_of(&q, part);
        scratch[i] = pred > 0 ? part_of(&m, part) / pred - 1 : 0;
    }
    mid = eerl__median(scratch, n);
    for (i = 0; i < n; i++)
        scratch[i] = fabs(scratch[i] - mid);
    return 1.4826 * eerl__median(scratch, n);
}

static void features(const eerl_obs *o, double *x)
{
    x[EERL__F_G] = o->gen_tokens;
    x[EERL__F_N] = o->valid_tokens;
    x[EERL__F_L] = o->longest_tokens;
}

#define FB(f) (1u << (f))

int eerl__pred_fit(struct eerl__pred *p, int layout, const eerl_obs *const *obs, size_t n,
                   struct eerl__pred_work *w)
{
    return eerl__pred_fit_opts(p, layout, obs, n, w, 0.0, 0);
}

int eerl__pred_fit_opts(struct eerl__pred *p, int layout, const eerl_obs *const *obs, size_t n,
                        struct eerl__pred_work *w, double min_t, unsigned opts)
{
    int lin_train = (opts & (EERL__PRED_LINEAR_TRAIN | EERL__PRED_LINEAR_ALL)) != 0;
    int lin_all = (opts & EERL__PRED_LINEAR_ALL) != 0;
    unsigned whole =
        FB(EERL__F_N) | FB(EERL__F_L) | (opts & EERL__PRED_WHOLE_G ? FB(EERL__F_G) : 0);
    struct eerl__pred r;
    struct eerl__parts parts;
    size_t i;
    int f, err;

    if (n == 0 || n > w->cap || !obs)
        return EERL_EINVAL;
    memset(&r, 0, sizeof(r));
    r.layout = layout;
    for (i = 0; i < n; i++)
        features(obs[i], w->feat + i * EERL__F_COUNT);
    for (f = 0; f < EERL__F_COUNT; f++) {
        r.lo[f] = INFINITY;
        r.hi[f] = -INFINITY;
        for (i = 0; i < n; i++) {
            double v = w->feat[i * EERL__F_COUNT + f];
            if (v < r.lo[f])
                r.lo[f] = v;
            if (v > r.hi[f])
                r.hi[f] = v;
        }
    }
#define FIT(model, want, expr, lin)                                                                \
    do {                                                                                           \
        for (i = 0; i < n; i++) {                                                                  \
            eerl__obs_parts(layout, obs[i], &parts);                                               \
            w->tgt[i] = (expr);                                                                    \
        }                                                                                          \
        err = eerl__model_fit_form(&r.model, (want), w->feat, w->tgt, n, w, min_t, (lin));         \
        if (err < 0)                                                                               \
            return err;                                                                            \
    } while (0)
    if (layout == EERL__LAYOUT_WHOLE) {
        FIT(t_whole, whole, parts.t, lin_all);
        FIT(e_whole, whole, parts.e, lin_all);
    } else {
        FIT(t_gen, FB(EERL__F_G) | FB(EERL__F_L), parts.t_gen, lin_all);
        FIT(t_train, FB(EERL__F_N), parts.t_train, lin_train);
        FIT(e_gen, FB(EERL__F_G) | FB(EERL__F_L), parts.e_gen, lin_all);
        FIT(e_train, FB(EERL__F_N), parts.e_train, lin_train);
        /* The remainders: what the phase models leave of each measured update. */
        for (i = 0; i < n; i++) {
            eerl__obs_parts(layout, obs[i], &parts);
            w->tgt[i] = parts.t_rest;
        }
        r.rest_t = eerl__median(w->tgt, n);
        for (i = 0; i < n; i++) {
            eerl__obs_parts(layout, obs[i], &parts);
            w->tgt[i] = parts.e_rest;
        }
        r.rest_e = eerl__median(w->tgt, n);
    }
#undef FIT
    r.n = (unsigned)n;
    r.ready = 1;
    *p = r;
    return 0;
}

void eerl__pred_predict(const struct eerl__pred *p, const eerl_obs *o, struct eerl__parts *out)
{
    double x[EERL__F_COUNT];
    struct eerl__parts r;

    memset(&r, 0, sizeof(r));
    features(o, x);
    if (p->layout == EERL__LAYOUT_WHOLE) {
        r.t = eerl__model_predict(&p->t_whole, x);
        r.e = eerl__model_predict(&p->e_whole, x);
        *out = r;
        return;
    }
    r.t_gen = eerl__model_predict(&p->t_gen, x);
    r.t_train = eerl__model_predict(&p->t_train, x);
    r.e_gen = eerl__model_predict(&p->e_gen, x);
    r.e_train = eerl__model_predict(&p->e_train, x);
    r.t_rest = p->rest_t;
    r.e_rest = p->rest_e;
    if (p->layout == EERL__LAYOUT_SEQ)
        r.t = r.t_gen + r.t_train + r.t_rest;
    else
        r.t = (r.t_gen > r.t_train ? r.t_gen : r.t_train) + r.t_rest;
    r.e = r.e_gen + r.e_train + r.e_rest;
    *out = r;
}

int eerl__pred_covered(const struct eerl__pred *p, const eerl_obs *o, double margin)
{
    double x[EERL__F_COUNT];
    unsigned want = p->layout == EERL__LAYOUT_WHOLE
                        ? (FB(EERL__F_N) | FB(EERL__F_L))
                        : (FB(EERL__F_G) | FB(EERL__F_N) | FB(EERL__F_L));
    int f;

    if (!p->ready)
        return 0;
    features(o, x);
    for (f = 0; f < EERL__F_COUNT; f++) {
        if (!(want & FB(f)))
            continue;
        if (x[f] < p->lo[f] / (1.0 + margin) || x[f] > p->hi[f] * (1.0 + margin))
            return 0;
    }
    return 1;
}

int eerl_predictor_forward_test(eerl_mode mode, const eerl_obs *obs, size_t n, unsigned k,
                                unsigned m, eerl_forward_result *ret_result)
{
    struct eerl__pred_work w;
    struct eerl__pred pred;
    const eerl_obs **ptr = NULL;
    double *err_tm = NULL, *err_tc = NULL, *err_em = NULL, *err_ec = NULL;
    eerl_forward_result res;
    size_t start, nb = 0, i;
    int layout, err;

    if (!obs || !ret_result || (unsigned)mode >= EERL_MODE_COUNT || k < 2 || m < 1 ||
        n < (size_t)k + m)
        return EERL_EINVAL;
    for (i = 0; i < n; i++)
        if (eerl_obs_check(mode, &obs[i], 0.05, NULL, 0) < 0)
            return EERL_EINVAL;
    layout = eerl__layout_of(mode);
    err = eerl__pred_work_init(&w, k);
    if (err < 0)
        return err;
    err = EERL_ENOMEM;
    ptr = calloc(k, sizeof(*ptr));
    err_tm = calloc(n / m + 1, sizeof(double));
    err_tc = calloc(n / m + 1, sizeof(double));
    err_em = calloc(n / m + 1, sizeof(double));
    err_ec = calloc(n / m + 1, sizeof(double));
    if (!ptr || !err_tm || !err_tc || !err_em || !err_ec)
        goto fail;
    for (start = k; start + m <= n; start += m) {
        double pt = 0, pe = 0, at = 0, ae = 0, an = 0, ct = 0, ce = 0, cn = 0;
        struct eerl__parts pp;

        for (i = 0; i < k; i++) {
            ptr[i] = &obs[start - k + i];
            ct += ptr[i]->time_s;
            ce += ptr[i]->energy_j;
            cn += ptr[i]->valid_tokens;
        }
        err = eerl__pred_fit(&pred, layout, ptr, k, &w);
        if (err < 0)
            goto fail;
        for (i = start; i < start + m; i++) {
            eerl__pred_predict(&pred, &obs[i], &pp);
            pt += pp.t;
            pe += pp.e;
            at += obs[i].time_s;
            ae += obs[i].energy_j;
            an += obs[i].valid_tokens;
        }
        /* Same tokens in prediction and truth: throughput error is a time ratio, energy per
         * token error an energy ratio. The constant reference assumes the past rates. */
        err_tm[nb] = 100.0 * fabs(at / pt - 1.0);
        err_em[nb] = 100.0 * fabs(pe / ae - 1.0);
        err_tc[nb] = 100.0 * fabs((cn / ct) / (an / at) - 1.0);
        err_ec[nb] = 100.0 * fabs((ce / cn) / (ae / an) - 1.0);
        nb++;
    }
    res.blocks = (unsigned)nb;
    res.tput_err_model_pct = eerl__median(err_tm, nb);
    res.tput_err_constant_pct = eerl__median(err_tc, nb);
    res.energy_err_model_pct = eerl__median(err_em, nb);
    res.energy_err_constant_pct = eerl__median(err_ec, nb);
    *ret_result = res;
    err = 0;
fail:
    free(ptr);
    free(err_tm);
    free(err_tc);
    free(err_em);
    free(err_ec);
    eerl__pred_work_free(&w);
    return err;
}

/* Owns the run's own estimate of what eerl saved: the forward governor prediction per update and
 * the run totals with their interval (estimate.h states the rule and the interval's model). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eerl/error.h"
#include "core/estimate.h"

/* The fit's form: the eerl strategies' (min_t, linear training part). */
#define FIT_MIN_T EERL__PRED_MIN_T
#define FIT_OPTS EERL__PRED_LINEAR_TRAIN
#define RHO_MAX 0.9
#define OUTLIER_SD 5.0

/* ---- the aggregator ---------------------------------------------------------------------- */

void eerl__est_acc_init(struct eerl__est_acc *a)
{
    memset(a, 0, sizeof(*a));
}

void eerl__est_acc_add(struct eerl__est_acc *a, const struct eerl__est_upd *u)
{
    if (u->kind != EERL__EST_CALIB && u->kind != EERL__EST_PRED) {
        a->skipped++;
        return;
    }
    a->n++;
    a->t += u->t;
    a->e += u->e;
    if (u->kind == EERL__EST_CALIB) {
        a->calib++;
        a->pt += u->t;
        a->pe += u->e;
        return;
    }
    a->judged++;
    a->pt += u->pt;
    a->pe += u->pe;
    a->var_t += u->pt * u->sd_t * u->pt * u->sd_t * (1 + u->rho_t) / (1 - u->rho_t);
    a->var_e += u->pe * u->sd_e * u->pe * u->sd_e * (1 + u->rho_e) / (1 - u->rho_e);
    a->com_t += u->pt * u->com_t;
    a->com_e += u->pe * u->com_e;
    if (a->df == 0 || (u->df > 0 && u->df < a->df))
        a->df = u->df;
}

void eerl__est_acc_unexplained(struct eerl__est_acc *a, const char *why)
{
    a->unexplained = 1;
    snprintf(a->why, sizeof(a->why), "%s", why ? why : "the work does not explain the time");
}

double eerl__est_t95(unsigned df)
{
    const double z = 1.6448536269514722;
    double v = df ? (double)df : 1.0, z3 = z * z * z, z5 = z3 * z * z;

    if (df == 1)
        return 6.313751514675043;
    if (df == 2)
        return 2.919985580353726;
    return z + (z3 + z) / (4 * v) + (5 * z5 + 16 * z3 + 3 * z) / (96 * v * v);
}

void eerl__est_acc_result(const struct eerl__est_acc *a, eerl_estimate *ret)
{
    eerl_estimate r;
    double q = eerl__est_t95(a->df), sd_e, sd_t;

    memset(&r, 0, sizeof(r));
    r.updates = a->n;
    r.judged_updates = a->judged;
    r.calibration_updates = a->calib;
    r.not_counted = a->skipped;
    r.energy_j = a->e;
    r.time_s = a->t;
    r.predicted_governor_energy_j = a->pe;
    r.predicted_governor_time_s = a->pt;
    sd_e = sqrt(a->var_e + a->com_e * a->com_e);
    sd_t = sqrt(a->var_t + a->com_t * a->com_t);
    r.saved_j = a->pe - a->e;
    r.saved_ci_j[0] = r.saved_j - q * sd_e;
    r.saved_ci_j[1] = r.saved_j + q * sd_e;
    r.saving_pct = r.throughput_change_pct = NAN;
    r.saving_ci_pct[0] = r.saving_ci_pct[1] = r.throughput_ci_pct[0] = r.throughput_ci_pct[1] = NAN;
    if (a->pe > 0 && a->e > 0 && a->pt > 0 && a->t > 0) {
        double ds = 100.0 * q * (a->e / a->pe) * sd_e / a->pe, dq = 100.0 * q * sd_t / a->t;
        r.saving_pct = 100.0 * (1 - a->e / a->pe);
        r.saving_ci_pct[0] = r.saving_pct - ds;
        r.saving_ci_pct[1] = r.saving_pct + ds;
        r.throughput_change_pct = 100.0 * (a->pt / a->t - 1);
        r.throughput_ci_pct[0] = r.throughput_change_pct - dq;
        r.throughput_ci_pct[1] = r.throughput_change_pct + dq;
    }
    r.judged = a->judged > 0 && !a->unexplained;
    if (a->unexplained)
        snprintf(r.why, sizeof(r.why), "%s", a->why);
    else if (a->judged == 0)
        snprintf(r.why, sizeof(r.why), "%s",
                 a->n ? "no update after the controller's calibration yet"
                      : "no update counted yet (the first is warm-up)");
    *ret = r;
}

/* ---- the forward predictor --------------------------------------------------------------- */

int eerl__est_init(struct eerl__est *s, eerl_mode mode)
{
    int e;

    memset(s, 0, sizeof(*s));
    s->layout = eerl__layout_of(mode);
    s->ring = calloc(EERL__EST_WINDOW, sizeof(*s->ring));
    s->ptrs = calloc(EERL__EST_WINDOW, sizeof(*s->ptrs));
    s->scratch = calloc(2 * EERL__EST_WINDOW, sizeof(double));
    if (!s->ring || !s->ptrs || !s->scratch) {
        eerl__est_free(s);
        return EERL_ENOMEM;
    }
    e = eerl__pred_work_init(&s->work, EERL__EST_WINDOW);
    if (e == 0)
        e = eerl__pred_work_init(&s->loo, EERL__EST_WINDOW);
    if (e < 0)
        eerl__est_free(s);
    return e;
}

void eerl__est_free(struct eerl__est *s)
{
    if (!s)
        return;
    eerl__pred_work_free(&s->work);
    eerl__pred_work_free(&s->loo);
    free(s->ring);
    free(s->ptrs);
    free(s->scratch);
    memset(s, 0, sizeof(*s));
}

static unsigned popcount(unsigned v)
{
    unsigned c = 0;

    for (; v; v >>= 1)
        c += v & 1u;
    return c;
}

/* Parameters of the fit's largest time model (intercept included). */
static unsigned fit_params(const struct eerl__pred *p)
{
    unsigned a = popcount(p->t_whole.used), b = popcount(p->t_gen.used);
    unsigned c = popcount(p->t_train.used);

    a = a > b ? a : b;
    return 1 + (a > c ? a : c);
}

/* 1.4826 x the median absolute value of v[0..n-1] (v is reordered). */
static double robust_sd(double *v, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++)
        v[i] = fabs(v[i]);
    return 1.4826 * eerl__median(v, n);
}

/* Lag-1 autocorrelation of v[0..n-1] in order, within [0, RHO_MAX]. */
static double lag1(const double *v, size_t n)
{
    double m = 0, num = 0, den = 0, r;
    size_t i;

    if (n < 3)
        return 0;
    for (i = 0; i < n; i++)
        m += v[i] / (double)n;
    for (i = 0; i < n; i++) {
        den += (v[i] - m) * (v[i] - m);
        if (i + 1 < n)
            num += (v[i] - m) * (v[i + 1] - m);
    }
    r = den > 0 ? num / den : 0;
    return r < 0 ? 0 : (r > RHO_MAX ? RHO_MAX : r);
}

/* The leave-one-out errors over the n updates of p (measured / predicted from the others - 1),
 * time into et, energy into ee, NaN where a fold does not fit. */
static void loo_errors(struct eerl__est *s, const eerl_obs **p, size_t n, double *et, double *ee)
{
    const eerl_obs *others[EERL__EST_WINDOW];
    struct eerl__pred f;
    struct eerl__parts q;
    size_t i, j, k;

    for (i = 0; i < n; i++) {
        for (j = 0, k = 0; j < n; j++)
            if (j != i)
                others[k++] = p[j];
        et[i] = ee[i] = NAN;
        if (eerl__pred_fit_opts(&f, s->layout, others, k, &s->loo, FIT_MIN_T, FIT_OPTS) < 0)
            continue;
        eerl__pred_predict(&f, p[i], &q);
        if (!(q.t > 0 && q.e > 0))
            continue;
        et[i] = p[i]->time_s / q.t - 1;
        ee[i] = p[i]->energy_j / q.e - 1;
    }
}

/* The finite values of v[0..n-1] into out, in order; how many. */
static size_t finite_of(const double *v, size_t n, double *out)
{
    size_t i, m = 0;

    for (i = 0; i < n; i++)
        if (isfinite(v[i]))
            out[m++] = v[i];
    return m;
}

/* The scatter of the errors et, ee (n, NaN for no fold) into s; 0, or -1 with too few folds. */
static int scatter(struct eerl__est *s, const double *et, const double *ee, size_t n)
{
    double a[EERL__EST_WINDOW], b[EERL__EST_WINDOW];
    size_t m = finite_of(et, n, a);

    if (m < 3 || finite_of(ee, n, b) != m)
        return -1;
    s->rho_t = lag1(a, m);
    s->rho_e = lag1(b, m);
    s->sd_t = robust_sd(a, m);
    s->sd_e = robust_sd(b, m);
    return 0;
}

/* The ring's updates the fit keeps into kept: all but those the others predict more than
 * OUTLIER_SD robust standard deviations off (a start-up update of a pipeline still filling, a
 * stalled one), which would pull a least-squares fit by their whole error. Returns how many. */
static size_t keep_updates(struct eerl__est *s, const double *et, const double *ee,
                           const eerl_obs **kept)
{
    size_t i, m = 0;

    for (i = 0; i < s->n; i++)
        if (!(fabs(et[i]) > OUTLIER_SD * s->sd_t) && !(fabs(ee[i]) > OUTLIER_SD * s->sd_e))
            kept[m++] = s->ptrs[i];
    return m;
}

/* Refits on the ring and measures the scatter the interval takes. */
static void refit(struct eerl__est *s)
{
    double *et = s->scratch, *ee = s->scratch + EERL__EST_WINDOW, f;
    const eerl_obs *kept[EERL__EST_WINDOW];
    size_t n, p;

    if (s->n < EERL__EST_MIN_FIT)
        return;
    loo_errors(s, s->ptrs, s->n, et, ee);
    if (scatter(s, et, ee, s->n) < 0)
        return;
    n = keep_updates(s, et, ee, kept);
    if (n < EERL__EST_MIN_FIT)
        return;
    if (n < s->n) {
        loo_errors(s, kept, n, et, ee);
        if (scatter(s, et, ee, n) < 0)
            return;
    }
    if (eerl__pred_fit_opts(&s->pred, s->layout, kept, n, &s->work, FIT_MIN_T, FIT_OPTS) < 0)
        return;
    p = fit_params(&s->pred);
    f = sqrt((double)p / (double)n);
    s->com_t = s->sd_t * f;
    s->com_e = s->sd_e * f;
    s->df = n > p ? (unsigned)(n - p) : 1;
}

static void ring_add(struct eerl__est *s, const eerl_obs *o)
{
    size_t i;

    if (s->n < EERL__EST_WINDOW) {
        s->ring[(s->head + s->n) % EERL__EST_WINDOW] = *o;
        s->n++;
    } else {
        s->ring[s->head] = *o;
        s->head = (s->head + 1) % EERL__EST_WINDOW;
    }
    for (i = 0; i < s->n; i++)
        s->ptrs[i] = &s->ring[(s->head + i) % EERL__EST_WINDOW];
}

/* The prediction for o from the fit on the updates before it. */
static int predict(const struct eerl__est *s, const eerl_obs *o, struct eerl__est_upd *u)
{
    struct eerl__parts q;

    if (!s->pred.ready || s->df == 0)
        return 0;
    eerl__pred_predict(&s->pred, o, &q);
    if (!(q.t > 0 && q.e > 0 && isfinite(q.t) && isfinite(q.e)))
        return 0;
    u->kind = EERL__EST_PRED;
    u->pt = q.t;
    u->pe = q.e;
    u->sd_t = s->sd_t;
    u->sd_e = s->sd_e;
    u->rho_t = s->rho_t;
    u->rho_e = s->rho_e;
    u->com_t = s->com_t;
    u->com_e = s->com_e;
    u->df = s->df;
    return 1;
}

void eerl__est_step(struct eerl__est *s, const eerl_obs *o, int accepted, int calibrated,
                    struct eerl__est_upd *ret)
{
    struct eerl__est_upd u;
    int gov = eerl_setting_is_governor(&o->setting);

    memset(&u, 0, sizeof(u));
    u.t = o->time_s;
    u.e = o->energy_j;
    u.kind = EERL__EST_SKIP;
    if (accepted && o->update >= EERL__EST_FIRST) {
        if (!s->calibrated) {
            if (gov) {
                u.kind = EERL__EST_CALIB;
                u.pt = u.t;
                u.pe = u.e;
            }
        } else {
            (void)predict(s, o, &u);
        }
        if (gov) {
            ring_add(s, o);
            if (s->calibrated || calibrated)
                refit(s);
        }
    }
    if (calibrated)
        s->calibrated = 1;
    *ret = u;
}

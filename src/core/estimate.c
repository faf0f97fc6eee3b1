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
#define FIT_OPTS (EERL__PRED_LINEAR_TRAIN | EERL__PRED_LINEAR_ALL)
/* The other form, fitted on the same updates: where the two part, the work lies where the
 * updates fitted do not say which is right (docs/runtime.md, "How sure"). */
#define ALT_OPTS EERL__PRED_LINEAR_TRAIN
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
    a->pe_pred += u->pe;
    if (u->out > EERL__EST_FAR) {
        a->far++;
        a->far_pe += u->pe;
    }
    if (u->out > a->out_max)
        a->out_max = u->out;
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

/* Whether updates far outside the fit's range carry too much of the predicted energy. */
static int too_far(const struct eerl__est_acc *a)
{
    return a->far > 0 && a->far_pe > EERL__EST_FAR_SHARE * a->pe_pred;
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
    r.judged = a->judged > 0 && !a->unexplained && !too_far(a);
    if (a->unexplained)
        snprintf(r.why, sizeof(r.why), "%s", a->why);
    else if (too_far(a))
        snprintf(r.why, sizeof(r.why),
                 "the work left the range the governor was measured on: %u of %u updates ran more "
                 "than %.0f%% outside its token counts (up to %.0f%%); the interval is wide",
                 a->far, a->judged, 100 * (exp(EERL__EST_FAR) - 1), 100 * (exp(a->out_max) - 1));
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
    s->lag = mode == EERL_MODE_DRAINED || mode == EERL_MODE_INFLIGHT;
    s->opts = FIT_OPTS | (s->lag ? EERL__PRED_WHOLE_G : 0);
    s->first_fit = EERL__EST_FIRST + (mode == EERL_MODE_INFLIGHT);
    s->gen_level = mode == EERL_MODE_DRAINED;
    s->ring = calloc(EERL__EST_WINDOW, sizeof(*s->ring));
    s->ptrs = calloc(EERL__EST_WINDOW, sizeof(*s->ptrs));
    s->scratch = calloc(2 * EERL__EST_WINDOW, sizeof(double));
    if (s->gen_level) {
        s->gfeat = calloc(EERL__EST_GEN_WINDOW, sizeof(*s->gfeat));
        s->gt = calloc(EERL__EST_GEN_WINDOW, sizeof(*s->gt));
        s->gupd = calloc(EERL__EST_GEN_WINDOW, sizeof(*s->gupd));
    }
    if (!s->ring || !s->ptrs || !s->scratch ||
        (s->gen_level && (!s->gfeat || !s->gt || !s->gupd))) {
        eerl__est_free(s);
        return EERL_ENOMEM;
    }
    e = eerl__pred_work_init(&s->work, EERL__EST_WINDOW);
    if (e == 0)
        e = eerl__pred_work_init(&s->loo, EERL__EST_WINDOW);
    if (e == 0 && s->gen_level)
        e = eerl__pred_work_init(&s->gwork, EERL__EST_GEN_WINDOW);
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
    eerl__pred_work_free(&s->gwork);
    free(s->gfeat);
    free(s->gt);
    free(s->gupd);
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
 * time into et, energy into ee, NaN where a fold does not fit; min_t the fits' (predictor.h). */
static void loo_errors(struct eerl__est *s, const eerl_obs **p, size_t n, double min_t, double *et,
                       double *ee)
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
        if (eerl__pred_fit_opts(&f, s->layout, others, k, &s->loo, min_t, s->opts) < 0)
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

/* ---- the prediction's own variance ------------------------------------------------------- */

static void features_of(const eerl_obs *o, double *x)
{
    x[EERL__F_G] = o->gen_tokens;
    x[EERL__F_N] = o->valid_tokens;
    x[EERL__F_L] = o->longest_tokens;
}

/* o's standardized features as l takes them, in l's column order; how many. */
static int lev_z(const struct eerl__est_lev *l, const eerl_obs *o, double *z)
{
    double x[EERL__F_COUNT];
    int f, k = 0;

    features_of(o, x);
    for (f = 0; f < EERL__F_COUNT; f++)
        if (l->used & (1u << f)) {
            double v = l->linear ? x[f] : log1p(x[f]);
            z[k++] = (v - l->mean[f]) / l->sd[f];
        }
    return k;
}

/* Inverts the k x k matrix a into l->rinv (Gauss-Jordan); -1 when it is singular. */
static int invert(double a[EERL__F_COUNT][EERL__F_COUNT], int k, struct eerl__est_lev *l)
{
    double m[EERL__F_COUNT][2 * EERL__F_COUNT];
    int i, j, c;

    for (i = 0; i < k; i++)
        for (j = 0; j < 2 * k; j++)
            m[i][j] = j < k ? a[i][j] : (j - k == i);
    for (c = 0; c < k; c++) {
        double piv = m[c][c];

        if (!(fabs(piv) > 1e-9))
            return -1;
        for (j = 0; j < 2 * k; j++)
            m[c][j] /= piv;
        for (i = 0; i < k; i++) {
            double f = m[i][c];

            if (i == c)
                continue;
            for (j = 0; j < 2 * k; j++)
                m[i][j] -= f * m[c][j];
        }
    }
    for (i = 0; i < k; i++)
        for (j = 0; j < k; j++)
            l->rinv[i][j] = m[i][k + j];
    return 0;
}

/* What model m, fitted on the n updates kept, needs for the leverage of a new point. */
static void lev_fit(struct eerl__est_lev *l, const struct eerl__model *m, const eerl_obs **kept,
                    size_t n)
{
    double r[EERL__F_COUNT][EERL__F_COUNT], z[EERL__F_COUNT];
    size_t i;
    int a, b, k = 0;

    memset(l, 0, sizeof(*l));
    if (!m->fitted || n == 0)
        return;
    l->used = m->used;
    l->linear = m->linear;
    memcpy(l->mean, m->mean, sizeof(l->mean));
    memcpy(l->sd, m->sd, sizeof(l->sd));
    l->n = (double)n;
    memset(r, 0, sizeof(r));
    for (i = 0; i < n; i++) {
        k = lev_z(l, kept[i], z);
        for (a = 0; a < k; a++)
            for (b = 0; b < k; b++)
                r[a][b] += z[a] * z[b] / (double)n;
    }
    if (k > 0 && invert(r, k, l) < 0)
        for (a = 0; a < k; a++)
            for (b = 0; b < k; b++)
                l->rinv[a][b] = a == b;
}

/* The leverage of o in l's fit: its prediction's variance over one update's (0 with no fit). */
static double lev_at(const struct eerl__est_lev *l, const eerl_obs *o)
{
    double z[EERL__F_COUNT], q = 0;
    int a, b, k;

    if (!(l->n > 0))
        return 0;
    k = lev_z(l, o, z);
    for (a = 0; a < k; a++)
        for (b = 0; b < k; b++)
            q += z[a] * l->rinv[a][b] * z[b];
    return (1 + q) / l->n;
}

static void lev_models(struct eerl__est *s, const eerl_obs **kept, size_t n)
{
    const struct eerl__pred *p = &s->pred;
    int whole = s->layout == EERL__LAYOUT_WHOLE;
    struct eerl__model none;

    memset(&none, 0, sizeof(none));
    lev_fit(&s->lev[0], whole ? &p->t_whole : &p->t_gen, kept, n);
    lev_fit(&s->lev[1], whole ? &none : &p->t_train, kept, n);
    lev_fit(&s->lev[2], whole ? &p->e_whole : &p->e_gen, kept, n);
    lev_fit(&s->lev[3], whole ? &none : &p->e_train, kept, n);
}

/* How far o's token counts lie outside the fit's: the largest log ratio, 0 inside. */
static double outside(const struct eerl__est *s, const eerl_obs *o)
{
    double x[EERL__F_COUNT], d = 0;
    int f;

    features_of(o, x);
    for (f = 0; f < EERL__F_COUNT; f++) {
        if (s->layout == EERL__LAYOUT_WHOLE && f == EERL__F_G && !(s->opts & EERL__PRED_WHOLE_G))
            continue;
        if (x[f] > s->pred.hi[f] && s->pred.hi[f] > 0)
            d = fmax(d, log(x[f] / s->pred.hi[f]));
        if (x[f] < s->pred.lo[f] && x[f] > 0)
            d = fmax(d, log(s->pred.lo[f] / x[f]));
    }
    return d;
}

/* ---- the generation pool at the governor (drained) --------------------------------------- */

/* In drained mode an update's time is the later of the two pools' arrivals at the rendezvous
 * plus what follows it (predictor.c, eerl__obs_parts; the twin's lay_async), and the generation
 * pool's arrival depends only on its own clock and work: it has GPUs of its own (the twin; verl's
 * one_step_off_policy and the other drained recipes alike).
 * A pair that leaves generation to the governor (most of a drained run: the controller slows
 * the training pool) therefore measures the governor's generation time as a governor update
 * does. The generation time model is fitted on all of them, not only on the few whole governor
 * updates: its level, which every later prediction inherits, is then known from many updates
 * instead of the calibration's. The leverage (the coefficients' share of the interval) stays
 * that of the governor updates' fit: conservative. */

/* Whether update o's generation pool ran at the governor's clock, with its arrival measured. */
static int gen_at_governor(const struct eerl__est *s, const eerl_obs *o)
{
    return s->gen_level && (o->flags & EERL_OBS_ARRIVALS) &&
           o->setting.mhz[EERL_GROUP_GEN] == EERL_CLOCK_GOVERNOR && o->arrival_s[EERL_POOL_GEN] > 0;
}

static void gen_add(struct eerl__est *s, const eerl_obs *o)
{
    size_t i = (s->ghead + s->gn) % EERL__EST_GEN_WINDOW;

    if (s->gn == EERL__EST_GEN_WINDOW)
        s->ghead = (s->ghead + 1) % EERL__EST_GEN_WINDOW;
    else
        s->gn++;
    features_of(o, s->gfeat[i]);
    s->gt[i] = o->arrival_s[EERL_POOL_GEN];
    s->gupd[i] = o->update;
}

/* Whether generation update i (oldest first) lies in the span of the governor updates fitted:
 * the generation level comes from the same stretch of the run as the rest of the fit. */
static int gen_in_span(const struct eerl__est *s, size_t i)
{
    return s->n > 0 && s->gupd[(s->ghead + i) % EERL__EST_GEN_WINDOW] >= s->ptrs[0]->update;
}

/* Fits m (linear or the log form) on the generation updates in the span and kept (keep[i],
 * NULL: all). */
static int gen_fit_rows(struct eerl__est *s, struct eerl__model *m, int linear,
                        const unsigned char *keep)
{
    struct eerl__pred_work *w = &s->gwork;
    size_t i, k, n = 0;

    for (i = 0; i < s->gn; i++) {
        k = (s->ghead + i) % EERL__EST_GEN_WINDOW;
        if (!gen_in_span(s, i) || (keep && !keep[i]))
            continue;
        memcpy(w->feat + n * EERL__F_COUNT, s->gfeat[k], sizeof(s->gfeat[k]));
        w->tgt[n++] = s->gt[k];
    }
    if (n < EERL__EST_MIN_FIT)
        return -1;
    return eerl__model_fit_form(m, (1u << EERL__F_G) | (1u << EERL__F_L), w->feat, w->tgt, n, w,
                                FIT_MIN_T, linear);
}

/* Fits m on the generation updates, leaving out those OUTLIER_SD robust standard deviations off
 * a first fit (a stalled generation); m unchanged when too few. */
static void gen_fit(struct eerl__est *s, struct eerl__model *m, int linear)
{
    unsigned char keep[EERL__EST_GEN_WINDOW];
    double r[EERL__EST_GEN_WINDOW], a[EERL__EST_GEN_WINDOW], sd;
    struct eerl__model f;
    size_t i, k, m_in;

    if (gen_fit_rows(s, &f, linear, NULL) < 0)
        return;
    for (i = 0, m_in = 0; i < s->gn; i++) {
        double y;

        k = (s->ghead + i) % EERL__EST_GEN_WINDOW;
        y = eerl__model_predict(&f, s->gfeat[k]);
        r[i] = y > 0 ? s->gt[k] / y - 1 : NAN;
        if (gen_in_span(s, i) && isfinite(r[i]))
            a[m_in++] = r[i];
    }
    if (m_in < 3) {
        *m = f;
        return;
    }
    sd = robust_sd(a, m_in);
    for (i = 0; i < s->gn; i++)
        keep[i] = fabs(r[i]) <= OUTLIER_SD * sd;
    if (gen_fit_rows(s, &f, linear, keep) == 0)
        *m = f;
}

/* The fit's generation time models (and its form's other) from every generation update. */
static void gen_level(struct eerl__est *s)
{
    if (!s->gen_level || !s->pred.ready)
        return;
    gen_fit(s, &s->pred.t_gen, (FIT_OPTS & EERL__PRED_LINEAR_ALL) != 0);
    gen_fit(s, &s->alt.t_gen, (ALT_OPTS & EERL__PRED_LINEAR_ALL) != 0);
}

/* Refits on the ring and measures the scatter the interval takes. */
static void refit(struct eerl__est *s)
{
    double *et = s->scratch, *ee = s->scratch + EERL__EST_WINDOW;
    const eerl_obs *kept[EERL__EST_WINDOW];
    size_t n, p;

    if (s->n < EERL__EST_MIN_FIT)
        return;
    /* Far-off updates are found with every count kept (min_t 0): with min_t, one of them can
     * make the others' counts look weak, the folds' fits fall back to a constant, and the
     * scatter they leave hides the far-off update itself. */
    loo_errors(s, s->ptrs, s->n, 0.0, et, ee);
    if (scatter(s, et, ee, s->n) < 0)
        return;
    n = keep_updates(s, et, ee, kept);
    if (n < EERL__EST_MIN_FIT)
        return;
    loo_errors(s, kept, n, FIT_MIN_T, et, ee);
    if (scatter(s, et, ee, n) < 0)
        return;
    if (eerl__pred_fit_opts(&s->pred, s->layout, kept, n, &s->work, FIT_MIN_T, s->opts) < 0)
        return;
    if (eerl__pred_fit_opts(&s->alt, s->layout, kept, n, &s->work, FIT_MIN_T,
                            ALT_OPTS | (s->opts & EERL__PRED_WHOLE_G)) < 0)
        s->alt = s->pred;
    lev_models(s, kept, n);
    p = fit_params(&s->pred);
    s->df = n > p ? (unsigned)(n - p) : 1;
    gen_level(s);
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

/* Records governor update o's error against the fit before it (not a far-off one: a start-up or
 * stalled update says nothing of drift). */
static void fwd_add(struct eerl__est *s, const eerl_obs *o)
{
    struct eerl__parts q;
    double et, ee;

    if (!s->pred.ready || s->df == 0)
        return;
    eerl__pred_predict(&s->pred, o, &q);
    if (!(q.t > 0 && q.e > 0))
        return;
    et = o->time_s / q.t - 1;
    ee = o->energy_j / q.e - 1;
    if (!(fabs(et) <= OUTLIER_SD * s->sd_t) || !(fabs(ee) <= OUTLIER_SD * s->sd_e))
        return;
    memmove(s->fwd_t, s->fwd_t + 1, (EERL__EST_FWD - 1) * sizeof(double));
    memmove(s->fwd_e, s->fwd_e + 1, (EERL__EST_FWD - 1) * sizeof(double));
    s->fwd_t[EERL__EST_FWD - 1] = et;
    s->fwd_e[EERL__EST_FWD - 1] = ee;
    if (s->n_fwd < EERL__EST_FWD)
        s->n_fwd++;
}

/* The mean of the last forward errors v (the newest at the end) where it stands out of their
 * scatter sd (correlated rho) at 90%, else 0. */
static double drift(const struct eerl__est *s, const double *v, double sd, double rho)
{
    double m = 0, se;
    unsigned i, k = s->n_fwd;

    if (k < 4)
        return 0;
    for (i = EERL__EST_FWD - k; i < EERL__EST_FWD; i++)
        m += v[i] / (double)k;
    se = sd * sqrt((1 + rho) / (1 - rho) / (double)k);
    return fabs(m) > eerl__est_t95(s->df) * se ? fabs(m) : 0;
}

/* ---- counts the fit could not weigh ------------------------------------------------------ */

/* Whether count f is pinned in model m's window: wanted, and the same in every update fitted
 * (the longest response at the sequence limit), so the fit cannot tell its weight. */
static int pinned(const struct eerl__model *m, int f)
{
    return m->fitted && (m->want & (1u << f)) && !(m->sd[f] > 1e-6 * (1.0 + fabs(m->mean[f])));
}

/* How much of model m's prediction at o is at risk from its pinned counts: o's largest relative
 * distance from a pinned value, times the part of the prediction not proportional to the counts
 * the model uses (where a pinned count's weight hides: its value with those counts at 0, within
 * [0, the prediction]). Time per token does not fall as tokens grow, so a count that moved by
 * the factor r moves its share by at most |r - 1|. 0 when o's pinned counts are where they were. */
static double unweighed(const struct eerl__model *m, const eerl_obs *o)
{
    double x[EERL__F_COUNT], d = 0, y, y0;
    int f;

    features_of(o, x);
    for (f = 0; f < EERL__F_COUNT; f++)
        if (pinned(m, f) && m->mean[f] > 0 && x[f] > 0)
            d = fmax(d, fabs((m->linear ? x[f] : log1p(x[f])) / m->mean[f] - 1));
    if (!(d > 0))
        return 0;
    y = eerl__model_predict(m, x);
    if (!m->linear) /* the log form: no part proportional to the counts; all of it at risk */
        return d * y;
    y0 = m->b0;
    for (f = 0; f < EERL__F_COUNT; f++)
        if (m->used & (1u << f))
            y0 -= m->beta[f] * m->mean[f] / m->sd[f];
    return d * fmin(fmax(y0, 0), y);
}

/* The relative error o's pinned counts risk in the predicted time (q.t) and energy (q.e). */
static void unweighed_share(const struct eerl__est *s, const eerl_obs *o,
                            const struct eerl__parts *q, double *ut, double *ue)
{
    const struct eerl__pred *p = &s->pred;
    double g, t;

    if (s->layout == EERL__LAYOUT_WHOLE) {
        *ut = unweighed(&p->t_whole, o) / q->t;
        *ue = unweighed(&p->e_whole, o) / q->e;
        return;
    }
    g = unweighed(&p->t_gen, o);
    t = unweighed(&p->t_train, o);
    /* overlapped pools: the error of the part that sets the time */
    *ut = (s->layout == EERL__LAYOUT_SEQ ? g + t : (q->t_gen >= q->t_train ? g : t)) / q->t;
    *ue = (unweighed(&p->e_gen, o) + unweighed(&p->e_train, o)) / q->e;
}

/* The prediction for o from the fit on the updates before it. */
static int predict(const struct eerl__est *s, const eerl_obs *o, struct eerl__est_upd *u)
{
    struct eerl__parts q, qa;
    double ht, he, dt, de, bt, be, ut, ue;

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
    /* The error every prediction of this fit shares at o: the coefficients' (the scatter
     * times o's leverage: it grows with o's distance from the updates fitted) and, added, how
     * far the other form's prediction parts from it there. */
    eerl__pred_predict(&s->alt, o, &qa);
    ht = fmax(lev_at(&s->lev[0], o), lev_at(&s->lev[1], o));
    he = fmax(lev_at(&s->lev[2], o), lev_at(&s->lev[3], o));
    dt = qa.t > 0 ? fabs(qa.t / q.t - 1) : 0;
    de = qa.e > 0 ? fabs(qa.e / q.e - 1) : 0;
    bt = drift(s, s->fwd_t, s->sd_t, s->rho_t);
    be = drift(s, s->fwd_e, s->sd_e, s->rho_e);
    unweighed_share(s, o, &q, &ut, &ue);
    u->com_t = sqrt(s->sd_t * s->sd_t * ht + dt * dt + bt * bt + ut * ut);
    u->com_e = sqrt(s->sd_e * s->sd_e * he + de * de + be * be + ue * ue);
    u->df = s->df;
    u->out = outside(s, o);
    return 1;
}

/* The features update o is judged by: its own, or, one update late (lag), the generation part's
 * from next, the update after it, whose reported batch o's generation pool made (estimate.h). */
static void judged_work(const struct eerl__est *s, const eerl_obs *o, const eerl_obs *next,
                        eerl_obs *x)
{
    *x = *o;
    if (!next || !(next->gen_tokens > 0))
        return;
    x->gen_tokens = next->gen_tokens;
    if (s->layout == EERL__LAYOUT_OVERLAP && next->longest_tokens > 0)
        x->longest_tokens = next->longest_tokens;
}

/* Update o's record (x: the work it is judged by), calib_done whether the calibration was
 * reported before it. */
static void record(const struct eerl__est *s, const eerl_obs *o, const eerl_obs *x, int accepted,
                   int calib_done, struct eerl__est_upd *ret)
{
    struct eerl__est_upd u;

    memset(&u, 0, sizeof(u));
    u.t = o->time_s;
    u.e = o->energy_j;
    u.update = o->update;
    u.kind = EERL__EST_SKIP;
    if (accepted && o->update >= EERL__EST_FIRST) {
        if (!calib_done) {
            if (eerl_setting_is_governor(&o->setting)) {
                u.kind = EERL__EST_CALIB;
                u.pt = u.t;
                u.pe = u.e;
            }
        } else {
            (void)predict(s, x, &u);
        }
    }
    *ret = u;
}

/* After its record: a governor update (x its work as judged) joins the fit. */
static void join(struct eerl__est *s, const eerl_obs *o, const eerl_obs *x, int accepted)
{
    if (!accepted || o->update < s->first_fit)
        return;
    if (gen_at_governor(s, x))
        gen_add(s, x);
    if (!eerl_setting_is_governor(&o->setting)) {
        if (gen_at_governor(s, x))
            gen_level(s);
        return;
    }
    fwd_add(s, x);
    ring_add(s, x);
    refit(s);
}

int eerl__est_step(struct eerl__est *s, const eerl_obs *o, int accepted, int calibrated,
                   struct eerl__est_upd *ret)
{
    eerl_obs x;
    int made = 1;

    if (!s->lag) {
        record(s, o, o, accepted, s->calibrated, ret);
        join(s, o, o, accepted);
    } else {
        made = s->have_pend;
        if (made) {
            judged_work(s, &s->pend, o, &x);
            record(s, &s->pend, &x, s->pend_acc, s->pend_calib, ret);
            ret->late = 1;
            join(s, &s->pend, &x, s->pend_acc);
        }
        s->pend = *o;
        s->pend_acc = accepted;
        s->pend_calib = s->calibrated;
        s->have_pend = 1;
    }
    if (calibrated)
        s->calibrated = 1;
    return made;
}

int eerl__est_pending(const struct eerl__est *s, struct eerl__est_upd *ret)
{
    if (!s->lag || !s->have_pend)
        return 0;
    record(s, &s->pend, &s->pend, s->pend_acc, s->pend_calib, ret);
    ret->late = 1;
    return 1;
}

/* The run's own estimate of what eerl saved (eerl/estimate.h; docs/runtime.md "What eerl
 * saved"). Two parts, used by the runtime session per update and by `eerl analyze` over a trace:
 *
 * The forward predictor (struct eerl__est): one update at a time, it says what the governor
 * would have taken for that update's work, from a fit (the controller's per-phase, per-mode
 * governor predictor, predictor.h) on the governor updates observed BEFORE it, never one that
 * includes it. The rule:
 *   - update 1 and refused observations are not counted (the pair comparison starts at update 2);
 *   - until the controller reports its calibration (the CALIBRATED event), updates run at the
 *     governor and count as themselves: predicted = measured, saving exactly 0;
 *   - every later update, at the governor or not, is predicted from the fit on the last
 *     EERL__EST_WINDOW governor updates before it; a governor update then joins the fit.
 * So on an observe-only run every update after the calibration is a genuine forward test, and
 * the estimate must read 0 within its interval.
 *
 * One update late in the asynchronous modes (drained, in flight): there the trainer takes the
 * batch generated one update earlier, so the work an update reports (G, N, L of the batch it
 * trained on) is not what its generation pool did: that pool generated the batch the NEXT update
 * reports. An update's prediction (and, at the governor, its place in the fit) therefore takes
 * its generation part's token counts from the next update (drained: G and L; in flight: G, which
 * the whole-update models then take besides N and L) and its training part's from its own. Its
 * record is final when the next update ends (eerl__est_step returns the previous update's); the
 * last update's, until then, is provisional (eerl__est_pending): its own counts stand in for the
 * batch not yet reported, and the run's totals (eerl_rt_estimate, the closing line, `eerl
 * analyze`) count it so. The synchronous modes train on the batch they generate: each update's
 * record is its own, final at its end.
 *
 * Drained: the generation time model is fitted on every update whose generation pool ran at the
 * governor's clock (pairs that slow the training pool alone measure it as a governor update
 * does: the pool's arrival at the rendezvous), within the span of the governor updates fitted;
 * the rest of the fit on the governor updates alone (estimate.c).
 *
 * The aggregator (struct eerl__est_acc): sums the per-update records (struct eerl__est_upd, the
 * fields the trace's update line carries) into run totals and the 90% interval. The interval
 * takes three things from the fit each prediction came from: the per-update scatter of its
 * leave-one-out relative errors (sd), their lag-1 autocorrelation (rho: errors of neighbouring
 * updates are not independent; a sum of m of them has variance sd^2 m (1+rho)/(1-rho)), and the
 * part shared by every prediction of one fit (com, which does not average out: summed
 * linearly), measured at the update's own work: the coefficients' error there (sd times the
 * square root of its leverage), the gap between the fit and the same updates fitted in the
 * other form there, and the recent governor updates' forward error where it stands out. An
 * update far outside the fit's token counts is marked (out); a run mostly far out is not
 * judged. Quantile: Student's t at the fewest residual
 * degrees of freedom seen. Pure: no I/O; allocation only in eerl__est_init. */
#ifndef EERL_CORE_ESTIMATE_H
#define EERL_CORE_ESTIMATE_H

#include <stddef.h>

#include "eerl/core.h"
#include "eerl/estimate.h"
#include "core/predictor.h"

#define EERL__EST_WINDOW 32 /* governor updates a prediction is fitted on (the refs' window) */
#define EERL__EST_MIN_FIT 5 /* fewest governor updates a prediction is made from */
#define EERL__EST_FIRST 2   /* the first update counted */
/* An update whose token counts lie more than this (log ratio: 20%) outside those of the fit it
 * is predicted from is far; the estimate is not judged once far updates carry more than
 * EERL__EST_FAR_SHARE of the predicted energy. */
#define EERL__EST_FAR 0.18232155679395462
#define EERL__EST_FAR_SHARE 0.25
#define EERL__EST_FWD 16
/* Drained: updates whose generation pool ran at the governor's clock that the generation time
 * model is fitted on (estimate.c, "The generation pool at the governor"). */
#define EERL__EST_GEN_WINDOW 128

/* How an update is counted. */
enum eerl__est_kind {
    EERL__EST_SKIP = 0,  /* not counted: warm-up, refused, or no prediction */
    EERL__EST_CALIB = 1, /* calibration: governor work, predicted = measured */
    EERL__EST_PRED = 2,  /* predicted forward */
};

/* One update's record (the trace's "estimate" object on the update line). */
struct eerl__est_upd {
    int kind;
    double t, e;               /* measured time (s) and energy (J) */
    double pt, pe;             /* the governor's, predicted (calibration: the measured ones) */
    double sd_t, sd_e;         /* relative sd of one prediction's error */
    double rho_t, rho_e;       /* lag-1 autocorrelation of those errors */
    double com_t, com_e;       /* relative sd of the error every prediction of the fit shares */
    unsigned df;               /* residual degrees of freedom of sd */
    double out;                /* how far the work lay outside the fit's token counts (log ratio) */
    unsigned long long update; /* the update it is about */
    int late;                  /* 1: final one update late (on the next update's trace line) */
};

struct eerl__est_acc {
    unsigned n, judged, calib, skipped;
    double t, e, pt, pe;    /* sums */
    double var_t, var_e;    /* independent parts of the predicted sums' variance */
    double com_t, com_e;    /* shared parts' sd (summed linearly) */
    unsigned df;            /* fewest degrees of freedom seen (0: none) */
    unsigned far;           /* predicted updates more than EERL__EST_FAR outside the fit's range */
    double far_pe, out_max; /* their predicted energy; the farthest one's distance */
    double pe_pred;         /* predicted energy of the predicted updates */
    int unexplained;
    char why[200];
};

void eerl__est_acc_init(struct eerl__est_acc *a);
void eerl__est_acc_add(struct eerl__est_acc *a, const struct eerl__est_upd *u);
/* The work does not explain the time (runtime/unexplained.h): the estimate cannot be judged. */
void eerl__est_acc_unexplained(struct eerl__est_acc *a, const char *why);
void eerl__est_acc_result(const struct eerl__est_acc *a, eerl_estimate *ret);

/* What the prediction variance at a new point needs of one fitted model (one of the time or
 * energy models): its features' standardization and the inverse of their correlation over the
 * fit's n updates; a point's leverage is (1 + z' rinv z) / n. */
struct eerl__est_lev {
    unsigned used;
    int linear;
    double mean[EERL__F_COUNT], sd[EERL__F_COUNT], rinv[EERL__F_COUNT][EERL__F_COUNT];
    double n;
};

struct eerl__est {
    int layout;
    int calibrated;
    eerl_obs *ring; /* the last EERL__EST_WINDOW governor updates */
    const eerl_obs **ptrs;
    size_t n, head;
    struct eerl__pred pred, alt; /* the fit, and the same updates in the other form */
    struct eerl__est_lev lev[4]; /* time (whole or gen, train), energy (whole or gen, train) */
    struct eerl__pred_work work, loo;
    double *scratch;
    double sd_t, sd_e, rho_t, rho_e, com_t, com_e;
    unsigned df;
    /* The last EERL__EST_FWD governor updates' errors against the fit before them (forward, as
     * every prediction is): their mean, where it stands out of the scatter, is a drift the fit
     * lags behind and joins the shared error. */
    double fwd_t[EERL__EST_FWD], fwd_e[EERL__EST_FWD];
    unsigned n_fwd;
    unsigned opts;      /* the fit's predictor options */
    unsigned first_fit; /* the first update that may join the fit */
    int lag;            /* 1: asynchronous mode, records one update late */
    eerl_obs pend;      /* lag: the update whose record waits for the next one's work */
    int have_pend;      /* pend holds one */
    int pend_acc;       /* the controller accepted it */
    int pend_calib;     /* the controller had reported its calibration before it */
    /* Drained: the generation pool's arrival at the rendezvous, for the last
     * EERL__EST_GEN_WINDOW updates whose generation ran at the governor (governor updates and
     * pairs that left generation to it): token counts and arrival, oldest first from ghead. */
    int gen_level;
    double (*gfeat)[EERL__F_COUNT];
    double *gt;
    uint64_t *gupd;
    size_t gn, ghead;
    struct eerl__pred_work gwork;
};

int eerl__est_init(struct eerl__est *s, eerl_mode mode);
void eerl__est_free(struct eerl__est *s);
/* One update ended: o its observation, accepted whether the controller took it, calibrated
 * whether the controller reported its calibration at this update. Returns 1 with ret the record
 * made final now (synchronous modes: o's; asynchronous: the previous update's, with o's work as
 * the batch its generation pool made), 0 when none is (the first update of an asynchronous
 * run). The update judged joins the fit afterwards when it ran at the governor. */
int eerl__est_step(struct eerl__est *s, const eerl_obs *o, int accepted, int calibrated,
                   struct eerl__est_upd *ret);
/* Asynchronous modes: 1 with ret the provisional record of the update still waiting for the
 * next one's work (its own work standing in for it), 0 when none waits. Changes nothing. */
int eerl__est_pending(const struct eerl__est *s, struct eerl__est_upd *ret);

/* Student's t quantile (two-sided 90%: p = 0.95) for df degrees of freedom (Cornish-Fisher). */
double eerl__est_t95(unsigned df);

#endif

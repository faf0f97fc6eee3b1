/* The model proposer (docs/internals/controller.md "The model proposer"): per phase group, the
 * phase's time and power against its clock, fitted from every update the search has run at that
 * clock, and the setting it predicts best for a loss budget. Each group's phase time and energy are
 * taken as ratios to the governor predictor's figures for the same work (1 at the governor); per
 * clock tried, the weighted mean of each (an update's weight decays by `keep` per update added,
 * so a drifting workload's old points fade). The fit is the physics' shape without its
 * parameters: time non-decreasing and power non-increasing as the clock falls (a monotone,
 * pool-adjacent-violators fit through the clocks tried, the governor's 1 first), linear between
 * the clocks tried, the last segment's slopes continued below the lowest; energy = time x
 * power. A whole update's loss and energy for a setting are the groups' ratios applied to a
 * ring of recent governor-predicted parts, combined as the layout combines them (sequential:
 * sum; overlapped: the later pool plus the rest). Pure arithmetic on its own struct: no
 * allocation, no I/O. */
#ifndef EERL_CORE_PHASE_MODEL_H
#define EERL_CORE_PHASE_MODEL_H

#include <stddef.h>

#include "eerl/core.h"
#include "core/predictor.h"

#define EERL__PM_GROUPS 2  /* the groups whose phases the predictor splits (gen, train) */
#define EERL__PM_POINTS 48 /* distinct clocks kept per group (the lightest goes first) */
#define EERL__PM_WORK 32   /* recent predicted governor updates the proposal is judged on */

struct eerl__pm_point {
    unsigned mhz;            /* the effective clock (the governor counts as the peak) */
    double w;                /* weight: updates, decayed */
    double st, st2, se, se2; /* weighted sums of the time and energy ratios and their squares */
};

struct eerl__pm_group {
    struct eerl__pm_point pt[EERL__PM_POINTS];
    unsigned n_pt;
    double var_t;    /* per-update variance of the time ratio around its clock's mean */
    unsigned lowest; /* the lowest clock with weight >= 1 (0: none) */
    /* The monotone fit: knots from the peak down (the governor's 1 first), time ratio
     * non-decreasing and power ratio non-increasing as the clock falls, and their weights. */
    unsigned n_knot, knot_f[EERL__PM_POINTS + 1];
    double knot_t[EERL__PM_POINTS + 1], knot_p[EERL__PM_POINTS + 1], knot_w[EERL__PM_POINTS + 1];
    int fitted;
};

/* One update's governor-predicted parts (s, J). */
struct eerl__pm_work {
    double t[EERL__PM_GROUPS], e[EERL__PM_GROUPS], t_rest, e_rest;
};

struct eerl__pm {
    int layout; /* EERL__LAYOUT_SEQ or _OVERLAP */
    unsigned peak;
    double keep; /* weight kept per update added (1: no forgetting) */
    struct eerl__pm_group g[EERL__PM_GROUPS];
    struct eerl__pm_work work[EERL__PM_WORK];
    unsigned n_work, work_head;
};

/* The probes' error on each group's parts (measured / predicted - 1 on fresh governor updates),
 * which every ratio is corrected by. */
struct eerl__pm_corr {
    double t[EERL__PM_GROUPS], e[EERL__PM_GROUPS];
};

/* One update as a point on each group's curve: its measured phase time and energy over the
 * governor prediction for its work (pred), corrected by c, at effective clocks mhz[g]; and the
 * prediction joins the work ring. */
void eerl__pm_take(struct eerl__pm *m, const unsigned *mhz, const struct eerl__parts *meas,
                   const struct eerl__parts *pred, const struct eerl__pm_corr *c);

/* The updates the model was given, kept to be read again: a point's
 * ratio is only as good as the governor prediction it was taken against, and the predictor is
 * refitted as references arrive (probes, refreshes after the work moved) while a clock tried
 * once keeps its reading for hundreds of updates. At keep = 1 - 1/400 an update EERL__PM_HIST
 * old weighs 0.08 of a new one. */
#define EERL__PM_HIST 1024
struct eerl__pm_rec {
    unsigned mhz[EERL__PM_GROUPS];
    double g, n, l; /* the update's token work */
    struct eerl__parts meas;
};
struct eerl__pm_hist {
    struct eerl__pm_rec rec[EERL__PM_HIST];
    unsigned n, head;
};
void eerl__pm_hist_add(struct eerl__pm_hist *h, const unsigned *mhz, const eerl_obs *o,
                       const struct eerl__parts *meas);
/* Every kept update taken again, oldest first (so the weights decay as they did), against
 * pred (ready) and c: the points and the work ring are rebuilt; what was taken before the
 * oldest kept update is dropped. */
void eerl__pm_reread(struct eerl__pm *m, const struct eerl__pm_hist *h,
                     const struct eerl__pred *pred, const struct eerl__pm_corr *c);

/* What the model predicts for a setting. */
struct eerl__pm_pred {
    double loss;    /* whole-update time ratio - 1 */
    double loss_sd; /* its standard error from the fits */
    double energy;  /* whole-update energy ratio */
};

void eerl__pm_init(struct eerl__pm *m, int layout, unsigned peak, double keep);
/* One update at effective clocks mhz[g]: each group's phase time and energy ratio to the
 * governor prediction. A group at the peak adds nothing (the fit passes through 1 there). */
void eerl__pm_add(struct eerl__pm *m, const unsigned *mhz, const double *t_ratio,
                  const double *e_ratio);
/* One update's governor-predicted parts, for the whole-update prediction. */
void eerl__pm_add_work(struct eerl__pm *m, const struct eerl__pm_work *w);
/* Refits every group from its points. */
void eerl__pm_fit(struct eerl__pm *m);
/* A group's fitted time and energy ratios at a clock; 1 for a group not fitted. var: the time
 * ratio's variance from the fit (may be NULL). */
double eerl__pm_time(const struct eerl__pm *m, int g, unsigned mhz, double *var);
double eerl__pm_energy(const struct eerl__pm *m, int g, unsigned mhz);
/* The whole update at clocks mhz[g] over the work ring. EERL_ENODATA without work. */
int eerl__pm_predict(const struct eerl__pm *m, const unsigned *mhz, struct eerl__pm_pred *out);

/* The proposal: among clocks[] (supported, highest first) per group within [lo[g], hi[g]]
 * (effective clocks; the peak stands for the governor), the setting of least predicted energy
 * whose predicted loss + offset + kappa * loss_sd is at most max_loss. avoid (n_avoid settings,
 * effective clocks): a setting at or below one of them in every group is not proposed (it was
 * measured too slow). Writes the clocks (the peak where the governor is chosen) and the
 * prediction; EERL_ENODATA when nothing qualifies (out is then the all-peak setting). */
struct eerl__pm_ask {
    const unsigned *clocks;
    size_t n_clocks;
    unsigned lo[EERL__PM_GROUPS], hi[EERL__PM_GROUPS];
    double max_loss, offset, kappa;
    const unsigned (*avoid)[EERL__PM_GROUPS];
    unsigned n_avoid;
    int no_governor; /* the all-governor setting is not proposed */
};
int eerl__pm_propose(const struct eerl__pm *m, const struct eerl__pm_ask *ask, unsigned *out,
                     struct eerl__pm_pred *pred);

#endif

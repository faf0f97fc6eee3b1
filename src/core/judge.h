/* The judge interface. A strategy is a judge and a proposer (propose.h) that the controller puts
 * together per strategy and mode (controller.c's combination table). The judge measures: it
 * holds the setting under test for as many updates as the mode needs, estimates its throughput
 * loss and energy against the governor (ratios.h, or the run-level account of eerl's), tells the
 * proposer what it found and carries out the proposer's move. It sees the controller only
 * through a const context (context.h) and acts only through the record's calls (record.h). Its
 * state (st_size bytes, zeroed, allocated by the controller) is its own. */
#ifndef EERL_CORE_JUDGE_H
#define EERL_CORE_JUDGE_H

#include <stddef.h>

#include "eerl/core.h"
#include "core/context.h"
#include "core/ratios.h"

/* Who runs the updates once the judge has locked (lifecycle.c). */
enum eerl__after {
    EERL__AFTER_JUDGE = 0,   /* the judge itself (its own after-lock rules) */
    EERL__AFTER_MONITOR,     /* the controller's monitor, both groups (section 5.2) */
    EERL__AFTER_MONITOR_OWN, /* the monitor, only the groups not at the governor; a lock moved
                                to the governor ends the monitoring (drained) */
    EERL__AFTER_BLOCKS,      /* governor check blocks between locked blocks (section 6.3) */
};

/* What a judge that hands over to the check blocks (EERL__AFTER_BLOCKS, the paper's in-flight)
 * leaves the life cycle at its lock. */
struct eerl__handover {
    unsigned block;            /* updates per block */
    int group[2];              /* the pools in the order the search lowered them */
    unsigned grid[2];          /* and their grids: a failed check raises the last lowered by its */
    struct eerl__acc gov_prev; /* the last governor block, which opens the first check */
};

/* What a judge's init asks of the controller before the first update. */
struct eerl__judge_setup {
    int grid_below_peak; /* grid steps count from the highest clock below the peak */
    double fit_min_t;    /* the reference fit's min_t (eerl__pred_fit_opts; 0: the paper's) */
    unsigned fit_opts;   /* and its options (0: the paper's form) */
};

struct eerl__judge_ops {
    const char *name;
    size_t st_size;
    /* Optional: once, after the controller is built (may allocate). */
    int (*init)(const struct eerl__ctx *cx, void *st, struct eerl__judge_setup *ret_setup);
    /* One accepted observation. usable: 0 when the update must be left out of decisions
     * (carry-over, setting mismatch; a SKIP event has been emitted). Writes the setting for the
     * next update to *next (which holds the current request on entry). Emits its events. */
    void (*observe)(const struct eerl__ctx *cx, void *st, const eerl_obs *obs, int usable,
                    eerl_setting *next);
    eerl_ctl_state (*state)(const void *st);
    /* Optional (eerl_ctl_restore): the saved references are back; start from the saved lock
     * (NULL: none) and write the setting for the first update to *next. */
    int (*restore)(const struct eerl__ctx *cx, void *st, const eerl_setting *locked,
                   eerl_setting *next);
    /* For the monitor after lock (after != EERL__AFTER_JUDGE): the ratios of the locked
     * setting's updates against the governor, as this mode estimates them (ratios.h). */
    void (*ratios)(const struct eerl__ctx *cx, const eerl_setting *s, const struct eerl__acc *a,
                   struct eerl__ratios *r);
    /* EERL__AFTER_BLOCKS: what the check blocks need, from the judge's state at its lock. */
    void (*handover)(const void *st, struct eerl__handover *ret);
    int after; /* enum eerl__after */
};

/* The paper's judges (judge/sync.c, judge/drained.c, judge/inflight.c). */
extern const struct eerl__judge_ops eerl__judge_sync;
extern const struct eerl__judge_ops eerl__judge_drained;
extern const struct eerl__judge_ops eerl__judge_inflight;
/* Beyond the paper: judge/eerl.c, judge/eerl_inflight.c and judge/baselines.c. */
extern const struct eerl__judge_ops eerl__judge_eerl;
extern const struct eerl__judge_ops eerl__judge_eerl_inflight;
extern const struct eerl__judge_ops eerl__judge_governor;
extern const struct eerl__judge_ops eerl__judge_static;
extern const struct eerl__judge_ops eerl__judge_global_clock;
extern const struct eerl__judge_ops eerl__judge_linear_search;
/* eerl's judge (judge/eerl.c): the mean of the governor probes' errors xs[0..n) the run's
 * estimates are corrected by; quiet_se: the standard error at or below which it is used as
 * measured (0: only a negative mean, or one two standard errors from zero). */
double eerl__probe_mean(const double *xs, unsigned n, double quiet_se);

#endif

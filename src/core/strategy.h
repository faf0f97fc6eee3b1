/* The strategy interface. A strategy is two parts behind narrow vtables:
 * - its judge (struct eerl__strategy_ops): how this execution mode measures a candidate — it
 *   holds the setting under test for as many updates as the mode needs, estimates its throughput
 *   loss and energy against the governor (search.c's eerl__judge_*, or the run-level account in
 *   eerl's), and tells the controller what happened through controller.h's calls (emit,
 *   ref_add/ref_count, lock, adjust, refresh, trial_done);
 * - its proposer (struct eerl__proposer_ops, below): what to try next and when to stop —
 *   Algorithm 1's pairs, the paper's rounds per pool, eerl's budgeted descent, the baselines'
 *   sweeps. A proposer sees only outcomes (struct eerl__outcome) and answers with a move
 *   (struct eerl__move); it never reads the updates themselves.
 * controller.c's combination table puts one of each together per strategy and mode; a new
 * proposer is one file and one line there (docs/controller.md, "Adding a proposer").
 * Each part owns its state (allocated by the controller, st_size bytes, zeroed, plus whatever
 * its init allocates and its fini frees). Neither writes the lock, the references, the counters
 * or the events itself. */
#ifndef EERL_CORE_STRATEGY_H
#define EERL_CORE_STRATEGY_H

#include <stddef.h>

#include "eerl/core.h"

struct eerl_ctl;
struct eerl__acc;
struct eerl__ratios;
struct eerl__pm;

struct eerl__strategy_ops {
    const char *name;
    size_t st_size;
    /* Called once after the controller is built. May allocate (construction time). */
    int (*init)(struct eerl_ctl *ctl, void *st);
    void (*fini)(struct eerl_ctl *ctl, void *st);
    /* One accepted observation. usable: 0 when the update must be left out of decisions
     * (carry-over, setting mismatch; a SKIP event has been emitted). Writes the setting for the
     * next update to *next (which holds the current request on entry). Emits its events. */
    void (*observe)(struct eerl_ctl *ctl, void *st, const eerl_obs *obs, int usable,
                    eerl_setting *next);
    eerl_ctl_state (*state)(const void *st);
    /* Optional (eerl_ctl_restore): the saved references are back in the controller; start from
     * the saved lock (NULL: none) and write the setting for the first update to *next. */
    int (*restore)(struct eerl_ctl *ctl, void *st, const eerl_setting *locked, eerl_setting *next);
    /* The judge (strategies that hand the life cycle after lock to the controller,
     * eerl__ctl_watch): the ratios of a setting's updates against the governor, as this mode
     * estimates them (search.c's eerl__judge_*). */
    void (*judge)(const struct eerl_ctl *ctl, const eerl_setting *s, const struct eerl__acc *a,
                  struct eerl__ratios *r);
    /* After lock the monitor moves only the groups not at the governor, and a lock moved to
     * the governor ends the monitoring (drained); 0: both groups (sync). */
    int monitor_own_groups;
};

/* ---- the proposer ------------------------------------------------------------------------ */

/* What a judge tells its proposer about the setting it judged (or, for start, the setting the
 * search starts from). Fields a judge does not estimate are 0 (r: NULL). */
struct eerl__outcome {
    eerl_setting s;               /* the setting judged */
    eerl_verdict verdict;         /* PASS or FAIL */
    int too_slow;                 /* the throughput failed (a FAIL otherwise failed on energy) */
    int confirm;                  /* the verdict of a confirmation (else of a trial) */
    const struct eerl__ratios *r; /* the paper's ratios (search.h), where the judge has them */
    double loss;                  /* estimated throughput loss against the governor */
    double energy;                /* energy ratio against the governor */
    double loss_var;              /* per-update variance of the loss estimates (0: not known) */
    double budget;                /* the loss the run may still spend per update (eerl's account) */
    double remaining;   /* updates the run has left (by the configured or learned horizon) */
    int slack_group;    /* the group with slack (waits at the rendezvous / is less busy), or -1 */
    int late_group;     /* the group the judged updates waited for, or -1 when not known */
    double wait_ratio;  /* training's arrival over generation's across the judged updates, or
                         * -1 when not every one reported arrivals */
    int locked;         /* the search is locked: a move now spends credit the lock left over */
    unsigned n_updates; /* usable updates the loss and energy rest on */
    /* eerl's judge: its fit of each group's phase time and power against the clock from every
     * update run so far (proposer_model.h), or NULL */
    const struct eerl__pm *model;
};

enum eerl__move_kind {
    EERL__MOVE_TRY,     /* test s: a candidate, judged against the governor and energy_bar */
    EERL__MOVE_CONFIRM, /* confirm s on fresh updates (the paper's proposers) */
    EERL__MOVE_HOLD,    /* run at s, judged against the throughput budget only (not a candidate) */
    EERL__MOVE_STOP,    /* the search is over: lock s (the governor when nothing qualified); after
                         * lock, the lock stays */
};

struct eerl__move {
    int kind;              /* EERL__MOVE_* */
    eerl_setting s;        /* the setting to run next */
    int group;             /* TRY: the one group it changes, or -1 */
    double energy_bar;     /* TRY, CONFIRM: passes only below this energy ratio (1: governor's) */
    const char *fail_note; /* appended to a verdict that fails on energy, or NULL */
    /* STOP: why the search ended; HOLD: when set, the locked setting moves to s and this is the
     * ADJUST event's reason (empty: s is run, no event). */
    char why[EERL_REASON_MAX];
    /* What the proposer calls this step, put before the judge's PROPOSE text ("round 2
     * (generation pool): "), or "". */
    char label[64];
};

struct eerl__proposer_ops {
    const char *name;
    size_t st_size;
    /* Optional: once, after the controller and the judge are built. */
    int (*init)(struct eerl_ctl *ctl, void *ps);
    /* The search begins (calibration is done, or a resume): from->s is where it stands, from->
     * locked set when it resumes at a saved lock (nothing is lowered again). */
    void (*start)(struct eerl_ctl *ctl, void *ps, const struct eerl__outcome *from,
                  struct eerl__move *ret);
    /* The last TRY, CONFIRM or HOLD has been judged: the next move. May emit PROPOSE, ADJUST
     * and ROUND events of its own (the reason says why it moved). */
    void (*next)(struct eerl_ctl *ctl, void *ps, const struct eerl__outcome *o,
                 struct eerl__move *ret);
};

/* The proposers (propose_*.c). */
extern const struct eerl__proposer_ops eerl__propose_pairs;   /* Algorithm 1, sections 5.2, 6.1 */
extern const struct eerl__proposer_ops eerl__propose_rounds;  /* sections 6.2, 6.3: pool by pool */
extern const struct eerl__proposer_ops eerl__propose_descent; /* eerl, 3-4 groups: descent */
extern const struct eerl__proposer_ops eerl__propose_model;   /* eerl: the model's best setting */
extern const struct eerl__proposer_ops
    eerl__propose_pool_descent;                              /* eerl in-flight: pool by pool */
extern const struct eerl__proposer_ops eerl__propose_sweep;  /* global-clock baseline */
extern const struct eerl__proposer_ops eerl__propose_linear; /* linear-search baseline */
/* Drained mode: the drop below the peak (MHz) to which training may go at once, read from the
 * rendezvous wait of the calibration updates (propose_descent.c); 0 in other modes. */
unsigned eerl__slack_drop(const struct eerl_ctl *ctl);

/* The paper's strategies (strategy_sync.c, strategy_drained.c, strategy_inflight.c). */
extern const struct eerl__strategy_ops eerl__strategy_sync;
extern const struct eerl__strategy_ops eerl__strategy_drained;
extern const struct eerl__strategy_ops eerl__strategy_inflight;
/* Beyond the paper: strategy_eerl.c and strategy_baselines.c. */
extern const struct eerl__strategy_ops eerl__strategy_eerl;
extern const struct eerl__strategy_ops eerl__strategy_eerl_inflight;
/* eerl's judge (strategy_eerl.c): the mean of the governor probes' errors xs[0..n) the run's
 * estimates are corrected by; quiet_se: the standard error at or below which it is used as
 * measured (0: only a negative mean, or one two standard errors from zero). */
double eerl__probe_mean(const double *xs, unsigned n, double quiet_se);
extern const struct eerl__strategy_ops eerl__strategy_governor;
extern const struct eerl__strategy_ops eerl__strategy_static;
extern const struct eerl__strategy_ops eerl__strategy_global_clock;
extern const struct eerl__strategy_ops eerl__strategy_linear_search;

#endif

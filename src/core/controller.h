/* Internal view of the controller for its strategies: the struct behind eerl_ctl, the governor
 * reference set and predictor it keeps, the lock, the monitoring window, the event ring, and
 * clock helpers that only ever return supported clocks. controller.c owns all of it; strategies
 * read it and change it only through the calls below (tests/test_core_ownership.sh checks). */
#ifndef EERL_CORE_CONTROLLER_H
#define EERL_CORE_CONTROLLER_H

#include <stdint.h>

#include "eerl/core.h"
#include "core/predictor.h"
#include "core/setting.h"
#include "core/strategy.h"

#define EERL__EVENTS_CAP 256

enum {
    EERL__AFTER_NONE = 0, /* the strategy runs the updates */
    EERL__AFTER_WATCH,    /* locked: the monitoring window */
    EERL__AFTER_REFRESH,  /* locked: governor updates refresh the reference */
    EERL__AFTER_DONE,     /* nothing qualified: the governor is kept */
};

struct eerl__monitor;

struct eerl_ctl {
    eerl_mode mode;
    eerl_ctl_config cfg;
    unsigned *clocks; /* supported clocks, highest first, unique */
    size_t n_clocks;
    unsigned peak;
    /* Where grid steps count from (eerl__ctl_step), standing for the governor: the peak, or
     * the highest clock below it (eerl__ctl_grid_below_peak: the paper's synchronous search from
     * paper_revision 1). */
    unsigned grid_top;
    int layout;

    const struct eerl__strategy_ops *ops; /* the judge (strategy.h) and its state */
    void *st;
    const struct eerl__proposer_ops *prop; /* the proposer and its state; NULL: none */
    void *pst;

    eerl_setting next; /* requested for the next update */

    /* Governor references: a ring of the most recent cfg.ref_window governor observations. */
    eerl_obs *refs;
    const eerl_obs **ref_ptrs;
    size_t ref_n, ref_head;
    struct eerl__pred pred;
    struct eerl__pred_work work;
    double pred_min_t;  /* eerl__pred_fit_opts's: 0 (the paper's fit) unless the strategy sets it */
    unsigned pred_opts; /* eerl__pred_fit_opts's: 0 (the paper's form) unless set */

    eerl_event events[EERL__EVENTS_CAP];
    size_t ev_head, ev_n, ev_mark;
    uint64_t ev_dropped;

    /* After lock (lifecycle.c), for the strategies with a judge: where the controller is
     * (EERL__AFTER_*), the refresh's count, and the monitoring window (monitor.c). */
    int after;
    unsigned after_count;
    struct eerl__monitor *mon;

    uint64_t cur_update;
    uint64_t observed, rejected, trials, refreshes;
    unsigned block_updates;
    int locked;
    eerl_setting locked_setting;
};

/* Appends an event for the current update, reason printf-style; ratios start as NaN, state and
 * next are filled in when the observation's decision is complete. Returns the event to fill. */
eerl_event *eerl__ctl_emit(struct eerl_ctl *ctl, eerl_event_kind kind, const eerl_setting *cand,
                           const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* The life cycle's record. These are the only writers of locked, locked_setting, trials,
 * refreshes, block_updates and pred_min_t (tests/test_core_ownership.sh checks it).
 * lock: the search settled on s: locked, *next = s (next NULL: the request stays as it is),
 * and the LOCK event "lock S: why".
 * start_locked: at construction (a strategy's init): s locked and requested from the first
 * update, no event. adjust: the locked setting moves to s (*next = s), ADJUST event.
 * refresh: governor measurements while locked begin (counted, *next = governor), REFRESH event
 * about the locked setting. */
void eerl__ctl_lock(struct eerl_ctl *ctl, const eerl_setting *s, eerl_setting *next,
                    const char *why);
void eerl__ctl_start_locked(struct eerl_ctl *ctl, const eerl_setting *s);
void eerl__ctl_adjust(struct eerl_ctl *ctl, const eerl_setting *s, eerl_setting *next,
                      const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void eerl__ctl_refresh(struct eerl_ctl *ctl, const eerl_setting *locked, eerl_setting *next,
                       const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* A candidate's trial was judged (counted in the status). */
void eerl__ctl_trial_done(struct eerl_ctl *ctl);
/* In-flight: the block length chosen (updates per block, shown in the status). */
void eerl__ctl_set_block(struct eerl_ctl *ctl, unsigned updates);
/* The shortest phase time the reference fit uses (eerl__pred_fit_opts's min_t; 0 = the paper's
 * fit); set by a strategy's init, before any reference. */
void eerl__ctl_set_fit_floor(struct eerl_ctl *ctl, double min_t);
/* Grid steps (eerl__ctl_step) count from the highest supported clock below the peak, which then
 * stands for the governor; a strategy's init sets it (strategy_sync.c), the default is the peak. */
void eerl__ctl_grid_below_peak(struct eerl_ctl *ctl);
/* The reference fit's options (eerl__pred_fit_opts; 0 = the paper's form); set likewise. */
void eerl__ctl_set_fit_opts(struct eerl_ctl *ctl, unsigned opts);

/* After lock (lifecycle.c): a strategy with a judge hands the updates over at its lock; the
 * controller monitors the locked setting (governor_kept: nothing qualified, the governor stays
 * and is not monitored). after_state is the state while it does; after_observe takes one
 * usable update. */
void eerl__ctl_watch(struct eerl_ctl *ctl, int governor_kept);
eerl_ctl_state eerl__ctl_after_state(const struct eerl_ctl *ctl);
void eerl__ctl_after_observe(struct eerl_ctl *ctl, const eerl_obs *obs, eerl_setting *next);

/* The strategy's proposer (strategy.h), for its judge: the first move of the search and the
 * move after each outcome. *ret starts as a TRY of nothing, group -1, energy_bar 1, no label. */
void eerl__ctl_propose_start(struct eerl_ctl *ctl, const struct eerl__outcome *from,
                             struct eerl__move *ret);
void eerl__ctl_propose_next(struct eerl_ctl *ctl, const struct eerl__outcome *o,
                            struct eerl__move *ret);
/* An outcome with nothing estimated yet: s, verdict NONE, slack and late group -1, wait_ratio
 * -1. */
struct eerl__outcome eerl__outcome_of(const eerl_setting *s);

/* Adds a governor observation to the references and refits the predictor. */
void eerl__ctl_ref_add(struct eerl_ctl *ctl, const eerl_obs *obs);
/* One governor update of a counted stretch (calibration, references between trials, a governor
 * block, a refresh): adds it to the references, counts it, and while *count < limit emits the
 * HOLD event "<what> count/limit" and returns 0; returns 1, emitting nothing, on the last one. */
int eerl__ctl_ref_count(struct eerl_ctl *ctl, const eerl_obs *obs, unsigned *count, unsigned limit,
                        const char *what, const eerl_setting *next);
/* The paper's strategies during calibration: 1 for the first cfg.warmup_updates updates this
 * controller observes, which are left out of the governor references with a HOLD event saying
 * so. The paper scores its runs and fits its governor models from update 2 (Tables 4 and 5,
 * Appendix E); the first update carries the start-up (an asynchronous run's pools do not yet
 * overlap: 2.5 times a later update in flight on the twin), and inside a 15- or 45-update fit it
 * skews the predictor and, in flight, the noise that sets the block length (14% instead of 2%). */
int eerl__ctl_warmup(struct eerl_ctl *ctl, const eerl_setting *next);
/* The i-th reference, oldest first, i < ctl->ref_n. */
const eerl_obs *eerl__ctl_ref(const struct eerl_ctl *ctl, size_t i);

/* The supported clock nearest mhz (ties go up); EERL_CLOCK_GOVERNOR at or above the peak. */
unsigned eerl__ctl_snap(const struct eerl_ctl *ctl, unsigned mhz);
/* mhz moved by delta MHz and snapped, at least one supported clock in delta's direction. Grid
 * positions are ctl->grid_top - k * |delta|; a step to grid_top or above is the governor.
 * EERL_CLOCK_GOVERNOR counts as the peak and anything at or above the peak is the governor.
 * Returns 0, or EERL_ERANGE when a step down would go below the lowest clock. */
int eerl__ctl_step(const struct eerl_ctl *ctl, unsigned mhz, int delta, unsigned *ret);
/* Clock value for ordering: the governor counts as the peak. */
unsigned eerl__ctl_eff(const struct eerl_ctl *ctl, unsigned mhz);
/* A setting with these group clocks and the configured idle clock (none if all governor). */
eerl_setting eerl__ctl_setting(const struct eerl_ctl *ctl, unsigned gen, unsigned train);
/* A descent's first move: training drop MHz below the governor's peak, generation at the
 * governor. Returns 0 with *ret set, or EERL_ERANGE when no supported clock lies below the peak
 * (*ret is then the governor setting). */
int eerl__ctl_first_train_drop(const struct eerl_ctl *ctl, unsigned drop, eerl_setting *ret);

#endif

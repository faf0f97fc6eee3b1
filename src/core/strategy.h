/* The strategy interface: one state machine per execution mode behind a small vtable, so other
 * strategies (governor, oracle, global clock, linear search, ...) can be added without touching
 * the controller. A strategy owns its state (allocated by the controller, st_size bytes, zeroed,
 * plus whatever its init allocates and its fini frees); it reads the controller's predictor,
 * references and lock, and tells the controller what happened through controller.h's calls
 * (emit, ref_add/ref_count, lock, adjust, refresh, trial_done): it never writes the lock, the
 * references, the counters or the events itself. */
#ifndef EERL_CORE_STRATEGY_H
#define EERL_CORE_STRATEGY_H

#include <stddef.h>

#include "eerl/core.h"

struct eerl_ctl;
struct eerl__acc;
struct eerl__ratios;

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

/* The paper's strategies (strategy_sync.c, strategy_drained.c, strategy_inflight.c). */
extern const struct eerl__strategy_ops eerl__strategy_sync;
extern const struct eerl__strategy_ops eerl__strategy_drained;
extern const struct eerl__strategy_ops eerl__strategy_inflight;
/* Beyond the paper: strategy_eerl.c and strategy_baselines.c. */
extern const struct eerl__strategy_ops eerl__strategy_eerl;
extern const struct eerl__strategy_ops eerl__strategy_eerl_inflight;
extern const struct eerl__strategy_ops eerl__strategy_governor;
extern const struct eerl__strategy_ops eerl__strategy_static;
extern const struct eerl__strategy_ops eerl__strategy_global_clock;
extern const struct eerl__strategy_ops eerl__strategy_linear_search;

#endif

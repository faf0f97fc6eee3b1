/* Algorithm 1's trial loop (section 5.2), shared by the paper's synchronous and drained
 * judges: calibration at governor clocks, then each candidate the proposer names held for
 * cfg.trial_updates (a confirmation cfg.confirm_updates) after cfg.governor_between governor
 * updates, judged by the mode's ratios and the pass rule, and the proposer's next move; at the
 * lock the controller's life cycle takes over (lifecycle.c). What differs per mode is in a
 * struct eerl__trials_mode (judge/sync.c, judge/drained.c). */
#ifndef EERL_CORE_TRIAL_LOOP_H
#define EERL_CORE_TRIAL_LOOP_H

#include "core/judge.h"
#include "core/propose.h"
#include "core/ratios.h"

struct eerl__trials_mode {
    /* The ratios of a setting's updates against the governor, as this mode estimates them. */
    void (*ratios)(const struct eerl__ctx *cx, const eerl_setting *s, const struct eerl__acc *a,
                   struct eerl__ratios *r);
    /* Calibration is complete: emits the CALIBRATED event; returns the group with slack for
     * the proposer (propose.h's slack_group), or -1. */
    int (*calibrated)(const struct eerl__ctx *cx, const eerl_setting *next);
    int gap_before_first; /* the governor updates between trials precede the first one too */
    int names_slow_group; /* a throughput failure names the group that added most time */
};

struct eerl__trials_st {
    int phase;
    unsigned count;
    struct eerl__move cur, pending; /* the candidate under test, and the next one */
    struct eerl__acc acc;
};

void eerl__trials_observe(const struct eerl__ctx *cx, struct eerl__trials_st *st,
                          const struct eerl__trials_mode *mode, const eerl_obs *obs, int usable,
                          eerl_setting *next);
eerl_ctl_state eerl__trials_state(const void *st);

#endif

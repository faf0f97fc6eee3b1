/* The search's life cycle after lock, owned by the controller (lifecycle.c): for a judge that
 * hands its lock over (judge.h's `after`), every after-lock policy of the paper's strategies in
 * one place: the monitoring window over the locked setting (sync, drained), its verdicts and the
 * adjustments they make, refreshes of the governor reference; the governor check blocks between
 * locked blocks (in-flight); the governor kept when nothing qualified. The controller embeds one
 * and feeds it every usable update once it is active. */
#ifndef EERL_CORE_LIFECYCLE_H
#define EERL_CORE_LIFECYCLE_H

#include "core/context.h"
#include "core/judge.h"
#include "core/monitor.h"

struct eerl__life {
    int phase;      /* where it is (lifecycle.c); 0: not active, the judge runs the updates */
    int own_groups; /* the monitor moves only the groups not at the governor (drained) */
    unsigned count; /* updates of the refresh or block under way */
    struct eerl__monitor mon;
    /* The check blocks (EERL__AFTER_BLOCKS): what the judge handed over, the locked blocks
     * since the last check and their sums, and the check block's. */
    struct eerl__handover h;
    unsigned lock_blocks;
    struct eerl__acc lock_acc, gov_cur;
};

int eerl__life_init(struct eerl__life *l, unsigned window);
void eerl__life_fini(struct eerl__life *l);
/* The judge has locked (after: its judge.h policy; h: what it hands over, for
 * EERL__AFTER_BLOCKS): from now on the life cycle runs the updates. governor_kept: nothing
 * qualified, the governor stays and is not monitored. */
void eerl__life_watch(struct eerl__life *l, int after, int governor_kept,
                      const struct eerl__handover *h);
/* 1 once the judge has handed over. */
int eerl__life_active(const struct eerl__life *l);
eerl_ctl_state eerl__life_state(const struct eerl__life *l);
/* One usable update after the hand-over; judge gives the mode's ratios. */
void eerl__life_observe(struct eerl__life *l, const struct eerl__ctx *cx,
                        const struct eerl__judge_ops *judge, const eerl_obs *obs,
                        eerl_setting *next);

#endif

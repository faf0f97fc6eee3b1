/* The paper's asynchronous drained strategy (section 6.2, Algorithm 1, Table 3): its judge.
 * Calibration at governor clocks records both pools' arrivals at the rendezvous; the pool that
 * usually arrives first waits there, and its slack is searched first (the proposer,
 * propose_rounds.c: round 1 on the first grid, round 2 the other pool on the second). A
 * training-only slowdown is judged by recomputing the governor references' update times from
 * their recorded arrivals (search.c's eerl__judge_arrivals); other candidates by the
 * whole-update prediction (eerl__judge_whole). The trial loop is strategy_trials.c's; after lock
 * the controller monitors the pools not at the governor (lifecycle.c). */
#include "core/judge/trial_loop.h"

static const char *group_name(int g)
{
    return g == EERL_GROUP_GEN ? "generation" : "training";
}

/* Section 6.2: a training-only slowdown is judged from the recorded arrivals. */
static void judge(const struct eerl_ctl *ctl, const eerl_setting *s, const struct eerl__acc *a,
                  struct eerl__ratios *r)
{
    if (s->mhz[EERL_GROUP_GEN] == EERL_CLOCK_GOVERNOR &&
        s->mhz[EERL_GROUP_TRAIN] != EERL_CLOCK_GOVERNOR)
        eerl__judge_arrivals(ctl, a, r);
    else
        eerl__judge_whole(ctl, a, r);
}

/* The pool that usually arrives first waits at the rendezvous: its slack is searched first.
 * A tie goes to training, which the paper found to be the useful target. */
static int calibrated(struct eerl_ctl *ctl, const eerl_setting *next)
{
    unsigned gen_first = 0, i;
    struct eerl__parts m;
    int first;

    for (i = 0; i < ctl->ref_n; i++) {
        eerl__obs_parts(ctl->layout, eerl__ctl_ref(ctl, i), &m);
        if (m.t_gen < m.t_train)
            gen_first++;
    }
    first = 2 * gen_first > ctl->ref_n ? EERL_GROUP_GEN : EERL_GROUP_TRAIN;
    eerl__ctl_emit(ctl, EERL_EV_CALIBRATED, next,
                   "predictor fitted on %zu governor updates; generation arrived first in %u: "
                   "search the %s pool first",
                   ctl->ref_n, gen_first, group_name(first));
    return first;
}

static const struct eerl__trials_mode drained_mode = {
    .judge = judge,
    .calibrated = calibrated,
    .gap_before_first = 1,
    .names_slow_group = 0,
};

static void dr_observe(struct eerl_ctl *ctl, void *st, const eerl_obs *obs, int usable,
                       eerl_setting *next)
{
    eerl__trials_observe(ctl, st, &drained_mode, obs, usable, next);
}

const struct eerl__strategy_ops eerl__strategy_drained = {
    .name = "paper-drained",
    .st_size = sizeof(struct eerl__trials_st),
    .observe = dr_observe,
    .state = eerl__trials_state,
    .judge = judge,
    .monitor_own_groups = 1,
};

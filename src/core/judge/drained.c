/* The paper's asynchronous drained strategy (section 6.2, Algorithm 1, Table 3): its judge.
 * Calibration at governor clocks records both pools' arrivals at the rendezvous; the pool that
 * usually arrives first waits there, and its slack is searched first (the proposer,
 * propose/rounds.c: round 1 on the first grid, round 2 the other pool on the second). A
 * training-only slowdown is judged by recomputing the governor references' update times from
 * their recorded arrivals (ratios.c's eerl__ratios_arrivals); other candidates by the
 * whole-update prediction (eerl__ratios_whole). The trial loop is judge/trial_loop.c's; after lock
 * the controller monitors the pools not at the governor (lifecycle.c). */
#include "core/judge/trial_loop.h"

static const char *group_name(int g)
{
    return g == EERL_GROUP_GEN ? "generation" : "training";
}

/* Section 6.2: a training-only slowdown is judged from the recorded arrivals. */
static void judge(const struct eerl__ctx *cx, const eerl_setting *s, const struct eerl__acc *a,
                  struct eerl__ratios *r)
{
    if (s->mhz[EERL_GROUP_GEN] == EERL_CLOCK_GOVERNOR &&
        s->mhz[EERL_GROUP_TRAIN] != EERL_CLOCK_GOVERNOR)
        eerl__ratios_arrivals(cx, a, r);
    else
        eerl__ratios_whole(cx, a, r);
}

/* The pool that usually arrives first waits at the rendezvous: its slack is searched first.
 * A tie goes to training, which the paper found to be the useful target. */
static int calibrated(const struct eerl__ctx *cx, const eerl_setting *next)
{
    unsigned gen_first = 0, i;
    struct eerl__parts m;
    int first;

    for (i = 0; i < cx->refs->n; i++) {
        eerl__obs_parts(cx->layout, eerl__refs_at(cx->refs, i), &m);
        if (m.t_gen < m.t_train)
            gen_first++;
    }
    first = 2 * gen_first > cx->refs->n ? EERL_GROUP_GEN : EERL_GROUP_TRAIN;
    eerl__rec_emit(cx->rec, EERL_EV_CALIBRATED, next,
                   "predictor fitted on %zu governor updates; generation arrived first in %u: "
                   "search the %s pool first",
                   cx->refs->n, gen_first, group_name(first));
    return first;
}

static const struct eerl__trials_mode drained_mode = {
    .ratios = judge,
    .calibrated = calibrated,
    .gap_before_first = 1,
    .names_slow_group = 0,
};

static void dr_observe(const struct eerl__ctx *cx, void *st, const eerl_obs *obs, int usable,
                       eerl_setting *next)
{
    eerl__trials_observe(cx, st, &drained_mode, obs, usable, next);
}

const struct eerl__judge_ops eerl__judge_drained = {
    .name = "paper-drained",
    .st_size = sizeof(struct eerl__trials_st),
    .observe = dr_observe,
    .state = eerl__trials_state,
    .ratios = judge,
    .after = EERL__AFTER_MONITOR_OWN,
};

/* The global-clock baseline's proposer (beyond the paper; how Zeus's power-limit optimizer picks
 * a power limit under a maximum-slowdown constraint): one clock for every group, swept downward
 * one grid step at a time from the peak; the sweep stops at the first step slower than the
 * allowance, or at the lowest clock, and the passing clock with the lowest energy is kept.
 * Its judge is judge/baselines.c's global-clock (the whole update against the governor
 * prediction). Owns only its state struct. */
#include <stdio.h>

#include "core/propose.h"

struct sweep_st {
    unsigned clock; /* the sweep's current clock */
    unsigned best_clock;
    double best_energy;
};

static void stop(const struct eerl__ctx *cx, const struct sweep_st *st, const char *why,
                 struct eerl__move *ret)
{
    ret->kind = EERL__MOVE_STOP;
    ret->s = st->best_clock ? eerl__grid_setting(cx->grid, st->best_clock, st->best_clock)
                            : eerl__grid_setting(cx->grid, 0, 0);
    snprintf(ret->why, sizeof(ret->why), "%s", why);
}

static void step_down(const struct eerl__ctx *cx, struct sweep_st *st, struct eerl__move *ret)
{
    unsigned c;

    if (eerl__grid_step(cx->grid, st->clock, -(int)cx->cfg->grid_mhz, &c) < 0 ||
        c == EERL_CLOCK_GOVERNOR) {
        stop(cx, st, "the sweep reached the lowest clock", ret);
        return;
    }
    st->clock = c;
    ret->s = eerl__grid_setting(cx->grid, c, c);
    snprintf(ret->label, sizeof(ret->label), "sweep: ");
}

static void sweep_start(const struct eerl__ctx *cx, void *vst, const struct eerl__outcome *from,
                        struct eerl__move *ret)
{
    struct sweep_st *st = vst;

    (void)from;
    st->clock = EERL_CLOCK_GOVERNOR;
    st->best_clock = 0;
    st->best_energy = 1.0;
    step_down(cx, st, ret);
}

static void sweep_next(const struct eerl__ctx *cx, void *vst, const struct eerl__outcome *o,
                       struct eerl__move *ret)
{
    struct sweep_st *st = vst;

    if (o->verdict == EERL_VERDICT_PASS && o->energy < st->best_energy) {
        st->best_energy = o->energy;
        st->best_clock = st->clock;
    }
    if (o->too_slow) {
        stop(cx, st, "the next clock down breaks the maximum slowdown", ret);
        return;
    }
    step_down(cx, st, ret);
}

const struct eerl__proposer_ops eerl__propose_sweep = {
    .name = "sweep",
    .st_size = sizeof(struct sweep_st),
    .start = sweep_start,
    .next = sweep_next,
};

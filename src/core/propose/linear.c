/* The linear-search baseline's proposer (beyond the paper; GEOPM's energy-efficient agent): per
 * group in turn (generation, then training), a downward linear search one grid step at a time;
 * the first clock past the allowance ends the group and the last passing one is kept; once every
 * group is done the setting is locked for good. Its judge is judge/baselines.c's
 * linear-search (the best of 5 samples of the group's phase time). Owns only its state struct. */
#include <stdio.h>

#include "core/propose.h"

struct linear_st {
    int group;
    unsigned clk[2]; /* settled clocks so far */
};

/* The next clock for the current group, or the next group, or the lock. */
static void step_down(const struct eerl__ctx *cx, struct linear_st *st, struct eerl__move *ret)
{
    unsigned c;

    while (st->group < 2) {
        if (eerl__grid_step(cx->grid, st->clk[st->group], -(int)cx->cfg->grid_mhz, &c) == 0 &&
            c != EERL_CLOCK_GOVERNOR) {
            unsigned clk[2] = {st->clk[0], st->clk[1]};
            clk[st->group] = c;
            ret->group = st->group;
            ret->s = eerl__grid_setting(cx->grid, clk[0], clk[1]);
            snprintf(ret->label, sizeof(ret->label), "group %d: ", st->group);
            return;
        }
        st->group++;
    }
    ret->kind = EERL__MOVE_STOP;
    ret->s = eerl__grid_setting(cx->grid, st->clk[0], st->clk[1]);
    snprintf(ret->why, sizeof(ret->why), "every group searched (one-shot)");
}

static void linear_start(const struct eerl__ctx *cx, void *vst, const struct eerl__outcome *from,
                         struct eerl__move *ret)
{
    struct linear_st *st = vst;

    (void)from;
    st->group = 0;
    st->clk[0] = st->clk[1] = EERL_CLOCK_GOVERNOR;
    step_down(cx, st, ret);
}

static void linear_next(const struct eerl__ctx *cx, void *vst, const struct eerl__outcome *o,
                        struct eerl__move *ret)
{
    struct linear_st *st = vst;

    if (o->verdict == EERL_VERDICT_PASS)
        st->clk[st->group] = o->s.mhz[st->group];
    else
        st->group++;
    step_down(cx, st, ret);
}

const struct eerl__proposer_ops eerl__propose_linear = {
    .name = "linear",
    .st_size = sizeof(struct linear_st),
    .start = linear_start,
    .next = linear_next,
};

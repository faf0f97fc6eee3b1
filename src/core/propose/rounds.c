/* The paper's proposer for the asynchronous modes (sections 6.2, 6.3; drained and in-flight): two
 * rounds, one pool each. Round 1 searches the pool with slack (its judge says which: in drained
 * the one that usually reaches the rendezvous first, in-flight the less busy one) on the first
 * grid (cfg.first_grid_mhz, starting cfg.start_drop_first_mhz below the peak) with the other pool
 * at the governor; round 2 lowers the other pool on the second grid with round 1's result held,
 * and keeps it only if the pair uses less energy than round 1's setting alone (the energy bar).
 * On a pool's line a pass goes one grid step lower and a fail one step higher; a round's best is
 * confirmed on fresh updates (the next best if it fails); after round 2 the result is locked.
 * Its judges are judge/drained.c and judge/inflight.c. Owns only its state. */
#include <stdio.h>
#include <string.h>

#include "core/propose.h"
#include "core/ratios.h"

struct rounds_st {
    int round;
    int group[2];
    unsigned grid[2], drop[2];
    eerl_setting base; /* what the rounds so far have kept */
    double base_energy;
    unsigned trials; /* of this round */
    struct eerl__tried_set tried;
};

static const char *group_name(int g)
{
    return g == EERL_GROUP_GEN ? "generation" : "training";
}

/* A candidate or confirmation of this round: its label and energy bar. */
static void candidate(const struct rounds_st *st, int kind, const eerl_setting *s,
                      struct eerl__move *ret)
{
    ret->kind = kind;
    ret->s = *s;
    ret->energy_bar = st->round == 0 ? 1.0 : st->base_energy;
    ret->fail_note = st->round == 1 ? " (round 1 setting alone)" : NULL;
    snprintf(ret->label, sizeof(ret->label), "round %d (%s pool): ", st->round + 1,
             group_name(st->group[st->round]));
}

static void stop(const eerl_setting *s, const char *why, struct eerl__move *ret)
{
    ret->kind = EERL__MOVE_STOP;
    ret->s = *s;
    snprintf(ret->why, sizeof(ret->why), "%s", why);
}

static void start_round(const struct eerl__ctx *cx, struct rounds_st *st, struct eerl__move *ret)
{
    unsigned clock = 0;
    eerl_setting s;

    memset(&st->tried, 0, sizeof(st->tried));
    st->trials = 0;
    if (eerl__grid_step(cx->grid, EERL_CLOCK_GOVERNOR, -(int)st->drop[st->round], &clock) < 0 ||
        clock == EERL_CLOCK_GOVERNOR) {
        stop(&st->base, "no supported clock below the governor's peak", ret);
        return;
    }
    s = eerl__grid_with_group(cx->grid, &st->base, st->group[st->round], clock);
    candidate(st, EERL__MOVE_TRY, &s, ret);
}

/* A round ends with its confirmed setting (or none): round 1 hands over to round 2, round 2
 * ends the search. */
static void end_round(const struct eerl__ctx *cx, struct rounds_st *st, const eerl_setting *result,
                      double energy, struct eerl__move *ret)
{
    char b[48];
    eerl_setting keep = result ? *result : st->base;

    eerl__rec_emit(cx->rec, EERL_EV_ROUND, &keep, "round %d (%s pool) ends with %s%s",
                   st->round + 1, group_name(st->group[st->round]),
                   eerl_setting_str(&keep, b, sizeof(b)),
                   result ? "" : " (no lower clock qualified)");
    if (result) {
        st->base = *result;
        st->base_energy = energy;
    }
    if (st->round == 0) {
        st->round = 1;
        start_round(cx, st, ret);
        return;
    }
    stop(&st->base,
         eerl_setting_is_governor(&st->base) ? "no tested setting passed; the governor stays"
                                             : "both pools searched",
         ret);
}

/* The next clock on the round's pool line from the judged one: a pass one grid step lower, a
 * fail one higher; 0 when that setting was tried already or reaches the governor. */
static int line_next(const struct eerl__ctx *cx, struct rounds_st *st,
                     const struct eerl__outcome *o, eerl_setting *ret)
{
    int g = st->group[st->round];
    unsigned grid = st->grid[st->round], nv;
    eerl_setting s;

    if (eerl__grid_step(cx->grid, o->s.mhz[g],
                        o->verdict == EERL_VERDICT_PASS ? -(int)grid : (int)grid, &nv) < 0 ||
        nv == EERL_CLOCK_GOVERNOR)
        return 0;
    s = eerl__grid_with_group(cx->grid, &st->base, g, nv);
    if (eerl__tried_find(&st->tried, &s))
        return 0;
    *ret = s;
    return 1;
}

/* The best passing setting of the round not yet refused by a confirmation, to confirm. */
static int confirm_best(const struct rounds_st *st, struct eerl__move *ret)
{
    const struct eerl__tried *best = eerl__tried_best(&st->tried);

    if (!best)
        return 0;
    candidate(st, EERL__MOVE_CONFIRM, &best->s, ret);
    return 1;
}

static void rounds_start(const struct eerl__ctx *cx, void *vst, const struct eerl__outcome *from,
                         struct eerl__move *ret)
{
    struct rounds_st *st = vst;
    int first = from->slack_group >= 0 ? from->slack_group : EERL_GROUP_TRAIN;

    st->group[0] = first;
    st->group[1] = first == EERL_GROUP_GEN ? EERL_GROUP_TRAIN : EERL_GROUP_GEN;
    st->grid[0] = cx->cfg->first_grid_mhz;
    st->grid[1] = cx->cfg->second_grid_mhz;
    st->drop[0] = cx->cfg->start_drop_first_mhz;
    st->drop[1] = cx->cfg->start_drop_second_mhz;
    memset(&st->base, 0, sizeof(st->base));
    st->base_energy = 1.0;
    st->round = 0;
    start_round(cx, st, ret);
}

static void rounds_next(const struct eerl__ctx *cx, void *vst, const struct eerl__outcome *o,
                        struct eerl__move *ret)
{
    struct rounds_st *st = vst;
    struct eerl__tried *t;
    eerl_setting s;

    if (!o->confirm) {
        st->trials++;
        (void)eerl__tried_put(&st->tried, &o->s, o->verdict, o->too_slow, o->r);
    } else {
        if (o->verdict == EERL_VERDICT_PASS) {
            end_round(cx, st, &o->s, o->energy, ret);
            return;
        }
        if ((t = eerl__tried_find(&st->tried, &o->s)))
            t->confirm_failed = 1;
        if (confirm_best(st, ret))
            return;
    }
    if (st->trials < cx->cfg->max_trials && line_next(cx, st, o, &s))
        candidate(st, EERL__MOVE_TRY, &s, ret);
    else if (!confirm_best(st, ret))
        end_round(cx, st, NULL, 0, ret);
}

const struct eerl__proposer_ops eerl__propose_rounds = {
    .name = "rounds",
    .st_size = sizeof(struct rounds_st),
    .start = rounds_start,
    .next = rounds_next,
};

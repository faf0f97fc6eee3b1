/* eerl's proposer in in-flight mode (beyond the paper, in place of section 6.3's two rounds;
 * docs/internals/controller.md "The eerl strategy"): a descent one pool at a time. Its judge is
 * judge/eerl_inflight.c (the rate against the governor's and the run's account).
 *
 * - Training first (in-flight the training pool usually waits for the next batch, so its clock
 *   costs little or no throughput and saves the most), then generation. Training starts
 *   cfg.start_drop_train_mhz below the peak, generation one grid step.
 * - A step that falls short goes back and halves that group's step; below half the grid
 *   (training: below the grid, its energy curve is flat near its best clock) the group is done;
 *   both done = lock.
 * - With the pools' arrivals reported, a training step that a model of training's arrival over
 *   generation's (through the governor's and the last passing training setting's) puts past
 *   generation is not tried.
 * - No step is taken when fewer updates remain than a test needs.
 * - After lock, credit left over (the judge says when) lets generation search on with half-grid
 *   steps; training first, grid steps, while the update waits for training.
 *   Owns only its state struct; reads the controller's references (arrivals). */
#include <stdio.h>
#include <string.h>

#include "core/propose.h"

#define PD_TEST_MIN 4 /* updates a test takes at least (judge/eerl_inflight.c's EI_N_MIN) */

struct pool_descent_st {
    int group; /* group being searched: training, then generation; -1 when done */
    unsigned step[2];
    unsigned floor_[2]; /* effective clock known to fall short */
    eerl_setting prev;  /* where the last step came from */
    /* training's arrival (its busy time) over generation's, at the governor and at the last
     * training setting that passed (f_pass, MHz; 0 before one has) */
    double q_gov, q_pass;
    unsigned f_pass;
};

static int pd_init(const struct eerl__ctx *cx, void *vst)
{
    struct pool_descent_st *st = vst;

    st->group = EERL_GROUP_TRAIN;
    st->step[EERL_GROUP_TRAIN] = cx->cfg->start_drop_train_mhz;
    st->step[EERL_GROUP_GEN] = cx->cfg->grid_mhz;
    return 0;
}

/* In-flight the training pool mostly waits for the next batch, so a training clock at which its
 * busy time would outlast generation's costs rate (on the twin a step to 540 MHz cost a third of
 * it). Training's arrival over generation's (a ratio, so that the work's growth over the run
 * cancels) is modelled as a + b / f through its governor value and the last passing training
 * setting's; a step the model puts past 1 (training arriving last) is not tried. Without
 * arrivals, or before a training setting below the peak has passed (one point cannot tell how
 * much of training's time follows the clock), nothing is skipped; nor once training arrived last at
 * the setting that passed (responses collapsed, so training is the pool the update waits for
 * whatever its clock): a step then costs rate in proportion, as in the synchronous modes, and its
 * test measures that loss against the budget. */
static int past_the_wait(const struct eerl__ctx *cx, const struct pool_descent_st *st, unsigned mhz)
{
    double f0 = (double)cx->grid->peak, f1 = (double)st->f_pass,
           f = (double)eerl__grid_eff(cx->grid, mhz);
    double b;

    if (st->q_gov <= 0 || st->f_pass == 0 || f1 >= f0 || st->q_pass <= 0)
        return 0;
    if (st->q_pass >= 1)
        return 0;
    b = (st->q_pass - st->q_gov) / (1 / f1 - 1 / f0);
    if (b < 0)
        b = 0;
    return st->q_gov + b * (1 / f - 1 / f0) > 1;
}

static void stop(struct pool_descent_st *st, const eerl_setting *cur, const char *why,
                 struct eerl__move *ret)
{
    st->group = -1;
    ret->kind = EERL__MOVE_STOP;
    ret->s = *cur;
    snprintf(ret->why, sizeof(ret->why), "%s", why);
}

/* The next step down from cur of the group being searched (training, then generation); stops
 * when both are done. */
static void step_down(const struct eerl__ctx *cx, struct pool_descent_st *st,
                      const struct eerl__outcome *o, const eerl_setting *cur,
                      struct eerl__move *ret)
{
    unsigned min_step = cx->cfg->grid_mhz / 2 ? cx->cfg->grid_mhz / 2 : 1, c;
    char b[48];

    if (o->remaining < PD_TEST_MIN + 2 && cx->cfg->expected_updates) {
        stop(st, cur, "too few updates left for another test to pay", ret);
        return;
    }
    while (st->group >= 0) {
        int g = st->group;

        /* Training's energy curve is flat near its best clock: half-grid steps there cost
         * a test each for next to nothing. */
        while (st->step[g] >= (g == EERL_GROUP_TRAIN ? 2 * min_step : min_step)) {
            if (eerl__grid_step(cx->grid, cur->mhz[g], -(int)st->step[g], &c) == 0 &&
                eerl__grid_eff(cx->grid, c) > st->floor_[g] &&
                !(g == EERL_GROUP_TRAIN && past_the_wait(cx, st, c))) {
                st->prev = *cur;
                ret->kind = EERL__MOVE_TRY;
                ret->group = g;
                ret->s =
                    eerl__grid_setting(cx->grid, g == EERL_GROUP_GEN ? c : cur->mhz[EERL_GROUP_GEN],
                                       g == EERL_GROUP_TRAIN ? c : cur->mhz[EERL_GROUP_TRAIN]);
                eerl__rec_emit(cx->rec, EERL_EV_PROPOSE, &ret->s,
                               "lower %s to %s (step %u MHz; budget allows %.2f%% loss)",
                               cx->cfg->group_names[g], eerl_setting_str(&ret->s, b, sizeof(b)),
                               st->step[g], 100 * o->budget);
                return;
            }
            st->step[g] /= 2;
        }
        st->group = g == EERL_GROUP_TRAIN ? EERL_GROUP_GEN : -1;
    }
    stop(st, cur, "each group at its lowest clock that pays", ret);
}

static void pd_start(const struct eerl__ctx *cx, void *vst, const struct eerl__outcome *from,
                     struct eerl__move *ret)
{
    struct pool_descent_st *st = vst;
    double ag = 0, at = 0;
    size_t i, na = 0;

    for (i = 0; i < cx->refs->n; i++) {
        const eerl_obs *o = eerl__refs_at(cx->refs, i);
        if (o->flags & EERL_OBS_ARRIVALS) {
            ag += o->arrival_s[EERL_POOL_GEN];
            at += o->arrival_s[EERL_POOL_TRAIN];
            na++;
        }
    }
    st->q_gov = na && ag > 0 ? at / ag : 0;
    st->prev = from->s;
    if (from->locked) {
        st->group = -1;
        ret->kind = EERL__MOVE_HOLD;
        ret->s = from->s;
        return;
    }
    step_down(cx, st, from, &from->s, ret);
}

static void pd_next(const struct eerl__ctx *cx, void *vst, const struct eerl__outcome *o,
                    struct eerl__move *ret)
{
    struct pool_descent_st *st = vst;
    eerl_setting back = st->prev;
    int g = st->group;
    char b[48];

    if (o->locked) {
        /* Credit left over after lock: generation searches on from here, half-grid steps;
         * training first, grid steps, when the window waited for it
         * (generation's clock then buys energy but no time, and training's is what the credit
         * can buy: on the twin, collapsing work, the locks held training at 1440-1620 MHz
         * with a budget of 2-3% while the best static setting trains at 1380). */
        st->group = EERL_GROUP_GEN;
        st->step[EERL_GROUP_GEN] = cx->cfg->grid_mhz / 2;
        st->floor_[EERL_GROUP_GEN] = 0;
        if (o->wait_ratio >= 1) {
            st->group = EERL_GROUP_TRAIN;
            st->step[EERL_GROUP_TRAIN] = cx->cfg->grid_mhz;
            st->floor_[EERL_GROUP_TRAIN] = 0;
        }
        step_down(cx, st, o, &o->s, ret);
        return;
    }
    if (o->verdict == EERL_VERDICT_FAIL) {
        unsigned f = eerl__grid_eff(cx->grid, o->s.mhz[g]);

        if (f > st->floor_[g])
            st->floor_[g] = f;
        st->step[g] /= 2;
        eerl__rec_emit(cx->rec, EERL_EV_ADJUST, &back, "back to %s: %s",
                       eerl_setting_str(&back, b, sizeof(b)),
                       o->too_slow ? "too slow for the run's budget" : "no energy saved");
        step_down(cx, st, o, &back, ret);
        return;
    }
    if (g == EERL_GROUP_TRAIN && o->wait_ratio >= 0) {
        st->f_pass = eerl__grid_eff(cx->grid, o->s.mhz[EERL_GROUP_TRAIN]);
        st->q_pass = o->wait_ratio;
    }
    step_down(cx, st, o, &o->s, ret);
}

const struct eerl__proposer_ops eerl__propose_pool_descent = {
    .name = "pool-descent",
    .st_size = sizeof(struct pool_descent_st),
    .init = pd_init,
    .start = pd_start,
    .next = pd_next,
};

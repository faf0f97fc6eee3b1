/* eerl's proposer (beyond the paper, in place of Algorithm 1's candidate steps;
 * docs/internals/controller.md "The eerl strategy"): a budgeted descent with halving steps. Its
 * judge is judge/eerl.c (the run-level account and the sequential test); this file only decides
 * where to go next.
 *
 * - Start: the training group one big step down (cfg.start_drop_train_mhz), or in drained mode as
 *   far down as the training pool's wait for generation at the rendezvous allows, if further.
 * - A passing step leads to the next step down, groups in turn; once every group has stepped,
 *   the one whose last step bought the most energy per loss goes first (trusted only on a quiet
 *   stream). A step that falls short goes back to where it came from and halves the moved
 *   group's step; below half the grid the group stops. All stopped = lock.
 * - A setting that falls behind the budget with no step to undo raises the group furthest below
 *   the peak (drained: the pool the update waits for) by one grid step, and that group stops.
 * - No step is taken when the budget leaves no room below the current setting, nor when fewer
 *   updates remain than a test needs.
 * - After lock, credit left over (the judge says when) opens one more half-grid step per group.
 * Owns only its state struct; reads the controller's references (the rendezvous wait). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/propose.h"
#include "core/ratios.h"

#define DS_GROUPS EERL_GROUPS_MAX
#define DS_TEST_MIN 3      /* updates a test takes at least (judge/eerl.c's EE_N_MIN) */
#define DS_SLACK_REFS 32   /* calibration updates read for the training pool's wait */
#define DS_SLACK_Q 0.2     /* the quantile of generation / training busy time taken */
#define DS_SLACK_USE 0.75  /* the share of that wait the first step may use */
#define DS_EFF_FLOOR 0.002 /* loss of a step counted at least this in its efficiency */
#define DS_EFF_NOISE 0.02  /* per-update loss noise (sd) below which efficiencies steer */

struct descent_st {
    eerl_setting prev; /* where the last step came from */
    unsigned moved;    /* groups changed by the last step (bit per group) */
    unsigned step[DS_GROUPS];
    unsigned floor_[DS_GROUPS]; /* effective clock known to fall short: never that low again */
    int frozen[DS_GROUPS];
    int next_group;
    double eff[DS_GROUPS]; /* energy ratio gained per loss spent by each group's last step */
    unsigned have_eff;
    double prev_energy; /* mean energy ratio of the setting before the last step */
    double prev_loss;   /* and its mean loss */
};

static int descent_init(const struct eerl__ctx *cx, void *vst)
{
    struct descent_st *st = vst;
    int g;

    st->step[EERL_GROUP_GEN] = cx->cfg->start_drop_gen_mhz;
    for (g = 1; g < DS_GROUPS; g++)
        st->step[g] = cx->cfg->start_drop_train_mhz;
    for (g = (int)cx->cfg->n_groups; g < DS_GROUPS; g++)
        st->frozen[g] = 1; /* not declared: stays at the governor */
    st->next_group = EERL_GROUP_TRAIN;
    st->prev_energy = 1.0;
    return 0;
}

/* A setting with these group clocks and the configured idle clock (none if all governor). */
static eerl_setting with_groups(const struct eerl__ctx *cx, const unsigned *clk)
{
    eerl_setting s = eerl__grid_setting(cx->grid, clk[0], clk[1]);
    unsigned g;

    for (g = 2; g < cx->cfg->n_groups; g++)
        s.mhz[g] = clk[g];
    if (cx->cfg->idle_mhz && !s.idle_mhz)
        for (g = 2; g < cx->cfg->n_groups; g++)
            if (clk[g] != EERL_CLOCK_GOVERNOR)
                s.idle_mhz = eerl__grid_snap(cx->grid, cx->cfg->idle_mhz);
    return s;
}

/* Lowers group g of cur by its step (halving past known floors); 0 when g has nowhere to go. */
static int lower_group(const struct eerl__ctx *cx, struct descent_st *st, const eerl_setting *cur,
                       int g, unsigned *ret)
{
    unsigned min_step = cx->cfg->grid_mhz / 2 ? cx->cfg->grid_mhz / 2 : 1, c;

    while (!st->frozen[g] && st->step[g] >= min_step) {
        if (eerl__grid_step(cx->grid, cur->mhz[g], -(int)st->step[g], &c) == 0 &&
            eerl__grid_eff(cx->grid, c) > st->floor_[g]) {
            *ret = c;
            return 1;
        }
        st->step[g] /= 2;
    }
    st->frozen[g] = 1;
    return 0;
}

/* Before lock, the search ends at cur; after, the lock stays. */
static void stop(const struct eerl__outcome *o, const eerl_setting *cur, const char *why,
                 struct eerl__move *ret)
{
    ret->s = *cur;
    if (o->locked) {
        ret->kind = EERL__MOVE_HOLD;
        return;
    }
    ret->kind = EERL__MOVE_STOP;
    snprintf(ret->why, sizeof(ret->why), "%s", why);
}

/* The next step down from cur, groups in turn; stops when no group can move. */
static void step_down(const struct eerl__ctx *cx, struct descent_st *st,
                      const struct eerl__outcome *o, const eerl_setting *cur,
                      struct eerl__move *ret)
{
    unsigned clk[DS_GROUPS], c, n = cx->cfg->n_groups;
    char b[48];
    int k;

    if (o->remaining < 2 * DS_TEST_MIN + 1 && cx->cfg->expected_updates) {
        stop(o, cur, "too few updates left for another test to pay", ret);
        return;
    }
    if (!o->locked && st->prev_loss >= o->budget) {
        /* The setting the search stands on already costs what the rest of the run may lose: a
         * lower clock only loses more, and its test would overdraw the account. */
        stop(o, cur, "the run's budget leaves no room below it", ret);
        return;
    }
    if (st->have_eff == (1u << n) - 1) {
        /* Every group has stepped: the one whose last step bought the most energy per loss goes
         * first (the search spends the budget where it pays most). */
        int g, best = -1;
        for (g = 0; g < (int)n; g++)
            if (!st->frozen[g] && (best < 0 || st->eff[g] > st->eff[best]))
                best = g;
        if (best >= 0)
            st->next_group = best;
    }
    for (k = 0; k < (int)n; k++) {
        int g = (st->next_group + k) % (int)n, j;

        if (!lower_group(cx, st, cur, g, &c))
            continue;
        for (j = 0; j < DS_GROUPS; j++)
            clk[j] = cur->mhz[j];
        clk[g] = c;
        st->prev = *cur;
        st->moved = 1u << g;
        st->next_group = (g + 1) % (int)n;
        ret->kind = EERL__MOVE_TRY;
        ret->s = with_groups(cx, clk);
        ret->energy_bar = st->prev_energy;
        eerl__rec_emit(cx->rec, EERL_EV_PROPOSE, &ret->s,
                       "%s %s to %s (step %u MHz; budget allows %.2f%% loss)",
                       o->locked ? "monitor: try" : "lower", cx->cfg->group_names[g],
                       eerl_setting_str(&ret->s, b, sizeof(b)), st->step[g], 100 * o->budget);
        return;
    }
    stop(o, cur, "every group at its lowest clock that pays", ret);
}

/* The last step fell short: back to where it came from, halve the moved groups' steps, and the
 * next step from there at once (that setting already passed). */
static void step_back(const struct eerl__ctx *cx, struct descent_st *st,
                      const struct eerl__outcome *o, const char *why, struct eerl__move *ret)
{
    eerl_setting back = st->prev;
    char b[48];
    int g;

    for (g = 0; g < DS_GROUPS; g++)
        if (st->moved & (1u << g)) {
            unsigned f = eerl__grid_eff(cx->grid, o->s.mhz[g]);
            if (f > st->floor_[g])
                st->floor_[g] = f;
            st->step[g] /= 2;
        }
    st->moved = 0;
    eerl__rec_emit(cx->rec, EERL_EV_ADJUST, &back, "back to %s: %s",
                   eerl_setting_str(&back, b, sizeof(b)), why);
    step_down(cx, st, o, &back, ret);
}

/* No step to undo but the setting falls behind the budget: raise the group furthest below the
 * peak by one grid step (drained: the pool the update waits for; raising the other one's clock
 * buys no time); that group stops. */
static void raise_one(const struct eerl__ctx *cx, struct descent_st *st,
                      const struct eerl__outcome *o, struct eerl__move *ret)
{
    unsigned c, clk[DS_GROUPS], j;
    char b[48];
    int g = 0;

    ret->kind = EERL__MOVE_HOLD;
    ret->s = o->s;
    for (j = 0; j < DS_GROUPS; j++)
        clk[j] = o->s.mhz[j];
    for (j = 1; j < cx->cfg->n_groups; j++)
        if (eerl__grid_eff(cx->grid, clk[j]) < eerl__grid_eff(cx->grid, clk[g]))
            g = (int)j;
    if (o->late_group >= 0 && eerl__grid_eff(cx->grid, clk[o->late_group]) < cx->grid->peak)
        g = o->late_group;
    if (eerl__grid_step(cx->grid, clk[g], (int)cx->cfg->grid_mhz, &c) < 0)
        return;
    if (eerl__grid_eff(cx->grid, clk[g]) > st->floor_[g])
        st->floor_[g] = eerl__grid_eff(cx->grid, clk[g]);
    clk[g] = c;
    st->frozen[g] = 1;
    st->moved = 0;
    st->prev = o->s;
    ret->s = with_groups(cx, clk);
    snprintf(ret->why, sizeof(ret->why), "raise to %s: the run's account falls short",
             eerl_setting_str(&ret->s, b, sizeof(b)));
}

/* The energy gained per loss spent by the group that took the last step, trusted only on a quiet
 * stream (per-update noise below DS_EFF_NOISE): on a noisy one the ratio of two small noisy
 * differences would steer the search past the allowance. */
static void score_step(struct descent_st *st, const struct eerl__outcome *o)
{
    int g;

    for (g = 0; g < DS_GROUPS; g++)
        if (st->moved == 1u << g) {
            st->have_eff &= ~(1u << g);
            if (o->loss_var < DS_EFF_NOISE * DS_EFF_NOISE) {
                st->eff[g] =
                    (st->prev_energy - o->energy) / fmax(o->loss - st->prev_loss, DS_EFF_FLOOR);
                st->have_eff |= 1u << g;
            }
        }
}

static void descent_next(const struct eerl__ctx *cx, void *vst, const struct eerl__outcome *o,
                         struct eerl__move *ret)
{
    struct descent_st *st = vst;
    int g;

    if (o->verdict == EERL_VERDICT_FAIL) {
        if (st->moved)
            step_back(cx, st, o, o->too_slow ? "too slow for the run's budget" : "no energy saved",
                      ret);
        else
            raise_one(cx, st, o, ret);
        return;
    }
    if (o->locked) {
        /* Credit left over after lock: one more half-grid step per group. */
        for (g = 0; g < (int)cx->cfg->n_groups; g++) {
            st->frozen[g] = 0;
            st->floor_[g] = 0;
            st->step[g] = cx->cfg->grid_mhz / 2;
        }
    } else {
        score_step(st, o);
    }
    st->prev_energy = o->energy;
    st->prev_loss = o->loss;
    st->moved = 0;
    step_down(cx, st, o, &o->s, ret);
}

/* Drained mode: the training pool usually reaches the rendezvous first and waits for
 * generation, so a training clock that stretches its busy time by less than that wait costs no
 * update time. The drop (MHz below the peak) at which training, taken to slow in proportion to
 * the clock (an upper bound: part of its time does not follow the clock), would use
 * DS_SLACK_USE of the wait in the calibration's DS_SLACK_Q-quantile update; 0 without a wait. */
unsigned eerl__slack_drop(const struct eerl__ctx *cx)
{
    double r[DS_SLACK_REFS], q, f;
    size_t n = 0, i, j;

    if (cx->layout != EERL__LAYOUT_OVERLAP)
        return 0;
    for (i = 0; i < cx->refs->n && n < DS_SLACK_REFS; i++) {
        struct eerl__parts m;

        eerl__obs_parts(cx->layout, eerl__refs_at(cx->refs, i), &m);
        if (m.t_train > 0) {
            for (j = n++; j > 0 && r[j - 1] > m.t_gen / m.t_train; j--)
                r[j] = r[j - 1];
            r[j] = m.t_gen / m.t_train;
        }
    }
    if (n < 3)
        return 0;
    q = r[(size_t)(DS_SLACK_Q * (double)(n - 1))];
    if (q <= 1)
        return 0;
    f = (double)cx->grid->peak / (1 + DS_SLACK_USE * (q - 1));
    return (unsigned)((double)cx->grid->peak - f);
}

static void descent_start(const struct eerl__ctx *cx, void *vst, const struct eerl__outcome *from,
                          struct eerl__move *ret)
{
    struct descent_st *st = vst;
    unsigned drop = eerl__slack_drop(cx);
    char b[48];
    int g;

    st->prev = from->s;
    if (from->locked) {
        /* Resumed at a saved lock: monitored by the run's account, nothing lowered again. */
        for (g = 0; g < DS_GROUPS; g++)
            st->frozen[g] = 1;
        ret->kind = EERL__MOVE_HOLD;
        ret->s = from->s;
        return;
    }
    if (drop < st->step[1])
        drop = st->step[1];
    if (eerl__grid_first_train_drop(cx->grid, drop, &ret->s) != 0) {
        ret->kind = EERL__MOVE_STOP;
        ret->s = from->s;
        snprintf(ret->why, sizeof(ret->why), "no supported clock below the governor's peak");
        return;
    }
    st->moved = 1u << EERL_GROUP_TRAIN;
    st->next_group = EERL_GROUP_GEN;
    ret->kind = EERL__MOVE_TRY;
    ret->energy_bar = st->prev_energy;
    eerl__rec_emit(cx->rec, EERL_EV_PROPOSE, &ret->s, "start at %s",
                   eerl_setting_str(&ret->s, b, sizeof(b)));
}

const struct eerl__proposer_ops eerl__propose_descent = {
    .name = "descent",
    .st_size = sizeof(struct descent_st),
    .init = descent_init,
    .start = descent_start,
    .next = descent_next,
};

/* eerl's proposer for two phase groups (beyond the paper; docs/internals/controller.md "The model
 * proposer"), in place of the budgeted descent's fixed, halving steps: every verdict of the judge
 * (judge/eerl.c) refits, from every update run so far, each group's phase time and power
 * against its clock (phase_model.c), and the run goes to the setting of least predicted energy
 * whose predicted loss, corrected by what the current setting measured against its prediction,
 * stays within the loss the run's budget allows per update. So the search does not end at a lock:
 * when the work drifts, the residuals (through the correction and the refit) or the budget
 * (through the account) move the best setting, and the run follows it; an allowance left unused
 * raises the budget's rate and with it the proposal, to the horizon.
 * - Start: the training group one big step down (drained: as far as the training pool's wait at
 *   the rendezvous allows); then generation's first step, the model knowing nothing of it.
 * - Trust region: no proposal more than EE_TRUST_GRIDS grid steps below the lowest clock a
 *   group has run at (the fit extrapolates its last slopes there, no further).
 * - A setting measured clearly too slow is not proposed again, nor anything at or below it in
 *   every group, for PM_AVOID_FOR updates; nothing within the budget: one grid step up for the
 *   group whose raise the model (in drained mode, the rendezvous) says buys the most time.
 * - A move must buy at least PM_MIN_GAIN of energy ratio, unless the current setting is over
 *   the budget; the first time the best is where the run stands, the search locks (and keeps
 *   proposing after it: a move then is an adjustment of the lock).
 * Owns only its state struct (the settings measured too slow); reads the judge's model. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/phase_model.h"
#include "core/propose.h"

#define PM_AVOID 8        /* settings measured too slow, remembered */
#define PM_AVOID_FOR 60   /* ... for this many updates (the work drifts) */
#define PM_TRUST_GRIDS 2  /* a proposal goes at most this many grid steps below a tried clock */
#define PM_OFFSET_N 12.0  /* the current setting's residual counts n / (n + this) */
#define PM_MIN_GAIN 0.002 /* predicted energy ratio gain worth a move */
#define PM_TEST_MIN 3     /* updates a test takes at least (judge/eerl.c's EE_N_MIN) */
#define PM_KAPPA 1.0      /* standard errors of the predicted loss kept inside the budget */
#define PM_FLAT 0.01      /* a last segment buying less energy ratio than this: flat */
#define PM_FLAT_LEFT 300  /* updates left for a step below a flat curve to pay */

struct model_st {
    unsigned avoid[PM_AVOID][EERL__PM_GROUPS];
    uint64_t avoid_at[PM_AVOID];
    unsigned n_avoid;
};

static eerl_setting setting_of(const struct eerl__ctx *cx, const unsigned *clk)
{
    return eerl__grid_setting(cx->grid, clk[0] >= cx->grid->peak ? EERL_CLOCK_GOVERNOR : clk[0],
                              clk[1] >= cx->grid->peak ? EERL_CLOCK_GOVERNOR : clk[1]);
}

/* Runs s next: before lock a candidate (TRY, judged against the budget only: the model already
 * weighed its energy), after lock an adjustment of the lock (HOLD with a reason). */
static void go(const struct eerl__outcome *o, const eerl_setting *s, const char *why,
               struct eerl__move *ret)
{
    ret->s = *s;
    if (o->locked) {
        ret->kind = EERL__MOVE_HOLD;
        snprintf(ret->why, sizeof(ret->why), "%s", why);
    } else {
        ret->kind = EERL__MOVE_TRY;
        ret->energy_bar = INFINITY;
    }
}

/* Nothing the model knows stays within the budget: one grid step up for the group whose raise
 * the model says buys the most time (drained: the pool the measured updates waited for). */
static void raise_one(const struct eerl__ctx *cx, const struct eerl__outcome *o,
                      const unsigned *cur, struct eerl__move *ret)
{
    struct eerl__pm_pred p;
    unsigned c[EERL__PM_GROUPS], best[EERL__PM_GROUPS], g, up;
    double best_loss = INFINITY;
    eerl_setting s;
    char b[48], why[EERL_REASON_MAX];

    ret->kind = EERL__MOVE_HOLD;
    ret->s = o->s;
    for (g = 0; g < EERL__PM_GROUPS; g++) {
        if (cur[g] >= cx->grid->peak ||
            eerl__grid_step(cx->grid, cur[g], (int)cx->cfg->grid_mhz, &up) < 0)
            continue;
        memcpy(c, cur, sizeof(c));
        c[g] = eerl__grid_eff(cx->grid, up);
        if (eerl__pm_predict(o->model, c, &p) == 0 && p.loss < best_loss) {
            best_loss = p.loss;
            memcpy(best, c, sizeof(best));
        }
    }
    if (o->late_group >= 0 && cur[o->late_group] < cx->grid->peak &&
        eerl__grid_step(cx->grid, cur[o->late_group], (int)cx->cfg->grid_mhz, &up) == 0) {
        memcpy(best, cur, sizeof(best));
        best[o->late_group] = eerl__grid_eff(cx->grid, up);
        best_loss = 0;
    }
    if (best_loss == INFINITY)
        return;
    s = setting_of(cx, best);
    snprintf(why, sizeof(why), "raise to %s: nothing within the run's budget",
             eerl_setting_str(&s, b, sizeof(b)));
    if (!o->locked)
        eerl__rec_emit(cx->rec, EERL_EV_PROPOSE, &s, "%s", why);
    go(o, &s, why, ret);
}

/* A group whose curve is flat at its lowest tried clock: its last segment bought no energy
 * (less than PM_FLAT of the group's ratio), so the fit predicts no gain further down and the
 * model alone never goes below it, while the clock where a power-capped group starts to save
 * may lie just there. One grid step below that clock is tried, with the other group where the
 * model puts it within the budget. 0: no such step, out and pp untouched. */
static int flat_step(const struct eerl__ctx *cx, const struct eerl__pm *pm,
                     const struct eerl__pm_ask *ask, unsigned *out, struct eerl__pm_pred *pp)
{
    unsigned g, down;

    for (g = EERL__PM_GROUPS; g-- > 0;) {
        const struct eerl__pm_group *gr = &pm->g[g];
        struct eerl__pm_ask a = *ask;
        struct eerl__pm_pred p;
        unsigned k = gr->n_knot, c[EERL__PM_GROUPS];

        if (!gr->fitted || k < 2 || gr->knot_f[k - 1] != gr->lowest ||
            gr->knot_t[k - 1] * gr->knot_p[k - 1] <
                gr->knot_t[k - 2] * gr->knot_p[k - 2] - PM_FLAT ||
            eerl__grid_step(cx->grid, gr->lowest, -(int)cx->cfg->grid_mhz, &down) < 0)
            continue;
        down = eerl__grid_eff(cx->grid, down);
        if (down >= gr->lowest)
            continue;
        a.lo[g] = a.hi[g] = down;
        a.kappa = 0;
        if (eerl__pm_propose(pm, &a, c, &p) == 0) {
            memcpy(out, c, sizeof(c));
            *pp = p;
            return 1;
        }
    }
    return 0;
}

/* The step below a flat curve: colocated runs with PM_FLAT_LEFT updates left
 * for what it finds to pay. Disaggregated, it moved capture on 32 seeds by -0.003 to +0.008 and
 * let a seed of step work past the allowance; drained, where a pool the update does not wait
 * for is flat in time anyway, it cost up to 0.012 (notes/2026-12-03-flat-step.md). */
static int flat_allowed(const struct eerl__ctx *cx, const struct eerl__outcome *o)
{
    return cx->mode == EERL_MODE_COLOCATED && o->remaining >= PM_FLAT_LEFT;
}

/* Before lock the search ends where it stands; after, the lock stays. */
static void hold(const struct eerl__outcome *o, const char *why, struct eerl__move *ret)
{
    ret->s = o->s;
    ret->kind = o->locked ? EERL__MOVE_HOLD : EERL__MOVE_STOP;
    if (!o->locked)
        snprintf(ret->why, sizeof(ret->why), "%s", why);
}

static void model_start(const struct eerl__ctx *cx, void *vst, const struct eerl__outcome *from,
                        struct eerl__move *ret)
{
    unsigned drop = eerl__slack_drop(cx);
    char b[48];

    (void)vst;
    if (from->locked) {
        /* Resumed at a saved lock: it stays, and the model's proposals adjust it. */
        ret->kind = EERL__MOVE_HOLD;
        ret->s = from->s;
        return;
    }
    if (drop < cx->cfg->start_drop_train_mhz)
        drop = cx->cfg->start_drop_train_mhz;
    if (eerl__grid_first_train_drop(cx->grid, drop, &ret->s) != 0) {
        ret->kind = EERL__MOVE_STOP;
        ret->s = from->s;
        snprintf(ret->why, sizeof(ret->why), "no supported clock below the governor's peak");
        return;
    }
    ret->kind = EERL__MOVE_TRY;
    ret->energy_bar = INFINITY;
    eerl__rec_emit(cx->rec, EERL_EV_PROPOSE, &ret->s, "start at %s",
                   eerl_setting_str(&ret->s, b, sizeof(b)));
}

static void model_next(const struct eerl__ctx *cx, void *vst, const struct eerl__outcome *o,
                       struct eerl__move *ret)
{
    struct model_st *st = vst;
    const struct eerl__pm *pm = o->model;
    struct eerl__pm_ask ask;
    struct eerl__pm_pred pc, pp;
    unsigned cur[EERL__PM_GROUPS], out[EERL__PM_GROUPS], i, j, g;
    unsigned trust = PM_TRUST_GRIDS * cx->cfg->grid_mhz;
    double r = o->budget, n = o->n_updates;
    int slow = o->too_slow, explore_gen = 0, explore_flat = 0, have_cur, hold_here;
    eerl_setting s;
    char b[48], why[EERL_REASON_MAX];

    for (g = 0; g < EERL__PM_GROUPS; g++)
        cur[g] = eerl__grid_eff(cx->grid, o->s.mhz[g]);
    if (!pm) {
        hold(o, "no model to propose from", ret);
        return;
    }
    if (o->remaining < 2 * PM_TEST_MIN + 1 && cx->cfg->expected_updates && !slow) {
        hold(o, "too few updates left for another test to pay", ret);
        return;
    }
    /* Forget the slow settings measured long ago; remember this one. */
    for (i = j = 0; i < st->n_avoid; i++)
        if (cx->update < st->avoid_at[i] + PM_AVOID_FOR) {
            memcpy(st->avoid[j], st->avoid[i], sizeof(st->avoid[i]));
            st->avoid_at[j++] = st->avoid_at[i];
        }
    st->n_avoid = j;
    if (slow && !eerl_setting_is_governor(&o->s)) {
        if (st->n_avoid == PM_AVOID) {
            memmove(st->avoid[0], st->avoid[1], sizeof(st->avoid[0]) * (PM_AVOID - 1));
            memmove(&st->avoid_at[0], &st->avoid_at[1], sizeof(st->avoid_at[0]) * (PM_AVOID - 1));
            st->n_avoid--;
        }
        memcpy(st->avoid[st->n_avoid], cur, sizeof(cur));
        st->avoid_at[st->n_avoid++] = cx->update;
    }
    memset(&ask, 0, sizeof(ask));
    ask.clocks = cx->grid->clocks;
    ask.n_clocks = cx->grid->n;
    ask.max_loss = r;
    ask.kappa = PM_KAPPA;
    ask.avoid = (const unsigned(*)[EERL__PM_GROUPS])st->avoid;
    ask.n_avoid = st->n_avoid;
    ask.no_governor = 1;
    for (g = 0; g < EERL__PM_GROUPS; g++) {
        unsigned low = pm->g[g].lowest ? pm->g[g].lowest : cx->grid->peak;
        if (cur[g] < low)
            low = cur[g];
        ask.lo[g] = low > trust ? low - trust : 0;
        ask.hi[g] = cx->grid->peak;
    }
    /* Generation has not run below the governor yet: its first step is fixed (the model knows
     * nothing of it) and training stays where it is. */
    if (!pm->g[EERL_GROUP_GEN].lowest && !slow) {
        unsigned c;
        if (eerl__grid_step(cx->grid, EERL_CLOCK_GOVERNOR, -(int)cx->cfg->start_drop_gen_mhz, &c) ==
            0) {
            explore_gen = 1;
            ask.lo[EERL_GROUP_GEN] = ask.hi[EERL_GROUP_GEN] = c;
            ask.lo[EERL_GROUP_TRAIN] = ask.hi[EERL_GROUP_TRAIN] = cur[EERL_GROUP_TRAIN];
        }
    }
    have_cur = eerl__pm_predict(pm, cur, &pc) == 0;
    if (have_cur && n >= PM_TEST_MIN && !eerl_setting_is_governor(&o->s))
        ask.offset = (o->loss - pc.loss) * n / (n + PM_OFFSET_N);
    if (eerl__pm_propose(pm, &ask, out, &pp) < 0) {
        raise_one(cx, o, cur, ret);
        return;
    }
    for (g = 0; g < EERL__PM_GROUPS; g++)
        if (out[g] != cur[g])
            break;
    hold_here =
        g == EERL__PM_GROUPS || (!slow && !explore_gen && have_cur && pc.loss + ask.offset <= r &&
                                 pp.energy > pc.energy - PM_MIN_GAIN);
    if (hold_here && !slow && !explore_gen && flat_allowed(cx, o) &&
        flat_step(cx, pm, &ask, out, &pp)) {
        explore_flat = 1;
    } else if (hold_here) {
        hold(o, "the model's best within the run's budget", ret);
        return;
    }
    s = setting_of(cx, out);
    snprintf(why, sizeof(why),
             "model: %s %s (predicted loss %.2f%%, energy ratio %.3f; budget allows %.2f%%)",
             slow           ? "raise to"
             : explore_gen  ? "try generation at"
             : explore_flat ? "try lower, flat at the lowest clock tried:"
                            : "move to",
             eerl_setting_str(&s, b, sizeof(b)), 100 * (pp.loss + ask.offset), pp.energy, 100 * r);
    if (!o->locked)
        eerl__rec_emit(cx->rec, EERL_EV_PROPOSE, &s, "%s", why);
    go(o, &s, why, ret);
}

const struct eerl__proposer_ops eerl__propose_model = {
    .name = "model",
    .st_size = sizeof(struct model_st),
    .start = model_start,
    .next = model_next,
};

/* See prior.h. A job with a matching prior does not search. Its calibration stops early (the
 * record's gate, eerl__prior_gate: PRIOR_CAL_SYNC governor updates, in flight PRIOR_CAL_INFLIGHT,
 * instead of cfg.fast_calibration_updates) when the governor's time per valid token it measured
 * agrees with the earlier jobs' within the noise (PRIOR_SIGMAS standard errors of their
 * difference); it then proposes the earlier jobs' setting as the candidate. The judge tests it as
 * any candidate (its loss against this job's governor predictor, its energy against the
 * governor's); a pass locks it, a narrow failure raises it half a grid step and tests again (at
 * most PRIOR_RAISES times). The lock is then watched as a resumed one is: credit may lower it a
 * grid step at a time, and a failure goes back to the verified setting, or from there raises one
 * clock a step. A refusal at the gate lets the calibration go on to its full length; a refusal
 * after it, or a candidate that fails outright, hands the search to the strategy's own proposer
 * from the governor, with an event that says what was expected and what was found; the judge
 * first takes the calibration the gate cut short to its full length (EERL__MOVE_CALIBRATE). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/grid.h"
#include "core/propose/prior.h"
#include "core/record.h"
#include "core/refs.h"

#define PRIOR_SIGMAS 3.0     /* standard errors the two governor figures may differ by */
#define PRIOR_CAL_SYNC 6     /* governor updates a matching prior's calibration takes */
#define PRIOR_CAL_INFLIGHT 8 /* ... in flight */
#define PRIOR_RAISES 2       /* failed tests that raise the setting a step and try again */

/* The job's own governor references: mean and variance of their time per valid token. */
static unsigned own_tpt(const struct eerl__ctx *cx, double *mean, double *var)
{
    double s = 0, s2 = 0, x;
    size_t i, n = cx->refs->n;

    for (i = 0; i < n; i++) {
        const eerl_obs *o = eerl__refs_at(cx->refs, i);
        x = o->time_s / o->valid_tokens;
        s += x;
        s2 += x * x;
    }
    *mean = n ? s / (double)n : 0;
    *var = n > 1 ? fmax(0.0, (s2 - (double)n * *mean * *mean) / (double)(n - 1)) : 0;
    return (unsigned)n;
}

/* ret: a move of this kind to s, for every group, judged against the governor's energy. */
static void move_to(struct eerl__move *ret, int kind, const eerl_setting *s)
{
    memset(ret, 0, sizeof(*ret));
    ret->kind = kind;
    ret->s = *s;
    ret->group = -1;
    ret->energy_bar = 1;
}

/* The search goes to the strategy's own proposer, from the governor. A calibration the gate cut
 * short (recal) goes on to its full length first, and the judge starts the proposer again at its
 * end: a refused prior leaves the job the calibration it would have had without one (on the twin
 * an in-flight seed whose 8 calibration updates read the governor 1.6% slow searched on that
 * reference and ended 2.8% below the governor's throughput). */
static void hand_over(const struct eerl__ctx *cx, struct eerl__prior_st *st,
                      const struct eerl__outcome *from, int recal, struct eerl__move *ret)
{
    struct eerl__outcome o = *from;

    st->phase = EERL__PRIOR_HANDED;
    memset(&o.s, 0, sizeof(o.s));
    if (recal) {
        move_to(ret, EERL__MOVE_CALIBRATE, &o.s);
        return;
    }
    o.verdict = EERL_VERDICT_NONE;
    o.loss = o.energy = o.loss_var = 0;
    o.locked = 0;
    o.n_updates = 0;
    st->inner->start(cx, st->inner_st, &o, ret);
}

/* The job's governor time per valid token against the prior's: 1 when the two agree within
 * PRIOR_SIGMAS standard errors of their difference, else 0 with the refusal's event about s. */
static int matches(const struct eerl__ctx *cx, const struct eerl__prior_st *st,
                   const eerl_setting *s)
{
    double m, v, se, d;
    unsigned n = own_tpt(cx, &m, &v);

    /* In-flight an update carries the work of the one before, so the calibration's updates are
     * not independent: their mean is given one update's scatter (on the twin the calibration
     * means of 4 seeds spread over 6%, their updates' standard error said 0.4-0.6%). */
    se = sqrt(v / (cx->mode == EERL_MODE_INFLIGHT ? 1.0 : fmax(1, n)) +
              st->tpt_var / fmax(1, st->tpt_n));
    d = m - st->tpt_mean;
    if (n >= 2 && fabs(d) <= PRIOR_SIGMAS * se)
        return 1;
    eerl__rec_emit(cx->rec, EERL_EV_HOLD, s,
                   "prior refused: governor time per valid token expected %.4g ms, found "
                   "%.4g ms (%+.1f%%, noise allows %.1f%%): fresh search",
                   1e3 * st->tpt_mean, 1e3 * m, 100 * d / st->tpt_mean,
                   100 * PRIOR_SIGMAS * se / st->tpt_mean);
    return 0;
}

unsigned eerl__prior_cal_updates(const struct eerl__ctx *cx)
{
    unsigned k = cx->mode == EERL_MODE_INFLIGHT ? PRIOR_CAL_INFLIGHT : PRIOR_CAL_SYNC;

    return k < cx->cfg->fast_calibration_updates ? k : 0;
}

int eerl__prior_gate(void *ps)
{
    struct eerl__prior_st *st = ps;
    const struct eerl__ctx *cx = st->cx;
    eerl_setting gov;

    memset(&gov, 0, sizeof(gov));
    if (st->phase != EERL__PRIOR_WAIT)
        return 0;
    if (!matches(cx, st, &gov)) {
        st->phase = EERL__PRIOR_HANDED; /* the calibration goes on; the search starts afresh */
        return 0;
    }
    st->phase = EERL__PRIOR_MATCHED;
    eerl__rec_emit(cx->rec, EERL_EV_HOLD, &gov,
                   "prior matches after %zu governor updates: calibration ends", cx->refs->n);
    return 1;
}

static void prior_start(const struct eerl__ctx *cx, void *ps, const struct eerl__outcome *from,
                        struct eerl__move *ret)
{
    struct eerl__prior_st *st = ps;
    double m, v;
    char b[48];

    if (from->locked || (st->phase != EERL__PRIOR_WAIT && st->phase != EERL__PRIOR_MATCHED)) {
        /* a resumed lock (the prior has no say), or refused at the calibration's gate */
        st->phase = EERL__PRIOR_HANDED;
        st->inner->start(cx, st->inner_st, from, ret);
        return;
    }
    if (st->phase == EERL__PRIOR_WAIT && !matches(cx, st, &from->s)) {
        hand_over(cx, st, from, 0, ret);
        return;
    }
    (void)own_tpt(cx, &m, &v);
    st->phase = EERL__PRIOR_TESTING;
    move_to(ret, EERL__MOVE_TRY, &st->s);
    eerl__rec_emit(cx->rec, EERL_EV_PROPOSE, &st->s,
                   "prior: verify %s (median of %u earlier jobs' locks, %u locked it); governor "
                   "time per valid "
                   "token %.4g ms, expected %.4g ms",
                   eerl__setting_str(&st->s, b, sizeof(b)), st->jobs, st->votes, 1e3 * m,
                   1e3 * st->tpt_mean);
}

/* A move that lowers a clock by more than one grid step. */
static int too_far(const struct eerl__ctx *cx, const eerl_setting *from, const eerl_setting *to)
{
    unsigned g;

    for (g = 0; g < cx->cfg->n_groups; g++) {
        unsigned a = eerl__grid_eff(cx->grid, from->mhz[g]),
                 b = eerl__grid_eff(cx->grid, to->mhz[g]);
        if (b + cx->cfg->grid_mhz < a)
            return 1;
    }
    return 0;
}

/* s with one clock raised: the group the judged updates waited for (late), generation when that
 * is not known; by delta MHz, snapped, or to the next supported clock (delta 0). 1 when that is
 * another setting and not the governor's. */
static int raise_late(const struct eerl__ctx *cx, const eerl_setting *s, int late, unsigned delta,
                      eerl_setting *up)
{
    unsigned g = late >= 0 && (unsigned)late < cx->cfg->n_groups ? (unsigned)late : 0;

    *up = *s;
    if (!s->mhz[g])
        return 0;
    if (delta)
        up->mhz[g] = eerl__grid_snap(cx->grid, eerl__grid_eff(cx->grid, s->mhz[g]) + delta);
    else if (eerl__grid_step(cx->grid, s->mhz[g], 1, &up->mhz[g]) < 0)
        return 0;
    return !eerl_setting_equal(up, s) && !eerl_setting_is_governor(up);
}

/* The prior's setting failed its test by less than cfg.big_loss over its budget, at less energy
 * than the governor: the late group (generation when not known) half a grid step higher, tested
 * again, at most PRIOR_RAISES times (in flight the earlier jobs' locks are where their runs ended,
 * lowered by the credit the end of their horizon freed, and the median failed its test in 6 of 8
 * seeds on the twin). 1 with the move made. */
static int raise_setting(const struct eerl__ctx *cx, struct eerl__prior_st *st,
                         const struct eerl__outcome *o, struct eerl__move *ret)
{
    eerl_setting up;
    char b[48], c[48];

    if (st->raises >= PRIOR_RAISES || o->loss > o->budget + cx->cfg->big_loss || o->energy >= 1 ||
        !raise_late(cx, &st->s, o->late_group, cx->cfg->grid_mhz / 2, &up))
        return 0;
    eerl__rec_emit(cx->rec, EERL_EV_HOLD, &up,
                   "prior: %s found loss %.2f%% (budget %.2f%%), energy ratio %.3f: %s tried",
                   eerl__setting_str(&st->s, b, sizeof(b)), 100 * o->loss, 100 * o->budget,
                   o->energy, eerl__setting_str(&up, c, sizeof(c)));
    st->s = up;
    st->raises++;
    move_to(ret, EERL__MOVE_TRY, &up);
    return 1;
}

/* After the lock, a failure: back to the verified setting when credit had moved below it, else
 * the late group one supported clock up (which becomes the setting fallen back to). */
static int back_or_up(const struct eerl__ctx *cx, struct eerl__prior_st *st,
                      const struct eerl__outcome *o, eerl_setting *up)
{
    unsigned g;

    for (g = 0; g < cx->cfg->n_groups; g++)
        if (eerl__grid_eff(cx->grid, o->s.mhz[g]) < eerl__grid_eff(cx->grid, st->s.mhz[g])) {
            *up = st->s;
            return 1;
        }
    if (!raise_late(cx, &o->s, o->late_group, 0, up))
        return 0;
    st->s = *up;
    return 1;
}

static void prior_next(const struct eerl__ctx *cx, void *ps, const struct eerl__outcome *o,
                       struct eerl__move *ret)
{
    struct eerl__prior_st *st = ps;
    struct eerl__outcome at = *o;
    eerl_setting up;
    char b[48];

    if (st->phase == EERL__PRIOR_VERIFIED && o->locked && o->verdict == EERL_VERDICT_PASS) {
        /* Credit left over may move the verified lock a grid step at a time, not further: the
         * strategy's own model has seen two settings (the governor and this one), and a jump it
         * extrapolated from them cost more than it saved (on the twin, a 4.3% loss for 3
         * updates, and a seed beyond the allowance). */
        st->inner->next(cx, st->inner_st, o, ret);
        if (ret->kind != EERL__MOVE_STOP && too_far(cx, &o->s, &ret->s)) {
            move_to(ret, EERL__MOVE_STOP, &o->s);
            snprintf(ret->why, sizeof(ret->why), "prior's setting kept within the account");
        }
        return;
    }
    if (st->phase == EERL__PRIOR_VERIFIED && o->locked && o->verdict != EERL_VERDICT_PASS &&
        back_or_up(cx, st, o, &up)) {
        /* The verified lock fell behind the account: back to the verified setting, or one clock
         * a supported step up (back_or_up), not the model's jump (fitted on two settings, it moved
         * one clock up and the other down by 150-250 MHz on the twin, and those seeds lost a third
         * of their saving). */
        move_to(ret, EERL__MOVE_HOLD, &up);
        snprintf(ret->why, sizeof(ret->why), "prior's setting behind the account: raised to %s",
                 eerl__setting_str(&up, b, sizeof(b)));
        return;
    }
    if (st->phase != EERL__PRIOR_TESTING) {
        st->inner->next(cx, st->inner_st, o, ret);
        return;
    }
    if (o->verdict != EERL_VERDICT_PASS && raise_setting(cx, st, o, ret))
        return;
    if (o->verdict != EERL_VERDICT_PASS) {
        int recal = cx->refs->n < cx->cfg->fast_calibration_updates;

        eerl__rec_emit(cx->rec, EERL_EV_HOLD, &o->s,
                       "prior refused: %s expected within the allowance at less energy, found "
                       "loss %.2f%% (budget %.2f%%), energy ratio %.3f: fresh search%s",
                       eerl__setting_str(&o->s, b, sizeof(b)), 100 * o->loss, 100 * o->budget,
                       o->energy, recal ? ", calibrating on first" : "");
        hand_over(cx, st, o, recal, ret);
        return;
    }
    /* The inner proposer starts as at a resumed lock (nothing lowered again); its move is the
     * lock's, which the STOP below makes. */
    st->phase = EERL__PRIOR_VERIFIED;
    at.locked = 1;
    st->inner->start(cx, st->inner_st, &at, ret);
    move_to(ret, EERL__MOVE_STOP, &st->s);
    snprintf(ret->why, sizeof(ret->why), "prior's setting verified: loss %.2f%%, energy ratio %.3f",
             100 * o->loss, o->energy);
}

const struct eerl__proposer_ops eerl__propose_prior = {
    .name = "prior",
    .st_size = sizeof(struct eerl__prior_st),
    .start = prior_start,
    .next = prior_next,
};

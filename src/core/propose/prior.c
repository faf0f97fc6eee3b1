/* See prior.h. A job with a matching prior does not search: once the strategy's own calibration
 * is done, this proposer compares the governor's time per valid token the job just measured with
 * the one the earlier jobs measured, and if the two agree within the noise (PRIOR_SIGMAS
 * standard errors of their difference) it proposes the earlier jobs' setting as the candidate.
 * The judge tests it as any candidate (its loss against the governor predictor of this job, its
 * energy against the governor's); a pass locks it, and the lock is then watched as a resumed one
 * is (nothing is lowered again, the account and the probes go on). A refusal, or a candidate
 * that fails, hands the search to the strategy's own proposer from the governor, with an event
 * that says what was expected and what was found. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/grid.h"
#include "core/propose/prior.h"
#include "core/record.h"
#include "core/refs.h"

#define PRIOR_SIGMAS 3.0 /* standard errors the two governor figures may differ by */

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

/* The search goes to the strategy's own proposer, from the governor. */
static void hand_over(const struct eerl__ctx *cx, struct eerl__prior_st *st,
                      const struct eerl__outcome *from, struct eerl__move *ret)
{
    struct eerl__outcome o = *from;

    st->phase = EERL__PRIOR_HANDED;
    memset(&o.s, 0, sizeof(o.s));
    o.verdict = EERL_VERDICT_NONE;
    o.loss = o.energy = o.loss_var = 0;
    o.locked = 0;
    o.n_updates = 0;
    st->inner->start(cx, st->inner_st, &o, ret);
}

static void prior_start(const struct eerl__ctx *cx, void *ps, const struct eerl__outcome *from,
                        struct eerl__move *ret)
{
    struct eerl__prior_st *st = ps;
    double m, v, se, d;
    unsigned n;
    char b[48];

    if (from->locked || st->phase != EERL__PRIOR_WAIT) { /* a resumed lock: the prior has no say */
        st->phase = EERL__PRIOR_HANDED;
        st->inner->start(cx, st->inner_st, from, ret);
        return;
    }
    n = own_tpt(cx, &m, &v);
    /* In-flight an update carries the work of the one before, so the calibration's updates are
     * not independent: their mean is given one update's scatter (on the twin the calibration
     * means of 4 seeds spread over 6%, their updates' standard error said 0.4-0.6%). */
    se = sqrt(v / (cx->mode == EERL_MODE_INFLIGHT ? 1.0 : fmax(1, n)) +
              st->tpt_var / fmax(1, st->tpt_n));
    d = m - st->tpt_mean;
    if (n < 2 || fabs(d) > PRIOR_SIGMAS * se) {
        eerl__rec_emit(cx->rec, EERL_EV_HOLD, &from->s,
                       "prior refused: governor time per valid token expected %.4g ms, found "
                       "%.4g ms (%+.1f%%, noise allows %.1f%%): fresh search",
                       1e3 * st->tpt_mean, 1e3 * m, 100 * d / st->tpt_mean,
                       100 * PRIOR_SIGMAS * se / st->tpt_mean);
        hand_over(cx, st, from, ret);
        return;
    }
    st->phase = EERL__PRIOR_TESTING;
    ret->kind = EERL__MOVE_TRY;
    ret->s = st->s;
    ret->group = -1;
    ret->energy_bar = 1;
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

static void prior_next(const struct eerl__ctx *cx, void *ps, const struct eerl__outcome *o,
                       struct eerl__move *ret)
{
    struct eerl__prior_st *st = ps;
    struct eerl__outcome at = *o;
    char b[48];

    if (st->phase == EERL__PRIOR_VERIFIED && o->locked && o->verdict == EERL_VERDICT_PASS) {
        /* Credit left over may move the verified lock a grid step at a time, not further: the
         * strategy's own model has seen two settings (the governor and this one), and a jump it
         * extrapolated from them cost more than it saved (on the twin, a 4.3% loss for 3
         * updates, and a seed beyond the allowance). */
        st->inner->next(cx, st->inner_st, o, ret);
        if (ret->kind != EERL__MOVE_STOP && too_far(cx, &o->s, &ret->s)) {
            memset(ret, 0, sizeof(*ret));
            ret->kind = EERL__MOVE_STOP;
            ret->s = o->s;
            ret->group = -1;
            ret->energy_bar = 1;
            snprintf(ret->why, sizeof(ret->why), "prior's setting kept within the account");
        }
        return;
    }
    if (st->phase != EERL__PRIOR_TESTING) {
        st->inner->next(cx, st->inner_st, o, ret);
        return;
    }
    if (o->verdict != EERL_VERDICT_PASS) {
        eerl__rec_emit(cx->rec, EERL_EV_HOLD, &o->s,
                       "prior refused: %s expected within the allowance at less energy, found "
                       "loss %.2f%% (budget %.2f%%), energy ratio %.3f: fresh search",
                       eerl__setting_str(&o->s, b, sizeof(b)), 100 * o->loss, 100 * o->budget,
                       o->energy);
        hand_over(cx, st, o, ret);
        return;
    }
    /* The inner proposer starts as at a resumed lock (nothing lowered again); its move is the
     * lock's, which the STOP below makes. */
    st->phase = EERL__PRIOR_VERIFIED;
    at.locked = 1;
    st->inner->start(cx, st->inner_st, &at, ret);
    memset(ret, 0, sizeof(*ret));
    ret->kind = EERL__MOVE_STOP;
    ret->s = st->s;
    ret->group = -1;
    ret->energy_bar = 1;
    snprintf(ret->why, sizeof(ret->why), "prior's setting verified: loss %.2f%%, energy ratio %.3f",
             100 * o->loss, o->energy);
}

const struct eerl__proposer_ops eerl__propose_prior = {
    .name = "prior",
    .st_size = sizeof(struct eerl__prior_st),
    .start = prior_start,
    .next = prior_next,
};

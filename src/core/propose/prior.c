/* See prior.h. A job with a matching prior does not search. Its calibration stops early (the
 * record's gate, eerl__prior_gate: PRIOR_CAL_SYNC governor updates, in flight PRIOR_CAL_INFLIGHT,
 * instead of cfg.fast_calibration_updates) when the governor's time per valid token it measured
 * agrees with the earlier jobs' within the noise (PRIOR_SIGMAS standard errors of their
 * difference); it then proposes the earlier jobs' setting as the candidate. The judge tests it as
 * any candidate (its loss against this job's governor predictor, its energy against the
 * governor's). The judge's verdicts fail at one standard error of a few updates; the prior
 * weighs a failure on time against its evidence on the setting, every verdict on it pooled
 * (clearly_over: two standard errors past the budget). The setting is tested only when its
 * shortest test, at the worst loss the job's own calibration allows, fits the run's budget
 * (test_bounded: a saved lock may have been edited, its checksum computed again). A test that
 * fails is never locked: one the evidence does not bear out tests on (when the job runs the
 * earlier jobs' work, same_work) until it passes on its pooled evidence (test_passed) or
 * PRIOR_TEST_MAX updates are in; one it bears out, or still failing then, by at most what half
 * a grid step mends raises it half a grid step and tests again (at most PRIOR_RAISES times),
 * any other is refused. The lock is then watched as a resumed one is: credit
 * may lower it a grid step at a time; a failure the evidence does not bear out keeps it, one it
 * does goes back to the verified setting, or from there raises one clock a step, and a loss
 * past the allowance by cfg.big_loss hands the decision to the strategy's own proposer. A
 * refusal at the gate lets the calibration go on to its full length; a refusal after it, or a
 * candidate that fails outright, hands the search to the strategy's own proposer from the
 * governor, with an event that says what was expected and what was found; the judge first takes
 * the calibration the gate cut short to its full length (EERL__MOVE_CALIBRATE). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/grid.h"
#include "core/propose/prior.h"
#include "core/record.h"
#include "core/refs.h"

#define PRIOR_SIGMAS 3.0      /* standard errors the two governor figures may differ by */
#define PRIOR_CAL_SYNC 6      /* governor updates a matching prior's calibration takes */
#define PRIOR_CAL_INFLIGHT 8  /* ... in flight */
#define PRIOR_RAISES 2        /* failed tests that raise the setting a step and try again */
#define PRIOR_CLEAR_SD 2.0    /* standard errors past the budget that move the prior's setting */
#define PRIOR_EVIDENCE_N 36   /* updates of evidence weighed (older ones fade in proportion) */
#define PRIOR_TEST_MIN 6      /* updates of evidence before a test's failure on time decides */
#define PRIOR_NOISE_MAX 0.02  /* per-update scatter of the loss beyond which the work is moving */
#define PRIOR_SAME_WORK 0.02  /* governor time per token this near the entries': the same work */
#define PRIOR_TEST_N 3        /* updates a test takes at least (judge/eerl.c's EE_N_MIN) */
#define PRIOR_RAISE_OVER 0.01 /* loss past the budget a raise of half a grid step may mend */
#define PRIOR_TEST_MAX 12     /* updates of evidence a test may take to pass (EE_N_MAX) */

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

/* The loss per update s could cost at worst, by the job's own calibration: each governor
 * reference's phases slowed in proportion to their clock's fall (a phase's time grows at most as
 * its clock falls: all of it clock-bound), the slowdowns added (an update's critical path holds
 * at most every phase), over the reference's time. Generation runs on the generation clock,
 * log-probabilities and training on the training clock, the weight transfer on the slower of
 * the two; with more groups every phase takes the slowest. */
static double worst_loss(const struct eerl__ctx *cx, const eerl_setting *s)
{
    double r[EERL_GROUPS_MAX], rmax = 1, sum = 0, d;
    unsigned g, n = cx->cfg->n_groups;
    size_t i;

    for (g = 0; g < n; g++) {
        r[g] = (double)cx->grid->peak / eerl__grid_eff(cx->grid, s->mhz[g]);
        rmax = fmax(rmax, r[g]);
    }
    for (i = 0; i < cx->refs->n; i++) {
        const eerl_obs *o = eerl__refs_at(cx->refs, i);
        const double *t = o->phase_time_s;
        double rg = n == 2 ? r[EERL_GROUP_GEN] : rmax, rt = n == 2 ? r[EERL_GROUP_TRAIN] : rmax;

        d = t[EERL_PHASE_GEN] * (rg - 1) +
            (t[EERL_PHASE_LOGPROB] + t[EERL_PHASE_TRAIN]) * (rt - 1) +
            t[EERL_PHASE_REFIT] * (rmax - 1);
        sum += d / o->time_s;
    }
    return cx->refs->n ? sum / (double)cx->refs->n : INFINITY;
}

/* 1 when a test of s may run: its shortest test (PRIOR_TEST_N updates) at s's worst loss
 * (worst_loss) costs at most what the run's budget lets the remaining updates lose (budget per
 * update times updates left, in governor updates' time), as a search trial is proposed only
 * where the job's own measurements bound its loss. Else 0 with the refusal's event. On the twin
 * the earlier jobs' own settings could cost 0.21 (colocated, disaggregated), 0.54 (drained) and
 * 1.06 (in flight) at worst against a room of 1.5, 1.7, 2.6 and 5.1; a lock edited to 345/345
 * 4.7 to 7.8. */
static int test_bounded(const struct eerl__ctx *cx, const struct eerl__outcome *from,
                        const eerl_setting *s, int recal)
{
    double w = worst_loss(cx, s), room = fmax(0.0, from->budget * from->remaining);
    char b[48];

    if (PRIOR_TEST_N * w <= room)
        return 1;
    eerl__rec_emit(cx->rec, EERL_EV_HOLD, s,
                   "prior refused: %s clock-bound loses up to %.0f%%/update, a %d-update test "
                   "%.2f updates' time > budget %.2f: fresh search%s",
                   eerl_setting_str(s, b, sizeof(b)), 100 * w, PRIOR_TEST_N, PRIOR_TEST_N * w, room,
                   recal ? ", calibrating on first" : "");
    return 0;
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
static int matches(const struct eerl__ctx *cx, struct eerl__prior_st *st, const eerl_setting *s)
{
    double m, v, se, d;
    unsigned n = own_tpt(cx, &m, &v);

    /* In-flight an update carries the work of the one before, so the calibration's updates are
     * not independent: their mean is given one update's scatter (on the twin the calibration
     * means of 4 seeds spread over 6%, their updates' standard error said 0.4-0.6%). */
    se = sqrt(v / (cx->mode == EERL_MODE_INFLIGHT ? 1.0 : fmax(1, n)) +
              st->tpt_var / fmax(1, st->tpt_n));
    d = m - st->tpt_mean;
    st->tpt_off = d / st->tpt_mean;
    st->tpt_se = se / st->tpt_mean;
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
    int recal;
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
    recal = cx->refs->n < cx->cfg->fast_calibration_updates;
    if (!test_bounded(cx, from, &st->s, recal)) {
        hand_over(cx, st, from, recal, ret);
        return;
    }
    (void)own_tpt(cx, &m, &v);
    st->phase = EERL__PRIOR_TESTING;
    move_to(ret, EERL__MOVE_TRY, &st->s);
    eerl__rec_emit(cx->rec, EERL_EV_PROPOSE, &st->s,
                   "prior: verify %s (median of %u earlier jobs' locks, %u locked it); governor "
                   "time per valid "
                   "token %.4g ms, expected %.4g ms",
                   eerl_setting_str(&st->s, b, sizeof(b)), st->jobs, st->votes, 1e3 * m,
                   1e3 * st->tpt_mean);
}

/* A move that raises a clock. */
static int raises(const struct eerl__ctx *cx, const eerl_setting *from, const eerl_setting *to)
{
    unsigned g;

    for (g = 0; g < cx->cfg->n_groups; g++)
        if (eerl__grid_eff(cx->grid, to->mhz[g]) > eerl__grid_eff(cx->grid, from->mhz[g]))
            return 1;
    return 0;
}

/* Takes a verdict on the setting o->s into the evidence on it (a new setting starts afresh;
 * past PRIOR_EVIDENCE_N updates the older ones fade in proportion). */
static void evidence_add(struct eerl__prior_st *st, const struct eerl__outcome *o)
{
    double n = o->n_updates, keep;

    if (!eerl_setting_equal(&st->ev.s, &o->s)) {
        memset(&st->ev, 0, sizeof(st->ev));
        st->ev.s = o->s;
    }
    if (n <= 0)
        return;
    if (st->ev.n + n > PRIOR_EVIDENCE_N && st->ev.n > 0) {
        keep = fmax(0.0, PRIOR_EVIDENCE_N - n) / st->ev.n;
        st->ev.n *= keep;
        st->ev.sum *= keep;
        st->ev.vs *= keep;
    }
    st->ev.n += n;
    st->ev.sum += n * o->loss;
    st->ev.vs += n * fmax(o->loss_var, 1e-4);
}

/* 1 when the evidence on the prior's setting puts its loss sds standard errors past the budget
 * (its updates' noise and the governor reference's, which the short calibration leaves at about
 * 0.4%), or when the verdict carries no figures to pool (the in-flight judge's), or they scatter
 * as moving work does. */
static int over_by(const struct eerl__ctx *cx, const struct eerl__prior_st *st,
                   const struct eerl__outcome *o, double sds)
{
    double m, v, se;

    if (o->n_updates == 0 || !eerl_setting_equal(&st->ev.s, &o->s) || st->ev.n <= 0)
        return 1;
    m = st->ev.sum / st->ev.n;
    v = st->ev.vs / st->ev.n;
    if (v > PRIOR_NOISE_MAX * PRIOR_NOISE_MAX)
        return 1;
    se = sqrt(v / st->ev.n + v / fmax(1.0, (double)cx->refs->n));
    return m - sds * se > o->budget;
}

/* 1 when the evidence bears out a failure: PRIOR_CLEAR_SD standard errors past the budget. Only
 * then does a failure move the setting. A single verdict fails at one standard error of its own
 * updates, and on the twin the prior's setting stood near the budget, so its tests and the
 * windows after its lock failed by chance: 12 of 32 colocated seeds raised it at its test, most
 * more than once after the lock, and ended 0.3-0.5 points inside the allowance; holding it
 * instead kept 32 of 32 within in each synchronous mode. */
static int clearly_over(const struct eerl__ctx *cx, const struct eerl__prior_st *st,
                        const struct eerl__outcome *o)
{
    return over_by(cx, st, o, PRIOR_CLEAR_SD);
}

/* 1 when the test has passed on its pooled evidence: at least PRIOR_TEST_MIN updates whose mean
 * loss is within the budget, or, once PRIOR_TEST_MAX updates are in, not one standard error past
 * it (the judge's own verdict on a full window of a search trial). */
static int test_passed(const struct eerl__ctx *cx, const struct eerl__prior_st *st,
                       const struct eerl__outcome *o)
{
    if (st->ev.n < PRIOR_TEST_MIN || !eerl_setting_equal(&st->ev.s, &o->s))
        return 0;
    if (st->ev.sum / st->ev.n <= o->budget)
        return 1;
    return st->ev.n >= PRIOR_TEST_MAX && !over_by(cx, st, o, 1.0);
}

/* A failure the evidence does not bear out: the setting stays, and the trace says why. */
static void keep_setting(const struct eerl__ctx *cx, const struct eerl__prior_st *st,
                         const struct eerl__outcome *o, struct eerl__move *ret)
{
    char b[48];

    eerl__rec_emit(cx->rec, EERL_EV_HOLD, &o->s,
                   "prior's setting %s kept: loss %.2f%% over %.0f updates (budget %.2f%%) "
                   "is within %.0f standard errors",
                   eerl_setting_str(&o->s, b, sizeof(b)), 100 * st->ev.sum / st->ev.n, st->ev.n,
                   100 * o->budget, PRIOR_CLEAR_SD);
    move_to(ret, EERL__MOVE_STOP, &o->s);
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

/* How far past the budget a failed test may read and still be raised rather than refused: with
 * per-update figures PRIOR_RAISE_OVER, what half a grid step buys back; without them (the
 * in-flight judge's verdicts) cfg.big_loss. */
static double raise_room(const struct eerl__ctx *cx, const struct eerl__outcome *o)
{
    return o->n_updates ? PRIOR_RAISE_OVER : cx->cfg->big_loss;
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

    if (st->raises >= PRIOR_RAISES || o->loss > o->budget + raise_room(cx, o) || o->energy >= 1 ||
        !raise_late(cx, &st->s, o->late_group, cx->cfg->grid_mhz / 2, &up))
        return 0;
    eerl__rec_emit(cx->rec, EERL_EV_HOLD, &up,
                   "prior: %s found loss %.2f%% (budget %.2f%%), energy ratio %.3f: %s tried",
                   eerl_setting_str(&st->s, b, sizeof(b)), 100 * o->loss, 100 * o->budget,
                   o->energy, eerl_setting_str(&up, c, sizeof(c)));
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

/* The verified lock's verdict (prior_next). A pass: credit left over may move the lock a grid
 * step at a time, not further: the strategy's own model has seen two settings (the governor and
 * this one), and a jump it extrapolated from them cost more than it saved (on the twin, a 4.3%
 * loss for 3 updates, and a seed beyond the allowance). A failure the evidence bears out: back
 * to the verified setting, or one clock a supported step up (back_or_up), not the model's jump
 * (fitted on two settings, it moved one clock up and the other down by 150-250 MHz on the twin,
 * and those seeds lost a third of their saving). */
static void verified_next(const struct eerl__ctx *cx, struct eerl__prior_st *st,
                          const struct eerl__outcome *o, struct eerl__move *ret)
{
    eerl_setting up;
    char b[48];

    if (o->verdict == EERL_VERDICT_PASS) {
        st->inner->next(cx, st->inner_st, o, ret);
        if (ret->kind != EERL__MOVE_STOP &&
            (too_far(cx, &o->s, &ret->s) ||
             (raises(cx, &o->s, &ret->s) && !clearly_over(cx, st, o)))) {
            move_to(ret, EERL__MOVE_STOP, &o->s);
            snprintf(ret->why, sizeof(ret->why), "prior's setting kept within the account");
        }
        return;
    }
    if (eerl_setting_equal(&o->s, &st->s) && !clearly_over(cx, st, o)) {
        keep_setting(cx, st, o, ret);
        return;
    }
    if (o->loss > cx->cfg->allowed_loss + cx->cfg->big_loss) {
        st->phase = EERL__PRIOR_HANDED;
        eerl__rec_emit(cx->rec, EERL_EV_HOLD, &o->s,
                       "prior's setting %s far too slow (loss %.2f%%, allowance %.2f%% + %.2f): "
                       "the strategy's own proposer decides",
                       eerl_setting_str(&o->s, b, sizeof(b)), 100 * o->loss,
                       100 * cx->cfg->allowed_loss, 100 * cx->cfg->big_loss);
        st->inner->next(cx, st->inner_st, o, ret);
        return;
    }
    if (back_or_up(cx, st, o, &up)) {
        move_to(ret, EERL__MOVE_HOLD, &up);
        snprintf(ret->why, sizeof(ret->why), "prior's setting behind the account: raised to %s",
                 eerl_setting_str(&up, b, sizeof(b)));
        return;
    }
    st->inner->next(cx, st->inner_st, o, ret);
}

/* 1 when this job's governor runs the earlier jobs' work, as far as its calibration can tell:
 * its time per valid token within PRIOR_SAME_WORK of theirs, or within one standard error of the
 * difference where the calibration is noisier (drained). Only then does a test's failure on time
 * that the evidence does not bear out verify the setting (testing_next). On the twin the spread
 * over 32 seeds of steady work was 1.9% (colocated, disaggregated); collapsing work read 10-17%
 * off, its calibration taken while responses fell, and verifying there let 2 of 32 disaggregated
 * seeds past the allowance at 200 updates. */
static int same_work(const struct eerl__prior_st *st)
{
    return fabs(st->tpt_off) <= PRIOR_SAME_WORK || fabs(st->tpt_off) <= st->tpt_se;
}

/* The test's verdict (prior_next): a pass, or a failure on time alone that the evidence does not
 * bear out, locks the setting; a failure it bears out raises it (raise_setting) or, past the
 * raises, refuses the prior. */
static void testing_next(const struct eerl__ctx *cx, struct eerl__prior_st *st,
                         const struct eerl__outcome *o, struct eerl__move *ret)
{
    struct eerl__outcome at = *o;
    int pass = o->verdict == EERL_VERDICT_PASS, recal;
    char b[48];

    if (!pass && same_work(st) && o->n_updates > 0 && o->too_slow && o->energy < 1 &&
        o->loss <= o->budget + cx->cfg->big_loss) {
        pass = test_passed(cx, st, o);
        if (!pass && st->ev.n < PRIOR_TEST_MAX && !clearly_over(cx, st, o)) {
            eerl__rec_emit(cx->rec, EERL_EV_HOLD, &o->s,
                           "prior: %s read loss %.2f%% over %u updates (budget %.2f%%): tested on",
                           eerl_setting_str(&o->s, b, sizeof(b)), 100 * o->loss, o->n_updates,
                           100 * o->budget);
            move_to(ret, EERL__MOVE_TRY, &o->s);
            return;
        }
    }
    if (!pass && raise_setting(cx, st, o, ret))
        return;
    if (!pass) {
        recal = cx->refs->n < cx->cfg->fast_calibration_updates;
        eerl__rec_emit(cx->rec, EERL_EV_HOLD, &o->s,
                       "prior refused: %s expected within the allowance at less energy, found "
                       "loss %.2f%% (budget %.2f%%), energy ratio %.3f: fresh search%s",
                       eerl_setting_str(&o->s, b, sizeof(b)), 100 * o->loss, 100 * o->budget,
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
    if (o->verdict == EERL_VERDICT_PASS)
        snprintf(ret->why, sizeof(ret->why),
                 "prior's setting verified: loss %.2f%%, energy ratio %.3f", 100 * o->loss,
                 o->energy);
    else
        snprintf(ret->why, sizeof(ret->why),
                 "prior's setting verified: loss %.2f%% over %.0f updates (budget %.2f%%), "
                 "energy ratio %.3f",
                 100 * st->ev.sum / st->ev.n, st->ev.n, 100 * o->budget, o->energy);
}

static void prior_next(const struct eerl__ctx *cx, void *ps, const struct eerl__outcome *o,
                       struct eerl__move *ret)
{
    struct eerl__prior_st *st = ps;

    if (st->phase == EERL__PRIOR_TESTING || st->phase == EERL__PRIOR_VERIFIED)
        evidence_add(st, o);
    if (st->phase == EERL__PRIOR_VERIFIED && o->locked)
        verified_next(cx, st, o, ret);
    else if (st->phase == EERL__PRIOR_TESTING)
        testing_next(cx, st, o, ret);
    else
        st->inner->next(cx, st->inner_st, o, ret);
}

const struct eerl__proposer_ops eerl__propose_prior = {
    .name = "prior",
    .st_size = sizeof(struct eerl__prior_st),
    .start = prior_start,
    .next = prior_next,
};

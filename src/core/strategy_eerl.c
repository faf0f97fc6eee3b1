/* eerl's own strategy (beyond the paper, docs/controller.md "Beyond the paper"): one state
 * machine for every mode, built on the paper's governor predictor (section 5.1, Eq. 2) and pass
 * rule (section 5.2), in place of Algorithm 1's fixed trials, governor gaps and confirmation.
 *
 * - Run-level throughput budget: every update after calibration adds its estimated slowdown
 *   (measured time minus the governor prediction at its work; governor updates add none) to an
 *   account, and every update adds its governor time to the allowance. The loss the current
 *   setting may run at is what keeps the whole run, to the expected end, inside
 *   allowed_loss - budget_margin: r = (a * (P + p * R) - E) / (p * R), with E the excess so far,
 *   P the governor time so far, p the mean governor update time and R the remaining updates
 *   (cfg.expected_updates, else as many again as have run, at least 50). Search, corrections and
 *   monitoring all draw on one account, so exploration is paid for, not just hoped for.
 * - Sequential tests instead of fixed 3-update trials: a setting is held until the mean of its
 *   per-update loss estimates is clear of r by one standard error (or 12 usable updates have
 *   passed), so the noise measured on this run sizes every decision. No governor updates between
 *   trials: the predictor is the reference (item 2: in-flight spends no blocks at the governor).
 * - Descent with halving steps: both groups start one big step down; a group whose step falls
 *   short (too slow for r, or no energy gained) goes back and halves its step; at less than half
 *   the grid it stops. All stopped = locked; after lock the account keeps running and a setting
 *   that falls behind it is raised.
 * - Drained mode reads the rendezvous: the first training step goes as far down as the training
 *   pool's wait for generation allows, and a short account raises the pool the update waits for.
 * - Expected horizon: no new step is tried when fewer updates remain than a test needs.
 * - Governor probes: one governor update every 10 keeps the references as recent as the work and
 *   measures the predictor's own error on fresh work, which the loss estimates are corrected by
 *   (and the account too, where the error stands out of the probes' scatter).
 * In-flight mode the whole-update predictor cannot tell a clock's effect from the carried work
 * (measured on the twin: +6 to +14% "loss" for a 180 MHz step), so controller.c gives the eerl
 * strategy in that mode strategy_eerl_inflight.c, which judges a setting by its rate.
 * Owns only its state struct; reads the controller's predictor. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "eerl/error.h"
#include "core/controller.h"
#include "core/search.h"

enum { EE_CAL, EE_RUN, EE_REFRESH };

#define EE_GROUPS EERL_GROUPS_MAX
#define EE_N_MIN 3
#define EE_N_MAX 12
#define EE_SLACK_REFS 32  /* calibration updates read for the training pool's wait */
#define EE_SLACK_Q 0.2    /* the quantile of generation / training busy time taken */
#define EE_SLACK_USE 0.75 /* the share of that wait the first step may use */

struct ee_st {
    int phase;
    unsigned count;
    eerl_setting cur, prev;
    unsigned moved; /* groups changed by the last move (bit per group) */
    unsigned step[EE_GROUPS];
    unsigned floor_[EE_GROUPS]; /* effective clock known to fall short: never that low again */
    int frozen[EE_GROUPS];
    int next_group;
    int locked;
    double eff[EE_GROUPS]; /* energy ratio gained per loss spent by each group's last step */
    unsigned have_eff;
    /* the current setting's evidence since it began */
    unsigned n;
    unsigned gen_late; /* of them, updates whose generation pool reached the rendezvous last */
    double sl, sl2, se;
    double prev_energy; /* mean energy ratio of the setting before the last move */
    double prev_loss;   /* and its mean loss */
    /* the run-level account */
    double excess_s, gov_s;
    uint64_t seen;
    unsigned cov_bits, cov_n;
    unsigned since_probe; /* usable updates since the last governor probe */
    int probing;
    uint64_t relax_at;           /* update count of the last relaxation after lock */
    double bias_t[4], bias_e[4]; /* the predictor's error on the last governor probes */
    unsigned n_bias;
};

#define EE_BIAS_N 4

static void bias(const struct ee_st *st, double *bt, double *be)
{
    unsigned i, n = st->n_bias < EE_BIAS_N ? st->n_bias : EE_BIAS_N;

    *bt = *be = 0;
    for (i = 0; i < n; i++) {
        *bt += st->bias_t[i] / n;
        *be += st->bias_e[i] / n;
    }
}

/* The probes' mean error when it stands out of their own scatter (more than two standard errors
 * from zero, three probes or more), else 0: what the run's account corrects its governor time
 * by. The account sums every update, so a correction that is only probe noise would become a
 * lasting error of the whole run's estimate (with 5% noise per update, four probes' mean is
 * off by 2.5%). */
static double account_bias(const struct ee_st *st)
{
    unsigned i, n = st->n_bias < EE_BIAS_N ? st->n_bias : EE_BIAS_N;
    double m, me, v = 0;

    if (n < 3)
        return 0;
    bias(st, &m, &me); /* the same mean the loss estimates are corrected by */
    for (i = 0; i < n; i++)
        v += (st->bias_t[i] - m) * (st->bias_t[i] - m) / (n - 1);
    return fabs(m) > 2 * sqrt(v / n) ? m : 0;
}

/* One governor update every EE_PROBE_EVERY usable ones keeps the predictor's references as
 * recent as the work: RL workloads drift (responses lengthen), and a predictor fitted only at
 * the start reads the drift as a slowdown. */
/* Governor updates when the work leaves the predictor's range: the probes keep adding fresh
 * references as well, so fewer than the paper's 5 do. */
#define EE_REFRESH_N(c) ((c)->refresh_updates < 3u ? (c)->refresh_updates : 3u)
#define EE_RELAX_MARGIN 0.005 /* spare loss rate after lock that is worth another step */
#define EE_RELAX_NOISE 0.005  /* ... when per-update noise is below this (sd): else luck decides */
#define EE_PROBE_EVERY 10
#define EE_EFF_FLOOR 0.002 /* loss of a step counted at least this in its efficiency */
#define EE_EFF_NOISE 0.02  /* per-update loss noise (sd) below which efficiencies steer */
#define EE_PROBE_LOCKED 30 /* after lock: the setting no longer moves, drift is slow */

static eerl_ctl_state ee_state(const void *vst)
{
    const struct ee_st *st = vst;

    switch (st->phase) {
    case EE_CAL:
        return EERL_STATE_CALIBRATING;
    case EE_REFRESH:
        return EERL_STATE_MONITORING;
    default:
        return st->locked ? EERL_STATE_LOCKED : EERL_STATE_SEARCHING;
    }
}

static int ee_init(struct eerl_ctl *ctl, void *vst)
{
    struct ee_st *st = vst;

    int g;

    eerl__ctl_set_fit_floor(ctl, EERL__PRED_MIN_T);

    st->step[EERL_GROUP_GEN] = ctl->cfg.start_drop_gen_mhz;
    for (g = 1; g < EE_GROUPS; g++)
        st->step[g] = ctl->cfg.start_drop_train_mhz;
    for (g = (int)ctl->cfg.n_groups; g < EE_GROUPS; g++)
        st->frozen[g] = 1; /* not declared: stays at the governor */
    st->next_group = EERL_GROUP_TRAIN;
    st->prev_energy = 1.0;
    return 0;
}

/* Updates the job has left by the configured or learned horizon. */
static double remaining(const struct eerl_ctl *ctl, const struct ee_st *st)
{
    if (ctl->cfg.expected_updates > st->seen)
        return (double)(ctl->cfg.expected_updates - st->seen);
    if (ctl->cfg.expected_updates)
        return 1.0;
    return fmax(50.0, (double)st->seen);
}

/* The loss the current setting may run at for the whole run to stay within the allowance. */
static double target_rate(const struct eerl_ctl *ctl, const struct ee_st *st)
{
    double a = ctl->cfg.allowed_loss - ctl->cfg.budget_margin;
    double p = st->seen ? st->gov_s / (double)st->seen : 1.0, rem = p * remaining(ctl, st);
    double r = (a * (st->gov_s + rem) - st->excess_s) / rem;

    return fmin(r, 2 * ctl->cfg.allowed_loss);
}

static void stats_reset(struct ee_st *st)
{
    st->n = 0;
    st->gen_late = 0;
    st->sl = st->sl2 = st->se = 0;
}

static void apply(struct ee_st *st, const eerl_setting *s, eerl_setting *next)
{
    st->cur = *s;
    *next = *s;
    stats_reset(st);
}

static unsigned group_clock(const eerl_setting *s, int g)
{
    return s->mhz[g];
}

/* A setting with these group clocks and the configured idle clock (none if all governor). */
static eerl_setting with_groups(const struct eerl_ctl *ctl, const unsigned *clk)
{
    eerl_setting s = eerl__ctl_setting(ctl, clk[0], clk[1]);
    unsigned g;

    for (g = 2; g < ctl->cfg.n_groups; g++)
        s.mhz[g] = clk[g];
    if (ctl->cfg.idle_mhz && !s.idle_mhz)
        for (g = 2; g < ctl->cfg.n_groups; g++)
            if (clk[g] != EERL_CLOCK_GOVERNOR)
                s.idle_mhz = eerl__ctl_snap(ctl, ctl->cfg.idle_mhz);
    return s;
}

/* Lowers group g of cur by its step (halving past known floors); 0 when g has nowhere to go. */
static int lower_group(struct eerl_ctl *ctl, struct ee_st *st, int g, unsigned *ret)
{
    unsigned min_step = ctl->cfg.grid_mhz / 2 ? ctl->cfg.grid_mhz / 2 : 1, c;

    while (!st->frozen[g] && st->step[g] >= min_step) {
        if (eerl__ctl_step(ctl, group_clock(&st->cur, g), -(int)st->step[g], &c) == 0 &&
            eerl__ctl_eff(ctl, c) > st->floor_[g]) {
            *ret = c;
            return 1;
        }
        st->step[g] /= 2;
    }
    st->frozen[g] = 1;
    return 0;
}

static void lock_now(struct eerl_ctl *ctl, struct ee_st *st, const char *why)
{
    st->locked = 1;
    eerl__ctl_lock(ctl, &st->cur, NULL, why);
}

/* The next move down, alternating groups; locks when no group can move. */
static void move_down(struct eerl_ctl *ctl, struct ee_st *st, eerl_setting *next, double r)
{
    unsigned clk[EE_GROUPS], c, n = ctl->cfg.n_groups;
    char b[48];
    int k;

    if (remaining(ctl, st) < 2 * EE_N_MIN + 1 && ctl->cfg.expected_updates) {
        if (!st->locked)
            lock_now(ctl, st, "too few updates left for another test to pay");
        return;
    }
    if (!st->locked && st->prev_loss >= r) {
        /* The setting the search stands on already costs what the rest of the run may lose: a
         * lower clock only loses more, and its test would overdraw the account. */
        lock_now(ctl, st, "the run's budget leaves no room below it");
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

        if (!lower_group(ctl, st, g, &c))
            continue;
        for (j = 0; j < EE_GROUPS; j++)
            clk[j] = st->cur.mhz[j];
        clk[g] = c;
        st->prev = st->cur;
        st->moved = 1u << g;
        st->next_group = (g + 1) % (int)n;
        {
            eerl_setting s = with_groups(ctl, clk);
            apply(st, &s, next);
        }
        eerl__ctl_emit(ctl, EERL_EV_PROPOSE, &st->cur,
                       "%s %s to %s (step %u MHz; budget allows %.2f%% loss)",
                       st->locked ? "monitor: try" : "lower", ctl->cfg.group_names[g],
                       eerl__setting_str(&st->cur, b, sizeof(b)), st->step[g], 100 * r);
        if (st->locked)
            st->locked = 0;
        return;
    }
    if (!st->locked)
        lock_now(ctl, st, "every group at its lowest clock that pays");
}

/* The last move fell short: back to where it came from, halve the moved groups' steps. */

static void revert(struct eerl_ctl *ctl, struct ee_st *st, eerl_setting *next, const char *why)
{
    char b[48];
    int g;

    for (g = 0; g < EE_GROUPS; g++)
        if (st->moved & (1u << g)) {
            unsigned f = eerl__ctl_eff(ctl, st->cur.mhz[g]);
            if (f > st->floor_[g])
                st->floor_[g] = f;
            st->step[g] /= 2;
        }
    st->moved = 0;
    apply(st, &st->prev, next);
    eerl__ctl_emit(ctl, EERL_EV_ADJUST, &st->cur, "back to %s: %s",
                   eerl__setting_str(&st->cur, b, sizeof(b)), why);
    /* The setting gone back to already passed: the next move starts at once. */
    move_down(ctl, st, next, target_rate(ctl, st));
}

/* No move to undo but the account is short: raise the group furthest below the peak. */
static void raise_one(struct eerl_ctl *ctl, struct ee_st *st, eerl_setting *next)
{
    unsigned step = ctl->cfg.grid_mhz, c, clk[EE_GROUPS], j;
    int g = 0;

    for (j = 0; j < EE_GROUPS; j++)
        clk[j] = st->cur.mhz[j];
    for (j = 1; j < ctl->cfg.n_groups; j++)
        if (eerl__ctl_eff(ctl, clk[j]) < eerl__ctl_eff(ctl, clk[g]))
            g = (int)j;
    if (ctl->layout == EERL__LAYOUT_OVERLAP && st->n > 0) {
        /* Drained: the update waits for the pool that reaches the rendezvous last; raising the
         * other one's clock buys no time. */
        int late = 2 * st->gen_late >= st->n ? EERL_GROUP_GEN : EERL_GROUP_TRAIN;
        if (eerl__ctl_eff(ctl, clk[late]) < ctl->peak)
            g = late;
    }
    char b[48];
    eerl_setting s;

    if (eerl__ctl_step(ctl, clk[g], (int)step, &c) < 0)
        return;
    if (eerl__ctl_eff(ctl, clk[g]) > st->floor_[g])
        st->floor_[g] = eerl__ctl_eff(ctl, clk[g]);
    clk[g] = c;
    st->frozen[g] = 1;
    st->moved = 0;
    st->prev = st->cur;
    s = with_groups(ctl, clk);
    apply(st, &s, next);
    eerl__ctl_adjust(ctl, &st->cur, next, "raise to %s: the run's account falls short",
                     eerl__setting_str(&st->cur, b, sizeof(b)));
}

static void judge(struct eerl_ctl *ctl, struct ee_st *st, eerl_setting *next)
{
    double r = target_rate(ctl, st), n = st->n, m = st->sl / n, e = st->se / n;
    double var = n > 1 ? fmax(0.0, (st->sl2 - n * m * m) / (n - 1)) : 0.0;
    double se = sqrt(fmax(var, 1e-4) / n);
    eerl_event *ev;
    char b[48];
    int slow, fast, poor;

    if (st->n < EE_N_MIN)
        return;
    slow = m - se > r;
    fast = m + se <= r;
    poor = st->moved && e >= st->prev_energy;
    if (!slow && !fast && !poor && st->n < EE_N_MAX)
        return;
    if (!slow && !fast)
        slow = m > r; /* the window is full: the point estimate decides */
    ev = eerl__ctl_emit(ctl, st->locked ? EERL_EV_MONITOR : EERL_EV_TRIAL, &st->cur,
                        "%s over %u updates: loss %.2f%% +- %.2f%%, energy ratio %.3f; budget "
                        "allows %.2f%%",
                        eerl__setting_str(&st->cur, b, sizeof(b)), st->n, 100 * m, 100 * se, e,
                        100 * r);
    ev->time_ratio = 1 + m;
    ev->energy_ratio = e;
    ev->n_updates = st->n;
    ev->verdict = slow || poor ? EERL_VERDICT_FAIL : EERL_VERDICT_PASS;
    if (!st->locked)
        eerl__ctl_trial_done(ctl);
    if (slow || poor) {
        if (st->moved)
            revert(ctl, st, next, slow ? "too slow for the run's budget" : "no energy saved");
        else if (slow)
            raise_one(ctl, st, next);
        else
            stats_reset(st);
        return;
    }
    if (st->locked) {
        /* Locked and within the account. Credit banked since the lock (governor probes and
         * refreshes, a setting cheaper than its allowance, the end of the horizon coming) is
         * spent on one more half-grid step per group, at most once every 20 updates. */
        if (m + 2 * se < r - EE_RELAX_MARGIN && var < EE_RELAX_NOISE * EE_RELAX_NOISE &&
            st->seen >= st->relax_at + 20 && remaining(ctl, st) > 4 * EE_N_MIN) {
            int g;
            st->relax_at = st->seen;
            for (g = 0; g < (int)ctl->cfg.n_groups; g++) {
                st->frozen[g] = 0;
                st->floor_[g] = 0;
                st->step[g] = ctl->cfg.grid_mhz / 2;
            }
            st->prev_energy = e;
            st->prev_loss = m;
            move_down(ctl, st, next, r);
            return;
        }
        stats_reset(st);
        return;
    }
    {
        int g;
        for (g = 0; g < EE_GROUPS; g++)
            if (st->moved == 1u << g) {
                /* This group's last step: energy gained per loss spent, trusted only on a
                 * quiet stream (per-update noise below EE_EFF_NOISE): on a noisy one the ratio
                 * of two small noisy differences would steer the search past the allowance. */
                st->have_eff &= ~(1u << g);
                if (var < EE_EFF_NOISE * EE_EFF_NOISE) {
                    st->eff[g] = (st->prev_energy - e) / fmax(m - st->prev_loss, EE_EFF_FLOOR);
                    st->have_eff |= 1u << g;
                }
            }
    }
    st->prev_energy = e;
    st->prev_loss = m;
    st->moved = 0;
    move_down(ctl, st, next, r);
}

/* Drained mode: the training pool usually reaches the rendezvous first and waits for
 * generation, so a training clock that stretches its busy time by less than that wait costs no
 * update time. The drop (MHz below the peak) at which training, taken to slow in proportion to
 * the clock (an upper bound: part of its time does not follow the clock), would use
 * EE_SLACK_USE of the wait in the calibration's EE_SLACK_Q-quantile update; 0 without a wait. */
static unsigned slack_drop(const struct eerl_ctl *ctl)
{
    double r[EE_SLACK_REFS], q, f;
    size_t n = 0, i, j;

    if (ctl->layout != EERL__LAYOUT_OVERLAP)
        return 0;
    for (i = 0; i < ctl->ref_n && n < EE_SLACK_REFS; i++) {
        struct eerl__parts m;

        eerl__obs_parts(ctl->layout, eerl__ctl_ref(ctl, i), &m);
        if (m.t_train > 0) {
            for (j = n++; j > 0 && r[j - 1] > m.t_gen / m.t_train; j--)
                r[j] = r[j - 1];
            r[j] = m.t_gen / m.t_train;
        }
    }
    if (n < 3)
        return 0;
    q = r[(size_t)(EE_SLACK_Q * (double)(n - 1))];
    if (q <= 1)
        return 0;
    f = (double)ctl->peak / (1 + EE_SLACK_USE * (q - 1));
    return (unsigned)((double)ctl->peak - f);
}

/* After calibration (or a resume without a lock): the training group one big step down, or in
 * drained mode down to what its wait at the rendezvous allows, if that is further. */
static void start_search(struct eerl_ctl *ctl, struct ee_st *st, eerl_setting *next)
{
    unsigned t = 0, drop = slack_drop(ctl);
    eerl_setting s;
    char b[48];

    st->phase = EE_RUN;
    st->cur = *next;
    st->prev = st->cur;
    if (drop < st->step[1])
        drop = st->step[1];
    (void)eerl__ctl_step(ctl, EERL_CLOCK_GOVERNOR, -(int)drop, &t);
    s = eerl__ctl_setting(ctl, EERL_CLOCK_GOVERNOR, t);
    if (eerl_setting_is_governor(&s)) {
        lock_now(ctl, st, "no supported clock below the governor's peak");
        return;
    }
    st->moved = 1u << EERL_GROUP_TRAIN;
    st->next_group = EERL_GROUP_GEN;
    apply(st, &s, next);
    eerl__ctl_emit(ctl, EERL_EV_PROPOSE, &st->cur, "start at %s",
                   eerl__setting_str(&st->cur, b, sizeof(b)));
}

/* Resume (eerl_ctl_restore): the references are back and the predictor fitted. With a saved lock
 * the run starts at it, locked and monitored by the run's own account (a setting that falls
 * behind is raised; nothing is lowered again); without one the search starts at once. */
static int ee_restore(struct eerl_ctl *ctl, void *vst, const eerl_setting *locked,
                      eerl_setting *next)
{
    struct ee_st *st = vst;
    int g;

    if (!ctl->pred.ready)
        return EERL_ESTATE;
    if (!locked) {
        eerl__ctl_emit(ctl, EERL_EV_CALIBRATED, next,
                       "resumed: predictor fitted on %zu saved governor updates", ctl->ref_n);
        start_search(ctl, st, next);
        return 0;
    }
    st->phase = EE_RUN;
    st->prev = *locked;
    for (g = 0; g < EE_GROUPS; g++)
        st->frozen[g] = 1;
    apply(st, locked, next);
    st->locked = 1;
    eerl__ctl_lock(ctl, &st->cur, NULL, "resumed from the saved state");
    return 0;
}

static void ee_observe(struct eerl_ctl *ctl, void *vst, const eerl_obs *obs, int usable,
                       eerl_setting *next)
{
    struct ee_st *st = vst;
    const eerl_ctl_config *c = &ctl->cfg;
    struct eerl__parts m, p;
    int gov = eerl_setting_is_governor(&obs->setting);
    char b[48];

    eerl__obs_parts(ctl->layout, obs, &m);
    st->seen++;
    if (gov || !ctl->pred.ready) {
        st->gov_s += m.t;
    } else {
        /* The governor time is the prediction corrected by the predictor's error on the last
         * probes where that error is clear: uncorrected, a predictor that runs short of the
         * governor by half a point charged the account half a point on every update. */
        eerl__pred_predict(&ctl->pred, obs, &p);
        p.t *= 1 + account_bias(st);
        st->gov_s += p.t;
        st->excess_s += m.t - p.t;
    }
    if (st->probing) {
        st->probing = 0;
        *next = st->cur;
        if (usable && gov && ctl->pred.ready) {
            /* The predictor's error on a fresh governor update, before it joins the fit: what
             * the loss estimates of the next updates are corrected by. */
            eerl__pred_predict(&ctl->pred, obs, &p);
            if (p.t > 0 && p.e > 0) {
                st->bias_t[st->n_bias % EE_BIAS_N] = m.t / p.t - 1;
                st->bias_e[st->n_bias % EE_BIAS_N] = m.e / p.e - 1;
                st->n_bias++;
            }
            eerl__ctl_ref_add(ctl, obs);
            eerl__ctl_emit(ctl, EERL_EV_HOLD, next, "governor probe taken into the reference");
        }
        return;
    }
    if (!usable)
        return;
    switch (st->phase) {
    case EE_CAL:
        if (!eerl__ctl_ref_count(ctl, obs, &st->count, c->fast_calibration_updates, "calibrating",
                                 next))
            return;
        eerl__ctl_emit(ctl, EERL_EV_CALIBRATED, next, "predictor fitted on %zu governor updates",
                       ctl->ref_n);
        start_search(ctl, st, next);
        return;
    case EE_REFRESH:
        if (!eerl__ctl_ref_count(ctl, obs, &st->count, EE_REFRESH_N(c),
                                 "refreshing the governor reference", next))
            return;
        st->phase = EE_RUN;
        *next = st->cur;
        stats_reset(st);
        eerl__ctl_emit(ctl, EERL_EV_HOLD, &st->cur, "reference refreshed; back to %s",
                       eerl__setting_str(&st->cur, b, sizeof(b)));
        return;
    default:
        break;
    }
    if (gov) {
        eerl__ctl_emit(ctl, EERL_EV_HOLD, next, "governor kept");
        return;
    }
    /* Work the predictor has not seen: left out, and repeated misses refresh the reference. */
    st->cov_bits =
        ((st->cov_bits << 1) | !eerl__pred_covered(&ctl->pred, obs, c->coverage_margin)) & 0x3ffu;
    if (st->cov_bits & 1u) {
        unsigned k, bad = 0;

        for (k = 0; k < 10; k++)
            bad += (st->cov_bits >> k) & 1u;
        if (bad >= c->coverage_fail_limit) {
            st->cov_bits = 0;
            st->phase = EE_REFRESH;
            st->count = 0;
            eerl__ctl_refresh(ctl, &st->cur, next,
                              "work outside the predictor's range repeatedly: %u governor updates",
                              EE_REFRESH_N(c));
            return;
        }
        eerl__ctl_emit(ctl, EERL_EV_SKIP, &st->cur, "work outside the predictor's range");
        return;
    }
    eerl__pred_predict(&ctl->pred, obs, &p);
    {
        double bt, be, l, er;

        bias(st, &bt, &be);
        l = p.t > 0 ? (m.t / p.t) / (1 + bt) - 1 : 0;
        er = p.e > 0 ? (m.e / p.e) / (1 + be) : 1;
        st->n++;
        st->gen_late += m.t_gen >= m.t_train;
        st->sl += l;
        st->sl2 += l * l;
        st->se += er;
    }
    judge(ctl, st, next);
    if (++st->since_probe >= (st->locked ? EE_PROBE_LOCKED : EE_PROBE_EVERY) &&
        eerl_setting_equal(next, &st->cur)) {
        st->since_probe = 0;
        st->probing = 1;
        memset(next, 0, sizeof(*next));
        eerl__ctl_emit(ctl, EERL_EV_REFRESH, &st->cur, "one governor probe update");
        return;
    }
    if (st->n > 0)
        eerl__ctl_emit(ctl, EERL_EV_HOLD, &st->cur, "%s %u updates",
                       eerl__setting_str(&st->cur, b, sizeof(b)), st->n);
}

const struct eerl__strategy_ops eerl__strategy_eerl = {
    .name = "eerl",
    .st_size = sizeof(struct ee_st),
    .init = ee_init,
    .fini = NULL,
    .observe = ee_observe,
    .state = ee_state,
    .restore = ee_restore,
};

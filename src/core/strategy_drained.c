/* The asynchronous drained strategy (section 6.2, Algorithm 1, Table 3): calibration at governor
 * clocks records both pools' arrivals at the rendezvous; round 1 searches the pool that usually
 * arrives first on the first grid (50 MHz) with the other pool at governor; round 2 lowers the
 * second pool on the second grid (100 MHz) with round 1's confirmed clock held, keeping it only if
 * the pair meets the allowance and uses less energy than round 1's setting alone. A training-only
 * slowdown is judged by recomputing the governor references' update times from their recorded
 * arrivals; other candidates by the whole-update prediction. Trials sit between governor
 * observations; each round's best is confirmed on fresh updates; the monitor adjusts the lock.
 * Owns only its state struct. */
#include <stdio.h>
#include <string.h>

#include "core/controller.h"
#include "core/search.h"

/* DR_LOCKED: the search is over; the controller runs the updates (lifecycle.c). */
enum { DR_CAL, DR_TRIAL, DR_GAP, DR_CONFIRM, DR_LOCKED };

struct drained_st {
    int phase;
    unsigned count;
    int round;
    int group[2];
    unsigned grid[2], drop[2];
    eerl_setting base;
    double base_energy;
    eerl_setting cand, pending;
    int pending_confirm;
    unsigned trials;
    struct eerl__acc acc;
    struct eerl__tried_set tried;
};

static const char *group_name(int g)
{
    return g == EERL_GROUP_GEN ? "generation" : "training";
}

static eerl_ctl_state dr_state(const void *vst)
{
    const struct drained_st *st = vst;

    switch (st->phase) {
    case DR_CAL:
        return EERL_STATE_CALIBRATING;
    case DR_TRIAL:
        return EERL_STATE_SEARCHING;
    case DR_GAP:
        return st->pending_confirm ? EERL_STATE_CONFIRMING : EERL_STATE_SEARCHING;
    case DR_CONFIRM:
        return EERL_STATE_CONFIRMING;
    default:
        return EERL_STATE_LOCKED;
    }
}

/* Section 6.2: a training-only slowdown is judged from the recorded arrivals. */
static void judge(const struct eerl_ctl *ctl, const eerl_setting *s, const struct eerl__acc *a,
                  struct eerl__ratios *r)
{
    if (s->mhz[EERL_GROUP_GEN] == EERL_CLOCK_GOVERNOR &&
        s->mhz[EERL_GROUP_TRAIN] != EERL_CLOCK_GOVERNOR)
        eerl__judge_arrivals(ctl, a, r);
    else
        eerl__judge_whole(ctl, a, r);
}

static void start_pending(struct eerl_ctl *ctl, struct drained_st *st, eerl_setting *next)
{
    char b[48];

    st->phase = st->pending_confirm ? DR_CONFIRM : DR_TRIAL;
    st->cand = st->pending;
    st->count = 0;
    eerl__acc_reset(&st->acc);
    *next = st->cand;
    eerl__ctl_emit(ctl, EERL_EV_PROPOSE, &st->cand, "round %d (%s pool): %s %s for %u updates",
                   st->round + 1, group_name(st->group[st->round]),
                   st->pending_confirm ? "confirm" : "trial",
                   eerl__setting_str(&st->cand, b, sizeof(b)),
                   st->pending_confirm ? ctl->cfg.confirm_updates : ctl->cfg.trial_updates);
}

/* Runs the pending trial or confirmation after the governor observations between trials. */
static void go_pending(struct eerl_ctl *ctl, struct drained_st *st, eerl_setting *next)
{
    if (ctl->cfg.governor_between > 0) {
        memset(next, 0, sizeof(*next));
        st->phase = DR_GAP;
        st->count = 0;
    } else {
        start_pending(ctl, st, next);
    }
}

static void lock(struct eerl_ctl *ctl, struct drained_st *st, const eerl_setting *s,
                 eerl_setting *next, const char *why)
{
    st->phase = DR_LOCKED;
    eerl__ctl_watch(ctl, eerl_setting_is_governor(s));
    eerl__ctl_lock(ctl, s, next, why);
}

static void start_round(struct eerl_ctl *ctl, struct drained_st *st, eerl_setting *next)
{
    unsigned clock = 0;
    int g = st->group[st->round];

    memset(&st->tried, 0, sizeof(st->tried));
    st->trials = 0;
    if (eerl__ctl_step(ctl, EERL_CLOCK_GOVERNOR, -(int)st->drop[st->round], &clock) < 0 ||
        clock == EERL_CLOCK_GOVERNOR) {
        lock(ctl, st, &st->base, next, "no supported clock below the governor's peak");
        return;
    }
    st->pending = eerl__with_group(ctl, &st->base, g, clock);
    st->pending_confirm = 0;
    go_pending(ctl, st, next);
}

/* A round ends with its confirmed setting (or none): round 1 hands over to round 2, round 2
 * locks. */
static void end_round(struct eerl_ctl *ctl, struct drained_st *st, const eerl_setting *result,
                      double energy, eerl_setting *next)
{
    char b[48];
    eerl_setting keep = result ? *result : st->base;

    eerl__ctl_emit(ctl, EERL_EV_ROUND, &keep, "round %d (%s pool) ends with %s%s", st->round + 1,
                   group_name(st->group[st->round]), eerl__setting_str(&keep, b, sizeof(b)),
                   result ? "" : " (no lower clock qualified)");
    if (result) {
        st->base = *result;
        st->base_energy = energy;
    }
    if (st->round == 0) {
        st->round = 1;
        start_round(ctl, st, next);
        return;
    }
    lock(ctl, st, &st->base, next,
         eerl_setting_is_governor(&st->base) ? "no tested setting passed; the governor stays"
                                             : "both pools searched");
}

/* After a trial or failed confirmation: next trial on the line, else confirm the best, else the
 * round is over. */
static void advance(struct eerl_ctl *ctl, struct drained_st *st, eerl_verdict v, eerl_setting *next)
{
    const struct eerl__tried *best;
    int g = st->group[st->round];

    if (st->trials < ctl->cfg.max_trials &&
        eerl__line_next(ctl, &st->tried, &st->base, g, st->cand.mhz[g], st->grid[st->round], v,
                        &st->pending)) {
        st->pending_confirm = 0;
        go_pending(ctl, st, next);
    } else if ((best = eerl__tried_best(&st->tried))) {
        st->pending = best->s;
        st->pending_confirm = 1;
        go_pending(ctl, st, next);
    } else {
        end_round(ctl, st, NULL, 0, next);
    }
}

static void calibrated(struct eerl_ctl *ctl, struct drained_st *st, eerl_setting *next)
{
    unsigned gen_first = 0, i;
    struct eerl__parts m;
    int first;

    for (i = 0; i < ctl->ref_n; i++) {
        eerl__obs_parts(ctl->layout, eerl__ctl_ref(ctl, i), &m);
        if (m.t_gen < m.t_train)
            gen_first++;
    }
    /* The pool that usually arrives first waits at the rendezvous: its slack is searched first.
     * A tie goes to training, which the paper found to be the useful target. */
    first = 2 * gen_first > ctl->ref_n ? EERL_GROUP_GEN : EERL_GROUP_TRAIN;
    st->group[0] = first;
    st->group[1] = first == EERL_GROUP_GEN ? EERL_GROUP_TRAIN : EERL_GROUP_GEN;
    st->grid[0] = ctl->cfg.first_grid_mhz;
    st->grid[1] = ctl->cfg.second_grid_mhz;
    st->drop[0] = ctl->cfg.start_drop_first_mhz;
    st->drop[1] = ctl->cfg.start_drop_second_mhz;
    memset(&st->base, 0, sizeof(st->base));
    st->base_energy = 1.0;
    st->round = 0;
    eerl__ctl_emit(ctl, EERL_EV_CALIBRATED, next,
                   "predictor fitted on %zu governor updates; generation arrived first in %u: "
                   "search the %s pool first",
                   ctl->ref_n, gen_first, group_name(first));
    start_round(ctl, st, next);
}

static void dr_observe(struct eerl_ctl *ctl, void *vst, const eerl_obs *obs, int usable,
                       eerl_setting *next)
{
    struct drained_st *st = vst;
    const eerl_ctl_config *c = &ctl->cfg;
    struct eerl__ratios r;
    eerl_event *ev;
    char why[EERL_REASON_MAX], b[48];
    eerl_verdict v;
    int tf;

    if (!usable)
        return;
    switch (st->phase) {
    case DR_CAL:
        if (!eerl__ctl_ref_count(ctl, obs, &st->count, c->calibration_updates, "calibrating", next))
            return;
        calibrated(ctl, st, next);
        return;
    case DR_GAP:
        if (!eerl__ctl_ref_count(ctl, obs, &st->count, c->governor_between, "governor reference",
                                 next))
            return;
        start_pending(ctl, st, next);
        return;
    case DR_TRIAL:
    case DR_CONFIRM: {
        int confirm = st->phase == DR_CONFIRM;
        unsigned need = confirm ? c->confirm_updates : c->trial_updates;
        double cap = st->round == 0 ? 1.0 : st->base_energy;
        struct eerl__tried *t;

        eerl__acc_add(&st->acc, ctl, obs);
        if (++st->count < need) {
            eerl__ctl_emit(ctl, EERL_EV_HOLD, &st->cand, "%s %s %u/%u",
                           confirm ? "confirming" : "trial",
                           eerl__setting_str(&st->cand, b, sizeof(b)), st->count, need);
            return;
        }
        judge(ctl, &st->cand, &st->acc, &r);
        v = eerl__verdict(c, &r, cap, &tf, why, sizeof(why));
        if (!confirm) {
            st->trials++;
            eerl__ctl_trial_done(ctl);
            eerl__tried_put(&st->tried, &st->cand, v, tf, &r);
        } else if (v == EERL_VERDICT_FAIL && (t = eerl__tried_find(&st->tried, &st->cand))) {
            t->confirm_failed = 1;
        }
        ev = eerl__ctl_emit(
            ctl, confirm ? EERL_EV_CONFIRM : EERL_EV_TRIAL, &st->cand, "%s%s", why,
            st->round == 1 && v == EERL_VERDICT_FAIL && !tf ? " (round 1 setting alone)" : "");
        eerl__event_set(ev, &r, st->acc.n, v);
        if (confirm && v == EERL_VERDICT_PASS) {
            end_round(ctl, st, &st->cand, r.energy, next);
            return;
        }
        if (confirm) {
            const struct eerl__tried *best = eerl__tried_best(&st->tried);
            if (best) {
                st->pending = best->s;
                st->pending_confirm = 1;
                go_pending(ctl, st, next);
                return;
            }
        }
        advance(ctl, st, v, next);
        return;
    }
    default: /* DR_LOCKED: the controller has the updates */
        return;
    }
}

const struct eerl__strategy_ops eerl__strategy_drained = {
    .name = "paper-drained",
    .st_size = sizeof(struct drained_st),
    .observe = dr_observe,
    .state = dr_state,
    .judge = judge,
    .monitor_own_groups = 1,
};

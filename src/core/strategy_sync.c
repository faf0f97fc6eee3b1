/* The synchronous strategy (colocated and disaggregated; sections 5.1, 5.2, 6.1, Algorithm 1):
 * calibration at governor clocks, then trials of cfg.trial_updates updates placed between
 * governor observations, judged by per-phase ratios at the observed work applied to the governor
 * references; both clocks start reduced; a failing pair raises the phase that added most time; a
 * passing pair leads lower; the best passing pair is confirmed on fresh updates and locked; the
 * monitor (monitor.c) adjusts it afterwards. Owns only its state struct. */
#include <stdio.h>
#include <string.h>

#include "core/controller.h"
#include "core/search.h"

/* SY_LOCKED: the search is over; the controller runs the updates (lifecycle.c). */
enum { SY_CAL, SY_TRIAL, SY_GAP, SY_CONFIRM, SY_LOCKED };

struct sync_st {
    int phase;
    unsigned count;
    eerl_setting cand, pending;
    int pending_confirm;
    unsigned trials;
    struct eerl__acc acc;
    struct eerl__tried_set tried;
};

static eerl_ctl_state sync_state(const void *vst)
{
    const struct sync_st *st = vst;

    switch (st->phase) {
    case SY_CAL:
        return EERL_STATE_CALIBRATING;
    case SY_TRIAL:
    case SY_GAP:
        return st->pending_confirm && st->phase == SY_GAP ? EERL_STATE_CONFIRMING
                                                          : EERL_STATE_SEARCHING;
    case SY_CONFIRM:
        return EERL_STATE_CONFIRMING;
    default:
        return EERL_STATE_LOCKED;
    }
}

/* A setting a time failure already rules out: no faster in either group than a pair that was too
 * slow. */
static int dominated(const struct eerl_ctl *ctl, const struct sync_st *st, const eerl_setting *s)
{
    unsigned i;

    for (i = 0; i < st->tried.n; i++) {
        const struct eerl__tried *t = &st->tried.t[i];
        if (t->v == EERL_VERDICT_FAIL && t->time_fail &&
            eerl__ctl_eff(ctl, s->mhz[0]) <= eerl__ctl_eff(ctl, t->s.mhz[0]) &&
            eerl__ctl_eff(ctl, s->mhz[1]) <= eerl__ctl_eff(ctl, t->s.mhz[1]))
            return 1;
    }
    return 0;
}

/* Moves group g of `from` by delta (0 = stays) and checks the result is new and worth a trial. */
static int try_move(struct eerl_ctl *ctl, struct sync_st *st, const eerl_setting *from, int dg,
                    int dt, eerl_setting *ret)
{
    unsigned g = from->mhz[0], t = from->mhz[1];
    eerl_setting s;

    if (dg && eerl__ctl_step(ctl, g, dg, &g) < 0)
        return 0;
    if (dt && eerl__ctl_step(ctl, t, dt, &t) < 0)
        return 0;
    s = eerl__ctl_setting(ctl, g, t);
    if (eerl_setting_is_governor(&s) || eerl__tried_find(&st->tried, &s) || dominated(ctl, st, &s))
        return 0;
    *ret = s;
    return 1;
}

static int lower_neighbour(struct eerl_ctl *ctl, struct sync_st *st, const eerl_setting *from,
                           eerl_setting *ret)
{
    int d = -(int)ctl->cfg.grid_mhz;
    return try_move(ctl, st, from, d, d, ret) || try_move(ctl, st, from, d, 0, ret) ||
           try_move(ctl, st, from, 0, d, ret);
}

/* Algorithm 1, "propose a candidate": from the last verdict, else from the frontier of passing
 * pairs (lowest energy first). 0 when the round's search is over. */
static int next_candidate(struct eerl_ctl *ctl, struct sync_st *st, const eerl_setting *from,
                          eerl_verdict v, const struct eerl__ratios *r, eerl_setting *ret)
{
    int up = (int)ctl->cfg.grid_mhz;
    const struct eerl__tried *order[EERL__TRIED_MAX];
    unsigned n = 0, i, j;

    if (st->trials >= ctl->cfg.max_trials)
        return 0;
    if (v == EERL_VERDICT_PASS) {
        if (lower_neighbour(ctl, st, from, ret))
            return 1;
    } else {
        int gen_first = r->add_gen > r->add_train;
        if (gen_first
                ? (try_move(ctl, st, from, up, 0, ret) || try_move(ctl, st, from, 0, up, ret))
                : (try_move(ctl, st, from, 0, up, ret) || try_move(ctl, st, from, up, 0, ret)))
            return 1;
    }
    for (i = 0; i < st->tried.n; i++)
        if (st->tried.t[i].v == EERL_VERDICT_PASS && !st->tried.t[i].confirm_failed)
            order[n++] = &st->tried.t[i];
    for (i = 1; i < n; i++)
        for (j = i; j > 0 && order[j]->energy_ratio < order[j - 1]->energy_ratio; j--) {
            const struct eerl__tried *x = order[j];
            order[j] = order[j - 1];
            order[j - 1] = x;
        }
    for (i = 0; i < n; i++)
        if (lower_neighbour(ctl, st, &order[i]->s, ret))
            return 1;
    return 0;
}

static void start_pending(struct eerl_ctl *ctl, struct sync_st *st, eerl_setting *next)
{
    char b[48];

    st->phase = st->pending_confirm ? SY_CONFIRM : SY_TRIAL;
    st->cand = st->pending;
    st->count = 0;
    eerl__acc_reset(&st->acc);
    *next = st->cand;
    eerl__ctl_emit(ctl, EERL_EV_PROPOSE, &st->cand, "%s %s for %u updates",
                   st->pending_confirm ? "confirm" : "trial",
                   eerl__setting_str(&st->cand, b, sizeof(b)),
                   st->pending_confirm ? ctl->cfg.confirm_updates : ctl->cfg.trial_updates);
}

static void lock(struct eerl_ctl *ctl, struct sync_st *st, const eerl_setting *s,
                 eerl_setting *next, const char *why)
{
    eerl_setting gov;

    memset(&gov, 0, sizeof(gov));
    st->phase = SY_LOCKED;
    eerl__ctl_watch(ctl, s == NULL);
    eerl__ctl_lock(ctl, s ? s : &gov, next, why);
}

/* The pending trial or confirmation, after cfg.governor_between governor updates (references)
 * if there are any. */
static void go_pending(struct eerl_ctl *ctl, struct sync_st *st, eerl_setting *next)
{
    if (ctl->cfg.governor_between > 0) {
        memset(next, 0, sizeof(*next));
        st->phase = SY_GAP;
        st->count = 0;
    } else {
        start_pending(ctl, st, next);
    }
}

/* After a verdict: the next trial, else confirmation of the best passing pair, else governor. */
static void advance(struct eerl_ctl *ctl, struct sync_st *st, const eerl_setting *from,
                    eerl_verdict v, const struct eerl__ratios *r, eerl_setting *next)
{
    const struct eerl__tried *best;

    if (next_candidate(ctl, st, from, v, r, &st->pending)) {
        st->pending_confirm = 0;
    } else if ((best = eerl__tried_best(&st->tried))) {
        st->pending = best->s;
        st->pending_confirm = 1;
    } else {
        lock(ctl, st, NULL, next, "no tested setting passed; the governor stays");
        return;
    }
    go_pending(ctl, st, next);
}

/* Section 6.1: per-phase ratios at the observed work applied to the governor references. */
static void sync_judge(const struct eerl_ctl *ctl, const eerl_setting *s, const struct eerl__acc *a,
                       struct eerl__ratios *r)
{
    (void)s;
    eerl__judge_parts(ctl, a, r);
}

static void sync_observe(struct eerl_ctl *ctl, void *vst, const eerl_obs *obs, int usable,
                         eerl_setting *next)
{
    struct sync_st *st = vst;
    const eerl_ctl_config *c = &ctl->cfg;
    struct eerl__ratios r;
    eerl_setting start;
    eerl_event *ev;
    char why[EERL_REASON_MAX], b[48];
    eerl_verdict v;
    int tf;

    if (!usable)
        return;
    switch (st->phase) {
    case SY_CAL:
        if (!eerl__ctl_ref_count(ctl, obs, &st->count, c->calibration_updates, "calibrating", next))
            return;
        eerl__ctl_emit(ctl, EERL_EV_CALIBRATED, next,
                       "predictor fitted on %zu governor updates (generation features %s%s, "
                       "training %s)",
                       ctl->ref_n, ctl->pred.t_gen.used & 1u ? "G" : "",
                       ctl->pred.t_gen.used & 4u ? "L" : "",
                       ctl->pred.t_train.used & 2u ? "N" : "none");
        {
            unsigned g = 0, t = 0;
            (void)eerl__ctl_step(ctl, EERL_CLOCK_GOVERNOR, -(int)c->start_drop_gen_mhz, &g);
            (void)eerl__ctl_step(ctl, EERL_CLOCK_GOVERNOR, -(int)c->start_drop_train_mhz, &t);
            start = eerl__ctl_setting(ctl, g, t);
        }
        if (eerl_setting_is_governor(&start)) {
            lock(ctl, st, NULL, next, "no supported clock below the governor's peak");
            return;
        }
        st->pending = start;
        st->pending_confirm = 0;
        start_pending(ctl, st, next);
        return;
    case SY_GAP:
        if (!eerl__ctl_ref_count(ctl, obs, &st->count, c->governor_between, "governor reference",
                                 next))
            return;
        start_pending(ctl, st, next);
        return;
    case SY_TRIAL:
    case SY_CONFIRM: {
        int confirm = st->phase == SY_CONFIRM;
        unsigned need = confirm ? c->confirm_updates : c->trial_updates;
        struct eerl__tried *t;

        eerl__acc_add(&st->acc, ctl, obs);
        if (++st->count < need) {
            eerl__ctl_emit(ctl, EERL_EV_HOLD, &st->cand, "%s %s %u/%u",
                           confirm ? "confirming" : "trial",
                           eerl__setting_str(&st->cand, b, sizeof(b)), st->count, need);
            return;
        }
        eerl__judge_parts(ctl, &st->acc, &r);
        v = eerl__verdict(c, &r, 1.0, &tf, why, sizeof(why));
        if (!confirm) {
            st->trials++;
            eerl__ctl_trial_done(ctl);
            t = eerl__tried_put(&st->tried, &st->cand, v, tf, &r);
            (void)t;
        } else {
            t = eerl__tried_find(&st->tried, &st->cand);
            if (t && v == EERL_VERDICT_FAIL) {
                t->confirm_failed = 1;
                t->time_fail = tf;
            }
        }
        ev = eerl__ctl_emit(ctl, confirm ? EERL_EV_CONFIRM : EERL_EV_TRIAL, &st->cand, "%s%s", why,
                            v == EERL_VERDICT_FAIL && tf
                                ? (r.add_gen > r.add_train ? "; generation added most time"
                                                           : "; training added most time")
                                : "");
        eerl__event_set(ev, &r, st->acc.n, v);
        if (confirm && v == EERL_VERDICT_PASS) {
            lock(ctl, st, &st->cand, next, "confirmed on fresh updates");
            return;
        }
        if (confirm) {
            /* Algorithm 1 line 10: the next passing setting, else more search. */
            const struct eerl__tried *best = eerl__tried_best(&st->tried);
            if (best) {
                st->pending = best->s;
                st->pending_confirm = 1;
                go_pending(ctl, st, next);
                return;
            }
        }
        advance(ctl, st, &st->cand, v, &r, next);
        return;
    }
    default: /* SY_LOCKED: the controller has the updates */
        return;
    }
}

const struct eerl__strategy_ops eerl__strategy_sync = {
    .name = "paper-sync",
    .st_size = sizeof(struct sync_st),
    .observe = sync_observe,
    .state = sync_state,
    .judge = sync_judge,
};

/* Algorithm 1's trial loop (section 5.2) for the paper's synchronous and drained strategies
 * (judge/trial_loop.h): calibration at governor clocks, governor updates between trials as fresh
 * references, fixed-length trials and confirmations judged by the mode's ratios and the pass
 * rule, the proposer asked what next after each verdict, and the lock handed to the controller
 * (lifecycle.c runs the monitoring after it). Owns only the loop's state struct. */
#include <stdio.h>
#include <string.h>

#include "core/judge/trial_loop.h"

/* TR_LOCKED: the search is over; the controller runs the updates (lifecycle.c). */
enum { TR_CAL, TR_TRIAL, TR_GAP, TR_CONFIRM, TR_LOCKED };

eerl_ctl_state eerl__trials_state(const void *vst)
{
    const struct eerl__trials_st *st = vst;

    switch (st->phase) {
    case TR_CAL:
        return EERL_STATE_CALIBRATING;
    case TR_TRIAL:
        return EERL_STATE_SEARCHING;
    case TR_GAP:
        return st->pending.kind == EERL__MOVE_CONFIRM ? EERL_STATE_CONFIRMING
                                                      : EERL_STATE_SEARCHING;
    case TR_CONFIRM:
        return EERL_STATE_CONFIRMING;
    default:
        return EERL_STATE_LOCKED;
    }
}

static void start_pending(const struct eerl__ctx *cx, struct eerl__trials_st *st,
                          eerl_setting *next)
{
    int confirm = st->pending.kind == EERL__MOVE_CONFIRM;
    char b[48];

    st->phase = confirm ? TR_CONFIRM : TR_TRIAL;
    st->cur = st->pending;
    st->count = 0;
    eerl__acc_reset(&st->acc);
    *next = st->cur.s;
    eerl__rec_emit(cx->rec, EERL_EV_PROPOSE, &st->cur.s, "%s%s %s for %u updates", st->cur.label,
                   confirm ? "confirm" : "trial", eerl_setting_str(&st->cur.s, b, sizeof(b)),
                   confirm ? cx->cfg->confirm_updates : cx->cfg->trial_updates);
}

/* The proposer's move: lock, or the candidate after cfg.governor_between governor updates
 * (references) if there are any and the mode wants them here. */
static void follow(const struct eerl__ctx *cx, struct eerl__trials_st *st,
                   const struct eerl__move *mv, int gap, eerl_setting *next)
{
    if (mv->kind == EERL__MOVE_STOP) {
        /* The controller sees the lock and hands the updates to its life cycle. */
        st->phase = TR_LOCKED;
        eerl__rec_lock(cx->rec, &mv->s, next, mv->why);
        return;
    }
    st->pending = *mv;
    if (gap && cx->cfg->governor_between > 0) {
        memset(next, 0, sizeof(*next));
        st->phase = TR_GAP;
        st->count = 0;
    } else {
        start_pending(cx, st, next);
    }
}

/* The candidate's last update is in: its verdict, then the proposer's next move. */
static void judge_candidate(const struct eerl__ctx *cx, struct eerl__trials_st *st,
                            const struct eerl__trials_mode *mode, eerl_setting *next)
{
    int confirm = st->phase == TR_CONFIRM, tf;
    char why[EERL_REASON_MAX];
    const char *note = "";
    struct eerl__outcome o;
    struct eerl__ratios r;
    struct eerl__move mv;
    eerl_event *ev;
    eerl_verdict v;

    mode->ratios(cx, &st->cur.s, &st->acc, &r);
    v = eerl__verdict(cx->cfg, &r, st->cur.energy_bar, &tf, why, sizeof(why));
    if (!confirm)
        eerl__rec_trial_done(cx->rec);
    if (v == EERL_VERDICT_FAIL && tf && mode->names_slow_group)
        note =
            r.add_gen > r.add_train ? "; generation added most time" : "; training added most time";
    else if (v == EERL_VERDICT_FAIL && !tf && st->cur.fail_note)
        note = st->cur.fail_note;
    ev = eerl__rec_emit(cx->rec, confirm ? EERL_EV_CONFIRM : EERL_EV_TRIAL, &st->cur.s, "%s%s", why,
                        note);
    eerl__event_set(ev, &r, st->acc.n, v);
    o = eerl__outcome_judged(&st->cur.s, v, tf, &r);
    o.confirm = confirm;
    eerl__propose_next(cx, &o, &mv);
    follow(cx, st, &mv, 1, next);
}

void eerl__trials_observe(const struct eerl__ctx *cx, struct eerl__trials_st *st,
                          const struct eerl__trials_mode *mode, const eerl_obs *obs, int usable,
                          eerl_setting *next)
{
    const eerl_ctl_config *c = cx->cfg;
    struct eerl__outcome from;
    struct eerl__move mv;
    char b[48];

    if (!usable)
        return;
    switch (st->phase) {
    case TR_CAL:
        if (!eerl__rec_calibrate(cx->rec, EERL__CAL_PAPER, obs, &st->count, next))
            return;
        from = eerl__outcome_of(next);
        from.slack_group = mode->calibrated(cx, next);
        eerl__propose_start(cx, &from, &mv);
        follow(cx, st, &mv, mode->gap_before_first, next);
        return;
    case TR_GAP:
        if (!eerl__rec_ref_count(cx->rec, obs, &st->count, c->governor_between,
                                 "governor reference", next))
            return;
        start_pending(cx, st, next);
        return;
    case TR_TRIAL:
    case TR_CONFIRM: {
        int confirm = st->phase == TR_CONFIRM;
        unsigned need = confirm ? c->confirm_updates : c->trial_updates;

        eerl__acc_add(&st->acc, cx, obs);
        if (++st->count < need) {
            eerl__rec_emit(cx->rec, EERL_EV_HOLD, &st->cur.s, "%s %s %u/%u",
                           confirm ? "confirming" : "trial",
                           eerl_setting_str(&st->cur.s, b, sizeof(b)), st->count, need);
            return;
        }
        judge_candidate(cx, st, mode, next);
        return;
    }
    default: /* TR_LOCKED: the controller has the updates */
        return;
    }
}

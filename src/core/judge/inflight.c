/* The paper's asynchronous in-flight strategy (sections 5.3, 6.3, 7.4, Table 3): its judge, and
 * its own monitoring after lock. A longer calibration at governor clocks measures
 * update-to-update noise and the correlation of neighbouring updates; the block length is the
 * shortest of cfg.block_choices whose candidate-vs-governor comparison reaches cfg.se_target
 * standard error. Each candidate block is bracketed by governor blocks and judged on matched
 * work (measured / predicted ratios of the candidate over those of the bracketing governor
 * blocks, ratios.c's eerl__ratios_blocks). Updates carrying requests from the previous setting
 * never enter a block (the controller skips them). The less busy pool has the slack: the
 * proposer (propose/rounds.c) searches it first (first grid), then the other (second grid) with
 * the first held; a confirmation takes 1-2 blocks. At its lock it hands the updates to the
 * controller's life cycle (lifecycle.c: a governor check block after every
 * cfg.inflight_lock_candidate_blocks locked blocks) with its block length, the pools' order and
 * grids and its last governor block. Owns only its state struct. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/judge.h"
#include "core/propose.h"
#include "core/ratios.h"

enum { IF_CAL, IF_CAND, IF_GOV, IF_LOCKED };

struct inflight_st {
    int phase;
    unsigned count, block;
    double se;             /* standard error of one block comparison */
    int group[2];          /* the pools in the order the proposer searches them (slack first) */
    unsigned grid[2];      /* and their grids */
    struct eerl__move cur; /* the candidate or confirmation under test */
    int confirming;
    unsigned confirm_done;
    struct eerl__acc conf_cand, conf_gov;
    struct eerl__acc gov_prev, gov_cur, cand_acc;
};

static const char *group_name(int g)
{
    return g == EERL_GROUP_GEN ? "generation" : "training";
}

static eerl_ctl_state if_state(const void *vst)
{
    const struct inflight_st *st = vst;

    switch (st->phase) {
    case IF_CAL:
        return EERL_STATE_CALIBRATING;
    case IF_CAND:
    case IF_GOV:
        return st->confirming ? EERL_STATE_CONFIRMING : EERL_STATE_SEARCHING;
    default:
        return EERL_STATE_LOCKED;
    }
}

/* Variance factor of the mean of b AR(1) updates with lag-1 correlation rho. */
static double ar1_factor(double rho, unsigned b)
{
    double s = 1.0, p = 1.0;
    unsigned k;

    for (k = 1; k < b; k++) {
        p *= rho;
        s += 2.0 * (1.0 - (double)k / b) * p;
    }
    return s;
}

static void start_block(const struct eerl__ctx *cx, struct inflight_st *st,
                        const struct eerl__move *mv, int confirming, eerl_setting *next)
{
    char b[48];

    st->cur = *mv;
    st->confirming = confirming;
    st->phase = IF_CAND;
    st->count = 0;
    eerl__acc_reset(&st->cand_acc);
    *next = mv->s;
    eerl__rec_emit(cx->rec, EERL_EV_PROPOSE, &mv->s, "%s%s %s for a block of %u", mv->label,
                   confirming ? "confirm" : "trial", eerl_setting_str(&mv->s, b, sizeof(b)),
                   st->block);
}

/* The search is over: the controller sees the lock and hands the updates to its life cycle. */
static void lock(const struct eerl__ctx *cx, struct inflight_st *st, const eerl_setting *s,
                 eerl_setting *next, const char *why)
{
    st->count = 0;
    st->phase = IF_LOCKED;
    eerl__rec_lock(cx->rec, s, next, why);
}

static void if_handover(const void *vst, struct eerl__handover *ret)
{
    const struct inflight_st *st = vst;

    ret->block = st->block;
    ret->group[0] = st->group[0];
    ret->group[1] = st->group[1];
    ret->grid[0] = st->grid[0];
    ret->grid[1] = st->grid[1];
    ret->gov_prev = st->gov_prev;
}

/* The proposer's move: a candidate block, a confirmation (fresh sums), or the lock. */
static void follow(const struct eerl__ctx *cx, struct inflight_st *st, const struct eerl__move *mv,
                   eerl_setting *next)
{
    switch (mv->kind) {
    case EERL__MOVE_STOP:
        lock(cx, st, &mv->s, next, mv->why);
        return;
    case EERL__MOVE_CONFIRM:
        st->confirm_done = 0;
        eerl__acc_reset(&st->conf_cand);
        eerl__acc_reset(&st->conf_gov);
        start_block(cx, st, mv, 1, next);
        return;
    default:
        start_block(cx, st, mv, 0, next);
        return;
    }
}

static void propose_next(const struct eerl__ctx *cx, struct inflight_st *st, eerl_verdict v, int tf,
                         const struct eerl__ratios *r, eerl_setting *next)
{
    struct eerl__outcome o = eerl__outcome_judged(&st->cur.s, v, tf, r);
    struct eerl__move mv;

    o.confirm = st->confirming;
    eerl__propose_next(cx, &o, &mv);
    follow(cx, st, &mv, next);
}

/* A candidate block and its closing governor block are complete: judge and move on. */
static void judge_block(const struct eerl__ctx *cx, struct inflight_st *st, eerl_setting *next)
{
    const eerl_ctl_config *c = cx->cfg;
    double cap = st->cur.energy_bar;
    struct eerl__acc gov = st->gov_prev;
    struct eerl__ratios r;
    char why[EERL_REASON_MAX];
    eerl_event *ev;
    eerl_verdict v;
    int tf;

    eerl__acc_merge(&gov, &st->gov_cur);
    st->gov_prev = st->gov_cur;
    eerl__acc_reset(&st->gov_cur);
    if (!st->confirming) {
        eerl__ratios_blocks(&st->cand_acc, &gov, &r);
        v = eerl__verdict(c, &r, cap, &tf, why, sizeof(why));
        eerl__rec_trial_done(cx->rec);
        ev = eerl__rec_emit(cx->rec, EERL_EV_TRIAL, &st->cur.s, "%s", why);
        eerl__event_set(ev, &r, st->cand_acc.n, v);
        propose_next(cx, st, v, tf, &r, next);
        return;
    }
    eerl__acc_merge(&st->conf_cand, &st->cand_acc);
    eerl__acc_merge(&st->conf_gov, &gov);
    st->confirm_done++;
    eerl__ratios_blocks(&st->conf_cand, &st->conf_gov, &r);
    v = eerl__verdict(c, &r, cap, &tf, why, sizeof(why));
    if (v == EERL_VERDICT_PASS && st->confirm_done < c->confirm_trials_max &&
        1.0 / r.time - (1.0 - c->allowed_loss) < st->se) {
        /* A single block cannot rule out a small loss: one more before deciding. */
        ev = eerl__rec_emit(cx->rec, EERL_EV_CONFIRM, &st->cur.s,
                            "%s; margin below one standard error (%.2f%%), confirm again", why,
                            100 * st->se);
        eerl__event_set(ev, &r, st->conf_cand.n, EERL_VERDICT_NONE);
        start_block(cx, st, &st->cur, 1, next);
        return;
    }
    ev = eerl__rec_emit(cx->rec, EERL_EV_CONFIRM, &st->cur.s, "%s", why);
    eerl__event_set(ev, &r, st->conf_cand.n, v);
    propose_next(cx, st, v, tf, &r, next);
}

static void calibrated(const struct eerl__ctx *cx, struct inflight_st *st, eerl_setting *next)
{
    const eerl_ctl_config *c = cx->cfg;
    double res[1024], mean = 0, var = 0, cov = 0, sd, rho, busy_g = 0, busy_t = 0, tt = 0;
    size_t n = cx->refs->n, i, from;
    struct eerl__outcome start;
    struct eerl__move mv;
    unsigned b = 0;
    int k;

    /* Residuals of log time against the token-work model, in update order. */
    for (i = 0; i < n; i++) {
        const eerl_obs *o = eerl__refs_at(cx->refs, i);
        struct eerl__parts p, m;
        eerl__pred_predict(&cx->refs->pred, o, &p);
        eerl__obs_parts(EERL__LAYOUT_OVERLAP, o, &m);
        res[i] = log(o->time_s / p.t);
        mean += res[i];
        busy_g += m.t_gen;
        busy_t += m.t_train;
        tt += o->time_s;
    }
    mean /= (double)n;
    for (i = 0; i < n; i++)
        var += (res[i] - mean) * (res[i] - mean);
    for (i = 0; i + 1 < n; i++)
        cov += (res[i] - mean) * (res[i + 1] - mean);
    sd = n > 1 ? sqrt(var / (double)(n - 1)) : 0;
    rho = var > 0 ? cov / var : 0;
    if (rho < 0)
        rho = 0;
    if (rho > 0.95)
        rho = 0.95;
    for (k = 0; k < EERL_BLOCK_CHOICES_MAX && c->block_choices[k]; k++) {
        unsigned bb = c->block_choices[k];
        /* Candidate block against the mean of two governor blocks. */
        double se = sd * sqrt(ar1_factor(rho, bb) / bb * 1.5);
        b = bb;
        st->se = se;
        if (se <= c->se_target)
            break;
    }
    st->block = b;
    eerl__rec_set_block(cx->rec, b);
    eerl__rec_emit(cx->rec, EERL_EV_BLOCK, next,
                   "noise %.2f%% per update, lag-1 correlation %.2f: blocks of %u give %.2f%% "
                   "standard error (target %.2f%%)",
                   100 * sd, rho, b, 100 * st->se, 100 * c->se_target);
    /* The less busy pool has the slack; without per-pool times, training (the paper's useful
     * target). */
    st->group[0] = busy_g > 0 && busy_t > 0 && busy_g < busy_t ? EERL_GROUP_GEN : EERL_GROUP_TRAIN;
    st->group[1] = st->group[0] == EERL_GROUP_GEN ? EERL_GROUP_TRAIN : EERL_GROUP_GEN;
    st->grid[0] = c->first_grid_mhz;
    st->grid[1] = c->second_grid_mhz;
    eerl__rec_emit(cx->rec, EERL_EV_CALIBRATED, next,
                   "predictor fitted on %zu governor updates; pools busy %.0f%% (generation) and "
                   "%.0f%% (training): search the %s pool first",
                   n, tt > 0 ? 100 * busy_g / tt : 0.0, tt > 0 ? 100 * busy_t / tt : 0.0,
                   group_name(st->group[0]));
    /* The last calibration block is the first candidate's leading governor block. */
    eerl__acc_reset(&st->gov_prev);
    eerl__acc_reset(&st->gov_cur);
    from = n > b ? n - b : 0;
    for (i = from; i < n; i++)
        eerl__acc_add(&st->gov_prev, cx, eerl__refs_at(cx->refs, i));
    start = eerl__outcome_of(next);
    start.slack_group = st->group[0];
    eerl__propose_start(cx, &start, &mv);
    follow(cx, st, &mv, next);
}

static void if_observe(const struct eerl__ctx *cx, void *vst, const eerl_obs *obs, int usable,
                       eerl_setting *next)
{
    struct inflight_st *st = vst;
    char b[48];

    if (!usable)
        return;
    switch (st->phase) {
    case IF_CAL:
        if (!eerl__rec_calibrate(cx->rec, EERL__CAL_PAPER, obs, &st->count, next))
            return;
        calibrated(cx, st, next);
        return;
    case IF_CAND:
        eerl__acc_add(&st->cand_acc, cx, obs);
        if (++st->count < st->block) {
            eerl__rec_emit(cx->rec, EERL_EV_HOLD, &st->cur.s, "%s block %s %u/%u",
                           st->confirming ? "confirmation" : "candidate",
                           eerl_setting_str(&st->cur.s, b, sizeof(b)), st->count, st->block);
            return;
        }
        st->phase = IF_GOV;
        st->count = 0;
        memset(next, 0, sizeof(*next));
        eerl__rec_emit(cx->rec, EERL_EV_HOLD, &st->cur.s,
                       "block of %s done; governor block follows",
                       eerl_setting_str(&st->cur.s, b, sizeof(b)));
        return;
    case IF_GOV:
        eerl__acc_add(&st->gov_cur, cx, obs);
        if (!eerl__rec_ref_count(cx->rec, obs, &st->count, st->block, "governor block", next))
            return;
        judge_block(cx, st, next);
        return;
    default: /* IF_LOCKED: the controller has the updates */
        return;
    }
}

const struct eerl__judge_ops eerl__judge_inflight = {
    .name = "paper-inflight",
    .st_size = sizeof(struct inflight_st),
    .init = NULL,
    .observe = if_observe,
    .state = if_state,
    .handover = if_handover,
    .after = EERL__AFTER_BLOCKS,
};

/* The asynchronous in-flight strategy (sections 6.3, 7.4, Table 3): a longer calibration at
 * governor clocks measures update-to-update noise and the correlation of neighbouring updates;
 * the block length is the shortest of cfg.block_choices whose candidate-vs-governor comparison
 * reaches cfg.se_target standard error. Each candidate block is bracketed by governor blocks and
 * judged on matched work (measured / predicted ratios of the candidate over those of the
 * bracketing governor blocks). Updates carrying requests from the previous setting never enter a
 * block (the controller skips them). The less busy pool is searched first (first grid), then the
 * other (second grid) with the first held; the best is confirmed in 1-2 blocks, then locked; after
 * lock one governor block follows every cfg.inflight_lock_candidate_blocks candidate blocks and a
 * failed check raises the last lowered pool by its grid step. Owns only its state struct. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/controller.h"
#include "core/search.h"

enum { IF_CAL, IF_CAND, IF_GOV, IF_LCAND, IF_LGOV, IF_DONE };

struct inflight_st {
    int phase;
    unsigned count, block;
    double se; /* standard error of one block comparison */
    int round;
    int group[2];
    unsigned grid[2], drop[2];
    eerl_setting base;
    double base_energy;
    eerl_setting cand;
    int confirming;
    unsigned confirm_done;
    struct eerl__acc conf_cand, conf_gov;
    struct eerl__acc gov_prev, gov_cur, cand_acc;
    unsigned trials;
    struct eerl__tried_set tried;
    unsigned lock_blocks;
    struct eerl__acc lock_acc;
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
    case IF_LGOV:
        return EERL_STATE_MONITORING;
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

static void start_block(struct eerl_ctl *ctl, struct inflight_st *st, const eerl_setting *s,
                        int confirming, eerl_setting *next)
{
    char b[48];

    st->cand = *s;
    st->confirming = confirming;
    st->phase = IF_CAND;
    st->count = 0;
    eerl__acc_reset(&st->cand_acc);
    *next = *s;
    eerl__ctl_emit(ctl, EERL_EV_PROPOSE, s, "round %d (%s pool): %s %s for a block of %u",
                   st->round + 1, group_name(st->group[st->round]),
                   confirming ? "confirm" : "trial", eerl__setting_str(s, b, sizeof(b)), st->block);
}

static void lock(struct eerl_ctl *ctl, struct inflight_st *st, const eerl_setting *s,
                 eerl_setting *next, const char *why)
{
    st->lock_blocks = 0;
    st->count = 0;
    eerl__acc_reset(&st->lock_acc);
    st->phase = eerl_setting_is_governor(s) ? IF_DONE : IF_LCAND;
    eerl__ctl_lock(ctl, s, next, why);
}

static void start_round(struct eerl_ctl *ctl, struct inflight_st *st, eerl_setting *next)
{
    unsigned clock = 0;
    eerl_setting s;

    memset(&st->tried, 0, sizeof(st->tried));
    st->trials = 0;
    if (eerl__ctl_step(ctl, EERL_CLOCK_GOVERNOR, -(int)st->drop[st->round], &clock) < 0 ||
        clock == EERL_CLOCK_GOVERNOR) {
        lock(ctl, st, &st->base, next, "no supported clock below the governor's peak");
        return;
    }
    s = eerl__with_group(ctl, &st->base, st->group[st->round], clock);
    start_block(ctl, st, &s, 0, next);
}

static void end_round(struct eerl_ctl *ctl, struct inflight_st *st, const eerl_setting *result,
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

static void start_confirm(struct eerl_ctl *ctl, struct inflight_st *st, const eerl_setting *s,
                          eerl_setting *next)
{
    st->confirm_done = 0;
    eerl__acc_reset(&st->conf_cand);
    eerl__acc_reset(&st->conf_gov);
    start_block(ctl, st, s, 1, next);
}

static void advance(struct eerl_ctl *ctl, struct inflight_st *st, eerl_verdict v,
                    eerl_setting *next)
{
    const struct eerl__tried *best;
    eerl_setting s;
    int g = st->group[st->round];

    if (st->trials < ctl->cfg.max_trials &&
        eerl__line_next(ctl, &st->tried, &st->base, g, st->cand.mhz[g], st->grid[st->round], v, &s))
        start_block(ctl, st, &s, 0, next);
    else if ((best = eerl__tried_best(&st->tried)))
        start_confirm(ctl, st, &best->s, next);
    else
        end_round(ctl, st, NULL, 0, next);
}

/* A candidate block and its closing governor block are complete: judge and move on. */
static void judge_block(struct eerl_ctl *ctl, struct inflight_st *st, eerl_setting *next)
{
    const eerl_ctl_config *c = &ctl->cfg;
    double cap = st->round == 0 ? 1.0 : st->base_energy;
    struct eerl__acc gov = st->gov_prev;
    struct eerl__ratios r;
    struct eerl__tried *t;
    char why[EERL_REASON_MAX];
    eerl_event *ev;
    eerl_verdict v;
    int tf;

    eerl__acc_merge(&gov, &st->gov_cur);
    st->gov_prev = st->gov_cur;
    eerl__acc_reset(&st->gov_cur);
    if (!st->confirming) {
        eerl__judge_blocks(&st->cand_acc, &gov, &r);
        v = eerl__verdict(c, &r, cap, &tf, why, sizeof(why));
        st->trials++;
        eerl__ctl_trial_done(ctl);
        eerl__tried_put(&st->tried, &st->cand, v, tf, &r);
        ev = eerl__ctl_emit(ctl, EERL_EV_TRIAL, &st->cand, "%s", why);
        eerl__event_set(ev, &r, st->cand_acc.n, v);
        advance(ctl, st, v, next);
        return;
    }
    eerl__acc_merge(&st->conf_cand, &st->cand_acc);
    eerl__acc_merge(&st->conf_gov, &gov);
    st->confirm_done++;
    eerl__judge_blocks(&st->conf_cand, &st->conf_gov, &r);
    v = eerl__verdict(c, &r, cap, &tf, why, sizeof(why));
    if (v == EERL_VERDICT_PASS && st->confirm_done < c->confirm_trials_max &&
        1.0 / r.time - (1.0 - c->allowed_loss) < st->se) {
        /* A single block cannot rule out a small loss: one more before deciding. */
        ev = eerl__ctl_emit(ctl, EERL_EV_CONFIRM, &st->cand,
                            "%s; margin below one standard error (%.2f%%), confirm again", why,
                            100 * st->se);
        eerl__event_set(ev, &r, st->conf_cand.n, EERL_VERDICT_NONE);
        start_block(ctl, st, &st->cand, 1, next);
        return;
    }
    ev = eerl__ctl_emit(ctl, EERL_EV_CONFIRM, &st->cand, "%s", why);
    eerl__event_set(ev, &r, st->conf_cand.n, v);
    if (v == EERL_VERDICT_PASS) {
        end_round(ctl, st, &st->cand, r.energy, next);
        return;
    }
    if ((t = eerl__tried_find(&st->tried, &st->cand)))
        t->confirm_failed = 1;
    {
        const struct eerl__tried *best = eerl__tried_best(&st->tried);
        if (best) {
            start_confirm(ctl, st, &best->s, next);
            return;
        }
    }
    advance(ctl, st, EERL_VERDICT_FAIL, next);
}

static void calibrated(struct eerl_ctl *ctl, struct inflight_st *st, eerl_setting *next)
{
    const eerl_ctl_config *c = &ctl->cfg;
    double res[1024], mean = 0, var = 0, cov = 0, sd, rho, busy_g = 0, busy_t = 0, tt = 0;
    size_t n = ctl->ref_n, i, from;
    unsigned b = 0;
    int k;

    /* Residuals of log time against the token-work model, in update order. */
    for (i = 0; i < n; i++) {
        const eerl_obs *o = eerl__ctl_ref(ctl, i);
        struct eerl__parts p, m;
        eerl__pred_predict(&ctl->pred, o, &p);
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
    eerl__ctl_set_block(ctl, b);
    eerl__ctl_emit(ctl, EERL_EV_BLOCK, next,
                   "noise %.2f%% per update, lag-1 correlation %.2f: blocks of %u give %.2f%% "
                   "standard error (target %.2f%%)",
                   100 * sd, rho, b, 100 * st->se, 100 * c->se_target);
    /* Less busy pool first; without per-pool times, training (the paper's useful target). */
    st->group[0] = busy_g > 0 && busy_t > 0 && busy_g < busy_t ? EERL_GROUP_GEN : EERL_GROUP_TRAIN;
    st->group[1] = st->group[0] == EERL_GROUP_GEN ? EERL_GROUP_TRAIN : EERL_GROUP_GEN;
    st->grid[0] = c->first_grid_mhz;
    st->grid[1] = c->second_grid_mhz;
    st->drop[0] = c->start_drop_first_mhz;
    st->drop[1] = c->start_drop_second_mhz;
    memset(&st->base, 0, sizeof(st->base));
    st->base_energy = 1.0;
    st->round = 0;
    eerl__ctl_emit(ctl, EERL_EV_CALIBRATED, next,
                   "predictor fitted on %zu governor updates; pools busy %.0f%% (generation) and "
                   "%.0f%% (training): search the %s pool first",
                   n, tt > 0 ? 100 * busy_g / tt : 0.0, tt > 0 ? 100 * busy_t / tt : 0.0,
                   group_name(st->group[0]));
    /* The last calibration block is the first candidate's leading governor block. */
    eerl__acc_reset(&st->gov_prev);
    eerl__acc_reset(&st->gov_cur);
    from = n > b ? n - b : 0;
    for (i = from; i < n; i++)
        eerl__acc_add(&st->gov_prev, ctl, eerl__ctl_ref(ctl, i));
    start_round(ctl, st, next);
}

static void if_observe(struct eerl_ctl *ctl, void *vst, const eerl_obs *obs, int usable,
                       eerl_setting *next)
{
    struct inflight_st *st = vst;
    const eerl_ctl_config *c = &ctl->cfg;
    char b[48], why[EERL_REASON_MAX];

    if (!usable)
        return;
    switch (st->phase) {
    case IF_CAL:
        if (!eerl__ctl_ref_count(ctl, obs, &st->count, c->calibration_updates, "calibrating", next))
            return;
        calibrated(ctl, st, next);
        return;
    case IF_CAND:
        eerl__acc_add(&st->cand_acc, ctl, obs);
        if (++st->count < st->block) {
            eerl__ctl_emit(ctl, EERL_EV_HOLD, &st->cand, "%s block %s %u/%u",
                           st->confirming ? "confirmation" : "candidate",
                           eerl__setting_str(&st->cand, b, sizeof(b)), st->count, st->block);
            return;
        }
        st->phase = IF_GOV;
        st->count = 0;
        memset(next, 0, sizeof(*next));
        eerl__ctl_emit(ctl, EERL_EV_HOLD, &st->cand, "block of %s done; governor block follows",
                       eerl__setting_str(&st->cand, b, sizeof(b)));
        return;
    case IF_GOV:
    case IF_LGOV:
        eerl__acc_add(&st->gov_cur, ctl, obs);
        if (!eerl__ctl_ref_count(ctl, obs, &st->count, st->block, "governor block", next))
            return;
        if (st->phase == IF_GOV) {
            judge_block(ctl, st, next);
            return;
        }
        {
            struct eerl__acc gov = st->gov_prev;
            struct eerl__ratios r;
            eerl_event *ev;
            eerl_verdict v;
            int tf;

            eerl__acc_merge(&gov, &st->gov_cur);
            st->gov_prev = st->gov_cur;
            eerl__acc_reset(&st->gov_cur);
            eerl__judge_blocks(&st->lock_acc, &gov, &r);
            v = eerl__verdict(c, &r, 1.0, &tf, why, sizeof(why));
            ev = eerl__ctl_emit(ctl, EERL_EV_MONITOR, &ctl->locked_setting, "%s", why);
            eerl__event_set(ev, &r, st->lock_acc.n, v);
            st->phase = IF_LCAND;
            st->count = 0;
            st->lock_blocks = 0;
            eerl__acc_reset(&st->lock_acc);
            if (v == EERL_VERDICT_FAIL) {
                /* Raise the pool lowered last (round 2's if it was lowered) by its grid. */
                int g = ctl->locked_setting.mhz[st->group[1]] != EERL_CLOCK_GOVERNOR ? st->group[1]
                                                                                     : st->group[0];
                unsigned grid = g == st->group[1] ? st->grid[1] : st->grid[0], nv = 0;
                eerl_setting ns;
                if (eerl__ctl_step(ctl, ctl->locked_setting.mhz[g], (int)grid, &nv) < 0)
                    nv = EERL_CLOCK_GOVERNOR;
                ns = eerl__with_group(ctl, &ctl->locked_setting, g, nv);
                eerl__ctl_adjust(ctl, &ns, next, "check failed: raise %s by %u MHz", group_name(g),
                                 grid);
                if (eerl_setting_is_governor(&ns))
                    st->phase = IF_DONE;
            }
            *next = ctl->locked_setting;
        }
        return;
    case IF_LCAND:
        eerl__acc_add(&st->lock_acc, ctl, obs);
        if (++st->count < st->block) {
            eerl__ctl_emit(ctl, EERL_EV_HOLD, &ctl->locked_setting, "locked at %s; block %u/%u",
                           eerl__setting_str(&ctl->locked_setting, b, sizeof(b)), st->count,
                           st->block);
            return;
        }
        st->count = 0;
        if (++st->lock_blocks < c->inflight_lock_candidate_blocks) {
            eerl__ctl_emit(ctl, EERL_EV_HOLD, &ctl->locked_setting, "locked block %u/%u done",
                           st->lock_blocks, c->inflight_lock_candidate_blocks);
            return;
        }
        st->phase = IF_LGOV;
        memset(next, 0, sizeof(*next));
        eerl__ctl_emit(ctl, EERL_EV_HOLD, &ctl->locked_setting,
                       "%u locked blocks done; governor check block follows", st->lock_blocks);
        return;
    default:
        eerl__ctl_emit(ctl, EERL_EV_HOLD, next, "governor kept: no setting qualified");
        return;
    }
}

const struct eerl__strategy_ops eerl__strategy_inflight = {
    .name = "paper-inflight",
    .st_size = sizeof(struct inflight_st),
    .init = NULL,
    .fini = NULL,
    .observe = if_observe,
    .state = if_state,
};

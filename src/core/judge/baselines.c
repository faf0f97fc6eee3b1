/* Baseline strategies for side-by-side comparison (beyond the paper; docs/controller.md):
 * - governor: the default governor throughout (the reference every saving is against);
 * - static: cfg.static_setting from the first update to the last (the oracle, when that setting
 *   is the best static one found offline);
 * - global-clock: the judge of propose/sweep.c's one-clock sweep: each step held for 5 usable
 *   updates and judged by the whole update against the governor prediction (Zeus);
 * - linear-search: the judge of propose/linear.c's per-group search: each clock judged by the
 *   best of 5 samples of that group's phase time against the best of 5 governor samples (GEOPM's
 *   energy-efficient agent).
 * The searching baselines calibrate the predictor on cfg.fast_calibration_updates governor
 * updates first, like the eerl strategy, and lock for good where their proposer stops. Own only
 * their state structs. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/judge.h"
#include "core/propose.h"
#include "core/ratios.h"

#define BL_SAMPLES 5

/* ---- governor --------------------------------------------------------------------------- */

struct gov_st {
    int dummy;
};

static eerl_ctl_state gov_state(const void *st)
{
    (void)st;
    return EERL_STATE_CALIBRATING;
}

static void gov_observe(const struct eerl__ctx *cx, void *st, const eerl_obs *obs, int usable,
                        eerl_setting *next)
{
    (void)st;
    (void)obs;
    (void)usable;
    memset(next, 0, sizeof(*next));
    eerl__rec_emit(cx->rec, EERL_EV_HOLD, next, "governor baseline: clocks left to the governor");
}

const struct eerl__judge_ops eerl__judge_governor = {
    .name = "governor",
    .st_size = sizeof(struct gov_st),
    .observe = gov_observe,
    .state = gov_state,
};

/* ---- static ----------------------------------------------------------------------------- */

static int static_init(const struct eerl__ctx *cx, void *st, struct eerl__judge_setup *ret_setup)
{
    eerl_setting s;
    int g;

    (void)st;
    (void)ret_setup;
    memset(&s, 0, sizeof(s));
    for (g = 0; g < EERL_GROUPS_MAX; g++)
        s.mhz[g] = eerl__grid_snap(cx->grid, cx->cfg->static_setting.mhz[g]);
    s.idle_mhz = cx->cfg->static_setting.idle_mhz
                     ? eerl__grid_snap(cx->grid, cx->cfg->static_setting.idle_mhz)
                     : EERL_CLOCK_GOVERNOR;
    eerl__rec_start_locked(cx->rec, &s);
    return 0;
}

static eerl_ctl_state static_state(const void *st)
{
    (void)st;
    return EERL_STATE_LOCKED;
}

static void static_observe(const struct eerl__ctx *cx, void *st, const eerl_obs *obs, int usable,
                           eerl_setting *next)
{
    char b[48];
    int *announced = st;

    (void)obs;
    (void)usable;
    (void)eerl__rec_locked(cx->rec, next);
    if (!*announced) {
        *announced = 1;
        eerl__rec_emit(cx->rec, EERL_EV_LOCK, next, "lock %s: static setting from the first update",
                       eerl_setting_str(next, b, sizeof(b)));
    } else {
        eerl__rec_emit(cx->rec, EERL_EV_HOLD, next, "static %s",
                       eerl_setting_str(next, b, sizeof(b)));
    }
}

const struct eerl__judge_ops eerl__judge_static = {
    .name = "static",
    .st_size = sizeof(int),
    .init = static_init,
    .observe = static_observe,
    .state = static_state,
};

/* ---- shared: calibration -------------------------------------------------------------------- */

/* Adds a calibration update; 1 once calibration is complete (the caller then starts). */
static int calibrate(const struct eerl__ctx *cx, unsigned *count, const eerl_obs *obs,
                     eerl_setting *next)
{
    if (!eerl__rec_calibrate(cx->rec, EERL__CAL_FAST, obs, count, next))
        return 0;
    eerl__rec_emit(cx->rec, EERL_EV_CALIBRATED, next, "predictor fitted on %zu governor updates",
                   cx->refs->n);
    return 1;
}

/* ---- global clock ------------------------------------------------------------------------ */

struct gc_st {
    int phase; /* 0 calibrating, 1 sweeping, 2 locked */
    unsigned count;
    struct eerl__acc acc;
};

static eerl_ctl_state gc_state(const void *vst)
{
    const struct gc_st *st = vst;
    return st->phase == 0   ? EERL_STATE_CALIBRATING
           : st->phase == 1 ? EERL_STATE_SEARCHING
                            : EERL_STATE_LOCKED;
}

static void gc_follow(const struct eerl__ctx *cx, struct gc_st *st, const struct eerl__move *mv,
                      eerl_setting *next)
{
    char b[48];

    if (mv->kind == EERL__MOVE_STOP) {
        st->phase = 2;
        eerl__rec_lock(cx->rec, &mv->s, next, mv->why);
        return;
    }
    eerl__acc_reset(&st->acc);
    *next = mv->s;
    eerl__rec_emit(cx->rec, EERL_EV_PROPOSE, next, "%s%s for %u updates", mv->label,
                   eerl_setting_str(next, b, sizeof(b)), BL_SAMPLES);
}

static void gc_observe(const struct eerl__ctx *cx, void *vst, const eerl_obs *obs, int usable,
                       eerl_setting *next)
{
    struct gc_st *st = vst;
    struct eerl__outcome o;
    struct eerl__ratios r;
    struct eerl__move mv;
    eerl_event *ev;
    int tf;
    char why[EERL_REASON_MAX];
    eerl_verdict v;

    if (!usable)
        return;
    if (st->phase == 0) {
        if (!calibrate(cx, &st->count, obs, next))
            return;
        st->phase = 1;
        o = eerl__outcome_of(next);
        eerl__propose_start(cx, &o, &mv);
        gc_follow(cx, st, &mv, next);
        return;
    }
    if (st->phase == 2) {
        eerl__rec_emit(cx->rec, EERL_EV_HOLD, next, "global clock locked");
        return;
    }
    eerl__acc_add(&st->acc, cx, obs);
    if (st->acc.n < BL_SAMPLES)
        return;
    eerl__ratios_whole(cx, &st->acc, &r);
    v = eerl__verdict(cx->cfg, &r, 1.0, &tf, why, sizeof(why));
    eerl__rec_trial_done(cx->rec);
    ev = eerl__rec_emit(cx->rec, EERL_EV_TRIAL, next, "%s", why);
    eerl__event_set(ev, &r, st->acc.n, v);
    o = eerl__outcome_judged(next, v, tf, &r);
    eerl__propose_next(cx, &o, &mv);
    gc_follow(cx, st, &mv, next);
}

const struct eerl__judge_ops eerl__judge_global_clock = {
    .name = "global-clock",
    .st_size = sizeof(struct gc_st),
    .observe = gc_observe,
    .state = gc_state,
};

/* ---- linear search ------------------------------------------------------------------------ */

struct ls_st {
    int phase; /* 0 calibrating, 1 searching, 2 locked */
    unsigned count;
    int group;       /* the group under test */
    unsigned trying; /* its clock */
    double best;     /* best (lowest) sample ratio at the clock under test */
    double gov_best[2];
    unsigned n;
};

static eerl_ctl_state ls_state(const void *vst)
{
    const struct ls_st *st = vst;
    return st->phase == 0   ? EERL_STATE_CALIBRATING
           : st->phase == 1 ? EERL_STATE_SEARCHING
                            : EERL_STATE_LOCKED;
}

/* The group's phase time over its governor prediction (whole update where the predictor does
 * not split it). */
static double group_ratio(const struct eerl__ctx *cx, const eerl_obs *obs, int g)
{
    struct eerl__parts m, p;
    double mt, pt;

    eerl__obs_parts(cx->layout, obs, &m);
    eerl__pred_predict(&cx->refs->pred, obs, &p);
    mt = g == 0 ? m.t_gen : m.t_train;
    pt = g == 0 ? p.t_gen : p.t_train;
    if (!(pt > 0) || !(mt > 0)) {
        mt = m.t;
        pt = p.t;
    }
    return pt > 0 ? mt / pt : 1.0;
}

static void ls_follow(const struct eerl__ctx *cx, struct ls_st *st, const struct eerl__move *mv,
                      eerl_setting *next)
{
    char b[48];

    if (mv->kind == EERL__MOVE_STOP) {
        st->phase = 2;
        eerl__rec_lock(cx->rec, &mv->s, next, mv->why);
        return;
    }
    st->group = mv->group;
    st->trying = mv->s.mhz[mv->group];
    st->n = 0;
    st->best = INFINITY;
    *next = mv->s;
    eerl__rec_emit(cx->rec, EERL_EV_PROPOSE, next, "%s%s, best of %u samples", mv->label,
                   eerl_setting_str(next, b, sizeof(b)), BL_SAMPLES);
}

static void ls_observe(const struct eerl__ctx *cx, void *vst, const eerl_obs *obs, int usable,
                       eerl_setting *next)
{
    struct ls_st *st = vst;
    struct eerl__outcome o;
    struct eerl__move mv;
    eerl_event *ev;
    double loss;
    int g;

    if (!usable)
        return;
    if (st->phase == 0) {
        int done = calibrate(cx, &st->count, obs, next);
        if (!done)
            return;
        /* Governor best of the last 5 calibration updates, per group, on the final fit. */
        for (g = 0; g < 2; g++) {
            size_t j, from = cx->refs->n > BL_SAMPLES ? cx->refs->n - BL_SAMPLES : 0;
            st->gov_best[g] = INFINITY;
            for (j = from; j < cx->refs->n; j++)
                st->gov_best[g] =
                    fmin(st->gov_best[g], group_ratio(cx, eerl__refs_at(cx->refs, j), g));
        }
        st->phase = 1;
        o = eerl__outcome_of(next);
        eerl__propose_start(cx, &o, &mv);
        ls_follow(cx, st, &mv, next);
        return;
    }
    if (st->phase == 2) {
        eerl__rec_emit(cx->rec, EERL_EV_HOLD, next, "linear search locked");
        return;
    }
    st->best = fmin(st->best, group_ratio(cx, obs, st->group));
    if (++st->n < BL_SAMPLES)
        return;
    loss = st->best / st->gov_best[st->group] - 1;
    eerl__rec_trial_done(cx->rec);
    ev = eerl__rec_emit(cx->rec, EERL_EV_TRIAL, next, "group %d at %u MHz: best-of-%u loss %.2f%%",
                        st->group, st->trying, BL_SAMPLES, 100 * loss);
    ev->time_ratio = 1 + loss;
    ev->n_updates = st->n;
    ev->verdict = loss > cx->cfg->allowed_loss ? EERL_VERDICT_FAIL : EERL_VERDICT_PASS;
    o = eerl__outcome_of(next);
    o.verdict = ev->verdict;
    o.too_slow = ev->verdict == EERL_VERDICT_FAIL;
    o.loss = loss;
    eerl__propose_next(cx, &o, &mv);
    ls_follow(cx, st, &mv, next);
}

const struct eerl__judge_ops eerl__judge_linear_search = {
    .name = "linear-search",
    .st_size = sizeof(struct ls_st),
    .observe = ls_observe,
    .state = ls_state,
};

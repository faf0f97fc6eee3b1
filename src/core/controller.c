/* Owns eerl_ctl: construction (validated config, sorted supported clocks, one allocation of
 * every buffer), observation intake (validation, usability, dispatch to the mode's strategy),
 * the governor reference ring and its predictor refit, the event ring, and the clock helpers
 * that guarantee every emitted clock is a supported one. Decides nothing itself: the strategy
 * does. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eerl/error.h"
#include "eerl/version.h"
#include "core/config.h"
#include "core/controller.h"
#include "core/phase_model.h"
#include "core/monitor.h"

static int cmp_desc(const void *a, const void *b)
{
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    return (x < y) - (x > y);
}

/* The strategies: which judge measures and which proposer searches, per strategy and mode
 * (strategy.h). A new combination is a line here; mode -1: every mode not listed before. */
static const struct combination {
    eerl_strategy strategy;
    int mode;
    const struct eerl__strategy_ops *judge;
    const struct eerl__proposer_ops *proposer;
} combinations[] = {
    {EERL_STRATEGY_PAPER, EERL_MODE_COLOCATED, &eerl__strategy_sync, &eerl__propose_pairs},
    {EERL_STRATEGY_PAPER, EERL_MODE_DISAGGREGATED, &eerl__strategy_sync, &eerl__propose_pairs},
    {EERL_STRATEGY_PAPER, EERL_MODE_DRAINED, &eerl__strategy_drained, &eerl__propose_rounds},
    {EERL_STRATEGY_PAPER, EERL_MODE_INFLIGHT, &eerl__strategy_inflight, &eerl__propose_rounds},
    /* In-flight the rate judges a clock, not the whole-update predictor
     * (strategy_eerl_inflight.c says why). */
    {EERL_STRATEGY_EERL, EERL_MODE_INFLIGHT, &eerl__strategy_eerl_inflight,
     &eerl__propose_pool_descent},
    /* Two groups: the model proposer; 3-4 groups keep the descent (eerl_ctl_new). */
    {EERL_STRATEGY_EERL, -1, &eerl__strategy_eerl, &eerl__propose_model},
    {EERL_STRATEGY_GOVERNOR, -1, &eerl__strategy_governor, NULL},
    {EERL_STRATEGY_STATIC, -1, &eerl__strategy_static, NULL},
    {EERL_STRATEGY_GLOBAL_CLOCK, -1, &eerl__strategy_global_clock, &eerl__propose_sweep},
    {EERL_STRATEGY_LINEAR_SEARCH, -1, &eerl__strategy_linear_search, &eerl__propose_linear},
};

static const struct combination *pick_strategy(eerl_strategy s, eerl_mode mode)
{
    size_t i;

    for (i = 0; i < sizeof(combinations) / sizeof(combinations[0]); i++)
        if (combinations[i].strategy == s &&
            (combinations[i].mode < 0 || combinations[i].mode == (int)mode))
            return &combinations[i];
    return NULL;
}

int eerl_ctl_new(eerl_mode mode, const eerl_ctl_config *cfg, const unsigned *clocks,
                 size_t n_clocks, unsigned governor_peak_mhz, eerl_ctl **ret_ctl)
{
    eerl_ctl *ctl = NULL;
    const struct combination *combo;
    eerl_ctl_config def;
    size_t i, k;
    int err = EERL_EINVAL;

    if ((unsigned)mode >= EERL_MODE_COUNT || !clocks || n_clocks == 0 || n_clocks > 4096 ||
        governor_peak_mhz == 0 || !ret_ctl)
        return EERL_EINVAL;
    if (!cfg) {
        eerl_ctl_config_default(mode, &def);
        cfg = &def;
    }
    if (eerl_ctl_config_check(cfg, NULL, 0) < 0)
        return EERL_EINVAL;
    for (i = 0; i < n_clocks; i++)
        if (clocks[i] == 0)
            return EERL_EINVAL;
    ctl = calloc(1, sizeof(*ctl));
    if (!ctl)
        return EERL_ENOMEM;
    ctl->mode = mode;
    if (eerl__ctl_config_import(mode, cfg, &ctl->cfg) < 0)
        goto fail;
    cfg = &ctl->cfg;
    ctl->peak = governor_peak_mhz;
    ctl->layout = eerl__layout_of(mode);
    combo = pick_strategy(cfg->strategy, mode);
    if (!combo)
        goto fail;
    ctl->ops = combo->judge;
    /* In-flight the eerl strategy searches the two pools (generation, training) only. */
    if (cfg->n_groups != 2 && mode == EERL_MODE_INFLIGHT && cfg->strategy == EERL_STRATEGY_EERL)
        goto fail;
    err = EERL_ENOMEM;
    ctl->clocks = malloc(n_clocks * sizeof(*ctl->clocks));
    ctl->refs = calloc(cfg->ref_window, sizeof(*ctl->refs));
    ctl->ref_ptrs = calloc(cfg->ref_window, sizeof(*ctl->ref_ptrs));
    ctl->st = calloc(1, ctl->ops->st_size);
    ctl->mon = calloc(1, sizeof(*ctl->mon));
    if (!ctl->clocks || !ctl->refs || !ctl->ref_ptrs || !ctl->st || !ctl->mon)
        goto fail;
    if (combo->proposer) {
        /* The model fits the two groups the predictor splits an update into (generation,
         * training); more declared groups are searched by the descent. */
        const struct eerl__proposer_ops *prop = combo->proposer;
        if (prop == &eerl__propose_model && cfg->n_groups != EERL__PM_GROUPS)
            prop = &eerl__propose_descent;
        ctl->pst = calloc(1, prop->st_size);
        if (!ctl->pst)
            goto fail;
        ctl->prop = prop;
    }
    memcpy(ctl->clocks, clocks, n_clocks * sizeof(*clocks));
    qsort(ctl->clocks, n_clocks, sizeof(*ctl->clocks), cmp_desc);
    for (i = 0, k = 0; i < n_clocks; i++)
        if (k == 0 || ctl->clocks[k - 1] != ctl->clocks[i])
            ctl->clocks[k++] = ctl->clocks[i];
    ctl->n_clocks = k;
    ctl->grid_top = ctl->peak;
    err = eerl__pred_work_init(&ctl->work, cfg->ref_window);
    if (err < 0)
        goto fail;
    err = eerl__monitor_init(ctl->mon, cfg->monitor_window);
    if (err < 0)
        goto fail;
    err = ctl->prop && ctl->prop->init ? ctl->prop->init(ctl, ctl->pst) : 0;
    if (err < 0)
        goto fail;
    err = ctl->ops->init ? ctl->ops->init(ctl, ctl->st) : 0;
    if (err < 0) {
        /* init cleaned up after itself; fini must not run on a half-built state. */
        ctl->ops = NULL;
        goto fail;
    }
    *ret_ctl = ctl;
    return 0;
fail:
    eerl_ctl_free(ctl);
    return err;
}

void eerl_ctl_free(eerl_ctl *ctl)
{
    if (!ctl)
        return;
    if (ctl->ops && ctl->ops->fini && ctl->st)
        ctl->ops->fini(ctl, ctl->st);
    eerl__pred_work_free(&ctl->work);
    if (ctl->mon)
        eerl__monitor_fini(ctl->mon);
    free(ctl->mon);
    free(ctl->pst);
    free(ctl->st);
    free(ctl->ref_ptrs);
    free(ctl->refs);
    free(ctl->clocks);
    free(ctl);
}

static eerl_event *ev_at(eerl_ctl *ctl, size_t i)
{
    return &ctl->events[(ctl->ev_head + i) % EERL__EVENTS_CAP];
}

static eerl_event *ev_vemit(eerl_ctl *ctl, eerl_event_kind kind, const eerl_setting *cand,
                            const char *fmt, va_list ap)
{
    eerl_event *ev;

    if (ctl->ev_n == EERL__EVENTS_CAP) {
        ctl->ev_head = (ctl->ev_head + 1) % EERL__EVENTS_CAP;
        ctl->ev_n--;
        ctl->ev_dropped++;
        if (ctl->ev_mark > 0)
            ctl->ev_mark--;
    }
    ev = ev_at(ctl, ctl->ev_n++);
    memset(ev, 0, sizeof(*ev));
    ev->update = ctl->cur_update;
    ev->kind = kind;
    if (cand)
        ev->candidate = *cand;
    ev->time_ratio = NAN;
    ev->energy_ratio = NAN;
    ev->meas_time_ratio = NAN;
    ev->meas_energy_ratio = NAN;
    vsnprintf(ev->reason, sizeof(ev->reason), fmt, ap);
    return ev;
}

eerl_event *eerl__ctl_emit(eerl_ctl *ctl, eerl_event_kind kind, const eerl_setting *cand,
                           const char *fmt, ...)
{
    eerl_event *ev;
    va_list ap;

    va_start(ap, fmt);
    ev = ev_vemit(ctl, kind, cand, fmt, ap);
    va_end(ap);
    return ev;
}

/* ---- the life cycle's record ------------------------------------------------------------------
 * The lock, its setting, the counters of trials and refreshes, the block length and the
 * reference fit's floor are written here and nowhere else; strategies tell the controller what
 * happened through these calls. */

void eerl__ctl_lock(eerl_ctl *ctl, const eerl_setting *s, eerl_setting *next, const char *why)
{
    char b[48];

    ctl->locked = 1;
    ctl->locked_setting = *s;
    if (next)
        *next = *s;
    eerl__ctl_emit(ctl, EERL_EV_LOCK, s, "lock %s: %s", eerl__setting_str(s, b, sizeof(b)), why);
}

void eerl__ctl_start_locked(eerl_ctl *ctl, const eerl_setting *s)
{
    ctl->locked = 1;
    ctl->locked_setting = *s;
    ctl->next = *s;
}

void eerl__ctl_adjust(eerl_ctl *ctl, const eerl_setting *s, eerl_setting *next, const char *fmt,
                      ...)
{
    va_list ap;

    ctl->locked_setting = *s;
    *next = *s;
    va_start(ap, fmt);
    (void)ev_vemit(ctl, EERL_EV_ADJUST, s, fmt, ap);
    va_end(ap);
}

void eerl__ctl_refresh(eerl_ctl *ctl, const eerl_setting *locked, eerl_setting *next,
                       const char *fmt, ...)
{
    va_list ap;

    ctl->refreshes++;
    memset(next, 0, sizeof(*next));
    va_start(ap, fmt);
    (void)ev_vemit(ctl, EERL_EV_REFRESH, locked, fmt, ap);
    va_end(ap);
}

void eerl__ctl_trial_done(eerl_ctl *ctl)
{
    ctl->trials++;
}

void eerl__ctl_set_block(eerl_ctl *ctl, unsigned updates)
{
    ctl->block_updates = updates;
}

void eerl__ctl_set_fit_floor(eerl_ctl *ctl, double min_t)
{
    ctl->pred_min_t = min_t;
}

void eerl__ctl_grid_below_peak(eerl_ctl *ctl)
{
    size_t i;

    for (i = 0; i < ctl->n_clocks; i++)
        if (ctl->clocks[i] < ctl->peak) {
            ctl->grid_top = ctl->clocks[i];
            return;
        }
}

void eerl__ctl_set_fit_opts(eerl_ctl *ctl, unsigned opts)
{
    ctl->pred_opts = opts;
}

static void move_init(struct eerl__move *m)
{
    memset(m, 0, sizeof(*m));
    m->kind = EERL__MOVE_TRY;
    m->group = -1;
    m->energy_bar = 1.0;
}

void eerl__ctl_propose_start(eerl_ctl *ctl, const struct eerl__outcome *from,
                             struct eerl__move *ret)
{
    move_init(ret);
    ctl->prop->start(ctl, ctl->pst, from, ret);
}

void eerl__ctl_propose_next(eerl_ctl *ctl, const struct eerl__outcome *o, struct eerl__move *ret)
{
    move_init(ret);
    ctl->prop->next(ctl, ctl->pst, o, ret);
}

struct eerl__outcome eerl__outcome_of(const eerl_setting *s)
{
    struct eerl__outcome o;

    memset(&o, 0, sizeof(o));
    o.s = *s;
    o.verdict = EERL_VERDICT_NONE;
    o.slack_group = -1;
    o.late_group = -1;
    o.wait_ratio = -1;
    return o;
}

static eerl_ctl_state state_of(const eerl_ctl *ctl)
{
    return ctl->after != EERL__AFTER_NONE ? eerl__ctl_after_state(ctl) : ctl->ops->state(ctl->st);
}

/* Stamps the events of this observation with the state and request that followed it. */
static void ev_finish(eerl_ctl *ctl)
{
    eerl_ctl_state st = state_of(ctl);
    size_t i;

    for (i = ctl->ev_mark; i < ctl->ev_n; i++) {
        ev_at(ctl, i)->state = st;
        ev_at(ctl, i)->next = ctl->next;
    }
    ctl->ev_mark = ctl->ev_n;
}

int eerl__ctl_ref_count(eerl_ctl *ctl, const eerl_obs *obs, unsigned *count, unsigned limit,
                        const char *what, const eerl_setting *next)
{
    eerl__ctl_ref_add(ctl, obs);
    if (++*count < limit) {
        eerl__ctl_emit(ctl, EERL_EV_HOLD, next, "%s %u/%u", what, *count, limit);
        return 0;
    }
    return 1;
}

int eerl__ctl_warmup(eerl_ctl *ctl, const eerl_setting *next)
{
    if (ctl->observed > ctl->cfg.warmup_updates)
        return 0;
    eerl__ctl_emit(ctl, EERL_EV_HOLD, next,
                   "start-up update %u/%u left out of the governor references (the paper fits "
                   "from update 2)",
                   (unsigned)ctl->observed, ctl->cfg.warmup_updates);
    return 1;
}

void eerl__ctl_ref_add(eerl_ctl *ctl, const eerl_obs *obs)
{
    size_t cap = ctl->cfg.ref_window, i;

    if (ctl->ref_n < cap) {
        ctl->refs[(ctl->ref_head + ctl->ref_n) % cap] = *obs;
        ctl->ref_n++;
    } else {
        ctl->refs[ctl->ref_head] = *obs;
        ctl->ref_head = (ctl->ref_head + 1) % cap;
    }
    for (i = 0; i < ctl->ref_n; i++)
        ctl->ref_ptrs[i] = eerl__ctl_ref(ctl, i);
    /* Observations were validated, so the fit only fails on impossible input; the previous
     * model stays in force if it does. */
    (void)eerl__pred_fit_opts(&ctl->pred, ctl->layout, ctl->ref_ptrs, ctl->ref_n, &ctl->work,
                              ctl->pred_min_t, ctl->pred_opts);
}

const eerl_obs *eerl__ctl_ref(const eerl_ctl *ctl, size_t i)
{
    return &ctl->refs[(ctl->ref_head + i) % ctl->cfg.ref_window];
}

unsigned eerl__ctl_eff(const eerl_ctl *ctl, unsigned mhz)
{
    return mhz == EERL_CLOCK_GOVERNOR || mhz >= ctl->peak ? ctl->peak : mhz;
}

unsigned eerl__ctl_snap(const eerl_ctl *ctl, unsigned mhz)
{
    unsigned best = ctl->clocks[0];
    size_t i;

    if (mhz == EERL_CLOCK_GOVERNOR || mhz >= ctl->peak)
        return EERL_CLOCK_GOVERNOR;
    for (i = 0; i < ctl->n_clocks; i++) {
        unsigned c = ctl->clocks[i];
        unsigned d = c > mhz ? c - mhz : mhz - c, bd = best > mhz ? best - mhz : mhz - best;
        if (d < bd)
            best = c;
    }
    /* The peak itself, if supported, means "governor" too. */
    return best >= ctl->peak ? EERL_CLOCK_GOVERNOR : best;
}

int eerl__ctl_step(const eerl_ctl *ctl, unsigned mhz, int delta, unsigned *ret)
{
    long cur = (long)eerl__ctl_eff(ctl, mhz), step = delta < 0 ? -(long)delta : delta, k, target;
    unsigned s;
    size_t i;

    if (delta == 0) {
        *ret = eerl__ctl_snap(ctl, (unsigned)cur);
        return 0;
    }
    /* Grid positions are anchored at the grid's top (top - k * step), so repeated steps keep the
     * nominal spacing on average even where the supported clocks do not fall on the grid. */
    k = ((long)ctl->grid_top - cur + step / 2) / step;
    target = (long)ctl->grid_top - (delta < 0 ? k + 1 : k - 1) * step;
    if (target >= (long)ctl->grid_top) {
        *ret = EERL_CLOCK_GOVERNOR;
        return 0;
    }
    if (target <= 0)
        target = 1;
    s = eerl__ctl_snap(ctl, (unsigned)target);
    if (delta < 0 && eerl__ctl_eff(ctl, s) >= (unsigned)cur) {
        /* Snapping undid the step: take the next supported clock below. */
        s = 0;
        for (i = 0; i < ctl->n_clocks; i++)
            if (ctl->clocks[i] < (unsigned)cur) {
                s = ctl->clocks[i];
                break;
            }
        if (!s)
            return EERL_ERANGE;
    } else if (delta > 0 && s != EERL_CLOCK_GOVERNOR && s <= (unsigned)cur) {
        s = EERL_CLOCK_GOVERNOR;
        for (i = ctl->n_clocks; i-- > 0;)
            if (ctl->clocks[i] > (unsigned)cur) {
                s = ctl->clocks[i] >= ctl->grid_top ? EERL_CLOCK_GOVERNOR : ctl->clocks[i];
                break;
            }
    }
    /* Below the lowest supported clock there is nothing to step to. */
    if (delta < 0 && target < (long)ctl->clocks[ctl->n_clocks - 1] &&
        (long)ctl->clocks[ctl->n_clocks - 1] - target > step / 2)
        return EERL_ERANGE;
    *ret = s;
    return 0;
}

eerl_setting eerl__ctl_setting(const eerl_ctl *ctl, unsigned gen, unsigned train)
{
    eerl_setting s;

    memset(&s, 0, sizeof(s));
    s.mhz[EERL_GROUP_GEN] = gen;
    s.mhz[EERL_GROUP_TRAIN] = train;
    if ((gen != EERL_CLOCK_GOVERNOR || train != EERL_CLOCK_GOVERNOR) && ctl->cfg.idle_mhz)
        s.idle_mhz = eerl__ctl_snap(ctl, ctl->cfg.idle_mhz);
    return s;
}

int eerl__ctl_first_train_drop(const eerl_ctl *ctl, unsigned drop, eerl_setting *ret)
{
    unsigned t = 0;

    (void)eerl__ctl_step(ctl, EERL_CLOCK_GOVERNOR, -(int)drop, &t);
    *ret = eerl__ctl_setting(ctl, EERL_CLOCK_GOVERNOR, t);
    return eerl_setting_is_governor(ret) ? EERL_ERANGE : 0;
}

int eerl_ctl_observe(eerl_ctl *ctl, const eerl_obs *obs, eerl_setting *ret_next)
{
    char why[EERL_REASON_MAX], a[48], b[48];
    eerl_setting next;
    int usable = 1;

    if (!ctl || !obs || !ret_next)
        return EERL_EINVAL;
    ctl->cur_update = obs->update;
    if (eerl_obs_check(ctl->mode, obs, ctl->cfg.time_tolerance, why, sizeof(why)) < 0) {
        ctl->rejected++;
        eerl__ctl_emit(ctl, EERL_EV_REJECT, &obs->setting, "%s", why);
        ev_finish(ctl);
        return EERL_EINVAL;
    }
    ctl->observed++;
    if (!eerl_setting_equal(&obs->setting, &ctl->next)) {
        eerl__ctl_emit(ctl, EERL_EV_SKIP, &obs->setting,
                       "setting in force %s differs from the requested %s",
                       eerl__setting_str(&obs->setting, a, sizeof(a)),
                       eerl__setting_str(&ctl->next, b, sizeof(b)));
        usable = 0;
    } else if (obs->flags & EERL_OBS_CARRYOVER) {
        eerl__ctl_emit(ctl, EERL_EV_SKIP, &obs->setting,
                       "carries requests started under the previous setting");
        usable = 0;
    }
    next = ctl->next;
    if (ctl->after == EERL__AFTER_NONE)
        ctl->ops->observe(ctl, ctl->st, obs, usable, &next);
    else if (usable)
        eerl__ctl_after_observe(ctl, obs, &next);
    ctl->next = next;
    ev_finish(ctl);
    *ret_next = next;
    return 0;
}

int eerl_ctl_setting(const eerl_ctl *ctl, eerl_setting *ret_setting)
{
    if (!ctl || !ret_setting)
        return EERL_EINVAL;
    *ret_setting = ctl->next;
    return 0;
}

size_t eerl_ctl_events(eerl_ctl *ctl, eerl_event *buf, size_t cap)
{
    size_t n = 0;

    if (!ctl || !buf)
        return 0;
    while (n < cap && ctl->ev_n > 0) {
        buf[n++] = ctl->events[ctl->ev_head];
        ctl->ev_head = (ctl->ev_head + 1) % EERL__EVENTS_CAP;
        ctl->ev_n--;
        if (ctl->ev_mark > 0)
            ctl->ev_mark--;
    }
    return n;
}

int eerl_ctl_get_status(const eerl_ctl *ctl, eerl_ctl_status *ret_status)
{
    eerl_ctl_status s;

    if (!ctl || !ret_status)
        return EERL_EINVAL;
    memset(&s, 0, sizeof(s));
    s.mode = ctl->mode;
    s.strategy = ctl->cfg.strategy;
    s.state = state_of(ctl);
    s.setting = ctl->next;
    s.locked = ctl->locked;
    s.locked_setting = ctl->locked_setting;
    s.observed = ctl->observed;
    s.rejected = ctl->rejected;
    s.trials = ctl->trials;
    s.refreshes = ctl->refreshes;
    s.events_dropped = ctl->ev_dropped;
    s.block_updates = ctl->block_updates;
    s.references = (unsigned)ctl->ref_n;
    *ret_status = s;
    return 0;
}

int eerl_ctl_describe(const eerl_ctl *ctl, eerl_ctl_config *ret_cfg, unsigned *clocks, size_t cap,
                      size_t *ret_n_clocks, unsigned *ret_peak_mhz)
{
    if (!ctl)
        return EERL_EINVAL;
    if (clocks && cap < ctl->n_clocks)
        return EERL_EOVERFLOW;
    if (ret_cfg)
        *ret_cfg = ctl->cfg;
    if (clocks)
        memcpy(clocks, ctl->clocks, ctl->n_clocks * sizeof(*clocks));
    if (ret_n_clocks)
        *ret_n_clocks = ctl->n_clocks;
    if (ret_peak_mhz)
        *ret_peak_mhz = ctl->peak;
    return 0;
}

/* ---- saved state ----------------------------------------------------------------------------- */

/* 3: a checksum of everything before it follows the references. 2 (the header carries a hash of
 * the decision settings) is still read, without a check: states saved before checksums resume. */
#define SAVE_MAGIC "EERLCTL3"
#define SAVE_MAGIC_V2 "EERLCTL2"
#define SAVE_SUM 8 /* bytes of the checksum */
#define SAVE_TAG 64

struct save_head {
    char magic[8];
    uint32_t version, mode, strategy, peak, n_clocks, n_groups;
    uint64_t clocks_hash, cfg_hash;
    char tag[SAVE_TAG];
    uint32_t locked, ref_n;
    eerl_setting locked_setting;
};

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    size_t i;

    for (i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ull;
    }
    return h;
}

static uint64_t clocks_hash(const eerl_ctl *ctl)
{
    uint64_t h = 1469598103934665603ull;
    size_t i;

    for (i = 0; i < ctl->n_clocks; i++) {
        h ^= ctl->clocks[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* The settings a saved lock was judged under, field by field (no struct padding). Left out on
 * purpose: the horizon (expected_updates, calibration lengths: a later job segment has fewer
 * updates left) and ref_window (restore takes the most recent references that fit). */
static uint64_t cfg_hash(const eerl_ctl_config *c)
{
    uint64_t h = 1469598103934665603ull;
    const double d[] = {c->allowed_loss,    c->min_saving, c->big_loss,       c->monitor_margin,
                        c->coverage_margin, c->se_target,  c->time_tolerance, c->budget_margin};
    const unsigned u[] = {c->trial_updates,
                          c->governor_between,
                          c->confirm_updates,
                          c->confirm_trials_max,
                          c->max_trials,
                          c->grid_mhz,
                          c->first_grid_mhz,
                          c->second_grid_mhz,
                          c->start_drop_gen_mhz,
                          c->start_drop_train_mhz,
                          c->start_drop_first_mhz,
                          c->start_drop_second_mhz,
                          c->feedback_step_mhz,
                          c->feedback_big_step_mhz,
                          c->monitor_every,
                          c->monitor_window,
                          c->idle_mhz,
                          c->refresh_updates,
                          c->coverage_fail_limit,
                          c->inflight_lock_candidate_blocks,
                          c->n_groups};
    unsigned g;

    h = fnv(h, d, sizeof(d));
    h = fnv(h, u, sizeof(u));
    h = fnv(h, c->block_choices, sizeof(c->block_choices));
    h = fnv(h, c->static_setting.mhz, sizeof(c->static_setting.mhz));
    for (g = 0; g < EERL_GROUPS_MAX; g++) {
        h = fnv(h, c->group_names[g], strnlen(c->group_names[g], sizeof(c->group_names[g])));
        h = fnv(h, "", 1);
    }
    h = fnv(h, &c->static_setting.idle_mhz, sizeof(c->static_setting.idle_mhz));
    return h;
}

static void head_of(const eerl_ctl *ctl, const char *tag, struct save_head *h)
{
    memset(h, 0, sizeof(*h));
    memcpy(h->magic, SAVE_MAGIC, 8);
    h->version = EERL_VERSION_HEX;
    h->mode = (uint32_t)ctl->mode;
    h->strategy = (uint32_t)ctl->cfg.strategy;
    h->peak = ctl->peak;
    h->n_clocks = (uint32_t)ctl->n_clocks;
    h->n_groups = ctl->cfg.n_groups;
    h->clocks_hash = clocks_hash(ctl);
    h->cfg_hash = cfg_hash(&ctl->cfg);
    snprintf(h->tag, sizeof(h->tag), "%s", tag ? tag : "");
}

/* FNV-1a over the state's bytes: every step is a bijection of the running hash, so any one changed
 * byte changes the sum (a flipped bit or byte is always caught; more is caught but for 2^-64). */
static uint64_t state_sum(const unsigned char *p, size_t n)
{
    return fnv(1469598103934665603ull, p, n);
}

int eerl_ctl_save(const eerl_ctl *ctl, const char *tag, void *buf, size_t cap, size_t *ret_len)
{
    struct save_head h;
    uint64_t sum;
    size_t need, i;
    unsigned char *p = buf;

    if (!ctl || !ret_len || (tag && strlen(tag) >= SAVE_TAG))
        return EERL_EINVAL;
    need = sizeof(h) + ctl->ref_n * sizeof(eerl_obs) + SAVE_SUM;
    if (!buf || cap < need) {
        *ret_len = need;
        return EERL_EOVERFLOW;
    }
    head_of(ctl, tag, &h);
    h.locked = (uint32_t)ctl->locked;
    h.locked_setting = ctl->locked_setting;
    h.ref_n = (uint32_t)ctl->ref_n;
    memcpy(p, &h, sizeof(h));
    for (i = 0; i < ctl->ref_n; i++)
        memcpy(p + sizeof(h) + i * sizeof(eerl_obs), eerl__ctl_ref(ctl, i), sizeof(eerl_obs));
    sum = state_sum(p, need - SAVE_SUM);
    memcpy(p + need - SAVE_SUM, &sum, SAVE_SUM);
    *ret_len = need;
    return 0;
}

#define WHY(...)                                                                                   \
    do {                                                                                           \
        if (why && why_len)                                                                        \
            snprintf(why, why_len, __VA_ARGS__);                                                   \
    } while (0)

/* A saved state this controller cannot take: the controller starts a fresh search, and says so
 * in an event the first update's events carry (so a trace shows it, and a replay that restores
 * the same bytes reproduces it). */
static int refuse(eerl_ctl *ctl, int e, char *why, size_t why_len, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int refuse(eerl_ctl *ctl, int e, char *why, size_t why_len, const char *fmt, ...)
{
    char r[320];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(r, sizeof(r), fmt, ap);
    va_end(ap);
    WHY("%s", r);
    eerl__ctl_emit(ctl, EERL_EV_HOLD, &ctl->next, "resume refused: %s", r);
    ev_finish(ctl);
    return e;
}

/* The bytes are a whole saved state of a format this eerl reads, undamaged: the header into *h,
 * the checksum's length (0 for format 2, which has none) into *sum_len. */
static int check_bytes(eerl_ctl *ctl, const unsigned char *p, size_t len, struct save_head *h,
                       size_t *sum_len, char *why, size_t why_len)
{
    int v2 = len >= 8 && memcmp(p, SAVE_MAGIC_V2, 8) == 0;
    uint64_t sum, want;

    *sum_len = v2 ? 0 : SAVE_SUM;
    if (len >= 8 && memcmp(p, SAVE_MAGIC, 7) == 0 && !v2 && p[7] != (unsigned char)SAVE_MAGIC[7])
        return refuse(ctl, EERL_EVERSION, why, why_len,
                      "saved in state format %c, this eerl reads formats 2 and %c: fresh search",
                      p[7] >= 0x20 && p[7] < 0x7f ? p[7] : '?', SAVE_MAGIC[7]);
    if (len < sizeof(*h) + *sum_len || (!v2 && memcmp(p, SAVE_MAGIC, 8) != 0)) {
        WHY("not a saved controller state (%zu bytes)", len);
        return EERL_EPARSE;
    }
    memcpy(h, p, sizeof(*h));
    if (len != sizeof(*h) + (size_t)h->ref_n * sizeof(eerl_obs) + *sum_len || h->locked > 1) {
        WHY("saved state is truncated or damaged (%zu bytes for %u references)", len,
            (unsigned)h->ref_n);
        return EERL_EPARSE;
    }
    if (v2)
        return 0;
    memcpy(&want, p + len - SAVE_SUM, SAVE_SUM);
    sum = state_sum(p, len - SAVE_SUM);
    if (sum != want) {
        WHY("saved state is damaged: its checksum is 0x%016llx, its bytes sum to 0x%016llx",
            (unsigned long long)want, (unsigned long long)sum);
        return EERL_EPARSE;
    }
    return 0;
}

int eerl_ctl_restore(eerl_ctl *ctl, const char *tag, const void *buf, size_t len, char *why,
                     size_t why_len)
{
    struct save_head h, mine;
    const unsigned char *p = buf;
    eerl_setting next;
    size_t i, from, sum_len = 0;
    int e;

    if (!ctl || !buf || (tag && strlen(tag) >= SAVE_TAG)) {
        WHY("bad arguments");
        return EERL_EINVAL;
    }
    if (ctl->observed || ctl->rejected) {
        WHY("the controller has observed %llu updates already; restore before the first",
            (unsigned long long)(ctl->observed + ctl->rejected));
        return EERL_ESTATE;
    }
    e = check_bytes(ctl, p, len, &h, &sum_len, why, why_len);
    if (e < 0)
        return e;
    /* The layout is the state format's (SAVE_MAGIC's last letter changes with it); within one
     * major version a state saved by another release is read as compatible. */
    if (h.version >> 16 != EERL_VERSION_MAJOR)
        return refuse(ctl, EERL_EVERSION, why, why_len,
                      "saved by eerl version 0x%08x, this is 0x%08x (another major version): "
                      "fresh search",
                      (unsigned)h.version, (unsigned)EERL_VERSION_HEX);
    for (i = 0; i < h.ref_n; i++) {
        eerl_obs o;
        memcpy(&o, p + sizeof(h) + i * sizeof(eerl_obs), sizeof(o));
        if ((unsigned)h.mode < EERL_MODE_COUNT &&
            (eerl_obs_check((eerl_mode)h.mode, &o, ctl->cfg.time_tolerance, NULL, 0) < 0 ||
             !eerl_setting_is_governor(&o.setting))) {
            WHY("saved reference %zu is not a valid governor observation", i);
            return EERL_EPARSE;
        }
    }
    if (!ctl->ops->restore || ctl->ops == &eerl__strategy_inflight)
        return refuse(ctl, EERL_ENOTSUP, why, why_len,
                      "strategy %s does not resume in %s mode: fresh search",
                      eerl_strategy_name(ctl->cfg.strategy), eerl_mode_name(ctl->mode));
    head_of(ctl, tag, &mine);
    h.tag[SAVE_TAG - 1] = '\0';
    if (strcmp(h.tag, mine.tag) != 0)
        return refuse(ctl, EERL_ESTATE, why, why_len,
                      "saved on '%s', this run is '%s' (GPU model or allocation changed): "
                      "fresh search",
                      h.tag, mine.tag);
    if (h.mode != mine.mode || h.strategy != mine.strategy || h.n_groups != mine.n_groups)
        return refuse(ctl, EERL_ESTATE, why, why_len,
                      "saved for mode %s, strategy %s, %u groups; this run is %s, %s, %u groups: "
                      "fresh search",
                      eerl_mode_name((eerl_mode)h.mode),
                      eerl_strategy_name((eerl_strategy)h.strategy), (unsigned)h.n_groups,
                      eerl_mode_name(ctl->mode), eerl_strategy_name(ctl->cfg.strategy),
                      ctl->cfg.n_groups);
    if (h.peak != mine.peak || h.n_clocks != mine.n_clocks || h.clocks_hash != mine.clocks_hash)
        return refuse(ctl, EERL_ESTATE, why, why_len,
                      "saved for a GPU with peak %u MHz and %u clocks, this one has %u MHz and "
                      "%u (clock list changed): fresh search",
                      (unsigned)h.peak, (unsigned)h.n_clocks, mine.peak, (unsigned)mine.n_clocks);
    if (h.cfg_hash != mine.cfg_hash)
        return refuse(ctl, EERL_ESTATE, why, why_len,
                      "saved under another controller configuration (allowed loss, grids, "
                      "groups, ...): fresh search");
    if (h.ref_n < 3)
        return refuse(ctl, EERL_ESTATE, why, why_len,
                      "saved state holds %u governor references, too few to skip calibration: "
                      "fresh search",
                      (unsigned)h.ref_n);
    /* The most recent ref_window references are taken (the window may differ). */
    from = h.ref_n > ctl->cfg.ref_window ? h.ref_n - ctl->cfg.ref_window : 0;
    for (i = from; i < h.ref_n; i++) {
        eerl_obs o;
        memcpy(&o, p + sizeof(h) + i * sizeof(eerl_obs), sizeof(o));
        eerl__ctl_ref_add(ctl, &o);
    }
    if (h.locked) {
        int g;
        for (g = 0; g < EERL_GROUPS_MAX; g++)
            h.locked_setting.mhz[g] = eerl__ctl_snap(ctl, h.locked_setting.mhz[g]);
        if (h.locked_setting.idle_mhz)
            h.locked_setting.idle_mhz = eerl__ctl_snap(ctl, h.locked_setting.idle_mhz);
    }
    next = ctl->next;
    e = ctl->ops->restore(ctl, ctl->st, h.locked ? &h.locked_setting : NULL, &next);
    if (e < 0) {
        WHY("the saved references do not fit a predictor");
        return e;
    }
    ctl->next = next;
    ev_finish(ctl);
    if (sum_len == 0)
        WHY("state format 2 has no checksum: damage to it cannot be seen; the next save writes "
            "format %c, which has one",
            SAVE_MAGIC[7]);
    return 0;
}

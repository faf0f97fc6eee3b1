/* Owns eerl_ctl: construction (validated config, the clock grid, the record, the judge and
 * proposer the strategy and mode combine, the life cycle), observation intake (validation,
 * usability, dispatch to the judge or, after its lock, the life cycle), the public calls, and
 * save/restore's glue. The only file that names struct eerl_ctl: judges, proposers, the life
 * cycle and save.c see it through a const context (context.h) and act through the record
 * (record.h). Decides nothing itself. */
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eerl/error.h"
#include "eerl/options.h"
#include "core/config.h"
#include "core/context.h"
#include "core/controller.h"
#include "core/judge.h"
#include "core/lifecycle.h"
#include "core/phase_model.h"
#include "core/propose.h"
#include "core/propose/prior.h"
#include "core/save.h"

struct eerl_ctl {
    eerl_mode mode;
    eerl_ctl_config cfg;
    struct eerl__ctl_xopts x; /* its experimental options (eerl_ctl_set_option) */
    struct eerl__grid grid;
    struct eerl__rec *rec;
    struct eerl__ctx cx; /* what the judge, the proposer and the life cycle see */

    const struct eerl__judge_ops *judge; /* the judge (judge.h) and its state */
    void *st;
    const struct eerl__proposer_ops *prop; /* the proposer and its state; NULL: none */
    void *pst;
    struct eerl__prior_st *prior; /* a prior from earlier jobs in front of prop; NULL: none */
    struct eerl__life life;       /* after the judge's lock (lifecycle.c) */

    eerl_setting next; /* requested for the next update */
};

/* The strategies: which judge measures and which proposer searches, per strategy and mode
 * (judge.h, propose.h). A new combination is a line here; mode -1: every mode not listed
 * before. */
static const struct combination {
    eerl_strategy strategy;
    int mode;
    const struct eerl__judge_ops *judge;
    const struct eerl__proposer_ops *proposer;
} combinations[] = {
    {EERL_STRATEGY_PAPER, EERL_MODE_COLOCATED, &eerl__judge_sync, &eerl__propose_pairs},
    {EERL_STRATEGY_PAPER, EERL_MODE_DISAGGREGATED, &eerl__judge_sync, &eerl__propose_pairs},
    {EERL_STRATEGY_PAPER, EERL_MODE_DRAINED, &eerl__judge_drained, &eerl__propose_rounds},
    {EERL_STRATEGY_PAPER, EERL_MODE_INFLIGHT, &eerl__judge_inflight, &eerl__propose_rounds},
    /* In-flight the rate judges a clock, not the whole-update predictor
     * (judge/eerl_inflight.c says why). */
    {EERL_STRATEGY_EERL, EERL_MODE_INFLIGHT, &eerl__judge_eerl_inflight,
     &eerl__propose_pool_descent},
    /* Two groups: the model proposer; 3-4 groups keep the descent (eerl_ctl_new). */
    {EERL_STRATEGY_EERL, -1, &eerl__judge_eerl, &eerl__propose_model},
    {EERL_STRATEGY_GOVERNOR, -1, &eerl__judge_governor, NULL},
    {EERL_STRATEGY_STATIC, -1, &eerl__judge_static, NULL},
    {EERL_STRATEGY_GLOBAL_CLOCK, -1, &eerl__judge_global_clock, &eerl__propose_sweep},
    {EERL_STRATEGY_LINEAR_SEARCH, -1, &eerl__judge_linear_search, &eerl__propose_linear},
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

static int check_args(eerl_mode mode, const eerl_ctl_config *cfg, const unsigned *clocks,
                      size_t n_clocks, unsigned governor_peak_mhz)
{
    size_t i;

    if ((unsigned)mode >= EERL_MODE_COUNT || !clocks || n_clocks == 0 || n_clocks > 4096 ||
        governor_peak_mhz == 0)
        return EERL_EINVAL;
    if (eerl_ctl_config_check(cfg, NULL, 0) < 0)
        return EERL_EINVAL;
    for (i = 0; i < n_clocks; i++)
        if (clocks[i] == 0)
            return EERL_EINVAL;
    return 0;
}

/* The judge's and the proposer's state, and the judge's wishes applied. */
static int start_parts(eerl_ctl *ctl, const struct combination *combo)
{
    struct eerl__judge_setup setup;
    int err;

    ctl->st = calloc(1, ctl->judge->st_size);
    if (!ctl->st)
        return EERL_ENOMEM;
    if (combo->proposer) {
        /* The model fits the two groups the predictor splits an update into (generation,
         * training); more declared groups are searched by the descent. */
        const struct eerl__proposer_ops *prop = combo->proposer;
        if (prop == &eerl__propose_model && ctl->cfg.n_groups != EERL__PM_GROUPS)
            prop = &eerl__propose_descent;
        ctl->pst = calloc(1, prop->st_size);
        if (!ctl->pst)
            return EERL_ENOMEM;
        ctl->prop = prop;
    }
    ctl->cx.prop = ctl->prop;
    ctl->cx.pst = ctl->pst;
    err = ctl->prop && ctl->prop->init ? ctl->prop->init(&ctl->cx, ctl->pst) : 0;
    if (err < 0)
        return err;
    memset(&setup, 0, sizeof(setup));
    err = ctl->judge->init ? ctl->judge->init(&ctl->cx, ctl->st, &setup) : 0;
    if (err < 0)
        return err;
    if (setup.grid_below_peak)
        eerl__grid_top_below_peak(&ctl->grid);
    eerl__rec_set_fit(ctl->rec, setup.fit_min_t, setup.fit_opts);
    /* A judge that starts locked (the static baseline) runs its setting from the first update. */
    (void)eerl__rec_locked(ctl->rec, &ctl->next);
    return 0;
}

int eerl_ctl_new(eerl_mode mode, const eerl_ctl_config *cfg, const unsigned *clocks,
                 size_t n_clocks, unsigned governor_peak_mhz, eerl_ctl **ret_ctl)
{
    eerl_ctl *ctl = NULL;
    const struct combination *combo;
    eerl_ctl_config def;
    int err = EERL_EINVAL;

    if (!ret_ctl)
        return EERL_EINVAL;
    if (!cfg && (unsigned)mode < EERL_MODE_COUNT) {
        eerl_ctl_config_default(mode, &def);
        cfg = &def;
    }
    if (check_args(mode, cfg, clocks, n_clocks, governor_peak_mhz) < 0)
        return EERL_EINVAL;
    ctl = calloc(1, sizeof(*ctl));
    if (!ctl)
        return EERL_ENOMEM;
    ctl->mode = mode;
    if (eerl__ctl_config_import(mode, cfg, &ctl->cfg) < 0)
        goto fail;
    combo = pick_strategy(ctl->cfg.strategy, mode);
    /* In-flight the eerl strategy searches the two pools (generation, training) only. */
    if (!combo || (ctl->cfg.n_groups != 2 && mode == EERL_MODE_INFLIGHT &&
                   ctl->cfg.strategy == EERL_STRATEGY_EERL))
        goto fail;
    ctl->judge = combo->judge;
    err = eerl__grid_init(&ctl->grid, clocks, n_clocks, governor_peak_mhz, ctl->cfg.idle_mhz);
    if (err < 0)
        goto fail;
    eerl__options_xdefaults(mode, &ctl->x);
    err = eerl__rec_new(&ctl->cfg, &ctl->x, eerl__layout_of(mode), &ctl->rec);
    if (err < 0)
        goto fail;
    err = eerl__life_init(&ctl->life, ctl->cfg.monitor_window);
    if (err < 0)
        goto fail;
    ctl->cx.mode = mode;
    ctl->cx.layout = eerl__layout_of(mode);
    ctl->cx.cfg = &ctl->cfg;
    ctl->cx.grid = &ctl->grid;
    ctl->cx.refs = eerl__rec_refs(ctl->rec);
    ctl->cx.rec = ctl->rec;
    err = start_parts(ctl, combo);
    if (err < 0)
        goto fail;
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
    eerl__life_fini(&ctl->life);
    eerl__rec_free(ctl->rec);
    eerl__grid_free(&ctl->grid);
    free(ctl->pst);
    free(ctl->prior);
    free(ctl->st);
    free(ctl);
}

static eerl_ctl_state state_of(const eerl_ctl *ctl)
{
    return eerl__life_active(&ctl->life) ? eerl__life_state(&ctl->life)
                                         : ctl->judge->state(ctl->st);
}

/* One accepted observation: to the judge, or after its lock to the life cycle. */
static void decide(eerl_ctl *ctl, const eerl_obs *obs, int usable, eerl_setting *next)
{
    struct eerl__handover h;
    eerl_setting locked;

    if (eerl__life_active(&ctl->life)) {
        if (usable)
            eerl__life_observe(&ctl->life, &ctl->cx, ctl->judge, obs, next);
        return;
    }
    ctl->judge->observe(&ctl->cx, ctl->st, obs, usable, next);
    /* A judge that hands its lock over: the life cycle runs the updates from the next one. */
    if (ctl->judge->after == EERL__AFTER_JUDGE || !eerl__rec_locked(ctl->rec, &locked))
        return;
    memset(&h, 0, sizeof(h));
    if (ctl->judge->handover)
        ctl->judge->handover(ctl->st, &h);
    eerl__life_watch(&ctl->life, ctl->judge->after, eerl_setting_is_governor(&locked), &h);
}

int eerl_ctl_observe(eerl_ctl *ctl, const eerl_obs *obs, eerl_setting *ret_next)
{
    char why[EERL_REASON_MAX], a[48], b[48];
    eerl_setting next;
    int usable = 1;

    if (!ctl || !obs || !ret_next)
        return EERL_EINVAL;
    ctl->cx.update = obs->update;
    if (eerl_obs_check(ctl->mode, obs, ctl->cfg.time_tolerance, why, sizeof(why)) < 0) {
        eerl__rec_intake(ctl->rec, obs->update, 0);
        eerl__rec_emit(ctl->rec, EERL_EV_REJECT, &obs->setting, "%s", why);
        eerl__rec_finish(ctl->rec, state_of(ctl), &ctl->next);
        return EERL_EINVAL;
    }
    eerl__rec_intake(ctl->rec, obs->update, 1);
    if (!eerl_setting_equal(&obs->setting, &ctl->next)) {
        eerl__rec_emit(ctl->rec, EERL_EV_SKIP, &obs->setting,
                       "setting in force %s differs from the requested %s",
                       eerl_setting_str(&obs->setting, a, sizeof(a)),
                       eerl_setting_str(&ctl->next, b, sizeof(b)));
        usable = 0;
    } else if (obs->flags & EERL_OBS_CARRYOVER) {
        eerl__rec_emit(ctl->rec, EERL_EV_SKIP, &obs->setting,
                       "carries requests started under the previous setting");
        usable = 0;
    }
    next = ctl->next;
    decide(ctl, obs, usable, &next);
    ctl->next = next;
    eerl__rec_finish(ctl->rec, state_of(ctl), &ctl->next);
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
    if (!ctl || !buf)
        return 0;
    return eerl__rec_take(ctl->rec, buf, cap);
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
    eerl__rec_status(ctl->rec, &s);
    *ret_status = s;
    return 0;
}

int eerl_ctl_describe(const eerl_ctl *ctl, eerl_ctl_config *ret_cfg, unsigned *clocks, size_t cap,
                      size_t *ret_n_clocks, unsigned *ret_peak_mhz)
{
    if (!ctl)
        return EERL_EINVAL;
    if (clocks && cap < ctl->grid.n)
        return EERL_EOVERFLOW;
    if (ret_cfg)
        *ret_cfg = ctl->cfg;
    if (clocks)
        memcpy(clocks, ctl->grid.clocks, ctl->grid.n * sizeof(*clocks));
    if (ret_n_clocks)
        *ret_n_clocks = ctl->grid.n;
    if (ret_peak_mhz)
        *ret_peak_mhz = ctl->grid.peak;
    return 0;
}

/* ---- experimental options (the table's, options.c) ------------------------------------------ */

int eerl_ctl_set_option(eerl_ctl *ctl, const char *name, double value, char *why, size_t why_len)
{
    struct eerl__ctl_xopts x;
    eerl_ctl_status s;
    int e;

    if (!ctl)
        return EERL_EINVAL;
    eerl__rec_status(ctl->rec, &s);
    if (s.observed || s.rejected) {
        if (why && why_len)
            snprintf(why, why_len,
                     "%s: the controller has observed %llu updates already; set options before "
                     "the first",
                     name ? name : "(null)", (unsigned long long)(s.observed + s.rejected));
        return EERL_ESTATE;
    }
    x = ctl->x;
    e = eerl__options_xset(&x, name, value, why, why_len);
    if (e == 0)
        e = eerl__ctl_xopts_check(&x, why, why_len);
    if (e == 0)
        ctl->x = x;
    return e;
}

int eerl_ctl_get_option(const eerl_ctl *ctl, const char *name, double *ret_value)
{
    if (!ctl)
        return EERL_EINVAL;
    if (eerl__options_xget(&ctl->x, name, ret_value) == 0)
        return 0;
    return eerl_ctl_config_get(&ctl->cfg, name, ret_value);
}

/* ---- saved state (save.c owns the format) ---------------------------------------------------- */

#define WHY(...)                                                                                   \
    do {                                                                                           \
        if (why && why_len)                                                                        \
            snprintf(why, why_len, __VA_ARGS__);                                                   \
    } while (0)

int eerl_ctl_save(const eerl_ctl *ctl, const char *tag, void *buf, size_t cap, size_t *ret_len)
{
    if (!ctl || !ret_len || (tag && strlen(tag) >= EERL__SAVE_TAG))
        return EERL_EINVAL;
    return eerl__save(&ctl->cx, tag, buf, cap, ret_len);
}

int eerl_ctl_restore(eerl_ctl *ctl, const char *tag, const void *buf, size_t len, char *why,
                     size_t why_len)
{
    struct eerl__saved sv;
    eerl_ctl_status s;
    eerl_setting next;
    int e, refused;

    if (!ctl || !buf || (tag && strlen(tag) >= EERL__SAVE_TAG)) {
        WHY("bad arguments");
        return EERL_EINVAL;
    }
    if (ctl->prior) {
        WHY("a prior is set: a job starts from a prior or resumes, not both");
        return EERL_ESTATE;
    }
    eerl__rec_status(ctl->rec, &s);
    if (s.observed || s.rejected) {
        WHY("the controller has observed %llu updates already; restore before the first",
            (unsigned long long)(s.observed + s.rejected));
        return EERL_ESTATE;
    }
    e = eerl__restore(&ctl->cx, ctl->judge->restore != NULL, tag, buf, len, &ctl->next, &sv,
                      &refused, why, why_len);
    if (refused)
        eerl__rec_finish(ctl->rec, state_of(ctl), &ctl->next);
    if (e < 0)
        return e;
    next = ctl->next;
    e = ctl->judge->restore(&ctl->cx, ctl->st, sv.locked ? &sv.locked_setting : NULL, &next);
    if (e < 0) {
        WHY("the saved references do not fit a predictor");
        return e;
    }
    ctl->next = next;
    eerl__rec_finish(ctl->rec, state_of(ctl), &ctl->next);
    if (sv.unchecked)
        WHY("state format 2 has no checksum: damage to it cannot be seen; the next save writes "
            "format " EERL__SAVE_FORMAT ", which has one");
    return 0;
}

/* One clock of the entries' locks, the lower median (the governor, 0, counts as above every
 * clock). in[i].s's field at offset off. */
static unsigned prior_median(const struct eerl__prior_in *in, size_t n, size_t off)
{
    unsigned v[64], x, t;
    size_t i, j, m = n < 64 ? n : 64;

    for (i = 0; i < m; i++) {
        memcpy(&x, (const char *)&in[n - m + i].s + off, sizeof(x));
        v[i] = x ? x : UINT_MAX;
        for (j = i; j > 0 && v[j - 1] > v[j]; j--) {
            t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    }
    return v[(m - 1) / 2] == UINT_MAX ? 0 : v[(m - 1) / 2];
}

/* The entries' setting: each clock the median of their locks (the last 64 entries), snapped to
 * this job's clocks. A single search's lock errs with its noise; the median of several stands
 * nearer the setting they all sought. votes: the entries that locked exactly that. */
static void prior_vote(const eerl_ctl *ctl, const struct eerl__prior_in *in, size_t n,
                       struct eerl__prior_st *p)
{
    size_t i, g;

    memset(&p->s, 0, sizeof(p->s));
    for (g = 0; g < ctl->cfg.n_groups; g++)
        p->s.mhz[g] = eerl__grid_snap(
            &ctl->grid, prior_median(in, n, offsetof(eerl_setting, mhz) + g * sizeof(unsigned)));
    p->s.idle_mhz = prior_median(in, n, offsetof(eerl_setting, idle_mhz));
    if (p->s.idle_mhz)
        p->s.idle_mhz = eerl__grid_snap(&ctl->grid, p->s.idle_mhz);
    for (i = 0; i < n; i++)
        p->votes += eerl_setting_equal(&in[i].s, &p->s);
    p->jobs = (unsigned)n;
}

static void prior_tpt(const struct eerl__prior_in *in, size_t n, struct eerl__prior_st *p)
{
    double s = 0, s2 = 0, m;
    size_t i;

    for (i = 0; i < n; i++) {
        s += in[i].tpt_sum;
        s2 += in[i].tpt_sum2;
        p->tpt_n += in[i].n;
    }
    m = s / p->tpt_n;
    p->tpt_mean = m;
    p->tpt_var = p->tpt_n > 1 ? (s2 - p->tpt_n * m * m) / (p->tpt_n - 1) : 0;
    if (p->tpt_var < 0)
        p->tpt_var = 0;
}

/* Reads the entries; *ret_n of them match (into in), the first mismatch's reason into first. */
static int prior_read(eerl_ctl *ctl, const char *tag, const void *const *bufs, const size_t *lens,
                      size_t n, struct eerl__prior_in *in, size_t *ret_n, char *first,
                      size_t first_len, char *why, size_t why_len)
{
    char r[320];
    size_t i, k = 0;
    int e;

    for (i = 0; i < n; i++) {
        e = eerl__prior_entry(&ctl->cx, tag, bufs[i], lens[i], &in[k], r, sizeof(r));
        if (e < 0) {
            WHY("entry %zu: %s", i, r);
            return e;
        }
        if (e == 0)
            k++;
        else if (!first[0])
            snprintf(first, first_len, "%s", r);
    }
    *ret_n = k;
    return 0;
}

int eerl_ctl_set_prior(eerl_ctl *ctl, const char *tag, const void *const *bufs, const size_t *lens,
                       size_t n, char *why, size_t why_len)
{
    struct eerl__prior_in *in = NULL;
    struct eerl__prior_st *p = NULL;
    eerl_ctl_status s;
    char first[320] = "", b[48];
    size_t k = 0;
    int e;

    if (!ctl || (n && (!bufs || !lens)) || (tag && strlen(tag) >= EERL__SAVE_TAG)) {
        WHY("bad arguments");
        return EERL_EINVAL;
    }
    eerl__rec_status(ctl->rec, &s);
    if (s.observed || s.rejected || ctl->prior || ctl->cx.refs->n) {
        WHY("a prior is set once, before the first update, and not after a resume");
        return EERL_ESTATE;
    }
    if (!ctl->prop || !ctl->judge->restore) {
        WHY("strategy %s does not start from a prior", eerl_strategy_name(ctl->cfg.strategy));
        return EERL_ENOTSUP;
    }
    in = calloc(n ? n : 1, sizeof(*in));
    p = calloc(1, sizeof(*p));
    e = in && p ? prior_read(ctl, tag, bufs, lens, n, in, &k, first, sizeof(first), why, why_len)
                : EERL_ENOMEM;
    if (e == 0 && k == 0) {
        eerl__rec_emit(ctl->rec, EERL_EV_HOLD, &ctl->next,
                       "prior: none of %zu saved states matches this job%s%.100s", n,
                       first[0] ? ", the first: " : "", first);
        WHY("none of %zu saved states matches this job%s%s", n, first[0] ? "; the first: " : "",
            first);
        eerl__rec_finish(ctl->rec, state_of(ctl), &ctl->next);
        e = 1;
    }
    if (e != 0)
        goto out;
    prior_vote(ctl, in, k, p);
    prior_tpt(in, k, p);
    p->cx = &ctl->cx;
    eerl__rec_set_gate(ctl->rec, eerl__prior_cal_updates(&ctl->cx),
                       eerl__prior_cal_updates(&ctl->cx) ? eerl__prior_gate : NULL, p);
    p->inner = ctl->prop;
    p->inner_st = ctl->pst;
    ctl->prior = p;
    ctl->cx.prop = &eerl__propose_prior;
    ctl->cx.pst = p;
    p = NULL;
    eerl__rec_emit(
        ctl->rec, EERL_EV_HOLD, &ctl->next,
        "prior: %zu of %zu saved states match this job; the median of their locks %s%s%.80s", k, n,
        eerl_setting_str(&ctl->prior->s, b, sizeof(b)), first[0] ? "; the first other: " : "",
        first);
    eerl__rec_finish(ctl->rec, state_of(ctl), &ctl->next);
    WHY("%zu of %zu saved states match this job; the median of their locks %s%s%s", k, n, b,
        first[0] ? "; the first other: " : "", first);
out:
    free(in);
    free(p);
    return e;
}

const struct eerl__ctx *eerl__ctl_context(const eerl_ctl *ctl)
{
    return &ctl->cx;
}

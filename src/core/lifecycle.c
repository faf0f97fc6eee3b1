/* The search's life cycle after lock (lifecycle.h), for the paper's judges, which hand over at
 * their lock: the monitoring of section 5.2 (sync and drained: the window over the locked
 * setting, its verdicts and the adjustments they make, refreshes of the governor reference),
 * the check blocks of section 6.3 (in-flight: a governor block after every
 * cfg.inflight_lock_candidate_blocks locked blocks, judged as a candidate block is, and a failed
 * check raises the pool lowered last by its grid), and the governor kept when nothing
 * qualified. The judge supplies its ratios (judge.h) or, for the blocks, what it hands over;
 * from then on the life cycle runs the updates. Owns its state struct and the monitor; acts
 * through the record. */
#include <stdio.h>
#include <string.h>

#include "core/lifecycle.h"
#include "core/ratios.h"

enum {
    LIFE_NONE = 0, /* the judge runs the updates */
    LIFE_WATCH,    /* locked: the monitoring window */
    LIFE_REFRESH,  /* locked: governor updates refresh the reference */
    LIFE_DONE,     /* nothing qualified: the governor is kept */
    LIFE_BLOCK,    /* locked blocks (in-flight) */
    LIFE_CHECK,    /* a governor check block between them */
};

int eerl__life_init(struct eerl__life *l, unsigned window)
{
    l->phase = LIFE_NONE;
    return eerl__monitor_init(&l->mon, window);
}

void eerl__life_fini(struct eerl__life *l)
{
    eerl__monitor_fini(&l->mon);
}

void eerl__life_watch(struct eerl__life *l, int after, int governor_kept,
                      const struct eerl__handover *h)
{
    eerl__monitor_clear(&l->mon);
    l->own_groups = after == EERL__AFTER_MONITOR_OWN;
    l->count = 0;
    l->phase = after == EERL__AFTER_BLOCKS ? LIFE_BLOCK : LIFE_WATCH;
    if (after == EERL__AFTER_BLOCKS) {
        l->h = *h;
        l->lock_blocks = 0;
        eerl__acc_reset(&l->lock_acc);
        eerl__acc_reset(&l->gov_cur);
    }
    if (governor_kept)
        l->phase = LIFE_DONE;
}

int eerl__life_active(const struct eerl__life *l)
{
    return l->phase != LIFE_NONE;
}

eerl_ctl_state eerl__life_state(const struct eerl__life *l)
{
    return l->phase == LIFE_REFRESH || l->phase == LIFE_CHECK ? EERL_STATE_MONITORING
                                                              : EERL_STATE_LOCKED;
}

/* Refreshing the governor reference while locked: cfg.refresh_updates governor updates, then
 * back to the locked setting with a fresh monitor window. */
static void start_refresh(struct eerl__life *l, const struct eerl__ctx *cx,
                          const eerl_setting *locked, eerl_setting *next, const char *why)
{
    l->phase = LIFE_REFRESH;
    l->count = 0;
    eerl__rec_refresh(cx->rec, locked, next, "%s: %u governor updates", why,
                      cx->cfg->refresh_updates);
}

static void refresh_step(struct eerl__life *l, const struct eerl__ctx *cx, const eerl_obs *obs,
                         eerl_setting *next)
{
    eerl_setting locked;
    char b[64];

    if (!eerl__rec_ref_count(cx->rec, obs, &l->count, cx->cfg->refresh_updates,
                             "refreshing the governor reference", next))
        return;
    eerl__monitor_reset(&l->mon);
    (void)eerl__rec_locked(cx->rec, &locked);
    *next = locked;
    eerl__rec_emit(cx->rec, EERL_EV_HOLD, &locked, "reference refreshed; back to %s",
                   eerl_setting_str(&locked, b, sizeof(b)));
    l->phase = LIFE_WATCH;
}

/* One usable update under the lock: the window, and when one is due its verdict. */
static void watch(struct eerl__life *l, const struct eerl__ctx *cx,
                  const struct eerl__judge_ops *judge, const eerl_obs *obs, eerl_setting *next)
{
    struct eerl__acc sum;
    struct eerl__ratios r;
    eerl_setting locked, nv;
    eerl_event *ev;
    char why[EERL_REASON_MAX], b[48];
    unsigned adjustable = 3u;
    int act, g;

    (void)eerl__rec_locked(cx->rec, &locked);
    act = eerl__monitor_add(&l->mon, cx, obs, &sum);
    if (act == EERL__MON_REFRESH) {
        start_refresh(l, cx, &locked, next, "work outside the predictor's range repeatedly");
        return;
    }
    if (act == EERL__MON_NONE) {
        eerl__rec_emit(cx->rec, EERL_EV_HOLD, &locked, "locked at %s; window %u/%u",
                       eerl_setting_str(&locked, b, sizeof(b)), l->mon.n, cx->cfg->monitor_window);
        return;
    }
    judge->ratios(cx, &locked, &sum, &r);
    if (l->own_groups) {
        adjustable = 0;
        for (g = 0; g < 2; g++)
            if (locked.mhz[g] != EERL_CLOCK_GOVERNOR)
                adjustable |= 1u << g;
    }
    act = eerl__monitor_decide(&l->mon, cx, &locked, adjustable, &r, cx->cfg->feedback_step_mhz,
                               cx->cfg->feedback_big_step_mhz, &nv, why, sizeof(why));
    ev = eerl__rec_emit(cx->rec, EERL_EV_MONITOR, &locked, "%s", why);
    eerl__event_set(ev, &r, sum.n,
                    act == EERL__MON_RAISE || act == EERL__MON_REFRESH_ENERGY ? EERL_VERDICT_FAIL
                                                                              : EERL_VERDICT_PASS);
    if (act == EERL__MON_RAISE || act == EERL__MON_LOWER) {
        eerl__monitor_reset(&l->mon);
        eerl__rec_adjust(cx->rec, &nv, next, "%s", why);
        if (l->own_groups && eerl_setting_is_governor(&nv))
            l->phase = LIFE_DONE;
    } else if (act == EERL__MON_REFRESH_ENERGY) {
        start_refresh(l, cx, &locked, next, "no saving against the reference");
    }
}

/* In-flight, a locked block: after cfg.inflight_lock_candidate_blocks of them a governor check
 * block follows. */
static void locked_block(struct eerl__life *l, const struct eerl__ctx *cx, const eerl_obs *obs,
                         eerl_setting *next)
{
    unsigned want = cx->cfg->inflight_lock_candidate_blocks;
    eerl_setting locked;
    char b[48];

    (void)eerl__rec_locked(cx->rec, &locked);
    eerl__acc_add(&l->lock_acc, cx, obs);
    if (++l->count < l->h.block) {
        eerl__rec_emit(cx->rec, EERL_EV_HOLD, &locked, "locked at %s; block %u/%u",
                       eerl_setting_str(&locked, b, sizeof(b)), l->count, l->h.block);
        return;
    }
    l->count = 0;
    if (++l->lock_blocks < want) {
        eerl__rec_emit(cx->rec, EERL_EV_HOLD, &locked, "locked block %u/%u done", l->lock_blocks,
                       want);
        return;
    }
    l->phase = LIFE_CHECK;
    memset(next, 0, sizeof(*next));
    eerl__rec_emit(cx->rec, EERL_EV_HOLD, &locked,
                   "%u locked blocks done; governor check block follows", l->lock_blocks);
}

/* A failed check: the pool lowered last (round 2's if it was lowered) goes up by its grid. */
static void raise_last_lowered(struct eerl__life *l, const struct eerl__ctx *cx,
                               const eerl_setting *locked, eerl_setting *next)
{
    int g = locked->mhz[l->h.group[1]] != EERL_CLOCK_GOVERNOR ? l->h.group[1] : l->h.group[0];
    unsigned grid = g == l->h.group[1] ? l->h.grid[1] : l->h.grid[0], nv = 0;
    eerl_setting ns;

    if (eerl__grid_step(cx->grid, locked->mhz[g], (int)grid, &nv) < 0)
        nv = EERL_CLOCK_GOVERNOR;
    ns = eerl__grid_with_group(cx->grid, locked, g, nv);
    eerl__rec_adjust(cx->rec, &ns, next, "check failed: raise %s by %u MHz",
                     g == EERL_GROUP_GEN ? "generation" : "training", grid);
    if (eerl_setting_is_governor(&ns))
        l->phase = LIFE_DONE;
}

/* In-flight, the governor check block: the locked blocks against the bracketing governor blocks
 * (ratios.c's eerl__ratios_blocks), judged by the pass rule. */
static void check_block(struct eerl__life *l, const struct eerl__ctx *cx, const eerl_obs *obs,
                        eerl_setting *next)
{
    struct eerl__acc gov = l->h.gov_prev;
    struct eerl__ratios r;
    eerl_setting locked;
    char why[EERL_REASON_MAX];
    eerl_event *ev;
    eerl_verdict v;
    int tf;

    eerl__acc_add(&l->gov_cur, cx, obs);
    if (!eerl__rec_ref_count(cx->rec, obs, &l->count, l->h.block, "governor block", next))
        return;
    (void)eerl__rec_locked(cx->rec, &locked);
    eerl__acc_merge(&gov, &l->gov_cur);
    l->h.gov_prev = l->gov_cur;
    eerl__acc_reset(&l->gov_cur);
    eerl__ratios_blocks(&l->lock_acc, &gov, &r);
    v = eerl__verdict(cx->cfg, &r, 1.0, &tf, why, sizeof(why));
    ev = eerl__rec_emit(cx->rec, EERL_EV_MONITOR, &locked, "%s", why);
    eerl__event_set(ev, &r, l->lock_acc.n, v);
    l->phase = LIFE_BLOCK;
    l->count = 0;
    l->lock_blocks = 0;
    eerl__acc_reset(&l->lock_acc);
    if (v == EERL_VERDICT_FAIL)
        raise_last_lowered(l, cx, &locked, next);
    (void)eerl__rec_locked(cx->rec, next);
}

void eerl__life_observe(struct eerl__life *l, const struct eerl__ctx *cx,
                        const struct eerl__judge_ops *judge, const eerl_obs *obs,
                        eerl_setting *next)
{
    switch (l->phase) {
    case LIFE_WATCH:
        watch(l, cx, judge, obs, next);
        return;
    case LIFE_REFRESH:
        refresh_step(l, cx, obs, next);
        return;
    case LIFE_BLOCK:
        locked_block(l, cx, obs, next);
        return;
    case LIFE_CHECK:
        check_block(l, cx, obs, next);
        return;
    default:
        eerl__rec_emit(cx->rec, EERL_EV_HOLD, next, "governor kept: no setting qualified");
        return;
    }
}

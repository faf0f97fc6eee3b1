/* The search's life cycle after lock (lifecycle.h), for the judges that follow the paper's
 * monitoring (section 5.2; sync and drained): the monitoring window over the locked setting,
 * its verdicts and the adjustments they make, refreshes of the governor reference, and the
 * governor kept when nothing qualified. A judge hands over at its lock and supplies only its
 * ratios (judge.h); from then on the life cycle runs the updates. Owns its state struct and the
 * monitor; acts through the record. */
#include <stdio.h>

#include "core/lifecycle.h"
#include "core/ratios.h"

enum {
    LIFE_NONE = 0, /* the judge runs the updates */
    LIFE_WATCH,    /* locked: the monitoring window */
    LIFE_REFRESH,  /* locked: governor updates refresh the reference */
    LIFE_DONE,     /* nothing qualified: the governor is kept */
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

void eerl__life_watch(struct eerl__life *l, int after, int governor_kept)
{
    eerl__monitor_clear(&l->mon);
    l->own_groups = after == EERL__AFTER_MONITOR_OWN;
    l->phase = governor_kept ? LIFE_DONE : LIFE_WATCH;
}

int eerl__life_active(const struct eerl__life *l)
{
    return l->phase != LIFE_NONE;
}

eerl_ctl_state eerl__life_state(const struct eerl__life *l)
{
    return l->phase == LIFE_REFRESH ? EERL_STATE_MONITORING : EERL_STATE_LOCKED;
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
                   eerl__setting_str(&locked, b, sizeof(b)));
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
                       eerl__setting_str(&locked, b, sizeof(b)), l->mon.n, cx->cfg->monitor_window);
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
    default:
        eerl__rec_emit(cx->rec, EERL_EV_HOLD, next, "governor kept: no setting qualified");
        return;
    }
}

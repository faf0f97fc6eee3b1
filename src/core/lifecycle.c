/* The search's life cycle after lock, owned by the controller, for the strategies that follow
 * the paper's monitoring (section 5.2; sync and drained): the monitoring window over the locked
 * setting, its verdicts and the adjustments they make, refreshes of the governor reference, and
 * the governor kept when nothing qualified. A strategy hands over at its lock
 * (eerl__ctl_watch) and supplies only its judge (strategy.h); from then on the controller runs
 * the updates. Writes the controller's after-lock fields and the monitor; nothing else. */
#include <stdio.h>

#include "core/controller.h"
#include "core/monitor.h"
#include "core/ratios.h"

void eerl__ctl_watch(struct eerl_ctl *ctl, int governor_kept)
{
    eerl__monitor_clear(ctl->mon);
    ctl->after = governor_kept ? EERL__AFTER_DONE : EERL__AFTER_WATCH;
}

eerl_ctl_state eerl__ctl_after_state(const struct eerl_ctl *ctl)
{
    return ctl->after == EERL__AFTER_REFRESH ? EERL_STATE_MONITORING : EERL_STATE_LOCKED;
}

static void start_refresh(struct eerl_ctl *ctl, eerl_setting *next, const char *why)
{
    ctl->after = EERL__AFTER_REFRESH;
    eerl__refresh_begin(ctl, &ctl->locked_setting, &ctl->after_count, next, why);
}

/* One usable update under the lock: the window, and when one is due its verdict. */
static void watch(struct eerl_ctl *ctl, const eerl_obs *obs, eerl_setting *next)
{
    const eerl_setting *locked = &ctl->locked_setting;
    struct eerl__acc sum;
    struct eerl__ratios r;
    eerl_setting nv;
    eerl_event *ev;
    char why[EERL_REASON_MAX], b[48];
    unsigned adjustable = 3u;
    int act, g;

    act = eerl__monitor_add(ctl->mon, ctl, obs, &sum);
    if (act == EERL__MON_REFRESH) {
        start_refresh(ctl, next, "work outside the predictor's range repeatedly");
        return;
    }
    if (act == EERL__MON_NONE) {
        eerl__ctl_emit(ctl, EERL_EV_HOLD, locked, "locked at %s; window %u/%u",
                       eerl__setting_str(locked, b, sizeof(b)), ctl->mon->n,
                       ctl->cfg.monitor_window);
        return;
    }
    ctl->ops->judge(ctl, locked, &sum, &r);
    if (ctl->ops->monitor_own_groups) {
        adjustable = 0;
        for (g = 0; g < 2; g++)
            if (locked->mhz[g] != EERL_CLOCK_GOVERNOR)
                adjustable |= 1u << g;
    }
    act = eerl__monitor_decide(ctl->mon, ctl, locked, adjustable, &r, ctl->cfg.feedback_step_mhz,
                               ctl->cfg.feedback_big_step_mhz, &nv, why, sizeof(why));
    ev = eerl__ctl_emit(ctl, EERL_EV_MONITOR, locked, "%s", why);
    eerl__event_set(ev, &r, sum.n,
                    act == EERL__MON_RAISE || act == EERL__MON_REFRESH_ENERGY ? EERL_VERDICT_FAIL
                                                                              : EERL_VERDICT_PASS);
    if (act == EERL__MON_RAISE || act == EERL__MON_LOWER) {
        eerl__monitor_reset(ctl->mon);
        eerl__ctl_adjust(ctl, &nv, next, "%s", why);
        if (ctl->ops->monitor_own_groups && eerl_setting_is_governor(&nv))
            ctl->after = EERL__AFTER_DONE;
    } else if (act == EERL__MON_REFRESH_ENERGY) {
        start_refresh(ctl, next, "no saving against the reference");
    }
}

void eerl__ctl_after_observe(struct eerl_ctl *ctl, const eerl_obs *obs, eerl_setting *next)
{
    switch (ctl->after) {
    case EERL__AFTER_WATCH:
        watch(ctl, obs, next);
        return;
    case EERL__AFTER_REFRESH:
        if (eerl__refresh_step(ctl, obs, &ctl->after_count, ctl->mon, &ctl->locked_setting, next))
            ctl->after = EERL__AFTER_WATCH;
        return;
    default:
        eerl__ctl_emit(ctl, EERL_EV_HOLD, next, "governor kept: no setting qualified");
        return;
    }
}

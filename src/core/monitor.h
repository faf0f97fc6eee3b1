/* Monitoring after lock (section 5.2, Table 3): a trailing window of usable updates under the
 * locked setting, judged every cfg.monitor_every updates once the window holds
 * cfg.monitor_window of them; a throughput shortfall raises a clock (bigger step above
 * cfg.big_loss), enough margin lowers one, each change starts a fresh window; updates whose work
 * lies outside the predictor's range are left out, and repeated ones ask for new governor
 * measurements. Owns its window ring (allocated by init); reads the predictor and the grid
 * through the context, and acts on nothing: the life cycle (lifecycle.c) carries out what it
 * decides. */
#ifndef EERL_CORE_MONITOR_H
#define EERL_CORE_MONITOR_H

#include "core/context.h"
#include "core/ratios.h"

struct eerl__monitor {
    struct eerl__acc *ring; /* one entry per usable, covered update */
    unsigned cap, n, head;
    unsigned since_check;
    unsigned cov_bits, cov_n;        /* last 10 updates, bit set = out of coverage */
    unsigned floor[EERL_GROUPS_MAX]; /* a clock that fell short: never lowered to again */
    int last_lowered;                /* group lowered last (-1 none): ties take turns */
};

enum {
    EERL__MON_NONE = 0, /* nothing due */
    EERL__MON_CHECK,    /* a window is due: judge it */
    EERL__MON_REFRESH,  /* coverage failures: measure the governor again */
};

enum {
    EERL__MON_HOLD = 0,
    EERL__MON_RAISE,
    EERL__MON_LOWER,
    EERL__MON_REFRESH_ENERGY,
};

int eerl__monitor_init(struct eerl__monitor *m, unsigned window);
void eerl__monitor_fini(struct eerl__monitor *m);
/* A fresh window (after any clock change or refresh). Keeps the floors. */
void eerl__monitor_reset(struct eerl__monitor *m);
/* Forgets the floors too (a new lock). */
void eerl__monitor_clear(struct eerl__monitor *m);
/* One usable update under the locked setting; on EERL__MON_CHECK *ret_sum holds the window. */
int eerl__monitor_add(struct eerl__monitor *m, const struct eerl__ctx *cx, const eerl_obs *obs,
                      struct eerl__acc *ret_sum);
/* Decides on a judged window. adjustable: bit per group that the strategy may move. step and
 * big_step in MHz. Writes the new setting (for RAISE/LOWER) and a reason. */
int eerl__monitor_decide(struct eerl__monitor *m, const struct eerl__ctx *cx,
                         const eerl_setting *cur, unsigned adjustable, const struct eerl__ratios *r,
                         unsigned step, unsigned big_step, eerl_setting *ret_new, char *why,
                         size_t len);

#endif

/* The event ring: the decisions of the updates not yet taken by the caller (eerl_ctl_events),
 * oldest first, at most EERL__EVENTS_CAP (older ones are dropped and counted). Each event is
 * stamped with the controller's state and request once its observation's decision is complete.
 * Part of the controller's record: record.c writes it, controller.c hands it out. */
#ifndef EERL_CORE_EVENTS_H
#define EERL_CORE_EVENTS_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "eerl/core.h"

#define EERL__EVENTS_CAP 256

struct eerl__events {
    eerl_event ev[EERL__EVENTS_CAP];
    size_t head, n;
    size_t mark; /* events before it are stamped already */
    uint64_t dropped;
};

/* Appends an event of update `update`, reason printf-style; ratios start as NaN. Returns it. */
eerl_event *eerl__events_vemit(struct eerl__events *e, uint64_t update, eerl_event_kind kind,
                               const eerl_setting *cand, const char *fmt, va_list ap)
    __attribute__((format(printf, 5, 0)));
/* Stamps the events since the last call with the state and request that followed them. */
void eerl__events_finish(struct eerl__events *e, eerl_ctl_state state, const eerl_setting *next);
/* Moves up to cap events, oldest first, into buf; returns how many. */
size_t eerl__events_take(struct eerl__events *e, eerl_event *buf, size_t cap);

#endif

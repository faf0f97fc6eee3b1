/* Owns the event ring (events.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/events.h"

static eerl_event *at(struct eerl__events *e, size_t i)
{
    return &e->ev[(e->head + i) % EERL__EVENTS_CAP];
}

eerl_event *eerl__events_vemit(struct eerl__events *e, uint64_t update, eerl_event_kind kind,
                               const eerl_setting *cand, const char *fmt, va_list ap)
{
    eerl_event *ev;

    if (e->n == EERL__EVENTS_CAP) {
        e->head = (e->head + 1) % EERL__EVENTS_CAP;
        e->n--;
        e->dropped++;
        if (e->mark > 0)
            e->mark--;
    }
    ev = at(e, e->n++);
    memset(ev, 0, sizeof(*ev));
    ev->update = update;
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

void eerl__events_finish(struct eerl__events *e, eerl_ctl_state state, const eerl_setting *next)
{
    size_t i;

    for (i = e->mark; i < e->n; i++) {
        at(e, i)->state = state;
        at(e, i)->next = *next;
    }
    e->mark = e->n;
}

size_t eerl__events_take(struct eerl__events *e, eerl_event *buf, size_t cap)
{
    size_t n = 0;

    while (n < cap && e->n > 0) {
        buf[n++] = e->ev[e->head];
        e->head = (e->head + 1) % EERL__EVENTS_CAP;
        e->n--;
        if (e->mark > 0)
            e->mark--;
    }
    return n;
}

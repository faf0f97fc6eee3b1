/* Owns the controller's record (record.h): the lock, the counters, the references and the
 * events. The only file that writes them; it decides nothing (judges, proposers and the life
 * cycle do, and tell it what happened). */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "eerl/error.h"
#include "core/config.h"
#include "core/events.h"
#include "core/record.h"
#include "core/setting.h"

struct eerl__rec {
    const eerl_ctl_config *cfg;
    const struct eerl__ctl_xopts *x; /* the controller's experimental options */
    struct eerl__refs refs;
    struct eerl__events events;
    uint64_t update; /* the update the current observation is of */
    uint64_t observed, rejected, trials, refreshes;
    unsigned block_updates;
    int locked;
    eerl_setting locked_setting;
    int (*gate)(void *); /* a prior's gate on the calibration (eerl__rec_set_gate); NULL: none */
    void *gate_arg;
    unsigned gate_updates;
};

int eerl__rec_new(const eerl_ctl_config *cfg, const struct eerl__ctl_xopts *x, int layout,
                  struct eerl__rec **ret)
{
    struct eerl__rec *rec = calloc(1, sizeof(*rec));
    int err;

    if (!rec)
        return EERL_ENOMEM;
    rec->cfg = cfg;
    rec->x = x;
    err = eerl__refs_init(&rec->refs, cfg->ref_window, layout);
    if (err < 0) {
        eerl__rec_free(rec);
        return err;
    }
    *ret = rec;
    return 0;
}

void eerl__rec_free(struct eerl__rec *rec)
{
    if (!rec)
        return;
    eerl__refs_free(&rec->refs);
    free(rec);
}

const struct eerl__refs *eerl__rec_refs(const struct eerl__rec *rec)
{
    return &rec->refs;
}

void eerl__rec_intake(struct eerl__rec *rec, uint64_t update, int accepted)
{
    rec->update = update;
    if (accepted)
        rec->observed++;
    else
        rec->rejected++;
}

void eerl__rec_finish(struct eerl__rec *rec, eerl_ctl_state state, const eerl_setting *next)
{
    eerl__events_finish(&rec->events, state, next);
}

size_t eerl__rec_take(struct eerl__rec *rec, eerl_event *buf, size_t cap)
{
    return eerl__events_take(&rec->events, buf, cap);
}

void eerl__rec_status(const struct eerl__rec *rec, eerl_ctl_status *s)
{
    s->locked = rec->locked;
    s->locked_setting = rec->locked_setting;
    s->observed = rec->observed;
    s->rejected = rec->rejected;
    s->trials = rec->trials;
    s->refreshes = rec->refreshes;
    s->events_dropped = rec->events.dropped;
    s->block_updates = rec->block_updates;
    s->references = (unsigned)rec->refs.n;
}

int eerl__rec_locked(const struct eerl__rec *rec, eerl_setting *ret)
{
    if (ret && rec->locked)
        *ret = rec->locked_setting;
    return rec->locked;
}

eerl_event *eerl__rec_emit(struct eerl__rec *rec, eerl_event_kind kind, const eerl_setting *cand,
                           const char *fmt, ...)
{
    eerl_event *ev;
    va_list ap;

    va_start(ap, fmt);
    ev = eerl__events_vemit(&rec->events, rec->update, kind, cand, fmt, ap);
    va_end(ap);
    return ev;
}

void eerl__rec_lock(struct eerl__rec *rec, const eerl_setting *s, eerl_setting *next,
                    const char *why)
{
    char b[48];

    rec->locked = 1;
    rec->locked_setting = *s;
    if (next)
        *next = *s;
    eerl__rec_emit(rec, EERL_EV_LOCK, s, "lock %s: %s", eerl_setting_str(s, b, sizeof(b)), why);
}

void eerl__rec_start_locked(struct eerl__rec *rec, const eerl_setting *s)
{
    rec->locked = 1;
    rec->locked_setting = *s;
}

void eerl__rec_adjust(struct eerl__rec *rec, const eerl_setting *s, eerl_setting *next,
                      const char *fmt, ...)
{
    va_list ap;

    rec->locked_setting = *s;
    *next = *s;
    va_start(ap, fmt);
    (void)eerl__events_vemit(&rec->events, rec->update, EERL_EV_ADJUST, s, fmt, ap);
    va_end(ap);
}

void eerl__rec_refresh(struct eerl__rec *rec, const eerl_setting *locked, eerl_setting *next,
                       const char *fmt, ...)
{
    va_list ap;

    rec->refreshes++;
    memset(next, 0, sizeof(*next));
    va_start(ap, fmt);
    (void)eerl__events_vemit(&rec->events, rec->update, EERL_EV_REFRESH, locked, fmt, ap);
    va_end(ap);
}

void eerl__rec_trial_done(struct eerl__rec *rec)
{
    rec->trials++;
}

void eerl__rec_set_block(struct eerl__rec *rec, unsigned updates)
{
    rec->block_updates = updates;
}

void eerl__rec_set_fit(struct eerl__rec *rec, double min_t, unsigned opts)
{
    rec->refs.min_t = min_t;
    rec->refs.opts = opts;
}

void eerl__rec_ref_add(struct eerl__rec *rec, const eerl_obs *obs)
{
    eerl__refs_add(&rec->refs, obs);
}

int eerl__rec_ref_count(struct eerl__rec *rec, const eerl_obs *obs, unsigned *count, unsigned limit,
                        const char *what, const eerl_setting *next)
{
    eerl__rec_ref_add(rec, obs);
    if (++*count < limit) {
        eerl__rec_emit(rec, EERL_EV_HOLD, next, "%s %u/%u", what, *count, limit);
        return 0;
    }
    return 1;
}

int eerl__rec_calibrate(struct eerl__rec *rec, int kind, const eerl_obs *obs, unsigned *count,
                        const eerl_setting *next)
{
    unsigned limit = rec->cfg->fast_calibration_updates;

    if (kind == EERL__CAL_PAPER) {
        limit = rec->cfg->calibration_updates;
        if (rec->observed <= rec->x->warmup_updates) {
            eerl__rec_emit(rec, EERL_EV_HOLD, next,
                           "start-up update %u/%u left out of the governor references (the "
                           "paper fits from update 2)",
                           (unsigned)rec->observed, rec->x->warmup_updates);
            return 0;
        }
    }
    if (kind == EERL__CAL_FAST && rec->gate && *count + 1 >= rec->gate_updates) {
        int (*gate)(void *) = rec->gate;

        rec->gate = NULL; /* asked once */
        eerl__rec_ref_add(rec, obs);
        ++*count;
        if (gate(rec->gate_arg) || *count >= limit)
            return 1;
        eerl__rec_emit(rec, EERL_EV_HOLD, next, "calibrating %u/%u", *count, limit);
        return 0;
    }
    if (kind == EERL__CAL_FAST && rec->gate)
        limit = rec->gate_updates;
    return eerl__rec_ref_count(rec, obs, count, limit, "calibrating", next);
}

int eerl__rec_calibrate_fast(struct eerl__rec *rec, const eerl_obs *obs, unsigned *count,
                             const eerl_setting *next)
{
    if (*count < rec->cfg->fast_calibration_updates)
        return eerl__rec_calibrate(rec, EERL__CAL_FAST, obs, count, next);
    eerl__rec_ref_add(rec, obs);
    ++*count;
    return 1;
}

void eerl__rec_calibrate_on(struct eerl__rec *rec, unsigned *count, const eerl_setting *next)
{
    *count = (unsigned)rec->refs.n;
    eerl__rec_emit(rec, EERL_EV_HOLD, next,
                   "calibrating on from %u to %u governor updates before the search", *count,
                   rec->cfg->fast_calibration_updates);
}

void eerl__rec_set_gate(struct eerl__rec *rec, unsigned updates, int (*gate)(void *), void *arg)
{
    rec->gate = gate;
    rec->gate_arg = arg;
    rec->gate_updates = updates;
}

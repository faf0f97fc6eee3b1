/* Owns the one-trace estimate of `eerl analyze` (eerl/tools/analysis.h): reading the records,
 * recomputing the missing ones through core/estimate.c, summing them through its aggregator. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "eerl/error.h"
#include "eerl/tools/analysis.h"
#include "eerl/tools/trace.h"
#include "core/estimate.h"
#include "trace/estimate_line.h"
#include "trace/trace.h"

#define EV_CAP 256

struct est_reader {
    struct eerl_trace_header h;
    int have_header, any_events;
    unsigned gov_seen;                /* governor updates counted, for traces without events */
    struct eerl__trace_est_prev prev; /* the last update line (a late record's measurements) */
    struct eerl__est est;
    struct eerl__est_acc acc;      /* the totals */
    unsigned long long counted_to; /* the last update counted */
    eerl_event ev[EV_CAP];
};

/* Whether the update's observation was taken and whether it calibrated the controller: from its
 * events, or, in a trace without any, from the observation check and the configured
 * calibration length. */
static void decisions(struct est_reader *r, const struct eerl_trace_update *u, int *accepted,
                      int *calibrated)
{
    size_t k, n = u->n_events < EV_CAP ? u->n_events : EV_CAP;

    *accepted = 1;
    *calibrated = 0;
    if (u->has_events) {
        r->any_events = 1;
        for (k = 0; k < n; k++) {
            *accepted &= r->ev[k].kind != EERL_EV_REJECT;
            *calibrated |= r->ev[k].kind == EERL_EV_CALIBRATED;
        }
        return;
    }
    *accepted = eerl_obs_check(r->h.mode, &u->obs, r->h.cfg.time_tolerance, NULL, 0) == 0;
    if (r->any_events || !*accepted || u->obs.update < EERL__EST_FIRST ||
        !eerl_setting_is_governor(&u->obs.setting))
        return;
    *calibrated = ++r->gov_seen == r->h.cfg.calibration_updates;
}

static void count(struct est_reader *r, const struct eerl__est_upd *u)
{
    eerl__est_acc_add(&r->acc, u);
    if (u->update > r->counted_to)
        r->counted_to = u->update;
}

/* The record of line o, when it has one (1: none; EERL_EPARSE). */
static int recorded(struct est_reader *r, struct eerl_an_est *a, json_t *o, char *why, size_t len)
{
    struct eerl__est_upd rec;
    int e = o ? eerl__trace_est_parse(o, &r->prev, &rec, why, len) : EERL_EPARSE;

    if (e == 0) {
        a->recorded++;
        count(r, &rec);
    }
    return e;
}

static int on_update(struct est_reader *r, struct eerl_an_est *a, const char *line, char *why,
                     size_t len)
{
    struct eerl_trace_update u;
    struct eerl__est_upd own;
    json_t *o;
    int accepted, calibrated, e, made;

    e = eerl_trace_parse_update(line, &u, r->ev, EV_CAP, why, len);
    if (e < 0)
        return e;
    decisions(r, &u, &accepted, &calibrated);
    made = eerl__est_step(&r->est, &u.obs, accepted, calibrated, &own);
    o = json_loads(line, 0, NULL);
    e = recorded(r, a, o, why, len);
    json_decref(o);
    if (e < 0)
        return e;
    a->lines++;
    if (e == 1 && made) {
        a->recomputed++;
        count(r, &own);
    }
    r->prev.update = u.obs.update;
    r->prev.t = u.obs.time_s;
    r->prev.e = u.obs.energy_j;
    r->prev.have = 1;
    return 0;
}

/* A gap line (an update the controller never saw) carries the record of the update before it,
 * made final at its end (asynchronous modes). */
static int on_gap(struct est_reader *r, struct eerl_an_est *a, const char *line, char *why,
                  size_t len)
{
    json_t *o = json_loads(line, 0, NULL);
    int e = recorded(r, a, o, why, len);

    json_decref(o);
    return e < 0 ? e : 0;
}

/* The end of the trace: the provisional record of the last update of an asynchronous run, which
 * no line carries (the session's totals count it the same way). */
static void at_end(struct est_reader *r)
{
    struct eerl__est_upd u;

    if (eerl__est_pending(&r->est, &u) && u.update > r->counted_to)
        count(r, &u);
}

static int on_line(struct est_reader *r, struct eerl_an_est *a, const char *line, char *why,
                   size_t len)
{
    char type[32];
    int e = eerl_trace_line_type(line, type, sizeof(type));

    if (e < 0)
        return e;
    if (!strcmp(type, "header")) {
        e = eerl_trace_parse_header(line, &r->h, why, len);
        if (e == 0 && !r->have_header)
            e = eerl__est_init(&r->est, r->h.mode);
        r->have_header = e == 0;
        return e;
    }
    if (!r->have_header) {
        snprintf(why, len, "a %s line before the header", type);
        return EERL_EPARSE;
    }
    if (!strcmp(type, "update"))
        return on_update(r, a, line, why, len);
    if (!strcmp(type, "gap"))
        return on_gap(r, a, line, why, len);
    if (!strcmp(type, "unexplained") && !a->has_unexplained) {
        json_t *o = json_loads(line, 0, NULL), *m = json_object_get(o, "message");
        char w[200];

        snprintf(w, sizeof(w), "the work does not explain the update time: %s",
                 json_is_string(m) ? json_string_value(m) : "see the trace's unexplained line");
        eerl__est_acc_unexplained(&r->acc, w);
        a->has_unexplained = 1;
        json_decref(o);
    }
    a->has_summary |= !strcmp(type, "estimate");
    return 0;
}

/* A trace without the session's records or an unexplained line: its calibration replayed. */
static void check_explained(const char *path, struct est_reader *r, const struct eerl_an_est *a)
{
    struct eerl_trace_unexplained u;
    char why[512], w[200];

    if (a->recorded || a->has_unexplained)
        return;
    if (eerl_trace_measure_unexplained(path, &u, why, sizeof(why)) != 0 || !u.too_noisy)
        return;
    snprintf(w, sizeof(w),
             "the work does not explain the update time: the governor predictor leaves %.1f%% of "
             "it unexplained (a trial would need %u updates)",
             100.0 * u.share, u.need);
    eerl__est_acc_unexplained(&r->acc, w);
}

int eerl_an_estimate(const char *path, struct eerl_an_est *ret, char *why, size_t len)
{
    FILE *f = fopen(path, "r");
    struct est_reader *r = NULL;
    char *line = NULL, w[256];
    size_t cap = 0, lineno = 0;
    ssize_t n;
    int e = 0;

    if (!f) {
        snprintf(why, len, "cannot open trace '%s': %s", path, strerror(errno));
        return EERL_ESYS;
    }
    r = calloc(1, sizeof(*r));
    if (!r) {
        fclose(f);
        return EERL_ENOMEM;
    }
    memset(ret, 0, sizeof(*ret));
    ret->first_update = EERL__EST_FIRST;
    eerl__est_acc_init(&r->acc);
    while (e == 0 && (n = getline(&line, &cap, f)) > 0) {
        int nl = line[n - 1] == '\n';

        lineno++;
        if (nl)
            line[n - 1] = '\0';
        if (!line[0])
            continue;
        w[0] = '\0';
        e = on_line(r, ret, line, w, sizeof(w));
        if (e == EERL_EPARSE && !nl) { /* the last line, cut short: left out */
            e = 0;
            break;
        }
        if (e < 0)
            snprintf(why, len, "%s:%zu: %s", path, lineno, w[0] ? w : eerl_strerror(e));
    }
    if (e == 0 && !r->have_header) {
        snprintf(why, len, "%s: no trace header (is this an eerl trace?)", path);
        e = EERL_EPARSE;
    }
    if (e == 0) {
        at_end(r);
        check_explained(path, r, ret);
        eerl__est_acc_result(&r->acc, &ret->estimate);
    }
    free(line);
    eerl__est_free(&r->est);
    free(r);
    fclose(f);
    return e;
}

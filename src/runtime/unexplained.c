/* When the work does not explain the time (unexplained.h): the governor predictor's leave-one-out
 * error on the references it was calibrated on, what a trial would need against it, the message,
 * the trace line, and the same measure of a trace replayed. Reads the controller (its references,
 * fit options and configuration), never changes it: what it decides replays exactly. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "eerl/error.h"
#include "core/controller.h"
#include "runtime/unexplained.h"
#include "trace/trace.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* 1.4826 x the median of |v[i]| (v reordered). */
static double robust_sd(double *v, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++)
        v[i] = fabs(v[i]);
    qsort(v, n, sizeof(*v), cmp_double);
    return 1.4826 * (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

/* The most updates the strategy's trials take (0: it runs none). */
static unsigned trial_max(const eerl_ctl_config *c, eerl_mode mode)
{
    unsigned k, m = 0;

    switch (c->strategy) {
    case EERL_STRATEGY_GOVERNOR:
    case EERL_STRATEGY_STATIC:
        return 0;
    case EERL_STRATEGY_EERL:
        return EERL__UNEXPL_TRIAL_MAX;
    default:
        if (mode != EERL_MODE_INFLIGHT)
            return c->trial_updates;
        for (k = 0; k < EERL_BLOCK_CHOICES_MAX; k++)
            if (c->block_choices[k] > m)
                m = c->block_choices[k];
        return m;
    }
}

/* Leave-one-out over refs: the relative time errors of the predictor (fitted as the controller
 * fits it) and of the others' mean, into em and ec; returns the folds that fitted. */
static size_t leave_one_out(const struct eerl__ctx *cx, const eerl_obs *const *refs, size_t n,
                            const eerl_obs **sub, struct eerl__pred_work *w, double *em, double *ec)
{
    struct eerl__pred p;
    struct eerl__parts m, q;
    size_t i, j, k, folds = 0;
    double sum = 0;

    for (i = 0; i < n; i++) {
        eerl__obs_parts(cx->layout, refs[i], &m);
        sum += m.t;
    }
    for (i = 0; i < n; i++) {
        for (j = 0, k = 0; j < n; j++)
            if (j != i)
                sub[k++] = refs[j];
        memset(&p, 0, sizeof(p));
        if (eerl__pred_fit_opts(&p, cx->layout, sub, n - 1, w, cx->refs->min_t, cx->refs->opts) <
                0 ||
            !p.ready)
            continue;
        eerl__obs_parts(cx->layout, refs[i], &m);
        eerl__pred_predict(&p, refs[i], &q);
        if (!(q.t > 0) || !(m.t > 0))
            continue;
        em[folds] = m.t / q.t - 1;
        ec[folds] = m.t / ((sum - m.t) / (double)(n - 1)) - 1;
        folds++;
    }
    return folds;
}

int eerl__unexpl_measure(const eerl_ctl *ctl, struct eerl_trace_unexplained *ret)
{
    const struct eerl__ctx *cx;
    struct eerl_trace_unexplained u;
    struct eerl__pred_work w;
    const eerl_obs **refs = NULL, **sub = NULL;
    double *em = NULL, *ec = NULL, k;
    size_t n, i;
    int e;

    if (!ctl || !ret)
        return EERL_EINVAL;
    cx = eerl__ctl_context(ctl);
    n = cx->refs->n;
    if (n < EERL__UNEXPL_MIN_REFS)
        return EERL_ENODATA;
    memset(&w, 0, sizeof(w));
    e = EERL_ENOMEM;
    refs = calloc(n, sizeof(*refs));
    sub = calloc(n, sizeof(*sub));
    em = calloc(n, sizeof(*em));
    ec = calloc(n, sizeof(*ec));
    if (!refs || !sub || !em || !ec || eerl__pred_work_init(&w, n) < 0)
        goto out;
    for (i = 0; i < n; i++)
        refs[i] = eerl__refs_at(cx->refs, i);
    memset(&u, 0, sizeof(u));
    u.n = n;
    u.folds = leave_one_out(cx, refs, n, sub, &w, em, ec);
    e = EERL_ENODATA;
    if (u.folds < EERL__UNEXPL_MIN_REFS)
        goto out;
    u.share = robust_sd(em, u.folds);
    u.constant = robust_sd(ec, u.folds);
    u.allowed_loss = cx->cfg->allowed_loss;
    u.strategy = cx->cfg->strategy;
    u.trial_max = trial_max(cx->cfg, cx->mode);
    k = ceil(4 * u.share * u.share / (u.allowed_loss * u.allowed_loss));
    u.need = k > 1e9 ? 1000000000u : k < 1 ? 1u : (unsigned)k;
    u.too_noisy = u.need > EERL__UNEXPL_TRIAL_MAX;
    *ret = u;
    e = 0;
out:
    eerl__pred_work_free(&w);
    free(refs);
    free(sub);
    free(em);
    free(ec);
    return e;
}

void eerl_trace_unexplained_message(const struct eerl_trace_unexplained *u, char *buf, size_t len)
{
    char what[256];

    if (!buf || !len)
        return;
    buf[0] = '\0';
    if (!u || !u->too_noisy)
        return;
    if (u->strategy == EERL_STRATEGY_EERL)
        snprintf(what, sizeof(what),
                 "the eerl strategy judges a setting on at most %u, and its run budget narrows "
                 "as the scatter grows: expect it to keep the governor, or settings close to it",
                 u->trial_max);
    else if (u->trial_max == 0)
        snprintf(what, sizeof(what),
                 "eerl's strategy judges a setting on at most %u (this run's, %s, judges none)",
                 EERL__UNEXPL_TRIAL_MAX, eerl_strategy_name(u->strategy));
    else
        snprintf(what, sizeof(what),
                 "the %s strategy's trials take %u: their verdicts on clock changes would be "
                 "chance (eerl's own strategy judges a setting on at most %u)",
                 eerl_strategy_name(u->strategy), u->trial_max, EERL__UNEXPL_TRIAL_MAX);
    snprintf(buf, len,
             "the governor predictor leaves %.1f%% of the update time unexplained (the scatter "
             "of its leave-one-out errors over the %zu governor updates it was calibrated on; a "
             "constant time leaves %.1f%%), so the work (G, N, L) does not explain the time and "
             "clock changes cannot be judged on this run: to tell a loss of %.1f%% (the "
             "allowance) from that scatter a trial would need about %u updates; %s. The "
             "usual cause is generation bound by the host: decoding token by token in the "
             "framework (transformers' generate) instead of an inference engine (vLLM, "
             "SGLang); others are updates too short for their fixed costs to average out, and "
             "work the token counts do not measure",
             100 * u->share, u->n, 100 * u->constant, 100 * u->allowed_loss, u->need, what);
}

static int dump(json_t *o, char **ret_line)
{
    char *s;

    if (!o)
        return EERL_ENOMEM;
    s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(17));
    json_decref(o);
    if (!s)
        return EERL_ENOMEM;
    *ret_line = s;
    return 0;
}

int eerl__unexpl_line(const struct eerl_trace_unexplained *u, const char *message, char **ret_line)
{
    json_t *o;

    if (!u || !ret_line)
        return EERL_EINVAL;
    o = json_object();
    if (!o)
        return EERL_ENOMEM;
    json_object_set_new(o, "type", json_string("unexplained"));
    json_object_set_new(o, "update", json_integer((json_int_t)u->update));
    json_object_set_new(o, "governor_updates", json_integer((json_int_t)u->n));
    json_object_set_new(o, "share", json_real(u->share));
    json_object_set_new(o, "constant_share", json_real(u->constant));
    json_object_set_new(o, "allowed_loss", json_real(u->allowed_loss));
    json_object_set_new(o, "trial_updates_needed", json_integer((json_int_t)u->need));
    json_object_set_new(o, "trial_updates_max", json_integer((json_int_t)u->trial_max));
    json_object_set_new(o, "strategy", json_string(eerl_strategy_name(u->strategy)));
    json_object_set_new(o, "message", json_string(message ? message : ""));
    return dump(o, ret_line);
}

static int get_num(json_t *o, const char *key, double *v, char *why, size_t len)
{
    json_t *x = json_object_get(o, key);

    if (!json_is_number(x)) {
        snprintf(why, len, "unexplained line: '%s' is missing or not a number", key);
        return EERL_EPARSE;
    }
    *v = json_number_value(x);
    return 0;
}

int eerl__unexpl_parse(const char *line, struct eerl_trace_unexplained *ret, char *why, size_t len)
{
    static const char *const keys[] = {
        "update",           "governor_updates", "share",
        "constant_share",   "allowed_loss",     "trial_updates_needed",
        "trial_updates_max"};
    double v[7];
    struct eerl_trace_unexplained u;
    json_t *o = line ? json_loads(line, 0, NULL) : NULL;
    const char *s;
    size_t i;
    int e = 0;

    if (!json_is_object(o) || !json_is_string(json_object_get(o, "type")) ||
        strcmp(json_string_value(json_object_get(o, "type")), "unexplained")) {
        snprintf(why, len, "not an unexplained line");
        json_decref(o);
        return EERL_EPARSE;
    }
    for (i = 0; i < 7 && e == 0; i++)
        e = get_num(o, keys[i], &v[i], why, len);
    memset(&u, 0, sizeof(u));
    s = json_string_value(json_object_get(o, "strategy"));
    if (e == 0 && (!s || eerl_strategy_from_name(s, &u.strategy) < 0)) {
        snprintf(why, len, "unexplained line: strategy '%s' is not one", s ? s : "(missing)");
        e = EERL_EPARSE;
    }
    json_decref(o);
    if (e < 0)
        return e;
    u.update = (unsigned long long)v[0];
    u.n = u.folds = (size_t)v[1];
    u.share = v[2];
    u.constant = v[3];
    u.allowed_loss = v[4];
    u.need = (unsigned)v[5];
    u.trial_max = (unsigned)v[6];
    u.too_noisy = u.need > EERL__UNEXPL_TRIAL_MAX;
    *ret = u;
    return 0;
}

/* ---- a trace, replayed to its calibration ------------------------------------------------- */

struct replay {
    const char *path;
    struct eerl_trace_header h;
    eerl_ctl *ctl;
    eerl_event ev[256];
    size_t lineno;
    unsigned long long update; /* the last update observed */
};

/* One line of the trace: the header builds the controller, a resume record restores it, an
 * update is observed. 1 when the controller reported CALIBRATED at this line's update. */
static int replay_line(struct replay *r, const char *line, char *why, size_t len)
{
    struct eerl_trace_update u;
    eerl_setting next;
    char type[32], w[400];
    size_t n, k;
    int e;

    if (!r->ctl) {
        e = eerl_trace_parse_header(line, &r->h, w, sizeof(w));
        if (e == 0)
            e = eerl_trace_header_ctl_new(&r->h, &r->ctl);
        if (e < 0)
            snprintf(why, len, "%s:%zu: %s", r->path, r->lineno,
                     e == EERL_EPARSE ? w : eerl_strerror(e));
        return e;
    }
    if (eerl_trace_line_type(line, type, sizeof(type)) < 0) {
        snprintf(why, len, "%s:%zu: not a JSON object", r->path, r->lineno);
        return EERL_EPARSE;
    }
    if (!strcmp(type, "resume")) {
        char tag[64];
        unsigned char *st = NULL;
        size_t st_len = 0;

        e = eerl_trace_parse_resume(line, tag, sizeof(tag), &st, &st_len, w, sizeof(w));
        if (e == 0)
            (void)eerl_ctl_restore(r->ctl, tag, st, st_len, w, sizeof(w));
        free(st);
        return 0;
    }
    if (strcmp(type, "update"))
        return 0;
    e = eerl_trace_parse_update(line, &u, NULL, 0, w, sizeof(w));
    if (e < 0) {
        snprintf(why, len, "%s:%zu: %s", r->path, r->lineno, w);
        return e;
    }
    r->update = u.obs.update;
    (void)eerl_ctl_observe(r->ctl, &u.obs, &next);
    n = eerl_ctl_events(r->ctl, r->ev, sizeof(r->ev) / sizeof(r->ev[0]));
    for (k = 0; k < n; k++)
        if (r->ev[k].kind == EERL_EV_CALIBRATED)
            return 1;
    return 0;
}

int eerl_trace_measure_unexplained(const char *path, struct eerl_trace_unexplained *ret, char *why,
                                   size_t len)
{
    struct replay *r;
    FILE *f;
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    int e = 1, hit = 0;

    if (!path || !ret)
        return EERL_EINVAL;
    f = fopen(path, "r");
    if (!f) {
        snprintf(why, len, "cannot open '%s': %s", path, strerror(errno));
        return EERL_ESYS;
    }
    r = calloc(1, sizeof(*r));
    if (!r) {
        fclose(f);
        return EERL_ENOMEM;
    }
    r->path = path;
    while (!hit && (got = getline(&line, &cap, f)) >= 0) {
        int cut = got > 0 && line[got - 1] != '\n';

        r->lineno++;
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r'))
            line[--got] = 0;
        if (got == 0 || (cut && eerl_trace_line_type(line, (char[32]){0}, 32) < 0))
            continue; /* a last line cut short is a write that did not finish */
        hit = replay_line(r, line, why, len);
        if (hit < 0) {
            e = hit;
            goto out;
        }
    }
    if (hit && (e = eerl__unexpl_measure(r->ctl, ret)) == 0) {
        ret->update = r->update;
    } else if (hit) {
        e = e == EERL_ENODATA ? 1 : e;
        if (e < 0)
            snprintf(why, len, "%s: %s", path, eerl_strerror(e));
    } else if (!r->ctl) {
        snprintf(why, len, "%s: no trace header (is this an eerl trace?)", path);
        e = EERL_EPARSE;
    }
out:
    free(line);
    fclose(f);
    eerl_ctl_free(r->ctl);
    free(r);
    return e;
}

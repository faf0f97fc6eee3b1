/* Owns the JSON encoding of traces (see trace.h and docs/trace-format.md). Doubles are written
 * with 17 significant digits so every value reads back bit for bit, which is what lets
 * `eerl replay` demand identical decisions. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "common/safefile.h"
#include "eerl/error.h"
#include "eerl/options.h"
#include "eerl/version.h"
#include "core/config.h"
#include "trace/trace.h"

#define DUMP_FLAGS (JSON_COMPACT | JSON_REAL_PRECISION(17))

static const char *const phase_keys[EERL_PHASE_COUNT] = {"generation", "logprob", "training",
                                                         "refit", "other"};
static const char *const pool_keys[EERL_POOLS_MAX] = {"generation", "training"};

const char *eerl__trace_phase_key(unsigned phase)
{
    return phase < EERL_PHASE_COUNT ? phase_keys[phase] : "unknown";
}

/* ---- writing ------------------------------------------------------------------------------ */

static json_t *num(double v)
{
    if (isnan(v))
        return json_string("nan");
    if (isinf(v))
        return json_string(v > 0 ? "inf" : "-inf");
    return json_real(v);
}

/* Every number of the table of options the controller holds, its configuration's and its
 * experimental ones (the strategy is the header's own key), in the table's order. */
static void config_numbers(const eerl_ctl *ctl, json_t *cfg)
{
    eerl_option_info o;
    double v;
    size_t i;

    for (i = 0; eerl_option_info_get(i, &o) == 0; i++) {
        if (o.type == EERL_OPTION_ENUM || eerl_ctl_get_option(ctl, o.name, &v) < 0)
            continue;
        json_object_set_new(
            cfg, o.name, o.type == EERL_OPTION_DOUBLE ? json_real(v) : json_integer((json_int_t)v));
    }
}

static json_t *setting_json(const eerl_setting *s)
{
    json_t *o = json_object();
    int g;

    json_object_set_new(o, "gen_mhz",
                        s->mhz[0] ? json_integer(s->mhz[0]) : json_string("governor"));
    json_object_set_new(o, "train_mhz",
                        s->mhz[1] ? json_integer(s->mhz[1]) : json_string("governor"));
    json_object_set_new(o, "idle_mhz",
                        s->idle_mhz ? json_integer(s->idle_mhz) : json_string("governor"));
    for (g = 2; g < EERL_GROUPS_MAX; g++)
        if (s->mhz[g]) {
            json_t *a = json_array();
            int k;
            for (k = 2; k < EERL_GROUPS_MAX; k++)
                json_array_append_new(a, json_integer(s->mhz[k]));
            json_object_set_new(o, "extra_mhz", a);
            break;
        }
    return o;
}

static json_t *event_json(const eerl_event *ev)
{
    json_t *o = json_object();

    json_object_set_new(o, "kind", json_string(eerl_event_kind_name(ev->kind)));
    json_object_set_new(o, "state", json_string(eerl_state_name(ev->state)));
    json_object_set_new(o, "candidate", setting_json(&ev->candidate));
    json_object_set_new(o, "next", setting_json(&ev->next));
    json_object_set_new(o, "verdict", json_string(eerl_verdict_name(ev->verdict)));
    json_object_set_new(o, "n_updates", json_integer(ev->n_updates));
    json_object_set_new(o, "time_ratio", num(ev->time_ratio));
    json_object_set_new(o, "energy_ratio", num(ev->energy_ratio));
    json_object_set_new(o, "meas_time_ratio", num(ev->meas_time_ratio));
    json_object_set_new(o, "meas_energy_ratio", num(ev->meas_energy_ratio));
    json_object_set_new(o, "reason", json_string(ev->reason));
    return o;
}

static int dump(json_t *o, char **ret_line)
{
    char *s;

    if (!o)
        return EERL_ENOMEM;
    s = json_dumps(o, DUMP_FLAGS);
    json_decref(o);
    if (!s)
        return EERL_ENOMEM;
    *ret_line = s;
    return 0;
}

int eerl_trace_event_json(const eerl_event *ev, char **ret_text)
{
    json_t *o;

    if (!ev || !ret_text)
        return EERL_EINVAL;
    o = event_json(ev);
    json_object_set_new(o, "update", json_integer((json_int_t)ev->update));
    return dump(o, ret_text);
}

int eerl__trace_header_line(const eerl_ctl *ctl, const char *producer, int appended,
                            char **ret_line)
{
    eerl_ctl_config c;
    unsigned clocks[EERL_TRACE_CLOCKS_MAX], peak;
    size_t n, i;
    json_t *o, *cfg, *a;
    int err, k;

    if (!ctl || !ret_line)
        return EERL_EINVAL;
    err = eerl_ctl_describe(ctl, &c, clocks, EERL_TRACE_CLOCKS_MAX, &n, &peak);
    if (err < 0)
        return err;
    {
        eerl_ctl_status st;
        eerl_ctl_get_status(ctl, &st);
        o = json_object();
        json_object_set_new(o, "type", json_string("header"));
        json_object_set_new(o, "format", json_string(EERL__TRACE_FORMAT));
        json_object_set_new(o, "version", json_integer(EERL__TRACE_VERSION));
        if (appended)
            json_object_set_new(o, "appended", json_true());
        json_object_set_new(o, "producer",
                            json_string(producer ? producer : "eerl " EERL_VERSION_STRING));
        json_object_set_new(o, "mode", json_string(eerl_mode_name(st.mode)));
        json_object_set_new(o, "strategy", json_string(eerl_strategy_name(c.strategy)));
    }
    json_object_set_new(o, "governor_peak_mhz", json_integer(peak));
    a = json_array();
    for (i = 0; i < n; i++)
        json_array_append_new(a, json_integer(clocks[i]));
    json_object_set_new(o, "clocks_mhz", a);
    cfg = json_object();
    config_numbers(ctl, cfg);
    a = json_array();
    for (k = 0; k < EERL_BLOCK_CHOICES_MAX && c.block_choices[k]; k++)
        json_array_append_new(a, json_integer(c.block_choices[k]));
    json_object_set_new(cfg, "block_choices", a);
    /* What the strategies beyond the paper read: replay needs them as much as the numbers. */
    json_object_set_new(cfg, "static_setting", setting_json(&c.static_setting));
    a = json_array();
    for (k = 0; k < (int)c.n_groups && k < EERL_GROUPS_MAX; k++)
        json_array_append_new(a, json_string(c.group_names[k]));
    json_object_set_new(cfg, "group_names", a);
    json_object_set_new(o, "config", cfg);
    return dump(o, ret_line);
}

int eerl__trace_update_line(const eerl_obs *ob, const eerl_setting *requested, const eerl_event *ev,
                            size_t n_ev, char **ret_line)
{
    json_t *o, *w, *ph, *set, *a;
    size_t i;

    if (!ob || !ret_line || (n_ev && !ev))
        return EERL_EINVAL;
    o = json_object();
    json_object_set_new(o, "type", json_string("update"));
    json_object_set_new(o, "update", json_integer((json_int_t)ob->update));
    w = json_object();
    json_object_set_new(w, "G", num(ob->gen_tokens));
    json_object_set_new(w, "N", num(ob->valid_tokens));
    json_object_set_new(w, "L", num(ob->longest_tokens));
    if (ob->policy_age >= 0)
        json_object_set_new(w, "policy_age", json_integer(ob->policy_age));
    json_object_set_new(o, "work", w);
    json_object_set_new(o, "time_s", num(ob->time_s));
    json_object_set_new(o, "energy_j", num(ob->energy_j));
    ph = json_object();
    for (i = 0; i < EERL_PHASE_COUNT; i++) {
        json_t *p;
        if (ob->phase_time_s[i] == 0 && ob->phase_energy_j[i] == 0)
            continue;
        p = json_object();
        json_object_set_new(p, "time_s", num(ob->phase_time_s[i]));
        json_object_set_new(p, "energy_j", num(ob->phase_energy_j[i]));
        json_object_set_new(ph, phase_keys[i], p);
    }
    json_object_set_new(o, "phases", ph);
    if (ob->flags & (EERL_OBS_ARRIVALS | EERL_OBS_POOL_ENERGY)) {
        json_t *pools = json_object();
        for (i = 0; i < EERL_POOLS_MAX; i++) {
            json_t *p = json_object();
            if (ob->flags & EERL_OBS_ARRIVALS)
                json_object_set_new(p, "arrival_s", num(ob->arrival_s[i]));
            if (ob->flags & EERL_OBS_POOL_ENERGY)
                json_object_set_new(p, "energy_j", num(ob->pool_energy_j[i]));
            json_object_set_new(pools, pool_keys[i], p);
        }
        json_object_set_new(o, "pools", pools);
    }
    if (ob->flags & EERL_OBS_CARRYOVER)
        json_object_set_new(o, "carryover", json_true());
    if (ob->flags & ~(unsigned)(EERL_OBS_ARRIVALS | EERL_OBS_POOL_ENERGY | EERL_OBS_CARRYOVER))
        json_object_set_new(o, "flags", json_integer(ob->flags));
    set = json_object();
    if (requested)
        json_object_set_new(set, "requested", setting_json(requested));
    json_object_set_new(set, "observed", setting_json(&ob->setting));
    json_object_set_new(o, "setting", set);
    a = json_array();
    for (i = 0; i < n_ev; i++)
        json_array_append_new(a, event_json(&ev[i]));
    json_object_set_new(o, "events", a);
    return dump(o, ret_line);
}

static int write_line(FILE *f, char *line)
{
    int bad = fputs(line, f) < 0 || fputc('\n', f) == EOF;
    free(line);
    return bad ? EERL_EIO : 0;
}

/* Where the whole lines of an existing trace end: size when its last byte is a newline, else
 * just after the last newline (a line a crash cut short is dropped before appending). */
static long long whole_end(int fd, long long size)
{
    char buf[4096];
    long long at = size;

    while (at > 0) {
        size_t n = at > (long long)sizeof(buf) ? sizeof(buf) : (size_t)at;
        long long from = at - (long long)n;

        if (pread(fd, buf, n, (off_t)from) != (ssize_t)n)
            return -1;
        while (n > 0 && buf[n - 1] != '\n')
            n--;
        if (n > 0)
            return from + (long long)n;
        at = from;
    }
    return 0;
}

/* The lock that keeps a second live session off the trace. */
static int lock_trace(int fd, const char *path, char *why, size_t len)
{
    if (flock(fd, LOCK_EX | LOCK_NB) == 0)
        return 0;
    if (errno == EWOULDBLOCK) {
        snprintf(why, len,
                 "trace '%s' is being written by another live session: two sessions must not "
                 "share a trace (their lines would interleave); give each session its own trace "
                 "path",
                 path);
        return EERL_EBUSY;
    }
    snprintf(why, len, "cannot lock trace '%s': %s", path, strerror(errno));
    return EERL_ESYS;
}

/* The trace already at d's name: locked, then appended to (append) or, when empty, written on. */
static int open_existing(const struct eerl__wdir *d, const char *path, int append, int *ret_fd,
                         long long *ret_end, char *why, size_t len)
{
    struct stat st;
    long long end;
    int e, fd;

    e = eerl__wdir_check_entry(d, "trace", path, why, len);
    if (e < 0)
        return e;
    fd = openat(d->fd, d->name, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0 || fstat(fd, &st) < 0) {
        snprintf(why, len, "cannot open trace '%s': %s", path, strerror(errno));
        e = EERL_ESYS;
    } else if (!S_ISREG(st.st_mode) || (d->shared && st.st_uid != geteuid())) {
        snprintf(why, len,
                 "trace '%s' was replaced while it was opened (by another user?): refusing to "
                 "write it; give a trace path in a directory of your own",
                 path);
        e = EERL_EUNSAFE;
    } else if ((e = lock_trace(fd, path, why, len)) == 0 && st.st_size > 0 && !append) {
        snprintf(why, len,
                 "trace '%s' exists already (%lld bytes, from an earlier session): eerl never "
                 "overwrites a trace; give another trace path, move the old trace away, or pass "
                 "resume_from to continue that job (its trace is then appended to)",
                 path, (long long)st.st_size);
        e = EERL_EEXIST;
    }
    if (e == 0) {
        end = whole_end(fd, (long long)st.st_size);
        if (end < 0 || ftruncate(fd, (off_t)end) < 0 || lseek(fd, (off_t)end, SEEK_SET) < 0) {
            snprintf(why, len, "cannot append to trace '%s': %s", path, strerror(errno));
            e = EERL_ESYS;
        }
    }
    if (e < 0) {
        if (fd >= 0)
            close(fd);
        return e;
    }
    *ret_fd = fd;
    *ret_end = end;
    return 0;
}

/* A new trace at d's name, locked: 0; 1 when something is there already; EERL_E* with why. */
static int create_trace(const struct eerl__wdir *d, const char *path, int *ret_fd, char *why,
                        size_t len)
{
    int e, fd = openat(d->fd, d->name,
                       O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0666);

    if (fd < 0 && errno == EEXIST)
        return 1;
    if (fd < 0) {
        snprintf(why, len, "cannot create trace '%s': %s", path, strerror(errno));
        return EERL_ESYS;
    }
    e = lock_trace(fd, path, why, len);
    if (e < 0) { /* another session opened it first: it is theirs, left alone */
        close(fd);
        return e;
    }
    *ret_fd = fd;
    return 0;
}

int eerl__trace_open(const char *path, int append, FILE **ret_f, int *ret_created,
                     long long *ret_end, char *why, size_t len)
{
    struct eerl__wdir d = {.fd = -1};
    long long end = 0;
    int e, fd = -1, created = 0;
    FILE *f;

    e = eerl__wdir_open("trace", path, &d, why, len);
    if (e == 0) {
        e = create_trace(&d, path, &fd, why, len);
        created = e == 0;
        if (e == 1)
            e = open_existing(&d, path, append, &fd, &end, why, len);
    }
    if (e < 0)
        goto out;
    f = fdopen(fd, "w");
    if (!f) {
        snprintf(why, len, "cannot open trace '%s': %s", path, strerror(errno));
        close(fd);
        if (created)
            unlinkat(d.fd, d.name, 0);
        e = EERL_ESYS;
        goto out;
    }
    *ret_f = f;
    *ret_created = created;
    *ret_end = end;
out:
    eerl__wdir_close(&d);
    return e;
}

int eerl__trace_append(FILE *f, const char *line, long long *end)
{
    size_t n = strlen(line), done = 0;
    int fd = fileno(f), err;
    char *buf = malloc(n + 1);

    if (!buf)
        return EERL_ENOMEM;
    memcpy(buf, line, n);
    buf[n++] = '\n';
    while (done < n) {
        ssize_t w = write(fd, buf + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            err = w < 0 ? errno : EIO;
            /* Back to the last whole line where the file can be cut (not a device). */
            if (done > 0 && ftruncate(fd, (off_t)*end) == 0)
                (void)lseek(fd, (off_t)*end, SEEK_SET);
            free(buf);
            errno = err;
            return EERL_EIO;
        }
        done += (size_t)w;
    }
    free(buf);
    *end += (long long)n;
    return 0;
}

int eerl__trace_write_header(FILE *f, const eerl_ctl *ctl, const char *producer)
{
    char *line;
    int err = eerl__trace_header_line(ctl, producer, 0, &line);
    return err < 0 ? err : write_line(f, line);
}

int eerl__trace_write_update(FILE *f, const eerl_obs *obs, const eerl_setting *requested,
                             const eerl_event *ev, size_t n_ev)
{
    char *line;
    int err = eerl__trace_update_line(obs, requested, ev, n_ev, &line);
    return err < 0 ? err : write_line(f, line);
}

/* ---- reading ------------------------------------------------------------------------------ */

static json_t *load(const char *line, char *why, size_t len)
{
    json_error_t e;
    json_t *o = json_loads(line, JSON_REJECT_DUPLICATES, &e);

    if (!o) {
        if (why && len)
            snprintf(why, len, "not JSON: %s (column %d)", e.text, e.column);
        return NULL;
    }
    if (!json_is_object(o)) {
        if (why && len)
            snprintf(why, len, "not a JSON object");
        json_decref(o);
        return NULL;
    }
    return o;
}

int eerl_trace_line_type(const char *line, char *type, size_t len)
{
    json_t *o = load(line, NULL, 0), *t;

    if (!o)
        return EERL_EPARSE;
    t = json_object_get(o, "type");
    snprintf(type, len, "%s", json_is_string(t) ? json_string_value(t) : "");
    json_decref(o);
    return 0;
}

/* A number, or "nan"/"inf"/"-inf". 0 on success. */
static int get_num(json_t *v, double *ret)
{
    const char *s;

    if (json_is_number(v)) {
        *ret = json_number_value(v);
        return 0;
    }
    if (!json_is_string(v))
        return -1;
    s = json_string_value(v);
    if (!strcmp(s, "nan"))
        *ret = NAN;
    else if (!strcmp(s, "inf"))
        *ret = INFINITY;
    else if (!strcmp(s, "-inf"))
        *ret = -INFINITY;
    else
        return -1;
    return 0;
}

/* Optional number member: absent leaves *ret; present must be a number. */
static int opt_num(json_t *o, const char *key, double *ret)
{
    json_t *v = json_object_get(o, key);
    return v ? get_num(v, ret) : 0;
}

static int get_clock(json_t *v, unsigned *ret)
{
    if (json_is_string(v) && !strcmp(json_string_value(v), "governor")) {
        *ret = EERL_CLOCK_GOVERNOR;
        return 0;
    }
    if (json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) <= 1000000) {
        *ret = (unsigned)json_integer_value(v);
        return 0;
    }
    return -1;
}

static int get_setting(json_t *o, eerl_setting *s)
{
    json_t *x;
    size_t i;

    memset(s, 0, sizeof(*s));
    if (!json_is_object(o))
        return -1;
    if (get_clock(json_object_get(o, "gen_mhz"), &s->mhz[0]) < 0 ||
        get_clock(json_object_get(o, "train_mhz"), &s->mhz[1]) < 0)
        return -1;
    x = json_object_get(o, "idle_mhz");
    if (x && get_clock(x, &s->idle_mhz) < 0)
        return -1;
    x = json_object_get(o, "extra_mhz");
    if (x) {
        if (!json_is_array(x) || json_array_size(x) > EERL_GROUPS_MAX - 2)
            return -1;
        for (i = 0; i < json_array_size(x); i++)
            if (get_clock(json_array_get(x, i), &s->mhz[2 + i]) < 0)
                return -1;
    }
    return 0;
}

/* In the helpers of a parser: says why and returns EERL_EPARSE. */
#define BAD(...)                                                                                   \
    do {                                                                                           \
        if (why && len)                                                                            \
            snprintf(why, len, __VA_ARGS__);                                                       \
        return EERL_EPARSE;                                                                        \
    } while (0)

/* The header's own keys (config aside) into h. 0, or EERL_EPARSE / EERL_EVERSION with why. */
static int header_keys(json_t *o, struct eerl_trace_header *h, char *why, size_t len)
{
    json_t *v = json_object_get(o, "type");
    size_t i;

    if (!json_is_string(v) || strcmp(json_string_value(v), "header"))
        BAD("the first line must be the header (\"type\": \"header\")");
    v = json_object_get(o, "format");
    if (!json_is_string(v) || strcmp(json_string_value(v), EERL__TRACE_FORMAT))
        BAD("\"format\" must be \"%s\"", EERL__TRACE_FORMAT);
    v = json_object_get(o, "version");
    if (!json_is_integer(v) || json_integer_value(v) < 1)
        BAD("\"version\" must be a positive integer");
    h->version = (unsigned)json_integer_value(v);
    if (h->version > EERL__TRACE_VERSION) {
        if (why && len)
            snprintf(why, len, "trace format version %u is newer than this eerl reads (%d)",
                     h->version, EERL__TRACE_VERSION);
        return EERL_EVERSION;
    }
    v = json_object_get(o, "mode");
    if (!json_is_string(v) || eerl_mode_from_name(json_string_value(v), &h->mode) < 0)
        BAD("\"mode\" %s%s%s is not one of colocated, disaggregated, drained, inflight",
            json_is_string(v) ? "'" : "", json_is_string(v) ? json_string_value(v) : "(missing)",
            json_is_string(v) ? "'" : "");
    eerl_ctl_config_default(h->mode, &h->cfg);
    v = json_object_get(o, "strategy");
    if (v &&
        (!json_is_string(v) || eerl_strategy_from_name(json_string_value(v), &h->cfg.strategy) < 0))
        BAD("\"strategy\" '%s' is unknown (valid: %s)",
            json_is_string(v) ? json_string_value(v) : "?", eerl_strategy_names());
    v = json_object_get(o, "governor_peak_mhz");
    if (!json_is_integer(v) || json_integer_value(v) <= 0 || json_integer_value(v) > 100000)
        BAD("\"governor_peak_mhz\" must be a positive integer");
    h->peak = (unsigned)json_integer_value(v);
    v = json_object_get(o, "clocks_mhz");
    if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > EERL_TRACE_CLOCKS_MAX)
        BAD("\"clocks_mhz\" must be a non-empty array of at most %d clocks", EERL_TRACE_CLOCKS_MAX);
    for (i = 0; i < json_array_size(v); i++) {
        json_t *c = json_array_get(v, i);
        if (!json_is_integer(c) || json_integer_value(c) <= 0 || json_integer_value(c) > 100000)
            BAD("\"clocks_mhz\"[%zu] is not a clock in MHz", i);
        h->clocks[i] = (unsigned)json_integer_value(c);
    }
    h->n_clocks = json_array_size(v);
    v = json_object_get(o, "producer");
    if (json_is_string(v))
        snprintf(h->producer, sizeof(h->producer), "%s", json_string_value(v));
    return 0;
}

/* The config keys that are not plain numbers: block_choices, static_setting, group_names. 1 if
 * key is one of them (read into cfg), 0 if not, EERL_EPARSE with why. */
static int config_list(const char *key, json_t *v, eerl_ctl_config *cfg, char *why, size_t len)
{
    size_t i;

    if (!strcmp(key, "block_choices")) {
        if (!json_is_array(v) || json_array_size(v) == 0 ||
            json_array_size(v) > EERL_BLOCK_CHOICES_MAX)
            BAD("config \"block_choices\" must be an array of 1-%d lengths",
                EERL_BLOCK_CHOICES_MAX);
        memset(cfg->block_choices, 0, sizeof(cfg->block_choices));
        for (i = 0; i < json_array_size(v); i++) {
            json_t *c = json_array_get(v, i);
            if (!json_is_integer(c) || json_integer_value(c) <= 0 || json_integer_value(c) > 1000)
                BAD("config \"block_choices\"[%zu] must be a length in updates", i);
            cfg->block_choices[i] = (unsigned)json_integer_value(c);
        }
        return 1;
    }
    if (!strcmp(key, "static_setting")) {
        if (get_setting(v, &cfg->static_setting) < 0)
            BAD("config \"static_setting\" is not a setting");
        return 1;
    }
    if (!strcmp(key, "group_names")) {
        if (!json_is_array(v) || json_array_size(v) > EERL_GROUPS_MAX)
            BAD("config \"group_names\" must be an array of at most %d names", EERL_GROUPS_MAX);
        for (i = 0; i < json_array_size(v); i++) {
            json_t *c = json_array_get(v, i);
            if (!json_is_string(c) || strlen(json_string_value(c)) >= sizeof(cfg->group_names[0]))
                BAD("config \"group_names\"[%zu] must be a name of at most %zu characters", i,
                    sizeof(cfg->group_names[0]) - 1);
            snprintf(cfg->group_names[i], sizeof(cfg->group_names[i]), "%s", json_string_value(c));
        }
        return 1;
    }
    return 0;
}

/* One number of the table of options, into cfg or (an experimental one) x: 1 taken, 0 not one
 * of them, or EERL_EINVAL (why). */
static int config_number(const char *key, json_t *v, eerl_ctl_config *cfg,
                         struct eerl__ctl_xopts *x, char *why, size_t len)
{
    eerl_option_info o;
    char owhy[160];
    double d;
    int i = eerl_option_find(key), xp;

    if (i < 0 || eerl_option_info_get((size_t)i, &o) < 0 || o.type == EERL_OPTION_ENUM)
        return 0;
    xp = eerl__options_xget(x, key, &d) == 0;
    if (!xp && eerl_ctl_config_get(cfg, key, &d) < 0)
        return 0;
    if (o.type == EERL_OPTION_DOUBLE && get_num(v, &d) < 0)
        BAD("config \"%s\" must be a number", key);
    if (o.type != EERL_OPTION_DOUBLE) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) > 4294967295LL)
            BAD("config \"%s\" must be a non-negative integer", key);
        d = (double)json_integer_value(v);
    }
    if ((xp ? eerl__options_xset(x, key, d, owhy, sizeof(owhy))
            : eerl_ctl_config_set(cfg, key, d, owhy, sizeof(owhy))) < 0)
        BAD("config: %s", owhy);
    return 1;
}

/* The header's "config" object into cfg and x: every key known, every value valid. */
static int header_config(json_t *obj, eerl_ctl_config *cfg, struct eerl__ctl_xopts *x, char *why,
                         size_t len)
{
    const char *key;
    json_t *v;

    if (obj && !json_is_object(obj))
        BAD("\"config\" must be an object");
    json_object_foreach(obj, key, v)
    {
        int known = config_number(key, v, cfg, x, why, len);

        if (known < 0)
            return known;
        if (!known) {
            int r = config_list(key, v, cfg, why, len);

            if (r < 0)
                return r;
            known = r;
        }
        if (!known)
            BAD("config \"%s\" is unknown to this eerl (written by a newer version?)", key);
    }
    return 0;
}

int eerl_trace_header_replayable(const struct eerl_trace_header *h, char *why, size_t len)
{
    if (!h->revision_key || h->revision == h->revision_now)
        return 0;
    if (why && len)
        snprintf(why, len,
                 "this trace was decided by %s %u; this eerl (%s) decides as revision %u only: "
                 "replay it with the eerl version that wrote it (its header's producer: %s; "
                 "docs/trace-format.md)",
                 h->revision_key, h->revision, EERL_VERSION_STRING, h->revision_now,
                 h->producer[0] ? h->producer : "not named");
    return EERL_EVERSION;
}

int eerl_trace_header_ctl_new(const struct eerl_trace_header *h, eerl_ctl **ret_ctl)
{
    eerl_ctl *ctl;
    int e;

    if (!h || !ret_ctl)
        return EERL_EINVAL;
    e = eerl_ctl_new(h->mode, &h->cfg, h->clocks, h->n_clocks, h->peak, &ctl);
    if (e == 0)
        e = eerl_ctl_set_option(ctl, "warmup_updates", h->warmup_updates, NULL, 0);
    if (e < 0) {
        eerl_ctl_free(ctl);
        return e;
    }
    *ret_ctl = ctl;
    return 0;
}

int eerl_trace_parse_header(const char *line, struct eerl_trace_header *ret, char *why, size_t len)
{
    struct eerl_trace_header h;
    /* A trace without an experimental key was written before it existed: warmup_updates 0
     * (update 1 was a reference then), revision 0 of each rule. */
    struct eerl__ctl_xopts x = {0, 0, 0, 0};
    json_t *o = load(line, why, len);
    char cwhy[160];
    int err;

    if (!o)
        return EERL_EPARSE;
    memset(&h, 0, sizeof(h));
    err = header_keys(o, &h, why, len);
    if (err == 0)
        err = header_config(json_object_get(o, "config"), &h.cfg, &x, why, len);
    if (err == 0) {
        h.revision_key =
            eerl__ctl_revision(h.mode, h.cfg.strategy, &x, &h.revision, &h.revision_now);
        h.warmup_updates = x.warmup_updates;
    }
    if (err == 0 && eerl_ctl_config_check(&h.cfg, cwhy, sizeof(cwhy)) < 0) {
        if (why && len)
            snprintf(why, len, "config: %s", cwhy);
        err = EERL_EPARSE;
    }
    if (err == 0)
        *ret = h;
    json_decref(o);
    return err;
}

static int parse_event(json_t *o, eerl_event *ev)
{
    json_t *v;
    double d;

    memset(ev, 0, sizeof(*ev));
    if (!json_is_object(o))
        return -1;
    v = json_object_get(o, "kind");
    if (!json_is_string(v) || eerl_event_kind_from_name(json_string_value(v), &ev->kind) < 0)
        return -1;
    v = json_object_get(o, "state");
    if (!json_is_string(v) || eerl_state_from_name(json_string_value(v), &ev->state) < 0)
        return -1;
    if (get_setting(json_object_get(o, "candidate"), &ev->candidate) < 0 ||
        get_setting(json_object_get(o, "next"), &ev->next) < 0)
        return -1;
    v = json_object_get(o, "verdict");
    if (!json_is_string(v) || eerl_verdict_from_name(json_string_value(v), &ev->verdict) < 0)
        return -1;
    v = json_object_get(o, "n_updates");
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return -1;
    ev->n_updates = (unsigned)json_integer_value(v);
    ev->time_ratio = ev->energy_ratio = ev->meas_time_ratio = ev->meas_energy_ratio = NAN;
    if (get_num(json_object_get(o, "time_ratio"), &d) < 0)
        return -1;
    ev->time_ratio = d;
    if (get_num(json_object_get(o, "energy_ratio"), &d) < 0)
        return -1;
    ev->energy_ratio = d;
    if (get_num(json_object_get(o, "meas_time_ratio"), &d) < 0)
        return -1;
    ev->meas_time_ratio = d;
    if (get_num(json_object_get(o, "meas_energy_ratio"), &d) < 0)
        return -1;
    ev->meas_energy_ratio = d;
    v = json_object_get(o, "reason");
    if (!json_is_string(v))
        return -1;
    snprintf(ev->reason, sizeof(ev->reason), "%s", json_string_value(v));
    return 0;
}

/* 1 if a measure of o is negative or infinite (NaN is a measurement that was missing, which
 * the controller refuses and the analysis leaves out): the first such, its key in the trace
 * line in key and its value in *ret_v. 0 when none is. */
static int measure_bad(const eerl_obs *o, double *ret_v, char *key, size_t key_len)
{
    size_t i;

#define CHECK(v, name)                                                                             \
    do {                                                                                           \
        if (!isnan(v) && !(isfinite(v) && (v) >= 0)) {                                             \
            *ret_v = (v);                                                                          \
            snprintf(key, key_len, "%s", name);                                                    \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)
    CHECK(o->gen_tokens, "work.G");
    CHECK(o->valid_tokens, "work.N");
    CHECK(o->longest_tokens, "work.L");
    CHECK(o->time_s, "time_s");
    CHECK(o->energy_j, "energy_j");
    for (i = 0; i < EERL_PHASE_COUNT; i++) {
        char n[48];

        snprintf(n, sizeof(n), "phases.%s.time_s", phase_keys[i]);
        CHECK(o->phase_time_s[i], n);
        snprintf(n, sizeof(n), "phases.%s.energy_j", phase_keys[i]);
        CHECK(o->phase_energy_j[i], n);
    }
    for (i = 0; i < EERL_POOLS_MAX; i++) {
        char n[48];

        snprintf(n, sizeof(n), "pools.%s.arrival_s", pool_keys[i]);
        if (o->flags & EERL_OBS_ARRIVALS)
            CHECK(o->arrival_s[i], n);
        snprintf(n, sizeof(n), "pools.%s.energy_j", pool_keys[i]);
        if (o->flags & EERL_OBS_POOL_ENERGY)
            CHECK(o->pool_energy_j[i], n);
    }
#undef CHECK
    return 0;
}

/* An update line's number, work, time and energy into u. */
static int update_work(json_t *o, struct eerl_trace_update *u, char *why, size_t len)
{
    json_t *v = json_object_get(o, "type"), *w;

    if (!json_is_string(v) || strcmp(json_string_value(v), "update"))
        BAD("not an update line");
    v = json_object_get(o, "update");
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        BAD("\"update\" must be a non-negative integer");
    u->obs.update = (uint64_t)json_integer_value(v);
    w = json_object_get(o, "work");
    if (!json_is_object(w) || get_num(json_object_get(w, "G"), &u->obs.gen_tokens) < 0 ||
        get_num(json_object_get(w, "N"), &u->obs.valid_tokens) < 0 ||
        get_num(json_object_get(w, "L"), &u->obs.longest_tokens) < 0)
        BAD("\"work\" needs numbers G, N and L");
    v = json_object_get(w, "policy_age");
    if (v) {
        if (!json_is_integer(v))
            BAD("\"work.policy_age\" must be an integer");
        u->obs.policy_age = (int)json_integer_value(v);
    }
    if (get_num(json_object_get(o, "time_s"), &u->obs.time_s) < 0 ||
        get_num(json_object_get(o, "energy_j"), &u->obs.energy_j) < 0)
        BAD("\"time_s\" and \"energy_j\" must be numbers");
    return 0;
}

/* An update line's phases and pools into obs. */
static int update_parts(json_t *o, eerl_obs *obs, char *why, size_t len)
{
    json_t *ph = json_object_get(o, "phases"), *v;
    size_t i;

    if (ph && !json_is_object(ph))
        BAD("\"phases\" must be an object");
    for (i = 0; ph && i < EERL_PHASE_COUNT; i++) {
        json_t *p = json_object_get(ph, phase_keys[i]);
        if (!p)
            continue;
        if (!json_is_object(p) || opt_num(p, "time_s", &obs->phase_time_s[i]) < 0 ||
            opt_num(p, "energy_j", &obs->phase_energy_j[i]) < 0)
            BAD("\"phases.%s\" needs numbers time_s and energy_j", phase_keys[i]);
    }
    v = json_object_get(o, "pools");
    if (!v)
        return 0;
    if (!json_is_object(v))
        BAD("\"pools\" must be an object");
    for (i = 0; i < EERL_POOLS_MAX; i++) {
        json_t *p = json_object_get(v, pool_keys[i]);
        if (!p)
            continue;
        if (!json_is_object(p))
            BAD("\"pools.%s\" must be an object", pool_keys[i]);
        if (json_object_get(p, "arrival_s")) {
            if (get_num(json_object_get(p, "arrival_s"), &obs->arrival_s[i]) < 0)
                BAD("\"pools.%s.arrival_s\" must be a number", pool_keys[i]);
            obs->flags |= EERL_OBS_ARRIVALS;
        }
        if (json_object_get(p, "energy_j")) {
            if (get_num(json_object_get(p, "energy_j"), &obs->pool_energy_j[i]) < 0)
                BAD("\"pools.%s.energy_j\" must be a number", pool_keys[i]);
            obs->flags |= EERL_OBS_POOL_ENERGY;
        }
    }
    return 0;
}

/* An update line's flags, settings and events (at most cap into ev) into u. */
static int update_decisions(json_t *o, struct eerl_trace_update *u, eerl_event *ev, size_t cap,
                            char *why, size_t len)
{
    json_t *v = json_object_get(o, "carryover"), *set;
    size_t i;

    if (v && !json_is_boolean(v))
        BAD("\"carryover\" must be true or false");
    if (json_is_true(v))
        u->obs.flags |= EERL_OBS_CARRYOVER;
    v = json_object_get(o, "flags");
    if (v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            BAD("\"flags\" must be a non-negative integer");
        u->obs.flags |= (unsigned)json_integer_value(v);
    }
    set = json_object_get(o, "setting");
    if (!json_is_object(set) || get_setting(json_object_get(set, "observed"), &u->obs.setting) < 0)
        BAD("\"setting.observed\" must be a setting (gen_mhz, train_mhz, idle_mhz)");
    v = json_object_get(set, "requested");
    if (v) {
        if (get_setting(v, &u->requested) < 0)
            BAD("\"setting.requested\" must be a setting");
        u->has_requested = 1;
    }
    v = json_object_get(o, "events");
    if (!v)
        return 0;
    if (!json_is_array(v))
        BAD("\"events\" must be an array");
    u->has_events = 1;
    u->n_events = json_array_size(v);
    for (i = 0; i < u->n_events && i < cap; i++) {
        if (parse_event(json_array_get(v, i), &ev[i]) < 0)
            BAD("\"events\"[%zu] is malformed", i);
        ev[i].update = u->obs.update;
    }
    return 0;
}

/* A measurement is never negative or infinite: a line that says so was not written by eerl (or
 * was edited), unless its events say the observation was refused, which keeps what was observed
 * (replay needs it as it was). */
static int update_measures(const struct eerl_trace_update *u, const eerl_event *ev, size_t cap,
                           char *why, size_t len)
{
    char bad[48];
    double d;
    size_t i;

    for (i = 0; u->has_events && i < u->n_events && i < cap; i++)
        if (ev[i].kind == EERL_EV_REJECT)
            return 0;
    if (measure_bad(&u->obs, &d, bad, sizeof(bad)))
        BAD("\"%s\" is %g: a measurement is a finite number >= 0 (or \"nan\" when it is "
            "missing); no event says this update was refused",
            bad, d);
    return 0;
}

int eerl_trace_parse_update(const char *line, struct eerl_trace_update *ret, eerl_event *ev,
                            size_t cap, char *why, size_t len)
{
    struct eerl_trace_update u;
    json_t *o = load(line, why, len);
    int err;

    if (!o)
        return EERL_EPARSE;
    memset(&u, 0, sizeof(u));
    u.obs.policy_age = -1;
    err = update_work(o, &u, why, len);
    if (err == 0)
        err = update_parts(o, &u.obs, why, len);
    if (err == 0)
        err = update_decisions(o, &u, ev, cap, why, len);
    if (err == 0)
        err = update_measures(&u, ev, cap, why, len);
    if (err == 0)
        *ret = u;
    json_decref(o);
    return err;
}

/* ---- resume record -------------------------------------------------------------------------- */

int eerl__trace_resume_line(const char *from, const char *tag, int resumed, const char *detail,
                            const void *state, size_t state_len, char **ret_line)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = state;
    json_t *o = json_object();
    char *h = NULL;
    size_t i;

    if (!ret_line) {
        json_decref(o);
        return EERL_EINVAL;
    }
    if (!o)
        return EERL_ENOMEM;
    json_object_set_new(o, "type", json_string("resume"));
    json_object_set_new(o, "from", json_string(from ? from : ""));
    json_object_set_new(o, "tag", json_string(tag ? tag : ""));
    json_object_set_new(o, "resumed", json_boolean(resumed));
    json_object_set_new(o, "detail", json_string(detail ? detail : ""));
    if (state && state_len) {
        h = malloc(2 * state_len + 1);
        if (!h) {
            json_decref(o);
            return EERL_ENOMEM;
        }
        for (i = 0; i < state_len; i++) {
            h[2 * i] = hex[p[i] >> 4];
            h[2 * i + 1] = hex[p[i] & 15];
        }
        h[2 * state_len] = '\0';
        json_object_set_new(o, "state", json_string(h));
        free(h);
    }
    return dump(o, ret_line);
}

static int stop_type_ok(const char *type)
{
    static const char *const taken[] = {"header", "update", "run", "resume"};
    size_t i, n = type ? strlen(type) : 0;

    if (n == 0 || n > 31)
        return 0;
    for (i = 0; i < n; i++)
        if (!((type[i] >= 'a' && type[i] <= 'z') || type[i] == '_'))
            return 0;
    for (i = 0; i < sizeof(taken) / sizeof(taken[0]); i++)
        if (!strcmp(type, taken[i]))
            return 0;
    return 1;
}

int eerl__trace_stop_line(const char *type, unsigned long long update,
                          const char *const *open_phases, size_t n_open, const char *detail_json,
                          char **ret_line, char *why, size_t len)
{
    json_t *o, *detail = NULL, *a;
    json_error_t je;
    size_t i;

    if (!ret_line || (n_open && !open_phases))
        return EERL_EINVAL;
    if (!stop_type_ok(type)) {
        snprintf(why, len,
                 "stop line type '%s' must be 1 to 31 of a-z and '_', not header, update, run or "
                 "resume",
                 type ? type : "(null)");
        return EERL_EINVAL;
    }
    if (detail_json) {
        detail = json_loads(detail_json, 0, &je);
        if (!json_is_object(detail)) {
            snprintf(why, len, "stop line detail is not a JSON object: %s",
                     detail ? "another JSON value" : je.text);
            json_decref(detail);
            return EERL_EINVAL;
        }
    }
    o = json_object();
    a = json_array();
    if (!o || !a) {
        json_decref(o);
        json_decref(a);
        json_decref(detail);
        return EERL_ENOMEM;
    }
    json_object_set_new(o, "type", json_string(type));
    json_object_set_new(o, "update", json_integer((json_int_t)update));
    for (i = 0; i < n_open; i++)
        json_array_append_new(a, json_string(open_phases[i]));
    json_object_set_new(o, "open_phases", a);
    if (detail && json_object_get(detail, "open_phases") &&
        !json_is_array(json_object_get(detail, "open_phases"))) {
        snprintf(why, len, "stop line detail's open_phases is not an array");
        json_decref(detail);
        json_decref(o);
        return EERL_EINVAL;
    }
    if (detail) { /* the caller's keys after ours; only its open_phases replaces ours */
        if (json_object_get(detail, "open_phases"))
            json_object_set(o, "open_phases", json_object_get(detail, "open_phases"));
        const char *k;
        json_t *v;

        json_object_foreach(detail, k, v)
        {
            if (!json_object_get(o, k))
                json_object_set(o, k, v);
        }
        json_decref(detail);
    }
    return dump(o, ret_line);
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

int eerl_trace_parse_resume(const char *line, char *tag, size_t tag_len, unsigned char **ret_state,
                            size_t *ret_len, char *why, size_t len)
{
    json_t *o = load(line, why, len), *t, *s;
    unsigned char *buf = NULL;
    const char *h;
    size_t n, i;
    int err = EERL_EPARSE;

    if (!o)
        return EERL_EPARSE;
    t = json_object_get(o, "tag");
    s = json_object_get(o, "state");
    if (!json_is_string(t)) {
        snprintf(why, len, "resume record has no \"tag\" string");
        goto fail;
    }
    if (!s) {
        err = 1;
        goto fail;
    }
    h = json_is_string(s) ? json_string_value(s) : NULL;
    n = h ? strlen(h) : 1;
    if (!h || n % 2 || n == 0) {
        snprintf(why, len, "resume record's \"state\" is not a hex string");
        goto fail;
    }
    buf = malloc(n / 2);
    if (!buf) {
        err = EERL_ENOMEM;
        goto fail;
    }
    for (i = 0; i < n / 2; i++) {
        int a = hexval(h[2 * i]), b = hexval(h[2 * i + 1]);
        if (a < 0 || b < 0) {
            snprintf(why, len, "resume record's \"state\" has a non-hex character at %zu", 2 * i);
            goto fail;
        }
        buf[i] = (unsigned char)(a << 4 | b);
    }
    snprintf(tag, tag_len, "%s", json_string_value(t));
    *ret_state = buf;
    *ret_len = n / 2;
    buf = NULL;
    err = 0;
fail:
    free(buf);
    json_decref(o);
    return err;
}

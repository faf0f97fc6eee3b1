/* The stand-in NVML: a shared library named libnvidia-ml.so.1 that exports the NVML functions
 * eerl uses (and their older non-_v2 names) and implements them over a JSON state file named by
 * $EERL_FAKE_NVML_STATE. docs/device.md describes the format; in short: GPUs with supported
 * clocks, a clock, a power draw, a locked range, and flags for faults (lost GPU, energy not
 * supported, stuck or reset counter, injected error codes).
 *
 * It owns: the process-global "driver" state (like the real NVML, whose state is per process),
 * behind one mutex because eerl's meter samples from its own thread. It must not know about eerl:
 * it speaks only NVML's C ABI, so the backend that talks to it is the one that talks to a real
 * driver.
 *
 * Time: the state's "virtual_time_ms" is "now" when it is a number (tests move time by rewriting
 * the file), else CLOCK_MONOTONIC. The file is re-read whenever its (inode, size, mtime, ctime)
 * changes; before new values are adopted, energy is integrated up to the new "now" at the OLD
 * power, so a test can lay down an exact piecewise-constant power profile. The energy counter is
 * kept in millijoules as a double and reported floored, as of the last multiple of
 * energy_update_ms (NVML updates its counter about every 100 ms).
 *
 * Write-back: locking or resetting clocks writes the locked range into the file (temp + rename),
 * so a test or a person can see what was done to the "GPU". The fake does not re-read its own
 * write-back. Like a driver, the library prints nothing, except one line on stderr when the state
 * file cannot be used, naming the file and what is wrong with it.
 *
 * Built twice: libnvidia-ml.so.1 exports the current names and the older ones; with
 * FAKE_NVML_LEGACY (fake_nvml/legacy/libnvidia-ml.so.1) only the pre-_v2 names, like an old
 * driver, so eerl's fallbacks are exercised too. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

/* NVML's ABI, as much of it as the stand-in implements. */
typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef int nvmlClockType_t;

#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NO_PERMISSION 4
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_DRIVER_NOT_LOADED 9
#define NVML_ERROR_GPU_IS_LOST 15
#define NVML_ERROR_MEMORY 20
#define NVML_ERROR_UNKNOWN 999

#define NVML_CLOCK_GRAPHICS 0
#define NVML_CLOCK_SM 1
#define NVML_CLOCK_MEM 2
#define NVML_CLOCK_VIDEO 3

/* Any number of GPUs; more than this in a state file is refused as a mistake. */
#define FAKE_GPUS_LIMIT (1u << 20)
/* Handles live in blocks that never move, so one handed out stays valid as more GPUs appear. */
#define FAKE_HANDLE_BLOCK 64
#define FAKE_MAX_CLOCKS 1024
#define FAKE_MAX_MEM_CLOCKS 32
#define FAKE_STR_MAX 96

#define FAKE_EXPORT __attribute__((visibility("default")))

/* nvmlDeviceGetFieldValues (nvml.h's nvmlFieldValue_t) and the two fields the stand-in knows. */
#define NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION 83
#define NVML_FI_DEV_POWER_INSTANT 186
#define NVML_VALUE_TYPE_UNSIGNED_INT 1
#define NVML_VALUE_TYPE_UNSIGNED_LONG_LONG 3
typedef struct {
    unsigned int fieldId;
    unsigned int scopeId;
    long long timestamp;
    long long latencyUsec;
    int valueType;
    nvmlReturn_t nvmlReturn;
    union {
        double dVal;
        unsigned int uiVal;
        unsigned long ulVal;
        unsigned long long ullVal;
        signed long long sllVal;
    } value;
} nvmlFieldValue_t;

struct nvmlDevice_st {
    unsigned index;
};

struct gpu {
    char name[FAKE_STR_MAX];
    char uuid[FAKE_STR_MAX];
    unsigned mem[FAKE_MAX_MEM_CLOCKS]; /* highest first */
    size_t n_mem;
    unsigned sm[FAKE_MAX_CLOCKS]; /* highest first */
    size_t n_sm;
    unsigned sm_clock;
    unsigned power_mw;
    bool locked;
    unsigned lock_min, lock_max;
    unsigned long long throttle;
    unsigned power_limit_mw; /* 0: the driver does not say (NOT_SUPPORTED) */
    bool energy_supported, counter_stuck, reset_counter, lost;
    double energy_mj;   /* at state.t_ms */
    double boundary_mj; /* at the last multiple of update_ms not after state.t_ms */
};

struct fault {
    char function[64];
    int gpu; /* -1: any */
    int error;
    long count;
};

struct state {
    bool virtual_time;
    double t_ms; /* the time energy is integrated up to */
    double update_ms;
    bool lock_permitted;
    double energy_read_cpu_us;
    char energy_read_hold[4096]; /* while this file exists, energy reads wait ("": never) */
    char driver_version[FAKE_STR_MAX];
    char nvml_version[FAKE_STR_MAX];
    struct gpu *gpus;
    unsigned n;
    struct fault *faults;
    size_t n_faults;
    json_t *faults_json; /* as read, to tell a new fault list from the same one re-read */
    json_t *doc;         /* the whole file as last read, for write-back */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int init_count;
static char state_path[4096];
static struct stat seen; /* of the file as last read or written */
static char *seen_text;  /* its content then */
static size_t seen_len;
static struct state S;
static struct nvmlDevice_st **handle_blocks; /* [i / FAKE_HANDLE_BLOCK][i % FAKE_HANDLE_BLOCK] */
static size_t n_handle_blocks;

/* The handle of GPU index (under mu); NULL when out of memory. */
static struct nvmlDevice_st *handle_at(unsigned index)
{
    size_t b = index / FAKE_HANDLE_BLOCK, k;

    if (b >= n_handle_blocks) {
        struct nvmlDevice_st **t = realloc(handle_blocks, (b + 1) * sizeof(*t));

        if (!t)
            return NULL;
        handle_blocks = t;
        for (k = n_handle_blocks; k <= b; k++) {
            t[k] = calloc(FAKE_HANDLE_BLOCK, sizeof(**t));
            if (!t[k])
                return NULL;
            n_handle_blocks = k + 1;
        }
    }
    handle_blocks[b][index % FAKE_HANDLE_BLOCK].index = index;
    return &handle_blocks[b][index % FAKE_HANDLE_BLOCK];
}

/* dev is a handle this library handed out (checked before it is read). */
static bool handle_ok(const struct nvmlDevice_st *dev)
{
    size_t b;

    for (b = 0; dev && b < n_handle_blocks; b++)
        if (dev >= handle_blocks[b] && dev < handle_blocks[b] + FAKE_HANDLE_BLOCK)
            return true;
    return false;
}
/* Text for NVML_ERROR_UNKNOWN after nvmlInit failed on the state file ("" otherwise). */
static char init_error[1024];
/* Calls per device function since the first nvmlInit (tests read them with
 * fake_nvml_call_count, to check how often eerl reads what). */
#define FAKE_MAX_COUNTED 32
static struct {
    char fn[64];
    unsigned long n;
} calls[FAKE_MAX_COUNTED];

static void state_free(struct state *s)
{
    free(s->gpus);
    free(s->faults);
    json_decref(s->faults_json);
    json_decref(s->doc);
    memset(s, 0, sizeof(*s));
}

static double monotonic_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ---- parsing ---------------------------------------------------------------------------------
 * Every problem becomes one message naming the field, kept in err (the caller adds the path). */

static int perr(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int perr(char *err, size_t len, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
    return -1;
}

/* Keys beginning with '_' are comments; any other unknown key is a mistake worth reporting. */
static int check_keys(json_t *obj, const char *const *known, const char *where, char *err,
                      size_t len)
{
    const char *key;
    json_t *v;

    json_object_foreach(obj, key, v)
    {
        size_t i;
        bool ok = key[0] == '_';

        (void)v;
        for (i = 0; !ok && known[i]; i++)
            ok = !strcmp(key, known[i]);
        if (!ok)
            return perr(err, len, "%s: unknown key \"%s\"", where, key);
    }
    return 0;
}

static int get_uint(json_t *obj, const char *key, bool required, double def, double max,
                    const char *where, double *out, char *err, size_t len)
{
    json_t *v = json_object_get(obj, key);
    double d;

    if (!v || json_is_null(v)) {
        if (required)
            return perr(err, len, "%s: \"%s\" is missing", where, key);
        *out = def;
        return 0;
    }
    if (!json_is_number(v))
        return perr(err, len, "%s: \"%s\" must be a number", where, key);
    d = json_number_value(v);
    if (!isfinite(d) || d < 0 || d > max || floor(d) != d)
        return perr(err, len, "%s: \"%s\" is %g, not an integer in 0..%.0f", where, key, d, max);
    *out = d;
    return 0;
}

static int get_bool(json_t *obj, const char *key, bool def, const char *where, bool *out, char *err,
                    size_t len)
{
    json_t *v = json_object_get(obj, key);

    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_boolean(v))
        return perr(err, len, "%s: \"%s\" must be true or false", where, key);
    *out = json_is_true(v);
    return 0;
}

static int get_str(json_t *obj, const char *key, const char *def, const char *where, char *out,
                   char *err, size_t len)
{
    json_t *v = json_object_get(obj, key);
    const char *s;

    if (!v || json_is_null(v)) {
        if (!def)
            return perr(err, len, "%s: \"%s\" is missing", where, key);
        s = def;
    } else if (!json_is_string(v)) {
        return perr(err, len, "%s: \"%s\" must be a string", where, key);
    } else {
        s = json_string_value(v);
    }
    if (strlen(s) >= FAKE_STR_MAX)
        return perr(err, len, "%s: \"%s\" is longer than %d characters", where, key,
                    FAKE_STR_MAX - 1);
    strcpy(out, s);
    return 0;
}

static int cmp_desc(const void *a, const void *b)
{
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    return (x < y) - (x > y);
}

/* Sorts highest first and drops duplicates; returns the new length. */
static size_t sort_unique_desc(unsigned *v, size_t n)
{
    size_t i, k = 0;

    qsort(v, n, sizeof(*v), cmp_desc);
    for (i = 0; i < n; i++)
        if (k == 0 || v[k - 1] != v[i])
            v[k++] = v[i];
    return k;
}

static int parse_clock_array(json_t *arr, unsigned *out, size_t cap, size_t *ret_n,
                             const char *where, char *err, size_t len)
{
    size_t i;
    json_t *v;

    if (json_array_size(arr) == 0)
        return perr(err, len, "%s is empty", where);
    if (json_array_size(arr) > cap)
        return perr(err, len, "%s has %zu entries (at most %zu)", where, json_array_size(arr), cap);
    json_array_foreach(arr, i, v)
    {
        double d = json_is_number(v) ? json_number_value(v) : -1;

        if (d < 1 || d > 100000 || floor(d) != d)
            return perr(err, len, "%s[%zu] is not a clock in MHz (1..100000)", where, i);
        out[i] = (unsigned)d;
    }
    *ret_n = sort_unique_desc(out, json_array_size(arr));
    return 0;
}

static int parse_sm_clocks(json_t *v, struct gpu *g, const char *where, char *err, size_t len)
{
    static const char *const known[] = {"max", "min", "step", NULL};
    double mx, mn, st;
    char w[160];
    unsigned c;

    snprintf(w, sizeof(w), "%s.sm_clocks_mhz", where);
    if (json_is_array(v))
        return parse_clock_array(v, g->sm, FAKE_MAX_CLOCKS, &g->n_sm, w, err, len);
    if (!json_is_object(v))
        return perr(err, len, "%s must be an array of MHz or {\"max\", \"min\", \"step\"}", w);
    if (check_keys(v, known, w, err, len) ||
        get_uint(v, "max", true, 0, 100000, w, &mx, err, len) ||
        get_uint(v, "min", true, 0, 100000, w, &mn, err, len) ||
        get_uint(v, "step", true, 0, 100000, w, &st, err, len))
        return -1;
    if (st < 1 || mn < 1 || mn > mx)
        return perr(err, len, "%s: need 1 <= min <= max and step >= 1 (min %g, max %g, step %g)", w,
                    mn, mx, st);
    if (fmod(mx - mn, st) != 0)
        return perr(err, len, "%s: max - min (%g) is not a multiple of step %g", w, mx - mn, st);
    if ((mx - mn) / st + 1 > FAKE_MAX_CLOCKS)
        return perr(err, len, "%s: more than %d clocks", w, FAKE_MAX_CLOCKS);
    g->n_sm = 0;
    for (c = (unsigned)mx; c >= (unsigned)mn && c <= (unsigned)mx; c -= (unsigned)st)
        g->sm[g->n_sm++] = c;
    return 0;
}

static int parse_gpu(json_t *o, unsigned i, struct gpu *g, char *err, size_t len)
{
    static const char *const known[] = {"name",
                                        "uuid",
                                        "memory_clocks_mhz",
                                        "sm_clocks_mhz",
                                        "sm_clock_mhz",
                                        "power_mw",
                                        "locked_min_mhz",
                                        "locked_max_mhz",
                                        "throttle_reasons",
                                        "power_limit_mw",
                                        "energy_supported",
                                        "counter_stuck",
                                        "reset_counter",
                                        "energy_start_mj",
                                        "lost",
                                        NULL};
    char w[64], wm[96];
    json_t *v, *lmin, *lmax;
    double d;

    snprintf(w, sizeof(w), "gpus[%u]", i);
    memset(g, 0, sizeof(*g));
    if (!json_is_object(o))
        return perr(err, len, "%s must be an object", w);
    if (check_keys(o, known, w, err, len) || get_str(o, "name", NULL, w, g->name, err, len) ||
        get_str(o, "uuid", NULL, w, g->uuid, err, len))
        return -1;
    v = json_object_get(o, "memory_clocks_mhz");
    snprintf(wm, sizeof(wm), "%s.memory_clocks_mhz", w);
    if (!json_is_array(v))
        return perr(err, len, "%s must be an array of MHz", wm);
    if (parse_clock_array(v, g->mem, FAKE_MAX_MEM_CLOCKS, &g->n_mem, wm, err, len))
        return -1;
    v = json_object_get(o, "sm_clocks_mhz");
    if (!v)
        return perr(err, len, "%s: \"sm_clocks_mhz\" is missing", w);
    if (parse_sm_clocks(v, g, w, err, len))
        return -1;
    if (get_uint(o, "sm_clock_mhz", false, g->sm[0], 100000, w, &d, err, len))
        return -1;
    g->sm_clock = (unsigned)d;
    if (get_uint(o, "power_mw", false, 0, 4e9, w, &d, err, len))
        return -1;
    g->power_mw = (unsigned)d;
    lmin = json_object_get(o, "locked_min_mhz");
    lmax = json_object_get(o, "locked_max_mhz");
    if ((lmin && !json_is_null(lmin)) || (lmax && !json_is_null(lmax))) {
        double a, b;

        if (get_uint(o, "locked_min_mhz", true, 0, 100000, w, &a, err, len) ||
            get_uint(o, "locked_max_mhz", true, 0, 100000, w, &b, err, len))
            return -1;
        if (a > b)
            return perr(err, len, "%s: locked_min_mhz %g is above locked_max_mhz %g", w, a, b);
        g->locked = true;
        g->lock_min = (unsigned)a;
        g->lock_max = (unsigned)b;
    }
    if (get_uint(o, "throttle_reasons", false, 0, 9007199254740991.0, w, &d, err, len))
        return -1;
    g->throttle = (unsigned long long)d;
    if (get_uint(o, "power_limit_mw", false, 0, 4e9, w, &d, err, len))
        return -1;
    g->power_limit_mw = (unsigned)d;
    /* Optional: where the counter stands when the state is first read (a real driver's counter
     * has been running since it loaded); later reads ignore it. */
    if (get_uint(o, "energy_start_mj", false, 0, 9007199254740991.0, w, &d, err, len))
        return -1;
    g->energy_mj = g->boundary_mj = d;
    if (get_bool(o, "energy_supported", true, w, &g->energy_supported, err, len) ||
        get_bool(o, "counter_stuck", false, w, &g->counter_stuck, err, len) ||
        get_bool(o, "reset_counter", false, w, &g->reset_counter, err, len) ||
        get_bool(o, "lost", false, w, &g->lost, err, len))
        return -1;
    return 0;
}

static int parse_faults(json_t *arr, struct state *s, char *err, size_t len)
{
    static const char *const known[] = {"function", "gpu", "error", "count", NULL};
    size_t i;
    json_t *f;

    if (!arr || json_is_null(arr))
        return 0;
    if (!json_is_array(arr))
        return perr(err, len, "\"faults\" must be an array");
    s->n_faults = json_array_size(arr);
    s->faults = calloc(s->n_faults ? s->n_faults : 1, sizeof(*s->faults));
    if (!s->faults)
        return perr(err, len, "out of memory");
    json_array_foreach(arr, i, f)
    {
        char w[32];
        double d;
        const char *fn;

        snprintf(w, sizeof(w), "faults[%zu]", i);
        if (!json_is_object(f))
            return perr(err, len, "%s must be an object", w);
        if (check_keys(f, known, w, err, len))
            return -1;
        fn = json_string_value(json_object_get(f, "function"));
        if (!fn || strncmp(fn, "nvml", 4) != 0 || strlen(fn) >= sizeof(s->faults[i].function))
            return perr(err, len, "%s: \"function\" must name an NVML function (\"nvml...\")", w);
        strcpy(s->faults[i].function, fn);
        if (get_uint(f, "gpu", false, -1, FAKE_GPUS_LIMIT - 1, w, &d, err, len))
            return -1;
        s->faults[i].gpu = (int)d;
        if (get_uint(f, "error", true, 0, 1000000, w, &d, err, len))
            return -1;
        if (d == 0)
            return perr(err, len, "%s: \"error\" 0 is NVML_SUCCESS, not a fault", w);
        s->faults[i].error = (int)d;
        if (get_uint(f, "count", false, 1, 1e9, w, &d, err, len))
            return -1;
        s->faults[i].count = (long)d;
    }
    return 0;
}

/* Reads and checks a whole state text into s (nothing adopted yet). */
static int parse_text(const char *text, size_t text_len, struct state *s, char *err, size_t len)
{
    static const char *const known[] = {"driver_version",
                                        "nvml_version",
                                        "virtual_time_ms",
                                        "energy_update_ms",
                                        "lock_permitted",
                                        "gpus",
                                        "faults",
                                        "energy_read_cpu_us",
                                        "energy_read_hold_file",
                                        NULL};
    json_error_t je;
    json_t *doc, *v, *gpus;
    double d;
    size_t i;

    memset(s, 0, sizeof(*s));
    doc = json_loadb(text, text_len, JSON_REJECT_DUPLICATES, &je);
    if (!doc) {
        if (je.line < 1)
            return perr(err, len, "%s", je.text);
        return perr(err, len, "line %d column %d: %s", je.line, je.column, je.text);
    }
    s->doc = doc;
    if (!json_is_object(doc))
        return perr(err, len, "the top level must be an object");
    if (check_keys(doc, known, "top level", err, len) ||
        get_str(doc, "driver_version", "580.159.04", "top level", s->driver_version, err, len) ||
        get_str(doc, "nvml_version", "13.580.159.04", "top level", s->nvml_version, err, len))
        return -1;
    v = json_object_get(doc, "virtual_time_ms");
    if (v && !json_is_null(v)) {
        if (!json_is_number(v) || !isfinite(json_number_value(v)) || json_number_value(v) < 0)
            return perr(err, len, "\"virtual_time_ms\" must be a non-negative number or null");
        s->virtual_time = true;
        s->t_ms = json_number_value(v);
    } else {
        s->t_ms = monotonic_ms();
    }
    if (get_uint(doc, "energy_update_ms", false, 100, 1e9, "top level", &d, err, len))
        return -1;
    if (d < 1)
        return perr(err, len, "\"energy_update_ms\" must be at least 1");
    s->update_ms = d;
    /* Optional: CPU time each energy counter read burns, to stand in for a driver where it is
     * dear (4000 us on an H200 with driver 580.159.04; docs/meter.md). */
    if (get_uint(doc, "energy_read_cpu_us", false, 0, 1e6, "top level", &d, err, len))
        return -1;
    s->energy_read_cpu_us = d;
    /* Optional: a file whose presence holds every energy read (it waits, burning nothing, until
     * the file is gone) after creating "<file>.entered", so a test can have a read in flight for
     * as long as it needs, whatever the machine's speed. */
    v = json_object_get(doc, "energy_read_hold_file");
    if (v && !json_is_null(v)) {
        if (!json_is_string(v) || strlen(json_string_value(v)) + 9 >= sizeof(s->energy_read_hold))
            return perr(err, len, "\"energy_read_hold_file\" must be a path (a string)");
        snprintf(s->energy_read_hold, sizeof(s->energy_read_hold), "%s", json_string_value(v));
    }
    if (get_bool(doc, "lock_permitted", true, "top level", &s->lock_permitted, err, len))
        return -1;
    gpus = json_object_get(doc, "gpus");
    if (!json_is_array(gpus))
        return perr(err, len, "\"gpus\" must be an array");
    if (json_array_size(gpus) > FAKE_GPUS_LIMIT)
        return perr(err, len, "\"gpus\" has %zu entries (at most %u)", json_array_size(gpus),
                    FAKE_GPUS_LIMIT);
    s->n = (unsigned)json_array_size(gpus);
    s->gpus = calloc(s->n ? s->n : 1, sizeof(*s->gpus));
    if (!s->gpus)
        return perr(err, len, "out of memory");
    json_array_foreach(gpus, i, v)
    {
        if (parse_gpu(v, (unsigned)i, &s->gpus[i], err, len))
            return -1;
    }
    v = json_object_get(doc, "faults");
    if (parse_faults(v, s, err, len))
        return -1;
    s->faults_json = v ? json_deep_copy(v) : json_array();
    return 0;
}

/* ---- time and energy ------------------------------------------------------------------------ */

/* Integrates every GPU's energy from S.t_ms up to t at the current power. */
static void advance_to(double t)
{
    unsigned i;

    if (!(t > S.t_ms))
        return; /* time never runs backwards: an earlier "now" means no time passed */
    for (i = 0; i < S.n; i++) {
        struct gpu *g = &S.gpus[i];
        double p = g->counter_stuck ? 0.0 : (double)g->power_mw; /* mW = uJ/ms */
        double b = floor(t / S.update_ms) * S.update_ms;

        if (b > S.t_ms)
            g->boundary_mj = g->energy_mj + p * (b - S.t_ms) / 1000.0;
        g->energy_mj += p * (t - S.t_ms) / 1000.0;
    }
    S.t_ms = t;
}

static bool stat_changed(const struct stat *a, const struct stat *b)
{
    return a->st_ino != b->st_ino || a->st_dev != b->st_dev || a->st_size != b->st_size ||
           a->st_mtim.tv_sec != b->st_mtim.tv_sec || a->st_mtim.tv_nsec != b->st_mtim.tv_nsec ||
           a->st_ctim.tv_sec != b->st_ctim.tv_sec || a->st_ctim.tv_nsec != b->st_ctim.tv_nsec;
}

/* File timestamps are coarse (a kernel tick) and a replaced file can reuse the old inode number,
 * so an unchanged stat proves nothing about a file written in the last moments. It does once the
 * file's ctime is more than a second old: any later write would carry a newer time. */
static bool surely_unchanged(const struct stat *st)
{
    struct timespec now;

    if (stat_changed(st, &seen))
        return false;
    clock_gettime(CLOCK_REALTIME, &now);
    return now.tv_sec - st->st_ctim.tv_sec >= 2;
}

/* The whole file, NUL-terminated, malloc'd; NULL with errno set on failure. */
static char *read_text(const char *path, size_t *ret_len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL, *nb;
    size_t len = 0, cap = 0, got;

    if (!f)
        return NULL;
    for (;;) {
        if (cap - len < 4096) {
            cap = cap ? cap * 2 : 16384;
            nb = realloc(buf, cap + 1);
            if (!nb) {
                free(buf);
                fclose(f);
                errno = ENOMEM;
                return NULL;
            }
            buf = nb;
        }
        got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        free(buf);
        fclose(f);
        errno = EIO;
        return NULL;
    }
    fclose(f);
    buf[len] = '\0';
    *ret_len = len;
    return buf;
}

static void set_seen(char *text, size_t len)
{
    free(seen_text);
    seen_text = text;
    seen_len = len;
}

/* Adopts a freshly parsed state: energy carries over by GPU index, the old power integrated up
 * to the new "now" first. */
static void adopt(struct state *n, bool first)
{
    unsigned i;

    if (!first) {
        if (n->virtual_time == S.virtual_time)
            advance_to(n->t_ms);
        else
            S.t_ms = n->t_ms; /* switching clocks: nothing meaningful to integrate */
        for (i = 0; i < n->n && i < S.n; i++) {
            n->gpus[i].energy_mj = S.gpus[i].energy_mj;
            n->gpus[i].boundary_mj = S.gpus[i].boundary_mj;
            /* A reset happens when the flag turns on, not on every re-read that still has it. */
            if (n->gpus[i].reset_counter && !S.gpus[i].reset_counter)
                n->gpus[i].energy_mj = n->gpus[i].boundary_mj = 0;
        }
        /* The same fault list re-read keeps what has been used up of it. */
        if (json_equal(n->faults_json, S.faults_json)) {
            struct fault *t = n->faults;
            size_t tn = n->n_faults;

            n->faults = S.faults;
            n->n_faults = S.n_faults;
            S.faults = t;
            S.n_faults = tn;
        }
        n->t_ms = S.t_ms > n->t_ms ? S.t_ms : n->t_ms;
    }
    state_free(&S);
    S = *n;
    memset(n, 0, sizeof(*n));
}

/* Re-reads the file if it changed, then brings the energy up to now. Called with mu held. A file
 * that became unusable keeps the last good state (a writer may be half-way); it is reported once.
 */
static void refresh(void)
{
    struct stat st;
    char *text;
    size_t len;

    if (stat(state_path, &st) == 0 && !surely_unchanged(&st) &&
        (text = read_text(state_path, &len)) != NULL) {
        struct state n;
        char err[512];

        seen = st;
        if (len == seen_len && seen_text && memcmp(text, seen_text, len) == 0) {
            free(text);
        } else if (parse_text(text, len, &n, err, sizeof(err)) == 0) {
            adopt(&n, false);
            set_seen(text, len);
        } else {
            fprintf(stderr,
                    "stand-in NVML: state file %s ignored (keeping the last good one): %s\n",
                    state_path, err);
            state_free(&n);
            set_seen(text, len);
        }
    }
    if (!S.virtual_time)
        advance_to(monotonic_ms());
}

/* Writes the locked range of every GPU back into the file, atomically. Called with mu held. */
static int write_back(void)
{
    json_t *gpus = json_object_get(S.doc, "gpus");
    char tmp[4200], *text = NULL;
    size_t len;
    FILE *f;
    unsigned i;
    int r = -1;

    for (i = 0; i < S.n && i < json_array_size(gpus); i++) {
        json_t *o = json_array_get(gpus, i);
        struct gpu *g = &S.gpus[i];

        json_object_set_new(o, "locked_min_mhz",
                            g->locked ? json_integer(g->lock_min) : json_null());
        json_object_set_new(o, "locked_max_mhz",
                            g->locked ? json_integer(g->lock_max) : json_null());
        if (json_object_get(o, "reset_counter"))
            json_object_set_new(o, "reset_counter", json_false());
    }
    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", state_path, (long)getpid());
    text = json_dumps(S.doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (!text)
        goto out;
    len = strlen(text);
    f = fopen(tmp, "wb");
    if (!f)
        goto out;
    if (fwrite(text, 1, len, f) != len) {
        fclose(f);
        unlink(tmp);
        goto out;
    }
    if (fclose(f) != 0 || rename(tmp, state_path) != 0) {
        unlink(tmp);
        goto out;
    }
    if (stat(state_path, &seen) == 0) {
        set_seen(text, len);
        text = NULL;
        r = 0;
    }
out:
    free(text);
    if (r)
        fprintf(stderr, "stand-in NVML: could not write the locked range back to %s: %s\n",
                state_path, strerror(errno));
    return r;
}

/* ---- call plumbing --------------------------------------------------------------------------- */

/* An injected fault for fn (matched with or without its _v2 suffix) on gpu, or 0. */
static int take_fault(const char *fn, int gpu)
{
    size_t i, fl = strlen(fn);

    for (i = 0; i < S.n_faults; i++) {
        struct fault *f = &S.faults[i];
        size_t l = strlen(f->function);
        bool name_ok = !strcmp(f->function, fn) ||
                       (fl > 3 && !strcmp(fn + fl - 3, "_v2") && l == fl - 3 &&
                        !strncmp(f->function, fn, l)) ||
                       (l > 3 && !strcmp(f->function + l - 3, "_v2") && fl == l - 3 &&
                        !strncmp(f->function, fn, fl));

        if (f->count > 0 && name_ok && (f->gpu < 0 || f->gpu == gpu)) {
            f->count--;
            return f->error;
        }
    }
    return 0;
}

static void count_call(const char *fn)
{
    size_t i;

    for (i = 0; i < FAKE_MAX_COUNTED && calls[i].fn[0]; i++)
        if (!strcmp(calls[i].fn, fn))
            break;
    if (i == FAKE_MAX_COUNTED)
        return;
    if (!calls[i].fn[0])
        snprintf(calls[i].fn, sizeof(calls[i].fn), "%s", fn);
    calls[i].n++;
}

/* Burns the CPU time an energy counter read costs on the stand-in's pretend driver, and holds
 * the read while the hold file exists. */
static void burn_energy_read(void)
{
    struct timespec ts;
    double t0, t;

    if (S.energy_read_hold[0] && access(S.energy_read_hold, F_OK) == 0) {
        char entered[4200];
        struct timespec nap = {0, 1000000};
        FILE *f;

        snprintf(entered, sizeof(entered), "%s.entered", S.energy_read_hold);
        f = fopen(entered, "w");
        if (f)
            fclose(f);
        while (access(S.energy_read_hold, F_OK) == 0)
            nanosleep(&nap, NULL);
    }
    if (S.energy_read_cpu_us <= 0 || clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return;
    t0 = (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
    do {
        if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
            return;
        t = (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
    } while (t - t0 < S.energy_read_cpu_us);
}

/* Common entry of every device call: locks, refreshes, checks the handle and the GPU's flags.
 * On NVML_SUCCESS *ret_g is the GPU and mu is held; otherwise mu is released. */
static nvmlReturn_t enter(const char *fn, nvmlDevice_t dev, struct gpu **ret_g)
{
    int r;

    pthread_mutex_lock(&mu);
    count_call(fn);
    if (init_count == 0) {
        r = NVML_ERROR_UNINITIALIZED;
        goto fail;
    }
    refresh();
    if (!handle_ok(dev) || dev->index >= S.n) {
        r = NVML_ERROR_INVALID_ARGUMENT;
        goto fail;
    }
    if (S.gpus[dev->index].lost) {
        r = NVML_ERROR_GPU_IS_LOST;
        goto fail;
    }
    r = take_fault(fn, (int)dev->index);
    if (r)
        goto fail;
    *ret_g = &S.gpus[dev->index];
    return NVML_SUCCESS;
fail:
    pthread_mutex_unlock(&mu);
    return r;
}

static nvmlReturn_t leave(nvmlReturn_t r)
{
    pthread_mutex_unlock(&mu);
    return r;
}

static nvmlReturn_t copy_str(const char *s, char *buf, unsigned len)
{
    if (!buf)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(s) + 1 > len)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, s, strlen(s) + 1);
    return NVML_SUCCESS;
}

/* ---- the NVML functions ---------------------------------------------------------------------- */

FAKE_EXPORT nvmlReturn_t nvmlInit_v2(void);
FAKE_EXPORT nvmlReturn_t nvmlInit(void);
FAKE_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags);
FAKE_EXPORT nvmlReturn_t nvmlShutdown(void);
FAKE_EXPORT const char *nvmlErrorString(nvmlReturn_t result);
FAKE_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length);
FAKE_EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length);
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount);
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount);
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device);
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device);
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length);
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length);
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, unsigned int *arch);
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                                unsigned int *clock);
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetSupportedMemoryClocks(nvmlDevice_t device,
                                                            unsigned int *count,
                                                            unsigned int *clocksMHz);
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetSupportedGraphicsClocks(nvmlDevice_t device,
                                                              unsigned int memoryClockMHz,
                                                              unsigned int *count,
                                                              unsigned int *clocksMHz);
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device,
                                                             unsigned long long *energy);
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power);
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device,
                                                                unsigned long long *reasons);
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
                                                                   unsigned long long *reasons);
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit);
FAKE_EXPORT nvmlReturn_t nvmlDeviceSetGpuLockedClocks(nvmlDevice_t device,
                                                      unsigned int minGpuClockMHz,
                                                      unsigned int maxGpuClockMHz);
FAKE_EXPORT nvmlReturn_t nvmlDeviceResetGpuLockedClocks(nvmlDevice_t device);
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount,
                                                  nvmlFieldValue_t *values);
/* Not NVML: how many times a device function was called (faults and errors included) since the
 * process first called nvmlInit. For tests, through dlsym. */
FAKE_EXPORT unsigned long fake_nvml_call_count(const char *function);

static nvmlReturn_t init(void)
{
    const char *path;
    struct state n;
    struct stat st;
    char err[512], *text = NULL;
    size_t len = 0;
    nvmlReturn_t r = NVML_SUCCESS;

    pthread_mutex_lock(&mu);
    if (init_count > 0) {
        init_count++;
        goto out;
    }
    path = getenv("EERL_FAKE_NVML_STATE");
    if (!path || !*path) {
        snprintf(init_error, sizeof(init_error),
                 "stand-in NVML: EERL_FAKE_NVML_STATE is not set (it names the JSON state file)");
        fprintf(stderr, "%s\n", init_error);
        r = NVML_ERROR_DRIVER_NOT_LOADED;
        goto out;
    }
    if (strlen(path) >= sizeof(state_path) - 16) {
        snprintf(init_error, sizeof(init_error), "stand-in NVML: state file path is too long");
        fprintf(stderr, "%s\n", init_error);
        r = NVML_ERROR_UNKNOWN;
        goto out;
    }
    if (stat(path, &st) != 0 || !(text = read_text(path, &len))) {
        snprintf(err, sizeof(err), "%s", strerror(errno));
        goto bad_file;
    }
    if (parse_text(text, len, &n, err, sizeof(err)) != 0) {
        state_free(&n);
        free(text);
        goto bad_file;
    }
    strcpy(state_path, path);
    seen = st;
    set_seen(text, len);
    adopt(&n, true);
    init_error[0] = '\0';
    init_count = 1;
    goto out;
bad_file:
    snprintf(init_error, sizeof(init_error), "stand-in NVML: bad state file %s: %s", path, err);
    fprintf(stderr, "%s\n", init_error);
    r = NVML_ERROR_UNKNOWN;
out:
    pthread_mutex_unlock(&mu);
    return r;
}

#ifndef FAKE_NVML_LEGACY
nvmlReturn_t nvmlInit_v2(void)
{
    return init();
}
#endif

nvmlReturn_t nvmlInit(void)
{
    return init();
}

#ifndef FAKE_NVML_LEGACY
/* What pynvml's nvmlInit() calls (other readers of the same counters, e.g. Zeus, go through it);
 * the stand-in takes no flags. */
nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    if (flags != 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    return init();
}
#endif

/* Like NVML, init and shutdown are counted; the last shutdown forgets everything, so the next
 * nvmlInit reads the file afresh and the energy counters start again at 0. */
nvmlReturn_t nvmlShutdown(void)
{
    nvmlReturn_t r = NVML_SUCCESS;

    pthread_mutex_lock(&mu);
    if (init_count == 0)
        r = NVML_ERROR_UNINITIALIZED;
    else if (--init_count == 0) {
        size_t k;

        state_free(&S);
        set_seen(NULL, 0);
        for (k = 0; k < n_handle_blocks; k++) /* handles end with the last shutdown, as NVML's */
            free(handle_blocks[k]);
        free(handle_blocks);
        handle_blocks = NULL;
        n_handle_blocks = 0;
    }
    pthread_mutex_unlock(&mu);
    return r;
}

const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case 0:
        return "Success";
    case 1:
        return "Uninitialized";
    case 2:
        return "Invalid Argument";
    case 3:
        return "Not Supported";
    case 4:
        return "Insufficient Permissions";
    case 5:
        return "Already Initialized";
    case 6:
        return "Not Found";
    case 7:
        return "Insufficient Size";
    case 8:
        return "Insufficient External Power";
    case 9:
        return init_error[0] ? init_error : "Driver Not Loaded";
    case 10:
        return "Timeout";
    case 11:
        return "Interrupt Request Issue";
    case 12:
        return "NVML Shared Library Not Found";
    case 13:
        return "Function Not Found";
    case 14:
        return "Corrupted infoROM";
    case 15:
        return "GPU is lost";
    case 16:
        return "GPU requires restart";
    case 17:
        return "The operating system has blocked the request.";
    case 18:
        return "RM has detected an NVML/RM version mismatch.";
    case 19:
        return "In use by another client";
    case 20:
        return "Insufficient Memory";
    case 21:
        return "No data";
    case 999:
        return init_error[0] ? init_error : "Unknown Error";
    default:
        return "Unknown Error";
    }
}

static nvmlReturn_t system_string(const char *fn, bool nvml, char *buf, unsigned len)
{
    nvmlReturn_t r;

    pthread_mutex_lock(&mu);
    if (init_count == 0)
        return leave(NVML_ERROR_UNINITIALIZED);
    refresh();
    r = take_fault(fn, -1);
    if (r)
        return leave(r);
    return leave(copy_str(nvml ? S.nvml_version : S.driver_version, buf, len));
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    return system_string("nvmlSystemGetDriverVersion", false, version, length);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    return system_string("nvmlSystemGetNVMLVersion", true, version, length);
}

static nvmlReturn_t get_count(const char *fn, unsigned int *count)
{
    nvmlReturn_t r;

    pthread_mutex_lock(&mu);
    if (init_count == 0)
        return leave(NVML_ERROR_UNINITIALIZED);
    if (!count)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    refresh();
    r = take_fault(fn, -1);
    if (r)
        return leave(r);
    *count = S.n;
    return leave(NVML_SUCCESS);
}

#ifndef FAKE_NVML_LEGACY
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    return get_count("nvmlDeviceGetCount_v2", deviceCount);
}
#endif

nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount)
{
    return get_count("nvmlDeviceGetCount", deviceCount);
}

static nvmlReturn_t get_handle(const char *fn, unsigned int index, nvmlDevice_t *device)
{
    nvmlReturn_t r;

    pthread_mutex_lock(&mu);
    if (init_count == 0)
        return leave(NVML_ERROR_UNINITIALIZED);
    refresh();
    if (!device || index >= S.n)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (S.gpus[index].lost)
        return leave(NVML_ERROR_GPU_IS_LOST);
    r = take_fault(fn, (int)index);
    if (r)
        return leave(r);
    *device = handle_at(index);
    if (!*device)
        return leave(NVML_ERROR_MEMORY);
    return leave(NVML_SUCCESS);
}

#ifndef FAKE_NVML_LEGACY
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    return get_handle("nvmlDeviceGetHandleByIndex_v2", index, device);
}
#endif

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return get_handle("nvmlDeviceGetHandleByIndex", index, device);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    struct gpu *g;
    nvmlReturn_t r = enter("nvmlDeviceGetName", device, &g);

    if (r)
        return r;
    return leave(copy_str(g->name, name, length));
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    struct gpu *g;
    nvmlReturn_t r = enter("nvmlDeviceGetUUID", device, &g);

    if (r)
        return r;
    return leave(copy_str(g->uuid, uuid, length));
}

#ifndef FAKE_NVML_LEGACY
/* Every stand-in GPU is a Hopper (NVML_DEVICE_ARCH_HOPPER = 9): readers such as Zeus ask before
 * they read the energy counter (Volta and later have it). eerl does not call this. */
nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, unsigned int *arch)
{
    struct gpu *g;
    nvmlReturn_t r = enter("nvmlDeviceGetArchitecture", device, &g);

    if (r)
        return r;
    if (!arch)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *arch = 9;
    return leave(NVML_SUCCESS);
}
#endif

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock)
{
    struct gpu *g;
    nvmlReturn_t r = enter("nvmlDeviceGetClockInfo", device, &g);
    unsigned c;

    if (r)
        return r;
    if (!clock)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    switch (type) {
    case NVML_CLOCK_GRAPHICS:
    case NVML_CLOCK_SM:
        c = g->sm_clock;
        if (g->locked) {
            c = c < g->lock_min ? g->lock_min : c;
            c = c > g->lock_max ? g->lock_max : c;
        }
        *clock = c;
        return leave(NVML_SUCCESS);
    case NVML_CLOCK_MEM:
        *clock = g->mem[0];
        return leave(NVML_SUCCESS);
    case NVML_CLOCK_VIDEO:
        return leave(NVML_ERROR_NOT_SUPPORTED);
    default:
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    }
}

/* NVML's size protocol: *count in is the room, out is what is (or would be) written. */
static nvmlReturn_t copy_clocks(const unsigned *v, size_t n, unsigned int *count, unsigned int *out)
{
    unsigned room;

    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    room = *count;
    *count = (unsigned)n;
    if (room < n)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    if (!out)
        return NVML_ERROR_INVALID_ARGUMENT;
    memcpy(out, v, n * sizeof(*v));
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSupportedMemoryClocks(nvmlDevice_t device, unsigned int *count,
                                                unsigned int *clocksMHz)
{
    struct gpu *g;
    nvmlReturn_t r = enter("nvmlDeviceGetSupportedMemoryClocks", device, &g);

    if (r)
        return r;
    return leave(copy_clocks(g->mem, g->n_mem, count, clocksMHz));
}

/* The same SM clock list at every listed memory clock (the state describes the highest one). */
nvmlReturn_t nvmlDeviceGetSupportedGraphicsClocks(nvmlDevice_t device, unsigned int memoryClockMHz,
                                                  unsigned int *count, unsigned int *clocksMHz)
{
    struct gpu *g;
    nvmlReturn_t r = enter("nvmlDeviceGetSupportedGraphicsClocks", device, &g);
    size_t i;

    if (r)
        return r;
    for (i = 0; i < g->n_mem; i++)
        if (g->mem[i] == memoryClockMHz)
            return leave(copy_clocks(g->sm, g->n_sm, count, clocksMHz));
    return leave(NVML_ERROR_NOT_FOUND);
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *energy)
{
    struct gpu *g;
    nvmlReturn_t r = enter("nvmlDeviceGetTotalEnergyConsumption", device, &g);

    if (r)
        return r;
    if (!g->energy_supported)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    if (!energy)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    burn_energy_read();
    *energy = (unsigned long long)floor(g->boundary_mj);
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    struct gpu *g;
    nvmlReturn_t r = enter("nvmlDeviceGetPowerUsage", device, &g);

    if (r)
        return r;
    if (!power)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *power = g->power_mw;
    return leave(NVML_SUCCESS);
}

static nvmlReturn_t get_reasons(const char *fn, nvmlDevice_t device, unsigned long long *reasons)
{
    struct gpu *g;
    nvmlReturn_t r = enter(fn, device, &g);

    if (r)
        return r;
    if (!reasons)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    *reasons = g->throttle;
    return leave(NVML_SUCCESS);
}

#ifndef FAKE_NVML_LEGACY
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device,
                                                    unsigned long long *reasons)
{
    return get_reasons("nvmlDeviceGetCurrentClocksEventReasons", device, reasons);
}
#endif

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
                                                       unsigned long long *reasons)
{
    return get_reasons("nvmlDeviceGetCurrentClocksThrottleReasons", device, reasons);
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit)
{
    struct gpu *g;
    nvmlReturn_t r = enter("nvmlDeviceGetEnforcedPowerLimit", device, &g);

    if (r)
        return r;
    if (!limit)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (g->power_limit_mw == 0)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    *limit = g->power_limit_mw;
    return leave(NVML_SUCCESS);
}

/* Strict on purpose: a range outside the supported clocks, or upside down, is a bug in the caller
 * that the stand-in should surface rather than quietly clamp. */
nvmlReturn_t nvmlDeviceSetGpuLockedClocks(nvmlDevice_t device, unsigned int minGpuClockMHz,
                                          unsigned int maxGpuClockMHz)
{
    struct gpu *g;
    nvmlReturn_t r = enter("nvmlDeviceSetGpuLockedClocks", device, &g);
    struct gpu old;

    if (r)
        return r;
    if (!S.lock_permitted)
        return leave(NVML_ERROR_NO_PERMISSION);
    if (minGpuClockMHz > maxGpuClockMHz || minGpuClockMHz < g->sm[g->n_sm - 1] ||
        maxGpuClockMHz > g->sm[0])
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    old = *g;
    g->locked = true;
    g->lock_min = minGpuClockMHz;
    g->lock_max = maxGpuClockMHz;
    if (write_back() != 0) {
        *g = old;
        return leave(NVML_ERROR_UNKNOWN);
    }
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceResetGpuLockedClocks(nvmlDevice_t device)
{
    struct gpu *g;
    nvmlReturn_t r = enter("nvmlDeviceResetGpuLockedClocks", device, &g);
    struct gpu old;

    if (r)
        return r;
    if (!S.lock_permitted)
        return leave(NVML_ERROR_NO_PERMISSION);
    old = *g;
    g->locked = false;
    if (write_back() != 0) {
        *g = old;
        return leave(NVML_ERROR_UNKNOWN);
    }
    return leave(NVML_SUCCESS);
}

#ifndef FAKE_NVML_LEGACY
/* Fields 186 (instantaneous power: the state's power_mw) and 83 (the energy counter, as
 * nvmlDeviceGetTotalEnergyConsumption reports it); any other field is NOT_SUPPORTED in its entry.
 * Not in the legacy build: an old driver without it makes eerl fall back to
 * nvmlDeviceGetPowerUsage. */
nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount,
                                      nvmlFieldValue_t *values)
{
    struct gpu *g;
    nvmlReturn_t r = enter("nvmlDeviceGetFieldValues", device, &g);
    struct timespec now;
    int i;

    if (r)
        return r;
    if (valuesCount < 0 || (valuesCount > 0 && !values))
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    clock_gettime(CLOCK_REALTIME, &now);
    for (i = 0; i < valuesCount; i++) {
        nvmlFieldValue_t *v = &values[i];

        v->timestamp = (long long)now.tv_sec * 1000000 + now.tv_nsec / 1000;
        v->latencyUsec = 0;
        v->nvmlReturn = NVML_SUCCESS;
        if (v->fieldId == NVML_FI_DEV_POWER_INSTANT && v->scopeId == 0) {
            v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
            v->value.uiVal = g->power_mw;
        } else if (v->fieldId == NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION && g->energy_supported) {
            burn_energy_read();
            v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
            v->value.ullVal = (unsigned long long)floor(g->boundary_mj);
        } else {
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    return leave(NVML_SUCCESS);
}
#endif

unsigned long fake_nvml_call_count(const char *function)
{
    unsigned long n = 0;
    size_t i;

    pthread_mutex_lock(&mu);
    for (i = 0; function && i < FAKE_MAX_COUNTED && calls[i].fn[0]; i++)
        if (!strcmp(calls[i].fn, function))
            n = calls[i].n;
    pthread_mutex_unlock(&mu);
    return n;
}

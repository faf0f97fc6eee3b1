/* The clock actuator. Owns, per actuator, what it did to each GPU (so it can undo exactly that),
 * and the process-wide registry of live actuators behind the atexit restore. It changes clocks
 * only through eerl_device_lock_sm_clocks / eerl_device_reset_sm_clocks and reads nothing else
 * from the device but the supported clock list.
 *
 * Signals: nothing here is async-signal-safe (mutexes, NVML, which takes its own locks). A
 * program that must restore on SIGINT/SIGTERM sets a flag (or writes a self-pipe) in its handler
 * and calls eerl_actuator_restore_all() from its main loop; the eerl CLI does that. SIGKILL or a
 * crash cannot be handled in-process: that is what the node daemon is for.
 *
 * Fork: an actuator belongs to the process that created it. In a forked child the atexit
 * restore skips it, every call that would touch a clock or the actuator's mutex (which the child
 * may have inherited locked) fails with EERL_ESTATE, and eerl_actuator_free frees memory only: a
 * child never resets or changes its parent's GPUs. The registry mutex is held across fork so a
 * child never inherits it locked. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eerl/error.h"
#include "actuator/actuator.h"

struct gpu_rec {
    unsigned *clocks; /* supported SM clocks, highest first; NULL until first needed */
    size_t n_clocks;
    eerl_actuator_gpu_state st;
};

struct eerl_actuator {
    eerl_device *dev;
    int observe_only;
    pid_t pid;
    pthread_mutex_t mu;
    unsigned n;
    struct gpu_rec *gpus;
    char last_error[256];
    eerl_actuator *prev, *next; /* registry, under reg_mu */
};

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static eerl_actuator *reg_head;
static pthread_once_t reg_once = PTHREAD_ONCE_INIT;

static void reg_prepare(void)
{
    pthread_mutex_lock(&reg_mu);
}

static void reg_release(void)
{
    pthread_mutex_unlock(&reg_mu);
}

static void restore_at_exit(void)
{
    (void)eerl_actuator_restore_all();
}

static void reg_init(void)
{
    atexit(restore_at_exit);
    pthread_atfork(reg_prepare, reg_release, reg_release);
}

static int fail(eerl_actuator *a, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(eerl_actuator *a, int err, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(a->last_error, sizeof(a->last_error), fmt, ap);
    va_end(ap);
    return err;
}

/* 0 in the process that created a; EERL_ESTATE, said in last_error, in a forked child. */
static int check_owner(eerl_actuator *a)
{
    if (a->pid == getpid())
        return 0;
    return fail(a, EERL_ESTATE,
                "the GPU clocks belong to process %ld; its forked child (pid %ld) does not touch "
                "them",
                (long)a->pid, (long)getpid());
}

int eerl_actuator_new(eerl_device *dev, int observe_only, eerl_actuator **ret)
{
    eerl_actuator *a;
    unsigned n = 0;
    int r;

    if (!dev || !ret)
        return EERL_EINVAL;
    r = eerl_device_count(dev, &n);
    if (r < 0)
        return r;
    a = calloc(1, sizeof(*a));
    if (!a)
        return EERL_ENOMEM;
    a->gpus = calloc(n ? n : 1, sizeof(*a->gpus));
    if (!a->gpus) {
        r = EERL_ENOMEM;
        goto fail;
    }
    if (pthread_mutex_init(&a->mu, NULL) != 0) {
        r = EERL_ESYS;
        goto fail;
    }
    a->dev = dev;
    a->n = n;
    a->observe_only = observe_only != 0;
    a->pid = getpid();
    pthread_once(&reg_once, reg_init);
    pthread_mutex_lock(&reg_mu);
    a->next = reg_head;
    if (reg_head)
        reg_head->prev = a;
    reg_head = a;
    pthread_mutex_unlock(&reg_mu);
    *ret = a;
    return 0;
fail:
    free(a->gpus);
    free(a);
    return r;
}

/* Resets every touched GPU. Called with a->mu held. */
static int restore_locked(eerl_actuator *a)
{
    unsigned i;
    int first = 0;

    for (i = 0; i < a->n; i++) {
        struct gpu_rec *g = &a->gpus[i];
        int r = 0;

        if (!g->st.touched)
            continue;
        if (!a->observe_only) {
            r = eerl_device_reset_sm_clocks(a->dev, i);
            if (r < 0) {
                if (!first)
                    first = fail(a, r, "resetting the SM clocks of GPU %u: %s%s%s", i,
                                 eerl_strerror(r), *eerl_device_last_error(a->dev) ? ": " : "",
                                 eerl_device_last_error(a->dev));
                continue; /* stays touched: a later restore tries again */
            }
        }
        g->st.resets++;
        g->st.touched = 0;
        g->st.locked_min_mhz = g->st.locked_max_mhz = 0;
    }
    return first;
}

void eerl_actuator_free(eerl_actuator *a)
{
    unsigned i;

    if (!a)
        return;
    pthread_mutex_lock(&reg_mu);
    if (a->prev)
        a->prev->next = a->next;
    else
        reg_head = a->next;
    if (a->next)
        a->next->prev = a->prev;
    pthread_mutex_unlock(&reg_mu);
    if (check_owner(a) == 0) {
        pthread_mutex_lock(&a->mu);
        (void)restore_locked(a);
        pthread_mutex_unlock(&a->mu);
        pthread_mutex_destroy(&a->mu);
    }
    for (i = 0; i < a->n; i++)
        free(a->gpus[i].clocks);
    free(a->gpus);
    free(a);
}

static int load_clocks(eerl_actuator *a, unsigned gpu)
{
    struct gpu_rec *g = &a->gpus[gpu];
    unsigned *buf;
    size_t n = 0;
    int r;

    if (g->clocks)
        return 0;
    buf = malloc(EERL_DEVICE_CLOCKS_MAX * sizeof(*buf));
    if (!buf)
        return EERL_ENOMEM;
    r = eerl_device_supported_sm_clocks(a->dev, gpu, buf, EERL_DEVICE_CLOCKS_MAX, &n);
    if (r == 0 && n == 0)
        r = EERL_ENOTSUP;
    if (r < 0) {
        free(buf);
        return fail(a, r, "reading the supported SM clocks of GPU %u: %s%s%s", gpu,
                    eerl_strerror(r), *eerl_device_last_error(a->dev) ? ": " : "",
                    eerl_device_last_error(a->dev));
    }
    g->clocks = buf;
    g->n_clocks = n;
    return 0;
}

static int check_gpu(eerl_actuator *a, unsigned gpu)
{
    if (gpu >= a->n)
        return fail(a, EERL_ENODEV, "GPU index %u does not exist (%u GPU%s: 0-%u)", gpu, a->n,
                    a->n == 1 ? "" : "s", a->n ? a->n - 1 : 0);
    return load_clocks(a, gpu);
}

/* Called with a->mu held, clocks loaded. */
static int snap_locked(eerl_actuator *a, unsigned gpu, unsigned mhz, unsigned *ret_mhz)
{
    const struct gpu_rec *g = &a->gpus[gpu];
    unsigned hi = g->clocks[0], lo = g->clocks[g->n_clocks - 1];
    size_t i;

    if (mhz < lo || mhz > hi)
        return fail(a, EERL_ERANGE,
                    "requested %u MHz is outside GPU %u's supported SM clocks %u-%u MHz", mhz, gpu,
                    lo, hi);
    /* The list is highest first, but do not rely on it beyond that: take the max not above. */
    *ret_mhz = lo;
    for (i = 0; i < g->n_clocks; i++)
        if (g->clocks[i] <= mhz && g->clocks[i] > *ret_mhz)
            *ret_mhz = g->clocks[i];
    return 0;
}

int eerl_actuator_snap(eerl_actuator *a, unsigned gpu, unsigned mhz, unsigned *ret_mhz)
{
    unsigned v = 0;
    int r;

    if (!a || !ret_mhz)
        return EERL_EINVAL;
    if ((r = check_owner(a)) < 0)
        return r;
    pthread_mutex_lock(&a->mu);
    r = check_gpu(a, gpu);
    if (r == 0)
        r = snap_locked(a, gpu, mhz, &v);
    pthread_mutex_unlock(&a->mu);
    if (r == 0)
        *ret_mhz = v;
    return r;
}

int eerl_actuator_set_range(eerl_actuator *a, unsigned gpu, unsigned min_mhz, unsigned max_mhz)
{
    struct gpu_rec *g;
    unsigned lo = 0, hi = 0;
    int r;

    if (!a)
        return EERL_EINVAL;
    if ((r = check_owner(a)) < 0)
        return r;
    pthread_mutex_lock(&a->mu);
    if (min_mhz > max_mhz) {
        r = fail(a, EERL_EINVAL,
                 "clock range %u-%u MHz for GPU %u has its minimum above its maximum", min_mhz,
                 max_mhz, gpu);
        goto out;
    }
    r = check_gpu(a, gpu);
    if (r == 0)
        r = snap_locked(a, gpu, min_mhz, &lo);
    if (r == 0)
        r = snap_locked(a, gpu, max_mhz, &hi);
    if (r < 0)
        goto out;
    g = &a->gpus[gpu];
    g->st.requests++;
    g->st.requested_mhz = max_mhz;
    if (g->st.touched && g->st.locked_min_mhz == lo && g->st.locked_max_mhz == hi)
        goto out; /* unchanged: no write */
    if (!a->observe_only) {
        r = eerl_device_lock_sm_clocks(a->dev, gpu, lo, hi);
        if (r < 0) {
            r = fail(
                a, r, "locking GPU %u's SM clock to %u-%u MHz: %s%s%s", gpu, lo, hi,
                r == EERL_ENOPERM && geteuid() == 0
                    ? "the driver refuses clock locking even to root (some virtualized GPUs do; "
                      "not a missing root or CAP_SYS_ADMIN): run observe-only, or ask "
                      "the node's admin"
                    : eerl_strerror(r),
                *eerl_device_last_error(a->dev) ? ": " : "", eerl_device_last_error(a->dev));
            goto out;
        }
    }
    g->st.writes++;
    g->st.touched = 1;
    g->st.locked_min_mhz = lo;
    g->st.locked_max_mhz = hi;
out:
    pthread_mutex_unlock(&a->mu);
    return r;
}

int eerl_actuator_set(eerl_actuator *a, unsigned gpu, unsigned mhz)
{
    return eerl_actuator_set_range(a, gpu, mhz, mhz);
}

int eerl_actuator_restore(eerl_actuator *a)
{
    int r;

    if (!a)
        return EERL_EINVAL;
    if ((r = check_owner(a)) < 0)
        return r;
    pthread_mutex_lock(&a->mu);
    r = restore_locked(a);
    pthread_mutex_unlock(&a->mu);
    return r;
}

int eerl_actuator_restore_all(void)
{
    eerl_actuator *a;
    int first = 0;
    pid_t self = getpid();

    pthread_mutex_lock(&reg_mu);
    for (a = reg_head; a; a = a->next) {
        int r;

        if (a->pid != self)
            continue;
        r = eerl_actuator_restore(a);
        if (r < 0 && !first)
            first = r;
    }
    pthread_mutex_unlock(&reg_mu);
    return first;
}

int eerl_actuator_gpu(eerl_actuator *a, unsigned gpu, eerl_actuator_gpu_state *ret)
{
    int r;

    if (!a || !ret)
        return EERL_EINVAL;
    if ((r = check_owner(a)) < 0)
        return r;
    pthread_mutex_lock(&a->mu);
    if (gpu >= a->n) {
        r = fail(a, EERL_ENODEV, "GPU index %u does not exist (%u GPU%s: 0-%u)", gpu, a->n,
                 a->n == 1 ? "" : "s", a->n ? a->n - 1 : 0);
        pthread_mutex_unlock(&a->mu);
        return r;
    }
    *ret = a->gpus[gpu].st;
    pthread_mutex_unlock(&a->mu);
    return 0;
}

int eerl_actuator_observe_only(const eerl_actuator *a)
{
    return a ? a->observe_only : 0;
}

const char *eerl_actuator_last_error(eerl_actuator *a)
{
    return a ? a->last_error : "";
}

/* The in-process clock owner: the eerl_rt_clock_owner the session uses when none is given,
 * backed by one eerl_actuator on the session's device. It keeps which GPUs it locked at what, so
 * that handing one pool back to the governor (the actuator can only reset everything it touched)
 * is a restore followed by re-locking the GPUs that stay locked. eerld's client (src/agent/)
 * will implement the same three functions over its socket. Owns the actuator; borrows the
 * device.
 *
 * Claims: a session's owner claims the GPUs it will drive (eerl__rt_owner_claim) in a
 * process-wide list, so a second in-process session on one of them is refused with EERL_EBUSY,
 * as eerld refuses a second lease. A GPU is known by its UUID where the backend has real GPUs
 * (nvml, eerld: two device handles on one GPU), else by the device handle and index (simulated
 * GPUs of different twin devices are different GPUs). The list's mutex is held across fork; a
 * forked child keeps its parent's claims (the parent still drives those GPUs). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eerl/tools/actuator.h"
#include "eerl/error.h"
#include "runtime/owner.h"

#define CLAIM_KEY_MAX (EERL_DEVICE_UUID_MAX + 48)

struct eerl__rt_owner {
    eerl_rt_clock_owner pub;
    eerl_actuator *act;
    eerl_device *dev;
    unsigned n_gpus;
    unsigned *locked; /* per device GPU index: the clock it is locked at, 0 = governor */
    char err[256];
    /* Claims (see above), under claim_mu; keys NULL when it claims nothing. */
    char (*keys)[CLAIM_KEY_MAX];
    size_t n_keys;
    pid_t pid;
    struct eerl__rt_owner *claim_prev, *claim_next;
};

static pthread_mutex_t claim_mu = PTHREAD_MUTEX_INITIALIZER;
static struct eerl__rt_owner *claim_head;
static pthread_once_t claim_once = PTHREAD_ONCE_INIT;

static void claim_lock(void)
{
    pthread_mutex_lock(&claim_mu);
}

static void claim_unlock(void)
{
    pthread_mutex_unlock(&claim_mu);
}

static void claim_init(void)
{
    pthread_atfork(claim_lock, claim_unlock, claim_unlock);
}

static const char *owner_last_error(void *ctx)
{
    struct eerl__rt_owner *o = ctx;
    return o->err;
}

static int relock_others(struct eerl__rt_owner *o)
{
    unsigned g;
    int e, first = 0;

    for (g = 0; g < o->n_gpus; g++)
        if (o->locked[g]) {
            e = eerl_actuator_set(o->act, g, o->locked[g]);
            if (e < 0 && first == 0) {
                first = e;
                snprintf(o->err, sizeof(o->err), "%s", eerl_actuator_last_error(o->act));
            }
        }
    return first;
}

static int owner_lock(void *ctx, const unsigned *gpus, size_t n, unsigned mhz)
{
    struct eerl__rt_owner *o = ctx;
    size_t i;
    int e, any = 0;

    for (i = 0; i < n; i++)
        if (gpus[i] >= o->n_gpus) {
            snprintf(o->err, sizeof(o->err), "GPU %u is not one of the device's %u GPUs", gpus[i],
                     o->n_gpus);
            return EERL_ENODEV;
        }
    if (mhz == EERL_CLOCK_GOVERNOR) {
        for (i = 0; i < n; i++) {
            any |= o->locked[gpus[i]] != 0;
            o->locked[gpus[i]] = 0;
        }
        if (!any)
            return 0;
        e = eerl_actuator_restore(o->act);
        if (e < 0) {
            snprintf(o->err, sizeof(o->err), "resetting clocks: %s", eerl_strerror(e));
            return e;
        }
        return relock_others(o);
    }
    for (i = 0; i < n; i++) {
        e = eerl_actuator_set(o->act, gpus[i], mhz);
        if (e < 0) {
            snprintf(o->err, sizeof(o->err), "%s", eerl_actuator_last_error(o->act));
            return e;
        }
        o->locked[gpus[i]] = mhz;
    }
    return 0;
}

static int owner_restore(void *ctx)
{
    struct eerl__rt_owner *o = ctx;
    int e;

    memset(o->locked, 0, o->n_gpus * sizeof(*o->locked));
    e = eerl_actuator_restore(o->act);
    if (e < 0)
        snprintf(o->err, sizeof(o->err), "resetting clocks: %s", eerl_strerror(e));
    return e;
}

static void claim_key(eerl_device *dev, unsigned gpu, char *key)
{
    const char *b = eerl_device_backend(dev);
    char uuid[EERL_DEVICE_UUID_MAX];

    if ((!strcmp(b, "nvml") || !strcmp(b, "eerld")) &&
        eerl_device_uuid(dev, gpu, uuid, sizeof(uuid)) == 0 && uuid[0])
        snprintf(key, CLAIM_KEY_MAX, "%s", uuid);
    else
        snprintf(key, CLAIM_KEY_MAX, "%s:%p:%u", b, (void *)dev, gpu);
}

/* The live claim on key, or NULL. Called with claim_mu held. */
static const struct eerl__rt_owner *claimed_by(const char *key)
{
    const struct eerl__rt_owner *c;
    size_t k;

    for (c = claim_head; c; c = c->claim_next)
        for (k = 0; k < c->n_keys; k++)
            if (!strcmp(c->keys[k], key))
                return c;
    return NULL;
}

int eerl__rt_owner_claim(struct eerl__rt_owner *o, const unsigned *gpus, size_t n, char *why,
                         size_t why_len)
{
    const struct eerl__rt_owner *c = NULL;
    char name[CLAIM_KEY_MAX + 16];
    size_t k, bad = 0;
    long holder = 0;

    if (o->keys)
        return EERL_ESTATE;
    if (n == 0)
        return 0;
    o->keys = calloc(n, sizeof(*o->keys));
    if (!o->keys) {
        snprintf(why, why_len, "out of memory");
        return EERL_ENOMEM;
    }
    for (k = 0; k < n; k++)
        claim_key(o->dev, gpus[k], o->keys[k]);
    pthread_once(&claim_once, claim_init);
    pthread_mutex_lock(&claim_mu);
    for (k = 0; k < n && !c; k++)
        if ((c = claimed_by(o->keys[k])) != NULL) {
            bad = k;
            holder = (long)c->pid; /* c may be freed once the lock is dropped */
        }
    if (!c) {
        o->n_keys = n;
        o->pid = getpid();
        o->claim_next = claim_head;
        if (claim_head)
            claim_head->claim_prev = o;
        claim_head = o;
    }
    pthread_mutex_unlock(&claim_mu);
    if (!c)
        return 0;
    if (strchr(o->keys[bad], ':')) /* no UUID: a simulated GPU */
        snprintf(name, sizeof(name), "GPU %u", gpus[bad]);
    else
        snprintf(name, sizeof(name), "GPU %u (%s)", gpus[bad], o->keys[bad]);
    snprintf(why, why_len,
             "%s is already driven by another eerl session %s (pid %ld): close that session "
             "first, or open this one observe-only",
             name, holder == (long)getpid() ? "in this process" : "of the parent process", holder);
    free(o->keys);
    o->keys = NULL;
    return EERL_EBUSY;
}

static void claim_release(struct eerl__rt_owner *o)
{
    if (!o->keys)
        return;
    pthread_mutex_lock(&claim_mu);
    if (o->claim_prev)
        o->claim_prev->claim_next = o->claim_next;
    else if (claim_head == o)
        claim_head = o->claim_next;
    if (o->claim_next)
        o->claim_next->claim_prev = o->claim_prev;
    pthread_mutex_unlock(&claim_mu);
    free(o->keys);
    o->keys = NULL;
}

int eerl__rt_owner_new(eerl_device *dev, int observe_only, struct eerl__rt_owner **ret)
{
    struct eerl__rt_owner *o;
    unsigned n = 0;
    int e;

    e = eerl_device_count(dev, &n);
    if (e < 0)
        return e;
    o = calloc(1, sizeof(*o));
    if (!o)
        return EERL_ENOMEM;
    o->locked = calloc(n ? n : 1, sizeof(*o->locked));
    if (!o->locked) {
        free(o);
        return EERL_ENOMEM;
    }
    o->n_gpus = n;
    o->dev = dev;
    e = eerl_actuator_new(dev, observe_only, &o->act);
    if (e < 0) {
        free(o->locked);
        free(o);
        return e;
    }
    o->pub.ctx = o;
    o->pub.lock = owner_lock;
    o->pub.restore = owner_restore;
    o->pub.last_error = owner_last_error;
    *ret = o;
    return 0;
}

const eerl_rt_clock_owner *eerl__rt_owner_iface(struct eerl__rt_owner *o)
{
    return &o->pub;
}

eerl_actuator *eerl__rt_owner_actuator(struct eerl__rt_owner *o)
{
    return o->act;
}

void eerl__rt_owner_free(struct eerl__rt_owner *o)
{
    if (!o)
        return;
    eerl_actuator_free(o->act); /* restores whatever is still touched */
    claim_release(o);
    free(o->locked);
    free(o);
}

/* The in-process clock owner: the eerl_rt_clock_owner the session uses when none is given,
 * backed by one eerl_actuator on the session's device. It keeps which GPUs it locked at what, so
 * that handing one pool back to the governor (the actuator can only reset everything it touched)
 * is a restore followed by re-locking the GPUs that stay locked. eerld's client (src/agent/)
 * will implement the same three functions over its socket. Owns the actuator; borrows the
 * device. */
#include <stdlib.h>
#include <string.h>

#include "eerl/actuator.h"
#include "eerl/error.h"
#include "runtime/owner.h"

struct eerl__rt_owner {
    eerl_rt_clock_owner pub;
    eerl_actuator *act;
    unsigned n_gpus;
    unsigned *locked; /* per device GPU index: the clock it is locked at, 0 = governor */
    char err[256];
};

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
    free(o->locked);
    free(o);
}

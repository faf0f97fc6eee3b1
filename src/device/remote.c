/* The remote device backend: GPUs that the caller reads and describes (include/eerl/device.h,
 * eerl_device_open_remote). Owns its copy of each GPU's description and the last snapshot of
 * readings; borrows the caller's read callback and its context. It reads nothing by itself: one
 * snapshot (one callback call for every GPU) is the meter's read of an instant (op_read), and
 * serves every per-GPU read until the next one. The clock event reasons and the power limit are
 * the caller's to give: a reading without them (has_reasons 0, limit_mw 0) is "not read", never
 * "no slowdown". Sets no clock: a session over it sets them through the clock owner its caller
 * gives it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eerl/error.h"
#include "device/device_impl.h"

#define REMOTE_GPUS_LIMIT (1u << 20)

struct remote_gpu {
    char name[EERL_DEVICE_NAME_MAX];
    char uuid[EERL_DEVICE_UUID_MAX];
    unsigned *clocks; /* highest first */
    size_t n_clocks;
};

struct remote {
    unsigned n;
    eerl_device_read_fn read;
    void *ctx;
    struct remote_gpu *gpu;
    eerl_device_reading *snap;
    int have_snap; /* snap holds a snapshot (the snapshot's error, if any, is snap_err) */
    int snap_err;
};

static struct remote *rm(eerl_device *dev)
{
    return eerl__device_impl(dev);
}

static int op_count(eerl_device *dev, unsigned *ret_count)
{
    *ret_count = rm(dev)->n;
    return 0;
}

static int described(eerl_device *dev, unsigned gpu)
{
    if (rm(dev)->gpu[gpu].n_clocks)
        return 0;
    return eerl__device_fail(dev, EERL_ESTATE, "remote GPU %u was never described", gpu);
}

static int op_str(eerl_device *dev, unsigned gpu, const char *s, char *buf, size_t len)
{
    int e = described(dev, gpu);

    if (e < 0)
        return e;
    if (strlen(s) + 1 > len)
        return eerl__device_fail(dev, EERL_EOVERFLOW,
                                 "remote GPU %u: '%s' needs %zu bytes, got %zu", gpu, s,
                                 strlen(s) + 1, len);
    memcpy(buf, s, strlen(s) + 1);
    return 0;
}

static int op_name(eerl_device *dev, unsigned gpu, char *buf, size_t len)
{
    return op_str(dev, gpu, rm(dev)->gpu[gpu].name, buf, len);
}

static int op_uuid(eerl_device *dev, unsigned gpu, char *buf, size_t len)
{
    return op_str(dev, gpu, rm(dev)->gpu[gpu].uuid, buf, len);
}

static int op_clocks(eerl_device *dev, unsigned gpu, unsigned *mhz, size_t cap, size_t *ret_n)
{
    struct remote_gpu *g = &rm(dev)->gpu[gpu];
    int e = described(dev, gpu);

    if (e < 0)
        return e;
    if (g->n_clocks > cap)
        return eerl__device_fail(dev, EERL_EOVERFLOW, "remote GPU %u has %zu clocks, room for %zu",
                                 gpu, g->n_clocks, cap);
    memcpy(mhz, g->clocks, g->n_clocks * sizeof(*mhz));
    *ret_n = g->n_clocks;
    return 0;
}

static int snapshot(eerl_device *dev)
{
    struct remote *r = rm(dev);
    int e;

    memset(r->snap, 0, r->n * sizeof(*r->snap));
    e = r->read(r->ctx, r->snap, r->n);
    r->have_snap = 1;
    r->snap_err = e < 0 ? e : 0;
    if (e < 0)
        return eerl__device_fail(dev, e, "reading the remote GPUs: %s", eerl_strerror(e));
    return 0;
}

/* GPU gpu's reading of the last snapshot (one is taken if there is none yet). */
static int reading(eerl_device *dev, unsigned gpu, const eerl_device_reading **ret)
{
    struct remote *r = rm(dev);
    int e;

    if (!r->have_snap && (e = snapshot(dev)) < 0)
        return e;
    if (r->snap_err < 0)
        return eerl__device_fail(dev, r->snap_err, "reading remote GPU %u: %s", gpu,
                                 eerl_strerror(r->snap_err));
    if (r->snap[gpu].err < 0)
        return eerl__device_fail(dev, r->snap[gpu].err, "reading remote GPU %u: %s", gpu,
                                 eerl_strerror(r->snap[gpu].err));
    *ret = &r->snap[gpu];
    return 0;
}

static int op_sm_clock(eerl_device *dev, unsigned gpu, unsigned *ret_mhz)
{
    const eerl_device_reading *x = NULL;
    int e = reading(dev, gpu, &x);

    if (e == 0)
        *ret_mhz = x->sm_mhz;
    return e;
}

static int op_energy(eerl_device *dev, unsigned gpu, uint64_t *ret_mj)
{
    const eerl_device_reading *x = NULL;
    int e = reading(dev, gpu, &x);

    if (e == 0)
        *ret_mj = x->energy_mj;
    return e;
}

static int op_power(eerl_device *dev, unsigned gpu, unsigned *ret_mw)
{
    const eerl_device_reading *x = NULL;
    int e = reading(dev, gpu, &x);

    if (e == 0)
        *ret_mw = x->power_mw;
    return e;
}

static int op_reasons(eerl_device *dev, unsigned gpu, uint64_t *ret_mask)
{
    const eerl_device_reading *x = NULL;
    int e = reading(dev, gpu, &x);

    if (e == 0 && !x->has_reasons)
        return eerl__device_fail(
            dev, EERL_ENOTSUP, "remote GPU %u: the caller's read gave no clock event reasons", gpu);
    if (e == 0)
        *ret_mask = x->reasons;
    return e;
}

static int op_limit(eerl_device *dev, unsigned gpu, unsigned *ret_mw)
{
    const eerl_device_reading *x = NULL;
    int e = reading(dev, gpu, &x);

    if (e == 0 && x->limit_mw == 0)
        return eerl__device_fail(dev, EERL_ENOTSUP,
                                 "remote GPU %u: the caller's read gave no power limit", gpu);
    if (e == 0)
        *ret_mw = x->limit_mw;
    return e;
}

/* A meter's read of one instant: one snapshot (one callback call) for every GPU asked. */
static int op_read(eerl_device *dev, struct eerl__device_read *rd, size_t n)
{
    struct remote *r = rm(dev);
    size_t i;

    (void)snapshot(dev); /* a failure fails every part: said below */
    for (i = 0; i < n; i++) {
        struct eerl__device_read *x = &rd[i];
        const eerl_device_reading *g = &r->snap[x->gpu];
        int e = r->snap_err < 0 ? r->snap_err : g->err;

        if (!x->want)
            continue;
        if (e < 0) {
            if (g->err < 0)
                eerl__device_fail(dev, e, "reading remote GPU %u: %s", x->gpu, eerl_strerror(e));
            eerl__device_read_fail(x, ~0u, e);
            continue;
        }
        x->energy_r = x->power_r = x->clock_r = 0;
        x->energy_mj = g->energy_mj;
        x->power_mw = g->power_mw;
        x->power_instant = 0; /* the caller's power, whatever its kind */
        x->sm_mhz = g->sm_mhz;
        x->reasons_r = g->has_reasons ? 0 : EERL_ENOTSUP;
        x->reasons = g->reasons;
        x->limit_r = g->limit_mw ? 0 : EERL_ENOTSUP;
        x->limit_mw = g->limit_mw;
    }
    return 0;
}

static int op_lock(eerl_device *dev, unsigned gpu, unsigned min_mhz, unsigned max_mhz)
{
    return eerl__device_fail(dev, EERL_ENOTSUP,
                             "remote GPU %u (%u-%u MHz): a remote device sets no clock; the "
                             "session's clock owner sets them where the GPUs are",
                             gpu, min_mhz, max_mhz);
}

static int op_reset(eerl_device *dev, unsigned gpu)
{
    return eerl__device_fail(dev, EERL_ENOTSUP,
                             "remote GPU %u: a remote device resets no clock; the session's clock "
                             "owner does where the GPUs are",
                             gpu);
}

static void op_free(void *impl)
{
    struct remote *r = impl;
    unsigned i;

    if (!r)
        return;
    for (i = 0; i < r->n && r->gpu; i++)
        free(r->gpu[i].clocks);
    free(r->gpu);
    free(r->snap);
    free(r);
}

static const struct eerl__device_ops remote_ops = {
    .backend = "remote",
    .count = op_count,
    .name = op_name,
    .uuid = op_uuid,
    .supported_sm_clocks = op_clocks,
    .sm_clock = op_sm_clock,
    .energy_mj = op_energy,
    .power_mw = op_power,
    .throttle_reasons = op_reasons,
    .lock_sm_clocks = op_lock,
    .reset_sm_clocks = op_reset,
    .free = op_free,
    .power_limit_mw = op_limit,
    .read = op_read,
};

int eerl_device_open_remote(unsigned count, eerl_device_read_fn read, void *ctx,
                            eerl_device **ret_dev)
{
    struct remote *r;
    int e;

    if (!read || !ret_dev || count == 0 || count > REMOTE_GPUS_LIMIT)
        return EERL_EINVAL;
    r = calloc(1, sizeof(*r));
    if (!r)
        return EERL_ENOMEM;
    r->n = count;
    r->read = read;
    r->ctx = ctx;
    r->gpu = calloc(count, sizeof(*r->gpu));
    r->snap = calloc(count, sizeof(*r->snap));
    if (!r->gpu || !r->snap) {
        op_free(r);
        return EERL_ENOMEM;
    }
    e = eerl__device_new(&remote_ops, r, ret_dev);
    if (e < 0)
        op_free(r);
    return e;
}

static int cmp_desc(const void *a, const void *b)
{
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;

    return x < y ? 1 : x > y ? -1 : 0;
}

int eerl_device_remote_describe(eerl_device *dev, unsigned gpu, const char *name, const char *uuid,
                                const unsigned *clocks, size_t n_clocks)
{
    struct remote_gpu *g;
    unsigned *c;

    if (!dev || strcmp(eerl_device_backend(dev), "remote") != 0 || !name || !uuid || !clocks)
        return EERL_EINVAL;
    if (gpu >= rm(dev)->n)
        return eerl__device_fail(dev, EERL_ENODEV, "remote GPU %u does not exist (%u GPUs: 0-%u)",
                                 gpu, rm(dev)->n, rm(dev)->n - 1);
    if (n_clocks == 0 || n_clocks > EERL_DEVICE_CLOCKS_MAX)
        return eerl__device_fail(dev, EERL_EINVAL, "remote GPU %u: %zu clocks (1 to %d)", gpu,
                                 n_clocks, EERL_DEVICE_CLOCKS_MAX);
    if (strlen(name) >= EERL_DEVICE_NAME_MAX || strlen(uuid) >= EERL_DEVICE_UUID_MAX)
        return eerl__device_fail(dev, EERL_EOVERFLOW,
                                 "remote GPU %u: name '%s' or UUID '%s' too long", gpu, name, uuid);
    c = malloc(n_clocks * sizeof(*c));
    if (!c)
        return EERL_ENOMEM;
    memcpy(c, clocks, n_clocks * sizeof(*c));
    qsort(c, n_clocks, sizeof(*c), cmp_desc);
    g = &rm(dev)->gpu[gpu];
    free(g->clocks);
    g->clocks = c;
    g->n_clocks = n_clocks;
    snprintf(g->name, sizeof(g->name), "%s", name);
    snprintf(g->uuid, sizeof(g->uuid), "%s", uuid);
    return 0;
}

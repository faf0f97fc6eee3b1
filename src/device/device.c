/* Owns eerl_device: dispatches each call to its backend's ops, validates arguments common to all
 * backends (index range, buffers) and keeps the handle's last-error text. Knows no backend. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eerl/error.h"
#include "device/device_impl.h"

struct eerl_device {
    const struct eerl__device_ops *ops;
    void *impl;
    char last_error[256];
};

int eerl__device_new(const struct eerl__device_ops *ops, void *impl, eerl_device **ret_dev)
{
    eerl_device *dev;

    if (!ops || !ret_dev)
        return EERL_EINVAL;
    dev = calloc(1, sizeof(*dev));
    if (!dev)
        return EERL_ENOMEM;
    dev->ops = ops;
    dev->impl = impl;
    *ret_dev = dev;
    return 0;
}

void *eerl__device_impl(eerl_device *dev)
{
    return dev ? dev->impl : NULL;
}

int eerl__device_fail(eerl_device *dev, int err, const char *fmt, ...)
{
    va_list ap;

    if (dev) {
        va_start(ap, fmt);
        vsnprintf(dev->last_error, sizeof(dev->last_error), fmt, ap);
        va_end(ap);
    }
    return err;
}

void eerl_device_free(eerl_device *dev)
{
    if (!dev)
        return;
    if (dev->ops->free)
        dev->ops->free(dev->impl);
    free(dev);
}

const char *eerl_device_backend(const eerl_device *dev)
{
    return dev ? dev->ops->backend : "none";
}

const char *eerl_device_last_error(const eerl_device *dev)
{
    return dev ? dev->last_error : "";
}

int eerl_device_count(eerl_device *dev, unsigned *ret_count)
{
    if (!dev || !ret_count)
        return EERL_EINVAL;
    return dev->ops->count(dev, ret_count);
}

/* Every per-GPU call checks the index here, so backends see only valid indices and every backend
 * reports a bad index the same way. */
static int check_gpu(eerl_device *dev, unsigned gpu)
{
    unsigned n = 0;
    int r;

    if (!dev)
        return EERL_EINVAL;
    r = dev->ops->count(dev, &n);
    if (r < 0)
        return r;
    if (gpu >= n)
        return eerl__device_fail(dev, EERL_ENODEV, "GPU index %u does not exist (%u GPU%s: 0-%u)",
                                 gpu, n, n == 1 ? "" : "s", n ? n - 1 : 0);
    return 0;
}

#define EERL__GPU_CALL(dev, gpu, call)                                                             \
    do {                                                                                           \
        int r_ = check_gpu((dev), (gpu));                                                          \
        if (r_ < 0)                                                                                \
            return r_;                                                                             \
        return (call);                                                                             \
    } while (0)

int eerl_device_name(eerl_device *dev, unsigned gpu, char *buf, size_t len)
{
    if (!buf || len == 0)
        return EERL_EINVAL;
    EERL__GPU_CALL(dev, gpu, dev->ops->name(dev, gpu, buf, len));
}

int eerl_device_uuid(eerl_device *dev, unsigned gpu, char *buf, size_t len)
{
    if (!buf || len == 0)
        return EERL_EINVAL;
    EERL__GPU_CALL(dev, gpu, dev->ops->uuid(dev, gpu, buf, len));
}

int eerl_device_supported_sm_clocks(eerl_device *dev, unsigned gpu, unsigned *mhz, size_t cap,
                                    size_t *ret_n)
{
    if (!mhz || !ret_n || cap == 0)
        return EERL_EINVAL;
    EERL__GPU_CALL(dev, gpu, dev->ops->supported_sm_clocks(dev, gpu, mhz, cap, ret_n));
}

int eerl_device_sm_clock(eerl_device *dev, unsigned gpu, unsigned *ret_mhz)
{
    if (!ret_mhz)
        return EERL_EINVAL;
    EERL__GPU_CALL(dev, gpu, dev->ops->sm_clock(dev, gpu, ret_mhz));
}

int eerl_device_energy_mj(eerl_device *dev, unsigned gpu, uint64_t *ret_mj)
{
    if (!ret_mj)
        return EERL_EINVAL;
    EERL__GPU_CALL(dev, gpu, dev->ops->energy_mj(dev, gpu, ret_mj));
}

int eerl_device_power_mw(eerl_device *dev, unsigned gpu, unsigned *ret_mw)
{
    if (!ret_mw)
        return EERL_EINVAL;
    EERL__GPU_CALL(dev, gpu, dev->ops->power_mw(dev, gpu, ret_mw));
}

int eerl_device_power_instant_mw(eerl_device *dev, unsigned gpu, unsigned *ret_mw)
{
    if (!ret_mw)
        return EERL_EINVAL;
    if (dev && !dev->ops->power_instant_mw)
        return EERL_ENOTSUP;
    EERL__GPU_CALL(dev, gpu, dev->ops->power_instant_mw(dev, gpu, ret_mw));
}

int eerl_device_driver_version(eerl_device *dev, char *buf, size_t len)
{
    if (!dev || !buf || len == 0)
        return EERL_EINVAL;
    if (!dev->ops->driver_version)
        return EERL_ENOTSUP;
    return dev->ops->driver_version(dev, buf, len);
}

int eerl_device_throttle_reasons(eerl_device *dev, unsigned gpu, uint64_t *ret_mask)
{
    if (!ret_mask)
        return EERL_EINVAL;
    if (dev && !dev->ops->throttle_reasons)
        return EERL_ENOTSUP;
    EERL__GPU_CALL(dev, gpu, dev->ops->throttle_reasons(dev, gpu, ret_mask));
}

int eerl_device_power_limit_mw(eerl_device *dev, unsigned gpu, unsigned *ret_mw)
{
    if (!ret_mw)
        return EERL_EINVAL;
    if (dev && !dev->ops->power_limit_mw)
        return EERL_ENOTSUP;
    EERL__GPU_CALL(dev, gpu, dev->ops->power_limit_mw(dev, gpu, ret_mw));
}

int eerl_device_lock_sm_clocks(eerl_device *dev, unsigned gpu, unsigned min_mhz, unsigned max_mhz)
{
    if (min_mhz > max_mhz)
        return eerl__device_fail(dev, EERL_EINVAL, "clock range %u-%u MHz has min above max",
                                 min_mhz, max_mhz);
    EERL__GPU_CALL(dev, gpu, dev->ops->lock_sm_clocks(dev, gpu, min_mhz, max_mhz));
}

int eerl_device_reset_sm_clocks(eerl_device *dev, unsigned gpu)
{
    EERL__GPU_CALL(dev, gpu, dev->ops->reset_sm_clocks(dev, gpu));
}

/* ---- one read of several parts and GPUs ------------------------------------------------- */

#define POWER_PARTS (EERL__READ_POWER | EERL__READ_POWER_INSTANT)

void eerl__device_read_fail(struct eerl__device_read *x, unsigned parts, int err)
{
    unsigned w = x->want & parts;

    if (w & EERL__READ_ENERGY)
        x->energy_r = err;
    if (w & POWER_PARTS)
        x->power_r = err;
    if (w & EERL__READ_CLOCK)
        x->clock_r = err;
    if (w & EERL__READ_REASONS)
        x->reasons_r = err;
    if (w & EERL__READ_LIMIT)
        x->limit_r = err;
}

/* Power, instantaneous where asked and the backend has it, else averaged. */
static void read_power(eerl_device *dev, struct eerl__device_read *x)
{
    if (x->want & EERL__READ_POWER_INSTANT) {
        x->power_r = eerl_device_power_instant_mw(dev, x->gpu, &x->power_mw);
        if (x->power_r != EERL_ENOTSUP) {
            x->power_instant = x->power_r == 0 ? 1 : -1;
            return;
        }
        x->power_instant = 0;
    }
    x->power_r = eerl_device_power_mw(dev, x->gpu, &x->power_mw);
}

/* Did the part just read (r) find the GPU lost? Then the parts after it (later: above bit) say
 * so without being read. */
static int lost_after(struct eerl__device_read *x, int r, unsigned bit)
{
    if (r != EERL_EGPULOST)
        return 0;
    eerl__device_read_fail(x, ~((bit << 1) - 1), EERL_EGPULOST);
    return 1;
}

/* One GPU's parts through the backend's ops, in the order of the EERL__READ_* bits. */
static void read_by_ops(eerl_device *dev, struct eerl__device_read *x)
{
    if ((x->want & EERL__READ_ENERGY) &&
        lost_after(x, x->energy_r = eerl_device_energy_mj(dev, x->gpu, &x->energy_mj),
                   EERL__READ_ENERGY))
        return;
    if (x->want & POWER_PARTS) {
        read_power(dev, x);
        if (lost_after(x, x->power_r, EERL__READ_POWER_INSTANT))
            return;
    }
    if ((x->want & EERL__READ_CLOCK) &&
        lost_after(x, x->clock_r = eerl_device_sm_clock(dev, x->gpu, &x->sm_mhz), EERL__READ_CLOCK))
        return;
    if ((x->want & EERL__READ_REASONS) &&
        lost_after(x, x->reasons_r = eerl_device_throttle_reasons(dev, x->gpu, &x->reasons),
                   EERL__READ_REASONS))
        return;
    if (x->want & EERL__READ_LIMIT)
        x->limit_r = eerl_device_power_limit_mw(dev, x->gpu, &x->limit_mw);
}

int eerl__device_read(eerl_device *dev, struct eerl__device_read *rd, size_t n)
{
    size_t i;
    int r;

    if (!dev || (!rd && n))
        return EERL_EINVAL;
    for (i = 0; i < n; i++) {
        struct eerl__device_read *x = &rd[i];

        x->energy_r = x->power_r = x->clock_r = x->reasons_r = x->limit_r = EERL_ENOTSUP;
        x->power_instant = -1;
        if ((r = check_gpu(dev, x->gpu)) < 0) {
            eerl__device_read_fail(x, ~0u, r);
            x->want = 0; /* read nothing of it */
        }
    }
    if (dev->ops->read)
        return dev->ops->read(dev, rd, n);
    for (i = 0; i < n; i++)
        read_by_ops(dev, &rd[i]);
    return 0;
}

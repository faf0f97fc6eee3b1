/* Device ops over a twin. Reads go to the twin's timeline at its observation time: energy in
 * millijoules at the last 100 ms tick (a per-GPU starting value, as NVML counts since driver
 * load), power and clock of the segment running then. A clock lock or reset changes the clock
 * request of the GPU's pool from the next update on (EE-RL switches in the refit pause);
 * colocated GPUs share one pool, so a lock there sets both phases. */
#include <stdio.h>
#include <stdlib.h>

#include "eerl/error.h"
#include "device/device_impl.h"
#include "twin/run.h"
#include "twin/twin_device.h"

static eerl_twin *tw(eerl_device *dev)
{
    return eerl__device_impl(dev);
}

static int op_count(eerl_device *dev, unsigned *ret_count)
{
    *ret_count = eerl__twin_gpu_count(tw(dev));
    return 0;
}

static int op_name(eerl_device *dev, unsigned gpu, char *buf, size_t len)
{
    eerl_twin *t = tw(dev);
    (void)gpu;
    snprintf(buf, len, "twin %s (%s pool)", t->p.gpu_name,
             eerl__twin_pool_of(t, gpu) ? "training" : "generation");
    return 0;
}

static int op_uuid(eerl_device *dev, unsigned gpu, char *buf, size_t len)
{
    eerl_twin *t = tw(dev);
    snprintf(buf, len, "TWIN-%s-%016llx-%04u", t->p.gpu_name, (unsigned long long)t->cfg.seed, gpu);
    return 0;
}

static int op_clocks(eerl_device *dev, unsigned gpu, unsigned *mhz, size_t cap, size_t *ret_n)
{
    (void)gpu;
    return eerl_twin_preset_clocks(&tw(dev)->p, mhz, cap, ret_n);
}

static int op_sm_clock(eerl_device *dev, unsigned gpu, unsigned *ret_mhz)
{
    struct eerl__obs o;
    eerl__twin_observe(tw(dev), gpu, &o);
    *ret_mhz = (unsigned)(o.mhz + 0.5);
    return 0;
}

static int op_energy(eerl_device *dev, unsigned gpu, uint64_t *ret_mj)
{
    struct eerl__obs o;
    eerl__twin_observe(tw(dev), gpu, &o);
    *ret_mj = 1000000ull * (gpu + 1) + (uint64_t)(o.joules * 1000.0);
    return 0;
}

static int op_power(eerl_device *dev, unsigned gpu, unsigned *ret_mw)
{
    struct eerl__obs o;
    eerl__twin_observe(tw(dev), gpu, &o);
    *ret_mw = (unsigned)(o.watts * 1000.0 + 0.5);
    return 0;
}

static int op_throttle(eerl_device *dev, unsigned gpu, uint64_t *ret_mask)
{
    struct eerl__obs o;
    uint64_t m = 0;

    eerl__twin_observe(tw(dev), gpu, &o);
    if (o.flags & EERL__SEG_CAPPED)
        m |= EERL_THROTTLE_SW_POWER_CAP;
    if (o.flags & EERL__SEG_IDLE)
        m |= EERL_THROTTLE_GPU_IDLE;
    *ret_mask = m;
    return 0;
}

static int set_pool(eerl_device *dev, unsigned gpu, unsigned mhz)
{
    eerl_twin *t = tw(dev);
    unsigned g = t->req_gen, tr = t->req_train;
    int e;

    if (t->cfg.mode == EERL_MODE_COLOCATED)
        g = tr = mhz;
    else if (eerl__twin_pool_of(t, gpu) == 0)
        g = mhz;
    else
        tr = mhz;
    e = eerl_twin_set_clocks(t, g, tr);
    if (e < 0)
        return eerl__device_fail(dev, e, "twin GPU %u: %u MHz is not a supported clock", gpu, mhz);
    return 0;
}

static int op_lock(eerl_device *dev, unsigned gpu, unsigned min_mhz, unsigned max_mhz)
{
    (void)min_mhz;
    return set_pool(dev, gpu, max_mhz);
}

static int op_reset(eerl_device *dev, unsigned gpu)
{
    return set_pool(dev, gpu, EERL_TWIN_GOV);
}

static void op_free(void *impl)
{
    eerl_twin *t = impl;
    if (t)
        t->device_open = 0;
}

static const struct eerl__device_ops twin_ops = {
    .backend = "twin",
    .count = op_count,
    .name = op_name,
    .uuid = op_uuid,
    .supported_sm_clocks = op_clocks,
    .sm_clock = op_sm_clock,
    .energy_mj = op_energy,
    .power_mw = op_power,
    .throttle_reasons = op_throttle,
    .lock_sm_clocks = op_lock,
    .reset_sm_clocks = op_reset,
    .free = op_free,
};

int eerl_twin_device(eerl_twin *twin, eerl_device **ret_dev)
{
    eerl_device *dev = NULL;
    int e;

    if (!twin || !ret_dev)
        return EERL_EINVAL;
    e = eerl__device_new(&twin_ops, twin, &dev);
    if (e < 0)
        return e;
    twin->device_open = 1;
    *ret_dev = dev;
    return 0;
}

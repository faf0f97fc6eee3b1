/* N idle twin GPUs with independent clock locks (see idle_device.h). Unlike the twin's device
 * view (twin_device.c), which maps a lock onto a pool of a simulated run, each GPU here keeps
 * its own lock, so a daemon can lease GPUs one by one and tests can see exactly which GPU was
 * reset. Not thread-safe: one owner (eerld's event loop) calls it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "eerl/error.h"
#include "eerl/tools/twin.h"
#include "device/device_impl.h"
#include "twin/presets.h"

struct idle_gpu {
    unsigned lock_min, lock_max; /* 0, 0: governor */
    double mj;                   /* energy so far, millijoules */
    double t_last;               /* seconds, CLOCK_MONOTONIC, of the last integration */
};

struct idle_node {
    char gpu_name[16];
    unsigned n;
    unsigned clocks[EERL_DEVICE_CLOCKS_MAX];
    size_t n_clocks;
    unsigned fmax;
    double p_static_w, p_dyn_w;
    struct idle_gpu *g;
};

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static struct idle_node *node(eerl_device *dev)
{
    return eerl__device_impl(dev);
}

static unsigned clock_of(const struct idle_node *s, unsigned gpu)
{
    return s->g[gpu].lock_max ? s->g[gpu].lock_max : s->fmax;
}

static double watts_of(const struct idle_node *s, unsigned gpu)
{
    return s->p_static_w + s->p_dyn_w * (double)clock_of(s, gpu) / (double)s->fmax;
}

/* Brings gpu's energy up to now at its current draw (called before any change of draw). */
static void integrate(struct idle_node *s, unsigned gpu)
{
    double t = now_s();

    s->g[gpu].mj += watts_of(s, gpu) * (t - s->g[gpu].t_last) * 1000.0;
    s->g[gpu].t_last = t;
}

static int op_count(eerl_device *dev, unsigned *ret_count)
{
    *ret_count = node(dev)->n;
    return 0;
}

static int op_name(eerl_device *dev, unsigned gpu, char *buf, size_t len)
{
    (void)gpu;
    if ((size_t)snprintf(buf, len, "twin %s (idle)", node(dev)->gpu_name) >= len)
        return EERL_EOVERFLOW;
    return 0;
}

static int op_uuid(eerl_device *dev, unsigned gpu, char *buf, size_t len)
{
    if ((size_t)snprintf(buf, len, "TWIN-%s-idle-%04u", node(dev)->gpu_name, gpu) >= len)
        return EERL_EOVERFLOW;
    return 0;
}

static int op_clocks(eerl_device *dev, unsigned gpu, unsigned *mhz, size_t cap, size_t *ret_n)
{
    struct idle_node *s = node(dev);

    (void)gpu;
    if (s->n_clocks > cap)
        return EERL_EOVERFLOW;
    memcpy(mhz, s->clocks, s->n_clocks * sizeof(*mhz));
    *ret_n = s->n_clocks;
    return 0;
}

static int op_sm_clock(eerl_device *dev, unsigned gpu, unsigned *ret_mhz)
{
    *ret_mhz = clock_of(node(dev), gpu);
    return 0;
}

static int op_energy(eerl_device *dev, unsigned gpu, uint64_t *ret_mj)
{
    struct idle_node *s = node(dev);

    integrate(s, gpu);
    *ret_mj = 1000000ull * (gpu + 1) + (uint64_t)s->g[gpu].mj;
    return 0;
}

static int op_power(eerl_device *dev, unsigned gpu, unsigned *ret_mw)
{
    *ret_mw = (unsigned)(watts_of(node(dev), gpu) * 1000.0 + 0.5);
    return 0;
}

static int supported(const struct idle_node *s, unsigned mhz)
{
    size_t i;

    for (i = 0; i < s->n_clocks; i++)
        if (s->clocks[i] == mhz)
            return 1;
    return 0;
}

static int op_lock(eerl_device *dev, unsigned gpu, unsigned min_mhz, unsigned max_mhz)
{
    struct idle_node *s = node(dev);

    /* Strict like NVML: the caller (the actuator) snaps before it locks. */
    if (!supported(s, min_mhz) || !supported(s, max_mhz))
        return eerl__device_fail(dev, EERL_ERANGE,
                                 "twin GPU %u: %u-%u MHz is not a pair of supported clocks", gpu,
                                 min_mhz, max_mhz);
    integrate(s, gpu);
    s->g[gpu].lock_min = min_mhz;
    s->g[gpu].lock_max = max_mhz;
    return 0;
}

static int op_reset(eerl_device *dev, unsigned gpu)
{
    struct idle_node *s = node(dev);

    integrate(s, gpu);
    s->g[gpu].lock_min = s->g[gpu].lock_max = 0;
    return 0;
}

static void op_free(void *impl)
{
    struct idle_node *s = impl;

    if (s)
        free(s->g);
    free(s);
}

static const struct eerl__device_ops idle_ops = {
    .backend = "twin",
    .count = op_count,
    .name = op_name,
    .uuid = op_uuid,
    .supported_sm_clocks = op_clocks,
    .sm_clock = op_sm_clock,
    .energy_mj = op_energy,
    .power_mw = op_power,
    .throttle_reasons = NULL,
    .lock_sm_clocks = op_lock,
    .reset_sm_clocks = op_reset,
    .free = op_free,
};

int eerl_twin_idle_device(const char *gpu, unsigned n, eerl_device **ret_dev)
{
    static const char *const models[] = {"qwen3-30b-a3b", "nemotron-super-49b"};
    eerl_twin_preset *p = NULL;
    struct idle_node *s = NULL;
    eerl_device *dev = NULL;
    double t;
    size_t i;
    int e = EERL_ENOENT;

    if (!gpu || !ret_dev || n == 0 || n > 1024)
        return EERL_EINVAL;
    for (i = 0; i < sizeof(models) / sizeof(models[0]) && !p; i++)
        e = eerl_twin_preset_new(models[i], gpu, NULL, &p);
    if (!p)
        return e;
    e = EERL_ENOMEM;
    s = calloc(1, sizeof(*s));
    if (!s || !(s->g = calloc(n, sizeof(*s->g))))
        goto fail;
    e = eerl_twin_preset_clocks(p, s->clocks, EERL_DEVICE_CLOCKS_MAX, &s->n_clocks);
    if (e < 0)
        goto fail;
    snprintf(s->gpu_name, sizeof(s->gpu_name), "%s", p->gpu_name);
    s->n = n;
    s->fmax = p->gpu.fmax ? p->gpu.fmax : s->clocks[0];
    s->p_static_w = p->gpu.p_static_w;
    s->p_dyn_w = p->gpu.p_idle_dyn_w;
    t = now_s();
    for (i = 0; i < n; i++)
        s->g[i].t_last = t;
    e = eerl__device_new(&idle_ops, s, &dev);
    if (e < 0)
        goto fail;
    eerl_twin_preset_free(p);
    *ret_dev = dev;
    return 0;
fail:
    op_free(s);
    eerl_twin_preset_free(p);
    return e;
}

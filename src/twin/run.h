/* One simulated run (struct eerl_twin): virtual time, the workload streams, the in-flight carry,
 * requested clocks and the per-pool power timeline the device view reads. Shared by run.c (which
 * owns it) and twin_device.c (which only reads it, through eerl__twin_observe). */
#ifndef EERL_TWIN_RUN_H
#define EERL_TWIN_RUN_H

#include <stddef.h>
#include <stdint.h>

#include "eerl/tools/twin.h"
#include "twin/modes/cluster.h"
#include "twin/presets.h"
#include "twin/workload.h"

struct eerl__tl_seg {
    double t0, t1, w, mhz, e0; /* e0: joules per GPU of this pool at t0 */
    unsigned flags;
};

struct eerl__timeline {
    struct eerl__tl_seg *s;
    size_t n, cap;
};

struct eerl_twin {
    eerl_twin_preset p;
    struct eerl_twin_config cfg;
    struct eerl__wl wl;
    double time_scale, power_scale;
    double jit_gen, jit_train;  /* this seed's pool speed factors (asynchronous modes; 0: none),
                                 * keyed by the seed alone: matched across its settings */
    struct eerl__rng noise_rng; /* per-update noise (cfg.noise), keyed by seed and run id */
    double noise_xg, noise_xt;  /* its AR(1) states: generation, log-prob + training */
    double now, obs_t;
    unsigned next_update;
    unsigned req_gen, req_train;
    struct eerl__wl_batch prev;
    int have_prev;
    double spill;
    struct eerl__timeline tl[2]; /* generation pool (colocated: all GPUs), training pool */
    int device_open;
    /* Every GPU of a pool shows the same at one time: each pool's observation, computed at its
     * first read after obs_t or a timeline changed, so a read of 1024 GPUs searches twice. */
    struct eerl__obs {
        double joules, watts, mhz;
        unsigned flags;
    } obs[2];
    int obs_valid[2];
};

/* What GPU gpu (pool-major numbering) shows at the observation time. */
void eerl__twin_observe(eerl_twin *t, unsigned gpu, struct eerl__obs *ret);
unsigned eerl__twin_gpu_count(const eerl_twin *t);
/* Which pool a GPU index belongs to. */
int eerl__twin_pool_of(const eerl_twin *t, unsigned gpu);

#endif

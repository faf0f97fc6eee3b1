/* The four execution modes: given one update's batches, the requested clocks and the preset,
 * lays out what each GPU pool does and at what power (a short list of segments per pool) and
 * the update's time, energy and arrivals. Pure function: the run state (virtual time, in-flight
 * carry, timeline) belongs to run.c; this module never keeps state between calls. */
#ifndef EERL_TWIN_CLUSTER_H
#define EERL_TWIN_CLUSTER_H

#include "eerl/tools/twin.h"
#include "twin/presets.h"
#include "twin/workload.h"

#define EERL__SEG_MAX 10
#define EERL__SEG_CAPPED 0x1u
#define EERL__SEG_IDLE 0x2u

/* One stretch of constant power on every GPU of a pool; segments of a pool are consecutive. */
struct eerl__seg {
    double dt;      /* seconds */
    double w;       /* watts per GPU */
    double mhz;     /* clock the GPUs show */
    unsigned phase; /* eerl_phase */
    unsigned flags;
};

struct eerl__pool_plan {
    unsigned n_gpus;
    unsigned n_segs;
    struct eerl__seg seg[EERL__SEG_MAX];
};

struct eerl__cluster_in {
    eerl_mode mode;
    unsigned n_gen, n_train;
    struct eerl__wl_batch gen_batch;   /* generated during this update */
    struct eerl__wl_batch train_batch; /* consumed by training this update */
    double spill_in;             /* in-flight: tokens of the previous batch still to generate */
    unsigned req_gen, req_train; /* requested clocks, 0 = governor */
    int first;                   /* first update: asynchronous modes have nothing to overlap yet */
    double time_scale;           /* run-to-run node speed factor (1 = nominal) */
    double power_scale;          /* its power side: stalls draw less (0 means 1) */
    /* Asynchronous modes: the run's speed factor of each pool's work (sampled runs; 0 means
     * 1). An expected-value evaluation leaves them 0 and sets `expected`, so the rendezvous
     * takes E[max] over their spread (physics.h) instead of the max of two numbers. */
    double gen_jit, train_jit;
    int expected;
    /* Per-update noise (presets.h struct eerl__noise), sampled runs that ask for it: this
     * update's standard-normal deviations of generation and of log-prob + training (AR(1) over
     * updates, run.c), scaled here by the phase's spread at its time. noise 0: none. */
    int noise;
    double noise_zg, noise_zt;
};

struct eerl__cluster_out {
    double duration, energy_j;
    double phase_s[EERL_PHASE_COUNT], phase_j[EERL_PHASE_COUNT];
    double gen_arrival, train_arrival;
    double crossing_tokens, spill_out;
    double gen_eff_mhz, train_eff_mhz;
    unsigned policy_age;
    struct eerl__pool_plan pool[2]; /* [0] generation (colocated: all GPUs), [1] training */
};

void eerl__cluster_update(const eerl_twin_preset *p, const struct eerl__cluster_in *in,
                          struct eerl__cluster_out *out);

#endif

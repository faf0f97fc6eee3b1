/* Clock physics of one GPU model: the supported SM clocks, power vs clock (idle + static +
 * dynamic with a voltage-frequency curve), the power cap that throttles the governor and locked
 * clocks alike, phase time vs clock (a roofline: a clock-insensitive part and a part that turns
 * compute-bound as the clock falls), observed-clock droop and clock-switch latency.
 * Pure functions of their arguments; knows nothing of workloads or execution modes. */
#ifndef EERL_TWIN_PHYSICS_H
#define EERL_TWIN_PHYSICS_H

#include <stddef.h>

#define EERL__TWIN_MAX_CLOCKS 512
/* Upper bound on one clock switch / wake from the idle clock on the critical path (seconds): a
 * lock or a wake from 345 MHz is a DVFS transition of milliseconds; 50 ms is generous. */
#define EERL__TWIN_SWITCH_MAX_S 0.05

struct eerl__gpu {
    char name[16];
    unsigned fmax; /* governor peak clock, MHz */
    unsigned n_clocks;
    unsigned clocks[EERL__TWIN_MAX_CLOCKS]; /* supported, highest first */
    double gov_mhz;      /* sustained clock under load (power/thermal management); locks above it
                          * are held down to it too */
    double cap_w;        /* power limit */
    double p_static_w;   /* leakage + fixed draw of an idle GPU */
    double p_idle_dyn_w; /* clock-dependent idle draw at fmax */
    double v_floor;      /* relative voltage at and below f_knee */
    double f_knee;       /* MHz below which voltage stays at v_floor */
    double droop_mhz;    /* observed clock below a locked request */
    double switch_s;     /* clock-switch / wake latency, seconds (<= EERL__TWIN_SWITCH_MAX_S) */
    double idle_clock;   /* MHz the controller parks waiting pools at */
    /* Optional in the parameter file (defaults in parentheses keep older files valid): */
    double v_gamma;  /* shape of V(f) above f_knee: linear (1), convex (> 1) */
    double p_wait_w; /* extra draw of a GPU waiting inside the job (a pool blocked on the other
                      * pool, host work) at fmax, following the clock like dynamic power (0) */
    double jitter;   /* relative spread of each pool's speed between seeds (placement);
                      * smooths the rendezvous max() of the asynchronous modes (0) */
};

/* Physics of one phase on one (model, GPU). */
struct eerl__phase_phys {
    double b;  /* clock-insensitive fraction of the phase time at fmax (communication, host) */
    double r;  /* compute-to-memory time ratio at fmax of the rest (roofline) */
    double pw; /* dynamic power of the phase at fmax and nominal voltage, W */
    double pm; /* clock-independent active power (memory and I/O traffic), W */
};

/* Relative dynamic power V(f)^2 f / (V(fmax)^2 fmax). */
double eerl__gpu_dyn(const struct eerl__gpu *g, double f);
/* Power of an idle GPU at clock f. */
double eerl__gpu_idle_w(const struct eerl__gpu *g, double f);
/* Power of a GPU waiting inside the job (blocked on the other pool or on host work) at clock f:
 * idle plus p_wait_w scaled like dynamic power. */
double eerl__gpu_wait_w(const struct eerl__gpu *g, double f);
/* Expected max(A, B) of two independent work times with means a, b and relative spread
 * g->jitter (Clark's formula); max(a, b) when jitter is 0. */
double eerl__gpu_rendezvous(const struct eerl__gpu *g, double a, double b);
/* Power of a GPU running phase ph at clock f (no cap applied). */
double eerl__gpu_active_w(const struct eerl__gpu *g, const struct eerl__phase_phys *ph, double f);
/* Clock a phase actually runs at for a request (0 = governor): the governor runs at gov_mhz, a
 * lock at the request less droop (at most gov_mhz), then lowered until power fits the cap.
 * *ret_capped is set when the cap binds. */
double eerl__gpu_eff_clock(const struct eerl__gpu *g, const struct eerl__phase_phys *ph,
                           unsigned req_mhz, int *ret_capped);
/* Phase time at clock f relative to its time at fmax. */
double eerl__phase_time_factor(const struct eerl__gpu *g, const struct eerl__phase_phys *ph,
                               double f);
/* 1 if mhz is a supported clock. */
int eerl__gpu_clock_ok(const struct eerl__gpu *g, unsigned mhz);
/* Fills clocks[] from "top, then hi..lo in step" (GB200 reports 2062 then 5 MHz steps). */
int eerl__gpu_set_clocks(struct eerl__gpu *g, unsigned top, unsigned hi, unsigned lo,
                         unsigned step);

#endif

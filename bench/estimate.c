/* bench_estimate: what the run's own estimate (core/estimate.c) costs. A session does it once per
 * update, at eerl_rt_update_end, never at a phase boundary (eerl_rt_phase_begin/end do not touch
 * it): this prints the time of one update's step (prediction, and for a governor update the refit
 * with its leave-one-out scatter over the 32-update window, the worst case) and of the
 * aggregator's add. Synthetic colocated observations; figures only, never a failure. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/estimate.h"

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void make_obs(unsigned k, eerl_obs *o)
{
    double g = 9e5 * (1 + 0.05 * ((k * 7919) % 13) / 13.0), n = 0.95 * g;

    memset(o, 0, sizeof(*o));
    o->update = k;
    o->gen_tokens = g;
    o->valid_tokens = n;
    o->longest_tokens = 4000 + (k * 31) % 96;
    o->phase_time_s[EERL_PHASE_GEN] = 80e-6 * g * (1 + 0.01 * ((k * 17) % 5));
    o->phase_time_s[EERL_PHASE_TRAIN] = 50e-6 * n;
    o->phase_energy_j[EERL_PHASE_GEN] = 4e3 * o->phase_time_s[EERL_PHASE_GEN];
    o->phase_energy_j[EERL_PHASE_TRAIN] = 9e3 * o->phase_time_s[EERL_PHASE_TRAIN];
    o->time_s = o->phase_time_s[EERL_PHASE_GEN] + o->phase_time_s[EERL_PHASE_TRAIN] + 3;
    o->energy_j = o->phase_energy_j[EERL_PHASE_GEN] + o->phase_energy_j[EERL_PHASE_TRAIN] + 1e4;
}

int main(void)
{
    struct eerl__est est;
    struct eerl__est_acc acc;
    struct eerl__est_upd u;
    eerl_estimate r;
    eerl_obs o;
    unsigned k, n = 2000;
    double t0, t1;

    if (eerl__est_init(&est, EERL_MODE_COLOCATED) < 0)
        return 1;
    eerl__est_acc_init(&acc);
    t0 = now_s();
    for (k = 1; k <= n; k++) {
        make_obs(k, &o); /* every update at the governor: a refit each time, the worst case */
        eerl__est_step(&est, &o, 1, k == 16, &u);
        eerl__est_acc_add(&acc, &u);
    }
    t1 = now_s();
    eerl__est_acc_result(&acc, &r);
    printf("bench_estimate: %u governor updates (a refit with leave-one-out over %d each): "
           "%.1f us per update end\n",
           n, EERL__EST_WINDOW, 1e6 * (t1 - t0) / n);
    printf("  phase boundaries: 0 (the estimate runs at the update's end only); "
           "estimate over the run: saving %.3f%% [%.3f, %.3f], %u judged\n",
           r.saving_pct, r.saving_ci_pct[0], r.saving_ci_pct[1], r.judged_updates);
    eerl__est_free(&est);
    return 0;
}

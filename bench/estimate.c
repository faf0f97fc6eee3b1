/* bench_estimate: what the run's own estimate (core/estimate.c) costs. A session does it once per
 * update, at eerl_rt_update_end, never at a phase boundary (eerl_rt_phase_begin/end do not touch
 * it): this prints the time of one update's step (prediction, and for a governor update the refit
 * with its leave-one-out scatter over the 32-update window, the worst case) and of the
 * aggregator's add, on synthetic colocated observations and on drained ones (each with both
 * pools' arrivals: the drained generation fit over every governor-generation update joins).
 * Figures only, never a failure.
 *   bench_estimate [UPDATES] */
#include <stdlib.h>
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

/* A drained update on the same work: the pools run side by side, the update ends at the later
 * arrival plus the refit. After the calibration every other update slows the training pool
 * only: its generation, at the governor, joins the generation fit (the extra work drained
 * mode's estimate does). */
static void make_drained(unsigned k, eerl_obs *o)
{
    make_obs(k, o);
    o->arrival_s[EERL_POOL_GEN] = o->phase_time_s[EERL_PHASE_GEN];
    o->arrival_s[EERL_POOL_TRAIN] = o->phase_time_s[EERL_PHASE_TRAIN];
    o->flags |= EERL_OBS_ARRIVALS;
    o->time_s = (o->arrival_s[0] > o->arrival_s[1] ? o->arrival_s[0] : o->arrival_s[1]) + 3;
    if (k > 16 && k % 2)
        o->setting.mhz[EERL_GROUP_TRAIN] = 1500;
}

/* n governor updates of mode through one estimate: microseconds per update end. */
static int run(eerl_mode mode, unsigned n)
{
    struct eerl__est est;
    struct eerl__est_acc acc;
    struct eerl__est_upd u;
    eerl_estimate r;
    eerl_obs o;
    unsigned k;
    double t0, t1;

    if (eerl__est_init(&est, mode) < 0)
        return 1;
    eerl__est_acc_init(&acc);
    t0 = now_s();
    for (k = 1; k <= n; k++) {
        /* colocated: every update at the governor, a refit each time, the worst case */
        if (mode == EERL_MODE_DRAINED)
            make_drained(k, &o);
        else
            make_obs(k, &o);
        eerl__est_step(&est, &o, 1, k == 16, &u);
        eerl__est_acc_add(&acc, &u);
    }
    t1 = now_s();
    eerl__est_acc_result(&acc, &r);
    printf("bench_estimate: %-9s %u updates (%s; a refit with leave-one-out over %d each): "
           "%.1f us per update end\n",
           eerl_mode_name(mode), n,
           mode == EERL_MODE_DRAINED ? "every other one at the governor, the others' generation"
                                     : "every one at the governor",
           EERL__EST_WINDOW, 1e6 * (t1 - t0) / n);
    printf("  phase boundaries: 0 (the estimate runs at the update's end only); "
           "estimate over the run: saving %.3f%% [%.3f, %.3f], %u judged\n",
           r.saving_pct, r.saving_ci_pct[0], r.saving_ci_pct[1], r.judged_updates);
    eerl__est_free(&est);
    return 0;
}

int main(int argc, char **argv)
{
    unsigned n = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : 2000;

    if (n < 20) {
        fprintf(stderr, "bench_estimate: UPDATES '%s' must be a number of at least 20\n",
                argc > 1 ? argv[1] : "");
        return 2;
    }
    return run(EERL_MODE_COLOCATED, n) || run(EERL_MODE_DRAINED, n);
}

/* bench_controller: what one controller decision and one predictor fit cost on this machine.
 * Drives each mode's controller with the synthetic cluster of tests/synth_stream.h (closed loop),
 * timing only eerl_ctl_observe + eerl_ctl_events, and fits the governor predictor repeatedly on
 * a full reference window. Prints figures; never fails on timing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "eerl/core.h"
#include "core/predictor.h"
#include "../tests/synth_stream.h"

static double now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void bench_decisions(eerl_mode mode, unsigned n)
{
    unsigned clocks[200];
    size_t nc = synth_clocks(clocks);
    struct synth s;
    eerl_ctl *ctl;
    eerl_setting st;
    eerl_event ev[64];
    eerl_ctl_config cfg;
    double *t = malloc(n * sizeof(double)), sum = 0;
    unsigned i;

    if (!t)
        return;
    synth_init(&s, mode, 1);
    s.drift = 0.0005; /* some refreshes and refits along the way */
    eerl_ctl_config_default(mode, &cfg);
    cfg.strategy = EERL_STRATEGY_PAPER; /* the figures in docs are the paper controller's */
    if (eerl_ctl_new(mode, &cfg, clocks, nc, 1980, &ctl) < 0) {
        free(t);
        return;
    }
    eerl_ctl_setting(ctl, &st);
    for (i = 0; i < n; i++) {
        eerl_obs o = synth_step(&s, &st);
        double a = now_us();
        eerl_ctl_observe(ctl, &o, &st);
        while (eerl_ctl_events(ctl, ev, 64))
            ;
        t[i] = now_us() - a;
        sum += t[i];
        if (s.len_mean > 3000)
            s.len_mean = 1500;
    }
    qsort(t, n, sizeof(double), cmp);
    printf("decision  %-13s %7u updates: mean %6.2f us  p50 %6.2f  p99 %6.2f  max %7.2f\n",
           eerl_mode_name(mode), n, sum / n, t[n / 2], t[(size_t)(n * 0.99)], t[n - 1]);
    eerl_ctl_free(ctl);
    free(t);
}

static void bench_fit(eerl_mode mode, unsigned window, unsigned reps)
{
    struct synth s;
    struct eerl__pred_work w;
    struct eerl__pred p;
    eerl_obs *o = calloc(window, sizeof(*o));
    const eerl_obs **ptr = calloc(window, sizeof(*ptr));
    eerl_setting gov;
    struct eerl__parts pp;
    double a, fit, pred;
    unsigned i;

    if (!o || !ptr || eerl__pred_work_init(&w, window) < 0) {
        free(o);
        free(ptr);
        return;
    }
    memset(&gov, 0, sizeof(gov));
    synth_init(&s, mode, 2);
    for (i = 0; i < window; i++) {
        o[i] = synth_step(&s, &gov);
        ptr[i] = &o[i];
    }
    a = now_us();
    for (i = 0; i < reps; i++)
        eerl__pred_fit(&p, eerl__layout_of(mode), ptr, window, &w);
    fit = (now_us() - a) / reps;
    a = now_us();
    for (i = 0; i < reps; i++)
        eerl__pred_predict(&p, &o[i % window], &pp);
    pred = (now_us() - a) / reps;
    printf("predictor %-13s fit on %3u governor updates: %6.2f us; one prediction %5.3f us\n",
           eerl_mode_name(mode), window, fit, pred);
    eerl__pred_work_free(&w);
    free(o);
    free(ptr);
}

int main(int argc, char **argv)
{
    unsigned n = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : 20000;
    eerl_mode m;

    if (n < 100)
        n = 100;
    printf("eerl controller benchmark (goal: < 50 us per update)\n");
    for (m = EERL_MODE_COLOCATED; m < EERL_MODE_COUNT; m++)
        bench_decisions(m, n);
    bench_fit(EERL_MODE_COLOCATED, 32, 20000);
    bench_fit(EERL_MODE_DRAINED, 32, 20000);
    bench_fit(EERL_MODE_INFLIGHT, 64, 20000);
    return 0;
}

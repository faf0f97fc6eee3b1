/* Twin benchmark: wall time of a 500-update simulated run on 40 GPUs (8/32 disaggregated, Qwen
 * L: 2048 responses per update), of the same run read through the twin device every 200 ms of
 * virtual time (as a meter would), and of a 30-pair, 4-seed sweep (updates 0-25). Prints
 * figures; never fails on timing. */
#include <stdio.h>
#include <time.h>

#include "eerl/device.h"
#include "eerl/error.h"
#include "eerl/twin.h"

static double wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(void)
{
    struct eerl_twin_config cfg = {EERL_MODE_DISAGGREGATED, 8, 32, 'L', 1, 0, 0.025,
                                   EERL_TWIN_NOISE_NONE};
    eerl_twin_preset *p = NULL;
    eerl_twin *t = NULL;
    eerl_device *dev = NULL;
    struct eerl_twin_update u;
    struct eerl_twin_totals tot;
    double t0, el, sim = 0, next = 0;
    unsigned k, g, s, reads = 0;
    uint64_t mj;
    int e;

    e = eerl_twin_preset_new("qwen3-30b-a3b", "h100", NULL, &p);
    if (e < 0) {
        fprintf(stderr, "bench_twin: preset: %s\n", eerl_strerror(e));
        return 1;
    }
    t0 = wall();
    if (eerl_twin_new(p, &cfg, &t) < 0)
        return 1;
    eerl_twin_set_clocks(t, 1800, 1500);
    for (k = 0; k < 500; k++)
        eerl_twin_step(t, &u);
    sim = eerl_twin_now(t);
    eerl_twin_free(t);
    el = wall() - t0;
    printf("500 updates, 40 GPUs (qwen L, 8/32 disaggregated): %.3f s wall for %.0f s virtual\n",
           el, sim);

    t0 = wall();
    if (eerl_twin_new(p, &cfg, &t) < 0 || eerl_twin_device(t, &dev) < 0)
        return 1;
    for (k = 0; k < 500; k++) {
        eerl_twin_step(t, &u);
        for (; next <= eerl_twin_now(t); next += 0.2) {
            eerl_twin_observe_at(t, next);
            for (g = 0; g < 40; g++) {
                eerl_device_energy_mj(dev, g, &mj);
                reads++;
            }
        }
    }
    eerl_device_free(dev);
    eerl_twin_free(t);
    el = wall() - t0;
    printf("same run read through the twin device every 200 ms: %.3f s wall, %u counter reads\n",
           el, reads);

    t0 = wall();
    cfg.size = 'M';
    for (s = 0; s < 4; s++) {
        cfg.seed = s + 1;
        cfg.run_id = 0;
        eerl_twin_run(p, &cfg, 0, 0, 5, 25, &tot);
        for (k = 0; k < 30; k++) {
            cfg.run_id = k + 1;
            eerl_twin_run(p, &cfg, 1980 - 45 * (k % 15), 1980 - 90 * (k / 15 + 3), 5, 25, &tot);
        }
    }
    el = wall() - t0;
    printf("30-pair, 4-seed sweep (qwen M, 8/32, updates 0-25): %.3f s wall\n", el);
    eerl_twin_preset_free(p);
    return 0;
}

/* Controllers side by side (issue 9): every strategy of `eerl sim --strategy` on the four Table 4
 * configurations the twin covers (Qwen3-30B-A3B on H100: colocated 32, disaggregated 8/32,
 * drained 8/24, in-flight 16/32, with the paper's workload sizes and update counts), 8 seeds each,
 * the same workloads for every strategy (matched seeds, divergence 0 so that a seed's governor
 * and controller runs differ only by the clocks: the figures are the strategies' own effect).
 * One table: whole-run saving and throughput change (updates 2-N, matched-seed geometric means),
 * the share of seeds whose whole run stays within the 2% allowance, the capture ratio against
 * the oracle (best static setting, found offline on the same seeds and updates). Strategies that
 * budget against the horizon are told the run's length. Progress on stderr. Prints figures;
 * never fails on how they compare.
 *
 *   bench_controllers [SEEDS] [--noise fitted]   (default 8 seeds, no per-update noise; with
 *   --noise fitted the governor and controller runs carry the twin's fitted per-update noise,
 *   docs/twin.md; the oracle's search stays on the noise-free twin) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "eerl/error.h"
#include "runtime/analysis.h"
#include "sim/sim.h"

struct row {
    const char *name;
    eerl_mode mode;
    unsigned n_gen, n_train;
    char size;
    unsigned updates;
};

static const struct row rows[] = {
    {"colocated 32", EERL_MODE_COLOCATED, 32, 0, 'M', 107},
    {"disaggregated 8/32", EERL_MODE_DISAGGREGATED, 8, 32, 'M', 93},
    {"drained 8/24", EERL_MODE_DRAINED, 8, 24, 'S', 175},
    {"in-flight 16/32", EERL_MODE_INFLIGHT, 16, 32, 'S', 335},
};

struct strat {
    const char *name;
    eerl_strategy s;
    int oracle;
};

static const struct strat strats[] = {
    {"governor", EERL_STRATEGY_GOVERNOR, 0},
    {"oracle", EERL_STRATEGY_STATIC, 1},
    {"global-clock", EERL_STRATEGY_GLOBAL_CLOCK, 0},
    {"linear-search", EERL_STRATEGY_LINEAR_SEARCH, 0},
    {"paper", EERL_STRATEGY_PAPER, 0},
    {"eerl", EERL_STRATEGY_EERL, 0},
};

#define NSTRAT (sizeof(strats) / sizeof(strats[0]))
#define SEEDS_MAX 64

static unsigned noise = EERL_TWIN_NOISE_NONE; /* --noise */

static double wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int run(const eerl_twin_preset *p, const struct row *row, uint64_t seed, int controller,
               eerl_strategy s, const eerl_setting *st, struct eerl__sim_run *out)
{
    struct eerl__sim_config c;
    char why[1024];
    int e;

    memset(&c, 0, sizeof(c));
    c.preset = p;
    c.mode = row->mode;
    c.n_gen = row->n_gen;
    c.n_train = row->n_train;
    c.size = row->size;
    c.updates = row->updates;
    c.seed = seed;
    c.divergence = 0;
    c.noise = noise;
    c.controller = controller;
    c.allowed_loss = 0.02;
    c.strategy = s;
    c.expected_updates = row->updates;
    if (st)
        c.static_setting = *st;
    e = eerl__sim_run(&c, out, why, sizeof(why));
    if (e < 0)
        fprintf(stderr, "bench_controllers: %s seed %llu: %s\n", row->name,
                (unsigned long long)seed, why);
    return e;
}

int main(int argc, char **argv)
{
    eerl_twin_preset *p = NULL;
    unsigned n_seeds = 8;
    int ai;
    size_t r, k, si;
    double t_all = wall();
    int e;

    for (ai = 1; ai < argc; ai++) {
        char *end;
        unsigned long v;

        if (!strcmp(argv[ai], "--noise")) {
            if (ai + 1 >= argc || eerl_twin_noise_parse(argv[ai + 1], &noise) < 0) {
                fprintf(stderr, "bench_controllers: --noise takes none or fitted, got '%s'\n",
                        ai + 1 < argc ? argv[ai + 1] : "");
                return 2;
            }
            ai++;
            continue;
        }
        v = strtoul(argv[ai], &end, 10);
        if (*end || v < 1 || v > SEEDS_MAX) {
            fprintf(stderr, "bench_controllers: seeds '%s' must be 1-%d\n", argv[ai], SEEDS_MAX);
            return 2;
        }
        n_seeds = (unsigned)v;
    }
    e = eerl_twin_preset_new("qwen3-30b-a3b", "h100", NULL, &p);
    if (e < 0) {
        fprintf(stderr, "bench_controllers: preset: %s\n", eerl_strerror(e));
        return 1;
    }
    printf("controllers side by side: Qwen3-30B-A3B on H100, %u seeds per mode, allowed loss 2%%, "
           "divergence 0 (matched workloads)%s\n\n",
           n_seeds, noise ? ", per-update noise fitted" : "");
    printf("%-19s %-14s | %8s %9s | %7s | %7s | %-16s | %s\n", "config", "strategy", "saving", "dq",
           "within", "capture", "locked", "lock at (median)");
    for (r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
        const struct row *row = &rows[r];
        struct eerl__sim_run gov[SEEDS_MAX];
        const struct eerl__an_series *gs[SEEDS_MAX], *cs[SEEDS_MAX];
        struct eerl__sim_oracle *orc = calloc(1, sizeof(*orc));
        uint64_t seeds[SEEDS_MAX];
        double t0 = wall();

        if (!orc)
            return 1;
        fprintf(stderr, "bench_controllers: %s: governor runs and oracle search\n", row->name);
        for (k = 0; k < n_seeds; k++) {
            seeds[k] = k + 1;
            if (run(p, row, seeds[k], 0, EERL_STRATEGY_PAPER, NULL, &gov[k]) < 0)
                return 1;
            gs[k] = &gov[k].series;
        }
        if (eerl__sim_oracle(p, row->mode, row->n_gen, row->n_train, row->size, row->updates, seeds,
                             n_seeds, 0.02, orc) < 0) {
            fprintf(stderr, "bench_controllers: %s: oracle failed\n", row->name);
            return 1;
        }
        for (si = 0; si < NSTRAT; si++) {
            const struct strat *s = &strats[si];
            struct eerl__sim_run ctl[SEEDS_MAX];
            struct eerl__an_result *res = calloc(1, sizeof(*res));
            unsigned within = 0, at[SEEDS_MAX], n_at = 0, i, j;
            char set[64];

            if (!res)
                return 1;
            fprintf(stderr, "bench_controllers: %s: %s (%.0f s so far)\n", row->name, s->name,
                    wall() - t_all);
            for (k = 0; k < n_seeds; k++) {
                if (run(p, row, seeds[k], 1, s->s, s->oracle ? &orc->setting : NULL, &ctl[k]) < 0)
                    return 1;
                cs[k] = &ctl[k].series;
                if (ctl[k].series.locked)
                    at[n_at++] = (unsigned)ctl[k].series.lock_update;
            }
            if (eerl__an_compare(gs, cs, n_seeds, res) < 0) {
                fprintf(stderr, "bench_controllers: %s: analysis failed\n", row->name);
                return 1;
            }
            for (k = 0; k < n_seeds; k++)
                within += res->seed[k].whole.dq_pct >= -2.0;
            for (i = 1; i < n_at; i++)
                for (j = i; j > 0 && at[j] < at[j - 1]; j--) {
                    unsigned x = at[j];
                    at[j] = at[j - 1];
                    at[j - 1] = x;
                }
            if (res->lock_same)
                eerl__an_setting_str(&res->lock_setting, set, sizeof(set));
            else
                snprintf(set, sizeof(set), "%s", res->any_locked ? "varies" : "none");
            printf("%-19s %-14s | %7.2f%% %+8.2f%% | %3u/%-3u | %7.2f | %-16s | ", row->name,
                   s->name, res->whole.saving_pct, res->whole.dq_pct, within, n_seeds,
                   orc->saving_pct > 0 ? res->whole.saving_pct / orc->saving_pct : NAN, set);
            if (n_at)
                printf("%u (%u/%u seeds)\n", at[n_at / 2], n_at, n_seeds);
            else
                printf("-\n");
            fflush(stdout);
            for (k = 0; k < n_seeds; k++)
                eerl__sim_run_free(&ctl[k]);
            free(res);
        }
        {
            char o[64];
            eerl__an_setting_str(&orc->setting, o, sizeof(o));
            printf("%-19s %-14s   oracle setting %s (%u settings evaluated), %.1f s\n\n", "", "", o,
                   orc->evaluated, wall() - t0);
        }
        for (k = 0; k < n_seeds; k++)
            eerl__sim_run_free(&gov[k]);
        free(orc);
    }
    printf("saving, dq: whole run (updates 2-N) against the matched governor run, geometric means "
           "over seeds; within: seeds whose whole-run throughput change is >= -2%%; capture: "
           "saving / oracle saving; locked: the first lock of every seed if all agree; lock at: "
           "median update of the first lock among seeds that locked. Total %.0f s.\n",
           wall() - t_all);
    eerl_twin_preset_free(p);
    return 0;
}

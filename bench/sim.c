/* Simulation benchmark: `eerl sim`'s pipeline (per seed a governor and a controller run through
 * the runtime session on the twin, matched-seed comparison, oracle) for the four Table 4
 * configurations the twin covers (Qwen3-30B-A3B on H100: colocated 32, disaggregated 8/32,
 * drained 8/24, in-flight 16/32, with the paper's workload sizes and update counts), 4 seeds,
 * printed next to the paper's numbers (data/paper: Tables 4 and 5 of the EE-RL paper, copied
 * below). Also the meter's whole-run energy against the twin's own. Prints figures; never fails
 * on timing or on how the figures compare. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "eerl/error.h"
#include "eerl/tools/analysis.h"
#include "sim/oracle.h"
#include "eerl/tools/sim.h"

struct paper_row {
    const char *name;
    eerl_mode mode;
    unsigned n_gen, n_train;
    char size;
    unsigned updates;
    /* Table 4 (whole run, updates 2-N) and Table 5 (after lock, with the locked setting). */
    double saving, dq, after_saving, after_dq;
    const char *after_setting;
};

/* From the paper's controller_results.csv (Table 4 and Table 5 rows, Qwen3-30B-A3B, H100). */
static const struct paper_row rows[] = {
    {"colocated 32", EERL_MODE_COLOCATED, 32, 0, 'M', 107, 7.00, -1.25, 8.04, -1.55, "1830/1425"},
    {"disaggregated 8/32", EERL_MODE_DISAGGREGATED, 8, 32, 'M', 93, 16.94, -1.39, 22.44, -1.60,
     "1695/1425"},
    {"drained 8/24", EERL_MODE_DRAINED, 8, 24, 'S', 175, 14.51, -1.97, 19.23, -0.94, "Gov/varies"},
    {"in-flight 16/32", EERL_MODE_INFLIGHT, 16, 32, 'S', 335, 7.24, -1.08, 9.82, -1.70, "Gov/1125"},
};

#define SEEDS 4

static double wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(void)
{
    eerl_twin_preset *p = NULL;
    size_t r;
    int e;

    e = eerl_twin_preset_new("qwen3-30b-a3b", "h100", NULL, &p);
    if (e < 0) {
        fprintf(stderr, "bench_sim: preset: %s\n", eerl_strerror(e));
        return 1;
    }
    printf("eerl sim pipeline, Qwen3-30B-A3B on H100, %d seeds, allowed loss 2%%, divergence "
           "0.025; paper = EE-RL Tables 4/5 (one run each)\n\n",
           SEEDS);
    printf("%-19s %5s | %8s %8s %8s %8s | %8s %8s %-10s | %8s %8s %8s | %6s %7s\n", "config", "upd",
           "saving", "paper", "dq", "paper", "after", "paper", "locked", "oracle", "or.dq",
           "capture", "meter", "wall");
    for (r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
        const struct paper_row *row = &rows[r];
        struct eerl_sim_run gov[SEEDS], ctl[SEEDS];
        const struct eerl_an_series *gs[SEEDS], *cs[SEEDS];
        struct eerl_an_result *res = calloc(1, sizeof(*res));
        struct eerl_sim_oracle *orc = calloc(1, sizeof(*orc));
        uint64_t seeds[SEEDS];
        double t0 = wall(), el, meter = 0, truth = 0;
        char why[1024], set[64];
        int k, role;

        if (!res || !orc)
            return 1;
        for (k = 0; k < SEEDS; k++) {
            seeds[k] = (uint64_t)k + 1;
            for (role = 0; role < 2; role++) {
                struct eerl_sim_config c;
                memset(&c, 0, sizeof(c));
                c.preset = p;
                c.mode = row->mode;
                c.n_gen = row->n_gen;
                c.n_train = row->n_train;
                c.size = row->size;
                c.updates = row->updates;
                c.seed = seeds[k];
                c.divergence = 0.025;
                c.controller = role;
                c.allowed_loss = 0.02;
                e = eerl_sim_run(&c, role ? &ctl[k] : &gov[k], why, sizeof(why));
                if (e < 0) {
                    fprintf(stderr, "bench_sim: %s seed %d: %s\n", row->name, k + 1, why);
                    return 1;
                }
            }
            gs[k] = &gov[k].series;
            cs[k] = &ctl[k].series;
            meter += gov[k].meter_energy_j + ctl[k].meter_energy_j;
            truth += gov[k].true_energy_j + ctl[k].true_energy_j;
        }
        if (eerl_an_compare(gs, cs, SEEDS, res) < 0 ||
            eerl_sim_oracle(p, row->mode, row->n_gen, row->n_train, row->size, row->updates, seeds,
                            SEEDS, 0.02, orc) < 0) {
            fprintf(stderr, "bench_sim: %s: analysis failed\n", row->name);
            return 1;
        }
        el = wall() - t0;
        if (res->lock_same)
            eerl_an_setting_str(&res->lock_setting, set, sizeof(set));
        else
            snprintf(set, sizeof(set), "%s", res->any_locked ? "varies" : "none");
        printf("%-19s %5u | %7.2f%% %7.2f%% %+7.2f%% %+7.2f%% | %7.2f%% %7.2f%% %-10s | %7.2f%% "
               "%+7.2f%% %8.2f | %+5.2f%% %6.1fs\n",
               row->name, row->updates, res->whole.saving_pct, row->saving, res->whole.dq_pct,
               row->dq, res->after.saving_pct, row->after_saving, set, orc->saving_pct, orc->dq_pct,
               orc->saving_pct > 0 ? res->whole.saving_pct / orc->saving_pct : NAN,
               100 * (meter / truth - 1), el);
        printf("%-19s       | per seed:", "");
        for (k = 0; k < SEEDS; k++) {
            if (res->seed[k].locked)
                eerl_an_setting_str(&res->seed[k].lock_setting, set, sizeof(set));
            else
                snprintf(set, sizeof(set), "no lock");
            printf(" %.1f%%/%+.1f%% %s@%llu;", res->seed[k].whole.saving_pct,
                   res->seed[k].whole.dq_pct, set,
                   (unsigned long long)(res->seed[k].locked ? ctl[k].series.lock_update : 0));
        }
        printf(" paper locked %s\n", row->after_setting);
        for (k = 0; k < SEEDS; k++) {
            eerl_sim_run_free(&gov[k]);
            eerl_sim_run_free(&ctl[k]);
        }
        free(res);
        free(orc);
    }
    printf("\nsaving/dq: whole run (updates 2-N), matched-seed geometric means; after: after the "
           "lock; oracle: best static setting meeting the allowance (noise-free runs, same "
           "seeds and updates); capture = saving / oracle saving; meter: the runtime's metered "
           "energy vs the twin's own over all runs; wall: the 8 runs and the oracle.\n");
    eerl_twin_preset_free(p);
    return 0;
}

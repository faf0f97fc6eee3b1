/* The simulated cluster, in the tools library (src/sim): `eerl sim`'s runs and the oracles they
 * are compared with. The driver plays the RL framework for the runtime session on the twin
 * (eerl/tools/twin.h): per update it sets the twin's clocks to what the session will apply,
 * advances the twin one update, then replays that update's phase boundaries to the session in
 * virtual time (sampling the meter in between), checks that the clocks the session locked
 * through its owner are the ones the twin ran, and ends the update with the twin's work. The
 * static oracle is the best setting held for a whole run, the windowed oracle the best schedule
 * of settings that may change every few updates; both are found by the twin alone. A run owns
 * the twin, its device, the session and the clock owner; nothing prints. */
#ifndef EERL_TOOLS_SIM_H
#define EERL_TOOLS_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "eerl/core.h"
#include "eerl/runtime.h"
#include "eerl/tools/analysis.h"
#include "eerl/tools/twin.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- one run -------------------------------------------------------------------------------- */

struct eerl_sim_config {
    const eerl_twin_preset *preset;
    eerl_mode mode;
    unsigned n_gen, n_train; /* colocated: n_train 0 */
    char size;
    unsigned updates;
    uint64_t seed;
    double divergence;
    unsigned noise; /* EERL_TWIN_NOISE_*: per-update noise of the twin (0: none) */
    int controller; /* 0: governor run (observe-only session); 1: controller run */
    double allowed_loss;
    eerl_strategy strategy;
    const char *trace_path;      /* NULL: none */
    const char *trace_run_json;  /* merged into the trace's run line */
    double sample_s;             /* virtual meter sampling period; 0: 1 s */
    unsigned expected_updates;   /* the controller's cfg.expected_updates (0: unknown) */
    eerl_setting static_setting; /* EERL_STRATEGY_STATIC: the setting held (the oracle's) */
    const char *resume_from;     /* controller run: the session's resume_from (NULL: none) */
    const char *save_state;      /* controller run: eerl_rt_save_state here after the last update */
    const char *prior;           /* controller run: the session's prior (NULL: none) */
    const char *job_model;       /* the session's job_model (part of a saved state's key) */
    const char *resume_tag;      /* the session's resume_tag (NULL: its default) */
};

struct eerl_sim_run {
    struct eerl_an_series series; /* what the session observed (meter energies) */
    double true_energy_j, true_time_s, meter_energy_j; /* twin's own totals vs the meter's */
    unsigned long lock_calls; /* clock locks the session made through its owner */
    int restored;             /* after close: every GPU back to the governor */
    eerl_ctl_status status;
    int resumed;             /* the session started from a saved state */
    char resume_detail[512]; /* why (or why not), "" without resume_from */
    int prior;               /* the session took a prior from earlier jobs */
    char prior_detail[512];  /* what was read and matched, "" without a prior */
};

/* One run. EERL_E* with why on failure (a bad configuration names the value). */
int eerl_sim_run(const struct eerl_sim_config *c, struct eerl_sim_run *ret, char *why, size_t len);
void eerl_sim_run_free(struct eerl_sim_run *r);

/* Calibration length of the controller for the mode (updates). */
unsigned eerl_sim_calibration_updates(eerl_mode mode);

/* ---- the static oracle ---------------------------------------------------------------------- */

/* Oracle: the best static generation/training setting (idle: the twin's idle clock in the modes
 * that have one) over updates [EERL_AN_FIRST_UPDATE, updates] of the given seeds, whose
 * matched-seed throughput change is >= -allowed_loss, on a 45 MHz grid then 15 MHz around the
 * best. Runs are noise-free (divergence 0): the oracle is the setting's true effect. */
struct eerl_sim_oracle {
    eerl_setting setting;
    double saving_pct, dq_pct; /* geometric means over the seeds */
    double seed_saving_pct[EERL_AN_SEEDS_MAX], seed_dq_pct[EERL_AN_SEEDS_MAX];
    unsigned evaluated; /* settings evaluated */
};
int eerl_sim_oracle(const eerl_twin_preset *preset, eerl_mode mode, unsigned n_gen,
                    unsigned n_train, char size, unsigned updates, const uint64_t *seeds,
                    size_t n_seeds, double allowed_loss, struct eerl_sim_oracle *ret);

/* ---- the windowed oracle -------------------------------------------------------------------- */

/* The windowed oracle: the best schedule of settings that may change every `window`
 * updates (window k: 0-based updates [k window, (k + 1) window)), held from update 1 like the
 * static oracle, whose whole-run matched-seed throughput change over the same updates meets the
 * same allowance. One schedule for all the seeds, as the static oracle is one setting. It
 * chooses among the pairs within a few grid steps of the static oracle's setting (and the
 * governor), by a Lagrangian split of energy against time per window and then single-window
 * moves that use the allowance left, and scores the schedule it found on runs that switch
 * clocks at the window boundaries. The static oracle's setting is one schedule: where nothing
 * beats it (or a schedule does not hold the allowance once run), the windowed oracle holds it,
 * so its saving is never below the static one's. */
struct eerl_sim_schedule {
    unsigned window, n_windows;
    unsigned *gen_mhz, *train_mhz; /* per window (EERL_TWIN_GOV: governor); owned */
    double saving_pct, dq_pct;     /* geometric means over the seeds, scored on switching runs */
    double seed_saving_pct[EERL_AN_SEEDS_MAX], seed_dq_pct[EERL_AN_SEEDS_MAX];
    unsigned changes;    /* windows whose setting differs from the window before */
    unsigned candidates; /* settings each window chose among */
    int held_static;     /* 1: the static oracle's setting in every window */
};
int eerl_sim_oracle_windowed(const eerl_twin_preset *preset, eerl_mode mode, unsigned n_gen,
                             unsigned n_train, char size, unsigned updates, const uint64_t *seeds,
                             size_t n_seeds, double allowed_loss, unsigned window,
                             const struct eerl_sim_oracle *stat, struct eerl_sim_schedule *ret);
void eerl_sim_schedule_free(struct eerl_sim_schedule *s);
/* The setting of window k as the controller would report it (idle clock where the mode has one). */
void eerl_sim_schedule_setting(const eerl_twin_preset *preset, eerl_mode mode,
                               const struct eerl_sim_schedule *s, unsigned k, eerl_setting *ret);

#ifdef __cplusplus
}
#endif
#endif

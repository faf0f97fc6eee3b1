/* The simulated-cluster driver (sim.c): plays the RL framework for the runtime session on the
 * twin. Per update it sets the twin's clocks to what the session will apply, advances the twin
 * one update, then replays that update's phase boundaries to the session in virtual time
 * (sampling the meter in between), checks that the clocks the session locked through its owner
 * are the ones the twin ran, and ends the update with the twin's work. The oracles the runs are
 * compared with are oracle.h (static) and schedule.h (windowed). Owns the twin, its device, the
 * session and the clock owner of one run; prints nothing. */
#ifndef EERL_SIM_SIM_H
#define EERL_SIM_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "eerl/runtime.h"
#include "eerl/tools/twin.h"
#include "analysis/analysis.h"

struct eerl__sim_config {
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

struct eerl__sim_run {
    struct eerl__an_series series; /* what the session observed (meter energies) */
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
int eerl__sim_run(const struct eerl__sim_config *c, struct eerl__sim_run *ret, char *why,
                  size_t len);
void eerl__sim_run_free(struct eerl__sim_run *r);

/* Calibration length of the controller for the mode (updates). */
unsigned eerl__sim_calibration_updates(eerl_mode mode);

#endif

/* The simulated RL cluster ("twin"): a GRPO workload generator, per-phase clock physics for one
 * GPU model, and the four execution modes, all in virtual time. A preset holds the fitted
 * parameters of one (model, GPU) pair; a twin is one simulated run on an allocation; the twin's
 * device view (eerl_twin_device) is an eerl_device whose clocks and energy counters follow the
 * twin's virtual time, so the meter, actuator and controller run on it unchanged.
 * Clocks are SM MHz; 0 means "leave the phase to the default governor" (EERL_TWIN_GOV). */
#ifndef EERL_TWIN_H
#define EERL_TWIN_H

#include <stddef.h>
#include <stdint.h>

#include "eerl/core.h"
#include "eerl/device.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EERL_TWIN_GOV 0u

/* The twin runs the controller's execution modes and phases (eerl_mode, eerl_phase in core.h).
 * These names stay for programs written against earlier releases; new code uses the core ones.
 * EERL_TWIN_PH_WAIT is EERL_PHASE_OTHER (the time a pool waits). */
typedef eerl_mode eerl_twin_mode;
#define EERL_TWIN_COLOCATED EERL_MODE_COLOCATED
#define EERL_TWIN_DISAGGREGATED EERL_MODE_DISAGGREGATED
#define EERL_TWIN_DRAINED EERL_MODE_DRAINED
#define EERL_TWIN_INFLIGHT EERL_MODE_INFLIGHT

typedef eerl_phase eerl_twin_phase;
#define EERL_TWIN_PH_GEN EERL_PHASE_GEN
#define EERL_TWIN_PH_LOGPROB EERL_PHASE_LOGPROB
#define EERL_TWIN_PH_TRAIN EERL_PHASE_TRAIN
#define EERL_TWIN_PH_REFIT EERL_PHASE_REFIT
#define EERL_TWIN_PH_WAIT EERL_PHASE_OTHER
#define EERL_TWIN_PH_COUNT EERL_PHASE_COUNT

typedef struct eerl_twin_preset eerl_twin_preset;
typedef struct eerl_twin eerl_twin;

/* Names: "qwen3-30b-a3b", "nemotron-super-49b", "grpo-tiny", "mistral-nemo-12b" (built from its
 * description); "h100", "gb200", "h200"; "colocated",
 * "disaggregated", "drained", "inflight"; sizes 'S', 'M', 'L'. Each lookup returns EERL_ENOENT
 * for an unknown name. eerl_twin_*_names returns a static comma-separated list of valid names. */
const char *eerl_twin_model_names(void);
const char *eerl_twin_gpu_names(void);
const char *eerl_twin_mode_names(void);
int eerl_twin_mode_parse(const char *name, eerl_mode *ret_mode);
const char *eerl_twin_mode_name(eerl_mode mode);

/* Loads the preset of (model, gpu) from a parameter file's JSON text, or from the parameters
 * embedded at build time when json_text is NULL. EERL_ENOENT: unknown model or GPU (or the file
 * lacks them); EERL_EPARSE: malformed text or a missing/invalid field. */
int eerl_twin_preset_new(const char *model, const char *gpu, const char *json_text,
                         eerl_twin_preset **ret_preset);
void eerl_twin_preset_free(eerl_twin_preset *preset);
/* A preset for a model the twin was not fitted on, built from its description: a JSON object
 * with what a user knows of the model ("moe", "params_total_b", "params_active_b", "layers",
 * "hidden", "heads", "kv_heads", optional "name") and of its workload (optional "workload":
 * "seq_limit", "len_median", "len_sigma", "drift", "p_zero", "sizes"), derived from the fitted
 * model of the same kind on that GPU in the parameter file json_text (NULL: the embedded one);
 * docs/twin.md, "A model from its description". Nothing is fitted. EERL_EPARSE / EERL_ERANGE:
 * a bad description; then why (when why_len > 0) holds a sentence naming the field and its value.
 * EERL_ENOENT: unknown GPU, or no fitted model on it to derive from. The models of the embedded
 * parameters' "described" object (mistral-nemo-12b) load through eerl_twin_preset_new by name
 * and are built by this same path. */
int eerl_twin_preset_describe(const char *desc_text, const char *gpu, const char *json_text,
                              char *why, size_t why_len, eerl_twin_preset **ret_preset);
/* The embedded parameter file's text (static, NUL-terminated). */
const char *eerl_twin_embedded_params(void);

/* Supported SM clocks of the preset's GPU, highest first (as NVML lists them). */
int eerl_twin_preset_clocks(const eerl_twin_preset *preset, unsigned *mhz, size_t cap,
                            size_t *ret_n);
/* 1 if mhz is one of the GPU's supported clocks (EERL_TWIN_GOV counts as supported). */
int eerl_twin_preset_clock_ok(const eerl_twin_preset *preset, unsigned mhz);

/* Most GPUs one simulated allocation holds, both pools together: a count no cluster has. The
 * twin's own cost does not depend on it (a pool is simulated as a whole); reading every GPU
 * through the device view does, linearly (docs/twin.md has the figures). */
#define EERL_TWIN_GPUS_LIMIT (1u << 20)

/* One simulated run. n_gen/n_train: pool sizes (colocated: n_train = 0 and n_gen = all GPUs).
 * divergence: run-to-run spread, the standard deviation of log throughput between two runs of
 * the same seed (the paper saw 0.02-0.03); 0 makes a run a pure function of its seed. */
struct eerl_twin_config {
    eerl_mode mode;
    unsigned n_gen, n_train;
    char size; /* 'S', 'M' or 'L' */
    uint64_t seed;
    uint64_t run_id; /* distinguishes runs that share a seed (their divergence streams) */
    double divergence;
    /* Per-update noise the work cannot explain (docs/twin.md, "Per-update noise"):
     * EERL_TWIN_NOISE_NONE (0, the default: update time is a function of the work) or
     * EERL_TWIN_NOISE_FITTED (the preset's fitted phase-level noise, keyed by seed and run_id). */
    unsigned noise;
};

#define EERL_TWIN_NOISE_NONE 0u
#define EERL_TWIN_NOISE_FITTED 1u

/* "none" or "fitted" to EERL_TWIN_NOISE_*; EERL_ENOENT for another name. */
int eerl_twin_noise_parse(const char *name, unsigned *ret_noise);

/* Checks the allocation fits the mode (colocated: n_gen >= 1, n_train == 0; others both >= 1)
 * and EERL_TWIN_GPUS_LIMIT, and the size is known; copies the preset (the twin does not keep a
 * pointer to it). */
int eerl_twin_new(const eerl_twin_preset *preset, const struct eerl_twin_config *cfg,
                  eerl_twin **ret_twin);
void eerl_twin_free(eerl_twin *twin);

/* Requests clocks for the generation and training pools (colocated: phases); they take effect
 * at the next update boundary, as EE-RL changes clocks in the refit pause. EERL_ERANGE for a
 * clock the GPU does not support. The device view's lock/reset calls land here too. */
int eerl_twin_set_clocks(eerl_twin *twin, unsigned gen_mhz, unsigned train_mhz);

/* What one update did. Times in seconds of virtual time, energies in joules, summed over GPUs. */
struct eerl_twin_update {
    unsigned index;                     /* 0-based update number */
    double t_start;                     /* virtual time at the start of the update */
    double duration;                    /* update time */
    double energy_j;                    /* whole allocation */
    double gen_tokens;                  /* G: response tokens generated for this update's batch */
    double valid_tokens;                /* N: valid training tokens consumed (docs/twin.md) */
    double longest;                     /* L: longest response of the consumed batch, tokens */
    double phase_s[EERL_TWIN_PH_COUNT]; /* busy time per phase (wait: the waiting pools') */
    double phase_j[EERL_TWIN_PH_COUNT]; /* energy per phase, all GPUs */
    double gen_arrival, train_arrival;  /* seconds after t_start each pool finished its work */
    double crossing_tokens; /* in-flight: tokens of requests started under the previous clocks */
    unsigned policy_age;    /* 0 sync, 1 drained, 2 in-flight */
    unsigned gen_mhz, train_mhz;       /* requested (0 = governor) */
    double gen_eff_mhz, train_eff_mhz; /* clocks the phases actually ran at */
};

/* Advances virtual time through one update under the current clocks. */
int eerl_twin_step(eerl_twin *twin, struct eerl_twin_update *ret_update);
/* Virtual time now (end of the last update), seconds. */
double eerl_twin_now(const eerl_twin *twin);

/* The device view: n_gen + n_train GPUs (generation pool first). Counters and clocks follow the
 * "observation time" set by eerl_twin_observe_at (never beyond eerl_twin_now); energy counters
 * advance in millijoules every 100 ms like NVML's. The device borrows the twin: free the device
 * before the twin. */
int eerl_twin_device(eerl_twin *twin, eerl_device **ret_dev);
int eerl_twin_observe_at(eerl_twin *twin, double t_s);

/* Deterministic expected-value comparison of one clock pair against the governor on
 * (preset, mode, allocation, size) over updates [u_first, u_last], using the workload's expected
 * token counts: dq = throughput change in valid tokens/s, saving = reduction in whole-allocation
 * energy per valid token, both percent. The calibration tool fits through this function. */
int eerl_twin_expected(const eerl_twin_preset *preset, eerl_mode mode, unsigned n_gen,
                       unsigned n_train, char size, unsigned gen_mhz, unsigned train_mhz,
                       unsigned u_first, unsigned u_last, double *ret_dq_pct,
                       double *ret_saving_pct);

/* Totals of one simulated run over updates [u_first, u_last] (the run starts at update 0 with the
 * given clocks): valid tokens, seconds and joules. The experiment loop of `eerl sweep` builds the
 * Appendix A ratios from these, the same way it would from a run on real GPUs. */
struct eerl_twin_totals {
    double valid_tokens, seconds, joules;
    unsigned updates;
};
int eerl_twin_run(const eerl_twin_preset *preset, const struct eerl_twin_config *cfg,
                  unsigned gen_mhz, unsigned train_mhz, unsigned u_first, unsigned u_last,
                  struct eerl_twin_totals *ret_totals);

/* ---- workload drift scenarios --------------------------------------------------------------- */

/* Workload drift scenarios (docs/twin.md, "Workload drift scenarios"): how the response lengths
 * move over a run. STEADY, all zero, is the preset's own fitted drift: what the twin did before
 * scenarios existed. The others replace that drift by their shape: the median length at update u
 * is len_median * exp(shift(u)) and the lognormal shape len_sigma * spread(u). */
enum eerl_twin_scenario_kind {
    EERL_TWIN_SCENARIO_STEADY = 0,
    EERL_TWIN_SCENARIO_GROWING, /* median x factor over updates 0..span-1, log-linear, then held */
    EERL_TWIN_SCENARIO_COLLAPSING, /* median -> x factor, spread -> x spread, time constant tau
                                      updates */
    EERL_TWIN_SCENARIO_STEP,       /* median x factor from update `at` on (a dataset switch) */
    EERL_TWIN_SCENARIO_COUNT
};

struct eerl_twin_scenario {
    int kind;      /* enum eerl_twin_scenario_kind */
    double factor; /* growing, collapsing, step: the median's multiplier (see above) */
    double spread; /* collapsing: the lognormal shape's multiplier it falls to (1: unchanged) */
    double tau;    /* collapsing: time constant, updates */
    unsigned span; /* growing: updates it grows over */
    unsigned at;   /* step: the first update (0-based) of the new dataset */
};

/* "steady, growing, collapsing, step" (static). */
const char *eerl_twin_scenario_names(void);
/* The name of a kind ("?" for none). */
const char *eerl_twin_scenario_name(int kind);
/* A name to its kind; EERL_ENOENT for another name. */
int eerl_twin_scenario_parse(const char *name, int *ret_kind);

/* The scenario of a kind with its defaults for a run of `updates` updates: growing x2.5 over the
 * run, collapsing to x0.4 of the median and x0.5 of the spread with a 12-update time constant
 * (the H200 colocated-long run), step x2 at the run's middle. */
void eerl_twin_scenario_default(int kind, unsigned updates, struct eerl_twin_scenario *ret);

/* Gives the preset the scenario (its expected batches follow). EERL_EINVAL for an invalid one;
 * the preset is unchanged then. */
int eerl_twin_preset_set_scenario(eerl_twin_preset *p, const struct eerl_twin_scenario *s);

/* The model of a preset ("qwen3-30b-a3b", or a described model's name; static while the preset
 * lives). */
const char *eerl_twin_preset_model(const eerl_twin_preset *preset);
/* The batch of a workload size ('S', 'M', 'L'; EERL_EINVAL for another): P prompts x K responses,
 * B consumed by training. */
int eerl_twin_preset_batch(const eerl_twin_preset *preset, char size, unsigned *ret_p,
                           unsigned *ret_k, unsigned *ret_b);

/* ---- eerld's idle twin GPUs ----------------------------------------------------------------- */

/* A node of n idle simulated GPUs of one of the twin's GPU models, each with its own clock lock,
 * for eerld's `--devices twin:MODELxN` and its tests: no workload, no virtual time.
 * gpu: a twin GPU name ("h100", "gb200", "h200"; EERL_ENOENT otherwise), n: 1-1024 GPUs.
 * Clocks are the preset's supported list; an unlocked GPU reports the governor's peak clock,
 * a locked one its upper bound; power is the preset's idle draw at that clock; the energy
 * counter integrates it over CLOCK_MONOTONIC in whole millijoules, from a per-GPU offset. The
 * device owns its GPU table. */
int eerl_twin_idle_device(const char *gpu, unsigned n, eerl_device **ret_dev);

#ifdef __cplusplus
}
#endif
#endif

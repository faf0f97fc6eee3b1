/* The controller (EE-RL sections 4-6, Algorithm 1, Table 3, Appendix B): observations of RL
 * updates in, GPU clock settings and explainable event records out.
 *
 * Pure and deterministic: no I/O, threads, wall clock or NVML. The same configuration, clock list
 * and observation stream always give the same settings and events, so a run can be replayed from
 * its trace (src/trace, `eerl replay`). Memory is allocated once by eerl_ctl_new(); observing an
 * update allocates nothing.
 *
 * Typical use by a runtime:
 *
 *     eerl_ctl_config cfg;
 *     eerl_ctl_config_default(EERL_MODE_COLOCATED, &cfg);
 *     eerl_ctl_new(EERL_MODE_COLOCATED, &cfg, clocks, n_clocks, 1980, &ctl);
 *     eerl_ctl_setting(ctl, &s);                       // governor until calibration ends
 *     for each update: run it under s, fill an eerl_obs (obs.setting = what was applied),
 *         r = eerl_ctl_observe(ctl, &obs, &s);          // EERL_EINVAL: obs refused, s unchanged
 *         n = eerl_ctl_events(ctl, evs, cap);           // why: one or more records per update
 *
 * A handle is not thread-safe: use it from one thread at a time. Exact replay of a trace (the
 * decisions are compared bit for bit) needs the revisions of the decision rules that decided it,
 * which its header names: this eerl holds the current ones only, and eerl replay refuses a trace
 * of an older one, which the eerl version that wrote it replays (docs/trace-format.md).
 *
 * docs/internals/controller.md draws each state machine and names where each paper section lives.
 *
 * Stable and experimental parts (as zstd's ZSTD_STATIC_LINKING_ONLY): what this header shows by
 * default is the stable API. eerl_ctl_describe, the predictor's forward test and a few helpers
 * are shown only with EERL_EXPERIMENTAL defined before the first eerl header: include
 * eerl/experimental.h first. They may change in any release. eerl itself builds with them. The
 * experimental functions are in the static library only (libeerl.a): libeerl.so exports the
 * stable API. The controller's research knobs (the revisions of its decision rules, the
 * start-up updates the paper leaves out) are no fields of eerl_ctl_config, which is the same
 * struct in both views: they are experimental options of the table, set on a controller by name
 * (eerl_ctl_set_option, eerl/options.h). */
#ifndef EERL_CORE_H
#define EERL_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "eerl/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- clocks and settings ------------------------------------------------------------------ */

/* A clock value of 0 leaves that phase group (or the idle pool) to the default governor. */
#define EERL_CLOCK_GOVERNOR 0u

/* Phase groups that get their own SM clock. Log-prob runs at the training clock and refit under
 * both. Only the first two are used by the paper's strategies; the array leaves room for more. */
enum { EERL_GROUP_GEN = 0, EERL_GROUP_TRAIN = 1, EERL_GROUPS_MAX = 4 };

typedef struct eerl_setting {
    unsigned mhz[EERL_GROUPS_MAX]; /* SM clock per group, MHz, or EERL_CLOCK_GOVERNOR */
    unsigned idle_mhz;             /* clock of a pool while it waits; EERL_CLOCK_GOVERNOR = none */
} eerl_setting;

/* 1 when both settings are the same (every field). */
#ifdef EERL_EXPERIMENTAL /* eerl's own tools: libeerl.a only */
int eerl_setting_equal(const eerl_setting *a, const eerl_setting *b);
#endif
/* 1 when every group and the idle clock are left to the governor. */
#ifdef EERL_EXPERIMENTAL /* eerl's own tools: libeerl.a only */
int eerl_setting_is_governor(const eerl_setting *s);
#endif
/* The setting as eerl's messages print it: "1800/1620" or "gov/1185" (+ " idle 345"), into buf
 * (32 bytes hold any); returns buf. */
#ifdef EERL_EXPERIMENTAL /* eerl's own tools: libeerl.a only */
const char *eerl_setting_str(const eerl_setting *s, char *buf, size_t len);
#endif

/* ---- execution modes and strategies -------------------------------------------------------- */

typedef enum eerl_mode {
    EERL_MODE_COLOCATED = 0,     /* synchronous, generation and training take turns on one pool */
    EERL_MODE_DISAGGREGATED = 1, /* synchronous, separate pools, one waits for the other */
    EERL_MODE_DRAINED = 2,       /* asynchronous, responses finish before each weight update */
    EERL_MODE_INFLIGHT = 3,      /* asynchronous, generation continues across weight updates */
    EERL_MODE_COUNT
} eerl_mode;

/* The default strategy everywhere (eerl_ctl_config_default, eerl_rt_config_default, eerl sim,
 * eerl.Session, MultiNodeSession) is EERL_STRATEGY_EERL: it saves the most within the allowance
 * (docs/controller.md) and is the one that resumes from a saved state. */
typedef enum eerl_strategy {
    EERL_STRATEGY_PAPER = 0,    /* faithful EE-RL: each mode's state machine (docs/internals/) */
    EERL_STRATEGY_EERL = 1,     /* the default; eerl's own: run-level throughput budget, sequential
                                   tests */
    EERL_STRATEGY_GOVERNOR = 2, /* baseline: the default governor throughout */
    EERL_STRATEGY_STATIC = 3,   /* baseline: cfg.static_setting from the first update (oracle) */
    EERL_STRATEGY_GLOBAL_CLOCK = 4,  /* baseline: one clock for every group, downward sweep with
                                        a maximum-slowdown constraint (Zeus-like) */
    EERL_STRATEGY_LINEAR_SEARCH = 5, /* baseline: per group downward linear search, best of 5
                                        samples, one-shot lock (GEOPM-like) */
    EERL_STRATEGY_COUNT
} eerl_strategy;

/* "paper, eerl, governor, static, global-clock, linear-search": for error messages. */
#ifdef EERL_EXPERIMENTAL /* eerl's own tools: libeerl.a only */
const char *eerl_strategy_names(void);
#endif

/* "colocated", "disaggregated", "drained", "inflight" (and back; EERL_EINVAL for other text). */
EERL_EXPORT const char *eerl_mode_name(eerl_mode mode);
/* The valid mode names, comma-separated (static). */
#ifdef EERL_EXPERIMENTAL /* eerl's own tools: libeerl.a only */
const char *eerl_mode_names(void);
#endif
#ifdef EERL_EXPERIMENTAL /* eerl's own tools: libeerl.a only */
int eerl_mode_from_name(const char *name, eerl_mode *ret_mode);
#endif
EERL_EXPORT const char *eerl_strategy_name(eerl_strategy strategy);
#ifdef EERL_EXPERIMENTAL /* eerl's own tools: libeerl.a only */
int eerl_strategy_from_name(const char *name, eerl_strategy *ret_strategy);
#endif
/* 1 for the modes whose generation and training pools overlap in time (drained, in-flight). */
#ifdef EERL_EXPERIMENTAL /* eerl's own tools: libeerl.a only */
int eerl_mode_overlapped(eerl_mode mode);
#endif

/* ---- observations -------------------------------------------------------------------------- */

typedef enum eerl_phase {
    EERL_PHASE_GEN = 0,     /* generation (generation clock) */
    EERL_PHASE_LOGPROB = 1, /* log-probability computation (training clock) */
    EERL_PHASE_TRAIN = 2,   /* policy training (training clock) */
    EERL_PHASE_REFIT = 3,   /* weight transfer to the generation engine (both clocks) */
    EERL_PHASE_OTHER = 4,   /* reward, gaps, anything else */
    EERL_PHASE_COUNT
} eerl_phase;

enum { EERL_POOL_GEN = 0, EERL_POOL_TRAIN = 1, EERL_POOLS_MAX = 2 };

/* Observation flags. */
#define EERL_OBS_ARRIVALS 0x1u /* arrival_s[] is recorded (drained rendezvous) */
#define EERL_OBS_CARRYOVER                                                                         \
    0x2u /* in-flight: carries requests started under the previous setting                         \
          */
#define EERL_OBS_POOL_ENERGY 0x4u /* pool_energy_j[] is recorded */

/* One RL update as the runtime measured it. Times in seconds, energies in joules over the whole
 * allocation (every GPU, busy or waiting), token counts as counts.
 *
 * Synchronous modes: phases run in sequence, so the phase times add up to time_s. If
 * phase_time_s[OTHER] is 0 the remainder is taken as "other"; otherwise the sum must match
 * time_s within cfg.time_tolerance. Phase energies are the allocation's energy during each phase.
 * Asynchronous modes: phase time is the busy time of the pool that runs it within the update,
 * phase energy that pool's energy; each must not exceed the update's. Token counts are those of
 * the batch the update trains on, in every mode (in drained mode generated during the previous
 * update: eerl's strategy takes the generation work of an update from the next one's counts). */
typedef struct eerl_obs {
    uint64_t update;       /* update number, as the framework counts */
    double gen_tokens;     /* G: tokens generated */
    double valid_tokens;   /* N: valid training tokens (> 0) */
    double longest_tokens; /* L: tokens in the longest response */
    int policy_age;        /* -1 when unknown */
    double time_s;         /* whole update */
    double energy_j;       /* whole update, whole allocation */
    double phase_time_s[EERL_PHASE_COUNT];
    double phase_energy_j[EERL_PHASE_COUNT];
    double arrival_s[EERL_POOLS_MAX];     /* drained: each pool's arrival at the rendezvous, seconds
                                             after the update began (with EERL_OBS_ARRIVALS) */
    double pool_energy_j[EERL_POOLS_MAX]; /* with EERL_OBS_POOL_ENERGY */
    unsigned flags;                       /* EERL_OBS_* */
    eerl_setting setting;                 /* the setting that was in force during the update */
} eerl_obs;

/* Checks one observation for the mode: every number finite and non-negative, time and energy
 * positive, valid tokens positive, phase times adding up (sync) or within the update (async),
 * arrivals within the update, and the phase data each mode needs. Returns 0 or EERL_EINVAL and,
 * if why is not NULL, writes a reason naming the field and its value. tolerance: the relative
 * slack for times that must add up (cfg.time_tolerance). */
#ifdef EERL_EXPERIMENTAL /* eerl's own tools: libeerl.a only */
int eerl_obs_check(eerl_mode mode, const eerl_obs *obs, double tolerance, char *why,
                   size_t why_len);
#endif

/* ---- configuration (Table 3) --------------------------------------------------------------- */

#define EERL_BLOCK_CHOICES_MAX 4

/* Size-tagged (docs/internals/controller.md, "Configuration and the ABI"): size is the sizeof of
 * the struct the caller was compiled with, set by eerl_ctl_config_default / eerl_ctl_config_init.
 * A later release appends its new fields after the last one and reads a shorter (older)
 * struct's fields, taking the mode's defaults for the rest; a size it does not know is refused
 * (EERL_EINVAL). Start every configuration from eerl_ctl_config_default. */
typedef struct eerl_ctl_config {
    size_t size;
    eerl_strategy strategy;
    double allowed_loss;            /* 0.02: throughput may fall to 98% of the governor's */
    double min_saving;              /* 0: energy per valid token must fall by more than this */
    unsigned calibration_updates;   /* 15 (sync, drained), 45 (in-flight) */
    unsigned trial_updates;         /* 3: sync and drained trial length */
    unsigned governor_between;      /* 1: governor updates run between trials (references) */
    unsigned confirm_updates;       /* 6: fresh updates to confirm (sync, drained) */
    unsigned confirm_trials_max;    /* 2: in-flight confirmation blocks (1, a 2nd if marginal) */
    unsigned max_trials;            /* 16: trials per search round before it ends */
    unsigned grid_mhz;              /* 90: sync search grid */
    unsigned first_grid_mhz;        /* 50: async first pool grid */
    unsigned second_grid_mhz;       /* 100: async second pool grid */
    unsigned start_drop_gen_mhz;    /* sync start: generation this far below peak (180) */
    unsigned start_drop_train_mhz;  /* sync start: training this far below peak (360) */
    unsigned start_drop_first_mhz;  /* async: first pool starts this far below peak (300) */
    unsigned start_drop_second_mhz; /* async: second pool starts this far below peak (200) */
    unsigned feedback_step_mhz;     /* 45 sync, 50 drained, 0 in-flight */
    unsigned feedback_big_step_mhz; /* 90 sync (50 drained): step above big_loss */
    double big_loss;                /* 0.04 */
    double monitor_margin;          /* 0.01: lower a clock when loss < allowed_loss - margin */
    unsigned monitor_every;         /* 10 */
    unsigned monitor_window;        /* 20 usable updates */
    unsigned idle_mhz;              /* 345 disaggregated and drained, 0 colocated and in-flight */
    unsigned ref_window;            /* 32: most recent governor observations the predictor fits */
    unsigned refresh_updates;       /* 5: governor updates when the reference must be refreshed */
    double coverage_margin; /* 0.10: work within [min/(1+m), max*(1+m)] of the fit is covered */
    unsigned coverage_fail_limit; /* 3 uncovered updates among the last 10 trigger a refresh */
    unsigned block_choices[EERL_BLOCK_CHOICES_MAX]; /* in-flight block lengths: 3, 6, 12, 0 */
    double se_target;                        /* 0.02: in-flight standard-error target for a block */
    unsigned inflight_lock_candidate_blocks; /* 2 candidate blocks per governor block after lock */
    double time_tolerance;                   /* 0.05: phase times vs update time */
    /* ---- strategies beyond the paper (ignored by EERL_STRATEGY_PAPER) ---- */
    unsigned expected_updates; /* updates the job will run in all; 0: unknown (learned) */
    double budget_margin;      /* 0.003: the run-level budget aims this far inside the allowance */
    unsigned fast_calibration_updates; /* eerl strategy's calibration: 10 (16 in-flight) */
    eerl_setting static_setting;       /* EERL_STRATEGY_STATIC: the setting to hold */
    /* Phase groups with a clock of their own (the eerl strategy searches one clock per group;
     * the paper's strategies need exactly 2): 2 (generation, training) by default; PPO may add
     * e.g. "critic" as group 2. Names for events and the runtime's mapping of phases. */
    unsigned n_groups;
    char group_names[EERL_GROUPS_MAX][16];
} eerl_ctl_config;

/* Table 3's defaults for the mode with the default strategy EERL_STRATEGY_EERL (set
 * EERL_STRATEGY_PAPER for the paper's own controller), into the first size bytes of
 * *ret_cfg (size: the caller's sizeof(eerl_ctl_config); at least the 0.2 struct's), with
 * ret_cfg->size set. eerl_ctl_config_default passes the size of the header it is compiled
 * with (a macro: the function of that name is there for bindings, and writes this release's
 * struct). */
EERL_EXPORT int eerl_ctl_config_init(eerl_mode mode, eerl_ctl_config *ret_cfg, size_t size);
EERL_EXPORT int eerl_ctl_config_default(eerl_mode mode, eerl_ctl_config *ret_cfg);
#define eerl_ctl_config_default(mode, ret_cfg)                                                     \
    eerl_ctl_config_init((mode), (ret_cfg), sizeof(*(ret_cfg)))
/* Checks a configuration; EERL_EINVAL with a reason naming the bad field and value. */
EERL_EXPORT int eerl_ctl_config_check(const eerl_ctl_config *cfg, char *why, size_t why_len);

/* ---- states and events --------------------------------------------------------------------- */

typedef enum eerl_ctl_state {
    EERL_STATE_CALIBRATING = 0, /* governor clocks, observing only */
    EERL_STATE_SEARCHING = 1,   /* trials of candidates between governor observations */
    EERL_STATE_CONFIRMING = 2,  /* the best passing setting on fresh updates */
    EERL_STATE_LOCKED = 3,      /* a confirmed setting in force, monitored */
    EERL_STATE_MONITORING = 4,  /* locked, but measuring the governor (refresh or check block) */
    EERL_STATE_COUNT
} eerl_ctl_state;

typedef enum eerl_event_kind {
    EERL_EV_REJECT = 0, /* observation refused (EERL_EINVAL): reason says why */
    EERL_EV_HOLD,       /* update taken in, setting unchanged */
    EERL_EV_SKIP,       /* update taken in but left out of decisions (carry-over, mismatch) */
    EERL_EV_CALIBRATED, /* predictor fitted on the calibration updates */
    EERL_EV_BLOCK,      /* in-flight block length chosen from calibration noise */
    EERL_EV_PROPOSE,    /* a candidate trial begins */
    EERL_EV_TRIAL,      /* a trial's verdict */
    EERL_EV_CONFIRM,    /* a confirmation's verdict */
    EERL_EV_ROUND,      /* async: a search round ended with this setting for its pool */
    EERL_EV_LOCK,       /* a setting is locked */
    EERL_EV_MONITOR,    /* a monitoring window's or check block's verdict */
    EERL_EV_ADJUST,     /* the monitor changed the locked setting */
    EERL_EV_REFRESH,    /* new governor measurements begin */
    EERL_EV_KIND_COUNT
} eerl_event_kind;

typedef enum eerl_verdict {
    EERL_VERDICT_NONE = 0,
    EERL_VERDICT_PASS = 1,
    EERL_VERDICT_FAIL = 2,
} eerl_verdict;

#define EERL_REASON_MAX 160

/* One decision. Ratios are candidate / governor (NaN when they do not apply):
 * time_ratio and energy_ratio are the estimates the decision used (on the common governor
 * reference workload, or the bracketing governor blocks in-flight); meas_time_ratio and
 * meas_energy_ratio are the measured totals over the predicted governor totals at the observed
 * work. Throughput ratio = 1 / time_ratio; pass needs it >= 1 - allowed_loss and
 * energy_ratio < 1 - min_saving. */
typedef struct eerl_event {
    uint64_t update; /* the update whose observation produced it */
    eerl_event_kind kind;
    eerl_ctl_state state;   /* the controller's state after the decision */
    eerl_setting candidate; /* the setting the event is about */
    eerl_setting next;      /* the setting requested for the next update */
    eerl_verdict verdict;
    unsigned n_updates; /* updates the verdict rests on */
    double time_ratio;
    double energy_ratio;
    double meas_time_ratio;
    double meas_energy_ratio;
    char reason[EERL_REASON_MAX];
} eerl_event;

EERL_EXPORT const char *eerl_state_name(eerl_ctl_state state);
#ifdef EERL_EXPERIMENTAL /* eerl's own tools: libeerl.a only */
const char *eerl_event_kind_name(eerl_event_kind kind);
#endif
#ifdef EERL_EXPERIMENTAL /* eerl's own tools: libeerl.a only */
const char *eerl_verdict_name(eerl_verdict verdict);
#endif
#ifdef EERL_EXPERIMENTAL /* eerl's own tools: libeerl.a only */
int eerl_state_from_name(const char *name, eerl_ctl_state *ret);
#endif
#ifdef EERL_EXPERIMENTAL /* eerl's own tools: libeerl.a only */
int eerl_event_kind_from_name(const char *name, eerl_event_kind *ret);
#endif
#ifdef EERL_EXPERIMENTAL /* eerl's own tools: libeerl.a only */
int eerl_verdict_from_name(const char *name, eerl_verdict *ret);
#endif

/* ---- the controller ------------------------------------------------------------------------ */

typedef struct eerl_ctl eerl_ctl;

/* Builds a controller. cfg NULL takes eerl_ctl_config_default(mode). clocks: the GPU's supported
 * SM clocks in MHz, any order, duplicates ignored (every clock the controller emits is one of
 * them). governor_peak_mhz: the clock the governor runs at (1980 on H100/H200); search clocks at
 * or above it mean "governor". EERL_EINVAL for a bad mode, config (see eerl_ctl_config_check),
 * an empty clock list or a peak of 0; EERL_ENOMEM. */
EERL_EXPORT int eerl_ctl_new(eerl_mode mode, const eerl_ctl_config *cfg, const unsigned *clocks,
                             size_t n_clocks, unsigned governor_peak_mhz, eerl_ctl **ret_ctl);
/* NULL is a no-op. */
EERL_EXPORT void eerl_ctl_free(eerl_ctl *ctl);

/* Takes one update's observation and decides the setting for the next update. On EERL_EINVAL
 * (bad observation) ret_next is untouched, a REJECT event says why, and the controller carries on
 * with the next observation as if this one had not happened. */
EERL_EXPORT int eerl_ctl_observe(eerl_ctl *ctl, const eerl_obs *obs, eerl_setting *ret_next);

/* The setting requested for the next update (governor before the first observation). */
EERL_EXPORT int eerl_ctl_setting(const eerl_ctl *ctl, eerl_setting *ret_setting);

/* Moves up to cap pending events, oldest first, into buf; returns how many. Events not yet taken
 * are kept (up to 256; older ones are dropped and counted in eerl_ctl_get_status). */
EERL_EXPORT size_t eerl_ctl_events(eerl_ctl *ctl, eerl_event *buf, size_t cap);

typedef struct eerl_ctl_status {
    eerl_mode mode;
    eerl_strategy strategy;
    eerl_ctl_state state;
    eerl_setting setting;        /* requested for the next update */
    int locked;                  /* a confirmed setting exists */
    eerl_setting locked_setting; /* valid when locked */
    uint64_t observed;           /* observations accepted */
    uint64_t rejected;           /* observations refused */
    uint64_t trials;             /* trials judged */
    uint64_t refreshes;          /* governor refreshes started */
    uint64_t events_dropped;     /* events lost because nobody took them */
    unsigned block_updates;      /* in-flight block length (0 before it is chosen) */
    unsigned references;         /* governor observations in the predictor's fit */
} eerl_ctl_status;

EERL_EXPORT int eerl_ctl_get_status(const eerl_ctl *ctl, eerl_ctl_status *ret_status);

#ifdef EERL_EXPERIMENTAL
/* Experimental. The construction arguments, for writing a trace header that rebuilds an identical
 * controller (its experimental options: eerl_ctl_get_option). ret_cfg receives this release's
 * whole struct (size = sizeof(eerl_ctl_config) of this header; NULL: not wanted). clocks receives
 * the deduplicated clock list, highest first (EERL_EOVERFLOW if cap is short). */
int eerl_ctl_describe(const eerl_ctl *ctl, eerl_ctl_config *ret_cfg, unsigned *clocks, size_t cap,
                      size_t *ret_n_clocks, unsigned *ret_peak_mhz);
#endif

/* ---- resume ------------------------------------------------------------------------------- */

/* The controller's learned state (its governor references, whether it locked and at what) in a
 * byte buffer, to keep next to a training checkpoint. tag: the caller's identity of the hardware
 * and allocation the state was learned on (e.g. "NVIDIA H100 80GB HBM3 x8/32"), at most 63
 * characters. buf NULL or cap too small: EERL_EOVERFLOW with *ret_len the size needed. The
 * buffer is for the same eerl version on the same host architecture. */
EERL_EXPORT int eerl_ctl_save(const eerl_ctl *ctl, const char *tag, void *buf, size_t cap,
                              size_t *ret_len);
/* Restores a saved state into a fresh controller (before its first observation), which then
 * skips calibration and starts at the saved lock (or searches at once if there was none).
 * A state learned elsewhere is refused and the controller starts a fresh search, with a HOLD
 * event "resume refused: <why>" among the first update's events: EERL_ESTATE for another tag
 * (GPU model or allocation), mode, strategy, number of groups, clock list or governor peak,
 * another configuration (allowed loss, grids, groups: everything but the horizon fields
 * expected_updates, calibration lengths and ref_window), or too few references;
 * EERL_EVERSION for a state of another eerl version or state format; EERL_ENOTSUP for a
 * strategy that does not resume (only the eerl strategy does, in every mode).
 * EERL_ESTATE without an event when the controller has observed already; EERL_EPARSE (no event,
 * controller unchanged) for a buffer that is not a saved state or is damaged (a checksum covers
 * every byte; a state of format 2, saved before checksums, is read unchecked and, on success,
 * why says so). why says which. */
EERL_EXPORT int eerl_ctl_restore(eerl_ctl *ctl, const char *tag, const void *buf, size_t len,
                                 char *why, size_t why_len);

/* A prior from earlier jobs (docs/controller.md "Starting from earlier jobs: the prior"): n
 * states saved by eerl_ctl_save in earlier jobs. The entries learned on this job's key (tag,
 * mode, strategy, groups, clock list, configuration) that hold a lock are taken; a setting of
 * each clock's lower median of their locks becomes this job's first candidate once its own
 * calibration is done, if the governor's time per valid token it measured agrees with theirs
 * within the noise. A candidate that passes the judge's test is locked; a calibration that
 * disagrees or a candidate that fails starts a fresh search, with a HOLD event "prior refused:
 * <expected, found>". Call once, before the first observation, and not with eerl_ctl_restore.
 * Returns 0 (why: how many matched, at what), 1 when none matches (a HOLD event "prior: none of
 * N ..." and why say the first entry's reason), EERL_EPARSE for an entry that is not a saved
 * state or is damaged (why: "entry I: ..."), EERL_ENOTSUP for a strategy without a search to
 * skip, EERL_ESTATE after the first observation or a second call. */
EERL_EXPORT int eerl_ctl_set_prior(eerl_ctl *ctl, const char *tag, const void *const *bufs,
                                   const size_t *lens, size_t n, char *why, size_t why_len);

#ifdef EERL_EXPERIMENTAL
/* ---- experimental: the governor predictor (Eq. 2, Appendix B) -------------------------------- */

typedef struct eerl_forward_result {
    unsigned blocks;              /* forward-test blocks evaluated */
    double tput_err_model_pct;    /* median |error| of block throughput, token-work model */
    double tput_err_constant_pct; /* the same for a constant reference (past mean rate) */
    double energy_err_model_pct;  /* median |error| of block energy per valid token */
    double energy_err_constant_pct;
} eerl_forward_result;

/* Appendix B's forward test over governor observations: fit the last k, predict the next m,
 * advance by m. obs must be valid for the mode (refused with EERL_EINVAL otherwise); n >= k + m.
 * scratch-free: allocates its own working memory. */
int eerl_predictor_forward_test(eerl_mode mode, const eerl_obs *obs, size_t n, unsigned k,
                                unsigned m, eerl_forward_result *ret_result);

#endif /* EERL_EXPERIMENTAL */

#ifdef __cplusplus
}
#endif
#endif

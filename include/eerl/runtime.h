/* The runtime session: what an RL framework (or the simulated cluster) talks to. One session per
 * job. It is told when each pool begins and ends a phase and when an update ends with its work
 * (G, N, L, policy version); it asks the meter for each interval's energy, builds the update's
 * observation, asks the controller for the next setting and applies that setting at the next
 * phase boundary through its clock owner: generation at the generation clock, log-prob and
 * training at the training clock, refit of each pool at that pool's own clock, a waiting pool of
 * separate pools at the idle clock. It writes the trace (docs/trace-format.md): a header, a "run"
 * line, then one line per update, flushed every update, so a crash loses at most the update in
 * progress. Closing it restores every clock the owner changed.
 *
 * Time comes from the injected clock (eerl_clock_fn), so the same session runs on NVML in real
 * time or on the twin device in virtual time. The session owns its meter, controller and trace
 * file; it borrows the device the caller gives (keep it open until eerl_rt_free), or opens and
 * owns the node's own when given none. Not thread-safe: one thread calls a session (the
 * framework's driver loop); the meter's own sampler thread and, through eerld, the connection's
 * heartbeat thread are the only others. docs/runtime.md walks through it. */
#ifndef EERL_RUNTIME_H
#define EERL_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include "eerl/clock.h"
#include "eerl/core.h"
#include "eerl/device.h"
#include "eerl/estimate.h"
#include "eerl/export.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct eerl_rt eerl_rt;

/* Most GPUs eerl_rt_config's fixed arrays gen_gpus/train_gpus hold; a pool of any size goes in
 * gen_pool/train_pool instead. */
#define EERL_RT_POOL_GPUS_MAX 64
/* Most GPUs a session's pools hold together: a count no machine has, refused with a message
 * naming it. Below it the session has no limit of its own (memory and the cost of an update
 * grow linearly with the GPUs: docs/runtime.md). */
#define EERL_RT_GPUS_LIMIT (1u << 20)

/* The one owner of the node's clocks the session goes through: the in-process actuator, or a
 * client of the eerld daemon, which owns the clocks of a node and leases them
 * (eerl_agent_clock_owner). With eerl_rt_config.owner NULL the session picks by one rule
 * (eerl_rt_config.eerld below). A lock of mhz == EERL_CLOCK_GOVERNOR means "hand back to the
 * governor". Every function returns 0 or an EERL_E* code. The session never frees ctx. */
typedef struct eerl_rt_clock_owner {
    void *ctx;
    /* Locks GPUs gpus[0..n-1] at mhz (or resets them when mhz is EERL_CLOCK_GOVERNOR). */
    int (*lock)(void *ctx, const unsigned *gpus, size_t n, unsigned mhz);
    /* Resets every GPU this owner changed for the session. */
    int (*restore)(void *ctx);
    /* Detail of the last failure ("" if none); may be NULL. */
    const char *(*last_error)(void *ctx);
} eerl_rt_clock_owner;

/* Whether a session goes through eerld (eerl_rt_config.eerld). */
typedef enum eerl_rt_eerld {
    EERL_RT_EERLD_AUTO = 0, /* when $EERL_SOCKET is set or the socket exists (the default) */
    EERL_RT_EERLD_OFF = 1,  /* never: NVML in this process, the in-process actuator */
    EERL_RT_EERLD_ON = 2    /* always: eerl_rt_new fails, naming the socket, when it cannot */
} eerl_rt_eerld;

/* Size-tagged like eerl_ctl_config (core.h): size is the caller's sizeof(eerl_rt_config), set
 * by eerl_rt_config_default; fields a later release adds go at the end. */
typedef struct eerl_rt_config {
    size_t size;
    eerl_mode mode;
    /* Pools as device GPU indices. Colocated: one set (train_gpus may repeat it or be empty).
     * Up to EERL_RT_POOL_GPUS_MAX per pool here; any number through gen_pool/train_pool. */
    unsigned gen_gpus[EERL_RT_POOL_GPUS_MAX];
    size_t n_gen;
    unsigned train_gpus[EERL_RT_POOL_GPUS_MAX];
    size_t n_train;
    double allowed_loss; /* (0, 0.5): throughput may fall to 1 - allowed_loss of the governor's */
    eerl_strategy strategy;
    int observe_only;           /* measure and decide, never change a clock */
    const char *trace_path;     /* NULL: no trace. Created (truncated) by eerl_rt_new. */
    const char *trace_run_json; /* NULL or a JSON object text merged into the trace's "run" line */
    const char *producer;       /* trace header's producer; NULL: "eerl <version> runtime" */
    /* Controller configuration; NULL: Table 3's defaults for the mode with allowed_loss and
     * strategy above. When given, its allowed_loss and strategy are used as they are. */
    const eerl_ctl_config *ctl_cfg;
    unsigned governor_peak_mhz; /* 0: the highest supported clock of the first GPU */
    eerl_clock_fn clock;        /* NULL: eerl_clock_monotonic */
    void *clock_ctx;
    unsigned meter_interval_ms; /* 0: the meter's default (200 ms) */
    int sample_thread; /* 1: the meter samples in real time on its own thread; 0: the caller calls
                          eerl_rt_sample (virtual time). Phase boundaries always take a sample. */
    const eerl_rt_clock_owner *owner; /* NULL: eerld or the actuator, by the rule of eerld */
    /* Resume (docs/controller.md "Resume"): a state saved by eerl_rt_save_state, as a file or
     * the checkpoint directory holding eerl-controller.state. NULL: a fresh start. A missing
     * file, or a state learned elsewhere (another GPU model, allocation, clock list, mode,
     * strategy, controller configuration or eerl version), starts a fresh search and says why
     * (eerl_rt_resumed, the trace's "resume" record, a "resume refused" event of the first
     * update); an unreadable or damaged file fails eerl_rt_new with why naming the file. */
    const char *resume_from;
    /* The hardware and allocation the state belongs to; NULL: "<GPU 0's name> <n_gen>/<n_train>"
     * ("<name> <n>" colocated), followed by " <job_model>" when one is given. At most 63
     * characters. */
    const char *resume_tag;
    /* Added after 0.2.0. Pools of any size: when not NULL, the n_gen (n_train) GPUs of the pool are
     * read from this array instead of gen_gpus (train_gpus). Read by eerl_rt_new only. */
    const unsigned *gen_pool;
    const unsigned *train_pool;
    /* Added after 0.2.0. A session across nodes (a remote device: eerl_device_open_remote): the
     * node each device GPU is on, node_of[gpu] for gpu < n_node_of (at least the device's GPU
     * count). The trace's update lines then give each node's energy over the update
     * ("node_energy_j") and the meter flags of each node that has any ("node_meter_flags").
     * NULL: one node. Read by eerl_rt_new only. */
    const unsigned *node_of;
    size_t n_node_of;
    /* Added after 0.2.0. A prior from earlier jobs (docs/controller.md "Starting from earlier
     * jobs: the prior"): a state saved by eerl_rt_save_state, or a directory of them (files
     * named *.state, and the eerl-controller.state of each subdirectory). The entries saved on
     * this job's key (resume_tag's GPU model and pool sizes with job_model, the mode, strategy,
     * clocks and controller configuration) give the setting the job verifies after its own
     * calibration instead of searching, that calibration cut to 6 governor updates (8 in
     * flight) when its governor time agrees with theirs (eerl_rt_prior says what was taken). None
     * matching: a fresh search, said in eerl_rt_prior and a "prior: none ..." event. A path that
     * does not exist or cannot be read, or an entry that is not a saved state, fails eerl_rt_new
     * naming it; so does a prior together with resume_from (a job continues itself or starts from
     * others, not both). NULL: none. */
    const char *prior;
    /* The model the job trains, as the user names it ("qwen3-30b-a3b"): part of the key of the
     * states it saves (appended to the default resume_tag). NULL: not part of the key. */
    const char *job_model;
    /* Whether the session goes through eerld, the daemon that owns a node's clocks
     * (docs/eerld.md, "When a session goes through eerld"), one rule for every caller:
     * - owner given: never (the caller's owner sets the clocks);
     * - a device of the eerld backend (eerl_agent_device): always, through its connection;
     * - else eerld: EERL_RT_EERLD_OFF never; EERL_RT_EERLD_ON always; EERL_RT_EERLD_AUTO (the
     *   default) when eerld_socket names a socket that exists, or, without it, when
     *   eerl_agent_wanted() ($EERL_SOCKET set, or the default socket exists); AUTO is for the
     *   node's GPUs only (no device, or an NVML one), never a twin or remote device.
     * Through eerld, the session leases its GPUs at eerl_rt_new (a GPU another client holds
     * fails it, naming the GPU and the socket) and sets their clocks through the lease; a lost
     * link is a gap (docs/runtime.md, "When eerld stops answering"), not an error. An
     * observe-only session takes no lease. eerl_rt_new with no device (dev NULL) opens the
     * node's GPUs itself: through eerld, its GPUs as eerld serves them, read through the same
     * connection (so the leases and the reads name GPUs alike); else NVML in this process.
     * An observe-only session connects only for those reads. */
    eerl_rt_eerld eerld;
    const char *eerld_socket; /* NULL: $EERL_SOCKET, else EERL_AGENT_DEFAULT_SOCKET */
} eerl_rt_config;

/* Defaults for the mode: allowed loss 0.02, strategy
 * EERL_STRATEGY_EERL (the default everywhere, see eerl_strategy), no trace, real time, no GPUs,
 * into the first size bytes of *ret_cfg (the caller's sizeof; at least the 0.2 struct's), size set.
 * eerl_rt_config_default is a macro passing the compiled header's size (the function of that
 * name, for bindings, writes this release's struct). */
EERL_EXPORT int eerl_rt_config_init(eerl_mode mode, eerl_rt_config *ret_cfg, size_t size);
EERL_EXPORT int eerl_rt_config_default(eerl_mode mode, eerl_rt_config *ret_cfg);
#define eerl_rt_config_default(mode, ret_cfg)                                                      \
    eerl_rt_config_init((mode), (ret_cfg), sizeof(*(ret_cfg)))

/* Opens a session: checks the configuration (EERL_EINVAL), builds the meter over both pools,
 * the controller over the first GPU's supported clocks and the clock owner, creates the trace.
 * dev: the GPUs the session reads, borrowed; NULL: this node's, opened and owned by the session
 * (eerld's through its socket, or NVML; cfg->eerld says which). On failure nothing is left
 * behind (no trace file, no connection) and, if why is not NULL, why names the bad value or the
 * failing step ("allowed loss 0.7 must be in (0, 0.5)", "cannot create trace 'x/y.jsonl': No
 * such file or directory", "eerld at /run/eerl/eerld.sock: leasing GPUs 0, 1: ..."). */
EERL_EXPORT int eerl_rt_new(eerl_device *dev, const eerl_rt_config *cfg, char *why, size_t why_len,
                            eerl_rt **ret_rt);

/* Restores every clock (eerl_rt_close), then frees. NULL is a no-op.
 *
 * Fork: a session belongs to the process that opened it. In a forked child (fork without exec)
 * phase, sample and update calls fail with EERL_ESTATE; eerl_rt_close and eerl_rt_free restore
 * nothing, join nothing and leave the trace unwritten (the child only closes its copy of the
 * trace's descriptor and of the eerld connection), so the child neither hangs nor touches the
 * parent's GPUs. */
EERL_EXPORT void eerl_rt_free(eerl_rt *rt);

/* Restores every clock the owner changed, stops the meter thread and closes the trace. Returns
 * the first error. Further phase or update calls fail with EERL_ESTATE. Idempotent. */
EERL_EXPORT int eerl_rt_close(eerl_rt *rt);

/* Both pools at one boundary (a refit): one meter mark for the two, each pool's clock set as
 * its own call would. Added after 0.2.0. */
#define EERL_RT_POOL_BOTH 2u

/* A pool (EERL_POOL_GEN / EERL_POOL_TRAIN, or EERL_RT_POOL_BOTH; colocated: any) begins or ends a
 * phase at the clock's now. Begin applies the setting in force for that pool and phase; end puts
 * a pool of separate pools at the idle clock until its next phase (when the setting has one). A
 * begin of a phase the pool (either pool, for both) is already in, or an end of one it is not
 * in, is EERL_ESTATE, and changes nothing. */
EERL_EXPORT int eerl_rt_phase_begin(eerl_rt *rt, unsigned pool, eerl_phase phase);
EERL_EXPORT int eerl_rt_phase_end(eerl_rt *rt, unsigned pool, eerl_phase phase);

/* Takes a meter sample at the clock's now (virtual-time sampling; a no-op cost otherwise). */
EERL_EXPORT int eerl_rt_sample(eerl_rt *rt);

/* The work of one update, as the framework counts it. */
typedef struct eerl_rt_work {
    uint64_t update;        /* the framework's update number */
    double gen_tokens;      /* G */
    double valid_tokens;    /* N */
    double longest_tokens;  /* L */
    int64_t policy_version; /* version of the policy that generated the consumed batch; -1 unknown.
                               The age in the observation is update - policy_version. */
} eerl_rt_work;

/* What the session did at an update's end. */
typedef struct eerl_rt_update_info {
    eerl_obs obs;           /* the observation given to the controller */
    int accepted;           /* 0 when the controller refused it (a reject event says why) */
    eerl_setting requested; /* what the controller had requested for this update */
    eerl_setting next;      /* requested for the next update (applied at the next boundary) */
    eerl_ctl_state state;
    size_t n_events;      /* controller events of this update (all are in the trace) */
    unsigned meter_flags; /* EERL_METER_* of the update's energy reading */
} eerl_rt_update_info;

/* Ends the update at the clock's now: closes open phases' accounting (a phase still open is
 * EERL_ESTATE), measures, observes, writes the trace line and flushes it. A refused observation
 * is not an error of this call (info->accepted = 0). EERL_EIO: the trace could not be written
 * (the session carries on without it; eerl_rt_last_error says why). ret_info may be NULL. */
EERL_EXPORT int eerl_rt_update_end(eerl_rt *rt, const eerl_rt_work *work,
                                   eerl_rt_update_info *ret_info);

/* The setting the session applies from the next phase boundary on (observe-only: the governor's,
 * which is what really runs). */
EERL_EXPORT int eerl_rt_applied_setting(const eerl_rt *rt, eerl_setting *ret_setting);

/* The clock (MHz, or EERL_CLOCK_GOVERNOR) a pool runs a phase at under the applied setting. */
EERL_EXPORT int eerl_rt_phase_clock(const eerl_rt *rt, unsigned pool, eerl_phase phase,
                                    unsigned *ret_mhz);

/* The controller's events of the last update (the same ones the trace holds), oldest first;
 * valid until the next eerl_rt_update_end. Returns how many. */
EERL_EXPORT size_t eerl_rt_events(const eerl_rt *rt, const eerl_event **ret_events);

/* The controller's status (state, lock, counts). */
EERL_EXPORT int eerl_rt_status(const eerl_rt *rt, eerl_ctl_status *ret_status);
/* What eerl saved so far on this run, estimated from the run alone (eerl/estimate.h): every
 * update after the controller's calibration against the governor predicted from the governor
 * updates before it, with a 90% interval. An observe-only session reads 0 within the interval:
 * the self-check to run before letting eerl change a clock. The trace's closing "estimate" line
 * holds the whole run's (docs/runtime.md, "What eerl saved"). */
EERL_EXPORT int eerl_rt_estimate(const eerl_rt *rt, eerl_estimate *ret_estimate);

/* Saves the controller's learned state (governor references, the lock) to path, atomically
 * (a crash mid-save leaves the previous file), for a later session's resume_from. path: a file,
 * or an existing directory (the training checkpoint's), which gets eerl-controller.state. Call
 * it where the framework saves its checkpoint. Works after eerl_rt_close too. 0 or EERL_E*
 * (eerl_rt_last_error names the file). */
EERL_EXPORT int eerl_rt_save_state(eerl_rt *rt, const char *path);

/* Whether this session resumed: 1 resumed from a saved state, 0 not (fresh search, or no
 * resume_from). *ret_detail (may be NULL) says why in words ("" without resume_from); valid for
 * the session's life. EERL_EINVAL for a NULL session. */
EERL_EXPORT int eerl_rt_resumed(const eerl_rt *rt, const char **ret_detail);

/* Whether this session took a prior (eerl_rt_config.prior): 1 taken (its setting is the first
 * candidate once calibrated; the trace's events say whether it was verified or refused), 0 not
 * (no prior, or no entry matched). *ret_detail (may be NULL) says what was read and matched in
 * words ("" without a prior); valid for the session's life. EERL_EINVAL for a NULL session. */
EERL_EXPORT int eerl_rt_prior(const eerl_rt *rt, const char **ret_detail);

/* Stops the session for a cause outside it, which leaves the allocation's energy unaccounted for
 * (a node of a session across nodes lost, or failing): appends one last trace line
 * {"type": type, "update": the update in progress (the last one ended + 1), "open_phases": the
 * phases a pool is in, generation first (or detail_json's "open_phases", an array: a caller that
 * stops inside a boundary call knows what was open when it failed), and every other key of
 * detail_json}, then closes
 * (eerl_rt_close). type: 1 to 31 lower-case letters and '_', none of the types the trace format
 * defines ("header", "update", "run", "resume"); detail_json: NULL or a JSON object text.
 * A bad type or detail is EERL_EINVAL (nothing written, the session still open). Otherwise the
 * session is closed whatever happens; the return is the first error of writing the line
 * (EERL_EIO) or of closing. */
EERL_EXPORT int eerl_rt_abort(eerl_rt *rt, const char *type, const char *detail_json);

/* What the last eerl_rt_update_end has to tell a person, in words ("" if nothing; the library
 * prints nothing itself). Today one notice, once per session, at the update whose observation
 * calibrated the controller: when the governor predictor leaves more of the update time
 * unexplained than a trial can resolve within the allowance (the work G, N, L does not explain
 * the time, so clock changes cannot be judged), the share, what it means for the controller
 * and the usual cause; the trace has it as an "unexplained" line (docs/runtime.md). Valid until
 * the next eerl_rt_update_end. Added after 0.2.0. */
EERL_EXPORT const char *eerl_rt_notice(const eerl_rt *rt);

/* Detail of the last failing call ("" if none). Valid until the next call. */
EERL_EXPORT const char *eerl_rt_last_error(const eerl_rt *rt);

#ifdef __cplusplus
}
#endif
#endif

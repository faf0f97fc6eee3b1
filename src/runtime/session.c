/* The runtime session (include/eerl/runtime.h): phase marks in, observations to the controller,
 * settings out through the clock owner, one trace line per update. Owns the meter, the
 * controller, the trace FILE, the node (node.c: the device when it opened the node's own, the
 * eerld connection when it made one) and (when the configuration names no owner and the session
 * does not go through eerld) the in-process clock owner; borrows the caller's device. Must not
 * decide anything itself: every clock choice is the controller's, every energy figure the
 * meter's, whether to go through eerld node.c's. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "eerl/agent.h"
#include "eerl/error.h"
#include "eerl/meter.h"
#include "eerl/runtime.h"
#include "eerl/version.h"
#include "agent/client.h"
#include "core/config.h"
#include "runtime/config.h"
#include "runtime/node.h"
#include "runtime/observe.h"
#include "runtime/owner.h"
#include "runtime/prior.h"
#include "runtime/resume.h"
#include "runtime/tracing.h"
#include "runtime/unexplained.h"
#include "trace/estimate_line.h"
#include "trace/trace.h"

#define EV_CAP 256 /* the controller keeps at most 256 pending events */

struct eerl_rt {
    eerl_rt_config cfg;
    eerl_device *dev;
    eerl_meter *meter;
    eerl_ctl *ctl;
    struct eerl__rt_owner *own; /* ours, when cfg.owner was NULL and eerld is not used */
    struct eerl__rt_node node;  /* the device read and the eerld connection (node.h) */
    eerl_rt_clock_owner owner;
    struct eerl__tracing trace;
    int closed, colocated, thread, started;
    pid_t pid;     /* the process that opened it; a forked child's copy is inert (eerl_rt_close) */
    unsigned *all; /* every GPU of the pools, generation first (ours) */
    size_t n_all;
    unsigned *pool_gpus[2]; /* each pool's GPUs (ours; colocated: both the same list) */
    size_t n_pool[2];
    unsigned *node_at; /* across nodes: the node of all[i] (ours); NULL on one node */
    unsigned n_nodes;
    unsigned long long next_update; /* the update in progress: the last one ended + 1 */
    eerl_setting applied;
    eerl_setting prev_setting;
    int have_prev;
    int update_open;
    struct eerl__rt_books books; /* the update in progress */
    unsigned cur_mhz[2];         /* what the owner has each pool at */
    int cur_known[2];
    eerl_event *ev;
    size_t n_ev;
    char tag[64]; /* the hardware/allocation identity of saved states */
    int resumed;  /* 1: the controller started from a saved state */
    char resume_detail[512];
    int prior; /* 1: the controller took a prior from earlier jobs */
    char prior_detail[512];
    char err[512];
    int explained;                    /* 1: the calibration's check ran (explain_once) */
    double capped[EERL_PHASE_COUNT];  /* the last update's share of each phase at the power cap */
    unsigned long long n_self_slowed; /* updates not shown to the controller (self_slowed) */
    int summarized;                   /* the trace's closing estimate line is written */
    char notice[1536];                /* what the last update end has to tell a person, or "" */
    /* The eerld link the session goes through (rt->node.link), NULL without one, or with a
     * clock owner of the caller's; see link_notice. */
    eerl_agent *link;
    uint64_t link_lost; /* its losses seen so far */
    int gap;            /* 1: the lease is lost and not taken again yet */
    int unjudged;       /* 1: the update in progress ran (partly) in a gap */
    int gap_told;       /* 1: the notice of this gap was given */
    char gap_why[256];
    struct eerl__est est;           /* the run's own estimate of what it saved (core/estimate.h) */
    struct eerl__est_acc acc;       /* its totals so far */
    unsigned long long last_update; /* the last update ended (0: none) */
};

static int fail(eerl_rt *rt, int e, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int trace_summary(eerl_rt *rt);
static int fail(eerl_rt *rt, int e, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(rt->err, sizeof(rt->err), fmt, ap);
    va_end(ap);
    return e;
}

static double now(const eerl_rt *rt)
{
    return rt->cfg.clock(rt->cfg.clock_ctx);
}

/* A saved state's file: path itself, or path/eerl-controller.state for a directory. */
static int state_path(const char *path, char *buf, size_t len)
{
    struct stat sb;

    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return eerl__resume_path(path, buf, len);
    return (size_t)snprintf(buf, len, "%s", path) >= len ? EERL_EOVERFLOW : 0;
}

/* The identity of the hardware a state was learned on: GPU model and pool sizes, and the job's
 * model when named. */
static int make_tag(eerl_rt *rt, const char *given, const char *model, char *why, size_t len)
{
    char name[96] = "";
    int e;

    if (given) {
        if (strlen(given) >= sizeof(rt->tag)) {
            snprintf(why, len, "resume tag '%s' is longer than %zu characters", given,
                     sizeof(rt->tag) - 1);
            return EERL_EINVAL;
        }
        snprintf(rt->tag, sizeof(rt->tag), "%s", given);
        return 0;
    }
    e = eerl_device_name(rt->dev, rt->all[0], name, sizeof(name));
    if (e < 0)
        snprintf(name, sizeof(name), "unknown GPU");
    if (rt->colocated)
        snprintf(rt->tag, sizeof(rt->tag), "%.50s %zu", name, rt->n_pool[0]);
    else
        snprintf(rt->tag, sizeof(rt->tag), "%.50s %zu/%zu", name, rt->n_pool[0], rt->n_pool[1]);
    if (model && model[0]) {
        size_t n = strlen(rt->tag);
        snprintf(rt->tag + n, sizeof(rt->tag) - n, " %s", model);
    }
    return 0;
}

/* Reads and applies cfg->resume_from before the first update. On success *ret_state holds the
 * bytes read (NULL when there was no file) for the trace's resume record. */
static int resume(eerl_rt *rt, const char *from, unsigned char **ret_state, size_t *ret_len,
                  char *why, size_t len)
{
    char path[4096];
    int e;

    *ret_state = NULL;
    *ret_len = 0;
    if (state_path(from, path, sizeof(path)) < 0) {
        snprintf(why, len, "resume path '%s' is too long", from);
        return EERL_EINVAL;
    }
    e = eerl__resume_read(path, ret_state, ret_len, rt->resume_detail, sizeof(rt->resume_detail));
    if (e == 0)
        e = eerl__resume_apply(rt->ctl, rt->tag, *ret_state, *ret_len, path, rt->resume_detail,
                               sizeof(rt->resume_detail));
    if (e < 0) {
        snprintf(why, len, "resuming: %s", rt->resume_detail);
        free(*ret_state);
        *ret_state = NULL;
        return e;
    }
    rt->resumed = e == 0;
    return 0;
}

/* Where the controller starts: a saved state of this job (resume_from), the states of earlier
 * jobs (prior), or a fresh search. */
static int start_from(eerl_rt *rt, const eerl_rt_config *cfg, unsigned char **saved,
                      size_t *saved_len, char *why, size_t why_len)
{
    int e;

    if (cfg->resume_from && cfg->prior) {
        snprintf(why, why_len,
                 "prior '%s' and resume_from '%s' together: a job continues its own state or "
                 "starts from earlier jobs', not both",
                 cfg->prior, cfg->resume_from);
        return EERL_EINVAL;
    }
    if (cfg->resume_from) {
        e = resume(rt, cfg->resume_from, saved, saved_len, why, why_len);
        if (e < 0)
            return e;
    }
    if (cfg->prior) {
        e = eerl__prior_load(rt->ctl, rt->tag, cfg->prior, rt->prior_detail,
                             sizeof(rt->prior_detail));
        if (e < 0) {
            snprintf(why, why_len, "%s", rt->prior_detail);
            return e;
        }
        rt->prior = e == 0;
    }
    return 0;
}

/* ---- construction: one step per resource, in the order they depend on each other ---------- */

/* The session itself: its copy of the configuration (the pointers it does not keep cleared)
 * and the pools' GPU lists. */
static int rt_alloc(eerl_device *dev, const eerl_rt_config *cfg, char *why, size_t why_len,
                    eerl_rt **ret_rt)
{
    eerl_rt *rt = calloc(1, sizeof(*rt));
    size_t n_all = cfg->n_gen + (cfg->mode == EERL_MODE_COLOCATED ? 0 : cfg->n_train);

    if (!rt || !(rt->ev = calloc(EV_CAP, sizeof(*rt->ev))) ||
        !(rt->all = malloc(n_all * sizeof(*rt->all)))) {
        if (rt)
            free(rt->ev);
        free(rt);
        snprintf(why, why_len, "out of memory");
        return EERL_ENOMEM;
    }
    rt->cfg = *cfg;
    rt->cfg.trace_path = NULL;
    rt->cfg.trace_run_json = NULL;
    rt->cfg.producer = NULL;
    rt->cfg.ctl_cfg = NULL;
    rt->cfg.resume_from = NULL;
    rt->cfg.resume_tag = NULL;
    rt->cfg.gen_pool = NULL;
    rt->cfg.train_pool = NULL;
    rt->cfg.node_of = NULL;
    rt->cfg.prior = NULL;
    rt->cfg.job_model = NULL;
    rt->cfg.eerld_socket = NULL;
    if (!rt->cfg.clock)
        rt->cfg.clock = eerl_clock_monotonic;
    rt->dev = dev;
    rt->pid = getpid();
    rt->colocated = cfg->mode == EERL_MODE_COLOCATED;
    /* One list, generation first: the pools are its two parts (colocated: both the whole). */
    memcpy(rt->all, eerl__rt_gen_list(cfg), cfg->n_gen * sizeof(unsigned));
    if (!rt->colocated)
        memcpy(rt->all + cfg->n_gen, eerl__rt_train_list(cfg), cfg->n_train * sizeof(unsigned));
    rt->n_all = n_all;
    rt->pool_gpus[0] = rt->all;
    rt->n_pool[0] = cfg->n_gen;
    rt->pool_gpus[1] = rt->colocated ? rt->all : rt->all + cfg->n_gen;
    rt->n_pool[1] = rt->colocated ? cfg->n_gen : cfg->n_train;
    eerl__books_start(&rt->books, 0);
    rt->next_update = 1;
    *ret_rt = rt;
    return 0;
}

/* Across nodes: the node of each GPU of the pools, from cfg->node_of (every device GPU's). */
static int init_nodes(eerl_rt *rt, const eerl_rt_config *cfg, char *why, size_t why_len)
{
    unsigned count = 0;
    size_t i;

    if (!cfg->node_of)
        return 0;
    if (eerl_device_count(rt->dev, &count) < 0 || cfg->n_node_of < count) {
        snprintf(why, why_len, "node_of names the node of %zu GPUs, but the device has %u",
                 cfg->n_node_of, count);
        return EERL_EINVAL;
    }
    rt->node_at = malloc(rt->n_all * sizeof(*rt->node_at));
    if (!rt->node_at) {
        snprintf(why, why_len, "out of memory");
        return EERL_ENOMEM;
    }
    for (i = 0; i < rt->n_all; i++) {
        rt->node_at[i] = cfg->node_of[rt->all[i]];
        if (rt->node_at[i] >= rt->n_nodes)
            rt->n_nodes = rt->node_at[i] + 1;
    }
    return 0;
}

/* The controller: Table 3 for the mode (or the caller's configuration) over the first GPU's
 * clocks, then the saved state it resumes from. *saved: the state's bytes, for the trace. */
static int init_controller(eerl_rt *rt, const eerl_rt_config *cfg, unsigned char **saved,
                           size_t *saved_len, char *why, size_t why_len)
{
    unsigned clocks[EERL_DEVICE_CLOCKS_MAX], peak;
    eerl_ctl_config cc;
    size_t n_clocks = 0, i;
    int e;

    if (cfg->ctl_cfg) {
        if (eerl__ctl_config_import(cfg->mode, cfg->ctl_cfg, &cc) < 0)
            return eerl_ctl_config_check(cfg->ctl_cfg, why, why_len);
    } else {
        eerl_ctl_config_default(cfg->mode, &cc);
        cc.allowed_loss = cfg->allowed_loss;
        cc.strategy = cfg->strategy;
    }
    rt->cfg.allowed_loss = cc.allowed_loss;
    rt->cfg.strategy = cc.strategy;
    if (eerl_ctl_config_check(&cc, why, why_len) < 0)
        return EERL_EINVAL;
    e = eerl_device_supported_sm_clocks(rt->dev, rt->all[0], clocks, EERL_DEVICE_CLOCKS_MAX,
                                        &n_clocks);
    if (e < 0 || n_clocks == 0) {
        snprintf(why, why_len, "reading GPU %u's supported clocks: %s", rt->all[0],
                 e < 0 ? eerl_device_last_error(rt->dev) : "the list is empty");
        return e < 0 ? e : EERL_ENOTSUP;
    }
    peak = cfg->governor_peak_mhz;
    if (!peak)
        for (i = 0; i < n_clocks; i++)
            if (clocks[i] > peak)
                peak = clocks[i];
    e = eerl_ctl_new(cfg->mode, &cc, clocks, n_clocks, peak, &rt->ctl);
    if (e == 0)
        e = eerl__est_init(&rt->est, cfg->mode);
    if (e < 0) {
        snprintf(why, why_len, "building the controller: %s", eerl_strerror(e));
        return e;
    }
    eerl__est_acc_init(&rt->acc);
    e = make_tag(rt, cfg->resume_tag, cfg->job_model, why, why_len);
    if (e < 0)
        return e;
    e = start_from(rt, cfg, saved, saved_len, why, why_len);
    if (e < 0)
        return e;
    eerl_ctl_setting(rt->ctl, &rt->applied);
    if (cfg->observe_only)
        memset(&rt->applied, 0, sizeof(rt->applied));
    return 0;
}

/* The meter over every GPU of the pools, on the injected clock when there is one. */
static int init_meter(eerl_rt *rt, const eerl_rt_config *cfg, char *why, size_t why_len)
{
    int e;

    e = eerl_meter_new(rt->dev, rt->all, rt->n_all, cfg->meter_interval_ms, &rt->meter);
    if (e < 0) {
        snprintf(why, why_len, "building the meter: %s (%s)", eerl_strerror(e),
                 eerl_device_last_error(rt->dev));
        return e;
    }
    if (!cfg->clock)
        return 0;
    e = eerl_meter_set_clock(rt->meter, cfg->clock, cfg->clock_ctx);
    if (e < 0) {
        snprintf(why, why_len, "meter clock: %s", eerl_strerror(e));
        return e;
    }
    /* An injected clock means virtual time (the simulated cluster): the automatic energy
     * interval times real CPU cost and would make the read schedule depend on the host, so a
     * replayed or repeated simulation reads its counters on a fixed schedule instead. */
    e = eerl_meter_set_energy_interval(rt->meter, 2.0);
    if (e < 0)
        snprintf(why, why_len, "meter energy interval: %s", eerl_strerror(e));
    return e;
}

/* The clock owner: the caller's; else, where the session goes through eerld (node.c decides),
 * eerld's lease, taken here for every GPU of the pools (observe-only: none); else our own
 * actuator. */
static int init_owner(eerl_rt *rt, const eerl_rt_config *cfg, char *why, size_t why_len)
{
    int e;

    if (cfg->owner) {
        rt->owner = *cfg->owner;
    } else if ((e = eerl__rt_node_lease(&rt->node, cfg, rt->all, rt->n_all, why, why_len)) < 0) {
        return e;
    } else if (rt->node.link && !cfg->observe_only) {
        eerl_agent_clock_owner(rt->node.link, &rt->owner);
    } else {
        e = eerl__rt_owner_new(rt->dev, cfg->observe_only, &rt->own);
        if (e < 0) {
            snprintf(why, why_len, "building the clock actuator: %s", eerl_strerror(e));
            return e;
        }
        /* One in-process session per GPU, as eerld allows one lease per GPU. */
        if (!cfg->observe_only &&
            (e = eerl__rt_owner_claim(rt->own, rt->all, rt->n_all, why, why_len)) < 0)
            return e;
        rt->owner = *eerl__rt_owner_iface(rt->own);
    }
    if (!rt->owner.lock || !rt->owner.restore) {
        snprintf(why, why_len, "the clock owner lacks lock or restore");
        return EERL_EINVAL;
    }
    if (!cfg->owner)
        rt->link = rt->node.link;
    if (rt->link) {
        int up;

        eerl__agent_link(rt->link, &rt->link_lost, &up, NULL, 0);
    }
    return 0;
}

/* The trace: header, run line, resume record (tracing.c). On failure a file this session
 * created is removed. */
static int init_trace(eerl_rt *rt, const eerl_rt_config *cfg, const unsigned char *saved,
                      size_t saved_len, char *why, size_t why_len)
{
    struct eerl__tracing_run run = {rt->cfg.mode,
                                    rt->cfg.observe_only,
                                    rt->cfg.allowed_loss,
                                    eerl_device_backend(rt->dev),
                                    {rt->pool_gpus[0], rt->pool_gpus[1]},
                                    {rt->n_pool[0], rt->n_pool[1]},
                                    cfg->trace_run_json};
    struct eerl__tracing_resume res = {cfg->resume_from, rt->tag, rt->resume_detail,
                                       rt->resumed,      saved,   saved_len};
    char producer[64];

    if (!cfg->trace_path)
        return 0;
    snprintf(producer, sizeof(producer), "eerl %s runtime", eerl_version_string());
    return eerl__tracing_start(&rt->trace, cfg->trace_path, rt->ctl,
                               cfg->producer ? cfg->producer : producer, &run,
                               cfg->resume_from ? &res : NULL, why, why_len);
}

/* The meter's sampling thread, when asked for; drops the trace if it cannot start. */
static int start_sampling(eerl_rt *rt, const eerl_rt_config *cfg, char *why, size_t why_len)
{
    int e;

    if (!cfg->sample_thread)
        return 0;
    e = eerl_meter_start(rt->meter);
    if (e < 0) {
        snprintf(why, why_len, "starting the meter thread: %s", eerl_strerror(e));
        if (rt->trace.f)
            eerl__tracing_drop(&rt->trace);
        return e;
    }
    rt->thread = 1;
    return 0;
}

/* The configuration checked (the options before any device is asked anything), the device
 * the session reads (the caller's, or the node's opened by node.c), its pools checked against
 * it, and the session allocated over it. */
static int rt_open(eerl_device *dev, const eerl_rt_config *caller_cfg, eerl_rt_config *full,
                   char *why, size_t why_len, eerl_rt **ret_rt)
{
    struct eerl__rt_node node;
    int e;

    e = eerl__rt_config_resolve(caller_cfg, full, why, why_len);
    if (e < 0)
        return e;
    e = eerl__rt_node_open(&node, dev, full, why, why_len);
    if (e < 0)
        return e;
    e = eerl__rt_config_check_pools(node.dev, full, why, why_len);
    if (e == 0)
        e = rt_alloc(node.dev, full, why, why_len, ret_rt);
    if (e < 0) {
        eerl__rt_node_close(&node);
        return e;
    }
    (*ret_rt)->node = node;
    return 0;
}

/* Everything a session holds, in the order that frees users before what they use. */
static void rt_destroy(eerl_rt *rt)
{
    eerl__rt_owner_free(rt->own);
    eerl_meter_free(rt->meter);
    eerl__rt_node_close(&rt->node); /* the device, then the connection: eerld resets what is left */
    eerl_ctl_free(rt->ctl);
    eerl__est_free(&rt->est);
    free(rt->ev);
    free(rt->all);
    free(rt->node_at);
    free(rt);
}

int eerl_rt_new(eerl_device *dev, const eerl_rt_config *caller_cfg, char *why, size_t why_len,
                eerl_rt **ret_rt)
{
    eerl_rt_config full;
    const eerl_rt_config *cfg = &full;
    unsigned char *saved = NULL;
    size_t saved_len = 0;
    char dummy[8];
    eerl_rt *rt = NULL;
    int e;

    if (!why) {
        why = dummy;
        why_len = sizeof(dummy);
    }
    if (why_len)
        why[0] = '\0';
    if (!caller_cfg || !ret_rt) {
        snprintf(why, why_len, "no configuration or result pointer");
        return EERL_EINVAL;
    }
    e = rt_open(dev, caller_cfg, &full, why, why_len, &rt);
    if (e < 0)
        return e;
    e = init_nodes(rt, cfg, why, why_len);
    if (e < 0)
        goto fail;
    e = init_controller(rt, cfg, &saved, &saved_len, why, why_len);
    if (e < 0)
        goto fail;
    e = init_meter(rt, cfg, why, why_len);
    if (e < 0)
        goto fail;
    e = init_owner(rt, cfg, why, why_len);
    if (e < 0)
        goto fail;
    /* The trace last, so a failure above leaves no file behind. */
    e = init_trace(rt, cfg, saved, saved_len, why, why_len);
    if (e < 0)
        goto fail;
    e = start_sampling(rt, cfg, why, why_len);
    if (e < 0)
        goto fail;
    free(saved);
    *ret_rt = rt;
    return 0;
fail:
    free(saved);
    eerl__rt_node_unlease(&rt->node); /* a lease taken on the caller's connection */
    rt_destroy(rt);
    return e;
}

/* A forked child's copy: the clocks, the meter's thread and the trace's buffered lines are the
 * parent's. Nothing is restored, joined or flushed; the child only drops its trace descriptor. */
static int close_forked_copy(eerl_rt *rt)
{
    rt->closed = 1;
    rt->thread = 0;
    eerl__tracing_forget(&rt->trace);
    return 0;
}

int eerl_rt_close(eerl_rt *rt)
{
    int e = 0, r;

    if (!rt)
        return EERL_EINVAL;
    if (rt->closed)
        return 0;
    if (rt->pid != getpid())
        return close_forked_copy(rt);
    rt->closed = 1;
    r = rt->owner.restore(rt->owner.ctx);
    if (r < 0) {
        e = r;
        fail(rt, r, "restoring clocks: %s",
             rt->owner.last_error ? rt->owner.last_error(rt->owner.ctx) : eerl_strerror(r));
    }
    rt->cur_known[0] = rt->cur_known[1] = 0;
    if (rt->thread) {
        eerl_meter_stop(rt->meter);
        rt->thread = 0;
    }
    if (trace_summary(rt) < 0 && e == 0)
        e = fail(rt, EERL_EIO, "writing the trace's closing estimate line: %s", strerror(errno));
    if (eerl__tracing_close(&rt->trace) != 0 && e == 0)
        e = fail(rt, EERL_EIO, "closing the trace: %s", strerror(errno));
    return e;
}

void eerl_rt_free(eerl_rt *rt)
{
    if (!rt)
        return;
    eerl_rt_close(rt);
    rt_destroy(rt);
}

int eerl_rt_save_state(eerl_rt *rt, const char *path)
{
    char file[4096], why[512] = "";
    int e;

    if (!rt)
        return EERL_EINVAL;
    if (!path || !path[0])
        return fail(rt, EERL_EINVAL, "save state: no path given");
    if (state_path(path, file, sizeof(file)) < 0)
        return fail(rt, EERL_EINVAL, "save state: path '%s' is too long", path);
    e = eerl__resume_save(rt->ctl, rt->tag, file, why, sizeof(why));
    if (e < 0)
        return fail(rt, e, "saving the controller state to '%s': %s", file,
                    why[0] ? why : eerl_strerror(e));
    return 0;
}

int eerl_rt_resumed(const eerl_rt *rt, const char **ret_detail)
{
    if (!rt)
        return EERL_EINVAL;
    if (ret_detail)
        *ret_detail = rt->resume_detail;
    return rt->resumed;
}

int eerl_rt_prior(const eerl_rt *rt, const char **ret_detail)
{
    if (!rt)
        return EERL_EINVAL;
    if (ret_detail)
        *ret_detail = rt->prior_detail;
    return rt->prior;
}

const char *eerl_rt_last_error(const eerl_rt *rt)
{
    return rt ? rt->err : "";
}

static int phase_clock(const eerl_rt *rt, const eerl_setting *s, unsigned pool, eerl_phase phase,
                       unsigned *ret)
{
    switch (phase) {
    case EERL_PHASE_GEN:
        *ret = s->mhz[EERL_GROUP_GEN];
        return 0;
    case EERL_PHASE_LOGPROB:
    case EERL_PHASE_TRAIN:
        *ret = s->mhz[EERL_GROUP_TRAIN];
        return 0;
    case EERL_PHASE_REFIT: /* each pool under its own clock; one pool: it follows training */
        *ret = (rt->colocated || pool == EERL_POOL_TRAIN) ? s->mhz[EERL_GROUP_TRAIN]
                                                          : s->mhz[EERL_GROUP_GEN];
        return 0;
    default:
        return EERL_EINVAL;
    }
}

int eerl_rt_phase_clock(const eerl_rt *rt, unsigned pool, eerl_phase phase, unsigned *ret_mhz)
{
    unsigned v;

    if (!rt || !ret_mhz || pool >= EERL_POOLS_MAX)
        return EERL_EINVAL;
    if (phase_clock(rt, &rt->applied, pool, phase, &v) < 0)
        return EERL_EINVAL;
    *ret_mhz = v;
    return 0;
}

int eerl_rt_applied_setting(const eerl_rt *rt, eerl_setting *ret_setting)
{
    if (!rt || !ret_setting)
        return EERL_EINVAL;
    *ret_setting = rt->applied;
    return 0;
}

size_t eerl_rt_events(const eerl_rt *rt, const eerl_event **ret_events)
{
    if (!rt || !ret_events)
        return 0;
    *ret_events = rt->ev;
    return rt->n_ev;
}

int eerl_rt_status(const eerl_rt *rt, eerl_ctl_status *ret_status)
{
    if (!rt || !ret_status)
        return EERL_EINVAL;
    return eerl_ctl_get_status(rt->ctl, ret_status);
}

/* Whether the eerld link was lost since the last look: a missed deadline or a broken stream
 * closed it (src/agent/client.c), so eerld reset our GPUs to the governor and ended the lease.
 * The session then goes on without raising, the update in progress is not judged (its energy
 * and time mix two clocks), and the next boundaries take the lease again (link_relink). Returns
 * rt->gap. */
static int link_notice(eerl_rt *rt)
{
    uint64_t lost = 0;
    int up = 0;

    if (!rt->link || eerl__agent_link(rt->link, &lost, &up, NULL, 0) < 0)
        return 0;
    if (lost != rt->link_lost) {
        rt->link_lost = lost;
        if (!rt->gap)
            rt->gap_told = 0;
        rt->gap = 1;
        rt->unjudged = 1;
        rt->cur_known[0] = rt->cur_known[1] = 0;
        eerl__agent_link(rt->link, &lost, &up, rt->gap_why, sizeof(rt->gap_why));
    }
    return rt->gap;
}

/* In a gap with the link up again (the heartbeat thread dialled it): lease every GPU of the
 * session again; the next phase boundaries lock them. A refusal (the old connection's lease not
 * yet ended) is tried again at the next boundary. */
static void link_relink(eerl_rt *rt)
{
    uint64_t lost = 0;
    int up = 0;

    if (!link_notice(rt) || eerl__agent_link(rt->link, &lost, &up, NULL, 0) < 0 || !up)
        return;
    if (!rt->cfg.observe_only && eerl_agent_lease(rt->link, rt->all, rt->n_all) < 0) {
        link_notice(rt);
        return;
    }
    rt->gap = 0;
}

/* Puts pool p at mhz through the owner, unless it is there already. */
static int pool_lock(eerl_rt *rt, unsigned p, unsigned mhz)
{
    int e;

    if (rt->cfg.observe_only || rt->gap) /* a gap: the governor's until the lease is back */
        return 0;
    if (rt->cur_known[p] && rt->cur_mhz[p] == mhz)
        return 0;
    e = rt->owner.lock(rt->owner.ctx, rt->pool_gpus[p], rt->n_pool[p], mhz);
    if (e < 0 && link_notice(rt))
        return 0;
    if (e < 0)
        return fail(rt, e, "locking the %s pool at %u MHz: %s", p ? "training" : "generation", mhz,
                    rt->owner.last_error ? rt->owner.last_error(rt->owner.ctx) : "");
    rt->cur_mhz[p] = mhz;
    rt->cur_known[p] = 1;
    if (rt->colocated) {
        rt->cur_mhz[1 - p] = mhz;
        rt->cur_known[1 - p] = 1;
    }
    return 0;
}

/* 0, or EERL_ESTATE said in the last error: the session is closed, or this is a forked child's
 * copy of it. */
static int check_open(eerl_rt *rt)
{
    if (rt->pid != getpid())
        return fail(rt, EERL_ESTATE,
                    "this session belongs to process %ld; a forked child (pid %ld) cannot use it",
                    (long)rt->pid, (long)getpid());
    if (rt->closed)
        return fail(rt, EERL_ESTATE, "the session is closed");
    return 0;
}

/* A phase boundary: the meter reads the energy counters at the clock's now (under its tick lock,
 * so it stays in order with the sampler thread), and that time is the boundary's. */
static int mark(eerl_rt *rt, double *ret_t)
{
    double t = 0;
    int e = eerl_meter_mark(rt->meter, &t);

    if (e < 0)
        return fail(rt, e, "meter mark at %.6f s: %s (the clock must never go back)", now(rt),
                    eerl_strerror(e));
    *ret_t = t;
    return 0;
}

int eerl_rt_sample(eerl_rt *rt)
{
    double t;
    int e;

    if (!rt)
        return EERL_EINVAL;
    if (check_open(rt) < 0)
        return EERL_ESTATE;
    t = now(rt);
    e = eerl_meter_tick(rt->meter, t);
    if (e < 0)
        return fail(rt, e, "meter sample at %.6f s: %s", t, eerl_strerror(e));
    return 0;
}

static const char *phase_name(eerl_phase ph)
{
    static const char *const n[EERL_PHASE_COUNT] = {"generation", "logprob", "training", "refit",
                                                    "other"};
    return (unsigned)ph < EERL_PHASE_COUNT ? n[ph] : "unknown";
}

static int check_call(eerl_rt *rt, unsigned *pool, eerl_phase phase)
{
    if (check_open(rt) < 0)
        return EERL_ESTATE;
    if (*pool >= EERL_POOLS_MAX && *pool != EERL_RT_POOL_BOTH)
        return fail(rt, EERL_EINVAL,
                    "pool %u is unknown (0 generation, 1 training, %u both at one boundary)", *pool,
                    EERL_RT_POOL_BOTH);
    if ((unsigned)phase >= EERL_PHASE_COUNT)
        return fail(rt, EERL_EINVAL, "phase %d is unknown", (int)phase);
    if (rt->colocated)
        *pool = 0;
    return 0;
}

/* The pools a (checked) call names, into ps: one, or both (EERL_RT_POOL_BOTH). */
static unsigned call_pools(unsigned pool, unsigned ps[2])
{
    ps[0] = pool == EERL_RT_POOL_BOTH ? 0 : pool;
    ps[1] = 1;
    return pool == EERL_RT_POOL_BOTH ? 2 : 1;
}

int eerl_rt_phase_begin(eerl_rt *rt, unsigned pool, eerl_phase phase)
{
    unsigned ps[2], n, i, mhz;
    double t = 0;
    int e;

    if (!rt)
        return EERL_EINVAL;
    e = check_call(rt, &pool, phase);
    if (e < 0 || (unsigned)phase >= EERL_PHASE_COUNT) /* the second: for the compiler's bounds */
        return e < 0 ? e : EERL_EINVAL;
    link_relink(rt);
    n = call_pools(pool, ps);
    for (i = 0; i < n; i++)
        if (rt->books.in_phase[ps[i]][phase])
            return fail(rt, EERL_ESTATE, "%s pool is already in phase %s",
                        ps[i] ? "training" : "generation", phase_name(phase));
    /* The setting decided at the last update's end takes effect here, before the work. */
    for (i = 0; i < n; i++)
        if (phase_clock(rt, &rt->applied, ps[i], phase, &mhz) == 0) {
            e = pool_lock(rt, ps[i], mhz);
            if (e < 0)
                return e;
        }
    e = mark(rt, &t);
    if (e < 0)
        return e;
    if (!rt->started) {
        rt->started = 1;
        rt->books.t_update0 = t;
    }
    rt->update_open = 1;
    for (i = 0; i < n; i++)
        eerl__books_begin(&rt->books, ps[i], phase, t);
    return 0;
}

/* A pool's books at the end of a phase at t, and the clock it goes to: the interrupted phase's
 * when one resumes, else the idle clock for a pool of separate pools that now waits. */
static int end_books(eerl_rt *rt, unsigned pool, eerl_phase phase, double t)
{
    eerl_phase outer;
    unsigned mhz;

    if (eerl__books_end(&rt->books, pool, phase, t, &outer)) {
        if (phase_clock(rt, &rt->applied, pool, outer, &mhz) == 0)
            return pool_lock(rt, pool, mhz);
        return 0;
    }
    if (!rt->colocated && !eerl__books_busy(&rt->books, pool) &&
        rt->applied.idle_mhz != EERL_CLOCK_GOVERNOR)
        return pool_lock(rt, pool, rt->applied.idle_mhz);
    return 0;
}

int eerl_rt_phase_end(eerl_rt *rt, unsigned pool, eerl_phase phase)
{
    unsigned ps[2], n, i;
    double t = 0;
    int e, first = 0;

    if (!rt)
        return EERL_EINVAL;
    e = check_call(rt, &pool, phase);
    if (e < 0 || (unsigned)phase >= EERL_PHASE_COUNT) /* the second: for the compiler's bounds */
        return e < 0 ? e : EERL_EINVAL;
    link_relink(rt);
    n = call_pools(pool, ps);
    for (i = 0; i < n; i++)
        if (!rt->books.in_phase[ps[i]][phase])
            return fail(rt, EERL_ESTATE, "%s pool is not in phase %s",
                        ps[i] ? "training" : "generation", phase_name(phase));
    e = mark(rt, &t);
    if (e < 0)
        return e;
    for (i = 0; i < n; i++) { /* both pools' books, whatever a clock change of one says */
        e = end_books(rt, ps[i], phase, t);
        if (e < 0 && first == 0)
            first = e;
    }
    return first;
}

/* The observation of the update ending at t_end (observe.c), with the setting it ran under. */
static int build_obs(eerl_rt *rt, const eerl_rt_work *w, double t_end, eerl_obs *o, unsigned *flags,
                     double busy[2])
{
    struct eerl__obs_source src = {rt->meter,
                                   rt->cfg.mode,
                                   rt->colocated,
                                   {rt->pool_gpus[0], rt->pool_gpus[1]},
                                   {rt->n_pool[0], rt->n_pool[1]}};
    char why[sizeof(rt->err)];
    int e =
        eerl__obs_build(&rt->books, &src, w, t_end, o, flags, busy, rt->capped, why, sizeof(why));

    if (e < 0)
        return fail(rt, e, "%s", why);
    o->setting = rt->applied;
    if (rt->cfg.mode == EERL_MODE_INFLIGHT && rt->have_prev &&
        !eerl_setting_equal(&rt->prev_setting, &rt->applied))
        o->flags |= EERL_OBS_CARRYOVER;
    return 0;
}

/* The update line, with the runtime's own record (interval, per-pool busy time, meter flags;
 * across nodes, each node's energy and flags) added under "runtime"; trace readers ignore keys
 * they do not know. */
static int trace_update(eerl_rt *rt, const eerl_obs *o, const eerl_setting *req, size_t n_ev,
                        double t_end, const double busy[2], unsigned mflags,
                        const struct eerl__est_upd *est, const char *excluded)
{
    struct eerl__tracing_record rec = {
        rt->books.t_update0, t_end,   {busy[0], busy[1]}, rt->colocated, mflags, 0, NULL, NULL, est,
        rt->capped,          excluded};
    double *sum = NULL;
    unsigned *nfl = NULL;
    int e = 0;

    if (rt->node_at) {
        sum = calloc(rt->n_nodes, sizeof(*sum));
        nfl = calloc(rt->n_nodes, sizeof(*nfl));
        e = !sum || !nfl ? EERL_ENOMEM
                         : eerl__obs_nodes(rt->meter, rt->books.t_update0, t_end, rt->node_at,
                                           rt->n_all, rt->n_nodes, sum, nfl);
        rec.n_nodes = rt->n_nodes;
        rec.node_energy_j = sum;
        rec.node_flags = nfl;
    }
    if (e == 0)
        e = eerl__tracing_update(&rt->trace, o, req, rt->ev, n_ev, &rec);
    free(sum);
    free(nfl);
    return e;
}

/* The work does not explain the time: the estimate cannot be judged. */
static void unexplained_estimate(eerl_rt *rt, const struct eerl_trace_unexplained *u)
{
    char why[200];

    snprintf(why, sizeof(why),
             "the work does not explain the update time: the governor predictor leaves %.1f%% of "
             "it unexplained (a trial would need %u updates)",
             100.0 * u->share, u->need);
    eerl__est_acc_unexplained(&rt->acc, why);
}

/* The forward governor prediction made final at this update's end (core/estimate.h: the
 * update's own, or in the asynchronous modes the previous update's), added to the run's totals.
 * Returns whether there is one (ret). */
static int estimate_step(eerl_rt *rt, const eerl_obs *o, int accepted, size_t n_ev,
                         struct eerl__est_upd *ret)
{
    size_t k;
    int calibrated = 0, made;

    for (k = 0; k < n_ev; k++)
        calibrated |= rt->ev[k].kind == EERL_EV_CALIBRATED;
    made = eerl__est_step(&rt->est, o, accepted, calibrated, ret);
    if (made)
        eerl__est_acc_add(&rt->acc, ret);
    rt->last_update = o->update;
    return made;
}

/* The run's estimate so far: the final records, and the provisional one of an update still
 * waiting for the next one's work (asynchronous modes). */
static void run_estimate(const eerl_rt *rt, eerl_estimate *ret)
{
    struct eerl__est_acc a = rt->acc;
    struct eerl__est_upd u;

    if (eerl__est_pending(&rt->est, &u))
        eerl__est_acc_add(&a, &u);
    eerl__est_acc_result(&a, ret);
}

int eerl_rt_estimate(const eerl_rt *rt, eerl_estimate *ret_estimate)
{
    if (!rt || !ret_estimate)
        return EERL_EINVAL;
    run_estimate(rt, ret_estimate);
    return 0;
}

/* The trace's closing "estimate" line: the whole run's estimate, once (a stopped session writes
 * it before its stop line, which stays the trace's last). */
static int trace_summary(eerl_rt *rt)
{
    eerl_estimate est;
    char *line = NULL;
    int e;

    if (!rt->trace.f || rt->last_update == 0 || rt->summarized)
        return 0;
    rt->summarized = 1;
    run_estimate(rt, &est);
    e = eerl__trace_est_summary_line(&est, rt->last_update, &line);
    if (e == 0)
        e = eerl__tracing_append(&rt->trace, line);
    free(line);
    return e;
}

/* Once, at the update whose observation calibrated the controller: when the governor predictor
 * leaves more of the update time unexplained than a trial can resolve (runtime/unexplained.h),
 * the trace gets an "unexplained" line and the caller a notice (eerl_rt_notice). Returns the
 * trace's write error, if any. */
static int explain_once(eerl_rt *rt, unsigned long long update, size_t n_ev)
{
    struct eerl_trace_unexplained u;
    char *line = NULL;
    size_t k;
    int e;

    for (k = 0; k < n_ev && rt->ev[k].kind != EERL_EV_CALIBRATED; k++)
        ;
    if (rt->explained || k == n_ev)
        return 0;
    rt->explained = 1;
    if (eerl__unexpl_measure(rt->ctl, &u) < 0 || !u.too_noisy)
        return 0; /* fewer references than it takes (EERL_ENODATA), or the work explains it */
    u.update = update;
    eerl_trace_unexplained_message(&u, rt->notice, sizeof(rt->notice));
    unexplained_estimate(rt, &u);
    if (!rt->trace.f)
        return 0;
    e = eerl__unexpl_line(&u, rt->notice, &line);
    if (e == 0)
        e = eerl__tracing_append(&rt->trace, line);
    free(line);
    return e;
}

const char *eerl_rt_notice(const eerl_rt *rt)
{
    return rt ? rt->notice : "";
}

/* An update during which a GPU of the pools slowed itself (thermal or hardware slowdown, power
 * brake) or its power limit changed is not shown to the controller: its time says nothing of the
 * setting. 1, with why, when so. */
static int self_slowed(eerl_rt *rt, unsigned mflags, char *why, size_t len)
{
    char fl[64];

    if (!(mflags & EERL_METER_SELF_SLOWED))
        return 0;
    eerl_meter_flags_str(mflags & EERL_METER_SELF_SLOWED, fl, sizeof(fl));
    snprintf(why, len, "not judged: a GPU slowed itself or its power limit changed (%s)", fl);
    rt->n_self_slowed++;
    return 1;
}

/* The controller's answer to the update (info->next, accepted, events), unless self_slowed
 * keeps it from the controller: then the setting stays and excl says why. */
static void decide(eerl_rt *rt, eerl_rt_update_info *info, unsigned mflags, char *excl, size_t len)
{
    int r;

    eerl_ctl_setting(rt->ctl, &info->requested);
    excl[0] = '\0';
    if (self_slowed(rt, mflags, excl, len)) {
        info->next = info->requested;
        info->accepted = 0;
        rt->n_ev = 0;
        return;
    }
    r = eerl_ctl_observe(rt->ctl, &info->obs, &info->next);
    info->accepted = r == 0;
    if (r < 0)
        eerl_ctl_setting(rt->ctl, &info->next);
    rt->n_ev = eerl_ctl_events(rt->ctl, rt->ev, EV_CAP);
}

/* The controller judges the update ending at t_end (decide), the estimate counts it, and the
 * trace gets its update line. Returns the trace's write error, if any (the session carries on
 * without the trace). */
static int judge(eerl_rt *rt, const eerl_rt_work *work, double t_end, const double busy[2],
                 unsigned mflags, eerl_rt_update_info *info)
{
    struct eerl__est_upd eu;
    char excl[128];
    size_t n_ev;
    int terr = 0, made;

    decide(rt, info, mflags, excl, sizeof(excl));
    n_ev = rt->n_ev;
    info->n_events = n_ev;
    made = estimate_step(rt, &info->obs, info->accepted, n_ev, &eu);
    if (rt->trace.f) {
        terr = trace_update(rt, &info->obs, &info->requested, n_ev, t_end, busy, mflags,
                            made ? &eu : NULL, excl[0] ? excl : NULL);
        if (terr == 0)
            terr = explain_once(rt, (unsigned long long)work->update, n_ev);
    }
    if (!rt->trace.f)
        (void)explain_once(rt, (unsigned long long)work->update, n_ev); /* the notice alone */
    return terr;
}

/* The end of an update that ran (partly) in a gap (link_notice): not judged. The controller
 * never sees it (its energy and time mix the governor's clocks with the setting's), the trace
 * gets a "gap" line in place of the update line, and the gap's first such update a notice. */
static int gap_end(eerl_rt *rt, const eerl_rt_work *work, double t_end, eerl_rt_update_info *info)
{
    unsigned long long u = (unsigned long long)work->update;
    char *line = NULL;
    json_t *o;
    struct eerl__est_upd eu;
    int e = 0, made;

    eerl_ctl_setting(rt->ctl, &info->requested);
    info->next = info->requested;
    rt->n_ev = 0;
    made = estimate_step(rt, &info->obs, 0, 0, &eu); /* counted as not judged */
    if (!rt->gap_told) {
        rt->gap_told = 1;
        snprintf(rt->notice, sizeof(rt->notice),
                 "the connection to eerld was lost (%s), so eerld reset this session's GPUs to "
                 "the governor; update %llu and the updates until the lease is taken again are "
                 "not judged (the trace's gap lines), and the session goes on",
                 rt->gap_why, u);
    }
    if (rt->trace.f) {
        o = json_pack("{s:s, s:I, s:f, s:f, s:b, s:s}", "type", "gap", "update", (json_int_t)u,
                      "t_start", rt->books.t_update0, "t_end", t_end, "lease_back", !rt->gap,
                      "reason", rt->gap_why);
        if (o && isfinite(info->obs.energy_j))
            json_object_set_new(o, "energy_j", json_real(info->obs.energy_j));
        if (o && made && eu.late) /* the previous update's record, made final here */
            json_object_set_new(o, "estimate", eerl__trace_est_json(&eu));
        line = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(17)) : NULL;
        e = line ? eerl__tracing_append(&rt->trace, line) : EERL_ENOMEM;
        free(line);
        json_decref(o);
    }
    rt->unjudged = rt->gap;
    return e;
}

int eerl_rt_update_end(eerl_rt *rt, const eerl_rt_work *work, eerl_rt_update_info *ret_info)
{
    eerl_rt_update_info info;
    eerl_ctl_status st;
    double t_end = 0, busy[2];
    unsigned p, ph, mflags = 0;
    int e, terr;

    if (!rt || !work)
        return EERL_EINVAL;
    if (check_open(rt) < 0)
        return EERL_ESTATE;
    for (p = 0; p < 2; p++)
        for (ph = 0; ph < EERL_PHASE_COUNT; ph++)
            if (rt->books.in_phase[p][ph])
                return fail(rt, EERL_ESTATE, "update %llu ends while the %s pool is in phase %s",
                            (unsigned long long)work->update, p ? "training" : "generation",
                            phase_name((eerl_phase)ph));
    e = mark(rt, &t_end);
    if (e < 0)
        return e;
    if (!rt->started)
        return fail(rt, EERL_ESTATE, "update %llu ends before any phase began",
                    (unsigned long long)work->update);
    memset(&info, 0, sizeof(info));
    e = build_obs(rt, work, t_end, &info.obs, &mflags, busy);
    if (e < 0)
        return e;
    info.meter_flags = mflags;
    rt->notice[0] = '\0';
    link_notice(rt);
    terr = rt->unjudged ? gap_end(rt, work, t_end, &info)
                        : judge(rt, work, t_end, busy, mflags, &info);
    if (terr < 0 && rt->trace.f) {
        fail(rt, EERL_EIO,
             "writing update %llu to the trace '%s': %s; the trace keeps the lines before it, "
             "whole, and the session carries on without it",
             (unsigned long long)work->update, rt->trace.file,
             terr == EERL_EIO ? strerror(errno) : eerl_strerror(terr));
        eerl__tracing_close(&rt->trace);
    }
    eerl_ctl_get_status(rt->ctl, &st);
    info.state = st.state;
    /* Next update: its setting applies from the next phase boundary on. */
    rt->next_update = (unsigned long long)work->update + 1;
    rt->prev_setting = info.obs.setting;
    rt->have_prev = 1;
    if (!rt->cfg.observe_only)
        rt->applied = info.next;
    eerl__books_start(&rt->books, t_end);
    rt->update_open = 0;
    if (ret_info)
        *ret_info = info;
    return terr < 0 ? EERL_EIO : 0;
}

int eerl_rt_abort(eerl_rt *rt, const char *type, const char *detail_json)
{
    const char *open[2 * EERL_PHASE_COUNT];
    char *line = NULL, why[256] = "";
    size_t n = 0;
    unsigned ph;
    int e, c;

    if (!rt)
        return EERL_EINVAL;
    if (check_open(rt) < 0)
        return EERL_ESTATE;
    for (ph = 0; ph < EERL_PHASE_COUNT; ph++)
        if (rt->books.in_phase[0][ph] || rt->books.in_phase[1][ph])
            open[n++] = phase_name((eerl_phase)ph);
    e = eerl__trace_stop_line(type, rt->next_update, open, n, detail_json, &line, why, sizeof(why));
    if (e == EERL_EINVAL)
        return fail(rt, e, "stopping the session: %s", why[0] ? why : "bad argument");
    if (e == 0 && rt->trace.f) {
        e = trace_summary(rt);
        if (e == 0)
            e = eerl__tracing_append(&rt->trace, line);
        if (e < 0)
            fail(rt, e, "writing the %s line to the trace '%s': %s", type, rt->trace.file,
                 strerror(errno));
    }
    free(line);
    c = eerl_rt_close(rt);
    return e < 0 ? e : c;
}

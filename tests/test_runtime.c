/* Runtime session: configuration errors name the bad value and leave no trace file; phase calls
 * in the wrong order are refused; on the twin device, the session locks the clocks the controller
 * asked for at the phase boundaries (generation at the generation clock, training at the training
 * clock, a waiting pool at the idle clock), measures energies that match the twin's own, writes
 * one flushed trace line per update, never touches a clock in observe-only mode, and restores
 * every clock on close, also in the middle of a trial. The driver here is a hand-written
 * colocated/disaggregated loop, independent of src/sim. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <time.h>
#include <cmocka.h>
#include <jansson.h>

#include "eerl/agent.h"
#include "eerl/error.h"
#include "eerl/runtime.h"
#include "eerl/tools/twin.h"
#include "testutil.h"
#include "runtime/node.h"
#include "runtime/owner.h"
#include "twin/run.h"

struct vclock {
    double t;
};

static double vnow(void *ctx)
{
    return ((struct vclock *)ctx)->t;
}

/* A clock owner that records every lock (per GPU) before handing it to the in-process owner. */
#define RIG_GPUS_MAX 1024 /* 128 nodes of 8 */

struct watch {
    struct eerl__rt_owner *inner;
    unsigned mhz[RIG_GPUS_MAX];
    unsigned long calls;
};

static int watch_lock(void *ctx, const unsigned *gpus, size_t n, unsigned mhz)
{
    struct watch *w = ctx;
    const eerl_rt_clock_owner *in = eerl__rt_owner_iface(w->inner);
    size_t i;
    int e = in->lock(in->ctx, gpus, n, mhz);

    if (e < 0)
        return e;
    for (i = 0; i < n; i++)
        w->mhz[gpus[i]] = mhz;
    w->calls++;
    return 0;
}

static int watch_restore(void *ctx)
{
    struct watch *w = ctx;
    const eerl_rt_clock_owner *in = eerl__rt_owner_iface(w->inner);

    memset(w->mhz, 0, sizeof(w->mhz));
    return in->restore(in->ctx);
}

struct rig {
    struct watch w;
    eerl_rt_clock_owner owner;
    eerl_twin_preset *preset;
    eerl_twin *twin;
    eerl_device *dev;
    eerl_rt *rt;
    struct vclock vc;
    eerl_twin_mode mode;
    unsigned n_gen, n_train;
};

/* What a rig's session resumes from (tests of eerl_rt_save_state / resume_from). */
struct rig_resume {
    eerl_strategy strategy;
    const char *from, *tag;
    char why[512]; /* eerl_rt_new's why when it fails */
};

static int rig_try(struct rig *r, eerl_twin_mode mode, int rt_mode, unsigned ng, unsigned nt,
                   const char *trace, int observe_only, struct rig_resume *res);

/* The rigs open now: a failing assertion leaves its test at once, and the teardown closes them. */
#define OPEN_RIGS_MAX 4
static struct rig *open_rigs[OPEN_RIGS_MAX];

/* rt_mode: the session's execution mode, -1 for the one matching the twin's (colocated or
 * disaggregated). */
static void rig_open_mode(struct rig *r, eerl_twin_mode mode, int rt_mode, unsigned ng, unsigned nt,
                          const char *trace, int observe_only)
{
    int e = rig_try(r, mode, rt_mode, ng, nt, trace, observe_only, NULL);
    if (e < 0)
        fail_msg("eerl_rt_new: %s", eerl_strerror(e));
}

static int rig_try(struct rig *r, eerl_twin_mode mode, int rt_mode, unsigned ng, unsigned nt,
                   const char *trace, int observe_only, struct rig_resume *res)
{
    static unsigned list[RIG_GPUS_MAX];
    struct eerl_twin_config tc;
    eerl_rt_config rc;
    char why[512];
    unsigned i;
    int e;

    assert_true(ng + nt <= RIG_GPUS_MAX);
    memset(r, 0, sizeof(*r));
    for (i = 0; i < OPEN_RIGS_MAX && open_rigs[i] && open_rigs[i] != r; i++)
        ;
    assert_true(i < OPEN_RIGS_MAX);
    open_rigs[i] = r;
    r->mode = mode;
    r->n_gen = ng;
    r->n_train = nt;
    assert_int_equal(eerl_twin_preset_new("qwen3-30b-a3b", "h100", NULL, &r->preset), 0);
    memset(&tc, 0, sizeof(tc));
    tc.mode = mode;
    tc.n_gen = ng;
    tc.n_train = nt;
    tc.size = 'M';
    tc.seed = 7;
    assert_int_equal(eerl_twin_new(r->preset, &tc, &r->twin), 0);
    assert_int_equal(eerl_twin_device(r->twin, &r->dev), 0);
    eerl_rt_config_default(rt_mode >= 0                  ? (eerl_mode)rt_mode
                           : mode == EERL_TWIN_COLOCATED ? EERL_MODE_COLOCATED
                                                         : EERL_MODE_DISAGGREGATED,
                           &rc);
    if (ng <= EERL_RT_POOL_GPUS_MAX && nt <= EERL_RT_POOL_GPUS_MAX) {
        for (i = 0; i < ng; i++)
            rc.gen_gpus[i] = i;
        for (i = 0; i < nt; i++)
            rc.train_gpus[i] = ng + i;
    } else { /* larger pools: through the pointers */
        for (i = 0; i < ng + nt; i++)
            list[i] = i;
        rc.gen_pool = list;
        rc.train_pool = list + ng;
    }
    rc.n_gen = ng;
    rc.n_train = nt;
    rc.clock = vnow;
    rc.clock_ctx = &r->vc;
    rc.trace_path = trace;
    rc.observe_only = observe_only;
    assert_int_equal(eerl__rt_owner_new(r->dev, observe_only, &r->w.inner), 0);
    r->owner.ctx = &r->w;
    r->owner.lock = watch_lock;
    r->owner.restore = watch_restore;
    r->owner.last_error = NULL;
    rc.owner = &r->owner;
    if (res) {
        rc.strategy = res->strategy;
        rc.resume_from = res->from;
        rc.resume_tag = res->tag;
    }
    e = eerl_rt_new(r->dev, &rc, why, sizeof(why), &r->rt);
    if (res)
        snprintf(res->why, sizeof(res->why), "%s", why);
    else if (e < 0)
        fail_msg("eerl_rt_new: %s (%s)", eerl_strerror(e), why);
    return e;
}

static void rig_open(struct rig *r, eerl_twin_mode mode, unsigned ng, unsigned nt,
                     const char *trace, int observe_only)
{
    rig_open_mode(r, mode, -1, ng, nt, trace, observe_only);
}

static void rig_close(struct rig *r)
{
    unsigned i;

    eerl_rt_free(r->rt);
    eerl__rt_owner_free(r->w.inner);
    eerl_device_free(r->dev);
    eerl_twin_free(r->twin);
    eerl_twin_preset_free(r->preset);
    memset(r, 0, sizeof(*r));
    for (i = 0; i < OPEN_RIGS_MAX; i++)
        if (open_rigs[i] == r)
            open_rigs[i] = NULL;
}

static int rigs_teardown(void **state)
{
    unsigned i;

    (void)state;
    for (i = 0; i < OPEN_RIGS_MAX; i++)
        if (open_rigs[i])
            rig_close(open_rigs[i]);
    return 0;
}

/* Moves virtual time forward to t (a clock never goes back: phase ends computed from the twin's
 * figures can fall a rounding error before the previous mark). */
static void at(struct rig *r, double t)
{
    if (t > r->vc.t)
        r->vc.t = t;
    t = r->vc.t;
    assert_int_equal(eerl_twin_observe_at(r->twin, t), 0);
}

/* One update: twin under what the session will apply, then the phase marks (sequential modes).
 * Returns the twin's update; *locked_gen / *locked_train: the clock the owner holds the
 * generation / training pool's first GPU at right after its generation / log-prob begins. The
 * result: eerl_rt_update_end's. */
static int one_update_rc(struct rig *r, unsigned idx, struct eerl_twin_update *ret,
                         eerl_rt_update_info *info, unsigned *locked_gen, unsigned *locked_train)
{
    struct eerl_twin_update u;
    unsigned g, t, tp = r->mode == EERL_TWIN_COLOCATED ? 0 : 1;
    double t0, ga, ta, gen, lp, tr, rf;
    eerl_rt_work w;
    int e;

    assert_int_equal(eerl_rt_phase_clock(r->rt, EERL_POOL_GEN, EERL_PHASE_GEN, &g), 0);
    assert_int_equal(eerl_rt_phase_clock(r->rt, EERL_POOL_TRAIN, EERL_PHASE_TRAIN, &t), 0);
    assert_int_equal(eerl_twin_set_clocks(r->twin, g, t), 0);
    assert_int_equal(eerl_twin_step(r->twin, &u), 0);
    t0 = u.t_start;
    ga = u.gen_arrival;
    ta = u.train_arrival;
    gen = u.phase_s[EERL_TWIN_PH_GEN];
    lp = u.phase_s[EERL_TWIN_PH_LOGPROB];
    tr = u.phase_s[EERL_TWIN_PH_TRAIN];
    rf = u.phase_s[EERL_TWIN_PH_REFIT];
    at(r, t0 + ga - gen);
    assert_int_equal(eerl_rt_phase_begin(r->rt, EERL_POOL_GEN, EERL_PHASE_GEN), 0);
    *locked_gen = r->w.mhz[0];
    at(r, t0 + ga);
    assert_int_equal(eerl_rt_phase_end(r->rt, EERL_POOL_GEN, EERL_PHASE_GEN), 0);
    at(r, t0 + ta - tr - lp);
    assert_int_equal(eerl_rt_phase_begin(r->rt, tp, EERL_PHASE_LOGPROB), 0);
    *locked_train = r->w.mhz[tp ? r->n_gen : 0];
    at(r, t0 + ta - tr);
    assert_int_equal(eerl_rt_phase_end(r->rt, tp, EERL_PHASE_LOGPROB), 0);
    assert_int_equal(eerl_rt_phase_begin(r->rt, tp, EERL_PHASE_TRAIN), 0);
    at(r, t0 + ta);
    assert_int_equal(eerl_rt_phase_end(r->rt, tp, EERL_PHASE_TRAIN), 0);
    assert_int_equal(eerl_rt_phase_begin(r->rt, tp, EERL_PHASE_REFIT), 0);
    if (tp)
        assert_int_equal(eerl_rt_phase_begin(r->rt, 0, EERL_PHASE_REFIT), 0);
    at(r, fmin(t0 + ta + rf, eerl_twin_now(r->twin)));
    assert_int_equal(eerl_rt_phase_end(r->rt, tp, EERL_PHASE_REFIT), 0);
    if (tp)
        assert_int_equal(eerl_rt_phase_end(r->rt, 0, EERL_PHASE_REFIT), 0);
    at(r, eerl_twin_now(r->twin));
    memset(&w, 0, sizeof(w));
    w.update = idx;
    w.gen_tokens = u.gen_tokens;
    w.valid_tokens = u.valid_tokens;
    w.longest_tokens = u.longest;
    w.policy_version = idx;
    e = eerl_rt_update_end(r->rt, &w, info);
    *ret = u;
    return e;
}

/* one_update_rc, which must succeed. */
static void one_update(struct rig *r, unsigned idx, struct eerl_twin_update *ret,
                       eerl_rt_update_info *info, unsigned *locked_gen, unsigned *locked_train)
{
    if (one_update_rc(r, idx, ret, info, locked_gen, locked_train) < 0)
        fail_msg("update_end %u: %s", idx, eerl_rt_last_error(r->rt));
}

/* In-flight loops pause generation for the weight refit: the refit phase begins and ends inside
 * the generation phase of the same pool. The pool does one thing at a time, so the refit's time
 * and energy are the refit's alone and generation resumes after it: phase energies never add up
 * to more than the update's, and every update is accepted. */
static void test_nested_phases_inflight(void **state)
{
    static struct rig r; /* static: the teardown closes it when an assertion fails */
    struct eerl_twin_update u;
    eerl_rt_update_info info;
    eerl_rt_work w;
    unsigned k, ph;

    (void)state;
    rig_open_mode(&r, EERL_TWIN_DISAGGREGATED, EERL_MODE_INFLIGHT, 2, 2, NULL, 1);
    for (k = 1; k <= 6; k++) {
        double t0, d, sum = 0;

        assert_int_equal(eerl_twin_step(r.twin, &u), 0);
        t0 = u.t_start;
        d = u.duration;
        at(&r, t0);
        assert_int_equal(eerl_rt_phase_begin(r.rt, EERL_POOL_GEN, EERL_PHASE_GEN), 0);
        assert_int_equal(eerl_rt_phase_begin(r.rt, EERL_POOL_TRAIN, EERL_PHASE_TRAIN), 0);
        at(&r, t0 + 0.5 * d);
        assert_int_equal(eerl_rt_phase_end(r.rt, EERL_POOL_TRAIN, EERL_PHASE_TRAIN), 0);
        at(&r, t0 + 0.6 * d);
        assert_int_equal(eerl_rt_phase_begin(r.rt, EERL_POOL_GEN, EERL_PHASE_REFIT), 0);
        assert_int_equal(eerl_rt_phase_begin(r.rt, EERL_POOL_TRAIN, EERL_PHASE_REFIT), 0);
        at(&r, t0 + 0.7 * d);
        assert_int_equal(eerl_rt_phase_end(r.rt, EERL_POOL_GEN, EERL_PHASE_REFIT), 0);
        assert_int_equal(eerl_rt_phase_end(r.rt, EERL_POOL_TRAIN, EERL_PHASE_REFIT), 0);
        at(&r, eerl_twin_now(r.twin));
        assert_int_equal(eerl_rt_phase_end(r.rt, EERL_POOL_GEN, EERL_PHASE_GEN), 0);
        memset(&w, 0, sizeof(w));
        w.update = k;
        w.gen_tokens = u.gen_tokens;
        w.valid_tokens = u.valid_tokens;
        w.longest_tokens = u.longest;
        w.policy_version = (int64_t)k - 2;
        if (eerl_rt_update_end(r.rt, &w, &info) < 0)
            fail_msg("update %u: %s", k, eerl_rt_last_error(r.rt));
        if (!info.accepted)
            fail_msg("update %u refused", k);
        for (ph = 0; ph < EERL_PHASE_COUNT; ph++)
            sum += info.obs.phase_energy_j[ph];
        assert_true(sum <= info.obs.energy_j * (1 + 1e-9));
        /* Generation ran for the update less the refit's tenth of it. */
        assert_true(fabs(info.obs.phase_time_s[EERL_PHASE_GEN] - 0.9 * d) < 1e-6 * d);
        assert_true(fabs(info.obs.phase_time_s[EERL_PHASE_REFIT] - 0.1 * d) < 1e-6 * d);
    }
    rig_close(&r);
}

static void test_config_errors(void **state)
{
    static struct rig r; /* static: the teardown closes it when an assertion fails */
    eerl_rt_config rc;
    eerl_rt *rt = (eerl_rt *)0x1;
    char why[512], path[600];
    struct stat st;

    (void)state;
    rig_open(&r, EERL_TWIN_DISAGGREGATED, 2, 2, NULL, 0);
    eerl_rt_config_default(EERL_MODE_DISAGGREGATED, &rc);
    rc.gen_gpus[0] = 0;
    rc.n_gen = 1;
    rc.train_gpus[0] = 2;
    rc.n_train = 1;

    rc.allowed_loss = 0;
    assert_int_equal(eerl_rt_new(r.dev, &rc, why, sizeof(why), &rt), EERL_EINVAL);
    assert_non_null(strstr(why, "allowed_loss 0 must be in (0, 0.5)"));
    rc.allowed_loss = 0.5;
    assert_int_equal(eerl_rt_new(r.dev, &rc, why, sizeof(why), &rt), EERL_EINVAL);
    assert_non_null(strstr(why, "0.5"));
    rc.allowed_loss = NAN;
    assert_int_equal(eerl_rt_new(r.dev, &rc, why, sizeof(why), &rt), EERL_EINVAL);
    rc.allowed_loss = 0.02;
    rc.strategy = (eerl_strategy)7;
    assert_int_equal(eerl_rt_new(r.dev, &rc, why, sizeof(why), &rt), EERL_EINVAL);
    assert_non_null(strstr(why, "strategy 7"));
    rc.strategy = EERL_STRATEGY_PAPER;
    rc.train_gpus[0] = 9;
    assert_int_equal(eerl_rt_new(r.dev, &rc, why, sizeof(why), &rt), EERL_EINVAL);
    assert_non_null(strstr(why, "GPU 9"));
    rc.train_gpus[0] = 0; /* in both pools */
    assert_int_equal(eerl_rt_new(r.dev, &rc, why, sizeof(why), &rt), EERL_EINVAL);
    assert_non_null(strstr(why, "GPU 0 is in both"));
    rc.train_gpus[0] = 2;
    rc.n_train = 0;
    assert_int_equal(eerl_rt_new(r.dev, &rc, why, sizeof(why), &rt), EERL_EINVAL);
    rc.n_train = 1;
    /* Pool sizes: more than the fixed array holds, more than any machine has, 0. */
    rc.n_gen = EERL_RT_POOL_GPUS_MAX + 1;
    assert_int_equal(eerl_rt_new(r.dev, &rc, why, sizeof(why), &rt), EERL_EINVAL);
    assert_non_null(strstr(why, "generation pool has 65 GPUs but gen_gpus holds at most 64"));
    {
        static const unsigned one[1] = {0};
        rc.gen_pool = one;
        rc.n_gen = EERL_RT_GPUS_LIMIT + 1u;
        assert_int_equal(eerl_rt_new(r.dev, &rc, why, sizeof(why), &rt), EERL_EINVAL);
        assert_non_null(strstr(why, "generation pool has 1048577 GPUs, more than the 1048576"));
        rc.n_gen = 1;
        rc.train_pool = one + 0;
        rc.n_train = EERL_RT_GPUS_LIMIT;
        assert_int_equal(eerl_rt_new(r.dev, &rc, why, sizeof(why), &rt), EERL_EINVAL);
        assert_non_null(strstr(why, "the pools hold 1048577 GPUs together, more than the 1048576"));
        rc.n_train = 1;
        assert_int_equal(eerl_rt_new(r.dev, &rc, why, sizeof(why), &rt), EERL_EINVAL);
        assert_non_null(strstr(why, "GPU 0 is in both"));
        rc.train_pool = NULL;
        rc.n_gen = 0;
        assert_int_equal(eerl_rt_new(r.dev, &rc, why, sizeof(why), &rt), EERL_EINVAL);
        assert_non_null(strstr(why, "the generation pool is empty"));
        rc.gen_pool = NULL;
        rc.n_gen = 1;
    }
    /* An unwritable trace path: named, and nothing created. */
    snprintf(path, sizeof(path), "%s/no-such-dir/run.jsonl", tu_tmpdir());
    rc.trace_path = path;
    assert_int_equal(eerl_rt_new(r.dev, &rc, why, sizeof(why), &rt), EERL_ESYS);
    assert_non_null(strstr(why, "no-such-dir"));
    assert_int_not_equal(stat(path, &st), 0);
    /* Bad run metadata: refused, and the trace it had begun is removed. */
    snprintf(path, sizeof(path), "%s/meta.jsonl", tu_tmpdir());
    rc.trace_run_json = "[1,2]";
    assert_int_equal(eerl_rt_new(r.dev, &rc, why, sizeof(why), &rt), EERL_EINVAL);
    assert_int_not_equal(stat(path, &st), 0);
    assert_ptr_equal(rt, (eerl_rt *)0x1); /* untouched on failure */
    rig_close(&r);
}

/* A trace path the session did not create is never removed nor written through: here a link to
 * /dev/full (issue 36: as root, a trace at /dev/full deleted the device node; issue 53: a link
 * planted at the trace path made root overwrite its target). The start fails naming the path
 * and the link. */
static void test_trace_path_kept_when_first_write_fails(void **state)
{
    static struct rig r;
    struct rig_resume res;
    char link[4096];
    struct stat st;

    (void)state;
    if (access("/dev/full", W_OK) != 0)
        skip(); /* no /dev/full to write to here */
    snprintf(link, sizeof(link), "%s/full.jsonl", tu_tmpdir());
    unlink(link);
    assert_int_equal(symlink("/dev/full", link), 0);
    memset(&res, 0, sizeof(res));
    res.strategy = EERL_STRATEGY_EERL;
    assert_int_equal(rig_try(&r, EERL_TWIN_COLOCATED, -1, 2, 0, link, 0, &res), EERL_EUNSAFE);
    assert_non_null(strstr(res.why, link));
    assert_non_null(strstr(res.why, "symbolic link"));
    assert_int_equal(lstat(link, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    rig_close(&r);
    unlink(link);
}

static size_t count_lines(const char *path, const char *type);

/* issue 53 item 3: the next segment of a resumed job that keeps its trace path appends a segment
 * (its header says "appended") and keeps every earlier line, where it truncated the file; a
 * fresh session never overwrites a trace (refused naming it); a second live session on the same
 * trace is refused while the first writes it. */
static void test_trace_resumed_appends_never_truncates(void **state)
{
    static struct rig r, r2;
    struct rig_resume rr, fresh;
    char dir[600], trace[600], *text;
    eerl_rt_update_info info;
    struct eerl_twin_update up;
    unsigned u, lg, lt;
    struct stat st, st2;

    (void)state;
    snprintf(dir, sizeof(dir), "%s/ckpt-append", tu_tmpdir());
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(trace, sizeof(trace), "%s/eerl-run.jsonl", tu_tmpdir());
    memset(&rr, 0, sizeof(rr));
    rr.strategy = EERL_STRATEGY_EERL;
    rr.from = dir;
    assert_int_equal(rig_try(&r, EERL_TWIN_COLOCATED, -1, 2, 0, trace, 0, &rr), 0);
    for (u = 1; u <= 30; u++)
        one_update(&r, u, &up, &info, &lg, &lt);
    assert_int_equal(eerl_rt_save_state(r.rt, dir), 0);
    /* A second live session on the same trace: refused, the first's lines untouched. */
    assert_int_equal(stat(trace, &st), 0);
    assert_int_equal(rig_try(&r2, EERL_TWIN_COLOCATED, -1, 2, 0, trace, 0, &rr), EERL_EBUSY);
    assert_non_null(strstr(rr.why, trace));
    assert_non_null(strstr(rr.why, "another live session"));
    rig_close(&r2);
    assert_int_equal(stat(trace, &st2), 0);
    assert_int_equal(st.st_size, st2.st_size);
    rig_close(&r);
    /* A fresh session (no resume): refused, the trace kept whole. */
    memset(&fresh, 0, sizeof(fresh));
    fresh.strategy = EERL_STRATEGY_EERL;
    assert_int_equal(rig_try(&r2, EERL_TWIN_COLOCATED, -1, 2, 0, trace, 0, &fresh), EERL_EEXIST);
    assert_non_null(strstr(fresh.why, trace));
    assert_non_null(strstr(fresh.why, "resume_from"));
    rig_close(&r2);
    assert_int_equal(count_lines(trace, "update"), 30);
    /* The next segment: appended after the 30 update lines. */
    assert_int_equal(rig_try(&r, EERL_TWIN_COLOCATED, -1, 2, 0, trace, 0, &rr), 0);
    for (u = 31; u <= 35; u++)
        one_update(&r, u, &up, &info, &lg, &lt);
    rig_close(&r);
    assert_int_equal(count_lines(trace, "update"), 35);
    assert_int_equal(count_lines(trace, "header"), 2);
    text = tu_read_file(trace);
    assert_non_null(strstr(text, "\"appended\":true"));
    free(text);
}

#define FULL_UPDATES 12

/* A disk that fills mid-run (the file size limit stands in for it: a write past it is cut short,
 * the next fails with EFBIG): the update that cannot be written is reported once, naming the
 * trace and the cause; the session goes on; the trace holds whole lines only, the updates before
 * the failure, each one JSON. */
static void test_trace_full_disk_keeps_whole_lines(void **state)
{
    static struct rig r;
    struct eerl_twin_update u;
    eerl_rt_update_info info;
    struct rlimit old, lim;
    void (*old_xfsz)(int);
    char path[4096], msg[FULL_UPDATES + 1][512], *text, *p, *nl;
    int rc[FULL_UPDATES + 1];
    unsigned g, t, i, failed = 0, n_update = 0;
    struct stat st;

    (void)state;
    snprintf(path, sizeof(path), "%s/full-disk.jsonl", tu_tmpdir());
    rig_open(&r, EERL_TWIN_COLOCATED, 2, 0, path, 0);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = (rlim_t)st.st_size + 5017; /* a few update lines, then one cut */
    old_xfsz = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    for (i = 1; i <= FULL_UPDATES; i++) {
        rc[i] = one_update_rc(&r, i, &u, &info, &g, &t);
        snprintf(msg[i], sizeof(msg[i]), "%s", rc[i] < 0 ? eerl_rt_last_error(r.rt) : "");
    }
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, old_xfsz);
    assert_int_equal(eerl_rt_close(r.rt), 0);
    for (i = 1; i <= FULL_UPDATES; i++) {
        if (rc[i] == 0)
            continue;
        assert_int_equal(rc[i], EERL_EIO);
        assert_int_equal(failed, 0); /* reported once */
        failed = i;
        assert_non_null(strstr(msg[i], path));
        assert_non_null(strstr(msg[i], strerror(EFBIG)));
    }
    assert_true(failed > 1 && failed < FULL_UPDATES);
    text = tu_read_file(path);
    assert_non_null(text);
    assert_true(text[0] && text[strlen(text) - 1] == '\n');
    for (p = text; *p; p = nl + 1) {
        json_error_t je;
        json_t *o;

        nl = strchr(p, '\n');
        assert_non_null(nl);
        *nl = '\0';
        o = json_loads(p, 0, &je);
        if (!o)
            fail_msg("a trace line is not JSON (%s): %.80s", je.text, p);
        n_update += !strcmp(json_string_value(json_object_get(o, "type")), "update");
        json_decref(o);
    }
    assert_int_equal(n_update, failed - 1);
    free(text);
    rig_close(&r);
}

static void test_phase_order(void **state)
{
    static struct rig r; /* static: the teardown closes it when an assertion fails */
    eerl_rt_work w;

    (void)state;
    rig_open(&r, EERL_TWIN_COLOCATED, 2, 0, NULL, 0);
    memset(&w, 0, sizeof(w));
    w.valid_tokens = 1;
    assert_int_equal(eerl_rt_update_end(r.rt, &w, NULL), EERL_ESTATE); /* nothing began */
    assert_int_equal(eerl_rt_phase_end(r.rt, 0, EERL_PHASE_GEN), EERL_ESTATE);
    assert_non_null(strstr(eerl_rt_last_error(r.rt), "not in phase generation"));
    assert_int_equal(eerl_rt_phase_begin(r.rt, 0, EERL_PHASE_GEN), 0);
    assert_int_equal(eerl_rt_phase_begin(r.rt, 0, EERL_PHASE_GEN), EERL_ESTATE);
    assert_int_equal(eerl_rt_phase_begin(r.rt, 5, EERL_PHASE_GEN), EERL_EINVAL);
    assert_int_equal(eerl_rt_update_end(r.rt, &w, NULL), EERL_ESTATE); /* phase still open */
    assert_non_null(strstr(eerl_rt_last_error(r.rt), "in phase generation"));
    assert_int_equal(eerl_rt_close(r.rt), 0);
    assert_int_equal(eerl_rt_phase_end(r.rt, 0, EERL_PHASE_GEN), EERL_ESTATE);
    assert_int_equal(eerl_rt_close(r.rt), 0); /* idempotent */
    rig_close(&r);
}

static size_t count_lines(const char *path, const char *type)
{
    char *text = tu_read_file(path), *p;
    char key[64];
    size_t n = 0;

    assert_non_null(text);
    snprintf(key, sizeof(key), "\"type\":\"%s\"", type);
    for (p = text; (p = strstr(p, key)) != NULL; p++)
        n++;
    free(text);
    return n;
}

/* Colocated: the session locks the generation clock for generation and the training clock for
 * log-prob/training once the controller searches; energies match the twin; trace per update;
 * close in the middle of a trial restores the device. */
static void test_colocated_locks_measures_restores(void **state)
{
    static struct rig r; /* static: the teardown closes it when an assertion fails */
    char path[600];
    unsigned u, searched = 0, lg, lt;
    eerl_rt_update_info info;
    struct eerl_twin_update up;
    eerl_setting s;

    (void)state;
    snprintf(path, sizeof(path), "%s/colo.jsonl", tu_tmpdir());
    rig_open(&r, EERL_TWIN_COLOCATED, 4, 0, path, 0);
    for (u = 1; u <= 24; u++) {
        eerl_rt_applied_setting(r.rt, &s);
        one_update(&r, u, &up, &info, &lg, &lt);
        /* What the actuator wrote to the device at each phase begin is the applied setting. */
        assert_int_equal(lg, s.mhz[EERL_GROUP_GEN]);
        assert_int_equal(lt, s.mhz[EERL_GROUP_TRAIN]);
        assert_true(eerl_setting_equal(&info.obs.setting, &s));
        searched += !eerl_setting_is_governor(&s);
        /* The meter's energy and the exact virtual time, against the twin's own figures. */
        assert_true(fabs(info.obs.energy_j / up.energy_j - 1) < 0.01);
        assert_true(fabs(info.obs.time_s - up.duration) < 1e-6 * up.duration);
        assert_true(info.accepted);
        /* One flushed line per update, readable while the session is open. */
        assert_int_equal(count_lines(path, "update"), u);
    }
    assert_true(searched > 0); /* past calibration (15): trials ran */
    /* Apply the next setting (a trial) and close while it is locked. */
    eerl_rt_applied_setting(r.rt, &s);
    assert_false(eerl_setting_is_governor(&s));
    at(&r, eerl_twin_now(r.twin));
    assert_int_equal(eerl_rt_phase_begin(r.rt, 0, EERL_PHASE_GEN), 0);
    assert_int_equal(r.w.mhz[0], s.mhz[EERL_GROUP_GEN]);
    assert_int_equal(eerl_rt_close(r.rt), 0);
    assert_int_equal(r.twin->req_gen, 0u);
    assert_int_equal(r.twin->req_train, 0u);
    {
        eerl_actuator_gpu_state ast;
        unsigned g;
        for (g = 0; g < 4; g++) {
            assert_int_equal(eerl_actuator_gpu(eerl__rt_owner_actuator(r.w.inner), g, &ast), 0);
            assert_int_equal(ast.locked_max_mhz, 0u);
            assert_true(ast.resets > 0);
        }
    }
    assert_int_equal(count_lines(path, "header"), 1);
    assert_int_equal(count_lines(path, "run"), 1);
    rig_close(&r);
}

/* Resume: a session saves its controller's state into a checkpoint directory; the next session
 * (the job's next segment) resumes from it, skips calibration and search and runs at the saved
 * lock from its first update; the trace says so and carries the state. Another allocation (tag)
 * or strategy starts a fresh search with a "resume refused" event; a damaged file fails the
 * session naming the file; a missing one is a fresh start. */
static void test_resume_session(void **state)
{
    static struct rig r; /* static: the teardown closes it when an assertion fails */
    struct rig_resume rr;
    char dir[600], trace[600], file[700];
    const char *detail = NULL;
    unsigned u, lg, lt, at_gov = 0;
    eerl_rt_update_info info;
    struct eerl_twin_update up;
    eerl_ctl_status st;
    eerl_setting s, locked;
    const eerl_event *ev;
    size_t n, k;
    int refused = 0, e;
    FILE *f;

    (void)state;
    snprintf(dir, sizeof(dir), "%s/ckpt", tu_tmpdir());
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(file, sizeof(file), "%s/eerl-controller.state", dir);
    memset(&rr, 0, sizeof(rr));
    rr.strategy = EERL_STRATEGY_EERL;
    rr.from = dir; /* the first segment: nothing saved yet, a fresh start */
    assert_int_equal(rig_try(&r, EERL_TWIN_COLOCATED, -1, 4, 0, NULL, 0, &rr), 0);
    assert_int_equal(eerl_rt_resumed(r.rt, &detail), 0);
    assert_non_null(strstr(detail, "no saved state"));
    for (u = 1; u <= 150; u++)
        one_update(&r, u, &up, &info, &lg, &lt);
    assert_int_equal(eerl_rt_status(r.rt, &st), 0);
    assert_true(st.locked);
    locked = st.locked_setting;
    assert_int_equal(eerl_rt_save_state(r.rt, dir), 0); /* a directory: the file inside */
    assert_int_equal(access(file, R_OK), 0);
    assert_int_equal(eerl_rt_save_state(r.rt, "/nonexistent-dir/x.state"), EERL_ESYS);
    assert_non_null(strstr(eerl_rt_last_error(r.rt), "/nonexistent-dir/x.state"));
    rig_close(&r);

    /* The next segment, same hardware: locked from the first update, no governor update. */
    snprintf(trace, sizeof(trace), "%s/resumed.jsonl", tu_tmpdir());
    assert_int_equal(rig_try(&r, EERL_TWIN_COLOCATED, -1, 4, 0, trace, 0, &rr), 0);
    assert_int_equal(eerl_rt_resumed(r.rt, &detail), 1);
    assert_non_null(strstr(detail, "resumed from"));
    eerl_rt_applied_setting(r.rt, &s);
    assert_true(eerl_setting_equal(&s, &locked));
    for (u = 1; u <= 20; u++) {
        eerl_rt_applied_setting(r.rt, &s);
        at_gov += eerl_setting_is_governor(&s);
        one_update(&r, u, &up, &info, &lg, &lt);
        assert_int_equal(lg, s.mhz[EERL_GROUP_GEN]);
        assert_true(info.accepted);
        assert_true(info.state == EERL_STATE_LOCKED || info.state == EERL_STATE_MONITORING);
    }
    assert_int_equal(at_gov, 0u);
    assert_int_equal(count_lines(trace, "resume"), 1);
    rig_close(&r);

    /* Another allocation: a fresh search, said in the first update's events. */
    assert_int_equal(rig_try(&r, EERL_TWIN_COLOCATED, -1, 8, 0, NULL, 0, &rr), 0);
    assert_int_equal(eerl_rt_resumed(r.rt, &detail), 0);
    assert_non_null(strstr(detail, "allocation"));
    eerl_rt_applied_setting(r.rt, &s);
    assert_true(eerl_setting_is_governor(&s));
    one_update(&r, 1, &up, &info, &lg, &lt);
    n = eerl_rt_events(r.rt, &ev);
    for (k = 0; k < n; k++)
        refused |= strstr(ev[k].reason, "resume refused") != NULL;
    assert_true(refused);
    assert_int_equal(info.state, EERL_STATE_CALIBRATING);
    rig_close(&r);
    /* The paper's strategy (does not resume): a fresh search. */
    rr.strategy = EERL_STRATEGY_PAPER;
    assert_int_equal(rig_try(&r, EERL_TWIN_COLOCATED, -1, 4, 0, NULL, 0, &rr), 0);
    assert_int_equal(eerl_rt_resumed(r.rt, &detail), 0);
    assert_non_null(strstr(detail, "does not resume"));
    rig_close(&r);
    /* A given tag that differs: a fresh search. */
    rr.strategy = EERL_STRATEGY_EERL;
    rr.tag = "another cluster";
    assert_int_equal(rig_try(&r, EERL_TWIN_COLOCATED, -1, 4, 0, NULL, 0, &rr), 0);
    assert_int_equal(eerl_rt_resumed(r.rt, &detail), 0);
    assert_non_null(strstr(detail, "another cluster"));
    rig_close(&r);
    rr.tag = NULL;

    /* A damaged file: the session is not opened, and why names the file. */
    f = fopen(file, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    assert_int_equal(ftruncate(fileno(f), ftell(f) - 7), 0);
    fclose(f);
    e = rig_try(&r, EERL_TWIN_COLOCATED, -1, 4, 0, NULL, 0, &rr);
    assert_int_equal(e, EERL_EPARSE);
    assert_non_null(strstr(rr.why, "eerl-controller.state"));
    assert_null(r.rt);
    rig_close(&r);
}

/* Disaggregated: a waiting pool goes to the idle clock; observe-only never writes a clock. */
static void test_disaggregated_idle_and_observe_only(void **state)
{
    static struct rig r; /* static: the teardown closes it when an assertion fails */
    unsigned u, lg, lt, idle_seen = 0;
    eerl_rt_update_info info;
    struct eerl_twin_update up;
    eerl_ctl_status st;
    eerl_setting s;

    (void)state;
    rig_open(&r, EERL_TWIN_DISAGGREGATED, 2, 4, NULL, 0);
    for (u = 1; u <= 20; u++) {
        eerl_rt_applied_setting(r.rt, &s);
        one_update(&r, u, &up, &info, &lg, &lt);
        /* After the generation pool ended its phase and before training began, the training
         * pool waited: at the end of the update the generation pool (which ended refit) sits at
         * the idle clock when the setting has one. */
        if (s.idle_mhz) {
            assert_int_equal(r.w.mhz[0], s.idle_mhz);
            assert_int_equal(r.w.mhz[2], s.idle_mhz);
            idle_seen++;
        }
        assert_true(info.obs.flags & EERL_OBS_POOL_ENERGY);
        assert_true(fabs(info.obs.pool_energy_j[0] + info.obs.pool_energy_j[1] -
                         info.obs.energy_j) < 1e-6 * info.obs.energy_j);
        /* The pools' arrivals at the rendezvous (before refit) are recorded in turns too. */
        assert_true(info.obs.flags & EERL_OBS_ARRIVALS);
        assert_true(fabs(info.obs.arrival_s[0] - up.gen_arrival) < 1e-6 * up.duration);
        assert_true(fabs(info.obs.arrival_s[1] - up.train_arrival) < 1e-6 * up.duration);
        assert_true(info.obs.arrival_s[0] < info.obs.arrival_s[1]);
    }
    assert_true(idle_seen > 0);
    rig_close(&r);

    rig_open(&r, EERL_TWIN_DISAGGREGATED, 2, 4, NULL, 1);
    for (u = 1; u <= 20; u++) {
        one_update(&r, u, &up, &info, &lg, &lt);
        assert_int_equal(lg, 0u);
        assert_int_equal(lt, 0u);
        assert_true(eerl_setting_is_governor(&info.obs.setting));
    }
    assert_int_equal(eerl_rt_status(r.rt, &st), 0);
    assert_int_not_equal(st.state, EERL_STATE_CALIBRATING); /* it decided, nothing was applied */
    assert_int_equal(r.w.calls, 0ul);
    rig_close(&r);
}

/* 1024 GPUs (128 nodes of 8), given through gen_pool/train_pool: the session meters every GPU,
 * the pools' energies add up to the allocation's, which is the twin's energy, and each pool's
 * last GPU is locked and idled with its first. */
static void test_large_allocation(void **state)
{
    static struct rig r; /* static: the teardown closes it when an assertion fails */
    unsigned u, lg, lt, idle_seen = 0;
    eerl_rt_update_info info;
    struct eerl_twin_update up;
    double meter_j = 0, twin_j = 0;
    eerl_setting s;

    (void)state;
    rig_open(&r, EERL_TWIN_DISAGGREGATED, 256, 768, NULL, 0);
    for (u = 1; u <= 25; u++) {
        eerl_rt_applied_setting(r.rt, &s);
        one_update(&r, u, &up, &info, &lg, &lt);
        assert_true(info.accepted);
        assert_true(info.obs.flags & EERL_OBS_POOL_ENERGY);
        assert_true(fabs(info.obs.pool_energy_j[0] + info.obs.pool_energy_j[1] -
                         info.obs.energy_j) < 1e-6 * info.obs.energy_j);
        meter_j += info.obs.energy_j;
        twin_j += up.energy_j;
        assert_int_equal(r.w.mhz[255], r.w.mhz[0]);
        assert_int_equal(r.w.mhz[1023], r.w.mhz[256]);
        if (s.idle_mhz) {
            assert_int_equal(r.w.mhz[0], s.idle_mhz);
            assert_int_equal(r.w.mhz[1023], s.idle_mhz);
            idle_seen++;
        }
    }
    assert_true(idle_seen > 0);
    /* The meter reads the twin's counters at every boundary, so over the run its energy is the
     * twin's up to the counters' 100 ms steps at the two ends (1024 GPUs under 700 W: 143 kJ);
     * one GPU left out would miss a thousandth of it. */
    if (!(fabs(meter_j - twin_j) < 0.2 * 1024 * 700))
        fail_msg("meter %.0f J, twin %.0f J over 25 updates", meter_j, twin_j);
    assert_true(fabs(meter_j - twin_j) < 1e-4 * twin_j);
    assert_int_equal(eerl_rt_close(r.rt), 0);
    for (u = 0; u < 1024; u++)
        assert_int_equal(r.w.mhz[u], 0u);
    rig_close(&r);
}

/* ---- the stand-in NVML library, with the sampler thread -------------------------------------- */

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* The locked range the stand-in's state file shows for gpu: -1 when null. */
static long file_lock_max(const char *state, unsigned gpu)
{
    json_error_t je;
    json_t *doc = json_load_file(state, 0, &je), *b;
    long v;

    if (!doc)
        fail_msg("state file %s: %s", state, je.text);
    b = json_object_get(json_array_get(json_object_get(doc, "gpus"), gpu), "locked_max_mhz");
    v = json_is_integer(b) ? (long)json_integer_value(b) : -1;
    json_decref(doc);
    return v;
}

/* Starts eerld (next to $EERL_BIN) on the stand-in NVML library with a socket in the scratch
 * directory, and points EERL_SOCKET at it. Returns its pid. */
static pid_t start_eerld(void)
{
    static char bin[1024], sock[700], dir[600], policy[700];
    const char *eb = getenv("EERL_BIN");
    const char *slash;
    pid_t pid;
    int i;

    assert_non_null(eb);
    slash = strrchr(eb, '/');
    snprintf(bin, sizeof(bin), "%.*s/eerld", slash ? (int)(slash - eb) : 1, slash ? eb : ".");
    snprintf(dir, sizeof(dir), "%s", tu_tmpdir());
    snprintf(sock, sizeof(sock), "%s/eerld.sock", dir);
    snprintf(policy, sizeof(policy), "%s", tu_write_file("policy.conf", "[access]\n"));
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        FILE *f = freopen("/dev/null", "w", stdout);
        (void)f;
        execl(bin, bin, "--foreground", "--socket", sock, "--state-dir", dir, "--policy", policy,
              "--devices", "nvml", (char *)NULL);
        perror(bin);
        _exit(127);
    }
    /* A hang guard, not a speed check: a daemon that has not started in minutes is broken. */
    for (i = 0; i < 30000 && access(sock, F_OK) != 0; i++)
        sleep_ms(10);
    if (access(sock, F_OK) != 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        fail_msg("eerld did not create %s within 300 s", sock);
    }
    setenv("EERL_SOCKET", sock, 1);
    return pid;
}

/* The pid eerld says holds a lease on gpu, or -1. */
static long eerld_holder(unsigned gpu)
{
    struct eerl_agent_gpu_status st[8];
    eerl_agent *a = NULL;
    size_t n = 0;
    long holder = -1;

    assert_int_equal(eerl_agent_connect(NULL, "test", NULL, 0, &a), 0);
    assert_int_equal(eerl_agent_status(a, st, 8, &n), 0);
    if (gpu < n && st[gpu].leased)
        holder = (long)st[gpu].holder_pid;
    eerl_agent_free(a);
    return holder;
}

/* The stand-in tests' resources, freed by their teardown whether the test passed or failed. */
struct standin {
    char path[700];
    eerl_device *dev;
    eerl_rt *rt;
    pid_t daemon;
    pthread_mutex_t mu; /* guards now_ms: the meter's sampler thread reads the clock */
    long now_ms;
};

/* The session's clock: the virtual time the stand-in's state file says. */
static double standin_now(void *ctx)
{
    struct standin *si = ctx;
    long t;

    pthread_mutex_lock(&si->mu);
    t = si->now_ms;
    pthread_mutex_unlock(&si->mu);
    return (double)t / 1000.0;
}

/* Moves virtual time forward by ms: the state file first (keeping the locked ranges the stand-in
 * wrote into it), then the session's clock. In that order a sampler tick between the two reads
 * the counters at the new time with the clock still at the old one, where the last mark already
 * stands, so the meter keeps that mark's reading and takes nothing from the tick. */
static void standin_advance(struct standin *si, long ms)
{
    char tmp[800];
    json_error_t je;
    json_t *doc = json_load_file(si->path, 0, &je);
    long t = si->now_ms + ms;

    if (!doc)
        fail_msg("state file %s: %s", si->path, je.text);
    json_object_set_new(doc, "virtual_time_ms", json_integer(t));
    snprintf(tmp, sizeof(tmp), "%s.test", si->path);
    if (json_dump_file(doc, tmp, JSON_INDENT(1)) != 0 || rename(tmp, si->path) != 0) {
        json_decref(doc);
        fail_msg("rewriting %s failed", si->path);
    }
    json_decref(doc);
    pthread_mutex_lock(&si->mu);
    si->now_ms = t;
    pthread_mutex_unlock(&si->mu);
}

static int standin_setup(void **state)
{
    struct standin *si = calloc(1, sizeof(*si));

    if (!si)
        return -1;
    si->daemon = -1;
    pthread_mutex_init(&si->mu, NULL);
    *state = si;
    return 0;
}

static int standin_teardown(void **state)
{
    struct standin *si = *state;
    int st;

    eerl_rt_free(si->rt); /* restores every clock it changed */
    eerl_device_free(si->dev);
    if (si->daemon > 0) {
        kill(si->daemon, SIGTERM);
        waitpid(si->daemon, &st, 0);
    }
    unsetenv("EERL_SOCKET");
    pthread_mutex_destroy(&si->mu);
    free(si);
    return 0;
}

/* The session on the real NVML backend (the stand-in library) with the meter's sampler thread
 * running: after calibration the controller's first trial is locked on the GPUs (the stand-in's
 * state file shows it), a waiting pool sits at the idle clock, the energies are the GPUs' power
 * times the phases' time, and closing the session resets every GPU. The stand-in and the session
 * share one virtual clock the test moves, so every figure is exact whatever the machine's speed
 * or load; the sampler thread still ticks in real time against the session's marks.
 * through_eerld: the session finds eerld through EERL_SOCKET and every clock change goes
 * through the daemon (which writes the stand-in's state file), under the lease the session
 * took at its start; the session's own process only reads the counters, from the NVML device
 * it was given, or (node) through eerld, given no device. */
static void standin_run(struct standin *si, int through_eerld, int node)
{
    char gpus[3][400], text[2000], why[512];
    eerl_rt_config rc;
    eerl_rt_update_info info;
    eerl_setting s;
    unsigned u, g, locked_seen = 0, idle_seen = 0;
    int e, st;

    unsetenv("EERL_SOCKET");
    for (g = 0; g < 3; g++)
        snprintf(gpus[g], sizeof(gpus[g]),
                 "{\"name\": \"NVIDIA H100 80GB HBM3\", \"uuid\": \"GPU-r%u\", "
                 "\"memory_clocks_mhz\": [2619], "
                 "\"sm_clocks_mhz\": {\"max\": 1980, \"min\": 345, \"step\": 15}, "
                 "\"sm_clock_mhz\": 1980, \"power_mw\": %u, \"locked_min_mhz\": null, "
                 "\"locked_max_mhz\": null}",
                 g, 200000 + 50000 * g);
    si->now_ms = 1000;
    snprintf(text, sizeof(text),
             "{\"driver_version\": \"580.159.04\", \"nvml_version\": \"13.580.159.04\", "
             "\"virtual_time_ms\": %ld, \"energy_update_ms\": 1, \"lock_permitted\": true, "
             "\"gpus\": [%s, %s, %s]}\n",
             si->now_ms, gpus[0], gpus[1], gpus[2]);
    snprintf(si->path, sizeof(si->path), "%s", tu_write_file("standin.json", text));
    setenv("EERL_FAKE_NVML_STATE", si->path, 1);
    if (through_eerld)
        si->daemon = start_eerld();
    e = node ? 0 : eerl_device_open_nvml(&si->dev);
    if (e < 0)
        fail_msg("stand-in NVML: %s", eerl_strerror(e));
    eerl_rt_config_default(EERL_MODE_DISAGGREGATED, &rc);
    rc.strategy = EERL_STRATEGY_PAPER; /* its first trial comes right after calibration */
    rc.gen_gpus[0] = 0;
    rc.n_gen = 1;
    rc.train_gpus[0] = 1;
    rc.train_gpus[1] = 2;
    rc.n_train = 2;
    rc.sample_thread = 1;
    rc.meter_interval_ms = 1;
    rc.clock = standin_now;
    rc.clock_ctx = si;
    e = eerl_rt_new(si->dev, &rc, why, sizeof(why), &si->rt);
    if (e < 0)
        fail_msg("eerl_rt_new on the stand-in: %s", why);
    if (through_eerld) /* leased at the start, before any clock is set */
        for (g = 0; g < 3; g++)
            assert_true(eerld_holder(g) == getpid());
    for (u = 1; u <= 18; u++) {
        eerl_rt_work w = {u, 1000.0 + u, 900.0 + u, 100.0, (int64_t)u};
        eerl_rt_applied_setting(si->rt, &s);
        assert_int_equal(eerl_rt_phase_begin(si->rt, EERL_POOL_GEN, EERL_PHASE_GEN), 0);
        if (s.mhz[EERL_GROUP_GEN]) {
            assert_int_equal(file_lock_max(si->path, 0), (long)s.mhz[EERL_GROUP_GEN]);
            if (through_eerld && !locked_seen)
                assert_true(eerld_holder(0) == getpid()); /* the daemon did it, for us */
            locked_seen++;
        }
        standin_advance(si, 12);
        sleep_ms(2); /* room for the sampler thread to tick inside the phase */
        assert_int_equal(eerl_rt_phase_end(si->rt, EERL_POOL_GEN, EERL_PHASE_GEN), 0);
        if (s.idle_mhz) {
            assert_int_equal(file_lock_max(si->path, 0), (long)s.idle_mhz);
            idle_seen++;
        }
        assert_int_equal(eerl_rt_phase_begin(si->rt, EERL_POOL_TRAIN, EERL_PHASE_TRAIN), 0);
        standin_advance(si, 12);
        sleep_ms(2);
        assert_int_equal(eerl_rt_phase_end(si->rt, EERL_POOL_TRAIN, EERL_PHASE_TRAIN), 0);
        assert_int_equal(eerl_rt_update_end(si->rt, &w, &info), 0);
        if (!info.accepted)
            fail_msg("update %u refused: energy %g J, time %g s", u, info.obs.energy_j,
                     info.obs.time_s);
        if (fabs(info.obs.time_s - 0.024) > 1e-9)
            fail_msg("update %u: time %.9f s, not the 24 ms the clock moved", u, info.obs.time_s);
        /* The three GPUs draw 750 W together; the counters move in 1 ms steps, the clock too. */
        if (fabs(info.obs.energy_j - 750 * 0.024) > 1e-6)
            fail_msg("update %u: %.9f J in %.3f s, not 750 W x 24 ms = 18 J", u, info.obs.energy_j,
                     info.obs.time_s);
    }
    assert_true(locked_seen > 0);
    assert_true(idle_seen > 0);
    assert_int_equal(eerl_rt_close(si->rt), 0);
    for (g = 0; g < 3; g++)
        assert_int_equal(file_lock_max(si->path, g), -1);
    eerl_rt_free(si->rt);
    si->rt = NULL;
    eerl_device_free(si->dev);
    si->dev = NULL;
    if (through_eerld) {
        unsetenv("EERL_SOCKET");
        kill(si->daemon, SIGTERM);
        assert_int_equal(waitpid(si->daemon, &st, 0), si->daemon);
        si->daemon = -1;
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
}

static void test_nvml_standin_sampler_thread(void **state)
{
    standin_run(*state, 0, 0);
}

/* The same session on a node that runs eerld: the daemon owns the clocks, the session leases
 * them through it, and closing the session hands them back. */
static void test_nvml_standin_through_eerld(void **state)
{
    standin_run(*state, 1, 0);
}

/* The same with no device given: the session opens the node's GPUs itself, through eerld, and
 * reads them through it (the same figures, exactly). */
static void test_node_through_eerld(void **state)
{
    standin_run(*state, 1, 1);
}

/* The one rule of whether a session goes through eerld (runtime/node.h), case by case. */
static void test_eerld_rule(void **state)
{
    struct rig rig, *r = &rig;
    eerl_rt_clock_owner own = {0};
    eerl_rt_config c;
    char why[256];

    (void)state;
    rig_open(r, EERL_TWIN_DISAGGREGATED, 1, 1, NULL, 0);
    eerl_rt_config_default(EERL_MODE_DISAGGREGATED, &c);
    assert_int_equal(c.eerld, EERL_RT_EERLD_AUTO); /* the default */
    unsetenv("EERL_SOCKET");
    c.eerld_socket = "/nonexistent/eerld.sock"; /* AUTO: goes through a socket that is there */
    assert_int_equal(eerl__rt_node_through_eerld(&c, NULL, why, sizeof(why)), 0);
    c.eerld_socket = NULL;
    setenv("EERL_SOCKET", "/nonexistent/eerld.sock", 1); /* AUTO: $EERL_SOCKET set */
    assert_int_equal(eerl__rt_node_through_eerld(&c, NULL, why, sizeof(why)), 1);
    assert_int_equal(eerl__rt_node_through_eerld(&c, r->dev, why, sizeof(why)), 0); /* a twin */
    c.eerld = EERL_RT_EERLD_OFF;
    assert_int_equal(eerl__rt_node_through_eerld(&c, NULL, why, sizeof(why)), 0);
    c.eerld = EERL_RT_EERLD_ON;
    assert_int_equal(eerl__rt_node_through_eerld(&c, r->dev, why, sizeof(why)), 1);
    c.owner = &own; /* the caller's owner: never */
    assert_int_equal(eerl__rt_node_through_eerld(&c, NULL, why, sizeof(why)), 0);
    unsetenv("EERL_SOCKET");
    rig_close(r);
}

/* Through eerld, a socket with nothing behind it fails the start, naming the socket; so does an
 * eerld value the rule does not know, before any socket is tried. */
static void test_eerld_errors_name_the_socket(void **state)
{
    eerl_rt_config c;
    eerl_rt *rt = NULL;
    char why[512];

    (void)state;
    eerl_rt_config_default(EERL_MODE_COLOCATED, &c);
    c.gen_gpus[0] = 0;
    c.n_gen = 1;
    c.eerld = EERL_RT_EERLD_ON;
    c.eerld_socket = "/nonexistent/eerld.sock";
    assert_int_equal(eerl_rt_new(NULL, &c, why, sizeof(why), &rt), EERL_ENOENT);
    assert_non_null(strstr(why, "/nonexistent/eerld.sock"));
    assert_null(rt);
    c.eerld = (eerl_rt_eerld)7;
    assert_int_equal(eerl_rt_new(NULL, &c, why, sizeof(why), &rt), EERL_EINVAL);
    assert_non_null(strstr(why, "eerld 7 is unknown"));
}

/* An observe-only session through eerld reads the GPUs through it and takes no lease. */
static void test_observe_only_through_eerld_takes_no_lease(void **state)
{
    struct standin *si = *state;
    char text[600], why[512];
    eerl_rt_config rc;
    eerl_rt_update_info info;
    eerl_rt_work w = {1, 1000, 900, 100, 1};

    snprintf(text, sizeof(text),
             "{\"driver_version\": \"580.159.04\", \"nvml_version\": \"13.580.159.04\", "
             "\"virtual_time_ms\": 1000, \"energy_update_ms\": 1, \"lock_permitted\": true, "
             "\"gpus\": [{\"name\": \"NVIDIA H100 80GB HBM3\", \"uuid\": \"GPU-o0\", "
             "\"memory_clocks_mhz\": [2619], "
             "\"sm_clocks_mhz\": {\"max\": 1980, \"min\": 345, \"step\": 15}, "
             "\"sm_clock_mhz\": 1980, \"power_mw\": 200000}]}\n");
    snprintf(si->path, sizeof(si->path), "%s", tu_write_file("observe.json", text));
    setenv("EERL_FAKE_NVML_STATE", si->path, 1);
    si->daemon = start_eerld();
    eerl_rt_config_default(EERL_MODE_COLOCATED, &rc);
    rc.gen_gpus[0] = 0;
    rc.n_gen = 1;
    rc.observe_only = 1;
    if (eerl_rt_new(NULL, &rc, why, sizeof(why), &si->rt) < 0)
        fail_msg("eerl_rt_new observe-only through eerld: %s", why);
    assert_true(eerld_holder(0) == -1);
    assert_int_equal(eerl_rt_phase_begin(si->rt, EERL_POOL_GEN, EERL_PHASE_GEN), 0);
    assert_int_equal(eerl_rt_phase_end(si->rt, EERL_POOL_GEN, EERL_PHASE_GEN), 0);
    assert_int_equal(eerl_rt_update_end(si->rt, &w, &info), 0);
    assert_true(eerld_holder(0) == -1);
    assert_int_equal(file_lock_max(si->path, 0), -1);
    eerl_rt_free(si->rt);
    si->rt = NULL;
}

/* ---- across nodes: a remote device (its GPUs read through a callback) ---------------------- */

struct nodes_rig {
    double t;          /* virtual seconds */
    uint64_t mj[4];    /* the GPUs' counters */
    unsigned reads;    /* read callbacks */
    unsigned locks[4]; /* what the owner was told, per GPU */
    unsigned restores;
};

static double nodes_now(void *ctx)
{
    return ((struct nodes_rig *)ctx)->t;
}

static int nodes_read(void *ctx, eerl_device_reading *ret, size_t n)
{
    struct nodes_rig *r = ctx;
    size_t i;

    r->reads++;
    for (i = 0; i < n; i++) {
        ret[i].energy_mj = r->mj[i];
        ret[i].power_mw = 300000;
        ret[i].sm_mhz = 1980;
    }
    return 0;
}

static int nodes_lock(void *ctx, const unsigned *gpus, size_t n, unsigned mhz)
{
    struct nodes_rig *r = ctx;
    size_t i;

    for (i = 0; i < n; i++)
        r->locks[gpus[i]] = mhz;
    return 0;
}

static int nodes_restore(void *ctx)
{
    ((struct nodes_rig *)ctx)->restores++;
    return 0;
}

/* Every GPU at 300 W for dt seconds. */
static void nodes_run(struct nodes_rig *r, double dt)
{
    unsigned g;

    r->t += dt;
    for (g = 0; g < 4; g++)
        r->mj[g] += (uint64_t)llround(300000 * dt);
}

static json_t *nth_line(const char *path, const char *type, size_t k)
{
    char *text = tu_read_file(path), *p, *save = NULL;
    json_t *o = NULL;

    assert_non_null(text);
    for (p = strtok_r(text, "\n", &save); p; p = strtok_r(NULL, "\n", &save)) {
        json_t *x = json_loads(p, 0, NULL);
        assert_non_null(x);
        if (!strcmp(json_string_value(json_object_get(x, "type")), type) && k-- == 0) {
            o = x;
            break;
        }
        json_decref(x);
    }
    free(text);
    assert_non_null(o);
    return o;
}

/* A session over GPUs of two nodes: each boundary reads them in one call; a counter that resets
 * on node 1 is flagged for that node and the update; each node's energy is in the trace and
 * they add up to the update's; a stop for a cause outside the session (a node lost) ends the
 * trace with a line naming the phases in progress, then restores and closes. */
static void test_across_nodes(void **state)
{
    static const unsigned clocks[] = {1980, 1500, 1005, 345}, node_of[] = {0, 0, 1, 1};
    static struct nodes_rig r;
    eerl_rt_clock_owner owner = {&r, nodes_lock, nodes_restore, NULL};
    eerl_device *dev = NULL;
    eerl_rt_config cfg;
    eerl_rt *rt = NULL;
    eerl_rt_work w = {0, 4000, 3600, 300, -1};
    char path[600];
    unsigned g, u;
    json_t *o, *x;

    (void)state;
    memset(&r, 0, sizeof(r));
    snprintf(path, sizeof(path), "%s/nodes.jsonl", tu_tmpdir());
    assert_int_equal(eerl_device_open_remote(4, nodes_read, &r, &dev), 0);
    for (g = 0; g < 4; g++)
        assert_int_equal(eerl_device_remote_describe(dev, g, "NVIDIA H100", "GPU-x", clocks, 4), 0);
    eerl_rt_config_default(EERL_MODE_COLOCATED, &cfg);
    for (g = 0; g < 4; g++)
        cfg.gen_gpus[g] = g;
    cfg.n_gen = 4;
    cfg.trace_path = path;
    cfg.clock = nodes_now;
    cfg.clock_ctx = &r;
    cfg.owner = &owner;
    cfg.node_of = node_of;
    cfg.n_node_of = 4;
    assert_int_equal(eerl_rt_new(dev, &cfg, NULL, 0, &rt), 0);
    for (u = 1; u <= 3; u++) {
        unsigned before = r.reads;

        w.update = u;
        assert_int_equal(eerl_rt_phase_begin(rt, 0, EERL_PHASE_GEN), 0);
        nodes_run(&r, 1.0);
        if (u == 2)
            r.mj[2] = 7; /* node 1's first GPU: its driver reset the counter */
        assert_int_equal(eerl_rt_phase_end(rt, 0, EERL_PHASE_GEN), 0);
        assert_int_equal(eerl_rt_phase_begin(rt, 0, EERL_PHASE_TRAIN), 0);
        nodes_run(&r, 1.0);
        assert_int_equal(eerl_rt_phase_end(rt, 0, EERL_PHASE_TRAIN), 0);
        assert_int_equal(eerl_rt_update_end(rt, &w, NULL), 0);
        /* One read per instant a boundary falls on (a phase's end and the next one's begin, in
         * virtual time, are one instant): 0 s, 1 s, 2 s, then 3 s, 4 s, ... */
        assert_int_equal(r.reads - before, u == 1 ? 3 : 2);
    }
    for (u = 0; u < 3; u++) {
        double e0, e1;

        o = nth_line(path, "update", u);
        x = json_object_get(o, "runtime");
        e0 = json_real_value(json_object_get(json_object_get(x, "node_energy_j"), "0"));
        e1 = json_real_value(json_object_get(json_object_get(x, "node_energy_j"), "1"));
        assert_true(fabs(e0 + e1 - json_real_value(json_object_get(o, "energy_j"))) < 1e-6);
        assert_true(fabs(e0 - 2 * 2 * 300.0) < 1e-6); /* node 0 untouched: 2 GPUs, 2 s, 300 W */
        if (u == 1) {
            assert_non_null(strstr(json_string_value(json_object_get(x, "meter_flags")), "reset"));
            assert_non_null(strstr(
                json_string_value(json_object_get(json_object_get(x, "node_meter_flags"), "1")),
                "reset"));
            assert_null(json_object_get(json_object_get(x, "node_meter_flags"), "0"));
        } else {
            assert_int_equal(json_object_size(json_object_get(x, "node_meter_flags")), 0);
        }
        json_decref(o);
    }
    /* A stop line of a type the format defines is refused, the session still open. */
    assert_int_equal(eerl_rt_abort(rt, "update", NULL), EERL_EINVAL);
    assert_non_null(strstr(eerl_rt_last_error(rt), "stop line type 'update'"));
    assert_int_equal(eerl_rt_abort(rt, "node_lost", "[1]"), EERL_EINVAL);
    assert_int_equal(eerl_rt_phase_begin(rt, 0, EERL_PHASE_GEN), 0);
    assert_int_equal(eerl_rt_abort(rt, "node_lost", "{\"node\":1,\"update\":99}"), 0);
    assert_int_equal(r.restores, 1);
    assert_int_equal(eerl_rt_phase_end(rt, 0, EERL_PHASE_GEN), EERL_ESTATE);
    o = nth_line(path, "node_lost", 0);
    assert_int_equal(json_integer_value(json_object_get(o, "update")), 4); /* ours, not 99 */
    assert_int_equal(json_integer_value(json_object_get(o, "node")), 1);
    assert_string_equal(json_string_value(json_array_get(json_object_get(o, "open_phases"), 0)),
                        "generation");
    json_decref(o);
    eerl_rt_free(rt);
    eerl_device_free(dev);
}

/* A clock that moves on a microsecond each time it is read, as real time does between calls. */
static double ticking_now(void *ctx)
{
    struct nodes_rig *r = ctx;

    r->t += 1e-6;
    return r->t;
}

/* Both pools at one boundary (a refit across separate pools): one read of the GPUs, not one per
 * pool; a call that would find either pool in the wrong state changes nothing. */
static void test_both_pools_at_one_boundary(void **state)
{
    static const unsigned clocks[] = {1980, 1005}, gen[] = {0, 1}, train[] = {2, 3};
    static struct nodes_rig r;
    eerl_rt_clock_owner owner = {&r, nodes_lock, nodes_restore, NULL};
    eerl_device *dev = NULL;
    eerl_rt_config cfg;
    eerl_rt *rt = NULL;
    eerl_rt_work w = {1, 4000, 3600, 300, -1};
    eerl_rt_update_info info;
    unsigned g, before;

    (void)state;
    memset(&r, 0, sizeof(r));
    assert_int_equal(eerl_device_open_remote(4, nodes_read, &r, &dev), 0);
    for (g = 0; g < 4; g++)
        assert_int_equal(eerl_device_remote_describe(dev, g, "NVIDIA H100", "GPU-x", clocks, 2), 0);
    eerl_rt_config_default(EERL_MODE_DRAINED, &cfg);
    memcpy(cfg.gen_gpus, gen, sizeof(gen));
    cfg.n_gen = 2;
    memcpy(cfg.train_gpus, train, sizeof(train));
    cfg.n_train = 2;
    cfg.clock = ticking_now;
    cfg.clock_ctx = &r;
    cfg.owner = &owner;
    assert_int_equal(eerl_rt_new(dev, &cfg, NULL, 0, &rt), 0);
    assert_int_equal(eerl_rt_phase_begin(rt, EERL_POOL_GEN, EERL_PHASE_GEN), 0);
    assert_int_equal(eerl_rt_phase_begin(rt, EERL_POOL_TRAIN, EERL_PHASE_TRAIN), 0);
    assert_int_equal(eerl_rt_phase_end(rt, EERL_POOL_TRAIN, EERL_PHASE_TRAIN), 0);
    assert_int_equal(eerl_rt_phase_end(rt, EERL_POOL_GEN, EERL_PHASE_GEN), 0);
    before = r.reads;
    assert_int_equal(eerl_rt_phase_begin(rt, EERL_RT_POOL_BOTH, EERL_PHASE_REFIT), 0);
    assert_int_equal(r.reads - before, 1);
    assert_int_equal(eerl_rt_phase_begin(rt, EERL_RT_POOL_BOTH, EERL_PHASE_REFIT), EERL_ESTATE);
    assert_int_equal(eerl_rt_phase_end(rt, EERL_POOL_GEN, EERL_PHASE_REFIT), 0);
    before = r.reads;
    assert_int_equal(eerl_rt_phase_end(rt, EERL_RT_POOL_BOTH, EERL_PHASE_REFIT), EERL_ESTATE);
    assert_int_equal(r.reads, before); /* refused before any read */
    assert_int_equal(eerl_rt_phase_end(rt, EERL_POOL_TRAIN, EERL_PHASE_REFIT), 0);
    assert_int_equal(eerl_rt_phase_begin(rt, 3, EERL_PHASE_REFIT), EERL_EINVAL);
    assert_int_equal(eerl_rt_update_end(rt, &w, &info), 0);
    assert_true(info.obs.phase_time_s[EERL_PHASE_REFIT] > 0);
    assert_true(info.obs.arrival_s[EERL_POOL_GEN] > 0 && info.obs.arrival_s[EERL_POOL_TRAIN] > 0);
    eerl_rt_free(rt);
    eerl_device_free(dev);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_config_errors, rigs_teardown),
        cmocka_unit_test(test_across_nodes),
        cmocka_unit_test(test_both_pools_at_one_boundary),
        cmocka_unit_test_teardown(test_phase_order, rigs_teardown),
        cmocka_unit_test_teardown(test_trace_path_kept_when_first_write_fails, rigs_teardown),
        cmocka_unit_test_teardown(test_trace_resumed_appends_never_truncates, rigs_teardown),
        cmocka_unit_test_teardown(test_trace_full_disk_keeps_whole_lines, rigs_teardown),
        cmocka_unit_test_teardown(test_nested_phases_inflight, rigs_teardown),
        cmocka_unit_test_teardown(test_colocated_locks_measures_restores, rigs_teardown),
        cmocka_unit_test_teardown(test_resume_session, rigs_teardown),
        cmocka_unit_test_teardown(test_disaggregated_idle_and_observe_only, rigs_teardown),
        cmocka_unit_test_teardown(test_large_allocation, rigs_teardown),
        cmocka_unit_test_setup_teardown(test_nvml_standin_sampler_thread, standin_setup,
                                        standin_teardown),
        cmocka_unit_test_setup_teardown(test_node_through_eerld, standin_setup, standin_teardown),
        cmocka_unit_test_setup_teardown(test_observe_only_through_eerld_takes_no_lease,
                                        standin_setup, standin_teardown),
        cmocka_unit_test_teardown(test_eerld_rule, rigs_teardown),
        cmocka_unit_test(test_eerld_errors_name_the_socket),
        cmocka_unit_test_setup_teardown(test_nvml_standin_through_eerld, standin_setup,
                                        standin_teardown),
    };
    int r = cmocka_run_group_tests(tests, NULL, NULL);
    tu_cleanup();
    return r;
}

/* The simulated-cluster driver: see sim.h. The twin computes a whole update from the clocks set
 * before it starts (EE-RL changes clocks in the refit pause), so the driver asks the session what
 * it will apply (eerl_rt_phase_clock), runs the twin under that, and then replays the update's
 * phase boundaries in virtual time to the session, which locks clocks through a real actuator on
 * the twin device, samples the twin's energy counters through the real meter and asks the real
 * controller. A watching clock owner records every lock, and the driver fails the run if a pool
 * was locked at a clock other than the one the twin ran the phase at. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eerl/tools/actuator.h"
#include "eerl/error.h"
#include "runtime/owner.h"
#include "eerl/tools/sim.h"
#include "twin/presets.h"
#include "twin/run.h"

/* ---- virtual clock and the watching owner --------------------------------------------------- */

struct vclock {
    double t;
};

static double vclock_now(void *ctx)
{
    return ((struct vclock *)ctx)->t;
}

struct watch {
    struct eerl__rt_owner *inner;
    const eerl_rt_clock_owner *in;
    unsigned n;
    unsigned *mhz; /* per GPU: last lock (0 governor) */
    unsigned long calls;
};

static int watch_lock(void *ctx, const unsigned *gpus, size_t n, unsigned mhz)
{
    struct watch *w = ctx;
    size_t i;
    int e = w->in->lock(w->in->ctx, gpus, n, mhz);

    if (e < 0)
        return e;
    for (i = 0; i < n; i++)
        if (gpus[i] < w->n)
            w->mhz[gpus[i]] = mhz;
    w->calls++;
    return 0;
}

static int watch_restore(void *ctx)
{
    struct watch *w = ctx;

    memset(w->mhz, 0, w->n * sizeof(*w->mhz));
    return w->in->restore(w->in->ctx);
}

static const char *watch_err(void *ctx)
{
    struct watch *w = ctx;
    return w->in->last_error ? w->in->last_error(w->in->ctx) : "";
}

/* ---- modes ----------------------------------------------------------------------------------- */

unsigned eerl_sim_calibration_updates(eerl_mode mode)
{
    eerl_ctl_config c;

    eerl_ctl_config_default(mode, &c);
    return c.calibration_updates;
}

/* ---- one update's phase boundaries ----------------------------------------------------------- */

struct mark {
    double t;
    int begin; /* 0 end, 1 begin: ends first at equal times */
    unsigned pool;
    eerl_phase phase;
};

#define MARKS_MAX 24

static void add(struct mark *m, size_t *n, double t0, double t1, unsigned pool, eerl_phase ph)
{
    if (!(t1 > t0) || *n + 2 > MARKS_MAX)
        return;
    m[*n].t = t0;
    m[*n].begin = 1;
    m[*n].pool = pool;
    m[*n].phase = ph;
    (*n)++;
    m[*n].t = t1;
    m[*n].begin = 0;
    m[*n].pool = pool;
    m[*n].phase = ph;
    (*n)++;
}

static int cmp_mark(const void *a, const void *b)
{
    const struct mark *x = a, *y = b;

    if (x->t != y->t)
        return x->t < y->t ? -1 : 1;
    return x->begin - y->begin;
}

/* The layout of src/twin/modes/cluster.c, told as phase intervals per pool. */
static size_t phase_marks(eerl_mode mode, const struct eerl_twin_update *u, struct mark *m)
{
    double t0 = u->t_start, gen = u->phase_s[EERL_PHASE_GEN];
    double lp = u->phase_s[EERL_PHASE_LOGPROB], tr = u->phase_s[EERL_PHASE_TRAIN];
    double rf = u->phase_s[EERL_PHASE_REFIT], ta = u->train_arrival, ga = u->gen_arrival;
    double rv, end = t0 + u->duration;
    size_t n = 0;
    unsigned tp = mode == EERL_MODE_COLOCATED ? 0 : 1;

    switch (mode) {
    case EERL_MODE_COLOCATED:
    case EERL_MODE_DISAGGREGATED:
        add(m, &n, t0 + ga - gen, t0 + ga, 0, EERL_PHASE_GEN);
        add(m, &n, t0 + ta - tr - lp, t0 + ta - tr, tp, EERL_PHASE_LOGPROB);
        add(m, &n, t0 + ta - tr, t0 + ta, tp, EERL_PHASE_TRAIN);
        add(m, &n, t0 + ta, fmin(t0 + ta + rf, end), tp, EERL_PHASE_REFIT);
        if (mode == EERL_MODE_DISAGGREGATED)
            add(m, &n, t0 + ta, fmin(t0 + ta + rf, end), 0, EERL_PHASE_REFIT);
        break;
    case EERL_MODE_DRAINED:
    case EERL_MODE_INFLIGHT: {
        double kv = mode == EERL_MODE_INFLIGHT ? gen - ga : 0;
        rv = ga > ta ? ga : ta;
        if (mode == EERL_MODE_INFLIGHT)
            add(m, &n, t0, t0 + ga, 0, EERL_PHASE_GEN);
        else
            add(m, &n, t0 + ga - gen, t0 + ga, 0, EERL_PHASE_GEN);
        add(m, &n, t0 + ta - tr - lp, t0 + ta - tr, 1, EERL_PHASE_LOGPROB);
        add(m, &n, t0 + ta - tr, t0 + ta, 1, EERL_PHASE_TRAIN);
        add(m, &n, t0 + rv, fmin(t0 + rv + rf, end), 0, EERL_PHASE_REFIT);
        add(m, &n, t0 + rv, fmin(t0 + rv + rf, end), 1, EERL_PHASE_REFIT);
        if (kv > 1e-9)
            add(m, &n, fmin(t0 + rv + rf, end), fmin(t0 + rv + rf + kv, end), 0, EERL_PHASE_GEN);
        break;
    }
    case EERL_MODE_COUNT: /* not a mode: validated before */
        break;
    }
    qsort(m, n, sizeof(*m), cmp_mark);
    return n;
}

/* ---- one run --------------------------------------------------------------------------------- */

struct runctx {
    eerl_twin *twin;
    eerl_rt *rt;
    struct vclock vc;
    double next_sample, sample_s;
};

/* Moves virtual time to t, sampling the meter on its schedule on the way. */
static int advance(struct runctx *r, double t, char *why, size_t len)
{
    double now = eerl_twin_now(r->twin);
    int e;

    if (t > now)
        t = now;
    while (r->next_sample < t) {
        r->vc.t = r->next_sample;
        eerl_twin_observe_at(r->twin, r->vc.t);
        e = eerl_rt_sample(r->rt);
        if (e < 0) {
            snprintf(why, len, "meter sample: %s", eerl_rt_last_error(r->rt));
            return e;
        }
        r->next_sample += r->sample_s;
    }
    if (t > r->vc.t)
        r->vc.t = t;
    eerl_twin_observe_at(r->twin, r->vc.t);
    return 0;
}

void eerl_sim_run_free(struct eerl_sim_run *r)
{
    if (r)
        eerl_an_series_free(&r->series);
}

/* What one run holds while it runs. */
struct simrun {
    struct runctx r;
    struct watch w;
    eerl_rt_clock_owner wo;
    eerl_ctl_config cc;
    eerl_device *dev;
    struct eerl_sim_run out;
};

/* The twin, its device and the watching clock owner. */
static int open_twin(const struct eerl_sim_config *c, struct simrun *s, char *why, size_t len)
{
    struct eerl_twin_config tc;
    unsigned n_all = c->n_gen + c->n_train;
    int e;

    memset(&tc, 0, sizeof(tc));
    tc.mode = c->mode;
    tc.n_gen = c->n_gen;
    tc.n_train = c->n_train;
    tc.size = c->size;
    tc.seed = c->seed;
    tc.run_id = c->controller ? 1 : 0;
    tc.divergence = c->divergence;
    tc.noise = c->noise;
    e = eerl_twin_new(c->preset, &tc, &s->r.twin);
    if (e < 0) {
        snprintf(why, len, "simulated cluster: %s%s", eerl_strerror(e),
                 c->noise ? " (per-update noise asked for: the preset must have a fitted "
                            "\"noise\" entry)"
                          : "");
        return e;
    }
    e = eerl_twin_device(s->r.twin, &s->dev);
    if (e < 0) {
        snprintf(why, len, "twin device: %s", eerl_strerror(e));
        return e;
    }
    s->w.n = n_all;
    s->w.mhz = calloc(n_all, sizeof(*s->w.mhz));
    if (!s->w.mhz)
        return EERL_ENOMEM;
    e = eerl__rt_owner_new(s->dev, !c->controller, &s->w.inner);
    if (e < 0) {
        snprintf(why, len, "clock actuator: %s", eerl_strerror(e));
        return e;
    }
    s->w.in = eerl__rt_owner_iface(s->w.inner);
    s->wo.ctx = &s->w;
    s->wo.lock = watch_lock;
    s->wo.restore = watch_restore;
    s->wo.last_error = watch_err;
    return 0;
}

/* The runtime session on the twin's device, in virtual time, through the watching owner. */
static int open_session(const struct eerl_sim_config *c, struct simrun *s, char *why, size_t len)
{
    eerl_rt_config rc;
    unsigned i, n_all = c->n_gen + c->n_train, *all;
    const char *d = "";
    int e;

    eerl_rt_config_default(c->mode, &rc);
    /* The twin's GPUs in order, generation pool first: both pools are parts of one list. */
    all = malloc(n_all * sizeof(*all));
    if (!all)
        return EERL_ENOMEM;
    for (i = 0; i < n_all; i++)
        all[i] = i;
    rc.gen_pool = all;
    rc.n_gen = c->n_gen;
    rc.train_pool = all + c->n_gen;
    rc.n_train = c->n_train;
    rc.allowed_loss = c->allowed_loss;
    rc.strategy = c->strategy;
    /* Table 3 for the mode, with the strategies' own fields (unused by the paper's). */
    eerl_ctl_config_default(c->mode, &s->cc);
    s->cc.allowed_loss = c->allowed_loss;
    s->cc.strategy = c->strategy;
    s->cc.expected_updates = c->expected_updates;
    s->cc.static_setting = c->static_setting;
    rc.ctl_cfg = &s->cc;
    rc.observe_only = !c->controller;
    rc.trace_path = c->trace_path;
    rc.trace_run_json = c->trace_run_json;
    rc.clock = vclock_now;
    rc.clock_ctx = &s->r.vc;
    rc.meter_interval_ms = 1000;
    rc.owner = &s->wo;
    if (c->controller) {
        rc.resume_from = c->resume_from;
        rc.prior = c->prior;
    }
    rc.job_model = c->job_model;
    rc.resume_tag = c->resume_tag;
    s->r.sample_s = c->sample_s > 0 ? c->sample_s : 1.0;
    s->r.next_sample = 0;
    s->r.vc.t = 0;
    e = eerl_rt_new(s->dev, &rc, why, len, &s->r.rt);
    free(all);
    if (e < 0)
        return e;
    s->out.resumed = eerl_rt_resumed(s->r.rt, &d) == 1;
    snprintf(s->out.resume_detail, sizeof(s->out.resume_detail), "%s", d);
    s->out.prior = eerl_rt_prior(s->r.rt, &d) == 1;
    snprintf(s->out.prior_detail, sizeof(s->out.prior_detail), "%s", d);
    snprintf(s->out.series.role, sizeof(s->out.series.role), "%s",
             c->controller ? "controller" : "governor");
    s->out.series.has_seed = 1;
    s->out.series.seed = c->seed;
    s->out.series.mode = c->mode;
    return 0;
}

/* At a phase's begin (m) in update u: the clock the session locked the pool at must be the one
 * the twin ran the phase at. */
static int check_lock(const struct eerl_sim_config *c, const struct simrun *s, const struct mark *m,
                      const struct eerl_twin_update *up, unsigned u, char *why, size_t len)
{
    unsigned gpu = m->pool ? c->n_gen : 0;
    unsigned ran = (m->phase == EERL_PHASE_GEN || (m->phase == EERL_PHASE_REFIT && m->pool == 0 &&
                                                   c->mode != EERL_MODE_COLOCATED))
                       ? up->gen_mhz
                       : up->train_mhz;

    if (s->w.mhz[gpu] == ran)
        return 0;
    snprintf(why, len,
             "update %u: the session locked GPU %u at %u MHz for a phase the twin "
             "ran at %u MHz",
             u + 1, gpu, s->w.mhz[gpu], ran);
    return EERL_ESTATE;
}

/* The update's end: the twin's work to the session, its observation and events to the series. */
static int end_update(struct simrun *s, const struct eerl_twin_update *up, unsigned u, char *why,
                      size_t len)
{
    struct eerl_sim_run *out = &s->out;
    eerl_rt_update_info info;
    eerl_rt_work work;
    const eerl_event *ev;
    unsigned marks = 0;
    size_t k, n_ev;
    int state = -1, e;

    memset(&work, 0, sizeof(work));
    work.update = u + 1;
    work.gen_tokens = up->gen_tokens;
    work.valid_tokens = up->valid_tokens;
    work.longest_tokens = up->longest;
    work.policy_version = (int64_t)(u + 1) - (int64_t)up->policy_age;
    e = eerl_rt_update_end(s->r.rt, &work, &info);
    if (e < 0) {
        snprintf(why, len, "update %u: %s", u + 1, eerl_rt_last_error(s->r.rt));
        return e;
    }
    n_ev = eerl_rt_events(s->r.rt, &ev);
    for (k = 0; k < n_ev; k++) {
        marks |= 1u << ev[k].kind;
        state = (int)ev[k].state;
        if (ev[k].kind == EERL_EV_LOCK && !out->series.locked) {
            out->series.locked = 1;
            out->series.lock_update = work.update;
            out->series.lock_setting = ev[k].candidate;
        }
    }
    out->meter_energy_j += info.obs.energy_j;
    return eerl_an_series_add(&out->series, work.update, info.obs.gen_tokens, info.obs.valid_tokens,
                              info.obs.longest_tokens, info.obs.time_s, info.obs.energy_j,
                              &info.obs.setting, state, marks);
}

/* Update u: the twin runs it under the clocks the session will lock, then its phase boundaries
 * go to the session in virtual time, and its end. */
static int run_update(const struct eerl_sim_config *c, struct simrun *s, unsigned u, char *why,
                      size_t len)
{
    struct eerl_twin_update up;
    struct mark m[MARKS_MAX];
    unsigned g, t;
    size_t nm, k;
    int e;

    /* What the session will lock at this update's phase boundaries. */
    eerl_rt_phase_clock(s->r.rt, EERL_POOL_GEN, EERL_PHASE_GEN, &g);
    eerl_rt_phase_clock(s->r.rt, EERL_POOL_TRAIN, EERL_PHASE_TRAIN, &t);
    e = eerl_twin_set_clocks(s->r.twin, g, t);
    if (e == 0)
        e = eerl_twin_step(s->r.twin, &up);
    if (e < 0) {
        snprintf(why, len, "twin update %u under %u/%u MHz: %s", u + 1, g, t, eerl_strerror(e));
        return e;
    }
    s->out.true_energy_j += up.energy_j;
    s->out.true_time_s += up.duration;
    nm = phase_marks(c->mode, &up, m);
    for (k = 0; k < nm; k++) {
        e = advance(&s->r, m[k].t, why, len);
        if (e < 0)
            return e;
        e = m[k].begin ? eerl_rt_phase_begin(s->r.rt, m[k].pool, m[k].phase)
                       : eerl_rt_phase_end(s->r.rt, m[k].pool, m[k].phase);
        if (e < 0) {
            snprintf(why, len, "update %u: %s", u + 1, eerl_rt_last_error(s->r.rt));
            return e;
        }
        if (m[k].begin && c->controller && (e = check_lock(c, s, &m[k], &up, u, why, len)) < 0)
            return e;
    }
    e = advance(&s->r, up.t_start + up.duration, why, len);
    if (e < 0)
        return e;
    return end_update(s, &up, u, why, len);
}

/* After the last update: the status, the saved state, the session closed and every GPU back to
 * the governor. */
static int close_session(const struct eerl_sim_config *c, struct simrun *s, char *why, size_t len)
{
    unsigned i, n_all = c->n_gen + c->n_train;
    int e;

    eerl_rt_status(s->r.rt, &s->out.status);
    if (c->controller && c->save_state) {
        e = eerl_rt_save_state(s->r.rt, c->save_state);
        if (e < 0) {
            snprintf(why, len, "%s", eerl_rt_last_error(s->r.rt));
            return e;
        }
    }
    e = eerl_rt_close(s->r.rt);
    if (e < 0) {
        snprintf(why, len, "closing the session: %s", eerl_rt_last_error(s->r.rt));
        return e;
    }
    /* Restored: the actuator holds no lock and the twin's requests are the governor's. */
    s->out.restored = s->r.twin->req_gen == EERL_TWIN_GOV && s->r.twin->req_train == EERL_TWIN_GOV;
    for (i = 0; i < n_all; i++) {
        eerl_actuator_gpu_state st;
        if (eerl_actuator_gpu(eerl__rt_owner_actuator(s->w.inner), i, &st) == 0 &&
            (st.locked_max_mhz != 0 || st.touched))
            s->out.restored = 0;
    }
    s->out.lock_calls = s->w.calls;
    return 0;
}

int eerl_sim_run(const struct eerl_sim_config *c, struct eerl_sim_run *ret, char *why, size_t len)
{
    struct simrun s;
    unsigned u;
    int e;

    memset(&s, 0, sizeof(s));
    eerl_an_series_init(&s.out.series);
    if (!c || !ret || !c->preset || c->updates == 0) {
        snprintf(why, len, "bad simulation configuration");
        return EERL_EINVAL;
    }
    e = open_twin(c, &s, why, len);
    if (e < 0 && !s.r.twin)
        return e;
    if (e == 0)
        e = open_session(c, &s, why, len);
    for (u = 0; e == 0 && u < c->updates; u++)
        e = run_update(c, &s, u, why, len);
    if (e == 0)
        e = close_session(c, &s, why, len);
    if (e < 0 && s.r.rt && c->trace_path) {
        eerl_rt_free(s.r.rt);
        s.r.rt = NULL;
        remove(c->trace_path); /* a failed run leaves no partial trace */
    }
    eerl_rt_free(s.r.rt);
    eerl__rt_owner_free(s.w.inner);
    free(s.w.mhz);
    eerl_device_free(s.dev);
    eerl_twin_free(s.r.twin);
    if (e < 0) {
        eerl_an_series_free(&s.out.series);
        return e;
    }
    *ret = s.out;
    return 0;
}

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

#include "eerl/actuator.h"
#include "eerl/error.h"
#include "runtime/owner.h"
#include "sim/sim.h"
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

unsigned eerl__sim_calibration_updates(eerl_mode mode)
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

void eerl__sim_run_free(struct eerl__sim_run *r)
{
    if (r)
        eerl__an_series_free(&r->series);
}

int eerl__sim_run(const struct eerl__sim_config *c, struct eerl__sim_run *ret, char *why,
                  size_t len)
{
    struct eerl_twin_config tc;
    struct runctx r;
    struct watch w;
    eerl_rt_clock_owner wo;
    eerl_rt_config rc;
    eerl_ctl_config cc;
    eerl_device *dev = NULL;
    struct eerl__sim_run out;
    unsigned u, i, n_all, *all = NULL;
    int e;

    memset(&r, 0, sizeof(r));
    memset(&w, 0, sizeof(w));
    memset(&out, 0, sizeof(out));
    eerl__an_series_init(&out.series);
    if (!c || !ret || !c->preset || c->updates == 0) {
        snprintf(why, len, "bad simulation configuration");
        return EERL_EINVAL;
    }
    memset(&tc, 0, sizeof(tc));
    tc.mode = c->mode;
    tc.n_gen = c->n_gen;
    tc.n_train = c->n_train;
    tc.size = c->size;
    tc.seed = c->seed;
    tc.run_id = c->controller ? 1 : 0;
    tc.divergence = c->divergence;
    tc.noise = c->noise;
    e = eerl_twin_new(c->preset, &tc, &r.twin);
    if (e < 0) {
        snprintf(why, len, "simulated cluster: %s%s", eerl_strerror(e),
                 c->noise ? " (per-update noise asked for: the preset must have a fitted "
                            "\"noise\" entry)"
                          : "");
        return e;
    }
    e = eerl_twin_device(r.twin, &dev);
    if (e < 0) {
        snprintf(why, len, "twin device: %s", eerl_strerror(e));
        goto fail;
    }
    n_all = c->n_gen + c->n_train;
    w.n = n_all;
    w.mhz = calloc(n_all, sizeof(*w.mhz));
    if (!w.mhz) {
        e = EERL_ENOMEM;
        goto fail;
    }
    e = eerl__rt_owner_new(dev, !c->controller, &w.inner);
    if (e < 0) {
        snprintf(why, len, "clock actuator: %s", eerl_strerror(e));
        goto fail;
    }
    w.in = eerl__rt_owner_iface(w.inner);
    wo.ctx = &w;
    wo.lock = watch_lock;
    wo.restore = watch_restore;
    wo.last_error = watch_err;

    eerl_rt_config_default(c->mode, &rc);
    /* The twin's GPUs in order, generation pool first: both pools are parts of one list. */
    all = malloc(n_all * sizeof(*all));
    if (!all) {
        e = EERL_ENOMEM;
        goto fail;
    }
    for (i = 0; i < n_all; i++)
        all[i] = i;
    rc.gen_pool = all;
    rc.n_gen = c->n_gen;
    rc.train_pool = all + c->n_gen;
    rc.n_train = c->n_train;
    rc.allowed_loss = c->allowed_loss;
    rc.strategy = c->strategy;
    /* Table 3 for the mode, with the strategies' own fields (unused by the paper's). */
    eerl_ctl_config_default(c->mode, &cc);
    cc.allowed_loss = c->allowed_loss;
    cc.strategy = c->strategy;
    cc.expected_updates = c->expected_updates;
    cc.static_setting = c->static_setting;
    rc.ctl_cfg = &cc;
    rc.observe_only = !c->controller;
    rc.trace_path = c->trace_path;
    rc.trace_run_json = c->trace_run_json;
    rc.clock = vclock_now;
    rc.clock_ctx = &r.vc;
    rc.meter_interval_ms = 1000;
    rc.owner = &wo;
    if (c->controller)
        rc.resume_from = c->resume_from;
    r.sample_s = c->sample_s > 0 ? c->sample_s : 1.0;
    r.next_sample = 0;
    r.vc.t = 0;
    e = eerl_rt_new(dev, &rc, why, len, &r.rt);
    free(all);
    all = NULL;
    if (e < 0)
        goto fail;
    {
        const char *d = "";
        out.resumed = eerl_rt_resumed(r.rt, &d) == 1;
        snprintf(out.resume_detail, sizeof(out.resume_detail), "%s", d);
    }
    snprintf(out.series.role, sizeof(out.series.role), "%s",
             c->controller ? "controller" : "governor");
    out.series.has_seed = 1;
    out.series.seed = c->seed;
    out.series.mode = c->mode;

    for (u = 0; u < c->updates; u++) {
        struct eerl_twin_update up;
        struct mark m[MARKS_MAX];
        eerl_rt_update_info info;
        eerl_rt_work work;
        const eerl_event *ev;
        unsigned g, t, marks = 0;
        size_t nm, k, n_ev;
        int state = -1;

        /* What the session will lock at this update's phase boundaries. */
        eerl_rt_phase_clock(r.rt, EERL_POOL_GEN, EERL_PHASE_GEN, &g);
        eerl_rt_phase_clock(r.rt, EERL_POOL_TRAIN, EERL_PHASE_TRAIN, &t);
        e = eerl_twin_set_clocks(r.twin, g, t);
        if (e == 0)
            e = eerl_twin_step(r.twin, &up);
        if (e < 0) {
            snprintf(why, len, "twin update %u under %u/%u MHz: %s", u + 1, g, t, eerl_strerror(e));
            goto fail;
        }
        out.true_energy_j += up.energy_j;
        out.true_time_s += up.duration;
        nm = phase_marks(c->mode, &up, m);
        for (k = 0; k < nm; k++) {
            e = advance(&r, m[k].t, why, len);
            if (e < 0)
                goto fail;
            e = m[k].begin ? eerl_rt_phase_begin(r.rt, m[k].pool, m[k].phase)
                           : eerl_rt_phase_end(r.rt, m[k].pool, m[k].phase);
            if (e < 0) {
                snprintf(why, len, "update %u: %s", u + 1, eerl_rt_last_error(r.rt));
                goto fail;
            }
            if (m[k].begin && c->controller) {
                /* The clock the session locked this pool at must be the one the twin ran. */
                unsigned gpu = m[k].pool ? c->n_gen : 0;
                unsigned ran = (m[k].phase == EERL_PHASE_GEN ||
                                (m[k].phase == EERL_PHASE_REFIT && m[k].pool == 0 &&
                                 c->mode != EERL_MODE_COLOCATED))
                                   ? up.gen_mhz
                                   : up.train_mhz;
                if (w.mhz[gpu] != ran) {
                    snprintf(why, len,
                             "update %u: the session locked GPU %u at %u MHz for a phase the twin "
                             "ran at %u MHz",
                             u + 1, gpu, w.mhz[gpu], ran);
                    e = EERL_ESTATE;
                    goto fail;
                }
            }
        }
        e = advance(&r, up.t_start + up.duration, why, len);
        if (e < 0)
            goto fail;
        memset(&work, 0, sizeof(work));
        work.update = u + 1;
        work.gen_tokens = up.gen_tokens;
        work.valid_tokens = up.valid_tokens;
        work.longest_tokens = up.longest;
        work.policy_version = (int64_t)(u + 1) - (int64_t)up.policy_age;
        e = eerl_rt_update_end(r.rt, &work, &info);
        if (e < 0) {
            snprintf(why, len, "update %u: %s", u + 1, eerl_rt_last_error(r.rt));
            goto fail;
        }
        n_ev = eerl_rt_events(r.rt, &ev);
        for (k = 0; k < n_ev; k++) {
            marks |= 1u << ev[k].kind;
            state = (int)ev[k].state;
            if (ev[k].kind == EERL_EV_LOCK && !out.series.locked) {
                out.series.locked = 1;
                out.series.lock_update = work.update;
                out.series.lock_setting = ev[k].candidate;
            }
        }
        out.meter_energy_j += info.obs.energy_j;
        e = eerl__an_series_add(&out.series, work.update, info.obs.gen_tokens,
                                info.obs.valid_tokens, info.obs.longest_tokens, info.obs.time_s,
                                info.obs.energy_j, &info.obs.setting, state, marks);
        if (e < 0)
            goto fail;
    }
    eerl_rt_status(r.rt, &out.status);
    if (c->controller && c->save_state) {
        e = eerl_rt_save_state(r.rt, c->save_state);
        if (e < 0) {
            snprintf(why, len, "%s", eerl_rt_last_error(r.rt));
            goto fail;
        }
    }
    e = eerl_rt_close(r.rt);
    if (e < 0) {
        snprintf(why, len, "closing the session: %s", eerl_rt_last_error(r.rt));
        goto fail;
    }
    /* Restored: the actuator holds no lock and the twin's requests are the governor's. */
    out.restored = r.twin->req_gen == EERL_TWIN_GOV && r.twin->req_train == EERL_TWIN_GOV;
    for (i = 0; i < n_all; i++) {
        eerl_actuator_gpu_state st;
        if (eerl_actuator_gpu(eerl__rt_owner_actuator(w.inner), i, &st) == 0 &&
            (st.locked_max_mhz != 0 || st.touched))
            out.restored = 0;
    }
    out.lock_calls = w.calls;
    eerl_rt_free(r.rt);
    eerl__rt_owner_free(w.inner);
    free(w.mhz);
    eerl_device_free(dev);
    eerl_twin_free(r.twin);
    *ret = out;
    return 0;
fail:
    if (r.rt) {
        eerl_rt_free(r.rt);
        if (c && c->trace_path)
            remove(c->trace_path); /* a failed run leaves no partial trace */
    }
    eerl__rt_owner_free(w.inner);
    free(w.mhz);
    free(all);
    eerl_device_free(dev);
    eerl_twin_free(r.twin);
    eerl__an_series_free(&out.series);
    return e;
}

/* ---- oracle ---------------------------------------------------------------------------------- */

struct eval {
    double lq, le;
};

/* The totals of a seed's run held at (g, t) over updates 1..updates-1, its batches replayed. */
static int held_totals(const eerl_twin_preset *p, const struct eerl_twin_config *cfg,
                       unsigned updates, const struct eerl__wl_batch *batches, unsigned g,
                       unsigned t, struct eerl_twin_totals *ret)
{
    double T, E, N;
    int e = eerl__sim_twin_windows(p, cfg, &g, &t, 1, updates, updates, batches, &T, &E, &N);

    if (e < 0)
        return e;
    ret->valid_tokens = N;
    ret->seconds = T;
    ret->joules = E;
    ret->updates = updates - 1;
    return 0;
}

static int eval_pair(const eerl_twin_preset *p, const struct eerl_twin_config *base,
                     const uint64_t *seeds, size_t n, unsigned updates,
                     const struct eerl__wl_batch *batches, const struct eerl_twin_totals *gov,
                     unsigned g, unsigned t, double *dq, double *sav, double *sd_dq, double *sd_sav)
{
    double lq = 0, le = 0;
    size_t i;
    int e;

    for (i = 0; i < n; i++) {
        struct eerl_twin_config cfg = *base;
        struct eerl_twin_totals c;
        double q, en;

        cfg.seed = seeds[i];
        e = held_totals(p, &cfg, updates, batches + i * updates, g, t, &c);
        if (e < 0)
            return e;
        q = (c.valid_tokens / c.seconds) / (gov[i].valid_tokens / gov[i].seconds);
        en = (c.joules / c.valid_tokens) / (gov[i].joules / gov[i].valid_tokens);
        if (sd_dq) {
            sd_dq[i] = 100 * (q - 1);
            sd_sav[i] = 100 * (1 - en);
        }
        lq += log(q);
        le += log(en);
    }
    *dq = 100 * (exp(lq / n) - 1);
    *sav = 100 * (1 - exp(le / n));
    return 0;
}

/* The oracle search's state: the candidate clocks (the governor first, then the supported
 * clocks from the top), every pair evaluated so far and the best one meeting the allowance. */
struct osearch {
    const eerl_twin_preset *preset;
    const struct eerl_twin_config *base;
    const uint64_t *seeds;
    size_t n_seeds, n; /* n: candidates */
    unsigned updates;
    const struct eerl_twin_totals *gov;
    const struct eerl__wl_batch *batches; /* [seed * updates + u] */
    const unsigned *cand;
    double allowed_pct;
    signed char *done; /* [g * n + t]: 0 not yet, 1 evaluated */
    double *dq, *sav;
    unsigned evaluated;
    size_t best_g, best_t;
    double best, best_dq;
};

/* Evaluates the pair of candidates (g, t) once; returns < 0 on error, else whether it meets the
 * allowance. */
static int opair(struct osearch *s, size_t g, size_t t, double *sav)
{
    size_t k = g * s->n + t;

    if (!s->done[k]) {
        int e = eval_pair(s->preset, s->base, s->seeds, s->n_seeds, s->updates, s->batches, s->gov,
                          s->cand[g], s->cand[t], &s->dq[k], &s->sav[k], NULL, NULL);
        if (e < 0)
            return e;
        s->done[k] = 1;
        s->evaluated++;
        if (s->dq[k] >= -s->allowed_pct && s->sav[k] > s->best) {
            s->best = s->sav[k];
            s->best_dq = s->dq[k];
            s->best_g = g;
            s->best_t = t;
        }
    }
    if (sav)
        *sav = s->sav[k];
    return s->dq[k] >= -s->allowed_pct;
}

/* The last index in lo..hi (lo known to meet the allowance) whose pair meets it, where the pair
 * is (fixed, i) for a training search or (i, fixed) for a generation search: bisection, since a
 * lower clock never makes an update shorter. */
static long olast(struct osearch *s, size_t lo, size_t hi, size_t fixed, int train)
{
    while (lo < hi) {
        size_t mid = lo + (hi - lo + 1) / 2;
        int ok = train ? opair(s, fixed, mid, NULL) : opair(s, mid, fixed, NULL);
        if (ok < 0)
            return ok;
        if (ok)
            lo = mid;
        else
            hi = mid - 1;
    }
    return (long)lo;
}

int eerl__sim_oracle(const eerl_twin_preset *preset, eerl_mode mode, unsigned n_gen,
                     unsigned n_train, char size, unsigned updates, const uint64_t *seeds,
                     size_t n_seeds, double allowed_loss, struct eerl__sim_oracle *ret)
{
    unsigned clocks[EERL_DEVICE_CLOCKS_MAX], cand[EERL_DEVICE_CLOCKS_MAX + 1];
    struct eerl_twin_totals *gov = NULL;
    struct eerl__wl_batch *batches = NULL;
    struct eerl_twin_config base;
    struct eerl__sim_oracle o;
    struct osearch s;
    size_t n_clocks = 0, n_cand = 0, i;
    unsigned best_g = 0, best_t = 0, evaluated = 0;
    double best = -INFINITY, best_dq = 0;
    int e;

    if (!preset || !ret || n_seeds == 0 || n_seeds > EERL__AN_SEEDS_MAX ||
        updates < EERL__AN_FIRST_UPDATE)
        return EERL_EINVAL;
    e = eerl_twin_preset_clocks(preset, clocks, EERL_DEVICE_CLOCKS_MAX, &n_clocks);
    if (e < 0)
        return e;
    memset(&base, 0, sizeof(base));
    base.mode = mode;
    base.n_gen = n_gen;
    base.n_train = n_train;
    base.size = size;
    base.divergence = 0;
    memset(&s, 0, sizeof(s));
    gov = calloc(n_seeds, sizeof(*gov));
    batches = calloc(n_seeds * (size_t)updates, sizeof(*batches));
    cand[n_cand++] = EERL_TWIN_GOV;
    for (i = 0; i < n_clocks; i++)
        cand[n_cand++] = clocks[i];
    s.done = calloc(n_cand * n_cand, 1);
    s.dq = calloc(n_cand * n_cand, sizeof(double));
    s.sav = calloc(n_cand * n_cand, sizeof(double));
    if (!gov || !batches || !s.done || !s.dq || !s.sav) {
        e = EERL_ENOMEM;
        goto out;
    }
    /* Every setting of a seed sees the same batches: drawn once. */
    for (i = 0; i < n_seeds; i++) {
        struct eerl_twin_config cfg = base;
        cfg.seed = seeds[i];
        e = eerl__wl_draw(&preset->wl, size, seeds[i], updates, batches + i * updates);
        if (e == 0)
            e = held_totals(preset, &cfg, updates, batches + i * updates, EERL_TWIN_GOV,
                            EERL_TWIN_GOV, &gov[i]);
        if (e < 0)
            goto out;
    }
    memset(&o, 0, sizeof(o));
    /* Every supported pair that can be best, on the supported clocks' own grid. Lowering either
     * clock never shortens an update in the twin's modes, so the pairs that meet the allowance
     * are, for each generation clock, every training clock down to a lowest one, and the
     * generation clocks that can take part are those that meet it with training at the
     * governor. Bisection finds the lowest generation clock, then for each generation clock
     * down to it the lowest training clock; from there the training clock goes up while the
     * saving rises (energy per token is U-shaped in a clock: below some clock the longer phase
     * costs more than the lower power saves), two steps past the last rise. (Until this
     * search, a grid of every third clock refined within 30 MHz of its best missed better
     * pairs: 1815/1305 at 10.17% where 1800/1320 saves 10.51% within 2%, Qwen H100 colocated
     * 32 M, 107 updates.) */
    s.preset = preset;
    s.base = &base;
    s.seeds = seeds;
    s.n_seeds = n_seeds;
    s.n = n_cand;
    s.updates = updates;
    s.gov = gov;
    s.batches = batches;
    s.cand = cand;
    s.allowed_pct = 100 * allowed_loss;
    s.best = -INFINITY;
    {
        long gmin = olast(&s, 0, n_cand - 1, 0, 0), g;

        if (gmin < 0) {
            e = (int)gmin;
            goto out;
        }
        for (g = 0; g <= gmin; g++) {
            long tmin = olast(&s, 0, n_cand - 1, (size_t)g, 1), t;
            double top = -INFINITY, sv;
            int falls = 0;

            if (tmin < 0) {
                e = (int)tmin;
                goto out;
            }
            for (t = tmin; t >= 0 && falls < 2; t--) {
                e = opair(&s, (size_t)g, (size_t)t, &sv);
                if (e < 0)
                    goto out;
                if (sv > top) {
                    top = sv;
                    falls = 0;
                } else {
                    falls++;
                }
            }
        }
    }
    e = 0;
    evaluated = s.evaluated;
    if (isfinite(s.best)) {
        best = s.best;
        best_dq = s.best_dq;
        best_g = cand[s.best_g];
        best_t = cand[s.best_t];
    }
    if (!isfinite(best)) { /* nothing meets the allowance: the governor itself */
        best_g = best_t = EERL_TWIN_GOV;
        best = 0;
        best_dq = 0;
    }
    e = eval_pair(preset, &base, seeds, n_seeds, updates, batches, gov, best_g, best_t, &best_dq,
                  &best, o.seed_dq_pct, o.seed_saving_pct);
    if (e < 0)
        goto out;
    o.setting.mhz[EERL_GROUP_GEN] = best_g;
    o.setting.mhz[EERL_GROUP_TRAIN] = best_t;
    o.setting.idle_mhz =
        ((best_g || best_t) && (mode == EERL_MODE_DISAGGREGATED || mode == EERL_MODE_DRAINED))
            ? (unsigned)preset->gpu.idle_clock
            : EERL_CLOCK_GOVERNOR;
    o.saving_pct = best;
    o.dq_pct = best_dq;
    o.evaluated = evaluated;
    *ret = o;
    e = 0;
out:
    free(gov);
    free(batches);
    free(s.done);
    free(s.dq);
    free(s.sav);
    return e;
}

/* Execution modes. Per-update work at fmax (seconds), C = tokens log-prob and training compute
 * (the consumed batch's responses in the loss mask, workload.h):
 *   gen   = c_tail * L + c_tok * G / n_gen     (in-flight: c_tail * if_tail * mean length, and
 *                                              the tokens generated this update, see below)
 *   lp    = c_lp * C / n_lp                    (n_lp: training pool, or all GPUs colocated)
 *   train = c_tr * C / n_train + t_tr0
 *   refit = t_refit, other = t_other (reward, host work: GPUs wait)
 * each scaled by its phase's time factor at the clock it runs at (physics.c); generation's two
 * terms have their own rooflines (the tail: a few sequences decoding; the throughput term:
 * large-batch decode, presets.h ph_tok) at one clock and one power.
 * colocated:     T = gen + other + lp + train + refit, all GPUs in turn; a pair run pays two
 *                clock switches per update (the setting is applied at each phase boundary),
 *                switch_s each: milliseconds (physics.h bounds it at 50 ms).
 * disaggregated: T as colocated; the idle pool waits at governor idle (fmax) in a governor run
 *                and at the idle clock when a pair is set.
 * drained:       gen pool makes batch u while the training pool trains on batch u-1;
 *                T = max(gen, lp + train - after) + after + refit + other, where `after`
 *                (t_tr_after of t_tr0, at the training clock) is the training pool's side of
 *                the refit, which waits for generation to drain; waits at the idle clock
 *                (pair) or governor idle; policy age 1.
 * in-flight:     generation never drains: a fraction `spill` of batch u is still generating at
 *                the refit and finishes in update u+1 under u+1's clocks (crossing tokens); the
 *                tail term follows the batch training waits for (the consumed one, whose last
 *                responses finish in this update); after the refit the generation pool
 *                recomputes the KV cache of those tokens (kv) while the training pool, whose
 *                next batch is ready under the policy-age limit, starts on it:
 *                T = max(gen + kv, other + lp + train) + refit; pools wait at their own clocks;
 *                policy age 2.
 * Waiting GPUs draw eerl__gpu_wait_w at the clock they wait at. In the asynchronous modes each
 * pool's speed spreads from seed to seed (gpu.jitter): a sampled run carries its seed's factors
 * (run.c), the expected evaluation takes E[max] of the rendezvous (eerl__gpu_rendezvous). */
#include <math.h>
#include <string.h>

#include "twin/modes/cluster.h"

struct ctx {
    const eerl_twin_preset *p;
    const struct eerl__cluster_in *in;
    struct eerl__cluster_out *out;
};

static void seg(struct ctx *c, int pool, unsigned phase, double dt, double w, double mhz,
                unsigned flags)
{
    struct eerl__pool_plan *pl = &c->out->pool[pool];
    struct eerl__seg *s;
    double j;

    if (dt <= 0 || pl->n_gpus == 0)
        return;
    if (c->in->power_scale > 0)
        w *= c->in->power_scale;
    j = dt * w * pl->n_gpus;
    c->out->phase_j[phase] += j;
    c->out->energy_j += j;
    if (phase == EERL_PHASE_OTHER)
        c->out->phase_s[phase] += dt;
    /* Merge with the previous segment when nothing changes (keeps the timeline short). */
    if (pl->n_segs > 0) {
        s = &pl->seg[pl->n_segs - 1];
        if (s->phase == phase && s->w == w && s->mhz == mhz && s->flags == flags) {
            s->dt += dt;
            return;
        }
    }
    if (pl->n_segs >= EERL__SEG_MAX) { /* cannot happen with the layouts below; keep energy */
        pl->seg[pl->n_segs - 1].dt += dt;
        return;
    }
    s = &pl->seg[pl->n_segs++];
    s->dt = dt;
    s->w = w;
    s->mhz = mhz;
    s->phase = phase;
    s->flags = flags;
}

/* An active phase: time factor at the effective clock, power there. */
struct act {
    double t, w, f;
    unsigned flags;
};

static struct act active(const eerl_twin_preset *p, int ph, unsigned req, double work_s,
                         double scale)
{
    struct act a;
    int capped = 0;

    a.f = eerl__gpu_eff_clock(&p->gpu, &p->ph[ph], req, &capped);
    a.t = work_s * eerl__phase_time_factor(&p->gpu, &p->ph[ph], a.f) * scale;
    a.w = eerl__gpu_active_w(&p->gpu, &p->ph[ph], a.f);
    a.flags = capped ? EERL__SEG_CAPPED : 0;
    return a;
}

/* Mean-one lognormal factor of a phase group of time t: log sd
 * sqrt(abs^2 + root^2 t + (rel t)^2) / t (presets.h). */
static double noise_factor(double rel, double abs_s, double root, double t, double z)
{
    double s;

    if (!(t > 0))
        return 1.0;
    s = sqrt(abs_s * abs_s + root * root * t + rel * rel * t * t) / t;
    if (s > 0.5) /* a phase of a few milliseconds: keep its factor bounded */
        s = 0.5;
    return exp(s * z - 0.5 * s * s);
}

/* One update's phases at the clocks they run at, and where and at what power waiting GPUs sit. */
struct work {
    struct act gen, lp, tr, after, rf_g, rf_t, kv;
    double other, sw;
    double f_wait_g, f_wait_t, w_wait_g, w_wait_t;
};

/* The work of each phase (the header's formulas) at the requested clocks. */
static void plan_phases(const struct ctx *c, unsigned ng, unsigned nt, double sc, struct work *u)
{
    const eerl_twin_preset *p = c->p;
    const struct eerl__cluster_in *in = c->in;
    const struct eerl__costs *k = &p->c;
    double C = in->train_batch.C;
    double gen_tail, gen_tok, gen_tokens, kv_tokens = 0;
    /* Drained: the part of the fixed training work that waits for the rendezvous. */
    double t_after = in->mode == EERL_MODE_DRAINED ? k->t_tr_after : 0;

    if (in->mode == EERL_MODE_INFLIGHT && !in->first) {
        gen_tokens = (1 - k->spill) * in->gen_batch.G + in->spill_in;
        gen_tail = k->c_tail * k->if_tail * in->train_batch.mean_len;
        gen_tok = k->c_tok * gen_tokens / ng;
        kv_tokens = k->spill * in->gen_batch.G;
        c->out->crossing_tokens = in->spill_in;
        c->out->spill_out = kv_tokens;
    } else {
        gen_tokens = in->gen_batch.G;
        gen_tail = k->c_tail * in->gen_batch.L;
        gen_tok = k->c_tok * gen_tokens / ng;
    }
    u->gen = active(p, EERL_PHASE_GEN, in->req_gen, gen_tail, sc);
    u->gen.t += gen_tok * eerl__phase_time_factor(&p->gpu, &p->ph_tok, u->gen.f) * sc;
    u->lp = active(p, EERL_PHASE_LOGPROB, in->req_train, k->c_lp * C / nt, sc);
    u->tr = active(p, EERL_PHASE_TRAIN, in->req_train, k->c_tr * C / nt + k->t_tr0 - t_after, sc);
    u->after = active(p, EERL_PHASE_TRAIN, in->req_train, t_after, sc);
    u->rf_g = active(p, EERL_PHASE_REFIT, in->req_gen, k->t_refit, sc);
    u->rf_t = active(p, EERL_PHASE_REFIT, in->req_train, k->t_refit, sc);
    u->kv = active(p, EERL_PHASE_GEN, in->req_gen, k->c_kv * kv_tokens / ng, sc);
}

/* What the work cannot explain, per update and phase group; power follows so that energy varies
 * as factor^energy_exp (stalls draw less). */
static void add_noise(const struct ctx *c, struct work *u)
{
    const struct eerl__noise *nz = &c->p->noise;
    double fg, ft, pg, pt;

    if (!c->in->noise || !nz->have)
        return;
    fg =
        noise_factor(nz->gen_rel, nz->gen_abs_s, nz->gen_root, u->gen.t + u->kv.t, c->in->noise_zg);
    ft = noise_factor(nz->train_rel, nz->train_abs_s, nz->train_root, u->lp.t + u->tr.t,
                      c->in->noise_zt);
    pg = pow(fg, nz->energy_exp - 1);
    pt = pow(ft, nz->energy_exp - 1);
    u->gen.t *= fg;
    u->kv.t *= fg;
    u->lp.t *= ft;
    u->tr.t *= ft;
    u->after.t *= ft;
    u->gen.w *= pg;
    u->kv.w *= pg;
    u->lp.w *= pt;
    u->tr.w *= pt;
    u->after.w *= pt;
}

/* Where waiting GPUs sit: the idle clock for separate pools of a pair run (drained and
 * disaggregated), their own clock otherwise (the governor idles at fmax). A governor run pays
 * no clock switch. */
static void plan_waits(const struct ctx *c, int pair, struct work *u)
{
    const struct eerl__cluster_in *in = c->in;
    const struct eerl__gpu *g = &c->p->gpu;

    if (pair && (in->mode == EERL_MODE_DISAGGREGATED || in->mode == EERL_MODE_DRAINED)) {
        u->f_wait_g = u->f_wait_t = g->idle_clock;
    } else {
        u->f_wait_g = in->req_gen ? in->req_gen - g->droop_mhz : g->fmax;
        u->f_wait_t = in->req_train ? in->req_train - g->droop_mhz : g->fmax;
    }
    u->w_wait_g = eerl__gpu_wait_w(g, u->f_wait_g);
    u->w_wait_t = eerl__gpu_wait_w(g, u->f_wait_t);
    u->sw = pair ? g->switch_s : 0;
}

static void lay_colocated(struct ctx *c, const struct work *u)
{
    struct eerl__cluster_out *out = c->out;
    /* The runtime applies each phase's setting at its boundary in every pair run (also for
     * equal pairs); a lock takes milliseconds, so this costs ~0.03% of an update. */
    double s2 = u->sw;

    seg(c, 0, EERL_PHASE_GEN, u->gen.t, u->gen.w, u->gen.f, u->gen.flags);
    seg(c, 0, EERL_PHASE_OTHER, u->other, u->w_wait_g, u->f_wait_g, EERL__SEG_IDLE);
    seg(c, 0, EERL_PHASE_OTHER, s2, u->w_wait_t, u->f_wait_t, EERL__SEG_IDLE);
    seg(c, 0, EERL_PHASE_LOGPROB, u->lp.t, u->lp.w, u->lp.f, u->lp.flags);
    seg(c, 0, EERL_PHASE_TRAIN, u->tr.t, u->tr.w, u->tr.f, u->tr.flags);
    seg(c, 0, EERL_PHASE_REFIT, u->rf_t.t, u->rf_t.w, u->rf_t.f, u->rf_t.flags);
    seg(c, 0, EERL_PHASE_OTHER, s2, u->w_wait_g, u->f_wait_g, EERL__SEG_IDLE);
    out->gen_arrival = u->gen.t;
    out->train_arrival = u->gen.t + u->other + s2 + u->lp.t + u->tr.t;
    out->duration = out->train_arrival + u->rf_t.t + s2;
    out->policy_age = 0;
}

static void lay_disaggregated(struct ctx *c, const struct work *u)
{
    struct eerl__cluster_out *out = c->out;
    double sw = u->sw, other = u->other;
    double tg = sw + u->gen.t, tt = sw + u->lp.t + u->tr.t;

    seg(c, 0, EERL_PHASE_OTHER, sw, u->w_wait_g, u->f_wait_g, EERL__SEG_IDLE);
    seg(c, 0, EERL_PHASE_GEN, u->gen.t, u->gen.w, u->gen.f, u->gen.flags);
    seg(c, 0, EERL_PHASE_OTHER, other + tt, u->w_wait_g, u->f_wait_g, EERL__SEG_IDLE);
    seg(c, 0, EERL_PHASE_REFIT, u->rf_g.t, u->rf_g.w, u->rf_g.f, u->rf_g.flags);
    seg(c, 1, EERL_PHASE_OTHER, tg + other + sw, u->w_wait_t, u->f_wait_t, EERL__SEG_IDLE);
    seg(c, 1, EERL_PHASE_LOGPROB, u->lp.t, u->lp.w, u->lp.f, u->lp.flags);
    seg(c, 1, EERL_PHASE_TRAIN, u->tr.t, u->tr.w, u->tr.f, u->tr.flags);
    seg(c, 1, EERL_PHASE_REFIT, u->rf_t.t, u->rf_t.w, u->rf_t.f, u->rf_t.flags);
    out->gen_arrival = tg;
    out->train_arrival = tg + other + tt;
    out->duration = out->train_arrival + u->rf_t.t;
    out->policy_age = 0;
}

/* Drained and in flight: each pool's speed spread of a sampled run (cluster.h gen_jit,
 * train_jit), then the phase times as the pools report them. */
static void apply_jitter(const struct ctx *c, struct work *u)
{
    struct eerl__cluster_out *out = c->out;

    if (c->in->gen_jit > 0)
        u->gen.t *= c->in->gen_jit;
    if (c->in->train_jit > 0) {
        u->lp.t *= c->in->train_jit;
        u->tr.t *= c->in->train_jit;
        u->after.t *= c->in->train_jit;
    }
    out->phase_s[EERL_PHASE_GEN] = u->gen.t + u->kv.t;
    out->phase_s[EERL_PHASE_LOGPROB] = u->lp.t;
    out->phase_s[EERL_PHASE_TRAIN] = u->tr.t;
    /* The training pool's side of the refit (drained): refit time, training physics. */
    out->phase_s[EERL_PHASE_REFIT] = u->rf_t.t + u->after.t;
}

static void lay_async(struct ctx *c, const struct work *u)
{
    const struct eerl__cluster_in *in = c->in;
    struct eerl__cluster_out *out = c->out;
    int infl = in->mode == EERL_MODE_INFLIGHT;
    double sw = u->sw, other = u->other;
    double tg, tt, rv, pause;

    tg = u->gen.t;
    tt = u->lp.t + u->tr.t;
    if (!infl) {
        tg += sw;
        tt += sw;
    } else {
        /* The KV recompute after the refit is the generation pool's work; the training pool
         * does not wait for it (its next batch is ready: policy age 2). */
        tg += u->kv.t;
        tt += other;
    }
    if (in->first) /* nothing generated yet: training waits for the first batch */
        tt += tg;
    rv = in->expected ? eerl__gpu_rendezvous(&c->p->gpu, tg, tt) : (tg > tt ? tg : tt);
    /* Generation pool: work, wait for the rendezvous, refit (+ KV recompute in flight). */
    if (!infl)
        seg(c, 0, EERL_PHASE_OTHER, sw, u->w_wait_g, u->f_wait_g, EERL__SEG_IDLE);
    seg(c, 0, EERL_PHASE_GEN, u->gen.t, u->gen.w, u->gen.f, u->gen.flags);
    seg(c, 0, EERL_PHASE_GEN, u->kv.t, u->kv.w, u->kv.f, u->kv.flags); /* in flight only */
    seg(c, 0, EERL_PHASE_OTHER, rv - tg + u->after.t, u->w_wait_g, u->f_wait_g, EERL__SEG_IDLE);
    seg(c, 0, EERL_PHASE_REFIT, u->rf_g.t, u->rf_g.w, u->rf_g.f, u->rf_g.flags);
    /* Training pool. */
    if (in->first)
        seg(c, 1, EERL_PHASE_OTHER, tg, u->w_wait_t, u->f_wait_t, EERL__SEG_IDLE);
    if (!infl)
        seg(c, 1, EERL_PHASE_OTHER, sw, u->w_wait_t, u->f_wait_t, EERL__SEG_IDLE);
    else
        seg(c, 1, EERL_PHASE_OTHER, other, u->w_wait_t, u->f_wait_t, EERL__SEG_IDLE);
    seg(c, 1, EERL_PHASE_LOGPROB, u->lp.t, u->lp.w, u->lp.f, u->lp.flags);
    seg(c, 1, EERL_PHASE_TRAIN, u->tr.t, u->tr.w, u->tr.f, u->tr.flags);
    seg(c, 1, EERL_PHASE_OTHER, rv - tt, u->w_wait_t, u->f_wait_t, EERL__SEG_IDLE);
    seg(c, 1, EERL_PHASE_REFIT, u->after.t, u->after.w, u->after.f, u->after.flags);
    seg(c, 1, EERL_PHASE_REFIT, u->rf_t.t, u->rf_t.w, u->rf_t.f, u->rf_t.flags);
    pause = u->after.t + (u->rf_g.t > u->rf_t.t ? u->rf_g.t : u->rf_t.t);
    if (!infl) { /* host work after the rendezvous: both pools wait */
        seg(c, 0, EERL_PHASE_OTHER, other, u->w_wait_g, u->f_wait_g, EERL__SEG_IDLE);
        seg(c, 1, EERL_PHASE_OTHER, other, u->w_wait_t, u->f_wait_t, EERL__SEG_IDLE);
        pause += other;
    }
    out->gen_arrival = tg;
    out->train_arrival = tt;
    out->duration = rv + pause;
    out->policy_age = infl ? 2 : 1;
}

void eerl__cluster_update(const eerl_twin_preset *p, const struct eerl__cluster_in *in,
                          struct eerl__cluster_out *out)
{
    struct ctx c = {p, in, out};
    int pair = in->req_gen != 0 || in->req_train != 0;
    int colo = in->mode == EERL_MODE_COLOCATED;
    double sc = in->time_scale > 0 ? in->time_scale : 1.0;
    unsigned ng = colo ? in->n_gen + in->n_train : in->n_gen;
    unsigned nt = colo ? ng : in->n_train;
    struct work u;

    memset(out, 0, sizeof(*out));
    out->pool[0].n_gpus = ng;
    out->pool[1].n_gpus = colo ? 0 : nt;
    plan_phases(&c, ng, nt, sc, &u);
    add_noise(&c, &u);
    out->gen_eff_mhz = u.gen.f;
    out->train_eff_mhz = u.tr.f;
    out->phase_s[EERL_PHASE_GEN] = u.gen.t + u.kv.t;
    out->phase_s[EERL_PHASE_LOGPROB] = u.lp.t;
    out->phase_s[EERL_PHASE_TRAIN] = u.tr.t;
    out->phase_s[EERL_PHASE_REFIT] = u.rf_t.t;
    u.other = p->c.t_other * sc;
    plan_waits(&c, pair, &u);

    switch (in->mode) {
    case EERL_MODE_COLOCATED:
        lay_colocated(&c, &u);
        break;
    case EERL_MODE_DISAGGREGATED:
        lay_disaggregated(&c, &u);
        break;
    case EERL_MODE_DRAINED:
    case EERL_MODE_INFLIGHT:
        apply_jitter(&c, &u);
        lay_async(&c, &u);
        break;
    case EERL_MODE_COUNT: /* not a mode: validated before */
        break;
    }
}

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

void eerl__cluster_update(const eerl_twin_preset *p, const struct eerl__cluster_in *in,
                          struct eerl__cluster_out *out)
{
    const struct eerl__costs *k = &p->c;
    const struct eerl__gpu *g = &p->gpu;
    struct ctx c = {p, in, out};
    int pair = in->req_gen != 0 || in->req_train != 0;
    int colo = in->mode == EERL_MODE_COLOCATED;
    double sc = in->time_scale > 0 ? in->time_scale : 1.0;
    unsigned ng = colo ? in->n_gen + in->n_train : in->n_gen;
    unsigned nt = colo ? ng : in->n_train;
    double C = in->train_batch.C;
    double gen_tail, gen_tok, gen_tokens, kv_tokens = 0;
    /* Drained: the part of the fixed training work that waits for the rendezvous. */
    double t_after = in->mode == EERL_MODE_DRAINED ? k->t_tr_after : 0;
    struct act gen, lp, tr, after, rf_g, rf_t, kv;
    double other = k->t_other * sc, sw = g->switch_s;
    double f_wait_g, f_wait_t, w_wait_g, w_wait_t;

    memset(out, 0, sizeof(*out));
    out->pool[0].n_gpus = ng;
    out->pool[1].n_gpus = colo ? 0 : nt;

    if (in->mode == EERL_MODE_INFLIGHT && !in->first) {
        gen_tokens = (1 - k->spill) * in->gen_batch.G + in->spill_in;
        gen_tail = k->c_tail * k->if_tail * in->train_batch.mean_len;
        gen_tok = k->c_tok * gen_tokens / ng;
        kv_tokens = k->spill * in->gen_batch.G;
        out->crossing_tokens = in->spill_in;
        out->spill_out = kv_tokens;
    } else {
        gen_tokens = in->gen_batch.G;
        gen_tail = k->c_tail * in->gen_batch.L;
        gen_tok = k->c_tok * gen_tokens / ng;
    }
    gen = active(p, EERL_PHASE_GEN, in->req_gen, gen_tail, sc);
    gen.t += gen_tok * eerl__phase_time_factor(g, &p->ph_tok, gen.f) * sc;
    lp = active(p, EERL_PHASE_LOGPROB, in->req_train, k->c_lp * C / nt, sc);
    tr = active(p, EERL_PHASE_TRAIN, in->req_train, k->c_tr * C / nt + k->t_tr0 - t_after, sc);
    after = active(p, EERL_PHASE_TRAIN, in->req_train, t_after, sc);
    rf_g = active(p, EERL_PHASE_REFIT, in->req_gen, k->t_refit, sc);
    rf_t = active(p, EERL_PHASE_REFIT, in->req_train, k->t_refit, sc);
    kv = active(p, EERL_PHASE_GEN, in->req_gen, k->c_kv * kv_tokens / ng, sc);
    if (in->noise && p->noise.have) {
        /* What the work cannot explain, per update and phase group; power follows so that
         * energy varies as factor^energy_exp (stalls draw less). */
        const struct eerl__noise *nz = &p->noise;
        double fg =
            noise_factor(nz->gen_rel, nz->gen_abs_s, nz->gen_root, gen.t + kv.t, in->noise_zg);
        double ft =
            noise_factor(nz->train_rel, nz->train_abs_s, nz->train_root, lp.t + tr.t, in->noise_zt);
        double pg = pow(fg, nz->energy_exp - 1), pt = pow(ft, nz->energy_exp - 1);

        gen.t *= fg;
        kv.t *= fg;
        lp.t *= ft;
        tr.t *= ft;
        after.t *= ft;
        gen.w *= pg;
        kv.w *= pg;
        lp.w *= pt;
        tr.w *= pt;
        after.w *= pt;
    }
    out->gen_eff_mhz = gen.f;
    out->train_eff_mhz = tr.f;
    out->phase_s[EERL_PHASE_GEN] = gen.t + kv.t;
    out->phase_s[EERL_PHASE_LOGPROB] = lp.t;
    out->phase_s[EERL_PHASE_TRAIN] = tr.t;
    out->phase_s[EERL_PHASE_REFIT] = rf_t.t;

    /* Where waiting GPUs sit: the idle clock for separate pools of a pair run (drained and
     * disaggregated), their own clock otherwise (the governor idles at fmax). */
    if (pair && (in->mode == EERL_MODE_DISAGGREGATED || in->mode == EERL_MODE_DRAINED)) {
        f_wait_g = f_wait_t = g->idle_clock;
    } else {
        f_wait_g = in->req_gen ? in->req_gen - g->droop_mhz : g->fmax;
        f_wait_t = in->req_train ? in->req_train - g->droop_mhz : g->fmax;
    }
    w_wait_g = eerl__gpu_wait_w(g, f_wait_g);
    w_wait_t = eerl__gpu_wait_w(g, f_wait_t);
    if (!pair)
        sw = 0;

    switch (in->mode) {
    case EERL_MODE_COLOCATED: {
        /* The runtime applies each phase's setting at its boundary in every pair run (also for
         * equal pairs); a lock takes milliseconds, so this costs ~0.03% of an update. */
        double s2 = sw;
        seg(&c, 0, EERL_PHASE_GEN, gen.t, gen.w, gen.f, gen.flags);
        seg(&c, 0, EERL_PHASE_OTHER, other, w_wait_g, f_wait_g, EERL__SEG_IDLE);
        seg(&c, 0, EERL_PHASE_OTHER, s2, w_wait_t, f_wait_t, EERL__SEG_IDLE);
        seg(&c, 0, EERL_PHASE_LOGPROB, lp.t, lp.w, lp.f, lp.flags);
        seg(&c, 0, EERL_PHASE_TRAIN, tr.t, tr.w, tr.f, tr.flags);
        seg(&c, 0, EERL_PHASE_REFIT, rf_t.t, rf_t.w, rf_t.f, rf_t.flags);
        seg(&c, 0, EERL_PHASE_OTHER, s2, w_wait_g, f_wait_g, EERL__SEG_IDLE);
        out->gen_arrival = gen.t;
        out->train_arrival = gen.t + other + s2 + lp.t + tr.t;
        out->duration = out->train_arrival + rf_t.t + s2;
        out->policy_age = 0;
        break;
    }
    case EERL_MODE_DISAGGREGATED: {
        double tg = sw + gen.t, tt = sw + lp.t + tr.t;
        seg(&c, 0, EERL_PHASE_OTHER, sw, w_wait_g, f_wait_g, EERL__SEG_IDLE);
        seg(&c, 0, EERL_PHASE_GEN, gen.t, gen.w, gen.f, gen.flags);
        seg(&c, 0, EERL_PHASE_OTHER, other + tt, w_wait_g, f_wait_g, EERL__SEG_IDLE);
        seg(&c, 0, EERL_PHASE_REFIT, rf_g.t, rf_g.w, rf_g.f, rf_g.flags);
        seg(&c, 1, EERL_PHASE_OTHER, tg + other + sw, w_wait_t, f_wait_t, EERL__SEG_IDLE);
        seg(&c, 1, EERL_PHASE_LOGPROB, lp.t, lp.w, lp.f, lp.flags);
        seg(&c, 1, EERL_PHASE_TRAIN, tr.t, tr.w, tr.f, tr.flags);
        seg(&c, 1, EERL_PHASE_REFIT, rf_t.t, rf_t.w, rf_t.f, rf_t.flags);
        out->gen_arrival = tg;
        out->train_arrival = tg + other + tt;
        out->duration = out->train_arrival + rf_t.t;
        out->policy_age = 0;
        break;
    }
    case EERL_MODE_DRAINED:
    case EERL_MODE_INFLIGHT: {
        int infl = in->mode == EERL_MODE_INFLIGHT;
        double tg, tt, rv, pause;

        if (in->gen_jit > 0)
            gen.t *= in->gen_jit;
        if (in->train_jit > 0) {
            lp.t *= in->train_jit;
            tr.t *= in->train_jit;
            after.t *= in->train_jit;
        }
        out->phase_s[EERL_PHASE_GEN] = gen.t + kv.t;
        out->phase_s[EERL_PHASE_LOGPROB] = lp.t;
        out->phase_s[EERL_PHASE_TRAIN] = tr.t;
        /* The training pool's side of the refit (drained): refit time, training physics. */
        out->phase_s[EERL_PHASE_REFIT] = rf_t.t + after.t;
        tg = gen.t;
        tt = lp.t + tr.t;
        if (!infl) {
            tg += sw;
            tt += sw;
        } else {
            /* The KV recompute after the refit is the generation pool's work; the training pool
             * does not wait for it (its next batch is ready: policy age 2). */
            tg += kv.t;
            tt += other;
        }
        if (in->first) /* nothing generated yet: training waits for the first batch */
            tt += tg;
        rv = in->expected ? eerl__gpu_rendezvous(g, tg, tt) : (tg > tt ? tg : tt);
        /* Generation pool: work, wait for the rendezvous, refit (+ KV recompute in flight). */
        if (!infl)
            seg(&c, 0, EERL_PHASE_OTHER, sw, w_wait_g, f_wait_g, EERL__SEG_IDLE);
        seg(&c, 0, EERL_PHASE_GEN, gen.t, gen.w, gen.f, gen.flags);
        seg(&c, 0, EERL_PHASE_GEN, kv.t, kv.w, kv.f, kv.flags); /* in flight only (else 0) */
        seg(&c, 0, EERL_PHASE_OTHER, rv - tg + after.t, w_wait_g, f_wait_g, EERL__SEG_IDLE);
        seg(&c, 0, EERL_PHASE_REFIT, rf_g.t, rf_g.w, rf_g.f, rf_g.flags);
        /* Training pool. */
        if (in->first)
            seg(&c, 1, EERL_PHASE_OTHER, tg, w_wait_t, f_wait_t, EERL__SEG_IDLE);
        if (!infl)
            seg(&c, 1, EERL_PHASE_OTHER, sw, w_wait_t, f_wait_t, EERL__SEG_IDLE);
        else
            seg(&c, 1, EERL_PHASE_OTHER, other, w_wait_t, f_wait_t, EERL__SEG_IDLE);
        seg(&c, 1, EERL_PHASE_LOGPROB, lp.t, lp.w, lp.f, lp.flags);
        seg(&c, 1, EERL_PHASE_TRAIN, tr.t, tr.w, tr.f, tr.flags);
        seg(&c, 1, EERL_PHASE_OTHER, rv - tt, w_wait_t, f_wait_t, EERL__SEG_IDLE);
        seg(&c, 1, EERL_PHASE_REFIT, after.t, after.w, after.f, after.flags);
        seg(&c, 1, EERL_PHASE_REFIT, rf_t.t, rf_t.w, rf_t.f, rf_t.flags);
        pause = after.t + (rf_g.t > rf_t.t ? rf_g.t : rf_t.t);
        if (!infl) { /* host work after the rendezvous: both pools wait */
            seg(&c, 0, EERL_PHASE_OTHER, other, w_wait_g, f_wait_g, EERL__SEG_IDLE);
            seg(&c, 1, EERL_PHASE_OTHER, other, w_wait_t, f_wait_t, EERL__SEG_IDLE);
            pause += other;
        }
        out->gen_arrival = tg;
        out->train_arrival = tt;
        out->duration = rv + pause;
        out->policy_age = infl ? 2 : 1;
        break;
    }
    case EERL_MODE_COUNT: /* not a mode: validated before */
        break;
    }
}

/* A synthetic RL cluster for the controller's tests and benchmark, simple enough that the right
 * answer is known: generation time is flat down to gen_knee MHz and grows as knee/clock below it,
 * training likewise with train_knee; power per GPU falls with the clock (static + dynamic * f^2);
 * waiting GPUs draw idle power (less at the idle clock). Token work varies per update (seeded
 * PRNG), response length can drift, one update can have a long tail. Header-only (static inline)
 * so each test program takes what it uses. Not part of the library. */
#ifndef EERL_TESTS_SYNTH_STREAM_H
#define EERL_TESTS_SYNTH_STREAM_H

#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

#include "eerl/core.h"

struct synth {
    eerl_mode mode;
    uint64_t rng;
    double peak;                 /* governor clock, MHz */
    double gen_knee, train_knee; /* below these, the phase slows as knee / clock */
    double train_cap;            /* training runs at most at this clock, as under a power cap
                                  * (0: none): a training clock above it changes nothing */
    double responses;            /* responses per update */
    double len_mean;             /* mean response length, tokens */
    double len_limit;            /* token limit per response */
    double drift;                /* relative growth of len_mean per update after drift_from */
    unsigned drift_from;
    unsigned drift_until;  /* ... and up to this update (0: to the end) */
    double t_drift;        /* relative growth per update after drift_from of every phase time,
                            * which the token work does not explain (a warming GPU, a growing
                            * framework overhead): the governor predictor falls behind it */
    unsigned long_tail_at; /* update with one response at the limit (0 = none) */
    double noise;          /* relative sd of phase times */
    double rho;            /* lag-1 correlation of the noise (in-flight) */
    double gen_s_per_tok, gen_s_per_longest, train_s_per_tok, rest_s;
    double n_gen, n_train; /* GPUs per pool (colocated: n_gen used for both) */
    double p_static, p_dyn_gen, p_dyn_train, p_idle, p_idle_clock, p_rest;
    unsigned update;
    double ar;         /* AR(1) noise state */
    eerl_setting prev; /* setting of the previous update (in-flight carry-over) */
    int pinned_l;      /* every update's longest response at the limit */
    /* Drained (off unless set): the generation pool spends an update generating the batch the
     * next update consumes and reports, as a drained run does (one step off-policy): its time
     * follows that batch's G and L, while the update reports the batch it trains on. */
    int gen_next;
    int have_nx;
    double nx_len, nx_l; /* the batch being generated: mean length and longest response */
    int inflight_phases; /* in-flight: report pool busy times too */
    /* Updates scale_from .. scale_from + scale_n - 1 take (1 + scale_by) times as long (0: none):
     * the pipeline's first drain (update 2, faster), a change of the work a block catches */
    unsigned scale_from, scale_n;
    double scale_by;
};

static inline uint64_t synth_next(struct synth *s)
{
    uint64_t z = (s->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline double synth_uniform(struct synth *s)
{
    return ((double)(synth_next(s) >> 11) + 0.5) / 9007199254740992.0;
}

static inline double synth_normal(struct synth *s)
{
    double u = synth_uniform(s), v = synth_uniform(s);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* Sensible defaults: a medium workload on 1980 MHz GPUs. */
static inline void synth_init(struct synth *s, eerl_mode mode, uint64_t seed)
{
    memset(s, 0, sizeof(*s));
    s->mode = mode;
    s->rng = seed;
    s->peak = 1980;
    s->gen_knee = 1400;
    s->train_knee = 1200;
    s->responses = 512;
    s->len_mean = 1500;
    s->len_limit = 4096;
    s->noise = 0.01;
    s->rho = 0;
    s->gen_s_per_tok = 60.0 / (512 * 1500.0);
    s->gen_s_per_longest = 10.0 / 3500.0;
    s->train_s_per_tok = 45.0 / (512 * 1500.0 * 0.95);
    s->rest_s = 6;
    s->n_gen = 8;
    s->n_train = 8;
    s->p_static = 150;
    s->p_dyn_gen = 400;
    s->p_dyn_train = 500;
    s->p_idle = 125;
    s->p_idle_clock = 85;
    s->p_rest = 200;
    if (mode == EERL_MODE_DISAGGREGATED) {
        s->n_gen = 8;
        s->n_train = 16;
        s->train_s_per_tok /= 2;
    }
    if (mode == EERL_MODE_DRAINED || mode == EERL_MODE_INFLIGHT) {
        /* Generation is the bottleneck: training arrives first and waits. */
        s->n_gen = 8;
        s->n_train = 16;
        s->train_knee = 1500;
        s->train_s_per_tok = 55.0 / (512 * 1500.0 * 0.95);
        s->rest_s = 3;
    }
}

static inline double synth_clock(const struct synth *s, unsigned mhz)
{
    return mhz == EERL_CLOCK_GOVERNOR ? s->peak : (double)mhz;
}

/* The clock training runs at: the setting's, or the power cap's where that is lower. */
static inline double synth_train_clock(const struct synth *s, unsigned mhz)
{
    double c = synth_clock(s, mhz);

    return s->train_cap > 0 && c > s->train_cap ? s->train_cap : c;
}

static inline double synth_slow(double knee, double c)
{
    return c >= knee ? 1.0 : knee / c;
}

static inline double synth_power(const struct synth *s, double dyn, double c)
{
    double f = c / s->peak;
    return s->p_static + dyn * f * f;
}

/* Noise-free time and energy of an update with work (G, N, L) under setting st. */
static inline void synth_physics(const struct synth *s, const eerl_setting *st, double G, double N,
                                 double L, double ng, double nt, eerl_obs *o)
{
    double cg = synth_clock(s, st->mhz[0]), ct = synth_train_clock(s, st->mhz[1]);
    double slow = 1.0 + (s->update > s->drift_from ? s->t_drift * (s->update - s->drift_from) : 0);
    double tg =
        (s->gen_s_per_tok * G + s->gen_s_per_longest * L) * synth_slow(s->gen_knee, cg) * ng * slow;
    double tt = s->train_s_per_tok * N * synth_slow(s->train_knee, ct) * nt * slow;
    double rest = s->rest_s * slow;
    double pidle = st->idle_mhz ? s->p_idle_clock : s->p_idle;
    double pg = synth_power(s, s->p_dyn_gen, cg), pt = synth_power(s, s->p_dyn_train, ct);
    double T, E;

    memset(o->phase_time_s, 0, sizeof(o->phase_time_s));
    memset(o->phase_energy_j, 0, sizeof(o->phase_energy_j));
    o->flags = 0;
    if (s->mode == EERL_MODE_COLOCATED || s->mode == EERL_MODE_DISAGGREGATED) {
        double n_all = s->mode == EERL_MODE_COLOCATED ? s->n_gen : s->n_gen + s->n_train;
        double eg, et;
        if (s->mode == EERL_MODE_COLOCATED) {
            eg = s->n_gen * pg * tg;
            et = s->n_gen * pt * tt;
        } else {
            eg = s->n_gen * pg * tg + s->n_train * pidle * tg;
            et = s->n_train * pt * tt + s->n_gen * pidle * tt;
        }
        T = tg + tt + rest;
        E = eg + et + n_all * s->p_rest * rest;
        o->phase_time_s[EERL_PHASE_GEN] = tg;
        o->phase_time_s[EERL_PHASE_LOGPROB] = 0.25 * tt;
        o->phase_time_s[EERL_PHASE_TRAIN] = 0.75 * tt;
        o->phase_time_s[EERL_PHASE_REFIT] = 0.5 * rest;
        o->phase_time_s[EERL_PHASE_OTHER] = 0.5 * rest;
        o->phase_energy_j[EERL_PHASE_GEN] = eg;
        o->phase_energy_j[EERL_PHASE_LOGPROB] = 0.25 * et;
        o->phase_energy_j[EERL_PHASE_TRAIN] = 0.75 * et;
        o->phase_energy_j[EERL_PHASE_REFIT] = 0.5 * n_all * s->p_rest * rest;
        o->phase_energy_j[EERL_PHASE_OTHER] = 0.5 * n_all * s->p_rest * rest;
    } else {
        double busy = tg > tt ? tg : tt, eg, et;
        T = busy + rest;
        eg = s->n_gen * (pg * tg + pidle * (busy - tg));
        et = s->n_train * (pt * tt + pidle * (busy - tt));
        E = eg + et + (s->n_gen + s->n_train) * s->p_rest * rest;
        o->phase_time_s[EERL_PHASE_GEN] = tg;
        o->phase_time_s[EERL_PHASE_LOGPROB] = 0.25 * tt;
        o->phase_time_s[EERL_PHASE_TRAIN] = 0.75 * tt;
        o->phase_time_s[EERL_PHASE_REFIT] = rest;
        o->phase_energy_j[EERL_PHASE_GEN] = eg;
        o->phase_energy_j[EERL_PHASE_LOGPROB] = 0.25 * et;
        o->phase_energy_j[EERL_PHASE_TRAIN] = 0.75 * et;
        o->phase_energy_j[EERL_PHASE_REFIT] = (s->n_gen + s->n_train) * s->p_rest * rest;
        o->arrival_s[EERL_POOL_GEN] = tg;
        o->arrival_s[EERL_POOL_TRAIN] = tt;
        o->pool_energy_j[EERL_POOL_GEN] = eg;
        o->pool_energy_j[EERL_POOL_TRAIN] = et;
        o->flags = EERL_OBS_ARRIVALS | EERL_OBS_POOL_ENERGY;
    }
    o->time_s = T;
    o->energy_j = E;
}

/* One batch's mean response length and longest response. */
static inline void synth_batch(struct synth *s, double *len_out, double *l_out)
{
    double len = s->len_mean * (1.0 + 0.08 * synth_normal(s)), L;

    if (len < 50)
        len = 50;
    if (len > s->len_limit * 0.9)
        len = s->len_limit * 0.9;
    L = s->pinned_l ? s->len_limit : len * (2.0 + 0.25 * synth_normal(s));
    if (L > s->len_limit)
        L = s->len_limit;
    if (L < len)
        L = len;
    *len_out = len;
    *l_out = L;
}

/* The next update under setting st. */
static inline eerl_obs synth_step(struct synth *s, const eerl_setting *st)
{
    eerl_obs o;
    double len, G, N, L, ng, nt, e;

    memset(&o, 0, sizeof(o));
    s->update++;
    if (s->drift != 0 && s->update > s->drift_from &&
        (!s->drift_until || s->update <= s->drift_until))
        s->len_mean *= 1.0 + s->drift;
    if (s->gen_next && s->have_nx) {
        len = s->nx_len;
        L = s->nx_l;
    } else {
        synth_batch(s, &len, &L);
    }
    if (s->long_tail_at && s->update == s->long_tail_at)
        L = s->len_limit;
    G = s->responses * len;
    N = 0.95 * G;
    if (s->gen_next) {
        synth_batch(s, &s->nx_len, &s->nx_l);
        s->have_nx = 1;
    }
    e = s->noise * synth_normal(s);
    s->ar = s->rho * s->ar + sqrt(1 - s->rho * s->rho) * e;
    ng = exp(s->ar);
    nt = exp(s->noise * synth_normal(s));
    if (s->mode == EERL_MODE_INFLIGHT && !eerl_setting_equal(st, &s->prev) && s->update > 1) {
        /* Requests started under the previous setting finish under this one. */
        eerl_obs a = {0}, b = {0};
        synth_physics(s, &s->prev, G, N, L, ng, nt, &a);
        synth_physics(s, st, G, N, L, ng, nt, &b);
        int i;
        o = b;
        o.time_s = 0.5 * (a.time_s + b.time_s);
        o.energy_j = 0.5 * (a.energy_j + b.energy_j);
        for (i = 0; i < EERL_PHASE_COUNT; i++) {
            o.phase_time_s[i] = 0.5 * (a.phase_time_s[i] + b.phase_time_s[i]);
            o.phase_energy_j[i] = 0.5 * (a.phase_energy_j[i] + b.phase_energy_j[i]);
        }
        for (i = 0; i < EERL_POOLS_MAX; i++) {
            o.arrival_s[i] = 0.5 * (a.arrival_s[i] + b.arrival_s[i]);
            o.pool_energy_j[i] = 0.5 * (a.pool_energy_j[i] + b.pool_energy_j[i]);
        }
        o.flags |= EERL_OBS_CARRYOVER;
    } else if (s->gen_next) {
        synth_physics(s, st, s->responses * s->nx_len, N, s->nx_l, ng, nt, &o);
    } else {
        synth_physics(s, st, G, N, L, ng, nt, &o);
    }
    if (s->update >= s->scale_from && s->update < s->scale_from + s->scale_n) {
        int i;
        o.time_s *= 1 + s->scale_by;
        for (i = 0; i < EERL_PHASE_COUNT; i++)
            o.phase_time_s[i] *= 1 + s->scale_by;
        for (i = 0; i < EERL_POOLS_MAX; i++)
            o.arrival_s[i] *= 1 + s->scale_by;
    }
    s->prev = *st;
    o.update = s->update;
    o.gen_tokens = G;
    o.valid_tokens = N;
    o.longest_tokens = L;
    o.policy_age = s->mode == EERL_MODE_DRAINED ? 1 : (s->mode == EERL_MODE_INFLIGHT ? 2 : 0);
    o.setting = *st;
    if (s->mode == EERL_MODE_INFLIGHT && !s->inflight_phases) {
        /* In-flight runtimes may report whole updates only. */
        memset(o.phase_time_s, 0, sizeof(o.phase_time_s));
        memset(o.phase_energy_j, 0, sizeof(o.phase_energy_j));
        o.flags &= ~(unsigned)(EERL_OBS_ARRIVALS | EERL_OBS_POOL_ENERGY);
    }
    return o;
}

/* Noise-free throughput and energy-per-token ratios of setting st against the governor, at the
 * mean work. */
static inline void synth_truth(const struct synth *s, const eerl_setting *st, double *q_ratio,
                               double *e_ratio)
{
    eerl_setting gov;
    eerl_obs a, b;
    double G = s->responses * s->len_mean, N = 0.95 * G, L = 2.0 * s->len_mean;

    memset(&gov, 0, sizeof(gov));
    if (L > s->len_limit || s->pinned_l)
        L = s->len_limit;
    synth_physics(s, &gov, G, N, L, 1, 1, &a);
    synth_physics(s, st, G, N, L, 1, 1, &b);
    *q_ratio = a.time_s / b.time_s;
    *e_ratio = b.energy_j / a.energy_j;
}

/* H200's list: 1980 down to 345 MHz in 15 MHz steps. */
static inline size_t synth_clocks(unsigned *out)
{
    size_t n = 0;
    unsigned c;

    for (c = 1980; c >= 345; c -= 15)
        out[n++] = c;
    return n;
}

static inline int synth_clock_supported(const unsigned *clocks, size_t n, unsigned mhz)
{
    size_t i;

    if (mhz == EERL_CLOCK_GOVERNOR)
        return 1;
    for (i = 0; i < n; i++)
        if (clocks[i] == mhz)
            return 1;
    return 0;
}

/* The best setting by brute force: lowest true energy per token with throughput >= min_q. */
static inline void synth_oracle(const struct synth *s, const unsigned *clocks, size_t n,
                                unsigned idle, double min_q, eerl_setting *ret, double *ret_e)
{
    double best = 1.0, q, e;
    size_t i, j;
    eerl_setting x;

    memset(ret, 0, sizeof(*ret));
    for (i = 0; i < n; i++)
        for (j = 0; j < n; j++) {
            memset(&x, 0, sizeof(x));
            x.mhz[0] = clocks[i] >= s->peak ? 0 : clocks[i];
            x.mhz[1] = clocks[j] >= s->peak ? 0 : clocks[j];
            x.idle_mhz = (x.mhz[0] || x.mhz[1]) ? idle : 0;
            synth_truth(s, &x, &q, &e);
            if (q >= min_q && e < best) {
                best = e;
                *ret = x;
            }
        }
    *ret_e = best;
}

/* Runs n updates of s through ctl, checking every requested clock against the supported list. */
struct synth_run_stats {
    unsigned updates, bad_clocks, events, kinds[EERL_EV_KIND_COUNT];
    uint64_t first_lock_update;
    int locked;
    eerl_setting first_lock, last;
    unsigned after_lock;     /* updates after the first lock */
    double after_q, after_e; /* sums of true throughput / energy ratios after the lock */
};

static inline void synth_print_event(const eerl_event *ev)
{
    printf("  u%-4llu %-11s %-10s cand %u/%u idle %u -> next %u/%u %s t=%.4f e=%.4f | %s\n",
           (unsigned long long)ev->update, eerl_event_kind_name(ev->kind),
           eerl_state_name(ev->state), ev->candidate.mhz[0], ev->candidate.mhz[1],
           ev->candidate.idle_mhz, ev->next.mhz[0], ev->next.mhz[1], eerl_verdict_name(ev->verdict),
           ev->time_ratio, ev->energy_ratio, ev->reason);
}

static inline void synth_run(struct synth *s, eerl_ctl *ctl, unsigned n, const unsigned *clocks,
                             size_t n_clocks, struct synth_run_stats *rs, int verbose)
{
    eerl_event evs[64];
    eerl_setting st;
    unsigned i, g;
    size_t k, ne;

    eerl_ctl_setting(ctl, &st);
    for (i = 0; i < n; i++) {
        eerl_obs o = synth_step(s, &st);
        if (rs->locked) {
            double q, e;
            synth_truth(s, &st, &q, &e);
            rs->after_lock++;
            rs->after_q += q;
            rs->after_e += e;
        }
        eerl_ctl_observe(ctl, &o, &st);
        rs->updates++;
        for (g = 0; g < EERL_GROUPS_MAX; g++)
            if (!synth_clock_supported(clocks, n_clocks, st.mhz[g]))
                rs->bad_clocks++;
        if (!synth_clock_supported(clocks, n_clocks, st.idle_mhz))
            rs->bad_clocks++;
        while ((ne = eerl_ctl_events(ctl, evs, 64)) > 0)
            for (k = 0; k < ne; k++) {
                rs->events++;
                rs->kinds[evs[k].kind]++;
                if (evs[k].kind == EERL_EV_LOCK && !rs->locked) {
                    rs->locked = 1;
                    rs->first_lock_update = evs[k].update;
                    rs->first_lock = evs[k].candidate;
                }
                if (verbose && evs[k].kind != EERL_EV_HOLD)
                    synth_print_event(&evs[k]);
            }
    }
    rs->last = st;
}

#endif

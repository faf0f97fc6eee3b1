/* The twin run: draws each update's batch, asks the mode layout (modes/cluster.c) what the pools
 * do, appends that to the timeline and advances virtual time. Also the deterministic
 * expected-value comparison the calibration fits through, and the totals an experiment loop
 * needs. No wall clock anywhere. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eerl/error.h"
#include "twin/run.h"

/* The mode names are the controller's (config.c): one table. The twin's lookup keeps its
 * documented EERL_ENOENT for an unknown name. */
const char *eerl_twin_mode_names(void)
{
    return eerl_mode_names();
}

const char *eerl_twin_mode_name(eerl_mode mode)
{
    return eerl_mode_name(mode);
}

int eerl_twin_mode_parse(const char *name, eerl_mode *ret_mode)
{
    if (!name || !ret_mode)
        return EERL_EINVAL;
    return eerl_mode_from_name(name, ret_mode) < 0 ? EERL_ENOENT : 0;
}

int eerl_twin_noise_parse(const char *name, unsigned *ret_noise)
{
    if (!name || !ret_noise)
        return EERL_EINVAL;
    if (!strcmp(name, "none"))
        *ret_noise = EERL_TWIN_NOISE_NONE;
    else if (!strcmp(name, "fitted"))
        *ret_noise = EERL_TWIN_NOISE_FITTED;
    else
        return EERL_ENOENT;
    return 0;
}

static int alloc_ok(eerl_mode mode, unsigned n_gen, unsigned n_train)
{
    if ((unsigned)mode > EERL_MODE_INFLIGHT || n_gen == 0 || n_gen > EERL_TWIN_GPUS_LIMIT ||
        n_train > EERL_TWIN_GPUS_LIMIT - n_gen)
        return 0;
    return mode == EERL_MODE_COLOCATED ? n_train == 0 : n_train > 0;
}

int eerl_twin_new(const eerl_twin_preset *preset, const struct eerl_twin_config *cfg,
                  eerl_twin **ret_twin)
{
    eerl_twin *t;
    struct eerl__rng r;
    int e;

    if (!preset || !cfg || !ret_twin || !alloc_ok(cfg->mode, cfg->n_gen, cfg->n_train))
        return EERL_EINVAL;
    if (eerl__wl_size_index(cfg->size) < 0 || !(cfg->divergence >= 0 && cfg->divergence < 1))
        return EERL_EINVAL;
    if (cfg->noise > EERL_TWIN_NOISE_FITTED ||
        (cfg->noise == EERL_TWIN_NOISE_FITTED && !preset->noise.have))
        return EERL_EINVAL;
    t = calloc(1, sizeof(*t));
    if (!t)
        return EERL_ENOMEM;
    t->p = *preset;
    t->cfg = *cfg;
    e = eerl__wl_init(&t->wl, &preset->wl, cfg->size, cfg->seed, cfg->run_id, cfg->divergence);
    if (e < 0) {
        free(t);
        return e;
    }
    /* Node speed of this run: the part of the run-to-run divergence that the work does not
     * explain. Most of it is in the work (the run's response lengths, workload.c), as in the
     * paper, where governor runs of one configuration lie within 0.7% of a model fitted on
     * their work features (Appendix E); here a run's speed spreads by divergence / 5 (0.5% at
     * the default 0.025). */
    eerl__rng_seed(&r, cfg->seed ^ 0x5bd1e995ull, 1000 + cfg->run_id);
    t->time_scale = exp(cfg->divergence / 5.0 * eerl__rng_normal(&r));
    /* Run-to-run slowdowns are mostly stalls (stragglers, communication) at lower power: energy
     * varies much less than time between runs (the paper's Appendix B errors), so power follows
     * the slowdown down: energy ~ time_scale^0.2. */
    t->power_scale = pow(t->time_scale, -0.8);
    /* The pools' relative speed of this seed (placement, the nodes each pool lands on): a
     * mean-one lognormal factor per pool of spread `jitter`, from a stream keyed by the seed
     * alone, so every setting of the seed sees the same imbalance and a run's updates share it
     * (no per-update noise that the work cannot explain). The expected evaluation averages the
     * rendezvous over it (eerl__gpu_rendezvous). */
    if (cfg->mode >= EERL_MODE_DRAINED && preset->gpu.jitter > 0) {
        double j = preset->gpu.jitter;
        eerl__rng_seed(&r, cfg->seed ^ 0x94d049bb133111ebull, 3);
        t->jit_gen = exp(j * eerl__rng_normal(&r) - 0.5 * j * j);
        t->jit_train = exp(j * eerl__rng_normal(&r) - 0.5 * j * j);
    }
    /* Per-update noise: its own stream, keyed by (seed, run id) like the divergence (two runs
     * of a seed see different noise, as two real runs do); drawn only when asked for, so a run
     * without it is what it was before. The AR(1) states start from their stationary law. */
    if (cfg->noise == EERL_TWIN_NOISE_FITTED) {
        eerl__rng_seed(&t->noise_rng, cfg->seed ^ 0xd6e8feb86659fd93ull, 5000 + cfg->run_id);
        t->noise_xg = eerl__rng_normal(&t->noise_rng);
        t->noise_xt = eerl__rng_normal(&t->noise_rng);
    }
    *ret_twin = t;
    return 0;
}

void eerl_twin_free(eerl_twin *twin)
{
    if (!twin)
        return;
    free(twin->tl[0].s);
    free(twin->tl[1].s);
    free(twin);
}

int eerl_twin_set_clocks(eerl_twin *twin, unsigned gen_mhz, unsigned train_mhz)
{
    if (!twin)
        return EERL_EINVAL;
    if (!eerl_twin_preset_clock_ok(&twin->p, gen_mhz) ||
        !eerl_twin_preset_clock_ok(&twin->p, train_mhz))
        return EERL_ERANGE;
    twin->req_gen = gen_mhz;
    twin->req_train = train_mhz;
    return 0;
}

double eerl_twin_now(const eerl_twin *twin)
{
    return twin ? twin->now : 0;
}

static int tl_append(struct eerl__timeline *tl, const struct eerl__pool_plan *pl, double t0)
{
    unsigned i;
    double e = tl->n ? tl->s[tl->n - 1].e0 +
                           tl->s[tl->n - 1].w * (tl->s[tl->n - 1].t1 - tl->s[tl->n - 1].t0)
                     : 0;

    if (tl->n + pl->n_segs > tl->cap) {
        size_t cap = tl->cap ? tl->cap * 2 : 64;
        struct eerl__tl_seg *s;

        while (cap < tl->n + pl->n_segs)
            cap *= 2;
        s = realloc(tl->s, cap * sizeof(*s));
        if (!s)
            return EERL_ENOMEM;
        tl->s = s;
        tl->cap = cap;
    }
    for (i = 0; i < pl->n_segs; i++) {
        struct eerl__tl_seg *s = &tl->s[tl->n++];

        s->t0 = t0;
        s->t1 = t0 + pl->seg[i].dt;
        s->w = pl->seg[i].w;
        s->mhz = pl->seg[i].mhz;
        s->flags = pl->seg[i].flags;
        s->e0 = e;
        e += s->w * pl->seg[i].dt;
        t0 = s->t1;
    }
    return 0;
}

int eerl_twin_step(eerl_twin *twin, struct eerl_twin_update *ret_update)
{
    struct eerl__cluster_in in;
    struct eerl__cluster_out out;
    struct eerl__wl_batch b;
    struct eerl_twin_update u;
    int e, i;

    if (!twin || !ret_update)
        return EERL_EINVAL;
    eerl__wl_next(&twin->wl, twin->next_update, &b);
    memset(&in, 0, sizeof(in));
    in.mode = twin->cfg.mode;
    in.n_gen = twin->cfg.n_gen;
    in.n_train = twin->cfg.n_train;
    in.gen_batch = b;
    /* Asynchronous modes train on the batch generated one update earlier. */
    in.train_batch = (in.mode >= EERL_MODE_DRAINED && twin->have_prev) ? twin->prev : b;
    in.first = !twin->have_prev;
    in.spill_in = twin->spill;
    in.req_gen = twin->req_gen;
    in.req_train = twin->req_train;
    in.time_scale = twin->time_scale;
    in.power_scale = twin->power_scale;
    in.gen_jit = twin->jit_gen;
    in.train_jit = twin->jit_train;
    if (twin->cfg.noise == EERL_TWIN_NOISE_FITTED) {
        const struct eerl__noise *nz = &twin->p.noise;
        double zg = eerl__rng_normal(&twin->noise_rng), zt = eerl__rng_normal(&twin->noise_rng);

        if (twin->next_update > 0) {
            twin->noise_xg =
                nz->gen_rho * twin->noise_xg + sqrt(1 - nz->gen_rho * nz->gen_rho) * zg;
            twin->noise_xt =
                nz->train_rho * twin->noise_xt + sqrt(1 - nz->train_rho * nz->train_rho) * zt;
        }
        in.noise = 1;
        in.noise_zg = twin->noise_xg;
        in.noise_zt = twin->noise_xt;
    }
    eerl__cluster_update(&twin->p, &in, &out);
    twin->obs_valid[0] = twin->obs_valid[1] = 0; /* the timelines and obs_t change below */
    for (i = 0; i < 2; i++) {
        e = tl_append(&twin->tl[i], &out.pool[i], twin->now);
        if (e < 0)
            return e;
    }
    memset(&u, 0, sizeof(u));
    u.index = twin->next_update;
    u.t_start = twin->now;
    u.duration = out.duration;
    u.energy_j = out.energy_j;
    u.gen_tokens = in.train_batch.G;
    u.valid_tokens = in.train_batch.N;
    u.longest = in.train_batch.L;
    memcpy(u.phase_s, out.phase_s, sizeof(u.phase_s));
    memcpy(u.phase_j, out.phase_j, sizeof(u.phase_j));
    u.gen_arrival = out.gen_arrival;
    u.train_arrival = out.train_arrival;
    u.crossing_tokens = out.crossing_tokens;
    u.policy_age = out.policy_age;
    u.gen_mhz = twin->req_gen;
    u.train_mhz = twin->req_train;
    u.gen_eff_mhz = out.gen_eff_mhz;
    u.train_eff_mhz = out.train_eff_mhz;
    twin->now += out.duration;
    twin->obs_t = twin->now;
    twin->prev = b;
    twin->have_prev = 1;
    twin->spill = out.spill_out;
    twin->next_update++;
    *ret_update = u;
    return 0;
}

int eerl_twin_observe_at(eerl_twin *twin, double t_s)
{
    if (!twin || !(t_s >= 0) || t_s > twin->now)
        return EERL_ERANGE;
    if (t_s != twin->obs_t)
        twin->obs_valid[0] = twin->obs_valid[1] = 0;
    twin->obs_t = t_s;
    return 0;
}

unsigned eerl__twin_gpu_count(const eerl_twin *t)
{
    return t->cfg.n_gen + t->cfg.n_train;
}

int eerl__twin_pool_of(const eerl_twin *t, unsigned gpu)
{
    return (t->cfg.mode == EERL_MODE_COLOCATED || gpu < t->cfg.n_gen) ? 0 : 1;
}

static void observe_pool(const eerl_twin *t, int pool, struct eerl__obs *ret)
{
    const struct eerl__timeline *tl = &t->tl[pool];
    /* NVML's counter moves in ~100 ms steps: read the energy at the last 100 ms tick. */
    double tq = floor(t->obs_t * 10.0 + 1e-9) / 10.0;
    size_t lo = 0, hi;

    if (tl->n == 0) {
        ret->joules = 0;
        ret->watts = eerl__gpu_idle_w(&t->p.gpu, t->p.gpu.fmax);
        ret->mhz = t->p.gpu.fmax;
        ret->flags = EERL__SEG_IDLE;
        return;
    }
    hi = tl->n - 1;
    while (lo < hi) { /* last segment with t0 <= obs_t */
        size_t mid = (lo + hi + 1) / 2;
        if (tl->s[mid].t0 <= t->obs_t)
            lo = mid;
        else
            hi = mid - 1;
    }
    ret->watts = tl->s[lo].w;
    ret->mhz = tl->s[lo].mhz;
    ret->flags = tl->s[lo].flags;
    /* Energy at the quantized time (may sit in an earlier segment). */
    while (lo > 0 && tl->s[lo].t0 > tq)
        lo--;
    {
        const struct eerl__tl_seg *s = &tl->s[lo];
        double dt = tq - s->t0;
        if (dt < 0)
            dt = 0;
        if (dt > s->t1 - s->t0)
            dt = s->t1 - s->t0;
        ret->joules = s->e0 + s->w * dt;
    }
}

void eerl__twin_observe(eerl_twin *t, unsigned gpu, struct eerl__obs *ret)
{
    int pool = eerl__twin_pool_of(t, gpu);

    if (!t->obs_valid[pool]) {
        observe_pool(t, pool, &t->obs[pool]);
        t->obs_valid[pool] = 1;
    }
    *ret = t->obs[pool];
}

/* Expected-value evaluation: the same layout code, fed with expected batches. */
static void expected_totals(const eerl_twin_preset *p, eerl_mode mode, unsigned ng, unsigned nt,
                            char size, unsigned rg, unsigned rt, unsigned u0, unsigned u1,
                            double *N, double *T, double *E)
{
    struct eerl__wl_batch prev, cur;
    struct eerl__cluster_in in;
    struct eerl__cluster_out out;
    unsigned u;

    *N = *T = *E = 0;
    for (u = u0; u <= u1; u++) {
        eerl__preset_expected_batch(p, size, u, &cur);
        if (u > 0)
            eerl__preset_expected_batch(p, size, u - 1, &prev);
        else
            prev = cur;
        memset(&in, 0, sizeof(in));
        in.mode = mode;
        in.n_gen = ng;
        in.n_train = nt;
        in.gen_batch = cur;
        in.train_batch = mode >= EERL_MODE_DRAINED ? prev : cur;
        in.first = u == 0;
        in.spill_in = u > 0 ? p->c.spill * prev.G : 0;
        in.req_gen = rg;
        in.req_train = rt;
        in.time_scale = 1;
        in.expected = 1;
        eerl__cluster_update(p, &in, &out);
        *N += in.train_batch.N;
        *T += out.duration;
        *E += out.energy_j;
    }
}

int eerl_twin_expected(const eerl_twin_preset *preset, eerl_mode mode, unsigned n_gen,
                       unsigned n_train, char size, unsigned gen_mhz, unsigned train_mhz,
                       unsigned u_first, unsigned u_last, double *ret_dq_pct,
                       double *ret_saving_pct)
{
    double Ng, Tg, Eg, Nc, Tc, Ec;

    if (!preset || !ret_dq_pct || !ret_saving_pct || !alloc_ok(mode, n_gen, n_train) ||
        eerl__wl_size_index(size) < 0 || u_first > u_last || u_last > 100000)
        return EERL_EINVAL;
    if (!eerl_twin_preset_clock_ok(preset, gen_mhz) ||
        !eerl_twin_preset_clock_ok(preset, train_mhz))
        return EERL_ERANGE;
    expected_totals(preset, mode, n_gen, n_train, size, 0, 0, u_first, u_last, &Ng, &Tg, &Eg);
    expected_totals(preset, mode, n_gen, n_train, size, gen_mhz, train_mhz, u_first, u_last, &Nc,
                    &Tc, &Ec);
    *ret_dq_pct = 100.0 * ((Nc / Tc) / (Ng / Tg) - 1);
    *ret_saving_pct = 100.0 * (1 - (Ec / Nc) / (Eg / Ng));
    return 0;
}

int eerl_twin_run(const eerl_twin_preset *preset, const struct eerl_twin_config *cfg,
                  unsigned gen_mhz, unsigned train_mhz, unsigned u_first, unsigned u_last,
                  struct eerl_twin_totals *ret_totals)
{
    struct eerl_twin_totals tot = {0, 0, 0, 0};
    struct eerl_twin_update up;
    eerl_twin *t = NULL;
    unsigned u;
    int e;

    if (!ret_totals || u_first > u_last || u_last > 1000000)
        return EERL_EINVAL;
    e = eerl_twin_new(preset, cfg, &t);
    if (e < 0)
        return e;
    e = eerl_twin_set_clocks(t, gen_mhz, train_mhz);
    for (u = 0; e == 0 && u <= u_last; u++) {
        e = eerl_twin_step(t, &up);
        if (e == 0 && u >= u_first) {
            tot.valid_tokens += up.valid_tokens;
            tot.seconds += up.duration;
            tot.joules += up.energy_j;
            tot.updates++;
        }
    }
    eerl_twin_free(t);
    if (e < 0)
        return e;
    *ret_totals = tot;
    return 0;
}

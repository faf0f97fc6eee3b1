/* The windowed oracle: see schedule.h. A drifting run's best setting moves, so the best static
 * setting is no longer the ceiling a controller that follows the drift can reach; this is the
 * ceiling with a change allowed every `window` updates. Work is the same under every setting
 * (the workload stream is keyed by the seed), so a window's time and energy under a pair are
 * what a run held at that pair spends in it; in the synchronous modes an update depends on its
 * own clocks alone and the schedule's totals are exactly the sum of its windows', in the
 * asynchronous ones the update after a switch carries a little of the previous setting, which
 * is why the schedule found is scored again on runs that switch. Prints nothing. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eerl/error.h"
#include "eerl/tools/sim.h"
#include "sim/oracle.h"
#include "twin/presets.h"
#include "twin/run.h"

/* Grid steps (of the GPU's supported clocks) either side of the static oracle's clocks, and the
 * steps between candidates: 45 MHz on the H100's 15 MHz grid. */
#define GEN_STEPS 3
#define TRAIN_STEPS 5
#define STRIDE 3

struct wdata {
    size_t n_cand, n_seeds, n_win;
    unsigned *cg, *ct; /* candidate pairs; 0 is the governor, 1 the static oracle's */
    double *T, *E, *N; /* [(c * n_seeds + i) * n_win + w] */
    double Tg[EERL_AN_SEEDS_MAX], Eg[EERL_AN_SEEDS_MAX], Ng[EERL_AN_SEEDS_MAX];
};

#define AT(d, a, c, i, w) ((d)->a[((c) * (d)->n_seeds + (i)) * (d)->n_win + (w)])

/* Whole-run figures of per-seed totals against the governor's: geometric means, percent. */
static void score(const struct wdata *d, const double *T, const double *E, const double *N,
                  double *dq, double *sav, double *seed_dq, double *seed_sav)
{
    double lq = 0, le = 0;
    size_t i;

    for (i = 0; i < d->n_seeds; i++) {
        double q = (N[i] / T[i]) / (d->Ng[i] / d->Tg[i]);
        double en = (E[i] / N[i]) / (d->Eg[i] / d->Ng[i]);

        if (seed_dq) {
            seed_dq[i] = 100 * (q - 1);
            seed_sav[i] = 100 * (1 - en);
        }
        lq += log(q);
        le += log(en);
    }
    *dq = 100 * (exp(lq / d->n_seeds) - 1);
    *sav = 100 * (1 - exp(le / d->n_seeds));
}

/* Per-seed totals of schedule x (candidate index per window) from the window data. */
static void totals(const struct wdata *d, const size_t *x, double *T, double *E, double *N)
{
    size_t i, w;

    for (i = 0; i < d->n_seeds; i++) {
        T[i] = E[i] = N[i] = 0;
        for (w = 0; w < d->n_win; w++) {
            T[i] += AT(d, T, x[w], i, w);
            E[i] += AT(d, E, x[w], i, w);
            N[i] += AT(d, N, x[w], i, w);
        }
    }
}

/* Per window, the candidate of least energy + lambda x time (each seed's share normalized by
 * its governor totals, so each seed weighs as in the geometric mean). */
static void lagrange(const struct wdata *d, double lambda, size_t *x)
{
    size_t w, c, i;

    for (w = 0; w < d->n_win; w++) {
        double best = INFINITY;

        for (c = 0; c < d->n_cand; c++) {
            double v = 0;

            for (i = 0; i < d->n_seeds; i++)
                v += AT(d, E, c, i, w) / d->Eg[i] + lambda * AT(d, T, c, i, w) / d->Tg[i];
            if (v < best) {
                best = v;
                x[w] = c;
            }
        }
    }
}

/* The best schedule whose estimated dq is >= -limit_pct, from the window data: the Lagrangian
 * schedule of the least lambda that meets the limit, or the static one if better, then
 * single-window changes while one raises the saving within the limit. Returns its estimated
 * saving (the static schedule's if nothing meets the limit). */
static double choose(const struct wdata *d, double limit_pct, size_t *x, size_t *tmp, double *T,
                     double *E, double *N)
{
    double dq, sav, best_sav, lo = -10, hi = 10; /* log lambda */
    size_t w, c, i, iter;
    int have = 0;

    /* The static schedule: candidate 1 everywhere. */
    for (w = 0; w < d->n_win; w++)
        x[w] = 1;
    totals(d, x, T, E, N);
    score(d, T, E, N, &dq, &best_sav, NULL, NULL);
    if (dq < -limit_pct)
        best_sav = -INFINITY;
    lagrange(d, exp(hi), tmp);
    totals(d, tmp, T, E, N);
    score(d, T, E, N, &dq, &sav, NULL, NULL);
    if (dq >= -limit_pct) {
        for (iter = 0; iter < 60; iter++) {
            double mid = 0.5 * (lo + hi);

            lagrange(d, exp(mid), tmp);
            totals(d, tmp, T, E, N);
            score(d, T, E, N, &dq, &sav, NULL, NULL);
            if (dq >= -limit_pct)
                hi = mid;
            else
                lo = mid;
        }
        lagrange(d, exp(hi), tmp);
        totals(d, tmp, T, E, N);
        score(d, T, E, N, &dq, &sav, NULL, NULL);
        have = dq >= -limit_pct;
    }
    if (have && sav > best_sav) {
        memcpy(x, tmp, d->n_win * sizeof(*x));
        best_sav = sav;
    }
    if (!isfinite(best_sav))
        return best_sav;
    /* Single-window changes, the best one at a time, while one helps within the limit. */
    for (iter = 0; iter < 20 * d->n_win + 20; iter++) {
        double gain = 0;
        size_t bw = 0, bc = 0;

        totals(d, x, T, E, N);
        for (w = 0; w < d->n_win; w++)
            for (c = 0; c < d->n_cand; c++) {
                double T2[EERL_AN_SEEDS_MAX], E2[EERL_AN_SEEDS_MAX], N2[EERL_AN_SEEDS_MAX];

                if (c == x[w])
                    continue;
                for (i = 0; i < d->n_seeds; i++) {
                    T2[i] = T[i] - AT(d, T, x[w], i, w) + AT(d, T, c, i, w);
                    E2[i] = E[i] - AT(d, E, x[w], i, w) + AT(d, E, c, i, w);
                    N2[i] = N[i] - AT(d, N, x[w], i, w) + AT(d, N, c, i, w);
                }
                score(d, T2, E2, N2, &dq, &sav, NULL, NULL);
                if (dq >= -limit_pct && sav - best_sav > gain + 1e-9) {
                    gain = sav - best_sav;
                    bw = w;
                    bc = c;
                }
            }
        if (gain <= 0)
            break;
        x[bw] = bc;
        best_sav += gain;
    }
    return best_sav;
}

void eerl_sim_schedule_free(struct eerl_sim_schedule *s)
{
    if (!s)
        return;
    free(s->gen_mhz);
    free(s->train_mhz);
    s->gen_mhz = s->train_mhz = NULL;
}

void eerl_sim_schedule_setting(const eerl_twin_preset *preset, eerl_mode mode,
                               const struct eerl_sim_schedule *s, unsigned k, eerl_setting *ret)
{
    unsigned g = s->gen_mhz[k], t = s->train_mhz[k];

    memset(ret, 0, sizeof(*ret));
    ret->mhz[EERL_GROUP_GEN] = g;
    ret->mhz[EERL_GROUP_TRAIN] = t;
    /* As the static oracle's setting: the twin parks a waiting pool at its idle clock whenever
     * a clock is set, in the modes with a waiting pool of their own. */
    ret->idle_mhz = ((g || t) && (mode == EERL_MODE_DISAGGREGATED || mode == EERL_MODE_DRAINED))
                        ? (unsigned)preset->gpu.idle_clock
                        : EERL_CLOCK_GOVERNOR;
}

/* The candidate clocks of one group: the governor, the static clock, and the supported clocks
 * `steps` strides either side of it (the static clock's index: `at`; the governor's: the top). */
static size_t group_cands(const unsigned *clocks, size_t n_clocks, unsigned stat, int steps,
                          unsigned *out)
{
    size_t at = 0, n = 0, i;
    int k;

    for (i = 0; i < n_clocks; i++)
        if (clocks[i] == stat)
            at = i;
    out[n++] = EERL_TWIN_GOV;
    if (stat != EERL_TWIN_GOV)
        out[n++] = stat;
    for (k = -steps; k <= steps; k++) {
        long j = (long)at + (long)k * STRIDE;

        if (j < 0 || j >= (long)n_clocks || (k == 0 && stat != EERL_TWIN_GOV))
            continue;
        out[n++] = clocks[j];
    }
    return n;
}

/* The candidate pairs of d: 0 the governor, 1 the static pair (sg, st), then the grid around it
 * (each pair once). */
static int make_candidates(struct wdata *d, const unsigned *clocks, size_t n_clocks, unsigned sg,
                           unsigned st)
{
    unsigned gc[2 * GEN_STEPS + 3], tc[2 * TRAIN_STEPS + 3];
    size_t n_gc = group_cands(clocks, n_clocks, sg, GEN_STEPS, gc);
    size_t n_tc = group_cands(clocks, n_clocks, st, TRAIN_STEPS, tc), i, c;

    d->cg = calloc(n_gc * n_tc + 2, sizeof(unsigned));
    d->ct = calloc(n_gc * n_tc + 2, sizeof(unsigned));
    if (!d->cg || !d->ct)
        return EERL_ENOMEM;
    d->cg[0] = d->ct[0] = EERL_TWIN_GOV;
    d->cg[1] = sg;
    d->ct[1] = st;
    d->n_cand = 2;
    for (i = 0; i < n_gc; i++)
        for (c = 0; c < n_tc; c++) {
            size_t k;

            for (k = 0; k < d->n_cand && !(d->cg[k] == gc[i] && d->ct[k] == tc[c]); k++)
                ;
            if (k < d->n_cand)
                continue;
            d->cg[d->n_cand] = gc[i];
            d->ct[d->n_cand] = tc[c];
            d->n_cand++;
        }
    return 0;
}

/* Every candidate's per-window totals on every seed (the seeds' batches drawn once), and the
 * governor's whole-run totals. */
static int window_data(struct wdata *d, const eerl_twin_preset *preset,
                       const struct eerl_twin_config *base, const uint64_t *seeds, unsigned updates,
                       unsigned window, struct eerl__wl_batch *batches)
{
    size_t c, i, w;
    int e;

    d->T = calloc(d->n_cand * d->n_seeds * d->n_win, sizeof(double));
    d->E = calloc(d->n_cand * d->n_seeds * d->n_win, sizeof(double));
    d->N = calloc(d->n_cand * d->n_seeds * d->n_win, sizeof(double));
    if (!d->T || !d->E || !d->N)
        return EERL_ENOMEM;
    for (i = 0; i < d->n_seeds; i++) {
        e = eerl__wl_draw(&preset->wl, base->size, seeds[i], updates, batches + i * updates);
        if (e < 0)
            return e;
    }
    for (c = 0; c < d->n_cand; c++)
        for (i = 0; i < d->n_seeds; i++) {
            struct eerl_twin_config cfg = *base;

            cfg.seed = seeds[i];
            e = eerl__sim_twin_windows(preset, &cfg, &d->cg[c], &d->ct[c], 1, window, updates,
                                       batches + i * updates, &AT(d, T, c, i, 0),
                                       &AT(d, E, c, i, 0), &AT(d, N, c, i, 0));
            if (e < 0)
                return e;
        }
    for (i = 0; i < d->n_seeds; i++)
        for (w = 0; w < d->n_win; w++) {
            d->Tg[i] += AT(d, T, 0, i, w);
            d->Eg[i] += AT(d, E, 0, i, w);
            d->Ng[i] += AT(d, N, 0, i, w);
        }
    return 0;
}

/* The schedule x (candidate per window) into s, and its whole-run totals per seed on runs that
 * switch clocks at the window boundaries. */
static int switching_totals(const struct wdata *d, const size_t *x, struct eerl_sim_schedule *s,
                            const eerl_twin_preset *preset, const struct eerl_twin_config *base,
                            const uint64_t *seeds, unsigned updates,
                            const struct eerl__wl_batch *batches, double *T, double *E, double *N)
{
    double *wt = calloc(d->n_win, sizeof(double)), *we = calloc(d->n_win, sizeof(double));
    double *wn = calloc(d->n_win, sizeof(double));
    size_t i, w;
    int e = 0;

    if (!wt || !we || !wn)
        e = EERL_ENOMEM;
    for (w = 0; w < d->n_win; w++) {
        s->gen_mhz[w] = d->cg[x[w]];
        s->train_mhz[w] = d->ct[x[w]];
    }
    for (i = 0; e == 0 && i < d->n_seeds; i++) {
        struct eerl_twin_config cfg = *base;

        cfg.seed = seeds[i];
        e = eerl__sim_twin_windows(preset, &cfg, s->gen_mhz, s->train_mhz, d->n_win, s->window,
                                   updates, batches + i * updates, wt, we, wn);
        if (e < 0)
            break;
        T[i] = E[i] = N[i] = 0;
        for (w = 0; w < d->n_win; w++) {
            T[i] += wt[w];
            E[i] += we[w];
            N[i] += wn[w];
        }
    }
    free(wt);
    free(we);
    free(wn);
    return e;
}

/* Chooses on the window data and scores on runs that switch. Where the switching runs miss the
 * allowance (the asynchronous carry at a switch), chooses again with the limit tightened by the
 * miss. Falls back to the static setting in every window when nothing beats it. */
static int choose_schedule(const struct wdata *d, struct eerl_sim_schedule *s,
                           const struct eerl_sim_oracle *stat, double allowed_loss,
                           const eerl_twin_preset *preset, const struct eerl_twin_config *base,
                           const uint64_t *seeds, unsigned updates,
                           const struct eerl__wl_batch *batches)
{
    double T[EERL_AN_SEEDS_MAX], E[EERL_AN_SEEDS_MAX], N[EERL_AN_SEEDS_MAX];
    double limit = 100 * allowed_loss;
    size_t *x = calloc(d->n_win, sizeof(*x)), *tmp = calloc(d->n_win, sizeof(*tmp)), tries, w;
    int e = 0;

    if (!x || !tmp) {
        e = EERL_ENOMEM;
        goto out;
    }
    for (tries = 0; tries < 4; tries++) {
        double dq, sav;

        if (!isfinite(choose(d, limit, x, tmp, T, E, N)))
            break;
        e = switching_totals(d, x, s, preset, base, seeds, updates, batches, T, E, N);
        if (e < 0)
            goto out;
        score(d, T, E, N, &dq, &sav, s->seed_dq_pct, s->seed_saving_pct);
        if (dq >= -100 * allowed_loss) {
            s->dq_pct = dq;
            s->saving_pct = sav;
            break;
        }
        limit -= (-100 * allowed_loss - dq) + 0.005;
    }
    if (tries == 4 || !(s->saving_pct > stat->saving_pct)) {
        /* The static setting in every window: its own figures. */
        for (w = 0; w < d->n_win; w++) {
            s->gen_mhz[w] = stat->setting.mhz[EERL_GROUP_GEN];
            s->train_mhz[w] = stat->setting.mhz[EERL_GROUP_TRAIN];
        }
        s->saving_pct = stat->saving_pct;
        s->dq_pct = stat->dq_pct;
        memcpy(s->seed_saving_pct, stat->seed_saving_pct, d->n_seeds * sizeof(double));
        memcpy(s->seed_dq_pct, stat->seed_dq_pct, d->n_seeds * sizeof(double));
        s->held_static = 1;
    }
    for (w = 1; w < d->n_win; w++)
        s->changes += s->gen_mhz[w] != s->gen_mhz[w - 1] || s->train_mhz[w] != s->train_mhz[w - 1];
out:
    free(x);
    free(tmp);
    return e;
}

int eerl_sim_oracle_windowed(const eerl_twin_preset *preset, eerl_mode mode, unsigned n_gen,
                             unsigned n_train, char size, unsigned updates, const uint64_t *seeds,
                             size_t n_seeds, double allowed_loss, unsigned window,
                             const struct eerl_sim_oracle *stat, struct eerl_sim_schedule *ret)
{
    unsigned clocks[EERL_DEVICE_CLOCKS_MAX];
    size_t n_clocks = 0;
    struct eerl_twin_config base;
    struct eerl_sim_schedule s;
    struct wdata d;
    struct eerl__wl_batch *batches = NULL;
    int e;

    if (!preset || !stat || !ret || n_seeds == 0 || n_seeds > EERL_AN_SEEDS_MAX || window == 0 ||
        updates < EERL_AN_FIRST_UPDATE || !(allowed_loss > 0 && allowed_loss < 0.5))
        return EERL_EINVAL;
    e = eerl_twin_preset_clocks(preset, clocks, EERL_DEVICE_CLOCKS_MAX, &n_clocks);
    if (e < 0)
        return e;
    memset(&s, 0, sizeof(s));
    memset(&d, 0, sizeof(d));
    memset(&base, 0, sizeof(base));
    base.mode = mode;
    base.n_gen = n_gen;
    base.n_train = n_train;
    base.size = size;
    s.window = window;
    s.n_windows = (updates + window - 1) / window;
    d.n_seeds = n_seeds;
    d.n_win = s.n_windows;
    s.gen_mhz = calloc(s.n_windows, sizeof(unsigned));
    s.train_mhz = calloc(s.n_windows, sizeof(unsigned));
    batches = calloc(n_seeds * updates, sizeof(*batches));
    e = !s.gen_mhz || !s.train_mhz || !batches
            ? EERL_ENOMEM
            : make_candidates(&d, clocks, n_clocks, stat->setting.mhz[EERL_GROUP_GEN],
                              stat->setting.mhz[EERL_GROUP_TRAIN]);
    if (e == 0)
        e = window_data(&d, preset, &base, seeds, updates, window, batches);
    s.candidates = (unsigned)d.n_cand;
    if (e == 0)
        e = choose_schedule(&d, &s, stat, allowed_loss, preset, &base, seeds, updates, batches);
    if (e == 0) {
        *ret = s;
        s.gen_mhz = s.train_mhz = NULL;
    }
    eerl_sim_schedule_free(&s);
    free(d.cg);
    free(d.ct);
    free(d.T);
    free(d.E);
    free(d.N);
    free(batches);
    return e;
}

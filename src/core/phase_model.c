/* The model proposer's fit and proposal (phase_model.h; docs/internals/controller.md "The model
 * proposer"). */
#include <math.h>
#include <string.h>

#include "eerl/error.h"
#include "core/predictor.h"
#include "core/phase_model.h"

#define PM_VAR_FLOOR 1e-6 /* per-update variance floor of a ratio (0.1%) */
#define PM_W_MIN 1.0      /* a clock counts as tried with this much weight */
#define PM_W_KNOT 0.5     /* a clock whose weight has decayed below this is no knot */

void eerl__pm_init(struct eerl__pm *m, int layout, unsigned peak, double keep)
{
    memset(m, 0, sizeof(*m));
    m->layout = layout;
    m->peak = peak;
    m->keep = keep > 0 && keep <= 1 ? keep : 1;
}

static struct eerl__pm_point *point_for(struct eerl__pm_group *g, unsigned mhz)
{
    unsigned i, light = 0;

    for (i = 0; i < g->n_pt; i++)
        if (g->pt[i].mhz == mhz)
            return &g->pt[i];
    if (g->n_pt < EERL__PM_POINTS) {
        i = g->n_pt++;
    } else {
        for (i = 1; i < g->n_pt; i++)
            if (g->pt[i].w < g->pt[light].w)
                light = i;
        i = light;
    }
    memset(&g->pt[i], 0, sizeof(g->pt[i]));
    g->pt[i].mhz = mhz;
    return &g->pt[i];
}

void eerl__pm_add(struct eerl__pm *m, const unsigned *mhz, const double *t_ratio,
                  const double *e_ratio)
{
    int g;

    for (g = 0; g < EERL__PM_GROUPS; g++) {
        struct eerl__pm_group *gr = &m->g[g];
        struct eerl__pm_point *p;
        unsigned i;

        for (i = 0; i < gr->n_pt; i++) {
            struct eerl__pm_point *q = &gr->pt[i];
            q->w *= m->keep;
            q->st *= m->keep;
            q->st2 *= m->keep;
            q->se *= m->keep;
            q->se2 *= m->keep;
        }
        if (mhz[g] >= m->peak || !(t_ratio[g] > 0) || !(e_ratio[g] > 0) || !isfinite(t_ratio[g]) ||
            !isfinite(e_ratio[g]))
            continue;
        p = point_for(gr, mhz[g]);
        p->w += 1;
        p->st += t_ratio[g];
        p->st2 += t_ratio[g] * t_ratio[g];
        p->se += e_ratio[g];
        p->se2 += e_ratio[g] * e_ratio[g];
    }
}

void eerl__pm_add_work(struct eerl__pm *m, const struct eerl__pm_work *w)
{
    m->work[m->work_head] = *w;
    m->work_head = (m->work_head + 1) % EERL__PM_WORK;
    if (m->n_work < EERL__PM_WORK)
        m->n_work++;
}

void eerl__pm_take(struct eerl__pm *m, const unsigned *mhz, const struct eerl__parts *meas,
                   const struct eerl__parts *pred, const struct eerl__pm_corr *c)
{
    struct eerl__pm_work w = {
        {pred->t_gen, pred->t_train}, {pred->e_gen, pred->e_train}, pred->t_rest, pred->e_rest};
    double tr[EERL__PM_GROUPS], er[EERL__PM_GROUPS];
    int g;

    for (g = 0; g < EERL__PM_GROUPS; g++) {
        double pt = g ? pred->t_train : pred->t_gen, mt = g ? meas->t_train : meas->t_gen;
        double pe = g ? pred->e_train : pred->e_gen, me = g ? meas->e_train : meas->e_gen;

        tr[g] = pt > 0 ? mt / pt / (1 + c->t[g]) : 0;
        er[g] = pe > 0 ? me / pe / (1 + c->e[g]) : 0;
    }
    eerl__pm_add(m, mhz, tr, er);
    eerl__pm_add_work(m, &w);
}

void eerl__pm_hist_add(struct eerl__pm_hist *h, const unsigned *mhz, const eerl_obs *o,
                       const struct eerl__parts *meas)
{
    struct eerl__pm_rec *r = &h->rec[h->head];
    int g;

    for (g = 0; g < EERL__PM_GROUPS; g++)
        r->mhz[g] = mhz[g];
    r->g = o->gen_tokens;
    r->n = o->valid_tokens;
    r->l = o->longest_tokens;
    r->meas = *meas;
    h->head = (h->head + 1) % EERL__PM_HIST;
    if (h->n < EERL__PM_HIST)
        h->n++;
}

void eerl__pm_reread(struct eerl__pm *m, const struct eerl__pm_hist *h,
                     const struct eerl__pred *pred, const struct eerl__pm_corr *c)
{
    unsigned i;

    eerl__pm_init(m, m->layout, m->peak, m->keep);
    for (i = 0; i < h->n; i++) {
        const struct eerl__pm_rec *r =
            &h->rec[(h->head + EERL__PM_HIST - h->n + i) % EERL__PM_HIST];
        eerl_obs o;
        struct eerl__parts p;

        memset(&o, 0, sizeof(o));
        o.gen_tokens = r->g;
        o.valid_tokens = r->n;
        o.longest_tokens = r->l;
        eerl__pred_predict(pred, &o, &p);
        eerl__pm_take(m, r->mhz, &r->meas, &p, c);
    }
}

/* Pool-adjacent-violators: y[0..n) (weights w) made monotone, non-decreasing (dir 1) or
 * non-increasing (dir -1) along the index, in place. */
static void pav(double *y, const double *w, unsigned n, int dir)
{
    double by[EERL__PM_POINTS + 1], bw[EERL__PM_POINTS + 1];
    unsigned bn[EERL__PM_POINTS + 1], nb = 0, i, j, k;

    for (i = 0; i < n; i++) {
        by[nb] = y[i];
        bw[nb] = w[i];
        bn[nb] = 1;
        nb++;
        while (nb > 1 && dir * (by[nb - 1] - by[nb - 2]) < 0) {
            double ww = bw[nb - 2] + bw[nb - 1];
            by[nb - 2] = (by[nb - 2] * bw[nb - 2] + by[nb - 1] * bw[nb - 1]) / ww;
            bw[nb - 2] = ww;
            bn[nb - 2] += bn[nb - 1];
            nb--;
        }
    }
    for (i = k = 0; i < nb; i++)
        for (j = 0; j < bn[i]; j++)
            y[k++] = by[i];
}

/* The monotone fit through the clocks tried (docs/internals/controller.md says why not a
 * few-parameter curve): knots sorted from the peak down, the governor's (1, 1) first with a weight
 * no measurement outweighs. */
static void fit_knots(const struct eerl__pm *m, struct eerl__pm_group *g)
{
    unsigned i, j, n = 0;

    g->knot_f[n] = m->peak;
    g->knot_t[n] = 1;
    g->knot_p[n] = 1;
    g->knot_w[n] = 1e9;
    n++;
    for (i = 0; i < g->n_pt; i++) {
        const struct eerl__pm_point *p = &g->pt[i];
        if (p->w < PM_W_KNOT)
            continue;
        for (j = n; j > 1 && g->knot_f[j - 1] < p->mhz; j--) {
            g->knot_f[j] = g->knot_f[j - 1];
            g->knot_t[j] = g->knot_t[j - 1];
            g->knot_p[j] = g->knot_p[j - 1];
            g->knot_w[j] = g->knot_w[j - 1];
        }
        g->knot_f[j] = p->mhz;
        g->knot_t[j] = p->st / p->w;
        g->knot_p[j] = p->se / p->st;
        g->knot_w[j] = p->w;
        n++;
    }
    g->n_knot = n;
    pav(g->knot_t, g->knot_w, n, 1);
    pav(g->knot_p, g->knot_w, n, -1);
}

/* The monotone fit at clock f: linear between the knots around it; below the lowest knot the
 * last segment's slopes continue (time rising, power falling, at least flat) for at most the
 * proposer's trust region. *w: the weight of the nearer knot (its variance is var_t / w). */
static void knots_at(const struct eerl__pm_group *g, double f, double *t, double *p, double *w)
{
    unsigned n = g->n_knot, i;

    if (n < 2) {
        *t = *p = 1;
        *w = 1e9;
        return;
    }
    for (i = 1; i < n; i++)
        if (f >= g->knot_f[i]) {
            double a = (f - g->knot_f[i]) / (double)(g->knot_f[i - 1] - g->knot_f[i]);
            *t = g->knot_t[i] + a * (g->knot_t[i - 1] - g->knot_t[i]);
            *p = g->knot_p[i] + a * (g->knot_p[i - 1] - g->knot_p[i]);
            *w = a > 0.5 ? g->knot_w[i - 1] : g->knot_w[i];
            return;
        }
    {
        double df = (double)(g->knot_f[n - 2] - g->knot_f[n - 1]), x = g->knot_f[n - 1] - f;
        double st = (g->knot_t[n - 1] - g->knot_t[n - 2]) / df;
        double sp = (g->knot_p[n - 2] - g->knot_p[n - 1]) / df;
        *t = g->knot_t[n - 1] + (st > 0 ? st : 0) * x;
        *p = g->knot_p[n - 1] - (sp > 0 ? sp : 0) * x;
        *w = g->knot_w[n - 1] / 4; /* an extrapolation: as uncertain as a quarter of the knot */
    }
}

static void fit_group(const struct eerl__pm *m, struct eerl__pm_group *g)
{
    double wsum = 0, ss = 0;
    unsigned i, n_clk = 0;

    g->fitted = 0;
    g->lowest = 0;
    for (i = 0; i < g->n_pt; i++) {
        const struct eerl__pm_point *p = &g->pt[i];
        if (p->w < PM_W_MIN)
            continue;
        n_clk++;
        if (!g->lowest || p->mhz < g->lowest)
            g->lowest = p->mhz;
        wsum += p->w;
        ss += fmax(0.0, p->st2 - p->st * p->st / p->w);
    }
    if (!n_clk)
        return;
    /* The noise of one update around its clock's mean, pooled over the clocks (one degree of
     * freedom per clock is spent on its mean); floored, and with a single update a guess of 1%. */
    g->var_t = wsum - n_clk >= 1 ? ss / (wsum - n_clk) : 1e-4;
    if (g->var_t < PM_VAR_FLOOR)
        g->var_t = PM_VAR_FLOOR;
    fit_knots(m, g);
    g->fitted = 1;
}

void eerl__pm_fit(struct eerl__pm *m)
{
    int g;

    for (g = 0; g < EERL__PM_GROUPS; g++)
        fit_group(m, &m->g[g]);
}

double eerl__pm_time(const struct eerl__pm *m, int g, unsigned mhz, double *var)
{
    const struct eerl__pm_group *gr = &m->g[g];
    double t, p, w;

    if (var)
        *var = 0;
    if (!gr->fitted || mhz >= m->peak)
        return 1;
    knots_at(gr, mhz, &t, &p, &w);
    if (var)
        *var = gr->var_t / w;
    return t;
}

double eerl__pm_energy(const struct eerl__pm *m, int g, unsigned mhz)
{
    const struct eerl__pm_group *gr = &m->g[g];
    double t, p, w;

    if (!gr->fitted || mhz >= m->peak)
        return 1;
    knots_at(gr, mhz, &t, &p, &w);
    return t * fmax(0.05, p);
}

int eerl__pm_predict(const struct eerl__pm *m, const unsigned *mhz, struct eerl__pm_pred *out)
{
    double tau[EERL__PM_GROUPS], var[EERL__PM_GROUPS], eps[EERL__PM_GROUPS];
    double T = 0, T0 = 0, E = 0, E0 = 0, share[EERL__PM_GROUPS] = {0};
    unsigned i;
    int g;

    out->loss = 0;
    out->loss_sd = 0;
    out->energy = 1;
    if (!m->n_work)
        return EERL_ENODATA;
    for (g = 0; g < EERL__PM_GROUPS; g++) {
        tau[g] = eerl__pm_time(m, g, mhz[g], &var[g]);
        eps[g] = eerl__pm_energy(m, g, mhz[g]);
    }
    for (i = 0; i < m->n_work; i++) {
        const struct eerl__pm_work *w = &m->work[i];
        if (m->layout == EERL__LAYOUT_OVERLAP) {
            double a = tau[0] * w->t[0], b = tau[1] * w->t[1];
            int late = a >= b ? 0 : 1;
            T += (a > b ? a : b) + w->t_rest;
            T0 += (w->t[0] > w->t[1] ? w->t[0] : w->t[1]) + w->t_rest;
            share[late] += w->t[late];
        } else {
            T += tau[0] * w->t[0] + tau[1] * w->t[1] + w->t_rest;
            T0 += w->t[0] + w->t[1] + w->t_rest;
            share[0] += w->t[0];
            share[1] += w->t[1];
        }
        E += eps[0] * w->e[0] + eps[1] * w->e[1] + w->e_rest;
        E0 += w->e[0] + w->e[1] + w->e_rest;
    }
    if (!(T0 > 0) || !(E0 > 0))
        return EERL_ENODATA;
    out->loss = T / T0 - 1;
    out->energy = E / E0;
    for (g = 0; g < EERL__PM_GROUPS; g++)
        out->loss_sd += (share[g] / T0) * (share[g] / T0) * var[g];
    out->loss_sd = sqrt(out->loss_sd);
    return 0;
}

static int avoided(const struct eerl__pm_ask *ask, const unsigned *c)
{
    unsigned i;
    int g;

    for (i = 0; i < ask->n_avoid; i++) {
        int below = 1;
        for (g = 0; g < EERL__PM_GROUPS; g++)
            if (c[g] > ask->avoid[i][g])
                below = 0;
        if (below)
            return 1;
    }
    return 0;
}

int eerl__pm_propose(const struct eerl__pm *m, const struct eerl__pm_ask *ask, unsigned *out,
                     struct eerl__pm_pred *pred)
{
    unsigned cand[EERL__PM_GROUPS][160], nc[EERL__PM_GROUPS], c[EERL__PM_GROUPS];
    struct eerl__pm_pred p, best = {0, 0, 1};
    size_t i, j;
    int g, found = 0;

    for (g = 0; g < EERL__PM_GROUPS; g++) {
        out[g] = m->peak;
        nc[g] = 0;
        if (ask->hi[g] >= m->peak)
            cand[g][nc[g]++] = m->peak;
        for (i = 0; i < ask->n_clocks && nc[g] < 160; i++)
            if (ask->clocks[i] < m->peak && ask->clocks[i] >= ask->lo[g] &&
                ask->clocks[i] <= ask->hi[g])
                cand[g][nc[g]++] = ask->clocks[i];
    }
    for (i = 0; i < nc[0]; i++)
        for (j = 0; j < nc[1]; j++) {
            c[0] = cand[0][i];
            c[1] = cand[1][j];
            if ((ask->no_governor && c[0] >= m->peak && c[1] >= m->peak) || avoided(ask, c) ||
                eerl__pm_predict(m, c, &p) < 0)
                continue;
            if (p.loss + ask->offset + ask->kappa * p.loss_sd > ask->max_loss)
                continue;
            if (!found || p.energy < best.energy) {
                found = 1;
                best = p;
                out[0] = c[0];
                out[1] = c[1];
            }
        }
    if (pred)
        *pred = best;
    return found ? 0 : EERL_ENODATA;
}

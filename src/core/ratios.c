/* Owns trial judging (see ratios.h). Every ratio is a ratio of sums, so long updates weigh by
 * their length, as the paper's totals do; a part the governor predicts as 0 counts as unchanged. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/ratios.h"

static double ratio(double m, double p)
{
    return p > 0 ? m / p : 1.0;
}

static void parts_add(struct eerl__parts *a, const struct eerl__parts *b)
{
    a->t_gen += b->t_gen;
    a->t_train += b->t_train;
    a->t_rest += b->t_rest;
    a->t += b->t;
    a->e_gen += b->e_gen;
    a->e_train += b->e_train;
    a->e_rest += b->e_rest;
    a->e += b->e;
}

void eerl__acc_reset(struct eerl__acc *a)
{
    memset(a, 0, sizeof(*a));
}

void eerl__acc_add(struct eerl__acc *a, const struct eerl__ctx *cx, const eerl_obs *o)
{
    struct eerl__parts m, p;

    eerl__obs_parts(cx->layout, o, &m);
    eerl__pred_predict(&cx->refs->pred, o, &p);
    parts_add(&a->m, &m);
    parts_add(&a->p, &p);
    a->n++;
}

void eerl__acc_merge(struct eerl__acc *into, const struct eerl__acc *from)
{
    parts_add(&into->m, &from->m);
    parts_add(&into->p, &from->p);
    into->n += from->n;
}

/* Overlapped pools: a pool only adds update time by arriving later than both its governor
 * prediction and the other pool (time spent waiting anyway is free). */
static void overlap_added(const struct eerl__acc *a, struct eerl__ratios *r)
{
    r->add_gen = fmax(0.0, a->m.t_gen - fmax(a->p.t_gen, a->m.t_train));
    r->add_train = fmax(0.0, a->m.t_train - fmax(a->p.t_train, a->m.t_gen));
}

static void measured(const struct eerl__acc *a, struct eerl__ratios *r)
{
    r->meas_time = ratio(a->m.t, a->p.t);
    r->meas_energy = ratio(a->m.e, a->p.e);
    r->window_time = a->m.t;
}

void eerl__ratios_parts(const struct eerl__ctx *cx, const struct eerl__acc *a,
                        struct eerl__ratios *r)
{
    double rg = ratio(a->m.t_gen, a->p.t_gen), rt = ratio(a->m.t_train, a->p.t_train);
    double rr = ratio(a->m.t_rest, a->p.t_rest);
    double eg = ratio(a->m.e_gen, a->p.e_gen), et = ratio(a->m.e_train, a->p.e_train);
    double er = ratio(a->m.e_rest, a->p.e_rest);
    double gov_t = 0, cand_t = 0, gov_e = 0, cand_e = 0, sum_g = 0, sum_t = 0;
    size_t j;

    memset(r, 0, sizeof(*r));
    measured(a, r);
    for (j = 0; j < cx->refs->n; j++) {
        struct eerl__parts p;
        double cg, ct;

        eerl__pred_predict(&cx->refs->pred, eerl__refs_at(cx->refs, j), &p);
        cg = rg * p.t_gen;
        ct = rt * p.t_train;
        if (cx->layout == EERL__LAYOUT_SEQ) {
            gov_t += p.t_gen + p.t_train + p.t_rest;
            cand_t += cg + ct + rr * p.t_rest;
        } else {
            gov_t += fmax(p.t_gen, p.t_train) + p.t_rest;
            cand_t += fmax(cg, ct) + rr * p.t_rest;
        }
        gov_e += p.e_gen + p.e_train + p.e_rest;
        cand_e += eg * p.e_gen + et * p.e_train + er * p.e_rest;
        sum_g += p.t_gen;
        sum_t += p.t_train;
    }
    if (gov_t > 0 && gov_e > 0) {
        r->time = cand_t / gov_t;
        r->energy = cand_e / gov_e;
    } else {
        r->time = r->meas_time;
        r->energy = r->meas_energy;
    }
    r->add_gen = (rg - 1) * sum_g;
    r->add_train = (rt - 1) * sum_t;
}

void eerl__ratios_whole(const struct eerl__ctx *cx, const struct eerl__acc *a,
                        struct eerl__ratios *r)
{
    (void)cx;
    memset(r, 0, sizeof(*r));
    measured(a, r);
    r->time = r->meas_time;
    r->energy = r->meas_energy;
    overlap_added(a, r);
}

void eerl__ratios_arrivals(const struct eerl__ctx *cx, const struct eerl__acc *a,
                           struct eerl__ratios *r)
{
    double rt = ratio(a->m.t_train, a->p.t_train), gov = 0, cand = 0;
    size_t j;

    memset(r, 0, sizeof(*r));
    measured(a, r);
    for (j = 0; j < cx->refs->n; j++) {
        struct eerl__parts m;

        eerl__obs_parts(cx->layout, eerl__refs_at(cx->refs, j), &m);
        gov += m.t;
        cand += fmax(m.t_gen, rt * m.t_train) + m.t_rest;
    }
    r->time = gov > 0 ? cand / gov : r->meas_time;
    r->energy = r->meas_energy;
    r->add_gen = 0;
    r->add_train = cand - gov;
}

void eerl__ratios_blocks(const struct eerl__acc *cand, const struct eerl__acc *gov,
                         struct eerl__ratios *r)
{
    double gt = ratio(gov->m.t, gov->p.t), ge = ratio(gov->m.e, gov->p.e);

    memset(r, 0, sizeof(*r));
    measured(cand, r);
    r->time = gt > 0 ? r->meas_time / gt : r->meas_time;
    r->energy = ge > 0 ? r->meas_energy / ge : r->meas_energy;
    overlap_added(cand, r);
}

eerl_verdict eerl__verdict(const eerl_ctl_config *cfg, const struct eerl__ratios *r,
                           double energy_cap, int *time_fail, char *why, size_t len)
{
    double q = 1.0 / r->time, cap = 1.0 - cfg->min_saving;
    int tf = !(q >= 1.0 - cfg->allowed_loss);

    if (energy_cap < cap)
        cap = energy_cap;
    if (time_fail)
        *time_fail = tf;
    if (tf) {
        snprintf(why, len, "throughput %.2f%% of governor, below %.2f%%", 100 * q,
                 100 * (1 - cfg->allowed_loss));
        return EERL_VERDICT_FAIL;
    }
    if (!(r->energy < cap)) {
        snprintf(why, len, "energy per token %.2f%% of governor, not below %.2f%%", 100 * r->energy,
                 100 * cap);
        return EERL_VERDICT_FAIL;
    }
    snprintf(why, len, "throughput %.2f%%, energy per token %.2f%% of governor", 100 * q,
             100 * r->energy);
    return EERL_VERDICT_PASS;
}

void eerl__event_set(eerl_event *ev, const struct eerl__ratios *r, unsigned n, eerl_verdict v)
{
    ev->time_ratio = r->time;
    ev->energy_ratio = r->energy;
    ev->meas_time_ratio = r->meas_time;
    ev->meas_energy_ratio = r->meas_energy;
    ev->n_updates = n;
    ev->verdict = v;
}

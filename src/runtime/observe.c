/* The runtime session's books and observations (see observe.h). */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eerl/error.h"
#include "runtime/observe.h"

static int said(int e, char *why, size_t why_len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int said(int e, char *why, size_t why_len, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, why_len, fmt, ap);
    va_end(ap);
    return e;
}

/* ---- books -------------------------------------------------------------------------------- */

void eerl__books_start(struct eerl__rt_books *b, double t)
{
    b->t_update0 = t;
    memset(b->n_iv, 0, sizeof(b->n_iv));
    b->refit_start[0] = b->refit_start[1] = -1;
}

/* Starts a new busy interval of (pool, phase) at t. */
static void open_iv(struct eerl__rt_books *b, unsigned pool, eerl_phase phase, double t)
{
    size_t n = b->n_iv[pool][phase];

    if (n < EERL__RT_IV_MAX) {
        b->iv[pool][phase][n].t0 = t;
        b->iv[pool][phase][n].t1 = t;
        b->n_iv[pool][phase] = n + 1;
    } else { /* merge into the last one: the busy time is then an upper bound */
        b->iv[pool][phase][EERL__RT_IV_MAX - 1].t1 = t;
    }
}

void eerl__books_begin(struct eerl__rt_books *b, unsigned pool, eerl_phase phase, double t)
{
    if (phase == EERL_PHASE_REFIT && b->refit_start[pool] < 0)
        b->refit_start[pool] = t;
    b->in_phase[pool][phase] = 1;
    if (b->depth[pool] > 0) { /* the phase it interrupts stops accruing here */
        eerl_phase outer = b->stack[pool][b->depth[pool] - 1];
        b->iv[pool][outer][b->n_iv[pool][outer] - 1].t1 = t;
    }
    b->stack[pool][b->depth[pool]++] = phase;
    open_iv(b, pool, phase, t);
}

int eerl__books_end(struct eerl__rt_books *b, unsigned pool, eerl_phase phase, double t,
                    eerl_phase *ret_outer)
{
    unsigned d = b->depth[pool], i, left;
    int top = d > 0 && b->stack[pool][d - 1] == phase;

    b->in_phase[pool][phase] = 0;
    if (top) /* else its interval was closed when an inner phase began */
        b->iv[pool][phase][b->n_iv[pool][phase] - 1].t1 = t;
    for (i = 0, left = 0; i < d; i++)
        if (b->stack[pool][i] != phase)
            b->stack[pool][left++] = b->stack[pool][i];
    b->depth[pool] = left;
    if (!top || left == 0)
        return 0;
    *ret_outer = b->stack[pool][left - 1]; /* the interrupted phase resumes */
    open_iv(b, pool, *ret_outer, t);
    return 1;
}

int eerl__books_busy(const struct eerl__rt_books *b, unsigned pool)
{
    int k, busy = 0;

    for (k = 0; k < EERL_PHASE_COUNT; k++)
        busy |= b->in_phase[pool][k];
    return busy;
}

/* ---- the observation ------------------------------------------------------------------------ */

/* Time at the software power cap over a phase's intervals: the seconds whose samples read the
 * clock event reasons, and the capped share of them, weighted by interval length. */
struct eerl__capped {
    double capped_s, read_s;
};

/* Energy over a pool's (or the allocation's, gpus NULL) intervals. */
static int energy_over(eerl_meter *meter, const struct eerl__rt_iv *iv, size_t n,
                       const unsigned *gpus, size_t n_gpus, double *ret_j, unsigned *flags,
                       struct eerl__capped *cap, char *why, size_t why_len)
{
    eerl_meter_reading r;
    double j = 0;
    size_t i;
    int e;

    for (i = 0; i < n; i++) {
        if (iv[i].t1 <= iv[i].t0)
            continue;
        e = gpus ? eerl_meter_energy_gpus(meter, iv[i].t0, iv[i].t1, gpus, n_gpus, &r)
                 : eerl_meter_energy(meter, iv[i].t0, iv[i].t1, &r);
        if (e < 0)
            return said(e, why, why_len, "meter energy over [%.3f, %.3f] s: %s", iv[i].t0, iv[i].t1,
                        eerl_strerror(e));
        j += r.total_joules;
        *flags |= r.flags;
        if (r.capped_share >= 0) {
            cap->capped_s += r.capped_share * (iv[i].t1 - iv[i].t0);
            cap->read_s += iv[i].t1 - iv[i].t0;
        }
    }
    *ret_j = j;
    return 0;
}

static double busy_time(const struct eerl__rt_iv *iv, size_t n)
{
    double s = 0;
    size_t i;

    for (i = 0; i < n; i++)
        s += iv[i].t1 - iv[i].t0;
    return s;
}

/* Each phase's time (the busiest pool's) and energy: the whole allocation's while the stage runs
 * when stages run in turn, each pool's own while it runs the phase when pools overlap. */
static int phase_figures(const struct eerl__rt_books *b, const struct eerl__obs_source *src,
                         eerl_obs *o, unsigned *flags, double *capped, char *why, size_t why_len)
{
    int overlapped = eerl_mode_overlapped(src->mode), e;
    unsigned np = src->colocated ? 1 : 2, p, ph;

    for (ph = 0; ph < EERL_PHASE_COUNT; ph++) {
        double best = 0, j = 0, sum = 0;
        struct eerl__capped cap = {0, 0};
        unsigned bp = 0;

        for (p = 0; p < np; p++) {
            double t = busy_time(b->iv[p][ph], b->n_iv[p][ph]);
            if (t > best) {
                best = t;
                bp = p;
            }
        }
        o->phase_time_s[ph] = best;
        capped[ph] = -1;
        if (best <= 0)
            continue;
        if (!overlapped) {
            e = energy_over(src->meter, b->iv[bp][ph], b->n_iv[bp][ph], NULL, 0, &j, flags, &cap,
                            why, why_len);
            if (e < 0)
                return e;
            o->phase_energy_j[ph] = j;
        } else {
            for (p = 0; p < np; p++) {
                e = energy_over(src->meter, b->iv[p][ph], b->n_iv[p][ph], src->pool_gpus[p],
                                src->n_pool[p], &j, flags, &cap, why, why_len);
                if (e < 0)
                    return e;
                sum += j;
            }
            o->phase_energy_j[ph] = sum;
        }
        if (cap.read_s > 0)
            capped[ph] = cap.capped_s / cap.read_s;
    }
    return 0;
}

/* Separate pools: each pool's energy over the update, and its arrival at the rendezvous: the end
 * of the pool's last work before its first refit (also when they take turns; the sequential
 * predictor reads phase times, so there the arrivals are a record, not an input). */
static int pool_figures(const struct eerl__rt_books *b, const struct eerl__obs_source *src,
                        double t_end, eerl_obs *o, unsigned *flags, char *why, size_t why_len)
{
    static const unsigned phs[3] = {EERL_PHASE_GEN, EERL_PHASE_LOGPROB, EERL_PHASE_TRAIN};
    eerl_meter_reading r;
    unsigned p, k;
    size_t i;
    int e;

    for (p = 0; p < 2; p++) {
        e = eerl_meter_energy_gpus(src->meter, b->t_update0, t_end, src->pool_gpus[p],
                                   src->n_pool[p], &r);
        if (e < 0)
            return said(e, why, why_len, "meter energy of the %s pool: %s",
                        p ? "training" : "generation", eerl_strerror(e));
        o->pool_energy_j[p] = r.total_joules;
        *flags |= r.flags;
    }
    o->flags |= EERL_OBS_POOL_ENERGY;
    for (p = 0; p < 2; p++) {
        double arr = 0;

        for (k = 0; k < 3; k++)
            for (i = 0; i < b->n_iv[p][phs[k]]; i++) {
                const struct eerl__rt_iv *v = &b->iv[p][phs[k]][i];
                if (b->refit_start[p] >= 0 && v->t0 >= b->refit_start[p])
                    continue;
                if (v->t1 - b->t_update0 > arr)
                    arr = v->t1 - b->t_update0;
            }
        o->arrival_s[p] = arr;
    }
    o->flags |= EERL_OBS_ARRIVALS;
    return 0;
}

int eerl__obs_build(const struct eerl__rt_books *b, const struct eerl__obs_source *src,
                    const eerl_rt_work *w, double t_end, eerl_obs *o, unsigned *flags,
                    double busy[2], double capped[EERL_PHASE_COUNT], char *why, size_t why_len)
{
    eerl_meter_reading r;
    unsigned p, ph;
    int e;

    memset(o, 0, sizeof(*o));
    o->update = w->update;
    o->gen_tokens = w->gen_tokens;
    o->valid_tokens = w->valid_tokens;
    o->longest_tokens = w->longest_tokens;
    o->policy_age = w->policy_version >= 0 && (uint64_t)w->policy_version <= w->update
                        ? (int)(w->update - (uint64_t)w->policy_version)
                        : -1;
    o->time_s = t_end - b->t_update0;
    e = eerl_meter_energy(src->meter, b->t_update0, t_end, &r);
    if (e < 0)
        return said(e, why, why_len, "meter energy of update %llu: %s",
                    (unsigned long long)w->update, eerl_strerror(e));
    o->energy_j = r.total_joules;
    *flags |= r.flags;
    e = phase_figures(b, src, o, flags, capped, why, why_len);
    if (e < 0)
        return e;
    for (p = 0; p < 2; p++) {
        busy[p] = 0;
        for (ph = 0; ph < EERL_PHASE_COUNT; ph++)
            busy[p] += busy_time(b->iv[p][ph], b->n_iv[p][ph]);
    }
    if (!src->colocated)
        return pool_figures(b, src, t_end, o, flags, why, why_len);
    return 0;
}

int eerl__obs_nodes(eerl_meter *meter, double t0, double t1, const unsigned *node_at, size_t n_all,
                    unsigned n_nodes, double *sum, unsigned *flags)
{
    double *j = calloc(n_all, sizeof(*j));
    unsigned *fl = calloc(n_all, sizeof(*fl));
    eerl_meter_reading r;
    size_t i;
    int e = EERL_ENOMEM;

    memset(sum, 0, n_nodes * sizeof(*sum));
    memset(flags, 0, n_nodes * sizeof(*flags));
    if (j && fl)
        e = eerl_meter_energy_each(meter, t0, t1, NULL, n_all, j, NULL, fl, &r);
    for (i = 0; e == 0 && i < n_all; i++) {
        sum[node_at[i]] += j[i];
        flags[node_at[i]] |= fl[i];
    }
    free(j);
    free(fl);
    return e;
}

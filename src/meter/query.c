/* The meter's queries over its ring (see query.h). */
#include <string.h>

#include "eerl/device.h"
#include "eerl/error.h"
#include "meter/query.h"

/* Clock event reasons that mean the GPU slowed itself; the software power cap is not one of
 * them (a compute-bound phase at the governor's clocks sits at it most of the time). */
#define SLOWING                                                                                    \
    (EERL_THROTTLE_HW_SLOWDOWN | EERL_THROTTLE_SW_THERMAL | EERL_THROTTLE_HW_THERMAL |             \
     EERL_THROTTLE_HW_POWER_BRAKE)

static const struct eerl__meter_sample *sgat(const struct eerl__counter *c, uint64_t seq, size_t gi)
{
    return eerl__counter_at(c, seq, gi);
}

static double tat(const struct eerl__counter *c, uint64_t seq)
{
    return eerl__counter_t(c, seq);
}

static uint64_t oldest_seq(const struct eerl__counter *c)
{
    return eerl__counter_oldest(c);
}

/* The last sample with t <= x (x must be >= the oldest kept sample's time). */
static uint64_t find_le(const struct eerl__counter *c, double x)
{
    uint64_t lo = oldest_seq(c), hi = c->count - 1;

    while (lo < hi) {
        uint64_t mid = lo + (hi - lo + 1) / 2;

        if (tat(c, mid) <= x)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* Where time x falls in the ring, found once for every GPU of a query: the interpolation
 * between samples j and j + 1 (0 < w < 1), or one sample (w 0), plus the extrapolation past
 * the newest sample. */
struct at {
    uint64_t j;
    int between;  /* interpolate between j and j + 1 */
    double dx;    /* x - t_j */
    double dt;    /* t_{j+1} - t_j */
    double extra; /* seconds past the newest sample (> 0: PARTIAL) */
};

static struct at locate(const struct eerl__counter *c, double x)
{
    uint64_t last = c->count - 1;
    struct at a = {oldest_seq(c), 0, 0, 0, 0};

    if (x <= tat(c, a.j))
        return a;
    if (x >= tat(c, last)) {
        a.j = last;
        a.extra = x - tat(c, last);
        return a;
    }
    a.j = find_le(c, x);
    a.between = 1;
    a.dx = x - tat(c, a.j);
    a.dt = tat(c, a.j + 1) - tat(c, a.j);
    return a;
}

/* Cumulative energy of GPU gi at a located time, interpolated; *flags gets PARTIAL on
 * extrapolation. */
static double acc_at(const struct eerl__counter *c, size_t gi, const struct at *a, unsigned *flags)
{
    const struct eerl__meter_sample *sj = sgat(c, a->j, gi), *sn;

    if (a->extra > 0) {
        double extra = 0;

        *flags |= EERL_METER_PARTIAL;
        if (!(sj->flags & EERL_METER_LOST) && sj->power_w >= 0)
            extra = sj->power_w * a->extra;
        return sj->acc + extra;
    }
    if (!a->between)
        return sj->acc;
    sn = sgat(c, a->j + 1, gi);
    return sj->acc + (sn->acc - sj->acc) * a->dx / a->dt;
}

/* What sample s says of GPU gi's own decisions about its speed: SLOWED where it read a slowdown,
 * LIMIT where its enforced power limit differs from the sample before. */
static unsigned state_flags(const struct eerl__counter *c, uint64_t s, size_t gi)
{
    const struct eerl__meter_sample *x = sgat(c, s, gi), *p;
    unsigned fl = 0;

    if (x->events_read && (x->events & SLOWING))
        fl |= EERL_METER_SLOWED;
    if (s > oldest_seq(c)) {
        p = sgat(c, s - 1, gi);
        if (p->limit_mw && x->limit_mw && p->limit_mw != x->limit_mw)
            fl |= EERL_METER_LIMIT;
    }
    return fl;
}

/* Counts a sample inside the span toward the share at the power cap: read (any GPU of the query
 * read its reasons) and capped (any of them at its cap). */
static void count_capped(const struct eerl__meter_sample *x, int *read, int *capped)
{
    if (!x->events_read)
        return;
    *read = 1;
    if (x->events & EERL_THROTTLE_SW_POWER_CAP)
        *capped = 1;
}

int eerl__query_energy(const struct eerl__counter *c, double t0, double t1, const size_t *pos,
                       size_t n, eerl_meter_reading *out, double *joules, double *peak_w,
                       unsigned *gflags)
{
    uint64_t lo, s;
    struct at a0, a1;
    size_t i, n_read = 0, n_capped = 0;

    if (c->count == 0)
        return EERL_ENODATA;
    lo = oldest_seq(c);
    if (lo > 0 && t0 < tat(c, lo))
        return EERL_ENODATA; /* older than the history kept */
    if (t1 < tat(c, lo) || (t1 == tat(c, lo) && t0 < t1))
        return EERL_ENODATA; /* all before the first sample */
    memset(out, 0, sizeof(*out));
    out->t0 = t0;
    out->t1 = t1;
    out->n_gpus = n;
    a0 = locate(c, t0);
    a1 = locate(c, t1);
    for (i = 0; i < n; i++) {
        size_t gi = pos ? pos[i] : i;
        unsigned fl = 0;
        double e0, e1;

        if (t0 < tat(c, lo))
            fl |= EERL_METER_PARTIAL;
        e0 = acc_at(c, gi, &a0, &fl);
        e1 = acc_at(c, gi, &a1, &fl);
        joules[i] = e1 - e0;
        gflags[i] = fl;
        peak_w[i] = 0;
    }
    /* Flags of every sample interval (t_{s-1}, t_s] that overlaps (t0, t1), and the peaks of the
     * samples inside [t0, t1]. */
    for (s = t0 <= tat(c, lo) ? lo : find_le(c, t0); s < c->count; s++) {
        const struct eerl__meter_sample *row = &c->sg[(size_t)(s % c->cap) * c->n];
        double ts = tat(c, s), sum = 0;
        int any = 0, inside = ts >= t0 && ts <= t1, read = 0, capped = 0;
        int overlaps = ts > t0 && (s == lo || tat(c, s - 1) < t1);

        if (inside)
            out->n_samples++;
        if (overlaps || inside)
            for (i = 0; i < n; i++) {
                const struct eerl__meter_sample *x = &row[pos ? pos[i] : i];

                if (overlaps)
                    gflags[i] |= x->flags;
                gflags[i] |= state_flags(c, s, pos ? pos[i] : i);
                if (inside)
                    count_capped(x, &read, &capped);
                if (inside && x->power_w >= 0) {
                    if (x->power_w > peak_w[i])
                        peak_w[i] = x->power_w;
                    sum += x->power_w;
                    any = 1;
                }
            }
        if (any && sum > out->peak_total_w)
            out->peak_total_w = sum;
        n_read += (size_t)read;
        n_capped += (size_t)capped;
        if (ts >= t1)
            break; /* the first sample at or past t1 closes the last overlapping interval */
    }
    /* A GPU lost before the interval: the last sample says so even when no interval overlaps. */
    for (i = 0; i < n; i++) {
        size_t gi = pos ? pos[i] : i;

        if (t1 > tat(c, c->count - 1) && (sgat(c, c->count - 1, gi)->flags & EERL_METER_LOST))
            gflags[i] |= EERL_METER_LOST;
        out->total_joules += joules[i];
        out->flags |= gflags[i];
    }
    out->capped_share = n_read ? (double)n_capped / (double)n_read : -1.0;
    return 0;
}

/* The meter's counter model (see counter.h). Everything here runs under the meter's locks, on
 * whichever thread ticks; it reads no device and no clock. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eerl/error.h"
#include "eerl/meter.h"
#include "meter/counter.h"

/* A counter that has not moved for this long while the GPU draws power is stuck. NVML updates
 * the counter about every 100 ms, so a shorter flat stretch is normal between close ticks. */
#define STUCK_AFTER_S 0.5
/* A counter that moved, over a stretch of at least PARTLY_STUCK_MIN_S, by less than this share of
 * the integrated power stopped part way through the stretch. Loose enough for the counter's
 * 100 ms lag and for power sampled at peaks; only sparse counter reads make stretches this long.
 * With averaged power (a 1 s average lags a drop by up to a second: 700 W -> 70 W over a 2 s
 * stretch reads about 2x the energy) the stretch must be twice as long and the share 0.2. */
#define PARTLY_STUCK_MIN_S 1.0
#define PARTLY_STUCK_RATIO 0.5
/* The suspect test, for stretches too short for those two (phases of a fraction of a second): over
 * a window of counter readings at least SUSPECT_MIN_S long, a healthy counter, one ~100 ms update
 * behind at worst, counts at least (0.25 - 0.1) / 0.25 = 60% of the lowest power sampled times
 * the window; one that counted less than SUSPECT_RATIO of that may have stopped (with averaged
 * power, which lags a drop: less than 0.4 of that). */
#define SUSPECT_MIN_S 0.25
#define SUSPECT_RATIO 0.4

static struct eerl__meter_sample *sgat(struct eerl__counter *c, uint64_t seq, size_t gi)
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

int eerl__counter_resize(struct eerl__counter *c, size_t cap)
{
    double *t = calloc(cap, sizeof(*t));
    struct eerl__meter_sample *sg = calloc(cap * c->n, sizeof(*sg));
    double *cum = calloc(cap + 2, sizeof(*cum));

    if (!t || !sg || !cum) {
        free(t);
        free(sg);
        free(cum);
        return EERL_ENOMEM;
    }
    free(c->t);
    free(c->sg);
    free(c->cum);
    c->t = t;
    c->sg = sg;
    c->cum = cum;
    c->cap = cap;
    return 0;
}

/* Power at sample seq for GPU gi, or -1. */
static double pw(struct eerl__counter *c, uint64_t seq, size_t gi)
{
    return sgat(c, seq, gi)->power_w;
}

/* Integrated power (trapezoid) from sample a to sample b for GPU gi, written cumulatively into
 * cum[0..b-a] (cum[0] = 0). A missing power reading holds the previous known one (the first known
 * one before any is known): linear in the span, so a long gap cannot make a tick expensive.
 * Returns 0 if at least one reading was known. */
static int power_integral(struct eerl__counter *c, size_t gi, uint64_t a, uint64_t b, double *cum)
{
    uint64_t s, first = UINT64_MAX;
    double p_prev;

    for (s = a; s <= b; s++)
        if (pw(c, s, gi) >= 0) {
            first = s;
            break;
        }
    if (first == UINT64_MAX) {
        for (s = a; s <= b; s++)
            cum[s - a] = 0;
        return -1;
    }
    cum[0] = 0;
    p_prev = pw(c, first, gi);
    for (s = a + 1; s <= b; s++) {
        double p = pw(c, s, gi);

        if (p < 0)
            p = p_prev;
        cum[s - a] = cum[s - a - 1] + 0.5 * (p_prev + p) * (tat(c, s) - tat(c, s - 1));
        p_prev = p;
    }
    return 0;
}

/* Settles GPU gi at the newest sample k with acc(k) = acc(anchor) + e_j, rewriting the pending
 * samples between: e_j shared out in proportion to cum (integrated power) when given and
 * positive, else linearly in time. When e_j is the integrated power itself, that is cum. flags go
 * on every sample of the stretch. */
static void settle(struct eerl__counter *c, size_t gi, uint64_t k, double e_j, const double *cum,
                   unsigned flags)
{
    struct eerl__meter_gpu *g = &c->gs[gi];
    uint64_t a = g->anchor_seq, s, lo = oldest_seq(c);
    double acc_a = sgat(c, a, gi)->acc, ta = tat(c, a), tk = tat(c, k);
    double total = cum ? cum[k - a] : 0;

    for (s = a + 1; s < k; s++) {
        if (s < lo)
            continue;
        if (flags & EERL_METER_STUCK) /* the suspicion is confirmed: stuck says more */
            sgat(c, s, gi)->flags &= ~EERL_METER_SUSPECT;
        if (total > 0)
            sgat(c, s, gi)->acc = acc_a + e_j * (cum[s - a] / total);
        else
            sgat(c, s, gi)->acc = acc_a + (tk > ta ? e_j * (tat(c, s) - ta) / (tk - ta) : 0);
        sgat(c, s, gi)->flags |= flags;
    }
    sgat(c, k, gi)->acc = acc_a + e_j;
    if (flags & EERL_METER_STUCK)
        sgat(c, k, gi)->flags &= ~EERL_METER_SUSPECT;
    sgat(c, k, gi)->flags |= flags | g->pend_flags;
    g->anchor_seq = k;
    g->pend_flags = 0;
}

/* Leaves sample k pending with a provisional acc (the previous sample's plus one step of
 * integrated power); the stretch's pending flags go on it. */
static void pend(struct eerl__counter *c, size_t gi, uint64_t k, double prov, unsigned flags)
{
    struct eerl__meter_gpu *g = &c->gs[gi];

    g->pend_flags |= flags;
    sgat(c, k, gi)->acc = prov;
    sgat(c, k, gi)->flags |= g->pend_flags;
}

/* Did the counter stop part way through a stretch of dt s in which it counted e_ctr J where
 * power says e_pow J? */
static int partly_stuck(const struct eerl__meter_gpu *g, double dt, double e_ctr, double e_pow)
{
    if (g->power_instant == 0) /* averaged power */
        return dt >= 2 * PARTLY_STUCK_MIN_S && e_ctr < 0.4 * PARTLY_STUCK_RATIO * e_pow;
    return dt >= PARTLY_STUCK_MIN_S && e_ctr < PARTLY_STUCK_RATIO * e_pow;
}

/* GPU gi is lost at sample k (or was before): its energy stops at the last sample. */
static void account_lost(struct eerl__counter *c, size_t gi, uint64_t k)
{
    struct eerl__meter_gpu *g = &c->gs[gi];
    struct eerl__meter_sample *cur = sgat(c, k, gi);

    if (!g->lost && k > 0) {
        /* Samples since the last counter reading keep their integrated power: say so. */
        uint64_t s, lo = oldest_seq(c);

        for (s = g->anchor_seq + 1; s < k; s++)
            if (s >= lo)
                sgat(c, s, gi)->flags |= EERL_METER_POWER;
        g->anchor_seq = k - 1;
    }
    g->lost = 1;
    cur->power_w = -1.0;
    cur->acc = k > 0 ? sgat(c, k - 1, gi)->acc : 0;
    cur->flags = EERL_METER_LOST;
}

/* The provisional acc of a pending sample k: one trapezoid step on from the previous sample (the
 * last known power, held, held across failed reads). O(1) per tick, where integrating again from
 * the anchor would grow with the stretch; settling integrates the stretch once. */
static double provisional(struct eerl__counter *c, size_t gi, uint64_t k, double held, int redo)
{
    struct eerl__meter_sample *cur = sgat(c, k, gi);
    double p = cur->power_w >= 0 ? cur->power_w : held, dt = tat(c, k) - tat(c, k - 1);
    double step = held >= 0 && p >= 0 ? 0.5 * (held + p) * dt : p >= 0 ? p * dt : 0;

    /* a redo's power-only pass already took the step */
    return redo ? cur->acc : sgat(c, k - 1, gi)->acc + step;
}

/* A good counter reading rd->mj at sample k that moved, or has been flat too long to wait: settles
 * the stretch since the anchor (prov: sample k's provisional acc; dt_pend: the stretch's length).
 */
static void account_reading(struct eerl__counter *c, size_t gi, uint64_t k,
                            const struct eerl__meter_read *rd, double *cum, double prov,
                            double dt_pend)
{
    struct eerl__meter_gpu *g = &c->gs[gi];
    uint64_t a = g->anchor_seq;
    int have_cum = power_integral(c, gi, a, k, cum) == 0;
    double e_pow = cum[k - a];

    if (!g->have_counter) { /* first good counter after failures: bridge with power, rebase */
        g->have_counter = 1;
        g->anchor_counter = rd->mj;
        settle(c, gi, k, have_cum ? e_pow : 0, cum, EERL_METER_POWER | EERL_METER_MISSED);
        return;
    }
    if (rd->mj < g->anchor_counter) {
        /* Driver reset: the counter restarted somewhere in the stretch, and rd->mj is what it
         * counted since. The stretch used at least that; integrated power is the better estimate
         * when it is larger. The counter's new value is the new base. */
        double e_ctr = rd->mj / 1000.0;
        unsigned fl = EERL_METER_RESET;

        g->anchor_counter = rd->mj;
        g->stuck = 0;
        if (have_cum && e_pow > e_ctr)
            fl |= EERL_METER_POWER;
        settle(c, gi, k, (fl & EERL_METER_POWER) ? e_pow : e_ctr, have_cum ? cum : NULL, fl);
        return;
    }
    if (rd->mj > g->anchor_counter) {
        double e_ctr = (double)(rd->mj - g->anchor_counter) / 1000.0;

        g->anchor_counter = rd->mj;
        if (g->stuck) {
            /* Moving again. The jump may or may not hold the energy of the stuck stretch (which
             * power already covered), so the stretch up to here is power too; then rebase. */
            g->stuck = 0;
            settle(c, gi, k, have_cum ? e_pow : e_ctr, have_cum ? cum : NULL,
                   EERL_METER_STUCK | EERL_METER_POWER);
        } else if (have_cum && partly_stuck(g, dt_pend, e_ctr, e_pow)) {
            /* Far less than power says, over a long stretch (sparse counter reads): the counter
             * stopped part way through it. Power for the stretch; the next reading tells
             * whether it is still stuck. */
            settle(c, gi, k, e_pow, cum, EERL_METER_STUCK | EERL_METER_POWER);
        } else {
            settle(c, gi, k, e_ctr, have_cum ? cum : NULL, 0);
        }
        return;
    }
    /* The counter has not moved since the anchor. */
    if (!have_cum || e_pow <= 0) { /* no power drawn (or unknown): no energy either */
        settle(c, gi, k, 0, NULL, have_cum ? 0 : EERL_METER_MISSED);
        return;
    }
    if (g->stuck || dt_pend >= STUCK_AFTER_S) {
        g->stuck = 1;
        settle(c, gi, k, e_pow, cum, EERL_METER_STUCK | EERL_METER_POWER);
        return;
    }
    pend(c, gi, k, prov, 0); /* normal between NVML's ~100 ms updates */
}

/* Brings GPU gi's bookkeeping up to sample k with what the tick read (see update_gpu). */
static void account_gpu(struct eerl__counter *c, size_t gi, uint64_t k,
                        const struct eerl__meter_read *rd, double *cum, int redo)
{
    struct eerl__meter_gpu *g = &c->gs[gi];
    struct eerl__meter_sample *cur = sgat(c, k, gi);
    uint64_t a = g->anchor_seq;
    double dt_pend, prov, held = g->held_w;

    if (!redo) {
        cur->power_w = rd->power_r == 0 ? rd->mw / 1000.0 : -1.0;
        cur->flags = 0;
        cur->events_read = rd->events_read;
        cur->events = rd->events;
        if (rd->limit_mw)
            g->limit_mw = rd->limit_mw;
        cur->limit_mw = g->limit_mw;
        if (cur->power_w >= 0)
            g->held_w = cur->power_w;
    }
    if (g->lost || rd->energy_r == EERL_EGPULOST || rd->power_r == EERL_EGPULOST) {
        account_lost(c, gi, k);
        return;
    }
    if (k == 0) { /* first sample: the origin */
        cur->acc = 0;
        g->anchor_seq = 0;
        if (rd->energy_r == 0) {
            g->have_counter = 1;
            g->anchor_counter = rd->mj;
        }
        return;
    }
    if (a < oldest_seq(c)) {
        /* Unsettled for the whole history: start again from the previous sample, and let the
         * next good counter reading rebase rather than credit the whole gap to one interval. */
        a = g->anchor_seq = k - 1;
        g->have_counter = 0;
    }
    prov = provisional(c, gi, k, held, redo);
    dt_pend = tat(c, k) - tat(c, a);

    if (g->energy_supported == 0) { /* no counter: integrated power is all there is */
        if (rd->power_r == 0) {
            power_integral(c, gi, a, k, cum);
            settle(c, gi, k, cum[k - a], cum, EERL_METER_POWER);
        } else {
            pend(c, gi, k, prov,
                 rd->mark_only ? EERL_METER_POWER : EERL_METER_MISSED | EERL_METER_POWER);
        }
        return;
    }
    if (!rd->energy_read) { /* a power-only tick: the next counter reading settles it */
        pend(c, gi, k, prov, g->stuck ? EERL_METER_STUCK | EERL_METER_POWER : 0);
        return;
    }
    if (rd->energy_r != 0) { /* a failed read: wait for the next good one */
        pend(c, gi, k, prov, EERL_METER_MISSED);
        return;
    }
    if (g->have_counter && rd->mj == g->anchor_counter && !g->stuck && dt_pend < STUCK_AFTER_S &&
        prov > sgat(c, a, gi)->acc) {
        pend(c, gi, k, prov, 0); /* not moved yet: normal between NVML's ~100 ms updates */
        return;
    }
    account_reading(c, gi, k, rd, cum, prov, dt_pend);
}

/* The suspect test (SUSPECT_MIN_S) at a good counter reading mj at sample k: once the window
 * since the last test is long enough, a counter that fell far short of the lowest power sampled
 * in it flags the window's samples that still hold counter energy (a stuck or power stretch is
 * flagged so already); then the window starts again at k. */
static void suspect_test(struct eerl__counter *c, size_t gi, uint64_t k, uint64_t mj)
{
    struct eerl__meter_gpu *g = &c->gs[gi];
    double dt, p_min = -1, ratio = g->power_instant == 0 ? 0.4 * SUSPECT_RATIO : SUSPECT_RATIO;
    uint64_t s;

    if (!g->chk_ok || mj < g->chk_mj || g->chk_seq < oldest_seq(c)) {
        g->chk_ok = 1; /* the first reading, a reset or a window older than the history */
        g->chk_seq = k;
        g->chk_mj = mj;
        return;
    }
    dt = tat(c, k) - tat(c, g->chk_seq);
    if (dt < SUSPECT_MIN_S)
        return;
    for (s = g->chk_seq; s <= k; s++) {
        double w = sgat(c, s, gi)->power_w;
        if (w >= 0 && (p_min < 0 || w < p_min))
            p_min = w;
    }
    if (p_min > 0 && (double)(mj - g->chk_mj) / 1000.0 < ratio * p_min * dt)
        for (s = g->chk_seq + 1; s <= k; s++)
            if (!(sgat(c, s, gi)->flags & (EERL_METER_STUCK | EERL_METER_POWER)))
                sgat(c, s, gi)->flags |= EERL_METER_SUSPECT;
    g->chk_seq = k;
    g->chk_mj = mj;
}

/* Brings GPU gi's bookkeeping up to sample k with what the tick read, then runs the suspect test
 * on a good counter reading. redo: sample k is already stored (a power-only tick, still pending)
 * and rd adds its counter reading; its power stays. */
static void update_gpu(struct eerl__counter *c, size_t gi, uint64_t k,
                       const struct eerl__meter_read *rd, double *cum, int redo)
{
    account_gpu(c, gi, k, rd, cum, redo);
    if (rd->energy_read && rd->energy_r == 0 && !c->gs[gi].lost)
        suspect_test(c, gi, k, rd->mj);
}

int eerl__counter_init(struct eerl__counter *c, size_t n, size_t cap)
{
    size_t i;
    int r;

    memset(c, 0, sizeof(*c));
    c->n = n;
    c->gs = calloc(n, sizeof(*c->gs));
    if (!c->gs)
        return EERL_ENOMEM;
    for (i = 0; i < n; i++) {
        c->gs[i].energy_supported = -1;
        c->gs[i].power_instant = -1;
        c->gs[i].events_supported = -1;
        c->gs[i].limit_supported = -1;
        c->gs[i].held_w = -1;
    }
    r = eerl__counter_resize(c, cap);
    if (r < 0) {
        free(c->gs);
        c->gs = NULL;
    }
    return r;
}

void eerl__counter_free(struct eerl__counter *c)
{
    free(c->t);
    free(c->sg);
    free(c->cum);
    free(c->gs);
    memset(c, 0, sizeof(*c));
}

void eerl__counter_store(struct eerl__counter *c, double t, const struct eerl__meter_read *rd)
{
    uint64_t k = c->count;
    size_t i;

    c->t[k % c->cap] = t;
    c->count++;
    for (i = 0; i < c->n; i++)
        update_gpu(c, i, k, &rd[i], c->cum, 0);
}

void eerl__counter_redo(struct eerl__counter *c, const struct eerl__meter_read *rd)
{
    uint64_t k = c->count - 1;
    size_t i;

    for (i = 0; i < c->n; i++)
        if (rd[i].todo)
            update_gpu(c, i, k, &rd[i], c->cum, 1);
}

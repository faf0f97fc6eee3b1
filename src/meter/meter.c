/* The energy meter. Owns its ring of samples, the per-GPU bookkeeping that turns raw counter
 * readings into a continuous cumulative energy, and the sampler thread. Borrows the device handle;
 * never changes a GPU (clocks are the actuator's).
 *
 * Model: for each GPU the ring holds acc(t_k), the cumulative energy in joules since the first
 * sample, at every sample time t_k. acc only ever follows the counter's deltas, so a driver reset,
 * a stuck counter or a missing counter cannot make it jump or go backwards. The energy between two
 * marks is acc(t1) - acc(t0), with acc interpolated linearly between samples.
 *
 * Two rates: every tick reads power (instantaneous where the backend has it), the counters are
 * read only on "energy ticks" (every energy interval, and at marks), because on real drivers a
 * counter read costs a thousand times a power read. Before the reads of one instant the meter
 * asks the device for a snapshot: a backend that reads GPUs elsewhere (device/remote.c, the GPUs
 * of other nodes) reads them all in one round trip there, so a tick costs one, not one per GPU.
 *
 * Per GPU, the "anchor" is the last sample whose acc is settled (backed by a good reading). When
 * a tick cannot settle the sample (a power-only tick, the counter has not moved yet, or a read
 * failed), the sample is pending: it gets a provisional acc (the anchor's plus integrated power,
 * when power is known) and is rewritten when the next good reading settles the stretch: the
 * counter's energy shared out in proportion to integrated power (linearly in time when there is
 * no power or it integrates to 0), or integrated power itself when the counter turns out stuck.
 * Marks: without the sampler thread a mark is a tick that reads the counters, on the caller's
 * thread. While the thread runs, a mark only takes the time and queues it (run_lock); the thread
 * serves the queue after a quiet period (or at once when a query waits): a sample at each queued
 * mark's time that reads nothing, then one tick that reads the counters and power, which settles
 * them by the power's shape. Marks close together share that one reading. A query whose end is
 * past the last served reading waits until every mark made before it is served.
 * Locks: tick_lock serializes ticks (device reads included); lock guards the ring. Order:
 * tick_lock, then lock. run_lock + run_cond control the sampler thread and guard the mark queue;
 * served_cond (with run_lock) wakes queries waiting for marks. run_lock may be held while
 * tick_lock is taken (set_clock, start), never the reverse.
 * Fork: the sampler thread, and whoever held a lock at the fork, stay in the parent. In a forked
 * child (pid differs from the creator's) stop only forgets the thread, free frees memory without
 * joining or destroying the inherited locks, and a mark while the parent's thread serves fails
 * with EERL_ESTATE instead of queueing for a thread that is not there. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "eerl/error.h"
#include "device/device_impl.h"
#include "meter/meter.h"

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
#define DEFAULT_HISTORY_S 3600.0
/* Marks queued for the thread before it serves them; more in one burst share the last slot (the
 * ones dropped are interpolated between their neighbours). */
#define MARKQ_CAP 64

/* What one tick read from one GPU. */
struct read {
    int todo;        /* upgrade_last_locked: this GPU's counter is read */
    int mark_only;   /* a mark's sample: nothing was read (a later reading settles it) */
    int energy_read; /* the counter was read this tick (else energy_r is EERL_ENOTSUP) */
    int energy_r;    /* 0, or the error of the energy read (not attempted: EERL_ENOTSUP) */
    uint64_t mj;
    int power_r;
    unsigned mw;
};

struct sample_gpu {
    double acc;     /* cumulative joules at this sample */
    double power_w; /* power read at this sample; < 0 when none */
    unsigned flags; /* EERL_METER_* for the interval ending at this sample */
};

struct gpu_state {
    unsigned idx;
    int energy_supported; /* -1 not known yet, 0 no (power integration), 1 yes */
    int power_instant;    /* -1 not known yet, 0 no (averaged power), 1 yes */
    double held_w;        /* the last power read, W; < 0 before any */
    int want_energy;      /* the last counter read failed: read again at the next tick */
    int lost;
    int stuck;
    int have_counter; /* anchor_counter is valid */
    uint64_t anchor_counter;
    uint64_t anchor_seq; /* the last settled sample */
    unsigned pend_flags; /* flags the pending stretch has collected (MISSED) */
    int chk_ok;          /* the suspect test's window has begun: at chk_seq, counter chk_mj */
    uint64_t chk_seq, chk_mj;
};

struct eerl_meter {
    eerl_device *dev;
    size_t n;
    unsigned interval_ms;
    struct gpu_state *gs;
    /* Position of device index i in gs, or SIZE_MAX; pos_of[0..n_pos-1]. Read-only after new. */
    size_t *pos_of;
    size_t n_pos;
    struct read *rd; /* n scratch reads for a tick (under tick_lock) */

    /* Ring: sample seq s lives in slot s % cap; seqs [count - min(count, cap), count) are kept. */
    size_t cap;
    uint64_t count;
    double *t;
    struct sample_gpu *sg; /* cap * n, slot-major */
    double *cum;           /* cap + 2 scratch doubles for tick (under tick_lock) */

    eerl_clock_fn clock;
    void *clock_ctx;

    /* Energy ticks; under tick_lock. */
    double energy_interval; /* seconds; 0 every tick; EERL_METER_ENERGY_AUTO */
    double read_cost_s;     /* auto: CPU seconds of one energy tick's counter reads (average) */
    double last_energy_t;   /* time of the last energy tick */
    int have_energy_t;
    int last_was_energy; /* the newest sample is an energy tick */

    pthread_mutex_t lock;
    pthread_mutex_t tick_lock;
    pthread_mutex_t run_lock;
    pthread_cond_t run_cond;
    pthread_t thread;
    pid_t pid; /* the creator: the thread and the locks' holders live in that process */
    int running;
    int stop_flag;

    /* Marks served by the thread; under run_lock. */
    int serving; /* the thread runs and takes marks (cleared with stop_flag) */
    double markq[MARKQ_CAP];
    size_t n_markq;      /* queued, no sample stored for them yet */
    uint64_t mark_seq;   /* marks made while serving */
    uint64_t served_seq; /* of those, the ones a counter reading after them settled */
    double served_t;     /* the time of that reading (its sample) */
    double mark_first_w; /* monotonic time of the oldest queued mark */
    double mark_last_w;  /* and of the newest */
    int waiters;         /* queries waiting for marks to be served */
    double mark_quiet_s;
    uint64_t n_marks;      /* every mark, served by the thread or not */
    uint64_t n_mark_reads; /* counter readings taken for marks (one per GPU each) */
    pthread_cond_t served_cond;
};

static struct sample_gpu *sgat(eerl_meter *m, uint64_t seq, size_t gi)
{
    return &m->sg[(size_t)(seq % m->cap) * m->n + gi];
}

static double tat(const eerl_meter *m, uint64_t seq)
{
    return m->t[seq % m->cap];
}

static uint64_t oldest_seq(const eerl_meter *m)
{
    return m->count > m->cap ? m->count - m->cap : 0;
}

static int alloc_ring(eerl_meter *m, size_t cap)
{
    double *t = calloc(cap, sizeof(*t));
    struct sample_gpu *sg = calloc(cap * m->n, sizeof(*sg));
    double *cum = calloc(cap + 2, sizeof(*cum));

    if (!t || !sg || !cum) {
        free(t);
        free(sg);
        free(cum);
        return EERL_ENOMEM;
    }
    free(m->t);
    free(m->sg);
    free(m->cum);
    m->t = t;
    m->sg = sg;
    m->cum = cum;
    m->cap = cap;
    return 0;
}

static size_t history_cap(double seconds, unsigned interval_ms)
{
    double c = ceil(seconds * 1000.0 / interval_ms) + 1.0;

    if (c < 64)
        c = 64;
    if (c > 1e8)
        c = 1e8;
    return (size_t)c;
}

int eerl_meter_new(eerl_device *dev, const unsigned *gpus, size_t n_gpus, unsigned interval_ms,
                   eerl_meter **ret_meter)
{
    eerl_meter *m = NULL;
    pthread_condattr_t ca;
    int r;
    size_t i, j;

    unsigned top = 0;

    if (!dev || !gpus || n_gpus == 0 || n_gpus > EERL_METER_GPUS_LIMIT || !ret_meter)
        return EERL_EINVAL;
    if (interval_ms == 0)
        interval_ms = EERL_METER_DEFAULT_INTERVAL_MS;
    for (i = 0; i < n_gpus; i++) {
        char name[EERL_DEVICE_NAME_MAX];

        /* Checks the index and leaves "GPU index 9 does not exist (...)" in the device's
         * last error when it does not. */
        r = eerl_device_name(dev, gpus[i], name, sizeof(name));
        if (r == EERL_ENODEV)
            return r;
        if (gpus[i] > top)
            top = gpus[i];
    }
    m = calloc(1, sizeof(*m));
    if (!m)
        return EERL_ENOMEM;
    m->dev = dev;
    m->pid = getpid();
    m->n = n_gpus;
    m->interval_ms = interval_ms;
    m->clock = eerl_clock_monotonic;
    m->energy_interval = EERL_METER_ENERGY_AUTO;
    /* Every index exists, so the table is at most the device's GPU count long. */
    m->n_pos = (size_t)top + 1;
    m->pos_of = malloc(m->n_pos * sizeof(*m->pos_of));
    m->mark_quiet_s = EERL_METER_MARK_QUIET_S;
    m->served_t = -INFINITY;
    m->gs = calloc(n_gpus, sizeof(*m->gs));
    m->rd = calloc(n_gpus, sizeof(*m->rd));
    if (!m->pos_of || !m->gs || !m->rd) {
        r = EERL_ENOMEM;
        goto fail;
    }
    for (j = 0; j < m->n_pos; j++)
        m->pos_of[j] = SIZE_MAX;
    for (i = 0; i < n_gpus; i++) {
        if (m->pos_of[gpus[i]] != SIZE_MAX) {
            r = EERL_EINVAL; /* named twice */
            goto fail;
        }
        m->pos_of[gpus[i]] = i;
        m->gs[i].idx = gpus[i];
        m->gs[i].energy_supported = -1;
        m->gs[i].power_instant = -1;
        m->gs[i].held_w = -1;
    }
    r = alloc_ring(m, history_cap(DEFAULT_HISTORY_S, interval_ms));
    if (r < 0)
        goto fail;
    if (pthread_condattr_init(&ca) != 0) {
        r = EERL_ESYS;
        goto fail;
    }
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (pthread_mutex_init(&m->lock, NULL) != 0 || pthread_mutex_init(&m->tick_lock, NULL) != 0 ||
        pthread_mutex_init(&m->run_lock, NULL) != 0 || pthread_cond_init(&m->run_cond, &ca) != 0 ||
        pthread_cond_init(&m->served_cond, &ca) != 0) {
        pthread_condattr_destroy(&ca);
        r = EERL_ESYS;
        goto fail;
    }
    pthread_condattr_destroy(&ca);
    *ret_meter = m;
    return 0;
fail:
    free(m->t);
    free(m->sg);
    free(m->cum);
    free(m->gs);
    free(m->rd);
    free(m->pos_of);
    free(m);
    return r;
}

void eerl_meter_free(eerl_meter *m)
{
    if (!m)
        return;
    if (m->pid == getpid()) { /* see "Fork" above */
        if (m->running)
            eerl_meter_stop(m);
        pthread_mutex_destroy(&m->lock);
        pthread_mutex_destroy(&m->tick_lock);
        pthread_mutex_destroy(&m->run_lock);
        pthread_cond_destroy(&m->run_cond);
        pthread_cond_destroy(&m->served_cond);
    }
    free(m->t);
    free(m->sg);
    free(m->cum);
    free(m->gs);
    free(m->rd);
    free(m->pos_of);
    free(m);
}

int eerl_meter_set_history(eerl_meter *m, double seconds)
{
    int r;

    if (!m || !(seconds > 0) || !isfinite(seconds))
        return EERL_EINVAL;
    pthread_mutex_lock(&m->tick_lock);
    pthread_mutex_lock(&m->lock);
    r = m->count ? EERL_ESTATE : alloc_ring(m, history_cap(seconds, m->interval_ms));
    pthread_mutex_unlock(&m->lock);
    pthread_mutex_unlock(&m->tick_lock);
    return r;
}

int eerl_meter_set_clock(eerl_meter *m, eerl_clock_fn clock, void *clock_ctx)
{
    int r = 0;

    if (!m || !clock)
        return EERL_EINVAL;
    pthread_mutex_lock(&m->run_lock);
    if (m->running) {
        r = EERL_ESTATE;
    } else {
        pthread_mutex_lock(&m->tick_lock);
        m->clock = clock;
        m->clock_ctx = clock_ctx;
        pthread_mutex_unlock(&m->tick_lock);
    }
    pthread_mutex_unlock(&m->run_lock);
    return r;
}

int eerl_meter_set_energy_interval(eerl_meter *m, double seconds)
{
    if (!m || !isfinite(seconds) || (seconds < 0 && seconds != EERL_METER_ENERGY_AUTO))
        return EERL_EINVAL;
    pthread_mutex_lock(&m->tick_lock);
    m->energy_interval = seconds;
    pthread_mutex_unlock(&m->tick_lock);
    return 0;
}

/* Under tick_lock. */
static double energy_interval_locked(const eerl_meter *m)
{
    double e;

    if (m->energy_interval != EERL_METER_ENERGY_AUTO)
        return m->energy_interval;
    e = m->read_cost_s / EERL_METER_ENERGY_CPU_BUDGET;
    if (!(e >= EERL_METER_ENERGY_MIN_S))
        e = EERL_METER_ENERGY_MIN_S;
    if (e > EERL_METER_ENERGY_MAX_S)
        e = EERL_METER_ENERGY_MAX_S;
    return e;
}

int eerl_meter_set_mark_quiet(eerl_meter *m, double seconds)
{
    if (!m || !isfinite(seconds) || seconds < 0 || seconds > 1.0)
        return EERL_EINVAL;
    pthread_mutex_lock(&m->run_lock);
    m->mark_quiet_s = seconds;
    pthread_mutex_unlock(&m->run_lock);
    return 0;
}

int eerl_meter_mark_stats(eerl_meter *m, uint64_t *ret_marks, uint64_t *ret_reads)
{
    if (!m)
        return EERL_EINVAL;
    pthread_mutex_lock(&m->run_lock);
    if (ret_marks)
        *ret_marks = m->n_marks;
    if (ret_reads)
        *ret_reads = m->n_mark_reads;
    pthread_mutex_unlock(&m->run_lock);
    return 0;
}

int eerl_meter_energy_interval(eerl_meter *m, double *ret_seconds)
{
    if (!m || !ret_seconds)
        return EERL_EINVAL;
    pthread_mutex_lock(&m->tick_lock);
    *ret_seconds = energy_interval_locked(m);
    pthread_mutex_unlock(&m->tick_lock);
    return 0;
}

/* ---- sampling ---------------------------------------------------------------------------- */

/* Power at sample seq for GPU gi, or -1. */
static double pw(eerl_meter *m, uint64_t seq, size_t gi)
{
    return sgat(m, seq, gi)->power_w;
}

/* Integrated power (trapezoid) from sample a to sample b for GPU gi, written cumulatively into
 * cum[0..b-a] (cum[0] = 0). A missing power reading holds the previous known one (the first known
 * one before any is known): linear in the span, so a long gap cannot make a tick expensive.
 * Returns 0 if at least one reading was known. */
static int power_integral(eerl_meter *m, size_t gi, uint64_t a, uint64_t b, double *cum)
{
    uint64_t s, first = UINT64_MAX;
    double p_prev;

    for (s = a; s <= b; s++)
        if (pw(m, s, gi) >= 0) {
            first = s;
            break;
        }
    if (first == UINT64_MAX) {
        for (s = a; s <= b; s++)
            cum[s - a] = 0;
        return -1;
    }
    cum[0] = 0;
    p_prev = pw(m, first, gi);
    for (s = a + 1; s <= b; s++) {
        double p = pw(m, s, gi);

        if (p < 0)
            p = p_prev;
        cum[s - a] = cum[s - a - 1] + 0.5 * (p_prev + p) * (tat(m, s) - tat(m, s - 1));
        p_prev = p;
    }
    return 0;
}

/* Settles GPU gi at the newest sample k with acc(k) = acc(anchor) + e_j, rewriting the pending
 * samples between: e_j shared out in proportion to cum (integrated power) when given and
 * positive, else linearly in time. When e_j is the integrated power itself, that is cum. flags go
 * on every sample of the stretch. */
static void settle(eerl_meter *m, size_t gi, uint64_t k, double e_j, const double *cum,
                   unsigned flags)
{
    struct gpu_state *g = &m->gs[gi];
    uint64_t a = g->anchor_seq, s, lo = oldest_seq(m);
    double acc_a = sgat(m, a, gi)->acc, ta = tat(m, a), tk = tat(m, k);
    double total = cum ? cum[k - a] : 0;

    for (s = a + 1; s < k; s++) {
        if (s < lo)
            continue;
        if (flags & EERL_METER_STUCK) /* the suspicion is confirmed: stuck says more */
            sgat(m, s, gi)->flags &= ~EERL_METER_SUSPECT;
        if (total > 0)
            sgat(m, s, gi)->acc = acc_a + e_j * (cum[s - a] / total);
        else
            sgat(m, s, gi)->acc = acc_a + (tk > ta ? e_j * (tat(m, s) - ta) / (tk - ta) : 0);
        sgat(m, s, gi)->flags |= flags;
    }
    sgat(m, k, gi)->acc = acc_a + e_j;
    if (flags & EERL_METER_STUCK)
        sgat(m, k, gi)->flags &= ~EERL_METER_SUSPECT;
    sgat(m, k, gi)->flags |= flags | g->pend_flags;
    g->anchor_seq = k;
    g->pend_flags = 0;
}

/* Leaves sample k pending with a provisional acc (the previous sample's plus one step of
 * integrated power); the stretch's pending flags go on it. */
static void pend(eerl_meter *m, size_t gi, uint64_t k, double prov, unsigned flags)
{
    struct gpu_state *g = &m->gs[gi];

    g->pend_flags |= flags;
    sgat(m, k, gi)->acc = prov;
    sgat(m, k, gi)->flags |= g->pend_flags;
}

/* Did the counter stop part way through a stretch of dt s in which it counted e_ctr J where
 * power says e_pow J? */
static int partly_stuck(const struct gpu_state *g, double dt, double e_ctr, double e_pow)
{
    if (g->power_instant == 0) /* averaged power */
        return dt >= 2 * PARTLY_STUCK_MIN_S && e_ctr < 0.4 * PARTLY_STUCK_RATIO * e_pow;
    return dt >= PARTLY_STUCK_MIN_S && e_ctr < PARTLY_STUCK_RATIO * e_pow;
}

/* Brings GPU gi's bookkeeping up to sample k with what the tick read (see update_gpu). */
static void account_gpu(eerl_meter *m, size_t gi, uint64_t k, const struct read *rd, double *cum,
                        int redo)
{
    struct gpu_state *g = &m->gs[gi];
    struct sample_gpu *cur = sgat(m, k, gi);
    uint64_t a = g->anchor_seq;
    int have_cum;
    double e_pow, dt_pend, prov, held = g->held_w;

    if (!redo) {
        cur->power_w = rd->power_r == 0 ? rd->mw / 1000.0 : -1.0;
        cur->flags = 0;
        if (cur->power_w >= 0)
            g->held_w = cur->power_w;
    }
    if (g->lost || rd->energy_r == EERL_EGPULOST || rd->power_r == EERL_EGPULOST) {
        if (!g->lost && k > 0) {
            /* Samples since the last counter reading keep their integrated power: say so. */
            uint64_t s, lo = oldest_seq(m);

            for (s = a + 1; s < k; s++)
                if (s >= lo)
                    sgat(m, s, gi)->flags |= EERL_METER_POWER;
            g->anchor_seq = k - 1;
        }
        g->lost = 1;
        cur->power_w = -1.0;
        cur->acc = k > 0 ? sgat(m, k - 1, gi)->acc : 0;
        cur->flags = EERL_METER_LOST;
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
    if (a < oldest_seq(m)) {
        /* Unsettled for the whole history: start again from the previous sample, and let the
         * next good counter reading rebase rather than credit the whole gap to one interval. */
        a = g->anchor_seq = k - 1;
        g->have_counter = 0;
    }
    /* The provisional acc of a pending sample: one trapezoid step on from the previous sample
     * (the last known power held across failed reads). O(1) per tick, where integrating again
     * from the anchor would grow with the stretch; settling integrates the stretch once. */
    {
        double p = cur->power_w >= 0 ? cur->power_w : held, dt = tat(m, k) - tat(m, k - 1);
        double step = held >= 0 && p >= 0 ? 0.5 * (held + p) * dt : p >= 0 ? p * dt : 0;

        /* a redo's power-only pass already took the step */
        prov = redo ? cur->acc : sgat(m, k - 1, gi)->acc + step;
    }
    dt_pend = tat(m, k) - tat(m, a);

    if (g->energy_supported == 0) { /* no counter: integrated power is all there is */
        if (rd->power_r == 0) {
            power_integral(m, gi, a, k, cum);
            settle(m, gi, k, cum[k - a], cum, EERL_METER_POWER);
        } else {
            pend(m, gi, k, prov,
                 rd->mark_only ? EERL_METER_POWER : EERL_METER_MISSED | EERL_METER_POWER);
        }
        return;
    }
    if (!rd->energy_read) { /* a power-only tick: the next counter reading settles it */
        pend(m, gi, k, prov, g->stuck ? EERL_METER_STUCK | EERL_METER_POWER : 0);
        return;
    }
    if (rd->energy_r != 0) { /* a failed read: wait for the next good one */
        pend(m, gi, k, prov, EERL_METER_MISSED);
        return;
    }
    if (g->have_counter && rd->mj == g->anchor_counter && !g->stuck && dt_pend < STUCK_AFTER_S &&
        prov > sgat(m, a, gi)->acc) {
        pend(m, gi, k, prov, 0); /* not moved yet: normal between NVML's ~100 ms updates */
        return;
    }
    have_cum = power_integral(m, gi, a, k, cum) == 0;
    e_pow = cum[k - a];
    if (!g->have_counter) { /* first good counter after failures: bridge with power, rebase */
        g->have_counter = 1;
        g->anchor_counter = rd->mj;
        settle(m, gi, k, have_cum ? e_pow : 0, cum, EERL_METER_POWER | EERL_METER_MISSED);
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
        settle(m, gi, k, (fl & EERL_METER_POWER) ? e_pow : e_ctr, have_cum ? cum : NULL, fl);
        return;
    }
    if (rd->mj > g->anchor_counter) {
        double e_ctr = (double)(rd->mj - g->anchor_counter) / 1000.0;

        g->anchor_counter = rd->mj;
        if (g->stuck) {
            /* Moving again. The jump may or may not hold the energy of the stuck stretch (which
             * power already covered), so the stretch up to here is power too; then rebase. */
            g->stuck = 0;
            settle(m, gi, k, have_cum ? e_pow : e_ctr, have_cum ? cum : NULL,
                   EERL_METER_STUCK | EERL_METER_POWER);
        } else if (have_cum && partly_stuck(g, dt_pend, e_ctr, e_pow)) {
            /* Far less than power says, over a long stretch (sparse counter reads): the counter
             * stopped part way through it. Power for the stretch; the next reading tells
             * whether it is still stuck. */
            settle(m, gi, k, e_pow, cum, EERL_METER_STUCK | EERL_METER_POWER);
        } else {
            settle(m, gi, k, e_ctr, have_cum ? cum : NULL, 0);
        }
        return;
    }
    /* The counter has not moved since the anchor. */
    if (!have_cum || e_pow <= 0) { /* no power drawn (or unknown): no energy either */
        settle(m, gi, k, 0, NULL, have_cum ? 0 : EERL_METER_MISSED);
        return;
    }
    if (g->stuck || dt_pend >= STUCK_AFTER_S) {
        g->stuck = 1;
        settle(m, gi, k, e_pow, cum, EERL_METER_STUCK | EERL_METER_POWER);
        return;
    }
    pend(m, gi, k, prov, 0); /* normal between NVML's ~100 ms updates */
}

/* The suspect test (SUSPECT_MIN_S) at a good counter reading mj at sample k: once the window
 * since the last test is long enough, a counter that fell far short of the lowest power sampled
 * in it flags the window's samples that still hold counter energy (a stuck or power stretch is
 * flagged so already); then the window starts again at k. */
static void suspect_test(eerl_meter *m, size_t gi, uint64_t k, uint64_t mj)
{
    struct gpu_state *g = &m->gs[gi];
    double dt, p_min = -1, ratio = g->power_instant == 0 ? 0.4 * SUSPECT_RATIO : SUSPECT_RATIO;
    uint64_t s;

    if (!g->chk_ok || mj < g->chk_mj || g->chk_seq < oldest_seq(m)) {
        g->chk_ok = 1; /* the first reading, a reset or a window older than the history */
        g->chk_seq = k;
        g->chk_mj = mj;
        return;
    }
    dt = tat(m, k) - tat(m, g->chk_seq);
    if (dt < SUSPECT_MIN_S)
        return;
    for (s = g->chk_seq; s <= k; s++) {
        double w = sgat(m, s, gi)->power_w;
        if (w >= 0 && (p_min < 0 || w < p_min))
            p_min = w;
    }
    if (p_min > 0 && (double)(mj - g->chk_mj) / 1000.0 < ratio * p_min * dt)
        for (s = g->chk_seq + 1; s <= k; s++)
            if (!(sgat(m, s, gi)->flags & (EERL_METER_STUCK | EERL_METER_POWER)))
                sgat(m, s, gi)->flags |= EERL_METER_SUSPECT;
    g->chk_seq = k;
    g->chk_mj = mj;
}

/* Brings GPU gi's bookkeeping up to sample k with what the tick read, then runs the suspect test
 * on a good counter reading. redo: sample k is already stored (a power-only tick, still pending)
 * and rd adds its counter reading; its power stays. */
static void update_gpu(eerl_meter *m, size_t gi, uint64_t k, const struct read *rd, double *cum,
                       int redo)
{
    account_gpu(m, gi, k, rd, cum, redo);
    if (rd->energy_read && rd->energy_r == 0 && !m->gs[gi].lost)
        suspect_test(m, gi, k, rd->mj);
}

static double thread_cpu(void)
{
    struct timespec ts;

    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return 0;
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The reads' CPU cost feeds only the automatic energy interval; with a fixed one (the simulated
 * cluster's, in virtual time) the two clock_gettime calls per counter read were most of a
 * simulated update's cost. Under tick_lock. */
static double read_clock(const eerl_meter *m)
{
    return m->energy_interval == EERL_METER_ENERGY_AUTO ? thread_cpu() : 0;
}

/* Reads GPU i's counter into rd (not for lost GPUs or ones known to have no counter). */
static void read_energy(eerl_meter *m, size_t i, struct read *rd)
{
    struct gpu_state *g = &m->gs[i];

    rd->energy_read = 1;
    rd->energy_r = eerl_device_energy_mj(m->dev, g->idx, &rd->mj);
    if (rd->energy_r == EERL_ENOTSUP)
        g->energy_supported = 0;
    else if (rd->energy_r == 0)
        g->energy_supported = 1;
    /* A failed read is tried again at the next tick rather than an energy interval later. */
    g->want_energy = rd->energy_r != 0 && rd->energy_r != EERL_ENOTSUP;
}

/* Power, instantaneous where the backend has it, else averaged. */
static int read_power(eerl_meter *m, struct gpu_state *g, unsigned *mw)
{
    int r;

    if (g->power_instant != 0) {
        r = eerl_device_power_instant_mw(m->dev, g->idx, mw);
        if (r != EERL_ENOTSUP) {
            if (r == 0)
                g->power_instant = 1;
            return r;
        }
        g->power_instant = 0;
    }
    return eerl_device_power_mw(m->dev, g->idx, mw);
}

/* Folds one energy tick's CPU cost into the auto interval's estimate. */
static void note_read_cost(eerl_meter *m, double cpu_s)
{
    if (!(cpu_s >= 0))
        return;
    m->read_cost_s = m->read_cost_s > 0 ? 0.75 * m->read_cost_s + 0.25 * cpu_s : cpu_s;
}

/* A forced energy tick at the time of the newest sample, which read only power: read the
 * counters and settle that sample with them. */
static void upgrade_last_locked(eerl_meter *m)
{
    struct read *rd = m->rd;
    uint64_t k = m->count - 1;
    double c0 = read_clock(m);
    size_t i, todo = 0;

    for (i = 0; i < m->n; i++) {
        struct gpu_state *g = &m->gs[i];

        memset(&rd[i], 0, sizeof(rd[i]));
        rd[i].todo = !g->lost && g->energy_supported != 0 && g->anchor_seq != k;
        todo += rd[i].todo;
    }
    if (todo)
        (void)eerl__device_snapshot(m->dev); /* a failure fails the reads: flagged there */
    for (i = 0; i < m->n; i++) {
        if (!rd[i].todo)
            continue;
        read_energy(m, i, &rd[i]);
        rd[i].power_r = rd[i].energy_r == EERL_EGPULOST ? EERL_EGPULOST : 0;
        rd[i].mw = 0; /* unused: redo keeps the sample's power */
    }
    if (todo)
        note_read_cost(m, read_clock(m) - c0);
    pthread_mutex_lock(&m->lock);
    for (i = 0; i < m->n; i++)
        if (rd[i].todo)
            update_gpu(m, i, k, &rd[i], m->cum, 1);
    pthread_mutex_unlock(&m->lock);
}

/* force: read the counters whatever the energy interval says. */
static int tick_locked(eerl_meter *m, double now_s, int force)
{
    struct read *rd = m->rd;
    double read_cpu = 0;
    uint64_t k;
    size_t i;
    int energy;

    if (!isfinite(now_s))
        return EERL_EINVAL;
    /* m->count and the times only change under tick_lock, which we hold */
    if (m->count > 0) {
        double last = tat(m, m->count - 1);
        if (now_s < last)
            return EERL_EINVAL;
        if (now_s == last) {
            if (force && !m->last_was_energy) {
                upgrade_last_locked(m);
                m->last_was_energy = 1;
                m->last_energy_t = now_s;
                m->have_energy_t = 1;
            }
            return 0;
        }
    }
    energy = force || !m->have_energy_t ||
             now_s - m->last_energy_t >= energy_interval_locked(m) - 0.5 * m->interval_ms / 1000.0;
    (void)eerl__device_snapshot(m->dev); /* one instant's reads; a failure fails them: flagged */
    for (i = 0; i < m->n; i++) {
        struct gpu_state *g = &m->gs[i];

        memset(&rd[i], 0, sizeof(rd[i]));
        rd[i].energy_r = EERL_ENOTSUP;
        rd[i].power_r = EERL_ENOTSUP;
        if (g->lost)
            continue;
        if (g->energy_supported != 0 && (energy || g->want_energy)) {
            double c0 = read_clock(m);

            read_energy(m, i, &rd[i]);
            read_cpu += read_clock(m) - c0;
        }
        rd[i].power_r = read_power(m, g, &rd[i].mw);
        if (rd[i].energy_r == EERL_EGPULOST)
            rd[i].power_r = EERL_EGPULOST;
    }
    if (energy) {
        note_read_cost(m, read_cpu);
        m->last_energy_t = now_s;
        m->have_energy_t = 1;
    }
    m->last_was_energy = energy;

    pthread_mutex_lock(&m->lock);
    k = m->count;
    m->t[k % m->cap] = now_s;
    m->count++;
    for (i = 0; i < m->n; i++)
        update_gpu(m, i, k, &rd[i], m->cum, 0);
    pthread_mutex_unlock(&m->lock);
    return 0;
}

int eerl_meter_tick(eerl_meter *m, double now_s)
{
    int r;

    if (!m)
        return EERL_EINVAL;
    pthread_mutex_lock(&m->tick_lock);
    r = tick_locked(m, now_s, 0);
    pthread_mutex_unlock(&m->tick_lock);
    return r;
}

int eerl_meter_tick_energy(eerl_meter *m, double now_s)
{
    int r;

    if (!m)
        return EERL_EINVAL;
    pthread_mutex_lock(&m->tick_lock);
    r = tick_locked(m, now_s, 1);
    pthread_mutex_unlock(&m->tick_lock);
    return r;
}

/* A sample at t that reads nothing: a mark's, served by the thread. Its power is unknown (the
 * previous reading is held across it) and its energy is pending until the counter reading that
 * follows settles it. with_power: read every GPU's power now and give the sample that (no
 * counter read), for the sample right after a burst of marks. Under tick_lock; t after the
 * newest sample, and not the first sample. */
static void store_mark_sample_locked(eerl_meter *m, double t, int with_power)
{
    struct read *rd = m->rd;
    uint64_t k;
    size_t i;

    if (with_power)
        (void)eerl__device_snapshot(m->dev);
    for (i = 0; i < m->n; i++) {
        memset(&rd[i], 0, sizeof(rd[i]));
        rd[i].energy_r = EERL_ENOTSUP;
        rd[i].power_r = EERL_ENOTSUP;
        if (with_power && !m->gs[i].lost)
            rd[i].power_r = read_power(m, &m->gs[i], &rd[i].mw);
        else
            rd[i].mark_only = 1;
    }
    m->last_was_energy = 0;
    pthread_mutex_lock(&m->lock);
    k = m->count;
    m->t[k % m->cap] = t;
    m->count++;
    for (i = 0; i < m->n; i++)
        update_gpu(m, i, k, &rd[i], m->cum, 0);
    pthread_mutex_unlock(&m->lock);
}

int eerl__meter_mark_sample(eerl_meter *m, double t)
{
    int r = EERL_EINVAL;

    if (!m || !isfinite(t))
        return EERL_EINVAL;
    pthread_mutex_lock(&m->tick_lock);
    if (m->count > 0 && t > tat(m, m->count - 1)) {
        store_mark_sample_locked(m, t, 0);
        r = 0;
    }
    pthread_mutex_unlock(&m->tick_lock);
    return r;
}

/* A tick at the meter's clock, read under the tick lock. */
static int tick_clock(eerl_meter *m, int force, double *ret_now_s)
{
    double now;
    int r;

    if (!m)
        return EERL_EINVAL;
    pthread_mutex_lock(&m->tick_lock);
    now = m->clock(m->clock_ctx);
    r = tick_locked(m, now, force);
    pthread_mutex_unlock(&m->tick_lock);
    if (r == 0 && ret_now_s)
        *ret_now_s = now;
    return r;
}

/* A forked child's copy of a meter whose thread runs in the parent (see "Fork" above). */
static int thread_elsewhere(const eerl_meter *m)
{
    return m->pid != getpid() && m->running;
}

int eerl_meter_mark(eerl_meter *m, double *ret_now_s)
{
    double t;
    int r;

    if (!m)
        return EERL_EINVAL;
    if (thread_elsewhere(m))
        return EERL_ESTATE;
    pthread_mutex_lock(&m->run_lock);
    if (m->serving) {
        /* The thread reads the counters for it: take the time, queue it, wake the thread. */
        t = m->clock(m->clock_ctx);
        if (!isfinite(t)) {
            pthread_mutex_unlock(&m->run_lock);
            return EERL_EINVAL;
        }
        m->mark_last_w = eerl_clock_monotonic(NULL);
        if (m->n_markq == 0)
            m->mark_first_w = m->mark_last_w;
        if (m->n_markq < MARKQ_CAP)
            m->markq[m->n_markq++] = t;
        else
            m->markq[MARKQ_CAP - 1] = t;
        m->mark_seq++;
        m->n_marks++;
        pthread_cond_signal(&m->run_cond);
        pthread_mutex_unlock(&m->run_lock);
        if (ret_now_s)
            *ret_now_s = t;
        return 0;
    }
    pthread_mutex_unlock(&m->run_lock);
    r = tick_clock(m, 1, ret_now_s);
    if (r == 0) {
        pthread_mutex_lock(&m->run_lock);
        m->n_marks++;
        m->n_mark_reads++;
        pthread_mutex_unlock(&m->run_lock);
    }
    return r;
}

int eerl_meter_tick_now(eerl_meter *m, double *ret_now_s)
{
    return eerl_meter_mark(m, ret_now_s);
}

/* Waits until every mark made so far whose time may be at or before t1 is served (a counter
 * reading after it is stored). Returns at once without the thread or queued marks. */
static void wait_marks(eerl_meter *m, double t1)
{
    uint64_t want;

    if (thread_elsewhere(m))
        return;
    pthread_mutex_lock(&m->run_lock);
    want = m->mark_seq;
    if (m->served_seq < want && t1 > m->served_t) {
        m->waiters++;
        pthread_cond_signal(&m->run_cond);
        while (m->served_seq < want && t1 > m->served_t)
            pthread_cond_wait(&m->served_cond, &m->run_lock);
        m->waiters--;
    }
    pthread_mutex_unlock(&m->run_lock);
}

/* ---- sampler thread ---------------------------------------------------------------------- */

static struct timespec to_timespec(double s)
{
    struct timespec ts;

    ts.tv_sec = (time_t)s;
    ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    if (ts.tv_nsec < 0)
        ts.tv_nsec = 0;
    return ts;
}

/* Serves the queued marks: a sample at each one's time, then one tick at now that reads the
 * counters. Marks already behind the last served reading need none. Called and returns with
 * run_lock held; drops it for the device reads. */
static void serve_marks(eerl_meter *m)
{
    double ts[MARKQ_CAP], now = 0;
    size_t n = m->n_markq, i;
    uint64_t cover = m->mark_seq;
    int need = 0, stored = 0, r;

    memcpy(ts, m->markq, n * sizeof(ts[0]));
    m->n_markq = 0;
    for (i = 0; i < n; i++)
        need |= ts[i] > m->served_t;
    if (need) {
        pthread_mutex_unlock(&m->run_lock);
        pthread_mutex_lock(&m->tick_lock);
        for (i = 0; i < n; i++)
            if (m->count > 0 && ts[i] > tat(m, m->count - 1)) {
                store_mark_sample_locked(m, ts[i], 0);
                stored = 1;
            }
        /* Right after the last mark: the power read now (before the counters, which take
         * milliseconds per GPU), so the time between the mark and the reading integrates what
         * the GPUs draw after the boundary rather than a trapezoid from the power before it. */
        now = m->clock(m->clock_ctx);
        if (stored) {
            double t_last = tat(m, m->count - 1), tb = t_last + 0.5 * (now - t_last);

            if (tb > t_last + 1e-6)
                tb = t_last + 1e-6;
            if (tb > t_last && tb < now)
                store_mark_sample_locked(m, tb, 1);
        }
        now = m->clock(m->clock_ctx);
        r = tick_locked(m, now, 1);
        pthread_mutex_unlock(&m->tick_lock);
        pthread_mutex_lock(&m->run_lock);
        if (r == 0 && now > m->served_t)
            m->served_t = now;
        m->n_mark_reads++;
    }
    if (cover > m->served_seq)
        m->served_seq = cover;
    pthread_cond_broadcast(&m->served_cond);
}

static void *sampler_main(void *arg)
{
    eerl_meter *m = arg;
    double period = m->interval_ms / 1000.0;
    double next = eerl_clock_monotonic(NULL);

    pthread_mutex_lock(&m->run_lock);
    for (;;) {
        double now = eerl_clock_monotonic(NULL), wake = next;
        int tick_due = now >= next;

        if (m->served_seq < m->mark_seq && m->n_markq > 0) {
            /* A burst of marks is served once it has been quiet for mark_quiet_s, at once when
             * a query waits for it or the thread stops, and at the latest
             * EERL_METER_MARK_WAIT_MAX_S (or 5 quiet periods) after its first mark; a scheduled
             * tick that falls due meanwhile is this reading. */
            double due = m->mark_last_w + m->mark_quiet_s,
                   cap = m->mark_first_w + (5 * m->mark_quiet_s > EERL_METER_MARK_WAIT_MAX_S
                                                ? 5 * m->mark_quiet_s
                                                : EERL_METER_MARK_WAIT_MAX_S);

            if (cap < due)
                due = cap;
            if (m->stop_flag || m->waiters > 0 || now >= due || tick_due) {
                serve_marks(m);
                if (tick_due)
                    next += period;
                goto reschedule;
            }
            if (due < wake)
                wake = due;
        }
        if (m->stop_flag)
            break;
        if (tick_due) {
            pthread_mutex_unlock(&m->run_lock);
            /* Errors here are programming errors (time going back, no memory); the next tick
             * tries again, and per-GPU failures are in the samples' flags. */
            (void)tick_clock(m, 0, NULL);
            pthread_mutex_lock(&m->run_lock);
            next += period;
            goto reschedule;
        }
        {
            struct timespec tsw = to_timespec(wake);

            (void)pthread_cond_timedwait(&m->run_cond, &m->run_lock, &tsw);
        }
        continue;
    reschedule:
        now = eerl_clock_monotonic(NULL);
        if (next < now) /* late (suspended, overloaded): keep the schedule, skip missed slots */
            next += ceil((now - next) / period) * period;
    }
    pthread_mutex_unlock(&m->run_lock);
    return NULL;
}

int eerl_meter_start(eerl_meter *m)
{
    sigset_t all, old;
    int r = 0;

    if (!m)
        return EERL_EINVAL;
    pthread_mutex_lock(&m->run_lock);
    if (m->running) {
        pthread_mutex_unlock(&m->run_lock);
        return EERL_ESTATE;
    }
    /* The first sample before the thread: a mark made right after start is never before it. */
    if (eerl_meter_sample_count(m) == 0)
        (void)tick_clock(m, 0, NULL);
    m->stop_flag = 0;
    /* The thread inherits this mask: signals go to the caller's threads, never to the sampler. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    if (pthread_create(&m->thread, NULL, sampler_main, m) != 0)
        r = EERL_ESYS;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (r == 0) {
        m->running = 1;
        /* On real time only: an injected clock is virtual time (a simulation, a test moving
         * time itself), where a reading taken "right after" a mark means nothing, so there a
         * mark reads on the caller's thread at the caller's time, as without the thread. */
        m->serving = m->clock == eerl_clock_monotonic;
    }
    pthread_mutex_unlock(&m->run_lock);
    return r;
}

int eerl_meter_stop(eerl_meter *m)
{
    if (!m)
        return EERL_EINVAL;
    if (thread_elsewhere(m)) {
        m->running = m->serving = 0;
        return 0;
    }
    pthread_mutex_lock(&m->run_lock);
    if (!m->running) {
        pthread_mutex_unlock(&m->run_lock);
        return EERL_ESTATE;
    }
    /* From here marks read on the caller's thread; the thread serves the ones queued, then
     * exits. */
    m->stop_flag = 1;
    m->serving = 0;
    pthread_cond_broadcast(&m->run_cond);
    pthread_mutex_unlock(&m->run_lock);
    pthread_join(m->thread, NULL);
    pthread_mutex_lock(&m->run_lock);
    m->running = 0;
    pthread_mutex_unlock(&m->run_lock);
    return 0;
}

/* ---- queries ----------------------------------------------------------------------------- */

/* The last sample with t <= x (x must be >= the oldest kept sample's time). */
static uint64_t find_le(const eerl_meter *m, double x)
{
    uint64_t lo = oldest_seq(m), hi = m->count - 1;

    while (lo < hi) {
        uint64_t mid = lo + (hi - lo + 1) / 2;

        if (tat(m, mid) <= x)
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

static struct at locate(const eerl_meter *m, double x)
{
    uint64_t last = m->count - 1;
    struct at a = {oldest_seq(m), 0, 0, 0, 0};

    if (x <= tat(m, a.j))
        return a;
    if (x >= tat(m, last)) {
        a.j = last;
        a.extra = x - tat(m, last);
        return a;
    }
    a.j = find_le(m, x);
    a.between = 1;
    a.dx = x - tat(m, a.j);
    a.dt = tat(m, a.j + 1) - tat(m, a.j);
    return a;
}

/* Cumulative energy of GPU gi at a located time, interpolated; *flags gets PARTIAL on
 * extrapolation. */
static double acc_at(eerl_meter *m, size_t gi, const struct at *a, unsigned *flags)
{
    const struct sample_gpu *sj = sgat(m, a->j, gi), *sn;

    if (a->extra > 0) {
        double extra = 0;

        *flags |= EERL_METER_PARTIAL;
        if (!(sj->flags & EERL_METER_LOST) && sj->power_w >= 0)
            extra = sj->power_w * a->extra;
        return sj->acc + extra;
    }
    if (!a->between)
        return sj->acc;
    sn = sgat(m, a->j + 1, gi);
    return sj->acc + (sn->acc - sj->acc) * a->dx / a->dt;
}

/* Per GPU of a query (any of the arrays may be NULL) and the totals into *out. pos: the GPUs'
 * positions in the meter, NULL for every metered GPU in order. */
static int energy_locked(eerl_meter *m, double t0, double t1, const size_t *pos, size_t n,
                         eerl_meter_reading *out, double *joules, double *peak_w, unsigned *gflags)
{
    uint64_t lo, s;
    struct at a0, a1;
    size_t i;

    if (m->count == 0)
        return EERL_ENODATA;
    lo = oldest_seq(m);
    if (lo > 0 && t0 < tat(m, lo))
        return EERL_ENODATA; /* older than the history kept */
    if (t1 < tat(m, lo) || (t1 == tat(m, lo) && t0 < t1))
        return EERL_ENODATA; /* all before the first sample */
    memset(out, 0, sizeof(*out));
    out->t0 = t0;
    out->t1 = t1;
    out->n_gpus = n;
    a0 = locate(m, t0);
    a1 = locate(m, t1);
    for (i = 0; i < n; i++) {
        size_t gi = pos ? pos[i] : i;
        unsigned fl = 0;
        double e0, e1;

        if (t0 < tat(m, lo))
            fl |= EERL_METER_PARTIAL;
        e0 = acc_at(m, gi, &a0, &fl);
        e1 = acc_at(m, gi, &a1, &fl);
        joules[i] = e1 - e0;
        gflags[i] = fl;
        peak_w[i] = 0;
    }
    /* Flags of every sample interval (t_{s-1}, t_s] that overlaps (t0, t1), and the peaks of the
     * samples inside [t0, t1]. */
    for (s = t0 <= tat(m, lo) ? lo : find_le(m, t0); s < m->count; s++) {
        const struct sample_gpu *row = &m->sg[(size_t)(s % m->cap) * m->n];
        double ts = tat(m, s), sum = 0;
        int any = 0, inside = ts >= t0 && ts <= t1;
        int overlaps = ts > t0 && (s == lo || tat(m, s - 1) < t1);

        if (inside)
            out->n_samples++;
        if (overlaps || inside)
            for (i = 0; i < n; i++) {
                const struct sample_gpu *x = &row[pos ? pos[i] : i];

                if (overlaps)
                    gflags[i] |= x->flags;
                if (inside && x->power_w >= 0) {
                    if (x->power_w > peak_w[i])
                        peak_w[i] = x->power_w;
                    sum += x->power_w;
                    any = 1;
                }
            }
        if (any && sum > out->peak_total_w)
            out->peak_total_w = sum;
        if (ts >= t1)
            break; /* the first sample at or past t1 closes the last overlapping interval */
    }
    /* A GPU lost before the interval: the last sample says so even when no interval overlaps. */
    for (i = 0; i < n; i++) {
        size_t gi = pos ? pos[i] : i;

        if (t1 > tat(m, m->count - 1) && (sgat(m, m->count - 1, gi)->flags & EERL_METER_LOST))
            gflags[i] |= EERL_METER_LOST;
        out->total_joules += joules[i];
        out->flags |= gflags[i];
    }
    return 0;
}

/* The positions of gpus[0..n-1] in the meter (EERL_ENODEV for one it does not sample);
 * gpus NULL: every metered GPU, *ret_pos NULL. */
static int positions(eerl_meter *m, const unsigned *gpus, size_t n, size_t **ret_pos)
{
    size_t *pos, i;

    *ret_pos = NULL;
    if (!gpus)
        return 0;
    pos = malloc(n * sizeof(*pos));
    if (!pos)
        return EERL_ENOMEM;
    for (i = 0; i < n; i++) {
        if (gpus[i] >= m->n_pos || m->pos_of[gpus[i]] == SIZE_MAX) {
            free(pos);
            return EERL_ENODEV;
        }
        pos[i] = m->pos_of[gpus[i]];
    }
    *ret_pos = pos;
    return 0;
}

static int query(eerl_meter *m, double t0, double t1, const unsigned *gpus, size_t n,
                 double *joules, double *peak_w, unsigned *gflags, eerl_meter_reading *ret)
{
    size_t *pos = NULL, i;
    double *sj = NULL, *sp = NULL, *pj = joules, *pp = peak_w;
    unsigned *sf = NULL, *pf = gflags;
    eerl_meter_reading *out = NULL;
    int r;

    if (!m || !ret || n == 0 || n > m->n || !isfinite(t0) || !isfinite(t1) || t0 > t1)
        return EERL_EINVAL;
    if ((r = positions(m, gpus, n, &pos)) < 0)
        return r;
    /* Arrays the caller did not give: scratch for the query. */
    if (!pj)
        pj = sj = malloc(n * sizeof(*sj));
    if (!pp)
        pp = sp = malloc(n * sizeof(*sp));
    if (!pf)
        pf = sf = malloc(n * sizeof(*sf));
    out = malloc(sizeof(*out));
    if (!pj || !pp || !pf || !out) {
        r = EERL_ENOMEM;
        goto out;
    }
    wait_marks(m, t1);
    pthread_mutex_lock(&m->lock);
    r = energy_locked(m, t0, t1, pos, n, out, pj, pp, pf);
    pthread_mutex_unlock(&m->lock);
    if (r == 0) {
        /* The reading's own arrays: the first EERL_METER_READING_GPUS GPUs of the query. */
        for (i = 0; i < n && i < EERL_METER_READING_GPUS; i++) {
            out->gpu[i] = m->gs[pos ? pos[i] : i].idx;
            out->joules[i] = pj[i];
            out->peak_w[i] = pp[i];
            out->gpu_flags[i] = pf[i];
        }
        *ret = *out;
    }
out:
    free(out);
    free(sj);
    free(sp);
    free(sf);
    free(pos);
    return r;
}

int eerl_meter_energy_gpus(eerl_meter *m, double t0, double t1, const unsigned *gpus, size_t n,
                           eerl_meter_reading *ret)
{
    if (!gpus)
        return EERL_EINVAL;
    return query(m, t0, t1, gpus, n, NULL, NULL, NULL, ret);
}

int eerl_meter_energy(eerl_meter *m, double t0, double t1, eerl_meter_reading *ret)
{
    if (!m)
        return EERL_EINVAL;
    return query(m, t0, t1, NULL, m->n, NULL, NULL, NULL, ret);
}

int eerl_meter_energy_each(eerl_meter *m, double t0, double t1, const unsigned *gpus, size_t n,
                           double *ret_joules, double *ret_peak_w, unsigned *ret_flags,
                           eerl_meter_reading *ret)
{
    if (!m || (!gpus && n != m->n))
        return EERL_EINVAL;
    return query(m, t0, t1, gpus, n, ret_joules, ret_peak_w, ret_flags, ret);
}

int eerl_meter_last_time(eerl_meter *m, double *ret_t)
{
    int r = 0;

    if (!m || !ret_t)
        return EERL_EINVAL;
    pthread_mutex_lock(&m->lock);
    if (m->count == 0)
        r = EERL_ENODATA;
    else
        *ret_t = tat(m, m->count - 1);
    pthread_mutex_unlock(&m->lock);
    return r;
}

size_t eerl_meter_sample_count(eerl_meter *m)
{
    size_t c;

    if (!m)
        return 0;
    pthread_mutex_lock(&m->lock);
    c = (size_t)m->count;
    pthread_mutex_unlock(&m->lock);
    return c;
}

int eerl_meter_flags_str(unsigned flags, char *buf, size_t len)
{
    static const struct {
        unsigned bit;
        const char *name;
    } names[] = {
        {EERL_METER_RESET, "reset"},     {EERL_METER_STUCK, "stuck"},
        {EERL_METER_POWER, "power"},     {EERL_METER_LOST, "lost"},
        {EERL_METER_PARTIAL, "partial"}, {EERL_METER_MISSED, "missed"},
        {EERL_METER_SUSPECT, "suspect"},
    };
    size_t i, used = 0;

    if (buf && len)
        buf[0] = '\0';
    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (!(flags & names[i].bit))
            continue;
        if (buf && used < len)
            snprintf(buf + used, len - used, "%s%s", used ? "," : "", names[i].name);
        used += strlen(names[i].name) + (used ? 1 : 0);
    }
    return (int)used;
}

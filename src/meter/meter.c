/* The energy meter (include/eerl/meter.h): the object the library's users hold. It reads the
 * GPUs and feeds what it read to the counter model (counter.h: the ring and the per-GPU
 * bookkeeping), answers queries over the ring (query.h), and runs the sampler thread (sampler.h)
 * that ticks in real time and serves marks. Borrows the device handle; never changes a GPU
 * (clocks are the actuator's).
 *
 * Two rates: every tick reads power (instantaneous where the backend has it), the counters are
 * read only on "energy ticks" (every energy interval, and at marks), because on real drivers a
 * counter read costs a thousand times a power read. The reads of one instant, every part of
 * every GPU (counter, power, clock event reasons, power limit), are one device read
 * (eerl__device_read): a backend that reads GPUs elsewhere reads them all in one round trip
 * (eerld: one request; device/remote.c, the GPUs of other nodes: one snapshot), so a tick costs
 * one, not one per part and GPU.
 * Marks: without the sampler thread a mark is a tick that reads the counters, on the caller's
 * thread; while the thread runs on real time, it serves them (sampler.h).
 * Locks: tick_lock serializes ticks (device reads included); lock guards the ring. Order:
 * tick_lock, then lock. The sampler's run_lock may be held while tick_lock is taken (set_clock,
 * start), never the reverse.
 * Fork: the sampler thread, and whoever held a lock at the fork, stay in the parent. In a forked
 * child (pid differs from the creator's) stop only forgets the thread, free frees memory without
 * joining or destroying the inherited locks, and a mark while the parent's thread serves fails
 * with EERL_ESTATE instead of queueing for a thread that is not there. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "eerl/error.h"
#include "device/device_impl.h"
#include "meter/counter.h"
#include "meter/meter.h"
#include "meter/query.h"
#include "meter/sampler.h"

#define DEFAULT_HISTORY_S 3600.0

struct eerl_meter {
    eerl_device *dev;
    unsigned interval_ms;
    struct eerl__counter ring; /* under lock (its per-GPU read state: under tick_lock) */
    /* Position of device index i in the ring, or SIZE_MAX; pos_of[0..n_pos-1]. Read-only after
     * new. */
    size_t *pos_of;
    size_t n_pos;
    struct eerl__meter_read *rd;  /* n scratch reads for a tick (under tick_lock) */
    struct eerl__device_read *dr; /* n scratch device reads, GPU i's at i (under tick_lock) */

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
    pid_t pid; /* the creator: the locks' holders live in that process */
    struct eerl__sampler smp;
};

static double tat(const eerl_meter *m, uint64_t seq)
{
    return eerl__counter_t(&m->ring, seq);
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

static void op_tick(void *ctx);
static int op_prime(void *ctx);
static int op_read_marks(void *ctx, const double *ts, size_t n, double *ret_now);

static const struct eerl__sampler_ops sampler_ops = {op_tick, op_prime, op_read_marks};

/* Checks every index (leaving "GPU index 9 does not exist (...)" in the device's last error when
 * one does not) and returns the highest in *ret_top. */
static int check_gpus(eerl_device *dev, const unsigned *gpus, size_t n_gpus, unsigned *ret_top)
{
    unsigned top = 0;
    size_t i;

    for (i = 0; i < n_gpus; i++) {
        char name[EERL_DEVICE_NAME_MAX];

        if (eerl_device_name(dev, gpus[i], name, sizeof(name)) == EERL_ENODEV)
            return EERL_ENODEV;
        if (gpus[i] > top)
            top = gpus[i];
    }
    *ret_top = top;
    return 0;
}

int eerl_meter_new(eerl_device *dev, const unsigned *gpus, size_t n_gpus, unsigned interval_ms,
                   eerl_meter **ret_meter)
{
    eerl_meter *m = NULL;
    int r, have_ring = 0, have_locks = 0;
    size_t i, j;
    unsigned top = 0;

    if (!dev || !gpus || n_gpus == 0 || n_gpus > EERL_METER_GPUS_LIMIT || !ret_meter)
        return EERL_EINVAL;
    if (interval_ms == 0)
        interval_ms = EERL_METER_DEFAULT_INTERVAL_MS;
    if ((r = check_gpus(dev, gpus, n_gpus, &top)) < 0)
        return r;
    m = calloc(1, sizeof(*m));
    if (!m)
        return EERL_ENOMEM;
    m->dev = dev;
    m->pid = getpid();
    m->interval_ms = interval_ms;
    m->clock = eerl_clock_monotonic;
    m->energy_interval = EERL_METER_ENERGY_AUTO;
    /* Every index exists, so the table is at most the device's GPU count long. */
    m->n_pos = (size_t)top + 1;
    m->pos_of = malloc(m->n_pos * sizeof(*m->pos_of));
    m->rd = calloc(n_gpus, sizeof(*m->rd));
    m->dr = calloc(n_gpus, sizeof(*m->dr));
    if (!m->pos_of || !m->rd || !m->dr) {
        r = EERL_ENOMEM;
        goto fail;
    }
    r = eerl__counter_init(&m->ring, n_gpus, history_cap(DEFAULT_HISTORY_S, interval_ms));
    if (r < 0)
        goto fail;
    have_ring = 1;
    for (j = 0; j < m->n_pos; j++)
        m->pos_of[j] = SIZE_MAX;
    for (i = 0; i < n_gpus; i++) {
        if (m->pos_of[gpus[i]] != SIZE_MAX) {
            r = EERL_EINVAL; /* named twice */
            goto fail;
        }
        m->pos_of[gpus[i]] = i;
        m->ring.gs[i].idx = gpus[i];
    }
    if (pthread_mutex_init(&m->lock, NULL) != 0 || pthread_mutex_init(&m->tick_lock, NULL) != 0) {
        r = EERL_ESYS;
        goto fail;
    }
    have_locks = 1;
    r = eerl__sampler_init(&m->smp, interval_ms, &sampler_ops, m);
    if (r < 0)
        goto fail;
    *ret_meter = m;
    return 0;
fail:
    if (have_locks) {
        pthread_mutex_destroy(&m->lock);
        pthread_mutex_destroy(&m->tick_lock);
    }
    if (have_ring)
        eerl__counter_free(&m->ring);
    free(m->dr);
    free(m->rd);
    free(m->pos_of);
    free(m);
    return r;
}

void eerl_meter_free(eerl_meter *m)
{
    if (!m)
        return;
    eerl__sampler_destroy(&m->smp); /* stops the thread first */
    if (m->pid == getpid()) {       /* see "Fork" above */
        pthread_mutex_destroy(&m->lock);
        pthread_mutex_destroy(&m->tick_lock);
    }
    eerl__counter_free(&m->ring);
    free(m->dr);
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
    r = m->ring.count ? EERL_ESTATE
                      : eerl__counter_resize(&m->ring, history_cap(seconds, m->interval_ms));
    pthread_mutex_unlock(&m->lock);
    pthread_mutex_unlock(&m->tick_lock);
    return r;
}

struct clock_set {
    eerl_meter *m;
    eerl_clock_fn clock;
    void *clock_ctx;
};

/* Under the sampler's run_lock, with its thread stopped. */
static void set_clock_stopped(void *arg)
{
    struct clock_set *cs = arg;

    pthread_mutex_lock(&cs->m->tick_lock);
    cs->m->clock = cs->clock;
    cs->m->clock_ctx = cs->clock_ctx;
    pthread_mutex_unlock(&cs->m->tick_lock);
}

int eerl_meter_set_clock(eerl_meter *m, eerl_clock_fn clock, void *clock_ctx)
{
    struct clock_set cs = {m, clock, clock_ctx};

    if (!m || !clock)
        return EERL_EINVAL;
    return eerl__sampler_if_stopped(&m->smp, set_clock_stopped, &cs);
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
    eerl__sampler_set_quiet(&m->smp, seconds);
    return 0;
}

int eerl_meter_mark_stats(eerl_meter *m, uint64_t *ret_marks, uint64_t *ret_reads)
{
    if (!m)
        return EERL_EINVAL;
    eerl__sampler_stats(&m->smp, ret_marks, ret_reads);
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

/* What a tick asks of GPU i (0: nothing, a lost GPU): the counter where it is due (energy, or
 * the last read failed) and the GPU has one, power (instantaneous until the backend says it
 * has none), and its clock event reasons and enforced power limit (what it decided about its
 * own speed, cheap queries of the driver's state) until the backend says it has none. */
static unsigned tick_wants(const eerl_meter *m, size_t i, int energy)
{
    const struct eerl__meter_gpu *g = &m->ring.gs[i];
    unsigned w;

    if (g->lost)
        return 0;
    w = g->power_instant != 0 ? EERL__READ_POWER_INSTANT : EERL__READ_POWER;
    if (g->energy_supported != 0 && (energy || g->want_energy))
        w |= EERL__READ_ENERGY;
    if (g->events_supported != 0)
        w |= EERL__READ_REASONS;
    if (g->limit_supported != 0)
        w |= EERL__READ_LIMIT;
    return w;
}

/* The counter part of GPU i's read into rd, and what it says of the GPU's counter. */
static void take_energy(eerl_meter *m, size_t i, const struct eerl__device_read *x,
                        struct eerl__meter_read *rd)
{
    struct eerl__meter_gpu *g = &m->ring.gs[i];

    rd->energy_read = 1;
    rd->energy_r = x->energy_r;
    rd->mj = x->energy_mj;
    if (rd->energy_r == EERL_ENOTSUP)
        g->energy_supported = 0;
    else if (rd->energy_r == 0)
        g->energy_supported = 1;
    /* A failed read is tried again at the next tick rather than an energy interval later. */
    g->want_energy = rd->energy_r != 0 && rd->energy_r != EERL_ENOTSUP;
}

/* The power part: instantaneous where the backend has it, else averaged. */
static void take_power(struct eerl__meter_gpu *g, const struct eerl__device_read *x,
                       struct eerl__meter_read *rd)
{
    rd->power_r = x->power_r;
    rd->mw = x->power_mw;
    if (x->power_instant >= 0)
        g->power_instant = x->power_instant;
}

/* The reasons and the limit: a backend or driver without them is asked once. Read only. */
static void take_state(struct eerl__meter_gpu *g, const struct eerl__device_read *x,
                       struct eerl__meter_read *rd)
{
    if (x->want & EERL__READ_REASONS) {
        if (x->reasons_r == 0) {
            g->events_supported = 1;
            rd->events_read = 1;
            rd->events = (unsigned)(x->reasons & 0xffffffffu);
        } else if (x->reasons_r == EERL_ENOTSUP) {
            g->events_supported = 0;
        }
    }
    if (x->want & EERL__READ_LIMIT) {
        rd->limit_mw = x->limit_r == 0 ? x->limit_mw : 0;
        if (x->limit_r == 0)
            g->limit_supported = 1;
        else if (x->limit_r == EERL_ENOTSUP)
            g->limit_supported = 0;
    }
}

/* One device read of every GPU with m->dr[i].want set (GPU i's at i). Returns how many were
 * asked anything. */
static size_t read_device(eerl_meter *m)
{
    size_t i, asked = 0;

    for (i = 0; i < m->ring.n; i++) {
        m->dr[i].gpu = m->ring.gs[i].idx;
        asked += m->dr[i].want != 0;
    }
    if (asked)
        (void)eerl__device_read(m->dev, m->dr, m->ring.n); /* failures: in each part's *_r */
    return asked;
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
    struct eerl__meter_read *rd = m->rd;
    uint64_t k = m->ring.count - 1;
    double c0 = read_clock(m);
    size_t i;

    for (i = 0; i < m->ring.n; i++) {
        struct eerl__meter_gpu *g = &m->ring.gs[i];

        memset(&rd[i], 0, sizeof(rd[i]));
        rd[i].todo = !g->lost && g->energy_supported != 0 && g->anchor_seq != k;
        m->dr[i].want = rd[i].todo ? EERL__READ_ENERGY : 0;
    }
    if (read_device(m) > 0)
        note_read_cost(m, read_clock(m) - c0);
    for (i = 0; i < m->ring.n; i++) {
        if (!rd[i].todo)
            continue;
        take_energy(m, i, &m->dr[i], &rd[i]);
        rd[i].power_r = rd[i].energy_r == EERL_EGPULOST ? EERL_EGPULOST : 0;
        rd[i].mw = 0; /* unused: redo keeps the sample's power */
    }
    pthread_mutex_lock(&m->lock);
    eerl__counter_redo(&m->ring, rd);
    pthread_mutex_unlock(&m->lock);
}

/* force: read the counters whatever the energy interval says. */
static int tick_locked(eerl_meter *m, double now_s, int force)
{
    struct eerl__meter_read *rd = m->rd;
    double read_cpu = 0;
    size_t i;
    int energy;

    if (!isfinite(now_s))
        return EERL_EINVAL;
    /* m->ring.count and the times only change under tick_lock, which we hold */
    if (m->ring.count > 0) {
        double last = tat(m, m->ring.count - 1);
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
    for (i = 0; i < m->ring.n; i++)
        m->dr[i].want = tick_wants(m, i, energy);
    /* The auto energy interval times the whole read of an energy tick: its power and state reads
     * cost microseconds against a counter read's milliseconds. */
    read_cpu = read_clock(m);
    (void)read_device(m); /* one instant's reads; a failure fails them: flagged */
    read_cpu = read_clock(m) - read_cpu;
    for (i = 0; i < m->ring.n; i++) {
        const struct eerl__device_read *x = &m->dr[i];

        memset(&rd[i], 0, sizeof(rd[i]));
        rd[i].energy_r = EERL_ENOTSUP;
        rd[i].power_r = EERL_ENOTSUP;
        if (!x->want)
            continue; /* lost */
        if (x->want & EERL__READ_ENERGY)
            take_energy(m, i, x, &rd[i]);
        take_power(&m->ring.gs[i], x, &rd[i]);
        if (rd[i].energy_r == EERL_EGPULOST)
            rd[i].power_r = EERL_EGPULOST;
        else
            take_state(&m->ring.gs[i], x, &rd[i]);
    }
    if (energy) {
        note_read_cost(m, read_cpu);
        m->last_energy_t = now_s;
        m->have_energy_t = 1;
    }
    m->last_was_energy = energy;

    pthread_mutex_lock(&m->lock);
    eerl__counter_store(&m->ring, now_s, rd);
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
    struct eerl__meter_read *rd = m->rd;
    size_t i;

    for (i = 0; i < m->ring.n; i++) {
        struct eerl__meter_gpu *g = &m->ring.gs[i];

        m->dr[i].want = !with_power || g->lost  ? 0
                        : g->power_instant != 0 ? EERL__READ_POWER_INSTANT
                                                : EERL__READ_POWER;
    }
    (void)read_device(m);
    for (i = 0; i < m->ring.n; i++) {
        memset(&rd[i], 0, sizeof(rd[i]));
        rd[i].energy_r = EERL_ENOTSUP;
        rd[i].power_r = EERL_ENOTSUP;
        if (m->dr[i].want)
            take_power(&m->ring.gs[i], &m->dr[i], &rd[i]);
        else
            rd[i].mark_only = 1;
    }
    m->last_was_energy = 0;
    pthread_mutex_lock(&m->lock);
    eerl__counter_store(&m->ring, t, rd);
    pthread_mutex_unlock(&m->lock);
}

int eerl__meter_mark_sample(eerl_meter *m, double t)
{
    int r = EERL_EINVAL;

    if (!m || !isfinite(t))
        return EERL_EINVAL;
    pthread_mutex_lock(&m->tick_lock);
    if (m->ring.count > 0 && t > tat(m, m->ring.count - 1)) {
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

int eerl_meter_mark(eerl_meter *m, double *ret_now_s)
{
    double t;
    int r;

    if (!m)
        return EERL_EINVAL;
    if (eerl__sampler_elsewhere(&m->smp))
        return EERL_ESTATE;
    r = eerl__sampler_mark(&m->smp, m->clock, m->clock_ctx, &t);
    if (r != 0) {
        if (r > 0 && ret_now_s)
            *ret_now_s = t;
        return r > 0 ? 0 : r;
    }
    r = tick_clock(m, 1, ret_now_s);
    if (r == 0)
        eerl__sampler_count_read(&m->smp);
    return r;
}

int eerl_meter_tick_now(eerl_meter *m, double *ret_now_s)
{
    return eerl_meter_mark(m, ret_now_s);
}

/* ---- the sampler thread's ops (sampler.h) ------------------------------------------------- */

static void op_tick(void *ctx)
{
    (void)tick_clock(ctx, 0, NULL);
}

static int op_prime(void *ctx)
{
    eerl_meter *m = ctx;

    if (eerl_meter_sample_count(m) == 0)
        (void)tick_clock(m, 0, NULL);
    /* On real time only: an injected clock is virtual time (a simulation, a test moving time
     * itself), where a reading taken "right after" a mark means nothing, so there a mark reads
     * on the caller's thread at the caller's time, as without the thread. */
    return m->clock == eerl_clock_monotonic;
}

/* A sample at each mark's time ts[0..n-1] (those after the newest sample), then one tick at now
 * that reads the counters. */
static int op_read_marks(void *ctx, const double *ts, size_t n, double *ret_now)
{
    eerl_meter *m = ctx;
    double now;
    size_t i;
    int stored = 0, r;

    pthread_mutex_lock(&m->tick_lock);
    for (i = 0; i < n; i++)
        if (m->ring.count > 0 && ts[i] > tat(m, m->ring.count - 1)) {
            store_mark_sample_locked(m, ts[i], 0);
            stored = 1;
        }
    /* Right after the last mark: the power read now (before the counters, which take
     * milliseconds per GPU), so the time between the mark and the reading integrates what the
     * GPUs draw after the boundary rather than a trapezoid from the power before it. */
    now = m->clock(m->clock_ctx);
    if (stored) {
        double t_last = tat(m, m->ring.count - 1), tb = t_last + 0.5 * (now - t_last);

        if (tb > t_last + 1e-6)
            tb = t_last + 1e-6;
        if (tb > t_last && tb < now)
            store_mark_sample_locked(m, tb, 1);
    }
    now = m->clock(m->clock_ctx);
    r = tick_locked(m, now, 1);
    pthread_mutex_unlock(&m->tick_lock);
    *ret_now = now;
    return r;
}

int eerl_meter_start(eerl_meter *m)
{
    if (!m)
        return EERL_EINVAL;
    return eerl__sampler_start(&m->smp);
}

int eerl_meter_stop(eerl_meter *m)
{
    if (!m)
        return EERL_EINVAL;
    return eerl__sampler_stop(&m->smp);
}

/* ---- queries ----------------------------------------------------------------------------- */

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

    if (!m || !ret || n == 0 || n > m->ring.n || !isfinite(t0) || !isfinite(t1) || t0 > t1)
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
    eerl__sampler_wait(&m->smp, t1);
    pthread_mutex_lock(&m->lock);
    r = eerl__query_energy(&m->ring, t0, t1, pos, n, out, pj, pp, pf);
    pthread_mutex_unlock(&m->lock);
    if (r == 0) {
        /* The reading's own arrays: the first EERL_METER_READING_GPUS GPUs of the query. */
        for (i = 0; i < n && i < EERL_METER_READING_GPUS; i++) {
            out->gpu[i] = m->ring.gs[pos ? pos[i] : i].idx;
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
    return query(m, t0, t1, NULL, m->ring.n, NULL, NULL, NULL, ret);
}

int eerl_meter_energy_each(eerl_meter *m, double t0, double t1, const unsigned *gpus, size_t n,
                           double *ret_joules, double *ret_peak_w, unsigned *ret_flags,
                           eerl_meter_reading *ret)
{
    if (!m || (!gpus && n != m->ring.n))
        return EERL_EINVAL;
    return query(m, t0, t1, gpus, n, ret_joules, ret_peak_w, ret_flags, ret);
}

int eerl_meter_last_time(eerl_meter *m, double *ret_t)
{
    int r = 0;

    if (!m || !ret_t)
        return EERL_EINVAL;
    pthread_mutex_lock(&m->lock);
    if (m->ring.count == 0)
        r = EERL_ENODATA;
    else
        *ret_t = tat(m, m->ring.count - 1);
    pthread_mutex_unlock(&m->lock);
    return r;
}

size_t eerl_meter_sample_count(eerl_meter *m)
{
    size_t c;

    if (!m)
        return 0;
    pthread_mutex_lock(&m->lock);
    c = (size_t)m->ring.count;
    pthread_mutex_unlock(&m->lock);
    return c;
}

int eerl_meter_flags_str(unsigned flags, char *buf, size_t len)
{
    static const struct {
        unsigned bit;
        const char *name;
    } names[] = {
        {EERL_METER_RESET, "reset"},       {EERL_METER_STUCK, "stuck"},
        {EERL_METER_POWER, "power"},       {EERL_METER_LOST, "lost"},
        {EERL_METER_PARTIAL, "partial"},   {EERL_METER_MISSED, "missed"},
        {EERL_METER_SUSPECT, "suspect"},   {EERL_METER_SLOWED, "slowed"},
        {EERL_METER_LIMIT, "power_limit"},
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

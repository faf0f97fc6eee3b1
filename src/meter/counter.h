/* The meter's counter model: the ring of samples and the per-GPU bookkeeping that turns raw
 * counter and power readings into a continuous cumulative energy. Pure: no device, no thread,
 * no lock, no clock; the caller reads the GPUs (meter.c), serializes calls, and hands each
 * sample's readings in. A test drives it directly with made-up readings.
 *
 * Model: for each GPU the ring holds acc(t_k), the cumulative energy in joules since the first
 * sample, at every sample time t_k. acc only ever follows the counter's deltas, so a driver reset,
 * a stuck counter or a missing counter cannot make it jump or go backwards. The energy between two
 * times is acc(t1) - acc(t0), with acc interpolated linearly between samples (query.h).
 *
 * Per GPU, the "anchor" is the last sample whose acc is settled (backed by a good reading). When
 * a sample cannot be settled (a power-only tick, the counter has not moved yet, or a read
 * failed), it is pending: it gets a provisional acc (the anchor's plus integrated power, when
 * power is known) and is rewritten when the next good reading settles the stretch: the counter's
 * energy shared out in proportion to integrated power (linearly in time when there is no power
 * or it integrates to 0), or integrated power itself when the counter turns out stuck. A sample
 * that read nothing (a mark's, mark_only) is pending until the next counter reading. Owns the
 * ring and the per-GPU state. */
#ifndef EERL__METER_COUNTER_H
#define EERL__METER_COUNTER_H

#include <stddef.h>
#include <stdint.h>

/* What one tick read from one GPU. */
struct eerl__meter_read {
    int todo;        /* eerl__counter_redo: this GPU's counter was read */
    int mark_only;   /* a mark's sample: nothing was read (a later reading settles it) */
    int energy_read; /* the counter was read this tick (else energy_r is EERL_ENOTSUP) */
    int energy_r;    /* 0, or the error of the energy read (not attempted: EERL_ENOTSUP) */
    uint64_t mj;
    int power_r; /* 0, or the error of the power read */
    unsigned mw;
    int events_read;   /* the clock event reasons were read this tick */
    unsigned events;   /* EERL_THROTTLE_* bits (those that fit 32 bits: all NVML defines) */
    unsigned limit_mw; /* the enforced power limit read this tick; 0 when not read */
};

struct eerl__meter_sample {
    double acc;        /* cumulative joules at this sample */
    double power_w;    /* power read at this sample; < 0 when none */
    unsigned flags;    /* EERL_METER_* for the interval ending at this sample */
    int events_read;   /* events holds what this sample read */
    unsigned events;   /* EERL_THROTTLE_* bits at this sample */
    unsigned limit_mw; /* the enforced power limit in force, as last read; 0 unknown */
};

struct eerl__meter_gpu {
    unsigned idx;         /* the device index (the model does not use it) */
    int events_supported; /* -1 not known yet, 0 no, 1 yes: the clock event reasons */
    int limit_supported;  /* -1 not known yet, 0 no, 1 yes: the enforced power limit */
    unsigned limit_mw;    /* the last limit read, held across ticks that do not read it */
    int energy_supported; /* -1 not known yet, 0 no (power integration), 1 yes: set by the reader */
    int power_instant;    /* -1 not known yet, 0 no (averaged power), 1 yes: set by the reader */
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

struct eerl__counter {
    size_t n; /* GPUs */
    struct eerl__meter_gpu *gs;
    /* Ring: sample seq s lives in slot s % cap; seqs [count - min(count, cap), count) are kept. */
    size_t cap;
    uint64_t count;
    double *t;
    struct eerl__meter_sample *sg; /* cap * n, slot-major */
    double *cum;                   /* cap + 2 scratch doubles */
};

/* n GPUs (their idx left 0), a ring of cap samples. EERL_ENOMEM, or 0. */
int eerl__counter_init(struct eerl__counter *c, size_t n, size_t cap);
void eerl__counter_free(struct eerl__counter *c);

/* A new ring of cap samples, the old one dropped (only before the first sample makes sense). */
int eerl__counter_resize(struct eerl__counter *c, size_t cap);

/* Appends a sample at time t (after the newest: the caller checks) with what each GPU read,
 * rd[0..n-1], and brings every GPU's bookkeeping up to it. */
void eerl__counter_store(struct eerl__counter *c, double t, const struct eerl__meter_read *rd);

/* The newest sample read only power: adds the counter readings of the GPUs with rd[i].todo (its
 * power stays). */
void eerl__counter_redo(struct eerl__counter *c, const struct eerl__meter_read *rd);

static inline struct eerl__meter_sample *eerl__counter_at(const struct eerl__counter *c,
                                                          uint64_t seq, size_t gi)
{
    return &c->sg[(size_t)(seq % c->cap) * c->n + gi];
}

static inline double eerl__counter_t(const struct eerl__counter *c, uint64_t seq)
{
    return c->t[seq % c->cap];
}

static inline uint64_t eerl__counter_oldest(const struct eerl__counter *c)
{
    return c->count > c->cap ? c->count - c->cap : 0;
}

#endif

/* The meter's sampler thread and its queue of marks. The thread ticks every interval in real
 * time; while it runs on real time ("serving"), a mark only takes the time and queues it, and the
 * thread serves the queue after a quiet period (or at once when a query waits): the meter stores
 * a sample at each queued mark's time that reads nothing, then one reading of the counters and
 * power, which settles them by the power's shape. Marks close together share that one reading.
 * A query whose end is past the last served reading waits until every mark made before it is
 * served. The thread reaches the meter only through its ops (a tick, the reads for a burst of
 * marks, the first sample), so it knows nothing of the device or the ring.
 * Locks: run_lock + run_cond control the thread and guard the mark queue; served_cond (with
 * run_lock) wakes queries waiting for marks. The ops take the meter's own locks with run_lock
 * released, except prime (start), which runs under it: run_lock may be held while the meter's
 * tick lock is taken, never the reverse.
 * Fork: the thread stays in the parent. In a forked child (pid differs from the creator's) stop
 * only forgets the thread, destroy leaves the inherited locks alone, and a mark while the
 * parent's thread serves fails with EERL_ESTATE. Owns the thread, its locks and the queue. */
#ifndef EERL__METER_SAMPLER_H
#define EERL__METER_SAMPLER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "eerl/clock.h"

/* Marks queued for the thread before it serves them; more in one burst share the last slot (the
 * ones dropped are interpolated between their neighbours). */
#define EERL__SAMPLER_MARKQ_CAP 64

struct eerl__sampler_ops {
    void (*tick)(void *ctx); /* a scheduled tick at the meter's clock */
    /* Before the thread starts, under run_lock: the first sample, if there is none. Returns 1 if
     * the thread is to take the marks: on real time only (an injected clock is virtual time,
     * where a reading taken "right after" a mark means nothing). */
    int (*prime)(void *ctx);
    /* Samples at the n marks' times ts, then a reading of the counters: 0 and its time, or an
     * error. */
    int (*read_marks)(void *ctx, const double *ts, size_t n, double *ret_now);
};

struct eerl__sampler {
    const struct eerl__sampler_ops *ops;
    void *ctx;
    double period; /* seconds between ticks */
    pthread_mutex_t run_lock;
    pthread_cond_t run_cond;
    pthread_cond_t served_cond;
    pthread_t thread;
    pid_t pid; /* the creator: the thread and the locks' holders live in that process */
    int running;
    int stop_flag;
    /* Marks served by the thread; under run_lock. */
    int serving; /* the thread runs and takes marks (cleared with stop_flag) */
    double markq[EERL__SAMPLER_MARKQ_CAP];
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
};

/* A stopped sampler ticking every interval_ms. EERL_ESYS if the locks cannot be made. */
int eerl__sampler_init(struct eerl__sampler *s, unsigned interval_ms,
                       const struct eerl__sampler_ops *ops, void *ctx);
/* Stops the thread (in the creating process) and destroys the locks. */
void eerl__sampler_destroy(struct eerl__sampler *s);

/* Starts the thread (EERL_ESTATE if it runs). */
int eerl__sampler_start(struct eerl__sampler *s);
/* Stops it after it served the queued marks (EERL_ESTATE if it does not run). */
int eerl__sampler_stop(struct eerl__sampler *s);
/* Runs fn(arg) under run_lock if the thread does not run, else EERL_ESTATE. */
int eerl__sampler_if_stopped(struct eerl__sampler *s, void (*fn)(void *), void *arg);

/* A forked child's copy of a sampler whose thread runs in the parent. */
int eerl__sampler_elsewhere(const struct eerl__sampler *s);

/* A mark: while serving, takes the time at clock, queues it and returns 1 (*ret_t: the time);
 * else 0 (the caller reads for it, then calls eerl__sampler_count_read). EERL_EINVAL for a
 * clock that is not finite. */
int eerl__sampler_mark(struct eerl__sampler *s, eerl_clock_fn clock, void *clock_ctx,
                       double *ret_t);
/* A mark the caller read for itself. */
void eerl__sampler_count_read(struct eerl__sampler *s);

/* Waits until every mark made so far whose time may be at or before t1 is served. Returns at once
 * without the thread or queued marks. */
void eerl__sampler_wait(struct eerl__sampler *s, double t1);

void eerl__sampler_set_quiet(struct eerl__sampler *s, double seconds);
void eerl__sampler_stats(struct eerl__sampler *s, uint64_t *ret_marks, uint64_t *ret_reads);

#endif

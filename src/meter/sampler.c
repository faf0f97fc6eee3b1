/* The meter's sampler thread and its mark queue (see sampler.h). */
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "eerl/error.h"
#include "eerl/meter.h"
#include "meter/sampler.h"

int eerl__sampler_init(struct eerl__sampler *s, unsigned interval_ms,
                       const struct eerl__sampler_ops *ops, void *ctx)
{
    pthread_condattr_t ca;
    int ok;

    memset(s, 0, sizeof(*s));
    s->ops = ops;
    s->ctx = ctx;
    s->period = interval_ms / 1000.0;
    s->pid = getpid();
    s->mark_quiet_s = EERL_METER_MARK_QUIET_S;
    s->served_t = -INFINITY;
    if (pthread_condattr_init(&ca) != 0)
        return EERL_ESYS;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    ok = pthread_mutex_init(&s->run_lock, NULL) == 0 && pthread_cond_init(&s->run_cond, &ca) == 0 &&
         pthread_cond_init(&s->served_cond, &ca) == 0;
    pthread_condattr_destroy(&ca);
    return ok ? 0 : EERL_ESYS;
}

void eerl__sampler_destroy(struct eerl__sampler *s)
{
    if (s->pid != getpid()) /* see "Fork" in sampler.h */
        return;
    if (s->running)
        eerl__sampler_stop(s);
    pthread_mutex_destroy(&s->run_lock);
    pthread_cond_destroy(&s->run_cond);
    pthread_cond_destroy(&s->served_cond);
}

int eerl__sampler_elsewhere(const struct eerl__sampler *s)
{
    return s->pid != getpid() && s->running;
}

int eerl__sampler_if_stopped(struct eerl__sampler *s, void (*fn)(void *), void *arg)
{
    int r = 0;

    pthread_mutex_lock(&s->run_lock);
    if (s->running)
        r = EERL_ESTATE;
    else
        fn(arg);
    pthread_mutex_unlock(&s->run_lock);
    return r;
}

void eerl__sampler_set_quiet(struct eerl__sampler *s, double seconds)
{
    pthread_mutex_lock(&s->run_lock);
    s->mark_quiet_s = seconds;
    pthread_mutex_unlock(&s->run_lock);
}

void eerl__sampler_stats(struct eerl__sampler *s, uint64_t *ret_marks, uint64_t *ret_reads)
{
    pthread_mutex_lock(&s->run_lock);
    if (ret_marks)
        *ret_marks = s->n_marks;
    if (ret_reads)
        *ret_reads = s->n_mark_reads;
    pthread_mutex_unlock(&s->run_lock);
}

int eerl__sampler_mark(struct eerl__sampler *s, eerl_clock_fn clock, void *clock_ctx, double *ret_t)
{
    double t;

    pthread_mutex_lock(&s->run_lock);
    if (!s->serving) {
        pthread_mutex_unlock(&s->run_lock);
        return 0;
    }
    /* The thread reads the counters for it: take the time, queue it, wake the thread. */
    t = clock(clock_ctx);
    if (!isfinite(t)) {
        pthread_mutex_unlock(&s->run_lock);
        return EERL_EINVAL;
    }
    s->mark_last_w = eerl_clock_monotonic(NULL);
    if (s->n_markq == 0)
        s->mark_first_w = s->mark_last_w;
    if (s->n_markq < EERL__SAMPLER_MARKQ_CAP)
        s->markq[s->n_markq++] = t;
    else
        s->markq[EERL__SAMPLER_MARKQ_CAP - 1] = t;
    s->mark_seq++;
    s->n_marks++;
    pthread_cond_signal(&s->run_cond);
    pthread_mutex_unlock(&s->run_lock);
    *ret_t = t;
    return 1;
}

void eerl__sampler_count_read(struct eerl__sampler *s)
{
    pthread_mutex_lock(&s->run_lock);
    s->n_marks++;
    s->n_mark_reads++;
    pthread_mutex_unlock(&s->run_lock);
}

void eerl__sampler_wait(struct eerl__sampler *s, double t1)
{
    uint64_t want;

    if (eerl__sampler_elsewhere(s))
        return;
    pthread_mutex_lock(&s->run_lock);
    want = s->mark_seq;
    if (s->served_seq < want && t1 > s->served_t) {
        s->waiters++;
        pthread_cond_signal(&s->run_cond);
        while (s->served_seq < want && t1 > s->served_t)
            pthread_cond_wait(&s->served_cond, &s->run_lock);
        s->waiters--;
    }
    pthread_mutex_unlock(&s->run_lock);
}

/* ---- the thread ---------------------------------------------------------------------------- */

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

/* Serves the queued marks: the meter stores a sample at each one's time, then reads the
 * counters. Marks already behind the last served reading need none. Called and returns with
 * run_lock held; drops it for the device reads. */
static void serve_marks(struct eerl__sampler *s)
{
    double ts[EERL__SAMPLER_MARKQ_CAP], now = 0;
    size_t n = s->n_markq, i;
    uint64_t cover = s->mark_seq;
    int need = 0, r;

    memcpy(ts, s->markq, n * sizeof(ts[0]));
    s->n_markq = 0;
    for (i = 0; i < n; i++)
        need |= ts[i] > s->served_t;
    if (need) {
        pthread_mutex_unlock(&s->run_lock);
        r = s->ops->read_marks(s->ctx, ts, n, &now);
        pthread_mutex_lock(&s->run_lock);
        if (r == 0 && now > s->served_t)
            s->served_t = now;
        s->n_mark_reads++;
    }
    if (cover > s->served_seq)
        s->served_seq = cover;
    pthread_cond_broadcast(&s->served_cond);
}

/* With marks queued: serves them if due (1), else lowers *wake to when they are (0). A burst of
 * marks is served once it has been quiet for mark_quiet_s, at once when a query waits for it or
 * the thread stops, and at the latest EERL_METER_MARK_WAIT_MAX_S (or 5 quiet periods) after its
 * first mark; a scheduled tick that falls due meanwhile is this reading. */
static int marks_due(struct eerl__sampler *s, double now, int tick_due, double *wake)
{
    double due = s->mark_last_w + s->mark_quiet_s,
           cap = s->mark_first_w + (5 * s->mark_quiet_s > EERL_METER_MARK_WAIT_MAX_S
                                        ? 5 * s->mark_quiet_s
                                        : EERL_METER_MARK_WAIT_MAX_S);

    if (cap < due)
        due = cap;
    if (s->stop_flag || s->waiters > 0 || now >= due || tick_due)
        return 1;
    if (due < *wake)
        *wake = due;
    return 0;
}

static void *sampler_main(void *arg)
{
    struct eerl__sampler *s = arg;
    double period = s->period;
    double next = eerl_clock_monotonic(NULL);

    pthread_mutex_lock(&s->run_lock);
    for (;;) {
        double now = eerl_clock_monotonic(NULL), wake = next;
        int tick_due = now >= next;

        if (s->served_seq < s->mark_seq && s->n_markq > 0 && marks_due(s, now, tick_due, &wake)) {
            serve_marks(s);
            if (tick_due)
                next += period;
            goto reschedule;
        }
        if (s->stop_flag)
            break;
        if (tick_due) {
            pthread_mutex_unlock(&s->run_lock);
            /* Errors here are programming errors (time going back, no memory); the next tick
             * tries again, and per-GPU failures are in the samples' flags. */
            s->ops->tick(s->ctx);
            pthread_mutex_lock(&s->run_lock);
            next += period;
            goto reschedule;
        }
        {
            struct timespec tsw = to_timespec(wake);

            (void)pthread_cond_timedwait(&s->run_cond, &s->run_lock, &tsw);
        }
        continue;
    reschedule:
        now = eerl_clock_monotonic(NULL);
        if (next < now) /* late (suspended, overloaded): keep the schedule, skip missed slots */
            next += ceil((now - next) / period) * period;
    }
    pthread_mutex_unlock(&s->run_lock);
    return NULL;
}

int eerl__sampler_start(struct eerl__sampler *s)
{
    sigset_t all, old;
    int r = 0, serving;

    pthread_mutex_lock(&s->run_lock);
    if (s->running) {
        pthread_mutex_unlock(&s->run_lock);
        return EERL_ESTATE;
    }
    /* The first sample before the thread: a mark made right after start is never before it. */
    serving = s->ops->prime(s->ctx);
    s->stop_flag = 0;
    /* The thread inherits this mask: signals go to the caller's threads, never to the sampler. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    if (pthread_create(&s->thread, NULL, sampler_main, s) != 0)
        r = EERL_ESYS;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (r == 0) {
        s->running = 1;
        s->serving = serving;
    }
    pthread_mutex_unlock(&s->run_lock);
    return r;
}

int eerl__sampler_stop(struct eerl__sampler *s)
{
    if (eerl__sampler_elsewhere(s)) {
        s->running = s->serving = 0;
        return 0;
    }
    pthread_mutex_lock(&s->run_lock);
    if (!s->running) {
        pthread_mutex_unlock(&s->run_lock);
        return EERL_ESTATE;
    }
    /* From here marks read on the caller's thread; the thread serves the ones queued, then
     * exits. */
    s->stop_flag = 1;
    s->serving = 0;
    pthread_cond_broadcast(&s->run_cond);
    pthread_mutex_unlock(&s->run_lock);
    pthread_join(s->thread, NULL);
    pthread_mutex_lock(&s->run_lock);
    s->running = 0;
    pthread_mutex_unlock(&s->run_lock);
    return 0;
}

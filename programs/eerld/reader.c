/* eerld's reader thread (see the struct job comment in server_impl.h): device reads (read,
 * status, metrics) on a thread with its own device handle when the backend is NVML, handed over
 * as jobs by the event loop and handed back through an eventfd; finish_jobs sends their replies
 * on the loop's thread. The thread touches nothing but its device handle and the job. */
#define _GNU_SOURCE
#include "server_impl.h"

static json_t *reading(eerl_device *dev, unsigned i)
{
    uint64_t mj;
    unsigned mw, mhz;
    int e;

    if ((e = eerl_device_energy_mj(dev, i, &mj)) < 0 ||
        (e = eerl_device_power_mw(dev, i, &mw)) < 0 || (e = eerl_device_sm_clock(dev, i, &mhz)) < 0)
        return json_pack("{s:i,s:s,s:s}", "gpu", (json_int_t)i, "error", eerl_err_name(e),
                         "message", eerl_device_last_error(dev));
    return json_pack("{s:i,s:I,s:i,s:i}", "gpu", (json_int_t)i, "energy_mj", (json_int_t)mj,
                     "power_mw", (json_int_t)mw, "sm_mhz", (json_int_t)mhz);
}

/* Does a job's device reads on dev (the reader thread's handle, or the loop's when inline). */
static void fill_job(struct server *s, eerl_device *dev, struct job *j)
{
    size_t k;

    if (j->metrics) {
        char why[512];

        if (eerld_metrics_write(s->metrics_fd, s->cfg->metrics_path, s->metrics_name, dev,
                                j->metrics, s->n, why, sizeof(why)) < 0)
            eerld_log(LOG_WARNING, "%s", why);
        return;
    }
    for (k = 0; k < j->n; k++) {
        json_t *x = reading(dev, j->gpus[k]);

        if (j->items) {
            json_object_update(json_array_get(j->items, k), x);
            json_decref(x);
        } else {
            json_array_append_new(json_object_get(j->reply, "readings"), x);
        }
    }
}

static void *reader_main(void *arg)
{
    struct server *s = arg;
    struct reader *rd = &s->rd;

    pthread_mutex_lock(&rd->mu);
    for (;;) {
        struct job *j;
        uint64_t one = 1;

        while (!rd->stop && !rd->todo)
            pthread_cond_wait(&rd->cv, &rd->mu);
        if (rd->stop)
            break;
        j = rd->todo;
        rd->todo = j->next;
        if (!rd->todo)
            rd->todo_tail = NULL;
        pthread_mutex_unlock(&rd->mu);
        fill_job(s, rd->dev, j);
        pthread_mutex_lock(&rd->mu);
        j->next = rd->done;
        rd->done = j;
        (void)!write(rd->efd, &one, sizeof(one));
    }
    pthread_mutex_unlock(&rd->mu);
    return NULL;
}

static void free_job(struct job *j)
{
    json_decref(j->reply);
    free(j->metrics);
    free(j);
}

/* Runs j: on the reader thread (pausing c's input until the reply is queued) or, without one
 * (simulated GPUs, whose reads cost nanoseconds), right here. */
void eerld__submit(struct server *s, struct conn *c, struct job *j)
{
    j->c = c;
    if (!s->rd.running) {
        fill_job(s, s->dev, j);
        if (c)
            eerld__queue_json(c, j->reply);
        free_job(j);
        return;
    }
    if (c) {
        c->busy = 1;
        eerld__update_events(s, c);
    } else {
        s->metrics_pending = 1;
    }
    pthread_mutex_lock(&s->rd.mu);
    j->next = NULL;
    if (s->rd.todo_tail)
        s->rd.todo_tail->next = j;
    else
        s->rd.todo = j;
    s->rd.todo_tail = j;
    pthread_cond_signal(&s->rd.cv);
    pthread_mutex_unlock(&s->rd.mu);
}

void eerld__finish_jobs(struct server *s)
{
    struct job *list, *rev = NULL, *j;
    uint64_t v;

    (void)!read(s->rd.efd, &v, sizeof(v));
    pthread_mutex_lock(&s->rd.mu);
    list = s->rd.done;
    s->rd.done = NULL;
    pthread_mutex_unlock(&s->rd.mu);
    while (list) { /* oldest first */
        j = list;
        list = j->next;
        j->next = rev;
        rev = j;
    }
    while ((j = rev)) {
        struct conn *c = j->c;

        rev = j->next;
        if (!c) {
            s->metrics_pending = 0;
        } else if (c->zombie) {
            eerld__conn_release_memory(c);
        } else {
            c->busy = 0;
            c->last_seen = eerld__now_s(); /* the time its read took was eerld's, not its silence */
            eerld__queue_json(c, j->reply);
            eerld__flush_out(s, c);
            eerld__serve_buffered(s, c); /* what it sent meanwhile */
            if (c->closing)
                eerld__conn_free(
                    s, c, c->closing == 2 ? "connection closed" : "connection closed by eerld");
        }
        free_job(j);
    }
}

struct job *eerld__job_new(const unsigned *gpus, size_t n)
{
    struct job *j = calloc(1, sizeof(*j));

    if (j) {
        memcpy(j->gpus, gpus, n * sizeof(*gpus));
        j->n = n;
    }
    return j;
}

void eerld__write_metrics(struct server *s)
{
    struct eerld_metrics_gpu *m;
    struct job *j;
    unsigned i;

    if (s->metrics_pending)
        return; /* the last one is still being read */
    m = calloc(s->n, sizeof(*m));
    j = calloc(1, sizeof(*j));
    if (!m || !j) {
        free(m);
        free(j);
        return;
    }
    for (i = 0; i < s->n; i++) {
        eerl_actuator_gpu_state st;

        memset(&st, 0, sizeof(st));
        eerl_actuator_gpu(s->g[i].act, i, &st);
        m[i].uuid = s->g[i].uuid;
        m[i].locked_max_mhz = st.locked_max_mhz;
        m[i].leased = s->g[i].holder != NULL;
        m[i].uid = s->g[i].holder_uid;
        m[i].pid = s->g[i].holder_pid;
    }
    j->metrics = m;
    eerld__submit(s, NULL, j);
}

/* The reader thread, for a backend whose reads are slow (NVML). Without one, reads run inline. */
void eerld__start_reader(struct server *s)
{
    struct reader *rd = &s->rd;
    char why[512] = "";
    struct epoll_event ev;
    static int reader_tag;

    if (strcmp(eerl_device_backend(s->dev), "nvml") != 0)
        return;
    if (eerl_device_open_nvml_ex(why, sizeof(why), &rd->dev) < 0) {
        eerld_log(LOG_WARNING, "a second NVML handle for reads failed (%s); reads run inline", why);
        return;
    }
    rd->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    ev.events = EPOLLIN;
    ev.data.ptr = &reader_tag;
    s->reader_tag = &reader_tag;
    if (rd->efd < 0 || epoll_ctl(s->epfd, EPOLL_CTL_ADD, rd->efd, &ev) < 0)
        goto fail;
    pthread_mutex_init(&rd->mu, NULL);
    pthread_cond_init(&rd->cv, NULL);
    /* Signals stay blocked in it: they are inherited from this thread's mask. */
    if (pthread_create(&rd->t, NULL, reader_main, s) != 0) {
        pthread_cond_destroy(&rd->cv);
        pthread_mutex_destroy(&rd->mu);
        goto fail;
    }
    rd->running = 1;
    return;
fail:
    eerld_log(LOG_WARNING, "cannot start the reader thread; reads run inline");
    if (rd->efd >= 0)
        close(rd->efd);
    rd->efd = -1;
    eerl_device_free(rd->dev);
    rd->dev = NULL;
}

/* Stops the reader and drops what it still had: called before the connections go. */
void eerld__stop_reader(struct server *s)
{
    struct reader *rd = &s->rd;
    struct job *lists[2], *j;
    int k;

    if (!rd->running)
        return;
    pthread_mutex_lock(&rd->mu);
    rd->stop = 1;
    pthread_cond_signal(&rd->cv);
    pthread_mutex_unlock(&rd->mu);
    pthread_join(rd->t, NULL);
    rd->running = 0;
    lists[0] = rd->todo;
    lists[1] = rd->done;
    rd->todo = rd->todo_tail = rd->done = NULL;
    for (k = 0; k < 2; k++)
        while ((j = lists[k])) {
            lists[k] = j->next;
            if (j->c && j->c->zombie)
                eerld__conn_release_memory(j->c);
            else if (j->c)
                j->c->busy = 0;
            free_job(j);
        }
    pthread_cond_destroy(&rd->cv);
    pthread_mutex_destroy(&rd->mu);
    close(rd->efd);
    rd->efd = -1;
    eerl_device_free(rd->dev);
    rd->dev = NULL;
}

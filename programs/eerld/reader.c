/* eerld's reader thread (see reader.h). */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "eerl/error.h"

#include "log.h"
#include "reader.h"

/* The GPU's own decisions about its speed, where the driver says: its clock event reasons and
 * its enforced power limit (read only). */
static json_t *with_state(eerl_device *dev, unsigned i, json_t *x)
{
    uint64_t reasons;
    unsigned limit;

    if (x && eerl_device_throttle_reasons(dev, i, &reasons) == 0)
        json_object_set_new(x, "reasons", json_integer((json_int_t)(reasons & 0xffffffffu)));
    if (x && eerl_device_power_limit_mw(dev, i, &limit) == 0)
        json_object_set_new(x, "limit_mw", json_integer((json_int_t)limit));
    return x;
}

static json_t *reading(eerl_device *dev, unsigned i)
{
    uint64_t mj;
    unsigned mw, mhz;
    int e;

    if ((e = eerl_device_energy_mj(dev, i, &mj)) < 0 ||
        (e = eerl_device_power_mw(dev, i, &mw)) < 0 || (e = eerl_device_sm_clock(dev, i, &mhz)) < 0)
        return json_pack("{s:i,s:s,s:s}", "gpu", (json_int_t)i, "error", eerl_err_name(e),
                         "message", eerl_device_last_error(dev));
    return with_state(dev, i,
                      json_pack("{s:i,s:I,s:i,s:i}", "gpu", (json_int_t)i, "energy_mj",
                                (json_int_t)mj, "power_mw", (json_int_t)mw, "sm_mhz",
                                (json_int_t)mhz));
}

/* Does a job's device reads on dev (the reader thread's handle, or the loop's when inline). */
static void fill_job(struct eerld_reader *rd, eerl_device *dev, struct eerld_job *j)
{
    size_t k;

    if (j->metrics) {
        char why[512];

        if (eerld_metrics_write(rd->metrics_fd, rd->metrics_path, rd->metrics_name, dev, j->metrics,
                                rd->n_gpus, why, sizeof(why)) < 0)
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
    struct eerld_reader *rd = arg;

    pthread_mutex_lock(&rd->mu);
    for (;;) {
        struct eerld_job *j;
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
        fill_job(rd, rd->dev, j);
        pthread_mutex_lock(&rd->mu);
        j->next = rd->done;
        rd->done = j;
        (void)!write(rd->efd, &one, sizeof(one));
    }
    pthread_mutex_unlock(&rd->mu);
    return NULL;
}

struct eerld_job *eerld_job_new(const unsigned *gpus, size_t n)
{
    struct eerld_job *j = calloc(1, sizeof(*j));

    if (j) {
        memcpy(j->gpus, gpus, n * sizeof(*gpus));
        j->n = n;
    }
    return j;
}

void eerld_job_free(struct eerld_job *j)
{
    json_decref(j->reply);
    free(j->metrics);
    free(j);
}

void eerld_reader_init(struct eerld_reader *rd, eerl_device *dev, int metrics_fd,
                       const char *metrics_path, const char *metrics_name, unsigned n_gpus)
{
    memset(rd, 0, sizeof(*rd));
    rd->loop_dev = dev;
    rd->efd = -1;
    rd->metrics_fd = metrics_fd;
    rd->metrics_path = metrics_path;
    rd->metrics_name = metrics_name;
    rd->n_gpus = n_gpus;
}

int eerld_reader_submit(struct eerld_reader *rd, struct eerld_job *j)
{
    if (!rd->running) {
        fill_job(rd, rd->loop_dev, j);
        return 1;
    }
    pthread_mutex_lock(&rd->mu);
    j->next = NULL;
    if (rd->todo_tail)
        rd->todo_tail->next = j;
    else
        rd->todo = j;
    rd->todo_tail = j;
    pthread_cond_signal(&rd->cv);
    pthread_mutex_unlock(&rd->mu);
    return 0;
}

struct eerld_job *eerld_reader_take(struct eerld_reader *rd)
{
    struct eerld_job *list, *rev = NULL, *j;
    uint64_t v;

    (void)!read(rd->efd, &v, sizeof(v));
    pthread_mutex_lock(&rd->mu);
    list = rd->done;
    rd->done = NULL;
    pthread_mutex_unlock(&rd->mu);
    while (list) { /* oldest first */
        j = list;
        list = j->next;
        j->next = rev;
        rev = j;
    }
    return rev;
}

void eerld_reader_start(struct eerld_reader *rd, int epfd, void *tag)
{
    char why[512] = "";
    struct epoll_event ev;

    if (strcmp(eerl_device_backend(rd->loop_dev), "nvml") != 0)
        return;
    if (eerl_device_open_nvml_ex(why, sizeof(why), &rd->dev) < 0) {
        eerld_log(LOG_WARNING, "a second NVML handle for reads failed (%s); reads run inline", why);
        return;
    }
    rd->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    ev.events = EPOLLIN;
    ev.data.ptr = tag;
    if (rd->efd < 0 || epoll_ctl(epfd, EPOLL_CTL_ADD, rd->efd, &ev) < 0)
        goto fail;
    pthread_mutex_init(&rd->mu, NULL);
    pthread_cond_init(&rd->cv, NULL);
    /* Signals stay blocked in it: they are inherited from this thread's mask. */
    if (pthread_create(&rd->t, NULL, reader_main, rd) != 0) {
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

struct eerld_job *eerld_reader_stop(struct eerld_reader *rd)
{
    struct eerld_job *left;

    if (!rd->running)
        return NULL;
    pthread_mutex_lock(&rd->mu);
    rd->stop = 1;
    pthread_cond_signal(&rd->cv);
    pthread_mutex_unlock(&rd->mu);
    pthread_join(rd->t, NULL);
    rd->running = 0;
    left = rd->todo; /* then the finished ones not taken */
    if (rd->todo_tail)
        rd->todo_tail->next = rd->done;
    else
        left = rd->done;
    rd->todo = rd->todo_tail = rd->done = NULL;
    pthread_cond_destroy(&rd->cv);
    pthread_mutex_destroy(&rd->mu);
    close(rd->efd);
    rd->efd = -1;
    eerl_device_free(rd->dev);
    rd->dev = NULL;
    return left;
}

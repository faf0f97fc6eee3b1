/* eerld's server: the event loop (see server.h). The rules it keeps:
 * - Every way a connection ends resets the clocks of every GPU it held before anything else
 *   happens on this loop (conn.c, leases.c).
 * - Nothing is read or reset before the state dir is checked and locked (flock) and the socket
 *   found free: a refused start touches nothing (startup.c).
 * - A policy reload applies to the leases and clocks that exist.
 * - On the way out every GPU eerld changed is reset, and the journal keeps any it could not. */
#define _GNU_SOURCE /* signalfd */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "conn.h"
#include "leases.h"
#include "log.h"
#include "reader.h"
#include "server.h"
#include "startup.h"

struct server {
    const struct eerld_config *cfg;
    eerl_device *dev;
    struct eerld_files files;
    struct eerld_leases leases;
    struct eerld_reader rd;
    struct eerld_conns conns;
    int lfd, epfd, sfd;
    int metrics_pending; /* the reader still writes the last metrics file */
    double next_metrics, next_retry;
    int stop;
};

/* epoll data of the listening socket, the signalfd and the reader's eventfd */
static int listen_tag, signal_tag, reader_tag;

static void write_metrics(struct server *s)
{
    struct eerld_metrics_gpu *m;
    struct eerld_job *j;

    if (s->metrics_pending)
        return; /* the last one is still being read */
    m = eerld_leases_snapshot(&s->leases);
    j = calloc(1, sizeof(*j));
    if (!m || !j) {
        free(m);
        free(j);
        return;
    }
    j->metrics = m;
    if (eerld_reader_submit(&s->rd, j))
        eerld_job_free(j);
    else
        s->metrics_pending = 1;
}

/* The reader handed jobs back: replies to their connections, or a metrics file written. */
static void finish_jobs(struct server *s)
{
    struct eerld_job *j = eerld_reader_take(&s->rd), *next;

    for (; j; j = next) {
        next = j->next;
        if (j->owner) {
            eerld_conns_finish(&s->conns, j);
        } else {
            s->metrics_pending = 0;
            eerld_job_free(j);
        }
    }
}

static void on_signal(struct server *s)
{
    struct signalfd_siginfo si;

    while (read(s->sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
        if (si.ssi_signo == SIGHUP) {
            struct eerld_policy old = s->leases.policy;

            if (eerld_load_policy(s->cfg, &s->leases.policy, &s->leases.have_policy_file) < 0) {
                s->leases.policy = old;
                eerld_log(LOG_ERR, "SIGHUP: keeping the previous policy");
            } else {
                eerld_log(LOG_INFO, "SIGHUP: policy reloaded from %s", s->cfg->policy_path);
                eerld_leases_recheck_clocks(&s->leases, eerld_conns_revoke(&s->conns));
            }
        } else {
            eerld_log(LOG_INFO, "signal %u: resetting every GPU and exiting", si.ssi_signo);
            s->stop = 1;
        }
    }
}

/* Once per turn of the loop: heartbeats, a paused listening socket, failed resets, metrics. */
static void sweep(struct server *s)
{
    double t = eerld_now_s();

    eerld_conns_sweep(&s->conns, t);
    if (t >= s->next_retry) {
        eerld_leases_retry(&s->leases);
        s->next_retry = t + EERLD_RETRY_MS / 1000.0;
    }
    if (s->cfg->metrics_path && t >= s->next_metrics) {
        write_metrics(s);
        s->next_metrics = t + (double)s->cfg->metrics_interval_ms / 1000.0;
    }
}

/* One epoll batch. The listening socket and the reader are served after the batch's
 * connections: a client that closed before another connected must not count against the
 * newcomer's limit, and finishing a job may end its connection, which a later event of the
 * batch could name. */
static void serve_batch(struct server *s, const struct epoll_event *evs, int n)
{
    int k, accept_pending = 0, done_pending = 0;

    for (k = 0; k < n; k++) {
        if (evs[k].data.ptr == &listen_tag)
            accept_pending = 1;
        else if (evs[k].data.ptr == &signal_tag)
            on_signal(s);
        else if (evs[k].data.ptr == &reader_tag)
            done_pending = 1;
        else
            eerld_conns_event(&s->conns, evs[k].data.ptr, evs[k].events);
    }
    if (done_pending)
        finish_jobs(s);
    if (accept_pending)
        eerld_conns_accept(&s->conns);
}

static void serve(struct server *s)
{
    struct epoll_event evs[64];

    while (!s->stop) {
        int n = epoll_wait(s->epfd, evs, 64, 50);

        if (n < 0 && errno != EINTR) {
            eerld_log(LOG_ERR, "epoll_wait: %s", strerror(errno));
            break;
        }
        serve_batch(s, evs, n);
        sweep(s);
    }
}

/* Everything before the first wait: the checks that may refuse the start, the devices, the
 * journal's resets, the socket. 0, 1 (failed before a GPU could have changed) or 2 (failed
 * after: every GPU is reset on the way out). */
static int setup(struct server *s, sigset_t *mask)
{
    struct epoll_event ev;

    /* Everything that can refuse the start comes before the GPUs are opened: a refused start
     * resets nothing and writes nothing. */
    if (eerld_startup_check(s->cfg, &s->leases.policy, &s->leases.have_policy_file, &s->files) < 0)
        return 1;
    eerld_conns_init(&s->conns, &s->leases, &s->rd, s->cfg->heartbeat_ms);
    if (eerld_open_devices(s->cfg, &s->dev) < 0)
        return 1;
    s->leases.dev = s->dev;
    s->leases.state_fd = s->files.state_fd;
    s->leases.state_dir = s->cfg->state_dir;
    s->leases.policy_path = s->cfg->policy_path;
    if (eerld_leases_load(&s->leases) < 0)
        return 1;
    eerld_reader_init(&s->rd, s->dev, s->files.metrics_fd, s->cfg->metrics_path,
                      s->files.metrics_name, s->leases.n);
    if (eerld_leases_recover(&s->leases) < 0) {
        eerld_log(LOG_ERR, "the state dir %s must be writable (the journal lives there)",
                  s->cfg->state_dir);
        return 1;
    }
    s->sfd = signalfd(-1, mask, SFD_NONBLOCK | SFD_CLOEXEC);
    s->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (s->sfd < 0 || s->epfd < 0 || eerld_listen(s->cfg, &s->files, &s->lfd) < 0)
        return 2;
    s->conns.epfd = s->epfd;
    s->conns.lfd = s->lfd;
    s->conns.listen_tag = &listen_tag;
    ev.events = EPOLLIN;
    ev.data.ptr = &listen_tag;
    epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->lfd, &ev);
    ev.data.ptr = &signal_tag;
    epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->sfd, &ev);
    eerld_reader_start(&s->rd, s->epfd, &reader_tag);
    return 0;
}

/* Resets every GPU eerld changed: the reader stopped first, then every connection ends.
 * Returns 1 if a reset failed. */
static int reset_all(struct server *s)
{
    struct eerld_job *j = eerld_reader_stop(&s->rd), *next;

    for (; j; j = next) {
        next = j->next;
        eerld_conns_drop_job(j);
    }
    eerld_conns_close_all(&s->conns, "eerld is stopping");
    return eerld_leases_shutdown(&s->leases);
}

static void teardown(struct server *s)
{
    if (s->lfd >= 0) {
        close(s->lfd);
        unlink(s->cfg->socket_path);
    }
    if (s->epfd >= 0)
        close(s->epfd);
    if (s->sfd >= 0)
        close(s->sfd);
    eerld_conns_free(&s->conns);
    eerld_files_close(&s->files);
    eerld_leases_free(&s->leases);
    eerl_device_free(s->dev);
    free(s);
}

int eerld_run(const struct eerld_config *cfg, int ready_fd)
{
    struct server *s = calloc(1, sizeof(*s));
    sigset_t mask;
    int rc = 1, up;

    if (!s)
        return 1;
    s->cfg = cfg;
    s->lfd = s->epfd = s->sfd = s->conns.reserve_fd = -1;
    s->files.state_fd = s->files.lock_fd = s->files.metrics_fd = -1;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGHUP);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    signal(SIGPIPE, SIG_IGN);
    up = setup(s, &mask);
    if (up == 1)
        goto out;
    if (up == 2)
        goto out_reset;
    eerld_log(LOG_INFO, "serving %u GPUs (%s) on %s; heartbeat timeout %u ms; policy %s%s",
              s->leases.n, eerl_device_backend(s->dev), cfg->socket_path, cfg->heartbeat_ms,
              cfg->policy_path, s->leases.have_policy_file ? "" : " (absent)");
    if (ready_fd >= 0) {
        (void)!write(ready_fd, "1", 1);
        close(ready_fd);
    }
    if (cfg->metrics_path)
        write_metrics(s);
    s->next_metrics = eerld_now_s() + (double)cfg->metrics_interval_ms / 1000.0;
    s->next_retry = eerld_now_s() + EERLD_RETRY_MS / 1000.0;
    serve(s);
    rc = 0;
out_reset:
    if (reset_all(s))
        rc = 1;
out:
    teardown(s);
    return rc;
}

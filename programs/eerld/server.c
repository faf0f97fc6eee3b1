/* eerld's server (see server.h). The rules it keeps:
 * - A GPU has at most one holder (a connection). Every way a connection ends (release, close,
 *   death of the process: the kernel closes its socket, a malformed message, missed heartbeats)
 *   resets the clocks of every GPU it held before anything else happens on this loop.
 * - Before a GPU's clock is first changed under a lease, the journal names it (fsync'd); it
 *   leaves the journal only after its reset succeeded. A reset that fails keeps the GPU in the
 *   journal and is retried every second.
 * - A malformed message (bad JSON, unknown op or key, wrong type, out-of-range value, over
 *   EERL_AGENT_MSG_MAX bytes, no hello first) gets an error reply and its connection is closed.
 *   A well-formed request that is refused (busy, policy, range) gets an error and the
 *   connection stays.
 * - Identity is SO_PEERCRED and SO_PEERGROUPS at accept time; nothing a client says about
 *   itself is trusted. A policy reload applies to the leases and clocks that exist.
 * - Nothing is read or reset before the state dir is checked and locked (flock) and the socket
 *   found free: a refused start touches nothing. Files are written relative to checked
 *   directory fds, never through a link (safefile.h).
 * - Only complete requests keep a connection alive; a peer whose replies pile up unread is not
 *   read until it reads (OUT_PAUSE), so memory per peer stays bounded. */
#define _GNU_SOURCE /* accept4, struct ucred */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "eerl/actuator.h"
#include "eerl/agent.h"
#include "eerl/device.h"
#include "eerl/error.h"
#include "eerl/twin.h"
#include "eerl/version.h"
#include "agent/protocol.h"
#include "twin/idle_device.h"

#include "journal.h"
#include "metrics.h"
#include "policy.h"
#include "safefile.h"
#include "server.h"

#define POOLS_MAX 16
/* Output: while a connection has OUT_PAUSE bytes of replies unread, its requests wait (its
 * input is not read), so a peer that pipelines requests and never reads holds at most this
 * plus one reply; it is dropped once its heartbeat timeout passes without a request served.
 * OUT_MAX bounds one connection's queue (the largest reply, status of 1024 GPUs, is ~0.3 MiB)
 * and OUT_TOTAL_MAX all of them together. */
#define OUT_PAUSE (64u << 10)
#define OUT_MAX (8u << 20)
#define OUT_TOTAL_MAX (64u << 20)
#define RETRY_MS 1000
#define ACCEPT_PAUSE_MS 100 /* after an accept error other than running out of descriptors */
#define LOCK_FILE "eerld.lock"

struct pool {
    char name[EERL_AGENT_POOL_NAME_MAX + 1];
    unsigned gpus[EERL_AGENT_GPUS_MAX];
    size_t n;
    unsigned mhz[3];
};

struct conn {
    int fd;
    uid_t uid;
    gid_t gid;
    pid_t pid;
    gid_t *groups; /* the peer's supplementary groups (SO_PEERGROUPS) */
    size_t n_groups;
    char client[EERL__AGENT_CLIENT_MAX + 1];
    int hello;
    char *in;
    size_t in_len;
    char *out;
    size_t out_len, out_cap;
    unsigned events;  /* registered with epoll */
    int busy;         /* a device read for it is with the reader thread: its next lines wait */
    int zombie;       /* closed while busy: freed when the reader hands the job back */
    double last_seen; /* when its last request (a complete line) came, or it connected */
    double accepted_at;
    int closing;
    char *refusal; /* over a connection limit: the answer to its first request, then close */
    struct pool pools[POOLS_MAX];
    size_t n_pools;
    unsigned n_leased;
    struct server *srv; /* its queue counts in srv->out_total */
    struct conn *prev, *next;
};

struct gpu {
    char uuid[EERL_DEVICE_UUID_MAX];
    char name[EERL_DEVICE_NAME_MAX];
    unsigned clocks[EERL_DEVICE_CLOCKS_MAX];
    size_t n_clocks;
    eerl_actuator *act; /* one per GPU, so a GPU can be reset alone */
    struct conn *holder;
    unsigned holder_uid, holder_pid; /* of the holder, or the last one while dirty */
    int journaled;                   /* named in the journal */
    int dirty;                       /* a reset failed: retry */
};

/* Device reads (read, status, metrics) run on a reader thread with its own device handle when
 * the backend is NVML: an H200's energy counter read takes 3-4 ms of driver time, and the event
 * loop must not make a set-phase wait behind it. The loop hands over a job and pauses that
 * connection's input (its replies stay in order); the reader fills in the readings and wakes
 * the loop through an eventfd. The reader touches nothing but its device handle and the job. */
struct job {
    struct conn *c; /* NULL: a metrics job */
    unsigned gpus[EERL__AGENT_GPU_INDEX_MAX + 1];
    size_t n;
    json_t *reply; /* built by the loop; the reader adds readings */
    json_t *items; /* status: the per-GPU objects to add readings to (borrowed from reply) */
    struct eerld_metrics_gpu *metrics; /* metrics job: snapshot of lease state */
    struct job *next;
};

struct reader {
    eerl_device *dev;
    pthread_t t;
    int running;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct job *todo, *todo_tail, *done;
    int stop;
    int efd;
    const char *metrics_path;
    unsigned n_gpus;
};

struct server {
    const struct eerld_config *cfg;
    eerl_device *dev;
    unsigned n;
    struct gpu *g;
    struct eerld_policy policy;
    int have_policy_file;
    int lfd, epfd, sfd;
    struct reader rd; /* rd.running: reads go through it */
    void *reader_tag;
    int metrics_pending;
    struct conn *conns;
    unsigned n_conns, n_refused;
    double next_metrics, next_retry;
    int stop;
    int state_fd, lock_fd, metrics_fd; /* the state dir, its lock, the metrics dir */
    const char *metrics_name;          /* the metrics file's name in its dir */
    int reserve_fd;                    /* given up to accept-and-close when out of descriptors */
    int fd_short;                      /* out of descriptors: logged once until it passes */
    int accept_err;                    /* another accept error: logged once until it passes */
    double accept_resume;              /* > 0: the listening socket is paused until then */
    size_t out_total;                  /* replies queued, all connections */
    gid_t sock_gid;                    /* the socket's group, if have_sock_gid */
    int have_sock_gid;
    char why[512];
};

static int log_syslog;

void eerld_log_to_syslog(int on)
{
    log_syslog = on;
    if (on)
        openlog("eerld", LOG_PID, LOG_DAEMON);
}

void eerld_log(int prio, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    if (log_syslog) {
        vsyslog(prio, fmt, ap);
    } else {
        fprintf(stderr, "eerld: %s",
                prio <= LOG_ERR       ? "error: "
                : prio == LOG_WARNING ? "warning: "
                                      : "");
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
    }
    va_end(ap);
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- journal ---- */

static int journal_sync(struct server *s)
{
    struct eerld_journal_entry *e = calloc(s->n + 1, sizeof(*e));
    size_t k = 0;
    unsigned i;
    int r;

    if (!e) {
        snprintf(s->why, sizeof(s->why), "out of memory");
        return -1;
    }
    for (i = 0; i < s->n; i++) {
        if (!s->g[i].journaled)
            continue;
        e[k].gpu = i;
        snprintf(e[k].uuid, sizeof(e[k].uuid), "%s", s->g[i].uuid);
        e[k].uid = s->g[i].holder_uid;
        e[k].pid = s->g[i].holder_pid;
        k++;
    }
    r = eerld_journal_write(s->state_fd, s->cfg->state_dir, e, k, s->why, sizeof(s->why));
    free(e);
    if (r < 0)
        eerld_log(LOG_ERR, "%s", s->why);
    return r;
}

/* Resets gpu's clocks. Returns 1 if its journal entry can go (caller syncs the journal). */
static int reset_gpu(struct server *s, unsigned i, const char *why)
{
    struct gpu *g = &s->g[i];
    int e = eerl_actuator_restore(g->act);

    if (e == 0 && g->dirty)
        e = eerl_device_reset_sm_clocks(s->dev, i);
    if (e < 0) {
        eerld_log(LOG_ERR, "GPU %u (%s): reset after %s failed: %s (%s); retrying every %d ms", i,
                  g->uuid, why, eerl_strerror(e), eerl_device_last_error(s->dev), RETRY_MS);
        g->dirty = 1;
        return 0;
    }
    g->dirty = 0;
    return g->journaled;
}

/* Ends c's lease on GPU i and resets it. Returns 1 if the journal must be rewritten. */
static int drop_lease(struct server *s, unsigned i, const char *why)
{
    struct gpu *g = &s->g[i];
    int gone;

    if (g->holder) {
        g->holder->n_leased--;
        g->holder = NULL;
    }
    gone = reset_gpu(s, i, why);
    if (gone)
        g->journaled = 0;
    return gone;
}

static void retry_dirty(struct server *s)
{
    unsigned i;
    int changed = 0;

    for (i = 0; i < s->n; i++) {
        struct gpu *g = &s->g[i];

        if (!g->dirty || g->holder)
            continue;
        if (eerl_device_reset_sm_clocks(s->dev, i) == 0) {
            eerld_log(LOG_INFO, "GPU %u (%s): reset succeeded on retry", i, g->uuid);
            g->dirty = 0;
            if (g->journaled) {
                g->journaled = 0;
                changed = 1;
            }
        }
    }
    if (changed)
        journal_sync(s);
}

/* ---- connections ---- */

static void conn_release_memory(struct conn *c)
{
    free(c->groups);
    free(c->refusal);
    free(c->in);
    free(c->out);
    free(c);
}

/* Registers what the loop wants to hear about c: input unless a read for it is in flight,
 * output while replies wait. */
static void update_events(struct server *s, struct conn *c)
{
    unsigned ev_mask = (c->busy || c->out_len >= OUT_PAUSE ? 0u : (unsigned)EPOLLIN) |
                       (c->out_len ? (unsigned)EPOLLOUT : 0u);

    if (ev_mask != c->events && !c->zombie) {
        struct epoll_event ev = {.events = ev_mask, .data.ptr = c};

        c->events = ev_mask;
        epoll_ctl(s->epfd, EPOLL_CTL_MOD, c->fd, &ev);
    }
}

/* Ends a connection: resets its GPUs at once (even with a read in flight), closes the socket. */
static void conn_free(struct server *s, struct conn *c, const char *why)
{
    unsigned i;
    int changed = 0, had = c->n_leased > 0;

    for (i = 0; i < s->n && c->n_leased; i++)
        if (s->g[i].holder == c)
            changed |= drop_lease(s, i, why);
    if (changed)
        journal_sync(s);
    if (had)
        eerld_log(LOG_INFO, "uid %u pid %u: %s; its GPUs are reset", (unsigned)c->uid,
                  (unsigned)c->pid, why);
    epoll_ctl(s->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    s->n_conns--;
    s->n_refused -= c->refusal != NULL;
    s->out_total -= c->out_len;
    c->out_len = 0;
    if (c->busy) {
        c->zombie = 1; /* the reader still has its job: freed when it comes back */
        return;
    }
    conn_release_memory(c);
}

static void flush_out(struct server *s, struct conn *c)
{
    size_t done = 0;

    while (done < c->out_len) {
        ssize_t w = send(c->fd, c->out + done, c->out_len - done, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK && !c->closing)
                c->closing = 1;
            break;
        }
        done += (size_t)w;
    }
    memmove(c->out, c->out + done, c->out_len - done);
    c->out_len -= done;
    s->out_total -= done;
    if (!c->closing)
        update_events(s, c);
}

static void queue_json(struct conn *c, json_t *o)
{
    size_t need = json_dumpb(o, NULL, 0, JSON_COMPACT);

    if (need == 0)
        return;
    if (c->out_len + need + 1 > OUT_MAX || c->srv->out_total + need + 1 > OUT_TOTAL_MAX) {
        eerld_log(LOG_WARNING,
                  "uid %u pid %u: %zu bytes of replies unread (%zu for all connections; limits "
                  "%u and %u); connection closed",
                  (unsigned)c->uid, (unsigned)c->pid, c->out_len, c->srv->out_total, OUT_MAX,
                  OUT_TOTAL_MAX);
        c->closing = 1;
        return;
    }
    if (c->out_len + need + 1 > c->out_cap) {
        size_t cap = c->out_cap ? c->out_cap : 4096;
        char *p;

        while (cap < c->out_len + need + 1)
            cap *= 2;
        p = realloc(c->out, cap);
        if (!p) {
            c->closing = 1;
            return;
        }
        c->out = p;
        c->out_cap = cap;
    }
    json_dumpb(o, c->out + c->out_len, need, JSON_COMPACT);
    c->out_len += need;
    c->out[c->out_len++] = '\n';
    c->srv->out_total += need + 1;
}

static json_t *reply_new(const struct eerl__agent_req *r)
{
    json_t *o = json_object();

    if (r && r->has_id)
        json_object_set_new(o, "id", json_integer((json_int_t)r->id));
    json_object_set_new(o, "ok", json_true());
    return o;
}

static void reply_err_id(struct conn *c, int has_id, uint64_t id, int err, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void reply_err_id(struct conn *c, int has_id, uint64_t id, int err, const char *fmt, ...)
{
    char msg[1024];
    json_t *o = json_object();
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (has_id)
        json_object_set_new(o, "id", json_integer((json_int_t)id));
    json_object_set_new(o, "ok", json_false());
    json_object_set_new(o, "error", json_string(eerl_err_name(err)));
    json_object_set_new(o, "message", json_string(msg));
    queue_json(c, o);
    json_decref(o);
}

/* A refusal keeps the connection; the message is built by the caller. */
static void reply_refuse(struct conn *c, const struct eerl__agent_req *r, int err, const char *msg)
{
    reply_err_id(c, r->has_id, r->id, err, "%s", msg);
}

static int is_root(const struct conn *c)
{
    return c->uid == 0;
}

static void holder_text(const struct gpu *g, unsigned i, char *buf, size_t len)
{
    snprintf(buf, len, "GPU %u is leased by uid %u pid %u%s%s%s", i, g->holder_uid, g->holder_pid,
             g->holder && g->holder->client[0] ? " ('" : "",
             g->holder && g->holder->client[0] ? g->holder->client : "",
             g->holder && g->holder->client[0] ? "')" : "");
}

/* Checks every GPU of r exists (and, if own, is held by c). 0, or a refusal already sent. */
static int check_gpus(struct server *s, struct conn *c, const struct eerl__agent_req *r,
                      const unsigned *gpus, size_t n, int own)
{
    char msg[512];
    size_t k;

    for (k = 0; k < n; k++) {
        unsigned i = gpus[k];

        if (i >= s->n) {
            snprintf(msg, sizeof(msg), "GPU %u does not exist (%u GPUs: 0-%u)", i, s->n, s->n - 1);
            reply_refuse(c, r, EERL_ENODEV, msg);
            return -1;
        }
        if (own && s->g[i].holder != c) {
            if (s->g[i].holder) {
                holder_text(&s->g[i], i, msg, sizeof(msg));
                reply_refuse(c, r, EERL_EBUSY, msg);
            } else {
                snprintf(msg, sizeof(msg),
                         "GPU %u is not leased by this connection; lease it first", i);
                reply_refuse(c, r, EERL_ESTATE, msg);
            }
            return -1;
        }
    }
    return 0;
}

/* Checks mhz (a requested upper or lower bound, not 0) against gpu's policy and clock table. */
static int check_clock(struct server *s, struct conn *c, unsigned i, unsigned mhz, char *msg,
                       size_t len)
{
    unsigned floor_mhz = 0, ceiling_mhz = 0, snapped;
    int e;

    if (!is_root(c)) {
        eerld_policy_bounds(&s->policy, i, &floor_mhz, &ceiling_mhz);
        if (floor_mhz && mhz < floor_mhz) {
            snprintf(msg, len, "requested %u MHz is below GPU %u's floor of %u MHz (policy %s)",
                     mhz, i, floor_mhz, s->cfg->policy_path);
            return EERL_ERANGE;
        }
        if (ceiling_mhz && mhz > ceiling_mhz) {
            snprintf(msg, len, "requested %u MHz is above GPU %u's ceiling of %u MHz (policy %s)",
                     mhz, i, ceiling_mhz, s->cfg->policy_path);
            return EERL_ERANGE;
        }
    }
    e = eerl_actuator_snap(s->g[i].act, i, mhz, &snapped);
    if (e < 0) {
        snprintf(msg, len, "%s", eerl_actuator_last_error(s->g[i].act));
        return e;
    }
    /* Snapping goes down: a floor between two supported clocks must not be undercut. */
    if (!is_root(c) && floor_mhz && snapped < floor_mhz) {
        snprintf(msg, len,
                 "requested %u MHz snaps down to GPU %u's supported %u MHz, below its floor of "
                 "%u MHz (policy %s)",
                 mhz, i, snapped, floor_mhz, s->cfg->policy_path);
        return EERL_ERANGE;
    }
    return 0;
}

/* Journals every GPU of the list not journaled yet (one write). */
static int journal_add(struct server *s, struct conn *c, const unsigned *gpus, size_t n)
{
    size_t k;
    int need = 0;

    for (k = 0; k < n; k++) {
        struct gpu *g = &s->g[gpus[k]];

        if (!g->journaled) {
            g->journaled = 2; /* 2: added by this call, undone if the write fails */
            need = 1;
        }
        g->holder_uid = (unsigned)c->uid;
        g->holder_pid = (unsigned)c->pid;
    }
    if (!need)
        return 0;
    if (journal_sync(s) < 0) {
        for (k = 0; k < n; k++)
            if (s->g[gpus[k]].journaled == 2)
                s->g[gpus[k]].journaled = 0;
        return -1;
    }
    for (k = 0; k < n; k++)
        s->g[gpus[k]].journaled = 1;
    return 0;
}

/* Applies [lo, hi] (0, 0: governor) to each GPU; every GPU is tried; failures are listed in
 * the reply. The GPUs are already checked. */
static void apply_clocks(struct server *s, struct conn *c, const struct eerl__agent_req *r,
                         const unsigned *gpus, size_t n, unsigned lo, unsigned hi)
{
    char msg[1024] = "";
    json_t *failed = NULL;
    size_t k, off = 0;
    int first = 0;

    if (hi && journal_add(s, c, gpus, n) < 0) {
        reply_refuse(c, r, EERL_EIO, "cannot write the journal; no clock was changed");
        return;
    }
    for (k = 0; k < n; k++) {
        unsigned i = gpus[k];
        int e;

        if (hi == 0) {
            e = eerl_actuator_restore(s->g[i].act);
        } else {
            e = eerl_actuator_set_range(s->g[i].act, i, lo, hi);
        }
        if (e < 0) {
            const char *d = eerl_actuator_last_error(s->g[i].act);

            if (!d[0])
                d = eerl_device_last_error(s->dev);
            if (!first)
                first = e;
            if (!failed)
                failed = json_array();
            json_array_append_new(failed, json_integer(i));
            if (off < sizeof(msg))
                off += (size_t)snprintf(msg + off, sizeof(msg) - off, "%sGPU %u: %s (%s)",
                                        off ? "; " : "", i, eerl_strerror(e), d);
            eerld_log(LOG_WARNING, "GPU %u: setting %u-%u MHz for uid %u pid %u failed: %s (%s)", i,
                      lo, hi, (unsigned)c->uid, (unsigned)c->pid, eerl_strerror(e), d);
        }
    }
    if (first) {
        json_t *o = json_object();

        if (r->has_id)
            json_object_set_new(o, "id", json_integer((json_int_t)r->id));
        json_object_set_new(o, "ok", json_false());
        json_object_set_new(o, "error", json_string(eerl_err_name(first)));
        json_object_set_new(o, "message", json_string(msg));
        json_object_set_new(o, "failed", failed);
        queue_json(c, o);
        json_decref(o);
        return;
    }
    json_t *o = reply_new(r);
    queue_json(c, o);
    json_decref(o);
}

/* The GPUs a read-only request names: its list, or every GPU (all of them, however many). */
static size_t req_gpus(struct server *s, const struct eerl__agent_req *r,
                       unsigned list[EERL__AGENT_GPU_INDEX_MAX + 1])
{
    size_t k, n = r->has_gpus ? r->n_gpus : s->n;

    for (k = 0; k < n; k++)
        list[k] = r->has_gpus ? r->gpus[k] : (unsigned)k;
    return n;
}

/* ---- handlers ---- */

static void h_hello(struct server *s, struct conn *c, struct eerl__agent_req *r)
{
    json_t *o = reply_new(r);
    char ver[64];

    snprintf(ver, sizeof(ver), "eerld %s", eerl_version_string());
    json_object_set_new(o, "v", json_integer(EERL_AGENT_PROTOCOL_VERSION));
    json_object_set_new(o, "server", json_string(ver));
    json_object_set_new(o, "gpus", json_integer(s->n));
    json_object_set_new(o, "heartbeat_ms", json_integer(s->cfg->heartbeat_ms));
    json_object_set_new(o, "uid", json_integer((json_int_t)c->uid));
    json_object_set_new(o, "pid", json_integer((json_int_t)c->pid));
    json_object_set_new(
        o, "may_lease",
        json_boolean(eerld_policy_may_lease(&s->policy, c->uid, c->gid, c->groups, c->n_groups)));
    queue_json(c, o);
    json_decref(o);
    c->hello = 1;
    snprintf(c->client, sizeof(c->client), "%s", r->client);
}

static void h_devices(struct server *s, struct conn *c, struct eerl__agent_req *r)
{
    json_t *o = reply_new(r), *arr = json_array();
    unsigned i;
    size_t k;

    for (i = 0; i < s->n; i++) {
        json_t *cl = json_array();
        unsigned f, ce;

        for (k = 0; k < s->g[i].n_clocks; k++)
            json_array_append_new(cl, json_integer(s->g[i].clocks[k]));
        eerld_policy_bounds(&s->policy, i, &f, &ce);
        json_array_append_new(arr,
                              json_pack("{s:i,s:s,s:s,s:o,s:i,s:i}", "gpu", (json_int_t)i, "uuid",
                                        s->g[i].uuid, "name", s->g[i].name, "clocks", cl,
                                        "floor_mhz", (json_int_t)f, "ceiling_mhz", (json_int_t)ce));
    }
    json_object_set_new(o, "gpus", arr);
    queue_json(c, o);
    json_decref(o);
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
static void submit(struct server *s, struct conn *c, struct job *j)
{
    j->c = c;
    if (!s->rd.running) {
        fill_job(s, s->dev, j);
        if (c)
            queue_json(c, j->reply);
        free_job(j);
        return;
    }
    if (c) {
        c->busy = 1;
        update_events(s, c);
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

static void process_lines(struct server *s, struct conn *c);
static void serve_buffered(struct server *s, struct conn *c);

static void finish_jobs(struct server *s)
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
            conn_release_memory(c);
        } else {
            c->busy = 0;
            c->last_seen = now_s(); /* the time its read took was eerld's, not its silence */
            queue_json(c, j->reply);
            flush_out(s, c);
            serve_buffered(s, c); /* what it sent meanwhile */
            if (c->closing)
                conn_free(s, c,
                          c->closing == 2 ? "connection closed" : "connection closed by eerld");
        }
        free_job(j);
    }
}

static struct job *job_new(const unsigned *gpus, size_t n)
{
    struct job *j = calloc(1, sizeof(*j));

    if (j) {
        memcpy(j->gpus, gpus, n * sizeof(*gpus));
        j->n = n;
    }
    return j;
}

static void h_read(struct server *s, struct conn *c, struct eerl__agent_req *r)
{
    unsigned list[EERL__AGENT_GPU_INDEX_MAX + 1];
    size_t n = req_gpus(s, r, list);
    json_t *o, *arr;
    struct job *j;

    if (check_gpus(s, c, r, list, n, 0) < 0)
        return;
    j = job_new(list, n);
    if (!j) {
        reply_refuse(c, r, EERL_ENOMEM, "out of memory");
        return;
    }
    o = reply_new(r);
    arr = json_array();
    json_object_set_new(o, "readings", arr);
    j->reply = o;
    submit(s, c, j);
}

static void h_status(struct server *s, struct conn *c, struct eerl__agent_req *r)
{
    unsigned list[EERL__AGENT_GPU_INDEX_MAX + 1];
    size_t n = req_gpus(s, r, list);
    json_t *o, *arr;
    struct job *j;
    size_t k;

    if (check_gpus(s, c, r, list, n, 0) < 0)
        return;
    j = job_new(list, n);
    if (!j) {
        reply_refuse(c, r, EERL_ENOMEM, "out of memory");
        return;
    }
    o = reply_new(r);
    arr = json_array();
    for (k = 0; k < n; k++) {
        unsigned i = list[k], f, ce;
        struct gpu *g = &s->g[i];
        json_t *x = json_pack("{s:i}", "gpu", (json_int_t)i); /* readings: fill_job */
        eerl_actuator_gpu_state st;

        json_object_set_new(x, "uuid", json_string(g->uuid));
        json_object_set_new(x, "name", json_string(g->name));
        eerld_policy_bounds(&s->policy, i, &f, &ce);
        json_object_set_new(x, "floor_mhz", json_integer(f));
        json_object_set_new(x, "ceiling_mhz", json_integer(ce));
        if (g->n_clocks) {
            json_object_set_new(x, "min_mhz", json_integer(g->clocks[g->n_clocks - 1]));
            json_object_set_new(x, "max_mhz", json_integer(g->clocks[0]));
        }
        memset(&st, 0, sizeof(st));
        eerl_actuator_gpu(g->act, i, &st);
        if (st.locked_max_mhz)
            json_object_set_new(
                x, "locked",
                json_pack("[i,i]", (json_int_t)st.locked_min_mhz, (json_int_t)st.locked_max_mhz));
        else
            json_object_set_new(x, "locked", json_null());
        if (g->holder)
            json_object_set_new(x, "holder",
                                json_pack("{s:i,s:i,s:s}", "uid", (json_int_t)g->holder_uid, "pid",
                                          (json_int_t)g->holder_pid, "client", g->holder->client));
        else
            json_object_set_new(x, "holder", json_null());
        if (g->dirty)
            json_object_set_new(x, "reset_pending", json_true());
        json_array_append_new(arr, x);
    }
    json_object_set_new(o, "gpus", arr);
    j->reply = o;
    j->items = arr;
    submit(s, c, j);
}

static void h_lease(struct server *s, struct conn *c, struct eerl__agent_req *r)
{
    char msg[512];
    size_t k;
    json_t *o;

    if (!eerld_policy_may_lease(&s->policy, c->uid, c->gid, c->groups, c->n_groups)) {
        snprintf(msg, sizeof(msg),
                 "uid %u may not lease GPUs: not root and not in [access] users or groups of the "
                 "policy %s%s",
                 (unsigned)c->uid, s->cfg->policy_path,
                 s->have_policy_file ? "" : " (no policy file: only root may lease)");
        reply_refuse(c, r, EERL_ENOPERM, msg);
        return;
    }
    if (check_gpus(s, c, r, r->gpus, r->n_gpus, 0) < 0)
        return;
    for (k = 0; k < r->n_gpus; k++) {
        struct gpu *g = &s->g[r->gpus[k]];

        if (g->holder && g->holder != c) {
            holder_text(g, r->gpus[k], msg, sizeof(msg));
            reply_refuse(c, r, EERL_EBUSY, msg);
            return;
        }
    }
    msg[0] = '\0';
    for (k = 0; k < r->n_gpus; k++) {
        struct gpu *g = &s->g[r->gpus[k]];
        size_t used = strlen(msg);

        if (g->holder == c)
            continue;
        g->holder = c;
        g->holder_uid = (unsigned)c->uid;
        g->holder_pid = (unsigned)c->pid;
        c->n_leased++;
        snprintf(msg + used, sizeof(msg) - used, "%s%u", used ? "," : "", r->gpus[k]);
    }
    if (msg[0]) /* grants are logged as their ends are (disconnect, release, reset) */
        eerld_log(LOG_INFO, "uid %u pid %u: leased GPU%s %s", (unsigned)c->uid, (unsigned)c->pid,
                  strchr(msg, ',') ? "s" : "", msg);
    o = reply_new(r);
    queue_json(c, o);
    json_decref(o);
}

static void h_set(struct server *s, struct conn *c, struct eerl__agent_req *r)
{
    char msg[512];
    size_t k;
    int e;

    if (check_gpus(s, c, r, r->gpus, r->n_gpus, 1) < 0)
        return;
    if (r->max_mhz) {
        for (k = 0; k < r->n_gpus; k++) {
            if ((e = check_clock(s, c, r->gpus[k], r->min_mhz, msg, sizeof(msg))) < 0 ||
                (e = check_clock(s, c, r->gpus[k], r->max_mhz, msg, sizeof(msg))) < 0) {
                reply_refuse(c, r, e, msg);
                return;
            }
        }
    }
    apply_clocks(s, c, r, r->gpus, r->n_gpus, r->min_mhz, r->max_mhz);
}

static void h_pool(struct server *s, struct conn *c, struct eerl__agent_req *r)
{
    char msg[512];
    struct pool *p = NULL;
    size_t k;
    int ph, e;
    json_t *o;

    if (check_gpus(s, c, r, r->gpus, r->n_gpus, 1) < 0)
        return;
    for (ph = 0; ph < 3; ph++)
        for (k = 0; r->pool_mhz[ph] && k < r->n_gpus; k++)
            if ((e = check_clock(s, c, r->gpus[k], r->pool_mhz[ph], msg, sizeof(msg))) < 0) {
                char full[600];

                snprintf(full, sizeof(full), "pool '%s', %s clock: %s", r->pool,
                         eerl__agent_phase_name((eerl_agent_phase)ph), msg);
                reply_refuse(c, r, e, full);
                return;
            }
    for (k = 0; k < c->n_pools; k++)
        if (!strcmp(c->pools[k].name, r->pool))
            p = &c->pools[k];
    if (!p) {
        if (c->n_pools == POOLS_MAX) {
            snprintf(msg, sizeof(msg), "a connection may define at most %d pools", POOLS_MAX);
            reply_refuse(c, r, EERL_EOVERFLOW, msg);
            return;
        }
        p = &c->pools[c->n_pools++];
    }
    snprintf(p->name, sizeof(p->name), "%s", r->pool);
    memcpy(p->gpus, r->gpus, r->n_gpus * sizeof(unsigned));
    p->n = r->n_gpus;
    memcpy(p->mhz, r->pool_mhz, sizeof(p->mhz));
    o = reply_new(r);
    queue_json(c, o);
    json_decref(o);
}

static void h_phase(struct server *s, struct conn *c, struct eerl__agent_req *r)
{
    char msg[512], full[600];
    size_t k, g;
    unsigned mhz;
    int e;

    for (k = 0; k < c->n_pools; k++)
        if (!strcmp(c->pools[k].name, r->pool))
            break;
    if (k == c->n_pools) {
        snprintf(msg, sizeof(msg), "no pool named '%s' on this connection; define it first",
                 r->pool);
        reply_refuse(c, r, EERL_ENOENT, msg);
        return;
    }
    if (check_gpus(s, c, r, c->pools[k].gpus, c->pools[k].n, 1) < 0)
        return;
    mhz = c->pools[k].mhz[r->phase];
    /* Checked again now: a policy reloaded since the pool was defined applies. */
    for (g = 0; mhz && g < c->pools[k].n; g++)
        if ((e = check_clock(s, c, c->pools[k].gpus[g], mhz, msg, sizeof(msg))) < 0) {
            snprintf(full, sizeof(full), "pool '%s', %s clock: %s", r->pool,
                     eerl__agent_phase_name(r->phase), msg);
            reply_refuse(c, r, e, full);
            return;
        }
    apply_clocks(s, c, r, c->pools[k].gpus, c->pools[k].n, mhz, mhz);
}

static void h_release(struct server *s, struct conn *c, struct eerl__agent_req *r)
{
    size_t k;
    int changed = 0;
    json_t *o;

    if (r->has_gpus) {
        if (check_gpus(s, c, r, r->gpus, r->n_gpus, 1) < 0)
            return;
        for (k = 0; k < r->n_gpus; k++)
            changed |= drop_lease(s, r->gpus[k], "release");
    } else {
        unsigned i;
        for (i = 0; i < s->n; i++)
            if (s->g[i].holder == c)
                changed |= drop_lease(s, i, "release");
    }
    if (changed)
        journal_sync(s);
    o = reply_new(r);
    queue_json(c, o);
    json_decref(o);
}

static void h_reset(struct server *s, struct conn *c, struct eerl__agent_req *r)
{
    char msg[512];
    unsigned list[1024];
    size_t n = 0, k;
    int changed = 0, first = 0;
    json_t *o, *done;

    if (r->has_gpus) {
        if (check_gpus(s, c, r, r->gpus, r->n_gpus, 0) < 0)
            return;
        for (k = 0; k < r->n_gpus; k++)
            list[n++] = r->gpus[k];
    } else {
        unsigned i;
        for (i = 0; i < s->n && n < 1024; i++)
            if (is_root(c) || (s->g[i].holder && s->g[i].holder_uid == (unsigned)c->uid))
                list[n++] = i;
    }
    if (!is_root(c))
        for (k = 0; k < n; k++) {
            struct gpu *g = &s->g[list[k]];

            if (!g->holder || g->holder_uid != (unsigned)c->uid) {
                if (g->holder)
                    holder_text(g, list[k], msg, sizeof(msg));
                else
                    snprintf(msg, sizeof(msg), "GPU %u is not leased", list[k]);
                snprintf(msg + strlen(msg), sizeof(msg) - strlen(msg),
                         "; only root or the holder may reset it");
                reply_refuse(c, r, EERL_ENOPERM, msg);
                return;
            }
        }
    done = json_array();
    msg[0] = '\0';
    for (k = 0; k < n; k++) {
        unsigned i = list[k];
        struct gpu *g = &s->g[i];
        int e;

        if (g->holder && g->holder != c)
            eerld_log(LOG_INFO, "GPU %u: uid %u pid %u reset it, ending the lease of uid %u pid %u",
                      i, (unsigned)c->uid, (unsigned)c->pid, g->holder_uid, g->holder_pid);
        changed |= drop_lease(s, i, "reset");
        /* Root's reset also clears a lock eerld did not make (a job that locked in-process). */
        e = g->dirty ? EERL_EIO : is_root(c) ? eerl_device_reset_sm_clocks(s->dev, i) : 0;
        if (e < 0) {
            if (!first)
                first = e;
            snprintf(msg + strlen(msg), sizeof(msg) - strlen(msg), "%sGPU %u: %s (%s)",
                     msg[0] ? "; " : "", i, eerl_strerror(e), eerl_device_last_error(s->dev));
        } else {
            json_array_append_new(done, json_integer(i));
        }
    }
    if (changed)
        journal_sync(s);
    if (first) {
        json_decref(done);
        reply_refuse(c, r, first, msg);
        return;
    }
    o = reply_new(r);
    json_object_set_new(o, "reset", done);
    queue_json(c, o);
    json_decref(o);
}

static void handle_line(struct server *s, struct conn *c, const char *line, size_t len)
{
    struct eerl__agent_req r;
    char why[256];
    uint64_t id = 0;
    int has_id = 0;
    json_t *o;

    c->last_seen = now_s(); /* a request, not any byte, keeps a connection alive */
    if (c->refusal) {
        (void)eerl__agent_parse_request(line, len, &r, &id, &has_id, why, sizeof(why));
        reply_err_id(c, has_id, id, EERL_EBUSY, "%s", c->refusal);
        c->closing = 1;
        return;
    }
    if (eerl__agent_parse_request(line, len, &r, &id, &has_id, why, sizeof(why)) < 0) {
        reply_err_id(c, has_id, id, EERL_EPARSE, "malformed request: %s; closing the connection",
                     why);
        eerld_log(LOG_WARNING, "uid %u pid %u: malformed request (%s); connection closed",
                  (unsigned)c->uid, (unsigned)c->pid, why);
        c->closing = 1;
        return;
    }
    if (!c->hello && r.op != EERL__OP_HELLO) {
        reply_err_id(c, has_id, id, EERL_EPARSE,
                     "the first request must be hello; closing the connection");
        c->closing = 1;
        return;
    }
    switch (r.op) {
    case EERL__OP_HELLO:
        if (r.version != EERL_AGENT_PROTOCOL_VERSION) {
            reply_err_id(c, has_id, id, EERL_EVERSION,
                         "protocol version %u is not supported; this eerld speaks version %d",
                         r.version, EERL_AGENT_PROTOCOL_VERSION);
            c->closing = 1;
            return;
        }
        h_hello(s, c, &r);
        break;
    case EERL__OP_DEVICES:
        h_devices(s, c, &r);
        break;
    case EERL__OP_STATUS:
        h_status(s, c, &r);
        break;
    case EERL__OP_READ:
        h_read(s, c, &r);
        break;
    case EERL__OP_LEASE:
        h_lease(s, c, &r);
        break;
    case EERL__OP_SET:
        h_set(s, c, &r);
        break;
    case EERL__OP_POOL:
        h_pool(s, c, &r);
        break;
    case EERL__OP_PHASE:
        h_phase(s, c, &r);
        break;
    case EERL__OP_RELEASE:
        h_release(s, c, &r);
        break;
    case EERL__OP_RESET:
        h_reset(s, c, &r);
        break;
    case EERL__OP_HEARTBEAT:
    default:
        o = reply_new(&r);
        queue_json(c, o);
        json_decref(o);
        break;
    }
}

/* Handles every complete line in c's buffer, until one hands a read to the reader thread. */
static void process_lines(struct server *s, struct conn *c)
{
    size_t start = 0;
    char *nl;

    while (!c->closing && !c->busy && c->out_len < OUT_PAUSE &&
           (nl = memchr(c->in + start, '\n', c->in_len - start))) {
        handle_line(s, c, c->in + start, (size_t)(nl - (c->in + start)));
        start = (size_t)(nl - c->in) + 1;
    }
    memmove(c->in, c->in + start, c->in_len - start);
    c->in_len -= start;
    if (!c->closing && !c->busy && c->out_len < OUT_PAUSE && c->in_len == EERL_AGENT_MSG_MAX) {
        reply_err_id(c, 0, 0, EERL_EPARSE,
                     "malformed request: no newline within %d bytes (the message limit); "
                     "closing the connection",
                     EERL_AGENT_MSG_MAX);
        eerld_log(LOG_WARNING, "uid %u pid %u: message over %d bytes; connection closed",
                  (unsigned)c->uid, (unsigned)c->pid, EERL_AGENT_MSG_MAX);
        c->closing = 1;
    }
}

/* Reads what is there and handles every complete line. */
static void conn_readable(struct server *s, struct conn *c)
{
    for (;;) {
        ssize_t n;

        if (c->closing || c->busy || c->out_len >= OUT_PAUSE)
            return; /* replies wait to be read: its requests wait too */
        n = recv(c->fd, c->in + c->in_len, EERL_AGENT_MSG_MAX - c->in_len, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0) {
            c->closing = 2; /* peer closed (or half-closed) its side */
            return;
        }
        c->in_len += (size_t)n;
        process_lines(s, c);
        if (c->out_len >= OUT_PAUSE)
            flush_out(s, c); /* a pipelining client: keep the reply queue short */
    }
}

/* After replies went out: serves the requests that waited in c's buffer while they were
 * queued (the socket's own input is read again through the loop). */
static void serve_buffered(struct server *s, struct conn *c)
{
    while (!c->closing && !c->busy && c->out_len < OUT_PAUSE && c->in_len &&
           memchr(c->in, '\n', c->in_len)) {
        size_t before = c->in_len;

        process_lines(s, c);
        flush_out(s, c);
        if (c->in_len == before)
            break;
    }
    update_events(s, c);
}

/* The peer's supplementary groups, as the kernel recorded them when it connected. */
static int peer_groups(int fd, gid_t **ret, size_t *ret_n)
{
    socklen_t len = 64 * sizeof(gid_t);
    gid_t *g = malloc(len);

    if (!g)
        return -1;
    while (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, g, &len) < 0) {
        gid_t *bigger;

        if (errno != ERANGE || len == 0) {
            free(g);
            return -1;
        }
        bigger = realloc(g, len);
        if (!bigger) {
            free(g);
            return -1;
        }
        g = bigger;
    }
    *ret = g;
    *ret_n = len / sizeof(gid_t);
    return 0;
}

/* The listening socket stops being polled for a while (an accept error that would repeat on
 * every wake-up: without this the loop would spin). */
static int listen_tag, signal_tag; /* epoll data of the listening socket and the signalfd */

static void pause_accept(struct server *s, double seconds)
{
    struct epoll_event ev = {.events = 0, .data.ptr = &listen_tag};

    epoll_ctl(s->epfd, EPOLL_CTL_MOD, s->lfd, &ev);
    s->accept_resume = now_s() + seconds;
}

static void resume_accept(struct server *s)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &listen_tag};

    if (s->accept_resume > 0 && now_s() >= s->accept_resume) {
        s->accept_resume = 0;
        epoll_ctl(s->epfd, EPOLL_CTL_MOD, s->lfd, &ev);
    }
}

/* Out of descriptors (EMFILE, ENFILE): the classic reserve: give up the spare descriptor,
 * accept the waiting connection and close it at once (the client sees it closed, instead of
 * eerld waking up for it forever), take the spare back. Logged once until accepting works. */
static void accept_short(struct server *s, int err)
{
    int fd;

    if (!s->fd_short)
        eerld_log(LOG_WARNING,
                  "out of file descriptors (%s) with %u connections: closing new connections "
                  "until some end (raise the descriptor limit, e.g. LimitNOFILE=)",
                  strerror(err), s->n_conns);
    s->fd_short = 1;
    if (s->reserve_fd < 0) {
        pause_accept(s, ACCEPT_PAUSE_MS / 1000.0);
        return;
    }
    close(s->reserve_fd);
    s->reserve_fd = -1;
    while ((fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC)) >= 0)
        close(fd); /* every one waiting: none can be served now */
    s->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (s->reserve_fd < 0)
        pause_accept(s, ACCEPT_PAUSE_MS / 1000.0);
}

static void accept_all(struct server *s)
{
    if (s->accept_resume > 0)
        return;
    for (;;) {
        struct ucred cred;
        socklen_t len = sizeof(cred);
        struct conn *c, *x;
        unsigned same = 0;
        int refuse;
        int fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        struct epoll_event ev;

        if (fd < 0) {
            int err = errno;

            if (err == EINTR || err == ECONNABORTED)
                continue;
            if (err == EAGAIN || err == EWOULDBLOCK)
                return;
            if (err == EMFILE || err == ENFILE) {
                accept_short(s, err);
                return;
            }
            if (!s->accept_err)
                eerld_log(LOG_WARNING, "accept: %s; pausing new connections for %d ms",
                          strerror(err), ACCEPT_PAUSE_MS);
            s->accept_err = 1;
            pause_accept(s, ACCEPT_PAUSE_MS / 1000.0);
            return;
        }
        if (s->fd_short || s->accept_err) {
            eerld_log(LOG_INFO, "accepting connections again (%u open)", s->n_conns);
            s->fd_short = s->accept_err = 0;
        }
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
            eerld_log(LOG_WARNING, "SO_PEERCRED: %s; connection refused", strerror(errno));
            close(fd);
            continue;
        }
        for (x = s->conns; x; x = x->next)
            same += x->uid == cred.uid && !x->refusal;
        refuse = cred.uid != 0 && (s->n_conns - s->n_refused >= s->policy.max_connections ||
                                   same >= s->policy.max_connections_per_user);
        if (refuse && s->n_refused >= 64) {
            close(fd); /* a flood of refused connections: not even an answer */
            continue;
        }
        c = calloc(1, sizeof(*c));
        if (!c || !(c->in = malloc(EERL_AGENT_MSG_MAX))) {
            free(c);
            close(fd);
            continue;
        }
        if (peer_groups(fd, &c->groups, &c->n_groups) < 0) {
            /* Only its primary group counts then: never the user's groups from NSS. */
            eerld_log(LOG_WARNING,
                      "uid %u pid %u: SO_PEERGROUPS: %s; its supplementary groups do not count",
                      (unsigned)cred.uid, (unsigned)cred.pid, strerror(errno));
            c->groups = NULL;
            c->n_groups = 0;
        }
        if (refuse) {
            /* Answered at its first request (the hello), so the client reads why instead of
             * finding a closed socket. */
            char msg[256];

            snprintf(msg, sizeof(msg),
                     "too many connections: %u in total (limit %u), %u from uid %u (limit %u)",
                     s->n_conns - s->n_refused, s->policy.max_connections, same, (unsigned)cred.uid,
                     s->policy.max_connections_per_user);
            c->refusal = strdup(msg);
            if (!c->refusal) {
                conn_release_memory(c);
                close(fd);
                continue;
            }
            eerld_log(LOG_WARNING, "uid %u pid %u: connection refused: %s", (unsigned)cred.uid,
                      (unsigned)cred.pid, msg);
        }
        c->fd = fd;
        c->uid = cred.uid;
        c->gid = cred.gid;
        c->pid = cred.pid;
        c->srv = s;
        c->last_seen = c->accepted_at = now_s();
        ev.events = EPOLLIN;
        c->events = EPOLLIN;
        ev.data.ptr = c;
        if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
            conn_release_memory(c);
            close(fd);
            continue;
        }
        c->next = s->conns;
        if (s->conns)
            s->conns->prev = c;
        s->conns = c;
        s->n_conns++;
        s->n_refused += c->refusal != NULL;
    }
}

/* ---- setup ---- */

static int open_devices(struct server *s)
{
    const char *d = s->cfg->devices;
    char why[512] = "";
    int e;

    if (!strcmp(d, "nvml")) {
        e = eerl_device_open_nvml_ex(why, sizeof(why), &s->dev);
        if (e < 0) {
            eerld_log(LOG_ERR, "cannot open NVML: %s%s%s", eerl_strerror(e), why[0] ? ": " : "",
                      why);
            return -1;
        }
    } else if (!strncmp(d, "twin:", 5)) {
        char model[16];
        const char *x = strrchr(d, 'x');
        unsigned long n;
        char *end;

        if (!x || x <= d + 5 || (size_t)(x - d - 5) >= sizeof(model) || x[1] < '0' || x[1] > '9')
            goto bad_twin;
        n = strtoul(x + 1, &end, 10);
        if (*end || n == 0 || n > 1024)
            goto bad_twin;
        memcpy(model, d + 5, (size_t)(x - d - 5));
        model[x - d - 5] = '\0';
        e = eerl__twin_idle_device(model, (unsigned)n, &s->dev);
        if (e < 0) {
            eerld_log(LOG_ERR, "--devices %s: unknown twin GPU '%s' (valid: %s)", d, model,
                      eerl_twin_gpu_names());
            return -1;
        }
    } else {
        goto bad_twin;
    }
    return 0;
bad_twin:
    eerld_log(LOG_ERR, "--devices '%s' is not valid: give nvml or twin:GPUxN (e.g. twin:h100x8)",
              d);
    return -1;
}

static int load_gpus(struct server *s)
{
    unsigned i;
    int e;

    if ((e = eerl_device_count(s->dev, &s->n)) < 0) {
        eerld_log(LOG_ERR, "cannot count GPUs: %s (%s)", eerl_strerror(e),
                  eerl_device_last_error(s->dev));
        return -1;
    }
    if (s->n == 0) {
        eerld_log(LOG_ERR, "no GPUs found");
        return -1;
    }
    s->g = calloc(s->n, sizeof(*s->g));
    if (!s->g)
        return -1;
    for (i = 0; i < s->n; i++) {
        struct gpu *g = &s->g[i];

        if (eerl_device_uuid(s->dev, i, g->uuid, sizeof(g->uuid)) < 0)
            snprintf(g->uuid, sizeof(g->uuid), "unknown-%u", i);
        if (eerl_device_name(s->dev, i, g->name, sizeof(g->name)) < 0)
            snprintf(g->name, sizeof(g->name), "unknown");
        if ((e = eerl_device_supported_sm_clocks(s->dev, i, g->clocks, EERL_DEVICE_CLOCKS_MAX,
                                                 &g->n_clocks)) < 0)
            eerld_log(LOG_WARNING, "GPU %u: cannot read supported clocks: %s (%s)", i,
                      eerl_strerror(e), eerl_device_last_error(s->dev));
        if ((e = eerl_actuator_new(s->dev, 0, &g->act)) < 0) {
            eerld_log(LOG_ERR, "GPU %u: %s", i, eerl_strerror(e));
            return -1;
        }
    }
    return 0;
}

/* Resets every GPU the journal names, before the socket exists. */
static int recover(struct server *s)
{
    struct eerld_journal_entry *e = NULL;
    size_t n = 0, k;
    unsigned i;
    int all = 0, changed = 0;

    if (eerld_journal_read(s->state_fd, s->cfg->state_dir, &e, &n, s->why, sizeof(s->why)) < 0) {
        eerld_log(LOG_WARNING, "%s; resetting every GPU", s->why);
        all = 1;
    }
    for (i = 0; i < s->n; i++) {
        int named = all;

        for (k = 0; k < n && !named; k++)
            named = !strcmp(e[k].uuid, s->g[i].uuid);
        if (!named)
            continue;
        s->g[i].journaled = 1;
        s->g[i].dirty = 1;
        for (k = 0; k < n; k++)
            if (!strcmp(e[k].uuid, s->g[i].uuid)) {
                s->g[i].holder_uid = e[k].uid;
                s->g[i].holder_pid = e[k].pid;
            }
        if (eerl_device_reset_sm_clocks(s->dev, i) == 0) {
            eerld_log(LOG_INFO, "journal: reset GPU %u (%s), left changed for uid %u pid %u", i,
                      s->g[i].uuid, s->g[i].holder_uid, s->g[i].holder_pid);
            s->g[i].journaled = 0;
            s->g[i].dirty = 0;
            changed = 1;
        } else {
            eerld_log(LOG_ERR, "journal: reset of GPU %u (%s) failed: %s; retrying", i,
                      s->g[i].uuid, eerl_device_last_error(s->dev));
        }
    }
    for (k = 0; k < n; k++) {
        for (i = 0; i < s->n; i++)
            if (!strcmp(e[k].uuid, s->g[i].uuid))
                break;
        if (i == s->n)
            eerld_log(LOG_WARNING, "journal names GPU %s (index %u), which is not present",
                      e[k].uuid, e[k].gpu);
    }
    free(e);
    if (changed || all || n)
        return journal_sync(s);
    return journal_sync(s); /* also proves the state dir is writable before serving */
}

static int make_dirs(struct server *s)
{
    char dir[4096];
    char *slash;

    if (mkdir(s->cfg->state_dir, 0700) < 0 && errno != EEXIST) {
        eerld_log(LOG_ERR, "cannot create state dir %s: %s", s->cfg->state_dir, strerror(errno));
        return -1;
    }
    snprintf(dir, sizeof(dir), "%s", s->cfg->socket_path);
    slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = '\0';
        if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
            eerld_log(LOG_ERR, "cannot create socket dir %s: %s", dir, strerror(errno));
            return -1;
        }
    }
    return 0;
}

/* The state dir: checked (root's, writable by nobody else), then locked, before anything in
 * it is read or any GPU touched: a second eerld on the same state dir stops here. */
static int lock_state_dir(struct server *s)
{
    char why[600], pid[32];
    ssize_t n;

    if (eerld_dir_open("state dir", s->cfg->state_dir, 0, &s->state_fd, why, sizeof(why)) < 0) {
        eerld_log(LOG_ERR, "%s", why);
        return -1;
    }
    s->lock_fd = openat(s->state_fd, LOCK_FILE, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (s->lock_fd < 0) {
        eerld_log(LOG_ERR, "cannot open %s/%s: %s", s->cfg->state_dir, LOCK_FILE, strerror(errno));
        return -1;
    }
    if (flock(s->lock_fd, LOCK_EX | LOCK_NB) < 0) {
        int err = errno;

        n = pread(s->lock_fd, pid, sizeof(pid) - 1, 0);
        pid[n > 0 ? n : 0] = '\0';
        pid[strcspn(pid, "\n")] = '\0';
        if (err == EWOULDBLOCK)
            eerld_log(LOG_ERR,
                      "another eerld (pid %s) holds the state dir %s: refusing to start; nothing "
                      "was reset or changed",
                      pid[0] ? pid : "unknown", s->cfg->state_dir);
        else
            eerld_log(LOG_ERR, "cannot lock %s/%s: %s", s->cfg->state_dir, LOCK_FILE,
                      strerror(err));
        close(s->lock_fd);
        s->lock_fd = -1;
        return -1;
    }
    n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
    if (ftruncate(s->lock_fd, 0) < 0 || pwrite(s->lock_fd, pid, (size_t)n, 0) != n)
        eerld_log(LOG_WARNING, "cannot write the pid to %s/%s: %s", s->cfg->state_dir, LOCK_FILE,
                  strerror(errno));
    return 0;
}

/* The socket's directory must be one nobody else can write (or a sticky one, like /tmp): the
 * owner and mode are set by path after bind, and nobody may swap the path meanwhile. And a
 * daemon already serving the socket means this one must not start: checked before any GPU
 * is touched. */
static int check_socket_path(struct server *s)
{
    char dir[4096], why[600];
    const char *path = s->cfg->socket_path, *slash = strrchr(path, '/');
    struct sockaddr_un sa;
    struct stat st;
    int dfd, probe;

    if (strlen(path) >= sizeof(sa.sun_path)) {
        eerld_log(LOG_ERR, "--socket '%s' is longer than %zu bytes", path, sizeof(sa.sun_path) - 1);
        return -1;
    }
    if (!slash)
        snprintf(dir, sizeof(dir), ".");
    else if (slash == path)
        snprintf(dir, sizeof(dir), "/");
    else
        snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
    if (eerld_dir_open("socket dir", dir, 1, &dfd, why, sizeof(why)) < 0) {
        eerld_log(LOG_ERR, "%s", why);
        return -1;
    }
    close(dfd);
    if (s->cfg->socket_group) {
        struct group *gr = getgrnam(s->cfg->socket_group);

        if (!gr && s->cfg->group_explicit) {
            eerld_log(LOG_ERR, "--socket-group '%s': no such group", s->cfg->socket_group);
            return -1;
        }
        if (!gr)
            eerld_log(LOG_WARNING,
                      "group '%s' does not exist: the socket stays root's only (create it with "
                      "'groupadd --system %s' and add the users who may talk to eerld)",
                      s->cfg->socket_group, s->cfg->socket_group);
        else {
            s->sock_gid = gr->gr_gid;
            s->have_sock_gid = 1;
        }
    }
    if (lstat(path, &st) < 0)
        return 0;
    if (!S_ISSOCK(st.st_mode)) {
        eerld_log(LOG_ERR, "%s exists and is not a socket; refusing to replace it", path);
        return -1;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
        close(probe);
        eerld_log(LOG_ERR,
                  "another eerld is serving %s: refusing to start; nothing was reset or "
                  "changed",
                  path);
        return -1;
    }
    if (probe >= 0)
        close(probe);
    return 0;
}

/* The metrics file's directory, checked like the state dir and kept open: the file is
 * written relative to it. */
static int open_metrics_dir(struct server *s)
{
    char dir[4096], why[600];
    const char *path = s->cfg->metrics_path, *slash;

    if (!path)
        return 0;
    slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, sizeof(dir), ".");
    else if (slash == path)
        snprintf(dir, sizeof(dir), "/");
    else
        snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
    s->metrics_name = slash ? slash + 1 : path;
    if (!s->metrics_name[0]) {
        eerld_log(LOG_ERR, "--metrics-textfile '%s' names a directory, not a file", path);
        return -1;
    }
    if (eerld_dir_open("metrics textfile dir", dir, 0, &s->metrics_fd, why, sizeof(why)) < 0) {
        eerld_log(LOG_ERR, "%s", why);
        return -1;
    }
    return 0;
}

static int listen_socket(struct server *s)
{
    struct sockaddr_un sa;
    const char *path = s->cfg->socket_path;
    struct stat st;
    mode_t old;
    int fd;

    if (strlen(path) >= sizeof(sa.sun_path)) {
        eerld_log(LOG_ERR, "--socket '%s' is longer than %zu bytes", path, sizeof(sa.sun_path) - 1);
        return -1;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    if (lstat(path, &st) == 0) {
        int probe;

        if (!S_ISSOCK(st.st_mode)) {
            eerld_log(LOG_ERR, "%s exists and is not a socket; refusing to replace it", path);
            return -1;
        }
        probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
            close(probe);
            eerld_log(LOG_ERR, "another eerld is serving %s", path);
            return -1;
        }
        if (probe >= 0)
            close(probe);
        unlink(path); /* stale, from a daemon that was killed */
    }
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        eerld_log(LOG_ERR, "socket: %s", strerror(errno));
        return -1;
    }
    old = umask(0177); /* never world-accessible, not even for an instant */
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        umask(old);
        eerld_log(LOG_ERR, "cannot bind %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    umask(old);
    /* The directory is checked (check_socket_path): nobody else can swap the path between the
     * bind and these; lchown would not follow a link anyway. */
    if ((s->have_sock_gid && lchown(path, (uid_t)-1, s->sock_gid) < 0) ||
        chmod(path, s->cfg->socket_mode) < 0) {
        eerld_log(LOG_ERR, "cannot set owner/mode of %s: %s", path, strerror(errno));
        close(fd);
        unlink(path);
        return -1;
    }
    if (listen(fd, 128) < 0) {
        eerld_log(LOG_ERR, "listen: %s", strerror(errno));
        close(fd);
        unlink(path);
        return -1;
    }
    s->lfd = fd;
    return 0;
}

static int load_policy(struct server *s)
{
    char why[512];

    if (access(s->cfg->policy_path, F_OK) < 0 && !s->cfg->policy_explicit) {
        eerld_log(LOG_WARNING, "no policy file %s: only root may lease GPUs", s->cfg->policy_path);
        eerld_policy_default(&s->policy);
        s->have_policy_file = 0;
        return 0;
    }
    if (eerld_policy_load(s->cfg->policy_path, &s->policy, why, sizeof(why)) < 0) {
        eerld_log(LOG_ERR, "%s", why);
        return -1;
    }
    s->have_policy_file = 1;
    return 0;
}

static void write_metrics(struct server *s)
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
    submit(s, NULL, j);
}

/* The reader thread, for a backend whose reads are slow (NVML). Without one, reads run inline. */
static void start_reader(struct server *s)
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
static void stop_reader(struct server *s)
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
                conn_release_memory(j->c);
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

/* After a policy reload: a lease whose holder may no longer lease ends (its GPUs reset), and a
 * clock locked outside the new floor or ceiling goes back to the governor (the lease stays).
 * Pools are checked again at each phase switch (h_phase). */
static void recheck_leases(struct server *s)
{
    struct conn *c;
    unsigned i;
    int changed = 0;

    for (c = s->conns; c; c = c->next)
        if (c->n_leased &&
            !eerld_policy_may_lease(&s->policy, c->uid, c->gid, c->groups, c->n_groups)) {
            eerld_log(LOG_INFO,
                      "uid %u pid %u may no longer lease GPUs (policy %s reloaded): its "
                      "leases end and its GPUs are reset",
                      (unsigned)c->uid, (unsigned)c->pid, s->cfg->policy_path);
            for (i = 0; i < s->n && c->n_leased; i++)
                if (s->g[i].holder == c)
                    changed |= drop_lease(s, i, "policy reload");
        }
    for (i = 0; i < s->n; i++) {
        struct gpu *g = &s->g[i];
        eerl_actuator_gpu_state st;
        unsigned f, ce;

        if (!g->holder || g->holder->uid == 0)
            continue;
        memset(&st, 0, sizeof(st));
        eerl_actuator_gpu(g->act, i, &st);
        eerld_policy_bounds(&s->policy, i, &f, &ce);
        if (!st.locked_max_mhz || !((f && st.locked_min_mhz < f) || (ce && st.locked_max_mhz > ce)))
            continue;
        eerld_log(LOG_INFO,
                  "GPU %u: locked %u-%u MHz for uid %u pid %u is outside the reloaded policy's "
                  "%u-%u MHz: back to the default governor (the lease stays)",
                  i, st.locked_min_mhz, st.locked_max_mhz, g->holder_uid, g->holder_pid, f, ce);
        if (eerl_actuator_restore(g->act) < 0) {
            eerld_log(LOG_ERR, "GPU %u: reset failed: %s; retrying every %d ms", i,
                      eerl_actuator_last_error(g->act), RETRY_MS);
            g->dirty = 1;
        }
    }
    if (changed)
        journal_sync(s);
}

static void on_signal(struct server *s)
{
    struct signalfd_siginfo si;

    while (read(s->sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
        if (si.ssi_signo == SIGHUP) {
            struct eerld_policy old = s->policy;

            if (load_policy(s) < 0) {
                s->policy = old;
                eerld_log(LOG_ERR, "SIGHUP: keeping the previous policy");
            } else {
                eerld_log(LOG_INFO, "SIGHUP: policy reloaded from %s", s->cfg->policy_path);
                recheck_leases(s);
            }
        } else {
            eerld_log(LOG_INFO, "signal %u: resetting every GPU and exiting", si.ssi_signo);
            s->stop = 1;
        }
    }
}

static void sweep(struct server *s)
{
    double t = now_s(), limit = (double)s->cfg->heartbeat_ms / 1000.0;
    struct conn *c, *next;

    for (c = s->conns; c; c = next) {
        char why[160];

        next = c->next;
        if (c->closing || c->busy)
            continue; /* busy: it waits for eerld's reader, not the other way round */
        if (!c->hello && t - c->accepted_at > limit) {
            snprintf(why, sizeof(why), "no hello within %.1f s of connecting (limit %u ms)",
                     t - c->accepted_at, s->cfg->heartbeat_ms);
        } else if (t - c->last_seen > limit) {
            if (c->out_len >= OUT_PAUSE)
                snprintf(why, sizeof(why),
                         "not reading its replies (%zu bytes unread) for %.1f s (heartbeat "
                         "timeout %u ms)",
                         c->out_len, t - c->last_seen, s->cfg->heartbeat_ms);
            else
                snprintf(why, sizeof(why),
                         "no request for %.1f s (heartbeat timeout %u ms; a partial line "
                         "does not count)",
                         t - c->last_seen, s->cfg->heartbeat_ms);
        } else {
            continue;
        }
        eerld_log(LOG_INFO, "uid %u pid %u: %s; connection closed", (unsigned)c->uid,
                  (unsigned)c->pid, why);
        conn_free(s, c, why);
    }
    resume_accept(s);
    if (t >= s->next_retry) {
        retry_dirty(s);
        s->next_retry = t + RETRY_MS / 1000.0;
    }
    if (s->cfg->metrics_path && t >= s->next_metrics) {
        write_metrics(s);
        s->next_metrics = t + (double)s->cfg->metrics_interval_ms / 1000.0;
    }
}

static int shutdown_all(struct server *s)
{
    unsigned i;
    int bad = 0;

    while (s->conns)
        conn_free(s, s->conns, "eerld is stopping");
    for (i = 0; i < s->n; i++) {
        /* Everything eerld changed, and anything it was still retrying. */
        if (s->g[i].journaled || s->g[i].dirty) {
            if (eerl_device_reset_sm_clocks(s->dev, i) == 0) {
                s->g[i].journaled = 0;
                s->g[i].dirty = 0;
            } else {
                eerld_log(LOG_ERR,
                          "GPU %u (%s): reset at exit failed: %s; it stays in the "
                          "journal for the next start",
                          i, s->g[i].uuid, eerl_device_last_error(s->dev));
                bad = 1;
            }
        }
    }
    journal_sync(s);
    return bad;
}

int eerld_run(const struct eerld_config *cfg, int ready_fd)
{
    struct server *s = calloc(1, sizeof(*s));
    struct epoll_event ev, evs[64];
    sigset_t mask;
    int rc = 1, n, k, accept_pending = 0, done_pending = 0;
    unsigned i;

    if (!s)
        return 1;
    s->cfg = cfg;
    s->lfd = s->epfd = s->sfd = s->rd.efd = -1;
    s->state_fd = s->lock_fd = s->metrics_fd = s->reserve_fd = -1;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGHUP);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    signal(SIGPIPE, SIG_IGN);
    /* Everything that can refuse the start comes before the GPUs are opened: a refused start
     * resets nothing and writes nothing. */
    if (load_policy(s) < 0 || make_dirs(s) < 0 || lock_state_dir(s) < 0 ||
        check_socket_path(s) < 0 || open_metrics_dir(s) < 0)
        goto out;
    s->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (open_devices(s) < 0 || load_gpus(s) < 0)
        goto out;
    if (recover(s) < 0) {
        eerld_log(LOG_ERR, "the state dir %s must be writable (the journal lives there)",
                  cfg->state_dir);
        goto out;
    }
    s->sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    s->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (s->sfd < 0 || s->epfd < 0 || listen_socket(s) < 0)
        goto out_reset;
    ev.events = EPOLLIN;
    ev.data.ptr = &listen_tag;
    epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->lfd, &ev);
    ev.data.ptr = &signal_tag;
    epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->sfd, &ev);
    start_reader(s);
    eerld_log(LOG_INFO, "serving %u GPUs (%s) on %s; heartbeat timeout %u ms; policy %s%s", s->n,
              eerl_device_backend(s->dev), cfg->socket_path, cfg->heartbeat_ms, cfg->policy_path,
              s->have_policy_file ? "" : " (absent)");
    if (ready_fd >= 0) {
        (void)!write(ready_fd, "1", 1);
        close(ready_fd);
    }
    if (cfg->metrics_path)
        write_metrics(s);
    s->next_metrics = now_s() + (double)cfg->metrics_interval_ms / 1000.0;
    s->next_retry = now_s() + RETRY_MS / 1000.0;
    while (!s->stop) {
        n = epoll_wait(s->epfd, evs, 64, 50);
        if (n < 0 && errno != EINTR) {
            eerld_log(LOG_ERR, "epoll_wait: %s", strerror(errno));
            break;
        }
        for (k = 0; k < n; k++) {
            struct conn *c;

            if (evs[k].data.ptr == &listen_tag) {
                /* After the connections of this batch: a client that closed before another
                 * connected must not count against the newcomer's limit. */
                accept_pending = 1;
                continue;
            }
            if (evs[k].data.ptr == &signal_tag) {
                on_signal(s);
                continue;
            }
            if (evs[k].data.ptr == s->reader_tag) {
                /* After the batch too: finishing a job may end its connection, and an event
                 * later in this batch could name it. */
                done_pending = 1;
                continue;
            }
            c = evs[k].data.ptr;
            if (c->busy && (evs[k].events & (EPOLLHUP | EPOLLERR)))
                c->closing = 2; /* gone with a read in flight: reset its GPUs now */
            else if (evs[k].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
                conn_readable(s, c);
            if (c->out_len)
                flush_out(s, c); /* even after EOF: a client may half-close and read */
            if (!c->closing)
                serve_buffered(s, c);
            if (c->closing) {
                conn_free(s, c,
                          c->closing == 2 ? "connection closed" : "connection closed by eerld");
            }
        }
        if (done_pending)
            finish_jobs(s);
        done_pending = 0;
        if (accept_pending)
            accept_all(s);
        accept_pending = 0;
        sweep(s);
    }
    rc = 0;
out_reset:
    stop_reader(s);
    if (shutdown_all(s))
        rc = 1;
out:
    if (s->lfd >= 0) {
        close(s->lfd);
        unlink(cfg->socket_path);
    }
    if (s->epfd >= 0)
        close(s->epfd);
    if (s->sfd >= 0)
        close(s->sfd);
    if (s->metrics_fd >= 0)
        close(s->metrics_fd);
    if (s->reserve_fd >= 0)
        close(s->reserve_fd);
    if (s->state_fd >= 0)
        close(s->state_fd);
    if (s->lock_fd >= 0)
        close(s->lock_fd); /* the lock goes last: the journal is final by now */
    for (i = 0; s->g && i < s->n; i++)
        eerl_actuator_free(s->g[i].act);
    free(s->g);
    eerl_device_free(s->dev);
    free(s);
    return rc;
}

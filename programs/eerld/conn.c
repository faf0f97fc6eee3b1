/* eerld's connections (see conn.h). The rules they keep:
 * - Identity is SO_PEERCRED and SO_PEERGROUPS at accept time; nothing a client says about
 *   itself is trusted.
 * - Only complete requests keep a connection alive; a peer whose replies pile up unread is not
 *   read until it reads (OUT_PAUSE), so memory per peer stays bounded.
 * - A connection ends (its GPUs reset at once, even with a read in flight) on close, on a
 *   malformed message, on missed heartbeats, and when its replies overflow. */
#define _GNU_SOURCE /* accept4, struct ucred */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "eerl/agent.h"
#include "eerl/error.h"

#include "conn.h"
#include "handlers.h"
#include "log.h"

/* Output: while a connection has OUT_PAUSE bytes of replies unread, its requests wait (its
 * input is not read), so a peer that pipelines requests and never reads holds at most this
 * plus one reply; it is dropped once its heartbeat timeout passes without a request served.
 * OUT_MAX bounds one connection's queue (the largest reply, status of 1024 GPUs, is ~0.3 MiB)
 * and OUT_TOTAL_MAX all of them together. */
#define OUT_PAUSE (64u << 10)
#define OUT_MAX (8u << 20)
#define OUT_TOTAL_MAX (64u << 20)
#define ACCEPT_PAUSE_MS 100 /* after an accept error other than running out of descriptors */

struct conn {
    struct eerld_client cl; /* first: the handlers' view of it */
    int fd;
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
    struct eerld_conns *cs; /* its queue counts in cs->out_total */
    struct conn *prev, *next;
};

static void release_memory(struct conn *c)
{
    free(c->cl.who.groups);
    free(c->cl.refusal);
    free(c->in);
    free(c->out);
    free(c);
}

/* Registers what the loop wants to hear about c: input unless a read for it is in flight,
 * output while replies wait. */
static void update_events(struct conn *c)
{
    unsigned ev_mask = (c->busy || c->out_len >= OUT_PAUSE ? 0u : (unsigned)EPOLLIN) |
                       (c->out_len ? (unsigned)EPOLLOUT : 0u);

    if (ev_mask != c->events && !c->zombie) {
        struct epoll_event ev = {.events = ev_mask, .data.ptr = c};

        c->events = ev_mask;
        epoll_ctl(c->cs->epfd, EPOLL_CTL_MOD, c->fd, &ev);
    }
}

/* Ends a connection: resets its GPUs at once (even with a read in flight), closes the socket. */
static void conn_free(struct conn *c, const char *why)
{
    struct eerld_conns *cs = c->cs;

    eerld_leases_end_holder(cs->t, &c->cl.who, why);
    epoll_ctl(cs->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    if (c->prev)
        c->prev->next = c->next;
    else
        cs->list = c->next;
    if (c->next)
        c->next->prev = c->prev;
    cs->n--;
    cs->n_refused -= c->cl.refusal != NULL;
    cs->out_total -= c->out_len;
    c->out_len = 0;
    if (c->busy) {
        c->zombie = 1; /* the reader still has its job: freed when it comes back */
        return;
    }
    release_memory(c);
}

static void flush_out(struct conn *c)
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
    c->cs->out_total -= done;
    if (!c->closing)
        update_events(c);
}

static void queue_json(struct conn *c, json_t *o)
{
    size_t need = json_dumpb(o, NULL, 0, JSON_COMPACT);

    if (need == 0)
        return;
    if (c->out_len + need + 1 > OUT_MAX || c->cs->out_total + need + 1 > OUT_TOTAL_MAX) {
        eerld_log(LOG_WARNING,
                  "uid %u pid %u: %zu bytes of replies unread (%zu for all connections; limits "
                  "%u and %u); connection closed",
                  (unsigned)c->cl.who.uid, (unsigned)c->cl.who.pid, c->out_len, c->cs->out_total,
                  OUT_MAX, OUT_TOTAL_MAX);
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
    c->cs->out_total += need + 1;
}

/* The handlers' ops: a reply is queued; a read goes to the reader, and c's input waits until it
 * comes back (its replies stay in order). */
static void client_send(struct eerld_client *cl, json_t *reply)
{
    queue_json((struct conn *)cl, reply);
}

static void client_defer(struct eerld_client *cl, struct eerld_job *j)
{
    struct conn *c = (struct conn *)cl;

    j->owner = c;
    if (eerld_reader_submit(c->cs->rd, j)) {
        queue_json(c, j->reply);
        eerld_job_free(j);
        return;
    }
    c->busy = 1;
    update_events(c);
}

static const struct eerld_client_ops client_ops = {client_send, client_defer};

/* Handles every complete line in c's buffer, until one hands a read to the reader thread. */
static void process_lines(struct conn *c)
{
    struct eerld_conns *cs = c->cs;
    size_t start = 0;
    char *nl;

    while (!c->closing && !c->busy && c->out_len < OUT_PAUSE &&
           (nl = memchr(c->in + start, '\n', c->in_len - start))) {
        c->last_seen = eerld_now_s(); /* a request, not any byte, keeps a connection alive */
        if (eerld_handle_line(cs->t, cs->heartbeat_ms, &c->cl, c->in + start,
                              (size_t)(nl - (c->in + start))))
            c->closing = 1;
        start = (size_t)(nl - c->in) + 1;
    }
    memmove(c->in, c->in + start, c->in_len - start);
    c->in_len -= start;
    if (!c->closing && !c->busy && c->out_len < OUT_PAUSE && c->in_len == EERL_AGENT_MSG_MAX) {
        json_t *o =
            eerld_reply_error(0, 0, EERL_EPARSE,
                              "malformed request: no newline within %d bytes (the message limit); "
                              "closing the connection",
                              EERL_AGENT_MSG_MAX);

        queue_json(c, o);
        json_decref(o);
        eerld_log(LOG_WARNING, "uid %u pid %u: message over %d bytes; connection closed",
                  (unsigned)c->cl.who.uid, (unsigned)c->cl.who.pid, EERL_AGENT_MSG_MAX);
        c->closing = 1;
    }
}

/* Reads what is there and handles every complete line. */
static void conn_readable(struct conn *c)
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
        process_lines(c);
        if (c->out_len >= OUT_PAUSE)
            flush_out(c); /* a pipelining client: keep the reply queue short */
    }
}

/* After replies went out: serves the requests that waited in c's buffer while they were
 * queued (the socket's own input is read again through the loop). */
static void serve_buffered(struct conn *c)
{
    while (!c->closing && !c->busy && c->out_len < OUT_PAUSE && c->in_len &&
           memchr(c->in, '\n', c->in_len)) {
        size_t before = c->in_len;

        process_lines(c);
        flush_out(c);
        if (c->in_len == before)
            break;
    }
    update_events(c);
}

static void end_if_closing(struct conn *c)
{
    if (c->closing)
        conn_free(c, c->closing == 2 ? "connection closed" : "connection closed by eerld");
}

void eerld_conns_event(struct eerld_conns *cs, struct conn *c, uint32_t events)
{
    (void)cs;
    if (c->busy && (events & (EPOLLHUP | EPOLLERR)))
        c->closing = 2; /* gone with a read in flight: reset its GPUs now */
    else if (events & (EPOLLIN | EPOLLHUP | EPOLLERR))
        conn_readable(c);
    if (c->out_len)
        flush_out(c); /* even after EOF: a client may half-close and read */
    if (!c->closing)
        serve_buffered(c);
    end_if_closing(c);
}

void eerld_conns_finish(struct eerld_conns *cs, struct eerld_job *j)
{
    struct conn *c = j->owner;

    (void)cs;
    if (c->zombie) {
        release_memory(c);
    } else {
        c->busy = 0;
        c->last_seen = eerld_now_s(); /* the time its read took was eerld's, not its silence */
        queue_json(c, j->reply);
        flush_out(c);
        serve_buffered(c); /* what it sent meanwhile */
        end_if_closing(c);
    }
    eerld_job_free(j);
}

void eerld_conns_drop_job(struct eerld_job *j)
{
    struct conn *c = j->owner;

    if (c && c->zombie)
        release_memory(c);
    else if (c)
        c->busy = 0;
    eerld_job_free(j);
}

/* ---- accepting ---- */

void eerld_conns_init(struct eerld_conns *cs, struct eerld_leases *t, struct eerld_reader *rd,
                      unsigned heartbeat_ms)
{
    memset(cs, 0, sizeof(*cs));
    cs->t = t;
    cs->rd = rd;
    cs->heartbeat_ms = heartbeat_ms;
    cs->epfd = cs->lfd = -1;
    cs->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
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
static void pause_accept(struct eerld_conns *cs, double seconds)
{
    struct epoll_event ev = {.events = 0, .data.ptr = cs->listen_tag};

    epoll_ctl(cs->epfd, EPOLL_CTL_MOD, cs->lfd, &ev);
    cs->accept_resume = eerld_now_s() + seconds;
}

static void resume_accept(struct eerld_conns *cs)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = cs->listen_tag};

    if (cs->accept_resume > 0 && eerld_now_s() >= cs->accept_resume) {
        cs->accept_resume = 0;
        epoll_ctl(cs->epfd, EPOLL_CTL_MOD, cs->lfd, &ev);
    }
}

/* Out of descriptors (EMFILE, ENFILE): the classic reserve: give up the spare descriptor,
 * accept the waiting connection and close it at once (the client sees it closed, instead of
 * eerld waking up for it forever), take the spare back. Logged once until accepting works. */
static void accept_short(struct eerld_conns *cs, int err)
{
    int fd;

    if (!cs->fd_short)
        eerld_log(LOG_WARNING,
                  "out of file descriptors (%s) with %u connections: closing new connections "
                  "until some end (raise the descriptor limit, e.g. LimitNOFILE=)",
                  strerror(err), cs->n);
    cs->fd_short = 1;
    if (cs->reserve_fd < 0) {
        pause_accept(cs, ACCEPT_PAUSE_MS / 1000.0);
        return;
    }
    close(cs->reserve_fd);
    cs->reserve_fd = -1;
    while ((fd = accept4(cs->lfd, NULL, NULL, SOCK_CLOEXEC)) >= 0)
        close(fd); /* every one waiting: none can be served now */
    cs->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (cs->reserve_fd < 0)
        pause_accept(cs, ACCEPT_PAUSE_MS / 1000.0);
}

/* accept4 failed with err: 1 to try again at once, 0 to stop accepting for now. */
static int accept_failed(struct eerld_conns *cs, int err)
{
    if (err == EINTR || err == ECONNABORTED)
        return 1;
    if (err == EAGAIN || err == EWOULDBLOCK)
        return 0;
    if (err == EMFILE || err == ENFILE) {
        accept_short(cs, err);
        return 0;
    }
    if (!cs->accept_err)
        eerld_log(LOG_WARNING, "accept: %s; pausing new connections for %d ms", strerror(err),
                  ACCEPT_PAUSE_MS);
    cs->accept_err = 1;
    pause_accept(cs, ACCEPT_PAUSE_MS / 1000.0);
    return 0;
}

/* A connection over the policy's limits is answered at its first request (the hello), so the
 * client reads why instead of finding a closed socket. -1: no memory. */
static int set_refusal(struct eerld_conns *cs, struct conn *c, const struct ucred *cred,
                       unsigned same)
{
    const struct eerld_policy *p = &cs->t->policy;
    char msg[256];

    snprintf(msg, sizeof(msg),
             "too many connections: %u in total (limit %u), %u from uid %u (limit %u)",
             cs->n - cs->n_refused, p->max_connections, same, (unsigned)cred->uid,
             p->max_connections_per_user);
    c->cl.refusal = strdup(msg);
    if (!c->cl.refusal)
        return -1;
    eerld_log(LOG_WARNING, "uid %u pid %u: connection refused: %s", (unsigned)cred->uid,
              (unsigned)cred->pid, msg);
    return 0;
}

/* Takes in the accepted fd of the peer cred (refuse: over the limits, with same of its uid's
 * connections counted). Closes fd if it cannot. */
static void add_conn(struct eerld_conns *cs, int fd, const struct ucred *cred, int refuse,
                     unsigned same)
{
    struct conn *c = calloc(1, sizeof(*c));
    struct epoll_event ev;

    if (!c || !(c->in = malloc(EERL_AGENT_MSG_MAX))) {
        free(c);
        close(fd);
        return;
    }
    if (peer_groups(fd, &c->cl.who.groups, &c->cl.who.n_groups) < 0) {
        /* Only its primary group counts then: never the user's groups from NSS. */
        eerld_log(LOG_WARNING,
                  "uid %u pid %u: SO_PEERGROUPS: %s; its supplementary groups do not count",
                  (unsigned)cred->uid, (unsigned)cred->pid, strerror(errno));
        c->cl.who.groups = NULL;
        c->cl.who.n_groups = 0;
    }
    if (refuse && set_refusal(cs, c, cred, same) < 0)
        goto fail;
    c->fd = fd;
    c->cl.who.uid = cred->uid;
    c->cl.who.gid = cred->gid;
    c->cl.who.pid = cred->pid;
    c->cl.ops = &client_ops;
    c->cs = cs;
    c->last_seen = c->accepted_at = eerld_now_s();
    ev.events = EPOLLIN;
    c->events = EPOLLIN;
    ev.data.ptr = c;
    if (epoll_ctl(cs->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
        goto fail;
    c->next = cs->list;
    if (cs->list)
        cs->list->prev = c;
    cs->list = c;
    cs->n++;
    cs->n_refused += c->cl.refusal != NULL;
    return;
fail:
    release_memory(c);
    close(fd);
}

void eerld_conns_accept(struct eerld_conns *cs)
{
    if (cs->accept_resume > 0)
        return;
    for (;;) {
        struct ucred cred;
        socklen_t len = sizeof(cred);
        struct conn *x;
        unsigned same = 0;
        int refuse;
        int fd = accept4(cs->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

        if (fd < 0) {
            if (accept_failed(cs, errno))
                continue;
            return;
        }
        if (cs->fd_short || cs->accept_err) {
            eerld_log(LOG_INFO, "accepting connections again (%u open)", cs->n);
            cs->fd_short = cs->accept_err = 0;
        }
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
            eerld_log(LOG_WARNING, "SO_PEERCRED: %s; connection refused", strerror(errno));
            close(fd);
            continue;
        }
        for (x = cs->list; x; x = x->next)
            same += x->cl.who.uid == cred.uid && !x->cl.refusal;
        refuse = cred.uid != 0 && (cs->n - cs->n_refused >= cs->t->policy.max_connections ||
                                   same >= cs->t->policy.max_connections_per_user);
        if (refuse && cs->n_refused >= 64) {
            close(fd); /* a flood of refused connections: not even an answer */
            continue;
        }
        add_conn(cs, fd, &cred, refuse, same);
    }
}

/* ---- heartbeats, policy reloads, the end ---- */

/* Why c is to be dropped at time t (limit: the heartbeat timeout, s), or 0 if it stays. */
static int overdue(const struct eerld_conns *cs, const struct conn *c, double t, double limit,
                   char *why, size_t len)
{
    if (!c->cl.hello && t - c->accepted_at > limit) {
        snprintf(why, len, "no hello within %.1f s of connecting (limit %u ms)", t - c->accepted_at,
                 cs->heartbeat_ms);
        return 1;
    }
    if (t - c->last_seen <= limit)
        return 0;
    if (c->out_len >= OUT_PAUSE)
        snprintf(why, len,
                 "not reading its replies (%zu bytes unread) for %.1f s (heartbeat "
                 "timeout %u ms)",
                 c->out_len, t - c->last_seen, cs->heartbeat_ms);
    else
        snprintf(why, len,
                 "no request for %.1f s (heartbeat timeout %u ms; a partial line "
                 "does not count)",
                 t - c->last_seen, cs->heartbeat_ms);
    return 1;
}

void eerld_conns_sweep(struct eerld_conns *cs, double t)
{
    double limit = (double)cs->heartbeat_ms / 1000.0;
    struct conn *c, *next;

    for (c = cs->list; c; c = next) {
        char why[160];

        next = c->next;
        if (c->closing || c->busy)
            continue; /* busy: it waits for eerld's reader, not the other way round */
        if (!overdue(cs, c, t, limit, why, sizeof(why)))
            continue;
        eerld_log(LOG_INFO, "uid %u pid %u: %s; connection closed", (unsigned)c->cl.who.uid,
                  (unsigned)c->cl.who.pid, why);
        conn_free(c, why);
    }
    resume_accept(cs);
}

int eerld_conns_revoke(struct eerld_conns *cs)
{
    struct conn *c;
    int changed = 0;

    for (c = cs->list; c; c = c->next)
        changed |= eerld_leases_revoke(cs->t, &c->cl.who);
    return changed;
}

void eerld_conns_close_all(struct eerld_conns *cs, const char *why)
{
    while (cs->list)
        conn_free(cs->list, why);
}

void eerld_conns_free(struct eerld_conns *cs)
{
    if (cs->reserve_fd >= 0)
        close(cs->reserve_fd);
    cs->reserve_fd = -1;
}

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
#include "server_impl.h"

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

double eerld__now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- journal ---- */

int eerld__journal_sync(struct server *s)
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
int eerld__drop_lease(struct server *s, unsigned i, const char *why)
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
        eerld__journal_sync(s);
}

/* ---- connections ---- */

void eerld__conn_release_memory(struct conn *c)
{
    free(c->groups);
    free(c->refusal);
    free(c->in);
    free(c->out);
    free(c);
}

/* Registers what the loop wants to hear about c: input unless a read for it is in flight,
 * output while replies wait. */
void eerld__update_events(struct server *s, struct conn *c)
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
void eerld__conn_free(struct server *s, struct conn *c, const char *why)
{
    unsigned i;
    int changed = 0, had = c->n_leased > 0;

    for (i = 0; i < s->n && c->n_leased; i++)
        if (s->g[i].holder == c)
            changed |= eerld__drop_lease(s, i, why);
    if (changed)
        eerld__journal_sync(s);
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
    eerld__conn_release_memory(c);
}

void eerld__flush_out(struct server *s, struct conn *c)
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
        eerld__update_events(s, c);
}

void eerld__queue_json(struct conn *c, json_t *o)
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

/* Handles every complete line in c's buffer, until one hands a read to the reader thread. */
static void process_lines(struct server *s, struct conn *c)
{
    size_t start = 0;
    char *nl;

    while (!c->closing && !c->busy && c->out_len < OUT_PAUSE &&
           (nl = memchr(c->in + start, '\n', c->in_len - start))) {
        eerld__handle_line(s, c, c->in + start, (size_t)(nl - (c->in + start)));
        start = (size_t)(nl - c->in) + 1;
    }
    memmove(c->in, c->in + start, c->in_len - start);
    c->in_len -= start;
    if (!c->closing && !c->busy && c->out_len < OUT_PAUSE && c->in_len == EERL_AGENT_MSG_MAX) {
        eerld__reply_err_id(c, 0, 0, EERL_EPARSE,
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
            eerld__flush_out(s, c); /* a pipelining client: keep the reply queue short */
    }
}

/* After replies went out: serves the requests that waited in c's buffer while they were
 * queued (the socket's own input is read again through the loop). */
void eerld__serve_buffered(struct server *s, struct conn *c)
{
    while (!c->closing && !c->busy && c->out_len < OUT_PAUSE && c->in_len &&
           memchr(c->in, '\n', c->in_len)) {
        size_t before = c->in_len;

        process_lines(s, c);
        eerld__flush_out(s, c);
        if (c->in_len == before)
            break;
    }
    eerld__update_events(s, c);
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
    s->accept_resume = eerld__now_s() + seconds;
}

static void resume_accept(struct server *s)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &listen_tag};

    if (s->accept_resume > 0 && eerld__now_s() >= s->accept_resume) {
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
                eerld__conn_release_memory(c);
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
        c->last_seen = c->accepted_at = eerld__now_s();
        ev.events = EPOLLIN;
        c->events = EPOLLIN;
        ev.data.ptr = c;
        if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
            eerld__conn_release_memory(c);
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
    if (s->n > EERL_AGENT_GPUS_MAX) { /* the protocol names GPUs 0-1023 */
        eerld_log(LOG_ERR, "the node has %u GPUs; eerld serves at most %d (GPU indices 0-%d)", s->n,
                  EERL_AGENT_GPUS_MAX, EERL_AGENT_GPUS_MAX - 1);
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
        return eerld__journal_sync(s);
    return eerld__journal_sync(s); /* also proves the state dir is writable before serving */
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
                    changed |= eerld__drop_lease(s, i, "policy reload");
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
        eerld__journal_sync(s);
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
    double t = eerld__now_s(), limit = (double)s->cfg->heartbeat_ms / 1000.0;
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
        eerld__conn_free(s, c, why);
    }
    resume_accept(s);
    if (t >= s->next_retry) {
        retry_dirty(s);
        s->next_retry = t + RETRY_MS / 1000.0;
    }
    if (s->cfg->metrics_path && t >= s->next_metrics) {
        eerld__write_metrics(s);
        s->next_metrics = t + (double)s->cfg->metrics_interval_ms / 1000.0;
    }
}

static int shutdown_all(struct server *s)
{
    unsigned i;
    int bad = 0;

    while (s->conns)
        eerld__conn_free(s, s->conns, "eerld is stopping");
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
    eerld__journal_sync(s);
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
    eerld__start_reader(s);
    eerld_log(LOG_INFO, "serving %u GPUs (%s) on %s; heartbeat timeout %u ms; policy %s%s", s->n,
              eerl_device_backend(s->dev), cfg->socket_path, cfg->heartbeat_ms, cfg->policy_path,
              s->have_policy_file ? "" : " (absent)");
    if (ready_fd >= 0) {
        (void)!write(ready_fd, "1", 1);
        close(ready_fd);
    }
    if (cfg->metrics_path)
        eerld__write_metrics(s);
    s->next_metrics = eerld__now_s() + (double)cfg->metrics_interval_ms / 1000.0;
    s->next_retry = eerld__now_s() + RETRY_MS / 1000.0;
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
                eerld__flush_out(s, c); /* even after EOF: a client may half-close and read */
            if (!c->closing)
                eerld__serve_buffered(s, c);
            if (c->closing) {
                eerld__conn_free(
                    s, c, c->closing == 2 ? "connection closed" : "connection closed by eerld");
            }
        }
        if (done_pending)
            eerld__finish_jobs(s);
        done_pending = 0;
        if (accept_pending)
            accept_all(s);
        accept_pending = 0;
        sweep(s);
    }
    rc = 0;
out_reset:
    eerld__stop_reader(s);
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

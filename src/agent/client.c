/* The eerld client library (include/eerl/agent.h). Owns one socket per eerl_agent, its mutex,
 * the optional heartbeat thread, and the cached device list behind eerl_agent_device. Requests
 * are strictly one at a time per connection (send a line, read the line that answers it, check
 * the id), which keeps the daemon's per-connection state trivial and the latency a single round
 * trip. It never prints; the daemon's message for a refusal lands in last_error.
 *
 * Time: the heartbeat waits on CLOCK_MONOTONIC, so a step of the wall clock (NTP, an operator,
 * a clock ahead) never delays a heartbeat past the daemon's timeout.
 *
 * Deadlines: every round trip has a whole-answer deadline on CLOCK_MONOTONIC (poll() with the
 * time left, so a daemon trickling a byte at a time cannot stretch it): the hello
 * EERL__AGENT_HELLO_MS, every later call half the daemon's heartbeat timeout, so a caller that
 * waits behind the heartbeat thread's own round trip still returns within the timeout. A call
 * that misses its deadline, or whose stream breaks, closes the connection (a late answer would
 * be taken for the next request's), which eerld answers by resetting the GPUs it held. The
 * link is then down: calls fail at once, and the heartbeat thread dials the same socket again
 * (outside the mutex, so no caller waits on it) once per interval; the runtime
 * (src/runtime/session.c) sees the loss through eerl__agent_link and leases again.
 *
 * Fork: a connection belongs to the process that opened it. A process-wide registry (its mutex
 * held across fork) lets the child handler close every inherited socket in a forked child, so a
 * child that lives on never keeps a lease alive after its parent dies (SOCK_CLOEXEC only covers
 * exec). In the child every call then fails with EERL_ESTATE without touching the mutex (it may
 * have been copied locked), and eerl_agent_free frees memory only: no join of the parent's
 * heartbeat thread, no release of the parent's GPUs. */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "eerl/agent.h"
#include "eerl/error.h"
#include "eerl/runtime.h"
#include "agent/client.h"
#include "agent/path_access.h"
#include "eerl/tools/protocol.h"
#include "device/device_impl.h"

/* The hello's deadline (connecting, eerl doctor's probe), ms. */
#define EERL__AGENT_HELLO_MS 5000
/* A later call's deadline when the daemon names no heartbeat timeout, and its least, ms. */
#define CALL_MS_DEFAULT 2500
#define CALL_MS_MIN 100

struct dev_cache {
    char uuid[EERL_DEVICE_UUID_MAX];
    char name[EERL_DEVICE_NAME_MAX];
    unsigned *clocks;
    size_t n_clocks;
};

struct rbuf {
    char *p; /* cap bytes: what was read past the last answered line */
    size_t cap, len;
};

struct eerl_agent {
    int fd; /* -1: closed, or the link is down (lost > 0) */
    char path[108];
    char client[EERL_AGENT_CLIENT_MAX + 1];
    unsigned call_ms;                /* a call's deadline (see "Deadlines" above) */
    uint64_t lost;                   /* connections lost to a deadline or a broken stream */
    uint64_t redials;                /* connections dialled again after a loss */
    pid_t pid;                       /* the process that connected; see "Fork" above */
    eerl_agent *reg_prev, *reg_next; /* the registry, under reg_mu */
    pthread_mutex_t mu;
    uint64_t next_id;
    struct rbuf rb;
    char last_error[256];
    char down_why[256]; /* why the link went down */
    struct eerl_agent_info info;
    /* heartbeat thread */
    pthread_t hb;
    int hb_running, hb_stop;
    unsigned hb_interval_ms;
    pthread_cond_t hb_cv;
    /* GPUs this connection holds, as far as our own lease/release/reset calls tell (a lease
     * root took away shows up as a refused set) */
    unsigned char held[EERL_AGENT_GPU_INDEX_MAX + 1];
    /* eerl_agent_device's view, filled on first use */
    struct dev_cache *devs;
    unsigned n_devs;
};

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static eerl_agent *reg_head;
static pthread_once_t reg_once = PTHREAD_ONCE_INIT;

static void reg_prepare(void)
{
    pthread_mutex_lock(&reg_mu);
}

static void reg_parent(void)
{
    pthread_mutex_unlock(&reg_mu);
}

/* In a forked child: drop our copy of every connection (close is async-signal-safe). */
static void reg_child(void)
{
    eerl_agent *a;

    for (a = reg_head; a; a = a->reg_next)
        if (a->fd >= 0) {
            close(a->fd);
            a->fd = -1;
        }
    pthread_mutex_unlock(&reg_mu);
}

static void reg_init(void)
{
    pthread_atfork(reg_prepare, reg_parent, reg_child);
}

static void reg_add(eerl_agent *a)
{
    pthread_once(&reg_once, reg_init);
    pthread_mutex_lock(&reg_mu);
    a->reg_next = reg_head;
    if (reg_head)
        reg_head->reg_prev = a;
    reg_head = a;
    pthread_mutex_unlock(&reg_mu);
}

static void reg_remove(eerl_agent *a)
{
    pthread_mutex_lock(&reg_mu);
    if (a->reg_prev)
        a->reg_prev->reg_next = a->reg_next;
    else if (reg_head == a)
        reg_head = a->reg_next;
    if (a->reg_next)
        a->reg_next->reg_prev = a->reg_prev;
    pthread_mutex_unlock(&reg_mu);
}

/* A forked child's copy of a connection: see "Fork" above. */
static int forked(const eerl_agent *a)
{
    return a->pid != getpid();
}

static int set_why(char *why, size_t len, int err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int set_why(char *why, size_t len, int err, const char *fmt, ...)
{
    va_list ap;

    if (why && len) {
        va_start(ap, fmt);
        vsnprintf(why, len, fmt, ap);
        va_end(ap);
    }
    return err;
}

const char *eerl_agent_socket_path(void)
{
    const char *s = getenv("EERL_SOCKET");
    return s && *s ? s : EERL_AGENT_DEFAULT_SOCKET;
}

int eerl_agent_wanted(void)
{
    const char *s = getenv("EERL_SOCKET");
    struct stat st;

    if (s && *s)
        return 1;
    return stat(EERL_AGENT_DEFAULT_SOCKET, &st) == 0 && S_ISSOCK(st.st_mode);
}

static int64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits until fd is ready for events, or the deadline (mono_ms) passes: 0, EERL_ETIMEDOUT, or
 * EERL_EIO with errno. */
static int wait_fd(int fd, short events, int64_t deadline)
{
    for (;;) {
        struct pollfd pfd = {fd, events, 0};
        int64_t left = deadline - mono_ms();
        int r;

        if (left <= 0)
            return EERL_ETIMEDOUT;
        r = poll(&pfd, 1, left > INT_MAX ? INT_MAX : (int)left);
        if (r > 0)
            return 0; /* ready, or hung up: the send or recv says which */
        if (r < 0 && errno != EINTR)
            return EERL_EIO;
    }
}

/* The socket is non-blocking: a peer that stops reading cannot hold us past the deadline. */
static int send_all(int fd, const char *p, size_t n, int64_t deadline)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        int e;

        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                return EERL_EIO;
            if ((e = wait_fd(fd, POLLOUT, deadline)) < 0)
                return e;
            continue;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Takes the first whole line out of rb into a malloc'd string; 0 when there is none yet. */
static int take_line(struct rbuf *rb, char **ret_line, size_t *ret_len)
{
    char *nl = memchr(rb->p, '\n', rb->len);
    size_t n;

    if (!nl)
        return 0;
    n = (size_t)(nl - rb->p);
    if (!(*ret_line = malloc(n + 1)))
        return EERL_ENOMEM;
    memcpy(*ret_line, rb->p, n);
    (*ret_line)[n] = '\0';
    memmove(rb->p, nl + 1, rb->len - n - 1);
    rb->len -= n + 1;
    *ret_len = n;
    return 1;
}

/* Reads one line (without its newline) into a malloc'd buffer, whole before the deadline:
 * EERL_ETIMEDOUT (why left to the caller, who knows the path) when it is not. */
static int read_line(int fd, struct rbuf *rb, int64_t deadline, char **ret_line, size_t *ret_len,
                     char *why, size_t why_len)
{
    for (;;) {
        int e = take_line(rb, ret_line, ret_len);
        ssize_t r;

        if (e == 1)
            return 0;
        if (e < 0)
            return set_why(why, why_len, e, "out of memory");
        if (rb->len == rb->cap) {
            /* Replies have no fixed size (status of 1024 GPUs is ~0.3 MiB): grow, up to a
             * bound that only a broken daemon would reach. */
            char *p;

            if (rb->cap >= EERL_AGENT_REPLY_MAX)
                return set_why(why, why_len, EERL_EPARSE, "eerld sent a line longer than %d bytes",
                               EERL_AGENT_REPLY_MAX);
            if (!(p = realloc(rb->p, rb->cap * 2)))
                return set_why(why, why_len, EERL_ENOMEM, "out of memory");
            rb->p = p;
            rb->cap *= 2;
        }
        if ((e = wait_fd(fd, POLLIN, deadline)) < 0)
            return e == EERL_ETIMEDOUT
                       ? e
                       : set_why(why, why_len, e, "waiting for eerld: %s", strerror(errno));
        r = recv(fd, rb->p + rb->len, rb->cap - rb->len, MSG_DONTWAIT);
        if (r < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
            continue;
        if (r < 0)
            return set_why(why, why_len, EERL_EIO, "reading from eerld: %s", strerror(errno));
        if (r == 0)
            return set_why(why, why_len, EERL_EIO, "eerld closed the connection");
        rb->len += (size_t)r;
    }
}

/* Sends one encoded request (id) and reads the line that answers it, within ms. On success
 * *ret_reply is the reply object, ok or not; any failure leaves the stream unusable. */
static int exchange(int fd, struct rbuf *rb, const char *path, const char *op, const char *buf,
                    size_t n, uint64_t id, unsigned ms, json_t **ret_reply, char *why,
                    size_t why_len)
{
    int64_t deadline = mono_ms() + ms;
    char *line = NULL;
    size_t len = 0;
    json_t *rep, *x;
    json_error_t jerr;
    int e = send_all(fd, buf, n, deadline);

    if (e == EERL_EIO)
        return set_why(why, why_len, e, "writing to eerld at %s: %s", path, strerror(errno));
    if (e == 0)
        e = read_line(fd, rb, deadline, &line, &len, why, why_len);
    if (e == EERL_ETIMEDOUT)
        return set_why(why, why_len, e,
                       "eerld at %s did not answer in %g s (the %s request; is it stopped or "
                       "hung? systemctl status eerld)",
                       path, ms / 1000.0, op);
    if (e < 0)
        return e;
    rep = json_loadb(line, len, 0, &jerr);
    free(line);
    if (!rep || !json_is_object(rep)) {
        json_decref(rep);
        return set_why(why, why_len, EERL_EPARSE,
                       "eerld at %s sent a reply that is not a JSON object", path);
    }
    x = json_object_get(rep, "id");
    if (x && (!json_is_integer(x) || (uint64_t)json_integer_value(x) != id)) {
        json_decref(rep);
        return set_why(why, why_len, EERL_EPARSE,
                       "eerld answered another request (expected id %llu)", (unsigned long long)id);
    }
    *ret_reply = rep;
    return 0;
}

/* The daemon's refusal in a reply that is not ok: its code, its message in why. Consumes rep. */
static int refusal(json_t *rep, char *why, size_t why_len)
{
    const char *msg = json_string_value(json_object_get(rep, "message"));
    int e = eerl_agent_err_from_name(json_string_value(json_object_get(rep, "error")));

    set_why(why, why_len, e, "%s", msg ? msg : "eerld refused the request");
    json_decref(rep);
    return e;
}

/* The link is down after a missed deadline or a broken stream: closing it makes eerld reset the
 * GPUs it held (see "Deadlines" above). Caller holds a->mu. */
static void drop_link(eerl_agent *a, const char *why)
{
    close(a->fd);
    a->fd = -1;
    a->lost++;
    a->rb.len = 0;
    memset(a->held, 0, sizeof(a->held));
    snprintf(a->down_why, sizeof(a->down_why), "%s", why);
}

/* One round trip. On success *ret_reply is the reply object (ok: true). A refusal returns the
 * daemon's code with its message in why. Caller holds a->mu. */
static int round_trip(eerl_agent *a, struct eerl_agent_req *req, json_t **ret_reply, char *why,
                      size_t why_len)
{
    char buf[4096];
    size_t n;
    json_t *rep = NULL;
    int e;

    if (a->fd < 0 && a->lost)
        return set_why(why, why_len, EERL_EIO,
                       "the connection to eerld is down (%s); it is dialled again every "
                       "heartbeat",
                       a->down_why);
    if (a->fd < 0)
        return set_why(why, why_len, EERL_ESTATE, "the connection to eerld is closed");
    req->has_id = 1;
    req->id = ++a->next_id;
    e = eerl_agent_encode_request(req, buf, sizeof(buf), &n);
    if (e < 0)
        return set_why(why, why_len, e, "cannot encode the %s request",
                       eerl_agent_op_name(req->op));
    e = exchange(a->fd, &a->rb, a->path, eerl_agent_op_name(req->op), buf, n, req->id, a->call_ms,
                 &rep, why, why_len);
    if (e < 0) {
        drop_link(a, why && why_len ? why : eerl_strerror(e));
        return e;
    }
    if (!json_is_true(json_object_get(rep, "ok")))
        return refusal(rep, why, why_len);
    *ret_reply = rep;
    return 0;
}

static int call(eerl_agent *a, struct eerl_agent_req *req, json_t **ret_reply)
{
    json_t *rep = NULL;
    int e;

    if (forked(a))
        return set_why(a->last_error, sizeof(a->last_error), EERL_ESTATE,
                       "this connection to eerld belongs to process %ld; a forked child (pid %ld) "
                       "cannot use it: connect anew",
                       (long)a->pid, (long)getpid());
    pthread_mutex_lock(&a->mu);
    a->last_error[0] = '\0';
    e = round_trip(a, req, &rep, a->last_error, sizeof(a->last_error));
    pthread_mutex_unlock(&a->mu);
    if (e < 0)
        return e;
    if (ret_reply)
        *ret_reply = rep;
    else
        json_decref(rep);
    return 0;
}

static unsigned get_u(json_t *o, const char *key)
{
    json_t *x = json_object_get(o, key);
    json_int_t v = json_is_integer(x) ? json_integer_value(x) : 0;
    return v < 0 ? 0 : (unsigned)v;
}

/* The mutex, and the heartbeat's condition variable on CLOCK_MONOTONIC (see "Time" above). */
static int init_sync(eerl_agent *a, char *why, size_t why_len)
{
    pthread_condattr_t ca;
    int r;

    if (pthread_condattr_init(&ca) != 0)
        return set_why(why, why_len, EERL_ESYS, "pthread_condattr_init failed");
    r = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (r == 0)
        r = pthread_cond_init(&a->hb_cv, &ca);
    pthread_condattr_destroy(&ca);
    if (r != 0)
        return set_why(why, why_len, EERL_ESYS,
                       "cannot make a condition variable on CLOCK_MONOTONIC: %s", strerror(r));
    if (pthread_mutex_init(&a->mu, NULL) != 0) {
        pthread_cond_destroy(&a->hb_cv);
        return set_why(why, why_len, EERL_ESYS, "pthread_mutex_init failed");
    }
    return 0;
}

/* A call's deadline for a daemon whose heartbeat timeout is heartbeat_ms (see "Deadlines"). */
static unsigned call_ms_for(unsigned heartbeat_ms)
{
    if (heartbeat_ms == 0)
        return CALL_MS_DEFAULT;
    return heartbeat_ms / 2 > CALL_MS_MIN ? heartbeat_ms / 2 : CALL_MS_MIN;
}

/* EERL_ENOPERM, naming the directory or the socket on path that refuses this process. */
static int refused_why(const char *path, char *why, size_t why_len)
{
    struct eerl__path_refusal r;
    char said[PATH_MAX + 160] = "the socket or a directory above it refuses this user";

    if (eerl__path_refusal(path, &r) == 0)
        eerl__path_refusal_say(&r, said, sizeof(said));
    return set_why(why, why_len, EERL_ENOPERM, "cannot connect to eerld at %s: %s (%s)", path,
                   strerror(EACCES), said);
}

/* A socket connected to path. A Unix socket's connect does not wait for room in a full backlog
 * when non-blocking (EAGAIN): it is tried again until the deadline. */
static int open_socket(const char *path, int64_t deadline, int *ret_fd, char *why, size_t why_len)
{
    struct sockaddr_un sa;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), err, e;

    if (fd < 0)
        return set_why(why, why_len, EERL_ESYS, "socket: %s", strerror(errno));
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    for (;;) {
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
            *ret_fd = fd;
            return 0;
        }
        if ((errno != EAGAIN && errno != EINTR) || mono_ms() >= deadline)
            break;
        if (errno == EAGAIN)
            nanosleep(&(struct timespec){0, 10 * 1000000L}, NULL);
    }
    err = errno;
    close(fd);
    if (err == EAGAIN) /* a Unix socket's backlog is full: nobody accepts */
        return set_why(why, why_len, EERL_ETIMEDOUT,
                       "eerld at %s accepts no connection (its backlog is full: is it stopped or "
                       "hung? systemctl status eerld)",
                       path);
    e = err == ENOENT || err == ECONNREFUSED ? EERL_ENOENT
        : err == EACCES || err == EPERM      ? EERL_ENOPERM
                                             : EERL_ESYS;
    if (err == EACCES)
        return refused_why(path, why, why_len);
    return set_why(why, why_len, e, "cannot connect to eerld at %s: %s%s", path, strerror(err),
                   e == EERL_ENOENT ? " (is eerld running? set EERL_SOCKET or --socket)" : "");
}

static void read_info(json_t *rep, struct eerl_agent_info *info)
{
    memset(info, 0, sizeof(*info));
    info->gpus = get_u(rep, "gpus");
    info->heartbeat_ms = get_u(rep, "heartbeat_ms");
    info->uid = get_u(rep, "uid");
    info->may_lease = json_is_true(json_object_get(rep, "may_lease"));
    snprintf(info->server, sizeof(info->server), "%s",
             json_string_value(json_object_get(rep, "server")) ?: "");
}

/* Connects to path and says hello (id 1) within ms: a new socket in *ret_fd, its unread bytes
 * in rb (allocated here; the caller frees rb->p), the daemon's answer in *ret_info. Touches no
 * eerl_agent, so the heartbeat thread dials without holding the mutex. */
static int dial(const char *path, const char *client, unsigned ms, struct rbuf *rb, int *ret_fd,
                struct eerl_agent_info *ret_info, char *why, size_t why_len)
{
    struct eerl_agent_req req;
    char buf[512];
    size_t n;
    json_t *rep = NULL;
    int fd = -1, e;

    if (!rb->p && !(rb->p = malloc(EERL_AGENT_MSG_MAX)))
        return set_why(why, why_len, EERL_ENOMEM, "out of memory");
    rb->cap = EERL_AGENT_MSG_MAX;
    rb->len = 0;
    memset(&req, 0, sizeof(req));
    req.op = EERL_AGENT_OP_HELLO;
    req.version = EERL_AGENT_PROTOCOL_VERSION;
    req.has_id = 1;
    req.id = 1;
    snprintf(req.client, sizeof(req.client), "%s", client);
    if ((e = eerl_agent_encode_request(&req, buf, sizeof(buf), &n)) < 0)
        return set_why(why, why_len, e, "cannot encode the hello request");
    if ((e = open_socket(path, mono_ms() + ms, &fd, why, why_len)) < 0)
        return e;
    e = exchange(fd, rb, path, "hello", buf, n, 1, ms, &rep, why, why_len);
    if (e == 0 && !json_is_true(json_object_get(rep, "ok"))) {
        e = refusal(rep, why, why_len);
        rep = NULL;
    }
    if (e < 0) {
        close(fd);
        return e;
    }
    read_info(rep, ret_info);
    json_decref(rep);
    *ret_fd = fd;
    return 0;
}

int eerl_agent_connect(const char *path, const char *client_name, char *why, size_t why_len,
                       eerl_agent **ret_agent)
{
    struct sockaddr_un sa;
    eerl_agent *a = NULL;
    int e;

    if (!ret_agent)
        return EERL_EINVAL;
    if (!path)
        path = eerl_agent_socket_path();
    if (strlen(path) >= sizeof(sa.sun_path))
        return set_why(why, why_len, EERL_EINVAL, "socket path '%s' is longer than %zu bytes", path,
                       sizeof(sa.sun_path) - 1);
    if (!(a = calloc(1, sizeof(*a))))
        return set_why(why, why_len, EERL_ENOMEM, "out of memory");
    a->pid = getpid();
    a->fd = -1;
    snprintf(a->path, sizeof(a->path), "%s", path);
    snprintf(a->client, sizeof(a->client), "%s", client_name ? client_name : "eerl");
    e = init_sync(a, why, why_len);
    if (e < 0) {
        free(a);
        return e;
    }
    reg_add(a);
    e = dial(a->path, a->client, EERL__AGENT_HELLO_MS, &a->rb, &a->fd, &a->info, why, why_len);
    if (e < 0)
        goto fail;
    a->next_id = 1;
    a->call_ms = call_ms_for(a->info.heartbeat_ms);
    *ret_agent = a;
    return 0;
fail:
    eerl_agent_free(a);
    return e;
}

static void free_devs(eerl_agent *a)
{
    unsigned i;

    for (i = 0; a->devs && i < a->n_devs; i++)
        free(a->devs[i].clocks);
    free(a->devs);
    a->devs = NULL;
    a->n_devs = 0;
}

void eerl_agent_free(eerl_agent *a)
{
    if (!a)
        return;
    reg_remove(a);
    if (forked(a)) {
        /* The heartbeat thread, the mutex's holder and the lease are the parent's. */
        if (a->fd >= 0)
            close(a->fd);
        free_devs(a);
        free(a->rb.p);
        free(a);
        return;
    }
    if (a->hb_running) {
        pthread_mutex_lock(&a->mu);
        a->hb_stop = 1;
        pthread_cond_signal(&a->hb_cv);
        pthread_mutex_unlock(&a->mu);
        pthread_join(a->hb, NULL);
    }
    if (a->fd >= 0)
        close(a->fd);
    free_devs(a);
    pthread_cond_destroy(&a->hb_cv);
    pthread_mutex_destroy(&a->mu);
    free(a->rb.p);
    free(a);
}

const char *eerl_agent_last_error(eerl_agent *a)
{
    return a ? a->last_error : "";
}

int eerl_agent_info(eerl_agent *a, struct eerl_agent_info *ret_info)
{
    if (!a || !ret_info)
        return EERL_EINVAL;
    *ret_info = a->info;
    return 0;
}

static int fill_gpus(struct eerl_agent_req *req, const unsigned *gpus, size_t n, int required)
{
    if (n > EERL_AGENT_GPUS_MAX || (n && !gpus) || (required && n == 0))
        return EERL_EINVAL;
    if (n)
        memcpy(req->gpus, gpus, n * sizeof(*gpus));
    req->n_gpus = n;
    req->has_gpus = n > 0;
    return 0;
}

static int simple(eerl_agent *a, enum eerl_agent_op op, const unsigned *gpus, size_t n,
                  int required)
{
    struct eerl_agent_req req;
    int e;

    if (!a)
        return EERL_EINVAL;
    memset(&req, 0, sizeof(req));
    req.op = op;
    if ((e = fill_gpus(&req, gpus, n, required)) < 0)
        return e;
    return call(a, &req, NULL);
}

/* Records what a successful lease (held = 1) or release (0) did; n == 0: every GPU. */
static void mark_held(eerl_agent *a, const unsigned *gpus, size_t n, unsigned char held)
{
    size_t k;

    pthread_mutex_lock(&a->mu);
    if (n == 0)
        memset(a->held, 0, sizeof(a->held));
    for (k = 0; k < n; k++)
        if (gpus[k] <= EERL_AGENT_GPU_INDEX_MAX)
            a->held[gpus[k]] = held;
    pthread_mutex_unlock(&a->mu);
}

int eerl_agent_lease(eerl_agent *a, const unsigned *gpus, size_t n)
{
    int e = simple(a, EERL_AGENT_OP_LEASE, gpus, n, 1);

    if (e == 0)
        mark_held(a, gpus, n, 1);
    return e;
}

int eerl_agent_release(eerl_agent *a, const unsigned *gpus, size_t n)
{
    int e = simple(a, EERL_AGENT_OP_RELEASE, gpus, n, 0);

    if (e == 0)
        mark_held(a, gpus, n, 0);
    return e;
}

/* ---- the runtime's clock owner over eerld ---- */

static int owner_lock(void *ctx, const unsigned *gpus, size_t n, unsigned mhz)
{
    eerl_agent *a = ctx;
    unsigned need[EERL_AGENT_GPUS_MAX];
    size_t k, m = 0;
    int e;

    if (n > EERL_AGENT_GPUS_MAX)
        return EERL_EINVAL;
    if (forked(a))
        return eerl_agent_heartbeat(a); /* refused, with the reason in last_error */
    pthread_mutex_lock(&a->mu);
    for (k = 0; k < n; k++)
        if (gpus[k] > EERL_AGENT_GPU_INDEX_MAX || !a->held[gpus[k]])
            need[m++] = gpus[k];
    pthread_mutex_unlock(&a->mu);
    if (m && (e = eerl_agent_lease(a, need, m)) < 0)
        return e;
    return eerl_agent_set_clocks(a, gpus, n, mhz, mhz);
}

static int owner_restore(void *ctx)
{
    eerl_agent *a = ctx;
    uint64_t lost = 0;
    int up = 1, e = eerl_agent_release(a, NULL, 0);

    /* A lost link: eerld resets every GPU of a closed connection, ours included. */
    if (e < 0 && eerl__agent_link(a, &lost, &up, NULL, 0) == 0 && lost && !up)
        return 0;
    return e;
}

static const char *owner_last_error(void *ctx)
{
    return eerl_agent_last_error(ctx);
}

int eerl_agent_clock_owner(eerl_agent *a, struct eerl_rt_clock_owner *ret_owner)
{
    if (!a || !ret_owner)
        return EERL_EINVAL;
    memset(ret_owner, 0, sizeof(*ret_owner));
    ret_owner->ctx = a;
    ret_owner->lock = owner_lock;
    ret_owner->restore = owner_restore;
    ret_owner->last_error = owner_last_error;
    return 0;
}

int eerl_agent_reset(eerl_agent *a, const unsigned *gpus, size_t n)
{
    int e = simple(a, EERL_AGENT_OP_RESET, gpus, n, 0);

    if (e == 0)
        mark_held(a, gpus, n, 0); /* a reset ends our own lease too */
    return e;
}

int eerl_agent_heartbeat(eerl_agent *a)
{
    return simple(a, EERL_AGENT_OP_HEARTBEAT, NULL, 0, 0);
}

int eerl_agent_set_clocks(eerl_agent *a, const unsigned *gpus, size_t n, unsigned min_mhz,
                          unsigned max_mhz)
{
    struct eerl_agent_req req;
    int e;

    if (!a || min_mhz > max_mhz || (min_mhz == 0) != (max_mhz == 0) || max_mhz > EERL_AGENT_MHZ_MAX)
        return EERL_EINVAL;
    memset(&req, 0, sizeof(req));
    req.op = EERL_AGENT_OP_SET;
    if ((e = fill_gpus(&req, gpus, n, 1)) < 0)
        return e;
    req.min_mhz = min_mhz;
    req.max_mhz = max_mhz;
    return call(a, &req, NULL);
}

static int pool_name_ok(const char *name)
{
    size_t i, n = name ? strlen(name) : 0;

    if (n == 0 || n > EERL_AGENT_POOL_NAME_MAX)
        return 0;
    for (i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.'))
            return 0;
    }
    return 1;
}

int eerl_agent_define_pool(eerl_agent *a, const char *name, const unsigned *gpus, size_t n,
                           unsigned gen_mhz, unsigned train_mhz, unsigned idle_mhz)
{
    struct eerl_agent_req req;
    int e;

    if (!a || !pool_name_ok(name) || gen_mhz > EERL_AGENT_MHZ_MAX ||
        train_mhz > EERL_AGENT_MHZ_MAX || idle_mhz > EERL_AGENT_MHZ_MAX)
        return EERL_EINVAL;
    memset(&req, 0, sizeof(req));
    req.op = EERL_AGENT_OP_POOL;
    if ((e = fill_gpus(&req, gpus, n, 1)) < 0)
        return e;
    snprintf(req.pool, sizeof(req.pool), "%s", name);
    req.pool_mhz[0] = gen_mhz;
    req.pool_mhz[1] = train_mhz;
    req.pool_mhz[2] = idle_mhz;
    return call(a, &req, NULL);
}

int eerl_agent_set_phase(eerl_agent *a, const char *name, eerl_agent_phase phase)
{
    struct eerl_agent_req req;

    if (!a || !pool_name_ok(name) || (unsigned)phase > EERL_AGENT_PHASE_IDLE)
        return EERL_EINVAL;
    memset(&req, 0, sizeof(req));
    req.op = EERL_AGENT_OP_PHASE;
    snprintf(req.pool, sizeof(req.pool), "%s", name);
    req.phase = phase;
    return call(a, &req, NULL);
}

int eerl_agent_read(eerl_agent *a, const unsigned *gpus, size_t n, struct eerl_agent_reading *out,
                    size_t cap, size_t *ret_n)
{
    struct eerl_agent_req req;
    json_t *rep = NULL, *arr, *x;
    size_t i, m;
    int e;

    if (!a || !out)
        return EERL_EINVAL;
    memset(&req, 0, sizeof(req));
    req.op = EERL_AGENT_OP_READ;
    if ((e = fill_gpus(&req, gpus, n, 0)) < 0)
        return e;
    if ((e = call(a, &req, &rep)) < 0)
        return e;
    arr = json_object_get(rep, "readings");
    m = json_array_size(arr);
    if (m > cap) {
        json_decref(rep);
        snprintf(a->last_error, sizeof(a->last_error), "%zu readings, room for %zu", m, cap);
        return EERL_EOVERFLOW;
    }
    json_array_foreach(arr, i, x)
    {
        struct eerl_agent_reading *r = &out[i];
        json_t *en = json_object_get(x, "energy_mj");

        memset(r, 0, sizeof(*r));
        r->gpu = get_u(x, "gpu");
        if (json_object_get(x, "error")) {
            r->err = eerl_agent_err_from_name(json_string_value(json_object_get(x, "error")));
            continue;
        }
        r->energy_mj = json_is_integer(en) ? (uint64_t)json_integer_value(en) : 0;
        r->power_mw = get_u(x, "power_mw");
        r->sm_mhz = get_u(x, "sm_mhz");
        r->has_reasons = json_is_integer(json_object_get(x, "reasons"));
        r->reasons = get_u(x, "reasons");
        r->limit_mw = get_u(x, "limit_mw");
    }
    json_decref(rep);
    if (ret_n)
        *ret_n = m;
    return 0;
}

/* Dials the socket again after a loss, without holding a->mu (see "Deadlines" above); called
 * by the heartbeat thread, which holds it. The new connection holds no GPU: the runtime leases
 * again. */
static void redial(eerl_agent *a)
{
    struct eerl_agent_info info;
    struct rbuf rb = {NULL, 0, 0};
    char why[256];
    int fd = -1, e;

    pthread_mutex_unlock(&a->mu);
    e = dial(a->path, a->client, a->call_ms, &rb, &fd, &info, why, sizeof(why));
    pthread_mutex_lock(&a->mu);
    if (e == 0 && a->fd < 0 && !a->hb_stop) {
        a->fd = fd;
        free(a->rb.p);
        a->rb = rb;
        a->info = info;
        a->next_id = 1;
        a->call_ms = call_ms_for(info.heartbeat_ms);
        a->redials++;
        return;
    }
    if (e < 0)
        snprintf(a->down_why, sizeof(a->down_why), "%s", why);
    if (fd >= 0)
        close(fd);
    free(rb.p);
}

const char *eerl__agent_path(const eerl_agent *a)
{
    return a ? a->path : "";
}

int eerl__agent_link(eerl_agent *a, uint64_t *ret_lost, int *ret_up, char *why, size_t why_len)
{
    if (!a || !ret_lost || !ret_up)
        return EERL_EINVAL;
    if (forked(a))
        return EERL_ESTATE;
    pthread_mutex_lock(&a->mu);
    *ret_lost = a->lost;
    *ret_up = a->fd >= 0;
    set_why(why, why_len, 0, "%s", a->lost ? a->down_why : "");
    pthread_mutex_unlock(&a->mu);
    return 0;
}

static void *hb_main(void *arg)
{
    eerl_agent *a = arg;
    sigset_t all;

    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    pthread_mutex_lock(&a->mu);
    while (!a->hb_stop) {
        struct timespec ts;
        int r;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += a->hb_interval_ms / 1000;
        ts.tv_nsec += (long)(a->hb_interval_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        r = pthread_cond_timedwait(&a->hb_cv, &a->mu, &ts);
        if (a->hb_stop)
            break;
        if (r == ETIMEDOUT && a->fd < 0 && a->lost && a->path[0]) {
            redial(a);
        } else if (r == ETIMEDOUT) {
            struct eerl_agent_req req;
            json_t *rep = NULL;
            char why[64];

            memset(&req, 0, sizeof(req));
            req.op = EERL_AGENT_OP_HEARTBEAT;
            if (round_trip(a, &req, &rep, why, sizeof(why)) == 0)
                json_decref(rep);
        }
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

int eerl_agent_start_heartbeat(eerl_agent *a, unsigned interval_ms)
{
    if (!a)
        return EERL_EINVAL;
    if (a->hb_running)
        return EERL_ESTATE;
    if (forked(a))
        return eerl_agent_heartbeat(a); /* refused, with the reason in last_error */
    if (interval_ms == 0)
        interval_ms = a->info.heartbeat_ms ? a->info.heartbeat_ms / 3 : 1000;
    if (interval_ms == 0)
        interval_ms = 1;
    a->hb_interval_ms = interval_ms;
    a->hb_stop = 0;
    if (pthread_create(&a->hb, NULL, hb_main, a) != 0)
        return EERL_ESYS;
    a->hb_running = 1;
    return 0;
}

static void copy_str(json_t *o, const char *key, char *buf, size_t len)
{
    const char *s = json_string_value(json_object_get(o, key));
    snprintf(buf, len, "%s", s ? s : "");
}

int eerl_agent_status(eerl_agent *a, struct eerl_agent_gpu_status *out, size_t cap, size_t *ret_n)
{
    struct eerl_agent_req req;
    json_t *rep = NULL, *arr, *x;
    size_t i, m;
    int e;

    if (!a || !out || !ret_n)
        return EERL_EINVAL;
    memset(&req, 0, sizeof(req));
    req.op = EERL_AGENT_OP_STATUS;
    if ((e = call(a, &req, &rep)) < 0)
        return e;
    arr = json_object_get(rep, "gpus");
    m = json_array_size(arr);
    if (m > cap) {
        json_decref(rep);
        snprintf(a->last_error, sizeof(a->last_error), "%zu GPUs, room for %zu", m, cap);
        return EERL_EOVERFLOW;
    }
    json_array_foreach(arr, i, x)
    {
        struct eerl_agent_gpu_status *s = &out[i];
        json_t *locked = json_object_get(x, "locked"), *holder = json_object_get(x, "holder");
        json_t *en = json_object_get(x, "energy_mj");

        memset(s, 0, sizeof(*s));
        s->gpu = get_u(x, "gpu");
        copy_str(x, "uuid", s->uuid, sizeof(s->uuid));
        copy_str(x, "name", s->name, sizeof(s->name));
        if (json_object_get(x, "error")) {
            s->err = eerl_agent_err_from_name(json_string_value(json_object_get(x, "error")));
            copy_str(x, "message", s->error, sizeof(s->error));
        }
        s->sm_mhz = get_u(x, "sm_mhz");
        s->power_mw = get_u(x, "power_mw");
        s->energy_mj = json_is_integer(en) ? (uint64_t)json_integer_value(en) : 0;
        if (json_is_array(locked) && json_array_size(locked) == 2) {
            json_int_t lo = json_integer_value(json_array_get(locked, 0));
            json_int_t hi = json_integer_value(json_array_get(locked, 1));
            s->locked_min_mhz = lo > 0 ? (unsigned)lo : 0;
            s->locked_max_mhz = hi > 0 ? (unsigned)hi : 0;
        }
        if (json_is_object(holder)) {
            s->leased = 1;
            s->holder_uid = get_u(holder, "uid");
            s->holder_pid = get_u(holder, "pid");
        }
        s->floor_mhz = get_u(x, "floor_mhz");
        s->ceiling_mhz = get_u(x, "ceiling_mhz");
        s->min_mhz = get_u(x, "min_mhz");
        s->max_mhz = get_u(x, "max_mhz");
    }
    json_decref(rep);
    *ret_n = m;
    return 0;
}

/* ---- the device view ---- */

static int load_devs(eerl_agent *a)
{
    struct eerl_agent_req req;
    json_t *rep = NULL, *arr, *x, *c;
    size_t i, k;
    int e;

    if (a->devs)
        return 0;
    memset(&req, 0, sizeof(req));
    req.op = EERL_AGENT_OP_DEVICES;
    if ((e = call(a, &req, &rep)) < 0)
        return e;
    arr = json_object_get(rep, "gpus");
    a->devs = calloc(json_array_size(arr) + 1, sizeof(*a->devs));
    if (!a->devs) {
        json_decref(rep);
        return EERL_ENOMEM;
    }
    a->n_devs = (unsigned)json_array_size(arr);
    json_array_foreach(arr, i, x)
    {
        struct dev_cache *d = &a->devs[i];

        copy_str(x, "uuid", d->uuid, sizeof(d->uuid));
        copy_str(x, "name", d->name, sizeof(d->name));
        c = json_object_get(x, "clocks");
        d->n_clocks = json_array_size(c);
        d->clocks = calloc(d->n_clocks + 1, sizeof(unsigned));
        if (!d->clocks) {
            free_devs(a);
            json_decref(rep);
            return EERL_ENOMEM;
        }
        for (k = 0; k < d->n_clocks; k++)
            d->clocks[k] = (unsigned)json_integer_value(json_array_get(c, k));
    }
    json_decref(rep);
    return 0;
}

static eerl_agent *ag(eerl_device *dev)
{
    return eerl__device_impl(dev);
}

static int op_count(eerl_device *dev, unsigned *ret_count)
{
    *ret_count = ag(dev)->n_devs;
    return 0;
}

static int op_str(eerl_device *dev, const char *s, char *buf, size_t len)
{
    (void)dev;
    if (strlen(s) + 1 > len)
        return EERL_EOVERFLOW;
    memcpy(buf, s, strlen(s) + 1);
    return 0;
}

static int op_name(eerl_device *dev, unsigned gpu, char *buf, size_t len)
{
    return op_str(dev, ag(dev)->devs[gpu].name, buf, len);
}

static int op_uuid(eerl_device *dev, unsigned gpu, char *buf, size_t len)
{
    return op_str(dev, ag(dev)->devs[gpu].uuid, buf, len);
}

static int op_clocks(eerl_device *dev, unsigned gpu, unsigned *mhz, size_t cap, size_t *ret_n)
{
    struct dev_cache *d = &ag(dev)->devs[gpu];

    if (d->n_clocks > cap)
        return EERL_EOVERFLOW;
    memcpy(mhz, d->clocks, d->n_clocks * sizeof(unsigned));
    *ret_n = d->n_clocks;
    return 0;
}

static int read_one(eerl_device *dev, unsigned gpu, struct eerl_agent_reading *r)
{
    eerl_agent *a = ag(dev);
    int e = eerl_agent_read(a, &gpu, 1, r, 1, NULL);

    if (e < 0)
        return eerl__device_fail(dev, e, "eerld read (gpu %u): %s", gpu, a->last_error);
    if (r->err < 0)
        return eerl__device_fail(dev, r->err, "eerld read (gpu %u): %s", gpu,
                                 eerl_strerror(r->err));
    return 0;
}

static int op_sm_clock(eerl_device *dev, unsigned gpu, unsigned *ret_mhz)
{
    struct eerl_agent_reading r;
    int e = read_one(dev, gpu, &r);

    if (e == 0)
        *ret_mhz = r.sm_mhz;
    return e;
}

static int op_energy(eerl_device *dev, unsigned gpu, uint64_t *ret_mj)
{
    struct eerl_agent_reading r;
    int e = read_one(dev, gpu, &r);

    if (e == 0)
        *ret_mj = r.energy_mj;
    return e;
}

static int op_power(eerl_device *dev, unsigned gpu, unsigned *ret_mw)
{
    struct eerl_agent_reading r;
    int e = read_one(dev, gpu, &r);

    if (e == 0)
        *ret_mw = r.power_mw;
    return e;
}

/* The daemon's read carries the reasons and the limit where its driver has them
 * (docs/eerld-protocol.md); the meter reads them with the rest of a tick (op_read). */
static int op_reasons(eerl_device *dev, unsigned gpu, uint64_t *ret_mask)
{
    struct eerl_agent_reading r;
    int e = read_one(dev, gpu, &r);

    if (e == 0 && !r.has_reasons)
        return EERL_ENOTSUP;
    if (e == 0)
        *ret_mask = r.reasons;
    return e;
}

static int op_limit(eerl_device *dev, unsigned gpu, unsigned *ret_mw)
{
    struct eerl_agent_reading r;
    int e = read_one(dev, gpu, &r);

    if (e == 0 && r.limit_mw == 0)
        return EERL_ENOTSUP;
    if (e == 0)
        *ret_mw = r.limit_mw;
    return e;
}

/* What eerld answered of one GPU, as the parts of a read: its read answers all of them. */
static void fill_read(struct eerl__device_read *x, const struct eerl_agent_reading *r)
{
    if (r->err < 0) {
        eerl__device_read_fail(x, ~0u, r->err);
        return;
    }
    x->energy_r = x->power_r = x->clock_r = 0;
    x->energy_mj = r->energy_mj;
    x->power_mw = r->power_mw;
    x->power_instant = 0; /* the daemon's power is NVML's averaged reading */
    x->sm_mhz = r->sm_mhz;
    x->reasons_r = r->has_reasons ? 0 : EERL_ENOTSUP;
    x->reasons = r->reasons;
    x->limit_r = r->limit_mw ? 0 : EERL_ENOTSUP;
    x->limit_mw = r->limit_mw;
}

/* One tick's reads of every GPU asked in one round trip (eerld's read answers energy, power,
 * clock, reasons and limit together), where reading part by part took one per part and GPU. */
static int op_read(eerl_device *dev, struct eerl__device_read *rd, size_t n)
{
    eerl_agent *a = ag(dev);
    struct eerl_agent_reading *out = calloc(n ? n : 1, sizeof(*out));
    unsigned *gpus = calloc(n ? n : 1, sizeof(*gpus));
    size_t i, m = 0, got = 0;
    int e = out && gpus ? 0 : EERL_ENOMEM;

    for (i = 0; e == 0 && i < n; i++)
        if (rd[i].want)
            gpus[m++] = rd[i].gpu;
    if (e == 0 && m > 0 && (e = eerl_agent_read(a, gpus, m, out, m, &got)) < 0)
        eerl__device_fail(dev, e, "eerld read (%zu GPU%s): %s", m, m == 1 ? "" : "s",
                          a->last_error);
    if (e == 0 && got != m)
        e = eerl__device_fail(dev, EERL_EPARSE, "eerld read: %zu readings for %zu GPUs", got, m);
    for (i = 0, m = 0; i < n; i++) {
        if (!rd[i].want)
            continue;
        if (e < 0 || out[m].gpu != rd[i].gpu)
            eerl__device_read_fail(&rd[i], ~0u, e < 0 ? e : EERL_EPARSE);
        else
            fill_read(&rd[i], &out[m]);
        m++;
    }
    free(out);
    free(gpus);
    return 0;
}

static int op_lock(eerl_device *dev, unsigned gpu, unsigned min_mhz, unsigned max_mhz)
{
    eerl_agent *a = ag(dev);
    int e = eerl_agent_set_clocks(a, &gpu, 1, min_mhz, max_mhz);

    if (e < 0)
        return eerl__device_fail(dev, e, "eerld set (gpu %u, %u-%u MHz): %s", gpu, min_mhz, max_mhz,
                                 a->last_error);
    return 0;
}

static int op_reset(eerl_device *dev, unsigned gpu)
{
    eerl_agent *a = ag(dev);
    int e = eerl_agent_set_clocks(a, &gpu, 1, 0, 0);

    if (e < 0)
        return eerl__device_fail(dev, e, "eerld set (gpu %u, governor): %s", gpu, a->last_error);
    return 0;
}

static void op_free(void *impl)
{
    (void)impl; /* borrowed */
}

static const struct eerl__device_ops agent_ops = {
    .backend = "eerld",
    .count = op_count,
    .name = op_name,
    .uuid = op_uuid,
    .supported_sm_clocks = op_clocks,
    .sm_clock = op_sm_clock,
    .energy_mj = op_energy,
    .power_mw = op_power,
    .throttle_reasons = op_reasons,
    .lock_sm_clocks = op_lock,
    .reset_sm_clocks = op_reset,
    .free = op_free,
    .power_limit_mw = op_limit,
    .read = op_read,
};

eerl_agent *eerl__agent_of_device(eerl_device *dev)
{
    return dev && !strcmp(eerl_device_backend(dev), agent_ops.backend) ? ag(dev) : NULL;
}

int eerl_agent_device(eerl_agent *a, eerl_device **ret_dev)
{
    int e;

    if (!a || !ret_dev)
        return EERL_EINVAL;
    if ((e = load_devs(a)) < 0)
        return e;
    return eerl__device_new(&agent_ops, a, ret_dev);
}

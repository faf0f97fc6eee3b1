/* The eerld client library (include/eerl/agent.h). Owns one socket per eerl_agent, its mutex,
 * the optional heartbeat thread, and the cached device list behind eerl_agent_device. Requests
 * are strictly one at a time per connection (send a line, read the line that answers it, check
 * the id), which keeps the daemon's per-connection state trivial and the latency a single round
 * trip. It never prints; the daemon's message for a refusal lands in last_error.
 *
 * Time: the heartbeat waits on CLOCK_MONOTONIC, so a step of the wall clock (NTP, an operator,
 * a clock ahead) never delays a heartbeat past the daemon's timeout.
 *
 * Fork: a connection belongs to the process that opened it. A process-wide registry (its mutex
 * held across fork) lets the child handler close every inherited socket in a forked child, so a
 * child that lives on never keeps a lease alive after its parent dies (SOCK_CLOEXEC only covers
 * exec). In the child every call then fails with EERL_ESTATE without touching the mutex (it may
 * have been copied locked), and eerl_agent_free frees memory only: no join of the parent's
 * heartbeat thread, no release of the parent's GPUs. */
#include <errno.h>
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
#include "agent/protocol.h"
#include "device/device_impl.h"

struct dev_cache {
    char uuid[EERL_DEVICE_UUID_MAX];
    char name[EERL_DEVICE_NAME_MAX];
    unsigned *clocks;
    size_t n_clocks;
};

struct eerl_agent {
    int fd;
    pid_t pid;                       /* the process that connected; see "Fork" above */
    eerl_agent *reg_prev, *reg_next; /* the registry, under reg_mu */
    pthread_mutex_t mu;
    uint64_t next_id;
    char *rbuf; /* rcap bytes: what was read past the last answered line */
    size_t rcap;
    size_t rlen;
    char last_error[256];
    struct eerl_agent_info info;
    /* heartbeat thread */
    pthread_t hb;
    int hb_running, hb_stop;
    unsigned hb_interval_ms;
    pthread_cond_t hb_cv;
    /* GPUs this connection holds, as far as our own lease/release/reset calls tell (a lease
     * root took away shows up as a refused set) */
    unsigned char held[EERL__AGENT_GPU_INDEX_MAX + 1];
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

static int send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Reads one line (without its newline) into a malloc'd buffer. */
static int read_line(eerl_agent *a, char **ret_line, size_t *ret_len, char *why, size_t why_len)
{
    for (;;) {
        char *nl = memchr(a->rbuf, '\n', a->rlen);
        ssize_t r;

        if (nl) {
            size_t n = (size_t)(nl - a->rbuf);
            char *line = malloc(n + 1);

            if (!line)
                return set_why(why, why_len, EERL_ENOMEM, "out of memory");
            memcpy(line, a->rbuf, n);
            line[n] = '\0';
            memmove(a->rbuf, nl + 1, a->rlen - n - 1);
            a->rlen -= n + 1;
            *ret_line = line;
            *ret_len = n;
            return 0;
        }
        if (a->rlen == a->rcap) {
            /* Replies have no fixed size (status of 1024 GPUs is ~0.3 MiB): grow, up to a
             * bound that only a broken daemon would reach. */
            char *p;

            if (a->rcap >= EERL__AGENT_REPLY_MAX)
                return set_why(why, why_len, EERL_EPARSE, "eerld sent a line longer than %d bytes",
                               EERL__AGENT_REPLY_MAX);
            p = realloc(a->rbuf, a->rcap * 2);
            if (!p)
                return set_why(why, why_len, EERL_ENOMEM, "out of memory");
            a->rbuf = p;
            a->rcap *= 2;
        }
        r = recv(a->fd, a->rbuf + a->rlen, a->rcap - a->rlen, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return set_why(why, why_len, EERL_EIO, "reading from eerld: %s", strerror(errno));
        if (r == 0)
            return set_why(why, why_len, EERL_EIO, "eerld closed the connection");
        a->rlen += (size_t)r;
    }
}

/* One round trip. On success *ret_reply is the reply object (ok: true). A refusal returns the
 * daemon's code with its message in why. Caller holds a->mu. */
static int round_trip(eerl_agent *a, struct eerl__agent_req *req, json_t **ret_reply, char *why,
                      size_t why_len)
{
    char buf[4096];
    size_t n, len = 0;
    char *line = NULL;
    json_t *rep = NULL, *x;
    json_error_t jerr;
    int e;

    if (a->fd < 0)
        return set_why(why, why_len, EERL_ESTATE, "the connection to eerld is closed");
    req->has_id = 1;
    req->id = ++a->next_id;
    e = eerl__agent_encode_request(req, buf, sizeof(buf), &n);
    if (e < 0)
        return set_why(why, why_len, e, "cannot encode the %s request",
                       eerl__agent_op_name(req->op));
    if (send_all(a->fd, buf, n) < 0)
        return set_why(why, why_len, EERL_EIO, "writing to eerld: %s", strerror(errno));
    e = read_line(a, &line, &len, why, why_len);
    if (e < 0)
        return e;
    rep = json_loadb(line, len, 0, &jerr);
    free(line);
    if (!rep || !json_is_object(rep)) {
        json_decref(rep);
        return set_why(why, why_len, EERL_EPARSE, "eerld sent a reply that is not a JSON object");
    }
    x = json_object_get(rep, "id");
    if (x && (!json_is_integer(x) || (uint64_t)json_integer_value(x) != req->id)) {
        json_decref(rep);
        return set_why(why, why_len, EERL_EPARSE,
                       "eerld answered another request (expected id %llu)",
                       (unsigned long long)req->id);
    }
    if (!json_is_true(json_object_get(rep, "ok"))) {
        const char *msg = json_string_value(json_object_get(rep, "message"));

        e = eerl__agent_err_from_name(json_string_value(json_object_get(rep, "error")));
        set_why(why, why_len, e, "%s", msg ? msg : "eerld refused the request");
        json_decref(rep);
        return e;
    }
    *ret_reply = rep;
    return 0;
}

static int call(eerl_agent *a, struct eerl__agent_req *req, json_t **ret_reply)
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

int eerl_agent_connect(const char *path, const char *client_name, char *why, size_t why_len,
                       eerl_agent **ret_agent)
{
    struct sockaddr_un sa;
    eerl_agent *a = NULL;
    struct eerl__agent_req req;
    json_t *rep = NULL;
    int e;

    if (!ret_agent)
        return EERL_EINVAL;
    if (!path)
        path = eerl_agent_socket_path();
    if (strlen(path) >= sizeof(sa.sun_path))
        return set_why(why, why_len, EERL_EINVAL, "socket path '%s' is longer than %zu bytes", path,
                       sizeof(sa.sun_path) - 1);
    a = calloc(1, sizeof(*a));
    if (!a || !(a->rbuf = malloc(EERL_AGENT_MSG_MAX))) {
        free(a);
        return set_why(why, why_len, EERL_ENOMEM, "out of memory");
    }
    a->rcap = EERL_AGENT_MSG_MAX;
    a->pid = getpid();
    a->fd = -1;
    e = init_sync(a, why, why_len);
    if (e < 0) {
        free(a->rbuf);
        free(a);
        return e;
    }
    reg_add(a);
    a->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (a->fd < 0) {
        e = set_why(why, why_len, EERL_ESYS, "socket: %s", strerror(errno));
        goto fail;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    if (connect(a->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        int err = errno;

        e = err == ENOENT || err == ECONNREFUSED ? EERL_ENOENT
            : err == EACCES || err == EPERM      ? EERL_ENOPERM
                                                 : EERL_ESYS;
        set_why(why, why_len, e, "cannot connect to eerld at %s: %s%s", path, strerror(err),
                err == EACCES      ? " (the socket is for root and its group, usually 'eerl')"
                : e == EERL_ENOENT ? " (is eerld running? set EERL_SOCKET or --socket)"
                                   : "");
        goto fail;
    }
    memset(&req, 0, sizeof(req));
    req.op = EERL__OP_HELLO;
    req.version = EERL_AGENT_PROTOCOL_VERSION;
    snprintf(req.client, sizeof(req.client), "%s", client_name ? client_name : "eerl");
    e = round_trip(a, &req, &rep, why, why_len);
    if (e < 0)
        goto fail;
    a->info.gpus = get_u(rep, "gpus");
    a->info.heartbeat_ms = get_u(rep, "heartbeat_ms");
    a->info.uid = get_u(rep, "uid");
    a->info.may_lease = json_is_true(json_object_get(rep, "may_lease"));
    snprintf(a->info.server, sizeof(a->info.server), "%s",
             json_string_value(json_object_get(rep, "server")) ?: "");
    json_decref(rep);
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
        free(a->rbuf);
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
    free(a->rbuf);
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

static int fill_gpus(struct eerl__agent_req *req, const unsigned *gpus, size_t n, int required)
{
    if (n > EERL_AGENT_GPUS_MAX || (n && !gpus) || (required && n == 0))
        return EERL_EINVAL;
    if (n)
        memcpy(req->gpus, gpus, n * sizeof(*gpus));
    req->n_gpus = n;
    req->has_gpus = n > 0;
    return 0;
}

static int simple(eerl_agent *a, enum eerl__agent_op op, const unsigned *gpus, size_t n,
                  int required)
{
    struct eerl__agent_req req;
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
        if (gpus[k] <= EERL__AGENT_GPU_INDEX_MAX)
            a->held[gpus[k]] = held;
    pthread_mutex_unlock(&a->mu);
}

int eerl_agent_lease(eerl_agent *a, const unsigned *gpus, size_t n)
{
    int e = simple(a, EERL__OP_LEASE, gpus, n, 1);

    if (e == 0)
        mark_held(a, gpus, n, 1);
    return e;
}

int eerl_agent_release(eerl_agent *a, const unsigned *gpus, size_t n)
{
    int e = simple(a, EERL__OP_RELEASE, gpus, n, 0);

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
        if (gpus[k] > EERL__AGENT_GPU_INDEX_MAX || !a->held[gpus[k]])
            need[m++] = gpus[k];
    pthread_mutex_unlock(&a->mu);
    if (m && (e = eerl_agent_lease(a, need, m)) < 0)
        return e;
    return eerl_agent_set_clocks(a, gpus, n, mhz, mhz);
}

static int owner_restore(void *ctx)
{
    return eerl_agent_release(ctx, NULL, 0);
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
    int e = simple(a, EERL__OP_RESET, gpus, n, 0);

    if (e == 0)
        mark_held(a, gpus, n, 0); /* a reset ends our own lease too */
    return e;
}

int eerl_agent_heartbeat(eerl_agent *a)
{
    return simple(a, EERL__OP_HEARTBEAT, NULL, 0, 0);
}

int eerl_agent_set_clocks(eerl_agent *a, const unsigned *gpus, size_t n, unsigned min_mhz,
                          unsigned max_mhz)
{
    struct eerl__agent_req req;
    int e;

    if (!a || min_mhz > max_mhz || (min_mhz == 0) != (max_mhz == 0) ||
        max_mhz > EERL__AGENT_MHZ_MAX)
        return EERL_EINVAL;
    memset(&req, 0, sizeof(req));
    req.op = EERL__OP_SET;
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
    struct eerl__agent_req req;
    int e;

    if (!a || !pool_name_ok(name) || gen_mhz > EERL__AGENT_MHZ_MAX ||
        train_mhz > EERL__AGENT_MHZ_MAX || idle_mhz > EERL__AGENT_MHZ_MAX)
        return EERL_EINVAL;
    memset(&req, 0, sizeof(req));
    req.op = EERL__OP_POOL;
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
    struct eerl__agent_req req;

    if (!a || !pool_name_ok(name) || (unsigned)phase > EERL_AGENT_PHASE_IDLE)
        return EERL_EINVAL;
    memset(&req, 0, sizeof(req));
    req.op = EERL__OP_PHASE;
    snprintf(req.pool, sizeof(req.pool), "%s", name);
    req.phase = phase;
    return call(a, &req, NULL);
}

int eerl_agent_read(eerl_agent *a, const unsigned *gpus, size_t n, struct eerl_agent_reading *out,
                    size_t cap, size_t *ret_n)
{
    struct eerl__agent_req req;
    json_t *rep = NULL, *arr, *x;
    size_t i, m;
    int e;

    if (!a || !out)
        return EERL_EINVAL;
    memset(&req, 0, sizeof(req));
    req.op = EERL__OP_READ;
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
            r->err = eerl__agent_err_from_name(json_string_value(json_object_get(x, "error")));
            continue;
        }
        r->energy_mj = json_is_integer(en) ? (uint64_t)json_integer_value(en) : 0;
        r->power_mw = get_u(x, "power_mw");
        r->sm_mhz = get_u(x, "sm_mhz");
    }
    json_decref(rep);
    if (ret_n)
        *ret_n = m;
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
        if (r == ETIMEDOUT) {
            struct eerl__agent_req req;
            json_t *rep = NULL;
            char why[64];

            memset(&req, 0, sizeof(req));
            req.op = EERL__OP_HEARTBEAT;
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
    struct eerl__agent_req req;
    json_t *rep = NULL, *arr, *x;
    size_t i, m;
    int e;

    if (!a || !out || !ret_n)
        return EERL_EINVAL;
    memset(&req, 0, sizeof(req));
    req.op = EERL__OP_STATUS;
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
            s->err = eerl__agent_err_from_name(json_string_value(json_object_get(x, "error")));
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
    struct eerl__agent_req req;
    json_t *rep = NULL, *arr, *x, *c;
    size_t i, k;
    int e;

    if (a->devs)
        return 0;
    memset(&req, 0, sizeof(req));
    req.op = EERL__OP_DEVICES;
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
    .throttle_reasons = NULL,
    .lock_sm_clocks = op_lock,
    .reset_sm_clocks = op_reset,
    .free = op_free,
};

int eerl_agent_device(eerl_agent *a, eerl_device **ret_dev)
{
    int e;

    if (!a || !ret_dev)
        return EERL_EINVAL;
    if ((e = load_devs(a)) < 0)
        return e;
    return eerl__device_new(&agent_ops, a, ret_dev);
}

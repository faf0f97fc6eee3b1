/* What the three parts of eerld's server share (server.c: setup, the event loop, connections
 * and the lease table's resets; handlers.c: the request handlers; reader.c: the reader thread
 * for slow device reads): the structs of the server, its connections, GPUs and reader jobs, and
 * the functions one part calls in another. Internal to eerld; each .c defines _GNU_SOURCE
 * before including it. */
#ifndef EERLD_SERVER_IMPL_H
#define EERLD_SERVER_IMPL_H

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

/* server.c */
void eerld__conn_free(struct server *s, struct conn *c, const char *why);
void eerld__conn_release_memory(struct conn *c);
int eerld__drop_lease(struct server *s, unsigned i, const char *why);
void eerld__flush_out(struct server *s, struct conn *c);
int eerld__journal_sync(struct server *s);
double eerld__now_s(void);
void eerld__queue_json(struct conn *c, json_t *o);
void eerld__serve_buffered(struct server *s, struct conn *c);
void eerld__update_events(struct server *s, struct conn *c);

/* handlers.c */
void eerld__handle_line(struct server *s, struct conn *c, const char *line, size_t len);
void eerld__reply_err_id(struct conn *c, int has_id, uint64_t id, int err, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* reader.c */
void eerld__finish_jobs(struct server *s);
struct job *eerld__job_new(const unsigned *gpus, size_t n);
void eerld__start_reader(struct server *s);
void eerld__stop_reader(struct server *s);
void eerld__submit(struct server *s, struct conn *c, struct job *j);
void eerld__write_metrics(struct server *s);

#endif

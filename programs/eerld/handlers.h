/* eerld's request handlers: one function per operation of the protocol
 * (docs/eerld-protocol.md), the checks they share (GPU indices, clocks, policy) and the replies.
 * A handler reads and changes the lease table and answers through its client's ops: send (a
 * reply to queue) or defer (a job of device reads, whose reply goes out when the reads are done).
 * They know nothing of sockets; a connection (conn.c) owns the client and its ops. Owns nothing
 * beyond one call. */
#ifndef EERLD_HANDLERS_H
#define EERLD_HANDLERS_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "leases.h"
#include "reader.h"

#define EERLD_POOLS_MAX 16

struct eerld_pool {
    char name[EERL_AGENT_POOL_NAME_MAX + 1];
    unsigned gpus[EERL_AGENT_GPUS_MAX];
    size_t n;
    unsigned mhz[3];
};

struct eerld_client;

struct eerld_client_ops {
    void (*send)(struct eerld_client *c, json_t *reply); /* queues; reply stays the caller's */
    void (*defer)(struct eerld_client *c, struct eerld_job *j); /* takes j */
};

/* What the protocol remembers about one client between its requests. */
struct eerld_client {
    struct eerld_holder who; /* identity from the kernel, and its lease count */
    int hello;
    char *refusal; /* over a connection limit: the answer to its first request, then close */
    struct eerld_pool pools[EERLD_POOLS_MAX];
    size_t n_pools;
    const struct eerld_client_ops *ops;
};

/* Parses one request line of c and answers it. Returns 1 if the connection must close after
 * the answer (a malformed request, a refused connection, an unsupported version). */
int eerld_handle_line(struct eerld_leases *t, unsigned heartbeat_ms, struct eerld_client *c,
                      const char *line, size_t len);

/* An error reply: {"id"?, "ok": false, "error": name of err, "message"}. */
json_t *eerld_reply_error(int has_id, uint64_t id, int err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif

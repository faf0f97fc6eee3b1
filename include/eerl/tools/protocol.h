/* The eerld wire protocol's requests (docs/eerld-protocol.md): one JSON object per line, at most
 * EERL_AGENT_MSG_MAX bytes with its newline. The request grammar: a request line parsed and
 * validated into a fixed-size struct (no allocation survives the call), and one encoded. It knows
 * nothing of sockets, GPUs or policy; eerld parses with it, libeerl's eerld client
 * (eerl/agent.h) encodes with it, and a fuzz target drives the parser directly. The code is
 * libeerl's (src/agent/protocol.c); not exported by libeerl.so, linked from libeerl.a. */
#ifndef EERL_TOOLS_PROTOCOL_H
#define EERL_TOOLS_PROTOCOL_H

#include <stddef.h>
#include <stdint.h>

#include "eerl/agent.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Highest GPU index a request may name (the daemon then checks it against its own count; it
 * serves at most EERL_AGENT_GPUS_MAX GPUs, so one request can name all of them). */
#define EERL_AGENT_GPU_INDEX_MAX (EERL_AGENT_GPUS_MAX - 1)
/* Highest clock a request may carry, MHz. */
#define EERL_AGENT_MHZ_MAX 100000
#define EERL_AGENT_CLIENT_MAX 64
/* A reply line has no fixed size; the client reads one up to this (a broken daemon). */
#define EERL_AGENT_REPLY_MAX (64 << 20)

enum eerl_agent_op {
    EERL_AGENT_OP_HELLO = 0,
    EERL_AGENT_OP_DEVICES,
    EERL_AGENT_OP_STATUS,
    EERL_AGENT_OP_READ,
    EERL_AGENT_OP_LEASE,
    EERL_AGENT_OP_SET,
    EERL_AGENT_OP_POOL,
    EERL_AGENT_OP_PHASE,
    EERL_AGENT_OP_RELEASE,
    EERL_AGENT_OP_HEARTBEAT,
    EERL_AGENT_OP_RESET,
    EERL_AGENT_OP_COUNT
};

struct eerl_agent_req {
    enum eerl_agent_op op;
    int has_id;
    uint64_t id;
    unsigned version;                        /* hello */
    char client[EERL_AGENT_CLIENT_MAX + 1];  /* hello, optional */
    int has_gpus;                            /* status, read, release, reset: optional */
    size_t n_gpus;                           /* 1..EERL_AGENT_GPUS_MAX when has_gpus */
    unsigned gpus[EERL_AGENT_GPUS_MAX];      /* distinct */
    unsigned min_mhz, max_mhz;               /* set: both 0 = governor */
    char pool[EERL_AGENT_POOL_NAME_MAX + 1]; /* pool, phase */
    unsigned pool_mhz[3];                    /* pool: gen, train, idle (0 = governor) */
    eerl_agent_phase phase;                  /* phase */
};

/* Parses one request (len bytes, newline excluded, need not be NUL-terminated). EERL_EPARSE
 * with why saying what is wrong (the key, the value, the limit) for anything but a valid
 * request; *ret is then untouched. The id, when one was readable, goes to *ret_id even on
 * failure (so the error reply can carry it); ret_id may be NULL. */
int eerl_agent_parse_request(const char *buf, size_t len, struct eerl_agent_req *ret,
                             uint64_t *ret_id, int *ret_has_id, char *why, size_t why_len);

/* Encodes req as one line with its newline into buf. EERL_EOVERFLOW if cap is too small,
 * EERL_EINVAL for a request the parser would refuse. */
int eerl_agent_encode_request(const struct eerl_agent_req *req, char *buf, size_t cap,
                              size_t *ret_len);

const char *eerl_agent_op_name(enum eerl_agent_op op);
const char *eerl_agent_phase_name(eerl_agent_phase phase);
/* "EERL_EBUSY" -> EERL_EBUSY; EERL_EIO for a name it does not know. */
int eerl_agent_err_from_name(const char *name);

#ifdef __cplusplus
}
#endif
#endif

/* The eerld client: a connection to the node daemon that owns the GPU clocks (docs/eerld.md,
 * protocol in docs/eerld-protocol.md). A client leases GPUs, sets their clocks (directly or by
 * switching a pool between its generation, training and idle clocks), reads energy counters, and
 * releases them; the daemon resets a client's GPUs when it releases, disconnects, dies or misses
 * heartbeats. Read-only queries (devices, status, read) need no lease.
 *
 * One eerl_agent is one connection. Every call on it is serialized by its own mutex, so a
 * heartbeat thread (eerl_agent_start_heartbeat) and the caller can share it. Calls return 0 or a
 * negative EERL_E* code (the daemon's refusals arrive as the same codes: EERL_EBUSY for a GPU
 * another client holds, EERL_ENOPERM for a policy refusal, EERL_ERANGE for a clock outside the
 * policy's floor/ceiling); eerl_agent_last_error has the daemon's message with the values.
 *
 * Fork: the socket is opened close-on-exec, and a fork without exec closes the child's copy at
 * once (pthread_atfork), so only the process that connected keeps a lease alive. In the child
 * every call fails with EERL_ESTATE and eerl_agent_free frees memory only. The heartbeat waits on
 * CLOCK_MONOTONIC: a step of the wall clock never delays it. */
#ifndef EERL_AGENT_H
#define EERL_AGENT_H

#include <stddef.h>
#include <stdint.h>

#include "eerl/device.h"
#include "eerl/export.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EERL_AGENT_DEFAULT_SOCKET "/run/eerl/eerld.sock"
#define EERL_AGENT_PROTOCOL_VERSION 1
/* Longest message either side sends, newline included. */
#define EERL_AGENT_MSG_MAX 65536
/* Most GPUs one request may name: every GPU a daemon may serve (indices 0-1023, a node of up to
 * 1024 GPUs; such a request is about 5 KiB, well inside EERL_AGENT_MSG_MAX). */
#define EERL_AGENT_GPUS_MAX 1024
/* Longest pool name, without the NUL. */
#define EERL_AGENT_POOL_NAME_MAX 31

typedef struct eerl_agent eerl_agent;

typedef enum eerl_agent_phase {
    EERL_AGENT_PHASE_GEN = 0,
    EERL_AGENT_PHASE_TRAIN = 1,
    EERL_AGENT_PHASE_IDLE = 2
} eerl_agent_phase;

/* The socket a client uses when given none: $EERL_SOCKET if set and non-empty, else
 * EERL_AGENT_DEFAULT_SOCKET. Static or environment storage; do not free. */
EERL_EXPORT const char *eerl_agent_socket_path(void);
/* 1 when the runtime should go through eerld: $EERL_SOCKET is set, or the default socket exists. */
EERL_EXPORT int eerl_agent_wanted(void);

/* Connects to path (NULL: eerl_agent_socket_path()) and says hello with client_name (NULL:
 * "eerl"). On failure writes what went wrong into why (if not NULL): the path and the system
 * error, or the daemon's refusal. EERL_ENOENT: no socket there; EERL_ENOPERM: not allowed to
 * connect; EERL_EVERSION: the daemon speaks another protocol version. */
EERL_EXPORT int eerl_agent_connect(const char *path, const char *client_name, char *why,
                                   size_t why_len, eerl_agent **ret_agent);
/* Stops the heartbeat thread and closes the connection: the daemon resets every GPU this
 * connection still holds. NULL is a no-op. */
EERL_EXPORT void eerl_agent_free(eerl_agent *a);

/* The daemon's message for the last failing call ("GPU 3 is leased by uid 1000 pid 4242"); ""
 * when nothing has failed. Owned by the handle, valid until the next call on it from this
 * thread (the heartbeat thread does not touch it). */
EERL_EXPORT const char *eerl_agent_last_error(eerl_agent *a);

/* From the hello: GPUs the daemon serves, its heartbeat timeout, the uid it sees for us, and
 * whether the policy lets us lease. */
struct eerl_agent_info {
    unsigned gpus;
    unsigned heartbeat_ms;
    unsigned uid;
    int may_lease;
    char server[64];
};
EERL_EXPORT int eerl_agent_info(eerl_agent *a, struct eerl_agent_info *ret_info);

/* Leases gpus (all or none). EERL_EBUSY names the holder; EERL_ENOPERM: the policy refuses us. */
EERL_EXPORT int eerl_agent_lease(eerl_agent *a, const unsigned *gpus, size_t n);
/* Resets and gives back gpus (n == 0: every GPU this connection holds). */
EERL_EXPORT int eerl_agent_release(eerl_agent *a, const unsigned *gpus, size_t n);

/* Locks the SM clock of leased gpus into [min_mhz, max_mhz] (each snapped down to a supported
 * clock); min = max = 0 returns them to the default governor. */
EERL_EXPORT int eerl_agent_set_clocks(eerl_agent *a, const unsigned *gpus, size_t n,
                                      unsigned min_mhz, unsigned max_mhz);
/* Names a pool of leased GPUs with its generation, training and idle clocks (0: governor), so a
 * phase change is one small message. Redefining a pool replaces it. */
EERL_EXPORT int eerl_agent_define_pool(eerl_agent *a, const char *name, const unsigned *gpus,
                                       size_t n, unsigned gen_mhz, unsigned train_mhz,
                                       unsigned idle_mhz);
/* Switches every GPU of the pool to the phase's clock. */
EERL_EXPORT int eerl_agent_set_phase(eerl_agent *a, const char *name, eerl_agent_phase phase);

/* One GPU's counters. err: 0, or the EERL_E* code of a GPU that could not be read (its other
 * fields are then 0). */
struct eerl_agent_reading {
    unsigned gpu;
    int err;
    uint64_t energy_mj;
    unsigned power_mw;
    unsigned sm_mhz;
    int has_reasons;   /* the daemon read the clock event reasons */
    unsigned reasons;  /* EERL_THROTTLE_* bits, with has_reasons */
    unsigned limit_mw; /* the enforced power limit; 0 where the driver does not say */
};
/* Reads gpus (n == 0: every GPU, out must hold eerl_agent_info's gpus entries); out[i] for
 * gpus[i]. A GPU that fails is reported in its entry; the call fails only when the request
 * does. ret_n (may be NULL) receives the number of entries written. */
EERL_EXPORT int eerl_agent_read(eerl_agent *a, const unsigned *gpus, size_t n,
                                struct eerl_agent_reading *out, size_t cap, size_t *ret_n);

/* Tells the daemon we are alive (any request does; this one does nothing else). */
#ifdef EERL_EXPERIMENTAL /* eerl's own tools: libeerl.a only */
int eerl_agent_heartbeat(eerl_agent *a);
#endif
/* Starts a thread that sends a heartbeat every interval_ms (0: a third of the daemon's
 * timeout) while no other call is in flight. Stopped by eerl_agent_free. */
EERL_EXPORT int eerl_agent_start_heartbeat(eerl_agent *a, unsigned interval_ms);

/* One GPU as the daemon sees it. */
struct eerl_agent_gpu_status {
    unsigned gpu;
    char uuid[EERL_DEVICE_UUID_MAX];
    char name[EERL_DEVICE_NAME_MAX];
    int err; /* 0, or why the readings below are missing (message in error) */
    char error[160];
    unsigned sm_mhz, power_mw;
    uint64_t energy_mj;
    unsigned locked_min_mhz, locked_max_mhz; /* 0, 0: not locked by eerld */
    int leased;
    unsigned holder_uid, holder_pid;
    unsigned floor_mhz, ceiling_mhz; /* the policy's bounds for non-root clients */
    unsigned min_mhz, max_mhz;       /* the GPU's supported SM clock range */
};
/* Status of every GPU; EERL_EOVERFLOW when cap is too small. */
#ifdef EERL_EXPERIMENTAL /* eerl's own tools: libeerl.a only */
int eerl_agent_status(eerl_agent *a, struct eerl_agent_gpu_status *out, size_t cap, size_t *ret_n);
#endif

/* Resets gpus (n == 0: all) to the default governor: root may reset any GPU (ending whoever's
 * lease), others only GPUs they hold. */
#ifdef EERL_EXPERIMENTAL /* eerl's own tools: libeerl.a only */
int eerl_agent_reset(eerl_agent *a, const unsigned *gpus, size_t n);
#endif

/* An eerl_device whose calls go through this connection: reads ask the daemon, a lock is a
 * set-clocks request (the GPU must be leased first), a reset sets the governor. The device
 * borrows the agent: free the device first. Not safe to use from two threads at once beyond
 * what the agent's mutex serializes. */
EERL_EXPORT int eerl_agent_device(eerl_agent *a, eerl_device **ret_dev);

/* A runtime clock owner (include/eerl/runtime.h, eerl_rt_config.owner) that goes through this
 * connection: lock(gpus, mhz) leases any of the GPUs not leased yet, then sets them in one
 * message (mhz 0 = EERL_CLOCK_GOVERNOR: back to the governor, lease kept); restore releases
 * every GPU the connection holds (the daemon resets them). ctx is the agent, which must outlive
 * the session. Fills *ret_owner. */
struct eerl_rt_clock_owner;
#ifdef EERL_EXPERIMENTAL /* eerl's own tools: libeerl.a only */
int eerl_agent_clock_owner(eerl_agent *a, struct eerl_rt_clock_owner *ret_owner);
#endif

#ifdef __cplusplus
}
#endif
#endif

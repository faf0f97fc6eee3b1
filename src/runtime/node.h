/* The node a session runs on (node.c): the one place that decides whether a session goes
 * through eerld, the daemon that owns a node's clocks, and opens what that takes. The rule
 * (include/eerl/runtime.h, eerl_rt_config.eerld; docs/eerld.md, "When a session goes through
 * eerld"):
 *
 *   - a clock owner of the caller's (cfg.owner): never; the caller owns the clocks;
 *   - a device of the eerld backend (eerl_agent_device): always, through its connection;
 *   - else cfg.eerld: OFF never, ON always, AUTO when the socket (eerld_socket, else
 *     $EERL_SOCKET, else the default) is there to go through: $EERL_SOCKET set, or a socket at
 *     the path; AUTO goes through eerld for the node's GPUs only (no device given, or an NVML
 *     one), never for a twin or remote device.
 *
 * Through eerld, a session with no device of the caller's reads the GPUs through the same
 * connection (one numbering, the daemon's, for the leases and the reads); a caller's NVML
 * device is read in-process. An observe-only session takes no lease, and connects only where it
 * reads through eerld. Owns the device it opened and the connection it opened; borrows the
 * caller's device. */
#ifndef EERL_RUNTIME_NODE_H
#define EERL_RUNTIME_NODE_H

#include <stddef.h>

#include "eerl/agent.h"
#include "eerl/device.h"
#include "eerl/runtime.h"

struct eerl__rt_node {
    eerl_device *dev;       /* what the session reads: the caller's, or ours (own_dev) */
    int own_dev;            /* 1: dev was opened here (freed by eerl__rt_node_close) */
    eerl_agent *agent;      /* the connection opened here, or NULL */
    eerl_agent *link;       /* the eerld connection the session goes through (agent, or the caller's
                               eerld device's); NULL: the session does not go through eerld */
    const unsigned *leased; /* the GPUs eerl__rt_node_lease leased (the caller's array) */
    size_t n_leased;
};

/* 1 when a session of cfg over dev (NULL: the node's GPUs, opened by eerl__rt_node_open) goes
 * through eerld, 0 when not; EERL_EINVAL with why for a choice that contradicts itself (eerld
 * off, but the device is eerld's). Reads the environment and the file system, nothing else. */
int eerl__rt_node_through_eerld(const eerl_rt_config *cfg, eerl_device *dev, char *why,
                                size_t why_len);

/* The device the session reads into n->dev: dev itself (borrowed), or with dev NULL the node's
 * GPUs, opened here: through a connection to eerld when the session goes through it, else NVML.
 * On failure n holds nothing and why names the socket or NVML's failure. */
int eerl__rt_node_open(struct eerl__rt_node *n, eerl_device *dev, const eerl_rt_config *cfg,
                       char *why, size_t why_len);

/* Through eerld: connects for the clocks where the session has no connection yet (a caller's
 * NVML device; not observe-only), and, unless observe-only, leases gpus (all of the session's),
 * so a GPU another session holds fails the start naming it. A no-op otherwise. */
int eerl__rt_node_lease(struct eerl__rt_node *n, const eerl_rt_config *cfg, const unsigned *gpus,
                        size_t n_gpus, char *why, size_t why_len);

/* Gives back the lease eerl__rt_node_lease took (a start that failed after it); on a connection
 * of our own eerl__rt_node_close does that as well. */
void eerl__rt_node_unlease(struct eerl__rt_node *n);

/* Frees the device opened here, then the connection (eerld resets what it still holds). */
void eerl__rt_node_close(struct eerl__rt_node *n);

#endif

/* eerld's connections: accepting them (identity from SO_PEERCRED and SO_PEERGROUPS, the policy's
 * connection limits, running out of descriptors), framing (a request is one line of at most
 * EERL_AGENT_MSG_MAX bytes), each one's reply queue with its limits, heartbeats, and ending
 * them: every way a connection ends resets the GPUs it held (through the lease table) before
 * anything else happens on the loop. Requests go to the handlers; device reads to the reader,
 * whose finished jobs come back here. Owns the connections, their sockets and buffers, and the
 * spare descriptor; borrows the lease table, the reader, the epoll fd and the listening socket.
 * Runs on the event loop's thread only. */
#ifndef EERLD_CONN_H
#define EERLD_CONN_H

#include <stddef.h>
#include <stdint.h>

#include "leases.h"
#include "reader.h"

struct conn;

struct eerld_conns {
    struct eerld_leases *t;
    struct eerld_reader *rd;
    unsigned heartbeat_ms;
    int epfd, lfd;     /* set once the socket listens */
    void *listen_tag;  /* the listening socket's epoll data */
    struct conn *list; /* newest first */
    unsigned n, n_refused;
    size_t out_total;     /* replies queued, all connections */
    int reserve_fd;       /* given up to accept-and-close when out of descriptors */
    int fd_short;         /* out of descriptors: logged once until it passes */
    int accept_err;       /* another accept error: logged once until it passes */
    double accept_resume; /* > 0: the listening socket is paused until then */
};

/* An empty set; opens the spare descriptor. epfd, lfd and listen_tag are set by the caller
 * once the socket listens. */
void eerld_conns_init(struct eerld_conns *cs, struct eerld_leases *t, struct eerld_reader *rd,
                      unsigned heartbeat_ms);

/* Accepts every connection waiting on the listening socket. */
void eerld_conns_accept(struct eerld_conns *cs);

/* An epoll event (events) for the connection c (the event's data). */
void eerld_conns_event(struct eerld_conns *cs, struct conn *c, uint32_t events);

/* A job the reader finished for a connection (its owner): its reply goes out, and the requests
 * that waited behind it are served. Frees j. */
void eerld_conns_finish(struct eerld_conns *cs, struct eerld_job *j);

/* A job the reader never finished (it stopped): its connection stops waiting. Frees j. */
void eerld_conns_drop_job(struct eerld_job *j);

/* Ends connections silent past the heartbeat timeout at now (eerld_now_s); resumes a paused
 * listening socket. */
void eerld_conns_sweep(struct eerld_conns *cs, double now);

/* After a policy reload: ends the leases of every connection that may no longer lease. Returns
 * 1 if the journal must be rewritten. */
int eerld_conns_revoke(struct eerld_conns *cs);

/* Ends every connection (their GPUs reset). */
void eerld_conns_close_all(struct eerld_conns *cs, const char *why);

/* Closes the spare descriptor (after eerld_conns_close_all; a set never initialised has
 * reserve_fd -1). */
void eerld_conns_free(struct eerld_conns *cs);

#endif

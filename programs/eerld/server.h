/* eerld's server: one event loop (epoll) over the listening socket, every client connection, a
 * signalfd and the reader thread's eventfd. The parts it runs each have their own file:
 * startup.c (the checks before a GPU is touched), leases.c (the GPU table and the journal),
 * conn.c (connections), handlers.c (requests), reader.c (slow device reads). Everything but the
 * reader runs on the loop's thread, so the lease table needs no locks. Owns the device handle,
 * the epoll and signal fds, the listening socket and the socket file. */
#ifndef EERLD_SERVER_H
#define EERLD_SERVER_H

#include "config.h"

/* Sets up (policy, devices, journal recovery, socket), writes one byte to ready_fd (if >= 0)
 * once it serves, then serves until SIGTERM/SIGINT (SIGHUP reloads the policy). Returns the
 * process exit status. */
int eerld_run(const struct eerld_config *cfg, int ready_fd);

#endif

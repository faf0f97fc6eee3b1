/* eerld's server: the GPU table with its leases, the Unix socket, one event loop (epoll) over
 * the listening socket, every client connection and a signalfd (server.c), the request handlers
 * (handlers.c) and the reader thread for slow device reads (reader.c). The lease table is the
 * loop's alone: a request is handled to the end on the loop's thread, and the reader touches only
 * its device handle and the job, so the table needs no locks. Owns the device handle, the per-GPU
 * actuators, the journal writes, the connections and the socket file. */
#ifndef EERLD_SERVER_H
#define EERLD_SERVER_H

struct eerld_config {
    const char *socket_path;
    const char *state_dir;
    const char *policy_path;
    int policy_explicit; /* --policy given: a missing file is an error */
    const char *devices; /* "nvml" or "twin:GPUxN" */
    const char *metrics_path;
    unsigned metrics_interval_ms;
    unsigned heartbeat_ms;
    const char *socket_group;
    int group_explicit;
    unsigned socket_mode;
    int foreground;
};

/* Logs to stderr in the foreground, to syslog otherwise. prio: LOG_ERR, LOG_WARNING, LOG_INFO. */
void eerld_log(int prio, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void eerld_log_to_syslog(int on);

/* Sets up (policy, devices, journal recovery, socket), writes one byte to ready_fd (if >= 0)
 * once it serves, then serves until SIGTERM/SIGINT. Returns the process exit status. */
int eerld_run(const struct eerld_config *cfg, int ready_fd);

#endif

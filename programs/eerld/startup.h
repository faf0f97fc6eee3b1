/* eerld's start-up: everything that can refuse the start, checked before any GPU is opened (a
 * refused start resets nothing and writes nothing): the policy file, the state dir (checked,
 * then locked with flock: a second eerld on it stops here), the socket's directory and whether
 * another eerld serves the socket, the metrics dir; then the devices and the listening socket.
 * Owns the descriptors in struct eerld_files until eerld_files_close. */
#ifndef EERLD_STARTUP_H
#define EERLD_STARTUP_H

#include <sys/types.h>

#include "eerl/device.h"

#include "config.h"
#include "policy.h"

struct eerld_files {
    int state_fd, lock_fd, metrics_fd; /* the state dir, its lock, the metrics dir */
    const char *metrics_name;          /* the metrics file's name in its dir */
    gid_t sock_gid;                    /* the socket's group, if have_sock_gid */
    int have_sock_gid;
};

/* Loads the policy file (absent and not named: the default policy, *ret_have_file 0). -1 (logged)
 * if it cannot be read or is not valid; p is then unchanged only if parsing did not start. */
int eerld_load_policy(const struct eerld_config *cfg, struct eerld_policy *p, int *ret_have_file);

/* The checks before any GPU is touched: the policy, the directories, the state dir's lock, the
 * socket path. -1 (logged) on the first that fails; f holds what was opened (close it). */
int eerld_startup_check(const struct eerld_config *cfg, struct eerld_policy *p,
                        int *ret_have_policy, struct eerld_files *f);

/* Opens cfg->devices: nvml or twin:GPUxN. -1 (logged) if it cannot. */
int eerld_open_devices(const struct eerld_config *cfg, eerl_device **ret);

/* Binds and listens on cfg->socket_path (a stale socket replaced), owner and mode set. -1
 * (logged) if it cannot. */
int eerld_listen(const struct eerld_config *cfg, const struct eerld_files *f, int *ret_fd);

/* Closes what f holds; the lock goes last. */
void eerld_files_close(struct eerld_files *f);

#endif

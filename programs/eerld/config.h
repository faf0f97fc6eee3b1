/* eerld's configuration: what the command line (main.c) sets and the daemon reads. Owns nothing;
 * the strings point into argv. */
#ifndef EERLD_CONFIG_H
#define EERLD_CONFIG_H

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

#endif

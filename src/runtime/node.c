/* The node a session runs on (see node.h): whether the session goes through eerld, decided here
 * and nowhere else, and the device, connection and lease that takes. Must not touch a clock:
 * the session's clock owner does. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "eerl/error.h"
#include "agent/client.h"
#include "runtime/node.h"

/* The socket a session goes through: the configuration's, else $EERL_SOCKET, else the
 * default. */
static const char *socket_of(const eerl_rt_config *cfg)
{
    return cfg->eerld_socket ? cfg->eerld_socket : eerl_agent_socket_path();
}

/* AUTO's test: the configuration names a socket that is there, or eerl_agent_wanted(). */
static int wanted(const eerl_rt_config *cfg)
{
    struct stat st;

    if (!cfg->eerld_socket)
        return eerl_agent_wanted();
    return stat(cfg->eerld_socket, &st) == 0 && S_ISSOCK(st.st_mode);
}

int eerl__rt_node_through_eerld(const eerl_rt_config *cfg, eerl_device *dev, char *why,
                                size_t why_len)
{
    if (cfg->owner)
        return 0;
    if (dev && eerl__agent_of_device(dev)) {
        if (cfg->eerld != EERL_RT_EERLD_OFF)
            return 1;
        snprintf(why, why_len,
                 "eerld is off (EERL_RT_EERLD_OFF), but the device is eerld's: give the NVML "
                 "device, or no device");
        return EERL_EINVAL;
    }
    if (cfg->eerld == EERL_RT_EERLD_OFF)
        return 0;
    if (cfg->eerld == EERL_RT_EERLD_ON)
        return 1;
    if (dev && strcmp(eerl_device_backend(dev), "nvml") != 0)
        return 0; /* a twin or remote device: its clocks are not a node's */
    return wanted(cfg);
}

/* A connection of our own to eerld, its heartbeat running. why names the socket. */
static int connect_eerld(struct eerl__rt_node *n, const eerl_rt_config *cfg, char *why,
                         size_t why_len)
{
    const char *sock = socket_of(cfg);
    char awhy[512] = "";
    int e;

    e = eerl_agent_connect(sock, "eerl runtime", awhy, sizeof(awhy), &n->agent);
    if (e == 0 && (e = eerl_agent_start_heartbeat(n->agent, 0)) < 0)
        snprintf(awhy, sizeof(awhy), "starting the heartbeat: %s", eerl_agent_last_error(n->agent));
    if (e < 0) {
        if (strstr(awhy, sock))
            snprintf(why, why_len, "%s", awhy);
        else
            snprintf(why, why_len, "eerld at %s: %s", sock, awhy[0] ? awhy : eerl_strerror(e));
        eerl_agent_free(n->agent);
        n->agent = NULL;
        return e;
    }
    n->link = n->agent;
    return 0;
}

/* The node's GPUs, with no device of the caller's: eerld's view through our connection, or
 * NVML in this process. */
static int open_node(struct eerl__rt_node *n, const eerl_rt_config *cfg, int through, char *why,
                     size_t why_len)
{
    char nwhy[512] = "";
    int e;

    if (through) {
        e = connect_eerld(n, cfg, why, why_len);
        if (e == 0 && (e = eerl_agent_device(n->agent, &n->dev)) < 0)
            snprintf(why, why_len, "eerld at %s: listing its GPUs: %s", socket_of(cfg),
                     eerl_agent_last_error(n->agent)[0] ? eerl_agent_last_error(n->agent)
                                                        : eerl_strerror(e));
        if (e < 0) {
            eerl__rt_node_close(n);
            return e;
        }
    } else if ((e = eerl_device_open_nvml_ex(nwhy, sizeof(nwhy), &n->dev)) < 0) {
        snprintf(why, why_len, "opening NVML: %s", nwhy[0] ? nwhy : eerl_strerror(e));
        return e;
    }
    n->own_dev = 1;
    return 0;
}

int eerl__rt_node_open(struct eerl__rt_node *n, eerl_device *dev, const eerl_rt_config *cfg,
                       char *why, size_t why_len)
{
    int through = eerl__rt_node_through_eerld(cfg, dev, why, why_len);

    memset(n, 0, sizeof(*n));
    if (through < 0)
        return through;
    if (!dev)
        return open_node(n, cfg, through, why, why_len);
    n->dev = dev;
    if (through)
        n->link = eerl__agent_of_device(dev); /* NULL for an NVML device: see node_lease */
    return 0;
}

/* "0, 1, 2" (at most the first 8, then "..."), for a message. */
static void gpu_list(const unsigned *gpus, size_t n, char *buf, size_t len)
{
    size_t i, at = 0;

    buf[0] = '\0';
    for (i = 0; i < n && i < 8 && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s%u", i ? ", " : "", gpus[i]);
    if (n > 8 && at < len)
        snprintf(buf + at, len - at, ", ...");
}

int eerl__rt_node_lease(struct eerl__rt_node *n, const eerl_rt_config *cfg, const unsigned *gpus,
                        size_t n_gpus, char *why, size_t why_len)
{
    char list[96];
    int through, e;

    if (cfg->observe_only)
        return 0; /* no lease: it never changes a clock */
    through = eerl__rt_node_through_eerld(cfg, n->dev, why, why_len);
    if (through <= 0)
        return through;
    if (!n->link && (e = connect_eerld(n, cfg, why, why_len)) < 0)
        return e;
    e = eerl_agent_lease(n->link, gpus, n_gpus);
    if (e == 0) {
        n->leased = gpus;
        n->n_leased = n_gpus;
    } else {
        gpu_list(gpus, n_gpus, list, sizeof(list));
        snprintf(why, why_len, "eerld at %s: leasing GPUs %s: %s", eerl__agent_path(n->link), list,
                 eerl_agent_last_error(n->link)[0] ? eerl_agent_last_error(n->link)
                                                   : eerl_strerror(e));
    }
    return e;
}

void eerl__rt_node_unlease(struct eerl__rt_node *n)
{
    if (n->link && n->n_leased)
        (void)eerl_agent_release(n->link, n->leased, n->n_leased);
    n->n_leased = 0;
}

void eerl__rt_node_close(struct eerl__rt_node *n)
{
    if (n->own_dev)
        eerl_device_free(n->dev); /* the device borrows the connection: freed first */
    eerl_agent_free(n->agent);
    memset(n, 0, sizeof(*n));
}

/* eerld: the node daemon that owns the GPU clocks (docs/eerld.md). This file owns the command
 * line (parsed whole before anything runs) and the move to the background; server.c does the
 * work. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "eerl/agent.h"
#include "eerl/version.h"

#include "log.h"
#include "server.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: eerld [--socket PATH] [--state-dir DIR] [--policy FILE]\n"
            "             [--devices nvml|twin:GPUxN] [--metrics-textfile PATH]\n"
            "             [--metrics-interval S] [--heartbeat-timeout MS]\n"
            "             [--socket-group NAME] [--socket-mode OCTAL] [--foreground]\n\n"
            "The node daemon that owns the GPU clocks: clients lease GPUs over a Unix socket,\n"
            "and whatever happens to a client, its clocks return to the default governor.\n\n"
            "options:\n"
            "  --socket PATH            socket to serve (default %s)\n"
            "  --state-dir DIR          where the journal lives (default /var/lib/eerl)\n"
            "  --policy FILE            who may lease, clock floors/ceilings, limits\n"
            "                           (default /etc/eerl/eerld.conf; absent: only root leases)\n"
            "  --devices nvml|twin:GPUxN  the GPUs to serve: the driver, or N simulated idle\n"
            "                           GPUs of a twin GPU model (h100, gb200, h200)\n"
            "  --metrics-textfile PATH  write node_exporter textfile metrics to PATH\n"
            "  --metrics-interval S     how often, seconds (default 5)\n"
            "  --heartbeat-timeout MS   drop a silent client and reset its GPUs (default 5000)\n"
            "  --socket-group NAME      group of the socket (default eerl)\n"
            "  --socket-mode OCTAL      mode of the socket (default 0660)\n"
            "  --foreground             stay in the foreground and log to stderr\n"
            "  --version, --help\n",
            EERL_AGENT_DEFAULT_SOCKET);
}

static int parse_ulong(const char *opt, const char *v, int base, unsigned long lo, unsigned long hi,
                       unsigned long *ret)
{
    char *end;
    unsigned long x;

    if (!v || !*v || *v == '-' || *v == '+') {
        fprintf(stderr, "eerld: %s needs a number, got '%s'\n", opt, v ? v : "");
        return -1;
    }
    errno = 0;
    x = strtoul(v, &end, base);
    if (errno || *end || x < lo || x > hi) {
        fprintf(stderr, "eerld: %s '%s' is not a number in %lu-%lu\n", opt, v, lo, hi);
        return -1;
    }
    *ret = x;
    return 0;
}

/* Sets option o (one that takes a value) to v. -1 (said) if v is not valid. */
static int set_option(struct eerld_config *cfg, const char *o, const char *v)
{
    unsigned long x;

    if (!strcmp(o, "--socket")) {
        cfg->socket_path = v;
    } else if (!strcmp(o, "--state-dir")) {
        cfg->state_dir = v;
    } else if (!strcmp(o, "--policy")) {
        cfg->policy_path = v;
        cfg->policy_explicit = 1;
    } else if (!strcmp(o, "--devices")) {
        cfg->devices = v;
    } else if (!strcmp(o, "--metrics-textfile")) {
        cfg->metrics_path = v;
    } else if (!strcmp(o, "--metrics-interval")) {
        if (parse_ulong(o, v, 10, 1, 3600, &x) < 0)
            return -1;
        cfg->metrics_interval_ms = (unsigned)x * 1000;
    } else if (!strcmp(o, "--heartbeat-timeout")) {
        if (parse_ulong(o, v, 10, 50, 3600000, &x) < 0)
            return -1;
        cfg->heartbeat_ms = (unsigned)x;
    } else if (!strcmp(o, "--socket-group")) {
        cfg->socket_group = v;
        cfg->group_explicit = 1;
    } else {
        if (parse_ulong(o, v, 8, 0, 0777, &x) < 0)
            return -1;
        if (x & 0007) {
            fprintf(stderr,
                    "eerld: --socket-mode %s would let every user on the node talk "
                    "to eerld; use the group (0660)\n",
                    v);
            return -1;
        }
        cfg->socket_mode = (unsigned)x;
    }
    return 0;
}

/* Parses the command line into cfg. -1: run with cfg; else the exit status (help, version,
 * bad input: said). */
static int parse_args(int argc, char **argv, struct eerld_config *cfg)
{
    int a;

    for (a = 1; a < argc; a++) {
        const char *o = argv[a];
        const char *v = a + 1 < argc ? argv[a + 1] : NULL;

        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(o, "--version")) {
            printf("eerld %s (protocol %d)\n", eerl_version_string(), EERL_AGENT_PROTOCOL_VERSION);
            return 0;
        }
        if (!strcmp(o, "--foreground")) {
            cfg->foreground = 1;
            continue;
        }
        if (strcmp(o, "--socket") && strcmp(o, "--state-dir") && strcmp(o, "--policy") &&
            strcmp(o, "--devices") && strcmp(o, "--metrics-textfile") &&
            strcmp(o, "--metrics-interval") && strcmp(o, "--heartbeat-timeout") &&
            strcmp(o, "--socket-group") && strcmp(o, "--socket-mode")) {
            fprintf(stderr, "eerld: unknown option '%s' (see eerld --help)\n", o);
            return 2;
        }
        if (!v || !*v) {
            fprintf(stderr, "eerld: %s needs a value\n", o);
            return 2;
        }
        a++;
        if (set_option(cfg, o, v) < 0)
            return 2;
    }
    return -1;
}

/* Background: the parent exits once the child serves (or with its failure). */
static int run_in_background(const struct eerld_config *cfg)
{
    int pfd[2];
    pid_t pid;
    char b;

    if (pipe(pfd) < 0) {
        perror("eerld: pipe");
        return 1;
    }
    pid = fork();
    if (pid < 0) {
        perror("eerld: fork");
        return 1;
    }
    if (pid > 0) {
        int st = 0;

        close(pfd[1]);
        if (read(pfd[0], &b, 1) == 1)
            return 0;
        waitpid(pid, &st, 0);
        fprintf(stderr, "eerld: failed to start (see the system log)\n");
        return 1;
    }
    close(pfd[0]);
    setsid();
    if (chdir("/") < 0)
        return 1;
    eerld_log_to_syslog(1);
    {
        FILE *f;
        f = freopen("/dev/null", "r", stdin);
        f = freopen("/dev/null", "w", stdout);
        f = freopen("/dev/null", "w", stderr);
        (void)f;
    }
    return eerld_run(cfg, pfd[1]);
}

int main(int argc, char **argv)
{
    struct eerld_config cfg = {
        .socket_path = EERL_AGENT_DEFAULT_SOCKET,
        .state_dir = "/var/lib/eerl",
        .policy_path = "/etc/eerl/eerld.conf",
        .devices = "nvml",
        .metrics_interval_ms = 5000,
        .heartbeat_ms = 5000,
        .socket_group = "eerl",
        .socket_mode = 0660,
    };
    int rc = parse_args(argc, argv, &cfg);

    if (rc >= 0)
        return rc;
    if (cfg.foreground)
        return eerld_run(&cfg, -1);
    return run_in_background(&cfg);
}

/* bench_eerld: round-trip latency of eerld's fast paths on its socket (set-phase, read-energy,
 * heartbeat) and messages per second with 64 concurrent clients. By default it starts its own
 * eerld (beside the eerl binary: BUILD/eerld) on 8 simulated GPUs, whose device calls cost
 * nanoseconds, so the figures are the protocol and daemon cost without the NVML call. Prints
 * figures; never fails on timing.
 *   bench_eerld [--socket PATH] [--eerld PATH] [--rounds N] [--messages N] [--clients N]
 *               [--read-only]
 * --read-only leases nothing and changes no clock (for a daemon on real GPUs that must be left
 * as they are): only the read and heartbeat figures. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "eerl/agent.h"
#include "eerl/error.h"

static const char *sock;

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void report(const char *what, double *us, unsigned n)
{
    double sum = 0;
    unsigned i;

    for (i = 0; i < n; i++)
        sum += us[i];
    qsort(us, n, sizeof(*us), cmp_d);
    printf("  %-34s mean %6.1f us  p50 %6.1f  p90 %6.1f  p99 %6.1f  max %7.1f  (%u round trips)\n",
           what, sum / n, us[n / 2], us[n * 9 / 10], us[n * 99 / 100], us[n - 1], n);
}

static eerl_agent *connect_or_die(const char *name)
{
    eerl_agent *a = NULL;
    char why[512];
    int e = eerl_agent_connect(sock, name, why, sizeof(why), &a);

    if (e < 0) {
        fprintf(stderr, "bench_eerld: %s\n", why);
        exit(1);
    }
    return a;
}

struct worker {
    pthread_t t;
    unsigned id, messages, ok, failed, n_gpus;
    char err[256];
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    eerl_agent *a = connect_or_die("bench");
    struct eerl_agent_reading r;
    unsigned i, g = w->id % w->n_gpus;

    for (i = 0; i < w->messages; i++) {
        int e = i % 2 ? eerl_agent_heartbeat(a) : eerl_agent_read(a, &g, 1, &r, 1, NULL);
        if (e == 0 && (i % 2 || r.err == 0)) {
            w->ok++;
        } else {
            w->failed++;
            snprintf(w->err, sizeof(w->err), "%s: %s", eerl_strerror(e ? e : r.err),
                     eerl_agent_last_error(a));
        }
    }
    eerl_agent_free(a);
    return NULL;
}

static volatile int reader_stop;

/* Another client reading every GPU's counters back to back. */
static void *reader_main(void *arg)
{
    struct eerl_agent_reading r[EERL_AGENT_GPUS_MAX];
    eerl_agent *a = connect_or_die("reader");
    unsigned long *count = arg;

    while (!reader_stop) {
        eerl_agent_read(a, NULL, 0, r, EERL_AGENT_GPUS_MAX, NULL);
        (*count)++;
    }
    eerl_agent_free(a);
    return NULL;
}

static pid_t start_daemon(const char *eerld, char *dir)
{
    static char path[600], state[600];
    pid_t pid;
    double t0;

    snprintf(path, sizeof(path), "%s/eerld.sock", dir);
    snprintf(state, sizeof(state), "%s/state", dir);
    pid = fork();
    if (pid == 0) {
        FILE *f = freopen("/dev/null", "w", stderr);
        (void)f;
        execl(eerld, eerld, "--foreground", "--socket", path, "--state-dir", state, "--devices",
              "twin:h100x8", (char *)NULL);
        _exit(127);
    }
    sock = path;
    t0 = now_s();
    for (;;) {
        eerl_agent *a = NULL;
        char why[64];

        if (eerl_agent_connect(sock, "probe", why, sizeof(why), &a) == 0) {
            eerl_agent_free(a);
            return pid;
        }
        if (now_s() - t0 > 10 || waitpid(pid, NULL, WNOHANG) == pid) {
            fprintf(stderr, "bench_eerld: %s did not start\n", eerld);
            exit(1);
        }
        usleep(10000);
    }
}

int main(int argc, char **argv)
{
    const char *eerld = NULL;
    char exe[1024], dir[256] = "", eerld_path[1100];
    unsigned rounds = 20000, messages = 10000, clients = 64, i;
    unsigned gpus[4] = {0, 1, 2, 3}, g0 = 0;
    int read_only = 0;
    struct eerl_agent_info info;
    struct eerl_agent_reading r[EERL_AGENT_GPUS_MAX];
    struct worker *w;
    eerl_agent *a;
    pid_t pid = 0;
    double *us, t0, dt;
    unsigned long ok = 0, failed = 0;
    ssize_t n;
    int k;

    for (k = 1; k < argc; k++) {
        const char *v = k + 1 < argc ? argv[k + 1] : NULL;

        if (!strcmp(argv[k], "--read-only")) {
            read_only = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "bench_eerld: %s needs a value\n", argv[k]);
            return 2;
        }
        if (!strcmp(argv[k], "--socket"))
            sock = v;
        else if (!strcmp(argv[k], "--eerld"))
            eerld = v;
        else if (!strcmp(argv[k], "--rounds"))
            rounds = (unsigned)strtoul(v, NULL, 10);
        else if (!strcmp(argv[k], "--messages"))
            messages = (unsigned)strtoul(v, NULL, 10);
        else if (!strcmp(argv[k], "--clients"))
            clients = (unsigned)strtoul(v, NULL, 10);
        else {
            fprintf(stderr,
                    "bench_eerld: unknown option '%s' (--socket, --eerld, --rounds, "
                    "--messages, --clients)\n",
                    argv[k]);
            return 2;
        }
        k++;
    }
    if (rounds < 100 || messages == 0 || clients == 0 || clients > 1024) {
        fprintf(stderr, "bench_eerld: need --rounds >= 100, --messages >= 1, --clients 1-1024\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    if (!sock) {
        if (!eerld) {
            n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
            if (n <= 0) {
                fprintf(stderr, "bench_eerld: give --eerld PATH\n");
                return 2;
            }
            exe[n] = '\0';
            *strrchr(exe, '/') = '\0'; /* BUILD/bench */
            snprintf(eerld_path, sizeof(eerld_path), "%s/../eerld", exe);
            eerld = eerld_path;
        }
        snprintf(dir, sizeof(dir), "%s/bench-eerld-XXXXXX", getenv("TMPDIR") ?: "/tmp");
        if (!mkdtemp(dir)) {
            perror("bench_eerld: mkdtemp");
            return 1;
        }
        pid = start_daemon(eerld, dir);
        printf("eerld: %s on 8 simulated H100s (device calls take nanoseconds)\n", eerld);
    } else {
        printf("eerld: the daemon at %s\n", sock);
    }
    us = calloc(rounds, sizeof(*us));
    a = connect_or_die("bench");
    eerl_agent_info(a, &info);
    printf("round trip on one connection:\n");
    if (read_only)
        goto reads;
    if (eerl_agent_lease(a, gpus, 4) < 0 ||
        eerl_agent_define_pool(a, "gen", gpus, 4, 1980, 1410, 345) < 0) {
        fprintf(stderr, "bench_eerld: lease/pool: %s\n", eerl_agent_last_error(a));
        return 1;
    }
    for (i = 0; i < rounds; i++) {
        t0 = now_s();
        if (eerl_agent_set_phase(a, "gen", (eerl_agent_phase)(i % 3)) < 0) {
            fprintf(stderr, "bench_eerld: set_phase: %s\n", eerl_agent_last_error(a));
            return 1;
        }
        us[i] = (now_s() - t0) * 1e6;
    }
    report("set-phase (pool of 4 GPUs, changes)", us, rounds);
    for (i = 0; i < rounds; i++) {
        t0 = now_s();
        eerl_agent_set_phase(a, "gen", EERL_AGENT_PHASE_TRAIN);
        us[i] = (now_s() - t0) * 1e6;
    }
    report("set-phase (pool of 4, no change)", us, rounds);
reads:
    for (i = 0; i < rounds; i++) {
        t0 = now_s();
        eerl_agent_read(a, &g0, 1, r, EERL_AGENT_GPUS_MAX, NULL);
        us[i] = (now_s() - t0) * 1e6;
    }
    report("read energy (1 GPU)", us, rounds);
    for (i = 0; i < rounds; i++) {
        t0 = now_s();
        eerl_agent_read(a, NULL, 0, r, EERL_AGENT_GPUS_MAX, NULL);
        us[i] = (now_s() - t0) * 1e6;
    }
    report(info.gpus == 8 ? "read energy (all 8 GPUs)" : "read energy (all GPUs)", us, rounds);
    for (i = 0; i < rounds; i++) {
        t0 = now_s();
        eerl_agent_heartbeat(a);
        us[i] = (now_s() - t0) * 1e6;
    }
    report("heartbeat", us, rounds);
    {
        /* The fast path while another client reads all counters back to back: what a slow
         * device read (an H200's energy counter: ~3-4 ms) does to everyone else. */
        pthread_t rt;
        unsigned long reads = 0;
        unsigned nr = rounds / 10;

        reader_stop = 0;
        pthread_create(&rt, NULL, reader_main, &reads);
        usleep(20000);
        for (i = 0; i < nr; i++) {
            t0 = now_s();
            if (read_only)
                eerl_agent_heartbeat(a);
            else
                eerl_agent_set_phase(a, "gen", (eerl_agent_phase)(i % 3));
            us[i] = (now_s() - t0) * 1e6;
        }
        reader_stop = 1;
        pthread_join(rt, NULL);
        report(read_only ? "heartbeat, another client reading"
                         : "set-phase, another client reading",
               us, nr);
        printf("  (the reader made %lu reads of all GPUs meanwhile)\n", reads);
    }
    eerl_agent_free(a);
    free(us);

    w = calloc(clients, sizeof(*w));
    t0 = now_s();
    for (i = 0; i < clients; i++) {
        w[i].id = i;
        w[i].messages = messages;
        w[i].n_gpus = info.gpus ? info.gpus : 1;
        pthread_create(&w[i].t, NULL, worker_main, &w[i]);
    }
    for (i = 0; i < clients; i++) {
        pthread_join(w[i].t, NULL);
        ok += w[i].ok;
        failed += w[i].failed;
        if (w[i].failed)
            fprintf(stderr, "client %u: %u failed, last: %s\n", i, w[i].failed, w[i].err);
    }
    dt = now_s() - t0;
    printf("%u clients x %u messages (read energy / heartbeat, one at a time per client):\n"
           "  %lu answered, %lu failed, %.2f s, %.0f messages/s (clients and daemon share %ld "
           "CPUs)\n",
           clients, messages, ok, failed, dt, ok / dt, sysconf(_SC_NPROCESSORS_ONLN));
    free(w);
    if (pid > 0) {
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
        snprintf(eerld_path, sizeof(eerld_path), "%s/state/journal.json", dir);
        unlink(eerld_path);
        snprintf(eerld_path, sizeof(eerld_path), "%s/state", dir);
        rmdir(eerld_path);
        rmdir(dir);
    }
    return 0;
}

/* Twin benchmark: what simulating an allocation costs, and how it grows with the GPUs. Prints
 * figures; never fails on timing.
 *
 * usage: bench_twin [--gpus N | --alloc A] [--updates U] [--mode M] [--model M] [--size S]
 *                   [--session] [--scaling] [--session-updates U]
 *
 * With no options, the figures of earlier releases (500 updates on 40 GPUs, Qwen L, 8/32
 * disaggregated), then the 3000 x 1024 run, then the scaling table. For the allocation asked for
 * (--gpus N: N colocated, else N/4 generation and 3N/4 training GPUs; --alloc as eerl sim's):
 *   1. the twin alone: U updates (the twin simulates a pool as a whole, so this does not grow
 *      with the GPUs);
 *   2. the same run with every GPU's energy counter read through the twin device at every phase
 *      boundary of every update: what a session's meter does at each mark;
 *   3. the same with every GPU's power read every 1 s of virtual time besides (the sampling
 *      eerl sim runs its sessions' meters at);
 *   4. with --session (and for the 40-GPU default): the whole simulated session, as below.
 * --scaling: the whole simulated session (eerl_sim_run, a governor run: twin, twin device,
 * meter, actuator, runtime session) at 8, 64, 256 and 1024 GPUs, each in a child process: wall
 * time per update and per update per GPU, and the child's peak resident memory, its growth per
 * GPU over the 8-GPU run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "eerl/device.h"
#include "eerl/error.h"
#include "eerl/tools/twin.h"
#include "eerl/tools/sim.h"

static double wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct target {
    const char *model, *mode_s;
    eerl_mode mode;
    unsigned ng, nt, updates;
    char size;
};

/* The phase boundaries of one update, as times (the session's marks; a superset is fine). */
static size_t boundaries(const struct eerl_twin_update *u, double *t)
{
    double t0 = u->t_start, ga = u->gen_arrival, ta = u->train_arrival;
    double gen = u->phase_s[EERL_PHASE_GEN], lp = u->phase_s[EERL_PHASE_LOGPROB];
    double tr = u->phase_s[EERL_PHASE_TRAIN], rf = u->phase_s[EERL_PHASE_REFIT];
    double end = t0 + u->duration, c[8] = {t0 + ga - gen,
                                           t0 + ga,
                                           t0 + ta - tr - lp,
                                           t0 + ta - tr,
                                           t0 + ta,
                                           t0 + ta + rf,
                                           t0 + (ga > ta ? ga : ta) + rf,
                                           end};
    size_t n = 0, i, j;

    for (i = 0; i < 8; i++) {
        double x = c[i] < t0 ? t0 : c[i] > end ? end : c[i];
        for (j = n; j > 0 && t[j - 1] > x; j--) /* sorted, for observe_at's order */
            t[j] = t[j - 1];
        t[j] = x;
        n++;
    }
    return n;
}

/* One run of the twin: reads 0 none, 1 every GPU's counter at every boundary, 2 that plus every
 * GPU's power every second. Prints a line; returns 0 or -1. */
static int twin_run(const eerl_twin_preset *p, const struct target *tg, int reads)
{
    struct eerl_twin_config cfg = {tg->mode, tg->ng, tg->nt, tg->size, 1, 0, 0, 0};
    unsigned n = tg->ng + tg->nt, k, g;
    unsigned long long n_reads = 0;
    double w0, c0, el, ce, next = 0, bt[8];
    eerl_device *dev = NULL;
    eerl_twin *t = NULL;
    struct eerl_twin_update u;
    uint64_t mj, sink = 0;
    unsigned mw;
    size_t nb, b;

    w0 = wall();
    c0 = cpu();
    if (eerl_twin_new(p, &cfg, &t) < 0 || (reads && eerl_twin_device(t, &dev) < 0)) {
        fprintf(stderr, "bench_twin: the twin refused %s %u/%u\n", tg->mode_s, tg->ng, tg->nt);
        eerl_twin_free(t);
        return -1;
    }
    eerl_twin_set_clocks(t, 1800, 1500);
    for (k = 0; k < tg->updates; k++) {
        if (eerl_twin_step(t, &u) < 0)
            break;
        if (!reads)
            continue;
        nb = boundaries(&u, bt);
        for (b = 0; b < nb; b++) {
            if (reads == 2)
                for (; next <= bt[b]; next += 1.0) {
                    eerl_twin_observe_at(t, next);
                    for (g = 0; g < n; g++)
                        sink += eerl_device_power_mw(dev, g, &mw) == 0 ? mw : 0;
                    n_reads += n;
                }
            eerl_twin_observe_at(t, bt[b]);
            for (g = 0; g < n; g++)
                sink += eerl_device_energy_mj(dev, g, &mj) == 0 ? mj & 1 : 0;
            n_reads += n;
        }
    }
    el = wall() - w0;
    ce = cpu() - c0;
    printf("  %-44s %8.3f s wall, %8.3f s CPU",
           reads == 0   ? "the twin alone"
           : reads == 1 ? "+ every GPU's counter at every boundary"
                        : "+ every GPU's power every 1 s",
           el, ce);
    if (reads)
        printf(", %llu reads, %.1f ns CPU per read (checksum %llu)", n_reads,
               n_reads ? 1e9 * ce / (double)n_reads : 0, (unsigned long long)(sink % 1000));
    printf("\n");
    eerl_device_free(dev);
    eerl_twin_free(t);
    return 0;
}

struct session_cost;
static int session_run(const struct target *tg, struct session_cost *ret);
static void print_session(const struct target *tg);

static int run_target(const struct target *tg, int session)
{
    eerl_twin_preset *p = NULL;
    int e = eerl_twin_preset_new(tg->model, "h100", NULL, &p), r = 0;

    if (e < 0) {
        fprintf(stderr, "bench_twin: preset %s on h100: %s\n", tg->model, eerl_strerror(e));
        return -1;
    }
    printf("%u updates, %u GPUs (%s %c, %s %u%s%.0u):\n", tg->updates, tg->ng + tg->nt, tg->model,
           tg->size, tg->mode_s, tg->ng, tg->nt ? "/" : "", tg->nt);
    fflush(stdout);
    r |= twin_run(p, tg, 0);
    fflush(stdout);
    r |= twin_run(p, tg, 1);
    fflush(stdout);
    r |= twin_run(p, tg, 2);
    fflush(stdout);
    eerl_twin_preset_free(p);
    if (session)
        print_session(tg);
    return r;
}

/* What a whole simulated session cost, measured in the child that ran it. */
struct session_cost {
    double wall_s, cpu_s, virtual_s;
    long maxrss_kib;
};

/* The whole simulated session (a governor run) of tg in a child process. */
static int session_run(const struct target *tg, struct session_cost *ret)
{
    int fd[2];
    pid_t pid;
    double fig[2] = {-1, 0}; /* wall, virtual */
    struct rusage ru;
    int status;

    if (pipe(fd) != 0)
        return -1;
    fflush(stdout);
    pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        struct eerl_sim_config c;
        struct eerl_sim_run out;
        eerl_twin_preset *p = NULL;
        char why[512] = "";
        double w0;

        close(fd[0]);
        memset(&c, 0, sizeof(c));
        if (eerl_twin_preset_new(tg->model, "h100", NULL, &p) < 0)
            _exit(1);
        c.preset = p;
        c.mode = tg->mode;
        c.n_gen = tg->ng;
        c.n_train = tg->nt;
        c.size = tg->size;
        c.updates = tg->updates;
        c.seed = 1;
        c.allowed_loss = 0.02;
        c.strategy = EERL_STRATEGY_EERL;
        w0 = wall();
        if (eerl_sim_run(&c, &out, why, sizeof(why)) < 0) {
            fprintf(stderr, "bench_twin: %u/%u GPUs: %s\n", tg->ng, tg->nt, why);
            _exit(1);
        }
        fig[0] = wall() - w0;
        fig[1] = out.true_time_s;
        eerl_sim_run_free(&out);
        eerl_twin_preset_free(p);
        if (write(fd[1], fig, sizeof(fig)) != (ssize_t)sizeof(fig))
            _exit(1);
        _exit(0);
    }
    close(fd[1]);
    if (read(fd[0], fig, sizeof(fig)) != (ssize_t)sizeof(fig))
        fig[0] = -1;
    close(fd[0]);
    if (wait4(pid, &status, 0, &ru) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
        fig[0] < 0) {
        fprintf(stderr, "bench_twin: the %u/%u-GPU session failed\n", tg->ng, tg->nt);
        return -1;
    }
    ret->wall_s = fig[0];
    ret->virtual_s = fig[1];
    ret->cpu_s = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 +
                 (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
    ret->maxrss_kib = ru.ru_maxrss;
    return 0;
}

static void print_session(const struct target *tg)
{
    struct session_cost c;

    if (session_run(tg, &c) < 0)
        return;
    printf("  %-44s %8.3f s wall, %8.3f s CPU, %.1f us CPU per update per GPU, peak RSS %.1f "
           "MiB\n",
           "the whole simulated session (governor run)", c.wall_s, c.cpu_s,
           1e6 * c.cpu_s / tg->updates / (tg->ng + tg->nt), c.maxrss_kib / 1024.0);
}

/* One row of the scaling table: n GPUs, n/4 generation and 3n/4 training. rss0: the first row's
 * peak (0: this is it). */
static int scaling_row(unsigned n, unsigned updates, long *rss0)
{
    struct target tg = {
        "qwen3-30b-a3b", "disaggregated", EERL_MODE_DISAGGREGATED, n / 4, n - n / 4, updates, 'L'};
    struct session_cost c;

    if (session_run(&tg, &c) < 0)
        return -1;
    if (!*rss0)
        *rss0 = c.maxrss_kib;
    printf("  %5u  %6u/%-5u %8.3f %8.3f %12.1f %14.3f %9.0f %11.1f %12.1f", n, tg.ng, tg.nt,
           c.wall_s, c.cpu_s, 1e6 * c.cpu_s / updates, 1e6 * c.cpu_s / updates / n,
           c.virtual_s / updates, 1e9 * c.cpu_s / c.virtual_s / n, c.maxrss_kib / 1024.0);
    if (n > 8)
        printf(" %10.0f", 1024.0 * (double)(c.maxrss_kib - *rss0) / (double)(n - 8));
    printf("\n");
    return 0;
}

static int scaling(unsigned updates)
{
    static const unsigned ns[] = {8, 64, 256, 1024};
    long rss0 = 0;
    size_t i;
    int r = 0;

    printf("the whole simulated session (eerl_sim_run: twin, twin device, meter sampling every "
           "1 s and at every phase boundary, actuator, session), governor run, qwen L "
           "disaggregated, %u updates, one process per row:\n",
           updates);
    printf("  %5s  %-12s %8s %8s %12s %14s %9s %11s %12s %10s\n", "GPUs", "gen/train", "wall s",
           "CPU s", "CPU us/upd", "CPU us/upd/GPU", "virt s/u", "ns/GPU/vs", "peak RSS MiB",
           "bytes/GPU");
    for (i = 0; i < sizeof(ns) / sizeof(ns[0]); i++)
        r |= scaling_row(ns[i], updates, &rss0);
    printf("  (CPU: the child's user + system time, which a loaded machine does not inflate; "
           "virt s/u: virtual seconds per update, more GPUs make an update shorter; ns/GPU/vs: CPU "
           "per GPU per virtual second, one 1 s sample of it; bytes/GPU: growth of the peak "
           "resident memory "
           "over the 8-GPU row)\n");
    return r;
}

static int parse_uint(const char *opt, const char *v, unsigned long lo, unsigned long hi,
                      unsigned *ret)
{
    char *end;
    unsigned long x = strtoul(v, &end, 10);

    if (*v < '0' || *v > '9' || *end || x < lo || x > hi) {
        fprintf(stderr, "bench_twin: %s '%s': give a whole number from %lu to %lu\n", opt, v, lo,
                hi);
        return -1;
    }
    *ret = (unsigned)x;
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: bench_twin [--gpus N | --alloc A] [--updates U] [--mode M] [--model M]\n"
               "                  [--size S|M|L] [--session] [--scaling] [--session-updates U]\n"
               "  --gpus N: N colocated GPUs, else N/4 generation and 3N/4 training\n"
               "  --alloc A: as eerl sim's (32, 8/32)\n"
               "  --session: also the whole simulated session of that allocation\n"
               "  --scaling: only the whole session at 8, 64, 256, 1024 GPUs\n"
               "            (--session-updates updates each, default 100)\n"
               "  no options: 500 x 40 (8/32), 3000 x 1024 (256/768), then --scaling\n");
}

/* The pools --alloc or --gpus ask for, into tg (neither given: left as they are). -1 when they
 * do not fit the mode (said). */
static int pools_of(struct target *tg, const char *alloc, unsigned gpus)
{
    if (alloc) {
        unsigned long a, b = 0;
        char *end;

        a = strtoul(alloc, &end, 10);
        if (*end == '/')
            b = strtoul(end + 1, &end, 10);
        if (*alloc < '0' || *alloc > '9' || *end || a == 0 ||
            (tg->mode == EERL_MODE_COLOCATED) != (b == 0) || a > EERL_TWIN_GPUS_LIMIT ||
            b > EERL_TWIN_GPUS_LIMIT - a) {
            fprintf(stderr,
                    "bench_twin: --alloc '%s' does not fit mode %s (colocated: one count; else "
                    "GEN/TRAIN, each at least 1, at most %u GPUs together)\n",
                    alloc, tg->mode_s, EERL_TWIN_GPUS_LIMIT);
            return -1;
        }
        tg->ng = (unsigned)a;
        tg->nt = (unsigned)b;
    } else if (gpus) {
        if (tg->mode != EERL_MODE_COLOCATED && gpus < 2) {
            fprintf(stderr, "bench_twin: --gpus %u: mode %s needs two pools, at least 2 GPUs\n",
                    gpus, tg->mode_s);
            return -1;
        }
        tg->ng = tg->mode == EERL_MODE_COLOCATED ? gpus : (gpus / 4 ? gpus / 4 : 1);
        tg->nt = tg->mode == EERL_MODE_COLOCATED ? 0 : gpus - tg->ng;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct target tg = {"qwen3-30b-a3b", "disaggregated", EERL_MODE_DISAGGREGATED, 0, 0, 0, 'L'};
    unsigned gpus = 0, session_updates = 100;
    const char *alloc = NULL;
    int k, only_scaling = 0, asked = 0, session = 0, r = 0;

    for (k = 1; k < argc; k++) {
        const char *a = argv[k], *v = k + 1 < argc ? argv[k + 1] : NULL;

        if (!strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--scaling")) {
            only_scaling = 1;
            continue;
        } else if (!strcmp(a, "--session")) {
            session = asked = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "bench_twin: %s needs a value\n", a);
            usage(stderr);
            return 2;
        }
        k++;
        asked = 1;
        if (!strcmp(a, "--gpus")) {
            if (parse_uint(a, v, 1, EERL_TWIN_GPUS_LIMIT, &gpus) < 0)
                return 2;
        } else if (!strcmp(a, "--alloc")) {
            alloc = v;
        } else if (!strcmp(a, "--updates")) {
            if (parse_uint(a, v, 1, 1000000, &tg.updates) < 0)
                return 2;
        } else if (!strcmp(a, "--session-updates")) {
            if (parse_uint(a, v, 1, 1000000, &session_updates) < 0)
                return 2;
        } else if (!strcmp(a, "--mode")) {
            if (eerl_twin_mode_parse(v, &tg.mode) < 0) {
                fprintf(stderr, "bench_twin: unknown mode '%s'; valid modes: %s\n", v,
                        eerl_twin_mode_names());
                return 2;
            }
            tg.mode_s = v;
        } else if (!strcmp(a, "--model")) {
            tg.model = v;
        } else if (!strcmp(a, "--size")) {
            if (strlen(v) != 1 || !strchr("SML", v[0])) {
                fprintf(stderr, "bench_twin: unknown size '%s'; valid sizes: S, M, L\n", v);
                return 2;
            }
            tg.size = v[0];
        } else {
            fprintf(stderr, "bench_twin: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (gpus && alloc) {
        fprintf(stderr, "bench_twin: give --gpus or --alloc, not both\n");
        return 2;
    }
    if (only_scaling)
        return scaling(session_updates) < 0 ? 1 : 0;
    if (pools_of(&tg, alloc, gpus) < 0)
        return 2;
    if (asked) {
        if (!tg.ng) {
            tg.ng = tg.mode == EERL_MODE_COLOCATED ? 1024 : 256;
            tg.nt = tg.mode == EERL_MODE_COLOCATED ? 0 : 768;
        }
        if (!tg.updates)
            tg.updates = 3000;
        return run_target(&tg, session) < 0 ? 1 : 0;
    }
    tg.ng = 8;
    tg.nt = 32;
    tg.updates = 500;
    r |= run_target(&tg, 1);
    tg.ng = 256;
    tg.nt = 768;
    tg.updates = 3000;
    r |= run_target(&tg, 0);
    r |= scaling(session_updates);
    return r < 0 ? 1 : 0;
}

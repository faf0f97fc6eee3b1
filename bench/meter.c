/* bench_meter: what metering costs. Samples GPUs (8 of the stand-in NVML library by default) with
 * the meter's thread at 200 ms and reports the process's CPU time (getrusage) as a percentage of
 * one core, twice: with the default energy interval (power every tick, the energy counters only
 * every energy interval) and with the counters read at every tick (the meter before the two
 * rates). Then the cost of one power-only tick, of one mark (counters read), and of one interval
 * query. Prints figures; never fails on them.
 *
 * usage: EERL_NVML_LIBRARY=<build>/fake_nvml/libnvidia-ml.so.1 bench_meter [--seconds 60]
 *            [--interval-ms 200] [--gpus 8] [--counter-cost-us 0]
 * The stand-in library is built with the tests (tests/fake_nvml); the benchmark writes its own
 * state file (real time, every GPU at a constant power) into a temporary directory;
 * --counter-cost-us makes each of its counter reads burn that much CPU, as a real driver's do (an
 * H200's: 4000 us, docs/meter.md). On a machine
 * with a driver, leave EERL_NVML_LIBRARY unset and pass --real to sample the real GPUs instead
 * (read-only: the meter never changes a GPU); --gpus then defaults to every GPU visible.
 *
 * --marks: what a phase mark costs the caller's thread, and the meter's accuracy with it, for 1,
 * 2, ... --gpus GPUs (--counts 1,2,4,8 picks some): a training loop's updates (TRL's pattern:
 * 15 marks an update, six of them around empty segments, docs/meter.md) run --updates times,
 * first with the marks reading the counters on the caller's thread (the meter before marks were
 * served by its thread: an injected real-time clock turns serving off), then as the meter does
 * now. On the stand-in each phase draws its own power (the benchmark rewrites the state file at
 * the boundaries); with --real the GPUs draw what they draw. The reference is each GPU's counter
 * read directly (eerl_device_energy_mj, as pynvml would) just before the update's last two marks
 * (the last phase's end and the update's end, back to back), on the caller's thread, outside the
 * timed calls: the same point of every update, so its offset cancels from one update to the
 * next.
 * Prints figures only; never changes a clock or a power limit. */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "eerl/agent.h"
#include "eerl/clock.h"
#include "eerl/device.h"
#include "eerl/error.h"
#include "eerl/meter.h"

static double cpu_seconds(void)
{
    struct rusage ru;

    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec * 1e-6;
}

static int write_state(const char *path, unsigned n, unsigned counter_cost_us)
{
    FILE *f = fopen(path, "w");
    unsigned i;

    if (!f)
        return -1;
    fprintf(f,
            "{\"driver_version\": \"580.159.04\", \"nvml_version\": \"13.580.159.04\", "
            "\"virtual_time_ms\": null, \"energy_update_ms\": 100, "
            "\"energy_read_cpu_us\": %u, \"gpus\": [\n",
            counter_cost_us);
    for (i = 0; i < n; i++)
        fprintf(f,
                "{\"name\": \"NVIDIA H100 80GB HBM3\", \"uuid\": \"GPU-bench-%u\", "
                "\"memory_clocks_mhz\": [2619, 1593], "
                "\"sm_clocks_mhz\": {\"max\": 1980, \"min\": 345, \"step\": 15}, "
                "\"sm_clock_mhz\": 1980, \"power_mw\": %u}%s\n",
                i, 250000 + 10000 * i, i + 1 < n ? "," : "");
    fprintf(f, "]}\n");
    return fclose(f);
}

static void sleep_s(double seconds)
{
    struct timespec nap;

    nap.tv_sec = (time_t)seconds;
    nap.tv_nsec = (long)((seconds - (double)nap.tv_sec) * 1e9);
    while (nanosleep(&nap, &nap) < 0 && errno == EINTR)
        ;
}

/* ---- --marks ---------------------------------------------------------------------------- */

/* TRL's GRPO update as the hook marks it (data/h200/trl-2026-12-01, steady updates, scaled down
 * 10x in time): each segment is a phase or the gap between two (pool 0), with the power the GPU
 * drew there (W) and its length (s). A length of 0 is an empty segment: its two marks come back
 * to back. */
struct seg_def {
    const char *what;
    int phase; /* 1: a phase (a mark at its start and end); 0: between phases */
    double s, w;
};

static const struct seg_def UPDATE[] = {
    {"training (step begin to _prepare_inputs)", 1, 0.002, 120},
    {"other", 0, 0.003, 120},
    {"generation", 1, 1.270, 443},
    {"other (reward)", 0, 0.016, 200},
    {"logprob", 1, 0.076, 686},
    {"other", 0, 0, 686},
    {"training 1", 1, 0.074, 671},
    {"other", 0, 0, 671},
    {"training 2", 1, 0.074, 671},
    {"other", 0, 0, 671},
    {"training 3", 1, 0.074, 671},
    {"other", 0, 0, 671},
    {"training 4", 1, 0.074, 671},
};
#define N_SEG (sizeof(UPDATE) / sizeof(UPDATE[0]))
#define MARKS_GPUS_MAX 64 /* the most GPUs --marks runs */

static double real_clock(void *ctx)
{
    (void)ctx;
    return eerl_clock_monotonic(NULL);
}

static int dbl_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

static double pct(double *v, size_t n, double q)
{
    size_t i;

    if (n == 0)
        return 0;
    qsort(v, n, sizeof(*v), dbl_cmp);
    i = (size_t)(q * (double)(n - 1) + 0.5);
    return v[i < n ? i : n - 1];
}

/* A stand-in state written whole, so that the stand-in never reads half a file: state_begin
 * opens path's temporary (its name in tmp), state_end closes the GPU list and the object and
 * renames it onto path. */
static FILE *state_begin(const char *path, char *tmp, size_t len)
{
    snprintf(tmp, len, "%s.tmp", path);
    return fopen(tmp, "w");
}

static int state_end(FILE *f, const char *tmp, const char *path)
{
    fprintf(f, "]}\n");
    if (fclose(f) != 0)
        return -1;
    return rename(tmp, path);
}

/* The stand-in at power w (W) on GPU i: 1.0 + 0.05 i times the segment's. */
static int write_marks_state(const char *path, unsigned n, unsigned cost_us, double w)
{
    char tmp[320];
    FILE *f;
    unsigned i;

    f = state_begin(path, tmp, sizeof(tmp));
    if (!f)
        return -1;
    fprintf(f,
            "{\"driver_version\": \"580.159.04\", \"nvml_version\": \"13.580.159.04\", "
            "\"virtual_time_ms\": null, \"energy_update_ms\": 1, "
            "\"energy_read_cpu_us\": %u, \"gpus\": [\n",
            cost_us);
    for (i = 0; i < n; i++)
        fprintf(f,
                "{\"name\": \"NVIDIA H200\", \"uuid\": \"GPU-bench-%u\", "
                "\"memory_clocks_mhz\": [3201], "
                "\"sm_clocks_mhz\": {\"max\": 1980, \"min\": 345, \"step\": 15}, "
                "\"sm_clock_mhz\": 1980, \"power_mw\": %u}%s\n",
                i, (unsigned)(w * (1.0 + 0.05 * i) * 1000), i + 1 < n ? "," : "");
    return state_end(f, tmp, path);
}

struct marks_cfg {
    eerl_device *dev;
    const char *state; /* the stand-in's state file, NULL with --real */
    unsigned n_all;    /* GPUs in it */
    unsigned cost_us;
    int updates;
};

/* Sets every GPU's power for the next segment (stand-in only): the stand-in's next call after
 * the file changed adopts it (the old power integrated up to then), and a power read is such a
 * call. */
static void set_power(const struct marks_cfg *c, double w)
{
    unsigned mw;

    if (!c->state)
        return;
    if (write_marks_state(c->state, c->n_all, c->cost_us, w) != 0)
        fprintf(stderr, "bench_meter: rewriting the stand-in's state failed\n");
    (void)eerl_device_power_mw(c->dev, 0, &mw);
}

/* One run of c->updates updates on n GPUs. serve: the meter's thread reads for the marks (else
 * the marks read on this thread). Prints one line. */
/* One mark, its wall time (us) kept in times[*nt] when keep and there is room. */
static void timed_mark(eerl_meter *m, double *t, int keep, double *times, size_t *nt, size_t cap)
{
    double t0 = eerl_clock_monotonic(NULL), t1;

    eerl_meter_mark(m, t);
    t1 = eerl_clock_monotonic(NULL);
    if (keep && *nt < cap)
        times[(*nt)++] = 1e6 * (t1 - t0);
}

/* The line of one --marks row. */
static void print_marks(unsigned n, int serve, double *mark_us, size_t nm, double *end_us,
                        size_t nu, double reads_per_update, double worst, double sum_e,
                        double sum_ref)
{
    printf("%u GPU%s %s  mark: median %9.1f  p99 %9.1f  max %9.1f us (%zu marks)  "
           "update-end query: median %8.1f  max %8.1f us  counter readings per update %.1f  "
           "worst update %+.3f%%  sum %+.4f%% (%zu updates, %.0f J)\n",
           n, n == 1 ? " " : "s", serve ? "thread " : "caller ", pct(mark_us, nm, 0.5),
           pct(mark_us, nm, 0.99), pct(mark_us, nm, 1), nm, pct(end_us, nu, 0.5),
           pct(end_us, nu, 1), reads_per_update, 100 * worst, 100 * (sum_e - sum_ref) / sum_ref, nu,
           sum_ref);
    fflush(stdout);
}

static int marks_run(const struct marks_cfg *c, unsigned n, int serve)
{
    unsigned gpus[MARKS_GPUS_MAX], i;
    size_t cap = (size_t)c->updates * (2 * N_SEG + 2), nm = 0, nu = 0, s;
    double *mark_us = calloc(cap, sizeof(double)), *end_us = calloc(cap, sizeof(double));
    double worst = 0, sum_e = 0, sum_ref = 0, t_prev = 0;
    uint64_t ref_prev[MARKS_GPUS_MAX] = {0}, ref_now[MARKS_GPUS_MAX] = {0};
    uint64_t marks0 = 0, reads0 = 0, marks1 = 0, reads1 = 0;
    eerl_meter *m = NULL;
    eerl_meter_reading rd;
    int u, r = -1;

    for (i = 0; i < n; i++)
        gpus[i] = i;
    if (!mark_us || !end_us || eerl_meter_new(c->dev, gpus, n, 200, &m) < 0)
        goto out;
    if (!serve)
        eerl_meter_set_clock(m, real_clock, NULL);
    set_power(c, UPDATE[0].w);
    if (eerl_meter_start(m) < 0)
        goto out;
    eerl_meter_mark_stats(m, &marks0, &reads0);
    for (u = 0; u <= c->updates; u++) { /* update 0 is a warm-up */
        double t_end, t0, t1, ref = 0;

        for (s = 0; s < N_SEG; s++) {
            const struct seg_def *d = &UPDATE[s];
            double a = 0;

            if (d->phase) { /* its begin */
                timed_mark(m, &a, u > 0, mark_us, &nm, cap);
                if (s == 0 && u == 0)
                    t_prev = a;
            }
            set_power(c, d->w);
            if (d->s > 0)
                sleep_s(d->s);
            if (s + 1 == N_SEG) /* the reference: just before the update's last marks */
                for (i = 0; i < n; i++)
                    if (eerl_device_energy_mj(c->dev, i, &ref_now[i]) != 0)
                        ref_now[i] = 0;
            if (d->phase) /* its end */
                timed_mark(m, &a, u > 0, mark_us, &nm, cap);
        }
        /* the update's end: a mark, then the query that needs the energy */
        timed_mark(m, &t_end, u > 0, mark_us, &nm, cap);
        set_power(c, UPDATE[0].w);
        t0 = eerl_clock_monotonic(NULL);
        if (eerl_meter_energy(m, t_prev, t_end, &rd) < 0) {
            fprintf(stderr, "bench_meter: query failed\n");
            goto out;
        }
        t1 = eerl_clock_monotonic(NULL);
        for (i = 0; i < n; i++)
            ref += (double)(ref_now[i] - ref_prev[i]) / 1000.0;
        memcpy(ref_prev, ref_now, sizeof(ref_now));
        if (u > 0) {
            double e = fabs(rd.total_joules - ref) / ref;

            end_us[nu++] = 1e6 * (t1 - t0);
            if (e > worst)
                worst = e;
            sum_e += rd.total_joules;
            sum_ref += ref;
        }
        t_prev = t_end;
    }
    eerl_meter_mark_stats(m, &marks1, &reads1);
    eerl_meter_stop(m);
    print_marks(n, serve, mark_us, nm, end_us, nu, (double)(reads1 - reads0) / (c->updates + 1),
                worst, sum_e, sum_ref);
    r = 0;
out:
    eerl_meter_free(m);
    free(mark_us);
    free(end_us);
    return r;
}

/* ---- --read-cost -------------------------------------------------------------------------- */

/* The stand-in's state for --read-cost: every GPU at 300 W. with: a driver that says the clock
 * event reasons (the software power cap: read, never a slowdown) and a 700 W enforced limit;
 * without: one that has neither (the reasons NOT_SUPPORTED, no limit), so the meter asks once and
 * reads power (and the counters) only. */
static int write_read_state(const char *path, unsigned n, int with)
{
    char tmp[320];
    FILE *f;
    unsigned i;

    f = state_begin(path, tmp, sizeof(tmp));
    if (!f)
        return -1;
    fprintf(f,
            "{\"driver_version\": \"580.159.04\", \"nvml_version\": \"13.580.159.04\", "
            "\"virtual_time_ms\": null, \"energy_update_ms\": 100, \"faults\": [%s], "
            "\"gpus\": [\n",
            with ? ""
                 : "{\"function\": \"nvmlDeviceGetCurrentClocksEventReasons\", \"error\": 3, "
                   "\"count\": 1000000000}");
    for (i = 0; i < n; i++)
        fprintf(f,
                "{\"name\": \"NVIDIA H100 80GB HBM3\", \"uuid\": \"GPU-bench-%u\", "
                "\"memory_clocks_mhz\": [2619], "
                "\"sm_clocks_mhz\": {\"max\": 1980, \"min\": 345, \"step\": 15}, "
                "\"sm_clock_mhz\": 1980, \"power_mw\": 300000%s}%s\n",
                i, with ? ", \"throttle_reasons\": 4, \"power_limit_mw\": 700000" : "",
                i + 1 < n ? "," : "");
    return state_end(f, tmp, path);
}

/* Wall (median) and CPU (mean) per tick of a fresh meter over GPUs 0..n-1 of dev, in a loop of
 * at most 2000 ticks or about 1 s: power-only ticks (energy 0; the counters once, at the start)
 * or ticks that read the counters too. Prints one row, with the share at the power cap the meter
 * saw (n/a: it read no clock event reasons). */
static void read_cost_row(eerl_device *dev, unsigned n, const char *backend, int with, int energy)
{
    unsigned gpus[MARKS_GPUS_MAX], i;
    eerl_meter *m = NULL;
    eerl_meter_reading rd;
    double c0, c1, w0, wall[2000], t_first = eerl_clock_monotonic(NULL), t = t_first, med;
    char share[32] = "n/a";
    size_t k;

    for (i = 0; i < n; i++)
        gpus[i] = i;
    if (eerl_meter_new(dev, gpus, n, 200, &m) < 0 || eerl_meter_set_energy_interval(m, 1e9) < 0 ||
        eerl_meter_tick_energy(m, t_first) < 0) {
        fprintf(stderr, "bench_meter: cannot make a meter over %s\n", backend);
        eerl_meter_free(m);
        return;
    }
    c0 = cpu_seconds();
    w0 = eerl_clock_monotonic(NULL);
    for (k = 0; k < 2000 && t - w0 < 1.0; k++) {
        t = eerl_clock_monotonic(NULL);
        if (energy)
            eerl_meter_tick_energy(m, t);
        else
            eerl_meter_tick(m, t);
        wall[k] = eerl_clock_monotonic(NULL) - t;
    }
    c1 = cpu_seconds();
    med = pct(wall, k, 0.5);
    if (eerl_meter_energy(m, t_first, t, &rd) == 0 && rd.capped_share >= 0)
        snprintf(share, sizeof(share), "%.2f", rd.capped_share);
    printf("  %-22s %-8s %-14s %10.1f %10.1f %10.1f   %s\n", backend, with ? "with" : "without",
           energy ? "power+counters" : "power", 1e6 * med, 1e6 * (c1 - c0) / (double)k,
           1e6 * med / n, share);
    fflush(stdout);
    eerl_meter_free(m);
}

/* eerld (the program eerld_path) on the stand-in NVML this process was given (the environment
 * names its library and state file), on a Unix socket in dir. The pid, or -1 when it does not
 * answer within 10 s. */
static pid_t spawn_eerld(const char *eerld_path, const char *dir, char *sock, size_t len)
{
    char state[300];
    double t0 = eerl_clock_monotonic(NULL);
    pid_t pid;

    snprintf(sock, len, "%s/eerld.sock", dir);
    snprintf(state, sizeof(state), "%s/eerld-state", dir);
    pid = fork();
    if (pid == 0) {
        FILE *f = freopen("/dev/null", "w", stderr);

        (void)f;
        execl(eerld_path, eerld_path, "--foreground", "--socket", sock, "--state-dir", state,
              "--devices", "nvml", (char *)NULL);
        _exit(127);
    }
    while (pid > 0) {
        eerl_agent *a = NULL;
        char why[64];

        if (eerl_agent_connect(sock, "bench_meter probe", why, sizeof(why), &a) == 0) {
            eerl_agent_free(a);
            return pid;
        }
        if (eerl_clock_monotonic(NULL) - t0 > 10 || waitpid(pid, NULL, WNOHANG) == pid)
            break;
        usleep(10000);
    }
    if (pid > 0) {
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
    }
    return -1;
}

/* The rows of one backend: the driver without and with the reasons and the limit, power-only
 * ticks and ticks with the counters. open: a fresh device over the stand-in (eerld: through the
 * socket sock). */
static int read_cost_backend(const char *path, unsigned n, const char *sock)
{
    int with, energy;

    for (with = 0; with <= 1; with++) {
        eerl_agent *a = NULL;
        eerl_device *dev = NULL;
        char why[256] = "";
        int r;

        if (write_read_state(path, n, with) != 0) {
            perror("bench_meter: writing the state file");
            return -1;
        }
        r = sock ? eerl_agent_connect(sock, "bench_meter", why, sizeof(why), &a) : 0;
        if (r == 0)
            r = sock ? eerl_agent_device(a, &dev) : eerl_device_open_nvml(&dev);
        if (r < 0) {
            fprintf(stderr, "bench_meter: %s: %s %s\n", sock ? "eerld" : "nvml", eerl_strerror(r),
                    why);
            eerl_agent_free(a);
            return -1;
        }
        for (energy = 0; energy <= 1; energy++)
            read_cost_row(dev, n, sock ? "eerld (Unix socket)" : "nvml (in process)", with, energy);
        eerl_device_free(dev);
        eerl_agent_free(a);
    }
    return 0;
}

static int remove_one(const char *p, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)type;
    (void)ftw;
    return remove(p);
}

/* dir and everything in it (eerld's state directory included). */
static void remove_tree(const char *dir)
{
    (void)nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* --read-cost: what one tick's reads cost, in process and through eerld (started here, beside
 * this program unless --eerld names it), without and with the reasons and the limit. */
static int read_cost(const char *path, const char *dir, unsigned n, const char *eerld)
{
    char exe[1024], eerld_path[1100], sock[300];
    ssize_t len;
    pid_t pid;
    int r;

    printf("bench_meter --read-cost: %u GPUs of the stand-in NVML (no CPU burnt per counter read); "
           "a fresh meter per row, ticks back to back (at most 2000 or 1 s): wall the median tick, "
           "CPU this process's mean per tick\n"
           "  reasons+limit: the driver says the clock event reasons and the enforced power limit "
           "(with) or has neither (without)\n"
           "  %-22s %-8s %-14s %10s %10s %10s   %s\n",
           n, "backend", "reasons", "tick reads", "wall us", "CPU us", "wall/GPU", "capped share");
    if (read_cost_backend(path, n, NULL) < 0)
        return -1;
    if (!eerld) {
        len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        if (len <= 0) {
            printf("  eerld: not measured (give --eerld PATH)\n");
            return 0;
        }
        exe[len] = '\0';
        *strrchr(exe, '/') = '\0'; /* BUILD/bench */
        snprintf(eerld_path, sizeof(eerld_path), "%s/../eerld", exe);
        eerld = eerld_path;
    }
    pid = spawn_eerld(eerld, dir, sock, sizeof(sock));
    if (pid < 0) {
        printf("  eerld: not measured (%s did not start)\n", eerld);
        return 0;
    }
    r = read_cost_backend(path, n, sock);
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    unlink(sock);
    return r;
}

static void usage(FILE *out)
{
    fprintf(out, "usage: EERL_NVML_LIBRARY=<build>/fake_nvml/libnvidia-ml.so.1 bench_meter\n"
                 "           [--seconds 60] [--interval-ms 200] [--gpus 8] [--counter-cost-us 0]\n"
                 "           [--real]\n"
                 "Measures the CPU cost of the meter's sampling thread (default energy interval, "
                 "then\nthe counters at every tick), of one tick, one mark and one interval "
                 "query.\n"
                 "--seconds: length of each of the two sampling runs.\n"
                 "--counter-cost-us: CPU the stand-in burns per energy counter read (an H200: "
                 "4000).\n"
                 "--real: sample the machine's own GPUs (real driver, read-only) instead of the "
                 "stand-in;\n        --gpus then defaults to all of them.\n"
                 "--read-cost [--eerld PATH]: the CPU and wall time of one tick's reads, in "
                 "process and\n        through eerld on a Unix socket (started here; PATH: "
                 "BUILD/eerld by default),\n        with and without the clock event reasons and "
                 "the power limit.\n"
                 "--marks [--updates 5] [--counts 1,2,4,8]: the cost of a phase mark on the "
                 "caller's thread\n        (median, p99, max) and the meter's accuracy, for 1 to "
                 "--gpus GPUs (or the\n        counts listed), marks read on the caller's thread "
                 "against read by the meter's.\n");
}

static int parse_num(const char *flag, const char *text, double lo, double hi, double *ret)
{
    char *end = NULL;
    double v;

    errno = 0;
    v = strtod(text ? text : "", &end);
    if (!text || errno || *end || end == text || v < lo || v > hi) {
        fprintf(stderr, "bench_meter: %s '%s' must be a number in %g-%g\n", flag, text ? text : "",
                lo, hi);
        return -1;
    }
    *ret = v;
    return 0;
}

/* One sampling run with the meter's thread: the CPU of the whole process while it runs and the
 * main thread sleeps. energy_interval: as eerl_meter_set_energy_interval takes it. Returns the
 * meter (the caller frees it), NULL on failure. */
static eerl_meter *sampling_run(eerl_device *dev, const unsigned *gpus, unsigned n,
                                unsigned interval_ms, double seconds, double energy_interval,
                                const char *label, double *ret_t_first)
{
    eerl_meter *m = NULL;
    double c0, c1, w0, w1, iv = 0;
    size_t samples;

    if (eerl_meter_new(dev, gpus, n, interval_ms, &m) < 0 ||
        eerl_meter_set_energy_interval(m, energy_interval) < 0) {
        fprintf(stderr, "bench_meter: cannot make a meter\n");
        eerl_meter_free(m);
        return NULL;
    }
    c0 = cpu_seconds();
    w0 = eerl_clock_monotonic(NULL);
    if (eerl_meter_mark(m, ret_t_first) < 0 || eerl_meter_start(m) < 0) {
        fprintf(stderr, "bench_meter: cannot start the sampler\n");
        eerl_meter_free(m);
        return NULL;
    }
    sleep_s(seconds);
    eerl_meter_stop(m);
    w1 = eerl_clock_monotonic(NULL);
    c1 = cpu_seconds();
    samples = eerl_meter_sample_count(m);
    eerl_meter_energy_interval(m, &iv);
    printf("sampling (%s, energy interval %s%.3g s):\n"
           "           %zu samples in %.3f s wall, CPU %.4f s = %.4f%% of one core, "
           "%.1f us CPU per second of sampling (%.1f us per sample of %u GPUs)\n",
           label, energy_interval == EERL_METER_ENERGY_AUTO ? "auto, now " : "", iv, samples,
           w1 - w0, c1 - c0, 100.0 * (c1 - c0) / (w1 - w0), 1e6 * (c1 - c0) / (w1 - w0),
           samples ? 1e6 * (c1 - c0) / (double)samples : 0.0, n);
    fflush(stdout);
    return m;
}

/* CPU per call of a tick (mark = 0) or a mark (mark = 1) on a fresh meter, in a tight loop of at
 * most max_n calls or about 2 s. */
static void tick_cost(eerl_device *dev, const unsigned *gpus, unsigned n, unsigned interval_ms,
                      int mark, int max_n)
{
    eerl_meter *m = NULL;
    double c0, c1, w0, w1, t = 0;
    int k;

    if (eerl_meter_new(dev, gpus, n, interval_ms, &m) < 0)
        return;
    eerl_meter_set_energy_interval(m, 1e9); /* ticks after the first read power only */
    eerl_meter_mark(m, NULL);
    c0 = cpu_seconds();
    w0 = eerl_clock_monotonic(NULL);
    for (k = 0; k < max_n; k++) {
        if (mark) {
            eerl_meter_mark(m, NULL);
        } else {
            t = eerl_clock_monotonic(NULL);
            eerl_meter_tick(m, t);
        }
        if (eerl_clock_monotonic(NULL) - w0 > 2.0) {
            k++;
            break;
        }
    }
    w1 = eerl_clock_monotonic(NULL);
    c1 = cpu_seconds();
    printf("%s %9.2f us wall, %9.2f us CPU per %s of %u GPUs (%d calls)\n",
           mark ? "mark:     " : "tick:     ", 1e6 * (w1 - w0) / k, 1e6 * (c1 - c0) / k,
           mark ? "mark (power + counters)" : "tick (power only)", n, k);
    eerl_meter_free(m);
}

/* The command line, and the stand-in's state file it made. */
struct args {
    double seconds, interval, ngpu, counter_cost, updates;
    int real, marks, read_costs;
    const char *eerld;
    unsigned counts[MARKS_GPUS_MAX], n_counts;
    char dir[256], path[300];
};

/* --counts LIST into a. 0, or -1 (said). */
static int parse_counts(char *list, struct args *a)
{
    char *save = NULL, *tok;

    for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        double v;

        if (a->n_counts == MARKS_GPUS_MAX || parse_num("--counts", tok, 1, MARKS_GPUS_MAX, &v) < 0)
            return -1;
        a->counts[a->n_counts++] = (unsigned)v;
    }
    return 0;
}

/* One option at argv[*k] (its value taken too). 0, 1 for --help, or 2 (said). */
static int parse_one(int argc, char **argv, int *k, struct args *a)
{
    const char *o = argv[*k];
    int more = *k + 1 < argc;

    if (!strcmp(o, "--help")) {
        usage(stdout);
        return 1;
    } else if (!strcmp(o, "--seconds") && more) {
        return parse_num(o, argv[++*k], 0.5, 3600, &a->seconds) < 0 ? 2 : 0;
    } else if (!strcmp(o, "--interval-ms") && more) {
        return parse_num(o, argv[++*k], 10, 60000, &a->interval) < 0 ? 2 : 0;
    } else if (!strcmp(o, "--gpus") && more) {
        if (parse_num(o, argv[++*k], 1, EERL_METER_GPUS_LIMIT, &a->ngpu) < 0)
            return 2;
        a->ngpu = (double)(unsigned)a->ngpu;
    } else if (!strcmp(o, "--counter-cost-us") && more) {
        return parse_num(o, argv[++*k], 0, 1e6, &a->counter_cost) < 0 ? 2 : 0;
    } else if (!strcmp(o, "--real") || !strcmp(o, "--marks") || !strcmp(o, "--read-cost")) {
        *(!strcmp(o, "--real") ? &a->real : !strcmp(o, "--marks") ? &a->marks : &a->read_costs) = 1;
    } else if (!strcmp(o, "--eerld") && more) {
        a->eerld = argv[++*k];
    } else if (!strcmp(o, "--updates") && more) {
        return parse_num(o, argv[++*k], 1, 10000, &a->updates) < 0 ? 2 : 0;
    } else if (!strcmp(o, "--counts") && more) {
        return parse_counts(argv[++*k], a) < 0 ? 2 : 0;
    } else {
        fprintf(stderr, "bench_meter: unknown argument '%s'\n", o);
        usage(stderr);
        return 2;
    }
    return 0;
}

/* The whole command line, checked. 0, 1 for --help, or 2 (said). */
static int parse_args(int argc, char **argv, struct args *a)
{
    int k, r;

    memset(a, 0, sizeof(*a));
    a->seconds = 60;
    a->interval = 200;
    a->updates = 5;
    for (k = 1; k < argc; k++)
        if ((r = parse_one(argc, argv, &k, a)) != 0)
            return r;
    if (!a->marks && (a->n_counts > 0 || a->updates != 5)) {
        fprintf(stderr, "bench_meter: --counts and --updates go with --marks\n");
        return 2;
    }
    if (a->read_costs && (a->real || a->marks || a->ngpu > MARKS_GPUS_MAX)) {
        fprintf(stderr, "bench_meter: --read-cost is for the stand-in, alone, with --gpus <= %d\n",
                MARKS_GPUS_MAX);
        return 2;
    }
    if (a->real && a->counter_cost > 0) {
        fprintf(stderr, "bench_meter: --counter-cost-us is for the stand-in, not with --real\n");
        return 2;
    }
    return 0;
}

/* Without --real: the stand-in's state file in a fresh directory, named by
 * EERL_FAKE_NVML_STATE. 0, or the exit status (said). */
static int make_standin(struct args *a)
{
    const char *lib = getenv("EERL_NVML_LIBRARY"), *base = getenv("TMPDIR");
    unsigned i;

    if (!lib || !*lib) {
        fprintf(stderr, "bench_meter: set EERL_NVML_LIBRARY to the stand-in library "
                        "(<build>/fake_nvml/libnvidia-ml.so.1), or pass --real\n");
        return 2;
    }
    if (a->ngpu == 0)
        a->ngpu = 8;
    for (i = 0; i < a->n_counts; i++)
        if (a->counts[i] > a->ngpu)
            a->ngpu = a->counts[i];
    snprintf(a->dir, sizeof(a->dir), "%s/eerl-bench-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(a->dir)) {
        perror("bench_meter: mkdtemp");
        return 1;
    }
    snprintf(a->path, sizeof(a->path), "%s/state.json", a->dir);
    if (write_state(a->path, (unsigned)a->ngpu, (unsigned)a->counter_cost) != 0) {
        perror("bench_meter: writing the state file");
        return 1;
    }
    setenv("EERL_FAKE_NVML_STATE", a->path, 1);
    return 0;
}

/* The stand-in's state file and its directory, gone (nothing with --real). */
static void drop_standin(const struct args *a)
{
    if (!a->real) {
        unlink(a->path);
        rmdir(a->dir);
    }
}

/* The device and the GPUs the runs use (0..ngpu-1), every count of --counts visible. 0, or 1
 * (said). */
static int open_gpus(struct args *a, eerl_device **dev, unsigned **gpus)
{
    unsigned count = 0, i;
    int r = eerl_device_open_nvml(dev);

    if (r < 0) {
        fprintf(stderr, "bench_meter: %s %s\n", eerl_strerror(r),
                *dev ? eerl_device_last_error(*dev) : "");
        return 1;
    }
    r = eerl_device_count(*dev, &count);
    if (r < 0 || count == 0) {
        fprintf(stderr, "bench_meter: no GPUs visible (%s)\n", r < 0 ? eerl_strerror(r) : "0");
        return 1;
    }
    if (a->ngpu == 0) /* --real without --gpus: every GPU there is */
        a->ngpu = count;
    if (count < (unsigned)a->ngpu) {
        fprintf(stderr, "bench_meter: --gpus %g: only %u GPU%s visible\n", a->ngpu, count,
                count == 1 ? "" : "s");
        return 1;
    }
    *gpus = malloc((size_t)a->ngpu * sizeof(**gpus));
    if (!*gpus) {
        fprintf(stderr, "bench_meter: out of memory for %g GPUs\n", a->ngpu);
        return 1;
    }
    for (i = 0; i < (unsigned)a->ngpu; i++)
        (*gpus)[i] = i;
    for (i = 0; i < a->n_counts; i++)
        if (a->counts[i] > count) {
            fprintf(stderr, "bench_meter: --counts %u: only %u GPU%s visible\n", a->counts[i],
                    count, count == 1 ? "" : "s");
            return 1;
        }
    return 0;
}

/* --marks: each GPU count, marks on the caller's thread then on the meter's. The exit status. */
static int marks_main(struct args *a, eerl_device *dev)
{
    struct marks_cfg c;
    unsigned i;

    memset(&c, 0, sizeof(c));
    c.dev = dev;
    c.state = a->real ? NULL : a->path;
    c.n_all = (unsigned)a->ngpu;
    c.cost_us = (unsigned)a->counter_cost;
    c.updates = (int)a->updates;
    if (a->n_counts == 0)
        for (i = 1; i <= (unsigned)a->ngpu && a->n_counts < MARKS_GPUS_MAX; i++)
            a->counts[a->n_counts++] = i;
    printf("bench_meter --marks: %s backend%s, %d updates of %zu segments (15 marks: TRL's "
           "pattern, 10x shorter) after one warm-up\n",
           eerl_device_backend(dev), a->real ? " (real driver, read-only)" : " (stand-in)",
           c.updates, N_SEG);
    if (a->real)
        printf("  counter reads cost what the driver's cost\n");
    else
        printf("  the stand-in burns %u us of CPU per counter read; each phase draws its own "
               "power (120-686 W)\n",
               c.cost_us);
    printf("  reference: each GPU's counter read directly just before the update's last two "
           "marks\n");
    printf("  caller: marks read the counters on the caller's thread (the meter before); "
           "thread: the meter's thread reads them (now)\n");
    fflush(stdout);
    for (i = 0; i < a->n_counts; i++)
        if (marks_run(&c, a->counts[i], 0) < 0 || marks_run(&c, a->counts[i], 1) < 0)
            return 1;
    eerl_device_free(dev);
    drop_standin(a);
    return 0;
}

/* Interval queries over the ring a run filled, between random marks, all GPUs; then the
 * energy between its first and last marks. */
static void query_cost(eerl_meter *m, double t_first, unsigned ngpu)
{
    const int nq = 200000;
    size_t samples = eerl_meter_sample_count(m);
    eerl_meter_reading rd;
    double t_last, w0, w1, sink = 0;
    unsigned seed = 12345;
    int k;

    if (eerl_meter_mark(m, &t_last) != 0 || samples < 2)
        return;
    w0 = eerl_clock_monotonic(NULL);
    for (k = 0; k < nq; k++) {
        double a, b;

        seed = seed * 1103515245u + 12345u;
        a = t_first + (t_last - t_first) * ((seed >> 8) & 0xffff) / 65536.0;
        seed = seed * 1103515245u + 12345u;
        b = a + (t_last - a) * ((seed >> 8) & 0xffff) / 65536.0;
        if (eerl_meter_energy(m, a, b, &rd) == 0)
            sink += rd.total_joules;
    }
    w1 = eerl_clock_monotonic(NULL);
    printf("query:     %.3f us per interval query over %u GPUs (%d queries over %zu "
           "samples; checksum %.0f J)\n",
           1e6 * (w1 - w0) / nq, ngpu, nq, samples, sink / nq);
    if (eerl_meter_energy(m, t_first, t_last, &rd) == 0)
        printf("energy:    %.1f J between the default run's first and last marks, mean %.1f W "
               "across the %u GPUs, flags 0x%x\n",
               rd.total_joules, rd.total_joules / (t_last - t_first), ngpu, rd.flags);
}

/* The default bench: the sampler thread, one tick and one mark, interval queries. The exit
 * status. */
static int sampling_main(struct args *a, eerl_device *dev, unsigned *gpus)
{
    unsigned n = (unsigned)a->ngpu, iv = (unsigned)a->interval, mw = 0;
    int pr = eerl_device_power_instant_mw(dev, 0, &mw);
    double t_first = 0, t_x;
    eerl_meter *m;

    printf("bench_meter: %s backend%s, %u GPUs, every %g ms, %g s per run; power: %s\n",
           eerl_device_backend(dev), a->real ? " (real driver)" : " (stand-in)", n, a->interval,
           a->seconds,
           pr == 0 ? "instantaneous (eerl_device_power_instant_mw)"
                   : "averaged (eerl_device_power_mw; no instantaneous reading)");
    fflush(stdout);
    /* 1. the sampler thread, with the counters at every tick (the old meter), then the default */
    m = sampling_run(dev, gpus, n, iv, a->seconds, 0, "counters every tick", &t_x);
    eerl_meter_free(m);
    m = sampling_run(dev, gpus, n, iv, a->seconds, EERL_METER_ENERGY_AUTO, "default", &t_first);
    if (!m)
        return 1;
    /* 2. one tick and one mark, in tight loops (fresh meters) */
    tick_cost(dev, gpus, n, iv, 0, 2000);
    tick_cost(dev, gpus, n, iv, 1, 2000);
    /* 3. interval queries over the ring the default run filled */
    query_cost(m, t_first, n);
    eerl_meter_free(m);
    eerl_device_free(dev);
    free(gpus);
    drop_standin(a);
    return 0;
}

int main(int argc, char **argv)
{
    struct args a;
    eerl_device *dev = NULL;
    unsigned *gpus = NULL;
    int r = parse_args(argc, argv, &a);

    if (r != 0)
        return r == 1 ? 0 : r;
    if (!a.real && (r = make_standin(&a)) != 0)
        return r;
    if (a.read_costs) {
        r = read_cost(a.path, a.dir, (unsigned)a.ngpu, a.eerld);
        unlink(a.path);
        remove_tree(a.dir);
        return r < 0 ? 1 : 0;
    }
    if (open_gpus(&a, &dev, &gpus) != 0)
        return 1;
    return a.marks ? marks_main(&a, dev) : sampling_main(&a, dev, gpus);
}

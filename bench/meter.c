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
 * (read-only: the meter never changes a GPU); --gpus then defaults to every GPU visible. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

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
                 "stand-in;\n        --gpus then defaults to all of them.\n");
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

static void sleep_s(double seconds)
{
    struct timespec nap;

    nap.tv_sec = (time_t)seconds;
    nap.tv_nsec = (long)((seconds - (double)nap.tv_sec) * 1e9);
    while (nanosleep(&nap, &nap) < 0 && errno == EINTR)
        ;
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

int main(int argc, char **argv)
{
    double seconds = 60, interval = 200, ngpu = 0, counter_cost = 0, w0, w1, t_first = 0, t_last,
           sink = 0, t_x;
    char dir[256], path[300];
    unsigned *gpus = NULL, count = 0, i, mw = 0;
    eerl_device *dev = NULL;
    eerl_meter *m = NULL;
    eerl_meter_reading rd;
    int real = 0, r, k, nq = 200000, pr;
    size_t samples;

    for (k = 1; k < argc; k++) {
        if (!strcmp(argv[k], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[k], "--seconds") && k + 1 < argc) {
            if (parse_num("--seconds", argv[++k], 0.5, 3600, &seconds) < 0)
                return 2;
        } else if (!strcmp(argv[k], "--interval-ms") && k + 1 < argc) {
            if (parse_num("--interval-ms", argv[++k], 10, 60000, &interval) < 0)
                return 2;
        } else if (!strcmp(argv[k], "--gpus") && k + 1 < argc) {
            if (parse_num("--gpus", argv[++k], 1, EERL_METER_GPUS_LIMIT, &ngpu) < 0)
                return 2;
            ngpu = (double)(unsigned)ngpu;
        } else if (!strcmp(argv[k], "--counter-cost-us") && k + 1 < argc) {
            if (parse_num("--counter-cost-us", argv[++k], 0, 1e6, &counter_cost) < 0)
                return 2;
        } else if (!strcmp(argv[k], "--real")) {
            real = 1;
        } else {
            fprintf(stderr, "bench_meter: unknown argument '%s'\n", argv[k]);
            usage(stderr);
            return 2;
        }
    }
    if (real && counter_cost > 0) {
        fprintf(stderr, "bench_meter: --counter-cost-us is for the stand-in, not with --real\n");
        return 2;
    }
    if (!real) {
        const char *lib = getenv("EERL_NVML_LIBRARY");
        const char *base = getenv("TMPDIR");

        if (!lib || !*lib) {
            fprintf(stderr, "bench_meter: set EERL_NVML_LIBRARY to the stand-in library "
                            "(<build>/fake_nvml/libnvidia-ml.so.1), or pass --real\n");
            return 2;
        }
        if (ngpu == 0)
            ngpu = 8;
        snprintf(dir, sizeof(dir), "%s/eerl-bench-XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(dir)) {
            perror("bench_meter: mkdtemp");
            return 1;
        }
        snprintf(path, sizeof(path), "%s/state.json", dir);
        if (write_state(path, (unsigned)ngpu, (unsigned)counter_cost) != 0) {
            perror("bench_meter: writing the state file");
            return 1;
        }
        setenv("EERL_FAKE_NVML_STATE", path, 1);
    }
    r = eerl_device_open_nvml(&dev);
    if (r < 0) {
        fprintf(stderr, "bench_meter: %s %s\n", eerl_strerror(r),
                dev ? eerl_device_last_error(dev) : "");
        return 1;
    }
    r = eerl_device_count(dev, &count);
    if (r < 0 || count == 0) {
        fprintf(stderr, "bench_meter: no GPUs visible (%s)\n", r < 0 ? eerl_strerror(r) : "0");
        return 1;
    }
    if (ngpu == 0) /* --real without --gpus: every GPU there is */
        ngpu = count;
    if (count < (unsigned)ngpu) {
        fprintf(stderr, "bench_meter: --gpus %g: only %u GPU%s visible\n", ngpu, count,
                count == 1 ? "" : "s");
        return 1;
    }
    gpus = malloc((size_t)ngpu * sizeof(*gpus));
    if (!gpus) {
        fprintf(stderr, "bench_meter: out of memory for %g GPUs\n", ngpu);
        return 1;
    }
    for (i = 0; i < (unsigned)ngpu; i++)
        gpus[i] = i;
    pr = eerl_device_power_instant_mw(dev, 0, &mw);
    printf("bench_meter: %s backend%s, %u GPUs, every %g ms, %g s per run; power: %s\n",
           eerl_device_backend(dev), real ? " (real driver)" : " (stand-in)", (unsigned)ngpu,
           interval, seconds,
           pr == 0 ? "instantaneous (eerl_device_power_instant_mw)"
                   : "averaged (eerl_device_power_mw; no instantaneous reading)");
    fflush(stdout);

    /* 1. the sampler thread, with the counters at every tick (the old meter), then the default */
    m = sampling_run(dev, gpus, (unsigned)ngpu, (unsigned)interval, seconds, 0,
                     "counters every tick", &t_x);
    eerl_meter_free(m);
    m = sampling_run(dev, gpus, (unsigned)ngpu, (unsigned)interval, seconds, EERL_METER_ENERGY_AUTO,
                     "default", &t_first);
    if (!m)
        return 1;

    /* 2. one tick and one mark, in tight loops (fresh meters) */
    tick_cost(dev, gpus, (unsigned)ngpu, (unsigned)interval, 0, 2000);
    tick_cost(dev, gpus, (unsigned)ngpu, (unsigned)interval, 1, 2000);

    /* 3. interval queries over the ring the default run filled: random marks, all GPUs */
    samples = eerl_meter_sample_count(m);
    if (eerl_meter_mark(m, &t_last) == 0 && samples >= 2) {
        unsigned seed = 12345;

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
               1e6 * (w1 - w0) / nq, (unsigned)ngpu, nq, samples, sink / nq);
        if (eerl_meter_energy(m, t_first, t_last, &rd) == 0)
            printf("energy:    %.1f J between the default run's first and last marks, mean %.1f W "
                   "across the %u GPUs, flags 0x%x\n",
                   rd.total_joules, rd.total_joules / (t_last - t_first), (unsigned)ngpu, rd.flags);
    }
    eerl_meter_free(m);
    eerl_device_free(dev);
    free(gpus);
    if (!real) {
        unlink(path);
        rmdir(dir);
    }
    return 0;
}

/* bench_meter: what metering costs. Samples 8 GPUs of the stand-in NVML library with the meter's
 * thread at 200 ms for 60 s and reports the process's CPU time (getrusage) as a percentage of one
 * core; then the cost of one tick and of one interval query. Prints figures; never fails on them.
 *
 * usage: EERL_NVML_LIBRARY=<build>/fake_nvml/libnvidia-ml.so.1 bench_meter [--seconds 60]
 *            [--interval-ms 200] [--gpus 8]
 * The stand-in library is built with the tests (tests/fake_nvml); the benchmark writes its own
 * state file (real time, every GPU at a constant power) into a temporary directory. On a machine
 * with a driver, leave EERL_NVML_LIBRARY unset and pass --real to sample the real GPUs instead. */
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

static int write_state(const char *path, unsigned n)
{
    FILE *f = fopen(path, "w");
    unsigned i;

    if (!f)
        return -1;
    fprintf(f, "{\"driver_version\": \"580.159.04\", \"nvml_version\": \"13.580.159.04\", "
               "\"virtual_time_ms\": null, \"energy_update_ms\": 100, \"gpus\": [\n");
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
                 "           [--seconds 60] [--interval-ms 200] [--gpus 8] [--real]\n"
                 "Measures the CPU cost of the meter's sampling thread and of one interval "
                 "query.\n"
                 "--real: sample the machine's own GPUs (real driver) instead of the stand-in.\n");
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

int main(int argc, char **argv)
{
    double seconds = 60, interval = 200, ngpu = 8, c0, c1, w0, w1, t_first, t_last, sink = 0;
    char dir[256], path[300];
    unsigned gpus[EERL_METER_GPUS_MAX], count = 0, i;
    eerl_device *dev = NULL;
    eerl_meter *m = NULL, *m2 = NULL;
    eerl_meter_reading rd;
    struct timespec nap;
    int real = 0, r, k, nq = 200000;
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
            if (parse_num("--gpus", argv[++k], 1, EERL_METER_GPUS_MAX, &ngpu) < 0)
                return 2;
        } else if (!strcmp(argv[k], "--real")) {
            real = 1;
        } else {
            fprintf(stderr, "bench_meter: unknown argument '%s'\n", argv[k]);
            usage(stderr);
            return 2;
        }
    }
    if (!real) {
        const char *lib = getenv("EERL_NVML_LIBRARY");
        const char *base = getenv("TMPDIR");

        if (!lib || !*lib) {
            fprintf(stderr, "bench_meter: set EERL_NVML_LIBRARY to the stand-in library "
                            "(<build>/fake_nvml/libnvidia-ml.so.1), or pass --real\n");
            return 2;
        }
        snprintf(dir, sizeof(dir), "%s/eerl-bench-XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(dir)) {
            perror("bench_meter: mkdtemp");
            return 1;
        }
        snprintf(path, sizeof(path), "%s/state.json", dir);
        if (write_state(path, (unsigned)ngpu) != 0) {
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
    if (eerl_device_count(dev, &count) < 0 || count < (unsigned)ngpu) {
        fprintf(stderr, "bench_meter: %u GPUs visible, %g asked for\n", count, ngpu);
        return 1;
    }
    for (i = 0; i < (unsigned)ngpu; i++)
        gpus[i] = i;
    r = eerl_meter_new(dev, gpus, (size_t)ngpu, (unsigned)interval, &m);
    if (r < 0) {
        fprintf(stderr, "bench_meter: eerl_meter_new: %s\n", eerl_strerror(r));
        return 1;
    }
    printf("bench_meter: %s backend, %u GPUs, every %g ms, for %g s\n", eerl_device_backend(dev),
           (unsigned)ngpu, interval, seconds);
    fflush(stdout);

    /* 1. the sampler thread: CPU of the whole process while it runs and the main thread sleeps */
    if (eerl_meter_tick_now(m, &t_first) < 0) {
        fprintf(stderr, "bench_meter: first tick failed\n");
        return 1;
    }
    c0 = cpu_seconds();
    w0 = eerl_clock_monotonic(NULL);
    if (eerl_meter_start(m) < 0) {
        fprintf(stderr, "bench_meter: cannot start the sampler\n");
        return 1;
    }
    nap.tv_sec = (time_t)seconds;
    nap.tv_nsec = (long)((seconds - (double)nap.tv_sec) * 1e9);
    while (nanosleep(&nap, &nap) < 0 && errno == EINTR)
        ;
    eerl_meter_stop(m);
    w1 = eerl_clock_monotonic(NULL);
    c1 = cpu_seconds();
    samples = eerl_meter_sample_count(m);
    printf("sampling:  %zu samples in %.3f s wall, CPU %.4f s = %.4f%% of one core "
           "(%.1f us per sample of %u GPUs)\n",
           samples, w1 - w0, c1 - c0, 100.0 * (c1 - c0) / (w1 - w0),
           samples ? 1e6 * (c1 - c0) / (double)samples : 0.0, (unsigned)ngpu);

    /* 2. one tick, in a tight loop (a fresh meter, so the ring starts empty) */
    if (eerl_meter_new(dev, gpus, (size_t)ngpu, (unsigned)interval, &m2) == 0) {
        int nt = 2000;

        c0 = cpu_seconds();
        w0 = eerl_clock_monotonic(NULL);
        for (k = 0; k < nt; k++)
            eerl_meter_tick_now(m2, NULL);
        w1 = eerl_clock_monotonic(NULL);
        c1 = cpu_seconds();
        printf("tick:      %.2f us wall, %.2f us CPU per tick of %u GPUs (%d ticks)\n",
               1e6 * (w1 - w0) / nt, 1e6 * (c1 - c0) / nt, (unsigned)ngpu, nt);
        eerl_meter_free(m2);
    }

    /* 3. interval queries over the ring the run filled: random marks, whole allocation */
    if (samples >= 2 && eerl_meter_last_time(m, &t_last) == 0) {
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
            printf("energy:    %.1f J over the run, mean %.1f W across the %u GPUs, flags 0x%x\n",
                   rd.total_joules, rd.total_joules / (t_last - t_first), (unsigned)ngpu, rd.flags);
    }
    eerl_meter_free(m);
    eerl_device_free(dev);
    if (!real) {
        unlink(path);
        rmdir(dir);
    }
    return 0;
}

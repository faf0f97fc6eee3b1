/* eerl meter: runs a command, samples the GPUs' energy counters while it runs, and reports the
 * energy, duration, mean and peak power per GPU and in total; exits with the command's status
 * (128 + signal when a signal killed it). With --clock it also locks the GPUs' SM clock for the
 * run through the actuator, and restores them on every way out it can see.
 *
 * Signals: SIGINT and SIGTERM are caught by a handler that only does async-signal-safe things: it
 * records the signal and forwards it to the child with kill(). The main loop, woken from
 * waitpid() by EINTR, then restores the clocks (eerl_actuator_restore_all, which takes mutexes
 * and calls NVML and so must not run in the handler) and keeps waiting for the child to exit. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "eerl/tools/actuator.h"
#include "eerl/device.h"
#include "eerl/error.h"
#include "eerl/meter.h"
#include "cli.h"

#define CMD "meter"

static volatile sig_atomic_t got_signal;
static volatile pid_t child_pid;

static void on_signal(int sig)
{
    int saved = errno;

    got_signal = sig;
    if (child_pid > 0)
        kill(child_pid, sig);
    errno = saved;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: eerl meter [--interval-ms N] [--gpus LIST] [--json] [-o|--output FILE]\n"
            "                  [--clock MHZ [--observe-only]] -- CMD [ARGS...]\n\n"
            "Runs CMD, samples the energy counters of the GPUs while it runs, and reports per\n"
            "GPU and in total: energy (J), duration (s), mean and peak power (W). Exits with\n"
            "CMD's exit status (128 + the signal number if a signal killed it). SIGINT and\n"
            "SIGTERM are forwarded to CMD.\n\n"
            "options:\n"
            "  --interval-ms N  sampling interval in milliseconds (10-60000, default 200)\n"
            "  --gpus LIST      GPUs to meter, e.g. 0,1 or 0-3 (default: all)\n"
            "  --json           print the report as one JSON object\n"
            "  -o, --output FILE  write the report to FILE instead of standard output\n"
            "  --clock MHZ      lock the metered GPUs' SM clock at MHZ (snapped down to a\n"
            "                   supported clock) while CMD runs; reset afterwards, also on\n"
            "                   SIGINT/SIGTERM. Needs root or CAP_SYS_ADMIN\n"
            "  --observe-only   with --clock: only report what would be locked\n"
            "  --help           show this help\n\n"
            "Flags in the report say how an energy figure was obtained: reset (the counter\n"
            "went backwards), stuck (it stopped moving), power (integrated power used),\n"
            "lost (the GPU was lost), missed (a read failed), partial, suspect (the counter\n"
            "fell far short of power over too short a stretch to call it stuck).\n"
            "docs/meter.md explains.\n\n"
            "environment:\n"
            "  EERL_NVML_LIBRARY  path of libnvidia-ml.so.1 (or the stand-in library)\n");
}

struct opts {
    unsigned long interval_ms;
    unsigned *gpus; /* ours; --gpus or every GPU of the machine */
    size_t n_gpus;
    int have_gpus;
    int json;
    const char *output;
    unsigned long clock_mhz; /* 0: leave the clocks alone */
    int observe_only;
    char **argv; /* the command */
};

static int parse(int argc, char **argv, struct opts *o)
{
    int i;

    memset(o, 0, sizeof(*o));
    o->interval_ms = EERL_METER_DEFAULT_INTERVAL_MS;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];

        if (!strcmp(a, "--")) {
            i++;
            break;
        }
        if (a[0] != '-')
            break;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 1;
        }
        if (!strcmp(a, "--json")) {
            o->json = 1;
        } else if (!strcmp(a, "--observe-only")) {
            o->observe_only = 1;
        } else if (!strcmp(a, "--interval-ms") || !strcmp(a, "--gpus") || !strcmp(a, "--output") ||
                   !strcmp(a, "-o") || !strcmp(a, "--clock")) {
            if (i + 1 >= argc) {
                eerl_cli_err(CMD, "%s needs a value", a);
                return -1;
            }
            i++;
            if (!strcmp(a, "--interval-ms")) {
                if (eerl_cli_parse_uint(CMD, "--interval-ms", argv[i], 10, 60000, &o->interval_ms) <
                    0)
                    return -1;
            } else if (!strcmp(a, "--gpus")) {
                /* Indices are at most 65535, so a list of distinct ones has at most 65536. */
                free(o->gpus);
                o->gpus = malloc(65536 * sizeof(*o->gpus));
                if (!o->gpus) {
                    eerl_cli_err(CMD, "out of memory");
                    return -1;
                }
                if (eerl_cli_parse_index_list(CMD, "--gpus", argv[i], o->gpus, 65536, &o->n_gpus) <
                    0)
                    return -1;
                o->have_gpus = 1;
            } else if (!strcmp(a, "--output") || !strcmp(a, "-o")) {
                o->output = argv[i];
            } else if (eerl_cli_parse_uint(CMD, "--clock", argv[i], 1, 100000, &o->clock_mhz) < 0) {
                return -1;
            }
        } else {
            eerl_cli_err(CMD,
                         "unknown option '%s'; valid: --interval-ms --gpus --json --output "
                         "--clock --observe-only --help (put the command after --)",
                         a);
            return -1;
        }
    }
    if (i >= argc) {
        eerl_cli_err(CMD, "no command given: usage: eerl meter [options] -- CMD [ARGS...]");
        return -1;
    }
    if (o->observe_only && !o->clock_mhz) {
        eerl_cli_err(CMD, "--observe-only only makes sense with --clock MHZ");
        return -1;
    }
    o->argv = argv + i;
    return 0;
}

/* Forks and execs the command. An exec failure comes back through a close-on-exec pipe so the
 * parent can name it. Returns the child's pid, or -1 (message printed, *ret_exit set). */
/* A temp file beside path, made like fopen(path, "w") would make path (0666 less the umask),
 * so a run that ends without a report leaves path as it was. *ret_tmp: its malloc'd name. */
static FILE *open_report_tmp(const char *path, char **ret_tmp)
{
    size_t len = strlen(path) + 16;
    char *tmp = malloc(len);
    mode_t mask = umask(0);
    FILE *f = NULL;
    int fd;

    umask(mask);
    if (!tmp)
        return NULL;
    snprintf(tmp, len, "%s.tmp.XXXXXX", path);
    fd = mkstemp(tmp);
    if (fd >= 0 && (fchmod(fd, 0666 & ~mask) < 0 || !(f = fdopen(fd, "w")))) {
        int e = errno;

        close(fd);
        unlink(tmp);
        errno = e;
        fd = -1;
    }
    if (fd < 0) {
        free(tmp);
        return NULL;
    }
    *ret_tmp = tmp;
    return f;
}

static pid_t spawn(char **argv, int *ret_exit)
{
    sigset_t block, old;
    int fds[2], err = 0;
    ssize_t n;
    pid_t pid;

    if (pipe(fds) < 0 || fcntl(fds[0], F_SETFD, FD_CLOEXEC) < 0 ||
        fcntl(fds[1], F_SETFD, FD_CLOEXEC) < 0) {
        eerl_cli_err(CMD, "pipe: %s", strerror(errno));
        *ret_exit = EERL_EXIT_FAIL;
        return -1;
    }
    /* Signals stay blocked until child_pid is set, so none is lost between fork and here. */
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigprocmask(SIG_BLOCK, &block, &old);
    fflush(NULL);
    pid = fork();
    if (pid == 0) {
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        sigprocmask(SIG_SETMASK, &old, NULL);
        close(fds[0]);
        execvp(argv[0], argv);
        err = errno;
        if (write(fds[1], &err, sizeof(err)) < 0) {
            /* nothing more to say: the parent sees exit status 127 */
        }
        _exit(127); /* _exit: no atexit handlers, so the parent's clocks are not reset */
    }
    if (pid > 0)
        child_pid = pid;
    sigprocmask(SIG_SETMASK, &old, NULL);
    close(fds[1]);
    if (pid < 0) {
        eerl_cli_err(CMD, "fork: %s", strerror(errno));
        close(fds[0]);
        *ret_exit = EERL_EXIT_FAIL;
        return -1;
    }
    do
        n = read(fds[0], &err, sizeof(err));
    while (n < 0 && errno == EINTR);
    close(fds[0]);
    if (n == (ssize_t)sizeof(err)) {
        int st;

        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
        child_pid = 0;
        eerl_cli_err(CMD, "cannot run '%s': %s", argv[0], strerror(err));
        *ret_exit = err == ENOENT ? 127 : 126;
        return -1;
    }
    return pid;
}

static void cmd_text(char **argv, char *buf, size_t len)
{
    size_t used = 0;
    int i;

    buf[0] = '\0';
    for (i = 0; argv[i] && used + 1 < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? " " : "", argv[i]);
    if (used >= len && len > 4)
        strcpy(buf + len - 4, "...");
}

static json_t *flags_json(unsigned flags)
{
    char buf[128], *p, *save = NULL;
    json_t *arr = json_array();

    eerl_meter_flags_str(flags, buf, sizeof(buf));
    for (p = strtok_r(buf, ",", &save); p; p = strtok_r(NULL, ",", &save))
        json_array_append_new(arr, json_string(p));
    return arr;
}

static double cpu_seconds(void)
{
    struct rusage ru;

    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

struct report {
    char **argv;
    int status; /* waitpid status */
    double duration_s;
    unsigned interval_ms;
    size_t n_samples;
    const eerl_meter_reading *rd; /* totals */
    const unsigned *gpus;         /* per GPU, rd->n_gpus of each */
    const double *joules, *peak_w;
    const unsigned *gpu_flags;
    char (*uuids)[EERL_DEVICE_UUID_MAX];
    unsigned clock_req, clock_snapped;
    int observe_only;
    double t0, t1; /* the window, CLOCK_MONOTONIC seconds (comparable with other readers) */
    double cpu_s;  /* eerl's own CPU time (sampler included, the command excluded) */
};

static int print_json(FILE *out, const struct report *r)
{
    json_t *o = json_object(), *cmd = json_array(), *gpus = json_array(), *tot = json_object();
    size_t i;
    int rc;

    for (i = 0; r->argv[i]; i++)
        json_array_append_new(cmd, json_string(r->argv[i]));
    json_object_set_new(o, "command", cmd);
    if (WIFEXITED(r->status)) {
        json_object_set_new(o, "exit_status", json_integer(WEXITSTATUS(r->status)));
        json_object_set_new(o, "signal", json_null());
    } else {
        json_object_set_new(o, "exit_status", json_integer(128 + WTERMSIG(r->status)));
        json_object_set_new(o, "signal", json_integer(WTERMSIG(r->status)));
    }
    json_object_set_new(o, "duration_s", json_real(r->duration_s));
    json_object_set_new(o, "interval_ms", json_integer(r->interval_ms));
    json_object_set_new(o, "samples", json_integer((json_int_t)r->n_samples));
    json_object_set_new(o, "window_monotonic_s", json_pack("[f,f]", r->t0, r->t1));
    json_object_set_new(o, "meter_cpu_s", json_real(r->cpu_s));
    if (r->clock_req) {
        json_t *c = json_object();

        json_object_set_new(c, "requested_mhz", json_integer(r->clock_req));
        json_object_set_new(c, "locked_mhz", json_integer(r->clock_snapped));
        json_object_set_new(c, "observe_only", json_boolean(r->observe_only));
        json_object_set_new(o, "clock", c);
    } else {
        json_object_set_new(o, "clock", json_null());
    }
    for (i = 0; i < r->rd->n_gpus; i++) {
        json_t *g = json_object();

        json_object_set_new(g, "index", json_integer(r->gpus[i]));
        json_object_set_new(g, "uuid", json_string(r->uuids[i]));
        json_object_set_new(g, "energy_j", json_real(r->joules[i]));
        json_object_set_new(g, "mean_w",
                            json_real(r->duration_s > 0 ? r->joules[i] / r->duration_s : 0));
        json_object_set_new(g, "peak_w", json_real(r->peak_w[i]));
        json_object_set_new(g, "flags", flags_json(r->gpu_flags[i]));
        json_array_append_new(gpus, g);
    }
    json_object_set_new(o, "gpus", gpus);
    json_object_set_new(tot, "energy_j", json_real(r->rd->total_joules));
    json_object_set_new(tot, "mean_w",
                        json_real(r->duration_s > 0 ? r->rd->total_joules / r->duration_s : 0));
    json_object_set_new(tot, "peak_w", json_real(r->rd->peak_total_w));
    json_object_set_new(tot, "flags", flags_json(r->rd->flags));
    json_object_set_new(o, "total", tot);
    rc = json_dumpf(o, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
    fputc('\n', out);
    json_decref(o);
    return rc;
}

static void print_text(FILE *out, const struct report *r)
{
    char cmd[200], fl[128];
    size_t i;

    cmd_text(r->argv, cmd, sizeof(cmd));
    if (WIFEXITED(r->status))
        fprintf(out, "'%s' exited with status %d after %.3f s", cmd, WEXITSTATUS(r->status),
                r->duration_s);
    else
        fprintf(out, "'%s' was killed by signal %d after %.3f s", cmd, WTERMSIG(r->status),
                r->duration_s);
    fprintf(out, " (%zu samples, every %u ms)\n", r->n_samples, r->interval_ms);
    if (r->clock_req)
        fprintf(out, "SM clock %s %u MHz (requested %u MHz)%s\n",
                r->observe_only ? "would have been locked at" : "locked at", r->clock_snapped,
                r->clock_req, r->observe_only ? ", observe-only: nothing was changed" : "");
    fprintf(out, "%-6s %12s %10s %10s  %s\n", "gpu", "energy_J", "mean_W", "peak_W", "flags");
    for (i = 0; i < r->rd->n_gpus; i++) {
        eerl_meter_flags_str(r->gpu_flags[i], fl, sizeof(fl));
        fprintf(out, "%-6u %12.1f %10.1f %10.1f  %s\n", r->gpus[i], r->joules[i],
                r->duration_s > 0 ? r->joules[i] / r->duration_s : 0, r->peak_w[i],
                fl[0] ? fl : "-");
    }
    eerl_meter_flags_str(r->rd->flags, fl, sizeof(fl));
    fprintf(out, "%-6s %12.1f %10.1f %10.1f  %s\n", "total", r->rd->total_joules,
            r->duration_s > 0 ? r->rd->total_joules / r->duration_s : 0, r->rd->peak_total_w,
            fl[0] ? fl : "-");
}

/* What one run holds, from the parsed options to the report; freed by run_free. */
struct run {
    struct opts o;
    eerl_device *dev;
    eerl_meter *m;
    eerl_actuator *act;
    eerl_meter_reading *rd;
    double *joules, *peak_w;
    unsigned *gpu_flags;
    char (*uuids)[EERL_DEVICE_UUID_MAX];
    struct sigaction old_int, old_term;
    int handlers;
    unsigned snapped;
    double t0, t1;
    int status; /* the command's, from waitpid */
    FILE *report_file;
    char *report_tmp; /* written there, renamed over --output once the report is whole */
};

/* The GPUs to meter (--gpus, checked against the machine, or all of them), their UUIDs, the
 * arrays of the report and the meter. 0, or the exit status. */
static int open_gpus(struct run *r)
{
    unsigned count = 0;
    size_t i, n;
    int e = eerl_device_count(r->dev, &count);

    if (e < 0) {
        eerl_cli_err(CMD, "counting GPUs: %s: %s", eerl_strerror(e),
                     eerl_device_last_error(r->dev));
        return EERL_EXIT_FAIL;
    }
    if (count == 0) {
        eerl_cli_err(CMD, "NVML sees no GPU on this machine");
        return EERL_EXIT_FAIL;
    }
    if (!r->o.have_gpus) {
        r->o.gpus = malloc(count * sizeof(*r->o.gpus));
        if (!r->o.gpus) {
            eerl_cli_err(CMD, "out of memory");
            return EERL_EXIT_FAIL;
        }
        r->o.n_gpus = count;
        for (i = 0; i < r->o.n_gpus; i++)
            r->o.gpus[i] = (unsigned)i;
    }
    n = r->o.n_gpus;
    for (i = 0; i < n; i++)
        if (r->o.gpus[i] >= count) {
            eerl_cli_err(CMD,
                         "--gpus: GPU index %u does not exist (this machine has %u GPU%s: 0-%u)",
                         r->o.gpus[i], count, count == 1 ? "" : "s", count - 1);
            return EERL_EXIT_USAGE;
        }
    r->uuids = calloc(n, sizeof(*r->uuids));
    r->rd = calloc(1, sizeof(*r->rd));
    r->joules = calloc(n, sizeof(*r->joules));
    r->peak_w = calloc(n, sizeof(*r->peak_w));
    r->gpu_flags = calloc(n, sizeof(*r->gpu_flags));
    if (!r->uuids || !r->rd || !r->joules || !r->peak_w || !r->gpu_flags) {
        eerl_cli_err(CMD, "out of memory");
        return EERL_EXIT_FAIL;
    }
    for (i = 0; i < n; i++)
        if (eerl_device_uuid(r->dev, r->o.gpus[i], r->uuids[i], sizeof(r->uuids[i])) < 0)
            snprintf(r->uuids[i], sizeof(r->uuids[i]), "unknown");
    e = eerl_meter_new(r->dev, r->o.gpus, n, (unsigned)r->o.interval_ms, &r->m);
    if (e < 0) {
        eerl_cli_err(CMD, "%s: %s", eerl_strerror(e), eerl_device_last_error(r->dev));
        return EERL_EXIT_FAIL;
    }
    return 0;
}

/* Handlers before any clock is changed, so a signal from here on restores. */
static void install_handlers(struct run *r)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: waitpid must return EINTR so the main loop can restore */
    sigaction(SIGINT, &sa, &r->old_int);
    sigaction(SIGTERM, &sa, &r->old_term);
    r->handlers = 1;
}

/* --clock: every metered GPU locked (or, observe-only, what would be). 0, or the exit status. */
static int lock_clocks(struct run *r)
{
    size_t i;
    int e;

    if (!r->o.clock_mhz)
        return 0;
    e = eerl_actuator_new(r->dev, r->o.observe_only, &r->act);
    if (e < 0) {
        eerl_cli_err(CMD, "%s", eerl_strerror(e));
        return EERL_EXIT_FAIL;
    }
    for (i = 0; i < r->o.n_gpus && e == 0; i++) {
        e = eerl_actuator_snap(r->act, r->o.gpus[i], (unsigned)r->o.clock_mhz, &r->snapped);
        if (e == 0)
            e = eerl_actuator_set(r->act, r->o.gpus[i], (unsigned)r->o.clock_mhz);
    }
    if (e < 0) {
        eerl_cli_err(CMD, "--clock: %s", eerl_actuator_last_error(r->act));
        return e == EERL_ERANGE ? EERL_EXIT_USAGE : EERL_EXIT_FAIL;
    }
    return 0;
}

/* Runs the command between two marks, the sampler running; restores the clocks when it ends (and
 * at once on a signal). 0 and the command's status in r->status, or the exit status. */
static int run_command(struct run *r)
{
    int exit_code = EERL_EXIT_FAIL, e = eerl_meter_tick_now(r->m, &r->t0);
    pid_t pid;

    if (e == 0)
        e = eerl_meter_start(r->m);
    if (e < 0) {
        eerl_cli_err(CMD, "starting the sampler: %s", eerl_strerror(e));
        return EERL_EXIT_FAIL;
    }
    pid = spawn(r->o.argv, &exit_code);
    if (pid < 0)
        return exit_code;
    for (;;) {
        pid_t w = waitpid(pid, &r->status, 0);

        if (w == pid)
            break;
        if (w < 0 && errno != EINTR) {
            eerl_cli_err(CMD, "waitpid: %s", strerror(errno));
            return EERL_EXIT_FAIL;
        }
        if (got_signal && r->act) {
            /* we are going down: give the clocks back now, not when the child gets round to
             * exiting */
            e = eerl_actuator_restore_all();
            if (e < 0)
                eerl_cli_err(CMD, "restoring clocks: %s", eerl_actuator_last_error(r->act));
        }
    }
    child_pid = 0;
    eerl_meter_tick_now(r->m, &r->t1);
    eerl_meter_stop(r->m);
    if (r->act) {
        e = eerl_actuator_restore(r->act);
        if (e < 0)
            eerl_cli_err(CMD, "restoring clocks: %s", eerl_actuator_last_error(r->act));
    }
    return 0;
}

/* The report, on stdout or into --output. Returns exit_code (the command's), or a failure when
 * the energy cannot be read or the report written and the command succeeded. */
static int report(struct run *r, int exit_code)
{
    int e = eerl_meter_energy_each(r->m, r->t0, r->t1, NULL, r->o.n_gpus, r->joules, r->peak_w,
                                   r->gpu_flags, r->rd);
    FILE *out = r->report_file ? r->report_file : stdout;
    struct report rep;

    if (e < 0) {
        eerl_cli_err(CMD, "reading the energy: %s", eerl_strerror(e));
        return exit_code == 0 ? EERL_EXIT_FAIL : exit_code;
    }
    rep = (struct report){.argv = r->o.argv,
                          .status = r->status,
                          .duration_s = r->t1 - r->t0,
                          .interval_ms = (unsigned)r->o.interval_ms,
                          .n_samples = r->rd->n_samples,
                          .rd = r->rd,
                          .gpus = r->o.gpus,
                          .joules = r->joules,
                          .peak_w = r->peak_w,
                          .gpu_flags = r->gpu_flags,
                          .uuids = r->uuids,
                          .clock_req = (unsigned)r->o.clock_mhz,
                          .clock_snapped = r->snapped,
                          .observe_only = r->o.observe_only,
                          .t0 = r->t0,
                          .t1 = r->t1,
                          .cpu_s = cpu_seconds()};
    if (r->o.json)
        print_json(out, &rep);
    else
        print_text(out, &rep);
    r->report_file = NULL;
    if (out != stdout && (fclose(out) != 0 || rename(r->report_tmp, r->o.output) != 0)) {
        eerl_cli_err(CMD, "writing '%s': %s", r->o.output, strerror(errno));
        if (exit_code == 0)
            exit_code = EERL_EXIT_FAIL;
    } else if (out != stdout) {
        free(r->report_tmp);
        r->report_tmp = NULL;
    } else {
        fflush(stdout);
    }
    return exit_code;
}

static void run_free(struct run *r)
{
    if (r->report_file)
        fclose(r->report_file);
    if (r->report_tmp) { /* no whole report: the file keeps what it held */
        unlink(r->report_tmp);
        free(r->report_tmp);
    }
    eerl_meter_free(r->m);
    eerl_actuator_free(r->act); /* restores, if not done yet */
    if (r->handlers) {
        sigaction(SIGINT, &r->old_int, NULL);
        sigaction(SIGTERM, &r->old_term, NULL);
    }
    eerl_device_free(r->dev);
    free(r->uuids);
    free(r->rd);
    free(r->joules);
    free(r->peak_w);
    free(r->gpu_flags);
    free(r->o.gpus);
}

/* Everything before the command starts. 0, or the exit status. */
static int prepare(struct run *r)
{
    int rc = open_gpus(r);

    if (rc)
        return rc;
    install_handlers(r);
    if ((rc = lock_clocks(r)) != 0)
        return rc;
    if (r->o.output) { /* open it now: an unwritable path must not cost a whole run */
        r->report_file = open_report_tmp(r->o.output, &r->report_tmp);
        if (!r->report_file) {
            eerl_cli_err(CMD, "cannot write the report to '%s': %s", r->o.output, strerror(errno));
            return EERL_EXIT_USAGE;
        }
    }
    if (got_signal) /* interrupted during setup: do not start the command */
        return 128 + got_signal;
    return 0;
}

int eerl_cmd_meter(int argc, char **argv)
{
    struct run r;
    int rc;

    memset(&r, 0, sizeof(r));
    rc = parse(argc, argv, &r.o);
    if (rc != 0) {
        free(r.o.gpus);
        return rc > 0 ? EERL_EXIT_OK : EERL_EXIT_USAGE;
    }
    r.dev = eerl_cli_open_devices(CMD);
    if (!r.dev) {
        free(r.o.gpus);
        return EERL_EXIT_FAIL;
    }
    rc = prepare(&r);
    if (rc == 0)
        rc = run_command(&r);
    if (rc == 0)
        rc = report(&r, WIFEXITED(r.status) ? WEXITSTATUS(r.status) : 128 + WTERMSIG(r.status));
    run_free(&r);
    return rc;
}

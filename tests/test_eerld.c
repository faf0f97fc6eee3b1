/* eerld end to end: the daemon binary (next to EERL_BIN) on simulated GPUs (--devices twin:...)
 * and on the stand-in NVML library (whose state file shows what was locked), driven through the
 * client library and raw sockets. What a user relies on: whatever happens to a client (kill,
 * hang, garbage), its GPUs go back to the default and nobody else is disturbed; a killed eerld
 * resets what it left before serving again; policy refusals say why. Tests that need another
 * user run a child as `nobody` and are skipped when not run as root.
 * EERL_TEST_EERLD_MESSAGES sets the per-client message count of the 64-client test (10000). */
#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "eerl/agent.h"
#include "eerl/error.h"
#include "eerl/runtime.h"
#include "device/device_impl.h"
#include "testutil.h"

static char eerld_bin[1024];
static char sock[100], statedir[512], logpath[512];
static int test_no;
static pid_t live_daemon;    /* killed by the next start or the teardown if a test failed */
static rlim_t daemon_nofile; /* if set, the next daemon's descriptor limit */

/* How long a wait for something that must happen may last before the test calls it hung: a
 * guard against hanging, never a speed check (a loaded machine may take long, and passes). */
#define HANG_GUARD_S 120

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A fresh socket path and state dir for one test. */
static void fresh_paths(void)
{
    test_no++;
    snprintf(sock, sizeof(sock), "%s/s%d.sock", tu_tmpdir(), test_no);
    snprintf(statedir, sizeof(statedir), "%s/state%d", tu_tmpdir(), test_no);
    snprintf(logpath, sizeof(logpath), "%s/eerld%d.log", tu_tmpdir(), test_no);
}

static int can_connect(void)
{
    struct sockaddr_un sa;
    int fd = socket(AF_UNIX, SOCK_STREAM, 0), ok;

    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
    ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    close(fd);
    return ok;
}

/* Forks eerld --foreground on sock/statedir with extra arguments (NULL-terminated), its stderr
 * appended to (append) or replacing the log, its stdout discarded. The child dies with the test
 * (an assertion, a sanitizer abort), and takes daemon_nofile as its descriptor limit if set. */
static pid_t spawn_eerld(const char *const *extra, int append)
{
    const char *argv[32];
    int n = 0, i;
    pid_t pid;

    argv[n++] = eerld_bin;
    argv[n++] = "--foreground";
    argv[n++] = "--socket";
    argv[n++] = sock;
    argv[n++] = "--state-dir";
    argv[n++] = statedir;
    for (i = 0; extra && extra[i] && n < 30; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        FILE *f = freopen(logpath, append ? "a" : "w", stderr);
        (void)f;
        f = freopen("/dev/null", "w", stdout);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (daemon_nofile) {
            struct rlimit rl = {daemon_nofile, daemon_nofile};
            setrlimit(RLIMIT_NOFILE, &rl);
        }
        execv(eerld_bin, (char *const *)argv);
        perror("execv eerld");
        _exit(127);
    }
    return pid;
}

/* Starts eerld with extra arguments (NULL-terminated); returns once it accepts connections. */
static pid_t start_eerld(const char *const *extra)
{
    pid_t pid;
    double t0;

    if (live_daemon > 0) {
        kill(live_daemon, SIGKILL);
        waitpid(live_daemon, NULL, 0);
    }
    pid = spawn_eerld(extra, 1);
    t0 = now_s();
    while (!can_connect()) {
        int st;

        if (waitpid(pid, &st, WNOHANG) == pid) {
            char *log = tu_read_file(logpath);
            fail_msg("eerld exited before serving: %s", log ? log : "(no log)");
        }
        if (now_s() - t0 > HANG_GUARD_S) {
            kill(pid, SIGKILL);
            fail_msg("eerld did not start serving within %d s", HANG_GUARD_S);
        }
        sleep_ms(5);
    }
    live_daemon = pid;
    return pid;
}

static int stop_eerld(pid_t pid, int sig)
{
    int st = 0;

    kill(pid, sig);
    waitpid(pid, &st, 0);
    if (pid == live_daemon)
        live_daemon = 0;
    return st;
}

static eerl_agent *connect_ok(const char *name)
{
    eerl_agent *a = NULL;
    char why[512] = "";
    int e = eerl_agent_connect(sock, name, why, sizeof(why), &a);

    if (e < 0)
        fail_msg("connect: %s: %s", eerl_strerror(e), why);
    return a;
}

/* A GPU's status through a fresh connection. */
static struct eerl_agent_gpu_status gpu_status(unsigned gpu)
{
    struct eerl_agent_gpu_status st[16];
    size_t n = 0;
    eerl_agent *a = connect_ok("probe");

    assert_int_equal(eerl_agent_status(a, st, 16, &n), 0);
    assert_true(gpu < n);
    eerl_agent_free(a);
    return st[gpu];
}

/* Waits (up to the hang guard) for GPU gpu's lease state to become want. */
static int wait_leased(unsigned gpu, int want)
{
    double t0 = now_s();

    while (gpu_status(gpu).leased != want && now_s() - t0 < HANG_GUARD_S)
        sleep_ms(5);
    return gpu_status(gpu).leased == want;
}

/* ---- the stand-in NVML state file ---- */

static char nvml_state[512];

static void write_nvml_state(unsigned n_gpus)
{
    char text[8192];
    size_t off = 0;
    unsigned i;

    off += (size_t)snprintf(text + off, sizeof(text) - off,
                            "{\"energy_update_ms\": 100, \"lock_permitted\": true, \"gpus\": [");
    for (i = 0; i < n_gpus; i++)
        off += (size_t)snprintf(
            text + off, sizeof(text) - off,
            "%s{\"name\": \"NVIDIA H100 80GB HBM3\", \"uuid\": "
            "\"GPU-00000000-0000-0000-0000-00000000000%u\", \"memory_clocks_mhz\": [2619], "
            "\"sm_clocks_mhz\": {\"max\": 1980, \"min\": 345, \"step\": 15}, "
            "\"power_mw\": 100000}",
            i ? ", " : "", i);
    snprintf(text + off, sizeof(text) - off, "]}\n");
    snprintf(nvml_state, sizeof(nvml_state), "%s", tu_write_file("nvml.json", text));
    setenv("EERL_FAKE_NVML_STATE", nvml_state, 1);
}

/* locked_max_mhz of gpu in the state file; -1 when null (not locked). */
static int file_locked(unsigned gpu)
{
    json_error_t err;
    json_t *o = json_load_file(nvml_state, 0, &err), *x;
    int v;

    if (!o)
        fail_msg("state file: %s", err.text);
    x = json_object_get(json_array_get(json_object_get(o, "gpus"), gpu), "locked_max_mhz");
    v = json_is_integer(x) ? (int)json_integer_value(x) : -1;
    json_decref(o);
    return v;
}

/* Sets keys of GPU gpu in the stand-in's state file (NULL-terminated key, value pairs; the values
 * are stolen), written whole and renamed into place as the stand-in expects. */
static void edit_gpu_state(unsigned gpu, const char *key, json_t *value, ...)
{
    char tmp[600];
    json_error_t err;
    json_t *o = json_load_file(nvml_state, 0, &err), *g;
    va_list ap;

    assert_non_null(o);
    g = json_array_get(json_object_get(o, "gpus"), gpu);
    assert_non_null(g);
    va_start(ap, value);
    while (key) {
        json_object_set_new(g, key, value);
        key = va_arg(ap, const char *);
        if (key)
            value = va_arg(ap, json_t *);
    }
    va_end(ap);
    snprintf(tmp, sizeof(tmp), "%s.tmp", nvml_state);
    assert_int_equal(json_dump_file(o, tmp, 0), 0);
    assert_int_equal(rename(tmp, nvml_state), 0);
    json_decref(o);
}

static void set_lost(unsigned gpu, int lost)
{
    edit_gpu_state(gpu, "lost", json_boolean(lost), NULL);
}

/* GPU gpu left locked at mhz by someone, as the stand-in's state says. */
static void set_left_locked(unsigned gpu, int mhz)
{
    edit_gpu_state(gpu, "locked_min_mhz", json_integer(mhz), "locked_max_mhz", json_integer(mhz),
                   NULL);
}

/* ---- tests ---- */

/* A client that leases GPU 1 and locks it, then waits (hangs) until killed. */
static pid_t locking_child(unsigned gpu, unsigned mhz, int heartbeat)
{
    int p[2];
    pid_t pid;
    char b;

    assert_int_equal(pipe(p), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        eerl_agent *a = NULL;
        char why[256];

        close(p[0]);
        if (eerl_agent_connect(sock, "child", why, sizeof(why), &a) < 0 ||
            eerl_agent_lease(a, &gpu, 1) < 0 || eerl_agent_set_clocks(a, &gpu, 1, mhz, mhz) < 0)
            _exit(1);
        if (heartbeat)
            eerl_agent_start_heartbeat(a, 50);
        (void)!write(p[1], "r", 1);
        for (;;)
            pause();
    }
    close(p[1]);
    if (read(p[0], &b, 1) != 1)
        fail_msg("the child could not lease and lock GPU %u", gpu);
    close(p[0]);
    return pid;
}

/* Waits (hang guard HANG_GUARD_S) until GPU gpu's lock is gone, polling every poll_ms; returns
 * the seconds since t0. The caller asserts what it expects. */
static double wait_unlocked(unsigned gpu, double t0, unsigned poll_ms)
{
    while (gpu_status(gpu).locked_max_mhz != 0 && now_s() - t0 < HANG_GUARD_S)
        sleep_ms(poll_ms);
    return now_s() - t0;
}

/* Kills a locking_child, stopped or not, and reaps it. */
static void kill_child(pid_t c)
{
    kill(c, SIGKILL);
    kill(c, SIGCONT);
    waitpid(c, NULL, 0);
}

/* With an hour's heartbeat timeout, only the closed socket can have reset the GPU. */
static void test_client_killed(void **state)
{
    static const char *const args[] = {"--devices", "twin:h100x4", "--heartbeat-timeout", "3600000",
                                       NULL};
    pid_t d, c;
    double dt;

    (void)state;
    fresh_paths();
    d = start_eerld(args);
    c = locking_child(1, 1200, 1);
    assert_int_equal(gpu_status(1).locked_max_mhz, 1200);
    assert_int_equal(gpu_status(1).sm_mhz, 1200);
    sleep_ms(300); /* the heartbeat thread keeps it alive meanwhile */
    assert_int_equal(gpu_status(1).locked_max_mhz, 1200);
    kill_child(c); /* its socket is closed now */
    dt = wait_unlocked(1, now_s(), 2);
    print_message("client SIGKILL -> GPU reset after %.1f ms\n", dt * 1000);
    assert_int_equal(gpu_status(1).locked_max_mhz, 0);
    assert_int_equal(gpu_status(1).leased, 0);
    assert_int_equal(gpu_status(1).sm_mhz, 1980);
    assert_int_equal(stop_eerld(d, SIGTERM), 0);
}

static void test_client_hung(void **state)
{
    static const char *const args[] = {"--devices", "twin:h100x4", "--heartbeat-timeout", "400",
                                       NULL};
    pid_t d, c;
    double t0, dt;

    (void)state;
    fresh_paths();
    d = start_eerld(args);
    t0 = now_s();
    c = locking_child(2, 1005, 0); /* no heartbeats: silent after its set */
    assert_int_equal(gpu_status(2).locked_max_mhz, 1005);
    dt = wait_unlocked(2, t0, 5);
    print_message("hung client (timeout 400 ms) -> GPU reset %.0f ms after it connected\n",
                  dt * 1000);
    assert_int_equal(gpu_status(2).locked_max_mhz, 0);
    assert_true(dt >= 0.35); /* not before the timeout (t0 came before the client connected) */
    kill_child(c);
    assert_int_equal(stop_eerld(d, SIGTERM), 0);
}

static void test_restart_after_kill(void **state)
{
    static const char *const args[] = {"--devices", "nvml", NULL};
    char path[600];
    char *journal;
    eerl_agent *a;
    unsigned g = 0;
    pid_t d;

    (void)state;
    fresh_paths();
    write_nvml_state(2);
    d = start_eerld(args);
    a = connect_ok("job");
    assert_int_equal(eerl_agent_lease(a, &g, 1), 0);
    assert_int_equal(eerl_agent_set_clocks(a, &g, 1, 1410, 1410), 0);
    assert_int_equal(file_locked(0), 1410);
    snprintf(path, sizeof(path), "%s/journal.json", statedir);
    journal = tu_read_file(path);
    assert_non_null(journal);
    assert_non_null(strstr(journal, "GPU-00000000-0000-0000-0000-000000000000"));
    free(journal);
    stop_eerld(d, SIGKILL);
    eerl_agent_free(a);
    assert_int_equal(file_locked(0), 1410); /* nobody reset it: the daemon is gone */
    d = start_eerld(args);
    /* Serving now, and before anyone asked: the GPU is back to the governor. */
    assert_int_equal(file_locked(0), -1);
    journal = tu_read_file(path);
    assert_null(strstr(journal, "GPU-00000000-0000-0000-0000-000000000000"));
    free(journal);
    assert_int_equal(stop_eerld(d, SIGTERM), 0);
}

/* A journal eerld cannot read makes it reset every GPU before serving. */
static void test_unreadable_journal(void **state)
{
    static const char *const args[] = {"--devices", "nvml", NULL};
    char path[600];
    FILE *f;
    pid_t d;

    (void)state;
    fresh_paths();
    write_nvml_state(2);
    /* GPU 1 left locked by someone, and a journal torn beyond reading. */
    set_left_locked(1, 1200);
    assert_int_equal(file_locked(1), 1200);
    assert_int_equal(mkdir(statedir, 0700), 0);
    snprintf(path, sizeof(path), "%s/journal.json", statedir);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"v\":1,\"gpus\":[{\"gpu\":0,\"uu", f);
    fclose(f);
    d = start_eerld(args);
    assert_int_equal(file_locked(1), -1);
    assert_int_equal(file_locked(0), -1);
    assert_int_equal(stop_eerld(d, SIGTERM), 0);
}

static void test_sigterm_resets(void **state)
{
    static const char *const args[] = {"--devices", "nvml", NULL};
    unsigned gpus[2] = {0, 1};
    eerl_agent *a;
    pid_t d;
    int st;

    (void)state;
    fresh_paths();
    write_nvml_state(2);
    d = start_eerld(args);
    a = connect_ok("job");
    assert_int_equal(eerl_agent_lease(a, gpus, 2), 0);
    assert_int_equal(eerl_agent_set_clocks(a, gpus, 2, 900, 1500), 0);
    assert_int_equal(file_locked(0), 1500);
    assert_int_equal(file_locked(1), 1500);
    st = stop_eerld(d, SIGTERM);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_int_equal(file_locked(0), -1);
    assert_int_equal(file_locked(1), -1);
    assert_int_equal(eerl_agent_heartbeat(a), EERL_EIO); /* the connection is gone */
    eerl_agent_free(a);
}

static void test_nvml_error_mid_lease(void **state)
{
    static const char *const args[] = {"--devices", "nvml", NULL};
    unsigned gpus[2] = {0, 1}, g2 = 2;
    struct eerl_agent_gpu_status st;
    eerl_agent *a, *b;
    double t0;
    pid_t d;

    (void)state;
    fresh_paths();
    write_nvml_state(3);
    d = start_eerld(args);
    a = connect_ok("job-a");
    b = connect_ok("job-b");
    assert_int_equal(eerl_agent_lease(a, gpus, 2), 0);
    assert_int_equal(eerl_agent_define_pool(a, "gen", gpus, 2, 1980, 1200, 345), 0);
    assert_int_equal(eerl_agent_set_phase(a, "gen", EERL_AGENT_PHASE_TRAIN), 0);
    assert_int_equal(eerl_agent_lease(b, &g2, 1), 0);
    assert_int_equal(eerl_agent_set_clocks(b, &g2, 1, 1410, 1410), 0);

    set_lost(1, 1);
    assert_int_equal(eerl_agent_set_phase(a, "gen", EERL_AGENT_PHASE_IDLE), EERL_EGPULOST);
    assert_non_null(strstr(eerl_agent_last_error(a), "GPU 1"));
    assert_null(strstr(eerl_agent_last_error(a), "GPU 0"));
    assert_int_equal(file_locked(0), 345); /* GPU 0 switched all the same */
    st = gpu_status(1);
    assert_int_equal(st.err, EERL_EGPULOST);
    assert_int_equal(gpu_status(0).err, 0);
    /* The other client's GPU is untouched and it can go on. */
    assert_int_equal(file_locked(2), 1410);
    assert_int_equal(eerl_agent_set_clocks(b, &g2, 1, 1200, 1200), 0);
    assert_int_equal(file_locked(2), 1200);
    /* Release: GPU 0 resets; GPU 1 cannot and stays pending until it is back. */
    assert_int_equal(eerl_agent_release(a, NULL, 0), 0);
    assert_int_equal(file_locked(0), -1);
    set_lost(1, 0);
    t0 = now_s();
    while (file_locked(1) != -1 && now_s() - t0 < HANG_GUARD_S)
        sleep_ms(20);
    assert_int_equal(file_locked(1), -1);
    print_message("lost GPU reset %.0f ms after it came back\n", (now_s() - t0) * 1000);
    assert_int_equal(file_locked(2), 1200);
    eerl_agent_free(a);
    eerl_agent_free(b);
    assert_int_equal(stop_eerld(d, SIGTERM), 0);
}

static void test_second_writer_busy(void **state)
{
    static const char *const args[] = {"--devices", "twin:h200x4", NULL};
    unsigned ga[2] = {0, 1}, gb[2] = {1, 2}, g0 = 0, g2 = 2;
    char want[128];
    eerl_agent *a, *b;
    pid_t d;

    (void)state;
    fresh_paths();
    d = start_eerld(args);
    a = connect_ok("trainer-a");
    b = connect_ok("trainer-b");
    assert_int_equal(eerl_agent_lease(a, ga, 2), 0);
    assert_int_equal(eerl_agent_set_clocks(a, &g0, 1, 1500, 1500), 0);
    assert_int_equal(eerl_agent_lease(b, gb, 2), EERL_EBUSY);
    snprintf(want, sizeof(want), "GPU 1 is leased by uid %u pid %d ('trainer-a')",
             (unsigned)getuid(), (int)getpid());
    if (!strstr(eerl_agent_last_error(b), want))
        fail_msg("busy message '%s' lacks '%s'", eerl_agent_last_error(b), want);
    assert_int_equal(gpu_status(2).leased, 0); /* all or nothing */
    assert_int_equal(eerl_agent_set_clocks(b, &g0, 1, 1200, 1200), EERL_EBUSY);
    assert_int_equal(gpu_status(0).locked_max_mhz, 1500);
    assert_int_equal(eerl_agent_lease(b, &g2, 1), 0);
    assert_int_equal(eerl_agent_set_clocks(b, &g2, 1, 1200, 1200), 0);
    /* Not leased at all: a clear state error. */
    g2 = 3;
    assert_int_equal(eerl_agent_set_clocks(b, &g2, 1, 1200, 1200), EERL_ESTATE);
    assert_non_null(strstr(eerl_agent_last_error(b), "lease it first"));
    g2 = 9;
    assert_int_equal(eerl_agent_lease(b, &g2, 1), EERL_ENODEV);
    assert_non_null(strstr(eerl_agent_last_error(b), "GPU 9 does not exist (4 GPUs: 0-3)"));
    /* Root's reset ends a's lease on GPU 0 and resets it. */
    assert_int_equal(eerl_agent_reset(b, &g0, 1), 0);
    assert_int_equal(gpu_status(0).locked_max_mhz, 0);
    assert_int_equal(gpu_status(0).leased, 0);
    assert_int_equal(eerl_agent_set_clocks(a, &g0, 1, 1500, 1500), EERL_ESTATE);
    assert_int_equal(gpu_status(1).leased, 1); /* a still holds GPU 1 */
    eerl_agent_free(a);
    eerl_agent_free(b);
    assert_int_equal(stop_eerld(d, SIGTERM), 0);
}

/* Runs fn in a child as nobody; the child's exit status is the test's verdict. */
static void as_nobody(void (*fn)(void))
{
    pid_t pid = fork();
    int st = 0;

    assert_true(pid >= 0);
    if (pid == 0) {
        if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0) {
            perror("setuid nobody");
            _exit(3);
        }
        fn();
        _exit(0);
    }
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("the check run as nobody failed (status %d)", st);
}

#define CHILD_CHECK(cond)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "nobody: check failed: %s (last error: %s)\n", #cond,                  \
                    a ? eerl_agent_last_error(a) : "");                                            \
            _exit(1);                                                                              \
        }                                                                                          \
    } while (0)

static void nobody_refused(void)
{
    eerl_agent *a = NULL;
    char why[256];
    unsigned g = 0;
    struct eerl_agent_info info;
    struct eerl_agent_reading r[4];
    size_t n = 0;

    CHILD_CHECK(eerl_agent_connect(sock, "nobody", why, sizeof(why), &a) == 0);
    CHILD_CHECK(eerl_agent_info(a, &info) == 0 && info.uid == 65534 && !info.may_lease);
    CHILD_CHECK(eerl_agent_lease(a, &g, 1) == EERL_ENOPERM);
    CHILD_CHECK(strstr(eerl_agent_last_error(a), "uid 65534 may not lease GPUs") != NULL);
    /* Read-only queries stay open to whoever may reach the socket. */
    CHILD_CHECK(eerl_agent_read(a, NULL, 0, r, 4, &n) == 0 && n == 4 && r[0].err == 0);
    CHILD_CHECK(eerl_agent_reset(a, &g, 1) == EERL_ENOPERM);
    eerl_agent_free(a);
}

static void nobody_floor(void)
{
    eerl_agent *a = NULL;
    char why[256];
    unsigned g = 3;

    CHILD_CHECK(eerl_agent_connect(sock, "nobody", why, sizeof(why), &a) == 0);
    CHILD_CHECK(eerl_agent_lease(a, &g, 1) == 0);
    CHILD_CHECK(eerl_agent_set_clocks(a, &g, 1, 600, 600) == EERL_ERANGE);
    CHILD_CHECK(strstr(eerl_agent_last_error(a), "requested 600 MHz is below GPU 3's floor of "
                                                 "1201 MHz") != NULL);
    /* 1205 is above the floor but snaps down to the supported 1200, which is not. */
    CHILD_CHECK(eerl_agent_set_clocks(a, &g, 1, 1205, 1205) == EERL_ERANGE);
    CHILD_CHECK(strstr(eerl_agent_last_error(a), "snaps down to GPU 3's supported 1200 MHz") !=
                NULL);
    CHILD_CHECK(eerl_agent_set_clocks(a, &g, 1, 1900, 1900) == EERL_ERANGE);
    CHILD_CHECK(strstr(eerl_agent_last_error(a), "ceiling of 1800 MHz") != NULL);
    CHILD_CHECK(eerl_agent_define_pool(a, "p", &g, 1, 1500, 1100, 0) == EERL_ERANGE);
    CHILD_CHECK(strstr(eerl_agent_last_error(a), "train clock") != NULL);
    CHILD_CHECK(eerl_agent_set_clocks(a, &g, 1, 1500, 1500) == 0);
    /* The holder may reset its own GPU. */
    CHILD_CHECK(eerl_agent_reset(a, &g, 1) == 0);
    eerl_agent_free(a);
}

static void nobody_limit(void)
{
    eerl_agent *a = NULL, *b = NULL, *c = NULL;
    char why[256];

    CHILD_CHECK(eerl_agent_connect(sock, "n1", why, sizeof(why), &a) == 0);
    CHILD_CHECK(eerl_agent_connect(sock, "n2", why, sizeof(why), &b) == 0);
    CHILD_CHECK(eerl_agent_connect(sock, "n3", why, sizeof(why), &c) == EERL_EBUSY);
    CHILD_CHECK(strstr(why, "2 from uid 65534 (limit 2)") != NULL);
    eerl_agent_free(a);
    eerl_agent_free(b);
}

static void test_policy(void **state)
{
    const char *policy;
    char pol[600], gname[64];
    struct group *gr = getgrgid(65534);
    const char *args[12];
    double t0;
    pid_t d;

    (void)state;
    if (getuid() != 0)
        skip();
    assert_non_null(gr);
    snprintf(gname, sizeof(gname), "%s", gr->gr_name);
    fresh_paths();
    chmod(tu_tmpdir(), 0755); /* nobody must reach the socket */
    policy = tu_write_file("policy1.conf", "[access]\nusers = daemon\n[limits]\n"
                                           "connections_per_user = 2\n");
    snprintf(pol, sizeof(pol), "%s", policy);
    args[0] = "--devices";
    args[1] = "twin:h100x4";
    args[2] = "--policy";
    args[3] = pol;
    args[4] = "--socket-group";
    args[5] = gname;
    args[6] = NULL;
    d = start_eerld(args);
    as_nobody(nobody_refused);
    as_nobody(nobody_limit);
    /* A new policy on SIGHUP: nobody may lease now, within bounds. */
    tu_write_file("policy1.conf", "[access]\nusers = daemon, nobody\n[clocks]\nfloor_mhz = 900\n"
                                  "[gpu 3]\nfloor_mhz = 1201\nceiling_mhz = 1800\n");
    kill(d, SIGHUP);
    t0 = now_s();
    while (gpu_status(3).floor_mhz != 1201 && now_s() - t0 < HANG_GUARD_S)
        sleep_ms(10);
    assert_int_equal(gpu_status(3).floor_mhz, 1201);
    assert_int_equal(gpu_status(0).floor_mhz, 900);
    as_nobody(nobody_floor);
    assert_int_equal(gpu_status(3).locked_max_mhz, 0);
    /* A broken policy on SIGHUP keeps the previous one. */
    tu_write_file("policy1.conf", "[access]\nuser = nobody\n");
    kill(d, SIGHUP);
    sleep_ms(200);
    assert_int_equal(gpu_status(3).floor_mhz, 1201);
    assert_int_equal(stop_eerld(d, SIGTERM), 0);
}

static void test_bad_policy_refused(void **state)
{
    const char *args[6];
    char pol[600], *log;
    pid_t pid;
    int st;

    (void)state;
    fresh_paths();
    snprintf(pol, sizeof(pol), "%s",
             tu_write_file("bad.conf", "[clocks]\nfloor_mhz = 900\nceling_mhz = 1800\n"));
    args[0] = eerld_bin;
    args[1] = "--foreground";
    args[2] = "--policy";
    args[3] = pol;
    args[4] = NULL;
    pid = fork();
    if (pid == 0) {
        FILE *f = freopen(logpath, "w", stderr);
        (void)f;
        execv(eerld_bin, (char *const *)args);
        _exit(127);
    }
    waitpid(pid, &st, 0);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 1);
    log = tu_read_file(logpath);
    assert_non_null(log);
    if (!strstr(log, "line 3: [clocks] celing_mhz = '1800': unknown key"))
        fail_msg("log lacks the bad line: %s", log);
    free(log);
}

/* ---- raw protocol abuse ---- */

static int raw_connect(void)
{
    struct sockaddr_un sa;
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);

    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return fd;
}

static void raw_send(int fd, const char *buf, size_t n)
{
    while (n) {
        ssize_t w = send(fd, buf, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return; /* the daemon may close early on an oversized message */
        }
        buf += w;
        n -= (size_t)w;
    }
}

static void raw_send_str(int fd, const char *text)
{
    raw_send(fd, text, strlen(text));
}

/* Reads until EOF (the daemon closed) or the hang guard; returns 1 if EOF came. */
static int raw_read_to_eof(int fd, char *buf, size_t cap)
{
    size_t n = 0;
    double t0 = now_s();

    buf[0] = '\0';
    while (now_s() - t0 < HANG_GUARD_S) {
        struct pollfd p = {fd, POLLIN, 0};
        ssize_t r;

        if (poll(&p, 1, 100) <= 0)
            continue;
        r = recv(fd, buf + n, cap - 1 - n, 0);
        if (r <= 0)
            return r == 0 || errno == ECONNRESET;
        n += (size_t)r;
        buf[n] = '\0';
    }
    return 0;
}

static void expect_closed_with(const char *msg, size_t len, const char *want)
{
    char buf[4096];
    int fd = raw_connect();

    raw_send_str(fd, "{\"op\":\"hello\",\"v\":1}\n");
    raw_send(fd, msg, len);
    if (!raw_read_to_eof(fd, buf, sizeof(buf)))
        fail_msg("after '%.60s' the connection stayed open", msg);
    if (!strstr(buf, "\"error\":\"EERL_EPARSE\"") || !strstr(buf, want))
        fail_msg("after '%.60s' the reply '%s' lacks '%s'", msg, buf, want);
    close(fd);
}

static void test_malformed_messages(void **state)
{
    static const char *const args[] = {"--devices", "twin:h100x2", NULL};
    unsigned g = 0;
    char buf[4096], *big;
    eerl_agent *guard;
    int fd;
    pid_t d;

    (void)state;
    fresh_paths();
    d = start_eerld(args);
    guard = connect_ok("guard");
    assert_int_equal(eerl_agent_lease(guard, &g, 1), 0);
    assert_int_equal(eerl_agent_set_clocks(guard, &g, 1, 1200, 1200), 0);

    expect_closed_with("{\"op\":\n", 7, "not JSON");
    expect_closed_with("{\"op\":\"lease\",\"gpus\":[0],\"id\":5,\"x\":1}\n", 39,
                       "unknown key \\\"x\\\"");
    expect_closed_with("{\"op\":\"set\",\"gpus\":[1],\"mhz\":\"fast\"}\n", 37,
                       "must be an integer");
    expect_closed_with("\x01\x02\xff\xfe\n", 5, "not JSON");
    expect_closed_with("null\n", 5, "not JSON");
    expect_closed_with("[1]\n", 4, "must be a JSON object");
    /* Over the limit with no newline: refused once the limit is reached. */
    big = malloc(EERL_AGENT_MSG_MAX + 100);
    assert_non_null(big);
    memset(big, 'a', EERL_AGENT_MSG_MAX + 100);
    expect_closed_with(big, EERL_AGENT_MSG_MAX + 100, "no newline within 65536 bytes");
    /* Exactly at the limit: a valid request padded with spaces is served. */
    fd = raw_connect();
    raw_send_str(fd, "{\"op\":\"hello\",\"v\":1}\n");
    memset(big, ' ', EERL_AGENT_MSG_MAX);
    memcpy(big, "{\"op\":\"heartbeat\",\"id\":77}", 26);
    big[EERL_AGENT_MSG_MAX - 1] = '\n';
    raw_send(fd, big, EERL_AGENT_MSG_MAX);
    shutdown(fd, SHUT_WR);
    raw_read_to_eof(fd, buf, sizeof(buf));
    assert_non_null(strstr(buf, "{\"id\":77,\"ok\":true}"));
    close(fd);
    free(big);
    /* No hello first. */
    fd = raw_connect();
    raw_send_str(fd, "{\"op\":\"read\"}\n");
    assert_true(raw_read_to_eof(fd, buf, sizeof(buf)));
    assert_non_null(strstr(buf, "the first request must be hello"));
    close(fd);
    /* Another protocol version. */
    fd = raw_connect();
    raw_send_str(fd, "{\"op\":\"hello\",\"v\":2}\n");
    assert_true(raw_read_to_eof(fd, buf, sizeof(buf)));
    assert_non_null(strstr(buf, "EERL_EVERSION"));
    close(fd);
    /* Truncated: half a request, then the client goes away. A lease it held is reset. */
    fd = raw_connect();
    raw_send_str(fd, "{\"op\":\"hello\",\"v\":1}\n{\"op\":\"lease\",\"gpus\":[1]}\n"
                     "{\"op\":\"set\",\"gpu");
    assert_true(wait_leased(1, 1));
    close(fd);
    assert_true(wait_leased(1, 0));
    /* A pipelined client: replies in order, one per request. */
    fd = raw_connect();
    raw_send_str(fd, "{\"op\":\"hello\",\"v\":1,\"id\":1}\n{\"op\":\"heartbeat\",\"id\":2}\n"
                     "{\"op\":\"read\",\"gpus\":[1],\"id\":3}\n");
    shutdown(fd, SHUT_WR);
    raw_read_to_eof(fd, buf, sizeof(buf));
    assert_non_null(strstr(buf, "{\"id\":2,\"ok\":true}\n{\"id\":3,\"ok\":true,\"readings\""));
    close(fd);

    /* Through all of that the guard's lease and clock stood. */
    assert_int_equal(eerl_agent_heartbeat(guard), 0);
    assert_int_equal(gpu_status(0).locked_max_mhz, 1200);
    assert_int_equal(gpu_status(0).leased, 1);
    eerl_agent_free(guard);
    assert_int_equal(stop_eerld(d, SIGTERM), 0);
}

/* Device reads (here 150 ms of driver time per energy counter, and a read held for as long as
 * the test needs) run beside the event loop: other clients are served meanwhile, a pipelining
 * client still gets its replies in order, and a client that goes away with a read in flight has
 * its GPUs reset. */
static void test_slow_reads(void **state)
{
    /* An hour's heartbeat timeout: on a loaded machine the burnt read time stretches, and the
     * other client, silent meanwhile, must not be dropped for that. */
    static const char *const args[] = {"--devices", "nvml", "--heartbeat-timeout", "3600000", NULL};
    char buf[8192], text[4096], hold[600], entered[700];
    unsigned g1 = 1;
    double t0;
    eerl_agent *b;
    int fd, i;
    pid_t d;

    (void)state;
    fresh_paths();
    snprintf(hold, sizeof(hold), "%s/hold%d", tu_tmpdir(), test_no);
    snprintf(entered, sizeof(entered), "%s.entered", hold);
    snprintf(
        text, sizeof(text),
        "{\"energy_read_cpu_us\": 150000, \"energy_read_hold_file\": \"%s\", \"gpus\": ["
        "{\"name\": \"NVIDIA H200\", \"uuid\": \"GPU-a\", \"memory_clocks_mhz\": [3201], "
        "\"sm_clocks_mhz\": {\"max\": 1980, \"min\": 345, \"step\": 15}, \"power_mw\": 1000},"
        "{\"name\": \"NVIDIA H200\", \"uuid\": \"GPU-b\", \"memory_clocks_mhz\": [3201], "
        "\"sm_clocks_mhz\": {\"max\": 1980, \"min\": 345, \"step\": 15}, \"power_mw\": 1000}]}",
        hold);
    snprintf(nvml_state, sizeof(nvml_state), "%s", tu_write_file("slow.json", text));
    setenv("EERL_FAKE_NVML_STATE", nvml_state, 1);
    d = start_eerld(args);
    b = connect_ok("other");

    /* A read held in the driver until the other client has been served: whatever the machine's
     * speed, those replies cannot have waited for it. */
    tu_write_file(strrchr(hold, '/') + 1, "");
    fd = raw_connect();
    raw_send_str(fd, "{\"op\":\"hello\",\"v\":1,\"id\":1}\n{\"op\":\"read\",\"id\":2}\n"
                     "{\"op\":\"heartbeat\",\"id\":3}\n");
    t0 = now_s();
    while (access(entered, F_OK) != 0 && now_s() - t0 < HANG_GUARD_S)
        sleep_ms(2);
    if (access(entered, F_OK) != 0) {
        unlink(hold);
        fail_msg("the read never reached the driver");
    }
    for (i = 0; i < 10; i++)
        assert_int_equal(eerl_agent_heartbeat(b), 0);
    assert_int_equal(eerl_agent_lease(b, &g1, 1), 0);
    assert_int_equal(access(hold, F_OK), 0); /* the read is still held */
    unlink(hold);
    /* Kept alive from here on: the probes below queue behind slow reads on a loaded machine. */
    assert_int_equal(eerl_agent_start_heartbeat(b, 200), 0);
    shutdown(fd, SHUT_WR);
    assert_true(raw_read_to_eof(fd, buf, sizeof(buf)));
    if (!strstr(buf, "\"id\":2,\"ok\":true,\"readings\":[{\"gpu\":0,\"energy_mj\"") ||
        !strstr(strstr(buf, "\"id\":2"), "{\"id\":3,\"ok\":true}"))
        fail_msg("replies out of order or wrong: %s", buf);
    close(fd);

    /* Gone with a read in flight: its lease ends, the daemon carries on. */
    fd = raw_connect();
    raw_send_str(fd, "{\"op\":\"hello\",\"v\":1}\n{\"op\":\"lease\",\"gpus\":[0]}\n"
                     "{\"op\":\"read\"}\n");
    sleep_ms(50);
    close(fd);
    assert_true(wait_leased(0, 0));
    if (eerl_agent_heartbeat(b) != 0) {
        char *log = tu_read_file(logpath);
        fail_msg("the other client was dropped; eerld's log: %s", log ? log : "(none)");
    }
    eerl_agent_free(b);
    assert_int_equal(stop_eerld(d, SIGTERM), 0);
}

/* The runtime's path: the clock owner and the device view over a connection. */
static void test_owner_and_device_view(void **state)
{
    static const char *const args[] = {"--devices", "twin:h100x4", NULL};
    eerl_rt_clock_owner owner;
    unsigned gpus[2] = {0, 1}, n = 0, clocks[EERL_DEVICE_CLOCKS_MAX], mhz = 0, g3 = 3;
    size_t nc = 0;
    uint64_t mj0 = 0, mj1 = 0;
    char uuid[EERL_DEVICE_UUID_MAX];
    eerl_device *dev = NULL;
    eerl_agent *a;
    pid_t d;

    (void)state;
    fresh_paths();
    d = start_eerld(args);
    a = connect_ok("runtime");
    assert_int_equal(eerl_agent_clock_owner(a, &owner), 0);
    assert_int_equal(owner.lock(owner.ctx, gpus, 2, 1410), 0); /* leases on the way */
    assert_int_equal(gpu_status(0).locked_max_mhz, 1410);
    assert_int_equal(gpu_status(1).leased, 1);
    assert_int_equal(owner.lock(owner.ctx, gpus, 1, 0), 0); /* governor, lease kept */
    assert_int_equal(gpu_status(0).locked_max_mhz, 0);
    assert_int_equal(gpu_status(0).leased, 1);
    assert_int_equal(owner.lock(owner.ctx, gpus, 2, 99999), EERL_ERANGE);
    assert_non_null(strstr(owner.last_error(owner.ctx), "99999"));

    assert_int_equal(eerl_agent_device(a, &dev), 0);
    assert_string_equal(eerl_device_backend(dev), "eerld");
    assert_int_equal(eerl_device_count(dev, &n), 0);
    assert_int_equal(n, 4);
    assert_int_equal(eerl_device_uuid(dev, 2, uuid, sizeof(uuid)), 0);
    assert_string_equal(uuid, "TWIN-h100-idle-0002");
    assert_int_equal(eerl_device_supported_sm_clocks(dev, 0, clocks, EERL_DEVICE_CLOCKS_MAX, &nc),
                     0);
    assert_int_equal(clocks[0], 1980);
    assert_int_equal(eerl_device_energy_mj(dev, 1, &mj0), 0);
    sleep_ms(150);
    assert_int_equal(eerl_device_energy_mj(dev, 1, &mj1), 0);
    assert_true(mj1 > mj0); /* the idle twin draws power in real time */
    assert_int_equal(eerl_device_sm_clock(dev, 1, &mhz), 0);
    assert_int_equal(mhz, 1410);
    assert_int_equal(eerl_device_lock_sm_clocks(dev, 1, 1200, 1200), 0);
    assert_int_equal(gpu_status(1).locked_max_mhz, 1200);
    /* Not leased: the device call fails and says why. */
    assert_int_equal(eerl_device_lock_sm_clocks(dev, g3, 1200, 1200), EERL_ESTATE);
    assert_non_null(strstr(eerl_device_last_error(dev), "lease it first"));
    assert_int_equal(eerl_device_throttle_reasons(dev, 0, &mj0), EERL_ENOTSUP);
    eerl_device_free(dev);

    assert_int_equal(owner.restore(owner.ctx), 0); /* releases: the daemon resets */
    assert_int_equal(gpu_status(1).locked_max_mhz, 0);
    assert_int_equal(gpu_status(1).leased, 0);
    assert_int_equal(owner.lock(owner.ctx, gpus, 1, 1005), 0); /* leases again */
    assert_int_equal(gpu_status(0).locked_max_mhz, 1005);
    eerl_agent_free(a);
    assert_true(wait_leased(0, 0));
    assert_int_equal(gpu_status(0).locked_max_mhz, 0);
    assert_int_equal(stop_eerld(d, SIGTERM), 0);
}

/* The meter's read of an instant over the device view: every part of every GPU asked, from one
 * request; the simulated GPUs have no clock event reasons or power limit, so those parts say
 * EERL_ENOTSUP (the meter then asks no more), and a bad index fails its own parts only. */
static void test_device_view_reads_an_instant_at_once(void **state)
{
    static const char *const args[] = {"--devices", "twin:h100x4", NULL};
    struct eerl__device_read rd[3];
    eerl_device *dev = NULL;
    eerl_agent *a;
    pid_t d;
    int i;

    (void)state;
    fresh_paths();
    d = start_eerld(args);
    a = connect_ok("meter");
    assert_int_equal(eerl_agent_device(a, &dev), 0);
    memset(rd, 0, sizeof(rd));
    rd[0].gpu = 3;
    rd[1].gpu = 1;
    rd[2].gpu = 7;
    for (i = 0; i < 3; i++)
        rd[i].want = EERL__READ_ENERGY | EERL__READ_POWER_INSTANT | EERL__READ_CLOCK |
                     EERL__READ_REASONS | EERL__READ_LIMIT;
    assert_int_equal(eerl__device_read(dev, rd, 3), 0);
    for (i = 0; i < 2; i++) {
        assert_int_equal(rd[i].energy_r, 0);
        assert_true(rd[i].energy_mj > 0);
        assert_int_equal(rd[i].power_r, 0);
        assert_int_equal(rd[i].power_instant, 0); /* eerld's power is the averaged reading */
        assert_int_equal(rd[i].clock_r, 0);
        assert_int_equal(rd[i].sm_mhz, 1980);
        assert_int_equal(rd[i].reasons_r, EERL_ENOTSUP);
        assert_int_equal(rd[i].limit_r, EERL_ENOTSUP);
    }
    assert_int_equal(rd[2].energy_r, EERL_ENODEV);
    assert_int_equal(rd[2].limit_r, EERL_ENODEV);
    eerl_device_free(dev);
    eerl_agent_free(a);
    assert_int_equal(stop_eerld(d, SIGTERM), 0);
}

/* ---- 64 clients ---- */

struct worker {
    pthread_t t;
    unsigned index, messages, ok, failed;
    char err[256];
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    eerl_agent *a = NULL;
    unsigned i, g = w->index % 8;
    struct eerl_agent_reading r;

    if (eerl_agent_connect(sock, "load", w->err, sizeof(w->err), &a) < 0) {
        w->failed = w->messages;
        return NULL;
    }
    for (i = 0; i < w->messages; i++) {
        int e = i % 2 ? eerl_agent_heartbeat(a) : eerl_agent_read(a, &g, 1, &r, 1, NULL);

        if (e == 0 && (i % 2 || (r.gpu == g && r.err == 0 && r.energy_mj > 0)))
            w->ok++;
        else {
            w->failed++;
            snprintf(w->err, sizeof(w->err), "%s: %s", eerl_strerror(e), eerl_agent_last_error(a));
        }
    }
    eerl_agent_free(a);
    return NULL;
}

static void test_64_clients(void **state)
{
    static const char *const args[] = {"--devices", "twin:h100x8", NULL};
    struct worker w[64];
    const char *env = getenv("EERL_TEST_EERLD_MESSAGES");
    unsigned per = env ? (unsigned)strtoul(env, NULL, 10) : 10000, i, ok = 0, failed = 0;
    double t0, dt;
    pid_t d;

    (void)state;
    if (per == 0)
        per = 10000;
    fresh_paths();
    d = start_eerld(args);
    memset(w, 0, sizeof(w));
    t0 = now_s();
    for (i = 0; i < 64; i++) {
        w[i].index = i;
        w[i].messages = per;
        assert_int_equal(pthread_create(&w[i].t, NULL, worker_main, &w[i]), 0);
    }
    for (i = 0; i < 64; i++) {
        pthread_join(w[i].t, NULL);
        ok += w[i].ok;
        failed += w[i].failed;
        if (w[i].failed)
            print_message("client %u: %u failed: %s\n", i, w[i].failed, w[i].err);
    }
    dt = now_s() - t0;
    print_message("64 clients x %u messages: %u answered correctly, %u failed, %.2f s (%.0f/s)\n",
                  per, ok, failed, dt, ok / dt);
    assert_int_equal(failed, 0);
    assert_int_equal(ok, 64 * per);
    assert_int_equal(stop_eerld(d, SIGTERM), 0);
}

/* ---- issue 19: attacks that must not work, and what must keep holding ---- */

/* Runs eerld --foreground on sock/statedir with extra arguments and expects it to refuse to
 * start: exit 1 within 20 s, its log holding want. */
static void expect_refused_start(const char *const *extra, const char *want)
{
    int st = 0;
    double t0 = now_s();
    char *log;
    pid_t pid = spawn_eerld(extra, 0);

    while (waitpid(pid, &st, WNOHANG) != pid) {
        if (now_s() - t0 > 20) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            fail_msg("eerld did not refuse to start within 20 s (wanted '%s')", want);
        }
        sleep_ms(10);
    }
    log = tu_read_file(logpath);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 1 || !log || !strstr(log, want))
        fail_msg("eerld: status %d, log '%s'; wanted exit 1 and '%s'", st, log ? log : "", want);
    free(log);
}

static char *journal_text(void)
{
    char path[600];

    snprintf(path, sizeof(path), "%s/journal.json", statedir);
    return tu_read_file(path);
}

/* 1: a second eerld on the same socket and state dir (an operator's double start) touches
 * nothing: the GPU stays locked for its holder, the journal keeps naming it, and after the
 * first daemon is killed a restart resets it. */
static void test_second_daemon_refused(void **state)
{
    static const char *const args[] = {"--devices", "nvml", NULL};
    char othersock[128], *j;
    const char *other[] = {"--devices", "nvml", "--socket", othersock, NULL};
    eerl_agent *a;
    unsigned g = 0;
    pid_t d;

    (void)state;
    fresh_paths();
    write_nvml_state(2);
    d = start_eerld(args);
    a = connect_ok("holder");
    assert_int_equal(eerl_agent_lease(a, &g, 1), 0);
    assert_int_equal(eerl_agent_set_clocks(a, &g, 1, 1410, 1410), 0);
    assert_int_equal(file_locked(0), 1410);
    /* Same socket, same state dir. */
    expect_refused_start(args, "holds the state dir");
    assert_int_equal(file_locked(0), 1410);
    j = journal_text();
    assert_non_null(j);
    assert_non_null(strstr(j, "GPU-00000000-0000-0000-0000-000000000000"));
    free(j);
    /* Another socket, same state dir: refused all the same. */
    snprintf(othersock, sizeof(othersock), "%s/other%d.sock", tu_tmpdir(), test_no);
    expect_refused_start(other, "holds the state dir");
    assert_int_equal(file_locked(0), 1410);
    /* The holder goes on, and the journal still names its GPU. */
    assert_int_equal(eerl_agent_set_clocks(a, &g, 1, 1200, 1200), 0);
    assert_int_equal(file_locked(0), 1200);
    assert_int_equal(gpu_status(0).locked_max_mhz, 1200);
    j = journal_text();
    assert_non_null(strstr(j, "GPU-00000000-0000-0000-0000-000000000000"));
    free(j);
    stop_eerld(d, SIGKILL);
    eerl_agent_free(a);
    d = start_eerld(args);
    assert_int_equal(file_locked(0), -1);
    assert_int_equal(stop_eerld(d, SIGTERM), 0);
}

/* A second eerld on the same socket with its own state dir: refused before any GPU is
 * touched, even though its own journal is unreadable (which would reset every GPU). */
static void test_second_daemon_other_state_dir(void **state)
{
    static const char *const args[] = {"--devices", "nvml", NULL};
    char path[600], first[512];
    eerl_agent *a;
    unsigned g = 1;
    pid_t d;

    (void)state;
    fresh_paths();
    write_nvml_state(2);
    d = start_eerld(args);
    a = connect_ok("holder");
    assert_int_equal(eerl_agent_lease(a, &g, 1), 0);
    assert_int_equal(eerl_agent_set_clocks(a, &g, 1, 1500, 1500), 0);
    snprintf(first, sizeof(first), "%s", statedir);
    snprintf(statedir, sizeof(statedir), "%s/state%d-b", tu_tmpdir(), test_no);
    assert_int_equal(mkdir(statedir, 0700), 0);
    snprintf(path, sizeof(path), "%s/journal.json", statedir);
    {
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs("garbage", f);
        fclose(f);
    }
    expect_refused_start(args, "another eerld is serving");
    assert_int_equal(file_locked(1), 1500);
    snprintf(statedir, sizeof(statedir), "%s", first);
    eerl_agent_free(a);
    assert_int_equal(stop_eerld(d, SIGTERM), 0);
}

/* A victim file root owns, and a link to it planted where eerld writes. */
static char *plant_link(const char *dir, const char *name, char *victim, size_t len)
{
    char link[700];
    FILE *f;

    snprintf(victim, len, "%s/victim%d", tu_tmpdir(), test_no);
    f = fopen(victim, "w");
    assert_non_null(f);
    fputs("precious\n", f);
    fclose(f);
    chmod(victim, 0600);
    snprintf(link, sizeof(link), "%s/%s", dir, name);
    assert_int_equal(symlink(victim, link), 0);
    return tu_read_file(victim);
}

static void expect_victim_intact(const char *victim)
{
    char *v = tu_read_file(victim);

    assert_non_null(v);
    if (strcmp(v, "precious\n"))
        fail_msg("eerld overwrote %s through a planted link: now '%.60s'", victim, v);
    free(v);
}

/* 2: a state or metrics dir others may write is refused; a link planted in a safe one is never
 * followed. */
static void test_symlinks_not_followed(void **state)
{
    static const char *const args[] = {"--devices", "twin:h100x2", NULL};
    char victim[600], mdir[600], prom[700], link[700];
    const char *margs[] = {
        "--devices", "twin:h100x2", "--metrics-textfile", prom, "--metrics-interval", "1", NULL};
    struct stat st;
    char *text;
    eerl_agent *a;
    unsigned g = 0;
    double t0;
    pid_t d;

    (void)state;
    /* A state dir every user may write, with a link where the journal's temp file goes. */
    fresh_paths();
    assert_int_equal(mkdir(statedir, 0700), 0);
    chmod(statedir, 0777);
    free(plant_link(statedir, "journal.json.tmp", victim, sizeof(victim)));
    expect_refused_start(args, "is writable by every user (mode 0777)");
    expect_victim_intact(victim);
    /* Group-writable is refused too. */
    chmod(statedir, 0770);
    expect_refused_start(args, "is writable by its group");
    /* A safe state dir with a leftover link there: the link is replaced, not followed. */
    chmod(statedir, 0700);
    d = start_eerld(args);
    a = connect_ok("job");
    assert_int_equal(eerl_agent_lease(a, &g, 1), 0);
    assert_int_equal(eerl_agent_set_clocks(a, &g, 1, 1200, 1200), 0); /* journal written */
    expect_victim_intact(victim);
    snprintf(link, sizeof(link), "%s/journal.json.tmp", statedir);
    assert_int_equal(lstat(link, &st) < 0 && errno == ENOENT, 1);
    eerl_agent_free(a);
    assert_int_equal(stop_eerld(d, SIGTERM), 0);
    /* A journal that is a link is not read: every GPU is reset, the link replaced. */
    snprintf(link, sizeof(link), "%s/journal.json", statedir);
    unlink(link);
    assert_int_equal(symlink(victim, link), 0);
    d = start_eerld(args);
    expect_victim_intact(victim);
    assert_int_equal(lstat(link, &st), 0);
    assert_false(S_ISLNK(st.st_mode));
    assert_int_equal(stop_eerld(d, SIGTERM), 0);

    /* The metrics textfile dir, likewise. */
    fresh_paths();
    snprintf(mdir, sizeof(mdir), "%s/metrics%d", tu_tmpdir(), test_no);
    assert_int_equal(mkdir(mdir, 0755), 0);
    chmod(mdir, 0777);
    snprintf(prom, sizeof(prom), "%s/eerl.prom", mdir);
    free(plant_link(mdir, "eerl.prom.tmp", victim, sizeof(victim)));
    expect_refused_start(margs, "metrics textfile dir");
    expect_victim_intact(victim);
    chmod(mdir, 0755);
    d = start_eerld(margs);
    t0 = now_s();
    while (access(prom, F_OK) < 0 && now_s() - t0 < 20)
        sleep_ms(20);
    text = tu_read_file(prom);
    assert_non_null(text);
    assert_non_null(strstr(text, "eerl_gpu_locked_clock_mhz"));
    free(text);
    expect_victim_intact(victim);
    assert_int_equal(stat(prom, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0644);
    assert_int_equal(stop_eerld(d, SIGTERM), 0);
}

/* 3: a policy file others may write, or that another user owns, is refused at start and on
 * SIGHUP (the old policy kept). */
static void test_policy_file_trust(void **state)
{
    char pol[600];
    const char *args[] = {"--devices", "twin:h100x4", "--policy", pol, NULL};
    double t0;
    pid_t d;

    (void)state;
    fresh_paths();
    snprintf(pol, sizeof(pol), "%s",
             tu_write_file("trust.conf", "[access]\nusers = nobody\n[clocks]\nfloor_mhz = 900\n"));
    chmod(pol, 0666);
    expect_refused_start(args, "is writable by every user (mode 0666)");
    chmod(pol, 0664);
    expect_refused_start(args, "is writable by its group");
    if (getuid() == 0) {
        assert_int_equal(chown(pol, 65534, 65534), 0);
        chmod(pol, 0644);
        expect_refused_start(args, "is owned by uid 65534, not root");
        assert_int_equal(chown(pol, 0, 0), 0);
    }
    chmod(pol, 0644);
    d = start_eerld(args);
    assert_int_equal(gpu_status(0).floor_mhz, 900);
    /* Made world-writable and changed, then SIGHUP: not taken. */
    tu_write_file("trust.conf", "[clocks]\nfloor_mhz = 300\n");
    chmod(pol, 0666);
    kill(d, SIGHUP);
    t0 = now_s();
    while (now_s() - t0 < 20) {
        char *log = tu_read_file(logpath);
        int seen = log && strstr(log, "keeping the previous policy");

        free(log);
        if (seen)
            break;
        sleep_ms(20);
    }
    assert_int_equal(gpu_status(0).floor_mhz, 900);
    assert_int_equal(stop_eerld(d, SIGTERM), 0);
}

/* 4: a tightened policy reaches the sessions that exist. */
static int reload_pipe_up[2], reload_pipe_down[2];

static void child_wait_go(void)
{
    char b;

    if (read(reload_pipe_down[0], &b, 1) != 1)
        _exit(4);
}

static void child_say(char b)
{
    (void)!write(reload_pipe_up[1], &b, 1);
}

static void nobody_reload(void)
{
    eerl_agent *a = NULL;
    char why[256];
    unsigned g = 0;

    CHILD_CHECK(eerl_agent_connect(sock, "reload", why, sizeof(why), &a) == 0);
    eerl_agent_start_heartbeat(a, 100);
    CHILD_CHECK(eerl_agent_lease(a, &g, 1) == 0);
    CHILD_CHECK(eerl_agent_define_pool(a, "p", &g, 1, 1500, 1200, 900) == 0);
    CHILD_CHECK(eerl_agent_set_phase(a, "p", EERL_AGENT_PHASE_IDLE) == 0);
    child_say('1');  /* GPU 0 locked at 900 */
    child_wait_go(); /* the floor is 1500 now */
    CHILD_CHECK(eerl_agent_set_phase(a, "p", EERL_AGENT_PHASE_IDLE) == EERL_ERANGE);
    CHILD_CHECK(strstr(eerl_agent_last_error(a), "below GPU 0's floor of 1500 MHz") != NULL);
    CHILD_CHECK(eerl_agent_set_phase(a, "p", EERL_AGENT_PHASE_GEN) == 0);
    child_say('2');
    child_wait_go(); /* removed from [access] now */
    CHILD_CHECK(eerl_agent_set_clocks(a, &g, 1, 1500, 1500) == EERL_ESTATE);
    CHILD_CHECK(eerl_agent_lease(a, &g, 1) == EERL_ENOPERM);
    eerl_agent_free(a);
}

static void sighup_and_wait(pid_t d, const char *log_want)
{
    double t0 = now_s();
    int seen = 0;

    kill(d, SIGHUP);
    while (!seen && now_s() - t0 < 20) {
        char *log = tu_read_file(logpath);

        seen = log && strstr(log, log_want);
        free(log);
        if (!seen)
            sleep_ms(20);
    }
    if (!seen)
        fail_msg("eerld did not log '%s' within 20 s of SIGHUP", log_want);
}

static void test_reload_reaches_sessions(void **state)
{
    char pol[600], b;
    char gname[64];
    const char *args[] = {"--devices",      "twin:h100x4", "--policy", pol,
                          "--socket-group", gname,         NULL};
    struct group *gr = getgrgid(65534);
    pid_t d, c;
    int st = 0;

    (void)state;
    if (getuid() != 0)
        skip();
    assert_non_null(gr);
    snprintf(gname, sizeof(gname), "%s", gr->gr_name);
    fresh_paths();
    chmod(tu_tmpdir(), 0755);
    snprintf(pol, sizeof(pol), "%s",
             tu_write_file("reload.conf", "[access]\nusers = nobody\n[clocks]\nfloor_mhz = 900\n"));
    d = start_eerld(args);
    assert_int_equal(pipe(reload_pipe_up), 0);
    assert_int_equal(pipe(reload_pipe_down), 0);
    c = fork();
    assert_true(c >= 0);
    if (c == 0) {
        alarm(120); /* never outlives a failed test for long */
        close(reload_pipe_up[0]);
        close(reload_pipe_down[1]);
        if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0)
            _exit(3);
        nobody_reload();
        _exit(0);
    }
    close(reload_pipe_up[1]); /* a child that fails ends the parent's reads */
    close(reload_pipe_down[0]);
    if (read(reload_pipe_up[0], &b, 1) != 1)
        fail_msg("the client run as nobody failed before locking GPU 0");
    assert_int_equal(gpu_status(0).locked_max_mhz, 900);
    /* The floor goes up: the GPU locked below it goes back to the governor, lease kept. */
    tu_write_file("reload.conf", "[access]\nusers = nobody\n[clocks]\nfloor_mhz = 1500\n");
    sighup_and_wait(d, "outside the reloaded policy");
    assert_int_equal(gpu_status(0).locked_max_mhz, 0);
    assert_int_equal(gpu_status(0).leased, 1);
    assert_int_equal(write(reload_pipe_down[1], "g", 1), 1);
    if (read(reload_pipe_up[0], &b, 1) != 1)
        fail_msg("the client run as nobody failed after the floor went up");
    assert_int_equal(gpu_status(0).locked_max_mhz, 1500);
    /* Removed from [access]: the lease ends and the GPU is reset. */
    tu_write_file("reload.conf", "[access]\nusers = daemon\n[clocks]\nfloor_mhz = 1500\n");
    sighup_and_wait(d, "may no longer lease GPUs");
    assert_int_equal(gpu_status(0).leased, 0);
    assert_int_equal(gpu_status(0).locked_max_mhz, 0);
    assert_int_equal(write(reload_pipe_down[1], "g", 1), 1);
    waitpid(c, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("the client run as nobody failed (status %d)", st);
    close(reload_pipe_up[0]);
    close(reload_pipe_down[1]);
    assert_int_equal(stop_eerld(d, SIGTERM), 0);
}

/* A "Key: value" line of /proc/PID/FILE (the files report size 0: read line by line). */
static long proc_field(pid_t pid, const char *file, const char *key)
{
    char path[64], line[256];
    long v = -1;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
    f = fopen(path, "r");
    while (f && fgets(line, sizeof(line), f))
        if (!strncmp(line, key, strlen(key)))
            v = strtol(line + strlen(key), NULL, 10);
    if (f)
        fclose(f);
    if (v < 0)
        fail_msg("no %s in %s", key, path);
    return v;
}

/* Lines in the daemon's log that hold want. */
static unsigned log_count(const char *want)
{
    char *log = tu_read_file(logpath), *p;
    unsigned n = 0;

    for (p = log; p && (p = strstr(p, want)); p += strlen(want))
        n++;
    free(log);
    return n;
}

/* 6: out of descriptors, eerld neither spins nor floods its log, and serves again once
 * connections end. */
static void test_out_of_descriptors(void **state)
{
    static const char *const args[] = {"--devices", "twin:h100x2", NULL};
    int fds[50], i;
    unsigned lines, n_out;
    pid_t d;

    (void)state;
    fresh_paths();
    daemon_nofile = 40;
    d = start_eerld(args);
    daemon_nofile = 0;
    for (i = 0; i < 50; i++) {
        fds[i] = raw_connect();
        raw_send_str(fds[i], "{\"op\":\"hello\",\"v\":1}\n");
    }
    /* The daemon says so once it runs out (however long a loaded machine takes to get there);
     * then a spinning loop would log tens of thousands of lines in the next 1.5 s. */
    for (i = 0; i < 600 && log_count("out of file descriptors") == 0; i++)
        sleep_ms(100);
    sleep_ms(1500);
    lines = log_count("accept");
    print_message("50 connections against 40 descriptors: %u log lines about accept, %u about "
                  "descriptors\n",
                  lines, log_count("out of file descriptors"));
    assert_true(lines <= 2);
    /* Once per time it runs out: on a loaded machine the first clients' heartbeat timeout can
     * free descriptors before the last connects, and the daemon runs out a second time. A loop
     * that spun would say it thousands of times. */
    n_out = log_count("out of file descriptors");
    assert_true(n_out >= 1 && n_out <= 3);
    for (i = 0; i < 50; i++)
        close(fds[i]);
    /* Served again: a probe connects and gets its status. */
    assert_int_equal(gpu_status(1).leased, 0);
    assert_int_equal(stop_eerld(d, SIGTERM), 0);
}

/* Waits up to secs for fd's peer to close it (reading what comes); 1 if it did. */
static int closed_within(int fd, double secs)
{
    char buf[4096];
    double t0 = now_s();

    while (now_s() - t0 < secs) {
        struct pollfd p = {fd, POLLIN, 0};
        ssize_t r;

        if (poll(&p, 1, 100) <= 0)
            continue;
        r = recv(fd, buf, sizeof(buf), 0);
        if (r == 0 || (r < 0 && errno == ECONNRESET))
            return 1;
    }
    return 0;
}

/* 7: a byte a second is not a heartbeat, and a hello is due within the timeout. */
static void test_trickle_is_not_a_heartbeat(void **state)
{
    static const char *const args[] = {"--devices", "twin:h100x2", "--heartbeat-timeout", "1000",
                                       NULL};
    double t0, dt;
    int fd, closed = 0;
    pid_t d;

    (void)state;
    fresh_paths();
    d = start_eerld(args);
    /* Never a complete hello: one byte every 200 ms. */
    fd = raw_connect();
    t0 = now_s();
    while (!closed && now_s() - t0 < 12) {
        raw_send(fd, "{", 1);
        closed = closed_within(fd, 0.2);
    }
    dt = now_s() - t0;
    print_message("a byte every 200 ms without a hello: closed after %.1f s (timeout 1 s)\n", dt);
    assert_true(closed);
    close(fd);
    assert_int_equal(log_count("no hello within"), 1);
    /* After a hello, a line that never ends does not keep it either. */
    fd = raw_connect();
    raw_send_str(fd, "{\"op\":\"hello\",\"v\":1}\n");
    t0 = now_s();
    closed = 0;
    while (!closed && now_s() - t0 < 12) {
        raw_send(fd, " ", 1);
        closed = closed_within(fd, 0.2);
    }
    assert_true(closed);
    close(fd);
    assert_int_equal(stop_eerld(d, SIGTERM), 0);
}

/* 8: peers that pipeline requests and never read cannot grow eerld's memory without bound, and
 * are dropped; others are served meanwhile. */
static void test_unread_replies_bounded(void **state)
{
    static const char *const args[] = {"--devices", "twin:h100x16", "--heartbeat-timeout", "2000",
                                       NULL};
    char req[2048];
    int fds[32], i, k, dropped = 0;
    long rss0, rss1;
    size_t len = 0;
    double t0;
    pid_t d;

    (void)state;
    fresh_paths();
    d = start_eerld(args);
    rss0 = proc_field(d, "status", "VmRSS:");
    for (k = 0; k < 30; k++)
        len += (size_t)snprintf(req + len, sizeof(req) - len, "{\"op\":\"status\"}\n");
    for (i = 0; i < 32; i++) {
        int sz = 1 << 16;

        fds[i] = raw_connect();
        setsockopt(fds[i], SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
        raw_send_str(fds[i], "{\"op\":\"hello\",\"v\":1}\n");
        fcntl(fds[i], F_SETFL, O_NONBLOCK);
    }
    /* 1.5 s of pipelined status requests, as many as the sockets take. */
    t0 = now_s();
    while (now_s() - t0 < 1.5)
        for (i = 0; i < 32; i++)
            (void)!send(fds[i], req, len, MSG_NOSIGNAL);
    rss1 = proc_field(d, "status", "VmHWM:"); /* the peak */
    print_message("32 peers pipelining status (16 GPUs), never reading: eerld RSS %ld kB, peak "
                  "%ld kB\n",
                  rss0, rss1);
    assert_int_equal(gpu_status(0).leased, 0); /* others are served meanwhile */
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    /* Unbounded it grew by up to 4 MiB per peer (131 MB); bounded, by ~100 KiB per peer. The
     * sanitizers' allocators keep freed memory, so the figure means nothing there. */
    assert_true(rss1 - rss0 < 40 * 1024);
#endif
    /* Dropped once their heartbeat timeout passes without a request served. */
    t0 = now_s();
    for (i = 0; i < 32; i++) {
        fcntl(fds[i], F_SETFL, 0);
        while (now_s() - t0 < 30) {
            struct pollfd p = {fds[i], POLLIN, 0};
            char buf[1];

            if (poll(&p, 1, 100) > 0 && (p.revents & (POLLHUP | POLLERR))) {
                dropped++;
                break;
            }
            if (send(fds[i], buf, 0, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno == EPIPE) {
                dropped++;
                break;
            }
            if (log_count("not reading its replies") >= 32) {
                dropped++;
                break;
            }
        }
        close(fds[i]);
    }
    assert_int_equal(dropped, 32);
    assert_true(log_count("not reading its replies") >= 1);
    assert_int_equal(stop_eerld(d, SIGTERM), 0);
}

/* 9: over 64 GPUs, status covers every GPU and replies over 64 KiB arrive. */
static void test_many_gpus(void **state)
{
    static const char *const args[] = {"--devices", "twin:h100x1024", NULL};
    struct eerl_agent_gpu_status *st = calloc(1024, sizeof(*st));
    struct eerl_agent_reading *r = calloc(1024, sizeof(*r));
    size_t n = 0;
    eerl_agent *a;
    eerl_device *dev = NULL;
    unsigned count = 0;
    char uuid[EERL_DEVICE_UUID_MAX];
    pid_t d;

    (void)state;
    assert_non_null(st);
    assert_non_null(r);
    fresh_paths();
    d = start_eerld(args);
    a = connect_ok("many");
    assert_int_equal(eerl_agent_status(a, st, 1024, &n), 0);
    assert_int_equal(n, 1024);
    assert_int_equal(st[1023].gpu, 1023);
    assert_string_equal(st[1023].uuid, "TWIN-h100-idle-1023");
    assert_int_equal(eerl_agent_read(a, NULL, 0, r, 1024, &n), 0);
    assert_int_equal(n, 1024);
    assert_int_equal(r[1023].gpu, 1023);
    assert_int_equal(eerl_agent_device(a, &dev), 0);
    assert_int_equal(eerl_device_count(dev, &count), 0);
    assert_int_equal(count, 1024);
    assert_int_equal(eerl_device_uuid(dev, 1000, uuid, sizeof(uuid)), 0);
    assert_string_equal(uuid, "TWIN-h100-idle-1000");
    eerl_device_free(dev);
    eerl_agent_free(a);
    free(st);
    free(r);
    assert_int_equal(stop_eerld(d, SIGTERM), 0);
}

/* 15: journals eerld cannot trust make it reset every GPU: truncated, corrupt, empty, a uid
 * that is not a number (once read as 0, root), a negative pid, a link. */
static void test_bad_journals_reset_all(void **state)
{
    static const char *const args[] = {"--devices", "nvml", NULL};
    static const char *const bad[] = {
        "{\"v\":1,\"gpus\":[{\"gpu\":0,\"uu",
        "\x89PNG\r\n\x1a\n\x00\x01garbage",
        "",
        "{\"v\":1,\"gpus\":[{\"gpu\":0,\"uuid\":\"GPU-00000000-0000-0000-0000-000000000000\","
        "\"uid\":\"x\",\"pid\":1}]}",
        "{\"v\":1,\"gpus\":[{\"gpu\":0,\"uuid\":\"GPU-00000000-0000-0000-0000-000000000000\","
        "\"uid\":1000,\"pid\":-4}]}",
        "{\"v\":1,\"gpus\":[{\"gpu\":0,\"uuid\":\"GPU-00000000-0000-0000-0000-000000000000\"}]}",
    };
    char path[600];
    size_t k;

    (void)state;
    for (k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        FILE *f;
        pid_t d;
        size_t len = k == 1 ? 18 : strlen(bad[k]);

        fresh_paths();
        write_nvml_state(2);
        /* GPU 1 left locked, and a journal that does not name it (or cannot be read). */
        set_left_locked(1, 1200);
        assert_int_equal(mkdir(statedir, 0700), 0);
        snprintf(path, sizeof(path), "%s/journal.json", statedir);
        f = fopen(path, "w");
        assert_non_null(f);
        assert_int_equal(fwrite(bad[k], 1, len, f), len);
        fclose(f);
        d = start_eerld(args);
        if (file_locked(1) != -1)
            fail_msg("journal %zu ('%.40s'): GPU 1 was not reset", k, bad[k]);
        assert_int_equal(file_locked(0), -1);
        assert_int_equal(stop_eerld(d, SIGTERM), 0);
    }
}

/* What held in the review, kept: a stopped client (SIGSTOP) loses its lease at the heartbeat
 * timeout. */
static void test_stopped_client_expires(void **state)
{
    static const char *const args[] = {"--devices", "twin:h100x4", "--heartbeat-timeout", "500",
                                       NULL};
    pid_t d, c;
    double dt;

    (void)state;
    fresh_paths();
    d = start_eerld(args);
    c = locking_child(1, 1200, 1);
    sleep_ms(800); /* its heartbeats keep it past the timeout */
    assert_int_equal(gpu_status(1).locked_max_mhz, 1200);
    kill(c, SIGSTOP);
    dt = wait_unlocked(1, now_s(), 10);
    print_message("SIGSTOPped client (timeout 500 ms): GPU reset after %.0f ms\n", dt * 1000);
    assert_int_equal(gpu_status(1).locked_max_mhz, 0);
    assert_int_equal(gpu_status(1).leased, 0);
    kill_child(c);
    assert_int_equal(stop_eerld(d, SIGTERM), 0);
}

/* A client cannot claim another uid: the hello grammar has no such key, and the kernel's
 * identity is what counts. */
static void nobody_claims_root(void)
{
    char buf[4096];
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa;
    eerl_agent *a = NULL;

    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
    CHILD_CHECK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    raw_send_str(fd, "{\"op\":\"hello\",\"v\":1,\"uid\":0}\n{\"op\":\"lease\",\"gpus\":[0]}\n");
    CHILD_CHECK(raw_read_to_eof(fd, buf, sizeof(buf)));
    CHILD_CHECK(strstr(buf, "EERL_EPARSE") != NULL && strstr(buf, "uid") != NULL);
    CHILD_CHECK(strstr(buf, "\"ok\":true") == NULL);
    close(fd);
}

static void test_claimed_uid_refused(void **state)
{
    static const char *const args[] = {"--devices", "twin:h100x2", NULL};
    pid_t d;

    (void)state;
    if (getuid() != 0)
        skip();
    fresh_paths();
    chmod(tu_tmpdir(), 0755);
    d = start_eerld(args);
    /* The socket is 0660 root:eerl (or root's alone): open it for this check. */
    chmod(sock, 0666);
    as_nobody(nobody_claims_root);
    assert_int_equal(gpu_status(0).leased, 0);
    assert_int_equal(stop_eerld(d, SIGTERM), 0);
}

/* Malformed input beyond test_malformed_messages, and a 10 MB line: each closes its own
 * connection only. */
static void test_more_malformed(void **state)
{
    static const char *const args[] = {"--devices", "twin:h100x2", NULL};
    static const char *const msgs[] = {
        "{}\n",
        "{\"op\":1}\n",
        "{\"op\":\"nope\"}\n",
        "{\"op\":\"lease\"}\n",
        "{\"op\":\"lease\",\"gpus\":[]}\n",
        "{\"op\":\"lease\",\"gpus\":[-1]}\n",
        "{\"op\":\"lease\",\"gpus\":[99999]}\n",
        "{\"op\":\"lease\",\"gpus\":[0,0]}\n",
        "{\"op\":\"lease\",\"gpus\":\"0\"}\n",
        "{\"op\":\"lease\",\"gpus\":[0.5]}\n",
        "{\"op\":\"set\",\"gpus\":[0],\"mhz\":-5}\n",
        "{\"op\":\"set\",\"gpus\":[0],\"mhz\":1e300}\n",
        "{\"op\":\"set\",\"gpus\":[0],\"min_mhz\":1500,\"max_mhz\":900}\n",
        "{\"op\":\"set\",\"gpus\":[0],\"mhz\":1200,\"min_mhz\":1}\n",
        "{\"op\":\"set\",\"gpus\":[0]}\n",
        "{\"op\":\"pool\",\"pool\":\"\",\"gpus\":[0],\"gen\":1,\"train\":1,\"idle\":1}\n",
        "{\"op\":\"phase\",\"pool\":\"p\",\"phase\":\"warp\"}\n",
        "{\"op\":\"phase\",\"pool\":\"p\"}\n",
        "{\"op\":\"heartbeat\",\"op\":\"heartbeat\"}\n",
        "{\"op\":\"heartbeat\",\"id\":-1}\n",
        "{\"op\":\"heartbeat\",\"id\":\"x\"}\n",
        "{\"op\":\"hello\",\"v\":1}\n", /* a second hello is fine; then: */
        "\"just a string\"\n",
        "{\"op\":\"heartbeat\"\n",
        "\xc3\x28\n",
        "{\"op\":\"heartbeat\",\"x\":{\"y\":[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]}}\n",
    };
    char buf[4096];
    unsigned g = 0;
    eerl_agent *guard;
    size_t k, big = 10u << 20;
    char *huge;
    int fd, closed = 0;
    pid_t d;

    (void)state;
    fresh_paths();
    d = start_eerld(args);
    guard = connect_ok("guard");
    assert_int_equal(eerl_agent_lease(guard, &g, 1), 0);
    assert_int_equal(eerl_agent_set_clocks(guard, &g, 1, 1200, 1200), 0);
    for (k = 0; k < sizeof(msgs) / sizeof(msgs[0]); k++) {
        fd = raw_connect();
        raw_send_str(fd, "{\"op\":\"hello\",\"v\":1}\n");
        raw_send_str(fd, msgs[k]);
        if (k == 21) /* the second hello: answered, the connection stays */
            raw_send_str(fd, "{\"op\":\"x\"}\n");
        if (!raw_read_to_eof(fd, buf, sizeof(buf)))
            fail_msg("after '%s' the connection stayed open", msgs[k]);
        if (!strstr(buf, "EERL_EPARSE"))
            fail_msg("after '%s' no EERL_EPARSE in '%s'", msgs[k], buf);
        close(fd);
        closed++;
    }
    /* 10 MB without a newline. */
    huge = malloc(big);
    assert_non_null(huge);
    memset(huge, '[', big);
    fd = raw_connect();
    raw_send_str(fd, "{\"op\":\"hello\",\"v\":1}\n");
    raw_send(fd, huge, big);
    assert_true(raw_read_to_eof(fd, buf, sizeof(buf)));
    assert_non_null(strstr(buf, "no newline within 65536 bytes"));
    close(fd);
    free(huge);
    print_message("%d malformed messages and a 10 MB line: each closed its connection\n", closed);
    assert_int_equal(eerl_agent_heartbeat(guard), 0);
    assert_int_equal(gpu_status(0).locked_max_mhz, 1200);
    assert_int_equal(gpu_status(0).leased, 1);
    eerl_agent_free(guard);
    assert_int_equal(stop_eerld(d, SIGTERM), 0);
}

/* 500 idle connections: eerld's memory stays bounded, it serves, and they are closed at the
 * heartbeat timeout. */
static void test_idle_connections(void **state)
{
    static const char *const args[] = {"--devices", "twin:h100x2", "--heartbeat-timeout", "3000",
                                       NULL};
    int *fds = calloc(500, sizeof(int)), i, closed = 0;
    long rss0, rss1;
    pid_t d;

    (void)state;
    assert_non_null(fds);
    fresh_paths();
    d = start_eerld(args);
    rss0 = proc_field(d, "status", "VmRSS:");
    for (i = 0; i < 500; i++) {
        fds[i] = raw_connect();
        raw_send_str(fds[i], "{\"op\":\"hello\",\"v\":1}\n");
    }
    assert_int_equal(gpu_status(0).leased, 0);
    rss1 = proc_field(d, "status", "VmHWM:");
    print_message("500 idle connections: eerld RSS %ld kB, peak %ld kB\n", rss0, rss1);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    assert_true(rss1 - rss0 < 64 * 1024);
#endif
    for (i = 0; i < 500; i++) {
        closed += closed_within(fds[i], 20);
        close(fds[i]);
    }
    assert_int_equal(closed, 500);
    free(fds);
    assert_int_equal(stop_eerld(d, SIGTERM), 0);
}

static int setup(void **state)
{
    const char *bin = getenv("EERL_BIN");
    const char *slash;

    (void)state;
    if (!bin) {
        fprintf(stderr, "EERL_BIN must name the eerl binary (eerld sits beside it)\n");
        return -1;
    }
    slash = strrchr(bin, '/');
    snprintf(eerld_bin, sizeof(eerld_bin), "%.*s/eerld", slash ? (int)(slash - bin) : 1,
             slash ? bin : ".");
    if (access(eerld_bin, X_OK) < 0) {
        fprintf(stderr, "%s: %s\n", eerld_bin, strerror(errno));
        return -1;
    }
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (live_daemon > 0) {
        kill(live_daemon, SIGKILL);
        waitpid(live_daemon, NULL, 0);
    }
    tu_cleanup();
    return 0;
}

int main(void)
{
    /* EERL_TEST_FILTER=NAME runs only the tests matching NAME (a cmocka glob). */
    if (getenv("EERL_TEST_FILTER"))
        cmocka_set_test_filter(getenv("EERL_TEST_FILTER"));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_client_killed),
        cmocka_unit_test(test_client_hung),
        cmocka_unit_test(test_restart_after_kill),
        cmocka_unit_test(test_sigterm_resets),
        cmocka_unit_test(test_unreadable_journal),
        cmocka_unit_test(test_nvml_error_mid_lease),
        cmocka_unit_test(test_second_writer_busy),
        cmocka_unit_test(test_policy),
        cmocka_unit_test(test_bad_policy_refused),
        cmocka_unit_test(test_malformed_messages),
        cmocka_unit_test(test_owner_and_device_view),
        cmocka_unit_test(test_device_view_reads_an_instant_at_once),
        cmocka_unit_test(test_slow_reads),
        cmocka_unit_test(test_64_clients),
        cmocka_unit_test(test_second_daemon_refused),
        cmocka_unit_test(test_second_daemon_other_state_dir),
        cmocka_unit_test(test_symlinks_not_followed),
        cmocka_unit_test(test_policy_file_trust),
        cmocka_unit_test(test_reload_reaches_sessions),
        cmocka_unit_test(test_out_of_descriptors),
        cmocka_unit_test(test_trickle_is_not_a_heartbeat),
        cmocka_unit_test(test_unread_replies_bounded),
        cmocka_unit_test(test_many_gpus),
        cmocka_unit_test(test_bad_journals_reset_all),
        cmocka_unit_test(test_stopped_client_expires),
        cmocka_unit_test(test_claimed_uid_refused),
        cmocka_unit_test(test_more_malformed),
        cmocka_unit_test(test_idle_connections),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

/* The eerld client library (src/agent/client.c) where the process around it misbehaves: its
 * wall clock steps, it forks. What a user relies on: a lease is kept by heartbeats whatever the
 * wall clock says, and a forked child never touches, hangs on, or keeps alive its parent's lease.
 * eerld (next to EERL_BIN) serves simulated GPUs.
 *
 * This program defines clock_gettime and send itself, so that they take the place of libc's for
 * every caller in the process (the client library included): clock_gettime moves CLOCK_REALTIME
 * by realtime_shift_s, send counts the heartbeats sent. eerld runs as its own program (exec),
 * with the real clock. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "eerl/agent.h"
#include "eerl/error.h"
#include "testutil.h"

/* A guard against hanging, never a speed check. */
#define HANG_GUARD_S 120

static char eerld_bin[1024];
static char sock[100], statedir[512], logpath[512];
static int test_no;
static pid_t live_daemon, stray_child;

/* ---- the process's clock and sends, as this program's own ---- */

static volatile long realtime_shift_s;
static volatile long heartbeats_sent;

int clock_gettime(clockid_t id, struct timespec *ts)
{
    int r = (int)syscall(SYS_clock_gettime, id, ts);

    if (r == 0 && id == CLOCK_REALTIME)
        ts->tv_sec += __atomic_load_n(&realtime_shift_s, __ATOMIC_RELAXED);
    return r;
}

static int has_heartbeat(const char *p, size_t n)
{
    static const char op[] = "\"heartbeat\"";
    size_t i;

    for (i = 0; i + sizeof(op) - 1 <= n; i++)
        if (!memcmp(p + i, op, sizeof(op) - 1))
            return 1;
    return 0;
}

ssize_t send(int fd, const void *buf, size_t n, int flags)
{
    if (has_heartbeat(buf, n))
        __atomic_add_fetch(&heartbeats_sent, 1, __ATOMIC_RELAXED);
    return (ssize_t)syscall(SYS_sendto, fd, buf, n, flags, NULL, 0);
}

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

/* ---- the daemon ---- */

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

/* Starts eerld on fresh paths with an hour's heartbeat timeout, so only a closed connection (or
 * a heartbeat that never comes, see the test) can end a lease; returns once it serves. */
static void start_eerld(void)
{
    const char *argv[] = {eerld_bin,
                          "--foreground",
                          "--socket",
                          sock,
                          "--state-dir",
                          statedir,
                          "--devices",
                          "twin:h100x4",
                          "--heartbeat-timeout",
                          "3600000",
                          NULL};
    double t0;
    pid_t pid;

    test_no++;
    snprintf(sock, sizeof(sock), "%s/s%d.sock", tu_tmpdir(), test_no);
    snprintf(statedir, sizeof(statedir), "%s/state%d", tu_tmpdir(), test_no);
    snprintf(logpath, sizeof(logpath), "%s/eerld%d.log", tu_tmpdir(), test_no);
    argv[3] = sock;
    argv[5] = statedir;
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        FILE *f = freopen(logpath, "w", stderr);
        (void)f;
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        execv(eerld_bin, (char *const *)argv);
        perror("execv eerld");
        _exit(127);
    }
    live_daemon = pid;
    t0 = now_s();
    while (!can_connect()) {
        if (waitpid(pid, NULL, WNOHANG) == pid) {
            char *log = tu_read_file(logpath);
            live_daemon = 0;
            fail_msg("eerld exited before serving: %s", log ? log : "(no log)");
        }
        if (now_s() - t0 > HANG_GUARD_S)
            fail_msg("eerld did not start serving within %d s", HANG_GUARD_S);
        sleep_ms(5);
    }
}

static void stop_eerld(void)
{
    int st = 0;

    kill(live_daemon, SIGTERM);
    waitpid(live_daemon, &st, 0);
    live_daemon = 0;
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
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

/* GPU gpu's status through a fresh connection. */
static struct eerl_agent_gpu_status gpu_status(unsigned gpu)
{
    struct eerl_agent_gpu_status st[8];
    size_t n = 0;
    eerl_agent *a = connect_ok("probe");

    assert_int_equal(eerl_agent_status(a, st, 8, &n), 0);
    assert_true(gpu < n);
    eerl_agent_free(a);
    return st[gpu];
}

static eerl_agent *lease_and_lock(unsigned gpu, unsigned mhz)
{
    eerl_agent *a = connect_ok("holder");

    assert_int_equal(eerl_agent_lease(a, &gpu, 1), 0);
    assert_int_equal(eerl_agent_set_clocks(a, &gpu, 1, mhz, mhz), 0);
    return a;
}

/* Waits for child c (hang guard); returns its wait status, or fails the test if it hangs. */
static int wait_child(pid_t c)
{
    double t0 = now_s();
    int st = 0;

    while (waitpid(c, &st, WNOHANG) != c) {
        if (now_s() - t0 > HANG_GUARD_S) {
            kill(c, SIGKILL);
            waitpid(c, NULL, 0);
            fail_msg("the forked child did not exit within %d s: it hangs", HANG_GUARD_S);
        }
        sleep_ms(5);
    }
    return st;
}

/* ---- tests ---- */

/* The wall clock an hour ahead (a step, a clock set wrong): the heartbeats still come at their
 * interval, so the lease is kept and the connection still serves. A heartbeat timed on
 * CLOCK_REALTIME would wait an hour, and eerld would reset the GPU. */
static void test_heartbeat_ignores_wall_clock_steps(void **state)
{
    unsigned gpu = 1;
    eerl_agent *a;
    double t0;

    (void)state;
    start_eerld();
    a = lease_and_lock(gpu, 1200);
    __atomic_store_n(&realtime_shift_s, 3600, __ATOMIC_RELAXED);
    __atomic_store_n(&heartbeats_sent, 0, __ATOMIC_RELAXED);
    assert_int_equal(eerl_agent_start_heartbeat(a, 20), 0);
    t0 = now_s();
    while (__atomic_load_n(&heartbeats_sent, __ATOMIC_RELAXED) < 5 && now_s() - t0 < HANG_GUARD_S)
        sleep_ms(5);
    __atomic_store_n(&realtime_shift_s, 0, __ATOMIC_RELAXED);
    if (__atomic_load_n(&heartbeats_sent, __ATOMIC_RELAXED) < 5)
        fail_msg("with the wall clock an hour ahead, %ld heartbeats were sent in %d s",
                 (long)heartbeats_sent, HANG_GUARD_S);
    assert_int_equal(eerl_agent_set_clocks(a, &gpu, 1, 1005, 1005), 0);
    assert_int_equal(gpu_status(gpu).locked_max_mhz, 1005);
    eerl_agent_free(a);
    assert_int_equal(gpu_status(gpu).leased, 0);
    stop_eerld();
}

/* A forked child (a data loader worker, a multiprocessing fork) that uses the connection and
 * then exits normally: its calls are refused, it neither hangs (the heartbeat thread and the
 * mutex's holder are the parent's) nor releases, resets or changes the parent's GPU, and the
 * parent's connection still serves. */
static void test_forked_child_leaves_the_lease_alone(void **state)
{
    unsigned gpu = 1;
    eerl_agent *a;
    pid_t c;
    int st;

    (void)state;
    start_eerld();
    a = lease_and_lock(gpu, 1200);
    assert_int_equal(eerl_agent_start_heartbeat(a, 1), 0);
    c = fork();
    assert_true(c >= 0);
    if (c == 0) {
        int ok = eerl_agent_set_clocks(a, &gpu, 1, 1005, 1005) == EERL_ESTATE &&
                 strstr(eerl_agent_last_error(a), "forked child") &&
                 eerl_agent_release(a, NULL, 0) == EERL_ESTATE &&
                 eerl_agent_reset(a, &gpu, 1) == EERL_ESTATE;

        if (!ok)
            fprintf(stderr, "child: a call was not refused (last error: %s)\n",
                    eerl_agent_last_error(a));
        eerl_agent_free(a);
        exit(ok ? 0 : 1);
    }
    st = wait_child(c);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_int_equal(gpu_status(gpu).locked_max_mhz, 1200);
    assert_int_equal(gpu_status(gpu).leased, 1);
    assert_int_equal(eerl_agent_set_clocks(a, &gpu, 1, 1005, 1005), 0);
    assert_int_equal(gpu_status(gpu).locked_max_mhz, 1005);
    eerl_agent_free(a);
    stop_eerld();
}

/* The holder forks a child that lives on (fork without exec: SOCK_CLOEXEC does not apply), then
 * the holder is killed: eerld sees the connection close and resets the GPU at once, while the
 * child still runs. A child keeping its copy of the socket would keep the lease for the whole
 * heartbeat timeout (an hour here). */
static void test_forked_child_does_not_hold_the_connection(void **state)
{
    unsigned gpu = 2;
    int p[2];
    pid_t holder, child = 0;
    double t0;

    (void)state;
    start_eerld();
    assert_int_equal(pipe(p), 0);
    holder = fork();
    assert_true(holder >= 0);
    if (holder == 0) {
        eerl_agent *a = NULL;
        char why[256];
        pid_t g;

        close(p[0]);
        if (eerl_agent_connect(sock, "holder", why, sizeof(why), &a) < 0 ||
            eerl_agent_lease(a, &gpu, 1) < 0 || eerl_agent_set_clocks(a, &gpu, 1, 1005, 1005) < 0)
            _exit(1);
        g = fork();
        if (g == 0) {
            close(p[1]);
            for (;;)
                pause();
        }
        (void)!write(p[1], &g, sizeof(g));
        for (;;)
            pause();
    }
    close(p[1]);
    if (read(p[0], &child, sizeof(child)) != (ssize_t)sizeof(child) || child <= 0)
        fail_msg("the holder could not lease, lock and fork");
    close(p[0]);
    stray_child = child;
    assert_int_equal(gpu_status(gpu).locked_max_mhz, 1005);
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    t0 = now_s();
    while (gpu_status(gpu).leased && now_s() - t0 < HANG_GUARD_S)
        sleep_ms(5);
    assert_int_equal(kill(child, 0), 0); /* the child still lives */
    assert_int_equal(gpu_status(gpu).leased, 0);
    assert_int_equal(gpu_status(gpu).locked_max_mhz, 0);
    kill(child, SIGKILL);
    stray_child = 0;
    stop_eerld();
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
    if (stray_child > 0)
        kill(stray_child, SIGKILL);
    if (live_daemon > 0) {
        kill(live_daemon, SIGKILL);
        waitpid(live_daemon, NULL, 0);
    }
    tu_cleanup();
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_heartbeat_ignores_wall_clock_steps),
        cmocka_unit_test(test_forked_child_leaves_the_lease_alone),
        cmocka_unit_test(test_forked_child_does_not_hold_the_connection),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

/* eerl lock: leases GPUs from eerld, locks their SM clock, then runs a command (or holds until
 * interrupted), and releases. The lease lives as long as this process: its main loop sends the
 * heartbeats, and if eerl itself is killed the daemon resets the GPUs when the socket closes.
 * If eerld goes away (a heartbeat fails), the lock is gone: said at once; holding, it exits 1;
 * with a command, the command runs on and the exit status is 1 if the command's was 0. The exit
 * status is otherwise the command's (128 + signal if it was killed).
 *
 * Signals, with a command: SIGINT, SIGTERM and SIGHUP sent to eerl lock (a supervisor, kill) are
 * forwarded to the command, which decides when to end; eerl lock then releases and exits with its
 * status. A signal the terminal generated (Ctrl-C) already reached the command, which shares the
 * process group, so it is not sent twice. If eerl lock is killed outright (SIGKILL), the command
 * gets SIGKILL too (PR_SET_PDEATHSIG): it never runs on without the lock it was started under. */
#include <errno.h>
#include <signal.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "eerl/agent.h"
#include "eerl/error.h"
#include "cli.h"

#define CMD "lock"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: eerl lock --gpus LIST --clock MHZ [--socket PATH] [-- CMD [ARGS...]]\n\n"
            "Leases the GPUs from eerld and locks their SM clock at MHZ (snapped down to a\n"
            "supported clock), runs CMD and releases them when it ends; without CMD, holds\n"
            "the lock until interrupted (Ctrl-C, SIGTERM). Exits with CMD's status.\n"
            "SIGINT, SIGTERM and SIGHUP sent to eerl lock are forwarded to CMD; if eerl\n"
            "lock is killed, CMD is killed too.\n\n"
            "options (the same names as eerl meter's):\n"
            "  --gpus LIST     GPU indices like 0,1 or 0-3\n"
            "  --clock MHZ     the SM clock to lock at\n"
            "  --socket PATH   eerld's socket (default: $EERL_SOCKET, else %s)\n"
            "  --help          show this help\n"
            "  (--gpu and --mhz, the earlier names, still work and are deprecated)\n",
            EERL_AGENT_DEFAULT_SOCKET);
}

/* Forks and execs CMD with the caller's signal mask `old`; it dies with us (see the top). */
static pid_t spawn(char **cmdv, const sigset_t *old)
{
    pid_t parent = getpid(), pid = fork();

    if (pid < 0) {
        eerl_cli_err(CMD, "fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        /* Set before the check: if we already died, getppid() has changed and we stop here. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
            _exit(127);
        sigprocmask(SIG_SETMASK, old, NULL);
        execvp(cmdv[0], cmdv);
        fprintf(stderr, "eerl lock: cannot run '%s': %s\n", cmdv[0], strerror(errno));
        _exit(127);
    }
    return pid;
}

/* Heartbeats until the command (pid > 0) exits, or, holding (pid < 0), until a signal ends the
 * hold or eerld is lost. Returns the exit status; *ret_lost is set when a heartbeat failed. */
static int hold(eerl_agent *a, pid_t pid, const sigset_t *mask, const struct timespec *beat,
                unsigned long mhz, int *ret_lost)
{
    int e;

    for (;;) {
        siginfo_t si;
        int status = 0, sig = sigtimedwait(mask, &si, beat);

        if (pid > 0 && waitpid(pid, &status, WNOHANG) == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
            if (pid < 0)
                return EERL_EXIT_OK;
            if (si.si_code != SI_KERNEL) /* sent by a process, not the terminal: pass it on */
                kill(pid, sig);
        }
        if (sig < 0 && errno == EAGAIN && !*ret_lost && (e = eerl_agent_heartbeat(a)) < 0) {
            eerl_cli_err(CMD,
                         "lost eerld: %s; the GPUs are no longer held at %lu MHz (a restarted "
                         "eerld resets them)%s",
                         eerl_agent_last_error(a)[0] ? eerl_agent_last_error(a) : eerl_strerror(e),
                         mhz, pid > 0 ? "; the command runs on without the lock" : "");
            *ret_lost = 1;
            if (pid < 0)
                return EERL_EXIT_FAIL;
        }
    }
}

/* The options; -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, unsigned *gpus, size_t *n, unsigned long *mhz,
                      const char **sock, char ***cmdv)
{
    int k, have_mhz = 0;

    for (k = 1; k < argc; k++) {
        if (!strcmp(argv[k], "--")) {
            *cmdv = argv + k + 1;
            if (!(*cmdv)[0]) {
                eerl_cli_err(CMD, "nothing after '--'; give a command or leave '--' out");
                return EERL_EXIT_USAGE;
            }
            break;
        } else if ((!strcmp(argv[k], "--gpus") || !strcmp(argv[k], "--gpu")) && k + 1 < argc) {
            const char *o = argv[k];
            if (eerl_cli_parse_index_list(CMD, o, argv[++k], gpus, EERL_AGENT_GPUS_MAX, n) < 0)
                return EERL_EXIT_USAGE;
        } else if ((!strcmp(argv[k], "--clock") || !strcmp(argv[k], "--mhz")) && k + 1 < argc) {
            const char *o = argv[k];
            if (eerl_cli_parse_uint(CMD, o, argv[++k], 1, 100000, mhz) < 0)
                return EERL_EXIT_USAGE;
            have_mhz = 1;
        } else if (!strcmp(argv[k], "--socket") && k + 1 < argc) {
            *sock = argv[++k];
        } else if (!strcmp(argv[k], "--help") || !strcmp(argv[k], "-h")) {
            usage(stdout);
            return EERL_EXIT_OK;
        } else {
            eerl_cli_err(CMD,
                         "unknown %s '%s'; valid options: --gpus LIST, --clock MHZ, --socket PATH, "
                         "--help, then -- CMD",
                         argv[k][0] == '-' ? "option" : "argument", argv[k]);
            return EERL_EXIT_USAGE;
        }
    }
    if (!*n || !have_mhz) {
        eerl_cli_err(CMD, "%s is required (see eerl lock --help)", !*n ? "--gpus" : "--clock");
        return EERL_EXIT_USAGE;
    }
    return -1;
}

int eerl_cmd_lock(int argc, char **argv)
{
    unsigned gpus[EERL_AGENT_GPUS_MAX];
    size_t n = 0, i;
    unsigned long mhz = 0;
    const char *sock = NULL;
    char **cmdv = NULL;
    eerl_agent *a;
    struct eerl_agent_gpu_status *st = NULL;
    struct eerl_agent_info info;
    size_t n_st = 0;
    int e, k, ret = EERL_EXIT_FAIL, lost = 0;
    sigset_t mask, old;
    struct timespec beat;
    pid_t pid = -1;

    if ((k = parse_args(argc, argv, gpus, &n, &mhz, &sock, &cmdv)) >= 0)
        return k;
    a = eerl_cli_connect_agent(CMD, sock);
    if (!a)
        return EERL_EXIT_FAIL;
    if ((e = eerl_agent_lease(a, gpus, n)) < 0 ||
        (e = eerl_agent_set_clocks(a, gpus, n, (unsigned)mhz, (unsigned)mhz)) < 0) {
        eerl_cli_err(CMD, "%s", eerl_agent_last_error(a));
        goto out;
    }
    memset(&info, 0, sizeof(info));
    eerl_agent_info(a, &info);
    st = calloc(info.gpus + 1, sizeof(*st));
    if (st && eerl_agent_status(a, st, info.gpus + 1, &n_st) == 0)
        for (i = 0; i < n; i++)
            if (gpus[i] < n_st)
                fprintf(stderr, "eerl lock: GPU %u locked at %u MHz\n", gpus[i],
                        st[gpus[i]].locked_max_mhz);
    /* A heartbeat a third of the daemon's timeout, from this loop, so a lost daemon is seen. */
    k = info.heartbeat_ms ? (int)(info.heartbeat_ms / 3) : 1000;
    if (k < 1)
        k = 1;
    beat.tv_sec = k / 1000;
    beat.tv_nsec = (long)(k % 1000) * 1000000L;
    /* SIGINT, SIGTERM, SIGHUP: forwarded to a command (see the top); without a command they end
     * the hold. Either way we release afterwards. */
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGHUP);
    sigaddset(&mask, SIGCHLD);
    sigprocmask(SIG_BLOCK, &mask, &old);
    if (cmdv) {
        fflush(NULL);
        pid = spawn(cmdv, &old);
        if (pid < 0) {
            sigprocmask(SIG_SETMASK, &old, NULL);
            goto out;
        }
    } else {
        fprintf(stderr, "eerl lock: holding; interrupt (Ctrl-C) or SIGTERM to release\n");
    }
    ret = hold(a, pid, &mask, &beat, mhz, &lost);
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (lost) {
        if (ret == EERL_EXIT_OK)
            ret = EERL_EXIT_FAIL;
        goto out;
    }
    if ((e = eerl_agent_release(a, NULL, 0)) < 0) {
        eerl_cli_err(CMD, "release failed: %s (the daemon resets the GPUs when we disconnect)",
                     eerl_agent_last_error(a));
        if (ret == EERL_EXIT_OK)
            ret = EERL_EXIT_FAIL;
    } else {
        fprintf(stderr, "eerl lock: released; GPUs back to the default governor\n");
    }
out:
    free(st);
    eerl_agent_free(a);
    return ret;
}

/* eerl report: pictures of runs from their traces. One implementation draws them, the Python
 * package's eerl.report (matplotlib); this command finds a Python that has it and hands it the
 * arguments, so `eerl report` from a pip install (pip install 'eerl[report]') needs no system
 * package. The Python is the first of: $EERL_PYTHON; the python3 beside this executable (a
 * virtual environment's bin/, where pip puts the eerl command); python3 on PATH. A candidate
 * counts when it imports eerl.report and matplotlib; when none does, the message says which were
 * tried and what to install. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

#define CMD "report"
#define CANDIDATES 3

/* What the chosen Python runs: the package's main, named as this command. */
static const char RUN[] = "import sys; from eerl.report import main; "
                          "sys.exit(main(sys.argv[1:], prog='eerl report'))";
static const char PROBE[] = "import eerl.report, matplotlib";

/* The python3 in the directory of this executable, if there is one. */
static int beside_self(char *out, size_t len)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    char *slash;

    if (n <= 0)
        return -1;
    self[n] = '\0';
    slash = strrchr(self, '/');
    if (!slash)
        return -1;
    *slash = '\0';
    if (snprintf(out, len, "%s/python3", self) >= (int)len)
        return -1;
    return access(out, X_OK) == 0 ? 0 : -1;
}

/* 1 when python imports eerl.report and matplotlib (its output silenced). */
static int has_report(const char *python)
{
    int status;
    pid_t pid = fork();

    if (pid < 0)
        return 0;
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stdout) || !freopen("/dev/null", "w", stderr))
            _exit(127);
        execlp(python, python, "-c", PROBE, (char *)NULL);
        _exit(127);
    }
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return 0;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* The candidates in order; ret_n of them. */
static void candidates(char cand[CANDIDATES][PATH_MAX + 16], size_t *ret_n)
{
    const char *env = getenv("EERL_PYTHON");
    size_t n = 0;

    if (env && env[0]) {
        snprintf(cand[n++], PATH_MAX + 16, "%s", env);
    } else {
        if (beside_self(cand[n], PATH_MAX + 16) == 0)
            n++;
        snprintf(cand[n++], PATH_MAX + 16, "python3");
    }
    *ret_n = n;
}

int eerl_cmd_report(int argc, char **argv)
{
    char cand[CANDIDATES][PATH_MAX + 16], tried[CANDIDATES * (PATH_MAX + 16)] = "";
    char **args;
    size_t n, i;
    int k;

    candidates(cand, &n);
    for (i = 0; i < n; i++) {
        if (has_report(cand[i]))
            break;
        strcat(tried, i ? ", " : "");
        strcat(tried, cand[i]);
    }
    if (i == n) {
        eerl_cli_err(CMD,
                     "no Python here has the eerl package with matplotlib (tried %s): the "
                     "pictures are drawn by eerl.report; pip install 'eerl[report]' in the "
                     "environment of the eerl command, or name a Python that has both with "
                     "EERL_PYTHON",
                     tried);
        return EERL_EXIT_FAIL;
    }
    args = calloc((size_t)argc + 4, sizeof(*args));
    if (!args) {
        eerl_cli_err(CMD, "out of memory");
        return EERL_EXIT_FAIL;
    }
    args[0] = cand[i];
    args[1] = "-c";
    args[2] = (char *)RUN;
    for (k = 1; k < argc; k++)
        args[k + 2] = argv[k];
    fflush(NULL);
    execvp(cand[i], args);
    eerl_cli_err(CMD, "cannot run %s: %s", cand[i], strerror(errno));
    free(args);
    return EERL_EXIT_FAIL;
}

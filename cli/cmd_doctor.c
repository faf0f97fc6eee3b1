/* eerl doctor: what a user needs to know before the first run on this node, on one screen. The
 * checks are the library's (include/eerl/doctor.h), so `python -m eerl doctor` runs the same
 * ones; this file parses the options and prints them, one line each (ok, warning, error) with
 * what to do, or one JSON object. Exit status 1 when any check is an error: a controlling run
 * would fail. Read-only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "eerl/agent.h"
#include "eerl/doctor.h"
#include "eerl/error.h"
#include "cli.h"

#define CMD "doctor"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: eerl doctor [--json] [--socket PATH]\n\n"
            "Checks what a run on this node needs and says what to do about each finding: the\n"
            "library's version, NVML and the driver, each GPU (UUID, supported SM clocks, current\n"
            "clock), eerld (present, answering, its version, whether its policy lets you lease)\n"
            "and whether a controlling run may lock clocks (root, CAP_SYS_ADMIN, or eerld).\n"
            "Changes nothing. Exit status 1 when any line is an error (docs/doctor.md).\n\n"
            "options:\n"
            "  --json          print one JSON object: {\"ok\", \"errors\", \"warnings\", "
            "\"checks\"}\n"
            "  --socket PATH   check the eerld at PATH (default: $EERL_SOCKET, else %s\n"
            "                  when it exists, as a session chooses)\n"
            "  --help          show this help\n\n"
            "environment:\n"
            "  EERL_NVML_LIBRARY  the NVML library to load (default libnvidia-ml.so.1)\n"
            "  EERL_SOCKET        eerld's socket, as sessions use it\n",
            EERL_AGENT_DEFAULT_SOCKET);
}

static void print_text(const struct eerl_doctor_check *c, size_t n, unsigned errors,
                       unsigned warnings)
{
    int w = 5;
    size_t i;

    for (i = 0; i < n; i++)
        if ((int)strlen(c[i].name) > w)
            w = (int)strlen(c[i].name);
    for (i = 0; i < n; i++) {
        printf("%-7s  %-*s  %s\n", eerl_doctor_level_name(c[i].level), w, c[i].name, c[i].message);
        if (c[i].fix[0])
            printf("%-7s  %-*s  -> %s\n", "", w, "", c[i].fix);
    }
    if (errors)
        printf("\n%u error%s, %u warning%s: a controlling run on this node would fail\n", errors,
               errors == 1 ? "" : "s", warnings, warnings == 1 ? "" : "s");
    else if (warnings)
        printf("\n%u warning%s, no error: runs can start\n", warnings, warnings == 1 ? "" : "s");
    else
        printf("\nall checks ok\n");
}

static json_t *to_json(const struct eerl_doctor_check *c, size_t n, unsigned errors,
                       unsigned warnings)
{
    json_t *arr = json_array();
    size_t i;

    for (i = 0; i < n; i++)
        json_array_append_new(arr, json_pack("{s:s, s:s, s:s, s:s}", "check", c[i].name, "status",
                                             eerl_doctor_level_name(c[i].level), "message",
                                             c[i].message, "fix", c[i].fix));
    return json_pack("{s:b, s:I, s:I, s:o}", "ok", errors == 0, "errors", (json_int_t)errors,
                     "warnings", (json_int_t)warnings, "checks", arr);
}

int eerl_cmd_doctor(int argc, char **argv)
{
    struct eerl_doctor_check *checks;
    const char *sock = NULL;
    unsigned errors = 0, warnings = 0;
    size_t n = 0, i;
    int json = 0, a, e;

    for (a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--json")) {
            json = 1;
        } else if (!strcmp(argv[a], "--socket")) {
            if (a + 1 >= argc || !argv[a + 1][0]) {
                eerl_cli_err(CMD, "--socket needs the path of eerld's socket");
                return EERL_EXIT_USAGE;
            }
            sock = argv[++a];
        } else if (!strcmp(argv[a], "--help") || !strcmp(argv[a], "-h")) {
            usage(stdout);
            return EERL_EXIT_OK;
        } else {
            eerl_cli_err(CMD, "unknown %s '%s'; valid options: --json, --socket PATH, --help",
                         argv[a][0] == '-' ? "option" : "argument", argv[a]);
            return EERL_EXIT_USAGE;
        }
    }
    checks = calloc(EERL_DOCTOR_CHECKS_MAX, sizeof(*checks));
    if (!checks) {
        eerl_cli_err(CMD, "%s", eerl_strerror(EERL_ENOMEM));
        return EERL_EXIT_FAIL;
    }
    e = eerl_doctor_run(sock, checks, EERL_DOCTOR_CHECKS_MAX, &n);
    if (e < 0 && e != EERL_EOVERFLOW) {
        eerl_cli_err(CMD, "running the checks failed: %s", eerl_strerror(e));
        free(checks);
        return EERL_EXIT_FAIL;
    }
    for (i = 0; i < n; i++) {
        errors += checks[i].level == EERL_DOCTOR_ERROR;
        warnings += checks[i].level == EERL_DOCTOR_WARNING;
    }
    if (json)
        eerl_cli_print_json(to_json(checks, n, errors, warnings));
    else
        print_text(checks, n, errors, warnings);
    if (e == EERL_EOVERFLOW)
        eerl_cli_err(CMD, "more than %d checks: the rest are not shown", EERL_DOCTOR_CHECKS_MAX);
    free(checks);
    return errors ? EERL_EXIT_FAIL : EERL_EXIT_OK;
}

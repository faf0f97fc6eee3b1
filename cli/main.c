/* Entry point of the eerl command: picks the subcommand from argv[1]. Owns nothing else. */
#include <stdio.h>
#include <string.h>

#include "eerl/version.h"
#include "cli.h"

struct cmd {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv);
};

static const struct cmd cmds[] = {
    {"devices", "list GPUs: index, UUID, name, clock range, clock, power, energy",
     eerl_cmd_devices},
    {"doctor", "check this node before a first run: driver, GPUs, clocks, eerld, permission",
     eerl_cmd_doctor},
    {"lock", "lease GPUs from eerld, lock their clock, run a command, release", eerl_cmd_lock},
    {"meter", "run a command and report the GPU energy it used", eerl_cmd_meter},
    {"reset", "return GPUs to the default clock governor through eerld", eerl_cmd_reset},
    {"replay", "feed a recorded trace to the controller and print its decisions", eerl_cmd_replay},
    {"status", "GPUs eerld serves: clocks, power, locks, lease holders", eerl_cmd_status},
    {"sweep", "run fixed clock pairs against the governor on the simulated cluster",
     eerl_cmd_sweep},
    {"sim", "governor and controller runs on the simulated cluster: savings, oracle, capture",
     eerl_cmd_sim},
    {"analyze", "matched-seed comparison of governor and controller traces", eerl_cmd_analyze},
    {"report", "plot traces: clocks per update, changes vs governor, energy per token",
     eerl_cmd_report},
};

static void usage(FILE *out)
{
    size_t i;

    fprintf(out, "usage: eerl <command> [options]\n\n"
                 "eerl picks GPU clocks for RL post-training of language models.\n\ncommands:\n");
    for (i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
        fprintf(out, "  %-10s %s\n", cmds[i].name, cmds[i].summary);
    fprintf(out, "\n'eerl <command> --help' describes each command. 'eerl --version' prints the "
                 "version.\n");
}

int main(int argc, char **argv)
{
    size_t i;

    if (argc < 2) {
        usage(stderr);
        return EERL_EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return EERL_EXIT_OK;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("eerl %s\n", eerl_version_string());
        return EERL_EXIT_OK;
    }
    for (i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
        if (!strcmp(argv[1], cmds[i].name))
            return cmds[i].run(argc - 1, argv + 1);
    fprintf(stderr, "eerl: unknown command '%s'; valid commands:", argv[1]);
    for (i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
        fprintf(stderr, " %s", cmds[i].name);
    fprintf(stderr, "\n");
    return EERL_EXIT_USAGE;
}

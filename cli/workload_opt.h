/* The workload drift options `eerl sim` takes (docs/twin.md, "Workload drift scenarios"):
 * --workload NAME and each scenario's parameters. Parsed here so the command that takes them
 * needs two calls, one per option and one to resolve them against the run's length. */
#ifndef EERL_CLI_WORKLOAD_OPT_H
#define EERL_CLI_WORKLOAD_OPT_H

#include "eerl/tools/twin.h"

struct eerl_cli_workload {
    const char *name; /* NULL: steady */
    double growth, collapse, collapse_tau, step_factor;
    unsigned long step_at;
    const char *given[5]; /* the scenario options given, by their names (NULL: not given) */
};

#define EERL_CLI_WORKLOAD_USAGE                                                                    \
    "  --workload: how response lengths move over the run: steady (default: the preset's\n"        \
    "              fitted drift), growing (--growth 2.5: the median x2.5 over the run),\n"         \
    "              collapsing (--collapse 0.4 --collapse-tau 12: the median falls to x0.4,\n"      \
    "              time constant 12 updates, as an H200 run did), step (--step-at N\n"             \
    "              --step-factor 2: a dataset switch at update N, default the run's middle)\n"

/* 1 when opt is a workload option (its value, val, parsed into w), 0 when it is not one, -1
 * after printing an error naming the bad value. */
int eerl_cli_workload_opt(const char *cmd, const char *opt, const char *val,
                          struct eerl_cli_workload *w);
/* The scenario for a run of `updates` updates; -1 after printing an error (an unknown name, or
 * an option of another scenario). */
int eerl_cli_workload_resolve(const char *cmd, const struct eerl_cli_workload *w,
                              unsigned long updates, struct eerl_twin_scenario *ret);
/* "growing x2.5 over updates 1-1000" and the like, for a heading. */
const char *eerl_cli_workload_desc(const struct eerl_twin_scenario *s, char *buf, size_t len);

#endif

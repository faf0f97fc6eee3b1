/* Workload drift options: see workload_opt.h. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "eerl/tools/twin.h"
#include "workload_opt.h"

static const char *const opts[5] = {"--growth", "--collapse", "--collapse-tau", "--step-at",
                                    "--step-factor"};
/* The scenario each option belongs to. */
static const int owner[5] = {EERL_TWIN_SCENARIO_GROWING, EERL_TWIN_SCENARIO_COLLAPSING,
                             EERL_TWIN_SCENARIO_COLLAPSING, EERL_TWIN_SCENARIO_STEP,
                             EERL_TWIN_SCENARIO_STEP};

int eerl_cli_workload_opt(const char *cmd, const char *opt, const char *val,
                          struct eerl_cli_workload *w)
{
    int i, e = 0;

    if (!strcmp(opt, "--workload")) {
        if (!val) {
            eerl_cli_err(cmd, "option '--workload' needs a value (%s)", eerl_twin_scenario_names());
            return -1;
        }
        w->name = val;
        return 1;
    }
    for (i = 0; i < 5; i++)
        if (!strcmp(opt, opts[i]))
            break;
    if (i == 5)
        return 0;
    if (!val) {
        eerl_cli_err(cmd, "option '%s' needs a value; see eerl %s --help", opt, cmd);
        return -1;
    }
    switch (i) {
    case 0:
        e = eerl_cli_parse_double(cmd, "--growth", val, 0.01, 100, &w->growth);
        break;
    case 1:
        e = eerl_cli_parse_double(cmd, "--collapse", val, 0.01, 100, &w->collapse);
        break;
    case 2:
        e = eerl_cli_parse_double(cmd, "--collapse-tau", val, 0.1, 1e6, &w->collapse_tau);
        break;
    case 3:
        e = eerl_cli_parse_uint(cmd, "--step-at", val, 1, 100000, &w->step_at);
        break;
    default:
        e = eerl_cli_parse_double(cmd, "--step-factor", val, 0.01, 100, &w->step_factor);
        break;
    }
    if (e < 0)
        return -1;
    w->given[i] = opts[i];
    return 1;
}

int eerl_cli_workload_resolve(const char *cmd, const struct eerl_cli_workload *w,
                              unsigned long updates, struct eerl_twin_scenario *ret)
{
    struct eerl_twin_scenario s;
    int kind = EERL_TWIN_SCENARIO_STEADY, i;

    if (w->name && eerl_twin_scenario_parse(w->name, &kind) < 0) {
        eerl_cli_err(cmd, "unknown workload scenario '%s'; valid: %s", w->name,
                     eerl_twin_scenario_names());
        return -1;
    }
    for (i = 0; i < 5; i++)
        if (w->given[i] && owner[i] != kind) {
            eerl_cli_err(cmd, "%s belongs to --workload %s, not to --workload %s", w->given[i],
                         eerl_twin_scenario_name(owner[i]), eerl_twin_scenario_name(kind));
            return -1;
        }
    eerl_twin_scenario_default(kind, (unsigned)updates, &s);
    if (w->given[0])
        s.factor = w->growth;
    if (w->given[1])
        s.factor = w->collapse;
    if (w->given[2])
        s.tau = w->collapse_tau;
    if (w->given[3]) {
        /* 1-based, as the controller and the traces number updates. */
        if (w->step_at > updates) {
            eerl_cli_err(cmd,
                         "--step-at %lu is beyond the run's %lu updates: the switch would never "
                         "happen",
                         w->step_at, updates);
            return -1;
        }
        s.at = (unsigned)w->step_at - 1;
    }
    if (w->given[4])
        s.factor = w->step_factor;
    *ret = s;
    return 0;
}

const char *eerl_cli_workload_desc(const struct eerl_twin_scenario *s, char *buf, size_t len)
{
    switch (s->kind) {
    case EERL_TWIN_SCENARIO_GROWING:
        snprintf(buf, len, "growing (median x%g over updates 1-%u)", s->factor, s->span);
        break;
    case EERL_TWIN_SCENARIO_COLLAPSING:
        snprintf(buf, len, "collapsing (median to x%g, spread to x%g, time constant %g updates)",
                 s->factor, s->spread, s->tau);
        break;
    case EERL_TWIN_SCENARIO_STEP:
        snprintf(buf, len, "step (median x%g from update %u)", s->factor, s->at + 1);
        break;
    default:
        snprintf(buf, len, "steady (the preset's drift)");
        break;
    }
    return buf;
}

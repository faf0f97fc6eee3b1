/* `eerl analyze TRACE` on one trace: the run's own estimate of what eerl saved (eerl_an_estimate,
 * eerl/tools/analysis.h), in text or as the "estimate" object of --json. A trace written before
 * the estimate existed is judged the same way, its per-update predictions recomputed and its
 * calibration replayed to say whether the work explains the time, as a session would have said
 * it. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "eerl/error.h"
#include "cli.h"
#include "eerl/tools/analysis.h"
#include "eerl/tools/trace.h"

#define CMD "analyze"

static void print_text(const char *path, const char *role, const eerl_estimate *e,
                       const struct eerl_an_est *a)
{
    int gov = !strcmp(role, "governor");

    printf("eerl analyze: %s (%s run): what eerl saved, estimated from this trace alone\n", path,
           gov ? "observe-only" : role);
    printf("  %u updates counted from update %u: %u of the calibration (at the governor), %u "
           "judged against the governor predicted from the governor updates before each%s\n",
           e->updates, a->first_update, e->calibration_updates, e->judged_updates,
           a->recomputed ? " (recomputed: the trace does not carry them)" : "");
    if (!e->judged) {
        printf("  cannot be judged: %s\n", e->why);
        if (isfinite(e->saving_pct))
            printf("  the saving lies somewhere in [%.2f%%, %.2f%%], the throughput change in "
                   "[%.2f%%, %.2f%%] (90%%)\n",
                   e->saving_ci_pct[0], e->saving_ci_pct[1], e->throughput_ci_pct[0],
                   e->throughput_ci_pct[1]);
        return;
    }
    printf("  saving (energy per valid token)   %7.2f%%   90%% interval [%.2f%%, %.2f%%]\n",
           e->saving_pct, e->saving_ci_pct[0], e->saving_ci_pct[1]);
    printf("  throughput change                 %7.2f%%   90%% interval [%.2f%%, %.2f%%]\n",
           e->throughput_change_pct, e->throughput_ci_pct[0], e->throughput_ci_pct[1]);
    printf("  energy used                       %.4g MJ (%.3f kWh)\n", e->energy_j / 1e6,
           e->energy_j / 3.6e6);
    printf("  energy saved                      %.4g MJ (%.3f kWh), 90%% interval [%.4g, %.4g] "
           "MJ\n",
           e->saved_j / 1e6, e->saved_j / 3.6e6, e->saved_ci_j[0] / 1e6, e->saved_ci_j[1] / 1e6);
    if (gov)
        printf("  self-check (observe-only: no clock was changed, so the estimate should read 0): "
               "0 is %s the saving's interval\n",
               e->saving_ci_pct[0] <= 0 && e->saving_ci_pct[1] >= 0 ? "inside" : "OUTSIDE");
}

int eerl_cli_analyze_estimate(const char *path, const char *role, int json)
{
    struct eerl_an_est a;
    const eerl_estimate *e = &a.estimate;
    char why[1024];
    int err = eerl_an_estimate(path, &a, why, sizeof(why));

    if (err < 0) {
        eerl_cli_err(CMD, "%s", why);
        return EERL_EXIT_FAIL;
    }
    if (json) {
        json_t *o = json_object();

        json_object_set_new(o, "trace", json_string(path));
        json_object_set_new(o, "role", json_string(role));
        json_object_set_new(o, "recomputed", json_boolean(a.recomputed > 0));
        json_object_set_new(o, "estimate", eerl_trace_estimate_json(e));
        eerl_cli_print_json(o);
    } else {
        print_text(path, role, e, &a);
    }
    return EERL_EXIT_OK;
}

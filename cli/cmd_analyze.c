/* eerl analyze: the paper's comparisons over traces of real or simulated runs. Traces are paired
 * by seed (the "run" line's seed and role; `eerl sim --trace` writes them): matched-seed geometric
 * means over the whole run and before/after the lock (Appendix A, Tables 4-5), and the
 * workload-normalized comparison against a governor model fitted on the pooled governor runs
 * (Appendix E). The figures come from src/runtime/analysis.c, the code `eerl sim` prints from. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "eerl/error.h"
#include "cli.h"
#include "runtime/analysis.h"

#define CMD "analyze"
#define TRACES_MAX 512

static void usage(FILE *out)
{
    fprintf(out,
            "usage: eerl analyze [--json] TRACE...\n\n"
            "Compares controller traces with governor traces of the same seed (the trace's run\n"
            "line names its role and seed; a trace written in observe-only mode is a governor\n"
            "run). Prints, over updates 2 and later, matched-seed geometric means of the energy\n"
            "per valid token saving and the throughput change over the whole run, before and\n"
            "after the lock, and the workload-normalized comparison of the paper's Appendix E\n"
            "(least squares governor model on the pooled governor runs, ratios of sums, the\n"
            "governors' own spread). Example: eerl analyze runs/*.jsonl\n");
}

int eerl_cmd_analyze(int argc, char **argv)
{
    struct eerl__an_series *s = NULL;
    const struct eerl__an_series *gs[EERL__AN_SEEDS_MAX], *cs[EERL__AN_SEEDS_MAX];
    const struct eerl__an_series *allg[TRACES_MAX], *allc[TRACES_MAX];
    const char *paths[TRACES_MAX];
    struct eerl__an_result *res = NULL;
    size_t n = 0, i, j, np = 0, ng = 0, nc = 0;
    int json = 0, rc = EERL_EXIT_USAGE, e;
    char why[1024], set[64];

    for (i = 1; i < (size_t)argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return EERL_EXIT_OK;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            eerl_cli_err(CMD, "unknown option '%s'; see eerl analyze --help", argv[i]);
            return EERL_EXIT_USAGE;
        } else {
            if (n >= TRACES_MAX) {
                eerl_cli_err(CMD, "more than %d traces", TRACES_MAX);
                return EERL_EXIT_USAGE;
            }
            paths[n++] = argv[i];
        }
    }
    if (n == 0) {
        eerl_cli_err(CMD, "no traces given; see eerl analyze --help");
        return EERL_EXIT_USAGE;
    }
    rc = EERL_EXIT_FAIL;
    s = calloc(n, sizeof(*s));
    res = calloc(1, sizeof(*res));
    if (!s || !res) {
        eerl_cli_err(CMD, "out of memory");
        goto out;
    }
    for (i = 0; i < n; i++) {
        e = eerl__an_load_trace(paths[i], &s[i], why, sizeof(why));
        if (e < 0) {
            eerl_cli_err(CMD, "%s", why);
            goto out;
        }
        if (s[i].n == 0) {
            eerl_cli_err(CMD, "%s has no update lines", paths[i]);
            goto out;
        }
        if (i > 0 && s[i].mode != s[0].mode) {
            eerl_cli_err(CMD, "%s is a %s run but %s is %s: compare runs of one mode", paths[i],
                         eerl_mode_name(s[i].mode), paths[0], eerl_mode_name(s[0].mode));
            goto out;
        }
        if (!strcmp(s[i].role, "governor"))
            allg[ng++] = &s[i];
        else
            allc[nc++] = &s[i];
    }
    if (ng == 0 || nc == 0) {
        eerl_cli_err(CMD,
                     "need governor and controller traces; got %zu governor and %zu "
                     "controller run%s",
                     ng, nc, nc == 1 ? "" : "s");
        goto out;
    }
    /* Pair by seed; without seeds, by order. */
    for (i = 0; i < nc; i++) {
        const struct eerl__an_series *g = NULL;
        for (j = 0; j < ng; j++)
            if (allc[i]->has_seed && allg[j]->has_seed && allg[j]->seed == allc[i]->seed) {
                g = allg[j];
                break;
            }
        if (!g && !allc[i]->has_seed && i < ng)
            g = allg[i];
        if (!g) {
            eerl_cli_err(CMD,
                         "controller trace of seed %llu has no governor trace of the same "
                         "seed among the arguments",
                         (unsigned long long)allc[i]->seed);
            goto out;
        }
        if (np >= EERL__AN_SEEDS_MAX) {
            eerl_cli_err(CMD, "more than %d seed pairs", EERL__AN_SEEDS_MAX);
            goto out;
        }
        gs[np] = g;
        cs[np] = allc[i];
        np++;
    }
    e = eerl__an_compare(gs, cs, np, res);
    if (e == 0)
        e = eerl__an_normalize(allg, ng, allc, nc, res);
    if (e < 0) {
        eerl_cli_err(CMD, "analysis: %s", eerl_strerror(e));
        goto out;
    }
    if (json) {
        json_t *jo = json_object(), *a = json_array(), *nm;
        char *text;

        json_object_set_new(jo, "mode", json_string(eerl_mode_name(s[0].mode)));
        json_object_set_new(jo, "saving_pct", eerl__an_num(res->whole.saving_pct));
        json_object_set_new(jo, "dq_pct", eerl__an_num(res->whole.dq_pct));
        json_object_set_new(jo, "before_lock", eerl__an_window_json(&res->before, NULL, 0));
        json_object_set_new(jo, "after_lock",
                            eerl__an_window_json(&res->after,
                                                 res->lock_same ? &res->lock_setting : NULL,
                                                 res->any_locked && !res->lock_same));
        if (!res->any_locked)
            json_object_set_new(json_object_get(jo, "after_lock"), "setting", json_null());
        nm = json_object();
        json_object_set_new(nm, "governors", json_integer(res->norm_governors));
        json_object_set_new(nm, "whole", eerl__an_window_json(&res->norm_whole, NULL, 0));
        json_object_set_new(nm, "after_lock", eerl__an_window_json(&res->norm_after, NULL, 0));
        json_object_set_new(nm, "governor_time_spread_pct", eerl__an_num(res->gov_time_spread_pct));
        json_object_set_new(nm, "governor_energy_spread_pct",
                            eerl__an_num(res->gov_energy_spread_pct));
        json_object_set_new(jo, "normalized", nm);
        for (i = 0; i < np; i++) {
            const struct eerl__an_seed *sd = &res->seed[i];
            json_t *o = json_object();
            json_object_set_new(o, "seed", json_integer((json_int_t)sd->seed));
            json_object_set_new(o, "saving_pct", eerl__an_num(sd->whole.saving_pct));
            json_object_set_new(o, "dq_pct", eerl__an_num(sd->whole.dq_pct));
            json_object_set_new(o, "before_lock", eerl__an_window_json(&sd->before, NULL, 0));
            json_object_set_new(
                o, "after_lock",
                eerl__an_window_json(&sd->after, sd->locked ? &sd->lock_setting : NULL, 0));
            if (!sd->locked)
                json_object_set_new(json_object_get(o, "after_lock"), "setting", json_null());
            json_array_append_new(a, o);
        }
        json_object_set_new(jo, "seeds", a);
        text = json_dumps(jo, JSON_REAL_PRECISION(10));
        printf("%s\n", text ? text : "{}");
        free(text);
        json_decref(jo);
    } else {
        printf("eerl analyze: %s mode, %zu seed pair%s, updates %d and later\n\n",
               eerl_mode_name(s[0].mode), np, np == 1 ? "" : "s", EERL__AN_FIRST_UPDATE);
        printf("  %-26s %8s  %-14s %10s  %10s\n", "interval", "updates", "gen/train MHz", "saving",
               "throughput");
        eerl_cli_window_row("whole run", &res->whole, "varies", 26, 14);
        eerl_cli_window_row("before lock", &res->before, "varies", 26, 14);
        if (res->lock_same)
            eerl__an_setting_str(&res->lock_setting, set, sizeof(set));
        else
            snprintf(set, sizeof(set), res->any_locked ? "varies" : "(no lock)");
        eerl_cli_window_row("after lock", &res->after, set, 26, 14);
        eerl_cli_window_row("whole run, normalized", &res->norm_whole, "varies", 26, 14);
        eerl_cli_window_row("after lock, normalized", &res->norm_after, set, 26, 14);
        printf("\n  normalized: governor model fitted by least squares on %u pooled governor "
               "run%s;\n  the governors' own ratios spread %.2f%% in time and %.2f%% in energy\n",
               res->norm_governors, res->norm_governors == 1 ? "" : "s", res->gov_time_spread_pct,
               res->gov_energy_spread_pct);
        printf("\n  %-6s %-12s %10s %10s %10s %10s\n", "seed", "locked", "saving", "throughput",
               "after", "after dq");
        for (i = 0; i < np; i++) {
            const struct eerl__an_seed *sd = &res->seed[i];
            char a1[32], a2[32], a3[32], a4[32];
            eerl_cli_fmt_pct(a1, sizeof(a1), sd->whole.saving_pct, 0);
            eerl_cli_fmt_pct(a2, sizeof(a2), sd->whole.dq_pct, 1);
            eerl_cli_fmt_pct(a3, sizeof(a3), sd->after.saving_pct, 0);
            eerl_cli_fmt_pct(a4, sizeof(a4), sd->after.dq_pct, 1);
            if (sd->locked)
                eerl__an_setting_str(&sd->lock_setting, set, sizeof(set));
            else
                snprintf(set, sizeof(set), "-");
            printf("  %-6llu %-12s %10s %10s %10s %10s\n", (unsigned long long)sd->seed, set, a1,
                   a2, a3, a4);
        }
    }
    rc = EERL_EXIT_OK;
out:
    if (s)
        for (i = 0; i < n; i++)
            eerl__an_series_free(&s[i]);
    free(s);
    free(res);
    return rc;
}

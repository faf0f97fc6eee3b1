/* eerl analyze: the paper's comparisons over traces of real or simulated runs. Traces are paired
 * by seed (the "run" line's seed and role; `eerl sim --trace` writes them): matched-seed geometric
 * means over the whole run and before/after the lock (Appendix A, Tables 4-5), and the
 * workload-normalized comparison against a governor model fitted on the pooled governor runs
 * (Appendix E). The figures come from src/analysis/analysis.c, the code `eerl sim` prints from.
 * With --forward-test: Appendix B's forward test of the governor predictor over each trace's
 * governor updates and pooled over the traces given. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "eerl/error.h"
#include "cli.h"
#include "eerl/tools/analysis.h"
#include "eerl/tools/trace.h"

#define CMD "analyze"
#define TRACES_MAX 512

static void usage(FILE *out)
{
    fprintf(out,
            "usage: eerl analyze [--json] TRACE...\n"
            "       eerl analyze --forward-test [--fit 15] [--predict 3] [--step 3] "
            "[--consecutive]\n"
            "                    [--from 2] [--json] TRACE...\n\n"
            "Compares controller traces with governor traces of the same seed (the trace's run\n"
            "line names its role and seed; a trace written in observe-only mode is a governor\n"
            "run). Prints, over updates 2 and later, matched-seed geometric means of the energy\n"
            "per valid token saving and the throughput change over the whole run, before and\n"
            "after the lock, and the workload-normalized comparison of the paper's Appendix E\n"
            "(least squares governor model on the pooled governor runs, ratios of sums, the\n"
            "governors' own spread). Example: eerl analyze runs/*.jsonl\n\n"
            "--forward-test: the paper's Appendix B test of the governor predictor (Eq. 2, the\n"
            "controller's own model) on any traces, observe-only ones included. Over each\n"
            "trace's governor updates (observed setting: governor; updates --from (2) on, the\n"
            "earlier ones being warm-up; refused observations left out) it fits on --fit\n"
            "governor updates, predicts the next --predict, advances by --step, and prints the\n"
            "median and 90th percentile of the absolute error, per predicted update, of\n"
            "throughput (valid tokens/s) and of update energy, for the token-work model and for\n"
            "a constant reference (the fit window's mean throughput and mean update energy),\n"
            "per trace and pooled over all. Governor updates separated by candidate updates are\n"
            "taken in trace order, as the controller's references are; --consecutive tests only\n"
            "stretches of consecutive update numbers.\n"
            "Example: eerl analyze --forward-test runs/*-governor.jsonl\n");
}

static void fwd_stat_json(json_t *o, const char *key, const struct eerl_an_fwd_stat *t,
                          const struct eerl_an_fwd_stat *e)
{
    json_t *m = json_object();

    json_object_set_new(m, "throughput_median_pct", eerl_an_num(t->median));
    json_object_set_new(m, "throughput_p90_pct", eerl_an_num(t->p90));
    json_object_set_new(m, "energy_median_pct", eerl_an_num(e->median));
    json_object_set_new(m, "energy_p90_pct", eerl_an_num(e->p90));
    json_object_set_new(o, key, m);
}

static void fwd_summary_json(json_t *o, const struct eerl_an_fwd_summary *r)
{
    json_object_set_new(o, "blocks", json_integer(r->blocks));
    json_object_set_new(o, "gap_blocks", json_integer(r->gap_blocks));
    json_object_set_new(o, "predictions", json_integer((json_int_t)r->predictions));
    fwd_stat_json(o, "constant", &r->tput_const, &r->energy_const);
    fwd_stat_json(o, "token_work", &r->tput_model, &r->energy_model);
}

static void fwd_rows(const struct eerl_an_fwd_summary *r)
{
    char a[4][32];
    int k;

    printf("    %-11s %7s %12s %11s %9s %13s %9s\n", "model", "blocks", "predictions", "tput |err|",
           "p90", "energy |err|", "p90");
    for (k = 0; k < 2; k++) {
        const struct eerl_an_fwd_stat *t = k ? &r->tput_model : &r->tput_const;
        const struct eerl_an_fwd_stat *e = k ? &r->energy_model : &r->energy_const;
        eerl_cli_fmt_pct(a[0], sizeof(a[0]), t->median, 0);
        eerl_cli_fmt_pct(a[1], sizeof(a[1]), t->p90, 0);
        eerl_cli_fmt_pct(a[2], sizeof(a[2]), e->median, 0);
        eerl_cli_fmt_pct(a[3], sizeof(a[3]), e->p90, 0);
        printf("    %-11s %7u %12zu %11s %9s %13s %9s\n", k ? "token-work" : "constant", r->blocks,
               r->predictions, a[0], a[1], a[2], a[3]);
    }
}

/* Each trace's controller replayed to its calibration (runtime/unexplained.h): what the governor
 * predictor leaves of the update time unexplained there, the figure a session reports once.
 * has[i]: 1 measured, 0 the controller never calibrated (too few governor updates). */
static int calibrations(const char *const *paths, size_t n, struct eerl_trace_unexplained *ux,
                        int *has)
{
    char why[512];
    size_t i;
    int e;

    for (i = 0; i < n; i++) {
        e = eerl_trace_measure_unexplained(paths[i], &ux[i], why, sizeof(why));
        if (e < 0) {
            eerl_cli_err(CMD, "%s", why);
            return e;
        }
        has[i] = e == 0;
    }
    return 0;
}

static json_t *calibration_json(const struct eerl_trace_unexplained *u, int has)
{
    json_t *o;

    if (!has)
        return json_null();
    o = json_object();
    json_object_set_new(o, "update", json_integer((json_int_t)u->update));
    json_object_set_new(o, "governor_updates", json_integer((json_int_t)u->n));
    json_object_set_new(o, "unexplained_share", json_real(u->share));
    json_object_set_new(o, "constant_share", json_real(u->constant));
    json_object_set_new(o, "allowed_loss", json_real(u->allowed_loss));
    json_object_set_new(o, "trial_updates_needed", json_integer(u->need));
    json_object_set_new(o, "trial_updates_max", json_integer(u->trial_max));
    json_object_set_new(o, "strategy", json_string(eerl_strategy_name(u->strategy)));
    json_object_set_new(o, "work_explains_time", json_boolean(!u->too_noisy));
    return o;
}

/* The figure in words, under a trace's heading (and, when the work does not explain the time,
 * what the session said). */
static void calibration_print(const struct eerl_trace_unexplained *u, int has)
{
    char msg[1536];

    if (!has) {
        printf("    calibration: the controller never calibrated on this trace (too few "
               "governor updates)\n");
        return;
    }
    printf("    calibration (update %llu, %zu governor updates): the governor predictor leaves "
           "%.1f%% of the update time unexplained (leave-one-out; a constant %.1f%%); a trial "
           "needs about %u update%s to resolve the %.1f%% allowance",
           u->update, u->n, 100 * u->share, 100 * u->constant, u->need, u->need == 1 ? "" : "s",
           100 * u->allowed_loss);
    if (u->trial_max)
        printf(" (the %s strategy's trials take at most %u)", eerl_strategy_name(u->strategy),
               u->trial_max);
    printf("\n");
    eerl_trace_unexplained_message(u, msg, sizeof(msg));
    if (msg[0])
        printf("    the work does not explain the time: %s\n", msg);
}

/* What one forward test found: per trace its counts, summary and calibration, and the pool. */
struct fwd_out {
    struct eerl_an_fwd_summary *sum, all;
    struct eerl_an_fwd_count *cnt;
    struct eerl_trace_unexplained *ux;
    int *has;
};

static void fwd_print_json(const struct eerl_an_series *s, const char *const *paths, size_t n,
                           const struct eerl_an_fwd_cfg *cfg, const struct fwd_out *r)
{
    json_t *jo = json_object(), *c = json_object(), *a = json_array(), *p = json_object();
    size_t i;

    json_object_set_new(c, "fit", json_integer(cfg->fit));
    json_object_set_new(c, "predict", json_integer(cfg->predict));
    json_object_set_new(c, "step", json_integer(cfg->step));
    json_object_set_new(c, "consecutive", json_boolean(cfg->consecutive));
    json_object_set_new(c, "from", json_integer((json_int_t)cfg->first_update));
    json_object_set_new(jo, "forward_test", c);
    json_object_set_new(jo, "mode", json_string(eerl_mode_name(s[0].mode)));
    for (i = 0; i < n; i++) {
        const struct eerl_an_fwd_count *k = &r->cnt[i];
        json_t *o = json_object();

        json_object_set_new(o, "path", json_string(paths[i]));
        json_object_set_new(o, "role", json_string(s[i].role));
        json_object_set_new(o, "seed",
                            s[i].has_seed ? json_integer((json_int_t)s[i].seed) : json_null());
        json_object_set_new(o, "update_lines", json_integer((json_int_t)k->lines));
        json_object_set_new(o, "warmup", json_integer((json_int_t)k->warmup));
        json_object_set_new(o, "not_governor", json_integer((json_int_t)k->not_governor));
        json_object_set_new(o, "refused", json_integer((json_int_t)k->invalid));
        json_object_set_new(o, "governor_updates", json_integer((json_int_t)k->used));
        json_object_set_new(o, "gaps", json_integer((json_int_t)k->gaps));
        json_object_set_new(o, "longest_consecutive", json_integer((json_int_t)k->longest));
        fwd_summary_json(o, &r->sum[i]);
        json_object_set_new(o, "calibration", calibration_json(&r->ux[i], r->has[i]));
        json_array_append_new(a, o);
    }
    json_object_set_new(jo, "traces", a);
    json_object_set_new(p, "traces", json_integer((json_int_t)n));
    fwd_summary_json(p, &r->all);
    json_object_set_new(jo, "pooled", p);
    eerl_cli_print_json(jo);
}

static void fwd_print_text(const struct eerl_an_series *s, const char *const *paths, size_t n,
                           const struct eerl_an_fwd_cfg *cfg, const struct fwd_out *r)
{
    size_t i;

    printf("eerl analyze --forward-test: %s mode, %zu trace%s; fit %u, predict %u, step %u "
           "governor updates from update %llu on%s\n",
           eerl_mode_name(s[0].mode), n, n == 1 ? "" : "s", cfg->fit, cfg->predict, cfg->step,
           (unsigned long long)cfg->first_update, cfg->consecutive ? ", consecutive only" : "");
    printf("median and 90th percentile of |predicted / measured - 1| per predicted update;\n"
           "constant: the fit window's mean throughput and mean update energy; token-work:\n"
           "the governor predictor (Eq. 2) fitted on the window\n");
    for (i = 0; i < n; i++) {
        const struct eerl_an_fwd_count *k = &r->cnt[i];

        printf("\n  %s (%s", paths[i], s[i].role);
        if (s[i].has_seed)
            printf(", seed %llu", (unsigned long long)s[i].seed);
        printf("): %zu governor updates used of %zu (%zu warm-up, %zu under other "
               "settings, %zu refused), %zu gap%s, %u block%s across a gap\n",
               k->used, k->lines, k->warmup, k->not_governor, k->invalid, k->gaps,
               k->gaps == 1 ? "" : "s", r->sum[i].gap_blocks, r->sum[i].gap_blocks == 1 ? "" : "s");
        fwd_rows(&r->sum[i]);
        calibration_print(&r->ux[i], r->has[i]);
    }
    printf("\n  pooled over %zu trace%s\n", n, n == 1 ? "" : "s");
    fwd_rows(&r->all);
}

/* A trace without enough governor updates for the test, named with its counts. */
static void fwd_too_few(const char *path, const struct eerl_an_fwd_count *c,
                        const struct eerl_an_fwd_cfg *cfg, size_t need)
{
    char tail[128] = "";

    if (cfg->consecutive && c->used >= need)
        snprintf(tail, sizeof(tail), ", at most %zu of them in a row (--consecutive)", c->longest);
    eerl_cli_err(CMD,
                 "%s has %zu usable governor updates%s (of %zu update lines: %zu "
                 "warm-up, %zu under other settings, %zu refused); the forward test "
                 "needs at least --fit %u + --predict %u = %zu%s",
                 path, c->used, tail, c->lines, c->warmup, c->not_governor, c->invalid, cfg->fit,
                 cfg->predict, need, cfg->consecutive ? " in a row" : "");
}

/* eerl analyze --forward-test over the n loaded traces s (paths as given). */
static int forward_test(const struct eerl_an_series *s, const char *const *paths, size_t n,
                        const struct eerl_an_fwd_cfg *cfg, int json)
{
    struct eerl_an_fwd_errs pooled, one;
    struct fwd_out r;
    size_t i, need = (size_t)cfg->fit + cfg->predict;
    int rc = EERL_EXIT_FAIL, e;
    char why[512];

    eerl_an_fwd_errs_init(&pooled);
    eerl_an_fwd_errs_init(&one);
    memset(&r, 0, sizeof(r));
    r.sum = calloc(n, sizeof(*r.sum));
    r.cnt = calloc(n, sizeof(*r.cnt));
    r.ux = calloc(n, sizeof(*r.ux));
    r.has = calloc(n, sizeof(*r.has));
    if (!r.sum || !r.cnt || !r.ux || !r.has) {
        eerl_cli_err(CMD, "out of memory");
        goto out;
    }
    for (i = 0; i < n; i++) {
        e = eerl_an_fwd_count(&s[i], cfg, &r.cnt[i]);
        if (e < 0) {
            eerl_cli_err(CMD, "%s: %s", paths[i], eerl_strerror(e));
            goto out;
        }
        if (r.cnt[i].used < need || (cfg->consecutive && r.cnt[i].longest < need)) {
            fwd_too_few(paths[i], &r.cnt[i], cfg, need);
            goto out;
        }
        eerl_an_fwd_errs_free(&one);
        e = eerl_an_forward_test(&s[i], cfg, &one, why, sizeof(why));
        if (e == 0)
            e = eerl_an_fwd_summarize(&one, &r.sum[i]);
        if (e == 0)
            e = eerl_an_fwd_errs_merge(&pooled, &one);
        if (e < 0) {
            eerl_cli_err(CMD, "%s: %s", paths[i], why[0] ? why : eerl_strerror(e));
            goto out;
        }
    }
    e = eerl_an_fwd_summarize(&pooled, &r.all);
    if (e < 0) {
        eerl_cli_err(CMD, "forward test: %s", eerl_strerror(e));
        goto out;
    }
    if (calibrations(paths, n, r.ux, r.has) < 0)
        goto out;
    if (json)
        fwd_print_json(s, paths, n, cfg, &r);
    else
        fwd_print_text(s, paths, n, cfg, &r);
    rc = EERL_EXIT_OK;
out:
    eerl_an_fwd_errs_free(&one);
    eerl_an_fwd_errs_free(&pooled);
    free(r.sum);
    free(r.cnt);
    free(r.ux);
    free(r.has);
    return rc;
}

struct opts {
    const char *paths[TRACES_MAX];
    size_t n;
    int json, fwd, fwd_opt;
    struct eerl_an_fwd_cfg fc;
};

/* A --forward-test option with a value: --fit, --predict, --step, --from. -1 (said) if bad. */
static int fwd_option(struct opts *o, const char *opt, const char *v)
{
    unsigned long x;

    if (!v) {
        eerl_cli_err(CMD, "%s needs a value (%s)", opt,
                     strcmp(opt, "--from") ? "a number of governor updates" : "an update number");
        return -1;
    }
    o->fwd_opt = 1;
    if (!strcmp(opt, "--from")) {
        if (eerl_cli_parse_uint(CMD, opt, v, 0, 1000000000, &x) < 0)
            return -1;
        o->fc.first_update = x;
        return 0;
    }
    if (eerl_cli_parse_uint(CMD, opt, v, !strcmp(opt, "--fit") ? 2 : 1, 100000, &x) < 0)
        return -1;
    if (!strcmp(opt, "--fit"))
        o->fc.fit = (unsigned)x;
    else if (!strcmp(opt, "--predict"))
        o->fc.predict = (unsigned)x;
    else
        o->fc.step = (unsigned)x;
    return 0;
}

/* -1: go on; else the exit status (help, bad input: said). */
static int parse_args(int argc, char **argv, struct opts *o)
{
    int i;

    memset(o, 0, sizeof(*o));
    o->fc = (struct eerl_an_fwd_cfg){15, 3, 3, 0, EERL_AN_FIRST_UPDATE};
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];

        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return EERL_EXIT_OK;
        } else if (!strcmp(a, "--json")) {
            o->json = 1;
        } else if (!strcmp(a, "--forward-test")) {
            o->fwd = 1;
        } else if (!strcmp(a, "--consecutive")) {
            o->fc.consecutive = 1;
            o->fwd_opt = 1;
        } else if (!strcmp(a, "--fit") || !strcmp(a, "--predict") || !strcmp(a, "--step") ||
                   !strcmp(a, "--from")) {
            if (fwd_option(o, a, i + 1 < argc ? argv[i + 1] : NULL) < 0)
                return EERL_EXIT_USAGE;
            i++;
        } else if (a[0] == '-' && a[1]) {
            eerl_cli_err(CMD, "unknown option '%s'; see eerl analyze --help", a);
            return EERL_EXIT_USAGE;
        } else {
            if (o->n >= TRACES_MAX) {
                eerl_cli_err(CMD, "more than %d traces", TRACES_MAX);
                return EERL_EXIT_USAGE;
            }
            o->paths[o->n++] = a;
        }
    }
    if (o->n == 0) {
        eerl_cli_err(CMD, "no traces given; see eerl analyze --help");
        return EERL_EXIT_USAGE;
    }
    if (o->fwd_opt && !o->fwd) {
        eerl_cli_err(CMD,
                     "--fit, --predict, --step, --from and --consecutive go with --forward-test");
        return EERL_EXIT_USAGE;
    }
    return -1;
}

/* Every trace into s[i]: one mode, each with update lines. 0, or -1 (said). */
static int load_traces(const struct opts *o, struct eerl_an_series *s)
{
    char why[1024];
    size_t i;
    int e;

    for (i = 0; i < o->n; i++) {
        e = eerl_an_load_trace(o->paths[i], &s[i], why, sizeof(why));
        if (e < 0) {
            eerl_cli_err(CMD, "%s", why);
            return -1;
        }
        if (s[i].cut_line)
            eerl_cli_note_cut(CMD, o->paths[i], s[i].cut_line);
        if (s[i].n == 0) {
            eerl_cli_err(CMD, "%s has no update lines", o->paths[i]);
            return -1;
        }
        if (i > 0 && s[i].mode != s[0].mode) {
            eerl_cli_err(CMD, "%s is a %s run but %s is %s: compare runs of one mode", o->paths[i],
                         eerl_mode_name(s[i].mode), o->paths[0], eerl_mode_name(s[0].mode));
            return -1;
        }
    }
    return 0;
}

/* The governor and controller runs (allg[ng], allc[nc]), and the seed pairs (gs[k], cs[k]):
 * paired by seed; without seeds, by order. -1 (said) if a controller run has no governor run. */
struct runs {
    const struct eerl_an_series *allg[TRACES_MAX], *allc[TRACES_MAX];
    const struct eerl_an_series *gs[EERL_AN_SEEDS_MAX], *cs[EERL_AN_SEEDS_MAX];
    size_t ng, nc, np;
};

static int pair_runs(const struct eerl_an_series *s, size_t n, struct runs *r)
{
    size_t i, j;

    for (i = 0; i < n; i++) {
        if (!strcmp(s[i].role, "governor"))
            r->allg[r->ng++] = &s[i];
        else
            r->allc[r->nc++] = &s[i];
    }
    if (r->ng == 0 || r->nc == 0) {
        eerl_cli_err(CMD,
                     "need governor and controller traces; got %zu governor and %zu "
                     "controller run%s",
                     r->ng, r->nc, r->nc == 1 ? "" : "s");
        return -1;
    }
    for (i = 0; i < r->nc; i++) {
        const struct eerl_an_series *g = NULL, *c = r->allc[i];

        for (j = 0; j < r->ng; j++)
            if (c->has_seed && r->allg[j]->has_seed && r->allg[j]->seed == c->seed) {
                g = r->allg[j];
                break;
            }
        if (!g && !c->has_seed && i < r->ng)
            g = r->allg[i];
        if (!g) {
            eerl_cli_err(CMD,
                         "controller trace of seed %llu has no governor trace of the same "
                         "seed among the arguments",
                         (unsigned long long)c->seed);
            return -1;
        }
        if (r->np >= EERL_AN_SEEDS_MAX) {
            eerl_cli_err(CMD, "more than %d seed pairs", EERL_AN_SEEDS_MAX);
            return -1;
        }
        r->gs[r->np] = g;
        r->cs[r->np] = c;
        r->np++;
    }
    return 0;
}

/* The comparison, as text or JSON. A seed's runs did the same work when every trace says
 * divergence 0 (eerl sim's default); traces of a real cluster say nothing, and are judged
 * workload-normalized. The allowance is the controller runs' own (their trace headers). */
static void print_result(const struct opts *o, const struct eerl_an_series *s, const struct runs *r,
                         const struct eerl_an_result *res)
{
    double div = s[0].divergence, loss = r->allc[0]->allowed_loss;
    int exact = 1;
    size_t i;

    for (i = 0; i < o->n; i++) {
        if (s[i].divergence != 0)
            exact = 0;
        if (s[i].divergence != div)
            div = -1;
    }
    for (i = 0; i < r->nc; i++)
        if (r->allc[i]->allowed_loss != loss)
            loss = 0;
    if (o->json) {
        json_t *jo = eerl_an_result_json(res, exact, loss);

        json_object_set_new(jo, "mode", json_string(eerl_mode_name(s[0].mode)));
        json_object_set_new(jo, "first_update", json_integer(EERL_AN_FIRST_UPDATE));
        json_object_set_new(jo, "pairs", json_integer((json_int_t)r->np));
        json_object_set_new(jo, "governor_traces", json_integer((json_int_t)r->ng));
        json_object_set_new(jo, "controller_traces", json_integer((json_int_t)r->nc));
        json_object_set_new(jo, "divergence", div >= 0 ? json_real(div) : json_null());
        eerl_cli_print_json(jo);
    } else {
        char from[32];

        printf("eerl analyze: %s mode, %zu seed pair%s, %zu governor and %zu controller "
               "trace%s\n",
               eerl_mode_name(s[0].mode), r->np, r->np == 1 ? "" : "s", r->ng, r->nc,
               r->nc == 1 ? "" : "s");
        snprintf(from, sizeof(from), "%d and later", EERL_AN_FIRST_UPDATE);
        eerl_cli_print_comparison(res, exact, div, loss, from, NULL);
    }
}

int eerl_cmd_analyze(int argc, char **argv)
{
    struct opts o;
    struct eerl_an_series *s = NULL;
    struct eerl_an_result *res = NULL;
    struct runs *r = NULL;
    int rc = parse_args(argc, argv, &o), e;
    size_t i;

    if (rc >= 0)
        return rc;
    rc = EERL_EXIT_FAIL;
    s = calloc(o.n, sizeof(*s));
    res = calloc(1, sizeof(*res));
    r = calloc(1, sizeof(*r));
    if (!s || !res || !r) {
        eerl_cli_err(CMD, "out of memory");
        goto out;
    }
    if (load_traces(&o, s) < 0)
        goto out;
    if (o.fwd) {
        rc = forward_test(s, o.paths, o.n, &o.fc, o.json);
        goto out;
    }
    if (o.n == 1) {
        rc = eerl_cli_analyze_estimate(o.paths[0], s[0].role, o.json);
        goto out;
    }
    if (pair_runs(s, o.n, r) < 0)
        goto out;
    e = eerl_an_compare(r->gs, r->cs, r->np, res);
    if (e == 0)
        e = eerl_an_normalize(r->allg, r->ng, r->allc, r->nc, res);
    if (e < 0) {
        eerl_cli_err(CMD, "analysis: %s", eerl_strerror(e));
        goto out;
    }
    print_result(&o, s, r, res);
    rc = EERL_EXIT_OK;
out:
    if (s)
        for (i = 0; i < o.n; i++)
            eerl_an_series_free(&s[i]);
    free(s);
    free(res);
    free(r);
    return rc;
}

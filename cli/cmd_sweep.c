/* eerl sweep: fixed clock pairs against the governor with matched seeds, reported as in the
 * paper's Appendix A (geometric mean over seeds of per-seed ratios of valid tokens/s and of
 * whole-allocation energy per valid token). The experiment loop knows only a `backend` that
 * runs one setting for one seed and returns totals; today that backend is the simulated cluster,
 * later a real allocation can implement the same function. Results on stdout, progress on
 * stderr. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "eerl/error.h"
#include "eerl/tools/twin.h"
#include "cli.h"
#include "workload_opt.h"

#define CMD "sweep"
#define MAX_PAIRS 256

struct pair {
    char gen_text[16], train_text[16];
    unsigned gen, train; /* 0 = governor */
};

struct totals {
    double valid_tokens, seconds, joules;
};

/* One setting, one seed: what a backend must provide. */
struct backend {
    void *ctx;
    int (*run)(void *ctx, unsigned long seed, unsigned run_id, unsigned gen, unsigned train,
               unsigned u_first, unsigned u_last, struct totals *ret);
};

struct twin_ctx {
    eerl_twin_preset *preset;
    struct eerl_twin_config cfg;
};

static int twin_run(void *vctx, unsigned long seed, unsigned run_id, unsigned gen, unsigned train,
                    unsigned u_first, unsigned u_last, struct totals *ret)
{
    struct twin_ctx *c = vctx;
    struct eerl_twin_config cfg = c->cfg;
    struct eerl_twin_totals t;
    int e;

    cfg.seed = seed;
    cfg.run_id = run_id;
    e = eerl_twin_run(c->preset, &cfg, gen, train, u_first, u_last, &t);
    if (e < 0)
        return e;
    ret->valid_tokens = t.valid_tokens;
    ret->seconds = t.seconds;
    ret->joules = t.joules;
    return 0;
}

static void usage(FILE *out)
{
    fprintf(
        out,
        "usage: eerl sweep --pairs GEN/TRAIN[,GEN/TRAIN...] [--model qwen3-30b-a3b]\n"
        "                  [--gpu-model h100] [--mode disaggregated] [--alloc 8/32] [--size M]\n"
        "                  [--seeds 4] [--updates 5-25] [--csv|--json] [--divergence 0.025]\n"
        "                  [--seed0 1] [--params FILE] [--model-file FILE] [--workload steady]\n\n"
        "Runs the governor and each clock pair (MHz, or Gov for a phase left to the governor)\n"
        "with matched seeds on the simulated cluster and prints per pair\n"
        "gen_mhz,train_mhz,dq_pct,saving_pct,seeds (Appendix A of the EE-RL paper).\n"
        "  models: %s\n  GPUs:   %s\n  modes:  %s\n"
        "  The defaults are eerl sim's (colocated: --alloc 32); --gpu-model is the GPU model\n"
        "  (--gpu, its earlier name, still works and is deprecated: --gpus are indices).\n"
        "  --alloc: colocated takes one GPU count (32); other modes GEN/TRAIN pools (8/32)\n"
        "  --divergence: run-to-run spread of log throughput (0 = runs are pure functions of\n"
        "                their seed); --params: a parameter file instead of the built-in one\n"
        "  --model-file FILE: a model the twin was not fitted on, built from its description\n"
        "                (parameters, layers, hidden size, heads, dense or MoE, workload;\n"
        "                docs/twin.md) instead of --model\n"
        "%s"
        "              (eerl sim's scenarios, over updates 1-LAST of --updates, so a sweep of\n"
        "              updates 12-1000 sees what updates 12-1000 of eerl sim --updates 1000 do)\n",
        eerl_twin_model_names(), eerl_twin_gpu_names(), eerl_twin_mode_names(),
        EERL_CLI_WORKLOAD_USAGE);
}

static int parse_clock(const char *text, unsigned *ret)
{
    char *end;
    unsigned long v;

    if (!strcmp(text, "Gov") || !strcmp(text, "gov")) {
        *ret = EERL_TWIN_GOV;
        return 0;
    }
    if (*text < '0' || *text > '9')
        return -1;
    errno = 0;
    v = strtoul(text, &end, 10);
    if (errno || *end || v == 0 || v > 10000)
        return -1;
    *ret = (unsigned)v;
    return 0;
}

static int parse_pairs(const char *text, struct pair *pairs, size_t *ret_n)
{
    size_t n = 0;
    const char *p = text;

    if (!text || !*text) {
        eerl_cli_err(CMD, "--pairs is empty; give pairs like 1800/1500,Gov/1200");
        return -1;
    }
    while (*p) {
        const char *comma = strchr(p, ','), *slash;
        size_t len = comma ? (size_t)(comma - p) : strlen(p), gl, tl;
        struct pair *q;

        slash = memchr(p, '/', len);
        if (n >= MAX_PAIRS) {
            eerl_cli_err(CMD, "--pairs lists more than %d pairs", MAX_PAIRS);
            return -1;
        }
        q = &pairs[n];
        gl = slash ? (size_t)(slash - p) : 0;
        tl = slash ? len - gl - 1 : 0;
        if (!slash || gl == 0 || tl == 0 || gl >= sizeof(q->gen_text) ||
            tl >= sizeof(q->train_text))
            goto bad;
        memcpy(q->gen_text, p, gl);
        q->gen_text[gl] = '\0';
        memcpy(q->train_text, slash + 1, tl);
        q->train_text[tl] = '\0';
        if (parse_clock(q->gen_text, &q->gen) < 0 || parse_clock(q->train_text, &q->train) < 0)
            goto bad;
        n++;
        p += len;
        if (*p == ',') {
            p++;
            if (!*p)
                goto bad_end;
        }
    }
    *ret_n = n;
    return 0;
bad:
    eerl_cli_err(CMD,
                 "--pairs '%s': pair %zu ('%.*s') is malformed; give GEN/TRAIN with each a clock "
                 "in MHz or Gov, e.g. 1800/1500,Gov/1200",
                 text, n + 1, (int)(strchr(p, ',') ? (size_t)(strchr(p, ',') - p) : strlen(p)), p);
    return -1;
bad_end:
    eerl_cli_err(CMD, "--pairs '%s' ends with a comma", text);
    return -1;
}

static void clock_hint(const eerl_twin_preset *preset, const char *gpu)
{
    unsigned c[EERL_DEVICE_CLOCKS_MAX];
    size_t n = 0;

    if (eerl_twin_preset_clocks(preset, c, EERL_DEVICE_CLOCKS_MAX, &n) == 0 && n > 2)
        fprintf(stderr, "  %s supports %u, %u, %u, ... down to %u MHz (%u MHz steps), or Gov\n",
                gpu, c[0], c[1], c[2], c[n - 1], c[1] - c[2]);
}

struct opts {
    const char *model, *gpu, *mode_s, *alloc, *size, *pairs_s, *params, *model_file;
    unsigned long seeds, u_first, u_last, seed0;
    double divergence;
    int json;
    struct eerl_cli_workload wopt;
};

/* --updates FIRST-LAST. -1 (said) if malformed. */
static int parse_updates(const char *v, struct opts *o)
{
    char *end;

    errno = 0;
    o->u_first = strtoul(v, &end, 10);
    if (*v < '0' || *v > '9' || *end != '-' || end[1] < '0' || end[1] > '9') {
        eerl_cli_err(CMD, "--updates '%s' is malformed; give FIRST-LAST, e.g. 5-25", v);
        return -1;
    }
    o->u_last = strtoul(end + 1, &end, 10);
    if (errno || *end || o->u_last < o->u_first || o->u_last > 100000) {
        eerl_cli_err(CMD,
                     "--updates '%s' is malformed; give FIRST-LAST with FIRST <= "
                     "LAST <= 100000, e.g. 5-25",
                     v);
        return -1;
    }
    return 0;
}

/* Option a with value v (one that takes a value). -1 (said) if v is bad, 1 if a is unknown. */
static int set_option(struct opts *o, const char *a, const char *v)
{
    int e;

    if (!strcmp(a, "--model-file")) {
        o->model_file = v;
    } else if (!strcmp(a, "--model")) {
        o->model = v;
    } else if (!strcmp(a, "--gpu-model") || !strcmp(a, "--gpu")) {
        o->gpu = v;
    } else if (!strcmp(a, "--mode")) {
        o->mode_s = v;
    } else if (!strcmp(a, "--alloc")) {
        o->alloc = v;
    } else if (!strcmp(a, "--size")) {
        o->size = v;
    } else if (!strcmp(a, "--pairs")) {
        o->pairs_s = v;
    } else if (!strcmp(a, "--params")) {
        o->params = v;
    } else if (!strcmp(a, "--seeds")) {
        if (eerl_cli_parse_uint(CMD, "--seeds", v, 0, 1000, &o->seeds) < 0)
            return -1;
        if (o->seeds == 0) {
            eerl_cli_err(CMD, "--seeds 0: give at least 1 seed");
            return -1;
        }
    } else if (!strcmp(a, "--seed0")) {
        if (eerl_cli_parse_uint(CMD, "--seed0", v, 0, 1000000000, &o->seed0) < 0)
            return -1;
    } else if (!strcmp(a, "--divergence")) {
        if (eerl_cli_parse_double(CMD, "--divergence", v, 0, 0.5, &o->divergence) < 0)
            return -1;
    } else if (!strcmp(a, "--updates")) {
        return parse_updates(v, o);
    } else if ((e = eerl_cli_workload_opt(CMD, a, v, &o->wopt)) != 0) {
        return e < 0 ? -1 : 0;
    } else {
        return 1;
    }
    return 0;
}

/* Parses the command line into o. -1: go on; else the exit status (help, bad input: said). */
static int parse_args(int argc, char **argv, struct opts *o)
{
    int i;

    *o = (struct opts){.model = "qwen3-30b-a3b",
                       .gpu = "h100",
                       .mode_s = "disaggregated",
                       .size = "M",
                       .seeds = 4,
                       .u_first = 5,
                       .u_last = 25,
                       .seed0 = 1,
                       .divergence = 0.025};
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int e;

        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return EERL_EXIT_OK;
        } else if (!strcmp(a, "--csv") || !strcmp(a, "--json")) {
            o->json = !strcmp(a, "--json");
            continue;
        } else if (!v) {
            eerl_cli_err(CMD, "option '%s' needs a value (or is unknown); see eerl sweep --help",
                         a);
            return EERL_EXIT_USAGE;
        }
        e = set_option(o, a, v);
        if (e > 0)
            eerl_cli_err(CMD, "unknown option '%s'; see eerl sweep --help", a);
        if (e != 0)
            return EERL_EXIT_USAGE;
        i++;
    }
    if (!o->pairs_s) {
        eerl_cli_err(CMD, "missing --pairs (the clock pairs to sweep, e.g. 1800/1500,Gov/1200); "
                          "see eerl sweep --help");
        return EERL_EXIT_USAGE;
    }
    return -1;
}

/* What the sweep runs on: the target checked, the pairs, the scenario, the preset (ctx holds
 * it: the caller frees it). -1: go on; else the exit status (said). */
static int prepare(struct opts *o, struct pair *pairs, size_t *n_pairs, struct twin_ctx *ctx,
                   char *scn_desc, size_t desc_len)
{
    eerl_twin_mode mode;
    unsigned ng = 0, nt = 0;
    struct eerl_twin_scenario scn;
    char *text = NULL;
    size_t k;
    int e;

    if (!o->alloc) /* eerl sim's defaults */
        o->alloc = eerl_twin_mode_parse(o->mode_s, &mode) == 0 && mode == EERL_TWIN_COLOCATED
                       ? "32"
                       : "8/32";
    if (eerl_cli_twin_target(CMD, o->model_file ? NULL : o->model, o->gpu, o->mode_s, o->size,
                             o->alloc, EERL_TWIN_GPUS_LIMIT, &mode, &ng, &nt) < 0 ||
        parse_pairs(o->pairs_s, pairs, n_pairs) < 0 ||
        eerl_cli_workload_resolve(CMD, &o->wopt, o->u_last, &scn) < 0)
        return EERL_EXIT_USAGE;
    eerl_cli_workload_desc(&scn, scn_desc, desc_len);
    if (o->params) {
        text = eerl_cli_read_file(o->params);
        if (!text) {
            eerl_cli_err(CMD, "cannot read parameter file '%s': %s", o->params, strerror(errno));
            return EERL_EXIT_FAIL;
        }
    }
    if (o->model_file) {
        e = eerl_cli_model_file(CMD, o->model_file, o->gpu, text, &ctx->preset);
        free(text);
        if (e)
            return e;
        o->model = eerl_twin_preset_model(ctx->preset);
        e = 0;
    } else {
        e = eerl_twin_preset_new(o->model, o->gpu, text, &ctx->preset);
        free(text);
    }
    if (e < 0) {
        eerl_cli_err(CMD, "%s: no usable preset for %s on %s: %s",
                     o->params ? o->params : "built-in parameters", o->model, o->gpu,
                     eerl_strerror(e));
        return o->params ? EERL_EXIT_USAGE : EERL_EXIT_FAIL;
    }
    e = eerl_twin_preset_set_scenario(ctx->preset, &scn);
    if (e < 0) {
        eerl_cli_err(CMD, "--workload %s: %s", scn_desc, eerl_strerror(e));
        return EERL_EXIT_USAGE;
    }
    for (k = 0; k < *n_pairs; k++) {
        const struct pair *q = &pairs[k];
        unsigned bad = !eerl_twin_preset_clock_ok(ctx->preset, q->gen)     ? q->gen
                       : !eerl_twin_preset_clock_ok(ctx->preset, q->train) ? q->train
                                                                           : 0;
        if (bad) {
            eerl_cli_err(CMD, "pair %s/%s: %u MHz is not a clock %s supports", q->gen_text,
                         q->train_text, bad, o->gpu);
            clock_hint(ctx->preset, o->gpu);
            return EERL_EXIT_USAGE;
        }
    }
    ctx->cfg.mode = mode;
    ctx->cfg.n_gen = ng;
    ctx->cfg.n_train = nt;
    ctx->cfg.size = o->size[0];
    ctx->cfg.divergence = o->divergence;
    return -1;
}

/* The experiment loop: per seed one governor run, then each pair; per-seed log ratios summed in
 * lq (throughput) and le (energy per token). A run's id (its divergence stream) follows from its
 * clocks, not its place in the list. 0, or -1 (said). */
static int sweep(const struct opts *o, const struct backend *be, const struct pair *pairs,
                 size_t n_pairs, double *lq, double *le)
{
    unsigned long k;

    for (k = 0; k < o->seeds; k++) {
        unsigned long seed = o->seed0 + k;
        struct totals g, c;
        size_t j;
        int e;

        fprintf(stderr, "eerl sweep: seed %lu (%lu/%lu): governor and %zu pair%s\n", seed, k + 1,
                o->seeds, n_pairs, n_pairs == 1 ? "" : "s");
        e = be->run(be->ctx, seed, 0, EERL_TWIN_GOV, EERL_TWIN_GOV, (unsigned)o->u_first,
                    (unsigned)o->u_last, &g);
        if (e < 0) {
            eerl_cli_err(CMD, "governor run, seed %lu: %s", seed, eerl_strerror(e));
            return -1;
        }
        for (j = 0; j < n_pairs; j++) {
            e = be->run(be->ctx, seed, 1 + pairs[j].gen * 10007u + pairs[j].train, pairs[j].gen,
                        pairs[j].train, (unsigned)o->u_first, (unsigned)o->u_last, &c);
            if (e < 0) {
                eerl_cli_err(CMD, "pair %s/%s, seed %lu: %s", pairs[j].gen_text,
                             pairs[j].train_text, seed, eerl_strerror(e));
                return -1;
            }
            lq[j] += log((c.valid_tokens / c.seconds) / (g.valid_tokens / g.seconds));
            le[j] += log((c.joules / c.valid_tokens) / (g.joules / g.valid_tokens));
        }
    }
    return 0;
}

static void print_results(const struct opts *o, const char *scn_desc, const struct pair *pairs,
                          size_t n_pairs, const double *lq, const double *le)
{
    unsigned long seeds = o->seeds;
    size_t k;

    if (o->json) {
        printf("{\"model\":\"%s\",\"gpu\":\"%s\",\"mode\":\"%s\",\"alloc\":\"%s\",\"size\":\"%s\","
               "\"updates\":\"%lu-%lu\",\"divergence\":%g,\"workload\":\"%s\",\"backend\":"
               "\"twin\",\"pairs\":[",
               o->model, o->gpu, o->mode_s, o->alloc, o->size, o->u_first, o->u_last, o->divergence,
               scn_desc);
        for (k = 0; k < n_pairs; k++)
            printf("%s{\"gen_mhz\":\"%s\",\"train_mhz\":\"%s\",\"dq_pct\":%.2f,"
                   "\"saving_pct\":%.2f,\"seeds\":%lu}",
                   k ? "," : "", pairs[k].gen_text, pairs[k].train_text,
                   100 * (exp(lq[k] / seeds) - 1), 100 * (1 - exp(le[k] / seeds)), seeds);
        printf("]}\n");
    } else {
        printf("gen_mhz,train_mhz,dq_pct,saving_pct,seeds\n");
        for (k = 0; k < n_pairs; k++)
            printf("%s,%s,%.2f,%.2f,%lu\n", pairs[k].gen_text, pairs[k].train_text,
                   100 * (exp(lq[k] / seeds) - 1), 100 * (1 - exp(le[k] / seeds)), seeds);
    }
}

int eerl_cmd_sweep(int argc, char **argv)
{
    struct opts o;
    struct pair pairs[MAX_PAIRS];
    size_t n_pairs = 0;
    struct twin_ctx tctx;
    struct backend be = {&tctx, twin_run};
    double *lq = NULL, *le = NULL;
    char scn_desc[160];
    int rc = parse_args(argc, argv, &o);

    if (rc >= 0)
        return rc;
    memset(&tctx, 0, sizeof(tctx));
    rc = prepare(&o, pairs, &n_pairs, &tctx, scn_desc, sizeof(scn_desc));
    if (rc >= 0)
        goto out;
    rc = EERL_EXIT_FAIL;
    lq = calloc(n_pairs, sizeof(*lq));
    le = calloc(n_pairs, sizeof(*le));
    if (!lq || !le) {
        eerl_cli_err(CMD, "out of memory");
        goto out;
    }
    if (sweep(&o, &be, pairs, n_pairs, lq, le) < 0)
        goto out;
    print_results(&o, scn_desc, pairs, n_pairs, lq, le);
    rc = EERL_EXIT_OK;
out:
    free(lq);
    free(le);
    eerl_twin_preset_free(tctx.preset);
    return rc;
}

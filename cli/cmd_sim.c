/* eerl sim: eerl's main job. For each seed, a governor run and a controller run on the simulated
 * cluster with matched seeds, both driven through the runtime session on the twin device (real
 * meter, actuator and controller in virtual time); then the paper's Table 4/5 view (whole run,
 * before and after the lock), the oracle (best static setting meeting the allowance on the same
 * seeds and updates) and the capture ratio. Results on stdout, progress on stderr. The figures
 * come from src/runtime/analysis.c, which `eerl analyze` runs on the traces as well. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "eerl/error.h"
#include "eerl/meter.h"
#include "eerl/twin.h"
#include "cli.h"
#include "runtime/analysis.h"
#include "sim/sim.h"
#include "twin/presets.h"
#include "twin/scenario.h"
#include "workload_opt.h"

#define CMD "sim"
#define SEEDS_MAX 64
#define SIM_STRATEGIES "paper, eerl, governor, oracle, global-clock, linear-search"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: eerl sim [--model qwen3-30b-a3b] [--gpu-model h100] [--mode disaggregated]\n"
            "                [--alloc 8/32] [--size M] [--updates 93] [--seeds 4]\n"
            "                [--strategy eerl] [--expected-updates N] [--allowed-loss 0.02]\n"
            "                [--trace DIR] [--json] [--oracle-window 50]\n"
            "                [--divergence 0] [--noise none] [--workload steady]\n"
            "                [--save-state DIR] [--resume-from DIR]\n\n"
            "For each seed, runs the default governor and the EE-RL controller on the simulated\n"
            "cluster on the same work, both through the runtime session (meter, actuator and\n"
            "controller in virtual time), and prints the energy-per-valid-token saving and the\n"
            "throughput change over the whole run, before and after the lock (updates from 2 on,\n"
            "matched-seed geometric means), the oracle (best static setting meeting the\n"
            "allowance on the same seeds and updates) and the capture ratio (controller saving /\n"
            "oracle saving). With no options: Qwen3-30B-A3B, disaggregated 8/32 H100, medium\n"
            "workload (64/8/512), 93 updates, 4 seeds.\n"
            "  models: %s\n  GPUs:   %s\n  modes:  %s\n"
            "  --gpu-model: the GPU model (--gpu, its earlier name, still works and is\n"
            "              deprecated: elsewhere --gpus are GPU indices)\n"
            "  --alloc: colocated takes one GPU count (32); other modes GEN/TRAIN pools (8/32)\n"
            "  --allowed-loss: fraction (0.02) or percent (2%%), above 0 and below 50%%\n"
            "  --trace DIR: writes DIR/seed<N>-governor.jsonl and DIR/seed<N>-controller.jsonl\n"
            "               (eerl replay / eerl analyze / eerl report read them)\n"
            "  --json: one JSON object holding every figure the text prints (docs/runtime.md)\n"
            "  --divergence: run-to-run spread of log throughput between runs of one seed;\n"
            "              0 (default): a seed's runs do the same work and compare exactly;\n"
            "              above 0 (0.025 as real runs): judged on the workload-normalized rows\n"
            "  --noise: per-update noise the work cannot explain: none (default) or fitted\n"
            "              (the preset's phase-level noise, docs/twin.md)\n" EERL_CLI_WORKLOAD_USAGE
            "  --strategy: %s\n"
            "              (default eerl: run-level budget; paper: the faithful EE-RL controller)\n"
            "              (oracle: the best static setting found offline, held from update 1)\n"
            "  --expected-updates: updates the job runs in all, for strategies that budget\n"
            "              exploration against the horizon (eerl); default: learned\n"
            "  --oracle-window W: the windowed oracle may change setting every W updates\n"
            "              (default 50; the best such schedule within the same allowance)\n"
            "  --save-state DIR: saves each seed's controller state after the last update\n"
            "              to DIR/seed<N>-controller.state (a job saves it by its checkpoint)\n"
            "  --resume-from DIR: each seed's controller resumes from\n"
            "              DIR/seed<N>-controller.state (the next job segment; the twin starts\n"
            "              the seed's workload again). No file, or a state learned on another\n"
            "              GPU, allocation, mode, strategy or configuration: a fresh search\n",
            eerl_twin_model_names(), eerl_twin_gpu_names(), eerl_twin_mode_names(), SIM_STRATEGIES);
}

static int known(const char *opt)
{
    static const char *const opts[] = {
        "--model",       "--gpu",          "--gpu-model",        "--mode",    "--alloc",
        "--size",        "--trace",        "--strategy",         "--updates", "--seeds",
        "--divergence",  "--allowed-loss", "--expected-updates", "--noise",   "--save-state",
        "--resume-from", "--oracle-window"};
    size_t i;

    for (i = 0; i < sizeof(opts) / sizeof(opts[0]); i++)
        if (!strcmp(opt, opts[i]))
            return 1;
    return 0;
}

static int parse_loss(const char *v, double *ret)
{
    char *end;
    double x;

    errno = 0;
    x = strtod(v, &end);
    if (end == v || errno || !isfinite(x) || (*end && strcmp(end, "%"))) {
        eerl_cli_err(CMD,
                     "--allowed-loss '%s' is not a number; give a fraction (0.02) or a "
                     "percent (2%%)",
                     v);
        return -1;
    }
    if (*end == '%')
        x /= 100;
    if (!(x > 0 && x < 0.5)) {
        eerl_cli_err(CMD,
                     "--allowed-loss %s is out of range: the allowed throughput loss must be "
                     "above 0 and below 50%% (e.g. 0.02 for 2%%)",
                     v);
        return -1;
    }
    *ret = x;
    return 0;
}

/* "P/K/B" of the preset's workload size (from its parameters, so every model is described). */
static const char *size_desc(const eerl_twin_preset *preset, char size, char *buf, size_t n)
{
    int i = size == 'S' ? 0 : size == 'M' ? 1 : 2;

    snprintf(buf, n, "%u/%u/%u", preset->wl.P[i], preset->wl.K[i], preset->wl.B[i]);
    return buf;
}

/* P, K and B of the preset's workload size. */
static void size_pkb(const eerl_twin_preset *preset, char size, int ret[3])
{
    int i = size == 'S' ? 0 : size == 'M' ? 1 : 2;

    ret[0] = (int)preset->wl.P[i];
    ret[1] = (int)preset->wl.K[i];
    ret[2] = (int)preset->wl.B[i];
}

/* The windowed oracle for --json: its figures and the schedule as the settings in force from
 * each change on (1-based updates). */
static json_t *sim_schedule_json(const eerl_twin_preset *preset, eerl_mode mode,
                                 const struct eerl__sim_schedule *s)
{
    json_t *o = json_object(), *a = json_array();
    unsigned k;

    json_object_set_new(o, "window", json_integer(s->window));
    json_object_set_new(o, "saving_pct", eerl__an_num(s->saving_pct));
    json_object_set_new(o, "dq_pct", eerl__an_num(s->dq_pct));
    json_object_set_new(o, "changes", json_integer(s->changes));
    json_object_set_new(o, "held_static", json_boolean(s->held_static));
    json_object_set_new(o, "candidates", json_integer(s->candidates));
    for (k = 0; k < s->n_windows; k++) {
        eerl_setting st;
        json_t *e;

        if (k > 0 && s->gen_mhz[k] == s->gen_mhz[k - 1] && s->train_mhz[k] == s->train_mhz[k - 1])
            continue;
        eerl__sim_schedule_setting(preset, mode, s, k, &st);
        e = json_object();
        json_object_set_new(e, "from_update", json_integer((json_int_t)k * s->window + 1));
        json_object_set_new(e, "setting", eerl__an_setting_json(&st));
        json_array_append_new(a, e);
    }
    json_object_set_new(o, "schedule", a);
    return o;
}

/* Removes what this run wrote under the trace directory (and the directory if it made it). */
static void remove_traces(const char *dir, const uint64_t *seeds, size_t n, int made_dir)
{
    char p[4096];
    size_t i;

    if (!dir)
        return;
    for (i = 0; i < n; i++) {
        snprintf(p, sizeof(p), "%s/seed%llu-governor.jsonl", dir, (unsigned long long)seeds[i]);
        remove(p);
        snprintf(p, sizeof(p), "%s/seed%llu-controller.jsonl", dir, (unsigned long long)seeds[i]);
        remove(p);
    }
    if (made_dir)
        rmdir(dir);
}

int eerl_cmd_sim(int argc, char **argv)
{
    const char *model = "qwen3-30b-a3b", *gpu = "h100", *mode_s = "disaggregated";
    const char *alloc = "8/32", *size = "M", *trace = NULL, *strategy_s = "eerl";
    const char *save_dir = NULL, *resume_dir = NULL;
    unsigned long updates = 93, n_seeds = 4, seed0 = 1, expected = 0, owin = 50;
    int oracle_run = 0, have_oracle = 0;
    double loss = 0.02, divergence = 0;
    unsigned noise = EERL_TWIN_NOISE_NONE;
    int json = 0, rc = EERL_EXIT_USAGE, e, i, made_dir = 0, alloc_given = 0;
    eerl_twin_mode mode;
    eerl_strategy strategy;
    eerl_twin_preset *preset = NULL;
    char pkb[48];
    unsigned ng = 0, nt = 0, calib;
    uint64_t seeds[SEEDS_MAX];
    struct eerl__sim_run *gov = NULL, *ctl = NULL;
    const struct eerl__an_series *gs[SEEDS_MAX], *cs[SEEDS_MAX];
    struct eerl__an_result *res = NULL;
    struct eerl__sim_oracle *orc = NULL;
    struct eerl__sim_schedule wsc;
    size_t k;
    char why[1024], buf[64];
    struct timespec t0, t1;
    struct eerl_cli_workload wopt;
    struct eerl__wl_scenario scn;
    char scn_desc[128];

    memset(&wopt, 0, sizeof(wopt));
    memset(&wsc, 0, sizeof(wsc));
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = 1;

        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return EERL_EXIT_OK;
        } else if (!strcmp(a, "--json")) {
            json = 1;
            takes = 0;
        } else if ((e = eerl_cli_workload_opt(CMD, a, v, &wopt)) != 0) {
            if (e < 0)
                return EERL_EXIT_USAGE;
        } else if (!known(a)) {
            eerl_cli_err(CMD, "unknown option '%s'; see eerl sim --help", a);
            return EERL_EXIT_USAGE;
        } else if (!v) {
            eerl_cli_err(CMD, "option '%s' needs a value; see eerl sim --help", a);
            return EERL_EXIT_USAGE;
        } else if (!strcmp(a, "--model")) {
            model = v;
        } else if (!strcmp(a, "--gpu-model") || !strcmp(a, "--gpu")) {
            gpu = v;
        } else if (!strcmp(a, "--mode")) {
            mode_s = v;
        } else if (!strcmp(a, "--alloc")) {
            alloc = v;
            alloc_given = 1;
        } else if (!strcmp(a, "--size")) {
            size = v;
        } else if (!strcmp(a, "--trace")) {
            trace = v;
        } else if (!strcmp(a, "--strategy")) {
            strategy_s = v;
        } else if (!strcmp(a, "--save-state")) {
            save_dir = v;
        } else if (!strcmp(a, "--resume-from")) {
            resume_dir = v;
        } else if (!strcmp(a, "--allowed-loss")) {
            if (parse_loss(v, &loss) < 0)
                return EERL_EXIT_USAGE;
        } else if (!strcmp(a, "--updates")) {
            if (eerl_cli_parse_uint(CMD, "--updates", v, 1, 100000, &updates) < 0)
                return EERL_EXIT_USAGE;
        } else if (!strcmp(a, "--expected-updates")) {
            if (eerl_cli_parse_uint(CMD, "--expected-updates", v, 1, 100000000, &expected) < 0)
                return EERL_EXIT_USAGE;
        } else if (!strcmp(a, "--oracle-window")) {
            if (eerl_cli_parse_uint(CMD, "--oracle-window", v, 1, 100000, &owin) < 0)
                return EERL_EXIT_USAGE;
        } else if (!strcmp(a, "--seeds")) {
            if (eerl_cli_parse_uint(CMD, "--seeds", v, 1, SEEDS_MAX, &n_seeds) < 0)
                return EERL_EXIT_USAGE;
        } else if (!strcmp(a, "--noise")) {
            if (eerl_twin_noise_parse(v, &noise) < 0) {
                eerl_cli_err(CMD, "unknown noise model '%s'; valid: none, fitted", v);
                return EERL_EXIT_USAGE;
            }
        } else if (!strcmp(a, "--divergence")) {
            if (eerl_cli_parse_double(CMD, "--divergence", v, 0, 0.5, &divergence) < 0)
                return EERL_EXIT_USAGE;
        } else {
            eerl_cli_err(CMD, "unknown option '%s'; see eerl sim --help", a);
            return EERL_EXIT_USAGE;
        }
        i += takes;
    }
    if (!strcmp(strategy_s, "oracle")) {
        oracle_run = 1;
        strategy = EERL_STRATEGY_STATIC;
    } else if (!strcmp(strategy_s, "static") ||
               eerl_strategy_from_name(strategy_s, &strategy) < 0) {
        eerl_cli_err(CMD, "unknown strategy '%s'; valid strategies: %s", strategy_s,
                     SIM_STRATEGIES);
        return EERL_EXIT_USAGE;
    }
    if (!alloc_given && eerl_twin_mode_parse(mode_s, &mode) == 0 && mode == EERL_TWIN_COLOCATED)
        alloc = "32";
    if (eerl_cli_twin_target(CMD, model, gpu, mode_s, size, alloc, EERL_TWIN_GPUS_LIMIT, &mode, &ng,
                             &nt) < 0)
        return EERL_EXIT_USAGE;
    calib = eerl__sim_calibration_updates(mode);
    if (updates <= calib) {
        eerl_cli_err(CMD,
                     "--updates %lu is not more than the controller's calibration (%u updates in "
                     "%s mode): the controller would never leave the governor; give more than %u",
                     updates, calib, mode_s, calib);
        return EERL_EXIT_USAGE;
    }
    if (eerl_cli_workload_resolve(CMD, &wopt, updates, &scn) < 0)
        return EERL_EXIT_USAGE;
    eerl_cli_workload_desc(&scn, scn_desc, sizeof(scn_desc));
    for (k = 0; k < n_seeds; k++)
        seeds[k] = seed0 + k;
    e = eerl_twin_preset_new(model, gpu, NULL, &preset);
    if (e < 0) {
        eerl_cli_err(CMD, "no preset for %s on %s in the built-in parameters: %s", model, gpu,
                     eerl_strerror(e));
        return EERL_EXIT_USAGE;
    }
    e = eerl__preset_set_scenario(preset, &scn);
    if (e < 0) {
        eerl_cli_err(CMD, "--workload %s: %s", scn_desc, eerl_strerror(e));
        eerl_twin_preset_free(preset);
        return EERL_EXIT_USAGE;
    }
    rc = EERL_EXIT_FAIL;
    if (resume_dir) {
        struct stat st;
        int bad = stat(resume_dir, &st) != 0 ? errno : 0;
        if (bad || !S_ISDIR(st.st_mode)) {
            eerl_cli_err(CMD, "--resume-from '%s' is not a directory%s%s", resume_dir,
                         bad ? ": " : "", bad ? strerror(bad) : "");
            rc = EERL_EXIT_USAGE;
            goto out;
        }
    }
    if (save_dir) {
        struct stat st;
        if (stat(save_dir, &st) != 0 && mkdir(save_dir, 0777) != 0) {
            eerl_cli_err(CMD, "cannot create state directory '%s': %s", save_dir, strerror(errno));
            goto out;
        } else if (stat(save_dir, &st) == 0 && !S_ISDIR(st.st_mode)) {
            eerl_cli_err(CMD, "--save-state '%s' is not a directory", save_dir);
            rc = EERL_EXIT_USAGE;
            goto out;
        }
    }
    if (trace) {
        struct stat st;
        char probe[4096];
        FILE *f;

        if (stat(trace, &st) != 0) {
            if (mkdir(trace, 0777) != 0) {
                eerl_cli_err(CMD, "cannot create trace directory '%s': %s", trace, strerror(errno));
                goto out;
            }
            made_dir = 1;
        } else if (!S_ISDIR(st.st_mode)) {
            eerl_cli_err(CMD, "--trace '%s' is not a directory; give a directory for the traces",
                         trace);
            goto out;
        }
        snprintf(probe, sizeof(probe), "%s/seed%llu-governor.jsonl", trace,
                 (unsigned long long)seeds[0]);
        f = fopen(probe, "w");
        if (!f) {
            eerl_cli_err(CMD, "cannot write traces in '%s': %s", trace, strerror(errno));
            if (made_dir)
                rmdir(trace);
            goto out;
        }
        fclose(f);
        remove(probe);
    }
    gov = calloc(n_seeds, sizeof(*gov));
    ctl = calloc(n_seeds, sizeof(*ctl));
    res = calloc(1, sizeof(*res));
    orc = calloc(1, sizeof(*orc));
    if (!gov || !ctl || !res || !orc) {
        eerl_cli_err(CMD, "out of memory");
        goto out;
    }
    fprintf(stderr,
            "eerl sim: %lu seed%s, each a governor run and a controller run (%s), then "
            "the oracle search; the results follow on stdout\n",
            n_seeds, n_seeds == 1 ? "" : "s", strategy_s);
    if (oracle_run) {
        e = eerl__sim_oracle(preset, mode, ng, nt, size[0], (unsigned)updates, seeds, n_seeds, loss,
                             orc);
        if (e < 0) {
            eerl_cli_err(CMD, "oracle: %s", eerl_strerror(e));
            goto out;
        }
        have_oracle = 1;
    }
    for (k = 0; k < n_seeds; k++) {
        struct eerl__sim_config c;
        char path[2][4096], meta[512], spath[2][4096];
        int role;

        memset(&c, 0, sizeof(c));
        c.preset = preset;
        c.mode = mode;
        c.n_gen = ng;
        c.n_train = nt;
        c.size = size[0];
        c.updates = (unsigned)updates;
        c.seed = seeds[k];
        c.divergence = divergence;
        c.noise = noise;
        c.allowed_loss = loss;
        c.strategy = strategy;
        c.expected_updates = (unsigned)expected;
        if (oracle_run)
            c.static_setting = orc->setting;
        if (resume_dir) {
            snprintf(spath[0], sizeof(spath[0]), "%s/seed%llu-controller.state", resume_dir,
                     (unsigned long long)seeds[k]);
            c.resume_from = spath[0];
        }
        if (save_dir) {
            snprintf(spath[1], sizeof(spath[1]), "%s/seed%llu-controller.state", save_dir,
                     (unsigned long long)seeds[k]);
            c.save_state = spath[1];
        }
        for (role = 0; role < 2; role++) {
            c.controller = role;
            snprintf(path[role], sizeof(path[role]), "%s/seed%llu-%s.jsonl", trace ? trace : ".",
                     (unsigned long long)seeds[k], role ? "controller" : "governor");
            snprintf(meta, sizeof(meta),
                     "{\"role\":\"%s\",\"seed\":%llu,\"model\":\"%s\",\"gpu\":\"%s\","
                     "\"alloc\":\"%s\",\"size\":\"%s\",\"updates\":%lu,\"divergence\":%.17g,"
                     "%s%s%s%s\"backend\":\"twin\"}",
                     role ? "controller" : "governor", (unsigned long long)seeds[k], model, gpu,
                     alloc, size, updates, divergence, noise ? "\"noise\":\"fitted\"," : "",
                     scn.kind ? "\"scenario\":\"" : "",
                     scn.kind ? eerl__wl_scenario_name(scn.kind) : "", scn.kind ? "\"," : "");
            c.trace_path = trace ? path[role] : NULL;
            c.trace_run_json = meta;
            e = eerl__sim_run(&c, role ? &ctl[k] : &gov[k], why, sizeof(why));
            if (e < 0) {
                eerl_cli_err(CMD, "seed %llu, %s run: %s", (unsigned long long)seeds[k],
                             role ? "controller" : "governor", why);
                remove_traces(trace, seeds, n_seeds, made_dir);
                goto out;
            }
        }
        gs[k] = &gov[k].series;
        cs[k] = &ctl[k].series;
        if (resume_dir)
            fprintf(stderr, "eerl sim: seed %llu (%zu/%lu): %s%s\n", (unsigned long long)seeds[k],
                    k + 1, n_seeds, ctl[k].resumed ? "" : "not resumed: ", ctl[k].resume_detail);
        if (ctl[k].series.locked)
            fprintf(stderr,
                    "eerl sim: seed %llu (%zu/%lu): locked %s (gen/train MHz) after update %llu\n",
                    (unsigned long long)seeds[k], k + 1, n_seeds,
                    eerl_cli_setting_str(&ctl[k].series.lock_setting, buf, sizeof(buf)),
                    (unsigned long long)ctl[k].series.lock_update);
        else
            fprintf(stderr, "eerl sim: seed %llu (%zu/%lu): no lock in %lu updates\n",
                    (unsigned long long)seeds[k], k + 1, n_seeds, updates);
        if (!ctl[k].restored || !gov[k].restored) {
            eerl_cli_err(CMD, "seed %llu: clocks were not restored when the session closed",
                         (unsigned long long)seeds[k]);
            goto out;
        }
    }
    e = eerl__an_compare(gs, cs, n_seeds, res);
    if (e == 0)
        e = eerl__an_normalize(gs, n_seeds, cs, n_seeds, res);
    if (e < 0) {
        eerl_cli_err(CMD, "analysis: %s", eerl_strerror(e));
        goto out;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    fprintf(stderr,
            "eerl sim: runs took %.1f s; oracle search (static settings, same seeds and "
            "updates)\n",
            (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    e = have_oracle ? 0
                    : eerl__sim_oracle(preset, mode, ng, nt, size[0], (unsigned)updates, seeds,
                                       n_seeds, loss, orc);
    if (e < 0) {
        eerl_cli_err(CMD, "oracle: %s", eerl_strerror(e));
        goto out;
    }
    e = eerl__sim_oracle_windowed(preset, mode, ng, nt, size[0], (unsigned)updates, seeds, n_seeds,
                                  loss, (unsigned)owin, orc, &wsc);
    if (e < 0) {
        eerl_cli_err(CMD, "windowed oracle: %s", eerl_strerror(e));
        goto out;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    {
        double capture;
        double wall = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);

        /* With the same work in a seed's two runs (divergence 0) the matched-seed comparison
         * is exact; when the runs diverge, the workload-normalized one (Appendix E) takes the
         * work out. The headline is the figure the verdict is judged on. */
        int exact = divergence == 0;
        const struct eerl__an_window *vw = eerl__an_verdict_window(res, exact);
        struct eerl__an_window ow = {(double)updates - 1, orc->saving_pct, orc->dq_pct,
                                     (unsigned)n_seeds};
        struct eerl__an_window oww = {(double)updates - 1, wsc.saving_pct, wsc.dq_pct,
                                      (unsigned)n_seeds};
        struct eerl_cli_oracle oracle = {&ow,  &orc->setting, orc->seed_saving_pct,
                                         &oww, wsc.window,    wsc.changes};

        capture = orc->saving_pct > 0 ? vw->saving_pct / orc->saving_pct : NAN;
        if (json) {
            json_t *j = eerl__an_result_json(res, exact, loss), *o, *wl, *sj;
            int pkbv[3];

            json_object_set_new(j, "model", json_string(model));
            json_object_set_new(j, "gpu", json_string(gpu));
            json_object_set_new(j, "mode", json_string(mode_s));
            json_object_set_new(j, "alloc", json_string(alloc));
            json_object_set_new(j, "n_gen", json_integer(ng));
            json_object_set_new(j, "n_train", json_integer(nt));
            json_object_set_new(j, "size", json_string(size));
            wl = json_object();
            size_pkb(preset, size[0], pkbv);
            json_object_set_new(wl, "size", json_string(size));
            json_object_set_new(wl, "P", json_integer(pkbv[0]));
            json_object_set_new(wl, "K", json_integer(pkbv[1]));
            json_object_set_new(wl, "B", json_integer(pkbv[2]));
            json_object_set_new(wl, "scenario", json_string(eerl__wl_scenario_name(scn.kind)));
            if (scn.kind != EERL__WL_STEADY)
                json_object_set_new(wl, "factor", json_real(scn.factor));
            if (scn.kind == EERL__WL_GROWING)
                json_object_set_new(wl, "over_updates", json_integer(scn.span));
            if (scn.kind == EERL__WL_COLLAPSING) {
                json_object_set_new(wl, "spread", json_real(scn.spread));
                json_object_set_new(wl, "tau_updates", json_real(scn.tau));
            }
            if (scn.kind == EERL__WL_STEP)
                json_object_set_new(wl, "step_at", json_integer(scn.at + 1));
            json_object_set_new(j, "workload", wl);
            json_object_set_new(j, "updates", json_integer((json_int_t)updates));
            json_object_set_new(j, "first_update", json_integer(EERL__AN_FIRST_UPDATE));
            json_object_set_new(j, "n_seeds", json_integer((json_int_t)n_seeds));
            json_object_set_new(j, "allowed_loss", json_real(loss));
            json_object_set_new(j, "strategy", json_string(strategy_s));
            json_object_set_new(j, "divergence", json_real(divergence));
            o = eerl__an_window_json(&ow, &orc->setting, 0);
            json_object_set_new(j, "oracle", o);
            json_object_set_new(j, "capture_ratio", eerl__an_num(capture));
            json_object_set_new(j, "oracle_windowed", sim_schedule_json(preset, mode, &wsc));
            json_object_set_new(
                j, "capture_ratio_windowed",
                eerl__an_num(wsc.saving_pct > 0 ? vw->saving_pct / wsc.saving_pct : NAN));
            json_array_foreach(json_object_get(j, "seeds"), k, sj)
            {
                json_t *oj = json_object();

                json_object_set_new(oj, "setting", eerl__an_setting_json(&orc->setting));
                json_object_set_new(oj, "saving_pct", eerl__an_num(orc->seed_saving_pct[k]));
                json_object_set_new(oj, "dq_pct", eerl__an_num(orc->seed_dq_pct[k]));
                json_object_set_new(sj, "oracle", oj);
                oj = json_object();
                json_object_set_new(oj, "saving_pct", eerl__an_num(wsc.seed_saving_pct[k]));
                json_object_set_new(oj, "dq_pct", eerl__an_num(wsc.seed_dq_pct[k]));
                json_object_set_new(sj, "oracle_windowed", oj);
                json_object_set_new(
                    sj, "capture_ratio",
                    eerl__an_num(orc->seed_saving_pct[k] > 0
                                     ? res->seed[k].whole.saving_pct / orc->seed_saving_pct[k]
                                     : NAN));
            }
            json_object_set_new(j, "wall_s", json_real(wall));
            eerl_cli_print_json(j);
        } else {
            char range[32];

            printf("eerl sim: %s on %s, %s %s, workload %s (P/K/B %s), %lu updates, %lu seed%s, "
                   "allowed loss %g%%\n",
                   model, gpu, mode_s, alloc, size, size_desc(preset, size[0], pkb, sizeof(pkb)),
                   updates, n_seeds, n_seeds == 1 ? "" : "s", loss * 100);
            if (scn.kind != EERL__WL_STEADY)
                printf("workload drift: %s\n", scn_desc);
            snprintf(range, sizeof(range), "%d-%lu", EERL__AN_FIRST_UPDATE, updates);
            eerl_cli_print_comparison(res, exact, divergence, loss, range, &oracle);
            if (trace)
                printf("\n  traces: %s/seed<N>-{governor,controller}.jsonl (eerl analyze, eerl "
                       "report, eerl replay)\n",
                       trace);
        }
        fprintf(stderr, "eerl sim: done in %.1f s (%u oracle settings evaluated)\n", wall,
                orc->evaluated);
    }
    rc = EERL_EXIT_OK;
out:
    if (gov)
        for (k = 0; k < n_seeds; k++)
            eerl__sim_run_free(&gov[k]);
    if (ctl)
        for (k = 0; k < n_seeds; k++)
            eerl__sim_run_free(&ctl[k]);
    free(gov);
    free(ctl);
    free(res);
    free(orc);
    eerl__sim_schedule_free(&wsc);
    eerl_twin_preset_free(preset);
    return rc;
}

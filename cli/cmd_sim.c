/* eerl sim: eerl's main job. For each seed, a governor run and a controller run on the simulated
 * cluster with matched seeds, both driven through the runtime session on the twin device (real
 * meter, actuator and controller in virtual time); then the paper's Table 4/5 view (whole run,
 * before and after the lock), the oracle (best static setting meeting the allowance on the same
 * seeds and updates) and the capture ratio. Results on stdout, progress on stderr. The figures
 * come from src/analysis/analysis.c, which `eerl analyze` runs on the traces as well. */
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
#include "eerl/options.h"
#include "eerl/tools/twin.h"
#include "cli.h"
#include "eerl/tools/analysis.h"
#include "eerl/tools/sim.h"
#include "workload_opt.h"

#define CMD "sim"
#define SEEDS_MAX 64
#define SIM_STRATEGIES "paper, eerl, governor, oracle, global-clock, linear-search"

static void usage(FILE *out)
{
    eerl_option_info al = {0};

    /* allowed_loss's default and bounds, as the option table has them */
    (void)eerl_option_info_get((size_t)eerl_option_find("allowed_loss"), &al);
    fprintf(out,
            "usage: eerl sim [--model qwen3-30b-a3b] [--gpu-model h100] [--mode disaggregated]\n"
            "                [--alloc 8/32] [--size M] [--updates 93] [--seeds 4]\n"
            "                [--strategy eerl] [--expected-updates N] [--allowed-loss %g]\n"
            "                [--trace DIR] [--json] [--oracle-window 50]\n"
            "                [--divergence 0] [--noise fitted] [--workload steady]\n"
            "                [--save-state DIR] [--resume-from DIR] [--prior DIR]\n"
            "                [--tag TAG] [--first-seed 1] [--model-file FILE]\n\n"
            "For each seed, runs the default governor and the EE-RL controller on the simulated\n"
            "cluster on the same work, both through the runtime session (meter, actuator and\n"
            "controller in virtual time), and prints the energy-per-valid-token saving and the\n"
            "throughput change over the whole run, before and after the lock (updates from 2 on,\n"
            "matched-seed geometric means), the oracle (best static setting meeting the\n"
            "allowance on the same seeds and updates) and the capture ratio (controller saving /\n"
            "oracle saving). With no options: Qwen3-30B-A3B, disaggregated 8/32 H100, medium\n"
            "workload (64/8/512), 93 updates, 4 seeds.\n"
            "  models: %s\n  GPUs:   %s\n  modes:  %s\n"
            "  --model-file FILE: a model the twin was not fitted on, built from its\n"
            "              description (parameters, layers, hidden size, heads, dense or MoE,\n"
            "              workload; docs/twin.md, as mistral-nemo-12b is) instead of --model\n"
            "  --gpu-model: the GPU model (--gpu, its earlier name, still works and is\n"
            "              deprecated: elsewhere --gpus are GPU indices)\n"
            "  --alloc: colocated takes one GPU count (32); other modes GEN/TRAIN pools (8/32)\n"
            "  --allowed-loss: fraction (%g) or percent (%g%%), above %g%% and below %g%%\n"
            "  --trace DIR: writes DIR/seed<N>-governor.jsonl and DIR/seed<N>-controller.jsonl\n"
            "               (eerl replay / eerl analyze / eerl report read them)\n"
            "  --json: one JSON object holding every figure the text prints (docs/runtime.md)\n"
            "  --divergence: run-to-run spread of log throughput between runs of one seed;\n"
            "              0 (default): a seed's runs do the same work and compare exactly;\n"
            "              above 0 (0.025 as real runs): judged on the workload-normalized rows\n"
            "  --noise: per-update noise the work cannot explain: fitted (default: the preset's\n"
            "              phase-level noise, docs/twin.md) or none (update time a function of\n"
            "              the work alone)\n" EERL_CLI_WORKLOAD_USAGE "  --strategy: %s\n"
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
            "              GPU, allocation, mode, strategy or configuration: a fresh search\n"
            "  --prior DIR: each seed's controller starts from the states earlier jobs saved\n"
            "              there (--save-state of other seeds): the entries of this model, GPU\n"
            "              model, allocation and mode give the setting it verifies after its\n"
            "              calibration instead of searching (docs/controller.md, the prior)\n"
            "  --tag TAG: the hardware identity saved states are matched on (the session's\n"
            "              resume_tag); default: the GPU's name, the pool sizes and the model\n"
            "  --first-seed N: the seeds run are N, N+1, ... (default 1)\n",
            al.defaults[EERL_MODE_DISAGGREGATED], eerl_twin_model_names(), eerl_twin_gpu_names(),
            eerl_twin_mode_names(), al.defaults[EERL_MODE_DISAGGREGATED],
            100 * al.defaults[EERL_MODE_DISAGGREGATED], 100 * al.min, 100 * al.max, SIM_STRATEGIES);
}

static int known(const char *opt)
{
    static const char *const opts[] = {
        "--model",       "--gpu",           "--gpu-model",        "--mode",    "--alloc",
        "--size",        "--trace",         "--strategy",         "--updates", "--seeds",
        "--divergence",  "--allowed-loss",  "--expected-updates", "--noise",   "--save-state",
        "--resume-from", "--oracle-window", "--model-file",       "--prior",   "--tag",
        "--first-seed"};
    size_t i;

    for (i = 0; i < sizeof(opts) / sizeof(opts[0]); i++)
        if (!strcmp(opt, opts[i]))
            return 1;
    return 0;
}

/* The table of options' upper bound of an option (eerl/options.h). */
static unsigned long option_max(const char *name)
{
    eerl_option_info info;

    if (eerl_option_info_get((size_t)eerl_option_find(name), &info) < 0)
        return 0;
    return (unsigned long)info.max;
}

static int parse_loss(const char *v, double *ret)
{
    char *end, why[160];
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
    if (eerl_option_check("allowed_loss", x, why, sizeof(why)) < 0) {
        eerl_cli_err(CMD, "--allowed-loss %s is out of range: %s (e.g. 0.02 or 2%% for 2%%)", v,
                     why);
        return -1;
    }
    *ret = x;
    return 0;
}

/* "P/K/B" of the preset's workload size (from its parameters, so every model is described). */
static const char *size_desc(const eerl_twin_preset *preset, char size, char *buf, size_t n)
{
    unsigned p = 0, k = 0, b = 0;

    eerl_twin_preset_batch(preset, size, &p, &k, &b);
    snprintf(buf, n, "%u/%u/%u", p, k, b);
    return buf;
}

/* P, K and B of the preset's workload size. */
static void size_pkb(const eerl_twin_preset *preset, char size, int ret[3])
{
    unsigned p = 0, k = 0, b = 0;

    eerl_twin_preset_batch(preset, size, &p, &k, &b);
    ret[0] = (int)p;
    ret[1] = (int)k;
    ret[2] = (int)b;
}

/* The windowed oracle for --json: its figures and the schedule as the settings in force from
 * each change on (1-based updates). */
static json_t *sim_schedule_json(const eerl_twin_preset *preset, eerl_mode mode,
                                 const struct eerl_sim_schedule *s)
{
    json_t *o = json_object(), *a = json_array();
    unsigned k;

    json_object_set_new(o, "window", json_integer(s->window));
    json_object_set_new(o, "saving_pct", eerl_an_num(s->saving_pct));
    json_object_set_new(o, "dq_pct", eerl_an_num(s->dq_pct));
    json_object_set_new(o, "changes", json_integer(s->changes));
    json_object_set_new(o, "held_static", json_boolean(s->held_static));
    json_object_set_new(o, "candidates", json_integer(s->candidates));
    for (k = 0; k < s->n_windows; k++) {
        eerl_setting st;
        json_t *e;

        if (k > 0 && s->gen_mhz[k] == s->gen_mhz[k - 1] && s->train_mhz[k] == s->train_mhz[k - 1])
            continue;
        eerl_sim_schedule_setting(preset, mode, s, k, &st);
        e = json_object();
        json_object_set_new(e, "from_update", json_integer((json_int_t)k * s->window + 1));
        json_object_set_new(e, "setting", eerl_an_setting_json(&st));
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

/* ---- the command ------------------------------------------------------------------------- */

/* What the options say. */
struct sim_opts {
    const char *model, *gpu, *mode_s, *alloc, *size, *trace, *strategy_s, *save_dir, *resume_dir,
        *model_file, *prior, *tag;
    unsigned long updates, n_seeds, expected, owin, first_seed;
    double loss, divergence;
    unsigned noise;
    int json, alloc_given;
    struct eerl_cli_workload wopt;
};

/* What the runs need and make. */
struct sim_job {
    eerl_twin_mode mode;
    eerl_strategy strategy;
    int oracle_run, have_oracle, made_dir;
    eerl_twin_preset *preset;
    unsigned ng, nt;
    uint64_t seeds[SEEDS_MAX];
    struct eerl_twin_scenario scn;
    char scn_desc[128];
    struct eerl_sim_run *gov, *ctl;
    const struct eerl_an_series *gs[SEEDS_MAX], *cs[SEEDS_MAX];
    struct eerl_an_result *res;
    struct eerl_sim_oracle *orc;
    struct eerl_sim_schedule wsc;
    struct timespec t0;
};

static double since(const struct timespec *t0)
{
    struct timespec t1;

    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
}

/* An option that takes a value; 0 when it is not one of them, -1 on a bad value (said). */
static int value_opt(const char *a, const char *v, struct sim_opts *o)
{
    const char **str[] = {&o->model,      &o->gpu,   &o->gpu,        &o->mode_s,   &o->alloc,
                          &o->size,       &o->trace, &o->strategy_s, &o->save_dir, &o->resume_dir,
                          &o->model_file, &o->prior, &o->tag};
    static const char *const str_opts[] = {
        "--model",      "--gpu-model", "--gpu",      "--mode",       "--alloc",
        "--size",       "--trace",     "--strategy", "--save-state", "--resume-from",
        "--model-file", "--prior",     "--tag"};
    size_t i;

    for (i = 0; i < sizeof(str_opts) / sizeof(str_opts[0]); i++)
        if (!strcmp(a, str_opts[i])) {
            *str[i] = v;
            o->alloc_given |= str[i] == &o->alloc;
            return 1;
        }
    if (!strcmp(a, "--allowed-loss"))
        return parse_loss(v, &o->loss) < 0 ? -1 : 1;
    if (!strcmp(a, "--updates"))
        return eerl_cli_parse_uint(CMD, a, v, 1, 100000, &o->updates) < 0 ? -1 : 1;
    if (!strcmp(a, "--expected-updates"))
        return eerl_cli_parse_uint(CMD, a, v, 1, option_max("expected_updates"), &o->expected) < 0
                   ? -1
                   : 1;
    if (!strcmp(a, "--oracle-window"))
        return eerl_cli_parse_uint(CMD, a, v, 1, 100000, &o->owin) < 0 ? -1 : 1;
    if (!strcmp(a, "--first-seed"))
        return eerl_cli_parse_uint(CMD, a, v, 1, 1000000000, &o->first_seed) < 0 ? -1 : 1;
    if (!strcmp(a, "--seeds"))
        return eerl_cli_parse_uint(CMD, a, v, 1, SEEDS_MAX, &o->n_seeds) < 0 ? -1 : 1;
    if (!strcmp(a, "--noise")) {
        if (eerl_twin_noise_parse(v, &o->noise) == 0)
            return 1;
        eerl_cli_err(CMD, "unknown noise model '%s'; valid: none, fitted", v);
        return -1;
    }
    if (!strcmp(a, "--divergence"))
        return eerl_cli_parse_double(CMD, a, v, 0, 0.5, &o->divergence) < 0 ? -1 : 1;
    return 0;
}

/* Returns -1 to go on, else the exit code (help printed, or a usage error said). */
static int parse_args(int argc, char **argv, struct sim_opts *o)
{
    int i, e;

    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;

        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return EERL_EXIT_OK;
        } else if (!strcmp(a, "--json")) {
            o->json = 1;
            continue;
        } else if ((e = eerl_cli_workload_opt(CMD, a, v, &o->wopt)) != 0) {
            if (e < 0)
                return EERL_EXIT_USAGE;
        } else if (!known(a)) {
            eerl_cli_err(CMD, "unknown option '%s'; see eerl sim --help", a);
            return EERL_EXIT_USAGE;
        } else if (!v) {
            eerl_cli_err(CMD, "option '%s' needs a value; see eerl sim --help", a);
            return EERL_EXIT_USAGE;
        } else if ((e = value_opt(a, v, o)) <= 0) {
            if (e == 0)
                eerl_cli_err(CMD, "unknown option '%s'; see eerl sim --help", a);
            return EERL_EXIT_USAGE;
        }
        i++;
    }
    return -1;
}

/* The strategy, the cluster, the workload and the preset the options name; -1 when one is bad
 * (said). */
static int resolve(struct sim_opts *o, struct sim_job *j)
{
    unsigned calib;
    size_t k;
    int e;

    if (!strcmp(o->strategy_s, "oracle")) {
        j->oracle_run = 1;
        j->strategy = EERL_STRATEGY_STATIC;
    } else if (!strcmp(o->strategy_s, "static") ||
               eerl_strategy_from_name(o->strategy_s, &j->strategy) < 0) {
        eerl_cli_err(CMD, "unknown strategy '%s'; valid strategies: %s", o->strategy_s,
                     SIM_STRATEGIES);
        return -1;
    }
    if (!o->alloc_given && eerl_twin_mode_parse(o->mode_s, &j->mode) == 0 &&
        j->mode == EERL_TWIN_COLOCATED)
        o->alloc = "32";
    if (eerl_cli_twin_target(CMD, o->model_file ? NULL : o->model, o->gpu, o->mode_s, o->size,
                             o->alloc, EERL_TWIN_GPUS_LIMIT, &j->mode, &j->ng, &j->nt) < 0)
        return -1;
    calib = eerl_sim_calibration_updates(j->mode);
    if (o->updates <= calib) {
        eerl_cli_err(CMD,
                     "--updates %lu is not more than the controller's calibration (%u updates in "
                     "%s mode): the controller would never leave the governor; give more than %u",
                     o->updates, calib, o->mode_s, calib);
        return -1;
    }
    if (eerl_cli_workload_resolve(CMD, &o->wopt, o->updates, &j->scn) < 0)
        return -1;
    eerl_cli_workload_desc(&j->scn, j->scn_desc, sizeof(j->scn_desc));
    for (k = 0; k < o->n_seeds; k++)
        j->seeds[k] = o->first_seed + k;
    if (o->model_file) {
        if (eerl_cli_model_file(CMD, o->model_file, o->gpu, NULL, &j->preset))
            return -1;
        o->model = eerl_twin_preset_model(j->preset);
        e = 0;
    } else {
        e = eerl_twin_preset_new(o->model, o->gpu, NULL, &j->preset);
    }
    if (e < 0) {
        eerl_cli_err(CMD, "no preset for %s on %s in the built-in parameters: %s", o->model, o->gpu,
                     eerl_strerror(e));
        return -1;
    }
    e = eerl_twin_preset_set_scenario(j->preset, &j->scn);
    if (e < 0) {
        eerl_cli_err(CMD, "--workload %s: %s", j->scn_desc, eerl_strerror(e));
        return -1;
    }
    return 0;
}

/* --resume-from must name a directory. */
static int check_resume_dir(const char *dir)
{
    struct stat st;
    int bad;

    if (!dir)
        return 0;
    bad = stat(dir, &st) != 0 ? errno : 0;
    if (bad || !S_ISDIR(st.st_mode)) {
        eerl_cli_err(CMD, "--resume-from '%s' is not a directory%s%s", dir, bad ? ": " : "",
                     bad ? strerror(bad) : "");
        return EERL_EXIT_USAGE;
    }
    return 0;
}

/* --save-state: the directory, made if missing. */
static int prepare_save_dir(const char *dir)
{
    struct stat st;

    if (!dir)
        return 0;
    if (stat(dir, &st) != 0 && mkdir(dir, 0777) != 0) {
        eerl_cli_err(CMD, "cannot create state directory '%s': %s", dir, strerror(errno));
        return EERL_EXIT_FAIL;
    } else if (stat(dir, &st) == 0 && !S_ISDIR(st.st_mode)) {
        eerl_cli_err(CMD, "--save-state '%s' is not a directory", dir);
        return EERL_EXIT_USAGE;
    }
    return 0;
}

/* --trace: the directory, made if missing (*made_dir), and writable. */
/* The first of the seeds' trace files that exists already, into buf; 0 when none does. The
 * runtime never overwrites a trace, so a rerun into a used directory is refused up front, and
 * every trace file there after the check is this run's (remove_traces may remove it). */
static int existing_trace(const char *dir, const uint64_t *seeds, size_t n, char *buf, size_t len)
{
    static const char *const roles[] = {"governor", "controller"};
    struct stat st;
    size_t i, r;

    for (i = 0; i < n; i++)
        for (r = 0; r < 2; r++) {
            snprintf(buf, len, "%s/seed%llu-%s.jsonl", dir, (unsigned long long)seeds[i], roles[r]);
            if (lstat(buf, &st) == 0)
                return 1;
        }
    return 0;
}

static int prepare_trace_dir(const char *dir, const uint64_t *seeds, size_t n, int *made_dir)
{
    struct stat st;
    char probe[4096];
    int fd;

    if (!dir)
        return 0;
    if (stat(dir, &st) != 0) {
        if (mkdir(dir, 0777) != 0) {
            eerl_cli_err(CMD, "cannot create trace directory '%s': %s", dir, strerror(errno));
            return EERL_EXIT_FAIL;
        }
        *made_dir = 1;
    } else if (!S_ISDIR(st.st_mode)) {
        eerl_cli_err(CMD, "--trace '%s' is not a directory; give a directory for the traces", dir);
        return EERL_EXIT_FAIL;
    } else if (existing_trace(dir, seeds, n, probe, sizeof(probe))) {
        eerl_cli_err(CMD,
                     "'%s' exists from an earlier run: eerl never overwrites a trace; give "
                     "--trace another directory, or move the earlier traces away",
                     probe);
        return EERL_EXIT_FAIL;
    }
    snprintf(probe, sizeof(probe), "%s/.eerl-sim-probe-XXXXXX", dir);
    fd = mkstemp(probe); /* a fresh name: nothing there is touched */
    if (fd < 0) {
        eerl_cli_err(CMD, "cannot write traces in '%s': %s", dir, strerror(errno));
        if (*made_dir)
            rmdir(dir);
        return EERL_EXIT_FAIL;
    }
    close(fd);
    unlink(probe);
    return 0;
}

/* The trace header's "run" object of one run. */
static void trace_meta(const struct sim_opts *o, const struct sim_job *j, size_t k, int role,
                       char *meta, size_t len)
{
    int sc = j->scn.kind != 0;

    snprintf(meta, len,
             "{\"role\":\"%s\",\"seed\":%llu,\"model\":\"%s\",\"gpu\":\"%s\","
             "\"alloc\":\"%s\",\"size\":\"%s\",\"updates\":%lu,\"divergence\":%.17g,"
             "%s%s%s%s\"backend\":\"twin\"}",
             role ? "controller" : "governor", (unsigned long long)j->seeds[k], o->model, o->gpu,
             o->alloc, o->size, o->updates, o->divergence, o->noise ? "\"noise\":\"fitted\"," : "",
             sc ? "\"scenario\":\"" : "", sc ? eerl_twin_scenario_name(j->scn.kind) : "",
             sc ? "\"," : "");
}

/* Seed k's run configuration (without its role); spath holds the state files' paths. */
static void seed_config(const struct sim_opts *o, const struct sim_job *j, size_t k,
                        struct eerl_sim_config *c, char spath[2][4096])
{
    memset(c, 0, sizeof(*c));
    c->preset = j->preset;
    c->mode = j->mode;
    c->n_gen = j->ng;
    c->n_train = j->nt;
    c->size = o->size[0];
    c->updates = (unsigned)o->updates;
    c->seed = j->seeds[k];
    c->divergence = o->divergence;
    c->noise = o->noise;
    c->allowed_loss = o->loss;
    c->strategy = j->strategy;
    c->expected_updates = (unsigned)o->expected;
    if (j->oracle_run)
        c->static_setting = j->orc->setting;
    if (o->resume_dir) {
        snprintf(spath[0], 4096, "%s/seed%llu-controller.state", o->resume_dir,
                 (unsigned long long)j->seeds[k]);
        c->resume_from = spath[0];
    }
    c->prior = o->prior;
    c->job_model = o->model;
    c->resume_tag = o->tag;
    if (o->save_dir) {
        snprintf(spath[1], 4096, "%s/seed%llu-controller.state", o->save_dir,
                 (unsigned long long)j->seeds[k]);
        c->save_state = spath[1];
    }
}

/* Seed k's progress line(s) on stderr. */
static void seed_progress(const struct sim_opts *o, const struct sim_job *j, size_t k)
{
    const struct eerl_sim_run *c = &j->ctl[k];
    unsigned long long seed = (unsigned long long)j->seeds[k];
    char buf[64];

    if (o->resume_dir)
        fprintf(stderr, "eerl sim: seed %llu (%zu/%lu): %s%s\n", seed, k + 1, o->n_seeds,
                c->resumed ? "" : "not resumed: ", c->resume_detail);
    if (o->prior)
        fprintf(stderr, "eerl sim: seed %llu (%zu/%lu): %s%s\n", seed, k + 1, o->n_seeds,
                c->prior ? "" : "no prior: ", c->prior_detail);
    if (c->series.locked)
        fprintf(stderr,
                "eerl sim: seed %llu (%zu/%lu): locked %s (gen/train MHz) after update %llu\n",
                seed, k + 1, o->n_seeds,
                eerl_cli_setting_str(&c->series.lock_setting, buf, sizeof(buf)),
                (unsigned long long)c->series.lock_update);
    else
        fprintf(stderr, "eerl sim: seed %llu (%zu/%lu): no lock in %lu updates\n", seed, k + 1,
                o->n_seeds, o->updates);
}

/* Seed k's governor run and controller run; -1 on failure (said; the traces removed). */
static int run_seed(const struct sim_opts *o, struct sim_job *j, size_t k)
{
    struct eerl_sim_config c;
    char path[2][4096], meta[512], spath[2][4096], why[1024];
    int role;

    seed_config(o, j, k, &c, spath);
    for (role = 0; role < 2; role++) {
        c.controller = role;
        snprintf(path[role], sizeof(path[role]), "%s/seed%llu-%s.jsonl", o->trace ? o->trace : ".",
                 (unsigned long long)j->seeds[k], role ? "controller" : "governor");
        trace_meta(o, j, k, role, meta, sizeof(meta));
        c.trace_path = o->trace ? path[role] : NULL;
        c.trace_run_json = meta;
        if (eerl_sim_run(&c, role ? &j->ctl[k] : &j->gov[k], why, sizeof(why)) < 0) {
            eerl_cli_err(CMD, "seed %llu, %s run: %s", (unsigned long long)j->seeds[k],
                         role ? "controller" : "governor", why);
            remove_traces(o->trace, j->seeds, o->n_seeds, j->made_dir);
            return -1;
        }
    }
    j->gs[k] = &j->gov[k].series;
    j->cs[k] = &j->ctl[k].series;
    seed_progress(o, j, k);
    if (!j->ctl[k].restored || !j->gov[k].restored) {
        eerl_cli_err(CMD, "seed %llu: clocks were not restored when the session closed",
                     (unsigned long long)j->seeds[k]);
        return -1;
    }
    return 0;
}

/* The static oracle (once) and the windowed one over the same seeds and updates. */
static int oracles(const struct sim_opts *o, struct sim_job *j, int windowed)
{
    int e;

    if (!j->have_oracle) {
        e = eerl_sim_oracle(j->preset, j->mode, j->ng, j->nt, o->size[0], (unsigned)o->updates,
                            j->seeds, o->n_seeds, o->loss, j->orc);
        if (e < 0) {
            eerl_cli_err(CMD, "oracle: %s", eerl_strerror(e));
            return -1;
        }
        j->have_oracle = 1;
    }
    if (!windowed)
        return 0;
    e = eerl_sim_oracle_windowed(j->preset, j->mode, j->ng, j->nt, o->size[0], (unsigned)o->updates,
                                 j->seeds, o->n_seeds, o->loss, (unsigned)o->owin, j->orc, &j->wsc);
    if (e < 0) {
        eerl_cli_err(CMD, "windowed oracle: %s", eerl_strerror(e));
        return -1;
    }
    return 0;
}

/* Every seed's runs, the comparison, the oracles. */
static int run_all(const struct sim_opts *o, struct sim_job *j)
{
    size_t k;
    int e;

    j->gov = calloc(o->n_seeds, sizeof(*j->gov));
    j->ctl = calloc(o->n_seeds, sizeof(*j->ctl));
    j->res = calloc(1, sizeof(*j->res));
    j->orc = calloc(1, sizeof(*j->orc));
    if (!j->gov || !j->ctl || !j->res || !j->orc) {
        eerl_cli_err(CMD, "out of memory");
        return -1;
    }
    fprintf(stderr,
            "eerl sim: %lu seed%s, each a governor run and a controller run (%s), then "
            "the oracle search; the results follow on stdout\n",
            o->n_seeds, o->n_seeds == 1 ? "" : "s", o->strategy_s);
    if (j->oracle_run && oracles(o, j, 0) < 0)
        return -1;
    for (k = 0; k < o->n_seeds; k++)
        if (run_seed(o, j, k) < 0)
            return -1;
    e = eerl_an_compare(j->gs, j->cs, o->n_seeds, j->res);
    if (e == 0)
        e = eerl_an_normalize(j->gs, o->n_seeds, j->cs, o->n_seeds, j->res);
    if (e < 0) {
        eerl_cli_err(CMD, "analysis: %s", eerl_strerror(e));
        return -1;
    }
    fprintf(stderr,
            "eerl sim: runs took %.1f s; oracle search (static settings, same seeds and "
            "updates)\n",
            since(&j->t0));
    return oracles(o, j, 1);
}

/* --json's "workload" object. */
static json_t *workload_json(const struct sim_opts *o, const struct sim_job *j)
{
    const struct eerl_twin_scenario *scn = &j->scn;
    json_t *wl = json_object();
    int pkbv[3];

    size_pkb(j->preset, o->size[0], pkbv);
    json_object_set_new(wl, "size", json_string(o->size));
    json_object_set_new(wl, "P", json_integer(pkbv[0]));
    json_object_set_new(wl, "K", json_integer(pkbv[1]));
    json_object_set_new(wl, "B", json_integer(pkbv[2]));
    json_object_set_new(wl, "scenario", json_string(eerl_twin_scenario_name(scn->kind)));
    if (scn->kind != EERL_TWIN_SCENARIO_STEADY)
        json_object_set_new(wl, "factor", json_real(scn->factor));
    if (scn->kind == EERL_TWIN_SCENARIO_GROWING)
        json_object_set_new(wl, "over_updates", json_integer(scn->span));
    if (scn->kind == EERL_TWIN_SCENARIO_COLLAPSING) {
        json_object_set_new(wl, "spread", json_real(scn->spread));
        json_object_set_new(wl, "tau_updates", json_real(scn->tau));
    }
    if (scn->kind == EERL_TWIN_SCENARIO_STEP)
        json_object_set_new(wl, "step_at", json_integer(scn->at + 1));
    return wl;
}

/* Each seed's oracle figures, added to --json's "seeds" entries. */
static void seeds_json(json_t *j_out, const struct sim_job *j)
{
    const struct eerl_sim_oracle *orc = j->orc;
    size_t k;
    json_t *sj;

    json_array_foreach(json_object_get(j_out, "seeds"), k, sj)
    {
        json_t *oj = json_object();

        json_object_set_new(oj, "setting", eerl_an_setting_json(&orc->setting));
        json_object_set_new(oj, "saving_pct", eerl_an_num(orc->seed_saving_pct[k]));
        json_object_set_new(oj, "dq_pct", eerl_an_num(orc->seed_dq_pct[k]));
        json_object_set_new(sj, "oracle", oj);
        oj = json_object();
        json_object_set_new(oj, "saving_pct", eerl_an_num(j->wsc.seed_saving_pct[k]));
        json_object_set_new(oj, "dq_pct", eerl_an_num(j->wsc.seed_dq_pct[k]));
        json_object_set_new(sj, "oracle_windowed", oj);
        json_object_set_new(
            sj, "capture_ratio",
            eerl_an_num(orc->seed_saving_pct[k] > 0
                            ? j->res->seed[k].whole.saving_pct / orc->seed_saving_pct[k]
                            : NAN));
    }
}

/* --json: one object holding every figure the text prints. */
static void print_json(const struct sim_opts *o, const struct sim_job *j, int exact,
                       const struct eerl_an_window *vw, const struct eerl_an_window *ow,
                       double wall)
{
    json_t *out = eerl_an_result_json(j->res, exact, o->loss);
    double capture = j->orc->saving_pct > 0 ? vw->saving_pct / j->orc->saving_pct : NAN;

    json_object_set_new(out, "model", json_string(o->model));
    json_object_set_new(out, "gpu", json_string(o->gpu));
    json_object_set_new(out, "mode", json_string(o->mode_s));
    json_object_set_new(out, "alloc", json_string(o->alloc));
    json_object_set_new(out, "n_gen", json_integer(j->ng));
    json_object_set_new(out, "n_train", json_integer(j->nt));
    json_object_set_new(out, "size", json_string(o->size));
    json_object_set_new(out, "workload", workload_json(o, j));
    json_object_set_new(out, "updates", json_integer((json_int_t)o->updates));
    json_object_set_new(out, "first_update", json_integer(EERL_AN_FIRST_UPDATE));
    json_object_set_new(out, "n_seeds", json_integer((json_int_t)o->n_seeds));
    json_object_set_new(out, "allowed_loss", json_real(o->loss));
    json_object_set_new(out, "strategy", json_string(o->strategy_s));
    json_object_set_new(out, "divergence", json_real(o->divergence));
    json_object_set_new(out, "oracle", eerl_an_window_json(ow, &j->orc->setting, 0));
    json_object_set_new(out, "capture_ratio", eerl_an_num(capture));
    json_object_set_new(out, "oracle_windowed", sim_schedule_json(j->preset, j->mode, &j->wsc));
    json_object_set_new(
        out, "capture_ratio_windowed",
        eerl_an_num(j->wsc.saving_pct > 0 ? vw->saving_pct / j->wsc.saving_pct : NAN));
    seeds_json(out, j);
    json_object_set_new(out, "wall_s", json_real(wall));
    eerl_cli_print_json(out);
}

/* The text: what ran, the comparison with the oracles, where the traces are. */
static void print_text(const struct sim_opts *o, const struct sim_job *j, int exact,
                       const struct eerl_cli_oracle *oracle)
{
    char range[32], pkb[48];

    printf("eerl sim: %s on %s, %s %s, workload %s (P/K/B %s), %lu updates, %lu seed%s, "
           "allowed loss %g%%\n",
           o->model, o->gpu, o->mode_s, o->alloc, o->size,
           size_desc(j->preset, o->size[0], pkb, sizeof(pkb)), o->updates, o->n_seeds,
           o->n_seeds == 1 ? "" : "s", o->loss * 100);
    if (j->scn.kind != EERL_TWIN_SCENARIO_STEADY)
        printf("workload drift: %s\n", j->scn_desc);
    snprintf(range, sizeof(range), "%d-%lu", EERL_AN_FIRST_UPDATE, o->updates);
    eerl_cli_print_comparison(j->res, exact, o->divergence, o->loss, range, oracle);
    if (o->trace)
        printf("\n  traces: %s/seed<N>-{governor,controller}.jsonl (eerl analyze, eerl "
               "report, eerl replay)\n",
               o->trace);
}

/* The results, on stdout. With the same work in a seed's two runs (divergence 0) the
 * matched-seed comparison is exact; when the runs diverge, the workload-normalized one (Appendix
 * E) takes the work out. The headline is the figure the verdict is judged on. */
static void print_results(const struct sim_opts *o, const struct sim_job *j)
{
    double wall = since(&j->t0);
    int exact = o->divergence == 0;
    const struct eerl_an_window *vw = eerl_an_verdict_window(j->res, exact);
    struct eerl_an_window ow = {(double)o->updates - 1, j->orc->saving_pct, j->orc->dq_pct,
                                (unsigned)o->n_seeds};
    struct eerl_an_window oww = {(double)o->updates - 1, j->wsc.saving_pct, j->wsc.dq_pct,
                                 (unsigned)o->n_seeds};
    struct eerl_cli_oracle oracle = {&ow,  &j->orc->setting, j->orc->seed_saving_pct,
                                     &oww, j->wsc.window,    j->wsc.changes};

    if (o->json)
        print_json(o, j, exact, vw, &ow, wall);
    else
        print_text(o, j, exact, &oracle);
    fprintf(stderr, "eerl sim: done in %.1f s (%u oracle settings evaluated)\n", wall,
            j->orc->evaluated);
}

static void job_free(const struct sim_opts *o, struct sim_job *j)
{
    size_t k;

    if (j->gov)
        for (k = 0; k < o->n_seeds; k++)
            eerl_sim_run_free(&j->gov[k]);
    if (j->ctl)
        for (k = 0; k < o->n_seeds; k++)
            eerl_sim_run_free(&j->ctl[k]);
    free(j->gov);
    free(j->ctl);
    free(j->res);
    free(j->orc);
    eerl_sim_schedule_free(&j->wsc);
    eerl_twin_preset_free(j->preset);
}

/* The directories the options name, checked or made; 0 or the exit code. */
static int prepare_dirs(const struct sim_opts *o, struct sim_job *j)
{
    int rc = check_resume_dir(o->resume_dir);
    struct stat st;

    if (rc == 0 && o->prior && stat(o->prior, &st) != 0) {
        eerl_cli_err(CMD, "--prior '%s': %s", o->prior, strerror(errno));
        return EERL_EXIT_USAGE;
    }

    if (rc == 0)
        rc = prepare_save_dir(o->save_dir);
    if (rc == 0)
        rc = prepare_trace_dir(o->trace, j->seeds, o->n_seeds, &j->made_dir);
    return rc;
}

int eerl_cmd_sim(int argc, char **argv)
{
    struct sim_opts o = {.model = "qwen3-30b-a3b",
                         .gpu = "h100",
                         .mode_s = "disaggregated",
                         .alloc = "8/32",
                         .size = "M",
                         .strategy_s = "eerl",
                         .updates = 93,
                         .n_seeds = 4,
                         .first_seed = 1,
                         .owin = 50,
                         .loss = -1, /* the table of options' default */
                         .noise = EERL_TWIN_NOISE_FITTED};
    struct sim_job *j = calloc(1, sizeof(*j));
    int rc;

    if (!j) {
        eerl_cli_err(CMD, "out of memory");
        return EERL_EXIT_FAIL;
    }
    clock_gettime(CLOCK_MONOTONIC, &j->t0);
    rc = parse_args(argc, argv, &o);
    if (o.loss < 0) {
        eerl_option_info info;
        (void)eerl_option_info_get((size_t)eerl_option_find("allowed_loss"), &info);
        o.loss = info.defaults[0];
    }
    if (rc < 0) {
        rc = resolve(&o, j) < 0 ? EERL_EXIT_USAGE : prepare_dirs(&o, j);
        if (rc == 0 && run_all(&o, j) < 0)
            rc = EERL_EXIT_FAIL;
        else if (rc == 0)
            print_results(&o, j);
    }
    job_free(&o, j);
    free(j);
    return rc;
}

/* Controllers side by side (issues 9 and 24): every strategy of `eerl sim --strategy` on the four
 * Table 4 configurations the twin covers (Qwen3-30B-A3B on H100: colocated 32, disaggregated
 * 8/32, drained 8/24, in-flight 16/32, with the paper's workload sizes), at the paper's update
 * counts and, on request, over production horizons (1000, 3000 updates) and the twin's workload
 * drift scenarios (docs/twin.md); 8 seeds each, the same workloads for every strategy (matched
 * seeds, divergence 0 so that a seed's governor and controller runs differ only by the clocks:
 * the figures are the strategies' own effect). One table: whole-run saving and throughput change
 * (updates 2-N, matched-seed geometric means), the share of seeds whose whole run stays within
 * the 2% allowance, the capture ratio against the static oracle (best static setting, found
 * offline on the same seeds and updates; above 1.0 where a controller follows a drifting run
 * better than any one setting) and against the windowed oracle (best schedule changing setting
 * every --window updates within the same allowance), and the allowance left unused (2 + dq, in
 * points). Strategies that budget against the horizon are told the run's length. Progress on
 * stderr. Prints figures; never fails on how they compare.
 *
 *   bench_controllers [SEEDS] [--noise none|fitted] [--modes LIST] [--lengths LIST]
 *                     [--workloads LIST] [--strategies LIST] [--window W] [--jobs N]
 *                     [--horizons]
 *
 * SEEDS 8 by default. --noise fitted (default): the governor and controller runs carry the twin's
 * fitted per-update noise (docs/twin.md); the oracles stay on the noise-free twin; --noise none
 * runs them noise-free too. LISTs are
 * comma-separated: modes colocated, disaggregated, drained, inflight (default all); lengths
 * "paper" (each mode's Table 4 count) or update counts (default paper); workloads steady,
 * growing, collapsing, step with their defaults for the length (default steady); strategies
 * governor, oracle, global-clock, linear-search, paper, eerl (default all). --horizons is
 * --lengths paper,1000,3000 --workloads steady,growing,collapsing,step. --jobs N runs N blocks
 * (one configuration, length and workload each) at once on threads (default 1); the table
 * keeps its order. With --noise none and the other defaults the rows are those of the table before
 * horizons existed. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "eerl/error.h"
#include "eerl/tools/analysis.h"
#include "eerl/tools/sim.h"
#include "eerl/tools/twin.h"

struct row {
    const char *name, *mode_name;
    eerl_mode mode;
    unsigned n_gen, n_train;
    char size;
    unsigned updates;
};

static const struct row rows[] = {
    {"colocated 32", "colocated", EERL_MODE_COLOCATED, 32, 0, 'M', 107},
    {"disaggregated 8/32", "disaggregated", EERL_MODE_DISAGGREGATED, 8, 32, 'M', 93},
    {"drained 8/24", "drained", EERL_MODE_DRAINED, 8, 24, 'S', 175},
    {"in-flight 16/32", "inflight", EERL_MODE_INFLIGHT, 16, 32, 'S', 335},
};
#define NROWS (sizeof(rows) / sizeof(rows[0]))

struct strat {
    const char *name;
    eerl_strategy s;
    int oracle;
};

static const struct strat strats[] = {
    {"governor", EERL_STRATEGY_GOVERNOR, 0},
    {"oracle", EERL_STRATEGY_STATIC, 1},
    {"global-clock", EERL_STRATEGY_GLOBAL_CLOCK, 0},
    {"linear-search", EERL_STRATEGY_LINEAR_SEARCH, 0},
    {"paper", EERL_STRATEGY_PAPER, 0},
    {"eerl", EERL_STRATEGY_EERL, 0},
};

#define NSTRAT (sizeof(strats) / sizeof(strats[0]))
#define SEEDS_MAX 64
#define LENGTHS_MAX 8

/* What to run (the options). */
static unsigned noise = EERL_TWIN_NOISE_FITTED, n_seeds = 8, window = 50, jobs = 1;
static int want_mode[NROWS], want_strat[NSTRAT], want_wl[EERL_TWIN_SCENARIO_COUNT];
static unsigned lengths[LENGTHS_MAX]; /* 0: the paper's */
static size_t n_lengths;

/* One block of the table: a configuration at a length under a workload. */
struct block {
    const struct row *row;
    unsigned updates;
    int wl;
    char *text; /* its rows, once done */
    size_t text_len;
    double secs;
    int done, failed;
};

static struct block *blocks;
static size_t n_blocks, next_block;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static double t_all;

static double wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int run(const eerl_twin_preset *p, const struct block *b, uint64_t seed, int controller,
               eerl_strategy s, const eerl_setting *st, struct eerl_sim_run *out)
{
    struct eerl_sim_config c;
    char why[1024];
    int e;

    memset(&c, 0, sizeof(c));
    c.preset = p;
    c.mode = b->row->mode;
    c.n_gen = b->row->n_gen;
    c.n_train = b->row->n_train;
    c.size = b->row->size;
    c.updates = b->updates;
    c.seed = seed;
    c.divergence = 0;
    c.noise = noise;
    c.controller = controller;
    c.allowed_loss = 0.02;
    c.strategy = s;
    c.expected_updates = b->updates;
    if (st)
        c.static_setting = *st;
    e = eerl_sim_run(&c, out, why, sizeof(why));
    if (e < 0)
        fprintf(stderr, "bench_controllers: %s seed %llu: %s\n", b->row->name,
                (unsigned long long)seed, why);
    return e;
}

static const char *wl_name(int wl)
{
    return eerl_twin_scenario_name(wl);
}

/* What the steps of one block share: the twin, the seeds, the governor runs, the oracles and
 * where its rows go. */
struct block_run {
    struct block *b;
    eerl_twin_preset *p;
    struct eerl_sim_run *gov;
    const struct eerl_an_series *gs[SEEDS_MAX];
    struct eerl_sim_oracle *orc;
    struct eerl_sim_schedule wsc;
    uint64_t seeds[SEEDS_MAX];
    FILE *out;
};

/* Allocates the block's state, opens its text and sets up the twin under its workload. */
static int block_open(struct block_run *x, struct block *b)
{
    struct eerl_twin_scenario scn;

    memset(x, 0, sizeof(*x));
    x->b = b;
    x->gov = calloc(n_seeds, sizeof(*x->gov));
    x->orc = calloc(1, sizeof(*x->orc));
    x->out = open_memstream(&b->text, &b->text_len);
    if (!x->gov || !x->orc || !x->out)
        return -1;
    if (eerl_twin_preset_new("qwen3-30b-a3b", "h100", NULL, &x->p) < 0)
        return -1;
    eerl_twin_scenario_default(b->wl, b->updates, &scn);
    if (eerl_twin_preset_set_scenario(x->p, &scn) < 0)
        return -1;
    return 0;
}

/* Runs the governor on every seed and finds the static and windowed oracles. */
static int block_baselines(struct block_run *x)
{
    const struct block *b = x->b;
    const struct row *row = b->row;
    size_t k;

    fprintf(stderr, "bench_controllers: %s, %u updates, %s: governor runs and oracles (%.0f s)\n",
            row->name, b->updates, wl_name(b->wl), wall() - t_all);
    for (k = 0; k < n_seeds; k++) {
        x->seeds[k] = k + 1;
        if (run(x->p, b, x->seeds[k], 0, EERL_STRATEGY_PAPER, NULL, &x->gov[k]) < 0)
            return -1;
        x->gs[k] = &x->gov[k].series;
    }
    if (eerl_sim_oracle(x->p, row->mode, row->n_gen, row->n_train, row->size, b->updates, x->seeds,
                        n_seeds, 0.02, x->orc) < 0 ||
        eerl_sim_oracle_windowed(x->p, row->mode, row->n_gen, row->n_train, row->size, b->updates,
                                 x->seeds, n_seeds, 0.02, window, x->orc, &x->wsc) < 0) {
        fprintf(stderr, "bench_controllers: %s: oracle failed\n", row->name);
        return -1;
    }
    return 0;
}

/* Sorts the first n lock updates ascending (insertion sort). */
static void sort_updates(unsigned *at, unsigned n)
{
    unsigned i, j;

    for (i = 1; i < n; i++)
        for (j = i; j > 0 && at[j] < at[j - 1]; j--) {
            unsigned t = at[j];
            at[j] = at[j - 1];
            at[j - 1] = t;
        }
}

/* Prints a strategy's row of the table from its comparison against the governor. */
static void print_strategy_row(struct block_run *x, const struct strat *s,
                               const struct eerl_an_result *res, unsigned *at, unsigned n_at)
{
    const struct block *b = x->b;
    const struct eerl_sim_oracle *orc = x->orc;
    unsigned within = 0;
    size_t k;
    char cfg[48], set[64];

    snprintf(cfg, sizeof(cfg), "%s", b->row->name);
    for (k = 0; k < n_seeds; k++)
        within += res->seed[k].whole.dq_pct >= -2.0;
    sort_updates(at, n_at);
    if (res->lock_same)
        eerl_an_setting_str(&res->lock_setting, set, sizeof(set));
    else
        snprintf(set, sizeof(set), "%s", res->any_locked ? "varies" : "none");
    fprintf(x->out,
            "%-19s %5u %-10s %-14s | %7.2f%% %+8.2f%% | %3u/%-3u | %7.2f %7.2f | %+6.2f | "
            "%-16s | ",
            cfg, b->updates, wl_name(b->wl), s->name, res->whole.saving_pct, res->whole.dq_pct,
            within, n_seeds, orc->saving_pct > 0 ? res->whole.saving_pct / orc->saving_pct : NAN,
            x->wsc.saving_pct > 0 ? res->whole.saving_pct / x->wsc.saving_pct : NAN,
            2.0 + res->whole.dq_pct, set);
    if (n_at)
        fprintf(x->out, "%u (%u/%u seeds)\n", at[n_at / 2], n_at, n_seeds);
    else
        fprintf(x->out, "-\n");
}

/* Runs one strategy on every seed and prints its row; *e gets the comparison's result once it
 * ran. Returns < 0 where the block must stop. */
static int block_strategy(struct block_run *x, const struct strat *s, int *e)
{
    const struct block *b = x->b;
    const struct eerl_an_series *cs[SEEDS_MAX];
    struct eerl_sim_run *ctl = calloc(n_seeds, sizeof(*ctl));
    struct eerl_an_result *res = calloc(1, sizeof(*res));
    unsigned at[SEEDS_MAX], n_at = 0;
    size_t k, i;

    if (!ctl || !res) {
        free(ctl);
        free(res);
        return -1;
    }
    fprintf(stderr, "bench_controllers: %s, %u updates, %s: %s (%.0f s)\n", b->row->name,
            b->updates, wl_name(b->wl), s->name, wall() - t_all);
    for (k = 0; k < n_seeds; k++) {
        if (run(x->p, b, x->seeds[k], 1, s->s, s->oracle ? &x->orc->setting : NULL, &ctl[k]) < 0) {
            for (i = 0; i < k; i++)
                eerl_sim_run_free(&ctl[i]);
            free(ctl);
            free(res);
            return -1;
        }
        cs[k] = &ctl[k].series;
        if (ctl[k].series.locked)
            at[n_at++] = (unsigned)ctl[k].series.lock_update;
    }
    *e = eerl_an_compare(x->gs, cs, n_seeds, res);
    if (*e == 0)
        print_strategy_row(x, s, res, at, n_at);
    else
        fprintf(stderr, "bench_controllers: %s: analysis failed\n", b->row->name);
    for (k = 0; k < n_seeds; k++)
        eerl_sim_run_free(&ctl[k]);
    free(ctl);
    free(res);
    return *e < 0 ? -1 : 0;
}

/* Prints the block's closing line: the oracle setting, the windowed oracle and the time taken. */
static void print_block_footer(struct block_run *x)
{
    const struct eerl_sim_oracle *orc = x->orc;
    const struct eerl_sim_schedule *wsc = &x->wsc;
    char o[64];

    eerl_an_setting_str(&orc->setting, o, sizeof(o));
    fprintf(x->out,
            "%-19s %5s %-10s %-14s   oracle setting %s (%u settings evaluated), saving "
            "%.2f%%; windowed (a setting per %u): %.2f%% at %+.2f%%, %u change%s; %.1f s\n\n",
            "", "", "", "", o, orc->evaluated, orc->saving_pct, window, wsc->saving_pct,
            wsc->dq_pct, wsc->changes, wsc->changes == 1 ? "" : "s", x->b->secs);
}

/* Closes the block's text and frees its state. */
static void block_close(struct block_run *x)
{
    size_t k;

    if (x->out)
        fclose(x->out);
    if (x->gov)
        for (k = 0; k < n_seeds; k++)
            eerl_sim_run_free(&x->gov[k]);
    free(x->gov);
    free(x->orc);
    eerl_sim_schedule_free(&x->wsc);
    eerl_twin_preset_free(x->p);
}

/* Runs one block; its rows go to b->text. */
static int run_block(struct block *b)
{
    struct block_run x;
    double t0 = wall();
    size_t si;
    int e = -1;

    if (block_open(&x, b) < 0 || block_baselines(&x) < 0)
        goto done;
    for (si = 0; si < NSTRAT; si++)
        if (want_strat[si] && block_strategy(&x, &strats[si], &e) < 0)
            goto done;
    b->secs = wall() - t0;
    print_block_footer(&x);
    e = 0;
done:
    block_close(&x);
    return e;
}

static void *worker(void *arg)
{
    (void)arg;
    for (;;) {
        struct block *b;
        int e;

        pthread_mutex_lock(&lock);
        if (next_block >= n_blocks) {
            pthread_mutex_unlock(&lock);
            return NULL;
        }
        b = &blocks[next_block++];
        pthread_mutex_unlock(&lock);
        e = run_block(b);
        pthread_mutex_lock(&lock);
        b->done = 1;
        b->failed = e < 0;
        pthread_cond_broadcast(&cond);
        pthread_mutex_unlock(&lock);
    }
}

/* Splits a comma-separated list; for each item calls pick, which returns < 0 for a bad one. */
static int each(const char *opt, const char *list, int (*pick)(const char *item))
{
    char buf[512], *save = NULL, *it;

    if (!list || !*list || strlen(list) >= sizeof(buf)) {
        fprintf(stderr, "bench_controllers: %s needs a comma-separated list, got '%s'\n", opt,
                list ? list : "");
        return -1;
    }
    snprintf(buf, sizeof(buf), "%s", list);
    for (it = strtok_r(buf, ",", &save); it; it = strtok_r(NULL, ",", &save))
        if (pick(it) < 0) {
            fprintf(stderr, "bench_controllers: %s: unknown item '%s' in '%s'\n", opt, it, list);
            return -1;
        }
    return 0;
}

static int pick_mode(const char *it)
{
    size_t i;

    for (i = 0; i < NROWS; i++)
        if (!strcmp(it, rows[i].mode_name)) {
            want_mode[i] = 1;
            return 0;
        }
    return -1;
}

static int pick_strat(const char *it)
{
    size_t i;

    for (i = 0; i < NSTRAT; i++)
        if (!strcmp(it, strats[i].name)) {
            want_strat[i] = 1;
            return 0;
        }
    return -1;
}

static int pick_wl(const char *it)
{
    int k;

    if (eerl_twin_scenario_parse(it, &k) < 0)
        return -1;
    want_wl[k] = 1;
    return 0;
}

static int pick_len(const char *it)
{
    char *end;
    unsigned long v;

    if (n_lengths >= LENGTHS_MAX)
        return -1;
    if (!strcmp(it, "paper")) {
        lengths[n_lengths++] = 0;
        return 0;
    }
    v = strtoul(it, &end, 10);
    if (*end || v < 100 || v > 100000)
        return -1;
    lengths[n_lengths++] = (unsigned)v;
    return 0;
}

static int uint_opt(const char *opt, const char *v, unsigned lo, unsigned hi, unsigned *ret)
{
    char *end;
    unsigned long x;

    x = v ? strtoul(v, &end, 10) : 0;
    if (!v || *end || x < lo || x > hi) {
        fprintf(stderr, "bench_controllers: %s must be %u-%u, got '%s'\n", opt, lo, hi, v ? v : "");
        return -1;
    }
    *ret = (unsigned)x;
    return 0;
}

/* Which of the lists the command line named (the others take their defaults). */
struct named {
    int mode, strat, wl;
};

/* --horizons: the paper's lengths, 1000 and 3000 updates, under every workload. */
static void set_horizons(struct named *any)
{
    int w;

    n_lengths = 3;
    lengths[0] = 0;
    lengths[1] = 1000;
    lengths[2] = 3000;
    for (w = 0; w < EERL_TWIN_SCENARIO_COUNT; w++)
        want_wl[w] = 1;
    any->wl = 1;
}

/* Reads the command line into the options; returns < 0 on a bad argument (already reported). */
static int parse_args(int argc, char **argv, struct named *any)
{
    int ai;

    for (ai = 1; ai < argc; ai++) {
        const char *a = argv[ai], *v = ai + 1 < argc ? argv[ai + 1] : NULL;
        int e = 0;

        if (!strcmp(a, "--noise")) {
            if (!v || eerl_twin_noise_parse(v, &noise) < 0) {
                fprintf(stderr, "bench_controllers: --noise takes none or fitted, got '%s'\n",
                        v ? v : "");
                return -1;
            }
        } else if (!strcmp(a, "--modes")) {
            e = each(a, v, pick_mode);
            any->mode = 1;
        } else if (!strcmp(a, "--strategies")) {
            e = each(a, v, pick_strat);
            any->strat = 1;
        } else if (!strcmp(a, "--workloads")) {
            e = each(a, v, pick_wl);
            any->wl = 1;
        } else if (!strcmp(a, "--lengths")) {
            n_lengths = 0;
            e = each(a, v, pick_len);
        } else if (!strcmp(a, "--window")) {
            e = uint_opt(a, v, 1, 100000, &window);
        } else if (!strcmp(a, "--jobs")) {
            e = uint_opt(a, v, 1, 16, &jobs);
        } else if (!strcmp(a, "--horizons")) {
            set_horizons(any);
            continue;
        } else {
            if (uint_opt("SEEDS", a, 1, SEEDS_MAX, &n_seeds) < 0)
                return -1;
            continue;
        }
        if (e < 0)
            return -1;
        ai++;
    }
    return 0;
}

/* Fills in the defaults of the lists the command line did not name. */
static void apply_defaults(const struct named *any)
{
    size_t i;

    if (!any->mode)
        for (i = 0; i < NROWS; i++)
            want_mode[i] = 1;
    if (!any->strat)
        for (i = 0; i < NSTRAT; i++)
            want_strat[i] = 1;
    if (!any->wl)
        want_wl[EERL_TWIN_SCENARIO_STEADY] = 1;
    if (!n_lengths)
        lengths[n_lengths++] = 0;
}

/* Lists the blocks to run, in the table's order: configuration, then length, then workload. */
static int make_blocks(void)
{
    size_t r, li;
    int w;

    blocks = calloc(NROWS * LENGTHS_MAX * EERL_TWIN_SCENARIO_COUNT, sizeof(*blocks));
    if (!blocks)
        return -1;
    for (r = 0; r < NROWS; r++)
        for (li = 0; li < n_lengths; li++)
            for (w = 0; w < EERL_TWIN_SCENARIO_COUNT; w++) {
                struct block *b = &blocks[n_blocks];

                if (!want_mode[r] || !want_wl[w])
                    continue;
                b->row = &rows[r];
                b->updates = lengths[li] ? lengths[li] : rows[r].updates;
                b->wl = w;
                n_blocks++;
            }
    return 0;
}

/* Prints the table's title and column heads. */
static void print_header(void)
{
    printf("controllers side by side: Qwen3-30B-A3B on H100, %u seeds per block, allowed loss 2%%, "
           "divergence 0 (matched workloads), per-update noise %s, windowed oracle: a setting per "
           "%u updates\n\n",
           n_seeds, noise ? "fitted" : "none", window);
    printf("%-19s %5s %-10s %-14s | %8s %9s | %7s | %7s %7s | %6s | %-16s | %s\n", "config", "upd.",
           "workload", "strategy", "saving", "dq", "within", "capture", "cap.win", "unused",
           "locked", "lock at (median)");
    fflush(stdout);
}

/* Starts n worker threads; returns < 0 (reported) where one cannot start. */
static int start_workers(pthread_t *th, unsigned n)
{
    unsigned i;

    for (i = 0; i < n; i++)
        if (pthread_create(&th[i], NULL, worker, NULL) != 0) {
            fprintf(stderr, "bench_controllers: cannot start a thread\n");
            return -1;
        }
    return 0;
}

/* Prints each block's rows in order as it finishes; returns 1 if any block failed, else 0. */
static int print_blocks(void)
{
    size_t i;
    int failed = 0;

    for (i = 0; i < n_blocks; i++) {
        pthread_mutex_lock(&lock);
        while (!blocks[i].done)
            pthread_cond_wait(&cond, &lock);
        pthread_mutex_unlock(&lock);
        if (blocks[i].failed) {
            fprintf(stderr, "bench_controllers: %s, %u updates, %s failed\n", blocks[i].row->name,
                    blocks[i].updates, wl_name(blocks[i].wl));
            failed = 1;
        }
        if (blocks[i].text)
            fwrite(blocks[i].text, 1, blocks[i].text_len, stdout);
        fflush(stdout);
        free(blocks[i].text);
    }
    return failed;
}

/* Prints the legend under the table, with the total time. */
static void print_legend(void)
{
    printf("saving, dq: whole run (updates 2-N) against the matched governor run, geometric means "
           "over seeds; within: seeds whose whole-run throughput change is >= -2%%; capture: "
           "saving / static oracle saving (above 1.0: more than any one setting); cap.win: saving "
           "/ windowed oracle saving; unused: 2 + dq, the allowance left (points); locked: the "
           "first lock of every seed if all agree; lock at: median update of the first lock "
           "among seeds that locked. Total %.0f s (%u job%s).\n",
           wall() - t_all, jobs, jobs == 1 ? "" : "s");
}

int main(int argc, char **argv)
{
    struct named any = {0, 0, 0};
    pthread_t th[16];
    unsigned n_th, i;
    int failed;

    t_all = wall();
    if (parse_args(argc, argv, &any) < 0)
        return 2;
    apply_defaults(&any);
    if (make_blocks() < 0)
        return 1;
    print_header();
    n_th = jobs < n_blocks ? jobs : (unsigned)n_blocks;
    if (start_workers(th, n_th) < 0)
        return 1;
    failed = print_blocks();
    for (i = 0; i < n_th; i++)
        pthread_join(th[i], NULL);
    print_legend();
    free(blocks);
    return failed;
}

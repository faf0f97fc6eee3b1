/* The eerl strategy and the baselines on synthetic streams whose optimum is known
 * (tests/synth_stream.h): eerl locks within the allowance with most of the saving in the modes it
 * runs itself; its run-level budget keeps the whole run (search included) within the allowance
 * on a noisy stream where the paper's controller goes past it; a short expected horizon stops
 * exploration; the baselines do what they are named after; the strategy names and bad
 * configurations give clear errors. Whole-run loss is the true (noise-free) time of each update's
 * setting against the governor's at the same work, summed over the run. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "eerl/core.h"
#include "eerl/error.h"
#include "eerl/options.h"
#include "core/judge.h"
#include "synth_stream.h"

static int verbose(void)
{
    return getenv("EERL_TEST_VERBOSE") != NULL;
}

/* A synthetic stream of the mode as eerl meets it: in drained mode the generation pool's time
 * follows the batch the next update reports (synth_stream.h, gen_next), as in a drained run and on
 * the twin. */
static void eerl_stream(struct synth *s, eerl_mode mode, uint64_t seed)
{
    synth_init(s, mode, seed);
    s->gen_next = mode == EERL_MODE_DRAINED;
}

struct outcome {
    double whole_loss; /* 1 - sum(T_gov) / sum(T_ctl), true times */
    double whole_e;    /* sum(E_ctl) / sum(E_gov), true energies */
    int locked;
    eerl_setting lock;
    unsigned proposals, bad_clocks, governor_updates_after_lock;
    unsigned slow_fails;  /* trials failed more than 5% slower than the governor */
    unsigned idle_raises; /* "raise" adjustments that left the setting as it was */
};

/* Runs n updates of the stream s; the true cost of each update is the noise-free physics at its
 * own work. */
static void run_stream(struct synth *sp, const eerl_ctl_config *cfg, unsigned n,
                       struct outcome *out)
{
    unsigned clocks[200];
    size_t nc = synth_clocks(clocks), k, ne;
    struct synth s = *sp;
    eerl_ctl *ctl = NULL;
    eerl_setting st, gov;
    eerl_event evs[64];
    double tg = 0, tc = 0, eg = 0, ec = 0;
    unsigned i, g;

    memset(out, 0, sizeof(*out));
    memset(&gov, 0, sizeof(gov));
    assert_int_equal(eerl_ctl_new(s.mode, cfg, clocks, nc, 1980, &ctl), 0);
    eerl_ctl_setting(ctl, &st);
    for (i = 0; i < n; i++) {
        eerl_obs o = synth_step(&s, &st), a, b;

        synth_physics(&s, &gov, o.gen_tokens, o.valid_tokens, o.longest_tokens, 1, 1, &a);
        synth_physics(&s, &st, o.gen_tokens, o.valid_tokens, o.longest_tokens, 1, 1, &b);
        tg += a.time_s;
        tc += b.time_s;
        eg += a.energy_j;
        ec += b.energy_j;
        if (out->locked && eerl_setting_is_governor(&st))
            out->governor_updates_after_lock++;
        eerl_setting before = st;

        assert_int_equal(eerl_ctl_observe(ctl, &o, &st), 0);
        for (g = 0; g < EERL_GROUPS_MAX; g++) {
            size_t j;
            int ok = st.mhz[g] == 0;
            for (j = 0; j < nc && !ok; j++)
                ok = clocks[j] == st.mhz[g];
            out->bad_clocks += !ok;
        }
        while ((ne = eerl_ctl_events(ctl, evs, 64)) > 0)
            for (k = 0; k < ne; k++) {
                if (verbose())
                    synth_print_event(&evs[k]);
                if (evs[k].kind == EERL_EV_PROPOSE)
                    out->proposals++;
                if (evs[k].kind == EERL_EV_TRIAL && evs[k].verdict == EERL_VERDICT_FAIL &&
                    evs[k].time_ratio > 1.05)
                    out->slow_fails++;
                if (evs[k].kind == EERL_EV_ADJUST && strncmp(evs[k].reason, "raise", 5) == 0 &&
                    eerl_setting_equal(&evs[k].candidate, &before))
                    out->idle_raises++;
                if (evs[k].kind == EERL_EV_LOCK && !out->locked) {
                    out->locked = 1;
                    out->lock = evs[k].candidate;
                }
            }
    }
    out->whole_loss = 1 - tg / tc;
    out->whole_e = ec / eg;
    eerl_ctl_free(ctl);
}

static void run(eerl_mode mode, const eerl_ctl_config *cfg, uint64_t seed, double noise, unsigned n,
                struct outcome *out)
{
    struct synth s;

    eerl_stream(&s, mode, seed);
    s.noise = noise;
    run_stream(&s, cfg, n, out);
}

static void cfg_for(eerl_mode mode, eerl_strategy s, eerl_ctl_config *c)
{
    assert_int_equal(eerl_ctl_config_default(mode, c), 0);
    c->strategy = s;
}

/* The eerl strategy over n updates, the horizon known, and its stream of the mode. */
static void eerl_setup(eerl_mode mode, unsigned n, uint64_t seed, eerl_ctl_config *c,
                       struct synth *s)
{
    cfg_for(mode, EERL_STRATEGY_EERL, c);
    c->expected_updates = n;
    eerl_stream(s, mode, seed);
}

/* eerl_setup on a stream with 1% per-update noise. */
static void noisy_setup(eerl_mode mode, unsigned n, uint64_t seed, eerl_ctl_config *c,
                        struct synth *s)
{
    eerl_setup(mode, n, seed, c, s);
    s->noise = 0.01;
}

static void test_eerl_locks_within_allowance(void **state)
{
    static const eerl_mode modes[] = {EERL_MODE_COLOCATED, EERL_MODE_DISAGGREGATED,
                                      EERL_MODE_DRAINED};
    unsigned clocks[200];
    size_t nc = synth_clocks(clocks), m;
    uint64_t seed;

    (void)state;
    for (m = 0; m < 3; m++)
        for (seed = 1; seed <= 4; seed++) {
            eerl_ctl_config c;
            struct outcome o;
            struct synth s;
            eerl_setting best;
            double best_e, q, e;

            cfg_for(modes[m], EERL_STRATEGY_EERL, &c);
            c.expected_updates = 150;
            run(modes[m], &c, seed, 0.01, 150, &o);
            synth_init(&s, modes[m], seed);
            synth_oracle(&s, clocks, nc, c.idle_mhz, 0.98, &best, &best_e);
            synth_truth(&s, &o.lock, &q, &e);
            if (verbose())
                printf("%s seed %llu: lock %u/%u, whole loss %.4f e %.4f; oracle e %.4f\n",
                       eerl_mode_name(modes[m]), (unsigned long long)seed, o.lock.mhz[0],
                       o.lock.mhz[1], o.whole_loss, o.whole_e, best_e);
            assert_int_equal(o.bad_clocks, 0);
            assert_true(o.locked);
            assert_true(o.whole_loss <= 0.02);
            /* Over the whole run, search included, at least 60% of the best static saving. */
            assert_true(1 - o.whole_e >= 0.6 * (1 - best_e));
        }
}

/* In-flight (issue 9 item 2): eerl judges a setting by its rate against a governor reference,
 * not by bracketing governor blocks. It locks within the allowance over the whole run with most
 * of the best static saving, every clock it emits is supported, and after lock it spends at most
 * a few percent of the updates at the governor (the paper: a third). */
static void test_eerl_inflight(void **state)
{
    unsigned clocks[200];
    size_t nc = synth_clocks(clocks);
    uint64_t seed;

    (void)state;
    for (seed = 1; seed <= 4; seed++) {
        eerl_ctl_config c;
        struct outcome o, p;
        struct synth s;
        eerl_setting best;
        double best_e;

        cfg_for(EERL_MODE_INFLIGHT, EERL_STRATEGY_EERL, &c);
        c.expected_updates = 335;
        run(EERL_MODE_INFLIGHT, &c, seed, 0.01, 335, &o);
        cfg_for(EERL_MODE_INFLIGHT, EERL_STRATEGY_PAPER, &c);
        run(EERL_MODE_INFLIGHT, &c, seed, 0.01, 335, &p);
        synth_init(&s, EERL_MODE_INFLIGHT, seed);
        synth_oracle(&s, clocks, nc, c.idle_mhz, 0.98, &best, &best_e);
        if (verbose())
            printf("inflight seed %llu: eerl lock %u/%u loss %.4f e %.4f gov-after-lock %u; paper "
                   "loss %.4f e %.4f gov-after-lock %u; oracle e %.4f\n",
                   (unsigned long long)seed, o.lock.mhz[0], o.lock.mhz[1], o.whole_loss, o.whole_e,
                   o.governor_updates_after_lock, p.whole_loss, p.whole_e,
                   p.governor_updates_after_lock, best_e);
        assert_int_equal(o.bad_clocks, 0);
        assert_true(o.locked);
        assert_true(o.whole_loss <= 0.02);
        assert_true(1 - o.whole_e >= 0.6 * (1 - best_e));
        assert_true(1 - o.whole_e > 1 - p.whole_e);
        assert_true(o.governor_updates_after_lock <= 335 / 20);
    }
}

/* Nothing in the paper's strategy accounts for the search's own cost (its 3-update trials on a
 * noisy stream can lock settings that are too slow); eerl's account keeps the whole run within
 * the allowance. The paper's runs are printed for comparison (EERL_TEST_VERBOSE): since its
 * calibration leaves out the start-up update, none of these 12 seeds goes over. */
static void test_budget_keeps_whole_run_within_allowance(void **state)
{
    unsigned eerl_over = 0;
    uint64_t seed;

    (void)state;
    for (seed = 1; seed <= 12; seed++) {
        eerl_ctl_config c;
        struct outcome p, e;

        cfg_for(EERL_MODE_COLOCATED, EERL_STRATEGY_PAPER, &c);
        run(EERL_MODE_COLOCATED, &c, seed, 0.05, 120, &p);
        cfg_for(EERL_MODE_COLOCATED, EERL_STRATEGY_EERL, &c);
        c.expected_updates = 120;
        run(EERL_MODE_COLOCATED, &c, seed, 0.05, 120, &e);
        if (verbose())
            printf("seed %llu: paper whole loss %.4f e %.4f, eerl %.4f e %.4f\n",
                   (unsigned long long)seed, p.whole_loss, p.whole_e, e.whole_loss, e.whole_e);
        eerl_over += e.whole_loss > 0.02;
    }
    assert_int_equal(eerl_over, 0);
}

/* With only a few updates left after calibration, exploring does not pay: fewer proposals. */
static void test_short_horizon_explores_less(void **state)
{
    eerl_ctl_config c;
    struct outcome longr, shortr;

    (void)state;
    cfg_for(EERL_MODE_DISAGGREGATED, EERL_STRATEGY_EERL, &c);
    c.expected_updates = 0; /* learned */
    run(EERL_MODE_DISAGGREGATED, &c, 3, 0.01, 40, &longr);
    c.expected_updates = 22;
    run(EERL_MODE_DISAGGREGATED, &c, 3, 0.01, 40, &shortr);
    assert_true(shortr.proposals < longr.proposals);
    assert_true(shortr.locked);
}

/* Runs n updates of the stream s under cfg, calling seen on each event until it returns
 * non-zero. */
static void stream_events(struct synth *s, const eerl_ctl_config *cfg, unsigned n,
                          int (*seen)(const eerl_event *, void *), void *ctx)
{
    unsigned clocks[200], i;
    size_t nc = synth_clocks(clocks), k, ne;
    eerl_ctl *ctl = NULL;
    eerl_setting st;
    eerl_event evs[64];
    int done = 0;

    assert_int_equal(eerl_ctl_new(s->mode, cfg, clocks, nc, 1980, &ctl), 0);
    eerl_ctl_setting(ctl, &st);
    for (i = 0; i < n && !done; i++) {
        eerl_obs o = synth_step(s, &st);

        assert_int_equal(eerl_ctl_observe(ctl, &o, &st), 0);
        while ((ne = eerl_ctl_events(ctl, evs, 64)) > 0)
            for (k = 0; k < ne && !done; k++) {
                if (verbose())
                    synth_print_event(&evs[k]);
                done = seen(&evs[k], ctx);
            }
    }
    eerl_ctl_free(ctl);
}

/* Drives the eerl strategy on a synthetic stream of the mode whose training time is
 * train_scale times the default's; calls seen(ev) for every event until it returns non-zero or
 * n updates have run. */
static void mode_events(eerl_mode mode, double train_scale, double noise, double drift,
                        int pinned_l, uint64_t seed, unsigned n,
                        int (*seen)(const eerl_event *, void *), void *ctx)
{
    struct synth s;
    eerl_ctl_config c;

    eerl_setup(mode, n, seed, &c, &s);
    s.train_s_per_tok *= train_scale;
    s.noise = noise;
    s.drift = drift;
    s.drift_from = 40;
    s.pinned_l = pinned_l;
    stream_events(&s, &c, n, seen, ctx);
}

static int first_proposal(const eerl_event *ev, void *ctx)
{
    if (ev->kind != EERL_EV_PROPOSE)
        return 0;
    *(eerl_setting *)ctx = ev->candidate;
    return 1;
}

/* Drained mode: the training pool reaches the rendezvous first and waits. With a short training
 * phase (25 s against generation's ~69 s) the first step goes past the usual 360 MHz, down to
 * what the wait allows (the training pool still arrives first there); with the default stream's
 * short wait (55 s against ~69 s) it is the usual step. */
static void test_drained_first_step_uses_the_training_wait(void **state)
{
    eerl_setting first;
    struct synth s;
    eerl_obs o;

    (void)state;
    memset(&first, 0, sizeof(first));
    mode_events(EERL_MODE_DRAINED, 25.0 / 55.0, 0.01, 0, 0, 1, 40, first_proposal, &first);
    assert_int_equal(first.mhz[0], EERL_CLOCK_GOVERNOR);
    assert_true(first.mhz[1] > 0 && first.mhz[1] < 1980 - 360 - 90);
    eerl_stream(&s, EERL_MODE_DRAINED, 1);
    s.train_s_per_tok *= 25.0 / 55.0;
    synth_physics(&s, &first, s.responses * s.len_mean, 0.95 * s.responses * s.len_mean,
                  2 * s.len_mean, 1, 1, &o);
    assert_true(o.arrival_s[EERL_POOL_TRAIN] < o.arrival_s[EERL_POOL_GEN]);
    memset(&first, 0, sizeof(first));
    mode_events(EERL_MODE_DRAINED, 1.0, 0.01, 0, 0, 1, 40, first_proposal, &first);
    assert_int_equal(first.mhz[1], 1620);
}

struct raises {
    unsigned gen, train;
    eerl_setting last;
};

/* A clock as a raise compares it: the governor runs at the peak. */
static unsigned eff_mhz(unsigned mhz)
{
    return mhz == EERL_CLOCK_GOVERNOR ? 1980 : mhz;
}

static int count_raises(const eerl_event *ev, void *ctx)
{
    struct raises *r = ctx;

    /* the model's raise, or the descent's when the model has nothing within the budget */
    if (ev->kind == EERL_EV_ADJUST && (strncmp(ev->reason, "raise to", 8) == 0 ||
                                       strncmp(ev->reason, "model: raise to", 15) == 0)) {
        r->gen += eff_mhz(ev->candidate.mhz[0]) > eff_mhz(r->last.mhz[0]);
        /* training raised while generation could still go up */
        r->train += eff_mhz(ev->candidate.mhz[1]) > eff_mhz(r->last.mhz[1]) &&
                    r->last.mhz[0] != EERL_CLOCK_GOVERNOR;
    }
    if (ev->kind == EERL_EV_PROPOSE || ev->kind == EERL_EV_ADJUST || ev->kind == EERL_EV_LOCK)
        r->last = ev->candidate;
    return 0;
}

/* Drained mode: when the run's account falls short, the clock raised is the one of the pool the
 * update waits for (generation here: training arrives first at the clocks the old descent
 * reached), not the lower one. Responses shorten over the run, so the predictor fitted on longer
 * ones falls behind and the account runs short. The model proposer goes far enough down in
 * training that at times training becomes the later pool, and then raising it is right: so
 * generation is raised more often than training while it can still go up, not exclusively. A
 * raise is a clock going up (the governor counting as the peak) in the model's raise or the
 * descent's (when the model has nothing within the budget): the model, its points read again
 * against the refitted reference, nearly always has one (12 raises of generation and 4 of
 * training on these seeds). */
static void test_drained_raises_the_pool_the_update_waits_for(void **state)
{
    struct raises r;
    uint64_t seed;

    (void)state;
    memset(&r, 0, sizeof(r));
    for (seed = 1; seed <= 6; seed++) {
        memset(&r.last, 0, sizeof(r.last));
        mode_events(EERL_MODE_DRAINED, 1.0, 0.03, -0.004, 0, seed, 175, count_raises, &r);
    }
    if (verbose())
        printf("raises: generation %u, training %u\n", r.gen, r.train);
    assert_true(r.gen > 0);
    assert_true(r.gen > 2 * r.train);
}

struct trials {
    unsigned deep, short_;
};

static int count_deep_trials(const eerl_event *ev, void *ctx)
{
    struct trials *t = ctx;

    if (ev->kind == EERL_EV_TRIAL && ev->verdict == EERL_VERDICT_FAIL && ev->time_ratio > 1.25) {
        t->deep++;
        t->short_ += ev->n_updates < 4;
    }
    return 0;
}

/* In-flight: a move far too slow (a deep training step: a fifth of the rate or more) is decided
 * after fewer updates than a test's usual minimum of 4, and so paid for less. */
static void test_inflight_ends_a_far_too_slow_move_early(void **state)
{
    struct trials t;
    uint64_t seed;

    (void)state;
    memset(&t, 0, sizeof(t));
    for (seed = 1; seed <= 4; seed++)
        mode_events(EERL_MODE_INFLIGHT, 1.0, 0.01, 0, 0, seed, 120, count_deep_trials, &t);
    if (verbose())
        printf("deep failed trials %u, decided before 4 updates %u\n", t.deep, t.short_);
    assert_true(t.deep > 0);
    assert_int_equal(t.short_, t.deep);
}

/* When every phase slows over the run for reasons the token work does not show, the governor
 * predictor falls behind and each update's measured time runs above its prediction. The probes
 * measure that error; where it is clear, the run's account charges each update against the
 * prediction corrected by it, as the tests' loss estimates are, not the phantom slowdown
 * (charged, it kept the colocated and disaggregated runs here at 0.796 and 0.787 of the
 * governor's energy, seeds 1-6, with under 1% of the allowance used; corrected, 0.750 and
 * 0.746). Whole runs stay within the allowance. */
static void test_account_corrects_the_predictors_drift(void **state)
{
    static const eerl_mode modes[] = {EERL_MODE_COLOCATED, EERL_MODE_DISAGGREGATED,
                                      EERL_MODE_DRAINED};
    unsigned m;
    uint64_t seed;

    (void)state;
    for (m = 0; m < 3; m++) {
        double e = 0;

        for (seed = 1; seed <= 6; seed++) {
            eerl_ctl_config c;
            struct outcome o;
            struct synth s;

            eerl_setup(modes[m], 150, seed, &c, &s);
            s.t_drift = 0.0005; /* every phase time grows 0.05% per update from update 10 */
            s.drift_from = 10;
            run_stream(&s, &c, 150, &o);
            if (verbose())
                printf("%s seed %llu: whole loss %.4f e %.4f\n", eerl_mode_name(modes[m]),
                       (unsigned long long)seed, o.whole_loss, o.whole_e);
            assert_true(o.whole_loss <= 0.02);
            e += o.whole_e / 6;
        }
        if (modes[m] != EERL_MODE_DRAINED)
            assert_true(e <= 0.77);
    }
}

/* The highest budget (percent) any event of a run states, how many events state one, and their
 * sum. */
struct budget_max {
    double max, sum;
    unsigned n;
};

/* 1 when the event states the budget (its "budget allows X%"), X in *v. */
static int stated_budget(const eerl_event *ev, double *v)
{
    const char *p = strstr(ev->reason, "budget allows ");

    return p && sscanf(p + strlen("budget allows "), "%lf%%", v) == 1;
}

static int budget_seen(const eerl_event *ev, void *ctx)
{
    struct budget_max *b = ctx;
    double v;

    if (stated_budget(ev, &v)) {
        b->max = fmax(b->max, v);
        b->sum += v;
        b->n++;
    }
    return 0;
}

static struct budget_max budget_of_run(unsigned n, uint64_t seed)
{
    struct synth s;
    eerl_ctl_config c;
    struct budget_max b = {-1, 0, 0};

    eerl_setup(EERL_MODE_COLOCATED, n, seed, &c, &s);
    s.noise = 0.026;
    stream_events(&s, &c, n, budget_seen, &b);
    assert_true(b.n > 0);
    return b;
}

/* In a run of fewer than 500 updates no setting is given a budget above the allowance (2%),
 * however much credit the account has banked: there the credit is of the size of the account's
 * own error. */
static void test_short_runs_keep_to_the_allowance(void **state)
{
    uint64_t seed;

    (void)state;
    for (seed = 1; seed <= 4; seed++) {
        struct budget_max b = budget_of_run(107, seed);

        if (verbose())
            printf("seed %llu: 107 updates: highest budget %.2f%%\n", (unsigned long long)seed,
                   b.max);
        assert_true(b.max <= 2.0);
    }
}

/* A colocated run whose training is power-capped at 1500 MHz (a training clock above it changes
 * nothing, as the twin's collapsing work showed): the model's curve is flat down to the cap, and
 * the step below a flat curve finds the training clocks that save; the whole runs stay within the
 * allowance (800 updates). */
static void test_steps_below_a_flat_curve(void **state)
{
    uint64_t seed;

    (void)state;
    for (seed = 1; seed <= 4; seed++) {
        eerl_ctl_config c;
        struct synth s;
        struct outcome o;

        noisy_setup(EERL_MODE_COLOCATED, 800, seed, &c, &s);
        s.train_cap = 1500;
        run_stream(&s, &c, 800, &o);
        if (verbose())
            printf("seed %llu: energy %.4f, loss %.4f, lock %u/%u\n", (unsigned long long)seed,
                   o.whole_e, o.whole_loss, o.lock.mhz[0], o.lock.mhz[1]);
        assert_true(o.whole_loss <= 0.02);
        assert_true(o.lock.mhz[1] < 1500);
    }
}

/* The largest change of the budget the verdicts state, from one statement to the next, from
 * update `from` on. */
struct budget_jumps {
    uint64_t from;
    double last, max;
    int have;
};

static int budget_jump(const eerl_event *ev, void *ctx)
{
    struct budget_jumps *b = ctx;
    double v;

    if (!stated_budget(ev, &v))
        return 0;
    if (b->have && ev->update >= b->from)
        b->max = fmax(b->max, fabs(v - b->last));
    b->last = v;
    b->have = 1;
    return 0;
}

/* The account corrects each stretch between governor probes by the probes around it, not every
 * update of the run by the last probes: late in a long run a probe that moves the last probes'
 * mean moves the budget by a fraction of that (under 0.5 points here), and the whole runs stay
 * within the allowance (2000 updates). */
static void test_corrects_each_stretch_by_its_probes(void **state)
{
    uint64_t seed;

    (void)state;
    for (seed = 1; seed <= 4; seed++) {
        struct budget_jumps b = {1500, 0, 0, 0};
        eerl_ctl_config c;
        struct outcome o;
        struct synth s;

        noisy_setup(EERL_MODE_COLOCATED, 2000, seed, &c, &s);
        run_stream(&s, &c, 2000, &o);
        assert_true(o.whole_loss <= 0.02);
        stream_events(&s, &c, 2000, budget_jump, &b);
        if (verbose())
            printf("seed %llu: largest late budget jump %.2f points, whole loss %.4f, energy "
                   "%.4f\n",
                   (unsigned long long)seed, b.max, o.whole_loss, o.whole_e);
        assert_true(b.max < 0.5);
    }
}

/* Counts half probes: REFRESH events that run generation alone at the
 * governor (the idle clock too) and training at a clock of its own. */
static int half_probe_seen(const eerl_event *ev, void *ctx)
{
    unsigned *n = ctx;

    if (ev->kind == EERL_EV_REFRESH && strstr(ev->reason, "half probe")) {
        assert_int_equal(ev->next.mhz[EERL_GROUP_GEN], EERL_CLOCK_GOVERNOR);
        assert_int_equal(ev->next.idle_mhz, EERL_CLOCK_GOVERNOR);
        assert_int_not_equal(ev->next.mhz[EERL_GROUP_TRAIN], EERL_CLOCK_GOVERNOR);
        n[0]++;
    }
    return 0;
}

/* stream_events' callback: the update of the CALIBRATED event into *ctx, and stop there. */
static int calibrated_at(const eerl_event *e, void *ctx)
{
    if (e->kind != EERL_EV_CALIBRATED)
        return 0;
    *(uint64_t *)ctx = e->update;
    return 1;
}

/* The update at which a run of mode ends its calibration; moving: responses fall 6% an update
 * over the first 20 updates. */
static uint64_t calibration_end(eerl_mode mode, int moving)
{
    eerl_ctl_config c;
    struct synth s;
    uint64_t at = 0;

    noisy_setup(mode, 200, 1, &c, &s);
    if (moving) {
        s.drift = -0.06;
        s.drift_from = 0;
        s.drift_until = 20;
    }
    stream_events(&s, &c, 200, calibrated_at, &at);
    assert_true(at > 0);
    return at;
}

/* A drained calibration goes on while the work moves (the last 3 references' valid tokens more
 * than 8% off the 3 before), up to 40 governor updates; a colocated one ends where it would in
 * steady work. */
static void test_drained_calibrates_on_while_the_work_moves(void **state)
{
    uint64_t steady = calibration_end(EERL_MODE_DRAINED, 0),
             moving = calibration_end(EERL_MODE_DRAINED, 1),
             colocated = calibration_end(EERL_MODE_COLOCATED, 0),
             colocated_moving = calibration_end(EERL_MODE_COLOCATED, 1);

    (void)state;
    if (verbose())
        printf("calibration ends: drained steady %llu, moving %llu; colocated %llu, %llu\n",
               (unsigned long long)steady, (unsigned long long)moving,
               (unsigned long long)colocated, (unsigned long long)colocated_moving);
    assert_true(moving >= steady + 5 && moving <= 42);
    assert_true(colocated_moving == colocated);
}

/* In disaggregated mode every other probe is a half probe, generation alone at the governor
 * (half_probe_seen checks each), so the run keeps training at its setting through half of its
 * probes and still ends within the allowance; colocated runs take none. */
static void test_half_probes_in_disaggregated_runs(void **state)
{
    uint64_t seed;

    (void)state;
    for (seed = 1; seed <= 4; seed++) {
        unsigned halves = 0, co_halves = 0;
        eerl_ctl_config c;
        struct outcome o;
        struct synth s;

        noisy_setup(EERL_MODE_DISAGGREGATED, 1000, seed, &c, &s);
        run_stream(&s, &c, 1000, &o);
        stream_events(&s, &c, 1000, half_probe_seen, &halves);
        assert_true(o.locked && o.whole_loss <= 0.02);
        assert_true(halves > 0);
        noisy_setup(EERL_MODE_COLOCATED, 400, seed, &c, &s);
        stream_events(&s, &c, 400, half_probe_seen, &co_halves);
        assert_int_equal(co_halves, 0);
    }
}

/* Drained mode: an update's generation work is taken from the next update's report (the
 * generation pool generates the batch the next update consumes), so on a drained stream whose
 * responses vary from batch to batch the runs lock and stay within the allowance. */
static void test_drained_generation_work_taken_from_the_next_update(void **state)
{
    uint64_t seed;

    (void)state;
    for (seed = 1; seed <= 4; seed++) {
        eerl_ctl_config c;
        struct outcome o;

        cfg_for(EERL_MODE_DRAINED, EERL_STRATEGY_EERL, &c);
        c.expected_updates = 150;
        run(EERL_MODE_DRAINED, &c, seed, 0.01, 150, &o);
        assert_true(o.locked);
        assert_true(o.whole_loss <= 0.02);
    }
}

/* The probes' mean error (eerl__probe_mean): n probes alternating mean + d and mean - d. */
static double probe_mean_of(double mean, double d, unsigned n, double quiet_se)
{
    double xs[24];
    unsigned i;

    for (i = 0; i < n; i++)
        xs[i] = mean + (i % 2 ? -d : d);
    return eerl__probe_mean(xs, n, quiet_se);
}

/* With quiet_se 0 a positive mean is used only two standard errors from zero; with quiet_se the
 * account's margin (0.003, as the judge passes it) also where the mean's standard error is within
 * the margin, as on the twin (24 probes scattered 1.1%: se 0.23%); a stream as noisy as the 5%
 * synthetic one (se 1%) is gated either way, and a negative mean is taken, fewer than three
 * probes not. */
static void test_probe_mean_rule(void **state)
{
    (void)state;
    /* 0.4% with 1.1% scatter over 24 probes: less than two standard errors (0.46%) */
    assert_true(probe_mean_of(0.004, 0.011, 24, 0) == 0);
    assert_true(fabs(probe_mean_of(0.004, 0.011, 24, 0.003) - 0.004) < 1e-12);
    /* the same over 6 probes: se 0.49%, above the margin: gated in both */
    assert_true(probe_mean_of(0.004, 0.011, 6, 0.003) == 0);
    /* 1% with 5% scatter: se 1%, gated in both */
    assert_true(probe_mean_of(0.01, 0.05, 24, 0) == 0);
    assert_true(probe_mean_of(0.01, 0.05, 24, 0.003) == 0);
    /* clear of two standard errors, or negative: used in both */
    assert_true(fabs(probe_mean_of(0.01, 0.011, 24, 0) - 0.01) < 1e-12);
    assert_true(fabs(probe_mean_of(-0.004, 0.011, 24, 0) + 0.004) < 1e-12);
    assert_true(fabs(probe_mean_of(-0.004, 0.011, 24, 0.003) + 0.004) < 1e-12);
    /* two probes are not a mean */
    assert_true(probe_mean_of(0.02, 0.001, 2, 0.003) == 0);
}

/* In-flight with the pools' arrivals reported: once a training clock below the peak has passed,
 * a training step at which training's busy time would outlast generation's (modelled through
 * the governor's and that setting's arrivals) is not tried. Seeds 1-6 ran 14 trials that failed
 * more than 5% slower than the governor without the rule, 2 with it (the training steps before
 * the model has two points, and generation's); whole runs within the allowance; a short account
 * after lock raises a clock that is below the peak. */
static void test_inflight_arrivals_skip_training_steps_past_the_wait(void **state)
{
    unsigned slow = 0;
    uint64_t seed;

    (void)state;
    for (seed = 1; seed <= 6; seed++) {
        eerl_ctl_config c;
        struct outcome o;
        struct synth s;

        eerl_setup(EERL_MODE_INFLIGHT, 200, seed, &c, &s);
        s.inflight_phases = 1;
        run_stream(&s, &c, 200, &o);
        if (verbose())
            printf("seed %llu: %u slow failed trials, whole loss %.4f e %.4f\n",
                   (unsigned long long)seed, o.slow_fails, o.whole_loss, o.whole_e);
        slow += o.slow_fails;
        assert_true(o.whole_loss <= 0.02);
        /* A lock whose generation runs at the peak falls behind through training: raising
         * generation "to" the peak changed nothing (seed 4 did it twice), so training goes up. */
        assert_int_equal(o.idle_raises, 0);
    }
    assert_true(slow <= 4);
}

/* In-flight, responses collapsing over the first 40 updates (x0.3) onto pools that wait on a
 * fixed cost (rest 20 s): the governor's rate (valid tokens per second) falls with the work, so
 * a judge that compared every setting with the calibration's rate would read the governor itself
 * as slower than the budget allows and keep it. Modelling the governor's time and energy as a
 * fixed part plus a part per valid token, the runs save near the allowance. */
static void collapse_run(uint64_t seed, struct outcome *o)
{
    eerl_ctl_config c;
    struct synth s;

    eerl_setup(EERL_MODE_INFLIGHT, 335, seed, &c, &s);
    s.rest_s = 20;
    s.len_mean = 3000;
    s.drift = -0.03;
    s.drift_until = 40;
    s.pinned_l = 1;
    run_stream(&s, &c, 335, o);
}

static void test_inflight_reference_follows_a_collapse(void **state)
{
    double e1 = 0;
    uint64_t seed;

    (void)state;
    for (seed = 1; seed <= 4; seed++) {
        struct outcome o1;

        collapse_run(seed, &o1);
        if (verbose())
            printf("seed %llu: loss %.4f e %.4f lock %u/%u\n", (unsigned long long)seed,
                   o1.whole_loss, o1.whole_e, o1.lock.mhz[0], o1.lock.mhz[1]);
        assert_true(o1.whole_loss <= 0.025);
        e1 += o1.whole_e / 4;
    }
    assert_true(e1 < 0.9);
}

/* What moved_events counts: the reference's moves, and those made without a confirmation. */
struct moved {
    unsigned *rescales, *unconfirmed;
    int confirming;
};

static int count_moves(const eerl_event *ev, void *ctx)
{
    struct moved *mv = ctx;

    if (ev->kind != EERL_EV_HOLD)
        return 0;
    if (strstr(ev->reason, "more to confirm"))
        mv->confirming = 1;
    if (strstr(ev->reason, "rescales the reference") ||
        strstr(ev->reason, "replaces the reference")) {
        (*mv->rescales)++;
        *mv->unconfirmed += !mv->confirming;
    }
    if (strstr(ev->reason, "the reference); back to"))
        mv->confirming = 0;
    return 0;
}

/* In-flight after lock: a governor block that reads the governor moved (beyond three of its
 * standard errors) runs on for as many updates again before the reference follows it: four
 * updates of a noisy run can miss by that much. Every phase slows by 0.04% per update from update
 * 500 (the governor moves for real): the reference follows it, each time after a confirmation. */
static void moved_events(uint64_t seed, unsigned *rescales, unsigned *unconfirmed)
{
    struct moved mv = {rescales, unconfirmed, 0};
    struct synth s;
    eerl_ctl_config c;

    eerl_setup(EERL_MODE_INFLIGHT, 1500, seed, &c, &s);
    s.noise = 0.03;
    s.t_drift = 0.0004;
    s.drift_from = 500;
    stream_events(&s, &c, 1500, count_moves, &mv);
}

static void test_inflight_confirms_a_moved_governor(void **state)
{
    unsigned r2 = 0, u2 = 0;
    uint64_t seed;

    (void)state;
    for (seed = 1; seed <= 4; seed++)
        moved_events(seed, &r2, &u2);
    if (verbose())
        printf("%u rescales, %u unconfirmed\n", r2, u2);
    assert_true(r2 >= 1);
    assert_int_equal(u2, 0);
}

/* An in-flight stream of n updates, per-update noise `noise`, the pools' arrivals reported. */
static void inflight_setup(unsigned n, uint64_t seed, double noise, eerl_ctl_config *c,
                           struct synth *s)
{
    eerl_setup(EERL_MODE_INFLIGHT, n, seed, c, s);
    s->noise = noise;
    s->inflight_phases = 1;
}

/* The pipeline's first drain, update 2, is left out of calibration as the first update is: its
 * batch was generated partly while the first trained, and it runs fast (on the twin 4-9%). Taken
 * in, it would read the governor fast and every loss high. So the run decides the same whether
 * the second update ran 8% or 15% fast or not at all (1000 updates, seeds 1-4, pools
 * reported). */
static void start_run(uint64_t seed, double fast, struct outcome *o)
{
    eerl_ctl_config c;
    struct synth s;

    inflight_setup(1000, seed, 0.01, &c, &s);
    s.scale_from = 2;
    s.scale_n = 1;
    s.scale_by = -fast;
    run_stream(&s, &c, 1000, o);
}

static void test_inflight_leaves_the_first_drain_out(void **state)
{
    static const double fast[] = {0.08, 0.15};
    unsigned k;
    uint64_t seed;

    (void)state;
    for (seed = 1; seed <= 4; seed++) {
        struct outcome o5, f5;

        start_run(seed, 0, &o5);
        for (k = 0; k < 2; k++) {
            start_run(seed, fast[k], &f5);
            if (verbose())
                printf("seed %llu, second update %.0f%% fast: whole-run loss %.4f -> %.4f\n",
                       (unsigned long long)seed, 100 * fast[k], o5.whole_loss, f5.whole_loss);
            assert_true(f5.whole_loss == o5.whole_loss && f5.whole_e == o5.whole_e);
            assert_true(f5.whole_loss <= 0.02);
        }
    }
}

/* The first governor block after lock runs on updates 5% slow (a change of the work caught
 * mid-way, as when a block straddles a step of the response lengths), and the work is as
 * before from its fifth update on: the block reads the governor moved and runs on to confirm.
 * The confirming four alone decide, and they say the governor did not move (all eight, 2.5% slow
 * on average, would have the reference rescaled and every later loss read that much low; 1000
 * updates, seeds 1-4). */
/* What straddle_seen counts, and the stream it slows. */
struct straddle {
    struct synth *s;
    unsigned rescales, confirms;
};

static int straddle_seen(const eerl_event *ev, void *ctx)
{
    struct straddle *st = ctx;

    if (ev->kind == EERL_EV_REFRESH && strstr(ev->reason, "periodic check")) {
        /* the update after the event carries; the block's first four follow */
        st->s->scale_from = (unsigned)ev->update + 1;
        st->s->scale_n = 5;
        st->s->scale_by = 0.05;
    }
    st->confirms += strstr(ev->reason, "more to confirm") != NULL;
    if (strstr(ev->reason, "governor block: ") && strstr(ev->reason, "back to")) {
        st->rescales += strstr(ev->reason, "rescales") != NULL;
        return 1; /* the first block after lock decides */
    }
    return 0;
}

static unsigned straddle_rescales(uint64_t seed, unsigned *confirms)
{
    eerl_ctl_config c;
    struct synth s;
    struct straddle st = {&s, 0, 0};

    inflight_setup(1000, seed, 0.005, &c, &s);
    stream_events(&s, &c, 1000, straddle_seen, &st);
    *confirms += st.confirms;
    return st.rescales;
}

static void test_inflight_confirms_on_the_confirming_updates(void **state)
{
    unsigned r5 = 0, c5 = 0;
    uint64_t seed;

    (void)state;
    for (seed = 1; seed <= 4; seed++)
        r5 += straddle_rescales(seed, &c5);
    if (verbose())
        printf("first blocks run on to confirm: %u; that rescaled the reference: %u\n", c5, r5);
    assert_int_equal(c5, 4);
    assert_int_equal(r5, 0);
}

/* What whole_fit_error reads from the CALIBRATED event: the reference's two pool lines and its
 * rest. */
struct calib_ref {
    double ga, gb, ta, tb, rest;
    int seen;
};

static int read_calibrated(const eerl_event *ev, void *ctx)
{
    struct calib_ref *r = ctx;

    if (ev->kind != EERL_EV_CALIBRATED)
        return 0;
    r->seen = sscanf(ev->reason,
                     "governor time the later of generation %lf s + %lf s and training %lf s + "
                     "%lf s per 1000 valid tokens, plus %lf s",
                     &r->ga, &r->gb, &r->ta, &r->tb, &r->rest) == 5;
    return 1;
}

/* The calibrated reference's error against the stream's noise-free governor time at the end
 * of the collapse (N of update 60), responses collapsing x0.3 over the first 40 updates onto
 * a training pool that waits on a fixed cost, the pools reported. The trend rule that drops old
 * references fits one model on both halves it weighs: the newer half's alone, on the narrow
 * range of valid tokens the collapse had reached, extrapolated to the older half, dropped it,
 * and the reference fitted on the rest read the governor 7.9% fast here (seed 2; seeds 1-4
 * within 0.6% with the rule). */
static double whole_fit_error(uint64_t seed)
{
    struct calib_ref r = {0};
    eerl_ctl_config c;
    struct synth s, s0;
    eerl_setting gov;
    eerl_obs o, t;
    unsigned i;
    double n, p;

    memset(&gov, 0, sizeof(gov));
    inflight_setup(335, seed, 0.01, &c, &s);
    s.rest_s = 20;
    s.len_mean = 3000;
    s.drift = -0.03;
    s.drift_until = 40;
    s.pinned_l = 1;
    s0 = s;
    stream_events(&s, &c, 335, read_calibrated, &r);
    assert_true(r.seen);
    for (i = 0; i < 60; i++)
        o = synth_step(&s0, &gov);
    synth_physics(&s0, &gov, o.gen_tokens, o.valid_tokens, o.longest_tokens, 1, 1, &t);
    n = o.valid_tokens / 1000;
    p = fmax(r.ga + r.gb * n, r.ta + r.tb * n) + r.rest;
    if (verbose())
        printf("seed %llu: reference %.3f s, governor %.3f s at %.0f valid tokens\n",
               (unsigned long long)seed, p, t.time_s, o.valid_tokens);
    return p / t.time_s - 1;
}

static void test_inflight_fits_the_trend_rule_on_both_halves(void **state)
{
    uint64_t seed;

    (void)state;
    for (seed = 1; seed <= 4; seed++)
        assert_true(fabs(whole_fit_error(seed)) < 0.01);
}

static void test_baselines(void **state)
{
    eerl_ctl_config c;
    struct outcome o;
    unsigned clocks[200];
    size_t nc = synth_clocks(clocks);
    eerl_ctl *ctl = NULL;
    eerl_setting st;
    double q, e;
    struct synth s;

    (void)state;
    /* governor: never anything but the governor */
    cfg_for(EERL_MODE_COLOCATED, EERL_STRATEGY_GOVERNOR, &c);
    run(EERL_MODE_COLOCATED, &c, 1, 0.01, 60, &o);
    assert_true(fabs(o.whole_loss) < 1e-12 && fabs(o.whole_e - 1) < 1e-12);
    assert_false(o.locked);
    /* static: the given setting (snapped to a supported clock) from the first update */
    cfg_for(EERL_MODE_DISAGGREGATED, EERL_STRATEGY_STATIC, &c);
    c.static_setting.mhz[0] = 1712;
    c.static_setting.mhz[1] = 1300;
    c.static_setting.idle_mhz = 345;
    assert_int_equal(eerl_ctl_new(EERL_MODE_DISAGGREGATED, &c, clocks, nc, 1980, &ctl), 0);
    assert_int_equal(eerl_ctl_setting(ctl, &st), 0);
    assert_true(st.mhz[0] >= 1700 && st.mhz[0] <= 1725 && st.mhz[1] >= 1290 && st.mhz[1] <= 1310);
    eerl_ctl_free(ctl);
    run(EERL_MODE_DISAGGREGATED, &c, 1, 0.01, 30, &o);
    assert_true(o.locked && o.whole_e < 1);
    /* global-clock: one clock for both groups, within the allowance */
    cfg_for(EERL_MODE_COLOCATED, EERL_STRATEGY_GLOBAL_CLOCK, &c);
    run(EERL_MODE_COLOCATED, &c, 2, 0.01, 120, &o);
    assert_true(o.locked);
    assert_int_equal(o.lock.mhz[0], o.lock.mhz[1]);
    assert_true(o.lock.mhz[0] != 0);
    synth_init(&s, EERL_MODE_COLOCATED, 2);
    synth_truth(&s, &o.lock, &q, &e);
    assert_true(q >= 0.975 && e < 1);
    /* linear-search: each group searched down from the top, then one lock for good */
    cfg_for(EERL_MODE_COLOCATED, EERL_STRATEGY_LINEAR_SEARCH, &c);
    run(EERL_MODE_COLOCATED, &c, 2, 0.01, 150, &o);
    assert_true(o.locked);
    assert_true(o.lock.mhz[0] != 0 && o.lock.mhz[1] != 0);
    synth_truth(&s, &o.lock, &q, &e);
    assert_true(q >= 0.96 && e < 1);
    assert_int_equal(o.bad_clocks, 0);
}

static void test_names_and_errors(void **state)
{
    static const char *const names[] = {"paper",  "eerl",         "governor",
                                        "static", "global-clock", "linear-search"};
    unsigned clocks[200];
    size_t nc = synth_clocks(clocks);
    eerl_strategy s;
    eerl_ctl_config c;
    eerl_ctl *ctl;
    char why[200];
    double v;
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        assert_int_equal(eerl_strategy_from_name(names[i], &s), 0);
        assert_string_equal(eerl_strategy_name(s), names[i]);
        assert_non_null(strstr(eerl_strategy_names(), names[i]));
    }
    assert_int_equal(eerl_strategy_from_name("oracle", &s), EERL_EINVAL);
    cfg_for(EERL_MODE_COLOCATED, EERL_STRATEGY_EERL, &c);
    c.strategy = (eerl_strategy)42;
    assert_int_equal(eerl_ctl_config_check(&c, why, sizeof(why)), EERL_EINVAL);
    assert_non_null(strstr(why, "42"));
    assert_non_null(strstr(why, "linear-search"));
    cfg_for(EERL_MODE_COLOCATED, EERL_STRATEGY_EERL, &c);
    c.budget_margin = 0.03;
    assert_int_equal(eerl_ctl_config_check(&c, why, sizeof(why)), EERL_EINVAL);
    assert_non_null(strstr(why, "budget_margin 0.03"));
    cfg_for(EERL_MODE_COLOCATED, EERL_STRATEGY_EERL, &c);
    c.fast_calibration_updates = 2;
    assert_int_equal(eerl_ctl_config_check(&c, why, sizeof(why)), EERL_EINVAL);
    assert_non_null(strstr(why, "fast_calibration_updates 2"));
    cfg_for(EERL_MODE_INFLIGHT, EERL_STRATEGY_EERL, &c);
    assert_int_equal(eerl_ctl_new(EERL_MODE_INFLIGHT, &c, clocks, nc, 1980, &ctl), 0);
    assert_int_equal(eerl_ctl_get_option(ctl, "inflight_revision", &v), 0);
    assert_true(v == 5);
    assert_int_equal(eerl_ctl_set_option(ctl, "inflight_revision", 6, why, sizeof(why)),
                     EERL_EINVAL);
    assert_non_null(strstr(why, "inflight_revision 6"));
    eerl_ctl_free(ctl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_eerl_locks_within_allowance),
        cmocka_unit_test(test_budget_keeps_whole_run_within_allowance),
        cmocka_unit_test(test_eerl_inflight),
        cmocka_unit_test(test_inflight_leaves_the_first_drain_out),
        cmocka_unit_test(test_inflight_confirms_on_the_confirming_updates),
        cmocka_unit_test(test_inflight_fits_the_trend_rule_on_both_halves),
        cmocka_unit_test(test_short_horizon_explores_less),
        cmocka_unit_test(test_drained_first_step_uses_the_training_wait),
        cmocka_unit_test(test_drained_raises_the_pool_the_update_waits_for),
        cmocka_unit_test(test_inflight_ends_a_far_too_slow_move_early),
        cmocka_unit_test(test_account_corrects_the_predictors_drift),
        cmocka_unit_test(test_inflight_arrivals_skip_training_steps_past_the_wait),
        cmocka_unit_test(test_inflight_reference_follows_a_collapse),
        cmocka_unit_test(test_inflight_confirms_a_moved_governor),
        cmocka_unit_test(test_probe_mean_rule),
        cmocka_unit_test(test_short_runs_keep_to_the_allowance),
        cmocka_unit_test(test_steps_below_a_flat_curve),
        cmocka_unit_test(test_corrects_each_stretch_by_its_probes),
        cmocka_unit_test(test_half_probes_in_disaggregated_runs),
        cmocka_unit_test(test_drained_calibrates_on_while_the_work_moves),
        cmocka_unit_test(test_drained_generation_work_taken_from_the_next_update),
        cmocka_unit_test(test_baselines),
        cmocka_unit_test(test_names_and_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The drained strategy (section 6.2): it searches the pool that arrives first on a 50 MHz grid
 * with the other at governor, judges a training-only slowdown from the recorded arrivals, then
 * lowers the second pool on a 100 MHz grid only if the pair uses less energy than the first
 * setting alone; it locks within the allowance, keeps the idle clock for waiting pools,
 * re-measures the governor on drift, and never emits an unsupported clock. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "eerl/core.h"
#include "eerl/error.h"
#include "synth_stream.h"
#include "testutil.h"

static int verbose(void)
{
    return getenv("EERL_TEST_VERBOSE") != NULL;
}

/* Runs a stream, keeping every event. */
static size_t run(struct synth *s, unsigned n, eerl_event *out, size_t cap,
                  struct synth_run_stats *rs, eerl_ctl_status *st)
{
    unsigned clocks[200];
    size_t nc = synth_clocks(clocks), k, ne, total = 0;
    eerl_ctl *ctl;
    eerl_setting set;
    eerl_event buf[64];
    unsigned i, g;

    assert_int_equal(
        eerl_ctl_new(EERL_MODE_DRAINED, tu_paper_cfg(EERL_MODE_DRAINED), clocks, nc, 1980, &ctl),
        0);
    memset(rs, 0, sizeof(*rs));
    eerl_ctl_setting(ctl, &set);
    for (i = 0; i < n; i++) {
        eerl_obs o = synth_step(s, &set);
        if (rs->locked) {
            double q, e;
            synth_truth(s, &set, &q, &e);
            rs->after_lock++;
            rs->after_q += q;
            rs->after_e += e;
        }
        assert_int_equal(eerl_ctl_observe(ctl, &o, &set), 0);
        for (g = 0; g < EERL_GROUPS_MAX; g++)
            if (!synth_clock_supported(clocks, nc, set.mhz[g]))
                rs->bad_clocks++;
        if (!synth_clock_supported(clocks, nc, set.idle_mhz))
            rs->bad_clocks++;
        while ((ne = eerl_ctl_events(ctl, buf, 64)) > 0)
            for (k = 0; k < ne; k++) {
                if (verbose() && buf[k].kind != EERL_EV_HOLD)
                    synth_print_event(&buf[k]);
                rs->kinds[buf[k].kind]++;
                if (buf[k].kind == EERL_EV_LOCK && !rs->locked) {
                    rs->locked = 1;
                    rs->first_lock = buf[k].candidate;
                }
                if (total < cap)
                    out[total++] = buf[k];
            }
    }
    eerl_ctl_get_status(ctl, st);
    eerl_ctl_free(ctl);
    return total;
}

static void test_first_arriving_pool_first_then_second(void **state)
{
    struct synth s;
    struct synth_run_stats rs;
    eerl_ctl_status st;
    eerl_event *ev = calloc(5000, sizeof(*ev));
    size_t n, i;
    int rounds = 0, first_trial_seen = 0;
    unsigned round1_train = 0;

    (void)state;
    assert_non_null(ev);
    /* Generation is the bottleneck, so training arrives first and waits. */
    synth_init(&s, EERL_MODE_DRAINED, 1);
    n = run(&s, 250, ev, 5000, &rs, &st);
    assert_int_equal(rs.bad_clocks, 0);
    for (i = 0; i < n; i++) {
        if (ev[i].kind == EERL_EV_CALIBRATED)
            assert_non_null(strstr(ev[i].reason, "search the training pool first"));
        if (ev[i].kind == EERL_EV_TRIAL && !first_trial_seen) {
            first_trial_seen = 1;
            assert_int_equal(ev[i].candidate.mhz[0], EERL_CLOCK_GOVERNOR);
            assert_int_equal(ev[i].candidate.mhz[1], 1680);
            assert_int_equal(ev[i].candidate.idle_mhz, 345);
            /* Training still arrives before generation: recomputed from the arrivals, the
             * update time does not change at all. */
            assert_true(ev[i].time_ratio == 1.0);
            assert_int_equal(ev[i].verdict, EERL_VERDICT_PASS);
        }
        if (ev[i].kind == EERL_EV_ROUND) {
            rounds++;
            if (rounds == 1) {
                round1_train = ev[i].candidate.mhz[1];
                assert_int_equal(ev[i].candidate.mhz[0], EERL_CLOCK_GOVERNOR);
                assert_true(round1_train != EERL_CLOCK_GOVERNOR);
            }
        }
        /* Round 2 holds round 1's training clock and moves generation on a 100 MHz grid. */
        if (rounds == 1 && ev[i].kind == EERL_EV_TRIAL) {
            assert_int_equal(ev[i].candidate.mhz[1], round1_train);
            assert_true(ev[i].candidate.mhz[0] != EERL_CLOCK_GOVERNOR);
            assert_true((1980 - ev[i].candidate.mhz[0]) % 100 <= 10 ||
                        (1980 - ev[i].candidate.mhz[0]) % 100 >= 90);
        }
    }
    assert_int_equal(rounds, 2);
    assert_true(first_trial_seen);
    assert_true(st.locked);
    free(ev);
}

static void test_generation_first_when_it_arrives_first(void **state)
{
    struct synth s;
    struct synth_run_stats rs;
    eerl_ctl_status st;
    eerl_event *ev = calloc(3000, sizeof(*ev));
    size_t n, i;
    int seen = 0;

    (void)state;
    assert_non_null(ev);
    synth_init(&s, EERL_MODE_DRAINED, 2);
    s.train_s_per_tok *= 2.0; /* training is now the bottleneck */
    n = run(&s, 60, ev, 3000, &rs, &st);
    for (i = 0; i < n; i++) {
        if (ev[i].kind == EERL_EV_CALIBRATED)
            assert_non_null(strstr(ev[i].reason, "search the generation pool first"));
        if (ev[i].kind == EERL_EV_PROPOSE && !seen) {
            seen = 1;
            assert_int_equal(ev[i].candidate.mhz[0], 1680);
            assert_int_equal(ev[i].candidate.mhz[1], EERL_CLOCK_GOVERNOR);
        }
    }
    assert_true(seen);
    free(ev);
}

static void test_locks_within_allowance(void **state)
{
    unsigned clocks[200];
    size_t nc = synth_clocks(clocks);
    struct synth s;
    struct synth_run_stats rs;
    eerl_ctl_status st;
    eerl_setting oracle;
    double oracle_e, q, e;
    eerl_event *ev = calloc(5000, sizeof(*ev));
    uint64_t seed;

    (void)state;
    assert_non_null(ev);
    for (seed = 1; seed <= 5; seed++) {
        synth_init(&s, EERL_MODE_DRAINED, seed);
        run(&s, 300, ev, 5000, &rs, &st);
        synth_oracle(&s, clocks, nc, 345, 0.98, &oracle, &oracle_e);
        synth_truth(&s, &rs.first_lock, &q, &e);
        if (verbose())
            printf("seed %llu: lock %u/%u (q %.4f e %.4f) oracle %u/%u e %.4f after q %.4f e "
                   "%.4f\n",
                   (unsigned long long)seed, rs.first_lock.mhz[0], rs.first_lock.mhz[1], q, e,
                   oracle.mhz[0], oracle.mhz[1], oracle_e, rs.after_q / rs.after_lock,
                   rs.after_e / rs.after_lock);
        assert_int_equal(rs.bad_clocks, 0);
        assert_true(rs.locked);
        assert_int_equal(rs.first_lock.idle_mhz, 345);
        assert_true(q >= 0.975);
        assert_true(rs.after_q / rs.after_lock >= 0.975);
        /* Training, the useful target, lands within two 50 MHz steps of the optimum. */
        assert_true(rs.first_lock.mhz[1] + 100 >= oracle.mhz[1] &&
                    rs.first_lock.mhz[1] <= oracle.mhz[1] + 100);
        assert_true(rs.after_e / rs.after_lock <= 1.0 - 0.5 * (1.0 - oracle_e));
    }
    free(ev);
}

static void test_second_pool_kept_only_if_it_saves_energy(void **state)
{
    struct synth s;
    struct synth_run_stats rs;
    eerl_ctl_status st;
    eerl_event *ev = calloc(5000, sizeof(*ev));
    size_t n, i;
    int rejected = 0, rounds = 0;

    (void)state;
    assert_non_null(ev);
    /* Generation GPUs draw more power at lower clocks here: lowering them never pays. */
    synth_init(&s, EERL_MODE_DRAINED, 3);
    s.p_dyn_gen = -120;
    n = run(&s, 250, ev, 5000, &rs, &st);
    for (i = 0; i < n; i++) {
        if (ev[i].kind == EERL_EV_ROUND)
            rounds++;
        if (rounds == 1 && ev[i].kind == EERL_EV_TRIAL) {
            assert_int_equal(ev[i].verdict, EERL_VERDICT_FAIL);
            if (strstr(ev[i].reason, "(round 1 setting alone)"))
                rejected++;
        }
    }
    assert_int_equal(rounds, 2);
    assert_true(rejected >= 1);
    assert_true(st.locked);
    assert_int_equal(st.locked_setting.mhz[0], EERL_CLOCK_GOVERNOR);
    assert_true(st.locked_setting.mhz[1] != EERL_CLOCK_GOVERNOR);
    free(ev);
}

static void test_drift_remeasures_governor(void **state)
{
    struct synth s;
    struct synth_run_stats a, b;
    eerl_ctl_status st_a, st_b;
    eerl_event *ev = calloc(6000, sizeof(*ev));

    (void)state;
    assert_non_null(ev);
    synth_init(&s, EERL_MODE_DRAINED, 4);
    s.drift = 0.005;
    s.drift_from = 140;
    run(&s, 320, ev, 6000, &a, &st_a);
    synth_init(&s, EERL_MODE_DRAINED, 4);
    run(&s, 320, ev, 6000, &b, &st_b);
    assert_int_equal(a.bad_clocks, 0);
    assert_true(st_a.refreshes >= 1);
    assert_true(st_a.refreshes > st_b.refreshes);
    assert_true(a.after_q / a.after_lock >= 0.97);
    free(ev);
}

static void test_long_tail_and_noise(void **state)
{
    struct synth s;
    struct synth_run_stats rs;
    eerl_ctl_status st;
    eerl_event *ev = calloc(5000, sizeof(*ev));
    double q, e;

    (void)state;
    assert_non_null(ev);
    synth_init(&s, EERL_MODE_DRAINED, 6);
    s.noise = 0.02;
    s.long_tail_at = 30;
    run(&s, 250, ev, 5000, &rs, &st);
    assert_int_equal(rs.bad_clocks, 0);
    assert_true(rs.locked);
    synth_truth(&s, &rs.first_lock, &q, &e);
    assert_true(q >= 0.97);
    assert_true(e < 0.9);
    free(ev);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_arriving_pool_first_then_second),
        cmocka_unit_test(test_generation_first_when_it_arrives_first),
        cmocka_unit_test(test_locks_within_allowance),
        cmocka_unit_test(test_second_pool_kept_only_if_it_saves_energy),
        cmocka_unit_test(test_drift_remeasures_governor),
        cmocka_unit_test(test_long_tail_and_noise),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

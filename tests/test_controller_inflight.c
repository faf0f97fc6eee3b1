/* The in-flight strategy (section 6.3): the block length follows the calibration noise (3 when
 * quiet, longer when noisy and correlated); candidate blocks are bracketed by governor blocks;
 * updates that carry requests from the previous setting never enter a block; the less busy pool
 * is searched first; it locks within the allowance; after lock one governor block follows every
 * two candidate blocks; no unsupported clock is ever emitted. */
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

struct trace {
    eerl_event *ev;
    size_t n, cap;
    eerl_setting *req; /* setting requested for each update */
    int *carry;        /* the update carried requests over */
    unsigned updates;
};

static void run(struct synth *s, unsigned n, struct trace *t, struct synth_run_stats *rs,
                eerl_ctl_status *st)
{
    unsigned clocks[200];
    size_t nc = synth_clocks(clocks), k, ne;
    eerl_ctl *ctl;
    eerl_setting set;
    eerl_event buf[64];
    unsigned i, g;

    t->cap = 8 * n;
    t->ev = calloc(t->cap, sizeof(*t->ev));
    t->req = calloc(n, sizeof(*t->req));
    t->carry = calloc(n, sizeof(*t->carry));
    t->n = 0;
    t->updates = n;
    assert_non_null(t->ev);
    assert_non_null(t->req);
    assert_non_null(t->carry);
    assert_int_equal(
        eerl_ctl_new(EERL_MODE_INFLIGHT, tu_paper_cfg(EERL_MODE_INFLIGHT), clocks, nc, 1980, &ctl),
        0);
    memset(rs, 0, sizeof(*rs));
    eerl_ctl_setting(ctl, &set);
    for (i = 0; i < n; i++) {
        eerl_obs o = synth_step(s, &set);
        t->req[i] = set;
        t->carry[i] = (o.flags & EERL_OBS_CARRYOVER) != 0;
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
        while ((ne = eerl_ctl_events(ctl, buf, 64)) > 0)
            for (k = 0; k < ne; k++) {
                if (verbose() && buf[k].kind != EERL_EV_HOLD && buf[k].kind != EERL_EV_SKIP)
                    synth_print_event(&buf[k]);
                rs->kinds[buf[k].kind]++;
                if (buf[k].kind == EERL_EV_LOCK && !rs->locked) {
                    rs->locked = 1;
                    rs->first_lock = buf[k].candidate;
                    rs->first_lock_update = buf[k].update;
                }
                if (t->n < t->cap)
                    t->ev[t->n++] = buf[k];
            }
    }
    eerl_ctl_get_status(ctl, st);
    eerl_ctl_free(ctl);
}

static void trace_free(struct trace *t)
{
    free(t->ev);
    free(t->req);
    free(t->carry);
}

static void test_block_length_follows_noise(void **state)
{
    struct synth s;
    struct synth_run_stats rs;
    eerl_ctl_status quiet, noisy;
    struct trace t;
    size_t i;

    (void)state;
    synth_init(&s, EERL_MODE_INFLIGHT, 1);
    s.noise = 0.004;
    run(&s, 60, &t, &rs, &quiet);
    for (i = 0; i < t.n; i++)
        if (t.ev[i].kind == EERL_EV_BLOCK)
            assert_non_null(strstr(t.ev[i].reason, "blocks of 3"));
    trace_free(&t);
    assert_int_equal(quiet.block_updates, 3);
    synth_init(&s, EERL_MODE_INFLIGHT, 1);
    s.noise = 0.03;
    s.rho = 0.6;
    run(&s, 60, &t, &rs, &noisy);
    trace_free(&t);
    assert_int_equal(noisy.block_updates, 12);
    synth_init(&s, EERL_MODE_INFLIGHT, 1);
    s.noise = 0.035;
    run(&s, 60, &t, &rs, &noisy);
    trace_free(&t);
    assert_int_equal(noisy.block_updates, 6);
}

static void test_blocks_bracketed_and_carryover_excluded(void **state)
{
    struct synth s;
    struct synth_run_stats rs;
    eerl_ctl_status st;
    struct trace t;
    unsigned i, skips = 0, carries = 0;
    size_t k;

    (void)state;
    synth_init(&s, EERL_MODE_INFLIGHT, 2);
    run(&s, 300, &t, &rs, &st);
    assert_int_equal(rs.bad_clocks, 0);
    for (i = 0; i < t.updates; i++)
        carries += (unsigned)t.carry[i];
    for (k = 0; k < t.n; k++) {
        if (t.ev[k].kind == EERL_EV_SKIP) {
            skips++;
            assert_non_null(strstr(t.ev[k].reason, "previous setting"));
        }
        /* A block verdict rests on exactly one block of clean updates. */
        if (t.ev[k].kind == EERL_EV_TRIAL)
            assert_int_equal(t.ev[k].n_updates, st.block_updates);
    }
    assert_true(carries > 10);
    assert_int_equal(skips, carries);
    /* Before lock: every run of candidate updates sits between governor updates, and each
     * governor run between two candidate runs is at least a block long (plus a carry-over). */
    {
        unsigned run_gov = 0, first = 46; /* start-up update + 45 calibration updates */
        int in_cand = 0;
        for (i = first; i < (unsigned)rs.first_lock_update && i < t.updates; i++) {
            int gov = eerl_setting_is_governor(&t.req[i]);
            if (gov) {
                run_gov++;
                in_cand = 0;
            } else {
                if (!in_cand && i > first)
                    assert_true(run_gov >= st.block_updates);
                in_cand = 1;
                run_gov = 0;
            }
        }
    }
    trace_free(&t);
}

static void test_less_busy_pool_first(void **state)
{
    struct synth s;
    struct synth_run_stats rs;
    eerl_ctl_status st;
    struct trace t;
    size_t k;
    int seen = 0;

    (void)state;
    /* Training is less busy (generation is the bottleneck): training first. */
    synth_init(&s, EERL_MODE_INFLIGHT, 3);
    s.inflight_phases = 1;
    run(&s, 80, &t, &rs, &st);
    for (k = 0; k < t.n && !seen; k++)
        if (t.ev[k].kind == EERL_EV_PROPOSE) {
            assert_int_equal(t.ev[k].candidate.mhz[0], EERL_CLOCK_GOVERNOR);
            assert_true(t.ev[k].candidate.mhz[1] != EERL_CLOCK_GOVERNOR);
            seen = 1;
        }
    assert_true(seen);
    trace_free(&t);
    /* Now generation is the less busy pool. */
    synth_init(&s, EERL_MODE_INFLIGHT, 3);
    s.inflight_phases = 1;
    s.train_s_per_tok *= 2.2;
    run(&s, 80, &t, &rs, &st);
    for (k = 0, seen = 0; k < t.n && !seen; k++)
        if (t.ev[k].kind == EERL_EV_PROPOSE) {
            assert_true(t.ev[k].candidate.mhz[0] != EERL_CLOCK_GOVERNOR);
            assert_int_equal(t.ev[k].candidate.mhz[1], EERL_CLOCK_GOVERNOR);
            seen = 1;
        }
    assert_true(seen);
    trace_free(&t);
}

static void test_locks_within_allowance_and_keeps_checking(void **state)
{
    struct synth s;
    struct synth_run_stats rs;
    eerl_ctl_status st;
    struct trace t;
    uint64_t seed;
    unsigned i, gov_after, cand_after;
    double q, e;

    (void)state;
    for (seed = 4; seed <= 7; seed++) {
        synth_init(&s, EERL_MODE_INFLIGHT, seed);
        run(&s, 450, &t, &rs, &st);
        synth_truth(&s, &rs.first_lock, &q, &e);
        if (verbose())
            printf("seed %llu: lock %u/%u at u%llu (q %.4f e %.4f) after q %.4f e %.4f\n",
                   (unsigned long long)seed, rs.first_lock.mhz[0], rs.first_lock.mhz[1],
                   (unsigned long long)rs.first_lock_update, q, e, rs.after_q / rs.after_lock,
                   rs.after_e / rs.after_lock);
        assert_int_equal(rs.bad_clocks, 0);
        assert_true(rs.locked);
        assert_int_equal(rs.first_lock.idle_mhz, 0); /* in-flight runs omit idle dropping */
        assert_true(q >= 0.975);
        assert_true(rs.after_q / rs.after_lock >= 0.975);
        assert_true(rs.after_e / rs.after_lock < 0.85);
        /* After lock: about one governor update for every two locked ones. */
        gov_after = cand_after = 0;
        for (i = (unsigned)rs.first_lock_update; i < t.updates; i++) {
            if (t.carry[i])
                continue;
            if (eerl_setting_is_governor(&t.req[i]))
                gov_after++;
            else
                cand_after++;
        }
        assert_true(gov_after > 0);
        assert_true((double)gov_after / cand_after > 0.4 && (double)gov_after / cand_after < 0.6);
        assert_true(rs.kinds[EERL_EV_MONITOR] >= 2);
        trace_free(&t);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_length_follows_noise),
        cmocka_unit_test(test_blocks_bracketed_and_carryover_excluded),
        cmocka_unit_test(test_less_busy_pool_first),
        cmocka_unit_test(test_locks_within_allowance_and_keeps_checking),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The synchronous strategy (colocated and disaggregated) on synthetic streams whose optimum is
 * known (tests/synth_stream.h: generation flat down to 1400 MHz, training down to 1200, power
 * falling with clock): it locks within the allowance near the brute-force optimum, keeps the
 * throughput after lock, re-measures the governor on response-length drift, survives noise and a
 * long-tail update, refuses every bad input without changing any later decision, is
 * deterministic, and never emits a clock outside the supported list. */
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

static unsigned absdiff(unsigned a, unsigned b)
{
    return a > b ? a - b : b - a;
}

static unsigned eff(unsigned mhz)
{
    return mhz ? mhz : 1980;
}

/* Runs one stream and checks what every synchronous run must satisfy. */
static void run_and_check(eerl_mode mode, uint64_t seed, double noise, unsigned n,
                          struct synth_run_stats *rs)
{
    unsigned clocks[200];
    size_t nc = synth_clocks(clocks);
    struct synth s;
    eerl_ctl *ctl = NULL;
    eerl_setting oracle;
    double oracle_e, q, e;
    unsigned idle = mode == EERL_MODE_DISAGGREGATED ? 345 : 0;

    synth_init(&s, mode, seed);
    s.noise = noise;
    assert_int_equal(eerl_ctl_new(mode, tu_paper_cfg(mode), clocks, nc, 1980, &ctl), 0);
    memset(rs, 0, sizeof(*rs));
    synth_run(&s, ctl, n, clocks, nc, rs, verbose());
    synth_oracle(&s, clocks, nc, idle, 0.98, &oracle, &oracle_e);
    synth_truth(&s, &rs->first_lock, &q, &e);
    if (verbose())
        printf("seed %llu: lock %u/%u idle %u at u%llu (q %.4f e %.4f), oracle %u/%u e %.4f, "
               "after lock q %.4f e %.4f\n",
               (unsigned long long)seed, rs->first_lock.mhz[0], rs->first_lock.mhz[1],
               rs->first_lock.idle_mhz, (unsigned long long)rs->first_lock_update, q, e,
               oracle.mhz[0], oracle.mhz[1], oracle_e, rs->after_q / rs->after_lock,
               rs->after_e / rs->after_lock);
    assert_int_equal(rs->bad_clocks, 0);
    assert_true(rs->locked);
    assert_true(rs->first_lock_update < 150);
    /* Within two 90 MHz grid steps of the optimum, per clock. */
    assert_true(absdiff(eff(rs->first_lock.mhz[0]), eff(oracle.mhz[0])) <= 180);
    assert_true(absdiff(eff(rs->first_lock.mhz[1]), eff(oracle.mhz[1])) <= 180);
    assert_int_equal(rs->first_lock.idle_mhz, idle);
    /* Within the allowance (a little noise slack), and most of the available saving. */
    assert_true(q >= 0.975);
    assert_true(rs->after_q / rs->after_lock >= 0.975);
    assert_true(rs->after_e / rs->after_lock <= 1.0 - 0.7 * (1.0 - oracle_e));
    eerl_ctl_free(ctl);
}

static void test_colocated_locks_near_optimum(void **state)
{
    struct synth_run_stats rs;
    uint64_t seed;

    (void)state;
    for (seed = 1; seed <= 5; seed++)
        run_and_check(EERL_MODE_COLOCATED, seed, 0.01, 300, &rs);
}

static void test_disaggregated_locks_near_optimum_with_idle_clock(void **state)
{
    struct synth_run_stats rs;
    uint64_t seed;

    (void)state;
    for (seed = 11; seed <= 15; seed++)
        run_and_check(EERL_MODE_DISAGGREGATED, seed, 0.01, 300, &rs);
}

static void test_noisier_updates_still_lock_within_allowance(void **state)
{
    struct synth_run_stats rs;
    uint64_t seed;

    (void)state;
    for (seed = 21; seed <= 23; seed++)
        run_and_check(EERL_MODE_COLOCATED, seed, 0.02, 300, &rs);
}

/* The start pair and the first raise: g0/t0 the start, g_up the generation clock after the start
 * pair failed on generation. */
static void check_start_and_raise(unsigned g0, unsigned t0, unsigned g_up)
{
    unsigned clocks[200];
    size_t nc = synth_clocks(clocks), k, ne;
    struct synth s;
    eerl_ctl *ctl;
    eerl_ctl_config c = *tu_paper_cfg(EERL_MODE_COLOCATED);
    eerl_setting st;
    eerl_event evs[64];
    int saw_first = 0, checked_raise = 0, i;

    synth_init(&s, EERL_MODE_COLOCATED, 3);
    assert_int_equal(eerl_ctl_new(EERL_MODE_COLOCATED, &c, clocks, nc, 1980, &ctl), 0);
    eerl_ctl_setting(ctl, &st);
    for (i = 0; i < 20; i++) {
        eerl_obs o = synth_step(&s, &st);
        assert_int_equal(eerl_ctl_observe(ctl, &o, &st), 0);
        ne = eerl_ctl_events(ctl, evs, 64);
        for (k = 0; k < ne; k++)
            if (evs[k].kind == EERL_EV_PROPOSE && !saw_first) {
                /* Both clocks start below the grid's top (Table 3 defaults: 180 and 360 MHz),
                 * after 15 calibration updates from update 2 (update 1 is the start-up). */
                assert_int_equal(evs[k].candidate.mhz[0], g0);
                assert_int_equal(evs[k].candidate.mhz[1], t0);
                assert_int_equal(evs[k].update, 16);
                saw_first = 1;
            }
    }
    /* Drive a stream where only generation is too slow at the start pair: generation knee above
     * the start clock, so the first trial fails and generation must go up, training not. */
    eerl_ctl_free(ctl);
    synth_init(&s, EERL_MODE_COLOCATED, 4);
    s.gen_knee = 1950;
    assert_int_equal(eerl_ctl_new(EERL_MODE_COLOCATED, &c, clocks, nc, 1980, &ctl), 0);
    eerl_ctl_setting(ctl, &st);
    for (i = 0; i < 40 && !checked_raise; i++) {
        eerl_obs o = synth_step(&s, &st);
        assert_int_equal(eerl_ctl_observe(ctl, &o, &st), 0);
        ne = eerl_ctl_events(ctl, evs, 64);
        for (k = 0; k < ne; k++) {
            if (evs[k].kind == EERL_EV_TRIAL) {
                assert_int_equal(evs[k].verdict, EERL_VERDICT_FAIL);
                assert_non_null(strstr(evs[k].reason, "generation added most time"));
                assert_true(evs[k].time_ratio > 1.02);
            }
            if (evs[k].kind == EERL_EV_PROPOSE && evs[k].candidate.mhz[0] != g0 && o.update > 16) {
                assert_int_equal(evs[k].candidate.mhz[0], g_up);
                assert_int_equal(evs[k].candidate.mhz[1], t0);
                checked_raise = 1;
            }
        }
    }
    assert_true(saw_first);
    assert_true(checked_raise);
    eerl_ctl_free(ctl);
}

/* The grid counts from 1965 MHz, the highest clock below the 1980 MHz peak, so the search meets
 * the clocks of the paper's locks (1785, 1695, 1425, 1335 ...). */
static void test_search_starts_reduced_then_raises_the_slower_phase(void **state)
{
    (void)state;
    check_start_and_raise(1785, 1605, 1875);
}

static void test_response_length_drift_remeasures_governor(void **state)
{
    unsigned clocks[200];
    size_t nc = synth_clocks(clocks);
    struct synth s;
    struct synth_run_stats a, b;
    eerl_ctl *ctl;
    eerl_ctl_status st;
    uint64_t refresh_drift, refresh_flat;

    (void)state;
    /* Responses grow 0.5% per update after update 120. */
    synth_init(&s, EERL_MODE_COLOCATED, 7);
    s.drift = 0.005;
    s.drift_from = 120;
    assert_int_equal(eerl_ctl_new(EERL_MODE_COLOCATED, tu_paper_cfg(EERL_MODE_COLOCATED), clocks,
                                  nc, 1980, &ctl),
                     0);
    memset(&a, 0, sizeof(a));
    synth_run(&s, ctl, 300, clocks, nc, &a, verbose());
    eerl_ctl_get_status(ctl, &st);
    refresh_drift = st.refreshes;
    assert_int_equal(a.bad_clocks, 0);
    assert_true(a.kinds[EERL_EV_REFRESH] >= 2);
    assert_true(st.locked);
    /* Throughput stays within the allowance while the work changes under it. */
    assert_true(a.after_q / a.after_lock >= 0.975);
    eerl_ctl_free(ctl);

    synth_init(&s, EERL_MODE_COLOCATED, 7);
    assert_int_equal(eerl_ctl_new(EERL_MODE_COLOCATED, tu_paper_cfg(EERL_MODE_COLOCATED), clocks,
                                  nc, 1980, &ctl),
                     0);
    memset(&b, 0, sizeof(b));
    synth_run(&s, ctl, 300, clocks, nc, &b, 0);
    eerl_ctl_get_status(ctl, &st);
    refresh_flat = st.refreshes;
    assert_true(refresh_drift >= refresh_flat + 2);
    eerl_ctl_free(ctl);
}

static void test_long_tail_update_does_not_derail(void **state)
{
    unsigned clocks[200];
    size_t nc = synth_clocks(clocks);
    struct synth s;
    struct synth_run_stats rs;
    eerl_ctl *ctl;
    double q, e;

    (void)state;
    synth_init(&s, EERL_MODE_COLOCATED, 9);
    s.long_tail_at = 20; /* inside the first trial */
    assert_int_equal(eerl_ctl_new(EERL_MODE_COLOCATED, tu_paper_cfg(EERL_MODE_COLOCATED), clocks,
                                  nc, 1980, &ctl),
                     0);
    memset(&rs, 0, sizeof(rs));
    synth_run(&s, ctl, 250, clocks, nc, &rs, verbose());
    assert_int_equal(rs.bad_clocks, 0);
    assert_true(rs.locked);
    synth_truth(&s, &rs.first_lock, &q, &e);
    assert_true(q >= 0.975);
    assert_true(e < 0.75);
    eerl_ctl_free(ctl);
}

/* Every kind of bad observation. */
static void make_bad(eerl_obs *o, int which)
{
    switch (which % 12) {
    case 0:
        o->valid_tokens = 0;
        break;
    case 1:
        o->time_s = NAN;
        break;
    case 2:
        o->energy_j = -5;
        break;
    case 3:
        o->phase_time_s[EERL_PHASE_GEN] = INFINITY;
        break;
    case 4:
        o->gen_tokens = -1;
        break;
    case 5:
        o->phase_time_s[EERL_PHASE_TRAIN] += o->time_s; /* phases exceed the update */
        break;
    case 6:
        o->phase_time_s[EERL_PHASE_OTHER] = 0.001; /* phases fall short with 'other' given */
        o->phase_time_s[EERL_PHASE_GEN] *= 0.5;
        break;
    case 7:
        o->longest_tokens = NAN;
        break;
    case 8:
        o->phase_energy_j[EERL_PHASE_GEN] = o->energy_j * 2;
        break;
    case 9:
        o->time_s = 0;
        break;
    case 10:
        o->valid_tokens = INFINITY;
        break;
    default:
        o->phase_energy_j[EERL_PHASE_LOGPROB] = -INFINITY;
        break;
    }
}

static int same_event(const eerl_event *a, const eerl_event *b)
{
    return a->update == b->update && a->kind == b->kind && a->state == b->state &&
           eerl_setting_equal(&a->candidate, &b->candidate) &&
           eerl_setting_equal(&a->next, &b->next) && a->verdict == b->verdict &&
           a->n_updates == b->n_updates &&
           !memcmp(&a->time_ratio, &b->time_ratio, sizeof(double)) &&
           !memcmp(&a->energy_ratio, &b->energy_ratio, sizeof(double)) &&
           !strcmp(a->reason, b->reason);
}

static void test_bad_inputs_refused_and_later_decisions_unchanged(void **state)
{
    unsigned clocks[200];
    size_t nc = synth_clocks(clocks), na = 0, nb = 0, k, ne, i;
    struct synth s1, s2;
    eerl_ctl *c1, *c2;
    eerl_setting st1, st2, keep;
    eerl_event *ea = calloc(4000, sizeof(eerl_event)), *eb = calloc(4000, sizeof(eerl_event));
    eerl_event buf[64];
    unsigned rejects = 0;

    (void)state;
    assert_non_null(ea);
    assert_non_null(eb);
    synth_init(&s1, EERL_MODE_DISAGGREGATED, 5);
    synth_init(&s2, EERL_MODE_DISAGGREGATED, 5);
    assert_int_equal(eerl_ctl_new(EERL_MODE_DISAGGREGATED, tu_paper_cfg(EERL_MODE_DISAGGREGATED),
                                  clocks, nc, 1980, &c1),
                     0);
    assert_int_equal(eerl_ctl_new(EERL_MODE_DISAGGREGATED, tu_paper_cfg(EERL_MODE_DISAGGREGATED),
                                  clocks, nc, 1980, &c2),
                     0);
    eerl_ctl_setting(c1, &st1);
    eerl_ctl_setting(c2, &st2);
    for (i = 0; i < 200; i++) {
        eerl_obs o1 = synth_step(&s1, &st1), o2 = synth_step(&s2, &st2);
        assert_int_equal(eerl_ctl_observe(c1, &o1, &st1), 0);
        if (i % 7 == 3) {
            eerl_obs bad = o2;
            make_bad(&bad, (int)(i / 7));
            keep = st2;
            memset(&st2, 0xab, sizeof(st2));
            assert_int_equal(eerl_ctl_observe(c2, &bad, &st2), EERL_EINVAL);
            /* ret_ untouched on failure */
            for (k = 0; k < EERL_GROUPS_MAX; k++)
                assert_int_equal(st2.mhz[k], 0xabababab);
            st2 = keep;
            ne = eerl_ctl_events(c2, buf, 64);
            assert_int_equal(ne, 1);
            assert_int_equal(buf[0].kind, EERL_EV_REJECT);
            assert_true(strlen(buf[0].reason) > 10);
            rejects++;
        }
        assert_int_equal(eerl_ctl_observe(c2, &o2, &st2), 0);
        assert_true(eerl_setting_equal(&st1, &st2));
        while ((ne = eerl_ctl_events(c1, buf, 64)) > 0)
            for (k = 0; k < ne && na < 4000; k++)
                ea[na++] = buf[k];
        while ((ne = eerl_ctl_events(c2, buf, 64)) > 0)
            for (k = 0; k < ne && nb < 4000; k++)
                eb[nb++] = buf[k];
    }
    assert_true(rejects >= 20);
    assert_int_equal(na, nb);
    for (k = 0; k < na; k++)
        assert_true(same_event(&ea[k], &eb[k]));
    {
        eerl_ctl_status s;
        eerl_ctl_get_status(c2, &s);
        assert_int_equal(s.rejected, rejects);
        assert_true(s.locked);
    }
    free(ea);
    free(eb);
    eerl_ctl_free(c1);
    eerl_ctl_free(c2);
}

static void test_odd_clock_list_is_respected(void **state)
{
    /* Clocks that lie on no regular grid: every request must still be one of them. */
    static const unsigned clocks[] = {1980, 1935, 1800, 1785, 1650, 1500, 1410,
                                      1395, 1300, 1185, 1050, 900,  705,  345};
    size_t nc = sizeof(clocks) / sizeof(clocks[0]);
    struct synth s;
    struct synth_run_stats rs;
    eerl_ctl *ctl;
    eerl_mode m;

    (void)state;
    for (m = EERL_MODE_COLOCATED; m < EERL_MODE_COUNT; m++) {
        synth_init(&s, m, 31);
        assert_int_equal(eerl_ctl_new(m, tu_paper_cfg(m), clocks, nc, 1980, &ctl), 0);
        memset(&rs, 0, sizeof(rs));
        synth_run(&s, ctl, 300, clocks, nc, &rs, 0);
        assert_int_equal(rs.bad_clocks, 0);
        assert_true(rs.kinds[EERL_EV_TRIAL] > 0);
        eerl_ctl_free(ctl);
    }
}

static void test_same_stream_same_decisions(void **state)
{
    unsigned clocks[200];
    size_t nc = synth_clocks(clocks), k, n1, n2;
    struct synth s1, s2;
    eerl_ctl *c1, *c2;
    eerl_setting a, b;
    eerl_event e1[64], e2[64];
    int i;

    (void)state;
    synth_init(&s1, EERL_MODE_COLOCATED, 77);
    synth_init(&s2, EERL_MODE_COLOCATED, 77);
    assert_int_equal(
        eerl_ctl_new(EERL_MODE_COLOCATED, tu_paper_cfg(EERL_MODE_COLOCATED), clocks, nc, 1980, &c1),
        0);
    assert_int_equal(
        eerl_ctl_new(EERL_MODE_COLOCATED, tu_paper_cfg(EERL_MODE_COLOCATED), clocks, nc, 1980, &c2),
        0);
    eerl_ctl_setting(c1, &a);
    eerl_ctl_setting(c2, &b);
    for (i = 0; i < 200; i++) {
        eerl_obs o1 = synth_step(&s1, &a), o2 = synth_step(&s2, &b);
        eerl_ctl_observe(c1, &o1, &a);
        eerl_ctl_observe(c2, &o2, &b);
        n1 = eerl_ctl_events(c1, e1, 64);
        n2 = eerl_ctl_events(c2, e2, 64);
        assert_int_equal(n1, n2);
        for (k = 0; k < n1; k++)
            assert_true(same_event(&e1[k], &e2[k]));
    }
    eerl_ctl_free(c1);
    eerl_ctl_free(c2);
}

static void test_construction_and_config_errors(void **state)
{
    unsigned clocks[200];
    size_t nc = synth_clocks(clocks);
    eerl_ctl_config cfg;
    eerl_ctl *ctl = (eerl_ctl *)0x1;
    char why[160];
    eerl_ctl_status st;
    eerl_setting s;

    (void)state;
    assert_int_equal(eerl_ctl_config_default(EERL_MODE_COLOCATED, &cfg), 0);
    /* the one default strategy, as in eerl_rt_config_default, eerl sim and eerl.Session */
    assert_int_equal(cfg.strategy, EERL_STRATEGY_EERL);
    /* Table 3 */
    assert_true(cfg.allowed_loss == 0.02);
    assert_int_equal(cfg.calibration_updates, 15);
    assert_int_equal(cfg.trial_updates, 3);
    assert_int_equal(cfg.confirm_updates, 6);
    assert_int_equal(cfg.grid_mhz, 90);
    assert_int_equal(cfg.feedback_step_mhz, 45);
    assert_int_equal(cfg.feedback_big_step_mhz, 90);
    assert_int_equal(cfg.monitor_every, 10);
    assert_int_equal(cfg.monitor_window, 20);
    assert_int_equal(cfg.idle_mhz, 0);
    assert_int_equal(eerl_ctl_config_default(EERL_MODE_DISAGGREGATED, &cfg), 0);
    assert_int_equal(cfg.idle_mhz, 345);
    cfg.allowed_loss = 1.5;
    assert_int_equal(eerl_ctl_config_check(&cfg, why, sizeof(why)), EERL_EINVAL);
    assert_non_null(strstr(why, "allowed_loss 1.5"));
    assert_int_equal(eerl_ctl_new(EERL_MODE_DISAGGREGATED, &cfg, clocks, nc, 1980, &ctl),
                     EERL_EINVAL);
    assert_ptr_equal(ctl, (eerl_ctl *)0x1);
    eerl_ctl_config_default(EERL_MODE_COLOCATED, &cfg);
    cfg.trial_updates = 0;
    assert_int_equal(eerl_ctl_config_check(&cfg, why, sizeof(why)), EERL_EINVAL);
    assert_non_null(strstr(why, "trial_updates 0"));
    assert_int_equal(eerl_ctl_new(EERL_MODE_COLOCATED, NULL, clocks, 0, 1980, &ctl), EERL_EINVAL);
    assert_int_equal(eerl_ctl_new(EERL_MODE_COLOCATED, NULL, clocks, nc, 0, &ctl), EERL_EINVAL);
    assert_int_equal(eerl_ctl_new((eerl_mode)9, NULL, clocks, nc, 1980, &ctl), EERL_EINVAL);
    assert_int_equal(eerl_ctl_new(EERL_MODE_COLOCATED, NULL, clocks, nc, 1980, &ctl), 0);
    assert_int_equal(eerl_ctl_get_status(ctl, &st), 0);
    assert_int_equal(st.state, EERL_STATE_CALIBRATING);
    assert_int_equal(eerl_ctl_setting(ctl, &s), 0);
    assert_true(eerl_setting_is_governor(&s));
    assert_int_equal(eerl_ctl_observe(ctl, NULL, &s), EERL_EINVAL);
    eerl_ctl_free(ctl);
    eerl_ctl_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_colocated_locks_near_optimum),
        cmocka_unit_test(test_disaggregated_locks_near_optimum_with_idle_clock),
        cmocka_unit_test(test_noisier_updates_still_lock_within_allowance),
        cmocka_unit_test(test_search_starts_reduced_then_raises_the_slower_phase),
        cmocka_unit_test(test_response_length_drift_remeasures_governor),
        cmocka_unit_test(test_long_tail_update_does_not_derail),
        cmocka_unit_test(test_bad_inputs_refused_and_later_decisions_unchanged),
        cmocka_unit_test(test_odd_clock_list_is_respected),
        cmocka_unit_test(test_same_stream_same_decisions),
        cmocka_unit_test(test_construction_and_config_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

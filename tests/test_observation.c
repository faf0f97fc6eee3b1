/* Observation checks: a well-formed record passes in its mode; every kind of bad value is refused
 * with EERL_EINVAL and a reason that names the field and the value. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "eerl/core.h"
#include "eerl/error.h"

static eerl_obs good_sync(void)
{
    eerl_obs o;

    memset(&o, 0, sizeof(o));
    o.update = 7;
    o.gen_tokens = 700000;
    o.valid_tokens = 650000;
    o.longest_tokens = 3000;
    o.policy_age = -1;
    o.time_s = 100;
    o.energy_j = 400000;
    o.phase_time_s[EERL_PHASE_GEN] = 60;
    o.phase_time_s[EERL_PHASE_LOGPROB] = 10;
    o.phase_time_s[EERL_PHASE_TRAIN] = 25;
    o.phase_time_s[EERL_PHASE_REFIT] = 3;
    o.phase_energy_j[EERL_PHASE_GEN] = 200000;
    o.phase_energy_j[EERL_PHASE_LOGPROB] = 40000;
    o.phase_energy_j[EERL_PHASE_TRAIN] = 140000;
    return o;
}

static eerl_obs good_drained(void)
{
    eerl_obs o = good_sync();

    o.flags = EERL_OBS_ARRIVALS | EERL_OBS_POOL_ENERGY;
    o.time_s = 65;
    o.phase_time_s[EERL_PHASE_REFIT] = 3;
    o.arrival_s[EERL_POOL_GEN] = 60;
    o.arrival_s[EERL_POOL_TRAIN] = 35;
    o.pool_energy_j[EERL_POOL_GEN] = 150000;
    o.pool_energy_j[EERL_POOL_TRAIN] = 200000;
    return o;
}

static void expect_bad(eerl_mode mode, const eerl_obs *o, const char *needle)
{
    char why[200] = "";

    assert_int_equal(eerl_obs_check(mode, o, 0.05, why, sizeof(why)), EERL_EINVAL);
    if (!strstr(why, needle)) {
        print_error("reason '%s' lacks '%s'\n", why, needle);
        fail();
    }
}

static void test_good_records_pass(void **state)
{
    eerl_obs s = good_sync(), d = good_drained(), f;
    char why[200] = "untouched";

    (void)state;
    assert_int_equal(eerl_obs_check(EERL_MODE_COLOCATED, &s, 0.05, why, sizeof(why)), 0);
    assert_string_equal(why, "untouched");
    assert_int_equal(eerl_obs_check(EERL_MODE_DISAGGREGATED, &s, 0.05, NULL, 0), 0);
    assert_int_equal(eerl_obs_check(EERL_MODE_DRAINED, &d, 0.05, NULL, 0), 0);
    /* In-flight needs only whole-update figures. */
    memset(&f, 0, sizeof(f));
    f.valid_tokens = 1000;
    f.gen_tokens = 1200;
    f.longest_tokens = 100;
    f.time_s = 10;
    f.energy_j = 1000;
    f.flags = EERL_OBS_CARRYOVER;
    assert_int_equal(eerl_obs_check(EERL_MODE_INFLIGHT, &f, 0.05, NULL, 0), 0);
    /* 'other' left at 0: the remainder counts as other. */
    s.phase_time_s[EERL_PHASE_GEN] = 30;
    assert_int_equal(eerl_obs_check(EERL_MODE_COLOCATED, &s, 0.05, NULL, 0), 0);
}

static void test_non_finite_and_negative_values(void **state)
{
    eerl_obs o;
    int p;

    (void)state;
    o = good_sync(), o.valid_tokens = 0;
    expect_bad(EERL_MODE_COLOCATED, &o, "N = 0");
    o = good_sync(), o.valid_tokens = NAN;
    expect_bad(EERL_MODE_COLOCATED, &o, "N = nan");
    o = good_sync(), o.gen_tokens = -3;
    expect_bad(EERL_MODE_COLOCATED, &o, "G = -3");
    o = good_sync(), o.longest_tokens = INFINITY;
    expect_bad(EERL_MODE_COLOCATED, &o, "L = inf");
    o = good_sync(), o.longest_tokens = 800000;
    expect_bad(EERL_MODE_COLOCATED, &o, "exceeds the generated tokens");
    /* In-flight trains on responses generated partly in earlier updates: allowed there. */
    o.phase_time_s[EERL_PHASE_GEN] = 50;
    assert_int_equal(eerl_obs_check(EERL_MODE_INFLIGHT, &o, 0.05, NULL, 0), 0);
    o = good_sync(), o.time_s = 0;
    expect_bad(EERL_MODE_COLOCATED, &o, "update time 0");
    o = good_sync(), o.time_s = -INFINITY;
    expect_bad(EERL_MODE_COLOCATED, &o, "update time -inf");
    o = good_sync(), o.energy_j = NAN;
    expect_bad(EERL_MODE_COLOCATED, &o, "update energy nan");
    for (p = 0; p < EERL_PHASE_COUNT; p++) {
        o = good_sync(), o.phase_time_s[p] = -1;
        expect_bad(EERL_MODE_COLOCATED, &o, "time -1 s");
        o = good_sync(), o.phase_energy_j[p] = NAN;
        expect_bad(EERL_MODE_COLOCATED, &o, "energy nan J");
    }
    o = good_drained(), o.arrival_s[1] = -2;
    expect_bad(EERL_MODE_DRAINED, &o, "training pool arrival -2");
    o = good_drained(), o.pool_energy_j[0] = INFINITY;
    expect_bad(EERL_MODE_DRAINED, &o, "generation pool energy inf");
    o = good_sync(), o.flags = 0x80;
    expect_bad(EERL_MODE_COLOCATED, &o, "unknown observation flags 0x80");
}

static void test_times_must_add_up(void **state)
{
    eerl_obs o;

    (void)state;
    o = good_sync(), o.phase_time_s[EERL_PHASE_TRAIN] = 50; /* 123 s in a 100 s update */
    expect_bad(EERL_MODE_COLOCATED, &o, "more than the update time 100");
    o = good_sync(), o.phase_time_s[EERL_PHASE_OTHER] = 1, o.phase_time_s[EERL_PHASE_GEN] = 30;
    expect_bad(EERL_MODE_COLOCATED, &o, "less than the update time");
    /* within tolerance passes */
    o = good_sync(), o.phase_time_s[EERL_PHASE_OTHER] = 1; /* 99 s of 100 */
    assert_int_equal(eerl_obs_check(EERL_MODE_COLOCATED, &o, 0.05, NULL, 0), 0);
    o = good_sync(), o.phase_energy_j[EERL_PHASE_GEN] = 900000;
    expect_bad(EERL_MODE_COLOCATED, &o, "phase energies add up");
    o = good_sync(), o.phase_time_s[EERL_PHASE_GEN] = 0;
    expect_bad(EERL_MODE_COLOCATED, &o, "synchronous modes need per-phase times");
    o = good_sync(), o.phase_energy_j[EERL_PHASE_TRAIN] = 0, o.phase_energy_j[1] = 0;
    expect_bad(EERL_MODE_DISAGGREGATED, &o, "per-phase energies");
    o = good_drained(), o.arrival_s[0] = 90;
    expect_bad(EERL_MODE_DRAINED, &o, "after the update ended");
    o = good_drained(), o.phase_time_s[EERL_PHASE_GEN] = 80;
    expect_bad(EERL_MODE_DRAINED, &o, "exceeds the update time");
    o = good_drained(), o.pool_energy_j[0] = 300000;
    expect_bad(EERL_MODE_DRAINED, &o, "pool energies add up");
    o = good_drained(), o.flags = 0, memset(o.phase_time_s, 0, sizeof(o.phase_time_s));
    expect_bad(EERL_MODE_DRAINED, &o, "drained mode needs each pool's busy time");
}

static void test_argument_errors(void **state)
{
    eerl_obs o = good_sync();
    char why[64];

    (void)state;
    assert_int_equal(eerl_obs_check(EERL_MODE_COLOCATED, NULL, 0.05, why, sizeof(why)),
                     EERL_EINVAL);
    assert_int_equal(eerl_obs_check((eerl_mode)17, &o, 0.05, why, sizeof(why)), EERL_EINVAL);
    assert_non_null(strstr(why, "mode 17"));
    assert_int_equal(eerl_obs_check(EERL_MODE_COLOCATED, &o, -1, why, sizeof(why)), EERL_EINVAL);
    /* A tiny buffer is truncated, not overrun. */
    o.valid_tokens = 0;
    assert_int_equal(eerl_obs_check(EERL_MODE_COLOCATED, &o, 0.05, why, 8), EERL_EINVAL);
    assert_int_equal(strlen(why), 7);
}

static void test_names_round_trip(void **state)
{
    int i;
    eerl_mode m;
    eerl_ctl_state s;
    eerl_event_kind k;
    eerl_verdict v;
    eerl_strategy st;

    (void)state;
    for (i = 0; i < EERL_MODE_COUNT; i++) {
        assert_int_equal(eerl_mode_from_name(eerl_mode_name((eerl_mode)i), &m), 0);
        assert_int_equal(m, i);
    }
    for (i = 0; i < EERL_STATE_COUNT; i++) {
        assert_int_equal(eerl_state_from_name(eerl_state_name((eerl_ctl_state)i), &s), 0);
        assert_int_equal(s, i);
    }
    for (i = 0; i < EERL_EV_KIND_COUNT; i++) {
        assert_int_equal(eerl_event_kind_from_name(eerl_event_kind_name((eerl_event_kind)i), &k),
                         0);
        assert_int_equal(k, i);
    }
    for (i = 0; i <= EERL_VERDICT_FAIL; i++) {
        assert_int_equal(eerl_verdict_from_name(eerl_verdict_name((eerl_verdict)i), &v), 0);
        assert_int_equal(v, i);
    }
    assert_int_equal(eerl_strategy_from_name("paper", &st), 0);
    assert_int_equal(eerl_mode_from_name("sync", &m), EERL_EINVAL);
    assert_int_equal(eerl_mode_from_name(NULL, &m), EERL_EINVAL);
    assert_true(eerl_mode_overlapped(EERL_MODE_DRAINED));
    assert_false(eerl_mode_overlapped(EERL_MODE_DISAGGREGATED));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_records_pass),
        cmocka_unit_test(test_non_finite_and_negative_values),
        cmocka_unit_test(test_times_must_add_up),
        cmocka_unit_test(test_argument_errors),
        cmocka_unit_test(test_names_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

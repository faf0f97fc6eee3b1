/* core/estimate.c: the rule a user relies on when reading the run's own estimate. Calibration
 * updates count as themselves (saving exactly 0, not judged); an update is predicted only from
 * governor updates before it (changing a later update changes nothing earlier); an observe-only
 * stream whose time follows its work reads 0 within its interval, and one running 10% below the
 * governor's energy reads 10% within its interval; the interval widens with the scatter and
 * with correlated errors, and where a count the fit saw pinned moves; an asynchronous run is
 * judged one update late, on the batch its generation pool made. */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/estimate.h"

/* A colocated update k at the governor whose time and energy follow its work, with a
 * deterministic wobble of relative size noise. */
static void obs_scaled(unsigned k, double noise, double scale, eerl_obs *o)
{
    double g = 9e5 * scale * (1 + 0.2 * ((k * 7919) % 13) / 13.0), n = 0.9 * g;
    double w = 1 + noise * (((k * 104729) % 17) / 8.0 - 1);

    memset(o, 0, sizeof(*o));
    o->update = k;
    o->gen_tokens = g;
    o->valid_tokens = n;
    o->longest_tokens = 4000 + (k * 31) % 96;
    o->phase_time_s[EERL_PHASE_GEN] = 80e-6 * g * w;
    o->phase_time_s[EERL_PHASE_TRAIN] = 50e-6 * n;
    o->phase_energy_j[EERL_PHASE_GEN] = 4e3 * o->phase_time_s[EERL_PHASE_GEN];
    o->phase_energy_j[EERL_PHASE_TRAIN] = 9e3 * o->phase_time_s[EERL_PHASE_TRAIN];
    o->time_s = o->phase_time_s[EERL_PHASE_GEN] + o->phase_time_s[EERL_PHASE_TRAIN] + 3;
    o->energy_j = o->phase_energy_j[EERL_PHASE_GEN] + o->phase_energy_j[EERL_PHASE_TRAIN] + 1e4;
}

static void obs_of(unsigned k, double noise, eerl_obs *o)
{
    obs_scaled(k, noise, 1.0, o);
}

/* Runs n updates (calibrated at update cal); from update cand on, the energy is scaled by
 * e_scale at a non-governor setting. Returns the estimate. */
static void run_far(unsigned n, unsigned cal, unsigned cand, double e_scale, double noise,
                    unsigned far_from, eerl_estimate *ret)
{
    struct eerl__est est;
    struct eerl__est_acc acc;
    struct eerl__est_upd u;
    eerl_obs o;
    unsigned k;

    assert_int_equal(eerl__est_init(&est, EERL_MODE_COLOCATED), 0);
    eerl__est_acc_init(&acc);
    for (k = 1; k <= n; k++) {
        obs_scaled(k, noise, k >= far_from ? 2.0 : 1.0, &o);
        if (k >= cand) {
            o.energy_j *= e_scale;
            o.setting.mhz[0] = o.setting.mhz[1] = 1500;
        }
        eerl__est_step(&est, &o, 1, k == cal, &u);
        eerl__est_acc_add(&acc, &u);
    }
    eerl__est_acc_result(&acc, ret);
    eerl__est_free(&est);
}

/* The same where the work stays where the fit saw it. */
static void run(unsigned n, unsigned cal, unsigned cand, double e_scale, double noise,
                eerl_estimate *ret)
{
    run_far(n, cal, cand, e_scale, noise, UINT32_MAX, ret);
}

static void test_calibration_alone_is_zero_and_not_judged(void **state)
{
    eerl_estimate e;

    (void)state;
    run(12, 15, 1000, 1.0, 0.01, &e);
    assert_false(e.judged);
    assert_int_equal(e.updates, 11); /* update 1 is warm-up */
    assert_int_equal(e.calibration_updates, 11);
    assert_int_equal(e.judged_updates, 0);
    assert_true(e.saving_pct == 0.0);
    assert_non_null(strstr(e.why, "calibration"));
}

static void test_observe_only_reads_zero_within_interval(void **state)
{
    eerl_estimate e;

    (void)state;
    run(120, 15, 1000, 1.0, 0.01, &e);
    assert_true(e.judged);
    assert_int_equal(e.judged_updates, 105);
    assert_true(e.saving_ci_pct[0] <= 0 && 0 <= e.saving_ci_pct[1]);
    assert_true(e.throughput_ci_pct[0] <= 0 && 0 <= e.throughput_ci_pct[1]);
    assert_true(e.saving_ci_pct[1] - e.saving_ci_pct[0] < 2.0);
}

static void test_ten_percent_less_energy_reads_ten_percent(void **state)
{
    eerl_estimate e;

    (void)state;
    run(120, 15, 20, 0.9, 0.01, &e);
    assert_true(e.judged);
    /* 100 of 119 updates at 0.9: the saving over the whole run */
    assert_true(fabs(e.saving_pct - 100.0 * 0.1 * 100 / 119) < 0.5);
    assert_true(e.saving_ci_pct[0] < e.saving_pct && e.saving_pct < e.saving_ci_pct[1]);
    assert_true(e.saved_j > 0);
}

static void test_prediction_is_forward_only(void **state)
{
    struct eerl__est a, b;
    struct eerl__est_upd ua, ub;
    eerl_obs o;
    unsigned k;

    (void)state;
    assert_int_equal(eerl__est_init(&a, EERL_MODE_COLOCATED), 0);
    assert_int_equal(eerl__est_init(&b, EERL_MODE_COLOCATED), 0);
    for (k = 1; k <= 40; k++) {
        obs_of(k, 0.01, &o);
        eerl__est_step(&a, &o, 1, k == 15, &ua);
        if (k == 30) /* b's update 30 takes twice as long: its own prediction must not move */
            o.time_s *= 2, o.phase_time_s[EERL_PHASE_GEN] *= 2;
        eerl__est_step(&b, &o, 1, k == 15, &ub);
        if (k <= 30) {
            assert_int_equal(ua.kind, ub.kind);
            assert_true(ua.pt == ub.pt && ua.pe == ub.pe);
        }
    }
    eerl__est_free(&a);
    eerl__est_free(&b);
}

static void test_interval_widens_with_correlation(void **state)
{
    struct eerl__est_acc a, b;
    struct eerl__est_upd u;
    eerl_estimate ea, eb;
    int k;

    (void)state;
    memset(&u, 0, sizeof(u));
    u.kind = EERL__EST_PRED;
    u.t = u.pt = 100;
    u.e = u.pe = 1000;
    u.sd_t = u.sd_e = 0.01;
    u.com_t = u.com_e = 0.001;
    u.df = 20;
    eerl__est_acc_init(&a);
    eerl__est_acc_init(&b);
    for (k = 0; k < 100; k++) {
        eerl__est_acc_add(&a, &u);
        u.rho_e = u.rho_t = 0.5;
        eerl__est_acc_add(&b, &u);
        u.rho_e = u.rho_t = 0;
    }
    eerl__est_acc_result(&a, &ea);
    eerl__est_acc_result(&b, &eb);
    assert_true(ea.saving_pct == 0.0 && eb.saving_pct == 0.0);
    assert_true(eb.saving_ci_pct[1] > 1.3 * ea.saving_ci_pct[1]);
    eerl__est_acc_unexplained(&b, "the work does not explain the time");
    eerl__est_acc_result(&b, &eb);
    assert_false(eb.judged);
    assert_non_null(strstr(eb.why, "does not explain"));
}

/* An update whose work lies twice as far as any the fit saw: its prediction's own error (the
 * shared part) grows with the distance, it is marked far, and a run made of such updates says
 * it cannot be judged, with the reason, rather than a figure that looks precise. */
static void test_far_update_widens_and_is_not_judged(void **state)
{
    struct eerl__est a, b;
    struct eerl__est_upd ua, ub;
    eerl_estimate e;
    eerl_obs o;
    unsigned k;

    (void)state;
    assert_int_equal(eerl__est_init(&a, EERL_MODE_COLOCATED), 0);
    assert_int_equal(eerl__est_init(&b, EERL_MODE_COLOCATED), 0);
    for (k = 1; k <= 40; k++) {
        obs_of(k, 0.01, &o);
        eerl__est_step(&a, &o, 1, k == 15, &ua);
        eerl__est_step(&b, &o, 1, k == 15, &ub);
    }
    obs_of(41, 0.01, &o);
    o.setting.mhz[0] = o.setting.mhz[1] = 1500;
    eerl__est_step(&a, &o, 1, 0, &ua);
    obs_scaled(41, 0.01, 2.0, &o);
    o.setting.mhz[0] = o.setting.mhz[1] = 1500;
    eerl__est_step(&b, &o, 1, 0, &ub);
    assert_int_equal(ua.kind, EERL__EST_PRED);
    assert_int_equal(ub.kind, EERL__EST_PRED);
    assert_true(ua.out < EERL__EST_FAR);
    assert_true(ub.out > EERL__EST_FAR);
    assert_true(ub.com_e > 3 * ua.com_e && ub.com_t > 3 * ua.com_t);
    eerl__est_free(&a);
    eerl__est_free(&b);

    run_far(120, 15, 20, 0.9, 0.01, 60, &e);
    assert_false(e.judged);
    assert_non_null(strstr(e.why, "left the range"));
    assert_true(isfinite(e.saving_ci_pct[0]) && isfinite(e.saving_ci_pct[1]));
}

/* Drained update k: its generation pool makes the batch update k+1 reports (gen_next), its
 * training pool trains on its own (the asynchronous modes' one-step-off schedule). */
static void obs_drained(unsigned k, double gen_next, eerl_obs *o)
{
    obs_of(k, 0.0, o);
    o->phase_time_s[EERL_PHASE_GEN] = 20 + 80e-6 * gen_next;
    o->phase_time_s[EERL_PHASE_TRAIN] = 50e-6 * o->valid_tokens;
    o->phase_energy_j[EERL_PHASE_GEN] = 4e3 * o->phase_time_s[EERL_PHASE_GEN];
    o->phase_energy_j[EERL_PHASE_TRAIN] = 9e3 * o->phase_time_s[EERL_PHASE_TRAIN];
    o->time_s = fmax(o->phase_time_s[EERL_PHASE_GEN], o->phase_time_s[EERL_PHASE_TRAIN]) + 3;
    o->energy_j = o->phase_energy_j[EERL_PHASE_GEN] + o->phase_energy_j[EERL_PHASE_TRAIN] + 1e4;
}

/* An asynchronous run's record of update k is made final when update k+1 ends, on update
 * k+1's generation counts: an observe-only stream whose generation follows the next batch is
 * predicted exactly (its own counts would miss by the batches' spread), the first update makes
 * no record, and the last waits as the provisional one. */
static void test_async_is_judged_one_update_late(void **state)
{
    struct eerl__est est;
    struct eerl__est_upd u;
    eerl_obs o, next;
    unsigned k, n = 60, made = 0;

    (void)state;
    assert_int_equal(eerl__est_init(&est, EERL_MODE_DRAINED), 0);
    for (k = 1; k <= n; k++) {
        obs_of(k + 1, 0.0, &next);
        obs_drained(k, next.gen_tokens, &o);
        if (!eerl__est_step(&est, &o, 1, k == 15, &u)) {
            assert_int_equal(k, 1);
            continue;
        }
        made++;
        assert_true(u.late && u.update == k - 1);
        if (u.kind == EERL__EST_PRED) {
            assert_true(u.update > 15);
            assert_true(fabs(u.pt / u.t - 1) < 1e-6 && fabs(u.pe / u.e - 1) < 1e-6);
        }
    }
    assert_int_equal(made, n - 1);
    assert_int_equal(eerl__est_pending(&est, &u), 1);
    assert_true(u.update == n && u.late && u.kind == EERL__EST_PRED);
    eerl__est_free(&est);
    assert_int_equal(eerl__est_init(&est, EERL_MODE_COLOCATED), 0);
    assert_int_equal(eerl__est_pending(&est, &u), 0); /* synchronous: nothing waits */
    eerl__est_free(&est);
}

/* Update k with the longest response at the sequence limit and a decode tail of 20 s. */
static void obs_tail(unsigned k, eerl_obs *o)
{
    obs_of(k, 0.01, o);
    o->longest_tokens = 4096;
    o->phase_time_s[EERL_PHASE_GEN] += 20;
    o->phase_energy_j[EERL_PHASE_GEN] += 20 * 4e3;
    o->time_s += 20;
    o->energy_j += 20 * 4e3;
}

/* The longest response pinned at the sequence limit through the fit: its weight is unknown,
 * so an update whose longest response left that value carries the part of the prediction that
 * weight hides in its shared error; one at the pinned value does not. */
static void test_pinned_count_widens_when_it_moves(void **state)
{
    struct eerl__est est;
    struct eerl__est_upd at, off;
    eerl_obs o;
    unsigned k;

    (void)state;
    assert_int_equal(eerl__est_init(&est, EERL_MODE_COLOCATED), 0);
    for (k = 1; k <= 20; k++) {
        obs_tail(k, &o);
        eerl__est_step(&est, &o, 1, k == 15, &at);
    }
    obs_tail(21, &o);
    o.setting.mhz[0] = o.setting.mhz[1] = 1500;
    eerl__est_step(&est, &o, 1, 0, &at);
    o.longest_tokens = 2048;
    eerl__est_step(&est, &o, 1, 0, &off);
    assert_int_equal(at.kind, EERL__EST_PRED);
    assert_int_equal(off.kind, EERL__EST_PRED);
    assert_true(off.com_t > at.com_t + 0.04 && off.com_e > at.com_e + 0.02);
    eerl__est_free(&est);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_calibration_alone_is_zero_and_not_judged),
        cmocka_unit_test(test_observe_only_reads_zero_within_interval),
        cmocka_unit_test(test_ten_percent_less_energy_reads_ten_percent),
        cmocka_unit_test(test_prediction_is_forward_only),
        cmocka_unit_test(test_interval_widens_with_correlation),
        cmocka_unit_test(test_far_update_widens_and_is_not_judged),
        cmocka_unit_test(test_async_is_judged_one_update_late),
        cmocka_unit_test(test_pinned_count_widens_when_it_moves),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

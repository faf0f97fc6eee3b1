/* Run analysis, the forward test (Appendix B) part: medians and 90th percentiles; on a noisy
 * synthetic stream with wandering response lengths the token-work model beats the constant
 * reference; on exact power-law phase times its error is ~0 and the constant reference is the
 * fit window's mean; updates under other settings leave gaps that are bridged or, with
 * consecutive, split the test; warm-up and refused observations are left out; bad arguments and
 * too few updates are refused with acc untouched. (The matched-seed comparisons are covered by
 * tests/test_sim.sh and tests/test_cli_analyze.sh.) */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "eerl/core.h"
#include "eerl/error.h"
#include "eerl/tools/analysis.h"
#include "synth_stream.h"

/* A series as eerl_an_load_trace builds it, from n observations (the series takes o). */
static void series_of(struct eerl_an_series *s, eerl_mode mode, eerl_obs *o, size_t n)
{
    size_t i;

    eerl_an_series_init(s);
    s->mode = mode;
    snprintf(s->role, sizeof(s->role), "governor");
    for (i = 0; i < n; i++)
        assert_int_equal(eerl_an_series_add(s, o[i].update, o[i].gen_tokens, o[i].valid_tokens,
                                            o[i].longest_tokens, o[i].time_s, o[i].energy_j,
                                            &o[i].setting, -1, 0),
                         0);
    s->obs = o;
    s->time_tolerance = 0.05;
}

/* n updates of the synthetic colocated cluster under the governor, lengths wandering. */
static eerl_obs *synth_updates(size_t n, double noise)
{
    struct synth s;
    eerl_setting gov;
    eerl_obs *o = calloc(n, sizeof(*o));
    size_t i;

    assert_non_null(o);
    memset(&gov, 0, sizeof(gov));
    synth_init(&s, EERL_MODE_COLOCATED, 11);
    s.noise = noise;
    for (i = 0; i < n; i++) {
        s.len_mean = 1500 * (1.0 + 0.3 * sin((double)i / 9.0));
        o[i] = synth_step(&s, &gov);
    }
    return o;
}

static void test_quantiles(void **state)
{
    double a[5] = {5, 1, 4, 2, 3}, b[4] = {4, 1, 3, 2};
    struct eerl_an_fwd_errs e;
    struct eerl_an_fwd_summary r;

    (void)state;
    eerl_an_fwd_errs_init(&e);
    e.n = 5;
    e.tput_const = e.tput_model = e.energy_const = e.energy_model = a;
    assert_int_equal(eerl_an_fwd_summarize(&e, &r), 0);
    assert_true(fabs(r.tput_const.median - 3.0) < 1e-12);
    assert_true(fabs(r.tput_const.p90 - 4.6) < 1e-12); /* 4 + 0.6 (5 - 4) */
    assert_true(fabs(a[0] - 5.0) < 1e-12);             /* the input is left unsorted */
    e.n = 4;
    e.tput_const = e.tput_model = e.energy_const = e.energy_model = b;
    assert_int_equal(eerl_an_fwd_summarize(&e, &r), 0);
    assert_true(fabs(r.energy_model.median - 2.5) < 1e-12);
    assert_true(fabs(r.energy_model.p90 - 3.7) < 1e-12);
    eerl_an_fwd_errs_init(&e);
    assert_int_equal(eerl_an_fwd_summarize(&e, &r), 0);
    assert_int_equal(r.predictions, 0);
    assert_true(isnan(r.tput_model.median) && isnan(r.tput_model.p90));
}

static void test_token_work_beats_constant(void **state)
{
    struct eerl_an_series s;
    struct eerl_an_fwd_cfg cfg = {15, 3, 3, 0, EERL_AN_FIRST_UPDATE};
    struct eerl_an_fwd_count c;
    struct eerl_an_fwd_errs e;
    struct eerl_an_fwd_summary r;
    char why[256];

    (void)state;
    series_of(&s, EERL_MODE_COLOCATED, synth_updates(200, 0.003), 200);
    assert_int_equal(eerl_an_fwd_count(&s, &cfg, &c), 0);
    assert_int_equal(c.lines, 200);
    assert_int_equal(c.warmup, 1);
    assert_int_equal(c.used, 199);
    assert_int_equal(c.gaps, 0);
    assert_int_equal(c.longest, 199);
    eerl_an_fwd_errs_init(&e);
    assert_int_equal(eerl_an_forward_test(&s, &cfg, &e, why, sizeof(why)), 0);
    assert_int_equal(eerl_an_fwd_summarize(&e, &r), 0);
    assert_int_equal(r.blocks, (199 - 18) / 3 + 1);
    assert_int_equal(r.predictions, 3 * r.blocks);
    assert_int_equal(r.gap_blocks, 0);
    assert_true(r.tput_model.median < 1.0);
    assert_true(r.tput_model.median < 0.5 * r.tput_const.median);
    assert_true(r.energy_model.median < r.energy_const.median);
    assert_true(r.tput_model.median <= r.tput_model.p90);
    /* A second pass pools: the same errors twice, the same medians. */
    assert_int_equal(eerl_an_forward_test(&s, &cfg, &e, why, sizeof(why)), 0);
    {
        struct eerl_an_fwd_summary r2;
        assert_int_equal(eerl_an_fwd_summarize(&e, &r2), 0);
        assert_int_equal(r2.blocks, 2 * r.blocks);
        assert_true(fabs(r2.tput_model.median - r.tput_model.median) < 1e-12);
    }
    eerl_an_fwd_errs_free(&e);
    eerl_an_series_free(&s);
}

/* Exact power laws: generation 0.001 (1 + G), training 0.0004 (1 + N), 1 s rest. */
static void test_exact_model_and_constant_reference(void **state)
{
    struct eerl_an_series s;
    struct eerl_an_fwd_cfg cfg = {4, 1, 1, 0, EERL_AN_FIRST_UPDATE};
    struct eerl_an_fwd_errs e;
    eerl_obs *o = calloc(6, sizeof(*o));
    double q[6];
    char why[256];
    size_t i;

    (void)state;
    assert_non_null(o);
    for (i = 0; i < 6; i++) {
        double G = 10000 + 3000 * (double)((i * 7) % 5), N = 0.7 * G + 900 * (double)(i % 3);
        double tg = 0.001 * (1 + G), tt = 0.0004 * (1 + N);
        o[i].update = i + 1;
        o[i].gen_tokens = G;
        o[i].valid_tokens = N;
        o[i].longest_tokens = 300 + 20 * (double)(i % 4);
        o[i].phase_time_s[EERL_PHASE_GEN] = tg;
        o[i].phase_time_s[EERL_PHASE_TRAIN] = tt;
        o[i].phase_time_s[EERL_PHASE_REFIT] = 1;
        o[i].phase_energy_j[EERL_PHASE_GEN] = 400 * tg;
        o[i].phase_energy_j[EERL_PHASE_TRAIN] = 600 * tt;
        o[i].phase_energy_j[EERL_PHASE_REFIT] = 50;
        o[i].time_s = tg + tt + 1;
        o[i].energy_j = 400 * tg + 600 * tt + 50;
        o[i].policy_age = -1;
        q[i] = N / o[i].time_s;
    }
    series_of(&s, EERL_MODE_COLOCATED, o, 6);
    eerl_an_fwd_errs_init(&e);
    /* Updates 2-6 are used: one block, fit on 2-5, predict 6. */
    assert_int_equal(eerl_an_forward_test(&s, &cfg, &e, why, sizeof(why)), 0);
    assert_int_equal(e.blocks, 1);
    assert_int_equal(e.n, 1);
    assert_true(e.tput_model[0] < 1e-9);
    assert_true(e.energy_model[0] < 1e-9);
    {
        double qm = (q[1] + q[2] + q[3] + q[4]) / 4;
        double em = (o[1].energy_j + o[2].energy_j + o[3].energy_j + o[4].energy_j) / 4;
        assert_true(fabs(e.tput_const[0] - 100 * fabs(qm / q[5] - 1)) < 1e-9);
        assert_true(fabs(e.energy_const[0] - 100 * fabs(em / o[5].energy_j - 1)) < 1e-9);
        assert_true(e.tput_const[0] > 0.1);
    }
    eerl_an_fwd_errs_free(&e);
    eerl_an_series_free(&s);
}

static void test_gaps_consecutive_and_refused(void **state)
{
    struct eerl_an_series s;
    struct eerl_an_fwd_cfg cfg = {15, 3, 3, 0, EERL_AN_FIRST_UPDATE};
    struct eerl_an_fwd_count c;
    struct eerl_an_fwd_errs e;
    eerl_obs *o = synth_updates(201, 0.003);
    char why[256];
    size_t i;

    (void)state;
    /* Updates 50-52 under a candidate, update 201 refused (NaN energy). */
    for (i = 49; i <= 51; i++)
        o[i].setting.mhz[EERL_GROUP_GEN] = 1500;
    o[200].energy_j = NAN;
    series_of(&s, EERL_MODE_COLOCATED, o, 201);
    assert_int_equal(eerl_an_fwd_count(&s, &cfg, &c), 0);
    assert_int_equal(c.not_governor, 3);
    assert_int_equal(c.invalid, 1);
    assert_int_equal(c.used, 196);
    assert_int_equal(c.gaps, 1);
    assert_int_equal(c.longest, 148); /* 53-200 */
    eerl_an_fwd_errs_init(&e);
    assert_int_equal(eerl_an_forward_test(&s, &cfg, &e, why, sizeof(why)), 0);
    /* Bridged: (196 - 18) / 3 + 1 blocks; those starting at used index 48..60 span the gap. */
    assert_int_equal(e.blocks, 60);
    assert_int_equal(e.gap_blocks, 5);
    eerl_an_fwd_errs_free(&e);
    cfg.consecutive = 1;
    assert_int_equal(eerl_an_forward_test(&s, &cfg, &e, why, sizeof(why)), 0);
    /* Stretches of 48 (2-49) and 148: 11 + 44 blocks, none across the gap. */
    assert_int_equal(e.blocks, 11 + 44);
    assert_int_equal(e.gap_blocks, 0);
    eerl_an_fwd_errs_free(&e);
    eerl_an_series_free(&s);
}

static void test_refusals(void **state)
{
    struct eerl_an_series s, bare;
    struct eerl_an_fwd_cfg cfg = {15, 3, 3, 0, EERL_AN_FIRST_UPDATE};
    struct eerl_an_fwd_count c;
    struct eerl_an_fwd_errs e;
    eerl_setting gov;
    char why[256];

    (void)state;
    series_of(&s, EERL_MODE_COLOCATED, synth_updates(18, 0.003), 18);
    eerl_an_fwd_errs_init(&e);
    /* 17 used updates, 18 needed. */
    assert_int_equal(eerl_an_forward_test(&s, &cfg, &e, why, sizeof(why)), EERL_ENODATA);
    assert_int_equal(e.n, 0);
    assert_int_equal(e.blocks, 0);
    cfg.fit = 14;
    assert_int_equal(eerl_an_forward_test(&s, &cfg, &e, why, sizeof(why)), 0);
    assert_int_equal(e.blocks, 1);
    eerl_an_fwd_errs_free(&e);
    cfg.fit = 1;
    assert_int_equal(eerl_an_forward_test(&s, &cfg, &e, why, sizeof(why)), EERL_EINVAL);
    cfg.fit = 15;
    cfg.predict = 0;
    assert_int_equal(eerl_an_forward_test(&s, &cfg, &e, why, sizeof(why)), EERL_EINVAL);
    cfg.predict = 3;
    cfg.step = 0;
    assert_int_equal(eerl_an_forward_test(&s, &cfg, &e, why, sizeof(why)), EERL_EINVAL);
    cfg.step = 3;
    assert_int_equal(eerl_an_forward_test(NULL, &cfg, &e, why, sizeof(why)), EERL_EINVAL);
    /* A series without observations (built by eerl sim, not read from a trace). */
    eerl_an_series_init(&bare);
    memset(&gov, 0, sizeof(gov));
    assert_int_equal(eerl_an_series_add(&bare, 1, 1, 1, 1, 1, 1, &gov, -1, 0), 0);
    assert_int_equal(eerl_an_fwd_count(&bare, &cfg, &c), EERL_EINVAL);
    assert_int_equal(eerl_an_forward_test(&bare, &cfg, &e, why, sizeof(why)), EERL_EINVAL);
    assert_int_equal(e.n, 0);
    eerl_an_series_free(&bare);
    eerl_an_series_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quantiles),
        cmocka_unit_test(test_token_work_beats_constant),
        cmocka_unit_test(test_exact_model_and_constant_reference),
        cmocka_unit_test(test_gaps_consecutive_and_refused),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Twin workload: reproducible seeds, matched seeds share the stream across runs, divergence
 * perturbs it by about the configured amount, truncation at the sequence limit, N <= G, drift,
 * expected values that agree with the sampled ones, and valid tokens N = the consumed batch's
 * response tokens in the loss mask (= C = G) unless the dynamic-sampling filter drops the
 * zero-advantage groups. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "eerl/error.h"
#include "twin/workload.h"

static const struct eerl__wl_params qwen = {
    4096, 1300, 0.8, 0.004, 0.15, {32, 64, 128}, {4, 8, 16}, {128, 512, 2048}, 0, 0};

static void test_same_seed_same_batches(void **state)
{
    struct eerl__wl a, b, c;
    struct eerl__wl_batch x, y, z;
    unsigned u;
    int differ = 0;

    (void)state;
    assert_int_equal(eerl__wl_init(&a, &qwen, 'M', 7, 0, 0), 0);
    assert_int_equal(eerl__wl_init(&b, &qwen, 'M', 7, 5, 0), 0); /* other run, no divergence */
    assert_int_equal(eerl__wl_init(&c, &qwen, 'M', 8, 0, 0), 0);
    for (u = 0; u < 20; u++) {
        eerl__wl_next(&a, u, &x);
        eerl__wl_next(&b, u, &y);
        eerl__wl_next(&c, u, &z);
        assert_true(x.G == y.G && x.N == y.N && x.L == y.L);
        differ += x.G != z.G;
    }
    assert_true(differ >= 19);
}

static void test_divergence_perturbs_matched_runs_by_about_its_size(void **state)
{
    struct eerl__wl a, b;
    struct eerl__wl_batch x, y;
    double s = 0, s2 = 0, d;
    unsigned u, n = 200;

    (void)state;
    assert_int_equal(eerl__wl_init(&a, &qwen, 'M', 3, 1, 0.03), 0);
    assert_int_equal(eerl__wl_init(&b, &qwen, 'M', 3, 2, 0.03), 0);
    for (u = 0; u < n; u++) {
        eerl__wl_next(&a, u, &x);
        eerl__wl_next(&b, u, &y);
        d = log(x.G / y.G);
        s += d;
        s2 += d * d;
    }
    d = sqrt(s2 / n - (s / n) * (s / n));
    /* Two runs each with 3% per-update spread: difference ~ 4.2%, less where clipped. */
    assert_true(d > 0.015 && d < 0.06);
}

static void test_truncation_and_valid_tokens(void **state)
{
    struct eerl__wl w;
    struct eerl__wl_batch b;
    unsigned u, at_limit = 0;

    (void)state;
    assert_int_equal(eerl__wl_init(&w, &qwen, 'S', 11, 0, 0), 0);
    for (u = 0; u < 50; u++) {
        eerl__wl_next(&w, u, &b);
        assert_true(b.L <= 4096);
        assert_true(b.N <= b.G && b.N > 0);
        assert_int_equal(b.n_resp, 128);
        at_limit += b.L == 4096;
    }
    /* The paper: nearly every Qwen update reaches the 4096-token limit. */
    assert_true(at_limit >= 40);
}

static void test_expected_matches_samples_and_drifts(void **state)
{
    struct eerl__wl w;
    struct eerl__wl_batch b, e0, e50;
    double g = 0, l = 0;
    unsigned i, n = 400;

    (void)state;
    assert_int_equal(eerl__wl_init(&w, &qwen, 'M', 5, 0, 0), 0);
    for (i = 0; i < n; i++) {
        eerl__wl_next(&w, 10, &b); /* the same update's distribution, many draws */
        g += b.G;
        l += b.L;
    }
    assert_int_equal(eerl__wl_expected(&qwen, 'M', 10, &e0), 0);
    assert_true(fabs(g / n / e0.G - 1) < 0.03);
    assert_true(fabs(l / n / e0.L - 1) < 0.03);
    /* Zero-advantage groups stay in the loss: N is every consumed response token. */
    assert_true(e0.N == e0.G && e0.C == e0.G);
    assert_int_equal(eerl__wl_expected(&qwen, 'M', 60, &e50), 0);
    assert_true(e50.mean_len > e0.mean_len * 1.1); /* drift lengthens responses */
}

static void test_valid_tokens_are_the_loss_mask_and_the_filter_option(void **state)
{
    struct eerl__wl_params filt = qwen;
    struct eerl__wl a, b;
    struct eerl__wl_batch x, y, e;
    double sn = 0, sg = 0;
    unsigned u, n = 300, dropped = 0;

    (void)state;
    filt.dyn_filter = 1;
    assert_int_equal(eerl__wl_init(&a, &qwen, 'M', 21, 0, 0), 0);
    assert_int_equal(eerl__wl_init(&b, &filt, 'M', 21, 0, 0), 0);
    for (u = 0; u < n; u++) {
        eerl__wl_next(&a, u, &x);
        eerl__wl_next(&b, u, &y);
        /* Default: every response token of the consumed batch is in the loss mask. */
        assert_true(x.N == x.G && x.C == x.G);
        /* The filter draws the same stream (same responses) and drops whole groups from the
         * batch: from N and from the tokens log-prob and training compute alike. */
        assert_true(y.G == x.G && y.L == x.L);
        assert_true(y.N == y.C && y.N <= y.G && y.N > 0);
        dropped += y.N < y.G;
        sn += y.N;
        sg += y.G;
    }
    assert_true(dropped > n * 9 / 10); /* 64 groups at p_zero 0.15: nearly always some */
    assert_true(fabs(sn / sg - (1 - qwen.p_zero)) < 0.02);
    assert_int_equal(eerl__wl_expected(&filt, 'M', 10, &e), 0);
    assert_true(fabs(e.N / e.G - 0.85) < 1e-9 && e.C == e.N);
    filt.dyn_filter = 2; /* neither off nor on */
    assert_int_equal(eerl__wl_init(&b, &filt, 'M', 21, 0, 0), EERL_EINVAL);
}

/* Overlong filtering (grpo_tiny's default, DAPO's overlong filter): truncated responses are
 * generated but leave the loss, log-prob and training: N = C = G - (truncated responses) x limit,
 * the same responses as without the filter, and the expected value agrees with the samples. */
static void test_overlong_filter_option(void **state)
{
    struct eerl__wl_params p = qwen, f;
    struct eerl__wl a, b;
    struct eerl__wl_batch x, y, e, e0;
    double sn = 0;
    unsigned u, n = 400;

    (void)state;
    p.seq_limit = 1024; /* a short limit: a third of the responses reach it */
    p.len_median = 700;
    p.len_sigma = 1.1;
    f = p;
    f.overlong_filter = 1;
    assert_int_equal(eerl__wl_init(&a, &p, 'M', 8, 0, 0), 0);
    assert_int_equal(eerl__wl_init(&b, &f, 'M', 8, 0, 0), 0);
    for (u = 0; u < n; u++) {
        eerl__wl_next(&a, 5, &x);
        eerl__wl_next(&b, 5, &y);
        assert_true(y.G == x.G && y.L == x.L && y.n_trunc == x.n_trunc);
        assert_true(x.N == x.G);
        assert_true(y.N == y.C && fabs(y.N - (y.G - 1024.0 * y.n_trunc)) < 1e-6 * y.G);
        assert_true(y.n_trunc > 0 && y.N < y.G);
        sn += y.N;
    }
    assert_int_equal(eerl__wl_expected(&f, 'M', 5, &e), 0);
    assert_int_equal(eerl__wl_expected(&p, 'M', 5, &e0), 0);
    assert_true(fabs(sn / n / e.N - 1) < 0.02);
    assert_true(e.C == e.N && e.N < 0.8 * e.G && e0.N == e0.G && e.G == e0.G);
    f.overlong_filter = 2; /* neither off nor on */
    assert_int_equal(eerl__wl_init(&b, &f, 'M', 8, 0, 0), EERL_EINVAL);
}

static void test_bad_size_rejected(void **state)
{
    struct eerl__wl w;
    struct eerl__wl_batch b;

    (void)state;
    assert_int_equal(eerl__wl_init(&w, &qwen, 'X', 1, 0, 0), EERL_EINVAL);
    assert_int_equal(eerl__wl_expected(&qwen, 'm', 1, &b), EERL_EINVAL);
    assert_int_equal(eerl__wl_init(&w, &qwen, 'S', 1, 0, -0.1), EERL_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_seed_same_batches),
        cmocka_unit_test(test_divergence_perturbs_matched_runs_by_about_its_size),
        cmocka_unit_test(test_truncation_and_valid_tokens),
        cmocka_unit_test(test_expected_matches_samples_and_drifts),
        cmocka_unit_test(test_valid_tokens_are_the_loss_mask_and_the_filter_option),
        cmocka_unit_test(test_overlong_filter_option),
        cmocka_unit_test(test_bad_size_rejected),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

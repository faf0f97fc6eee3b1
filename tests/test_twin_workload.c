/* Twin workload: reproducible seeds, matched seeds share the stream across runs, divergence
 * perturbs it by about the configured amount, truncation at the sequence limit, N <= G, drift,
 * and expected values that agree with the sampled ones. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "eerl/error.h"
#include "twin/workload.h"

static const struct eerl__wl_params qwen = {4096, 1300,          0.8,        0.004,
                                            0.15, {32, 64, 128}, {4, 8, 16}, {128, 512, 2048}};

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
    assert_true(fabs(e0.N / e0.G - 0.85) < 1e-9);
    assert_int_equal(eerl__wl_expected(&qwen, 'M', 60, &e50), 0);
    assert_true(e50.mean_len > e0.mean_len * 1.1); /* drift lengthens responses */
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
        cmocka_unit_test(test_bad_size_rejected),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

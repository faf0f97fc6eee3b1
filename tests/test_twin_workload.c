/* Twin workload: reproducible seeds, matched seeds share the stream across runs, divergence
 * perturbs it by about the configured amount, truncation at the sequence limit, N <= G, drift,
 * expected values that agree with the sampled ones, and valid tokens N = the consumed batch's
 * response tokens in the loss mask (= C = G) unless the dynamic-sampling filter drops the
 * zero-advantage groups; the length level wandering between updates (off unless asked for). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "eerl/error.h"
#include "eerl/tools/twin.h"
#include "twin/workload.h"

static const struct eerl__wl_params qwen = {4096,
                                            1300,
                                            0.8,
                                            0.004,
                                            0.15,
                                            {32, 64, 128},
                                            {4, 8, 16},
                                            {128, 512, 2048},
                                            0,
                                            0,
                                            {0, 0, 0, 0, 0, 0},
                                            0,
                                            0,
                                            0,
                                            0};

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

/* A grpo-tiny-like workload with the length level of the H200 run (docs/internals/twin.md, "Length
 * level"): 320
 * responses, limit 1024, overlong filtering. */
static struct eerl__wl_params wandering(double sd, double ar1, double ar2)
{
    struct eerl__wl_params p = qwen;

    p.seq_limit = 1024;
    p.len_median = 513;
    p.len_sigma = 1.17;
    p.drift = 0;
    p.p_zero = 0;
    p.overlong_filter = 1;
    p.len_upd_sd = sd;
    p.len_upd_ar1 = ar1;
    p.len_upd_ar2 = ar2;
    return p;
}

static void test_length_level_off_is_the_stream_as_before_and_matched_on(void **state)
{
    struct eerl__wl_params off = wandering(0, 1.25, -0.4), on = wandering(0.5, 1.25, -0.4);
    struct eerl__wl_params base = off;
    struct eerl__wl a, b, c, d;
    struct eerl__wl_batch x, y, z, v;
    unsigned u, differ = 0;

    (void)state;
    base.len_upd_ar1 = base.len_upd_ar2 = 0;
    assert_int_equal(eerl__wl_init(&a, &base, 'M', 9, 0, 0), 0);
    assert_int_equal(eerl__wl_init(&b, &off, 'M', 9, 0, 0), 0);
    assert_int_equal(eerl__wl_init(&c, &on, 'M', 9, 0, 0), 0);
    assert_int_equal(eerl__wl_init(&d, &on, 'M', 9, 3, 0), 0); /* another run of the seed */
    for (u = 0; u < 100; u++) {
        eerl__wl_next(&a, u, &x);
        eerl__wl_next(&b, u, &y);
        eerl__wl_next(&c, u, &z);
        eerl__wl_next(&d, u, &v);
        assert_true(x.G == y.G && x.N == y.N && x.n_trunc == y.n_trunc); /* sd 0: as before */
        assert_true(z.G == v.G && z.N == v.N && z.L == v.L); /* every run of a seed sees it */
        differ += z.n_trunc != x.n_trunc;
    }
    assert_true(differ >= 90);
    on.len_upd_ar1 = 1.45; /* not a stationary process: ar1 + ar2 >= 1 */
    assert_int_equal(eerl__wl_init(&c, &on, 'M', 9, 0, 0), EERL_EINVAL);
    on.len_upd_ar1 = 0.5;
    on.len_upd_ar2 = -1; /* nor with ar2 <= -1 */
    assert_int_equal(eerl__wl_init(&c, &on, 'M', 9, 0, 0), EERL_EINVAL);
    on.len_upd_ar2 = 0;
    on.len_upd_sd = -0.1;
    assert_int_equal(eerl__wl_init(&c, &on, 'M', 9, 0, 0), EERL_EINVAL);
}

/* Log mean lengths of n updates of big untruncated batches (2000 responses: a batch's own sampling
 * adds ~0.01 to the level) and their sd and autocorrelation at lags 1 and 5. */
static void level_series(struct eerl__wl_params p, unsigned n, double *x, double *ret_sd,
                         double *ret_r1, double *ret_r5)
{
    struct eerl__wl w;
    struct eerl__wl_batch b;
    double m = 0, v = 0, c1 = 0, c5 = 0;
    unsigned u;

    p.seq_limit = 1000000;
    p.len_sigma = 0.5;
    p.P[1] = 250;
    p.B[1] = 2000;
    assert_int_equal(eerl__wl_init(&w, &p, 'M', 4, 0, 0), 0);
    for (u = 0; u < n; u++) {
        eerl__wl_next(&w, u, &b);
        x[u] = log(b.mean_len);
        m += x[u] / n;
    }
    for (u = 0; u < n; u++) {
        v += (x[u] - m) * (x[u] - m) / n;
        if (u + 1 < n)
            c1 += (x[u] - m) * (x[u + 1] - m) / n;
        if (u + 5 < n)
            c5 += (x[u] - m) * (x[u + 5] - m) / n;
    }
    *ret_sd = sqrt(v);
    *ret_r1 = c1 / v;
    *ret_r5 = c5 / v;
}

/* The level's spread and autocorrelation are what was asked for: AR(1) (ar2 0) with lag-1 0.85
 * and 0.85^5 = 0.44 at lag 5; the H200 fit's AR(2) (1.25, -0.40) with about the same lag-1 (0.89)
 * but 0.27 at lag 5 (its excursions last a few updates). */
static void test_length_level_has_its_spread_and_correlation(void **state)
{
    static double x[1500];
    struct eerl__wl_params p = wandering(0.3, 0.85, 0);
    struct eerl__wl late;
    struct eerl__wl_batch b;
    double sd, r1, r5;

    (void)state;
    level_series(p, 1500, x, &sd, &r1, &r5);
    assert_true(sd > 0.25 && sd < 0.35);
    assert_true(r1 > 0.80 && r1 < 0.90 && r5 > 0.35 && r5 < 0.54);
    /* A workload asked for update 300 first sees the same level there (its responses are other
     * draws of the shared stream, which one batch's sampling barely shows). */
    p.seq_limit = 1000000;
    p.len_sigma = 0.5;
    p.P[1] = 250;
    p.B[1] = 2000;
    assert_int_equal(eerl__wl_init(&late, &p, 'M', 4, 0, 0), 0);
    eerl__wl_next(&late, 300, &b);
    assert_true(fabs(log(b.mean_len) - x[300]) < 0.05 && fabs(x[300] - x[0]) > 0.1);

    level_series(wandering(0.3, 1.25, -0.4), 1500, x, &sd, &r1, &r5);
    assert_true(sd > 0.25 && sd < 0.35);
    assert_true(r1 > 0.84 && r1 < 0.94 && r5 > 0.15 && r5 < 0.34);
}

/* Over seeds the level averages out: the expected values (what the calibration evaluates) agree
 * with the samples, and differ from one update's distribution at the mean level. */
static void test_length_level_expected_matches_samples(void **state)
{
    struct eerl__wl_params p = wandering(0.5, 1.25, -0.4), one = wandering(0, 0, 0);
    struct eerl__wl w;

    p.len_upd_shape = 0.27; /* a longer update is a wider one, as in the H200 run */
    struct eerl__wl_batch b, e, e1;
    double g = 0, cn = 0, tr = 0;
    unsigned s, n = 400;

    (void)state;
    for (s = 0; s < n; s++) {
        assert_int_equal(eerl__wl_init(&w, &p, 'M', 100 + s, 0, 0), 0);
        eerl__wl_next(&w, 10, &b);
        g += b.G / n;
        cn += b.C / n;
        tr += (double)b.n_trunc / n;
    }
    assert_int_equal(eerl__wl_expected(&p, 'M', 10, &e), 0);
    assert_int_equal(eerl__wl_expected(&one, 'M', 10, &e1), 0);
    assert_true(fabs(g / e.G - 1) < 0.03);
    assert_true(fabs(cn / e.C - 1) < 0.02);
    assert_true(fabs(tr / e.n_trunc - 1) < 0.05);
    assert_true(fabs(cn / e1.C - 1) > 0.04); /* (one update's shape alone: 4.9% off) */
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

/* Mean response length over updates [u0, u1) of sampled batches, seed 11. */
static double sampled_mean(const struct eerl__wl_params *p, unsigned u0, unsigned u1, double *L)
{
    struct eerl__wl w;
    struct eerl__wl_batch b;
    double s = 0, l = 0;
    unsigned u;

    assert_int_equal(eerl__wl_init(&w, p, 'M', 11, 0, 0), 0);
    for (u = 0; u < u1; u++) {
        eerl__wl_next(&w, u, &b);
        if (u >= u0) {
            s += b.mean_len;
            l += b.L;
        }
    }
    if (L)
        *L = l / (u1 - u0);
    return s / (u1 - u0);
}

/* Qwen's lengths with a limit far above them: the scenario's shape is not hidden by clipping. */
static struct eerl__wl_params unclipped(int kind, unsigned updates)
{
    struct eerl__wl_params p = qwen;

    p.seq_limit = 1000000;
    eerl_twin_scenario_default(kind, updates, &p.scn);
    return p;
}

static void test_scenario_steady_is_the_preset_drift(void **state)
{
    struct eerl__wl_params p = qwen;
    struct eerl__wl_batch a, b;
    unsigned u;

    (void)state;
    eerl_twin_scenario_default(EERL_TWIN_SCENARIO_STEADY, 500, &p.scn);
    assert_int_equal(p.scn.kind, EERL_TWIN_SCENARIO_STEADY);
    for (u = 0; u < 600; u += 50) {
        double shift, spread;

        eerl__wl_scenario_at(&p, u, &shift, &spread);
        assert_true(shift == qwen.drift * u && spread == 1.0);
        assert_int_equal(eerl__wl_expected(&p, 'M', u, &a), 0);
        assert_int_equal(eerl__wl_expected(&qwen, 'M', u, &b), 0);
        assert_true(a.G == b.G && a.L == b.L);
    }
}

static void test_scenario_growing_multiplies_the_length_over_the_run(void **state)
{
    struct eerl__wl_params p = unclipped(EERL_TWIN_SCENARIO_GROWING, 1000);
    struct eerl__wl_batch a, b;
    double r;

    (void)state;
    assert_true(p.scn.factor >= 2 && p.scn.factor <= 3);
    assert_int_equal(eerl__wl_expected(&p, 'M', 0, &a), 0);
    assert_int_equal(eerl__wl_expected(&p, 'M', 999, &b), 0);
    r = b.mean_len / a.mean_len;
    assert_true(fabs(r - p.scn.factor) < 0.01 * p.scn.factor);
    /* Sampled: the last 20 updates against the first 20 (the ramp moves 5% across 20). */
    r = sampled_mean(&p, 980, 1000, NULL) / sampled_mean(&p, 0, 20, NULL);
    assert_true(r > 0.9 * p.scn.factor && r < 1.1 * p.scn.factor);
    /* Half way: the geometric middle. */
    assert_int_equal(eerl__wl_expected(&p, 'M', 499, &b), 0);
    r = b.mean_len / a.mean_len;
    assert_true(fabs(r - sqrt(p.scn.factor)) < 0.02);
    /* Past its span it holds. */
    assert_int_equal(eerl__wl_expected(&p, 'M', 999, &a), 0);
    assert_int_equal(eerl__wl_expected(&p, 'M', 1500, &b), 0);
    assert_true(a.mean_len == b.mean_len);
}

/* Grounded in the H200 run data/h200/grpo-2026-11-30/colocated-long: 192 responses of at most
 * 2048 tokens, mean ~800 at the start with the longest at the limit, mean ~300 and longest ~600
 * after 40 updates. The twin's collapsing scenario from a start like that run's. */
static void test_scenario_collapsing_as_the_h200_run(void **state)
{
    struct eerl__wl_params p = qwen;
    double m0, m1, l0, l1;

    (void)state;
    p.seq_limit = 2048;
    p.len_median = 700;
    p.len_sigma = 0.55;
    p.P[1] = 24; /* 24 x 8 = 192 responses, as the run */
    p.B[1] = 192;
    eerl_twin_scenario_default(EERL_TWIN_SCENARIO_COLLAPSING, 100, &p.scn);
    m0 = sampled_mean(&p, 0, 4, &l0);
    m1 = sampled_mean(&p, 50, 100, &l1);
    assert_true(m0 > 650 && m0 < 950);
    assert_true(l0 > 1900);
    assert_true(m1 > 230 && m1 < 400);
    assert_true(l1 > 400 && l1 < 900);
}

static void test_scenario_collapsing_shape(void **state)
{
    struct eerl__wl_params p = unclipped(EERL_TWIN_SCENARIO_COLLAPSING, 300);
    struct eerl__wl_batch a, b;
    double s0 = p.len_sigma, s1 = p.len_sigma * p.scn.spread, want;

    (void)state;
    assert_int_equal(eerl__wl_expected(&p, 'M', 0, &a), 0);
    /* After ten time constants the median and the shape have arrived. */
    assert_int_equal(eerl__wl_expected(&p, 'M', (unsigned)(10 * p.scn.tau), &b), 0);
    want = p.scn.factor * exp(s1 * s1 / 2) / exp(s0 * s0 / 2);
    assert_true(fabs(b.mean_len / a.mean_len - want) < 0.01 * want);
    /* Within 30 updates most of the fall is done (the H200 run's "within 30 updates"). */
    assert_int_equal(eerl__wl_expected(&p, 'M', 30, &b), 0);
    assert_true(b.mean_len / a.mean_len < 1 - 0.8 * (1 - want));
}

static void test_scenario_step_switches_at_its_update(void **state)
{
    struct eerl__wl_params p = unclipped(EERL_TWIN_SCENARIO_STEP, 400);
    struct eerl__wl_batch a, b, c;

    (void)state;
    assert_int_equal(p.scn.at, 200);
    assert_int_equal(eerl__wl_expected(&p, 'M', 0, &a), 0);
    assert_int_equal(eerl__wl_expected(&p, 'M', 199, &b), 0);
    assert_int_equal(eerl__wl_expected(&p, 'M', 200, &c), 0);
    assert_true(a.mean_len == b.mean_len); /* no drift of its own */
    assert_true(fabs(c.mean_len / b.mean_len - p.scn.factor) < 1e-9 * p.scn.factor);
    assert_true(sampled_mean(&p, 200, 220, NULL) / sampled_mean(&p, 180, 200, NULL) > 1.7);
}

static void test_scenario_names_and_bad_parameters(void **state)
{
    struct eerl__wl_params p = qwen;
    struct eerl__wl w;
    int k = -1;

    (void)state;
    assert_int_equal(eerl_twin_scenario_parse("growing", &k), 0);
    assert_int_equal(k, EERL_TWIN_SCENARIO_GROWING);
    assert_int_equal(eerl_twin_scenario_parse("Growing", &k), EERL_ENOENT);
    assert_int_equal(eerl_twin_scenario_parse("", &k), EERL_ENOENT);
    assert_string_equal(eerl_twin_scenario_name(EERL_TWIN_SCENARIO_STEP), "step");
    eerl_twin_scenario_default(EERL_TWIN_SCENARIO_COLLAPSING, 100, &p.scn);
    p.scn.tau = 0;
    assert_int_equal(eerl__wl_init(&w, &p, 'M', 1, 0, 0), EERL_EINVAL);
    eerl_twin_scenario_default(EERL_TWIN_SCENARIO_GROWING, 100, &p.scn);
    p.scn.factor = 0;
    assert_int_equal(eerl__wl_init(&w, &p, 'M', 1, 0, 0), EERL_EINVAL);
    p.scn.kind = 17;
    assert_int_equal(eerl__wl_init(&w, &p, 'M', 1, 0, 0), EERL_EINVAL);
    eerl_twin_scenario_default(EERL_TWIN_SCENARIO_STEADY, 100, &p.scn);
    p.scn.factor = 2; /* a steady scenario has no parameters */
    assert_int_equal(eerl__wl_init(&w, &p, 'M', 1, 0, 0), EERL_EINVAL);
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
        cmocka_unit_test(test_length_level_off_is_the_stream_as_before_and_matched_on),
        cmocka_unit_test(test_length_level_has_its_spread_and_correlation),
        cmocka_unit_test(test_length_level_expected_matches_samples),
        cmocka_unit_test(test_bad_size_rejected),
        cmocka_unit_test(test_scenario_steady_is_the_preset_drift),
        cmocka_unit_test(test_scenario_growing_multiplies_the_length_over_the_run),
        cmocka_unit_test(test_scenario_collapsing_as_the_h200_run),
        cmocka_unit_test(test_scenario_collapsing_shape),
        cmocka_unit_test(test_scenario_step_switches_at_its_update),
        cmocka_unit_test(test_scenario_names_and_bad_parameters),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

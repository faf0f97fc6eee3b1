/* The twin's per-update noise (struct eerl_twin_config.noise): off by default; when on, the work
 * (G, N, L) is unchanged and only phase times move, by a spread that matches the preset's
 * parameters, mean one; a run is a pure function of (seed, run id); a preset without fitted noise
 * refuses it; the parameter file's noise entry is checked; the names parse. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <jansson.h>

#include "eerl/error.h"
#include "eerl/tools/twin.h"

#define NU 400

static eerl_twin_preset *preset(const char *model, const char *gpu, const char *text)
{
    eerl_twin_preset *p = NULL;
    assert_int_equal(eerl_twin_preset_new(model, gpu, text, &p), 0);
    return p;
}

static void run(const eerl_twin_preset *p, eerl_mode mode, unsigned ng, unsigned nt, char size,
                unsigned noise, uint64_t run_id, struct eerl_twin_update *u, unsigned n)
{
    struct eerl_twin_config c = {mode, ng, nt, size, 7, run_id, 0.0, noise};
    eerl_twin *t = NULL;
    unsigned i;

    assert_int_equal(eerl_twin_new(p, &c, &t), 0);
    for (i = 0; i < n; i++)
        assert_int_equal(eerl_twin_step(t, &u[i]), 0);
    eerl_twin_free(t);
}

static double noise_param(const char *model_gpu, const char *key)
{
    json_t *root = json_loads(eerl_twin_embedded_params(), 0, NULL);
    json_t *n = json_object_get(
        json_object_get(json_object_get(json_object_get(root, "presets"), model_gpu), "noise"),
        key);
    double v;

    assert_non_null(n);
    v = json_number_value(n);
    json_decref(root);
    return v;
}

/* Noise on: the same work, update times spread around the noise-free ones by what the
 * parameters say (colocated Qwen H100: gen and log-prob + training each at their relative
 * spread), mean one. */
static void test_noise_moves_time_not_work(void **state)
{
    eerl_twin_preset *p = preset("qwen3-30b-a3b", "h100", NULL);
    static struct eerl_twin_update a[NU], b[NU];
    double rel = noise_param("qwen3-30b-a3b/h100", "gen_rel"), s = 0, s2 = 0, pred = 0;
    unsigned i, n = 0;

    (void)state;
    run(p, EERL_MODE_COLOCATED, 32, 0, 'M', EERL_TWIN_NOISE_NONE, 0, a, NU);
    run(p, EERL_MODE_COLOCATED, 32, 0, 'M', EERL_TWIN_NOISE_FITTED, 0, b, NU);
    assert_true(rel > 0);
    for (i = 0; i < NU; i++) {
        double tg = a[i].phase_s[EERL_PHASE_GEN];
        double tt = a[i].phase_s[EERL_PHASE_LOGPROB] + a[i].phase_s[EERL_PHASE_TRAIN];
        double x = log(b[i].duration / a[i].duration);

        assert_true(a[i].gen_tokens == b[i].gen_tokens);
        assert_true(a[i].valid_tokens == b[i].valid_tokens);
        assert_true(a[i].longest == b[i].longest);
        s += x;
        s2 += x * x;
        /* relative part only: the absolute ones are < 0.1% of a minutes-long phase */
        pred += rel * rel * (tg * tg + tt * tt) / (a[i].duration * a[i].duration);
        n++;
    }
    pred = sqrt(pred / n);
    s /= n;
    s2 = sqrt(s2 / n - s * s);
    /* 400 updates: the sample sd is within a few percent of the model's; the mean within a few
     * standard errors of 0. The run is a pure function of its seed, so these cannot flake. */
    assert_true(s2 > 0.8 * pred && s2 < 1.25 * pred);
    assert_true(fabs(s) < 4 * pred / sqrt((double)n));
    eerl_twin_preset_free(p);
}

/* Noise off (the default, a zeroed config) is what a run was before: a run with the field set to
 * none equals a zero-initialized one, update by update. In every mode the noise changes time. */
static void test_noise_off_by_default_on_in_every_mode(void **state)
{
    eerl_twin_preset *p = preset("qwen3-30b-a3b", "h100", NULL);
    static struct eerl_twin_update a[40], b[40];
    struct eerl_twin_config c;
    eerl_twin *t = NULL;
    static const struct {
        eerl_mode m;
        unsigned ng, nt;
    } modes[] = {{EERL_MODE_COLOCATED, 32, 0},
                 {EERL_MODE_DISAGGREGATED, 8, 32},
                 {EERL_MODE_DRAINED, 8, 24},
                 {EERL_MODE_INFLIGHT, 16, 32}};
    unsigned i, k, moved;

    (void)state;
    for (k = 0; k < 4; k++) {
        memset(&c, 0, sizeof(c));
        c.mode = modes[k].m;
        c.n_gen = modes[k].ng;
        c.n_train = modes[k].nt;
        c.size = 'S';
        c.seed = 7;
        assert_int_equal(eerl_twin_new(p, &c, &t), 0);
        for (i = 0; i < 40; i++)
            assert_int_equal(eerl_twin_step(t, &a[i]), 0);
        eerl_twin_free(t);
        run(p, modes[k].m, modes[k].ng, modes[k].nt, 'S', EERL_TWIN_NOISE_NONE, 0, b, 40);
        for (i = 0; i < 40; i++) {
            assert_true(a[i].duration == b[i].duration);
            assert_true(a[i].energy_j == b[i].energy_j);
        }
        run(p, modes[k].m, modes[k].ng, modes[k].nt, 'S', EERL_TWIN_NOISE_FITTED, 0, b, 40);
        for (i = 0, moved = 0; i < 40; i++)
            moved += a[i].duration != b[i].duration;
        assert_true(moved >= 39);
    }
    eerl_twin_preset_free(p);
}

/* Deterministic per (seed, run id): the same run twice is identical; another run id differs. */
static void test_noise_is_deterministic_per_run(void **state)
{
    eerl_twin_preset *p = preset("grpo-tiny", "h200", NULL);
    static struct eerl_twin_update a[50], b[50], c[50];
    unsigned i, diff = 0;

    (void)state;
    run(p, EERL_MODE_COLOCATED, 1, 0, 'M', EERL_TWIN_NOISE_FITTED, 3, a, 50);
    run(p, EERL_MODE_COLOCATED, 1, 0, 'M', EERL_TWIN_NOISE_FITTED, 3, b, 50);
    run(p, EERL_MODE_COLOCATED, 1, 0, 'M', EERL_TWIN_NOISE_FITTED, 4, c, 50);
    for (i = 0; i < 50; i++) {
        assert_true(a[i].duration == b[i].duration && a[i].energy_j == b[i].energy_j);
        diff += a[i].duration != c[i].duration;
    }
    assert_true(diff >= 49);
    eerl_twin_preset_free(p);
}

/* A preset without a noise entry refuses noise (and a bad config value is refused); a bad noise
 * entry does not parse; the names parse. */
static void test_noise_refusals_and_names(void **state)
{
    json_t *root = json_loads(eerl_twin_embedded_params(), 0, NULL);
    json_t *pr = json_object_get(json_object_get(root, "presets"), "qwen3-30b-a3b/h100");
    struct eerl_twin_config c = {EERL_MODE_COLOCATED, 32, 0, 'M', 1, 0, 0.0, 0};
    eerl_twin_preset *p = NULL;
    eerl_twin *t = NULL;
    unsigned v = 9;
    char *text;

    (void)state;
    p = preset("qwen3-30b-a3b", "h100", NULL);
    c.noise = 2;
    assert_int_equal(eerl_twin_new(p, &c, &t), EERL_EINVAL);
    eerl_twin_preset_free(p);

    json_object_set_new(json_object_get(pr, "noise"), "gen_rho", json_real(1.5));
    text = json_dumps(root, 0);
    assert_int_equal(eerl_twin_preset_new("qwen3-30b-a3b", "h100", text, &p), EERL_EPARSE);
    free(text);

    json_object_del(pr, "noise");
    text = json_dumps(root, 0);
    p = preset("qwen3-30b-a3b", "h100", text);
    c.noise = EERL_TWIN_NOISE_FITTED;
    assert_int_equal(eerl_twin_new(p, &c, &t), EERL_EINVAL);
    c.noise = EERL_TWIN_NOISE_NONE;
    assert_int_equal(eerl_twin_new(p, &c, &t), 0);
    eerl_twin_free(t);
    eerl_twin_preset_free(p);
    free(text);
    json_decref(root);

    assert_int_equal(eerl_twin_noise_parse("none", &v), 0);
    assert_int_equal(v, EERL_TWIN_NOISE_NONE);
    assert_int_equal(eerl_twin_noise_parse("fitted", &v), 0);
    assert_int_equal(v, EERL_TWIN_NOISE_FITTED);
    assert_int_equal(eerl_twin_noise_parse("loud", &v), EERL_ENOENT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_noise_moves_time_not_work),
        cmocka_unit_test(test_noise_off_by_default_on_in_every_mode),
        cmocka_unit_test(test_noise_is_deterministic_per_run),
        cmocka_unit_test(test_noise_refusals_and_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

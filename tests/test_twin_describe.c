/* A model from its description (src/twin/describe.c): mistral-nemo-12b, the paper's model without a
 * sweep, loads by name and is the same preset its description gives through
 * eerl_twin_preset_describe (one path for the paper's model and a user's); a dense model keeps
 * the dense fitted model's phase physics and a MoE model the MoE one's; its work costs follow the
 * documented rules (work per token, weights, the two fitted models' decode latencies); its
 * workload is the description's, with the documented defaults; a bad description is refused with
 * a sentence that names the field and its value. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <jansson.h>

#include "eerl/error.h"
#include "eerl/tools/twin.h"
#include "twin/describe.h"
#include "twin/presets.h"

/* The embedded description of mistral-nemo-12b, as a user's file would hold it. */
static char *embedded_description(void)
{
    json_t *root = json_loads(eerl_twin_embedded_params(), 0, NULL);
    char *text;

    assert_non_null(root);
    text = json_dumps(json_object_get(json_object_get(root, "described"), "mistral-nemo-12b"), 0);
    assert_non_null(text);
    json_decref(root);
    return text;
}

static eerl_twin_preset *fitted(const char *model)
{
    eerl_twin_preset *p = NULL;

    assert_int_equal(eerl_twin_preset_new(model, "h100", NULL, &p), 0);
    return p;
}

static int same_phys(const struct eerl__phase_phys *a, const struct eerl__phase_phys *b)
{
    return a->b == b->b && a->r == b->r && a->pw == b->pw && a->pm == b->pm;
}

static void test_named_model_is_its_description(void **state)
{
    eerl_twin_preset *m = NULL, *d = NULL;
    char *text = embedded_description(), why[256];
    double dq1, sv1, dq2, sv2;
    unsigned mode;

    (void)state;
    assert_int_equal(eerl_twin_preset_new("mistral-nemo-12b", "h100", NULL, &m), 0);
    assert_int_equal(eerl_twin_preset_describe(text, "h100", NULL, why, sizeof(why), &d), 0);
    assert_string_equal(m->model, "mistral-nemo-12b");
    assert_string_equal(d->model, "mistral-nemo-12b");
    assert_memory_equal(&m->c, &d->c, sizeof(m->c));
    assert_memory_equal(&m->wl, &d->wl, sizeof(m->wl));
    for (mode = 0; mode < EERL_MODE_COUNT; mode++) {
        unsigned ng = mode == EERL_MODE_COLOCATED ? 16 : 8, nt = ng == 16 ? 0 : 16;
        assert_int_equal(eerl_twin_expected(m, mode, ng, nt, 'M', 1800, 1200, 5, 25, &dq1, &sv1),
                         0);
        assert_int_equal(eerl_twin_expected(d, mode, ng, nt, 'M', 1800, 1200, 5, 25, &dq2, &sv2),
                         0);
        assert_true(dq1 == dq2 && sv1 == sv2);
    }
    assert_non_null(strstr(eerl_twin_model_names(), "mistral-nemo-12b"));
    free(text);
    eerl_twin_preset_free(m);
    eerl_twin_preset_free(d);
}

static void test_dense_derives_from_the_dense_fitted_model(void **state)
{
    eerl_twin_preset *m = NULL, *n = fitted("nemotron-super-49b"), *q = fitted("qwen3-30b-a3b");
    struct eerl__arch mis = {0, 12.2, 12.2, 40, 5120, 32, 8},
                      nem = {0, 49.9, 49.9, 80, 8192, 64, 8}, qw = {1, 30.5, 3.3, 48, 2048, 32, 4};
    double work, k;
    int i;

    (void)state;
    assert_int_equal(eerl_twin_preset_new("mistral-nemo-12b", "h100", NULL, &m), 0);
    /* Phase physics, GPU and noise: the dense fitted model's. */
    for (i = 0; i < 4; i++)
        assert_true(same_phys(&m->ph[i], &n->ph[i]));
    assert_true(same_phys(&m->ph_tok, &n->ph_tok));
    assert_memory_equal(&m->gpu, &n->gpu, sizeof(m->gpu));
    assert_memory_equal(&m->noise, &n->noise, sizeof(m->noise));
    assert_true(m->c.if_tail == n->c.if_tail && m->c.spill == n->c.spill);
    /* The training pool's work per token with the work per token, per update with the weights. */
    work = eerl__arch_flops_per_token(&mis, 2048) / eerl__arch_flops_per_token(&nem, 4096);
    assert_true(fabs(m->c.c_lp / (n->c.c_lp * work) - 1) < 1e-12);
    assert_true(fabs(m->c.c_tr / (n->c.c_tr * work) - 1) < 1e-12);
    assert_true(fabs(m->c.t_tr0 / (n->c.t_tr0 * 12.2 / 49.9) - 1) < 1e-12);
    assert_true(fabs(m->c.t_refit / (n->c.t_refit * 12.2 / 49.9) - 1) < 1e-12);
    /* Decode latency of the last sequences: the power law in layers through both fitted models. */
    k = log(q->c.c_tail / n->c.c_tail) / log(48.0 / 80.0);
    assert_true(fabs(m->c.c_tail / (n->c.c_tail * pow(40.0 / 80.0, k)) - 1) < 1e-12);
    /* Generation's throughput term through both fitted models in the work per token. */
    k = log(q->c.c_tok / n->c.c_tok) /
        log(eerl__arch_flops_per_token(&qw, 2048) / eerl__arch_flops_per_token(&nem, 4096));
    assert_true(fabs(m->c.c_tok / (n->c.c_tok * pow(work, k)) - 1) < 1e-12);
    /* Its workload is the description's: the paper's Table 4 sizes, 4096 tokens. */
    assert_int_equal(m->wl.seq_limit, 4096);
    assert_int_equal(m->wl.P[1], 64);
    assert_int_equal(m->wl.K[1], 8);
    assert_int_equal(m->wl.B[1], 512);
    eerl_twin_preset_free(m);
    eerl_twin_preset_free(n);
    eerl_twin_preset_free(q);
}

static void test_moe_derives_from_the_moe_fitted_model(void **state)
{
    const char *text = "{\"name\": \"my-moe\", \"moe\": true, \"params_total_b\": 16, "
                       "\"params_active_b\": 2.5, \"layers\": 28, \"hidden\": 2048, "
                       "\"heads\": 16, \"kv_heads\": 4}";
    eerl_twin_preset *m = NULL, *q = fitted("qwen3-30b-a3b");
    char why[256];
    int i;

    (void)state;
    assert_int_equal(eerl_twin_preset_describe(text, "h100", NULL, why, sizeof(why), &m), 0);
    assert_string_equal(m->model, "my-moe");
    for (i = 0; i < 4; i++)
        assert_true(same_phys(&m->ph[i], &q->ph[i]));
    /* Workload defaults: the paper's Qwen3 sizes, 4096 tokens, median a quarter of that. */
    assert_int_equal(m->wl.seq_limit, 4096);
    assert_true(m->wl.len_median == 1024 && m->wl.len_sigma == 0.8 && m->wl.p_zero == 0.15);
    assert_int_equal(m->wl.B[0], 128);
    assert_int_equal(m->wl.B[2], 2048);
    eerl_twin_preset_free(m);
    eerl_twin_preset_free(q);
}

/* A description refused: the error code and a sentence holding each of the words given. */
static void refused(const char *text, int err, const char *w1, const char *w2)
{
    eerl_twin_preset *p = NULL;
    char why[256] = "";

    assert_int_equal(eerl_twin_preset_describe(text, "h100", NULL, why, sizeof(why), &p), err);
    assert_null(p);
    if (!strstr(why, w1) || (w2 && !strstr(why, w2)))
        fail_msg("'%s' does not name '%s' and '%s'", why, w1, w2 ? w2 : "");
}

static void test_bad_descriptions_name_the_field_and_value(void **state)
{
#define ARCH "\"moe\": false, \"params_total_b\": 8, \"hidden\": 4096, \"heads\": 32"
    eerl_twin_preset *p = NULL;

    (void)state;
    refused("{" ARCH ", \"layers\": 0}", EERL_ERANGE, "'layers'", " 0;");
    refused("{" ARCH "}", EERL_EPARSE, "'layers'", "missing");
    refused("{" ARCH ", \"layers\": 32, \"kv_heads\": 5}", EERL_ERANGE, "'kv_heads'", "5");
    refused("{" ARCH ", \"layers\": 32, \"params_active_b\": 4}", EERL_ERANGE, "'params_active_b'",
            "4");
    refused("{\"moe\": true, \"params_total_b\": 8, \"params_active_b\": 9, \"layers\": 8, "
            "\"hidden\": 512, \"heads\": 8}",
            EERL_ERANGE, "'params_active_b'", "9");
    refused("{\"params_total_b\": 8, \"layers\": 32, \"hidden\": 4096, \"heads\": 32}", EERL_EPARSE,
            "'moe'", "missing");
    refused("{" ARCH ", \"layers\": 32, \"workload\": {\"seq_limit\": 4096, \"len_median\": 9000}}",
            EERL_ERANGE, "'len_median'", "9000");
    refused("{" ARCH ", \"layers\": 32, \"workload\": {\"sizes\": {\"M\": [64, 8, 500]}}}",
            EERL_ERANGE, "'workload.sizes.M'", "500");
    refused("{" ARCH ", \"layers\": \"many\"}", EERL_EPARSE, "'layers'", "not a whole number");
    refused("{\"moe\": false,", EERL_EPARSE, "not JSON", NULL);
    /* An unknown GPU: not found, like a fitted model's. */
    assert_int_equal(
        eerl_twin_preset_describe("{" ARCH ", \"layers\": 32}", "a100", NULL, NULL, 0, &p),
        EERL_ENOENT);
#undef ARCH
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_named_model_is_its_description),
        cmocka_unit_test(test_dense_derives_from_the_dense_fitted_model),
        cmocka_unit_test(test_moe_derives_from_the_moe_fitted_model),
        cmocka_unit_test(test_bad_descriptions_name_the_field_and_value),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

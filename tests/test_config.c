/* Configuration structs and the ABI (src/core/config.c, src/runtime/session.c): eerl_ctl_config
 * and eerl_rt_config are size-tagged. The defaults set the size; a caller's shorter struct
 * (down to the first tagged release's fields) is read with the defaults for the rest and builds
 * the same controller; an unknown size (0, too small, larger than this release's) is refused
 * with EERL_EINVAL and a message naming it, by the check, the controller and the session. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "eerl/core.h"
#include "eerl/error.h"
#include "eerl/options.h"
#include "eerl/runtime.h"
#include "eerl/tools/twin.h"
#include "synth_stream.h"
#include "testutil.h"

#define CTL_MIN                                                                                    \
    (offsetof(eerl_ctl_config, group_names) + sizeof(((eerl_ctl_config *)0)->group_names))
#define RT_MIN (offsetof(eerl_rt_config, resume_tag) + sizeof(((eerl_rt_config *)0)->resume_tag))

static void test_defaults_set_the_size(void **state)
{
    eerl_ctl_config c;
    eerl_rt_config r;

    (void)state;
    memset(&c, 0xab, sizeof(c));
    assert_int_equal(eerl_ctl_config_default(EERL_MODE_DRAINED, &c), 0);
    assert_int_equal(c.size, sizeof(c));
    assert_int_equal(c.idle_mhz, 345);
    assert_int_equal(eerl_ctl_config_check(&c, NULL, 0), 0);
    memset(&r, 0xab, sizeof(r));
    assert_int_equal(eerl_rt_config_default(EERL_MODE_DRAINED, &r), 0);
    assert_int_equal(r.size, sizeof(r));
    assert_int_equal(r.mode, EERL_MODE_DRAINED);
    /* The function of the macro's name, as a binding calls it, does the same. */
    memset(&c, 0, sizeof(c));
    assert_int_equal((eerl_ctl_config_default)(EERL_MODE_COLOCATED, &c), 0);
    assert_int_equal(c.size, sizeof(c));
    /* Too small a struct for even the first tagged release's fields. */
    assert_int_equal(eerl_ctl_config_init(EERL_MODE_COLOCATED, &c, CTL_MIN - 1), EERL_EINVAL);
    assert_int_equal(eerl_rt_config_init(EERL_MODE_COLOCATED, &r, RT_MIN - 1), EERL_EINVAL);
}

/* A caller built with a shorter struct: init writes only its bytes, and the controller built
 * from it decides as one built from this release's struct. */
static void test_shorter_struct_is_read(void **state)
{
    unsigned clocks[200];
    size_t nc = synth_clocks(clocks), i;
    unsigned char *buf = malloc(sizeof(eerl_ctl_config) + 16);
    eerl_ctl_config *shortc = (eerl_ctl_config *)buf, full;
    eerl_ctl *a = NULL, *b = NULL;
    struct synth s;

    (void)state;
    assert_non_null(buf);
    memset(buf, 0x5a, sizeof(eerl_ctl_config) + 16);
    assert_int_equal(eerl_ctl_config_init(EERL_MODE_COLOCATED, shortc, CTL_MIN), 0);
    assert_int_equal(shortc->size, CTL_MIN);
    for (i = CTL_MIN; i < sizeof(eerl_ctl_config) + 16; i++)
        assert_int_equal(buf[i], 0x5a);
    shortc->strategy = EERL_STRATEGY_EERL;
    assert_int_equal(eerl_ctl_config_check(shortc, NULL, 0), 0);
    eerl_ctl_config_default(EERL_MODE_COLOCATED, &full);
    full.strategy = EERL_STRATEGY_EERL;
    assert_int_equal(eerl_ctl_new(EERL_MODE_COLOCATED, shortc, clocks, nc, 1980, &a), 0);
    assert_int_equal(eerl_ctl_new(EERL_MODE_COLOCATED, &full, clocks, nc, 1980, &b), 0);
    synth_init(&s, EERL_MODE_COLOCATED, 3);
    for (i = 0; i < 80; i++) {
        eerl_setting sa, sb;
        eerl_obs o;
        assert_int_equal(eerl_ctl_setting(a, &sa), 0);
        assert_int_equal(eerl_ctl_setting(b, &sb), 0);
        assert_true(eerl_setting_equal(&sa, &sb));
        o = synth_step(&s, &sa);
        assert_int_equal(eerl_ctl_observe(a, &o, &sa), 0);
        assert_int_equal(eerl_ctl_observe(b, &o, &sb), 0);
        assert_true(eerl_setting_equal(&sa, &sb));
    }
    eerl_ctl_free(a);
    eerl_ctl_free(b);
    free(buf);
}

/* A revision key, an experimental option of the controller (name): the current revision by
 * default in every mode and the only one a controller takes; an older one is refused naming it
 * and the current one (a trace it decided replays with the eerl that wrote it), as is a newer
 * one (out of the table's bounds). */
static void check_revision(const char *name, unsigned now, eerl_strategy strategy)
{
    unsigned clocks[200];
    size_t nc = synth_clocks(clocks);
    eerl_ctl_config c;
    eerl_ctl *ctl;
    char why[300] = "", want[120];
    double v;
    int m;

    for (m = 0; m < EERL_MODE_COUNT; m++) {
        eerl_ctl_config_default((eerl_mode)m, &c);
        c.strategy = strategy;
        assert_int_equal(eerl_ctl_new((eerl_mode)m, &c, clocks, nc, 1980, &ctl), 0);
        assert_int_equal(eerl_ctl_get_option(ctl, name, &v), 0);
        assert_true(v == now);
        eerl_ctl_free(ctl);
    }
    assert_int_equal(eerl_ctl_new(EERL_MODE_COLOCATED, &c, clocks, nc, 1980, &ctl), 0);
    assert_int_equal(eerl_ctl_set_option(ctl, name, now, NULL, 0), 0);
    assert_int_equal(eerl_ctl_set_option(ctl, name, now - 1, why, sizeof(why)), EERL_EINVAL);
    snprintf(want, sizeof(want),
             "%s %u is an older revision: this eerl decides as revision %u only", name, now - 1,
             now);
    assert_non_null(strstr(why, want));
    assert_int_equal(eerl_ctl_set_option(ctl, name, 0, NULL, 0), EERL_EINVAL);
    assert_int_equal(eerl_ctl_set_option(ctl, name, now + 1, why, sizeof(why)), EERL_EINVAL);
    snprintf(want, sizeof(want), "%s %u must be a whole number in [0, %u]", name, now + 1, now);
    assert_non_null(strstr(why, want));
    assert_int_equal(eerl_ctl_get_option(ctl, name, &v), 0);
    assert_true(v == now);
    eerl_ctl_free(ctl);
    /* Not a field of the configuration: a struct is the same in every view. */
    eerl_ctl_config_default(EERL_MODE_COLOCATED, &c);
    assert_int_equal(eerl_ctl_config_set(&c, name, now, why, sizeof(why)), EERL_EINVAL);
    assert_non_null(strstr(why, "eerl_ctl_set_option"));
    assert_int_equal(eerl_ctl_config_get(&c, name, &v), EERL_EINVAL);
}

/* The eerl strategy's revisions: 12 in colocated, disaggregated and drained mode, 5 in-flight. */
static void test_eerl_revision(void **state)
{
    (void)state;
    check_revision("eerl_revision", 12, EERL_STRATEGY_EERL);
    check_revision("inflight_revision", 5, EERL_STRATEGY_EERL);
}

/* The paper strategy's grid revision: 1. */
static void test_paper_revision(void **state)
{
    (void)state;
    check_revision("paper_revision", 1, EERL_STRATEGY_PAPER);
}

static void test_unknown_sizes_are_refused(void **state)
{
    unsigned clocks[200];
    size_t nc = synth_clocks(clocks);
    const size_t bad[] = {0, CTL_MIN - 1, sizeof(eerl_ctl_config) + 8};
    eerl_ctl_config c;
    eerl_ctl *ctl = (eerl_ctl *)0x1;
    char why[200];
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char want[64];
        eerl_ctl_config_default(EERL_MODE_COLOCATED, &c);
        c.size = bad[i];
        why[0] = '\0';
        assert_int_equal(eerl_ctl_config_check(&c, why, sizeof(why)), EERL_EINVAL);
        snprintf(want, sizeof(want), "configuration size %zu ", bad[i]);
        assert_non_null(strstr(why, want));
        assert_non_null(strstr(why, "eerl_ctl_config_default"));
        assert_int_equal(eerl_ctl_new(EERL_MODE_COLOCATED, &c, clocks, nc, 1980, &ctl),
                         EERL_EINVAL);
        assert_ptr_equal(ctl, (eerl_ctl *)0x1);
    }
}

static void test_session_refuses_unknown_sizes(void **state)
{
    struct eerl_twin_config tc;
    eerl_twin_preset *p = NULL;
    eerl_twin *tw = NULL;
    eerl_device *dev = NULL;
    eerl_rt_config rc;
    eerl_ctl_config cc;
    eerl_rt *rt = (eerl_rt *)0x1;
    char why[300];

    (void)state;
    assert_int_equal(eerl_twin_preset_new("qwen3-30b-a3b", "h100", NULL, &p), 0);
    memset(&tc, 0, sizeof(tc));
    tc.mode = EERL_MODE_COLOCATED;
    tc.n_gen = 2;
    tc.size = 'M';
    tc.seed = 7;
    assert_int_equal(eerl_twin_new(p, &tc, &tw), 0);
    assert_int_equal(eerl_twin_device(tw, &dev), 0);
    eerl_rt_config_default(EERL_MODE_COLOCATED, &rc);
    rc.gen_gpus[0] = 0;
    rc.gen_gpus[1] = 1;
    rc.n_gen = 2;
    rc.observe_only = 1;
    rc.size = 0;
    assert_int_equal(eerl_rt_new(dev, &rc, why, sizeof(why), &rt), EERL_EINVAL);
    assert_non_null(strstr(why, "configuration size 0 "));
    assert_ptr_equal(rt, (eerl_rt *)0x1);
    /* A controller configuration of an unknown size inside a good session configuration. */
    rc.size = sizeof(rc);
    eerl_ctl_config_default(EERL_MODE_COLOCATED, &cc);
    cc.size = 3;
    rc.ctl_cfg = &cc;
    assert_int_equal(eerl_rt_new(dev, &rc, why, sizeof(why), &rt), EERL_EINVAL);
    assert_non_null(strstr(why, "configuration size 3 "));
    /* And with both right, the session opens. */
    cc.size = sizeof(cc);
    assert_int_equal(eerl_rt_new(dev, &rc, why, sizeof(why), &rt), 0);
    eerl_rt_free(rt);
    eerl_device_free(dev); /* the device borrows the twin: freed first */
    eerl_twin_free(tw);
    eerl_twin_preset_free(p);
}

/* The table of options: each default lies within its bounds, in every mode, and is the
 * default the configurations start from. */
static void test_option_defaults_within_bounds(void **state)
{
    eerl_option_info o;
    eerl_ctl_config c;
    eerl_rt_config rc;
    double v;
    size_t i;
    int m;

    (void)state;
    assert_true(eerl_option_count() > 30);
    assert_int_equal(eerl_option_info_get(eerl_option_count(), &o), EERL_EINVAL);
    for (i = 0; i < eerl_option_count(); i++) {
        assert_int_equal(eerl_option_info_get(i, &o), 0);
        assert_int_equal(eerl_option_find(o.name), (int)i);
        for (m = 0; m < EERL_MODE_COUNT; m++) {
            assert_int_equal(eerl_option_check(o.name, o.defaults[m], NULL, 0), 0);
            eerl_ctl_config_default((eerl_mode)m, &c);
            eerl_rt_config_default((eerl_mode)m, &rc);
            if (eerl_ctl_config_get(&c, o.name, &v) == 0)
                assert_true(v == o.defaults[m]);
            if (o.flags & EERL_OPTION_RUNTIME) {
                assert_int_equal(eerl_rt_config_get(&rc, o.name, &v), 0);
                assert_true(v == o.defaults[m]);
            }
        }
    }
    assert_int_equal(eerl_option_find("no_such_option"), EERL_EINVAL);
}

/* One range for allowed_loss and one message, whichever way it comes in: 0.6 was accepted
 * through eerl_ctl_config (in [0, 1)) and refused through eerl_rt_config (in (0, 0.5)). */
static void test_allowed_loss_one_range_one_message(void **state)
{
    const char *want = "allowed_loss 0.6 must be in (0, 0.5)";
    eerl_ctl_config c;
    eerl_rt_config rc;
    char why[200] = "";

    (void)state;
    assert_int_equal(eerl_option_check("allowed_loss", 0.6, why, sizeof(why)), EERL_EINVAL);
    assert_string_equal(why, want);
    eerl_ctl_config_default(EERL_MODE_COLOCATED, &c);
    c.allowed_loss = 0.6;
    why[0] = '\0';
    assert_int_equal(eerl_ctl_config_check(&c, why, sizeof(why)), EERL_EINVAL);
    assert_string_equal(why, want);
    eerl_ctl_config_default(EERL_MODE_COLOCATED, &c);
    why[0] = '\0';
    assert_int_equal(eerl_ctl_config_set(&c, "allowed_loss", 0.6, why, sizeof(why)), EERL_EINVAL);
    assert_string_equal(why, want);
    assert_true(c.allowed_loss == 0.02);
    eerl_rt_config_default(EERL_MODE_COLOCATED, &rc);
    why[0] = '\0';
    assert_int_equal(eerl_rt_config_set(&rc, "allowed_loss", 0.6, why, sizeof(why)), EERL_EINVAL);
    assert_string_equal(why, want);
    assert_int_equal(eerl_rt_config_set(&rc, "allowed_loss", 0.03, why, sizeof(why)), 0);
    assert_true(rc.allowed_loss == 0.03);
    assert_int_equal(eerl_ctl_config_set(&c, "trial_updates", 2.5, why, sizeof(why)), EERL_EINVAL);
    assert_string_equal(why, "trial_updates 2.5 must be a whole number in [1, 1000]");
    assert_int_equal(eerl_rt_config_set(&rc, "trial_updates", 3, why, sizeof(why)), EERL_EINVAL);
    c.size = CTL_MIN;
    assert_int_equal(eerl_ctl_config_set(&c, "trial_updates", 4, why, sizeof(why)), 0);
    assert_int_equal(c.trial_updates, 4);
}

/* An experimental option is no field of any struct: it is set on a controller by name, before
 * its first observation, within the table's bounds; the configuration refuses it, saying where
 * it is set, and a controller refuses a stable one the same way. */
static void test_experimental_options_are_set_on_the_controller(void **state)
{
    unsigned clocks[200];
    size_t nc = synth_clocks(clocks);
    eerl_ctl_config c;
    eerl_ctl *ctl;
    eerl_setting s;
    struct synth sy;
    eerl_obs o;
    char why[300] = "";
    double v;

    (void)state;
    eerl_ctl_config_default(EERL_MODE_COLOCATED, &c);
    assert_int_equal(eerl_ctl_config_set(&c, "warmup_updates", 0, why, sizeof(why)), EERL_EINVAL);
    assert_string_equal(why, "warmup_updates is an experimental option of the controller, not a "
                             "field of its configuration: set it with eerl_ctl_set_option "
                             "(eerl/options.h)");
    c.strategy = EERL_STRATEGY_PAPER;
    assert_int_equal(eerl_ctl_new(EERL_MODE_COLOCATED, &c, clocks, nc, 1980, &ctl), 0);
    assert_int_equal(eerl_ctl_get_option(ctl, "warmup_updates", &v), 0);
    assert_true(v == 1);
    assert_int_equal(eerl_ctl_get_option(ctl, "allowed_loss", &v), 0); /* a stable one too */
    assert_true(v == 0.02);
    assert_int_equal(eerl_ctl_get_option(ctl, "meter_interval_ms", &v), EERL_EINVAL);
    assert_int_equal(eerl_ctl_set_option(ctl, "warmup_updates", 1001, why, sizeof(why)),
                     EERL_EINVAL);
    assert_string_equal(why, "warmup_updates 1001 must be a whole number in [0, 1000]");
    assert_int_equal(eerl_ctl_set_option(ctl, "allowed_loss", 0.03, why, sizeof(why)), EERL_EINVAL);
    assert_non_null(strstr(why, "set it with eerl_ctl_config_set before eerl_ctl_new"));
    assert_int_equal(eerl_ctl_set_option(ctl, "warmup_updates", 0, why, sizeof(why)), 0);
    assert_int_equal(eerl_ctl_get_option(ctl, "warmup_updates", &v), 0);
    assert_true(v == 0);
    synth_init(&sy, EERL_MODE_COLOCATED, 3);
    assert_int_equal(eerl_ctl_setting(ctl, &s), 0);
    o = synth_step(&sy, &s);
    assert_int_equal(eerl_ctl_observe(ctl, &o, &s), 0);
    assert_int_equal(eerl_ctl_set_option(ctl, "warmup_updates", 1, why, sizeof(why)), EERL_ESTATE);
    assert_non_null(strstr(why, "before the first"));
    eerl_ctl_free(ctl);
}

static int read_fails(void *ctx, eerl_device_reading *ret, size_t n)
{
    (void)ctx;
    (void)ret;
    (void)n;
    return EERL_EIO;
}

/* eerl_rt_new checks the options before it asks the device anything: a bad allowed_loss in the
 * controller configuration is named first, where the device would refuse the pool too (a GPU
 * it does not have) and fail every read. */
static void test_session_checks_options_before_the_device(void **state)
{
    eerl_device *dev = NULL;
    eerl_rt_config rc;
    eerl_ctl_config cc;
    eerl_rt *rt = (eerl_rt *)0x1;
    char why[300] = "";

    (void)state;
    assert_int_equal(eerl_device_open_remote(2, read_fails, NULL, &dev), 0);
    eerl_rt_config_default(EERL_MODE_COLOCATED, &rc);
    rc.gen_gpus[0] = 5; /* the device has 2: what it would say comes after the options */
    rc.n_gen = 1;
    rc.observe_only = 1;
    eerl_ctl_config_default(EERL_MODE_COLOCATED, &cc);
    cc.allowed_loss = 0.7;
    rc.ctl_cfg = &cc;
    assert_int_equal(eerl_rt_new(dev, &rc, why, sizeof(why), &rt), EERL_EINVAL);
    assert_string_equal(why, "allowed_loss 0.7 must be in (0, 0.5)");
    rc.ctl_cfg = NULL;
    rc.allowed_loss = 0.7;
    assert_int_equal(eerl_rt_new(dev, &rc, why, sizeof(why), &rt), EERL_EINVAL);
    assert_string_equal(why, "allowed_loss 0.7 must be in (0, 0.5)");
    assert_ptr_equal(rt, (eerl_rt *)0x1);
    eerl_device_free(dev);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_set_the_size),
        cmocka_unit_test(test_shorter_struct_is_read),
        cmocka_unit_test(test_unknown_sizes_are_refused),
        cmocka_unit_test(test_eerl_revision),
        cmocka_unit_test(test_paper_revision),
        cmocka_unit_test(test_experimental_options_are_set_on_the_controller),
        cmocka_unit_test(test_session_refuses_unknown_sizes),
        cmocka_unit_test(test_option_defaults_within_bounds),
        cmocka_unit_test(test_allowed_loss_one_range_one_message),
        cmocka_unit_test(test_session_checks_options_before_the_device),
    };
    int r = cmocka_run_group_tests(tests, NULL, NULL);
    tu_cleanup();
    return r;
}

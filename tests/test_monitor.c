/* The after-lock monitor: a window is judged every monitor_every updates once it holds
 * monitor_window usable ones; a shortfall raises the clock of the group that added most time by
 * 45 MHz (90 above 4% loss); margin lowers the other group; a clock that fell short is never
 * lowered to again; no saving asks for a refresh; repeated out-of-range work asks for new
 * governor measurements. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "eerl/core.h"
#include "eerl/error.h"
#include "core/context.h"
#include "core/monitor.h"
#include "synth_stream.h"
#include "testutil.h"

/* What the monitor reads of a paper-strategy controller past its calibration (its context): the
 * configuration, the clock grid, and the governor references of the calibration (update 1, the
 * start-up, left out as the controller leaves it out). Grid steps count from the peak (as in
 * drained and in-flight mode) unless below_peak (the synchronous modes' grid). */
struct fix {
    eerl_ctl_config cfg;
    struct eerl__grid grid;
    struct eerl__refs refs;
    struct eerl__ctx cx;
};

static struct fix *calibrated_grid(struct synth *s, int below_peak)
{
    unsigned clocks[200];
    size_t nc = synth_clocks(clocks);
    struct fix *f = calloc(1, sizeof(*f));
    eerl_setting st;
    int i;

    assert_non_null(f);
    f->cfg = *tu_paper_cfg(EERL_MODE_COLOCATED);
    assert_int_equal(eerl__grid_init(&f->grid, clocks, nc, 1980, f->cfg.idle_mhz), 0);
    if (below_peak)
        eerl__grid_top_below_peak(&f->grid);
    assert_int_equal(eerl__refs_init(&f->refs, f->cfg.ref_window, EERL__LAYOUT_SEQ), 0);
    synth_init(s, EERL_MODE_COLOCATED, 42);
    memset(&st, 0, sizeof(st));
    for (i = 0; i < 15; i++) {
        eerl_obs o = synth_step(s, &st);
        if (i > 0)
            eerl__refs_add(&f->refs, &o);
    }
    assert_true(f->refs.pred.ready);
    f->cx.mode = EERL_MODE_COLOCATED;
    f->cx.layout = EERL__LAYOUT_SEQ;
    f->cx.cfg = &f->cfg;
    f->cx.grid = &f->grid;
    f->cx.refs = &f->refs;
    return f;
}

static struct fix *calibrated(struct synth *s)
{
    return calibrated_grid(s, 0);
}

static void fix_free(struct fix *f)
{
    eerl__refs_free(&f->refs);
    eerl__grid_free(&f->grid);
    free(f);
}

static struct eerl__ratios loss(double l, double energy, double add_gen, double add_train)
{
    struct eerl__ratios r;

    memset(&r, 0, sizeof(r));
    r.time = 1.0 / (1.0 - l);
    r.energy = energy;
    r.add_gen = add_gen;
    r.add_train = add_train;
    r.window_time = 1000;
    return r;
}

static void test_shortfall_raises_the_slow_group(void **state)
{
    struct synth s;
    struct fix *f = calibrated(&s);
    struct eerl__monitor m;
    eerl_setting cur = eerl__grid_setting(&f->grid, 1440, 1170), nv;
    struct eerl__ratios r;
    char why[160];

    (void)state;
    assert_int_equal(eerl__monitor_init(&m, 20), 0);
    eerl__monitor_clear(&m);
    r = loss(0.03, 0.7, 10, 2);
    assert_int_equal(eerl__monitor_decide(&m, &f->cx, &cur, 3u, &r, 45, 90, &nv, why, sizeof(why)),
                     EERL__MON_RAISE);
    assert_int_equal(nv.mhz[0], 1485);
    assert_int_equal(nv.mhz[1], 1170);
    assert_non_null(strstr(why, "raise generation by 45"));
    /* Above 4% loss the step is 90 MHz; training added most this time. */
    r = loss(0.05, 0.7, 1, 9);
    assert_int_equal(eerl__monitor_decide(&m, &f->cx, &cur, 3u, &r, 45, 90, &nv, why, sizeof(why)),
                     EERL__MON_RAISE);
    assert_int_equal(nv.mhz[0], 1440);
    assert_int_equal(nv.mhz[1], 1260);
    /* Only generation may move (drained-style): it rises even though training added more. */
    r = loss(0.03, 0.7, 1, 9);
    assert_int_equal(eerl__monitor_decide(&m, &f->cx, &cur, 1u, &r, 50, 50, &nv, why, sizeof(why)),
                     EERL__MON_RAISE);
    assert_int_equal(nv.mhz[0], 1485);
    assert_int_equal(nv.mhz[1], 1170);
    eerl__monitor_fini(&m);
    fix_free(f);
}

static void test_margin_lowers_but_never_back_to_a_short_clock(void **state)
{
    struct synth s;
    struct fix *f = calibrated(&s);
    struct eerl__monitor m;
    eerl_setting cur = eerl__grid_setting(&f->grid, 1395, 1170), nv;
    struct eerl__ratios r;
    char why[160];

    (void)state;
    assert_int_equal(eerl__monitor_init(&m, 20), 0);
    eerl__monitor_clear(&m);
    /* 1395 falls short: raised to 1440 and remembered. */
    r = loss(0.025, 0.6, 10, 1);
    assert_int_equal(eerl__monitor_decide(&m, &f->cx, &cur, 3u, &r, 45, 90, &nv, why, sizeof(why)),
                     EERL__MON_RAISE);
    assert_int_equal(nv.mhz[0], 1440);
    cur = nv;
    /* Plenty of margin: generation adds more time, so training is lowered first. */
    r = loss(0.002, 0.6, 5, 1);
    assert_int_equal(eerl__monitor_decide(&m, &f->cx, &cur, 3u, &r, 45, 90, &nv, why, sizeof(why)),
                     EERL__MON_LOWER);
    assert_int_equal(nv.mhz[0], 1440);
    assert_int_equal(nv.mhz[1], 1125);
    /* Training cannot move: generation would go back to 1395, which fell short: hold. */
    r = loss(0.002, 0.6, 1, 5);
    assert_int_equal(eerl__monitor_decide(&m, &f->cx, &cur, 1u, &r, 45, 90, &nv, why, sizeof(why)),
                     EERL__MON_HOLD);
    /* Between the margin and the allowance: hold. */
    r = loss(0.015, 0.6, 1, 5);
    assert_int_equal(eerl__monitor_decide(&m, &f->cx, &cur, 3u, &r, 45, 90, &nv, why, sizeof(why)),
                     EERL__MON_HOLD);
    /* No saving against the reference: refresh it. */
    r = loss(0.005, 1.01, 1, 5);
    assert_int_equal(eerl__monitor_decide(&m, &f->cx, &cur, 3u, &r, 45, 90, &nv, why, sizeof(why)),
                     EERL__MON_REFRESH_ENERGY);
    /* A new lock forgets the floors. */
    eerl__monitor_clear(&m);
    r = loss(0.002, 0.6, 1, 5);
    assert_int_equal(eerl__monitor_decide(&m, &f->cx, &cur, 1u, &r, 45, 90, &nv, why, sizeof(why)),
                     EERL__MON_LOWER);
    assert_int_equal(nv.mhz[0], 1395);
    eerl__monitor_fini(&m);
    fix_free(f);
}

/* One decision of a fresh monitor for both groups at 45/90 MHz steps; checks what it decides
 * and returns the setting it moves to. */
static eerl_setting decided(const struct fix *f, eerl_setting cur, struct eerl__ratios r, int want)
{
    struct eerl__monitor m;
    eerl_setting nv;
    char why[160];

    assert_int_equal(eerl__monitor_init(&m, 20), 0);
    eerl__monitor_clear(&m);
    assert_int_equal(eerl__monitor_decide(&m, &f->cx, &cur, 3u, &r, 45, 90, &nv, why, sizeof(why)),
                     want);
    eerl__monitor_fini(&m);
    return nv;
}

/* The synchronous modes' grid: feedback steps count from 1965 MHz, the highest clock below the
 * peak, which stands for the governor: from the paper's colocated lock 1830/1425, generation rises
 * to 1875, 1920 and then to the governor (never 1965), training lowers to 1380; on a grid from the
 * peak the same raise gives 1890. */
static void test_paper_grid_counts_from_below_the_peak(void **state)
{
    struct synth s;
    struct fix *f = calibrated_grid(&s, 1);
    eerl_setting lock = eerl__grid_setting(&f->grid, 1830, 1425), nv;
    struct eerl__ratios short_gen = loss(0.03, 0.7, 10, 2), margin = loss(0.002, 0.6, 5, 1);
    const unsigned up[] = {1875, 1920, EERL_CLOCK_GOVERNOR};
    int i;

    (void)state;
    for (i = 0, nv = lock; i < 3; i++) {
        nv = decided(f, nv, short_gen, EERL__MON_RAISE);
        assert_int_equal(nv.mhz[0], up[i]);
        assert_int_equal(nv.mhz[1], 1425);
    }
    /* Margin: training, which added less, is lowered by one step of the grid. */
    nv = decided(f, lock, margin, EERL__MON_LOWER);
    assert_int_equal(nv.mhz[0], 1830);
    assert_int_equal(nv.mhz[1], 1380);
    fix_free(f);
    /* A grid from the peak. */
    f = calibrated_grid(&s, 0);
    lock = eerl__grid_setting(&f->grid, 1830, 1425);
    assert_int_equal(decided(f, lock, short_gen, EERL__MON_RAISE).mhz[0], 1890);
    fix_free(f);
}

static void test_window_cadence_and_coverage(void **state)
{
    struct synth s;
    struct fix *f = calibrated(&s);
    struct eerl__monitor m;
    struct eerl__acc sum;
    eerl_setting st = eerl__grid_setting(&f->grid, 1440, 1170);
    int i, checks = 0, first = -1, act;

    (void)state;
    assert_int_equal(eerl__monitor_init(&m, 20), 0);
    eerl__monitor_clear(&m);
    for (i = 1; i <= 45; i++) {
        eerl_obs o = synth_step(&s, &st);
        act = eerl__monitor_add(&m, &f->cx, &o, &sum);
        assert_int_not_equal(act, EERL__MON_REFRESH);
        if (act == EERL__MON_CHECK) {
            checks++;
            if (first < 0)
                first = i;
            assert_int_equal(sum.n, 20);
        }
    }
    /* Window full at 20, then every 10. */
    assert_int_equal(first, 20);
    assert_int_equal(checks, 3);
    /* A fresh window after a change: nothing due for 19 more updates. */
    eerl__monitor_reset(&m);
    for (i = 1; i < 20; i++) {
        eerl_obs o = synth_step(&s, &st);
        assert_int_equal(eerl__monitor_add(&m, &f->cx, &o, &sum), EERL__MON_NONE);
    }
    /* One long-tail update out of range is tolerated; three within ten are not. */
    eerl__monitor_reset(&m);
    for (i = 0; i < 3; i++) {
        eerl_obs o = synth_step(&s, &st), big = o;
        big.gen_tokens *= 4;
        big.valid_tokens *= 4;
        act = eerl__monitor_add(&m, &f->cx, &big, &sum);
        if (i < 2)
            assert_int_equal(act, EERL__MON_NONE);
        else
            assert_int_equal(act, EERL__MON_REFRESH);
        act = eerl__monitor_add(&m, &f->cx, &o, &sum);
        assert_int_equal(act, EERL__MON_NONE);
    }
    eerl__monitor_fini(&m);
    fix_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shortfall_raises_the_slow_group),
        cmocka_unit_test(test_margin_lowers_but_never_back_to_a_short_clock),
        cmocka_unit_test(test_paper_grid_counts_from_below_the_peak),
        cmocka_unit_test(test_window_cadence_and_coverage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

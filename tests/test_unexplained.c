/* runtime/unexplained.c through the session: a synthetic stream (a remote device whose energy
 * and time the test sets, in virtual time) where the governor's update time has noise the work
 * (G, N, L) does not explain gets one "unexplained" trace line and one notice, at the update that
 * calibrated the controller; a stream whose time follows its work gets neither. `eerl analyze`'s
 * replay of the trace (eerl_trace_measure_unexplained) finds the same figure, bit for bit. */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "eerl/device.h"
#include "eerl/error.h"
#include "eerl/runtime.h"
#include "runtime/unexplained.h"
#include "testutil.h"

struct stream {
    double t;     /* virtual time, seconds */
    double noise; /* relative noise of generation's time the work does not explain */
    unsigned notices;
    unsigned long long notice_at, calibrated_at;
};

static double s_now(void *ctx)
{
    return ((struct stream *)ctx)->t;
}

static int s_read(void *ctx, eerl_device_reading *ret, size_t n)
{
    struct stream *s = ctx;
    size_t i;

    for (i = 0; i < n; i++) {
        ret[i].energy_mj = (uint64_t)llround(300000 * s->t); /* 300 W since t = 0 */
        ret[i].power_mw = 300000;
        ret[i].sm_mhz = 1980;
    }
    return 0;
}

static int s_lock(void *ctx, const unsigned *gpus, size_t n, unsigned mhz)
{
    (void)ctx, (void)gpus, (void)n, (void)mhz;
    return 0;
}

static int s_restore(void *ctx)
{
    (void)ctx;
    return 0;
}

/* A fixed pseudo-random number in [-1, 1] for update u. */
static double z(unsigned u)
{
    uint32_t x = u * 2654435761u;

    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    return (double)(x % 20001u) / 10000.0 - 1;
}

/* n colocated updates whose time follows G (generation) and N (training), generation's with
 * s->noise of its own; the trace at path. */
static void run(struct stream *s, const char *path, unsigned n)
{
    static const unsigned clocks[] = {1980, 1500, 1005};
    static const unsigned gpus[] = {0, 1};
    eerl_rt_clock_owner owner = {s, s_lock, s_restore, NULL};
    eerl_device *dev = NULL;
    eerl_rt_config cfg;
    eerl_rt *rt = NULL;
    eerl_rt_update_info info;
    const eerl_event *ev;
    unsigned u, g;
    size_t k, n_ev;

    assert_int_equal(eerl_device_open_remote(2, s_read, s, &dev), 0);
    for (g = 0; g < 2; g++)
        assert_int_equal(eerl_device_remote_describe(dev, g, "NVIDIA H100", "GPU-x", clocks, 3), 0);
    eerl_rt_config_default(EERL_MODE_COLOCATED, &cfg);
    memcpy(cfg.gen_gpus, gpus, sizeof(gpus));
    cfg.n_gen = 2;
    memcpy(cfg.train_gpus, gpus, sizeof(gpus));
    cfg.n_train = 2;
    cfg.clock = s_now;
    cfg.clock_ctx = s;
    cfg.owner = &owner;
    cfg.trace_path = path;
    assert_int_equal(eerl_rt_new(dev, &cfg, NULL, 0, &rt), 0);
    for (u = 1; u <= n; u++) {
        double G = 40000 + 2500 * (u % 7), N = 0.9 * G;
        eerl_rt_work w = {u, G, N, G / 100, (int64_t)u};

        assert_int_equal(eerl_rt_phase_begin(rt, EERL_POOL_GEN, EERL_PHASE_GEN), 0);
        s->t += 4.0 * G / 50000 * (1 + s->noise * z(u));
        assert_int_equal(eerl_rt_phase_end(rt, EERL_POOL_GEN, EERL_PHASE_GEN), 0);
        assert_int_equal(eerl_rt_phase_begin(rt, EERL_POOL_GEN, EERL_PHASE_TRAIN), 0);
        s->t += 2.0 * N / 45000;
        assert_int_equal(eerl_rt_phase_end(rt, EERL_POOL_GEN, EERL_PHASE_TRAIN), 0);
        assert_int_equal(eerl_rt_update_end(rt, &w, &info), 0);
        n_ev = eerl_rt_events(rt, &ev);
        for (k = 0; k < n_ev; k++)
            if (ev[k].kind == EERL_EV_CALIBRATED)
                s->calibrated_at = u;
        if (eerl_rt_notice(rt)[0]) {
            s->notices++;
            s->notice_at = u;
            assert_non_null(strstr(eerl_rt_notice(rt), "unexplained"));
        }
    }
    eerl_rt_free(rt);
    eerl_device_free(dev);
}

/* The trace's lines of one type, counted; *ret_line (if not NULL) gets the last one's text. */
static size_t lines_of(const char *path, const char *type, char **ret_line)
{
    char *text = tu_read_file(path), *p, *save = NULL, want[64];
    size_t n = 0;

    assert_non_null(text);
    snprintf(want, sizeof(want), "\"type\":\"%s\"", type);
    for (p = strtok_r(text, "\n", &save); p; p = strtok_r(NULL, "\n", &save))
        if (strstr(p, want)) {
            n++;
            if (ret_line) {
                free(*ret_line);
                *ret_line = strdup(p);
            }
        }
    free(text);
    return n;
}

static void test_noise_the_work_does_not_explain_is_said_once(void **state)
{
    const char *dir = tu_tmpdir();
    char path[512], *line = NULL, why[256];
    struct stream s = {0};
    struct eerl_trace_unexplained got, again;

    (void)state;
    snprintf(path, sizeof(path), "%s/noisy.jsonl", dir);
    s.noise = 0.3;
    run(&s, path, 40);
    assert_true(s.calibrated_at > 0);
    assert_int_equal(s.notices, 1); /* once, at the calibration */
    assert_int_equal(s.notice_at, s.calibrated_at);
    assert_int_equal(lines_of(path, "unexplained", &line), 1);
    assert_int_equal(eerl__unexpl_parse(line, &got, why, sizeof(why)), 0);
    assert_int_equal(got.update, s.calibrated_at);
    assert_true(got.share > 0.05);
    assert_true(got.need > got.trial_max && got.trial_max == 12); /* the eerl strategy's */
    assert_non_null(strstr(line, "transformers"));
    /* eerl analyze's figure: the trace's controller replayed to its calibration */
    assert_int_equal(eerl_trace_measure_unexplained(path, &again, why, sizeof(why)), 0);
    assert_true(again.share == got.share && again.need == got.need);
    assert_int_equal(again.update, got.update);
    free(line);
    tu_cleanup();
}

static void test_time_the_work_explains_is_not_flagged(void **state)
{
    const char *dir = tu_tmpdir();
    char path[512], why[256], msg[64];
    struct stream s = {0};
    struct eerl_trace_unexplained u;

    (void)state;
    snprintf(path, sizeof(path), "%s/quiet.jsonl", dir);
    s.noise = 0.002;
    run(&s, path, 30);
    assert_true(s.calibrated_at > 0);
    assert_int_equal(s.notices, 0);
    assert_int_equal(lines_of(path, "unexplained", NULL), 0);
    assert_int_equal(eerl_trace_measure_unexplained(path, &u, why, sizeof(why)), 0);
    assert_true(u.share < 0.01 && !u.too_noisy && u.need <= u.trial_max);
    eerl_trace_unexplained_message(&u, msg, sizeof(msg));
    assert_string_equal(msg, "");
    tu_cleanup();
}

static void test_a_bad_line_is_named(void **state)
{
    struct eerl_trace_unexplained u;
    char why[256];

    (void)state;
    assert_int_equal(
        eerl__unexpl_parse("{\"type\":\"unexplained\",\"update\":3}", &u, why, sizeof(why)),
        EERL_EPARSE);
    assert_non_null(strstr(why, "governor_updates"));
    assert_int_equal(eerl_trace_measure_unexplained("/nonexistent/x.jsonl", &u, why, sizeof(why)),
                     EERL_ESYS);
    assert_non_null(strstr(why, "/nonexistent/x.jsonl"));
    assert_int_equal(eerl__unexpl_measure(NULL, &u), EERL_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_noise_the_work_does_not_explain_is_said_once),
        cmocka_unit_test(test_time_the_work_explains_is_not_flagged),
        cmocka_unit_test(test_a_bad_line_is_named),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

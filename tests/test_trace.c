/* The trace line format: observations (including refused ones with NaN/inf), settings and
 * events read back bit for bit; the header rebuilds the same configuration; a newer version, an
 * unknown config key and malformed lines are refused with a reason; unknown keys elsewhere are
 * ignored (later issues extend the format). */
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
#include "eerl/options.h"
#include "eerl/tools/trace.h"
#include "trace/trace.h"
#include "synth_stream.h"

static int same_bits(double a, double b)
{
    return !memcmp(&a, &b, sizeof(a));
}

static void test_update_round_trip_bit_exact(void **state)
{
    struct synth s;
    eerl_setting req, gov;
    eerl_event ev[3], back[3];
    struct eerl_trace_update u;
    char *line = NULL, why[200];
    int i, k, m;
    eerl_mode modes[3] = {EERL_MODE_COLOCATED, EERL_MODE_DRAINED, EERL_MODE_INFLIGHT};

    (void)state;
    memset(&gov, 0, sizeof(gov));
    memset(&req, 0, sizeof(req));
    req.mhz[0] = 1800;
    req.mhz[1] = EERL_CLOCK_GOVERNOR;
    req.idle_mhz = 345;
    req.mhz[3] = 1200; /* a third phase group (later issues) */
    memset(ev, 0, sizeof(ev));
    for (k = 0; k < 3; k++) {
        ev[k].kind = (eerl_event_kind)(k * 4);
        ev[k].state = (eerl_ctl_state)k;
        ev[k].candidate = req;
        ev[k].next = gov;
        ev[k].verdict = (eerl_verdict)(k % 3);
        ev[k].n_updates = (unsigned)k * 3;
        ev[k].time_ratio = k ? 1.0 / 3.0 : NAN;
        ev[k].energy_ratio = 0.1 + k * 1e-17;
        ev[k].meas_time_ratio = INFINITY;
        ev[k].meas_energy_ratio = 1.000000000000001;
        snprintf(ev[k].reason, sizeof(ev[k].reason), "reason \"%d\" with\nnewline and \\", k);
    }
    for (m = 0; m < 3; m++) {
        synth_init(&s, modes[m], 5);
        for (i = 0; i < 20; i++) {
            eerl_obs o = synth_step(&s, &gov), r;
            if (i == 7)
                o.time_s = NAN; /* a refused observation still round-trips */
            if (i == 8)
                o.gen_tokens = -INFINITY;
            assert_int_equal(eerl__trace_update_line(&o, &req, ev, 3, &line), 0);
            assert_null(strchr(line, '\n'));
            assert_int_equal(eerl_trace_parse_update(line, &u, back, 3, why, sizeof(why)), 0);
            free(line);
            r = u.obs;
            assert_int_equal(r.update, o.update);
            assert_true(same_bits(r.gen_tokens, o.gen_tokens));
            assert_true(same_bits(r.valid_tokens, o.valid_tokens));
            assert_true(same_bits(r.longest_tokens, o.longest_tokens));
            assert_int_equal(r.policy_age, o.policy_age);
            assert_true(same_bits(r.time_s, o.time_s) || (isnan(r.time_s) && isnan(o.time_s)));
            assert_true(same_bits(r.energy_j, o.energy_j));
            for (k = 0; k < EERL_PHASE_COUNT; k++) {
                assert_true(same_bits(r.phase_time_s[k], o.phase_time_s[k]));
                assert_true(same_bits(r.phase_energy_j[k], o.phase_energy_j[k]));
            }
            for (k = 0; k < EERL_POOLS_MAX; k++) {
                if (o.flags & EERL_OBS_ARRIVALS)
                    assert_true(same_bits(r.arrival_s[k], o.arrival_s[k]));
                if (o.flags & EERL_OBS_POOL_ENERGY)
                    assert_true(same_bits(r.pool_energy_j[k], o.pool_energy_j[k]));
            }
            assert_int_equal(r.flags, o.flags);
            assert_true(eerl_setting_equal(&r.setting, &o.setting));
            assert_true(u.has_requested);
            assert_true(eerl_setting_equal(&u.requested, &req));
            assert_true(u.has_events);
            assert_int_equal(u.n_events, 3);
            for (k = 0; k < 3; k++) {
                assert_int_equal(back[k].kind, ev[k].kind);
                assert_int_equal(back[k].state, ev[k].state);
                assert_true(eerl_setting_equal(&back[k].candidate, &ev[k].candidate));
                assert_true(eerl_setting_equal(&back[k].next, &ev[k].next));
                assert_int_equal(back[k].verdict, ev[k].verdict);
                assert_int_equal(back[k].n_updates, ev[k].n_updates);
                assert_true(same_bits(back[k].time_ratio, ev[k].time_ratio) ||
                            (isnan(back[k].time_ratio) && isnan(ev[k].time_ratio)));
                assert_true(same_bits(back[k].energy_ratio, ev[k].energy_ratio));
                assert_true(same_bits(back[k].meas_time_ratio, ev[k].meas_time_ratio));
                assert_true(same_bits(back[k].meas_energy_ratio, ev[k].meas_energy_ratio));
                assert_string_equal(back[k].reason, ev[k].reason);
                assert_int_equal(back[k].update, o.update);
            }
        }
    }
}

static void test_header_rebuilds_the_controller(void **state)
{
    unsigned clocks[200], back_clocks[200];
    size_t nc = synth_clocks(clocks), n;
    eerl_ctl_config cfg, back_cfg;
    eerl_ctl *ctl, *ctl2;
    struct eerl_trace_header *h = calloc(1, sizeof(*h));
    char *line, why[200];
    unsigned peak;

    (void)state;
    assert_non_null(h);
    eerl_ctl_config_default(EERL_MODE_DRAINED, &cfg);
    cfg.allowed_loss = 0.015;
    cfg.trial_updates = 4;
    cfg.block_choices[0] = 2;
    cfg.block_choices[1] = 8;
    cfg.block_choices[2] = 0;
    cfg.coverage_margin = 0.123456789012345678;
    assert_int_equal(eerl_ctl_new(EERL_MODE_DRAINED, &cfg, clocks, nc, 1980, &ctl), 0);
    assert_int_equal(eerl__trace_header_line(ctl, NULL, 0, &line), 0);
    assert_int_equal(eerl_trace_parse_header(line, h, why, sizeof(why)), 0);
    free(line);
    assert_int_equal(h->version, EERL__TRACE_VERSION);
    assert_int_equal(h->mode, EERL_MODE_DRAINED);
    assert_int_equal(h->peak, 1980);
    assert_int_equal(h->n_clocks, nc);
    assert_true(!memcmp(&h->cfg, &cfg, sizeof(cfg)));
    assert_int_equal(h->warmup_updates, 1); /* an experimental option, written by name */
    assert_int_equal(eerl_trace_header_ctl_new(h, &ctl2), 0);
    assert_int_equal(eerl_ctl_describe(ctl2, &back_cfg, back_clocks, 200, &n, &peak), 0);
    assert_true(!memcmp(&back_cfg, &cfg, sizeof(cfg)));
    assert_int_equal(n, nc);
    assert_int_equal(memcmp(back_clocks, clocks, nc * sizeof(unsigned)), 0);
    eerl_ctl_free(ctl);
    eerl_ctl_free(ctl2);
    free(h);
}

static void expect_header_error(const char *line, int code, const char *needle)
{
    struct eerl_trace_header *h = calloc(1, sizeof(*h));
    char why[200] = "";

    assert_non_null(h);
    assert_int_equal(eerl_trace_parse_header(line, h, why, sizeof(why)), code);
    if (!strstr(why, needle)) {
        print_error("'%s' lacks '%s'\n", why, needle);
        fail();
    }
    free(h);
}

#define HDR_HEAD "{\"type\":\"header\",\"format\":\"eerl-trace\","

static void test_bad_headers_are_refused(void **state)
{
    struct eerl_trace_header *h = calloc(1, sizeof(*h));
    eerl_ctl *ctl;
    double v;
    char why[200];

    (void)state;
    assert_non_null(h);
    expect_header_error("not json", EERL_EPARSE, "not JSON");
    expect_header_error("{\"type\":\"update\"}", EERL_EPARSE, "first line must be the header");
    expect_header_error(HDR_HEAD "\"version\":3,\"mode\":\"colocated\",\"governor_peak_mhz\":1980,"
                                 "\"clocks_mhz\":[1980,1500]}",
                        EERL_EVERSION, "version 3 is newer");
    expect_header_error(HDR_HEAD "\"version\":1,\"mode\":\"sync\",\"governor_peak_mhz\":1980,"
                                 "\"clocks_mhz\":[1980]}",
                        EERL_EPARSE, "'sync' is not one of");
    expect_header_error(HDR_HEAD "\"version\":1,\"mode\":\"colocated\",\"governor_peak_mhz\":1980,"
                                 "\"clocks_mhz\":[]}",
                        EERL_EPARSE, "clocks_mhz");
    expect_header_error(HDR_HEAD "\"version\":1,\"mode\":\"colocated\",\"governor_peak_mhz\":1980,"
                                 "\"clocks_mhz\":[1980],\"config\":{\"warp_factor\":9}}",
                        EERL_EPARSE, "config \"warp_factor\" is unknown");
    expect_header_error(HDR_HEAD "\"version\":1,\"mode\":\"colocated\",\"governor_peak_mhz\":1980,"
                                 "\"clocks_mhz\":[1980],\"config\":{\"allowed_loss\":3}}",
                        EERL_EPARSE, "allowed_loss 3");
    expect_header_error(HDR_HEAD "\"version\":1,\"mode\":\"colocated\",\"governor_peak_mhz\":1980,"
                                 "\"clocks_mhz\":[1980],\"config\":{\"eerl_revision\":13}}",
                        EERL_EPARSE, "eerl_revision 13 must be a whole number in [0, 12]");
    expect_header_error(HDR_HEAD "\"version\":1,\"mode\":\"colocated\",\"governor_peak_mhz\":1980,"
                                 "\"clocks_mhz\":[1980],\"config\":{\"paper_revision\":2}}",
                        EERL_EPARSE, "paper_revision 2 must be a whole number in [0, 1]");
    /* Minimal header: defaults for the mode; unknown top-level keys are ignored. */
    assert_int_equal(eerl_trace_parse_header(HDR_HEAD "\"version\":1,\"mode\":\"inflight\","
                                                      "\"governor_peak_mhz\":1980,\"clocks_mhz\":"
                                                      "[1980,1200],\"future\":{\"x\":1}}",
                                             h, why, sizeof(why)),
                     0);
    assert_int_equal(h->cfg.calibration_updates, 45);
    /* Keys added since the first traces take what those traces ran with, not today's defaults:
     * the start-up update was a reference. A revision key absent is revision 0, which decided
     * then (eerl_trace_header_replayable refuses it); a controller rebuilt from the header
     * decides as this eerl's revisions. */
    assert_int_equal(h->warmup_updates, 0);
    assert_string_equal(h->revision_key, "inflight_revision");
    assert_int_equal(h->revision, 0);
    assert_int_equal(eerl_trace_header_ctl_new(h, &ctl), 0);
    assert_int_equal(eerl_ctl_get_option(ctl, "warmup_updates", &v), 0);
    assert_true(v == 0);
    assert_int_equal(eerl_ctl_get_option(ctl, "inflight_revision", &v), 0);
    assert_true(v == h->revision_now);
    eerl_ctl_free(ctl);
    free(h);
}

/* A trace an older revision decided: parsed, and refused for replay with EERL_EVERSION and a
 * message naming the revision, the one this eerl decides as and the eerl that wrote it; one of
 * the current revision, or of a strategy without revisions, is replayable. */
static void test_older_revisions_are_not_replayable(void **state)
{
    struct eerl_trace_header *h = calloc(1, sizeof(*h));
    char why[400] = "";
    unsigned now;

    (void)state;
    assert_non_null(h);
    assert_int_equal(eerl_trace_parse_header(HDR_HEAD
                                             "\"version\":1,\"producer\":\"eerl 0.2.0 runtime\","
                                             "\"mode\":\"colocated\",\"strategy\":\"eerl\","
                                             "\"governor_peak_mhz\":1980,\"clocks_mhz\":[1980],"
                                             "\"config\":{\"eerl_revision\":3}}",
                                             h, why, sizeof(why)),
                     0);
    now = h->revision_now;
    assert_int_equal(eerl_trace_header_replayable(h, why, sizeof(why)), EERL_EVERSION);
    assert_non_null(strstr(why, "this trace was decided by eerl_revision 3; this eerl"));
    assert_non_null(strstr(why, "replay it with the eerl version that wrote it (its header's "
                                "producer: eerl 0.2.0 runtime"));
    h->revision = now;
    assert_int_equal(eerl_trace_header_replayable(h, why, sizeof(why)), 0);
    assert_int_equal(eerl_trace_parse_header(HDR_HEAD
                                             "\"version\":1,\"mode\":\"colocated\","
                                             "\"strategy\":\"governor\",\"governor_peak_mhz\":1980,"
                                             "\"clocks_mhz\":[1980]}",
                                             h, why, sizeof(why)),
                     0);
    assert_null(h->revision_key);
    assert_int_equal(eerl_trace_header_replayable(h, why, sizeof(why)), 0);
    free(h);
}

static void test_bad_update_lines_are_refused(void **state)
{
    struct eerl_trace_update u;
    eerl_event ev[2];
    char why[200];

    (void)state;
    assert_int_equal(
        eerl_trace_parse_update("{\"type\":\"update\",\"update\":1}", &u, ev, 2, why, sizeof(why)),
        EERL_EPARSE);
    assert_non_null(strstr(why, "work"));
    assert_int_equal(
        eerl_trace_parse_update("{\"type\":\"update\",\"update\":1,\"work\":{\"G\":1,\"N\":1,"
                                "\"L\":1},\"time_s\":\"fast\",\"energy_j\":1}",
                                &u, ev, 2, why, sizeof(why)),
        EERL_EPARSE);
    assert_non_null(strstr(why, "time_s"));
    assert_int_equal(
        eerl_trace_parse_update("{\"type\":\"update\",\"update\":1,\"work\":{\"G\":1,\"N\":1,"
                                "\"L\":1},\"time_s\":1,\"energy_j\":1,\"setting\":{\"observed\":"
                                "{\"gen_mhz\":\"fast\",\"train_mhz\":1}}}",
                                &u, ev, 2, why, sizeof(why)),
        EERL_EPARSE);
    assert_non_null(strstr(why, "setting.observed"));
    /* Minimal valid line, with an unknown key from a later version. */
    assert_int_equal(
        eerl_trace_parse_update("{\"type\":\"update\",\"update\":3,\"work\":{\"G\":10,\"N\":9,"
                                "\"L\":2},\"time_s\":1,\"energy_j\":1,\"setting\":{\"observed\":"
                                "{\"gen_mhz\":\"governor\",\"train_mhz\":\"governor\"}},"
                                "\"gpu_temps\":[1,2]}",
                                &u, ev, 2, why, sizeof(why)),
        0);
    assert_false(u.has_events);
    assert_false(u.has_requested);
    assert_int_equal(u.obs.update, 3);
    assert_int_equal(u.obs.policy_age, -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_update_round_trip_bit_exact),
        cmocka_unit_test(test_header_rebuilds_the_controller),
        cmocka_unit_test(test_bad_headers_are_refused),
        cmocka_unit_test(test_older_revisions_are_not_replayable),
        cmocka_unit_test(test_bad_update_lines_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

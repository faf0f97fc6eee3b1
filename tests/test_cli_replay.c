/* eerl replay end to end: traces recorded from the synthetic cluster in every mode (bad inputs
 * included) replay with identical decisions and exit 0; a tampered decision, a missing event or
 * a wrong recorded request is reported with the line and update and exits 1; a trace with
 * observations only prints decisions; usage and file errors exit 2 / 1 with a clear message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "eerl/core.h"
#include "eerl/error.h"
#include "trace/trace.h"
#include "synth_stream.h"
#include "testutil.h"

static char path[1024], outp[1024], errp[1024];

/* One update line; without events, an observations-only line (no events, no request). */
static void put(FILE *f, const eerl_obs *o, const eerl_setting *req, const eerl_event *ev,
                size_t ne, int with_events)
{
    char *line, *p;
    const char *empty = ",\"events\":[]";

    if (with_events) {
        assert_int_equal(eerl__trace_write_update(f, o, req, ev, ne), 0);
        return;
    }
    assert_int_equal(eerl__trace_update_line(o, NULL, NULL, 0, &line), 0);
    p = strstr(line, empty);
    assert_non_null(p);
    memmove(p, p + strlen(empty), strlen(p + strlen(empty)) + 1);
    fprintf(f, "%s\n", line);
    free(line);
}

/* Records a trace of n updates of mode; every 11th observation is corrupted. with_events 0
 * writes observations only. */
static void record(eerl_mode mode, uint64_t seed, unsigned n, const char *name, int with_events)
{
    unsigned clocks[200];
    size_t nc = synth_clocks(clocks), ne;
    struct synth s;
    eerl_ctl *ctl;
    eerl_setting st, req;
    eerl_event ev[256];
    unsigned i;
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", tu_tmpdir(), name);
    f = fopen(path, "w");
    assert_non_null(f);
    synth_init(&s, mode, seed);
    s.gen_next = mode == EERL_MODE_DRAINED; /* as eerl meets drained work */
    assert_int_equal(eerl_ctl_new(mode, NULL, clocks, nc, 1980, &ctl), 0);
    assert_int_equal(eerl__trace_write_header(f, ctl, "test_cli_replay"), 0);
    eerl_ctl_setting(ctl, &st);
    for (i = 0; i < n; i++) {
        eerl_obs o = synth_step(&s, &st);
        if (i % 11 == 5) {
            eerl_obs bad = o;
            bad.valid_tokens = i % 2 ? 0 : NAN;
            req = st;
            eerl_ctl_observe(ctl, &bad, &st);
            ne = eerl_ctl_events(ctl, ev, 256);
            put(f, &bad, &req, ev, ne, with_events);
        }
        req = st;
        assert_int_equal(eerl_ctl_observe(ctl, &o, &st), 0);
        ne = eerl_ctl_events(ctl, ev, 256);
        put(f, &o, &req, ev, ne, with_events);
        if (i == 10)
            fprintf(f, "{\"type\":\"meter\",\"note\":\"other readers' lines are skipped\"}\n");
    }
    fclose(f);
    eerl_ctl_free(ctl);
}

static int run_replay(const char *args)
{
    char cmd[4096];
    const char *bin = getenv("EERL_BIN");
    int st;

    assert_non_null(bin);
    snprintf(outp, sizeof(outp), "%s/out", tu_tmpdir());
    snprintf(errp, sizeof(errp), "%s/err", tu_tmpdir());
    snprintf(cmd, sizeof(cmd), "'%s' replay %s >'%s' 2>'%s'", bin, args, outp, errp);
    st = system(cmd);
    assert_true(WIFEXITED(st));
    return WEXITSTATUS(st);
}

static char *slurp(const char *p)
{
    char *s = tu_read_file(p);
    assert_non_null(s);
    return s;
}

static void test_every_mode_replays_exactly(void **state)
{
    eerl_mode m;
    char args[1100], name[64];
    char *out;

    (void)state;
    for (m = EERL_MODE_COLOCATED; m < EERL_MODE_COUNT; m++) {
        snprintf(name, sizeof(name), "%s.jsonl", eerl_mode_name(m));
        record(m, 3 + (uint64_t)m, m == EERL_MODE_INFLIGHT ? 320 : 220, name, 1);
        snprintf(args, sizeof(args), "'%s'", path);
        if (run_replay(args) != 0) {
            char *err = slurp(errp);
            print_error("%s: %s\n", name, err);
            free(err);
            fail();
        }
        out = slurp(outp);
        assert_non_null(strstr(out, "0 mismatches"));
        assert_non_null(strstr(out, " lock "));
        assert_non_null(strstr(out, " trial "));
        assert_non_null(strstr(out, " reject "));
        assert_non_null(strstr(out, "locked at"));
        free(out);
        /* --json: one object per event, each with a kind */
        snprintf(args, sizeof(args), "'%s' --json", path);
        assert_int_equal(run_replay(args), 0);
        out = slurp(outp);
        assert_true(out[0] == '{');
        assert_non_null(strstr(out, "\"kind\":\"calibrated\""));
        free(out);
    }
}

/* Replaces the first occurrence of `from` after the first line containing `after`. */
static void tamper(const char *after, const char *from, const char *to)
{
    char *text = slurp(path), *p = strstr(text, after), *q;
    FILE *f;

    assert_non_null(p);
    q = strstr(p, from);
    assert_non_null(q);
    f = fopen(path, "w");
    assert_non_null(f);
    fwrite(text, 1, (size_t)(q - text), f);
    fputs(to, f);
    fputs(q + strlen(from), f);
    fclose(f);
    free(text);
}

static void test_tampered_traces_are_caught(void **state)
{
    char args[1100], *err;

    (void)state;
    /* A verdict flipped. */
    record(EERL_MODE_COLOCATED, 4, 150, "t1.jsonl", 1);
    snprintf(args, sizeof(args), "'%s' --quiet", path);
    tamper("\"kind\":\"trial\"", "\"verdict\":\"pass\"", "\"verdict\":\"fail\"");
    assert_int_equal(run_replay(args), 1);
    err = slurp(errp);
    assert_non_null(strstr(err, "differs in verdict"));
    assert_non_null(strstr(err, "(update "));
    free(err);
    /* A recorded request that the controller never made. */
    record(EERL_MODE_DRAINED, 4, 150, "t2.jsonl", 1);
    snprintf(args, sizeof(args), "'%s' --quiet", path);
    tamper("\"update\":40,",
           "\"requested\":{\"gen_mhz\":", "\"requested\":{\"gen_mhz\":1005,\"x\":");
    assert_int_equal(run_replay(args), 1);
    err = slurp(errp);
    assert_non_null(strstr(err, "requested setting: recorded 1005/"));
    free(err);
    /* An observation altered: the decisions no longer follow. */
    record(EERL_MODE_INFLIGHT, 4, 200, "t3.jsonl", 1);
    snprintf(args, sizeof(args), "'%s' --quiet", path);
    tamper("\"update\":20,", "\"time_s\":", "\"time_s\":9");
    assert_int_equal(run_replay(args), 1);
    /* One ratio's last digit changed is still a mismatch. */
    record(EERL_MODE_DISAGGREGATED, 4, 150, "t4.jsonl", 1);
    snprintf(args, sizeof(args), "'%s' --quiet", path);
    tamper("\"kind\":\"trial\"", "\"energy_ratio\":0.", "\"energy_ratio\":0.0");
    assert_int_equal(run_replay(args), 1);
    err = slurp(errp);
    assert_non_null(strstr(err, "differs in energy_ratio"));
    free(err);
}

static void test_observations_only_trace_prints_decisions(void **state)
{
    char args[1100], *out;

    (void)state;
    record(EERL_MODE_DISAGGREGATED, 8, 150, "obs.jsonl", 0);
    snprintf(args, sizeof(args), "'%s'", path);
    assert_int_equal(run_replay(args), 0);
    out = slurp(outp);
    assert_non_null(strstr(out, " propose "));
    assert_non_null(strstr(out, "0 mismatches"));
    free(out);
}

static void test_usage_and_file_errors(void **state)
{
    char args[1100], *err;
    const char *p;

    (void)state;
    assert_int_equal(run_replay(""), 2);
    assert_int_equal(run_replay("--bogus x"), 2);
    err = slurp(errp);
    assert_non_null(strstr(err, "unknown option '--bogus'"));
    free(err);
    assert_int_equal(run_replay("/nonexistent/trace.jsonl"), 1);
    err = slurp(errp);
    assert_non_null(strstr(err, "cannot open '/nonexistent/trace.jsonl'"));
    free(err);
    p = tu_write_file("bad.jsonl", "{\"type\":\"update\"}\n");
    snprintf(args, sizeof(args), "'%s'", p);
    assert_int_equal(run_replay(args), 1);
    err = slurp(errp);
    assert_non_null(strstr(err, ":1: the first line must be the header"));
    free(err);
    record(EERL_MODE_COLOCATED, 2, 20, "trunc.jsonl", 1);
    {
        FILE *f = fopen(path, "a");
        assert_non_null(f);
        fputs("{\"type\":\"update\",\"update\":99,\"work\":{}}\n", f);
        fclose(f);
    }
    snprintf(args, sizeof(args), "'%s'", path);
    assert_int_equal(run_replay(args), 1);
    err = slurp(errp);
    assert_non_null(strstr(err, ":25: \"work\" needs numbers G, N and L"));
    free(err);
}

static int teardown(void **state)
{
    (void)state;
    if (!getenv("EERL_TEST_KEEP"))
        tu_cleanup();
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_mode_replays_exactly),
        cmocka_unit_test(test_tampered_traces_are_caught),
        cmocka_unit_test(test_observations_only_trace_prints_decisions),
        cmocka_unit_test(test_usage_and_file_errors),
    };
    return cmocka_run_group_tests(tests, NULL, teardown);
}

/* Resume (src/runtime/resume.c over eerl_ctl_save/eerl_ctl_restore): a controller's learned state
 * saved next to a checkpoint is reused by the next job segment, which skips calibration and
 * search and starts at the saved lock within the allowance; a change of GPU model or allocation
 * (the tag), clock list or mode starts a fresh search; a missing file is a fresh search, a
 * damaged one (any changed byte: a checksum) or a FIFO an error; a state saved before checksums
 * resumes with a note; the paper's strategies do not resume; a controller that has observed
 * refuses. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "eerl/core.h"
#include "eerl/error.h"
#include "runtime/prior.h"
#include "runtime/resume.h"
#include "synth_stream.h"
#include "testutil.h"

#define TAG "NVIDIA H100 80GB HBM3 8/16"

static eerl_ctl *make(eerl_mode mode, eerl_strategy s, const unsigned *clocks, size_t nc)
{
    eerl_ctl_config c;
    eerl_ctl *ctl = NULL;

    eerl_ctl_config_default(mode, &c);
    c.strategy = s;
    assert_int_equal(eerl_ctl_new(mode, &c, clocks, nc, 1980, &ctl), 0);
    return ctl;
}

/* n updates; returns how many ran at the governor and the true whole-run loss. */
static unsigned run(eerl_ctl *ctl, struct synth *s, unsigned n, double *loss)
{
    eerl_setting st, gov;
    unsigned i, at_gov = 0;
    double tg = 0, tc = 0;
    eerl_event ev[64];

    memset(&gov, 0, sizeof(gov));
    eerl_ctl_setting(ctl, &st);
    for (i = 0; i < n; i++) {
        eerl_obs o = synth_step(s, &st), a, b;
        synth_physics(s, &gov, o.gen_tokens, o.valid_tokens, o.longest_tokens, 1, 1, &a);
        synth_physics(s, &st, o.gen_tokens, o.valid_tokens, o.longest_tokens, 1, 1, &b);
        tg += a.time_s;
        tc += b.time_s;
        at_gov += eerl_setting_is_governor(&st);
        assert_int_equal(eerl_ctl_observe(ctl, &o, &st), 0);
        while (eerl_ctl_events(ctl, ev, 64) > 0)
            ;
    }
    if (loss)
        *loss = 1 - tg / tc;
    return at_gov;
}

static void test_resume_skips_search(void **state)
{
    unsigned clocks[200];
    size_t nc = synth_clocks(clocks);
    char path[4096], why[256];
    struct synth s;
    eerl_ctl *a, *b;
    eerl_ctl_status sa, sb;
    eerl_setting first;
    double loss;
    unsigned gov_fresh, gov_resumed;

    (void)state;
    assert_int_equal(eerl__resume_path(tu_tmpdir(), path, sizeof(path)), 0);
    a = make(EERL_MODE_DISAGGREGATED, EERL_STRATEGY_EERL, clocks, nc);
    synth_init(&s, EERL_MODE_DISAGGREGATED, 7);
    gov_fresh = run(a, &s, 120, NULL);
    eerl_ctl_get_status(a, &sa);
    assert_true(sa.locked);
    assert_int_equal(eerl__resume_save(a, TAG, path, why, sizeof(why)), 0);

    /* The next segment of the job, same hardware: starts at the lock. */
    b = make(EERL_MODE_DISAGGREGATED, EERL_STRATEGY_EERL, clocks, nc);
    assert_int_equal(eerl__resume_load(b, TAG, path, why, sizeof(why)), 0);
    eerl_ctl_setting(b, &first);
    assert_true(eerl_setting_equal(&first, &sa.locked_setting));
    eerl_ctl_get_status(b, &sb);
    assert_int_equal(sb.state, EERL_STATE_LOCKED);
    gov_resumed = run(b, &s, 60, &loss);
    /* Only governor probes (one every 30 updates after lock), no calibration, no search. */
    assert_true(gov_resumed <= 3);
    assert_true(gov_fresh >= 10);
    assert_true(loss <= 0.02);
    eerl_ctl_get_status(b, &sb);
    assert_true(sb.locked);
    eerl_ctl_free(b);

    /* A restore after the first observation is refused. */
    assert_int_equal(eerl__resume_load(a, TAG, path, why, sizeof(why)), EERL_ESTATE);
    eerl_ctl_free(a);
}

/* 1 when the controller's pending events hold a "resume refused" record mentioning what. */
static int refused_event(eerl_ctl *ctl, const char *what)
{
    eerl_event ev[16];
    size_t n = eerl_ctl_events(ctl, ev, 16), i;

    for (i = 0; i < n; i++)
        if (ev[i].kind == EERL_EV_HOLD && strstr(ev[i].reason, "resume refused") &&
            strstr(ev[i].reason, what))
            return 1;
    return 0;
}

static void test_changes_start_fresh(void **state)
{
    unsigned clocks[200], other[200];
    size_t nc = synth_clocks(clocks), i;
    char path[4096], why[256];
    struct synth s;
    eerl_ctl *a, *b;
    eerl_ctl_status st;
    eerl_setting first;

    (void)state;
    snprintf(path, sizeof(path), "%s/fresh.state", tu_tmpdir());
    a = make(EERL_MODE_COLOCATED, EERL_STRATEGY_EERL, clocks, nc);
    synth_init(&s, EERL_MODE_COLOCATED, 3);
    run(a, &s, 100, NULL);
    assert_int_equal(eerl__resume_save(a, TAG, path, why, sizeof(why)), 0);
    eerl_ctl_free(a);

    /* Another allocation (tag). */
    b = make(EERL_MODE_COLOCATED, EERL_STRATEGY_EERL, clocks, nc);
    assert_int_equal(eerl__resume_load(b, "NVIDIA H100 80GB HBM3 16/16", path, why, sizeof(why)),
                     1);
    assert_non_null(strstr(why, "16/16"));
    assert_true(refused_event(b, "GPU model or allocation"));
    eerl_ctl_setting(b, &first);
    assert_true(eerl_setting_is_governor(&first));
    eerl_ctl_get_status(b, &st);
    assert_int_equal(st.state, EERL_STATE_CALIBRATING);
    eerl_ctl_free(b);
    /* Another GPU model: a different clock list. */
    for (i = 0; i < nc; i++)
        other[i] = clocks[i] - (clocks[i] % 30 == 0 ? 0 : 15);
    b = make(EERL_MODE_COLOCATED, EERL_STRATEGY_EERL, other, nc);
    assert_int_equal(eerl__resume_load(b, TAG, path, why, sizeof(why)), 1);
    assert_non_null(strstr(why, "fresh search"));
    eerl_ctl_free(b);
    /* Another mode. */
    b = make(EERL_MODE_DISAGGREGATED, EERL_STRATEGY_EERL, clocks, nc);
    assert_int_equal(eerl__resume_load(b, TAG, path, why, sizeof(why)), 1);
    assert_non_null(strstr(why, "colocated"));
    eerl_ctl_free(b);
    /* The paper's strategy does not resume: a fresh search, said in the first events. */
    b = make(EERL_MODE_COLOCATED, EERL_STRATEGY_PAPER, clocks, nc);
    assert_int_equal(eerl__resume_load(b, TAG, path, why, sizeof(why)), 1);
    assert_non_null(strstr(why, "does not resume"));
    assert_true(refused_event(b, "paper"));
    eerl_ctl_free(b);
    /* Another configuration (allowed loss): a fresh search, with the event. */
    {
        eerl_ctl_config c;
        eerl_ctl_config_default(EERL_MODE_COLOCATED, &c);
        c.strategy = EERL_STRATEGY_EERL;
        c.allowed_loss = 0.03;
        assert_int_equal(eerl_ctl_new(EERL_MODE_COLOCATED, &c, clocks, nc, 1980, &b), 0);
        assert_int_equal(eerl__resume_load(b, TAG, path, why, sizeof(why)), 1);
        assert_non_null(strstr(why, "configuration"));
        assert_non_null(strstr(why, "fresh.state"));
        assert_true(refused_event(b, "configuration"));
        eerl_ctl_get_status(b, &st);
        assert_int_equal(st.state, EERL_STATE_CALIBRATING);
        assert_int_equal(st.references, 0);
        eerl_ctl_free(b);
        /* A longer horizon is not a change of configuration: it resumes. */
        c.allowed_loss = 0.02;
        c.expected_updates = 500;
        assert_int_equal(eerl_ctl_new(EERL_MODE_COLOCATED, &c, clocks, nc, 1980, &b), 0);
        assert_int_equal(eerl__resume_load(b, TAG, path, why, sizeof(why)), 0);
        eerl_ctl_free(b);
    }
    /* No file: fresh search. */
    b = make(EERL_MODE_COLOCATED, EERL_STRATEGY_EERL, clocks, nc);
    snprintf(path, sizeof(path), "%s/none.state", tu_tmpdir());
    assert_int_equal(eerl__resume_load(b, TAG, path, why, sizeof(why)), 1);
    eerl_ctl_free(b);
}

/* In-flight the eerl strategy resumes too: the saved governor references give back its rate
 * reference, and the next segment starts at the lock with no governor update for a while. */
/* One job's saved state, for a prior (eerl_ctl_set_prior): colocated, synth seed 3, 100
 * updates, locked below the peak. */
static void *prior_state(const unsigned *clocks, size_t nc, size_t *len)
{
    struct synth s;
    eerl_ctl *a = make(EERL_MODE_COLOCATED, EERL_STRATEGY_EERL, clocks, nc);
    eerl_ctl_status st;
    size_t need = 0;
    void *buf;

    synth_init(&s, EERL_MODE_COLOCATED, 3);
    run(a, &s, 100, NULL);
    eerl_ctl_get_status(a, &st);
    assert_true(st.locked && st.locked_setting.mhz[EERL_GROUP_GEN] != 0);
    assert_int_equal(eerl_ctl_save(a, TAG, NULL, 0, &need), EERL_EOVERFLOW);
    buf = malloc(need);
    assert_non_null(buf);
    assert_int_equal(eerl_ctl_save(a, TAG, buf, need, len), 0);
    eerl_ctl_free(a);
    return buf;
}

/* A prior refused after its test, while the calibration is the short one its gate allowed: this
 * job's governor runs as the earlier job's did (the gate matches), but its generation slows
 * below the peak clock itself, so the prior's setting fails by more than big_loss. The
 * calibration goes on at the governor to its full 10 updates before the fresh search. */
static void test_prior_refused_calibrates_on(void **state)
{
    unsigned clocks[200], i, refused = 0, calibrated = 0, off_gov = 0;
    size_t nc = synth_clocks(clocks), len = 0, n, k;
    char why[256];
    struct synth s;
    eerl_ctl *b = make(EERL_MODE_COLOCATED, EERL_STRATEGY_EERL, clocks, nc);
    void *buf = prior_state(clocks, nc, &len);
    const void *bufs[1] = {buf};
    eerl_setting st;
    eerl_event ev[64];

    (void)state;
    assert_int_equal(eerl_ctl_set_prior(b, TAG, bufs, &len, 1, why, sizeof(why)), 0);
    synth_init(&s, EERL_MODE_COLOCATED, 4);
    s.gen_knee = s.peak;
    eerl_ctl_setting(b, &st);
    for (i = 0; i < 60 && !calibrated; i++) {
        eerl_obs o = synth_step(&s, &st);

        off_gov += refused && i > refused && !eerl_setting_is_governor(&o.setting);
        assert_int_equal(eerl_ctl_observe(b, &o, &st), 0);
        while ((n = eerl_ctl_events(b, ev, 64)) > 0)
            for (k = 0; k < n; k++) {
                if (strstr(ev[k].reason, "prior refused") &&
                    strstr(ev[k].reason, "fresh search, calibrating on first"))
                    refused = i;
                if (refused && ev[k].kind == EERL_EV_CALIBRATED) {
                    assert_non_null(strstr(ev[k].reason, "on 10 governor updates"));
                    calibrated = i;
                }
            }
    }
    assert_true(refused > 0);
    assert_true(calibrated > refused);
    assert_int_equal(off_gov, 0);
    eerl_ctl_free(b);
    free(buf);
}

static void test_inflight_resumes(void **state)
{
    unsigned clocks[200];
    size_t nc = synth_clocks(clocks);
    char path[4096], why[256];
    struct synth s;
    eerl_ctl *a, *b;
    eerl_ctl_status sa, sb;
    eerl_setting first;
    double loss;

    (void)state;
    snprintf(path, sizeof(path), "%s/inflight.state", tu_tmpdir());
    a = make(EERL_MODE_INFLIGHT, EERL_STRATEGY_EERL, clocks, nc);
    synth_init(&s, EERL_MODE_INFLIGHT, 5);
    run(a, &s, 200, NULL);
    eerl_ctl_get_status(a, &sa);
    assert_true(sa.locked);
    assert_int_equal(eerl__resume_save(a, TAG, path, why, sizeof(why)), 0);
    eerl_ctl_free(a);
    b = make(EERL_MODE_INFLIGHT, EERL_STRATEGY_EERL, clocks, nc);
    assert_int_equal(eerl__resume_load(b, TAG, path, why, sizeof(why)), 0);
    eerl_ctl_setting(b, &first);
    assert_true(eerl_setting_equal(&first, &sa.locked_setting));
    eerl_ctl_get_status(b, &sb);
    assert_int_equal(sb.state, EERL_STATE_LOCKED);
    assert_int_equal(run(b, &s, 60, &loss), 0u);
    assert_true(loss <= 0.025);
    eerl_ctl_free(b);
    /* The paper's in-flight machine does not resume. */
    b = make(EERL_MODE_INFLIGHT, EERL_STRATEGY_PAPER, clocks, nc);
    assert_int_equal(eerl__resume_load(b, TAG, path, why, sizeof(why)), 1);
    assert_non_null(strstr(why, "does not resume"));
    eerl_ctl_free(b);
}

static void test_damaged(void **state)
{
    unsigned clocks[200];
    size_t nc = synth_clocks(clocks), need = 0, len;
    char path[4096], why[256];
    unsigned char *buf;
    struct synth s;
    eerl_ctl *a, *b;
    FILE *f;

    (void)state;
    a = make(EERL_MODE_COLOCATED, EERL_STRATEGY_EERL, clocks, nc);
    synth_init(&s, EERL_MODE_COLOCATED, 4);
    run(a, &s, 40, NULL);
    assert_int_equal(eerl_ctl_save(a, TAG, NULL, 0, &need), EERL_EOVERFLOW);
    buf = malloc(need);
    assert_non_null(buf);
    assert_int_equal(eerl_ctl_save(a, TAG, buf, need, &len), 0);
    assert_int_equal(len, need);
    /* Truncated. */
    snprintf(path, sizeof(path), "%s/cut.state", tu_tmpdir());
    f = fopen(path, "wb");
    assert_non_null(f);
    fwrite(buf, 1, len - 10, f);
    fclose(f);
    b = make(EERL_MODE_COLOCATED, EERL_STRATEGY_EERL, clocks, nc);
    assert_int_equal(eerl__resume_load(b, TAG, path, why, sizeof(why)), EERL_EPARSE);
    assert_non_null(strstr(why, "truncated"));
    assert_non_null(strstr(why, "cut.state"));
    /* Not a state at all. */
    assert_int_equal(eerl_ctl_restore(b, TAG, "hello world", 11, why, sizeof(why)), EERL_EPARSE);
    /* The controller is untouched by the refusals: it calibrates. */
    {
        eerl_ctl_status st;
        eerl_ctl_get_status(b, &st);
        assert_int_equal(st.state, EERL_STATE_CALIBRATING);
        assert_int_equal(st.references, 0);
    }
    eerl_ctl_free(b);
    free(buf);
    eerl_ctl_free(a);
}

/* Every single-byte change anywhere in a saved state (header, references, padding) is refused
 * (issue 36: 20 of 24 flips used to resume silently), and so is the same state resumed from a
 * file; the controller is untouched and calibrates. */
static void test_flipped_byte_refused(void **state)
{
    unsigned clocks[200];
    size_t nc = synth_clocks(clocks), need = 0, len, i, resumed = 0;
    char path[4096], why[256];
    unsigned char *buf, *bad;
    struct synth s;
    eerl_ctl *a, *b;
    eerl_ctl_status st;
    FILE *f;

    (void)state;
    a = make(EERL_MODE_COLOCATED, EERL_STRATEGY_EERL, clocks, nc);
    synth_init(&s, EERL_MODE_COLOCATED, 4);
    run(a, &s, 40, NULL);
    assert_int_equal(eerl_ctl_save(a, TAG, NULL, 0, &need), EERL_EOVERFLOW);
    buf = malloc(need);
    bad = malloc(need);
    assert_non_null(buf);
    assert_non_null(bad);
    assert_int_equal(eerl_ctl_save(a, TAG, buf, need, &len), 0);
    b = make(EERL_MODE_COLOCATED, EERL_STRATEGY_EERL, clocks, nc);
    assert_int_equal(eerl_ctl_restore(b, TAG, buf, len, why, sizeof(why)), 0); /* undamaged */
    eerl_ctl_free(b);
    for (i = 0; i < len; i++) {
        memcpy(bad, buf, len);
        bad[i] ^= (unsigned char)(0x01u << (i % 8));
        b = make(EERL_MODE_COLOCATED, EERL_STRATEGY_EERL, clocks, nc);
        if (eerl_ctl_restore(b, TAG, bad, len, why, sizeof(why)) == 0) {
            resumed++;
        } else {
            eerl_ctl_get_status(b, &st);
            assert_int_equal(st.references, 0);
        }
        eerl_ctl_free(b);
    }
    if (resumed)
        fail_msg("%zu of %zu single-byte changes resumed", resumed, len);
    /* From a file: refused with the file named, and why. */
    memcpy(bad, buf, len);
    bad[len / 2] ^= 0x10;
    snprintf(path, sizeof(path), "%s/flipped.state", tu_tmpdir());
    f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bad, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
    b = make(EERL_MODE_COLOCATED, EERL_STRATEGY_EERL, clocks, nc);
    assert_int_equal(eerl__resume_load(b, TAG, path, why, sizeof(why)), EERL_EPARSE);
    assert_non_null(strstr(why, "flipped.state"));
    assert_non_null(strstr(why, "checksum"));
    eerl_ctl_free(b);
    free(bad);
    free(buf);
    eerl_ctl_free(a);
}

/* A state saved by the release before checksums (format 2: the same bytes, magic "EERLCTL2", no
 * checksum) still resumes, and says that it could not be checked. */
static void test_format_2_resumes_with_a_note(void **state)
{
    unsigned clocks[200];
    size_t nc = synth_clocks(clocks), need = 0, len;
    char why[256];
    unsigned char *buf;
    struct synth s;
    eerl_ctl *a, *b;
    eerl_ctl_status st;

    (void)state;
    a = make(EERL_MODE_DISAGGREGATED, EERL_STRATEGY_EERL, clocks, nc);
    synth_init(&s, EERL_MODE_DISAGGREGATED, 7);
    run(a, &s, 120, NULL);
    assert_int_equal(eerl_ctl_save(a, TAG, NULL, 0, &need), EERL_EOVERFLOW);
    buf = malloc(need);
    assert_non_null(buf);
    assert_int_equal(eerl_ctl_save(a, TAG, buf, need, &len), 0);
    assert_memory_equal(buf, "EERLCTL3", 8);
    buf[7] = '2';
    b = make(EERL_MODE_DISAGGREGATED, EERL_STRATEGY_EERL, clocks, nc);
    why[0] = '\0';
    assert_int_equal(eerl_ctl_restore(b, TAG, buf, len - 8, why, sizeof(why)), 0);
    assert_non_null(strstr(why, "format 2 has no checksum"));
    eerl_ctl_get_status(b, &st);
    assert_int_equal(st.state, EERL_STATE_LOCKED);
    eerl_ctl_free(b);
    free(buf);
    eerl_ctl_free(a);
}

/* A FIFO where the state should be is refused at once, naming it: reading it would wait for a
 * writer forever. (The alarm is a hang guard, not a speed check.) */
static void test_fifo_refused(void **state)
{
    unsigned clocks[200];
    size_t nc = synth_clocks(clocks);
    char path[4096], why[256];
    eerl_ctl *b;

    (void)state;
    snprintf(path, sizeof(path), "%s/fifo.state", tu_tmpdir());
    assert_int_equal(mkfifo(path, 0600), 0);
    b = make(EERL_MODE_COLOCATED, EERL_STRATEGY_EERL, clocks, nc);
    alarm(120);
    assert_int_equal(eerl__resume_load(b, TAG, path, why, sizeof(why)), EERL_EPARSE);
    alarm(0);
    assert_non_null(strstr(why, "fifo.state"));
    assert_non_null(strstr(why, "not a regular file"));
    eerl_ctl_free(b);
    unlink(path);
}

/* A file's whole text (the caller frees). */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf = calloc(1, 4096);

    assert_non_null(f);
    assert_non_null(buf);
    assert_true(fread(buf, 1, 4095, f) < 4095);
    fclose(f);
    return buf;
}

/* issue 53 item 1: a temporary someone planted as a link beside the state (P.tmp -> a victim)
 * is never written through: the victim keeps its bytes and the state is a regular file; a
 * state in a directory every user can write (not sticky) is refused, naming it. */
static void test_save_never_follows_a_planted_link(void **state)
{
    unsigned clocks[200];
    size_t nc = synth_clocks(clocks);
    eerl_ctl *a = make(EERL_MODE_COLOCATED, EERL_STRATEGY_EERL, clocks, nc);
    char dir[512], victim[600], p[600], tmp[620], why[512] = "", *text;
    struct stat st;
    FILE *f;

    (void)state;
    snprintf(dir, sizeof(dir), "%s/planted", tu_tmpdir());
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(victim, sizeof(victim), "%s/victim", tu_tmpdir());
    f = fopen(victim, "w");
    assert_non_null(f);
    fputs("root's file\n", f);
    fclose(f);
    snprintf(p, sizeof(p), "%s/job.state", dir);
    snprintf(tmp, sizeof(tmp), "%s.tmp", p);
    assert_int_equal(symlink(victim, tmp), 0);
    assert_int_equal(eerl__resume_save(a, TAG, p, why, sizeof(why)), 0);
    text = slurp(victim);
    assert_string_equal(text, "root's file\n");
    free(text);
    assert_int_equal(lstat(p, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    /* The state itself a link: refused, the victim unchanged. */
    assert_int_equal(unlink(p), 0);
    assert_int_equal(symlink(victim, p), 0);
    assert_int_equal(eerl__resume_save(a, TAG, p, why, sizeof(why)), EERL_EUNSAFE);
    assert_non_null(strstr(why, "symbolic link"));
    text = slurp(victim);
    assert_string_equal(text, "root's file\n");
    free(text);
    /* A directory every user can write, not sticky: refused, nothing written. */
    assert_int_equal(unlink(p), 0);
    assert_int_equal(chmod(dir, 0777), 0);
    assert_int_equal(eerl__resume_save(a, TAG, p, why, sizeof(why)), EERL_EUNSAFE);
    assert_non_null(strstr(why, dir));
    assert_non_null(strstr(why, "writable by every user"));
    assert_int_not_equal(lstat(p, &st), 0);
    /* Sticky (like /tmp): allowed, the state being the caller's. */
    assert_int_equal(chmod(dir, 01777), 0);
    assert_int_equal(eerl__resume_save(a, TAG, p, why, sizeof(why)), 0);
    eerl_ctl_free(a);
}

/* dir/name holding n bytes of buf (a hard link of first when given: no disk used). */
static void put(const char *dir, const char *name, const void *buf, size_t n, const char *first)
{
    char p[700];
    FILE *f;

    snprintf(p, sizeof(p), "%s/%s", dir, name);
    if (first) {
        assert_int_equal(link(first, p), 0);
        return;
    }
    f = fopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, n, f), n);
    fclose(f);
}

/* issue 53 item 8: sparse 64 MiB files named *.state (no disk used) are skipped before anything
 * is read, as are a FIFO and an empty file, and the prior is taken from the real state. Names
 * that are no state (README) are ignored. */
static void test_prior_skips_what_is_no_state(void **state)
{
    unsigned clocks[200];
    size_t nc = synth_clocks(clocks), len = 0;
    eerl_ctl *b = make(EERL_MODE_COLOCATED, EERL_STRATEGY_EERL, clocks, nc);
    void *buf = prior_state(clocks, nc, &len);
    char dir[512], p[700], detail[1024] = "";
    int i, fd;

    (void)state;
    snprintf(dir, sizeof(dir), "%s/prior-sparse", tu_tmpdir());
    assert_int_equal(mkdir(dir, 0755), 0);
    for (i = 0; i < 3; i++) {
        snprintf(p, sizeof(p), "%s/big%d.state", dir, i);
        fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0644);
        assert_true(fd >= 0);
        assert_int_equal(ftruncate(fd, (off_t)64 << 20), 0);
        close(fd);
    }
    snprintf(p, sizeof(p), "%s/fifo.state", dir);
    assert_int_equal(mkfifo(p, 0644), 0);
    put(dir, "empty.state", "", 0, NULL);
    put(dir, "README", "notes", 5, NULL);
    put(dir, "job.state", buf, len, NULL);
    assert_int_equal(eerl__prior_load(b, TAG, dir, detail, sizeof(detail)), 0);
    assert_non_null(strstr(detail, "skipped 5 entries that are no saved state"));
    free(buf);
    eerl_ctl_free(b);
}

/* issue 53 item 8: past the cap (4096 states) the most recent are read and the rest skipped,
 * said in the detail, where every job failed to start; a name that is no state does not count. */
static void test_prior_past_the_cap_keeps_going(void **state)
{
    unsigned clocks[200];
    size_t nc = synth_clocks(clocks), len = 0;
    eerl_ctl *b = make(EERL_MODE_COLOCATED, EERL_STRATEGY_EERL, clocks, nc);
    void *buf = prior_state(clocks, nc, &len);
    char dir[512], first[700], name[64], detail[1024] = "";
    int i;

    (void)state;
    snprintf(dir, sizeof(dir), "%s/prior-cap", tu_tmpdir());
    assert_int_equal(mkdir(dir, 0755), 0);
    put(dir, "a0000.state", buf, len, NULL);
    snprintf(first, sizeof(first), "%s/a0000.state", dir);
    for (i = 1; i < 4098; i++) {
        snprintf(name, sizeof(name), "a%04d.state", i);
        put(dir, name, NULL, 0, first);
    }
    put(dir, "zz-notes.txt", "notes", 5, NULL);
    assert_int_equal(eerl__prior_load(b, TAG, dir, detail, sizeof(detail)), 0);
    assert_non_null(strstr(detail, "skipped the 2 older ones"));
    free(buf);
    eerl_ctl_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resume_skips_search),
        cmocka_unit_test(test_changes_start_fresh),
        cmocka_unit_test(test_prior_refused_calibrates_on),
        cmocka_unit_test(test_inflight_resumes),
        cmocka_unit_test(test_damaged),
        cmocka_unit_test(test_flipped_byte_refused),
        cmocka_unit_test(test_format_2_resumes_with_a_note),
        cmocka_unit_test(test_fifo_refused),
        cmocka_unit_test(test_save_never_follows_a_planted_link),
        cmocka_unit_test(test_prior_skips_what_is_no_state),
        cmocka_unit_test(test_prior_past_the_cap_keeps_going),
    };
    int r = cmocka_run_group_tests(tests, NULL, NULL);
    tu_cleanup();
    return r;
}

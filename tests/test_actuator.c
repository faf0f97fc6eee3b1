/* Actuator: clock writes through the real NVML backend and the stand-in NVML library. What the
 * actuator did to a "GPU" is read back from the state file, which the stand-in rewrites (temp +
 * rename) on every lock and reset: a new inode means a write happened. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include <jansson.h>

#include "eerl/tools/actuator.h"
#include "eerl/device.h"
#include "eerl/error.h"
#include "testutil.h"

static char STATE[600];
static eerl_device *DEV;
static eerl_actuator *ACT, *ACT2;

/* GPU 0 and 2: H100-like, 345-1980 MHz in 15 MHz steps. GPU 1: an uneven explicit list, locked
 * beforehand by someone else at 990 MHz. */
static void write_state(int lock_permitted)
{
    char text[4096];

    snprintf(
        text, sizeof(text),
        "{\"driver_version\": \"580.159.04\", \"nvml_version\": \"13.580.159.04\",\n"
        "\"virtual_time_ms\": 0, \"energy_update_ms\": 100, \"lock_permitted\": %s,\n"
        "\"gpus\": [\n"
        "{\"name\": \"NVIDIA H100 80GB HBM3\", \"uuid\": \"GPU-a0\", "
        "\"memory_clocks_mhz\": [2619, 1593], "
        "\"sm_clocks_mhz\": {\"max\": 1980, \"min\": 345, \"step\": 15}, \"sm_clock_mhz\": 1980, "
        "\"power_mw\": 300000, \"locked_min_mhz\": null, \"locked_max_mhz\": null},\n"
        "{\"name\": \"Odd GPU\", \"uuid\": \"GPU-a1\", \"memory_clocks_mhz\": [1593], "
        "\"sm_clocks_mhz\": [1980, 1755, 1410, 990, 345], \"sm_clock_mhz\": 1980, "
        "\"power_mw\": 300000, \"locked_min_mhz\": 990, \"locked_max_mhz\": 990},\n"
        "{\"name\": \"NVIDIA H100 80GB HBM3\", \"uuid\": \"GPU-a2\", "
        "\"memory_clocks_mhz\": [2619, 1593], "
        "\"sm_clocks_mhz\": {\"max\": 1980, \"min\": 345, \"step\": 15}, \"sm_clock_mhz\": 1980, "
        "\"power_mw\": 300000, \"locked_min_mhz\": null, \"locked_max_mhz\": null}\n"
        "]}\n",
        lock_permitted ? "true" : "false");
    strcpy(STATE, tu_write_file("state.json", text));
}

static eerl_device *open_fake(int lock_permitted)
{
    int r;

    write_state(lock_permitted);
    setenv("EERL_FAKE_NVML_STATE", STATE, 1);
    r = eerl_device_open_nvml(&DEV);
    if (r < 0)
        fail_msg("eerl_device_open_nvml: %s", eerl_strerror(r));
    return DEV;
}

/* The locked range the state file shows for gpu: -1, -1 when null. */
static void file_lock(unsigned gpu, long *ret_min, long *ret_max)
{
    json_error_t je;
    json_t *doc = json_load_file(STATE, 0, &je), *g, *a, *b;

    if (!doc)
        fail_msg("state file %s: %s", STATE, je.text);
    g = json_array_get(json_object_get(doc, "gpus"), gpu);
    assert_non_null(g);
    a = json_object_get(g, "locked_min_mhz");
    b = json_object_get(g, "locked_max_mhz");
    *ret_min = json_is_integer(a) ? (long)json_integer_value(a) : -1;
    *ret_max = json_is_integer(b) ? (long)json_integer_value(b) : -1;
    json_decref(doc);
}

static void assert_file_lock(unsigned gpu, long want_min, long want_max)
{
    long a, b;

    file_lock(gpu, &a, &b);
    if (a != want_min || b != want_max)
        fail_msg("GPU %u: state file shows locked %ld-%ld, want %ld-%ld", gpu, a, b, want_min,
                 want_max);
}

static ino_t file_ino(void)
{
    struct stat st;

    assert_int_equal(stat(STATE, &st), 0);
    return st.st_ino;
}

static void test_snapping(void **state)
{
    eerl_device *dev = open_fake(1);
    unsigned v = 0;

    (void)state;
    assert_int_equal(eerl_actuator_new(dev, 0, &ACT), 0);
    assert_int_equal(eerl_actuator_snap(ACT, 0, 1500, &v), 0);
    assert_int_equal(v, 1500);
    assert_int_equal(eerl_actuator_snap(ACT, 0, 1514, &v), 0); /* highest not above */
    assert_int_equal(v, 1500);
    assert_int_equal(eerl_actuator_snap(ACT, 0, 1980, &v), 0);
    assert_int_equal(v, 1980);
    assert_int_equal(eerl_actuator_snap(ACT, 0, 359, &v), 0); /* never below the lowest */
    assert_int_equal(v, 345);
    assert_int_equal(eerl_actuator_snap(ACT, 1, 1754, &v), 0);
    assert_int_equal(v, 1410);
    assert_int_equal(eerl_actuator_snap(ACT, 1, 989, &v), 0);
    assert_int_equal(v, 345);
    /* outside the supported range: an error naming the value and the range, v untouched */
    v = 7;
    assert_int_equal(eerl_actuator_snap(ACT, 0, 2000, &v), EERL_ERANGE);
    assert_int_equal(v, 7);
    assert_non_null(strstr(eerl_actuator_last_error(ACT), "2000 MHz"));
    assert_non_null(strstr(eerl_actuator_last_error(ACT), "345-1980 MHz"));
    assert_int_equal(eerl_actuator_snap(ACT, 0, 344, &v), EERL_ERANGE);
    assert_int_equal(eerl_actuator_snap(ACT, 0, 0, &v), EERL_ERANGE);
    assert_non_null(strstr(eerl_actuator_last_error(ACT), "0 MHz"));
    assert_int_equal(eerl_actuator_set(ACT, 0, 5000), EERL_ERANGE);
    assert_file_lock(0, -1, -1);
    /* unknown GPU index */
    assert_int_equal(eerl_actuator_set(ACT, 9, 1500), EERL_ENODEV);
    assert_non_null(strstr(eerl_actuator_last_error(ACT), "GPU index 9"));
}

static void test_set_locks_snapped_and_only_on_change(void **state)
{
    eerl_device *dev = open_fake(1);
    eerl_actuator_gpu_state st;
    ino_t ino;

    (void)state;
    assert_int_equal(eerl_actuator_new(dev, 0, &ACT), 0);
    ino = file_ino();
    assert_int_equal(eerl_actuator_set(ACT, 0, 1507), 0);
    assert_file_lock(0, 1500, 1500);
    assert_true(file_ino() != ino);
    ino = file_ino();
    /* the same request, and another that snaps to the same clock: no write */
    assert_int_equal(eerl_actuator_set(ACT, 0, 1500), 0);
    assert_int_equal(eerl_actuator_set(ACT, 0, 1514), 0);
    assert_true(file_ino() == ino);
    /* a different clock: written */
    assert_int_equal(eerl_actuator_set(ACT, 0, 1400), 0);
    assert_file_lock(0, 1395, 1395);
    assert_true(file_ino() != ino);
    assert_int_equal(eerl_actuator_gpu(ACT, 0, &st), 0);
    assert_int_equal(st.writes, 2);
    assert_int_equal(st.requests, 4);
    assert_int_equal(st.requested_mhz, 1400);
    assert_int_equal(st.locked_min_mhz, 1395);
    assert_int_equal(st.locked_max_mhz, 1395);
    assert_true(st.touched);
    /* the GPU's clock follows the lock */
    {
        unsigned mhz = 0;
        assert_int_equal(eerl_device_sm_clock(dev, 0, &mhz), 0);
        assert_int_equal(mhz, 1395);
    }
}

static void test_ranges_keep_min_below_max(void **state)
{
    eerl_device *dev = open_fake(1);
    ino_t ino;
    long a, b;

    (void)state;
    assert_int_equal(eerl_actuator_new(dev, 0, &ACT), 0);
    assert_int_equal(eerl_actuator_set_range(ACT, 0, 1000, 1500), 0);
    assert_file_lock(0, 990, 1500);
    /* moving the whole range above the old maximum, then below the old minimum: one write each,
     * and the file never shows min above max */
    assert_int_equal(eerl_actuator_set_range(ACT, 0, 1600, 1800), 0);
    file_lock(0, &a, &b);
    assert_true(a <= b);
    assert_file_lock(0, 1590, 1800);
    assert_int_equal(eerl_actuator_set_range(ACT, 0, 400, 600), 0);
    assert_file_lock(0, 390, 600);
    /* upside down: refused, nothing written */
    ino = file_ino();
    assert_int_equal(eerl_actuator_set_range(ACT, 0, 1500, 1000), EERL_EINVAL);
    assert_non_null(strstr(eerl_actuator_last_error(ACT), "1500-1000"));
    assert_true(file_ino() == ino);
    assert_file_lock(0, 390, 600);
}

static void test_restore_resets_only_what_it_touched(void **state)
{
    eerl_device *dev = open_fake(1);
    eerl_actuator_gpu_state st;

    (void)state;
    assert_int_equal(eerl_actuator_new(dev, 0, &ACT), 0);
    assert_int_equal(eerl_actuator_set(ACT, 0, 1200), 0);
    assert_int_equal(eerl_actuator_set(ACT, 2, 1300), 0);
    assert_file_lock(0, 1200, 1200);
    assert_file_lock(1, 990, 990); /* someone else's lock */
    assert_file_lock(2, 1290, 1290);
    assert_int_equal(eerl_actuator_restore(ACT), 0);
    assert_file_lock(0, -1, -1);
    assert_file_lock(1, 990, 990);
    assert_file_lock(2, -1, -1);
    assert_int_equal(eerl_actuator_gpu(ACT, 2, &st), 0);
    assert_false(st.touched);
    assert_int_equal(st.resets, 1);
    /* after a restore the same clock is written again (the GPU is no longer locked) */
    assert_int_equal(eerl_actuator_set(ACT, 0, 1200), 0);
    assert_file_lock(0, 1200, 1200);
    /* free restores */
    eerl_actuator_free(ACT);
    ACT = NULL;
    assert_file_lock(0, -1, -1);
    assert_file_lock(1, 990, 990);
}

static void test_restore_all(void **state)
{
    eerl_device *dev = open_fake(1);

    (void)state;
    assert_int_equal(eerl_actuator_new(dev, 0, &ACT), 0);
    assert_int_equal(eerl_actuator_new(dev, 0, &ACT2), 0);
    assert_int_equal(eerl_actuator_set(ACT, 0, 1200), 0);
    assert_int_equal(eerl_actuator_set(ACT2, 2, 1100), 0);
    assert_int_equal(eerl_actuator_restore_all(), 0);
    assert_file_lock(0, -1, -1);
    assert_file_lock(2, -1, -1);
    assert_file_lock(1, 990, 990);
}

/* A process that exits without freeing its actuator: the atexit handler restores. */
static void test_restore_at_normal_exit(void **state)
{
    char during[700];
    pid_t pid;
    int status = 0;

    (void)state;
    write_state(1);
    setenv("EERL_FAKE_NVML_STATE", STATE, 1);
    snprintf(during, sizeof(during), "%s/during.json", tu_tmpdir());
    fflush(NULL);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        eerl_device *dev = NULL;
        eerl_actuator *a = NULL;
        char cmd[1500];

        if (eerl_device_open_nvml(&dev) < 0 || eerl_actuator_new(dev, 0, &a) < 0 ||
            eerl_actuator_set(a, 0, 1005) < 0 || eerl_actuator_set(a, 2, 1500) < 0)
            _exit(3);
        snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", STATE, during);
        if (system(cmd) != 0)
            _exit(4);
        exit(0); /* no eerl_actuator_free */
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    {
        char *d = tu_read_file(during);
        assert_non_null(d);
        assert_non_null(strstr(d, "\"locked_min_mhz\": 1005"));
        assert_non_null(strstr(d, "\"locked_max_mhz\": 1500"));
        free(d);
    }
    assert_file_lock(0, -1, -1);
    assert_file_lock(2, -1, -1);
    assert_file_lock(1, 990, 990);
}

/* A forked child of the process that holds the actuator must not reset its parent's clocks when
 * it exits. */
static void test_forked_child_exit_does_not_restore(void **state)
{
    eerl_device *dev = open_fake(1);
    pid_t pid;
    int status = 0;

    (void)state;
    assert_int_equal(eerl_actuator_new(dev, 0, &ACT), 0);
    assert_int_equal(eerl_actuator_set(ACT, 0, 1200), 0);
    fflush(NULL);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        exit(0);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_file_lock(0, 1200, 1200);
}

static void test_observe_only_never_writes(void **state)
{
    eerl_device *dev = open_fake(1);
    eerl_actuator_gpu_state st;
    ino_t ino;
    char *before, *after;

    (void)state;
    before = tu_read_file(STATE);
    ino = file_ino();
    assert_int_equal(eerl_actuator_new(dev, 1, &ACT), 0);
    assert_true(eerl_actuator_observe_only(ACT));
    assert_int_equal(eerl_actuator_set(ACT, 0, 1507), 0);
    assert_int_equal(eerl_actuator_set(ACT, 0, 1500), 0);
    assert_int_equal(eerl_actuator_set(ACT, 0, 1000), 0);
    assert_int_equal(eerl_actuator_set_range(ACT, 2, 700, 900), 0);
    assert_int_equal(eerl_actuator_gpu(ACT, 0, &st), 0);
    assert_int_equal(st.writes, 2); /* would have written 1500, then 990 */
    assert_int_equal(st.requests, 3);
    assert_int_equal(st.locked_min_mhz, 990);
    assert_true(st.touched);
    assert_int_equal(eerl_actuator_restore(ACT), 0);
    assert_int_equal(eerl_actuator_gpu(ACT, 0, &st), 0);
    assert_int_equal(st.resets, 1);
    assert_int_equal(eerl_actuator_set(ACT, 2, 800), 0);
    eerl_actuator_free(ACT);
    ACT = NULL;
    /* the state file was never rewritten */
    after = tu_read_file(STATE);
    assert_true(file_ino() == ino);
    assert_string_equal(before, after);
    assert_file_lock(0, -1, -1);
    assert_file_lock(2, -1, -1);
    free(before);
    free(after);
}

static void test_no_permission_says_what_to_do(void **state)
{
    eerl_device *dev = open_fake(0);
    eerl_actuator_gpu_state st;

    (void)state;
    assert_int_equal(eerl_actuator_new(dev, 0, &ACT), 0);
    assert_int_equal(eerl_actuator_set(ACT, 0, 1500), EERL_ENOPERM);
    assert_non_null(strstr(eerl_actuator_last_error(ACT), "CAP_SYS_ADMIN"));
    assert_non_null(strstr(eerl_actuator_last_error(ACT), "observe-only"));
    assert_int_equal(eerl_actuator_gpu(ACT, 0, &st), 0);
    assert_false(st.touched);
    assert_int_equal(st.writes, 0);
    assert_int_equal(eerl_actuator_restore(ACT), 0); /* nothing to undo */
    assert_file_lock(0, -1, -1);
}

static int teardown(void **state)
{
    (void)state;
    eerl_actuator_free(ACT);
    eerl_actuator_free(ACT2);
    eerl_device_free(DEV);
    ACT = ACT2 = NULL;
    DEV = NULL;
    tu_cleanup();
    return 0;
}

int main(int argc, char **argv)
{
    const struct CMUnitTest all[] = {
        cmocka_unit_test_teardown(test_snapping, teardown),
        cmocka_unit_test_teardown(test_set_locks_snapped_and_only_on_change, teardown),
        cmocka_unit_test_teardown(test_ranges_keep_min_below_max, teardown),
        cmocka_unit_test_teardown(test_restore_resets_only_what_it_touched, teardown),
        cmocka_unit_test_teardown(test_restore_all, teardown),
        cmocka_unit_test_teardown(test_restore_at_normal_exit, teardown),
        cmocka_unit_test_teardown(test_forked_child_exit_does_not_restore, teardown),
        cmocka_unit_test_teardown(test_observe_only_never_writes, teardown),
        cmocka_unit_test_teardown(test_no_permission_says_what_to_do, teardown),
    };

    if (argc > 1) /* run only the tests matching a pattern: test_actuator '*observe*' */
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests(all, NULL, NULL);
}

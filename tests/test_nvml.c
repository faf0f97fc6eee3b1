/* The NVML backend (src/device/nvml.c), tested only through the stand-in libnvidia-ml.so.1 that
 * $EERL_NVML_LIBRARY names: each test writes a state file, opens the backend, and checks what
 * eerl_device_* report against what the state says, including the error paths a real driver
 * produces (no permission, lost GPU, injected NVML errors, missing library, bad state). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include <jansson.h>

#include "eerl/device.h"
#include "eerl/error.h"
#include "device/device_impl.h"
#include "testutil.h"

static char state_path[1024];

/* A two-GPU state in virtual time: GPU 0 an H100 with a regular clock table, GPU 1 an
 * irregular (unsorted) explicit table. */
static json_t *base_state(void)
{
    json_error_t je;
    json_t *doc = json_loads(
        "{\"driver_version\": \"580.159.04\", \"nvml_version\": \"13.580.159.04\","
        " \"virtual_time_ms\": 1000, \"energy_update_ms\": 100, \"lock_permitted\": true,"
        " \"gpus\": ["
        "  {\"name\": \"NVIDIA H100 80GB HBM3\","
        "   \"uuid\": \"GPU-11111111-2222-3333-4444-555555555555\","
        "   \"memory_clocks_mhz\": [1593, 2619],"
        "   \"sm_clocks_mhz\": {\"max\": 1980, \"min\": 345, \"step\": 15},"
        "   \"sm_clock_mhz\": 1755, \"power_mw\": 300000, \"locked_min_mhz\": null,"
        "   \"locked_max_mhz\": null, \"throttle_reasons\": 4, \"energy_supported\": true,"
        "   \"counter_stuck\": false, \"reset_counter\": false, \"lost\": false},"
        "  {\"name\": \"NVIDIA Test GPU\", \"uuid\": \"GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee\","
        "   \"memory_clocks_mhz\": [5001],"
        "   \"sm_clocks_mhz\": [1200, 1500, 1005, 1980, 1500],"
        "   \"power_mw\": 100000}"
        " ],"
        " \"faults\": []}",
        0, &je);

    if (!doc) {
        fprintf(stderr, "base_state: %s\n", je.text);
        abort();
    }
    return doc;
}

/* Replaces the state file atomically, as the stand-in expects. */
static void write_state(json_t *doc)
{
    char tmp[1100];

    snprintf(tmp, sizeof(tmp), "%s.tmp", state_path);
    assert_int_equal(json_dump_file(doc, tmp, JSON_INDENT(1)), 0);
    assert_int_equal(rename(tmp, state_path), 0);
}

static json_t *gpu_of(json_t *doc, size_t i)
{
    return json_array_get(json_object_get(doc, "gpus"), i);
}

static void set_time(json_t *doc, double ms)
{
    json_object_set_new(doc, "virtual_time_ms", json_real(ms));
}

static void set_power(json_t *doc, size_t gpu, unsigned mw)
{
    json_object_set_new(gpu_of(doc, gpu), "power_mw", json_integer(mw));
}

static eerl_device *open_dev(void)
{
    eerl_device *dev = NULL;
    char why[512] = "";
    int r = eerl_device_open_nvml_ex(why, sizeof(why), &dev);

    if (r < 0)
        fprintf(stderr, "open failed: %s: %s\n", eerl_strerror(r), why);
    assert_int_equal(r, 0);
    assert_non_null(dev);
    return dev;
}

static int setup(void **state)
{
    json_t *doc = base_state();

    (void)state;
    snprintf(state_path, sizeof(state_path), "%s/state.json", tu_tmpdir());
    write_state(doc);
    json_decref(doc);
    setenv("EERL_FAKE_NVML_STATE", state_path, 1);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tu_cleanup();
    return 0;
}

static void test_count_name_uuid(void **state)
{
    eerl_device *dev = open_dev();
    unsigned n = 0;
    char buf[EERL_DEVICE_NAME_MAX], small[8];

    (void)state;
    assert_string_equal(eerl_device_backend(dev), "nvml");
    assert_int_equal(eerl_device_count(dev, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(eerl_device_name(dev, 0, buf, sizeof(buf)), 0);
    assert_string_equal(buf, "NVIDIA H100 80GB HBM3");
    assert_int_equal(eerl_device_name(dev, 1, buf, sizeof(buf)), 0);
    assert_string_equal(buf, "NVIDIA Test GPU");
    assert_int_equal(eerl_device_uuid(dev, 1, buf, sizeof(buf)), 0);
    assert_string_equal(buf, "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee");
    /* Too small a buffer is an error, and the buffer is left alone. */
    strcpy(small, "keep");
    assert_int_equal(eerl_device_uuid(dev, 0, small, sizeof(small)), EERL_EOVERFLOW);
    assert_string_equal(small, "keep");
    eerl_device_free(dev);
}

/* eerl doctor shows the driver's version; a buffer too small is an error, left alone. */
static void test_driver_version(void **state)
{
    eerl_device *dev = open_dev();
    char buf[80], small[4];

    (void)state;
    assert_int_equal(eerl_device_driver_version(dev, buf, sizeof(buf)), 0);
    assert_string_equal(buf, "580.159.04");
    strcpy(small, "abc");
    assert_int_equal(eerl_device_driver_version(dev, small, sizeof(small)), EERL_EOVERFLOW);
    assert_string_equal(small, "abc");
    assert_non_null(strstr(eerl_device_last_error(dev), "nvmlSystemGetDriverVersion"));
    eerl_device_free(dev);
}

static void test_supported_clocks_sorted_at_top_memory_clock(void **state)
{
    eerl_device *dev = open_dev();
    unsigned mhz[EERL_DEVICE_CLOCKS_MAX], cur = 0;
    size_t n = 0, i;

    (void)state;
    assert_int_equal(eerl_device_supported_sm_clocks(dev, 0, mhz, EERL_DEVICE_CLOCKS_MAX, &n), 0);
    assert_int_equal(n, (1980 - 345) / 15 + 1);
    assert_int_equal(mhz[0], 1980);
    assert_int_equal(mhz[n - 1], 345);
    for (i = 1; i < n; i++)
        assert_int_equal(mhz[i - 1] - mhz[i], 15);
    /* The explicit, unsorted, duplicated table comes back highest first without duplicates. */
    assert_int_equal(eerl_device_supported_sm_clocks(dev, 1, mhz, EERL_DEVICE_CLOCKS_MAX, &n), 0);
    assert_int_equal(n, 4);
    assert_int_equal(mhz[0], 1980);
    assert_int_equal(mhz[1], 1500);
    assert_int_equal(mhz[2], 1200);
    assert_int_equal(mhz[3], 1005);
    /* Too little room: EOVERFLOW, ret_n untouched. */
    n = 77;
    assert_int_equal(eerl_device_supported_sm_clocks(dev, 0, mhz, 10, &n), EERL_EOVERFLOW);
    assert_int_equal(n, 77);
    /* Current clock: the governor's when unlocked. */
    assert_int_equal(eerl_device_sm_clock(dev, 0, &cur), 0);
    assert_int_equal(cur, 1755);
    /* GPU 1 has no sm_clock_mhz: the stand-in runs it at its highest clock. */
    assert_int_equal(eerl_device_sm_clock(dev, 1, &cur), 0);
    assert_int_equal(cur, 1980);
    eerl_device_free(dev);
}

static void test_energy_follows_power_in_virtual_time(void **state)
{
    json_t *doc = base_state();
    eerl_device *dev;
    uint64_t e0 = 1, e = 0;
    unsigned mw = 0;

    (void)state;
    write_state(doc);
    dev = open_dev();
    assert_int_equal(eerl_device_energy_mj(dev, 0, &e0), 0);
    assert_int_equal(e0, 0);
    assert_int_equal(eerl_device_power_mw(dev, 0, &mw), 0);
    assert_int_equal(mw, 300000);

    /* 50 ms later: the counter has not reached its next 100 ms update yet. */
    set_time(doc, 1050);
    write_state(doc);
    assert_int_equal(eerl_device_energy_mj(dev, 0, &e), 0);
    assert_int_equal(e, 0);
    /* At 1100 ms it shows 100 ms at 300 W = 30 J. */
    set_time(doc, 1100);
    write_state(doc);
    assert_int_equal(eerl_device_energy_mj(dev, 0, &e), 0);
    assert_int_equal(e, 30000);
    /* Power drops to 100 W at 1150 (the 1100-1150 slice was still at 300 W), then 1150-1300 at
     * 100 W: 30 + 15 + 15 = 60 J at the 1300 ms update; 1399 ms still shows it. */
    set_time(doc, 1150);
    set_power(doc, 0, 100000);
    write_state(doc);
    assert_int_equal(eerl_device_power_mw(dev, 0, &mw), 0); /* the stand-in reads it now */
    assert_int_equal(mw, 100000);
    set_time(doc, 1399);
    write_state(doc);
    assert_int_equal(eerl_device_energy_mj(dev, 0, &e), 0);
    assert_int_equal(e, 60000);
    set_time(doc, 1400);
    write_state(doc);
    assert_int_equal(eerl_device_energy_mj(dev, 0, &e), 0);
    assert_int_equal(e, 70000);
    /* GPU 1 ran at 100 W throughout: 400 ms = 40 J. */
    assert_int_equal(eerl_device_energy_mj(dev, 1, &e), 0);
    assert_int_equal(e, 40000);
    /* Time passes only when the file says so: reading again changes nothing. */
    assert_int_equal(eerl_device_energy_mj(dev, 1, &e), 0);
    assert_int_equal(e, 40000);
    eerl_device_free(dev);
    json_decref(doc);
}

/* Without virtual_time_ms the stand-in runs on CLOCK_MONOTONIC. Only a lower bound is checked:
 * after sleeping 250 ms at 100 W the counter has passed at least one more 100 ms update. */
static void test_energy_in_real_time(void **state)
{
    json_t *doc = base_state();
    eerl_device *dev;
    uint64_t e0 = 0, e1 = 0;
    struct timespec ts = {0, 250 * 1000 * 1000};

    (void)state;
    json_object_set_new(doc, "virtual_time_ms", json_null());
    write_state(doc);
    dev = open_dev();
    assert_int_equal(eerl_device_energy_mj(dev, 1, &e0), 0);
    nanosleep(&ts, NULL);
    assert_int_equal(eerl_device_energy_mj(dev, 1, &e1), 0);
    assert_true(e1 >= e0 + 15000); /* >= 150 ms at 100 W */
    assert_true(e1 - e0 < 100000000);
    eerl_device_free(dev);
    json_decref(doc);
}

struct reader {
    eerl_device *dev;
    unsigned gpu;
    int errors;
    uint64_t last;
};

static void *reader_main(void *arg)
{
    struct reader *rd = arg;
    int i;

    for (i = 0; i < 2000; i++) {
        uint64_t e = 0;
        unsigned v = 0;

        if (eerl_device_energy_mj(rd->dev, rd->gpu, &e) < 0 ||
            eerl_device_power_mw(rd->dev, rd->gpu, &v) < 0 ||
            eerl_device_sm_clock(rd->dev, rd->gpu, &v) < 0)
            rd->errors++;
        if (e < rd->last)
            rd->errors++;
        rd->last = e;
    }
    return NULL;
}

/* The meter samples from its own thread while the actuator locks clocks and time moves: every
 * call must succeed and the counter never goes backwards. (Also run under ThreadSanitizer.) */
static void test_concurrent_callers(void **state)
{
    json_t *doc = base_state();
    eerl_device *dev, *dev2;
    struct reader rd[2];
    pthread_t th[2];
    int i;

    (void)state;
    write_state(doc);
    dev = open_dev();
    dev2 = open_dev(); /* readers use dev2, the writer dev: last-error text is per handle */
    memset(rd, 0, sizeof(rd));
    rd[0].dev = dev2;
    rd[0].gpu = 0;
    rd[1].dev = dev2;
    rd[1].gpu = 1;
    /* The readers share dev2; that is safe only while their calls succeed (nothing is written
     * into its last-error text), which is what the test expects. */
    for (i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&th[i], NULL, reader_main, &rd[i]), 0);
    for (i = 0; i < 50; i++) {
        set_time(doc, 1000 + 100.0 * (i + 1));
        write_state(doc);
        assert_int_equal(eerl_device_lock_sm_clocks(dev, 0, 1200, 1200 + 15 * (unsigned)(i % 4)),
                         0);
        assert_int_equal(eerl_device_reset_sm_clocks(dev, 0), 0);
    }
    for (i = 0; i < 2; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    assert_int_equal(rd[0].errors, 0);
    assert_int_equal(rd[1].errors, 0);
    eerl_device_free(dev2);
    eerl_device_free(dev);
    json_decref(doc);
}

static void test_counter_reset_and_stuck(void **state)
{
    json_t *doc = base_state();
    eerl_device *dev;
    uint64_t e = 0;

    (void)state;
    write_state(doc);
    dev = open_dev();
    set_time(doc, 2000); /* 1 s at 300 W */
    write_state(doc);
    assert_int_equal(eerl_device_energy_mj(dev, 0, &e), 0);
    assert_int_equal(e, 300000);
    /* Stuck from 2000 on: the counter stays while power is still reported. The stand-in reads
     * the file when called, so each state the test lays down is followed by a call. */
    json_object_set_new(gpu_of(doc, 0), "counter_stuck", json_true());
    write_state(doc);
    assert_int_equal(eerl_device_energy_mj(dev, 0, &e), 0);
    assert_int_equal(e, 300000);
    set_time(doc, 3000);
    write_state(doc);
    assert_int_equal(eerl_device_energy_mj(dev, 0, &e), 0);
    assert_int_equal(e, 300000);
    /* Unstuck at 3000, then a driver reset of the counter at 3500. */
    json_object_set_new(gpu_of(doc, 0), "counter_stuck", json_false());
    write_state(doc);
    assert_int_equal(eerl_device_energy_mj(dev, 0, &e), 0);
    assert_int_equal(e, 300000);
    set_time(doc, 3500);
    json_object_set_new(gpu_of(doc, 0), "reset_counter", json_true());
    write_state(doc);
    assert_int_equal(eerl_device_energy_mj(dev, 0, &e), 0);
    assert_int_equal(e, 0);
    /* The flag left on in later writes does not reset again. */
    set_time(doc, 3600);
    write_state(doc);
    assert_int_equal(eerl_device_energy_mj(dev, 0, &e), 0);
    assert_int_equal(e, 30000);
    eerl_device_free(dev);
    json_decref(doc);
}

static void test_energy_not_supported(void **state)
{
    json_t *doc = base_state();
    eerl_device *dev;
    uint64_t e = 5;
    unsigned mw = 0;

    (void)state;
    json_object_set_new(gpu_of(doc, 1), "energy_supported", json_false());
    write_state(doc);
    dev = open_dev();
    assert_int_equal(eerl_device_energy_mj(dev, 1, &e), EERL_ENOTSUP);
    assert_int_equal(e, 5);
    assert_non_null(strstr(eerl_device_last_error(dev), "nvmlDeviceGetTotalEnergyConsumption"));
    assert_non_null(strstr(eerl_device_last_error(dev), "gpu 1"));
    /* Power still works there, so a meter can fall back to it. */
    assert_int_equal(eerl_device_power_mw(dev, 1, &mw), 0);
    assert_int_equal(mw, 100000);
    eerl_device_free(dev);
    json_decref(doc);
}

static void test_lock_writes_back_and_reset_clears(void **state)
{
    json_t *doc = base_state(), *file, *g;
    json_error_t je;
    eerl_device *dev;
    unsigned cur = 0;

    (void)state;
    write_state(doc);
    dev = open_dev();
    assert_int_equal(eerl_device_lock_sm_clocks(dev, 0, 1200, 1500), 0);
    file = json_load_file(state_path, 0, &je);
    assert_non_null(file);
    g = gpu_of(file, 0);
    assert_int_equal(json_integer_value(json_object_get(g, "locked_min_mhz")), 1200);
    assert_int_equal(json_integer_value(json_object_get(g, "locked_max_mhz")), 1500);
    assert_true(json_is_null(json_object_get(gpu_of(file, 1), "locked_min_mhz")) ||
                !json_object_get(gpu_of(file, 1), "locked_min_mhz"));
    json_decref(file);
    /* The governor's 1755 MHz is clamped into the lock. */
    assert_int_equal(eerl_device_sm_clock(dev, 0, &cur), 0);
    assert_int_equal(cur, 1500);

    assert_int_equal(eerl_device_reset_sm_clocks(dev, 0), 0);
    file = json_load_file(state_path, 0, &je);
    assert_non_null(file);
    assert_true(json_is_null(json_object_get(gpu_of(file, 0), "locked_min_mhz")));
    assert_true(json_is_null(json_object_get(gpu_of(file, 0), "locked_max_mhz")));
    json_decref(file);
    assert_int_equal(eerl_device_sm_clock(dev, 0, &cur), 0);
    assert_int_equal(cur, 1755);

    /* min above max never reaches NVML; a range outside the table is NVML's INVALID_ARGUMENT. */
    assert_int_equal(eerl_device_lock_sm_clocks(dev, 0, 1500, 1200), EERL_EINVAL);
    assert_int_equal(eerl_device_lock_sm_clocks(dev, 0, 300, 1200), EERL_EINVAL);
    assert_non_null(strstr(eerl_device_last_error(dev), "300-1200 MHz"));
    eerl_device_free(dev);
    json_decref(doc);
}

static void test_no_permission(void **state)
{
    json_t *doc = base_state(), *file;
    json_error_t je;
    eerl_device *dev;

    (void)state;
    json_object_set_new(doc, "lock_permitted", json_false());
    write_state(doc);
    dev = open_dev();
    assert_int_equal(eerl_device_lock_sm_clocks(dev, 1, 1200, 1200), EERL_ENOPERM);
    assert_non_null(strstr(eerl_device_last_error(dev), "nvmlDeviceSetGpuLockedClocks"));
    assert_non_null(strstr(eerl_device_last_error(dev), "gpu 1, 1200-1200 MHz"));
    assert_non_null(strstr(eerl_strerror(EERL_ENOPERM), "CAP_SYS_ADMIN"));
    assert_non_null(strstr(eerl_strerror(EERL_ENOPERM), "observe-only"));
    assert_int_equal(eerl_device_reset_sm_clocks(dev, 1), EERL_ENOPERM);
    /* Nothing was written. */
    file = json_load_file(state_path, 0, &je);
    assert_non_null(file);
    assert_null(json_object_get(gpu_of(file, 1), "locked_min_mhz"));
    json_decref(file);
    eerl_device_free(dev);
    json_decref(doc);
}

static void test_lost_gpu(void **state)
{
    json_t *doc = base_state();
    eerl_device *dev;
    uint64_t e = 0;
    unsigned mw = 0;
    char buf[EERL_DEVICE_NAME_MAX];

    (void)state;
    write_state(doc);
    dev = open_dev();
    assert_int_equal(eerl_device_energy_mj(dev, 1, &e), 0);
    /* GPU 1 falls off the bus mid-run; GPU 0 carries on. */
    json_object_set_new(gpu_of(doc, 1), "lost", json_true());
    set_time(doc, 1200);
    write_state(doc);
    assert_int_equal(eerl_device_energy_mj(dev, 1, &e), EERL_EGPULOST);
    assert_int_equal(eerl_device_power_mw(dev, 1, &mw), EERL_EGPULOST);
    assert_non_null(strstr(eerl_device_last_error(dev), "gpu 1"));
    assert_int_equal(eerl_device_energy_mj(dev, 0, &e), 0);
    assert_int_equal(e, 60000);
    eerl_device_free(dev);

    /* Lost before open: open succeeds, the GPU's calls fail. */
    dev = open_dev();
    assert_int_equal(eerl_device_name(dev, 1, buf, sizeof(buf)), EERL_EGPULOST);
    /* The current driver's _v2 name is the one used. */
    assert_non_null(strstr(eerl_device_last_error(dev), "nvmlDeviceGetHandleByIndex_v2 (gpu 1)"));
    assert_int_equal(eerl_device_name(dev, 0, buf, sizeof(buf)), 0);
    eerl_device_free(dev);
    json_decref(doc);
}

/* One read of several parts and GPUs (the meter's tick): every part of a GPU that answers, each
 * as its own call gives it; a lost GPU's parts all say lost; a bad index fails its parts only. */
static void test_one_read_of_every_part(void **state)
{
    const unsigned all = EERL__READ_ENERGY | EERL__READ_POWER_INSTANT | EERL__READ_CLOCK |
                         EERL__READ_REASONS | EERL__READ_LIMIT;
    json_t *doc = base_state();
    struct eerl__device_read rd[3];
    eerl_device *dev;
    uint64_t e = 0;

    (void)state;
    json_object_set_new(gpu_of(doc, 0), "power_limit_mw", json_integer(700000));
    json_object_set_new(gpu_of(doc, 1), "lost", json_true());
    write_state(doc);
    dev = open_dev();
    memset(rd, 0, sizeof(rd));
    rd[0].gpu = 0;
    rd[1].gpu = 1;
    rd[2].gpu = 9;
    rd[0].want = rd[1].want = rd[2].want = all;
    assert_int_equal(eerl__device_read(dev, rd, 3), 0);
    assert_int_equal(rd[0].energy_r, 0);
    assert_int_equal(eerl_device_energy_mj(dev, 0, &e), 0);
    assert_int_equal(rd[0].energy_mj, e);
    assert_int_equal(rd[0].power_r, 0);
    assert_int_equal(rd[0].power_instant, 1);
    assert_int_equal(rd[0].power_mw, 300000);
    assert_int_equal(rd[0].clock_r, 0);
    assert_int_equal(rd[0].sm_mhz, 1755);
    assert_int_equal(rd[0].reasons_r, 0);
    assert_int_equal(rd[0].reasons, EERL_THROTTLE_SW_POWER_CAP);
    assert_int_equal(rd[0].limit_r, 0);
    assert_int_equal(rd[0].limit_mw, 700000);
    assert_int_equal(rd[1].energy_r, EERL_EGPULOST);
    assert_int_equal(rd[1].power_r, EERL_EGPULOST);
    assert_int_equal(rd[1].limit_r, EERL_EGPULOST);
    assert_int_equal(rd[2].power_r, EERL_ENODEV);
    assert_int_equal(rd[2].reasons_r, EERL_ENODEV);
    /* Parts not asked for are not read. */
    memset(rd, 0, sizeof(rd));
    rd[0].want = EERL__READ_POWER;
    assert_int_equal(eerl__device_read(dev, rd, 1), 0);
    assert_int_equal(rd[0].power_r, 0);
    assert_int_equal(rd[0].power_instant, -1);
    assert_int_equal(rd[0].energy_r, EERL_ENOTSUP);
    assert_int_equal(rd[0].limit_r, EERL_ENOTSUP);
    eerl_device_free(dev);
    json_decref(doc);
}

static void test_injected_faults(void **state)
{
    json_t *doc = base_state();
    eerl_device *dev;
    unsigned mw = 0;
    uint64_t mask = 0;

    (void)state;
    json_array_append_new(json_object_get(doc, "faults"),
                          json_pack("{s:s, s:i, s:i, s:i}", "function", "nvmlDeviceGetPowerUsage",
                                    "gpu", 1, "error", 999, "count", 2));
    json_array_append_new(
        json_object_get(doc, "faults"),
        json_pack("{s:s, s:i}", "function", "nvmlDeviceGetCurrentClocksEventReasons", "error", 3));
    write_state(doc);
    dev = open_dev();
    /* GPU 0 is not affected by a fault aimed at GPU 1. */
    assert_int_equal(eerl_device_power_mw(dev, 0, &mw), 0);
    mw = 7;
    assert_int_equal(eerl_device_power_mw(dev, 1, &mw), EERL_ENVML);
    assert_int_equal(mw, 7);
    assert_non_null(strstr(eerl_device_last_error(dev), "nvmlDeviceGetPowerUsage (gpu 1)"));
    assert_non_null(strstr(eerl_device_last_error(dev), "999"));
    /* Re-reading the same fault list (time moves) keeps its use count. */
    set_time(doc, 1100);
    write_state(doc);
    assert_int_equal(eerl_device_power_mw(dev, 1, &mw), EERL_ENVML);
    assert_int_equal(eerl_device_power_mw(dev, 1, &mw), 0);
    assert_int_equal(mw, 100000);
    /* NOT_SUPPORTED from the throttle-reason call maps to ENOTSUP, once. */
    assert_int_equal(eerl_device_throttle_reasons(dev, 0, &mask), EERL_ENOTSUP);
    assert_int_equal(eerl_device_throttle_reasons(dev, 0, &mask), 0);
    assert_int_equal(mask, EERL_THROTTLE_SW_POWER_CAP);
    eerl_device_free(dev);
    json_decref(doc);
}

static void test_unknown_gpu_index(void **state)
{
    eerl_device *dev = open_dev();
    unsigned mw = 0;

    (void)state;
    assert_int_equal(eerl_device_power_mw(dev, 9, &mw), EERL_ENODEV);
    assert_non_null(strstr(eerl_device_last_error(dev), "GPU index 9"));
    assert_non_null(strstr(eerl_device_last_error(dev), "0-1"));
    assert_int_equal(eerl_device_lock_sm_clocks(dev, 2, 1200, 1200), EERL_ENODEV);
    eerl_device_free(dev);
}

static void test_reopen_rereads_state(void **state)
{
    json_t *doc = base_state();
    eerl_device *dev, *dev2;
    unsigned n = 0;
    uint64_t e = 1;

    (void)state;
    set_time(doc, 5000);
    write_state(doc);
    dev = open_dev();
    set_time(doc, 6000);
    write_state(doc);
    assert_int_equal(eerl_device_energy_mj(dev, 0, &e), 0);
    assert_int_equal(e, 300000);
    /* A second handle in the same process shares the "driver": same counter. */
    dev2 = open_dev();
    assert_int_equal(eerl_device_energy_mj(dev2, 0, &e), 0);
    assert_int_equal(e, 300000);
    eerl_device_free(dev2);
    eerl_device_free(dev);
    /* After the last close, a new open reads a one-GPU file from scratch. */
    json_array_remove(json_object_get(doc, "gpus"), 1);
    write_state(doc);
    dev = open_dev();
    assert_int_equal(eerl_device_count(dev, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(eerl_device_energy_mj(dev, 0, &e), 0);
    assert_int_equal(e, 0);
    eerl_device_free(dev);
    json_decref(doc);
}

static void test_missing_library_is_no_driver(void **state)
{
    char *saved = strdup(getenv("EERL_NVML_LIBRARY"));
    char missing[1100], why[512] = "";
    eerl_device *dev = NULL;

    (void)state;
    assert_non_null(saved);
    snprintf(missing, sizeof(missing), "%s/no-such-libnvidia-ml.so.1", tu_tmpdir());
    setenv("EERL_NVML_LIBRARY", missing, 1);
    assert_int_equal(eerl_device_open_nvml_ex(why, sizeof(why), &dev), EERL_ENODRIVER);
    assert_null(dev);
    assert_non_null(strstr(why, "no NVIDIA driver"));
    assert_non_null(strstr(why, missing));
    assert_int_equal(eerl_device_open_nvml(&dev), EERL_ENODRIVER);
    assert_null(dev);
    assert_non_null(strstr(eerl_strerror(EERL_ENODRIVER), "libnvidia-ml.so.1 not found"));
    setenv("EERL_NVML_LIBRARY", saved, 1);
    free(saved);
}

static void test_library_without_nvml_symbols(void **state)
{
    char *saved = strdup(getenv("EERL_NVML_LIBRARY"));
    char why[512] = "";
    eerl_device *dev = NULL;

    (void)state;
    /* libm is a real shared library, but not NVML. */
    setenv("EERL_NVML_LIBRARY", "libm.so.6", 1);
    assert_int_equal(eerl_device_open_nvml_ex(why, sizeof(why), &dev), EERL_ENOSYM);
    assert_null(dev);
    assert_non_null(strstr(why, "nvmlInit_v2"));
    setenv("EERL_NVML_LIBRARY", saved, 1);
    free(saved);
}

/* An older driver: only nvmlInit, nvmlDeviceGetCount, nvmlDeviceGetHandleByIndex and
 * nvmlDeviceGetCurrentClocksThrottleReasons. The backend falls back to them. */
static void test_fallback_to_old_symbol_names(void **state)
{
    char *saved = strdup(getenv("EERL_NVML_LIBRARY"));
    char legacy[1200], *slash;
    json_t *doc = base_state();
    eerl_device *dev;
    unsigned n = 0;
    uint64_t mask = 0;
    char buf[EERL_DEVICE_NAME_MAX];

    (void)state;
    assert_non_null(saved);
    snprintf(legacy, sizeof(legacy), "%s", saved);
    slash = strrchr(legacy, '/');
    assert_non_null(slash);
    snprintf(slash, sizeof(legacy) - (size_t)(slash - legacy), "/legacy/libnvidia-ml.so.1");
    setenv("EERL_NVML_LIBRARY", legacy, 1);
    json_object_set_new(gpu_of(doc, 1), "lost", json_true());
    write_state(doc);
    dev = open_dev();
    assert_int_equal(eerl_device_count(dev, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(eerl_device_throttle_reasons(dev, 0, &mask), 0);
    assert_int_equal(mask, EERL_THROTTLE_SW_POWER_CAP);
    assert_int_equal(eerl_device_name(dev, 1, buf, sizeof(buf)), EERL_EGPULOST);
    assert_non_null(strstr(eerl_device_last_error(dev), "nvmlDeviceGetHandleByIndex (gpu 1)"));
    eerl_device_free(dev);
    setenv("EERL_NVML_LIBRARY", saved, 1);
    free(saved);
    json_decref(doc);
}

static void test_malformed_state_file(void **state)
{
    char why[512] = "";
    eerl_device *dev = NULL;
    const char *bad;

    (void)state;
    /* A JSON syntax error: the message names the file and the place. */
    bad = tu_write_file("bad.json", "{\"gpus\": [ {\"name\": \"x\",, } ]}\n");
    setenv("EERL_FAKE_NVML_STATE", bad, 1);
    assert_int_equal(eerl_device_open_nvml_ex(why, sizeof(why), &dev), EERL_ENVML);
    assert_null(dev);
    assert_non_null(strstr(why, "bad state file"));
    assert_non_null(strstr(why, "bad.json"));
    assert_non_null(strstr(why, "line 1"));
    /* Valid JSON, wrong content: the message names the field. */
    bad = tu_write_file("bad2.json", "{\"gpus\": [ {\"name\": \"x\", \"uuid\": \"GPU-1\","
                                     " \"memory_clocks_mhz\": [2619],"
                                     " \"sm_clocks_mhz\": {\"max\": 1980, \"min\": 345,"
                                     " \"step\": 0}} ]}\n");
    setenv("EERL_FAKE_NVML_STATE", bad, 1);
    assert_int_equal(eerl_device_open_nvml_ex(why, sizeof(why), &dev), EERL_ENVML);
    assert_non_null(strstr(why, "gpus[0].sm_clocks_mhz"));
    /* No state at all. */
    unsetenv("EERL_FAKE_NVML_STATE");
    assert_int_equal(eerl_device_open_nvml_ex(why, sizeof(why), &dev), EERL_ENODRIVER);
    assert_non_null(strstr(why, "EERL_FAKE_NVML_STATE"));
    setenv("EERL_FAKE_NVML_STATE", state_path, 1);
    /* And the good file still opens afterwards. */
    dev = open_dev();
    eerl_device_free(dev);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_count_name_uuid),
        cmocka_unit_test(test_driver_version),
        cmocka_unit_test(test_supported_clocks_sorted_at_top_memory_clock),
        cmocka_unit_test(test_energy_follows_power_in_virtual_time),
        cmocka_unit_test(test_energy_in_real_time),
        cmocka_unit_test(test_concurrent_callers),
        cmocka_unit_test(test_counter_reset_and_stuck),
        cmocka_unit_test(test_energy_not_supported),
        cmocka_unit_test(test_lock_writes_back_and_reset_clears),
        cmocka_unit_test(test_no_permission),
        cmocka_unit_test(test_lost_gpu),
        cmocka_unit_test(test_one_read_of_every_part),
        cmocka_unit_test(test_injected_faults),
        cmocka_unit_test(test_unknown_gpu_index),
        cmocka_unit_test(test_reopen_rereads_state),
        cmocka_unit_test(test_missing_library_is_no_driver),
        cmocka_unit_test(test_library_without_nvml_symbols),
        cmocka_unit_test(test_fallback_to_old_symbol_names),
        cmocka_unit_test(test_malformed_state_file),
    };

    if (!getenv("EERL_NVML_LIBRARY")) {
        fprintf(stderr, "test_nvml: EERL_NVML_LIBRARY must name the stand-in library (ctest sets "
                        "it)\n");
        return 1;
    }
    return cmocka_run_group_tests(tests, setup, teardown);
}

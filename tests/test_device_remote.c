/* The remote device backend (src/device/remote.c): GPUs read through one callback, as a session
 * across nodes reads the GPUs of other nodes. The callback here serves counters the test sets,
 * and counts its calls. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <string.h>
#include <cmocka.h>

#include "eerl/device.h"
#include "eerl/error.h"
#include "eerl/meter.h"

#define N 8

static uint64_t MJ[N];
static unsigned MW[N];
static int GPU_ERR[N];
static int READ_ERR;
static unsigned CALLS;
/* What each GPU decided about its own speed, given where STATE says (a node whose eerld has
 * them); else left as the device hands the readings: zero, "not read". */
static int STATE[N];
static uint64_t REASONS[N];
static unsigned LIMIT_MW[N];

static int read_all(void *ctx, eerl_device_reading *ret, size_t n)
{
    size_t i;

    assert_ptr_equal(ctx, &CALLS);
    assert_int_equal(n, N);
    CALLS++;
    if (READ_ERR)
        return READ_ERR;
    for (i = 0; i < n; i++) {
        ret[i].err = GPU_ERR[i];
        ret[i].energy_mj = MJ[i];
        ret[i].power_mw = MW[i];
        ret[i].sm_mhz = 1980;
        if (STATE[i]) {
            ret[i].has_reasons = 1;
            ret[i].reasons = REASONS[i];
            ret[i].limit_mw = LIMIT_MW[i];
        }
    }
    return 0;
}

static eerl_device *DEV;
static eerl_meter *MET;

static int setup(void **state)
{
    static const unsigned clocks[] = {345, 1980, 1005};
    unsigned g;

    (void)state;
    memset(MJ, 0, sizeof(MJ));
    memset(GPU_ERR, 0, sizeof(GPU_ERR));
    memset(STATE, 0, sizeof(STATE));
    memset(REASONS, 0, sizeof(REASONS));
    memset(LIMIT_MW, 0, sizeof(LIMIT_MW));
    READ_ERR = 0;
    CALLS = 0;
    for (g = 0; g < N; g++)
        MW[g] = 300000;
    assert_int_equal(eerl_device_open_remote(N, read_all, &CALLS, &DEV), 0);
    for (g = 0; g < N; g++)
        assert_int_equal(
            eerl_device_remote_describe(DEV, g, "NVIDIA H100 80GB HBM3", "GPU-0000000g", clocks, 3),
            0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    eerl_meter_free(MET);
    MET = NULL;
    eerl_device_free(DEV);
    DEV = NULL;
    return 0;
}

static eerl_meter *meter_over_all(void)
{
    unsigned all[N], g;

    for (g = 0; g < N; g++)
        all[g] = g;
    assert_int_equal(eerl_meter_new(DEV, all, N, 100, &MET), 0);
    return MET;
}

/* Every GPU at 300 W for dt seconds: the counters move on. */
static void run_for(double dt)
{
    unsigned g;

    for (g = 0; g < N; g++)
        MJ[g] += (uint64_t)llround(MW[g] * dt);
}

/* A phase boundary reads every GPU of every node in one call, whatever the GPU count. */
static void test_a_mark_reads_every_gpu_in_one_call(void **state)
{
    eerl_meter *m = meter_over_all();
    eerl_meter_reading r;

    (void)state;
    assert_int_equal(eerl_meter_tick_energy(m, 0.0), 0);
    assert_int_equal(CALLS, 1);
    run_for(2.0);
    assert_int_equal(eerl_meter_tick_energy(m, 2.0), 0);
    assert_int_equal(CALLS, 2);
    assert_int_equal(eerl_meter_energy(m, 0.0, 2.0, &r), 0);
    assert_true(fabs(r.total_joules - N * 600.0) < 1e-9);
    assert_int_equal(r.flags, 0);
}

/* A remote GPU's counter that goes back (a driver reset there) is flagged and never counted as
 * negative energy; one that stops while the GPU draws power is flagged and counted from power. */
static void test_remote_counter_faults_are_flagged(void **state)
{
    eerl_meter *m = meter_over_all();
    eerl_meter_reading r;

    (void)state;
    assert_int_equal(eerl_meter_tick_energy(m, 0.0), 0);
    run_for(1.0);
    assert_int_equal(eerl_meter_tick_energy(m, 1.0), 0);
    run_for(1.0);
    MJ[3] = 5; /* reset */
    assert_int_equal(eerl_meter_tick_energy(m, 2.0), 0);
    assert_int_equal(eerl_meter_energy(m, 1.0, 2.0, &r), 0);
    assert_true(r.flags & EERL_METER_RESET);
    assert_true(r.gpu_flags[3] & EERL_METER_RESET);
    assert_true(r.joules[3] >= 0);
    run_for(1.0);
    MJ[5] -= 300000; /* GPU 5's counter did not move for a second at 300 W */
    assert_int_equal(eerl_meter_tick_energy(m, 3.0), 0);
    assert_int_equal(eerl_meter_energy(m, 2.0, 3.0, &r), 0);
    assert_true(r.gpu_flags[5] & EERL_METER_STUCK);
    assert_true(fabs(r.joules[5] - 300.0) < 1e-6);
}

/* A read that fails on the remote side (a node lost) fails that instant's reads: the meter says
 * so in its flags rather than counting the GPUs as idle. */
static void test_a_failed_remote_read_is_flagged(void **state)
{
    eerl_meter *m = meter_over_all();
    eerl_meter_reading r;
    uint64_t mj;

    (void)state;
    assert_int_equal(eerl_meter_tick_energy(m, 0.0), 0);
    run_for(1.0);
    READ_ERR = EERL_EIO;
    assert_int_equal(eerl_meter_tick_energy(m, 1.0), 0);
    assert_int_equal(eerl_device_energy_mj(DEV, 0, &mj), EERL_EIO);
    assert_non_null(strstr(eerl_device_last_error(DEV), "remote GPU 0"));
    assert_int_equal(eerl_meter_energy(m, 0.0, 1.0, &r), 0);
    assert_true(r.flags & EERL_METER_MISSED);
}

/* The clock event reasons and the power limit the caller gives flag an update as the GPU's own
 * slowdown, as on one node, in the same one call per instant: a thermal slowdown on GPU 2 and
 * a limit lowered on GPU 5 flag the spans they fall in; the software power cap is a share, never
 * a flag. */
static void test_the_remote_gpus_own_slowdowns_are_flagged(void **state)
{
    eerl_meter *m = meter_over_all();
    eerl_meter_reading r;
    uint64_t mask = 0;
    unsigned mw = 0, g;
    int k;

    (void)state;
    for (g = 0; g < N; g++) {
        STATE[g] = 1;
        LIMIT_MW[g] = 700000;
    }
    for (k = 0; k <= 30; k++) { /* ticks every 0.1 s */
        REASONS[1] = k >= 1 && k <= 10 ? EERL_THROTTLE_SW_POWER_CAP : 0;
        REASONS[2] = k == 15 ? EERL_THROTTLE_HW_THERMAL : 0;
        if (k == 25)
            LIMIT_MW[5] = 500000; /* an operator on that node lowers the limit */
        run_for(0.1);
        assert_int_equal(eerl_meter_tick(m, 0.1 * k), 0);
        assert_int_equal(CALLS, (unsigned)k + 1); /* one call per instant, state included */
    }
    assert_int_equal(eerl_meter_energy(m, 0.0, 1.0, &r), 0); /* capped at 10 of its 11 */
    assert_int_equal(r.flags, 0);
    assert_true(fabs(r.capped_share - 10.0 / 11.0) < 1e-9);
    assert_int_equal(eerl_meter_energy(m, 1.05, 1.35, &r), 0);
    assert_int_equal(r.flags, 0);
    assert_true(r.capped_share == 0.0); /* read, and no GPU at its cap */
    assert_int_equal(eerl_meter_energy(m, 1.35, 1.65, &r), 0);
    assert_int_equal(r.flags, EERL_METER_SLOWED);
    assert_int_equal(r.gpu_flags[2], EERL_METER_SLOWED);
    assert_int_equal(eerl_meter_energy(m, 2.35, 2.65, &r), 0);
    assert_int_equal(r.flags, EERL_METER_LIMIT);
    assert_int_equal(r.gpu_flags[5], EERL_METER_LIMIT);
    assert_int_equal(eerl_device_throttle_reasons(DEV, 2, &mask), 0);
    assert_int_equal(mask, 0);
    assert_int_equal(eerl_device_power_limit_mw(DEV, 5, &mw), 0);
    assert_int_equal(mw, 500000);
}

/* A caller that gives no reasons and no limit (the device zeroes the readings it hands over)
 * leaves them not read: no flag and no share at the cap, as for a driver without them, never
 * "no slowdown"; one GPU whose node gives them is read. */
static void test_reasons_not_given_are_not_read(void **state)
{
    eerl_meter *m = meter_over_all();
    eerl_meter_reading r;
    uint64_t mask = 0;
    unsigned mw = 0, only3[] = {3};
    int k;

    (void)state;
    for (k = 0; k <= 10; k++) {
        REASONS[0] = EERL_THROTTLE_HW_SLOWDOWN; /* not given: STATE[0] is 0 */
        run_for(0.1);
        assert_int_equal(eerl_meter_tick(m, 0.1 * k), 0);
        if (k == 4) { /* GPU 3's node starts giving them: it was asked once, at the first tick */
            STATE[3] = 1;
            REASONS[3] = EERL_THROTTLE_HW_SLOWDOWN;
        }
    }
    assert_int_equal(eerl_meter_energy(m, 0.0, 1.0, &r), 0);
    assert_int_equal(r.flags, 0);
    assert_true(r.capped_share == -1.0); /* -1: no sample read the reasons */
    assert_int_equal(eerl_meter_energy_gpus(m, 0.0, 1.0, only3, 1, &r), 0);
    assert_true(r.capped_share == -1.0);
    assert_int_equal(eerl_device_throttle_reasons(DEV, 0, &mask), EERL_ENOTSUP);
    assert_non_null(strstr(eerl_device_last_error(DEV), "no clock event reasons"));
    assert_int_equal(eerl_device_power_limit_mw(DEV, 0, &mw), EERL_ENOTSUP);
    assert_non_null(strstr(eerl_device_last_error(DEV), "no power limit"));
}

static void test_describe_and_what_a_remote_device_refuses(void **state)
{
    unsigned clocks[4];
    size_t n = 0;
    char name[EERL_DEVICE_NAME_MAX];
    eerl_device *bare = NULL;

    (void)state;
    assert_string_equal(eerl_device_backend(DEV), "remote");
    assert_int_equal(eerl_device_supported_sm_clocks(DEV, 2, clocks, 4, &n), 0);
    assert_int_equal(n, 3);
    assert_int_equal(clocks[0], 1980); /* highest first, as every backend gives them */
    assert_int_equal(clocks[2], 345);
    assert_int_equal(eerl_device_name(DEV, 7, name, sizeof(name)), 0);
    assert_string_equal(name, "NVIDIA H100 80GB HBM3");
    assert_int_equal(eerl_device_lock_sm_clocks(DEV, 0, 1005, 1005), EERL_ENOTSUP);
    assert_non_null(strstr(eerl_device_last_error(DEV), "clock owner"));
    assert_int_equal(eerl_device_remote_describe(DEV, N, "x", "y", clocks, 3), EERL_ENODEV);
    assert_int_equal(eerl_device_open_remote(0, read_all, &CALLS, &bare), EERL_EINVAL);
    assert_null(bare);
    /* a GPU never described has no name to give */
    assert_int_equal(eerl_device_open_remote(2, read_all, &CALLS, &bare), 0);
    assert_int_equal(eerl_device_name(bare, 1, name, sizeof(name)), EERL_ESTATE);
    assert_non_null(strstr(eerl_device_last_error(bare), "remote GPU 1 was never described"));
    eerl_device_free(bare);
}

int main(void)
{
    const struct CMUnitTest all[] = {
        cmocka_unit_test_setup_teardown(test_a_mark_reads_every_gpu_in_one_call, setup, teardown),
        cmocka_unit_test_setup_teardown(test_remote_counter_faults_are_flagged, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_failed_remote_read_is_flagged, setup, teardown),
        cmocka_unit_test_setup_teardown(test_the_remote_gpus_own_slowdowns_are_flagged, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_reasons_not_given_are_not_read, setup, teardown),
        cmocka_unit_test_setup_teardown(test_describe_and_what_a_remote_device_refuses, setup,
                                        teardown),
    };

    return cmocka_run_group_tests(all, NULL, NULL);
}

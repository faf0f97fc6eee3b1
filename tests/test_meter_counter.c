/* The meter's counter model (src/meter/counter.c) and its queries (query.c), driven directly with
 * made-up readings: no device, no thread, no clock. Each test lays down counter and power
 * readings at sample times, then asks for the energy over intervals and checks it against what
 * the readings say, worked out by hand in the comments. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "eerl/error.h"
#include "eerl/meter.h"
#include "meter/counter.h"
#include "meter/query.h"

#define NO_READ (-1) /* a reading not taken: the counter or the power was not read */

static struct eerl__counter C;

static int setup(void **state)
{
    (void)state;
    assert_int_equal(eerl__counter_init(&C, 1, 64), 0);
    C.gs[0].energy_supported = 1; /* what the meter learns from its first counter read */
    C.gs[0].power_instant = 1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    eerl__counter_free(&C);
    return 0;
}

/* A sample at t: the counter read mj (NO_READ: not read this tick; another negative value: the
 * read failed with that error), power mw (NO_READ: not read). */
static void sample(double t, long long mj, long mw)
{
    struct eerl__meter_read rd;

    memset(&rd, 0, sizeof(rd));
    rd.energy_read = mj != NO_READ;
    rd.energy_r = mj == NO_READ ? EERL_ENOTSUP : mj < 0 ? (int)mj : 0;
    rd.mj = mj >= 0 ? (uint64_t)mj : 0;
    rd.power_r = mw == NO_READ ? EERL_ENOTSUP : mw < 0 ? (int)mw : 0;
    rd.mw = mw >= 0 ? (unsigned)mw : 0;
    eerl__counter_store(&C, t, &rd);
}

/* A mark's sample at t: nothing read, settled by the next counter reading. */
static void mark(double t)
{
    struct eerl__meter_read rd;

    memset(&rd, 0, sizeof(rd));
    rd.mark_only = 1;
    rd.energy_r = EERL_ENOTSUP;
    rd.power_r = EERL_ENOTSUP;
    eerl__counter_store(&C, t, &rd);
}

static double energy(double t0, double t1, unsigned *ret_flags)
{
    eerl_meter_reading out;
    double j, peak;
    unsigned fl;

    assert_int_equal(eerl__query_energy(&C, t0, t1, NULL, 1, &out, &j, &peak, &fl), 0);
    assert_true(out.total_joules == j);
    *ret_flags = fl;
    return j;
}

/* Between two counter readings the counter's energy is shared out by the power's shape: 100 W at
 * 0 s, 300 W at 1 s and 2 s integrate to 200 J and 300 J, and the counter's 500 J splits so. */
static void test_counter_energy_shared_by_power(void **state)
{
    unsigned fl;

    (void)state;
    sample(0.0, 0, 100000);
    sample(1.0, NO_READ, 300000); /* a power-only tick */
    sample(2.0, 500000, 300000);
    assert_float_equal(energy(0.0, 2.0, &fl), 500.0, 1e-9);
    assert_int_equal(fl, 0);
    assert_float_equal(energy(0.0, 1.0, &fl), 200.0, 1e-9);
    assert_float_equal(energy(1.0, 2.0, &fl), 300.0, 1e-9);
    /* Between samples acc is linear: half of the second second. */
    assert_float_equal(energy(1.0, 1.5, &fl), 150.0, 1e-9);
}

/* A mark's sample reads nothing: the power before it is held across it (200 W from 0 s to 0.5 s,
 * a trapezoid to 400 W at 1 s: 100 J and 150 J), and the counter's 300 J is split 120 / 180. */
static void test_interpolation_at_a_mark(void **state)
{
    unsigned fl;

    (void)state;
    sample(0.0, 0, 200000);
    mark(0.5);
    sample(1.0, 300000, 400000);
    assert_float_equal(energy(0.0, 0.5, &fl), 120.0, 1e-9);
    assert_int_equal(fl, 0);
    assert_float_equal(energy(0.5, 1.0, &fl), 180.0, 1e-9);
    assert_int_equal(fl, 0);
    /* Past the newest sample: extrapolated at its power, flagged partial. */
    assert_float_equal(energy(1.0, 1.5, &fl), 200.0, 1e-9);
    assert_int_equal(fl, EERL_METER_PARTIAL);
}

/* A driver reset: the counter restarts. The stretch used at least what it counted since (50 J),
 * and power says 100 J: the larger, flagged reset and power; the new value is the new base. When
 * the counter counted more than power says (150 J against 100 J), the counter's figure stands. */
static void test_reset_is_rebased(void **state)
{
    unsigned fl;

    (void)state;
    sample(0.0, 1000000, 100000);
    sample(1.0, 50000, 100000);
    sample(2.0, 150000, 100000);
    assert_float_equal(energy(0.0, 1.0, &fl), 100.0, 1e-9);
    assert_int_equal(fl, EERL_METER_RESET | EERL_METER_POWER);
    assert_float_equal(energy(1.0, 2.0, &fl), 100.0, 1e-9);
    assert_int_equal(fl, 0);
    sample(3.0, 120000, 100000); /* back again, 120 J since */
    assert_float_equal(energy(2.0, 3.0, &fl), 120.0, 1e-9);
    assert_int_equal(fl, EERL_METER_RESET);
    assert_float_equal(energy(0.0, 3.0, &fl), 320.0, 1e-9);
}

/* A counter flat for STUCK_AFTER_S (0.5 s) while the GPU draws 200 W is stuck: integrated power
 * stands in (100 J per half second), flagged stuck and power, and a flat reading before that is
 * only pending (NVML updates the counter about every 100 ms). When it moves again the stretch up
 * to there is power too, and the counter's figures count from the next reading. */
static void test_stuck_counter_falls_back_to_power(void **state)
{
    unsigned fl;

    (void)state;
    sample(0.0, 0, 200000);
    sample(0.25, 0, 200000);
    sample(0.5, 0, 200000);
    assert_float_equal(energy(0.0, 0.5, &fl), 100.0, 1e-9);
    assert_int_equal(fl, EERL_METER_STUCK | EERL_METER_POWER);
    sample(1.0, 0, 200000);
    assert_float_equal(energy(0.5, 1.0, &fl), 100.0, 1e-9);
    assert_int_equal(fl, EERL_METER_STUCK | EERL_METER_POWER);
    sample(1.5, 30000, 200000); /* moving again: 30 J, but the stretch drew 100 J */
    assert_float_equal(energy(1.0, 1.5, &fl), 100.0, 1e-9);
    assert_int_equal(fl, EERL_METER_STUCK | EERL_METER_POWER);
    sample(2.5, 230000, 200000); /* 200 J in 1 s: the counter again */
    assert_float_equal(energy(1.5, 2.5, &fl), 200.0, 1e-9);
    assert_int_equal(fl, 0);
}

/* A flat counter at 0 W is an idle GPU, not a stuck counter. */
static void test_flat_counter_at_zero_power(void **state)
{
    unsigned fl;

    (void)state;
    sample(0.0, 5000, 0);
    sample(1.0, 5000, 0);
    sample(2.0, 5000, 0);
    assert_float_equal(energy(0.0, 2.0, &fl), 0.0, 1e-12);
    assert_int_equal(fl, 0);
}

/* A failed counter read: the next good one settles the stretch, shared by power (100 W
 * throughout: half each), and the stretch is flagged missed. */
static void test_failed_read_is_interpolated_across(void **state)
{
    unsigned fl;

    (void)state;
    sample(0.0, 0, 100000);
    sample(1.0, EERL_EIO, 100000);
    sample(2.0, 240000, 100000);
    assert_float_equal(energy(0.0, 1.0, &fl), 120.0, 1e-9);
    assert_int_equal(fl, EERL_METER_MISSED);
    assert_float_equal(energy(1.0, 2.0, &fl), 120.0, 1e-9);
    assert_int_equal(fl, EERL_METER_MISSED);
}

/* Without a counter, integrated power is all there is: 100 W to 300 W over 1 s is 200 J. */
static void test_no_counter_integrates_power(void **state)
{
    unsigned fl;

    (void)state;
    C.gs[0].energy_supported = 0;
    sample(0.0, NO_READ, 100000);
    sample(1.0, NO_READ, 300000);
    assert_float_equal(energy(0.0, 1.0, &fl), 200.0, 1e-9);
    assert_int_equal(fl, EERL_METER_POWER);
}

/* A lost GPU counts nothing after its last good reading, and says so. */
static void test_lost_gpu_stops_counting(void **state)
{
    unsigned fl;

    (void)state;
    sample(0.0, 0, 100000);
    sample(1.0, 100000, 100000);
    sample(2.0, EERL_EGPULOST, EERL_EGPULOST);
    sample(3.0, NO_READ, 100000); /* whatever comes later */
    assert_float_equal(energy(0.0, 1.0, &fl), 100.0, 1e-9);
    assert_int_equal(fl, 0);
    assert_float_equal(energy(1.0, 3.0, &fl), 0.0, 1e-12);
    assert_int_equal(fl, EERL_METER_LOST);
}

/* Only the history kept can be asked about: older is no data; a span starting before the first
 * sample counts from it and is partial. */
static void test_history_bounds(void **state)
{
    eerl_meter_reading out;
    double j, peak;
    unsigned fl;
    int k;

    (void)state;
    for (k = 0; k < 100; k++) /* 100 samples in a ring of 64 */
        sample(k, (long long)k * 100000, 100000);
    assert_int_equal(eerl__query_energy(&C, 10.0, 50.0, NULL, 1, &out, &j, &peak, &fl),
                     EERL_ENODATA);
    assert_float_equal(energy(36.0, 99.0, &fl), 6300.0, 1e-9);
    assert_int_equal(fl, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_counter_energy_shared_by_power, setup, teardown),
        cmocka_unit_test_setup_teardown(test_interpolation_at_a_mark, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reset_is_rebased, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stuck_counter_falls_back_to_power, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flat_counter_at_zero_power, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_read_is_interpolated_across, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_counter_integrates_power, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lost_gpu_stops_counting, setup, teardown),
        cmocka_unit_test_setup_teardown(test_history_bounds, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

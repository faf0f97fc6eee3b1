/* Internal: the table a device backend fills in. eerl_device (device.c) owns the backend's impl
 * pointer and frees it through ops->free. Backends (nvml.c, the twin) must not know about each
 * other; callers must not reach an impl except through eerl_device_* functions. */
#ifndef EERL_DEVICE_IMPL_H
#define EERL_DEVICE_IMPL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "eerl/device.h"

/* What a read (eerl__device_read) asks of one GPU: any of these parts. */
#define EERL__READ_ENERGY 0x1u /* the energy counter */
#define EERL__READ_POWER 0x2u  /* power: averaged */
#define EERL__READ_POWER_INSTANT                                                                   \
    0x4u                         /* power: instantaneous where the backend has it, else as POWER */
#define EERL__READ_CLOCK 0x8u    /* the SM clock */
#define EERL__READ_REASONS 0x10u /* the clock event reasons */
#define EERL__READ_LIMIT 0x20u   /* the enforced power limit */

/* One GPU's part of a read: the caller sets gpu and want; eerl__device_read sets every *_r to
 * EERL_ENOTSUP and power_instant to -1 before the backend fills what was asked (it may fill more:
 * a caller uses only what it asked for). Each *_r is 0 or that part's EERL_E* (EERL_ENOTSUP: the
 * backend or the driver has none). A part that finds the GPU lost (EERL_EGPULOST) ends its read:
 * the parts not read yet say EERL_EGPULOST too. */
struct eerl__device_read {
    unsigned gpu;
    unsigned want; /* EERL__READ_* */
    int energy_r, power_r, clock_r, reasons_r, limit_r;
    int power_instant; /* with POWER_INSTANT: 1 power_mw is instantaneous, 0 the backend has none
                        * (power_mw is averaged), -1 not known (the instantaneous read failed) */
    uint64_t energy_mj;
    unsigned power_mw;
    unsigned sm_mhz;
    uint64_t reasons; /* EERL_THROTTLE_* bits */
    unsigned limit_mw;
};

/* Each op gets the device handle, so it can record eerl__device_fail() text and reach its own
 * state through eerl__device_impl(dev). The index is already checked against count. */
struct eerl__device_ops {
    const char *backend;
    int (*count)(eerl_device *dev, unsigned *ret_count);
    int (*name)(eerl_device *dev, unsigned gpu, char *buf, size_t len);
    int (*uuid)(eerl_device *dev, unsigned gpu, char *buf, size_t len);
    int (*supported_sm_clocks)(eerl_device *dev, unsigned gpu, unsigned *mhz, size_t cap,
                               size_t *ret_n);
    int (*sm_clock)(eerl_device *dev, unsigned gpu, unsigned *ret_mhz);
    int (*energy_mj)(eerl_device *dev, unsigned gpu, uint64_t *ret_mj);
    int (*power_mw)(eerl_device *dev, unsigned gpu, unsigned *ret_mw);
    int (*throttle_reasons)(eerl_device *dev, unsigned gpu, uint64_t *ret_mask); /* may be NULL */
    int (*lock_sm_clocks)(eerl_device *dev, unsigned gpu, unsigned min_mhz, unsigned max_mhz);
    int (*reset_sm_clocks)(eerl_device *dev, unsigned gpu);
    void (*free)(void *impl);
    /* Instantaneous power (not averaged), mW; may be NULL (eerl_device_power_instant_mw then
     * says EERL_ENOTSUP). Last, so backends that initialise by name leave it NULL. */
    int (*power_instant_mw)(eerl_device *dev, unsigned gpu, unsigned *ret_mw);
    /* The driver's version; may be NULL (EERL_ENOTSUP). */
    int (*driver_version)(eerl_device *dev, char *buf, size_t len);
    /* Reads rd[0..n-1] at one instant, every part asked of each (their GPUs checked: an entry
     * whose want is 0 is skipped): one call of the backend for what would be a call per part and
     * GPU (eerld: one round trip; remote.c: one snapshot). May be NULL (NVML, whose calls are
     * separate whatever the op: no round trip to save): eerl__device_read then calls the ops
     * above, part by part. */
    int (*read)(eerl_device *dev, struct eerl__device_read *rd, size_t n);
    /* The power limit the driver enforces now, mW; may be NULL (EERL_ENOTSUP). */
    int (*power_limit_mw)(eerl_device *dev, unsigned gpu, unsigned *ret_mw);
};

/* Wraps a backend. On success the device owns impl; on failure the caller still does. */
int eerl__device_new(const struct eerl__device_ops *ops, void *impl, eerl_device **ret_dev);

/* For backends: record what a failing call was doing (printf-style), returns err unchanged so a
 * backend can write `return eerl__device_fail(dev, EERL_ENVML, "...", ...)`. */
int eerl__device_fail(eerl_device *dev, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Reads what rd[i].want asks of GPU rd[i].gpu, for i in 0..n-1, at one instant (the meter's
 * tick): through the backend's read op, else op by op. A bad index fails that entry's parts with
 * EERL_ENODEV (and clears its want). Returns 0, or EERL_EINVAL for a bad argument; a part that
 * fails says so in its
 * *_r (and the device's last error). */
int eerl__device_read(eerl_device *dev, struct eerl__device_read *rd, size_t n);

/* For backends' read ops: every part of x that is asked for and in parts fails with err. */
void eerl__device_read_fail(struct eerl__device_read *x, unsigned parts, int err);

/* The impl a backend gave eerl__device_new, for backends that need their own handle back. */
void *eerl__device_impl(eerl_device *dev);

#endif

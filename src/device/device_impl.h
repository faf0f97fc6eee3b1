/* Internal: the table a device backend fills in. eerl_device (device.c) owns the backend's impl
 * pointer and frees it through ops->free. Backends (nvml.c, the twin) must not know about each
 * other; callers must not reach an impl except through eerl_device_* functions. */
#ifndef EERL_DEVICE_IMPL_H
#define EERL_DEVICE_IMPL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "eerl/device.h"

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
    /* Reads every GPU at once; the reads that follow, up to the next snapshot, return what it
     * read. For a backend whose reads cost a round trip each (remote.c). May be NULL: every read
     * then goes to the GPU. */
    int (*snapshot)(eerl_device *dev);
    /* The power limit the driver enforces now, mW; may be NULL (EERL_ENOTSUP). */
    int (*power_limit_mw)(eerl_device *dev, unsigned gpu, unsigned *ret_mw);
};

/* Wraps a backend. On success the device owns impl; on failure the caller still does. */
int eerl__device_new(const struct eerl__device_ops *ops, void *impl, eerl_device **ret_dev);

/* For backends: record what a failing call was doing (printf-style), returns err unchanged so a
 * backend can write `return eerl__device_fail(dev, EERL_ENVML, "...", ...)`. */
int eerl__device_fail(eerl_device *dev, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Called by a reader (the meter) before a batch of reads of one instant: one read of every GPU
 * where the backend has a snapshot op, else nothing. 0 or the snapshot's error (its reads then
 * fail with it too). */
int eerl__device_snapshot(eerl_device *dev);

/* The impl a backend gave eerl__device_new, for backends that need their own handle back. */
void *eerl__device_impl(eerl_device *dev);

#endif

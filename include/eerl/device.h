/* The device interface: a set of GPUs behind one backend (NVML, or the simulated cluster).
 * Every GPU call in eerl goes through these functions; every one returns 0 or an EERL_E* code
 * and leaves its ret_ outputs untouched on failure. GPUs are addressed by index 0..count-1. */
#ifndef EERL_DEVICE_H
#define EERL_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "eerl/export.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct eerl_device eerl_device;

#define EERL_DEVICE_NAME_MAX 96
#define EERL_DEVICE_UUID_MAX 96
/* More than any GPU reports (the H200 lists 110 SM clocks at its top memory clock). */
#define EERL_DEVICE_CLOCKS_MAX 512

/* Throttle reasons, bit for bit NVML's nvmlClocksEventReasons. */
#define EERL_THROTTLE_GPU_IDLE 0x1ull
#define EERL_THROTTLE_APP_CLOCKS 0x2ull
#define EERL_THROTTLE_SW_POWER_CAP 0x4ull
#define EERL_THROTTLE_HW_SLOWDOWN 0x8ull
#define EERL_THROTTLE_SYNC_BOOST 0x10ull
#define EERL_THROTTLE_SW_THERMAL 0x20ull
#define EERL_THROTTLE_HW_THERMAL 0x40ull
#define EERL_THROTTLE_HW_POWER_BRAKE 0x80ull
#define EERL_THROTTLE_DISPLAY_CLOCKS 0x100ull

/* Opens the NVIDIA driver through NVML. The library is loaded with dlopen: $EERL_NVML_LIBRARY if
 * set, else libnvidia-ml.so.1, else libnvidia-ml.so. Returns EERL_ENODRIVER when none loads. */
EERL_EXPORT int eerl_device_open_nvml(eerl_device **ret_dev);
/* The same, and on failure writes into why (if not NULL) what went wrong for a person to read:
 * the library path and dlerror(), the missing symbol, or nvmlInit's message. There is no handle
 * yet to carry that text, hence the buffer. */
EERL_EXPORT int eerl_device_open_nvml_ex(char *why, size_t why_len, eerl_device **ret_dev);

/* A device whose GPUs are read by the caller: the GPUs of other nodes, which a session across
 * nodes reaches through its framework's engine (python/eerl/multinode.py). The device is GPUs
 * 0..count-1; each is described once (eerl_device_remote_describe) before the device is used.
 * Reads go through one callback that reads every GPU at once: a reader (the meter) asks for one
 * snapshot per instant it reads, so a phase boundary costs one call, whatever the GPU count;
 * each GPU's reading carries its clock event reasons and power limit where the caller gives them.
 * Clocks are not set through this device (EERL_ENOTSUP): a session over it is given a clock
 * owner (eerl_rt_config.owner) that sets them where the GPUs are. */
typedef struct eerl_device_reading {
    int err; /* 0, or this GPU's EERL_E* (EERL_EGPULOST, EERL_ENOTSUP: no energy counter) */
    uint64_t energy_mj;
    unsigned power_mw;
    unsigned sm_mhz;
    /* What the GPU decided about its own speed, where the node read it (eerld's read carries
     * both): optional. The device hands the callback zeroed readings, so a caller that fills
     * neither leaves them "not read": the meter then flags no slowdown and gives no share at the
     * power cap, as for a driver without them, rather than reading "no slowdown". */
    int has_reasons;   /* 1: reasons holds the GPU's clock event reasons */
    unsigned limit_mw; /* the enforced power limit, mW; 0: not read */
    uint64_t reasons;  /* EERL_THROTTLE_* bits (NVML's clock event reasons), with has_reasons */
} eerl_device_reading;

/* Reads GPUs 0..n-1 into ret[0..n-1]. Returns 0, or an EERL_E* when nothing could be read (every
 * read of that snapshot then fails with it). Called on the thread that reads the meter: the
 * session's caller, as the session's meter runs without a sampler thread over such a device. */
typedef int (*eerl_device_read_fn)(void *ctx, eerl_device_reading *ret, size_t n);

/* Opens a remote device of count GPUs (1 to 2^20, the most a meter takes) read through read(ctx,
 * ...). The device borrows ctx. */
EERL_EXPORT int eerl_device_open_remote(unsigned count, eerl_device_read_fn read, void *ctx,
                                        eerl_device **ret_dev);

/* Describes GPU gpu of a remote device: its model name, UUID and supported SM clocks (n_clocks,
 * 1 to EERL_DEVICE_CLOCKS_MAX, any order; kept highest first). Strings longer than the device
 * keeps (EERL_DEVICE_NAME_MAX, EERL_DEVICE_UUID_MAX) are EERL_EOVERFLOW. EERL_EINVAL on a device
 * of another backend. */
EERL_EXPORT int eerl_device_remote_describe(eerl_device *dev, unsigned gpu, const char *name,
                                            const char *uuid, const unsigned *clocks,
                                            size_t n_clocks);

/* Closes the backend. Does not reset clocks: that is the actuator's job. NULL is a no-op. */
EERL_EXPORT void eerl_device_free(eerl_device *dev);

/* "nvml", "twin", ... */
EERL_EXPORT const char *eerl_device_backend(const eerl_device *dev);

/* What the last failing call on this handle was doing, with values ("nvmlDeviceGetHandleByIndex
 * (gpu 9): Invalid Argument"); "" when nothing has failed. Owned by the handle, valid until the
 * next call on it. Not thread-safe across calls on one handle. */
EERL_EXPORT const char *eerl_device_last_error(const eerl_device *dev);

EERL_EXPORT int eerl_device_count(eerl_device *dev, unsigned *ret_count);
EERL_EXPORT int eerl_device_name(eerl_device *dev, unsigned gpu, char *buf, size_t len);
EERL_EXPORT int eerl_device_uuid(eerl_device *dev, unsigned gpu, char *buf, size_t len);

/* Supported SM clocks at the highest supported memory clock, highest first. ret_n receives the
 * number written; EERL_EOVERFLOW if cap is too small. */
EERL_EXPORT int eerl_device_supported_sm_clocks(eerl_device *dev, unsigned gpu, unsigned *mhz,
                                                size_t cap, size_t *ret_n);

/* The SM clock the GPU runs at now. */
EERL_EXPORT int eerl_device_sm_clock(eerl_device *dev, unsigned gpu, unsigned *ret_mhz);

/* Total energy since the driver was loaded, in millijoules (NVML's counter). */
EERL_EXPORT int eerl_device_energy_mj(eerl_device *dev, unsigned gpu, uint64_t *ret_mj);

/* Power draw in milliwatts (NVML's averaged reading). */
EERL_EXPORT int eerl_device_power_mw(eerl_device *dev, unsigned gpu, unsigned *ret_mw);

/* Instantaneous power draw in milliwatts (NVML's NVML_FI_DEV_POWER_INSTANT field: on Ampere and
 * newer eerl_device_power_mw is a 1 s average). EERL_ENOTSUP where the backend or driver has none:
 * use eerl_device_power_mw then. */
EERL_EXPORT int eerl_device_power_instant_mw(eerl_device *dev, unsigned gpu, unsigned *ret_mw);

/* The driver's version ("580.159.04"; NVML's nvmlSystemGetDriverVersion) into buf (len bytes,
 * EERL_EOVERFLOW when too small). EERL_ENOTSUP where the backend has no driver (the twin,
 * eerld's view) or the driver does not say. */
EERL_EXPORT int eerl_device_driver_version(eerl_device *dev, char *buf, size_t len);

/* Current throttle reasons (EERL_THROTTLE_* bits; NVML calls them clock event reasons);
 * EERL_ENOTSUP where the driver has none. */
EERL_EXPORT int eerl_device_throttle_reasons(eerl_device *dev, unsigned gpu, uint64_t *ret_mask);

/* The power limit the driver enforces now, in milliwatts (NVML's nvmlDeviceGetEnforcedPowerLimit:
 * the lowest of what an operator, a power manager and the board set). Read only. EERL_ENOTSUP
 * where the backend or the driver has none. */
EERL_EXPORT int eerl_device_power_limit_mw(eerl_device *dev, unsigned gpu, unsigned *ret_mw);

/* Locks the SM clock into [min_mhz, max_mhz]. Changes the card: only the actuator calls this. */
#ifdef EERL_EXPERIMENTAL /* eerl's own tools: libeerl.a only */
int eerl_device_lock_sm_clocks(eerl_device *dev, unsigned gpu, unsigned min_mhz, unsigned max_mhz);
#endif

/* Undoes any SM clock lock: the default governor takes over again. */
#ifdef EERL_EXPERIMENTAL /* eerl's own tools: libeerl.a only */
int eerl_device_reset_sm_clocks(eerl_device *dev, unsigned gpu);
#endif

#ifdef __cplusplus
}
#endif
#endif

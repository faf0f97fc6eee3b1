/* The clock actuator: the one place in a process that changes GPU SM clocks. It snaps requests
 * to clocks the GPU supports, writes only when the value changes, remembers every GPU it touched
 * and resets them all (nvmlDeviceResetGpuLockedClocks) on eerl_actuator_restore, on
 * eerl_actuator_free, at normal process exit (atexit), and when the program calls
 * eerl_actuator_restore_all() after a signal. In observe-only mode it records what it would
 * have done and never calls a setter.
 *
 * Ownership: the actuator borrows the device handle, which must stay open until
 * eerl_actuator_free (or process exit, when the atexit restore uses it). Every call on one
 * actuator is serialized by its own mutex; live actuators sit in a process-wide registry.
 *
 * Fork: an actuator belongs to the process that created it. In a forked child, calls that set,
 * restore or read it fail with EERL_ESTATE, eerl_actuator_free frees memory only and the atexit
 * restore skips it: a child never resets or changes its parent's GPUs. */
#ifndef EERL_ACTUATOR_H
#define EERL_ACTUATOR_H

#include <stddef.h>

#include "eerl/device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct eerl_actuator eerl_actuator;

/* What the actuator did (or, observe-only, would have done) to one GPU. */
typedef struct eerl_actuator_gpu_state {
    int touched;             /* a lock was written (would have been) since the last restore */
    unsigned requested_mhz;  /* the last request's upper clock (0: none) */
    unsigned locked_min_mhz; /* the range locked now (0, 0: not locked) */
    unsigned locked_max_mhz;
    unsigned long writes;   /* lock writes made (would have been made) */
    unsigned long resets;   /* resets made (would have been made) */
    unsigned long requests; /* set calls that got through validation */
} eerl_actuator_gpu_state;

/* observe_only != 0: never calls a setter, only records. */
int eerl_actuator_new(eerl_device *dev, int observe_only, eerl_actuator **ret);

/* Restores every touched GPU, then frees. NULL is a no-op. */
void eerl_actuator_free(eerl_actuator *a);

/* The clock a request snaps to: the highest supported SM clock not above mhz. A request outside
 * [lowest, highest] supported is EERL_ERANGE (the detail, with the range, is in
 * eerl_actuator_last_error), so the result is never below the lowest clock. */
int eerl_actuator_snap(eerl_actuator *a, unsigned gpu, unsigned mhz, unsigned *ret_mhz);

/* Locks gpu's SM clock at snap(mhz) (min = max). Writes only when that differs from what is
 * locked now. */
int eerl_actuator_set(eerl_actuator *a, unsigned gpu, unsigned mhz);

/* Locks gpu's SM clock into [snap(min_mhz), snap(max_mhz)] (EERL_EINVAL if min_mhz > max_mhz).
 * Writes only when the range changes. One NVML call sets both bounds, so min <= max holds at
 * every instant. */
int eerl_actuator_set_range(eerl_actuator *a, unsigned gpu, unsigned min_mhz, unsigned max_mhz);

/* Resets every GPU touched since the last restore and forgets them. Tries every GPU even when
 * one fails; returns the first error. */
int eerl_actuator_restore(eerl_actuator *a);

/* Restores every live actuator in the process. For a program's signal handling: call it from
 * the main loop after the handler has set a flag (it takes mutexes and calls NVML, so it is NOT
 * async-signal-safe and must not be called from a signal handler). Returns the first error. */
int eerl_actuator_restore_all(void);

/* What the actuator did (would have done) to gpu; zeros for a GPU it never saw. */
int eerl_actuator_gpu(eerl_actuator *a, unsigned gpu, eerl_actuator_gpu_state *ret);

int eerl_actuator_observe_only(const eerl_actuator *a);

/* Detail of the last failing call on this actuator ("requested 5000 MHz is outside GPU 0's
 * supported SM clocks 345-1980 MHz"); "" if none. Valid until the next call on it. */
const char *eerl_actuator_last_error(eerl_actuator *a);

#ifdef __cplusplus
}
#endif
#endif

/* eerl doctor: what a user needs to know before the first run on a node, as a list of checks,
 * each ok, warning or error with what was found (the values) and what to do. The checks: the
 * library's version; NVML loads ($EERL_NVML_LIBRARY honoured); the driver's version; each GPU
 * with its UUID, supported SM clock range and current clock; eerld (the socket a session would
 * use, whether it answers, its version, whether its policy lets this uid lease); and whether a
 * controlling run may lock clocks (root, CAP_SYS_ADMIN, or an eerld that leases to it).
 *
 * The library gathers the checks and never prints; `eerl doctor` and `python -m eerl doctor`
 * print them (docs/doctor.md says what each checks and what to do). Read-only: no clock is
 * changed and no GPU is leased. An error means a controlling run on this node would fail. */
#ifndef EERL_DOCTOR_H
#define EERL_DOCTOR_H

#include <stddef.h>

#include "eerl/export.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum eerl_doctor_level {
    EERL_DOCTOR_OK = 0,
    EERL_DOCTOR_WARNING = 1,
    EERL_DOCTOR_ERROR = 2
} eerl_doctor_level;

#define EERL_DOCTOR_NAME_MAX 32
#define EERL_DOCTOR_TEXT_MAX 384
/* Enough for every check of a node of 1024 GPUs (one line per GPU, plus the node's own). */
#define EERL_DOCTOR_CHECKS_MAX 1056

struct eerl_doctor_check {
    char name[EERL_DOCTOR_NAME_MAX];    /* "library", "nvml", "driver", "gpus", "gpu 0", "eerld",
                                           "eerld lease", "permission" */
    eerl_doctor_level level;            /* int-sized */
    char message[EERL_DOCTOR_TEXT_MAX]; /* what was found, with the values */
    char fix[EERL_DOCTOR_TEXT_MAX];     /* what to do about it; "" when there is nothing to do */
};

/* Runs the checks in this process (its uid, capabilities and environment). socket: eerld's
 * socket; NULL: the one a session would use ($EERL_SOCKET, else the default socket when it
 * exists, else none). Writes the checks in order into out; *ret_n receives their number.
 * EERL_EOVERFLOW when cap is too small (out then holds the first cap checks; use
 * EERL_DOCTOR_CHECKS_MAX). The checks' own failures are checks, not return codes. */
EERL_EXPORT int eerl_doctor_run(const char *socket, struct eerl_doctor_check *out, size_t cap,
                                size_t *ret_n);

/* "ok", "warning", "error". */
#ifdef EERL_EXPERIMENTAL /* eerl's own tools: libeerl.a only */
const char *eerl_doctor_level_name(eerl_doctor_level level);
#endif

#ifdef __cplusplus
}
#endif
#endif

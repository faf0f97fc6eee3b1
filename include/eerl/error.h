/* Error codes: every eerl function returns 0 or one of these negative codes. The list is one
 * X-macro so the enum and eerl_strerror() cannot drift apart. NVML status codes are mapped into
 * this range by the NVML backend. There is no global "last error". */
#ifndef EERL_ERROR_H
#define EERL_ERROR_H

#include "eerl/export.h"

/* X(name, value, message) */
#define EERL_ERRNO_MAP(X)                                                                          \
    X(EINVAL, -1, "invalid argument")                                                              \
    X(ENOMEM, -2, "out of memory")                                                                 \
    X(ENODRIVER, -3, "no NVIDIA driver: libnvidia-ml.so.1 not found")                              \
    X(ENOSYM, -4, "the NVIDIA driver library lacks a required NVML function")                      \
    X(ENOPERM, -5,                                                                                 \
      "locking clocks needs root or CAP_SYS_ADMIN: run as root, lease the GPU from eerld, "        \
      "or use observe-only mode")                                                                  \
    X(ENOTSUP, -6, "not supported by this GPU or driver")                                          \
    X(ENODEV, -7, "no such GPU index")                                                             \
    X(EGPULOST, -8, "the GPU has fallen off the bus or is lost")                                   \
    X(ERANGE, -9, "value outside the supported range")                                             \
    X(EIO, -10, "input/output error")                                                              \
    X(EBUSY, -11, "resource busy")                                                                 \
    X(ETIMEDOUT, -12, "timed out")                                                                 \
    X(ENVML, -13, "NVML reported an unexpected error")                                             \
    X(EUNINIT, -14, "NVML is not initialized")                                                     \
    X(ESTATE, -15, "operation not valid in the current state")                                     \
    X(EPARSE, -16, "malformed input")                                                              \
    X(ENOENT, -17, "not found")                                                                    \
    X(ENODATA, -18, "no data for the requested interval")                                          \
    X(EOVERFLOW, -19, "buffer too small")                                                          \
    X(ESYS, -20, "system call failed")                                                             \
    X(EVERSION, -21, "incompatible version")                                                       \
    X(EUNSAFE, -22,                                                                                \
      "refused: another user could replace or link this file (a directory others can write)")      \
    X(EEXIST, -23, "the file exists already and is not this session's to overwrite")

typedef enum eerl_errno {
#define EERL__ERR_ENUM(name, value, msg) EERL_##name = (value),
    EERL_ERRNO_MAP(EERL__ERR_ENUM)
#undef EERL__ERR_ENUM
} eerl_errno;

#ifdef __cplusplus
extern "C" {
#endif

/* A static English message for an eerl error code; "unknown error" for anything else. */
EERL_EXPORT const char *eerl_strerror(int err);
/* The code's symbolic name ("EERL_EINVAL"), for logs and traces. */
EERL_EXPORT const char *eerl_err_name(int err);

#ifdef __cplusplus
}
#endif
#endif

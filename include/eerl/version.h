/* eerl version: one place for the numbers, a function for the library actually loaded.
 * The Python binding refuses a library of another major version, and one whose
 * eerl_abi_version() is not exactly the ABI its ctypes mirrors were written for. */
#ifndef EERL_VERSION_H
#define EERL_VERSION_H

#include "eerl/export.h"

#define EERL_VERSION_MAJOR 0
#define EERL_VERSION_MINOR 3
#define EERL_VERSION_PATCH 0
#define EERL_VERSION_HEX                                                                           \
    ((EERL_VERSION_MAJOR << 16) | (EERL_VERSION_MINOR << 8) | EERL_VERSION_PATCH)
#define EERL_VERSION_STRING "0.3.0"
/* The C ABI: raised on every change a caller built against another header could misread (a
 * public struct's size or fields, a function's signature, a function removed), and every such
 * change raises the version too (the minor version before 1.0; CHANGELOG.md says so). A release
 * that only adds functions keeps it. Libraries without eerl_abi_version() are ABI 1. */
#define EERL_ABI_VERSION 2

#ifdef __cplusplus
extern "C" {
#endif

/* EERL_VERSION_HEX of the library that is loaded (may differ from the header compiled against). */
EERL_EXPORT unsigned eerl_version(void);
/* "MAJOR.MINOR.PATCH" of the loaded library. */
EERL_EXPORT const char *eerl_version_string(void);
/* EERL_ABI_VERSION of the loaded library. */
EERL_EXPORT unsigned eerl_abi_version(void);

#ifdef __cplusplus
}
#endif
#endif

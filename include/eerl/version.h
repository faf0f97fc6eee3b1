/* eerl version: one place for the numbers, a function for the library actually loaded.
 * The Python binding compares eerl_version() against its own major and refuses another. */
#ifndef EERL_VERSION_H
#define EERL_VERSION_H

#include "eerl/export.h"

#define EERL_VERSION_MAJOR 0
#define EERL_VERSION_MINOR 2
#define EERL_VERSION_PATCH 0
#define EERL_VERSION_HEX                                                                           \
    ((EERL_VERSION_MAJOR << 16) | (EERL_VERSION_MINOR << 8) | EERL_VERSION_PATCH)
#define EERL_VERSION_STRING "0.2.0"

#ifdef __cplusplus
extern "C" {
#endif

/* EERL_VERSION_HEX of the library that is loaded (may differ from the header compiled against). */
EERL_EXPORT unsigned eerl_version(void);
/* "MAJOR.MINOR.PATCH" of the loaded library. */
EERL_EXPORT const char *eerl_version_string(void);

#ifdef __cplusplus
}
#endif
#endif

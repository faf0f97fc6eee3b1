/* Symbol visibility: the shared library is built with -fvisibility=hidden and exports only what
 * carries EERL_EXPORT. Internal non-static names start with eerl__ and are never exported. */
#ifndef EERL_EXPORT_H
#define EERL_EXPORT_H

#if defined(EERL_BUILDING_SHARED) && defined(__GNUC__)
#define EERL_EXPORT __attribute__((visibility("default")))
#else
#define EERL_EXPORT
#endif

#endif

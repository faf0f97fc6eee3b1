/* Injected clocks: every component that needs "now" takes an eerl_clock_fn and a context pointer
 * instead of reading the wall clock itself, so the simulated cluster can run in virtual time. */
#ifndef EERL_CLOCK_H
#define EERL_CLOCK_H

#include "eerl/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Returns the current time in seconds. The origin is the clock's own; only differences and
 * ordering matter. Must never go backwards. */
typedef double (*eerl_clock_fn)(void *ctx);

/* Real time: CLOCK_MONOTONIC in seconds (ctx is ignored). Async-signal-safe. */
EERL_EXPORT double eerl_clock_monotonic(void *ctx);

#ifdef __cplusplus
}
#endif
#endif

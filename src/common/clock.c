/* The real-time clock behind eerl_clock_fn. Owns nothing; virtual clocks live with their users. */
#include <time.h>

#include "eerl/clock.h"

double eerl_clock_monotonic(void *ctx)
{
    struct timespec ts;

    (void)ctx;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

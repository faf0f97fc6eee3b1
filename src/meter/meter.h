/* Internal header of the meter module: the public API is include/eerl/meter.h; nothing else in
 * the library reaches into the meter's ring or per-GPU bookkeeping. */
#ifndef EERL__METER_H
#define EERL__METER_H

#include "eerl/meter.h"

/* Stores a sample at t that reads nothing (what the sampler thread stores for a mark before it
 * reads the counters), in virtual time: for the tests of how such a sample is settled. t must be
 * after the newest sample (EERL_EINVAL otherwise, or with no sample yet). */
int eerl__meter_mark_sample(eerl_meter *m, double t);

#endif

/* The meter's queries over its ring (counter.h): the energy each GPU used between two times,
 * acc(t1) - acc(t0) with acc interpolated linearly between samples and extrapolated at the last
 * power past the newest, the flags of every sample interval the span overlaps, and the peaks of
 * the samples inside it. Pure: the caller holds the ring's lock. Owns nothing. */
#ifndef EERL__METER_QUERY_H
#define EERL__METER_QUERY_H

#include <stddef.h>

#include "eerl/meter.h"
#include "meter/counter.h"

/* Per GPU of a query (joules, peak_w, gflags: n entries each) and the totals into *out (its
 * per-GPU arrays are left to the caller). pos: the GPUs' positions in the ring, NULL for every
 * GPU in order. EERL_ENODATA: no sample, or the span is older than the history kept or all
 * before the first sample. */
int eerl__query_energy(const struct eerl__counter *c, double t0, double t1, const size_t *pos,
                       size_t n, eerl_meter_reading *out, double *joules, double *peak_w,
                       unsigned *gflags);

#endif

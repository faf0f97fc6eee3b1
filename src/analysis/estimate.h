/* `eerl analyze TRACE` on one trace: the run's own estimate of what eerl saved (eerl/estimate.h),
 * from the per-update records the session wrote on its update lines (trace format 2), summed by
 * the same aggregator the session used (core/estimate.c). A trace without them (format 1, or a
 * line without one) has them recomputed from its observations by the same forward predictor, in
 * trace order, so an old observe-only trace gets the same self-check. Reads; prints nothing. */
#ifndef EERL_ANALYSIS_ESTIMATE_H
#define EERL_ANALYSIS_ESTIMATE_H

#include <stddef.h>

#include "core/estimate.h"

struct eerl__an_est {
    struct eerl__est_acc acc;      /* the totals (eerl__est_acc_result gives the estimate) */
    size_t lines;                  /* update lines read */
    size_t recorded;               /* of them, with the session's own record */
    size_t recomputed;             /* of them, recomputed here */
    int has_unexplained;           /* the trace has an "unexplained" line (acc is marked) */
    int has_summary;               /* the trace has a closing "estimate" line */
    unsigned long long counted_to; /* the last update counted */
};

/* Reads the trace at path into ret. EERL_ESYS / EERL_EPARSE / EERL_EVERSION with why naming the
 * file and line; a last line cut short (no newline, not JSON) is left out. */
int eerl__an_estimate(const char *path, struct eerl__an_est *ret, char *why, size_t len);

#endif

/* The estimate's lines in a trace (docs/trace-format.md, version 2): the "estimate" object of an
 * update line (one update's forward governor prediction, core/estimate.h's struct eerl__est_upd)
 * and the closing "estimate" line (the run's totals, eerl/estimate.h). Writing and reading; owns
 * no state. */
#ifndef EERL_TRACE_ESTIMATE_LINE_H
#define EERL_TRACE_ESTIMATE_LINE_H

#include <stddef.h>

#include <jansson.h>

#include "eerl/estimate.h"
#include "eerl/tools/trace.h"
#include "core/estimate.h"

/* The update line's "estimate" object (new reference). */
json_t *eerl__trace_est_json(const struct eerl__est_upd *u);
/* What a record one update late (its "update" key: the asynchronous modes) is about: the update
 * line before it, its update number and measured time and energy (NaN for a refused one). */
struct eerl__trace_est_prev {
    unsigned long long update;
    double t, e;
    int have;
};
/* Reads the "estimate" object of update (or gap) line o: 0 with *ret, 1 when the line has none
 * (a trace of version 1), EERL_EPARSE with why. The measured time and energy are the line's own,
 * or, for a record one update late, prev's (which must be the update it names unless it counts
 * nothing). */
int eerl__trace_est_parse(json_t *o, const struct eerl__trace_est_prev *prev,
                          struct eerl__est_upd *ret, char *why, size_t len);
/* The closing line {"type":"estimate", ...} after update `update`, malloc'd. */
int eerl__trace_est_summary_line(const eerl_estimate *est, unsigned long long update,
                                 char **ret_line);

#endif

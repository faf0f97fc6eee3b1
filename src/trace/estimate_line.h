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
/* Reads the "estimate" object of update line o (its time_s and energy_j are the measured ones):
 * 0 with *ret, 1 when the line has none (a trace of version 1), EERL_EPARSE with why. */
int eerl__trace_est_parse(json_t *o, struct eerl__est_upd *ret, char *why, size_t len);
/* The closing line {"type":"estimate", ...} after update `update`, malloc'd. */
int eerl__trace_est_summary_line(const eerl_estimate *est, unsigned long long update,
                                 char **ret_line);

#endif

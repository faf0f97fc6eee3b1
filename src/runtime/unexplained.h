/* When the work does not explain the time (docs/runtime.md): what the governor predictor leaves
 * of the update time unexplained once the controller has calibrated it, and what that means for
 * the controller's trials. The predictor judges every clock change by the time it predicts for
 * the governor at the update's work (G, N, L); where the time follows something else (generation
 * bound by the host: a framework decoding token by token in Python instead of an engine), a trial
 * would need more updates than the controller gives one to tell a loss of the allowance from the
 * scatter, and the run should be told so, once.
 *
 * The session measures once, after the update at which its controller calibrated (a CALIBRATED
 * event), and, when it is too much, writes an "unexplained" trace line and raises a notice
 * (eerl_rt_notice); `eerl analyze` measures a trace the same way by replaying its controller to
 * that update (eerl_trace_measure_unexplained), so both show the same figure. The measure reads the
 * controller's references and fit options and refits the predictor on them: deterministic, no
 * I/O, and it changes nothing the controller decides (replays stay exact). Owns nothing; borrows
 * the controller. The result, its message and the measure of a trace are declared in
 * eerl/tools/trace.h (for `eerl analyze`); the session's side is here. */
#ifndef EERL_RUNTIME_UNEXPLAINED_H
#define EERL_RUNTIME_UNEXPLAINED_H

#include <stddef.h>

#include "eerl/core.h"
#include "eerl/tools/trace.h"

/* Fewest references the measure takes (each left out once). */
#define EERL__UNEXPL_MIN_REFS 5

/* The longest trial eerl's own strategy gives a setting (judge/eerl.c): a run needing more
 * updates than this per trial is one whose time the work does not explain well enough for any
 * of eerl's strategies to judge clock changes (the paper's trials take 3). */
#define EERL__UNEXPL_TRIAL_MAX 12

/* Measures on ctl's references (after its calibration). EERL_EINVAL for a NULL argument,
 * EERL_ENODATA when fewer than EERL__UNEXPL_MIN_REFS references or folds are there, EERL_ENOMEM.
 * ret->update is left to the caller. */
int eerl__unexpl_measure(const eerl_ctl *ctl, struct eerl_trace_unexplained *ret);
/* The trace's "unexplained" line (docs/trace-format.md) for u and its message, malloc'd. */
int eerl__unexpl_line(const struct eerl_trace_unexplained *u, const char *message, char **ret_line);
/* Reads a trace's "unexplained" line back (EERL_EPARSE with why). */
int eerl__unexpl_parse(const char *line, struct eerl_trace_unexplained *ret, char *why, size_t len);

#endif

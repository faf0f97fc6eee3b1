/* The trace line format (docs/trace-format.md): JSON lines, one header line that rebuilds the
 * controller (format version, mode, strategy, full configuration, supported clocks, governor
 * peak) and one line per update (work, whole-update and per-phase/per-pool times and energies,
 * the setting requested and the one observed, and the controller's events). Non-finite numbers
 * are written as the strings "nan", "inf", "-inf" so that refused observations replay too.
 * Readers ignore unknown keys and unknown line types (later issues add fields), except inside
 * "config", where an unknown key could change decisions and is refused. Owns no state; the
 * caller owns every buffer and FILE. This is I/O, so it lives outside core/. Here: writing, for
 * the session; the reading side, for eerl's tools, is eerl/tools/trace.h. */
#ifndef EERL_TRACE_TRACE_H
#define EERL_TRACE_TRACE_H

#include <stddef.h>
#include <stdio.h>

#include "eerl/core.h"
#include "eerl/tools/trace.h"

#define EERL__TRACE_FORMAT "eerl-trace"
#define EERL__TRACE_VERSION 2 /* 2: several segments (appended headers), the estimate records */

/* The header line for a controller (no newline), malloc'd into *ret_line. appended: the header
 * of a segment written after others in the same file (a resumed session's), said by the key
 * "appended": true. */
int eerl__trace_header_line(const eerl_ctl *ctl, const char *producer, int appended,
                            char **ret_line);
/* A phase's key in trace lines ("generation", "logprob", ...); "unknown" out of range. */
const char *eerl__trace_phase_key(unsigned phase);

/* One update line: obs (as observed), the request it ran under, the events its observation
 * produced. requested may be NULL. malloc'd into *ret_line. */
int eerl__trace_update_line(const eerl_obs *obs, const eerl_setting *requested,
                            const eerl_event *ev, size_t n_ev, char **ret_line);
/* Opens path for a session's trace, in a directory only root or the caller can write (or a
 * sticky one, where the trace must be the caller's), never through a link: created when nothing
 * is there (*ret_created 1); else an empty regular file, or with append (a resumed session) an
 * existing trace, whose lines are kept: it is cut back to its last whole line and written after
 * (*ret_created 0, *ret_end its length). The file stays locked (flock) while open. EERL_EBUSY:
 * another live session holds the trace; EERL_EEXIST: a trace is there and append is 0 (it is
 * never truncated); EERL_EUNSAFE: a link, another user's file, a directory others can write;
 * EERL_ESYS; each with why naming the path and what to do. */
int eerl__trace_open(const char *path, int append, FILE **ret_f, int *ret_created,
                     long long *ret_end, char *why, size_t len);
/* Appends line and a newline to f's file as one whole line, with write(2) (nothing may sit in f's
 * stdio buffer). *end: the file's length in whole lines, advanced on success. On a short or
 * failed write (a full disk) the file is cut back to *end, so a reader never meets part of a
 * line; EERL_EIO with errno the write's. */
int eerl__trace_append(FILE *f, const char *line, long long *end);
/* Convenience: the same lines written to f with a newline. */
int eerl__trace_write_header(FILE *f, const eerl_ctl *ctl, const char *producer);
int eerl__trace_write_update(FILE *f, const eerl_obs *obs, const eerl_setting *requested,
                             const eerl_event *ev, size_t n_ev);

/* The "resume" record a session writes after its "run" line when it was asked to resume: where
 * from, the hardware tag, whether it resumed, why (or why not), and the saved state's bytes in
 * hex when the file was read (so `eerl replay` restores the same bytes and replays exactly).
 * state NULL: no state (no file). malloc'd into *ret_line. */
int eerl__trace_resume_line(const char *from, const char *tag, int resumed, const char *detail,
                            const void *state, size_t state_len, char **ret_line);

/* The last line of a session stopped for a cause outside it (eerl_rt_abort): {"type": type,
 * "update": update, "open_phases": [names] (detail_json's own array instead, when it has one),
 * then every other key of detail_json (NULL: none; an object text, else EERL_EINVAL with why).
 * type: 1 to 31 of [a-z_], not "header", "update", "run" or "resume" (EERL_EINVAL with why).
 * malloc'd into *ret_line. */
int eerl__trace_stop_line(const char *type, unsigned long long update,
                          const char *const *open_phases, size_t n_open, const char *detail_json,
                          char **ret_line, char *why, size_t len);

#endif

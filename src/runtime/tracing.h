/* The runtime session's trace file: the lines it opens with (header, run, resume record), one
 * update line per update with the runtime's own record under "runtime", and any other line the
 * session has (a stop, an "unexplained" record), each written whole or not at all
 * (eerl__trace_append). Owns the FILE and its lock (a second live session is refused); a file it
 * created is removed, and one it appended to cut back to its earlier lines, when the session
 * does not start. A resumed session appends a segment to its job's trace; any other refuses a
 * trace that holds lines. The formats are trace/trace.h's. */
#ifndef EERL_RUNTIME_TRACING_H
#define EERL_RUNTIME_TRACING_H

#include <stddef.h>
#include <stdio.h>

#include "eerl/core.h"
#include "core/estimate.h"
#include "eerl/runtime.h"

struct eerl__tracing {
    FILE *f;         /* NULL: no trace (none asked for, or dropped after a write failed) */
    long long end;   /* the trace's length in whole lines (eerl__trace_append) */
    long long kept;  /* an earlier segment's length, kept when the session does not start */
    int created;     /* 1: this session created the file */
    char file[4096]; /* its path, for messages */
};

/* How the session was set up: the trace's run line. */
struct eerl__tracing_run {
    eerl_mode mode;
    int observe_only;
    double allowed_loss;
    const char *device;
    const unsigned *pool_gpus[2];
    size_t n_pool[2];
    const char *run_json; /* the caller's metadata, merged in (NULL: none) */
};

/* The controller's saved state the session resumed from (or tried to): the resume record. */
struct eerl__tracing_resume {
    const char *from, *tag, *detail;
    int resumed;
    const unsigned char *state;
    size_t state_len;
};

/* Opens path (eerl__trace_open: appended to with res, a resumed session) and writes the header
 * (ctl's, producer; "appended" after earlier lines), the run line and, with res, the resume
 * record. On failure the file is dropped, with why. */
int eerl__tracing_start(struct eerl__tracing *t, const char *path, const eerl_ctl *ctl,
                        const char *producer, const struct eerl__tracing_run *run,
                        const struct eerl__tracing_resume *res, char *why, size_t why_len);

/* The runtime's own record of an update: its interval, each pool's busy time, the meter flags
 * and, across nodes (n_nodes > 0), each node's energy and flags. */
struct eerl__tracing_record {
    double t_start, t_end;
    double busy[2];
    int colocated;
    unsigned meter_flags;
    unsigned n_nodes;
    const double *node_energy_j;
    const unsigned *node_flags;
    const struct eerl__est_upd *est; /* the update's forward governor prediction (NULL: none) */
    const double *phase_capped; /* EERL_PHASE_COUNT shares at the power cap, < 0: none (or NULL) */
    const char *excluded;       /* why the controller did not see this update, or NULL */
};

/* The update line of o (requested setting req, the controller's events ev). */
int eerl__tracing_update(struct eerl__tracing *t, const eerl_obs *o, const eerl_setting *req,
                         const eerl_event *ev, size_t n_ev, const struct eerl__tracing_record *rec);

/* One line (no newline), whole or not at all. */
int eerl__tracing_append(struct eerl__tracing *t, const char *line);

/* Closes the file: 0, or -1 with errno when the last lines could not be written. */
int eerl__tracing_close(struct eerl__tracing *t);
/* Closes the file and removes it if this session created it (a session that does not start). */
void eerl__tracing_drop(struct eerl__tracing *t);
/* A forked child's copy: the descriptor goes, the parent's buffered lines are neither flushed
 * nor freed. */
void eerl__tracing_forget(struct eerl__tracing *t);

#endif

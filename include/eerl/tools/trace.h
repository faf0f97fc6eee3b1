/* Reading eerl's traces (docs/trace-format.md), for eerl's own tools: `eerl replay`, `eerl
 * analyze`, the tests. A trace is JSON lines: one header line that rebuilds the controller
 * (format version, mode, strategy, full configuration, supported clocks, governor peak), one
 * line per update (work, times and energies, the setting requested and the one observed, the
 * controller's events) and a few records (resume, unexplained, estimate, stop). The code is
 * libeerl's (src/trace, src/runtime/unexplained.c: the session writes what is read here); not
 * exported by libeerl.so, linked from libeerl.a. Owns no state; the caller owns every buffer. */
#ifndef EERL_TOOLS_TRACE_H
#define EERL_TOOLS_TRACE_H

#include <stddef.h>

#include <jansson.h>

#include "eerl/core.h"
#include "eerl/estimate.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EERL_TRACE_CLOCKS_MAX 1024

struct eerl_trace_header {
    unsigned version;
    eerl_mode mode;
    eerl_ctl_config cfg;
    unsigned clocks[EERL_TRACE_CLOCKS_MAX];
    size_t n_clocks;
    unsigned peak;
    char producer[64];
    /* The header's experimental options (eerl/options.h; eerl_trace_header_ctl_new sets them):
     * warmup_updates (0 where the key is absent: written before it). */
    unsigned warmup_updates;
    /* The revision key that decided under the header's mode and strategy (NULL: none does), its
     * value in the header (0 where the key is absent: written before it) and this eerl's. A
     * controller rebuilt from the header decides as this eerl's revisions; its decisions match
     * the trace only where revision == revision_now (eerl_trace_header_replayable). */
    const char *revision_key;
    unsigned revision, revision_now;
};

struct eerl_trace_update {
    eerl_obs obs; /* obs.setting is the setting observed in force */
    int has_requested;
    eerl_setting requested; /* what the controller had asked for this update */
    int has_events;
    size_t n_events; /* events recorded (may exceed the caller's cap) */
};

/* Line type: "header", "update", or another (ignored by readers); EERL_EPARSE if not JSON. */
int eerl_trace_line_type(const char *line, char *type, size_t len);

/* Parses a header line. EERL_EPARSE (malformed, with why), EERL_EVERSION (newer major). */
int eerl_trace_parse_header(const char *line, struct eerl_trace_header *ret, char *why, size_t len);
/* 0 where this eerl decides as the header's controller did; EERL_EVERSION where an older
 * revision decided it, with why: what decided it, what this eerl decides as, and the eerl to
 * replay it with (the header's producer). */
int eerl_trace_header_replayable(const struct eerl_trace_header *h, char *why, size_t len);

/* The controller the header describes: its mode, configuration, experimental options, clocks
 * and governor peak (eerl_ctl_new's errors). */
int eerl_trace_header_ctl_new(const struct eerl_trace_header *h, eerl_ctl **ret_ctl);

/* Parses an update line; up to cap recorded events go to ev (ev may be NULL with cap 0). */
int eerl_trace_parse_update(const char *line, struct eerl_trace_update *ret, eerl_event *ev,
                            size_t cap, char *why, size_t len);

/* Parses a resume record: 0 with the tag and the state bytes (malloc'd, the caller frees);
 * 1 when the record carries no state; EERL_EPARSE with why. */
int eerl_trace_parse_resume(const char *line, char *tag, size_t tag_len, unsigned char **ret_state,
                            size_t *ret_len, char *why, size_t len);

/* One event as a JSON object text (for `eerl replay --json`), malloc'd. */
int eerl_trace_event_json(const eerl_event *ev, char **ret_text);

/* The estimate as a JSON object (the summary line's keys, `eerl analyze --json`'s "estimate"). */
json_t *eerl_trace_estimate_json(const eerl_estimate *est);

/* ---- when the work does not explain the time (docs/runtime.md) ------------------------------ */

/* What the governor predictor leaves of the update time unexplained once the controller has
 * calibrated: measured by a session after its calibration (its "unexplained" line) and by
 * eerl_trace_measure_unexplained on a trace, the same way. */
struct eerl_trace_unexplained {
    unsigned long long update; /* the update at which it was measured (the calibration's last) */
    size_t n;                  /* governor references measured on */
    size_t folds;              /* of them, predicted from a fit on the others */
    /* The unexplained share of the update time: the scatter of the governor predictor's
     * leave-one-out errors (measured time / time predicted from the other references - 1),
     * 1.4826 times the median of their absolute values (a standard deviation that one stalled
     * update does not inflate). */
    double share;
    double constant;     /* the same for a constant: each time against the others' mean */
    double allowed_loss; /* the controller's allowance */
    /* Updates a trial needs for its mean loss to be known within half the allowance (one
     * standard error): (2 share / allowed_loss)^2, rounded up. */
    unsigned need;
    unsigned trial_max; /* the most updates the strategy gives a trial; 0: it runs none */
    eerl_strategy strategy;
    int too_noisy; /* need > the longest trial eerl's strategy gives a setting (12) */
};

/* What a person reads when u->too_noisy (the figure, what it means for the controller, the usual
 * cause), into buf; "" otherwise. */
void eerl_trace_unexplained_message(const struct eerl_trace_unexplained *u, char *buf, size_t len);
/* Replays the trace at path (header, resume record, update lines) until its controller reports
 * CALIBRATED, then measures: 0 with *ret; 1 when it never calibrates (or has too few
 * references); an EERL_E* code with why naming the file and line. */
int eerl_trace_measure_unexplained(const char *path, struct eerl_trace_unexplained *ret, char *why,
                                   size_t len);

#ifdef __cplusplus
}
#endif
#endif

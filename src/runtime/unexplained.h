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
 * that update (eerl__unexpl_of_trace), so both show the same figure. The measure reads the
 * controller's references and fit options and refits the predictor on them: deterministic, no
 * I/O, and it changes nothing the controller decides (replays stay exact). Owns nothing; borrows
 * the controller. */
#ifndef EERL_RUNTIME_UNEXPLAINED_H
#define EERL_RUNTIME_UNEXPLAINED_H

#include <stddef.h>

#include "eerl/core.h"

/* Fewest references the measure takes (each left out once). */
#define EERL__UNEXPL_MIN_REFS 5

struct eerl__unexpl {
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
    int too_noisy; /* need > EERL__UNEXPL_TRIAL_MAX */
};

/* The longest trial eerl's own strategy gives a setting (judge/eerl.c): a run needing more
 * updates than this per trial is one whose time the work does not explain well enough for any
 * of eerl's strategies to judge clock changes (the paper's trials take 3). */
#define EERL__UNEXPL_TRIAL_MAX 12

/* Measures on ctl's references (after its calibration). EERL_EINVAL for a NULL argument,
 * EERL_ENODATA when fewer than EERL__UNEXPL_MIN_REFS references or folds are there, EERL_ENOMEM.
 * ret->update is left to the caller. */
int eerl__unexpl_measure(const eerl_ctl *ctl, struct eerl__unexpl *ret);
/* What a person reads when u->too_noisy (the figure, what it means for the controller, the usual
 * cause), into buf; "" otherwise. */
void eerl__unexpl_message(const struct eerl__unexpl *u, char *buf, size_t len);
/* The trace's "unexplained" line (docs/trace-format.md) for u and its message, malloc'd. */
int eerl__unexpl_line(const struct eerl__unexpl *u, const char *message, char **ret_line);
/* Reads a trace's "unexplained" line back (EERL_EPARSE with why). */
int eerl__unexpl_parse(const char *line, struct eerl__unexpl *ret, char *why, size_t len);
/* Replays the trace at path (header, resume record, update lines) until its controller reports
 * CALIBRATED, then measures: 0 with *ret; 1 when it never calibrates (or has too few
 * references); an EERL_E* code with why naming the file and line. */
int eerl__unexpl_of_trace(const char *path, struct eerl__unexpl *ret, char *why, size_t len);

#endif

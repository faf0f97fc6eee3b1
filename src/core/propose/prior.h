/* A prior from earlier jobs (docs/controller.md "Starting from earlier jobs: the prior"): a
 * proposer that stands in front of the strategy's own. The controller (eerl_ctl_set_prior)
 * fills its state from the matching saved states and puts it in the context's proposer place;
 * the inner proposer and its state stay the controller's. Owns only its state struct. */
#ifndef EERL_CORE_PROPOSE_PRIOR_H
#define EERL_CORE_PROPOSE_PRIOR_H

#include "core/propose.h"

enum eerl__prior_phase {
    EERL__PRIOR_WAIT,     /* not started: the strategy's calibration is under way */
    EERL__PRIOR_MATCHED,  /* the calibration's gate found the job matches the prior */
    EERL__PRIOR_TESTING,  /* the prior's setting is the candidate under test */
    EERL__PRIOR_HANDED,   /* the inner proposer has the search (refused, failed or resumed) */
    EERL__PRIOR_VERIFIED, /* the setting passed: it stays while its evidence allows (a failure
                             it bears out goes back to it, or raises one clock a step), credit
                             may lower it a grid step at a time */
};

struct eerl__prior_st {
    const struct eerl__ctx *cx;             /* the controller's context (for the gate) */
    const struct eerl__proposer_ops *inner; /* the strategy's proposer, and its state */
    void *inner_st;
    eerl_setting s;           /* each clock the median of the earlier jobs' locks; then as raised */
    unsigned jobs, votes;     /* matching saved states, and how many of them locked s */
    double tpt_mean, tpt_var; /* their governor references' time per valid token (s) */
    unsigned tpt_n;
    double tpt_off;  /* this job's governor time per valid token against theirs, relative; and */
    double tpt_se;   /* the standard error of that (matches(), at the calibration's gate) */
    unsigned raises; /* failed tests that raised the setting and tried again */
    enum eerl__prior_phase phase;
    struct {
        eerl_setting s;    /* the setting the verdicts were on */
        double n, sum, vs; /* their updates, sum of loss, sum of per-update variance */
    } ev;                  /* the evidence on the prior's setting (propose/prior.c) */
};

/* Checks the job's calibration against the prior, then tests the prior's setting; a pass locks
 * it, a refusal or a failed test hands the search to the inner proposer from the governor. */
extern const struct eerl__proposer_ops eerl__propose_prior;

/* The calibration's gate (eerl__rec_set_gate, arg: the prior's state): 1 when the job's
 * governor time per valid token so far matches the prior's, 0 (with the refusal's event) when
 * not: the calibration goes on to its full length and the search starts afresh. */
int eerl__prior_gate(void *ps);
/* Updates the calibration stops at when a prior matches: PRIOR_CAL_SYNC, in flight
 * PRIOR_CAL_INFLIGHT, at most cfg.fast_calibration_updates - 1 (0: no gate). */
unsigned eerl__prior_cal_updates(const struct eerl__ctx *cx);

#endif

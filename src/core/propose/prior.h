/* A prior from earlier jobs (docs/controller.md "Starting from earlier jobs: the prior"): a
 * proposer that stands in front of the strategy's own. The controller (eerl_ctl_set_prior)
 * fills its state from the matching saved states and puts it in the context's proposer place;
 * the inner proposer and its state stay the controller's. Owns only its state struct. */
#ifndef EERL_CORE_PROPOSE_PRIOR_H
#define EERL_CORE_PROPOSE_PRIOR_H

#include "core/propose.h"

struct eerl__prior_st {
    const struct eerl__proposer_ops *inner; /* the strategy's proposer, and its state */
    void *inner_st;
    eerl_setting s;           /* each clock the median of the earlier jobs' locks */
    unsigned jobs, votes;     /* matching saved states, and how many of them locked s */
    double tpt_mean, tpt_var; /* their governor references' time per valid token (s) */
    unsigned tpt_n;
    int phase; /* 0: not started, 1: testing s, 2: the inner proposer has the search, 3: s
                  verified: it stays while it passes, the inner proposer raises it */
};

/* Checks the job's calibration against the prior, then tests the prior's setting; a pass locks
 * it, a refusal or a failed test hands the search to the inner proposer from the governor. */
extern const struct eerl__proposer_ops eerl__propose_prior;

#endif

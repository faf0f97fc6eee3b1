/* The revisions of the judges (cfg.eerl_revision, cfg.inflight_revision, cfg.paper_revision:
 * experimental knobs, eerl/experimental.h) as the features each one had. A judge reads the
 * features, never a revision number: the numbers live in revisions.c only, where a trace
 * recorded under an old revision (whose header names it) is mapped to what decided then, so
 * that eerl replay rebuilds it. The defaults (the newest revisions) have every feature; the
 * older ones stay for replay only (tests/fixtures/replay holds a trace of each). */
#ifndef EERL_CORE_JUDGE_REVISIONS_H
#define EERL_CORE_JUDGE_REVISIONS_H

#include "eerl/core.h"

/* eerl's judge in colocated, disaggregated and drained mode (judge/eerl.c;
 * docs/internals/controller.md, "The eerl strategy", the items named). */
struct eerl__eerl_features {
    int probe_quiet;       /* (1) the probes' mean as measured once its standard error is within
                              budget_margin (0: only a negative or a two-error mean) */
    int probe_gate;        /* (2) before EE_BIAS_MIN probes, only a mean three of the references'
                              standard errors from zero */
    int aim_se;            /* (2, item 4) the run aimed inside the allowance by half the account's
                              standard error */
    int late_drained;      /* (3, item 6) drained: each update taken as evidence with the next */
    int reread;            /* (4, item 7) the model's points read again at every verdict */
    int linear_train;      /* (5, item 8) the predictor's training part fixed plus per token */
    int short_run_cap;     /* (6, item 9) a run under 500 updates never above allowed_loss */
    int long_margin;       /* (7, item 10) a run over 1000 updates aims budget_margin times
                              sqrt(1000 / its updates) inside the allowance */
    int flat_step;         /* (8, item 11) colocated: the model proposer tries one grid step below
                              a group's lowest clock when its curve is flat there */
    int account_stretches; /* (9, item 12) the account corrects each stretch between probes by
                              the probes around it (0: by the last probes, for the whole run) */
    int half_probes;       /* (10, item 13) disaggregated: every other probe runs generation alone
                              at the governor, training at its setting */
    int moving_cal;        /* (11, item 14) drained: the calibration goes on while the work moves
                              (the last 3 references' valid tokens off the 3 before) */
    int steep_margin;      /* (12, item 15) colocated: a run over 1000 updates aims budget_margin
                              times (1000 / its updates)^0.75 inside the allowance */
};

/* eerl's judge in in-flight mode (judge/eerl_inflight.c). */
struct eerl__inflight_features {
    int work_model;      /* (1) the governor's time and energy as functions of the consumed
                            batch's valid tokens (0: the governor rate, fixed) */
    int confirm_moved;   /* (2) a governor block after lock that says the governor moved is
                            confirmed by as many updates again */
    int first_check;     /* (2) the first check after lock comes early */
    int half_margin;     /* (3) a run under 500 updates keeps half of budget_margin inside the
                            allowance (the reference's error widens it already) */
    int pool_model;      /* (4) the governor's update time as the later of the two pools'
                            arrivals, each a line in the consumed batch's valid tokens, plus the
                            median rest, and its energy a plane in valid tokens and time (0:
                            one line each) */
    int train_last_free; /* (4) the descent's wait model skips no training step once training
                            arrived last at the setting that passed, and credit after lock
                            searches training first while the update waits for it */
    int raise_later;     /* (4) a monitoring window that falls short raises training when the
                            update waited for it (0: generation first) */
    int start_drain;     /* (5) the run's first two updates (the pipeline filling and its first
                            drain) are left out of calibration, and a short run keeps the whole
                            of budget_margin (half_margin off) */
    int confirm_alone;   /* (5) a governor block run on to confirm a move is read on the
                            confirming updates alone */
    int whole_fit;       /* (5) the trend rule that drops old references fits one model on
                            both halves it weighs (0: the newer half's, extrapolated) */
};

void eerl__eerl_features_of(const eerl_ctl_config *cfg, struct eerl__eerl_features *ret);
void eerl__inflight_features_of(const eerl_ctl_config *cfg, struct eerl__inflight_features *ret);
/* The paper's synchronous search grid counts from the highest clock below the peak (paper
 * revision 1; 0: from the peak). */
int eerl__paper_grid_below_peak(const eerl_ctl_config *cfg);

#endif

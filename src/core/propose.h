/* The proposer interface: what to try next and when to stop (Algorithm 1's pairs, the paper's
 * rounds per pool, eerl's descents and phase model, the baselines' sweeps). A proposer sees only
 * outcomes (struct eerl__outcome) from its judge and answers with a move (struct eerl__move); it
 * never reads the updates themselves. Like a judge it reads a const context (context.h) and acts
 * only through the record's calls (it may emit PROPOSE, ADJUST and ROUND events). Its state
 * (st_size bytes, zeroed, allocated by the controller) is its own. A new proposer is one file in
 * src/core/propose/ and one line in controller.c's combination table. */
#ifndef EERL_CORE_PROPOSE_H
#define EERL_CORE_PROPOSE_H

#include <stddef.h>

#include "eerl/core.h"
#include "core/context.h"

struct eerl__ratios;
struct eerl__pm;

/* What a judge tells its proposer about the setting it judged (or, for start, the setting the
 * search starts from). Fields a judge does not estimate are 0 (r: NULL). */
struct eerl__outcome {
    eerl_setting s;               /* the setting judged */
    eerl_verdict verdict;         /* PASS or FAIL */
    int too_slow;                 /* the throughput failed (a FAIL otherwise failed on energy) */
    int confirm;                  /* the verdict of a confirmation (else of a trial) */
    const struct eerl__ratios *r; /* the paper's ratios (ratios.h), where the judge has them */
    double loss;                  /* estimated throughput loss against the governor */
    double energy;                /* energy ratio against the governor */
    double loss_var;              /* per-update variance of the loss estimates (0: not known) */
    double budget;                /* the loss the run may still spend per update (eerl's account) */
    double remaining;   /* updates the run has left (by the configured or learned horizon) */
    int slack_group;    /* the group with slack (waits at the rendezvous / is less busy), or -1 */
    int late_group;     /* the group the judged updates waited for, or -1 when not known */
    double wait_ratio;  /* training's arrival over generation's across the judged updates, or
                         * -1 when not every one reported arrivals */
    int locked;         /* the search is locked: a move now spends credit the lock left over */
    unsigned n_updates; /* usable updates the loss and energy rest on */
    /* eerl's judge: its fit of each group's phase time and power against the clock from every
     * update run so far (phase_model.h), or NULL */
    const struct eerl__pm *model;
};

enum eerl__move_kind {
    EERL__MOVE_TRY,     /* test s: a candidate, judged against the governor and energy_bar */
    EERL__MOVE_CONFIRM, /* confirm s on fresh updates (the paper's proposers) */
    EERL__MOVE_HOLD,    /* run at s, judged against the throughput budget only (not a candidate) */
    EERL__MOVE_STOP,    /* the search is over: lock s (the governor when nothing qualified); after
                         * lock, the lock stays */
    EERL__MOVE_CALIBRATE, /* eerl's judges: back to the governor, whose calibration goes on to its
                           * full length; then the proposer starts again (a prior refused after
                           * the short calibration its gate allowed, propose/prior.c) */
};

struct eerl__move {
    int kind;              /* EERL__MOVE_* */
    eerl_setting s;        /* the setting to run next */
    int group;             /* TRY: the one group it changes, or -1 */
    double energy_bar;     /* TRY, CONFIRM: passes only below this energy ratio (1: governor's) */
    const char *fail_note; /* appended to a verdict that fails on energy, or NULL */
    /* STOP: why the search ended; HOLD: when set, the locked setting moves to s and this is the
     * ADJUST event's reason (empty: s is run, no event). */
    char why[EERL_REASON_MAX];
    /* What the proposer calls this step, put before the judge's PROPOSE text ("round 2
     * (generation pool): "), or "". */
    char label[64];
};

struct eerl__proposer_ops {
    const char *name;
    size_t st_size;
    /* Optional: once, after the controller is built. */
    int (*init)(const struct eerl__ctx *cx, void *ps);
    /* The search begins (calibration is done, or a resume): from->s is where it stands,
     * from->locked set when it resumes at a saved lock (nothing is lowered again). */
    void (*start)(const struct eerl__ctx *cx, void *ps, const struct eerl__outcome *from,
                  struct eerl__move *ret);
    /* The last TRY, CONFIRM or HOLD has been judged: the next move. */
    void (*next)(const struct eerl__ctx *cx, void *ps, const struct eerl__outcome *o,
                 struct eerl__move *ret);
};

/* For a judge: its proposer's first move and the move after each outcome. *ret starts as a TRY
 * of nothing, group -1, energy_bar 1, no label. */
void eerl__propose_start(const struct eerl__ctx *cx, const struct eerl__outcome *from,
                         struct eerl__move *ret);
void eerl__propose_next(const struct eerl__ctx *cx, const struct eerl__outcome *o,
                        struct eerl__move *ret);
/* An outcome with nothing estimated yet: s, verdict NONE, slack and late group -1, wait_ratio
 * -1. */
struct eerl__outcome eerl__outcome_of(const eerl_setting *s);

/* What a judge that has the paper's ratios tells its proposer: s judged v (tf: on
 * throughput) with ratios r, which the outcome points to. */
struct eerl__outcome eerl__outcome_judged(const eerl_setting *s, eerl_verdict v, int tf,
                                          const struct eerl__ratios *r);
/* The settings a search round has judged, for the paper's proposers. */
#define EERL__TRIED_MAX 80

struct eerl__tried {
    eerl_setting s;
    eerl_verdict v;
    int time_fail;
    int confirm_failed;
    double time_ratio, energy_ratio;
};

struct eerl__tried_set {
    struct eerl__tried t[EERL__TRIED_MAX];
    unsigned n;
};

struct eerl__tried *eerl__tried_find(struct eerl__tried_set *set, const eerl_setting *s);
/* Records (or updates) a verdict; the oldest entry is reused when full. */
struct eerl__tried *eerl__tried_put(struct eerl__tried_set *set, const eerl_setting *s,
                                    eerl_verdict v, int time_fail, const struct eerl__ratios *r);
/* The passing, not confirmation-failed setting with the lowest energy ratio; NULL if none. */
const struct eerl__tried *eerl__tried_best(const struct eerl__tried_set *set);

/* The proposers (src/core/propose/). */
extern const struct eerl__proposer_ops eerl__propose_pairs;   /* Algorithm 1, sections 5.2, 6.1 */
extern const struct eerl__proposer_ops eerl__propose_rounds;  /* sections 6.2, 6.3: pool by pool */
extern const struct eerl__proposer_ops eerl__propose_descent; /* eerl, 3-4 groups: descent */
extern const struct eerl__proposer_ops eerl__propose_model;   /* eerl: the model's best setting */
extern const struct eerl__proposer_ops
    eerl__propose_pool_descent;                              /* eerl in-flight: pool by pool */
extern const struct eerl__proposer_ops eerl__propose_sweep;  /* global-clock baseline */
extern const struct eerl__proposer_ops eerl__propose_linear; /* linear-search baseline */
/* Drained mode: the drop below the peak (MHz) to which training may go at once, read from the
 * rendezvous wait of the calibration updates (propose/descent.c); 0 in other modes. */
unsigned eerl__slack_drop(const struct eerl__ctx *cx);

#endif

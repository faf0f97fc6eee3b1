/* What the judges share to judge a trial: running sums of measured and predicted update parts
 * (accumulators), the ways to turn them into candidate/governor ratios that each section of the
 * paper prescribes, and the pass rule. Owns no memory; reads the predictor and the references
 * through the context. */
#ifndef EERL_CORE_RATIOS_H
#define EERL_CORE_RATIOS_H

#include "eerl/core.h"
#include "core/context.h"
#include "core/predictor.h"

struct eerl__acc {
    unsigned n;
    struct eerl__parts m; /* measured sums */
    struct eerl__parts p; /* governor-predicted sums at the same work */
};

struct eerl__ratios {
    double time;      /* candidate / governor time on the common workload */
    double energy;    /* candidate / governor energy on the common workload */
    double meas_time; /* measured / predicted at the observed work */
    double meas_energy;
    double add_gen;     /* time the generation group adds on the reference workload (s) */
    double add_train;   /* time the training group adds */
    double window_time; /* the measured time the ratios rest on (s) */
};

void eerl__acc_reset(struct eerl__acc *a);
/* Adds o's measured parts and the predictor's governor parts for o's work. */
void eerl__acc_add(struct eerl__acc *a, const struct eerl__ctx *cx, const eerl_obs *o);
void eerl__acc_merge(struct eerl__acc *into, const struct eerl__acc *from);

/* Section 6.1: per-part ratios (measured / predicted at the observed work) applied to the
 * governor predictions for the reference updates, combined as the layout combines parts. */
void eerl__ratios_parts(const struct eerl__ctx *cx, const struct eerl__acc *a,
                        struct eerl__ratios *r);
/* Section 6.2, other candidates: whole-update measured / predicted at the observed work. */
void eerl__ratios_whole(const struct eerl__ctx *cx, const struct eerl__acc *a,
                        struct eerl__ratios *r);
/* Section 6.2, training-only slowdown: the measured training slowdown applied to each
 * reference's recorded arrivals, update time recomputed as max(gen, slowed train) + rest. */
void eerl__ratios_arrivals(const struct eerl__ctx *cx, const struct eerl__acc *a,
                           struct eerl__ratios *r);
/* Section 6.3: the candidate block's measured/predicted ratio over the bracketing governor
 * blocks' ratio (matched work on both sides). */
void eerl__ratios_blocks(const struct eerl__acc *cand, const struct eerl__acc *gov,
                         struct eerl__ratios *r);

/* Pass = throughput >= 1 - allowed_loss and energy_ratio < min(energy_cap, 1 - min_saving).
 * Writes a reason. *time_fail is set when the throughput part failed. */
eerl_verdict eerl__verdict(const eerl_ctl_config *cfg, const struct eerl__ratios *r,
                           double energy_cap, int *time_fail, char *why, size_t len);
/* Copies ratios and verdict into an event. */
void eerl__event_set(eerl_event *ev, const struct eerl__ratios *r, unsigned n, eerl_verdict v);

#endif

/* The governor predictor (Eq. 2, Appendix B): what the default governor would have taken, in
 * time and energy, for an update's token work. Per phase: log y = b0 + sum_k bk zk, zk the
 * standardized log(1 + x) of a token count (generation: G and L; training: N; in-flight whole
 * update: N and L); the rest of the update is the median remainder. Sequential modes add the
 * phases, overlapped ones take the longer pool. Owns the fitted coefficients; the observations it
 * fits on belong to the caller. No allocation except in eerl__pred_work_init. */
#ifndef EERL_CORE_PREDICTOR_H
#define EERL_CORE_PREDICTOR_H

#include <stddef.h>

#include "eerl/core.h"

enum { EERL__F_G = 0, EERL__F_N = 1, EERL__F_L = 2, EERL__F_COUNT = 3 };

/* How an update's time is made of its parts. */
enum eerl__layout {
    EERL__LAYOUT_SEQ = 0,     /* colocated, disaggregated: gen + train + rest */
    EERL__LAYOUT_OVERLAP = 1, /* drained: max(gen pool, train pool) + rest */
    EERL__LAYOUT_WHOLE = 2,   /* in-flight: the whole update from N and L */
};

struct eerl__model {
    unsigned want; /* features asked for (1u << EERL__F_*) */
    unsigned used; /* features kept: varying and not collinear */
    double mean[EERL__F_COUNT], sd[EERL__F_COUNT], beta[EERL__F_COUNT];
    double b0;
    int fitted;
    /* 1: y = b0 + sum bk zk with zk the standardized count itself (a fixed part plus a part
     * per token), at least floor (half the smallest y fitted); 0: the log form above. */
    int linear;
    double floor;
};

struct eerl__pred {
    int layout;
    struct eerl__model t_gen, t_train, e_gen, e_train, t_whole, e_whole;
    double rest_t, rest_e;                       /* median remainders */
    double lo[EERL__F_COUNT], hi[EERL__F_COUNT]; /* token-count range of the fit */
    unsigned n;                                  /* observations fitted */
    int ready;
};

/* An update split into parts, measured or predicted. */
struct eerl__parts {
    double t_gen, t_train, t_rest, t;
    double e_gen, e_train, e_rest, e;
};

/* Working memory for fits of up to cap observations. */
struct eerl__pred_work {
    double *X, *y; /* the least-squares system */
    double *feat;  /* cap x EERL__F_COUNT raw token counts */
    double *tgt;   /* cap targets, then scratch for medians */
    size_t cap;
};

int eerl__layout_of(eerl_mode mode);
int eerl__pred_work_init(struct eerl__pred_work *w, size_t cap);
void eerl__pred_work_free(struct eerl__pred_work *w);

/* Fits on n observations (n <= w->cap, n >= 1). Returns 0, or EERL_EINVAL (n == 0, n too large,
 * a target that is not > 0) leaving p as it was. */
int eerl__pred_fit(struct eerl__pred *p, int layout, const eerl_obs *const *obs, size_t n,
                   struct eerl__pred_work *w);
/* The same with the eerl strategies' options. min_t: a phase model one of whose token counts
 * does not vary in the window (L pinned at the sequence limit: the decode loop's length is
 * fixed) keeps the others only while their coefficient is at least min_t standard errors from
 * zero (ordinary least squares; the weakest is dropped and the model refitted until every count
 * left passes). opts: EERL__PRED_LINEAR_TRAIN fits the training part's time and energy (log-prob
 * and training, or the training pool's arrival) in the linear form of struct eerl__model, on N:
 * a trainer's step costs a fixed part (the optimizer step, the launch of every micro-batch) and
 * a part per token, and when N moves by a factor of 2-3 within the references (responses
 * collapsing) the log form's single slope, fitted where the fixed part weighs less, runs short
 * of the governor at the small end by 1-2% (docs/internals/controller.md, "The eerl strategy", item
 * 8). min_t 0 and opts 0: eerl__pred_fit, the paper's Eq. 2. */
#define EERL__PRED_LINEAR_TRAIN 1u
/* Every part in the linear form (generation and the whole in-flight update too): the run's own
 * saving estimate (core/estimate.c) only; the controller keeps the forms above. */
#define EERL__PRED_LINEAR_ALL 2u
/* The whole in-flight update's models take G too (with N and L): the run's own saving estimate
 * only, which gives them the tokens of the batch generated during the update (core/estimate.h,
 * "one update late"); the controller keeps N and L. */
#define EERL__PRED_WHOLE_G 4u
int eerl__pred_fit_opts(struct eerl__pred *p, int layout, const eerl_obs *const *obs, size_t n,
                        struct eerl__pred_work *w, double min_t, unsigned opts);
/* The eerl strategies' min_t (docs/internals/controller.md). */
#define EERL__PRED_MIN_T 2.0
/* The governor prediction for o's work. p must be ready. */
void eerl__pred_predict(const struct eerl__pred *p, const eerl_obs *o, struct eerl__parts *out);
/* Which of an update's parts eerl__pred_error_sd compares. */
enum eerl__part {
    EERL__PART_T,       /* the update's time */
    EERL__PART_E,       /* its energy */
    EERL__PART_T_GEN,   /* generation's time */
    EERL__PART_T_TRAIN, /* training's */
    EERL__PART_E_GEN,   /* generation's energy */
    EERL__PART_E_TRAIN, /* training's */
};
/* The scatter of p's relative errors (measured / predicted - 1) in one part on n observations:
 * 1.4826 times their median absolute deviation, a standard deviation that one start-up update
 * or one stalled update does not inflate. scratch holds n doubles. 0 when n < 2. p must be
 * ready. */
double eerl__pred_error_sd(const struct eerl__pred *p, const eerl_obs *const *obs, size_t n,
                           enum eerl__part part, double *scratch);
/* The median of v[0..n-1], n >= 1; sorts v. */
double eerl__median(double *v, size_t n);
/* o's measured parts for the layout. */
void eerl__obs_parts(int layout, const eerl_obs *o, struct eerl__parts *out);
/* 1 when o's token counts lie within the fit's range widened by margin (relative). */
int eerl__pred_covered(const struct eerl__pred *p, const eerl_obs *o, double margin);

/* One model alone, for tests: fits log(y) on the wanted features of rows x (n x F_COUNT raw
 * token counts, row-major), as Eq. 2; _form with eerl__pred_fit_opts's min_t and, linear, y
 * itself. */
int eerl__model_fit(struct eerl__model *m, unsigned want, const double *x, const double *y,
                    size_t n, struct eerl__pred_work *w);
int eerl__model_fit_form(struct eerl__model *m, unsigned want, const double *x, const double *y,
                         size_t n, struct eerl__pred_work *w, double min_t, int linear);
double eerl__model_predict(const struct eerl__model *m, const double *x);

#endif

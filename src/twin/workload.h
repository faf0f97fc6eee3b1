/* GRPO workload of the twin: per update P prompts x K responses, all B = P*K consumed by
 * training. Response lengths are lognormal with a median that drifts over updates, clipped at the
 * sequence limit. Valid training tokens N are the response tokens of the consumed batch that are
 * in the loss mask (verl's response_mask, NeMo-RL's token_mask): every response token, since
 * groups whose K rewards are all equal (zero advantage) stay in the loss. Only the optional
 * dynamic-sampling filter (DAPO) drops those groups from the batch, and then from N and from the
 * tokens log-prob and training compute. Owns the workload and divergence random streams; knows
 * nothing of clocks or GPUs. */
#ifndef EERL_TWIN_WORKLOAD_H
#define EERL_TWIN_WORKLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "eerl/tools/twin.h"
#include "twin/rng.h"

struct eerl__wl_params {
    unsigned seq_limit;        /* response tokens; longer responses are truncated here */
    double len_median;         /* median response length at update 0, tokens */
    double len_sigma;          /* lognormal shape of one update's lengths */
    double drift;              /* growth of log median per update */
    double p_zero;             /* probability a group has equal rewards (zero advantage) */
    unsigned P[3], K[3], B[3]; /* sizes S, M, L */
    int dyn_filter;            /* dynamic-sampling filter: drop zero-advantage groups (off: 0) */
    int overlong_filter;       /* overlong filtering: truncated responses leave the loss (off: 0) */
    struct eerl_twin_scenario scn; /* zero: steady (the preset's drift): eerl/tools/twin.h */
    /* The length level wandering between updates (off: 0): update u's log median is shifted by
     * x_u, an AR(2) process over updates, x_u = ar1 x_(u-1) + ar2 x_(u-2) + innovation, of
     * stationary sd len_upd_sd (AR(1) when ar2 is 0), the same for every setting of a seed, and
     * its shape is len_sigma exp(len_upd_shape x_u). The expected values average over x_u's
     * stationary law. */
    double len_upd_sd;
    double len_upd_ar1, len_upd_ar2;
    double len_upd_shape;
};

/* One batch of responses. */
struct eerl__wl_batch {
    double G;        /* response tokens generated */
    double N;        /* valid training tokens: response tokens in the loss mask (= C) */
    double C;        /* tokens log-prob and training compute: the consumed batch's responses
                      * (all of G, or what the dynamic-sampling and overlong filters keep) */
    double L;        /* longest response */
    double mean_len; /* G / responses */
    unsigned n_resp, n_trunc;
};

struct eerl__wl {
    struct eerl__wl_params p;
    unsigned P, K, B;
    double div_sigma;
    double run_f; /* this run's length factor (divergence: the policy drifting apart), 1 without */
    struct eerl__rng rng; /* shared by matched seeds */
    struct eerl__rng div; /* per run */
    struct eerl__rng lat; /* the length level's stream, shared by matched seeds */
    uint64_t seed;
    unsigned lat_next;    /* updates of the length level drawn so far */
    double lat_x, lat_xp; /* the level at updates lat_next-1 and lat_next-2 */
    /* Batches drawn before (eerl__wl_draw), handed out instead of drawing again for updates
     * below n_replay: the oracles run every candidate setting on the same seeds, whose batches
     * are the same under every setting. Borrowed; only without divergence. NULL: draw. */
    const struct eerl__wl_batch *replay;
    unsigned n_replay;
};

/* The median's log shift (drift included) and the shape's multiplier at update u (the
 * scenario's; the length level x_u of a seed is added by eerl__wl_next). */
void eerl__wl_scenario_at(const struct eerl__wl_params *p, unsigned u, double *ret_shift,
                          double *ret_spread);
/* 1 if the scenario's parameters are valid (a steady one must be all zero). */
int eerl__wl_scenario_ok(const struct eerl_twin_scenario *s);

/* size: 'S', 'M', 'L'. EERL_EINVAL for another size or an invalid parameter. */
int eerl__wl_size_index(char size);
int eerl__wl_init(struct eerl__wl *w, const struct eerl__wl_params *p, char size, uint64_t seed,
                  uint64_t run_id, double divergence);
/* Draws update u's batch. Consumes a fixed number of workload draws per update whatever the
 * divergence, so matched seeds see the same stream in every setting. */
void eerl__wl_next(struct eerl__wl *w, unsigned u, struct eerl__wl_batch *ret);
/* The batches of updates 0..n-1 of a seed without divergence, as eerl__wl_next draws them. */
int eerl__wl_draw(const struct eerl__wl_params *p, char size, uint64_t seed, unsigned n,
                  struct eerl__wl_batch *ret);
/* The expected batch of update u (no randomness): E[G], E[N], E[C], E[L]. */
int eerl__wl_expected(const struct eerl__wl_params *p, char size, unsigned u,
                      struct eerl__wl_batch *ret);

#endif

/* The runtime session's books of one update and the observation built from them. The books
 * hold, per pool and phase, the busy intervals of the update in progress (a pool does one thing
 * at a time: only the innermost open phase accrues time; a refit begun inside generation, as
 * in-flight loops do, pauses it), the first refit's start and the update's start. At the
 * update's end the observation takes the work from the framework, the time and every energy
 * figure from the meter over those intervals. Pure but for the meter reads; owns nothing. */
#ifndef EERL_RUNTIME_OBSERVE_H
#define EERL_RUNTIME_OBSERVE_H

#include <stddef.h>

#include "eerl/core.h"
#include "eerl/meter.h"
#include "eerl/runtime.h"

#define EERL__RT_IV_MAX 16 /* intervals of one phase of one pool within an update (then merged) */

struct eerl__rt_iv {
    double t0, t1;
};

struct eerl__rt_books {
    int in_phase[2][EERL_PHASE_COUNT];
    /* Open phases of each pool, innermost last. */
    eerl_phase stack[2][EERL_PHASE_COUNT];
    unsigned depth[2];
    struct eerl__rt_iv iv[2][EERL_PHASE_COUNT][EERL__RT_IV_MAX];
    size_t n_iv[2][EERL_PHASE_COUNT];
    double refit_start[2]; /* first refit begin of the pool in this update, or -1 */
    double t_update0;      /* the update's start */
};

/* Empty books of an update starting at t. */
void eerl__books_start(struct eerl__rt_books *b, double t);
/* pool begins phase at t (the phase it interrupts stops accruing). */
void eerl__books_begin(struct eerl__rt_books *b, unsigned pool, eerl_phase phase, double t);
/* pool ends phase at t. 1 and *ret_outer if a phase it had interrupted resumes, else 0. */
int eerl__books_end(struct eerl__rt_books *b, unsigned pool, eerl_phase phase, double t,
                    eerl_phase *ret_outer);
/* 1 if pool is in any phase. */
int eerl__books_busy(const struct eerl__rt_books *b, unsigned pool);

/* Where the observation's energy comes from: the meter over the pools' GPUs. */
struct eerl__obs_source {
    eerl_meter *meter;
    eerl_mode mode;
    int colocated;
    const unsigned *pool_gpus[2];
    size_t n_pool[2];
};

/* The observation of the update the books hold, ending at t_end with the work w (its setting
 * and carryover flag left to the caller); the meter flags OR-ed into *flags, each pool's busy
 * time into busy and each phase's share of time at the software power cap into capped (-1 where
 * the phase did not run or no sample read the clock event reasons). 0, or the meter's error
 * with why. */
int eerl__obs_build(const struct eerl__rt_books *b, const struct eerl__obs_source *src,
                    const eerl_rt_work *w, double t_end, eerl_obs *o, unsigned *flags,
                    double busy[2], double capped[EERL_PHASE_COUNT], char *why, size_t why_len);

/* Across nodes: each node's energy over [t0, t1] into sum[0..n_nodes-1] and its GPUs' meter
 * flags OR-ed into flags[]; node_at[i] is the node of the meter's GPU i (n_all of them). 0, or
 * EERL_ENOMEM or the meter's error. */
int eerl__obs_nodes(eerl_meter *meter, double t0, double t1, const unsigned *node_at, size_t n_all,
                    unsigned n_nodes, double *sum, unsigned *flags);

#endif

/* The static oracle (oracle.c; declared in eerl/tools/sim.h, eerl_sim_oracle) and, here, the
 * noise-free twin runs it and the windowed oracle (schedule.c) are scored on. Owns nothing
 * between calls; prints nothing. */
#ifndef EERL_SIM_ORACLE_H
#define EERL_SIM_ORACLE_H

#include <stddef.h>
#include <stdint.h>

#include "eerl/core.h"
#include "eerl/tools/twin.h"
#include "eerl/tools/analysis.h"
#include "eerl/tools/sim.h"

/* One noise-free run of a seed (cfg) under a schedule, gen[k]/train[k] in window k (n_sched 1:
 * one pair held), and its per-window totals T, E, N over updates 1..updates-1 (0-based; update
 * 0 left out as the analysis leaves it out). replay (NULL: draw): the seed's batches from
 * eerl__wl_draw, the same under every setting, so an oracle draws them once. */
struct eerl__wl_batch;
int eerl__sim_twin_windows(const eerl_twin_preset *p, const struct eerl_twin_config *cfg,
                           const unsigned *gen, const unsigned *train, size_t n_sched,
                           unsigned window, unsigned updates, const struct eerl__wl_batch *replay,
                           double *T, double *E, double *N);

#endif

/* The static oracle (oracle.c): the best setting held for a whole run, found by the twin alone,
 * and the noise-free twin runs it and the windowed oracle (schedule.h) are scored on. Owns
 * nothing between calls; prints nothing. */
#ifndef EERL_SIM_ORACLE_H
#define EERL_SIM_ORACLE_H

#include <stddef.h>
#include <stdint.h>

#include "eerl/core.h"
#include "eerl/tools/twin.h"
#include "analysis/analysis.h"

/* Oracle: the best static generation/training setting (idle: the twin's idle clock in the modes
 * that have one) over updates [EERL__AN_FIRST_UPDATE, updates] of the given seeds, whose
 * matched-seed throughput change is >= -allowed_loss, on a 45 MHz grid then 15 MHz around the
 * best. Runs are noise-free (divergence 0): the oracle is the setting's true effect. */
struct eerl__sim_oracle {
    eerl_setting setting;
    double saving_pct, dq_pct; /* geometric means over the seeds */
    double seed_saving_pct[EERL__AN_SEEDS_MAX], seed_dq_pct[EERL__AN_SEEDS_MAX];
    unsigned evaluated; /* settings evaluated */
};
int eerl__sim_oracle(const eerl_twin_preset *preset, eerl_mode mode, unsigned n_gen,
                     unsigned n_train, char size, unsigned updates, const uint64_t *seeds,
                     size_t n_seeds, double allowed_loss, struct eerl__sim_oracle *ret);

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

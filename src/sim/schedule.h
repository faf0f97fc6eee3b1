/* The windowed oracle (schedule.c): the best schedule of settings that may change every window
 * updates, scored against the static oracle (oracle.h). Owns the schedule it returns (free it
 * with eerl__sim_schedule_free); prints nothing. */
#ifndef EERL_SIM_SCHEDULE_H
#define EERL_SIM_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

#include "eerl/core.h"
#include "eerl/tools/twin.h"
#include "sim/oracle.h"

/* The windowed oracle: the best schedule of settings that may change every `window`
 * updates (window k: 0-based updates [k window, (k + 1) window)), held from update 1 like the
 * static oracle, whose whole-run matched-seed throughput change over the same updates meets the
 * same allowance. One schedule for all the seeds, as the static oracle is one setting. It
 * chooses among the pairs within a few grid steps of the static oracle's setting (and the
 * governor), by a Lagrangian split of energy against time per window and then single-window
 * moves that use the allowance left, and scores the schedule it found on runs that switch
 * clocks at the window boundaries. The static oracle's setting is one schedule: where nothing
 * beats it (or a schedule does not hold the allowance once run), the windowed oracle holds it,
 * so its saving is never below the static one's. */
struct eerl__sim_schedule {
    unsigned window, n_windows;
    unsigned *gen_mhz, *train_mhz; /* per window (EERL_TWIN_GOV: governor); owned */
    double saving_pct, dq_pct;     /* geometric means over the seeds, scored on switching runs */
    double seed_saving_pct[EERL__AN_SEEDS_MAX], seed_dq_pct[EERL__AN_SEEDS_MAX];
    unsigned changes;    /* windows whose setting differs from the window before */
    unsigned candidates; /* settings each window chose among */
    int held_static;     /* 1: the static oracle's setting in every window */
};
int eerl__sim_oracle_windowed(const eerl_twin_preset *preset, eerl_mode mode, unsigned n_gen,
                              unsigned n_train, char size, unsigned updates, const uint64_t *seeds,
                              size_t n_seeds, double allowed_loss, unsigned window,
                              const struct eerl__sim_oracle *stat, struct eerl__sim_schedule *ret);
void eerl__sim_schedule_free(struct eerl__sim_schedule *s);
/* The setting of window k as the controller would report it (idle clock where the mode has one). */
void eerl__sim_schedule_setting(const eerl_twin_preset *preset, eerl_mode mode,
                                const struct eerl__sim_schedule *s, unsigned k, eerl_setting *ret);

#endif

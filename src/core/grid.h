/* The clock grid: the GPU's supported SM clocks (highest first, unique), the governor's peak,
 * where grid steps count from, and the configured idle clock. Every clock it hands out is a
 * supported one or EERL_CLOCK_GOVERNOR. Built by the controller at construction (grid.c owns
 * the clock list); read-only after that, for every part of the core. */
#ifndef EERL_CORE_GRID_H
#define EERL_CORE_GRID_H

#include <stddef.h>

#include "eerl/core.h"

struct eerl__grid {
    unsigned *clocks; /* supported clocks, highest first, unique */
    size_t n;
    unsigned peak; /* the clock the governor runs at */
    /* Where grid steps count from (eerl__grid_step), standing for the governor: the peak, or
     * the highest clock below it (the paper's synchronous search). */
    unsigned top;
    unsigned idle_mhz; /* cfg.idle_mhz: a pool's clock while it waits (0: none) */
};

/* Copies, sorts and deduplicates clocks (n >= 1, none 0); top = peak. EERL_ENOMEM. */
int eerl__grid_init(struct eerl__grid *g, const unsigned *clocks, size_t n, unsigned peak,
                    unsigned idle_mhz);
void eerl__grid_free(struct eerl__grid *g);
/* Grid steps count from the highest supported clock below the peak (if there is one). */
void eerl__grid_top_below_peak(struct eerl__grid *g);

/* The supported clock nearest mhz (ties go up); EERL_CLOCK_GOVERNOR at or above the peak. */
unsigned eerl__grid_snap(const struct eerl__grid *g, unsigned mhz);
/* mhz moved by delta MHz and snapped, at least one supported clock in delta's direction. Grid
 * positions are g->top - k * |delta|; a step to top or above is the governor.
 * EERL_CLOCK_GOVERNOR counts as the peak and anything at or above the peak is the governor.
 * Returns 0, or EERL_ERANGE when a step down would go below the lowest clock. */
int eerl__grid_step(const struct eerl__grid *g, unsigned mhz, int delta, unsigned *ret);
/* Clock value for ordering: the governor counts as the peak. */
unsigned eerl__grid_eff(const struct eerl__grid *g, unsigned mhz);
/* A setting with these group clocks and the configured idle clock (none if all governor). */
eerl_setting eerl__grid_setting(const struct eerl__grid *g, unsigned gen, unsigned train);
/* base with group (generation or training) set to clock, idle clock as configured. */
eerl_setting eerl__grid_with_group(const struct eerl__grid *g, const eerl_setting *base, int group,
                                   unsigned clock);
/* A descent's first move: training drop MHz below the governor's peak, generation at the
 * governor. Returns 0 with *ret set, or EERL_ERANGE when no supported clock lies below the peak
 * (*ret is then the governor setting). */
int eerl__grid_first_train_drop(const struct eerl__grid *g, unsigned drop, eerl_setting *ret);

#endif

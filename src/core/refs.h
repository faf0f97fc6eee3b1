/* The governor references: a ring of the most recent governor observations (cfg.ref_window) and
 * the predictor fitted on them (Eq. 2, Appendix B), refitted at every addition with the fit's
 * options. Part of the controller's record (record.c is its only writer); every judge and
 * proposer reads it through the context (context.h). refs.c owns the ring and the working
 * memory of the fit. */
#ifndef EERL_CORE_REFS_H
#define EERL_CORE_REFS_H

#include <stddef.h>

#include "eerl/core.h"
#include "core/predictor.h"

struct eerl__refs {
    eerl_obs *obs;         /* the ring, cap entries */
    const eerl_obs **ptrs; /* ptrs[i] = the i-th reference, oldest first (kept after each add) */
    size_t cap, n, head;
    int layout;
    struct eerl__pred pred;
    struct eerl__pred_work work;
    double min_t;  /* eerl__pred_fit_opts's: 0 (the paper's fit) unless a judge asks otherwise */
    unsigned opts; /* eerl__pred_fit_opts's: 0 (the paper's form) unless asked */
};

int eerl__refs_init(struct eerl__refs *r, size_t cap, int layout);
void eerl__refs_free(struct eerl__refs *r);
/* Adds a governor observation (the oldest goes when full) and refits the predictor. */
void eerl__refs_add(struct eerl__refs *r, const eerl_obs *obs);
/* The i-th reference, oldest first, i < r->n. */
const eerl_obs *eerl__refs_at(const struct eerl__refs *r, size_t i);

#endif

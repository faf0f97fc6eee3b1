/* Run analysis (analysis.c): per-update series of runs (from the simulated cluster's driver or
 * read back from traces) turned into the paper's comparisons: matched-seed geometric means of
 * per-seed ratios (Appendix A) over the whole run and before/after the lock (Tables 4, 5), and
 * the workload-normalized comparison against a governor model fitted on pooled governor runs
 * (Appendix E). `eerl sim` and `eerl analyze` both go through this one implementation, so the
 * figures of a simulation and of its traces agree bit for bit. Owns the series it builds; prints
 * nothing. */
#ifndef EERL_RUNTIME_ANALYSIS_H
#define EERL_RUNTIME_ANALYSIS_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "eerl/core.h"

/* One run: what the runtime observed per update. */
struct eerl__an_series {
    char role[16]; /* "governor" or "controller" */
    int has_seed;
    uint64_t seed;
    eerl_mode mode;
    unsigned peak_mhz; /* the governor peak the controller was built with (0 unknown) */
    size_t n, cap;
    uint64_t *update;
    double *G, *N, *L, *T, *E;
    eerl_setting *setting; /* observed (in force) */
    int locked;            /* a lock event was seen */
    uint64_t lock_update;  /* the update whose observation locked (after lock: later updates) */
    eerl_setting lock_setting;
    /* For reports (clocks per update): controller state after each update, and event marks. */
    int *state;
    unsigned *marks; /* bit per eerl_event_kind seen at that update */
};

void eerl__an_series_init(struct eerl__an_series *s);
void eerl__an_series_free(struct eerl__an_series *s);
int eerl__an_series_add(struct eerl__an_series *s, uint64_t update, double G, double N, double L,
                        double T, double E, const eerl_setting *setting, int state, unsigned marks);

/* Reads a trace written by the runtime session: header, "run" line (role, seed) and update lines.
 * EERL_EPARSE / EERL_ESYS with why naming the file, line and problem. */
int eerl__an_load_trace(const char *path, struct eerl__an_series *ret, char *why, size_t len);

struct eerl__an_window {
    double updates;    /* updates counted (mean over seeds in an aggregate) */
    double saving_pct; /* NaN when no seed has the window */
    double dq_pct;
    unsigned seeds; /* seeds that contributed */
};

struct eerl__an_seed {
    uint64_t seed;
    struct eerl__an_window whole, before, after;
    int locked;
    eerl_setting lock_setting;
};

#define EERL__AN_SEEDS_MAX 256

struct eerl__an_result {
    size_t n_seeds;
    struct eerl__an_seed seed[EERL__AN_SEEDS_MAX];
    struct eerl__an_window whole, before, after;
    int lock_same; /* every seed locked the same first setting */
    int any_locked;
    eerl_setting lock_setting; /* valid when lock_same */
    /* Appendix E (needs at least one governor run): ratios of sums to a pooled governor model. */
    int normalized;
    struct eerl__an_window norm_whole, norm_after;
    double gov_time_spread_pct, gov_energy_spread_pct; /* max - min of the governors' ratios */
    unsigned norm_governors;
};

/* The first update counted: the paper leaves each run's first update out (its intervals start
 * at update 2). */
#define EERL__AN_FIRST_UPDATE 2

/* Matched-seed comparison: gov[i] pairs with ctl[i]. */
int eerl__an_compare(const struct eerl__an_series *const *gov,
                     const struct eerl__an_series *const *ctl, size_t n,
                     struct eerl__an_result *ret);

/* Appendix E on top of a compare result: fits the governor model on every governor series
 * (pooled) and scores every controller series against it. */
int eerl__an_normalize(const struct eerl__an_series *const *gov, size_t n_gov,
                       const struct eerl__an_series *const *ctl, size_t n_ctl,
                       struct eerl__an_result *res);

/* JSON pieces shared by `eerl sim --json` and `eerl analyze --json`. */
json_t *eerl__an_setting_json(const eerl_setting *s);
json_t *eerl__an_num(double v); /* null for NaN */
json_t *eerl__an_window_json(const struct eerl__an_window *w, const eerl_setting *setting,
                             int setting_varies);
/* "1695/1425" style ("Gov" for the governor); buf of at least 32. */
const char *eerl__an_setting_str(const eerl_setting *s, char *buf, size_t len);

#endif

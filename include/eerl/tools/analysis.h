/* Run analysis, in the tools library (src/analysis): per-update series of runs (from the
 * simulated cluster's driver or read back from traces) turned into the paper's comparisons:
 * matched-seed geometric means of per-seed ratios (Appendix A) over the whole run and
 * before/after the lock (Tables 4, 5), and the workload-normalized comparison against a governor
 * model fitted on pooled governor runs (Appendix E). `eerl sim` and `eerl analyze` both go
 * through this one implementation, so the figures of a simulation and of its traces agree bit for
 * bit. Also Appendix B's forward test of the governor predictor over a trace's governor updates
 * (`eerl analyze --forward-test`), through the controller's own predictor, and one trace's own
 * estimate of what eerl saved (`eerl analyze TRACE`). Owns the series it builds; prints
 * nothing. */
#ifndef EERL_TOOLS_ANALYSIS_H
#define EERL_TOOLS_ANALYSIS_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "eerl/core.h"
#include "eerl/estimate.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One run: what the runtime observed per update. */
struct eerl_an_series {
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
    /* Read from a trace only (NULL otherwise): each update's whole observation, for the
     * forward test, and the header's time tolerance for checking it. */
    eerl_obs *obs;
    double time_tolerance;
    /* From a trace's header and run line (eerl sim writes them): the allowed loss the run was
     * configured with (0 unknown) and the run-to-run divergence of its work (-1 unknown: a real
     * cluster's runs differ by whatever they differ). */
    double allowed_loss;
    double divergence;
    /* Read from a trace only: the line number of a last line cut short (a write that did not
     * finish: a full disk, a crash), left out; 0 when the trace ends with a whole line. */
    size_t cut_line;
};

void eerl_an_series_init(struct eerl_an_series *s);
void eerl_an_series_free(struct eerl_an_series *s);
int eerl_an_series_add(struct eerl_an_series *s, uint64_t update, double G, double N, double L,
                       double T, double E, const eerl_setting *setting, int state, unsigned marks);

/* Reads a trace written by the runtime session: header, "run" line (role, seed) and update lines.
 * A last line without its newline that is not JSON is a write cut short: every whole line before
 * it is read and ret->cut_line names it. EERL_EPARSE / EERL_ESYS with why naming the file, line
 * and problem. */
int eerl_an_load_trace(const char *path, struct eerl_an_series *ret, char *why, size_t len);

struct eerl_an_window {
    double updates;    /* updates counted (mean over seeds in an aggregate) */
    double saving_pct; /* NaN when no seed has the window */
    double dq_pct;
    unsigned seeds; /* seeds that contributed */
};

struct eerl_an_seed {
    uint64_t seed;
    struct eerl_an_window whole, before, after;
    int locked;
    eerl_setting lock_setting;
    uint64_t lock_update; /* the update whose observation locked (valid when locked) */
};

#define EERL_AN_SEEDS_MAX 256

struct eerl_an_result {
    size_t n_seeds;
    struct eerl_an_seed seed[EERL_AN_SEEDS_MAX];
    struct eerl_an_window whole, before, after;
    int lock_same; /* every seed locked the same first setting */
    int any_locked;
    eerl_setting lock_setting; /* valid when lock_same */
    /* Appendix E (needs at least one governor run): ratios of sums to a pooled governor model. */
    int normalized;
    struct eerl_an_window norm_whole, norm_after;
    double gov_time_spread_pct, gov_energy_spread_pct; /* max - min of the governors' ratios */
    unsigned norm_governors;
};

/* The first update counted: the paper leaves each run's first update out (its intervals start
 * at update 2). */
#define EERL_AN_FIRST_UPDATE 2

/* Matched-seed comparison: gov[i] pairs with ctl[i]. */
int eerl_an_compare(const struct eerl_an_series *const *gov,
                    const struct eerl_an_series *const *ctl, size_t n, struct eerl_an_result *ret);

/* Appendix E on top of a compare result: fits the governor model on every governor series
 * (pooled) and scores every controller series against it. */
int eerl_an_normalize(const struct eerl_an_series *const *gov, size_t n_gov,
                      const struct eerl_an_series *const *ctl, size_t n_ctl,
                      struct eerl_an_result *res);

/* The figure a comparison's verdict is judged on, and its headline: the matched-seed whole run
 * when a seed's runs did the same work (exact: the comparison is exact), else the
 * workload-normalized whole run (Appendix E), which takes the work out. */
const struct eerl_an_window *eerl_an_verdict_window(const struct eerl_an_result *res, int exact);
/* The fewest and most updates the before (after = 0) or after-lock window counted per seed. */
void eerl_an_window_range(const struct eerl_an_result *res, int after, double *ret_min,
                          double *ret_max);
/* The comparison as JSON, shared by `eerl sim --json` and `eerl analyze --json`: the headline
 * (saving_pct, dq_pct: the verdict's figure), "rows" ("same-work" or "normalized"), "whole",
 * "before_lock", "after_lock" (matched seeds, with the per-seed update range), "normalized",
 * "verdict" (allowed_loss 0: no verdict, null) and "seeds". */
json_t *eerl_an_result_json(const struct eerl_an_result *res, int exact, double allowed_loss);

/* ---- Appendix B: forward test of the governor predictor ------------------------------------ */

struct eerl_an_fwd_cfg {
    unsigned fit;          /* governor updates fitted (15) */
    unsigned predict;      /* governor updates predicted after them (3) */
    unsigned step;         /* advance between blocks (3) */
    int consecutive;       /* blocks only within stretches of consecutive update numbers */
    uint64_t first_update; /* updates before it are warm-up (EERL_AN_FIRST_UPDATE) */
};

/* What a trace offers the forward test: its updates from cfg->first_update on whose observed
 * setting is the governor and that pass eerl_obs_check. */
struct eerl_an_fwd_count {
    size_t lines;        /* update lines */
    size_t warmup;       /* before cfg->first_update */
    size_t not_governor; /* observed setting not the governor (candidate, locked, ...) */
    size_t invalid;      /* governor updates refused by eerl_obs_check */
    size_t used;         /* governor updates the test runs over */
    size_t gaps;         /* places where two used updates are not consecutive update numbers */
    size_t longest;      /* longest stretch of used updates with consecutive update numbers */
};

/* Absolute prediction errors in percent, one per predicted update, appended trace after trace. */
struct eerl_an_fwd_errs {
    size_t n, cap;
    unsigned blocks;
    unsigned gap_blocks; /* blocks whose fitted and predicted updates are not consecutive */
    double *tput_const, *tput_model, *energy_const, *energy_model;
};

struct eerl_an_fwd_stat {
    double median, p90; /* NaN without predictions */
};

struct eerl_an_fwd_summary {
    unsigned blocks, gap_blocks;
    size_t predictions;
    struct eerl_an_fwd_stat tput_const, tput_model, energy_const, energy_model;
};

void eerl_an_fwd_errs_init(struct eerl_an_fwd_errs *e);
void eerl_an_fwd_errs_free(struct eerl_an_fwd_errs *e);
/* Appends src's errors and blocks to dst. */
int eerl_an_fwd_errs_merge(struct eerl_an_fwd_errs *dst, const struct eerl_an_fwd_errs *src);

/* Counts s's updates (s read by eerl_an_load_trace). EERL_EINVAL when s has no observations. */
int eerl_an_fwd_count(const struct eerl_an_series *s, const struct eerl_an_fwd_cfg *cfg,
                      struct eerl_an_fwd_count *ret);

/* Fits the predictor (Eq. 2, the controller's eerl__pred_fit) on cfg->fit governor updates,
 * predicts the next cfg->predict, advances by cfg->step, and appends per-update errors of
 * throughput (valid tokens / s) and update energy to acc, for the token-work model and for the
 * constant reference (the fit window's mean throughput and mean update energy). Without
 * cfg->consecutive the governor updates are one sequence in trace order (gaps left by candidate
 * updates are bridged, as the controller's reference set bridges them); with it each stretch of
 * consecutive update numbers is tested alone. EERL_ENODATA when no block fits (acc unchanged);
 * EERL_EINVAL for bad cfg or when the predictor refuses a window (why names its updates). */
int eerl_an_forward_test(const struct eerl_an_series *s, const struct eerl_an_fwd_cfg *cfg,
                         struct eerl_an_fwd_errs *acc, char *why, size_t len);

/* Medians and 90th percentiles (linear between order statistics) of acc's errors. */
int eerl_an_fwd_summarize(const struct eerl_an_fwd_errs *acc, struct eerl_an_fwd_summary *ret);

/* JSON pieces shared by `eerl sim --json` and `eerl analyze --json`. */
json_t *eerl_an_setting_json(const eerl_setting *s);
json_t *eerl_an_num(double v); /* null for NaN */
json_t *eerl_an_window_json(const struct eerl_an_window *w, const eerl_setting *setting,
                            int setting_varies);
/* "1695/1425" style ("Gov" for the governor); buf of at least 32. */
const char *eerl_an_setting_str(const eerl_setting *s, char *buf, size_t len);

/* ---- one trace's own estimate (`eerl analyze TRACE`) ----------------------------------------- */

/* The run's own estimate of what eerl saved (eerl/estimate.h), from the per-update records the
 * session wrote on its update lines (trace format 2), summed by the same aggregator the session
 * used. A trace without them (format 1, or a line without one) has them recomputed from its
 * observations by the same forward predictor, in trace order, so an old observe-only trace gets
 * the same self-check; such a trace without an "unexplained" line has its calibration replayed
 * (eerl_trace_measure_unexplained, eerl/tools/trace.h) to say whether the work explains the
 * time, as a session would have said it. */
struct eerl_an_est {
    eerl_estimate estimate; /* the totals, as eerl_rt_estimate gives a session's */
    unsigned first_update;  /* the first update counted */
    size_t lines;           /* update lines read */
    size_t recorded;        /* of them, with the session's own record */
    size_t recomputed;      /* of them, recomputed here */
    int has_unexplained;    /* the trace has an "unexplained" line (the estimate says so) */
    int has_summary;        /* the trace has a closing "estimate" line */
};

/* Reads the trace at path into ret. EERL_ESYS / EERL_EPARSE / EERL_EVERSION with why naming the
 * file and line; a last line cut short (no newline, not JSON) is left out. */
int eerl_an_estimate(const char *path, struct eerl_an_est *ret, char *why, size_t len);

#ifdef __cplusplus
}
#endif
#endif

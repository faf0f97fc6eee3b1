/* The controller's record of the search: the lock and the locked setting, the counters of
 * observations, trials and refreshes, the block length, the governor references with their
 * predictor, and the events. record.c is its only writer: the struct is defined there and
 * nowhere else, so the compiler, not a convention, keeps everyone else to these calls.
 *
 * Two kinds of callers. The controller (controller.c) builds it, counts each observation in,
 * stamps and hands out the events and reads the status. Judges, proposers and the life cycle act
 * on it through the actions below, reaching it through their context (context.h: cx->rec). */
#ifndef EERL_CORE_RECORD_H
#define EERL_CORE_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "eerl/core.h"
#include "core/refs.h"

struct eerl__ctl_xopts;

struct eerl__rec;

/* ---- for the controller ---- */

/* cfg and x must outlive the record (the controller's copies). EERL_ENOMEM. */
int eerl__rec_new(const eerl_ctl_config *cfg, const struct eerl__ctl_xopts *x, int layout,
                  struct eerl__rec **ret);
void eerl__rec_free(struct eerl__rec *rec);
const struct eerl__refs *eerl__rec_refs(const struct eerl__rec *rec);
/* An observation of update `update` arrives: accepted, or refused (counted either way); the
 * events that follow carry its number. */
void eerl__rec_intake(struct eerl__rec *rec, uint64_t update, int accepted);
/* Stamps this observation's events with the state and request that followed them. */
void eerl__rec_finish(struct eerl__rec *rec, eerl_ctl_state state, const eerl_setting *next);
size_t eerl__rec_take(struct eerl__rec *rec, eerl_event *buf, size_t cap);
/* The record's part of the status: locked, locked_setting, observed, rejected, trials,
 * refreshes, events_dropped, block_updates, references. */
void eerl__rec_status(const struct eerl__rec *rec, eerl_ctl_status *ret);
/* The reference fit's options (eerl__pred_fit_opts's min_t and opts; 0, 0 = the paper's fit),
 * as the judge's setup asks, before any reference. */
void eerl__rec_set_fit(struct eerl__rec *rec, double min_t, unsigned opts);

/* ---- the actions (judges, proposers, the life cycle) ---- */

/* 1 when a setting is locked, with it in *ret (NULL: not wanted). */
int eerl__rec_locked(const struct eerl__rec *rec, eerl_setting *ret);
/* Appends an event for the current update, reason printf-style; ratios start as NaN, state and
 * next are filled in when the observation's decision is complete. Returns the event to fill. */
eerl_event *eerl__rec_emit(struct eerl__rec *rec, eerl_event_kind kind, const eerl_setting *cand,
                           const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* lock: the search settled on s: locked, *next = s (next NULL: the request stays as it is), and
 * the LOCK event "lock S: why". start_locked: at construction (a judge's init): s locked, no
 * event (the controller requests it from the first update). adjust: the locked setting moves to
 * s (*next = s), ADJUST event. refresh: governor measurements while locked begin (counted,
 * *next = governor), REFRESH event about `locked`. */
void eerl__rec_lock(struct eerl__rec *rec, const eerl_setting *s, eerl_setting *next,
                    const char *why);
void eerl__rec_start_locked(struct eerl__rec *rec, const eerl_setting *s);
void eerl__rec_adjust(struct eerl__rec *rec, const eerl_setting *s, eerl_setting *next,
                      const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void eerl__rec_refresh(struct eerl__rec *rec, const eerl_setting *locked, eerl_setting *next,
                       const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* A candidate's trial was judged (counted in the status). */
void eerl__rec_trial_done(struct eerl__rec *rec);
/* In-flight: the block length chosen (updates per block, shown in the status). */
void eerl__rec_set_block(struct eerl__rec *rec, unsigned updates);
/* Adds a governor observation to the references and refits the predictor. */
void eerl__rec_ref_add(struct eerl__rec *rec, const eerl_obs *obs);
/* One governor update of a counted stretch (calibration, references between trials, a governor
 * block, a refresh): adds it to the references, counts it, and while *count < limit emits the
 * HOLD event "<what> count/limit" and returns 0; returns 1, emitting nothing, on the last one. */
int eerl__rec_ref_count(struct eerl__rec *rec, const eerl_obs *obs, unsigned *count, unsigned limit,
                        const char *what, const eerl_setting *next);
/* Calibration, the same for every judge: one governor update of it, added to the references
 * with the HOLD "calibrating k/n"; 1 on the last (no event: the judge says what it fitted).
 * EERL__CAL_PAPER: the paper's, cfg.calibration_updates after the first warmup_updates (an
 * experimental option) updates the controller observes, which are left out with a HOLD saying so
 * (the paper scores its runs and fits its governor models from update 2, Tables 4 and 5, Appendix
 * E: the first update carries the start-up, an asynchronous run's pools not yet overlapping, 2.5
 * times a later update in flight on the twin, and inside a 15- or 45-update fit it skews the
 * predictor and, in flight, the noise that sets the block length, 14% instead of 2%).
 * EERL__CAL_FAST: the strategies beyond the paper, cfg.fast_calibration_updates. */
enum eerl__cal { EERL__CAL_PAPER, EERL__CAL_FAST };
int eerl__rec_calibrate(struct eerl__rec *rec, int kind, const eerl_obs *obs, unsigned *count,
                        const eerl_setting *next);
/* EERL__CAL_FAST, and past cfg.fast_calibration_updates (a calibration that goes on: the work
 * moves, the reference is not yet known well enough) each governor update joins the reference
 * with no event: 1 when the calibration's length is reached. */
int eerl__rec_calibrate_fast(struct eerl__rec *rec, const eerl_obs *obs, unsigned *count,
                             const eerl_setting *next);
/* A calibration taken up again (EERL__MOVE_CALIBRATE: a prior refused after the short one its
 * gate allowed): *count is the governor updates the reference holds, and the HOLD event says
 * how many more the calibration takes before the search. */
void eerl__rec_calibrate_on(struct eerl__rec *rec, unsigned *count, const eerl_setting *next);
/* A prior's gate on the fast calibration (eerl_ctl_set_prior): once `updates` governor updates
 * are in (fewer than cfg.fast_calibration_updates), gate(arg) is asked once; 1 ends the
 * calibration there, 0 lets it go on to its full length. Without a gate the calibration is as
 * above. */
void eerl__rec_set_gate(struct eerl__rec *rec, unsigned updates, int (*gate)(void *), void *arg);

#endif

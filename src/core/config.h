/* Internal side of the configuration (config.c): reading a caller's size-tagged
 * eerl_ctl_config into this release's struct. */
#ifndef EERL_CORE_CONFIG_H
#define EERL_CORE_CONFIG_H

#include "eerl/core.h"

/* The revision each decision rule is at: the one the judges hold, the default, and the only
 * value a controller takes (eerl__ctl_xopts_check). A change meant to change decisions raises its
 * number, so that a trace header names the rule that decided it (docs/trace-format.md). */
#define EERL__INFLIGHT_REVISION 5 /* eerl's judge and proposer in in-flight mode */
#define EERL__EERL_REVISION 12    /* eerl's judge and proposers in the other modes */
#define EERL__PAPER_REVISION 1    /* the paper strategy's synchronous search grid */

/* *ret_cfg = the mode's defaults overwritten by the fields a caller's struct of in->size bytes
 * holds, with size set to this release's. EERL_EINVAL when in->size is not a size this release
 * reads. */
int eerl__ctl_config_import(eerl_mode mode, const eerl_ctl_config *in, eerl_ctl_config *ret_cfg);

/* The controller's experimental options (the table's rows flagged EERL_OPTION_EXPERIMENTAL):
 * kept by the controller beside its configuration, never in the caller's struct, and set by
 * name (eerl_ctl_set_option, eerl/options.h). warmup_updates: the paper's strategies leave the
 * first updates of a run out of the governor references. The revisions: what each decision rule
 * is at; a trace header names them, and this eerl decides as its own only. */
struct eerl__ctl_xopts {
    unsigned warmup_updates;
    unsigned inflight_revision, eerl_revision, paper_revision;
};

/* Refuses a revision other than this eerl's (EERL_EINVAL, why saying which eerl replays it). */
int eerl__ctl_xopts_check(const struct eerl__ctl_xopts *x, char *why, size_t why_len);
/* The revision key that decides in this mode under the strategy ("eerl_revision",
 * "inflight_revision", "paper_revision"), *ret_rev its value in x and *ret_now the revision
 * this eerl decides as; NULL where the strategy has no revisions in the mode (the keys are then
 * read by nothing). */
const char *eerl__ctl_revision(eerl_mode mode, eerl_strategy strategy,
                               const struct eerl__ctl_xopts *x, unsigned *ret_rev,
                               unsigned *ret_now);

/* From the table of options (options.c, which includes this header): every option's default
 * for the mode into a whole (this release's) struct, and the check of every option's bounds
 * (why names the first out of bounds); the same for the experimental options, whose set and get
 * by name check the table's bounds only (a revision older than this eerl's is read from a trace
 * header; eerl__ctl_xopts_check refuses it for a controller). EERL_EINVAL for a name that is not
 * an experimental option, why saying where it is set. */
void eerl__options_defaults(eerl_mode mode, eerl_ctl_config *cfg);
int eerl__options_check_ctl(const eerl_ctl_config *cfg, char *why, size_t why_len);
void eerl__options_xdefaults(eerl_mode mode, struct eerl__ctl_xopts *x);
int eerl__options_xset(struct eerl__ctl_xopts *x, const char *name, double value, char *why,
                       size_t why_len);
int eerl__options_xget(const struct eerl__ctl_xopts *x, const char *name, double *ret_value);

#endif

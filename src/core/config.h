/* Internal side of the configuration (config.c): reading a caller's size-tagged
 * eerl_ctl_config into this release's struct. */
#ifndef EERL_CORE_CONFIG_H
#define EERL_CORE_CONFIG_H

#include "eerl/core.h"

/* The revision each decision rule is at: the one the judges hold, the default, and the only
 * value eerl_ctl_config_check accepts. A change meant to change decisions raises its number, so
 * that a trace header names the rule that decided it (docs/trace-format.md). */
#define EERL__INFLIGHT_REVISION 5 /* eerl's judge and proposer in in-flight mode */
#define EERL__EERL_REVISION 12    /* eerl's judge and proposers in the other modes */
#define EERL__PAPER_REVISION 1    /* the paper strategy's synchronous search grid */

/* *ret_cfg = the mode's defaults overwritten by the first in->size bytes of *in, with size set
 * to this release's. EERL_EINVAL when in->size is not a size this release reads. */
int eerl__ctl_config_import(eerl_mode mode, const eerl_ctl_config *in, eerl_ctl_config *ret_cfg);
/* The revision key that decides in this mode under cfg->strategy ("eerl_revision",
 * "inflight_revision", "paper_revision"), *ret_rev its value in cfg and *ret_now the revision
 * this eerl decides as; NULL where the strategy has no revisions in the mode (the keys are then
 * read by nothing). */
const char *eerl__ctl_config_revision(eerl_mode mode, const eerl_ctl_config *cfg, unsigned *ret_rev,
                                      unsigned *ret_now);
/* Every revision key below this eerl's raised to it (a newer one is left to the check). */
void eerl__ctl_config_revisions_from_older(eerl_ctl_config *cfg);

/* From the table of options (options.c, which includes this header): every option's default
 * for the mode into a whole (this release's) struct, and the check of every option's bounds
 * (why names the first out of bounds). */
void eerl__options_defaults(eerl_mode mode, eerl_ctl_config *cfg);
int eerl__options_check_ctl(const eerl_ctl_config *cfg, char *why, size_t why_len);

#endif

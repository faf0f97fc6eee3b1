/* Internal side of the configuration (config.c): reading a caller's size-tagged
 * eerl_ctl_config into this release's struct. */
#ifndef EERL_CORE_CONFIG_H
#define EERL_CORE_CONFIG_H

#include "eerl/core.h"

/* The newest revision of eerl's in-flight judge and proposer (cfg.inflight_revision; its
 * default). */
#define EERL__INFLIGHT_REVISION 5
/* The newest revision of eerl's judge and proposers in the other modes (cfg.eerl_revision;
 * judge/eerl.c). */
#define EERL__EERL_REVISION 12
/* The newest revision of the paper strategy's synchronous search grid (cfg.paper_revision). */
#define EERL__PAPER_REVISION 1

/* *ret_cfg = the mode's defaults overwritten by the first in->size bytes of *in, with size set
 * to this release's. EERL_EINVAL when in->size is not a size this release reads. */
int eerl__ctl_config_import(eerl_mode mode, const eerl_ctl_config *in, eerl_ctl_config *ret_cfg);

/* From the table of options (options.c, which includes this header): every option's default
 * for the mode into a whole (this release's) struct, and the check of every option's bounds
 * (why names the first out of bounds). */
void eerl__options_defaults(eerl_mode mode, eerl_ctl_config *cfg);
int eerl__options_check_ctl(const eerl_ctl_config *cfg, char *why, size_t why_len);

#endif

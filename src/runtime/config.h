/* The runtime session's configuration: eerl_rt_config's defaults (size-tagged: an older, shorter
 * struct is read as far as it goes) and its checks (mode, allowance, strategy, the pools' sizes,
 * the eerld choice; then the pools' GPUs against the device). Owns nothing. */
#ifndef EERL_RUNTIME_CONFIG_H
#define EERL_RUNTIME_CONFIG_H

#include <stddef.h>

#include "eerl/runtime.h"

/* The caller's struct (cfg->size bytes of it) over this release's defaults into *ret_full,
 * its options checked (before any device is asked anything). 0, or EERL_E* with why naming the
 * value. */
int eerl__rt_config_resolve(const eerl_rt_config *cfg, eerl_rt_config *ret_full, char *why,
                            size_t why_len);
/* The pools' GPUs against dev: each exists, none twice, the pools as the mode wants them. */
int eerl__rt_config_check_pools(eerl_device *dev, const eerl_rt_config *cfg, char *why,
                                size_t why_len);

/* The pools' GPU lists: the pointers when given, else the fixed arrays. */
const unsigned *eerl__rt_gen_list(const eerl_rt_config *c);
const unsigned *eerl__rt_train_list(const eerl_rt_config *c);

#endif

/* Internal side of the table of options (options.c): defaults and checks of whole structs. */
#ifndef EERL_CORE_OPTIONS_H
#define EERL_CORE_OPTIONS_H

#include "eerl/options.h"
#include "core/config.h"
#include "eerl/runtime.h"

/* Writes every runtime option's default for the mode into a whole (this release's) struct
 * (the controller's: core/config.h). */
void eerl__options_rt_defaults(eerl_mode mode, eerl_rt_config *cfg);
/* Checks every table option of a whole struct: the first out of bounds names itself in why. */
int eerl__options_check_rt(const eerl_rt_config *cfg, char *why, size_t why_len);
/* Checks a value of the option numbered i. */
int eerl__option_check_row(size_t i, double v, char *why, size_t why_len);

#endif

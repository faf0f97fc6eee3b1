/* One printer for a setting (setting.c; eerl_setting_str, its usual form, is in eerl/core.h).
 * The two group clocks, "gov" where the governor runs the group. EERL__SETTING_TABLE: "Gov" and
 * no idle clock, as the result tables print it. */
#ifndef EERL_CORE_SETTING_H
#define EERL_CORE_SETTING_H

#include <stddef.h>

#include "eerl/core.h"

#define EERL__SETTING_TABLE 1u

const char *eerl__setting_text(const eerl_setting *s, unsigned style, char *buf, size_t len);

#endif

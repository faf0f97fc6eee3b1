/* One printer for a setting (setting.c). The two group clocks, "gov" where the governor runs the
 * group. EERL__SETTING_TABLE: "Gov" and no idle clock, as the result tables print it. */
#ifndef EERL_CORE_SETTING_H
#define EERL_CORE_SETTING_H

#include <stddef.h>

#include "eerl/core.h"

#define EERL__SETTING_TABLE 1u

const char *eerl__setting_text(const eerl_setting *s, unsigned style, char *buf, size_t len);
/* eerl__setting_text(s, 0, ...): "1800/1620" or "gov/1185" (+ " idle 345"), into buf. */
const char *eerl__setting_str(const eerl_setting *s, char *buf, size_t len);

#endif

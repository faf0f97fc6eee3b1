/* The one table of eerl's options (as zstd's ZSTD_cParam_getBounds and ZSTD_CCtx_setParameter):
 * each controller and runtime setting that is a number, with its name, type, default per mode,
 * bounds, whether it is stable or experimental and a line of what it does. The name is the same
 * everywhere: eerl_ctl_config's field, the CLI's flag (allowed_loss: --allowed-loss), the Python
 * keyword, verl's +eerl.allowed_loss and the trace header's config key. Every place that takes an
 * option checks it here, so a bad value gets the same message everywhere:
 *
 *     allowed_loss 0.7 must be in (0, 0.5)
 *
 * A stable option is a field of eerl_ctl_config (or eerl_rt_config); an experimental one
 * (EERL_OPTION_EXPERIMENTAL: the controller's research knobs) is a field of no public struct:
 * it is set on a controller by name (eerl_ctl_set_option, with EERL_EXPERIMENTAL), so a struct
 * a caller compiles is the same in every view and a knob can come or go in any release.
 * Fields that are not single numbers (block_choices, group_names, static_setting) stay fields
 * of eerl_ctl_config with their own checks (eerl_ctl_config_check). */
#ifndef EERL_OPTIONS_H
#define EERL_OPTIONS_H

#include <stddef.h>

#include "eerl/core.h"
#include "eerl/export.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum eerl_option_type {
    EERL_OPTION_DOUBLE = 0,   /* a real number */
    EERL_OPTION_UNSIGNED = 1, /* a whole number, 0 to 2^32 - 1 */
    EERL_OPTION_ENUM = 2,     /* an enum's value (strategy: eerl_strategy_from_name) */
} eerl_option_type;

/* eerl_option_info.flags */
#define EERL_OPTION_EXPERIMENTAL 0x1u /* may change in any release: eerl_ctl_set_option */
#define EERL_OPTION_MIN_OPEN 0x2u     /* min itself is refused: (min, ... */
#define EERL_OPTION_MAX_OPEN 0x4u     /* max itself is refused: ..., max) */
#define EERL_OPTION_RUNTIME 0x8u      /* also a field of eerl_rt_config (and a Python keyword) */

typedef struct eerl_option_info {
    const char *name; /* "allowed_loss" */
    eerl_option_type type;
    unsigned flags;                   /* EERL_OPTION_* */
    double defaults[EERL_MODE_COUNT]; /* the default in each mode (Table 3), by eerl_mode */
    double min, max;                  /* inclusive unless EERL_OPTION_MIN_OPEN / _MAX_OPEN */
    const char *doc;                  /* one line */
} eerl_option_info;

/* How many options the table holds; they are numbered 0 to count - 1 in a fixed order. */
EERL_EXPORT size_t eerl_option_count(void);
/* Option i's description (static strings). EERL_EINVAL for i >= eerl_option_count(). */
EERL_EXPORT int eerl_option_info_get(size_t i, eerl_option_info *ret_info);
/* The number of the option of this name, or EERL_EINVAL for a name the table does not hold. */
EERL_EXPORT int eerl_option_find(const char *name);
/* Checks a value for the option: EERL_EINVAL, why naming the option, the value and its bounds
 * ("allowed_loss 0.7 must be in (0, 0.5)"), for a value out of bounds, not finite, or not
 * whole for an unsigned or enum option; EERL_EINVAL too for a name the table does not hold. */
EERL_EXPORT int eerl_option_check(const char *name, double value, char *why, size_t why_len);

/* Sets (after eerl_option_check) or reads an option of a controller configuration by name: a
 * stable controller option (an experimental one is refused, EERL_EINVAL, why saying where it
 * is set). */
EERL_EXPORT int eerl_ctl_config_set(eerl_ctl_config *cfg, const char *name, double value, char *why,
                                    size_t why_len);
EERL_EXPORT int eerl_ctl_config_get(const eerl_ctl_config *cfg, const char *name,
                                    double *ret_value);
/* The same for a runtime configuration (eerl/runtime.h): the options flagged
 * EERL_OPTION_RUNTIME. */
struct eerl_rt_config;
EERL_EXPORT int eerl_rt_config_set(struct eerl_rt_config *cfg, const char *name, double value,
                                   char *why, size_t why_len);
EERL_EXPORT int eerl_rt_config_get(const struct eerl_rt_config *cfg, const char *name,
                                   double *ret_value);

#ifdef EERL_EXPERIMENTAL /* eerl's own tools: libeerl.a only */
/* Experimental. Sets an experimental option of a controller by name, after eerl_ctl_new and
 * before its first observation (EERL_ESTATE after): the bounds are the table's, a revision
 * other than this eerl's is refused (it decides as its own only); EERL_EINVAL with why, also for
 * a stable option (a field of eerl_ctl_config, set before eerl_ctl_new). Reading takes any
 * option of the controller, stable or experimental, as it decides (what a trace header
 * writes); EERL_EINVAL for a name that is not one. */
int eerl_ctl_set_option(eerl_ctl *ctl, const char *name, double value, char *why, size_t why_len);
int eerl_ctl_get_option(const eerl_ctl *ctl, const char *name, double *ret_value);
#endif

#ifdef __cplusplus
}
#endif
#endif

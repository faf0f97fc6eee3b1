/* Owns the table of options (eerl/options.h): every numeric setting of the controller and the
 * runtime, with its default per mode and its bounds, written here once. eerl_ctl_config_init,
 * eerl_ctl_config_check, the runtime's configuration, the CLI and the Python package read it. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "eerl/error.h"
#include "eerl/options.h"
#include "eerl/runtime.h"
#include "core/config.h"
#include "core/options.h"

#define CTL(f) offsetof(eerl_ctl_config, f)
#define RT(f) offsetof(eerl_rt_config, f)
#define NONE SIZE_MAX
#define ALL(v)                                                                                     \
    {                                                                                              \
        v, v, v, v                                                                                 \
    }
#define D EERL_OPTION_DOUBLE
#define U EERL_OPTION_UNSIGNED
#define E EERL_OPTION_ENUM
#define LO EERL_OPTION_MIN_OPEN
#define HI EERL_OPTION_MAX_OPEN
#define XP EERL_OPTION_EXPERIMENTAL
#define RTF EERL_OPTION_RUNTIME
#define UMAX 4294967295.0

struct row {
    eerl_option_info info;
    size_t ctl_off, rt_off; /* the field in eerl_ctl_config / eerl_rt_config, or NONE */
};

/* Defaults by mode: colocated, disaggregated, drained, in-flight (Table 3). */
static const struct row rows[] = {
    {{"allowed_loss", D, LO | HI | RTF, ALL(0.02), 0, 0.5,
      "throughput may fall to 1 - allowed_loss of the governor's (0.02 allows 2%)"},
     CTL(allowed_loss),
     RT(allowed_loss)},
    {{"strategy", E, RTF, ALL(EERL_STRATEGY_EERL), 0, EERL_STRATEGY_COUNT - 1,
      "which controller decides (eerl_strategy_names)"},
     CTL(strategy),
     RT(strategy)},
    {{"min_saving", D, HI, ALL(0), 0, 1, "energy per valid token must fall by more than this"},
     CTL(min_saving),
     NONE},
    {{"calibration_updates",
      U,
      0,
      {15, 15, 15, 45},
      3,
      10000,
      "governor updates before the paper's strategies search"},
     CTL(calibration_updates),
     NONE},
    {{"trial_updates", U, 0, ALL(3), 1, 1000, "updates of a trial (sync and drained)"},
     CTL(trial_updates),
     NONE},
    {{"governor_between", U, 0, ALL(1), 0, 1000, "governor updates between trials"},
     CTL(governor_between),
     NONE},
    {{"confirm_updates", U, 0, ALL(6), 1, 1000, "fresh updates that confirm a setting"},
     CTL(confirm_updates),
     NONE},
    {{"confirm_trials_max", U, 0, ALL(2), 1, 10, "in-flight confirmation blocks"},
     CTL(confirm_trials_max),
     NONE},
    {{"max_trials", U, 0, ALL(16), 1, 64, "trials of a search round before it ends"},
     CTL(max_trials),
     NONE},
    {{"grid_mhz", U, 0, ALL(90), 1, 100000, "synchronous search grid, MHz"}, CTL(grid_mhz), NONE},
    {{"first_grid_mhz", U, 0, ALL(50), 1, 100000, "asynchronous first pool's grid, MHz"},
     CTL(first_grid_mhz),
     NONE},
    {{"second_grid_mhz", U, 0, ALL(100), 1, 100000, "asynchronous second pool's grid, MHz"},
     CTL(second_grid_mhz),
     NONE},
    {{"start_drop_gen_mhz", U, 0, ALL(180), 0, 100000, "sync start: generation below peak"},
     CTL(start_drop_gen_mhz),
     NONE},
    {{"start_drop_train_mhz", U, 0, ALL(360), 0, 100000, "sync start: training below peak"},
     CTL(start_drop_train_mhz),
     NONE},
    {{"start_drop_first_mhz", U, 0, ALL(300), 0, 100000, "async: first pool below peak"},
     CTL(start_drop_first_mhz),
     NONE},
    {{"start_drop_second_mhz", U, 0, ALL(200), 0, 100000, "async: second pool below peak"},
     CTL(start_drop_second_mhz),
     NONE},
    {{"feedback_step_mhz", U, 0, {45, 45, 50, 0}, 0, 100000, "the monitor's step, MHz"},
     CTL(feedback_step_mhz),
     NONE},
    {{"feedback_big_step_mhz",
      U,
      0,
      {90, 90, 50, 0},
      0,
      100000,
      "the monitor's step above big_loss, MHz"},
     CTL(feedback_big_step_mhz),
     NONE},
    {{"big_loss", D, HI, ALL(0.04), 0, 1, "a loss the monitor steps up by the big step for"},
     CTL(big_loss),
     NONE},
    {{"monitor_margin", D, 0, ALL(0.01), 0, 0.5, "lower a clock when loss < allowed_loss - margin"},
     CTL(monitor_margin),
     NONE},
    {{"monitor_every", U, 0, ALL(10), 1, UMAX, "updates between the monitor's looks"},
     CTL(monitor_every),
     NONE},
    {{"monitor_window", U, 0, ALL(20), 2, 1000, "usable updates of a monitoring window"},
     CTL(monitor_window),
     NONE},
    {{"idle_mhz", U, 0, {0, 345, 345, 0}, 0, 100000, "clock of a waiting pool (0: governor)"},
     CTL(idle_mhz),
     NONE},
    {{"ref_window",
      U,
      0,
      {32, 32, 32, 64},
      3,
      1024,
      "most recent governor observations the predictor fits"},
     CTL(ref_window),
     NONE},
    {{"refresh_updates", U, 0, ALL(5), 1, 1000, "governor updates of a reference refresh"},
     CTL(refresh_updates),
     NONE},
    {{"coverage_margin", D, 0, ALL(0.10), 0, 10, "work within the fit's range widened by this"},
     CTL(coverage_margin),
     NONE},
    {{"coverage_fail_limit", U, 0, ALL(3), 1, 10,
      "uncovered updates among the last 10 that trigger a refresh"},
     CTL(coverage_fail_limit),
     NONE},
    {{"se_target", D, LO | HI, ALL(0.02), 0, 1, "in-flight standard-error target of a block"},
     CTL(se_target),
     NONE},
    {{"inflight_lock_candidate_blocks", U, 0, ALL(2), 1, 100,
      "candidate blocks per governor block after an in-flight lock"},
     CTL(inflight_lock_candidate_blocks),
     NONE},
    {{"time_tolerance", D, 0, ALL(0.05), 0, 1, "phase times against the update's time"},
     CTL(time_tolerance),
     NONE},
    {{"expected_updates", U, 0, ALL(0), 0, 100000000,
      "updates the job will run in all (0: unknown)"},
     CTL(expected_updates),
     NONE},
    {{"budget_margin", D, HI, ALL(0.003), 0, 0.5,
      "the eerl strategy's budget aims this far inside the allowance"},
     CTL(budget_margin),
     NONE},
    {{"fast_calibration_updates",
      U,
      0,
      {10, 10, 10, 16},
      3,
      10000,
      "the eerl strategy's calibration"},
     CTL(fast_calibration_updates),
     NONE},
    {{"governor_peak_mhz", U, RTF, ALL(0), 0, UMAX,
      "the governor's clock (0: the highest supported clock of the first GPU)"},
     NONE,
     RT(governor_peak_mhz)},
    {{"meter_interval_ms", U, RTF, ALL(0), 0, UMAX, "the meter's interval (0: 200 ms)"},
     NONE,
     RT(meter_interval_ms)},
    {{"warmup_updates", U, XP, ALL(1), 0, 1000,
      "the paper's strategies: start-up updates left out of the references"},
     CTL(warmup_updates),
     NONE},
    {{"inflight_revision", U, XP, ALL(EERL__INFLIGHT_REVISION), 0, EERL__INFLIGHT_REVISION,
      "revision of the eerl strategy in flight: a trace header names it; this eerl decides as "
      "the current one only (eerl_ctl_config_check)"},
     CTL(inflight_revision),
     NONE},
    {{"eerl_revision", U, XP, ALL(EERL__EERL_REVISION), 0, EERL__EERL_REVISION,
      "revision of the eerl strategy in the other modes (the current one decides)"},
     CTL(eerl_revision),
     NONE},
    {{"paper_revision", U, XP, ALL(EERL__PAPER_REVISION), 0, EERL__PAPER_REVISION,
      "revision of the paper strategy's synchronous grid (the current one decides)"},
     CTL(paper_revision),
     NONE},
    {{"n_groups", U, 0, ALL(2), 2, EERL_GROUPS_MAX, "phase groups with a clock of their own"},
     CTL(n_groups),
     NONE},
};

#define N_ROWS (sizeof(rows) / sizeof(rows[0]))

size_t eerl_option_count(void)
{
    return N_ROWS;
}

int eerl_option_info_get(size_t i, eerl_option_info *ret_info)
{
    if (i >= N_ROWS || !ret_info)
        return EERL_EINVAL;
    *ret_info = rows[i].info;
    return 0;
}

int eerl_option_find(const char *name)
{
    size_t i;

    for (i = 0; name && i < N_ROWS; i++)
        if (!strcmp(rows[i].info.name, name))
            return (int)i;
    return EERL_EINVAL;
}

static int out_of_bounds(const eerl_option_info *o, double v)
{
    if (!isfinite(v) || v < o->min || v > o->max)
        return 1;
    if (((o->flags & EERL_OPTION_MIN_OPEN) && v == o->min) ||
        ((o->flags & EERL_OPTION_MAX_OPEN) && v == o->max))
        return 1;
    return o->type != EERL_OPTION_DOUBLE && v != floor(v);
}

/* A number as a person writes it: whole numbers without an exponent, others shortest. */
static const char *num(double v, char *buf, size_t n)
{
    if (isfinite(v) && v == floor(v) && fabs(v) < 1e15)
        snprintf(buf, n, "%.0f", v);
    else
        snprintf(buf, n, "%g", v);
    return buf;
}

int eerl__option_check_row(size_t i, double v, char *why, size_t why_len)
{
    const eerl_option_info *o = &rows[i].info;
    char a[32], b[32], c[32];

    if (!out_of_bounds(o, v))
        return 0;
    if (!why || !why_len)
        return EERL_EINVAL;
    if (o->type == EERL_OPTION_ENUM)
        snprintf(why, why_len, "%s %s is unknown (valid: %s)", o->name, num(v, a, sizeof(a)),
                 eerl_strategy_names());
    else
        snprintf(why, why_len, "%s %s must be %sin %c%s, %s%c", o->name, num(v, a, sizeof(a)),
                 o->type == EERL_OPTION_UNSIGNED ? "a whole number " : "",
                 o->flags & EERL_OPTION_MIN_OPEN ? '(' : '[', num(o->min, b, sizeof(b)),
                 num(o->max, c, sizeof(c)), o->flags & EERL_OPTION_MAX_OPEN ? ')' : ']');
    return EERL_EINVAL;
}

int eerl_option_check(const char *name, double value, char *why, size_t why_len)
{
    int i = eerl_option_find(name);

    if (i < 0) {
        if (why && why_len)
            snprintf(why, why_len, "no option is named '%s'", name ? name : "(null)");
        return EERL_EINVAL;
    }
    return eerl__option_check_row((size_t)i, value, why, why_len);
}

/* The field of row i in a struct of `size` bytes at off, or NULL when the struct has none or is
 * too short to hold it. */
static void *field(void *base, size_t size, size_t off, size_t i)
{
    size_t w = rows[i].info.type == EERL_OPTION_DOUBLE ? sizeof(double) : sizeof(unsigned);

    return off == NONE || off + w > size ? NULL : (char *)base + off;
}

static void put(void *f, size_t i, double v)
{
    if (rows[i].info.type == EERL_OPTION_DOUBLE)
        memcpy(f, &v, sizeof(v));
    else if (rows[i].info.type == EERL_OPTION_ENUM) {
        int e = (int)v; /* an enum is int-sized */
        memcpy(f, &e, sizeof(e));
    } else {
        unsigned u = (unsigned)v;
        memcpy(f, &u, sizeof(u));
    }
}

static double take(const void *f, size_t i)
{
    double d;
    unsigned u;
    int e;

    if (rows[i].info.type == EERL_OPTION_DOUBLE) {
        memcpy(&d, f, sizeof(d));
        return d;
    }
    if (rows[i].info.type == EERL_OPTION_ENUM) {
        memcpy(&e, f, sizeof(e));
        return e;
    }
    memcpy(&u, f, sizeof(u));
    return u;
}

void eerl__options_defaults(eerl_mode mode, eerl_ctl_config *cfg)
{
    size_t i;

    for (i = 0; i < N_ROWS; i++)
        if (rows[i].ctl_off != NONE)
            put((char *)cfg + rows[i].ctl_off, i, rows[i].info.defaults[mode]);
}

void eerl__options_rt_defaults(eerl_mode mode, eerl_rt_config *cfg)
{
    size_t i;

    for (i = 0; i < N_ROWS; i++)
        if (rows[i].rt_off != NONE)
            put((char *)cfg + rows[i].rt_off, i, rows[i].info.defaults[mode]);
}

int eerl__options_check_ctl(const eerl_ctl_config *cfg, char *why, size_t why_len)
{
    size_t i;
    int e;

    for (i = 0; i < N_ROWS; i++)
        if (rows[i].ctl_off != NONE) {
            e = eerl__option_check_row(i, take((const char *)cfg + rows[i].ctl_off, i), why,
                                       why_len);
            if (e < 0)
                return e;
        }
    return 0;
}

int eerl__options_check_rt(const eerl_rt_config *cfg, char *why, size_t why_len)
{
    size_t i;
    int e;

    for (i = 0; i < N_ROWS; i++)
        if (rows[i].rt_off != NONE) {
            e = eerl__option_check_row(i, take((const char *)cfg + rows[i].rt_off, i), why,
                                       why_len);
            if (e < 0)
                return e;
        }
    return 0;
}

/* The bytes of a caller's struct an option may be read or written in: an experimental one only
 * in this release's whole struct (a shorter, stable view may end in padding where it lies). */
static size_t usable(size_t size, int ctl, size_t i)
{
    if (ctl && (rows[i].info.flags & EERL_OPTION_EXPERIMENTAL) && size != sizeof(eerl_ctl_config))
        return 0;
    return size;
}

static int set_at(void *base, size_t size, int ctl, const char *name, double v, char *why,
                  size_t why_len)
{
    int i = eerl_option_find(name), e;
    void *f;

    e = eerl_option_check(name, v, why, why_len);
    if (e < 0)
        return e;
    f = field(base, usable(size, ctl, (size_t)i), ctl ? rows[i].ctl_off : rows[i].rt_off,
              (size_t)i);
    if (!f) {
        if (why && why_len)
            snprintf(why, why_len,
                     "%s is not a setting of this configuration (an experimental option needs "
                     "this release's whole struct: include eerl/experimental.h first)",
                     name);
        return EERL_EINVAL;
    }
    put(f, (size_t)i, v);
    return 0;
}

static int get_at(const void *base, size_t size, int ctl, const char *name, double *ret)
{
    int i = eerl_option_find(name);
    const void *f;

    if (i < 0 || !ret)
        return EERL_EINVAL;
    f = field((void *)(uintptr_t)base, usable(size, ctl, (size_t)i),
              ctl ? rows[i].ctl_off : rows[i].rt_off, (size_t)i);
    if (!f)
        return EERL_EINVAL;
    *ret = take(f, (size_t)i);
    return 0;
}

int eerl_ctl_config_set(eerl_ctl_config *cfg, const char *name, double value, char *why,
                        size_t why_len)
{
    if (!cfg)
        return EERL_EINVAL;
    return set_at(cfg, cfg->size, 1, name, value, why, why_len);
}

int eerl_ctl_config_get(const eerl_ctl_config *cfg, const char *name, double *ret_value)
{
    return cfg ? get_at(cfg, cfg->size, 1, name, ret_value) : EERL_EINVAL;
}

int eerl_rt_config_set(eerl_rt_config *cfg, const char *name, double value, char *why,
                       size_t why_len)
{
    if (!cfg)
        return EERL_EINVAL;
    return set_at(cfg, cfg->size, 0, name, value, why, why_len);
}

int eerl_rt_config_get(const eerl_rt_config *cfg, const char *name, double *ret_value)
{
    return cfg ? get_at(cfg, cfg->size, 0, name, ret_value) : EERL_EINVAL;
}

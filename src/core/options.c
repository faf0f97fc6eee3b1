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
#define XO(f) offsetof(struct eerl__ctl_xopts, f)
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

/* Where an option is kept: the field in eerl_ctl_config, in eerl_rt_config, or (an experimental
 * one) in the controller's struct eerl__ctl_xopts; NONE where it is not. */
struct row {
    eerl_option_info info;
    size_t off[3]; /* by enum where */
};

enum where { W_CTL = 0, W_RT = 1, W_X = 2 };

/* Defaults by mode: colocated, disaggregated, drained, in-flight (Table 3). */
static const struct row rows[] = {
    {{"allowed_loss", D, LO | HI | RTF, ALL(0.02), 0, 0.5,
      "throughput may fall to 1 - allowed_loss of the governor's (0.02 allows 2%)"},
     {CTL(allowed_loss), RT(allowed_loss), NONE}},
    {{"strategy", E, RTF, ALL(EERL_STRATEGY_EERL), 0, EERL_STRATEGY_COUNT - 1,
      "which controller decides (eerl_strategy_names)"},
     {CTL(strategy), RT(strategy), NONE}},
    {{"min_saving", D, HI, ALL(0), 0, 1, "energy per valid token must fall by more than this"},
     {CTL(min_saving), NONE, NONE}},
    {{"calibration_updates",
      U,
      0,
      {15, 15, 15, 45},
      3,
      10000,
      "governor updates before the paper's strategies search"},
     {CTL(calibration_updates), NONE, NONE}},
    {{"trial_updates", U, 0, ALL(3), 1, 1000, "updates of a trial (sync and drained)"},
     {CTL(trial_updates), NONE, NONE}},
    {{"governor_between", U, 0, ALL(1), 0, 1000, "governor updates between trials"},
     {CTL(governor_between), NONE, NONE}},
    {{"confirm_updates", U, 0, ALL(6), 1, 1000, "fresh updates that confirm a setting"},
     {CTL(confirm_updates), NONE, NONE}},
    {{"confirm_trials_max", U, 0, ALL(2), 1, 10, "in-flight confirmation blocks"},
     {CTL(confirm_trials_max), NONE, NONE}},
    {{"max_trials", U, 0, ALL(16), 1, 64, "trials of a search round before it ends"},
     {CTL(max_trials), NONE, NONE}},
    {{"grid_mhz", U, 0, ALL(90), 1, 100000, "synchronous search grid, MHz"},
     {CTL(grid_mhz), NONE, NONE}},
    {{"first_grid_mhz", U, 0, ALL(50), 1, 100000, "asynchronous first pool's grid, MHz"},
     {CTL(first_grid_mhz), NONE, NONE}},
    {{"second_grid_mhz", U, 0, ALL(100), 1, 100000, "asynchronous second pool's grid, MHz"},
     {CTL(second_grid_mhz), NONE, NONE}},
    {{"start_drop_gen_mhz", U, 0, ALL(180), 0, 100000, "sync start: generation below peak"},
     {CTL(start_drop_gen_mhz), NONE, NONE}},
    {{"start_drop_train_mhz", U, 0, ALL(360), 0, 100000, "sync start: training below peak"},
     {CTL(start_drop_train_mhz), NONE, NONE}},
    {{"start_drop_first_mhz", U, 0, ALL(300), 0, 100000, "async: first pool below peak"},
     {CTL(start_drop_first_mhz), NONE, NONE}},
    {{"start_drop_second_mhz", U, 0, ALL(200), 0, 100000, "async: second pool below peak"},
     {CTL(start_drop_second_mhz), NONE, NONE}},
    {{"feedback_step_mhz", U, 0, {45, 45, 50, 0}, 0, 100000, "the monitor's step, MHz"},
     {CTL(feedback_step_mhz), NONE, NONE}},
    {{"feedback_big_step_mhz",
      U,
      0,
      {90, 90, 50, 0},
      0,
      100000,
      "the monitor's step above big_loss, MHz"},
     {CTL(feedback_big_step_mhz), NONE, NONE}},
    {{"big_loss", D, HI, ALL(0.04), 0, 1, "a loss the monitor steps up by the big step for"},
     {CTL(big_loss), NONE, NONE}},
    {{"monitor_margin", D, 0, ALL(0.01), 0, 0.5, "lower a clock when loss < allowed_loss - margin"},
     {CTL(monitor_margin), NONE, NONE}},
    {{"monitor_every", U, 0, ALL(10), 1, UMAX, "updates between the monitor's looks"},
     {CTL(monitor_every), NONE, NONE}},
    {{"monitor_window", U, 0, ALL(20), 2, 1000, "usable updates of a monitoring window"},
     {CTL(monitor_window), NONE, NONE}},
    {{"idle_mhz", U, 0, {0, 345, 345, 0}, 0, 100000, "clock of a waiting pool (0: governor)"},
     {CTL(idle_mhz), NONE, NONE}},
    {{"ref_window",
      U,
      0,
      {32, 32, 32, 64},
      3,
      1024,
      "most recent governor observations the predictor fits"},
     {CTL(ref_window), NONE, NONE}},
    {{"refresh_updates", U, 0, ALL(5), 1, 1000, "governor updates of a reference refresh"},
     {CTL(refresh_updates), NONE, NONE}},
    {{"coverage_margin", D, 0, ALL(0.10), 0, 10, "work within the fit's range widened by this"},
     {CTL(coverage_margin), NONE, NONE}},
    {{"coverage_fail_limit", U, 0, ALL(3), 1, 10,
      "uncovered updates among the last 10 that trigger a refresh"},
     {CTL(coverage_fail_limit), NONE, NONE}},
    {{"se_target", D, LO | HI, ALL(0.02), 0, 1, "in-flight standard-error target of a block"},
     {CTL(se_target), NONE, NONE}},
    {{"inflight_lock_candidate_blocks", U, 0, ALL(2), 1, 100,
      "candidate blocks per governor block after an in-flight lock"},
     {CTL(inflight_lock_candidate_blocks), NONE, NONE}},
    {{"time_tolerance", D, 0, ALL(0.05), 0, 1, "phase times against the update's time"},
     {CTL(time_tolerance), NONE, NONE}},
    {{"expected_updates", U, 0, ALL(0), 0, 100000000,
      "updates the job will run in all (0: unknown)"},
     {CTL(expected_updates), NONE, NONE}},
    {{"budget_margin", D, HI, ALL(0.003), 0, 0.5,
      "the eerl strategy's budget aims this far inside the allowance"},
     {CTL(budget_margin), NONE, NONE}},
    {{"fast_calibration_updates",
      U,
      0,
      {10, 10, 10, 16},
      3,
      10000,
      "the eerl strategy's calibration"},
     {CTL(fast_calibration_updates), NONE, NONE}},
    {{"governor_peak_mhz", U, RTF, ALL(0), 0, UMAX,
      "the governor's clock (0: the highest supported clock of the first GPU)"},
     {NONE, RT(governor_peak_mhz), NONE}},
    {{"meter_interval_ms", U, RTF, ALL(0), 0, UMAX, "the meter's interval (0: 200 ms)"},
     {NONE, RT(meter_interval_ms), NONE}},
    {{"warmup_updates", U, XP, ALL(1), 0, 1000,
      "the paper's strategies: start-up updates left out of the references"},
     {NONE, NONE, XO(warmup_updates)}},
    {{"inflight_revision", U, XP, ALL(EERL__INFLIGHT_REVISION), 0, EERL__INFLIGHT_REVISION,
      "revision of the eerl strategy in flight: a trace header names it; this eerl decides as "
      "the current one only (eerl_ctl_config_check)"},
     {NONE, NONE, XO(inflight_revision)}},
    {{"eerl_revision", U, XP, ALL(EERL__EERL_REVISION), 0, EERL__EERL_REVISION,
      "revision of the eerl strategy in the other modes (the current one decides)"},
     {NONE, NONE, XO(eerl_revision)}},
    {{"paper_revision", U, XP, ALL(EERL__PAPER_REVISION), 0, EERL__PAPER_REVISION,
      "revision of the paper strategy's synchronous grid (the current one decides)"},
     {NONE, NONE, XO(paper_revision)}},
    {{"n_groups", U, 0, ALL(2), 2, EERL_GROUPS_MAX, "phase groups with a clock of their own"},
     {CTL(n_groups), NONE, NONE}},
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

/* Every option kept at `where` takes the mode's default, in the struct at base. */
static void defaults_at(void *base, enum where w, eerl_mode mode)
{
    size_t i;

    for (i = 0; i < N_ROWS; i++)
        if (rows[i].off[w] != NONE)
            put((char *)base + rows[i].off[w], i, rows[i].info.defaults[mode]);
}

/* Every option kept at `where` within its bounds, in the struct at base. */
static int check_at(const void *base, enum where w, char *why, size_t why_len)
{
    size_t i;
    int e;

    for (i = 0; i < N_ROWS; i++)
        if (rows[i].off[w] != NONE) {
            e = eerl__option_check_row(i, take((const char *)base + rows[i].off[w], i), why,
                                       why_len);
            if (e < 0)
                return e;
        }
    return 0;
}

void eerl__options_defaults(eerl_mode mode, eerl_ctl_config *cfg)
{
    defaults_at(cfg, W_CTL, mode);
}

void eerl__options_rt_defaults(eerl_mode mode, eerl_rt_config *cfg)
{
    defaults_at(cfg, W_RT, mode);
}

void eerl__options_xdefaults(eerl_mode mode, struct eerl__ctl_xopts *x)
{
    memset(x, 0, sizeof(*x));
    defaults_at(x, W_X, mode);
}

int eerl__options_check_ctl(const eerl_ctl_config *cfg, char *why, size_t why_len)
{
    return check_at(cfg, W_CTL, why, why_len);
}

int eerl__options_check_rt(const eerl_rt_config *cfg, char *why, size_t why_len)
{
    return check_at(cfg, W_RT, why, why_len);
}

/* Why option i is not kept at `where`: where it is set instead. */
static void not_here(size_t i, enum where w, char *why, size_t why_len)
{
    const char *name = rows[i].info.name;

    if (!why || !why_len)
        return;
    if (w != W_X && rows[i].off[W_X] != NONE)
        snprintf(why, why_len,
                 "%s is an experimental option of the controller, not a field of its "
                 "configuration: set it with eerl_ctl_set_option (eerl/options.h)",
                 name);
    else if (w == W_X && rows[i].off[W_CTL] != NONE)
        snprintf(why, why_len,
                 "%s is a field of the controller's configuration, not an experimental option: "
                 "set it with eerl_ctl_config_set before eerl_ctl_new",
                 name);
    else
        snprintf(why, why_len, "%s is not a setting of this configuration", name);
}

static int set_at(void *base, size_t size, enum where w, const char *name, double v, char *why,
                  size_t why_len)
{
    int i = eerl_option_find(name), e;
    void *f;

    e = eerl_option_check(name, v, why, why_len);
    if (e < 0)
        return e;
    f = field(base, size, rows[i].off[w], (size_t)i);
    if (!f) {
        not_here((size_t)i, w, why, why_len);
        return EERL_EINVAL;
    }
    put(f, (size_t)i, v);
    return 0;
}

static int get_at(const void *base, size_t size, enum where w, const char *name, double *ret)
{
    int i = eerl_option_find(name);
    const void *f;

    if (i < 0 || !ret)
        return EERL_EINVAL;
    f = field((void *)(uintptr_t)base, size, rows[i].off[w], (size_t)i);
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
    return set_at(cfg, cfg->size, W_CTL, name, value, why, why_len);
}

int eerl_ctl_config_get(const eerl_ctl_config *cfg, const char *name, double *ret_value)
{
    return cfg ? get_at(cfg, cfg->size, W_CTL, name, ret_value) : EERL_EINVAL;
}

int eerl_rt_config_set(eerl_rt_config *cfg, const char *name, double value, char *why,
                       size_t why_len)
{
    if (!cfg)
        return EERL_EINVAL;
    return set_at(cfg, cfg->size, W_RT, name, value, why, why_len);
}

int eerl_rt_config_get(const eerl_rt_config *cfg, const char *name, double *ret_value)
{
    return cfg ? get_at(cfg, cfg->size, W_RT, name, ret_value) : EERL_EINVAL;
}

int eerl__options_xset(struct eerl__ctl_xopts *x, const char *name, double value, char *why,
                       size_t why_len)
{
    return x ? set_at(x, sizeof(*x), W_X, name, value, why, why_len) : EERL_EINVAL;
}

int eerl__options_xget(const struct eerl__ctl_xopts *x, const char *name, double *ret_value)
{
    return x ? get_at(x, sizeof(*x), W_X, name, ret_value) : EERL_EINVAL;
}

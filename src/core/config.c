/* Owns the controller's configuration (Table 3 defaults per mode, validation) and the names of its
 * enums (modes, strategies, states, events, verdicts) used by traces and the CLI. Pure data: no
 * state, no I/O. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "eerl/core.h"
#include "eerl/error.h"
#include "core/config.h"

static const char *const mode_names[EERL_MODE_COUNT] = {"colocated", "disaggregated", "drained",
                                                        "inflight"};
static const char *const strategy_names[EERL_STRATEGY_COUNT] = {
    "paper", "eerl", "governor", "static", "global-clock", "linear-search"};
static const char *const state_names[EERL_STATE_COUNT] = {"calibrating", "searching", "confirming",
                                                          "locked", "monitoring"};
static const char *const kind_names[EERL_EV_KIND_COUNT] = {
    "reject",  "hold",  "skip", "calibrated", "block",  "propose", "trial",
    "confirm", "round", "lock", "monitor",    "adjust", "refresh"};
static const char *const verdict_names[] = {"none", "pass", "fail"};

static int name_lookup(const char *const *names, int n, const char *name, int *ret)
{
    int i;

    if (!name)
        return EERL_EINVAL;
    for (i = 0; i < n; i++)
        if (!strcmp(names[i], name)) {
            *ret = i;
            return 0;
        }
    return EERL_EINVAL;
}

const char *eerl_mode_names(void)
{
    return "colocated, disaggregated, drained, inflight";
}

const char *eerl_mode_name(eerl_mode mode)
{
    return (unsigned)mode < EERL_MODE_COUNT ? mode_names[mode] : "unknown";
}

int eerl_mode_from_name(const char *name, eerl_mode *ret_mode)
{
    int v, r;

    if (!ret_mode)
        return EERL_EINVAL;
    r = name_lookup(mode_names, EERL_MODE_COUNT, name, &v);
    if (r < 0)
        return r;
    *ret_mode = (eerl_mode)v;
    return 0;
}

const char *eerl_strategy_name(eerl_strategy strategy)
{
    return (unsigned)strategy < EERL_STRATEGY_COUNT ? strategy_names[strategy] : "unknown";
}

int eerl_strategy_from_name(const char *name, eerl_strategy *ret_strategy)
{
    int v, r;

    if (!ret_strategy)
        return EERL_EINVAL;
    r = name_lookup(strategy_names, EERL_STRATEGY_COUNT, name, &v);
    if (r < 0)
        return r;
    *ret_strategy = (eerl_strategy)v;
    return 0;
}

const char *eerl_strategy_names(void)
{
    return "paper, eerl, governor, static, global-clock, linear-search";
}

int eerl_mode_overlapped(eerl_mode mode)
{
    return mode == EERL_MODE_DRAINED || mode == EERL_MODE_INFLIGHT;
}

const char *eerl_state_name(eerl_ctl_state state)
{
    return (unsigned)state < EERL_STATE_COUNT ? state_names[state] : "unknown";
}

const char *eerl_event_kind_name(eerl_event_kind kind)
{
    return (unsigned)kind < EERL_EV_KIND_COUNT ? kind_names[kind] : "unknown";
}

const char *eerl_verdict_name(eerl_verdict verdict)
{
    return (unsigned)verdict <= EERL_VERDICT_FAIL ? verdict_names[verdict] : "unknown";
}

int eerl_state_from_name(const char *name, eerl_ctl_state *ret)
{
    int v, r;

    if (!ret)
        return EERL_EINVAL;
    r = name_lookup(state_names, EERL_STATE_COUNT, name, &v);
    if (r < 0)
        return r;
    *ret = (eerl_ctl_state)v;
    return 0;
}

int eerl_event_kind_from_name(const char *name, eerl_event_kind *ret)
{
    int v, r;

    if (!ret)
        return EERL_EINVAL;
    r = name_lookup(kind_names, EERL_EV_KIND_COUNT, name, &v);
    if (r < 0)
        return r;
    *ret = (eerl_event_kind)v;
    return 0;
}

int eerl_verdict_from_name(const char *name, eerl_verdict *ret)
{
    int v, r;

    if (!ret)
        return EERL_EINVAL;
    r = name_lookup(verdict_names, 3, name, &v);
    if (r < 0)
        return r;
    *ret = (eerl_verdict)v;
    return 0;
}

/* The end of the last field of 0.2, the first size-tagged release: the shortest struct a caller
 * may pass. Fields added later go after group_names. */
#define CFG_SIZE_MIN                                                                               \
    (offsetof(eerl_ctl_config, group_names) + sizeof(((eerl_ctl_config *)0)->group_names))

int eerl_ctl_config_init(eerl_mode mode, eerl_ctl_config *ret_cfg, size_t size)
{
    eerl_ctl_config c;

    if ((unsigned)mode >= EERL_MODE_COUNT || !ret_cfg || size < CFG_SIZE_MIN)
        return EERL_EINVAL;
    memset(&c, 0, sizeof(c));
    c.size = size < sizeof(c) ? size : sizeof(c);
    c.strategy = EERL_STRATEGY_EERL;
    c.allowed_loss = 0.02;
    c.min_saving = 0.0;
    c.calibration_updates = mode == EERL_MODE_INFLIGHT ? 45 : 15;
    c.trial_updates = 3;
    c.governor_between = 1;
    c.confirm_updates = 6;
    c.confirm_trials_max = 2;
    c.max_trials = 16;
    c.grid_mhz = 90;
    c.first_grid_mhz = 50;
    c.second_grid_mhz = 100;
    c.start_drop_gen_mhz = 180;
    c.start_drop_train_mhz = 360;
    c.start_drop_first_mhz = 300;
    c.start_drop_second_mhz = 200;
    switch (mode) {
    case EERL_MODE_COLOCATED:
    case EERL_MODE_DISAGGREGATED:
        c.feedback_step_mhz = 45;
        c.feedback_big_step_mhz = 90;
        break;
    case EERL_MODE_DRAINED:
        c.feedback_step_mhz = 50;
        c.feedback_big_step_mhz = 50;
        break;
    default:
        c.feedback_step_mhz = 0;
        c.feedback_big_step_mhz = 0;
        break;
    }
    c.big_loss = 0.04;
    c.monitor_margin = 0.01;
    c.monitor_every = 10;
    c.monitor_window = 20;
    c.idle_mhz = (mode == EERL_MODE_DISAGGREGATED || mode == EERL_MODE_DRAINED) ? 345 : 0;
    c.ref_window = mode == EERL_MODE_INFLIGHT ? 64 : 32;
    c.refresh_updates = 5;
    c.coverage_margin = 0.10;
    c.coverage_fail_limit = 3;
    c.block_choices[0] = 3;
    c.block_choices[1] = 6;
    c.block_choices[2] = 12;
    c.block_choices[3] = 0;
    c.se_target = 0.02;
    c.inflight_lock_candidate_blocks = 2;
    c.time_tolerance = 0.05;
    c.expected_updates = 0;
    c.budget_margin = 0.003;
    c.fast_calibration_updates = mode == EERL_MODE_INFLIGHT ? 16 : 10;
    c.warmup_updates = 1;
    c.inflight_revision = EERL__INFLIGHT_REVISION;
    c.eerl_revision = EERL__EERL_REVISION;
    c.paper_revision = EERL__PAPER_REVISION;
    c.n_groups = 2;
    snprintf(c.group_names[0], sizeof(c.group_names[0]), "generation");
    snprintf(c.group_names[1], sizeof(c.group_names[1]), "training");
    snprintf(c.group_names[2], sizeof(c.group_names[2]), "group2");
    snprintf(c.group_names[3], sizeof(c.group_names[3]), "group3");
    memcpy(ret_cfg, &c, c.size);
    return 0;
}

/* The function behind the header's macro, for bindings that call the symbol. */
int(eerl_ctl_config_default)(eerl_mode mode, eerl_ctl_config *ret_cfg)
{
    return eerl_ctl_config_init(mode, ret_cfg, sizeof(*ret_cfg));
}

/* The size of the stable view of the struct (core.h without EERL_EXPERIMENTAL): its fields end
 * at CFG_SIZE_MIN, its sizeof rounds that up to the struct's alignment. */
#define CFG_SIZE_STABLE                                                                            \
    ((CFG_SIZE_MIN + _Alignof(eerl_ctl_config) - 1) / _Alignof(eerl_ctl_config) *                  \
     _Alignof(eerl_ctl_config))

/* The bytes of a caller's struct of `size` that hold its fields: up to the stable view's size
 * only the stable fields (the padding at its end may lie where the first research knob is in
 * the experimental view, and must not be read as it); above it, every field it holds whole. */
static size_t fields_in(size_t size)
{
    static const size_t ends[] = {
        offsetof(eerl_ctl_config, warmup_updates) + sizeof(unsigned),
        offsetof(eerl_ctl_config, inflight_revision) + sizeof(unsigned),
        offsetof(eerl_ctl_config, eerl_revision) + sizeof(unsigned),
        offsetof(eerl_ctl_config, paper_revision) + sizeof(unsigned),
    };
    size_t n = CFG_SIZE_MIN, i;

    if (size <= CFG_SIZE_STABLE)
        return CFG_SIZE_MIN;
    for (i = 0; i < sizeof(ends) / sizeof(ends[0]); i++)
        if (ends[i] <= size)
            n = ends[i];
    return n;
}

int eerl__ctl_config_import(eerl_mode mode, const eerl_ctl_config *in, eerl_ctl_config *ret_cfg)
{
    if (!in || in->size < CFG_SIZE_MIN || in->size > sizeof(*in) ||
        eerl_ctl_config_init(mode, ret_cfg, sizeof(*ret_cfg)) < 0)
        return EERL_EINVAL;
    memcpy(ret_cfg, in, fields_in(in->size));
    ret_cfg->size = sizeof(*ret_cfg);
    return 0;
}

#define BAD(...)                                                                                   \
    do {                                                                                           \
        if (why && why_len)                                                                        \
            snprintf(why, why_len, __VA_ARGS__);                                                   \
        return EERL_EINVAL;                                                                        \
    } while (0)

/* The search: strategy, allowance, trial and confirmation lengths, grids. */
static int check_search(const eerl_ctl_config *c, char *why, size_t why_len)
{
    if ((unsigned)c->strategy >= EERL_STRATEGY_COUNT)
        BAD("strategy %d is unknown (valid: %s)", (int)c->strategy, eerl_strategy_names());
    if (!(c->allowed_loss >= 0 && c->allowed_loss < 1))
        BAD("allowed_loss %g must be in [0, 1)", c->allowed_loss);
    if (!(c->min_saving >= 0 && c->min_saving < 1))
        BAD("min_saving %g must be in [0, 1)", c->min_saving);
    if (c->calibration_updates < 3 || c->calibration_updates > 10000)
        BAD("calibration_updates %u must be in 3-10000", c->calibration_updates);
    if (c->trial_updates < 1 || c->trial_updates > 1000)
        BAD("trial_updates %u must be in 1-1000", c->trial_updates);
    if (c->governor_between > 1000)
        BAD("governor_between %u must be at most 1000", c->governor_between);
    if (c->confirm_updates < 1 || c->confirm_updates > 1000)
        BAD("confirm_updates %u must be in 1-1000", c->confirm_updates);
    if (c->confirm_trials_max < 1 || c->confirm_trials_max > 10)
        BAD("confirm_trials_max %u must be in 1-10", c->confirm_trials_max);
    if (c->max_trials < 1 || c->max_trials > 64)
        BAD("max_trials %u must be in 1-64", c->max_trials);
    if (c->grid_mhz < 1 || c->first_grid_mhz < 1 || c->second_grid_mhz < 1)
        BAD("search grids must be at least 1 MHz (grid %u, first %u, second %u)", c->grid_mhz,
            c->first_grid_mhz, c->second_grid_mhz);
    if (!(c->big_loss >= c->allowed_loss && c->big_loss < 1))
        BAD("big_loss %g must be in [allowed_loss %g, 1)", c->big_loss, c->allowed_loss);
    return 0;
}

/* After the lock: the monitoring window, the references, the coverage check. */
static int check_after_lock(const eerl_ctl_config *c, char *why, size_t why_len)
{
    if (!(c->monitor_margin >= 0 && c->monitor_margin <= c->allowed_loss))
        BAD("monitor_margin %g must be in [0, allowed_loss %g]", c->monitor_margin,
            c->allowed_loss);
    if (c->monitor_every < 1 || c->monitor_window < 2 || c->monitor_window > 1000)
        BAD("monitor_every %u must be >= 1 and monitor_window %u in 2-1000", c->monitor_every,
            c->monitor_window);
    if (c->ref_window < 3 || c->ref_window > 1024)
        BAD("ref_window %u must be in 3-1024", c->ref_window);
    if (c->refresh_updates < 1 || c->refresh_updates > 1000)
        BAD("refresh_updates %u must be in 1-1000", c->refresh_updates);
    if (!(c->coverage_margin >= 0 && c->coverage_margin <= 10))
        BAD("coverage_margin %g must be in [0, 10]", c->coverage_margin);
    if (c->coverage_fail_limit < 1 || c->coverage_fail_limit > 10)
        BAD("coverage_fail_limit %u must be in 1-10 (counted over the last 10 updates)",
            c->coverage_fail_limit);
    return 0;
}

/* In flight: block lengths, the standard-error target, the lock's candidates, time tolerance. */
static int check_inflight(const eerl_ctl_config *c, char *why, size_t why_len)
{
    int i;

    if (c->block_choices[0] < 1)
        BAD("block_choices[0] is 0: give at least one in-flight block length");
    for (i = 1; i < EERL_BLOCK_CHOICES_MAX; i++)
        if (c->block_choices[i] && c->block_choices[i] <= c->block_choices[i - 1])
            BAD("block_choices must ascend (%u after %u)", c->block_choices[i],
                c->block_choices[i - 1]);
        else if (!c->block_choices[i])
            break;
    for (i = 0; i < EERL_BLOCK_CHOICES_MAX; i++)
        if (c->block_choices[i] > 1000)
            BAD("block_choices[%d] %u must be at most 1000", i, c->block_choices[i]);
    if (!(c->se_target > 0 && c->se_target < 1))
        BAD("se_target %g must be in (0, 1)", c->se_target);
    if (c->inflight_lock_candidate_blocks < 1 || c->inflight_lock_candidate_blocks > 100)
        BAD("inflight_lock_candidate_blocks %u must be in 1-100",
            c->inflight_lock_candidate_blocks);
    if (!(c->time_tolerance >= 0 && c->time_tolerance <= 1))
        BAD("time_tolerance %g must be in [0, 1]", c->time_tolerance);
    return 0;
}

/* Groups: how many the strategy searches, their names unique. */
static int check_groups(const eerl_ctl_config *c, char *why, size_t why_len)
{
    int i;

    if (c->n_groups < 2 || c->n_groups > EERL_GROUPS_MAX)
        BAD("n_groups %u must be in 2-%d", c->n_groups, EERL_GROUPS_MAX);
    if (c->n_groups != 2 && c->strategy != EERL_STRATEGY_EERL &&
        c->strategy != EERL_STRATEGY_GOVERNOR && c->strategy != EERL_STRATEGY_STATIC)
        BAD("n_groups %u: strategy %s searches exactly 2 groups (generation, training); the eerl "
            "strategy searches more",
            c->n_groups, c->strategy < EERL_STRATEGY_COUNT ? strategy_names[c->strategy] : "?");
    for (i = 0; i < (int)c->n_groups; i++) {
        int j;
        if (!memchr(c->group_names[i], '\0', sizeof(c->group_names[i])) || !c->group_names[i][0])
            BAD("group_names[%d] must be a non-empty name of at most 15 characters", i);
        for (j = 0; j < i; j++)
            if (!strcmp(c->group_names[i], c->group_names[j]))
                BAD("group name '%s' is declared twice", c->group_names[i]);
    }
    return 0;
}

/* A revision key: this eerl decides as revision `now` only. Older revisions are not kept in the
 * judges; a trace one decided replays with the eerl version that wrote it. */
static int check_revision(const char *name, unsigned rev, unsigned now, char *why, size_t why_len)
{
    if (rev > now)
        BAD("%s %u is newer than this eerl knows: it decides as revision %u only", name, rev, now);
    if (rev < now)
        BAD("%s %u is an older revision: this eerl decides as revision %u only (a trace "
            "decided by an older one replays with the eerl version that wrote it, "
            "docs/trace-format.md)",
            name, rev, now);
    return 0;
}

/* The eerl strategy's knobs, the revisions, clock settings. */
static int check_eerl_and_revisions(const eerl_ctl_config *c, char *why, size_t why_len)
{
    if (c->expected_updates > 100000000u)
        BAD("expected_updates %u must be at most 100000000 (0: unknown)", c->expected_updates);
    if (!(c->budget_margin >= 0 && c->budget_margin < c->allowed_loss) &&
        c->strategy == EERL_STRATEGY_EERL)
        BAD("budget_margin %g must be in [0, allowed_loss %g)", c->budget_margin, c->allowed_loss);
    if (c->strategy == EERL_STRATEGY_EERL &&
        (c->fast_calibration_updates < 3 || c->fast_calibration_updates > 10000))
        BAD("fast_calibration_updates %u must be in 3-10000", c->fast_calibration_updates);
    if (check_revision("eerl_revision", c->eerl_revision, EERL__EERL_REVISION, why, why_len) < 0 ||
        check_revision("paper_revision", c->paper_revision, EERL__PAPER_REVISION, why, why_len) <
            0 ||
        check_revision("inflight_revision", c->inflight_revision, EERL__INFLIGHT_REVISION, why,
                       why_len) < 0)
        return EERL_EINVAL;
    if (c->warmup_updates > 1000)
        BAD("warmup_updates %u must be at most 1000", c->warmup_updates);
    if (c->idle_mhz > 100000 || c->feedback_step_mhz > 100000 || c->feedback_big_step_mhz > 100000)
        BAD("clock settings above 100000 MHz (idle %u, feedback %u/%u)", c->idle_mhz,
            c->feedback_step_mhz, c->feedback_big_step_mhz);
    return 0;
}

int eerl_ctl_config_check(const eerl_ctl_config *cfg, char *why, size_t why_len)
{
    eerl_ctl_config full;
    int rc;

    if (!cfg)
        BAD("no configuration");
    if (cfg->size < CFG_SIZE_MIN || cfg->size > sizeof(*cfg))
        BAD("configuration size %zu is not one this eerl reads (%zu to %zu): start from "
            "eerl_ctl_config_default",
            cfg->size, (size_t)CFG_SIZE_MIN, sizeof(*cfg));
    /* Fields past a shorter (older) struct's end take their defaults, which pass. */
    if (eerl__ctl_config_import(EERL_MODE_COLOCATED, cfg, &full) < 0)
        BAD("no configuration");
    rc = check_search(&full, why, why_len);
    if (rc == 0)
        rc = check_after_lock(&full, why, why_len);
    if (rc == 0)
        rc = check_inflight(&full, why, why_len);
    if (rc == 0)
        rc = check_groups(&full, why, why_len);
    if (rc == 0)
        rc = check_eerl_and_revisions(&full, why, why_len);
    return rc;
}

const char *eerl__ctl_config_revision(eerl_mode mode, const eerl_ctl_config *cfg, unsigned *ret_rev,
                                      unsigned *ret_now)
{
    if (cfg->strategy == EERL_STRATEGY_EERL && mode == EERL_MODE_INFLIGHT) {
        *ret_rev = cfg->inflight_revision;
        *ret_now = EERL__INFLIGHT_REVISION;
        return "inflight_revision";
    }
    if (cfg->strategy == EERL_STRATEGY_EERL) {
        *ret_rev = cfg->eerl_revision;
        *ret_now = EERL__EERL_REVISION;
        return "eerl_revision";
    }
    if (cfg->strategy == EERL_STRATEGY_PAPER &&
        (mode == EERL_MODE_COLOCATED || mode == EERL_MODE_DISAGGREGATED)) {
        *ret_rev = cfg->paper_revision;
        *ret_now = EERL__PAPER_REVISION;
        return "paper_revision";
    }
    return NULL;
}

void eerl__ctl_config_revisions_from_older(eerl_ctl_config *cfg)
{
    if (cfg->inflight_revision < EERL__INFLIGHT_REVISION)
        cfg->inflight_revision = EERL__INFLIGHT_REVISION;
    if (cfg->eerl_revision < EERL__EERL_REVISION)
        cfg->eerl_revision = EERL__EERL_REVISION;
    if (cfg->paper_revision < EERL__PAPER_REVISION)
        cfg->paper_revision = EERL__PAPER_REVISION;
}

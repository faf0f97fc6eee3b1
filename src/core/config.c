/* Owns the controller's configuration: its size tags, its defaults and checks (each option's own
 * from the table of options, options.c; here the ones across options and the arrays). Pure
 * data: no state, no I/O. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "eerl/core.h"
#include "eerl/error.h"
#include "core/config.h"

/* The end of the last field of 0.2, the first size-tagged release, and of this one: the
 * shortest struct a caller may pass. A field added later goes after group_names, and
 * eerl__ctl_config_import copies it where the caller's size holds it. */
#define CFG_SIZE_MIN                                                                               \
    (offsetof(eerl_ctl_config, group_names) + sizeof(((eerl_ctl_config *)0)->group_names))

int eerl_ctl_config_init(eerl_mode mode, eerl_ctl_config *ret_cfg, size_t size)
{
    eerl_ctl_config c;

    if ((unsigned)mode >= EERL_MODE_COUNT || !ret_cfg || size < CFG_SIZE_MIN)
        return EERL_EINVAL;
    memset(&c, 0, sizeof(c));
    c.size = size < sizeof(c) ? size : sizeof(c);
    eerl__options_defaults(mode, &c); /* every number: the table of options */
    c.block_choices[0] = 3;
    c.block_choices[1] = 6;
    c.block_choices[2] = 12;
    c.block_choices[3] = 0;
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

int eerl__ctl_config_import(eerl_mode mode, const eerl_ctl_config *in, eerl_ctl_config *ret_cfg)
{
    if (!in || in->size < CFG_SIZE_MIN || in->size > sizeof(*in) ||
        eerl_ctl_config_init(mode, ret_cfg, sizeof(*ret_cfg)) < 0)
        return EERL_EINVAL;
    memcpy(ret_cfg, in, CFG_SIZE_MIN); /* every field; the padding after them stays zero */
    ret_cfg->size = sizeof(*ret_cfg);
    return 0;
}

#define BAD(...)                                                                                   \
    do {                                                                                           \
        if (why && why_len)                                                                        \
            snprintf(why, why_len, __VA_ARGS__);                                                   \
        return EERL_EINVAL;                                                                        \
    } while (0)

/* Bounds that depend on another option (each option's own bounds: the table of options). */
static int check_relations(const eerl_ctl_config *c, char *why, size_t why_len)
{
    if (c->big_loss < c->allowed_loss)
        BAD("big_loss %g must be at least allowed_loss %g", c->big_loss, c->allowed_loss);
    if (c->monitor_margin > c->allowed_loss)
        BAD("monitor_margin %g must be at most allowed_loss %g", c->monitor_margin,
            c->allowed_loss);
    if (c->budget_margin >= c->allowed_loss && c->strategy == EERL_STRATEGY_EERL)
        BAD("budget_margin %g must be below allowed_loss %g", c->budget_margin, c->allowed_loss);
    return 0;
}

/* In flight: the block lengths. */
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
    return 0;
}

/* Groups: how many the strategy searches, their names unique. */
static int check_groups(const eerl_ctl_config *c, char *why, size_t why_len)
{
    int i;

    if (c->n_groups != 2 && c->strategy != EERL_STRATEGY_EERL &&
        c->strategy != EERL_STRATEGY_GOVERNOR && c->strategy != EERL_STRATEGY_STATIC)
        BAD("n_groups %u: strategy %s searches exactly 2 groups (generation, training); the eerl "
            "strategy searches more",
            c->n_groups, eerl_strategy_name(c->strategy));
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

int eerl__ctl_xopts_check(const struct eerl__ctl_xopts *x, char *why, size_t why_len)
{
    if (check_revision("eerl_revision", x->eerl_revision, EERL__EERL_REVISION, why, why_len) < 0 ||
        check_revision("paper_revision", x->paper_revision, EERL__PAPER_REVISION, why, why_len) <
            0 ||
        check_revision("inflight_revision", x->inflight_revision, EERL__INFLIGHT_REVISION, why,
                       why_len) < 0)
        return EERL_EINVAL;
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
    rc = eerl__options_check_ctl(&full, why, why_len);
    if (rc == 0)
        rc = check_relations(&full, why, why_len);
    if (rc == 0)
        rc = check_inflight(&full, why, why_len);
    if (rc == 0)
        rc = check_groups(&full, why, why_len);
    return rc;
}

const char *eerl__ctl_revision(eerl_mode mode, eerl_strategy strategy,
                               const struct eerl__ctl_xopts *x, unsigned *ret_rev,
                               unsigned *ret_now)
{
    if (strategy == EERL_STRATEGY_EERL && mode == EERL_MODE_INFLIGHT) {
        *ret_rev = x->inflight_revision;
        *ret_now = EERL__INFLIGHT_REVISION;
        return "inflight_revision";
    }
    if (strategy == EERL_STRATEGY_EERL) {
        *ret_rev = x->eerl_revision;
        *ret_now = EERL__EERL_REVISION;
        return "eerl_revision";
    }
    if (strategy == EERL_STRATEGY_PAPER &&
        (mode == EERL_MODE_COLOCATED || mode == EERL_MODE_DISAGGREGATED)) {
        *ret_rev = x->paper_revision;
        *ret_now = EERL__PAPER_REVISION;
        return "paper_revision";
    }
    return NULL;
}

/* Owns the names of the core's enums (modes, strategies, states, events, verdicts) that traces,
 * the CLI and messages use, both ways. Pure data: no state, no I/O. */
#include <stddef.h>
#include <string.h>

#include "eerl/core.h"
#include "eerl/error.h"

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

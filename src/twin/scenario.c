/* Workload drift scenarios: names, defaults and the preset's copy. Where each default comes from
 * is in docs/twin.md; the figures of the collapsing one are fitted on the H200 run
 * data/h200/grpo-2026-11-30/colocated-long (mean response length over 101 updates: a fall to
 * 0.40 of its start with a time constant of 12 updates, and a longest response that left the
 * 2048-token limit for about 600 tokens, which needs the lognormal shape to halve as well). */
#include <string.h>

#include "eerl/error.h"
#include "twin/presets.h"
#include "eerl/tools/twin.h"

static const char *const names[EERL_TWIN_SCENARIO_COUNT] = {"steady", "growing", "collapsing",
                                                            "step"};

const char *eerl_twin_scenario_names(void)
{
    return "steady, growing, collapsing, step";
}

const char *eerl_twin_scenario_name(int kind)
{
    return kind >= 0 && kind < EERL_TWIN_SCENARIO_COUNT ? names[kind] : "?";
}

int eerl_twin_scenario_parse(const char *name, int *ret_kind)
{
    int k;

    if (!name || !ret_kind)
        return EERL_EINVAL;
    for (k = 0; k < EERL_TWIN_SCENARIO_COUNT; k++)
        if (!strcmp(name, names[k])) {
            *ret_kind = k;
            return 0;
        }
    return EERL_ENOENT;
}

void eerl_twin_scenario_default(int kind, unsigned updates, struct eerl_twin_scenario *ret)
{
    struct eerl_twin_scenario s;

    memset(&s, 0, sizeof(s));
    s.kind = kind;
    switch (kind) {
    case EERL_TWIN_SCENARIO_GROWING:
        s.factor = 2.5;
        s.span = updates > 0 ? updates : 1;
        break;
    case EERL_TWIN_SCENARIO_COLLAPSING:
        s.factor = 0.4;
        s.spread = 0.5;
        s.tau = 12;
        break;
    case EERL_TWIN_SCENARIO_STEP:
        s.factor = 2.0;
        s.at = updates / 2;
        break;
    default:
        s.kind = EERL_TWIN_SCENARIO_STEADY;
        break;
    }
    *ret = s;
}

int eerl_twin_preset_set_scenario(eerl_twin_preset *p, const struct eerl_twin_scenario *s)
{
    static const char sz[] = "SML";
    struct eerl__wl_params wl;
    struct eerl__wl_batch expc[3][EERL__EXP_CACHE];
    int i;
    unsigned u;

    if (!p || !s || !eerl__wl_scenario_ok(s))
        return EERL_EINVAL;
    wl = p->wl;
    wl.scn = *s;
    for (i = 0; i < 3; i++)
        for (u = 0; u < EERL__EXP_CACHE; u++)
            if (eerl__wl_expected(&wl, sz[i], u, &expc[i][u]) < 0)
                return EERL_EINVAL;
    p->wl = wl;
    memcpy(p->expc, expc, sizeof(expc));
    return 0;
}

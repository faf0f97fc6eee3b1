/* Settings as values: comparison and the one printer every part uses ("1800/1620", "gov/1185
 * idle 345" in traces, events and the replay; "Gov/1185" in the result tables, the paper's
 * spelling). Owns nothing. */
#include <stdio.h>

#include "core/setting.h"

int eerl_setting_equal(const eerl_setting *a, const eerl_setting *b)
{
    int i;

    for (i = 0; i < EERL_GROUPS_MAX; i++)
        if (a->mhz[i] != b->mhz[i])
            return 0;
    return a->idle_mhz == b->idle_mhz;
}

int eerl_setting_is_governor(const eerl_setting *s)
{
    int i;

    for (i = 0; i < EERL_GROUPS_MAX; i++)
        if (s->mhz[i] != EERL_CLOCK_GOVERNOR)
            return 0;
    return s->idle_mhz == EERL_CLOCK_GOVERNOR;
}

const char *eerl__setting_text(const eerl_setting *s, unsigned style, char *buf, size_t len)
{
    const char *gov = style & EERL__SETTING_TABLE ? "Gov" : "gov";
    char g[16], t[16];

    if (s->mhz[0])
        snprintf(g, sizeof(g), "%u", s->mhz[0]);
    else
        snprintf(g, sizeof(g), "%s", gov);
    if (s->mhz[1])
        snprintf(t, sizeof(t), "%u", s->mhz[1]);
    else
        snprintf(t, sizeof(t), "%s", gov);
    if (s->idle_mhz && !(style & EERL__SETTING_TABLE))
        snprintf(buf, len, "%s/%s idle %u", g, t, s->idle_mhz);
    else
        snprintf(buf, len, "%s/%s", g, t);
    return buf;
}

const char *eerl_setting_str(const eerl_setting *s, char *buf, size_t len)
{
    return eerl__setting_text(s, 0, buf, len);
}

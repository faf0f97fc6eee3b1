/* Owns the clock grid (grid.h): the sorted list of supported clocks and the arithmetic that
 * keeps every clock the controller emits a supported one. Pure; allocates only in init. */
#include <stdlib.h>
#include <string.h>

#include "eerl/error.h"
#include "core/grid.h"

static int cmp_desc(const void *a, const void *b)
{
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    return (x < y) - (x > y);
}

int eerl__grid_init(struct eerl__grid *g, const unsigned *clocks, size_t n, unsigned peak,
                    unsigned idle_mhz)
{
    size_t i, k;

    memset(g, 0, sizeof(*g));
    g->clocks = malloc(n * sizeof(*g->clocks));
    if (!g->clocks)
        return EERL_ENOMEM;
    memcpy(g->clocks, clocks, n * sizeof(*clocks));
    qsort(g->clocks, n, sizeof(*g->clocks), cmp_desc);
    for (i = 0, k = 0; i < n; i++)
        if (k == 0 || g->clocks[k - 1] != g->clocks[i])
            g->clocks[k++] = g->clocks[i];
    g->n = k;
    g->peak = peak;
    g->top = peak;
    g->idle_mhz = idle_mhz;
    return 0;
}

void eerl__grid_free(struct eerl__grid *g)
{
    free(g->clocks);
    g->clocks = NULL;
    g->n = 0;
}

void eerl__grid_top_below_peak(struct eerl__grid *g)
{
    size_t i;

    for (i = 0; i < g->n; i++)
        if (g->clocks[i] < g->peak) {
            g->top = g->clocks[i];
            return;
        }
}

unsigned eerl__grid_eff(const struct eerl__grid *g, unsigned mhz)
{
    return mhz == EERL_CLOCK_GOVERNOR || mhz >= g->peak ? g->peak : mhz;
}

unsigned eerl__grid_snap(const struct eerl__grid *g, unsigned mhz)
{
    unsigned best = g->clocks[0];
    size_t i;

    if (mhz == EERL_CLOCK_GOVERNOR || mhz >= g->peak)
        return EERL_CLOCK_GOVERNOR;
    for (i = 0; i < g->n; i++) {
        unsigned c = g->clocks[i];
        unsigned d = c > mhz ? c - mhz : mhz - c, bd = best > mhz ? best - mhz : mhz - best;
        if (d < bd)
            best = c;
    }
    /* The peak itself, if supported, means "governor" too. */
    return best >= g->peak ? EERL_CLOCK_GOVERNOR : best;
}

int eerl__grid_step(const struct eerl__grid *g, unsigned mhz, int delta, unsigned *ret)
{
    long cur = (long)eerl__grid_eff(g, mhz), step = delta < 0 ? -(long)delta : delta, k, target;
    unsigned s;
    size_t i;

    if (delta == 0) {
        *ret = eerl__grid_snap(g, (unsigned)cur);
        return 0;
    }
    /* Grid positions are anchored at the grid's top (top - k * step), so repeated steps keep the
     * nominal spacing on average even where the supported clocks do not fall on the grid. */
    k = ((long)g->top - cur + step / 2) / step;
    target = (long)g->top - (delta < 0 ? k + 1 : k - 1) * step;
    if (target >= (long)g->top) {
        *ret = EERL_CLOCK_GOVERNOR;
        return 0;
    }
    if (target <= 0)
        target = 1;
    s = eerl__grid_snap(g, (unsigned)target);
    if (delta < 0 && eerl__grid_eff(g, s) >= (unsigned)cur) {
        /* Snapping undid the step: take the next supported clock below. */
        s = 0;
        for (i = 0; i < g->n; i++)
            if (g->clocks[i] < (unsigned)cur) {
                s = g->clocks[i];
                break;
            }
        if (!s)
            return EERL_ERANGE;
    } else if (delta > 0 && s != EERL_CLOCK_GOVERNOR && s <= (unsigned)cur) {
        s = EERL_CLOCK_GOVERNOR;
        for (i = g->n; i-- > 0;)
            if (g->clocks[i] > (unsigned)cur) {
                s = g->clocks[i] >= g->top ? EERL_CLOCK_GOVERNOR : g->clocks[i];
                break;
            }
    }
    /* Below the lowest supported clock there is nothing to step to. */
    if (delta < 0 && target < (long)g->clocks[g->n - 1] &&
        (long)g->clocks[g->n - 1] - target > step / 2)
        return EERL_ERANGE;
    *ret = s;
    return 0;
}

eerl_setting eerl__grid_setting(const struct eerl__grid *g, unsigned gen, unsigned train)
{
    eerl_setting s;

    memset(&s, 0, sizeof(s));
    s.mhz[EERL_GROUP_GEN] = gen;
    s.mhz[EERL_GROUP_TRAIN] = train;
    if ((gen != EERL_CLOCK_GOVERNOR || train != EERL_CLOCK_GOVERNOR) && g->idle_mhz)
        s.idle_mhz = eerl__grid_snap(g, g->idle_mhz);
    return s;
}

eerl_setting eerl__grid_with_group(const struct eerl__grid *g, const eerl_setting *base, int group,
                                   unsigned clock)
{
    unsigned gen = base->mhz[EERL_GROUP_GEN], train = base->mhz[EERL_GROUP_TRAIN];

    if (group == EERL_GROUP_GEN)
        gen = clock;
    else
        train = clock;
    return eerl__grid_setting(g, gen, train);
}

int eerl__grid_first_train_drop(const struct eerl__grid *g, unsigned drop, eerl_setting *ret)
{
    unsigned t = 0;

    (void)eerl__grid_step(g, EERL_CLOCK_GOVERNOR, -(int)drop, &t);
    *ret = eerl__grid_setting(g, EERL_CLOCK_GOVERNOR, t);
    return eerl_setting_is_governor(ret) ? EERL_ERANGE : 0;
}

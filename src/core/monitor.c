/* Owns the after-lock monitor (see monitor.h). The window keeps the governor prediction made when
 * each update arrived, so a refit does not rewrite past comparisons. Floors stop a ping-pong
 * between a clock that fell short and the one above it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eerl/error.h"
#include "core/monitor.h"

#define COV_SPAN 10u

int eerl__monitor_init(struct eerl__monitor *m, unsigned window)
{
    memset(m, 0, sizeof(*m));
    m->ring = calloc(window, sizeof(*m->ring));
    if (!m->ring)
        return EERL_ENOMEM;
    m->cap = window;
    m->last_lowered = -1;
    return 0;
}

void eerl__monitor_fini(struct eerl__monitor *m)
{
    free(m->ring);
    m->ring = NULL;
}

void eerl__monitor_reset(struct eerl__monitor *m)
{
    m->n = 0;
    m->head = 0;
    m->since_check = 0;
    m->cov_bits = 0;
    m->cov_n = 0;
}

void eerl__monitor_clear(struct eerl__monitor *m)
{
    eerl__monitor_reset(m);
    memset(m->floor, 0, sizeof(m->floor));
    m->last_lowered = -1;
}

static unsigned popcount(unsigned v)
{
    unsigned c = 0;
    for (; v; v &= v - 1)
        c++;
    return c;
}

int eerl__monitor_add(struct eerl__monitor *m, const struct eerl__ctx *cx, const eerl_obs *obs,
                      struct eerl__acc *ret_sum)
{
    int covered = eerl__pred_covered(&cx->refs->pred, obs, cx->cfg->coverage_margin);
    unsigned i;

    m->cov_bits = ((m->cov_bits << 1) | (covered ? 0u : 1u)) & ((1u << COV_SPAN) - 1);
    if (m->cov_n < COV_SPAN)
        m->cov_n++;
    if (popcount(m->cov_bits) >= cx->cfg->coverage_fail_limit) {
        m->cov_bits = 0;
        m->cov_n = 0;
        return EERL__MON_REFRESH;
    }
    m->since_check++;
    if (covered) {
        struct eerl__acc *e;

        if (m->n < m->cap) {
            e = &m->ring[(m->head + m->n) % m->cap];
            m->n++;
        } else {
            e = &m->ring[m->head];
            m->head = (m->head + 1) % m->cap;
        }
        eerl__acc_reset(e);
        eerl__acc_add(e, cx, obs);
    }
    if (m->since_check < cx->cfg->monitor_every || m->n < m->cap)
        return EERL__MON_NONE;
    m->since_check = 0;
    eerl__acc_reset(ret_sum);
    for (i = 0; i < m->n; i++)
        eerl__acc_merge(ret_sum, &m->ring[i]);
    return EERL__MON_CHECK;
}

int eerl__monitor_decide(struct eerl__monitor *m, const struct eerl__ctx *cx,
                         const eerl_setting *cur, unsigned adjustable, const struct eerl__ratios *r,
                         unsigned step, unsigned big_step, eerl_setting *ret_new, char *why,
                         size_t len)
{
    const eerl_ctl_config *c = cx->cfg;
    double loss = 1.0 - 1.0 / r->time;
    int order[2], i, g;

    /* Order the adjustable groups by the time they add: most first. */
    order[0] = r->add_gen >= r->add_train ? EERL_GROUP_GEN : EERL_GROUP_TRAIN;
    order[1] = order[0] == EERL_GROUP_GEN ? EERL_GROUP_TRAIN : EERL_GROUP_GEN;
    if (step == 0) {
        snprintf(why, len, "no feedback step configured: holding");
        return EERL__MON_HOLD;
    }
    if (loss > c->allowed_loss) {
        unsigned s = loss > c->big_loss ? big_step : step;
        for (i = 0; i < 2; i++) {
            unsigned nv;
            g = order[i];
            if (!(adjustable & (1u << g)) || cur->mhz[g] == EERL_CLOCK_GOVERNOR)
                continue;
            if (eerl__grid_step(cx->grid, cur->mhz[g], (int)s, &nv) < 0)
                continue;
            if (eerl__grid_eff(cx->grid, cur->mhz[g]) > m->floor[g])
                m->floor[g] = eerl__grid_eff(cx->grid, cur->mhz[g]);
            *ret_new = *cur;
            ret_new->mhz[g] = nv;
            if (ret_new->mhz[0] == EERL_CLOCK_GOVERNOR && ret_new->mhz[1] == EERL_CLOCK_GOVERNOR)
                ret_new->idle_mhz = EERL_CLOCK_GOVERNOR;
            snprintf(why, len, "throughput loss %.2f%% > %.2f%%: raise %s by %u MHz", 100 * loss,
                     100 * c->allowed_loss, g == EERL_GROUP_GEN ? "generation" : "training", s);
            return EERL__MON_RAISE;
        }
        snprintf(why, len, "throughput loss %.2f%% but no clock left to raise", 100 * loss);
        return EERL__MON_HOLD;
    }
    if (!(r->energy < 1.0 - c->min_saving)) {
        snprintf(why, len,
                 "energy per token %.2f%% of the governor reference: no saving, refresh the "
                 "reference",
                 100 * r->energy);
        return EERL__MON_REFRESH_ENERGY;
    }
    if (loss < c->allowed_loss - c->monitor_margin) {
        /* Lower the group that adds least time; when neither adds a noticeable amount (within
         * 0.5% of the window's time), take turns so both get explored. */
        if (fabs(r->add_gen - r->add_train) < 0.005 * (r->window_time > 0 ? r->window_time : 0) &&
            m->last_lowered >= 0) {
            order[1] = m->last_lowered == EERL_GROUP_GEN ? EERL_GROUP_TRAIN : EERL_GROUP_GEN;
            order[0] = order[1] == EERL_GROUP_GEN ? EERL_GROUP_TRAIN : EERL_GROUP_GEN;
        }
        for (i = 1; i >= 0; i--) {
            unsigned nv;
            g = order[i];
            if (!(adjustable & (1u << g)) || cur->mhz[g] == EERL_CLOCK_GOVERNOR)
                continue;
            if (eerl__grid_step(cx->grid, cur->mhz[g], -(int)step, &nv) < 0)
                continue;
            if (m->floor[g] && eerl__grid_eff(cx->grid, nv) <= m->floor[g])
                continue;
            *ret_new = *cur;
            ret_new->mhz[g] = nv;
            m->last_lowered = g;
            snprintf(why, len, "throughput loss %.2f%% leaves margin: lower %s by %u MHz",
                     100 * loss, g == EERL_GROUP_GEN ? "generation" : "training", step);
            return EERL__MON_LOWER;
        }
    }
    snprintf(why, len, "throughput loss %.2f%%, energy per token %.2f%% of governor: hold",
             100 * loss, 100 * r->energy);
    return EERL__MON_HOLD;
}

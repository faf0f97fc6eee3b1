/* The proposer's side of the interface (propose.h): the calls a judge asks its proposer through,
 * the empty outcome, and the record of settings a search round has judged. Owns no memory. */
#include <string.h>

#include "core/propose.h"
#include "core/ratios.h"

static void move_init(struct eerl__move *m)
{
    memset(m, 0, sizeof(*m));
    m->kind = EERL__MOVE_TRY;
    m->group = -1;
    m->energy_bar = 1.0;
}

void eerl__propose_start(const struct eerl__ctx *cx, const struct eerl__outcome *from,
                         struct eerl__move *ret)
{
    move_init(ret);
    cx->prop->start(cx, cx->pst, from, ret);
}

void eerl__propose_next(const struct eerl__ctx *cx, const struct eerl__outcome *o,
                        struct eerl__move *ret)
{
    move_init(ret);
    cx->prop->next(cx, cx->pst, o, ret);
}

struct eerl__outcome eerl__outcome_of(const eerl_setting *s)
{
    struct eerl__outcome o;

    memset(&o, 0, sizeof(o));
    o.s = *s;
    o.verdict = EERL_VERDICT_NONE;
    o.slack_group = -1;
    o.late_group = -1;
    o.wait_ratio = -1;
    return o;
}

struct eerl__tried *eerl__tried_find(struct eerl__tried_set *set, const eerl_setting *s)
{
    unsigned i;

    for (i = 0; i < set->n; i++)
        if (eerl_setting_equal(&set->t[i].s, s))
            return &set->t[i];
    return NULL;
}

struct eerl__tried *eerl__tried_put(struct eerl__tried_set *set, const eerl_setting *s,
                                    eerl_verdict v, int time_fail, const struct eerl__ratios *r)
{
    struct eerl__tried *t = eerl__tried_find(set, s);

    if (!t) {
        if (set->n == EERL__TRIED_MAX) {
            memmove(&set->t[0], &set->t[1], sizeof(set->t[0]) * (EERL__TRIED_MAX - 1));
            set->n--;
        }
        t = &set->t[set->n++];
        memset(t, 0, sizeof(*t));
        t->s = *s;
    }
    t->v = v;
    t->time_fail = time_fail;
    t->time_ratio = r->time;
    t->energy_ratio = r->energy;
    return t;
}

const struct eerl__tried *eerl__tried_best(const struct eerl__tried_set *set)
{
    const struct eerl__tried *best = NULL;
    unsigned i;

    for (i = 0; i < set->n; i++) {
        const struct eerl__tried *t = &set->t[i];
        if (t->v != EERL_VERDICT_PASS || t->confirm_failed)
            continue;
        if (!best || t->energy_ratio < best->energy_ratio)
            best = t;
    }
    return best;
}

struct eerl__outcome eerl__outcome_judged(const eerl_setting *s, eerl_verdict v, int tf,
                                          const struct eerl__ratios *r)
{
    struct eerl__outcome o = eerl__outcome_of(s);

    o.verdict = v;
    o.too_slow = tf;
    o.r = r;
    o.loss = 1.0 - 1.0 / r->time;
    o.energy = r->energy;
    return o;
}

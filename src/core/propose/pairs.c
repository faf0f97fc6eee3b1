/* Algorithm 1's proposer for the synchronous modes (sections 5.2, 6.1; colocated and
 * disaggregated): both clocks start reduced (cfg.start_drop_gen_mhz, cfg.start_drop_train_mhz
 * below the peak); a passing pair leads one grid step lower (both groups, else one); a failing
 * pair raises the group that added most time first; when the last verdict leads nowhere new, the
 * search goes on below the best passing pair only; a pair no faster in either group
 * than one that was too slow is never tried. After cfg.max_trials trials, or when nothing new is
 * left, the best passing pair is confirmed on fresh updates: it passes and is locked, or the next
 * best is confirmed, else the search goes on; nothing passing: the governor stays.
 * Its judge is judge/sync.c (through judge/trial_loop.c's trial loop). Owns only its state. */
#include <string.h>

#include "core/propose.h"
#include "core/ratios.h"

struct pairs_st {
    unsigned trials;
    struct eerl__tried_set tried;
};

/* A setting a time failure already rules out: no faster in either group than a pair that was too
 * slow. */
static int dominated(const struct eerl__ctx *cx, const struct pairs_st *st, const eerl_setting *s)
{
    unsigned i;

    for (i = 0; i < st->tried.n; i++) {
        const struct eerl__tried *t = &st->tried.t[i];
        if (t->v == EERL_VERDICT_FAIL && t->time_fail &&
            eerl__grid_eff(cx->grid, s->mhz[0]) <= eerl__grid_eff(cx->grid, t->s.mhz[0]) &&
            eerl__grid_eff(cx->grid, s->mhz[1]) <= eerl__grid_eff(cx->grid, t->s.mhz[1]))
            return 1;
    }
    return 0;
}

/* Moves the groups of `from` by dg and dt MHz (0 = stays) and checks the result is new and worth
 * a trial. */
static int try_move(const struct eerl__ctx *cx, struct pairs_st *st, const eerl_setting *from,
                    int dg, int dt, eerl_setting *ret)
{
    unsigned g = from->mhz[0], t = from->mhz[1];
    eerl_setting s;

    if (dg && eerl__grid_step(cx->grid, g, dg, &g) < 0)
        return 0;
    if (dt && eerl__grid_step(cx->grid, t, dt, &t) < 0)
        return 0;
    s = eerl__grid_setting(cx->grid, g, t);
    if (eerl_setting_is_governor(&s) || eerl__tried_find(&st->tried, &s) || dominated(cx, st, &s))
        return 0;
    *ret = s;
    return 1;
}

static int lower_neighbour(const struct eerl__ctx *cx, struct pairs_st *st,
                           const eerl_setting *from, eerl_setting *ret)
{
    int d = -(int)cx->cfg->grid_mhz;
    return try_move(cx, st, from, d, d, ret) || try_move(cx, st, from, d, 0, ret) ||
           try_move(cx, st, from, 0, d, ret);
}

/* Algorithm 1, "propose a candidate": from the last verdict, else a lower neighbour of the
 * passing pair with the lowest energy (section 6.1: "Once a pair passes, it explores lower
 * settings for further energy savings"; that pair is the one Algorithm 1 line 9 confirms). 0 when
 * the search is over: the best pair has no lower neighbour left to try. Lower neighbours of pairs
 * that already lost to it are not searched (they took the noisy twin's disaggregated runs to the
 * 16-trial cap in 6 of 8 seeds, against the 10 trials Table 5's lock at 62 leaves). */
static int next_candidate(const struct eerl__ctx *cx, struct pairs_st *st,
                          const struct eerl__outcome *o, eerl_setting *ret)
{
    int up = (int)cx->cfg->grid_mhz;
    const eerl_setting *from = &o->s;
    const struct eerl__tried *best;

    if (st->trials >= cx->cfg->max_trials)
        return 0;
    if (o->verdict == EERL_VERDICT_PASS) {
        if (lower_neighbour(cx, st, from, ret))
            return 1;
    } else {
        int gen_first = o->r->add_gen > o->r->add_train;
        if (gen_first ? (try_move(cx, st, from, up, 0, ret) || try_move(cx, st, from, 0, up, ret))
                      : (try_move(cx, st, from, 0, up, ret) || try_move(cx, st, from, up, 0, ret)))
            return 1;
    }
    best = eerl__tried_best(&st->tried);
    return best && lower_neighbour(cx, st, &best->s, ret);
}

/* The best passing pair not yet refused by a confirmation, to confirm; 0 if none. */
static int confirm_best(const struct pairs_st *st, struct eerl__move *ret)
{
    const struct eerl__tried *best = eerl__tried_best(&st->tried);

    if (!best)
        return 0;
    ret->kind = EERL__MOVE_CONFIRM;
    ret->s = best->s;
    return 1;
}

static void governor_stays(struct eerl__move *ret)
{
    memset(&ret->s, 0, sizeof(ret->s));
    ret->kind = EERL__MOVE_STOP;
    strcpy(ret->why, "no tested setting passed; the governor stays");
}

static void pairs_start(const struct eerl__ctx *cx, void *vst, const struct eerl__outcome *from,
                        struct eerl__move *ret)
{
    unsigned g = 0, t = 0;

    (void)vst;
    (void)from;
    (void)eerl__grid_step(cx->grid, EERL_CLOCK_GOVERNOR, -(int)cx->cfg->start_drop_gen_mhz, &g);
    (void)eerl__grid_step(cx->grid, EERL_CLOCK_GOVERNOR, -(int)cx->cfg->start_drop_train_mhz, &t);
    ret->s = eerl__grid_setting(cx->grid, g, t);
    if (eerl_setting_is_governor(&ret->s)) {
        ret->kind = EERL__MOVE_STOP;
        strcpy(ret->why, "no supported clock below the governor's peak");
    }
}

static void pairs_next(const struct eerl__ctx *cx, void *vst, const struct eerl__outcome *o,
                       struct eerl__move *ret)
{
    struct pairs_st *st = vst;
    struct eerl__tried *t;

    if (!o->confirm) {
        st->trials++;
        (void)eerl__tried_put(&st->tried, &o->s, o->verdict, o->too_slow, o->r);
    } else {
        if (o->verdict == EERL_VERDICT_PASS) {
            ret->kind = EERL__MOVE_STOP;
            ret->s = o->s;
            strcpy(ret->why, "confirmed on fresh updates");
            return;
        }
        if ((t = eerl__tried_find(&st->tried, &o->s))) {
            t->confirm_failed = 1;
            t->time_fail = o->too_slow;
        }
        /* Algorithm 1 line 10: the next passing setting, else more search. */
        if (confirm_best(st, ret))
            return;
    }
    if (next_candidate(cx, st, o, &ret->s))
        ret->kind = EERL__MOVE_TRY;
    else if (!confirm_best(st, ret))
        governor_stays(ret);
}

const struct eerl__proposer_ops eerl__propose_pairs = {
    .name = "pairs",
    .st_size = sizeof(struct pairs_st),
    .start = pairs_start,
    .next = pairs_next,
};

/* Owns the saved-state format (save.h). Format 3: a header, the references as raw eerl_obs,
 * and a checksum of everything before it; format 2 (the same without the checksum) is still
 * read, unchecked, so states saved before checksums resume. For the same eerl major version on
 * the same host architecture. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "eerl/error.h"
#include "eerl/version.h"
#include "core/save.h"

/* 3: a checksum of everything before it follows the references. 2 (the header carries a hash of
 * the decision settings) is still read, without a check: states saved before checksums resume. */
#define SAVE_MAGIC "EERLCTL" EERL__SAVE_FORMAT
#define SAVE_MAGIC_V2 "EERLCTL2"
#define SAVE_SUM 8 /* bytes of the checksum */
#define SAVE_TAG EERL__SAVE_TAG

struct save_head {
    char magic[8];
    uint32_t version, mode, strategy, peak, n_clocks, n_groups;
    uint64_t clocks_hash, cfg_hash;
    char tag[SAVE_TAG];
    uint32_t locked, ref_n;
    eerl_setting locked_setting;
};

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    size_t i;

    for (i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ull;
    }
    return h;
}

static uint64_t clocks_hash(const struct eerl__grid *g)
{
    uint64_t h = 1469598103934665603ull;
    size_t i;

    for (i = 0; i < g->n; i++) {
        h ^= g->clocks[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* The settings a saved lock was judged under, field by field (no struct padding). Left out on
 * purpose: the horizon (expected_updates, calibration lengths: a later job segment has fewer
 * updates left) and ref_window (restore takes the most recent references that fit). */
static uint64_t cfg_hash(const eerl_ctl_config *c)
{
    uint64_t h = 1469598103934665603ull;
    const double d[] = {c->allowed_loss,    c->min_saving, c->big_loss,       c->monitor_margin,
                        c->coverage_margin, c->se_target,  c->time_tolerance, c->budget_margin};
    const unsigned u[] = {c->trial_updates,
                          c->governor_between,
                          c->confirm_updates,
                          c->confirm_trials_max,
                          c->max_trials,
                          c->grid_mhz,
                          c->first_grid_mhz,
                          c->second_grid_mhz,
                          c->start_drop_gen_mhz,
                          c->start_drop_train_mhz,
                          c->start_drop_first_mhz,
                          c->start_drop_second_mhz,
                          c->feedback_step_mhz,
                          c->feedback_big_step_mhz,
                          c->monitor_every,
                          c->monitor_window,
                          c->idle_mhz,
                          c->refresh_updates,
                          c->coverage_fail_limit,
                          c->inflight_lock_candidate_blocks,
                          c->n_groups};
    unsigned g;

    h = fnv(h, d, sizeof(d));
    h = fnv(h, u, sizeof(u));
    h = fnv(h, c->block_choices, sizeof(c->block_choices));
    h = fnv(h, c->static_setting.mhz, sizeof(c->static_setting.mhz));
    for (g = 0; g < EERL_GROUPS_MAX; g++) {
        h = fnv(h, c->group_names[g], strnlen(c->group_names[g], sizeof(c->group_names[g])));
        h = fnv(h, "", 1);
    }
    h = fnv(h, &c->static_setting.idle_mhz, sizeof(c->static_setting.idle_mhz));
    return h;
}

static void head_of(const struct eerl__ctx *cx, const char *tag, struct save_head *h)
{
    memset(h, 0, sizeof(*h));
    memcpy(h->magic, SAVE_MAGIC, 8);
    h->version = EERL_VERSION_HEX;
    h->mode = (uint32_t)cx->mode;
    h->strategy = (uint32_t)cx->cfg->strategy;
    h->peak = cx->grid->peak;
    h->n_clocks = (uint32_t)cx->grid->n;
    h->n_groups = cx->cfg->n_groups;
    h->clocks_hash = clocks_hash(cx->grid);
    h->cfg_hash = cfg_hash(cx->cfg);
    snprintf(h->tag, sizeof(h->tag), "%s", tag ? tag : "");
}

/* FNV-1a over the state's bytes: every step is a bijection of the running hash, so any one changed
 * byte changes the sum (a flipped bit or byte is always caught; more is caught but for 2^-64). */
static uint64_t state_sum(const unsigned char *p, size_t n)
{
    return fnv(1469598103934665603ull, p, n);
}

int eerl__save(const struct eerl__ctx *cx, const char *tag, void *buf, size_t cap, size_t *ret_len)
{
    const struct eerl__refs *refs = cx->refs;
    struct save_head h;
    uint64_t sum;
    size_t need, i;
    unsigned char *p = buf;

    need = sizeof(h) + refs->n * sizeof(eerl_obs) + SAVE_SUM;
    if (!buf || cap < need) {
        *ret_len = need;
        return EERL_EOVERFLOW;
    }
    head_of(cx, tag, &h);
    h.locked = (uint32_t)eerl__rec_locked(cx->rec, &h.locked_setting);
    h.ref_n = (uint32_t)refs->n;
    memcpy(p, &h, sizeof(h));
    for (i = 0; i < refs->n; i++)
        memcpy(p + sizeof(h) + i * sizeof(eerl_obs), eerl__refs_at(refs, i), sizeof(eerl_obs));
    sum = state_sum(p, need - SAVE_SUM);
    memcpy(p + need - SAVE_SUM, &sum, SAVE_SUM);
    *ret_len = need;
    return 0;
}

#define WHY(...)                                                                                   \
    do {                                                                                           \
        if (why && why_len)                                                                        \
            snprintf(why, why_len, __VA_ARGS__);                                                   \
    } while (0)

/* What a refusal needs: where its event goes and the words it returns. */
struct reader {
    const struct eerl__ctx *cx;
    const eerl_setting *next;
    int *refused;
    char *why;
    size_t why_len;
    int quiet; /* a prior's entry: a refusal emits no event (the caller says why once) */
};

/* A saved state this controller cannot take: the controller starts a fresh search, and says so
 * in an event the first update's events carry (so a trace shows it, and a replay that restores
 * the same bytes reproduces it). */
static int refuse(const struct reader *rd, int e, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int refuse(const struct reader *rd, int e, const char *fmt, ...)
{
    char r[320], *why = rd->why;
    size_t why_len = rd->why_len;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(r, sizeof(r), fmt, ap);
    va_end(ap);
    WHY("%s", r);
    if (!rd->quiet)
        eerl__rec_emit(rd->cx->rec, EERL_EV_HOLD, rd->next, "resume refused: %s", r);
    *rd->refused = 1;
    return e;
}

/* The bytes are a whole saved state of a format this eerl reads, undamaged: the header into *h,
 * the checksum's length (0 for format 2, which has none) into *sum_len. */
static int check_bytes(const struct reader *rd, const unsigned char *p, size_t len,
                       struct save_head *h, size_t *sum_len)
{
    int v2 = len >= 8 && memcmp(p, SAVE_MAGIC_V2, 8) == 0;
    char *why = rd->why;
    size_t why_len = rd->why_len;
    uint64_t sum, want;

    *sum_len = v2 ? 0 : SAVE_SUM;
    if (len >= 8 && memcmp(p, SAVE_MAGIC, 7) == 0 && !v2 && p[7] != (unsigned char)SAVE_MAGIC[7])
        return refuse(rd, EERL_EVERSION,
                      "saved in state format %c, this eerl reads formats 2 and %c: fresh search",
                      p[7] >= 0x20 && p[7] < 0x7f ? p[7] : '?', SAVE_MAGIC[7]);
    if (len < sizeof(*h) + *sum_len || (!v2 && memcmp(p, SAVE_MAGIC, 8) != 0)) {
        WHY("not a saved controller state (%zu bytes)", len);
        return EERL_EPARSE;
    }
    memcpy(h, p, sizeof(*h));
    if (len != sizeof(*h) + (size_t)h->ref_n * sizeof(eerl_obs) + *sum_len || h->locked > 1) {
        WHY("saved state is truncated or damaged (%zu bytes for %u references)", len,
            (unsigned)h->ref_n);
        return EERL_EPARSE;
    }
    if (v2)
        return 0;
    memcpy(&want, p + len - SAVE_SUM, SAVE_SUM);
    sum = state_sum(p, len - SAVE_SUM);
    if (sum != want) {
        WHY("saved state is damaged: its checksum is 0x%016llx, its bytes sum to 0x%016llx",
            (unsigned long long)want, (unsigned long long)sum);
        return EERL_EPARSE;
    }
    return 0;
}

/* Every saved reference is a valid governor observation of the saved mode. */
static int check_refs(const struct reader *rd, const unsigned char *p, const struct save_head *h)
{
    char *why = rd->why;
    size_t why_len = rd->why_len, i;

    for (i = 0; i < h->ref_n; i++) {
        eerl_obs o;
        memcpy(&o, p + sizeof(*h) + i * sizeof(eerl_obs), sizeof(o));
        if ((unsigned)h->mode < EERL_MODE_COUNT &&
            (eerl_obs_check((eerl_mode)h->mode, &o, rd->cx->cfg->time_tolerance, NULL, 0) < 0 ||
             !eerl_setting_is_governor(&o.setting))) {
            WHY("saved reference %zu is not a valid governor observation", i);
            return EERL_EPARSE;
        }
    }
    return 0;
}

/* The state was learned on this hardware, allocation, mode, strategy and configuration. */
static int check_same(const struct reader *rd, const char *tag, struct save_head *h)
{
    const struct eerl__ctx *cx = rd->cx;
    struct save_head mine;

    head_of(cx, tag, &mine);
    h->tag[SAVE_TAG - 1] = '\0';
    if (strcmp(h->tag, mine.tag) != 0)
        return refuse(rd, EERL_ESTATE,
                      "model, GPU model or allocation changed: saved on '%s', this run is '%s': "
                      "fresh search",
                      h->tag, mine.tag);
    if (h->mode != mine.mode || h->strategy != mine.strategy || h->n_groups != mine.n_groups)
        return refuse(rd, EERL_ESTATE,
                      "saved for mode %s, strategy %s, %u groups; this run is %s, %s, %u groups: "
                      "fresh search",
                      eerl_mode_name((eerl_mode)h->mode),
                      eerl_strategy_name((eerl_strategy)h->strategy), (unsigned)h->n_groups,
                      eerl_mode_name(cx->mode), eerl_strategy_name(cx->cfg->strategy),
                      cx->cfg->n_groups);
    if (h->peak != mine.peak || h->n_clocks != mine.n_clocks || h->clocks_hash != mine.clocks_hash)
        return refuse(rd, EERL_ESTATE,
                      "saved for a GPU with peak %u MHz and %u clocks, this one has %u MHz and "
                      "%u (clock list changed): fresh search",
                      (unsigned)h->peak, (unsigned)h->n_clocks, mine.peak, (unsigned)mine.n_clocks);
    if (h->cfg_hash != mine.cfg_hash)
        return refuse(rd, EERL_ESTATE,
                      "saved under another controller configuration (allowed loss, grids, "
                      "groups, ...): fresh search");
    if (h->ref_n < 3)
        return refuse(rd, EERL_ESTATE,
                      "saved state holds %u governor references, too few to skip calibration: "
                      "fresh search",
                      (unsigned)h->ref_n);
    return 0;
}

/* What every reading of a state checks first: the bytes, the major version, the references.
 * then: what the refusal adds (": fresh search" for a resume). */
static int check_head(const struct reader *rd, const unsigned char *p, size_t len,
                      struct save_head *h, size_t *sum_len, const char *then)
{
    int e = check_bytes(rd, p, len, h, sum_len);

    if (e < 0)
        return e;
    /* The layout is the state format's (SAVE_MAGIC's last letter changes with it); within one
     * major version a state saved by another release is read as compatible. */
    if (h->version >> 16 != EERL_VERSION_MAJOR)
        return refuse(rd, EERL_EVERSION,
                      "saved by eerl version 0x%08x, this is 0x%08x (another major version)%s",
                      (unsigned)h->version, (unsigned)EERL_VERSION_HEX, then);
    return check_refs(rd, p, h);
}

/* A saved lock on this controller's clocks. */
static void snap_setting(const struct eerl__ctx *cx, eerl_setting *s)
{
    int g;

    for (g = 0; g < EERL_GROUPS_MAX; g++)
        s->mhz[g] = eerl__grid_snap(cx->grid, s->mhz[g]);
    if (s->idle_mhz)
        s->idle_mhz = eerl__grid_snap(cx->grid, s->idle_mhz);
}

int eerl__restore(const struct eerl__ctx *cx, int resumes, const char *tag, const void *buf,
                  size_t len, const eerl_setting *next, struct eerl__saved *ret, int *ret_refused,
                  char *why, size_t why_len)
{
    const struct reader rd = {cx, next, ret_refused, why, why_len, 0};
    const unsigned char *p = buf;
    struct save_head h;
    size_t i, from, sum_len = 0;
    int e;

    *ret_refused = 0;
    e = check_head(&rd, p, len, &h, &sum_len, ": fresh search");
    if (e < 0)
        return e;
    if (!resumes)
        return refuse(&rd, EERL_ENOTSUP, "strategy %s does not resume in %s mode: fresh search",
                      eerl_strategy_name(cx->cfg->strategy), eerl_mode_name(cx->mode));
    e = check_same(&rd, tag, &h);
    if (e < 0)
        return e;
    /* The most recent ref_window references are taken (the window may differ). */
    from = h.ref_n > cx->cfg->ref_window ? h.ref_n - cx->cfg->ref_window : 0;
    for (i = from; i < h.ref_n; i++) {
        eerl_obs o;
        memcpy(&o, p + sizeof(h) + i * sizeof(eerl_obs), sizeof(o));
        eerl__rec_ref_add(cx->rec, &o);
    }
    if (h.locked)
        snap_setting(cx, &h.locked_setting);
    ret->locked = (int)h.locked;
    ret->locked_setting = h.locked_setting;
    ret->unchecked = sum_len == 0;
    return 0;
}

int eerl__prior_entry(const struct eerl__ctx *cx, const char *tag, const void *buf, size_t len,
                      struct eerl__prior_in *ret, char *why, size_t why_len)
{
    int refused = 0;
    const struct reader rd = {cx, NULL, &refused, why, why_len, 1};
    const unsigned char *p = buf;
    struct save_head h;
    size_t i, sum_len = 0;
    int e;

    e = check_head(&rd, p, len, &h, &sum_len, "");
    if (e == 0)
        e = check_same(&rd, tag, &h);
    if (e == 0 && !h.locked)
        e = refuse(&rd, EERL_ESTATE, "the job that saved it never locked a setting");
    if (e < 0)
        return refused ? 1 : e;
    memset(ret, 0, sizeof(*ret));
    snap_setting(cx, &h.locked_setting);
    ret->s = h.locked_setting;
    for (i = 0; i < h.ref_n; i++) {
        eerl_obs o;
        memcpy(&o, p + sizeof(h) + i * sizeof(eerl_obs), sizeof(o));
        ret->tpt_sum += o.time_s / o.valid_tokens;
        ret->tpt_sum2 += (o.time_s / o.valid_tokens) * (o.time_s / o.valid_tokens);
        ret->n++;
    }
    return 0;
}

/* Run analysis: see analysis.h. Ratios of sums over matched updates per seed, geometric means
 * across seeds (Appendix A); the pooled-governor least-squares model of Appendix E; Appendix B's
 * forward test through the controller's predictor (core/predictor.c, no least squares here). */
#include <errno.h>
#include <math.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eerl/error.h"
#include "core/lsq.h"
#include "core/predictor.h"
#include "core/setting.h"
#include "eerl/tools/analysis.h"
#include "trace/trace.h"

void eerl_an_series_init(struct eerl_an_series *s)
{
    memset(s, 0, sizeof(*s));
    s->mode = EERL_MODE_COLOCATED;
    s->divergence = -1;
}

void eerl_an_series_free(struct eerl_an_series *s)
{
    if (!s)
        return;
    free(s->update);
    free(s->G);
    free(s->N);
    free(s->L);
    free(s->T);
    free(s->E);
    free(s->setting);
    free(s->state);
    free(s->marks);
    free(s->obs);
    eerl_an_series_init(s);
}

#define GROW(p, cap)                                                                               \
    do {                                                                                           \
        void *q_ = realloc((p), (cap) * sizeof(*(p)));                                             \
        if (!q_)                                                                                   \
            return EERL_ENOMEM;                                                                    \
        (p) = q_;                                                                                  \
    } while (0)

int eerl_an_series_add(struct eerl_an_series *s, uint64_t update, double G, double N, double L,
                       double T, double E, const eerl_setting *setting, int state, unsigned marks)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 128;
        GROW(s->update, cap);
        GROW(s->G, cap);
        GROW(s->N, cap);
        GROW(s->L, cap);
        GROW(s->T, cap);
        GROW(s->E, cap);
        GROW(s->setting, cap);
        GROW(s->state, cap);
        GROW(s->marks, cap);
        s->cap = cap;
    }
    s->update[s->n] = update;
    s->G[s->n] = G;
    s->N[s->n] = N;
    s->L[s->n] = L;
    s->T[s->n] = T;
    s->E[s->n] = E;
    s->setting[s->n] = *setting;
    s->state[s->n] = state;
    s->marks[s->n] = marks;
    s->n++;
    return 0;
}

/* ---- traces ------------------------------------------------------------------------------- */

/* One line without its newline; *ret_nl: whether a newline ended it. */
static char *read_line(FILE *f, size_t *cap, char **buf, int *ret_nl)
{
    size_t n = 0;
    int c;

    *ret_nl = 0;
    while ((c = fgetc(f)) != EOF) {
        if (n + 2 > *cap) {
            size_t nc = *cap ? 2 * *cap : 4096;
            char *b = realloc(*buf, nc);
            if (!b)
                return NULL;
            *buf = b;
            *cap = nc;
        }
        if (c == '\n') {
            *ret_nl = 1;
            break;
        }
        (*buf)[n++] = (char)c;
    }
    if (n == 0 && c == EOF)
        return NULL;
    (*buf)[n] = '\0';
    return *buf;
}

/* What eerl_an_load_trace builds as it reads: the series, and the trace line of each update
 * (for the messages of order_updates). */
struct loader {
    struct eerl_an_series s;
    size_t *line, line_cap, obs_cap;
    eerl_event ev[256];
};

/* One update line (line lineno) onto the series. The lock is the one of the lowest update
 * (file order for an ordered trace; order_updates sorts the rest). */
static int load_update(struct loader *ld, const char *buf, size_t lineno, char *w2, size_t w2_len)
{
    struct eerl_an_series *s = &ld->s;
    struct eerl_trace_update u;
    unsigned marks = 0;
    int state = -1, e;
    size_t i, n;

    e = eerl_trace_parse_update(buf, &u, ld->ev, 256, w2, w2_len);
    if (e < 0)
        return e;
    n = u.n_events < 256 ? u.n_events : 256;
    for (i = 0; i < n; i++) {
        marks |= 1u << ld->ev[i].kind;
        state = (int)ld->ev[i].state;
        if (ld->ev[i].kind == EERL_EV_LOCK && (!s->locked || u.obs.update < s->lock_update)) {
            s->locked = 1;
            s->lock_update = u.obs.update;
            s->lock_setting = ld->ev[i].candidate;
        }
    }
    e = eerl_an_series_add(s, u.obs.update, u.obs.gen_tokens, u.obs.valid_tokens,
                           u.obs.longest_tokens, u.obs.time_s, u.obs.energy_j, &u.obs.setting,
                           state, marks);
    if (e < 0)
        return e;
    if (s->n > ld->obs_cap) {
        eerl_obs *q = realloc(s->obs, s->cap * sizeof(*q));
        if (!q)
            return EERL_ENOMEM;
        s->obs = q;
        ld->obs_cap = s->cap;
    }
    s->obs[s->n - 1] = u.obs;
    if (s->n > ld->line_cap) {
        size_t *q = realloc(ld->line, s->cap * sizeof(*q));
        if (!q)
            return EERL_ENOMEM;
        ld->line = q;
        ld->line_cap = s->cap;
    }
    ld->line[s->n - 1] = lineno;
    return 0;
}

struct order_key {
    uint64_t update;
    size_t line, i;
};

static int order_cmp(const void *pa, const void *pb)
{
    const struct order_key *a = pa, *b = pb;

    if (a->update != b->update)
        return a->update < b->update ? -1 : 1;
    return a->line < b->line ? -1 : a->line > b->line;
}

#define PERMUTE(arr)                                                                               \
    do {                                                                                           \
        void *t_ = malloc(s->n * sizeof(*(arr)));                                                  \
        if (!t_)                                                                                   \
            goto nomem;                                                                            \
        for (i = 0; i < s->n; i++)                                                                 \
            memcpy((char *)t_ + i * sizeof(*(arr)), &(arr)[k[i].i], sizeof(*(arr)));               \
        memcpy((arr), t_, s->n * sizeof(*(arr)));                                                  \
        free(t_);                                                                                  \
    } while (0)

/* The comparisons pair runs update by update and the in-flight model reads the previous update,
 * so the series goes in update order: a trace whose lines are out of order (joined from parts)
 * is sorted; one that holds an update twice is refused, naming both lines. */
static int order_updates(struct eerl_an_series *s, const size_t *line, const char *path, char *why,
                         size_t len)
{
    struct order_key *k;
    size_t i;

    for (i = 1; i < s->n && s->update[i - 1] < s->update[i]; i++)
        ;
    if (s->n < 2 || i == s->n)
        return 0;
    k = malloc(s->n * sizeof(*k));
    if (!k)
        return EERL_ENOMEM;
    for (i = 0; i < s->n; i++) {
        k[i].update = s->update[i];
        k[i].line = line[i];
        k[i].i = i;
    }
    qsort(k, s->n, sizeof(*k), order_cmp);
    for (i = 1; i < s->n; i++)
        if (k[i].update == k[i - 1].update) {
            snprintf(why, len,
                     "%s:%zu: update %llu again (also at line %zu): a run records each update "
                     "once; was this trace written by two sessions, or joined from two runs?",
                     path, k[i].line, (unsigned long long)k[i].update, k[i - 1].line);
            free(k);
            return EERL_EPARSE;
        }
    PERMUTE(s->update);
    PERMUTE(s->G);
    PERMUTE(s->N);
    PERMUTE(s->L);
    PERMUTE(s->T);
    PERMUTE(s->E);
    PERMUTE(s->setting);
    PERMUTE(s->state);
    PERMUTE(s->marks);
    PERMUTE(s->obs);
    free(k);
    return 0;
nomem:
    free(k);
    return EERL_ENOMEM;
}

#undef PERMUTE

/* A "run" line: the run's role, seed and divergence. */
static void load_run(struct eerl_an_series *s, const char *buf)
{
    json_t *o = json_loads(buf, 0, NULL), *v;

    if ((v = json_object_get(o, "role")) && json_is_string(v))
        snprintf(s->role, sizeof(s->role), "%s", json_string_value(v));
    else if ((v = json_object_get(o, "observe_only")) && json_is_true(v))
        snprintf(s->role, sizeof(s->role), "governor");
    if ((v = json_object_get(o, "seed")) && json_is_integer(v)) {
        s->has_seed = 1;
        s->seed = (uint64_t)json_integer_value(v);
    }
    if ((v = json_object_get(o, "divergence")) && json_is_number(v) && json_number_value(v) >= 0)
        s->divergence = json_number_value(v);
    json_decref(o);
}

/* A "header" line: the mode, governor peak, tolerance and allowance. */
static int load_header(struct eerl_an_series *s, const char *buf, char *w2, size_t w2_len)
{
    struct eerl_trace_header *h = malloc(sizeof(*h));
    int e;

    if (!h)
        return EERL_ENOMEM;
    e = eerl_trace_parse_header(buf, h, w2, w2_len);
    s->mode = h->mode;
    s->peak_mhz = h->peak;
    s->time_tolerance = h->cfg.time_tolerance;
    s->allowed_loss = h->cfg.allowed_loss;
    free(h);
    return e;
}

int eerl_an_load_trace(const char *path, struct eerl_an_series *ret, char *why, size_t len)
{
    FILE *f = fopen(path, "r");
    char *buf = NULL, type[32], w2[256];
    size_t cap = 0, lineno = 0;
    struct loader *ld = NULL;
    int e = 0, have_header = 0, nl;
    struct stat st;

    if (!f) {
        snprintf(why, len, "cannot open trace '%s': %s", path, strerror(errno));
        return EERL_ESYS;
    }
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(f);
        snprintf(why, len, "'%s' is a directory; give the traces in it (e.g. '%s'/*.jsonl)", path,
                 path);
        return EERL_EINVAL;
    }
    ld = calloc(1, sizeof(*ld));
    if (!ld) {
        fclose(f);
        return EERL_ENOMEM;
    }
    eerl_an_series_init(&ld->s);
    snprintf(ld->s.role, sizeof(ld->s.role), "controller");
    while (read_line(f, &cap, &buf, &nl)) {
        lineno++;
        if (!buf[0])
            continue;
        if (eerl_trace_line_type(buf, type, sizeof(type)) < 0) {
            if (!nl) { /* the last line, cut short: keep the whole ones before it */
                ld->s.cut_line = lineno;
                break;
            }
            snprintf(why, len, "%s:%zu: not a JSON line", path, lineno);
            e = EERL_EPARSE;
            goto out;
        }
        if (!strcmp(type, "header")) {
            e = load_header(&ld->s, buf, w2, sizeof(w2));
            if (e < 0) {
                snprintf(why, len, "%s:%zu: %s", path, lineno, w2);
                goto out;
            }
            have_header = 1;
        } else if (!strcmp(type, "run")) {
            load_run(&ld->s, buf);
        } else if (!strcmp(type, "update")) {
            if (!have_header) {
                snprintf(why, len, "%s:%zu: update line before the header", path, lineno);
                e = EERL_EPARSE;
                goto out;
            }
            w2[0] = '\0';
            e = load_update(ld, buf, lineno, w2, sizeof(w2));
            if (e < 0) {
                snprintf(why, len, "%s:%zu: %s", path, lineno, w2[0] ? w2 : eerl_strerror(e));
                goto out;
            }
        }
    }
    if (!have_header) {
        snprintf(why, len, "%s: no trace header (is this an eerl trace?)", path);
        e = EERL_EPARSE;
    }
    if (e == 0)
        e = order_updates(&ld->s, ld->line, path, why, len);
out:
    fclose(f);
    free(buf);
    free(ld->line);
    if (e < 0) {
        eerl_an_series_free(&ld->s);
        free(ld);
        return e;
    }
    *ret = ld->s;
    free(ld);
    return 0;
}

/* ---- matched-seed comparison ----------------------------------------------------------------- */

struct sums {
    double N, T, E;
    unsigned n;
};

/* Sums over updates in [lo, hi] present in both runs. */
static void window_sums(const struct eerl_an_series *g, const struct eerl_an_series *c, uint64_t lo,
                        uint64_t hi, struct sums *sg, struct sums *sc)
{
    size_t i = 0, j = 0;

    memset(sg, 0, sizeof(*sg));
    memset(sc, 0, sizeof(*sc));
    while (i < g->n && j < c->n) {
        if (g->update[i] < c->update[j]) {
            i++;
        } else if (g->update[i] > c->update[j]) {
            j++;
        } else {
            uint64_t u = g->update[i];
            if (u >= lo && u <= hi) {
                sg->N += g->N[i];
                sg->T += g->T[i];
                sg->E += g->E[i];
                sg->n++;
                sc->N += c->N[j];
                sc->T += c->T[j];
                sc->E += c->E[j];
                sc->n++;
            }
            i++;
            j++;
        }
    }
}

struct acc {
    double lq, le, upd;
    unsigned k;
};

static void seed_window(const struct eerl_an_series *g, const struct eerl_an_series *c, uint64_t lo,
                        uint64_t hi, struct eerl_an_window *w, struct acc *a)
{
    struct sums sg, sc;

    window_sums(g, c, lo, hi, &sg, &sc);
    w->updates = sc.n;
    w->seeds = 0;
    w->saving_pct = w->dq_pct = NAN;
    if (sc.n == 0 || !(sg.N > 0 && sc.N > 0 && sg.T > 0 && sc.T > 0 && sg.E > 0 && sc.E > 0))
        return;
    {
        double q = (sc.N / sc.T) / (sg.N / sg.T), en = (sc.E / sc.N) / (sg.E / sg.N);
        w->dq_pct = 100.0 * (q - 1);
        w->saving_pct = 100.0 * (1 - en);
        w->seeds = 1;
        a->lq += log(q);
        a->le += log(en);
        a->upd += sc.n;
        a->k++;
    }
}

static void finish(const struct acc *a, struct eerl_an_window *w)
{
    w->seeds = a->k;
    if (a->k == 0) {
        w->updates = 0;
        w->saving_pct = w->dq_pct = NAN;
        return;
    }
    w->updates = a->upd / a->k;
    w->dq_pct = 100.0 * (exp(a->lq / a->k) - 1);
    w->saving_pct = 100.0 * (1 - exp(a->le / a->k));
}

int eerl_an_compare(const struct eerl_an_series *const *gov,
                    const struct eerl_an_series *const *ctl, size_t n, struct eerl_an_result *ret)
{
    struct acc aw = {0, 0, 0, 0}, ab = {0, 0, 0, 0}, aa = {0, 0, 0, 0};
    size_t i;

    if (!gov || !ctl || !ret || n == 0 || n > EERL_AN_SEEDS_MAX)
        return EERL_EINVAL;
    memset(ret, 0, sizeof(*ret));
    ret->n_seeds = n;
    ret->lock_same = 1;
    for (i = 0; i < n; i++) {
        const struct eerl_an_series *g = gov[i], *c = ctl[i];
        struct eerl_an_seed *sd = &ret->seed[i];
        uint64_t last = UINT64_MAX;

        sd->seed = c->has_seed ? c->seed : (g->has_seed ? g->seed : i + 1);
        sd->locked = c->locked;
        sd->lock_setting = c->lock_setting;
        sd->lock_update = c->lock_update;
        seed_window(g, c, EERL_AN_FIRST_UPDATE, last, &sd->whole, &aw);
        if (c->locked) {
            seed_window(g, c, EERL_AN_FIRST_UPDATE, c->lock_update, &sd->before, &ab);
            seed_window(g, c, c->lock_update + 1, last, &sd->after, &aa);
            if (!ret->any_locked)
                ret->lock_setting = c->lock_setting;
            else if (!eerl_setting_equal(&ret->lock_setting, &c->lock_setting))
                ret->lock_same = 0;
            ret->any_locked = 1;
        } else {
            seed_window(g, c, EERL_AN_FIRST_UPDATE, last, &sd->before, &ab);
            sd->after.updates = 0;
            sd->after.seeds = 0;
            sd->after.saving_pct = sd->after.dq_pct = NAN;
            ret->lock_same = 0;
        }
    }
    finish(&aw, &ret->whole);
    finish(&ab, &ret->before);
    finish(&aa, &ret->after);
    if (!ret->any_locked)
        ret->lock_same = 0;
    return 0;
}

/* ---- Appendix E: the pooled governor model --------------------------------------------------- */

#define NF 4

/* Features of update i: sync and drained [1, G, N, L]; in-flight [1, N, L, N of the previous
 * update] (in-flight work spills into the next update). */
static int features(const struct eerl_an_series *s, size_t i, double *x)
{
    x[0] = 1;
    if (s->mode == EERL_MODE_INFLIGHT) {
        if (i == 0)
            return -1;
        x[1] = s->N[i];
        x[2] = s->L[i];
        x[3] = s->N[i - 1];
    } else {
        x[1] = s->G[i];
        x[2] = s->N[i];
        x[3] = s->L[i];
    }
    return 0;
}

/* Ordinary least squares (core/lsq.c, the predictor's solver) on standardized features; a
 * feature that does not vary (Qwen's L sits at the 4096 limit) is dropped. Returns 0 or
 * EERL_ENOMEM. */
static int fit(const struct eerl_an_series *const *gov, size_t n_gov, int energy, double *beta,
               double *mu, double *sd)
{
    double x[NF], b[NF], *X = NULL, *y = NULL;
    double cnt = 0;
    size_t r, i, k, n = 0, row = 0, p = 0, col[NF];
    int used[NF];
    unsigned rank;

    for (k = 0; k < NF; k++)
        mu[k] = sd[k] = beta[k] = 0;
    for (r = 0; r < n_gov; r++)
        for (i = 0; i < gov[r]->n; i++) {
            if (gov[r]->update[i] < EERL_AN_FIRST_UPDATE || features(gov[r], i, x) < 0)
                continue;
            for (k = 1; k < NF; k++) {
                mu[k] += x[k];
                sd[k] += x[k] * x[k];
            }
            cnt++;
            n++;
        }
    for (k = 1; k < NF; k++) {
        mu[k] = cnt > 0 ? mu[k] / cnt : 0;
        sd[k] = cnt > 0 ? sqrt(fmax(sd[k] / cnt - mu[k] * mu[k], 0)) : 0;
        used[k] = sd[k] > 1e-9 * (fabs(mu[k]) + 1);
    }
    used[0] = 1;
    for (k = 0; k < NF; k++)
        if (used[k])
            col[p++] = k;
    if (n > 0) {
        X = malloc(n * p * sizeof(*X));
        y = malloc(n * sizeof(*y));
        if (!X || !y) {
            free(X);
            free(y);
            return EERL_ENOMEM;
        }
        for (r = 0; r < n_gov; r++)
            for (i = 0; i < gov[r]->n; i++) {
                if (gov[r]->update[i] < EERL_AN_FIRST_UPDATE || features(gov[r], i, x) < 0)
                    continue;
                for (k = 0; k < p; k++)
                    X[k * n + row] = col[k] == 0 ? 1 : (x[col[k]] - mu[col[k]]) / sd[col[k]];
                y[row++] = energy ? gov[r]->E[i] : gov[r]->T[i];
            }
        /* Non-finite work or measurements leave beta at 0, as a singular system did. */
        if (eerl__lsq_solve(X, n, p, y, 1e-12, b, &rank) == 0)
            for (k = 0; k < p; k++)
                beta[col[k]] = b[k];
        free(X);
        free(y);
    }
    for (k = 1; k < NF; k++)
        if (!used[k])
            sd[k] = 0;
    return 0;
}

static double predict(const struct eerl_an_series *s, size_t i, const double *beta,
                      const double *mu, const double *sd)
{
    double x[NF], y = beta[0];
    size_t k;

    if (features(s, i, x) < 0)
        return NAN;
    for (k = 1; k < NF; k++)
        if (sd[k] > 0)
            y += beta[k] * (x[k] - mu[k]) / sd[k];
    return y;
}

/* Measured over predicted totals of s over updates [lo, hi]. */
static int ratios(const struct eerl_an_series *s, uint64_t lo, uint64_t hi, const double *bt,
                  const double *be, const double *mu_t, const double *sd_t, const double *mu_e,
                  const double *sd_e, double *rt, double *re)
{
    double mt = 0, pt = 0, me = 0, pe = 0;
    size_t i;
    unsigned n = 0;

    for (i = 0; i < s->n; i++) {
        double a, b;
        if (s->update[i] < lo || s->update[i] > hi)
            continue;
        a = predict(s, i, bt, mu_t, sd_t);
        b = predict(s, i, be, mu_e, sd_e);
        if (!isfinite(a) || !isfinite(b))
            continue;
        mt += s->T[i];
        pt += a;
        me += s->E[i];
        pe += b;
        n++;
    }
    if (n == 0 || !(pt > 0) || !(pe > 0))
        return -1;
    *rt = mt / pt;
    *re = me / pe;
    return 0;
}

int eerl_an_normalize(const struct eerl_an_series *const *gov, size_t n_gov,
                      const struct eerl_an_series *const *ctl, size_t n_ctl,
                      struct eerl_an_result *res)
{
    double bt[NF], be[NF], mut[NF], sdt[NF], mue[NF], sde[NF];
    struct acc aw = {0, 0, 0, 0}, aa = {0, 0, 0, 0};
    double tmin = INFINITY, tmax = -INFINITY, emin = INFINITY, emax = -INFINITY;
    size_t i, r;

    if (!res || n_gov == 0 || n_ctl == 0)
        return EERL_EINVAL;
    if (fit(gov, n_gov, 0, bt, mut, sdt) < 0 || fit(gov, n_gov, 1, be, mue, sde) < 0)
        return EERL_ENOMEM;
    for (r = 0; r < n_gov; r++) {
        double a, b;
        if (ratios(gov[r], EERL_AN_FIRST_UPDATE, UINT64_MAX, bt, be, mut, sdt, mue, sde, &a, &b) ==
            0) {
            tmin = fmin(tmin, a);
            tmax = fmax(tmax, a);
            emin = fmin(emin, b);
            emax = fmax(emax, b);
        }
    }
    for (i = 0; i < n_ctl; i++) {
        const struct eerl_an_series *c = ctl[i];
        int pass;
        for (pass = 0; pass < 2; pass++) {
            uint64_t lo = pass ? c->lock_update + 1 : EERL_AN_FIRST_UPDATE;
            double ct, ce, gt = 0, ge = 0, a, b;
            unsigned ng = 0, cnt = 0;
            size_t k;
            struct acc *acc = pass ? &aa : &aw;

            if (pass && !c->locked)
                continue;
            if (ratios(c, lo, UINT64_MAX, bt, be, mut, sdt, mue, sde, &ct, &ce) < 0)
                continue;
            for (r = 0; r < n_gov; r++)
                if (ratios(gov[r], lo, UINT64_MAX, bt, be, mut, sdt, mue, sde, &a, &b) == 0) {
                    gt += a;
                    ge += b;
                    ng++;
                }
            if (ng == 0)
                continue;
            gt /= ng;
            ge /= ng;
            for (k = 0; k < c->n; k++)
                cnt += c->update[k] >= lo;
            acc->lq += log(gt / ct);
            acc->le += log(ce / ge);
            acc->upd += cnt;
            acc->k++;
        }
    }
    finish(&aw, &res->norm_whole);
    finish(&aa, &res->norm_after);
    res->normalized = aw.k > 0;
    res->norm_governors = (unsigned)n_gov;
    res->gov_time_spread_pct = isfinite(tmax) ? 100.0 * (tmax - tmin) : NAN;
    res->gov_energy_spread_pct = isfinite(emax) ? 100.0 * (emax - emin) : NAN;
    return 0;
}

/* ---- Appendix B: forward test ---------------------------------------------------------------- */

void eerl_an_fwd_errs_init(struct eerl_an_fwd_errs *e)
{
    memset(e, 0, sizeof(*e));
}

void eerl_an_fwd_errs_free(struct eerl_an_fwd_errs *e)
{
    if (!e)
        return;
    free(e->tput_const);
    free(e->tput_model);
    free(e->energy_const);
    free(e->energy_model);
    eerl_an_fwd_errs_init(e);
}

static int errs_push(struct eerl_an_fwd_errs *e, double tc, double tm, double ec, double em)
{
    if (e->n == e->cap) {
        size_t cap = e->cap ? 2 * e->cap : 64;
        GROW(e->tput_const, cap);
        GROW(e->tput_model, cap);
        GROW(e->energy_const, cap);
        GROW(e->energy_model, cap);
        e->cap = cap;
    }
    e->tput_const[e->n] = tc;
    e->tput_model[e->n] = tm;
    e->energy_const[e->n] = ec;
    e->energy_model[e->n] = em;
    e->n++;
    return 0;
}

int eerl_an_fwd_errs_merge(struct eerl_an_fwd_errs *dst, const struct eerl_an_fwd_errs *src)
{
    size_t i;
    int e;

    if (!dst || !src)
        return EERL_EINVAL;
    for (i = 0; i < src->n; i++) {
        e = errs_push(dst, src->tput_const[i], src->tput_model[i], src->energy_const[i],
                      src->energy_model[i]);
        if (e < 0)
            return e;
    }
    dst->blocks += src->blocks;
    dst->gap_blocks += src->gap_blocks;
    return 0;
}

/* 1 when update i of s is one the forward test uses; *why_not: 1 warm-up, 2 not the governor,
 * 3 refused by the observation check. */
static int fwd_usable(const struct eerl_an_series *s, const struct eerl_an_fwd_cfg *cfg, size_t i,
                      int *why_not)
{
    if (s->update[i] < cfg->first_update) {
        *why_not = 1;
        return 0;
    }
    if (!eerl_setting_is_governor(&s->obs[i].setting)) {
        *why_not = 2;
        return 0;
    }
    if (eerl_obs_check(s->mode, &s->obs[i], s->time_tolerance, NULL, 0) < 0) {
        *why_not = 3;
        return 0;
    }
    *why_not = 0;
    return 1;
}

int eerl_an_fwd_count(const struct eerl_an_series *s, const struct eerl_an_fwd_cfg *cfg,
                      struct eerl_an_fwd_count *ret)
{
    struct eerl_an_fwd_count c;
    size_t i, run = 0;
    uint64_t prev = 0;
    int why_not;

    if (!s || !cfg || !ret || (s->n > 0 && !s->obs))
        return EERL_EINVAL;
    memset(&c, 0, sizeof(c));
    c.lines = s->n;
    for (i = 0; i < s->n; i++) {
        if (!fwd_usable(s, cfg, i, &why_not)) {
            c.warmup += why_not == 1;
            c.not_governor += why_not == 2;
            c.invalid += why_not == 3;
            continue;
        }
        if (c.used > 0 && s->update[i] != prev + 1) {
            c.gaps++;
            run = 0;
        }
        run++;
        if (run > c.longest)
            c.longest = run;
        prev = s->update[i];
        c.used++;
    }
    *ret = c;
    return 0;
}

/* The forward test over one stretch of usable observations (pointers, in order). */
static int fwd_stretch(const struct eerl_an_series *s, const eerl_obs *const *o, size_t m,
                       const struct eerl_an_fwd_cfg *cfg, struct eerl__pred_work *w,
                       struct eerl_an_fwd_errs *acc, char *why, size_t len)
{
    struct eerl__pred pred;
    struct eerl__parts pp;
    size_t start, i;
    int layout = eerl__layout_of(s->mode), e;

    for (start = cfg->fit; start + cfg->predict <= m; start += cfg->step) {
        const eerl_obs *const *fw = o + (start - cfg->fit);
        double q_mean = 0, e_mean = 0;

        e = eerl__pred_fit(&pred, layout, fw, cfg->fit, w);
        if (e < 0) {
            snprintf(why, len,
                     "the governor predictor cannot be fitted on updates %llu-%llu (%s: a "
                     "phase's time or energy is not > 0)",
                     (unsigned long long)fw[0]->update,
                     (unsigned long long)fw[cfg->fit - 1]->update, eerl_strerror(e));
            return e;
        }
        /* The constant reference: the fit window's mean throughput and mean update energy. */
        for (i = 0; i < cfg->fit; i++) {
            q_mean += fw[i]->valid_tokens / fw[i]->time_s;
            e_mean += fw[i]->energy_j;
        }
        q_mean /= cfg->fit;
        e_mean /= cfg->fit;
        for (i = start; i < start + cfg->predict; i++) {
            double q = o[i]->valid_tokens / o[i]->time_s;

            eerl__pred_predict(&pred, o[i], &pp);
            /* Same valid tokens in prediction and truth: predicted throughput N / T^. */
            e = errs_push(acc, 100.0 * fabs(q_mean / q - 1.0),
                          100.0 * fabs(o[i]->valid_tokens / pp.t / q - 1.0),
                          100.0 * fabs(e_mean / o[i]->energy_j - 1.0),
                          100.0 * fabs(pp.e / o[i]->energy_j - 1.0));
            if (e < 0)
                return e;
        }
        acc->blocks++;
        if (o[start + cfg->predict - 1]->update - fw[0]->update !=
            (uint64_t)(cfg->fit + cfg->predict - 1))
            acc->gap_blocks++;
    }
    return 0;
}

int eerl_an_forward_test(const struct eerl_an_series *s, const struct eerl_an_fwd_cfg *cfg,
                         struct eerl_an_fwd_errs *acc, char *why, size_t len)
{
    struct eerl_an_fwd_errs mine;
    struct eerl__pred_work w;
    const eerl_obs **o = NULL;
    size_t i, m = 0, from;
    int e, why_not;

    if (!s || !cfg || !acc || !why || cfg->fit < 2 || cfg->predict < 1 || cfg->step < 1 ||
        (s->n > 0 && !s->obs))
        return EERL_EINVAL;
    why[0] = '\0';
    eerl_an_fwd_errs_init(&mine);
    e = eerl__pred_work_init(&w, cfg->fit);
    if (e < 0)
        return e;
    o = calloc(s->n ? s->n : 1, sizeof(*o));
    if (!o) {
        e = EERL_ENOMEM;
        goto fail;
    }
    for (i = 0; i < s->n; i++)
        if (fwd_usable(s, cfg, i, &why_not))
            o[m++] = &s->obs[i];
    /* Stretches: the whole sequence, or runs of consecutive update numbers. */
    for (from = 0, i = 1; i <= m; i++) {
        if (i < m && (!cfg->consecutive || o[i]->update == o[i - 1]->update + 1))
            continue;
        e = fwd_stretch(s, o + from, i - from, cfg, &w, &mine, why, len);
        if (e < 0)
            goto fail;
        from = i;
    }
    if (mine.blocks == 0) {
        snprintf(why, len, "no forward-test block fits");
        e = EERL_ENODATA;
        goto fail;
    }
    e = eerl_an_fwd_errs_merge(acc, &mine);
fail:
    free(o);
    eerl__pred_work_free(&w);
    eerl_an_fwd_errs_free(&mine);
    return e;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double quantile(const double *v, size_t n, double p, double *scratch)
{
    double pos, f;
    size_t k;

    if (n == 0)
        return NAN;
    memcpy(scratch, v, n * sizeof(*v));
    qsort(scratch, n, sizeof(*scratch), cmp_double);
    pos = p * (double)(n - 1);
    k = (size_t)pos;
    f = pos - (double)k;
    return k + 1 < n ? scratch[k] + f * (scratch[k + 1] - scratch[k]) : scratch[k];
}

static void fwd_stat(const double *v, size_t n, double *scratch, struct eerl_an_fwd_stat *st)
{
    st->median = quantile(v, n, 0.5, scratch);
    st->p90 = quantile(v, n, 0.9, scratch);
}

int eerl_an_fwd_summarize(const struct eerl_an_fwd_errs *acc, struct eerl_an_fwd_summary *ret)
{
    struct eerl_an_fwd_summary r;
    double *scratch;

    if (!acc || !ret)
        return EERL_EINVAL;
    scratch = malloc((acc->n ? acc->n : 1) * sizeof(*scratch));
    if (!scratch)
        return EERL_ENOMEM;
    memset(&r, 0, sizeof(r));
    r.blocks = acc->blocks;
    r.gap_blocks = acc->gap_blocks;
    r.predictions = acc->n;
    fwd_stat(acc->tput_const, acc->n, scratch, &r.tput_const);
    fwd_stat(acc->tput_model, acc->n, scratch, &r.tput_model);
    fwd_stat(acc->energy_const, acc->n, scratch, &r.energy_const);
    fwd_stat(acc->energy_model, acc->n, scratch, &r.energy_model);
    free(scratch);
    *ret = r;
    return 0;
}

/* ---- JSON ------------------------------------------------------------------------------------ */

json_t *eerl_an_num(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

static json_t *clock_json(unsigned mhz)
{
    return mhz == EERL_CLOCK_GOVERNOR ? json_string("governor") : json_integer(mhz);
}

json_t *eerl_an_setting_json(const eerl_setting *s)
{
    json_t *o = json_object();

    json_object_set_new(o, "gen_mhz", clock_json(s->mhz[EERL_GROUP_GEN]));
    json_object_set_new(o, "train_mhz", clock_json(s->mhz[EERL_GROUP_TRAIN]));
    json_object_set_new(o, "idle_mhz", clock_json(s->idle_mhz));
    return o;
}

json_t *eerl_an_window_json(const struct eerl_an_window *w, const eerl_setting *setting,
                            int setting_varies)
{
    json_t *o = json_object();
    double u = w->updates;

    json_object_set_new(o, "updates", u == floor(u) ? json_integer((json_int_t)u) : json_real(u));
    json_object_set_new(o, "saving_pct", eerl_an_num(w->saving_pct));
    json_object_set_new(o, "dq_pct", eerl_an_num(w->dq_pct));
    if (setting_varies)
        json_object_set_new(o, "setting", json_string("varies"));
    else if (setting)
        json_object_set_new(o, "setting", eerl_an_setting_json(setting));
    return o;
}

const char *eerl_an_setting_str(const eerl_setting *s, char *buf, size_t len)
{
    return eerl__setting_text(s, EERL__SETTING_TABLE, buf, len);
}

const struct eerl_an_window *eerl_an_verdict_window(const struct eerl_an_result *res, int exact)
{
    return exact || !res->normalized ? &res->whole : &res->norm_whole;
}

void eerl_an_window_range(const struct eerl_an_result *res, int after, double *ret_min,
                          double *ret_max)
{
    double lo = INFINITY, hi = -INFINITY;
    size_t k;

    for (k = 0; k < res->n_seeds; k++) {
        const struct eerl_an_window *w = after ? &res->seed[k].after : &res->seed[k].before;
        if (w->seeds == 0)
            continue;
        lo = w->updates < lo ? w->updates : lo;
        hi = w->updates > hi ? w->updates : hi;
    }
    *ret_min = isfinite(lo) ? lo : 0;
    *ret_max = isfinite(hi) ? hi : 0;
}

static json_t *ranged_window_json(const struct eerl_an_result *res, int after,
                                  const struct eerl_an_window *w, const eerl_setting *setting,
                                  int varies)
{
    json_t *o = eerl_an_window_json(w, setting, varies);
    double lo, hi;

    eerl_an_window_range(res, after, &lo, &hi);
    json_object_set_new(o, "updates_min", json_integer((json_int_t)lo));
    json_object_set_new(o, "updates_max", json_integer((json_int_t)hi));
    return o;
}

json_t *eerl_an_result_json(const struct eerl_an_result *res, int exact, double allowed_loss)
{
    const struct eerl_an_window *vw = eerl_an_verdict_window(res, exact);
    int use_norm = vw != &res->whole;
    json_t *j = json_object(), *a = json_array(), *nm, *v;
    size_t k;

    json_object_set_new(j, "saving_pct", eerl_an_num(vw->saving_pct));
    json_object_set_new(j, "dq_pct", eerl_an_num(vw->dq_pct));
    json_object_set_new(j, "rows", json_string(use_norm ? "normalized" : "same-work"));
    json_object_set_new(j, "whole", eerl_an_window_json(&res->whole, NULL, 1));
    json_object_set_new(j, "before_lock", ranged_window_json(res, 0, &res->before, NULL, 0));
    json_object_set_new(j, "after_lock",
                        ranged_window_json(res, 1, &res->after,
                                           res->lock_same ? &res->lock_setting : NULL,
                                           res->any_locked && !res->lock_same));
    if (!res->any_locked)
        json_object_set_new(json_object_get(j, "after_lock"), "setting", json_null());
    if (res->normalized) {
        nm = json_object();
        json_object_set_new(nm, "governors", json_integer(res->norm_governors));
        json_object_set_new(nm, "whole", eerl_an_window_json(&res->norm_whole, NULL, 0));
        json_object_set_new(nm, "after_lock", eerl_an_window_json(&res->norm_after, NULL, 0));
        json_object_set_new(nm, "governor_time_spread_pct", eerl_an_num(res->gov_time_spread_pct));
        json_object_set_new(nm, "governor_energy_spread_pct",
                            eerl_an_num(res->gov_energy_spread_pct));
        json_object_set_new(j, "normalized", nm);
    } else {
        json_object_set_new(j, "normalized", json_null());
    }
    if (allowed_loss > 0) {
        v = json_object();
        json_object_set_new(v, "figure", json_string(use_norm ? "normalized.whole" : "whole"));
        json_object_set_new(v, "saving_pct", eerl_an_num(vw->saving_pct));
        json_object_set_new(v, "dq_pct", eerl_an_num(vw->dq_pct));
        json_object_set_new(v, "allowed_loss_pct", json_real(100 * allowed_loss));
        json_object_set_new(
            v, "met", json_boolean(isfinite(vw->dq_pct) && vw->dq_pct >= -100 * allowed_loss));
        json_object_set_new(j, "verdict", v);
    } else {
        json_object_set_new(j, "verdict", json_null());
    }
    for (k = 0; k < res->n_seeds; k++) {
        const struct eerl_an_seed *sd = &res->seed[k];
        json_t *o = json_object();

        json_object_set_new(o, "seed", json_integer((json_int_t)sd->seed));
        json_object_set_new(o, "saving_pct", eerl_an_num(sd->whole.saving_pct));
        json_object_set_new(o, "dq_pct", eerl_an_num(sd->whole.dq_pct));
        json_object_set_new(o, "before_lock", eerl_an_window_json(&sd->before, NULL, 0));
        json_object_set_new(
            o, "after_lock",
            eerl_an_window_json(&sd->after, sd->locked ? &sd->lock_setting : NULL, 0));
        if (!sd->locked)
            json_object_set_new(json_object_get(o, "after_lock"), "setting", json_null());
        json_object_set_new(o, "lock_update",
                            sd->locked ? json_integer((json_int_t)sd->lock_update) : json_null());
        json_array_append_new(a, o);
    }
    json_object_set_new(j, "seeds", a);
    return j;
}

/* A model from its description. The twin's presets are fitted to the paper's sweeps; a model
 * without a sweep (the paper's Mistral-NeMo 12B, a user's own) is built here from what is known
 * of it and from the fitted model of the same kind on the same GPU, the anchor:
 *   - phase physics (rooflines b, r; powers pw, pm; the in-flight concurrency if_tail, spill;
 *     the per-update noise; t_other) are the anchor's: the same chip running the same kinds of
 *     kernels (dense or mixture-of-experts);
 *   - the training pool's work per token (c_lp, c_tr) scales with the work per token of a forward
 *     pass, 2 x active parameters + the attention's 4 x layers x hidden x context (context: half
 *     the sequence limit of each model);
 *   - work per update tied to the weights (t_tr0: optimizer step and gradient reduction; t_refit,
 *     t_tr_after: gathering and sending the new weights) with the total parameters;
 *   - generation through both fitted models when there are two: the decode latency per token of
 *     the last sequences (c_tail) as a power law in layers, the throughput term and the KV
 *     recompute (c_tok, c_kv) as a power law in the work per token;
 *   - the workload (sizes, sequence limit, response lengths) is the description's.
 * Nothing is fitted here. A bad description is refused with a sentence naming the field and its
 * value. This file never changes the fitted presets: it loads the anchor into the new preset and
 * scales the copy. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "eerl/error.h"
#include "twin/describe.h"

/* Fitted models a description may be derived from, in order of preference on a tie. */
static const char *const anchors[] = {"nemotron-super-49b", "qwen3-30b-a3b"};

static int say(char *why, size_t n, int err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int say(char *why, size_t n, int err, const char *fmt, ...)
{
    va_list ap;

    if (why && n) {
        va_start(ap, fmt);
        vsnprintf(why, n, fmt, ap);
        va_end(ap);
    }
    return err;
}

/* A number in [lo, hi]; absent: def (when has_def) or an error naming the field. */
static int field_num(json_t *o, const char *key, double lo, double hi, int has_def, double def,
                     double *out, char *why, size_t n)
{
    json_t *v = json_object_get(o, key);
    double x;

    if (!v) {
        if (has_def) {
            *out = def;
            return 0;
        }
        return say(why, n, EERL_EPARSE, "field '%s' is missing", key);
    }
    if (!json_is_number(v))
        return say(why, n, EERL_EPARSE, "field '%s' is not a number", key);
    x = json_number_value(v);
    if (!isfinite(x) || x < lo || x > hi)
        return say(why, n, EERL_ERANGE, "field '%s' is %g; it must lie in [%g, %g]", key, x, lo,
                   hi);
    *out = x;
    return 0;
}

static int field_uint(json_t *o, const char *key, unsigned lo, unsigned hi, int has_def,
                      unsigned def, unsigned *out, char *why, size_t n)
{
    json_t *v = json_object_get(o, key);
    json_int_t x;

    if (!v && has_def) {
        *out = def;
        return 0;
    }
    if (!v)
        return say(why, n, EERL_EPARSE, "field '%s' is missing", key);
    if (!json_is_integer(v))
        return say(why, n, EERL_EPARSE, "field '%s' is not a whole number", key);
    x = json_integer_value(v);
    if (x < (json_int_t)lo || x > (json_int_t)hi)
        return say(why, n, EERL_ERANGE, "field '%s' is %lld; it must lie in [%u, %u]", key,
                   (long long)x, lo, hi);
    *out = (unsigned)x;
    return 0;
}

static int arch_parse(json_t *o, struct eerl__arch *a, char *why, size_t n)
{
    json_t *moe = json_object_get(o, "moe");
    int r;

    if (!json_is_object(o))
        return say(why, n, EERL_EPARSE, "the description is not a JSON object");
    if (!json_is_boolean(moe))
        return say(why, n, EERL_EPARSE,
                   "field 'moe' is %s; give true (mixture of experts) or false (dense)",
                   moe ? "not true or false" : "missing");
    a->moe = json_is_true(moe);
    if ((r = field_num(o, "params_total_b", 0.01, 1e5, 0, 0, &a->total_b, why, n)) < 0 ||
        (r = field_num(o, "params_active_b", 0.01, 1e5, 1, a->total_b, &a->active_b, why, n)) < 0 ||
        (r = field_uint(o, "layers", 1, 10000, 0, 0, &a->layers, why, n)) < 0 ||
        (r = field_uint(o, "hidden", 64, 1000000, 0, 0, &a->hidden, why, n)) < 0 ||
        (r = field_uint(o, "heads", 1, 4096, 0, 0, &a->heads, why, n)) < 0 ||
        (r = field_uint(o, "kv_heads", 1, 4096, 1, a->heads, &a->kv_heads, why, n)) < 0)
        return r;
    if (a->active_b > a->total_b)
        return say(why, n, EERL_ERANGE,
                   "field 'params_active_b' is %g, more than 'params_total_b' %g", a->active_b,
                   a->total_b);
    if (!a->moe && a->active_b != a->total_b)
        return say(why, n, EERL_ERANGE,
                   "field 'params_active_b' is %g but 'moe' is false: a dense model runs all "
                   "%g billion parameters per token",
                   a->active_b, a->total_b);
    if (a->heads % a->kv_heads)
        return say(why, n, EERL_ERANGE, "field 'kv_heads' is %u, which does not divide 'heads' %u",
                   a->kv_heads, a->heads);
    return 0;
}

/* One size "S", "M" or "L": [prompts, responses per prompt, train batch], batch = their product. */
static int size_parse(json_t *sizes, int i, struct eerl__wl_params *w, char *why, size_t n)
{
    static const char *const sz[] = {"S", "M", "L"};
    json_t *s = json_object_get(sizes, sz[i]);
    json_int_t v[3];
    int k;

    if (!s)
        return 0;
    if (!json_is_array(s) || json_array_size(s) != 3)
        return say(why, n, EERL_EPARSE,
                   "field 'workload.sizes.%s' is not [prompts, responses per prompt, batch]",
                   sz[i]);
    for (k = 0; k < 3; k++) {
        if (!json_is_integer(json_array_get(s, k)))
            return say(why, n, EERL_EPARSE, "field 'workload.sizes.%s' holds a non-integer", sz[i]);
        v[k] = json_integer_value(json_array_get(s, k));
    }
    if (v[0] < 1 || v[0] > 100000 || v[1] < 1 || v[1] > 1000 || v[2] != v[0] * v[1])
        return say(why, n, EERL_ERANGE,
                   "field 'workload.sizes.%s' is [%lld, %lld, %lld]; give prompts (1-100000), "
                   "responses per prompt (1-1000) and their product",
                   sz[i], (long long)v[0], (long long)v[1], (long long)v[2]);
    w->P[i] = (unsigned)v[0];
    w->K[i] = (unsigned)v[1];
    w->B[i] = (unsigned)v[2];
    return 0;
}

/* The workload: every key optional, defaults those of the paper's Qwen3 runs (docs/twin.md). */
static int workload_parse(json_t *o, struct eerl__wl_params *w, char *why, size_t n)
{
    static const unsigned def[3][3] = {{32, 4, 128}, {64, 8, 512}, {128, 16, 2048}};
    int r, i;

    memset(w, 0, sizeof(*w));
    for (i = 0; i < 3; i++) {
        w->P[i] = def[i][0];
        w->K[i] = def[i][1];
        w->B[i] = def[i][2];
    }
    if (o && !json_is_object(o))
        return say(why, n, EERL_EPARSE, "field 'workload' is not a JSON object");
    if ((r = field_uint(o, "seq_limit", 16, 1000000, 1, 4096, &w->seq_limit, why, n)) < 0 ||
        (r = field_num(o, "len_median", 1, w->seq_limit, 1, w->seq_limit / 4.0, &w->len_median, why,
                       n)) < 0 ||
        (r = field_num(o, "len_sigma", 0.05, 3, 1, 0.8, &w->len_sigma, why, n)) < 0 ||
        (r = field_num(o, "drift", -0.5, 0.5, 1, 0, &w->drift, why, n)) < 0 ||
        (r = field_num(o, "p_zero", 0, 0.99, 1, 0.15, &w->p_zero, why, n)) < 0)
        return r;
    for (i = 0; i < 3; i++)
        if ((r = size_parse(json_object_get(o, "sizes"), i, w, why, n)) < 0)
            return r;
    return 0;
}

double eerl__arch_flops_per_token(const struct eerl__arch *a, double ctx)
{
    return 2e9 * a->active_b + 4.0 * a->layers * a->hidden * ctx;
}

/* The fitted models a description can be derived from on gpu, with their architectures. */
struct anchor {
    const char *name;
    struct eerl__arch a;
    struct eerl__costs c;
    double ctx;
};

static size_t load_anchors(json_t *root, const char *gpu, struct anchor *out,
                           struct eerl_twin_preset *tmp)
{
    size_t i, n = 0;

    for (i = 0; i < sizeof(anchors) / sizeof(anchors[0]); i++) {
        json_t *m = json_object_get(json_object_get(root, "models"), anchors[i]);

        if (arch_parse(json_object_get(m, "architecture"), &out[n].a, NULL, 0) < 0 ||
            eerl__preset_load(root, anchors[i], gpu, tmp) < 0)
            continue;
        out[n].name = anchors[i];
        out[n].c = tmp->c;
        out[n].ctx = tmp->wl.seq_limit / 2.0;
        n++;
    }
    return n;
}

/* The anchor of the same kind (dense or MoE) nearest in active parameters (log). */
static size_t pick_anchor(const struct anchor *an, size_t n, const struct eerl__arch *d)
{
    size_t i, best = 0;
    double best_score = HUGE_VAL;

    for (i = 0; i < n; i++) {
        double score =
            fabs(log(an[i].a.active_b / d->active_b)) + (an[i].a.moe != d->moe ? 100 : 0);
        if (score < best_score) {
            best_score = score;
            best = i;
        }
    }
    return best;
}

/* y at x on the power law through (x0, y0) and (x1, y1); the ratio y0 x / x0 with one point. */
static double power_law(double x, double x0, double y0, double x1, double y1, int two)
{
    double k = two && x1 != x0 && y0 > 0 && y1 > 0 ? log(y1 / y0) / log(x1 / x0) : 1.0;

    return y0 * pow(x / x0, k);
}

/* Scales the anchor k's costs (in c) to the described model d at context d_ctx. Per update and
 * per token of the training pool (t_tr0, t_tr_after, t_refit; c_lp, c_tr) with the weights and the
 * work per token; generation's terms through both fitted models when there are two: the decode
 * latency per token of the last sequences (c_tail) as a power law in layers (kernels and
 * collectives per layer set a decode step, not the weights: the fitted models' c_tail differ by
 * 6% for 15x the active parameters), the throughput term and the KV recompute (c_tok, c_kv) as
 * a power law in the work per token. */
static void scale_costs(struct eerl__costs *c, const struct anchor *an, size_t n, size_t k,
                        const struct eerl__arch *d, double d_ctx)
{
    const struct anchor *a = &an[k], *o = &an[n > 1 ? (k + 1) % n : k];
    double wd = eerl__arch_flops_per_token(d, d_ctx),
           wa = eerl__arch_flops_per_token(&a->a, a->ctx);
    double wo = eerl__arch_flops_per_token(&o->a, o->ctx), work = wd / wa;
    double weights = d->total_b / a->a.total_b;
    int two = n > 1;

    c->c_lp *= work;
    c->c_tr *= work;
    c->t_tr0 *= weights;
    c->t_tr_after *= weights;
    c->t_refit *= weights;
    c->c_tail = power_law(d->layers, a->a.layers, a->c.c_tail, o->a.layers, o->c.c_tail, two);
    c->c_tok = power_law(wd, wa, a->c.c_tok, wo, o->c.c_tok, two);
    c->c_kv = power_law(wd, wa, a->c.c_kv, wo, o->c.c_kv, two);
}

int eerl__describe_build(struct json_t *root, struct json_t *desc, const char *gpu,
                         struct eerl_twin_preset *p, char *why, size_t why_len)
{
    struct eerl__arch d;
    struct eerl__wl_params w;
    struct anchor an[sizeof(anchors) / sizeof(anchors[0])];
    const char *name = "described";
    json_t *nm = json_object_get(desc, "name");
    size_t n, k;
    int r;

    if ((r = arch_parse(desc, &d, why, why_len)) < 0 ||
        (r = workload_parse(json_object_get(desc, "workload"), &w, why, why_len)) < 0)
        return r;
    if (nm) {
        if (!json_is_string(nm) || !json_string_length(nm) || json_string_length(nm) >= 32)
            return say(why, why_len, EERL_EPARSE,
                       "field 'name' is not a string of 1-31 characters");
        name = json_string_value(nm);
    }
    n = load_anchors(root, gpu, an, p);
    if (!n)
        return say(why, why_len, EERL_ENOENT,
                   "no fitted model with an architecture on GPU '%s' to derive it from", gpu);
    k = pick_anchor(an, n, &d);
    if ((r = eerl__preset_load(root, an[k].name, gpu, p)) < 0)
        return say(why, why_len, r, "the fitted preset %s/%s does not load", an[k].name, gpu);
    scale_costs(&p->c, an, n, k, &d, w.seq_limit / 2.0);
    p->wl = w;
    snprintf(p->model, sizeof(p->model), "%s", name);
    return 0;
}

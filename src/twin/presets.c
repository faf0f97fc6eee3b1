/* Parameter-file parsing with jansson. Every numeric field is required and range-checked so a
 * bad file fails here with EERL_EPARSE rather than producing nonsense in a sweep. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "eerl/error.h"
#include "twin/presets.h"

/* Generated at build time from data/twin/params.json (see CMakeLists.txt). */
extern const char eerl__twin_params_text[];

/* Fitted presets, then models built from their description (the "described" object). */
static const char *const models[] = {"qwen3-30b-a3b", "nemotron-super-49b", "grpo-tiny",
                                     "mistral-nemo-12b"};
static const char *const gpus[] = {"h100", "gb200", "h200"};

const char *eerl_twin_model_names(void)
{
    return "qwen3-30b-a3b, nemotron-super-49b, grpo-tiny, mistral-nemo-12b";
}

const char *eerl_twin_gpu_names(void)
{
    return "h100, gb200, h200";
}

const char *eerl_twin_embedded_params(void)
{
    return eerl__twin_params_text;
}

static int known(const char *name, const char *const *list, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++)
        if (!strcmp(name, list[i]))
            return 1;
    return 0;
}

static int num(json_t *obj, const char *key, double lo, double hi, double *out)
{
    json_t *v = json_object_get(obj, key);
    double x;

    if (!json_is_number(v))
        return EERL_EPARSE;
    x = json_number_value(v);
    if (!isfinite(x) || x < lo || x > hi)
        return EERL_EPARSE;
    *out = x;
    return 0;
}

#define NUM(obj, key, lo, hi, dst)                                                                 \
    do {                                                                                           \
        double v_;                                                                                 \
        if (num((obj), (key), (lo), (hi), &v_) < 0)                                                \
            goto fail;                                                                             \
        (dst) = v_;                                                                                \
    } while (0)

/* An optional key: dst = def when obj has none, else as NUM. */
#define OPT_NUM(obj, key, lo, hi, def, dst)                                                        \
    do {                                                                                           \
        (dst) = (def);                                                                             \
        if (json_object_get((obj), (key)))                                                         \
            NUM((obj), (key), (lo), (hi), (dst));                                                  \
    } while (0)

static int parse_gpu(json_t *o, struct eerl__gpu *g)
{
    double top, hi, lo, step;

    if (!json_is_object(o))
        return EERL_EPARSE;
    NUM(o, "clock_top", 300, 4000, top);
    NUM(o, "clock_hi", 300, 4000, hi);
    NUM(o, "clock_lo", 100, 4000, lo);
    NUM(o, "clock_step", 1, 500, step);
    if (eerl__gpu_set_clocks(g, (unsigned)top, (unsigned)hi, (unsigned)lo, (unsigned)step) < 0)
        goto fail;
    NUM(o, "gov_mhz", 300, 4000, g->gov_mhz);
    NUM(o, "cap_w", 50, 5000, g->cap_w);
    NUM(o, "p_static_w", 0, 2000, g->p_static_w);
    NUM(o, "p_idle_dyn_w", 0, 2000, g->p_idle_dyn_w);
    NUM(o, "v_floor", 0.3, 1, g->v_floor);
    NUM(o, "f_knee", 0, 4000, g->f_knee);
    NUM(o, "droop_mhz", 0, 100, g->droop_mhz);
    /* A clock lock or a wake from the idle clock takes milliseconds: the file may not make it a
     * seconds-scale cost (docs/internals/twin.md, "Clock switches"). */
    NUM(o, "switch_s", 0, EERL__TWIN_SWITCH_MAX_S, g->switch_s);
    NUM(o, "idle_clock", 100, 4000, g->idle_clock);
    /* Optional (files from before they existed keep their meaning): V(f) shape, waiting draw,
     * spread of a pool's speed between seeds. */
    OPT_NUM(o, "v_gamma", 0.25, 4, 1, g->v_gamma);
    OPT_NUM(o, "p_wait_w", 0, 2000, 0, g->p_wait_w);
    OPT_NUM(o, "jitter", 0, 0.5, 0, g->jitter);
    if (g->f_knee >= g->fmax || g->gov_mhz > g->fmax)
        goto fail;
    return 0;
fail:
    return EERL_EPARSE;
}

static int parse_model(json_t *o, struct eerl__wl_params *w)
{
    static const char *const sz[] = {"S", "M", "L"};
    json_t *sizes = json_object_get(o, "sizes");
    int i;

    if (!json_is_object(o) || !json_is_object(sizes))
        return EERL_EPARSE;
    {
        double lim;
        NUM(o, "seq_limit", 1, 1e6, lim);
        w->seq_limit = (unsigned)lim;
    }
    NUM(o, "len_median", 1, 1e6, w->len_median);
    NUM(o, "len_sigma", 0.01, 4, w->len_sigma);
    NUM(o, "drift", -0.5, 0.5, w->drift);
    NUM(o, "p_zero", 0, 0.99, w->p_zero);
    /* Optional, off when absent: the length level wandering between updates (workload.h). */
    OPT_NUM(o, "len_update_sd", 0, 2.9, 0, w->len_upd_sd);
    /* AR coefficients; stationarity is the workload's check (eerl__wl_init, expected values). */
    OPT_NUM(o, "len_update_ar1", -2, 2, 0, w->len_upd_ar1);
    OPT_NUM(o, "len_update_ar2", -1, 1, 0, w->len_upd_ar2);
    OPT_NUM(o, "len_update_shape", -2, 2, 0, w->len_upd_shape);
    /* Optional, off by default: the dynamic-sampling filter (DAPO) drops zero-advantage groups. */
    w->dyn_filter = 0;
    {
        json_t *f = json_object_get(o, "dynamic_sampling_filter");
        if (f && !json_is_boolean(f))
            goto fail;
        w->dyn_filter = json_is_true(f) ? 1 : 0;
    }
    {
        /* Optional, off by default: overlong filtering leaves truncated responses out of the
         * loss (and of log-prob and training), as grpo_tiny and DAPO's overlong filter do. */
        json_t *f = json_object_get(o, "overlong_filter");
        if (f && !json_is_boolean(f))
            goto fail;
        w->overlong_filter = json_is_true(f) ? 1 : 0;
    }
    for (i = 0; i < 3; i++) {
        json_t *a = json_object_get(sizes, sz[i]);
        if (!json_is_array(a) || json_array_size(a) != 3)
            goto fail;
        if (!json_is_integer(json_array_get(a, 0)) || !json_is_integer(json_array_get(a, 1)) ||
            !json_is_integer(json_array_get(a, 2)))
            goto fail;
        w->P[i] = (unsigned)json_integer_value(json_array_get(a, 0));
        w->K[i] = (unsigned)json_integer_value(json_array_get(a, 1));
        w->B[i] = (unsigned)json_integer_value(json_array_get(a, 2));
        if (!w->P[i] || !w->K[i] || w->P[i] > 100000 || w->K[i] > 1000 ||
            w->B[i] != w->P[i] * w->K[i])
            goto fail;
    }
    return 0;
fail:
    return EERL_EPARSE;
}

static int parse_phase(json_t *o, struct eerl__phase_phys *ph, int with_roof)
{
    if (!json_is_object(o))
        return EERL_EPARSE;
    if (with_roof) {
        NUM(o, "b", 0, 1, ph->b);
        NUM(o, "r", 0, 100, ph->r);
    } else {
        ph->b = 1;
        ph->r = 0;
    }
    NUM(o, "pw", 0, 5000, ph->pw);
    OPT_NUM(o, "pm", 0, 5000, 0, ph->pm); /* files before it was introduced have none */
    return 0;
fail:
    return EERL_EPARSE;
}

static int parse_costs(json_t *o, struct eerl_twin_preset *p)
{
    struct eerl__costs *c = &p->c;

    if (!json_is_object(o))
        return EERL_EPARSE;
    NUM(o, "c_tail", 0, 10, c->c_tail);
    NUM(o, "c_tok", 0, 10, c->c_tok);
    NUM(o, "c_lp", 0, 10, c->c_lp);
    NUM(o, "c_tr", 0, 10, c->c_tr);
    NUM(o, "t_tr0", 0, 1e5, c->t_tr0);
    NUM(o, "t_refit", 0, 1e5, c->t_refit);
    OPT_NUM(o, "t_tr_after", 0, c->t_tr0, 0, c->t_tr_after); /* files before it have none */
    NUM(o, "t_other", 0, 1e5, c->t_other);
    NUM(o, "if_tail", 0, 100, c->if_tail);
    NUM(o, "spill", 0, 0.95, c->spill);
    NUM(o, "c_kv", 0, 10, c->c_kv);
    if (parse_phase(json_object_get(o, "gen"), &p->ph[0], 1) < 0 ||
        parse_phase(json_object_get(o, "logprob"), &p->ph[1], 1) < 0 ||
        parse_phase(json_object_get(o, "train"), &p->ph[2], 1) < 0 ||
        parse_phase(json_object_get(o, "refit"), &p->ph[3], 0) < 0)
        goto fail;
    p->ph_tok = p->ph[0];
    {
        json_t *t = json_object_get(o, "gen_tok");
        if (t) {
            if (!json_is_object(t))
                goto fail;
            NUM(t, "b", 0, 1, p->ph_tok.b);
            NUM(t, "r", 0, 100, p->ph_tok.r);
        }
    }
    return 0;
fail:
    return EERL_EPARSE;
}

/* Optional "noise" object of a preset (presets.h); absent: the preset has no fitted noise. */
static int parse_noise(json_t *o, struct eerl__noise *n)
{
    memset(n, 0, sizeof(*n));
    if (!o)
        return 0;
    if (!json_is_object(o))
        return EERL_EPARSE;
    NUM(o, "gen_rel", 0, 0.5, n->gen_rel);
    NUM(o, "gen_abs_s", 0, 60, n->gen_abs_s);
    NUM(o, "gen_root", 0, 10, n->gen_root);
    NUM(o, "gen_rho", -0.95, 0.95, n->gen_rho);
    NUM(o, "train_rel", 0, 0.5, n->train_rel);
    NUM(o, "train_abs_s", 0, 60, n->train_abs_s);
    NUM(o, "train_root", 0, 10, n->train_root);
    NUM(o, "train_rho", -0.95, 0.95, n->train_rho);
    NUM(o, "energy_exp", 0, 1, n->energy_exp);
    n->have = 1;
    return 0;
fail:
    return EERL_EPARSE;
}

int eerl__preset_cache(struct eerl_twin_preset *p)
{
    static const char sz[] = "SML";
    int i;
    unsigned u;

    for (i = 0; i < 3; i++)
        for (u = 0; u < EERL__EXP_CACHE; u++)
            if (eerl__wl_expected(&p->wl, sz[i], u, &p->expc[i][u]) < 0)
                return EERL_EPARSE;
    return 0;
}

int eerl__preset_load(struct json_t *root, const char *model, const char *gpu,
                      struct eerl_twin_preset *p)
{
    json_t *o, *g, *m;
    char key[64];

    snprintf(p->model, sizeof(p->model), "%s", model);
    snprintf(p->gpu_name, sizeof(p->gpu_name), "%s", gpu);
    snprintf(p->gpu.name, sizeof(p->gpu.name), "%s", gpu);
    snprintf(key, sizeof(key), "%s/%s", model, gpu);
    o = json_object_get(json_object_get(root, "presets"), key);
    g = json_object_get(json_object_get(root, "gpus"), gpu);
    m = json_object_get(json_object_get(root, "models"), model);
    if (!o || !g || !m)
        return EERL_ENOENT;
    if (parse_gpu(g, &p->gpu) < 0 || parse_model(m, &p->wl) < 0 || parse_costs(o, p) < 0 ||
        parse_noise(json_object_get(o, "noise"), &p->noise) < 0)
        return EERL_EPARSE;
    return 0;
}

int eerl__preset_known(const char *model, const char *gpu)
{
    return (!model || known(model, models, sizeof(models) / sizeof(models[0]))) &&
           known(gpu, gpus, sizeof(gpus) / sizeof(gpus[0]));
}

void eerl_twin_preset_free(eerl_twin_preset *preset)
{
    free(preset);
}

int eerl_twin_preset_clocks(const eerl_twin_preset *preset, unsigned *mhz, size_t cap,
                            size_t *ret_n)
{
    if (!preset || !mhz || !ret_n)
        return EERL_EINVAL;
    if (cap < preset->gpu.n_clocks)
        return EERL_EOVERFLOW;
    memcpy(mhz, preset->gpu.clocks, preset->gpu.n_clocks * sizeof(*mhz));
    *ret_n = preset->gpu.n_clocks;
    return 0;
}

int eerl_twin_preset_clock_ok(const eerl_twin_preset *preset, unsigned mhz)
{
    if (!preset)
        return 0;
    return mhz == EERL_TWIN_GOV || eerl__gpu_clock_ok(&preset->gpu, mhz);
}

const char *eerl_twin_preset_model(const eerl_twin_preset *preset)
{
    return preset ? preset->model : NULL;
}

int eerl_twin_preset_batch(const eerl_twin_preset *preset, char size, unsigned *ret_p,
                           unsigned *ret_k, unsigned *ret_b)
{
    int i = eerl__wl_size_index(size);

    if (!preset || i < 0 || !ret_p || !ret_k || !ret_b)
        return EERL_EINVAL;
    *ret_p = preset->wl.P[i];
    *ret_k = preset->wl.K[i];
    *ret_b = preset->wl.B[i];
    return 0;
}

void eerl__preset_expected_batch(const struct eerl_twin_preset *p, char size, unsigned u,
                                 struct eerl__wl_batch *ret)
{
    int i = eerl__wl_size_index(size);

    if (i >= 0 && u < EERL__EXP_CACHE)
        *ret = p->expc[i][u];
    else
        eerl__wl_expected(&p->wl, size, u, ret);
}

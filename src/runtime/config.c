/* The runtime session's configuration (see config.h): the size-tagged struct's defaults and
 * the checks against the device, before anything is built. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eerl/error.h"
#include "core/options.h"
#include "runtime/config.h"

/* The end of the last field of 0.2, the first size-tagged release: the shortest struct a caller
 * may pass. Fields added later go after resume_tag. */
#define RT_CFG_SIZE_MIN                                                                            \
    (offsetof(eerl_rt_config, resume_tag) + sizeof(((eerl_rt_config *)0)->resume_tag))

int eerl_rt_config_init(eerl_mode mode, eerl_rt_config *ret_cfg, size_t size)
{
    eerl_rt_config c;

    if (!ret_cfg || (unsigned)mode >= EERL_MODE_COUNT || size < RT_CFG_SIZE_MIN)
        return EERL_EINVAL;
    memset(&c, 0, sizeof(c));
    c.size = size < sizeof(c) ? size : sizeof(c);
    c.mode = mode;
    eerl__options_rt_defaults(mode, &c); /* allowed_loss, strategy, ...: the table of options */
    memcpy(ret_cfg, &c, c.size);
    return 0;
}

/* The function behind the header's macro, for bindings that call the symbol. */
int(eerl_rt_config_default)(eerl_mode mode, eerl_rt_config *ret_cfg)
{
    return eerl_rt_config_init(mode, ret_cfg, sizeof(*ret_cfg));
}

/* A pool's GPUs exist and are distinct; seen[] (count entries) gets bit `bit` of each. Linear
 * in the pool, so an allocation of thousands of GPUs is checked as fast as one of eight. */
static int check_pool(const unsigned *g, size_t n, const char *name, unsigned count,
                      unsigned char *seen, unsigned bit, char *why, size_t len)
{
    size_t i;

    for (i = 0; i < n; i++) {
        if (g[i] >= count) {
            snprintf(why, len, "%s pool names GPU %u but the device has %u GPUs (0-%u)", name, g[i],
                     count, count ? count - 1 : 0);
            return -1;
        }
        if (seen[g[i]] & bit) {
            snprintf(why, len, "%s pool names GPU %u twice", name, g[i]);
            return -1;
        }
        seen[g[i]] |= bit;
    }
    return 0;
}

/* The pools' GPU lists: the pointers when given, else the fixed arrays (at most
 * EERL_RT_POOL_GPUS_MAX each). */
const unsigned *eerl__rt_gen_list(const eerl_rt_config *c)
{
    return c->gen_pool ? c->gen_pool : c->gen_gpus;
}

const unsigned *eerl__rt_train_list(const eerl_rt_config *c)
{
    return c->train_pool ? c->train_pool : c->train_gpus;
}

/* A pool's size: at most EERL_RT_GPUS_LIMIT, and no more than the fixed array holds when the
 * list is given there. */
static int check_pool_size(size_t n, int in_array, const char *name, const char *field, char *why,
                           size_t len)
{
    if (n > EERL_RT_GPUS_LIMIT) {
        snprintf(why, len, "%s pool has %zu GPUs, more than the %u a session takes", name, n,
                 EERL_RT_GPUS_LIMIT);
        return -1;
    }
    if (in_array && n > EERL_RT_POOL_GPUS_MAX) {
        snprintf(why, len,
                 "%s pool has %zu GPUs but %s holds at most %d: give a pool of that size "
                 "in %s_pool",
                 name, n, field, EERL_RT_POOL_GPUS_MAX, name[0] == 'g' ? "gen" : "train");
        return -1;
    }
    return 0;
}

/* What is checked before any device is asked anything: the mode, the options, the pools'
 * sizes, the eerld choice. */
static int check_options(const eerl_rt_config *cfg, char *why, size_t why_len)
{
    int e;

    if ((unsigned)cfg->mode >= EERL_MODE_COUNT) {
        snprintf(why, why_len, "mode %d is unknown", (int)cfg->mode);
        return EERL_EINVAL;
    }
    e = cfg->ctl_cfg ? eerl_ctl_config_check(cfg->ctl_cfg, why, why_len)
                     : eerl__options_check_rt(cfg, why, why_len);
    if (e < 0)
        return e;
    if (check_pool_size(cfg->n_gen, !cfg->gen_pool, "generation", "gen_gpus", why, why_len) < 0 ||
        check_pool_size(cfg->n_train, !cfg->train_pool, "training", "train_gpus", why, why_len) < 0)
        return EERL_EINVAL;
    if (cfg->mode != EERL_MODE_COLOCATED && cfg->n_gen + cfg->n_train > EERL_RT_GPUS_LIMIT) {
        snprintf(why, why_len, "the pools hold %zu GPUs together, more than the %u a session takes",
                 cfg->n_gen + cfg->n_train, EERL_RT_GPUS_LIMIT);
        return EERL_EINVAL;
    }
    if ((unsigned)cfg->eerld > EERL_RT_EERLD_ON) {
        snprintf(why, why_len,
                 "eerld %d is unknown: use EERL_RT_EERLD_AUTO (0), EERL_RT_EERLD_OFF (1) or "
                 "EERL_RT_EERLD_ON (2)",
                 (int)cfg->eerld);
        return EERL_EINVAL;
    }
    return 0;
}

int eerl__rt_config_check_pools(eerl_device *dev, const eerl_rt_config *cfg, char *why,
                                size_t why_len)
{
    const unsigned *gen = eerl__rt_gen_list(cfg), *train = eerl__rt_train_list(cfg);
    unsigned char *seen = NULL;
    unsigned count = 0;
    size_t i;
    int e;

    e = eerl_device_count(dev, &count);
    if (e < 0) {
        snprintf(why, why_len, "counting GPUs: %s", eerl_strerror(e));
        return e;
    }
    seen = calloc(count ? count : 1, 1); /* bit 1: in the generation pool, bit 2: training */
    if (!seen) {
        snprintf(why, why_len, "out of memory");
        return EERL_ENOMEM;
    }
    e = EERL_EINVAL;
    if (check_pool(gen, cfg->n_gen, "generation", count, seen, 1, why, why_len) < 0)
        goto out;
    if (check_pool(train, cfg->n_train, "training", count, seen, 2, why, why_len) < 0)
        goto out;
    if (cfg->n_gen == 0) {
        snprintf(why, why_len, "the generation pool is empty");
        goto out;
    }
    if (cfg->mode == EERL_MODE_COLOCATED) {
        /* Both lists are free of duplicates: the same size and every training GPU generates. */
        int same = cfg->n_train == cfg->n_gen;
        for (i = 0; same && i < cfg->n_train; i++)
            same = seen[train[i]] & 1;
        if (cfg->n_train && !same) {
            snprintf(why, why_len,
                     "colocated mode runs generation and training on one set of GPUs; the "
                     "training pool differs from the generation pool");
            goto out;
        }
        e = 0;
        goto out;
    }
    if (cfg->n_train == 0) {
        snprintf(why, why_len, "%s mode needs a training pool", eerl_mode_name(cfg->mode));
        goto out;
    }
    for (i = 0; i < cfg->n_gen; i++)
        if (seen[gen[i]] & 2) {
            snprintf(why, why_len,
                     "%s mode needs separate pools; GPU %u is in both (use colocated "
                     "for shared GPUs)",
                     eerl_mode_name(cfg->mode), gen[i]);
            goto out;
        }
    e = 0;
out:
    free(seen);
    return e;
}

int eerl__rt_config_resolve(const eerl_rt_config *cfg, eerl_rt_config *ret_full, char *why,
                            size_t why_len)
{
    eerl_rt_config full;

    /* This release's struct: the defaults (the mode's field is the caller's), then the caller's
     * fields, all of them or the first cfg->size bytes of a shorter (older) struct. */
    if (cfg->size < RT_CFG_SIZE_MIN || cfg->size > sizeof(*cfg)) {
        snprintf(why, why_len,
                 "configuration size %zu is not one this eerl reads (%zu to %zu): start from "
                 "eerl_rt_config_default",
                 cfg->size, (size_t)RT_CFG_SIZE_MIN, sizeof(*cfg));
        return EERL_EINVAL;
    }
    (void)eerl_rt_config_init(EERL_MODE_COLOCATED, &full, sizeof(full));
    memcpy(&full, cfg, cfg->size);
    full.size = sizeof(full);
    *ret_full = full;
    return check_options(ret_full, why, why_len);
}

/* Owns the governor reference ring and its predictor's working memory (refs.h). */
#include <stdlib.h>
#include <string.h>

#include "eerl/error.h"
#include "core/refs.h"

int eerl__refs_init(struct eerl__refs *r, size_t cap, int layout)
{
    memset(r, 0, sizeof(*r));
    r->cap = cap;
    r->layout = layout;
    r->obs = calloc(cap, sizeof(*r->obs));
    r->ptrs = calloc(cap, sizeof(*r->ptrs));
    if (!r->obs || !r->ptrs)
        return EERL_ENOMEM;
    return eerl__pred_work_init(&r->work, cap);
}

void eerl__refs_free(struct eerl__refs *r)
{
    eerl__pred_work_free(&r->work);
    free(r->ptrs);
    free(r->obs);
    r->ptrs = NULL;
    r->obs = NULL;
}

const eerl_obs *eerl__refs_at(const struct eerl__refs *r, size_t i)
{
    return &r->obs[(r->head + i) % r->cap];
}

void eerl__refs_add(struct eerl__refs *r, const eerl_obs *obs)
{
    size_t i;

    if (r->n < r->cap) {
        r->obs[(r->head + r->n) % r->cap] = *obs;
        r->n++;
    } else {
        r->obs[r->head] = *obs;
        r->head = (r->head + 1) % r->cap;
    }
    for (i = 0; i < r->n; i++)
        r->ptrs[i] = eerl__refs_at(r, i);
    /* Observations were validated, so the fit only fails on impossible input; the previous
     * model stays in force if it does. */
    (void)eerl__pred_fit_opts(&r->pred, r->layout, r->ptrs, r->n, &r->work, r->min_t, r->opts);
}

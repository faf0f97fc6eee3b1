/* The twin's public preset constructors: a fitted model by name, or a model from its
 * description (twin/describe.h), each over the parameter file's fitted presets
 * (twin/presets.h). Kept apart from the parameter parsing so that the description, which
 * derives a model from the fitted presets, and the parsing call each other one way only. */
#include <stdio.h>
#include <stdlib.h>

#include <jansson.h>

#include "eerl/error.h"
#include "twin/describe.h"
#include "twin/presets.h"

int eerl_twin_preset_new(const char *model, const char *gpu, const char *json_text,
                         eerl_twin_preset **ret_preset)
{
    eerl_twin_preset *p = NULL;
    json_t *root = NULL, *desc;
    int r = EERL_EPARSE;

    if (!model || !gpu || !ret_preset)
        return EERL_EINVAL;
    if (!eerl__preset_known(model, gpu))
        return EERL_ENOENT;
    root = json_loads(json_text ? json_text : eerl_twin_embedded_params(), 0, NULL);
    if (!root)
        goto fail;
    p = calloc(1, sizeof(*p));
    if (!p) {
        r = EERL_ENOMEM;
        goto fail;
    }
    /* A model the twin was not fitted on is built from its description, as a user's is. */
    desc = json_object_get(json_object_get(root, "described"), model);
    r = desc ? eerl__describe_build(root, desc, gpu, p, NULL, 0)
             : eerl__preset_load(root, model, gpu, p);
    if (r < 0)
        goto fail;
    snprintf(p->model, sizeof(p->model), "%s", model);
    r = eerl__preset_cache(p);
    if (r < 0)
        goto fail;
    json_decref(root);
    *ret_preset = p;
    return 0;
fail:
    free(p);
    json_decref(root);
    return r;
}

int eerl_twin_preset_describe(const char *desc_text, const char *gpu, const char *json_text,
                              char *why, size_t why_len, eerl_twin_preset **ret_preset)
{
    eerl_twin_preset *p = NULL;
    json_t *root = NULL, *desc = NULL;
    json_error_t jerr;
    int r = EERL_EPARSE;

    if (!desc_text || !gpu || !ret_preset)
        return EERL_EINVAL;
    if (why && why_len)
        why[0] = 0;
    if (!eerl__preset_known(NULL, gpu))
        return EERL_ENOENT;
    desc = json_loads(desc_text, 0, &jerr);
    if (!desc) {
        if (why && why_len)
            snprintf(why, why_len, "not JSON: %s (line %d)", jerr.text, jerr.line);
        goto fail;
    }
    root = json_loads(json_text ? json_text : eerl_twin_embedded_params(), 0, NULL);
    if (!root)
        goto fail;
    p = calloc(1, sizeof(*p));
    if (!p) {
        r = EERL_ENOMEM;
        goto fail;
    }
    r = eerl__describe_build(root, desc, gpu, p, why, why_len);
    if (r < 0)
        goto fail;
    r = eerl__preset_cache(p);
    if (r < 0)
        goto fail;
    json_decref(desc);
    json_decref(root);
    *ret_preset = p;
    return 0;
fail:
    free(p);
    json_decref(desc);
    json_decref(root);
    return r;
}

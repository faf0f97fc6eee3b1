/* A model the twin was not fitted on, built from its description (what a user knows of it and of
 * its workload) and a fitted preset of the same GPU (docs/twin.md, "A model from its
 * description"). Owns the description format and the derivation rules; fits nothing. */
#ifndef EERL_TWIN_DESCRIBE_H
#define EERL_TWIN_DESCRIBE_H

#include <stddef.h>

#include "twin/presets.h"

struct json_t;

/* The architecture a description gives (and each fitted model's "architecture" entry). */
struct eerl__arch {
    int moe;           /* mixture of experts: only active_b of total_b run per token */
    double total_b;    /* parameters, billions */
    double active_b;   /* parameters a token runs through, billions (= total_b when dense) */
    unsigned layers;   /* transformer blocks */
    unsigned hidden;   /* model width */
    unsigned heads;    /* attention (query) heads */
    unsigned kv_heads; /* key/value heads (grouped-query attention); heads when absent */
};

/* Builds p from the description desc (a JSON object) and the fitted presets of gpu in the
 * parameter file root: the anchor is the fitted model of the same kind (dense or MoE), its
 * phase physics kept, its training pool's costs scaled by the ratios of work per token and of
 * weights, generation's costs by power laws through both fitted models (describe.c). EERL_EPARSE /
 * EERL_ERANGE: a bad description, with a sentence naming the field and its value in why (when
 * why_len > 0); EERL_ENOENT: no fitted model with an architecture on that GPU. */
int eerl__describe_build(struct json_t *root, struct json_t *desc, const char *gpu,
                         struct eerl_twin_preset *p, char *why, size_t why_len);

/* Work per token of a model (floating-point operations of one forward pass: 2 per active
 * parameter plus the attention's 4 x layers x hidden x context), at context ctx tokens. */
double eerl__arch_flops_per_token(const struct eerl__arch *a, double ctx);

#endif

/* Presets: the fitted parameters of one (model, GPU) pair, read from a parameter file's JSON
 * text (data/twin/params.json, embedded into the library at build time). Owns the parsing and
 * the definition of struct eerl_twin_preset; the twin copies a preset, never points into one. */
#ifndef EERL_TWIN_PRESETS_H
#define EERL_TWIN_PRESETS_H

#include "eerl/tools/twin.h"
#include "twin/physics.h"
#include "twin/workload.h"

#define EERL__EXP_CACHE 64

/* Per-update costs at fmax, in seconds (see docs/internals/twin.md for the formulas). */
struct eerl__costs {
    double c_tail; /* generation: per token of the longest response (decode latency) */
    double c_tok;  /* generation: per generated token per generation GPU (throughput) */
    double c_lp;   /* log-prob: per consumed token per GPU that computes it */
    double c_tr;   /* training: per consumed token per training GPU */
    double t_tr0;  /* training: fixed per update (optimizer step, gradient reduction) */
    /* drained: the part of t_tr0 the training pool can only do after the rendezvous (its side
     * of the weight refit: gathering and sending the new weights), at the training clock;
     * optional key, 0 when absent; never more than t_tr0 (docs/internals/twin.md, "Execution
     * modes") */
    double t_tr_after;
    double t_refit; /* weight refit (clock-insensitive: transfer-bound) */
    double t_other; /* reward, data and host work; GPUs wait */
    double if_tail; /* in-flight: tail term uses if_tail * mean length instead of longest */
    double spill;   /* in-flight: fraction of a batch's tokens still generating at the refit */
    double c_kv;    /* in-flight: KV recompute per spilled token per generation GPU */
};

/* Per-update noise of a preset (optional "noise" object; used only when a run asks for it).
 * Each phase group (generation; log-prob + training) has a log-time deviation of standard
 * deviation sqrt(abs_s^2 + root^2 t + (rel t)^2) / t at its time t: a fixed part (seconds),
 * one that grows as the square root of the phase's length (s^1/2: many small independent
 * delays) and a relative one that dominates long phases; it follows an AR(1) process over
 * updates with lag-1 correlation rho. Power in the phase scales as factor^(energy_exp - 1), so
 * energy varies as factor^energy_exp. */
struct eerl__noise {
    int have;
    double gen_rel, gen_abs_s, gen_root, gen_rho;
    double train_rel, train_abs_s, train_root, train_rho;
    double energy_exp;
};

struct eerl_twin_preset {
    char model[32], gpu_name[16];
    struct eerl__gpu gpu;
    struct eerl__wl_params wl;
    struct eerl__costs c;
    struct eerl__phase_phys ph[4]; /* gen, logprob, train, refit */
    /* Roofline (b, r) of generation's throughput term (c_tok: large-batch decode, KV-cache
     * traffic) when it differs from the tail term's (gen: the last few sequences); power is
     * gen's. Optional "gen_tok" object of a preset; defaults to gen's b and r. */
    struct eerl__phase_phys ph_tok;
    struct eerl__noise noise;
    /* Expected batches of updates 0..EERL__EXP_CACHE-1 per size, computed once at load. */
    struct eerl__wl_batch expc[3][EERL__EXP_CACHE];
};

struct json_t;
/* Loads the fitted preset (model, gpu) of a parsed parameter file into p. EERL_ENOENT: the file
 * has no such preset; EERL_EPARSE: a field is missing or out of range. */
/* 1 when model (NULL: any) and gpu are among the fitted presets' names. */
int eerl__preset_known(const char *model, const char *gpu);

int eerl__preset_load(struct json_t *root, const char *model, const char *gpu,
                      struct eerl_twin_preset *p);
/* Fills p's cache of expected batches from its workload (after a load or a description). */
int eerl__preset_cache(struct eerl_twin_preset *p);

/* The expected batch of update u (from the cache when it holds u). */
void eerl__preset_expected_batch(const struct eerl_twin_preset *p, char size, unsigned u,
                                 struct eerl__wl_batch *ret);

#endif

/* The paper's synchronous strategy (colocated and disaggregated; sections 5.1, 5.2, 6.1,
 * Algorithm 1): its judge. Calibration at governor clocks fits the predictor; each trial's
 * per-phase ratios (measured / predicted at the observed work) are applied to the governor
 * references (section 6.1, ratios.c's eerl__ratios_parts), and a throughput failure names the
 * phase that added most time, which the proposer (propose/pairs.c) raises first. The trial loop
 * is judge/trial_loop.c's; after lock the controller monitors (lifecycle.c). */
#include "core/judge/trial_loop.h"

/* Section 6.1: per-phase ratios at the observed work applied to the governor references. */
static void sync_judge(const struct eerl__ctx *cx, const eerl_setting *s, const struct eerl__acc *a,
                       struct eerl__ratios *r)
{
    (void)s;
    eerl__ratios_parts(cx, a, r);
}

static int sync_calibrated(const struct eerl__ctx *cx, const eerl_setting *next)
{
    eerl__rec_emit(cx->rec, EERL_EV_CALIBRATED, next,
                   "predictor fitted on %zu governor updates (generation features %s%s, "
                   "training %s)",
                   cx->refs->n, cx->refs->pred.t_gen.used & 1u ? "G" : "",
                   cx->refs->pred.t_gen.used & 4u ? "L" : "",
                   cx->refs->pred.t_train.used & 2u ? "N" : "none");
    return -1;
}

/* The grid counts from the clock below the peak. The paper's synchronous locks
 * (Table 5 and Figure 4: 1830/1425, 1695/1425, 1695/1335, Mistral-NeMo 1785/1695) all lie on a
 * 45 MHz grid from 1965 MHz, none on one from the H100's 1980 MHz peak
 * (docs/internals/controller.md). */
static int sync_init(const struct eerl__ctx *cx, void *st, struct eerl__judge_setup *ret_setup)
{
    (void)cx;
    (void)st;
    ret_setup->grid_below_peak = 1;
    return 0;
}

static const struct eerl__trials_mode sync_mode = {
    .ratios = sync_judge,
    .calibrated = sync_calibrated,
    .gap_before_first = 0,
    .names_slow_group = 1,
};

static void sync_observe(const struct eerl__ctx *cx, void *st, const eerl_obs *obs, int usable,
                         eerl_setting *next)
{
    eerl__trials_observe(cx, st, &sync_mode, obs, usable, next);
}

const struct eerl__judge_ops eerl__judge_sync = {
    .name = "paper-sync",
    .st_size = sizeof(struct eerl__trials_st),
    .init = sync_init,
    .observe = sync_observe,
    .state = eerl__trials_state,
    .ratios = sync_judge,
    .after = EERL__AFTER_MONITOR,
};

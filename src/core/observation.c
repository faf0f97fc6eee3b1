/* Owns the validation of one observation (eerl_obs_check): what a runtime must fill in for each
 * execution mode, and the reason text when it did not. Decides nothing and keeps no state. */
#include <math.h>
#include <stdio.h>

#include "eerl/core.h"
#include "eerl/error.h"

static const char *const phase_names[EERL_PHASE_COUNT] = {"generation", "logprob", "training",
                                                          "refit", "other"};

#define BAD(...)                                                                                   \
    do {                                                                                           \
        if (why && why_len)                                                                        \
            snprintf(why, why_len, __VA_ARGS__);                                                   \
        return EERL_EINVAL;                                                                        \
    } while (0)

/* Finite and >= 0. */
static int nonneg(double v)
{
    return isfinite(v) && v >= 0;
}

/* The update's totals: tokens, time, energy. */
static int check_totals(const eerl_obs *o, int overlapped, char *why, size_t why_len)
{
    if (!nonneg(o->gen_tokens))
        BAD("generated tokens G = %g must be a finite number >= 0", o->gen_tokens);
    if (!nonneg(o->valid_tokens) || o->valid_tokens <= 0)
        BAD("valid training tokens N = %g must be > 0 (an update without valid tokens cannot be "
            "judged per token)",
            o->valid_tokens);
    if (!nonneg(o->longest_tokens))
        BAD("longest response L = %g must be a finite number >= 0", o->longest_tokens);
    /* Only where the update generates the batch it trains on: asynchronous updates consume a
     * batch generated (partly) in earlier updates. */
    if (!overlapped && o->gen_tokens > 0 && o->longest_tokens > o->gen_tokens)
        BAD("longest response L = %g exceeds the generated tokens G = %g", o->longest_tokens,
            o->gen_tokens);
    if (!nonneg(o->time_s) || o->time_s <= 0)
        BAD("update time %g s must be > 0", o->time_s);
    if (!nonneg(o->energy_j) || o->energy_j <= 0)
        BAD("update energy %g J must be > 0", o->energy_j);
    return 0;
}

/* Each phase's and each pool's figures, and the flags; their sums for the checks that follow. */
static int check_parts(const eerl_obs *o, double *ret_tsum, double *ret_esum, char *why,
                       size_t why_len)
{
    double tsum = 0, esum = 0;
    int i;

    for (i = 0; i < EERL_PHASE_COUNT; i++) {
        if (!nonneg(o->phase_time_s[i]))
            BAD("%s time %g s must be a finite number >= 0", phase_names[i], o->phase_time_s[i]);
        if (!nonneg(o->phase_energy_j[i]))
            BAD("%s energy %g J must be a finite number >= 0", phase_names[i],
                o->phase_energy_j[i]);
        tsum += o->phase_time_s[i];
        esum += o->phase_energy_j[i];
    }
    for (i = 0; i < EERL_POOLS_MAX; i++) {
        if ((o->flags & EERL_OBS_ARRIVALS) && !nonneg(o->arrival_s[i]))
            BAD("%s pool arrival %g s must be a finite number >= 0", i ? "training" : "generation",
                o->arrival_s[i]);
        if ((o->flags & EERL_OBS_POOL_ENERGY) && !nonneg(o->pool_energy_j[i]))
            BAD("%s pool energy %g J must be a finite number >= 0", i ? "training" : "generation",
                o->pool_energy_j[i]);
    }
    if (o->flags & ~(unsigned)(EERL_OBS_ARRIVALS | EERL_OBS_CARRYOVER | EERL_OBS_POOL_ENERGY))
        BAD("unknown observation flags 0x%x", o->flags);
    *ret_tsum = tsum;
    *ret_esum = esum;
    return 0;
}

/* Stages run in sequence: the phases cover the update. */
static int check_sequential(const eerl_obs *o, double tol, double tsum, double esum, char *why,
                            size_t why_len)
{
    double slack = 1.0 + tol;

    if (tsum > o->time_s * slack)
        BAD("phase times add up to %g s, more than the update time %g s (tolerance %g%%)", tsum,
            o->time_s, tol * 100);
    if (o->phase_time_s[EERL_PHASE_OTHER] > 0 && tsum < o->time_s / slack)
        BAD("phase times add up to %g s, less than the update time %g s (tolerance %g%%; "
            "leave 'other' at 0 to let the remainder count as other)",
            tsum, o->time_s, tol * 100);
    if (esum > o->energy_j * slack)
        BAD("phase energies add up to %g J, more than the update energy %g J", esum, o->energy_j);
    if (o->phase_time_s[EERL_PHASE_GEN] <= 0)
        BAD("generation time is 0: synchronous modes need per-phase times");
    if (o->phase_time_s[EERL_PHASE_LOGPROB] + o->phase_time_s[EERL_PHASE_TRAIN] <= 0)
        BAD("log-prob + training time is 0: synchronous modes need per-phase times");
    if (o->phase_energy_j[EERL_PHASE_GEN] <= 0)
        BAD("generation energy is 0: synchronous modes need per-phase energies");
    if (o->phase_energy_j[EERL_PHASE_LOGPROB] + o->phase_energy_j[EERL_PHASE_TRAIN] <= 0)
        BAD("log-prob + training energy is 0: synchronous modes need per-phase energies");
    return 0;
}

/* Pools overlap: each pool's busy time lies within the update. */
static int check_overlapped(const eerl_obs *o, double tol, double esum, char *why, size_t why_len)
{
    double slack = 1.0 + tol;
    int i;

    for (i = 0; i < EERL_PHASE_COUNT; i++)
        if (o->phase_time_s[i] > o->time_s * slack)
            BAD("%s time %g s exceeds the update time %g s", phase_names[i], o->phase_time_s[i],
                o->time_s);
    if (o->phase_time_s[EERL_PHASE_LOGPROB] + o->phase_time_s[EERL_PHASE_TRAIN] > o->time_s * slack)
        BAD("log-prob + training time %g s exceeds the update time %g s",
            o->phase_time_s[EERL_PHASE_LOGPROB] + o->phase_time_s[EERL_PHASE_TRAIN], o->time_s);
    if (esum > o->energy_j * slack)
        BAD("phase energies add up to %g J, more than the update energy %g J", esum, o->energy_j);
    if (o->flags & EERL_OBS_ARRIVALS)
        for (i = 0; i < EERL_POOLS_MAX; i++)
            if (o->arrival_s[i] > o->time_s * slack)
                BAD("%s pool arrival %g s is after the update ended (%g s)",
                    i ? "training" : "generation", o->arrival_s[i], o->time_s);
    if ((o->flags & EERL_OBS_POOL_ENERGY) &&
        o->pool_energy_j[0] + o->pool_energy_j[1] > o->energy_j * slack)
        BAD("pool energies add up to %g J, more than the update energy %g J",
            o->pool_energy_j[0] + o->pool_energy_j[1], o->energy_j);
    return 0;
}

/* Drained: each pool's busy time and energy, from arrivals and pool energies or from phases. */
static int check_drained(const eerl_obs *o, char *why, size_t why_len)
{
    double bg = (o->flags & EERL_OBS_ARRIVALS) ? o->arrival_s[0] : o->phase_time_s[EERL_PHASE_GEN];
    double bt = (o->flags & EERL_OBS_ARRIVALS)
                    ? o->arrival_s[1]
                    : o->phase_time_s[EERL_PHASE_LOGPROB] + o->phase_time_s[EERL_PHASE_TRAIN];
    double eg =
        (o->flags & EERL_OBS_POOL_ENERGY) ? o->pool_energy_j[0] : o->phase_energy_j[EERL_PHASE_GEN];
    double et = (o->flags & EERL_OBS_POOL_ENERGY)
                    ? o->pool_energy_j[1]
                    : o->phase_energy_j[EERL_PHASE_LOGPROB] + o->phase_energy_j[EERL_PHASE_TRAIN];
    if (bg <= 0 || bt <= 0)
        BAD("drained mode needs each pool's busy time (arrivals or phase times); got "
            "generation %g s, training %g s",
            bg, bt);
    if (eg <= 0 || et <= 0)
        BAD("drained mode needs each pool's energy (pool or phase energies); got generation "
            "%g J, training %g J",
            eg, et);
    return 0;
}

int eerl_obs_check(eerl_mode mode, const eerl_obs *o, double tol, char *why, size_t why_len)
{
    double tsum, esum;
    int overlapped, rc;

    if (!o)
        BAD("no observation");
    if ((unsigned)mode >= EERL_MODE_COUNT)
        BAD("mode %d is unknown", (int)mode);
    if (!(tol >= 0 && tol <= 1))
        BAD("tolerance %g must be in [0, 1]", tol);
    overlapped = eerl_mode_overlapped(mode);
    rc = check_totals(o, overlapped, why, why_len);
    if (rc == 0)
        rc = check_parts(o, &tsum, &esum, why, why_len);
    if (rc < 0)
        return rc;
    if (!overlapped)
        return check_sequential(o, tol, tsum, esum, why, why_len);
    rc = check_overlapped(o, tol, esum, why, why_len);
    if (rc == 0 && mode == EERL_MODE_DRAINED)
        rc = check_drained(o, why, why_len);
    return rc;
}

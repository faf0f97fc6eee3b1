/* Owns the map from revision numbers to features (revisions.h). A new revision is a line here
 * and a feature the judge reads; its number is the default in config.c. */
#include "core/judge/revisions.h"

void eerl__eerl_features_of(const eerl_ctl_config *cfg, struct eerl__eerl_features *ret)
{
    unsigned r = cfg->eerl_revision;

    ret->probe_quiet = r >= 1;
    ret->probe_gate = r >= 2;
    ret->aim_se = r >= 2;
    ret->late_drained = r >= 3;
    ret->reread = r >= 4;
    ret->linear_train = r >= 5;
    ret->short_run_cap = r >= 6;
    ret->long_margin = r >= 7;
    ret->flat_step = r >= 8;
    ret->account_stretches = r >= 9;
    ret->half_probes = r >= 10;
    ret->moving_cal = r >= 11;
    ret->steep_margin = r >= 12;
}

void eerl__inflight_features_of(const eerl_ctl_config *cfg, struct eerl__inflight_features *ret)
{
    unsigned r = cfg->inflight_revision;

    ret->work_model = r >= 1;
    ret->confirm_moved = r >= 2;
    ret->first_check = r >= 2;
    ret->half_margin = r >= 3 && r < 5; /* its reason, a reference read fast, is gone in 5 */
    ret->pool_model = r >= 4;
    ret->train_last_free = r >= 4;
    ret->raise_later = r >= 4;
    ret->start_drain = r >= 5;
    ret->confirm_alone = r >= 5;
    ret->whole_fit = r >= 5;
}

int eerl__paper_grid_below_peak(const eerl_ctl_config *cfg)
{
    return cfg->paper_revision >= 1;
}

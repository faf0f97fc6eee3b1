/* What eerl saved on the run it controlled, estimated from that run alone (docs/runtime.md, "What
 * eerl saved"): every update after the controller's calibration is compared with what the
 * governor predictor, fitted only on the governor updates before it, says the default governor
 * would have taken for the same work. Filled by eerl_rt_estimate (the run so far) and by `eerl
 * analyze TRACE` (one trace). */
#ifndef EERL_ESTIMATE_H
#define EERL_ESTIMATE_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct eerl_estimate {
    unsigned updates;             /* updates counted: accepted observations from update 2 on */
    unsigned judged_updates;      /* of them, predicted from earlier governor updates */
    unsigned calibration_updates; /* of them, the calibration's: governor work, saving 0 */
    unsigned not_counted;         /* warm-up, refused, or with no prediction to judge them by */
    double energy_j;              /* measured energy of the updates counted */
    double predicted_governor_energy_j; /* the governor's, predicted (calibration: measured) */
    double saved_j;                     /* predicted_governor_energy_j - energy_j */
    double saved_ci_j[2];               /* its 90% interval */
    double time_s, predicted_governor_time_s;
    /* Energy per valid token against the predicted governor on the same tokens, in percent
     * (positive: less energy), and its 90% interval. */
    double saving_pct, saving_ci_pct[2];
    /* Throughput (valid tokens per second) against the predicted governor, percent. */
    double throughput_change_pct, throughput_ci_pct[2];
    /* 0: cannot be judged (why says so): no update after the calibration yet, or the work does
     * not explain the update time well enough; the figures and the (wide) intervals are still
     * filled where they exist, NaN where not. */
    int judged;
    char why[256];
} eerl_estimate;

#ifdef __cplusplus
}
#endif

#endif

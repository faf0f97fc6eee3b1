/* Owns the trace's estimate fields: the update line's "estimate" object and the closing
 * "estimate" line (estimate_line.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eerl/error.h"
#include "trace/estimate_line.h"

static const char *const kind_names[] = {"none", "calibration", "predicted"};

/* A number, or null where it is not finite. */
static json_t *num(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

json_t *eerl__trace_est_json(const struct eerl__est_upd *u)
{
    json_t *o = json_object();
    int k = u->kind >= EERL__EST_SKIP && u->kind <= EERL__EST_PRED ? u->kind : EERL__EST_SKIP;

    json_object_set_new(o, "kind", json_string(kind_names[k]));
    if (u->late) /* one update late: the record is this update's, not the line's */
        json_object_set_new(o, "update", json_integer((json_int_t)u->update));
    if (k != EERL__EST_PRED)
        return o;
    json_object_set_new(o, "time_s", num(u->pt));
    json_object_set_new(o, "energy_j", num(u->pe));
    json_object_set_new(o, "sd_t", num(u->sd_t));
    json_object_set_new(o, "sd_e", num(u->sd_e));
    json_object_set_new(o, "rho_t", num(u->rho_t));
    json_object_set_new(o, "rho_e", num(u->rho_e));
    json_object_set_new(o, "com_t", num(u->com_t));
    json_object_set_new(o, "com_e", num(u->com_e));
    json_object_set_new(o, "df", json_integer(u->df));
    if (u->out > 0) /* the work outside the fit's token counts (absent: inside) */
        json_object_set_new(o, "out", num(u->out));
    return o;
}

/* Member key of o as a finite number into *ret; -1 when absent or not one. */
static int get(json_t *o, const char *key, double *ret)
{
    json_t *v = json_object_get(o, key);

    if (!json_is_number(v) || !isfinite(json_number_value(v)))
        return -1;
    *ret = json_number_value(v);
    return 0;
}

#define BAD(...)                                                                                   \
    do {                                                                                           \
        snprintf(why, len, __VA_ARGS__);                                                           \
        return EERL_EPARSE;                                                                        \
    } while (0)

static int parse_pred(json_t *x, struct eerl__est_upd *u, char *why, size_t len)
{
    static const char *const keys[] = {"time_s",   "sd_t", "rho_t", "com_t",
                                       "energy_j", "sd_e", "rho_e", "com_e"};
    double *dst[] = {&u->pt, &u->sd_t, &u->rho_t, &u->com_t,
                     &u->pe, &u->sd_e, &u->rho_e, &u->com_e};
    json_t *df = json_object_get(x, "df");
    size_t i;

    for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        if (get(x, keys[i], dst[i]) < 0)
            BAD("\"estimate\".\"%s\" must be a finite number", keys[i]);
    if (!(u->pt > 0 && u->pe > 0) || u->sd_t < 0 || u->sd_e < 0 ||
        !(u->rho_t >= 0 && u->rho_t < 1) || !(u->rho_e >= 0 && u->rho_e < 1) || u->com_t < 0 ||
        u->com_e < 0)
        BAD("\"estimate\" holds a value out of range (times and energies > 0, sd >= 0, "
            "0 <= rho < 1)");
    if (!json_is_integer(df) || json_integer_value(df) < 1)
        BAD("\"estimate\".\"df\" must be a positive integer");
    u->df = (unsigned)json_integer_value(df);
    if (json_object_get(x, "out") && (get(x, "out", &u->out) < 0 || u->out < 0))
        BAD("\"estimate\".\"out\" must be a number >= 0 (how far the work lay outside the "
            "fit's token counts)");
    return 0;
}

/* The measured time and energy the record of o is about into u (NaN: not measured); -1 when
 * the record is one update late and prev is another update's, -2 when its "update" is not an
 * update number. */
static int measured(json_t *o, json_t *x, const struct eerl__trace_est_prev *prev,
                    struct eerl__est_upd *u)
{
    json_t *up = json_object_get(x, "update");

    u->t = u->e = NAN;
    if (!up) {
        json_t *n = json_object_get(o, "update");

        u->update = json_is_integer(n) ? (unsigned long long)json_integer_value(n) : 0;
        if (get(o, "time_s", &u->t) < 0 || get(o, "energy_j", &u->e) < 0)
            u->t = u->e = NAN;
        return 0;
    }
    if (!json_is_integer(up) || json_integer_value(up) < 0)
        return -2;
    u->late = 1;
    u->update = (unsigned long long)json_integer_value(up);
    if (!prev || !prev->have || prev->update != u->update)
        return -1;
    u->t = prev->t;
    u->e = prev->e;
    return 0;
}

int eerl__trace_est_parse(json_t *o, const struct eerl__trace_est_prev *prev,
                          struct eerl__est_upd *ret, char *why, size_t len)
{
    json_t *x = json_object_get(o, "estimate"), *k;
    struct eerl__est_upd u;
    const char *s;
    int where;

    if (!x)
        return 1;
    memset(&u, 0, sizeof(u));
    k = json_object_get(x, "kind");
    if (!json_is_object(x) || !json_is_string(k))
        BAD("\"estimate\" must be an object with a \"kind\"");
    s = json_string_value(k);
    where = measured(o, x, prev, &u);
    if (where == -2)
        BAD("\"estimate\".\"update\" must be an update number");
    if (where < 0 && strcmp(s, "none"))
        BAD("\"estimate\" is update %llu's, one update late, and the update line before it is "
            "%s",
            u.update, prev && prev->have ? "another's" : "missing");
    if (!isfinite(u.t) || !isfinite(u.e))
        u.kind = EERL__EST_SKIP; /* a refused observation: not counted */
    else if (!strcmp(s, "calibration"))
        u.kind = EERL__EST_CALIB;
    else if (!strcmp(s, "predicted"))
        u.kind = EERL__EST_PRED;
    else if (strcmp(s, "none"))
        BAD("\"estimate\".\"kind\" is \"%s\"; expected none, calibration or predicted", s);
    if (u.kind == EERL__EST_CALIB) {
        u.pt = u.t;
        u.pe = u.e;
    } else if (u.kind == EERL__EST_PRED && parse_pred(x, &u, why, len) < 0) {
        return EERL_EPARSE;
    }
    *ret = u;
    return 0;
}

static json_t *pair(const double v[2])
{
    json_t *a = json_array();

    json_array_append_new(a, num(v[0]));
    json_array_append_new(a, num(v[1]));
    return a;
}

json_t *eerl_trace_estimate_json(const eerl_estimate *est)
{
    json_t *o = json_object();

    json_object_set_new(o, "judged", json_boolean(est->judged));
    if (!est->judged)
        json_object_set_new(o, "why", json_string(est->why));
    json_object_set_new(o, "saving_pct", num(est->saving_pct));
    json_object_set_new(o, "saving_ci_pct", pair(est->saving_ci_pct));
    json_object_set_new(o, "throughput_change_pct", num(est->throughput_change_pct));
    json_object_set_new(o, "throughput_ci_pct", pair(est->throughput_ci_pct));
    json_object_set_new(o, "energy_j", num(est->energy_j));
    json_object_set_new(o, "energy_kwh", num(est->energy_j / 3.6e6));
    json_object_set_new(o, "predicted_governor_energy_j", num(est->predicted_governor_energy_j));
    json_object_set_new(o, "saved_j", num(est->saved_j));
    json_object_set_new(o, "saved_kwh", num(est->saved_j / 3.6e6));
    json_object_set_new(o, "saved_ci_j", pair(est->saved_ci_j));
    json_object_set_new(o, "time_s", num(est->time_s));
    json_object_set_new(o, "predicted_governor_time_s", num(est->predicted_governor_time_s));
    json_object_set_new(o, "updates", json_integer(est->updates));
    json_object_set_new(o, "judged_updates", json_integer(est->judged_updates));
    json_object_set_new(o, "calibration_updates", json_integer(est->calibration_updates));
    json_object_set_new(o, "not_counted", json_integer(est->not_counted));
    return o;
}

int eerl__trace_est_summary_line(const eerl_estimate *est, unsigned long long update,
                                 char **ret_line)
{
    json_t *o = json_object(), *s = eerl_trace_estimate_json(est);
    char *line;

    json_object_set_new(o, "type", json_string("estimate"));
    json_object_set_new(o, "update", json_integer((json_int_t)update));
    json_object_update(o, s);
    json_decref(s);
    line = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(17));
    json_decref(o);
    if (!line)
        return EERL_ENOMEM;
    *ret_line = line;
    return 0;
}

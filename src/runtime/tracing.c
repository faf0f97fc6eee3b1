/* The runtime session's trace file (see tracing.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "eerl/error.h"
#include "eerl/meter.h"
#include "runtime/tracing.h"
#include "trace/estimate_line.h"
#include "trace/trace.h"

int eerl__tracing_append(struct eerl__tracing *t, const char *line)
{
    return eerl__trace_append(t->f, line, &t->end);
}

/* One JSON line onto the trace, whole or not at all (eerl__trace_append). */
static int append_json(struct eerl__tracing *t, const json_t *o)
{
    char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(17));
    int e = s ? eerl__trace_append(t->f, s, &t->end) : EERL_ENOMEM, err = errno;

    free(s);
    errno = err;
    return e;
}

/* The trace's "run" line: how the session was set up, plus the caller's metadata. */
static int write_run_line(struct eerl__tracing *t, const struct eerl__tracing_run *run, char *why,
                          size_t len)
{
    json_t *o = json_object(), *pools = json_object(), *a;
    size_t p, i;
    int e = 0;

    json_object_set_new(o, "type", json_string("run"));
    json_object_set_new(o, "mode", json_string(eerl_mode_name(run->mode)));
    json_object_set_new(o, "observe_only", json_boolean(run->observe_only));
    json_object_set_new(o, "allowed_loss", json_real(run->allowed_loss));
    json_object_set_new(o, "device", json_string(run->device));
    for (p = 0; p < 2; p++) {
        a = json_array();
        for (i = 0; i < run->n_pool[p]; i++)
            json_array_append_new(a, json_integer(run->pool_gpus[p][i]));
        json_object_set_new(pools, p ? "training" : "generation", a);
    }
    json_object_set_new(o, "pools", pools);
    if (run->run_json) {
        json_error_t je;
        json_t *extra = json_loads(run->run_json, 0, &je);
        if (!json_is_object(extra)) {
            snprintf(why, len, "trace run metadata is not a JSON object: %s",
                     extra ? "not an object" : je.text);
            json_decref(extra);
            json_decref(o);
            return EERL_EINVAL;
        }
        json_object_update(o, extra);
        json_decref(extra);
    }
    e = append_json(t, o);
    json_decref(o);
    return e;
}

static int write_resume_line(struct eerl__tracing *t, const struct eerl__tracing_resume *res)
{
    char *line = NULL;
    int e = eerl__trace_resume_line(res->from, res->tag, res->resumed, res->detail, res->state,
                                    res->state_len, &line);

    if (e < 0)
        return e;
    e = eerl__trace_append(t->f, line, &t->end);
    free(line);
    return e;
}

void eerl__tracing_drop(struct eerl__tracing *t)
{
    if (!t->created) /* an earlier session's trace: back to its own lines */
        (void)ftruncate(fileno(t->f), (off_t)t->kept);
    fclose(t->f);
    t->f = NULL;
    if (t->created)
        remove(t->file);
}

int eerl__tracing_start(struct eerl__tracing *t, const char *path, const eerl_ctl *ctl,
                        const char *producer, const struct eerl__tracing_run *run,
                        const struct eerl__tracing_resume *res, char *why, size_t why_len)
{
    char *line = NULL;
    int e;

    /* A resumed session continues its job's trace; any other never writes over one. */
    e = eerl__trace_open(path, res != NULL, &t->f, &t->created, &t->end, why, why_len);
    if (e < 0)
        return e;
    t->kept = t->end;
    snprintf(t->file, sizeof(t->file), "%s", path);
    e = eerl__trace_header_line(ctl, producer, t->end > 0, &line);
    if (e == 0)
        e = eerl__trace_append(t->f, line, &t->end);
    free(line);
    if (e == 0)
        e = write_run_line(t, run, why, why_len);
    if (e == 0 && res)
        e = write_resume_line(t, res);
    if (e < 0) {
        if (!why[0])
            snprintf(why, why_len, "cannot write trace '%s': %s", path, strerror(errno));
        eerl__tracing_drop(t);
    }
    return e;
}

/* Across nodes: each node's energy and, for a node that has any, its meter flags. */
static void node_records(const struct eerl__tracing_record *rec, json_t *x)
{
    json_t *ne = json_object(), *nf = json_object();
    char key[16], buf[128];
    unsigned i;

    for (i = 0; i < rec->n_nodes; i++) {
        snprintf(key, sizeof(key), "%u", i);
        json_object_set_new(ne, key, json_real(rec->node_energy_j[i]));
        if (rec->node_flags[i]) {
            eerl_meter_flags_str(rec->node_flags[i], buf, sizeof(buf));
            json_object_set_new(nf, key, json_string(buf));
        }
    }
    json_object_set(x, "node_energy_j", ne);
    json_object_set(x, "node_meter_flags", nf);
    json_decref(ne);
    json_decref(nf);
}

/* What the GPUs decided about their own speed: each phase's share of time at the power cap, and
 * why the controller was not shown the update, if it was not. */
static void state_records(const struct eerl__tracing_record *rec, json_t *x)
{
    json_t *cs = json_object();
    unsigned ph;

    for (ph = 0; rec->phase_capped && ph < EERL_PHASE_COUNT; ph++)
        if (rec->phase_capped[ph] >= 0)
            json_object_set_new(cs, eerl__trace_phase_key(ph), json_real(rec->phase_capped[ph]));
    if (json_object_size(cs))
        json_object_set_new(x, "capped_share", cs);
    else
        json_decref(cs);
    if (rec->excluded)
        json_object_set_new(x, "excluded", json_string(rec->excluded));
}

int eerl__tracing_update(struct eerl__tracing *t, const eerl_obs *o, const eerl_setting *req,
                         const eerl_event *ev, size_t n_ev, const struct eerl__tracing_record *rec)
{
    char *line = NULL, fl[128];
    json_t *j, *x, *pb;
    int e, err;

    e = eerl__trace_update_line(o, req, ev, n_ev, &line);
    if (e < 0)
        return e;
    j = json_loads(line, 0, NULL);
    free(line);
    if (!j)
        return EERL_EPARSE;
    x = json_object();
    json_object_set_new(x, "t_start", json_real(rec->t_start));
    json_object_set_new(x, "t_end", json_real(rec->t_end));
    pb = json_object();
    json_object_set_new(pb, "generation", json_real(rec->busy[0]));
    if (!rec->colocated)
        json_object_set_new(pb, "training", json_real(rec->busy[1]));
    json_object_set_new(x, "pool_busy_s", pb);
    eerl_meter_flags_str(rec->meter_flags, fl, sizeof(fl));
    json_object_set_new(x, "meter_flags", json_string(fl));
    state_records(rec, x);
    json_object_set_new(j, "runtime", x);
    if (rec->n_nodes)
        node_records(rec, x);
    if (rec->est)
        json_object_set_new(j, "estimate", eerl__trace_est_json(rec->est));
    e = append_json(t, j);
    err = errno;
    json_decref(j);
    errno = err;
    return e;
}

int eerl__tracing_close(struct eerl__tracing *t)
{
    int r = 0;

    if (t->f && fclose(t->f) != 0)
        r = -1;
    t->f = NULL;
    return r;
}

void eerl__tracing_forget(struct eerl__tracing *t)
{
    if (t->f) {
        close(fileno(t->f)); /* the FILE (and its buffer) stays unflushed, unfreed */
        t->f = NULL;
    }
}

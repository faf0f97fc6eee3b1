/* eerld's request handlers (see handlers.h). They run on the event loop's thread and keep the
 * lease table's rules (leases.c): the journal names a GPU before its clock first changes. A
 * well-formed request that is refused (busy, policy, range) gets an error and the connection
 * stays; a malformed one (bad JSON, unknown op or key, wrong type, out-of-range value, no hello
 * first) gets an error and its connection is closed. Identity is what the kernel said at accept
 * time (c->who); nothing a client says about itself is trusted. Device reads (read, status) are
 * deferred to the reader. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "eerl/agent.h"
#include "eerl/error.h"
#include "eerl/version.h"

#include "handlers.h"
#include "log.h"

static json_t *reply_new(const struct eerl_agent_req *r)
{
    json_t *o = json_object();

    if (r && r->has_id)
        json_object_set_new(o, "id", json_integer((json_int_t)r->id));
    json_object_set_new(o, "ok", json_true());
    return o;
}

static json_t *reply_error_v(int has_id, uint64_t id, int err, const char *fmt, va_list ap)
{
    char msg[1024];
    json_t *o = json_object();

    vsnprintf(msg, sizeof(msg), fmt, ap);
    if (has_id)
        json_object_set_new(o, "id", json_integer((json_int_t)id));
    json_object_set_new(o, "ok", json_false());
    json_object_set_new(o, "error", json_string(eerl_err_name(err)));
    json_object_set_new(o, "message", json_string(msg));
    return o;
}

json_t *eerld_reply_error(int has_id, uint64_t id, int err, const char *fmt, ...)
{
    va_list ap;
    json_t *o;

    va_start(ap, fmt);
    o = reply_error_v(has_id, id, err, fmt, ap);
    va_end(ap);
    return o;
}

/* Sends an error reply to c. */
static void __attribute__((format(printf, 5, 6)))
reply_err_id(struct eerld_client *c, int has_id, uint64_t id, int err, const char *fmt, ...)
{
    va_list ap;
    json_t *o;

    va_start(ap, fmt);
    o = reply_error_v(has_id, id, err, fmt, ap);
    va_end(ap);
    c->ops->send(c, o);
    json_decref(o);
}

/* A refusal keeps the connection; the message is built by the caller. */
static void reply_refuse(struct eerld_client *c, const struct eerl_agent_req *r, int err,
                         const char *msg)
{
    reply_err_id(c, r->has_id, r->id, err, "%s", msg);
}

static int is_root(const struct eerld_client *c)
{
    return c->who.uid == 0;
}

static void holder_text(const struct eerld_gpu *g, unsigned i, char *buf, size_t len)
{
    snprintf(buf, len, "GPU %u is leased by uid %u pid %u%s%s%s", i, g->holder_uid, g->holder_pid,
             g->holder && g->holder->client[0] ? " ('" : "",
             g->holder && g->holder->client[0] ? g->holder->client : "",
             g->holder && g->holder->client[0] ? "')" : "");
}

/* Checks every GPU of r exists (and, if own, is held by c). 0, or a refusal already sent. */
static int check_gpus(struct eerld_leases *t, struct eerld_client *c,
                      const struct eerl_agent_req *r, const unsigned *gpus, size_t n, int own)
{
    char msg[512];
    size_t k;

    for (k = 0; k < n; k++) {
        unsigned i = gpus[k];

        if (i >= t->n) {
            snprintf(msg, sizeof(msg), "GPU %u does not exist (%u GPUs: 0-%u)", i, t->n, t->n - 1);
            reply_refuse(c, r, EERL_ENODEV, msg);
            return -1;
        }
        if (own && t->g[i].holder != &c->who) {
            if (t->g[i].holder) {
                holder_text(&t->g[i], i, msg, sizeof(msg));
                reply_refuse(c, r, EERL_EBUSY, msg);
            } else {
                snprintf(msg, sizeof(msg),
                         "GPU %u is not leased by this connection; lease it first", i);
                reply_refuse(c, r, EERL_ESTATE, msg);
            }
            return -1;
        }
    }
    return 0;
}

/* Checks mhz (a requested upper or lower bound, not 0) against gpu's policy and clock table. */
static int check_clock(struct eerld_leases *t, struct eerld_client *c, unsigned i, unsigned mhz,
                       char *msg, size_t len)
{
    unsigned floor_mhz = 0, ceiling_mhz = 0, snapped;
    int e;

    if (!is_root(c)) {
        eerld_policy_bounds(&t->policy, i, &floor_mhz, &ceiling_mhz);
        if (floor_mhz && mhz < floor_mhz) {
            snprintf(msg, len, "requested %u MHz is below GPU %u's floor of %u MHz (policy %s)",
                     mhz, i, floor_mhz, t->policy_path);
            return EERL_ERANGE;
        }
        if (ceiling_mhz && mhz > ceiling_mhz) {
            snprintf(msg, len, "requested %u MHz is above GPU %u's ceiling of %u MHz (policy %s)",
                     mhz, i, ceiling_mhz, t->policy_path);
            return EERL_ERANGE;
        }
    }
    e = eerl_actuator_snap(t->g[i].act, i, mhz, &snapped);
    if (e < 0) {
        snprintf(msg, len, "%s", eerl_actuator_last_error(t->g[i].act));
        return e;
    }
    /* Snapping goes down: a floor between two supported clocks must not be undercut. */
    if (!is_root(c) && floor_mhz && snapped < floor_mhz) {
        snprintf(msg, len,
                 "requested %u MHz snaps down to GPU %u's supported %u MHz, below its floor of "
                 "%u MHz (policy %s)",
                 mhz, i, snapped, floor_mhz, t->policy_path);
        return EERL_ERANGE;
    }
    return 0;
}

/* Applies [lo, hi] (0, 0: governor) to each GPU; every GPU is tried; failures are listed in
 * the reply. The GPUs are already checked. */
static void apply_clocks(struct eerld_leases *t, struct eerld_client *c,
                         const struct eerl_agent_req *r, const unsigned *gpus, size_t n,
                         unsigned lo, unsigned hi)
{
    char msg[1024] = "";
    json_t *failed = NULL;
    size_t k, off = 0;
    int first = 0;

    if (hi && eerld_leases_journal_add(t, &c->who, gpus, n) < 0) {
        reply_refuse(c, r, EERL_EIO, "cannot write the journal; no clock was changed");
        return;
    }
    for (k = 0; k < n; k++) {
        unsigned i = gpus[k];
        int e;

        if (hi == 0) {
            e = eerl_actuator_restore(t->g[i].act);
        } else {
            e = eerl_actuator_set_range(t->g[i].act, i, lo, hi);
        }
        if (e < 0) {
            const char *d = eerl_actuator_last_error(t->g[i].act);

            if (!d[0])
                d = eerl_device_last_error(t->dev);
            if (!first)
                first = e;
            if (!failed)
                failed = json_array();
            json_array_append_new(failed, json_integer(i));
            if (off < sizeof(msg))
                off += (size_t)snprintf(msg + off, sizeof(msg) - off, "%sGPU %u: %s (%s)",
                                        off ? "; " : "", i, eerl_strerror(e), d);
            eerld_log(LOG_WARNING, "GPU %u: setting %u-%u MHz for uid %u pid %u failed: %s (%s)", i,
                      lo, hi, (unsigned)c->who.uid, (unsigned)c->who.pid, eerl_strerror(e), d);
        }
    }
    if (first) {
        json_t *o = json_object();

        if (r->has_id)
            json_object_set_new(o, "id", json_integer((json_int_t)r->id));
        json_object_set_new(o, "ok", json_false());
        json_object_set_new(o, "error", json_string(eerl_err_name(first)));
        json_object_set_new(o, "message", json_string(msg));
        json_object_set_new(o, "failed", failed);
        c->ops->send(c, o);
        json_decref(o);
        return;
    }
    json_t *o = reply_new(r);
    c->ops->send(c, o);
    json_decref(o);
}

/* The GPUs a read-only request names: its list, or every GPU (all of them, however many). */
static size_t req_gpus(struct eerld_leases *t, const struct eerl_agent_req *r,
                       unsigned list[EERL_AGENT_GPU_INDEX_MAX + 1])
{
    size_t k, n = r->has_gpus ? r->n_gpus : t->n;

    for (k = 0; k < n; k++)
        list[k] = r->has_gpus ? r->gpus[k] : (unsigned)k;
    return n;
}

/* ---- handlers ---- */

static void h_hello(struct eerld_leases *t, unsigned heartbeat_ms, struct eerld_client *c,
                    struct eerl_agent_req *r)
{
    json_t *o = reply_new(r);
    char ver[64];

    snprintf(ver, sizeof(ver), "eerld %s", eerl_version_string());
    json_object_set_new(o, "v", json_integer(EERL_AGENT_PROTOCOL_VERSION));
    json_object_set_new(o, "server", json_string(ver));
    json_object_set_new(o, "gpus", json_integer(t->n));
    json_object_set_new(o, "heartbeat_ms", json_integer(heartbeat_ms));
    json_object_set_new(o, "uid", json_integer((json_int_t)c->who.uid));
    json_object_set_new(o, "pid", json_integer((json_int_t)c->who.pid));
    json_object_set_new(o, "may_lease",
                        json_boolean(eerld_policy_may_lease(&t->policy, c->who.uid, c->who.gid,
                                                            c->who.groups, c->who.n_groups)));
    c->ops->send(c, o);
    json_decref(o);
    c->hello = 1;
    snprintf(c->who.client, sizeof(c->who.client), "%s", r->client);
}

static void h_devices(struct eerld_leases *t, struct eerld_client *c, struct eerl_agent_req *r)
{
    json_t *o = reply_new(r), *arr = json_array();
    unsigned i;
    size_t k;

    for (i = 0; i < t->n; i++) {
        json_t *cl = json_array();
        unsigned f, ce;

        for (k = 0; k < t->g[i].n_clocks; k++)
            json_array_append_new(cl, json_integer(t->g[i].clocks[k]));
        eerld_policy_bounds(&t->policy, i, &f, &ce);
        json_array_append_new(arr,
                              json_pack("{s:i,s:s,s:s,s:o,s:i,s:i}", "gpu", (json_int_t)i, "uuid",
                                        t->g[i].uuid, "name", t->g[i].name, "clocks", cl,
                                        "floor_mhz", (json_int_t)f, "ceiling_mhz", (json_int_t)ce));
    }
    json_object_set_new(o, "gpus", arr);
    c->ops->send(c, o);
    json_decref(o);
}

static void h_read(struct eerld_leases *t, struct eerld_client *c, struct eerl_agent_req *r)
{
    unsigned list[EERL_AGENT_GPU_INDEX_MAX + 1];
    size_t n = req_gpus(t, r, list);
    json_t *o, *arr;
    struct eerld_job *j;

    if (check_gpus(t, c, r, list, n, 0) < 0)
        return;
    j = eerld_job_new(list, n);
    if (!j) {
        reply_refuse(c, r, EERL_ENOMEM, "out of memory");
        return;
    }
    o = reply_new(r);
    arr = json_array();
    json_object_set_new(o, "readings", arr);
    j->reply = o;
    c->ops->defer(c, j);
}

static void h_status(struct eerld_leases *t, struct eerld_client *c, struct eerl_agent_req *r)
{
    unsigned list[EERL_AGENT_GPU_INDEX_MAX + 1];
    size_t n = req_gpus(t, r, list);
    json_t *o, *arr;
    struct eerld_job *j;
    size_t k;

    if (check_gpus(t, c, r, list, n, 0) < 0)
        return;
    j = eerld_job_new(list, n);
    if (!j) {
        reply_refuse(c, r, EERL_ENOMEM, "out of memory");
        return;
    }
    o = reply_new(r);
    arr = json_array();
    for (k = 0; k < n; k++) {
        unsigned i = list[k], f, ce;
        struct eerld_gpu *g = &t->g[i];
        json_t *x = json_pack("{s:i}", "gpu", (json_int_t)i); /* readings: fill_job */
        eerl_actuator_gpu_state st;

        json_object_set_new(x, "uuid", json_string(g->uuid));
        json_object_set_new(x, "name", json_string(g->name));
        eerld_policy_bounds(&t->policy, i, &f, &ce);
        json_object_set_new(x, "floor_mhz", json_integer(f));
        json_object_set_new(x, "ceiling_mhz", json_integer(ce));
        if (g->n_clocks) {
            json_object_set_new(x, "min_mhz", json_integer(g->clocks[g->n_clocks - 1]));
            json_object_set_new(x, "max_mhz", json_integer(g->clocks[0]));
        }
        memset(&st, 0, sizeof(st));
        eerl_actuator_gpu(g->act, i, &st);
        if (st.locked_max_mhz)
            json_object_set_new(
                x, "locked",
                json_pack("[i,i]", (json_int_t)st.locked_min_mhz, (json_int_t)st.locked_max_mhz));
        else
            json_object_set_new(x, "locked", json_null());
        if (g->holder)
            json_object_set_new(x, "holder",
                                json_pack("{s:i,s:i,s:s}", "uid", (json_int_t)g->holder_uid, "pid",
                                          (json_int_t)g->holder_pid, "client", g->holder->client));
        else
            json_object_set_new(x, "holder", json_null());
        if (g->dirty)
            json_object_set_new(x, "reset_pending", json_true());
        json_array_append_new(arr, x);
    }
    json_object_set_new(o, "gpus", arr);
    j->reply = o;
    j->items = arr;
    c->ops->defer(c, j);
}

static void h_lease(struct eerld_leases *t, struct eerld_client *c, struct eerl_agent_req *r)
{
    char msg[512];
    size_t k;
    json_t *o;

    if (!eerld_policy_may_lease(&t->policy, c->who.uid, c->who.gid, c->who.groups,
                                c->who.n_groups)) {
        snprintf(msg, sizeof(msg),
                 "uid %u may not lease GPUs: not root and not in [access] users or groups of the "
                 "policy %s%s",
                 (unsigned)c->who.uid, t->policy_path,
                 t->have_policy_file ? "" : " (no policy file: only root may lease)");
        reply_refuse(c, r, EERL_ENOPERM, msg);
        return;
    }
    if (check_gpus(t, c, r, r->gpus, r->n_gpus, 0) < 0)
        return;
    for (k = 0; k < r->n_gpus; k++) {
        struct eerld_gpu *g = &t->g[r->gpus[k]];

        if (g->holder && g->holder != &c->who) {
            holder_text(g, r->gpus[k], msg, sizeof(msg));
            reply_refuse(c, r, EERL_EBUSY, msg);
            return;
        }
    }
    eerld_leases_grant(t, &c->who, r->gpus, r->n_gpus);
    o = reply_new(r);
    c->ops->send(c, o);
    json_decref(o);
}

static void h_set(struct eerld_leases *t, struct eerld_client *c, struct eerl_agent_req *r)
{
    char msg[512];
    size_t k;
    int e;

    if (check_gpus(t, c, r, r->gpus, r->n_gpus, 1) < 0)
        return;
    if (r->max_mhz) {
        for (k = 0; k < r->n_gpus; k++) {
            if ((e = check_clock(t, c, r->gpus[k], r->min_mhz, msg, sizeof(msg))) < 0 ||
                (e = check_clock(t, c, r->gpus[k], r->max_mhz, msg, sizeof(msg))) < 0) {
                reply_refuse(c, r, e, msg);
                return;
            }
        }
    }
    apply_clocks(t, c, r, r->gpus, r->n_gpus, r->min_mhz, r->max_mhz);
}

static void h_pool(struct eerld_leases *t, struct eerld_client *c, struct eerl_agent_req *r)
{
    char msg[512];
    struct eerld_pool *p = NULL;
    size_t k;
    int ph, e;
    json_t *o;

    if (check_gpus(t, c, r, r->gpus, r->n_gpus, 1) < 0)
        return;
    for (ph = 0; ph < 3; ph++)
        for (k = 0; r->pool_mhz[ph] && k < r->n_gpus; k++)
            if ((e = check_clock(t, c, r->gpus[k], r->pool_mhz[ph], msg, sizeof(msg))) < 0) {
                char full[600];

                snprintf(full, sizeof(full), "pool '%s', %s clock: %s", r->pool,
                         eerl_agent_phase_name((eerl_agent_phase)ph), msg);
                reply_refuse(c, r, e, full);
                return;
            }
    for (k = 0; k < c->n_pools; k++)
        if (!strcmp(c->pools[k].name, r->pool))
            p = &c->pools[k];
    if (!p) {
        if (c->n_pools == EERLD_POOLS_MAX) {
            snprintf(msg, sizeof(msg), "a connection may define at most %d pools", EERLD_POOLS_MAX);
            reply_refuse(c, r, EERL_EOVERFLOW, msg);
            return;
        }
        p = &c->pools[c->n_pools++];
    }
    snprintf(p->name, sizeof(p->name), "%s", r->pool);
    memcpy(p->gpus, r->gpus, r->n_gpus * sizeof(unsigned));
    p->n = r->n_gpus;
    memcpy(p->mhz, r->pool_mhz, sizeof(p->mhz));
    o = reply_new(r);
    c->ops->send(c, o);
    json_decref(o);
}

static void h_phase(struct eerld_leases *t, struct eerld_client *c, struct eerl_agent_req *r)
{
    char msg[512], full[600];
    size_t k, g;
    unsigned mhz;
    int e;

    for (k = 0; k < c->n_pools; k++)
        if (!strcmp(c->pools[k].name, r->pool))
            break;
    if (k == c->n_pools) {
        snprintf(msg, sizeof(msg), "no pool named '%s' on this connection; define it first",
                 r->pool);
        reply_refuse(c, r, EERL_ENOENT, msg);
        return;
    }
    if (check_gpus(t, c, r, c->pools[k].gpus, c->pools[k].n, 1) < 0)
        return;
    mhz = c->pools[k].mhz[r->phase];
    /* Checked again now: a policy reloaded since the pool was defined applies. */
    for (g = 0; mhz && g < c->pools[k].n; g++)
        if ((e = check_clock(t, c, c->pools[k].gpus[g], mhz, msg, sizeof(msg))) < 0) {
            snprintf(full, sizeof(full), "pool '%s', %s clock: %s", r->pool,
                     eerl_agent_phase_name(r->phase), msg);
            reply_refuse(c, r, e, full);
            return;
        }
    apply_clocks(t, c, r, c->pools[k].gpus, c->pools[k].n, mhz, mhz);
}

static void h_release(struct eerld_leases *t, struct eerld_client *c, struct eerl_agent_req *r)
{
    size_t k;
    int changed = 0;
    json_t *o;

    if (r->has_gpus) {
        if (check_gpus(t, c, r, r->gpus, r->n_gpus, 1) < 0)
            return;
        for (k = 0; k < r->n_gpus; k++)
            changed |= eerld_leases_drop(t, r->gpus[k], "release");
    } else {
        unsigned i;
        for (i = 0; i < t->n; i++)
            if (t->g[i].holder == &c->who)
                changed |= eerld_leases_drop(t, i, "release");
    }
    if (changed)
        eerld_leases_sync(t);
    o = reply_new(r);
    c->ops->send(c, o);
    json_decref(o);
}

static void h_reset(struct eerld_leases *t, struct eerld_client *c, struct eerl_agent_req *r)
{
    char msg[512];
    unsigned list[1024];
    size_t n = 0, k;
    int changed = 0, first = 0;
    json_t *o, *done;

    if (r->has_gpus) {
        if (check_gpus(t, c, r, r->gpus, r->n_gpus, 0) < 0)
            return;
        for (k = 0; k < r->n_gpus; k++)
            list[n++] = r->gpus[k];
    } else {
        unsigned i;
        for (i = 0; i < t->n && n < 1024; i++)
            if (is_root(c) || (t->g[i].holder && t->g[i].holder_uid == (unsigned)c->who.uid))
                list[n++] = i;
    }
    if (!is_root(c))
        for (k = 0; k < n; k++) {
            struct eerld_gpu *g = &t->g[list[k]];

            if (!g->holder || g->holder_uid != (unsigned)c->who.uid) {
                if (g->holder)
                    holder_text(g, list[k], msg, sizeof(msg));
                else
                    snprintf(msg, sizeof(msg), "GPU %u is not leased", list[k]);
                snprintf(msg + strlen(msg), sizeof(msg) - strlen(msg),
                         "; only root or the holder may reset it");
                reply_refuse(c, r, EERL_ENOPERM, msg);
                return;
            }
        }
    done = json_array();
    msg[0] = '\0';
    for (k = 0; k < n; k++) {
        unsigned i = list[k];
        struct eerld_gpu *g = &t->g[i];
        int e;

        if (g->holder && g->holder != &c->who)
            eerld_log(LOG_INFO, "GPU %u: uid %u pid %u reset it, ending the lease of uid %u pid %u",
                      i, (unsigned)c->who.uid, (unsigned)c->who.pid, g->holder_uid, g->holder_pid);
        changed |= eerld_leases_drop(t, i, "reset");
        /* Root's reset also clears a lock eerld did not make (a job that locked in-process). */
        e = g->dirty ? EERL_EIO : is_root(c) ? eerl_device_reset_sm_clocks(t->dev, i) : 0;
        if (e < 0) {
            if (!first)
                first = e;
            snprintf(msg + strlen(msg), sizeof(msg) - strlen(msg), "%sGPU %u: %s (%s)",
                     msg[0] ? "; " : "", i, eerl_strerror(e), eerl_device_last_error(t->dev));
        } else {
            json_array_append_new(done, json_integer(i));
        }
    }
    if (changed)
        eerld_leases_sync(t);
    if (first) {
        json_decref(done);
        reply_refuse(c, r, first, msg);
        return;
    }
    o = reply_new(r);
    json_object_set_new(o, "reset", done);
    c->ops->send(c, o);
    json_decref(o);
}

/* Parses line into r. 0, or 1 with the error already sent: the connection must close (a
 * refused connection, a malformed request, no hello first, an unsupported version). */
static int parse(struct eerld_client *c, const char *line, size_t len, struct eerl_agent_req *r)
{
    char why[256];
    uint64_t id = 0;
    int has_id = 0;

    if (c->refusal) {
        (void)eerl_agent_parse_request(line, len, r, &id, &has_id, why, sizeof(why));
        reply_err_id(c, has_id, id, EERL_EBUSY, "%s", c->refusal);
        return 1;
    }
    if (eerl_agent_parse_request(line, len, r, &id, &has_id, why, sizeof(why)) < 0) {
        reply_err_id(c, has_id, id, EERL_EPARSE, "malformed request: %s; closing the connection",
                     why);
        eerld_log(LOG_WARNING, "uid %u pid %u: malformed request (%s); connection closed",
                  (unsigned)c->who.uid, (unsigned)c->who.pid, why);
        return 1;
    }
    if (!c->hello && r->op != EERL_AGENT_OP_HELLO) {
        reply_err_id(c, has_id, id, EERL_EPARSE,
                     "the first request must be hello; closing the connection");
        return 1;
    }
    if (r->op == EERL_AGENT_OP_HELLO && r->version != EERL_AGENT_PROTOCOL_VERSION) {
        reply_err_id(c, has_id, id, EERL_EVERSION,
                     "protocol version %u is not supported; this eerld speaks version %d",
                     r->version, EERL_AGENT_PROTOCOL_VERSION);
        return 1;
    }
    return 0;
}

int eerld_handle_line(struct eerld_leases *t, unsigned heartbeat_ms, struct eerld_client *c,
                      const char *line, size_t len)
{
    struct eerl_agent_req r;
    json_t *o;

    if (parse(c, line, len, &r))
        return 1;
    switch (r.op) {
    case EERL_AGENT_OP_HELLO:
        h_hello(t, heartbeat_ms, c, &r);
        break;
    case EERL_AGENT_OP_DEVICES:
        h_devices(t, c, &r);
        break;
    case EERL_AGENT_OP_STATUS:
        h_status(t, c, &r);
        break;
    case EERL_AGENT_OP_READ:
        h_read(t, c, &r);
        break;
    case EERL_AGENT_OP_LEASE:
        h_lease(t, c, &r);
        break;
    case EERL_AGENT_OP_SET:
        h_set(t, c, &r);
        break;
    case EERL_AGENT_OP_POOL:
        h_pool(t, c, &r);
        break;
    case EERL_AGENT_OP_PHASE:
        h_phase(t, c, &r);
        break;
    case EERL_AGENT_OP_RELEASE:
        h_release(t, c, &r);
        break;
    case EERL_AGENT_OP_RESET:
        h_reset(t, c, &r);
        break;
    case EERL_AGENT_OP_HEARTBEAT:
    default:
        o = reply_new(&r);
        c->ops->send(c, o);
        json_decref(o);
        break;
    }
    return 0;
}

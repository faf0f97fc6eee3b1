/* Request grammar of the eerld protocol: parse + validate, and encode. Strict on purpose: an
 * unknown key, a wrong type, a number out of range, a duplicate GPU or an over-long list is a
 * malformed request (the daemon answers it with an error and closes the connection), so a
 * client bug shows up at once instead of as a silently ignored field. Owns no state. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "eerl/error.h"
#include "eerl/tools/protocol.h"

static const char *const op_names[EERL_AGENT_OP_COUNT] = {
    "hello", "devices", "status",  "read",      "lease", "set",
    "pool",  "phase",   "release", "heartbeat", "reset",
};

/* Keys each op accepts besides "op" and "id". */
static const char *const op_keys[EERL_AGENT_OP_COUNT][6] = {
    [EERL_AGENT_OP_HELLO] = {"v", "client"},
    [EERL_AGENT_OP_DEVICES] = {NULL},
    [EERL_AGENT_OP_STATUS] = {"gpus"},
    [EERL_AGENT_OP_READ] = {"gpus"},
    [EERL_AGENT_OP_LEASE] = {"gpus"},
    [EERL_AGENT_OP_SET] = {"gpus", "mhz", "min_mhz", "max_mhz"},
    [EERL_AGENT_OP_POOL] = {"pool", "gpus", "gen", "train", "idle"},
    [EERL_AGENT_OP_PHASE] = {"pool", "phase"},
    [EERL_AGENT_OP_RELEASE] = {"gpus"},
    [EERL_AGENT_OP_HEARTBEAT] = {NULL},
    [EERL_AGENT_OP_RESET] = {"gpus"},
};

static const char *const phase_names[3] = {"gen", "train", "idle"};

const char *eerl_agent_op_name(enum eerl_agent_op op)
{
    return (unsigned)op < EERL_AGENT_OP_COUNT ? op_names[op] : "?";
}

const char *eerl_agent_phase_name(eerl_agent_phase phase)
{
    return (unsigned)phase < 3 ? phase_names[phase] : "?";
}

int eerl_agent_err_from_name(const char *name)
{
    if (!name)
        return EERL_EIO;
#define EERL__ERR_FROM(n, value, msg)                                                              \
    if (!strcmp(name, "EERL_" #n))                                                                 \
        return EERL_##n;
    EERL_ERRNO_MAP(EERL__ERR_FROM)
#undef EERL__ERR_FROM
    return EERL_EIO;
}

static int bad(char *why, size_t why_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int bad(char *why, size_t why_len, const char *fmt, ...)
{
    va_list ap;

    if (why && why_len) {
        va_start(ap, fmt);
        vsnprintf(why, why_len, fmt, ap);
        va_end(ap);
    }
    return EERL_EPARSE;
}

/* An integer in [0, max] under key. */
static int get_uint(json_t *o, const char *key, json_int_t max, int required, unsigned long long *v,
                    int *present, char *why, size_t why_len)
{
    json_t *x = json_object_get(o, key);
    json_int_t i;

    *present = x != NULL;
    if (!x) {
        if (required)
            return bad(why, why_len, "missing \"%s\"", key);
        return 0;
    }
    if (!json_is_integer(x))
        return bad(why, why_len, "\"%s\" must be an integer", key);
    i = json_integer_value(x);
    if (i < 0 || i > max)
        return bad(why, why_len, "\"%s\" %lld is out of range (0-%lld)", key, (long long)i,
                   (long long)max);
    *v = (unsigned long long)i;
    return 0;
}

static int get_name(json_t *o, const char *key, size_t max, char *out, char *why, size_t why_len)
{
    json_t *x = json_object_get(o, key);
    const char *s;
    size_t n, i;

    if (!x)
        return bad(why, why_len, "missing \"%s\"", key);
    if (!json_is_string(x))
        return bad(why, why_len, "\"%s\" must be a string", key);
    s = json_string_value(x);
    n = json_string_length(x);
    if (n == 0 || n > max)
        return bad(why, why_len, "\"%s\" must be 1-%zu characters (got %zu)", key, max, n);
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.'))
            return bad(why, why_len, "\"%s\" may hold only letters, digits, '-', '_' and '.'", key);
    }
    memcpy(out, s, n);
    out[n] = '\0';
    return 0;
}

static int get_gpus(json_t *o, struct eerl_agent_req *r, int required, char *why, size_t why_len)
{
    json_t *x = json_object_get(o, "gpus"), *e;
    unsigned char seen[EERL_AGENT_GPU_INDEX_MAX + 1];
    size_t i;

    if (!x) {
        if (required)
            return bad(why, why_len, "missing \"gpus\"");
        return 0;
    }
    if (!json_is_array(x))
        return bad(why, why_len, "\"gpus\" must be an array of GPU indices");
    if (json_array_size(x) == 0 || json_array_size(x) > EERL_AGENT_GPUS_MAX)
        return bad(why, why_len, "\"gpus\" must list 1-%d GPUs (got %zu)", EERL_AGENT_GPUS_MAX,
                   json_array_size(x));
    memset(seen, 0, sizeof(seen));
    json_array_foreach(x, i, e)
    {
        json_int_t g;

        if (!json_is_integer(e))
            return bad(why, why_len, "\"gpus\"[%zu] must be an integer", i);
        g = json_integer_value(e);
        if (g < 0 || g > EERL_AGENT_GPU_INDEX_MAX)
            return bad(why, why_len, "\"gpus\"[%zu] %lld is out of range (0-%d)", i, (long long)g,
                       EERL_AGENT_GPU_INDEX_MAX);
        if (seen[g]) /* linear: a request may name 1024 GPUs */
            return bad(why, why_len, "\"gpus\" names GPU %lld twice", (long long)g);
        seen[g] = 1;
        r->gpus[i] = (unsigned)g;
    }
    r->n_gpus = json_array_size(x);
    r->has_gpus = 1;
    return 0;
}

static int parse_hello(json_t *o, struct eerl_agent_req *r, char *why, size_t why_len)
{
    unsigned long long v = 0;
    int present, e;
    json_t *x;
    size_t n, i;
    const char *s;

    if ((e = get_uint(o, "v", 1000000, 1, &v, &present, why, why_len)) < 0)
        return e;
    r->version = (unsigned)v;
    x = json_object_get(o, "client");
    if (!x)
        return 0;
    if (!json_is_string(x))
        return bad(why, why_len, "\"client\" must be a string");
    n = json_string_length(x);
    s = json_string_value(x);
    if (n > EERL_AGENT_CLIENT_MAX)
        return bad(why, why_len, "\"client\" is longer than %d characters", EERL_AGENT_CLIENT_MAX);
    for (i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return bad(why, why_len, "\"client\" holds a control character");
    memcpy(r->client, s, n);
    r->client[n] = '\0';
    return 0;
}

static int parse_set(json_t *o, struct eerl_agent_req *r, char *why, size_t why_len)
{
    unsigned long long v = 0, a = 0, b = 0;
    int present, pa, pb, e;

    if ((e = get_gpus(o, r, 1, why, why_len)) < 0)
        return e;
    if ((e = get_uint(o, "mhz", EERL_AGENT_MHZ_MAX, 0, &v, &present, why, why_len)) < 0 ||
        (e = get_uint(o, "min_mhz", EERL_AGENT_MHZ_MAX, 0, &a, &pa, why, why_len)) < 0 ||
        (e = get_uint(o, "max_mhz", EERL_AGENT_MHZ_MAX, 0, &b, &pb, why, why_len)) < 0)
        return e;
    if (present && (pa || pb))
        return bad(why, why_len, "give either \"mhz\" or \"min_mhz\" and \"max_mhz\", not both");
    if (present) {
        r->min_mhz = r->max_mhz = (unsigned)v;
        return 0;
    }
    if (!pa || !pb)
        return bad(why, why_len, "\"set\" needs \"mhz\", or both \"min_mhz\" and \"max_mhz\"");
    if (a > b)
        return bad(why, why_len, "\"min_mhz\" %llu is above \"max_mhz\" %llu", a, b);
    if ((a == 0) != (b == 0))
        return bad(why, why_len,
                   "\"min_mhz\" and \"max_mhz\" must both be 0 (governor) or "
                   "both be clocks");
    r->min_mhz = (unsigned)a;
    r->max_mhz = (unsigned)b;
    return 0;
}

static int parse_pool(json_t *o, struct eerl_agent_req *r, char *why, size_t why_len)
{
    static const char *const k[3] = {"gen", "train", "idle"};
    unsigned long long v = 0;
    int present, i, e;

    if ((e = get_name(o, "pool", EERL_AGENT_POOL_NAME_MAX, r->pool, why, why_len)) < 0 ||
        (e = get_gpus(o, r, 1, why, why_len)) < 0)
        return e;
    for (i = 0; i < 3; i++) {
        if ((e = get_uint(o, k[i], EERL_AGENT_MHZ_MAX, 1, &v, &present, why, why_len)) < 0)
            return e;
        r->pool_mhz[i] = (unsigned)v;
    }
    return 0;
}

static int parse_phase(json_t *o, struct eerl_agent_req *r, char *why, size_t why_len)
{
    const char *s;
    json_t *x;
    int i, e;

    if ((e = get_name(o, "pool", EERL_AGENT_POOL_NAME_MAX, r->pool, why, why_len)) < 0)
        return e;
    x = json_object_get(o, "phase");
    if (!x)
        return bad(why, why_len, "missing \"phase\"");
    if (!json_is_string(x))
        return bad(why, why_len, "\"phase\" must be a string: gen, train or idle");
    s = json_string_value(x);
    for (i = 0; i < 3; i++)
        if (!strcmp(s, phase_names[i]))
            break;
    if (i == 3 || strlen(s) != json_string_length(x))
        return bad(why, why_len, "\"phase\" must be gen, train or idle");
    r->phase = (eerl_agent_phase)i;
    return 0;
}

static int parse_fields(json_t *o, struct eerl_agent_req *r, char *why, size_t why_len)
{
    switch (r->op) {
    case EERL_AGENT_OP_HELLO:
        return parse_hello(o, r, why, why_len);
    case EERL_AGENT_OP_DEVICES:
    case EERL_AGENT_OP_HEARTBEAT:
        return 0;
    case EERL_AGENT_OP_STATUS:
    case EERL_AGENT_OP_READ:
    case EERL_AGENT_OP_RELEASE:
    case EERL_AGENT_OP_RESET:
        return get_gpus(o, r, 0, why, why_len);
    case EERL_AGENT_OP_LEASE:
        return get_gpus(o, r, 1, why, why_len);
    case EERL_AGENT_OP_SET:
        return parse_set(o, r, why, why_len);
    case EERL_AGENT_OP_POOL:
        return parse_pool(o, r, why, why_len);
    case EERL_AGENT_OP_PHASE:
        return parse_phase(o, r, why, why_len);
    default:
        return bad(why, why_len, "unknown op");
    }
}

int eerl_agent_parse_request(const char *buf, size_t len, struct eerl_agent_req *ret,
                             uint64_t *ret_id, int *ret_has_id, char *why, size_t why_len)
{
    struct eerl_agent_req r;
    json_error_t jerr;
    json_t *o = NULL, *x;
    const char *key, *opname;
    size_t i;
    int e = EERL_EPARSE, op;
    unsigned long long id = 0;
    int has_id = 0;

    if (!buf || !ret)
        return EERL_EINVAL;
    if (len + 1 > EERL_AGENT_MSG_MAX)
        return bad(why, why_len, "message of %zu bytes is longer than the limit of %d", len + 1,
                   EERL_AGENT_MSG_MAX);
    /* JSON_REJECT_DUPLICATES: {"gpus":[0],"gpus":[1]} would otherwise mean its last one. */
    o = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!o) {
        bad(why, why_len, "not JSON: %s at byte %d", jerr.text, jerr.position);
        goto fail;
    }
    if (!json_is_object(o)) {
        bad(why, why_len, "a request must be a JSON object");
        goto fail;
    }
    memset(&r, 0, sizeof(r));
    if ((e = get_uint(o, "id", (json_int_t)1 << 53, 0, &id, &has_id, why, why_len)) < 0)
        goto fail;
    if (has_id) {
        if (ret_id)
            *ret_id = id;
        if (ret_has_id)
            *ret_has_id = 1;
        r.has_id = 1;
        r.id = id;
    }
    e = EERL_EPARSE;
    x = json_object_get(o, "op");
    if (!x) {
        bad(why, why_len, "missing \"op\"");
        goto fail;
    }
    if (!json_is_string(x)) {
        bad(why, why_len, "\"op\" must be a string");
        goto fail;
    }
    opname = json_string_value(x);
    for (op = 0; op < EERL_AGENT_OP_COUNT; op++)
        if (!strcmp(opname, op_names[op]))
            break;
    if (op == EERL_AGENT_OP_COUNT || strlen(opname) != json_string_length(x)) {
        char shown[40];

        snprintf(shown, sizeof(shown), "%s", opname);
        bad(why, why_len, "unknown op \"%s\"", shown);
        goto fail;
    }
    r.op = (enum eerl_agent_op)op;
    json_object_foreach(o, key, x)
    {
        int ok = !strcmp(key, "op") || !strcmp(key, "id");

        for (i = 0; !ok && i < 6 && op_keys[op][i]; i++)
            ok = !strcmp(key, op_keys[op][i]);
        if (!ok) {
            char shown[40];

            snprintf(shown, sizeof(shown), "%s", key);
            bad(why, why_len, "unknown key \"%s\" in \"%s\"", shown, op_names[op]);
            goto fail;
        }
    }
    if ((e = parse_fields(o, &r, why, why_len)) < 0)
        goto fail;
    json_decref(o);
    *ret = r;
    return 0;
fail:
    json_decref(o);
    return e < 0 ? e : EERL_EPARSE;
}

static json_t *gpu_array(const struct eerl_agent_req *r)
{
    json_t *a = json_array();
    size_t i;

    for (i = 0; a && i < r->n_gpus; i++)
        json_array_append_new(a, json_integer(r->gpus[i]));
    return a;
}

int eerl_agent_encode_request(const struct eerl_agent_req *r, char *buf, size_t cap,
                              size_t *ret_len)
{
    json_t *o;
    size_t n;
    int e = EERL_ENOMEM;

    if (!r || !buf || (unsigned)r->op >= EERL_AGENT_OP_COUNT || r->n_gpus > EERL_AGENT_GPUS_MAX)
        return EERL_EINVAL;
    o = json_object();
    if (!o)
        return EERL_ENOMEM;
    json_object_set_new(o, "op", json_string(op_names[r->op]));
    if (r->has_id)
        json_object_set_new(o, "id", json_integer((json_int_t)r->id));
    switch (r->op) {
    case EERL_AGENT_OP_HELLO:
        json_object_set_new(o, "v", json_integer(r->version));
        if (r->client[0])
            json_object_set_new(o, "client", json_string(r->client));
        break;
    case EERL_AGENT_OP_SET:
        json_object_set_new(o, "gpus", gpu_array(r));
        if (r->min_mhz == r->max_mhz) {
            json_object_set_new(o, "mhz", json_integer(r->max_mhz));
        } else {
            json_object_set_new(o, "min_mhz", json_integer(r->min_mhz));
            json_object_set_new(o, "max_mhz", json_integer(r->max_mhz));
        }
        break;
    case EERL_AGENT_OP_POOL:
        json_object_set_new(o, "pool", json_string(r->pool));
        json_object_set_new(o, "gpus", gpu_array(r));
        json_object_set_new(o, "gen", json_integer(r->pool_mhz[0]));
        json_object_set_new(o, "train", json_integer(r->pool_mhz[1]));
        json_object_set_new(o, "idle", json_integer(r->pool_mhz[2]));
        break;
    case EERL_AGENT_OP_PHASE:
        json_object_set_new(o, "pool", json_string(r->pool));
        json_object_set_new(o, "phase", json_string(eerl_agent_phase_name(r->phase)));
        break;
    default:
        if (r->has_gpus || r->op == EERL_AGENT_OP_LEASE)
            json_object_set_new(o, "gpus", gpu_array(r));
        break;
    }
    n = json_dumpb(o, buf, cap, JSON_COMPACT);
    if (n == 0)
        goto fail;
    e = EERL_EOVERFLOW;
    if (n + 1 > cap || n + 1 > EERL_AGENT_MSG_MAX)
        goto fail;
    buf[n] = '\n';
    json_decref(o);
    *ret_len = n + 1;
    return 0;
fail:
    json_decref(o);
    return e;
}

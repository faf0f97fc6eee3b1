/* The eerld request grammar (src/agent/protocol.c): every op parses with its fields, every kind
 * of malformed request is refused with a message naming the key or value, and the encoder's
 * output parses back to the same request. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "eerl/error.h"
#include "eerl/tools/protocol.h"

static int parse(const char *text, struct eerl_agent_req *r, char *why, size_t why_len)
{
    return eerl_agent_parse_request(text, strlen(text), r, NULL, NULL, why, why_len);
}

static void test_valid_ops(void **state)
{
    struct eerl_agent_req r;
    char why[256];

    (void)state;
    assert_int_equal(
        parse("{\"op\":\"hello\",\"v\":1,\"client\":\"verl worker\"}", &r, why, sizeof(why)), 0);
    assert_int_equal(r.op, EERL_AGENT_OP_HELLO);
    assert_int_equal(r.version, 1);
    assert_string_equal(r.client, "verl worker");
    assert_false(r.has_id);

    assert_int_equal(parse("{\"op\":\"lease\",\"id\":7,\"gpus\":[3,0,5]}", &r, why, sizeof(why)),
                     0);
    assert_int_equal(r.op, EERL_AGENT_OP_LEASE);
    assert_true(r.has_id);
    assert_int_equal(r.id, 7);
    assert_int_equal(r.n_gpus, 3);
    assert_int_equal(r.gpus[0], 3);
    assert_int_equal(r.gpus[2], 5);

    assert_int_equal(parse("{\"op\":\"set\",\"gpus\":[1],\"mhz\":1410}", &r, why, sizeof(why)), 0);
    assert_int_equal(r.min_mhz, 1410);
    assert_int_equal(r.max_mhz, 1410);
    assert_int_equal(parse("{\"op\":\"set\",\"gpus\":[1],\"min_mhz\":900,\"max_mhz\":1500}", &r,
                           why, sizeof(why)),
                     0);
    assert_int_equal(r.min_mhz, 900);
    assert_int_equal(r.max_mhz, 1500);
    assert_int_equal(parse("{\"op\":\"set\",\"gpus\":[1],\"mhz\":0}", &r, why, sizeof(why)), 0);
    assert_int_equal(r.max_mhz, 0);

    assert_int_equal(parse("{\"op\":\"pool\",\"pool\":\"gen-0\",\"gpus\":[0,1],\"gen\":1980,"
                           "\"train\":0,\"idle\":345}",
                           &r, why, sizeof(why)),
                     0);
    assert_string_equal(r.pool, "gen-0");
    assert_int_equal(r.pool_mhz[0], 1980);
    assert_int_equal(r.pool_mhz[1], 0);
    assert_int_equal(r.pool_mhz[2], 345);

    assert_int_equal(
        parse("{\"op\":\"phase\",\"pool\":\"gen-0\",\"phase\":\"idle\"}", &r, why, sizeof(why)), 0);
    assert_int_equal(r.phase, EERL_AGENT_PHASE_IDLE);

    assert_int_equal(parse("{\"op\":\"read\"}", &r, why, sizeof(why)), 0);
    assert_false(r.has_gpus);
    assert_int_equal(parse("{\"op\":\"status\",\"gpus\":[2]}", &r, why, sizeof(why)), 0);
    assert_true(r.has_gpus);
    assert_int_equal(parse("{\"op\":\"release\"}", &r, why, sizeof(why)), 0);
    assert_int_equal(parse("{\"op\":\"reset\",\"gpus\":[0]}", &r, why, sizeof(why)), 0);
    assert_int_equal(parse("{\"op\":\"heartbeat\",\"id\":9007199254740992}", &r, why, sizeof(why)),
                     0);
    assert_int_equal(r.id, 9007199254740992ull);
    assert_int_equal(parse("  {\"op\":\"devices\"}  \r", &r, why, sizeof(why)), 0);
}

struct bad_case {
    const char *text;
    const char *why; /* a substring the message must hold */
};

static void test_malformed(void **state)
{
    static const struct bad_case cases[] = {
        {"", "not JSON"},
        {"{\"op\":\"hel", "not JSON"},
        {"[1,2]", "must be a JSON object"},
        {"\"hello\"", "not JSON"},
        {"{}", "missing \"op\""},
        {"{\"op\":5}", "\"op\" must be a string"},
        {"{\"op\":\"explode\"}", "unknown op \"explode\""},
        {"{\"op\":\"hello\"}", "missing \"v\""},
        {"{\"op\":\"hello\",\"v\":\"1\"}", "\"v\" must be an integer"},
        {"{\"op\":\"hello\",\"v\":-1}", "\"v\" -1 is out of range"},
        {"{\"op\":\"hello\",\"v\":1,\"client\":7}", "\"client\" must be a string"},
        {"{\"op\":\"hello\",\"v\":1,\"client\":\"a\\nb\"}", "control character"},
        {"{\"op\":\"heartbeat\",\"gpus\":[0]}", "unknown key \"gpus\" in \"heartbeat\""},
        {"{\"op\":\"lease\"}", "missing \"gpus\""},
        {"{\"op\":\"lease\",\"gpus\":[]}", "must list 1-1024 GPUs"},
        {"{\"op\":\"lease\",\"gpus\":0}", "must be an array"},
        {"{\"op\":\"lease\",\"gpus\":[1.5]}", "\"gpus\"[0] must be an integer"},
        {"{\"op\":\"lease\",\"gpus\":[-1]}", "\"gpus\"[0] -1 is out of range"},
        {"{\"op\":\"lease\",\"gpus\":[1024]}", "\"gpus\"[0] 1024 is out of range (0-1023)"},
        {"{\"op\":\"lease\",\"gpus\":[2,3,2]}", "names GPU 2 twice"},
        {"{\"op\":\"lease\",\"gpus\":[0],\"gpus\":[1]}", "duplicate"},
        {"{\"op\":\"set\",\"gpus\":[0]}", "needs \"mhz\""},
        {"{\"op\":\"set\",\"gpus\":[0],\"mhz\":100001}", "\"mhz\" 100001 is out of range"},
        {"{\"op\":\"set\",\"gpus\":[0],\"mhz\":1400,\"min_mhz\":1}", "not both"},
        {"{\"op\":\"set\",\"gpus\":[0],\"min_mhz\":1500,\"max_mhz\":900}",
         "\"min_mhz\" 1500 is above \"max_mhz\" 900"},
        {"{\"op\":\"set\",\"gpus\":[0],\"min_mhz\":0,\"max_mhz\":900}", "both be 0"},
        {"{\"op\":\"set\",\"gpus\":[0],\"max_mhz\":900}", "both"},
        {"{\"op\":\"pool\",\"pool\":\"p\",\"gpus\":[0],\"gen\":1,\"train\":1}", "missing \"idle\""},
        {"{\"op\":\"pool\",\"pool\":\"a b\",\"gpus\":[0],\"gen\":1,\"train\":1,\"idle\":1}",
         "may hold only"},
        {"{\"op\":\"pool\",\"pool\":\"\",\"gpus\":[0],\"gen\":1,\"train\":1,\"idle\":1}",
         "1-31 characters"},
        {"{\"op\":\"phase\",\"pool\":\"p\",\"phase\":\"dance\"}", "gen, train or idle"},
        {"{\"op\":\"phase\",\"pool\":\"p\",\"phase\":\"gen\\u0000x\"}", "not allowed"},
        {"{\"op\":\"read\",\"id\":-3}", "\"id\" -3 is out of range"},
        {"{\"op\":\"read\",\"id\":9007199254740993}", "out of range"},
        {"{\"op\":\"read\"}{\"op\":\"read\"}", "not JSON"},
    };
    struct eerl_agent_req r, before;
    char why[256];
    size_t i;

    (void)state;
    memset(&before, 0x5a, sizeof(before));
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        r = before;
        why[0] = '\0';
        if (parse(cases[i].text, &r, why, sizeof(why)) != EERL_EPARSE)
            fail_msg("accepted: %s", cases[i].text);
        if (!strstr(why, cases[i].why))
            fail_msg("%s: message '%s' lacks '%s'", cases[i].text, why, cases[i].why);
        assert_memory_equal(&r, &before, sizeof(r)); /* untouched on failure */
    }
}

static void test_limits(void **state)
{
    struct eerl_agent_req r;
    char why[256];
    size_t len = EERL_AGENT_MSG_MAX - 1, base;
    char *big = malloc(EERL_AGENT_MSG_MAX + 8);
    char gpus[8192];
    int i, n = 0;

    (void)state;
    assert_non_null(big);
    /* Exactly at the limit (with its newline): accepted. One byte more: refused. */
    base = (size_t)snprintf(big, EERL_AGENT_MSG_MAX, "{\"op\":\"read\"}");
    memset(big + base, ' ', len - base);
    assert_int_equal(eerl_agent_parse_request(big, len, &r, NULL, NULL, why, sizeof(why)), 0);
    big[len] = ' ';
    assert_int_equal(eerl_agent_parse_request(big, len + 1, &r, NULL, NULL, why, sizeof(why)),
                     EERL_EPARSE);
    assert_non_null(strstr(why, "longer than the limit of 65536"));
    free(big);

    /* 1024 GPUs, every one a daemon may serve, is the most one request may name. */
    n = snprintf(gpus, sizeof(gpus), "{\"op\":\"lease\",\"gpus\":[0");
    for (i = 1; i < 1024; i++)
        n += snprintf(gpus + n, sizeof(gpus) - (size_t)n, ",%d", i);
    snprintf(gpus + n, sizeof(gpus) - (size_t)n, "]}");
    assert_int_equal(parse(gpus, &r, why, sizeof(why)), 0);
    assert_int_equal(r.n_gpus, 1024);
    assert_int_equal(r.gpus[1023], 1023u);
    snprintf(gpus + n, sizeof(gpus) - (size_t)n, ",1023]}");
    assert_int_equal(parse(gpus, &r, why, sizeof(why)), EERL_EPARSE);
    assert_non_null(strstr(why, "1-1024 GPUs (got 1025)"));
    snprintf(gpus + n, sizeof(gpus) - (size_t)n, "]}");
    gpus[strlen("{\"op\":\"lease\",\"gpus\":[")] = '9'; /* [9,1,...]: 9 twice */
    assert_int_equal(parse(gpus, &r, why, sizeof(why)), EERL_EPARSE);
    assert_non_null(strstr(why, "names GPU 9 twice"));
}

static void test_id_on_failure(void **state)
{
    struct eerl_agent_req r;
    char why[256];
    uint64_t id = 0;
    int has = 0;
    const char *t = "{\"op\":\"set\",\"id\":42,\"gpus\":[0]}";

    (void)state;
    assert_int_equal(eerl_agent_parse_request(t, strlen(t), &r, &id, &has, why, sizeof(why)),
                     EERL_EPARSE);
    assert_int_equal(id, 42);
    assert_int_equal(has, 1);
    /* Not NUL-terminated: the parser reads only len bytes. */
    assert_int_equal(
        eerl_agent_parse_request("{\"op\":\"read\"}XXXX", 13, &r, NULL, NULL, why, sizeof(why)), 0);
}

static void test_round_trip(void **state)
{
    static const char *const texts[] = {
        "{\"op\":\"hello\",\"v\":1,\"client\":\"x\"}",
        "{\"op\":\"lease\",\"id\":1,\"gpus\":[4,2]}",
        "{\"op\":\"set\",\"id\":2,\"gpus\":[0],\"min_mhz\":900,\"max_mhz\":1500}",
        "{\"op\":\"set\",\"gpus\":[0,1],\"mhz\":1200}",
        "{\"op\":\"pool\",\"pool\":\"t\",\"gpus\":[7],\"gen\":1,\"train\":2,\"idle\":3}",
        "{\"op\":\"phase\",\"pool\":\"t\",\"phase\":\"train\"}",
        "{\"op\":\"read\",\"gpus\":[1]}",
        "{\"op\":\"release\"}",
        "{\"op\":\"reset\",\"gpus\":[0]}",
    };
    struct eerl_agent_req a, b;
    char why[256], buf[1024];
    size_t i, n;

    (void)state;
    for (i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        memset(&a, 0, sizeof(a));
        memset(&b, 0, sizeof(b));
        assert_int_equal(parse(texts[i], &a, why, sizeof(why)), 0);
        assert_int_equal(eerl_agent_encode_request(&a, buf, sizeof(buf), &n), 0);
        assert_int_equal(buf[n - 1], '\n');
        assert_int_equal(eerl_agent_parse_request(buf, n - 1, &b, NULL, NULL, why, sizeof(why)), 0);
        assert_memory_equal(&a, &b, sizeof(a));
    }
    assert_int_equal(eerl_agent_encode_request(&a, buf, 4, &n), EERL_EOVERFLOW);
}

static void test_error_names(void **state)
{
    (void)state;
    assert_int_equal(eerl_agent_err_from_name("EERL_EBUSY"), EERL_EBUSY);
    assert_int_equal(eerl_agent_err_from_name("EERL_ERANGE"), EERL_ERANGE);
    assert_int_equal(eerl_agent_err_from_name(eerl_err_name(EERL_ENOPERM)), EERL_ENOPERM);
    assert_int_equal(eerl_agent_err_from_name("EERL_NOPE"), EERL_EIO);
    assert_int_equal(eerl_agent_err_from_name(NULL), EERL_EIO);
    assert_string_equal(eerl_agent_op_name(EERL_AGENT_OP_PHASE), "phase");
    assert_string_equal(eerl_agent_phase_name(EERL_AGENT_PHASE_TRAIN), "train");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_ops),  cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_limits),     cmocka_unit_test(test_id_on_failure),
        cmocka_unit_test(test_round_trip), cmocka_unit_test(test_error_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

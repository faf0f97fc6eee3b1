/* Error codes and version: every code has its own message and name; the version macros agree
 * with the loaded library. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "eerl/error.h"
#include "eerl/version.h"

static void test_every_code_has_a_distinct_message(void **state)
{
    static const int codes[] = {
#define X(name, value, msg) EERL_##name,
        EERL_ERRNO_MAP(X)
#undef X
    };
    size_t i, j, n = sizeof(codes) / sizeof(codes[0]);

    (void)state;
    for (i = 0; i < n; i++) {
        assert_true(codes[i] < 0);
        assert_string_not_equal(eerl_strerror(codes[i]), "unknown error");
        assert_true(strncmp(eerl_err_name(codes[i]), "EERL_E", 6) == 0);
        for (j = 0; j < i; j++) {
            assert_int_not_equal(codes[i], codes[j]);
            assert_string_not_equal(eerl_strerror(codes[i]), eerl_strerror(codes[j]));
        }
    }
    assert_string_equal(eerl_strerror(0), "success");
    assert_string_equal(eerl_strerror(-9999), "unknown error");
    assert_string_equal(eerl_err_name(-9999), "EERL_UNKNOWN");
}

static void test_driver_and_permission_messages_tell_what_to_do(void **state)
{
    (void)state;
    assert_non_null(strstr(eerl_strerror(EERL_ENODRIVER), "libnvidia-ml.so.1 not found"));
    assert_non_null(strstr(eerl_strerror(EERL_ENOPERM), "CAP_SYS_ADMIN"));
    assert_non_null(strstr(eerl_strerror(EERL_ENOPERM), "observe-only"));
}

static void test_version_matches_header(void **state)
{
    (void)state;
    assert_int_equal(eerl_version(), EERL_VERSION_HEX);
    assert_string_equal(eerl_version_string(), EERL_VERSION_STRING);
    assert_int_equal(eerl_version() >> 16, EERL_VERSION_MAJOR);
    assert_int_equal(eerl_abi_version(), EERL_ABI_VERSION);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_code_has_a_distinct_message),
        cmocka_unit_test(test_driver_and_permission_messages_tell_what_to_do),
        cmocka_unit_test(test_version_matches_header),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_request_headers.c - the request header names the agent keeps from a configuration
 * (request_headers.h): valid lower-case tokens joined by '\n', anything else left out,
 * at most CMR_MAX_REQUEST_HEADERS, never past the buffer.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "request_headers.h"

static void test_valid_names_joined(void **state)
{
    (void)state;
    char out[CMR_REQUEST_HEADERS_JOINED];
    char *names[] = {"x-request-id", "user-agent", "x_trace.id~1"};
    assert_int_equal(cmr_request_headers_join(out, names, 3), 3);
    assert_string_equal(out, "x-request-id\nuser-agent\nx_trace.id~1");
    assert_int_equal(cmr_request_headers_join(out, names, 0), 0);
    assert_string_equal(out, "");
}

/* Upper case, separators, control characters, empty and overlong names, NULL entries:
 * left out, the valid ones around them kept in order. */
static void test_invalid_names_left_out(void **state)
{
    (void)state;
    char out[CMR_REQUEST_HEADERS_JOINED];
    char long_name[CMR_MAX_REQUEST_HEADER_NAME + 2], max_name[CMR_MAX_REQUEST_HEADER_NAME + 1];
    memset(long_name, 'a', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    memset(max_name, 'b', sizeof max_name - 1);
    max_name[sizeof max_name - 1] = '\0';
    char *names[] = {"X-Request-Id", "a b", "a:b", "a\nb", "", NULL, long_name, "ok", max_name};
    assert_int_equal(cmr_request_headers_join(out, names, 9), 2);
    char want[CMR_REQUEST_HEADERS_JOINED];
    snprintf(want, sizeof want, "ok\n%s", max_name);
    assert_string_equal(out, want);
}

/* More than CMR_MAX_REQUEST_HEADERS names of the longest length: the first ones kept,
 * the buffer exactly big enough. */
static void test_at_most_the_limit(void **state)
{
    (void)state;
    char out[CMR_REQUEST_HEADERS_JOINED];
    static char bufs[CMR_MAX_REQUEST_HEADERS + 4][CMR_MAX_REQUEST_HEADER_NAME + 1];
    char *names[CMR_MAX_REQUEST_HEADERS + 4];
    for (size_t i = 0; i < CMR_MAX_REQUEST_HEADERS + 4; i++) {
        memset(bufs[i], 'a' + (int)(i % 26), CMR_MAX_REQUEST_HEADER_NAME);
        bufs[i][CMR_MAX_REQUEST_HEADER_NAME] = '\0';
        names[i] = bufs[i];
    }
    assert_int_equal(cmr_request_headers_join(out, names, CMR_MAX_REQUEST_HEADERS + 4), CMR_MAX_REQUEST_HEADERS);
    assert_int_equal(strlen(out), CMR_REQUEST_HEADERS_JOINED - 1);
    assert_memory_equal(out + strlen(out) - CMR_MAX_REQUEST_HEADER_NAME, bufs[CMR_MAX_REQUEST_HEADERS - 1],
                        CMR_MAX_REQUEST_HEADER_NAME);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_names_joined),
        cmocka_unit_test(test_invalid_names_left_out),
        cmocka_unit_test(test_at_most_the_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

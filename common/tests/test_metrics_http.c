/*
 * test_metrics_http.c - the Prometheus exposition-format writer (label values escaped,
 * HELP/TYPE lines, number formats) and the /metrics server on loopback: 200 with the
 * worker's and the common families, 404 on other paths, 405 on other methods, off by
 * default, IPv6 loopback, clear errors on a bad address; keep-alive (two scrapes on one
 * connection) and 50 idle connections do not hold a scrape up.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "cmr/metrics_http.h"
#include "cmr/rejects.h"
#include "http_client.h"

static void test_escape(void **state)
{
    (void)state;
    cmr_buf_t b = {0};
    cmr_prom_escape_label(&b, "a\\b\"c\nd");
    assert_string_equal(cmr_buf_str(&b), "a\\\\b\\\"c\\nd");
    cmr_buf_reset(&b);
    cmr_prom_escape_label(&b, NULL);
    assert_string_equal(cmr_buf_str(&b), "");
    cmr_buf_free(&b);
}

static void test_family_and_samples(void **state)
{
    (void)state;
    cmr_buf_t b = {0};
    cmr_prom_family(&b, "x_total", "counter", "line\\one\nline \"two\"");
    cmr_prom_sample_u64(&b, "x_total", NULL, 0, 18446744073709551615ull);
    cmr_prom_label_t l[2] = {{"topic", "t\"1"}, {"reason", "r\n"}};
    cmr_prom_sample_u64(&b, "x_total", l, 2, 3);
    cmr_prom_family(&b, "g", "gauge", "g");
    cmr_prom_sample_double(&b, "g", l, 1, 1.5);
    cmr_prom_sample_double(&b, "g", NULL, 0, 1.0 / 0.0);
    cmr_prom_sample_double(&b, "g", NULL, 0, 0.0 / 0.0);
    assert_true(cmr_buf_ok(&b));
    assert_string_equal(cmr_buf_str(&b), "# HELP x_total line\\\\one\\nline \"two\"\n"
                                         "# TYPE x_total counter\n"
                                         "x_total 18446744073709551615\n"
                                         "x_total{topic=\"t\\\"1\",reason=\"r\\n\"} 3\n"
                                         "# HELP g g\n"
                                         "# TYPE g gauge\n"
                                         "g{topic=\"t\\\"1\"} 1.5\n"
                                         "g +Inf\n"
                                         "g NaN\n");
    cmr_buf_free(&b);
}

static void test_common(void **state)
{
    (void)state;
    cmr_reject_count("cmr.\"odd\"\ntopic", "corrupt");
    cmr_buf_t b = {0};
    cmr_metrics_common(&b);
    const char *s = cmr_buf_str(&b);
    assert_non_null(strstr(s, "# TYPE cmr_messages_rejected_total counter\n"));
    assert_non_null(strstr(s, "cmr_messages_rejected_total{topic=\"cmr.\\\"odd\\\"\\ntopic\",reason=\"corrupt\"} 1\n"));
    assert_non_null(strstr(s, "# TYPE cmr_messages_past_schema_total counter\ncmr_messages_past_schema_total 0\n"));
    assert_non_null(strstr(s, "# TYPE cmr_process_start_time_seconds gauge\ncmr_process_start_time_seconds 1"));
    assert_non_null(strstr(s, "cmr_build_info{version=\""));
    /* every family's HELP and TYPE once */
    const char *p = s;
    int types = 0;
    while ((p = strstr(p, "# TYPE cmr_messages_rejected_total")))
        types++, p++;
    assert_int_equal(types, 1);
    cmr_buf_free(&b);
}

/* --- the server ----------------------------------------------------------------------- */

/* Sends `request` to addr:port and reads the whole answer (Connection: close). */
static char *http(const char *addr, int port, const char *request)
{
    struct sockaddr_storage ss = {0};
    socklen_t len;
    int family;
    if (strchr(addr, ':')) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)port);
        inet_pton(AF_INET6, addr, &a->sin6_addr);
        len = sizeof *a;
        family = AF_INET6;
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_port = htons((uint16_t)port);
        inet_pton(AF_INET, addr, &a->sin_addr);
        len = sizeof *a;
        family = AF_INET;
    }
    int fd = socket(family, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    assert_int_equal(connect(fd, (struct sockaddr *)&ss, len), 0);
    assert_int_equal(write(fd, request, strlen(request)), (ssize_t)strlen(request));
    cmr_buf_t b = {0};
    char chunk[4096];
    ssize_t n;
    while ((n = read(fd, chunk, sizeof chunk)) > 0)
        cmr_buf_put(&b, chunk, (size_t)n);
    close(fd);
    return cmr_buf_take(&b);
}

static int scrapes;

static void fill(cmr_buf_t *out, void *opaque)
{
    scrapes++;
    cmr_prom_family(out, "test_things_total", "counter", "things");
    cmr_prom_sample_u64(out, "test_things_total", NULL, 0, *(uint64_t *)opaque);
}

static cmr_metrics_http_t *start(const char *listen, const char *port, char *err, size_t errlen, int *rc)
{
    cmr_conf_t *conf = cmr_conf_new();
    if (listen)
        cmr_conf_set(conf, "metrics.listen", listen, "test");
    if (port)
        cmr_conf_set(conf, "metrics.port", port, "test");
    static uint64_t things = 42;
    cmr_metrics_http_t *m = NULL;
    *rc = cmr_metrics_http_start(conf, fill, &things, &m, err, errlen);
    cmr_conf_destroy(conf);
    return m;
}

static void test_server(void **state)
{
    (void)state;
    char err[256];
    int rc;
    cmr_metrics_http_t *m = start(NULL, "0", err, sizeof err, &rc);
    assert_int_equal(rc, 0);
    assert_non_null(m);
    int port = cmr_metrics_http_port(m);
    assert_true(port > 0);

    char *r = http("127.0.0.1", port, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_non_null(r);
    assert_memory_equal(r, "HTTP/1.1 200", 12);
    assert_non_null(strstr(r, "text/plain; version=0.0.4"));
    assert_non_null(strstr(r, "\r\n\r\n# HELP test_things_total things\n# TYPE test_things_total counter\n"
                              "test_things_total 42\n"));
    assert_non_null(strstr(r, "cmr_build_info{version="));
    assert_int_equal(scrapes, 1);
    free(r);

    r = http("127.0.0.1", port, "GET /other HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_memory_equal(r, "HTTP/1.1 404", 12);
    free(r);
    r = http("127.0.0.1", port, "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    assert_memory_equal(r, "HTTP/1.1 405", 12);
    assert_non_null(strstr(r, "Allow: GET"));
    free(r);
    assert_int_equal(scrapes, 1);
    cmr_metrics_http_stop(m);
}

static void test_off_and_errors(void **state)
{
    (void)state;
    char err[256] = "";
    int rc;
    assert_null(start(NULL, NULL, err, sizeof err, &rc)); /* off by default */
    assert_int_equal(rc, 0);
    cmr_metrics_http_stop(NULL);
    assert_null(start("not-an-address", "0", err, sizeof err, &rc));
    assert_int_equal(rc, -1);
    assert_non_null(strstr(err, "metrics.listen"));
    assert_null(start(NULL, "70000", err, sizeof err, &rc));
    assert_int_equal(rc, -1);
    assert_non_null(strstr(err, "metrics.port"));
    /* beyond loopback without metrics.token_file: refused, nothing bound */
    assert_null(start("0.0.0.0", "0", err, sizeof err, &rc));
    assert_int_equal(rc, -1);
    assert_non_null(strstr(err, "access token"));
}

static void test_ipv6(void **state)
{
    (void)state;
    int probe = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    bool have = probe >= 0 && bind(probe, (struct sockaddr *)&a, sizeof a) == 0;
    if (probe >= 0)
        close(probe);
    if (!have) {
        fprintf(stderr, "test_ipv6: no IPv6 loopback here, skipped\n");
        skip();
    }
    char err[256];
    int rc;
    cmr_metrics_http_t *m = start("::1", "0", err, sizeof err, &rc);
    if (rc != 0)
        fprintf(stderr, "test_ipv6: %s\n", err);
    assert_int_equal(rc, 0);
    assert_non_null(m);
    char *r = http("::1", cmr_metrics_http_port(m), "GET /metrics HTTP/1.0\r\n\r\n");
    assert_non_null(r);
    assert_memory_equal(r, "HTTP/1.", 7); /* MHD answers 1.1 to 1.0 */
    assert_memory_equal(r + 8, " 200", 4);
    free(r);
    cmr_metrics_http_stop(m);
}

static void test_keep_alive_and_idle(void **state)
{
    (void)state;
    char err[256];
    int rc;
    cmr_metrics_http_t *m = start(NULL, "0", err, sizeof err, &rc);
    assert_non_null(m);
    int port = cmr_metrics_http_port(m);
    int before = scrapes;
    int idle[50];
    for (int i = 0; i < 50; i++) {
        idle[i] = hc_connect("127.0.0.1", port);
        assert_true(idle[i] >= 0);
    }
    /* two scrapes on one connection, each answered within the client's 5 s */
    int fd = hc_connect("127.0.0.1", port);
    assert_true(fd >= 0);
    for (int i = 0; i < 2; i++) {
        char *r;
        assert_int_equal(hc_request(fd, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", false, &r), 200);
        assert_non_null(strstr(r, "test_things_total 42\n"));
        assert_null(strstr(r, "Connection: close"));
        free(r);
    }
    close(fd);
    assert_int_equal(scrapes, before + 2);
    for (int i = 0; i < 50; i++)
        close(idle[i]);
    cmr_metrics_http_stop(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escape),
        cmocka_unit_test(test_family_and_samples),
        cmocka_unit_test(test_common),
        cmocka_unit_test(test_server),
        cmocka_unit_test(test_off_and_errors),
        cmocka_unit_test(test_ipv6),
        cmocka_unit_test(test_keep_alive_and_idle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

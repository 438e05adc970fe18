/*
 * test_http_server.c - the common HTTP server (cmr/http_server.h over libmicrohttpd): any
 * free port reported, decoded query parameters, the raw target, keep-alive (two requests
 * on one connection), HEAD, 405 with Allow for other methods, 50 idle connections do not
 * keep a request waiting (answered within the client's 5 s timeout), the connection
 * limit, the idle timeout, IPv6 loopback, "::" refused without an access token, the token
 * (401 without it) and its file, localhost, address errors,
 * a port in use, the loopback predicate.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmr/buf.h"
#include "cmr/http_server.h"
#include "http_client.h"

static int append_param(void *opaque, const char *key, const char *value)
{
    cmr_buf_printf(opaque, "[%s=%s]", key, value);
    return 0;
}

/* /echo: method, path, target and every parameter; /status0: a handler that sets nothing;
 * anything else 404. */
static void handle(void *opaque, const cmr_http_request_t *req, cmr_http_response_t *res)
{
    (void)opaque;
    if (!strcmp(req->path, "/status0"))
        return;
    if (strcmp(req->path, "/echo") && strcmp(req->path, "/e c/ho")) {
        cmr_http_respond(res, 404, "text/plain", "nope\n");
        return;
    }
    cmr_buf_t b = {0};
    cmr_buf_printf(&b, "%s %s %s ", req->method, req->path, req->target);
    if (!strcmp(req->method, "POST")) {
        const char *x = cmr_http_header(req, "X-Test"), *k = cmr_http_cookie(req, "k");
        cmr_buf_printf(&b, "body[%zu]=%s x-test=%s cookie=%s authorized=%d ", req->body_len, req->body,
                       x ? x : "(null)", k ? k : "(null)", req->authorized);
        res->cache_control = "no-store";
        res->set_cookie = strdup("k=v; Path=/");
    }
    cmr_http_query_each(req, append_param, &b);
    const char *a = cmr_http_query(req, "a"), *flag = cmr_http_query(req, "flag");
    cmr_buf_printf(&b, " a=%s flag=%s missing=%s", a ? a : "(null)", flag ? flag : "(null)",
                   cmr_http_query(req, "missing") ? "yes" : "no");
    res->status = 200;
    res->content_type = "text/plain";
    res->len = b.len;
    res->body = cmr_buf_take(&b);
}

static cmr_http_server_t *start(const char *addr, unsigned connections, unsigned timeout_s)
{
    cmr_http_server_opts_t o = CMR_HTTP_SERVER_DEFAULTS;
    o.name = "test";
    o.address = addr;
    if (connections)
        o.connections = connections;
    if (timeout_s)
        o.timeout_s = timeout_s;
    o.not_allowed_body = "no such method here\n";
    char err[256];
    cmr_http_server_t *s = NULL;
    if (cmr_http_server_start(&o, handle, NULL, &s, err, sizeof err) != 0)
        fprintf(stderr, "start %s: %s\n", addr, err);
    return s;
}

static bool have_ipv6(void)
{
    int probe = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    bool have = probe >= 0 && bind(probe, (struct sockaddr *)&a, sizeof a) == 0;
    if (probe >= 0)
        close(probe);
    return have;
}

static void test_requests(void **state)
{
    (void)state;
    cmr_http_server_t *s = start("127.0.0.1", 0, 0);
    assert_non_null(s);
    int port = cmr_http_server_port(s);
    assert_true(port > 0);
    char *r;
    assert_int_equal(hc_get("127.0.0.1", port, "/echo?a=1&b=x%20y&c+d=e+f&a=2&flag", &r), 200);
    assert_non_null(strstr(r, "\r\n\r\nGET /echo /echo?a=1&b=x%20y&c+d=e+f&a=2&flag "
                              "[a=1][b=x y][c d=e f][a=2][flag=] a=1 flag= missing=no"));
    assert_non_null(strstr(r, "Content-Type: text/plain\r\n"));
    free(r);
    assert_int_equal(hc_get("127.0.0.1", port, "/e%20c/ho", &r), 200); /* the path is decoded */
    assert_non_null(strstr(r, "GET /e c/ho /e%20c/ho "));
    free(r);
    assert_int_equal(hc_get("127.0.0.1", port, "/other", &r), 404);
    assert_non_null(strstr(r, "\r\n\r\nnope\n"));
    free(r);
    assert_int_equal(hc_get("127.0.0.1", port, "/status0", NULL), 500);

    /* other methods: 405, Allow, the server's body; the handler is not asked */
    int fd = hc_connect("127.0.0.1", port);
    assert_true(fd >= 0);
    assert_int_equal(hc_request(fd, "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc", false, &r), 405);
    assert_non_null(strstr(r, "Allow: GET, HEAD\r\n"));
    assert_non_null(strstr(r, "\r\n\r\nno such method here\n"));
    free(r);
    close(fd);
    fd = hc_connect("127.0.0.1", port);
    assert_int_equal(hc_request(fd, "DELETE /echo HTTP/1.1\r\nHost: t\r\n\r\n", false, NULL), 405);
    close(fd);

    /* HEAD: the headers of the GET answer, no body */
    fd = hc_connect("127.0.0.1", port);
    assert_int_equal(hc_request(fd, "HEAD /echo HTTP/1.1\r\nHost: t\r\n\r\n", true, &r), 200);
    assert_non_null(strstr(r, "Content-Length: "));
    assert_non_null(strstr(r, "\r\n\r\n"));
    assert_string_equal(strstr(r, "\r\n\r\n"), "\r\n\r\n");
    free(r);
    /* keep-alive on the same connection after HEAD */
    assert_int_equal(hc_request(fd, "GET /echo?a=3 HTTP/1.1\r\nHost: t\r\n\r\n", false, &r), 200);
    assert_non_null(strstr(r, "a=3 flag=(null) missing=no"));
    free(r);
    close(fd);
    cmr_http_server_stop(s);
    cmr_http_server_stop(NULL);
}

static void test_keep_alive(void **state)
{
    (void)state;
    cmr_http_server_t *s = start("127.0.0.1", 0, 0);
    int port = cmr_http_server_port(s);
    int fd = hc_connect("127.0.0.1", port);
    assert_true(fd >= 0);
    char *r;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(hc_request(fd, "GET /echo?a=k HTTP/1.1\r\nHost: t\r\n\r\n", false, &r), 200);
        assert_null(strstr(r, "Connection: close"));
        assert_non_null(strstr(r, "a=k"));
        free(r);
    }
    /* a request that asks to close: answered, then closed */
    assert_int_equal(hc_request(fd, "GET /echo?a=last HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", false, &r),
                     200);
    assert_non_null(strstr(r, "a=last"));
    free(r);
    assert_true(hc_closed_within(fd, 5000));
    close(fd);
    cmr_http_server_stop(s);
}

/* The measured problem of the old servers: idle connections kept everyone waiting. */
static void test_idle_connections(void **state)
{
    (void)state;
    cmr_http_server_t *s = start("127.0.0.1", 0, 0);
    int port = cmr_http_server_port(s);
    int idle[50];
    for (int i = 0; i < 50; i++) {
        idle[i] = hc_connect("127.0.0.1", port);
        assert_true(idle[i] >= 0);
    }
    int half = hc_connect("127.0.0.1", port); /* and one that sent half a request */
    assert_int_equal(send(half, "GET /ec", 7, 0), 7);
    char *r;
    /* hc_* time out after 5 s: answered means answered within 5 s */
    assert_int_equal(hc_get("127.0.0.1", port, "/echo?a=busy", &r), 200);
    assert_non_null(strstr(r, "a=busy"));
    free(r);
    for (int i = 0; i < 50; i++)
        close(idle[i]);
    close(half);
    cmr_http_server_stop(s); /* does not wait for idle clients */
}

static void test_limit_and_timeout(void **state)
{
    (void)state;
    cmr_http_server_t *s = start("127.0.0.1", 4, 1);
    int port = cmr_http_server_port(s);
    int idle[4];
    for (int i = 0; i < 4; i++)
        idle[i] = hc_connect("127.0.0.1", port);
    usleep(200 * 1000);
    /* the fifth is accepted and closed at once */
    int fd = hc_connect("127.0.0.1", port);
    assert_true(fd >= 0);
    assert_true(hc_closed_within(fd, 3000));
    close(fd);
    /* the idle ones are closed after the 1 s timeout, and then requests are served again */
    for (int i = 0; i < 4; i++)
        assert_true(hc_closed_within(idle[i], 5000));
    for (int i = 0; i < 4; i++)
        close(idle[i]);
    int status = 0;
    for (int tries = 0; tries < 20 && status != 200; tries++) {
        status = hc_get("127.0.0.1", port, "/echo", NULL);
        if (status != 200)
            usleep(100 * 1000);
    }
    assert_int_equal(status, 200);
    cmr_http_server_stop(s);
}

static void test_addresses(void **state)
{
    (void)state;
    /* localhost is 127.0.0.1 */
    cmr_http_server_t *s = start("localhost", 0, 0);
    assert_non_null(s);
    assert_int_equal(hc_get("127.0.0.1", cmr_http_server_port(s), "/echo", NULL), 200);
    /* a port in use */
    cmr_http_server_opts_t o = CMR_HTTP_SERVER_DEFAULTS;
    o.name = "second";
    o.port = cmr_http_server_port(s);
    char err[256] = "";
    cmr_http_server_t *t = NULL;
    assert_int_equal(cmr_http_server_start(&o, handle, NULL, &t, err, sizeof err), -1);
    assert_null(t);
    assert_non_null(strstr(err, "second: cannot listen on 127.0.0.1 port"));
    cmr_http_server_stop(s);
    /* not an address */
    o.address = "example.org";
    o.port = 0;
    assert_int_equal(cmr_http_server_start(&o, handle, NULL, &t, err, sizeof err), -1);
    assert_non_null(strstr(err, "second: \"example.org\" is not an IPv4 or IPv6 address"));
    o.address = "127.0.0.1";
    o.port = 70000;
    assert_int_equal(cmr_http_server_start(&o, handle, NULL, &t, err, sizeof err), -1);
    assert_true(cmr_http_address_valid("::"));
    assert_true(cmr_http_address_valid("localhost"));
    assert_false(cmr_http_address_valid("127.0.0.1:80"));
    assert_false(cmr_http_address_valid(NULL));

    assert_true(cmr_http_address_is_loopback("127.0.0.1"));
    assert_true(cmr_http_address_is_loopback("127.1.2.3"));
    assert_true(cmr_http_address_is_loopback("::1"));
    assert_true(cmr_http_address_is_loopback("::ffff:127.0.0.1"));
    assert_true(cmr_http_address_is_loopback("localhost"));
    assert_false(cmr_http_address_is_loopback("0.0.0.0"));
    assert_false(cmr_http_address_is_loopback("::"));
    assert_false(cmr_http_address_is_loopback("10.0.0.1"));
    assert_false(cmr_http_address_is_loopback("example.org"));

    assert_true(cmr_http_target_bad_escape("/x?a=%zz"));
    assert_true(cmr_http_target_bad_escape("/x?a=%4"));
    assert_false(cmr_http_target_bad_escape("/x?a=%4a%20"));
    assert_false(cmr_http_target_bad_escape(NULL));
}

static void test_ipv6(void **state)
{
    (void)state;
    if (!have_ipv6()) {
        fprintf(stderr, "test_ipv6: no IPv6 loopback here, skipped\n");
        skip();
    }
    cmr_http_server_t *s = start("::1", 0, 0);
    assert_non_null(s);
    int port = cmr_http_server_port(s);
    char *r;
    assert_int_equal(hc_get("::1", port, "/echo?a=six", &r), 200);
    assert_non_null(strstr(r, "a=six"));
    free(r);
    int fd = hc_connect("127.0.0.1", port); /* ::1 only */
    assert_int_equal(fd, -1);
    cmr_http_server_stop(s);

    /* "::" (every interface) without an access token: refused before anything is bound
     * (tests bind loopback only: the token itself is checked on loopback below) */
    cmr_http_server_opts_t o = CMR_HTTP_SERVER_DEFAULTS;
    o.address = "::";
    char err[256];
    assert_int_not_equal(cmr_http_server_start(&o, handle, NULL, &s, err, sizeof err), 0);
    assert_non_null(strstr(err, "access token"));
    o.address = "0.0.0.0";
    o.token = "too-short";
    assert_int_not_equal(cmr_http_server_start(&o, handle, NULL, &s, err, sizeof err), 0);
}

/* A server with an access token answers only requests that carry it (401 with
 * WWW-Authenticate otherwise, whatever the method or path). */
static void test_access_token(void **state)
{
    (void)state;
    cmr_http_server_opts_t o = CMR_HTTP_SERVER_DEFAULTS;
    o.token = "0123456789abcdef-token";
    cmr_http_server_t *s = NULL;
    char err[256];
    assert_int_equal(cmr_http_server_start(&o, handle, NULL, &s, err, sizeof err), 0);
    int port = cmr_http_server_port(s);
    char *r = NULL;
    assert_int_equal(hc_get("127.0.0.1", port, "/echo", &r), 401);
    assert_non_null(strstr(r, "WWW-Authenticate: Bearer"));
    free(r);
    static const char *const bad[] = {
        "GET /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer 0123456789abcdef-tokeN\r\nConnection: close\r\n\r\n",
        "GET /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer 0123456789abcdef-toke\r\nConnection: close\r\n\r\n",
        "GET /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Basic 0123456789abcdef-token\r\nConnection: close\r\n\r\n",
        "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int fd = hc_connect("127.0.0.1", port);
        assert_true(fd >= 0);
        assert_int_equal(hc_request(fd, bad[i], false, NULL), 401);
        close(fd);
    }
    int fd = hc_connect("127.0.0.1", port);
    assert_true(fd >= 0);
    assert_int_equal(hc_request(fd,
                                "GET /echo?a=1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer 0123456789abcdef-token\r\n"
                                "Connection: close\r\n\r\n",
                                false, &r),
                     200);
    assert_non_null(strstr(r, "a=1"));
    free(r);
    close(fd);
    cmr_http_server_stop(s);

    /* the token file: owner-only, 16 to 256 printable characters */
    char dir[] = "/tmp/cmr-token-XXXXXX", path[128], tok[300];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/token", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("0123456789abcdef-token\n", f);
    fclose(f);
    assert_int_equal(chmod(path, 0644), 0);
    assert_int_not_equal(cmr_http_token_load(path, tok, sizeof tok, err, sizeof err), 0);
    assert_non_null(strstr(err, "readable by others"));
    assert_int_equal(chmod(path, 0600), 0);
    assert_int_equal(cmr_http_token_load(path, tok, sizeof tok, err, sizeof err), 0);
    assert_string_equal(tok, "0123456789abcdef-token");
    f = fopen(path, "w");
    fputs("short\n", f);
    fclose(f);
    assert_int_not_equal(cmr_http_token_load(path, tok, sizeof tok, err, sizeof err), 0);
    unlink(path);
    rmdir(dir);
}

/* POST: the body whole (chunked or not), 413 beyond post_max, the server's headers on every
 * answer, the handler's Cache-Control and Set-Cookie; a cookie as the token; the login
 * path open without it. */
static void test_post(void **state)
{
    (void)state;
    static const char *const headers[] = {"X-Frame-Options", "DENY", NULL};
    cmr_http_server_opts_t o = CMR_HTTP_SERVER_DEFAULTS;
    o.post_max = 64;
    o.headers = headers;
    o.token = "0123456789abcdef-token";
    o.token_cookie = "t";
    o.cookie_secret = "session-0123456789abcdef";
    o.login_path = "/e c/ho";
    static const char *const open[] = {"/status0", NULL};
    o.open_paths = open;
    cmr_http_server_t *s = NULL;
    char err[256], *r = NULL;
    assert_int_equal(cmr_http_server_start(&o, handle, NULL, &s, err, sizeof err), 0);
    int port = cmr_http_server_port(s);
    int fd = hc_connect("127.0.0.1", port);
    assert_int_equal(hc_request(fd,
                                "POST /echo HTTP/1.1\r\nHost: x\r\nCookie: t=session-0123456789abcdef; k=kv\r\n"
                                "X-Test: yes\r\nContent-Length: 11\r\n\r\nhello world",
                                false, &r),
                     200);
    assert_non_null(strstr(r, "body[11]=hello world x-test=yes cookie=kv authorized=1"));
    assert_non_null(strstr(r, "X-Frame-Options: DENY"));
    assert_non_null(strstr(r, "Cache-Control: no-store"));
    assert_non_null(strstr(r, "Set-Cookie: k=v; Path=/"));
    free(r);
    /* chunked, on the same (kept-alive) connection */
    assert_int_equal(hc_request(fd,
                                "POST /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer 0123456789abcdef-token\r\n"
                                "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
                                false, &r),
                     200);
    assert_non_null(strstr(r, "body[5]=abcde"));
    free(r);
    close(fd);
    /* too big: declared, and chunked past the limit */
    char big[400];
    snprintf(big, sizeof big,
             "POST /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer 0123456789abcdef-token\r\nConnection: close\r\n"
             "Content-Length: 65\r\n\r\n%065d",
             0);
    fd = hc_connect("127.0.0.1", port);
    assert_int_equal(hc_request(fd, big, false, NULL), 413);
    close(fd);
    snprintf(big, sizeof big,
             "POST /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer 0123456789abcdef-token\r\nConnection: close\r\n"
             "Transfer-Encoding: chunked\r\n\r\n40\r\n%064d\r\n1\r\nx\r\n0\r\n\r\n",
             0);
    fd = hc_connect("127.0.0.1", port);
    assert_int_equal(hc_request(fd, big, false, NULL), 413);
    close(fd);
    /* the login path: asked without the token, and told so */
    fd = hc_connect("127.0.0.1", port);
    assert_int_equal(hc_request(fd,
                                "POST /e%20c/ho HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 2\r\n\r\n"
                                "hi",
                                false, &r),
                     200);
    assert_non_null(strstr(r, "authorized=0"));
    free(r);
    close(fd);
    /* a wrong cookie is no token; PUT is still 405, with POST in Allow */
    fd = hc_connect("127.0.0.1", port);
    assert_int_equal(
        hc_request(fd, "GET /echo HTTP/1.1\r\nHost: x\r\nCookie: t=nope\r\nConnection: close\r\n\r\n", false, NULL),
        401);
    close(fd);
    fd = hc_connect("127.0.0.1", port);
    assert_int_equal(hc_request(fd,
                                "PUT /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer 0123456789abcdef-token\r\n"
                                "Connection: close\r\nContent-Length: 0\r\n\r\n",
                                false, &r),
                     405);
    assert_non_null(strstr(r, "Allow: GET, HEAD, POST"));
    free(r);
    close(fd);
    cmr_http_server_stop(s);
}

/* Query and form values: '+' and %XX decoded, a bad escape refused. */
static void test_url_decode(void **state)
{
    (void)state;
    char a[] = "a+b%2Fc%41%7e", b[] = "100%", c[] = "%zz", d[] = "%4";
    assert_int_equal(cmr_http_url_decode(a), 0);
    assert_string_equal(a, "a b/cA~");
    assert_int_equal(cmr_http_url_decode(b), -1);
    assert_int_equal(cmr_http_url_decode(c), -1);
    assert_int_equal(cmr_http_url_decode(d), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_requests),         cmocka_unit_test(test_keep_alive),
        cmocka_unit_test(test_idle_connections), cmocka_unit_test(test_limit_and_timeout),
        cmocka_unit_test(test_addresses),        cmocka_unit_test(test_ipv6),
        cmocka_unit_test(test_access_token),     cmocka_unit_test(test_post),
        cmocka_unit_test(test_url_decode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

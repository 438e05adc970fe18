/*
 * test_ui_server.c - cmr-ui against the embedded broker and a real cmr-ingest HTTP API (on
 * an empty store): the front end's files and what is never served, the reads passed to
 * cmr-ingest, the checks every write passes, environments planned and applied from YAML,
 * a diagnosis started, narrowed and stopped, a read-only UI, and the access token (header
 * and the cookie of /login). Everything binds 127.0.0.1 on free ports.
 *
 *   test_ui_server CMR-BROKER
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "broker_proc.h"
#include "cmr/buf.h"
#include "cmr/clock.h"
#include "cmr/ingest.h"
#include "cmr/kafka.h"
#include "cmr/log.h"
#include "cmr/topics.h"
#include "cmr/ui.h"
#include "cmr/wire.h"
#include "http_client.h"

static const char *broker_bin;
static broker_proc_t broker;
static cmr_conf_t *conf;
static cmr_ingest_http_t *ingest;
static cmr_ui_t *ui;
static int port;
static char store[] = "/tmp/cmr-ui-test-XXXXXX";

static const char env_yaml[] = "version: 1\n"
                               "environments:\n"
                               "  - id: shop\n"
                               "    name: The shop\n"
                               "    overhead_budget_pct: 2.5\n"
                               "    sensors:\n"
                               "      - sensor: invocation-sequence\n"
                               "        class: \"shop.*\"\n"
                               "        method: \"*\"\n"
                               "mappings:\n"
                               "  - agent: \"shop-*\"\n"
                               "    address: \"*\"\n"
                               "    environment: shop\n";

/* --- requests ------------------------------------------------------------------------------- */

/* One request (Connection: close) to port; the status, *body the answer's body (malloc'd),
 * *head the whole answer (malloc'd) when not NULL. */
static int request(int p, const char *method, const char *target, const char *headers, const char *body,
                   char **out_body, char **out_head)
{
    char *req = NULL;
    size_t n = strlen(body ? body : "");
    if (asprintf(&req, "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n%sContent-Length: %zu\r\n\r\n%s",
                 method, target, p, headers ? headers : "", n, body ? body : "") < 0)
        return -1;
    int fd = hc_connect("127.0.0.1", p);
    char *answer = NULL;
    int st = fd >= 0 ? hc_request(fd, req, !strcmp(method, "HEAD"), &answer) : -1;
    if (fd >= 0)
        close(fd);
    free(req);
    if (out_body) {
        const char *b = answer ? strstr(answer, "\r\n\r\n") : NULL;
        *out_body = strdup(b ? b + 4 : "");
    }
    if (out_head)
        *out_head = answer;
    else
        free(answer);
    return st;
}

#define WRITE_HEADERS "X-CMR-Request: 1\r\nContent-Type: application/json\r\n"

/* A request that must answer want_status with a JSON body; the body parsed. */
static json_t *json_request(const char *method, const char *target, const char *headers, const char *body,
                            int want_status)
{
    char *answer = NULL;
    int st = request(port, method, target, headers, body, &answer, NULL);
    if (st != want_status)
        fprintf(stderr, "%s %s: %d %s\n", method, target, st, answer ? answer : "");
    assert_int_equal(st, want_status);
    json_t *j = json_loads(answer, 0, NULL);
    free(answer);
    assert_non_null(j);
    return j;
}

static json_t *get_json(const char *target, int want_status)
{
    return json_request("GET", target, NULL, NULL, want_status);
}

static json_t *post_json(const char *target, const char *headers, const char *body, int want_status)
{
    return json_request("POST", target, headers, body, want_status);
}

/* --- set-up --------------------------------------------------------------------------------- */

static int setup(void **state)
{
    (void)state;
    cmr_log_set_level(CMR_LOG_WARN);
    conf = broker_proc_start_conf(&broker, broker_bin);
    if (!conf || !mkdtemp(store))
        return -1;
    char err[512];
    ingest = cmr_ingest_http_start(store, "127.0.0.1", 0, NULL, err, sizeof err);
    if (!ingest) {
        fprintf(stderr, "ingest: %s\n", err);
        return -1;
    }
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", cmr_ingest_http_port(ingest));
    cmr_conf_set(conf, "ui.ingest_url", url, "test");
    cmr_conf_set(conf, "ui.port", "0", "test");
    ui = cmr_ui_start(conf, err, sizeof err);
    if (!ui) {
        fprintf(stderr, "cmr-ui: %s\n", err);
        return -1;
    }
    port = cmr_ui_port(ui);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    cmr_ui_stop(ui);
    cmr_ingest_http_stop(ingest);
    cmr_conf_destroy(conf);
    broker_proc_stop(&broker);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", store);
    return system(cmd) == 0 ? 0 : -1;
}

/* --- the front end's files ------------------------------------------------------------------ */

static void test_static_files(void **state)
{
    (void)state;
    char *body = NULL, *head = NULL;
    assert_int_equal(request(port, "GET", "/", NULL, NULL, &body, &head), 200);
    assert_non_null(strstr(body, "<script type=\"module\" src=\"/js/app.js\">"));
    assert_non_null(strstr(head, "Content-Type: text/html"));
    assert_non_null(strstr(head, "Content-Security-Policy: default-src 'self'"));
    assert_non_null(strstr(head, "X-Content-Type-Options: nosniff"));
    free(body);
    free(head);
    assert_int_equal(request(port, "GET", "/js/app.js", NULL, NULL, NULL, &head), 200);
    assert_non_null(strstr(head, "Content-Type: text/javascript"));
    free(head);
    assert_int_equal(request(port, "GET", "/vendor/uplot/uPlot.esm.js", NULL, NULL, NULL, NULL), 200);
    /* never: outside the web root, hidden files, node_modules, unknown types */
    const char *refused[] = {"/../CMakeLists.txt",
                             "/js/../../CMakeLists.txt",
                             "/%2e%2e/CMakeLists.txt",
                             "/node_modules/uplot/package.json",
                             "/vendor/uplot/../../package.json",
                             "/.cmr-lock-sha256",
                             "/package-lock.json.bak",
                             "/js//app.js",
                             "/js/"};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        int st = request(port, "GET", refused[i], NULL, NULL, NULL, NULL);
        if (st != 404 && st != 400)
            fprintf(stderr, "%s: %d\n", refused[i], st);
        assert_true(st == 404 || st == 400);
    }
}

/* --- reads -------------------------------------------------------------------------------- */

static void test_reads_passed_to_ingest(void **state)
{
    (void)state;
    json_t *s = get_json("/api/session", 200);
    assert_true(json_is_true(json_object_get(json_object_get(s, "ingest"), "ok")));
    assert_true(json_is_true(json_object_get(s, "writable")));
    json_decref(s);
    json_t *t = get_json("/api/traces?limit=5", 200);
    assert_int_equal(json_array_size(json_object_get(t, "traces")), 0);
    json_decref(t);
    /* cmr-ingest's own refusal comes through as it is */
    json_t *e = get_json("/api/traces?limit=0", 400);
    assert_non_null(strstr(json_string_value(json_object_get(e, "error")), "limit"));
    json_decref(e);
    json_decref(get_json("/api/agents", 200));
    json_decref(get_json("/api/diagnoses/0123456789abcdef/report?limit=5", 200));
    json_decref(get_json("/api/diagnoses/xyz", 404));
    json_decref(get_json("/api/nothing", 404));
}

/* --- the checks of every write ------------------------------------------------------------- */

static void test_write_checks(void **state)
{
    (void)state;
    const char *body = "{\"environment\":\"shop\",\"method\":\"shop.Cart.add(I)V\"}";
    json_decref(post_json("/api/diagnoses", "Content-Type: application/json\r\n", body, 403)); /* no marker */
    json_decref(post_json("/api/diagnoses", WRITE_HEADERS "Origin: http://evil.example\r\n", body, 403));
    json_decref(post_json("/api/diagnoses", WRITE_HEADERS, "{not json", 400));
    json_decref(post_json("/api/diagnoses", WRITE_HEADERS, "[1]", 400));
    json_decref(post_json("/api/diagnoses", WRITE_HEADERS, "{\"environment\":\"shop\",\"nope\":1}", 400));
    json_decref(post_json("/api/diagnoses", WRITE_HEADERS, "{\"environment\":\"shop\",\"method\":\"Cart\"}", 400));
    json_decref(post_json("/api/traces", WRITE_HEADERS, "{}", 404));
    /* another name for 127.0.0.1 (DNS rebinding): nothing is answered, not even a read */
    char *answer = NULL;
    int fd0 = hc_connect("127.0.0.1", port);
    assert_int_equal(hc_request(fd0,
                                "GET /api/session HTTP/1.1\r\nHost: evil.example:8480\r\nConnection: close\r\n\r\n",
                                false, &answer),
                     403);
    free(answer);
    close(fd0);
    fd0 = hc_connect("127.0.0.1", port);
    assert_int_equal(
        hc_request(fd0, "GET /api/session HTTP/1.1\r\nHost: localhost:8480\r\nConnection: close\r\n\r\n", false, NULL),
        200);
    close(fd0);
    assert_int_equal(request(port, "GET", "/api/diagnoses/0123456789abcdeg/report", NULL, NULL, NULL, NULL), 404);
    assert_int_equal(request(port, "GET", "/api/traces/../../health", NULL, NULL, NULL, NULL), 404);
    /* a body over 1 MiB: refused as soon as its length is known, before it is read */
    int fd = hc_connect("127.0.0.1", port);
    assert_true(fd >= 0);
    assert_int_equal(
        hc_request(fd, "POST /api/diagnoses HTTP/1.1\r\nHost: x\r\n" WRITE_HEADERS "Content-Length: 1048577\r\n\r\n{",
                   false, NULL),
        413);
    close(fd);
    assert_int_equal(request(port, "PUT", "/api/diagnoses", WRITE_HEADERS, "{}", NULL, NULL), 405);
}

/* --- environments ----------------------------------------------------------------------------- */

static bool wait_env(const char *id, int64_t revision)
{
    for (int i = 0; i < 100; i++) {
        char target[128];
        snprintf(target, sizeof target, "/api/environments/%s", id);
        char *body = NULL;
        int st = request(port, "GET", target, NULL, NULL, &body, NULL);
        json_t *j = st == 200 ? json_loads(body, 0, NULL) : NULL;
        free(body);
        bool ok = j && json_integer_value(json_object_get(j, "revision")) >= revision;
        json_decref(j);
        if (ok)
            return true;
        cmr_sleep_ms(100);
    }
    return false;
}

static void test_environments(void **state)
{
    (void)state;
    const char *yaml_headers = "X-CMR-Request: 1\r\nContent-Type: application/yaml\r\n";
    /* a bad document: refused whole, with where */
    json_t *bad = post_json("/api/environments/plan", yaml_headers, "version: 1\nenvironments:\n  - id: [\n", 422);
    assert_false(json_is_true(json_object_get(bad, "ok")));
    assert_non_null(strstr(json_string_value(json_object_get(bad, "error")), "the page:4: YAML syntax"));
    json_decref(bad);
    /* a plan writes nothing */
    json_t *plan = post_json("/api/environments/plan", yaml_headers, env_yaml, 200);
    assert_true(json_is_true(json_object_get(plan, "ok")));
    assert_false(json_is_true(json_object_get(plan, "applied")));
    assert_non_null(strstr(json_string_value(json_object_get(plan, "output")), "environment shop"));
    json_decref(plan);
    json_t *none = get_json("/api/environments", 200);
    assert_int_equal(json_array_size(json_object_get(none, "environments")), 0);
    json_decref(none);
    /* applied: the projection shows it, as YAML cmr-config would print */
    json_t *done = post_json("/api/environments/apply", yaml_headers, env_yaml, 200);
    assert_true(json_is_true(json_object_get(done, "applied")));
    json_decref(done);
    assert_true(wait_env("shop", 1));
    json_t *env = get_json("/api/environments/shop", 200);
    assert_string_equal(json_string_value(json_object_get(env, "name")), "The shop");
    const char *yaml = json_string_value(json_object_get(env, "yaml"));
    if (!strstr(yaml, "invocation-sequence"))
        fprintf(stderr, "%s\n", yaml);
    assert_non_null(strstr(yaml, "invocation-sequence"));
    json_decref(env);
    json_t *list = get_json("/api/environments", 200);
    assert_int_equal(json_array_size(json_object_get(list, "environments")), 1);
    const char *all = json_string_value(json_object_get(list, "yaml"));
    if (!strstr(all, "mappings:") || !strstr(all, "id: \"shop\""))
        fprintf(stderr, "%s\n", all);
    assert_non_null(strstr(all, "mappings:"));
    assert_non_null(strstr(all, "id: \"shop\""));
    json_decref(list);
    json_decref(get_json("/api/environments/nope", 404));
}

/* The overhead budget's removals on an environment's page: the last record of each key,
 * in force for the current revision, history for older ones, markup kept as text; their
 * names through cmr-ingest (/api/methods, passed on). Runs after test_environments (shop at
 * revision 1). */
static void test_budget_removals(void **state)
{
    (void)state;
    char err[256];
    cmr_producer_t *p = cmr_producer_new(conf, "test-budget", NULL, NULL, err, sizeof err);
    assert_non_null(p);
    /* what an attacker or a bug may write there first: junk, another message type, an
     * environment id no environment has; none of it shows, nothing stops */
    const char *budget_topic = cmr_topic_name(CMR_TOPIC_BUDGET);
    assert_int_equal(cmr_producer_send_raw(p, budget_topic, "k", 1, "junk!", 5, NULL), 0);
    assert_int_equal(
        cmr_producer_send_raw(p, budget_topic, "k", 1, "\xc3\x01\x01\x02\x03\x04\x05\x06\x07\x08", 10, NULL), 0);
    cmr_metric_batch_t other = {.agent_id = 1, .interval_ms = 1000, .environment_id = "shop"};
    cmr_buf_t enc = {0};
    assert_int_equal(cmr_msg_encode(CMR_MSG_METRIC_BATCH, &other, &enc, err, sizeof err), CMR_WIRE_OK);
    assert_int_equal(cmr_producer_send_raw(p, budget_topic, "shop/1", 6, enc.data, enc.len, NULL), 0);
    cmr_buf_free(&enc);
    char long_id[200];
    memset(long_id, 'x', sizeof long_id - 1);
    long_id[sizeof long_id - 1] = '\0';
    cmr_budget_removal_msg_t stray = {.environment_id = long_id, .revision = 1, .method_id = 1, .reason = "stray"};
    assert_int_equal(cmr_producer_send(p, CMR_MSG_BUDGET_REMOVAL, &stray, NULL, NULL, err, sizeof err), CMR_SEND_OK);
    cmr_budget_removal_msg_t r = {.environment_id = "shop",
                                  .revision = 1,
                                  .method_id = 0x1122334455667788,
                                  .agent_id = 0x0102030405060708,
                                  .time_ms = 1700000000000,
                                  .calls = 30000000,
                                  .self_ns_per_call = 5.0,
                                  .cost_pct = 50.0,
                                  .reason = "first decision"};
    assert_int_equal(cmr_producer_send(p, CMR_MSG_BUDGET_REMOVAL, &r, NULL, NULL, err, sizeof err), CMR_SEND_OK);
    r.reason = "probes 90 ns per call > self time 5.0 ns <b>"; /* the same key again: it replaces the first */
    assert_int_equal(cmr_producer_send(p, CMR_MSG_BUDGET_REMOVAL, &r, NULL, NULL, err, sizeof err), CMR_SEND_OK);
    r.revision = 0; /* an older revision: history */
    r.method_id = 0x0a0b0c0d0e0f1011;
    r.cost_pct = 70.0;
    r.reason = "older";
    assert_int_equal(cmr_producer_send(p, CMR_MSG_BUDGET_REMOVAL, &r, NULL, NULL, err, sizeof err), CMR_SEND_OK);
    r.environment_id = "elsewhere"; /* another environment's */
    assert_int_equal(cmr_producer_send(p, CMR_MSG_BUDGET_REMOVAL, &r, NULL, NULL, err, sizeof err), CMR_SEND_OK);
    assert_int_equal(cmr_producer_flush(p, 10000), 0);
    cmr_producer_destroy(p, 0);

    json_t *env = NULL, *b = NULL;
    for (int i = 0; i < 100; i++) {
        json_decref(env);
        env = get_json("/api/environments/shop", 200);
        b = json_object_get(env, "budget");
        if (json_integer_value(json_object_get(b, "history")) == 1 &&
            !strcmp(json_string_value(json_object_get(json_array_get(json_object_get(b, "removals"), 0), "reason")),
                    "probes 90 ns per call > self time 5.0 ns <b>"))
            break;
        cmr_sleep_ms(100);
    }
    assert_int_equal(json_integer_value(json_object_get(b, "in_force")), 1);
    assert_int_equal(json_integer_value(json_object_get(b, "history")), 1);
    assert_true(json_real_value(json_object_get(b, "pct")) == 2.5); /* the environment's own budget */
    assert_true(json_is_false(json_object_get(b, "off")));
    assert_non_null(strstr(json_string_value(json_object_get(env, "yaml")), "overhead_budget_pct: 2.5\n"));
    json_t *list = json_object_get(b, "removals");
    assert_int_equal(json_array_size(list), 2);
    json_t *first = json_array_get(list, 0); /* in force first, though the other costs more */
    assert_string_equal(json_string_value(json_object_get(first, "method_id")), "1122334455667788");
    assert_true(json_is_true(json_object_get(first, "in_force")));
    assert_string_equal(json_string_value(json_object_get(first, "reason")),
                        "probes 90 ns per call > self time 5.0 ns <b>");
    assert_int_equal(json_integer_value(json_object_get(first, "calls")), 30000000);
    assert_string_equal(json_string_value(json_object_get(first, "agent")), "0102030405060708");
    json_t *second = json_array_get(list, 1);
    assert_string_equal(json_string_value(json_object_get(second, "method_id")), "0a0b0c0d0e0f1011");
    assert_false(json_is_true(json_object_get(second, "in_force")));
    json_decref(env);
    json_t *all = get_json("/api/environments", 200);
    json_t *shop = json_array_get(json_object_get(all, "environments"), 0);
    assert_string_equal(json_string_value(json_object_get(shop, "id")), "shop");
    assert_int_equal(json_integer_value(json_object_get(shop, "budget_removed")), 1);
    json_decref(all);

    /* names: cmr-ingest's method table, through cmr-ui; an unknown id is null */
    json_t *names = get_json("/api/methods?ids=1122334455667788,0a0b0c0d0e0f1011", 200);
    json_t *m = json_object_get(names, "methods");
    assert_int_equal(json_object_size(m), 2);
    assert_true(json_is_null(json_object_get(m, "1122334455667788")));
    json_decref(names);
    json_decref(get_json("/api/methods?ids=12345", 400));
    json_decref(get_json("/api/methods", 400));
}

/* --- a diagnosis from start to stop ------------------------------------------------------ */

static json_t *diagnosis(const char *id)
{
    char target[64];
    snprintf(target, sizeof target, "/api/diagnoses/%s", id);
    return get_json(target, 200);
}

static void test_diagnosis_round(void **state)
{
    (void)state;
    const char *body =
        "{\"environment\":\"shop\",\"method\":\"shop.Cart.add(I)V\",\"ttl\":\"5m\",\"when\":[\"http.path=/"
        "cart*\"],\"max_hits\":100}";
    json_t *started = post_json("/api/diagnoses", WRITE_HEADERS, body, 201);
    char id[17];
    snprintf(id, sizeof id, "%s", json_string_value(json_object_get(started, "id")));
    json_decref(started);
    json_t *d = diagnosis(id), *x = json_object_get(d, "diagnosis");
    assert_string_equal(json_string_value(json_object_get(x, "state")), "active");
    assert_string_equal(json_string_value(json_object_get(x, "method")), "shop.Cart.add(I)V");
    assert_string_equal(json_string_value(json_array_get(json_object_get(x, "conditions"), 0)), "http.path=/cart*");
    assert_int_equal(json_integer_value(json_object_get(x, "ttl_ms")), 300000);
    assert_non_null(strstr(json_string_value(json_object_get(x, "author")), "cmr-ui (127.0.0.1)"));
    json_decref(d);
    /* one diagnosis per method and environment */
    json_decref(post_json("/api/diagnoses", WRITE_HEADERS, body, 409));
    /* untick a method, then the same again: no new revision */
    char target[96];
    snprintf(target, sizeof target, "/api/diagnoses/%s/exclude", id);
    json_t *r = post_json(target, WRITE_HEADERS, "{\"exclude\":[\"shop.Cart.price(I)J\"]}", 200);
    assert_int_equal(json_integer_value(json_object_get(r, "revision")), 2);
    json_decref(r);
    r = post_json(target, WRITE_HEADERS, "{\"exclude\":[\"shop.Cart.price(I)J\"]}", 200);
    assert_true(json_is_true(json_object_get(r, "unchanged")));
    json_decref(r);
    d = diagnosis(id);
    x = json_object_get(d, "diagnosis");
    assert_int_equal(json_integer_value(json_object_get(x, "revision")), 2);
    assert_string_equal(json_string_value(json_array_get(json_object_get(x, "exclude"), 0)), "shop.Cart.price(I)J");
    assert_int_equal(json_array_size(json_object_get(d, "history")), 2);
    json_decref(d);
    json_decref(post_json(target, WRITE_HEADERS, "{\"exclude\":[\"not a method\"]}", 400));
    /* stop; stopping again is a conflict; an unknown id is not found */
    snprintf(target, sizeof target, "/api/diagnoses/%s/stop", id);
    json_decref(post_json(target, WRITE_HEADERS, "", 200));
    d = diagnosis(id);
    x = json_object_get(d, "diagnosis");
    assert_string_equal(json_string_value(json_object_get(x, "state")), "ended");
    assert_string_equal(json_string_value(json_object_get(x, "end_reason")), "stopped");
    json_decref(d);
    json_decref(post_json(target, WRITE_HEADERS, "", 409));
    json_decref(post_json("/api/diagnoses/00000000000000ff/stop", WRITE_HEADERS, "", 404));
    json_t *list = get_json("/api/diagnoses", 200);
    assert_int_equal(json_array_size(json_object_get(list, "diagnoses")), 1);
    json_decref(list);
}

/* --- read-only, and the access token ------------------------------------------------------ */

static cmr_ui_t *second_ui(const char *key, const char *value)
{
    cmr_conf_t *c = cmr_conf_dup(conf);
    cmr_conf_set(c, key, value, "test");
    char err[512];
    cmr_ui_t *u = cmr_ui_start(c, err, sizeof err);
    if (!u)
        fprintf(stderr, "cmr-ui: %s\n", err);
    cmr_conf_destroy(c);
    assert_non_null(u);
    return u;
}

static void test_read_only(void **state)
{
    (void)state;
    cmr_ui_t *ro = second_ui("ui.writable", "false");
    char *body = NULL;
    assert_int_equal(request(cmr_ui_port(ro), "POST", "/api/diagnoses", WRITE_HEADERS,
                             "{\"environment\":\"shop\",\"method\":\"shop.Cart.x()V\"}", &body, NULL),
                     403);
    assert_non_null(strstr(body, "read-only"));
    free(body);
    assert_int_equal(request(cmr_ui_port(ro), "GET", "/api/diagnoses", NULL, NULL, NULL, NULL), 200);
    cmr_ui_stop(ro);
}

static void test_token(void **state)
{
    (void)state;
    char path[] = "/tmp/cmr-ui-token-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *token = "0123456789abcdef-secret";
    assert_int_equal(write(fd, token, strlen(token)), (ssize_t)strlen(token));
    close(fd);
    chmod(path, 0600);
    cmr_ui_t *t = second_ui("ui.token_file", path);
    int p = cmr_ui_port(t);
    assert_int_equal(request(p, "GET", "/api/session", NULL, NULL, NULL, NULL), 401);
    assert_int_equal(request(p, "GET", "/", NULL, NULL, NULL, NULL), 401);
    assert_int_equal(
        request(p, "GET", "/api/session", "Authorization: Bearer 0123456789abcdef-secret\r\n", NULL, NULL, NULL), 200);
    assert_int_equal(
        request(p, "GET", "/api/session", "Authorization: Bearer 0123456789abcdef-wrong!\r\n", NULL, NULL, NULL), 401);
    /* /login: the form without the token; the token as a cookie */
    assert_int_equal(request(p, "GET", "/login", NULL, NULL, NULL, NULL), 200);
    assert_int_equal(request(p, "POST", "/login", "Content-Type: application/x-www-form-urlencoded\r\n",
                             "token=wrong-token-of-length", NULL, NULL),
                     403);
    char *head = NULL;
    /* the form's encoding: '+' and %XX ("0123456789abcdef-secret" with its '-' escaped) */
    assert_int_equal(request(p, "POST", "/login", "Content-Type: application/x-www-form-urlencoded\r\n",
                             "token=0123456789abcdef%2Dsecret", NULL, &head),
                     303);
    const char *set = strstr(head, "Set-Cookie: cmr_token=");
    assert_non_null(set);
    char session[65] = "";
    sscanf(set + strlen("Set-Cookie: cmr_token="), "%64[0-9a-f]", session);
    assert_int_equal(strlen(session), 64); /* a random value of the process, not the token */
    assert_non_null(strstr(set, "; Path=/; HttpOnly; SameSite=Strict"));
    assert_non_null(strstr(head, "Location: /"));
    free(head);
    char cookie[128];
    snprintf(cookie, sizeof cookie, "Cookie: cmr_token=%s\r\n", session);
    assert_int_equal(request(p, "GET", "/api/session", cookie, NULL, NULL, NULL), 200);
    assert_int_equal(
        request(p, "GET", "/api/session", "Cookie: cmr_token=0123456789abcdef-secret\r\n", NULL, NULL, NULL), 401);
    /* before signing in: a browser is sent to /login, whose style sheet is open */
    assert_int_equal(request(p, "GET", "/", "Accept: text/html\r\n", NULL, NULL, &head), 303);
    assert_non_null(strstr(head, "Location: /login"));
    free(head);
    assert_int_equal(request(p, "GET", "/css/app.css", NULL, NULL, NULL, NULL), 200);
    assert_int_equal(request(p, "GET", "/js/app.js", NULL, NULL, NULL, NULL), 401);
    cmr_ui_stop(t);
    unlink(path);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_ui_server CMR-BROKER\n");
        return 2;
    }
    broker_bin = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_static_files),    cmocka_unit_test(test_reads_passed_to_ingest),
        cmocka_unit_test(test_write_checks),    cmocka_unit_test(test_environments),
        cmocka_unit_test(test_budget_removals), cmocka_unit_test(test_diagnosis_round),
        cmocka_unit_test(test_read_only),       cmocka_unit_test(test_token),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

/*
 * cfg_unit_test.c - cmr-config without Kafka: mapping resolution (globs, CIDR v4/v6, first
 * match), the environment file (a full document, and every kind of error with its line),
 * the configuration projection (revisions, deletes, replays) and the registration answer.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmr/cfg_answer.h"
#include "cmr/cfg_diagnose.h"
#include "cmr/cfg_doc.h"
#include "cmr/cfg_match.h"
#include "cmr/cfg_state.h"
#include "cmr/ids.h"
#include "cmr/wire.h"

static const char *full_doc = "# a comment\n"
                              "version: 1\n"
                              "environments:\n"
                              "  - id: shop\n"
                              "    name: Shop production\n"
                              "    strategy:\n"
                              "      send_interval_ms: 500\n"
                              "      max_threads: 64\n"
                              "    sensors:\n"
                              "      - sensor: timer\n"
                              "        class: com.shop.*\n"
                              "        method: \"get*\"\n"
                              "        descriptor: \"()*\"\n"
                              "        modifiers: [public, \"!static\"]\n"
                              "      - sensor: invocation-sequence\n"
                              "        class: \"*\"\n"
                              "        interface: javax.servlet.Servlet\n"
                              "        method: service\n"
                              "        constructors: true\n"
                              "        trivial: true\n"
                              "      - sensor: anchor\n"
                              "        class: \"*\"\n"
                              "        annotation: com.shop.Traced\n"
                              "        superclass: com/shop/Base\n"
                              "  - id: batch\n"
                              "    sensors: []\n"
                              "mappings:\n"
                              "  - agent: \"shop-*\"\n"
                              "    address: 10.0.0.0/8\n"
                              "    environment: shop\n"
                              "  - agent: \"*\"\n"
                              "    address: \"2001:db8::/32\"\n"
                              "    environment: batch\n";

/* Every modifier, negated, fits CMR_CFG_MODIFIERS_MAX (the writer asserts it). */
static void test_modifiers_str(void **state)
{
    (void)state;
    char buf[CMR_CFG_MODIFIERS_MAX];
    cmr_cfg_modifiers_str(0xffff, "!", buf, sizeof buf);
    assert_string_equal(buf, "!public, !private, !protected, !static, !final, !synchronized, !bridge, !varargs, "
                             "!native, !abstract, !strict, !synthetic");
    cmr_cfg_modifiers_str(0x0009, NULL, buf, sizeof buf);
    assert_string_equal(buf, "public, static");
}

static void test_glob(void **state)
{
    (void)state;
    assert_true(cmr_cfg_glob("shop-*", "shop-eu-1"));
    assert_false(cmr_cfg_glob("shop-*", "shopping"));
    assert_true(cmr_cfg_glob("com/shop/*", "com/shop/cart/Cart")); /* '*' crosses '/' */
    assert_true(cmr_cfg_glob("get?", "getX"));
    assert_false(cmr_cfg_glob("get?", "get"));
    assert_true(cmr_cfg_glob("[ab]*", "beta"));
    assert_true(cmr_cfg_glob("*", ""));
}

static void test_cidr_v4(void **state)
{
    (void)state;
    cmr_cfg_addr_t a;
    char err[256];
    assert_int_equal(cmr_cfg_addr_parse("10.0.0.0/8", &a, err, sizeof err), 0);
    assert_true(cmr_cfg_addr_match(&a, "10.255.1.2"));
    assert_false(cmr_cfg_addr_match(&a, "11.0.0.1"));
    assert_true(cmr_cfg_addr_match(&a, "::ffff:10.1.2.3")); /* v4-mapped */
    assert_false(cmr_cfg_addr_match(&a, "fe80::1"));
    assert_false(cmr_cfg_addr_match(&a, "not-an-ip"));
    assert_int_equal(cmr_cfg_addr_parse("192.168.1.128/25", &a, err, sizeof err), 0);
    assert_true(cmr_cfg_addr_match(&a, "192.168.1.200"));
    assert_false(cmr_cfg_addr_match(&a, "192.168.1.127"));
    assert_int_equal(cmr_cfg_addr_parse("192.168.1.7", &a, err, sizeof err), 0);
    assert_true(cmr_cfg_addr_match(&a, "192.168.1.7"));
    assert_false(cmr_cfg_addr_match(&a, "192.168.1.8"));
    assert_int_equal(cmr_cfg_addr_parse("0.0.0.0/0", &a, err, sizeof err), 0);
    assert_true(cmr_cfg_addr_match(&a, "8.8.8.8"));
    assert_int_equal(cmr_cfg_addr_parse("10.0.0.0/33", &a, err, sizeof err), -1);
    assert_non_null(strstr(err, "0..32"));
    assert_int_equal(cmr_cfg_addr_parse("10.0.0/8", &a, err, sizeof err), -1);
    assert_int_equal(cmr_cfg_addr_parse("/8", &a, err, sizeof err), -1);
    assert_int_equal(cmr_cfg_addr_parse("*", &a, err, sizeof err), 0);
    assert_true(cmr_cfg_addr_match(&a, "anything"));
}

static void test_cidr_v6(void **state)
{
    (void)state;
    cmr_cfg_addr_t a;
    char err[256];
    assert_int_equal(cmr_cfg_addr_parse("2001:db8::/32", &a, err, sizeof err), 0);
    assert_true(cmr_cfg_addr_match(&a, "2001:db8:1::42"));
    assert_false(cmr_cfg_addr_match(&a, "2001:db9::1"));
    assert_false(cmr_cfg_addr_match(&a, "10.0.0.1"));
    assert_int_equal(cmr_cfg_addr_parse("fe80::/10", &a, err, sizeof err), 0);
    assert_true(cmr_cfg_addr_match(&a, "febf::1"));
    assert_false(cmr_cfg_addr_match(&a, "fec0::1"));
    assert_int_equal(cmr_cfg_addr_parse("::1", &a, err, sizeof err), 0);
    assert_true(cmr_cfg_addr_match(&a, "0:0:0:0:0:0:0:1"));
    assert_int_equal(cmr_cfg_addr_parse("2001:db8::/129", &a, err, sizeof err), -1);
    assert_non_null(strstr(err, "0..128"));
}

static void test_resolve_first_match(void **state)
{
    (void)state;
    cmr_agent_mapping_t m[] = {
        {"shop-*", "10.0.0.0/8", "shop"},
        {"shop-*", "*", "shop-other"},
        {"*", "2001:db8::/32", "v6"},
    };
    char *ips_a[] = {"192.168.0.1", "10.1.1.1"};
    cmr_strings_t a = {ips_a, 2};
    assert_int_equal(cmr_cfg_resolve(m, 3, "shop-1", &a), 0); /* any of the addresses */
    char *ips_b[] = {"192.168.0.1"};
    cmr_strings_t b = {ips_b, 1};
    assert_int_equal(cmr_cfg_resolve(m, 3, "shop-1", &b), 1);
    assert_int_equal(cmr_cfg_resolve(m, 3, "billing", &b), -1);
    char *ips_c[] = {"2001:db8::5"};
    cmr_strings_t c = {ips_c, 1};
    assert_int_equal(cmr_cfg_resolve(m, 3, "billing", &c), 2);
    cmr_strings_t none = {NULL, 0};
    assert_int_equal(cmr_cfg_resolve(m, 3, "billing", &none), -1);
    assert_int_equal(cmr_cfg_resolve(m, 3, "shop-x", &none), 1);
}

static void test_doc_full(void **state)
{
    (void)state;
    cmr_cfg_doc_t d;
    char err[512];
    assert_int_equal(cmr_cfg_doc_parse(full_doc, strlen(full_doc), "env.yaml", &d, err, sizeof err), 0);
    assert_int_equal(d.n_envs, 2);
    cmr_environment_t *shop = &d.envs[0];
    assert_string_equal(shop->id, "shop");
    assert_string_equal(shop->name, "Shop production");
    assert_int_equal(d.env_lines[0], 4);
    assert_int_equal(shop->strategy.send_interval_ms, 500);
    assert_int_equal(shop->strategy.max_threads, 64);
    assert_int_equal(shop->strategy.ring_records, 65536); /* default */
    assert_int_equal(shop->assignments.count, 3);
    cmr_sensor_assignment_t *t = &shop->assignments.items[0];
    assert_int_equal(t->sensor, CMR_SENSOR_TIMER);
    assert_string_equal(t->class_pattern, "com/shop/*"); /* dots become slashes */
    assert_string_equal(t->method_pattern, "get*");
    assert_string_equal(t->descriptor_pattern, "()*");
    assert_int_equal(t->modifiers_required, 0x0001);
    assert_int_equal(t->modifiers_excluded, 0x0008);
    assert_false(t->constructors);
    cmr_sensor_assignment_t *s = &shop->assignments.items[1];
    assert_int_equal(s->sensor, CMR_SENSOR_INVOCATION_SEQUENCE);
    assert_string_equal(s->interface, "javax/servlet/Servlet");
    assert_true(s->constructors);
    assert_true(s->trivial);
    assert_false(t->trivial); /* default: trivial methods are left out */
    assert_null(s->superclass);
    cmr_sensor_assignment_t *an = &shop->assignments.items[2];
    assert_string_equal(an->annotation, "com/shop/Traced");
    assert_string_equal(an->superclass, "com/shop/Base");
    assert_string_equal(an->method_pattern, "*"); /* default */
    assert_string_equal(d.envs[1].name, "batch"); /* name defaults to id */
    assert_int_equal(d.envs[1].assignments.count, 0);
    assert_true(d.has_mappings);
    assert_int_equal(d.n_mappings, 2);
    assert_string_equal(d.mappings[1].address, "2001:db8::/32");
    assert_int_equal(d.mapping_lines[1], 31);

    /* what `show` prints parses back into the same environment */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    fprintf(f, "version: 1\nenvironments:\n");
    cmr_cfg_write_env(shop, f);
    cmr_cfg_write_mappings(d.mappings, d.n_mappings, f);
    fclose(f);
    cmr_cfg_doc_t again;
    assert_int_equal(cmr_cfg_doc_parse(text, len, "shown", &again, err, sizeof err), 0);
    assert_true(cmr_cfg_env_equal(shop, &again.envs[0]));
    assert_int_equal(again.n_mappings, 2);
    cmr_cfg_doc_free(&again);
    free(text);
    cmr_cfg_doc_free(&d);
}

/* A document that must be rejected, and the message it must produce. */
static void expect_error(const char *text, const char *want)
{
    cmr_cfg_doc_t d;
    char err[512] = "";
    int rc = cmr_cfg_doc_parse(text, strlen(text), "f.yaml", &d, err, sizeof err);
    if (rc != -1 || !strstr(err, want))
        fail_msg("expected an error containing \"%s\", got rc=%d \"%s\"", want, rc, err);
}

/* An environment as `show` prints it, in a document of its own (the caller frees it). */
static char *shown(const cmr_environment_t *env, size_t *len)
{
    char *text = NULL;
    FILE *f = open_memstream(&text, len);
    assert_non_null(f);
    fputs("version: 1\nenvironments:\n", f);
    cmr_cfg_write_env(env, f);
    fclose(f);
    return text;
}

/* trace_context: the environment's policy for incoming trace headers. */
static void test_doc_trace_context(void **state)
{
    (void)state;
    char err[512];
    cmr_cfg_doc_t d;
    const char *any = "version: 1\nenvironments:\n  - id: edge\n    trace_context: any\n";
    assert_int_equal(cmr_cfg_doc_parse(any, strlen(any), "f.yaml", &d, err, sizeof err), 0);
    assert_int_equal(d.envs[0].trace_context, CMR_TRACE_CONTEXT_ANY);
    /* printed (show, diff) and read back the same */
    size_t len = 0;
    char *text = shown(&d.envs[0], &len);
    assert_non_null(strstr(text, "trace_context: any"));
    cmr_cfg_doc_t again;
    assert_int_equal(cmr_cfg_doc_parse(text, len, "shown", &again, err, sizeof err), 0);
    assert_true(cmr_cfg_env_equal(&d.envs[0], &again.envs[0]));
    free(text);
    cmr_cfg_doc_free(&again);
    cmr_cfg_doc_free(&d);
    /* the default is authenticated; a different policy is a change */
    const char *def = "version: 1\nenvironments:\n  - id: edge\n";
    assert_int_equal(cmr_cfg_doc_parse(def, strlen(def), "f.yaml", &again, err, sizeof err), 0);
    assert_int_equal(again.envs[0].trace_context, CMR_TRACE_CONTEXT_AUTHENTICATED);
    assert_int_equal(cmr_cfg_doc_parse(any, strlen(any), "f.yaml", &d, err, sizeof err), 0);
    assert_false(cmr_cfg_env_equal(&d.envs[0], &again.envs[0]));
    cmr_cfg_doc_free(&again);
    cmr_cfg_doc_free(&d);
    const char *bad = "version: 1\nenvironments:\n  - id: edge\n    trace_context: trusting\n";
    assert_int_equal(cmr_cfg_doc_parse(bad, strlen(bad), "f.yaml", &d, err, sizeof err), -1);
    assert_non_null(strstr(err, "f.yaml:4"));
    assert_non_null(strstr(err, "authenticated, any, none"));
}

/* request_headers: the names an entry trace keeps, lower-cased; printed and read back the
 * same; a change of them is a change; bad names, credentials, duplicates, too many refused. */
static void test_doc_request_headers(void **state)
{
    (void)state;
    char err[512];
    cmr_cfg_doc_t d, again;
    const char *ok = "version: 1\nenvironments:\n  - id: edge\n    request_headers: [X-Request-Id, user-agent]\n";
    assert_int_equal(cmr_cfg_doc_parse(ok, strlen(ok), "f.yaml", &d, err, sizeof err), 0);
    assert_int_equal(d.envs[0].request_headers.count, 2);
    assert_string_equal(d.envs[0].request_headers.items[0], "x-request-id");
    assert_string_equal(d.envs[0].request_headers.items[1], "user-agent");
    size_t len = 0;
    char *text = shown(&d.envs[0], &len);
    assert_non_null(strstr(text, "request_headers: [\"x-request-id\", \"user-agent\"]"));
    assert_int_equal(cmr_cfg_doc_parse(text, len, "shown", &again, err, sizeof err), 0);
    assert_true(cmr_cfg_env_equal(&d.envs[0], &again.envs[0]));
    free(text);
    cmr_cfg_doc_free(&again);
    const char *none = "version: 1\nenvironments:\n  - id: edge\n";
    assert_int_equal(cmr_cfg_doc_parse(none, strlen(none), "f.yaml", &again, err, sizeof err), 0);
    assert_int_equal(again.envs[0].request_headers.count, 0);
    assert_false(cmr_cfg_env_equal(&d.envs[0], &again.envs[0]));
    cmr_cfg_doc_free(&again);
    cmr_cfg_doc_free(&d);
    static const char *const bad[][2] = {
        {"[\"x request\"]", "not a header name"},
        {"[Authorization]", "carries credentials"},
        {"[cookie]", "carries credentials"},
        {"[a, A]", "listed twice"},
        {"[\"\"]", "1 to 64 bytes"},
        {"[a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, q]", "at most 16"},
        {"x-request-id", "expected a list"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char doc[256];
        snprintf(doc, sizeof doc, "version: 1\nenvironments:\n  - id: edge\n    request_headers: %s\n", bad[i][0]);
        assert_int_equal(cmr_cfg_doc_parse(doc, strlen(doc), "f.yaml", &d, err, sizeof err), -1);
        if (!strstr(err, bad[i][1]))
            fail_msg("%s: %s", bad[i][0], err);
        assert_non_null(strstr(err, "f.yaml:4"));
    }
}

/* overhead_budget_pct: the environment's own budget (2.5, "5%"), 0 = off, absent = the
 * instrumenter's; printed and read back the same; a change of it is a change; bad values
 * refused with their line. */
static void test_doc_overhead_budget(void **state)
{
    (void)state;
    char err[512];
    static const struct {
        const char *yaml;
        double want;
        const char *shown; /* in cmr-config show's text, or NULL: not printed */
    } ok[] = {
        {"2.5", 2.5, "overhead_budget_pct: 2.5\n"},           {"\"5%\"", 5, "overhead_budget_pct: 5\n"},
        {"100", 100, "overhead_budget_pct: 100\n"},           {"0", CMR_BUDGET_OFF, "overhead_budget_pct: 0\n"},
        {"0.0%", CMR_BUDGET_OFF, "overhead_budget_pct: 0\n"}, {NULL, 0, NULL},
    };
    cmr_cfg_doc_t d, again;
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char doc[256];
        snprintf(doc, sizeof doc, "version: 1\nenvironments:\n  - id: shop\n%s%s\n",
                 ok[i].yaml ? "    overhead_budget_pct: " : "", ok[i].yaml ? ok[i].yaml : "");
        assert_int_equal(cmr_cfg_doc_parse(doc, strlen(doc), "f.yaml", &d, err, sizeof err), 0);
        assert_true(d.envs[0].overhead_budget_pct == ok[i].want);
        size_t len = 0;
        char *text = shown(&d.envs[0], &len);
        if (ok[i].shown)
            assert_non_null(strstr(text, ok[i].shown));
        else
            assert_null(strstr(text, "overhead_budget_pct"));
        assert_int_equal(cmr_cfg_doc_parse(text, len, "shown", &again, err, sizeof err), 0);
        assert_true(cmr_cfg_env_equal(&d.envs[0], &again.envs[0]));
        free(text);
        cmr_cfg_doc_free(&again);
        cmr_cfg_doc_free(&d);
    }
    const char *a = "version: 1\nenvironments:\n  - id: shop\n    overhead_budget_pct: 3\n";
    const char *b = "version: 1\nenvironments:\n  - id: shop\n    overhead_budget_pct: 4\n";
    assert_int_equal(cmr_cfg_doc_parse(a, strlen(a), "a.yaml", &d, err, sizeof err), 0);
    assert_int_equal(cmr_cfg_doc_parse(b, strlen(b), "b.yaml", &again, err, sizeof err), 0);
    assert_false(cmr_cfg_env_equal(&d.envs[0], &again.envs[0])); /* a new revision */
    cmr_cfg_doc_free(&again);
    cmr_cfg_doc_free(&d);
    static const char *const bad[] = {"-1", "101", "three", "3 %", "5%%", "nan", "[3]", "\"\""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char doc[256];
        snprintf(doc, sizeof doc, "version: 1\nenvironments:\n  - id: shop\n    overhead_budget_pct: %s\n", bad[i]);
        assert_int_equal(cmr_cfg_doc_parse(doc, strlen(doc), "f.yaml", &d, err, sizeof err), -1);
        if (!strstr(err, "f.yaml:4") || (bad[i][0] != '[' && !strstr(err, "percentage of CPU time")))
            fail_msg("%s: %s", bad[i], err);
    }
}

/* Threshold rules: units, defaults, a round trip through show, and the errors. */
static void test_doc_thresholds(void **state)
{
    (void)state;
    char err[512];
    cmr_cfg_doc_t d;
    const char *yaml = "version: 1\nenvironments:\n  - id: shop\n    strategy:\n      stall_threshold_ms: 2500\n"
                       "    thresholds:\n"
                       "      - name: slow-checkout\n        transaction: \"*Checkout*\"\n        statistic: p99\n"
                       "        above: 250ms\n        for: 30s\n        min_count: 20\n        diagnose: true\n"
                       "      - name: errors\n        method: \"com.shop.*\"\n        statistic: error_rate\n"
                       "        above: 5%\n"
                       "      - name: tail\n        method: \"*\"\n        statistic: P99.9\n        above: 1.5s\n"
                       "        for: 2m\n";
    assert_int_equal(cmr_cfg_doc_parse(yaml, strlen(yaml), "f.yaml", &d, err, sizeof err), 0);
    const cmr_environment_t *e = &d.envs[0];
    assert_int_equal(e->strategy.stall_threshold_ms, 2500);
    assert_int_equal(e->thresholds.count, 3);
    const cmr_threshold_rule_t *r = e->thresholds.items;
    assert_string_equal(r[0].name, "slow-checkout");
    assert_int_equal(r[0].scope, CMR_THRESHOLD_TRANSACTION);
    assert_string_equal(r[0].pattern, "*Checkout*");
    assert_int_equal(r[0].statistic, CMR_STAT_P99);
    assert_true(r[0].above == 250.0);
    assert_int_equal(r[0].for_ms, 30000);
    assert_int_equal(r[0].min_count, 20);
    assert_true(r[0].diagnose);
    assert_int_equal(r[1].scope, CMR_THRESHOLD_METHOD);
    assert_int_equal(r[1].statistic, CMR_STAT_ERROR_RATE);
    assert_true(r[1].above == 0.05);
    assert_int_equal(r[1].for_ms, 60000); /* the default */
    assert_int_equal(r[1].min_count, 1);
    assert_false(r[1].diagnose);
    assert_int_equal(r[2].statistic, CMR_STAT_P999);
    assert_true(r[2].above == 1500.0);
    assert_int_equal(r[2].for_ms, 120000);
    /* printed and read back the same; a changed limit is a change */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    fputs("version: 1\nenvironments:\n", f);
    cmr_cfg_write_env(e, f);
    fclose(f);
    cmr_cfg_doc_t again;
    assert_int_equal(cmr_cfg_doc_parse(text, len, "shown", &again, err, sizeof err), 0);
    assert_true(cmr_cfg_env_equal(e, &again.envs[0]));
    again.envs[0].thresholds.items[1].above = 0.06;
    assert_false(cmr_cfg_env_equal(e, &again.envs[0]));
    free(text);
    cmr_cfg_doc_free(&again);
    /* and through the wire */
    cmr_config_change_t cc = {.kind = CMR_CONFIG_ENVIRONMENT, .author = "t", .environment = &d.envs[0]};
    cmr_buf_t wire = {0};
    assert_int_equal(cmr_msg_encode(CMR_MSG_CONFIG_CHANGE, &cc, &wire, err, sizeof err), CMR_WIRE_OK);
    cmr_msg_t m;
    assert_int_equal(cmr_msg_decode(wire.data, wire.len, &m, err, sizeof err), CMR_WIRE_OK);
    assert_true(cmr_cfg_env_equal(e, m.u.config_change.environment));
    cmr_msg_free(&m);
    cmr_buf_free(&wire);
    cmr_cfg_doc_free(&d);

    const char *head = "version: 1\nenvironments:\n  - id: a\n    thresholds:\n";
    char bad[600];
#define BAD_RULE(body, msg)                            \
    do {                                               \
        snprintf(bad, sizeof bad, "%s%s", head, body); \
        expect_error(bad, msg);                        \
    } while (0)
    BAD_RULE("      - name: x\n        method: \"*\"\n        statistic: p42\n        above: 1\n",
             "f.yaml:7: environments[0].thresholds[0].statistic: unknown statistic \"p42\"");
    BAD_RULE("      - name: x\n        method: \"*\"\n        statistic: p99\n        above: fast\n",
             "f.yaml:8: environments[0].thresholds[0].above: \"fast\" is not a duration");
    BAD_RULE("      - name: x\n        method: \"*\"\n        statistic: error_rate\n        above: 150%\n",
             "an error rate is at most 1");
    BAD_RULE("      - name: x\n        method: \"*\"\n        statistic: p99\n        above: 1s\n        for: 10ms\n",
             "thresholds[0].for: 10ms is outside 1000ms..30 days");
    BAD_RULE("      - name: x\n        statistic: p99\n        above: 1s\n",
             "thresholds[0]: missing \"transaction\" or \"method\"");
    BAD_RULE("      - name: x\n        method: a\n        transaction: b\n        statistic: p99\n        above: 1s\n",
             "either transactions or methods, not both");
    BAD_RULE("      - name: x\n        method: a\n        statistic: p99\n", "thresholds[0]: missing \"above\"");
    BAD_RULE("      - name: x\n        method: a\n        statistic: p99\n        above: 1s\n"
             "      - name: x\n        method: b\n        statistic: max\n        above: 2s\n",
             "rule \"x\" is defined twice");
    BAD_RULE("      - name: x\n        method: a\n        statistic: p99\n        above: 1s\n        window: 1m\n",
             "unknown key \"window\"");
    char long_name[200];
    memset(long_name, 'r', 150);
    long_name[150] = '\0';
    char body[400];
    snprintf(body, sizeof body, "      - name: %s\n        method: a\n        statistic: p99\n        above: 1s\n",
             long_name);
    BAD_RULE(body, "a rule's name is 1 to 128 bytes");
#undef BAD_RULE
}

static void test_doc_errors(void **state)
{
    (void)state;
    expect_error("", "f.yaml: empty file");
    expect_error("version: 1\nenvironments:\n  - id: a\n    sensors:\n      - sensor: tmer\n        class: x\n",
                 "f.yaml:5: environments[0].sensors[0].sensor: unknown sensor \"tmer\"");
    expect_error("version: 2\n", "f.yaml:1: version: this cmr-config reads format version 1, the file has 2");
    expect_error("environments: []\n", "f.yaml:1: top level: missing \"version: 1\"");
    expect_error("version: 1\nenvironment: []\n", "f.yaml:2: top level: unknown key \"environment\"");
    expect_error("version: 1\nenvironments:\n  - id: a\n  - id: a\n",
                 "f.yaml:4: environments[1]: environment \"a\" is defined twice (first at line 3)");
    expect_error("version: 1\nenvironments:\n  - name: x\n", "f.yaml:3: environments[0]: missing \"id\"");
    expect_error("version: 1\nenvironments:\n  - id: \"a b\"\n",
                 "f.yaml:3: environments[0].id: \"a b\" is not a valid");
    expect_error("version: 1\nenvironments:\n  - id: a\n    strategy:\n      send_interval_ms: fast\n",
                 "f.yaml:5: environments[0].strategy.send_interval_ms: \"fast\" is not an integer");
    expect_error("version: 1\nenvironments:\n  - id: a\n    strategy:\n      ring_records: 1\n",
                 "f.yaml:5: environments[0].strategy.ring_records: 1 is outside 64..16777216");
    expect_error("version: 1\nenvironments:\n  - id: a\n    sensors:\n      - sensor: timer\n",
                 "f.yaml:5: environments[0].sensors[0]: missing \"class\"");
    expect_error("version: 1\nenvironments:\n  - id: a\n    sensors:\n      - class: x\n",
                 "f.yaml:5: environments[0].sensors[0]: missing \"sensor\"");
    expect_error("version: 1\nenvironments:\n  - id: a\n    sensors:\n      - sensor: timer\n        class: x\n"
                 "        modifiers: [public, statik]\n",
                 "f.yaml:7: environments[0].sensors[0].modifiers: unknown modifier \"statik\"");
    expect_error("version: 1\nenvironments:\n  - id: a\n    sensors:\n      - sensor: timer\n        class: x\n"
                 "        modifiers: [static, \"!static\"]\n",
                 "modifier static is both required and excluded");
    expect_error("version: 1\nenvironments:\n  - id: a\n    sensors:\n      - sensor: timer\n        class: x\n"
                 "        descriptor: V\n",
                 "f.yaml:7: environments[0].sensors[0].descriptor: a method descriptor starts with '('");
    expect_error("version: 1\nenvironments:\n  - id: a\n    sensors:\n      - sensor: timer\n        class: x\n"
                 "        constructors: maybe\n",
                 "f.yaml:7: environments[0].sensors[0].constructors: \"maybe\" is not a boolean");
    expect_error("version: 1\nenvironments:\n  - id: a\n    sensors:\n      - sensor: timer\n        klass: x\n",
                 "f.yaml:6: environments[0].sensors[0]: unknown key \"klass\"");
    expect_error("version: 1\nmappings:\n  - agent: x\n    address: 10.0.0.0/40\n    environment: a\n",
                 "f.yaml:4: mappings[0].address: \"10.0.0.0/40\": prefix length must be 0..32");
    expect_error("version: 1\nmappings:\n  - agent: x\n    address: bogus\n    environment: a\n",
                 "f.yaml:4: mappings[0].address: \"bogus\" is not an IP address");
    expect_error("version: 1\nmappings:\n  - agent: x\n", "f.yaml:3: mappings[0]: missing \"environment\"");
    expect_error("version: 1\nenvironments:\n  - id: a\n    sensors: {}\n",
                 "f.yaml:4: environments[0].sensors: expected a list");
    /* YAML syntax errors carry the line too */
    expect_error("version: 1\nenvironments:\n  - id: [a\n  - id: b\n", "f.yaml:4: YAML syntax:");
    expect_error("version: 1\n\tenvironments: []\n", "f.yaml:2: YAML syntax:");
    /* a long message is whole when the caller's buffer holds it (it was cut at 400 bytes) */
    char text[600], key[301];
    memset(key, 'k', 300);
    key[300] = '\0';
    snprintf(text, sizeof text,
             "version: 1\nenvironments:\n  - id: a\n    sensors:\n      - sensor: timer\n        %s: x\n", key);
    expect_error(text, "descriptor, modifiers, constructors, trivial)");
}

/* Strictness: what YAML or fnmatch would silently accept and the file format refuses. */
static void test_doc_strict(void **state)
{
    (void)state;
    /* duplicate keys, at every depth, with both lines */
    expect_error("version: 1\nversion: 1\n",
                 "f.yaml:2: key \"version\" appears twice in the same mapping (first at line 1)");
    expect_error("version: 1\nenvironments:\n  - id: a\n    name: x\n    id: b\n",
                 "f.yaml:5: key \"id\" appears twice in the same mapping (first at line 3)");
    expect_error("version: 1\nenvironments:\n  - id: a\n    sensors:\n      - {sensor: timer, class: x, class: y}\n",
                 "f.yaml:5: key \"class\" appears twice");
    expect_error("version: 1\nmappings:\n  - {agent: x, environment: a, environment: b}\n",
                 "f.yaml:3: key \"environment\"");
    /* the same key in two different mappings is fine */
    const char *two = "version: 1\nenvironments:\n  - id: a\n  - id: b\n";
    cmr_cfg_doc_t d;
    char err[512];
    assert_int_equal(cmr_cfg_doc_parse(two, strlen(two), "f.yaml", &d, err, sizeof err), 0);
    assert_int_equal(d.n_envs, 2);
    cmr_cfg_doc_free(&d);
    /* a second document */
    expect_error("version: 1\nenvironments: []\n---\nversion: 1\n", "f.yaml:3: a second YAML document starts here");
    expect_error("version: 1\n---\nfoo: [\n", "YAML syntax:");
    /* globs that can never match, in every place a glob goes */
    expect_error("version: 1\nmappings:\n  - {agent: \"[a-\", environment: a}\n",
                 "f.yaml:3: mappings[0].agent: glob \"[a-\" can never match: the bracket expression at offset 0 is "
                 "not terminated");
    expect_error(
        "version: 1\nenvironments:\n  - id: a\n    sensors:\n      - sensor: timer\n        class: \"com.[z-a]*\"\n",
        "f.yaml:6: environments[0].sensors[0].class: glob \"com/[z-a]*\" can never match: the bracket "
        "expression at offset 4 matches no character");
    expect_error("version: 1\nenvironments:\n  - id: a\n    sensors:\n      - sensor: timer\n        class: x\n"
                 "        method: \"get[[:nope:]]\"\n",
                 "f.yaml:7: environments[0].sensors[0].method: glob \"get[[:nope:]]\" can never match");
    expect_error("version: 1\nenvironments:\n  - id: a\n    sensors:\n      - sensor: timer\n        class: x\n"
                 "        descriptor: \"(*\\\\\"\n",
                 "f.yaml:7: environments[0].sensors[0].descriptor: glob \"(*\\\" can never match: it ends with a lone "
                 "backslash");
    char why[200];
    const char *good[] = {"*",    "",           "shop-*",       "[ab]*", "[!a]x", "[]]",
                          "[!]]", "\\[literal", "[[:alpha:]]?", "a[-]b", "[^x]"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        if (cmr_cfg_glob_check(good[i], why, sizeof why) != 0)
            fail_msg("glob \"%s\" refused: %s", good[i], why);
    const char *bad[] = {"[a-", "x[", "[a", "[!]", "[[:alpha:]", "[z-a]", "a\\"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (cmr_cfg_glob_check(bad[i], why, sizeof why) == 0)
            fail_msg("glob \"%s\" accepted", bad[i]);
}

/* Files: regular files only, a size limit, and no content in messages. */
static void test_doc_load_files(void **state)
{
    (void)state;
    cmr_cfg_doc_t d;
    char err[512] = "";
    assert_int_equal(cmr_cfg_doc_load("/dev/zero", &d, err, sizeof err), -1);
    assert_non_null(strstr(err, "/dev/zero"));
    char dir[] = "/tmp/cfg_unit_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char fifo[64], big[64], secret[64];
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    snprintf(big, sizeof big, "%s/big.yaml", dir);
    snprintf(secret, sizeof secret, "%s/secret", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(cmr_cfg_doc_load(fifo, &d, err, sizeof err), -1); /* refused, does not block */
    FILE *f = fopen(big, "w");
    assert_non_null(f);
    assert_int_equal(fseek(f, 17 << 20, SEEK_SET), 0); /* 17 MiB, sparse */
    fputc('\n', f);
    fclose(f);
    assert_int_equal(cmr_cfg_doc_load(big, &d, err, sizeof err), -1);
    assert_non_null(strstr(err, big));
    /* a file that is no environment file: the message names it, never quotes it */
    f = fopen(secret, "w");
    assert_non_null(f);
    fputs("root:$6$s3cr3tHASH:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n", f);
    fclose(f);
    assert_int_equal(cmr_cfg_doc_load(secret, &d, err, sizeof err), -1);
    assert_non_null(strstr(err, secret));
    assert_null(strstr(err, "s3cr3t"));
    assert_null(strstr(err, "root"));
    f = fopen(secret, "w");
    assert_non_null(f);
    fputs("version: 1\n  password: [s3cr3t\n", f); /* a syntax error */
    fclose(f);
    assert_int_equal(cmr_cfg_doc_load(secret, &d, err, sizeof err), -1);
    assert_null(strstr(err, "s3cr3t"));
    unlink(fifo);
    unlink(big);
    unlink(secret);
    rmdir(dir);
}

/* --- projection --------------------------------------------------------------------- */

static void encode_change(const cmr_config_change_t *c, cmr_buf_t *out)
{
    char err[256];
    memset(out, 0, sizeof *out);
    assert_int_equal(cmr_msg_encode(CMR_MSG_CONFIG_CHANGE, c, out, err, sizeof err), CMR_WIRE_OK);
}

static int apply_change(cmr_cfg_state_t *s, const cmr_config_change_t *c)
{
    cmr_buf_t b;
    char err[256];
    encode_change(c, &b);
    int rc = cmr_cfg_state_apply(s, b.data, b.len, NULL, err, sizeof err);
    cmr_buf_free(&b);
    return rc;
}

static void test_state_projection(void **state)
{
    (void)state;
    cmr_cfg_doc_t d;
    char err[512];
    assert_int_equal(cmr_cfg_doc_parse(full_doc, strlen(full_doc), "env.yaml", &d, err, sizeof err), 0);
    cmr_cfg_state_t *s = cmr_cfg_state_new();
    cmr_config_change_t c = {CMR_CONFIG_ENVIRONMENT, 1, 0, "test", &d.envs[0], {NULL, 0}};
    assert_int_equal(apply_change(s, &c), CMR_CFG_ENV_CHANGED);
    assert_int_equal(apply_change(s, &c), CMR_CFG_IGNORED); /* replay */
    int64_t rev = 0;
    const cmr_environment_t *e = cmr_cfg_state_env(s, "shop", &rev);
    assert_non_null(e);
    assert_int_equal(rev, 1);
    assert_true(cmr_cfg_env_equal(e, &d.envs[0]));
    c.environment = &d.envs[1];
    assert_int_equal(apply_change(s, &c), CMR_CFG_ENV_CHANGED);
    assert_int_equal(cmr_cfg_state_env_count(s), 2);
    assert_string_equal(cmr_cfg_state_env_at(s, 0, NULL)->id, "batch"); /* id order */

    cmr_config_change_t m = {CMR_CONFIG_MAPPINGS, 3, 0, "test", NULL, {d.mappings, d.n_mappings}};
    assert_int_equal(apply_change(s, &m), CMR_CFG_MAPPINGS_CHANGED);
    m.revision = 2;
    assert_int_equal(apply_change(s, &m), CMR_CFG_IGNORED); /* older */
    size_t n;
    cmr_cfg_state_mappings(s, &n, &rev);
    assert_int_equal(n, 2);
    assert_int_equal(rev, 3);

    /* delete, then a stale create is ignored */
    cmr_config_change_t del = {CMR_CONFIG_ENVIRONMENT_DELETED, 2, 0, "test", &d.envs[1], {NULL, 0}};
    assert_int_equal(apply_change(s, &del), CMR_CFG_ENV_DELETED);
    assert_null(cmr_cfg_state_env(s, "batch", NULL));
    assert_int_equal(apply_change(s, &c), CMR_CFG_IGNORED);
    assert_int_equal(cmr_cfg_state_key_revision(s, "batch"), 2);
    assert_int_equal(cmr_cfg_state_key_revision(s, "mappings"), 3);
    assert_int_equal(cmr_cfg_state_key_revision(s, "nope"), 0);

    /* not a ConfigChange: an error, nothing changes */
    cmr_bytecode_resend_t other = {1, 2, "a/B", 0, 3};
    cmr_buf_t b = {0};
    assert_int_equal(cmr_msg_encode(CMR_MSG_BYTECODE_RESEND, &other, &b, err, sizeof err), CMR_WIRE_OK);
    assert_int_equal(cmr_cfg_state_apply(s, b.data, b.len, NULL, err, sizeof err), -1);
    assert_int_equal(cmr_cfg_state_apply(s, "junk", 4, NULL, err, sizeof err), -1);
    cmr_buf_free(&b);
    assert_int_equal(cmr_cfg_state_env_count(s), 1);

    /* answers */
    char *ips[] = {"10.2.3.4"};
    cmr_agent_registration_t reg = {.instance_id = "0123456789abcdef0123456789abcdef",
                                    .agent_name = "shop-1",
                                    .hostname = "h1",
                                    .ip_addresses = {ips, 1}};
    cmr_cfg_answer_t a;
    cmr_cfg_answer(s, &reg, 5, &a);
    assert_true(a.configured);
    assert_int_equal((uint64_t)a.cfg.agent_id, cmr_agent_id("shop-1", "h1", reg.instance_id));
    assert_string_equal(a.cfg.environment_id, "shop");
    assert_int_equal(a.cfg.revision, 1);
    assert_int_equal(a.cfg.sensors.count, 3);
    assert_int_equal(a.cfg.strategy.send_interval_ms, 500);
    reg.agent_name = "billing";
    cmr_cfg_answer(s, &reg, 5, &a);
    assert_false(a.configured);
    assert_non_null(
        strstr(a.no_env.reason, "no agent mapping matches agent name \"billing\" with addresses [10.2.3.4]"));
    char *ips6[] = {"2001:db8::7"};
    reg.ip_addresses = (cmr_strings_t){ips6, 1};
    cmr_cfg_answer(s, &reg, 5, &a); /* maps to the deleted "batch" */
    assert_false(a.configured);
    assert_non_null(strstr(a.no_env.reason, "names environment \"batch\", which does not exist"));
    cmr_cfg_state_free(s);
    cmr_cfg_doc_free(&d);
}

/* --exclude: class prefixes and methods, in their wire form; bad methods refused */
static void test_diag_exclude_options(void **state)
{
    (void)state;
    cmr_conf_t *c = cmr_conf_new();
    assert_non_null(c);
    cmr_conf_set(c, "diag.env", "shop", "test");
    cmr_conf_set(c, "diag.method", "com.shop.Checkout.checkout", "test");
    cmr_conf_set(c, "diag.exclude",
                 "com.shop.generated,com/shop/gen2,com.shop.Cart.add,com.shop.Cart.put(ILjava/lang/String;)V,"
                 "com/shop/Cart$Item.get,Top.run,com.shop.Cart.<init>()V",
                 "test");
    cmr_diagnosis_t d;
    cmr_cfg_diag_mem_t mem;
    char err[1200];
    int rc = cmr_cfg_diag_from_options(c, "me", &d, &mem, err, sizeof err);
    if (rc)
        fail_msg("%s", err);
    assert_int_equal(d.exclude.count, 7);
    const char *want[] = {
        "com/shop/generated",     "com/shop/gen2", "com/shop/Cart.add",      "com/shop/Cart.put(ILjava/lang/String;)V",
        "com/shop/Cart$Item.get", "Top.run",       "com/shop/Cart.<init>()V"};
    for (size_t i = 0; i < 7; i++)
        assert_string_equal(d.exclude.items[i], want[i]);
    cmr_cfg_diag_mem_free(&mem);

    static const char *const bad[] = {
        "com.shop.Cart.put(I",                    /* no ')' */
        "com.shop.Cart.put(Q)V",                  /* no such type */
        "com.shop.Cart.put(I)",                   /* no return type */
        "com.shop.Cart.put(Ljava.lang.String;)V", /* dots in a descriptor */
        "com.shop.Cart.put(L;)V",                 /* empty class name */
        "com.shop.Cart.put(I)VV",                 /* trailing */
        "com.shop.Cart.a;b",                      /* bad method name */
        "com.shop.Checkout.checkout",             /* the diagnosed method itself */
        "com.shop.Checkout.checkout(I)V",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cmr_conf_set(c, "diag.exclude", bad[i], "test");
        err[0] = '\0';
        rc = cmr_cfg_diag_from_options(c, "me", &d, &mem, err, sizeof err);
        if (rc == 0)
            fail_msg("--exclude %s accepted", bad[i]);
        assert_non_null(strstr(err, "--exclude"));
        cmr_cfg_diag_mem_free(&mem);
    }
    /* at most CMR_CFG_DIAG_MAX_EXCLUDE entries */
    char many[CMR_CFG_DIAG_MAX_EXCLUDE * 12 + 32];
    size_t len = 0;
    for (int i = 0; i <= CMR_CFG_DIAG_MAX_EXCLUDE; i++)
        len += (size_t)snprintf(many + len, sizeof many - len, "%sp%d/", i ? "," : "", i);
    cmr_conf_set(c, "diag.exclude", many, "test");
    assert_int_equal(cmr_cfg_diag_from_options(c, "me", &d, &mem, err, sizeof err), -1);
    assert_non_null(strstr(err, "at most 256"));
    cmr_cfg_diag_mem_free(&mem);
    cmr_conf_set(c, "diag.exclude", strchr(many, ',') + 1, "test"); /* 256 */
    assert_int_equal(cmr_cfg_diag_from_options(c, "me", &d, &mem, err, sizeof err), 0);
    assert_int_equal(d.exclude.count, CMR_CFG_DIAG_MAX_EXCLUDE);
    cmr_cfg_diag_mem_free(&mem);
    cmr_conf_destroy(c);
}

/* A new revision with methods excluded and included again: the wire form, idempotence,
 * overloads, refusals; the current revision is not touched. */
static void test_diag_revise_exclude(void **state)
{
    (void)state;
    char *items[] = {"com/shop/gen/", "com/shop/Cart.put(I)V"};
    cmr_diagnosis_t cur = {.id = "00000000000000aa",
                           .revision = 3,
                           .environment_id = "shop",
                           .class_name = "com/shop/Checkout",
                           .method_name = "checkout",
                           .descriptor = "",
                           .exclude = {items, 2},
                           .state = CMR_DIAG_ACTIVE,
                           .author = "first",
                           .started_ms = 1000,
                           .time_ms = 1000};
    cmr_diagnosis_t next;
    cmr_cfg_diag_mem_t mem;
    char err[1200];
    /* one method, dotted: appended in the wire form */
    const char *add1[] = {"com.shop.Cart.add"};
    assert_int_equal(cmr_cfg_diag_revise_exclude(&cur, add1, 1, NULL, 0, "op", 5000, &next, &mem, err, sizeof err), 0);
    assert_int_equal(next.revision, 4);
    assert_string_equal(next.author, "op");
    assert_int_equal(next.time_ms, 5000);
    assert_int_equal(next.started_ms, 1000);
    assert_string_equal(next.id, cur.id);
    assert_int_equal(next.exclude.count, 3);
    assert_string_equal(next.exclude.items[0], "com/shop/gen/");
    assert_string_equal(next.exclude.items[1], "com/shop/Cart.put(I)V");
    assert_string_equal(next.exclude.items[2], "com/shop/Cart.add");
    assert_int_equal(cur.exclude.count, 2);
    cmr_cfg_diag_mem_free(&mem);
    /* excluded already (the same entry, or covered by nothing new): no revision */
    const char *add2[] = {"com/shop/Cart.put(I)V"};
    assert_int_equal(cmr_cfg_diag_revise_exclude(&cur, add2, 1, NULL, 0, "op", 5000, &next, &mem, err, sizeof err),
                     CMR_CFG_DIAG_UNCHANGED);
    assert_int_equal(next.revision, 3);
    cmr_cfg_diag_mem_free(&mem);
    /* including what is not excluded: no revision */
    assert_int_equal(cmr_cfg_diag_revise_exclude(&cur, NULL, 0, add1, 1, "op", 5000, &next, &mem, err, sizeof err),
                     CMR_CFG_DIAG_UNCHANGED);
    cmr_cfg_diag_mem_free(&mem);
    /* included again: the entry goes, the prefix stays */
    const char *rm1[] = {"com.shop.Cart.put(I)V"};
    assert_int_equal(cmr_cfg_diag_revise_exclude(&cur, NULL, 0, rm1, 1, "op", 6000, &next, &mem, err, sizeof err), 0);
    assert_int_equal(next.exclude.count, 1);
    assert_string_equal(next.exclude.items[0], "com/shop/gen/");
    cmr_cfg_diag_mem_free(&mem);
    /* every overload replaces the single overload; then one overload is covered */
    const char *all[] = {"com.shop.Cart.put"};
    assert_int_equal(cmr_cfg_diag_revise_exclude(&cur, all, 1, NULL, 0, "op", 6000, &next, &mem, err, sizeof err), 0);
    assert_int_equal(next.exclude.count, 2);
    assert_string_equal(next.exclude.items[1], "com/shop/Cart.put");
    cmr_diagnosis_t next2;
    cmr_cfg_diag_mem_t mem2;
    const char *one[] = {"com.shop.Cart.put(J)V"};
    assert_int_equal(cmr_cfg_diag_revise_exclude(&next, one, 1, NULL, 0, "op", 7000, &next2, &mem2, err, sizeof err),
                     CMR_CFG_DIAG_UNCHANGED);
    cmr_cfg_diag_mem_free(&mem2);
    /* ... and including one overload of a method excluded whole is refused */
    assert_int_equal(cmr_cfg_diag_revise_exclude(&next, NULL, 0, one, 1, "op", 7000, &next2, &mem2, err, sizeof err),
                     CMR_CFG_DIAG_BAD);
    assert_non_null(strstr(err, "every overload"));
    cmr_cfg_diag_mem_free(&mem2);
    /* including it whole removes it */
    assert_int_equal(cmr_cfg_diag_revise_exclude(&next, NULL, 0, all, 1, "op", 7000, &next2, &mem2, err, sizeof err),
                     0);
    assert_int_equal(next2.revision, 5);
    assert_int_equal(next2.exclude.count, 1);
    cmr_cfg_diag_mem_free(&mem2);
    cmr_cfg_diag_mem_free(&mem);
    /* refusals: a bad method, the selected method, an ended diagnosis */
    const char *bad[] = {"com.shop.Cart.put(X)V"};
    assert_int_equal(cmr_cfg_diag_revise_exclude(&cur, bad, 1, NULL, 0, "op", 5000, &next, &mem, err, sizeof err),
                     CMR_CFG_DIAG_BAD);
    assert_non_null(strstr(err, "descriptor"));
    cmr_cfg_diag_mem_free(&mem);
    const char *nodot[] = {"put"};
    assert_int_equal(cmr_cfg_diag_revise_exclude(&cur, NULL, 0, nodot, 1, "op", 5000, &next, &mem, err, sizeof err),
                     CMR_CFG_DIAG_BAD);
    cmr_cfg_diag_mem_free(&mem);
    const char *self[] = {"com.shop.Checkout.checkout(I)V"};
    assert_int_equal(cmr_cfg_diag_revise_exclude(&cur, self, 1, NULL, 0, "op", 5000, &next, &mem, err, sizeof err),
                     CMR_CFG_DIAG_BAD);
    assert_non_null(strstr(err, "diagnosed method"));
    cmr_cfg_diag_mem_free(&mem);
    cur.state = CMR_DIAG_ENDED;
    cur.end_reason = CMR_DIAG_END_STOPPED;
    assert_int_equal(cmr_cfg_diag_revise_exclude(&cur, add1, 1, NULL, 0, "op", 5000, &next, &mem, err, sizeof err),
                     CMR_CFG_DIAG_ENDED);
    assert_non_null(strstr(err, "has ended already (stopped)"));
    cmr_cfg_diag_mem_free(&mem);
    /* the wire form of one method */
    char e[CMR_CFG_DIAG_ENTRY_MAX];
    assert_int_equal(cmr_cfg_diag_method_entry("a.b.C.d([[J)[Ljava/lang/Object;", e, sizeof e, err, sizeof err), 0);
    assert_string_equal(e, "a/b/C.d([[J)[Ljava/lang/Object;");
    assert_int_equal(cmr_cfg_diag_method_entry("a.b.C.d(I)V x", e, sizeof e, err, sizeof err), CMR_CFG_DIAG_BAD);
    assert_int_equal(cmr_cfg_diag_method_entry("a..C.d", e, sizeof e, err, sizeof err), CMR_CFG_DIAG_BAD);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_glob),
        cmocka_unit_test(test_modifiers_str),
        cmocka_unit_test(test_cidr_v4),
        cmocka_unit_test(test_cidr_v6),
        cmocka_unit_test(test_resolve_first_match),
        cmocka_unit_test(test_doc_full),
        cmocka_unit_test(test_doc_trace_context),
        cmocka_unit_test(test_doc_request_headers),
        cmocka_unit_test(test_doc_overhead_budget),
        cmocka_unit_test(test_doc_errors),
        cmocka_unit_test(test_doc_thresholds),
        cmocka_unit_test(test_state_projection),
        cmocka_unit_test(test_doc_strict),
        cmocka_unit_test(test_doc_load_files),
        cmocka_unit_test(test_diag_exclude_options),
        cmocka_unit_test(test_diag_revise_exclude),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

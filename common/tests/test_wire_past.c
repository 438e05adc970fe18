/*
 * test_wire_past.c - messages written under past versions of a schema (schemas/past/)
 * decode into the current struct, the fields added since taking the current schema's
 * defaults; schemas/versions.txt lists exactly the versions the codec reads.
 *
 * A message of a past version is made the way an old writer made it (msg_past.h). The
 * schema files are read from $CMR_SOURCE_DIR/schemas.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/file.h"
#include "cmr/metrics_http.h"
#include "cmr/wire.h"
#include "msg_fill.h"
#include "msg_past.h"

static const char *schema_dir(void)
{
    static char dir[512];
    const char *src = getenv("CMR_SOURCE_DIR");
    if (!src)
        fail_msg("CMR_SOURCE_DIR is not set (ctest sets it)");
    snprintf(dir, sizeof dir, "%s/schemas", src);
    return dir;
}

/* The .avsc files of schemas/past/. */
static size_t count_past_files(void)
{
    char dir[600];
    snprintf(dir, sizeof dir, "%s/past", schema_dir());
    DIR *d = opendir(dir);
    size_t n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += strlen(e->d_name) > 5 && strcmp(e->d_name + strlen(e->d_name) - 5, ".avsc") == 0;
    if (d)
        closedir(d);
    return n;
}

static void encode_as_past(cmr_msg_type_t type, const void *body, uint64_t fingerprint, cmr_buf_t *out)
{
    if (msg_encode_past(type, body, fingerprint, out) != 0)
        fail_msg("could not write %s as past version %016llx", cmr_msg_type_name(type),
                 (unsigned long long)fingerprint);
}


static void fill_environment_change(cmr_config_change_t *c)
{
    static cmr_sensor_assignment_t assignment;
    static cmr_threshold_rule_t rule;
    static char *headers[] = {"x-tenant"};
    static cmr_agent_mapping_t mapping = {"shop-*", "10.0.0.0/8", "e1"};
    static cmr_environment_t env;
    assignment = (cmr_sensor_assignment_t){.sensor = CMR_SENSOR_INVOCATION_SEQUENCE,
                                           .class_pattern = "com.shop.*",
                                           .superclass = "com.shop.Base",
                                           .method_pattern = "*",
                                           .modifiers_required = 1,
                                           .modifiers_excluded = 8,
                                           .constructors = true,
                                           .trivial = true};
    rule = (cmr_threshold_rule_t){.name = "slow",
                                  .scope = CMR_THRESHOLD_TRANSACTION,
                                  .pattern = "*",
                                  .statistic = CMR_STAT_P99,
                                  .above = 250,
                                  .for_ms = 60000,
                                  .min_count = 5};
    env = (cmr_environment_t){.id = "e1", .name = "shop", .description = "the shop"};
    env.assignments.items = &assignment;
    env.assignments.count = 1;
    env.strategy = (cmr_strategy_t){.send_interval_ms = 200,
                                    .ring_records = 4096,
                                    .max_batch_events = 512,
                                    .metric_interval_ms = 5000,
                                    .max_threads = 64,
                                    .stall_threshold_ms = 5,
                                    .max_segment_events = 77};
    env.trace_context = CMR_TRACE_CONTEXT_ANY;
    env.thresholds.items = &rule;
    env.thresholds.count = 1;
    env.request_headers = (cmr_strings_t){headers, 1};
    env.overhead_budget_pct = 2.5;
    *c = (cmr_config_change_t){
        .kind = CMR_CONFIG_ENVIRONMENT, .revision = 7, .time_ms = 1700000000000, .author = "ops", .environment = &env};
    c->mappings.items = &mapping;
    c->mappings.count = 1;
}

static void test_versions_listed(void **state)
{
    (void)state;
    assert_int_equal(cmr_wire_past_init(), 0);
    /* Every file of schemas/past/ is read, under the fingerprint its name says. */
    size_t nfiles = count_past_files();
    assert_true(nfiles > 0);
    assert_int_equal(cmr_wire_past_count(), nfiles);
    for (size_t i = 0; i < cmr_wire_past_count(); i++) {
        cmr_msg_type_t t;
        uint64_t fp;
        assert_int_equal(cmr_wire_past_version(i, &t, &fp), 0);
        char path[1024];
        if (msg_past_file(fp, path, sizeof path) != 0)
            fail_msg("past version %016llx of %s: no schemas/past file names it", (unsigned long long)fp,
                     cmr_msg_type_name(t));
    }
    assert_int_equal(cmr_wire_past_version(cmr_wire_past_count(), &(cmr_msg_type_t){0}, &(uint64_t){0}), -1);

    /* schemas/versions.txt lists the current and past versions, and nothing else. */
    char path[600];
    snprintf(path, sizeof path, "%s/versions.txt", schema_dir());
    cmr_buf_t file = {0};
    char err[256];
    if (cmr_file_read(path, 1 << 20, &file, err, sizeof err) != 0)
        fail_msg("%s", err);
    char *text = (char *)file.data;
    bool current_listed[CMR_MSG__COUNT] = {0};
    size_t past_listed = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#' || line[0] == '\0')
            continue;
        char name[64], hex[32];
        if (sscanf(line, "%63s %31s", name, hex) != 2)
            fail_msg("versions.txt: bad line '%s'", line);
        int t = cmr_msg_type_by_name(name);
        if (t < 0)
            fail_msg("versions.txt: unknown type %s", name);
        uint64_t fp = strtoull(hex, NULL, 16);
        if (fp == cmr_msg_fingerprint(t)) {
            current_listed[t] = true;
            continue;
        }
        bool found = false;
        for (size_t i = 0; i < cmr_wire_past_count() && !found; i++) {
            cmr_msg_type_t pt;
            uint64_t pfp;
            cmr_wire_past_version(i, &pt, &pfp);
            found = pfp == fp && (int)pt == t;
        }
        if (!found)
            fail_msg("versions.txt lists %s %s, which this build does not read: copy that version of the "
                     "schema to schemas/past/ (see the top of versions.txt)",
                     name, hex);
        past_listed++;
    }
    for (int t = 0; t < CMR_MSG__COUNT; t++)
        if (!current_listed[t])
            fail_msg("the schema of %s changed (fingerprint %016llx not in schemas/versions.txt): keep the "
                     "previous version in schemas/past/ and list the new fingerprint",
                     cmr_msg_type_name(t), (unsigned long long)cmr_msg_fingerprint(t));
    assert_int_equal(past_listed, cmr_wire_past_count());
    cmr_buf_free(&file);
}

static void test_first_config_change_takes_defaults(void **state)
{
    (void)state;
    cmr_config_change_t in;
    fill_environment_change(&in);
    cmr_buf_t old = {0};
    encode_as_past(CMR_MSG_CONFIG_CHANGE, &in, MSG_PAST_CONFIG_CHANGE_FIRST, &old);

    cmr_msg_type_t type = CMR_MSG__COUNT;
    assert_int_equal(cmr_wire_peek_type(old.data, old.len, &type), CMR_WIRE_OK);
    assert_int_equal(type, CMR_MSG_CONFIG_CHANGE);
    uint64_t reads = cmr_wire_past_reads();
    cmr_msg_t out;
    char err[256] = "";
    if (cmr_msg_decode(old.data, old.len, &out, err, sizeof err) != CMR_WIRE_OK)
        fail_msg("decode: %s", err);
    assert_int_equal(cmr_wire_past_reads(), reads + 1);
    assert_int_equal(out.type, CMR_MSG_CONFIG_CHANGE);
    /* counted on every worker's GET /metrics */
    cmr_buf_t metrics = {0};
    char want[96];
    cmr_metrics_common(&metrics);
    snprintf(want, sizeof want, "\ncmr_messages_past_schema_total %llu\n", (unsigned long long)(reads + 1));
    assert_non_null(strstr(cmr_buf_str(&metrics), want));
    cmr_buf_free(&metrics);

    /* What the first version had arrives as written. */
    const cmr_config_change_t *c = &out.u.config_change;
    assert_int_equal(c->kind, CMR_CONFIG_ENVIRONMENT);
    assert_int_equal(c->revision, 7);
    assert_string_equal(c->author, "ops");
    assert_int_equal(c->mappings.count, 1);
    assert_string_equal(c->mappings.items[0].address, "10.0.0.0/8");
    const cmr_environment_t *e = c->environment;
    assert_non_null(e);
    assert_string_equal(e->description, "the shop");
    assert_int_equal(e->assignments.count, 1);
    assert_int_equal(e->assignments.items[0].sensor, CMR_SENSOR_INVOCATION_SEQUENCE);
    assert_string_equal(e->assignments.items[0].superclass, "com.shop.Base");
    assert_null(e->assignments.items[0].interface);
    assert_int_equal(e->assignments.items[0].modifiers_excluded, 8);
    assert_true(e->assignments.items[0].constructors);
    assert_int_equal(e->strategy.max_threads, 64);

    /* What was added since takes the current schema's defaults. */
    assert_false(e->assignments.items[0].trivial);
    assert_int_equal(e->strategy.stall_threshold_ms, 10000);
    assert_int_equal(e->strategy.max_segment_events, 100000);
    assert_int_equal(e->trace_context, CMR_TRACE_CONTEXT_AUTHENTICATED);
    assert_int_equal(e->thresholds.count, 0);
    assert_int_equal(e->request_headers.count, 0);
    assert_true(e->overhead_budget_pct == 0.0);

    /* Re-encoded, it is a current message. */
    cmr_buf_t now = {0};
    assert_int_equal(cmr_msg_encode(CMR_MSG_CONFIG_CHANGE, c, &now, err, sizeof err), CMR_WIRE_OK);
    assert_int_equal(cmr_wire_peek_type(now.data, now.len, &type), CMR_WIRE_OK);
    assert_memory_equal(now.data + 2, &(uint64_t){cmr_msg_fingerprint(CMR_MSG_CONFIG_CHANGE)}, 8);
    cmr_buf_free(&now);
    cmr_msg_free(&out);
    cmr_buf_free(&old);
}

/* Every past version: a message of it decodes, and what that version holds survives:
 * the decoded struct, written again as that version, gives the same bytes. */
static void test_every_past_version_reads(void **state)
{
    (void)state;
    for (size_t i = 0; i < cmr_wire_past_count(); i++) {
        cmr_msg_type_t type;
        uint64_t fp;
        cmr_wire_past_version(i, &type, &fp);
        for (int variant = MSG_FILL_EMPTY; variant <= MSG_FILL_RANDOM; variant++) {
            cmr_msg_t in, out;
            char err[256] = "";
            msg_fill(type, (msg_fill_variant_t)variant, 42 + i, &in);
            if (type == CMR_MSG_CONFIG_CHANGE && in.u.config_change.environment) /* old enum symbols only */
                for (size_t a = 0; a < in.u.config_change.environment->assignments.count; a++)
                    in.u.config_change.environment->assignments.items[a].sensor = CMR_SENSOR_TIMER;
            cmr_buf_t old = {0}, again = {0};
            encode_as_past(type, &in.u, fp, &old);
            if (cmr_msg_decode(old.data, old.len, &out, err, sizeof err) != CMR_WIRE_OK)
                fail_msg("%s %016llx variant %d: %s", cmr_msg_type_name(type), (unsigned long long)fp, variant, err);
            assert_int_equal(out.type, type);
            encode_as_past(type, &out.u, fp, &again);
            assert_int_equal(old.len, again.len);
            assert_memory_equal(old.data, again.data, old.len);
            cmr_msg_free(&in);
            cmr_msg_free(&out);
            cmr_buf_free(&old);
            cmr_buf_free(&again);
        }
    }
}

/* A damaged message of a past version is refused like a current one: checked against
 * its own schema, the reason counted. */
static void test_damaged_past_message_refused(void **state)
{
    (void)state;
    cmr_config_change_t in;
    fill_environment_change(&in);
    cmr_buf_t old = {0};
    encode_as_past(CMR_MSG_CONFIG_CHANGE, &in, MSG_PAST_CONFIG_CHANGE_FIRST, &old);
    cmr_msg_t out;
    char err[256] = "";

    uint64_t corrupt = cmr_wire_rejected(CMR_WIRE_ERR_TRUNCATED) + cmr_wire_rejected(CMR_WIRE_ERR_CORRUPT);
    cmr_wire_err_t rc = cmr_msg_decode(old.data, old.len - 1, &out, err, sizeof err);
    assert_true(rc == CMR_WIRE_ERR_TRUNCATED || rc == CMR_WIRE_ERR_CORRUPT);
    assert_int_equal(cmr_wire_rejected(CMR_WIRE_ERR_TRUNCATED) + cmr_wire_rejected(CMR_WIRE_ERR_CORRUPT), corrupt + 1);

    uint8_t *more = cmr_buf_append(&old, 1);
    *more = 0;
    assert_int_equal(cmr_msg_decode(old.data, old.len, &out, err, sizeof err), CMR_WIRE_ERR_TRAILING);
    assert_non_null(strstr(err, "ConfigChange"));

    /* A fingerprint one bit away from a past one is unknown. */
    old.data[2] ^= 1;
    assert_int_equal(cmr_msg_decode(old.data, old.len - 1, &out, err, sizeof err), CMR_WIRE_ERR_UNKNOWN_FINGERPRINT);
    cmr_buf_free(&old);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_versions_listed),
        cmocka_unit_test(test_first_config_change_takes_defaults),
        cmocka_unit_test(test_every_past_version_reads),
        cmocka_unit_test(test_damaged_past_message_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

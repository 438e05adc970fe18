/*
 * test_agent_options.c - agent options: the option string (with broker lists), the
 * environment, the file, their precedence, and clear errors for bad input.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent_options.h"

static const char *fake_env[][2] = {{NULL, NULL}, {NULL, NULL}, {NULL, NULL}, {NULL, NULL}};

static const char *test_getenv(const char *name)
{
    for (size_t i = 0; i < 4; i++)
        if (fake_env[i][0] && strcmp(fake_env[i][0], name) == 0)
            return fake_env[i][1];
    return NULL;
}

static void clear_env(void)
{
    memset(fake_env, 0, sizeof fake_env);
}

static void test_option_string(void **state)
{
    (void)state;
    clear_env();
    cmr_conf_t *c = cmr_conf_new();
    char err[256];
    assert_int_equal(cmr_agent_options_load("bootstrap=a:1,b:2,c:3,name=shop,log=warn,kafka.acks=all", test_getenv, c,
                                            err, sizeof err),
                     0);
    assert_string_equal(cmr_conf_get(c, "kafka.bootstrap.servers", NULL), "a:1,b:2,c:3");
    assert_string_equal(cmr_conf_get(c, "agent.name", NULL), "shop");
    assert_string_equal(cmr_conf_get(c, "kafka.acks", NULL), "all");
    cmr_agent_settings_t s;
    assert_int_equal(cmr_agent_settings_from_conf(c, &s, err, sizeof err), 0);
    assert_string_equal(s.name, "shop");
    assert_string_equal(s.bootstrap, "a:1,b:2,c:3");
    assert_int_equal(s.ring_records, 16384);
    assert_false(s.strict);
    cmr_conf_destroy(c);
}

static void test_precedence_file_env_options(void **state)
{
    (void)state;
    char path[] = "/tmp/cmr-agent-conf-XXXXXX";
    int fd = mkstemp(path);
    const char *text = "agent.name = from-file\nkafka.bootstrap.servers = file:1\nagent.ring.records = 1024\n";
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    clear_env();
    fake_env[0][0] = "CMR_AGENT_CONFIG";
    fake_env[0][1] = path;
    fake_env[1][0] = "CMR_AGENT_NAME";
    fake_env[1][1] = "from-env";
    fake_env[2][0] = "CMR_AGENT_OPTIONS";
    fake_env[2][1] = "bootstrap=env:2";
    cmr_conf_t *c = cmr_conf_new();
    char err[256];
    assert_int_equal(cmr_agent_options_load("name=from-options", test_getenv, c, err, sizeof err), 0);
    assert_string_equal(cmr_conf_get(c, "agent.name", NULL), "from-options");
    assert_string_equal(cmr_conf_get(c, "kafka.bootstrap.servers", NULL), "env:2");
    assert_string_equal(cmr_conf_get(c, "agent.ring.records", NULL), "1024");
    cmr_conf_destroy(c);
    unlink(path);
}

static void test_bad_options_are_clear(void **state)
{
    (void)state;
    clear_env();
    char err[256];
    cmr_conf_t *c = cmr_conf_new();
    assert_int_equal(cmr_agent_options_load("justaword", test_getenv, c, err, sizeof err), -1);
    assert_non_null(strstr(err, "not key=value"));
    cmr_conf_destroy(c);

    c = cmr_conf_new();
    cmr_agent_settings_t s;
    assert_int_equal(cmr_agent_options_load("bootstrap=x:1,colour=blue", test_getenv, c, err, sizeof err), 0);
    assert_int_equal(cmr_agent_settings_from_conf(c, &s, err, sizeof err), -1);
    assert_non_null(strstr(err, "colour"));
    cmr_conf_destroy(c);

    c = cmr_conf_new();
    assert_int_equal(cmr_agent_options_load("name=x", test_getenv, c, err, sizeof err), 0);
    assert_int_equal(cmr_agent_settings_from_conf(c, &s, err, sizeof err), -1);
    assert_non_null(strstr(err, "no CMR address"));
    cmr_conf_destroy(c);

    c = cmr_conf_new();
    assert_int_equal(cmr_agent_options_load("bootstrap=x:1,agent.ring.records=ten", test_getenv, c, err, sizeof err),
                     0);
    assert_int_equal(cmr_agent_settings_from_conf(c, &s, err, sizeof err), -1);
    assert_non_null(strstr(err, "agent options"));
    cmr_conf_destroy(c);

    c = cmr_conf_new();
    assert_int_equal(cmr_agent_options_load("bootstrap=x:1,log=loud", test_getenv, c, err, sizeof err), 0);
    assert_int_equal(cmr_agent_settings_from_conf(c, &s, err, sizeof err), -1);
    assert_non_null(strstr(err, "log.level"));
    cmr_conf_destroy(c);

    c = cmr_conf_new();
    assert_int_equal(cmr_agent_options_load("config=/nonexistent/agent.conf", test_getenv, c, err, sizeof err), -1);
    assert_non_null(strstr(err, "cannot open"));
    cmr_conf_destroy(c);
}

/* The key table: every row described, its defaults the ones the settings use, and
 * agent.probe.jar (read by agent_entry.c) accepted. */
static void test_key_table(void **state)
{
    (void)state;
    clear_env();
    const cmr_conf_key_t *keys = cmr_agent_keys();
    for (const cmr_conf_key_t *k = keys; k->key; k++)
        assert_true(k->description && *k->description);
    cmr_conf_t *c = cmr_conf_new();
    char err[256];
    assert_int_equal(
        cmr_agent_options_load("bootstrap=x:1,agent.probe.jar=/opt/cmr/p.jar", test_getenv, c, err, sizeof err), 0);
    cmr_agent_settings_t s;
    assert_int_equal(cmr_agent_settings_from_conf(c, &s, err, sizeof err), 0);
    const struct {
        const char *key;
        int64_t value;
    } ints[] = {
        {"agent.register.backoff.max.ms", s.register_backoff_max_ms},
        {"agent.class.buffer.bytes", s.class_buffer_bytes},
        {"agent.ring.records", s.ring_records},
        {"agent.send.interval.ms", s.send_interval_ms},
        {"agent.shutdown.flush.ms", s.shutdown_flush_ms},
        {"agent.metric.interval.ms", s.metric_interval_ms},
        {"agent.max.threads", s.max_threads},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        const cmr_conf_key_t *k = cmr_conf_key_find(keys, ints[i].key);
        assert_non_null(k);
        assert_non_null(k->def);
        assert_int_equal(strtoll(k->def, NULL, 10), ints[i].value);
    }
    assert_string_equal(cmr_conf_key_find(keys, "agent.name")->def, s.name);
    assert_string_equal(cmr_conf_key_find(keys, "agent.strict")->def, s.strict ? "true" : "false");
    cmr_conf_destroy(c);

    /* the Markdown table names every key, its alias and environment variable */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cmr_agent_keys_markdown(f);
    fclose(f);
    assert_non_null(strstr(text, "| `kafka.bootstrap.servers` | `bootstrap` | `CMR_AGENT_BOOTSTRAP` | |"));
    assert_non_null(strstr(text, "| `agent.ring.records` | | | `16384` |"));
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_option_string),
        cmocka_unit_test(test_precedence_file_env_options),
        cmocka_unit_test(test_bad_options_are_clear),
        cmocka_unit_test(test_key_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

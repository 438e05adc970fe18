/*
 * test_agent_options.c - agent options: the option string (with broker lists), the
 * environment, the file, their precedence, and clear errors for bad input; the pinned
 * keys (trust.keys) and the verifier built from them; the configuration file read
 * safely (no hang on a FIFO or /dev/zero, bounded size, contents never in an error).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

    /* 0 turns stalled-call reports and periodic status off; below 0 is a mistake */
    c = cmr_conf_new();
    assert_int_equal(cmr_agent_options_load("bootstrap=x:1,agent.stall.threshold.ms=0,agent.status.interval.ms=0",
                                            test_getenv, c, err, sizeof err),
                     0);
    assert_int_equal(cmr_agent_settings_from_conf(c, &s, err, sizeof err), 0);
    assert_int_equal(s.stall_threshold_ms, 0);
    assert_int_equal(s.status_interval_ms, 0);
    cmr_conf_destroy(c);
    c = cmr_conf_new();
    assert_int_equal(
        cmr_agent_options_load("bootstrap=x:1,agent.status.interval.ms=-5", test_getenv, c, err, sizeof err), 0);
    assert_int_equal(cmr_agent_settings_from_conf(c, &s, err, sizeof err), -1);
    assert_non_null(strstr(err, "agent.status.interval.ms"));
    cmr_conf_destroy(c);

    c = cmr_conf_new();
    assert_int_equal(cmr_agent_options_load("bootstrap=x:1,log=loud", test_getenv, c, err, sizeof err), 0);
    assert_int_equal(cmr_agent_settings_from_conf(c, &s, err, sizeof err), -1);
    assert_non_null(strstr(err, "log.level"));
    cmr_conf_destroy(c);

    c = cmr_conf_new();
    assert_int_equal(cmr_agent_options_load("config=/nonexistent/agent.conf", test_getenv, c, err, sizeof err), -1);
    assert_non_null(strstr(err, "/nonexistent/agent.conf"));
    assert_non_null(strstr(err, strerror(ENOENT))); /* cannot open */
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
        {"agent.virtual.ring.records", s.virtual_ring_records},
        {"agent.max.virtual.threads", s.max_virtual_threads},
        {"agent.stall.threshold.ms", s.stall_threshold_ms},
        {"agent.status.interval.ms", s.status_interval_ms},
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

/* --- trust.keys ------------------------------------------------------------------------- */

static void test_trust_keys_option(void **state)
{
    (void)state;
    clear_env();
    char err[512];
    cmr_agent_settings_t s;
    /* none: no key pinned (accepted: the agent then refuses every command) */
    cmr_conf_t *c = cmr_conf_new();
    assert_int_equal(cmr_agent_options_load("bootstrap=x:1", test_getenv, c, err, sizeof err), 0);
    assert_int_equal(cmr_agent_settings_from_conf(c, &s, err, sizeof err), 0);
    assert_int_equal(s.n_trust_keys, 0);
    cmr_conf_destroy(c);

    /* one, then two separated by ':' (rotation), among other options */
    c = cmr_conf_new();
    assert_int_equal(
        cmr_agent_options_load("bootstrap=x:1,trust.keys=/etc/cmr/a.pub,name=n", test_getenv, c, err, sizeof err), 0);
    assert_int_equal(cmr_agent_settings_from_conf(c, &s, err, sizeof err), 0);
    assert_int_equal(s.n_trust_keys, 1);
    assert_string_equal(s.trust_keys[0], "/etc/cmr/a.pub");
    cmr_conf_destroy(c);
    c = cmr_conf_new();
    assert_int_equal(
        cmr_agent_options_load("bootstrap=x:1,trust.keys=/k/old.pub:/k/new.pub", test_getenv, c, err, sizeof err), 0);
    assert_int_equal(cmr_agent_settings_from_conf(c, &s, err, sizeof err), 0);
    assert_int_equal(s.n_trust_keys, 2);
    assert_string_equal(s.trust_keys[0], "/k/old.pub");
    assert_string_equal(s.trust_keys[1], "/k/new.pub");
    cmr_conf_destroy(c);

    /* from the environment, and the option string over it */
    fake_env[0][0] = "CMR_AGENT_TRUST_KEYS";
    fake_env[0][1] = "/env/k.pub";
    c = cmr_conf_new();
    assert_int_equal(cmr_agent_options_load("bootstrap=x:1", test_getenv, c, err, sizeof err), 0);
    assert_int_equal(cmr_agent_settings_from_conf(c, &s, err, sizeof err), 0);
    assert_int_equal(s.n_trust_keys, 1);
    assert_string_equal(s.trust_keys[0], "/env/k.pub");
    cmr_conf_destroy(c);
    c = cmr_conf_new();
    assert_int_equal(cmr_agent_options_load("bootstrap=x:1,trust.keys=/opt/k.pub", test_getenv, c, err, sizeof err), 0);
    assert_int_equal(cmr_agent_settings_from_conf(c, &s, err, sizeof err), 0);
    assert_string_equal(s.trust_keys[0], "/opt/k.pub");
    cmr_conf_destroy(c);
    clear_env();

    /* three keys, an empty name: refused with the origin named */
    const char *bad[] = {"bootstrap=x:1,trust.keys=/a.pub:/b.pub:/c.pub",
                         "bootstrap=x:1,trust.keys=/a.pub:", "bootstrap=x:1,trust.keys=:/a.pub"};
    const char *why[] = {"more than 2", "empty", "empty"};
    for (size_t i = 0; i < 3; i++) {
        c = cmr_conf_new();
        assert_int_equal(cmr_agent_options_load(bad[i], test_getenv, c, err, sizeof err), 0);
        assert_int_equal(cmr_agent_settings_from_conf(c, &s, err, sizeof err), -1);
        assert_non_null(strstr(err, "trust.keys"));
        assert_non_null(strstr(err, why[i]));
        assert_non_null(strstr(err, "agent options"));
        cmr_conf_destroy(c);
    }
}

/* The verifier pins the keys of trust.keys; a key file that cannot be read or parsed pins
 * none at all and says which file. */
static void test_trust_keys_verifier(void **state)
{
    (void)state;
    char dir[] = "/tmp/cmr-agent-keys-XXXXXX", err[512], path[3][256];
    assert_non_null(mkdtemp(dir));
    assert_int_equal(cmr_trust_keygen(dir, "cur", err, sizeof err), 0);
    assert_int_equal(cmr_trust_keygen(dir, "next", err, sizeof err), 0);
    snprintf(path[0], sizeof path[0], "%s/cur.pub", dir);
    snprintf(path[1], sizeof path[1], "%s/next.pub", dir);
    snprintf(path[2], sizeof path[2], "%s/garbage.pub", dir);
    FILE *f = fopen(path[2], "w");
    assert_non_null(f);
    fputs("cmr-ed25519-public !!!not-base64 secret-looking\n", f);
    fclose(f);

    cmr_agent_settings_t s = {0};
    cmr_verifier_t *v = NULL;
    assert_int_equal(cmr_agent_verifier_new(&s, "00112233445566778899aabbccddeeff", &v, err, sizeof err), 0);
    assert_non_null(v);
    assert_int_equal(cmr_verifier_key_count(v), 0);
    cmr_verifier_free(v);

    s.n_trust_keys = 2;
    snprintf(s.trust_keys[0], sizeof s.trust_keys[0], "%s", path[0]);
    snprintf(s.trust_keys[1], sizeof s.trust_keys[1], "%s", path[1]);
    assert_int_equal(cmr_agent_verifier_new(&s, "00112233445566778899aabbccddeeff", &v, err, sizeof err), 2);
    assert_int_equal(cmr_verifier_key_count(v), 2);
    cmr_verifier_free(v);

    /* a missing file, then an unparsable one after a good one: no key pinned at all */
    snprintf(s.trust_keys[1], sizeof s.trust_keys[1], "%s/missing.pub", dir);
    assert_int_equal(cmr_agent_verifier_new(&s, "00112233445566778899aabbccddeeff", &v, err, sizeof err), -1);
    assert_non_null(v);
    assert_int_equal(cmr_verifier_key_count(v), 0);
    assert_non_null(strstr(err, "missing.pub"));
    cmr_verifier_free(v);
    snprintf(s.trust_keys[1], sizeof s.trust_keys[1], "%s", path[2]);
    assert_int_equal(cmr_agent_verifier_new(&s, "00112233445566778899aabbccddeeff", &v, err, sizeof err), -1);
    assert_int_equal(cmr_verifier_key_count(v), 0);
    assert_non_null(strstr(err, "garbage.pub"));
    assert_null(strstr(err, "secret-looking")); /* the contents are not echoed */
    cmr_verifier_free(v);

    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* --- the configuration file ---------------------------------------------------------------- */

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    fclose(f);
}

/* config= naming a device or a FIFO fails at once (never blocks: the test would time out
 * on alarm), and a file past 1 MiB is refused without being read. */
static void test_config_file_is_read_safely(void **state)
{
    (void)state;
    clear_env();
    char err[512];
    alarm(20); /* a hang kills the test */
    cmr_conf_t *c = cmr_conf_new();
    assert_int_equal(cmr_agent_options_load("config=/dev/zero,bootstrap=x:1", test_getenv, c, err, sizeof err), -1);
    assert_non_null(strstr(err, "/dev/zero"));
    assert_non_null(strstr(err, "not a regular file"));
    cmr_conf_destroy(c);

    char dir[] = "/tmp/cmr-agent-conf-XXXXXX", fifo[128], big[128];
    assert_non_null(mkdtemp(dir));
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    fake_env[0][0] = "CMR_AGENT_CONFIG"; /* through the environment, too */
    fake_env[0][1] = fifo;
    c = cmr_conf_new();
    assert_int_equal(cmr_agent_options_load("bootstrap=x:1", test_getenv, c, err, sizeof err), -1);
    assert_non_null(strstr(err, "not a regular file"));
    cmr_conf_destroy(c);
    clear_env();

    snprintf(big, sizeof big, "%s/big.conf", dir);
    FILE *f = fopen(big, "w");
    assert_non_null(f);
    for (int i = 0; i < 40000; i++) /* ~1.3 MB of valid lines */
        fprintf(f, "agent.name = n%07d-padding-padding\n", i);
    fclose(f);
    char opt[256];
    snprintf(opt, sizeof opt, "config=%s", big);
    c = cmr_conf_new();
    assert_int_equal(cmr_agent_options_load(opt, test_getenv, c, err, sizeof err), -1);
    assert_non_null(strstr(err, "larger than"));
    cmr_conf_destroy(c);
    alarm(0);

    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* A file that does not parse is named by path and line, never quoted: config= may point
 * at a password file by mistake (or on purpose). */
static void test_config_file_errors_do_not_echo_contents(void **state)
{
    (void)state;
    clear_env();
    char dir[] = "/tmp/cmr-agent-conf-XXXXXX", path[128], opt[200], err[512];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/agent.conf", dir);
    snprintf(opt, sizeof opt, "config=%s,bootstrap=x:1", path);
    static const struct {
        const char *text;
        const char *line;
    } cases[] = {
        /* a shadow-style line: no '=' */
        {"# comment\n\nroot:$6$S3cr3tSalt$Hunter2HashHunter2:19000:0:99999:7:::\n", ":3:"},
        /* a key=value that is not the agent's: the key is not shown either */
        {"agent.name = ok\nS3cr3tToken = Hunter2\n", ":2:"},
        /* not a valid key */
        {"\n\n\nS3cr3t Hunter2 = x\n", ":4:"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_file(path, cases[i].text);
        cmr_conf_t *c = cmr_conf_new();
        assert_int_equal(cmr_agent_options_load(opt, test_getenv, c, err, sizeof err), -1);
        char where[200];
        snprintf(where, sizeof where, "%s%s", path, cases[i].line);
        assert_non_null(strstr(err, where));
        assert_null(strstr(err, "S3cr3t"));
        assert_null(strstr(err, "Hunter2"));
        assert_null(strstr(err, "root"));
        cmr_conf_destroy(c);
    }
    /* a NUL byte: not a text file, and nothing after it read */
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fwrite("agent.name = a\n\0S3cr3t\n", 1, 23, f);
    fclose(f);
    cmr_conf_t *c = cmr_conf_new();
    assert_int_equal(cmr_agent_options_load(opt, test_getenv, c, err, sizeof err), -1);
    assert_non_null(strstr(err, "NUL"));
    assert_null(strstr(err, "S3cr3t"));
    cmr_conf_destroy(c);
    /* and a good file still works, with CRLF line ends and trust.keys */
    write_file(path, "agent.name = crlf\r\ntrust.keys = /k/a.pub\r\n");
    c = cmr_conf_new();
    assert_int_equal(cmr_agent_options_load(opt, test_getenv, c, err, sizeof err), 0);
    cmr_agent_settings_t s;
    assert_int_equal(cmr_agent_settings_from_conf(c, &s, err, sizeof err), 0);
    assert_string_equal(s.name, "crlf");
    assert_int_equal(s.n_trust_keys, 1);
    assert_string_equal(s.trust_keys[0], "/k/a.pub");
    cmr_conf_destroy(c);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_option_string),
        cmocka_unit_test(test_precedence_file_env_options),
        cmocka_unit_test(test_bad_options_are_clear),
        cmocka_unit_test(test_key_table),
        cmocka_unit_test(test_trust_keys_option),
        cmocka_unit_test(test_trust_keys_verifier),
        cmocka_unit_test(test_config_file_is_read_safely),
        cmocka_unit_test(test_config_file_errors_do_not_echo_contents),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

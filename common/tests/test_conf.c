/*
 * test_conf.c - configuration files, overrides and command-line conventions.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <malloc.h>

#include "cmr/conf.h"
#include "kafka_internal.h"
#include "cmr/log.h"
#include "cmr/program.h"

static char *write_file(const char *text)
{
    char *path = strdup("/tmp/cmr-test-conf-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

static void test_file_and_getters(void **state)
{
    (void)state;
    char *path = write_file("# comment\n\n  kafka.bootstrap.servers = a:1 , b:2  \n"
                            "broker.port=9092\nflag = yes\n! also a comment\n");
    cmr_conf_t *c = cmr_conf_new();
    char err[256];
    assert_int_equal(cmr_conf_load_file(c, path, err, sizeof err), 0);
    assert_string_equal(cmr_conf_get(c, "kafka.bootstrap.servers", NULL), "a:1 , b:2");
    int64_t port;
    assert_int_equal(cmr_conf_get_int(c, "broker.port", 0, 0, 65535, &port, err, sizeof err), 0);
    assert_int_equal(port, 9092);
    bool flag;
    assert_int_equal(cmr_conf_get_bool(c, "flag", false, &flag, err, sizeof err), 0);
    assert_true(flag);
    assert_int_equal(cmr_conf_get_int(c, "missing", 17, 0, 100, &port, err, sizeof err), 0);
    assert_int_equal(port, 17);
    /* errors name the key and where it was set */
    cmr_conf_set(c, "broker.port", "70000", "here:3");
    assert_int_equal(cmr_conf_get_int(c, "broker.port", 0, 0, 65535, &port, err, sizeof err), -1);
    assert_non_null(strstr(err, "here:3"));
    assert_non_null(strstr(err, "outside"));
    cmr_conf_set(c, "flag", "maybe", NULL);
    assert_int_equal(cmr_conf_get_bool(c, "flag", false, &flag, err, sizeof err), -1);
    cmr_conf_set(c, "n", "12abc", NULL);
    assert_int_equal(cmr_conf_get_int(c, "n", 0, 0, 100, &port, err, sizeof err), -1);
    assert_non_null(strstr(err, "not an integer"));
    cmr_conf_destroy(c);
    unlink(path);
    free(path);
}

static void test_file_errors_have_line_numbers(void **state)
{
    (void)state;
    char *path = write_file("a = 1\nthis line has no equals sign\n");
    cmr_conf_t *c = cmr_conf_new();
    char err[512];
    assert_int_equal(cmr_conf_load_file(c, path, err, sizeof err), -1);
    assert_non_null(strstr(err, ":2:"));
    unlink(path);
    free(path);
    assert_int_equal(cmr_conf_load_file(c, "/nonexistent/cmr.conf", err, sizeof err), -1);
    assert_non_null(strstr(err, "No such file"));
    assert_int_equal(cmr_conf_set_assignment(c, "bad key=1", "cli", err, sizeof err), -1);
    assert_non_null(strstr(err, "bad key")); /* typed on the command line: quoted back */
    cmr_conf_destroy(c);
}

/* A file that is not a configuration file (a password database given by mistake, a device,
 * a FIFO, something huge) is refused at once, and its text never appears in the error. */
static void test_file_hostile(void **state)
{
    (void)state;
    cmr_conf_t *c = cmr_conf_new();
    char err[512];
    char *path = write_file("root:$6$secrethash:19000:0:99999:7:::\n");
    assert_int_equal(cmr_conf_load_file(c, path, err, sizeof err), -1);
    assert_non_null(strstr(err, ":1:"));
    assert_null(strstr(err, "secrethash"));
    unlink(path);
    free(path);
    /* a value from a file is never quoted by the typed getters; a typed one is */
    path = write_file("n = s3cret\nflag = hunter2\n");
    assert_int_equal(cmr_conf_load_file(c, path, err, sizeof err), 0);
    int64_t n;
    bool flag;
    assert_int_equal(cmr_conf_get_int(c, "n", 0, 0, 10, &n, err, sizeof err), -1);
    assert_non_null(strstr(err, ":1: n = (the value in the file)"));
    assert_null(strstr(err, "s3cret"));
    assert_int_equal(cmr_conf_get_bool(c, "flag", false, &flag, err, sizeof err), -1);
    assert_null(strstr(err, "hunter2"));
    cmr_conf_t *dup = cmr_conf_dup(c); /* copies keep the provenance */
    assert_int_equal(cmr_conf_get_int(dup, "n", 0, 0, 10, &n, err, sizeof err), -1);
    assert_null(strstr(err, "s3cret"));
    cmr_conf_destroy(dup);
    assert_int_equal(cmr_conf_set_assignment(c, "n=typed", "command line", err, sizeof err), 0);
    assert_int_equal(cmr_conf_get_int(c, "n", 0, 0, 10, &n, err, sizeof err), -1);
    assert_non_null(strstr(err, "\"typed\""));
    unlink(path);
    free(path);
    path = write_file("password hunter2 = x\n"); /* not a valid key: not quoted either */
    assert_int_equal(cmr_conf_load_file(c, path, err, sizeof err), -1);
    assert_null(strstr(err, "hunter2"));
    unlink(path);
    free(path);
    assert_int_equal(cmr_conf_load_file(c, "/dev/zero", err, sizeof err), -1);
    assert_non_null(strstr(err, "not a regular file"));
    char dir[] = "/tmp/cmr-conf-XXXXXX", fifo[64];
    assert_non_null(mkdtemp(dir));
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(cmr_conf_load_file(c, fifo, err, sizeof err), -1); /* returns, does not wait */
    unlink(fifo);
    rmdir(dir);
    char big[] = "/tmp/cmr-conf-big-XXXXXX";
    int fd = mkstemp(big);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)CMR_CONF_FILE_MAX + 1), 0);
    close(fd);
    assert_int_equal(cmr_conf_load_file(c, big, err, sizeof err), -1);
    assert_non_null(strstr(err, "larger than"));
    unlink(big);
    path = write_file("a = 1\n");
    fd = open(path, O_WRONLY | O_APPEND);
    assert_int_equal(write(fd, "b\0=2\n", 5), 5);
    close(fd);
    assert_int_equal(cmr_conf_load_file(c, path, err, sizeof err), -1);
    assert_non_null(strstr(err, "NUL"));
    unlink(path);
    free(path);
    cmr_conf_destroy(c);
}

static const cmr_cli_option_t opts[] = {
    {"port", 'p', "broker.port", "PORT", "port"},
    {"verbose", 'v', "verbose", NULL, "flag"},
    {0},
};
static const cmr_conf_key_t keys[] = {
    {"broker.port", "0", NULL},
    {"verbose", "false", NULL},
    {"test.depth", "3", "how deep | how far"},
    CMR_CONF_KEY_KAFKA,
    {0},
};
static const cmr_cli_t cli = {"test", "[options] CMD", "Test.", opts, keys};

static int parse(cmr_conf_t *c, int argc, const char **argv, int *first)
{
    return cmr_cli_parse(&cli, argc, (char **)argv, c, first);
}

static void test_cli(void **state)
{
    (void)state;
    char *path = write_file("broker.port = 1\nkafka.linger.ms = 3\n");
    cmr_conf_t *c = cmr_conf_new();
    int first;
    /* options win over files whatever their order */
    const char *argv1[] = {"test",
                           "-p",
                           "5",
                           "run",
                           "--config",
                           path,
                           "-X",
                           "kafka.acks=all",
                           "-v",
                           "--bootstrap=h:1",
                           "x",
                           "--",
                           "--not-an-option"};
    assert_int_equal(parse(c, 13, argv1, &first), CMR_CLI_OK);
    /* positional arguments are moved behind the options, in order */
    assert_int_equal(first, 10 - 1);
    assert_string_equal(argv1[9], "run");
    assert_string_equal(argv1[10], "x");
    assert_string_equal(argv1[11], "--not-an-option");
    assert_string_equal(cmr_conf_get(c, "broker.port", NULL), "5");
    assert_string_equal(cmr_conf_get(c, "kafka.linger.ms", NULL), "3");
    assert_string_equal(cmr_conf_get(c, "kafka.acks", NULL), "all");
    assert_string_equal(cmr_conf_get(c, "verbose", NULL), "true");
    assert_string_equal(cmr_conf_get(c, "kafka.bootstrap.servers", NULL), "h:1");
    cmr_conf_destroy(c);
    unlink(path);
    free(path);

    c = cmr_conf_new();
    const char *bad1[] = {"test", "--nope"};
    assert_int_equal(parse(c, 2, bad1, &first), CMR_CLI_ERROR);
    const char *bad2[] = {"test", "--port"};
    assert_int_equal(parse(c, 2, bad2, &first), CMR_CLI_ERROR);
    const char *bad3[] = {"test", "-X", "typo.key=1"};
    assert_int_equal(parse(c, 3, bad3, &first), CMR_CLI_ERROR);
    const char *bad4[] = {"test", "--log-level", "loud"};
    assert_int_equal(parse(c, 3, bad4, &first), CMR_CLI_ERROR);
    const char *bad5[] = {"test", "--verbose=1"};
    assert_int_equal(parse(c, 2, bad5, &first), CMR_CLI_ERROR);
    const char *help[] = {"test", "--help"};
    assert_int_equal(parse(c, 2, help, &first), CMR_CLI_HELP);
    cmr_conf_destroy(c);
    cmr_log_set_level(CMR_LOG_INFO);
}

/* The key table decides what is known: exact keys, ".*" prefixes, option keys, common keys. */
static void test_key_table(void **state)
{
    (void)state;
    assert_ptr_equal(cmr_conf_key_find(keys, "test.depth"), &keys[2]);
    assert_ptr_equal(cmr_conf_key_find(keys, "kafka.linger.ms"), &keys[3]);
    assert_null(cmr_conf_key_find(keys, "kafka"));
    assert_null(cmr_conf_key_find(keys, "test.dept"));
    assert_null(cmr_conf_key_find(keys, "test.depth.x"));

    cmr_conf_t *c = cmr_conf_new();
    char err[256];
    cmr_conf_set(c, "test.depth", "1", "f:1");
    cmr_conf_set(c, "kafka.acks", "all", "f:2");
    assert_int_equal(cmr_conf_check_known(c, keys, err, sizeof err), 0);
    cmr_conf_set(c, "test.dpth", "1", "f:3");
    assert_int_equal(cmr_conf_check_known(c, keys, err, sizeof err), -1);
    assert_string_equal(err, "f:3: unknown configuration key \"test.dpth\"");
    cmr_conf_destroy(c);

    /* a file with an unknown key: the parse fails naming file and line */
    char *path = write_file("test.depth = 2\nlog.level = warn\ntest.dpth = 1\n");
    c = cmr_conf_new();
    int first;
    const char *argv1[] = {"test", "-c", path};
    assert_int_equal(parse(c, 3, argv1, &first), CMR_CLI_ERROR);
    cmr_conf_destroy(c);
    c = cmr_conf_new();
    const char *argv2[] = {"test", "-X", "log.level=warn", "--bootstrap", "h:1", "-X", "test.depth=4"};
    assert_int_equal(parse(c, 7, argv2, &first), CMR_CLI_OK);
    cmr_conf_destroy(c);
    cmr_log_set_level(CMR_LOG_OFF);
    unlink(path);
    free(path);
}

static char *print_keys(const cmr_cli_t *cl, int *rc)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    *rc = cmr_cli_print_keys(cl, f);
    fclose(f);
    return text;
}

static void test_print_keys(void **state)
{
    (void)state;
    int rc;
    char *text = print_keys(&cli, &rc);
    assert_int_equal(rc, 0);
    assert_string_equal(text, "| key | option | default | meaning |\n"
                              "| --- | --- | --- | --- |\n"
                              "| `broker.port` | `-p, --port PORT` | `0` | port |\n"
                              "| `verbose` | `-v, --verbose` | `false` | flag |\n"
                              "| `test.depth` | | `3` | how deep \\| how far |\n"
                              "| `kafka.*` | | | handed to librdkafka without the prefix: every librdkafka property "
                              "works (security, timeouts, ...) |\n"
                              "| `log.level` | `--log-level LEVEL` | `info` | debug, info, warn, error or off |\n"
                              "| `kafka.bootstrap.servers` | `--bootstrap HOST:PORT` | | the Kafka cluster "
                              "(HOST:PORT[,...]) |\n");
    free(text);

    /* an option whose key has no row is an error: the table must name every key */
    static const cmr_cli_option_t bad_opts[] = {{"depth", 0, "test.deep", "N", "depth"}, {0}};
    const cmr_cli_t bad = {"test", NULL, NULL, bad_opts, keys};
    text = print_keys(&bad, &rc);
    assert_int_equal(rc, -1);
    free(text);
    /* --help-keys goes through the parser like --help */
    cmr_conf_t *c = cmr_conf_new();
    int first;
    const char *argv1[] = {"test", "--help-keys"};
    assert_int_equal(cmr_cli_parse(&bad, 2, (char **)argv1, c, &first), CMR_CLI_ERROR);
    cmr_conf_destroy(c);
}

static void test_kafka_properties_pass_through(void **state)
{
    (void)state;
    cmr_conf_t *c = cmr_conf_new();
    char err[256];
    cmr_conf_set(c, "kafka.security.protocol", "SASL_SSL", "f:1");
    cmr_conf_set(c, "kafka.sasl.mechanisms", "PLAIN", "f:2");
    cmr_conf_set(c, "unrelated", "x", "f:3");
    rd_kafka_conf_t *rk = cmr_kafka_conf(c, 0, err, sizeof err);
    assert_non_null(rk);
    char val[64];
    size_t n = sizeof val;
    assert_int_equal(rd_kafka_conf_get(rk, "sasl.mechanisms", val, &n), RD_KAFKA_CONF_OK);
    assert_string_equal(val, "PLAIN");
    rd_kafka_conf_destroy(rk);
    cmr_conf_set(c, "kafka.no.such.property", "1", "f:4");
    assert_null(cmr_kafka_conf(c, 0, err, sizeof err));
    assert_non_null(strstr(err, "f:4"));
    cmr_conf_destroy(c);
}

/* One "kafka.*" configuration serves a process's producers and consumers: a property
 * librdkafka lists for one role only is given to clients of that role, the others to all. */
static void test_kafka_properties_by_role(void **state)
{
    (void)state;
    cmr_conf_t *c = cmr_conf_new();
    char err[256], val[64];
    cmr_conf_set(c, "kafka.fetch.wait.max.ms", "5", "f:1");     /* consumers' */
    cmr_conf_set(c, "kafka.message.timeout.ms", "1234", "f:2"); /* producers' (a topic property) */
    cmr_conf_set(c, "kafka.linger.ms", "7", "f:3");             /* producers' */
    cmr_conf_set(c, "kafka.socket.timeout.ms", "4321", "f:4");  /* everyone's */
    struct {
        char role;
        const char *fetch, *linger;
    } cases[] = {{'C', "5", NULL}, {'P', NULL, "7"}, {0, "5", "7"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rd_kafka_conf_t *rk = cmr_kafka_conf(c, cases[i].role, err, sizeof err);
        assert_non_null(rk);
        const char *keys[] = {"fetch.wait.max.ms", "linger.ms"}, *want[] = {cases[i].fetch, cases[i].linger};
        const char *defaults[] = {"500", "5"}; /* librdkafka's own, where the key was not given */
        for (int k = 0; k < 2; k++) {
            size_t n = sizeof val;
            assert_int_equal(rd_kafka_conf_get(rk, keys[k], val, &n), RD_KAFKA_CONF_OK);
            assert_string_equal(val, want[k] ? want[k] : defaults[k]);
        }
        size_t n = sizeof val;
        assert_int_equal(rd_kafka_conf_get(rk, "socket.timeout.ms", val, &n), RD_KAFKA_CONF_OK);
        assert_string_equal(val, "4321");
        rd_kafka_conf_destroy(rk);
    }
    cmr_conf_destroy(c);
}

#if defined(__SANITIZE_ADDRESS__)
#define CMR_TEST_OWN_MALLOC 0 /* AddressSanitizer's allocator: mallopt and mallinfo2 say nothing */
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CMR_TEST_OWN_MALLOC 0
#endif
#endif
#ifndef CMR_TEST_OWN_MALLOC
#define CMR_TEST_OWN_MALLOC 1
#endif

/* cmr_program_keep_freed_memory: 0 is a no-op; with a budget, a block of 8 MiB comes from
 * the heap, not from a mapping of its own, and stays there, free, once freed (glibc's
 * defaults map such a block and unmap it at free). */
static void test_keep_freed_memory(void **state)
{
    (void)state;
    assert_int_equal(cmr_program_keep_freed_memory(0), 0);
    if (!CMR_TEST_OWN_MALLOC)
        skip();
    assert_int_equal(cmr_program_keep_freed_memory(64 << 20), 0);
    struct mallinfo2 before = mallinfo2();
    size_t size = 8u << 20;
    static char *volatile block; /* escapes: the compiler may not drop the allocation */
    block = malloc(size);
    assert_non_null(block);
    memset(block, 1, size);
    struct mallinfo2 held = mallinfo2();
    assert_true(held.hblkhd < before.hblkhd + size); /* not a mapping of its own */
    assert_true(held.uordblks >= before.uordblks + size);
    free(block);
    struct mallinfo2 after = mallinfo2();
    assert_true(after.fordblks >= size); /* kept, free, for the next large block */
}

int main(void)
{
    cmr_log_set_level(CMR_LOG_OFF);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_file_and_getters),
        cmocka_unit_test(test_file_errors_have_line_numbers),
        cmocka_unit_test(test_file_hostile),
        cmocka_unit_test(test_cli),
        cmocka_unit_test(test_key_table),
        cmocka_unit_test(test_print_keys),
        cmocka_unit_test(test_kafka_properties_pass_through),
        cmocka_unit_test(test_kafka_properties_by_role),
        cmocka_unit_test(test_keep_freed_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_cp_config.c - cmr-config against the embedded broker, with scripted agents:
 *
 *  - registration -> AgentConfiguration (agent id per instance, environment, revision, strategy);
 *    a repeated registration gets the same answer;
 *  - an agent no mapping matches -> NoEnvironment with the reason, logged on the CMR side;
 *  - an environment changed while the agent "runs" -> a new AgentConfiguration to the agents
 *    of that environment only; a mapping change -> the agents whose environment changed;
 *  - a malformed environment file is rejected with its line and changes nothing;
 *  - foreign bytes on cmr.registrations are skipped; a restarted worker rebuilds its state
 *    from cmr.config and answers as before;
 *  - apply is all or nothing: three environments of which the middle one is too large
 *    publish none, and the output says so per environment; with and without a transaction
 *    every line says what really happened;
 *  - two JVMs with the same name on one host are two agents (two agent ids), both are
 *    configured and both get an environment change;
 *  - registrations waiting when the worker polls (a fleet restarting) are answered
 *    together, one wait for their delivery, each agent once;
 *  - outsider-controlled values are escaped in the worker's log (a newline in an agent
 *    name stays in one line) and refused registrations are counted per reason;
 *  - a record of cmr.config written under the first ConfigChange schema (by an older
 *    cmr-config) is read by the running worker, by `cmr-config list` and by a restarted
 *    worker, which configures an agent with it: the fields added since at their defaults;
 *  - diagnoses (docs/DIAGNOSIS.md): started with `diagnose start`, refused twice for one
 *    method; methods excluded and included again (`diagnose exclude|include`: a revision
 *    each, none when nothing changes; bad methods, unknown ids, ended diagnoses refused);
 *    listed and shown with their history; ended by `diagnose stop` and by the worker when
 *    their time to live is over; started by a threshold event that asks for one and ended
 *    when its threshold is back to normal long enough; bad options are usage errors.
 *
 * Usage: test_cp_config CMR-BROKER CMR-CONFIG
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

#include "broker_proc.h"
#include "cmr/buf.h"
#include "cmr/ids.h"
#include "cmr/log.h"
#include "cmr/wire.h"
#include "cmr/clock.h"
#include "cp_support.h"
#include "msg_past.h"

static const char *broker_bin, *config_bin;
static broker_proc_t broker;
static cmr_conf_t *conf;
static cp_proc_t worker;
static char tmp[256], worker_log[300];

static const char *env_v1 = "version: 1\n"
                            "environments:\n"
                            "  - id: shop\n"
                            "    name: Shop\n"
                            "    strategy: {send_interval_ms: 500}\n"
                            "    sensors:\n"
                            "      - {sensor: timer, class: \"com.shop.*\", method: \"*\"}\n"
                            "      - {sensor: invocation-sequence, class: \"com.shop.web.*\", method: service}\n"
                            "  - id: batch\n"
                            "    sensors:\n"
                            "      - {sensor: timer, class: \"com.batch.*\"}\n"
                            "mappings:\n"
                            "  - {agent: \"shop-*\", address: 10.0.0.0/8, environment: shop}\n"
                            "  - {agent: \"*\", address: \"2001:db8::/32\", environment: batch}\n";

static int tests_ok;

static int start_worker(void)
{
    int started = cp_proc_count_log(&worker, "event=config.started");
    const char *argv[] = {config_bin,
                          "--bootstrap",
                          broker.bootstrap,
                          "-X",
                          "kafka.session.timeout.ms=6000",
                          "-X",
                          "kafka.heartbeat.interval.ms=500",
                          "-X",
                          cp_signing_key_option(),
                          "-X",
                          "diag.auto.end_after_normal_ms=1000",
                          "run",
                          NULL};
    if (cp_proc_start(&worker, argv, worker_log) != 0)
        return -1;
    for (int64_t deadline = cmr_mono_ms() + 30000; cmr_mono_ms() < deadline; usleep(50000))
        if (cp_proc_count_log(&worker, "event=config.started") > started)
            return 0;
    return -1;
}

static int setup(void **state)
{
    (void)state;
    cmr_log_set_level(CMR_LOG_ERROR);
    if (cp_tmpdir(tmp, sizeof tmp) != 0 || cp_keys_make(config_bin, tmp) != 0 ||
        broker_proc_start(&broker, broker_bin, NULL) != 0)
        return -1;
    cp_fmt(worker_log, sizeof worker_log, "%s/cmr-config.log", tmp);
    conf = cmr_conf_new();
    cmr_conf_set(conf, "kafka.bootstrap.servers", broker.bootstrap, "test");
    cmr_conf_set(conf, "kafka.session.timeout.ms", "6000", "test");
    cmr_conf_set(conf, "kafka.heartbeat.interval.ms", "500", "test");
    char *out = NULL;
    int rc = cp_apply(config_bin, broker.bootstrap, env_v1, &out);
    if (rc != 0)
        fprintf(stderr, "apply: %s\n", out ? out : "");
    free(out);
    return rc == 0 ? start_worker() : -1;
}

static int teardown(void **state)
{
    (void)state;
    if (tests_ok != 12)
        cp_proc_dump_log(&worker, 60);
    cp_proc_stop(&worker);
    cmr_conf_destroy(conf);
    broker_proc_stop(&broker);
    cp_rmrf(tmp);
    return 0;
}

static void expect_configuration(cp_peer_t *p, const char *env, int64_t revision, int32_t send_interval)
{
    cmr_msg_t m;
    assert_int_equal(cp_peer_expect(p, CMR_MSG_AGENT_CONFIGURATION, 30000, &m), 1);
    const cmr_agent_configuration_t *c = &m.u.agent_configuration;
    assert_string_equal(c->instance_id, p->instance_id);
    assert_int_equal((uint64_t)c->agent_id, cmr_agent_id(p->name, p->host, p->instance_id));
    assert_string_equal(c->environment_id, env);
    assert_int_equal(c->revision, revision);
    assert_int_equal(c->strategy.send_interval_ms, send_interval);
    cp_peer_configure(p, c);
    cmr_msg_free(&m);
}

static cp_peer_t shop1, billing, batch1;

/* --- diagnoses ------------------------------------------------------------------------- */

/* cmr-config diagnose ARGS... (NULL-terminated): exit status, output in *out. */
static int diagnose_v(char **out, const char *const *args)
{
    const char *argv[32] = {config_bin, "--bootstrap", broker.bootstrap, "--log-level", "warn", "diagnose"};
    size_t n = 6;
    while (*args && n < 31)
        argv[n++] = *args++;
    argv[n] = NULL;
    *out = NULL;
    return cp_run(argv, out);
}
#define diagnose(out, ...) diagnose_v((out), (const char *const[]){__VA_ARGS__, NULL})

/* The id in "started diagnosis ID". */
static void started_id(const char *out, char id[17])
{
    const char *at = out ? strstr(out, "started diagnosis ") : NULL;
    assert_non_null(at);
    snprintf(id, 17, "%s", at + strlen("started diagnosis "));
}

/* Waits up to 15 s for `diagnose show ID` to contain want. */
static int show_contains(const char *id, const char *want)
{
    for (int64_t deadline = cmr_mono_ms() + 15000; cmr_mono_ms() < deadline; cmr_sleep_ms(300)) {
        char *out;
        int rc = diagnose(&out, "show", id);
        bool ok = rc == 0 && strstr(out, want);
        free(out);
        if (ok)
            return 0;
    }
    return -1;
}

static void send_named_threshold(cmr_threshold_state_t state, const char *subject_name)
{
    char err[256];
    cmr_producer_t *p = cmr_producer_new(conf, "test", NULL, NULL, err, sizeof err);
    assert_non_null(p);
    char *traces[] = {"4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b"};
    cmr_threshold_event_t ev = {.environment_id = "shop",
                                .rule = "slow-pay",
                                .state = state,
                                .scope = CMR_THRESHOLD_METHOD,
                                .subject_id = 0x1234,
                                .subject_name = (char *)subject_name,
                                .statistic = CMR_STAT_P99,
                                .value = 400,
                                .threshold = 200,
                                .window_start_ms = 1000,
                                .window_end_ms = 61000,
                                .count = 50,
                                .example_traces = {traces, 1},
                                .diagnose = true,
                                .time_ms = 61000};
    assert_int_equal(cmr_producer_send(p, CMR_MSG_THRESHOLD_EVENT, &ev, NULL, NULL, err, sizeof err), CMR_SEND_OK);
    assert_int_equal(cmr_producer_flush(p, 15000), 0);
    cmr_producer_destroy(p, 5000);
}

static void send_threshold(cmr_threshold_state_t state)
{
    send_named_threshold(state, "com.shop.Pay.charge()V");
}

static void test_diagnoses(void **state)
{
    (void)state;
    char *out, id[17], id2[17];
    /* usage errors: exit status 2, nothing written */
    assert_int_equal(diagnose(&out, "start", "--env", "shop"), 2);
    assert_non_null(strstr(out, "--method"));
    free(out);
    assert_int_equal(diagnose(&out, "start", "--env", "shop", "--method", "checkout"), 2);
    free(out);
    assert_int_equal(diagnose(&out, "start", "--env", "shop", "--method", "a.B.c", "--when", "http.header=x"), 2);
    assert_non_null(strstr(out, "KIND:NAME=GLOB"));
    free(out);
    /* conditions the agents cannot judge at the anchor yet are refused, not ignored */
    assert_int_equal(diagnose(&out, "start", "--env", "shop", "--method", "a.B.c", "--when", "http.status=5*"), 2);
    assert_non_null(strstr(out, "cannot judge"));
    free(out);
    assert_int_equal(diagnose(&out, "start", "--env", "shop", "--method", "a.B.c", "--when", "arg:4=x"), 2);
    assert_non_null(strstr(out, "arg:N"));
    free(out);
    assert_int_equal(diagnose(&out, "start", "--env", "shop", "--method", "a.B.c", "--when", "arg:0=x,arg:1=y"), 2);
    free(out);
    /* start, refused twice, listed; ended by its time to live */
    assert_int_equal(diagnose(&out, "start", "--env", "shop", "--method", "com.shop.Cart.add", "--ttl", "3s", "--when",
                              "http.path=/cart*"),
                     0);
    started_id(out, id);
    free(out);
    assert_int_equal(diagnose(&out, "start", "--env", "shop", "--method", "com.shop.Cart.add"), 1);
    assert_non_null(strstr(out, "already looks into"));
    free(out);
    assert_int_equal(diagnose(&out, "list"), 0);
    assert_non_null(strstr(out, id));
    assert_non_null(strstr(out, "com.shop.Cart.add"));
    free(out);
    if (show_contains(id, "ended: time_to_live  by cmr-config") != 0) {
        cp_proc_dump_log(&worker, 20);
        fail_msg("the worker did not end diagnosis %s after its time to live", id);
    }
    assert_int_equal(diagnose(&out, "show", id), 0);
    assert_non_null(strstr(out, "when: http.path = /cart*"));
    assert_non_null(strstr(out, "revision 1"));
    free(out);
    /* stopped by an operator */
    assert_int_equal(diagnose(&out, "start", "--env", "shop", "--method", "com.shop.Cart.add(I)V"), 0);
    started_id(out, id2);
    free(out);
    assert_int_equal(diagnose(&out, "stop", id2), 0);
    free(out);
    assert_int_equal(show_contains(id2, "ended: stopped"), 0);
    assert_int_equal(diagnose(&out, "stop", id2), 1); /* ended already */
    free(out);
    /* methods excluded and included again: each change a revision, refusals change nothing */
    assert_int_equal(
        diagnose(&out, "start", "--env", "shop", "--method", "com.shop.Cart.add", "--exclude", "com.shop.Tax.rate(Q)D"),
        2); /* a bad descriptor */
    assert_non_null(strstr(out, "descriptor"));
    free(out);
    assert_int_equal(diagnose(&out, "start", "--env", "shop", "--method", "com.shop.Cart.add", "--exclude",
                              "com.shop.gen,com.shop.Tax.rate(I)D"),
                     0);
    started_id(out, id);
    free(out);
    assert_int_equal(diagnose(&out, "show", id), 0);
    assert_non_null(strstr(out, "  excluded: com/shop/gen\n"));
    assert_non_null(strstr(out, "  excluded method: com/shop/Tax.rate(I)D\n"));
    free(out);
    assert_int_equal(diagnose(&out, "exclude", id, "com.shop.Tax.calc", "com/shop/Tax.log(Ljava/lang/String;)V"), 0);
    assert_non_null(strstr(out, "revision 2"));
    free(out);
    assert_int_equal(diagnose(&out, "exclude", id, "com.shop.Tax.calc"), 0); /* again: no revision */
    assert_non_null(strstr(out, "nothing changes"));
    free(out);
    assert_int_equal(diagnose(&out, "exclude", id, "com.shop.Tax.calc(Q)V"), 2);
    assert_non_null(strstr(out, "descriptor"));
    free(out);
    assert_int_equal(diagnose(&out, "exclude", id, "com.shop.Cart.add(I)V"), 2); /* the diagnosed method */
    assert_non_null(strstr(out, "diagnosed method"));
    free(out);
    assert_int_equal(diagnose(&out, "exclude", id, "calc"), 2);
    free(out);
    assert_int_equal(diagnose(&out, "exclude", "0123456789abcdef", "com.shop.Tax.calc"), 1);
    assert_non_null(strstr(out, "no diagnosis 0123456789abcdef"));
    free(out);
    assert_int_equal(diagnose(&out, "exclude", "nope", "com.shop.Tax.calc"), 2);
    free(out);
    assert_int_equal(diagnose(&out, "exclude", id), 2); /* no method */
    free(out);
    assert_int_equal(diagnose(&out, "include", id, "com.shop.Tax.calc", "com.shop.Tax.rate(I)D"), 0);
    assert_non_null(strstr(out, "revision 3"));
    free(out);
    assert_int_equal(diagnose(&out, "include", id, "com.shop.Tax.calc"), 0);
    assert_non_null(strstr(out, "nothing changes"));
    free(out);
    assert_int_equal(diagnose(&out, "show", id), 0);
    if (!strstr(out, "revision 3") || strstr(out, "revision 4") || strstr(out, "Tax.calc") || strstr(out, "Tax.rate") ||
        !strstr(out, "  excluded method: com/shop/Tax.log(Ljava/lang/String;)V\n") ||
        !strstr(out, "  excluded: com/shop/gen\n"))
        fail_msg("diagnose show:\n%s", out);
    free(out);
    assert_int_equal(diagnose(&out, "stop", id), 0);
    free(out);
    assert_int_equal(diagnose(&out, "include", id, "com.shop.Tax.log(Ljava/lang/String;)V"), 1); /* ended */
    assert_non_null(strstr(out, "has ended already (stopped)"));
    free(out);
    /* a threshold that asks for a diagnosis starts one; back to normal ends it */
    send_threshold(CMR_THRESHOLD_ABNORMAL);
    char auto_id[17] = "";
    for (int64_t deadline = cmr_mono_ms() + 15000; !*auto_id && cmr_mono_ms() < deadline; cmr_sleep_ms(300)) {
        assert_int_equal(diagnose(&out, "list"), 0);
        const char *line = strstr(out, "(threshold slow-pay)");
        if (line) {
            while (line > out && line[-1] != '\n')
                line--;
            snprintf(auto_id, sizeof auto_id, "%s", line);
        }
        free(out);
    }
    if (!*auto_id) {
        cp_proc_dump_log(&worker, 20);
        fail_msg("no diagnosis started by the threshold event");
    }
    assert_int_equal(show_contains(auto_id, "from trace 4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b"), 0);
    send_threshold(CMR_THRESHOLD_ABNORMAL); /* the same event again: nothing new */
    /* a route whose root method is the same (its series is another): the same diagnosis,
     * which is back to normal only once both are */
    send_named_threshold(CMR_THRESHOLD_ABNORMAL, "GET /shop/pay");
    send_threshold(CMR_THRESHOLD_NORMAL);
    cmr_sleep_ms(3000); /* end_after_normal_ms is 1 s */
    assert_int_equal(diagnose(&out, "show", auto_id), 0);
    if (strstr(out, "ended"))
        fail_msg("ended while GET /shop/pay is still abnormal:\n%s", out);
    free(out);
    send_named_threshold(CMR_THRESHOLD_NORMAL, "GET /shop/pay");
    assert_int_equal(show_contains(auto_id, "ended: back_to_normal"), 0);
    assert_int_equal(diagnose(&out, "list", "--all"), 0);
    int threshold_started = 0;
    for (const char *p = out; (p = strstr(p, "(threshold slow-pay)")); p++)
        threshold_started++;
    free(out);
    assert_int_equal(threshold_started, 1);
    tests_ok++;
}

static void test_registration_gets_configuration(void **state)
{
    (void)state;
    /* an earlier run of the agent shop-1@host-a */
    cp_peer_t earlier;
    assert_int_equal(cp_peer_open(&earlier, conf, "shop-1", "host-a", "10.1.2.3"), 0);
    assert_int_equal(cp_peer_register(&earlier, 1), 0);
    expect_configuration(&earlier, "shop", 1, 500);
    /* a repeated registration of the same instance gets the same answer */
    assert_int_equal(cp_peer_register(&earlier, 2), 0);
    expect_configuration(&earlier, "shop", 1, 500);
    /* the next run of the same agent: a new instance, so a new agent id (one per JVM run) */
    assert_int_equal(cp_peer_open(&shop1, conf, "shop-1", "host-a", "10.1.2.3"), 0);
    assert_int_equal(cp_peer_register(&shop1, 1), 0);
    expect_configuration(&shop1, "shop", 1, 500);
    assert_true(shop1.agent_id != earlier.agent_id);
    cp_peer_close(&earlier);

    assert_int_equal(cp_peer_open(&batch1, conf, "batch-7", "host-b", "2001:db8:5::9"), 0);
    assert_int_equal(cp_peer_register(&batch1, 1), 0);
    expect_configuration(&batch1, "batch", 1, 1000);
    tests_ok++;
}

static void test_unmapped_agent_gets_no_environment(void **state)
{
    (void)state;
    assert_int_equal(cp_peer_open(&billing, conf, "billing", "host-c", "192.168.1.1"), 0);
    assert_int_equal(cp_peer_register(&billing, 1), 0);
    cmr_msg_t m;
    assert_int_equal(cp_peer_expect(&billing, CMR_MSG_NO_ENVIRONMENT, 30000, &m), 1);
    assert_string_equal(m.u.no_environment.instance_id, billing.instance_id);
    assert_non_null(strstr(m.u.no_environment.reason, "\"billing\""));
    assert_non_null(strstr(m.u.no_environment.reason, "192.168.1.1"));
    cmr_msg_free(&m);
    assert_int_equal(cp_proc_wait_log(&worker, "event=agent.no_environment agent=\"billing\"", 5000), 0);
    tests_ok++;
}

static void test_environment_update_reaches_its_agents(void **state)
{
    (void)state;
    char *v2 = strdup(env_v1);
    char *at = strstr(v2, "send_interval_ms: 500");
    memcpy(at, "send_interval_ms: 250", 21);
    char *out = NULL;
    assert_int_equal(cp_apply(config_bin, broker.bootstrap, v2, &out), 0);
    assert_non_null(strstr(out, "environment shop: updated"));
    assert_null(strstr(out, "environment batch")); /* unchanged: not republished */
    free(out);
    free(v2);
    expect_configuration(&shop1, "shop", 2, 250);
    /* the other environment's agent gets nothing */
    cmr_msg_t m;
    assert_int_equal(cp_peer_next(&batch1, 2000, &m), 0);
    tests_ok++;
}

static void test_mapping_change_reaches_remapped_agents(void **state)
{
    (void)state;
    const char *remap = "version: 1\n"
                        "mappings:\n"
                        "  - {agent: \"shop-*\", address: 10.0.0.0/8, environment: shop}\n"
                        "  - {agent: billing, address: 192.168.0.0/16, environment: shop}\n"
                        "  - {agent: \"*\", address: \"2001:db8::/32\", environment: batch}\n";
    char *out = NULL;
    assert_int_equal(cp_apply(config_bin, broker.bootstrap, remap, &out), 0);
    assert_non_null(strstr(out, "mappings: updated"));
    free(out);
    expect_configuration(&billing, "shop", 2, 250);
    cmr_msg_t m;
    assert_int_equal(cp_peer_next(&shop1, 1000, &m), 0); /* environment unchanged: nothing */
    tests_ok++;
}

static void test_malformed_file_changes_nothing(void **state)
{
    (void)state;
    const char *bad = "version: 1\n"
                      "environments:\n"
                      "  - id: shop\n"
                      "    sensors:\n"
                      "      - {sensor: timr, class: x}\n";
    char *out = NULL;
    assert_int_equal(cp_apply(config_bin, broker.bootstrap, bad, &out), 1);
    assert_non_null(strstr(out, ":5: environments[0].sensors[0].sensor: unknown sensor \"timr\""));
    assert_non_null(strstr(out, "nothing changed"));
    free(out);
    const char *argv[] = {config_bin, "--bootstrap", broker.bootstrap, "show", "shop", NULL};
    assert_int_equal(cp_run(argv, &out), 0);
    assert_non_null(strstr(out, "# revision 2"));
    assert_non_null(strstr(out, "send_interval_ms: 250"));
    free(out);
    cmr_msg_t m;
    assert_int_equal(cp_peer_next(&shop1, 1000, &m), 0);
    tests_ok++;
}

static void test_foreign_bytes_and_restart(void **state)
{
    (void)state;
    cmr_producer_t *p = cmr_producer_new(conf, "junk", NULL, NULL, NULL, 0);
    assert_non_null(p);
    assert_int_equal(cmr_producer_send_raw(p, cmr_topic_name(CMR_TOPIC_REGISTRATIONS), "k", 1, "junk!", 5, NULL), 0);
    assert_int_equal(cmr_producer_flush(p, 10000), 0);
    cmr_producer_destroy(p, 1000);
    /* still answering */
    cp_peer_t shop2;
    assert_int_equal(cp_peer_open(&shop2, conf, "shop-2", "host-d", "10.9.9.9"), 0);
    assert_int_equal(cp_peer_register(&shop2, 1), 0);
    expect_configuration(&shop2, "shop", 2, 250);
    cp_peer_close(&shop2);

    /* a restarted worker rebuilds the configuration from cmr.config */
    assert_int_equal(cp_proc_stop(&worker), 0);
    assert_int_equal(start_worker(), 0);
    cp_peer_t shop3;
    assert_int_equal(cp_peer_open(&shop3, conf, "shop-3", "host-e", "10.9.9.8"), 0);
    assert_int_equal(cp_peer_register(&shop3, 1), 0);
    expect_configuration(&shop3, "shop", 2, 250);
    cp_peer_close(&shop3);
    cp_peer_close(&shop1);
    cp_peer_close(&billing);
    cp_peer_close(&batch1);
    tests_ok++;
}

/* --- apply: all or nothing ------------------------------------------------------------ */

static char *three_envs(const char *prefix, int middle_sensors, int interval)
{
    cmr_buf_t b = {0};
    cmr_buf_printf(&b,
                   "version: 1\nenvironments:\n  - id: %s-first\n    strategy: {send_interval_ms: %d}\n    sensors:\n"
                   "      - {sensor: timer, class: \"com.a.*\"}\n  - id: %s-middle\n    sensors:\n",
                   prefix, interval, prefix);
    for (int i = 0; i < middle_sensors; i++)
        cmr_buf_printf(&b, "      - {sensor: timer, class: \"com.big.C%d\", method: \"m%d\"}\n", i, i);
    cmr_buf_printf(&b,
                   "  - id: %s-last\n    strategy: {send_interval_ms: %d}\n    sensors:\n"
                   "      - {sensor: timer, class: \"com.c.*\"}\n",
                   prefix, interval);
    assert_true(cmr_buf_ok(&b));
    return cmr_buf_take(&b);
}

/* cmr-config [-X SET] apply <yaml>: exit status, output in *out. */
static int apply_with(const char *yaml, const char *set, char **out)
{
    char path[300];
    cp_fmt(path, sizeof path, "%s/apply.yaml", tmp);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(yaml, f);
    fclose(f);
    const char *argv[] = {config_bin, "--bootstrap", broker.bootstrap, "--log-level", "warn",
                          "-X",       set,           "apply",          path,          NULL};
    return cp_run(argv, out);
}

/* The revision `cmr-config list` shows for an environment; 0 when it is not there. */
static int listed_revision(const char *id)
{
    char *out = NULL;
    const char *argv[] = {config_bin, "--bootstrap", broker.bootstrap, "--log-level", "error", "list", NULL};
    assert_int_equal(cp_run(argv, &out), 0);
    int rev = 0;
    size_t n = strlen(id);
    for (const char *line = out; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
        if (strncmp(line, id, n) == 0 && line[n] == ' ')
            rev = atoi(line + n + strspn(line + n, " "));
    free(out);
    return rev;
}

static void test_apply_all_or_nothing(void **state)
{
    (void)state;
    /* the middle environment is larger than the producer may send: nothing is published */
    char *yaml = three_envs("aon", 2000, 500), *out = NULL;
    assert_int_equal(apply_with(yaml, "kafka.message.max.bytes=20000", &out), 1);
    assert_non_null(strstr(out, "environment aon-first: not created: nothing was published"));
    assert_non_null(strstr(out, "environment aon-middle: not created: too large:"));
    assert_non_null(strstr(out, "over the limit of 20000 bytes (kafka.message.max.bytes"));
    assert_non_null(strstr(out, "environment aon-last: not created: nothing was published"));
    assert_non_null(strstr(out, "apply.yaml:7: environment aon-middle: too large"));
    assert_non_null(strstr(out, "nothing changed"));
    assert_null(strstr(out, ": created"));
    free(out);
    assert_int_equal(listed_revision("aon-first"), 0);
    assert_int_equal(listed_revision("aon-middle"), 0);
    assert_int_equal(listed_revision("aon-last"), 0);

    /* within the limit: all three, in one transaction */
    assert_int_equal(apply_with(yaml, "kafka.message.max.bytes=16777216", &out), 0);
    assert_non_null(strstr(out, "environment aon-first: created (1 sensor assignments, revision 1)"));
    assert_non_null(strstr(out, "environment aon-middle: created (2000 sensor assignments, revision 1)"));
    assert_non_null(strstr(out, "environment aon-last: created (1 sensor assignments, revision 1)"));
    free(out);
    free(yaml);
    assert_int_equal(listed_revision("aon-first"), 1);
    assert_int_equal(listed_revision("aon-middle"), 1);
    assert_int_equal(listed_revision("aon-last"), 1);

    /* without a transaction: each change with its delivery report */
    yaml = three_envs("aon", 2000, 600);
    assert_int_equal(apply_with(yaml, "config.transactional_id=", &out), 0);
    assert_non_null(strstr(out, "environment aon-first: updated (1 sensor assignments, revision 2)"));
    assert_non_null(strstr(out, "environment aon-last: updated (1 sensor assignments, revision 2)"));
    assert_null(strstr(out, "aon-middle")); /* unchanged */
    free(out);
    free(yaml);
    assert_int_equal(listed_revision("aon-first"), 2);
    assert_int_equal(listed_revision("aon-last"), 2);
    tests_ok++;
}

/* --- agent identity: one per JVM instance ------------------------------------------------ */

static const char *shop_only = "version: 1\n"
                               "environments:\n"
                               "  - id: shop\n"
                               "    name: Shop\n"
                               "    strategy: {send_interval_ms: 125}\n"
                               "    sensors:\n"
                               "      - {sensor: timer, class: \"com.shop.*\", method: \"*\"}\n"
                               "      - {sensor: invocation-sequence, class: \"com.shop.web.*\", method: service}\n";

static void test_same_name_instances(void **state)
{
    (void)state;
    cp_peer_t t1, t2;
    assert_int_equal(cp_peer_open(&t1, conf, "shop-twin", "host-t", "10.7.7.7"), 0);
    assert_int_equal(cp_peer_open(&t2, conf, "shop-twin", "host-t", "10.7.7.7"), 0);
    assert_int_equal(cp_peer_register(&t1, 1), 0);
    assert_int_equal(cp_peer_register(&t2, 1), 0);
    expect_configuration(&t1, "shop", 2, 250);
    expect_configuration(&t2, "shop", 2, 250);
    assert_true(t1.agent_id != t2.agent_id); /* two JVMs, two agents */
    /* an environment change reaches both */
    char *out = NULL;
    assert_int_equal(cp_apply(config_bin, broker.bootstrap, shop_only, &out), 0);
    assert_non_null(strstr(out, "environment shop: updated"));
    free(out);
    expect_configuration(&t1, "shop", 3, 125);
    expect_configuration(&t2, "shop", 3, 125);
    assert_int_equal(
        cp_proc_wait_log(&worker, "event=config.environment_changed environment=shop agents_updated=2", 10000), 0);
    cp_peer_close(&t1);
    cp_peer_close(&t2);
    tests_ok++;
}

/* Sums the answers= of the worker's config.answers_delivered lines; *lines: how many. */
static size_t answers_delivered(int *lines)
{
    FILE *f = fopen(worker_log, "r");
    char line[4096];
    size_t answers = 0;
    *lines = 0;
    while (f && fgets(line, sizeof line, f)) {
        const char *at = strstr(line, "event=config.answers_delivered answers=");
        if (at) {
            answers += strtoul(at + strlen("event=config.answers_delivered answers="), NULL, 10);
            (*lines)++;
        }
    }
    if (f)
        fclose(f);
    return answers;
}

/* A fleet restarting: registrations waiting when the worker polls are answered together,
 * with one wait for their delivery, each agent exactly once. */
static void test_registration_burst_answered_together(void **state)
{
    (void)state;
    enum { N = 40 };
    cp_peer_t *peers = calloc(N, sizeof *peers);
    assert_non_null(peers);
    int lines_before;
    size_t answers_before = answers_delivered(&lines_before);
    assert_int_equal(cp_proc_stop(&worker), 0);
    for (int i = 0; i < N; i++) {
        char name[32], ip[32];
        snprintf(name, sizeof name, "shop-burst-%d", i);
        snprintf(ip, sizeof ip, "10.9.0.%d", i + 1);
        assert_int_equal(cp_peer_open(&peers[i], conf, name, "host-burst", ip), 0);
        assert_int_equal(cp_peer_register_queued(&peers[i], 1), 0);
    }
    for (int i = 0; i < N; i++)
        assert_int_equal(cp_peer_flush(&peers[i]), 0);
    assert_int_equal(start_worker(), 0);
    for (int i = 0; i < N; i++)
        expect_configuration(&peers[i], "shop", 3, 125);
    usleep(300000);
    for (int i = 0; i < N; i++) { /* once each */
        cmr_msg_t m;
        assert_int_equal(cp_peer_next(&peers[i], 0, &m), 0);
        cp_peer_close(&peers[i]);
    }
    free(peers);
    int lines;
    size_t answers = answers_delivered(&lines) - answers_before;
    lines -= lines_before;
    /* most answered in a few shared waits, not one wait each (a registration that a poll
     * returns alone is answered alone: not in these lines) */
    if (answers < N / 2 || lines < 1 || lines > N / 4)
        fail_msg("answers in shared waits: %zu in %d waits", answers, lines);
    tests_ok++;
}

/* --- what outsiders write: escaped, refused, counted ------------------------------------- */

static void send_registration(const cmr_agent_registration_t *r)
{
    char err[256];
    cmr_producer_t *p = cmr_producer_new(conf, "cp-forger", NULL, NULL, err, sizeof err);
    assert_non_null(p);
    assert_int_equal(cmr_producer_send(p, CMR_MSG_AGENT_REGISTRATION, r, NULL, NULL, err, sizeof err), CMR_SEND_OK);
    assert_int_equal(cmr_producer_flush(p, 10000), 0);
    cmr_producer_destroy(p, 1000);
}

static void test_outsider_values_in_logs(void **state)
{
    (void)state;
    /* a newline in an agent name: one escaped line, no forged one */
    cp_peer_t evil;
    assert_int_equal(cp_peer_open(&evil, conf, "evil\nts=x level=info prog=cmr-config event=agent.configured FORGED",
                                  "host\r\"q\"", "192.0.2.1"),
                     0);
    assert_int_equal(cp_peer_register(&evil, 1), 0);
    cmr_msg_t m;
    assert_int_equal(cp_peer_expect(&evil, CMR_MSG_NO_ENVIRONMENT, 30000, &m), 1);
    cmr_msg_free(&m);
    assert_int_equal(cp_proc_wait_log(&worker, "event=agent.no_environment agent=\"evil\\nts=x level=info", 10000), 0);
    assert_true(cp_proc_count_log(&worker, "agent=\"evil\\nts=x") >= 2); /* registration and answer */
    assert_int_equal(cp_proc_count_log(&worker, "\nts=x"), 0);           /* no line starts with it */
    assert_true(cp_proc_count_log(&worker, "host=\"host\\r\\\"q\\\"\"") >= 1);
    cp_peer_close(&evil);

    /* refused registrations: counted and logged per reason, never answered */
    char *ips[] = {"10.1.1.1"};
    cmr_agent_registration_t r = {.instance_id = "../../etc/passwd",
                                  .agent_name = "shop-x",
                                  .hostname = "h",
                                  .ip_addresses = {ips, 1},
                                  .jvm_vendor = "v",
                                  .jvm_version = "1",
                                  .agent_version = "t",
                                  .start_time_ms = 1,
                                  .attempt = 1};
    send_registration(&r);
    assert_int_equal(cp_proc_wait_log(&worker, "event=config.rejected topic=cmr.registrations", 10000), 0);
    assert_int_equal(cp_proc_wait_log(&worker,
                                      "reason=bad_instance_id agent=\"shop-x\" host=\"h\" "
                                      "instance=\"../../etc/passwd\" count=1",
                                      10000),
                     0);
    char name[400];
    memset(name, 'n', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    r.instance_id = "0123456789abcdef0123456789abcdef";
    r.agent_name = name;
    send_registration(&r);
    assert_int_equal(cp_proc_wait_log(&worker, "reason=field_too_long", 10000), 0);
    assert_int_equal(cp_proc_count_log(&worker, "instance=0123456789abcdef0123456789abcdef"), 0); /* not answered */
    tests_ok++;
}

/* --- records of older schema versions ------------------------------------------------- */

static void test_record_of_an_older_version(void **state)
{
    (void)state;
    int64_t rev = listed_revision("batch");
    assert_true(rev > 0);
    cmr_sensor_assignment_t a = {.sensor = CMR_SENSOR_TIMER,
                                 .class_pattern = "com.batch.*",
                                 .method_pattern = "*",
                                 .trivial = true}; /* not in that version: false on arrival */
    cmr_environment_t env = {.id = "batch", .name = "Batch", .description = "written by an older cmr-config"};
    env.assignments.items = &a;
    env.assignments.count = 1;
    env.strategy = (cmr_strategy_t){.send_interval_ms = 321,
                                    .ring_records = 8192,
                                    .max_batch_events = 1024,
                                    .metric_interval_ms = 10000,
                                    .max_threads = 256,
                                    .stall_threshold_ms = 1,  /* not in that version: 10000 */
                                    .max_segment_events = 1}; /* not in that version: 100000 */
    env.trace_context = CMR_TRACE_CONTEXT_NONE;               /* not in that version: AUTHENTICATED */
    cmr_config_change_t cc = {.kind = CMR_CONFIG_ENVIRONMENT,
                              .revision = rev + 1,
                              .time_ms = cmr_wall_ms(),
                              .author = "cmr-config of 2026-11-21",
                              .environment = &env};
    cmr_buf_t old = {0};
    assert_int_equal(msg_encode_past(CMR_MSG_CONFIG_CHANGE, &cc, MSG_PAST_CONFIG_CHANGE_FIRST, &old), 0);
    cmr_producer_t *p = cmr_producer_new(conf, "older-cmr-config", NULL, NULL, NULL, 0);
    assert_non_null(p);
    assert_int_equal(cmr_producer_send_raw(p, cmr_topic_name(CMR_TOPIC_CONFIG), "batch", 5, old.data, old.len, NULL),
                     0);
    assert_int_equal(cmr_producer_flush(p, 10000), 0);
    cmr_producer_destroy(p, 1000);
    cmr_buf_free(&old);

    /* `cmr-config list` and the running worker read it */
    int64_t deadline = cmr_mono_ms() + 15000;
    while (listed_revision("batch") != rev + 1 && cmr_mono_ms() < deadline)
        cmr_sleep_ms(200);
    assert_int_equal(listed_revision("batch"), rev + 1);
    assert_int_equal(cp_proc_wait_log(&worker, "event=config.environment_changed environment=batch", 10000), 0);

    /* a restarted worker rebuilds the environment from it and configures an agent */
    assert_int_equal(cp_proc_stop(&worker), 0);
    assert_int_equal(start_worker(), 0);
    cp_peer_t nightly;
    assert_int_equal(cp_peer_open(&nightly, conf, "nightly", "host-o", "2001:db8::7"), 0);
    assert_int_equal(cp_peer_register(&nightly, 1), 0);
    cmr_msg_t m;
    assert_int_equal(cp_peer_expect(&nightly, CMR_MSG_AGENT_CONFIGURATION, 30000, &m), 1);
    const cmr_agent_configuration_t *c = &m.u.agent_configuration;
    assert_string_equal(c->environment_id, "batch");
    assert_int_equal(c->revision, rev + 1);
    assert_int_equal(c->strategy.send_interval_ms, 321);
    assert_int_equal(c->strategy.max_threads, 256);
    assert_int_equal(c->strategy.stall_threshold_ms, 10000);
    assert_int_equal(c->strategy.max_segment_events, 100000);
    assert_int_equal(c->trace_context.policy, CMR_TRACE_CONTEXT_AUTHENTICATED);
    assert_int_equal(c->request_headers.count, 0);
    cmr_msg_free(&m);
    cp_peer_close(&nightly);
    assert_int_equal(cp_proc_count_log(&worker, "unknown schema"), 0);
    tests_ok++;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s CMR-BROKER CMR-CONFIG\n", argv[0]);
        return 2;
    }
    broker_bin = argv[1];
    config_bin = argv[2];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registration_gets_configuration),
        cmocka_unit_test(test_unmapped_agent_gets_no_environment),
        cmocka_unit_test(test_environment_update_reaches_its_agents),
        cmocka_unit_test(test_mapping_change_reaches_remapped_agents),
        cmocka_unit_test(test_malformed_file_changes_nothing),
        cmocka_unit_test(test_foreign_bytes_and_restart),
        cmocka_unit_test(test_apply_all_or_nothing),
        cmocka_unit_test(test_same_name_instances),
        cmocka_unit_test(test_registration_burst_answered_together),
        cmocka_unit_test(test_diagnoses),
        cmocka_unit_test(test_outsider_values_in_logs),
        cmocka_unit_test(test_record_of_an_older_version),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

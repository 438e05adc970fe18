/*
 * test_cp_failover.c - two cmr-instrumenter processes in one consumer group share the
 * agents (cmr.classes is keyed by agent id); one is killed with SIGKILL in the middle of
 * the run, the other takes its partitions over, and every class of every agent still gets
 * its Redefine (offsets are committed only after the answer is delivered and the cache
 * write is durable, so what the dead worker had not finished is replayed). The survivor
 * also reads what the dead worker had finished into its own cache (catch-up of newly
 * assigned partitions): a configuration change afterwards restores the original bytes of
 * every class of every agent, the moved ones included.
 *
 * The overhead budget across workers: one worker judges a JVM of an environment and takes a
 * method's probes out; the other worker, which owns other JVMs of that environment, reads
 * the removal from cmr.budget and gives its own JVMs the class without them too.
 *
 * Usage: test_cp_failover CMR-BROKER CMR-CONFIG CMR-INSTRUMENTER
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker_proc.h"
#include "cmr/ids.h"
#include "cmr/log.h"
#include "cmr/wire.h"
#include "cmr/clock.h"
#include "cp_support.h"

#define N_CLASSES 30
#define N_AGENTS 10

static const char *broker_bin, *config_bin, *instr_bin;
/* what the test starts, so that a failing assertion still stops it (group teardown) */
static broker_proc_t broker;
static cp_proc_t w[2];
static char tmp[256];

static const char *env = "version: 1\n"
                         "environments:\n"
                         "  - id: gen\n"
                         "    sensors:\n"
                         "      - {sensor: timer, class: \"gen.*\", method: m, trivial: true}\n";

static int start_worker(cp_proc_t *p, const char *bootstrap, const char *tmp, const char *name)
{
    char db[300], log[300];
    cp_fmt(db, sizeof db, "%s/%s-db", tmp, name);
    cp_fmt(log, sizeof log, "%s/%s.log", tmp, name);
    const char *argv[] = {instr_bin,
                          "--bootstrap",
                          bootstrap,
                          "--db",
                          db,
                          "-X",
                          "kafka.session.timeout.ms=6000",
                          "-X",
                          "kafka.heartbeat.interval.ms=500",
                          "-X",
                          cp_signing_key_option(),
                          "--log-level",
                          "debug",
                          NULL};
    return cp_proc_start(p, argv, log);
}

/* Reads every peer's commands once; marks answered classes. */
static int collect(cp_peer_t *peers, unsigned char answered[N_AGENTS][N_CLASSES], int *total)
{
    for (int a = 0; a < N_AGENTS; a++) {
        cmr_msg_t m;
        while (cp_peer_next(&peers[a], 20, &m) == 1) {
            int i;
            if (m.type == CMR_MSG_REDEFINE && sscanf(m.u.redefine.class_name, "gen/C%d", &i) == 1 && i >= 0 &&
                i < N_CLASSES && !answered[a][i]) {
                answered[a][i] = 1;
                (*total)++;
            }
            cmr_msg_free(&m);
        }
    }
    return *total;
}

static void test_worker_killed_mid_run(void **state)
{
    (void)state;
    cmr_log_set_level(CMR_LOG_ERROR);
    assert_int_equal(cp_tmpdir(tmp, sizeof tmp), 0);
    assert_int_equal(cp_keys_make(config_bin, tmp), 0);
    /* N_CLASSES tiny classes */
    static char names[N_CLASSES][32], bodies[N_CLASSES][160];
    const char *sources[2 * N_CLASSES + 2];
    for (int i = 0; i < N_CLASSES; i++) {
        cp_fmt(names[i], sizeof names[i], "C%d.java", i);
        cp_fmt(bodies[i], sizeof bodies[i],
               "package gen;\npublic class C%d {\n  public int m(int x) {\n    return x + %d;\n  }\n}\n", i, i);
        sources[2 * i] = names[i];
        sources[2 * i + 1] = bodies[i];
    }
    sources[2 * N_CLASSES] = sources[2 * N_CLASSES + 1] = NULL;
    cp_classes_t classes;
    assert_int_equal(cp_java_compile(sources, &classes), 0);
    assert_int_equal(classes.count, N_CLASSES);

    assert_int_equal(broker_proc_start(&broker, broker_bin, NULL), 0);
    cmr_conf_t *conf = cmr_conf_new();
    cmr_conf_set(conf, "kafka.bootstrap.servers", broker.bootstrap, "test");
    assert_int_equal(cp_apply(config_bin, broker.bootstrap, env, NULL), 0);

    assert_int_equal(start_worker(&w[0], broker.bootstrap, tmp, "a"), 0);
    assert_int_equal(cp_proc_wait_log(&w[0], "event=instr.partitions_assigned", 30000), 0);
    assert_int_equal(start_worker(&w[1], broker.bootstrap, tmp, "b"), 0);
    assert_int_equal(cp_proc_wait_log(&w[1], "event=instr.partitions_assigned", 30000), 0);

    static cp_peer_t peers[N_AGENTS];
    for (int a = 0; a < N_AGENTS; a++) {
        char name[32];
        cp_fmt(name, sizeof name, "gen-%d", a);
        assert_int_equal(cp_peer_open(&peers[a], conf, name, "host", "10.0.0.1"), 0);
        cp_fmt(peers[a].env_id, sizeof peers[a].env_id, "gen");
        peers[a].revision = 1;
    }
    static unsigned char answered[N_AGENTS][N_CLASSES];
    int total = 0;
    /* first half */
    for (int a = 0; a < N_AGENTS; a++) {
        for (int i = 0; i < N_CLASSES / 2; i++)
            assert_int_equal(cp_peer_send_class(&peers[a], classes.items[i].name, 1, classes.items[i].bytes,
                                                classes.items[i].len, CMR_CLASS_LOADED, 0),
                             0);
        assert_int_equal(cp_peer_flush(&peers[a]), 0);
    }
    /* until both workers are answering (the one killed has agents of its own: on a busy
     * machine the first answers may all come from one of them while the other is still
     * taking its share after the rebalance), and a few answers are in */
    int64_t deadline = cmr_mono_ms() + 60000;
    while ((collect(peers, answered, &total) < N_AGENTS * 3 || cp_proc_count_log(&w[0], "event=instr.redefine ") == 0 ||
            cp_proc_count_log(&w[1], "event=instr.redefine ") == 0) &&
           cmr_mono_ms() < deadline)
        ;
    assert_true(total >= N_AGENTS * 3);
    assert_true(cp_proc_count_log(&w[0], "event=instr.redefine ") > 0);
    assert_true(cp_proc_count_log(&w[1], "event=instr.redefine ") > 0);
    int assigned_before = cp_proc_count_log(&w[1], "event=instr.partitions_assigned");
    /* kill one worker in the middle of the run */
    cp_proc_kill(&w[0]);
    fprintf(stderr, "killed worker a after %d answers\n", total);
    for (int a = 0; a < N_AGENTS; a++) {
        for (int i = N_CLASSES / 2; i < N_CLASSES; i++)
            assert_int_equal(cp_peer_send_class(&peers[a], classes.items[i].name, 1, classes.items[i].bytes,
                                                classes.items[i].len, CMR_CLASS_LOADED, 0),
                             0);
        assert_int_equal(cp_peer_flush(&peers[a]), 0);
    }
    deadline = cmr_mono_ms() + 90000;
    while (collect(peers, answered, &total) < N_AGENTS * N_CLASSES && cmr_mono_ms() < deadline)
        ;
    /* the survivor took the dead worker's partitions over */
    assert_true(cp_proc_count_log(&w[1], "event=instr.partitions_assigned") > assigned_before);
    for (int a = 0; a < N_AGENTS; a++)
        for (int i = 0; i < N_CLASSES; i++)
            if (!answered[a][i])
                fprintf(stderr, "agent gen-%d: class gen/C%d never answered\n", a, i);
    assert_int_equal(total, N_AGENTS * N_CLASSES);

    /* remove the sensor: every class of every agent gets its original bytes back */
    const char *env_off = "version: 1\nenvironments:\n  - id: gen\n    sensors: []\n";
    assert_int_equal(cp_apply(config_bin, broker.bootstrap, env_off, NULL), 0);
    static unsigned char restored[N_AGENTS][N_CLASSES];
    int n_restored = 0;
    deadline = cmr_mono_ms() + 60000;
    while (n_restored < N_AGENTS * N_CLASSES && cmr_mono_ms() < deadline) {
        for (int a = 0; a < N_AGENTS; a++) {
            cmr_msg_t m;
            while (cp_peer_next(&peers[a], 20, &m) == 1) {
                int i;
                if (m.type == CMR_MSG_REDEFINE && m.u.redefine.original &&
                    sscanf(m.u.redefine.class_name, "gen/C%d", &i) == 1 && i >= 0 && i < N_CLASSES && !restored[a][i]) {
                    const cp_class_t *c = cp_classes_find(&classes, m.u.redefine.class_name);
                    assert_non_null(c);
                    assert_int_equal(m.u.redefine.bytecode.len, c->len);
                    assert_memory_equal(m.u.redefine.bytecode.data, c->bytes, c->len);
                    restored[a][i] = 1;
                    n_restored++;
                }
                cmr_msg_free(&m);
            }
        }
    }
    for (int a = 0; a < N_AGENTS; a++)
        for (int i = 0; i < N_CLASSES; i++)
            if (!restored[a][i])
                fprintf(stderr, "agent gen-%d: class gen/C%d not restored\n", a, i);
    assert_int_equal(n_restored, N_AGENTS * N_CLASSES);
    assert_true(cp_proc_count_log(&w[1], "event=instr.partition_caught_up") > 0);

    for (int a = 0; a < N_AGENTS; a++)
        cp_peer_close(&peers[a]);
    assert_int_equal(cp_proc_stop(&w[1]), 0);
    cmr_conf_destroy(conf);
    cp_classes_free(&classes);
}

/* Agent a's Redefines of budget/Hot until one with `methods` methods comes (within
 * timeout_ms): 1, or 0. */
static int redefined_with(cp_peer_t *p, size_t methods, int timeout_ms)
{
    for (int64_t deadline = cmr_mono_ms() + timeout_ms; cmr_mono_ms() < deadline;) {
        cmr_msg_t m;
        if (cp_peer_next(p, 200, &m) != 1)
            continue;
        bool hit = m.type == CMR_MSG_REDEFINE && !strcmp(m.u.redefine.class_name, "budget/Hot") &&
                   m.u.redefine.methods.count == methods;
        cmr_msg_free(&m);
        if (hit)
            return 1;
    }
    return 0;
}

static void test_budget_removal_reaches_the_other_worker(void **state)
{
    (void)state;
    enum { N_MAX = 24 };
    const char *sources[] = {"Hot.java",
                             "package budget;\npublic class Hot {\n  public int hot(int x) {\n    return x + 1;\n  }\n"
                             "  public int cold(int x) {\n    return x - 1;\n  }\n}\n",
                             NULL, NULL};
    cp_classes_t classes;
    assert_int_equal(cp_java_compile(sources, &classes), 0);
    const char *shared = "version: 1\nenvironments:\n  - id: shared\n    sensors:\n"
                         "      - {sensor: invocation-sequence, class: budget.Hot, method: \"*\", trivial: true}\n";
    assert_int_equal(cp_apply(config_bin, broker.bootstrap, shared, NULL), 0);
    assert_int_equal(start_worker(&w[0], broker.bootstrap, tmp, "c"), 0);
    assert_int_equal(cp_proc_wait_log(&w[0], "event=instr.partitions_assigned", 30000), 0);
    assert_int_equal(start_worker(&w[1], broker.bootstrap, tmp, "d"), 0);
    assert_int_equal(cp_proc_wait_log(&w[1], "event=instr.partitions_assigned", 30000), 0);
    cmr_conf_t *conf = cmr_conf_new();
    cmr_conf_set(conf, "kafka.bootstrap.servers", broker.bootstrap, "test");
    /* JVMs until both workers own some, 4 at least (the agents spread over cmr.classes'
     * partitions: 24 all on one worker would be a chance of 1 in 8 million) */
    static cp_peer_t peers[N_MAX];
    int owner[N_MAX], n = 0, owned[2] = {0, 0};
    for (int a = 0; a < N_MAX && (a < 4 || !owned[0] || !owned[1]); a++, n++) {
        char name[32];
        cp_fmt(name, sizeof name, "shared-%d", a);
        assert_int_equal(cp_peer_open(&peers[a], conf, name, "host", "10.0.0.1"), 0);
        cp_fmt(peers[a].env_id, sizeof peers[a].env_id, "shared");
        peers[a].revision = 1;
        assert_int_equal(cp_peer_send_class(&peers[a], "budget/Hot", 1, classes.items[0].bytes, classes.items[0].len,
                                            CMR_CLASS_LOADED, 0),
                         0);
        assert_int_equal(cp_peer_flush(&peers[a]), 0);
        assert_int_equal(redefined_with(&peers[a], 2, 30000), 1);
        char line[80];
        cp_fmt(line, sizeof line, "class=budget/Hot agent=%016" PRIx64, (uint64_t)peers[a].agent_id);
        owner[a] = cp_proc_count_log(&w[0], line) > 0 ? 0 : cp_proc_count_log(&w[1], line) > 0 ? 1 : -1;
        assert_true(owner[a] >= 0);
        owned[owner[a]]++;
    }
    assert_true(owned[0] > 0 && owned[1] > 0);
    int judged = 0; /* an agent of worker c; those of d must follow it */
    while (owner[judged] != 0)
        judged++;
    /* the judged JVM: hot's probes cost half its CPU, more than hot itself */
    uint64_t hot = cmr_method_id("budget/Hot", "hot", "(I)I"), cold = cmr_method_id("budget/Hot", "cold", "(I)I");
    cmr_method_metric_t mm[] = {
        {.method_id = (int64_t)hot, .count = 10000000, .sum_ns = 60000000, .self_ns = 50000000},
        {.method_id = (int64_t)cold, .count = 100, .sum_ns = 100000000, .self_ns = 100000000},
    };
    cmr_metric_batch_t mb = {.agent_id = peers[judged].agent_id,
                             .interval_ms = 1000,
                             .environment_id = "shared",
                             .cpu_ns = 1000000000,
                             .metrics = {mm, 2}};
    char err[256];
    for (int i = 0; i < 3; i++) { /* instrumenter.budget.intervals */
        mb.interval_start_ms = cmr_wall_ms() + i * 1000;
        assert_int_equal(
            cmr_producer_send(peers[judged].producer, CMR_MSG_METRIC_BATCH, &mb, NULL, NULL, err, sizeof err),
            CMR_SEND_OK);
    }
    assert_int_equal(cp_peer_flush(&peers[judged]), 0);
    assert_int_equal(cp_proc_wait_log(&w[0], "event=instr.budget_removed environment=shared", 30000), 0);
    /* every JVM of the environment loses hot's probes, those of the other worker too */
    for (int a = 0; a < n; a++)
        if (!redefined_with(&peers[a], 1, 30000))
            fail_msg("agent shared-%d (worker %s) kept hot's probes", a, owner[a] ? "d" : "c");
    assert_true(cp_proc_count_log(&w[0], "event=instr.budget_removed") > 0);
    assert_int_equal(cp_proc_count_log(&w[1], "event=instr.budget_removed"), 0); /* it only read it */
    fprintf(stderr, "%d agents (worker c %d, worker d %d): all lost hot's probes\n", n, owned[0], owned[1]);
    for (int a = 0; a < n; a++)
        cp_peer_close(&peers[a]);
    assert_int_equal(cp_proc_stop(&w[0]), 0);
    assert_int_equal(cp_proc_stop(&w[1]), 0);
    cmr_conf_destroy(conf);
    cp_classes_free(&classes);
}

static int teardown(void **state)
{
    (void)state;
    cp_proc_stop(&w[0]);
    cp_proc_stop(&w[1]);
    broker_proc_stop(&broker);
    cp_rmrf(tmp);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s CMR-BROKER CMR-CONFIG CMR-INSTRUMENTER\n", argv[0]);
        return 2;
    }
    broker_bin = argv[1];
    config_bin = argv[2];
    instr_bin = argv[3];
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_worker_killed_mid_run),
                                       cmocka_unit_test(test_budget_removal_reaches_the_other_worker)};
    return cmocka_run_group_tests(tests, NULL, teardown);
}

/*
 * test_e2e_control.c - the control plane end to end: the real cmr-config and
 * cmr-instrumenter workers (separate processes) on the embedded broker, and real JVMs with
 * the agent (tests/agent's AgentTestApp). A scripted observer (tests/agent/support/
 * cmr_peer.c) only watches what agents send; every answer comes from the workers.
 *
 *   - a method matching the environment's rule is instrumented and its probes fire;
 *   - a JVM whose name maps to no environment gets NoEnvironment and runs uninstrumented;
 *   - work handed to a ThreadPoolExecutor continues the trace on the pool's thread: the
 *     instrumenter instruments the JDK's hand-off points by itself;
 *   - applying a changed environment while the JVM runs instruments a class the CMR has
 *     (redefine), one whose bytes it dropped (resend, then redefine), and removes the
 *     instrumentation of another (original bytes; its probes stop firing);
 *   - a forged ClassLoaded (someone who can write cmr.classes: the victim JVM's agent and
 *     instance id, its loader id, other bytes for one of its classes, a class_hash that
 *     does not match them) runs nothing in the victim JVM: the instrumenter refuses it.
 * The run makes its own command signing key pair (cmr-config keygen): the workers sign
 * with it (-X trust.signing_key), the JVMs pin its public half (trust.keys).
 *
 * Usage: test_e2e_control BROKER CMR_CONFIG CMR_INSTRUMENTER JAVA AGENT_SO CLASSPATH EVIL_CLASS
 *   EVIL_CLASS: a class file of demo/Greeter other than the one the JVM loads
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "broker_proc.h"
#include "cmr/event.h"
#include "cmr/ids.h"
#include "cmr/log.h"
#include "cmr/wire.h"
#include "cmr_peer.h"
#include "jvm_proc.h"

static const char *broker_bin, *config_bin, *instr_bin, *java_bin, *agent_so, *classpath, *evil_class;
static broker_proc_t broker;
static cmr_peer_t peer;
static jvm_proc_t config_worker, instr_worker;
static char workdir[] = "/tmp/cmr-e2e-XXXXXX";
static char signing_opt[300]; /* trust.signing_key=<workdir>/cmr.key, for the workers */
static char trust_pub[256];   /* <workdir>/cmr.pub, pinned by every JVM */

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* snprintf into an array that must hold the whole text (a path, a name): true when it does. */
#define FITS(buf, ...) (snprintf((buf), sizeof(buf), __VA_ARGS__) < (int)sizeof(buf))

/* cmr-config apply of `yaml` (written to the work directory): 0 when it succeeded. */
static int apply_file(const char *yaml)
{
    char path[256];
    if (!FITS(path, "%s/env.yaml", workdir))
        return -1;
    write_text(path, yaml);
    jvm_proc_t p;
    const char *argv[] = {config_bin, "--bootstrap", broker.bootstrap, "--log-level", "warn", "apply", path, NULL};
    if (jvm_proc_start(&p, argv) != 0)
        return -1;
    int rc = jvm_proc_wait(&p, 60000);
    jvm_proc_cleanup(&p);
    return rc == 0 ? 0 : -1;
}

/* cmr-config keygen: this run's key pair in the work directory. 0 when it succeeded. */
static int make_keys(void)
{
    if (!FITS(signing_opt, "trust.signing_key=%s/cmr.key", workdir) || !FITS(trust_pub, "%s/cmr.pub", workdir))
        return -1;
    jvm_proc_t p;
    const char *argv[] = {config_bin, "keygen", "--dir", workdir, "--name", "cmr", NULL};
    if (jvm_proc_start(&p, argv) != 0)
        return -1;
    int rc = jvm_proc_wait(&p, 60000);
    jvm_proc_cleanup(&p);
    return rc == 0 ? 0 : -1;
}

/* cmr-config apply: a process that must succeed. */
static void apply_environment(const char *yaml)
{
    assert_int_equal(apply_file(yaml), 0);
}

typedef struct jvm_agent {
    jvm_proc_t jvm;
    char name[64], instance[33], hostname[256];
    int64_t agent_id;
} jvm_agent_t;

static bool by_name(const cmr_msg_t *m, const void *ud)
{
    return strcmp(m->u.registration.agent_name, (const char *)ud) == 0;
}

static void start_jvm(jvm_agent_t *j, const char *prefix)
{
    memset(j, 0, sizeof *j);
    uint8_t raw[4];
    char hex[9], agentpath[2048];
    cmr_random_bytes(raw, sizeof raw);
    cmr_hex(raw, sizeof raw, hex);
    assert_true(FITS(j->name, "%s-%s", prefix, hex));
    assert_true(FITS(agentpath, "-agentpath:%s=bootstrap=%s,name=%s,trust.keys=%s", agent_so, broker.bootstrap, j->name,
                     trust_pub));
    const char *argv[] = {java_bin, agentpath, "-cp", classpath, "AgentTestApp", NULL};
    assert_int_equal(jvm_proc_start(&j->jvm, argv), 0);
    assert_int_equal(jvm_proc_expect(&j->jvm, "ready", NULL, 0, 30000), 0);
    const cmr_record_t *reg = cmr_peer_wait(&peer, CMR_MSG_AGENT_REGISTRATION, by_name, j->name, 0, 90000);
    assert_non_null(reg);
    assert_true(FITS(j->instance, "%s", reg->msg.u.registration.instance_id));
    assert_true(FITS(j->hostname, "%s", reg->msg.u.registration.hostname));
    j->agent_id = (int64_t)cmr_agent_id(j->name, j->hostname, j->instance);
}

static void command(jvm_agent_t *j, const char *cmd, const char *answer)
{
    jvm_proc_send(&j->jvm, cmd);
    assert_int_equal(jvm_proc_expect(&j->jvm, answer, NULL, 0, 30000), 0);
}

typedef struct result_match {
    const char *instance, *class_name;
    int status;
} result_match_t;

static bool result_of(const cmr_msg_t *m, const void *ud)
{
    const result_match_t *r = ud;
    return strcmp(m->u.redefine_result.instance_id, r->instance) == 0 &&
           strcmp(m->u.redefine_result.class_name, r->class_name) == 0 && (int)m->u.redefine_result.status == r->status;
}

typedef struct state_match {
    const char *instance;
    cmr_agent_state_t state;
} state_match_t;

static bool state_of(const cmr_msg_t *m, const void *ud)
{
    const state_match_t *s = ud;
    return strcmp(m->u.agent_status.instance_id, s->instance) == 0 && m->u.agent_status.state == s->state;
}

typedef struct resend_match {
    const char *instance, *class_name;
} resend_match_t;

static bool resent(const cmr_msg_t *m, const void *ud)
{
    const resend_match_t *r = ud;
    return strcmp(m->u.class_loaded.instance_id, r->instance) == 0 &&
           strcmp(m->u.class_loaded.class_name, r->class_name) == 0 && m->u.class_loaded.cause == CMR_CLASS_RESEND;
}

/* Events of the agent for one method, counted over every batch seen so far. */
static uint64_t events_of(jvm_agent_t *j, uint64_t method_id)
{
    uint64_t n = 0;
    for (size_t i = 0; i < peer.nsegs; i++) {
        const cmr_event_batch_t *b = peer.segs[i];
        if (b->agent_id != j->agent_id)
            continue;
        static cmr_events_decoder_t d; /* large; the test runs on one thread */
        cmr_events_decoder_init(&d, b->packed_events.data, b->packed_events.len, (uint32_t)b->event_count);
        cmr_event_t ev;
        while (cmr_events_decoder_next(&d, &ev) == 1)
            n += ev.method_id == method_id;
    }
    return n;
}

static uint64_t wait_events(jvm_agent_t *j, uint64_t method_id, uint64_t at_least, int timeout_ms)
{
    uint64_t n = 0;
    for (int waited = 0; waited < timeout_ms; waited += 100) {
        cmr_peer_poll(&peer, 100);
        if ((n = events_of(j, method_id)) >= at_least)
            break;
    }
    return n;
}

/* Runs `cmd` every half second until the agent has shipped events of the method: a
 * class may go through a resend before its instrumented bytes arrive, and the first
 * APPLIED result of the class can be the resend's. */
static bool fires(jvm_agent_t *j, const char *cmd, const char *answer, uint64_t method_id, int timeout_ms)
{
    for (int waited = 0; waited < timeout_ms; waited += 500) {
        command(j, cmd, answer);
        if (wait_events(j, method_id, 1, 500) >= 1)
            return true;
    }
    return false;
}

/* The environment e2e (its sensors follow) and the mapping of every e2e-* agent to it. */
#define ENV_HEAD                   \
    "version: 1\n"                 \
    "environments:\n"              \
    "  - id: e2e\n"                \
    "    name: End to end\n"       \
    "    strategy:\n"              \
    "      send_interval_ms: 10\n" \
    "    sensors:\n"
#define ENV_MAPPINGS "mappings:\n  - agent: \"e2e-*\"\n    address: \"*\"\n    environment: e2e\n"

static const char env_v1[] = ENV_HEAD "      - sensor: invocation-sequence\n"
                                      "        class: demo.Work\n"
                                      "        method: call\n"
                                      "        trivial: true\n"
                                      "      - sensor: invocation-sequence\n"
                                      "        class: demo.PoolWork\n"
                                      "        method: run\n"
                                      "        trivial: true\n" ENV_MAPPINGS;

/* Work.call loses its sensor, Greeter.greet (bytes kept) and Fanout.run (bytes dropped by
 * the instrumenter's tiny cache budget) get one. */
static const char env_v2[] = ENV_HEAD "      - sensor: invocation-sequence\n"
                                      "        class: demo.Greeter\n"
                                      "        method: greet\n"
                                      "        trivial: true\n"
                                      "      - sensor: invocation-sequence\n"
                                      "        class: demo.Fanout\n"
                                      "        method: run\n"
                                      "        trivial: true\n" ENV_MAPPINGS;

static void test_rules_instrument_and_changes_apply_while_running(void **state)
{
    (void)state;
    jvm_agent_t j;
    start_jvm(&j, "e2e");
    command(&j, "greet", "greet: hello");
    command(&j, "load demo.Work demo.Fanout", "loaded");
    result_match_t work_on = {j.instance, "demo/Work", CMR_COMMAND_APPLIED};
    assert_non_null(cmr_peer_wait(&peer, CMR_MSG_REDEFINE_RESULT, result_of, &work_on, 0, 60000));
    uint64_t call_id = cmr_method_id("demo/Work", "call", "(I)J");
    command(&j, "work 1 50", "work: calls=50");
    assert_int_equal(wait_events(&j, call_id, 400, 30000), 400); /* 50 calls x 4 invocations x 2 */

    /* the pool's tasks continue the trace: segments of other threads, parented by a FORK */
    result_match_t tpe_on = {j.instance, "java/util/concurrent/ThreadPoolExecutor", CMR_COMMAND_APPLIED};
    assert_non_null(cmr_peer_wait(&peer, CMR_MSG_REDEFINE_RESULT, result_of, &tpe_on, 0, 60000));
    command(&j, "load demo.PoolWork", "loaded");
    result_match_t pool_on = {j.instance, "demo/PoolWork", CMR_COMMAND_APPLIED};
    assert_non_null(cmr_peer_wait(&peer, CMR_MSG_REDEFINE_RESULT, result_of, &pool_on, 0, 60000));
    command(&j, "pool 3", "pool: tasks=3");
    int children = 0;
    for (int waited = 0; waited < 30000 && children < 3; waited += 100) {
        cmr_peer_poll(&peer, 100);
        children = 0;
        for (size_t i = 0; i < peer.nsegs; i++) {
            const cmr_event_batch_t *b = peer.segs[i];
            children += b->agent_id == j.agent_id && b->batch_seq == 0 && b->parent != NULL &&
                        strcmp(b->thread_name, "pool-worker") == 0;
        }
    }
    assert_int_equal(children, 3);

    apply_environment(env_v2);
    /* Greeter: bytes in the cache -> Redefine with newly instrumented bytes */
    result_match_t greet_on = {j.instance, "demo/Greeter", CMR_COMMAND_APPLIED};
    assert_non_null(cmr_peer_wait(&peer, CMR_MSG_REDEFINE_RESULT, result_of, &greet_on, 0, 60000));
    /* Fanout: bytes dropped by the cache -> BytecodeResend, the agent sends them, Redefine */
    resend_match_t fan = {j.instance, "demo/Fanout"};
    assert_non_null(cmr_peer_wait(&peer, CMR_MSG_CLASS_LOADED, resent, &fan, 0, 60000));
    result_match_t fan_on = {j.instance, "demo/Fanout", CMR_COMMAND_APPLIED};
    assert_non_null(cmr_peer_wait(&peer, CMR_MSG_REDEFINE_RESULT, result_of, &fan_on, 0, 60000));
    /* Work: instrumentation removed -> original bytes: a second APPLIED result */
    assert_non_null(cmr_peer_wait(&peer, CMR_MSG_REDEFINE_RESULT, result_of, &work_on, 1, 60000));

    uint64_t greet_id = cmr_method_id("demo/Greeter", "greet", "()Ljava/lang/String;");
    assert_true(fires(&j, "greet", "greet: hello", greet_id, 30000)); /* same behaviour, now with probes */
    uint64_t run_id = cmr_method_id("demo/Fanout", "run", "(Ljava/util/concurrent/ExecutorService;I)I");
    assert_true(fires(&j, "fanout 2", "fanout: tasks=2", run_id, 30000));
    uint64_t before = events_of(&j, call_id);
    command(&j, "work 1 50", "work: calls=50");
    cmr_peer_poll(&peer, 1000);
    assert_int_equal(events_of(&j, call_id), before); /* Work.call's probes are gone */
    command(&j, "exit", "bye");
    assert_int_equal(jvm_proc_wait(&j.jvm, 30000), 0);
    jvm_proc_cleanup(&j.jvm);
}

static void test_unmapped_jvm_gets_no_environment(void **state)
{
    (void)state;
    jvm_agent_t j;
    start_jvm(&j, "unmapped");
    state_match_t sm = {j.instance, CMR_AGENT_NO_ENVIRONMENT};
    assert_non_null(cmr_peer_wait(&peer, CMR_MSG_AGENT_STATUS, state_of, &sm, 0, 60000));
    command(&j, "greet", "greet: hello");
    command(&j, "exit", "bye");
    assert_int_equal(jvm_proc_wait(&j.jvm, 30000), 0);
    assert_true(jvm_proc_stderr_has(&j.jvm, "event=agent.no_environment"));
    jvm_proc_cleanup(&j.jvm);
}

typedef struct loaded_match {
    const char *instance, *class_name;
} loaded_match_t;

static bool loaded_of(const cmr_msg_t *m, const void *ud)
{
    const loaded_match_t *l = ud;
    return strcmp(m->u.class_loaded.instance_id, l->instance) == 0 &&
           strcmp(m->u.class_loaded.class_name, l->class_name) == 0;
}

static bool any_result_of(const cmr_msg_t *m, const void *ud)
{
    const loaded_match_t *l = ud;
    return strcmp(m->u.redefine_result.instance_id, l->instance) == 0 &&
           strcmp(m->u.redefine_result.class_name, l->class_name) == 0;
}

static uint8_t *read_whole(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    uint8_t *buf = malloc(1 << 20);
    assert_non_null(buf);
    *len = fread(buf, 1, 1 << 20, f);
    fclose(f);
    assert_true(*len > 0 && *len < (1 << 20));
    return buf;
}

/* The second attack of docs/SECURITY.md: writing only to cmr.classes, a ClassLoaded naming
 * the victim's agent, instance and loader, with other bytes for a class the environment
 * instruments (Greeter.greet, env_v2) and the real class's hash. The instrumenter refuses
 * it; the victim keeps running its own Greeter. */
static void test_forged_class_loaded_runs_nothing(void **state)
{
    (void)state;
    jvm_agent_t j;
    start_jvm(&j, "e2e");
    command(&j, "greet", "greet: hello");
    loaded_match_t greeter = {j.instance, "demo/Greeter"};
    const cmr_record_t *real = cmr_peer_wait(&peer, CMR_MSG_CLASS_LOADED, loaded_of, &greeter, 0, 60000);
    assert_non_null(real);
    result_match_t greet_on = {j.instance, "demo/Greeter", CMR_COMMAND_APPLIED};
    assert_non_null(cmr_peer_wait(&peer, CMR_MSG_REDEFINE_RESULT, result_of, &greet_on, 0, 60000));
    size_t results = cmr_peer_count(&peer, CMR_MSG_REDEFINE_RESULT, any_result_of, &greeter);

    size_t evil_len;
    uint8_t *evil = read_whole(evil_class, &evil_len); /* greet() says "redefined" */
    const cmr_class_loaded_t *rc = &real->msg.u.class_loaded;
    cmr_class_loaded_t forged = {
        .agent_id = rc->agent_id,
        .instance_id = rc->instance_id,
        .environment_id = rc->environment_id,
        .revision = rc->revision,
        .class_name = rc->class_name,
        .loader_id = rc->loader_id,
        .loader_name = rc->loader_name,
        .class_hash = rc->class_hash, /* the real class's: not the hash of these bytes */
        .cause = CMR_CLASS_LOADED,
        .bytecode = {evil, evil_len},
    };
    assert_true((uint64_t)forged.class_hash != cmr_class_hash(evil, evil_len));
    char err[256];
    assert_int_equal(cmr_producer_send(peer.producer, CMR_MSG_CLASS_LOADED, &forged, NULL, NULL, err, sizeof err),
                     CMR_SEND_OK);
    assert_int_equal(cmr_producer_flush(peer.producer, 10000), 0);
    free(evil);

    /* the instrumenter refused it */
    bool refused = false;
    for (int waited = 0; waited < 30000 && !refused; waited += 100) {
        refused = jvm_proc_stderr_has(&instr_worker, "event=instr.hash_mismatch class=\"demo/Greeter\"");
        if (!refused)
            usleep(100000);
    }
    assert_true(refused);
    assert_true(jvm_proc_stderr_has(&instr_worker, "action=refused"));
    /* nothing was redefined in the victim, which still runs its own code */
    cmr_peer_poll(&peer, 3000);
    assert_int_equal(cmr_peer_count(&peer, CMR_MSG_REDEFINE_RESULT, any_result_of, &greeter), results);
    command(&j, "greet", "greet: hello");
    command(&j, "exit", "bye");
    assert_int_equal(jvm_proc_wait(&j.jvm, 30000), 0);
    jvm_proc_cleanup(&j.jvm);
}

static int setup(void **state)
{
    (void)state;
    cmr_log_set_level(CMR_LOG_WARN);
    if (!mkdtemp(workdir) || broker_proc_start(&broker, broker_bin, NULL) != 0 ||
        cmr_peer_start(&peer, broker.bootstrap) != 0)
        return -1;
    char db[256];
    if (make_keys() != 0 || apply_file(env_v1) != 0 || !FITS(db, "%s/instrumenter", workdir))
        return -1;
    const char *cfg[] = {config_bin, "--bootstrap", broker.bootstrap, "-X", signing_opt, "run", NULL};
    /* a 1-byte cache budget: bytes of classes that need nothing are not kept (resend path) */
    const char *ins[] = {instr_bin,
                         "--bootstrap",
                         broker.bootstrap,
                         "--db",
                         db,
                         "--cache-budget",
                         "1",
                         "-X",
                         signing_opt,
                         "--log-level",
                         getenv("CMR_TEST_DEBUG") ? "debug" : "info",
                         "run",
                         NULL};
    if (jvm_proc_start(&config_worker, cfg) != 0 || jvm_proc_start(&instr_worker, ins) != 0)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    jvm_proc_cleanup(&config_worker);
    jvm_proc_cleanup(&instr_worker);
    cmr_peer_stop(&peer);
    broker_proc_stop(&broker);
    char cmd[300];
    return FITS(cmd, "rm -rf '%s'", workdir) && system(cmd) == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    if (argc != 8) {
        fprintf(stderr, "usage: %s BROKER CMR_CONFIG CMR_INSTRUMENTER JAVA AGENT_SO CLASSPATH EVIL_CLASS\n", argv[0]);
        return 2;
    }
    broker_bin = argv[1];
    config_bin = argv[2];
    instr_bin = argv[3];
    java_bin = argv[4];
    agent_so = argv[5];
    classpath = argv[6];
    evil_class = argv[7];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unmapped_jvm_gets_no_environment),
        cmocka_unit_test(test_rules_instrument_and_changes_apply_while_running),
        cmocka_unit_test(test_forged_class_loaded_runs_nothing), /* env_v2: Greeter.greet instrumented */
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

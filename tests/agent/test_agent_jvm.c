/*
 * test_agent_jvm.c - the agent inside a real JVM, against the embedded broker and a
 * scripted CMR (support/cmr_peer.c) that decides every answer:
 *
 *   - unknown options: a clear message, the JVM runs on without the agent;
 *   - the registration handshake, with classes loaded before it processed after it;
 *   - NoEnvironment: logged, the agent stops trying, the JVM runs uninstrumented;
 *   - Redefine (instrumented and original bytes) changes what the class does; bad bytes
 *     and unknown classes fail alone; BytecodeResend sends the class's bytes again, and
 *     without a class name every class but the instrumented ones;
 *   - probes: a class instrumented by the class-file engine records balanced call trees
 *     (invocation sequence) and per-method aggregates (timer);
 *   - metrics from invocation sequences: per-method counts, one transaction per root
 *     call, a stalled call reported with its thread and stack while it runs, and the
 *     periodic AgentStatus counting the instrumented classes;
 *   - disconnected mode: classes loaded during a broker outage arrive after it;
 *   - stress: many threads; every event arrives or is counted as dropped, none corrupt;
 *   - trust (docs/SECURITY.md): forged commands sent through the broker to a real JVM are
 *     refused and counted, and the attacker's class never runs: a bare Redefine (only the
 *     class hash right), one signed by a key the agent does not pin, a replayed envelope,
 *     an envelope for another instance, a signed Redefine for other original bytes
 *     (DIGEST_MISMATCH); without a pinned key no command at all is accepted; a bad key
 *     file is an error that leaves the JVM running; an agent name with a newline cannot
 *     forge a log line;
 *   - the cache of instrumented classes: a restart runs the cached bytes from the load hook;
 *     another environment's JVM does not; a class the JVM cannot give its original bytes
 *     back to (RetransformClasses fails) is retried once, logged, and reported with the
 *     bytes it runs;
 *   - classes granted ahead (ClassGrants): a class granted for the JVM's environment under
 *     the pinned key loads instrumented with no Redefine; grants of another key or another
 *     environment, and a ClassGrants without an envelope, are refused.
 *
  * Usage: test_agent_jvm BROKER JAVA AGENT_SO CLASSPATH GREETER_V2_CLASS WORK_V3_CLASS
 * (CMR_TEST_FILTER=PATTERN runs only the tests whose name matches, e.g. "*forged*")
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent_probes.h"
#include "grant_store.h"
#include "broker_proc.h"
#include "cmr/buf.h"
#include "cmr/classfile.h"
#include "cmr/clock.h"
#include "cmr/event.h"
#include "cmr/grant.h"
#include "cmr/histogram.h"
#include "cmr/ids.h"
#include "cmr/log.h"
#include "cmr_peer.h"
#include "jvm_proc.h"

static const char *broker_bin, *java_bin, *agent_so, *classpath, *greeter_v2_path, *work_v3_path;
static broker_proc_t broker;
static cmr_peer_t peer;

typedef struct agent_run {
    jvm_proc_t jvm;
    char name[64];
    char instance[33];
    char hostname[256];
    int64_t agent_id;
} agent_run_t;

/* --- helpers -------------------------------------------------------------------------------- */

static uint8_t *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (n < 0) {
        fclose(f);
        return NULL;
    }
    uint8_t *d = malloc((size_t)n);
    if (fread(d, 1, (size_t)n, f) != (size_t)n) {
        free(d);
        d = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return d;
}

static bool by_name(const cmr_msg_t *m, const void *ud)
{
    return m->type == CMR_MSG_AGENT_REGISTRATION && strcmp(m->u.registration.agent_name, (const char *)ud) == 0;
}

typedef struct class_match {
    const char *instance;
    const char *class_name;
    int cause; /* -1: any */
} class_match_t;

static bool class_of(const cmr_msg_t *m, const void *ud)
{
    const class_match_t *c = ud;
    return strcmp(m->u.class_loaded.instance_id, c->instance) == 0 &&
           strcmp(m->u.class_loaded.class_name, c->class_name) == 0 &&
           (c->cause < 0 || (int)m->u.class_loaded.cause == c->cause);
}

typedef struct status_match {
    const char *instance;
    cmr_agent_state_t state;
} status_match_t;

static bool status_of(const cmr_msg_t *m, const void *ud)
{
    const status_match_t *s = ud;
    return strcmp(m->u.agent_status.instance_id, s->instance) == 0 && m->u.agent_status.state == s->state;
}

typedef struct result_match {
    const char *instance;
    int64_t request_id;
} result_match_t;

static bool result_of(const cmr_msg_t *m, const void *ud)
{
    const result_match_t *r = ud;
    return strcmp(m->u.redefine_result.instance_id, r->instance) == 0 &&
           m->u.redefine_result.request_id == r->request_id;
}

/* Starts a JVM with the agent named `name` (extra agent options may be appended; the
 * peer's public key is pinned when `pin_key`) and waits for its registration. */
static void agent_launch(agent_run_t *r, const char *name, const char *extra_options, bool pin_key)
{
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    char agentpath[2048];
    snprintf(agentpath, sizeof agentpath, "-agentpath:%s=bootstrap=%s,name=%s%s%s%s%s", agent_so, broker.bootstrap,
             r->name, pin_key ? "," : "", pin_key ? peer.trust_option : "", extra_options ? "," : "",
             extra_options ? extra_options : "");
    const char *argv[] = {java_bin, "-Xshare:auto", agentpath, "-cp", classpath, "AgentTestApp", NULL};
    assert_int_equal(jvm_proc_start(&r->jvm, argv), 0);
    assert_int_equal(jvm_proc_expect(&r->jvm, "ready", NULL, 0, 30000), 0);
    const cmr_record_t *reg = cmr_peer_wait(&peer, CMR_MSG_AGENT_REGISTRATION, by_name, r->name, 0, 90000);
    assert_non_null(reg);
    snprintf(r->instance, sizeof r->instance, "%s", reg->msg.u.registration.instance_id);
    snprintf(r->hostname, sizeof r->hostname, "%s", reg->msg.u.registration.hostname);
    r->agent_id = (int64_t)cmr_agent_id(r->name, r->hostname, r->instance);
    assert_true(reg->msg.u.registration.pid > 0);
    assert_true(reg->msg.u.registration.attempt >= 1);
    assert_true(strlen(reg->msg.u.registration.jvm_version) > 0);
    assert_true(reg->msg.u.registration.ip_addresses.count > 0);
    assert_string_equal(reg->key, r->instance);
}

/* agent_launch with a fresh name from `test` and the peer's key pinned. */
static void agent_start(agent_run_t *r, const char *test, const char *extra_options)
{
    uint8_t raw[4];
    char hex[9], name[64];
    cmr_random_bytes(raw, sizeof raw);
    cmr_hex(raw, sizeof raw, hex);
    snprintf(name, sizeof name, "%s-%s", test, hex);
    agent_launch(r, name, extra_options, true);
}

static void agent_configure_stall(agent_run_t *r, int metric_interval_ms, int stall_threshold_ms)
{
    cmr_agent_configuration_t cfg = {
        .instance_id = r->instance,
        .agent_id = r->agent_id,
        .environment_id = "test",
        .environment_name = "Test environment",
        .revision = 1,
        .strategy = {.send_interval_ms = 5,
                     .ring_records = 0,
                     .max_batch_events = 2048,
                     .metric_interval_ms = metric_interval_ms,
                     .max_threads = 0,
                     .stall_threshold_ms = stall_threshold_ms},
    };
    assert_int_equal(cmr_peer_command(&peer, r->instance, CMR_MSG_AGENT_CONFIGURATION, &cfg), 0);
    status_match_t sm = {r->instance, CMR_AGENT_FULL};
    assert_non_null(cmr_peer_wait(&peer, CMR_MSG_AGENT_STATUS, status_of, &sm, 0, 30000));
}

static void agent_configure(agent_run_t *r, int metric_interval_ms)
{
    agent_configure_stall(r, metric_interval_ms, 0);
}

/* Ends the JVM normally (exit code 0); its stderr stays readable until agent_done(). */
static void agent_exit(agent_run_t *r)
{
    jvm_proc_send(&r->jvm, "exit");
    assert_int_equal(jvm_proc_expect(&r->jvm, "bye", NULL, 0, 10000), 0);
    assert_int_equal(jvm_proc_wait(&r->jvm, 30000), 0);
}

static void agent_done(agent_run_t *r)
{
    jvm_proc_cleanup(&r->jvm);
}

/* Has the application load classes (binary names separated by spaces). */
static void load_classes(agent_run_t *r, const char *names)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "load %s", names);
    jvm_proc_send(&r->jvm, cmd);
    assert_int_equal(jvm_proc_expect(&r->jvm, "loaded", NULL, 0, 10000), 0);
}

static void expect_greeting(agent_run_t *r, const char *want)
{
    char line[256];
    jvm_proc_send(&r->jvm, "greet");
    assert_int_equal(jvm_proc_expect(&r->jvm, "greet:", line, sizeof line, 10000), 0);
    assert_string_equal(line + 7, want);
}

/* A Redefine as the instrumenter makes it: bytes made from the original class bytes
 * `from` (the ClassLoaded the peer received), whose digest binds the command to them. */
static cmr_redefine_t redefine_cmd(agent_run_t *r, int64_t request_id, const char *class_name, int64_t loader_id,
                                   int64_t hash, const cmr_bytes_t *from, uint8_t digest[CMR_TRUST_DIGEST_BYTES],
                                   const uint8_t *bytes, size_t len, bool original)
{
    cmr_trust_digest(from->data, from->len, digest);
    return (cmr_redefine_t){.request_id = request_id,
                            .agent_id = r->agent_id,
                            .class_name = (char *)class_name,
                            .loader_id = loader_id,
                            .class_hash = hash,
                            .original = original,
                            .revision = 1,
                            .bytecode = {(uint8_t *)bytes, len},
                            .original_digest = {digest, CMR_TRUST_DIGEST_BYTES}};
}

static const cmr_redefine_result_t *wait_result(agent_run_t *r, int64_t request_id)
{
    result_match_t rm = {r->instance, request_id};
    const cmr_record_t *res = cmr_peer_wait(&peer, CMR_MSG_REDEFINE_RESULT, result_of, &rm, 0, 30000);
    assert_non_null(res);
    return &res->msg.u.redefine_result;
}

static const cmr_redefine_result_t *send_redefine(agent_run_t *r, int64_t request_id, const char *class_name,
                                                  int64_t loader_id, int64_t hash, const cmr_bytes_t *from,
                                                  const uint8_t *bytes, size_t len, bool original)
{
    uint8_t digest[CMR_TRUST_DIGEST_BYTES];
    cmr_redefine_t cmd = redefine_cmd(r, request_id, class_name, loader_id, hash, from, digest, bytes, len, original);
    assert_int_equal(cmr_peer_command(&peer, r->instance, CMR_MSG_REDEFINE, &cmd), 0);
    return wait_result(r, request_id);
}

static const cmr_class_loaded_t *wait_class(agent_run_t *r, const char *class_name, int cause, int timeout_ms)
{
    class_match_t cm = {r->instance, class_name, cause};
    const cmr_record_t *rec = cmr_peer_wait(&peer, CMR_MSG_CLASS_LOADED, class_of, &cm, 0, timeout_ms);
    return rec ? &rec->msg.u.class_loaded : NULL;
}

/* The k-th ClassLoaded of class_name (cause -1: any) received so far; NULL when none. */
static const cmr_class_loaded_t *wait_class_k(agent_run_t *r, const char *class_name, int cause, size_t k)
{
    class_match_t cm = {r->instance, class_name, cause};
    const cmr_record_t *rec = cmr_peer_wait(&peer, CMR_MSG_CLASS_LOADED, class_of, &cm, k, 0);
    return rec ? &rec->msg.u.class_loaded : NULL;
}

/* --- probes ----------------------------------------------------------------------------------- */

static int only_run(const cf_class *c, const cf_member *m, void *ud)
{
    (void)ud;
    cf_str name = cf_cp_utf8(c, m->name);
    return name.len == 3 && memcmp(name.p, "run", 3) == 0;
}

static bool cf_str_len_eq(cf_str s, const char *z)
{
    return s.len == strlen(z) && memcmp(s.p, z, s.len) == 0;
}

static int only_call(const cf_class *c, const cf_member *m, void *ud)
{
    (void)ud;
    cf_str name = cf_cp_utf8(c, m->name);
    return name.len == 4 && memcmp(name.p, "call", 4) == 0;
}

/* Instruments the methods of cls that filter selects with probe and redefines the class
 * with the result, which must apply. Returns how many methods were instrumented. */
static uint32_t redefine_instrumented(agent_run_t *r, const cmr_class_loaded_t *cls, const cf_probe *probe,
                                      cf_method_filter filter, int64_t request_id)
{
    cf_instrument_result res;
    cf_error err;
    assert_int_equal(cf_instrument_class(cls->bytecode.data, cls->bytecode.len, probe, filter, NULL, &res, &err),
                     CF_OK);
    const cmr_redefine_result_t *out = send_redefine(r, request_id, cls->class_name, cls->loader_id, cls->class_hash,
                                                     &cls->bytecode, res.bytes, res.len, false);
    assert_int_equal(out->status, CMR_COMMAND_APPLIED);
    uint32_t n = res.n_instrumented;
    cf_instrument_result_free(&res);
    return n;
}

static void instrument_work(agent_run_t *r, const cmr_class_loaded_t *work, const cf_probe *probe, int64_t request_id)
{
    assert_int_equal(redefine_instrumented(r, work, probe, only_call, request_id), 1);
}

typedef struct event_tally {
    uint64_t events, enters, exits, segments_done, bad;
    uint64_t batches;
} event_tally_t;

/* Every record of every batch of the agent: right method, right kinds, depths 1..4. */
/* Reads the batch's compact events (cmr/event.h) one by one: dec is shared, the tests
 * run one at a time. */
static cmr_events_decoder_t dec;

static void events_open(const cmr_event_batch_t *b)
{
    cmr_events_decoder_init(&dec, b->packed_events.data, b->packed_events.len, (uint32_t)b->event_count);
}

/* The batch's first event; false when it has none or its block does not decode. */
static bool first_event(const cmr_event_batch_t *b, cmr_event_t *ev)
{
    events_open(b);
    return cmr_events_decoder_next(&dec, ev) == 1;
}

static void tally_events(agent_run_t *r, uint64_t method_id, event_tally_t *t)
{
    memset(t, 0, sizeof *t);
    t->bad = peer.bad_event_msgs; /* messages that did not split (corrupt) */
    for (size_t i = 0; i < peer.nsegs; i++) {
        const cmr_event_batch_t *b = peer.segs[i];
        if (b->agent_id != r->agent_id)
            continue;
        t->batches++;
        char err[128];
        if (cmr_events_check(b->packed_events.data, b->packed_events.len, (uint32_t)b->event_count, err, sizeof err) !=
            0) {
            t->bad++;
            continue;
        }
        uint64_t prev_ts = 0;
        events_open(b);
        cmr_event_t ev;
        while (cmr_events_decoder_next(&dec, &ev) == 1) {
            t->events++;
            if (ev.method_id != method_id || (ev.kind != CMR_EVENT_ENTER && ev.kind != CMR_EVENT_EXIT) || ev.aux < 1 ||
                ev.aux > 4 || ev.timestamp_ns < prev_ts)
                t->bad++;
            prev_ts = ev.timestamp_ns;
            t->enters += ev.kind == CMR_EVENT_ENTER;
            t->exits += ev.kind == CMR_EVENT_EXIT;
        }
        t->segments_done += b->last;
    }
}

/* Starts the test application with the agent and `agent_options`, checks that it runs its
 * own code unchanged (greets, exits 0) whatever the agent made of the options, and leaves
 * *j for the caller to inspect its stderr (then jvm_proc_cleanup). */
static void run_app_unharmed(jvm_proc_t *j, const char *agent_options)
{
    char agentpath[2048];
    snprintf(agentpath, sizeof agentpath, "-agentpath:%s=bootstrap=%s,%s", agent_so, broker.bootstrap, agent_options);
    const char *argv[] = {java_bin, agentpath, "-cp", classpath, "AgentTestApp", NULL};
    assert_int_equal(jvm_proc_start(j, argv), 0);
    assert_int_equal(jvm_proc_expect(j, "ready", NULL, 0, 30000), 0);
    jvm_proc_send(j, "greet");
    char line[128];
    assert_int_equal(jvm_proc_expect(j, "greet:", line, sizeof line, 10000), 0);
    assert_string_equal(line, "greet: hello");
    jvm_proc_send(j, "exit");
    assert_int_equal(jvm_proc_wait(j, 30000), 0);
}

/* --- tests ------------------------------------------------------------------------------------- */

static void test_unknown_options_leave_the_jvm_running(void **state)
{
    (void)state;
    jvm_proc_t j;
    run_app_unharmed(&j, "no_such_option=1");
    assert_true(jvm_proc_stderr_has(&j, "event=agent.bad_options"));
    assert_true(jvm_proc_stderr_has(&j, "no_such_option"));
    jvm_proc_cleanup(&j);
}

static void test_handshake_processes_classes_loaded_before_it(void **state)
{
    (void)state;
    agent_run_t r;
    agent_start(&r, "handshake", NULL);
    /* the CMR takes its time; the JVM keeps loading classes meanwhile */
    load_classes(&r, "java.util.concurrent.Exchanger");
    cmr_peer_poll(&peer, 1500);
    class_match_t none = {r.instance, "AgentTestApp", -1};
    assert_int_equal(cmr_peer_count(&peer, CMR_MSG_CLASS_LOADED, class_of, &none), 0); /* nothing before the answer */
    agent_configure(&r, 10000);
    const cmr_class_loaded_t *app = wait_class(&r, "AgentTestApp", CMR_CLASS_LOADED_BEFORE_REGISTRATION, 30000);
    assert_non_null(app);
    assert_int_equal(app->bytecode.data[0], 0xCA);
    assert_true((uint64_t)app->class_hash == cmr_class_hash(app->bytecode.data, app->bytecode.len));
    assert_string_equal(app->environment_id, "test");
    assert_non_null(wait_class(&r, "java/util/concurrent/Exchanger", CMR_CLASS_LOADED_BEFORE_REGISTRATION, 30000));
    assert_non_null(wait_class(&r, "java/lang/Thread", -1, 30000));
    /* and what is loaded afterwards goes out as it loads */
    load_classes(&r, "java.util.concurrent.Phaser");
    assert_non_null(wait_class(&r, "java/util/concurrent/Phaser", CMR_CLASS_LOADED, 30000));
    size_t early = cmr_peer_count(&peer, CMR_MSG_CLASS_LOADED, cmr_peer_of_instance, r.instance);
    print_message("classes sent by the agent: %zu\n", early);
    assert_true(early > 300);
    agent_exit(&r);
    status_match_t bye = {r.instance, CMR_AGENT_SHUTDOWN};
    assert_non_null(cmr_peer_wait(&peer, CMR_MSG_AGENT_STATUS, status_of, &bye, 0, 10000));
    agent_done(&r);
}

static void test_no_environment_stops_the_agent(void **state)
{
    (void)state;
    agent_run_t r;
    agent_start(&r, "noenv", NULL);
    cmr_no_environment_t ne = {.instance_id = r.instance,
                               .agent_name = r.name,
                               .hostname = r.hostname,
                               .reason = "no agent mapping matches",
                               .time_ms = 1};
    assert_int_equal(cmr_peer_command(&peer, r.instance, CMR_MSG_NO_ENVIRONMENT, &ne), 0);
    status_match_t sm = {r.instance, CMR_AGENT_NO_ENVIRONMENT};
    assert_non_null(cmr_peer_wait(&peer, CMR_MSG_AGENT_STATUS, status_of, &sm, 0, 30000));
    size_t regs = cmr_peer_count(&peer, CMR_MSG_AGENT_REGISTRATION, by_name, r.name);
    expect_greeting(&r, "hello");
    cmr_peer_poll(&peer, 4000);
    assert_int_equal(cmr_peer_count(&peer, CMR_MSG_AGENT_REGISTRATION, by_name, r.name), regs); /* no more tries */
    assert_int_equal(cmr_peer_count(&peer, CMR_MSG_CLASS_LOADED, cmr_peer_of_instance, r.instance), 0);
    agent_exit(&r);
    assert_true(jvm_proc_stderr_has(&r.jvm, "event=agent.no_environment"));
    agent_done(&r);
}

/* The agent ships a class's bytes from ClassFileLoadHook, before the JVM has defined the
 * class: a Redefine can come back while the class is still being defined (here the
 * superclass of demo/LateSub takes 3 s to load, as behind a slow class loader). The command
 * waits for the class and is applied once it is loaded, instead of answering UNKNOWN_CLASS
 * and leaving the class uninstrumented for good. */
static void test_redefine_waits_for_a_class_being_defined(void **state)
{
    (void)state;
    agent_run_t r;
    agent_start(&r, "latesub", NULL);
    agent_configure(&r, 10000);
    jvm_proc_send(&r.jvm, "latesub 3000");
    assert_int_equal(jvm_proc_expect(&r.jvm, "latesub: started", NULL, 0, 10000), 0);
    int64_t t0 = cmr_mono_ms();
    const cmr_class_loaded_t *k = wait_class(&r, "demo/LateSub", -1, 10000);
    assert_non_null(k);
    int64_t shipped = cmr_mono_ms() - t0;
    const cmr_redefine_result_t *res = send_redefine(&r, 1, "demo/LateSub", k->loader_id, k->class_hash, &k->bytecode,
                                                     k->bytecode.data, k->bytecode.len, false);
    int64_t answered = cmr_mono_ms() - t0;
    print_message("LateSub shipped %lld ms after the load began, the Redefine answered after %lld ms: %s\n",
                  (long long)shipped, (long long)answered, res->message);
    assert_true(shipped < 2500); /* else the class was defined before the command came */
    assert_int_equal(res->status, CMR_COMMAND_APPLIED);
    char line[256];
    assert_int_equal(jvm_proc_expect(&r.jvm, "latesub:", line, sizeof line, 10000), 0);
    assert_string_equal(line, "latesub: late");
    agent_exit(&r);
    agent_done(&r);
}

static void test_redefine_resend_and_failures(void **state)
{
    (void)state;
    agent_run_t r;
    agent_start(&r, "redefine", NULL);
    agent_configure(&r, 10000);
    expect_greeting(&r, "hello");
    const cmr_class_loaded_t *g = wait_class(&r, "demo/Greeter", -1, 30000);
    assert_non_null(g);
    size_t v2_len = 0;
    uint8_t *v2 = read_file(greeter_v2_path, &v2_len);
    assert_non_null(v2);

    const cmr_redefine_result_t *res =
        send_redefine(&r, 1, "demo/Greeter", g->loader_id, g->class_hash, &g->bytecode, v2, v2_len, false);
    assert_int_equal(res->status, CMR_COMMAND_APPLIED);
    expect_greeting(&r, "redefined");

    res = send_redefine(&r, 2, "demo/Greeter", g->loader_id, g->class_hash, &g->bytecode, g->bytecode.data,
                        g->bytecode.len, true);
    assert_int_equal(res->status, CMR_COMMAND_APPLIED);
    expect_greeting(&r, "hello");

    static const uint8_t garbage[] = {0xCA, 0xFE, 0xBA, 0xBE, 0, 0, 0, 61, 0xFF, 0xFF, 1, 2, 3};
    res =
        send_redefine(&r, 3, "demo/Greeter", g->loader_id, g->class_hash, &g->bytecode, garbage, sizeof garbage, false);
    assert_int_equal(res->status, CMR_COMMAND_FAILED);
    assert_true(res->jvmti_error != 0);
    expect_greeting(&r, "hello"); /* unchanged, and the JVM goes on */

    res = send_redefine(&r, 4, "demo/NoSuchClass", 0, 0, &g->bytecode, v2, v2_len, false);
    assert_int_equal(res->status, CMR_COMMAND_UNKNOWN_CLASS);

    cmr_bytecode_resend_t rs = {.request_id = 5,
                                .agent_id = r.agent_id,
                                .class_name = "demo/Greeter",
                                .loader_id = g->loader_id,
                                .class_hash = 0};
    assert_int_equal(cmr_peer_command(&peer, r.instance, CMR_MSG_BYTECODE_RESEND, &rs), 0);
    const cmr_class_loaded_t *again = wait_class(&r, "demo/Greeter", CMR_CLASS_RESEND, 30000);
    assert_non_null(again);
    assert_int_equal(again->request_id, 5);
    assert_true((uint64_t)again->class_hash == cmr_class_hash(again->bytecode.data, again->bytecode.len));
    result_match_t rm = {r.instance, 5};
    const cmr_record_t *rr = cmr_peer_wait(&peer, CMR_MSG_REDEFINE_RESULT, result_of, &rm, 0, 10000);
    assert_non_null(rr);
    assert_int_equal(rr->msg.u.redefine_result.status, CMR_COMMAND_APPLIED);

    /* the resent bytes, instrumented, installed: the probes fire */
    cf_instrument_result ir;
    cf_error cerr;
    assert_int_equal(
        cf_instrument_class(again->bytecode.data, again->bytecode.len, &agent_sequence_probe, NULL, NULL, &ir, &cerr),
        CF_OK);
    res = send_redefine(&r, 6, "demo/Greeter", again->loader_id, again->class_hash, &again->bytecode, ir.bytes, ir.len,
                        false);
    assert_int_equal(res->status, CMR_COMMAND_APPLIED);
    cf_instrument_result_free(&ir);
    expect_greeting(&r, "hello");
    uint64_t greet_id = cmr_method_id("demo/Greeter", "greet", "()Ljava/lang/String;");
    bool fired = false;
    for (int i = 0; i < 100 && !fired; i++) {
        cmr_peer_poll(&peer, 100);
        for (size_t k = 0; k < peer.nsegs && !fired; k++) {
            const cmr_event_batch_t *b = peer.segs[k];
            if (b->agent_id == r.agent_id && b->event_count) {
                cmr_event_t ev;
                fired = first_event(b, &ev) && ev.method_id == greet_id;
            }
        }
    }
    assert_true(fired);
    free(v2);
    agent_exit(&r);
    /* instrumented (v2), restored, refused, unknown, instrumented: one class instrumented
     * now, one redefinition the JVM refused */
    status_match_t sm = {r.instance, CMR_AGENT_SHUTDOWN};
    const cmr_record_t *bye = cmr_peer_wait(&peer, CMR_MSG_AGENT_STATUS, status_of, &sm, 0, 30000);
    assert_non_null(bye);
    assert_int_equal(bye->msg.u.agent_status.classes_instrumented, 1);
    assert_int_equal(bye->msg.u.agent_status.redefine_failures, 1);
    agent_done(&r);
}

/* A BytecodeResend without a class name (the CMR lost ClassLoaded messages): every class
 * the agent has is sent again as a RESEND answering that request, captured from the JVM,
 * but never bytes the CMR installed: a class redefined right after the request (before
 * the agent captured it) is left out, or was captured with its own bytes before. */
static void test_resend_all_sends_every_class_again(void **state)
{
    (void)state;
    agent_run_t r;
    agent_start(&r, "resendall", NULL);
    agent_configure(&r, 10000);
    expect_greeting(&r, "hello");
    const cmr_class_loaded_t *g = wait_class(&r, "demo/Greeter", -1, 30000);
    assert_non_null(g);
    assert_non_null(wait_class(&r, "AgentTestApp", -1, 30000));
    size_t v2_len = 0;
    uint8_t *v2 = read_file(greeter_v2_path, &v2_len);
    assert_non_null(v2);

    cmr_bytecode_resend_t rs = {.request_id = 9, .agent_id = r.agent_id, .class_name = "", .loader_id = 0};
    assert_int_equal(cmr_peer_command(&peer, r.instance, CMR_MSG_BYTECODE_RESEND, &rs), 0);
    const cmr_redefine_result_t *res =
        send_redefine(&r, 1, "demo/Greeter", g->loader_id, g->class_hash, &g->bytecode, v2, v2_len, false);
    assert_int_equal(res->status, CMR_COMMAND_APPLIED);
    free(v2);
    result_match_t rm = {r.instance, 9};
    const cmr_record_t *rr = cmr_peer_wait(&peer, CMR_MSG_REDEFINE_RESULT, result_of, &rm, 0, 10000);
    assert_non_null(rr);
    assert_int_equal(rr->msg.u.redefine_result.status, CMR_COMMAND_APPLIED);
    const cmr_class_loaded_t *app = wait_class(&r, "AgentTestApp", CMR_CLASS_RESEND, 30000);
    assert_non_null(app);
    assert_int_equal(app->request_id, 9);
    assert_true((uint64_t)app->class_hash == cmr_class_hash(app->bytecode.data, app->bytecode.len));
    const cmr_class_loaded_t *jdk = wait_class(&r, "java/lang/String", CMR_CLASS_RESEND, 30000);
    assert_non_null(jdk);
    assert_int_equal(jdk->request_id, 9);
    for (int i = 0; i < 20; i++)
        cmr_peer_poll(&peer, 100);
    static const char v2_text[] = "redefined"; /* the greeting of the installed bytes */
    const cmr_class_loaded_t *again;
    for (size_t k = 0; (again = wait_class_k(&r, "demo/Greeter", CMR_CLASS_RESEND, k)); k++)
        assert_null(memmem(again->bytecode.data, again->bytecode.len, v2_text, sizeof v2_text - 1));
    expect_greeting(&r, "redefined");
    agent_exit(&r);
    agent_done(&r);
}

/* Starts an agent (`test`, `options`), configures it (metric interval `metric_ms`), has
 * the JVM load demo.Work and returns its ClassLoaded (owned by the peer). */
static const cmr_class_loaded_t *agent_with_work(agent_run_t *r, const char *test, const char *options, int metric_ms)
{
    agent_start(r, test, options);
    agent_configure(r, metric_ms);
    load_classes(r, "demo.Work");
    const cmr_class_loaded_t *work = wait_class(r, "demo/Work", -1, 30000);
    assert_non_null(work);
    return work;
}

static void test_probes_record_call_trees_and_timers(void **state)
{
    (void)state;
    agent_run_t r;
    const cmr_class_loaded_t *work = agent_with_work(&r, "probes", NULL, 300);
    uint64_t call_id = cmr_method_id("demo/Work", "call", "(I)J");

    instrument_work(&r, work, &agent_sequence_probe, 10);
    char line[128];
    jvm_proc_send(&r.jvm, "work 2 500");
    assert_int_equal(jvm_proc_expect(&r.jvm, "work:", line, sizeof line, 30000), 0);
    assert_string_equal(line, "work: calls=1000");
    event_tally_t t;
    for (int i = 0; i < 100; i++) {
        cmr_peer_poll(&peer, 100);
        tally_events(&r, call_id, &t);
        if (t.events >= 8000)
            break;
    }
    print_message("events %" PRIu64 " in %" PRIu64 " batches, %" PRIu64 " trees\n", t.events, t.batches,
                  t.segments_done);
    assert_int_equal(t.bad, 0);
    assert_int_equal(t.enters, 4000); /* 1000 calls x depth 0..3 */
    assert_int_equal(t.exits, 4000);
    assert_int_equal(t.segments_done, 1000);

    /* the same method with the timer sensor instead: aggregates, not events (the
     * invocation sequences above were aggregated too: 4000 calls) */
    instrument_work(&r, work, &agent_timer_probe, 11);
    jvm_proc_send(&r.jvm, "work 1 300");
    assert_int_equal(jvm_proc_expect(&r.jvm, "work:", line, sizeof line, 30000), 0);
    int64_t count = 0;
    for (int i = 0; i < 100 && count < 4000 + 1200; i++) {
        cmr_peer_poll(&peer, 100);
        count = 0;
        for (size_t k = 0; k < peer.n; k++) {
            const cmr_msg_t *m = &peer.recs[k]->msg;
            if (m->type != CMR_MSG_METRIC_BATCH || m->u.metric_batch.agent_id != r.agent_id)
                continue;
            for (size_t x = 0; x < m->u.metric_batch.metrics.count; x++) {
                const cmr_method_metric_t *mm = &m->u.metric_batch.metrics.items[x];
                if ((uint64_t)mm->method_id == call_id) {
                    count += mm->count;
                    assert_true(mm->min_ns >= 0 && mm->min_ns <= mm->max_ns && mm->sum_ns >= mm->max_ns);
                    /* the latency histogram: the source of percentiles */
                    cmr_hist_t h = {0};
                    assert_int_equal(cmr_hist_decode(&h, mm->histogram.data, mm->histogram.len), 0);
                    assert_int_equal((int64_t)h.count, mm->count);
                    assert_int_equal((int64_t)h.min, mm->min_ns);
                    assert_int_equal((int64_t)h.max, mm->max_ns);
                    uint64_t p50 = cmr_hist_quantile(&h, 0.5);
                    assert_true((int64_t)p50 >= mm->min_ns && (int64_t)p50 <= mm->max_ns);
                    cmr_hist_free(&h);
                }
            }
        }
    }
    assert_int_equal(count, 4000 + 1200);
    event_tally_t after;
    tally_events(&r, call_id, &after);
    assert_int_equal(after.events, t.events); /* the timer run produced no events */
    agent_exit(&r);
    agent_done(&r);
}

/* EventBatch messages of the agent (whole messages, as the peer received them). */
static size_t event_messages_of(const agent_run_t *r)
{
    size_t n = 0;
    for (size_t i = 0; i < peer.nsplits; i++)
        n += peer.splits[i].n && peer.splits[i].v[0].agent_id == r->agent_id;
    return n;
}

/* agent.events.linger.ms: a partition's message waits for more segments, and whatever
 * waits goes at the JVM's exit, nothing lost. With a linger longer than the test, the
 * 1,000 traces of a run leave only at the exit, at most one message per partition of
 * cmr.events (16 on the test broker) instead of one per partition and drain. */
static void test_messages_wait_for_the_linger_and_go_at_exit(void **state)
{
    (void)state;
    agent_run_t r;
    const cmr_class_loaded_t *work = agent_with_work(&r, "linger", "agent.events.linger.ms=10000", 300);
    uint64_t call_id = cmr_method_id("demo/Work", "call", "(I)J");
    instrument_work(&r, work, &agent_sequence_probe, 10);
    char line[128];
    jvm_proc_send(&r.jvm, "work 2 500");
    assert_int_equal(jvm_proc_expect(&r.jvm, "work:", line, sizeof line, 30000), 0);
    event_tally_t t;
    cmr_peer_poll(&peer, 2000); /* the publisher drained the rings 400 times meanwhile */
    tally_events(&r, call_id, &t);
    assert_int_equal(t.events, 0);
    agent_exit(&r);
    for (int i = 0; i < 100 && t.events < 8000; i++) {
        cmr_peer_poll(&peer, 100);
        tally_events(&r, call_id, &t);
    }
    size_t messages = event_messages_of(&r);
    print_message("events %" PRIu64 " in %" PRIu64 " batches, %zu messages\n", t.events, t.batches, messages);
    assert_int_equal(t.bad, 0);
    assert_int_equal(t.enters, 4000);
    assert_int_equal(t.exits, 4000);
    assert_int_equal(t.segments_done, 1000);
    assert_true(messages >= 1 && messages <= 16);
    agent_done(&r);
}

/* What the MetricBatches of an agent say about one method, summed over the batches. */
typedef struct metric_tally {
    int64_t method_count, method_max_in_flight;
    int64_t tx_count, tx_max_in_flight, tx_other;
    int64_t stalled_reports, stalled_max_running_ms;
    bool stalled_ok, slowest_traced;
} metric_tally_t;

static void tally_metrics(agent_run_t *r, uint64_t method_id, uint64_t stalled_id, metric_tally_t *t)
{
    memset(t, 0, sizeof *t);
    t->stalled_ok = true;
    for (size_t i = 0; i < peer.n; i++) {
        const cmr_msg_t *m = &peer.recs[i]->msg;
        if (m->type != CMR_MSG_METRIC_BATCH || m->u.metric_batch.agent_id != r->agent_id)
            continue;
        const cmr_metric_batch_t *b = &m->u.metric_batch;
        assert_string_equal(b->environment_id, "test");
        for (size_t k = 0; k < b->metrics.count; k++) {
            const cmr_method_metric_t *mm = &b->metrics.items[k];
            if ((uint64_t)mm->method_id != method_id)
                continue;
            t->method_count += mm->count;
            if (mm->max_in_flight > t->method_max_in_flight)
                t->method_max_in_flight = mm->max_in_flight;
            t->slowest_traced = mm->slowest_trace.len == 16;
            cmr_hist_t h = {0};
            assert_int_equal(cmr_hist_decode(&h, mm->histogram.data, mm->histogram.len), 0);
            assert_int_equal((int64_t)h.count, mm->count);
            cmr_hist_free(&h);
        }
        for (size_t k = 0; k < b->transactions.count; k++) {
            const cmr_transaction_metric_t *tx = &b->transactions.items[k];
            if ((uint64_t)tx->root_method_id != method_id) {
                t->tx_other += tx->count;
                continue;
            }
            t->tx_count += tx->count;
            if (tx->max_in_flight > t->tx_max_in_flight)
                t->tx_max_in_flight = tx->max_in_flight;
        }
        for (size_t k = 0; k < b->stalled.count; k++) {
            const cmr_stalled_call_t *sc = &b->stalled.items[k];
            if (strcmp(sc->thread_name, "slow-sleeper") != 0)
                continue;
            t->stalled_reports++;
            if (sc->running_ms > t->stalled_max_running_ms)
                t->stalled_max_running_ms = sc->running_ms;
            /* demo.Slow.call(2, ms): three invocations open, the innermost one sleeping */
            bool ok = (uint64_t)sc->method_id == stalled_id && sc->stack.len == 24 && sc->trace_id.len == 16 &&
                      sc->thread_id > 0 && sc->started_ms > 0;
            for (size_t x = 0; ok && x < sc->stack.len; x += 8)
                ok = cmr_be64(sc->stack.data + x) == stalled_id;
            t->stalled_ok &= ok;
        }
    }
}

static bool full_status_instrumented(const cmr_msg_t *m, const void *ud)
{
    return strcmp(m->u.agent_status.instance_id, (const char *)ud) == 0 && m->u.agent_status.state == CMR_AGENT_FULL &&
           m->u.agent_status.classes_instrumented >= 2;
}

static bool metric_with_probe_cost(const cmr_msg_t *m, const void *ud)
{
    return m->u.metric_batch.agent_id == *(const int64_t *)ud && m->u.metric_batch.probe_ps > 0;
}

/* The method id Probe.calibrate records its calls under (Probe.CALIBRATION_ID). */
#define CALIBRATION_ID 0x63616c6962726174ULL

/* Whether one of the process' threads has the name (/proc/PID/task/TID/comm). */
static bool has_thread_named(pid_t pid, const char *name)
{
    char dir[64];
    snprintf(dir, sizeof dir, "/proc/%d/task", (int)pid);
    DIR *d = opendir(dir);
    if (!d)
        return false;
    bool found = false;
    for (struct dirent *e; !found && (e = readdir(d));) {
        char path[sizeof dir + sizeof e->d_name + 8], comm[32] = "";
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s/comm", dir, e->d_name);
        FILE *f = fopen(path, "r");
        if (f && fgets(comm, sizeof comm, f))
            found = !strncmp(comm, name, strlen(name)) && (comm[strlen(name)] == '\n' || !comm[strlen(name)]);
        if (f)
            fclose(f);
    }
    closedir(d);
    return found;
}

static void test_invocation_metrics_transactions_and_stalled_calls(void **state)
{
    (void)state;
    agent_run_t r;
    agent_start(&r, "invmetrics", "agent.status.interval.ms=60000"); /* no periodic status */
    agent_configure_stall(&r, 300, 250);                             /* calls running longer than 250 ms are stalled */
    load_classes(&r, "demo.Work demo.Slow");
    const cmr_class_loaded_t *work = wait_class(&r, "demo/Work", -1, 30000);
    const cmr_class_loaded_t *slow = wait_class(&r, "demo/Slow", -1, 30000);
    assert_non_null(work);
    assert_non_null(slow);
    uint64_t call_id = cmr_method_id("demo/Work", "call", "(I)J");
    uint64_t slow_id = cmr_method_id("demo/Slow", "call", "(IJ)J");
    instrument_work(&r, work, &agent_sequence_probe, 40);
    assert_int_equal(redefine_instrumented(&r, slow, &agent_sequence_probe, only_call, 41), 1);

    char line[128];
    jvm_proc_send(&r.jvm, "work 2 500"); /* 1000 root calls, each 4 invocations deep */
    assert_int_equal(jvm_proc_expect(&r.jvm, "work:", line, sizeof line, 30000), 0);
    assert_string_equal(line, "work: calls=1000");
    /* the agent's own threads carry names an operator can tell apart (top -H, perf) */
    assert_true(has_thread_named(r.jvm.pid, "cmr-publisher"));
    assert_true(has_thread_named(r.jvm.pid, "cmr-control"));
    jvm_proc_send(&r.jvm, "slow 1500");
    assert_int_equal(jvm_proc_expect(&r.jvm, "slow:", line, sizeof line, 10000), 0);

    metric_tally_t t;
    for (int i = 0; i < 150; i++) {
        cmr_peer_poll(&peer, 100);
        tally_metrics(&r, call_id, slow_id, &t);
        if (t.method_count >= 4000 && t.tx_count >= 1000 && t.stalled_reports >= 2 && t.tx_other >= 1)
            break;
    }
    print_message("method calls %" PRId64 " (max in flight %" PRId64 "), transactions %" PRId64
                  " (max in flight %" PRId64 "), stalled reports %" PRId64 " (longest %" PRId64 " ms)\n",
                  t.method_count, t.method_max_in_flight, t.tx_count, t.tx_max_in_flight, t.stalled_reports,
                  t.stalled_max_running_ms);
    assert_int_equal(t.method_count, 4000);   /* 1000 calls x depth 0..3 */
    assert_int_equal(t.tx_count, 1000);       /* one per root call */
    assert_true(t.method_max_in_flight >= 4); /* a recursion of 4 is open at once */
    assert_true(t.tx_max_in_flight >= 1 && t.tx_max_in_flight <= 2);
    assert_true(t.slowest_traced);
    /* the sleeping call: reported in every interval while it runs, then a transaction */
    assert_true(t.stalled_reports >= 2);
    assert_true(t.stalled_ok);
    assert_true(t.stalled_max_running_ms >= 250 && t.stalled_max_running_ms < 1600);
    assert_int_equal(t.tx_other, 1);

    /* a status counts both instrumented classes, and no refused redefinition: sent for the
     * change within seconds, not with the periodic one (a minute here) */
    const cmr_record_t *st = cmr_peer_wait(&peer, CMR_MSG_AGENT_STATUS, full_status_instrumented, r.instance, 0, 10000);
    assert_non_null(st);
    assert_int_equal(st->msg.u.agent_status.classes_instrumented, 2);
    assert_int_equal(st->msg.u.agent_status.redefine_failures, 0);
    assert_string_equal(st->msg.u.agent_status.environment_id, "test");

    /* the agent timed its probes once, a second after its configuration, and every
     * MetricBatch since says what they cost; the calibration's own calls went nowhere */
    jvm_proc_send(&r.jvm, "work 1 100");
    assert_int_equal(jvm_proc_expect(&r.jvm, "work:", line, sizeof line, 30000), 0);
    const cmr_record_t *pc = cmr_peer_wait(&peer, CMR_MSG_METRIC_BATCH, metric_with_probe_cost, &r.agent_id, 0, 15000);
    assert_non_null(pc);
    int64_t probe_ps = pc->msg.u.metric_batch.probe_ps;
    print_message("probe cost measured by the agent: %.1f ns per recorded call\n", (double)probe_ps / 1000.0);
    assert_true(probe_ps >= 1000 && probe_ps <= 10000000); /* 1 ns .. 10 us */
    assert_true(jvm_proc_stderr_has(&r.jvm, "event=agent.probe_cost probe_ns="));
    int64_t agent_cpu_ns = 0; /* and what its publisher thread spent (MetricBatch.agent_cpu_ns) */
    for (size_t i = 0; i < peer.n; i++) {
        const cmr_msg_t *m = &peer.recs[i]->msg;
        if (m->type != CMR_MSG_METRIC_BATCH || m->u.metric_batch.agent_id != r.agent_id)
            continue;
        for (size_t k = 0; k < m->u.metric_batch.metrics.count; k++)
            assert_true((uint64_t)m->u.metric_batch.metrics.items[k].method_id != CALIBRATION_ID);
        assert_true(m->u.metric_batch.agent_cpu_ns >= 0);
        agent_cpu_ns += m->u.metric_batch.agent_cpu_ns;
    }
    print_message("the publisher thread's CPU over the batches: %.1f ms\n", (double)agent_cpu_ns / 1e6);
    assert_true(agent_cpu_ns > 0);
    for (int i = 0; i < 150 && t.method_count < 4400; i++) {
        cmr_peer_poll(&peer, 100);
        tally_metrics(&r, call_id, slow_id, &t);
    }
    assert_int_equal(t.method_count, 4000 + 400); /* the calls of the two runs, nothing more */
    agent_exit(&r);
    agent_done(&r);
}

static void test_disconnected_mode_loses_no_class(void **state)
{
    (void)state;
    agent_run_t r;
    agent_start(&r, "outage", NULL);
    agent_configure(&r, 10000);
    cmr_peer_poll(&peer, 1000);
    kill(broker.pid, SIGUSR1); /* the brokers go down; their data stays */
    cmr_sleep_ms(1000);
    static const char *const names[] = {
        "java.util.zip.Adler32", "java.util.concurrent.CountDownLatch",   "java.util.concurrent.CyclicBarrier",
        "java.util.BitSet",      "java.util.concurrent.atomic.LongAdder", "java.util.Timer"};
    char list[512] = "";
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? " " : "", names[i]);
    load_classes(&r, list);
    expect_greeting(&r, "hello"); /* the application does not notice */
    cmr_sleep_ms(5000);
    kill(broker.pid, SIGUSR2);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char internal[128];
        snprintf(internal, sizeof internal, "%s", names[i]);
        for (char *p = internal; *p; p++)
            if (*p == '.')
                *p = '/';
        assert_non_null(wait_class(&r, internal, -1, 60000));
    }
    status_match_t back = {r.instance, CMR_AGENT_RECONNECTED};
    assert_non_null(cmr_peer_wait(&peer, CMR_MSG_AGENT_STATUS, status_of, &back, 0, 30000));
    agent_exit(&r);
    assert_true(jvm_proc_stderr_has(&r.jvm, "event=agent.disconnected"));
    assert_true(jvm_proc_stderr_has(&r.jvm, "event=agent.reconnected"));
    agent_done(&r);
}

/* A JVM that ends while the cluster is down does not wait for it: librdkafka says every
 * broker is down, one metadata request confirms it, and the shutdown flushes for 200 ms
 * instead of agent.shutdown.flush.ms (3 s) and waits for the control thread half a
 * second. The agent has nothing in flight, so its own view is still "connected". */
static void test_exit_during_an_outage_does_not_wait(void **state)
{
    (void)state;
    agent_run_t r;
    agent_start(&r, "exit-outage", NULL);
    agent_configure(&r, 10000);
    cmr_peer_poll(&peer, 1000);
    kill(broker.pid, SIGUSR1);
    cmr_sleep_ms(2000); /* librdkafka's reconnect attempts fail */
    int64_t t0 = cmr_mono_ms();
    jvm_proc_send(&r.jvm, "exit");
    int said_bye = jvm_proc_expect(&r.jvm, "bye", NULL, 0, 10000), ended = jvm_proc_wait(&r.jvm, 30000);
    int64_t took = cmr_mono_ms() - t0;
    kill(broker.pid, SIGUSR2); /* before any assertion: the tests after this one need the brokers */
    assert_int_equal(said_bye, 0);
    assert_int_equal(ended, 0);
    print_message("the JVM ended %lld ms after being told to, during the outage\n", (long long)took);
    if (took >= 2000)
        fail_msg("the JVM took %lld ms to end during the outage", (long long)took);
    assert_false(jvm_proc_stderr_has(&r.jvm, "event=agent.disconnected")); /* it did not learn it by silence */
    agent_done(&r);
}

/* The first batch of the agent's segment whose root call is method_id, among the segment
 * batches received so far; NULL when there is none yet. */
static const cmr_event_batch_t *root_batch(const agent_run_t *r, uint64_t method_id)
{
    for (size_t k = 0; k < peer.nsegs; k++) {
        const cmr_event_batch_t *b = peer.segs[k];
        if (b->agent_id == r->agent_id && b->batch_seq == 0 && b->event_count > 0) {
            cmr_event_t e0;
            if (first_event(b, &e0) && e0.method_id == method_id && e0.kind == CMR_EVENT_ENTER)
                return b;
        }
    }
    return NULL;
}

/* Whether b is the first batch of a segment of the agent whose parent is root's segment. */
static bool is_child_of(const agent_run_t *r, const cmr_event_batch_t *b, const cmr_event_batch_t *root)
{
    return b->agent_id == r->agent_id && b->batch_seq == 0 && b->parent && b->parent->segment_id == root->segment_id;
}

/* The batches of one segment, in order, as one array of events (NULL when a batch is
 * missing). *n gets the count; the caller frees. */
static cmr_event_t *segment_events(agent_run_t *r, int64_t segment, size_t *n, const cmr_event_batch_t **first)
{
    size_t cap = 0;
    cmr_event_t *ev = NULL;
    assert_int_equal(CMR_ARRAY_GROW(ev, cap, 1), 0); /* not NULL, even for no events */
    *n = 0;
    *first = NULL;
    for (int32_t seq = 0;; seq++) {
        const cmr_event_batch_t *b = cmr_peer_seg_batch(&peer, r->agent_id, segment, seq);
        if (!b) {
            free(ev);
            return NULL;
        }
        if (seq == 0)
            *first = b;
        if (b->first_event_seq != (int64_t)*n) {
            free(ev);
            return NULL;
        }
        events_open(b);
        for (int32_t k = 0; k < b->event_count; k++) {
            assert_int_equal(CMR_ARRAY_GROW(ev, cap, *n + 1), 0);
            assert_int_equal(cmr_events_decoder_next(&dec, &ev[(*n)++]), 1);
        }
        if (b->last)
            return ev;
    }
}

static void test_context_follows_work_to_other_threads(void **state)
{
    (void)state;
    agent_run_t r;
    agent_start(&r, "fanout", NULL);
    agent_configure(&r, 10000);
    load_classes(&r, "demo.Work demo.Fanout");
    const cmr_class_loaded_t *work = wait_class(&r, "demo/Work", -1, 30000);
    const cmr_class_loaded_t *fan = wait_class(&r, "demo/Fanout", -1, 30000);
    assert_non_null(work);
    assert_non_null(fan);
    instrument_work(&r, work, &agent_sequence_probe, 40);
    /* Fanout.run only: the worker side's lambda stands for JDK code that runs before the
     * task, which is not instrumented */
    redefine_instrumented(&r, fan, &agent_sequence_probe, only_run, 41);

    jvm_proc_send(&r.jvm, "fanout 5");
    assert_int_equal(jvm_proc_expect(&r.jvm, "fanout: tasks=5", NULL, 0, 30000), 0);
    uint64_t run_id = cmr_method_id("demo/Fanout", "run", "(Ljava/util/concurrent/ExecutorService;I)I");
    uint64_t call_id = cmr_method_id("demo/Work", "call", "(I)J");

    /* the parent: the segment whose root is Fanout.run, with 5 forks */
    const cmr_event_batch_t *root = NULL;
    for (int i = 0; i < 200 && !root; i++) {
        cmr_peer_poll(&peer, 100);
        root = root_batch(&r, run_id);
    }
    assert_non_null(root);
    assert_null(root->parent);
    size_t np;
    const cmr_event_batch_t *pfirst;
    cmr_peer_poll(&peer, 1000);
    cmr_event_t *pe = segment_events(&r, root->segment_id, &np, &pfirst);
    assert_non_null(pe);
    int forks = 0;
    for (size_t i = 0; i < np; i++)
        forks += pe[i].kind == CMR_EVENT_FORK && pe[i].method_id == 0x5A5A5A5AULL;
    assert_int_equal(forks, 5);

    if (getenv("CMR_TEST_DEBUG"))
        for (size_t k = 0; k < peer.nsegs; k++) {
            const cmr_event_batch_t *b = peer.segs[k];
            if (b->agent_id == r.agent_id)
                print_message("batch seg=%" PRId64 " seq=%d thread=%s parent=%s%" PRId64 " events=%d root=%" PRId64
                              "\n",
                              b->segment_id, b->batch_seq, b->thread_name, b->parent ? "seg " : "none ",
                              b->parent ? b->parent->segment_id : 0, b->event_count, root->segment_id);
        }
    /* the children: five segments of other threads, same trace, each naming one FORK */
    int children = 0;
    char seen_fork[4096] = {0};
    for (size_t k = 0; k < peer.nsegs; k++) {
        const cmr_event_batch_t *c = peer.segs[k];
        if (!is_child_of(&r, c, root))
            continue;
        assert_memory_equal(c->trace_id, root->trace_id, 16);
        assert_int_equal(c->parent->agent_id, r.agent_id);
        assert_true(c->thread_id != root->thread_id);
        int64_t at = c->parent->event_seq;
        assert_true(at >= 0 && (size_t)at < np);
        assert_int_equal(pe[at].kind, CMR_EVENT_FORK);
        assert_int_equal(seen_fork[at], 0);
        seen_fork[at] = 1;
        size_t nc;
        const cmr_event_batch_t *cf;
        cmr_event_t *ce = segment_events(&r, c->segment_id, &nc, &cf);
        assert_non_null(ce);
        /* hand-off node, then Work.call(2) recursing: 1 + 3 invocations, enter and exit */
        assert_int_equal(nc, 8);
        assert_true(ce[0].method_id == 0x5A5A5A5AULL && ce[0].kind == CMR_EVENT_ENTER && ce[0].aux == 1);
        assert_true(ce[1].method_id == call_id && ce[1].kind == CMR_EVENT_ENTER && ce[1].aux == 2);
        assert_true(ce[7].kind == CMR_EVENT_EXIT && ce[7].aux == 1);
        free(ce);
        children++;
    }
    free(pe);
    assert_int_equal(children, 5);
    agent_exit(&r);
    agent_done(&r);
}

/* Instruments the hand-off points of ThreadPoolExecutor as the instrumenter's built-in
 * rules will: execute(Runnable) captures its argument, beforeExecute(Thread, Runnable)
 * continues the task's context, afterExecute closes it. */
static void instrument_thread_pool(agent_run_t *r, const cmr_class_loaded_t *tpe, int64_t request_id)
{
    static const cf_probe capture = {"ctx-capture",
                                     {"cmr/agent/Probe",
                                      "ctxCapture",
                                      "(Ljava/lang/Object;J)V",
                                      2,
                                      {{CF_PARG_ARG, 0, NULL}, {CF_PARG_METHOD_ID, 0, NULL}}},
                                     {0},
                                     {0}};
    static const cf_probe begin = {"ctx-begin",
                                   {"cmr/agent/Probe",
                                    "ctxBegin",
                                    "(Ljava/lang/Object;J)V",
                                    2,
                                    {{CF_PARG_ARG, 1, NULL}, {CF_PARG_METHOD_ID, 0, NULL}}},
                                   {0},
                                   {0}};
    static const cf_probe end = {"ctx-end", AGENT_PROBE_CALL("ctxEnd"), {0}, {0}};
    cf_class *c;
    cf_error err;
    assert_int_equal(cf_class_parse(tpe->bytecode.data, tpe->bytecode.len, &c, &err), CF_OK);
    int done = 0;
    for (uint16_t i = 0; i < c->method_count; i++) {
        cf_str name = cf_cp_utf8(c, c->methods[i].name), desc = cf_cp_utf8(c, c->methods[i].desc);
        const cf_probe *p = NULL;
        if (cf_str_len_eq(name, "execute") && cf_str_len_eq(desc, "(Ljava/lang/Runnable;)V"))
            p = &capture;
        else if (cf_str_len_eq(name, "beforeExecute"))
            p = &begin;
        else if (cf_str_len_eq(name, "afterExecute"))
            p = &end;
        if (!p)
            continue;
        cf_method_result res;
        assert_int_equal(cf_instrument_method(c, i, p, &res, &err), CF_OK);
        done++;
    }
    assert_int_equal(done, 3);
    uint8_t *bytes;
    size_t len;
    assert_int_equal(cf_class_write(c, &bytes, &len, &err), CF_OK);
    assert_int_equal(send_redefine(r, request_id, "java/util/concurrent/ThreadPoolExecutor", tpe->loader_id,
                                   tpe->class_hash, &tpe->bytecode, bytes, len, false)
                         ->status,
                     CMR_COMMAND_APPLIED);
    free(bytes);
    cf_class_free(c);
}

static void test_context_follows_thread_pool_tasks_through_the_jdk(void **state)
{
    (void)state;
    agent_run_t r;
    agent_start(&r, "pool", NULL);
    agent_configure(&r, 10000);
    load_classes(&r, "demo.Work demo.PoolWork");
    const cmr_class_loaded_t *tpe = wait_class(&r, "java/util/concurrent/ThreadPoolExecutor", -1, 30000);
    const cmr_class_loaded_t *work = wait_class(&r, "demo/Work", -1, 30000);
    const cmr_class_loaded_t *pw = wait_class(&r, "demo/PoolWork", -1, 30000);
    assert_non_null(tpe);
    assert_non_null(work);
    assert_non_null(pw);
    instrument_thread_pool(&r, tpe, 50);
    instrument_work(&r, work, &agent_sequence_probe, 51);
    redefine_instrumented(&r, pw, &agent_sequence_probe, only_run, 52);

    jvm_proc_send(&r.jvm, "pool 4");
    assert_int_equal(jvm_proc_expect(&r.jvm, "pool: tasks=4", NULL, 0, 30000), 0);
    uint64_t run_id = cmr_method_id("demo/PoolWork", "run", "(Ljava/util/concurrent/ExecutorService;I)I");
    uint64_t exec_id = cmr_method_id("java/util/concurrent/ThreadPoolExecutor", "execute", "(Ljava/lang/Runnable;)V");
    uint64_t before_id = cmr_method_id("java/util/concurrent/ThreadPoolExecutor", "beforeExecute",
                                       "(Ljava/lang/Thread;Ljava/lang/Runnable;)V");
    uint64_t call_id = cmr_method_id("demo/Work", "call", "(I)J");
    const cmr_event_batch_t *root = NULL;
    int children = 0;
    for (int i = 0; i < 200 && children < 4; i++) {
        cmr_peer_poll(&peer, 100);
        if (!root)
            root = root_batch(&r, run_id);
        if (!root)
            continue;
        children = 0;
        for (size_t k = 0; k < peer.nsegs; k++)
            children += is_child_of(&r, peer.segs[k], root);
    }
    assert_non_null(root);
    size_t np;
    const cmr_event_batch_t *pf;
    cmr_event_t *pe = segment_events(&r, root->segment_id, &np, &pf);
    assert_non_null(pe);
    int forks = 0;
    for (size_t i = 0; i < np; i++)
        forks += pe[i].kind == CMR_EVENT_FORK && pe[i].method_id == exec_id;
    assert_int_equal(forks, 4);
    assert_int_equal(children, 4);
    for (size_t k = 0; k < peer.nsegs; k++) {
        const cmr_event_batch_t *c = peer.segs[k];
        if (!is_child_of(&r, c, root))
            continue;
        assert_memory_equal(c->trace_id, root->trace_id, 16);
        assert_int_equal(pe[c->parent->event_seq].kind, CMR_EVENT_FORK);
        size_t nc;
        const cmr_event_batch_t *cf;
        cmr_event_t *ce = segment_events(&r, c->segment_id, &nc, &cf);
        assert_non_null(ce);
        /* beforeExecute's node, Work.call x3, closed with beforeExecute's id */
        assert_int_equal(nc, 8);
        assert_true(ce[0].method_id == before_id && ce[0].kind == CMR_EVENT_ENTER);
        assert_true(ce[1].method_id == call_id);
        assert_true(ce[7].method_id == before_id && ce[7].kind == CMR_EVENT_EXIT);
        free(ce);
    }
    free(pe);
    agent_exit(&r);
    agent_done(&r);
}

static bool shutdown_status(const cmr_msg_t *m, const void *ud)
{
    return strcmp(m->u.agent_status.instance_id, (const char *)ud) == 0 &&
           m->u.agent_status.state == CMR_AGENT_SHUTDOWN;
}

static void test_stress_every_event_arrives_or_is_counted(void **state)
{
    (void)state;
    agent_run_t r;
    /* a generous shutdown flush: tens of thousands of small batches may still be queued */
    const cmr_class_loaded_t *work =
        agent_with_work(&r, "stress", "agent.ring.records=4096,agent.shutdown.flush.ms=30000", 10000);
    instrument_work(&r, work, &agent_sequence_probe, 20);
    char line[128];
    const int threads = 16;
    const long calls = 20000;
    snprintf(line, sizeof line, "work %d %ld", threads, calls);
    jvm_proc_send(&r.jvm, line);
    assert_int_equal(jvm_proc_expect(&r.jvm, "work:", line, sizeof line, 120000), 0);
    long done = strtol(line + strlen("work: calls="), NULL, 10);
    assert_int_equal(done, threads * calls);
    agent_exit(&r);
    agent_done(&r);
    const cmr_record_t *bye = cmr_peer_wait(&peer, CMR_MSG_AGENT_STATUS, shutdown_status, r.instance, 0, 30000);
    assert_non_null(bye);
    uint64_t expected = (uint64_t)done * 8; /* 4 invocations per call, enter + exit */
    event_tally_t t;
    for (int i = 0; i < 200; i++) {
        tally_events(&r, cmr_method_id("demo/Work", "call", "(I)J"), &t);
        if (t.events + (uint64_t)bye->msg.u.agent_status.events_dropped >= expected)
            break;
        cmr_peer_poll(&peer, 100);
    }
    print_message("stress: %" PRIu64 " events expected, %" PRIu64 " received in %" PRIu64 " batches, %" PRId64
                  " dropped\n",
                  expected, t.events, t.batches, bye->msg.u.agent_status.events_dropped);
    assert_int_equal(t.bad, 0);
    assert_int_equal(t.events + (uint64_t)bye->msg.u.agent_status.events_dropped, expected);
}

/* One segment's batch, for test_loss_is_whole_traces. */
typedef struct seg_batch {
    int64_t segment;
    const cmr_event_batch_t *b;
} seg_batch_t;

static int cmp_seg_batch(const void *x, const void *y)
{
    const seg_batch_t *a = x, *b = y;
    if (a->segment != b->segment)
        return a->segment < b->segment ? -1 : 1;
    return a->b->batch_seq < b->b->batch_seq ? -1 : a->b->batch_seq > b->b->batch_seq;
}

/* Issue 15: a ring far too small for the load (strategy ring_records = 64) and a segment
 * size limit below the recursion (max_segment_events = 6: Work.call recurses to depth 4,
 * so its 4th call would make 8 events): every segment that arrives is whole and well
 * formed (its root enter first, every enter with its exit, depths in order), marked
 * truncated with the count of calls it did not record, and never without its root; the
 * traces that did not fit are dropped whole and counted in AgentStatus.traces_dropped;
 * nothing is lost uncounted. */
static void test_loss_is_whole_traces(void **state)
{
    (void)state;
    agent_run_t r;
    agent_start(&r, "loss", "agent.shutdown.flush.ms=30000");
    cmr_agent_configuration_t cfg = {
        .instance_id = r.instance,
        .agent_id = r.agent_id,
        .environment_id = "test",
        .environment_name = "Test environment",
        .revision = 1,
        .strategy = {.send_interval_ms = 5,
                     .ring_records = 64,
                     .max_batch_events = 2048,
                     .metric_interval_ms = 10000,
                     .max_threads = 0,
                     .stall_threshold_ms = 0,
                     .max_segment_events = 6},
    };
    assert_int_equal(cmr_peer_command(&peer, r.instance, CMR_MSG_AGENT_CONFIGURATION, &cfg), 0);
    status_match_t sm = {r.instance, CMR_AGENT_FULL};
    assert_non_null(cmr_peer_wait(&peer, CMR_MSG_AGENT_STATUS, status_of, &sm, 0, 30000));
    load_classes(&r, "demo.Work");
    const cmr_class_loaded_t *work = wait_class(&r, "demo/Work", -1, 30000);
    assert_non_null(work);
    instrument_work(&r, work, &agent_sequence_probe, 30);
    char line[128];
    const int threads = 4;
    const long calls = 20000;
    snprintf(line, sizeof line, "work %d %ld", threads, calls);
    jvm_proc_send(&r.jvm, line);
    assert_int_equal(jvm_proc_expect(&r.jvm, "work:", line, sizeof line, 120000), 0);
    long done = strtol(line + strlen("work: calls="), NULL, 10);
    assert_int_equal(done, threads * calls);
    agent_exit(&r);
    agent_done(&r);
    const cmr_record_t *bye = cmr_peer_wait(&peer, CMR_MSG_AGENT_STATUS, shutdown_status, r.instance, 0, 30000);
    assert_non_null(bye);
    const cmr_agent_status_t *st = &bye->msg.u.agent_status;
    uint64_t call_id = cmr_method_id("demo/Work", "call", "(I)J");
    uint64_t segments = 0, enters = 0, not_recorded = 0, bad = 0, truncated = 0, by_ring = 0;
    for (int round = 0; round < 200; round++) {
        size_t n = 0;
        seg_batch_t *v = calloc(peer.nsegs + 1, sizeof *v);
        assert_non_null(v);
        for (size_t i = 0; i < peer.nsegs; i++)
            if (peer.segs[i]->agent_id == r.agent_id)
                v[n++] = (seg_batch_t){peer.segs[i]->segment_id, peer.segs[i]};
        qsort(v, n, sizeof *v, cmp_seg_batch);
        segments = enters = not_recorded = truncated = by_ring = 0;
        bad = peer.bad_event_msgs; /* messages that did not split (corrupt) */
        for (size_t i = 0; i < n;) {
            size_t j = i;
            uint32_t depth = 0;
            uint64_t seg_not_recorded = 0;
            bool first = true, last = false;
            for (; j < n && v[j].segment == v[i].segment; j++) {
                const cmr_event_batch_t *b = v[j].b;
                bad += b->batch_seq != (int32_t)(j - i) || b->dropped != 0 || last; /* in order, nothing lost */
                last = b->last;
                seg_not_recorded += (uint64_t)b->calls_not_recorded;
                by_ring += (b->truncated_by & CMR_TRUNCATED_BY_RING) != 0;
                events_open(b);
                for (int32_t k = 0; k < b->event_count; k++) {
                    cmr_event_t ev;
                    if (cmr_events_decoder_next(&dec, &ev) != 1) {
                        bad++;
                        break;
                    }
                    if (first && (ev.kind != CMR_EVENT_ENTER || ev.aux != 1)) /* the root call first */
                        bad++;
                    first = false;
                    if (ev.method_id != call_id)
                        bad++;
                    if (ev.kind == CMR_EVENT_ENTER) {
                        bad += ev.aux != ++depth;
                        enters++;
                    } else if (ev.kind == CMR_EVENT_EXIT) {
                        bad += depth == 0 || ev.aux != depth;
                        depth--;
                    } else {
                        bad++;
                    }
                }
            }
            bad += !last || depth != 0 || first; /* whole: ended, every enter with its exit */
            segments++;
            not_recorded += seg_not_recorded;
            truncated += seg_not_recorded > 0;
            i = j;
        }
        free(v);
        if (segments + (uint64_t)st->traces_dropped >= (uint64_t)done)
            break;
        cmr_peer_poll(&peer, 100);
    }
    print_message("loss: %ld traces: %" PRIu64 " arrived (%" PRIu64 " truncated, %" PRIu64
                  " of them also by a full ring), %" PRId64 " dropped whole; %" PRIu64 " calls recorded, %" PRIu64
                  " not recorded; events dropped %" PRId64 "\n",
                  done, segments, truncated, by_ring, st->traces_dropped, enters, not_recorded, st->events_dropped);
    assert_int_equal(bad, 0);
    assert_true(st->traces_dropped > 0); /* the ring is far too small: whole traces were dropped */
    assert_true(segments > 0);
    assert_int_equal(segments + (uint64_t)st->traces_dropped, (uint64_t)done); /* each call is a trace */
    assert_int_equal(truncated, segments); /* each recorded trace passed the size limit */
    assert_true(not_recorded >= segments);
    /* every event is in a batch or counted: 2 per call not recorded, in kept and dropped traces */
    assert_int_equal(2 * enters + (uint64_t)st->events_dropped, (uint64_t)done * 8);
    /* and the MetricBatches, which count recorded calls only, say how many calls the probes
     * ran beyond them (MetricBatch.calls_dropped, what the overhead budget scales by): the
     * two make every call of the run (the last interval is sent at exit) */
    int64_t metric_calls = 0, calls_dropped = 0;
    for (size_t i = 0; i < peer.n; i++) {
        const cmr_msg_t *m = &peer.recs[i]->msg;
        if (m->type != CMR_MSG_METRIC_BATCH || m->u.metric_batch.agent_id != r.agent_id)
            continue;
        calls_dropped += m->u.metric_batch.calls_dropped;
        for (size_t k = 0; k < m->u.metric_batch.metrics.count; k++)
            if ((uint64_t)m->u.metric_batch.metrics.items[k].method_id == call_id)
                metric_calls += m->u.metric_batch.metrics.items[k].count;
    }
    print_message("loss: metrics count %" PRId64 " calls, %" PRId64 " dropped\n", metric_calls, calls_dropped);
    assert_true(calls_dropped > 0);
    assert_int_equal(metric_calls + calls_dropped, (int64_t)done * 4);
}

static void test_dynamic_attach_sends_classes_loaded_before_it(void **state)
{
    (void)state;
    /* a JVM started without the agent */
    jvm_proc_t j;
    const char *argv[] = {java_bin, "-XX:+EnableDynamicAgentLoading", "-cp", classpath, "AgentTestApp", NULL};
    assert_int_equal(jvm_proc_start(&j, argv), 0);
    assert_int_equal(jvm_proc_expect(&j, "ready", NULL, 0, 30000), 0);
    jvm_proc_send(&j, "greet");
    assert_int_equal(jvm_proc_expect(&j, "greet:", NULL, 0, 10000), 0);
    /* jcmd of the same JDK loads the agent into it */
    char jcmd[1024], pid[32], options[1024], name[64];
    snprintf(jcmd, sizeof jcmd, "%s", java_bin);
    char *slash = strrchr(jcmd, '/');
    assert_non_null(slash);
    snprintf(slash + 1, sizeof jcmd - (size_t)(slash + 1 - jcmd), "jcmd");
    snprintf(pid, sizeof pid, "%d", (int)j.pid);
    uint8_t raw[4];
    char hex[9];
    cmr_random_bytes(raw, sizeof raw);
    cmr_hex(raw, sizeof raw, hex);
    snprintf(name, sizeof name, "attach-%s", hex);
    /* quoted: jcmd's own parser would split key=value arguments */
    snprintf(options, sizeof options, "\"bootstrap=%s,name=%s,%s\"", broker.bootstrap, name, peer.trust_option);
    jvm_proc_t tool;
    const char *cmd[] = {jcmd, pid, "JVMTI.agent_load", agent_so, options, NULL};
    assert_int_equal(jvm_proc_start(&tool, cmd), 0);
    assert_int_equal(jvm_proc_wait(&tool, 60000), 0);
    jvm_proc_cleanup(&tool);
    const cmr_record_t *reg = cmr_peer_wait(&peer, CMR_MSG_AGENT_REGISTRATION, by_name, name, 0, 30000);
    assert_non_null(reg);
    agent_run_t r = {.jvm = j};
    snprintf(r.name, sizeof r.name, "%s", name);
    snprintf(r.instance, sizeof r.instance, "%s", reg->msg.u.registration.instance_id);
    snprintf(r.hostname, sizeof r.hostname, "%s", reg->msg.u.registration.hostname);
    r.agent_id = (int64_t)cmr_agent_id(r.name, r.hostname, r.instance);
    agent_configure(&r, 10000);
    /* classes the JVM loaded before the agent existed: their bytes come from the JVM */
    const cmr_class_loaded_t *g = wait_class(&r, "demo/Greeter", -1, 60000);
    assert_non_null(g);
    assert_true((uint64_t)g->class_hash == cmr_class_hash(g->bytecode.data, g->bytecode.len));
    assert_non_null(wait_class(&r, "AgentTestApp", -1, 60000));
    /* and the attached agent applies commands like a loaded one */
    size_t v2_len = 0;
    uint8_t *v2 = read_file(greeter_v2_path, &v2_len);
    const cmr_redefine_result_t *res =
        send_redefine(&r, 31, "demo/Greeter", g->loader_id, g->class_hash, &g->bytecode, v2, v2_len, false);
    assert_int_equal(res->status, CMR_COMMAND_APPLIED);
    expect_greeting(&r, "redefined");
    free(v2);
    agent_exit(&r);
    assert_true(jvm_proc_stderr_has(&r.jvm, "event=agent.attached"));
    agent_done(&r);
}

/* --- trust ------------------------------------------------------------------------------------- */

typedef struct refusal_match {
    const char *instance;
    const char *reason;
    int64_t at_least;
} refusal_match_t;

static int64_t refused_count(const cmr_agent_status_t *st, const char *reason)
{
    for (size_t i = 0; i < st->commands_refused.count; i++)
        if (strcmp(st->commands_refused.items[i].reason, reason) == 0)
            return st->commands_refused.items[i].count;
    return 0;
}

static bool refused_at_least(const cmr_msg_t *m, const void *ud)
{
    const refusal_match_t *rm = ud;
    return strcmp(m->u.agent_status.instance_id, rm->instance) == 0 &&
           refused_count(&m->u.agent_status, rm->reason) >= rm->at_least;
}

/* Waits for an AgentStatus that counts at least n refusals for `reason`: the agent has
 * read and refused the record by then. */
static const cmr_agent_status_t *wait_refused(agent_run_t *r, const char *reason, int64_t n)
{
    refusal_match_t rm = {r->instance, reason, n};
    const cmr_record_t *rec = cmr_peer_wait(&peer, CMR_MSG_AGENT_STATUS, refused_at_least, &rm, 0, 30000);
    assert_non_null(rec);
    return &rec->msg.u.agent_status;
}

static size_t results_of(agent_run_t *r, int64_t request_id)
{
    result_match_t rm = {r->instance, request_id};
    return cmr_peer_count(&peer, CMR_MSG_REDEFINE_RESULT, result_of, &rm);
}

/* Every way an attacker who can write cmr.cmd.<instance> might try to make the JVM run its
 * class: all refused before any handler, counted, and the class keeps its behaviour. */
/* --- the cache of instrumented classes (class grants) ------------------------------------------ */

typedef struct new_registration {
    const char *name;
    const char *const *seen; /* instances of earlier runs of that name */
    int nseen;
} new_registration_t;

static bool new_registration_of(const cmr_msg_t *m, const void *ud)
{
    const new_registration_t *n = ud;
    if (m->type != CMR_MSG_AGENT_REGISTRATION || strcmp(m->u.registration.agent_name, n->name) != 0)
        return false;
    for (int i = 0; i < n->nseen; i++)
        if (strcmp(m->u.registration.instance_id, n->seen[i]) == 0)
            return false;
    return true;
}

/* Starts a JVM of agent `name` (the same name as earlier runs: a restart) and waits for
 * the registration of this run. */
static void agent_restart(agent_run_t *r, const char *name, const char *options, const char *const *seen, int nseen)
{
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    char agentpath[2048];
    snprintf(agentpath, sizeof agentpath, "-agentpath:%s=bootstrap=%s,name=%s,%s,%s", agent_so, broker.bootstrap, name,
             peer.trust_option, options);
    const char *argv[] = {java_bin, "-Xshare:auto", agentpath, "-cp", classpath, "AgentTestApp", NULL};
    assert_int_equal(jvm_proc_start(&r->jvm, argv), 0);
    assert_int_equal(jvm_proc_expect(&r->jvm, "ready", NULL, 0, 30000), 0);
    new_registration_t n = {name, seen, nseen};
    const cmr_record_t *reg = cmr_peer_wait(&peer, CMR_MSG_AGENT_REGISTRATION, new_registration_of, &n, 0, 90000);
    assert_non_null(reg);
    snprintf(r->instance, sizeof r->instance, "%s", reg->msg.u.registration.instance_id);
    snprintf(r->hostname, sizeof r->hostname, "%s", reg->msg.u.registration.hostname);
    r->agent_id = (int64_t)cmr_agent_id(r->name, r->hostname, r->instance);
}

static void agent_configure_env(agent_run_t *r, const char *env)
{
    cmr_agent_configuration_t cfg = {
        .instance_id = r->instance,
        .agent_id = r->agent_id,
        .environment_id = (char *)env,
        .environment_name = (char *)env,
        .revision = 1,
        .strategy = {.send_interval_ms = 5, .max_batch_events = 2048, .metric_interval_ms = 10000},
    };
    assert_int_equal(cmr_peer_command(&peer, r->instance, CMR_MSG_AGENT_CONFIGURATION, &cfg), 0);
    status_match_t sm = {r->instance, CMR_AGENT_FULL};
    assert_non_null(cmr_peer_wait(&peer, CMR_MSG_AGENT_STATUS, status_of, &sm, 0, 30000));
}

/* Runs demo.Work.call 10 times and returns the events of that method that arrive. */
static uint64_t work_events(agent_run_t *r, uint64_t call_id, uint64_t want)
{
    char line[128];
    jvm_proc_send(&r->jvm, "work 1 10");
    assert_int_equal(jvm_proc_expect(&r->jvm, "work:", line, sizeof line, 30000), 0);
    event_tally_t t = {0};
    for (int i = 0; i < (want ? 100 : 15); i++) {
        cmr_peer_poll(&peer, 100);
        tally_events(r, call_id, &t);
        if (want && t.events >= want)
            break;
    }
    assert_int_equal(t.bad, 0);
    return t.events;
}

static size_t redefine_results_of(agent_run_t *r)
{
    return cmr_peer_count(&peer, CMR_MSG_REDEFINE_RESULT, cmr_peer_of_instance, r->instance);
}

static void test_cached_classes_are_instrumented_at_load_in_a_restarted_jvm(void **state)
{
    (void)state;
    char tmp[64] = "/tmp/cmr-agent-cache-XXXXXX", opts[256], name[64], other[320], rm[128];
    assert_non_null(mkdtemp(tmp));
    snprintf(opts, sizeof opts, "agent.cache.dir=%s/cache", tmp);
    uint8_t raw[4];
    char hex[9];
    cmr_random_bytes(raw, sizeof raw);
    cmr_hex(raw, sizeof raw, hex);
    snprintf(name, sizeof name, "cache-%s", hex);
    uint64_t call_id = cmr_method_id("demo/Work", "call", "(I)J");
    const char *seen[4];

    /* 1. the first JVM: demo.Work is redefined with a grant, which the agent caches */
    agent_run_t r;
    agent_restart(&r, name, opts, seen, 0);
    seen[0] = strdup(r.instance);
    agent_configure_env(&r, "cache-env");
    load_classes(&r, "demo.Work");
    const cmr_class_loaded_t *work = wait_class(&r, "demo/Work", -1, 30000);
    assert_non_null(work);
    assert_int_equal(work->applied_digest.len, 0);
    /* it keeps classes granted ahead (agent.preload.max.bytes by default): it says so */
    assert_int_equal(work->agent_features, CMR_AGENT_READS_CLASS_GRANTS);
    cf_instrument_result res;
    cf_error cerr;
    assert_int_equal(cf_instrument_class(work->bytecode.data, work->bytecode.len, &agent_sequence_probe, only_call,
                                         NULL, &res, &cerr),
                     CF_OK);
    uint8_t digest[CMR_TRUST_DIGEST_BYTES], instrumented_digest[CMR_TRUST_DIGEST_BYTES];
    cmr_redefine_t cmd = redefine_cmd(&r, 1, "demo/Work", work->loader_id, work->class_hash, &work->bytecode, digest,
                                      res.bytes, res.len, false);
    cmr_buf_t grant = {0};
    char err[256];
    assert_int_equal(cmr_grant_sign(peer.signer, "cache-env", 1, "demo/Work", digest, res.bytes, res.len, 86400000,
                                    &grant, err, sizeof err),
                     0);
    cmd.grant = (cmr_bytes_t){grant.data, grant.len};
    assert_int_equal(cmr_peer_command(&peer, r.instance, CMR_MSG_REDEFINE, &cmd), 0);
    assert_int_equal(wait_result(&r, 1)->status, CMR_COMMAND_APPLIED);
    cmr_trust_digest(res.bytes, res.len, instrumented_digest);
    assert_true(work_events(&r, call_id, 40) >= 40);
    agent_exit(&r);
    assert_true(jvm_proc_stderr_has(&r.jvm, "event=agent.cache_stats hits=0"));
    assert_true(jvm_proc_stderr_has(&r.jvm, "written=1 "));
    agent_done(&r);

    /* 2. a restart of that JVM: demo.Work loads (before the CMR answers) with its
     * instrumented bytes from the cache, and no command at all is sent to it */
    agent_restart(&r, name, opts, seen, 1);
    seen[1] = strdup(r.instance);
    load_classes(&r, "demo.Work");
    agent_configure_env(&r, "cache-env");
    work = wait_class(&r, "demo/Work", CMR_CLASS_LOADED_BEFORE_REGISTRATION, 30000);
    assert_non_null(work);
    assert_int_equal(work->applied_digest.len, CMR_TRUST_DIGEST_BYTES);
    assert_memory_equal(work->applied_digest.data, instrumented_digest, CMR_TRUST_DIGEST_BYTES);
    assert_true(work_events(&r, call_id, 40) >= 40); /* the probes of the cached bytes run */
    assert_int_equal(redefine_results_of(&r), 0);    /* no RedefineClasses was asked for */
    agent_exit(&r);
    assert_true(jvm_proc_stderr_has(&r.jvm, "event=agent.cache_opened"));
    assert_true(jvm_proc_stderr_has(&r.jvm, "from=previous_run"));
    assert_true(jvm_proc_stderr_has(&r.jvm, "event=agent.cache_stats hits=1 "));
    agent_done(&r);

    /* 3. a JVM of another environment with the same cache does not use it (nor keeps
     * classes granted ahead, agent.preload.max.bytes=0: it does not say it reads them) */
    agent_run_t o;
    snprintf(other, sizeof other, "%s,agent.environment=other-env,agent.preload.max.bytes=0", opts);
    agent_start(&o, "cache-other", other);
    load_classes(&o, "demo.Work");
    agent_configure_env(&o, "other-env");
    work = wait_class(&o, "demo/Work", -1, 30000);
    assert_non_null(work);
    assert_int_equal(work->applied_digest.len, 0);
    assert_int_equal(work->agent_features, 0);
    assert_int_equal(work_events(&o, call_id, 0), 0);
    agent_exit(&o);
    assert_true(jvm_proc_stderr_has(&o.jvm, "event=agent.cache_stats hits=0 "));
    agent_done(&o);

    /* 4. a restart the CMR then puts in another environment: the class served from the
     * cache gets its original bytes back before it is reported */
    agent_restart(&r, name, opts, seen, 2);
    load_classes(&r, "demo.Work");
    agent_configure_env(&r, "moved-env");
    work = wait_class(&r, "demo/Work", -1, 30000);
    assert_non_null(work);
    assert_int_equal(work->applied_digest.len, 0);
    assert_int_equal(work_events(&r, call_id, 0), 0);
    agent_exit(&r);
    assert_true(jvm_proc_stderr_has(&r.jvm, "event=agent.cache_environment_changed"));
    assert_true(jvm_proc_stderr_has(&r.jvm, "event=agent.cache_reverted classes=1 restored=1 failed=0"));
    agent_done(&r);

    cmr_buf_free(&grant);
    cf_instrument_result_free(&res);
    free((void *)seen[0]);
    free((void *)seen[1]);
    snprintf(rm, sizeof rm, "rm -rf '%s'", tmp);
    assert_int_equal(system(rm), 0);
}

/* Classes granted ahead (docs/AGENT.md): a ClassGrants for a configured JVM is verified
 * class by class; demo.Work, granted for the JVM's environment under the pinned key, loads
 * with its instrumented bytes (ClassLoaded.applied_digest, its probes' events) with no
 * RedefineClasses at all, while a grant signed by a key the agent does not pin and one of
 * another environment are refused and counted; a ClassGrants without an envelope is
 * refused before it is read. */
static void test_classes_granted_ahead_load_instrumented(void **state)
{
    (void)state;
    uint64_t call_id = cmr_method_id("demo/Work", "call", "(I)J");

    /* 1. demo.Work's bytes, as cmr-instrumenter has them from an earlier JVM */
    agent_run_t r;
    agent_start(&r, "ahead-src", "");
    agent_configure_env(&r, "ahead-env");
    load_classes(&r, "demo.Work");
    const cmr_class_loaded_t *work = wait_class(&r, "demo/Work", -1, 30000);
    assert_non_null(work);
    uint8_t digest[CMR_TRUST_DIGEST_BYTES], instrumented_digest[CMR_TRUST_DIGEST_BYTES];
    cmr_trust_digest(work->bytecode.data, work->bytecode.len, digest);
    cf_instrument_result res;
    cf_error cerr;
    assert_int_equal(cf_instrument_class(work->bytecode.data, work->bytecode.len, &agent_sequence_probe, only_call,
                                         NULL, &res, &cerr),
                     CF_OK);
    cmr_trust_digest(res.bytes, res.len, instrumented_digest);
    agent_exit(&r);
    agent_done(&r);

    cmr_buf_t good = {0}, foreign = {0}, other_env = {0};
    char err[256];
    cmr_signer_t *stranger = cmr_peer_new_signer(&peer);
    assert_non_null(stranger);
    assert_int_equal(cmr_grant_sign(peer.signer, "ahead-env", 1, "demo/Work", digest, res.bytes, res.len, 86400000,
                                    &good, err, sizeof err),
                     0);
    assert_int_equal(cmr_grant_sign(stranger, "ahead-env", 1, "demo/Work", digest, res.bytes, res.len, 86400000,
                                    &foreign, err, sizeof err),
                     0);
    assert_int_equal(cmr_grant_sign(peer.signer, "elsewhere", 1, "demo/Work", digest, res.bytes, res.len, 86400000,
                                    &other_env, err, sizeof err),
                     0);

    /* 2. a new JVM of the environment gets them before it loads demo.Work */
    agent_start(&r, "ahead-new", "");
    agent_configure_env(&r, "ahead-env");
    cmr_granted_class_t classes[] = {
        {"demo/Work", {digest, sizeof digest}, {foreign.data, foreign.len}, {res.bytes, res.len}},
        {"demo/Work", {digest, sizeof digest}, {other_env.data, other_env.len}, {res.bytes, res.len}},
        {"demo/Work", {digest, sizeof digest}, {good.data, good.len}, {res.bytes, res.len}},
    };
    cmr_class_grants_t cg = {
        .agent_id = r.agent_id, .environment_id = "ahead-env", .revision = 1, .part = 1, .parts = 1};
    cg.classes.items = classes;
    cg.classes.count = 3;
    assert_int_equal(cmr_peer_send_raw(&peer, r.instance, CMR_MSG_CLASS_GRANTS, &cg), 0); /* no envelope */
    assert_int_equal(cmr_peer_command(&peer, r.instance, CMR_MSG_CLASS_GRANTS, &cg), 0);
    bool kept = false;
    for (int waited = 0; waited < 30000 && !kept; waited += 50) {
        kept = jvm_proc_stderr_has(&r.jvm, "event=agent.granted_ahead ");
        if (!kept)
            usleep(50 * 1000);
    }
    assert_true(kept);
    assert_true(jvm_proc_stderr_has(&r.jvm, "classes=3 kept=1 refused=2"));
    assert_true(jvm_proc_stderr_has(&r.jvm, "event=agent.granted_ahead_refused refused=2"));
    assert_true(jvm_proc_stderr_has(&r.jvm, "event=agent.command_refused"));
    load_classes(&r, "demo.Work");
    work = wait_class(&r, "demo/Work", -1, 30000);
    assert_non_null(work);
    assert_int_equal(work->applied_digest.len, CMR_TRUST_DIGEST_BYTES);
    assert_memory_equal(work->applied_digest.data, instrumented_digest, CMR_TRUST_DIGEST_BYTES);
    assert_true(work_events(&r, call_id, 40) >= 40); /* the probes of the bytes granted ahead run */
    assert_int_equal(redefine_results_of(&r), 0);    /* no RedefineClasses was asked for */
    agent_exit(&r);
    assert_true(jvm_proc_stderr_has(&r.jvm, "event=agent.granted_ahead_stats received=3 kept=1 refused=2"));
    assert_true(jvm_proc_stderr_has(&r.jvm, "load_hits=1 "));
    assert_true(jvm_proc_stderr_has(&r.jvm, "at_load=1 "));
    agent_done(&r);

    cmr_signer_free(stranger);
    cmr_buf_free(&good);
    cmr_buf_free(&foreign);
    cmr_buf_free(&other_env);
    cf_instrument_result_free(&res);
}

/* A class served from the cache that the JVM cannot give its original bytes back to when
 * the CMR names another environment (here the cached bytes have one more method, which
 * RetransformClasses cannot delete): the batch is retried class by class once, the
 * failure is logged with the class and the JVMTI error (agent.cache_revert_failed), and the
 * class is reported with the bytes it really runs (ClassLoaded.applied_digest), so that the
 * CMR's Redefine replaces them. The cache is written by this process as a previous run
 * would have left it. */
static void test_failed_revert_of_cached_class_is_reported(void **state)
{
    (void)state;
    char tmp[64] = "/tmp/cmr-agent-revert-XXXXXX", dir[128], opts[256], name[64], path[1100], err[256], hex[9], rm[128];
    assert_non_null(mkdtemp(tmp));
    snprintf(dir, sizeof dir, "%s/cache", tmp);
    snprintf(opts, sizeof opts, "agent.cache.dir=%s", dir);
    uint8_t raw[4];
    cmr_random_bytes(raw, sizeof raw);
    cmr_hex(raw, sizeof raw, hex);
    snprintf(name, sizeof name, "revert-%s", hex);
    snprintf(path, sizeof path, "%s/demo/Work.class", classpath);
    size_t orig_len = 0, v3_len = 0;
    uint8_t *orig = read_file(path, &orig_len), *v3 = read_file(work_v3_path, &v3_len);
    assert_non_null(orig);
    assert_non_null(v3);
    uint8_t digest[CMR_TRUST_DIGEST_BYTES], v3_digest[CMR_TRUST_DIGEST_BYTES];
    cmr_trust_digest(orig, orig_len, digest);
    cmr_trust_digest(v3, v3_len, v3_digest);

    cmr_verifier_t *v = cmr_verifier_new("instance", NULL);
    assert_non_null(v);
    assert_int_equal(cmr_verifier_add_key_file(v, peer.public_key, err, sizeof err), 0);
    cmr_grant_store_t *store = cmr_grant_store_open(dir, "revert-env", v, 1 << 20, 100, err, sizeof err);
    assert_non_null(store);
    cmr_buf_t grant = {0};
    assert_int_equal(cmr_grant_sign(peer.signer, "revert-env", 1, "demo/Work", digest, v3, v3_len, 86400000, &grant,
                                    err, sizeof err),
                     0);
    assert_int_equal(
        cmr_grant_store_put(store, grant.data, grant.len, digest, v3, v3_len, cmr_wall_ms(), err, sizeof err), 0);
    assert_int_equal(cmr_grant_store_record_environment(store, name, "revert-env", err, sizeof err), 0);
    cmr_grant_store_close(store);
    cmr_verifier_free(v);

    agent_run_t r;
    agent_restart(&r, name, opts, NULL, 0);
    load_classes(&r, "demo.Work"); /* its cached bytes, v3 */
    agent_configure_env(&r, "moved-env");
    const cmr_class_loaded_t *work = wait_class(&r, "demo/Work", -1, 30000);
    assert_non_null(work);
    assert_int_equal(work->applied_digest.len, CMR_TRUST_DIGEST_BYTES);
    assert_memory_equal(work->applied_digest.data, v3_digest, CMR_TRUST_DIGEST_BYTES);
    agent_exit(&r);
    assert_true(jvm_proc_stderr_has(&r.jvm, "event=agent.cache_stats hits=1 "));
    assert_true(jvm_proc_stderr_has(&r.jvm, "event=agent.cache_revert_failed class=\"demo/Work\""));
    assert_true(jvm_proc_stderr_has(&r.jvm, "retry_error=JVMTI_ERROR_UNSUPPORTED_REDEFINITION_METHOD_DELETED"));
    assert_true(
        jvm_proc_stderr_has(&r.jvm, "event=agent.cache_reverted classes=1 restored=0 failed=1 retried_one_by_one=1"));
    agent_done(&r);

    cmr_buf_free(&grant);
    free(orig);
    free(v3);
    snprintf(rm, sizeof rm, "rm -rf '%s'", tmp);
    assert_int_equal(system(rm), 0);
}

static void test_forged_commands_are_refused(void **state)
{
    (void)state;
    agent_run_t r;
    agent_start(&r, "forged", NULL);
    agent_configure(&r, 10000);
    expect_greeting(&r, "hello");
    const cmr_class_loaded_t *g = wait_class(&r, "demo/Greeter", -1, 30000);
    assert_non_null(g);
    size_t v2_len = 0;
    uint8_t *v2 = read_file(greeter_v2_path, &v2_len); /* the attacker's class: greets "redefined" */
    assert_non_null(v2);
    uint8_t digest[CMR_TRUST_DIGEST_BYTES];

    /* (a) the attack of the issue: a bare Redefine, agent_id 0, an invented loader id,
     * only the class hash right */
    cmr_redefine_t evil = {.request_id = 70,
                           .agent_id = 0,
                           .class_name = "demo/Greeter",
                           .loader_id = 987654,
                           .class_hash = g->class_hash,
                           .revision = 1,
                           .bytecode = {v2, v2_len}};
    assert_int_equal(cmr_peer_send_raw(&peer, r.instance, CMR_MSG_REDEFINE, &evil), 0);
    wait_refused(&r, "unsigned", 1);
    expect_greeting(&r, "hello");

    /* (b) well formed and signed, even with the right digest, by a key the agent does not pin */
    cmr_signer_t *rogue = cmr_peer_new_signer(&peer);
    assert_non_null(rogue);
    evil = redefine_cmd(&r, 71, "demo/Greeter", g->loader_id, g->class_hash, &g->bytecode, digest, v2, v2_len, false);
    assert_int_equal(cmr_peer_send_signed(&peer, rogue, r.instance, r.instance, CMR_MSG_REDEFINE, &evil), 0);
    wait_refused(&r, "unknown_key", 1);
    expect_greeting(&r, "hello");
    cmr_signer_free(rogue);

    /* (d) signed with the CMR's key, for another instance, sent to this one */
    evil.request_id = 73;
    assert_int_equal(cmr_peer_send_signed(&peer, peer.signer, "0123456789abcdef0123456789abcdef", r.instance,
                                          CMR_MSG_REDEFINE, &evil),
                     0);
    wait_refused(&r, "wrong_target", 1);
    expect_greeting(&r, "hello");

    /* (e) signed for this instance, but made from other original bytes than the class the
     * JVM holds (here: the attacker's own): DIGEST_MISMATCH, nothing changes */
    evil = redefine_cmd(&r, 74, "demo/Greeter", g->loader_id, g->class_hash, &(cmr_bytes_t){v2, v2_len}, digest, v2,
                        v2_len, false);
    assert_int_equal(cmr_peer_command(&peer, r.instance, CMR_MSG_REDEFINE, &evil), 0);
    const cmr_redefine_result_t *res = wait_result(&r, 74);
    assert_int_equal(res->status, CMR_COMMAND_DIGEST_MISMATCH);
    expect_greeting(&r, "hello");
    /* no digest at all is a mismatch too */
    evil.request_id = 77;
    evil.original_digest = (cmr_bytes_t){0};
    assert_int_equal(cmr_peer_command(&peer, r.instance, CMR_MSG_REDEFINE, &evil), 0);
    assert_int_equal(wait_result(&r, 77)->status, CMR_COMMAND_DIGEST_MISMATCH);
    expect_greeting(&r, "hello");

    /* (c) a genuine envelope, applied once, then restored; the same envelope again is a
     * replay: refused, the class keeps the restored bytes */
    cmr_redefine_t good =
        redefine_cmd(&r, 75, "demo/Greeter", g->loader_id, g->class_hash, &g->bytecode, digest, v2, v2_len, false);
    cmr_peer_envelope_t env;
    assert_int_equal(cmr_peer_wrap(&peer, r.instance, CMR_MSG_REDEFINE, &good, &env), 0);
    assert_int_equal(cmr_peer_send_raw(&peer, r.instance, CMR_MSG_SIGNED_COMMAND, &env.env), 0);
    assert_int_equal(wait_result(&r, 75)->status, CMR_COMMAND_APPLIED); /* the positive case */
    expect_greeting(&r, "redefined");
    assert_int_equal(send_redefine(&r, 76, "demo/Greeter", g->loader_id, g->class_hash, &g->bytecode, g->bytecode.data,
                                   g->bytecode.len, true)
                         ->status,
                     CMR_COMMAND_APPLIED);
    expect_greeting(&r, "hello");
    assert_int_equal(cmr_peer_send_raw(&peer, r.instance, CMR_MSG_SIGNED_COMMAND, &env.env), 0);
    const cmr_agent_status_t *st = wait_refused(&r, "replayed", 1);
    expect_greeting(&r, "hello");
    cmr_peer_envelope_free(&env);

    /* the refused ones never reached a handler; the counts are all there */
    assert_int_equal(results_of(&r, 70) + results_of(&r, 71) + results_of(&r, 73), 0);
    assert_int_equal(results_of(&r, 75), 1);
    assert_int_equal(refused_count(st, "unsigned"), 1);
    assert_int_equal(refused_count(st, "unknown_key"), 1);
    assert_int_equal(refused_count(st, "wrong_target"), 1);
    assert_int_equal(refused_count(st, "replayed"), 1);
    assert_true(st->commands_accepted >= 5); /* configuration, 74, 77, 75, 76 */
    agent_exit(&r);
    assert_true(jvm_proc_stderr_has(&r.jvm, "event=agent.command_refused verdict=unsigned"));
    assert_true(jvm_proc_stderr_has(&r.jvm, "event=agent.command_refused verdict=replayed"));
    assert_true(jvm_proc_stderr_has(&r.jvm, "event=agent.trusted_keys keys=1"));
    free(v2);
    agent_done(&r);
}

/* No key pinned: even the CMR's genuine configuration is refused (the agent stays in its
 * minimal mode and says why at start). The agent's name carries a newline and what would
 * be a whole forged log line: it stays inside one escaped value. */
static void test_without_a_pinned_key_no_command_is_accepted(void **state)
{
    (void)state;
    uint8_t raw[4];
    char hex[9], name[64];
    cmr_random_bytes(raw, sizeof raw);
    cmr_hex(raw, sizeof raw, hex);
    snprintf(name, sizeof name, "nokey-%s\nts=FORGED level=error event=agent.forged", hex);
    agent_run_t r;
    agent_launch(&r, name, NULL, false);
    cmr_agent_configuration_t cfg = {.instance_id = r.instance,
                                     .agent_id = r.agent_id,
                                     .environment_id = "test",
                                     .environment_name = "Test environment",
                                     .revision = 1,
                                     .strategy = {.send_interval_ms = 5, .max_batch_events = 2048}};
    assert_int_equal(cmr_peer_command(&peer, r.instance, CMR_MSG_AGENT_CONFIGURATION, &cfg), 0);
    const cmr_agent_status_t *st = wait_refused(&r, "unknown_key", 1);
    assert_int_equal(st->state, CMR_AGENT_MINIMAL);
    assert_int_equal(st->commands_accepted, 0);
    status_match_t full = {r.instance, CMR_AGENT_FULL};
    assert_int_equal(cmr_peer_count(&peer, CMR_MSG_AGENT_STATUS, status_of, &full), 0);
    assert_int_equal(cmr_peer_count(&peer, CMR_MSG_CLASS_LOADED, cmr_peer_of_instance, r.instance), 0);
    expect_greeting(&r, "hello");
    agent_exit(&r);
    assert_true(jvm_proc_stderr_has(&r.jvm, "event=agent.no_trusted_keys"));
    assert_true(jvm_proc_stderr_has(&r.jvm, "trust.keys=PUB"));
    /* one line: the newline is escaped, no line starts with the forged text */
    assert_true(jvm_proc_stderr_has(&r.jvm, "\\nts=FORGED level=error event=agent.forged"));
    assert_false(jvm_proc_stderr_has(&r.jvm, "\nts=FORGED"));
    agent_done(&r);
}

/* A pinned key file that cannot be read is a clear error; the JVM runs on. */
static void test_unreadable_key_file_leaves_the_jvm_running(void **state)
{
    (void)state;
    jvm_proc_t j;
    char options[1024];
    snprintf(options, sizeof options, "name=badkey,trust.keys=%s:/nonexistent/cmr.pub", peer.public_key);
    run_app_unharmed(&j, options);
    assert_true(jvm_proc_stderr_has(&j, "event=agent.trust_keys_failed"));
    assert_true(jvm_proc_stderr_has(&j, "/nonexistent/cmr.pub"));
    assert_false(jvm_proc_stderr_has(&j, "event=agent.trusted_keys"));
    jvm_proc_cleanup(&j);
}

static int setup(void **state)
{
    (void)state;
    cmr_log_set_level(CMR_LOG_WARN);
    if (broker_proc_start(&broker, broker_bin, NULL) != 0)
        return -1;
    return cmr_peer_start(&peer, broker.bootstrap);
}

static int teardown(void **state)
{
    (void)state;
    cmr_peer_stop(&peer);
    broker_proc_stop(&broker);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 7) {
        fprintf(stderr, "usage: %s BROKER JAVA AGENT_SO CLASSPATH GREETER_V2_CLASS WORK_V3_CLASS\n", argv[0]);
        return 2;
    }
    broker_bin = argv[1];
    java_bin = argv[2];
    agent_so = argv[3];
    classpath = argv[4];
    greeter_v2_path = argv[5];
    work_v3_path = argv[6];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unknown_options_leave_the_jvm_running),
        cmocka_unit_test(test_handshake_processes_classes_loaded_before_it),
        cmocka_unit_test(test_no_environment_stops_the_agent),
        cmocka_unit_test(test_redefine_resend_and_failures),
        cmocka_unit_test(test_redefine_waits_for_a_class_being_defined),
        cmocka_unit_test(test_resend_all_sends_every_class_again),
        cmocka_unit_test(test_forged_commands_are_refused),
        cmocka_unit_test(test_cached_classes_are_instrumented_at_load_in_a_restarted_jvm),
        cmocka_unit_test(test_failed_revert_of_cached_class_is_reported),
        cmocka_unit_test(test_classes_granted_ahead_load_instrumented),
        cmocka_unit_test(test_without_a_pinned_key_no_command_is_accepted),
        cmocka_unit_test(test_unreadable_key_file_leaves_the_jvm_running),
        cmocka_unit_test(test_probes_record_call_trees_and_timers),
        cmocka_unit_test(test_messages_wait_for_the_linger_and_go_at_exit),
        cmocka_unit_test(test_invocation_metrics_transactions_and_stalled_calls),
        cmocka_unit_test(test_context_follows_work_to_other_threads),
        cmocka_unit_test(test_context_follows_thread_pool_tasks_through_the_jdk),
        cmocka_unit_test(test_disconnected_mode_loses_no_class),
        cmocka_unit_test(test_exit_during_an_outage_does_not_wait),
        cmocka_unit_test(test_dynamic_attach_sends_classes_loaded_before_it),
        cmocka_unit_test(test_stress_every_event_arrives_or_is_counted),
        cmocka_unit_test(test_loss_is_whole_traces),
    };
    if (getenv("CMR_TEST_FILTER"))
        cmocka_set_test_filter(getenv("CMR_TEST_FILTER"));
    return cmocka_run_group_tests(tests, setup, teardown);
}

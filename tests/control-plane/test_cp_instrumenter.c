/*
 * test_cp_instrumenter.c - cmr-instrumenter (with cmr-config) against the embedded broker,
 * with a scripted agent sending real classes compiled by javac:
 *
 *  - a class whose interface is inherited through a superclass and a super-interface is
 *    instrumented once the types it depends on have arrived (sent in the "wrong" order);
 *    the Redefine parses, passes the structural check, lists its methods with their ids
 *    and sensors, calls the probes of the contract; MethodEntry records reach cmr.methods;
 *  - classes that need nothing, and the agent's own classes, get no command;
 *  - an environment changed while the agent "runs": Redefine with newly instrumented
 *    bytes (bytes cached), BytecodeResend (bytes not cached) answered by a RESEND, and
 *    Redefine with the original bytes (original = true);
 *  - malformed class bytes are rejected without harm; a restarted worker keeps its cache;
 *  - every command arrives in a signed envelope that verifies with the harness's public key
 *    (cp_peer), and every Redefine carries the BLAKE2b-256 digest of the original bytes;
 *  - a forged ClassLoaded (bytes that do not hash to its class_hash) naming the victim's
 *    agent and instance, or the victim's agent and another instance, is refused: no
 *    Redefine comes back for it, the refusal is logged and counted, and the victim's
 *    commands still go to the victim;
 *  - a diagnosis (docs/DIAGNOSIS.md) written to cmr.diagnoses gives a DiagnosisTree on
 *    cmr.diagnosis-trees for the agent: a service method whose interface call reaches the one
 *    loaded implementation (not the other), a static helper, a JDK leaf; the same by method
 *    id only (a threshold's diagnosis); an error for a class the agent never loaded;
 *  - the operator unticks a discovered method (`cmr-config diagnose exclude`): a new
 *    revision whose tree has it EXCLUDED with the operator's note, its class gets its own
 *    bytes back while the other callee keeps its probe; ticked again (`diagnose include`),
 *    its probe is back;
 *  - records of cmr.classes deleted before the worker read them: the gap is logged and
 *    counted, and the agent is asked for all its classes.
 *
 * CMR_TEST_FILTER (a cmocka glob on the test names) runs some tests only.
 *
 * Usage: test_cp_instrumenter CMR-BROKER CMR-CONFIG CMR-INSTRUMENTER
 */
#include <inttypes.h>
#include <signal.h>
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
#include "cmr/classfile.h"
#include "cmr/grant.h"
#include "cmr/reader.h"
#include "cmr/topics.h"
#include "cmr/ids.h"
#include "cmr/kafka.h"
#include "cmr/log.h"
#include "cmr/wire.h"
#include "cmr/clock.h"
#include "cmr/trust.h"
#include "cp_support.h"

static const char *broker_bin, *config_bin, *instr_bin;
static broker_proc_t broker;
static cmr_conf_t *conf;
static cp_proc_t config_worker, instr_worker;
static char tmp[256], instr_log[300], instr_db[300];
static cp_classes_t classes;
static cp_peer_t peer;

static const char *const java_sources[] = {
    "Marker.java",
    "package app; public interface Marker {}\n",
    "Service.java",
    "package app; public interface Service extends Marker { void handle(String s); }\n",
    "Base.java",
    "package app;\npublic abstract class Base implements Service {\n"
    "  public void handle(String s) {\n    if (s == null) throw new IllegalArgumentException();\n    work(s);\n  }\n"
    "  protected void work(String s) {}\n}\n",
    "Impl.java",
    "package app;\npublic class Impl extends Base {\n  public void handle(String s) {\n    super.handle(s);\n  }\n"
    "  public int other(int x) {\n    return x * 2;\n  }\n}\n",
    "Plain.java",
    "package app;\npublic class Plain {\n  public int plain() {\n    return 1;\n  }\n}\n",
    "Later.java",
    "package app;\npublic class Later {\n  public int later() {\n    return 2;\n  }\n}\n",
    "Store.java",
    "package diag; public interface Store { int load(String k); }\n",
    "DbStore.java",
    "package diag; public class DbStore implements Store { public int load(String k) { return k.length(); } }\n",
    "CacheStore.java",
    "package diag; public class CacheStore implements Store { public int load(String k) { return 1; } }\n",
    "Util.java",
    "package diag; public class Util { public static int twice(int x) { return x * 2; } }\n",
    "Shop.java",
    "package diag;\npublic class Shop {\n  private final Store store;\n  public Shop(Store s) { store = s; }\n"
    "  public int checkout(String k) {\n    int n = store.load(k);\n    return n + Util.twice(n);\n  }\n}\n",
    "Ledger.java",
    "package evict;\npublic class Ledger {\n  public static int post(int x) {\n    return Audit.log(x) + 1;\n  }\n}\n",
    "Audit.java",
    "package evict;\npublic class Audit {\n  public static int log(int x) {\n    return x;\n  }\n}\n",
    "Front.java",
    "package untick;\npublic class Front {\n  public int serve(int x) {\n    return Alpha.a(x) + Beta.b(x);\n  }\n}\n",
    "Alpha.java",
    "package untick;\npublic class Alpha {\n  public static int a(int x) {\n    return x + 1;\n  }\n}\n",
    "Beta.java",
    "package untick;\npublic class Beta {\n  public static int b(int x) {\n    return x * 2;\n  }\n}\n",
    "Hot.java",
    "package budget;\npublic class Hot {\n  public int hot(int x) {\n    return x + 1;\n  }\n"
    "  public int cold(int x) {\n    return x - 1;\n  }\n}\n",
    "Probe.java",
    "package cmr.agent;\npublic class Probe {\n  public static void enter(long id) {}\n}\n",
    NULL,
    NULL,
};

static const char *env_v1 = "version: 1\n"
                            "environments:\n"
                            "  - id: app\n"
                            "    sensors:\n"
                            "      - {sensor: timer, class: \"*\", interface: app.Marker, method: handle}\n"
                            "      - {sensor: invocation-sequence, class: app.Plain, method: plain, trivial: true}\n"
                            "      - {sensor: timer, class: \"cmr.agent.*\", method: \"*\"}\n"
                            "mappings:\n"
                            "  - {agent: \"app-*\", address: \"*\", environment: app}\n";

static const char *env_v2 = "version: 1\n"
                            "environments:\n"
                            "  - id: app\n"
                            "    sensors:\n"
                            "      - {sensor: timer, class: app.Impl, method: other, trivial: true}\n"
                            "      - {sensor: invocation-sequence, class: app.Plain, method: plain, trivial: true}\n"
                            "      - {sensor: anchor, class: app.Later, method: later, trivial: true}\n";

static const char *env_v3 = "version: 1\n"
                            "environments:\n"
                            "  - id: app\n"
                            "    sensors:\n"
                            "      - {sensor: invocation-sequence, class: app.Plain, method: plain, trivial: true}\n"
                            "      - {sensor: anchor, class: app.Later, method: later, trivial: true}\n";

static const char *env_v4 = "version: 1\n"
                            "environments:\n"
                            "  - id: app\n"
                            "    sensors:\n"
                            "      - {sensor: timer, class: app.Plain, method: plain, trivial: true}\n"
                            "      - {sensor: anchor, class: app.Later, method: later, trivial: true}\n";

static int tests_ok, tests_run = 12;

/* budget: instrumenter.cache_budget_bytes ("0": only instrumented classes keep their bytes);
 * option: one more KEY=VALUE, or NULL */
static int start_instrumenter_with(const char *budget, const char *option)
{
    int assigned = cp_proc_count_log(&instr_worker, "event=instr.partitions_assigned");
    const char *argv[] = {instr_bin,
                          "--bootstrap",
                          broker.bootstrap,
                          "--db",
                          instr_db,
                          "--cache-budget",
                          budget,
                          "-X",
                          "kafka.session.timeout.ms=6000",
                          "-X",
                          "kafka.heartbeat.interval.ms=500",
                          "-X",
                          cp_signing_key_option(),
                          "--log-level",
                          "debug",
                          option ? "-X" : NULL,
                          option,
                          NULL};
    if (cp_proc_start(&instr_worker, argv, instr_log) != 0)
        return -1;
    for (int64_t deadline = cmr_mono_ms() + 30000; cmr_mono_ms() < deadline; usleep(50000))
        if (cp_proc_count_log(&instr_worker, "event=instr.partitions_assigned") > assigned)
            return 0;
    return -1;
}

static int start_instrumenter_budget(const char *budget)
{
    return start_instrumenter_with(budget, NULL);
}

static int start_instrumenter(void)
{
    return start_instrumenter_budget("0");
}

static int setup(void **state)
{
    (void)state;
    cmr_log_set_level(CMR_LOG_ERROR);
    if (cp_tmpdir(tmp, sizeof tmp) != 0 || cp_keys_make(config_bin, tmp) != 0 ||
        cp_java_compile(java_sources, &classes) != 0 || broker_proc_start(&broker, broker_bin, NULL) != 0)
        return -1;
    cp_fmt(instr_log, sizeof instr_log, "%s/cmr-instrumenter.log", tmp);
    cp_fmt(instr_db, sizeof instr_db, "%s/db", tmp);
    char config_log[300];
    cp_fmt(config_log, sizeof config_log, "%s/cmr-config.log", tmp);
    conf = cmr_conf_new();
    cmr_conf_set(conf, "kafka.bootstrap.servers", broker.bootstrap, "test");
    char *out = NULL;
    if (cp_apply(config_bin, broker.bootstrap, env_v1, &out) != 0) {
        fprintf(stderr, "apply: %s\n", out ? out : "");
        free(out);
        return -1;
    }
    free(out);
    const char *cargv[] = {config_bin, "--bootstrap", broker.bootstrap, "-X", cp_signing_key_option(), "run", NULL};
    if (cp_proc_start(&config_worker, cargv, config_log) != 0 ||
        cp_proc_wait_log(&config_worker, "event=config.started", 30000) != 0 || start_instrumenter() != 0)
        return -1;
    if (cp_peer_open(&peer, conf, "app-1", "host-1", "10.0.0.1") != 0 || cp_peer_register(&peer, 1) != 0)
        return -1;
    cmr_msg_t m;
    if (cp_peer_expect(&peer, CMR_MSG_AGENT_CONFIGURATION, 30000, &m) != 1)
        return -1;
    cp_peer_configure(&peer, &m.u.agent_configuration);
    cmr_msg_free(&m);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (tests_ok != tests_run) {
        cp_proc_dump_log(&config_worker, 30);
        cp_proc_dump_log(&instr_worker, 60);
    }
    cp_peer_close(&peer);
    cp_proc_stop(&instr_worker);
    cp_proc_stop(&config_worker);
    cmr_conf_destroy(conf);
    broker_proc_stop(&broker);
    cp_classes_free(&classes);
    cp_rmrf(tmp);
    return 0;
}

static const cp_class_t *cls(const char *name)
{
    const cp_class_t *c = cp_classes_find(&classes, name);
    if (!c)
        fail_msg("class %s was not compiled", name);
    return c;
}

static void send_class(const char *name, int64_t loader)
{
    const cp_class_t *c = cls(name);
    assert_int_equal(cp_peer_send_class(&peer, name, loader, c->bytes, c->len, CMR_CLASS_LOADED, 0), 0);
    assert_int_equal(cp_peer_flush(&peer), 0);
}

/* Next Redefine; it must be for `name`. */
static void expect_redefine(const char *name, int64_t loader, cmr_msg_t *m)
{
    assert_int_equal(cp_peer_expect(&peer, CMR_MSG_REDEFINE, 30000, m), 1);
    if (strcmp(m->u.redefine.class_name, name) != 0 || m->u.redefine.loader_id != loader)
        fail_msg("expected a Redefine of %s (loader %lld), got %s (loader %lld)", name, (long long)loader,
                 m->u.redefine.class_name, (long long)m->u.redefine.loader_id);
}

/* Does method `method` of the class call cmr/agent/Probe.<probe>(J)V? */
static int calls_probe(const cmr_bytes_t *bytes, const char *method, const char *probe)
{
    cf_class *c = NULL;
    cf_error e;
    assert_int_equal(cf_class_parse(bytes->data, bytes->len, &c, &e), CF_OK);
    int found = 0;
    for (uint16_t i = 0; i < c->method_count && !found; i++) {
        cf_str n = cf_cp_utf8(c, c->methods[i].name);
        if (n.len != strlen(method) || memcmp(n.p, method, n.len) != 0)
            continue;
        cf_callee *callees = NULL;
        size_t nc = 0;
        assert_int_equal(cf_method_callees(c, &c->methods[i], &callees, &nc, &e), CF_OK);
        for (size_t j = 0; j < nc; j++)
            found |= callees[j].owner.len == 15 && memcmp(callees[j].owner.p, "cmr/agent/Probe", 15) == 0 &&
                     callees[j].name.len == strlen(probe) &&
                     memcmp(callees[j].name.p, probe, callees[j].name.len) == 0 && callees[j].desc.len == 4 &&
                     memcmp(callees[j].desc.p, "(J)V", 4) == 0;
        free(callees);
    }
    cf_class_free(c);
    return found;
}

/* The Redefine is bound to the original bytes of the class: original_digest is their
 * BLAKE2b-256. */
static void check_digest(const cmr_redefine_t *r, const cp_class_t *orig)
{
    uint8_t d[CMR_TRUST_DIGEST_BYTES];
    cmr_trust_digest(orig->bytes, orig->len, d);
    assert_int_equal(r->original_digest.len, sizeof d);
    assert_memory_equal(r->original_digest.data, d, sizeof d);
}

static void check_instrumented(const cmr_msg_t *m, const char *class_name, const char *method, const char *desc,
                               cmr_sensor_kind_t sensor, const char *const probes[3])
{
    const cmr_redefine_t *r = &m->u.redefine;
    const cp_class_t *orig = cls(class_name);
    assert_false(r->original);
    assert_int_equal((uint64_t)r->class_hash, cmr_class_hash(orig->bytes, orig->len));
    assert_int_equal((uint64_t)r->agent_id, (uint64_t)peer.agent_id);
    check_digest(r, orig);
    cf_error e;
    assert_int_equal(cf_class_check(r->bytecode.data, r->bytecode.len, &e), CF_OK);
    int listed = 0;
    for (size_t i = 0; i < r->methods.count; i++)
        if (strcmp(r->methods.items[i].name, method) == 0 && strcmp(r->methods.items[i].descriptor, desc) == 0) {
            assert_int_equal((uint64_t)r->methods.items[i].method_id, cmr_method_id(class_name, method, desc));
            assert_int_equal(r->methods.items[i].sensor, sensor);
            listed = 1;
        }
    if (!listed)
        fail_msg("%s.%s%s is not in the Redefine of %s", class_name, method, desc, class_name);
    for (int i = 0; i < 3; i++)
        if (!calls_probe(&r->bytecode, method, probes[i]))
            fail_msg("%s.%s does not call cmr/agent/Probe.%s(J)V", class_name, method, probes[i]);
}

static const char *const timer_probes[3] = {"timerEnter", "timerExit", "timerExitThrow"};
static const char *const seq_probes[3] = {"enter", "exit", "exitThrow"};
static const char *const anchor_probes[3] = {"anchorEnter", "anchorExit", "anchorExitThrow"};

static void test_hierarchy_resolved_as_types_arrive(void **state)
{
    (void)state;
    cmr_msg_t m;
    /* Impl first: its superclass and interfaces are not known yet */
    send_class("app/Impl", 1);
    send_class("cmr/agent/Probe", 0); /* matches a rule, but never instrumented */
    send_class("app/Plain", 1);
    expect_redefine("app/Plain", 1, &m);
    check_instrumented(&m, "app/Plain", "plain", "()I", CMR_SENSOR_INVOCATION_SEQUENCE, seq_probes);
    assert_int_equal(m.u.redefine.methods.count, 1);
    assert_int_equal(m.u.redefine.revision, 1);
    cmr_msg_free(&m);
    /* Base arrives: still waiting for Service */
    send_class("app/Base", 1);
    send_class("app/Plain", 7); /* a sentinel: commands keep their order */
    expect_redefine("app/Plain", 7, &m);
    cmr_msg_free(&m);
    /* Service arrives: Base and Impl are resolved (Marker through Service) */
    send_class("app/Service", 1);
    expect_redefine("app/Base", 1, &m);
    check_instrumented(&m, "app/Base", "handle", "(Ljava/lang/String;)V", CMR_SENSOR_TIMER, timer_probes);
    assert_int_equal(m.u.redefine.methods.count, 1); /* work() does not match */
    cmr_msg_free(&m);
    expect_redefine("app/Impl", 1, &m);
    check_instrumented(&m, "app/Impl", "handle", "(Ljava/lang/String;)V", CMR_SENSOR_TIMER, timer_probes);
    assert_int_equal(m.u.redefine.methods.count, 1);
    cmr_msg_free(&m);
    /* classes that need nothing get no command */
    send_class("app/Marker", 1);
    send_class("app/Later", 1);
    send_class("app/Plain", 8);
    expect_redefine("app/Plain", 8, &m);
    cmr_msg_free(&m);

    /* the method table reached cmr.methods */
    char group[64], err[256];
    cp_unique("methods", group, sizeof group);
    const char *topics[] = {cmr_topic_name(CMR_TOPIC_METHODS)};
    cmr_consumer_t *c = cmr_consumer_new(conf, group, topics, 1, NULL, NULL, err, sizeof err);
    assert_non_null(c);
    uint64_t want[3] = {cmr_method_id("app/Impl", "handle", "(Ljava/lang/String;)V"),
                        cmr_method_id("app/Base", "handle", "(Ljava/lang/String;)V"),
                        cmr_method_id("app/Plain", "plain", "()I")};
    int got[3] = {0, 0, 0}, n = 0;
    int64_t deadline = cmr_mono_ms() + 30000;
    while (n < 3 && cmr_mono_ms() < deadline) {
        cmr_record_t *rec;
        if (cmr_consumer_poll(c, 200, &rec) != 1)
            continue;
        const cmr_method_entry_t *e = &rec->msg.u.method_entry;
        for (int i = 0; i < 3; i++)
            if (rec->msg.type == CMR_MSG_METHOD_ENTRY && (uint64_t)e->method_id == want[i] && !got[i]) {
                got[i] = 1;
                n++;
                assert_non_null(e->source_file);
                assert_true(e->first_line > 0);
                if (i == 0) {
                    assert_string_equal(e->source_file, "Impl.java");
                    assert_int_equal(e->first_line, 4);
                    assert_string_equal(e->class_name, "app/Impl");
                    assert_int_equal(e->access_flags, 0x0001);
                }
            }
        cmr_record_free(rec);
    }
    cmr_consumer_close(c);
    assert_int_equal(n, 3);
    tests_ok++;
}

static void test_environment_change_redefine_resend_original(void **state)
{
    (void)state;
    char *out = NULL;
    assert_int_equal(cp_apply(config_bin, broker.bootstrap, env_v2, &out), 0);
    free(out);
    int have_conf = 0, have_base = 0, have_impl = 0, have_resend = 0;
    int64_t resend_id = 0;
    int64_t deadline = cmr_mono_ms() + 40000;
    while (!(have_conf && have_base && have_impl && have_resend) && cmr_mono_ms() < deadline) {
        cmr_msg_t m;
        if (cp_peer_next(&peer, 1000, &m) != 1)
            continue;
        if (m.type == CMR_MSG_AGENT_CONFIGURATION) {
            assert_int_equal(m.u.agent_configuration.revision, 2);
            have_conf++;
        } else if (m.type == CMR_MSG_REDEFINE && !strcmp(m.u.redefine.class_name, "app/Base")) {
            /* instrumentation gone: the original bytes */
            const cp_class_t *b = cls("app/Base");
            assert_true(m.u.redefine.original);
            assert_int_equal(m.u.redefine.bytecode.len, b->len);
            assert_memory_equal(m.u.redefine.bytecode.data, b->bytes, b->len);
            check_digest(&m.u.redefine, b);
            assert_int_equal(m.u.redefine.methods.count, 0);
            have_base++;
        } else if (m.type == CMR_MSG_REDEFINE && !strcmp(m.u.redefine.class_name, "app/Impl")) {
            /* cached bytes, newly instrumented: other() now, handle() no more */
            check_instrumented(&m, "app/Impl", "other", "(I)I", CMR_SENSOR_TIMER, timer_probes);
            assert_int_equal(m.u.redefine.methods.count, 1);
            assert_false(calls_probe(&m.u.redefine.bytecode, "handle", "timerEnter"));
            assert_int_equal(m.u.redefine.revision, 2);
            have_impl++;
        } else if (m.type == CMR_MSG_BYTECODE_RESEND) {
            /* Later's bytes were not kept (budget 0): ask the agent */
            const cp_class_t *l = cls("app/Later");
            assert_string_equal(m.u.bytecode_resend.class_name, "app/Later");
            assert_int_equal(m.u.bytecode_resend.loader_id, 1);
            assert_int_equal((uint64_t)m.u.bytecode_resend.class_hash, cmr_class_hash(l->bytes, l->len));
            resend_id = m.u.bytecode_resend.request_id;
            have_resend++;
        } else {
            fail_msg("unexpected %s (%s)", cmr_msg_type_name(m.type),
                     m.type == CMR_MSG_REDEFINE ? m.u.redefine.class_name : "");
        }
        cmr_msg_free(&m);
    }
    assert_int_equal(have_conf, 1);
    assert_int_equal(have_base, 1);
    assert_int_equal(have_impl, 1);
    assert_int_equal(have_resend, 1);
    peer.revision = 2;
    /* the agent answers the resend: the class goes through the normal path */
    const cp_class_t *l = cls("app/Later");
    assert_int_equal(cp_peer_send_class(&peer, "app/Later", 1, l->bytes, l->len, CMR_CLASS_RESEND, resend_id), 0);
    assert_int_equal(cp_peer_flush(&peer), 0);
    cmr_msg_t m;
    expect_redefine("app/Later", 1, &m);
    check_instrumented(&m, "app/Later", "later", "()I", CMR_SENSOR_ANCHOR, anchor_probes);
    cmr_msg_free(&m);
    /* nothing else was pending (Plain unchanged, Service and Marker need nothing) */
    assert_int_equal(cp_peer_next(&peer, 1500, &m), 0);
    tests_ok++;
}

static void test_bad_class_and_restart_keeps_cache(void **state)
{
    (void)state;
    static const uint8_t junk[] = {0xca, 0xfe, 0xba, 0xbe, 0, 0, 0, 61, 0, 9, 1, 2, 3};
    assert_int_equal(cp_peer_send_class(&peer, "bad/Junk", 1, junk, sizeof junk, CMR_CLASS_LOADED, 0), 0);
    send_class("app/Plain", 9);
    cmr_msg_t m;
    expect_redefine("app/Plain", 9, &m);
    cmr_msg_free(&m);
    assert_int_equal(cp_proc_wait_log(&instr_worker, "event=instr.class_rejected class=bad/Junk", 5000), 0);

    /* restart: the cache (RocksDB) survives, so removing Impl's sensor restores its
     * original bytes although the new process never received Impl */
    assert_int_equal(cp_proc_stop(&instr_worker), 0);
    assert_int_equal(start_instrumenter(), 0);
    char *out = NULL;
    assert_int_equal(cp_apply(config_bin, broker.bootstrap, env_v3, &out), 0);
    free(out);
    int64_t deadline = cmr_mono_ms() + 30000;
    int restored = 0;
    while (!restored && cmr_mono_ms() < deadline) {
        if (cp_peer_next(&peer, 1000, &m) != 1)
            continue;
        if (m.type == CMR_MSG_REDEFINE) {
            assert_string_equal(m.u.redefine.class_name, "app/Impl");
            assert_true(m.u.redefine.original);
            const cp_class_t *i = cls("app/Impl");
            assert_memory_equal(m.u.redefine.bytecode.data, i->bytes, i->len);
            check_digest(&m.u.redefine, i);
            restored = 1;
        } else {
            assert_int_equal(m.type, CMR_MSG_AGENT_CONFIGURATION);
        }
        cmr_msg_free(&m);
    }
    assert_true(restored);
    tests_ok++;
}

/* Sends a ClassLoaded as whoever can write cmr.classes (the attacker's producer). */
static void send_forged(cp_peer_t *attacker, const char *instance, const char *class_name, int64_t loader,
                        const cp_class_t *bytes, uint64_t claimed_hash)
{
    char err[256];
    cmr_class_loaded_t c = {
        .agent_id = peer.agent_id, /* the victim's */
        .instance_id = (char *)instance,
        .environment_id = peer.env_id,
        .revision = peer.revision,
        .class_name = (char *)class_name,
        .loader_id = loader,
        .loader_name = "app",
        .class_hash = (int64_t)claimed_hash,
        .cause = CMR_CLASS_LOADED,
        .bytecode = {bytes->bytes, bytes->len},
    };
    assert_int_equal(cmr_producer_send(attacker->producer, CMR_MSG_CLASS_LOADED, &c, NULL, NULL, err, sizeof err),
                     CMR_SEND_OK);
}

static void test_forged_class_loaded_is_refused(void **state)
{
    (void)state;
    cp_peer_t attacker;
    assert_int_equal(cp_peer_open(&attacker, conf, "attacker", "host-x", "10.6.6.6"), 0);
    const cp_class_t *plain = cls("app/Plain"), *later = cls("app/Later");
    uint64_t plain_hash = cmr_class_hash(plain->bytes, plain->len);
    /* other bytes (a class a rule instruments) under the victim's class name and hash */
    send_forged(&attacker, peer.instance_id, "app/Plain", 11, later, plain_hash);
    /* the victim's agent id, the attacker's instance (where commands would go from now on) */
    send_forged(&attacker, attacker.instance_id, "app/Plain", 12, plain, plain_hash ^ 1);
    assert_int_equal(cp_peer_flush(&attacker), 0);
    send_class("app/Plain", 10); /* a sentinel: commands keep their order */
    cmr_msg_t m;
    expect_redefine("app/Plain", 10, &m); /* nothing for loader 11 before it */
    check_instrumented(&m, "app/Plain", "plain", "()I", CMR_SENSOR_INVOCATION_SEQUENCE, seq_probes);
    cmr_msg_free(&m);
    /* both refused, logged and counted (the worker was restarted by the previous test) */
    assert_int_equal(cp_proc_wait_log(&instr_worker, "refused_total=2", 10000), 0);
    assert_int_equal(cp_proc_count_log(&instr_worker, "event=instr.hash_mismatch class=\"app/Plain\""), 2);
    assert_int_equal(cp_proc_count_log(&instr_worker, "action=refused"), 2);
    assert_int_equal(cp_peer_next(&attacker, 1000, &m), 0);

    /* the victim's commands still go to the victim: a change of Plain's sensor reaches it
     * for every loader it sent Plain with (1, 7, 8, 9, 10) and none the attacker named */
    char *out = NULL;
    assert_int_equal(cp_apply(config_bin, broker.bootstrap, env_v4, &out), 0);
    free(out);
    int redefined = 0, configured = 0;
    for (int64_t deadline = cmr_mono_ms() + 30000; (redefined < 5 || !configured) && cmr_mono_ms() < deadline;) {
        if (cp_peer_next(&peer, 1000, &m) != 1)
            continue;
        if (m.type == CMR_MSG_REDEFINE) {
            assert_string_equal(m.u.redefine.class_name, "app/Plain");
            assert_true(m.u.redefine.loader_id != 11 && m.u.redefine.loader_id != 12);
            check_instrumented(&m, "app/Plain", "plain", "()I", CMR_SENSOR_TIMER, timer_probes);
            redefined++;
        } else {
            assert_int_equal(m.type, CMR_MSG_AGENT_CONFIGURATION);
            configured++;
        }
        cmr_msg_free(&m);
    }
    assert_int_equal(redefined, 5);
    assert_int_equal(configured, 1);
    assert_int_equal(cp_peer_next(&peer, 1500, &m), 0);
    assert_int_equal(cp_peer_next(&attacker, 500, &m), 0);

    /* every command the victim got was signed for it with the harness's key */
    uint64_t counts[CMR_TRUST_VERDICT__COUNT];
    cmr_verifier_counts(peer.verifier, counts);
    assert_true(counts[CMR_TRUST_OK] > 0);
    for (int v = 1; v < CMR_TRUST_VERDICT__COUNT; v++)
        assert_int_equal(counts[v], 0);
    assert_int_equal(peer.refused, 0);
    cp_peer_close(&attacker);
    tests_ok++;
}

/* --- diagnoses ------------------------------------------------------------------------- */

static const cmr_diag_condition_t *write_conditions; /* the next write's conditions */
static size_t write_nconditions;

static void write_diagnosis_state(const char *id, const char *class_name, const char *method, const char *desc,
                                  int64_t method_id, int64_t revision, cmr_diag_state_t state)
{
    cmr_diagnosis_t d = {0};
    d.conditions.items = (cmr_diag_condition_t *)write_conditions;
    d.conditions.count = write_nconditions;
    d.id = (char *)id;
    d.revision = revision;
    d.environment_id = peer.env_id;
    d.method_id = method_id;
    d.class_name = (char *)class_name;
    d.method_name = (char *)method;
    d.descriptor = (char *)desc;
    d.depth = 3;
    d.ttl_ms = 600000;
    d.state = state;
    d.end_reason = state == CMR_DIAG_ENDED ? CMR_DIAG_END_STOPPED : CMR_DIAG_END_NONE;
    d.ended_ms = state == CMR_DIAG_ENDED ? cmr_wall_ms() : 0;
    d.rule = d.trace_id = "";
    d.author = "test";
    d.started_ms = d.time_ms = cmr_wall_ms();
    char err[256];
    cmr_producer_t *p = cmr_producer_new(conf, "test-diagnose", NULL, NULL, err, sizeof err);
    assert_non_null(p);
    assert_int_equal(cmr_producer_send(p, CMR_MSG_DIAGNOSIS, &d, NULL, NULL, err, sizeof err), CMR_SEND_OK);
    assert_int_equal(cmr_producer_flush(p, 30000), 0);
    cmr_producer_destroy(p, 5000);
}

static void write_diagnosis(const char *id, const char *class_name, const char *method, const char *desc,
                            int64_t method_id)
{
    write_diagnosis_state(id, class_name, method, desc, method_id, 1, CMR_DIAG_ACTIVE);
}

/* The next Redefine of class_name the peer's agent gets (within 30 s); other commands are
 * skipped. 1 with *out filled (cmr_msg_free), 0 none. */
static int next_redefine_of(const char *class_name, cmr_msg_t *out)
{
    for (int64_t deadline = cmr_mono_ms() + 30000; cmr_mono_ms() < deadline;) {
        if (cp_peer_next(&peer, 500, out) != 1)
            continue;
        if (out->type == CMR_MSG_REDEFINE && strcmp(out->u.redefine.class_name, class_name) == 0)
            return 1;
        cmr_msg_free(out);
    }
    return 0;
}

static const cmr_instrumented_method_t *instrumented(const cmr_redefine_t *r, const char *name)
{
    for (size_t i = 0; i < r->methods.count; i++)
        if (strcmp(r->methods.items[i].name, name) == 0)
            return &r->methods.items[i];
    return NULL;
}

/* The tree of revision `revision` of diagnosis id for the peer's agent, from
 * cmr.diagnosis-trees (within 30 s); trees of other revisions are skipped. */
static void expect_tree_revision(cmr_reader_t *r, const char *id, int64_t revision, cmr_msg_t *out)
{
    for (int64_t deadline = cmr_mono_ms() + 30000; cmr_mono_ms() < deadline;) {
        cmr_reader_rec_t rec;
        if (cmr_reader_poll(r, 200, &rec) != 1)
            continue;
        char err[256];
        assert_int_equal(cmr_msg_decode(rec.payload, rec.len, out, err, sizeof err), CMR_WIRE_OK);
        assert_int_equal(out->type, CMR_MSG_DIAGNOSIS_TREE);
        const cmr_diagnosis_tree_t *t = &out->u.diagnosis_tree;
        char key[64];
        cp_fmt(key, sizeof key, "%s/%016" PRIx64, id, (uint64_t)peer.agent_id);
        if (strcmp(t->diagnosis_id, id) == 0 && t->agent_id == peer.agent_id && t->revision == revision) {
            assert_string_equal(rec.key, key);
            assert_string_equal(t->environment_id, peer.env_id);
            return;
        }
        cmr_msg_free(out);
    }
    cp_proc_dump_log(&instr_worker, 40);
    fail_msg("no DiagnosisTree for %s", id);
}

/* The tree of diagnosis id's first revision. */
static void expect_tree(cmr_reader_t *r, const char *id, cmr_msg_t *out)
{
    expect_tree_revision(r, id, 1, out);
}

static const cmr_diag_node_t *node(const cmr_diagnosis_tree_t *t, const char *class_name, const char *method)
{
    for (size_t i = 0; i < t->nodes.count; i++)
        if (strcmp(t->nodes.items[i].class_name, class_name) == 0 && strcmp(t->nodes.items[i].method_name, method) == 0)
            return &t->nodes.items[i];
    return NULL;
}

static void check_shop_tree(const cmr_diagnosis_tree_t *t)
{
    assert_string_equal(t->error, "");
    assert_false(t->truncated);
    assert_true(t->classes_read >= 3);
    assert_true(t->nodes.count >= 4);
    const cmr_diag_node_t *root = &t->nodes.items[0];
    assert_string_equal(root->class_name, "diag/Shop");
    assert_string_equal(root->method_name, "checkout");
    assert_string_equal(root->descriptor, "(Ljava/lang/String;)I");
    assert_int_equal(root->parent, -1);
    assert_int_equal(root->depth, 0);
    assert_int_equal(root->via, CMR_DIAG_VIA_ROOT);
    assert_int_equal(root->status, CMR_DIAG_NODE_FOUND);
    assert_int_equal(root->method_id, (int64_t)cmr_method_id("diag/Shop", "checkout", "(Ljava/lang/String;)I"));
    assert_int_equal(root->probe, CMR_DIAG_PROBE_ANCHOR);
    /* the interface call: the loaded implementation only */
    const cmr_diag_node_t *db = node(t, "diag/DbStore", "load");
    assert_non_null(db);
    assert_int_equal(db->parent, 0);
    assert_int_equal(db->depth, 1);
    assert_int_equal(db->via, CMR_DIAG_VIA_INTERFACE);
    assert_int_equal(db->status, CMR_DIAG_NODE_FOUND);
    assert_int_equal(db->call_sites, 1);
    assert_int_equal(db->probe, CMR_DIAG_PROBE_CONDITIONAL); /* the environment does not record diag.* */
    assert_null(node(t, "diag/CacheStore", "load"));
    const cmr_diag_node_t *twice = node(t, "diag/Util", "twice");
    assert_non_null(twice);
    assert_int_equal(twice->parent, 0);
    assert_int_equal(twice->via, CMR_DIAG_VIA_STATIC);
    assert_int_equal(twice->status, CMR_DIAG_NODE_FOUND);
    /* String.length() from DbStore.load: a JDK leaf at depth 2 */
    const cmr_diag_node_t *len = node(t, "java/lang/String", "length");
    assert_non_null(len);
    assert_int_equal(len->depth, 2);
    assert_int_equal(&t->nodes.items[len->parent], db);
    assert_int_equal(len->via, CMR_DIAG_VIA_VIRTUAL);
    assert_int_equal(len->status, CMR_DIAG_NODE_JDK);
    assert_int_equal(len->probe, CMR_DIAG_PROBE_NONE);
}

static void test_diagnosis_tree(void **state)
{
    (void)state;
    char err[256];
    /* discovery reads the bytes of classes that need no instrumentation: keep them */
    assert_int_equal(cp_proc_stop(&instr_worker), 0);
    assert_int_equal(start_instrumenter_budget("16777216"), 0);
    /* the agent loaded the service, the interface, one implementation and the helper */
    const char *loaded[] = {"diag/Store", "diag/DbStore", "diag/Util", "diag/Shop"};
    int units = cp_proc_count_log(&instr_worker, "event=instr.unit ");
    for (size_t i = 0; i < 4; i++) {
        const cp_class_t *c = cls(loaded[i]);
        assert_int_equal(cp_peer_send_class(&peer, loaded[i], 7, c->bytes, c->len, CMR_CLASS_LOADED, 0), 0);
    }
    assert_int_equal(cp_peer_flush(&peer), 0);
    /* the classes are in the cache once the units holding them are committed */
    for (int64_t deadline = cmr_mono_ms() + 30000;
         cp_proc_count_log(&instr_worker, "event=instr.unit ") == units && cmr_mono_ms() < deadline;)
        usleep(50000);
    usleep(500000);
    cmr_reader_t *r = cmr_reader_new(conf, cmr_topic_name(CMR_TOPIC_DIAGNOSIS_TREES), 0, err, sizeof err);
    assert_non_null(r);

    write_diagnosis("d1a9000000000001", "diag/Shop", "checkout", "(Ljava/lang/String;)I", 0);
    cmr_msg_t m;
    expect_tree(r, "d1a9000000000001", &m);
    check_shop_tree(&m.u.diagnosis_tree);
    cmr_msg_free(&m);
    /* the overlay: the selected method's class gets the anchor, the callees' classes the
     * conditional probes, each command with the diagnosis' scope and the bytes to restore
     * (the original ones: the environment records nothing of diag.*) */
    assert_int_equal(next_redefine_of("diag/Shop", &m), 1);
    {
        const cmr_redefine_t *rd = &m.u.redefine;
        assert_non_null(rd->diagnosis);
        assert_int_equal(rd->diagnosis->id, (int64_t)0xd1a9000000000001);
        assert_true(rd->diagnosis->end_ms > cmr_wall_ms());
        assert_true(rd->diagnosis->restore_original);
        const cp_class_t *shop = cls("diag/Shop");
        assert_int_equal(rd->diagnosis->restore_bytecode.len, shop->len);
        assert_memory_equal(rd->diagnosis->restore_bytecode.data, shop->bytes, shop->len);
        const cmr_instrumented_method_t *a = instrumented(rd, "checkout");
        assert_non_null(a);
        assert_int_equal(a->sensor, CMR_SENSOR_ANCHOR);
    }
    cmr_msg_free(&m);
    assert_int_equal(next_redefine_of("diag/Util", &m), 1);
    assert_non_null(m.u.redefine.diagnosis);
    assert_non_null(instrumented(&m.u.redefine, "twice"));
    assert_int_equal(instrumented(&m.u.redefine, "twice")->sensor, CMR_SENSOR_CONDITIONAL);
    cmr_msg_free(&m);

    /* a threshold's diagnosis: the method id only */
    write_diagnosis("d1a9000000000002", "", "", "",
                    (int64_t)cmr_method_id("diag/Shop", "checkout", "(Ljava/lang/String;)I"));
    expect_tree(r, "d1a9000000000002", &m);
    check_shop_tree(&m.u.diagnosis_tree);
    cmr_msg_free(&m);

    /* cmr-config diagnose show prints the tree per agent, indented */
    {
        const char *argv[] = {config_bin, "--bootstrap", broker.bootstrap,   "--log-level", "warn",
                              "diagnose", "show",        "d1a9000000000001", NULL};
        char *out = NULL;
        assert_int_equal(cp_run(argv, &out), 0);
        char want[128];
        cp_fmt(want, sizeof want, "agent %016" PRIx64 " (revision 1", (uint64_t)peer.agent_id);
        if (!strstr(out, want) ||
            !strstr(out, "\n    diag/Shop.checkout(Ljava/lang/String;)I  root  found  [anchor]\n") ||
            !strstr(out, "\n      diag/DbStore.load(Ljava/lang/String;)I  interface  found  [conditional probes]\n") ||
            !strstr(out, "\n        java/lang/String.length()I  virtual  jdk\n") ||
            !strstr(out, "\n      diag/Util.twice(I)I  static  found  [conditional probes]\n"))
            fail_msg("diagnose show:\n%s", out ? out : "");
        free(out);
    }

    /* the first diagnosis ends: its classes get their bytes back (the original ones, no
     * scope); the second one (same method) now holds diag/Shop, with its own scope */
    write_diagnosis_state("d1a9000000000001", "diag/Shop", "checkout", "(Ljava/lang/String;)I", 0, 2, CMR_DIAG_ENDED);
    assert_int_equal(next_redefine_of("diag/Util", &m), 1);
    assert_non_null(m.u.redefine.diagnosis);
    assert_int_equal(m.u.redefine.diagnosis->id, (int64_t)0xd1a9000000000002);
    cmr_msg_free(&m);
    /* and when that one ends too, the original bytes, without a scope */
    write_diagnosis_state("d1a9000000000002", "", "", "",
                          (int64_t)cmr_method_id("diag/Shop", "checkout", "(Ljava/lang/String;)I"), 2, CMR_DIAG_ENDED);
    assert_int_equal(next_redefine_of("diag/Util", &m), 1);
    assert_null(m.u.redefine.diagnosis);
    assert_true(m.u.redefine.original);
    assert_memory_equal(m.u.redefine.bytecode.data, cls("diag/Util")->bytes, cls("diag/Util")->len);
    cmr_msg_free(&m);

    /* an arg:0 condition: the anchor's probe gets the String parameter (anchorEnterArg) and
     * the scope carries the condition for the agent to judge */
    static const cmr_diag_condition_t arg0[] = {{CMR_DIAG_ARGUMENT, "0", "42*"}};
    write_conditions = arg0;
    write_nconditions = 1;
    write_diagnosis("d1a9000000000004", "diag/Shop", "checkout", "(Ljava/lang/String;)I", 0);
    write_conditions = NULL;
    write_nconditions = 0;
    assert_int_equal(next_redefine_of("diag/Shop", &m), 1);
    assert_non_null(m.u.redefine.diagnosis);
    assert_int_equal(m.u.redefine.diagnosis->id, (int64_t)0xd1a9000000000004);
    assert_int_equal(m.u.redefine.diagnosis->conditions.count, 1);
    assert_string_equal(m.u.redefine.diagnosis->conditions.items[0].pattern, "42*");
    assert_non_null(memmem(m.u.redefine.bytecode.data, m.u.redefine.bytecode.len, "anchorEnterArg", 14));
    cmr_msg_free(&m);

    /* a class the agent never loaded */
    write_diagnosis("d1a9000000000003", "diag/CacheStore", "load", "", 0);
    expect_tree(r, "d1a9000000000003", &m);
    assert_string_equal(m.u.diagnosis_tree.error, "the selected method's class was never loaded by this agent");
    assert_int_equal(m.u.diagnosis_tree.nodes.count, 0);
    cmr_msg_free(&m);
    cmr_reader_free(r);
    tests_ok++;
}

/* Discovery over classes whose bytes the cache dropped (budget 0: only instrumented classes
 * keep theirs): the instrumenter asks the agent for them (BytecodeResend), and once they are
 * back (a RESEND ClassLoaded), the tree is made again, whole. */
static void test_diagnosis_resends_evicted(void **state)
{
    (void)state;
    char err[256];
    assert_int_equal(cp_proc_stop(&instr_worker), 0);
    /* replay of the diagnoses' history: d1a9...04 (arg:0, probes in diag/Shop) ends while
     * no instrumenter runs; the one that starts reads cmr.diagnoses from the beginning and
     * gives diag/Shop its bytes back (the original ones, without a scope) */
    write_diagnosis_state("d1a9000000000004", "diag/Shop", "checkout", "(Ljava/lang/String;)I", 0, 2, CMR_DIAG_ENDED);
    write_diagnosis_state("d1a9000000000003", "diag/CacheStore", "load", "", 0, 2, CMR_DIAG_ENDED);
    assert_int_equal(start_instrumenter(), 0);
    cmr_msg_t back;
    if (next_redefine_of("diag/Shop", &back) != 1) {
        cp_proc_dump_log(&instr_worker, 60);
        fail_msg("no Redefine of diag/Shop after the restart");
    }
    assert_null(back.u.redefine.diagnosis);
    assert_true(back.u.redefine.original);
    cmr_msg_free(&back);
    const char *loaded[] = {"evict/Audit", "evict/Ledger"};
    int units = cp_proc_count_log(&instr_worker, "event=instr.unit ");
    for (size_t i = 0; i < 2; i++) {
        const cp_class_t *c = cls(loaded[i]);
        assert_int_equal(cp_peer_send_class(&peer, loaded[i], 7, c->bytes, c->len, CMR_CLASS_LOADED, 0), 0);
    }
    assert_int_equal(cp_peer_flush(&peer), 0);
    for (int64_t deadline = cmr_mono_ms() + 30000;
         cp_proc_count_log(&instr_worker, "event=instr.unit ") == units && cmr_mono_ms() < deadline;)
        usleep(50000);
    usleep(500000);
    cmr_reader_t *r = cmr_reader_new(conf, cmr_topic_name(CMR_TOPIC_DIAGNOSIS_TREES), 0, err, sizeof err);
    assert_non_null(r);
    write_diagnosis("e71c000000000001", "evict/Ledger", "post", "(I)I", 0);
    /* every class the tree needs and the cache dropped is asked for, then answered */
    int answered = 0;
    for (int64_t deadline = cmr_mono_ms() + 40000; answered < 2 && cmr_mono_ms() < deadline;) {
        cmr_msg_t m;
        if (cp_peer_next(&peer, 500, &m) != 1)
            continue;
        if (m.type == CMR_MSG_BYTECODE_RESEND && strncmp(m.u.bytecode_resend.class_name, "evict/", 6) == 0) {
            const cp_class_t *c = cls(m.u.bytecode_resend.class_name);
            assert_int_equal(cp_peer_send_class(&peer, m.u.bytecode_resend.class_name, 7, c->bytes, c->len,
                                                CMR_CLASS_RESEND, m.u.bytecode_resend.request_id),
                             0);
            assert_int_equal(cp_peer_flush(&peer), 0);
            answered++;
        }
        cmr_msg_free(&m);
    }
    if (answered < 2)
        cp_proc_dump_log(&instr_worker, 40);
    assert_int_equal(answered, 2);
    /* the last tree of the diagnosis is whole: Audit.log found under Ledger.post */
    bool whole = false;
    for (int64_t deadline = cmr_mono_ms() + 30000; !whole && cmr_mono_ms() < deadline;) {
        cmr_reader_rec_t rec;
        if (cmr_reader_poll(r, 200, &rec) != 1)
            continue;
        cmr_msg_t m;
        assert_int_equal(cmr_msg_decode(rec.payload, rec.len, &m, err, sizeof err), CMR_WIRE_OK);
        const cmr_diagnosis_tree_t *t = &m.u.diagnosis_tree;
        if (strcmp(t->diagnosis_id, "e71c000000000001") == 0 && t->nodes.count == 2 &&
            t->nodes.items[0].status == CMR_DIAG_NODE_FOUND && t->nodes.items[1].status == CMR_DIAG_NODE_FOUND &&
            strcmp(t->nodes.items[1].class_name, "evict/Audit") == 0)
            whole = true;
        cmr_msg_free(&m);
    }
    if (!whole)
        cp_proc_dump_log(&instr_worker, 40);
    assert_true(whole);
    cmr_reader_free(r);
    write_diagnosis_state("e71c000000000001", "evict/Ledger", "post", "(I)I", 0, 2, CMR_DIAG_ENDED);
    tests_ok++;
}

/* cmr-config diagnose ARGS... for the test's broker (NULL-terminated): exit status, output
 * in *out. */
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

/* The next Redefine of class_name with (want_id != 0) or without (0) the scope of diagnosis
 * want_id; other commands are skipped (within 30 s). 1 with *out filled, 0 none. */
static int next_redefine_scoped(const char *class_name, int64_t want_id, cmr_msg_t *out)
{
    for (int64_t deadline = cmr_mono_ms() + 30000; cmr_mono_ms() < deadline;) {
        if (cp_peer_next(&peer, 500, out) != 1)
            continue;
        if (out->type == CMR_MSG_REDEFINE && strcmp(out->u.redefine.class_name, class_name) == 0 &&
            (want_id ? out->u.redefine.diagnosis && out->u.redefine.diagnosis->id == want_id
                     : !out->u.redefine.diagnosis))
            return 1;
        cmr_msg_free(out);
    }
    return 0;
}

/* The operator's checkboxes: a diagnosis probing A (untick/Alpha.a) and B (untick/Beta.b)
 * under the anchor untick/Front.serve; `cmr-config diagnose exclude` writes a revision
 * without B: B's node is EXCLUDED with the operator's note, B's class gets its own bytes
 * back (no probes, no scope) while A keeps its conditional probe; `diagnose include`
 * brings B's probe back. */
static void test_diagnosis_exclude_method(void **state)
{
    (void)state;
    char err[256], *out;
    const char *id = "ab1e000000000001";
    const int64_t idn = (int64_t)0xab1e000000000001;
    /* discovery reads the bytes of classes that need no instrumentation: keep them */
    assert_int_equal(cp_proc_stop(&instr_worker), 0);
    assert_int_equal(start_instrumenter_budget("16777216"), 0);
    const char *loaded[] = {"untick/Alpha", "untick/Beta", "untick/Front"};
    int units = cp_proc_count_log(&instr_worker, "event=instr.unit ");
    for (size_t i = 0; i < 3; i++) {
        const cp_class_t *c = cls(loaded[i]);
        assert_int_equal(cp_peer_send_class(&peer, loaded[i], 7, c->bytes, c->len, CMR_CLASS_LOADED, 0), 0);
    }
    assert_int_equal(cp_peer_flush(&peer), 0);
    for (int64_t deadline = cmr_mono_ms() + 30000;
         cp_proc_count_log(&instr_worker, "event=instr.unit ") == units && cmr_mono_ms() < deadline;)
        usleep(50000);
    usleep(500000);
    cmr_reader_t *r = cmr_reader_new(conf, cmr_topic_name(CMR_TOPIC_DIAGNOSIS_TREES), 0, err, sizeof err);
    assert_non_null(r);

    write_diagnosis(id, "untick/Front", "serve", "(I)I", 0);
    cmr_msg_t m;
    expect_tree(r, id, &m);
    {
        const cmr_diagnosis_tree_t *t = &m.u.diagnosis_tree;
        assert_string_equal(t->error, "");
        assert_int_equal(node(t, "untick/Alpha", "a")->probe, CMR_DIAG_PROBE_CONDITIONAL);
        assert_int_equal(node(t, "untick/Beta", "b")->probe, CMR_DIAG_PROBE_CONDITIONAL);
    }
    cmr_msg_free(&m);
    if (next_redefine_scoped("untick/Beta", idn, &m) != 1) {
        cp_proc_dump_log(&instr_worker, 40);
        fail_msg("no Redefine of untick/Beta with the diagnosis' probes");
    }
    assert_int_equal(instrumented(&m.u.redefine, "b")->sensor, CMR_SENSOR_CONDITIONAL);
    cmr_msg_free(&m);

    /* untick B: revision 2 */
    assert_int_equal(diagnose(&out, "exclude", id, "untick.Beta.b"), 0);
    assert_non_null(strstr(out, "revision 2"));
    free(out);
    expect_tree_revision(r, id, 2, &m);
    {
        const cmr_diagnosis_tree_t *t = &m.u.diagnosis_tree;
        const cmr_diag_node_t *b = node(t, "untick/Beta", "b"), *a = node(t, "untick/Alpha", "a");
        assert_non_null(b);
        assert_int_equal(b->status, CMR_DIAG_NODE_EXCLUDED);
        assert_int_equal(b->probe, CMR_DIAG_PROBE_NONE);
        assert_string_equal(b->note, "excluded by the operator");
        assert_int_equal(a->status, CMR_DIAG_NODE_FOUND);
        assert_int_equal(a->probe, CMR_DIAG_PROBE_CONDITIONAL);
    }
    cmr_msg_free(&m);
    /* B's class: its own bytes again, without the diagnosis' scope */
    if (next_redefine_scoped("untick/Beta", 0, &m) != 1) {
        cp_proc_dump_log(&instr_worker, 40);
        fail_msg("untick/Beta did not get its bytes back");
    }
    assert_true(m.u.redefine.original);
    assert_int_equal(m.u.redefine.bytecode.len, cls("untick/Beta")->len);
    assert_memory_equal(m.u.redefine.bytecode.data, cls("untick/Beta")->bytes, cls("untick/Beta")->len);
    cmr_msg_free(&m);
    /* diagnose show says so */
    assert_int_equal(diagnose(&out, "show", id), 0);
    if (!strstr(out, "  excluded method: untick/Beta.b\n") ||
        !strstr(out, "      untick/Beta.b(I)I  static  excluded  [excluded by the operator]\n") ||
        !strstr(out, "      untick/Alpha.a(I)I  static  found  [conditional probes]\n"))
        fail_msg("diagnose show:\n%s", out ? out : "");
    free(out);
    /* the same again: no revision */
    assert_int_equal(diagnose(&out, "exclude", id, "untick.Beta.b"), 0);
    assert_non_null(strstr(out, "nothing changes"));
    free(out);

    /* tick B again: revision 3, its probe is back */
    assert_int_equal(diagnose(&out, "include", id, "untick.Beta.b"), 0);
    assert_non_null(strstr(out, "revision 3"));
    free(out);
    expect_tree_revision(r, id, 3, &m);
    {
        const cmr_diag_node_t *b = node(&m.u.diagnosis_tree, "untick/Beta", "b");
        assert_int_equal(b->status, CMR_DIAG_NODE_FOUND);
        assert_int_equal(b->probe, CMR_DIAG_PROBE_CONDITIONAL);
        assert_string_equal(b->note, "");
    }
    cmr_msg_free(&m);
    if (next_redefine_scoped("untick/Beta", idn, &m) != 1) {
        cp_proc_dump_log(&instr_worker, 40);
        fail_msg("untick/Beta did not get its probe back");
    }
    assert_int_equal(m.u.redefine.diagnosis->revision, 3);
    assert_int_equal(instrumented(&m.u.redefine, "b")->sensor, CMR_SENSOR_CONDITIONAL);
    cmr_msg_free(&m);

    /* stopped: every class gets its bytes back */
    assert_int_equal(diagnose(&out, "stop", id), 0);
    free(out);
    assert_int_equal(next_redefine_scoped("untick/Beta", 0, &m), 1);
    assert_true(m.u.redefine.original);
    cmr_msg_free(&m);
    cmr_reader_free(r);
    tests_ok++;
}

/* Three metric intervals (instrumenter.budget.intervals) of the peer's JVM on cmr.metrics:
 * budget/Hot.hot 10 M calls of 5 ns each, whose probes (50 ns each) cost 50 % of 1 s of
 * CPU, and budget/Hot.cold 100 calls of 1 ms. */
static void send_hot_metrics(void)
{
    uint64_t hot = cmr_method_id("budget/Hot", "hot", "(I)I"), cold = cmr_method_id("budget/Hot", "cold", "(I)I");
    cmr_method_metric_t mm[] = {
        {.method_id = (int64_t)hot, .count = 10000000, .sum_ns = 60000000, .self_ns = 50000000},
        {.method_id = (int64_t)cold, .count = 100, .sum_ns = 100000000, .self_ns = 100000000},
    };
    cmr_metric_batch_t mb = {
        .agent_id = peer.agent_id, .interval_ms = 1000, .environment_id = "app", .cpu_ns = 1000000000};
    mb.metrics.items = mm;
    mb.metrics.count = 2;
    char err[256];
    for (int i = 0; i < 3; i++) {
        mb.interval_start_ms = cmr_wall_ms() + i * 1000;
        assert_int_equal(cmr_producer_send(peer.producer, CMR_MSG_METRIC_BATCH, &mb, NULL, NULL, err, sizeof err),
                         CMR_SEND_OK);
    }
    assert_int_equal(cp_peer_flush(&peer), 0);
}

/* The overhead budget: MetricBatches on cmr.metrics say a method's probes cost half the
 * JVM's CPU time and more than the method itself; the instrumenter removes its probes
 * (a new Redefine without them, the other method keeps its own) and says why. */
static void test_overhead_budget_removes_probes(void **state)
{
    (void)state;
    char *out = NULL;
    assert_int_equal(
        cp_apply(config_bin, broker.bootstrap,
                 "version: 1\nenvironments:\n  - id: app\n    sensors:\n"
                 "      - {sensor: invocation-sequence, class: budget.Hot, method: \"*\", trivial: true}\n",
                 &out),
        0);
    free(out);
    send_class("budget/Hot", 1);
    cmr_msg_t m;
    assert_int_equal(next_redefine_of("budget/Hot", &m), 1);
    assert_int_equal(m.u.redefine.methods.count, 2);
    cmr_msg_free(&m);
    send_hot_metrics();
    if (next_redefine_of("budget/Hot", &m) != 1) {
        cp_proc_dump_log(&instr_worker, 40);
        fail_msg("no Redefine of budget/Hot after the metric batches");
    }
    assert_false(m.u.redefine.original);
    assert_int_equal(m.u.redefine.methods.count, 1);
    assert_string_equal(m.u.redefine.methods.items[0].name, "cold");
    assert_false(calls_probe(&m.u.redefine.bytecode, "hot", "enter"));
    assert_true(calls_probe(&m.u.redefine.bytecode, "cold", "enter"));
    cmr_msg_free(&m);
    assert_int_equal(cp_proc_wait_log(&instr_worker, "event=instr.budget_removed environment=app", 5000), 0);
    assert_int_equal(cp_proc_wait_log(&instr_worker, "reason=\"probes 50 ns per call > self time 5.0 ns", 5000), 0);
    tests_ok++;
}

/* The overhead budget's removals are a projection of cmr.budget: the removal of
 * budget/Hot.hot above is a BudgetRemoval there (its environment's revision, the JVM, the
 * figures, the reason), and a worker started on an empty class cache reads it back before
 * it answers a class: the class comes without hot's probes from its first answer. Runs
 * last: it leaves the worker on a cache of its own. */
static void test_budget_removals_outlive_the_worker(void **state)
{
    (void)state;
    char err[256];
    cmr_reader_t *r = cmr_reader_new(conf, cmr_topic_name(CMR_TOPIC_BUDGET), 0, err, sizeof err);
    assert_non_null(r);
    uint64_t hot = cmr_method_id("budget/Hot", "hot", "(I)I");
    bool found = false;
    for (int64_t deadline = cmr_mono_ms() + 30000; !found && cmr_mono_ms() < deadline;) {
        cmr_reader_rec_t rec;
        if (cmr_reader_poll(r, 200, &rec) != 1)
            continue;
        cmr_msg_t m;
        assert_int_equal(cmr_msg_decode(rec.payload, rec.len, &m, err, sizeof err), CMR_WIRE_OK);
        assert_int_equal(m.type, CMR_MSG_BUDGET_REMOVAL);
        const cmr_budget_removal_msg_t *b = &m.u.budget_removal;
        char key[160];
        cp_fmt(key, sizeof key, "app/%016" PRIx64, hot);
        if ((uint64_t)b->method_id == hot) {
            found = true;
            assert_string_equal(rec.key, key);
            assert_string_equal(b->environment_id, "app");
            assert_true(b->revision > 0);
            assert_int_equal(b->agent_id, peer.agent_id);
            assert_int_equal(b->calls, 30000000); /* 3 intervals of 10 M calls */
            assert_true(b->self_ns_per_call > 4.9 && b->self_ns_per_call < 5.1);
            assert_true(b->cost_pct > 49.9 && b->cost_pct < 50.1);
            assert_non_null(strstr(b->reason, "probes 50 ns per call > self time 5.0 ns"));
        }
        cmr_msg_free(&m);
    }
    cmr_reader_free(r);
    assert_true(found);

    /* what else may be on the topic: junk, another message type, a removal of an environment
     * that does not exist; refused (the first two) or passed over, the removal kept */
    const char *budget_topic = cmr_topic_name(CMR_TOPIC_BUDGET);
    assert_int_equal(cmr_producer_send_raw(peer.producer, budget_topic, "app/x", 5, "junk!", 5, NULL), 0);
    cmr_metric_batch_t other = {.agent_id = peer.agent_id, .interval_ms = 1000, .environment_id = "app"};
    cmr_buf_t enc = {0};
    assert_int_equal(cmr_msg_encode(CMR_MSG_METRIC_BATCH, &other, &enc, err, sizeof err), CMR_WIRE_OK);
    assert_int_equal(cmr_producer_send_raw(peer.producer, budget_topic, "app/y", 5, enc.data, enc.len, NULL), 0);
    cmr_buf_free(&enc);
    cmr_budget_removal_msg_t stray = {.environment_id = "nowhere", .revision = 1, .method_id = 7, .reason = "stray"};
    assert_int_equal(cmr_producer_send(peer.producer, CMR_MSG_BUDGET_REMOVAL, &stray, NULL, NULL, err, sizeof err),
                     CMR_SEND_OK);
    assert_int_equal(cp_peer_flush(&peer), 0);

    assert_int_equal(cp_proc_stop(&instr_worker), 0);
    cp_fmt(instr_db, sizeof instr_db, "%s/db-after-budget", tmp); /* nothing cached */
    assert_int_equal(start_instrumenter_budget("16777216"), 0);
    assert_int_equal(cp_proc_wait_log(&instr_worker, "budget_removals=1 budget_refused=2", 5000), 0);
    assert_int_equal(cp_proc_wait_log(&instr_worker, "event=instr.budget_record_refused", 5000), 0);
    send_class("budget/Hot", 3);
    cmr_msg_t m;
    if (next_redefine_of("budget/Hot", &m) != 1) {
        cp_proc_dump_log(&instr_worker, 40);
        fail_msg("no Redefine of budget/Hot from the restarted worker");
    }
    assert_int_equal(m.u.redefine.methods.count, 1);
    assert_string_equal(m.u.redefine.methods.items[0].name, "cold");
    assert_false(calls_probe(&m.u.redefine.bytecode, "hot", "enter"));
    cmr_msg_free(&m);
    tests_ok++;
}

/* An environment's own overhead budget (overhead_budget_pct) stands in for the
 * instrumenter's 3 %: at 60 % the JVM's 50 % is within it and hot keeps its probes; at 40 %
 * it loses them; at 0 the budget is off there and the JVM is not judged at all. Each
 * setting is a new revision of the environment, whose JVMs first get every probe back. */
static void test_environment_overhead_budget(void **state)
{
    (void)state;
    static const struct {
        const char *pct;
        int judged; /* 1: judged, within its budget; 2: judged, hot removed; 0: not judged */
    } steps[] = {{"60", 1}, {"40", 2}, {"0", 0}};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        char yaml[512], *out = NULL;
        cp_fmt(yaml, sizeof yaml,
               "version: 1\nenvironments:\n  - id: app\n    overhead_budget_pct: %s\n    sensors:\n"
               "      - {sensor: invocation-sequence, class: budget.Hot, method: \"*\", trivial: true}\n",
               steps[i].pct);
        int runs = cp_proc_count_log(&instr_worker, "event=instr.environment_run environment=app ");
        assert_int_equal(cp_apply(config_bin, broker.bootstrap, yaml, &out), 0);
        free(out);
        cmr_msg_t m;
        /* the new revision: both probed again, a Redefine where hot had lost its probes (the
         * previous test's removal, and the 40 % step's) */
        if ((i == 0 || steps[i - 1].judged == 2) && next_redefine_of("budget/Hot", &m) != 1) {
            cp_proc_dump_log(&instr_worker, 40);
            fail_msg("overhead_budget_pct %s: no Redefine of the new revision", steps[i].pct);
        }
        if (i == 0 || steps[i - 1].judged == 2) {
            assert_int_equal(m.u.redefine.methods.count, 2);
            cmr_msg_free(&m);
        }
        for (int64_t deadline = cmr_mono_ms() + 10000;
             cp_proc_count_log(&instr_worker, "event=instr.environment_run environment=app ") == runs; usleep(50000))
            if (cmr_mono_ms() > deadline)
                fail_msg("overhead_budget_pct %s: the environment was not run again", steps[i].pct);
        int judged = cp_proc_count_log(&instr_worker, "event=instr.budget agent=");
        int removed = cp_proc_count_log(&instr_worker, "event=instr.budget_removed environment=app");
        send_hot_metrics();
        char line[64];
        cp_fmt(line, sizeof line, "environment=app budget_pct=%s ", steps[i].pct);
        if (steps[i].judged == 2) {
            assert_int_equal(next_redefine_of("budget/Hot", &m), 1);
            assert_int_equal(m.u.redefine.methods.count, 1);
            assert_string_equal(m.u.redefine.methods.items[0].name, "cold");
            cmr_msg_free(&m);
            assert_int_equal(cp_proc_wait_log(&instr_worker, line, 5000), 0);
            assert_true(cp_proc_count_log(&instr_worker, "event=instr.budget_removed environment=app") > removed);
        } else if (steps[i].judged == 1) {
            assert_int_equal(cp_proc_wait_log(&instr_worker, line, 10000), 0); /* debug: removed=0 */
            assert_int_equal(cp_proc_count_log(&instr_worker, "event=instr.budget_removed environment=app"), removed);
        } else {
            sleep(3); /* the batches were read meanwhile (the worker reads cmr.metrics every pass) */
            assert_int_equal(cp_proc_count_log(&instr_worker, "event=instr.budget agent="), judged);
        }
        if (steps[i].judged != 2 && cp_peer_next(&peer, 1000, &m) == 1) { /* no removal: no Redefine */
            if (m.type == CMR_MSG_REDEFINE)
                fail_msg("overhead_budget_pct %s: a Redefine of %s", steps[i].pct, m.u.redefine.class_name);
            cmr_msg_free(&m);
        }
    }
    tests_ok++;
}

static int32_t classes_partition(const cp_peer_t *p)
{
    char key[17];
    snprintf(key, sizeof key, "%016" PRIx64, (uint64_t)p->agent_id);
    return cmr_key_partition(NULL, key, 16, cmr_topic_layout(CMR_TOPIC_CLASSES)->partitions);
}

/* True when the next commands of p include a BytecodeResend for all its classes. */
static bool asked_for_all(cp_peer_t *p, int timeout_ms)
{
    cmr_msg_t m;
    for (int64_t deadline = cmr_mono_ms() + timeout_ms; cmr_mono_ms() < deadline;) {
        if (cp_peer_expect(p, CMR_MSG_BYTECODE_RESEND, (int)(deadline - cmr_mono_ms()), &m) != 1)
            return false;
        bool all = m.u.bytecode_resend.class_name[0] == '\0' && m.u.bytecode_resend.agent_id == p->agent_id;
        cmr_msg_free(&m);
        if (all)
            return true;
    }
    return false;
}

/* More than the embedded broker keeps of one partition (5 MB), sent by p to its
 * cmr.classes partition: not class files, and not compressible. */
static void overfill_partition(cp_peer_t *p)
{
    enum { FILLERS = 80, FILLER_BYTES = 96 * 1024 };
    uint8_t *junk = malloc(FILLER_BYTES);
    assert_non_null(junk);
    uint64_t x = 0x9E3779B97F4A7C15u;
    for (int i = 0; i < FILLERS; i++) {
        for (size_t j = 0; j < FILLER_BYTES; j++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            junk[j] = (uint8_t)x;
        }
        assert_int_equal(cp_peer_send_class(p, "filler/Junk", 1, junk, FILLER_BYTES, CMR_CLASS_LOADED, 0), 0);
        assert_int_equal(cp_peer_flush(p), 0);
    }
    free(junk);
}

/* Records of cmr.classes deleted before the instrumenter read them are found by their
 * offsets: while the worker is down, the agent sends a class and then more than the
 * embedded broker keeps of a partition (5 MB) of other records, so that the class's record
 * is deleted unread. The restarted worker logs and counts the gap and asks the agent of
 * that partition for all its classes (a signed BytecodeResend without a class name).
 * An agent of that partition the worker never saw a record of (registered, its one class
 * among the lost records) is asked too: the worker knows it from cmr.registrations. */
static void test_lost_class_records_ask_for_all_classes(void **state)
{
    (void)state;
    assert_int_equal(cp_proc_stop(&instr_worker), 0);
    static cp_peer_t unseen;
    bool found = false;
    for (int i = 0; i < 64 && !found; i++) { /* an agent whose records share the peer's partition */
        char name[32];
        snprintf(name, sizeof name, "unseen-%d", i);
        assert_int_equal(cp_peer_open(&unseen, conf, name, "host-2", "10.0.0.2"), 0);
        found = classes_partition(&unseen) == classes_partition(&peer);
        if (!found)
            cp_peer_close(&unseen);
    }
    assert_true(found);
    assert_int_equal(cp_peer_register(&unseen, 1), 0);
    const cp_class_t *c = cls("app/Later");
    assert_int_equal(cp_peer_send_class(&unseen, "app/Later", 7, c->bytes, c->len, CMR_CLASS_LOADED, 0), 0);
    assert_int_equal(cp_peer_flush(&unseen), 0);
    send_class("app/Later", 7);
    overfill_partition(&peer);
    assert_int_equal(start_instrumenter(), 0);
    if (!asked_for_all(&peer, 30000)) {
        cp_proc_dump_log(&instr_worker, 40);
        fail_msg("no BytecodeResend for all classes after the lost records");
    }
    if (!asked_for_all(&unseen, 10000)) {
        cp_proc_dump_log(&instr_worker, 40);
        fail_msg("the agent known only by its registration was not asked for its classes");
    }
    cp_peer_close(&unseen);
    assert_int_equal(cp_proc_wait_log(&instr_worker, "event=instr.classes_lost partition=", 5000), 0);
    assert_int_equal(cp_proc_wait_log(&instr_worker, "event=instr.classes_asked_again agent=", 5000), 0);
    /* Gaps found soon after an ask (the resend's own records lost): the worker, frozen
     * right after an ask, misses the next 7.5 MB of the partition. Each gap asks again when
     * its wait is over (1, 2, 4 s after the first, second, third ask): the third gap is
     * found about 2 s after the third ask here (the fill, then the consumer's offset
     * reset), so the fourth ask is a deferred one, made by the worker's loop. */
    for (int round = 2; round <= 4; round++) {
        int64_t t0 = cmr_mono_ms();
        assert_int_equal(kill(instr_worker.pid, SIGSTOP), 0);
        overfill_partition(&peer);
        assert_int_equal(kill(instr_worker.pid, SIGCONT), 0);
        print_message("round %d: the worker frozen for %lld ms after the last ask\n", round,
                      (long long)(cmr_mono_ms() - t0));
        if (!asked_for_all(&peer, 30000)) {
            cp_proc_dump_log(&instr_worker, 40);
            fail_msg("no BytecodeResend for all classes after a gap found soon after the last ask (round %d)", round);
        }
    }
    char want[96];
    snprintf(want, sizeof want, "agent=%016" PRIx64 " partition=%d asks_in_window=4", (uint64_t)peer.agent_id,
             classes_partition(&peer));
    assert_int_equal(cp_proc_wait_log(&instr_worker, want, 5000), 0);
    tests_ok++;
}

/* A JVM of the environment, as test_lost_class_records_ask_for_all_classes makes one:
 * registered, configured like the peer, its agent reading what `features` says. */
static void open_jvm(cp_peer_t *p, const char *name, int64_t features)
{
    assert_int_equal(cp_peer_open(p, conf, name, "host-3", "10.0.0.3"), 0);
    assert_int_equal(cp_peer_register(p, 1), 0);
    cp_fmt(p->env_id, sizeof p->env_id, "%s", peer.env_id);
    p->revision = peer.revision;
    p->agent_features = features;
}

/* p's commands until the Redefine of `name` (returned in *redefine), with the ClassGrants
 * before it in grants[] (at most 4, *ngrants of them; the caller frees them). */
static void until_redefine(cp_peer_t *p, const char *name, cmr_msg_t *redefine, cmr_msg_t *grants, int *ngrants)
{
    cmr_msg_t m;
    for (int64_t deadline = cmr_mono_ms() + 30000;;) {
        int got = cp_peer_next(p, (int)(deadline - cmr_mono_ms()), &m);
        if (got != 1 || cmr_mono_ms() > deadline) {
            cp_proc_dump_log(&instr_worker, 30);
            fail_msg("no Redefine of %s for %s", name, p->name);
        }
        if (m.type == CMR_MSG_REDEFINE && strcmp(m.u.redefine.class_name, name) == 0) {
            *redefine = m;
            return;
        }
        if (m.type == CMR_MSG_CLASS_GRANTS && *ngrants < 4)
            grants[(*ngrants)++] = m;
        else
            cmr_msg_free(&m);
    }
}

/* Classes granted ahead go only to agents that read them (ClassLoaded.agent_features):
 * after one JVM's class was granted, a JVM whose agent does not say it reads ClassGrants
 * (one from before them, or with agent.preload.max.bytes 0) gets none, only the Redefine;
 * the next one that does gets the class ahead, with the bytes the first one got. The
 * worker signs grants for 2 hours here (trust.grant.lifetime.ms), less than the day before
 * their end from which they are signed again: so the grant the next JVM gets is a renewed
 * one, signed after the first, by the worker's key, for the same bytes. */
static void test_classes_granted_ahead_to_agents_that_read_them(void **state)
{
    (void)state;
    static cp_peer_t first, old, next;
    const cp_class_t *c = cls("budget/Hot");
    cmr_msg_t r1, r2, r3, grants[4];
    int ng = 0;
    char *out = NULL;
    assert_int_equal(cp_proc_stop(&instr_worker), 0);
    assert_int_equal(start_instrumenter_with("0", "trust.grant.lifetime.ms=7200000"), 0);
    int runs = cp_proc_count_log(&instr_worker, "event=instr.environment_run environment=app ");
    assert_int_equal(cp_apply(config_bin, broker.bootstrap,
                              "version: 1\nenvironments:\n  - id: app\n    sensors:\n"
                              "      - {sensor: invocation-sequence, class: budget.Hot, method: hot, trivial: true}\n",
                              &out),
                     0);
    free(out);
    for (int64_t deadline = cmr_mono_ms() + 10000;
         cp_proc_count_log(&instr_worker, "event=instr.environment_run environment=app ") == runs; usleep(50000))
        if (cmr_mono_ms() > deadline)
            fail_msg("the environment was not run again");
    open_jvm(&first, "app-ahead-first", CMR_AGENT_READS_CLASS_GRANTS);
    assert_int_equal(cp_peer_send_class(&first, "budget/Hot", 7, c->bytes, c->len, CMR_CLASS_LOADED, 0), 0);
    assert_int_equal(cp_peer_flush(&first), 0);
    until_redefine(&first, "budget/Hot", &r1, grants, &ng);
    assert_true(r1.u.redefine.grant.len > 0); /* kept for the next JVMs */
    for (int i = 0; i < ng; i++)
        cmr_msg_free(&grants[i]);

    ng = 0;
    open_jvm(&old, "app-ahead-old", 0);
    assert_int_equal(cp_peer_send_class(&old, "budget/Hot", 7, c->bytes, c->len, CMR_CLASS_LOADED, 0), 0);
    assert_int_equal(cp_peer_flush(&old), 0);
    until_redefine(&old, "budget/Hot", &r2, grants, &ng);
    if (ng)
        fail_msg("an agent that does not read ClassGrants was sent %d of them", ng);
    assert_memory_equal(r2.u.redefine.bytecode.data, r1.u.redefine.bytecode.data, r1.u.redefine.bytecode.len);
    char line[96];
    cp_fmt(line, sizeof line, "event=instr.granted_ahead agent=%016" PRIx64, (uint64_t)old.agent_id);
    assert_int_equal(cp_proc_count_log(&instr_worker, line), 0);
    cp_fmt(line, sizeof line, "event=instr.granted_ahead_unread agent=%016" PRIx64, (uint64_t)old.agent_id);
    assert_int_equal(cp_proc_count_log(&instr_worker, line), 1);

    open_jvm(&next, "app-ahead-next", CMR_AGENT_READS_CLASS_GRANTS);
    assert_int_equal(cp_peer_send_class(&next, "budget/Hot", 7, c->bytes, c->len, CMR_CLASS_LOADED, 0), 0);
    assert_int_equal(cp_peer_flush(&next), 0);
    until_redefine(&next, "budget/Hot", &r3, grants, &ng);
    bool found = false;
    for (int i = 0; i < ng; i++) {
        const cmr_class_grants_t *g = &grants[i].u.class_grants;
        assert_string_equal(g->environment_id, next.env_id);
        for (size_t k = 0; k < g->classes.count; k++)
            if (strcmp(g->classes.items[k].class_name, "budget/Hot") == 0) {
                found = true;
                cmr_grant_t first_grant, renewed;
                assert_int_equal(cmr_grant_decode(r1.u.redefine.grant.data, r1.u.redefine.grant.len, &first_grant),
                                 CMR_GRANT_OK);
                const cmr_bytes_t *gb = &g->classes.items[k].grant;
                assert_int_equal(cmr_grant_decode(gb->data, gb->len, &renewed), CMR_GRANT_OK);
                assert_true(renewed.issued_ms >= first_grant.issued_ms);
                assert_true(gb->len != r1.u.redefine.grant.len ||
                            memcmp(gb->data, r1.u.redefine.grant.data, gb->len) != 0); /* signed again */
                assert_memory_equal(renewed.instrumented_digest, first_grant.instrumented_digest,
                                    CMR_TRUST_DIGEST_BYTES);
                assert_string_equal(renewed.key_id, first_grant.key_id);
                assert_int_equal(g->classes.items[k].bytecode.len, r1.u.redefine.bytecode.len);
                assert_memory_equal(g->classes.items[k].bytecode.data, r1.u.redefine.bytecode.data,
                                    r1.u.redefine.bytecode.len);
            }
        cmr_msg_free(&grants[i]);
    }
    if (!found)
        fail_msg("the JVM whose agent reads ClassGrants was not sent budget/Hot ahead (%d ClassGrants)", ng);
    cp_fmt(line, sizeof line, "event=instr.granted_ahead agent=%016" PRIx64, (uint64_t)next.agent_id);
    assert_int_equal(cp_proc_count_log(&instr_worker, line), 1);
    assert_true(cp_proc_count_log(&instr_worker, "renewed=1 ") >= 1);
    cmr_msg_free(&r1);
    cmr_msg_free(&r2);
    cmr_msg_free(&r3);
    cp_peer_close(&first);
    cp_peer_close(&old);
    cp_peer_close(&next);
    tests_ok++;
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
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hierarchy_resolved_as_types_arrive),
        cmocka_unit_test(test_environment_change_redefine_resend_original),
        cmocka_unit_test(test_bad_class_and_restart_keeps_cache),
        cmocka_unit_test(test_forged_class_loaded_is_refused),
        cmocka_unit_test(test_diagnosis_tree),
        cmocka_unit_test(test_diagnosis_resends_evicted),
        cmocka_unit_test(test_diagnosis_exclude_method),
        cmocka_unit_test(test_overhead_budget_removes_probes),
        cmocka_unit_test(test_lost_class_records_ask_for_all_classes),
        cmocka_unit_test(test_budget_removals_outlive_the_worker),
        cmocka_unit_test(test_environment_overhead_budget),
        cmocka_unit_test(test_classes_granted_ahead_to_agents_that_read_them),
    };
    const char *filter = getenv("CMR_TEST_FILTER");
    if (filter && filter[0]) {
        cmocka_set_test_filter(filter);
        tests_run = 1; /* one test selected: its logs are dumped when it fails */
    }
    return cmocka_run_group_tests(tests, setup, teardown);
}

/*
 * agent_bench.c - the agent's overhead on a MooBench-style workload (printed numbers, not a
 * test). Runs agent/bench/java/MooBench in separate JVMs:
 *
 *   baseline     no agent
 *   full         the agent, monitoredMethod instrumented with the invocation-sequence
 *                probes by the class-file engine: every call recorded (enter + exit)
 *   timer        the agent, timer probes: per-method aggregates
 *   cond-off     the agent, monitoredMethod with a diagnosis' conditional probes, no
 *                diagnosis' context open anywhere in the JVM: what a discovered method
 *                costs while its diagnosis has nothing to record (the target: <= 3 ns)
 *   cond-on      the same, with the benchmark loop (round) as the diagnosis' anchor: every
 *                monitored call recorded, as in `full`, plus the context's checks
 *   jfr-trace    JDK 25's JFR method tracing of monitoredMethod (when that JDK is there)
 *   jfr-timing   JDK 25's JFR method timing of monitoredMethod
 *
 * and prints ns per top-level call and the overhead per monitored call over the baseline
 * of the same JDK, and for the agent's runs the events its publisher thread recorded per
 * second of the run and per second of that thread's CPU (read from /proc before the JVM
 * exits). The CMR side is scripted (tests/agent/support/cmr_peer.c) on the
 * embedded broker, so the agent ships its events for real while the benchmark runs.
 *
 * With CMR_BENCH_PACED=RATE instead: the top-level calls at RATE per second (a steady
 * load, as a server's requests), baseline and full recording, and the CPU of the whole
 * JVM (application, publisher and librdkafka threads) per top-level call, i.e. per trace.
 * CMR_BENCH_SEND_MS=MS sets the strategy's send interval (default 10 ms paced, as the
 * tests' environments; an environment's default strategy sends every 1,000 ms).
 *
 * Usage: agent_bench BROKER JAVA17 JAVA25|- AGENT_SO CLASSES [CALLS] [DEPTH]
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_probes.h"
#include "broker_proc.h"
#include "proc_cpu.h"
#include "cmr/classfile.h"
#include "cmr/clock.h"
#include "cmr/ids.h"
#include "cmr/log.h"
#include "cmr/reader.h"
#include "cmr/wire.h"
#include "cmr_peer.h"
#include "jvm_proc.h"

static const char *broker_bin, *agent_so, *classes;
static broker_proc_t broker;
static cmr_peer_t peer;
static long long calls = 20000000, warmup = 20000000;
static int depth = 10;

static int only_monitored(const cf_class *c, const cf_member *m, void *ud)
{
    (void)ud;
    cf_str n = cf_cp_utf8(c, m->name);
    return n.len == 15 && memcmp(n.p, "monitoredMethod", 15) == 0;
}

static bool by_name(const cmr_msg_t *m, const void *ud)
{
    return strcmp(m->u.registration.agent_name, (const char *)ud) == 0;
}

typedef struct cls_match {
    const char *instance;
} cls_match_t;

static bool moobench_class(const cmr_msg_t *m, const void *ud)
{
    return strcmp(m->u.class_loaded.instance_id, (const char *)ud) == 0 &&
           strcmp(m->u.class_loaded.class_name, "MooBench") == 0;
}

static bool result_of(const cmr_msg_t *m, const void *ud)
{
    return strcmp(m->u.redefine_result.instance_id, (const char *)ud) == 0;
}

static bool status_of(const cmr_msg_t *m, const void *ud)
{
    return strcmp(m->u.agent_status.instance_id, (const char *)ud) == 0 &&
           m->u.agent_status.state == CMR_AGENT_SHUTDOWN;
}

static bool configured(const cmr_msg_t *m, const void *ud)
{
    return strcmp(m->u.agent_status.instance_id, (const char *)ud) == 0 && m->u.agent_status.state == CMR_AGENT_FULL;
}

typedef struct outcome {
    double ns;
    long long recorded, dropped;
    /* what the agent's EventBatch messages on cmr.events hold, read back from the topic:
     * messages, events, their bytes (the Avro messages as Kafka takes them, before its
     * batch compression) and the bytes of the encoded events alone */
    long long messages, events, bytes, packed, segments; /* packed: the messages' `segments` bytes */
    double seconds;                                      /* the run (warm-up and measured calls), all of it recorded */
    double cpu_s;                                        /* paced: the JVM's CPU over the paced calls */
    double publisher_s;  /* the agent's publisher thread's CPU over the whole run (draining, aggregating, encoding) */
    long long behind_ms; /* paced: how late the last burst ended */
    bool ok;
} outcome_t;

static long long paced_rate; /* CMR_BENCH_PACED: top-level calls per second, 0 = flat out */
static int send_ms;          /* CMR_BENCH_SEND_MS: the strategy's send interval (0: 10 ms paced, 5 ms flat out) */

/* The send interval the agent is configured with. */
static int send_interval_ms(void)
{
    return send_ms ? send_ms : paced_rate ? 10 : 5;
}

/* Reads cmr.events from since_ms to its end and counts agent_id's batches into out. */
static void wire_tally(int64_t agent_id, int64_t since_ms, outcome_t *out)
{
    char err[256];
    cmr_reader_t *r = cmr_reader_new(peer.conf, "cmr.events", since_ms, err, sizeof err);
    if (!r) {
        fprintf(stderr, "cmr.events: %s\n", err);
        return;
    }
    int64_t deadline = cmr_mono_ms() + 120000;
    cmr_reader_rec_t rec;
    while (!cmr_reader_caught_up(r) && cmr_mono_ms() < deadline) {
        if (cmr_reader_poll(r, 200, &rec) != 1)
            continue;
        cmr_msg_t m;
        if (cmr_msg_decode(rec.payload, rec.len, &m, NULL, 0) != CMR_WIRE_OK)
            continue;
        if (m.type == CMR_MSG_EVENT_BATCH && m.u.event_batch.agent_id == agent_id) {
            out->messages++;
            out->events += m.u.event_batch.event_count;
            out->bytes += (long long)rec.len;
            out->packed += (long long)m.u.event_batch.segments.len; /* segment headers and events */
            out->segments += m.u.event_batch.segment_count;
        }
        cmr_msg_free(&m);
    }
    cmr_reader_free(r);
}

/* Runs MooBench in one JVM; with `probe`, under the agent with monitoredMethod instrumented. */
static int only_round(const cf_class *c, const cf_member *m, void *ud)
{
    (void)ud;
    cf_str n = cf_cp_utf8(c, m->name);
    return n.len == 5 && memcmp(n.p, "round", 5) == 0;
}

/* How run() instruments MooBench: monitoredMethod with `probe`; with `anchor`, round() gets
 * the anchor probes and the command carries a diagnosis scope naming it. */
typedef struct bench_mode {
    const cf_probe *probe;
    bool anchor;
} bench_mode_t;

/* The MooBench class as the mode wants it (*out malloc'ed). 0 or -1. */
static int instrument(const cmr_class_loaded_t *c, const bench_mode_t *mode, uint8_t **out, size_t *len)
{
    cf_instrument_result res, res2;
    cf_error err;
    if (cf_instrument_class(c->bytecode.data, c->bytecode.len, mode->probe, only_monitored, NULL, &res, &err) !=
            CF_OK ||
        res.n_instrumented != 1)
        return -1;
    if (!mode->anchor) {
        *out = res.bytes;
        *len = res.len;
        free(res.methods);
        return 0;
    }
    int rc = cf_instrument_class(res.bytes, res.len, &agent_anchor_probe, only_round, NULL, &res2, &err) == CF_OK &&
                     res2.n_instrumented == 1
                 ? 0
                 : -1;
    cf_instrument_result_free(&res);
    if (rc == 0) {
        *out = res2.bytes;
        *len = res2.len;
        free(res2.methods);
    }
    return rc;
}

static outcome_t run(const char *java, const char *extra_jvm_arg, const bench_mode_t *mode)
{
    const cf_probe *probe = mode ? mode->probe : NULL;
    outcome_t out = {0};
    jvm_proc_t j;
    char agentpath[2048], name[64], instance[33] = "", cmd[128], line[512];
    int64_t agent_id = 0, started_ms = cmr_wall_ms();
    uint8_t raw[4];
    char hex[9];
    cmr_random_bytes(raw, sizeof raw);
    cmr_hex(raw, sizeof raw, hex);
    snprintf(name, sizeof name, "moobench-%s", hex);
    /* the agent pins the peer's key: the peer signs its commands like the CMR */
    snprintf(agentpath, sizeof agentpath, "-agentpath:%s=bootstrap=%s,name=%s,agent.ring.records=1048576,log=warn,%s",
             agent_so, broker.bootstrap, name, peer.trust_option);
    const char *argv[8];
    int n = 0;
    argv[n++] = java;
    argv[n++] = "-Xms1g";
    if (probe)
        argv[n++] = agentpath;
    if (extra_jvm_arg)
        argv[n++] = extra_jvm_arg;
    argv[n++] = "-cp";
    argv[n++] = classes;
    argv[n++] = "MooBench";
    argv[n] = NULL;
    if (jvm_proc_start(&j, argv) != 0 || jvm_proc_expect(&j, "ready", NULL, 0, 60000) != 0)
        goto done;
    if (probe) {
        const cmr_record_t *reg = cmr_peer_wait(&peer, CMR_MSG_AGENT_REGISTRATION, by_name, name, 0, 30000);
        if (!reg)
            goto done;
        snprintf(instance, sizeof instance, "%s", reg->msg.u.registration.instance_id);
        agent_id = (int64_t)cmr_agent_id(name, reg->msg.u.registration.hostname, instance);
        cmr_agent_configuration_t cfg = {
            .instance_id = instance,
            .agent_id = agent_id,
            .environment_id = "bench",
            .environment_name = "bench",
            .revision = 1,
            .strategy = {.send_interval_ms = send_interval_ms(), .max_batch_events = 8192, .metric_interval_ms = 1000}};
        cmr_peer_command(&peer, instance, CMR_MSG_AGENT_CONFIGURATION, &cfg);
        if (!cmr_peer_wait(&peer, CMR_MSG_AGENT_STATUS, configured, instance, 0, 30000))
            goto done;
        const cmr_record_t *cls = cmr_peer_wait(&peer, CMR_MSG_CLASS_LOADED, moobench_class, instance, 0, 60000);
        if (!cls)
            goto done;
        const cmr_class_loaded_t *c = &cls->msg.u.class_loaded;
        uint8_t *bytes;
        size_t len;
        if (instrument(c, mode, &bytes, &len) != 0)
            goto done;
        uint8_t digest[CMR_TRUST_DIGEST_BYTES]; /* binds the command to the class instrumented */
        cmr_trust_digest(c->bytecode.data, c->bytecode.len, digest);
        cmr_redefine_t rd = {.request_id = 1,
                             .agent_id = agent_id,
                             .class_name = "MooBench",
                             .loader_id = c->loader_id,
                             .class_hash = c->class_hash,
                             .revision = 1,
                             .bytecode = {bytes, len},
                             .original_digest = {digest, sizeof digest}};
        /* a diagnosis' scope: round() is its anchor; it ends in an hour, the original bytes
         * are what the agent would restore */
        cmr_instrumented_method_t anchor = {(int64_t)cmr_method_id("MooBench", "round", "(JI)D"), "round", "(JI)D",
                                            CMR_SENSOR_ANCHOR};
        cmr_diagnosis_scope_t scope = {.id = 0xbe4c,
                                       .revision = 1,
                                       .end_ms = cmr_wall_ms() + 3600 * 1000,
                                       .restore_bytecode = c->bytecode,
                                       .restore_original = true};
        if (mode->anchor) {
            rd.methods.items = &anchor;
            rd.methods.count = 1;
        }
        if (mode->probe == &agent_conditional_probe)
            rd.diagnosis = &scope;
        cmr_peer_command(&peer, instance, CMR_MSG_REDEFINE, &rd);
        free(bytes);
        const cmr_record_t *rr = cmr_peer_wait(&peer, CMR_MSG_REDEFINE_RESULT, result_of, instance, 0, 30000);
        if (!rr || rr->msg.u.redefine_result.status != CMR_COMMAND_APPLIED)
            goto done;
    }
    if (paced_rate)
        snprintf(cmd, sizeof cmd, "paced %lld %lld %d %lld", warmup, calls, depth, paced_rate);
    else
        snprintf(cmd, sizeof cmd, "run %lld %lld %d", warmup, calls, depth);
    int64_t run_ns = cmr_mono_ns();
    jvm_proc_send(&j, cmd);
    double cpu0 = 0;
    if (paced_rate) {
        if (jvm_proc_expect(&j, "warm", NULL, 0, 600000) != 0)
            goto done;
        cpu0 = proc_cpu_s(j.pid);
    }
    if (jvm_proc_expect(&j, "result", line, sizeof line, 600000) != 0)
        goto done;
    out.seconds = (double)(cmr_mono_ns() - run_ns) / 1e9;
    out.ns = strtod(strstr(line, "ns_per_call=") + 12, NULL);
    if (paced_rate) {
        cmr_sleep_ms(send_interval_ms() + 500); /* the last events leave (the next pass, and their sends) */
        out.cpu_s = proc_cpu_s(j.pid) - cpu0;
        const char *b = strstr(line, "behind_ms=");
        out.behind_ms = b ? atoll(b + 10) : -1;
    }
    if (probe) { /* what the rings still hold is drained within a pass or two */
        cmr_sleep_ms(send_interval_ms() * 4 + 100);
        out.publisher_s = proc_thread_cpu_s(j.pid, "cmr-publisher");
    }
    jvm_proc_send(&j, "exit");
    jvm_proc_wait(&j, 60000);
    out.ok = true;
    if (probe) {
        const cmr_record_t *bye = cmr_peer_wait(&peer, CMR_MSG_AGENT_STATUS, status_of, instance, 0, 30000);
        if (bye) {
            out.recorded = bye->msg.u.agent_status.events_recorded;
            out.dropped = bye->msg.u.agent_status.events_dropped;
        }
        if (mode->probe == &agent_sequence_probe || mode->anchor)
            wire_tally(agent_id, started_ms, &out);
        /* the peer keeps every message: free memory between runs */
        for (size_t i = 0; i < peer.n; i++)
            cmr_record_free(peer.recs[i]);
        peer.n = 0;
    }
done:
    if (!out.ok)
        fprintf(stderr, "run failed (see %s)\n", j.stderr_path);
    jvm_proc_cleanup(&j);
    return out;
}

/* Paced: the JVM's CPU per top-level call (one trace of `depth` calls), and above the
 * baseline's. */
static void report_paced(const char *jdk, const char *mode, outcome_t o, const outcome_t *base)
{
    if (!o.ok) {
        printf("| %s | %-10s | failed | | | |\n", jdk, mode);
        return;
    }
    double per = o.cpu_s * 1e6 / (double)calls;
    char above[64] = "";
    if (base && base->ok)
        snprintf(above, sizeof above, "%.3f", (o.cpu_s - base->cpu_s) * 1e6 / (double)calls);
    char events[128] = "";
    if (o.recorded || o.dropped)
        snprintf(events, sizeof events, "%lld recorded, %lld dropped", o.recorded, o.dropped);
    printf("| %s | %-10s | %.2f | %.3f | %s | %lld ms | %s |\n", jdk, mode, o.cpu_s, per, above, o.behind_ms, events);
    fflush(stdout);
}

static void report(const char *jdk, const char *mode, outcome_t o, double base)
{
    if (!o.ok) {
        printf("| %s | %-10s | failed | | |\n", jdk, mode);
        return;
    }
    char events[384] = "";
    if (o.recorded || o.dropped) /* recorded: what the publisher thread drained and sent */
        snprintf(events, sizeof events, "%lld recorded (%.1f M/s), %lld dropped", o.recorded,
                 (double)o.recorded / o.seconds / 1e6, o.dropped);
    if (o.recorded && o.publisher_s > 0) /* the publisher's own rate: events per second of its CPU */
        snprintf(events + strlen(events), sizeof events - strlen(events),
                 "; publisher thread %.2f s of CPU, %.1f M events per CPU-second", o.publisher_s,
                 (double)o.recorded / o.publisher_s / 1e6);
    if (o.events) /* a call is an enter and an exit */
        snprintf(events + strlen(events), sizeof events - strlen(events),
                 "; on cmr.events %lld in %lld messages of %lld segment batches, %.2f bytes per call (segment headers "
                 "and events alone %.2f)",
                 o.events, o.messages, o.segments, 2.0 * (double)o.bytes / (double)o.events,
                 2.0 * (double)o.packed / (double)o.events);
    if (base > 0 && strcmp(mode, "baseline") != 0)
        printf("| %s | %-10s | %8.2f | %8.2f | %s |\n", jdk, mode, o.ns, (o.ns - base) / depth, events);
    else
        printf("| %s | %-10s | %8.2f | | %s |\n", jdk, mode, o.ns, events);
    fflush(stdout);
}

/* CMR_BENCH_PACED=RATE: CALLS top-level calls (each a trace of DEPTH calls) at RATE per
 * second, without and with the agent recording every call: the JVM's CPU per trace. */
static int paced_main(const char *java17, const char *java25)
{
    printf("Paced: %lld top-level calls (traces of %d calls) at %lld per second, after %lld warm-up calls, sent every "
           "%d ms; CPU of the whole JVM (every thread) over the paced calls\n\n",
           calls, depth, paced_rate, warmup, send_interval_ms());
    printf("| JDK | mode | CPU s | CPU us per trace | above baseline, us per trace | late at the end | agent events "
           "|\n|---|---|---|---|---|---|---|\n");
    const char *jdks[2][2] = {{"17", java17}, {"25", java25}};
    static const bench_mode_t full = {&agent_sequence_probe, false};
    for (int k = 0; k < 2; k++) {
        if (!jdks[k][1])
            continue;
        outcome_t base = run(jdks[k][1], NULL, NULL);
        report_paced(jdks[k][0], "baseline", base, NULL);
        report_paced(jdks[k][0], "full", run(jdks[k][1], NULL, &full), &base);
    }
    cmr_peer_stop(&peer);
    broker_proc_stop(&broker);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: %s BROKER JAVA17 JAVA25|- AGENT_SO CLASSES [CALLS] [DEPTH]\n", argv[0]);
        return 2;
    }
    broker_bin = argv[1];
    const char *java17 = argv[2], *java25 = strcmp(argv[3], "-") ? argv[3] : NULL;
    agent_so = argv[4];
    classes = argv[5];
    if (argc > 6)
        calls = warmup = atoll(argv[6]);
    if (argc > 7)
        depth = atoi(argv[7]);
    cmr_log_set_level(CMR_LOG_ERROR);
    if (broker_proc_start(&broker, broker_bin, NULL) != 0 || cmr_peer_start_control_only(&peer, broker.bootstrap) != 0)
        return 1;
    const char *sm = getenv("CMR_BENCH_SEND_MS");
    if (sm && ((send_ms = atoi(sm)) < 10 || send_ms > 3600000)) {
        fprintf(stderr, "CMR_BENCH_SEND_MS: 10..3600000 ms, not \"%s\"\n", sm);
        return 2;
    }
    const char *pr = getenv("CMR_BENCH_PACED");
    if (pr && (paced_rate = atoll(pr)) > 0)
        return paced_main(java17, java25);
    printf("MooBench-style: %lld calls of monitoredMethod recursing to depth %d (after as many warm-up calls)\n\n",
           calls, depth);
    printf("| JDK | mode | ns per call (depth %d) | overhead ns per monitored call | agent events |\n", depth);
    printf("|---|---|---|---|---|\n");
    const char *jdks[2][2] = {{"17", java17}, {"25", java25}};
    for (int k = 0; k < 2; k++) {
        if (!jdks[k][1])
            continue;
        outcome_t base = run(jdks[k][1], NULL, NULL);
        report(jdks[k][0], "baseline", base, 0);
        static const bench_mode_t full = {&agent_sequence_probe, false}, timer = {&agent_timer_probe, false},
                                  cond_off = {&agent_conditional_probe, false},
                                  cond_on = {&agent_conditional_probe, true};
        report(jdks[k][0], "full", run(jdks[k][1], NULL, &full), base.ns);
        report(jdks[k][0], "timer", run(jdks[k][1], NULL, &timer), base.ns);
        report(jdks[k][0], "cond-off", run(jdks[k][1], NULL, &cond_off), base.ns);
        report(jdks[k][0], "cond-on", run(jdks[k][1], NULL, &cond_on), base.ns);
        if (k == 1) {
            report(jdks[k][0], "jfr-trace",
                   run(jdks[k][1],
                       "-XX:StartFlightRecording:method-trace=MooBench::monitoredMethod,filename=/tmp/"
                       "cmr-moobench-trace.jfr",
                       NULL),
                   base.ns);
            report(jdks[k][0], "jfr-timing",
                   run(jdks[k][1],
                       "-XX:StartFlightRecording:method-timing=MooBench::monitoredMethod,filename=/tmp/"
                       "cmr-moobench-timing.jfr",
                       NULL),
                   base.ns);
            remove("/tmp/cmr-moobench-trace.jfr");
            remove("/tmp/cmr-moobench-timing.jfr");
        }
    }
    cmr_peer_stop(&peer);
    broker_proc_stop(&broker);
    return 0;
}

/*
 * test_e2e_diagnosis.c - a diagnosis end to end (docs/DIAGNOSIS.md): `cmr-config diagnose`,
 * the real cmr-config and cmr-instrumenter workers (separate processes) on the embedded
 * broker, and real JVMs with the agent (tests/agent's AgentTestApp, run with -Xverify:all).
 * A scripted observer (tests/agent/support/cmr_peer.c) only watches what agents send.
 *
 * The selected method is demo.DiagAnchor.run; it calls demo.DiagHelper.step (and step its
 * private inner), which the environment does not instrument: the instrumenter discovers
 * them and sends them conditional probes, the anchor gets anchor probes.
 *
 *   - context: two JVMs at once (JDK 17, and JDK 25 when its path is given, else JDK 17
 *     again) both install the diagnosis; the helper's events appear only in segments that
 *     ran inside the anchor (tagged with the diagnosis id), not when the helper is called
 *     directly, nor when another thread runs it while the anchor's context is open;
 *   - stop: after `diagnose stop`, the classes are removed by the CMR with the bytes they
 *     had before (matches_before=true), AgentStatus says ENDED, and the anchor records no
 *     helper events any more;
 *   - max hits and overhead budget: the agent ends the diagnosis by itself (reason hits,
 *     budget) and restores the classes;
 *   - time to live while the CMR is down: both workers killed (the broker stays), the agent
 *     still records in the context, then ends the diagnosis at its end time by itself
 *     (reason time_to_live), restores the bytes it had before, and the helper stops
 *     recording. (Last: the workers are not started again.)
 * The run makes its own command signing key pair (cmr-config keygen): the workers sign
 * with it, the JVMs pin its public half.
 *
 * Usage: test_e2e_diagnosis BROKER CMR_CONFIG CMR_INSTRUMENTER JAVA AGENT_SO CLASSPATH [JAVA25]
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
#include "cmr/clock.h"
#include "cmr/event.h"
#include "cmr/ids.h"
#include "cmr/log.h"
#include "cmr/wire.h"
#include "cmr_peer.h"
#include "jvm_proc.h"

static const char *broker_bin, *config_bin, *instr_bin, *java_bin, *java25_bin, *agent_so, *classpath;
static broker_proc_t broker;
static cmr_peer_t peer;
static jvm_proc_t config_worker, instr_worker;
static char workdir[] = "/tmp/cmr-e2ediag-XXXXXX";
static char signing_opt[300]; /* trust.signing_key=<workdir>/cmr.key, for the workers */
static char trust_pub[256];   /* <workdir>/cmr.pub, pinned by every JVM */

/* snprintf into an array that must hold the whole text (a path, a name): true when it does. */
#define FITS(buf, ...) (snprintf((buf), sizeof(buf), __VA_ARGS__) < (int)sizeof(buf))

/* Runs a CLI (argv[0] its binary) to its end; with `prefix`, copies its first stdout line
 * starting with it into out. The exit status, or -1. */
static int run_cli(const char *const *argv, const char *prefix, char *out, size_t outlen)
{
    jvm_proc_t p;
    if (jvm_proc_start(&p, argv) != 0)
        return -1;
    int got = prefix ? jvm_proc_expect(&p, prefix, out, outlen, 60000) : 0;
    int rc = jvm_proc_wait(&p, 60000);
    jvm_proc_cleanup(&p);
    return got == 0 ? rc : -1;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* The environment diag (Work.call recorded: the marker that the instrumenter has read a
 * JVM's classes) and the mapping of every diag-* agent to it. */
static const char env_yaml[] = "version: 1\n"
                               "environments:\n"
                               "  - id: diag\n"
                               "    name: Diagnosis end to end\n"
                               "    strategy:\n"
                               "      send_interval_ms: 10\n"
                               "    sensors:\n"
                               "      - sensor: invocation-sequence\n"
                               "        class: demo.Work\n"
                               "        method: call\n"
                               "        trivial: true\n"
                               "mappings:\n  - agent: \"diag-*\"\n    address: \"*\"\n    environment: diag\n";

/* --- diagnoses through cmr-config -------------------------------------------------------- */

typedef struct diag_ref {
    char id[17];
    int64_t number; /* the id's 16 hex digits as a number: EventBatch.diagnosis_id */
} diag_ref_t;

/* cmr-config diagnose start --env diag --method demo.DiagAnchor.run EXTRA... */
static diag_ref_t diagnose_start(const char *const *extra)
{
    const char *argv[24] = {config_bin,           "--bootstrap", broker.bootstrap, "--log-level", "warn",
                            "diagnose",           "start",       "--env",          "diag",        "--method",
                            "demo.DiagAnchor.run"};
    size_t n = 11;
    for (size_t i = 0; extra && extra[i] && n < 23; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    char line[256];
    assert_int_equal(run_cli(argv, "started diagnosis ", line, sizeof line), 0);
    diag_ref_t d;
    assert_true(FITS(d.id, "%s", line + strlen("started diagnosis ")));
    assert_int_equal(strlen(d.id), 16);
    d.number = (int64_t)strtoull(d.id, NULL, 16);
    return d;
}

static void diagnose_stop(const diag_ref_t *d)
{
    const char *argv[] = {config_bin, "--bootstrap", broker.bootstrap, "--log-level", "warn", "diagnose", "stop",
                          d->id,      NULL};
    assert_int_equal(run_cli(argv, "stopped diagnosis ", NULL, 0), 0);
}

/* Waits (20 s) until cmr-config has ended diagnosis d for the fleet with `reason` (as
 * `diagnose show` prints it, e.g. "ended: hits") on the agent's report: an agent's end for
 * its hits or budget ends it everywhere. */
static void wait_cmr_ended(const diag_ref_t *d, const char *reason)
{
    const char *argv[] = {config_bin, "--bootstrap", broker.bootstrap, "--log-level", "warn", "diagnose", "show",
                          d->id,      NULL};
    char line[512];
    for (int i = 0; i < 20; i++) {
        /* the ending revision's line: "  revision 2  <when>  ended: hits  by agent <id>" */
        if (run_cli(argv, "  revision 2 ", line, sizeof line) == 0 && strstr(line, reason) && strstr(line, "by agent "))
            return;
        usleep(1000000);
    }
    char cmd[600];
    if (FITS(cmd, "grep -E 'diagnos|status|error' %s | tail -20 >&2", config_worker.stderr_path))
        (void)!system(cmd);
    fail_msg("cmr-config did not end diagnosis %s with \"%s\"", d->id, reason);
}

/* --- the JVMs ---------------------------------------------------------------------------- */

typedef struct jvm_agent {
    jvm_proc_t jvm;
    char name[64], instance[33], hostname[256];
    int64_t agent_id;
    const char *java;
} jvm_agent_t;

static bool by_name(const cmr_msg_t *m, const void *ud)
{
    return strcmp(m->u.registration.agent_name, (const char *)ud) == 0;
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

static void command(jvm_agent_t *j, const char *cmd, const char *answer)
{
    assert_int_equal(jvm_proc_send(&j->jvm, cmd), 0);
    assert_int_equal(jvm_proc_expect(&j->jvm, answer, NULL, 0, 30000), 0);
}

/* Starts a JVM, waits for its registration, loads the diagnosis' classes and waits until
 * the instrumenter has read them (Work, loaded after them, instrumented). */
static void start_jvm(jvm_agent_t *j, const char *java)
{
    memset(j, 0, sizeof *j);
    j->java = java;
    uint8_t raw[4];
    char hex[9], agentpath[2048];
    cmr_random_bytes(raw, sizeof raw);
    cmr_hex(raw, sizeof raw, hex);
    assert_true(FITS(j->name, "diag-%s", hex));
    assert_true(FITS(agentpath, "-agentpath:%s=bootstrap=%s,name=%s,trust.keys=%s", agent_so, broker.bootstrap, j->name,
                     trust_pub));
    const char *argv[] = {java, "-Xverify:all", agentpath, "-cp", classpath, "AgentTestApp", NULL};
    assert_int_equal(jvm_proc_start(&j->jvm, argv), 0);
    assert_int_equal(jvm_proc_expect(&j->jvm, "ready", NULL, 0, 30000), 0);
    const cmr_record_t *reg = cmr_peer_wait(&peer, CMR_MSG_AGENT_REGISTRATION, by_name, j->name, 0, 90000);
    assert_non_null(reg);
    assert_true(FITS(j->instance, "%s", reg->msg.u.registration.instance_id));
    assert_true(FITS(j->hostname, "%s", reg->msg.u.registration.hostname));
    j->agent_id = (int64_t)cmr_agent_id(j->name, j->hostname, j->instance);
    command(j, "load demo.DiagHelper demo.DiagAnchor demo.Work", "loaded");
}

static void wait_instrumented(jvm_agent_t *j)
{
    result_match_t work_on = {j->instance, "demo/Work", CMR_COMMAND_APPLIED};
    assert_non_null(cmr_peer_wait(&peer, CMR_MSG_REDEFINE_RESULT, result_of, &work_on, 0, 60000));
}

static void stop_jvm(jvm_agent_t *j)
{
    command(j, "exit", "bye");
    assert_int_equal(jvm_proc_wait(&j->jvm, 30000), 0);
    jvm_proc_cleanup(&j->jvm);
}

/* Whether one line of the JVM's stderr contains every one of the texts (NULL-terminated). */
static bool log_line_has(jvm_agent_t *j, const char *const *texts)
{
    FILE *f = fopen(j->jvm.stderr_path, "r");
    if (!f)
        return false;
    char line[8192];
    bool hit = false;
    while (!hit && fgets(line, sizeof line, f)) {
        hit = true;
        for (size_t i = 0; texts[i] && hit; i++)
            hit = strstr(line, texts[i]) != NULL;
    }
    fclose(f);
    return hit;
}

/* Waits (polling the peer meanwhile) until one stderr line of the JVM has every text. */
static bool wait_log(jvm_agent_t *j, const char *const *texts, int timeout_ms)
{
    int64_t deadline = cmr_mono_ms() + timeout_ms;
    for (;;) {
        if (log_line_has(j, texts))
            return true;
        if (cmr_mono_ms() >= deadline)
            return false;
        cmr_peer_poll(&peer, 100);
    }
}

/* The agent's diagnosis_class line of `action` for one class of diagnosis d. */
static bool wait_class_log(jvm_agent_t *j, const diag_ref_t *d, const char *action, const char *class_name,
                           bool matches_before, int timeout_ms)
{
    char diag[40], cls[128];
    assert_true(FITS(diag, "diagnosis=%s ", d->id));
    assert_true(FITS(cls, "class=\"%s\"", class_name));
    const char *texts[] = {
        "event=agent.diagnosis_class", diag, action, cls, matches_before ? "matches_before=true" : NULL, NULL};
    return wait_log(j, texts, timeout_ms);
}

/* Both classes of the diagnosis carry its probes in the JVM. */
static void wait_installed(jvm_agent_t *j, const diag_ref_t *d)
{
    assert_true(wait_class_log(j, d, "action=installed", "demo/DiagHelper", false, 60000));
    assert_true(wait_class_log(j, d, "action=installed", "demo/DiagAnchor", false, 60000));
}

/* The agent ended the diagnosis by itself for `reason` and gave both classes back the
 * bytes they had before it. */
static void wait_ended_by_agent(jvm_agent_t *j, const diag_ref_t *d, const char *reason, int timeout_ms)
{
    char diag[40], why[64];
    assert_true(FITS(diag, "diagnosis=%s ", d->id));
    assert_true(FITS(why, "reason=%s ", reason));
    const char *ended[] = {"event=agent.diagnosis_ended", diag, "by=agent", why, NULL};
    assert_true(wait_log(j, ended, timeout_ms));
    assert_true(wait_class_log(j, d, "action=removed by=agent", "demo/DiagHelper", true, 1000));
    assert_true(wait_class_log(j, d, "action=removed by=agent", "demo/DiagAnchor", true, 1000));
}

typedef struct run_match {
    int64_t agent_id, id;
    cmr_diag_state_t state;
    cmr_diag_end_reason_t reason;
} run_match_t;

static bool status_with_run(const cmr_msg_t *m, const void *ud)
{
    const run_match_t *r = ud;
    if (m->u.agent_status.agent_id != r->agent_id)
        return false;
    for (size_t i = 0; i < m->u.agent_status.diagnoses.count; i++) {
        const cmr_diagnosis_run_t *x = &m->u.agent_status.diagnoses.items[i];
        if (x->id == r->id && x->state == r->state && (r->state == CMR_DIAG_ACTIVE || x->end_reason == r->reason))
            return true;
    }
    return false;
}

/* An AgentStatus of the JVM reports the diagnosis in that state (and end reason). */
static void wait_status(jvm_agent_t *j, const diag_ref_t *d, cmr_diag_state_t state, cmr_diag_end_reason_t reason)
{
    run_match_t r = {j->agent_id, d->number, state, reason};
    assert_non_null(cmr_peer_wait(&peer, CMR_MSG_AGENT_STATUS, status_with_run, &r, 0, 30000));
}

/* --- the helper's events ------------------------------------------------------------------ */

static uint64_t step_id, inner_id;

typedef struct helper_count {
    uint64_t all;        /* helper events of the agent */
    uint64_t in_context; /* of them, in segments tagged with the diagnosis on a main thread batch */
} helper_count_t;

/* Whether some batch of the agent's segment carries diagnosis id `number`. */
static bool segment_tagged(int64_t agent_id, int64_t segment_id, int64_t number)
{
    for (size_t i = 0; i < peer.nsegs; i++) {
        const cmr_event_batch_t *b = peer.segs[i];
        if (b->agent_id == agent_id && b->segment_id == segment_id && b->diagnosis_id == number)
            return true;
    }
    return false;
}

/* The helper's events of the JVM over every batch seen so far; in_context: those of
 * segments of the main thread (where the anchor runs) tagged with diagnosis `number`. */
static helper_count_t helper_events(jvm_agent_t *j, int64_t number)
{
    helper_count_t c = {0, 0};
    for (size_t i = 0; i < peer.nsegs; i++) {
        const cmr_event_batch_t *b = peer.segs[i];
        if (b->agent_id != j->agent_id)
            continue;
        uint64_t n = 0;
        static cmr_events_decoder_t d; /* large; the test runs on one thread */
        cmr_events_decoder_init(&d, b->packed_events.data, b->packed_events.len, (uint32_t)b->event_count);
        cmr_event_t ev;
        while (cmr_events_decoder_next(&d, &ev) == 1)
            n += ev.method_id == step_id || ev.method_id == inner_id;
        c.all += n;
        if (n && strcmp(b->thread_name, "main") == 0 && segment_tagged(j->agent_id, b->segment_id, number))
            c.in_context += n;
    }
    return c;
}

/* Polls until the JVM's helper events are at least `at_least`, then `settle_ms` more (a
 * stray event would come in meanwhile); the count then. */
static helper_count_t wait_helper(jvm_agent_t *j, int64_t number, uint64_t at_least, int timeout_ms, int settle_ms)
{
    int64_t deadline = cmr_mono_ms() + timeout_ms;
    while (helper_events(j, number).all < at_least && cmr_mono_ms() < deadline)
        cmr_peer_poll(&peer, 100);
    cmr_peer_poll(&peer, settle_ms);
    return helper_events(j, number);
}

/* Four events a step: enter and exit of step and of inner. */
#define STEP_EVENTS 4

/* --- the cases ------------------------------------------------------------------------------ */

static jvm_agent_t jvms[2];
static diag_ref_t first;

/* Context met, not met, across threads: on two JVMs at once (JDK 17 and JDK 25). */
static void test_context_on_two_jvms(void **state)
{
    (void)state;
    start_jvm(&jvms[0], java_bin);
    start_jvm(&jvms[1], java25_bin ? java25_bin : java_bin);
    if (!java25_bin)
        fprintf(stderr, "(no JDK 25 given: the second JVM runs on the first JDK)\n");
    for (int i = 0; i < 2; i++)
        wait_instrumented(&jvms[i]);
    /* nothing records the helper before the diagnosis */
    for (int i = 0; i < 2; i++)
        command(&jvms[i], "diag 10", "diag: sum=");

    const char *ten_minutes[] = {"--ttl", "10m", NULL};
    first = diagnose_start(ten_minutes);
    for (int i = 0; i < 2; i++) {
        wait_installed(&jvms[i], &first);
        char diag[40];
        assert_true(FITS(diag, "diagnosis=%s ", first.id));
        const char *started[] = {"event=agent.diagnosis_started", diag, NULL};
        assert_true(log_line_has(&jvms[i], started));
        wait_status(&jvms[i], &first, CMR_DIAG_ACTIVE, CMR_DIAG_END_NONE);
    }
    for (int i = 0; i < 2; i++)
        assert_int_equal(helper_events(&jvms[i], 0).all, 0);

    /* in the context: 10 steps each */
    for (int i = 0; i < 2; i++)
        command(&jvms[i], "diag 10", "diag: sum=");
    for (int i = 0; i < 2; i++) {
        helper_count_t c = wait_helper(&jvms[i], first.number, 10 * STEP_EVENTS, 30000, 0);
        assert_int_equal(c.all, 10 * STEP_EVENTS);
        assert_int_equal(c.in_context, 10 * STEP_EVENTS);
    }
    /* not in the context: the helper called directly, and by another thread while this
     * one is inside the anchor */
    for (int i = 0; i < 2; i++) {
        command(&jvms[i], "diagdirect 10", "diagdirect: sum=");
        command(&jvms[i], "diagother 10", "diagother: sum=");
    }
    /* in the context again: only these 5 steps are added */
    for (int i = 0; i < 2; i++)
        command(&jvms[i], "diag 5", "diag: sum=");
    for (int i = 0; i < 2; i++) {
        helper_count_t c = wait_helper(&jvms[i], first.number, 15 * STEP_EVENTS, 30000, 1500);
        assert_int_equal(c.all, 15 * STEP_EVENTS);
        assert_int_equal(c.in_context, 15 * STEP_EVENTS);
    }
}

/* Removal by the CMR: diagnose stop. */
static void test_stop_removes(void **state)
{
    (void)state;
    diagnose_stop(&first);
    for (int i = 0; i < 2; i++) {
        assert_true(wait_class_log(&jvms[i], &first, "action=removed by=cmr", "demo/DiagHelper", true, 60000));
        assert_true(wait_class_log(&jvms[i], &first, "action=removed by=cmr", "demo/DiagAnchor", true, 60000));
        char diag[40];
        assert_true(FITS(diag, "diagnosis=%s ", first.id));
        const char *ended[] = {"event=agent.diagnosis_ended", diag, "by=cmr", NULL};
        assert_true(wait_log(&jvms[i], ended, 10000));
        wait_status(&jvms[i], &first, CMR_DIAG_ENDED, CMR_DIAG_END_NONE);
    }
    for (int i = 0; i < 2; i++)
        command(&jvms[i], "diag 10", "diag: sum=");
    for (int i = 0; i < 2; i++) {
        helper_count_t c = wait_helper(&jvms[i], first.number, 15 * STEP_EVENTS + 1, 1500, 0);
        assert_int_equal(c.all, 15 * STEP_EVENTS);
    }
    stop_jvm(&jvms[1]); /* the other cases need one JVM */
}

/* The agent ends a diagnosis at its maximum hits. */
static void test_max_hits(void **state)
{
    (void)state;
    jvm_agent_t *j = &jvms[0];
    const char *opts[] = {"--max-hits", "3", NULL};
    diag_ref_t d = diagnose_start(opts);
    wait_installed(j, &d);
    uint64_t before = helper_events(j, 0).all;
    char diag[40];
    assert_true(FITS(diag, "diagnosis=%s ", d.id));
    const char *ended[] = {"event=agent.diagnosis_ended", diag, NULL};
    for (int n = 0; n < 50 && !log_line_has(j, ended); n++) {
        command(j, "diag 2", "diag: sum=");
        cmr_peer_poll(&peer, 100);
    }
    wait_ended_by_agent(j, &d, "hits", 10000);
    wait_status(j, &d, CMR_DIAG_ENDED, CMR_DIAG_END_HITS);
    uint64_t recorded = wait_helper(j, d.number, 0, 0, 1000).all - before;
    assert_true(recorded >= 3 * 2 * STEP_EVENTS); /* at least the 3 hits, each 2 steps */
    command(j, "diag 2", "diag: sum=");
    assert_int_equal(wait_helper(j, d.number, before + recorded + 1, 1500, 0).all, before + recorded);
    wait_cmr_ended(&d, "ended: hits"); /* for the fleet, by the agent's report */
}

/* The agent ends a diagnosis whose overhead exceeds its budget. */
static void test_budget(void **state)
{
    (void)state;
    jvm_agent_t *j = &jvms[0];
    const char *opts[] = {"--budget", "0.1%", NULL};
    diag_ref_t d = diagnose_start(opts);
    wait_installed(j, &d);
    char diag[40];
    assert_true(FITS(diag, "diagnosis=%s ", d.id));
    const char *ended[] = {"event=agent.diagnosis_ended", diag, NULL};
    /* 4,000 recorded calls (0.24 ms by the agent's estimate) over at least 10 ms of anchor
     * time: 2.4 % at most; judged from 50 ms of anchor time on */
    for (int n = 0; n < 50 && !log_line_has(j, ended); n++) {
        command(j, "diag 2000 10", "diag: sum=");
        cmr_peer_poll(&peer, 50);
    }
    wait_ended_by_agent(j, &d, "budget", 10000);
    wait_status(j, &d, CMR_DIAG_ENDED, CMR_DIAG_END_BUDGET);
    uint64_t before = wait_helper(j, d.number, 0, 0, 1000).all;
    command(j, "diag 10", "diag: sum=");
    assert_int_equal(wait_helper(j, d.number, before + 1, 1500, 0).all, before);
    wait_cmr_ended(&d, "ended: budget");
}

/* The agent ends a diagnosis at its end time while the CMR's workers are down. */
static void test_time_to_live_while_cmr_down(void **state)
{
    (void)state;
    jvm_agent_t *j = &jvms[0];
    const char *opts[] = {"--ttl", "8s", NULL};
    int64_t started = cmr_mono_ms();
    diag_ref_t d = diagnose_start(opts);
    wait_installed(j, &d);
    /* the workers go away (killed); the broker stays */
    jvm_proc_cleanup(&instr_worker);
    jvm_proc_cleanup(&config_worker);
    uint64_t before = helper_events(j, 0).all;
    command(j, "diag 10", "diag: sum=");
    /* (recorded before its end time, else the test proves nothing: a slow machine) */
    assert_true(cmr_mono_ms() - started < 7000);
    assert_int_equal(wait_helper(j, d.number, before + 10 * STEP_EVENTS, 30000, 0).all, before + 10 * STEP_EVENTS);
    assert_int_equal(helper_events(j, d.number).in_context, 10 * STEP_EVENTS);
    wait_ended_by_agent(j, &d, "time_to_live", 20000);
    assert_true(cmr_mono_ms() - started >= 7500); /* not before its end time (8 s after start) */
    wait_status(j, &d, CMR_DIAG_ENDED, CMR_DIAG_END_TIME_TO_LIVE);
    before = wait_helper(j, d.number, 0, 0, 500).all;
    command(j, "diag 10", "diag: sum=");
    assert_int_equal(wait_helper(j, d.number, before + 1, 1500, 0).all, before);
    stop_jvm(j);
}

static int setup(void **state)
{
    (void)state;
    cmr_log_set_level(CMR_LOG_WARN);
    step_id = cmr_method_id("demo/DiagHelper", "step", "(I)J");
    inner_id = cmr_method_id("demo/DiagHelper", "inner", "(I)J");
    if (!mkdtemp(workdir) || broker_proc_start(&broker, broker_bin, NULL) != 0 ||
        cmr_peer_start(&peer, broker.bootstrap) != 0)
        return -1;
    char db[256], env[256];
    if (!FITS(signing_opt, "trust.signing_key=%s/cmr.key", workdir) || !FITS(trust_pub, "%s/cmr.pub", workdir) ||
        !FITS(db, "%s/instrumenter", workdir) || !FITS(env, "%s/env.yaml", workdir))
        return -1;
    const char *keygen[] = {config_bin, "keygen", "--dir", workdir, "--name", "cmr", NULL};
    if (run_cli(keygen, NULL, NULL, 0) != 0)
        return -1;
    write_text(env, env_yaml);
    const char *apply[] = {config_bin, "--bootstrap", broker.bootstrap, "--log-level", "warn", "apply", env, NULL};
    if (run_cli(apply, NULL, NULL, 0) != 0)
        return -1;
    const char *cfg[] = {config_bin, "--bootstrap", broker.bootstrap, "-X", signing_opt, "run", NULL};
    const char *ins[] = {instr_bin,
                         "--bootstrap",
                         broker.bootstrap,
                         "--db",
                         db,
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
    for (int i = 0; i < 2; i++)
        jvm_proc_cleanup(&jvms[i].jvm); /* (a zeroed or cleaned-up one: nothing to do) */
    jvm_proc_cleanup(&config_worker);
    jvm_proc_cleanup(&instr_worker);
    cmr_peer_stop(&peer);
    broker_proc_stop(&broker);
    char cmd[300];
    return FITS(cmd, "rm -rf '%s'", workdir) && system(cmd) == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    if (argc != 7 && argc != 8) {
        fprintf(stderr, "usage: %s BROKER CMR_CONFIG CMR_INSTRUMENTER JAVA AGENT_SO CLASSPATH [JAVA25]\n", argv[0]);
        return 2;
    }
    broker_bin = argv[1];
    config_bin = argv[2];
    instr_bin = argv[3];
    java_bin = argv[4];
    agent_so = argv[5];
    classpath = argv[6];
    java25_bin = argc == 8 && access(argv[7], X_OK) == 0 ? argv[7] : NULL;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_context_on_two_jvms),
        cmocka_unit_test(test_stop_removes),
        cmocka_unit_test(test_max_hits),
        cmocka_unit_test(test_budget),
        cmocka_unit_test(test_time_to_live_while_cmr_down), /* last: kills the workers */
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

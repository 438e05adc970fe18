/*
 * test_e2e_short_jvm.c - a JVM that lives about one second is monitored (issue 15, "Time
 * to first instrumented call"): the real cmr-config and cmr-instrumenter workers on the
 * embedded broker (loopback, a free port), already running; then one JVM with the agent
 * runs tests/agent's ShortJob for 1,000 ms counted from its start (an in-memory H2
 * database from Debian's h2.jar: a few hundred org.h2 classes loaded within its first
 * half second), with an environment that records every method of org.h2.*. Asserted:
 * A first such JVM warms the CMR up: it gets its org.h2 classes by Redefine
 * (agent.redefine_latency classes=N, N > 0); then, for a second one:
 *   - the JVM ends normally within the bound;
 *   - the agent was configured less than a second after its start (agent.configured
 *     since_start_ms);
 *   - the instrumenter sent it the classes it had granted for the first JVM ahead of their
 *     load (ClassGrants, docs/AGENT.md "Classes granted ahead"): the agent kept them, none
 *     refused, and org.h2 classes loaded instrumented from them (agent.granted_ahead_stats
 *     load_hits), which the instrumenter did not redefine again (instr.stopped
 *     cached_at_agent, at the end of the group);
 *   - the probes of those classes fired and their events reached cmr.events (the topic
 *     cmr-ingest reads): EventBatches of that agent, read back from the topic.
 * Then the agent's cache of instrumented classes (agent.cache.dir) with the same workers: a
 * JVM of 2 s writes the classes it loaded instrumented (granted ahead) to the cache; its
 * restart (same agent name and directory, the environment taken from the previous run,
 * classes granted ahead turned off so that only the cache can serve them) gets those
 * classes instrumented at load (agent.cache_stats load_hits, none refused), the
 * instrumenter sends no Redefine for them (instr.stopped cached_at_agent) and the probes'
 * events reach cmr.events. Last, a new instrumenter worker with an empty store of its own
 * sends the next JVM the grants the first one published on cmr.grants, and that JVM loads
 * them instrumented.
 * Skipped (77) where /usr/share/java/h2.jar is missing (Debian's libh2-java).
 *
 * Usage: test_e2e_short_jvm BROKER CMR_CONFIG CMR_INSTRUMENTER JAVA AGENT_SO CLASSPATH
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "broker_proc.h"
#include "cmr/clock.h"
#include "cmr/ids.h"
#include "cmr/log.h"
#include "cmr/reader.h"
#include "cmr/topics.h"
#include "cmr/wire.h"
#include "jvm_proc.h"

#define H2_JAR "/usr/share/java/h2.jar"

static const char *broker_bin, *config_bin, *instr_bin, *java_bin, *agent_so, *classpath;
static broker_proc_t broker;
static cmr_conf_t *conf; /* kafka.bootstrap.servers of the broker */
static jvm_proc_t config_worker, instr_worker;
static char workdir[] = "/tmp/cmr-e2e-short-XXXXXX";
static char signing_opt[300], trust_pub[256];

#define FITS(buf, ...) (snprintf((buf), sizeof(buf), __VA_ARGS__) < (int)sizeof(buf))

static const char env_yaml[] = "version: 1\n"
                               "environments:\n"
                               "  - id: shortjvm\n"
                               "    sensors:\n"
                               "      - {sensor: invocation-sequence, class: \"org.h2.*\", method: \"*\"}\n"
                               "mappings:\n"
                               "  - {agent: \"short-*\", address: \"*\", environment: shortjvm}\n";

static int run_tool(const char *const *argv)
{
    jvm_proc_t p;
    if (jvm_proc_start(&p, argv) != 0)
        return -1;
    int rc = jvm_proc_wait(&p, 60000);
    jvm_proc_cleanup(&p);
    return rc == 0 ? 0 : -1;
}

/* How many stderr lines of the process hold `needle`. */
static int stderr_count(jvm_proc_t *j, const char *needle)
{
    FILE *f = fopen(j->stderr_path, "r");
    if (!f)
        return 0;
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

/* The number after `key=` in the first stderr line of the JVM holding `event`, or -1. */
static long long stderr_value(jvm_proc_t *j, const char *event, const char *key)
{
    FILE *f = fopen(j->stderr_path, "r");
    if (!f)
        return -1;
    char line[4096], pat[128];
    long long v = -1;
    snprintf(pat, sizeof pat, " %s=", key);
    while (v < 0 && fgets(line, sizeof line, f))
        if (strstr(line, event)) {
            const char *at = strstr(line, pat);
            if (at)
                v = strtoll(at + strlen(pat), NULL, 10);
        }
    fclose(f);
    return v;
}

/* Copies the first stderr line of the JVM holding `event` to the test's output. */
static void print_line(jvm_proc_t *j, const char *event)
{
    FILE *f = fopen(j->stderr_path, "r");
    char line[4096];
    while (f && fgets(line, sizeof line, f))
        if (strstr(line, event)) {
            fprintf(stderr, "# %s", line);
            break;
        }
    if (f)
        fclose(f);
}

/* The text after `key=` (up to a space or quote) in the first stderr line of the JVM holding
 * `event`, in out; false when there is none. */
static bool stderr_text(jvm_proc_t *j, const char *event, const char *key, char *out, size_t len)
{
    FILE *f = fopen(j->stderr_path, "r");
    if (!f)
        return false;
    char line[4096], pat[128];
    bool found = false;
    snprintf(pat, sizeof pat, " %s=", key);
    while (!found && fgets(line, sizeof line, f)) {
        const char *at = strstr(line, event) ? strstr(line, pat) : NULL;
        if (!at)
            continue;
        at += strlen(pat);
        if (*at == '"')
            at++;
        size_t n = strcspn(at, "\" \n");
        if (n < len) {
            memcpy(out, at, n);
            out[n] = 0;
            found = true;
        }
    }
    fclose(f);
    return found;
}

/* Events in the EventBatches of agent_id on cmr.events written since since_ms, reading
 * until some are found or timeout_ms passes. */
static uint64_t events_on_topic(int64_t agent_id, int64_t since_ms, int timeout_ms)
{
    char err[512];
    cmr_reader_t *r = cmr_reader_new(conf, cmr_topic_name(CMR_TOPIC_EVENTS), since_ms, err, sizeof err);
    if (!r) {
        fprintf(stderr, "# reader: %s\n", err);
        return 0;
    }
    uint64_t n = 0;
    int64_t deadline = cmr_mono_ms() + timeout_ms;
    while (n == 0 && cmr_mono_ms() < deadline) {
        cmr_reader_rec_t rec;
        int got = cmr_reader_poll(r, 100, &rec);
        if (got < 0)
            break;
        if (got == 0)
            continue;
        cmr_msg_t m;
        if (cmr_msg_decode(rec.payload, rec.len, &m, err, sizeof err) != CMR_WIRE_OK)
            continue;
        if (m.type == CMR_MSG_EVENT_BATCH && m.u.event_batch.agent_id == agent_id)
            n += (uint64_t)m.u.event_batch.event_count;
        cmr_msg_free(&m);
    }
    cmr_reader_free(r);
    return n;
}

static jvm_proc_t jvm; /* the JVM of the test, cleaned up by teardown when an assertion fails */
static bool jvm_started;

/* Runs ShortJob for run_ms ms in a JVM with the agent named `name` (short-<random> when
 * name is "" on entry) and the agent options `extra` (",key=value..." or "") and waits for its
 * end; its result line in `out`. */
static void run_short_jvm_opts(jvm_proc_t *j, char *name, size_t name_len, const char *extra, const char *run_ms,
                               char *out, size_t out_len)
{
    char agentpath[2048], cp[2048], hex[9];
    if (!name[0]) {
        uint8_t raw[4];
        cmr_random_bytes(raw, sizeof raw);
        cmr_hex(raw, sizeof raw, hex);
        assert_true(snprintf(name, name_len, "short-%s", hex) < (int)name_len);
    }
    /* kafka.fetch.wait.max.ms=5: the embedded broker answers a fetch only when that wait
     * expires (librdkafka's default, 500 ms, would delay every command by up to that; a
     * real broker answers as soon as a command arrives) */
    assert_true(FITS(agentpath, "-agentpath:%s=bootstrap=%s,name=%s,trust.keys=%s,kafka.fetch.wait.max.ms=5%s",
                     agent_so, broker.bootstrap, name, trust_pub, extra));
    assert_true(FITS(cp, "%s:%s", classpath, H2_JAR));
    const char *argv[] = {java_bin, agentpath, "-cp", cp, "ShortJob", run_ms, NULL};
    assert_int_equal(jvm_proc_start(j, argv), 0);
    jvm_started = true;
    if (jvm_proc_expect(j, "shortjob:", out, out_len, 60000) != 0) {
        jvm_proc_print_stderr_tail(j); /* why the JVM gave no result line */
        fail_msg("ShortJob printed no result line");
    }
    assert_int_equal(jvm_proc_wait(j, 60000), 0);
}

/* ShortJob for 1,000 ms, the agent named short-<random> (in `name`). */
static void run_short_jvm(jvm_proc_t *j, char *name, size_t name_len, char *out, size_t out_len)
{
    name[0] = 0;
    run_short_jvm_opts(j, name, name_len, "", "1000", out, out_len);
}

static void test_one_second_jvm_is_monitored(void **state)
{
    (void)state;
    /* a warm CMR: both workers have their partitions before the JVM starts */
    bool ready = false;
    for (int waited = 0; waited < 60000 && !ready; waited += 100) {
        ready = jvm_proc_stderr_has(&instr_worker, "instr.partitions_assigned") &&
                jvm_proc_stderr_has(&config_worker, "partitions_assigned");
        if (!ready)
            usleep(100 * 1000);
    }
    assert_true(ready);

    /* a warm CMR, as production is: one JVM of the environment served before (the first
     * answers of a fresh CMR pay for its consumers' first fetches and producers' first
     * sends: a few hundred ms on the embedded broker) */
    char name[64], out[256] = "";
    run_short_jvm(&jvm, name, sizeof name, out, sizeof out);
    long long warm_redefined = stderr_value(&jvm, "event=agent.redefine_latency", "classes");
    fprintf(stderr, "# warm-up JVM: %s | %lld classes redefined\n", out, warm_redefined);
    jvm_proc_cleanup(&jvm);
    jvm_started = false;
    assert_true(warm_redefined > 0);

    jvm_proc_t *j = &jvm;
    int64_t started_ms = cmr_wall_ms() - 1000; /* clocks of one machine; a margin all the same */
    run_short_jvm(j, name, sizeof name, out, sizeof out);
    long long since_start = stderr_value(j, "event=agent.configured", "since_start_ms");
    long long instrumented = stderr_value(j, "event=agent.redefine_latency", "instrumented");
    long long kept = stderr_value(j, "event=agent.granted_ahead_stats", "kept");
    long long refused = stderr_value(j, "event=agent.granted_ahead_stats", "refused");
    long long ahead_hits = stderr_value(j, "event=agent.granted_ahead_stats", "load_hits");
    fprintf(stderr,
            "# %s | configured after %lld ms, %lld classes instrumented before the JVM ended; granted ahead: %lld "
            "kept, %lld refused, %lld loaded instrumented from them\n",
            out, since_start, instrumented, kept, refused, ahead_hits);
    print_line(j, "event=agent.stopped");
    print_line(j, "event=agent.redefine_latency");
    assert_true(since_start >= 0 && since_start < 1000);
    assert_true(instrumented > 0);
    assert_true(kept > 0);
    assert_int_equal(refused, 0);
    assert_true(ahead_hits > 0);

    char instance[64], host[256];
    assert_true(stderr_text(j, "event=agent.started", "instance", instance, sizeof instance));
    assert_true(stderr_text(j, "event=agent.started", "host", host, sizeof host));
    uint64_t events = events_on_topic((int64_t)cmr_agent_id(name, host, instance), started_ms, 30000);
    fprintf(stderr, "# events on cmr.events from the JVM: %" PRIu64 "\n", events);
    assert_true(events > 0);
    jvm_proc_cleanup(j); /* its log too: the next test starts another JVM in `jvm` */
    jvm_started = false;
}

/* The agent's cache of instrumented classes with the real workers: a JVM with
 * agent.cache.dir gets its org.h2 classes redefined with grants and keeps them; a restart
 * of the same agent name (its environment from the previous run, recorded in the
 * directory) gets them instrumented at load: served from the cache (agent.cache_stats
 * load_hits), the instrumenter sends no Redefine for them (instr.stopped cached_at_agent)
 * and their probes' events reach cmr.events. Last of the group: it stops the instrumenter
 * to read its counters. */
static void test_restarted_jvm_uses_cache(void **state)
{
    (void)state;
    char name[64], out[256] = "", cache_opt[400], hex[9];
    uint8_t raw[4];
    cmr_random_bytes(raw, sizeof raw);
    cmr_hex(raw, sizeof raw, hex);
    assert_true(FITS(name, "short-cache-%s", hex));
    assert_true(FITS(cache_opt, ",agent.cache.dir=%s/cache", workdir));
    bool ready = false;
    for (int waited = 0; waited < 60000 && !ready; waited += 100) {
        ready = jvm_proc_stderr_has(&instr_worker, "instr.partitions_assigned") &&
                jvm_proc_stderr_has(&config_worker, "partitions_assigned");
        if (!ready)
            usleep(100 * 1000);
    }
    assert_true(ready);

    /* the first JVM: 2 s; its classes come ahead of their load (the CMR is warm), and those
     * it loads are written to the cache as they are shipped */
    jvm_proc_t *j = &jvm;
    run_short_jvm_opts(j, name, sizeof name, cache_opt, "2000", out, sizeof out);
    long long instrumented1 = stderr_value(j, "event=agent.redefine_latency", "instrumented");
    long long written = stderr_value(j, "event=agent.cache_stats", "written");
    fprintf(stderr, "# first JVM: %s | %lld classes instrumented, %lld grants written\n", out, instrumented1, written);
    print_line(j, "event=agent.cache_stats");
    assert_true(instrumented1 > 0);
    assert_true(written > 0);
    jvm_proc_cleanup(j);
    jvm_started = false;

    /* its restart: same name, same directory, nothing granted ahead (the cache alone) */
    char restart_opt[500];
    assert_true(FITS(restart_opt, "%s,agent.preload.max.bytes=0", cache_opt));
    int64_t started_ms = cmr_wall_ms() - 1000;
    run_short_jvm_opts(j, name, sizeof name, restart_opt, "1000", out, sizeof out);
    char source[64] = "";
    assert_true(stderr_text(j, "event=agent.cache_opened", "from", source, sizeof source));
    long long load_hits = stderr_value(j, "event=agent.cache_stats", "load_hits");
    long long refused = stderr_value(j, "event=agent.cache_stats", "refused");
    long long redefined2 = stderr_value(j, "event=agent.redefine_latency", "classes");
    fprintf(stderr,
            "# restarted JVM: %s | environment from %s, %lld classes instrumented at load from the cache, %lld "
            "refused, %lld still redefined\n",
            out, source, load_hits, refused, redefined2 < 0 ? 0 : redefined2);
    print_line(j, "event=agent.cache_stats");
    print_line(j, "event=agent.redefine_latency");
    assert_string_equal(source, "previous_run");
    assert_true(load_hits > 0);
    assert_int_equal(refused, 0);
    /* the classes the first JVM had redefined load instrumented: none of them waits for a
     * Redefine again (those still redefined are ones the first JVM had not got to) */
    assert_true(load_hits >= written / 2);

    char instance[64], host[256];
    assert_true(stderr_text(j, "event=agent.started", "instance", instance, sizeof instance));
    assert_true(stderr_text(j, "event=agent.started", "host", host, sizeof host));
    uint64_t events = events_on_topic((int64_t)cmr_agent_id(name, host, instance), started_ms, 30000);
    fprintf(stderr, "# events on cmr.events from the restarted JVM: %" PRIu64 "\n", events);
    assert_true(events > 0);

    /* the instrumenter saw the applied digests and sent no Redefine for those classes */
    kill(instr_worker.pid, SIGTERM);
    assert_int_equal(jvm_proc_wait(&instr_worker, 30000), 0);
    long long cached_at_agent = stderr_value(&instr_worker, "event=instr.stopped", "cached_at_agent");
    print_line(&instr_worker, "event=instr.stopped");
    assert_true(cached_at_agent > 0);
}

/* A new cmr-instrumenter worker with a store of its own (as on another host, or the same
 * worker restarted with its store lost): it reads the grants the first worker published on
 * cmr.grants and sends them ahead to the next JVM, which loads them instrumented, although
 * this worker has served no JVM yet. Runs after test_restarted_jvm_uses_cache, which
 * stopped the first worker. */
static void test_new_worker_sends_ahead_what_was_published(void **state)
{
    (void)state;
    char db[256];
    assert_true(FITS(db, "%s/instrumenter-2", workdir));
    jvm_proc_cleanup(&instr_worker);
    const char *ins[] = {
        instr_bin, "--bootstrap", broker.bootstrap, "--db", db, "-X", signing_opt, "-X", "kafka.fetch.wait.max.ms=5",
        "run",     NULL};
    assert_int_equal(jvm_proc_start(&instr_worker, ins), 0);
    /* ready once every partition of cmr.classes is live: a new worker first replays what
     * the partitions hold into its store, their records held back meanwhile */
    int partitions = cmr_topic_layout(CMR_TOPIC_CLASSES)->partitions;
    bool ready = false;
    for (int waited = 0; waited < 120000 && !ready; waited += 100) {
        ready = stderr_count(&instr_worker, "event=instr.partition_live") >= partitions;
        if (!ready)
            usleep(100 * 1000);
    }
    assert_true(ready);

    char name[64], out[256] = "";
    jvm_proc_t *j = &jvm;
    run_short_jvm(j, name, sizeof name, out, sizeof out);
    long long kept = stderr_value(j, "event=agent.granted_ahead_stats", "kept");
    long long ahead_hits = stderr_value(j, "event=agent.granted_ahead_stats", "load_hits");
    fprintf(stderr, "# JVM served by the new worker: %s | granted ahead: %lld kept, %lld loaded instrumented\n", out,
            kept, ahead_hits);
    print_line(j, "event=agent.redefine_latency");
    print_line(j, "event=agent.configured");
    print_line(j, "event=agent.granted_ahead ");
    print_line(&instr_worker, "event=instr.granted_ahead");
    if (kept <= 0)
        jvm_proc_print_stderr_tail(&instr_worker);
    assert_true(kept > 0);
    assert_true(ahead_hits > 0);
    jvm_proc_cleanup(j);
    jvm_started = false;

    kill(instr_worker.pid, SIGTERM);
    assert_int_equal(jvm_proc_wait(&instr_worker, 30000), 0);
    long long ahead_jvms = stderr_value(&instr_worker, "event=instr.stopped", "ahead_jvms");
    print_line(&instr_worker, "event=instr.stopped");
    assert_true(ahead_jvms >= 1);
}

static int setup(void **state)
{
    (void)state;
    cmr_log_set_level(CMR_LOG_WARN);
    char path[256], db[256];
    if (!mkdtemp(workdir) || !FITS(signing_opt, "trust.signing_key=%s/cmr.key", workdir) ||
        !FITS(trust_pub, "%s/cmr.pub", workdir) || !FITS(path, "%s/env.yaml", workdir) ||
        !FITS(db, "%s/instrumenter", workdir))
        return -1;
    conf = broker_proc_start_conf(&broker, broker_bin);
    if (!conf)
        return -1;
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fputs(env_yaml, f);
    fclose(f);
    const char *keygen[] = {config_bin, "keygen", "--dir", workdir, "--name", "cmr", NULL};
    const char *apply[] = {config_bin, "--bootstrap", broker.bootstrap, "--log-level", "warn", "apply", path, NULL};
    if (run_tool(keygen) != 0 || run_tool(apply) != 0)
        return -1;
    /* the consumers of the control plane as the benchmarks run them on the embedded broker,
     * which answers a fetch only when fetch.wait.max.ms expires */
    const char *cfg[] = {
        config_bin, "--bootstrap", broker.bootstrap, "-X", signing_opt, "-X", "kafka.fetch.wait.max.ms=5", "run", NULL};
    const char *ins[] = {
        instr_bin, "--bootstrap", broker.bootstrap, "--db", db, "-X", signing_opt, "-X", "kafka.fetch.wait.max.ms=5",
        "run",     NULL};
    if (jvm_proc_start(&config_worker, cfg) != 0 || jvm_proc_start(&instr_worker, ins) != 0)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (jvm_started)
        jvm_proc_cleanup(&jvm);
    jvm_proc_cleanup(&config_worker);
    jvm_proc_cleanup(&instr_worker);
    broker_proc_stop(&broker);
    cmr_conf_destroy(conf);
    char cmd[300];
    return FITS(cmd, "rm -rf '%s'", workdir) && system(cmd) == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    if (argc != 7) {
        fprintf(stderr, "usage: %s BROKER CMR_CONFIG CMR_INSTRUMENTER JAVA AGENT_SO CLASSPATH\n", argv[0]);
        return 2;
    }
    if (access(H2_JAR, R_OK) != 0) {
        fprintf(stderr, "%s missing (Debian's libh2-java): skipped\n", H2_JAR);
        return 77;
    }
    broker_bin = argv[1];
    config_bin = argv[2];
    instr_bin = argv[3];
    java_bin = argv[4];
    agent_so = argv[5];
    classpath = argv[6];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_second_jvm_is_monitored),
        cmocka_unit_test(test_restarted_jvm_uses_cache),
        cmocka_unit_test(test_new_worker_sends_ahead_what_was_published),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

/*
 * test_ingest_hosts.c - cmr-ingest workers that share nothing but the cluster: each runs
 * as its own process with its own store root (as on different hosts), against the
 * embedded broker, fed with many multi-batch traces through the real transport.
 *
 * During ingest one worker is killed (SIGKILL: nothing flushed, nothing committed on its
 * way out) and another one is added. A partition that moves to a worker whose store lacks
 * its history is restored from cmr.events (ing_restore.c). At the end the other workers
 * stop, so that the added worker owns every partition: its store must then list exactly
 * what a reference store built in-process from every batch once lists (every trace once,
 * complete, with all its events: nothing lost, nothing counted twice), and its log must
 * show that partitions were restored from the topic. With two workers and with three.
 *
 * Before that, while several workers own the partitions, the HTTP API of one worker must
 * list every trace exactly once, complete, through the fan-out to the others (no
 * "partial"), and a trace asked of a worker by id is answered by its partition's owner.
 * The same for the metrics of NENVS environments (cmr.metrics is keyed by environment):
 * the ranking of every environment from one worker has each environment once, with its
 * count, in order; a query of one environment, and one series, answer from any worker.
 *
 * A restore whose range the topic no longer holds in full (the embedded broker keeps about
 * 5 MiB per partition) counts the missing offsets: loss is never silent.
 *
 * Loopback only, free ports (HTTP port 0, the broker picks its own), everything under a
 * temporary directory that is removed.
 *
 * Usage: test_ingest_hosts PATH-TO-cmr-broker PATH-TO-cmr-ingest
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker_proc.h"
#include "cmr/clock.h"
#include "cmr/histogram.h"
#include "cmr/ids.h"
#include "cmr/ingest.h"
#include "cmr/kafka.h"
#include "cmr/log.h"
#include "cp_support.h"
#include "http_client.h"
#include "ing_synth.h"

#define NTRACES 450   /* sent in three equal phases */
#define PER_BATCH 2   /* events per batch: every segment has several batches */
#define MAX_WORKERS 4 /* the scenario's workers plus the added one */
#define NENVS 12      /* environments with metrics */

static const char *broker_bin, *ingest_bin;
static broker_proc_t broker;
static cmr_conf_t *conf;
static char tmp[256];
static uint64_t A1, A2;

static int setup(void **state)
{
    (void)state;
    cmr_log_set_level(CMR_LOG_WARN);
    if (broker_proc_start(&broker, broker_bin, NULL) != 0)
        return -1;
    conf = cmr_conf_new();
    cmr_conf_set(conf, "kafka.bootstrap.servers", broker.bootstrap, "test");
    return cp_tmpdir(tmp, sizeof tmp);
}

static int teardown(void **state)
{
    (void)state;
    cmr_conf_destroy(conf);
    broker_proc_stop(&broker);
    if (getenv("CMR_TEST_KEEP")) /* the workers' logs and stores, to look at */
        fprintf(stderr, "kept %s\n", tmp);
    else
        cp_rmrf(tmp);
    return 0;
}

/* --- the traffic: trace k = a root segment (JVM 1) and a remote child (JVM 2) ------------ */

typedef struct traffic {
    synth_seg_t segs[NTRACES][2];
} traffic_t;

static void make_trace(synth_seg_t s[2], int k, uint64_t base)
{
    uint8_t tid[16];
    synth_trace_id(0x70000 + (uint64_t)k, tid);
    uint64_t t = base + (uint64_t)k * 1000000;
    synth_seg_init(&s[0], tid, A1, 1 + (uint64_t)k, 1, "main", NULL);
    synth_enter(&s[0], 0x11, t);
    for (int i = 0; i < 3; i++) {
        synth_enter(&s[0], 0x12 + (uint64_t)i, t + 100 + (uint64_t)i * 100);
        synth_exit(&s[0], 0x12 + (uint64_t)i, t + 150 + (uint64_t)i * 100);
    }
    int64_t f = synth_fork(&s[0], t + 500);
    synth_exit(&s[0], 0x11, t + 90000);
    cmr_parent_link_t l = {(int64_t)A1, 1 + k, f};
    synth_seg_init(&s[1], tid, A2, 5000 + (uint64_t)k, 7, "http-exec", &l);
    synth_enter(&s[1], 0x21, t + 1000);
    synth_enter(&s[1], 0x22, t + 2000);
    synth_exit(&s[1], 0x22, t + 3000);
    synth_exit(&s[1], 0x21, t + 4000);
}

static traffic_t *traffic_new(void)
{
    traffic_t *tr = calloc(1, sizeof *tr);
    assert_non_null(tr);
    uint64_t base = (uint64_t)cmr_wall_ns() - 600ull * 1000000000ull;
    for (int k = 0; k < NTRACES; k++)
        make_trace(tr->segs[k], k, base);
    return tr;
}

static void traffic_free(traffic_t *tr)
{
    for (int k = 0; k < NTRACES; k++)
        for (int i = 0; i < 2; i++)
            synth_seg_free(&tr->segs[k][i]);
    free(tr);
}

/* Sends traces [from, to): the child segment first for odd k, every fifth batch twice (a
 * producer retry: a duplicate the workers must drop). */
static void send_traces(cmr_producer_t *p, traffic_t *tr, int from, int to)
{
    char err[256];
    int nth = 0;
    for (int k = from; k < to; k++)
        for (int j = 0; j < 2; j++) {
            cmr_event_batch_t *b;
            size_t n = synth_batches(&tr->segs[k][k % 2 ? 1 - j : j], PER_BATCH, &b);
            for (size_t i = 0; i < n; i++)
                for (int rep = 0; rep < (nth++ % 5 == 0 ? 2 : 1); rep++) {
                    int rc;
                    while ((rc = cmr_producer_send_batch(p, &b[i], NULL, err, sizeof err)) == CMR_SEND_QUEUE_FULL)
                        cmr_producer_flush(p, 100);
                    assert_int_equal(rc, CMR_SEND_OK);
                }
            synth_batches_free(b, n);
        }
    assert_int_equal(cmr_producer_flush(p, 30000), 0);
}

/* Every batch once, in process, into one partition store under root. */
static void build_reference(traffic_t *tr, const char *root)
{
    char err[512];
    cmr_store_opts_t o = {.sync = false};
    cmr_ingest_engine_t *e = cmr_ingest_engine_new(root, &o, err, sizeof err);
    assert_non_null(e);
    assert_int_equal(cmr_ingest_engine_open_partition(e, 0, 0), 0);
    for (int k = 0; k < NTRACES; k++)
        for (int j = 0; j < 2; j++) {
            cmr_event_batch_t *b;
            size_t n = synth_batches(&tr->segs[k][j], PER_BATCH, &b);
            assert_true(n >= 2); /* multi-batch segments */
            for (size_t i = 0; i < n; i++)
                assert_int_equal(cmr_ingest_engine_add_batch(e, 0, &b[i], err, sizeof err), 1);
            synth_batches_free(b, n);
        }
    assert_int_equal(cmr_ingest_engine_flush(e), 0);
    cmr_ingest_engine_free(e);
}

/* --- the workers ---------------------------------------------------------------------- */

typedef struct worker {
    cp_proc_t proc;
    char store[512], log[512];
    bool running;
} worker_t;

static void start_worker(worker_t *w, int i)
{
    snprintf(w->store, sizeof w->store, "%s/host%d/store", tmp, i);
    snprintf(w->log, sizeof w->log, "%s/host%d.log", tmp, i);
    const char *argv[] = {ingest_bin,    "run",
                          "--bootstrap", broker.bootstrap,
                          "--store",     w->store,
                          "--http-port", "0",
                          "-X",          "kafka.session.timeout.ms=6000",
                          "-X",          "kafka.heartbeat.interval.ms=500",
                          "-X",          "kafka.topic.metadata.refresh.interval.ms=1000",
                          "-X",          "ingest.commit.interval_ms=20",
                          "-X",          "ingest.sync=false",
                          "--log-level", "info",
                          NULL};
    assert_int_equal(cp_proc_start(&w->proc, argv, w->log), 0);
    assert_int_equal(cp_proc_wait_log(&w->proc, "event=ingest.started", 30000), 0);
    w->running = true;
}

/* What `cmr-ingest traces` prints for a store root (malloc'd), NULL on failure. */
static char *list(const char *root)
{
    const char *argv[] = {ingest_bin, "--log-level", "error", "--store", root, "traces", "--limit", "1000", NULL};
    char *out = NULL;
    if (cp_run(argv, &out) != 0) {
        free(out);
        return NULL;
    }
    return out;
}

static int count_complete(const char *root)
{
    char *l = list(root);
    int n = 0;
    for (const char *p = l; p && (p = strstr(p, " complete ")); p++)
        n++;
    free(l);
    return n;
}

/* The sum of key=N over the worker's log lines with `event`. */
static int64_t log_sum(const char *log, const char *event, const char *key)
{
    FILE *f = fopen(log, "r");
    char line[2048];
    int64_t sum = 0;
    while (f && fgets(line, sizeof line, f)) {
        const char *v;
        if (strstr(line, event) && (v = strstr(line, key)))
            sum += strtoll(v + strlen(key), NULL, 10);
    }
    if (f)
        fclose(f);
    return sum;
}

/* Partitions the worker holds now, by its log (trace and metrics stores). */
static int owned(const worker_t *w)
{
    return cp_proc_count_log(&w->proc, "partition_opened") - cp_proc_count_log(&w->proc, "partition_closed");
}

/* Waits until the running workers hold every partition of cmr.events and cmr.metrics
 * between them, each some, for 2 s in a row (the group settled). */
static void wait_settled(worker_t *w, int nw)
{
    int total = cmr_topic_layout(CMR_TOPIC_EVENTS)->partitions + cmr_topic_layout(CMR_TOPIC_METRICS)->partitions;
    int64_t deadline = cp_mono_ms() + 90000, since = 0;
    while (cp_mono_ms() < deadline) {
        int sum = 0;
        bool each = true;
        for (int i = 0; i < nw; i++)
            if (w[i].running) {
                int o = owned(&w[i]);
                sum += o;
                each = each && o > 0;
            }
        if (sum == total && each) {
            if (!since)
                since = cp_mono_ms();
            if (cp_mono_ms() - since >= 2000)
                return;
        } else {
            since = 0;
        }
        cmr_sleep_ms(100);
    }
    fail_msg("the group did not settle");
}

/* Waits until the running workers' stores hold `want` complete traces between them (each
 * trace is in one partition; only running workers' stores are counted, and the stale
 * stores of partitions that moved away are not: call before any partition moved back). */
static void wait_stored(worker_t *w, int nw, int want)
{
    int64_t deadline = cp_mono_ms() + 90000;
    int got = 0;
    while (cp_mono_ms() < deadline) {
        got = 0;
        for (int i = 0; i < nw; i++)
            if (w[i].running)
                got += count_complete(w[i].store);
        if (got >= want)
            break;
        cmr_sleep_ms(200);
    }
    assert_true(got >= want);
    cmr_sleep_ms(1500); /* the transport commits marked offsets every second */
}

/* The port the worker's HTTP API listens on (its log), or -1. */
static int worker_port(const worker_t *w)
{
    FILE *f = fopen(w->log, "r");
    char line[2048];
    int port = -1;
    while (f && fgets(line, sizeof line, f)) {
        char *p = strstr(line, "event=ingest.http_listening");
        if (p && (p = strstr(p, "port=")))
            port = atoi(p + 5);
    }
    if (f)
        fclose(f);
    return port;
}

/* GET target from the worker: the status, the body parsed (NULL when not JSON). */
static int get_json(const worker_t *w, const char *target, json_t **body)
{
    char *answer = NULL;
    int status = hc_get("127.0.0.1", worker_port(w), target, &answer);
    const char *b = answer ? strstr(answer, "\r\n\r\n") : NULL;
    *body = b ? json_loads(b + 4, 0, NULL) : NULL;
    free(answer);
    return status;
}

/* Complete traces in a list answer; fails on a trace listed twice. */
static int complete_once(json_t *list)
{
    json_t *traces = json_object_get(list, "traces"), *t;
    json_t *seen = json_object();
    size_t i;
    int n = 0;
    json_array_foreach(traces, i, t)
    {
        const char *id = json_string_value(json_object_get(t, "trace_id"));
        assert_non_null(id);
        assert_null(json_object_get(seen, id)); /* never twice */
        json_object_set_new(seen, id, json_true());
        n += json_is_true(json_object_get(t, "complete"));
    }
    json_decref(seen);
    return n;
}

/* Through worker w's HTTP API alone: every trace once and complete (the fan-out reaches
 * the others' partitions), no partial answer once the group settled; traces by id. */
static void check_fanout(const worker_t *w, const worker_t *other)
{
    int64_t deadline = cp_mono_ms() + 90000;
    int got = 0;
    bool partial = true;
    while (cp_mono_ms() < deadline && (got < NTRACES || partial)) {
        json_t *list = NULL;
        int status = get_json(w, "/api/traces?limit=100000", &list);
        if (status == 200 && list) {
            got = complete_once(list);
            partial = json_is_true(json_object_get(list, "partial"));
            if (partial) /* named, never silent */
                assert_true(json_array_size(json_object_get(list, "partitions_unreachable")) > 0);
        }
        json_decref(list);
        if (got < NTRACES || partial)
            cmr_sleep_ms(300);
    }
    assert_int_equal(got, NTRACES);
    assert_false(partial);
    int misdirected = 0;
    for (int k = 0; k < NTRACES; k += 29) { /* by id, from both workers: the owner answers */
        uint8_t tid[16];
        char hex[33], target[128];
        synth_trace_id(0x70000 + (uint64_t)k, tid);
        cmr_hex(tid, 16, hex);
        snprintf(target, sizeof target, "/api/traces/%s", hex);
        for (int i = 0; i < 2; i++) {
            json_t *tree = NULL;
            assert_int_equal(get_json(i ? other : w, target, &tree), 200);
            assert_true(json_is_true(json_object_get(tree, "complete")));
            json_decref(tree);
        }
        /* asked as the owner (local=1): a worker that does not own the partition says so */
        strcat(target, "?local=1");
        json_t *tree = NULL;
        int status = get_json(w, target, &tree);
        assert_true(status == 200 || status == 421);
        misdirected += status == 421;
        json_decref(tree);
    }
    assert_true(misdirected > 0);
    /* a peer's local answer names the partitions it was asked for and does not own */
    json_t *list = NULL;
    assert_int_equal(get_json(w, "/api/traces?local=1&partitions=0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15", &list), 200);
    assert_true(json_array_size(json_object_get(list, "partitions_not_owned")) > 0);
    assert_true(complete_once(list) < NTRACES);
    json_decref(list);
    assert_int_equal(get_json(w, "/api/traces?local=1&partitions=x", &list), 400);
    json_decref(list);
}

/* --- metrics of several environments ---------------------------------------------------- */

/* One MetricBatch per environment env-00 ... : transaction 0x5000+e, 10+e calls of about
 * (1+e) ms, in the 10-second interval before the last. */
static void send_metrics(cmr_producer_t *p)
{
    int64_t start = cmr_wall_ms() / 10000 * 10000 - 20000;
    for (int e = 0; e < NENVS; e++) {
        cmr_hist_t h = {0};
        int64_t sum = 0;
        for (int k = 0; k < 10 + e; k++) {
            int64_t ns = (1 + e) * 1000000LL + k * 1000LL;
            cmr_hist_record(&h, (uint64_t)ns, 1);
            sum += ns;
        }
        cmr_buf_t enc = {0};
        cmr_hist_encode(&h, &enc);
        cmr_transaction_metric_t tx = {.root_method_id = 0x5000 + e,
                                       .name = "",
                                       .count = 10 + e,
                                       .sum_ns = sum,
                                       .min_ns = (int64_t)h.min,
                                       .max_ns = (int64_t)h.max,
                                       .histogram = {enc.data, enc.len},
                                       .max_in_flight = 1};
        char env[16], err[256];
        snprintf(env, sizeof env, "env-%02d", e);
        cmr_metric_batch_t b = {.agent_id = 0x100 + e,
                                .interval_start_ms = start,
                                .interval_ms = 10000,
                                .environment_id = env,
                                .transactions = {&tx, 1}};
        assert_int_equal(cmr_producer_send(p, CMR_MSG_METRIC_BATCH, &b, NULL, NULL, err, sizeof err), CMR_SEND_OK);
        cmr_buf_free(&enc);
        cmr_hist_free(&h);
    }
    assert_int_equal(cmr_producer_flush(p, 10000), 0);
}

/* Through w's HTTP API: every environment's transaction once, with its count, ranked by
 * count across the workers' answers, complete (once the stores have them); one
 * environment's ranking and one series from either worker; a worker asked as an owner
 * names the partitions it does not own. */
static void check_metrics_fanout(const worker_t *w, const worker_t *other)
{
    int64_t deadline = cp_mono_ms() + 60000;
    json_t *top = NULL;
    size_t got = 0;
    bool partial = true;
    while (cp_mono_ms() < deadline && (got < NENVS || partial)) {
        json_decref(top);
        top = NULL;
        if (get_json(w, "/api/metrics/top?last=1h&stat=count&limit=1000", &top) == 200 && top) {
            got = json_array_size(json_object_get(top, "items"));
            partial = json_is_true(json_object_get(top, "partial"));
        }
        if (got < NENVS || partial)
            cmr_sleep_ms(300);
    }
    assert_non_null(top);
    assert_false(partial);
    json_t *items = json_object_get(top, "items");
    assert_int_equal(json_array_size(items), NENVS);
    for (int i = 0; i < NENVS; i++) { /* highest count first: env-11 (21 calls) ... env-00 (10) */
        json_t *it = json_array_get(items, (size_t)i);
        char env[16];
        snprintf(env, sizeof env, "env-%02d", NENVS - 1 - i);
        assert_string_equal(json_string_value(json_object_get(it, "env")), env);
        assert_int_equal(json_integer_value(json_object_get(it, "count")), 10 + NENVS - 1 - i);
    }
    json_decref(top);
    int remote = 0;
    for (int e = 0; e < NENVS; e++)
        for (int k = 0; k < 2; k++) {
            char target[200];
            json_t *body = NULL;
            snprintf(target, sizeof target, "/api/metrics/top?env=env-%02d&last=1h", e);
            assert_int_equal(get_json(k ? other : w, target, &body), 200);
            assert_int_equal(json_array_size(json_object_get(body, "items")), 1);
            json_decref(body);
            snprintf(target, sizeof target, "/api/metrics/series?env=env-%02d&name=%016x&last=1h", e, 0x5000 + e);
            assert_int_equal(get_json(k ? other : w, target, &body), 200);
            char env[16];
            snprintf(env, sizeof env, "env-%02d", e);
            const char *series_env = json_string_value(json_object_get(json_object_get(body, "series"), "env"));
            assert_string_equal(series_env ? series_env : "", env);
            json_decref(body);
            /* without env: the one worker that has it answers */
            snprintf(target, sizeof target, "/api/metrics/series?name=%016x&last=1h", 0x5000 + e);
            assert_int_equal(get_json(k ? other : w, target, &body), 200);
            json_decref(body);
            /* asked as an owner of every partition: a worker owns only some */
            snprintf(target, sizeof target, "/api/metrics/top?env=env-%02d&last=1h&local=1&partitions=%s", e,
                     "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15");
            assert_int_equal(get_json(k ? other : w, target, &body), 200);
            remote += json_array_size(json_object_get(body, "items")) == 0;
            assert_true(json_array_size(json_object_get(body, "partitions_not_owned")) > 0);
            json_decref(body);
        }
    assert_true(remote > 0); /* some environments live on the other worker */
}

/* n workers in separate directories; while the traffic flows, worker 1 is killed and
 * worker n+1 added; then the others stop and the added one must hold everything. */
static void run_scenario(int n)
{
    char ref[512], err[512];
    traffic_t *tr = traffic_new();
    snprintf(ref, sizeof ref, "%s/reference", tmp);
    build_reference(tr, ref);
    char *want = list(ref);
    assert_non_null(want);
    cmr_producer_t *p = cmr_producer_new(conf, "hosts-test", NULL, NULL, err, sizeof err);
    assert_non_null(p);

    worker_t w[MAX_WORKERS] = {0};
    for (int i = 0; i < n; i++)
        start_worker(&w[i], i);
    wait_settled(w, n);
    const int third = NTRACES / 3;
    send_traces(p, tr, 0, third);
    wait_stored(w, n, third);
    /* SIGKILL worker 1 while the next phase is in flight: what it applied after its last
     * commit comes again to the partitions' next owners */
    send_traces(p, tr, third, third + third / 2);
    cp_proc_kill(&w[1].proc);
    w[1].running = false;
    send_traces(p, tr, third + third / 2, 2 * third);
    start_worker(&w[n], n); /* added during ingest: its store is empty */
    wait_settled(w, n + 1);
    send_traces(p, tr, 2 * third, NTRACES);
    send_metrics(p);
    check_fanout(&w[0], &w[n]);
    check_metrics_fanout(&w[0], &w[n]);

    /* the others leave: the added worker is assigned every partition */
    for (int i = 0; i < n; i++)
        if (w[i].running) {
            assert_int_equal(cp_proc_stop(&w[i].proc), 0);
            w[i].running = false;
        }
    int64_t deadline = cp_mono_ms() + 120000;
    int got = 0;
    while ((got = count_complete(w[n].store)) < NTRACES && cp_mono_ms() < deadline)
        cmr_sleep_ms(300);
    if (got != NTRACES)
        cp_proc_dump_log(&w[n].proc, 60);
    assert_int_equal(got, NTRACES);
    assert_int_equal(cp_proc_stop(&w[n].proc), 0);

    char *have = list(w[n].store);
    assert_non_null(have);
    assert_string_equal(have, want); /* every trace once, complete, with all its events */
    /* the added worker did not consume the history: it read it back from the topic */
    assert_true(cp_proc_count_log(&w[n].proc, "event=ingest.partition_restored") >= 1);
    assert_true(log_sum(w[n].log, "event=ingest.partition_restored", " records=") > 0);
    assert_int_equal(log_sum(w[n].log, "event=ingest.partition_restored", " missing="), 0);
    free(have);
    free(want);
    cmr_producer_destroy(p, 5000);
    traffic_free(tr);
}

/* --- a restore across retention --------------------------------------------------------- */

typedef struct delivered {
    int32_t partition;
    int64_t last; /* the highest offset delivered */
} delivered_t;

static void on_delivery(const cmr_delivery_t *d, void *opaque)
{
    delivered_t *dv = opaque;
    if (!d->error) {
        dv->partition = d->partition;
        dv->last = d->offset > dv->last ? d->offset : dv->last;
    }
}

static int count_apply(void *opaque, const char *topic, int32_t partition, int64_t offset, const cmr_msg_t *msg)
{
    (void)opaque, (void)topic, (void)partition, (void)offset, (void)msg;
    return 0;
}

static int count_skipped(void *opaque, const char *topic, int32_t partition, int64_t offset)
{
    (void)topic, (void)partition, (void)offset;
    ++*(int *)opaque;
    return 0;
}

static void test_restore_counts_what_retention_deleted(void **state)
{
    (void)state;
    char err[256];
    delivered_t dv = {.partition = -1, .last = -1};
    cmr_producer_t *p = cmr_producer_new(conf, "retention-test", on_delivery, &dv, err, sizeof err);
    assert_non_null(p);
    size_t len = 200 * 1024; /* 40 of them: 8 MiB on one partition (one key) */
    char *junk = malloc(len);
    assert_non_null(junk);
    cmr_random_bytes(junk, len); /* incompressible: the producer may compress */
    for (int i = 0; i < 40; i++) {
        assert_int_equal(cmr_producer_send_raw(p, cmr_topic_name(CMR_TOPIC_EVENTS), "k", 1, junk, len, NULL), 0);
        assert_int_equal(cmr_producer_flush(p, 20000), 0); /* one message set each */
    }
    free(junk);
    assert_true(dv.partition >= 0);
    assert_int_equal(dv.last, 39);
    int skipped = 0; /* not EventBatches: rejected, and counted as read back */
    cmr_restore_cb_t cb = {.apply = count_apply,
                           .skipped = count_skipped,
                           .opaque = &skipped,
                           .flush_every = 1000,
                           .idle_timeout_ms = 20000};
    cmr_reader_range_t r = {.partition = dv.partition, .from = 0, .until = dv.last + 1};
    cmr_restore_stats_t st = {0};
    assert_int_equal(cmr_ingest_restore(conf, cmr_topic_name(CMR_TOPIC_EVENTS), &r, 1, &cb, &st), 0);
    assert_true(st.missing > 0); /* the oldest are gone, and it says so */
    assert_true(st.records > 0); /* what the topic still holds is read back */
    assert_int_equal((int64_t)(st.records + st.missing), 40);
    assert_int_equal((int)st.records, skipped);
    cmr_producer_destroy(p, 5000);
}

static void test_two_hosts(void **state)
{
    (void)state;
    run_scenario(2);
}

static void test_three_hosts(void **state)
{
    (void)state;
    run_scenario(3);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s PATH-TO-cmr-broker PATH-TO-cmr-ingest\n", argv[0]);
        return 2;
    }
    broker_bin = argv[1];
    ingest_bin = argv[2];
    A1 = cmr_agent_id("shop", "host-a", "00000000000000000000000000000001");
    A2 = cmr_agent_id("billing", "host-b", "00000000000000000000000000000002");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_two_hosts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_three_hosts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_restore_counts_what_retention_deleted, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

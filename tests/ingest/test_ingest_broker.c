/*
 * test_ingest_broker.c - cmr-ingest as a process against the embedded broker, fed with
 * synthetic EventBatch streams through the real transport (multi-thread, multi-JVM
 * traces with hand-built parent links, segments out of order, producer-side duplicates,
 * a malformed batch and a foreign message in the stream):
 *
 *  - a worker killed with SIGKILL mid-stream and restarted: the store answers exactly
 *    like a reference store built in-process from every batch once (nothing lost,
 *    nothing counted twice), and `replay` into an empty store prints the same bytes;
 *  - two workers of one group with a shared store root: partitions move when one stops,
 *    the result is again byte-identical to the reference;
 *  - continuous sending: a trace is queryable over the HTTP API while its root runs and
 *    is completed when the last batch arrives; bad HTTP requests get clear errors.
 *
 * Usage: test_ingest_broker PATH-TO-cmr-broker PATH-TO-cmr-ingest
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "broker_proc.h"
#include "cmr/buf.h"
#include "cmr/clock.h"
#include "cmr/event.h"
#include "cmr/ids.h"
#include "cmr/ingest.h"
#include "cmr/kafka.h"
#include "cmr/log.h"
#include "cmr/wire.h"
#include "cp_support.h"
#include "ing_synth.h"

static const char *broker_bin, *ingest_bin;
static broker_proc_t broker;
static cmr_conf_t *conf;
static char tmp[256];
static uint64_t A1, A2;

#define M_MAIN 0x1001
#define M_A 0x1002
#define M_TASK 0x1003
#define M_HANDLER 0x1004
#define M_DB 0x1005

static int setup(void **state)
{
    (void)state;
    cmr_log_set_level(CMR_LOG_WARN);
    if (broker_proc_start(&broker, broker_bin, NULL) != 0)
        return -1;
    conf = cmr_conf_new();
    cmr_conf_set(conf, "kafka.bootstrap.servers", broker.bootstrap, "test");
    if (cp_tmpdir(tmp, sizeof tmp) != 0)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    cmr_conf_destroy(conf);
    broker_proc_stop(&broker);
    cp_rmrf(tmp);
    return 0;
}

/* --- the traffic ---------------------------------------------------------------------- */

typedef struct traffic {
    synth_seg_t segs[64][3];
    int ntraces;
} traffic_t;

/* Trace k: main (JVM 1) calls A, which hands a task to a pool thread; then main calls
 * JVM 2 over HTTP, whose handler queries the database. */
static void make_trace(synth_seg_t s[3], int k, uint64_t base)
{
    uint8_t tid[16];
    synth_trace_id(0x5000 + (uint64_t)k, tid);
    uint64_t t = base + (uint64_t)k * 1000000;
    synth_seg_init(&s[0], tid, A1, 100 + (uint64_t)k, 1, "main", NULL);
    synth_enter(&s[0], M_MAIN, t);
    synth_enter(&s[0], M_A, t + 1000);
    int64_t f1 = synth_fork(&s[0], t + 1500);
    synth_exit(&s[0], M_A, t + 2000);
    int64_t f2 = synth_fork(&s[0], t + 3000);
    synth_exit(&s[0], M_MAIN, t + 90000 + (uint64_t)k * 100);
    cmr_parent_link_t l1 = {(int64_t)A1, 100 + k, f1};
    synth_seg_init(&s[1], tid, A1, 1000 + (uint64_t)k, 20 + k % 4, "pool-1-thread", &l1);
    synth_enter(&s[1], M_TASK, t + 4000);
    synth_enter(&s[1], M_DB, t + 5000);
    synth_exit(&s[1], M_DB, t + 6000);
    synth_exit(&s[1], M_TASK, t + 8000);
    cmr_parent_link_t l2 = {(int64_t)A1, 100 + k, f2};
    synth_seg_init(&s[2], tid, A2, 7 + (uint64_t)k, 31, "http-nio-8080-exec-1", &l2);
    synth_enter(&s[2], M_HANDLER, t + 5000);
    synth_enter(&s[2], M_DB, t + 6000);
    synth_exit(&s[2], M_DB, t + 7000);
    synth_throw(&s[2], M_HANDLER, t + 9000);
}

static void traffic_init(traffic_t *tr, int n)
{
    tr->ntraces = n;
    uint64_t base = (uint64_t)cmr_wall_ns() - 600ull * 1000000000ull;
    for (int k = 0; k < n; k++)
        make_trace(tr->segs[k], k, base);
}

static void traffic_free(traffic_t *tr)
{
    for (int k = 0; k < tr->ntraces; k++)
        for (int i = 0; i < 3; i++)
            synth_seg_free(&tr->segs[k][i]);
}

static cmr_producer_t *producer(void)
{
    char err[512];
    cmr_producer_t *p = cmr_producer_new(conf, "ingest-test", NULL, NULL, err, sizeof err);
    assert_non_null(p);
    return p;
}

static void send_names(cmr_producer_t *p)
{
    char err[256];
    const struct {
        uint64_t id;
        const char *cls, *name, *desc;
    } methods[] = {{M_MAIN, "com/shop/App", "main", "([Ljava/lang/String;)V"},
                   {M_A, "com/shop/Orders", "place", "(J)V"},
                   {M_TASK, "com/shop/Mailer", "run", "()V"},
                   {M_HANDLER, "com/billing/InvoiceServlet", "doPost",
                    "(Ljakarta/servlet/http/HttpServletRequest;Ljakarta/servlet/http/HttpServletResponse;)V"},
                   {M_DB, "com/shop/Db", "query", "(Ljava/lang/String;)Ljava/util/List;"}};
    for (size_t i = 0; i < sizeof methods / sizeof *methods; i++) {
        cmr_method_entry_t m = {.method_id = (int64_t)methods[i].id,
                                .class_name = (char *)methods[i].cls,
                                .method_name = (char *)methods[i].name,
                                .descriptor = (char *)methods[i].desc};
        assert_int_equal(cmr_producer_send(p, CMR_MSG_METHOD_ENTRY, &m, NULL, NULL, err, sizeof err), CMR_SEND_OK);
    }
    char *ips[] = {"127.0.0.1"};
    cmr_agent_registration_t r1 = {.instance_id = "00000000000000000000000000000001",
                                   .agent_name = "shop",
                                   .hostname = "host-a",
                                   .ip_addresses = {ips, 1},
                                   .pid = 4242,
                                   .jvm_vendor = "Eclipse Adoptium",
                                   .jvm_version = "17.0.9",
                                   .agent_version = "0.1.0",
                                   .start_time_ms = 1,
                                   .attempt = 1};
    cmr_agent_registration_t r2 = r1;
    r2.instance_id = "00000000000000000000000000000002";
    r2.agent_name = "billing";
    r2.hostname = "host-b";
    r2.pid = 777;
    assert_int_equal(cmr_producer_send(p, CMR_MSG_AGENT_REGISTRATION, &r1, NULL, NULL, err, sizeof err), CMR_SEND_OK);
    assert_int_equal(cmr_producer_send(p, CMR_MSG_AGENT_REGISTRATION, &r2, NULL, NULL, err, sizeof err), CMR_SEND_OK);
}

/* Sends traces [from, to): child segments before their parent for odd k, every third
 * batch twice (a producer retry), batches of 2 events. */
static void send_traces(cmr_producer_t *p, traffic_t *tr, int from, int to)
{
    char err[256];
    int nth = 0;
    for (int k = from; k < to; k++) {
        static const int even[3] = {0, 1, 2}, odd[3] = {2, 1, 0};
        const int *order = k % 2 ? odd : even;
        for (int j = 0; j < 3; j++) {
            cmr_event_batch_t *b;
            size_t n = synth_batches(&tr->segs[k][order[j]], 2, &b);
            for (size_t i = 0; i < n; i++) {
                for (int rep = 0; rep < (nth++ % 3 == 0 ? 2 : 1); rep++) {
                    int rc;
                    while ((rc = cmr_producer_send_batch(p, &b[i], NULL, err, sizeof err)) == CMR_SEND_QUEUE_FULL)
                        cmr_producer_flush(p, 100);
                    assert_int_equal(rc, CMR_SEND_OK);
                }
            }
            synth_batches_free(b, n);
        }
    }
    assert_int_equal(cmr_producer_flush(p, 20000), 0);
}

/* Bad input in the stream: a message whose only segment batch is cut short (its event
 * count does not match its bytes), garbage, a message of another type. The worker logs
 * and skips them. */
static void send_bad(cmr_producer_t *p)
{
    char err[256];
    synth_seg_t s;
    uint8_t tid[16];
    synth_trace_id(0xbad, tid);
    synth_seg_init(&s, tid, A1, 1, 1, "bad", NULL);
    synth_enter(&s, M_MAIN, 1000);
    synth_exit(&s, M_MAIN, 2000);
    cmr_event_batch_t *b;
    size_t n = synth_batches(&s, 10, &b);
    static cmr_segs_writer_t w; /* large: not on the stack */
    cmr_event_msg_t em;
    assert_int_equal(cmr_segs_join(&w, A1, b, n, &em), 0);
    em.segments.len--; /* the last event is cut: the segment is refused before it is applied */
    assert_int_equal(cmr_producer_send(p, CMR_MSG_EVENT_BATCH, &em, NULL, NULL, err, sizeof err), CMR_SEND_OK);
    cmr_segs_writer_free(&w);
    synth_batches_free(b, n);
    synth_seg_free(&s);
    const char *junk = "this is not avro";
    assert_int_equal(cmr_producer_send_raw(p, cmr_topic_name(CMR_TOPIC_EVENTS), "k", 1, junk, strlen(junk), NULL), 0);
    cmr_method_entry_t m = {.method_id = 1, .class_name = "X", .method_name = "y", .descriptor = "()V"};
    cmr_buf_t buf = {0};
    assert_int_equal(cmr_msg_encode(CMR_MSG_METHOD_ENTRY, &m, &buf, err, sizeof err), CMR_WIRE_OK);
    assert_int_equal(cmr_producer_send_raw(p, cmr_topic_name(CMR_TOPIC_EVENTS), "k", 1, buf.data, buf.len, NULL), 0);
    cmr_buf_free(&buf);
    assert_int_equal(cmr_producer_flush(p, 20000), 0);
}

/* --- the reference: every batch once, in-process --------------------------------------- */

static void build_reference(traffic_t *tr, const char *root)
{
    char err[512];
    cmr_store_opts_t o = {.sync = false};
    cmr_ingest_engine_t *e = cmr_ingest_engine_new(root, &o, err, sizeof err);
    assert_non_null(e);
    assert_int_equal(cmr_ingest_engine_open_partition(e, 0, 0), 0);
    /* the same names the producer sent, through the same codec */
    cmr_producer_t *dummy = NULL;
    (void)dummy;
    const uint64_t ids[] = {M_MAIN, M_A, M_TASK, M_HANDLER, M_DB};
    const char *cls[] = {"com/shop/App", "com/shop/Orders", "com/shop/Mailer", "com/billing/InvoiceServlet",
                         "com/shop/Db"};
    const char *nm[] = {"main", "place", "run", "doPost", "query"};
    const char *ds[] = {"([Ljava/lang/String;)V", "(J)V", "()V",
                        "(Ljakarta/servlet/http/HttpServletRequest;Ljakarta/servlet/http/HttpServletResponse;)V",
                        "(Ljava/lang/String;)Ljava/util/List;"};
    for (int i = 0; i < 5; i++) {
        cmr_method_entry_t m = {.method_id = (int64_t)ids[i],
                                .class_name = (char *)cls[i],
                                .method_name = (char *)nm[i],
                                .descriptor = (char *)ds[i]};
        cmr_ingest_engine_add_method(e, &m);
    }
    cmr_agent_registration_t r1 = {.instance_id = "00000000000000000000000000000001",
                                   .agent_name = "shop",
                                   .hostname = "host-a",
                                   .pid = 4242,
                                   .jvm_vendor = "Eclipse Adoptium",
                                   .jvm_version = "17.0.9"};
    cmr_agent_registration_t r2 = r1;
    r2.instance_id = "00000000000000000000000000000002";
    r2.agent_name = "billing";
    r2.hostname = "host-b";
    r2.pid = 777;
    cmr_ingest_engine_add_agent(e, &r1);
    cmr_ingest_engine_add_agent(e, &r2);
    for (int k = 0; k < tr->ntraces; k++)
        for (int j = 0; j < 3; j++) {
            cmr_event_batch_t *b;
            size_t n = synth_batches(&tr->segs[k][j], 2, &b);
            for (size_t i = 0; i < n; i++)
                assert_int_equal(cmr_ingest_engine_add_batch(e, 0, &b[i], err, sizeof err), 1);
            synth_batches_free(b, n);
        }
    assert_int_equal(cmr_ingest_engine_flush(e), 0);
    cmr_ingest_engine_free(e);
}

/* --- rendering a store through the CLI -------------------------------------------------- */

static char *cli(const char *root, const char *cmd, const char *arg, const char *extra)
{
    const char *argv[12];
    int n = 0;
    argv[n++] = ingest_bin;
    argv[n++] = "--log-level";
    argv[n++] = "error";
    argv[n++] = "--store";
    argv[n++] = root;
    argv[n++] = cmd;
    if (arg)
        argv[n++] = arg;
    if (extra)
        argv[n++] = extra;
    argv[n] = NULL;
    char *out = NULL;
    int rc = cp_run(argv, &out);
    if (rc != 0) {
        fprintf(stderr, "cmr-ingest %s failed (%d): %s\n", cmd, rc, out ? out : "");
        free(out);
        return NULL;
    }
    return out;
}

/* The list (limit 1000) and every tree, concatenated. */
static char *render(const char *root)
{
    char *list = cli(root, "traces", "--limit", "1000");
    if (!list)
        return NULL;
    cmr_buf_t all = {0};
    cmr_buf_puts(&all, list);
    for (char *line = strchr(list, '\n'); line && line[1]; line = strchr(line + 1, '\n')) {
        char id[33];
        if (sscanf(line + 1, "%32s", id) != 1)
            continue;
        char *tree = cli(root, "show", id, NULL);
        if (!tree)
            continue;
        cmr_buf_puts(&all, tree);
        free(tree);
    }
    free(list);
    return cmr_buf_take(&all);
}

static int count_complete(const char *root)
{
    char *list = cli(root, "traces", "--limit", "1000");
    int n = 0;
    for (const char *p = list; p && (p = strstr(p, " complete ")); p++)
        n++;
    free(list);
    return n;
}

static int wait_complete(const char *root, int want, int timeout_ms)
{
    int64_t deadline = cp_mono_ms() + timeout_ms;
    int n = 0;
    while (cp_mono_ms() < deadline) {
        if ((n = count_complete(root)) >= want)
            return n;
        cmr_sleep_ms(300);
    }
    return n;
}

static void start_worker(cp_proc_t *w, const char *root, const char *log)
{
    const char *argv[] = {ingest_bin,    "run",
                          "--bootstrap", broker.bootstrap,
                          "--store",     root,
                          "--http-port", "0",
                          "-X",          "kafka.session.timeout.ms=6000",
                          "-X",          "kafka.heartbeat.interval.ms=500",
                          "-X",          "kafka.topic.metadata.refresh.interval.ms=1000",
                          "-X",          "ingest.commit.interval_ms=20",
                          "--log-level", "info",
                          NULL};
    assert_int_equal(cp_proc_start(w, argv, log), 0);
    assert_int_equal(cp_proc_wait_log(w, "event=ingest.started", 30000), 0);
}

static void check_log_mentions(const char *log, const char *needle)
{
    cp_proc_t p = {0};
    snprintf(p.log, sizeof p.log, "%s", log);
    assert_int_equal(cp_proc_wait_log(&p, needle, 100), 0);
}

/* --- tests -------------------------------------------------------------------------------- */

/* path = tmp/name */
static void tmp_path(char path[512], const char *name)
{
    snprintf(path, 512, "%s/%s", tmp, name);
}

/* The traffic of n traces (caller frees with traffic_drop), the paths of the store under
 * test and of the reference store, built from the traffic directly, and what the CLI
 * prints for the reference (*want, malloc'd): what the store under test must print. */
static traffic_t *scenario(int n, char store[512], char ref[512], char **want)
{
    traffic_t *tr = calloc(1, sizeof *tr);
    assert_non_null(tr);
    traffic_init(tr, n);
    tmp_path(store, "store");
    tmp_path(ref, "reference");
    build_reference(tr, ref);
    *want = render(ref);
    assert_non_null(*want);
    return tr;
}

static void traffic_drop(traffic_t *tr)
{
    traffic_free(tr);
    free(tr);
}

static void test_kill_restart_and_replay(void **state)
{
    (void)state;
    char store[512], ref[512], replayed[512], log[512], *want;
    traffic_t *tr = scenario(40, store, ref, &want);
    tmp_path(replayed, "replayed");
    tmp_path(log, "worker.log");
    if (getenv("CMR_INGEST_VERBOSE")) /* shows what the CLI prints */
        printf("%s", want);
    assert_non_null(strstr(want, "com.shop.Mailer.run()V  [pool-1-thread #21 @ shop@host-a pid 4242] async"));

    cmr_producer_t *p = producer();
    send_names(p);
    cp_proc_t w;
    start_worker(&w, store, log);
    send_traces(p, tr, 0, 20);
    send_bad(p);
    cmr_sleep_ms(20);
    char mid[32]; /* replay --since this time gets the second half only */
    snprintf(mid, sizeof mid, "%" PRIu64, (uint64_t)cmr_wall_ns() / 1000000);
    cmr_sleep_ms(20);
    /* kill it as soon as it has stored something */
    int64_t deadline = cp_mono_ms() + 60000;
    while (count_complete(store) < 1 && cp_mono_ms() < deadline)
        cmr_sleep_ms(20);
    cp_proc_kill(&w);
    int before = count_complete(store);
    assert_true(before >= 1);
    send_traces(p, tr, 20, 40);
    start_worker(&w, store, log);
    assert_int_equal(wait_complete(store, 40, 90000), 40);
    assert_int_equal(cp_proc_stop(&w), 0);
    char *got = render(store);
    assert_non_null(got);
    assert_string_equal(got, want); /* nothing lost, nothing counted twice */
    check_log_mentions(log, "event=ingest.batch_rejected");
    check_log_mentions(log, "event=wire.message_rejected");
    check_log_mentions(log, "event=ingest.foreign_message");

    /* replay into an empty store: the same bytes */
    const char *argv[] = {ingest_bin,    "replay", "--bootstrap", broker.bootstrap, "--store", replayed,
                          "--log-level", "error",  NULL};
    char *out = NULL;
    assert_int_equal(cp_run(argv, &out), 0);
    assert_non_null(strstr(out, "replay: done"));
    free(out);
    char *again = render(replayed);
    assert_non_null(again);
    assert_string_equal(again, got);
    /* replay refuses a store that is not empty */
    assert_int_equal(cp_run(argv, &out), 2);
    free(out);
    /* replay from a time: only what was produced after it */
    char since_store[600];
    snprintf(since_store, sizeof since_store, "%s/since", tmp);
    const char *sargv[] = {ingest_bin, "replay", "--bootstrap", broker.bootstrap, "--store", since_store,
                           "--since",  mid,      "--log-level", "error",          NULL};
    assert_int_equal(cp_run(sargv, &out), 0);
    char *later = cli(since_store, "traces", "--limit", "1000");
    assert_non_null(later);
    if (!strstr(later, "7a000000000000000000000000005027"))
        fprintf(stderr, "replay --since %s:\n%s\n%s\n", mid, out, later);
    free(out);
    assert_non_null(strstr(later, "7a000000000000000000000000005027"));
    assert_null(strstr(later, "7a000000000000000000000000005003"));
    free(later);
    /* exports of a replayed trace */
    char file[600];
    snprintf(file, sizeof file, "%s/trace.json", tmp);
    const char *ex[] = {
        ingest_bin, "--store", replayed, "--format", "otlp", "export", "7a000000000000000000000000005003", file, NULL};
    assert_int_equal(cp_run(ex, NULL), 0);
    const char *bad[] = {ingest_bin, "--store", replayed, "show", "not-a-trace", NULL};
    assert_int_equal(cp_run(bad, &out), 2);
    assert_non_null(strstr(out, "not a trace id"));
    free(out);
    free(again);
    free(got);
    free(want);
    cmr_producer_destroy(p, 5000);
    traffic_drop(tr);
}

static void test_two_workers_rebalance(void **state)
{
    (void)state;
    char store[512], ref[512], log1[512], log2[512], *want;
    traffic_t *tr = scenario(48, store, ref, &want);
    tmp_path(log1, "w1.log");
    tmp_path(log2, "w2.log");
    cmr_producer_t *p = producer();
    send_names(p);
    cp_proc_t w1, w2;
    start_worker(&w1, store, log1);
    send_traces(p, tr, 0, 16);
    assert_int_equal(wait_complete(store, 16, 60000), 16);
    start_worker(&w2, store, log2); /* the group rebalances: some partitions move to w2 */
    assert_int_equal(cp_proc_wait_log(&w2, "event=ingest.partition_opened", 60000), 0);
    send_traces(p, tr, 16, 32);
    assert_int_equal(wait_complete(store, 32, 60000), 32);
    assert_int_equal(cp_proc_stop(&w1), 0); /* its partitions move to w2 */
    send_traces(p, tr, 32, 48);
    assert_int_equal(wait_complete(store, 48, 90000), 48);
    assert_true(cp_proc_count_log(&w2, "event=ingest.partition_opened") >= 16);
    assert_int_equal(cp_proc_stop(&w2), 0);
    char *got = render(store);
    assert_non_null(got);
    assert_string_equal(got, want);
    free(got);
    free(want);
    cmr_producer_destroy(p, 5000);
    traffic_drop(tr);
}

static int http_get(int port, const char *target, char **body)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    char req[1024];
    /* Connection: close, so that reading to the end reads one answer (the server keeps
     * connections alive otherwise) */
    int n = snprintf(req, sizeof req, "%s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", target);
    assert_int_equal(send(fd, req, (size_t)n, 0), n);
    cmr_buf_t got = {0};
    char chunk[65536];
    ssize_t r;
    while ((r = recv(fd, chunk, sizeof chunk, 0)) > 0)
        cmr_buf_put(&got, chunk, (size_t)r);
    close(fd);
    assert_true(cmr_buf_ok(&got));
    char *buf = cmr_buf_take(&got);
    int status = 0;
    sscanf(buf, "HTTP/1.1 %d", &status);
    char *b = strstr(buf, "\r\n\r\n");
    *body = strdup(b ? b + 4 : "");
    free(buf);
    return status;
}

static int worker_port(const cp_proc_t *w)
{
    FILE *f = fopen(w->log, "r");
    char line[1024];
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

static void test_continuous_and_http(void **state)
{
    (void)state;
    char store[512], log[512], err[256];
    tmp_path(store, "store");
    tmp_path(log, "worker.log");
    cmr_producer_t *p = producer();
    send_names(p);
    cp_proc_t w;
    start_worker(&w, store, log);
    int port = worker_port(&w);
    assert_true(port > 0);
    /* the root is still running: only its first batch is sent */
    uint8_t tid[16];
    synth_trace_id(0xc0ffee, tid);
    synth_seg_t s;
    uint64_t t = (uint64_t)cmr_wall_ns() - 1000000000ull;
    synth_seg_init(&s, tid, A1, 1, 1, "main", NULL);
    synth_enter(&s, M_MAIN, t);
    synth_enter(&s, M_A, t + 1000);
    synth_exit(&s, M_A, t + 2000);
    synth_enter(&s, M_DB, t + 3000);
    synth_exit(&s, M_DB, t + 4000);
    synth_exit(&s, M_MAIN, t + 5000);
    cmr_event_batch_t *b;
    size_t n = synth_batches(&s, 3, &b);
    assert_int_equal(n, 2);
    assert_int_equal(cmr_producer_send_batch(p, &b[0], NULL, err, sizeof err), CMR_SEND_OK);
    assert_int_equal(cmr_producer_flush(p, 10000), 0);
    char hex[33], target[256], *body = NULL;
    cmr_hex(tid, 16, hex);
    snprintf(target, sizeof target, "GET /api/traces/%s", hex);
    int64_t deadline = cp_mono_ms() + 60000;
    int status = 0;
    while (cp_mono_ms() < deadline) {
        free(body);
        body = NULL;
        if ((status = http_get(port, target, &body)) == 200)
            break;
        cmr_sleep_ms(100);
    }
    assert_int_equal(status, 200);
    assert_non_null(strstr(body, "\"complete\":false"));
    assert_non_null(strstr(body, "\"method\":\"com.shop.App.main([Ljava/lang/String;)V\""));
    assert_non_null(strstr(body, "\"running\":true"));
    free(body);
    body = NULL;
    /* the rest arrives: completed */
    assert_int_equal(cmr_producer_send_batch(p, &b[1], NULL, err, sizeof err), CMR_SEND_OK);
    assert_int_equal(cmr_producer_flush(p, 10000), 0);
    deadline = cp_mono_ms() + 60000;
    while (cp_mono_ms() < deadline) {
        free(body);
        body = NULL;
        if (http_get(port, target, &body) == 200 && strstr(body, "\"complete\":true"))
            break;
        cmr_sleep_ms(200);
    }
    assert_non_null(strstr(body, "\"complete\":true"));
    assert_null(strstr(body, "\"running\":true"));
    assert_non_null(strstr(body, "\"total_ns\":5000"));
    free(body);
    /* list with filters, exports, and bad requests */
    assert_int_equal(http_get(port, "GET /api/traces?contains=Db.query&min_duration=1us", &body), 200);
    assert_non_null(strstr(body, hex));
    free(body);
    assert_int_equal(http_get(port, "GET /api/traces?contains=Nothing.here", &body), 200);
    assert_string_equal(body, "{\"traces\":[]}");
    free(body);
    snprintf(target, sizeof target, "GET /api/traces/%s/export?format=chrome", hex);
    assert_int_equal(http_get(port, target, &body), 200);
    assert_non_null(strstr(body, "traceEvents"));
    free(body);
    assert_int_equal(http_get(port, "GET /api/traces?limit=zero", &body), 400);
    free(body);
    assert_int_equal(http_get(port, "DELETE /api/traces", &body), 405);
    free(body);
    /* not HTTP: libmicrohttpd closes the connection without an answer (0) or answers 400 */
    int garbage = http_get(port, "GARBAGE", &body);
    assert_true(garbage == 0 || garbage == 400);
    free(body);
    assert_int_equal(http_get(port, "GET /health", &body), 200);
    free(body);
    assert_int_equal(cp_proc_stop(&w), 0);
    synth_batches_free(b, n);
    synth_seg_free(&s);
    cmr_producer_destroy(p, 5000);
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
        cmocka_unit_test_setup_teardown(test_continuous_and_http, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kill_restart_and_replay, setup, teardown),
        cmocka_unit_test_setup_teardown(test_two_workers_rebalance, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

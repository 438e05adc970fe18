/*
 * test_metrics_broker.c - every worker's GET /metrics against the embedded broker:
 * cmr-ingest, cmr-config and cmr-instrumenter run as processes with metrics.port=0 (the bound port read
 * from their log line event=metrics.listening), and
 *
 *  - the body is valid Prometheus text (promtool check metrics; the test says it is
 *    skipped when promtool is missing) with the worker's families and the common ones,
 *    including a rejected message (garbage sent to cmr.events, counted per topic and
 *    reason);
 *  - another path is 404, another method 405;
 *  - application metrics: an environment with a threshold rule applied with cmr-config,
 *    MetricBatches of two JVMs on cmr.metrics (fast, then one JVM slow): cmr-ingest sends
 *    an ABNORMAL ThresholdEvent on cmr.alerts with its evidence, serves the application's
 *    histograms on /metrics (promtool-valid), and `cmr-ingest metrics top|jvms` answer
 *    with the counts that were sent while the worker runs;
 *  - a real Prometheus server (when installed) scrapes cmr-ingest on loopback and its
 *    HTTP API answers up{job="cmr-ingest"} == 1, the worker's own series and the
 *    application's latency histogram.
 *
 * Every wait is bounded; processes and temporary directories are removed at the end.
 *
 * Usage: test_metrics_broker PATH-TO-cmr-broker PATH-TO-cmr-ingest PATH-TO-cmr-config
 *        PATH-TO-cmr-instrumenter
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "broker_proc.h"
#include "cmr/buf.h"
#include "cmr/clock.h"
#include "cmr/kafka.h"
#include "cmr/log.h"
#include "cmr/histogram.h"
#include "cmr/ids.h"
#include "cmr/reader.h"
#include "cmr/topics.h"
#include "cmr/wire.h"
#include "cp_support.h"

static const char *broker_bin, *ingest_bin, *config_bin, *instr_bin;
static broker_proc_t broker;
static char tmp[256];
static cp_proc_t ingest, config, instr;
static int ingest_port, config_port, instr_port;

/* --- helpers ------------------------------------------------------------------------------ */

/* The port of the process's log line "event=metrics.listening port=N" (waits up to 30 s),
 * or -1. */
static int metrics_port(const cp_proc_t *p)
{
    if (cp_proc_wait_log(p, "event=metrics.listening", 30000) != 0)
        return -1;
    FILE *f = fopen(p->log, "r");
    if (!f)
        return -1;
    char line[1024];
    int port = -1;
    while (port < 0 && fgets(line, sizeof line, f)) {
        const char *at = strstr(line, "event=metrics.listening port=");
        if (at)
            port = atoi(at + strlen("event=metrics.listening port="));
    }
    fclose(f);
    return port;
}

/* One HTTP/1.1 request to 127.0.0.1:port (Connection: close, 10 s at most). Returns the
 * status (-1 when the connection failed) with the body in *body (malloc'd) when body is
 * not NULL. */
static int http(int port, const char *method, const char *path, char **body)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    char req[1024];
    cp_fmt(req, sizeof req, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
           method, path);
    if (write(fd, req, strlen(req)) != (ssize_t)strlen(req)) {
        close(fd);
        return -1;
    }
    cmr_buf_t b = {0};
    char chunk[8192];
    ssize_t n;
    while ((n = read(fd, chunk, sizeof chunk)) > 0)
        cmr_buf_put(&b, chunk, (size_t)n);
    close(fd);
    char *text = cmr_buf_take(&b);
    int status = -1;
    if (text && sscanf(text, "HTTP/1.%*d %d", &status) != 1)
        status = -1;
    const char *start = text ? strstr(text, "\r\n\r\n") : NULL;
    if (body)
        *body = strdup(start ? start + 4 : "");
    free(text);
    return status;
}

/* The path of program `name` in $PATH into out: 0, or -1 when it is not there. */
static int find_in_path(const char *name, char *out, size_t len)
{
    const char *path = getenv("PATH");
    char dirs[4096];
    cp_fmt(dirs, sizeof dirs, "%s", path && *path ? path : "/usr/bin:/bin");
    for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        cp_fmt(out, len, "%s/%s", d, name);
        if (access(out, X_OK) == 0)
            return 0;
    }
    return -1;
}

/* Runs `promtool check metrics` on text: 0 valid, 1 invalid (promtool's words on stderr),
 * 77 when promtool is missing. */
static int promtool_check(const char *text)
{
    char path[512], cmd[1200], tool[512];
    if (find_in_path("promtool", tool, sizeof tool) != 0)
        return 77;
    cp_fmt(path, sizeof path, "%s/metrics-%d.txt", tmp, (int)cmr_mono_ms());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    cp_fmt(cmd, sizeof cmd, "'%s' check metrics < '%s' 2>&1", tool, path);
    char *out = NULL;
    const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    int rc = cp_run(argv, &out);
    if (rc != 0)
        fprintf(stderr, "promtool check metrics failed (%d):\n%s\n--- body ---\n%s\n", rc, out ? out : "", text);
    free(out);
    return rc == 0 ? 0 : 1;
}

/* Scrapes port and checks the body: 200, valid, every family in `want` (NULL-ended). */
static char *scrape_and_check(int port, const char *const *want)
{
    char *body = NULL;
    assert_int_equal(http(port, "GET", "/metrics", &body), 200);
    for (size_t i = 0; want[i]; i++)
        if (!strstr(body, want[i])) {
            fprintf(stderr, "missing \"%s\" in:\n%s\n", want[i], body);
            fail();
        }
    int rc = promtool_check(body);
    if (rc == 77)
        fprintf(stderr, "NOTE: promtool is missing (Debian package prometheus): 'promtool check metrics' skipped\n");
    else
        assert_int_equal(rc, 0);
    return body;
}

/* --- set-up ------------------------------------------------------------------------------- */

static int start(cp_proc_t *p, const char *const *argv, const char *name, int *port)
{
    char log[512];
    cp_fmt(log, sizeof log, "%s/%s.log", tmp, name);
    if (cp_proc_start(p, argv, log) != 0 || (*port = metrics_port(p)) <= 0) {
        fprintf(stderr, "%s did not serve /metrics\n", name);
        cp_proc_dump_log(p, 30);
        return -1;
    }
    return 0;
}

static int setup(void **state)
{
    (void)state;
    cmr_log_set_level(CMR_LOG_WARN);
    if (cp_tmpdir(tmp, sizeof tmp) != 0 || cp_keys_make(config_bin, tmp) != 0 ||
        broker_proc_start(&broker, broker_bin, NULL) != 0)
        return -1;
    char store[512];
    cp_fmt(store, sizeof store, "%s/store", tmp);
    const char *iargv[] = {ingest_bin,    "run",
                           "--bootstrap", broker.bootstrap,
                           "--store",     store,
                           "-X",          "ingest.http.port=-1",
                           "-X",          "metrics.port=0",
                           "-X",          "metrics.lateness_ms=0",
                           "--log-level", "info",
                           NULL};
    const char *cargv[] = {config_bin, "--bootstrap",    broker.bootstrap, "-X",   cp_signing_key_option(),
                           "-X",       "metrics.port=0", "--log-level",    "info", "run",
                           NULL};
    char db[512];
    cp_fmt(db, sizeof db, "%s/instr-db", tmp);
    const char *nargv[] = {instr_bin, "--bootstrap",    broker.bootstrap, "--db", db,  "-X", cp_signing_key_option(),
                           "-X",      "metrics.port=0", "--log-level",    "info", NULL};
    if (start(&ingest, iargv, "cmr-ingest", &ingest_port) != 0 ||
        start(&config, cargv, "cmr-config", &config_port) != 0 ||
        start(&instr, nargv, "cmr-instrumenter", &instr_port) != 0)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (ingest.pid > 0)
        cp_proc_stop(&ingest);
    if (config.pid > 0)
        cp_proc_stop(&config);
    if (instr.pid > 0)
        cp_proc_stop(&instr);
    broker_proc_stop(&broker);
    cp_rmrf(tmp);
    return 0;
}

/* --- tests -------------------------------------------------------------------------------- */

/* cmr-ingest: its families, and a garbage record on cmr.events counted as rejected. */
static void test_ingest_metrics(void **state)
{
    (void)state;
    assert_int_equal(cp_proc_wait_log(&ingest, "event=ingest.started", 30000), 0);
    char err[256];
    cmr_conf_t *conf = cmr_conf_new();
    cmr_conf_set(conf, "kafka.bootstrap.servers", broker.bootstrap, "test");
    cmr_producer_t *p = cmr_producer_new(conf, "metrics-test", NULL, NULL, err, sizeof err);
    assert_non_null(p);
    static const char garbage[] = "not an avro message";
    assert_int_equal(cmr_producer_send_raw(p, cmr_topic_name(CMR_TOPIC_EVENTS), "k", 1, garbage, sizeof garbage, NULL),
                     0);
    assert_int_equal(cmr_producer_flush(p, 15000), 0);
    cmr_producer_destroy(p, 5000);
    cmr_conf_destroy(conf);

    const char *want[] = {"# TYPE cmr_ingest_batches_total counter\n",
                          "cmr_ingest_events_total ",
                          "cmr_ingest_duplicates_total ",
                          "cmr_ingest_rejected_total ",
                          "cmr_ingest_pending_records ",
                          "# TYPE cmr_messages_rejected_total counter\n",
                          "cmr_process_start_time_seconds ",
                          "cmr_build_info{version=\"",
                          NULL};
    /* the rejection shows once the worker has read the record, and the group consumer's lag
     * once it has fetched from its partitions (bounded wait) */
    char *body = NULL;
    for (int64_t deadline = cmr_mono_ms() + 30000; cmr_mono_ms() < deadline; cmr_sleep_ms(200)) {
        free(body);
        body = scrape_and_check(ingest_port, want);
        if (strstr(body, "cmr_messages_rejected_total{topic=\"cmr.events\"") &&
            strstr(body, "cmr_consumer_lag_messages{group=\"cmr-ingest\",topic=\"cmr.events\",partition=\""))
            break;
    }
    if (!strstr(body, "cmr_consumer_lag_messages{group=\"cmr-ingest\",topic=\"cmr.events\",partition=\"")) {
        fprintf(stderr, "no consumer lag in:\n%s\n", body);
        fail();
    }
    if (!strstr(body, "cmr_messages_rejected_total{topic=\"cmr.events\"")) {
        fprintf(stderr, "no rejection of cmr.events in:\n%s\n", body);
        cp_proc_dump_log(&ingest, 20);
        fail();
    }
    free(body);
}

/* --- application metrics ---------------------------------------------------------------- */

#define APP_INTERVALS 9

/* One MetricBatch of environment shop: agent `agent`, interval i (10 s each, ending at
 * `end_ms`), 20 checkouts of 40 ms, or of 300 ms when slow. */
static void send_metric_batch(cmr_producer_t *p, int64_t agent, int64_t start_ms, bool slow, uint64_t method)
{
    cmr_hist_t h = {0};
    int64_t sum = 0;
    for (int k = 0; k < 20; k++) {
        int64_t ns = (slow ? 300 : 40) * 1000000LL + k * 100000LL;
        cmr_hist_record(&h, (uint64_t)ns, 1);
        sum += ns;
    }
    cmr_buf_t enc = {0};
    cmr_hist_encode(&h, &enc);
    uint8_t trace[16];
    memset(trace, (int)agent, sizeof trace);
    cmr_transaction_metric_t tx = {.root_method_id = (int64_t)method,
                                   .name = "",
                                   .count = 20,
                                   .sum_ns = sum,
                                   .min_ns = (int64_t)h.min,
                                   .max_ns = (int64_t)h.max,
                                   .histogram = {enc.data, enc.len},
                                   .max_in_flight = 3,
                                   .slowest_trace = {trace, 16}};
    cmr_metric_batch_t b = {.agent_id = agent,
                            .interval_start_ms = start_ms,
                            .interval_ms = 10000,
                            .environment_id = "shop",
                            .transactions = {&tx, 1}};
    char err[256];
    assert_int_equal(cmr_producer_send(p, CMR_MSG_METRIC_BATCH, &b, NULL, NULL, err, sizeof err), CMR_SEND_OK);
    cmr_buf_free(&enc);
    cmr_hist_free(&h);
}

/* The first ThresholdEvent on cmr.alerts (waits up to timeout_ms): 0, or -1. */
static int next_alert(cmr_reader_t *r, int timeout_ms, cmr_msg_t *out)
{
    for (int64_t deadline = cmr_mono_ms() + timeout_ms; cmr_mono_ms() < deadline;) {
        cmr_reader_rec_t rec;
        char err[256];
        if (cmr_reader_poll(r, 200, &rec) == 1 && cmr_msg_decode(rec.payload, rec.len, out, err, sizeof err) == 0) {
            if (out->type == CMR_MSG_THRESHOLD_EVENT)
                return 0;
            cmr_msg_free(out);
        }
    }
    return -1;
}

static void test_application_metrics(void **state)
{
    (void)state;
    assert_int_equal(cp_proc_wait_log(&ingest, "event=ingest.started", 30000), 0);
    /* the environment's rule, through cmr-config like an operator */
    char *out = NULL;
    const char *yaml = "version: 1\nenvironments:\n  - id: shop\n    thresholds:\n"
                       "      - name: slow-checkout\n        transaction: \"*Checkout.checkout*\"\n"
                       "        statistic: p99\n        above: 200ms\n        for: 20s\n        min_count: 10\n"
                       "        diagnose: true\n";
    if (cp_apply(config_bin, broker.bootstrap, yaml, &out) != 0) {
        fprintf(stderr, "cmr-config apply failed:\n%s\n", out ? out : "");
        fail();
    }
    free(out);
    char err[256];
    cmr_conf_t *conf = cmr_conf_new();
    cmr_conf_set(conf, "kafka.bootstrap.servers", broker.bootstrap, "test");
    cmr_producer_t *p = cmr_producer_new(conf, "metrics-test", NULL, NULL, err, sizeof err);
    assert_non_null(p);
    /* the method's name first (the rule's glob matches names), then the data */
    uint64_t checkout = cmr_method_id("com/shop/Checkout", "checkout", "()V");
    cmr_method_entry_t me = {(int64_t)checkout, "com/shop/Checkout", "checkout", "()V", 1, NULL, 0};
    assert_int_equal(cmr_producer_send(p, CMR_MSG_METHOD_ENTRY, &me, NULL, NULL, err, sizeof err), CMR_SEND_OK);
    assert_int_equal(cmr_producer_flush(p, 15000), 0);
    const char *want_methods[] = {"cmr_ingest_methods 1\n", NULL};
    for (int64_t deadline = cmr_mono_ms() + 30000;; cmr_sleep_ms(200)) {
        char *body = NULL;
        assert_int_equal(http(ingest_port, "GET", "/metrics", &body), 200);
        bool known = strstr(body, want_methods[0]) != NULL;
        free(body);
        if (known)
            break;
        assert_true(cmr_mono_ms() < deadline);
    }
    /* two JVMs for 90 s of data ending now; JVM B is slow in the last 40 s */
    int64_t end = cmr_wall_ms() / 10000 * 10000;
    for (int i = 0; i < APP_INTERVALS; i++) {
        int64_t start = end - (APP_INTERVALS - i) * 10000LL;
        send_metric_batch(p, 0xA1, start, false, checkout);
        send_metric_batch(p, 0xB2, start, i >= APP_INTERVALS - 4, checkout);
    }
    assert_int_equal(cmr_producer_flush(p, 15000), 0);
    cmr_producer_destroy(p, 5000);

    /* the rule's verdict, on cmr.alerts */
    cmr_reader_t *alerts = cmr_reader_new(conf, cmr_topic_name(CMR_TOPIC_ALERTS), 0, err, sizeof err);
    assert_non_null(alerts);
    cmr_msg_t m;
    if (next_alert(alerts, 30000, &m) != 0) {
        cp_proc_dump_log(&ingest, 30);
        fail_msg("no ThresholdEvent on cmr.alerts");
    }
    const cmr_threshold_event_t *ev = &m.u.threshold_event;
    assert_string_equal(ev->environment_id, "shop");
    assert_string_equal(ev->rule, "slow-checkout");
    assert_int_equal(ev->state, CMR_THRESHOLD_ABNORMAL);
    assert_int_equal(ev->scope, CMR_THRESHOLD_TRANSACTION);
    assert_int_equal((uint64_t)ev->subject_id, checkout);
    assert_string_equal(ev->subject_name, "com.shop.Checkout.checkout()V");
    assert_true(ev->value > 290.0 && ev->value < 310.0); /* ms, within the histogram's error */
    assert_true(ev->threshold == 200.0);
    assert_true(ev->count >= 10);
    assert_true(ev->example_traces.count >= 1);
    assert_string_equal(ev->example_traces.items[0], "b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2");
    assert_true(ev->diagnose);
    cmr_msg_free(&m);
    cmr_reader_free(alerts);
    cmr_conf_destroy(conf);

    /* the application's histogram on /metrics, promtool-valid */
    const char *want[] = {"# TYPE cmr_app_latency_seconds histogram\n",
                          "cmr_app_latency_seconds_bucket{environment=\"shop\",kind=\"transaction\","
                          "name=\"com.shop.Checkout.checkout()V\",le=\"+Inf\"} 360\n",
                          "cmr_app_latency_seconds_bucket{environment=\"shop\",kind=\"transaction\","
                          "name=\"com.shop.Checkout.checkout()V\",le=\"0.05\"} 280\n",
                          "cmr_metrics_alerts_abnormal_total 1\n", NULL};
    char *body = NULL;
    for (int64_t deadline = cmr_mono_ms() + 10000;; cmr_sleep_ms(300)) { /* published once a second */
        assert_int_equal(http(ingest_port, "GET", "/metrics", &body), 200);
        bool all = true;
        for (size_t i = 0; want[i]; i++)
            all = all && strstr(body, want[i]);
        free(body);
        if (all || cmr_mono_ms() > deadline)
            break;
    }
    free(scrape_and_check(ingest_port, want));

    /* the queries, on the store the worker is writing */
    char store[512];
    cp_fmt(store, sizeof store, "%s/store", tmp);
    const char *top[] = {ingest_bin, "--store", store, "metrics", "top", "--env",
                         "shop",     "--last",  "1h",  "--json",  NULL};
    out = NULL;
    assert_int_equal(cp_run(top, &out), 0);
    if (!strstr(out, "\"name\":\"com.shop.Checkout.checkout()V\"") || !strstr(out, "\"count\":360")) {
        fprintf(stderr, "metrics top:\n%s\n", out);
        fail();
    }
    free(out);
    const char *jvms[] = {ingest_bin, "--store", store, "metrics", "jvms", "--name", "Checkout", "--last", "1h", NULL};
    out = NULL;
    assert_int_equal(cp_run(jvms, &out), 0);
    const char *b = strstr(out, "agent#00000000000000b2"), *a = strstr(out, "agent#00000000000000a1");
    if (!a || !b || b > a) { /* the slow JVM first */
        fprintf(stderr, "metrics jvms:\n%s\n", out);
        fail();
    }
    free(out);
}

static void test_config_metrics(void **state)
{
    (void)state;
    const char *want[] = {"# TYPE cmr_config_agents gauge\n", "cmr_config_answers_total{kind=\"configuration\"} ",
                          "cmr_config_rejected_total{reason=\"bad_instance_id\"} ", "cmr_build_info{version=\"", NULL};
    free(scrape_and_check(config_port, want));
}

static void test_instrumenter_metrics(void **state)
{
    (void)state;
    const char *want[] = {"# TYPE cmr_instrumenter_classes_total counter\n",
                          "cmr_instrumenter_redefines_total ",
                          "cmr_instrumenter_resends_total ",
                          "cmr_instrumenter_hash_mismatch_total ",
                          "# TYPE cmr_instrumenter_prepare_seconds_total counter\n",
                          "cmr_build_info{version=\"",
                          NULL};
    free(scrape_and_check(instr_port, want));
}

static void test_not_found_and_method(void **state)
{
    (void)state;
    int ports[3] = {ingest_port, config_port, instr_port};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(http(ports[i], "GET", "/", NULL), 404);
        assert_int_equal(http(ports[i], "GET", "/metrics/x", NULL), 404);
        assert_int_equal(http(ports[i], "POST", "/metrics", NULL), 405);
        assert_int_equal(http(ports[i], "DELETE", "/metrics", NULL), 405);
    }
}

/* A free loopback TCP port (bound and released: a race with others is unlikely). */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* 1 when a Prometheus instant query at port returns a non-empty vector. */
static int query_nonempty(int port, const char *encoded_query)
{
    char path[512], *body = NULL;
    cp_fmt(path, sizeof path, "/api/v1/query?query=%s", encoded_query);
    int status = http(port, "GET", path, &body);
    int ok = status == 200 && body && strstr(body, "\"status\":\"success\"") && strstr(body, "\"result\":[{");
    free(body);
    return ok;
}

static void test_prometheus_scrapes(void **state)
{
    (void)state;
    char bin[512];
    if (find_in_path("prometheus", bin, sizeof bin) != 0) {
        fprintf(stderr, "NOTE: prometheus is missing (Debian package prometheus): the scrape test is skipped\n");
        skip();
    }
    char cfg[512], data[512], log[512], flag_cfg[600], flag_data[600], flag_listen[128];
    cp_fmt(cfg, sizeof cfg, "%s/prometheus.yml", tmp);
    cp_fmt(data, sizeof data, "%s/prometheus-data", tmp);
    cp_fmt(log, sizeof log, "%s/prometheus.log", tmp);
    FILE *f = fopen(cfg, "w");
    assert_non_null(f);
    fprintf(f,
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            "scrape_configs:\n"
            "  - job_name: cmr-ingest\n    static_configs:\n      - targets: [\"127.0.0.1:%d\"]\n"
            "  - job_name: cmr-config\n    static_configs:\n      - targets: [\"127.0.0.1:%d\"]\n",
            ingest_port, config_port);
    fclose(f);
    int port = free_port();
    cp_fmt(flag_cfg, sizeof flag_cfg, "--config.file=%s", cfg);
    cp_fmt(flag_data, sizeof flag_data, "--storage.tsdb.path=%s", data);
    cp_fmt(flag_listen, sizeof flag_listen, "--web.listen-address=127.0.0.1:%d", port);
    const char *argv[] = {bin, flag_cfg, flag_data, flag_listen, "--log.level=warn", NULL};
    cp_proc_t prom = {0};
    assert_int_equal(cp_proc_start(&prom, argv, log), 0);
    int up_ingest = 0, up_config = 0, series = 0, app = 0;
    for (int64_t deadline = cmr_mono_ms() + 60000;
         cmr_mono_ms() < deadline && !(up_ingest && up_config && series && app); cmr_sleep_ms(500)) {
        up_ingest = up_ingest || query_nonempty(port, "up%7Bjob%3D%22cmr-ingest%22%7D%20%3D%3D%201");
        up_config = up_config || query_nonempty(port, "up%7Bjob%3D%22cmr-config%22%7D%20%3D%3D%201");
        series = series || query_nonempty(port, "cmr_ingest_batches_total%7Bjob%3D%22cmr-ingest%22%7D");
        /* histogram_quantile(0.99, cmr_app_latency_seconds_bucket{environment="shop"}) > 0.25:
         * the application's p99 as Prometheus computes it from the exported buckets */
        app = app || query_nonempty(port, "histogram_quantile(0.99%2C%20cmr_app_latency_seconds_bucket%7B"
                                          "environment%3D%22shop%22%7D)%20%3E%200.25");
    }
    if (!(up_ingest && up_config && series && app))
        cp_proc_dump_log(&prom, 30);
    cp_proc_stop(&prom);
    assert_true(up_ingest);
    assert_true(up_config);
    assert_true(series);
    assert_true(app);
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: %s PATH-TO-cmr-broker PATH-TO-cmr-ingest PATH-TO-cmr-config PATH-TO-cmr-instrumenter\n",
                argv[0]);
        return 2;
    }
    broker_bin = argv[1];
    ingest_bin = argv[2];
    config_bin = argv[3];
    instr_bin = argv[4];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ingest_metrics),       cmocka_unit_test(test_application_metrics),
        cmocka_unit_test(test_config_metrics),       cmocka_unit_test(test_instrumenter_metrics),
        cmocka_unit_test(test_not_found_and_method), cmocka_unit_test(test_prometheus_scrapes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

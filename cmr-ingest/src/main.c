/*
 * main.c - cmr-ingest: the ingest worker and its operator commands.
 * Thin: options (cmr_cli_parse conventions), then one call into the library.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/conf.h"
#include "cmr/ids.h"
#include "cmr/ingest.h"
#include "cmr/kafka.h"
#include "cmr/metrics.h"
#include "cmr/log.h"
#include "cmr/program.h"
#include "cmr/metrics_http.h"

static const cmr_cli_option_t options[] = {
    {"store", 's', "ingest.store", "DIR", "store root (default ./cmr-ingest-data)"},
    {"group", 0, "ingest.group", "ID", "run: consumer group (default cmr-ingest)"},
    {"http-port", 0, "ingest.http.port", "PORT", "run: HTTP API port, 0 = any free one, -1 = off (default 8470)"},
    {"http-address", 0, "ingest.http.address", "ADDR", "run: HTTP API address (default 127.0.0.1)"},
    {"since", 0, "query.since", "TIME", "replay: start at this time instead of the beginning"},
    {"from", 0, "query.from", "TIME", "traces: started at or after TIME (ISO 8601 UTC, unix time, or -10m)"},
    {"to", 0, "query.to", "TIME", "traces: started at or before TIME"},
    {"min-duration", 0, "query.min-duration", "DUR", "traces: at least this long (250ms, 1.5s, 300us)"},
    {"root", 0, "query.root", "METHOD", "traces: root method (part of Class.method(desc), or its hex id)"},
    {"agent", 0, "query.agent", "AGENT", "traces: a JVM took part (part of name@host, or its hex agent id)"},
    {"contains", 0, "query.contains", "METHOD", "traces: this method was called somewhere in the trace"},
    {"http-method", 0, "query.http-method", "GLOB", "traces, diagnosis: the root's HTTP request method (GET, P*)"},
    {"http-path", 0, "query.http-path", "GLOB", "traces, diagnosis: the root's HTTP request path (/checkout*)"},
    {"http-status", 0, "query.http-status", "GLOB", "traces, diagnosis: the root's HTTP response status (5*, 404)"},
    {"slowest", 0, "query.slowest", NULL, "traces: longest first (default: newest first)"},
    {"limit", 'n', "query.limit", "N", "traces: at most N (default 50); diagnosis: traces (default 1000)"},
    {"json", 0, "query.json", NULL, "traces, show, diagnosis, metrics, agents: JSON instead of text"},
    {"env", 0, "query.env", "ENV",
     "metrics: this environment only (default: all); traces: a JVM last reporting this environment took part"},
    {"kind", 0, "query.kind", "KIND", "metrics: transaction (default) or method"},
    {"name", 0, "query.name", "NAME", "metrics: part of the transaction's or method's name, or its hex id"},
    {"stat", 0, "query.stat", "STAT", "metrics: p50 p90 p95 p99 (default) p999 max mean count errors error_rate"},
    {"last", 0, "query.last", "DUR", "metrics: the window ends now and is this long (default 1h)"},
    {"res", 0, "query.res", "RES", "metrics series: 10s, 1m or 1h (default: by the window's length)"},
    {"format", 'f', "query.format", "FMT", "export: chrome | otlp"},
    {0},
};
/* Every key cmr-ingest accepts (docs/CONFIGURATION.md is generated from it: --help-keys).
 * A NULL description: the option's help says it. */
static const cmr_conf_key_t keys[] = {
    {"ingest.store", "cmr-ingest-data",
     "store root: one RocksDB per cmr.events partition plus meta slots; the workers of one group share it"},
    {"ingest.group", "cmr-ingest", "run: consumer group on cmr.events"},
    {"ingest.http.address", "127.0.0.1",
     "run, http: address of the HTTP API: IPv4 or IPv6 literal, :: (dual stack), localhost"},
    {"ingest.http.token_file", "",
     "run, http: a file (owner-only) holding the access token every request must carry (Authorization: Bearer); "
     "required when the address is not loopback"},
    {"ingest.http.port", "8470",
     "run, http: port of the HTTP API; 0 = any free port (logged); -1 = no HTTP API (run only)"},
    {"ingest.sync", "true",
     "fsync the RocksDB WAL at every group commit (off: a killed process loses nothing, a crashed machine may lose the "
     "last group, whose offsets were committed)"},
    {"ingest.commit.records", "2000", "records per group commit at most"},
    {"ingest.commit.interval_ms", "50",
     "a group is committed at the latest this long after its first record (and at once when the topic is idle)"},
    {"ingest.retention.age_ms", "604800000",
     "traces that started longer ago are deleted (default 7 days); 0 keeps them"},
    {"ingest.retention.bytes", "0",
     "per partition: the oldest traces are deleted beyond this many bytes of stored batches; 0 = no bound"},
    {"ingest.retention.check_ms", "10000", "how often retention runs"},
    {"ingest.store.write_buffer_mb", "16",
     "RocksDB memtable of a partition's batches, and of its trace summaries (a partition store holds at most twice "
     "this in memtables; one store per partition a worker owns)"},
    {"ingest.trace.keep_ms", "3000",
     "a complete trace that awaits children (hand-offs no segment continues yet) stays in memory this long for "
     "segments of other JVMs that come later (the agents' send interval, 1 s by default, and some); later ones "
     "rebuild it from the store; 0 = none kept"},
    {"ingest.trace.keep_max", "4096", "complete traces kept so, per partition at most (the oldest go first); 0 = none"},
    {"ingest.malloc.keep_mb", "256",
     "run: freed heap memory the worker keeps for reuse instead of giving it back to the system at once (the kernel "
     "zeroes fresh pages for every large block otherwise: about a fifth of ingest's CPU on small traces); its "
     "resident size then stays near its peak; 0 = the C library's defaults"},
    {"ingest.exit_idle_ms", "0",
     "exit after the topic has been idle this long once records arrived (catch up and stop: benchmarks, batch runs); "
     "0 = never"},
    {"ingest.worker_id", NULL,
     "run: this worker's id in cmr.ingest-workers (letters, digits, . _ : -; default <hostname>-<HTTP port>); keep "
     "it across restarts so that its announcement is replaced, not added"},
    {"ingest.http.advertise_url", NULL,
     "run: the base URL other workers reach this worker's HTTP API at (default http://<ingest.http.address, or the "
     "hostname when that is a wildcard>:<port>)"},
    {"ingest.announce.interval_ms", "5000",
     "run: how often the worker announces its partitions on cmr.ingest-workers (and at every change); an "
     "announcement older than three times this does not count"},
    {"kafka.partitioner", NULL,
     "run: librdkafka's partitioner, as the agents' producers use it (default consistent_random): the fan-out finds "
     "the partition of a trace id with it"},
    {"ingest.fanout.timeout_ms", "3000",
     "run: a list query waits this long for the other workers' answers; what did not come is named in the answer "
     "(partitions_unreachable)"},
    {"query.since", NULL, NULL},
    {"query.from", NULL, NULL},
    {"query.to", NULL, NULL},
    {"query.min-duration", NULL, NULL},
    {"query.root", NULL, NULL},
    {"query.agent", NULL, NULL},
    {"query.contains", NULL, NULL},
    {"query.http-method", NULL, NULL},
    {"query.http-path", NULL, NULL},
    {"query.http-status", NULL, NULL},
    {"query.slowest", "false", NULL},
    {"query.limit", "50", NULL},
    {"query.json", "false", NULL},
    {"query.format", "chrome", NULL},
    {"query.env", NULL, NULL},
    {"query.kind", "transaction", NULL},
    {"query.name", NULL, NULL},
    {"query.stat", "p99", NULL},
    {"query.last", "1h", NULL},
    {"query.res", NULL, NULL},
    {"metrics.retention.10s_ms", "172800000", "run: 10-second points of the metrics store are kept this long (2 days)"},
    {"metrics.retention.1m_ms", "1209600000", "run: 1-minute points are kept this long (14 days)"},
    {"metrics.retention.1h_ms", "34560000000", "run: 1-hour points are kept this long (400 days)"},
    {"metrics.max_series", "100000",
     "run: series per metrics partition store at most; points of further series are dropped and counted "
     "(cmr_metrics_series_overflow_total)"},
    {"metrics.lateness_ms", "15000",
     "run: threshold rules judge the data this far behind the newest interval an environment reported (late JVMs)"},
    {"metrics.prometheus.max_series", "500",
     "run: application series on GET /metrics at most (the first seen); more are counted"},
    {"metrics.rules.max_alerts", "100",
     "run: abnormal events per rule and evaluation at most; more wait and are counted"},
    CMR_CONF_KEY_METRICS_LISTEN,
    CMR_CONF_KEY_METRICS_PORT,
    CMR_CONF_KEY_METRICS_TOKEN_FILE,
    CMR_CONF_KEY_TOPIC_PREFIX,
    CMR_CONF_KEY_KAFKA,
    {0},
};

static const cmr_cli_t cli = {
    .program = "cmr-ingest",
    .synopsis = "[options] run | replay | traces | show TRACE | export TRACE FILE | diagnosis ID | http | metrics "
                "QUERY | agents [AGENT]",
    .summary = "Call trees across threads and JVMs from cmr.events, and metrics from cmr.metrics, stored in RocksDB\n"
               "(docs/INGEST.md, docs/METRICS.md).\n"
               "  run                 the worker: consumes cmr.events and cmr.metrics in its group, judges the\n"
               "                      threshold rules (events on cmr.alerts), serves the HTTP API\n"
               "  replay [--since T]  rebuild a fresh store (--store DIR, empty) from the topics\n"
               "  traces [filters]    list traces (--from --to --min-duration --root --agent --contains --env\n"
               "                      --http-method --http-path --http-status --slowest --limit --json)\n"
               "  show TRACE          the call tree: total and self time, thread and JVM of every call\n"
               "  export TRACE FILE   write the trace as Chrome trace-event JSON or OTLP JSON (--format)\n"
               "  diagnosis ID        the traces a diagnosis (16 hex digits) tagged, newest first, and per\n"
               "                      method over their trees: calls, total, self, p50/p95/p99/max\n"
               "                      (--limit, default 1000 traces; --http-method --http-path\n"
               "                      --http-status; --json)\n"
               "  http                serve the HTTP API on a store without consuming\n"
               "  metrics QUERY       top | series | jvms | alerts | stalled (--env --kind --name --stat\n"
               "                      --last --from --to --res --limit --agent --json)\n"
               "  agents [AGENT]      the latest status of every JVM, or one JVM's history (--from --to)\n"
               "\n"
               "Exit status (docs/INGEST.md):\n"
               "  0  done; run and http also when stopped by SIGINT / SIGTERM (run: or idle, with\n"
               "     ingest.exit_idle_ms) after committing\n"
               "  1  failed: no store or it cannot be opened, read or written, no such trace, the\n"
               "     export file cannot be written, the HTTP port cannot be bound (http), the\n"
               "     topics cannot be read, a batch could not be stored (run; it comes again), or\n"
               "     a fatal Kafka consumer error (run, logged; after committing what it stored)\n"
               "  2  bad usage: unknown option or command, missing or extra arguments, a bad\n"
               "     configuration value, a malformed trace id, diagnosis id, filter, time,\n"
               "     duration or --format, or replay into a store root that already holds a store",
    .options = options,
    .keys = keys,
};

static volatile sig_atomic_t stop_flag;


static int open_view(const cmr_conf_t *conf, cmr_ingest_view_t **v)
{
    char err[1024];
    *v = cmr_ingest_view_open(cmr_conf_get(conf, "ingest.store", "cmr-ingest-data"), err, sizeof err);
    if (!*v) {
        fprintf(stderr, "cmr-ingest: %s\n", err);
        return 1;
    }
    return 0;
}

static int cmd_traces(const cmr_conf_t *conf)
{
    static const char *const keys[] = {"from", "to",          "min-duration", "root",        "agent", "contains",
                                       "env",  "http-method", "http-path",    "http-status", "limit", NULL};
    cmr_trace_filter_t f = {0};
    char err[512], key[64];
    for (int i = 0; keys[i]; i++) {
        snprintf(key, sizeof key, "query.%s", keys[i]);
        const char *v = cmr_conf_get(conf, key, NULL);
        if (v && cmr_trace_filter_set(&f, keys[i], v, err, sizeof err) != 0) {
            fprintf(stderr, "cmr-ingest: --%s\n", err);
            return 2;
        }
    }
    bool slowest, json;
    if (cmr_conf_get_bool(conf, "query.slowest", false, &slowest, err, sizeof err) ||
        cmr_conf_get_bool(conf, "query.json", false, &json, err, sizeof err)) {
        fprintf(stderr, "cmr-ingest: %s\n", err);
        return 2;
    }
    f.slowest = slowest;
    cmr_ingest_view_t *v;
    if (open_view(conf, &v))
        return 1;
    cmr_trace_summary_t *s;
    long n = cmr_ingest_view_list(v, &f, &s);
    if (n < 0) {
        fprintf(stderr, "cmr-ingest: query failed\n");
        cmr_ingest_view_free(v);
        return 1;
    }
    if (json) {
        char *j = cmr_ingest_list_json(cmr_ingest_view_names(v), s, (size_t)n);
        printf("%s\n", j ? j : "");
        free(j);
    } else {
        cmr_ingest_print_list(stdout, cmr_ingest_view_names(v), s, (size_t)n);
    }
    free(s);
    cmr_ingest_view_free(v);
    return 0;
}

/* Loads a trace's tree; prints why not. 0, 1 (not found / error), 2 (bad id). */
static int load_tree(const cmr_conf_t *conf, const char *id_s, cmr_ingest_view_t **v, cmr_tree_t *t)
{
    uint8_t id[16];
    if (strlen(id_s) != 32 || cmr_unhex(id_s, id, 16) != 0) {
        fprintf(stderr, "cmr-ingest: \"%s\" is not a trace id (32 hex digits)\n", id_s);
        return 2;
    }
    if (open_view(conf, v))
        return 1;
    int r = cmr_ingest_view_tree(*v, id, t);
    if (r != 1) {
        fprintf(stderr, "cmr-ingest: %s: %s\n", id_s, r == 0 ? "no such trace" : "cannot read the trace");
        cmr_ingest_view_free(*v);
        return 1;
    }
    return 0;
}

static int cmd_show(const cmr_conf_t *conf, const char *id)
{
    cmr_ingest_view_t *v;
    cmr_tree_t t;
    int rc = load_tree(conf, id, &v, &t);
    if (rc)
        return rc;
    bool json = !strcmp(cmr_conf_get(conf, "query.json", "false"), "true");
    if (json) {
        char *j = cmr_ingest_tree_json(cmr_ingest_view_names(v), &t);
        printf("%s\n", j ? j : "");
        free(j);
    } else {
        cmr_ingest_print_tree(stdout, cmr_ingest_view_names(v), &t);
    }
    cmr_tree_free(&t);
    cmr_ingest_view_free(v);
    return 0;
}

static int cmd_export(const cmr_conf_t *conf, const char *id, const char *file)
{
    const char *format = cmr_conf_get(conf, "query.format", "chrome");
    if (strcmp(format, "chrome") && strcmp(format, "otlp")) {
        fprintf(stderr, "cmr-ingest: --format must be chrome or otlp, not \"%s\"\n", format);
        return 2;
    }
    cmr_ingest_view_t *v;
    cmr_tree_t t;
    int rc = load_tree(conf, id, &v, &t);
    if (rc)
        return rc;
    char *j = !strcmp(format, "chrome") ? cmr_ingest_export_chrome(cmr_ingest_view_names(v), &t)
                                        : cmr_ingest_export_otlp(cmr_ingest_view_names(v), &t);
    cmr_tree_free(&t);
    cmr_ingest_view_free(v);
    FILE *f = strcmp(file, "-") ? fopen(file, "w") : stdout;
    if (!j || !f) {
        fprintf(stderr, "cmr-ingest: cannot write %s\n", file);
        free(j);
        return 1;
    }
    fprintf(f, "%s\n", j);
    free(j);
    if (f != stdout && fclose(f) != 0) {
        fprintf(stderr, "cmr-ingest: cannot write %s\n", file);
        return 1;
    }
    return 0;
}

static int cmd_http(const cmr_conf_t *conf)
{
    char err[512];
    int64_t port;
    if (cmr_conf_get_int(conf, "ingest.http.port", 8470, 0, 65535, &port, err, sizeof err)) {
        fprintf(stderr, "cmr-ingest: %s\n", err);
        return 2;
    }
    cmr_ingest_http_t *h = cmr_ingest_http_start_conf(conf, cmr_conf_get(conf, "ingest.store", "cmr-ingest-data"),
                                                      (int)port, err, sizeof err);
    if (!h) {
        fprintf(stderr, "cmr-ingest: %s\n", err);
        return 1;
    }
    cmr_program_stop_on_signals(&stop_flag);
    while (!stop_flag)
        pause();
    cmr_ingest_http_stop(h);
    return 0;
}

/* `metrics top|series|jvms|alerts|stalled`: the query.* options become the query's parameters. */
static int cmd_metrics(const cmr_conf_t *conf, const char *what)
{
    static const char *const params[] = {"env", "kind", "name", "stat", "last", "from", "to", "res", "limit", "agent"};
    const char *keys[10], *values[10];
    size_t n = 0;
    for (size_t i = 0; i < sizeof params / sizeof params[0]; i++) {
        char key[32];
        snprintf(key, sizeof key, "query.%s", params[i]);
        const char *v = cmr_conf_get(conf, key, NULL);
        if (v) {
            keys[n] = params[i];
            values[n++] = v;
        }
    }
    return cmr_metrics_cli(cmr_conf_get(conf, "ingest.store", "cmr-ingest-data"), what, keys, values, n,
                           !strcmp(cmr_conf_get(conf, "query.json", "false"), "true"));
}

/* `diagnosis ID [--limit N] [--http-method M] [--http-path GLOB] [--http-status GLOB] [--json]`:
 * the traces a diagnosis tagged (those matching the filters) and its per-method statistics. */
static int cmd_diagnosis(const cmr_conf_t *conf, const char *id)
{
    char err[512], *json = NULL;
    static const char *const names[] = {"limit", "http-method", "http-path", "http-status"};
    const char *keys[4], *values[4];
    size_t nparams = 0;
    for (size_t i = 0; i < 4; i++) {
        char key[64];
        snprintf(key, sizeof key, "query.%s", names[i]);
        const char *v = cmr_conf_get(conf, key, NULL);
        if (v) {
            keys[nparams] = names[i];
            values[nparams++] = v;
        }
    }
    uint64_t diag;
    size_t n;
    if (cmr_ingest_diagnosis_params(id, keys, values, nparams, &diag, &n, NULL, err, sizeof err) != 0) {
        fprintf(stderr, "cmr-ingest: diagnosis: %s\n", err); /* bad usage before a missing store */
        return 2;
    }
    bool as_json = !strcmp(cmr_conf_get(conf, "query.json", "false"), "true");
    cmr_ingest_view_t *v;
    if (open_view(conf, &v))
        return 1;
    int rc = cmr_ingest_diagnosis_query(v, id, keys, values, nparams, &json, as_json ? NULL : stdout, err, sizeof err);
    cmr_ingest_view_free(v);
    if (rc != 0)
        fprintf(stderr, "cmr-ingest: diagnosis %s: %s\n", id, err);
    else if (as_json)
        printf("%s\n", json);
    free(json);
    return rc;
}

/* `agents [AGENT]`: the latest status of every JVM, or one JVM's history (--from, --to). */
static int cmd_agents(const cmr_conf_t *conf, const char *id)
{
    char err[512], *json = NULL;
    uint64_t agent = 0;
    int64_t from_ns = 0, to_ns = 0;
    const char *from = cmr_conf_get(conf, "query.from", NULL), *to = cmr_conf_get(conf, "query.to", NULL);
    if ((id && cmr_id64_parse(id, strlen(id), &agent) != 0) || (from && cmr_ingest_parse_time(from, &from_ns)) ||
        (to && cmr_ingest_parse_time(to, &to_ns))) {
        fprintf(stderr, "cmr-ingest: agents [AGENT-ID (16 hex digits)] [--from TIME] [--to TIME]\n");
        return 2;
    }
    bool as_json = !strcmp(cmr_conf_get(conf, "query.json", "false"), "true");
    if (cmr_ingest_agents(cmr_conf_get(conf, "ingest.store", "cmr-ingest-data"), agent, from_ns / 1000000,
                          to_ns / 1000000, &json, as_json ? NULL : stdout, err, sizeof err) != 0) {
        fprintf(stderr, "cmr-ingest: %s\n", err);
        return 1;
    }
    if (as_json)
        printf("%s\n", json);
    free(json);
    return 0;
}

static int dispatch(const cmr_conf_t *conf, const char *cmd, int nargs, char **args)
{
    if (!strcmp(cmd, "run") && nargs == 0) {
        cmr_program_stop_on_signals(&stop_flag);
        return cmr_ingest_worker_run(conf, &stop_flag);
    }
    if (!strcmp(cmd, "replay") && nargs == 0)
        return cmr_ingest_replay(conf, cmr_conf_get(conf, "query.since", NULL), stderr);
    if (!strcmp(cmd, "traces") && nargs == 0)
        return cmd_traces(conf);
    if (!strcmp(cmd, "show") && nargs == 1)
        return cmd_show(conf, args[0]);
    if (!strcmp(cmd, "export") && nargs == 2)
        return cmd_export(conf, args[0], args[1]);
    if (!strcmp(cmd, "diagnosis") && nargs == 1)
        return cmd_diagnosis(conf, args[0]);
    if (!strcmp(cmd, "http") && nargs == 0)
        return cmd_http(conf);
    if (!strcmp(cmd, "metrics") && nargs == 1)
        return cmd_metrics(conf, args[0]);
    if (!strcmp(cmd, "agents") && nargs <= 1)
        return cmd_agents(conf, nargs ? args[0] : NULL);
    fprintf(stderr, "cmr-ingest: bad command or arguments: %s\nTry 'cmr-ingest --help'.\n", cmd);
    return 2;
}

int main(int argc, char **argv)
{
    cmr_conf_t *conf;
    int first, rc = cmr_program_start(&cli, argc, argv, &conf, &first);
    if (rc != CMR_PROGRAM_RUN)
        return rc;
    if (first >= argc) {
        fprintf(stderr, "cmr-ingest: missing command\nTry 'cmr-ingest --help'.\n");
        cmr_conf_destroy(conf);
        return 2;
    }
    rc = dispatch(conf, argv[first], argc - first - 1, argv + first + 1);
    cmr_conf_destroy(conf);
    return cmr_kafka_process_end(rc);
}

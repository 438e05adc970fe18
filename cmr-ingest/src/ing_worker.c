/*
 * ing_worker.c - `cmr-ingest run`: the consumer-group worker.
 *
 * Consumes cmr.events and cmr.metrics in group `ingest.group` (default cmr-ingest):
 * EventBatches go to the trace engine, MetricBatches to the metrics module (cmr/metrics.h),
 * each partition with its own store. Records are applied and committed in groups: when
 * `ingest.commit.records` are pending, after `ingest.commit.interval_ms`, or when the
 * topics are idle, the threshold rules are judged, then the engine and the metrics stores
 * write durably, and only then are the records marked done (their offsets stored and
 * committed). On a rebalance the pending group is written and marked before the revoked
 * partitions' stores are closed, so the next owner opens a store that holds everything
 * committed. Threshold events are produced on cmr.alerts.
 *
 * cmr.methods, cmr.registrations and cmr.agent-events are read fully by assign() (every
 * worker needs all of them) into the worker's meta store; cmr.config (environments and
 * their threshold rules) into the metrics module. The HTTP API runs in its own thread, and
 * so does GET /metrics (metrics.port): it reads copies of the counters and of the
 * application's families that the loop publishes under mutexes.
 *
 * With separate store roots (one per host) a newly assigned partition is paused until its
 * store is restored from the topic (ing_restore.c); only then does the worker count it as
 * its own: it announces what it owns on cmr.ingest-workers (at every change and every
 * ingest.announce.interval_ms; leaving=true when it stops) and reads the others'
 * announcements, for the HTTP API's fan-out (ing_peers.c).
 *
 * Ownership: the worker owns its consumer, readers, engine, peers and HTTP server.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmr/buf.h"
#include "cmr/clock.h"
#include "cmr/http_server.h"
#include "cmr/ingest.h"
#include "cmr/kafka.h"
#include "cmr/log.h"
#include "cmr/metrics.h"
#include "cmr/metrics_http.h"
#include "cmr/program.h"
#include "cmr/rejects.h"
#include "cmr/topics.h"
#include "cmr/wire.h"

/* How soon retention runs again when its last call left old traces (it spends up to half
 * a second a call): a backlog goes at about a third of the worker's time. */
#define RETENTION_CATCH_UP_MS 1000

/* A partition assigned to this worker whose store may be behind the group (ing_restore.c):
 * paused from its assignment until its missing offsets are read back. */
typedef struct restore_item {
    int32_t partition;
    bool metrics;    /* cmr.metrics, else cmr.events */
    int64_t applied; /* the store's applied offset when it was opened (-1: none) */
} restore_item_t;

typedef struct worker {
    const cmr_conf_t *conf;
    cmr_ingest_engine_t *engine;
    cmr_metrics_t *metrics;   /* the metrics module (cmr.metrics, cmr.config) */
    cmr_producer_t *producer; /* threshold events */
    cmr_consumer_t *consumer;
    cmr_reader_client_t *readers; /* owned: the handle of tables and directory */
    cmr_reader_t *tables[4];      /* cmr.methods, cmr.registrations, cmr.agent-events, cmr.config */
    cmr_record_t **pending;       /* owned: received, not yet marked done */
    size_t npending, cap;
    int64_t first_pending_ms;
    int64_t commit_records, commit_interval_ms;
    int64_t first_record_ms, last_commit_ms; /* wall clock, for throughput measurements */
    int fatal;
    pthread_mutex_t published_lock; /* guards published and published_pending */
    cmr_ingest_stats_t published;   /* copy of the engine's counters for /metrics */
    uint64_t published_pending;
    uint64_t published_bytes; /* the trace stores' size, refreshed once a second */
    int64_t bytes_refreshed_ms;
    cmr_lag_gauge_t lag;     /* the group consumer's lag per partition, for /metrics */
    restore_item_t *restore; /* owned: assigned partitions paused until restored */
    size_t nrestore, restore_cap;
    int64_t restore_retry_ms; /* the next attempt after the committed offsets were unknown */
    volatile sig_atomic_t *stop;
    cmr_ingest_peers_t *peers; /* owned: who owns which partition (with the HTTP API only) */
    cmr_reader_t *directory;   /* cmr.ingest-workers, read whole */
    int64_t announce_interval_ms, announced_ms;
    bool announce_now; /* the partitions this worker owns changed */
} worker_t;

/* Copies the counters /metrics reports (the worker thread; cheap: a struct copy). */
static void publish_stats(worker_t *w)
{
    cmr_ingest_stats_t s;
    cmr_ingest_engine_stats(w->engine, &s);
    int64_t now = cmr_mono_ms();
    bool refresh = now - w->bytes_refreshed_ms >= 1000;
    uint64_t bytes = refresh ? cmr_ingest_engine_disk_bytes(w->engine) : 0;
    if (refresh)
        w->bytes_refreshed_ms = now;
    pthread_mutex_lock(&w->published_lock);
    w->published = s;
    w->published_pending = w->npending;
    if (refresh)
        w->published_bytes = bytes;
    pthread_mutex_unlock(&w->published_lock);
}

/* GET /metrics (on a server thread): only the published copy. */
static void metrics_fill(cmr_buf_t *out, void *opaque)
{
    worker_t *w = opaque;
    pthread_mutex_lock(&w->published_lock);
    cmr_ingest_stats_t s = w->published;
    uint64_t pending = w->published_pending, bytes = w->published_bytes;
    pthread_mutex_unlock(&w->published_lock);
    const cmr_prom_row_t rows[] = {
        {"cmr_ingest_messages_total", "counter", "EventBatch messages read (each holds several segment batches)",
         s.messages},
        {"cmr_ingest_batches_total", "counter", "segment batches applied", s.batches},
        {"cmr_ingest_events_total", "counter", "events in the segment batches applied", s.events},
        {"cmr_ingest_event_bytes_total", "counter", "bytes of the applied segment batches' encoded events as stored",
         s.event_bytes},
        {"cmr_ingest_duplicates_total", "counter",
         "segment batches seen before (producer retries, replays), not applied again", s.duplicates},
        {"cmr_ingest_rejected_total", "counter",
         "segment batches refused by the engine (malformed), and damaged messages (once each)", s.rejected},
        {"cmr_ingest_attributes_rejected_total", "counter",
         "attribute values (transaction data) left out of applied batches as invalid", s.attributes_rejected},
        {"cmr_ingest_flushes_total", "counter", "group commits written durably", s.flushes},
        {"cmr_ingest_traces_reloaded_total", "counter",
         "trace states rebuilt from the store for a segment that came after the trace left memory", s.traces_reloaded},
        {"cmr_ingest_restored_records_total", "counter",
         "records read back from the topics to bring newly assigned partitions' stores up to the group", s.restored},
        {"cmr_ingest_restore_missing_total", "counter",
         "offsets a restore needed that the topics no longer held (retention): lost for this worker's store",
         s.restore_missing},
        {"cmr_ingest_methods", "gauge", "method names known (cmr.methods)", s.methods},
        {"cmr_ingest_agents", "gauge", "agents known (cmr.registrations)", s.agents},
        {"cmr_ingest_pending_records", "gauge", "records received, not yet committed", pending},
        {"cmr_ingest_store_bytes", "gauge", "SST files and memtables of the trace stores this worker has open", bytes},
    };
    cmr_prom_rows(out, rows, sizeof rows / sizeof rows[0]);
    cmr_lag_gauge_write(&w->lag, out);
    cmr_metrics_prometheus(w->metrics, out);
}

/* Makes the group durable, judges the threshold rules on what is now written (their state
 * durable too), then marks the group's records done. */
static int commit_group(worker_t *w)
{
    if (cmr_ingest_engine_flush(w->engine) != 0 || cmr_metrics_flush(w->metrics) != 0 ||
        (cmr_metrics_evaluate(w->metrics) > 0 && cmr_metrics_flush(w->metrics) != 0)) {
        w->fatal = 1;
        return -1;
    }
    for (size_t i = 0; i < w->npending; i++) {
        cmr_consumer_done(w->consumer, w->pending[i]);
        cmr_record_free(w->pending[i]);
    }
    if (w->npending)
        w->last_commit_ms = cmr_wall_ms();
    w->npending = 0;
    return 0;
}

/* Queues an assigned partition for restore_assigned(). 0 or -1. */
static int queue_restore(worker_t *w, bool metrics, int32_t partition)
{
    if (CMR_ARRAY_GROW(w->restore, w->restore_cap, w->nrestore + 1) != 0)
        return -1;
    int64_t applied =
        metrics ? cmr_metrics_applied(w->metrics, partition) : cmr_ingest_engine_applied(w->engine, partition);
    w->restore[w->nrestore++] = (restore_item_t){.partition = partition, .metrics = metrics, .applied = applied};
    return 0;
}

/* A revoked partition is not restored any more. */
static void unqueue_restore(worker_t *w, bool metrics, int32_t partition)
{
    for (size_t i = 0; i < w->nrestore; i++)
        if (w->restore[i].partition == partition && w->restore[i].metrics == metrics) {
            w->restore[i--] = w->restore[--w->nrestore];
        }
}

static void on_rebalance(cmr_consumer_t *c, int revoked, const cmr_partition_t *parts, size_t n, void *opaque)
{
    worker_t *w = opaque;
    const char *metrics = cmr_topic_name(CMR_TOPIC_METRICS);
    if (revoked) {
        commit_group(w);
        for (size_t i = 0; i < n; i++) {
            bool m = !strcmp(parts[i].topic, metrics);
            unqueue_restore(w, m, parts[i].partition);
            if (w->peers) {
                cmr_ingest_peers_set_owned(w->peers, m ? CMR_TOPIC_METRICS : CMR_TOPIC_EVENTS, parts[i].partition,
                                           false);
                w->announce_now = true;
            }
            if (m)
                cmr_metrics_close_partition(w->metrics, parts[i].partition);
            else
                cmr_ingest_engine_close_partition(w->engine, parts[i].partition);
        }
        return;
    }
    for (size_t i = 0; i < n; i++) {
        bool m = !strcmp(parts[i].topic, metrics);
        int rc = m ? cmr_metrics_open_partition(w->metrics, parts[i].partition, 30000)
                   : cmr_ingest_engine_open_partition(w->engine, parts[i].partition, 30000);
        if (rc != 0 || queue_restore(w, m, parts[i].partition) != 0)
            w->fatal = 1; /* nothing of it may be marked done: exit, another worker takes it */
    }
    /* consumed only once restored; a failed pause is still correct (the store's set of
     * batches does not depend on the order, and the range was taken at open) */
    if (n && cmr_consumer_pause(c, parts, n) != 0)
        cmr_log(CMR_LOG_WARN, "ingest.pause_failed", "partitions=%zu", n);
}

/* The record at offset is handled: its store writes the offset with the next flush. */
static void note_applied(worker_t *w, bool metrics, int32_t partition, int64_t offset)
{
    if (metrics)
        cmr_metrics_set_applied(w->metrics, partition, offset);
    else
        cmr_ingest_engine_set_applied(w->engine, partition, offset);
}

static int hold(worker_t *w, cmr_record_t *rec)
{
    if (CMR_ARRAY_GROW(w->pending, w->cap, w->npending + 1) != 0)
        return -1;
    if (!w->npending)
        w->first_pending_ms = cmr_mono_ms();
    w->pending[w->npending++] = rec;
    return 0;
}

/* Applies one decoded record of cmr.events or cmr.metrics (consumed, or read back by a
 * restore) and notes its offset as handled in its partition's store. 0, or -1 when it
 * cannot be stored (fatal: nothing of it may be marked done). */
static int apply_msg(worker_t *w, const char *topic, int32_t partition, int64_t offset, const cmr_msg_t *msg)
{
    char err[512];
    bool metrics = !strcmp(topic, cmr_topic_name(CMR_TOPIC_METRICS));
    if (msg->type == CMR_MSG_METRIC_BATCH) {
        int r = cmr_metrics_add(w->metrics, partition, &msg->u.metric_batch, err, sizeof err);
        if (r == -1)
            cmr_reject(topic, "malformed_metrics", partition, offset, err);
        if (r == -2) {
            cmr_log(CMR_LOG_ERROR, "metrics.batch_not_stored", "partition=%d offset=%" PRId64 " reason=\"%s\"",
                    partition, offset, err);
            return -1;
        }
    } else if (msg->type != CMR_MSG_EVENT_BATCH) {
        cmr_log(CMR_LOG_WARN, "ingest.foreign_message", "topic=%s partition=%d offset=%" PRId64 " type=%s", topic,
                partition, offset, cmr_msg_type_name(msg->type));
    } else {
        int r = cmr_ingest_engine_add(w->engine, partition, &msg->u.event_batch, err, sizeof err);
        if (r == -1)
            cmr_log(CMR_LOG_WARN, "ingest.batch_rejected", "partition=%d offset=%" PRId64 " reason=\"%s\"", partition,
                    offset, err);
        if (r >= 0 && err[0]) /* applied, without its invalid attribute values */
            cmr_reject(topic, "bad_attribute", partition, offset, err);
        if (r == -2) {
            cmr_log(CMR_LOG_ERROR, "ingest.batch_not_stored", "partition=%d offset=%" PRId64 " reason=\"%s\"",
                    partition, offset, err);
            return -1;
        }
    }
    note_applied(w, metrics, partition, offset);
    return 0;
}

static void handle(worker_t *w, cmr_record_t *rec)
{
    if (!w->first_record_ms)
        w->first_record_ms = cmr_wall_ms();
    if (apply_msg(w, rec->topic, rec->partition, rec->offset, &rec->msg) != 0) {
        w->fatal = 1;
        cmr_record_free(rec);
        return;
    }
    if (hold(w, rec) != 0) {
        w->fatal = 1;
        cmr_record_free(rec);
    }
}

/* --- restore of newly assigned partitions (ing_restore.c) ----------------------------- */

static int restore_apply(void *opaque, const char *topic, int32_t partition, int64_t offset, const cmr_msg_t *msg)
{
    return apply_msg(opaque, topic, partition, offset, msg);
}

static int restore_skipped(void *opaque, const char *topic, int32_t partition, int64_t offset)
{
    note_applied(opaque, !strcmp(topic, cmr_topic_name(CMR_TOPIC_METRICS)), partition, offset);
    return 0;
}

/* Makes what the restore applied durable (nothing to mark done: the group has it). */
static int restore_flush(void *opaque)
{
    worker_t *w = opaque;
    return cmr_ingest_engine_flush(w->engine) == 0 && cmr_metrics_flush(w->metrics) == 0 ? 0 : -1;
}

/* The ranges of one topic the queued partitions lack, given the committed offsets. */
static size_t restore_ranges(const worker_t *w, bool metrics, const cmr_partition_t *committed, cmr_reader_range_t *out)
{
    size_t n = 0;
    for (size_t i = 0; i < w->nrestore; i++)
        if (w->restore[i].metrics == metrics &&
            cmr_restore_range(w->restore[i].partition, w->restore[i].applied, committed[i].offset, &out[n]))
            n++;
    return n;
}

/* Asks the group's committed offsets of the queued partitions, reads back what their
 * stores lack, then resumes them. Runs on the loop's thread, between polls. */
static void restore_assigned(worker_t *w)
{
    if (cmr_mono_ms() < w->restore_retry_ms)
        return;
    size_t n = w->nrestore;
    cmr_partition_t *parts = calloc(n, sizeof *parts);
    cmr_reader_range_t *ranges = calloc(n, sizeof *ranges);
    if (!parts || !ranges) {
        w->fatal = 1;
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        parts[i] =
            (cmr_partition_t){.topic = cmr_topic_name(w->restore[i].metrics ? CMR_TOPIC_METRICS : CMR_TOPIC_EVENTS),
                              .partition = w->restore[i].partition,
                              .offset = CMR_OFFSET_INVALID};
    if (cmr_consumer_committed(w->consumer, parts, n, 10000) != 0) {
        cmr_log(CMR_LOG_WARN, "ingest.committed_unknown", "partitions=%zu action=\"asking again in 1 s\"", n);
        w->restore_retry_ms = cmr_mono_ms() + 1000;
        goto out;
    }
    cmr_restore_cb_t cb = {.apply = restore_apply,
                           .skipped = restore_skipped,
                           .flush = restore_flush,
                           .opaque = w,
                           .flush_every = w->commit_records,
                           .idle_timeout_ms = 60000,
                           .stop = w->stop};
    cmr_restore_stats_t st = {0};
    int rc = 0;
    for (int k = 0; k < 2 && rc == 0; k++) {
        size_t nr = restore_ranges(w, k == 1, parts, ranges);
        rc =
            cmr_ingest_restore(w->conf, cmr_topic_name(k ? CMR_TOPIC_METRICS : CMR_TOPIC_EVENTS), ranges, nr, &cb, &st);
    }
    cmr_ingest_engine_count_restore(w->engine, &st);
    if (rc != 0) {
        if (!*w->stop)
            w->fatal = 1; /* logged; another worker takes the partitions */
        goto out;
    }
    if (cmr_consumer_resume(w->consumer, parts, n) != 0) {
        cmr_log(CMR_LOG_ERROR, "ingest.resume_failed", "partitions=%zu", n);
        w->fatal = 1;
    }
    for (size_t i = 0; i < n; i++) {
        cmr_reader_range_t read;
        if (w->peers) /* restored: queries may count on it */
            cmr_ingest_peers_set_owned(w->peers, w->restore[i].metrics ? CMR_TOPIC_METRICS : CMR_TOPIC_EVENTS,
                                       w->restore[i].partition, true);
        if (w->restore[i].metrics &&
            cmr_restore_range(w->restore[i].partition, w->restore[i].applied, parts[i].offset, &read)) {
            /* records another owner handled: the rules' state, from the data they brought
             * (a store that was current judges its own unjudged boundaries as usual) */
            cmr_metrics_restored(w->metrics, w->restore[i].partition);
        }
    }
    w->announce_now = true;
    w->nrestore = 0;
out:
    free(parts);
    free(ranges);
}

/* --- announcements and the directory of workers (ing_peers.c) ------------------------- */

/* Sends this worker's announcement (leaving: it owns nothing any more). */
static void announce(worker_t *w, bool leaving)
{
    cmr_ingest_worker_t a;
    char err[256];
    if (!w->peers || !w->producer || cmr_ingest_peers_announcement(w->peers, leaving, &a) != 0)
        return;
    if (cmr_producer_send(w->producer, CMR_MSG_INGEST_WORKER, &a, NULL, NULL, err, sizeof err) != CMR_SEND_OK)
        cmr_log(CMR_LOG_WARN, "ingest.announce_failed", "error=\"%s\"", err);
    cmr_msg_body_free(CMR_MSG_INGEST_WORKER, &a);
    w->announced_ms = cmr_mono_ms();
    w->announce_now = false;
}

/* Reads the others' announcements; announces when due. */
static void poll_peers(worker_t *w)
{
    if (!w->peers)
        return;
    const char *topic = cmr_topic_name(CMR_TOPIC_INGEST_WORKERS);
    cmr_reader_rec_t r;
    char err[256];
    for (int n = 0; w->directory && n < 1000 && cmr_reader_poll(w->directory, 0, &r) == 1; n++)
        if (cmr_ingest_peers_add(w->peers, r.payload, r.len, err, sizeof err) != 0)
            cmr_reject(topic, "malformed_announcement", r.partition, r.offset, err);
    if (w->announce_now || cmr_mono_ms() - w->announced_ms >= w->announce_interval_ms)
        announce(w, false);
}

/* The number of partitions of topic, as the cluster's metadata says; when it does not
 * say, the layout's default (logged: the fan-out would not know of partitions beyond it). */
static int partition_count(worker_t *w, cmr_topic_t topic)
{
    int n = w->producer ? cmr_producer_partitions(w->producer, cmr_topic_name(topic), 5000) : -1;
    if (n > 0)
        return n;
    n = cmr_topic_layout(topic)->partitions;
    cmr_log(CMR_LOG_WARN, "ingest.partition_count_unknown", "topic=%s assumed=%d", cmr_topic_name(topic), n);
    return n;
}

/* The default base URL of this worker's HTTP API: its address, or the host name when it
 * listens on every address. */
static void default_url(const cmr_conf_t *conf, int port, char *url, size_t len)
{
    const char *addr = cmr_conf_get(conf, "ingest.http.address", "127.0.0.1");
    char host[256] = "localhost";
    if (!strcmp(addr, "::") || !strcmp(addr, "0.0.0.0") || !addr[0])
        gethostname(host, sizeof host - 1);
    else
        snprintf(host, sizeof host, "%s", addr);
    snprintf(url, len, strchr(host, ':') ? "http://[%s]:%d" : "http://%s:%d", host, port);
}

/* The directory and the fan-out, for a worker that serves the HTTP API. 0 or -1. */
static int start_peers(worker_t *w, cmr_ingest_http_t *http)
{
    char err[512], id[256], url[600], token[300] = "";
    int port = cmr_ingest_http_port(http);
    int64_t timeout_ms;
    if (cmr_conf_get_int(w->conf, "ingest.announce.interval_ms", 5000, 100, 3600000, &w->announce_interval_ms, err,
                         sizeof err) ||
        cmr_conf_get_int(w->conf, "ingest.fanout.timeout_ms", 3000, 10, 600000, &timeout_ms, err, sizeof err)) {
        cmr_log(CMR_LOG_ERROR, "ingest.config_invalid", "error=\"%s\"", err);
        return -1;
    }
    char host[200] = "worker";
    gethostname(host, sizeof host - 1);
    snprintf(id, sizeof id, "%s-%d", host, port);
    default_url(w->conf, port, url, sizeof url);
    const char *file = cmr_conf_get(w->conf, "ingest.http.token_file", "");
    if (file[0] && cmr_http_token_load(file, token, sizeof token, err, sizeof err) != 0)
        token[0] = '\0'; /* the server refused to start without it already */
    cmr_ingest_peers_opts_t o = {.conf = w->conf,
                                 .worker_id = cmr_conf_get(w->conf, "ingest.worker_id", id),
                                 .url = cmr_conf_get(w->conf, "ingest.http.advertise_url", url),
                                 .token = token,
                                 .timeout_ms = (int)timeout_ms,
                                 .stale_ms = 3 * w->announce_interval_ms,
                                 .partition_count = partition_count(w, CMR_TOPIC_EVENTS),
                                 .metrics_partition_count = partition_count(w, CMR_TOPIC_METRICS)};
    w->peers = cmr_ingest_peers_new(&o, err, sizeof err);
    explicit_bzero(token, sizeof token);
    if (!w->peers) {
        cmr_log(CMR_LOG_ERROR, "ingest.config_invalid", "error=\"%s\"", err);
        return -1;
    }
    const char *topic = cmr_topic_name(CMR_TOPIC_INGEST_WORKERS);
    if (cmr_admin_ensure_topic(w->conf, topic, 1, -1, 1, 15000, err, sizeof err) != 0)
        cmr_log(CMR_LOG_WARN, "ingest.topic_missing", "topic=%s error=\"%s\"", topic, err);
    if (!(w->directory = cmr_reader_open(w->readers, topic, 0, err, sizeof err)))
        cmr_log(CMR_LOG_ERROR, "ingest.reader_failed",
                "topic=%s error=\"%s\" action=\"queries answer for this "
                "worker's partitions only, naming the others unreachable\"",
                topic, err);
    cmr_ingest_http_set_peers(http, w->peers);
    cmr_log(CMR_LOG_INFO, "ingest.peers_started", "worker_id=%s url=%s partitions=%d metrics_partitions=%d",
            o.worker_id, o.url, o.partition_count, o.metrics_partition_count);
    return 0;
}

/* The topics every worker reads whole, in the order of worker_t.tables. */
static const cmr_topic_t table_topics[4] = {CMR_TOPIC_METHODS, CMR_TOPIC_REGISTRATIONS, CMR_TOPIC_AGENT_EVENTS,
                                            CMR_TOPIC_CONFIG};

/* Drains what the readers of whole topics have. */
static void poll_tables(worker_t *w)
{
    cmr_reader_rec_t r;
    for (int k = 0; k < 4; k++) {
        const char *topic = cmr_topic_name(table_topics[k]);
        for (int n = 0; w->tables[k] && n < 1000 && cmr_reader_poll(w->tables[k], 0, &r) == 1; n++) {
            if (table_topics[k] != CMR_TOPIC_CONFIG)
                cmr_ingest_engine_add_table_record(w->engine, topic, &r);
            else if (cmr_metrics_add_config(w->metrics, r.payload, r.len) != 0)
                cmr_reject(topic, "malformed", r.partition, r.offset, "not a ConfigChange");
        }
    }
}

static int open_tables(worker_t *w)
{
    char err[512];
    for (int i = 0; i < 4; i++) {
        const cmr_topic_layout_t *l = cmr_topic_layout(table_topics[i]);
        const char *name = cmr_topic_name(table_topics[i]);
        if (cmr_admin_ensure_topic(w->conf, name, l->partitions, -1, l->compacted, 15000, err, sizeof err) != 0)
            cmr_log(CMR_LOG_WARN, "ingest.topic_missing", "topic=%s error=\"%s\"", name, err);
        w->tables[i] = cmr_reader_open(w->readers, name, 0, err, sizeof err);
        if (!w->tables[i]) {
            cmr_log(CMR_LOG_ERROR, "ingest.reader_failed", "topic=%s error=\"%s\"", name, err);
            return -1;
        }
    }
    return 0;
}

int cmr_ingest_store_opts(const cmr_conf_t *conf, cmr_store_opts_t *o, char *err, size_t errlen)
{
    bool sync;
    int64_t age, bytes, wb_mb, keep_ms, keep_max;
    if (cmr_conf_get_bool(conf, "ingest.sync", true, &sync, err, errlen) ||
        cmr_conf_get_int(conf, "ingest.retention.age_ms", 7LL * 24 * 3600 * 1000, 0, INT64_MAX, &age, err, errlen) ||
        cmr_conf_get_int(conf, "ingest.retention.bytes", 0, 0, INT64_MAX, &bytes, err, errlen) ||
        cmr_conf_get_int(conf, "ingest.store.write_buffer_mb", 16, 1, 1024, &wb_mb, err, errlen) ||
        cmr_conf_get_int(conf, "ingest.trace.keep_ms", CMR_INGEST_TRACE_KEEP_MS, 0, 600000, &keep_ms, err, errlen) ||
        cmr_conf_get_int(conf, "ingest.trace.keep_max", CMR_INGEST_TRACE_KEEP_MAX, 0, 1000000, &keep_max, err, errlen))
        return -1;
    *o = (cmr_store_opts_t){.sync = sync,
                            .retention_age_ms = age,
                            .retention_bytes = bytes,
                            .write_buffer_bytes = wb_mb << 20,
                            .trace_keep_ms = keep_ms ? keep_ms : -1, /* 0: none kept */
                            .trace_keep_max = keep_max ? keep_max : -1};
    return 0;
}

static void log_stats(worker_t *w)
{
    cmr_ingest_stats_t s;
    cmr_ingest_engine_stats(w->engine, &s);
    cmr_log(CMR_LOG_INFO, "ingest.stats",
            "messages=%" PRIu64 " batches=%" PRIu64 " events=%" PRIu64 " event_bytes=%" PRIu64 " duplicates=%" PRIu64
            " rejected=%" PRIu64 " attributes_rejected=%" PRIu64 " flushes=%" PRIu64 " methods=%" PRIu64
            " agents=%" PRIu64 " restored=%" PRIu64 " restore_missing=%" PRIu64 " traces_reloaded=%" PRIu64
            " first_record_ms=%" PRId64 " last_commit_ms=%" PRId64,
            s.messages, s.batches, s.events, s.event_bytes, s.duplicates, s.rejected, s.attributes_rejected, s.flushes,
            s.methods, s.agents, s.restored, s.restore_missing, s.traces_reloaded, w->first_record_ms,
            w->last_commit_ms);
    cmr_rejects_log_summary();
    cmr_metrics_stats_t m;
    cmr_metrics_stats(w->metrics, &m);
    cmr_log(CMR_LOG_INFO, "metrics.stats",
            "batches=%" PRIu64 " duplicates=%" PRIu64 " rejected=%" PRIu64 " points=%" PRIu64 " series=%" PRIu64
            " series_overflow=%" PRIu64 " abnormal=%" PRIu64 " normal=%" PRIu64 " store_bytes=%" PRIu64,
            m.batches, m.duplicates, m.rejected, m.points, m.series, m.series_overflow, m.alerts_abnormal,
            m.alerts_normal, m.disk_bytes);
}

/* Threshold events from the metrics module: onto cmr.alerts (never blocks). */
static void send_alert(void *opaque, const cmr_threshold_event_t *ev)
{
    worker_t *w = opaque;
    char err[256];
    if (!w->producer ||
        cmr_producer_send(w->producer, CMR_MSG_THRESHOLD_EVENT, ev, NULL, NULL, err, sizeof err) != CMR_SEND_OK)
        cmr_log(CMR_LOG_WARN, "metrics.alert_not_sent", "environment=%s rule=%s error=\"%s\"", ev->environment_id,
                ev->rule, w->producer ? err : "no producer");
}

int cmr_ingest_worker_run(const cmr_conf_t *conf, volatile sig_atomic_t *stop)
{
    char err[1024];
    worker_t w = {.conf = conf, .stop = stop};
    cmr_store_opts_t o;
    int64_t port, retention_ms, exit_idle_ms, metrics_port, keep_mb;
    if (cmr_ingest_store_opts(conf, &o, err, sizeof err) ||
        cmr_conf_get_int(conf, "ingest.malloc.keep_mb", 256, 0, 1 << 20, &keep_mb, err, sizeof err) ||
        cmr_conf_get_int(conf, "ingest.commit.records", 2000, 1, 1000000, &w.commit_records, err, sizeof err) ||
        cmr_conf_get_int(conf, "ingest.commit.interval_ms", 50, 0, 60000, &w.commit_interval_ms, err, sizeof err) ||
        cmr_conf_get_int(conf, "ingest.http.port", 8470, -1, 65535, &port, err, sizeof err) ||
        cmr_conf_get_int(conf, "metrics.port", -1, -1, 65535, &metrics_port, err,
                         sizeof err) || /* checked here: a bad value exits with 2 */
        cmr_conf_get_int(conf, "ingest.retention.check_ms", 10000, 100, 86400000, &retention_ms, err, sizeof err) ||
        cmr_conf_get_int(conf, "ingest.exit_idle_ms", 0, 0, 86400000, &exit_idle_ms, err, sizeof err)) {
        fprintf(stderr, "cmr-ingest: %s\n", err);
        return 2;
    }
    cmr_program_keep_freed_memory(keep_mb << 20); /* before the engine's and librdkafka's threads */
    const char *root = cmr_conf_get(conf, "ingest.store", "cmr-ingest-data");
    cmr_metrics_opts_t mo;
    if (cmr_metrics_opts_from_conf(conf, &o, &mo, err, sizeof err) != 0) {
        fprintf(stderr, "cmr-ingest: %s\n", err);
        return 2;
    }
    w.engine = cmr_ingest_engine_new(root, &o, err, sizeof err);
    if (!w.engine) {
        cmr_log(CMR_LOG_ERROR, "ingest.store_failed", "store=%s error=\"%s\"", root, err);
        return 1;
    }
    w.metrics = cmr_metrics_new(root, &mo, cmr_ingest_engine_names(w.engine), err, sizeof err);
    if (!w.metrics) {
        cmr_log(CMR_LOG_ERROR, "metrics.store_failed", "store=%s error=\"%s\"", root, err);
        cmr_ingest_engine_free(w.engine);
        return 1;
    }
    w.producer = cmr_producer_new(conf, "cmr-ingest", NULL, NULL, err, sizeof err);
    if (!w.producer)
        cmr_log(CMR_LOG_ERROR, "metrics.producer_failed", "error=\"%s\" action=\"threshold events are not sent\"", err);
    else
        cmr_metrics_on_alert(w.metrics, send_alert, &w);
    int rc = 1;
    cmr_ingest_http_t *http = NULL;
    cmr_metrics_http_t *metrics = NULL;
    pthread_mutex_init(&w.published_lock, NULL);
    cmr_lag_gauge_init(&w.lag, cmr_conf_get(conf, "ingest.group", "cmr-ingest"));
    publish_stats(&w);
    if (!(w.readers = cmr_reader_client_new(conf, err, sizeof err))) {
        cmr_log(CMR_LOG_ERROR, "ingest.reader_failed", "error=\"%s\"", err);
        goto out;
    }
    if (cmr_metrics_http_start(conf, metrics_fill, &w, &metrics, err, sizeof err) != 0) {
        cmr_log(CMR_LOG_ERROR, "ingest.metrics_failed", "error=\"%s\"", err);
        goto out;
    }
    if (port >= 0) {
        http = cmr_ingest_http_start_conf(conf, root, (int)port, err, sizeof err);
        if (!http) /* ingest matters more than queries: run without the API */
            cmr_log(CMR_LOG_ERROR, "ingest.http_failed", "error=\"%s\" action=\"running without the HTTP API\"", err);
    }
    if (http && start_peers(&w, http) != 0) {
        rc = 2;
        goto out;
    }
    if (open_tables(&w) != 0)
        goto out;
    const char *topics[2] = {cmr_topic_name(CMR_TOPIC_EVENTS), cmr_topic_name(CMR_TOPIC_METRICS)};
    const cmr_topic_t ids[3] = {CMR_TOPIC_EVENTS, CMR_TOPIC_METRICS, CMR_TOPIC_ALERTS};
    for (int i = 0; i < 3; i++) {
        const cmr_topic_layout_t *l = cmr_topic_layout(ids[i]);
        const char *name = cmr_topic_name(ids[i]);
        if (cmr_admin_ensure_topic(conf, name, l->partitions, -1, 0, 15000, err, sizeof err) != 0)
            cmr_log(CMR_LOG_WARN, "ingest.topic_missing", "topic=%s error=\"%s\"", name, err);
    }
    w.consumer = cmr_consumer_new(conf, cmr_conf_get(conf, "ingest.group", "cmr-ingest"), topics, 2, on_rebalance, &w,
                                  err, sizeof err);
    if (!w.consumer) {
        cmr_log(CMR_LOG_ERROR, "ingest.consumer_failed", "error=\"%s\"", err);
        goto out;
    }
    cmr_log(CMR_LOG_INFO, "ingest.started", "store=%s http_port=%d group=%s", root,
            http ? cmr_ingest_http_port(http) : -1, cmr_conf_get(conf, "ingest.group", "cmr-ingest"));
    int64_t last_stats = cmr_mono_ms(), last_retention = cmr_mono_ms(), last_record = cmr_mono_ms();
    int64_t last_metrics_retention = 0;
    bool retention_behind = false; /* the last retention left old traces: the next comes sooner */
    bool consumer_failed = false;
    while (!*stop && !w.fatal) {
        poll_tables(&w);
        poll_peers(&w);
        if (w.nrestore)
            restore_assigned(&w);
        cmr_record_t *rec;
        int got = cmr_consumer_poll(w.consumer, w.npending || cmr_ingest_engine_pending(w.engine) ? 0 : 100, &rec);
        if (got < 0) {
            consumer_failed = true; /* logged by the transport; still store what we have */
            break;
        }
        int64_t now = cmr_mono_ms();
        if (got == 1) {
            handle(&w, rec);
            last_record = now;
        } else if (exit_idle_ms && w.first_record_ms && now - last_record >= exit_idle_ms) {
            cmr_log(CMR_LOG_INFO, "ingest.idle_exit", "idle_ms=%" PRId64, now - last_record);
            break; /* ingest.exit_idle_ms: catch up, then exit */
        }
        bool idle = got == 0;
        if ((w.npending &&
             ((int64_t)w.npending >= w.commit_records || idle || now - w.first_pending_ms >= w.commit_interval_ms)) ||
            (!w.npending && cmr_ingest_engine_pending(w.engine)))
            if (commit_group(&w) != 0)
                break;
        if (now - last_retention >=
            (retention_behind && RETENTION_CATCH_UP_MS < retention_ms ? RETENTION_CATCH_UP_MS : retention_ms)) {
            if (cmr_ingest_engine_retention(w.engine, &retention_behind) < 0) {
                w.fatal = 1; /* its group commit failed: as commit_group's */
                break;
            }
            last_retention = cmr_mono_ms(); /* after its work: at most a third of the time behind */
        }
        if (idle && !w.npending && cmr_metrics_evaluate(w.metrics) > 0 && cmr_metrics_flush(w.metrics) != 0)
            break; /* boundaries left over from a catch-up, judged while the topics are quiet */
        if (now - last_metrics_retention >= 3600000) {
            cmr_metrics_retention(w.metrics, cmr_wall_ms());
            last_metrics_retention = now;
        }
        cmr_metrics_publish(w.metrics, 1000);
        if (now - last_stats >= 10000) {
            log_stats(&w);
            last_stats = now;
        }
        publish_stats(&w);
        cmr_lag_gauge_refresh(&w.lag, w.consumer);
    }
    if (!w.fatal && commit_group(&w) == 0 && !consumer_failed)
        rc = 0;
    log_stats(&w);
out:
    announce(&w, true); /* queries stop counting on this worker before it lets go */
    if (w.consumer)
        cmr_consumer_close(w.consumer); /* commits what was marked done */
    for (size_t i = 0; i < w.npending; i++)
        cmr_record_free(w.pending[i]);
    free(w.pending);
    free(w.restore);
    for (int i = 0; i < 4; i++)
        cmr_reader_free(w.tables[i]);
    cmr_ingest_http_stop(http);
    cmr_ingest_peers_free(w.peers); /* after the server: its threads read it */
    cmr_reader_free(w.directory);
    cmr_reader_client_free(w.readers); /* after its readers */
    cmr_metrics_http_stop(metrics);    /* before the engine and w go: its thread reads w */
    pthread_mutex_destroy(&w.published_lock);
    cmr_lag_gauge_free(&w.lag);
    if (w.producer)
        cmr_producer_destroy(w.producer, 5000); /* threshold events still queued */
    cmr_metrics_free(w.metrics);                /* before the engine: it reads the engine's names */
    cmr_ingest_engine_free(w.engine);
    return rc;
}

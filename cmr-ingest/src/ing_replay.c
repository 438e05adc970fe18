/*
 * ing_replay.c - `cmr-ingest replay`: rebuilds a fresh store from the topics.
 *
 * Refuses a store root that already holds partitions (a replay never mixes with old
 * state). Reads cmr.methods, cmr.registrations, cmr.agent-events and cmr.config fully,
 * then cmr.events and cmr.metrics from the beginning (or from the first message at or
 * after --since) on every partition by assign(), through the same engine and metrics
 * module as the worker, until every partition reached the end it had when the replay
 * started. Threshold rules are judged as the worker judged them (their state is rebuilt)
 * but no event is sent again. Progress goes to `progress` once a second.
 *
 * Because stored state is a function of the set of batches, the replayed store answers
 * queries with the same bytes as the store the workers built from the same messages.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/clock.h"
#include "cmr/ingest.h"
#include "cmr/log.h"
#include "cmr/metrics.h"
#include "cmr/topics.h"
#include "cmr/wire.h"

/* The state a replay builds: the trace engine and the metrics module. */
typedef struct replay {
    cmr_ingest_engine_t *e;
    cmr_metrics_t *m;
    int64_t records;
} replay_t;

static int read_table(const cmr_conf_t *conf, replay_t *rp, cmr_topic_t topic, FILE *progress)
{
    char err[512];
    cmr_reader_t *r = cmr_reader_new(conf, cmr_topic_name(topic), 0, err, sizeof err);
    if (!r) {
        fprintf(stderr, "cmr-ingest: replay: %s\n", err);
        return -1;
    }
    long n = 0;
    int64_t deadline = cmr_mono_ms() + 60000;
    while (!cmr_reader_caught_up(r) && cmr_mono_ms() < deadline) {
        cmr_reader_rec_t rec;
        if (cmr_reader_poll(r, 200, &rec) != 1)
            continue;
        if (topic == CMR_TOPIC_CONFIG)
            n += cmr_metrics_add_config(rp->m, rec.payload, rec.len) == 0;
        else
            n += cmr_ingest_engine_add_table_record(rp->e, cmr_topic_name(topic), &rec);
    }
    fprintf(progress, "replay: %s: %ld entries\n", cmr_topic_name(topic), n);
    cmr_reader_free(r);
    return cmr_ingest_engine_flush(rp->e);
}

/* Applies one record of cmr.events or cmr.metrics. 0, or -1 when it cannot be stored. */
static int apply(replay_t *rp, const cmr_reader_rec_t *rec)
{
    cmr_msg_t m;
    char why[256];
    int rc = 0;
    if (cmr_msg_decode(rec->payload, rec->len, &m, why, sizeof why) != CMR_WIRE_OK)
        return 0; /* as the worker: not stored */
    if (m.type == CMR_MSG_EVENT_BATCH)
        rc = cmr_ingest_engine_open_partition(rp->e, rec->partition, 0) != 0 ||
                     cmr_ingest_engine_add(rp->e, rec->partition, &m.u.event_batch, why, sizeof why) == -2
                 ? -1
                 : 0;
    else if (m.type == CMR_MSG_METRIC_BATCH)
        rc = cmr_metrics_open_partition(rp->m, rec->partition, 0) != 0 ||
                     cmr_metrics_add(rp->m, rec->partition, &m.u.metric_batch, why, sizeof why) == -2
                 ? -1
                 : 0;
    cmr_msg_free(&m);
    if (rc != 0)
        fprintf(stderr, "cmr-ingest: replay: partition %d: cannot store\n", rec->partition);
    return rc;
}

/* Writes, then judges the rules on what is written (their state is rebuilt; no event is
 * sent again), as the worker does. */
static int flush(replay_t *rp)
{
    if (cmr_ingest_engine_flush(rp->e) != 0 || cmr_metrics_flush(rp->m) != 0)
        return -1;
    while (cmr_metrics_evaluate(rp->m) > 0)
        if (cmr_metrics_flush(rp->m) != 0)
            return -1;
    return 0;
}

/* Reads a partitioned topic from since_ms to the end it had when the replay started. */
static int replay_topic(const cmr_conf_t *conf, replay_t *rp, cmr_topic_t topic, int64_t since_ms, FILE *progress)
{
    char err[512];
    cmr_reader_t *r = cmr_reader_new(conf, cmr_topic_name(topic), since_ms, err, sizeof err);
    if (!r) {
        fprintf(stderr, "cmr-ingest: replay: %s\n", err);
        return 1;
    }
    int64_t total = cmr_reader_total(r), done = 0, start = cmr_mono_ms(), last = start;
    int rc = 0;
    fprintf(progress, "replay: %s: %" PRId64 " records to read\n", cmr_topic_name(topic), total);
    while (!cmr_reader_caught_up(r) && rc == 0) {
        cmr_reader_rec_t rec;
        int got = cmr_reader_poll(r, 200, &rec);
        if (got < 0)
            rc = 1;
        if (got == 1) {
            done++;
            if (apply(rp, &rec) != 0 ||
                (cmr_ingest_engine_pending(rp->e) + cmr_metrics_pending(rp->m) >= 2000 && flush(rp) != 0))
                rc = 1;
        }
        int64_t now = cmr_mono_ms();
        if (now - last >= 1000) {
            int64_t seen = done + cmr_reader_skipped(r);
            fprintf(progress, "replay: %s: %" PRId64 "/%" PRId64 " records (%.0f%%), %.0f records/s\n",
                    cmr_topic_name(topic), seen, total, total ? 100.0 * (double)seen / (double)total : 100.0,
                    (double)done * 1000.0 / (double)(now - start));
            fflush(progress);
            last = now;
        }
    }
    int64_t skipped = cmr_reader_skipped(r);
    cmr_reader_free(r);
    if (flush(rp) != 0)
        rc = 1;
    if (skipped)
        fprintf(progress, "replay: %s: %" PRId64 " records older than --since skipped\n", cmr_topic_name(topic),
                skipped);
    rp->records += done;
    return rc;
}

int cmr_ingest_replay(const cmr_conf_t *conf, const char *since, FILE *progress)
{
    char err[1024];
    const char *root = cmr_conf_get(conf, "ingest.store", "cmr-ingest-data");
    int *parts;
    size_t nparts = cmr_store_list_partitions(root, &parts);
    free(parts);
    if (nparts) {
        fprintf(stderr,
                "cmr-ingest: replay: %s already holds a store; replay builds a fresh one (give an empty or "
                "new directory with --store)\n",
                root);
        return 2;
    }
    int64_t since_ms = 0;
    if (since) {
        int64_t ns;
        if (cmr_ingest_parse_time(since, &ns) != 0) {
            fprintf(stderr, "cmr-ingest: replay: bad --since \"%s\"\n", since);
            return 2;
        }
        since_ms = ns / 1000000;
    }
    cmr_store_opts_t o;
    cmr_metrics_opts_t mo;
    if (cmr_ingest_store_opts(conf, &o, err, sizeof err) != 0 ||
        cmr_metrics_opts_from_conf(conf, &o, &mo, err, sizeof err) != 0) {
        fprintf(stderr, "cmr-ingest: %s\n", err);
        return 2;
    }
    o.sync = false; /* no fsync per group: an interrupted replay is run again into a new store */
    mo.store.no_sync = true;
    replay_t rp = {0};
    rp.e = cmr_ingest_engine_new(root, &o, err, sizeof err);
    if (rp.e)
        rp.m = cmr_metrics_new(root, &mo, cmr_ingest_engine_names(rp.e), err, sizeof err);
    if (!rp.e || !rp.m) {
        fprintf(stderr, "cmr-ingest: replay: %s\n", err);
        cmr_ingest_engine_free(rp.e);
        return 1;
    }
    int64_t start = cmr_mono_ms();
    int rc = 0;
    const cmr_topic_t tables[] = {CMR_TOPIC_METHODS, CMR_TOPIC_REGISTRATIONS, CMR_TOPIC_AGENT_EVENTS, CMR_TOPIC_CONFIG};
    for (size_t i = 0; i < sizeof tables / sizeof tables[0] && rc == 0; i++)
        rc = read_table(conf, &rp, tables[i], progress) != 0;
    if (rc == 0)
        rc = replay_topic(conf, &rp, CMR_TOPIC_EVENTS, since_ms, progress);
    if (rc == 0)
        rc = replay_topic(conf, &rp, CMR_TOPIC_METRICS, since_ms, progress);
    cmr_ingest_stats_t s;
    cmr_ingest_engine_stats(rp.e, &s);
    cmr_metrics_stats_t ms;
    cmr_metrics_stats(rp.m, &ms);
    fprintf(progress,
            "replay: done: %" PRId64 " records, %" PRIu64 " batches, %" PRIu64 " events, %" PRIu64
            " duplicates, %" PRIu64 " rejected, %" PRIu64 " metric batches, %" PRIu64 " points, %.1f s\n",
            rp.records, s.batches, s.events, s.duplicates, s.rejected, ms.batches, ms.points,
            (double)(cmr_mono_ms() - start) / 1000.0);
    cmr_metrics_free(rp.m);
    cmr_ingest_engine_free(rp.e);
    return rc;
}

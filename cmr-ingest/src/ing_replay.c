/*
 * ing_replay.c - `cmr-ingest replay`: rebuilds a fresh store from the topics.
 *
 * Refuses a store root that already holds partitions (a replay never mixes with old
 * state). Reads cmr.methods and cmr.registrations fully, then cmr.events from the
 * beginning (or from the first message at or after --since) on every partition by
 * assign(), through the same engine as the worker, until every partition reached the end
 * it had when the replay started. Progress goes to `progress` once a second.
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
#include "cmr/topics.h"
#include "cmr/wire.h"

static int read_table(const cmr_conf_t *conf, cmr_ingest_engine_t *e, cmr_topic_t topic, FILE *progress)
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
        if (cmr_reader_poll(r, 200, &rec) == 1)
            n += cmr_ingest_engine_add_table_record(e, cmr_topic_name(topic), &rec);
    }
    fprintf(progress, "replay: %s: %ld entries\n", cmr_topic_name(topic), n);
    cmr_reader_free(r);
    return cmr_ingest_engine_flush(e);
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
    if (cmr_ingest_store_opts(conf, &o, err, sizeof err) != 0) {
        fprintf(stderr, "cmr-ingest: %s\n", err);
        return 2;
    }
    o.sync = false; /* no fsync per group: an interrupted replay is run again into a new store */
    cmr_ingest_engine_t *e = cmr_ingest_engine_new(root, &o, err, sizeof err);
    if (!e) {
        fprintf(stderr, "cmr-ingest: replay: %s\n", err);
        return 1;
    }
    if (read_table(conf, e, CMR_TOPIC_METHODS, progress) || read_table(conf, e, CMR_TOPIC_REGISTRATIONS, progress)) {
        cmr_ingest_engine_free(e);
        return 1;
    }
    cmr_reader_t *r = cmr_reader_new(conf, cmr_topic_name(CMR_TOPIC_EVENTS), since_ms, err, sizeof err);
    if (!r) {
        fprintf(stderr, "cmr-ingest: replay: %s\n", err);
        cmr_ingest_engine_free(e);
        return 1;
    }
    int64_t total = cmr_reader_total(r), done = 0, start = cmr_mono_ms(), last = start;
    int rc = 0;
    fprintf(progress, "replay: %s: %" PRId64 " records to read%s%s\n", cmr_topic_name(CMR_TOPIC_EVENTS), total,
            since ? " since " : "", since ? since : "");
    while (!cmr_reader_caught_up(r)) {
        cmr_reader_rec_t rec;
        int got = cmr_reader_poll(r, 200, &rec);
        if (got < 0) {
            rc = 1;
            break;
        }
        if (got == 1) {
            done++;
            cmr_msg_t m;
            char why[256];
            if (cmr_msg_decode(rec.payload, rec.len, &m, why, sizeof why) == CMR_WIRE_OK) {
                if (m.type == CMR_MSG_EVENT_BATCH) {
                    if (cmr_ingest_engine_open_partition(e, rec.partition, 0) != 0 ||
                        cmr_ingest_engine_add(e, rec.partition, &m.u.event_batch, why, sizeof why) == -2) {
                        fprintf(stderr, "cmr-ingest: replay: partition %d: cannot store\n", rec.partition);
                        rc = 1;
                    }
                }
                cmr_msg_free(&m);
            }
            if (rc)
                break;
            if (cmr_ingest_engine_pending(e) >= 2000 && cmr_ingest_engine_flush(e) != 0) {
                rc = 1;
                break;
            }
        }
        int64_t now = cmr_mono_ms();
        if (now - last >= 1000) {
            cmr_ingest_stats_t s;
            cmr_ingest_engine_stats(e, &s);
            int64_t seen = done + cmr_reader_skipped(r);
            fprintf(progress, "replay: %" PRId64 "/%" PRId64 " records (%.0f%%), %" PRIu64 " events, %.0f events/s\n",
                    seen, total, total ? 100.0 * (double)seen / (double)total : 100.0, s.events,
                    (double)s.events * 1000.0 / (double)(now - start));
            fflush(progress);
            last = now;
        }
    }
    int64_t skipped = cmr_reader_skipped(r);
    cmr_reader_free(r);
    if (cmr_ingest_engine_flush(e) != 0)
        rc = 1;
    if (skipped)
        fprintf(progress, "replay: %" PRId64 " records older than --since skipped\n", skipped);
    cmr_ingest_stats_t s;
    cmr_ingest_engine_stats(e, &s);
    fprintf(progress,
            "replay: done: %" PRId64 " records, %" PRIu64 " batches, %" PRIu64 " events, %" PRIu64
            " duplicates, %" PRIu64 " rejected, %.1f s\n",
            done, s.batches, s.events, s.duplicates, s.rejected, (double)(cmr_mono_ms() - start) / 1000.0);
    cmr_ingest_engine_free(e);
    return rc;
}

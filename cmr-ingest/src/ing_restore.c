/*
 * ing_restore.c - brings a partition store that a worker is newly assigned up to the
 * group's committed offset, by reading the missing records back from the topic.
 *
 * Every partition store (trace stores and the metrics module's) records the offset of the
 * last record it applied, in the same atomic write as the record's effects. When a worker
 * is assigned a partition, its local store may be behind the group: a new worker has an
 * empty store, a worker that owned the partition long ago has an old one. What is missing
 * is exactly the offsets [applied + 1, committed): the worker (ing_worker.c) reads them
 * here with a range reader (cmr/reader.h) and applies them through the normal engine
 * path (records the store already holds are duplicates there, counted, changing
 * nothing), then consumes from the committed offset as usual. A store that is ahead of
 * the committed offset (the last owner crashed between its write and its commit) needs
 * nothing: the records after the committed offset come again and are duplicates.
 *
 * Loss is never silent: an offset of a range that the topic no longer hands out (deleted
 * by retention, or an offset that holds a transaction marker) is counted as missing and
 * logged per partition (event=ingest.restore_gap), and the caller publishes the count.
 *
 * Ownership: cmr_ingest_restore() owns its reader and the messages it decodes for the
 * duration of the call; the callbacks get borrowed pointers.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/clock.h"
#include "cmr/ingest.h"
#include "cmr/log.h"
#include "cmr/rejects.h"
#include "cmr/wire.h"

bool cmr_restore_range(int32_t partition, int64_t applied, int64_t committed, cmr_reader_range_t *out)
{
    int64_t from = applied < 0 ? 0 : applied + 1;
    if (committed < 0 || from >= committed)
        return false;
    *out = (cmr_reader_range_t){.partition = partition, .from = from, .until = committed};
    return true;
}

void cmr_restore_gaps_init(cmr_restore_gaps_t *g, const cmr_reader_range_t *r)
{
    *g = (cmr_restore_gaps_t){.range = *r, .next = r->from};
}

void cmr_restore_gaps_see(cmr_restore_gaps_t *g, int64_t offset)
{
    if (offset < g->next || offset >= g->range.until)
        return; /* already seen, or past the range: not ours to count */
    g->missing += offset - g->next;
    g->next = offset + 1;
    g->seen++;
}

int64_t cmr_restore_gaps_end(cmr_restore_gaps_t *g)
{
    if (g->next < g->range.until) {
        g->missing += g->range.until - g->next;
        g->next = g->range.until;
    }
    return g->missing;
}

/* The tracker of a partition among the ranges, or NULL. */
static cmr_restore_gaps_t *gaps_of(cmr_restore_gaps_t *g, size_t n, int32_t partition)
{
    for (size_t i = 0; i < n; i++)
        if (g[i].range.partition == partition)
            return &g[i];
    return NULL;
}

/* Decodes one record read back and hands it to the caller. 0, or -1 when the caller
 * cannot store it. A record that does not decode is rejected as the transport rejects it. */
static int apply_one(const char *topic, const cmr_reader_rec_t *r, const cmr_restore_cb_t *cb)
{
    cmr_msg_t msg;
    char why[256];
    if (cmr_msg_decode(r->payload, r->len, &msg, why, sizeof why) != CMR_WIRE_OK) {
        cmr_reject(topic, "malformed", r->partition, r->offset, why);
        return cb->skipped ? cb->skipped(cb->opaque, topic, r->partition, r->offset) : 0;
    }
    int rc = cb->apply(cb->opaque, topic, r->partition, r->offset, &msg);
    cmr_msg_free(&msg);
    return rc;
}

/* Logs the end of every range: what was read back, and what the topic no longer had. */
static void report(const char *topic, cmr_restore_gaps_t *g, size_t n, int64_t ms, cmr_restore_stats_t *st)
{
    for (size_t i = 0; i < n; i++) {
        int64_t missing = cmr_restore_gaps_end(&g[i]);
        st->missing += (uint64_t)missing;
        if (missing > 0)
            cmr_log(CMR_LOG_ERROR, "ingest.restore_gap",
                    "topic=%s partition=%d from=%" PRId64 " until=%" PRId64 " missing=%" PRId64
                    " reason=\"offsets no longer in the topic (retention) or not records (transaction markers)\"",
                    topic, g[i].range.partition, g[i].range.from, g[i].range.until, missing);
        cmr_log(CMR_LOG_INFO, "ingest.partition_restored",
                "topic=%s partition=%d from=%" PRId64 " until=%" PRId64 " records=%" PRIu64 " missing=%" PRId64
                " ms=%" PRId64,
                topic, g[i].range.partition, g[i].range.from, g[i].range.until, g[i].seen, missing, ms);
    }
}

/* Reads until every range is done. 0, or -1 (reader failure, a record that cannot be
 * stored, no progress for idle_timeout_ms, or stop). */
static int read_ranges(cmr_reader_t *rd, const char *topic, cmr_restore_gaps_t *g, size_t n, const cmr_restore_cb_t *cb,
                       cmr_restore_stats_t *st)
{
    int64_t last_progress = cmr_mono_ms(), since_flush = 0;
    while (!cmr_reader_caught_up(rd)) {
        if (cb->stop && *cb->stop)
            return -1;
        cmr_reader_rec_t r;
        int got = cmr_reader_poll(rd, 100, &r);
        if (got < 0)
            return -1;
        if (got == 0) {
            if (cmr_mono_ms() - last_progress >= cb->idle_timeout_ms) {
                cmr_log(CMR_LOG_ERROR, "ingest.restore_stalled", "topic=%s idle_ms=%" PRId64, topic,
                        cmr_mono_ms() - last_progress);
                return -1;
            }
            continue;
        }
        last_progress = cmr_mono_ms();
        cmr_restore_gaps_t *pg = gaps_of(g, n, r.partition);
        if (!pg || r.offset < pg->next)
            continue; /* not a range's, or read twice */
        if (apply_one(topic, &r, cb) != 0)
            return -1;
        cmr_restore_gaps_see(pg, r.offset);
        st->records++;
        if (++since_flush >= cb->flush_every && cb->flush) {
            if (cb->flush(cb->opaque) != 0)
                return -1;
            since_flush = 0;
        }
    }
    return cb->flush ? cb->flush(cb->opaque) : 0;
}

int cmr_ingest_restore(const cmr_conf_t *conf, const char *topic, const cmr_reader_range_t *ranges, size_t n,
                       const cmr_restore_cb_t *cb, cmr_restore_stats_t *st)
{
    if (n == 0)
        return 0;
    char err[512];
    cmr_restore_gaps_t *g = calloc(n, sizeof *g);
    if (!g)
        return -1;
    for (size_t i = 0; i < n; i++) {
        cmr_restore_gaps_init(&g[i], &ranges[i]);
        cmr_log(CMR_LOG_INFO, "ingest.restore_started", "topic=%s partition=%d from=%" PRId64 " until=%" PRId64, topic,
                ranges[i].partition, ranges[i].from, ranges[i].until);
    }
    int64_t t0 = cmr_mono_ms();
    cmr_reader_t *rd = cmr_reader_new_ranges(conf, topic, ranges, n, err, sizeof err);
    if (!rd) {
        cmr_log(CMR_LOG_ERROR, "ingest.restore_failed", "topic=%s error=\"%s\"", topic, err);
        free(g);
        return -1;
    }
    int rc = read_ranges(rd, topic, g, n, cb, st);
    cmr_reader_free(rd);
    if (rc == 0)
        report(topic, g, n, cmr_mono_ms() - t0, st);
    else
        cmr_log(CMR_LOG_ERROR, "ingest.restore_failed", "topic=%s error=\"%s\"", topic,
                cb->stop && *cb->stop ? "stopping" : "records could not be read back or stored");
    free(g);
    return rc;
}

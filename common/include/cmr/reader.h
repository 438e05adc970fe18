/*
 * reader.h - reads a whole topic, every partition, outside any consumer group: how a
 * worker rebuilds a projection (cmr.config, cmr.registrations, cmr.methods) and how
 * cmr-ingest replays cmr.events. Or reads given offset ranges of some partitions (how
 * the instrumenter catches up on partitions another worker answered).
 *
 * It starts at the beginning of every partition, or (since_ms > 0) hands out only
 * messages with a timestamp at or after since_ms, seeking there where the cluster answers
 * offsets-for-times. It knows when it has caught up (every partition reported its end
 * once), keeps following the topic afterwards, and commits nothing: a reader always
 * starts over.
 *
 * A range reader hands out the records of each range in order and stops reading a
 * partition once its range is done (its last record handed out, or the partition's end
 * reached before it); it has caught up when every range is done or dropped. A range that
 * starts before the oldest record the topic still holds (retention) is read from that
 * record: the caller sees the offsets that are missing.
 *
 * Readers opened on one client (cmr_reader_client_new, cmr_reader_open) share its
 * librdkafka handle, each with its own partitions and queue: what a worker's loop uses
 * for the topics it follows all its life (one handle's idle CPU instead of one per
 * topic). A client and its readers are used from one thread. A client's readers fetch
 * nothing before the first poll of any of them; then all those open start together (their
 * partitions assigned at once), so that the readers a worker opens one after the other ask
 * for their metadata and offsets while nothing waits on the connection, and begin in the
 * same fetch.
 *
 * Ownership: a reader owns the last record it handed out (valid until the next poll or
 * cmr_reader_free()) and, made by cmr_reader_new or cmr_reader_new_ranges, a client of
 * its own. A shared client is freed by its creator, after every reader opened on it.
 */
#ifndef CMR_READER_H
#define CMR_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cmr/conf.h"

typedef struct cmr_reader cmr_reader_t;

typedef struct cmr_reader_rec {
    const void *payload; /* valid until the next poll */
    size_t len;
    const char *key; /* NUL-terminated (at most 255 bytes kept), "" when none */
    int32_t partition;
    int64_t offset;
    int64_t timestamp_ms;
} cmr_reader_rec_t;

typedef struct cmr_reader_client cmr_reader_client_t;

/* Assigns every partition of topic, on a client of its own. NULL with err filled. */
cmr_reader_t *cmr_reader_new(const cmr_conf_t *conf, const char *topic, int64_t since_ms, char *err, size_t errlen);

/* A librdkafka handle for several readers. NULL with err filled. */
cmr_reader_client_t *cmr_reader_client_new(const cmr_conf_t *conf, char *err, size_t errlen);
/* After cmr_reader_free() of every reader opened on it. NULL is a no-op. */
void cmr_reader_client_free(cmr_reader_client_t *c);
/* cmr_reader_new() on a shared client (at most 16 readers at once). NULL with err
 * filled. Open a client's readers before polling any of them: once one fetches, the next
 * one's offset lookups wait behind its long polls (up to fetch.wait.max.ms per request). */
cmr_reader_t *cmr_reader_open(cmr_reader_client_t *client, const char *topic, int64_t since_ms, char *err,
                              size_t errlen);

/* Offsets [from, until) of one partition. */
typedef struct cmr_reader_range {
    int32_t partition;
    int64_t from, until;
} cmr_reader_range_t;

/* Reads these ranges of topic (at most one per partition; an empty range is done at
 * once). NULL with err filled. */
cmr_reader_t *cmr_reader_new_ranges(const cmr_conf_t *conf, const char *topic, const cmr_reader_range_t *ranges,
                                    size_t count, char *err, size_t errlen);
/* Range reader: reads nothing more of partition (counted as done). */
void cmr_reader_drop(cmr_reader_t *r, int32_t partition);
/* The partition has reached its end (or its range's), was dropped, or is not read. */
bool cmr_reader_partition_done(const cmr_reader_t *r, int32_t partition);
void cmr_reader_free(cmr_reader_t *r);
/* 1 with *out set, 0 when nothing arrived within timeout_ms, -1 on a fatal error. */
int cmr_reader_poll(cmr_reader_t *r, int timeout_ms, cmr_reader_rec_t *out);
/* Every partition has reached the end it had at some point after the reader started
 * (range reader: every range is done). */
bool cmr_reader_caught_up(const cmr_reader_t *r);
/* Partitions read. */
int cmr_reader_partitions(const cmr_reader_t *r);
/* Messages between the start positions and the ends seen at start (for progress; range
 * reader: the sum of the ranges). */
int64_t cmr_reader_total(const cmr_reader_t *r);
/* Messages skipped because they are older than since_ms (read, not handed out). */
int64_t cmr_reader_skipped(const cmr_reader_t *r);

#endif

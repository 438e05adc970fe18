/*
 * metrics_store.h - the time-series store of the ingest worker: per-interval metric
 * aggregates of methods and transactions, in RocksDB, rolled up to 10 s, 1 min and 1 h,
 * with retention per resolution.
 *
 * Wire-agnostic: callers hand it points (labels, a time, a value); the Kafka consumer,
 * the threshold rules, the CLI and the Prometheus exporter sit on top. A worker holds one
 * store per Kafka partition it owns; every query takes an ARRAY of stores and merges
 * them (they may be opened read-only by another process).
 *
 * Data model
 *   - A series is named by its labels {kind, environment, subject, agent}. agent 0 is the
 *     aggregate over every JVM of the environment. Its id is XXH3-64 of the encoded
 *     labels (cmr_met_series_id); a 64-bit collision between two label sets is not
 *     detected (probability ~ n^2 / 2^65: negligible at 10^5 series).
 *   - A point value (cmr_met_value_t) is what one interval of one series measured: call
 *     and error counts, latency sum/min/max, in-flight and stalled calls, the trace of the
 *     slowest call, and a latency histogram (cmr_hist_t, ns). Two values merge exactly
 *     (cmr_met_value_merge), which is how roll-ups and cross-store queries work.
 *   - Resolutions: CMR_MET_RES_10S, _1M, _1H. Every point is merged into the bucket of its
 *     time at all three (bucket = floor(t / res) * res).
 *
 * Writing (single writer per store): cmr_met_store_add / mark_applied / state_put /
 * state_del append to one pending RocksDB WriteBatch; cmr_met_store_flush writes it
 * atomically (fsync unless opts.no_sync). Idempotence: the worker applies an agent's
 * interval and records it (mark_applied) in the same batch; cmr_met_store_seen tells
 * whether a redelivered interval was already applied (pending marks included).
 *
 * Retention: cmr_met_store_retention(store, now_ms) (the worker calls it periodically,
 * e.g. once an hour) drops the points older than their resolution's retention and the
 * applied marks older than the 10 s retention. See met_store.c for how.
 *
 * Labels: the environment string comes from the wire: any bytes but NUL, at most
 * CMR_MET_ENV_MAX bytes; cmr_met_labels_set checks it.
 *
 * Ownership: cmr_met_store_t is owned by whoever opened it (cmr_met_store_close). A
 * cmr_met_value_t owns its histogram: zeroed (or cmr_met_value_init) is empty and valid,
 * its owner calls cmr_met_value_free. Values passed to callbacks belong to the store
 * and are valid during the call only (copy them with cmr_met_value_copy). Top-N results
 * belong to the caller (cmr_met_top_free). Not thread-safe: one thread per store (reads
 * from several threads each need their own store handles).
 */
#ifndef CMR_METRICS_STORE_H
#define CMR_METRICS_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cmr/buf.h"
#include "cmr/histogram.h"

#define CMR_MET_ENV_MAX 128
#define CMR_MET_DEFAULT_MAX_SERIES 100000

typedef enum cmr_met_kind { CMR_MET_METHOD = 1, CMR_MET_TRANSACTION = 2 } cmr_met_kind_t;

typedef enum cmr_met_res { CMR_MET_RES_10S = 0, CMR_MET_RES_1M = 1, CMR_MET_RES_1H = 2 } cmr_met_res_t;
#define CMR_MET_NRES 3

/* The width of a resolution's buckets in ms (10,000, 60,000, 3,600,000). */
int64_t cmr_met_res_ms(cmr_met_res_t res);

typedef struct cmr_met_labels {
    uint8_t kind;                  /* a cmr_met_kind_t */
    uint8_t env_len;               /* bytes of env, <= CMR_MET_ENV_MAX */
    char env[CMR_MET_ENV_MAX + 1]; /* NUL-terminated; no NUL inside */
    uint64_t subject;              /* method id (or transaction id) */
    int64_t agent_id;              /* 0: the aggregate over every JVM */
} cmr_met_labels_t;

/* Fills labels, checking the untrusted environment (len <= CMR_MET_ENV_MAX, no NUL byte)
 * and the kind. 0, or -1 (labels zeroed) when one is invalid. */
int cmr_met_labels_set(cmr_met_labels_t *l, cmr_met_kind_t kind, const void *env, size_t env_len, uint64_t subject,
                       int64_t agent_id);
uint64_t cmr_met_series_id(const cmr_met_labels_t *l);

/* --- values ------------------------------------------------------------------------ */

typedef struct cmr_met_value {
    uint64_t count, errors;
    uint64_t sum_ns, min_ns, max_ns; /* min/max meaningful when count > 0 */
    int64_t max_in_flight;
    uint64_t stalled;
    bool has_slowest;
    uint8_t slowest_trace[16]; /* the trace of the call that took max_ns */
    cmr_hist_t hist;           /* latencies in ns; owned */
} cmr_met_value_t;

void cmr_met_value_init(cmr_met_value_t *v);
void cmr_met_value_reset(cmr_met_value_t *v); /* empties, keeps the histogram's memory */
void cmr_met_value_free(cmr_met_value_t *v);
/* dst += src: counts add, min/max, max_in_flight = max, stalled add, the slowest trace of
 * the larger max, histograms merge. 0, or -1 when memory ran out. */
int cmr_met_value_merge(cmr_met_value_t *dst, const cmr_met_value_t *src);
/* dst = src (dst's old content released). 0 or -1. */
int cmr_met_value_copy(cmr_met_value_t *dst, const cmr_met_value_t *src);
/* The stored form: version, flags, varints, the trace when present, cmr_hist_encode. */
void cmr_met_value_encode(const cmr_met_value_t *v, cmr_buf_t *out);
/* 0, or -1 (v empty) when the bytes are not a valid encoding. */
int cmr_met_value_decode(cmr_met_value_t *v, const uint8_t *p, size_t len);

typedef enum cmr_met_stat {
    CMR_MET_P50,
    CMR_MET_P90,
    CMR_MET_P95,
    CMR_MET_P99,
    CMR_MET_P999,
    CMR_MET_MAX,
    CMR_MET_MEAN,
    CMR_MET_COUNT,
    CMR_MET_ERRORS,
    CMR_MET_ERROR_RATE, /* errors / count, 0 when count is 0 */
} cmr_met_stat_t;

/* A statistic of a value: ns for latencies (percentiles from the histogram, within
 * 0.78 %; MAX and MEAN exact), a number for counts, a fraction for the error rate. */
double cmr_met_stat(const cmr_met_value_t *v, cmr_met_stat_t stat);
/* "p50", "max", "error_rate", ...; -1 for an unknown name. */
int cmr_met_stat_parse(const char *name);
/* The name cmr_met_stat_parse reads ("?" for a value out of range). */
const char *cmr_met_stat_name(cmr_met_stat_t stat);

/* --- the store ----------------------------------------------------------------------- */

typedef struct cmr_met_store cmr_met_store_t;

typedef struct cmr_met_opts {
    bool read_only;
    bool no_sync;                       /* flushes do not fsync (tests, benchmarks) */
    size_t max_series;                  /* 0: CMR_MET_DEFAULT_MAX_SERIES */
    int64_t retention_ms[CMR_MET_NRES]; /* 0: 2 days, 14 days, 400 days */
    size_t write_buffer_bytes;          /* memtable of the points CF; 0: 16 MiB */
    size_t cache_bytes;                 /* block cache of the points CF; 0: 32 MiB */
} cmr_met_opts_t;

/* Opens (creating it unless read-only) the store in directory path. NULL with a message in
 * err when that fails. */
cmr_met_store_t *cmr_met_store_open(const char *path, const cmr_met_opts_t *o, char *err, size_t errlen);
/* Closes; a pending batch that was not flushed is dropped. NULL is fine. */
void cmr_met_store_close(cmr_met_store_t *s);

/* Appends the merge of value into the series' buckets at every resolution to the pending
 * batch (a new series is recorded too). t_ms: wall-clock ms, >= 0. 0; 1 when the series is new and the store already
 * holds max_series (nothing appended, counted as series_overflow); -1 on invalid labels,
 * a read-only store or out of memory. */
int cmr_met_store_add(cmr_met_store_t *s, const cmr_met_labels_t *l, int64_t t_ms, const cmr_met_value_t *value);
/* Records, in the pending batch, that agent's interval starting at interval_start_ms was
 * applied. 0 or -1. */
int cmr_met_store_mark_applied(cmr_met_store_t *s, int64_t agent_id, int64_t interval_start_ms);
/* 1 when that interval was applied (flushed or pending), 0 when not, -1 on a read error. */
int cmr_met_store_seen(cmr_met_store_t *s, int64_t agent_id, int64_t interval_start_ms);
/* Writes the pending batch atomically. 0, or -1 with a message in err (the batch is then
 * dropped, and the series it would have created forgotten). */
int cmr_met_store_flush(cmr_met_store_t *s, char *err, size_t errlen);
/* Points written by cmr_met_store_add since the last flush (0 after a flush). */
size_t cmr_met_store_pending(const cmr_met_store_t *s);

/* Drops points older than now_ms minus their resolution's retention, and applied marks
 * older than the 10 s retention: it sets the cut-off the compaction filter uses and
 * compacts the points and applied column families. Returns 0, or -1 (read-only). Slow
 * on a big store (it rewrites it): call it hourly, from the writer thread. */
int cmr_met_store_retention(cmr_met_store_t *s, int64_t now_ms);

/* Small key-value state (threshold rules), written in the same pending batch. get
 * returns a malloc'd copy (caller frees) in *val (NULL when absent; pending writes
 * count): 1 found, 0 absent, -1 error. */
int cmr_met_state_put(cmr_met_store_t *s, const void *key, size_t klen, const void *val, size_t vlen);
int cmr_met_state_del(cmr_met_store_t *s, const void *key, size_t klen);
int cmr_met_state_get(cmr_met_store_t *s, const void *key, size_t klen, void **val, size_t *vlen);
/* Visits the flushed state entries whose key starts with prefix, in key order (pending
 * writes are not seen: flush first). The callback returns 0 to go on, non-0 to stop. */
typedef int cmr_met_state_cb(const void *key, size_t klen, const void *val, size_t vlen, void *opaque);
int cmr_met_state_scan(cmr_met_store_t *s, const void *prefix, size_t plen, cmr_met_state_cb *cb, void *opaque);

typedef struct cmr_met_stats {
    uint64_t points_written;   /* cmr_met_store_add calls that were stored (flushed or not) */
    uint64_t merges;           /* operands the merge operator merged */
    uint64_t series;           /* series known to the store */
    uint64_t series_overflow;  /* points dropped by the max_series bound */
    uint64_t corrupt_operands; /* stored values that did not decode (skipped) */
    uint64_t disk_bytes;       /* SST files + memtables, all column families */
} cmr_met_stats_t;

void cmr_met_store_stats(cmr_met_store_t *s, cmr_met_stats_t *out);

/* Test hooks: the rocksdb_t * and a column family handle ("series", "points", "applied",
 * "state"; NULL for another name), to plant bad data or inspect raw keys. Owned by the
 * store. */
void *cmr_met_store_raw_db(cmr_met_store_t *s);
void *cmr_met_store_raw_cf(cmr_met_store_t *s, const char *name);

/* --- queries (met_query.c): arrays of stores, merged ------------------------------------ */

/* A bucket of a series, the values of every store merged. Return 0 to go on. */
typedef int cmr_met_bucket_cb(int64_t bucket_ms, const cmr_met_value_t *v, void *opaque);

/* The buckets of resolution res whose start lies in [floor(from_ms / res) * res, to_ms),
 * in time order. 0, or -1 on a read error. Buckets without data are not visited. */
int cmr_met_series_read(cmr_met_store_t *const *stores, size_t n, const cmr_met_labels_t *l, cmr_met_res_t res,
                        int64_t from_ms, int64_t to_ms, cmr_met_bucket_cb *cb, void *opaque);

/* One value over [from_ms, to_ms), widened to 10 s bucket boundaries: the range is
 * covered with the coarsest buckets that fit inside it (1 h in the middle, 1 min and
 * 10 s at the edges), so a 24 h window reads ~24 + 2 * (59 + 5) buckets. out is reset
 * first. 0, or -1 on a read error or out of memory. Edges finer than a resolution's
 * retention read nothing (data older than 2 days has no 10 s buckets). */
int cmr_met_window(cmr_met_store_t *const *stores, size_t n, const cmr_met_labels_t *l, int64_t from_ms, int64_t to_ms,
                   cmr_met_value_t *out);

/* Since when metrics have been reported into the stores, when that is after from_ms: the
 * start (ms) of the earliest interval applied, of any JVM (agent_id 0) or of one.
 * INT64_MIN when the window [from_ms, now_ms] has reports from its start, or when it
 * cannot be told: nothing applied, more than 100,000 JVMs, or from_ms earlier than an hour
 * after the marks' retention horizon (that of the 10 s buckets as the writing worker
 * configured it, counted back from now_ms), before which marks may be gone. What a rate
 * over a window divides by (met_cli.c). */
int64_t cmr_met_reporting_since(cmr_met_store_t *const *stores, size_t n, int64_t agent_id, int64_t from_ms,
                                int64_t now_ms);

typedef struct cmr_met_filter {
    uint8_t kind;     /* 0: any */
    const char *env;  /* NULL: any; else exactly this environment (NUL-terminated) */
    uint64_t subject; /* 0: any */
    int64_t agent;    /* -1: any, 0: only the aggregates, > 0: that agent */
} cmr_met_filter_t;

/* Visits every series matching filter once (a series found in several stores is visited
 * once), in no particular order. The callback returns 0 to go on. */
typedef int cmr_met_series_cb(const cmr_met_labels_t *l, uint64_t series_id, void *opaque);
int cmr_met_list_series(cmr_met_store_t *const *stores, size_t n, const cmr_met_filter_t *f, cmr_met_series_cb *cb,
                        void *opaque);

typedef struct cmr_met_top_item {
    cmr_met_labels_t labels;
    uint64_t series_id;
    double stat;
    cmr_met_value_t value; /* the merged window value; owned by the result */
} cmr_met_top_item_t;

typedef struct cmr_met_top {
    cmr_met_top_item_t *items; /* owned; best first */
    size_t n;
} cmr_met_top_t;

/* The `limit` series matching filter with the highest statistic over the window
 * (as cmr_met_window); series without calls in the window are left out. Ties: smaller
 * series id first. 0, or -1 (out empty). Release with cmr_met_top_free. */
int cmr_met_top(cmr_met_store_t *const *stores, size_t n, const cmr_met_filter_t *f, int64_t from_ms, int64_t to_ms,
                cmr_met_stat_t stat, size_t limit, cmr_met_top_t *out);
void cmr_met_top_free(cmr_met_top_t *t);

#endif

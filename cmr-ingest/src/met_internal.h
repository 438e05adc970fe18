/*
 * met_internal.h - what met_store.c shares with met_query.c (and nothing else): the
 * store's handles, its key layout and the value decoder that can skip the histogram.
 *
 * Not installed, not for other components: they use cmr/metrics_store.h.
 */
#ifndef CMR_MET_INTERNAL_H
#define CMR_MET_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <rocksdb/c.h>

#include "cmr/map.h"
#include "cmr/metrics_store.h"

/* Column families, in the order they are opened. */
enum { MET_CF_DEFAULT, MET_CF_SERIES, MET_CF_POINTS, MET_CF_APPLIED, MET_CF_STATE, MET_NCFS };

#define MET_POINT_KEY_LEN 17   /* res | series id | bucket start ms */
#define MET_APPLIED_KEY_LEN 16 /* agent id | interval start ms */
#define MET_SERIES_KEY_LEN 8   /* series id */

struct cmr_met_store {
    rocksdb_t *db;
    rocksdb_options_t *opts;
    rocksdb_options_t *cf_opts[MET_NCFS];
    rocksdb_column_family_handle_t *cfs[MET_NCFS];
    rocksdb_compactionfilter_t *points_filter, *applied_filter; /* owned: outlive db */
    rocksdb_cache_t *cache;                                     /* block cache of points; owned */
    rocksdb_block_based_table_options_t *table;                 /* owned */
    rocksdb_writeoptions_t *wo;
    rocksdb_readoptions_t *ro;
    rocksdb_writebatch_t *batch;   /* the pending writes */
    cmr_met_opts_t o;              /* with defaults filled in */
    _Atomic int64_t cutoff_now_ms; /* now of the last retention call; 0: never (drop nothing) */
    _Atomic uint64_t merges, corrupt;
    uint64_t points_written, overflow;
    cmr_u64map_t series;       /* every known series id (flushed and pending) -> NULL */
    cmr_buf_t new_series;      /* uint64 ids the pending batch creates */
    cmr_map_t pending_applied; /* applied keys of the pending batch -> NULL */
    cmr_map_t pending_state;   /* state key -> met_state_val_t* (owned) */
    size_t pending_points;
    cmr_buf_t scratch;
    char path[4096];
};

/* 17-byte key of a point. */
void met_point_key(uint8_t key[MET_POINT_KEY_LEN], cmr_met_res_t res, uint64_t sid, int64_t bucket_ms);
/* The labels stored in the series CF: kind | subject (8) | agent (8) | env bytes. */
void met_labels_encode(const cmr_met_labels_t *l, cmr_buf_t *out);
int met_labels_decode(cmr_met_labels_t *l, const uint8_t *p, size_t len);
/* Decodes a stored value; with_hist false leaves the histogram empty and does not look at
 * its bytes (top-N by counts). 0 or -1. */
int met_value_decode(cmr_met_value_t *v, const uint8_t *p, size_t len, bool with_hist);
/* A merge of many encoded values without a sorted-array merge per value: the scalars in
 * v (v.hist stays empty) and the histogram as a dense array of bucket counts. What the
 * merge operator, windows and top-N use. A zeroed met_acc_t is empty and valid; its owner
 * calls met_acc_free. */
typedef struct met_acc {
    cmr_met_value_t v;
    uint64_t *bins;  /* CMR_HIST_BUCKETS counts, allocated on first use; owned */
    uint16_t lo, hi; /* buckets that may be non-zero, when hcount > 0 */
    uint64_t hcount, hmin, hmax;
    double hsum;
} met_acc_t;

/* Adds an encoded value; with_hist false ignores its histogram. 0, or -1 when it does not
 * decode (acc unchanged) or memory ran out. */
int met_acc_add(met_acc_t *a, const uint8_t *p, size_t len, bool with_hist);
void met_acc_reset(met_acc_t *a);
void met_acc_free(met_acc_t *a);
/* The merged value in out (replaced). 0, or -1 when memory ran out. */
int met_acc_value(const met_acc_t *a, cmr_met_value_t *out);
/* cmr_met_stat of the merged value, without building it. */
double met_acc_stat(const met_acc_t *a, cmr_met_stat_t stat);

/* How long the store's idempotence marks are kept (its 10 s buckets' retention): as the
 * worker that writes it configured it (kept in the state CF at each writable open), else
 * as this open's options say. */
int64_t met_applied_retention_ms(cmr_met_store_t *s);

/* Counts a stored value that did not decode. */
void met_count_corrupt(cmr_met_store_t *s);

#endif

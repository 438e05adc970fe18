/*
 * metrics.h - the metrics module of cmr-ingest: what agents measure per interval
 * (cmr.metrics), turned into time series, judged by the environments' threshold rules,
 * and served as queries and Prometheus families.
 *
 * Files (src/):
 *   met_store.c, met_query.c  the time-series store and its queries (cmr/metrics_store.h)
 *   met_ingest.c              MetricBatch -> points; partitions, watermarks, flush
 *   met_rules.c               threshold rules -> ThresholdEvent (abnormal / back to normal)
 *   met_prom.c                the application's histograms and counters for GET /metrics
 *   met_cli.c                 `cmr-ingest metrics ...` and the JSON of the HTTP API
 *
 * Where data lives: cmr.metrics is keyed by environment, so every JVM of an environment
 * lands in one partition and one store (<ingest.store>/metrics/pNNN): the aggregate over
 * the environment's JVMs and the threshold rules are computed in one place. Series:
 *   method       (environment, method id)                 every MethodMetric
 *   transaction  (environment, entry point)               every TransactionMetric
 *   transaction  (environment, entry point, agent)        the same per JVM ("which JVMs are slow")
 * Stalled calls count on their innermost method and on their transaction (the stack's root).
 *
 * Time: points are placed at their interval's start; rules are evaluated at 10 s
 * boundaries of the data's own clock (the newest interval end seen in the environment,
 * minus metrics.lateness_ms), never the wall clock, so a replay decides what the live run
 * decided.
 *
 * Ownership: cmr_metrics_t owns its stores, rule state and caches; the names table it is
 * given stays the caller's and must outlive it. Single-threaded (the worker's loop), except
 * cmr_metrics_prometheus(), which reads a copy the loop publishes under a mutex.
 */
#ifndef CMR_METRICS_H
#define CMR_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cmr/buf.h"
#include "cmr/conf.h"
#include "cmr/ingest.h"
#include "cmr/metrics_store.h"
#include "cmr/msg.h"

typedef struct cmr_metrics cmr_metrics_t;

typedef struct cmr_metrics_opts {
    cmr_met_opts_t store;
    int64_t lateness_ms;    /* how far behind the newest data rules are evaluated (default 15000) */
    size_t prom_max_series; /* application series on /metrics (default 500); more are counted */
    size_t max_alerts;      /* abnormal events per rule and evaluation (default 100); more are counted */
} cmr_metrics_opts_t;

typedef struct cmr_metrics_stats {
    uint64_t batches, duplicates, rejected, points, stalled_calls;
    uint64_t series, series_overflow, corrupt, disk_bytes;
    uint64_t evaluations, alerts_abnormal, alerts_normal, alerts_suppressed;
    uint64_t alerts_restored; /* changes a restored partition judged again without sending (cmr_metrics_restored) */
    uint64_t prom_overflow;
    uint64_t partitions;
} cmr_metrics_stats_t;

/* Options from metrics.* keys (metrics.retention.10s_ms, ...); 0, or -1 with err. */
int cmr_metrics_opts_from_conf(const cmr_conf_t *conf, const cmr_store_opts_t *ingest, cmr_metrics_opts_t *o, char *err,
                               size_t errlen);

/* The module over <root>/metrics. names: method display names (the caller's). */
cmr_metrics_t *cmr_metrics_new(const char *root, const cmr_metrics_opts_t *o, const cmr_names_t *names, char *err,
                               size_t errlen);
void cmr_metrics_free(cmr_metrics_t *m);

/* Opens / closes the store of a cmr.metrics partition (close flushes first). 0 or -1. */
int cmr_metrics_open_partition(cmr_metrics_t *m, int partition, int wait_ms);
int cmr_metrics_close_partition(cmr_metrics_t *m, int partition);

/* The record at `offset` of cmr.metrics partition `partition` has been handled: the next
 * flush writes the offset into the partition's store in the same atomic write as the
 * record's points (state key "o"). cmr_metrics_applied() is the offset the store holds
 * durably, -1 when none (or the partition is not open). */
void cmr_metrics_set_applied(cmr_metrics_t *m, int partition, int64_t offset);
int64_t cmr_metrics_applied(const cmr_metrics_t *m, int partition);

/* The store of `partition` was just brought up to the group's committed offset by reading
 * cmr.metrics back (ing_restore.c): the rules' state (which series are abnormal) is not in
 * the topic, so the boundaries its environments' data reached are judged again from the
 * data, without events: the owner before sent them (it judged each boundary before it
 * committed the records that made it). Later boundaries are judged as usual. */
void cmr_metrics_restored(cmr_metrics_t *m, int partition);

/* Adds one MetricBatch received on `partition`: 1 applied, 0 duplicate (this agent's
 * interval was applied before), -1 rejected as malformed (err says why; nothing changed),
 * -2 cannot be stored (partition not open, out of memory): not to be marked done. */
int cmr_metrics_add(cmr_metrics_t *m, int partition, const cmr_metric_batch_t *b, char *err, size_t errlen);
/* A record of cmr.config (environments and their rules), as read: 0, or -1 when it does
 * not decode (counted as rejected by the projection). */
int cmr_metrics_add_config(cmr_metrics_t *m, const void *payload, size_t len);

/* Threshold events go to this callback (the worker produces them on cmr.alerts; replay
 * passes NULL: the state is rebuilt, nothing is sent again). */
typedef void cmr_metrics_alert_fn(void *opaque, const cmr_threshold_event_t *ev);
void cmr_metrics_on_alert(cmr_metrics_t *m, cmr_metrics_alert_fn *fn, void *opaque);

/* Judges the rules of every environment whose data crossed a 10 s boundary since the last
 * call (events to the callback; their state in the pending batch), at most 360 boundaries
 * per environment and call (call again while it returns more than 0 to catch up). Returns
 * the number of evaluations. */
int cmr_metrics_evaluate(cmr_metrics_t *m);
/* Writes every partition's pending batch durably. 0 or -1 (nothing may be marked done). */
int cmr_metrics_flush(cmr_metrics_t *m);
size_t cmr_metrics_pending(const cmr_metrics_t *m);
/* Drops points past their retention (hourly). */
void cmr_metrics_retention(cmr_metrics_t *m, int64_t now_ms);
void cmr_metrics_stats(cmr_metrics_t *m, cmr_metrics_stats_t *out);

/* The application's families for GET /metrics: the loop renders them (at most every
 * refresh_ms) into a copy; cmr_metrics_prometheus() appends that copy, from any thread. */
void cmr_metrics_publish(cmr_metrics_t *m, int64_t refresh_ms);
void cmr_metrics_prometheus(cmr_metrics_t *m, cmr_buf_t *out);

/* --- reading (CLI, HTTP): read-only stores of a store root ------------------------------ */

typedef struct cmr_metrics_view cmr_metrics_view_t;

/* Every metrics partition under root, read-only, and the names of the ingest view. */
cmr_metrics_view_t *cmr_metrics_view_open(const char *root, char *err, size_t errlen);
/* The same, only the partitions p with only[p] (4096 of them; NULL: every one): a worker
 * of a group answers for the partitions it owns, not for stale copies of others. */
cmr_metrics_view_t *cmr_metrics_view_open_only(const char *root, const bool *only, char *err, size_t errlen);
void cmr_metrics_view_free(cmr_metrics_view_t *v);

/* A query: `what` is top | series | jvms | alerts | stalled; params as key=value pairs
 * (HTTP query string or CLI --key value): env, kind, name, stat, from, to, last, res,
 * limit. JSON into *json (malloc'd) and, when text is non-NULL, a table for people.
 * 0, or -1 with err (a bad parameter: HTTP 400). */
int cmr_metrics_query(cmr_metrics_view_t *v, const char *what, const char *const *keys, const char *const *values,
                      size_t n, char **json, FILE *text, char *err, size_t errlen);

/* `cmr-ingest metrics WHAT`: the query's table (or its JSON) on stdout. Exit status. */
int cmr_metrics_cli(const char *root, const char *what, const char *const *keys, const char *const *values, size_t n,
                    bool as_json);
/* A rule's statistic of a value, in the rule's unit (ms, a fraction, calls). */
double cmr_metrics_rule_value(const cmr_threshold_rule_t *r, const cmr_met_value_t *v);

/* The root method a named transaction (an HTTP route: its subject is the name's hash) of
 * environment env was first reported with, in *root: true when the stores know one (false
 * for a transaction named by its root method, whose subject is that method). */
bool cmr_metrics_transaction_root(cmr_met_store_t *const *stores, size_t n, const char *env, uint64_t subject,
                                  uint64_t *root);
/* Its state key: 'm' | env length | env | subject. Returns the length. */
#define CMR_METRICS_ROOT_KEY_MAX (2 + CMR_MET_ENV_MAX + 8)
size_t cmr_metrics_root_key(uint8_t key[CMR_METRICS_ROOT_KEY_MAX], const char *env, uint64_t subject);

/* The display name of a series' subject: a method's name, or a named transaction. */
const char *cmr_metrics_subject_name(const cmr_names_t *names, cmr_met_store_t *const *stores, size_t n,
                                     const cmr_met_labels_t *l, char *buf, size_t len);

#endif

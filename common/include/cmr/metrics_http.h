/*
 * metrics_http.h - every worker's GET /metrics in the Prometheus text exposition format
 * (version 0.0.4), served by the common HTTP server (cmr/http_server.h over libmicrohttpd),
 * and a tiny writer for that format.
 *
 *   static void fill(cmr_buf_t *out, void *opaque) {       // on an MHD thread
 *       worker_stats_t s = copy_under_lock(opaque);
 *       cmr_prom_family(out, "cmr_ingest_batches_total", "counter", "EventBatch records applied");
 *       cmr_prom_sample_u64(out, "cmr_ingest_batches_total", NULL, 0, s.batches);
 *   }
 *   cmr_metrics_http_t *m;
 *   if (cmr_metrics_http_start(conf, fill, &w, &m, err, sizeof err) != 0) ...
 *   ...
 *   cmr_metrics_http_stop(m);                              // NULL is fine (metrics off)
 *
 * Configuration: metrics.listen (default 127.0.0.1; "::1" or any IPv6 literal, "::" for
 * dual stack, "localhost"),
 * metrics.port (default -1 = no endpoint; 0 = any free port). The bound port is logged
 * as event=metrics.listening port=N.
 *
 * The server: a pool of 2 threads (epoll), at most 64 connections, idle ones closed after
 * 10 s, keep-alive. GET (or HEAD) /metrics answers 200 with Content-Type text/plain;
 * version=0.0.4; any other path 404, any other method 405 (Allow: GET, HEAD). The body is the worker's families (its callback) followed by
 * the common ones: cmr_messages_rejected_total{topic,reason} (cmr/rejects.h),
 * cmr_process_start_time_seconds and cmr_build_info{version}.
 *
 * Threads: the callback runs on a server thread, concurrently with the worker: it must
 * read only what is synchronised (a copy under a mutex, or atomics).
 *
 * Ownership: the server owns its HTTP server; `opaque` stays the caller's and must outlive
 * cmr_metrics_http_stop().
 */
#ifndef CMR_METRICS_HTTP_H
#define CMR_METRICS_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include <pthread.h>

#include "cmr/buf.h"
#include "cmr/conf.h"
#include "cmr/kafka.h"

/* --- the exposition-format writer --------------------------------------------------- */

/* One label: name (a valid label name, from the code) and value (any bytes; escaped). */
typedef struct cmr_prom_label {
    const char *name;
    const char *value;
} cmr_prom_label_t;

/* Appends value with backslash, double quote and newline escaped (\\ \" \n). */
void cmr_prom_escape_label(cmr_buf_t *out, const char *value);
/* "# HELP name help" and "# TYPE name type": once per family, before its samples. type is
 * counter | gauge | untyped | ...; help has backslash and newline escaped. */
void cmr_prom_family(cmr_buf_t *out, const char *name, const char *type, const char *help);
/* One sample line: name{l1="v1",...} value. nlabels may be 0 (labels NULL). */
void cmr_prom_sample_u64(cmr_buf_t *out, const char *name, const cmr_prom_label_t *labels, size_t nlabels,
                         uint64_t value);
void cmr_prom_sample_double(cmr_buf_t *out, const char *name, const cmr_prom_label_t *labels, size_t nlabels,
                            double value);
/* A family of one unlabelled sample, for workers that report a table of counters. */
typedef struct cmr_prom_row {
    const char *name, *type, *help;
    uint64_t value;
} cmr_prom_row_t;
/* Each row as a family (HELP, TYPE) and its sample. */
void cmr_prom_rows(cmr_buf_t *out, const cmr_prom_row_t *rows, size_t n);
/* The common families (rejects, process start time, build info). */
void cmr_metrics_common(cmr_buf_t *out);

/* --- consumer lag -------------------------------------------------------------------- */

/* A copy of a group consumer's lag per partition for /metrics: the worker's thread
 * refreshes it (cmr_consumer_lag(), no request to the cluster), the server's threads write
 * it as the gauge cmr_consumer_lag_messages{group,topic,partition}. A zeroed gauge is
 * empty; thread safe. */
typedef struct cmr_lag_gauge {
    pthread_mutex_t lock;
    char group[128];
    cmr_partition_t *parts; /* owned: one block from cmr_consumer_lag() */
    size_t n;
    int64_t refreshed_ms;
} cmr_lag_gauge_t;

void cmr_lag_gauge_init(cmr_lag_gauge_t *g, const char *group);
/* On the worker's thread, at most once a second (cheaper calls return at once). */
void cmr_lag_gauge_refresh(cmr_lag_gauge_t *g, cmr_consumer_t *c);
/* On a server thread, from a metrics callback. */
void cmr_lag_gauge_write(cmr_lag_gauge_t *g, cmr_buf_t *out);
void cmr_lag_gauge_free(cmr_lag_gauge_t *g);

/* --- the server ----------------------------------------------------------------------- */

typedef struct cmr_metrics_http cmr_metrics_http_t;

/* Appends the worker's families to out (called on a server thread for every scrape). */
typedef void(cmr_metrics_fill_fn)(cmr_buf_t *out, void *opaque);

/* Rows of the key tables of every worker that serves /metrics. */
#define CMR_CONF_KEY_METRICS_LISTEN                                                                   \
    {                                                                                                 \
        "metrics.listen", "127.0.0.1",                                                                \
            "address of GET /metrics (Prometheus text format); IPv4 or IPv6 literal, :: or localhost" \
    }
#define CMR_CONF_KEY_METRICS_TOKEN_FILE                                                                  \
    {                                                                                                    \
        "metrics.token_file", "",                                                                        \
            "a file (owner-only) holding the access token a scrape must carry (Authorization: Bearer); " \
            "required when metrics.listen is not loopback"                                               \
    }
#define CMR_CONF_KEY_METRICS_PORT                                                                               \
    {                                                                                                           \
        "metrics.port", "-1", "port of GET /metrics; 0 = any free port (logged as metrics.listening); -1 = off" \
    }

/* Starts the server when metrics.port >= 0 (*out set), or does nothing when it is -1
 * (*out NULL). Returns 0, or -1 with errbuf filled (bad key, address or bind failure). */
int cmr_metrics_http_start(const cmr_conf_t *conf, cmr_metrics_fill_fn *fill, void *opaque, cmr_metrics_http_t **out,
                           char *errbuf, size_t errlen);
/* The bound port. */
int cmr_metrics_http_port(const cmr_metrics_http_t *m);
/* Stops the server (waits for its threads) and frees it. NULL is a no-op. */
void cmr_metrics_http_stop(cmr_metrics_http_t *m);

#endif

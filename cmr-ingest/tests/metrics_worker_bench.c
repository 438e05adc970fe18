/*
 * metrics_worker_bench.c - what one cmr-ingest worker's metrics module sustains: encoded
 * MetricBatch messages (as they come off cmr.metrics) decoded, checked, applied to the
 * store and committed in groups, with a threshold rule judged at every 10 s boundary, as
 * the worker loop does it (without the Kafka fetch).
 *
 *   metrics_worker_bench DIR [AGENTS] [METHODS] [INTERVALS]   (DIR: a new directory, kept)
 *
 * AGENTS JVMs of one environment report METHODS methods and 20 transactions every 10 s for
 * INTERVALS intervals (defaults 50, 200, 60: ten minutes of a 50-JVM environment). A
 * method's histogram holds 200 calls of a skewed latency (~25 bins). Points per batch:
 * METHODS + 2 x 20 (each transaction for the environment and for the JVM). Prints batches/s,
 * points/s and the share of time spent judging the rules.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/clock.h"
#include "cmr/histogram.h"
#include "cmr/ingest.h"
#include "cmr/metrics.h"
#include "cmr/wire.h"

#define TXS 20
#define COMMIT_EVERY 20 /* batches per group commit (~5,000 points) */

static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* A histogram of n calls around base_ns, a tenth of them 5-20 times slower. */
static void skewed(cmr_hist_t *h, uint64_t base_ns, int n)
{
    cmr_hist_reset(h);
    for (int k = 0; k < n; k++) {
        double u = (double)(rnd() % 10000) / 10000.0;
        uint64_t v = (uint64_t)((double)base_ns * (0.5 + u));
        if (rnd() % 10 == 0)
            v *= 5 + rnd() % 16;
        cmr_hist_record(h, v, 1);
    }
}

/* One encoded MetricBatch (Avro, as on the topic) into out. */
static void make_batch(int64_t agent, int64_t start_ms, int methods, cmr_buf_t *out)
{
    cmr_method_metric_t *mm = calloc((size_t)methods, sizeof *mm);
    cmr_transaction_metric_t tx[TXS];
    cmr_buf_t *enc = calloc((size_t)methods + TXS, sizeof *enc);
    cmr_hist_t h = {0};
    for (int i = 0; i < methods + TXS; i++) {
        skewed(&h, 50000 + (uint64_t)i * 1000, 200);
        cmr_hist_encode(&h, &enc[i]);
        int64_t sum = (int64_t)h.sum;
        if (i < methods)
            mm[i] = (cmr_method_metric_t){.method_id = 0x1000 + i,
                                          .count = (int64_t)h.count,
                                          .sum_ns = sum,
                                          .min_ns = (int64_t)h.min,
                                          .max_ns = (int64_t)h.max,
                                          .histogram = {enc[i].data, enc[i].len}};
        else
            tx[i - methods] = (cmr_transaction_metric_t){.root_method_id = 0x1000 + (i - methods),
                                                         .name = "",
                                                         .count = (int64_t)h.count,
                                                         .sum_ns = sum,
                                                         .min_ns = (int64_t)h.min,
                                                         .max_ns = (int64_t)h.max,
                                                         .histogram = {enc[i].data, enc[i].len}};
    }
    cmr_metric_batch_t b = {.agent_id = agent,
                            .interval_start_ms = start_ms,
                            .interval_ms = 10000,
                            .metrics = {mm, (size_t)methods},
                            .environment_id = "bench",
                            .transactions = {tx, TXS}};
    char err[256];
    if (cmr_msg_encode(CMR_MSG_METRIC_BATCH, &b, out, err, sizeof err) != CMR_WIRE_OK) {
        fprintf(stderr, "encode: %s\n", err);
        exit(1);
    }
    for (int i = 0; i < methods + TXS; i++)
        cmr_buf_free(&enc[i]);
    free(enc);
    free(mm);
    cmr_hist_free(&h);
}

static void rule_config(cmr_metrics_t *m)
{
    cmr_threshold_rule_t rule = {.name = "slow-methods",
                                 .scope = CMR_THRESHOLD_METHOD,
                                 .pattern = "*",
                                 .statistic = CMR_STAT_P99,
                                 .above = 1000.0,
                                 .for_ms = 60000,
                                 .min_count = 1};
    cmr_environment_t env = {.id = "bench", .name = "bench", .description = "", .thresholds = {&rule, 1}};
    cmr_config_change_t cc = {.kind = CMR_CONFIG_ENVIRONMENT, .revision = 1, .author = "bench", .environment = &env};
    cmr_buf_t enc = {0};
    char err[256];
    cmr_msg_encode(CMR_MSG_CONFIG_CHANGE, &cc, &enc, err, sizeof err);
    cmr_metrics_add_config(m, enc.data, enc.len);
    cmr_buf_free(&enc);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s DIR [AGENTS] [METHODS] [INTERVALS]\n", argv[0]);
        return 2;
    }
    int agents = argc > 2 ? atoi(argv[2]) : 50, methods = argc > 3 ? atoi(argv[3]) : 200;
    int intervals = argc > 4 ? atoi(argv[4]) : 60;
    char err[512];
    cmr_store_opts_t so = {.sync = true};
    cmr_ingest_engine_t *e = cmr_ingest_engine_new(argv[1], &so, err, sizeof err);
    if (!e) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    cmr_metrics_opts_t mo = {.store = {.no_sync = false}, .lateness_ms = 0, .prom_max_series = 500, .max_alerts = 100};
    cmr_metrics_t *m = cmr_metrics_new(argv[1], &mo, cmr_ingest_engine_names(e), err, sizeof err);
    if (!m || cmr_metrics_open_partition(m, 0, 0) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    rule_config(m);
    /* the messages, encoded up front: the timed loop starts where a consumer hands out bytes */
    size_t nmsg = (size_t)agents * (size_t)intervals;
    cmr_buf_t *msgs = calloc(nmsg, sizeof *msgs);
    int64_t t0 = cmr_wall_ms() / 10000 * 10000 - (int64_t)intervals * 10000;
    for (int i = 0; i < intervals; i++)
        for (int a = 0; a < agents; a++)
            make_batch(0x100 + a, t0 + (int64_t)i * 10000, methods, &msgs[(size_t)i * (size_t)agents + (size_t)a]);
    size_t bytes = 0;
    for (size_t k = 0; k < nmsg; k++)
        bytes += msgs[k].len;
    printf("%d JVMs x %d methods + %d transactions x %d intervals: %zu MetricBatch messages, %.1f KB each\n", agents,
           methods, TXS, intervals, nmsg, (double)bytes / (double)nmsg / 1024.0);

    int64_t start = cmr_mono_ns(), judging = 0;
    for (size_t k = 0; k < nmsg; k++) {
        cmr_msg_t msg;
        if (cmr_msg_decode(msgs[k].data, msgs[k].len, &msg, err, sizeof err) != CMR_WIRE_OK ||
            cmr_metrics_add(m, 0, &msg.u.metric_batch, err, sizeof err) != 1) {
            fprintf(stderr, "batch %zu: %s\n", k, err);
            return 1;
        }
        cmr_msg_free(&msg);
        if ((k + 1) % COMMIT_EVERY == 0 || k + 1 == nmsg) {
            if (cmr_metrics_flush(m) != 0)
                return 1;
            int64_t j0 = cmr_mono_ns();
            if (cmr_metrics_evaluate(m) > 0 && cmr_metrics_flush(m) != 0)
                return 1;
            judging += cmr_mono_ns() - j0;
        }
    }
    double secs = (double)(cmr_mono_ns() - start) / 1e9;
    cmr_metrics_stats_t s;
    cmr_metrics_stats(m, &s);
    printf("applied %" PRIu64 " batches, %" PRIu64 " points, %" PRIu64 " series, %" PRIu64 " rule evaluations "
           "(%" PRIu64 " abnormal) in %.2f s\n",
           s.batches, s.points, s.series, s.evaluations, s.alerts_abnormal, secs);
    printf("per worker: %.0f batches/s, %.0f points/s (decode + checks + store + fsynced group commits + rules);"
           " rules %.1f%% of the time (%.2f ms per 10 s boundary over %d method series)\n",
           (double)s.batches / secs, (double)s.points / secs, 100.0 * (double)judging / 1e9 / secs,
           s.evaluations ? (double)judging / 1e6 / (double)s.evaluations : 0.0, methods);
    printf("an environment of %d JVMs reporting every 10 s needs %.2f%% of one worker\n", agents,
           100.0 * ((double)agents / 10.0) / ((double)s.batches / secs));
    for (size_t k = 0; k < nmsg; k++)
        cmr_buf_free(&msgs[k]);
    free(msgs);
    cmr_metrics_free(m);
    cmr_ingest_engine_free(e);
    return 0;
}

/*
 * met_module.h - what met_ingest.c, met_rules.c and met_prom.c share: the metrics module's
 * state (cmr/metrics.h). Not for other components.
 */
#ifndef CMR_MET_MODULE_H
#define CMR_MET_MODULE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "cmr/buf.h"
#include "cmr/cfg_state.h"
#include "cmr/map.h"
#include "cmr/metrics.h"

#define MET_MAX_PARTITIONS 4096
#define MET_EVAL_STEP_MS 10000 /* rules are judged at these boundaries of the data's time */
#define MET_EVAL_MAX_GAP 8640  /* boundaries behind the data at most (a day): older are skipped */
#define MET_EVAL_PER_CALL 360  /* boundaries judged per environment and call (the rest: next call) */

/* An environment seen in a partition's data: its newest interval end, and the last
 * boundary its rules were judged at. */
typedef struct met_env {
    char id[CMR_MET_ENV_MAX + 1];
    int partition;
    int64_t first_ms; /* the oldest interval start seen since the partition was opened */
    int64_t watermark_ms;
    int64_t judged_ms;
    int64_t quiet_until_ms; /* boundaries up to here are judged without events (cmr_metrics_restored) */
} met_env_t;

/* A series exported on /metrics: counters since this worker started. */
typedef struct met_prom_series {
    cmr_met_labels_t labels;
    uint64_t count, errors, stalled;
    int64_t in_flight; /* max_in_flight of the newest interval */
    int64_t last_ms;   /* that interval */
    cmr_hist_t hist;   /* cumulative; owned */
} met_prom_series_t;

struct cmr_metrics {
    char root[4096]; /* <ingest.store>/metrics */
    cmr_metrics_opts_t o;
    const cmr_names_t *names;
    cmr_met_store_t *parts[MET_MAX_PARTITIONS];
    cmr_map_t envs;          /* environment id -> met_env_t (owned) */
    cmr_cfg_state_t *config; /* environments and their rules (cmr.config); owned */
    cmr_metrics_alert_fn *alert_fn;
    void *alert_opaque;
    cmr_metrics_stats_t stats;
    /* Prometheus: series by id (owned met_prom_series_t), rendered text under lock */
    cmr_u64map_t prom;
    pthread_mutex_t prom_lock;
    cmr_buf_t prom_text; /* guarded by prom_lock */
    int64_t prom_rendered_ms;
    cmr_met_value_t scratch; /* reused by met_ingest.c */
    bool failed;             /* an add failed half-way: nothing pending may be written */
    /* per partition: the last cmr.metrics offset the store holds durably (-1: none), and
     * the last one handled, written into the store's state (key "o") with the next flush */
    int64_t applied[MET_MAX_PARTITIONS], applied_pending[MET_MAX_PARTITIONS];
};

/* met_rules.c: judges one environment's rules at boundary t_ms (data time). */
int met_rules_judge(cmr_metrics_t *m, met_env_t *e, int64_t t_ms);

/* met_prom.c: counts a stored point into the exported series (bounded). */
void met_prom_add(cmr_metrics_t *m, const cmr_met_labels_t *l, int64_t t_ms, const cmr_met_value_t *v);
void met_prom_free(cmr_metrics_t *m);
/* Stops exporting an environment's series (its partition went to another worker). */
void met_prom_forget_env(cmr_metrics_t *m, const char *env);

#endif

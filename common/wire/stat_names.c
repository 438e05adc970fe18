/*
 * stat_names.c - the names people type and read for threshold statistics and scopes
 * ("p99", "error_rate", "transaction"), shared by cmr-config's YAML and cmr-ingest's
 * metrics queries so that both spell them alike. The wire carries the enums (msg.h).
 */
#include <string.h>
#include <strings.h>

#include "cmr/msg.h"

static const char *const stat_names[] = {
    [CMR_STAT_P50] = "p50",         [CMR_STAT_P90] = "p90",
    [CMR_STAT_P95] = "p95",         [CMR_STAT_P99] = "p99",
    [CMR_STAT_P999] = "p999",       [CMR_STAT_MAX] = "max",
    [CMR_STAT_MEAN] = "mean",       [CMR_STAT_ERROR_RATE] = "error_rate",
    [CMR_STAT_STALLED] = "stalled", [CMR_STAT_COUNT] = "count",
};
#define N_STATS ((int)(sizeof stat_names / sizeof stat_names[0]))

const char *cmr_stat_name(cmr_threshold_statistic_t s)
{
    return (unsigned)s < (unsigned)N_STATS ? stat_names[s] : "?";
}

int cmr_stat_parse(const char *name)
{
    if (!name)
        return -1;
    if (!strcasecmp(name, "p99.9"))
        return CMR_STAT_P999;
    for (int i = 0; i < N_STATS; i++)
        if (!strcasecmp(name, stat_names[i]))
            return i;
    return -1;
}

double cmr_stat_quantile(cmr_threshold_statistic_t s)
{
    switch (s) {
    case CMR_STAT_P50: return 0.50;
    case CMR_STAT_P90: return 0.90;
    case CMR_STAT_P95: return 0.95;
    case CMR_STAT_P99: return 0.99;
    case CMR_STAT_P999: return 0.999;
    case CMR_STAT_MAX: return 1.0;
    default: return -1.0;
    }
}

bool cmr_stat_is_latency(cmr_threshold_statistic_t s)
{
    return s <= CMR_STAT_MEAN;
}

const char *cmr_threshold_scope_name(cmr_threshold_scope_t s)
{
    return s == CMR_THRESHOLD_TRANSACTION ? "transaction" : s == CMR_THRESHOLD_METHOD ? "method" : "?";
}

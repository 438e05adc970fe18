/*
 * kafka_conf.c - cmr_conf_t -> librdkafka configuration, with logs routed into log.h.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <string.h>

#include "cmr/kafka.h"
#include "cmr/log.h"
#include "kafka_internal.h"

/* librdkafka's syslog levels -> ours. */
static cmr_log_level_t level_of(int syslog_level)
{
    if (syslog_level <= 3)
        return CMR_LOG_ERROR;
    if (syslog_level == 4)
        return CMR_LOG_WARN;
    if (syslog_level <= 6)
        return CMR_LOG_INFO;
    return CMR_LOG_DEBUG;
}

static void kafka_log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    /* Connection failures also reach the error callback, which rate-limits them. */
    if (strcmp(fac, "FAIL") == 0 && level > 2)
        level = 7;
    cmr_log(level_of(level), "kafka.log", "client=%s facility=%s msg=\"%s\"", rd_kafka_name(rk), fac, buf);
}

/* A broker that stays away makes librdkafka report the same error every few seconds:
 * one line per error code per 30 s, with how many were suppressed, is enough. */
#define ERROR_REPEAT_MS 30000
static pthread_mutex_t error_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int code;
    int64_t last_ms;
    uint64_t suppressed;
} error_seen[16];

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void kafka_error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    (void)opaque;
    /* Transport errors (broker down, all brokers down) are retried by librdkafka: they
     * are warnings unless librdkafka says they are fatal. */
    int fatal = err == RD_KAFKA_RESP_ERR__FATAL;
    uint64_t suppressed = 0;
    if (!fatal) {
        int64_t now = mono_ms();
        int log = 1;
        pthread_mutex_lock(&error_lock);
        size_t i, free_slot = 16;
        for (i = 0; i < 16 && error_seen[i].last_ms && error_seen[i].code != err; i++)
            ;
        if (i < 16 && error_seen[i].last_ms && now - error_seen[i].last_ms < ERROR_REPEAT_MS) {
            error_seen[i].suppressed++;
            log = 0;
        } else if (i < 16) {
            suppressed = error_seen[i].suppressed;
            error_seen[i].code = err;
            error_seen[i].last_ms = now;
            error_seen[i].suppressed = 0;
        }
        (void)free_slot;
        pthread_mutex_unlock(&error_lock);
        if (!log)
            return;
    }
    cmr_log(fatal ? CMR_LOG_ERROR : CMR_LOG_WARN, fatal ? "kafka.fatal" : "kafka.error",
            "client=%s code=%s reason=\"%s\" suppressed_since_last=%llu", rd_kafka_name(rk), rd_kafka_err2name(err),
            reason, (unsigned long long)suppressed);
}

typedef struct conf_ctx {
    rd_kafka_conf_t *rk_conf;
    char *errbuf;
    size_t errlen;
} conf_ctx_t;

static int apply_one(const char *key, const char *value, const char *origin, void *opaque)
{
    conf_ctx_t *ctx = opaque;
    char err[256];
    if (rd_kafka_conf_set(ctx->rk_conf, key, value, err, sizeof err) != RD_KAFKA_CONF_OK) {
        if (ctx->errbuf && ctx->errlen)
            snprintf(ctx->errbuf, ctx->errlen, "%s: kafka.%s: %s", origin, key, err);
        return -1;
    }
    return 0;
}

rd_kafka_conf_t *cmr_kafka_conf(const cmr_conf_t *conf, char *errbuf, size_t errlen)
{
    rd_kafka_conf_t *rk_conf = rd_kafka_conf_new();
    if (!rk_conf)
        return NULL;
    rd_kafka_conf_set_log_cb(rk_conf, kafka_log_cb);
    rd_kafka_conf_set_error_cb(rk_conf, kafka_error_cb);
    conf_ctx_t ctx = {rk_conf, errbuf, errlen};
    if (conf && cmr_conf_foreach(conf, "kafka.", apply_one, &ctx) != 0) {
        rd_kafka_conf_destroy(rk_conf);
        return NULL;
    }
    return rk_conf;
}

/* Sets a property only where the user did not. 0 or -1. */
int cmr_kafka_conf_default(rd_kafka_conf_t *rk_conf, const cmr_conf_t *conf, const char *key, const char *value,
                           char *errbuf, size_t errlen)
{
    char full[256];
    snprintf(full, sizeof full, "kafka.%s", key);
    if (cmr_conf_get(conf, full, NULL))
        return 0;
    char err[256];
    if (rd_kafka_conf_set(rk_conf, key, value, err, sizeof err) != RD_KAFKA_CONF_OK) {
        if (errbuf && errlen)
            snprintf(errbuf, errlen, "%s=%s: %s", key, value, err);
        return -1;
    }
    return 0;
}

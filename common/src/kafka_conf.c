/*
 * kafka_conf.c - cmr_conf_t -> librdkafka configuration, with logs routed into log.h.
 */
#include <stdio.h>
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
    cmr_log(level_of(level), "kafka.log", "client=%s facility=%s msg=\"%s\"", rd_kafka_name(rk), fac, buf);
}

static void kafka_error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    (void)opaque;
    /* Transport errors (broker down, all brokers down) are retried by librdkafka: they
     * are warnings unless librdkafka says they are fatal. */
    int fatal = err == RD_KAFKA_RESP_ERR__FATAL;
    cmr_log(fatal ? CMR_LOG_ERROR : CMR_LOG_WARN, fatal ? "kafka.fatal" : "kafka.error",
            "client=%s code=%s reason=\"%s\"", rd_kafka_name(rk), rd_kafka_err2name(err), reason);
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
int cmr_kafka_conf_default(rd_kafka_conf_t *rk_conf, const cmr_conf_t *conf, const char *key,
                           const char *value, char *errbuf, size_t errlen)
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

/*
 * kafka_conf.c - the transport's librdkafka plumbing (kafka_internal.h): cmr_conf_t ->
 * librdkafka configuration with logs routed into log.h, handle creation, partition lists
 * and topic metadata, shared by the producer, consumer, admin client and reader.
 */
#include <assert.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/clock.h"
#include "cmr/kafka.h"
#include "cmr/log.h"
#include "cmr/wire.h"
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

void cmr_kafka_log_error(rd_kafka_t *rk, int err, const char *reason)
{
    /* Transport errors (broker down, all brokers down) are retried by librdkafka: they
     * are warnings unless librdkafka says they are fatal. */
    int fatal = err == RD_KAFKA_RESP_ERR__FATAL;
    uint64_t suppressed = 0;
    if (!fatal) {
        int64_t now = cmr_mono_ms();
        int log = 1;
        size_t n = sizeof error_seen / sizeof error_seen[0], i;
        pthread_mutex_lock(&error_lock);
        /* the slot of this code, or the first unused one (all used: logged every time) */
        for (i = 0; i < n && error_seen[i].last_ms && error_seen[i].code != err; i++)
            ;
        if (i < n && error_seen[i].last_ms && now - error_seen[i].last_ms < ERROR_REPEAT_MS) {
            error_seen[i].suppressed++;
            log = 0;
        } else if (i < n) {
            suppressed = error_seen[i].suppressed;
            error_seen[i].code = err;
            error_seen[i].last_ms = now;
            error_seen[i].suppressed = 0;
        }
        pthread_mutex_unlock(&error_lock);
        if (!log)
            return;
    }
    cmr_log(fatal ? CMR_LOG_ERROR : CMR_LOG_WARN, fatal ? "kafka.fatal" : "kafka.error",
            "client=%s code=%s reason=\"%s\" suppressed_since_last=%llu", rd_kafka_name(rk), rd_kafka_err2name(err),
            reason, (unsigned long long)suppressed);
}

static void kafka_error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    (void)opaque;
    cmr_kafka_log_error(rk, err, reason);
}

/* Which clients a property is for: librdkafka's own table (rd_kafka_conf_properties_show,
 * its "C/P" column) read once, keeping the properties of one role only ('C' consumer,
 * 'P' producer); every other property is for both. A "kafka.*" key is one configuration
 * for every client of a process (the agent has producers and a consumer), so a property of
 * one role is not given to the other, which would only log that it ignores it. */
#define ROLE_PROPS_MAX 256
static struct {
    char name[64];
    char role;
} role_props[ROLE_PROPS_MAX];
static size_t n_role_props;
static pthread_once_t role_props_once = PTHREAD_ONCE_INIT;

static void role_props_read(void)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return; /* unknown: every property goes to every client, as librdkafka takes them */
    rd_kafka_conf_properties_show(f);
    fclose(f);
    for (char *line = text, *next; line && *line && n_role_props < ROLE_PROPS_MAX; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        char name[64], role[8];
        if (sscanf(line, "%63[a-z0-9._] | %7[CP*/] |", name, role) == 2 && !role[1] &&
            (role[0] == 'C' || role[0] == 'P')) {
            memcpy(role_props[n_role_props].name, name, sizeof name);
            role_props[n_role_props++].role = role[0];
        }
    }
    free(text);
}

/* 'C', 'P', or 0 for a property of both roles (or one librdkafka does not list). */
static char prop_role(const char *key)
{
    pthread_once(&role_props_once, role_props_read);
    for (size_t i = 0; i < n_role_props; i++)
        if (!strcmp(role_props[i].name, key))
            return role_props[i].role;
    return 0;
}

typedef struct conf_ctx {
    rd_kafka_conf_t *rk_conf;
    char role; /* 'C', 'P', or 0: every property */
    char *errbuf;
    size_t errlen;
} conf_ctx_t;

static int apply_one(const char *key, const char *value, const char *origin, void *opaque)
{
    conf_ctx_t *ctx = opaque;
    char err[256];
    char role = ctx->role ? prop_role(key) : 0;
    if (role && role != ctx->role)
        return 0; /* the other role's: not this client's */
    if (rd_kafka_conf_set(ctx->rk_conf, key, value, err, sizeof err) != RD_KAFKA_CONF_OK) {
        if (ctx->errbuf && ctx->errlen)
            snprintf(ctx->errbuf, ctx->errlen, "%s: kafka.%s: %s", origin, key, err);
        return -1;
    }
    return 0;
}

rd_kafka_conf_t *cmr_kafka_conf(const cmr_conf_t *conf, char role, char *errbuf, size_t errlen)
{
    rd_kafka_conf_t *rk_conf = rd_kafka_conf_new();
    if (!rk_conf)
        return NULL;
    rd_kafka_conf_set_log_cb(rk_conf, kafka_log_cb);
    rd_kafka_conf_set_error_cb(rk_conf, kafka_error_cb);
    conf_ctx_t ctx = {rk_conf, role, errbuf, errlen};
    if (conf && cmr_conf_foreach(conf, "kafka.", apply_one, &ctx) != 0) {
        rd_kafka_conf_destroy(rk_conf);
        return NULL;
    }
    return rk_conf;
}

/* Sets a property only where the user did not. 0 or -1. */
static int conf_default(rd_kafka_conf_t *rk_conf, const cmr_conf_t *conf, const char *key, const char *value,
                        char *errbuf, size_t errlen)
{
    char full[256];
    snprintf(full, sizeof full, "kafka.%s", key);
    if (cmr_conf_get(conf, full, NULL))
        return 0;
    char err[256];
    if (rd_kafka_conf_set(rk_conf, key, value, err, sizeof err) != RD_KAFKA_CONF_OK) {
        CMR_ERRF(errbuf, errlen, "%s=%s: %s", key, value, err);
        return -1;
    }
    return 0;
}

/* cmr_kafka_conf() with the forced and default properties. NULL with errbuf filled. */
static rd_kafka_conf_t *conf_with(const cmr_conf_t *conf, char role, const cmr_kafka_prop_t *forced,
                                  const cmr_kafka_prop_t *defaults, char *errbuf, size_t errlen)
{
    rd_kafka_conf_t *rk_conf = cmr_kafka_conf(conf, role, errbuf, errlen);
    if (!rk_conf)
        return NULL;
    char err[256];
    for (const cmr_kafka_prop_t *f = forced; f && f->key; f++)
        if (rd_kafka_conf_set(rk_conf, f->key, f->value, err, sizeof err) != RD_KAFKA_CONF_OK) {
            CMR_ERRF(errbuf, errlen, "%s=%s: %s", f->key, f->value, err);
            rd_kafka_conf_destroy(rk_conf);
            return NULL;
        }
    for (const cmr_kafka_prop_t *d = defaults; d && d->key; d++)
        if (conf_default(rk_conf, conf, d->key, d->value, errbuf, errlen) != 0) {
            rd_kafka_conf_destroy(rk_conf);
            return NULL;
        }
    return rk_conf;
}

void *cmr_kafka_client_alloc(size_t size, char *errbuf, size_t errlen)
{
    if (cmr_wire_init() != 0) {
        CMR_ERRF(errbuf, errlen, "wire contracts failed to initialize");
        return NULL;
    }
    void *client = calloc(1, size);
    if (!client)
        CMR_ERRF(errbuf, errlen, "out of memory");
    return client;
}

rd_kafka_t *cmr_kafka_client(rd_kafka_type_t type, const cmr_conf_t *conf, const cmr_kafka_prop_t *forced,
                             const cmr_kafka_prop_t *defaults, void (*callbacks)(rd_kafka_conf_t *rk_conf),
                             void *opaque, const char *what, char *errbuf, size_t errlen)
{
    rd_kafka_conf_t *rk_conf = conf_with(conf, type == RD_KAFKA_CONSUMER ? 'C' : 'P', forced, defaults, errbuf, errlen);
    if (!rk_conf)
        return NULL;
    if (callbacks)
        callbacks(rk_conf);
    rd_kafka_conf_set_opaque(rk_conf, opaque);
    char err[512];
    rd_kafka_t *rk = rd_kafka_new(type, rk_conf, err, sizeof err);
    if (!rk) {
        CMR_ERRF(errbuf, errlen, "cannot create %s: %s", what, err);
        rd_kafka_conf_destroy(rk_conf); /* rd_kafka_new takes it only on success */
        return NULL;
    }
    if (type == RD_KAFKA_CONSUMER)
        rd_kafka_poll_set_consumer(rk);
    return rk;
}

rd_kafka_topic_partition_list_t *cmr_kafka_list_of(const cmr_partition_t *parts, size_t count)
{
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new((int)count);
    for (size_t i = 0; list && i < count; i++)
        rd_kafka_topic_partition_list_add(list, parts[i].topic, parts[i].partition)->offset = parts[i].offset;
    return list;
}

int cmr_kafka_topic_partitions(rd_kafka_t *rk, const char *topic, int timeout_ms, int *partitions, char *errbuf,
                               size_t errlen)
{
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    if (!rkt) {
        CMR_ERRF(errbuf, errlen, "topic %s: %s", topic, rd_kafka_err2str(rd_kafka_last_error()));
        return -1;
    }
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t err = rd_kafka_metadata(rk, 0, rkt, &md, timeout_ms);
    int known = -1;
    if (!err && md) {
        known = 0;
        for (int i = 0; i < md->topic_cnt; i++)
            if (strcmp(md->topics[i].topic, topic) == 0 && md->topics[i].err == RD_KAFKA_RESP_ERR_NO_ERROR &&
                md->topics[i].partition_cnt > 0) {
                known = 1;
                if (partitions)
                    *partitions = md->topics[i].partition_cnt;
            }
        if (!known)
            CMR_ERRF(errbuf, errlen, "topic %s: %s", topic,
                     md->topic_cnt == 1 ? rd_kafka_err2str(md->topics[0].err) : "unknown topic");
    } else {
        CMR_ERRF(errbuf, errlen, "topic %s: %s", topic, rd_kafka_err2str(err));
    }
    if (md)
        rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(rkt);
    return known;
}

/*
 * kafka_internal.h - the transport's librdkafka side, shared by its own files (producer,
 * consumer, admin, reader) and by cmr-broker; not for the workers, which see only
 * cmr/kafka.h and cmr/reader.h.
 */
#ifndef CMR_KAFKA_INTERNAL_H
#define CMR_KAFKA_INTERNAL_H

#include <librdkafka/rdkafka.h>

#include "cmr/kafka.h"

/* Builds a librdkafka configuration from every "kafka.*" key of conf, plus log and error
 * callbacks into log.h. The caller owns the result (rd_kafka_conf_destroy, or pass it
 * to rd_kafka_new which takes it). NULL with errbuf filled on a bad property. */
rd_kafka_conf_t *cmr_kafka_conf(const cmr_conf_t *conf, char *errbuf, size_t errlen);

/* Sets a property only where the user did not (no "kafka.<key>" in conf). 0, or -1 with
 * errbuf filled. */
int cmr_kafka_conf_default(rd_kafka_conf_t *rk_conf, const cmr_conf_t *conf, const char *key, const char *value,
                           char *errbuf, size_t errlen);

/* cmr_kafka_conf(), then the properties the caller needs whatever the user configured
 * (`forced`) and those the user may override (`defaults`, set only where conf has no
 * "kafka.<key>"): NULL-ended arrays of key, value pairs, either may be NULL. NULL with
 * errbuf filled. */
rd_kafka_conf_t *cmr_kafka_conf_with(const cmr_conf_t *conf, const char *const *forced, const char *const *defaults,
                                     char *errbuf, size_t errlen);

/* Creates a handle of `type` from rk_conf, which it takes in every case (destroyed on
 * failure). A consumer's messages and callbacks are then served by its consumer poll.
 * NULL with errbuf filled ("cannot create <what>: ..."). */
rd_kafka_t *cmr_kafka_new(rd_kafka_type_t type, rd_kafka_conf_t *rk_conf, const char *what, char *errbuf,
                          size_t errlen);

/* A librdkafka list of these partitions (offsets copied); NULL on out of memory. The
 * caller destroys it. */
rd_kafka_topic_partition_list_t *cmr_kafka_list_of(const cmr_partition_t *parts, size_t count);

/* 1 when the cluster knows the topic (one or more partitions: their count in *partitions
 * when not NULL), 0 when not, -1 when it did not answer within timeout_ms (errbuf filled).
 * On a cluster with auto-creation enabled, asking creates the topic. */
int cmr_kafka_topic_partitions(rd_kafka_t *rk, const char *topic, int timeout_ms, int *partitions, char *errbuf,
                               size_t errlen);

/* A zeroed object of `size` bytes for a producer or consumer, once the wire contracts
 * they encode and decode with are initialized. NULL with errbuf filled. */
void *cmr_kafka_client_alloc(size_t size, char *errbuf, size_t errlen);

/* snprintf into errbuf when there is one. */
#define CMR_ERRF(errbuf, errlen, ...)                  \
    do {                                               \
        if ((errbuf) && (errlen))                      \
            snprintf((errbuf), (errlen), __VA_ARGS__); \
    } while (0)

#endif

/*
 * kafka_internal.h - the transport's librdkafka side, shared by its own files (producer,
 * consumer, admin, reader) and by cmr-broker; not for the workers, which see only
 * cmr/kafka.h and cmr/reader.h.
 */
#ifndef CMR_KAFKA_INTERNAL_H
#define CMR_KAFKA_INTERNAL_H

#include <librdkafka/rdkafka.h>
#include <stdbool.h>
#include <stdint.h>

#include "cmr/kafka.h"

/* Builds a librdkafka configuration from the "kafka.*" keys of conf, plus log and error
 * callbacks into log.h: for a client of `role` ('C' consumer, 'P' producer, which admin
 * clients are too) those that librdkafka does not list as the other role's; role 0: every
 * key. The caller owns the result (rd_kafka_conf_destroy, or pass it to rd_kafka_new which
 * takes it). NULL with errbuf filled on a bad property. */
rd_kafka_conf_t *cmr_kafka_conf(const cmr_conf_t *conf, char role, char *errbuf, size_t errlen);

/* What the error callback of cmr_kafka_conf() does with an error: logged as kafka.error
 * (kafka.fatal when fatal), one line per code per 30 s. For a client that sets its own
 * error callback to learn from the errors too. */
void cmr_kafka_log_error(rd_kafka_t *rk, int err, const char *reason);

/* A librdkafka property; arrays of them end with a NULL key. */
typedef struct cmr_kafka_prop {
    const char *key, *value;
} cmr_kafka_prop_t;

/* A transport client's handle of `type`: cmr_kafka_conf() of conf, then the properties
 * the client needs whatever the user configured (`forced`), then those the user may
 * override (`defaults`, set only where conf has no "kafka.<key>"), either may be NULL;
 * `callbacks` (may be NULL) sets the client's own callbacks on the configuration, whose
 * opaque is `opaque`. A consumer's messages and callbacks are served by its consumer
 * poll. NULL with errbuf filled ("cannot create <what>: ..." when librdkafka refused). */
rd_kafka_t *cmr_kafka_client(rd_kafka_type_t type, const cmr_conf_t *conf, const cmr_kafka_prop_t *forced,
                             const cmr_kafka_prop_t *defaults, void (*callbacks)(rd_kafka_conf_t *rk_conf),
                             void *opaque, const char *what, char *errbuf, size_t errlen);

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

/* The consumer's librdkafka handle, still owned by c: for the transport's white-box tests
 * (tests/transport), which act on librdkafka behind the consumer's back. */
rd_kafka_t *cmr_consumer_handle(cmr_consumer_t *c);

/* A rebalance event met while closing a consumer (the handle, the event, the opaque). */
typedef void(cmr_kafka_rebalance_fn)(rd_kafka_t *rk, rd_kafka_event_t *ev, void *opaque);

/* How a handle is destroyed: rd_kafka_destroy_flags(), or a test's stand-in. */
typedef void(cmr_kafka_destroy_fn)(rd_kafka_t *rk, int flags);

/* Destroys rk (rd_kafka_destroy_flags with flags; `destroy` instead when not NULL) on a
 * thread of its own and waits at most timeout_ms for it (destroy.c says why). true: rk is
 * destroyed. false: the destroy still runs, abandoned to its thread (counted by
 * cmr_kafka_abandoned_handles, logged as kafka.destroy_abandoned): the caller must keep
 * alive whatever rk's callbacks reach (their opaque), as they may still run. */
bool cmr_kafka_destroy_within(rd_kafka_t *rk, int flags, int timeout_ms, cmr_kafka_destroy_fn *destroy);

/* The bound of every destroy of a transport client, after its own flush or close. */
#define CMR_KAFKA_DESTROY_WAIT_MS 5000

/* Closes consumer rk (rd_kafka_consumer_close) until deadline_ms (cmr_mono_ms), on a queue
 * of its own, each rebalance event met handed to on_rebalance (may be NULL) as librdkafka's
 * close would (a close past the deadline is logged as kafka.close_timeout), then destroys
 * it within CMR_KAFKA_DESTROY_WAIT_MS, without the close when it did not finish. The
 * result of cmr_kafka_destroy_within: false when the destroy was abandoned, and then
 * whatever rk's callbacks reach must stay allocated. */
bool cmr_kafka_close_within(rd_kafka_t *rk, int64_t deadline_ms, cmr_kafka_rebalance_fn *on_rebalance, void *opaque);

/* snprintf into errbuf when there is one. */
#define CMR_ERRF(errbuf, errlen, ...)                  \
    do {                                               \
        if ((errbuf) && (errlen))                      \
            snprintf((errbuf), (errlen), __VA_ARGS__); \
    } while (0)

#endif

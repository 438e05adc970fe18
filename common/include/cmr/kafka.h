/*
 * kafka.h - the transport: producer, consumer and admin wrappers over librdkafka.
 *
 * Everything in the system talks through these. They add to librdkafka: our messages
 * (encode on send, decode and validate on receive), topic and key choice from topics.h,
 * configuration from cmr_conf_t ("kafka.*" keys pass through untouched, so SASL/TLS and
 * any tuning work against a real cluster), log routing into log.h, and counters.
 *
 * Delivery semantics:
 *   - The producer is idempotent (enable.idempotence=true unless configured otherwise)
 *     and never blocks: a full local queue returns CMR_SEND_QUEUE_FULL and is counted.
 *     Delivery reports are served on the producer's own thread and handed to the
 *     callback given at creation.
 *   - The consumer joins a consumer group and stores an offset only when the caller
 *     says a record is done (cmr_consumer_done()), after whatever write covers it is
 *     durable. Stored offsets are committed periodically and on close: a restarted
 *     consumer resumes after the last record marked done.
 *   - A message that does not decode (foreign, corrupt, unknown schema) is logged with
 *     its topic/partition/offset, counted, and skipped; it never reaches the caller.
 *
 * This header does not expose librdkafka: callers see only cmr_* types. The transport's
 * own files (and cmr-broker) reach the librdkafka configuration through
 * common/transport/kafka_internal.h.
 */
#ifndef CMR_KAFKA_H
#define CMR_KAFKA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cmr/conf.h"
#include "cmr/map.h"
#include "cmr/msg.h"
#include "cmr/topics.h"

/* One partition of a topic, with an offset where the call says so. */
typedef struct cmr_partition {
    const char *topic;
    int32_t partition;
    int64_t offset; /* CMR_OFFSET_INVALID when there is none */
} cmr_partition_t;

/* "No offset" (no committed offset, or not applicable); librdkafka's value. */
#define CMR_OFFSET_INVALID (-1001)

/* --- producer ---------------------------------------------------------------------- */

typedef struct cmr_producer cmr_producer_t;

typedef struct cmr_delivery {
    const char *topic;
    int32_t partition;
    int64_t offset;
    int err;           /* 0 when delivered, else the cluster's (librdkafka's) error code */
    const char *error; /* NULL when delivered, else what went wrong */
    void *opaque;      /* as given to cmr_producer_send() */
} cmr_delivery_t;

typedef void(cmr_delivery_cb_t)(const cmr_delivery_t *delivery, void *cb_opaque);

typedef struct cmr_producer_stats {
    uint64_t queued;     /* accepted into the local queue */
    uint64_t delivered;  /* acknowledged by the cluster */
    uint64_t failed;     /* permanently failed (reported through the callback) */
    uint64_t queue_full; /* refused because the local queue was full */
    uint64_t invalid;    /* refused because the message did not encode */
} cmr_producer_stats_t;

enum { CMR_SEND_OK = 0, CMR_SEND_QUEUE_FULL = 1, CMR_SEND_ERROR = -1 };

/* cb may be NULL. The producer takes no ownership of conf. */
cmr_producer_t *cmr_producer_new(const cmr_conf_t *conf, const char *client_id, cmr_delivery_cb_t *cb, void *cb_opaque,
                                 char *errbuf, size_t errlen);
/* Encodes and queues one message on its topic (cmr_msg_topic()) with its key
 * (cmr_msg_key()). Command messages need `topic` (the agent's command topic); for other
 * types, topic may be NULL. Never blocks. Returns a CMR_SEND_* value. */
int cmr_producer_send(cmr_producer_t *p, cmr_msg_type_t type, const void *msg, const char *topic, void *opaque,
                      char *errbuf, size_t errlen);
/* Queues already encoded bytes (copied). */
int cmr_producer_send_raw(cmr_producer_t *p, const char *topic, const void *key, size_t key_len, const void *payload,
                          size_t len, void *opaque);
/* Waits up to timeout_ms until every queued message is delivered or failed. 0, or -1
 * when messages are still outstanding. */
int cmr_producer_flush(cmr_producer_t *p, int timeout_ms);
void cmr_producer_stats(cmr_producer_t *p, cmr_producer_stats_t *out);
/* Messages not yet delivered or failed. */
int cmr_producer_outstanding(cmr_producer_t *p);
/* true when librdkafka last said that every broker is down (it says so once they all
 * are, after connection attempts fail) and since then nothing was delivered and no
 * metadata request answered: what a shutdown asks to know whether waiting for
 * deliveries can help (a hint: one address of several refused is enough to say it). */
bool cmr_producer_cluster_down(cmr_producer_t *p);
/* Asks the cluster for metadata now, for `topic` or (NULL) for the topics the producer
 * knows, waiting up to timeout_ms: a new topic is then known before the first send to
 * it, and an answer proves the cluster reachable. The number of brokers in the answer
 * (> 0 when the cluster answered), or -1. */
int cmr_producer_fetch_metadata(cmr_producer_t *p, const char *topic, int timeout_ms);
/* Asks the cluster, on the producer's own connection, whether `topic` exists (a cluster
 * with auto-creation creates it then), waiting up to timeout_ms; the producer knows the
 * topic's metadata afterwards. 1 when it exists, 0 when not, -1 when the cluster did not
 * answer. Cheaper than cmr_admin_ensure_topic(), which opens a client of its own. */
int cmr_producer_topic_known(cmr_producer_t *p, const char *topic, int timeout_ms);
/* The same for n topics with one metadata request (of every topic of the cluster: one
 * round trip, whatever n): known[i] says whether topics[i] exists. How many do, or -1
 * when the cluster did not answer. */
int cmr_producer_topics_known(cmr_producer_t *p, const char *const *topics, size_t n, int timeout_ms, bool *known);
/* The partition the producers' partitioner (librdkafka's `partitioner` setting; NULL: its
 * default, consistent_random) picks for a non-empty key among partition_count partitions:
 * where a message with that key was written. -1 when the key is empty, the count is not
 * positive, or the partitioner is not one of librdkafka's (the random ones pick by key all
 * the same when there is a key). */
int32_t cmr_key_partition(const char *partitioner, const void *key, size_t keylen, int32_t partition_count);
/* The same for trace ids (the key: the id's 32 hex digits, as cmr_msg_key writes it), for
 * a caller that asks for many ids whose first 8 bytes repeat (a thread's trace ids are a
 * random prefix and a counter): the partitioner's name is resolved once, and under the
 * consistent partitioner (a CRC-32 of the key, continued byte by byte) the CRC of the
 * first 16 digits of the last id is kept and continued over the other 16. One per caller
 * (not thread-safe). */
typedef struct cmr_trace_partitioner {
    int kind;      /* which of librdkafka's partitioners (0: none of them: every pick is -1) */
    bool hi_known; /* hi_crc is the CRC of the digits of hi */
    uint64_t hi;
    uint32_t hi_crc;
} cmr_trace_partitioner_t;
void cmr_trace_partitioner_init(cmr_trace_partitioner_t *tp, const char *partitioner);
/* cmr_key_partition(partitioner, the id's 32 hex digits, 32, partition_count). */
int32_t cmr_trace_partitioner_pick(cmr_trace_partitioner_t *tp, const uint8_t trace_id[16], int32_t partition_count);
/* The partition count of `topic` as the cluster says it now (waiting up to timeout_ms),
 * or -1 when it did not answer or does not know the topic. */
int cmr_producer_partitions(cmr_producer_t *p, const char *topic, int timeout_ms);
/* As cmr_producer_send, to an explicit partition (the key is kept on the message). */
int cmr_producer_send_to(cmr_producer_t *p, cmr_msg_type_t type, const void *msg, int32_t partition, void *opaque,
                         char *errbuf, size_t errlen);
/* One segment batch (its events a block of their own) as an EventBatch message of its own,
 * keyed by its trace id (tools and tests; the agent's publisher groups them). */
int cmr_producer_send_batch(cmr_producer_t *p, const cmr_event_batch_t *b, void *opaque, char *errbuf, size_t errlen);
/* Flushes for at most flush_timeout_ms, logs what could not be delivered, frees. */
void cmr_producer_destroy(cmr_producer_t *p, int flush_timeout_ms);

/* Transactions: a producer made with kafka.transactional.id publishes a group of messages
 * all or nothing (consumers read committed messages only, librdkafka's default).
 * cmr_producer_txn_begin() initializes the producer's transactions the first time (which
 * fences an older producer with the same id) and begins one: 0, or -1 with errbuf filled
 * (the cluster does not support transactions, the principal may not use the id, ...).
 * cmr_producer_txn_commit() delivers everything sent since and commits: CMR_TXN_COMMITTED;
 * CMR_TXN_ABORTED when it was aborted instead (a message failed; none is visible); or
 * CMR_TXN_UNKNOWN when the outcome could not be learnt (errbuf says why).
 * cmr_producer_txn_abort() drops the open transaction (what was sent in it never becomes
 * visible): 0, or -1 with errbuf filled. */
enum { CMR_TXN_COMMITTED = 0, CMR_TXN_ABORTED = 1, CMR_TXN_UNKNOWN = 2 };
int cmr_producer_txn_begin(cmr_producer_t *p, int timeout_ms, char *errbuf, size_t errlen);
int cmr_producer_txn_commit(cmr_producer_t *p, int timeout_ms, char *errbuf, size_t errlen);
int cmr_producer_txn_abort(cmr_producer_t *p, int timeout_ms, char *errbuf, size_t errlen);

/* --- consumer ---------------------------------------------------------------------- */

typedef struct cmr_consumer cmr_consumer_t;

/* One consumed message. Owned by the caller after cmr_consumer_poll(); release with
 * cmr_record_free() (after cmr_consumer_done() if it was processed). Every pointer in it
 * is valid until then. */
typedef struct cmr_record {
    const char *topic;
    int32_t partition;
    int64_t offset;
    const char *key; /* NUL-terminated copy, "" when none */
    size_t key_len;
    int64_t timestamp_ms;
    cmr_msg_t msg;       /* decoded body */
    const void *payload; /* the encoded bytes as received */
    size_t len;
} cmr_record_t;

typedef struct cmr_consumer_stats {
    uint64_t received; /* decoded and handed out */
    uint64_t rejected; /* skipped because they did not decode */
    uint64_t done;     /* marked done by the caller */
    uint64_t rebalances;
    uint64_t held_back; /* fetched while their partition was paused: not handed out, fetched again on resume */
} cmr_consumer_stats_t;

/* Called when partitions are assigned (revoked = 0) or revoked (revoked = 1), on the
 * polling thread (inside cmr_consumer_poll()), before the change takes effect: a worker
 * flushes what it holds for revoked partitions here. parts[i].offset is not set; parts is
 * valid during the call only. The callback should return at once: the group waits for it.
 * A callback that needs time for a new partition pauses it (cmr_consumer_pause()) and
 * resumes it later from its loop. */
typedef void(cmr_rebalance_cb_t)(cmr_consumer_t *c, int revoked, const cmr_partition_t *parts, size_t count,
                                 void *opaque);

/* Joins consumer group `group_id` and subscribes to `topics` (ntopics names). Defaults:
 * auto.offset.reset=earliest, offsets stored only by cmr_consumer_done(). */
cmr_consumer_t *cmr_consumer_new(const cmr_conf_t *conf, const char *group_id, const char *const *topics,
                                 size_t ntopics, cmr_rebalance_cb_t *rebalance_cb, void *cb_opaque, char *errbuf,
                                 size_t errlen);
/* The only reader of `topic` (an agent's own command topic): every partition assigned from
 * its beginning, outside any consumer group (no group join, which takes seconds), nothing
 * committed (the position lives in the consumer for its lifetime; librdkafka keeps it
 * across reconnects). Every record ever written to the topic is handed out once, in order
 * per partition, whenever it was written relative to this call. The topic must exist
 * (cmr_admin_ensure_topic); its partition count is looked up once, waiting up to
 * timeout_ms. cmr_consumer_done() only counts; cmr_consumer_commit() does nothing. NULL
 * with errbuf filled. */
cmr_consumer_t *cmr_consumer_new_assigned(const cmr_conf_t *conf, const char *client_id, const char *topic,
                                          int timeout_ms, char *errbuf, size_t errlen);
/* Waits up to timeout_ms for the next decodable record. Returns 1 with *out set, 0 when
 * none arrived, -1 on a fatal consumer error (logged). */
int cmr_consumer_poll(cmr_consumer_t *c, int timeout_ms, cmr_record_t **out);
/* The record is processed and what it changed is durable: its offset may be committed. */
void cmr_consumer_done(cmr_consumer_t *c, const cmr_record_t *rec);
/* Commits the stored offsets now (synchronously). 0 or -1. */
int cmr_consumer_commit(cmr_consumer_t *c);
void cmr_consumer_stats(cmr_consumer_t *c, cmr_consumer_stats_t *out);
/* The partitions assigned to this consumer now, as an array the caller frees with free()
 * (topics included; offsets not set). 0, or -1 (*out NULL). */
int cmr_consumer_assignment(cmr_consumer_t *c, cmr_partition_t **out, size_t *count);
/* Fills parts[i].offset with the group's committed offset of each partition
 * (CMR_OFFSET_INVALID when none), asking the cluster for up to timeout_ms. 0 or -1. */
int cmr_consumer_committed(cmr_consumer_t *c, cmr_partition_t *parts, size_t count, int timeout_ms);
/* Every assigned partition with its lag in `offset`: the high watermark the last fetch saw
 * minus the consumer's position (no request to the cluster; CMR_OFFSET_INVALID while
 * either is unknown). One block in *out, as cmr_consumer_assignment(); the caller frees
 * it. 0 or -1. Call from the thread that polls. */
int cmr_consumer_lag(cmr_consumer_t *c, cmr_partition_t **out, size_t *count);
/* Stops (pause) or restarts (resume) fetching these assigned partitions; what was fetched
 * and not yet handed out is dropped and fetched again after the resume, from the next
 * record not handed out. Called from the rebalance callback for the partitions being
 * assigned, the pause takes effect with the assignment (no record of them is handed out
 * before the resume). A pause holds even where librdkafka loses it (consumer.c): no record
 * of a paused partition is handed out until its resume, which may then wait up to 10 s
 * to rewind the partition. A revoked partition is no longer paused. 0 or -1 (resume: the
 * partition could not be rewound and stays paused). */
int cmr_consumer_pause(cmr_consumer_t *c, const cmr_partition_t *parts, size_t count);
int cmr_consumer_resume(cmr_consumer_t *c, const cmr_partition_t *parts, size_t count);
/* Commits stored offsets, leaves the group, frees. */
void cmr_consumer_close(cmr_consumer_t *c);

void cmr_record_free(cmr_record_t *rec);

/* --- admin ------------------------------------------------------------------------- */

/* Makes sure the topic exists. A cluster that auto-creates topics creates it on the
 * first request, with its own default partition count; otherwise it is created with
 * CreateTopics (partitions, replication factor -1 = broker default, compacted or not).
 * 0 when it exists afterwards, -1 with errbuf filled. */
int cmr_admin_ensure_topic(const cmr_conf_t *conf, const char *topic, int partitions, int replication, int compacted,
                           int timeout_ms, char *errbuf, size_t errlen);

/* Topics already made sure of, so that a worker asks the cluster once per topic (the
 * per-agent command topics). A zeroed struct is empty; release with cmr_topic_set_free(). */
typedef struct cmr_topic_set {
    cmr_map_t names; /* topic name -> nothing (the keys are the set) */
} cmr_topic_set_t;

/* cmr_admin_ensure_topic() for a topic not in `set` (one partition, broker defaults), which
 * is then remembered. 0 when it was known already, 1 when it was ensured now, -1 with
 * errbuf filled when the cluster could not make sure of it (it is asked again next time). */
int cmr_admin_ensure_topic_once(cmr_topic_set_t *set, const cmr_conf_t *conf, const char *topic, int timeout_ms,
                                char *errbuf, size_t errlen);
/* The same for the topics a producer sends to: the producer is asked first (on its own
 * connection: no client of its own, and the producer knows the topic's metadata
 * afterwards, so the first message does not wait for it); cmr_admin_ensure_topic() only
 * when the topic is still missing. Same return values. */
int cmr_producer_ensure_topic_once(cmr_producer_t *p, cmr_topic_set_t *set, const cmr_conf_t *conf, const char *topic,
                                   int timeout_ms, char *errbuf, size_t errlen);
/* The same for n topics: those not in `set` are looked up together
 * (cmr_producer_topics_known) when there are several, and only those still missing are
 * asked for one by one. How many were ensured now, or -1 when one could not be (errbuf
 * names it; the others are in the set). */
int cmr_producer_ensure_topics_once(cmr_producer_t *p, cmr_topic_set_t *set, const cmr_conf_t *conf,
                                    const char *const *topics, size_t n, int timeout_ms, char *errbuf, size_t errlen);
/* How many topics the set holds. */
size_t cmr_topic_set_count(const cmr_topic_set_t *set);
void cmr_topic_set_free(cmr_topic_set_t *set);

/* --- the end of a process ----------------------------------------------------------- */

/* Clients are destroyed within a bound (a producer after its flush, a consumer after its
 * close): librdkafka 2.0 waits up to the group's session timeout, spinning a CPU, to
 * destroy a group consumer whose coordinator is gone. How many handles were left to
 * finish on their own threads past that bound and are still finishing. */
int cmr_kafka_abandoned_handles(void);

/* A program's last call (`return cmr_kafka_process_end(rc);` in main): returns rc, or,
 * while a handle is still being destroyed, ends the process with rc at once (stdio
 * flushed, _exit: exit()'s handlers must not run under librdkafka's threads). Not for
 * code inside someone else's process (the agent). */
int cmr_kafka_process_end(int rc);

#endif

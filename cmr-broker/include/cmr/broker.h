/*
 * broker.h - the embedded Kafka broker for the demo and the tests.
 *
 * Serves the Kafka protocol on loopback through librdkafka's mock cluster
 * (rdkafka_mock.h): in memory, not durable, with bounded retention per partition (the
 * mock drops the oldest data beyond a few MiB). Production uses Apache Kafka; nothing
 * outside this component knows the mock exists: clients reach it only through its
 * bootstrap address, as they would a real cluster.
 */
#ifndef CMR_BROKER_H
#define CMR_BROKER_H

#include <stddef.h>

typedef struct cmr_broker cmr_broker_t;

typedef struct cmr_broker_options {
    int brokers;    /* broker count, 1..9 (default 1) */
    int port;       /* bootstrap port on 127.0.0.1; 0 picks a free one */
    int partitions; /* override every topic's partition count; 0 keeps topics.h defaults */
} cmr_broker_options_t;

/* Starts the cluster and creates the project's shared topics. NULL with errbuf filled
 * when it cannot (port taken, ...). */
cmr_broker_t *cmr_broker_start(const cmr_broker_options_t *opts, char *errbuf, size_t errlen);
/* Takes every broker down (connections closed, new ones refused) or brings them back;
 * the data stays. For outage tests: cmr-broker does this on SIGUSR1 / SIGUSR2. */
void cmr_broker_set_available(cmr_broker_t *b, int available);
/* "127.0.0.1:port": what clients put in bootstrap.servers. */
const char *cmr_broker_bootstrap(const cmr_broker_t *b);
void cmr_broker_stop(cmr_broker_t *b);

#endif

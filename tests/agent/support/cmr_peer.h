/*
 * cmr_peer.h - a scripted CMR for agent tests: it consumes what agents send (through the
 * real transport, from the embedded broker), keeps every message for inspection, and
 * sends commands to an agent's command topic. The test decides every answer.
 */
#ifndef CMR_TEST_CMR_PEER_H
#define CMR_TEST_CMR_PEER_H

#include <stdbool.h>
#include <stddef.h>

#include "cmr/kafka.h"

typedef struct cmr_peer {
    cmr_conf_t *conf;
    cmr_producer_t *producer;
    cmr_consumer_t *consumer;
    cmr_record_t **recs;
    size_t n, cap;
} cmr_peer_t;

/* Selects messages: return true to match. */
typedef bool (*cmr_peer_match_fn)(const cmr_msg_t *m, const void *ud);

int cmr_peer_start(cmr_peer_t *p, const char *bootstrap);
/* Same, without consuming cmr.events and cmr.metrics (for benchmarks: the peer then
 * costs the machine nothing while the agent ships events). */
int cmr_peer_start_control_only(cmr_peer_t *p, const char *bootstrap);
void cmr_peer_stop(cmr_peer_t *p);
/* Reads whatever arrived during `ms`. */
void cmr_peer_poll(cmr_peer_t *p, int ms);
/* Waits until the k-th (0-based) message of `type` that matches is there; NULL on timeout.
 * The record stays owned by the peer. */
const cmr_record_t *cmr_peer_wait(cmr_peer_t *p, cmr_msg_type_t type, cmr_peer_match_fn fn, const void *ud, size_t k,
                                  int timeout_ms);
size_t cmr_peer_count(cmr_peer_t *p, cmr_msg_type_t type, cmr_peer_match_fn fn, const void *ud);
/* Sends a command to an agent instance's command topic. 0 or -1. */
int cmr_peer_command(cmr_peer_t *p, const char *instance_id, cmr_msg_type_t type, const void *msg);

/* Common matchers: `ud` is the instance id (string) or the agent id (int64_t *). */
bool cmr_peer_of_instance(const cmr_msg_t *m, const void *instance_id);
bool cmr_peer_of_agent(const cmr_msg_t *m, const void *agent_id);

#endif

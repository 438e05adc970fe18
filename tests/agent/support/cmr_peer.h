/*
 * cmr_peer.h - a scripted CMR for agent tests: it consumes what agents send (through the
 * real transport, from the embedded broker), keeps every message for inspection, and
 * sends commands to an agent's command topic. The test decides every answer.
 *
 * Like the real CMR, the peer signs its commands (cmr/command.h): it makes its own key
 * pair in a temporary directory at start, and the JVMs of the tests pin its public key
 * (cmr_peer_trust_option). It can also send what an attacker would: bare messages,
 * envelopes signed by other keys or for other instances, replays.
 */
#ifndef CMR_TEST_CMR_PEER_H
#define CMR_TEST_CMR_PEER_H

#include <stdbool.h>
#include <stddef.h>

#include "cmr/command.h"
#include "cmr/event.h"
#include "cmr/kafka.h"
#include "cmr/trust.h"

typedef struct cmr_peer {
    cmr_conf_t *conf;
    cmr_producer_t *producer;
    cmr_consumer_t *consumer;
    cmr_record_t **recs;
    size_t n, cap;
    /* the segment batches of every EventBatch message received, in arrival order: pointers
     * into `splits` (stable until cmr_peer_stop), owned by the peer */
    const cmr_event_batch_t **segs;
    size_t nsegs, segs_cap;
    struct cmr_peer_split {
        cmr_event_batch_t *v; /* one message's batches (cmr_segs_split) */
        size_t n;
    } * splits;
    size_t nsplits, splits_cap;
    size_t bad_event_msgs;  /* EventBatch messages that did not split (corrupt): reported on stderr */
    char key_dir[64];       /* the peer's keys, removed by cmr_peer_stop */
    char public_key[128];   /* key_dir/cmr.pub: what the agents pin */
    char trust_option[160]; /* "trust.keys=<public_key>" for agent options */
    cmr_signer_t *signer;   /* key_dir/cmr.key */
    int extra_keys;         /* other key pairs made in key_dir */
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
/* Sends a command, signed with the peer's key for that instance, to an agent instance's
 * command topic, and waits until the broker has it. 0 or -1. */
int cmr_peer_command(cmr_peer_t *p, const char *instance_id, cmr_msg_type_t type, const void *msg);
/* Sends any message as it is (no envelope: what an attacker who can write the topic
 * sends; or an envelope made with cmr_peer_wrap, again) to instance_id's command topic. */
int cmr_peer_send_raw(cmr_peer_t *p, const char *instance_id, cmr_msg_type_t type, const void *msg);
/* Sends msg signed by `signer` for `target_instance`, to `topic_instance`'s command topic
 * (forgeries: another key, another target). */
int cmr_peer_send_signed(cmr_peer_t *p, const cmr_signer_t *signer, const char *target_instance,
                         const char *topic_instance, cmr_msg_type_t type, const void *msg);
/* A new key pair of the peer that no agent pins; freed by the caller (cmr_signer_free). */
cmr_signer_t *cmr_peer_new_signer(cmr_peer_t *p);

/* Signs msg for instance_id into an envelope (to be sent, or replayed, with
 * cmr_peer_send_raw and CMR_MSG_SIGNED_COMMAND). The envelope points into w. */
typedef struct cmr_peer_envelope {
    cmr_signed_command_t env;
    cmr_buf_t payload;
    char key_id[CMR_TRUST_KEY_ID_CHARS + 1];
    uint8_t signature[CMR_TRUST_SIGNATURE_BYTES];
} cmr_peer_envelope_t;
int cmr_peer_wrap(cmr_peer_t *p, const char *instance_id, cmr_msg_type_t type, const void *msg, cmr_peer_envelope_t *w);
void cmr_peer_envelope_free(cmr_peer_envelope_t *w);

/* Common matchers: `ud` is the instance id (string) or the agent id (int64_t *). */
bool cmr_peer_of_instance(const cmr_msg_t *m, const void *instance_id);
bool cmr_peer_of_agent(const cmr_msg_t *m, const void *agent_id);

/* The k-th (0-based) segment batch of agent_id among those received so far whose segment
 * is `segment` and batch_seq `seq`; NULL when there is none (yet). */
const cmr_event_batch_t *cmr_peer_seg_batch(const cmr_peer_t *p, int64_t agent_id, int64_t segment, int32_t seq);

#endif

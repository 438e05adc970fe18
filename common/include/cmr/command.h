/*
 * command.h - commands on the wire: every message a CMR worker sends to one agent's
 * command topic travels signed, in a SignedCommand envelope (schemas/signed_command.avsc).
 *
 * The CMR side encodes the command, signs it for the target instance (cmr/trust.h) and
 * sends the envelope; the agent side verifies the envelope of a received record and
 * replaces the record's message with the command inside. Nothing else sends or reads
 * commands, so no unsigned command can reach an agent's handlers.
 */
#ifndef CMR_COMMAND_H
#define CMR_COMMAND_H

#include <stddef.h>
#include <stdint.h>

#include "cmr/buf.h"
#include "cmr/conf.h"
#include "cmr/kafka.h"
#include "cmr/msg.h"
#include "cmr/trust.h"

/* How long a command stays valid unless configured otherwise (trust.command.lifetime.ms). */
#define CMR_COMMAND_DEFAULT_LIFETIME_MS 600000

/* A worker's signing key (trust.signing_key) and the lifetime of its commands
 * (trust.command.lifetime.ms, 1 s .. 1 h), loaded before it connects to anything. NULL,
 * with a message on stderr prefixed by `program` that says how to make a key, when either
 * is missing or bad: a worker without a key cannot send a command an agent would accept.
 * On success logs `event` with the key id. The caller frees the signer. */
cmr_signer_t *cmr_command_signer_load(const cmr_conf_t *conf, const char *program, const char *event,
                                      int64_t *lifetime_ms);

/* true for the message types that are commands (AgentConfiguration, NoEnvironment,
 * Redefine, BytecodeResend). */
bool cmr_command_type(cmr_msg_type_t type);

/* Encodes msg (any type: the agent refuses non-commands inside an envelope) into
 * `payload` and fills `out` with the signed envelope around it. out points into payload
 * and into the strings given (instance_id) and its own key_id buffer `key_id`; the
 * caller frees payload. 0, or -1 with errbuf filled. */
int cmr_command_wrap(const cmr_signer_t *signer, const char *instance_id, int64_t lifetime_ms, cmr_msg_type_t type,
                     const void *msg, cmr_buf_t *payload, cmr_signed_command_t *out,
                     char key_id[CMR_TRUST_KEY_ID_CHARS + 1], uint8_t signature[CMR_TRUST_SIGNATURE_BYTES],
                     char *errbuf, size_t errlen);

/* Encodes msg (a command type), signs it for instance_id and queues the envelope on
 * `topic` (the agent's command topic). Never blocks. `opaque` comes back in the delivery
 * report (cmr_delivery_t). A CMR_SEND_* value; errbuf says why on CMR_SEND_ERROR. */
int cmr_command_send(cmr_producer_t *p, const cmr_signer_t *signer, const char *instance_id, const char *topic,
                     int64_t lifetime_ms, cmr_msg_type_t type, const void *msg, void *opaque, char *errbuf,
                     size_t errlen);

/* The agent side: verifies the SignedCommand in rec->msg at wall time now_ms. On
 * CMR_TRUST_OK, rec->msg holds the command inside (the envelope is freed). Otherwise
 * rec->msg is unchanged and the verdict says why (a record that is not an envelope is
 * CMR_TRUST_UNSIGNED; an authentic envelope whose payload is not a command that decodes
 * is CMR_TRUST_MALFORMED). */
cmr_trust_verdict_t cmr_command_open(cmr_verifier_t *v, cmr_msg_t *msg, int64_t now_ms);

#endif

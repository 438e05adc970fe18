/*
 * command.c - signed commands on the wire: sending an envelope (CMR workers) and opening
 * one (agents). See cmr/command.h; the cryptography is in sign.c and verify.c.
 */
#include "cmr/command.h"

#include <stdio.h>
#include <string.h>

#include <inttypes.h>

#include "cmr/clock.h"
#include "cmr/log.h"
#include "cmr/wire.h"

cmr_signer_t *cmr_command_signer_load(const cmr_conf_t *conf, const char *program, const char *event,
                                      int64_t *lifetime_ms)
{
    char err[512];
    if (cmr_conf_get_int(conf, "trust.command.lifetime.ms", CMR_COMMAND_DEFAULT_LIFETIME_MS, 1000, 3600000, lifetime_ms,
                         err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", program, err);
        return NULL;
    }
    const char *path = cmr_conf_get(conf, "trust.signing_key", NULL);
    if (!path || !path[0]) {
        fprintf(stderr,
                "%s: no command signing key: set trust.signing_key to the secret key file "
                "(-X trust.signing_key=DIR/cmr.key); make a key pair with 'cmr-config keygen --dir DIR' "
                "and give the agents DIR/cmr.pub as trust.keys (docs/SECURITY.md)\n",
                program);
        return NULL;
    }
    if (cmr_trust_init() != 0) {
        fprintf(stderr, "%s: libsodium cannot run here: no command can be signed\n", program);
        return NULL;
    }
    cmr_signer_t *s = cmr_signer_load(path, err, sizeof err);
    if (!s) {
        fprintf(stderr, "%s: trust.signing_key: %s (make a key pair with 'cmr-config keygen --dir DIR')\n", program,
                err);
        return NULL;
    }
    cmr_log(CMR_LOG_INFO, event, "key_id=%s lifetime_ms=%" PRId64, cmr_signer_key_id(s), *lifetime_ms);
    return s;
}

bool cmr_command_type(cmr_msg_type_t type)
{
    return type == CMR_MSG_AGENT_CONFIGURATION || type == CMR_MSG_NO_ENVIRONMENT || type == CMR_MSG_REDEFINE ||
           type == CMR_MSG_BYTECODE_RESEND || type == CMR_MSG_CLASS_GRANTS;
}

int cmr_command_wrap(const cmr_signer_t *signer, const char *instance_id, int64_t lifetime_ms, cmr_msg_type_t type,
                     const void *msg, cmr_buf_t *payload, cmr_signed_command_t *out,
                     char key_id[CMR_TRUST_KEY_ID_CHARS + 1], uint8_t signature[CMR_TRUST_SIGNATURE_BYTES],
                     char *errbuf, size_t errlen)
{
    if (cmr_msg_encode(type, msg, payload, errbuf, errlen) != CMR_WIRE_OK)
        return -1;
    cmr_envelope_t env;
    cmr_signer_sign(signer, instance_id, lifetime_ms > 0 ? lifetime_ms : CMR_COMMAND_DEFAULT_LIFETIME_MS, payload->data,
                    payload->len, &env);
    memcpy(key_id, env.key_id, CMR_TRUST_KEY_ID_CHARS + 1);
    memcpy(signature, env.signature, CMR_TRUST_SIGNATURE_BYTES);
    *out = (cmr_signed_command_t){
        .target_instance = (char *)instance_id,
        .issued_ms = env.issued_ms,
        .not_after_ms = env.not_after_ms,
        .key_id = key_id,
        .signature = {signature, CMR_TRUST_SIGNATURE_BYTES},
        .payload = {payload->data, payload->len},
    };
    memcpy(out->command_id, env.command_id, sizeof out->command_id);
    return 0;
}

int cmr_command_send(cmr_producer_t *p, const cmr_signer_t *signer, const char *instance_id, const char *topic,
                     int64_t lifetime_ms, cmr_msg_type_t type, const void *msg, void *opaque, char *errbuf,
                     size_t errlen)
{
    if (!cmr_command_type(type)) {
        snprintf(errbuf, errlen, "%s is not a command", cmr_msg_type_name(type));
        return CMR_SEND_ERROR;
    }
    cmr_buf_t payload = {0};
    cmr_signed_command_t sc;
    char key_id[CMR_TRUST_KEY_ID_CHARS + 1];
    uint8_t signature[CMR_TRUST_SIGNATURE_BYTES];
    int rc = CMR_SEND_ERROR;
    if (cmr_command_wrap(signer, instance_id, lifetime_ms, type, msg, &payload, &sc, key_id, signature, errbuf,
                         errlen) == 0)
        rc = cmr_producer_send(p, CMR_MSG_SIGNED_COMMAND, &sc, topic, opaque, errbuf, errlen);
    cmr_buf_free(&payload);
    return rc;
}

cmr_trust_verdict_t cmr_command_open(cmr_verifier_t *v, cmr_msg_t *msg, int64_t now_ms)
{
    cmr_envelope_t env = {0};
    if (msg->type != CMR_MSG_SIGNED_COMMAND) /* an unwrapped command: counted as unsigned */
        return cmr_verifier_check(v, &env, NULL, 0, now_ms);
    const cmr_signed_command_t *sc = &msg->u.signed_command;
    if (sc->signature.len == sizeof env.signature && sc->key_id && strlen(sc->key_id) == CMR_TRUST_KEY_ID_CHARS) {
        env.target_instance = sc->target_instance;
        memcpy(env.command_id, sc->command_id, sizeof env.command_id);
        env.issued_ms = sc->issued_ms;
        env.not_after_ms = sc->not_after_ms;
        memcpy(env.key_id, sc->key_id, sizeof env.key_id);
        memcpy(env.signature, sc->signature.data, sizeof env.signature);
    }
    cmr_trust_verdict_t r = cmr_verifier_check(v, &env, sc->payload.data, sc->payload.len, now_ms);
    if (r != CMR_TRUST_OK)
        return r;
    cmr_msg_t inner;
    char err[256];
    bool ok = cmr_msg_decode(sc->payload.data, sc->payload.len, &inner, err, sizeof err) == CMR_WIRE_OK;
    if (ok && !cmr_command_type(inner.type)) {
        cmr_msg_free(&inner);
        ok = false;
    }
    if (!ok) {
        cmr_verifier_recount(v, CMR_TRUST_OK, CMR_TRUST_MALFORMED);
        return CMR_TRUST_MALFORMED;
    }
    cmr_msg_free(msg);
    *msg = inner;
    return CMR_TRUST_OK;
}

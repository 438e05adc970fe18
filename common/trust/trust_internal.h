/*
 * trust_internal.h - what the files of common/trust/ share: key file labels, key ids,
 * key text parsing and the bytes an envelope's signature covers. Internal.
 */
#ifndef CMR_TRUST_INTERNAL_H
#define CMR_TRUST_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cmr/buf.h"
#include "cmr/trust.h"

#define TRUST_SECRET_LABEL "cmr-ed25519-secret"
#define TRUST_PUBLIC_LABEL "cmr-ed25519-public"

void trust_key_id(const uint8_t pk[CMR_TRUST_PUBLIC_KEY_BYTES], char out[CMR_TRUST_KEY_ID_CHARS + 1]);
int trust_parse_key_text(const char *text, size_t text_len, const char *label, bool label_optional, uint8_t *out,
                         size_t n);
/* Reads a key file (a secret one must not be readable by others). Contents never echoed;
 * on failure `out` is freed (and wiped). */
int trust_read_key_file(const char *path, bool secret, cmr_buf_t *out, char *errbuf, size_t errlen);
/* The bytes the signature covers: prefix, then every envelope field with its length, then
 * the payload's digest. */
void trust_signed_bytes(const cmr_envelope_t *env, const void *payload, size_t payload_len, cmr_buf_t *out);

/* The signer's public key (the end of its secret key). */
void trust_signer_public(const cmr_signer_t *s, uint8_t pk[CMR_TRUST_PUBLIC_KEY_BYTES]);
/* Signs msg with the signer's secret key (grant.c). 0 or -1. */
int trust_sign_detached(const cmr_signer_t *s, const void *msg, size_t len, uint8_t sig[CMR_TRUST_SIGNATURE_BYTES]);
/* The pinned public key with this id, or NULL. Reads the verifier's key table only: safe
 * from any thread once the keys are pinned. */
const uint8_t *trust_verifier_pinned(const cmr_verifier_t *v, const char *key_id);

#endif

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

#endif

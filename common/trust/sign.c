/*
 * sign.c - signing command envelopes (the CMR's workers). See cmr/trust.h.
 */
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/bytes.h"
#include "cmr/clock.h"
#include "cmr/trust.h"
#include "trust_internal.h"

/* Changing what is signed means a new prefix: old signatures then never verify. */
#define SIGNED_PREFIX "cmr-command-envelope-v1"

struct cmr_signer {
    uint8_t sk[crypto_sign_SECRETKEYBYTES]; /* wiped on free */
    char key_id[CMR_TRUST_KEY_ID_CHARS + 1];
};

static void put_field(cmr_buf_t *b, const void *p, size_t n)
{
    cmr_buf_put_be32(b, (uint32_t)n);
    cmr_buf_put(b, p, n);
}

void trust_signed_bytes(const cmr_envelope_t *env, const void *payload, size_t payload_len, cmr_buf_t *out)
{
    uint8_t digest[CMR_TRUST_DIGEST_BYTES], num[8];
    cmr_buf_reset(out);
    put_field(out, SIGNED_PREFIX, sizeof SIGNED_PREFIX);
    put_field(out, env->target_instance, strlen(env->target_instance));
    put_field(out, env->command_id, sizeof env->command_id);
    cmr_put_be64(num, (uint64_t)env->issued_ms);
    put_field(out, num, sizeof num);
    cmr_put_be64(num, (uint64_t)env->not_after_ms);
    put_field(out, num, sizeof num);
    put_field(out, env->key_id, strlen(env->key_id));
    cmr_trust_digest(payload, payload_len, digest);
    put_field(out, digest, sizeof digest);
}

cmr_signer_t *cmr_signer_load(const char *path, char *errbuf, size_t errlen)
{
    if (cmr_trust_init() != 0) {
        snprintf(errbuf, errlen, "libsodium cannot be initialised");
        return NULL;
    }
    cmr_buf_t text = {0};
    if (trust_read_key_file(path, true, &text, errbuf, errlen) != 0)
        return NULL;
    cmr_signer_t *s = calloc(1, sizeof *s);
    int ok = s && trust_parse_key_text((const char *)text.data, text.len, TRUST_SECRET_LABEL, false, s->sk,
                                       sizeof s->sk) == 0;
    sodium_memzero(text.data, text.len);
    cmr_buf_free(&text);
    if (!ok) {
        snprintf(errbuf, errlen, "%s: not a cmr secret key file (make one with `cmr-config keygen`)", path);
        cmr_signer_free(s);
        return NULL;
    }
    trust_key_id(s->sk + crypto_sign_SEEDBYTES, s->key_id); /* the public key ends the secret key */
    return s;
}

void cmr_signer_free(cmr_signer_t *s)
{
    if (!s)
        return;
    sodium_memzero(s, sizeof *s);
    free(s);
}

const char *cmr_signer_key_id(const cmr_signer_t *s)
{
    return s->key_id;
}

void trust_signer_public(const cmr_signer_t *s, uint8_t pk[CMR_TRUST_PUBLIC_KEY_BYTES])
{
    memcpy(pk, s->sk + crypto_sign_SEEDBYTES, CMR_TRUST_PUBLIC_KEY_BYTES);
}

void cmr_signer_derive_key(const cmr_signer_t *s, const char *context, uint8_t out[32])
{
    /* BLAKE2b keyed with the Ed25519 seed (the first half of libsodium's secret key). */
    crypto_generichash(out, 32, (const unsigned char *)context, strlen(context), s->sk, crypto_sign_SEEDBYTES);
}

void cmr_signer_sign(const cmr_signer_t *s, const char *target_instance, int64_t lifetime_ms, const void *payload,
                     size_t payload_len, cmr_envelope_t *env)
{
    memset(env, 0, sizeof *env);
    env->target_instance = target_instance;
    randombytes_buf(env->command_id, sizeof env->command_id);
    env->issued_ms = cmr_wall_ms();
    env->not_after_ms = env->issued_ms + lifetime_ms;
    memcpy(env->key_id, s->key_id, sizeof env->key_id);
    cmr_buf_t msg = {0};
    trust_signed_bytes(env, payload, payload_len, &msg);
    crypto_sign_detached(env->signature, NULL, msg.data, msg.len, s->sk);
    cmr_buf_free(&msg);
}

int trust_sign_detached(const cmr_signer_t *s, const void *msg, size_t len, uint8_t sig[CMR_TRUST_SIGNATURE_BYTES])
{
    return crypto_sign_detached(sig, NULL, msg, len, s->sk);
}

/*
 * verify.c - verifying command envelopes (the agent): pinned keys, target, lifetime,
 * signature and replay window. See cmr/trust.h.
 *
 * The checks run cheapest first, and the signature before anything that changes state:
 * an envelope that does not verify is never remembered, so an attacker cannot fill the
 * replay window. Accepted command ids are kept until their not-after time (plus the clock
 * tolerance) has passed; the window holds at most max_remembered ids and refuses, rather
 * than forgets, beyond that.
 */
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/map.h"
#include "cmr/trust.h"
#include "trust_internal.h"

typedef struct pinned_key {
    uint8_t pk[CMR_TRUST_PUBLIC_KEY_BYTES];
    char key_id[CMR_TRUST_KEY_ID_CHARS + 1];
} pinned_key_t;

struct cmr_verifier {
    char *instance_id; /* owned */
    cmr_verifier_limits_t limits;
    pinned_key_t keys[CMR_TRUST_MAX_KEYS];
    size_t nkeys;
    cmr_map_t seen; /* command id (16 bytes) -> forget-after time in ms, as an intptr_t */
    uint64_t counts[CMR_TRUST_VERDICT__COUNT];
    cmr_buf_t scratch; /* the signed bytes of the envelope being checked */
};

static const char *const verdict_names[CMR_TRUST_VERDICT__COUNT] = {
    [CMR_TRUST_OK] = "ok",
    [CMR_TRUST_UNSIGNED] = "unsigned",
    [CMR_TRUST_UNKNOWN_KEY] = "unknown_key",
    [CMR_TRUST_BAD_SIGNATURE] = "bad_signature",
    [CMR_TRUST_WRONG_TARGET] = "wrong_target",
    [CMR_TRUST_EXPIRED] = "expired",
    [CMR_TRUST_NOT_YET_VALID] = "not_yet_valid",
    [CMR_TRUST_LIFETIME] = "lifetime_too_long",
    [CMR_TRUST_REPLAYED] = "replayed",
    [CMR_TRUST_OVERLOADED] = "replay_window_full",
    [CMR_TRUST_MALFORMED] = "malformed",
};

const char *cmr_trust_verdict_name(cmr_trust_verdict_t v)
{
    return (unsigned)v < CMR_TRUST_VERDICT__COUNT ? verdict_names[v] : "unknown";
}

cmr_verifier_t *cmr_verifier_new(const char *instance_id, const cmr_verifier_limits_t *limits)
{
    if (cmr_trust_init() != 0)
        return NULL;
    cmr_verifier_t *v = calloc(1, sizeof *v);
    if (!v || !(v->instance_id = strdup(instance_id))) {
        free(v);
        return NULL;
    }
    v->limits = (cmr_verifier_limits_t){.max_skew_ms = 60000, .max_lifetime_ms = 3600000, .max_remembered = 200000};
    if (limits) {
        if (limits->max_skew_ms > 0)
            v->limits.max_skew_ms = limits->max_skew_ms;
        if (limits->max_lifetime_ms > 0)
            v->limits.max_lifetime_ms = limits->max_lifetime_ms;
        if (limits->max_remembered > 0)
            v->limits.max_remembered = limits->max_remembered;
    }
    return v;
}

void cmr_verifier_free(cmr_verifier_t *v)
{
    if (!v)
        return;
    cmr_map_free(&v->seen);
    cmr_buf_free(&v->scratch);
    free(v->instance_id);
    free(v);
}

static int add_key(cmr_verifier_t *v, const uint8_t pk[CMR_TRUST_PUBLIC_KEY_BYTES], char *errbuf, size_t errlen)
{
    pinned_key_t k;
    memcpy(k.pk, pk, sizeof k.pk);
    trust_key_id(k.pk, k.key_id);
    for (size_t i = 0; i < v->nkeys; i++)
        if (!strcmp(v->keys[i].key_id, k.key_id))
            return 0; /* pinned already */
    if (v->nkeys == CMR_TRUST_MAX_KEYS) {
        snprintf(errbuf, errlen, "at most %d public keys can be pinned at once", CMR_TRUST_MAX_KEYS);
        return -1;
    }
    v->keys[v->nkeys++] = k;
    return 0;
}

int cmr_verifier_add_key_text(cmr_verifier_t *v, const char *text, char *errbuf, size_t errlen)
{
    uint8_t pk[CMR_TRUST_PUBLIC_KEY_BYTES];
    if (trust_parse_key_text(text, strlen(text), TRUST_PUBLIC_LABEL, true, pk, sizeof pk) != 0) {
        snprintf(errbuf, errlen, "not a cmr public key (expected \"%s <base64 of 32 bytes>\")", TRUST_PUBLIC_LABEL);
        return -1;
    }
    return add_key(v, pk, errbuf, errlen);
}

int cmr_verifier_add_key_file(cmr_verifier_t *v, const char *path, char *errbuf, size_t errlen)
{
    cmr_buf_t text = {0};
    if (trust_read_key_file(path, false, &text, errbuf, errlen) != 0)
        return -1;
    uint8_t pk[CMR_TRUST_PUBLIC_KEY_BYTES];
    int rc = trust_parse_key_text((const char *)text.data, text.len, TRUST_PUBLIC_LABEL, false, pk, sizeof pk);
    cmr_buf_free(&text);
    if (rc != 0) {
        snprintf(errbuf, errlen, "%s: not a cmr public key file (make one with `cmr-config keygen`)", path);
        return -1;
    }
    return add_key(v, pk, errbuf, errlen);
}

int cmr_verifier_add_signer(cmr_verifier_t *v, const cmr_signer_t *s, char *errbuf, size_t errlen)
{
    uint8_t pk[CMR_TRUST_PUBLIC_KEY_BYTES];
    trust_signer_public(s, pk);
    return add_key(v, pk, errbuf, errlen);
}

size_t cmr_verifier_key_count(const cmr_verifier_t *v)
{
    return v->nkeys;
}

void cmr_verifier_counts(const cmr_verifier_t *v, uint64_t out[CMR_TRUST_VERDICT__COUNT])
{
    memcpy(out, v->counts, sizeof v->counts);
}

void cmr_verifier_recount(cmr_verifier_t *v, cmr_trust_verdict_t from, cmr_trust_verdict_t to)
{
    if ((unsigned)from < CMR_TRUST_VERDICT__COUNT && (unsigned)to < CMR_TRUST_VERDICT__COUNT && v->counts[from]) {
        v->counts[from]--;
        v->counts[to]++;
    }
}

/* Forgets the ids whose forget-after time has passed. */
static void prune_seen(cmr_verifier_t *v, int64_t now_ms)
{
    size_t it = 0, n = 0, klen;
    const void *key;
    void *val;
    uint8_t(*expired)[CMR_TRUST_COMMAND_ID_BYTES] = malloc(cmr_map_count(&v->seen) * sizeof *expired + 1);
    if (!expired)
        return;
    while (cmr_map_next(&v->seen, &it, &key, &klen, &val))
        if ((intptr_t)val < now_ms)
            memcpy(expired[n++], key, CMR_TRUST_COMMAND_ID_BYTES);
    for (size_t i = 0; i < n; i++)
        cmr_map_del(&v->seen, expired[i], CMR_TRUST_COMMAND_ID_BYTES, NULL);
    free(expired);
}

static const pinned_key_t *find_key(const cmr_verifier_t *v, const char *key_id)
{
    for (size_t i = 0; i < v->nkeys; i++)
        if (!strcmp(v->keys[i].key_id, key_id))
            return &v->keys[i];
    return NULL;
}

const uint8_t *trust_verifier_pinned(const cmr_verifier_t *v, const char *key_id)
{
    const pinned_key_t *k = v ? find_key(v, key_id) : NULL;
    return k ? k->pk : NULL;
}

static cmr_trust_verdict_t check(cmr_verifier_t *v, const cmr_envelope_t *env, const void *payload, size_t payload_len,
                                 int64_t now_ms)
{
    static const uint8_t no_signature[CMR_TRUST_SIGNATURE_BYTES];
    if (!env->key_id[0] || !memcmp(env->signature, no_signature, sizeof no_signature))
        return CMR_TRUST_UNSIGNED;
    if (!env->target_instance || strcmp(env->target_instance, v->instance_id) != 0)
        return CMR_TRUST_WRONG_TARGET;
    const pinned_key_t *k = find_key(v, env->key_id);
    if (!k)
        return CMR_TRUST_UNKNOWN_KEY;
    trust_signed_bytes(env, payload, payload_len, &v->scratch);
    if (!cmr_buf_ok(&v->scratch) ||
        crypto_sign_verify_detached(env->signature, v->scratch.data, v->scratch.len, k->pk) != 0)
        return CMR_TRUST_BAD_SIGNATURE;
    /* Authentic from here on: the times are the CMR's own. */
    if (env->not_after_ms < env->issued_ms || env->not_after_ms - env->issued_ms > v->limits.max_lifetime_ms)
        return CMR_TRUST_LIFETIME;
    if (env->issued_ms > now_ms + v->limits.max_skew_ms)
        return CMR_TRUST_NOT_YET_VALID;
    if (now_ms > env->not_after_ms + v->limits.max_skew_ms)
        return CMR_TRUST_EXPIRED;
    if (cmr_map_has(&v->seen, env->command_id, sizeof env->command_id))
        return CMR_TRUST_REPLAYED;
    if (cmr_map_count(&v->seen) >= v->limits.max_remembered) {
        prune_seen(v, now_ms);
        if (cmr_map_count(&v->seen) >= v->limits.max_remembered)
            return CMR_TRUST_OVERLOADED;
    }
    intptr_t forget_after = (intptr_t)(env->not_after_ms + v->limits.max_skew_ms);
    if (cmr_map_put(&v->seen, env->command_id, sizeof env->command_id, (void *)forget_after) != 0)
        return CMR_TRUST_OVERLOADED;
    return CMR_TRUST_OK;
}

cmr_trust_verdict_t cmr_verifier_check(cmr_verifier_t *v, const cmr_envelope_t *env, const void *payload,
                                       size_t payload_len, int64_t now_ms)
{
    cmr_trust_verdict_t r = check(v, env, payload, payload_len, now_ms);
    v->counts[r]++;
    if (r == CMR_TRUST_OK && v->counts[r] % 4096 == 0)
        prune_seen(v, now_ms); /* keep the window to the live ids */
    return r;
}

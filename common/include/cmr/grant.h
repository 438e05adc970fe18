/*
 * grant.h - class grants: the CMR's signed permission for the JVMs of one environment to
 * run given instrumented bytes in place of given original class bytes, for days. What
 * lets a restarted JVM take its instrumented classes from a local cache at load time
 * (agent/src/grant_store.h) instead of waiting for a Redefine (docs/SECURITY.md, "Class
 * grants").
 *
 * A command envelope (trust.h) is for one agent instance and lives minutes; a grant
 * outlives the JVM it was sent to, so it names no instance. It binds, under one Ed25519
 * signature of a key the agent pins, with every field length-prefixed after a
 * domain-separation prefix of its own (no envelope signature is ever a grant's):
 *   - the environment id and its revision the instrumentation decision was made for,
 *   - the class name (internal form),
 *   - the BLAKE2b-256 digest of the original class bytes it was made from,
 *   - the BLAKE2b-256 digest of the instrumented bytes,
 *   - the signing key's id, the time it was issued and the time after which it is void.
 *
 * The encoded grant is a flat byte string (it travels as Redefine.grant and is the head
 * of a cache file): eight fields, each a big-endian 32-bit length and the bytes, in the
 * order above, then the signature as a ninth. Decoding is strict: exact lengths for the
 * fixed fields, bounded strings, nothing after the signature.
 *
 * Ownership: nothing here keeps pointers to the caller's memory. cmr_grant_verify only
 * reads the verifier's pinned keys, so it may run on any thread once the keys are pinned
 * (the agent's load hook runs it on application threads).
 */
#ifndef CMR_GRANT_H
#define CMR_GRANT_H

#include <stddef.h>
#include <stdint.h>

#include "cmr/buf.h"
#include "cmr/trust.h"

#define CMR_GRANT_ENV_MAX 127    /* longest environment id */
#define CMR_GRANT_NAME_MAX 1023  /* longest class name */
#define CMR_GRANT_MAX_BYTES 1400 /* longest encoded grant */
/* Longest validity an agent accepts, and the instrumenter's default (trust.grant.lifetime.ms). */
#define CMR_GRANT_MAX_LIFETIME_MS (INT64_C(30) * 86400000)
#define CMR_GRANT_DEFAULT_LIFETIME_MS (INT64_C(7) * 86400000)
#define CMR_GRANT_CLOCK_SKEW_MS 60000

typedef struct cmr_grant {
    char environment_id[CMR_GRANT_ENV_MAX + 1];
    int64_t revision;
    char class_name[CMR_GRANT_NAME_MAX + 1];
    uint8_t original_digest[CMR_TRUST_DIGEST_BYTES];
    uint8_t instrumented_digest[CMR_TRUST_DIGEST_BYTES];
    char key_id[CMR_TRUST_KEY_ID_CHARS + 1];
    int64_t issued_ms;
    int64_t not_after_ms;
    uint8_t signature[CMR_TRUST_SIGNATURE_BYTES];
} cmr_grant_t;

typedef enum cmr_grant_verdict {
    CMR_GRANT_OK = 0,
    CMR_GRANT_MALFORMED,         /* does not decode (truncated, bad lengths, trailing bytes) */
    CMR_GRANT_UNKNOWN_KEY,       /* signed by a key that is not pinned */
    CMR_GRANT_BAD_SIGNATURE,     /* the signature does not match */
    CMR_GRANT_EXPIRED,           /* past its not-after time (plus the tolerance) */
    CMR_GRANT_NOT_YET_VALID,     /* issued in the future (beyond the tolerance) */
    CMR_GRANT_LIFETIME,          /* valid for longer than CMR_GRANT_MAX_LIFETIME_MS */
    CMR_GRANT_WRONG_ENVIRONMENT, /* for another environment than the agent's */
    CMR_GRANT_WRONG_CLASS,       /* for other original bytes or another class name */
    CMR_GRANT_BYTES_MISMATCH,    /* the instrumented bytes do not have the granted digest */
    CMR_GRANT_VERDICT__COUNT
} cmr_grant_verdict_t;

/* "ok", "malformed", "unknown_key", ... (stable names for logs and counters). */
const char *cmr_grant_verdict_name(cmr_grant_verdict_t v);

/* Signs a grant for `bytes` (the instrumented class) made from the original bytes with
 * digest original_digest, valid from now for lifetime_ms, and writes it encoded into out
 * (replacing its content). 0, or -1 with errbuf filled (ids too long, bad lifetime). */
int cmr_grant_sign(const cmr_signer_t *s, const char *environment_id, int64_t revision, const char *class_name,
                   const uint8_t original_digest[CMR_TRUST_DIGEST_BYTES], const uint8_t *bytes, size_t len,
                   int64_t lifetime_ms, cmr_buf_t *out, char *errbuf, size_t errlen);

/* Decodes an encoded grant (no signature check). CMR_GRANT_OK or CMR_GRANT_MALFORMED. */
cmr_grant_verdict_t cmr_grant_decode(const void *blob, size_t len, cmr_grant_t *out);

/* What a grant must match to be used. */
typedef struct cmr_grant_expect {
    const char *environment_id;     /* the agent's environment */
    const char *class_name;         /* NULL: not checked */
    const uint8_t *original_digest; /* of the bytes the JVM is loading (32 bytes) */
    const uint8_t *bytes;           /* the instrumented bytes to run */
    size_t len;
} cmr_grant_expect_t;

/* Decodes and verifies an encoded grant at wall time now_ms: a pinned key, the signature,
 * the validity, then what `want` names. *out (may be NULL) holds the decoded grant when it
 * decoded. Cheapest checks first; the signature before anything the signature covers. */
cmr_grant_verdict_t cmr_grant_verify(const cmr_verifier_t *v, const void *blob, size_t len,
                                     const cmr_grant_expect_t *want, int64_t now_ms, cmr_grant_t *out);

#endif

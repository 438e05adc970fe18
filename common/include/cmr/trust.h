/*
 * trust.h - signed commands: what lets a monitored JVM run only code that the CMR signed
 * for exactly that JVM.
 *
 * Anyone who can write to a command topic (cmr.cmd.<instance>) could otherwise make an
 * agent redefine classes with arbitrary bytes. So every command travels in an envelope
 * that the CMR's workers sign with Ed25519 (libsodium) and that the agent verifies
 * against public keys pinned in its own options before it even decodes the command.
 *
 * The envelope binds, under one signature:
 *   - the target agent instance (a command for one JVM is refused by every other one),
 *   - a random 128-bit command id (the agent remembers ids until they expire: replays
 *     are refused),
 *   - the time it was issued and the time after which it is void (bounded lifetime,
 *     with a tolerance for clocks that disagree),
 *   - the id of the signing key (two keys may be pinned at once, for rotation),
 *   - the BLAKE2b-256 digest of the payload (the encoded command).
 * The bytes that are signed are built here, field by field with lengths, under a
 * domain-separation prefix, so that no two different envelopes sign the same bytes.
 *
 * Keys are text files: "cmr-ed25519-secret <base64>" (mode 0600, refused when others
 * may read it) and "cmr-ed25519-public <base64>". They are read as regular files of at
 * most 4 KiB, and their contents never appear in an error message.
 *
 * Digests for binding code to a class (cmr_trust_digest) are BLAKE2b-256: XXH3, which
 * the class cache uses to find classes, is not collision resistant.
 *
 * Ownership: signers and verifiers are created and freed by their user; nothing here
 * keeps pointers to the caller's memory after a call returns. A verifier is not
 * thread-safe (the agent checks commands on its one command thread).
 */
#ifndef CMR_TRUST_H
#define CMR_TRUST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CMR_TRUST_DIGEST_BYTES 32
#define CMR_TRUST_SIGNATURE_BYTES 64
#define CMR_TRUST_PUBLIC_KEY_BYTES 32
#define CMR_TRUST_COMMAND_ID_BYTES 16
#define CMR_TRUST_KEY_ID_CHARS 16 /* hex of the first 8 bytes of the public key's digest */
#define CMR_TRUST_MAX_KEYS 2      /* pinned at once: the current key and the next one */

/* Initialises libsodium (idempotent, thread-safe). 0, or -1 when it cannot run here. */
int cmr_trust_init(void);

/* BLAKE2b-256 of n bytes. */
void cmr_trust_digest(const void *p, size_t n, uint8_t out[CMR_TRUST_DIGEST_BYTES]);

/* The signed part of a command envelope (the payload is given separately). */
typedef struct cmr_envelope {
    const char *target_instance; /* the agent instance id the command is for */
    uint8_t command_id[CMR_TRUST_COMMAND_ID_BYTES];
    int64_t issued_ms;    /* wall clock, ms since the epoch */
    int64_t not_after_ms; /* void after this */
    char key_id[CMR_TRUST_KEY_ID_CHARS + 1];
    uint8_t signature[CMR_TRUST_SIGNATURE_BYTES];
} cmr_envelope_t;

/* --- keys ----------------------------------------------------------------------------- */

/* Writes a new key pair: DIR/NAME.key (secret, mode 0600) and DIR/NAME.pub. Refuses to
 * overwrite existing files. 0, or -1 with errbuf filled. */
int cmr_trust_keygen(const char *dir, const char *name, char *errbuf, size_t errlen);

/* --- signing (the CMR's workers) ------------------------------------------------------ */

typedef struct cmr_signer cmr_signer_t;

/* Loads a secret key file. NULL with errbuf filled (never with the file's contents). */
cmr_signer_t *cmr_signer_load(const char *path, char *errbuf, size_t errlen);
/* Secret-key memory is wiped before it is freed. NULL is fine. */
void cmr_signer_free(cmr_signer_t *s);
const char *cmr_signer_key_id(const cmr_signer_t *s);

/* A 32-byte secret derived from the signing key for `context` (e.g. "trace-context:" + an
 * environment id): the same on every worker that holds the key, different per context,
 * and telling nothing about the signing key. */
void cmr_signer_derive_key(const cmr_signer_t *s, const char *context, uint8_t out[32]);

/* The context of the trace-context MAC key: one key for the whole fleet that a signing key
 * serves, since calls cross environments (docs/SECURITY.md, "Trace context"). */
#define CMR_TRACE_CONTEXT_KEY_CONTEXT "cmr-trace-context-v1"

/* Fills env (a fresh random command id, issued now, void after lifetime_ms, this key's
 * id) and signs it together with the payload's digest. target_instance must stay valid
 * while env is used. */
void cmr_signer_sign(const cmr_signer_t *s, const char *target_instance, int64_t lifetime_ms, const void *payload,
                     size_t payload_len, cmr_envelope_t *env);

/* --- verifying (the agent) ------------------------------------------------------------ */

typedef enum cmr_trust_verdict {
    CMR_TRUST_OK = 0,
    CMR_TRUST_UNSIGNED,      /* no signature or no key id */
    CMR_TRUST_UNKNOWN_KEY,   /* signed by a key that is not pinned */
    CMR_TRUST_BAD_SIGNATURE, /* the signature does not match the envelope and payload */
    CMR_TRUST_WRONG_TARGET,  /* for another agent instance */
    CMR_TRUST_EXPIRED,       /* past its not-after time (plus the tolerance) */
    CMR_TRUST_NOT_YET_VALID, /* issued in the future (beyond the tolerance) */
    CMR_TRUST_LIFETIME,      /* valid for longer than the verifier accepts */
    CMR_TRUST_REPLAYED,      /* this command id was accepted before */
    CMR_TRUST_OVERLOADED,    /* too many live command ids remembered: refused, not forgotten */
    CMR_TRUST_MALFORMED,     /* authentic, but the payload is not a command that decodes */
    CMR_TRUST_VERDICT__COUNT
} cmr_trust_verdict_t;

/* "ok", "unsigned", "unknown_key", ... (stable names for logs and counters). */
const char *cmr_trust_verdict_name(cmr_trust_verdict_t v);

typedef struct cmr_verifier cmr_verifier_t;

typedef struct cmr_verifier_limits {
    int64_t max_skew_ms;     /* tolerated clock difference with the CMR (default 60 s) */
    int64_t max_lifetime_ms; /* longest validity accepted (default 1 h) */
    size_t max_remembered;   /* live command ids kept for replay checks (default 200,000) */
} cmr_verifier_limits_t;

/* A verifier for one agent instance; limits may be NULL for the defaults. */
cmr_verifier_t *cmr_verifier_new(const char *instance_id, const cmr_verifier_limits_t *limits);
void cmr_verifier_free(cmr_verifier_t *v);
/* Pins a public key from a key file or from its text ("cmr-ed25519-public <base64>" or
 * the bare base64). At most CMR_TRUST_MAX_KEYS. 0, or -1 with errbuf filled. */
int cmr_verifier_add_key_file(cmr_verifier_t *v, const char *path, char *errbuf, size_t errlen);
int cmr_verifier_add_key_text(cmr_verifier_t *v, const char *text, char *errbuf, size_t errlen);
/* Pins the public key of a signing key: for a worker that checks what it signed itself
 * when it reads it back (cmr-instrumenter renewing its class grants). */
int cmr_verifier_add_signer(cmr_verifier_t *v, const cmr_signer_t *s, char *errbuf, size_t errlen);
size_t cmr_verifier_key_count(const cmr_verifier_t *v);

/* Checks one envelope and its payload at wall time now_ms. On CMR_TRUST_OK the command id
 * is remembered until it expires, so the same command is refused the next time. */
cmr_trust_verdict_t cmr_verifier_check(cmr_verifier_t *v, const cmr_envelope_t *env, const void *payload,
                                       size_t payload_len, int64_t now_ms);

/* Moves one count from verdict `from` to `to`: for a caller that finds an accepted
 * envelope's payload unusable (CMR_TRUST_OK -> CMR_TRUST_MALFORMED). */
void cmr_verifier_recount(cmr_verifier_t *v, cmr_trust_verdict_t from, cmr_trust_verdict_t to);

/* Counts of every verdict so far (index: cmr_trust_verdict_t). */
void cmr_verifier_counts(const cmr_verifier_t *v, uint64_t out[CMR_TRUST_VERDICT__COUNT]);

#endif

/*
 * grant_preload.h - classes granted ahead of their load: the instrumented classes of the
 * agent's environment that cmr-instrumenter sends (ClassGrants) when it first hears from
 * this JVM, kept in memory so that the load hook hands each one to the JVM as it loads,
 * with no RedefineClasses and no safepoint (docs/AGENT.md, "Classes granted ahead"). Pure
 * C, no JVM calls; unit tested (agent/tests/test_grant_preload.c).
 *
 * What the disk cache of grants (grant_store.h) does for a restarted JVM, this does for
 * the first JVM of a host: the grants are the same (cmr/grant.h: environment, class name,
 * original digest, instrumented digest, validity, under a pinned key), and each is
 * verified completely when it arrives, before it is kept; a lookup then only matches the
 * digest of the bytes being loaded, the class name, the environment the agent runs in and
 * the grant's validity, under a mutex held for a map lookup and a copy.
 *
 * Bounds: at most max_bytes of instrumented bytes (classes beyond are not kept, counted);
 * a class granted again (same original digest) replaces the one held. Classes no load has
 * used can be dropped (cmr_grant_preload_trim, some minutes after they came); those used
 * stay, as a RetransformClasses of such a class must get the same bytes again.
 *
 * Threads: adds and clears on the control thread, lookups on application threads (the
 * load hook); one mutex.
 *
 * Ownership: the set owns copies of everything it keeps; a lookup's bytes are the caller's
 * (free()). The verifier is not owned and must outlive the set.
 */
#ifndef CMR_AGENT_GRANT_PRELOAD_H
#define CMR_AGENT_GRANT_PRELOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cmr/grant.h"
#include "cmr/trust.h"

typedef struct cmr_grant_preload cmr_grant_preload_t;

typedef struct cmr_grant_preload_stats {
    uint64_t received; /* classes offered (every ClassGrants entry) */
    uint64_t kept;     /* verified and kept (replacements included) */
    uint64_t refused;  /* their grant did not verify (sum of refusals[]) */
    uint64_t refusals[CMR_GRANT_VERDICT__COUNT];
    uint64_t over_budget; /* verified, not kept: max_bytes reached */
    uint64_t hits;        /* lookups that handed bytes out */
    uint64_t expired;     /* lookups that found a grant past its validity (dropped) */
    uint64_t trimmed;     /* classes dropped unused (cmr_grant_preload_trim) */
    size_t classes;       /* held now */
    size_t bytes;         /* instrumented bytes held now */
} cmr_grant_preload_stats_t;

/* A set that keeps at most max_bytes of instrumented bytes (0: keeps nothing). The
 * verifier's keys must be pinned already. NULL when out of memory. */
cmr_grant_preload_t *cmr_grant_preload_new(const cmr_verifier_t *v, size_t max_bytes);
void cmr_grant_preload_free(cmr_grant_preload_t *p);

typedef enum cmr_grant_preload_add {
    CMR_GRANT_PRELOAD_KEPT = 0,
    CMR_GRANT_PRELOAD_REFUSED,     /* the grant does not verify: *why says why */
    CMR_GRANT_PRELOAD_OVER_BUDGET, /* verified, but max_bytes would be exceeded */
} cmr_grant_preload_add_t;

/* The environment the agent is configured with (NULL or "": none; nothing is kept or
 * handed out). Another environment than before drops every class held. */
void cmr_grant_preload_expect(cmr_grant_preload_t *p, const char *environment_id);

/* Verifies one granted class at wall time now_ms, and keeps a copy of it: the grant must
 * name the expected environment, this class and the original digest (digest_len bytes as
 * received; anything but a BLAKE2b-256 digest is MALFORMED), and the instrumented bytes
 * must have the granted digest. Every call counts as received. */
cmr_grant_preload_add_t cmr_grant_preload_add(cmr_grant_preload_t *p, const char *class_name,
                                              const uint8_t *original_digest, size_t digest_len, const void *grant,
                                              size_t grant_len, const uint8_t *bytes, size_t len, int64_t now_ms,
                                              cmr_grant_verdict_t *why);

/* The instrumented bytes granted for class `name` loading with original digest `digest`,
 * at wall time now_ms. true: *bytes (malloc'd, the caller
 * frees), *len, applied (the digest of those bytes) and *revision are set. false: none
 * (also when the grant has expired: it is dropped). */
bool cmr_grant_preload_lookup(cmr_grant_preload_t *p, const char *name, const uint8_t digest[CMR_TRUST_DIGEST_BYTES],
                              int64_t now_ms, uint8_t **bytes, size_t *len, uint8_t applied[CMR_TRUST_DIGEST_BYTES],
                              int64_t *revision);


/* Drops the classes no lookup has handed out yet; returns how many. */
size_t cmr_grant_preload_trim(cmr_grant_preload_t *p);

/* Copies of the grant and the instrumented bytes held for original digest `digest`
 * (malloc'd, the caller frees both): for the cache of grants on disk, once such a class
 * has loaded. false when none is held. */
bool cmr_grant_preload_copy(cmr_grant_preload_t *p, const uint8_t digest[CMR_TRUST_DIGEST_BYTES], uint8_t **grant,
                            size_t *grant_len, uint8_t **bytes, size_t *len);

void cmr_grant_preload_stats(cmr_grant_preload_t *p, cmr_grant_preload_stats_t *out);

#endif

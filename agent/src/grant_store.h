/*
 * grant_store.h - the agent's on-disk cache of instrumented classes: class grants
 * (cmr/grant.h) with the instrumented bytes they grant, so that a restarted JVM of the
 * same environment gets its instrumented classes from the load hook, with no
 * RedefineClasses (docs/AGENT.md "Cache of instrumented classes", docs/SECURITY.md "Class
 * grants"). Pure C, no JVM calls; unit tested (agent/tests/test_grant_store.c).
 *
 * Layout of the directory (agent.cache.dir, mode 0700, owned by the JVM's user; a
 * directory that others may write or that belongs to someone else is refused):
 *   g-<32 hex>.ccg   one class of one environment: the file name is the first 16 bytes
 *                    of BLAKE2b-256(environment id, NUL, original class digest); the file
 *                    is "CMRCCG1\n", the encoded grant and the instrumented bytes, each
 *                    after a big-endian 32-bit length, and nothing else
 *   env-<16 hex>     the environment the CMR last configured an agent of that name with
 *                    (the hex names the agent name's digest): the environment a
 *                    restarted agent expects until the CMR confirms it
 * Files are written to a temporary name (O_EXCL, 0600) and renamed into place, so a
 * reader sees a whole file or none. Other names in the directory are ignored.
 *
 * The index (which grant files exist, their sizes and times) is read once, when the
 * store is opened (Agent_OnLoad, before the application loads a class), and kept in
 * memory; the load hook then reads at most one small file per class it finds there,
 * and verifies it completely before its bytes are used: the grant's signature against
 * the pinned keys, its validity, its environment (the store's), its original digest (the
 * bytes being loaded) and the digest of the instrumented bytes. A file that fails is
 * refused (counted per reason, logged by the caller) and dropped from the index; its
 * bytes are never handed out. The control thread may verify the files ahead
 * (cmr_grant_store_preverify): a load whose file has the content verified then (its
 * BLAKE2b digest) checks the grant's environment, class name, original digest and
 * validity, not its signature.
 *
 * Bounds: at most max_files files and max_bytes bytes (oldest written evicted first, at
 * open and after each write); files larger than CMR_GRANT_STORE_FILE_MAX are refused.
 *
 * Threads: lookups run on application threads (the load hook), writes on the control
 * thread; one mutex guards the index, never held during file I/O.
 *
 * Ownership: the store owns its index and copies of its strings; a lookup's bytes are
 * the caller's (free()).
 */
#ifndef CMR_AGENT_GRANT_STORE_H
#define CMR_AGENT_GRANT_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cmr/grant.h"
#include "cmr/trust.h"

#define CMR_GRANT_STORE_FILE_MAX (8u << 20) /* largest cache file read */

typedef struct cmr_grant_store cmr_grant_store_t;

typedef struct cmr_grant_store_stats {
    uint64_t hits;    /* classes served from the cache */
    uint64_t misses;  /* looked up, no grant for them */
    uint64_t refused; /* grant files refused (sum of refusals[]) */
    uint64_t refusals[CMR_GRANT_VERDICT__COUNT];
    uint64_t written; /* grants written */
    uint64_t write_failures;
    uint64_t evicted;          /* files removed for the bounds */
    uint64_t preverified;      /* files verified ahead of their load (cmr_grant_store_preverify) */
    uint64_t preverified_hits; /* hits served without a signature check: content verified ahead */
    size_t files;              /* in the index now */
    size_t bytes;
} cmr_grant_store_stats_t;

/* Opens (creating it, mode 0700) the cache directory and reads its index. Grants are
 * looked up for `environment_id` (may be NULL or "": lookups miss until
 * cmr_grant_store_expect). The verifier's keys must be pinned already; the verifier must
 * outlive the store. NULL with errbuf filled when the directory cannot be used. */
cmr_grant_store_t *cmr_grant_store_open(const char *dir, const char *environment_id, const cmr_verifier_t *v,
                                        size_t max_bytes, size_t max_files, char *errbuf, size_t errlen);
void cmr_grant_store_close(cmr_grant_store_t *s);

/* The environment lookups are for ("" or NULL: none, every lookup misses). */
void cmr_grant_store_expect(cmr_grant_store_t *s, const char *environment_id);
/* Copies the environment lookups are for into out ("" when none). */
void cmr_grant_store_expected(cmr_grant_store_t *s, char *out, size_t cap);

typedef enum cmr_grant_lookup {
    CMR_GRANT_LOOKUP_MISS = 0,
    CMR_GRANT_LOOKUP_HIT,
    CMR_GRANT_LOOKUP_REFUSED,
} cmr_grant_lookup_t;

/* The instrumented bytes granted for class `name` whose original bytes have digest
 * `original_digest`, at wall time now_ms. HIT: *bytes (malloc'd, the caller frees) and
 * *len are set, and *grant_out (may be NULL) the grant. REFUSED: *why says why (the file
 * is dropped from the index). MISS: nothing for it. */
cmr_grant_lookup_t cmr_grant_store_lookup(cmr_grant_store_t *s, const char *name,
                                          const uint8_t original_digest[CMR_TRUST_DIGEST_BYTES], int64_t now_ms,
                                          uint8_t **bytes, size_t *len, cmr_grant_t *grant_out,
                                          cmr_grant_verdict_t *why);

/* Verifies ahead, off the load hook, up to max_files files of the index not looked at
 * yet, against the expected environment at wall time now_ms, as a lookup would (the
 * Ed25519 check costs tens of microseconds per class): a later lookup whose file still has
 * the same content (its BLAKE2b digest) checks the grant's environment, class name,
 * original digest and validity, not its signature. A
 * file of another environment is left alone, one that no longer exists leaves the index,
 * one that fails is refused and counted as a lookup would (and reported in *out, which
 * may be NULL, with how many files remain to look at). Returns how many were verified.
 * Runs on the control thread, in slices, while lookups go on; costs nothing once every
 * file has been looked at (until the expected environment changes or files are added). */
typedef struct cmr_grant_preverify {
    size_t left;                       /* files still to look at */
    size_t refused;                    /* refused by this call */
    cmr_grant_verdict_t first_refusal; /* the first one's reason and file name */
    char first_refused_file[40];
} cmr_grant_preverify_t;
size_t cmr_grant_store_preverify(cmr_grant_store_t *s, int64_t now_ms, size_t max_files, cmr_grant_preverify_t *out);
/* Whether the cache holds a grant of the expected environment for original digest
 * `original_digest` (its file is in the index; not read, not verified). */
bool cmr_grant_store_has(cmr_grant_store_t *s, const uint8_t original_digest[CMR_TRUST_DIGEST_BYTES]);

/* Verifies an encoded grant for bytes (against its own environment and original digest,
 * which must equal `original_digest`) and writes both to the cache. 0, or -1 with errbuf
 * filled (a refused grant names its verdict). */
int cmr_grant_store_put(cmr_grant_store_t *s, const void *grant, size_t grant_len,
                        const uint8_t original_digest[CMR_TRUST_DIGEST_BYTES], const uint8_t *bytes, size_t len,
                        int64_t now_ms, char *errbuf, size_t errlen);

/* The environment recorded for agent `name` in the directory ("" when none or unreadable),
 * and recording one (0 or -1 with errbuf). */
void cmr_grant_store_recorded_environment(const char *dir, const char *agent_name, char *out, size_t cap);
int cmr_grant_store_record_environment(cmr_grant_store_t *s, const char *agent_name, const char *environment_id,
                                       char *errbuf, size_t errlen);

void cmr_grant_store_stats(cmr_grant_store_t *s, cmr_grant_store_stats_t *out);

/* The file name (without the directory) of the grant of (environment, original digest):
 * "g-<32 hex>.ccg". out holds at least 40 bytes. For tests. */
void cmr_grant_store_file_name(const char *environment_id, const uint8_t original_digest[CMR_TRUST_DIGEST_BYTES],
                               char out[40]);

#endif

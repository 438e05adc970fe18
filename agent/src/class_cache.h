/*
 * class_cache.h - the agent's memory of classes (pure C, no JVM calls; unit tested).
 *
 * Three structures behind one mutex, all bounded:
 *
 *   never-send set   hashes of class bytes the CMR already has and that need nothing
 *                    (seed: "the list of hashes NEVER to be sent"). A class whose hash is
 *                    here costs one hash and one lookup in the load hook.
 *   pending queue    classes to ship to the CMR: name, loader, hash, cause, and the bytes
 *                    while the byte budget allows. Past the budget only the name is kept
 *                    ("remember the classes loaded"); its bytes are fetched again from the
 *                    JVM later. Entries sent but not yet acknowledged stay owned here
 *                    (in flight) and go back to the queue if delivery fails.
  *   registry         (class name, loader id) -> original hash, BLAKE2b-256 digests of
 *                    the bytes the JVM handed the agent for the class (cmr_trust_digest:
 *                    a signed Redefine must name one of them to be applied,
 *                    docs/SECURITY.md) and an opaque handle (the agent stores a JNI weak
 *                    reference), for Redefine and resend commands.
 *
 * Digests are computed by the callers, outside the mutex (the load hook must not hold it
 * for a hash over the class bytes). A class has at most two: its original bytes' (at
 * load, or at the first capture of a class loaded before the agent), and those of the
 * bytes the JVM handed out at the latest capture (a resend, or bytes dropped for the
 * budget and fetched again), which HotSpot rebuilds from the loaded class and so may
 * differ from the original bytes. Both come from the JVM, never from a message.
 */
#ifndef CMR_AGENT_CLASS_CACHE_H
#define CMR_AGENT_CLASS_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cmr/msg.h"
#include "cmr/trust.h"

typedef struct cmr_class_cache cmr_class_cache_t;

/* The digests a Redefine of a class may name (n = 0: none computed yet). */
typedef struct cmr_class_digests {
    int n;
    uint8_t d[2][CMR_TRUST_DIGEST_BYTES]; /* [0]: original bytes; [1]: latest capture */
} cmr_class_digests_t;


/* One class waiting to be shipped, or in flight. Owned by the cache. */
typedef struct cmr_class_entry {
    char *name;
    int64_t loader_id;
    uint64_t hash;
    cmr_class_cause_t cause;
    int64_t request_id; /* RESEND: the request answered */
    uint8_t *bytes;     /* NULL: bytes dropped (budget) or not yet captured */
    size_t len;
    struct cmr_class_entry *next;
} cmr_class_entry_t;

typedef struct cmr_class_cache_stats {
    uint64_t seen;          /* classes offered to the cache */
    uint64_t skipped;       /* hash in the never-send set */
    uint64_t queued;        /* entries added to the pending queue */
    uint64_t bytes_dropped; /* entries that lost their bytes to the budget */
    uint64_t sent;          /* entries acknowledged by the cluster */
    uint64_t requeued;      /* entries whose delivery failed and that wait again */
    size_t pending;         /* entries waiting now */
    size_t in_flight;
    size_t buffered_bytes; /* bytecode held now */
} cmr_class_cache_stats_t;

cmr_class_cache_t *cmr_class_cache_new(size_t byte_budget);
void cmr_class_cache_free(cmr_class_cache_t *cache, void (*release_handle)(void *handle, void *opaque), void *opaque);

/* --- never-send set -------------------------------------------------------------------- */
bool cmr_class_cache_never_send(cmr_class_cache_t *cache, uint64_t hash);
void cmr_class_cache_mark_never_send(cmr_class_cache_t *cache, uint64_t hash);
void cmr_class_cache_unmark_never_send(cmr_class_cache_t *cache, uint64_t hash);

/* --- load path (called from the ClassFileLoadHook) --------------------------------------- */
/* Records a loaded class: updates the registry (name, loader) -> hash and digest (NULL:
 * not computed), and unless the
 * hash is in the never-send set queues it with a copy of its bytes (within the budget)
 * and marks the hash never-send, so that the same bytes are not queued twice. Returns
 * true when the class was queued. Never blocks on anything but the cache's mutex. */
bool cmr_class_cache_offer(cmr_class_cache_t *cache, const char *name, int64_t loader_id, uint64_t hash,
                           const uint8_t digest[CMR_TRUST_DIGEST_BYTES], const uint8_t *bytes, size_t len,
                           cmr_class_cause_t cause, int64_t loaded_ns);
/* Queues a class known by name only (classes loaded before a dynamic attach): its bytes
 * and hash come later through a capture. Does not touch the never-send set. */
void cmr_class_cache_offer_unread(cmr_class_cache_t *cache, const char *name, int64_t loader_id,
                                  cmr_class_cause_t cause);
/* Queues a class whose bytes the JVM just gave for a resend request (always queued). The
 * registry adds `digest` to the class's digests (as its original one if it has none). */
void cmr_class_cache_offer_resend(cmr_class_cache_t *cache, const char *name, int64_t loader_id, uint64_t hash,
                                  const uint8_t digest[CMR_TRUST_DIGEST_BYTES], const uint8_t *bytes, size_t len,
                                  int64_t request_id);

/* Queues again, without bytes, every registered class whose hash is known and that `skip`
 * does not leave out (called under the cache's mutex: quick, no call back into the cache).
 * The entries are RESEND answers to request_id: their bytes are captured from the JVM
 * (cmr_class_cache_take_byteless) and sent whatever the never-send set says. For a CMR
 * that lost ClassLoaded messages. Returns how many were queued. */
size_t cmr_class_cache_requeue_all(cmr_class_cache_t *cache,
                                   bool (*skip)(const char *name, int64_t loader_id, void *ud), void *ud,
                                   int64_t request_id);

/* --- shipping (control thread) -------------------------------------------------------- */
/* Takes the oldest pending entry that has bytes into the in-flight set; NULL when none. */
cmr_class_entry_t *cmr_class_cache_take(cmr_class_cache_t *cache);
/* Pending entries without bytes (need a JVM capture): moves up to max of them to out[];
 * the caller gives each back through cmr_class_cache_attach_bytes() or _drop(). */
size_t cmr_class_cache_take_byteless(cmr_class_cache_t *cache, cmr_class_entry_t **out, size_t max);
/* Gives a captured entry its bytes and puts it back in line. An entry captured without a
 * hash (unread) gets it now; if those bytes were already sent (never-send) it is
 * dropped instead. The registry adds `digest` to the class's digests (as its original one
 * if it has none: a class loaded before the agent). Returns true when queued. */
bool cmr_class_cache_attach_bytes(cmr_class_cache_t *cache, cmr_class_entry_t *e, uint64_t hash,
                                  const uint8_t digest[CMR_TRUST_DIGEST_BYTES], const uint8_t *bytes, size_t len);
void cmr_class_cache_drop(cmr_class_cache_t *cache, cmr_class_entry_t *e);
/* Delivery outcome of an in-flight entry: freed on success, queued again on failure. */
void cmr_class_cache_delivered(cmr_class_cache_t *cache, cmr_class_entry_t *e, bool ok);
/* Counters and current sizes. */
void cmr_class_cache_stats(cmr_class_cache_t *cache, cmr_class_cache_stats_t *out);

/* --- registry --------------------------------------------------------------------------- */
/* Sets the handle of (name, loader) (creating the entry); the previous handle, if any, is
 * returned for the caller to release. */
void *cmr_class_cache_set_handle(cmr_class_cache_t *cache, const char *name, int64_t loader_id, void *handle);
/* Whether (name, loader) already has a handle. */
bool cmr_class_cache_has_handle(cmr_class_cache_t *cache, const char *name, int64_t loader_id);
/* Whether the load hook has offered this class (its hash is known). */
bool cmr_class_cache_knows(cmr_class_cache_t *cache, const char *name, int64_t loader_id);
/* Calls fn for every registered class named `name` (any loader); stops when fn returns
 * non-zero and returns that value. Runs under the cache's mutex: fn must be quick and
 * must not call back into the cache. */
typedef int(cmr_class_visit_fn)(const char *name, int64_t loader_id, uint64_t hash, const cmr_class_digests_t *digests,
                                void *handle, void *opaque);
int cmr_class_cache_visit(cmr_class_cache_t *cache, const char *name, cmr_class_visit_fn *fn, void *opaque);
/* When (name, loader) was loaded (cmr_mono_ns() in the load hook); 0 when unknown. */
int64_t cmr_class_cache_loaded_ns(cmr_class_cache_t *cache, const char *name, int64_t loader_id);
/* The original hash recorded for (name, loader); false when unknown. */
bool cmr_class_cache_hash_of(cmr_class_cache_t *cache, const char *name, int64_t loader_id, uint64_t *hash);
/* The original digest recorded for (name, loader) (digests.d[0]); false when unknown. */
bool cmr_class_cache_digest_of(cmr_class_cache_t *cache, const char *name, int64_t loader_id,
                               uint8_t out[CMR_TRUST_DIGEST_BYTES]);
size_t cmr_class_cache_registered(cmr_class_cache_t *cache);

/* --- classes running instrumented bytes from the grant cache (grant_store.h) ------------ */
/* Records that (name, loader) runs instrumented bytes with this BLAKE2b-256 digest, applied
 * by the load hook from the cache; NULL: it no longer does (redefined, restored). */
void cmr_class_cache_set_applied(cmr_class_cache_t *cache, const char *name, int64_t loader_id,
                                 const uint8_t digest[CMR_TRUST_DIGEST_BYTES]);
/* The digest of the cached bytes (name, loader) runs; false when it runs none. */
bool cmr_class_cache_applied_of(cmr_class_cache_t *cache, const char *name, int64_t loader_id,
                                uint8_t out[CMR_TRUST_DIGEST_BYTES]);
/* Calls fn for every class that runs cached bytes (under the mutex, like _visit). */
int cmr_class_cache_visit_applied(cmr_class_cache_t *cache, cmr_class_visit_fn *fn, void *opaque);

#endif

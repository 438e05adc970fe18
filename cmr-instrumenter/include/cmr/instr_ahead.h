/*
 * instr_ahead.h - classes granted ahead: the class grants (cmr/grant.h) this worker has
 * signed, per environment, with their instrumented bytes, kept in memory so that a new
 * JVM of the environment gets them in ClassGrants commands as soon as the worker first
 * hears from it, before it loads them (docs/AGENT.md, "Classes granted ahead"). The agent
 * then instruments those classes as they load, with no RedefineClasses: what its disk
 * cache does for a restarted JVM, for the first JVM of a host.
 *
 * What is kept: for each environment, the latest revision's grants, one per original
 * class digest (a class granted again replaces its entry and keeps its place), in the
 * order they were first signed, which is roughly the order in which a JVM of the
 * environment loads its classes, and for each how many JVMs loaded it since (counted
 * from their ClassLoaded, by class name). A grant of a newer revision drops the
 * environment's older ones; one of an older revision is not kept. Only grants are kept,
 * so never a diagnosis' bytes (they get none).
 *
 * What a JVM is sent: the classes most JVMs loaded first (ties in the order they were
 * signed), up to a number of bytes per JVM, so that an environment of many classes does
 * not send all of them to every JVM.
 *
 * Bounds: at most max_bytes of instrumented bytes and grants over all environments;
 * grants beyond are not kept (counted). The set is a cache of what was signed: a
 * restarted worker starts empty and fills again as it signs.
 *
 * Threads: one thread (the worker's); /metrics reads the worker's own counters.
 *
 * Ownership: the set owns copies of everything; the messages handed to the callback of
 * cmr_instr_ahead_messages point into the set and live only during the call.
 */
#ifndef CMR_INSTR_AHEAD_H
#define CMR_INSTR_AHEAD_H

#include <stddef.h>
#include <stdint.h>

#include "cmr/msg.h"
#include "cmr/trust.h"

typedef struct cmr_instr_ahead cmr_instr_ahead_t;

typedef struct cmr_instr_ahead_stats {
    uint64_t kept;          /* grants put and kept (replacements included) */
    uint64_t over_budget;   /* grants not kept: max_bytes reached */
    uint64_t stale;         /* grants of an older revision than the environment's, not kept */
    uint64_t renewed;       /* grants signed again by cmr_instr_ahead_renew */
    uint64_t renew_refused; /* grants dropped by it: not verified under the worker's own key */
    uint64_t sets_sent;     /* JVMs the classes were offered to */
    uint64_t classes_sent;
    size_t classes; /* held now, all environments */
    size_t bytes;
} cmr_instr_ahead_stats_t;

/* NULL when out of memory. max_bytes 0: nothing is kept. */
cmr_instr_ahead_t *cmr_instr_ahead_new(size_t max_bytes);
void cmr_instr_ahead_free(cmr_instr_ahead_t *x);

typedef enum cmr_instr_ahead_put {
    CMR_INSTR_AHEAD_NOT_KEPT = 0, /* over budget, older revision, malformed */
    CMR_INSTR_AHEAD_KEPT,         /* new, or other bytes, or a grant renewed: worth publishing */
    CMR_INSTR_AHEAD_SAME,         /* the same bytes are held under a grant valid for days yet */
} cmr_instr_ahead_put_t;

/* Keeps an encoded grant with the instrumented bytes it grants (the grant says for which
 * environment, revision, class and original digest; it is decoded, not verified: the
 * worker signed it, or checks it first). */
cmr_instr_ahead_put_t cmr_instr_ahead_put(cmr_instr_ahead_t *x, const void *grant, size_t grant_len,
                                          const uint8_t *bytes, size_t len);

/* A JVM of the environment loaded the class of this name (a ClassLoaded): counts for the
 * order in which classes are sent. */
void cmr_instr_ahead_loaded(cmr_instr_ahead_t *x, const char *environment_id, const char *class_name);

/* How many classes are held for the environment at this revision. */
size_t cmr_instr_ahead_count(const cmr_instr_ahead_t *x, const char *environment_id, int64_t revision);

/* Calls fn with the ClassGrants messages for one JVM: the classes held for the
 * environment at this revision whose grant is valid for an hour yet at wall time now_ms,
 * most loaded first, up to max_jvm_bytes of grants and bytes in all (at least one
 * class), each message with at most max_message_bytes (a larger class goes alone),
 * numbered part 1..parts. *sent (may be NULL) gets the number of classes. Stops at the
 * first non-zero return of fn and returns it; 0 when every message was handed over (or
 * there was none). */
typedef int(cmr_instr_ahead_fn)(const cmr_class_grants_t *m, void *ud);
int cmr_instr_ahead_messages(cmr_instr_ahead_t *x, const char *environment_id, int64_t revision, int64_t agent_id,
                             int64_t now_ms, size_t max_jvm_bytes, size_t max_message_bytes, cmr_instr_ahead_fn *fn,
                             void *ud, size_t *sent);

/* Renewal, so that the classes no JVM had to have redefined lately (all of them, once
 * every JVM gets them ahead) stay ready to send: the grants of the environment at this
 * revision with less than a day of validity left at now_ms, expired ones included (at
 * most max of them, the most loaded first), are signed again by `signer` for lifetime_ms,
 * for the same class and bytes, and replace the old ones in place (loads and rank kept).
 * A grant is signed again only once it verifies under `own` (the signer's own public key,
 * cmr_verifier_add_signer) as it did when it was issued: a record of cmr.grants is kept on
 * its key id alone, so one with that id and a bad signature is dropped here (counted in
 * renew_refused, and in *dropped when not NULL) and never signed. fn (may be NULL) gets
 * each renewed class, to publish it. Returns how many were renewed. */
typedef void(cmr_instr_ahead_renewed_fn)(const char *class_name, const uint8_t original_digest[32],
                                         const cmr_bytes_t *grant, const cmr_bytes_t *bytes, void *ud);
size_t cmr_instr_ahead_renew(cmr_instr_ahead_t *x, const char *environment_id, int64_t revision, int64_t now_ms,
                             size_t max, const cmr_verifier_t *own, const cmr_signer_t *signer, int64_t lifetime_ms,
                             cmr_instr_ahead_renewed_fn *fn, void *ud, size_t *dropped);

/* Why a record of cmr.grants is not to be kept (NULL: it is): it must be one class whose
 * grant is of the key key_id and names that class, its original digest and the digest of
 * its bytes. The signature is the agents' to check (they pin the keys; the topic is
 * written by cmr-instrumenter alone, deploy/acls.sh). */
const char *cmr_instr_ahead_record_refusal(const cmr_msg_t *m, const char *key_id);

void cmr_instr_ahead_stats(const cmr_instr_ahead_t *x, cmr_instr_ahead_stats_t *out);

#endif

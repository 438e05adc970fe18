/*
 * instr_cache.h - the instrumenter's class cache in RocksDB (one database per worker, WAL
 * on). Key layout (one key space, a prefix byte per kind; ids big-endian):
 *
 *   h <hash>                          class metadata (instr_meta.h) by class hash
 *   b <hash>                          original class bytes by class hash
 *   p <hash>                          pin: these bytes are never evicted (instrumented class)
 *   e <seq>                           eviction order of unpinned bytes (FIFO): hash + length
 *   S                                 counters: unpinned bytes held, next eviction sequence
 *   t <agent> <class name>            the hash of the class of that name the agent sent
 *   k <agent> <loader> <class name>   per agent class: hash, signature of what was sent, ...
 *   w <agent> <type> 0 <loader> <name> the class waits for <type> to resolve its hierarchy
 *   a <agent>                         agent: instance id, environment, revision, partition
 *   v <environment id>                the environment revision last run against the cache
 *   m <method id>                     a MethodEntry was published for this method id
 *   o <partition>                     the last cmr.classes offset of that partition in the cache
 *
 * Keys are exact, whatever the length of the names in them (two class names that share a
 * long prefix are two keys).
 *
 * Writes go to a pending batch that reads and iterations see (batch + database); commit()
 * writes the batch atomically. Every write is keyed by what it describes, so replaying a record
 * rewrites the same values (idempotent).
 *
 * Eviction: bytes of classes that need no instrumentation are unpinned; when the unpinned
 * bytes exceed the budget the oldest are deleted (metadata stays: such a class is matched
 * without its bytes, and gets a BytecodeResend when a configuration change needs it).
 *
 * Ownership: the cache owns its RocksDB handles; returned buffers belong to the caller.
 */
#ifndef CMR_INSTR_CACHE_H
#define CMR_INSTR_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "cmr/instr_meta.h"
#include "cmr/wire.h"

typedef struct cmr_instr_cache cmr_instr_cache_t;

typedef struct cmr_instr_class_rec {
    uint64_t hash;
    uint64_t signature; /* cmr_instr_decision_signature of what the agent runs; 0 = original */
    int64_t revision;   /* environment revision it was decided with */
    uint32_t resend;    /* a BytecodeResend is outstanding */
    char instance_id[64];
    char env_id[128];
} cmr_instr_class_rec_t;

typedef struct cmr_instr_agent_rec {
    int64_t revision;
    int32_t partition;
    char instance_id[64];
    char env_id[128];
} cmr_instr_agent_rec_t;

/* Copies the ids into a record's fields. 0, or -1 (record unchanged) when one of them does
 * not fit: ids are never cut (a valid instance id has 32 characters, an environment id at
 * most 64). */
int cmr_instr_class_rec_ids(cmr_instr_class_rec_t *r, const char *instance_id, const char *env_id);
int cmr_instr_agent_rec_ids(cmr_instr_agent_rec_t *r, const char *instance_id, const char *env_id);

/* budget: bytes of unpinned class files kept (0: keep none). sync: fsync every commit. */
cmr_instr_cache_t *cmr_instr_cache_open(const char *path, uint64_t budget, int sync, char *err, size_t errlen);
void cmr_instr_cache_close(cmr_instr_cache_t *c);
/* Writes the pending batch. 0, or -1 with err (also when a write of the batch ran out of
 * memory: the batch is then dropped, never written in part). */
int cmr_instr_cache_commit(cmr_instr_cache_t *c, char *err, size_t errlen);
/* Drops the pending batch. */
void cmr_instr_cache_rollback(cmr_instr_cache_t *c);

/* 1 found, 0 absent, -1 error (logged). */
int cmr_instr_cache_meta(cmr_instr_cache_t *c, uint64_t hash, cmr_instr_meta_t *out);
int cmr_instr_cache_put_meta(cmr_instr_cache_t *c, uint64_t hash, const cmr_instr_meta_t *m);
int cmr_instr_cache_bytes(cmr_instr_cache_t *c, uint64_t hash, cmr_buf_t *out);
/* Stores bytes; pinned bytes are kept, unpinned ones count against the budget. */
int cmr_instr_cache_put_bytes(cmr_instr_cache_t *c, uint64_t hash, const void *data, size_t len, int pinned);
int cmr_instr_cache_pin(cmr_instr_cache_t *c, uint64_t hash);

int cmr_instr_cache_type(cmr_instr_cache_t *c, uint64_t agent, const char *name, uint64_t *hash);
int cmr_instr_cache_put_type(cmr_instr_cache_t *c, uint64_t agent, const char *name, uint64_t hash);

int cmr_instr_cache_class(cmr_instr_cache_t *c, uint64_t agent, int64_t loader, const char *name,
                          cmr_instr_class_rec_t *out);
int cmr_instr_cache_put_class(cmr_instr_cache_t *c, uint64_t agent, int64_t loader, const char *name,
                              const cmr_instr_class_rec_t *r);
typedef int(cmr_instr_class_fn)(int64_t loader, const char *name, const cmr_instr_class_rec_t *r, void *ud);
/* Calls fn for every class of the agent (pending writes included); stops when fn returns
 * non-zero. fn must not write to the cache. */
int cmr_instr_cache_each_class(cmr_instr_cache_t *c, uint64_t agent, cmr_instr_class_fn *fn, void *ud);

int cmr_instr_cache_put_waiting(cmr_instr_cache_t *c, uint64_t agent, const char *type, int64_t loader,
                                const char *name);
int cmr_instr_cache_del_waiting(cmr_instr_cache_t *c, uint64_t agent, const char *type, int64_t loader,
                                const char *name);
typedef int(cmr_instr_waiting_fn)(int64_t loader, const char *name, void *ud);
int cmr_instr_cache_each_waiting(cmr_instr_cache_t *c, uint64_t agent, const char *type, cmr_instr_waiting_fn *fn,
                                 void *ud);

int cmr_instr_cache_agent(cmr_instr_cache_t *c, uint64_t agent, cmr_instr_agent_rec_t *out);
int cmr_instr_cache_put_agent(cmr_instr_cache_t *c, uint64_t agent, const cmr_instr_agent_rec_t *r);
typedef int(cmr_instr_agent_fn)(uint64_t agent, const cmr_instr_agent_rec_t *r, void *ud);
int cmr_instr_cache_each_agent(cmr_instr_cache_t *c, cmr_instr_agent_fn *fn, void *ud);

int cmr_instr_cache_env_run(cmr_instr_cache_t *c, const char *env_id, int64_t *revision);
int cmr_instr_cache_put_env_run(cmr_instr_cache_t *c, const char *env_id, int64_t revision);

int cmr_instr_cache_method_sent(cmr_instr_cache_t *c, uint64_t method_id);
int cmr_instr_cache_put_method_sent(cmr_instr_cache_t *c, uint64_t method_id);

/* Last offset of a cmr.classes partition this cache has processed (1 found, 0 none). */
int cmr_instr_cache_offset(cmr_instr_cache_t *c, int32_t partition, int64_t *offset);
/* Records offset as the partition's last one seen, unless a later one is held; *prev (when
 * not NULL) gets the one held before (-1: none). */
int cmr_instr_cache_put_offset(cmr_instr_cache_t *c, int32_t partition, int64_t offset, int64_t *prev);

/* Unpinned bytes currently held. */
uint64_t cmr_instr_cache_unpinned_bytes(const cmr_instr_cache_t *c);

#endif

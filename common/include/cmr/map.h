/*
 * map.h - hash maps: 64-bit keys (cmr_u64map_t) and byte-string keys (cmr_map_t).
 *
 * Part of the toolbox (cmr_base): the one hash table of the project. Method ids, class
 * hashes and agent ids are already well-mixed 64-bit numbers, so cmr_u64map_t uses them
 * (once more scrambled) as their own hash; anything else (a trace id, a class name with
 * its loader) is a byte string hashed with XXH3.
 *
 * Both are open-addressing tables with linear probing, at most 70 % full, with
 * backward-shift deletion (no tombstones: a table that sees many inserts and deletes
 * does not slow down). Every key is allowed, 0 and the empty string included.
 *
 * Ownership: a zeroed map is empty and valid; whoever declared it releases it with
 * *_free(). cmr_map_t copies its keys and frees the copies; neither map owns its values
 * (free them first, with an iteration, when they are heap memory).
 *
 * Iteration: `size_t it = 0; while (cmr_u64map_next(m, &it, &key, &val)) ...` visits
 * every entry once, in no particular order. The map must not change during an iteration,
 * except that the entry just returned may be given a new value through *_get_slot().
 *
 * Not thread-safe: the caller serialises access.
 */
#ifndef CMR_MAP_H
#define CMR_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* --- 64-bit keys ------------------------------------------------------------------ */

typedef struct cmr_u64map_slot {
    uint64_t key;
    void *val;
    bool used;
} cmr_u64map_slot_t;

typedef struct cmr_u64map {
    cmr_u64map_slot_t *slots; /* owned; cap entries */
    size_t cap;               /* a power of two, or 0 */
    size_t count;
} cmr_u64map_t;

/* The value of key, or NULL when absent (also when the value stored is NULL: use
 * cmr_u64map_has() for maps whose values may be NULL). */
void *cmr_u64map_get(const cmr_u64map_t *m, uint64_t key);
bool cmr_u64map_has(const cmr_u64map_t *m, uint64_t key);
/* Inserts or replaces. 0, or -1 when memory ran out (the map is unchanged). */
int cmr_u64map_put(cmr_u64map_t *m, uint64_t key, void *val);
/* The value slot of key, inserting the key with a NULL value when absent (*created set to
 * whether it was). NULL when memory ran out. The pointer is valid until the next insert
 * or delete. */
void **cmr_u64map_get_slot(cmr_u64map_t *m, uint64_t key, bool *created);
/* Makes room for n entries in all, so that inserts up to that count do not grow the
 * table. 0, or -1 when memory ran out (the map is unchanged). */
int cmr_u64map_reserve(cmr_u64map_t *m, size_t n);
/* Removes key; true when it was there (its value in *old when old is not NULL). */
bool cmr_u64map_del(cmr_u64map_t *m, uint64_t key, void **old);
bool cmr_u64map_next(const cmr_u64map_t *m, size_t *it, uint64_t *key, void **val);
/* Removes every entry, keeps the memory. */
void cmr_u64map_clear(cmr_u64map_t *m);
void cmr_u64map_free(cmr_u64map_t *m);
static inline size_t cmr_u64map_count(const cmr_u64map_t *m)
{
    return m->count;
}

/* --- byte-string keys ------------------------------------------------------------- */

typedef struct cmr_map_slot {
    uint64_t hash;
    void *key; /* owned copy, NUL-terminated after klen bytes; NULL = empty slot */
    size_t klen;
    void *val;
} cmr_map_slot_t;

typedef struct cmr_map {
    cmr_map_slot_t *slots; /* owned; cap entries */
    size_t cap;            /* a power of two, or 0 */
    size_t count;
} cmr_map_t;

void *cmr_map_get(const cmr_map_t *m, const void *key, size_t klen);
bool cmr_map_has(const cmr_map_t *m, const void *key, size_t klen);
/* Inserts (copying the key) or replaces the value. 0, or -1 when memory ran out. */
int cmr_map_put(cmr_map_t *m, const void *key, size_t klen, void *val);
/* As cmr_u64map_get_slot(). */
void **cmr_map_get_slot(cmr_map_t *m, const void *key, size_t klen, bool *created);
bool cmr_map_del(cmr_map_t *m, const void *key, size_t klen, void **old);
/* *key points at the map's own copy (NUL-terminated), valid while the entry exists. */
bool cmr_map_next(const cmr_map_t *m, size_t *it, const void **key, size_t *klen, void **val);
void cmr_map_clear(cmr_map_t *m);
void cmr_map_free(cmr_map_t *m);
static inline size_t cmr_map_count(const cmr_map_t *m)
{
    return m->count;
}

/* Convenience for NUL-terminated string keys. */
static inline void *cmr_map_get_str(const cmr_map_t *m, const char *key)
{
    size_t n = 0;
    while (key[n])
        n++;
    return cmr_map_get(m, key, n);
}

/* The hash the maps use for byte strings (XXH3-64). */
uint64_t cmr_hash_bytes(const void *p, size_t n);
/* A bijective scramble of a 64-bit key, so that keys that differ only in high bits
 * spread over the table. */
static inline uint64_t cmr_hash_u64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

#endif

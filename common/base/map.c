/*
 * map.c - open-addressing hash maps with linear probing and backward-shift deletion.
 * See cmr/map.h.
 *
 * Both maps share the probing logic: a slot's home is hash & (cap - 1); an entry sits at
 * or after its home with no empty slot between. Deleting an entry moves later entries of
 * the same cluster back into the hole when that keeps them reachable from their home.
 */
#include "cmr/map.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define MAP_MIN_CAP 16

/* true when the table must grow before one more entry goes in (at most 70 % full). */
static bool map_needs_grow(size_t count, size_t cap)
{
    return cap == 0 || (count + 1) * 10 > cap * 7;
}

/* Distance from a slot's home to index i, in a table of cap slots. */
static size_t probe_distance(uint64_t hash, size_t i, size_t cap)
{
    return (i - (size_t)(hash & (cap - 1))) & (cap - 1);
}

uint64_t cmr_hash_bytes(const void *p, size_t n)
{
    return XXH3_64bits(p, n);
}

/* --- 64-bit keys ------------------------------------------------------------------ */

/* Index of key's slot, or of the empty slot where it would go. cap > 0. */
static size_t u64_find(const cmr_u64map_t *m, uint64_t key, bool *found)
{
    size_t mask = m->cap - 1;
    size_t i = (size_t)cmr_hash_u64(key) & mask;
    while (m->slots[i].used) {
        if (m->slots[i].key == key) {
            *found = true;
            return i;
        }
        i = (i + 1) & mask;
    }
    *found = false;
    return i;
}

static int u64_resize(cmr_u64map_t *m, size_t cap)
{
    cmr_u64map_slot_t *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return -1;
    cmr_u64map_t n = {slots, cap, 0};
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->slots[i].used)
            continue;
        bool found;
        size_t j = u64_find(&n, m->slots[i].key, &found);
        n.slots[j] = m->slots[i];
        n.count++;
    }
    free(m->slots);
    *m = n;
    return 0;
}

void *cmr_u64map_get(const cmr_u64map_t *m, uint64_t key)
{
    if (!m->count)
        return NULL;
    bool found;
    size_t i = u64_find(m, key, &found);
    return found ? m->slots[i].val : NULL;
}

bool cmr_u64map_has(const cmr_u64map_t *m, uint64_t key)
{
    bool found = false;
    if (m->count)
        u64_find(m, key, &found);
    return found;
}

int cmr_u64map_reserve(cmr_u64map_t *m, size_t n)
{
    size_t cap = m->cap ? m->cap : MAP_MIN_CAP;
    while (n * 10 > cap * 7)
        cap *= 2;
    return cap > m->cap ? u64_resize(m, cap) : 0;
}

void **cmr_u64map_get_slot(cmr_u64map_t *m, uint64_t key, bool *created)
{
    bool found = false;
    size_t i = 0;
    if (m->cap) {
        i = u64_find(m, key, &found);
        if (found) {
            if (created)
                *created = false;
            return &m->slots[i].val;
        }
    }
    if (map_needs_grow(m->count, m->cap)) {
        if (u64_resize(m, m->cap ? m->cap * 2 : MAP_MIN_CAP) < 0)
            return NULL;
        i = u64_find(m, key, &found);
    }
    m->slots[i] = (cmr_u64map_slot_t){.key = key, .val = NULL, .used = true};
    m->count++;
    if (created)
        *created = true;
    return &m->slots[i].val;
}

int cmr_u64map_put(cmr_u64map_t *m, uint64_t key, void *val)
{
    void **slot = cmr_u64map_get_slot(m, key, NULL);
    if (!slot)
        return -1;
    *slot = val;
    return 0;
}

bool cmr_u64map_del(cmr_u64map_t *m, uint64_t key, void **old)
{
    if (!m->count)
        return false;
    bool found;
    size_t hole = u64_find(m, key, &found);
    if (!found)
        return false;
    if (old)
        *old = m->slots[hole].val;
    size_t mask = m->cap - 1;
    for (size_t j = (hole + 1) & mask; m->slots[j].used; j = (j + 1) & mask) {
        uint64_t h = cmr_hash_u64(m->slots[j].key);
        /* Move j back into the hole when the hole lies between its home and j. */
        if (probe_distance(h, j, m->cap) >= ((j - hole) & mask)) {
            m->slots[hole] = m->slots[j];
            hole = j;
        }
    }
    m->slots[hole] = (cmr_u64map_slot_t){0};
    m->count--;
    return true;
}

bool cmr_u64map_next(const cmr_u64map_t *m, size_t *it, uint64_t *key, void **val)
{
    for (; *it < m->cap; (*it)++) {
        const cmr_u64map_slot_t *s = &m->slots[*it];
        if (s->used) {
            if (key)
                *key = s->key;
            if (val)
                *val = s->val;
            (*it)++;
            return true;
        }
    }
    return false;
}

void cmr_u64map_clear(cmr_u64map_t *m)
{
    if (m->slots)
        memset(m->slots, 0, m->cap * sizeof *m->slots);
    m->count = 0;
}

void cmr_u64map_free(cmr_u64map_t *m)
{
    free(m->slots);
    *m = (cmr_u64map_t){0};
}

/* --- byte-string keys ------------------------------------------------------------- */

static size_t str_find(const cmr_map_t *m, uint64_t hash, const void *key, size_t klen, bool *found)
{
    size_t mask = m->cap - 1;
    size_t i = (size_t)hash & mask;
    while (m->slots[i].key) {
        const cmr_map_slot_t *s = &m->slots[i];
        if (s->hash == hash && s->klen == klen && !memcmp(s->key, key, klen)) {
            *found = true;
            return i;
        }
        i = (i + 1) & mask;
    }
    *found = false;
    return i;
}

static int str_resize(cmr_map_t *m, size_t cap)
{
    cmr_map_slot_t *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return -1;
    size_t mask = cap - 1;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->slots[i].key)
            continue;
        size_t j = (size_t)m->slots[i].hash & mask;
        while (slots[j].key)
            j = (j + 1) & mask;
        slots[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = slots;
    m->cap = cap;
    return 0;
}

void *cmr_map_get(const cmr_map_t *m, const void *key, size_t klen)
{
    if (!m->count)
        return NULL;
    bool found;
    size_t i = str_find(m, cmr_hash_bytes(key, klen), key, klen, &found);
    return found ? m->slots[i].val : NULL;
}

bool cmr_map_has(const cmr_map_t *m, const void *key, size_t klen)
{
    bool found = false;
    if (m->count)
        str_find(m, cmr_hash_bytes(key, klen), key, klen, &found);
    return found;
}

void **cmr_map_get_slot(cmr_map_t *m, const void *key, size_t klen, bool *created)
{
    uint64_t hash = cmr_hash_bytes(key, klen);
    bool found = false;
    size_t i = 0;
    if (m->cap) {
        i = str_find(m, hash, key, klen, &found);
        if (found) {
            if (created)
                *created = false;
            return &m->slots[i].val;
        }
    }
    if (klen == SIZE_MAX)
        return NULL;
    char *copy = malloc(klen + 1);
    if (!copy)
        return NULL;
    if (klen)
        memcpy(copy, key, klen);
    copy[klen] = '\0';
    if (map_needs_grow(m->count, m->cap)) {
        if (str_resize(m, m->cap ? m->cap * 2 : MAP_MIN_CAP) < 0) {
            free(copy);
            return NULL;
        }
        i = str_find(m, hash, key, klen, &found);
    }
    m->slots[i] = (cmr_map_slot_t){.hash = hash, .key = copy, .klen = klen, .val = NULL};
    m->count++;
    if (created)
        *created = true;
    return &m->slots[i].val;
}

int cmr_map_put(cmr_map_t *m, const void *key, size_t klen, void *val)
{
    void **slot = cmr_map_get_slot(m, key, klen, NULL);
    if (!slot)
        return -1;
    *slot = val;
    return 0;
}

bool cmr_map_del(cmr_map_t *m, const void *key, size_t klen, void **old)
{
    if (!m->count)
        return false;
    bool found;
    size_t hole = str_find(m, cmr_hash_bytes(key, klen), key, klen, &found);
    if (!found)
        return false;
    if (old)
        *old = m->slots[hole].val;
    free(m->slots[hole].key);
    size_t mask = m->cap - 1;
    for (size_t j = (hole + 1) & mask; m->slots[j].key; j = (j + 1) & mask) {
        if (probe_distance(m->slots[j].hash, j, m->cap) >= ((j - hole) & mask)) {
            m->slots[hole] = m->slots[j];
            hole = j;
        }
    }
    m->slots[hole] = (cmr_map_slot_t){0};
    m->count--;
    return true;
}

bool cmr_map_next(const cmr_map_t *m, size_t *it, const void **key, size_t *klen, void **val)
{
    for (; *it < m->cap; (*it)++) {
        const cmr_map_slot_t *s = &m->slots[*it];
        if (s->key) {
            if (key)
                *key = s->key;
            if (klen)
                *klen = s->klen;
            if (val)
                *val = s->val;
            (*it)++;
            return true;
        }
    }
    return false;
}

void cmr_map_clear(cmr_map_t *m)
{
    for (size_t i = 0; i < m->cap; i++)
        free(m->slots[i].key);
    if (m->slots)
        memset(m->slots, 0, m->cap * sizeof *m->slots);
    m->count = 0;
}

void cmr_map_free(cmr_map_t *m)
{
    cmr_map_clear(m);
    free(m->slots);
    *m = (cmr_map_t){0};
}

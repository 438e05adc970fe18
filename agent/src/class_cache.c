/*
 * class_cache.c - never-send set, pending queue and registry of the agent's classes
 * (see class_cache.h). One mutex guards all three: every operation is short (a hash, a
 * table probe, a memcpy of class bytes), so the load hook never waits for long.
 */
#include "class_cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct reg_entry {
    char *name;
    int64_t loader_id;
    uint64_t hash;
    int64_t loaded_ns;
    void *handle;
    struct reg_entry *next;
} reg_entry_t;

struct cmr_class_cache {
    pthread_mutex_t lock;
    /* never-send: open addressing; 0 marks an empty slot, hash 0 is kept in a flag */
    uint64_t *set;
    size_t set_cap, set_count;
    bool set_has_zero;
    /* pending FIFO */
    cmr_class_entry_t *head, *tail;
    size_t pending, in_flight, buffered, budget;
    /* registry: chained hash table on (name, loader) */
    reg_entry_t **reg;
    size_t reg_cap, reg_count;
    cmr_class_cache_stats_t stats;
};

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
}

static uint64_t name_hash(const char *name, int64_t loader_id)
{
    uint64_t h = 1469598103934665603ULL;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 1099511628211ULL;
    return mix(h ^ (uint64_t)loader_id);
}

cmr_class_cache_t *cmr_class_cache_new(size_t byte_budget)
{
    cmr_class_cache_t *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->set_cap = 4096;
    c->reg_cap = 4096;
    c->set = calloc(c->set_cap, sizeof *c->set);
    c->reg = calloc(c->reg_cap, sizeof *c->reg);
    if (!c->set || !c->reg) {
        free(c->set);
        free(c->reg);
        free(c);
        return NULL;
    }
    c->budget = byte_budget;
    pthread_mutex_init(&c->lock, NULL);
    return c;
}

static void entry_free(cmr_class_entry_t *e)
{
    free(e->name);
    free(e->bytes);
    free(e);
}

void cmr_class_cache_free(cmr_class_cache_t *c, void (*release_handle)(void *, void *), void *opaque)
{
    if (!c)
        return;
    for (cmr_class_entry_t *e = c->head, *n; e; e = n) {
        n = e->next;
        entry_free(e);
    }
    for (size_t i = 0; i < c->reg_cap; i++) {
        for (reg_entry_t *r = c->reg[i], *n; r; r = n) {
            n = r->next;
            if (r->handle && release_handle)
                release_handle(r->handle, opaque);
            free(r->name);
            free(r);
        }
    }
    free(c->reg);
    free(c->set);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* --- never-send set (lock held) --------------------------------------------------------- */

static bool set_contains(const cmr_class_cache_t *c, uint64_t h)
{
    if (h == 0)
        return c->set_has_zero;
    for (size_t i = mix(h) & (c->set_cap - 1);; i = (i + 1) & (c->set_cap - 1)) {
        if (c->set[i] == h)
            return true;
        if (c->set[i] == 0)
            return false;
    }
}

static void set_insert_slot(uint64_t *set, size_t cap, uint64_t h)
{
    size_t i = mix(h) & (cap - 1);
    while (set[i] != 0 && set[i] != h)
        i = (i + 1) & (cap - 1);
    set[i] = h;
}

static void set_add(cmr_class_cache_t *c, uint64_t h)
{
    if (h == 0) {
        c->set_has_zero = true;
        return;
    }
    if (set_contains(c, h))
        return;
    if ((c->set_count + 1) * 2 > c->set_cap) {
        size_t cap = c->set_cap * 2;
        uint64_t *set = calloc(cap, sizeof *set);
        if (!set)
            return; /* out of memory: the class is just sent again later */
        for (size_t i = 0; i < c->set_cap; i++)
            if (c->set[i])
                set_insert_slot(set, cap, c->set[i]);
        free(c->set);
        c->set = set;
        c->set_cap = cap;
    }
    set_insert_slot(c->set, c->set_cap, h);
    c->set_count++;
}

/* Deletion in linear probing: empty the slot and re-insert the rest of its cluster. */
static void set_remove(cmr_class_cache_t *c, uint64_t h)
{
    if (h == 0) {
        c->set_has_zero = false;
        return;
    }
    size_t mask = c->set_cap - 1, i = mix(h) & mask;
    while (c->set[i] != h) {
        if (c->set[i] == 0)
            return;
        i = (i + 1) & mask;
    }
    c->set[i] = 0;
    c->set_count--;
    for (size_t j = (i + 1) & mask; c->set[j] != 0; j = (j + 1) & mask) {
        uint64_t k = c->set[j];
        c->set[j] = 0;
        set_insert_slot(c->set, c->set_cap, k);
    }
}

bool cmr_class_cache_never_send(cmr_class_cache_t *c, uint64_t hash)
{
    pthread_mutex_lock(&c->lock);
    bool r = set_contains(c, hash);
    pthread_mutex_unlock(&c->lock);
    return r;
}

void cmr_class_cache_mark_never_send(cmr_class_cache_t *c, uint64_t hash)
{
    pthread_mutex_lock(&c->lock);
    set_add(c, hash);
    pthread_mutex_unlock(&c->lock);
}

void cmr_class_cache_unmark_never_send(cmr_class_cache_t *c, uint64_t hash)
{
    pthread_mutex_lock(&c->lock);
    set_remove(c, hash);
    pthread_mutex_unlock(&c->lock);
}

/* --- registry (lock held) --------------------------------------------------------------- */

static reg_entry_t *reg_find(cmr_class_cache_t *c, const char *name, int64_t loader_id, bool create)
{
    size_t b = name_hash(name, loader_id) & (c->reg_cap - 1);
    for (reg_entry_t *r = c->reg[b]; r; r = r->next)
        if (r->loader_id == loader_id && strcmp(r->name, name) == 0)
            return r;
    if (!create)
        return NULL;
    if (c->reg_count + 1 > c->reg_cap) { /* grow: keep chains short */
        size_t cap = c->reg_cap * 2;
        reg_entry_t **reg = calloc(cap, sizeof *reg);
        if (reg) {
            for (size_t i = 0; i < c->reg_cap; i++) {
                for (reg_entry_t *r = c->reg[i], *n; r; r = n) {
                    n = r->next;
                    size_t nb = name_hash(r->name, r->loader_id) & (cap - 1);
                    r->next = reg[nb];
                    reg[nb] = r;
                }
            }
            free(c->reg);
            c->reg = reg;
            c->reg_cap = cap;
            b = name_hash(name, loader_id) & (cap - 1);
        }
    }
    reg_entry_t *r = calloc(1, sizeof *r);
    if (!r || !(r->name = strdup(name))) {
        free(r);
        return NULL;
    }
    r->loader_id = loader_id;
    r->next = c->reg[b];
    c->reg[b] = r;
    c->reg_count++;
    return r;
}

void *cmr_class_cache_set_handle(cmr_class_cache_t *c, const char *name, int64_t loader_id, void *handle)
{
    pthread_mutex_lock(&c->lock);
    reg_entry_t *r = reg_find(c, name, loader_id, true);
    void *old = NULL;
    if (r) {
        old = r->handle;
        r->handle = handle;
    } else {
        old = handle; /* could not record: the caller releases what it passed */
    }
    pthread_mutex_unlock(&c->lock);
    return old;
}

bool cmr_class_cache_has_handle(cmr_class_cache_t *c, const char *name, int64_t loader_id)
{
    pthread_mutex_lock(&c->lock);
    reg_entry_t *r = reg_find(c, name, loader_id, false);
    bool has = r && r->handle;
    pthread_mutex_unlock(&c->lock);
    return has;
}

bool cmr_class_cache_knows(cmr_class_cache_t *c, const char *name, int64_t loader_id)
{
    pthread_mutex_lock(&c->lock);
    reg_entry_t *r = reg_find(c, name, loader_id, false);
    bool knows = r && r->hash != 0;
    pthread_mutex_unlock(&c->lock);
    return knows;
}

int cmr_class_cache_visit(cmr_class_cache_t *c, const char *name, cmr_class_visit_fn *fn, void *opaque)
{
    int rc = 0;
    pthread_mutex_lock(&c->lock);
    /* The loader is part of the bucket hash: walk every bucket (commands are rare). */
    for (size_t i = 0; i < c->reg_cap && rc == 0; i++)
        for (reg_entry_t *r = c->reg[i]; r && rc == 0; r = r->next)
            if (strcmp(r->name, name) == 0)
                rc = fn(r->name, r->loader_id, r->hash, r->handle, opaque);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

bool cmr_class_cache_hash_of(cmr_class_cache_t *c, const char *name, int64_t loader_id, uint64_t *hash)
{
    pthread_mutex_lock(&c->lock);
    reg_entry_t *r = reg_find(c, name, loader_id, false);
    if (r)
        *hash = r->hash;
    pthread_mutex_unlock(&c->lock);
    return r != NULL;
}

int64_t cmr_class_cache_loaded_ns(cmr_class_cache_t *c, const char *name, int64_t loader_id)
{
    pthread_mutex_lock(&c->lock);
    reg_entry_t *r = reg_find(c, name, loader_id, false);
    int64_t t = r ? r->loaded_ns : 0;
    pthread_mutex_unlock(&c->lock);
    return t;
}

size_t cmr_class_cache_registered(cmr_class_cache_t *c)
{
    pthread_mutex_lock(&c->lock);
    size_t n = c->reg_count;
    pthread_mutex_unlock(&c->lock);
    return n;
}

/* --- pending queue (lock held) ------------------------------------------------------------ */

static void queue_push(cmr_class_cache_t *c, cmr_class_entry_t *e)
{
    e->next = NULL;
    if (c->tail)
        c->tail->next = e;
    else
        c->head = e;
    c->tail = e;
    c->pending++;
}

/* Gives `e` a copy of bytes when the budget allows; counts the drop otherwise. */
static void entry_keep_bytes(cmr_class_cache_t *c, cmr_class_entry_t *e, const uint8_t *bytes, size_t len)
{
    if (bytes && c->buffered + len <= c->budget && (e->bytes = malloc(len ? len : 1))) {
        memcpy(e->bytes, bytes, len);
        e->len = len;
        c->buffered += len;
    } else {
        e->bytes = NULL;
        e->len = 0;
        c->stats.bytes_dropped++;
    }
}

static cmr_class_entry_t *entry_new(const char *name, int64_t loader_id, uint64_t hash, cmr_class_cause_t cause,
                                    int64_t request_id)
{
    cmr_class_entry_t *e = calloc(1, sizeof *e);
    if (!e || !(e->name = strdup(name))) {
        free(e);
        return NULL;
    }
    e->loader_id = loader_id;
    e->hash = hash;
    e->cause = cause;
    e->request_id = request_id;
    return e;
}

bool cmr_class_cache_offer(cmr_class_cache_t *c, const char *name, int64_t loader_id, uint64_t hash,
                           const uint8_t *bytes, size_t len, cmr_class_cause_t cause, int64_t loaded_ns)
{
    bool queued = false;
    pthread_mutex_lock(&c->lock);
    c->stats.seen++;
    reg_entry_t *r = reg_find(c, name, loader_id, true);
    if (r) {
        r->hash = hash;
        r->loaded_ns = loaded_ns;
    }
    if (set_contains(c, hash)) {
        c->stats.skipped++;
    } else {
        cmr_class_entry_t *e = entry_new(name, loader_id, hash, cause, 0);
        if (e) {
            entry_keep_bytes(c, e, bytes, len);
            queue_push(c, e);
            set_add(c, hash);
            c->stats.queued++;
            queued = true;
        }
    }
    pthread_mutex_unlock(&c->lock);
    return queued;
}

void cmr_class_cache_offer_resend(cmr_class_cache_t *c, const char *name, int64_t loader_id, uint64_t hash,
                                  const uint8_t *bytes, size_t len, int64_t request_id)
{
    pthread_mutex_lock(&c->lock);
    cmr_class_entry_t *e = entry_new(name, loader_id, hash, CMR_CLASS_RESEND, request_id);
    if (e) {
        /* a resend answers a request: its bytes do not count against the budget */
        if ((e->bytes = malloc(len ? len : 1))) {
            memcpy(e->bytes, bytes, len);
            e->len = len;
            c->buffered += len;
        }
        queue_push(c, e);
        c->stats.queued++;
    }
    pthread_mutex_unlock(&c->lock);
}

cmr_class_entry_t *cmr_class_cache_take(cmr_class_cache_t *c)
{
    pthread_mutex_lock(&c->lock);
    cmr_class_entry_t *prev = NULL, *e = c->head;
    while (e && !e->bytes) {
        prev = e;
        e = e->next;
    }
    if (e) {
        if (prev)
            prev->next = e->next;
        else
            c->head = e->next;
        if (c->tail == e)
            c->tail = prev;
        e->next = NULL;
        c->pending--;
        c->in_flight++;
    }
    pthread_mutex_unlock(&c->lock);
    return e;
}

size_t cmr_class_cache_take_byteless(cmr_class_cache_t *c, cmr_class_entry_t **out, size_t max)
{
    size_t n = 0;
    pthread_mutex_lock(&c->lock);
    cmr_class_entry_t *prev = NULL, *e = c->head;
    while (e && n < max) {
        cmr_class_entry_t *next = e->next;
        if (!e->bytes) {
            if (prev)
                prev->next = next;
            else
                c->head = next;
            if (c->tail == e)
                c->tail = prev;
            e->next = NULL;
            c->pending--;
            c->in_flight++;
            out[n++] = e;
        } else {
            prev = e;
        }
        e = next;
    }
    pthread_mutex_unlock(&c->lock);
    return n;
}

bool cmr_class_cache_attach_bytes(cmr_class_cache_t *c, cmr_class_entry_t *e, uint64_t hash, const uint8_t *bytes,
                                  size_t len)
{
    bool queued = false;
    pthread_mutex_lock(&c->lock);
    c->in_flight--;
    bool unread = e->hash == 0 && e->cause != CMR_CLASS_RESEND;
    if (unread) {
        reg_entry_t *r = reg_find(c, e->name, e->loader_id, true);
        if (r)
            r->hash = hash;
    }
    if (unread && set_contains(c, hash)) {
        c->stats.skipped++;
    } else if ((e->bytes = malloc(len ? len : 1))) {
        if (unread)
            set_add(c, hash);
        e->hash = hash;
        memcpy(e->bytes, bytes, len);
        e->len = len;
        c->buffered += len;
        queue_push(c, e);
        queued = true;
    }
    pthread_mutex_unlock(&c->lock);
    if (!queued)
        entry_free(e);
    return queued;
}

void cmr_class_cache_offer_unread(cmr_class_cache_t *c, const char *name, int64_t loader_id, cmr_class_cause_t cause)
{
    pthread_mutex_lock(&c->lock);
    c->stats.seen++;
    reg_find(c, name, loader_id, true);
    cmr_class_entry_t *e = entry_new(name, loader_id, 0, cause, 0);
    if (e) {
        queue_push(c, e);
        c->stats.queued++;
    }
    pthread_mutex_unlock(&c->lock);
}

void cmr_class_cache_drop(cmr_class_cache_t *c, cmr_class_entry_t *e)
{
    pthread_mutex_lock(&c->lock);
    c->in_flight--;
    c->buffered -= e->bytes ? e->len : 0;
    pthread_mutex_unlock(&c->lock);
    entry_free(e);
}

void cmr_class_cache_delivered(cmr_class_cache_t *c, cmr_class_entry_t *e, bool ok)
{
    pthread_mutex_lock(&c->lock);
    c->in_flight--;
    if (ok) {
        c->stats.sent++;
        c->buffered -= e->bytes ? e->len : 0;
    } else {
        c->stats.requeued++;
        queue_push(c, e);
        e = NULL;
    }
    pthread_mutex_unlock(&c->lock);
    if (e)
        entry_free(e);
}

void cmr_class_cache_stats(cmr_class_cache_t *c, cmr_class_cache_stats_t *out)
{
    pthread_mutex_lock(&c->lock);
    *out = c->stats;
    out->pending = c->pending;
    out->in_flight = c->in_flight;
    out->buffered_bytes = c->buffered;
    pthread_mutex_unlock(&c->lock);
}

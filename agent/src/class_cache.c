/*
 * class_cache.c - never-send set, pending queue and registry of the agent's classes
 * (see class_cache.h). One mutex guards all three: every operation is short (a hash, a
 * table probe, a memcpy of class bytes), so the load hook never waits for long.
 */
#include "class_cache.h"

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/buf.h"
#include "cmr/bytes.h"
#include "cmr/map.h"

/* The registry's value for (name, loader); the name and loader are in the map's key. */
typedef struct reg_entry {
    uint64_t hash;
    int64_t loaded_ns;
    void *handle;
    cmr_class_digests_t digests;
    bool has_applied; /* instrumented bytes from the grant cache run (grant_store.h) */
    uint8_t applied[CMR_TRUST_DIGEST_BYTES];
} reg_entry_t;

struct cmr_class_cache {
    pthread_mutex_t lock;
    /* never-send: class hashes, no values (cmr_u64map_has) */
    cmr_u64map_t never_send;
    /* pending FIFO */
    cmr_class_entry_t *head, *tail;
    size_t pending, in_flight, buffered, budget;
    /* registry: key = loader id (8 bytes, little endian) then the class name; value = an
     * owned reg_entry_t */
    cmr_map_t reg;
    cmr_buf_t key; /* scratch for building registry keys (lock held) */
    cmr_class_cache_stats_t stats;
};

cmr_class_cache_t *cmr_class_cache_new(size_t byte_budget)
{
    cmr_class_cache_t *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->budget = byte_budget;
    pthread_mutex_init(&c->lock, NULL);
    return c;
}

/* The registry key of (name, loader) in the key scratch buffer; NULL when memory ran out. */
static const cmr_buf_t *reg_key(cmr_class_cache_t *c, const char *name, int64_t loader_id)
{
    cmr_buf_reset(&c->key);
    uint8_t *p = cmr_buf_append(&c->key, 8);
    if (p)
        cmr_put_le64(p, (uint64_t)loader_id);
    cmr_buf_puts(&c->key, name);
    return cmr_buf_ok(&c->key) ? &c->key : NULL;
}

/* Name and loader back from a registry key (the map keeps its keys NUL-terminated). */
static const char *reg_key_name(const void *key, size_t klen, int64_t *loader_id)
{
    assert(klen >= 8);
    (void)klen;
    *loader_id = (int64_t)cmr_le64(key);
    return (const char *)key + 8;
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
    size_t it = 0;
    void *val;
    while (cmr_map_next(&c->reg, &it, NULL, NULL, &val)) {
        reg_entry_t *r = val;
        if (r->handle && release_handle)
            release_handle(r->handle, opaque);
        free(r);
    }
    cmr_map_free(&c->reg);
    cmr_buf_free(&c->key);
    cmr_u64map_free(&c->never_send);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* --- never-send set (lock held) --------------------------------------------------------- */

static bool set_contains(const cmr_class_cache_t *c, uint64_t h)
{
    return cmr_u64map_has(&c->never_send, h);
}

static void set_add(cmr_class_cache_t *c, uint64_t h)
{
    /* out of memory: not recorded, the class is just sent again later */
    (void)cmr_u64map_put(&c->never_send, h, NULL);
}

static void set_remove(cmr_class_cache_t *c, uint64_t h)
{
    cmr_u64map_del(&c->never_send, h, NULL);
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

/* The first digest given for a class stays (the original bytes'); a later, different one
 * takes the second slot (the latest capture). */
static void reg_add_digest(reg_entry_t *r, const uint8_t *digest)
{
    if (!r || !digest)
        return;
    cmr_class_digests_t *d = &r->digests;
    if (d->n == 0) {
        memcpy(d->d[0], digest, CMR_TRUST_DIGEST_BYTES);
        d->n = 1;
    } else if (memcmp(d->d[0], digest, CMR_TRUST_DIGEST_BYTES) != 0) {
        memcpy(d->d[1], digest, CMR_TRUST_DIGEST_BYTES);
        d->n = 2;
    }
}

/* The registry entry of (name, loader), created (hash 0, no handle) when asked to; NULL
 * when absent or when memory ran out. */
static reg_entry_t *reg_find(cmr_class_cache_t *c, const char *name, int64_t loader_id, bool create)
{
    const cmr_buf_t *k = reg_key(c, name, loader_id);
    if (!k)
        return NULL;
    if (!create)
        return cmr_map_get(&c->reg, k->data, k->len);
    bool created = false;
    void **slot = cmr_map_get_slot(&c->reg, k->data, k->len, &created);
    if (!slot)
        return NULL;
    if (created && !(*slot = calloc(1, sizeof(reg_entry_t)))) {
        cmr_map_del(&c->reg, k->data, k->len, NULL);
        return NULL;
    }
    return *slot;
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

/* Calls fn, under the mutex, for every registered class named `name` (NULL:
 * every class with instrumented bytes from the cache in effect); stops at fn's first
 * non-zero value. The loader is part of the key: every entry is walked (commands are rare). */
static int visit_where(cmr_class_cache_t *c, const char *name, cmr_class_visit_fn *fn, void *opaque)
{
    int rc = 0;
    pthread_mutex_lock(&c->lock);
    size_t it = 0, klen;
    const void *key;
    void *val;
    while (rc == 0 && cmr_map_next(&c->reg, &it, &key, &klen, &val)) {
        int64_t loader_id;
        const char *rname = reg_key_name(key, klen, &loader_id);
        const reg_entry_t *r = val;
        if (name ? strcmp(rname, name) == 0 : r->has_applied)
            rc = fn(rname, loader_id, r->hash, &r->digests, r->handle, opaque);
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int cmr_class_cache_visit(cmr_class_cache_t *c, const char *name, cmr_class_visit_fn *fn, void *opaque)
{
    return visit_where(c, name, fn, opaque);
}

void cmr_class_cache_set_applied(cmr_class_cache_t *c, const char *name, int64_t loader_id,
                                 const uint8_t digest[CMR_TRUST_DIGEST_BYTES])
{
    pthread_mutex_lock(&c->lock);
    reg_entry_t *r = reg_find(c, name, loader_id, digest != NULL);
    if (r) {
        r->has_applied = digest != NULL;
        if (digest)
            memcpy(r->applied, digest, CMR_TRUST_DIGEST_BYTES);
    }
    pthread_mutex_unlock(&c->lock);
}

bool cmr_class_cache_applied_of(cmr_class_cache_t *c, const char *name, int64_t loader_id,
                                uint8_t out[CMR_TRUST_DIGEST_BYTES])
{
    pthread_mutex_lock(&c->lock);
    reg_entry_t *r = reg_find(c, name, loader_id, false);
    bool has = r && r->has_applied;
    if (has)
        memcpy(out, r->applied, CMR_TRUST_DIGEST_BYTES);
    pthread_mutex_unlock(&c->lock);
    return has;
}

int cmr_class_cache_visit_applied(cmr_class_cache_t *c, cmr_class_visit_fn *fn, void *opaque)
{
    return visit_where(c, NULL, fn, opaque);
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

bool cmr_class_cache_digest_of(cmr_class_cache_t *c, const char *name, int64_t loader_id,
                               uint8_t out[CMR_TRUST_DIGEST_BYTES])
{
    pthread_mutex_lock(&c->lock);
    reg_entry_t *r = reg_find(c, name, loader_id, false);
    bool known = r && r->digests.n > 0;
    if (known)
        memcpy(out, r->digests.d[0], CMR_TRUST_DIGEST_BYTES);
    pthread_mutex_unlock(&c->lock);
    return known;
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
    size_t n = cmr_map_count(&c->reg);
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
                           const uint8_t digest[CMR_TRUST_DIGEST_BYTES], const uint8_t *bytes, size_t len,
                           cmr_class_cause_t cause, int64_t loaded_ns)
{
    bool queued = false;
    pthread_mutex_lock(&c->lock);
    c->stats.seen++;
    reg_entry_t *r = reg_find(c, name, loader_id, true);
    if (r) {
        r->hash = hash;
        r->loaded_ns = loaded_ns;
        /* a class defined anew under the same name and loader (a loader that defines it
         * again after unloading) has new original bytes */
        r->digests.n = 0;
        reg_add_digest(r, digest);
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
                                  const uint8_t digest[CMR_TRUST_DIGEST_BYTES], const uint8_t *bytes, size_t len,
                                  int64_t request_id)
{
    pthread_mutex_lock(&c->lock);
    reg_add_digest(reg_find(c, name, loader_id, false), digest);
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

size_t cmr_class_cache_requeue_all(cmr_class_cache_t *c, bool (*skip)(const char *name, int64_t loader_id, void *ud),
                                   void *ud, int64_t request_id)
{
    size_t n = 0, it = 0, klen;
    const void *key;
    void *val;
    pthread_mutex_lock(&c->lock);
    while (cmr_map_next(&c->reg, &it, &key, &klen, &val)) {
        int64_t loader_id;
        const char *name = reg_key_name(key, klen, &loader_id);
        const reg_entry_t *r = val;
        if (r->hash == 0 || (skip && skip(name, loader_id, ud))) /* unread ones are queued already */
            continue;
        cmr_class_entry_t *e = entry_new(name, loader_id, r->hash, CMR_CLASS_RESEND, request_id);
        if (!e)
            break;
        queue_push(c, e);
        c->stats.queued++;
        n++;
    }
    pthread_mutex_unlock(&c->lock);
    return n;
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

bool cmr_class_cache_attach_bytes(cmr_class_cache_t *c, cmr_class_entry_t *e, uint64_t hash,
                                  const uint8_t digest[CMR_TRUST_DIGEST_BYTES], const uint8_t *bytes, size_t len)
{
    bool queued = false;
    pthread_mutex_lock(&c->lock);
    assert(c->in_flight > 0); /* only entries taken from the queue come back */
    c->in_flight--;
    bool unread = e->hash == 0 && e->cause != CMR_CLASS_RESEND;
    reg_entry_t *r = reg_find(c, e->name, e->loader_id, unread);
    if (unread && r)
        r->hash = hash;
    reg_add_digest(r, digest);
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
    assert(c->in_flight > 0); /* only entries taken from the queue come back */
    c->in_flight--;
    assert(!e->bytes || c->buffered >= e->len);
    c->buffered -= e->bytes ? e->len : 0;
    pthread_mutex_unlock(&c->lock);
    entry_free(e);
}

void cmr_class_cache_delivered(cmr_class_cache_t *c, cmr_class_entry_t *e, bool ok)
{
    pthread_mutex_lock(&c->lock);
    assert(c->in_flight > 0); /* only entries taken from the queue come back */
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

/*
 * instr_cache.c - the class cache over RocksDB (see instr_cache.h for the key layout).
 *
 * Keys are exact: built in growable buffers, never cut, whatever the length of the class
 * names in them. Values keep their binary layout (big-endian numbers, NUL-terminated ids).
 */
#include "cmr/instr_cache.h"

#include <assert.h>
#include <rocksdb/c.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/buf.h"
#include "cmr/bytes.h"
#include "cmr/log.h"

struct cmr_instr_cache {
    rocksdb_t *db;
    rocksdb_options_t *opts;
    rocksdb_readoptions_t *ro;
    rocksdb_writeoptions_t *wo;
    rocksdb_writebatch_wi_t *batch;
    uint64_t budget;
    uint64_t unpinned; /* unpinned bytes held (committed + pending) */
    uint64_t seq;      /* next eviction sequence */
    uint64_t committed_unpinned, committed_seq;
    bool failed; /* a write of the pending batch failed (out of memory): commit fails */
};

/* --- keys and values ------------------------------------------------------------- */

/* Keys and values are built in cmr_buf_t: exact, of any length (class names included). A
 * buffer that ran out of memory is never written: the write fails, and so does the next
 * commit (c->failed), so that a caller that ignores a put's result cannot commit half a
 * change. */

static void k_begin(cmr_buf_t *k, char kind)
{
    cmr_buf_reset(k);
    cmr_buf_putc(k, kind);
}

/* A string part followed by its NUL (values, and keys where more parts follow). */
static void k_strz(cmr_buf_t *k, const char *s)
{
    cmr_buf_puts(k, s);
    cmr_buf_putc(k, '\0');
}

/* The key of a record about one 64-bit id: kind, id. */
static void k_id(cmr_buf_t *k, char kind, uint64_t id)
{
    k_begin(k, kind);
    cmr_buf_put_be64(k, id);
}

/* Copies the n bytes at s and a NUL into out (outlen bytes). -1 when they do not fit. */
static int copy_id(char *out, size_t outlen, const char *s, size_t n)
{
    if (n >= outlen)
        return -1;
    memcpy(out, s, n);
    out[n] = '\0';
    return 0;
}

/* Copies the NUL-terminated string at *s (before end) into out (outlen bytes) and moves
 * *s past it. -1 when there is no NUL or the string does not fit: a corrupt record, never
 * a cut identifier. */
static int take_strz(const char **s, const char *end, char *out, size_t outlen)
{
    const char *z = *s < end ? memchr(*s, 0, (size_t)(end - *s)) : NULL;
    if (!z || copy_id(out, outlen, *s, (size_t)(z - *s)) != 0)
        return -1;
    *s = z + 1;
    return 0;
}

/* Both ids into fields of ilen and elen bytes, or neither. */
static int set_ids(char *inst, size_t ilen, char *env, size_t elen, const char *instance_id, const char *env_id)
{
    size_t il = strlen(instance_id), el = strlen(env_id);
    if (il >= ilen || el >= elen)
        return -1;
    copy_id(inst, ilen, instance_id, il);
    copy_id(env, elen, env_id, el);
    return 0;
}

int cmr_instr_class_rec_ids(cmr_instr_class_rec_t *r, const char *instance_id, const char *env_id)
{
    return set_ids(r->instance_id, sizeof r->instance_id, r->env_id, sizeof r->env_id, instance_id, env_id);
}

int cmr_instr_agent_rec_ids(cmr_instr_agent_rec_t *r, const char *instance_id, const char *env_id)
{
    return set_ids(r->instance_id, sizeof r->instance_id, r->env_id, sizeof r->env_id, instance_id, env_id);
}

/* The tail of class and agent records: instance id NUL environment id NUL. */
static void put_ids(cmr_buf_t *v, const char *instance_id, const char *env_id)
{
    k_strz(v, instance_id);
    k_strz(v, env_id);
}

static int take_ids(const char *s, const char *end, char *instance_id, size_t ilen, char *env_id, size_t elen)
{
    return take_strz(&s, end, instance_id, ilen) == 0 && take_strz(&s, end, env_id, elen) == 0 ? 0 : -1;
}

/* --- raw access --------------------------------------------------------------------- */

static int get(cmr_instr_cache_t *c, const cmr_buf_t *k, char **val, size_t *len)
{
    *val = NULL;
    if (!cmr_buf_ok(k)) {
        cmr_log(CMR_LOG_ERROR, "instr.db_read_failed", "error=\"out of memory\"");
        return -1;
    }
    char *err = NULL;
    *val =
        rocksdb_writebatch_wi_get_from_batch_and_db(c->batch, c->db, c->ro, (const char *)k->data, k->len, len, &err);
    if (err) {
        cmr_log(CMR_LOG_ERROR, "instr.db_read_failed", "error=\"%s\"", err);
        free(err);
        return -1;
    }
    return *val != NULL;
}

static int exists(cmr_instr_cache_t *c, const cmr_buf_t *k)
{
    char *v;
    size_t n;
    int rc = get(c, k, &v, &n);
    free(v);
    return rc;
}

/* A 64-bit value (big-endian): 1 found, 0 absent or not 8 bytes, -1 error. */
static int get_u64(cmr_instr_cache_t *c, const cmr_buf_t *k, uint64_t *out)
{
    char *v;
    size_t n;
    int rc = get(c, k, &v, &n);
    if (rc == 1 && n == 8)
        *out = cmr_be64((const uint8_t *)v);
    else if (rc == 1)
        rc = 0;
    free(v);
    return rc;
}

static int put(cmr_instr_cache_t *c, const cmr_buf_t *k, const void *v, size_t n)
{
    if (!cmr_buf_ok(k)) {
        c->failed = true;
        return -1;
    }
    rocksdb_writebatch_wi_put(c->batch, (const char *)k->data, k->len, v, n);
    return 0;
}

static int put_buf(cmr_instr_cache_t *c, const cmr_buf_t *k, const cmr_buf_t *v)
{
    if (!cmr_buf_ok(v)) {
        c->failed = true;
        return -1;
    }
    return put(c, k, v->data, v->len);
}

static int put_u64(cmr_instr_cache_t *c, const cmr_buf_t *k, uint64_t v)
{
    uint8_t b[8];
    cmr_put_be64(b, v);
    return put(c, k, b, sizeof b);
}

static int del(cmr_instr_cache_t *c, const cmr_buf_t *k)
{
    if (!cmr_buf_ok(k)) {
        c->failed = true;
        return -1;
    }
    rocksdb_writebatch_wi_delete(c->batch, (const char *)k->data, k->len);
    return 0;
}

/* Iterates the keys starting with prefix, pending batch included. fn gets the key suffix
 * and the value. */
typedef int(raw_fn)(const unsigned char *suffix, size_t n, const char *val, size_t vlen, void *ud);

static int each_prefix(cmr_instr_cache_t *c, const cmr_buf_t *prefix, raw_fn *fn, void *ud)
{
    if (!cmr_buf_ok(prefix))
        return -1;
    /* the batch iterator takes the database iterator over */
    rocksdb_iterator_t *it =
        rocksdb_writebatch_wi_create_iterator_with_base(c->batch, rocksdb_create_iterator(c->db, c->ro));
    const char *pb = (const char *)prefix->data;
    int rc = 0;
    for (rocksdb_iter_seek(it, pb, prefix->len); rc == 0 && rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t kl, vl;
        const char *k = rocksdb_iter_key(it, &kl);
        if (kl < prefix->len || memcmp(k, pb, prefix->len) != 0)
            break;
        const char *v = rocksdb_iter_value(it, &vl);
        rc = fn((const unsigned char *)k + prefix->len, kl - prefix->len, v, vl, ud);
    }
    rocksdb_iter_destroy(it);
    return rc;
}

/* Records keyed by a kind and one 64-bit id (the key is built and freed here). */
static int id_put(cmr_instr_cache_t *c, char kind, uint64_t id, const void *v, size_t n)
{
    cmr_buf_t k = {0};
    k_id(&k, kind, id);
    int rc = put(c, &k, v, n);
    cmr_buf_free(&k);
    return rc;
}

static int id_exists(cmr_instr_cache_t *c, char kind, uint64_t id)
{
    cmr_buf_t k = {0};
    k_id(&k, kind, id);
    int rc = exists(c, &k);
    cmr_buf_free(&k);
    return rc;
}

static int id_get_u64(cmr_instr_cache_t *c, char kind, uint64_t id, uint64_t *out)
{
    cmr_buf_t k = {0};
    k_id(&k, kind, id);
    int rc = get_u64(c, &k, out);
    cmr_buf_free(&k);
    return rc;
}

static int id_put_u64(cmr_instr_cache_t *c, char kind, uint64_t id, uint64_t v)
{
    uint8_t b[8];
    cmr_put_be64(b, v);
    return id_put(c, kind, id, b, sizeof b);
}

/* --- open / commit ------------------------------------------------------------------ */

static void load_counters(cmr_instr_cache_t *c)
{
    cmr_buf_t k = {0};
    k_begin(&k, 'S');
    char *v;
    size_t n;
    if (get(c, &k, &v, &n) == 1 && n == 16) {
        c->unpinned = cmr_be64((const uint8_t *)v);
        c->seq = cmr_be64((const uint8_t *)v + 8);
    }
    free(v);
    cmr_buf_free(&k);
    c->committed_unpinned = c->unpinned;
    c->committed_seq = c->seq;
}

static void put_counters(cmr_instr_cache_t *c)
{
    cmr_buf_t k = {0};
    k_begin(&k, 'S');
    uint8_t v[16];
    cmr_put_be64(v, c->unpinned);
    cmr_put_be64(v + 8, c->seq);
    put(c, &k, v, sizeof v);
    cmr_buf_free(&k);
}

cmr_instr_cache_t *cmr_instr_cache_open(const char *path, uint64_t budget, int sync, char *err, size_t errlen)
{
    cmr_instr_cache_t *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    c->budget = budget;
    c->opts = rocksdb_options_create();
    rocksdb_options_set_create_if_missing(c->opts, 1);
    rocksdb_options_set_compression(c->opts, rocksdb_lz4_compression);
    char *e = NULL;
    c->db = rocksdb_open(c->opts, path, &e);
    if (!c->db) {
        /* an error message: cutting a very long path is fine */
        (void)snprintf(err, errlen, "cannot open class cache %s: %s", path, e ? e : "?");
        free(e);
        rocksdb_options_destroy(c->opts);
        free(c);
        return NULL;
    }
    c->ro = rocksdb_readoptions_create();
    c->wo = rocksdb_writeoptions_create();
    rocksdb_writeoptions_set_sync(c->wo, (unsigned char)(sync != 0));
    c->batch = rocksdb_writebatch_wi_create(0, 1);
    load_counters(c);
    return c;
}

void cmr_instr_cache_close(cmr_instr_cache_t *c)
{
    if (!c)
        return;
    rocksdb_writebatch_wi_destroy(c->batch);
    rocksdb_writeoptions_destroy(c->wo);
    rocksdb_readoptions_destroy(c->ro);
    rocksdb_close(c->db);
    rocksdb_options_destroy(c->opts);
    free(c);
}

typedef struct evict_item {
    uint64_t seq, hash, len;
} evict_item_t;

typedef struct evict_ctx {
    uint64_t over;       /* bytes still to free */
    evict_item_t *items; /* owned */
    size_t n, cap;
} evict_ctx_t;

/* Collects the oldest eviction entries until enough bytes are covered (no writes while
 * the batch is being iterated). */
static int evict_collect(const unsigned char *suffix, size_t n, const char *val, size_t vlen, void *ud)
{
    evict_ctx_t *x = ud;
    if (x->over == 0)
        return 1;
    if (n != 8 || vlen != 16)
        return 0;
    if (CMR_ARRAY_GROW(x->items, x->cap, x->n + 1) != 0)
        return 1;
    evict_item_t *it = &x->items[x->n++];
    it->seq = cmr_be64(suffix);
    it->hash = cmr_be64((const uint8_t *)val);
    it->len = cmr_be64((const uint8_t *)val + 8);
    x->over = x->over > it->len ? x->over - it->len : 0;
    return 0;
}

static void evict(cmr_instr_cache_t *c)
{
    assert(c->unpinned > c->budget);
    cmr_buf_t k = {0};
    k_begin(&k, 'e');
    evict_ctx_t x = {c->unpinned - c->budget, NULL, 0, 0};
    each_prefix(c, &k, evict_collect, &x);
    for (size_t i = 0; i < x.n; i++) {
        k_id(&k, 'e', x.items[i].seq);
        del(c, &k);
        k_id(&k, 'p', x.items[i].hash);
        if (exists(c, &k) == 0) {
            k_id(&k, 'b', x.items[i].hash);
            del(c, &k);
        }
        c->unpinned = c->unpinned > x.items[i].len ? c->unpinned - x.items[i].len : 0;
    }
    free(x.items);
    cmr_buf_free(&k);
}

int cmr_instr_cache_commit(cmr_instr_cache_t *c, char *err, size_t errlen)
{
    if (!c->failed && c->unpinned > c->budget)
        evict(c);
    if (!c->failed)
        put_counters(c);
    char *e = NULL;
    if (!c->failed)
        rocksdb_write_writebatch_wi(c->db, c->wo, c->batch, &e);
    if (e || c->failed) {
        /* an error message: cutting a very long one is fine */
        (void)snprintf(err, errlen, "class cache write failed: %s", e ? e : "out of memory");
        free(e);
        cmr_instr_cache_rollback(c);
        return -1;
    }
    rocksdb_writebatch_wi_clear(c->batch);
    c->committed_unpinned = c->unpinned;
    c->committed_seq = c->seq;
    return 0;
}

void cmr_instr_cache_rollback(cmr_instr_cache_t *c)
{
    rocksdb_writebatch_wi_clear(c->batch);
    c->unpinned = c->committed_unpinned;
    c->seq = c->committed_seq;
    c->failed = false;
}

uint64_t cmr_instr_cache_unpinned_bytes(const cmr_instr_cache_t *c)
{
    return c->unpinned;
}

/* --- metadata and bytes ------------------------------------------------------------- */

int cmr_instr_cache_meta(cmr_instr_cache_t *c, uint64_t hash, cmr_instr_meta_t *out)
{
    cmr_buf_t k = {0};
    k_id(&k, 'h', hash);
    char *v;
    size_t n;
    int rc = get(c, &k, &v, &n);
    if (rc == 1 && cmr_instr_meta_decode(v, n, out) != 0) {
        cmr_log(CMR_LOG_WARN, "instr.cache_corrupt", "kind=meta hash=%016llx", (unsigned long long)hash);
        rc = 0; /* parsed again from the bytes */
    }
    free(v);
    cmr_buf_free(&k);
    return rc;
}

int cmr_instr_cache_put_meta(cmr_instr_cache_t *c, uint64_t hash, const cmr_instr_meta_t *m)
{
    cmr_buf_t k = {0}, v = {0};
    int rc = cmr_instr_meta_encode(m, &v);
    if (rc == 0) {
        k_id(&k, 'h', hash);
        rc = put_buf(c, &k, &v);
    }
    cmr_buf_free(&v);
    cmr_buf_free(&k);
    return rc;
}

int cmr_instr_cache_bytes(cmr_instr_cache_t *c, uint64_t hash, cmr_buf_t *out)
{
    cmr_buf_t k = {0};
    k_id(&k, 'b', hash);
    char *v;
    size_t n;
    int rc = get(c, &k, &v, &n);
    if (rc == 1) {
        cmr_buf_reset(out);
        cmr_buf_put(out, v, n);
        rc = cmr_buf_ok(out) ? 1 : -1;
    }
    free(v);
    cmr_buf_free(&k);
    return rc;
}

int cmr_instr_cache_pin(cmr_instr_cache_t *c, uint64_t hash)
{
    return id_put(c, 'p', hash, "", 0);
}

/* Records unpinned bytes in the eviction order: e <seq> -> hash, length. */
static int put_evict_entry(cmr_instr_cache_t *c, uint64_t hash, size_t len)
{
    uint8_t v[16];
    cmr_put_be64(v, hash);
    cmr_put_be64(v + 8, len);
    int rc = id_put(c, 'e', c->seq++, v, sizeof v);
    if (rc == 0)
        c->unpinned += len;
    return rc;
}

int cmr_instr_cache_put_bytes(cmr_instr_cache_t *c, uint64_t hash, const void *data, size_t len, int pinned)
{
    int have = id_exists(c, 'b', hash), rc = 0;
    if (have < 0)
        rc = -1;
    else if (pinned) {
        rc = cmr_instr_cache_pin(c, hash);
        if (rc == 0 && !have)
            rc = id_put(c, 'b', hash, data, len);
    } else if (!have && c->budget != 0) {
        rc = id_put(c, 'b', hash, data, len);
        if (rc == 0)
            rc = put_evict_entry(c, hash, len);
    }
    return rc;
}

/* --- records ------------------------------------------------------------------------ */

/* t <agent> <class name> */
static void type_key(cmr_buf_t *k, uint64_t agent, const char *name)
{
    k_id(k, 't', agent);
    cmr_buf_puts(k, name);
}

int cmr_instr_cache_type(cmr_instr_cache_t *c, uint64_t agent, const char *name, uint64_t *hash)
{
    cmr_buf_t k = {0};
    type_key(&k, agent, name);
    int rc = get_u64(c, &k, hash);
    cmr_buf_free(&k);
    return rc;
}

int cmr_instr_cache_put_type(cmr_instr_cache_t *c, uint64_t agent, const char *name, uint64_t hash)
{
    cmr_buf_t k = {0};
    type_key(&k, agent, name);
    int rc = put_u64(c, &k, hash);
    cmr_buf_free(&k);
    return rc;
}

/* k <agent> <loader> <class name> */
static void class_key(cmr_buf_t *k, uint64_t agent, int64_t loader, const char *name)
{
    k_id(k, 'k', agent);
    cmr_buf_put_be64(k, (uint64_t)loader);
    cmr_buf_puts(k, name);
}

/* class record: hash, signature, revision (8 bytes each), resend (4), instance id NUL env
 * id NUL */
#define CLASS_REC_FIXED 28

static int decode_class(const char *v, size_t n, cmr_instr_class_rec_t *r)
{
    const uint8_t *p = (const uint8_t *)v;
    if (n < CLASS_REC_FIXED)
        return -1;
    memset(r, 0, sizeof *r);
    r->hash = cmr_be64(p);
    r->signature = cmr_be64(p + 8);
    r->revision = (int64_t)cmr_be64(p + 16);
    r->resend = cmr_be32(p + 24);
    return take_ids(v + CLASS_REC_FIXED, v + n, r->instance_id, sizeof r->instance_id, r->env_id, sizeof r->env_id);
}

int cmr_instr_cache_class(cmr_instr_cache_t *c, uint64_t agent, int64_t loader, const char *name,
                          cmr_instr_class_rec_t *out)
{
    cmr_buf_t k = {0};
    class_key(&k, agent, loader, name);
    char *v;
    size_t n;
    int rc = get(c, &k, &v, &n);
    if (rc == 1 && decode_class(v, n, out) != 0)
        rc = 0;
    free(v);
    cmr_buf_free(&k);
    return rc;
}

int cmr_instr_cache_put_class(cmr_instr_cache_t *c, uint64_t agent, int64_t loader, const char *name,
                              const cmr_instr_class_rec_t *r)
{
    cmr_buf_t k = {0}, v = {0};
    class_key(&k, agent, loader, name);
    cmr_buf_put_be64(&v, r->hash);
    cmr_buf_put_be64(&v, r->signature);
    cmr_buf_put_be64(&v, (uint64_t)r->revision);
    cmr_buf_put_be32(&v, r->resend);
    put_ids(&v, r->instance_id, r->env_id);
    int rc = put_buf(c, &k, &v);
    cmr_buf_free(&v);
    cmr_buf_free(&k);
    return rc;
}

/* w <agent> <type> 0 [<loader> <name>] (without the name: the prefix of all the waiters) */
static void waiting_key(cmr_buf_t *k, uint64_t agent, const char *type, int64_t loader, const char *name)
{
    k_id(k, 'w', agent);
    k_strz(k, type);
    if (name) {
        cmr_buf_put_be64(k, (uint64_t)loader);
        cmr_buf_puts(k, name);
    }
}

int cmr_instr_cache_put_waiting(cmr_instr_cache_t *c, uint64_t agent, const char *type, int64_t loader,
                                const char *name)
{
    cmr_buf_t k = {0};
    waiting_key(&k, agent, type, loader, name);
    int rc = put(c, &k, "", 0);
    cmr_buf_free(&k);
    return rc;
}

int cmr_instr_cache_del_waiting(cmr_instr_cache_t *c, uint64_t agent, const char *type, int64_t loader,
                                const char *name)
{
    cmr_buf_t k = {0};
    waiting_key(&k, agent, type, loader, name);
    int rc = del(c, &k);
    cmr_buf_free(&k);
    return rc;
}

/* agent record: revision (8 bytes), partition (4), instance NUL env NUL */
#define AGENT_REC_FIXED 12

static int decode_agent(const char *v, size_t n, cmr_instr_agent_rec_t *r)
{
    const uint8_t *p = (const uint8_t *)v;
    if (n < AGENT_REC_FIXED)
        return -1;
    memset(r, 0, sizeof *r);
    r->revision = (int64_t)cmr_be64(p);
    r->partition = (int32_t)cmr_be32(p + 8);
    return take_ids(v + AGENT_REC_FIXED, v + n, r->instance_id, sizeof r->instance_id, r->env_id, sizeof r->env_id);
}

int cmr_instr_cache_agent(cmr_instr_cache_t *c, uint64_t agent, cmr_instr_agent_rec_t *out)
{
    cmr_buf_t k = {0};
    k_id(&k, 'a', agent);
    char *v;
    size_t n;
    int rc = get(c, &k, &v, &n);
    if (rc == 1 && decode_agent(v, n, out) != 0)
        rc = 0;
    free(v);
    cmr_buf_free(&k);
    return rc;
}

int cmr_instr_cache_put_agent(cmr_instr_cache_t *c, uint64_t agent, const cmr_instr_agent_rec_t *r)
{
    cmr_buf_t k = {0}, v = {0};
    k_id(&k, 'a', agent);
    cmr_buf_put_be64(&v, (uint64_t)r->revision);
    cmr_buf_put_be32(&v, (uint32_t)r->partition);
    put_ids(&v, r->instance_id, r->env_id);
    int rc = put_buf(c, &k, &v);
    cmr_buf_free(&v);
    cmr_buf_free(&k);
    return rc;
}

/* --- iterations --------------------------------------------------------------------- */

/* One iteration over records: the caller's callback (one of the three) and a buffer for
 * the class name of the current key (exact, any length). */
typedef struct each_ctx {
    cmr_instr_class_fn *class_fn;
    cmr_instr_waiting_fn *waiting_fn;
    cmr_instr_agent_fn *agent_fn;
    void *ud;
    cmr_buf_t name; /* owned */
} each_ctx_t;

/* A key suffix <loader> <name>: the loader, and the name as a C string (NULL when the
 * suffix is too short or memory ran out). */
static const char *loader_and_name(each_ctx_t *x, const unsigned char *suffix, size_t n, int64_t *loader)
{
    if (n < 8)
        return NULL;
    *loader = (int64_t)cmr_be64(suffix);
    cmr_buf_reset(&x->name);
    cmr_buf_put(&x->name, suffix + 8, n - 8);
    return cmr_buf_ok(&x->name) ? cmr_buf_str(&x->name) : NULL;
}

static int class_step(const unsigned char *suffix, size_t n, const char *val, size_t vlen, void *ud)
{
    each_ctx_t *x = ud;
    cmr_instr_class_rec_t r;
    int64_t loader;
    const char *name = loader_and_name(x, suffix, n, &loader);
    if (!name || decode_class(val, vlen, &r) != 0)
        return 0;
    return x->class_fn(loader, name, &r, x->ud);
}

static int wait_step(const unsigned char *suffix, size_t n, const char *val, size_t vlen, void *ud)
{
    (void)val;
    (void)vlen;
    each_ctx_t *x = ud;
    int64_t loader;
    const char *name = loader_and_name(x, suffix, n, &loader);
    return name ? x->waiting_fn(loader, name, x->ud) : 0;
}

static int agent_step(const unsigned char *suffix, size_t n, const char *val, size_t vlen, void *ud)
{
    each_ctx_t *x = ud;
    cmr_instr_agent_rec_t r;
    if (n != 8 || decode_agent(val, vlen, &r) != 0)
        return 0;
    return x->agent_fn(cmr_be64(suffix), &r, x->ud);
}

/* Runs one iteration over the keys starting with prefix (freed here, as is the context). */
static int each_run(cmr_instr_cache_t *c, cmr_buf_t *prefix, raw_fn *step, each_ctx_t *x)
{
    int rc = each_prefix(c, prefix, step, x);
    cmr_buf_free(&x->name);
    cmr_buf_free(prefix);
    return rc;
}

int cmr_instr_cache_each_class(cmr_instr_cache_t *c, uint64_t agent, cmr_instr_class_fn *fn, void *ud)
{
    cmr_buf_t k = {0};
    k_id(&k, 'k', agent);
    each_ctx_t x = {.class_fn = fn, .ud = ud};
    return each_run(c, &k, class_step, &x);
}

int cmr_instr_cache_each_waiting(cmr_instr_cache_t *c, uint64_t agent, const char *type, cmr_instr_waiting_fn *fn,
                                 void *ud)
{
    cmr_buf_t k = {0};
    waiting_key(&k, agent, type, 0, NULL);
    each_ctx_t x = {.waiting_fn = fn, .ud = ud};
    return each_run(c, &k, wait_step, &x);
}

int cmr_instr_cache_each_agent(cmr_instr_cache_t *c, cmr_instr_agent_fn *fn, void *ud)
{
    cmr_buf_t k = {0};
    k_begin(&k, 'a');
    each_ctx_t x = {.agent_fn = fn, .ud = ud};
    return each_run(c, &k, agent_step, &x);
}

/* --- environments, methods, offsets --------------------------------------------------- */

static void env_run_key(cmr_buf_t *k, const char *env_id)
{
    k_begin(k, 'v');
    cmr_buf_puts(k, env_id);
}

int cmr_instr_cache_env_run(cmr_instr_cache_t *c, const char *env_id, int64_t *revision)
{
    cmr_buf_t k = {0};
    env_run_key(&k, env_id);
    uint64_t v = 0;
    int rc = get_u64(c, &k, &v);
    if (rc == 1)
        *revision = (int64_t)v;
    cmr_buf_free(&k);
    return rc;
}

int cmr_instr_cache_put_env_run(cmr_instr_cache_t *c, const char *env_id, int64_t revision)
{
    cmr_buf_t k = {0};
    env_run_key(&k, env_id);
    int rc = put_u64(c, &k, (uint64_t)revision);
    cmr_buf_free(&k);
    return rc;
}

int cmr_instr_cache_method_sent(cmr_instr_cache_t *c, uint64_t method_id)
{
    return id_exists(c, 'm', method_id);
}

int cmr_instr_cache_put_method_sent(cmr_instr_cache_t *c, uint64_t method_id)
{
    return id_put(c, 'm', method_id, "", 0);
}

int cmr_instr_cache_offset(cmr_instr_cache_t *c, int32_t partition, int64_t *offset)
{
    uint64_t v = 0;
    int rc = id_get_u64(c, 'o', (uint64_t)(uint32_t)partition, &v);
    if (rc == 1)
        *offset = (int64_t)v;
    return rc;
}

int cmr_instr_cache_put_offset(cmr_instr_cache_t *c, int32_t partition, int64_t offset, int64_t *prev)
{
    int64_t cur = -1;
    int had = cmr_instr_cache_offset(c, partition, &cur);
    if (prev)
        *prev = had == 1 ? cur : -1;
    if (had == 1 && cur >= offset)
        return 0;
    return id_put_u64(c, 'o', (uint64_t)(uint32_t)partition, (uint64_t)offset);
}

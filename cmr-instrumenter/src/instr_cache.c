/*
 * instr_cache.c - the class cache over RocksDB (see instr_cache.h for the key layout).
 */
#include "cmr/instr_cache.h"

#include <rocksdb/c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
};

/* --- keys --------------------------------------------------------------------------- */

typedef struct key {
    char b[1024];
    size_t n;
} key_t_;

static void k_init(key_t_ *k, char kind)
{
    k->b[0] = kind;
    k->n = 1;
}

static void k_u64(key_t_ *k, uint64_t v)
{
    for (int i = 7; i >= 0 && k->n < sizeof k->b; i--)
        k->b[k->n++] = (char)(v >> (8 * i));
}

static void k_str(key_t_ *k, const char *s)
{
    size_t n = strlen(s);
    if (n > sizeof k->b - k->n)
        n = sizeof k->b - k->n;
    memcpy(k->b + k->n, s, n);
    k->n += n;
}

static void k_nul(key_t_ *k)
{
    if (k->n < sizeof k->b)
        k->b[k->n++] = '\0';
}

static uint64_t rd_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

/* --- raw access --------------------------------------------------------------------- */

static int get(cmr_instr_cache_t *c, const key_t_ *k, char **val, size_t *len)
{
    char *err = NULL;
    *val = rocksdb_writebatch_wi_get_from_batch_and_db(c->batch, c->db, c->ro, k->b, k->n, len, &err);
    if (err) {
        cmr_log(CMR_LOG_ERROR, "instr.db_read_failed", "error=\"%s\"", err);
        free(err);
        return -1;
    }
    return *val != NULL;
}

static int exists(cmr_instr_cache_t *c, const key_t_ *k)
{
    char *v;
    size_t n;
    int rc = get(c, k, &v, &n);
    free(v);
    return rc;
}

static void put(cmr_instr_cache_t *c, const key_t_ *k, const void *v, size_t n)
{
    rocksdb_writebatch_wi_put(c->batch, k->b, k->n, v, n);
}

static void del(cmr_instr_cache_t *c, const key_t_ *k)
{
    rocksdb_writebatch_wi_delete(c->batch, k->b, k->n);
}

/* Iterates the keys starting with prefix, pending batch included. fn gets the key suffix
 * and the value. */
typedef int(raw_fn)(const unsigned char *suffix, size_t n, const char *val, size_t vlen, void *ud);

static int each_prefix(cmr_instr_cache_t *c, const key_t_ *prefix, raw_fn *fn, void *ud)
{
    /* the batch iterator takes the database iterator over */
    rocksdb_iterator_t *it =
        rocksdb_writebatch_wi_create_iterator_with_base(c->batch, rocksdb_create_iterator(c->db, c->ro));
    int rc = 0;
    for (rocksdb_iter_seek(it, prefix->b, prefix->n); rc == 0 && rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t kl, vl;
        const char *k = rocksdb_iter_key(it, &kl);
        if (kl < prefix->n || memcmp(k, prefix->b, prefix->n) != 0)
            break;
        const char *v = rocksdb_iter_value(it, &vl);
        rc = fn((const unsigned char *)k + prefix->n, kl - prefix->n, v, vl, ud);
    }
    rocksdb_iter_destroy(it);
    return rc;
}

/* --- open / commit ------------------------------------------------------------------ */

static void load_counters(cmr_instr_cache_t *c)
{
    key_t_ k;
    k_init(&k, 'S');
    char *v;
    size_t n;
    if (get(c, &k, &v, &n) == 1 && n == 16) {
        c->unpinned = rd_u64((unsigned char *)v);
        c->seq = rd_u64((unsigned char *)v + 8);
    }
    free(v);
    c->committed_unpinned = c->unpinned;
    c->committed_seq = c->seq;
}

static void put_counters(cmr_instr_cache_t *c)
{
    key_t_ k, v;
    k_init(&k, 'S');
    v.n = 0;
    k_u64(&v, c->unpinned);
    k_u64(&v, c->seq);
    put(c, &k, v.b, v.n);
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
        snprintf(err, errlen, "cannot open class cache %s: %s", path, e ? e : "?");
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

typedef struct evict_ctx {
    uint64_t over;        /* bytes still to free */
    uint64_t (*items)[3]; /* seq, hash, len */
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
    if (x->n == x->cap) {
        size_t cap = x->cap ? x->cap * 2 : 64;
        uint64_t(*items)[3] = realloc(x->items, cap * sizeof *items);
        if (!items)
            return 1;
        x->items = items;
        x->cap = cap;
    }
    uint64_t len = rd_u64((const unsigned char *)val + 8);
    x->items[x->n][0] = rd_u64(suffix);
    x->items[x->n][1] = rd_u64((const unsigned char *)val);
    x->items[x->n][2] = len;
    x->n++;
    x->over = x->over > len ? x->over - len : 0;
    return 0;
}

static void evict(cmr_instr_cache_t *c)
{
    key_t_ prefix;
    k_init(&prefix, 'e');
    evict_ctx_t x = {c->unpinned - c->budget, NULL, 0, 0};
    each_prefix(c, &prefix, evict_collect, &x);
    for (size_t i = 0; i < x.n; i++) {
        key_t_ ek, bk, pk;
        k_init(&ek, 'e');
        k_u64(&ek, x.items[i][0]);
        del(c, &ek);
        k_init(&pk, 'p');
        k_u64(&pk, x.items[i][1]);
        if (exists(c, &pk) == 0) {
            k_init(&bk, 'b');
            k_u64(&bk, x.items[i][1]);
            del(c, &bk);
        }
        c->unpinned = c->unpinned > x.items[i][2] ? c->unpinned - x.items[i][2] : 0;
    }
    free(x.items);
}

int cmr_instr_cache_commit(cmr_instr_cache_t *c, char *err, size_t errlen)
{
    if (c->unpinned > c->budget)
        evict(c);
    put_counters(c);
    char *e = NULL;
    rocksdb_write_writebatch_wi(c->db, c->wo, c->batch, &e);
    if (e) {
        snprintf(err, errlen, "class cache write failed: %s", e);
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
}

uint64_t cmr_instr_cache_unpinned_bytes(const cmr_instr_cache_t *c)
{
    return c->unpinned;
}

/* --- metadata and bytes ------------------------------------------------------------- */

int cmr_instr_cache_meta(cmr_instr_cache_t *c, uint64_t hash, cmr_instr_meta_t *out)
{
    key_t_ k;
    k_init(&k, 'h');
    k_u64(&k, hash);
    char *v;
    size_t n;
    int rc = get(c, &k, &v, &n);
    if (rc == 1 && cmr_instr_meta_decode(v, n, out) != 0) {
        cmr_log(CMR_LOG_WARN, "instr.cache_corrupt", "kind=meta hash=%016llx", (unsigned long long)hash);
        rc = 0; /* parsed again from the bytes */
    }
    free(v);
    return rc;
}

int cmr_instr_cache_put_meta(cmr_instr_cache_t *c, uint64_t hash, const cmr_instr_meta_t *m)
{
    cmr_buf_t b = {0};
    if (cmr_instr_meta_encode(m, &b) != 0) {
        cmr_buf_free(&b);
        return -1;
    }
    key_t_ k;
    k_init(&k, 'h');
    k_u64(&k, hash);
    put(c, &k, b.data, b.len);
    cmr_buf_free(&b);
    return 0;
}

int cmr_instr_cache_bytes(cmr_instr_cache_t *c, uint64_t hash, cmr_buf_t *out)
{
    key_t_ k;
    k_init(&k, 'b');
    k_u64(&k, hash);
    char *v;
    size_t n;
    int rc = get(c, &k, &v, &n);
    if (rc == 1) {
        cmr_buf_free(out);
        out->data = (uint8_t *)v;
        out->len = out->cap = n;
    }
    return rc;
}

int cmr_instr_cache_pin(cmr_instr_cache_t *c, uint64_t hash)
{
    key_t_ k;
    k_init(&k, 'p');
    k_u64(&k, hash);
    put(c, &k, "", 0);
    return 0;
}

int cmr_instr_cache_put_bytes(cmr_instr_cache_t *c, uint64_t hash, const void *data, size_t len, int pinned)
{
    key_t_ k;
    k_init(&k, 'b');
    k_u64(&k, hash);
    int have = exists(c, &k);
    if (have < 0)
        return -1;
    if (pinned) {
        cmr_instr_cache_pin(c, hash);
        if (!have)
            put(c, &k, data, len);
        return 0;
    }
    if (have || c->budget == 0)
        return 0;
    put(c, &k, data, len);
    key_t_ ek, ev;
    k_init(&ek, 'e');
    k_u64(&ek, c->seq++);
    ev.n = 0;
    k_u64(&ev, hash);
    k_u64(&ev, len);
    put(c, &ek, ev.b, ev.n);
    c->unpinned += len;
    return 0;
}

/* --- records ------------------------------------------------------------------------ */

int cmr_instr_cache_type(cmr_instr_cache_t *c, uint64_t agent, const char *name, uint64_t *hash)
{
    key_t_ k;
    k_init(&k, 't');
    k_u64(&k, agent);
    k_str(&k, name);
    char *v;
    size_t n;
    int rc = get(c, &k, &v, &n);
    if (rc == 1 && n == 8)
        *hash = rd_u64((unsigned char *)v);
    else if (rc == 1)
        rc = 0;
    free(v);
    return rc;
}

int cmr_instr_cache_put_type(cmr_instr_cache_t *c, uint64_t agent, const char *name, uint64_t hash)
{
    key_t_ k, v;
    k_init(&k, 't');
    k_u64(&k, agent);
    k_str(&k, name);
    v.n = 0;
    k_u64(&v, hash);
    put(c, &k, v.b, v.n);
    return 0;
}

static void class_key(key_t_ *k, uint64_t agent, int64_t loader, const char *name)
{
    k_init(k, 'k');
    k_u64(k, agent);
    k_u64(k, (uint64_t)loader);
    k_str(k, name);
}

/* class record: hash, signature, revision, resend, instance id NUL env id NUL */
static int decode_class(const char *v, size_t n, cmr_instr_class_rec_t *r)
{
    const unsigned char *p = (const unsigned char *)v;
    if (n < 28)
        return -1;
    memset(r, 0, sizeof *r);
    r->hash = rd_u64(p);
    r->signature = rd_u64(p + 8);
    r->revision = (int64_t)rd_u64(p + 16);
    r->resend = (uint32_t)(rd_u64(p + 20) & 0xffffffffu);
    const char *s = v + 28, *end = v + n;
    const char *z = memchr(s, 0, (size_t)(end - s));
    if (!z)
        return -1;
    snprintf(r->instance_id, sizeof r->instance_id, "%s", s);
    s = z + 1;
    z = s < end ? memchr(s, 0, (size_t)(end - s)) : NULL;
    if (!z)
        return -1;
    snprintf(r->env_id, sizeof r->env_id, "%s", s);
    return 0;
}

int cmr_instr_cache_class(cmr_instr_cache_t *c, uint64_t agent, int64_t loader, const char *name,
                          cmr_instr_class_rec_t *out)
{
    key_t_ k;
    class_key(&k, agent, loader, name);
    char *v;
    size_t n;
    int rc = get(c, &k, &v, &n);
    if (rc == 1 && decode_class(v, n, out) != 0)
        rc = 0;
    free(v);
    return rc;
}

int cmr_instr_cache_put_class(cmr_instr_cache_t *c, uint64_t agent, int64_t loader, const char *name,
                              const cmr_instr_class_rec_t *r)
{
    key_t_ k, v;
    class_key(&k, agent, loader, name);
    v.n = 0;
    k_u64(&v, r->hash);
    k_u64(&v, r->signature);
    k_u64(&v, (uint64_t)r->revision);
    uint64_t resend = (uint64_t)r->resend << 32;
    for (int i = 7; i >= 4; i--)
        v.b[v.n++] = (char)(resend >> (8 * i));
    k_str(&v, r->instance_id);
    k_nul(&v);
    k_str(&v, r->env_id);
    k_nul(&v);
    put(c, &k, v.b, v.n);
    return 0;
}

typedef struct class_iter {
    cmr_instr_class_fn *fn;
    void *ud;
} class_iter_t;

static int class_step(const unsigned char *suffix, size_t n, const char *val, size_t vlen, void *ud)
{
    class_iter_t *x = ud;
    cmr_instr_class_rec_t r;
    if (n < 8 || decode_class(val, vlen, &r) != 0)
        return 0;
    char name[1024];
    size_t nl = n - 8 < sizeof name - 1 ? n - 8 : sizeof name - 1;
    memcpy(name, suffix + 8, nl);
    name[nl] = '\0';
    return x->fn((int64_t)rd_u64(suffix), name, &r, x->ud);
}

int cmr_instr_cache_each_class(cmr_instr_cache_t *c, uint64_t agent, cmr_instr_class_fn *fn, void *ud)
{
    key_t_ prefix;
    k_init(&prefix, 'k');
    k_u64(&prefix, agent);
    class_iter_t x = {fn, ud};
    return each_prefix(c, &prefix, class_step, &x);
}

static void waiting_key(key_t_ *k, uint64_t agent, const char *type, int64_t loader, const char *name)
{
    k_init(k, 'w');
    k_u64(k, agent);
    k_str(k, type);
    k_nul(k);
    if (name) {
        k_u64(k, (uint64_t)loader);
        k_str(k, name);
    }
}

int cmr_instr_cache_put_waiting(cmr_instr_cache_t *c, uint64_t agent, const char *type, int64_t loader,
                                const char *name)
{
    key_t_ k;
    waiting_key(&k, agent, type, loader, name);
    put(c, &k, "", 0);
    return 0;
}

int cmr_instr_cache_del_waiting(cmr_instr_cache_t *c, uint64_t agent, const char *type, int64_t loader,
                                const char *name)
{
    key_t_ k;
    waiting_key(&k, agent, type, loader, name);
    del(c, &k);
    return 0;
}

typedef struct wait_iter {
    cmr_instr_waiting_fn *fn;
    void *ud;
} wait_iter_t;

static int wait_step(const unsigned char *suffix, size_t n, const char *val, size_t vlen, void *ud)
{
    (void)val;
    (void)vlen;
    wait_iter_t *x = ud;
    if (n < 8)
        return 0;
    char name[1024];
    size_t nl = n - 8 < sizeof name - 1 ? n - 8 : sizeof name - 1;
    memcpy(name, suffix + 8, nl);
    name[nl] = '\0';
    return x->fn((int64_t)rd_u64(suffix), name, x->ud);
}

int cmr_instr_cache_each_waiting(cmr_instr_cache_t *c, uint64_t agent, const char *type, cmr_instr_waiting_fn *fn,
                                 void *ud)
{
    key_t_ prefix;
    waiting_key(&prefix, agent, type, 0, NULL);
    wait_iter_t x = {fn, ud};
    return each_prefix(c, &prefix, wait_step, &x);
}

/* agent record: revision, partition, instance NUL env NUL */
static int decode_agent(const char *v, size_t n, cmr_instr_agent_rec_t *r)
{
    if (n < 12)
        return -1;
    memset(r, 0, sizeof *r);
    r->revision = (int64_t)rd_u64((const unsigned char *)v);
    r->partition = (int32_t)(rd_u64((const unsigned char *)v + 4) & 0xffffffffu);
    const char *s = v + 12, *end = v + n;
    const char *z = memchr(s, 0, (size_t)(end - s));
    if (!z)
        return -1;
    snprintf(r->instance_id, sizeof r->instance_id, "%s", s);
    s = z + 1;
    z = s < end ? memchr(s, 0, (size_t)(end - s)) : NULL;
    if (!z)
        return -1;
    snprintf(r->env_id, sizeof r->env_id, "%s", s);
    return 0;
}

int cmr_instr_cache_agent(cmr_instr_cache_t *c, uint64_t agent, cmr_instr_agent_rec_t *out)
{
    key_t_ k;
    k_init(&k, 'a');
    k_u64(&k, agent);
    char *v;
    size_t n;
    int rc = get(c, &k, &v, &n);
    if (rc == 1 && decode_agent(v, n, out) != 0)
        rc = 0;
    free(v);
    return rc;
}

int cmr_instr_cache_put_agent(cmr_instr_cache_t *c, uint64_t agent, const cmr_instr_agent_rec_t *r)
{
    key_t_ k, v;
    k_init(&k, 'a');
    k_u64(&k, agent);
    v.n = 0;
    k_u64(&v, (uint64_t)r->revision);
    uint32_t p = (uint32_t)r->partition;
    for (int i = 3; i >= 0; i--)
        v.b[v.n++] = (char)(p >> (8 * i));
    k_str(&v, r->instance_id);
    k_nul(&v);
    k_str(&v, r->env_id);
    k_nul(&v);
    put(c, &k, v.b, v.n);
    return 0;
}

typedef struct agent_iter {
    cmr_instr_agent_fn *fn;
    void *ud;
} agent_iter_t;

static int agent_step(const unsigned char *suffix, size_t n, const char *val, size_t vlen, void *ud)
{
    agent_iter_t *x = ud;
    cmr_instr_agent_rec_t r;
    if (n != 8 || decode_agent(val, vlen, &r) != 0)
        return 0;
    return x->fn(rd_u64(suffix), &r, x->ud);
}

int cmr_instr_cache_each_agent(cmr_instr_cache_t *c, cmr_instr_agent_fn *fn, void *ud)
{
    key_t_ prefix;
    k_init(&prefix, 'a');
    agent_iter_t x = {fn, ud};
    return each_prefix(c, &prefix, agent_step, &x);
}

int cmr_instr_cache_env_run(cmr_instr_cache_t *c, const char *env_id, int64_t *revision)
{
    key_t_ k;
    k_init(&k, 'v');
    k_str(&k, env_id);
    char *v;
    size_t n;
    int rc = get(c, &k, &v, &n);
    if (rc == 1 && n == 8)
        *revision = (int64_t)rd_u64((unsigned char *)v);
    else if (rc == 1)
        rc = 0;
    free(v);
    return rc;
}

int cmr_instr_cache_put_env_run(cmr_instr_cache_t *c, const char *env_id, int64_t revision)
{
    key_t_ k, v;
    k_init(&k, 'v');
    k_str(&k, env_id);
    v.n = 0;
    k_u64(&v, (uint64_t)revision);
    put(c, &k, v.b, v.n);
    return 0;
}

int cmr_instr_cache_method_sent(cmr_instr_cache_t *c, uint64_t method_id)
{
    key_t_ k;
    k_init(&k, 'm');
    k_u64(&k, method_id);
    return exists(c, &k);
}

int cmr_instr_cache_put_method_sent(cmr_instr_cache_t *c, uint64_t method_id)
{
    key_t_ k;
    k_init(&k, 'm');
    k_u64(&k, method_id);
    put(c, &k, "", 0);
    return 0;
}

int cmr_instr_cache_offset(cmr_instr_cache_t *c, int32_t partition, int64_t *offset)
{
    key_t_ k;
    k_init(&k, 'o');
    k_u64(&k, (uint64_t)(uint32_t)partition);
    char *v;
    size_t n;
    int rc = get(c, &k, &v, &n);
    if (rc == 1 && n == 8)
        *offset = (int64_t)rd_u64((unsigned char *)v);
    else if (rc == 1)
        rc = 0;
    free(v);
    return rc;
}

int cmr_instr_cache_put_offset(cmr_instr_cache_t *c, int32_t partition, int64_t offset)
{
    int64_t cur;
    if (cmr_instr_cache_offset(c, partition, &cur) == 1 && cur >= offset)
        return 0;
    key_t_ k, v;
    k_init(&k, 'o');
    k_u64(&k, (uint64_t)(uint32_t)partition);
    v.n = 0;
    k_u64(&v, (uint64_t)offset);
    put(c, &k, v.b, v.n);
    return 0;
}

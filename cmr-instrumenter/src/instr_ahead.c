/*
 * instr_ahead.c - classes granted ahead (see instr_ahead.h).
 *
 * Per environment: a vector of entries in the order they were first kept, a map from
 * original digest to the entry's index (stored as index + 1), so that a class granted
 * again replaces its entry in place, and one from class name to the same index, for the
 * load counts. Environments are few (an array, searched).
 */
#include "cmr/instr_ahead.h"

#include <stdlib.h>
#include <string.h>

#include "cmr/buf.h"
#include "cmr/grant.h"
#include "cmr/map.h"

typedef struct entry {
    char *class_name;
    uint32_t loads; /* JVMs that loaded the class since it was kept */
    uint8_t original_digest[CMR_TRUST_DIGEST_BYTES];
    uint8_t instrumented_digest[CMR_TRUST_DIGEST_BYTES];
    int64_t not_after_ms; /* the grant's validity */
    uint8_t *grant;       /* owned */
    size_t grant_len;
    uint8_t *bytes; /* owned */
    size_t len;
} entry_t;

typedef struct env {
    char *id; /* owned */
    int64_t revision;
    entry_t *items; /* owned */
    size_t n, cap;
    cmr_map_t by_digest; /* original digest -> (void *)(index + 1) */
    cmr_map_t by_name;   /* class name -> (void *)(index + 1) */
} env_t;

struct cmr_instr_ahead {
    size_t max_bytes;
    env_t *envs; /* owned */
    size_t n_envs, cap_envs;
    cmr_instr_ahead_stats_t stats;
};

static size_t entry_size(const entry_t *e)
{
    return e->len + e->grant_len;
}

static void entry_free(entry_t *e)
{
    free(e->class_name);
    free(e->grant);
    free(e->bytes);
    memset(e, 0, sizeof *e);
}

/* Drops every class of an environment (its revision stays). */
static void env_empty(cmr_instr_ahead_t *x, env_t *v)
{
    for (size_t i = 0; i < v->n; i++) {
        x->stats.classes--;
        x->stats.bytes -= entry_size(&v->items[i]);
        entry_free(&v->items[i]);
    }
    v->n = 0;
    cmr_map_clear(&v->by_digest);
    cmr_map_clear(&v->by_name);
}

cmr_instr_ahead_t *cmr_instr_ahead_new(size_t max_bytes)
{
    cmr_instr_ahead_t *x = calloc(1, sizeof *x);
    if (x)
        x->max_bytes = max_bytes;
    return x;
}

void cmr_instr_ahead_free(cmr_instr_ahead_t *x)
{
    if (!x)
        return;
    for (size_t i = 0; i < x->n_envs; i++) {
        env_empty(x, &x->envs[i]);
        free(x->envs[i].items);
        cmr_map_free(&x->envs[i].by_digest);
        cmr_map_free(&x->envs[i].by_name);
        free(x->envs[i].id);
    }
    free(x->envs);
    free(x);
}

static env_t *env_find(const cmr_instr_ahead_t *x, const char *id)
{
    for (size_t i = 0; i < x->n_envs; i++)
        if (strcmp(x->envs[i].id, id) == 0)
            return &x->envs[i];
    return NULL;
}

/* The environment's record, created at `revision` when new; NULL when out of memory. */
static env_t *env_get(cmr_instr_ahead_t *x, const char *id, int64_t revision)
{
    env_t *v = env_find(x, id);
    if (v)
        return v;
    if (CMR_ARRAY_GROW(x->envs, x->cap_envs, x->n_envs + 1) != 0)
        return NULL;
    v = &x->envs[x->n_envs];
    *v = (env_t){.id = strdup(id), .revision = revision};
    if (!v->id)
        return NULL;
    x->n_envs++;
    return v;
}

/* A copy of the grant and bytes into e (its name from g); -1 when out of memory. */
static int entry_fill(entry_t *e, const cmr_grant_t *g, const void *grant, size_t glen, const uint8_t *bytes,
                      size_t len)
{
    *e = (entry_t){.class_name = strdup(g->class_name), .grant = malloc(glen), .bytes = malloc(len)};
    if (!e->class_name || !e->grant || !e->bytes) {
        entry_free(e);
        return -1;
    }
    memcpy(e->original_digest, g->original_digest, sizeof e->original_digest);
    memcpy(e->instrumented_digest, g->instrumented_digest, sizeof e->instrumented_digest);
    e->not_after_ms = g->not_after_ms;
    memcpy(e->grant, grant, glen);
    e->grant_len = glen;
    memcpy(e->bytes, bytes, len);
    e->len = len;
    return 0;
}

/* A grant is renewed (published again) once less than this is left of its validity. */
#define RENEW_BEFORE_MS (INT64_C(24) * 3600 * 1000)

cmr_instr_ahead_put_t cmr_instr_ahead_put(cmr_instr_ahead_t *x, const void *grant, size_t grant_len,
                                          const uint8_t *bytes, size_t len)
{
    cmr_grant_t g;
    if (len == 0 || cmr_grant_decode(grant, grant_len, &g) != CMR_GRANT_OK)
        return CMR_INSTR_AHEAD_NOT_KEPT;
    env_t *v = env_get(x, g.environment_id, g.revision);
    if (!v)
        return CMR_INSTR_AHEAD_NOT_KEPT;
    if (g.revision < v->revision) {
        x->stats.stale++;
        return CMR_INSTR_AHEAD_NOT_KEPT;
    }
    if (g.revision > v->revision) {
        env_empty(x, v);
        v->revision = g.revision;
    }
    void *slot = cmr_map_get(&v->by_digest, g.original_digest, sizeof g.original_digest);
    size_t idx = slot ? (size_t)(uintptr_t)slot - 1 : v->n;
    if (slot) {
        const entry_t *held = &v->items[idx];
        if (memcmp(held->instrumented_digest, g.instrumented_digest, sizeof g.instrumented_digest) == 0 &&
            held->not_after_ms - g.issued_ms > RENEW_BEFORE_MS)
            return CMR_INSTR_AHEAD_SAME;
    }
    size_t old = slot ? entry_size(&v->items[idx]) : 0;
    if (x->stats.bytes - old + len + grant_len > x->max_bytes) {
        x->stats.over_budget++;
        return CMR_INSTR_AHEAD_NOT_KEPT;
    }
    if (!slot && CMR_ARRAY_GROW(v->items, v->cap, v->n + 1) != 0)
        return CMR_INSTR_AHEAD_NOT_KEPT;
    entry_t e;
    if (entry_fill(&e, &g, grant, grant_len, bytes, len) != 0)
        return CMR_INSTR_AHEAD_NOT_KEPT;
    void *as_index = (void *)(uintptr_t)(idx + 1);
    if (!slot && (cmr_map_put(&v->by_digest, g.original_digest, sizeof g.original_digest, as_index) != 0 ||
                  cmr_map_put(&v->by_name, g.class_name, strlen(g.class_name), as_index) != 0)) {
        cmr_map_del(&v->by_digest, g.original_digest, sizeof g.original_digest, NULL);
        entry_free(&e);
        return CMR_INSTR_AHEAD_NOT_KEPT;
    }
    if (slot) {
        x->stats.bytes -= old;
        e.loads = v->items[idx].loads;
        entry_free(&v->items[idx]);
    } else {
        v->n++;
        x->stats.classes++;
    }
    v->items[idx] = e;
    x->stats.bytes += entry_size(&e);
    x->stats.kept++;
    return CMR_INSTR_AHEAD_KEPT;
}

void cmr_instr_ahead_loaded(cmr_instr_ahead_t *x, const char *environment_id, const char *class_name)
{
    env_t *v = environment_id && class_name ? env_find(x, environment_id) : NULL;
    void *slot = v ? cmr_map_get(&v->by_name, class_name, strlen(class_name)) : NULL;
    if (slot && v->items[(uintptr_t)slot - 1].loads < UINT32_MAX)
        v->items[(uintptr_t)slot - 1].loads++;
}

size_t cmr_instr_ahead_count(const cmr_instr_ahead_t *x, const char *environment_id, int64_t revision)
{
    const env_t *v = environment_id ? env_find(x, environment_id) : NULL;
    return v && v->revision == revision ? v->n : 0;
}

/* A class held, as ranked for sending: most loaded first, ties in the order they were kept. */
typedef struct ranked {
    uint32_t loads;
    size_t idx;   /* in env_t.items */
    int32_t part; /* the message it goes in, 1-based (0: not sent) */
} ranked_t;

static int by_loads(const void *a, const void *b)
{
    const ranked_t *x = a, *y = b;
    if (x->loads != y->loads)
        return x->loads > y->loads ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

/* Gives order[0..count) their messages: as many as fit in max_jvm bytes (at least one),
 * in messages of at most max_message bytes (a larger class alone). Returns how many are
 * sent; order[n - 1].part is the number of messages. */
static size_t plan(const env_t *v, ranked_t *order, size_t count, size_t max_jvm, size_t max_message)
{
    size_t n = 0, total = 0, used = 0;
    int32_t part = 0;
    for (; n < count; n++) {
        size_t sz = entry_size(&v->items[order[n].idx]);
        if (n > 0 && total + sz > max_jvm)
            break;
        total += sz;
        if (part == 0 || (used > 0 && used + sz > max_message)) {
            part++;
            used = 0;
        }
        used += sz;
        order[n].part = part;
    }
    return n;
}

/* Grants valid for less than this are not sent (the agent would refuse them soon). */
#define SEND_MIN_VALIDITY_MS (INT64_C(3600) * 1000)

int cmr_instr_ahead_messages(cmr_instr_ahead_t *x, const char *environment_id, int64_t revision, int64_t agent_id,
                             int64_t now_ms, size_t max_jvm_bytes, size_t max_message_bytes, cmr_instr_ahead_fn *fn,
                             void *ud, size_t *sent)
{
    if (sent)
        *sent = 0;
    env_t *v = environment_id ? env_find(x, environment_id) : NULL;
    if (!v || v->revision != revision || v->n == 0)
        return 0;
    ranked_t *order = malloc(v->n * sizeof *order);
    cmr_granted_class_t *items = calloc(v->n, sizeof *items);
    if (!order || !items) {
        free(order);
        free(items);
        return -1;
    }
    size_t valid = 0;
    for (size_t i = 0; i < v->n; i++)
        if (v->items[i].not_after_ms - now_ms > SEND_MIN_VALIDITY_MS)
            order[valid++] = (ranked_t){v->items[i].loads, i, 0};
    qsort(order, valid, sizeof *order, by_loads);
    cmr_class_grants_t m = {.agent_id = agent_id, .environment_id = v->id, .revision = revision};
    size_t n = valid ? plan(v, order, valid, max_jvm_bytes, max_message_bytes) : 0;
    if (n == 0) {
        free(items);
        free(order);
        return 0;
    }
    m.parts = order[n - 1].part;
    int rc = 0;
    for (size_t i = 0, first = 0; rc == 0 && i < n; i++) {
        const entry_t *e = &v->items[order[i].idx];
        items[i] = (cmr_granted_class_t){.class_name = e->class_name,
                                         .original_digest = {(uint8_t *)e->original_digest, CMR_TRUST_DIGEST_BYTES},
                                         .grant = {e->grant, e->grant_len},
                                         .bytecode = {e->bytes, e->len}};
        if (i + 1 < n && order[i + 1].part == order[i].part)
            continue; /* the message goes on */
        m.part = order[i].part;
        m.classes.items = items + first;
        m.classes.count = i + 1 - first;
        rc = fn(&m, ud);
        first = i + 1;
    }
    free(items);
    free(order);
    if (rc == 0) {
        x->stats.sets_sent++;
        x->stats.classes_sent += n;
        if (sent)
            *sent = n;
    }
    return rc;
}

/* Drops entry idx of v; those after it move up one place, their order kept (rare: a grant
 * that does not verify). */
static void entry_drop(cmr_instr_ahead_t *x, env_t *v, size_t idx)
{
    entry_t *e = &v->items[idx];
    cmr_map_del(&v->by_digest, e->original_digest, sizeof e->original_digest, NULL);
    cmr_map_del(&v->by_name, e->class_name, strlen(e->class_name), NULL);
    x->stats.classes--;
    x->stats.bytes -= entry_size(e);
    entry_free(e);
    memmove(&v->items[idx], &v->items[idx + 1], (v->n - idx - 1) * sizeof *v->items);
    v->n--;
    for (size_t i = idx; i < v->n; i++) { /* the same keys: replaced in place, no allocation */
        void *as_index = (void *)(uintptr_t)(i + 1);
        cmr_map_put(&v->by_digest, v->items[i].original_digest, sizeof v->items[i].original_digest, as_index);
        cmr_map_put(&v->by_name, v->items[i].class_name, strlen(v->items[i].class_name), as_index);
    }
}

/* Signs e's bytes again (a grant that verified under `own` as at its issue); 0, or -1 when
 * it does not verify (drop it) or 1 when it could not be signed (keep it as it is). */
static int entry_resign(const env_t *v, entry_t *e, const cmr_verifier_t *own, const cmr_signer_t *signer,
                        int64_t lifetime_ms, cmr_buf_t *fresh)
{
    cmr_grant_t g;
    if (cmr_grant_decode(e->grant, e->grant_len, &g) != CMR_GRANT_OK)
        return -1;
    cmr_grant_expect_t want = {v->id, e->class_name, e->original_digest, e->bytes, e->len};
    if (g.revision != v->revision || cmr_grant_verify(own, e->grant, e->grant_len, &want, g.issued_ms, NULL))
        return -1;
    char err[256];
    if (cmr_grant_sign(signer, v->id, v->revision, e->class_name, e->original_digest, e->bytes, e->len, lifetime_ms,
                       fresh, err, sizeof err) != 0 ||
        cmr_grant_decode(fresh->data, fresh->len, &g) != CMR_GRANT_OK)
        return 1;
    uint8_t *copy = malloc(fresh->len);
    if (!copy)
        return 1;
    memcpy(copy, fresh->data, fresh->len);
    free(e->grant);
    e->grant = copy;
    e->grant_len = fresh->len;
    e->not_after_ms = g.not_after_ms;
    return 0;
}

size_t cmr_instr_ahead_renew(cmr_instr_ahead_t *x, const char *environment_id, int64_t revision, int64_t now_ms,
                             size_t max, const cmr_verifier_t *own, const cmr_signer_t *signer, int64_t lifetime_ms,
                             cmr_instr_ahead_renewed_fn *fn, void *ud, size_t *dropped)
{
    if (dropped)
        *dropped = 0;
    env_t *v = environment_id ? env_find(x, environment_id) : NULL;
    if (!v || v->revision != revision || max == 0 || !own || !signer || lifetime_ms <= 0)
        return 0;
    size_t n = 0, renewed = 0, ndrop = 0;
    for (size_t i = 0; i < v->n; i++) /* the usual case, nothing due, allocates nothing */
        n += v->items[i].not_after_ms - now_ms <= RENEW_BEFORE_MS;
    if (n == 0)
        return 0;
    ranked_t *due = malloc(n * sizeof *due);
    uint8_t(*drop)[CMR_TRUST_DIGEST_BYTES] = malloc((n < max ? n : max) * sizeof *drop);
    if (!due || !drop) {
        free(due);
        free(drop);
        return 0;
    }
    n = 0;
    for (size_t i = 0; i < v->n; i++)
        if (v->items[i].not_after_ms - now_ms <= RENEW_BEFORE_MS)
            due[n++] = (ranked_t){v->items[i].loads, i, 0};
    qsort(due, n, sizeof *due, by_loads);
    cmr_buf_t fresh = {0};
    for (size_t i = 0; i < n && i < max; i++) {
        entry_t *e = &v->items[due[i].idx];
        size_t before = e->grant_len;
        int rc = entry_resign(v, e, own, signer, lifetime_ms, &fresh);
        if (rc < 0) { /* dropped after the loop: indexes stay valid meanwhile */
            memcpy(drop[ndrop++], e->original_digest, CMR_TRUST_DIGEST_BYTES);
            continue;
        }
        if (rc > 0)
            continue;
        x->stats.bytes = x->stats.bytes - before + e->grant_len;
        renewed++;
        if (fn)
            fn(e->class_name, e->original_digest, &(cmr_bytes_t){e->grant, e->grant_len},
               &(cmr_bytes_t){e->bytes, e->len}, ud);
    }
    for (size_t i = 0; i < ndrop; i++) {
        void *slot = cmr_map_get(&v->by_digest, drop[i], CMR_TRUST_DIGEST_BYTES);
        if (slot)
            entry_drop(x, v, (size_t)(uintptr_t)slot - 1);
    }
    cmr_buf_free(&fresh);
    free(due);
    free(drop);
    x->stats.renewed += renewed;
    x->stats.renew_refused += ndrop;
    if (dropped)
        *dropped = ndrop;
    return renewed;
}

const char *cmr_instr_ahead_record_refusal(const cmr_msg_t *m, const char *key_id)
{
    if (m->type != CMR_MSG_CLASS_GRANTS || m->u.class_grants.classes.count != 1)
        return "not a ClassGrants of one class";
    const cmr_granted_class_t *c = &m->u.class_grants.classes.items[0];
    cmr_grant_t g;
    uint8_t d[CMR_TRUST_DIGEST_BYTES];
    if (cmr_grant_decode(c->grant.data, c->grant.len, &g) != CMR_GRANT_OK)
        return "malformed grant";
    if (strcmp(g.key_id, key_id) != 0)
        return "signed by another key";
    if (!c->class_name || strcmp(g.class_name, c->class_name) != 0 ||
        c->original_digest.len != CMR_TRUST_DIGEST_BYTES ||
        memcmp(g.original_digest, c->original_digest.data, sizeof d) != 0)
        return "grant for another class";
    cmr_trust_digest(c->bytecode.data, c->bytecode.len, d);
    if (memcmp(d, g.instrumented_digest, sizeof d) != 0)
        return "bytes do not match the grant";
    return NULL;
}

void cmr_instr_ahead_stats(const cmr_instr_ahead_t *x, cmr_instr_ahead_stats_t *out)
{
    *out = x->stats;
}

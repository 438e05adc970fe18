/*
 * grant_preload.c - classes granted ahead of their load (see grant_preload.h).
 *
 * One map, original digest -> entry. The grant is verified once, when it arrives (the
 * Ed25519 check costs tens of microseconds, which the load hook should not pay per
 * class); what the entry keeps is what that verification established: environment,
 * class name, revision, validity and the digest of the bytes held.
 */
#include "grant_preload.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/map.h"

typedef struct entry {
    char *class_name;
    int64_t revision;
    int64_t not_after_ms;
    uint8_t instrumented_digest[CMR_TRUST_DIGEST_BYTES];
    uint8_t *grant; /* the encoded grant, for the cache on disk */
    size_t grant_len;
    uint8_t *bytes;
    size_t len;
    bool served; /* a lookup handed it out */
} entry_t;

struct cmr_grant_preload {
    const cmr_verifier_t *verifier; /* not owned */
    size_t max_bytes;
    pthread_mutex_t lock;                 /* guards everything below */
    char expected[CMR_GRANT_ENV_MAX + 1]; /* the agent's environment ("": none) */
    cmr_map_t by_digest;                  /* original digest (32 bytes) -> entry_t * (owned) */
    cmr_grant_preload_stats_t stats;
};

static void entry_free(entry_t *e)
{
    if (!e)
        return;
    free(e->class_name);
    free(e->grant);
    free(e->bytes);
    free(e);
}

cmr_grant_preload_t *cmr_grant_preload_new(const cmr_verifier_t *v, size_t max_bytes)
{
    cmr_grant_preload_t *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->verifier = v;
    p->max_bytes = max_bytes;
    pthread_mutex_init(&p->lock, NULL);
    return p;
}

/* Drops every entry (lock held). */
static void drop_all(cmr_grant_preload_t *p)
{
    size_t it = 0;
    void *v;
    while (cmr_map_next(&p->by_digest, &it, NULL, NULL, &v))
        entry_free(v);
    cmr_map_clear(&p->by_digest);
    p->stats.classes = 0;
    p->stats.bytes = 0;
}

void cmr_grant_preload_free(cmr_grant_preload_t *p)
{
    if (!p)
        return;
    drop_all(p);
    cmr_map_free(&p->by_digest);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

/* Removes the entry of `digest` (lock held). */
static void drop_one(cmr_grant_preload_t *p, const uint8_t digest[CMR_TRUST_DIGEST_BYTES])
{
    void *old = NULL;
    if (cmr_map_del(&p->by_digest, digest, CMR_TRUST_DIGEST_BYTES, &old) && old) {
        entry_t *e = old;
        p->stats.classes--;
        p->stats.bytes -= e->len;
        entry_free(e);
    }
}

/* A copy of a verified class; NULL when out of memory. */
static entry_t *entry_new(const cmr_grant_t *g, const void *grant, size_t grant_len, const uint8_t *bytes, size_t len)
{
    entry_t *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->class_name = strdup(g->class_name);
    e->grant = malloc(grant_len);
    e->bytes = malloc(len);
    if (!e->class_name || !e->grant || !e->bytes) {
        entry_free(e);
        return NULL;
    }
    memcpy(e->grant, grant, grant_len);
    e->grant_len = grant_len;
    memcpy(e->bytes, bytes, len);
    e->len = len;
    e->revision = g->revision;
    e->not_after_ms = g->not_after_ms;
    memcpy(e->instrumented_digest, g->instrumented_digest, sizeof e->instrumented_digest);
    return e;
}

void cmr_grant_preload_expect(cmr_grant_preload_t *p, const char *environment_id)
{
    const char *env = environment_id && strlen(environment_id) <= CMR_GRANT_ENV_MAX ? environment_id : "";
    pthread_mutex_lock(&p->lock);
    if (strcmp(p->expected, env) != 0) {
        drop_all(p);
        snprintf(p->expected, sizeof p->expected, "%s", env);
    }
    pthread_mutex_unlock(&p->lock);
}

cmr_grant_preload_add_t cmr_grant_preload_add(cmr_grant_preload_t *p, const char *class_name,
                                              const uint8_t *original_digest, size_t digest_len, const void *grant,
                                              size_t grant_len, const uint8_t *bytes, size_t len, int64_t now_ms,
                                              cmr_grant_verdict_t *why)
{
    /* verified outside the lock (tens of microseconds), against the environment expected
     * now; checked again under the lock, in case it changed meanwhile */
    char env[CMR_GRANT_ENV_MAX + 1];
    pthread_mutex_lock(&p->lock);
    memcpy(env, p->expected, sizeof env);
    pthread_mutex_unlock(&p->lock);
    cmr_grant_t g;
    cmr_grant_expect_t want = {env, class_name, original_digest, bytes, len};
    bool whole = class_name && len > 0 && digest_len == CMR_TRUST_DIGEST_BYTES;
    cmr_grant_verdict_t v = !env[0] ? CMR_GRANT_WRONG_ENVIRONMENT
                            : whole ? cmr_grant_verify(p->verifier, grant, grant_len, &want, now_ms, &g)
                                    : CMR_GRANT_MALFORMED;
    pthread_mutex_lock(&p->lock);
    if (v == CMR_GRANT_OK && strcmp(env, p->expected) != 0)
        v = CMR_GRANT_WRONG_ENVIRONMENT;
    *why = v;
    p->stats.received++;
    if (v != CMR_GRANT_OK) {
        p->stats.refused++;
        p->stats.refusals[(unsigned)v < CMR_GRANT_VERDICT__COUNT ? v : CMR_GRANT_MALFORMED]++;
        pthread_mutex_unlock(&p->lock);
        return CMR_GRANT_PRELOAD_REFUSED;
    }
    drop_one(p, original_digest); /* granted again: the newer grant replaces it */
    entry_t *e = p->stats.bytes + len <= p->max_bytes ? entry_new(&g, grant, grant_len, bytes, len) : NULL;
    if (!e || cmr_map_put(&p->by_digest, original_digest, CMR_TRUST_DIGEST_BYTES, e) != 0) {
        entry_free(e);
        p->stats.over_budget++;
        pthread_mutex_unlock(&p->lock);
        return CMR_GRANT_PRELOAD_OVER_BUDGET;
    }
    p->stats.kept++;
    p->stats.classes++;
    p->stats.bytes += len;
    pthread_mutex_unlock(&p->lock);
    return CMR_GRANT_PRELOAD_KEPT;
}

bool cmr_grant_preload_lookup(cmr_grant_preload_t *p, const char *name, const uint8_t digest[CMR_TRUST_DIGEST_BYTES],
                              int64_t now_ms, uint8_t **bytes, size_t *len, uint8_t applied[CMR_TRUST_DIGEST_BYTES],
                              int64_t *revision)
{
    *bytes = NULL;
    *len = 0;
    if (!name)
        return false;
    bool hit = false;
    pthread_mutex_lock(&p->lock);
    entry_t *e = cmr_map_get(&p->by_digest, digest, CMR_TRUST_DIGEST_BYTES);
    if (e && now_ms > e->not_after_ms + CMR_GRANT_CLOCK_SKEW_MS) {
        p->stats.expired++;
        drop_one(p, digest);
        e = NULL;
    }
    if (e && strcmp(e->class_name, name) == 0 && (*bytes = malloc(e->len)) != NULL) {
        memcpy(*bytes, e->bytes, e->len);
        *len = e->len;
        memcpy(applied, e->instrumented_digest, CMR_TRUST_DIGEST_BYTES);
        *revision = e->revision;
        e->served = true;
        p->stats.hits++;
        hit = true;
    }
    pthread_mutex_unlock(&p->lock);
    return hit;
}

size_t cmr_grant_preload_trim(cmr_grant_preload_t *p)
{
    pthread_mutex_lock(&p->lock);
    /* the unused digests first (the map is not changed while it is walked) */
    size_t n = 0, cap = p->stats.classes, it = 0, klen;
    uint8_t(*unused)[CMR_TRUST_DIGEST_BYTES] = cap ? malloc(cap * sizeof *unused) : NULL;
    const void *k;
    void *v;
    while (unused && cmr_map_next(&p->by_digest, &it, &k, &klen, &v))
        if (!((entry_t *)v)->served && n < cap)
            memcpy(unused[n++], k, CMR_TRUST_DIGEST_BYTES);
    for (size_t i = 0; i < n; i++)
        drop_one(p, unused[i]);
    p->stats.trimmed += n;
    pthread_mutex_unlock(&p->lock);
    free(unused);
    return n;
}

bool cmr_grant_preload_copy(cmr_grant_preload_t *p, const uint8_t digest[CMR_TRUST_DIGEST_BYTES], uint8_t **grant,
                            size_t *grant_len, uint8_t **bytes, size_t *len)
{
    *grant = *bytes = NULL;
    pthread_mutex_lock(&p->lock);
    entry_t *e = cmr_map_get(&p->by_digest, digest, CMR_TRUST_DIGEST_BYTES);
    bool ok = e && (*grant = malloc(e->grant_len)) != NULL && (*bytes = malloc(e->len)) != NULL;
    if (ok) {
        memcpy(*grant, e->grant, e->grant_len);
        *grant_len = e->grant_len;
        memcpy(*bytes, e->bytes, e->len);
        *len = e->len;
    } else {
        free(*grant);
        *grant = NULL;
    }
    pthread_mutex_unlock(&p->lock);
    return ok;
}

void cmr_grant_preload_stats(cmr_grant_preload_t *p, cmr_grant_preload_stats_t *out)
{
    pthread_mutex_lock(&p->lock);
    *out = p->stats;
    pthread_mutex_unlock(&p->lock);
}

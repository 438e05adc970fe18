/*
 * grant.c - class grants: signing (cmr-instrumenter), decoding and verifying (the agent's
 * cache of instrumented classes). See cmr/grant.h for what is bound and why.
 */
#include "cmr/grant.h"

#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "cmr/bytes.h"
#include "cmr/clock.h"
#include "trust_internal.h"

/* Changing what is signed means a new prefix: old grants then never verify. */
#define GRANT_PREFIX "cmr-class-grant-v1"
#define GRANT_FIELDS 8 /* signed fields; the signature is the ninth */

static const char *const verdict_names[CMR_GRANT_VERDICT__COUNT] = {
    [CMR_GRANT_OK] = "ok",
    [CMR_GRANT_MALFORMED] = "malformed",
    [CMR_GRANT_UNKNOWN_KEY] = "unknown_key",
    [CMR_GRANT_BAD_SIGNATURE] = "bad_signature",
    [CMR_GRANT_EXPIRED] = "expired",
    [CMR_GRANT_NOT_YET_VALID] = "not_yet_valid",
    [CMR_GRANT_LIFETIME] = "lifetime_too_long",
    [CMR_GRANT_WRONG_ENVIRONMENT] = "wrong_environment",
    [CMR_GRANT_WRONG_CLASS] = "wrong_class",
    [CMR_GRANT_BYTES_MISMATCH] = "bytes_mismatch",
};

const char *cmr_grant_verdict_name(cmr_grant_verdict_t v)
{
    return (unsigned)v < CMR_GRANT_VERDICT__COUNT ? verdict_names[v] : "unknown";
}

static void put_field(cmr_buf_t *b, const void *p, size_t n)
{
    cmr_buf_put_be32(b, (uint32_t)n);
    cmr_buf_put(b, p, n);
}

static void put_i64(cmr_buf_t *b, int64_t v)
{
    uint8_t num[8];
    cmr_put_be64(num, (uint64_t)v);
    put_field(b, num, sizeof num);
}

/* The eight signed fields of g, in order (the encoded grant without its signature). */
static void put_signed_fields(cmr_buf_t *b, const cmr_grant_t *g)
{
    put_field(b, g->environment_id, strlen(g->environment_id));
    put_i64(b, g->revision);
    put_field(b, g->class_name, strlen(g->class_name));
    put_field(b, g->original_digest, sizeof g->original_digest);
    put_field(b, g->instrumented_digest, sizeof g->instrumented_digest);
    put_field(b, g->key_id, strlen(g->key_id));
    put_i64(b, g->issued_ms);
    put_i64(b, g->not_after_ms);
}

/* What the signature covers: the prefix, then the signed fields. */
static void signed_bytes(const cmr_grant_t *g, cmr_buf_t *out)
{
    cmr_buf_reset(out);
    put_field(out, GRANT_PREFIX, sizeof GRANT_PREFIX);
    put_signed_fields(out, g);
}

int cmr_grant_sign(const cmr_signer_t *s, const char *environment_id, int64_t revision, const char *class_name,
                   const uint8_t original_digest[CMR_TRUST_DIGEST_BYTES], const uint8_t *bytes, size_t len,
                   int64_t lifetime_ms, cmr_buf_t *out, char *errbuf, size_t errlen)
{
    if (!environment_id || !*environment_id || strlen(environment_id) > CMR_GRANT_ENV_MAX || !class_name ||
        !*class_name || strlen(class_name) > CMR_GRANT_NAME_MAX) {
        snprintf(errbuf, errlen, "environment id (1..%d) or class name (1..%d) of bad length", CMR_GRANT_ENV_MAX,
                 CMR_GRANT_NAME_MAX);
        return -1;
    }
    if (lifetime_ms <= 0 || lifetime_ms > CMR_GRANT_MAX_LIFETIME_MS) {
        snprintf(errbuf, errlen, "grant lifetime %lld ms is not in 1 .. %lld", (long long)lifetime_ms,
                 (long long)CMR_GRANT_MAX_LIFETIME_MS);
        return -1;
    }
    cmr_grant_t g = {.revision = revision};
    snprintf(g.environment_id, sizeof g.environment_id, "%s", environment_id);
    snprintf(g.class_name, sizeof g.class_name, "%s", class_name);
    memcpy(g.original_digest, original_digest, sizeof g.original_digest);
    cmr_trust_digest(bytes, len, g.instrumented_digest);
    snprintf(g.key_id, sizeof g.key_id, "%s", cmr_signer_key_id(s));
    g.issued_ms = cmr_wall_ms();
    g.not_after_ms = g.issued_ms + lifetime_ms;
    cmr_buf_t msg = {0};
    signed_bytes(&g, &msg);
    int rc = cmr_buf_ok(&msg) ? trust_sign_detached(s, msg.data, msg.len, g.signature) : -1;
    cmr_buf_free(&msg);
    if (rc != 0) {
        snprintf(errbuf, errlen, "out of memory");
        return -1;
    }
    cmr_buf_reset(out);
    put_signed_fields(out, &g);
    put_field(out, g.signature, sizeof g.signature);
    if (!cmr_buf_ok(out)) {
        snprintf(errbuf, errlen, "out of memory");
        return -1;
    }
    return 0;
}

/* --- decoding ------------------------------------------------------------------------- */

typedef struct reader {
    const uint8_t *p, *end;
} reader_t;

/* The next field's bytes and length; false when the blob ends inside it. */
static bool next_field(reader_t *r, const uint8_t **data, size_t *n)
{
    if (r->end - r->p < 4)
        return false;
    uint32_t len = cmr_be32(r->p);
    r->p += 4;
    if ((size_t)(r->end - r->p) < len)
        return false;
    *data = r->p;
    *n = len;
    r->p += len;
    return true;
}

static bool read_string(reader_t *r, char *out, size_t cap)
{
    const uint8_t *d;
    size_t n;
    if (!next_field(r, &d, &n) || n == 0 || n >= cap || memchr(d, 0, n))
        return false;
    memcpy(out, d, n);
    out[n] = '\0';
    return true;
}

static bool read_fixed(reader_t *r, void *out, size_t want)
{
    const uint8_t *d;
    size_t n;
    if (!next_field(r, &d, &n) || n != want)
        return false;
    memcpy(out, d, n);
    return true;
}

static bool read_i64(reader_t *r, int64_t *out)
{
    uint8_t num[8];
    if (!read_fixed(r, num, sizeof num))
        return false;
    *out = (int64_t)cmr_be64(num);
    return true;
}

cmr_grant_verdict_t cmr_grant_decode(const void *blob, size_t len, cmr_grant_t *g)
{
    memset(g, 0, sizeof *g);
    if (!blob || len > CMR_GRANT_MAX_BYTES)
        return CMR_GRANT_MALFORMED;
    reader_t r = {blob, (const uint8_t *)blob + len};
    bool ok = read_string(&r, g->environment_id, sizeof g->environment_id) && read_i64(&r, &g->revision) &&
              read_string(&r, g->class_name, sizeof g->class_name) &&
              read_fixed(&r, g->original_digest, sizeof g->original_digest) &&
              read_fixed(&r, g->instrumented_digest, sizeof g->instrumented_digest) &&
              read_fixed(&r, g->key_id, CMR_TRUST_KEY_ID_CHARS) && read_i64(&r, &g->issued_ms) &&
              read_i64(&r, &g->not_after_ms) && read_fixed(&r, g->signature, sizeof g->signature) && r.p == r.end;
    g->key_id[CMR_TRUST_KEY_ID_CHARS] = '\0';
    return ok ? CMR_GRANT_OK : CMR_GRANT_MALFORMED;
}

/* --- verifying ------------------------------------------------------------------------ */

static cmr_grant_verdict_t check_signature(const cmr_verifier_t *v, const cmr_grant_t *g)
{
    const uint8_t *pk = trust_verifier_pinned(v, g->key_id);
    if (!pk)
        return CMR_GRANT_UNKNOWN_KEY;
    cmr_buf_t msg = {0};
    signed_bytes(g, &msg);
    int bad = !cmr_buf_ok(&msg) || crypto_sign_verify_detached(g->signature, msg.data, msg.len, pk) != 0;
    cmr_buf_free(&msg);
    return bad ? CMR_GRANT_BAD_SIGNATURE : CMR_GRANT_OK;
}

static cmr_grant_verdict_t check_times(const cmr_grant_t *g, int64_t now_ms)
{
    if (g->not_after_ms < g->issued_ms || g->not_after_ms - g->issued_ms > CMR_GRANT_MAX_LIFETIME_MS)
        return CMR_GRANT_LIFETIME;
    if (g->issued_ms > now_ms + CMR_GRANT_CLOCK_SKEW_MS)
        return CMR_GRANT_NOT_YET_VALID;
    if (now_ms > g->not_after_ms + CMR_GRANT_CLOCK_SKEW_MS)
        return CMR_GRANT_EXPIRED;
    return CMR_GRANT_OK;
}

/* The grant against what the agent is about to do (all of it under the signature). */
static cmr_grant_verdict_t check_binding(const cmr_grant_t *g, const cmr_grant_expect_t *want)
{
    if (!want->environment_id || strcmp(g->environment_id, want->environment_id) != 0)
        return CMR_GRANT_WRONG_ENVIRONMENT;
    if (!want->original_digest ||
        sodium_memcmp(g->original_digest, want->original_digest, CMR_TRUST_DIGEST_BYTES) != 0 ||
        (want->class_name && strcmp(g->class_name, want->class_name) != 0))
        return CMR_GRANT_WRONG_CLASS;
    uint8_t d[CMR_TRUST_DIGEST_BYTES];
    if (!want->bytes)
        return CMR_GRANT_BYTES_MISMATCH;
    cmr_trust_digest(want->bytes, want->len, d);
    if (sodium_memcmp(d, g->instrumented_digest, sizeof d) != 0)
        return CMR_GRANT_BYTES_MISMATCH;
    return CMR_GRANT_OK;
}

cmr_grant_verdict_t cmr_grant_verify(const cmr_verifier_t *v, const void *blob, size_t len,
                                     const cmr_grant_expect_t *want, int64_t now_ms, cmr_grant_t *out)
{
    cmr_grant_t local, *g = out ? out : &local;
    cmr_grant_verdict_t r = cmr_grant_decode(blob, len, g);
    if (r == CMR_GRANT_OK)
        r = check_signature(v, g);
    if (r == CMR_GRANT_OK)
        r = check_times(g, now_ms);
    if (r == CMR_GRANT_OK)
        r = check_binding(g, want);
    return r;
}

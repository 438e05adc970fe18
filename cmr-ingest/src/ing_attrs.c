/*
 * ing_attrs.c - the transaction data of a trace (EventBatch.attributes): which values
 * may be kept, and the filters on them.
 *
 * The agent sends http.method, http.path and http.status of the incoming request a
 * segment began with, each once, on the segment's batch after it was captured
 * (schemas/event_batch.avsc). Anyone who can write to cmr.events can send anything, so a
 * value is kept only when it is:
 *   http.method  an RFC 9110 token (letters, digits, !#$%&'*+-.^_`|~), 1..256 bytes
 *   http.path    valid UTF-8 (no overlong forms, surrogates or code points past U+10FFFF),
 *                no control character (C0, DEL, C1), 1..256 bytes
 *   http.status  three digits, 100..999
 * An empty value means "not known" and is ignored; an invalid one is left out and
 * counted (cmr_ingest_batch_from_msg, the engine); other keys are ignored.
 *
 * The filters are globs with the semantics of a diagnosis' conditions, as the agent
 * judges them (agent/java/cmr/agent/Probe.java, glob): '*' any run of characters, '?'
 * one character (here: one UTF-8 character, the agent's: one UTF-16 unit), everything
 * else itself, no escapes, and the same order of tries (a '*' in the text matches a '*'
 * of the pattern as itself first). So a diagnosis' conditions, copied into a report's
 * filters, select what they selected.
 *
 * Ownership: nothing is allocated here; filters point at the caller's strings.
 */
#include <stdio.h>
#include <string.h>

#include "cmr/http_token.h"
#include "cmr/ingest.h"
#include "cmr/utf8.h"

const char *cmr_http_value_check(cmr_http_key_t k, const char *v, size_t len)
{
    switch (k) {
    case CMR_HTTP_METHOD:
        if (len > CMR_TRACE_HTTP_MAX)
            return "longer than 256 bytes";
        for (size_t i = 0; i < len; i++)
            if (!v[i] || !cmr_http_tchar((unsigned char)v[i]))
                return "not an HTTP method (an RFC 9110 token)";
        return NULL;
    case CMR_HTTP_PATH:
        if (len > CMR_TRACE_HTTP_MAX)
            return "longer than 256 bytes";
        return cmr_utf8_text_check(v, len);
    case CMR_HTTP_STATUS:
        if (len != 3 || v[0] < '1' || v[0] > '9' || v[1] < '0' || v[1] > '9' || v[2] < '0' || v[2] > '9')
            return "not an HTTP status (three digits, 100..999)";
        return NULL;
    case CMR_HTTP__KEYS: break;
    }
    return "unknown key";
}

bool cmr_trace_http_known(const cmr_trace_http_t *h)
{
    return h->method[0] || h->path[0] || h->status;
}

bool cmr_trace_http_valid(const cmr_trace_http_t *h)
{
    size_t ml = strnlen(h->method, sizeof h->method), pl = strnlen(h->path, sizeof h->path);
    return ml <= CMR_TRACE_HTTP_MAX && pl <= CMR_TRACE_HTTP_MAX &&
           !cmr_http_value_check(CMR_HTTP_METHOD, h->method, ml) && !cmr_http_value_check(CMR_HTTP_PATH, h->path, pl) &&
           (h->status == 0 || (h->status >= 100 && h->status <= 999));
}

bool cmr_http_glob(const char *pattern, const char *s)
{
    /* the agent's algorithm (one backtracking point: the last '*'), on UTF-8 characters */
    const unsigned char *p = (const unsigned char *)pattern, *t = (const unsigned char *)s;
    size_t pl = strlen(pattern), tl = strlen(s), pi = 0, ti = 0, star = SIZE_MAX, mark = 0;
    while (ti < tl) {
        uint32_t cp;
        size_t tlen = cmr_utf8_seq(t + ti, tl - ti, &cp);
        if (!tlen)
            tlen = 1; /* not UTF-8: byte by byte (kept values always are) */
        size_t plen = pi < pl ? cmr_utf8_seq(p + pi, pl - pi, &cp) : 0;
        if (pi < pl && !plen)
            plen = 1;
        if (pi < pl && (p[pi] == '?' || (plen == tlen && !memcmp(p + pi, t + ti, plen)))) {
            pi += plen; /* as the agent: a '*' of the pattern matches a '*' of the text first */
            ti += tlen;
        } else if (pi < pl && p[pi] == '*') {
            star = pi++;
            mark = ti;
        } else if (star != SIZE_MAX) {
            pi = star + 1;
            size_t ml = cmr_utf8_seq(t + mark, tl - mark, &cp);
            mark += ml ? ml : 1;
            ti = mark;
        } else {
            return false;
        }
    }
    while (pi < pl && p[pi] == '*')
        pi++;
    return pi == pl;
}

int cmr_http_filter_set(cmr_http_filter_t *f, const char *key, const char *value, char *err, size_t errlen)
{
    const char **slot;
    const char *name;
    if (!strcmp(key, "http-method") || !strcmp(key, "http_method")) {
        slot = &f->method;
        name = "http-method";
    } else if (!strcmp(key, "http-path") || !strcmp(key, "http_path")) {
        slot = &f->path;
        name = "http-path";
    } else if (!strcmp(key, "http-status") || !strcmp(key, "http_status")) {
        slot = &f->status;
        name = "http-status";
    } else {
        return 0;
    }
    size_t len = strlen(value);
    const char *why = !len                        ? "an empty glob"
                      : len > CMR_HTTP_FILTER_MAX ? "longer than 1024 bytes"
                                                  : cmr_utf8_text_check(value, len);
    if (!why && slot == &f->status)
        for (size_t i = 0; i < len && !why; i++)
            if (!strchr("0123456789*?", value[i]))
                why = "a status glob has only digits, '*' and '?' (like 5*)";
    if (why) {
        snprintf(err, errlen, "%s: bad glob: %s", name, why);
        return -1;
    }
    *slot = value;
    return 1;
}

bool cmr_http_filter_any(const cmr_http_filter_t *f)
{
    return f && (f->method || f->path || f->status);
}

bool cmr_http_filter_match(const cmr_http_filter_t *f, const cmr_trace_http_t *h)
{
    if (!f)
        return true;
    if (f->method && (!h->method[0] || !cmr_http_glob(f->method, h->method)))
        return false;
    if (f->path && (!h->path[0] || !cmr_http_glob(f->path, h->path)))
        return false;
    if (f->status) {
        char st[8];
        snprintf(st, sizeof st, "%u", (unsigned)h->status);
        if (!h->status || !cmr_http_glob(f->status, st))
            return false;
    }
    return true;
}

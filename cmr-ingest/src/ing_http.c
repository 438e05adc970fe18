/*
 * ing_http.c - the HTTP/1.1 JSON API of cmr-ingest, on loopback by default.
 *
 *   GET /health                               {"status":"ok"}
 *   GET /api/traces?from=&to=&min_duration=&root=&agent=&contains=&env=&http_method=
 *                   &http_path=&http_status=&slowest=&limit=
 *                                             {"traces":[summary, ...]}
 *   GET /api/traces/<trace id>                the call tree as JSON
 *   GET /api/traces/<trace id>/export?format=chrome|otlp
 *   GET /api/diagnoses/<diagnosis id>?limit=&http_method=&http_path=&http_status=
 *                                             the traces a diagnosis tagged and its
 *                                             per-method statistics (ing_diag.c)
 *   GET /api/metrics/..., /api/agents[/<agent id>]
 *   GET /api/methods?ids=<hex id>,<hex id>,...  {"methods":{"<hex id>":"pkg.Class.m(I)V" or
 *                                             null when unknown}}: at most METHODS_MAX ids
 *                                             (cmr.methods, which every worker reads whole)
 *
 * The server is the common one (cmr/http_server.h over libmicrohttpd): a pool of
 * HTTP_THREADS threads (epoll), keep-alive, at most HTTP_CONNECTIONS connections, idle
 * ones closed after HTTP_TIMEOUT_S; IPv4, IPv6, "::" dual stack; GET and HEAD only.
 * Errors are JSON {"error": "..."} with 400 / 404 / 405 / 414 / 500 (requests MHD cannot
 * parse or that exceed its limits get MHD's own 400 / 413 / 414 / 431). /health answers
 * at once; the store queries run side by side on the server's threads, all reading one
 * read-only view of the whole store root (RocksDB reads are thread-safe). A refresher
 * thread replaces it with a fresh one a second after the last one was ready, while queries
 * come, so that no query waits for a view to open (a read-only open replays the stores'
 * logs: long while the worker writes); after a quiet spell the first query opens a fresh
 * one itself (a view older than STALE_MS is not read); the old view is freed once its last
 * query ended;
 * recent trees are kept rendered in memory (keyed by trace id and summary, so a trace
 * that changed is rendered again); a large tree (STREAM_MIN_NODES calls or more) is not
 * built whole: its JSON is written a node at a time while it is sent (chunked), from the
 * assembled tree, which is kept (the last BIG_SLOTS of them) for the next answers.
 *
 * Fan-out (a worker with peers, cmr_ingest_http_set_peers): a list query answers from the
 * partitions this worker owns and asks the other owners (ing_peers.c) with local=1 and
 * partitions=a,b,...; the merged answer names what could not be reached. A trace by id is
 * asked of its partition's owner. A query with local=1 answers only for the partitions
 * asked (partitions=, default: all) that this worker owns, and lists the others it was
 * asked for in "partitions_not_owned"; a trace by id with local=1 whose partition this
 * worker does not own is 421 (the asking worker answers 503: ask again).
 *
 * Ownership: the server owns its HTTP server, locks, views and caches; a query holds a
 * reference to the view it reads (shared_view_t.refs). The peers belong to the worker.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/bytes.h"
#include "cmr/clock.h"
#include "cmr/http_server.h"
#include "cmr/ids.h"
#include "cmr/ingest.h"
#include "cmr/json.h"
#include "cmr/log.h"
#include "cmr/metrics.h"

#define CACHE_SLOTS 64
#define HTTP_THREADS 4
#define HTTP_CONNECTIONS 1100
#define HTTP_TIMEOUT_S 30
#define QUERY_MAX 32
#define VIEW_AGE_MS 1000       /* the shared store view is replaced this long after the last one was ready */
#define QUIET_MS 10000         /* ... while a query came in this long */
#define STALE_MS 5000          /* a view older than this (after a quiet spell) is replaced before a query reads it */
#define STREAM_MIN_NODES 20000 /* a tree of this many nodes or more is sent as it is written */

typedef struct cached_tree {
    uint8_t id[16];
    uint8_t summary[CMR_TRACE_SUMMARY_MAX_LEN];
    size_t summary_len;
    size_t names; /* size of the name tables it was rendered with */
    char *json;
} cached_tree_t;

/* A large tree kept assembled (its JSON is not kept: it is written again for every answer,
 * as it is sent), counted: by its cache slot and by every answer writing it. */
typedef struct shared_tree {
    cmr_tree_t t; /* owned */
    int refs;     /* under cache_lock */
} shared_tree_t;

typedef struct big_slot {
    uint8_t id[16];
    uint8_t summary[CMR_TRACE_SUMMARY_MAX_LEN];
    size_t summary_len;
    shared_tree_t *st; /* a reference, or NULL */
} big_slot_t;

#define BIG_SLOTS 4 /* large trees kept assembled */

/* The view the queries share, counted: replaced when older than a second, freed by the
 * last query that still reads it. */
typedef struct shared_view {
    cmr_ingest_view_t *v; /* owned */
    int refs;             /* queries reading it, plus 1 while it is the current one */
    int64_t opened_ms;
} shared_view_t;

struct cmr_ingest_http {
    cmr_http_server_t *server; /* owned */
    int port;
    char root[4096];
    pthread_mutex_t lock; /* view, last_query_ms, stop (held only for moments) */
    pthread_cond_t wake;  /* the refresher's */
    pthread_t refresher;
    bool refresher_started;
    bool stop;
    int64_t last_query_ms;
    pthread_mutex_t cache_lock; /* cache */
    shared_view_t *view;        /* the current one, or NULL */
    cached_tree_t cache[CACHE_SLOTS];
    big_slot_t big[BIG_SLOTS]; /* under cache_lock too */
    cmr_ingest_peers_t *peers; /* the partitions' owners (a worker's), or NULL; not owned; under lock */
};

/* {"error": msg}. msg may hold bytes of the request: control characters become spaces,
 * invalid UTF-8 U+FFFD. */
static char *error_json(const char *msg)
{
    char *clean = strdup(msg);
    if (!clean)
        return NULL;
    for (char *p = clean; *p; p++)
        if ((unsigned char)*p < 0x20)
            *p = ' ';
    char *out = cmr_json_take(json_pack("{s:o}", "error", cmr_json_str(clean)), CMR_JSON_COMPACT);
    free(clean);
    return out;
}

typedef struct query {
    char *keys[QUERY_MAX], *vals[QUERY_MAX];
    int n;
} query_t;

static int parse_query(char *q, query_t *out, char *err, size_t errlen)
{
    out->n = 0;
    for (char *save = NULL, *tok = q ? strtok_r(q, "&", &save) : NULL; tok; tok = strtok_r(NULL, "&", &save)) {
        if (out->n == QUERY_MAX) {
            snprintf(err, errlen, "too many query parameters");
            return -1;
        }
        char *eq = strchr(tok, '=');
        if (eq)
            *eq = '\0';
        char *v = eq ? eq + 1 : tok + strlen(tok);
        if (cmr_http_url_decode(tok) || cmr_http_url_decode(v)) {
            snprintf(err, errlen, "bad %%-escape in the query");
            return -1;
        }
        out->keys[out->n] = tok;
        out->vals[out->n++] = v;
    }
    return 0;
}

static void view_unref(shared_view_t *sv)
{
    if (sv && --sv->refs == 0) {
        cmr_ingest_view_free(sv->v);
        free(sv);
    }
}

/* The view a query reads: without a server a fresh one (*owned, the caller frees it with
 * put_view); with one the shared current view, a reference taken (*owned the reference). */
/* Replaces the shared view by a fresh one, opened outside the lock (a read-only open
 * replays the stores' logs, which takes long while the worker writes): the queries go on
 * reading the current view meanwhile. 0, or -1 with err (the current view stays). */
static int refresh_view(cmr_ingest_http_t *h, char *err, size_t errlen)
{
    shared_view_t *fresh = calloc(1, sizeof *fresh);
    if (!fresh || !(fresh->v = cmr_ingest_view_open(h->root, err, errlen))) {
        if (!fresh)
            snprintf(err, errlen, "out of memory");
        free(fresh);
        return -1;
    }
    fresh->refs = 1;
    fresh->opened_ms = cmr_mono_ms();
    pthread_mutex_lock(&h->lock);
    shared_view_t *old = h->view;
    h->view = fresh;
    view_unref(old); /* freed now, or by the last query reading it */
    pthread_mutex_unlock(&h->lock);
    return 0;
}

/* The refresher: while queries come (one in the last QUIET_MS), a fresh view every
 * VIEW_AGE_MS after the last one was ready. */
static void *refresher(void *arg)
{
    cmr_ingest_http_t *h = arg;
    pthread_mutex_lock(&h->lock);
    while (!h->stop) {
        int64_t now = cmr_mono_ms();
        bool wanted = now - h->last_query_ms < QUIET_MS && (!h->view || now - h->view->opened_ms >= VIEW_AGE_MS);
        if (wanted) {
            pthread_mutex_unlock(&h->lock);
            char err[512];
            refresh_view(h, err, sizeof err);
            pthread_mutex_lock(&h->lock);
            continue;
        }
        struct timespec ts = cmr_wall_deadline(100);
        pthread_cond_timedwait(&h->wake, &h->lock, &ts);
    }
    pthread_mutex_unlock(&h->lock);
    return NULL;
}

/* The view a query reads: without a server a fresh one (*owned, the caller frees it with
 * put_view); with one the shared current view, a reference taken (*owned the reference),
 * opened here only when there is none yet. */
static cmr_ingest_view_t *get_view(cmr_ingest_http_t *h, const char *root, void **owned, char *err, size_t errlen)
{
    if (!h) {
        cmr_ingest_view_t *v = cmr_ingest_view_open(root, err, errlen);
        *owned = v;
        return v;
    }
    *owned = NULL;
    pthread_mutex_lock(&h->lock);
    int64_t now = cmr_mono_ms();
    h->last_query_ms = now;
    /* none yet, or left old by a quiet spell (the refresher rests then): this query waits */
    bool stale = !h->view || now - h->view->opened_ms > STALE_MS;
    pthread_cond_signal(&h->wake);
    pthread_mutex_unlock(&h->lock);
    if (stale && refresh_view(h, err, errlen) != 0) {
        pthread_mutex_lock(&h->lock);
        bool have = h->view != NULL;
        pthread_mutex_unlock(&h->lock);
        if (!have)
            return NULL; /* else the older view answers */
    }
    pthread_mutex_lock(&h->lock);
    shared_view_t *sv = h->view;
    sv->refs++;
    pthread_mutex_unlock(&h->lock);
    *owned = sv;
    return sv->v;
}

static void put_view(cmr_ingest_http_t *h, void *owned)
{
    if (!h) {
        cmr_ingest_view_free(owned);
        return;
    }
    pthread_mutex_lock(&h->lock);
    view_unref(owned);
    pthread_mutex_unlock(&h->lock);
}

/* A tree as JSON (or an export). Rendered trees are kept per trace with the summary they
 * were rendered from: while the stored summary (and the name tables) are unchanged, the
 * answer comes from memory without reading the trace's batches. */
/* A large tree sent as it is written (cmr_tree_json_stream_t): it holds the view whose
 * name tables it reads until the answer is sent. */
typedef struct tree_stream {
    cmr_tree_json_stream_t *s; /* owned */
    cmr_ingest_http_t *h;
    shared_tree_t *st; /* a reference */
    void *view;        /* a reference to the shared view (put_view): the names it reads */
} tree_stream_t;

static long tree_stream_read(void *ctx, char *buf, size_t max)
{
    return cmr_tree_json_stream_read(((tree_stream_t *)ctx)->s, buf, max);
}

/* Gives back a reference to a kept tree; the last one frees it. Under cache_lock. */
static void tree_unref(shared_tree_t *st)
{
    if (st && --st->refs == 0) {
        cmr_tree_free(&st->t);
        free(st);
    }
}

/* tree_unref, taking the lock. */
static void tree_release(cmr_ingest_http_t *h, shared_tree_t *st)
{
    pthread_mutex_lock(&h->cache_lock);
    tree_unref(st);
    pthread_mutex_unlock(&h->cache_lock);
}

static void tree_stream_free(void *ctx)
{
    tree_stream_t *ts = ctx;
    cmr_tree_json_stream_free(ts->s);
    tree_release(ts->h, ts->st);
    put_view(ts->h, ts->view);
    free(ts);
}

/* Answers with kept tree st (a reference taken by the caller, handed over here) as a
 * stream, with the view reference *owned (taken). 0, or -1 (nothing taken) on no memory. */
static int stream_tree(cmr_ingest_http_t *h, cmr_ingest_view_t *v, shared_tree_t *st, void **owned,
                       cmr_http_response_t *res)
{
    tree_stream_t *ts = malloc(sizeof *ts);
    if (!ts || !(ts->s = cmr_tree_json_stream_over(cmr_ingest_view_names(v), &st->t))) {
        free(ts);
        return -1;
    }
    ts->h = h;
    ts->st = st;
    ts->view = *owned;
    *owned = NULL;
    res->stream_read = tree_stream_read;
    res->stream_free = tree_stream_free;
    res->stream_ctx = ts;
    return 0;
}

/* The kept large tree of trace id with this summary (a reference taken), or NULL. */
static shared_tree_t *big_find(cmr_ingest_http_t *h, const uint8_t id[16], const uint8_t *enc, size_t enc_len)
{
    big_slot_t *b = &h->big[(id[15] ^ id[7]) % BIG_SLOTS];
    pthread_mutex_lock(&h->cache_lock);
    shared_tree_t *st =
        b->st && !memcmp(b->id, id, 16) && b->summary_len == enc_len && !memcmp(b->summary, enc, enc_len) ? b->st
                                                                                                          : NULL;
    if (st)
        st->refs++;
    pthread_mutex_unlock(&h->cache_lock);
    return st;
}

/* Keeps tree t (taken) as trace id's large tree; returns it with a reference for the caller
 * (NULL on no memory: t is freed). */
static shared_tree_t *big_keep(cmr_ingest_http_t *h, const uint8_t id[16], const uint8_t *enc, size_t enc_len,
                               cmr_tree_t *t)
{
    shared_tree_t *st = malloc(sizeof *st);
    if (!st) {
        cmr_tree_free(t);
        return NULL;
    }
    st->t = *t;
    memset(t, 0, sizeof *t);
    st->refs = 2; /* the slot's and the caller's */
    big_slot_t *b = &h->big[(id[15] ^ id[7]) % BIG_SLOTS];
    pthread_mutex_lock(&h->cache_lock);
    tree_unref(b->st);
    memcpy(b->id, id, 16);
    memcpy(b->summary, enc, enc_len);
    b->summary_len = enc_len;
    b->st = st;
    pthread_mutex_unlock(&h->cache_lock);
    return st;
}

static int answer_tree(cmr_ingest_http_t *h, cmr_ingest_view_t *v, const uint8_t id[16], const char *format,
                       void **owned, cmr_http_response_t *stream_to, char **body)
{
    cmr_trace_summary_t s;
    int r = cmr_ingest_view_summary(v, id, &s);
    if (r == 0) {
        *body = error_json("no such trace");
        return 404;
    }
    if (r < 0) {
        *body = error_json("cannot read the trace");
        return 500;
    }
    uint8_t enc[CMR_TRACE_SUMMARY_MAX_LEN];
    size_t enc_len = cmr_trace_summary_encode(&s, enc);
    cached_tree_t *slot = h && !format ? &h->cache[(id[15] ^ id[7]) % CACHE_SLOTS] : NULL;
    size_t names = cmr_names_count(cmr_ingest_view_names(v));
    if (slot) {
        pthread_mutex_lock(&h->cache_lock);
        bool hit = slot->json && !memcmp(slot->id, id, 16) && slot->summary_len == enc_len &&
                   !memcmp(slot->summary, enc, enc_len) && slot->names == names;
        *body = hit ? strdup(slot->json) : NULL;
        pthread_mutex_unlock(&h->cache_lock);
        if (hit)
            return *body ? 200 : 500;
    }
    if (format && strcmp(format, "chrome") && strcmp(format, "otlp")) {
        *body = error_json("format must be chrome or otlp");
        return 400;
    }
    shared_tree_t *kept = slot && stream_to ? big_find(h, id, enc, enc_len) : NULL;
    if (kept) {
        if (stream_tree(h, v, kept, owned, stream_to) == 0)
            return 200;
        tree_release(h, kept);
    }
    cmr_tree_t t;
    r = cmr_ingest_view_tree(v, id, &t);
    if (r != 1) {
        *body = error_json(r == 0 ? "no such trace" : "cannot read the trace");
        return r == 0 ? 404 : 500;
    }
    const cmr_names_t *n = cmr_ingest_view_names(v);
    if (!format && stream_to && t.count >= STREAM_MIN_NODES) {
        /* kept assembled (not rendered) and sent as it is written */
        shared_tree_t *st = big_keep(h, id, enc, enc_len, &t);
        if (st && stream_tree(h, v, st, owned, stream_to) == 0)
            return 200;
        if (st)
            tree_release(h, st);
        *body = error_json("out of memory");
        return 500;
    }
    if (!format)
        *body = cmr_ingest_tree_json(n, &t);
    else if (!strcmp(format, "chrome"))
        *body = cmr_ingest_export_chrome(n, &t);
    else
        *body = cmr_ingest_export_otlp(n, &t);
    cmr_tree_free(&t);
    if (slot && *body) {
        char *copy = strdup(*body);
        pthread_mutex_lock(&h->cache_lock);
        free(slot->json);
        memcpy(slot->id, id, 16);
        memcpy(slot->summary, enc, enc_len);
        slot->summary_len = enc_len;
        slot->names = names;
        slot->json = copy;
        pthread_mutex_unlock(&h->cache_lock);
    }
    return *body ? 200 : 500;
}

#define METHODS_MAX 100 /* ids per request: the web UI's batch, well inside a 2 KB target */

/* GET /api/methods?ids=a,b,c: the display names of method ids (the web UI names the
 * methods of lists that carry only ids, e.g. the overhead budget's removals). */
static int answer_methods(cmr_ingest_http_t *h, const char *root, const query_t *q, char **body)
{
    const char *ids = NULL;
    for (int i = 0; i < q->n; i++)
        if (!strcmp(q->keys[i], "ids"))
            ids = q->vals[i];
    if (!ids) {
        *body = error_json("ids= is missing: a comma-separated list of 16-hex-digit method ids");
        return 400;
    }
    char err[512];
    void *owned;
    cmr_ingest_view_t *v = get_view(h, root, &owned, err, sizeof err);
    if (!v) {
        *body = error_json(err);
        return 500;
    }
    const cmr_names_t *names = cmr_ingest_view_names(v);
    json_t *out = json_object();
    int n = 0, status = 200;
    for (const char *p = ids; *p;) {
        size_t len = strcspn(p, ",");
        uint64_t id;
        if (cmr_id64_parse(p, len, &id) != 0 || ++n > METHODS_MAX) {
            *body = error_json(n <= METHODS_MAX ? "a method id is 16 hex digits" : "at most 100 ids at a time");
            status = 400;
            break;
        }
        char buf[2048];
        const char *name = cmr_names_method_known(names, id, buf, sizeof buf);
        char hex[17];
        memcpy(hex, p, 16);
        hex[16] = '\0';
        json_object_set_new(out, hex, name ? cmr_json_str(name) : json_null());
        p += len + (p[len] == ',');
    }
    put_view(h, owned);
    if (status == 200)
        *body = cmr_json_take(json_pack("{s:o}", "methods", out), CMR_JSON_COMPACT);
    else
        json_decref(out);
    return status;
}

/* GET /api/agents (the latest status of every JVM), /api/agents/<hex id>?from=&to= (one's history). */
static int answer_agents(const char *root, const char *id, const query_t *q, char **body)
{
    char err[512];
    uint64_t agent = 0;
    if (*id && cmr_id64_parse(id, strlen(id), &agent) != 0) {
        *body = error_json("an agent id is 16 hex digits");
        return 400;
    }
    int64_t from_ns = 0, to_ns = 0;
    for (int i = 0; i < q->n; i++)
        if ((!strcmp(q->keys[i], "from") && cmr_ingest_parse_time(q->vals[i], &from_ns) != 0) ||
            (!strcmp(q->keys[i], "to") && cmr_ingest_parse_time(q->vals[i], &to_ns) != 0)) {
            *body = error_json("from and to are times (ISO 8601 UTC, unix time, or -10m)");
            return 400;
        }
    if (cmr_ingest_agents(root, agent, from_ns / 1000000, to_ns / 1000000, body, NULL, err, sizeof err) != 0) {
        *body = error_json(err);
        return 500;
    }
    return 200;
}

/* GET /api/diagnoses/<16 hex digits>?limit=N&http_status=5* (and http_method, http_path) */
static int answer_diagnosis(cmr_ingest_http_t *h, const char *root, const char *id, const query_t *q, char **body)
{
    char err[512];
    void *owned;
    cmr_ingest_view_t *v = get_view(h, root, &owned, err, sizeof err);
    if (!v) {
        *body = error_json(err);
        return 500;
    }
    int rc = cmr_ingest_diagnosis_query(v, id, (const char *const *)q->keys, (const char *const *)q->vals, (size_t)q->n,
                                        body, NULL, err, sizeof err);
    put_view(h, owned);
    if (rc != 0) {
        *body = error_json(err);
        return rc == 2 ? 400 : 500;
    }
    return 200;
}

/* Answers GET path (no query; the caller's buffer, changed here) with the parameters q. */
/* --- fan-out (ing_peers.c) ------------------------------------------------------------ */

void cmr_ingest_http_set_peers(cmr_ingest_http_t *h, cmr_ingest_peers_t *peers)
{
    pthread_mutex_lock(&h->lock);
    h->peers = peers;
    pthread_mutex_unlock(&h->lock);
}

static cmr_ingest_peers_t *get_peers(cmr_ingest_http_t *h)
{
    if (!h)
        return NULL;
    pthread_mutex_lock(&h->lock);
    cmr_ingest_peers_t *p = h->peers;
    pthread_mutex_unlock(&h->lock);
    return p;
}

/* The fan-out's own query keys, taken out of q: local=1, partitions=a,b,... */
typedef struct fanout_keys {
    bool local, has_parts;
    bool parts[4096];
} fanout_keys_t;

static int parse_partitions(const char *s, bool parts[4096], char *err, size_t errlen)
{
    for (const char *c = s; *c;) {
        char *end;
        long v = strtol(c, &end, 10);
        if (end == c || v < 0 || v >= 4096 || (*end && *end != ',')) {
            snprintf(err, errlen, "partitions: a comma-separated list of partition numbers (0 to 4095)");
            return -1;
        }
        parts[v] = true;
        c = *end ? end + 1 : end;
    }
    return 0;
}

static int take_fanout_keys(query_t *q, fanout_keys_t *k, char *err, size_t errlen)
{
    for (int i = 0; i < q->n; i++) {
        bool local = !strcmp(q->keys[i], "local"), parts = !strcmp(q->keys[i], "partitions");
        if (!local && !parts)
            continue;
        if (local)
            k->local = !strcmp(q->vals[i], "1") || !strcmp(q->vals[i], "true");
        else if (parse_partitions(q->vals[i], k->parts, err, errlen) != 0)
            return -1;
        k->has_parts |= parts;
        q->keys[i] = q->keys[q->n - 1]; /* taken out */
        q->vals[i--] = q->vals[--q->n];
    }
    return 0;
}

/* The query again, %-encoded, for a peer (the fan-out's own keys left out). */
static char *query_string(const query_t *q)
{
    cmr_buf_t b = {0};
    for (int i = 0; i < q->n; i++) {
        cmr_buf_puts(&b, i ? "&" : "");
        for (int part = 0; part < 2; part++) {
            for (const unsigned char *c = (const unsigned char *)(part ? q->vals[i] : q->keys[i]); *c; c++)
                if ((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '-' ||
                    *c == '_' || *c == '.' || *c == '~')
                    cmr_buf_putc(&b, (char)*c);
                else
                    cmr_buf_printf(&b, "%%%02X", *c);
            if (!part)
                cmr_buf_putc(&b, '=');
        }
    }
    cmr_buf_putc(&b, '\0');
    return cmr_buf_ok(&b) ? cmr_buf_take(&b) : (cmr_buf_free(&b), NULL);
}

/* A peer's local answer: the partitions asked that this worker owns (into eff), and a JSON
 * array of those it does not (malloc'd; NULL when none). */
static json_t *local_partitions(cmr_ingest_peers_t *peers, cmr_topic_t topic, const fanout_keys_t *k, bool eff[4096])
{
    int32_t *own;
    size_t n = cmr_ingest_peers_owned(peers, topic, &own);
    for (size_t i = 0; own && i < n; i++)
        eff[own[i]] = !k->has_parts || k->parts[own[i]];
    free(own);
    json_t *not_owned = NULL;
    for (int i = 0; k->has_parts && i < 4096; i++)
        if (k->parts[i] && !eff[i]) {
            if (!not_owned)
                not_owned = json_array();
            json_array_append_new(not_owned, json_integer(i));
        }
    return not_owned;
}

static bool owns(cmr_ingest_peers_t *peers, int32_t partition)
{
    int32_t *own;
    size_t n = cmr_ingest_peers_owned(peers, CMR_TOPIC_EVENTS, &own);
    bool found = false;
    for (size_t i = 0; own && i < n && !found; i++)
        found = own[i] == partition;
    free(own);
    return found;
}

/* Adds "partitions_not_owned" to a list answer (takes both). */
static char *with_not_owned(char *json, json_t *not_owned)
{
    if (!not_owned || !json)
        return json;
    json_t *root = json_loads(json, 0, NULL);
    free(json);
    if (!root) {
        json_decref(not_owned);
        return NULL;
    }
    json_object_set_new(root, "partitions_not_owned", not_owned);
    return cmr_json_take(root, CMR_JSON_COMPACT);
}

/* GET /api/metrics/{top,series,jvms,alerts,stalled}?env=&kind=&name=&stat=&last=&from=&to=&res=&limit=
 * from the metrics stores of the partitions `only` names (NULL: every store of the root):
 * the status, *body the answer. */
static int local_metrics(const char *root, const bool *only, const char *what, const query_t *q, char **body)
{
    char err[512];
    cmr_metrics_view_t *v = cmr_metrics_view_open_only(root, only, err, sizeof err);
    if (!v) {
        *body = error_json(err);
        return 500;
    }
    int rc = cmr_metrics_query(v, what, (const char *const *)q->keys, (const char *const *)q->vals, (size_t)q->n, body,
                               NULL, err, sizeof err);
    cmr_metrics_view_free(v);
    if (rc != 0) {
        *body = error_json(err);
        return strstr(err, "unknown query") ? 404 : 400;
    }
    return *body ? 200 : 500;
}

/* The value of key in q, or NULL. */
static const char *query_value(const query_t *q, const char *key)
{
    for (int i = 0; i < q->n; i++)
        if (!strcmp(q->keys[i], key))
            return q->vals[i];
    return NULL;
}

/* GET /api/metrics/...: an environment's metrics are whole in one cmr.metrics partition
 * (its key), so a query of one environment is asked of that partition's owner and a query
 * of every environment of every owner, merged (ing_peers.c); local=1&partitions=... is
 * such a question from another worker: answered from the partitions asked that this
 * worker owns, naming the others. */
static int answer_metrics(cmr_ingest_http_t *h, const char *root, const char *what, const query_t *qp, char **body)
{
    char err[512];
    query_t q = *qp;
    fanout_keys_t fk = {0};
    if (take_fanout_keys(&q, &fk, err, sizeof err) != 0) {
        *body = error_json(err);
        return 400;
    }
    cmr_ingest_peers_t *peers = get_peers(h);
    if (!peers)
        return local_metrics(root, fk.has_parts ? fk.parts : NULL, what, &q, body);
    if (fk.local) {
        bool eff[4096] = {0};
        json_t *not_owned = local_partitions(peers, CMR_TOPIC_METRICS, &fk, eff);
        int status = local_metrics(root, eff, what, &q, body);
        if (status == 200)
            *body = with_not_owned(*body, not_owned);
        else
            json_decref(not_owned);
        return *body ? status : 500;
    }
    const char *env = query_value(&q, "env");
    cmr_ingest_plan_t plan;
    if (cmr_ingest_peers_plan(peers, CMR_TOPIC_METRICS, env && env[0] ? env : NULL, &plan) != 0) {
        *body = error_json("out of memory");
        return 500;
    }
    char *local = NULL, *qs = query_string(&q);
    int status = local_metrics(root, plan.local, what, &q, &local);
    const char *limit = query_value(&q, "limit");
    if (local && qs)
        status = cmr_ingest_peers_gather_metrics(peers, &plan, what, qs, status, local,
                                                 limit ? strtoul(limit, NULL, 10) : 20, body);
    else
        status = 500;
    free(local);
    free(qs);
    cmr_ingest_plan_free(&plan);
    if (!*body)
        *body = error_json("out of memory");
    return status;
}

/* GET /api/traces/<id>[/export] of a trace whose partition another worker owns: asked of
 * it, its answer passed on once it parsed as JSON. */
static int proxy_trace(cmr_ingest_peers_t *peers, const cmr_ingest_plan_t *plan, int32_t partition, const char *id_s,
                       const char *rest, const char *format, char **body)
{
    const char *url = NULL;
    for (size_t i = 0; i < plan->ngroups && !url; i++)
        for (size_t k = 0; k < plan->groups[i].npartitions && !url; k++)
            if (plan->groups[i].partitions[k] == partition)
                url = plan->groups[i].url;
    char msg[1200];
    if (!url) {
        snprintf(msg, sizeof msg, "no worker owns partition %d of the trace now (a rebalance, or its owner is down)",
                 (int)partition);
        *body = error_json(msg);
        return 503;
    }
    char target[1200], err[300];
    snprintf(target, sizeof target, "%s/api/traces/%s%s?local=1%s%s", url, id_s, rest ? "/export" : "",
             format ? "&format=" : "",
             format && strspn(format, "abcdefghijklmnopqrstuvwxyz") == strlen(format) ? format : "");
    cmr_buf_t b = {0};
    long status = cmr_ingest_peers_get(peers, target, 30000, &b, err, sizeof err);
    json_t *parsed = status ? json_loadb((const char *)b.data, b.len, 0, NULL) : NULL;
    if (!parsed) {
        snprintf(msg, sizeof msg, "the owner of partition %d (%s) %s: %s", (int)partition, url,
                 status ? "answered something that is not JSON" : "did not answer", status ? "" : err);
        cmr_log(CMR_LOG_WARN, "ingest.fanout_failed", "url=\"%s\" partition=%d error=\"%s\"", url, (int)partition,
                status ? "not JSON" : err);
        cmr_buf_free(&b);
        *body = error_json(msg);
        return 502;
    }
    json_decref(parsed);
    if (status == 421) { /* it no longer owns it: the announcements lag a rebalance */
        cmr_buf_free(&b);
        snprintf(msg, sizeof msg, "the owner of partition %d changed (a rebalance): ask again", (int)partition);
        *body = error_json(msg);
        return 503;
    }
    cmr_buf_putc(&b, '\0');
    *body = cmr_buf_ok(&b) ? cmr_buf_take(&b) : (cmr_buf_free(&b), NULL);
    return (int)status;
}

static int answer_path(cmr_ingest_http_t *h, const char *root, char *path, const query_t *qp,
                       cmr_http_response_t *stream_to, char **body)
{
    char err[512];
    query_t q = *qp;
    if (!strcmp(path, "/health")) {
        *body = cmr_json_take(json_pack("{s:s}", "status", "ok"), CMR_JSON_COMPACT);
        return 200;
    }
    if (!strncmp(path, "/api/metrics/", 13))
        return answer_metrics(h, root, path + 13, &q, body);
    if (!strcmp(path, "/api/agents") || !strncmp(path, "/api/agents/", 12))
        return answer_agents(root, path[11] ? path + 12 : "", &q, body);
    if (!strncmp(path, "/api/diagnoses/", 15))
        return answer_diagnosis(h, root, path + 15, &q, body);
    if (!strcmp(path, "/api/methods"))
        return answer_methods(h, root, &q, body);
    if (strncmp(path, "/api/traces", 11) || (path[11] && path[11] != '/')) {
        *body = error_json("not found: try /api/traces, /api/traces/<trace id>, /api/diagnoses/<diagnosis id>, "
                           "/api/metrics/top, /api/agents, /api/methods?ids=");
        return 404;
    }
    fanout_keys_t fk = {0};
    if (take_fanout_keys(&q, &fk, err, sizeof err) != 0) {
        *body = error_json(err);
        return 400;
    }
    cmr_ingest_peers_t *peers = get_peers(h);
    bool fan = peers && !fk.local;
    cmr_ingest_plan_t plan = {0};
    if (fan && cmr_ingest_peers_plan(peers, CMR_TOPIC_EVENTS, NULL, &plan) != 0) {
        *body = error_json("out of memory");
        return 500;
    }
    void *owned;
    cmr_ingest_view_t *v = get_view(h, root, &owned, err, sizeof err);
    if (!v) {
        cmr_ingest_plan_free(&plan);
        *body = error_json(err);
        return 500;
    }
    int status = 200;
    if (!path[11] || !path[12]) {
        cmr_trace_filter_t f = {0};
        bool eff[4096] = {0};
        json_t *not_owned = NULL;
        if (fan) {
            f.partitions = plan.local; /* the others' come from their owners */
        } else if (peers) {
            not_owned = local_partitions(peers, CMR_TOPIC_EVENTS, &fk, eff);
            f.partitions = eff;
        } else if (fk.has_parts) {
            f.partitions = fk.parts;
        }
        f.npartitions = 4096;
        for (int i = 0; i < q.n; i++)
            if (cmr_trace_filter_set(&f, q.keys[i], q.vals[i], err, sizeof err) != 0) {
                *body = error_json(err);
                status = 400;
                goto out;
            }
        cmr_trace_summary_t *s;
        long cnt = cmr_ingest_view_list(v, &f, &s);
        if (cnt < 0) {
            json_decref(not_owned);
            *body = error_json("query failed");
            status = 500;
            goto out;
        }
        char *local = cmr_ingest_list_json(cmr_ingest_view_names(v), s, (size_t)cnt);
        free(s);
        if (fan) {
            char *qs = query_string(&q);
            *body = qs && local ? cmr_ingest_peers_gather(peers, &plan, "/api/traces", qs, local, f.slowest,
                                                          f.limit ? f.limit : 50)
                                : NULL;
            free(qs);
            free(local);
        } else {
            *body = with_not_owned(local, not_owned);
        }
        goto out;
    }
    char *id_s = path + 12, *rest = strchr(id_s, '/');
    if (rest)
        *rest++ = '\0';
    uint8_t id[16];
    if (strlen(id_s) != 32 || cmr_unhex(id_s, id, 16) != 0) {
        *body = error_json("a trace id is 32 hex digits");
        status = 400;
        goto out;
    }
    const char *format = NULL;
    if (rest) {
        if (strcmp(rest, "export")) {
            *body = error_json("not found");
            status = 404;
            goto out;
        }
        format = "chrome";
        for (int i = 0; i < q.n; i++)
            if (!strcmp(q.keys[i], "format"))
                format = q.vals[i];
    }
    int32_t part = peers ? cmr_ingest_peers_trace_partition(peers, id) : -1;
    if (fan && part >= 0 && part < 4096 && !plan.local[part]) {
        status = proxy_trace(peers, &plan, part, id_s, rest, format, body);
    } else if (!fan && peers && part >= 0 && !owns(peers, part)) {
        char msg[160]; /* asked as the owner, but the partition moved: not a stale copy's answer */
        snprintf(msg, sizeof msg, "this worker does not own partition %d of the trace (any more)", (int)part);
        *body = error_json(msg);
        status = 421;
    } else {
        status = answer_tree(h, v, id, format, &owned, stream_to, body);
    }
out:
    put_view(h, owned);
    cmr_ingest_plan_free(&plan);
    return status;
}

int cmr_ingest_http_answer(const char *root, const char *method, const char *target, char **body)
{
    char err[512];
    *body = NULL;
    if (strcmp(method, "GET")) {
        *body = error_json("only GET is supported");
        return 405;
    }
    char path[2048];
    if (strlen(target) >= sizeof path) {
        *body = error_json("target too long");
        return 414;
    }
    strcpy(path, target);
    char *qs = strchr(path, '?');
    if (qs)
        *qs++ = '\0';
    query_t q;
    if (parse_query(qs, &q, err, sizeof err) != 0) {
        *body = error_json(err);
        return 400;
    }
    return answer_path(NULL, root, path, &q, NULL, body);
}

/* --- the server ------------------------------------------------------------------------ */

/* Collects MHD's decoded query parameters (pointers into the request: valid while it runs). */
static int collect(void *opaque, const char *key, const char *value)
{
    query_t *q = opaque;
    if (q->n == QUERY_MAX) {
        q->n = QUERY_MAX + 1; /* too many */
        return 1;
    }
    q->keys[q->n] = (char *)key;
    q->vals[q->n++] = (char *)value;
    return 0;
}

static int answer_request(cmr_ingest_http_t *h, const cmr_http_request_t *req, cmr_http_response_t *res, char **body)
{
    *body = NULL;
    const char *qs = strchr(req->target, '?');
    if (qs && cmr_http_target_bad_escape(qs)) {
        *body = error_json("bad %-escape in the query");
        return 400;
    }
    query_t q = {.n = 0};
    cmr_http_query_each(req, collect, &q);
    if (q.n > QUERY_MAX) {
        *body = error_json("too many query parameters");
        return 400;
    }
    char path[2048];
    if (strlen(req->path) >= sizeof path) {
        *body = error_json("target too long");
        return 414;
    }
    strcpy(path, req->path);
    return answer_path(h, h->root, path, &q, res, body);
}

/* On a server thread. */
static void on_request(void *opaque, const cmr_http_request_t *req, cmr_http_response_t *res)
{
    char *body = NULL;
    res->status = answer_request(opaque, req, res, &body);
    res->content_type = "application/json";
    if (res->stream_read)
        return; /* a large tree, sent as it is written */
    if (!body)
        body = error_json("out of memory");
    res->body = body; /* the server's now */
    res->len = body ? strlen(body) : 0;
}

cmr_ingest_http_t *cmr_ingest_http_start_conf(const cmr_conf_t *conf, const char *root, int port, char *err,
                                              size_t errlen)
{
    const char *file = cmr_conf_get(conf, "ingest.http.token_file", "");
    char token[300] = "";
    if (file[0] && cmr_http_token_load(file, token, sizeof token, err, errlen) != 0)
        return NULL;
    cmr_ingest_http_t *h = cmr_ingest_http_start(root, cmr_conf_get(conf, "ingest.http.address", "127.0.0.1"), port,
                                                 token[0] ? token : NULL, err, errlen);
    explicit_bzero(token, sizeof token);
    return h;
}

static void stop_refresher(cmr_ingest_http_t *h)
{
    if (!h->refresher_started)
        return;
    pthread_mutex_lock(&h->lock);
    h->stop = true;
    pthread_cond_signal(&h->wake);
    pthread_mutex_unlock(&h->lock);
    pthread_join(h->refresher, NULL);
}

cmr_ingest_http_t *cmr_ingest_http_start(const char *root, const char *addr, int port, const char *token, char *err,
                                         size_t errlen)
{
    if (!cmr_http_address_valid(addr)) {
        snprintf(err, errlen, "ingest.http.address: \"%.200s\" is not an IPv4 or IPv6 address (or localhost)", addr);
        return NULL;
    }
    cmr_ingest_http_t *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    snprintf(h->root, sizeof h->root, "%s", root);
    pthread_mutex_init(&h->lock, NULL);
    pthread_mutex_init(&h->cache_lock, NULL);
    pthread_cond_init(&h->wake, NULL);
    h->refresher_started = pthread_create(&h->refresher, NULL, refresher, h) == 0;
    cmr_http_server_opts_t o = {
        .name = "ingest.http",
        .address = addr,
        .port = port,
        .threads = HTTP_THREADS,
        .connections = HTTP_CONNECTIONS,
        .timeout_s = HTTP_TIMEOUT_S,
        .not_allowed_type = "application/json",
        .not_allowed_body = "{\"error\":\"only GET is supported\"}",
        .token = token,
    };
    if (cmr_http_server_start(&o, on_request, h, &h->server, err, errlen) != 0) {
        stop_refresher(h);
        pthread_mutex_destroy(&h->lock);
        pthread_mutex_destroy(&h->cache_lock);
        pthread_cond_destroy(&h->wake);
        free(h);
        return NULL;
    }
    h->port = cmr_http_server_port(h->server);
    char a[128];
    cmr_log(CMR_LOG_INFO, "ingest.http_listening", "address=%s port=%d", cmr_log_escape(addr, a, sizeof a), h->port);
    return h;
}

int cmr_ingest_http_port(const cmr_ingest_http_t *h)
{
    return h->port;
}

void cmr_ingest_http_stop(cmr_ingest_http_t *h)
{
    if (!h)
        return;
    cmr_http_server_stop(h->server); /* waits for requests in flight */
    stop_refresher(h);
    pthread_mutex_destroy(&h->lock);
    pthread_mutex_destroy(&h->cache_lock);
    pthread_cond_destroy(&h->wake);
    view_unref(h->view); /* the queries have ended: the server's threads are gone */
    for (int i = 0; i < CACHE_SLOTS; i++)
        free(h->cache[i].json);
    for (int i = 0; i < BIG_SLOTS; i++)
        tree_unref(h->big[i].st);
    free(h);
}

/*
 * ing_peers.c - which cmr-ingest worker owns which cmr.events partition, and the queries'
 * fan-out to them.
 *
 * Workers that do not share a store root (separate hosts) each hold only the partitions
 * they own. Every worker announces itself on the compacted topic cmr.ingest-workers (an
 * IngestWorker keyed by its worker id: its HTTP base URL, the partitions it owns and has
 * restored, a timestamp; leaving=true when it stops) and reads the topic by assign() into
 * the directory kept here. The owner of a partition is this worker when it owns it, else
 * the most recent announcement, not older than stale_ms and not leaving, that lists it.
 *
 * A list query (GET /api/traces) is answered from this worker's own partitions and from
 * every other owner's, asked with `local=1&partitions=a,b,...` (the same filters), in
 * parallel, each within what is left of timeout_ms. The answers are merged in the order
 * of the local list (newest first, or longest first with slowest=), cut to the limit. A
 * partition without an owner, whose owner did not answer in time, answered something
 * that is not a list, or no longer owns it, is named in "partitions_unreachable" with
 * "partial": true and the reasons in "errors": an answer is never silently partial.
 * A trace by id goes to the owner of its partition (the producers' partitioner on its
 * key, cmr_key_partition) and is passed on as it answers, once it parsed as JSON.
 *
 * Announcements are input from the cluster: one that does not decode or whose fields are
 * out of bounds (worker id, URL scheme and length, partition numbers) is rejected
 * (counted and logged by the caller), never applied. Answers of peers are bounded in size
 * (PEER_MAX_BYTES) and time and parsed strictly.
 *
 * Ownership: the directory owns copies of everything it keeps; answers are malloc'd for
 * the caller. All entry points are thread-safe (the worker writes, HTTP threads read).
 */
#include <curl/curl.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/buf.h"
#include "cmr/clock.h"
#include "cmr/ids.h"
#include "cmr/ingest.h"
#include "cmr/json.h"
#include "cmr/kafka.h"
#include "cmr/log.h"
#include "cmr/wire.h"

#define PEERS_MAX_PARTITIONS 4096
#define PEER_MAX_BYTES (64u << 20) /* an answer larger than this is refused */
#define ID_MAX 128
#define URL_MAX 512

typedef struct peer {
    char id[ID_MAX], url[URL_MAX];
    int64_t time_ms;
    bool leaving;
    int32_t *parts; /* owned */
    size_t nparts;
} peer_t;

struct cmr_ingest_peers {
    pthread_mutex_t lock;
    const cmr_conf_t *conf; /* the partitioner (kafka.partitioner); not owned */
    char self_id[ID_MAX], self_url[URL_MAX];
    char auth[400]; /* "Authorization: Bearer ..." for peers, or "" */
    int64_t started_ms, stale_ms;
    int timeout_ms;
    int32_t partition_count;
    bool owned[PEERS_MAX_PARTITIONS];
    peer_t *peers;
    size_t npeers, cap;
};

/* --- the directory ------------------------------------------------------------------- */

cmr_ingest_peers_t *cmr_ingest_peers_new(const cmr_ingest_peers_opts_t *o, char *err, size_t errlen)
{
    if (!cmr_ingest_peers_id_valid(o->worker_id)) {
        snprintf(err, errlen, "ingest.worker_id: \"%.100s\" is not 1 to %d letters, digits or . _ : -", o->worker_id,
                 ID_MAX - 1);
        return NULL;
    }
    if (!cmr_ingest_peers_url_valid(o->url)) {
        snprintf(err, errlen, "ingest.http.advertise_url: \"%.200s\" is not an http:// or https:// base URL", o->url);
        return NULL;
    }
    cmr_ingest_peers_t *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&p->lock, NULL);
    p->conf = o->conf;
    snprintf(p->self_id, sizeof p->self_id, "%s", o->worker_id);
    snprintf(p->self_url, sizeof p->self_url, "%s", o->url);
    if (o->token && o->token[0])
        snprintf(p->auth, sizeof p->auth, "Authorization: Bearer %s", o->token);
    p->started_ms = cmr_wall_ms();
    p->stale_ms = o->stale_ms > 0 ? o->stale_ms : 30000;
    p->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 3000;
    p->partition_count = o->partition_count;
    return p;
}

void cmr_ingest_peers_free(cmr_ingest_peers_t *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->npeers; i++)
        free(p->peers[i].parts);
    free(p->peers);
    pthread_mutex_destroy(&p->lock);
    explicit_bzero(p->auth, sizeof p->auth);
    free(p);
}

bool cmr_ingest_peers_id_valid(const char *id)
{
    size_t n = id ? strlen(id) : 0;
    if (n == 0 || n >= ID_MAX)
        return false;
    for (const char *c = id; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '.' ||
              *c == '_' || *c == ':' || *c == '-'))
            return false;
    return true;
}

bool cmr_ingest_peers_url_valid(const char *url)
{
    size_t n = url ? strlen(url) : 0;
    size_t scheme = !strncmp(url ? url : "", "http://", 7) ? 7 : !strncmp(url ? url : "", "https://", 8) ? 8 : 0;
    if (!scheme || n <= scheme || n >= URL_MAX || url[n - 1] == '/')
        return false;
    for (const char *c = url; *c; c++)
        if ((unsigned char)*c <= ' ' || (unsigned char)*c >= 0x7f || *c == '?' || *c == '#' || *c == '@')
            return false; /* no query, fragment or credentials: a base URL */
    return true;
}

void cmr_ingest_peers_set_owned(cmr_ingest_peers_t *p, int32_t partition, bool owned)
{
    if (partition < 0 || partition >= PEERS_MAX_PARTITIONS)
        return;
    pthread_mutex_lock(&p->lock);
    p->owned[partition] = owned;
    pthread_mutex_unlock(&p->lock);
}

void cmr_ingest_peers_set_partition_count(cmr_ingest_peers_t *p, int32_t count)
{
    pthread_mutex_lock(&p->lock);
    if (count > 0 && count <= PEERS_MAX_PARTITIONS)
        p->partition_count = count;
    pthread_mutex_unlock(&p->lock);
}

size_t cmr_ingest_peers_owned(cmr_ingest_peers_t *p, int32_t **parts)
{
    pthread_mutex_lock(&p->lock);
    size_t n = 0;
    *parts = malloc(PEERS_MAX_PARTITIONS * sizeof **parts);
    for (int32_t i = 0; *parts && i < PEERS_MAX_PARTITIONS; i++)
        if (p->owned[i])
            (*parts)[n++] = i;
    pthread_mutex_unlock(&p->lock);
    return n;
}

int cmr_ingest_peers_announcement(cmr_ingest_peers_t *p, bool leaving, cmr_ingest_worker_t *out)
{
    memset(out, 0, sizeof *out);
    int32_t *parts;
    size_t n = leaving ? 0 : cmr_ingest_peers_owned(p, &parts);
    if (leaving)
        parts = NULL;
    else if (!parts)
        return -1;
    out->worker_id = strdup(p->self_id);
    out->url = strdup(p->self_url);
    out->partitions.items = calloc(n ? n : 1, sizeof *out->partitions.items);
    if (!out->worker_id || !out->url || !out->partitions.items) {
        free(parts);
        cmr_msg_body_free(CMR_MSG_INGEST_WORKER, out);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        out->partitions.items[i] = (cmr_owned_partition_t){.partition = parts[i], .applied_offset = -1};
    out->partitions.count = n;
    free(parts);
    pthread_mutex_lock(&p->lock);
    out->partition_count = p->partition_count;
    pthread_mutex_unlock(&p->lock);
    out->started_ms = p->started_ms;
    out->time_ms = cmr_wall_ms();
    out->leaving = leaving;
    return 0;
}

/* The checks an announcement must pass before it is kept. NULL, or why not. */
static const char *announcement_invalid(const cmr_ingest_worker_t *a)
{
    if (!cmr_ingest_peers_id_valid(a->worker_id))
        return "worker_id is not 1 to 127 letters, digits or . _ : -";
    if (!cmr_ingest_peers_url_valid(a->url))
        return "url is not an http:// or https:// base URL (no query, credentials or trailing /)";
    if (a->partition_count <= 0 || a->partition_count > PEERS_MAX_PARTITIONS)
        return "partition_count out of range";
    if (a->partitions.count > (size_t)a->partition_count)
        return "more partitions than partition_count";
    for (size_t i = 0; i < a->partitions.count; i++)
        if (a->partitions.items[i].partition < 0 || a->partitions.items[i].partition >= a->partition_count)
            return "a partition number out of range";
    if (a->time_ms <= 0)
        return "time_ms is not positive";
    return NULL;
}

/* The entry of a worker id (created empty when new), or NULL (out of memory). Locked. */
static peer_t *peer_slot(cmr_ingest_peers_t *p, const char *id)
{
    for (size_t i = 0; i < p->npeers; i++)
        if (!strcmp(p->peers[i].id, id))
            return &p->peers[i];
    if (CMR_ARRAY_GROW(p->peers, p->cap, p->npeers + 1) != 0)
        return NULL;
    peer_t *e = &p->peers[p->npeers++];
    memset(e, 0, sizeof *e);
    snprintf(e->id, sizeof e->id, "%s", id);
    return e;
}

int cmr_ingest_peers_add(cmr_ingest_peers_t *p, const void *payload, size_t len, char *err, size_t errlen)
{
    cmr_msg_t m;
    if (cmr_msg_decode(payload, len, &m, err, errlen) != CMR_WIRE_OK)
        return -1;
    const char *bad =
        m.type != CMR_MSG_INGEST_WORKER ? "not an IngestWorker" : announcement_invalid(&m.u.ingest_worker);
    if (bad) {
        snprintf(err, errlen, "%s", bad);
        cmr_msg_free(&m);
        return -1;
    }
    const cmr_ingest_worker_t *a = &m.u.ingest_worker;
    int rc = 0;
    pthread_mutex_lock(&p->lock);
    if (strcmp(a->worker_id, p->self_id)) { /* our own (or an earlier run's) is not a peer */
        peer_t *e = peer_slot(p, a->worker_id);
        int32_t *parts = calloc(a->partitions.count + 1, sizeof *parts);
        if (!e || !parts) {
            free(parts);
            snprintf(err, errlen, "out of memory");
            rc = -1;
        } else if (a->time_ms < e->time_ms) {
            free(parts); /* older than what we have: a late copy */
        } else {
            for (size_t i = 0; i < a->partitions.count; i++)
                parts[i] = a->partitions.items[i].partition;
            free(e->parts);
            e->parts = parts;
            e->nparts = a->partitions.count;
            snprintf(e->url, sizeof e->url, "%s", a->url);
            e->time_ms = a->time_ms;
            e->leaving = a->leaving;
        }
    }
    pthread_mutex_unlock(&p->lock);
    cmr_msg_free(&m);
    return rc;
}

/* The URL of the peer that owns partition (into url), 1; 0 when none does. Locked. */
static int owner_of(const cmr_ingest_peers_t *p, int32_t partition, int64_t now, char url[URL_MAX])
{
    const peer_t *best = NULL;
    for (size_t i = 0; i < p->npeers; i++) {
        const peer_t *e = &p->peers[i];
        if (e->leaving || now - e->time_ms > p->stale_ms || (best && e->time_ms <= best->time_ms))
            continue;
        for (size_t k = 0; k < e->nparts; k++)
            if (e->parts[k] == partition) {
                best = e;
                break;
            }
    }
    if (best)
        memcpy(url, best->url, URL_MAX);
    return best != NULL;
}

void cmr_ingest_plan_free(cmr_ingest_plan_t *plan)
{
    for (size_t i = 0; i < plan->ngroups; i++)
        free(plan->groups[i].partitions);
    free(plan->groups);
    free(plan->unowned);
    memset(plan, 0, sizeof *plan);
}

/* Adds partition to the group of url (made when new). 0 or -1. */
static int plan_add(cmr_ingest_plan_t *plan, size_t *cap, const char *url, int32_t partition)
{
    cmr_ingest_plan_group_t *g = NULL;
    for (size_t i = 0; i < plan->ngroups && !g; i++)
        if (!strcmp(plan->groups[i].url, url))
            g = &plan->groups[i];
    if (!g) {
        if (CMR_ARRAY_GROW(plan->groups, *cap, plan->ngroups + 1) != 0)
            return -1;
        g = &plan->groups[plan->ngroups++];
        memset(g, 0, sizeof *g);
        snprintf(g->url, sizeof g->url, "%s", url);
        if (!(g->partitions = calloc(PEERS_MAX_PARTITIONS, sizeof *g->partitions)))
            return -1;
    }
    g->partitions[g->npartitions++] = partition;
    return 0;
}

int cmr_ingest_peers_plan(cmr_ingest_peers_t *p, cmr_ingest_plan_t *plan)
{
    memset(plan, 0, sizeof *plan);
    size_t cap = 0;
    int rc = 0;
    int64_t now = cmr_wall_ms();
    char url[URL_MAX];
    pthread_mutex_lock(&p->lock);
    plan->partition_count = p->partition_count;
    plan->unowned = calloc((size_t)(p->partition_count > 0 ? p->partition_count : 1), sizeof *plan->unowned);
    rc = plan->unowned ? 0 : -1;
    for (int32_t i = 0; rc == 0 && i < p->partition_count; i++) {
        if (p->owned[i])
            plan->local[i] = true;
        else if (owner_of(p, i, now, url))
            rc = plan_add(plan, &cap, url, i);
        else
            plan->unowned[plan->nunowned++] = i;
    }
    pthread_mutex_unlock(&p->lock);
    if (rc != 0)
        cmr_ingest_plan_free(plan);
    return rc;
}

int32_t cmr_ingest_peers_trace_partition(cmr_ingest_peers_t *p, const uint8_t trace_id[16])
{
    char hex[33];
    cmr_hex(trace_id, 16, hex); /* the key of an EventBatch (topics.c) */
    pthread_mutex_lock(&p->lock);
    int32_t count = p->partition_count;
    pthread_mutex_unlock(&p->lock);
    return cmr_key_partition(p->conf ? cmr_conf_get(p->conf, "kafka.partitioner", NULL) : NULL, hex, 32, count);
}

/* --- asking peers --------------------------------------------------------------------- */

static size_t on_body(char *data, size_t size, size_t n, void *opaque)
{
    cmr_buf_t *b = opaque;
    if (b->len + size * n > PEER_MAX_BYTES)
        return 0; /* too large: the transfer fails (CURLE_WRITE_ERROR) */
    cmr_buf_put(b, data, size * n);
    return cmr_buf_ok(b) ? size * n : 0;
}

long cmr_ingest_peers_get(cmr_ingest_peers_t *p, const char *url, int timeout_ms, cmr_buf_t *body, char *err,
                          size_t errlen)
{
    CURL *h = curl_easy_init();
    if (!h) {
        snprintf(err, errlen, "out of memory");
        return 0;
    }
    struct curl_slist *hdrs = p->auth[0] ? curl_slist_append(NULL, p->auth) : NULL;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, body);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(timeout_ms > 0 ? timeout_ms : 1));
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    CURLcode rc = curl_easy_perform(h);
    long status = 0;
    if (rc == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    else
        snprintf(err, errlen, "%s", rc == CURLE_WRITE_ERROR ? "answer too large" : curl_easy_strerror(rc));
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(h);
    return status;
}

/* One peer's part of a list query, run on its own thread. */
typedef struct ask {
    cmr_ingest_peers_t *p;
    const cmr_ingest_plan_group_t *g;
    char *url; /* owned */
    int timeout_ms;
    json_t *traces;    /* its summaries (owned), when it answered */
    json_t *not_owned; /* partitions it said it does not own (owned), or NULL */
    char error[300];   /* why it did not answer, or "" */
    pthread_t thread;
    bool started;
} ask_t;

/* Why a peer's list of summaries is not one, or NULL. */
static const char *traces_invalid(json_t *traces)
{
    if (!json_is_array(traces))
        return "no \"traces\" array";
    size_t i;
    json_t *t;
    json_array_foreach(traces, i,
                       t) if (!json_is_string(json_object_get(t, "trace_id")) ||
                              !json_is_integer(json_object_get(t, "start_ns")) ||
                              !json_is_integer(json_object_get(
                                  t, "duration_ns"))) return "a trace without trace_id, start_ns or duration_ns";
    return NULL;
}

/* Why a list of partition numbers is not one (NULL is fine: absent), or NULL. */
static const char *partitions_invalid(json_t *parts)
{
    if (!parts)
        return NULL;
    if (!json_is_array(parts))
        return "\"partitions_not_owned\" is not an array";
    size_t i;
    json_t *v;
    json_array_foreach(parts, i, v) if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                                        json_integer_value(v) >=
                                            PEERS_MAX_PARTITIONS) return "a partition that is not a partition number";
    return NULL;
}

/* The peer's answer, checked: {"traces": [{"trace_id": "...", "start_ns": n,
 * "duration_ns": n, ...}, ...], "partitions_not_owned": [n, ...]?}. 0, or -1 with why. */
static int take_answer(ask_t *a, const cmr_buf_t *b)
{
    json_error_t je;
    json_t *root = json_loadb((const char *)b->data, b->len, JSON_REJECT_DUPLICATES, &je);
    json_t *traces = json_object_get(root, "traces"), *no = json_object_get(root, "partitions_not_owned");
    const char *bad = !json_is_object(root) ? "not a JSON object" : traces_invalid(traces);
    if (!bad)
        bad = partitions_invalid(no);
    if (bad) {
        snprintf(a->error, sizeof a->error, "%s", bad);
        json_decref(root);
        return -1;
    }
    a->traces = json_incref(traces);
    a->not_owned = no ? json_incref(no) : NULL;
    json_decref(root);
    return 0;
}

static void *ask_peer(void *arg)
{
    ask_t *a = arg;
    cmr_buf_t b = {0};
    long status = cmr_ingest_peers_get(a->p, a->url, a->timeout_ms, &b, a->error, sizeof a->error);
    if (status == 200)
        take_answer(a, &b);
    else if (status)
        snprintf(a->error, sizeof a->error, "HTTP %ld", status);
    cmr_buf_free(&b);
    return NULL;
}

/* The URL of a group's question: base + path + the query + local=1&partitions=... */
static char *ask_url(const cmr_ingest_plan_group_t *g, const char *path, const char *query)
{
    cmr_buf_t u = {0};
    cmr_buf_printf(&u, "%s%s?%s%slocal=1&partitions=", g->url, path, query ? query : "", query && query[0] ? "&" : "");
    for (size_t i = 0; i < g->npartitions; i++)
        cmr_buf_printf(&u, "%s%" PRId32, i ? "," : "", g->partitions[i]);
    return cmr_buf_ok(&u) ? cmr_buf_take(&u) : (cmr_buf_free(&u), NULL);
}

/* Newest first, or longest first (slowest); ties by trace id, as the local list. */
static int cmp_trace(const void *x, const void *y, void *slowest)
{
    json_t *a = *(json_t *const *)x, *b = *(json_t *const *)y;
    const char *k = *(bool *)slowest ? "duration_ns" : "start_ns";
    json_int_t ka = json_integer_value(json_object_get(a, k)), kb = json_integer_value(json_object_get(b, k));
    if (ka != kb)
        return ka > kb ? -1 : 1;
    return strcmp(json_string_value(json_object_get(a, "trace_id")), json_string_value(json_object_get(b, "trace_id")));
}

/* Marks every partition of a group unreachable, with why. */
static void group_unreachable(json_t *unreachable, json_t *errors, const cmr_ingest_plan_group_t *g, const char *why)
{
    for (size_t i = 0; i < g->npartitions; i++)
        json_array_append_new(unreachable, json_integer(g->partitions[i]));
    json_array_append_new(errors, json_pack("{s:s,s:s}", "url", g->url, "error", why));
    cmr_log(CMR_LOG_WARN, "ingest.fanout_failed", "url=\"%s\" partitions=%zu error=\"%s\"", g->url, g->npartitions,
            why);
}

/* Puts the merged, sorted, cut list and what is missing into the answer object. */
static char *merged_answer(json_t *all, json_t *unreachable, json_t *errors, bool slowest, size_t limit)
{
    size_t n = json_array_size(all);
    json_t **items = calloc(n ? n : 1, sizeof *items);
    if (!items)
        return NULL;
    for (size_t i = 0; i < n; i++)
        items[i] = json_array_get(all, i);
    qsort_r(items, n, sizeof *items, cmp_trace, &slowest);
    json_t *out = json_array();
    for (size_t i = 0; i < n && i < limit; i++)
        json_array_append(out, items[i]);
    free(items);
    json_t *root = json_pack("{s:o}", "traces", out);
    if (json_array_size(unreachable)) {
        json_object_set_new(root, "partial", json_true());
        json_object_set(root, "partitions_unreachable", unreachable);
        json_object_set(root, "errors", errors);
    }
    return cmr_json_take(root, CMR_JSON_COMPACT);
}

char *cmr_ingest_peers_gather(cmr_ingest_peers_t *p, const cmr_ingest_plan_t *plan, const char *path, const char *query,
                              const char *local_json, bool slowest, size_t limit)
{
    json_t *local = json_loads(local_json, 0, NULL);
    json_t *all = json_array(), *unreachable = json_array(), *errors = json_array();
    json_array_extend(all, json_object_get(local, "traces"));
    json_decref(local);
    for (size_t i = 0; i < plan->nunowned; i++)
        json_array_append_new(unreachable, json_integer(plan->unowned[i]));
    if (plan->nunowned)
        json_array_append_new(errors, json_pack("{s:s}", "error", "no worker owns these partitions now"));
    ask_t *asks = calloc(plan->ngroups + 1, sizeof *asks);
    int64_t deadline = cmr_mono_ms() + p->timeout_ms;
    for (size_t i = 0; asks && i < plan->ngroups; i++) {
        asks[i] = (ask_t){.p = p, .g = &plan->groups[i], .url = ask_url(&plan->groups[i], path, query)};
        asks[i].timeout_ms = (int)(deadline - cmr_mono_ms());
        if (asks[i].url)
            asks[i].started = pthread_create(&asks[i].thread, NULL, ask_peer, &asks[i]) == 0;
        if (!asks[i].started)
            snprintf(asks[i].error, sizeof asks[i].error, "could not ask (out of memory or threads)");
    }
    for (size_t i = 0; asks && i < plan->ngroups; i++) {
        if (asks[i].started)
            pthread_join(asks[i].thread, NULL);
        if (asks[i].traces) {
            json_array_extend(all, asks[i].traces);
            size_t k;
            json_t *v;
            json_array_foreach(asks[i].not_owned, k, v) json_array_append(unreachable, v);
            if (json_array_size(asks[i].not_owned))
                json_array_append_new(errors, json_pack("{s:s,s:s}", "url", plan->groups[i].url, "error",
                                                        "no longer owns some of the partitions"));
        } else {
            group_unreachable(unreachable, errors, &plan->groups[i], asks[i].error[0] ? asks[i].error : "no answer");
        }
        json_decref(asks[i].traces);
        json_decref(asks[i].not_owned);
        free(asks[i].url);
    }
    char *out = asks ? merged_answer(all, unreachable, errors, slowest, limit) : NULL;
    free(asks);
    json_decref(all);
    json_decref(unreachable);
    json_decref(errors);
    return out;
}

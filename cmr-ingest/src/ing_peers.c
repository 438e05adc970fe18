/*
 * ing_peers.c - which cmr-ingest worker owns which cmr.events and cmr.metrics partition,
 * and the queries' fan-out to them.
 *
 * Workers that do not share a store root (separate hosts) each hold only the partitions
 * they own. Every worker announces itself on the compacted topic cmr.ingest-workers (an
 * IngestWorker keyed by its worker id: its HTTP base URL, the partitions of both topics it
 * owns and has restored, a timestamp; leaving=true when it stops) and reads the topic by
 * assign() into the directory kept here. The owner of a partition is this worker when it
 * owns it, else the most recent announcement, not older than stale_ms and not leaving,
 * that lists it (each topic apart: the group's assignor need not give one worker the same
 * partition numbers of both).
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
 * The metrics queries (GET /api/metrics/<what>) fan out over the cmr.metrics partitions
 * the same way: one environment's (env=) to the owner of its partition alone (the topic
 * is keyed by environment), every environment's to every owner, the lists merged by the
 * ranked statistic (top) or by environment (alerts, stalled); a query of one series
 * (series, jvms) takes the answer of the one owner that found it.
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

/* The topics whose partitions have owners here: index 0 cmr.events, 1 cmr.metrics. */
#define KINDS 2
static int kind_of(cmr_topic_t topic)
{
    return topic == CMR_TOPIC_METRICS;
}

typedef struct peer {
    char id[ID_MAX], url[URL_MAX];
    int64_t time_ms;
    bool leaving;
    int32_t *parts[KINDS]; /* owned */
    size_t nparts[KINDS];
} peer_t;

struct cmr_ingest_peers {
    pthread_mutex_t lock;
    const cmr_conf_t *conf; /* the partitioner (kafka.partitioner); not owned */
    char self_id[ID_MAX], self_url[URL_MAX];
    char auth[400]; /* "Authorization: Bearer ..." for peers, or "" */
    int64_t started_ms, stale_ms;
    int timeout_ms;
    int32_t partition_count[KINDS];
    bool owned[KINDS][PEERS_MAX_PARTITIONS];
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
    p->partition_count[0] = o->partition_count;
    p->partition_count[1] = o->metrics_partition_count;
    return p;
}

void cmr_ingest_peers_free(cmr_ingest_peers_t *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->npeers; i++)
        for (int k = 0; k < KINDS; k++)
            free(p->peers[i].parts[k]);
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

void cmr_ingest_peers_set_owned(cmr_ingest_peers_t *p, cmr_topic_t topic, int32_t partition, bool owned)
{
    if (partition < 0 || partition >= PEERS_MAX_PARTITIONS)
        return;
    pthread_mutex_lock(&p->lock);
    p->owned[kind_of(topic)][partition] = owned;
    pthread_mutex_unlock(&p->lock);
}

void cmr_ingest_peers_set_partition_count(cmr_ingest_peers_t *p, cmr_topic_t topic, int32_t count)
{
    pthread_mutex_lock(&p->lock);
    if (count > 0 && count <= PEERS_MAX_PARTITIONS)
        p->partition_count[kind_of(topic)] = count;
    pthread_mutex_unlock(&p->lock);
}

size_t cmr_ingest_peers_owned(cmr_ingest_peers_t *p, cmr_topic_t topic, int32_t **parts)
{
    pthread_mutex_lock(&p->lock);
    size_t n = 0;
    const bool *owned = p->owned[kind_of(topic)];
    *parts = malloc(PEERS_MAX_PARTITIONS * sizeof **parts);
    for (int32_t i = 0; *parts && i < PEERS_MAX_PARTITIONS; i++)
        if (owned[i])
            (*parts)[n++] = i;
    pthread_mutex_unlock(&p->lock);
    return n;
}

/* The partitions this worker owns of topic into *list (none when leaving). 0 or -1. */
static int announce_owned(cmr_ingest_peers_t *p, cmr_topic_t topic, bool leaving, cmr_owned_partition_t **items,
                          size_t *count)
{
    int32_t *parts = NULL;
    size_t n = leaving ? 0 : cmr_ingest_peers_owned(p, topic, &parts);
    if (!leaving && !parts)
        return -1;
    *items = calloc(n ? n : 1, sizeof **items);
    for (size_t i = 0; *items && i < n; i++)
        (*items)[i] = (cmr_owned_partition_t){.partition = parts[i], .applied_offset = -1};
    *count = *items ? n : 0;
    free(parts);
    return *items ? 0 : -1;
}

int cmr_ingest_peers_announcement(cmr_ingest_peers_t *p, bool leaving, cmr_ingest_worker_t *out)
{
    memset(out, 0, sizeof *out);
    out->worker_id = strdup(p->self_id);
    out->url = strdup(p->self_url);
    if (!out->worker_id || !out->url ||
        announce_owned(p, CMR_TOPIC_EVENTS, leaving, &out->partitions.items, &out->partitions.count) != 0 ||
        announce_owned(p, CMR_TOPIC_METRICS, leaving, &out->metrics_partitions.items, &out->metrics_partitions.count) !=
            0) {
        cmr_msg_body_free(CMR_MSG_INGEST_WORKER, out);
        return -1;
    }
    pthread_mutex_lock(&p->lock);
    out->partition_count = p->partition_count[0];
    out->metrics_partition_count = p->partition_count[1];
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
    if (a->metrics_partition_count < 0 || a->metrics_partition_count > PEERS_MAX_PARTITIONS)
        return "metrics_partition_count out of range";
    if (a->metrics_partitions.count > (size_t)a->metrics_partition_count)
        return "more metrics partitions than metrics_partition_count";
    for (size_t i = 0; i < a->metrics_partitions.count; i++)
        if (a->metrics_partitions.items[i].partition < 0 ||
            a->metrics_partitions.items[i].partition >= a->metrics_partition_count)
            return "a metrics partition number out of range";
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
        const cmr_owned_partition_t *items[KINDS] = {a->partitions.items, a->metrics_partitions.items};
        size_t counts[KINDS] = {a->partitions.count, a->metrics_partitions.count};
        int32_t *parts[KINDS];
        for (int k = 0; k < KINDS; k++)
            parts[k] = calloc(counts[k] + 1, sizeof *parts[k]);
        if (!e || !parts[0] || !parts[1]) {
            free(parts[0]);
            free(parts[1]);
            snprintf(err, errlen, "out of memory");
            rc = -1;
        } else if (a->time_ms < e->time_ms) {
            free(parts[0]); /* older than what we have: a late copy */
            free(parts[1]);
        } else {
            for (int k = 0; k < KINDS; k++) {
                for (size_t i = 0; i < counts[k]; i++)
                    parts[k][i] = items[k][i].partition;
                free(e->parts[k]);
                e->parts[k] = parts[k];
                e->nparts[k] = counts[k];
            }
            snprintf(e->url, sizeof e->url, "%s", a->url);
            e->time_ms = a->time_ms;
            e->leaving = a->leaving;
        }
    }
    pthread_mutex_unlock(&p->lock);
    cmr_msg_free(&m);
    return rc;
}

/* The URL of the peer that owns partition of the topic of kind (into url), 1; 0 when
 * none does. Locked. */
static int owner_of(const cmr_ingest_peers_t *p, int kind, int32_t partition, int64_t now, char url[URL_MAX])
{
    const peer_t *best = NULL;
    for (size_t i = 0; i < p->npeers; i++) {
        const peer_t *e = &p->peers[i];
        if (e->leaving || now - e->time_ms > p->stale_ms || (best && e->time_ms <= best->time_ms))
            continue;
        for (size_t k = 0; k < e->nparts[kind]; k++)
            if (e->parts[kind][k] == partition) {
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

int cmr_ingest_peers_plan(cmr_ingest_peers_t *p, cmr_topic_t topic, const char *key, cmr_ingest_plan_t *plan)
{
    memset(plan, 0, sizeof *plan);
    size_t cap = 0;
    int rc = 0, kind = kind_of(topic);
    int64_t now = cmr_wall_ms();
    char url[URL_MAX];
    const char *partitioner = p->conf ? cmr_conf_get(p->conf, "kafka.partitioner", NULL) : NULL;
    pthread_mutex_lock(&p->lock);
    int32_t count = p->partition_count[kind];
    plan->partition_count = count;
    int32_t only = key && count > 0 ? cmr_key_partition(partitioner, key, strlen(key), count) : -1;
    plan->unowned = calloc((size_t)(count > 0 ? count : 1), sizeof *plan->unowned);
    rc = plan->unowned ? 0 : -1;
    for (int32_t i = 0; rc == 0 && i < count; i++) {
        if (key && i != only)
            continue;
        if (p->owned[kind][i])
            plan->local[i] = true;
        else if (owner_of(p, kind, i, now, url))
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
    int32_t count = p->partition_count[0];
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

/* One peer's part of a fanned-out query, run on its own thread. */
typedef struct ask {
    cmr_ingest_peers_t *p;
    const cmr_ingest_plan_group_t *g;
    char *url; /* owned */
    int timeout_ms;
    long status;       /* its HTTP status, 0 when it did not answer */
    cmr_buf_t body;    /* its answer (owned) */
    json_t *root;      /* the answer parsed (owned), once checked */
    json_t *list;      /* the answer's list (borrowed from root) */
    json_t *not_owned; /* partitions it said it does not own (borrowed from root), or NULL */
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

/* Why a metrics list (an array of objects) is not one, or NULL. */
static const char *objects_invalid(json_t *list)
{
    if (!json_is_array(list))
        return "no list of the query's kind";
    size_t i;
    json_t *t;
    json_array_foreach(list, i, t) if (!json_is_object(t)) return "an item that is not an object";
    return NULL;
}

/* Takes the peer's answer of status 200, checked: a JSON object with the list `key`
 * (checked by `invalid`) and maybe "partitions_not_owned": [n, ...]. 0, or -1 with why. */
static int take_answer(ask_t *a, const char *key, const char *(*invalid)(json_t *))
{
    json_error_t je;
    json_t *root = json_loadb((const char *)a->body.data, a->body.len, JSON_REJECT_DUPLICATES, &je);
    json_t *list = json_object_get(root, key), *no = json_object_get(root, "partitions_not_owned");
    const char *bad = !json_is_object(root) ? "not a JSON object" : invalid(list);
    if (!bad)
        bad = partitions_invalid(no);
    if (bad) {
        snprintf(a->error, sizeof a->error, "%s", bad);
        json_decref(root);
        return -1;
    }
    a->root = root;
    a->list = list;
    a->not_owned = no;
    return 0;
}

static void *ask_peer(void *arg)
{
    ask_t *a = arg;
    a->status = cmr_ingest_peers_get(a->p, a->url, a->timeout_ms, &a->body, a->error, sizeof a->error);
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

/* Asks every group of the plan `path?query&local=1&partitions=...` in parallel, within
 * the fan-out's time bound; the answers in a calloc'd array of plan->ngroups (free with
 * asks_free), NULL when out of memory. */
static ask_t *ask_all(cmr_ingest_peers_t *p, const cmr_ingest_plan_t *plan, const char *path, const char *query)
{
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
    for (size_t i = 0; asks && i < plan->ngroups; i++)
        if (asks[i].started)
            pthread_join(asks[i].thread, NULL);
    return asks;
}

static void asks_free(ask_t *asks, size_t n)
{
    for (size_t i = 0; asks && i < n; i++) {
        cmr_buf_free(&asks[i].body);
        json_decref(asks[i].root);
        free(asks[i].url);
    }
    free(asks);
}

/* The plan's partitions without an owner, as unreachable. */
static void unowned_unreachable(const cmr_ingest_plan_t *plan, json_t *unreachable, json_t *errors)
{
    for (size_t i = 0; i < plan->nunowned; i++)
        json_array_append_new(unreachable, json_integer(plan->unowned[i]));
    if (plan->nunowned)
        json_array_append_new(errors, json_pack("{s:s}", "error", "no worker owns these partitions now"));
}

/* Adds a group's list (answered, status 200, checked) to all, or marks it unreachable. */
static void gather_group(ask_t *a, const char *key, const char *(*invalid)(json_t *), json_t *all, json_t *unreachable,
                         json_t *errors)
{
    if (a->status == 200 && take_answer(a, key, invalid) == 0) {
        json_array_extend(all, a->list);
        size_t k;
        json_t *v;
        json_array_foreach(a->not_owned, k, v) json_array_append(unreachable, v);
        if (json_array_size(a->not_owned))
            json_array_append_new(
                errors, json_pack("{s:s,s:s}", "url", a->g->url, "error", "no longer owns some of the partitions"));
        return;
    }
    if (a->status && a->status != 200)
        snprintf(a->error, sizeof a->error, "HTTP %ld", a->status);
    group_unreachable(unreachable, errors, a->g, a->error[0] ? a->error : "no answer");
}

char *cmr_ingest_peers_gather(cmr_ingest_peers_t *p, const cmr_ingest_plan_t *plan, const char *path, const char *query,
                              const char *local_json, bool slowest, size_t limit)
{
    json_t *local = json_loads(local_json, 0, NULL);
    json_t *all = json_array(), *unreachable = json_array(), *errors = json_array();
    json_array_extend(all, json_object_get(local, "traces"));
    json_decref(local);
    unowned_unreachable(plan, unreachable, errors);
    ask_t *asks = ask_all(p, plan, path, query);
    for (size_t i = 0; asks && i < plan->ngroups; i++)
        gather_group(&asks[i], "traces", traces_invalid, all, unreachable, errors);
    asks_free(asks, plan->ngroups);
    char *out = asks ? merged_answer(all, unreachable, errors, slowest, limit) : NULL;
    json_decref(all);
    json_decref(unreachable);
    json_decref(errors);
    return out;
}

/* --- the metrics queries ----------------------------------------------------------------- */

/* One item of a merged metrics list, with where it came from (ties keep each owner's order). */
typedef struct met_item {
    json_t *item;
    size_t pos;
} met_item_t;

/* top: the ranked statistic ("value"), highest first; then (every list) by environment
 * (an environment's items all come from one owner), then in the order its owner gave. */
static int cmp_met_item(const void *x, const void *y, void *by_value)
{
    const met_item_t *a = x, *b = y;
    if (*(bool *)by_value) {
        double va = json_number_value(json_object_get(a->item, "value"));
        double vb = json_number_value(json_object_get(b->item, "value"));
        if (va != vb)
            return va > vb ? -1 : 1;
    }
    const char *ea = json_string_value(json_object_get(a->item, "env"));
    const char *eb = json_string_value(json_object_get(b->item, "env"));
    int c = strcmp(ea ? ea : "", eb ? eb : "");
    return c ? c : (a->pos > b->pos) - (a->pos < b->pos);
}

/* The list `key` of root replaced by all, sorted and cut to limit, with what is missing. */
static char *merged_list(json_t *root, const char *key, json_t *all, bool by_value, size_t limit, json_t *unreachable,
                         json_t *errors)
{
    size_t n = json_array_size(all);
    met_item_t *items = calloc(n ? n : 1, sizeof *items);
    json_t *out = json_array();
    if (!items || !out) {
        free(items);
        json_decref(out);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        items[i] = (met_item_t){json_array_get(all, i), i};
    qsort_r(items, n, sizeof *items, cmp_met_item, &by_value);
    for (size_t i = 0; i < n && i < limit; i++)
        json_array_append(out, items[i].item);
    free(items);
    json_object_set_new(root, key, out);
    if (json_array_size(unreachable)) {
        json_object_set_new(root, "partial", json_true());
        json_object_set(root, "partitions_unreachable", unreachable);
        json_object_set(root, "errors", errors);
    }
    return cmr_json_take(json_incref(root), CMR_JSON_COMPACT);
}

/* The list a metrics query answers with, or NULL for the queries of one series. */
static const char *metrics_list_key(const char *what)
{
    return !strcmp(what, "top")       ? "items"
           : !strcmp(what, "alerts")  ? "abnormal"
           : !strcmp(what, "stalled") ? "stalled"
                                      : NULL;
}

/* Whether an answer of status 400 says only that its partitions have no such series
 * ("no transaction matches ..."), not that the question is wrong or ambiguous there. */
static bool series_not_here(long status, const char *json, size_t len)
{
    json_t *root = status == 400 ? json_loadb(json, len, 0, NULL) : NULL;
    const char *e = json_string_value(json_object_get(root, "error"));
    bool not_here = e && !strncmp(e, "no ", 3) && strstr(e, " matches \"");
    json_decref(root);
    return not_here;
}

/* series and jvms: the answer of the one owner that found the series. */
static int one_series(const cmr_ingest_plan_t *plan, ask_t *asks, int local_status, const char *local_json,
                      json_t *unreachable, json_t *errors, char **out)
{
    size_t found = local_status == 200;
    const char *answer = local_status == 200 ? local_json : NULL;
    for (size_t i = 0; asks && i < plan->ngroups; i++) {
        ask_t *a = &asks[i];
        json_t *root = a->status ? json_loadb((const char *)a->body.data, a->body.len, 0, NULL) : NULL;
        if (a->status == 200 && json_is_object(root)) {
            found++;
            cmr_buf_putc(&a->body, '\0');
            answer = cmr_buf_ok(&a->body) ? (const char *)a->body.data : NULL;
        } else if (a->status == 400 && json_is_object(root) &&
                   !series_not_here(a->status, (const char *)a->body.data, a->body.len)) {
            found += 2; /* ambiguous there (or a question it refuses): as found several times */
        } else if (a->status != 400 || !json_is_object(root)) {
            if (a->status) /* anything but "not here": the owner could not say */
                snprintf(a->error, sizeof a->error, "HTTP %ld%s", a->status, root ? "" : ", not JSON");
            group_unreachable(unreachable, errors, a->g, a->error[0] ? a->error : "no answer");
        }
        json_decref(root);
    }
    if (found > 1) {
        *out =
            cmr_json_take(json_pack("{s:s}", "error",
                                    "the name matches series in several environments: give env (or more of the name)"),
                          CMR_JSON_COMPACT);
        return 400;
    }
    if (found == 1) {
        *out = answer ? strdup(answer) : NULL;
        return *out ? 200 : 500;
    }
    if (json_array_size(unreachable)) { /* not found where we could look: say where we could not */
        json_t *root = json_pack("{s:s, s:b, s:O, s:O}", "error",
                                 "no such series among the partitions that answered; some did not", "partial", 1,
                                 "partitions_unreachable", unreachable, "errors", errors);
        *out = cmr_json_take(root, CMR_JSON_COMPACT);
        return 503;
    }
    *out = local_json ? strdup(local_json) : NULL;
    return local_json ? local_status : 500;
}

int cmr_ingest_peers_gather_metrics(cmr_ingest_peers_t *p, const cmr_ingest_plan_t *plan, const char *what,
                                    const char *query, int local_status, const char *local_json, size_t limit,
                                    char **out)
{
    *out = NULL;
    char path[64];
    snprintf(path, sizeof path, "/api/metrics/%s", what);
    const char *key = metrics_list_key(what);
    if (local_status != 200 &&
        (key || !series_not_here(local_status, local_json, local_json ? strlen(local_json) : 0))) {
        *out = local_json ? strdup(local_json) : NULL; /* the question is wrong: the others would say so too */
        return *out ? local_status : 500;
    }
    json_t *unreachable = json_array(), *errors = json_array();
    unowned_unreachable(plan, unreachable, errors);
    ask_t *asks = ask_all(p, plan, path, query);
    int status = 200;
    if (!key) {
        status = one_series(plan, asks, local_status, local_json, unreachable, errors, out);
    } else {
        json_t *root = json_loads(local_json, 0, NULL), *all = json_array();
        json_array_extend(all, json_object_get(root, key));
        for (size_t i = 0; asks && i < plan->ngroups; i++)
            gather_group(&asks[i], key, objects_invalid, all, unreachable, errors);
        *out = json_is_object(root) && asks
                   ? merged_list(root, key, all, !strcmp(what, "top"), limit, unreachable, errors)
                   : NULL;
        json_decref(root);
        json_decref(all);
    }
    asks_free(asks, plan->ngroups);
    json_decref(unreachable);
    json_decref(errors);
    return *out ? status : 500;
}

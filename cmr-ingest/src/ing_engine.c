/*
 * ing_engine.c - applies EventBatches to the partition stores and commits them in groups.
 *
 * An EventBatch message holds several segment batches (of one partition, possibly of
 * several traces): cmr_ingest_engine_add reads them one by one with a cmr_segs_reader
 * (cmr/event.h), which checks every rule in the same pass and hands each out re-encoded on
 * its own, and applies each through the per-batch path below; duplicates are found per
 * segment batch. The stored batch stays version 2 (ing_batch.c), so stored data and the
 * tree and query code do not change.
 *
 * For every batch: validate, find the trace's state (in memory, or rebuilt from the
 * store's batches after a restart), drop it when (agent, segment, batch_seq) was seen,
 * otherwise queue in the partition's write batch: the stored batch, and the agent and
 * method index entries the trace did not have yet. At flush, every trace that changed
 * gets its summary recomputed; when it differs from the stored one, the old time /
 * duration / root index entries are deleted and the new ones written with it, and the
 * diagnosis index follows the summary's set of diagnosis ids (stored batches do not carry
 * them, nor the http data: a state rebuilt from the store gets them from the stored
 * summary). Invalid attribute values of a batch are left out and counted
 * (attributes_rejected); the batch is applied. Then one
 * RocksDB write per touched partition (WAL, fsync; the partitions' writes run in parallel
 * so that their fsyncs overlap): only after that may the caller mark the records done.
 * Every write is keyed by what it describes, so a record that comes again (after a crash
 * between write and commit) changes nothing. The offset of the last record handled
 * (cmr_ingest_engine_set_applied) goes into the same write, so a store's applied offset
 * and its content never disagree: what a newly assigned worker restores from the topic
 * starts right after it (ing_restore.c).
 *
 * Memory: the trace states of a partition (a cmr_map_t keyed by the 16-byte trace id) are
 * kept while a trace is incomplete. A complete trace leaves memory once its group is
 * written (most traces arrive whole: keeping them only costs), unless it awaits children:
 * it has hand-offs (FORK events) that no segment continues yet. A request that crossed
 * JVMs looks complete as soon as its caller's segment arrives, and its callees' segments
 * come with their own JVMs' next messages (agent.events.linger.ms, 200 ms by default), each of
 * which would rebuild the state from the store (its summary and every stored batch read
 * back and applied again). Such a trace stays in a FIFO of at most trace_keep_max per
 * partition for trace_keep_ms (cmr_store_opts_t), then leaves (oldest first); all states
 * leave after a flush when there are more than MAX_TRACES_PER_PART. A trace that gets
 * more after that (a segment later than the window, a record that comes again) is rebuilt
 * from the store (stats.traces_reloaded).
 *
 * Ownership: the engine owns its stores, write batches and states.
 */
#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rocksdb/c.h>

#include "cmr/bytes.h"
#include "cmr/clock.h"
#include "cmr/event.h"
#include "cmr/ids.h"
#include "cmr/ingest.h"
#include "cmr/log.h"
#include "cmr/map.h"
#include "cmr/rejects.h"
#include "cmr/topics.h"
#include "cmr/wire.h"
#include "cmr/workpool.h"

#define MAX_PARTITIONS 4096
#define MAX_TRACES_PER_PART 20000
#define GROUP_AHEAD_MS 60000    /* how far past the wall clock a trace's start raises a group key (next_group) */
#define RETENTION_BUDGET_MS 500 /* one retention call's steps after its first (cmr_ingest_engine_retention) */

typedef struct trace_entry {
    uint8_t id[16];
    cmr_trace_state_t *st;
    uint8_t *stored; /* the stored summary, encoded (owned; stored_len bytes) */
    size_t stored_len;
    bool has_stored, dirty;
    bool complete; /* as of its last summary written */
    struct trace_entry *next_dirty;
    /* in the partition's FIFO of complete traces kept for late segments (kept_ms: since) */
    struct trace_entry *kept_prev, *kept_next;
    bool kept;
    int64_t kept_ms;
} trace_entry_t;

typedef struct part {
    int partition;
    cmr_store_t *store;
    rocksdb_writebatch_t *wb;
    size_t wb_count;
    cmr_map_t traces; /* trace id (16 bytes) -> trace_entry_t (owned) */
    trace_entry_t *dirty;
    trace_entry_t *kept_head, *kept_tail; /* complete traces kept for late segments, oldest first */
    size_t nkept;
    int64_t applied;         /* the last cmr.events offset the store holds durably (-1: none) */
    int64_t applied_pending; /* the last one handled; written with the next flush */
    /* the group's postings, (id, trace) records of POSTING_REC bytes: a JVM or method of
     * a trace seen for the first time (cmr_trace_state_apply's callbacks), the root of a
     * new trace or a trace whose root changed (write_summary) */
    cmr_buf_t post_agent, post_method, post_root;
    cmr_buf_t post_time;  /* the group's time entry: its new traces (CMR_TIME_REC each) */
    int64_t last_group;   /* the group key of the last postings written (cmr_store_last_group) */
    int64_t group_starts; /* the latest start (ms) of the group's traces, so far */
} part_t;

#define POSTING_REC 24 /* id (8, native order) | trace id (16) */

/* put_postings' working memory, kept between group commits: the ids of a group's
 * records with their chains of records (`heads`: id -> 1 + the index of the id's last
 * record; `next`: 1 + the index of the record before it, 0 at the first), and the value
 * being built. */
typedef struct postings_scratch {
    cmr_u64map_t heads;
    uint32_t *next;
    size_t next_cap;
    cmr_buf_t val;
} postings_scratch_t;

/* The writer threads of group commits (run_jobs): helpers of the flushing thread. */
#define WRITERS_MAX 15

struct cmr_ingest_engine {
    char root[4096];
    cmr_store_opts_t o;
    part_t *parts[MAX_PARTITIONS];
    cmr_store_t *meta;
    rocksdb_writebatch_t *meta_wb;
    size_t pending;
    cmr_ingest_stats_t stats;
    cmr_names_t *names;         /* methods and agents, for the metrics module's rules and labels */
    cmr_u64map_t status;        /* agent id -> last stored status (ing_agents.c) */
    int64_t status_retained_ms; /* the last status retention (hourly) */
    cmr_segs_reader_t *reader;  /* splits EventBatch messages into segment batches (owned) */
    cmr_workpool_t *writers;    /* owned */
    postings_scratch_t post;    /* put_postings' working memory (owned; kept between flushes) */
};

cmr_ingest_engine_t *cmr_ingest_engine_new(const char *root, const cmr_store_opts_t *o, char *err, size_t errlen)
{
    cmr_ingest_engine_t *e = calloc(1, sizeof *e);
    if (!e) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    snprintf(e->root, sizeof e->root, "%s", root);
    e->o = *o;
    if (!e->o.trace_keep_ms)
        e->o.trace_keep_ms = CMR_INGEST_TRACE_KEEP_MS;
    if (!e->o.trace_keep_max)
        e->o.trace_keep_max = CMR_INGEST_TRACE_KEEP_MAX;
    e->meta = cmr_store_open_meta(root, 0, o, err, errlen);
    if (!e->meta || !(e->names = cmr_names_new())) {
        cmr_store_close(e->meta);
        free(e);
        return NULL;
    }
    cmr_store_load_names(e->meta, e->names);
    e->meta_wb = rocksdb_writebatch_create();
    e->writers = cmr_workpool_new(WRITERS_MAX);
    if (!e->writers) {
        cmr_ingest_engine_free(e);
        return NULL;
    }
    return e;
}

/* Drops every trace state of the partition (they are rebuilt from the store). */
static void free_entries(part_t *p)
{
    size_t it = 0;
    void *val;
    while (cmr_map_next(&p->traces, &it, NULL, NULL, &val)) {
        trace_entry_t *t = val;
        cmr_trace_state_free(t->st);
        free(t->stored);
        free(t);
    }
    cmr_map_free(&p->traces);
    p->dirty = NULL;
    p->kept_head = p->kept_tail = NULL;
    p->nkept = 0;
}

/* --- complete traces kept for late segments ---------------------------------------- */

static void kept_unlink(part_t *p, trace_entry_t *t)
{
    if (!t->kept)
        return;
    *(t->kept_prev ? &t->kept_prev->kept_next : &p->kept_head) = t->kept_next;
    *(t->kept_next ? &t->kept_next->kept_prev : &p->kept_tail) = t->kept_prev;
    t->kept_prev = t->kept_next = NULL;
    t->kept = false;
    p->nkept--;
}

static void kept_append(part_t *p, trace_entry_t *t, int64_t now_ms)
{
    kept_unlink(p, t);
    t->kept_ms = now_ms;
    t->kept_prev = p->kept_tail;
    *(p->kept_tail ? &p->kept_tail->kept_next : &p->kept_head) = t;
    p->kept_tail = t;
    t->kept = true;
    p->nkept++;
}

static void drop_entry(part_t *p, trace_entry_t *t)
{
    kept_unlink(p, t);
    if (cmr_map_del(&p->traces, t->id, 16, NULL)) {
        cmr_trace_state_free(t->st);
        free(t->stored);
        free(t);
    }
}

/* Drops the kept complete traces that are past the window or beyond the bound. */
static void kept_expire(const cmr_ingest_engine_t *e, part_t *p, int64_t now_ms)
{
    while (p->kept_head &&
           (p->nkept > (size_t)e->o.trace_keep_max || now_ms - p->kept_head->kept_ms >= e->o.trace_keep_ms))
        drop_entry(p, p->kept_head);
}

void cmr_ingest_engine_free(cmr_ingest_engine_t *e)
{
    if (!e)
        return;
    cmr_ingest_engine_flush(e);
    for (int i = 0; i < MAX_PARTITIONS; i++)
        if (e->parts[i])
            cmr_ingest_engine_close_partition(e, i);
    rocksdb_writebatch_destroy(e->meta_wb);
    cmr_store_close(e->meta);
    cmr_names_free(e->names);
    cmr_ingest_status_forget(&e->status);
    if (e->reader)
        cmr_segs_reader_free(e->reader);
    free(e->reader);
    cmr_workpool_free(e->writers);
    cmr_u64map_free(&e->post.heads);
    free(e->post.next);
    cmr_buf_free(&e->post.val);
    free(e);
}

const cmr_names_t *cmr_ingest_engine_names(const cmr_ingest_engine_t *e)
{
    return e->names;
}

const char *cmr_ingest_engine_root(const cmr_ingest_engine_t *e)
{
    return e->root;
}

int cmr_ingest_engine_open_partition(cmr_ingest_engine_t *e, int partition, int wait_ms)
{
    if (partition < 0 || partition >= MAX_PARTITIONS)
        return -1;
    if (e->parts[partition])
        return 0;
    char err[1024];
    part_t *p = calloc(1, sizeof *p);
    if (!p)
        return -1;
    p->partition = partition;
    p->store = cmr_store_open_partition(e->root, partition, &e->o, wait_ms, err, sizeof err);
    if (!p->store) {
        cmr_log(CMR_LOG_ERROR, "ingest.store_open_failed", "partition=%d error=\"%s\"", partition, err);
        free(p);
        return -1;
    }
    if (cmr_store_get_applied(p->store, &p->applied) < 0)
        cmr_log(CMR_LOG_WARN, "ingest.applied_offset_unreadable",
                "partition=%d action=\"restoring the partition from the start of the topic\"", partition);
    p->applied_pending = p->applied;
    p->last_group = cmr_store_last_group(p->store);
    p->group_starts = INT64_MIN;
    p->wb = rocksdb_writebatch_create();
    e->parts[partition] = p;
    cmr_log(CMR_LOG_INFO, "ingest.partition_opened", "partition=%d applied_offset=%" PRId64, partition, p->applied);
    return 0;
}

int cmr_ingest_engine_close_partition(cmr_ingest_engine_t *e, int partition)
{
    if (partition < 0 || partition >= MAX_PARTITIONS || !e->parts[partition])
        return 0;
    int rc = cmr_ingest_engine_flush(e);
    part_t *p = e->parts[partition];
    free_entries(p);
    cmr_buf_free(&p->post_agent);
    cmr_buf_free(&p->post_method);
    cmr_buf_free(&p->post_root);
    cmr_buf_free(&p->post_time);
    rocksdb_writebatch_destroy(p->wb);
    cmr_store_close(p->store);
    free(p);
    e->parts[partition] = NULL;
    cmr_log(CMR_LOG_INFO, "ingest.partition_closed", "partition=%d", partition);
    return rc;
}

void cmr_ingest_engine_set_applied(cmr_ingest_engine_t *e, int partition, int64_t offset)
{
    part_t *p = partition >= 0 && partition < MAX_PARTITIONS ? e->parts[partition] : NULL;
    if (p && offset > p->applied_pending)
        p->applied_pending = offset;
}

void cmr_ingest_engine_count_restore(cmr_ingest_engine_t *e, const struct cmr_restore_stats *st)
{
    e->stats.restored += st->records;
    e->stats.restore_missing += st->missing;
}

int64_t cmr_ingest_engine_applied(const cmr_ingest_engine_t *e, int partition)
{
    const part_t *p = partition >= 0 && partition < MAX_PARTITIONS ? e->parts[partition] : NULL;
    return p ? p->applied : -1;
}

/* The trace's state: in memory, or rebuilt from what the store holds. */
static trace_entry_t *get_trace(cmr_ingest_engine_t *e, part_t *p, const uint8_t id[16])
{
    bool reloaded = false;
    trace_entry_t *t = cmr_map_get(&p->traces, id, 16);
    if (t)
        return t;
    t = calloc(1, sizeof *t);
    if (!t || !(t->st = cmr_trace_state_new(id))) {
        free(t);
        return NULL;
    }
    memcpy(t->id, id, 16);
    cmr_trace_summary_t sum;
    if (cmr_store_get_summary(p->store, id, &sum) == 1) {
        reloaded = true;
        uint8_t enc[CMR_TRACE_SUMMARY_MAX_LEN];
        size_t len = cmr_trace_summary_encode(&sum, enc);
        if (!(t->stored = malloc(len))) {
            cmr_trace_state_free(t->st);
            free(t);
            return NULL;
        }
        memcpy(t->stored, enc, len);
        t->stored_len = len;
        t->has_stored = true;
        for (uint32_t i = 0; i < sum.ndiagnoses; i++)
            cmr_trace_state_add_diagnosis(t->st, sum.diagnoses[i]);
        cmr_ingest_batch_t *b;
        void *vals;
        int n = cmr_store_trace_batches(p->store, id, &b, &vals);
        for (int i = 0; i < n; i++)
            cmr_trace_state_apply(t->st, &b[i], NULL, NULL, NULL);
        if (n >= 0)
            cmr_store_batches_free(b, vals);
        cmr_trace_state_seed_http(t->st, &sum.http); /* on the root the stored batches name */
        cmr_trace_state_seed_loss(t->st, &sum);
    }
    if (cmr_map_put(&p->traces, id, 16, t) != 0) {
        cmr_trace_state_free(t->st);
        free(t->stored);
        free(t);
        return NULL;
    }
    e->stats.traces_reloaded += reloaded;
    return t;
}

typedef struct idx_ctx {
    part_t *p;
    const uint8_t *trace;
} idx_ctx_t;

static void add_posting(cmr_buf_t *b, uint64_t id, const uint8_t trace[16])
{
    uint8_t rec[POSTING_REC];
    memcpy(rec, &id, 8);
    memcpy(rec + 8, trace, 16);
    cmr_buf_put(b, rec, sizeof rec);
}

static void put_idx(idx_ctx_t *c, int cf, uint64_t id)
{
    uint8_t k[24];
    cmr_put_be64(k, id);
    memcpy(k + 8, c->trace, 16);
    rocksdb_writebatch_put_cf(c->p->wb, cmr_store_cf(c->p->store, cf), (const char *)k, 24, "", 0);
}

static void del_idx(idx_ctx_t *c, int cf, uint64_t id)
{
    uint8_t k[24];
    cmr_put_be64(k, id);
    memcpy(k + 8, c->trace, 16);
    rocksdb_writebatch_delete_cf(c->p->wb, cmr_store_cf(c->p->store, cf), (const char *)k, 24);
}

static bool has_id(const uint64_t *ids, uint32_t n, uint64_t id)
{
    for (uint32_t i = 0; i < n; i++)
        if (ids[i] == id)
            return true;
    return false;
}

static void on_agent(void *o, uint64_t id)
{
    idx_ctx_t *c = o;
    add_posting(&c->p->post_agent, id, c->trace);
}

static void on_method(void *o, uint64_t id)
{
    idx_ctx_t *c = o;
    add_posting(&c->p->post_method, id, c->trace);
}

/* Queues a group's postings of one index (idx_agent or idx_method): an entry per id,
 * key id | group, value the trace ids of its records (newest first). The records are
 * grouped by id with a hash map, in one pass (a sort of the 24-byte records took two
 * thirds of a group's flush for traces of 50 events). 0, or -1 out of memory (nothing
 * of this index queued; the records are kept for the caller to reset). */
static int put_postings(part_t *p, postings_scratch_t *ps, int cf, cmr_buf_t *recs, int64_t group)
{
    size_t n = recs->len / POSTING_REC;
    if (!n)
        return 0;
    if (n > UINT32_MAX - 1 || cmr_array_grow(&ps->next, &ps->next_cap, n, sizeof *ps->next, 1024) != 0)
        return -1;
    cmr_u64map_clear(&ps->heads);
    for (size_t i = 0; i < n; i++) {
        uint64_t id;
        memcpy(&id, recs->data + i * POSTING_REC, 8);
        bool created;
        void **head = cmr_u64map_get_slot(&ps->heads, id, &created);
        if (!head)
            return -1;
        ps->next[i] = (uint32_t)(uintptr_t)*head; /* NULL (0) when created */
        *head = (void *)(uintptr_t)(i + 1);
    }
    size_t it = 0;
    uint64_t id;
    void *head;
    while (cmr_u64map_next(&ps->heads, &it, &id, &head)) {
        cmr_buf_reset(&ps->val);
        for (uint32_t r = (uint32_t)(uintptr_t)head; r; r = ps->next[r - 1])
            cmr_buf_put(&ps->val, recs->data + (size_t)(r - 1) * POSTING_REC + 8, 16);
        if (!cmr_buf_ok(&ps->val))
            return -1;
        uint8_t k[16];
        cmr_put_be64(k, id);
        cmr_put_be64(k + 8, (uint64_t)group);
        rocksdb_writebatch_put_cf(p->wb, cmr_store_cf(p->store, cf), (const char *)k, 16, (const char *)ps->val.data,
                                  ps->val.len);
    }
    return 0;
}

/* Queues the group's time entry, when it has new traces. */
static void put_time_group(part_t *p, int64_t group)
{
    if (!p->post_time.len)
        return;
    uint8_t k[CMR_TIME_GROUP_KEY];
    cmr_store_time_group_key(k, group, cmr_wall_ns() / 1000000);
    rocksdb_writebatch_put_cf(p->wb, cmr_store_cf(p->store, CMR_CF_IDX_TIME), (const char *)k, sizeof k,
                              (const char *)p->post_time.data, p->post_time.len);
}

static void reset_postings(part_t *p)
{
    cmr_buf_reset(&p->post_agent);
    cmr_buf_reset(&p->post_method);
    cmr_buf_reset(&p->post_root);
    cmr_buf_reset(&p->post_time);
}

/* The group key of the postings written now: at least the latest start of the group's
 * traces, and greater than the last one (retention's filter relies on both). */
static int64_t next_group(part_t *p)
{
    /* a start ahead of the wall clock (a JVM's wrong clock, or a forged one) raises the
     * key no further than GROUP_AHEAD_MS past it, since every later key is above it and
     * newest-first lists stop early only on groups whose keys are at or below the times
     * of the traces they want: such a trace may be left out of newest-first lists once
     * newer groups fill them (other filters find it) */
    int64_t ahead = cmr_wall_ns() / 1000000 + GROUP_AHEAD_MS;
    int64_t starts = p->group_starts < ahead ? p->group_starts : ahead;
    int64_t g = starts > p->last_group ? starts : p->last_group + 1;
    p->group_starts = INT64_MIN;
    return g;
}

/* One segment batch; `checked`: its events were checked already (a segment reader's).
 * As cmr_ingest_engine_add_batch. */
static int add_segment(cmr_ingest_engine_t *e, int partition, const cmr_event_batch_t *m, bool checked, char *err,
                       size_t errlen)
{
    cmr_ingest_batch_t b;
    if (errlen)
        err[0] = '\0';
    if ((checked ? cmr_ingest_batch_from_segment(m, &b, err, errlen) : cmr_ingest_batch_from_msg(m, &b, err, errlen)) !=
        0) {
        e->stats.rejected++;
        return -1;
    }
    cmr_ingest_batch_loss(m, &b);
    if (b.attrs_dropped) {
        e->stats.attributes_rejected += b.attrs_dropped;
        snprintf(err, errlen, "%" PRIu32 " attribute value(s) left out: %s %s", b.attrs_dropped, b.attrs_drop_key,
                 b.attrs_drop_why);
    }
    part_t *p = partition >= 0 && partition < MAX_PARTITIONS ? e->parts[partition] : NULL;
    if (!p) {
        snprintf(err, errlen, "partition %d is not open", partition);
        return -2;
    }
    trace_entry_t *t = get_trace(e, p, b.trace_id);
    if (!t) {
        snprintf(err, errlen, "out of memory");
        return -2;
    }
    idx_ctx_t ctx = {p, b.trace_id};
    int r = cmr_trace_state_apply(t->st, &b, on_agent, on_method, &ctx);
    if (r < 0) {
        snprintf(err, errlen, "out of memory");
        return -2;
    }
    if (r == 0) {
        e->stats.duplicates++;
        return 0;
    }
    uint8_t key[CMR_INGEST_BATCH_KEY_LEN];
    cmr_ingest_batch_key(&b, key);
    uint8_t hdr[CMR_INGEST_BATCH_HDR_LEN], alen[4];
    cmr_buf_t attrs = {0};
    if (b.msg_attrs) {
        cmr_ingest_batch_attrs(&b, &attrs);
        if (!cmr_buf_ok(&attrs)) {
            snprintf(err, errlen, "out of memory");
            return -2;
        }
        cmr_put_le32(alen, (uint32_t)attrs.len);
    }
    bool with = attrs.len > 0;
    const char *parts[5] = {(const char *)hdr, b.thread_name, (const char *)alen, (const char *)attrs.data,
                            (const char *)b.events};
    size_t lens[5] = {cmr_ingest_batch_header(&b, with, hdr), b.name_len, 4, attrs.len, b.events_len};
    if (!with) { /* header | name | events */
        parts[2] = parts[4];
        lens[2] = lens[4];
    }
    const char *kparts[1] = {(const char *)key};
    size_t klens[1] = {sizeof key};
    rocksdb_writebatch_putv_cf(p->wb, cmr_store_cf(p->store, CMR_CF_BATCHES), 1, kparts, klens, with ? 5 : 3, parts,
                               lens);
    cmr_buf_free(&attrs);
    p->wb_count++;
    if (!t->dirty) {
        t->dirty = true;
        t->next_dirty = p->dirty;
        p->dirty = t;
        kept_unlink(p, t); /* not dropped while its group is being written */
    }
    e->pending++;
    e->stats.batches++;
    e->stats.events += b.event_count;
    e->stats.event_bytes += b.events_len;
    return 1;
}

int cmr_ingest_engine_add_batch(cmr_ingest_engine_t *e, int partition, const cmr_event_batch_t *m, char *err,
                                size_t errlen)
{
    return add_segment(e, partition, m, false, err, errlen);
}

/* Keeps the first message of a segment's (rejection, left-out attributes) in err. */
static void keep_first(char *err, size_t errlen, const char *one, uint32_t index)
{
    if (errlen && !err[0] && one[0])
        snprintf(err, errlen, "segment %" PRIu32 ": %s", index, one);
}

int cmr_ingest_engine_add(cmr_ingest_engine_t *e, int partition, const cmr_event_msg_t *m, char *err, size_t errlen)
{
    if (errlen)
        err[0] = '\0';
    if (!e->reader && !(e->reader = calloc(1, sizeof *e->reader))) {
        snprintf(err, errlen, "out of memory");
        return -2;
    }
    cmr_segs_reader_t *r = e->reader;
    cmr_segs_reader_init(r, m);
    cmr_event_batch_t b;
    int rc, applied = 0, rejected = 0;
    uint32_t index = 0;
    char one[512];
    while ((rc = cmr_segs_reader_next(r, &b)) == 1) {
        int a = add_segment(e, partition, &b, true, one, sizeof one);
        if (a == -2) {
            snprintf(err, errlen, "%s", one);
            return -2;
        }
        applied |= a == 1;
        rejected |= a == -1;
        keep_first(err, errlen, one, index++);
    }
    e->stats.messages++; /* read for good (after -2 it comes again, and counts then) */
    if (rc < 0) {        /* what came before the damage was whole and stays applied */
        e->stats.rejected++;
        snprintf(err, errlen, "%s", r->error);
        return -1;
    }
    return rejected ? -1 : applied;
}

static void put_id_value(cmr_ingest_engine_t *e, int cf, uint64_t id, const char *v, size_t len)
{
    uint8_t k[8];
    cmr_put_be64(k, id);
    rocksdb_writebatch_put_cf(e->meta_wb, cmr_store_cf(e->meta, cf), (const char *)k, 8, v, len);
    e->pending++;
}

int cmr_ingest_engine_add_method(cmr_ingest_engine_t *e, const cmr_method_entry_t *m)
{
    size_t len;
    char *v = cmr_names_method_value(m, &len);
    if (!v)
        return -1;
    put_id_value(e, 0, (uint64_t)m->method_id, v, len); /* meta cf 0 = methods */
    free(v);
    cmr_names_put_method(e->names, m);
    e->stats.methods++;
    return 0;
}

int cmr_ingest_engine_add_agent(cmr_ingest_engine_t *e, const cmr_agent_registration_t *r)
{
    size_t len;
    char *v = cmr_names_agent_value(r, &len);
    if (!v)
        return -1;
    uint64_t id = cmr_agent_id(r->agent_name, r->hostname, r->instance_id);
    put_id_value(e, 1, id, v, len); /* meta cf 1 = agents */
    free(v);
    cmr_names_put_agent(e->names, r);
    e->stats.agents++;
    return 0;
}

int cmr_ingest_engine_add_table_record(cmr_ingest_engine_t *e, const char *topic, const cmr_reader_rec_t *rec)
{
    cmr_msg_t m;
    if (cmr_reject_decode(topic, rec->partition, rec->offset, rec->payload, rec->len, &m) != 0)
        return 0;
    cmr_msg_type_t want = strcmp(topic, cmr_topic_name(CMR_TOPIC_METHODS)) == 0        ? CMR_MSG_METHOD_ENTRY
                          : strcmp(topic, cmr_topic_name(CMR_TOPIC_AGENT_EVENTS)) == 0 ? CMR_MSG_AGENT_STATUS
                                                                                       : CMR_MSG_AGENT_REGISTRATION;
    int rc = 0;
    if (want == CMR_MSG_AGENT_STATUS && m.type == CMR_MSG_REDEFINE_RESULT)
        rc = 0; /* the instrumenter's business */
    else if (m.type == CMR_MSG_AGENT_STATUS && want == m.type)
        e->pending += rc =
            cmr_ingest_status_add(e->meta, e->meta_wb, &e->status, &m.u.agent_status, rec->payload, rec->len) == 1;
    else if (m.type != want)
        cmr_reject(topic, "unexpected_type", rec->partition, rec->offset, cmr_msg_type_name(m.type));
    else if (m.type == CMR_MSG_METHOD_ENTRY)
        rc = cmr_ingest_engine_add_method(e, &m.u.method_entry) == 0;
    else
        rc = cmr_ingest_engine_add_agent(e, &m.u.registration) == 0;
    cmr_msg_free(&m);
    return rc;
}

/* Puts a trace into the group's time entry, as it starts now. */
static void add_time(part_t *p, const cmr_trace_summary_t *s)
{
    uint8_t rec[CMR_TIME_REC];
    memcpy(rec, s->trace_id, 16);
    cmr_put_be64_ordered(rec + 16, s->start_ns);
    cmr_buf_put(&p->post_time, rec, sizeof rec);
}

/* Queues the summary of a changed trace, moves its duration entry, and puts it into the
 * group's time entry when new and under its root's posting when new or its root changed.
 * In a store of the older format (cmr_store_time_legacy) a trace whose start changed
 * loses its per-trace time key (if it has one: a trace from before time groups) and joins
 * the group's time entry with all its postings, and one whose per-trace root key would
 * change loses that and is posted under its root. 0, or -1 out of memory (nothing queued
 * for it). */
static int write_summary(part_t *p, trace_entry_t *t)
{
    cmr_trace_summary_t now, old;
    cmr_trace_state_summary(t->st, &now);
    uint8_t enc[CMR_TRACE_SUMMARY_MAX_LEN];
    size_t len = cmr_trace_summary_encode(&now, enc);
    t->complete = (now.flags & CMR_TRACE_COMPLETE) != 0;
    if (now.start_ns / 1000000 > p->group_starts)
        p->group_starts = now.start_ns / 1000000;
    if (t->has_stored && len == t->stored_len && !memcmp(enc, t->stored, len))
        return 0;
    uint8_t *copy = t->stored && len == t->stored_len ? t->stored : malloc(len);
    if (!copy)
        return -1;
    uint8_t tk[24], dk[24], rk[32], otk[24], odk[24], ork[32];
    cmr_store_index_keys(&now, tk, dk, rk);
    memset(&old, 0, sizeof old);
    /* a new trace joins the group's time entry, and so does one whose start moved later
     * (only from a first summary without events, whose start is 0): the group's bound
     * must hold for the start it has now */
    bool time_moved = !t->has_stored, root_moved = !t->has_stored, dur_moved = true, repost = false;
    if (t->has_stored) {
        int bad = cmr_trace_summary_decode(t->stored, t->stored_len, &old);
        assert(!bad); /* encoded by this process */
        (void)bad;
        cmr_store_index_keys(&old, otk, odk, ork);
        dur_moved = memcmp(dk, odk, 24) != 0;
        if (dur_moved)
            rocksdb_writebatch_delete_cf(p->wb, cmr_store_cf(p->store, CMR_CF_IDX_DURATION), (const char *)odk, 24);
        root_moved = old.root_method != now.root_method;
        time_moved = now.start_ns > old.start_ns;
        if (cmr_store_time_legacy(p->store)) {
            if (memcmp(tk, otk, 24)) {
                /* its per-trace time key, if it has one, goes; the trace joins the group
                 * with all its postings (its older ones may be dropped once the store has
                 * no per-trace keys left, ing_store.c set_postings_cutoff) */
                rocksdb_writebatch_delete_cf(p->wb, cmr_store_cf(p->store, CMR_CF_IDX_TIME), (const char *)otk, 24);
                time_moved = repost = true;
            }
            if (memcmp(rk, ork, 32)) {
                rocksdb_writebatch_delete_cf(p->wb, cmr_store_cf(p->store, CMR_CF_IDX_ROOT), (const char *)ork, 32);
                root_moved = true;
            }
        }
    }
    if (dur_moved)
        rocksdb_writebatch_put_cf(p->wb, cmr_store_cf(p->store, CMR_CF_IDX_DURATION), (const char *)dk, 24, "", 0);
    if (time_moved)
        add_time(p, &now);
    if (root_moved || repost)
        add_posting(&p->post_root, now.root_method, now.trace_id);
    if (repost) {
        idx_ctx_t c = {p, t->id};
        cmr_trace_state_each_id(t->st, on_agent, on_method, &c);
    }
    idx_ctx_t ctx = {p, t->id};
    for (uint32_t i = 0; i < old.ndiagnoses; i++) /* ids the set dropped for smaller ones */
        if (!has_id(now.diagnoses, now.ndiagnoses, old.diagnoses[i]))
            del_idx(&ctx, CMR_CF_IDX_DIAGNOSIS, old.diagnoses[i]);
    for (uint32_t i = 0; i < now.ndiagnoses; i++)
        if (!has_id(old.diagnoses, old.ndiagnoses, now.diagnoses[i]))
            put_idx(&ctx, CMR_CF_IDX_DIAGNOSIS, now.diagnoses[i]);
    rocksdb_writebatch_put_cf(p->wb, cmr_store_cf(p->store, CMR_CF_TRACES), (const char *)t->id, 16, (const char *)enc,
                              len);
    memcpy(copy, enc, len);
    if (copy != t->stored)
        free(t->stored);
    t->stored = copy;
    t->stored_len = len;
    t->has_stored = true;
    return 0;
}

/* After a partition's write: the traces of the group leave the dirty list, and those
 * that are complete, now that the store has them whole, leave memory, or join the FIFO
 * of traces kept for late segments when they await children. */
static void forget_written(const cmr_ingest_engine_t *e, part_t *p, bool written, int64_t now_ms)
{
    for (trace_entry_t *t = p->dirty, *next; t; t = next) {
        next = t->next_dirty;
        t->next_dirty = NULL;
        if (!written || !t->complete)
            continue;
        if (e->o.trace_keep_ms > 0 && e->o.trace_keep_max > 0 && cmr_trace_state_awaits_children(t->st))
            kept_append(p, t, now_ms);
        else
            drop_entry(p, t);
    }
    p->dirty = NULL;
}

/* One partition's write. With fsync on, a group's writes run side by side on the
 * engine's writer threads (and the flushing thread): the fsyncs of different stores then
 * overlap instead of queueing. */
typedef struct write_job {
    part_t *p;
    int rc;
} write_job_t;

static void write_part(void *ctx, size_t i)
{
    write_job_t *j = (write_job_t *)ctx + i;
    char err[1024];
    j->rc = cmr_store_write(j->p->store, j->p->wb, err, sizeof err);
    if (j->rc)
        cmr_log(CMR_LOG_ERROR, "ingest.write_failed", "partition=%d error=\"%s\"", j->p->partition, err);
}

/* Runs the jobs, side by side on the writer threads when `parallel` (fsync on), else one
 * after the other here. Returns when every job has run. */
static void run_jobs(cmr_workpool_t *writers, write_job_t *jobs, size_t n, bool parallel)
{
    if (parallel) {
        cmr_workpool_run(writers, n, write_part, jobs);
        return;
    }
    for (size_t i = 0; i < n; i++)
        write_part(jobs, i);
}

int cmr_ingest_engine_flush(cmr_ingest_engine_t *e)
{
    char err[1024];
    int rc = 0;
    write_job_t jobs[MAX_PARTITIONS];
    size_t njobs = 0;
    int64_t now_ms = cmr_mono_ms();
    for (int i = 0; i < MAX_PARTITIONS; i++) {
        part_t *p = e->parts[i];
        if (p)
            kept_expire(e, p, now_ms);
        if (!p || (!p->dirty && !rocksdb_writebatch_count(p->wb) && p->applied_pending == p->applied))
            continue;
        bool failed = false;
        for (trace_entry_t *t = p->dirty; t; t = t->next_dirty) {
            failed |= write_summary(p, t) != 0;
            t->dirty = false;
            e->stats.traces_touched++;
        }
        failed |= p->post_agent.oom || p->post_method.oom || p->post_root.oom || p->post_time.oom;
        int64_t group = 0;
        if (!failed && (p->post_agent.len || p->post_method.len || p->post_root.len || p->post_time.len)) {
            group = next_group(p);
            failed |= put_postings(p, &e->post, CMR_CF_IDX_AGENT, &p->post_agent, group) != 0 ||
                      put_postings(p, &e->post, CMR_CF_IDX_METHOD, &p->post_method, group) != 0 ||
                      put_postings(p, &e->post, CMR_CF_IDX_ROOT, &p->post_root, group) != 0;
            put_time_group(p, group);
        }
        if (failed) { /* nothing of the group is written here: its records come again */
            cmr_log(CMR_LOG_ERROR, "ingest.write_failed", "partition=%d error=\"out of memory\"", p->partition);
            rocksdb_writebatch_clear(p->wb);
            p->wb_count = 0;
            p->applied_pending = p->applied;
            reset_postings(p);
            free_entries(p); /* rebuilt from the store, which has none of the group */
            rc = -1;
            continue;
        }
        if (group) {
            reset_postings(p);
            cmr_store_put_group(p->store, p->wb, group);
            p->last_group = group; /* taken even if the write fails: keys stay unique */
        }
        if (p->applied_pending != p->applied)
            cmr_store_put_applied(p->store, p->wb, p->applied_pending);
        assert(njobs < MAX_PARTITIONS);
        jobs[njobs++] = (write_job_t){.p = p};
    }
    run_jobs(e->writers, jobs, njobs, e->o.sync);
    for (size_t i = 0; i < njobs; i++) {
        rc |= jobs[i].rc;
        part_t *p = jobs[i].p;
        if (jobs[i].rc == 0)
            p->applied = p->applied_pending;
        else
            p->applied_pending = p->applied;
        rocksdb_writebatch_clear(p->wb);
        p->wb_count = 0;
        forget_written(e, p, jobs[i].rc == 0, now_ms);
        kept_expire(e, p, now_ms);
        if (jobs[i].rc != 0 || cmr_map_count(&p->traces) > MAX_TRACES_PER_PART)
            free_entries(p); /* after a failed write: rebuilt from what the store has */
    }
    if (rocksdb_writebatch_count(e->meta_wb)) {
        if (cmr_store_write(e->meta, e->meta_wb, err, sizeof err) != 0) {
            cmr_log(CMR_LOG_ERROR, "ingest.write_failed", "store=meta error=\"%s\"", err);
            rc = -1;
        }
        rocksdb_writebatch_clear(e->meta_wb);
    }
    e->pending = 0;
    e->stats.flushes++;
    return rc ? -1 : 0;
}

size_t cmr_ingest_engine_pending(const cmr_ingest_engine_t *e)
{
    return e->pending;
}

void cmr_ingest_engine_stats(const cmr_ingest_engine_t *e, cmr_ingest_stats_t *out)
{
    *out = e->stats;
}

/* One RocksDB size property of a database, summed over its column families' handles. */
static uint64_t db_bytes(rocksdb_t *db)
{
    uint64_t total = 0;
    const char *props[] = {"rocksdb.total-sst-files-size", "rocksdb.cur-size-all-mem-tables"};
    for (int i = 0; i < 2; i++) {
        uint64_t v = 0;
        if (rocksdb_property_int(db, props[i], &v) == 0)
            total += v;
    }
    return total;
}

uint64_t cmr_ingest_engine_disk_bytes(const cmr_ingest_engine_t *e)
{
    uint64_t total = db_bytes(cmr_store_db(e->meta));
    for (int i = 0; i < MAX_PARTITIONS; i++)
        if (e->parts[i])
            total += db_bytes(cmr_store_db(e->parts[i]->store));
    return total;
}

long cmr_ingest_engine_retention(cmr_ingest_engine_t *e, bool *behind)
{
    if (behind)
        *behind = false;
    if (cmr_ingest_engine_flush(e) != 0)
        return -1;
    int64_t now = cmr_wall_ns();
    long total = 0;
    if (e->o.retention_age_ms > 0 && cmr_mono_ms() - e->status_retained_ms >= 3600000) { /* hourly: a range each */
        cmr_ingest_status_retention(e->meta, &e->status, now / 1000000 - e->o.retention_age_ms);
        e->status_retained_ms = cmr_mono_ms();
    }
    /* steps over the partitions in turn while some have more old traces, for at most
     * RETENTION_BUDGET_MS: a backlog (a worker back after a long stop, a lowered bound)
     * goes over a few calls without holding ingest up for long */
    int64_t until = cmr_mono_ms() + RETENTION_BUDGET_MS;
    bool more[MAX_PARTITIONS] = {false}, any = true;
    for (bool first = true; any && (first || cmr_mono_ms() < until); first = false) {
        any = false;
        for (int i = 0; i < MAX_PARTITIONS; i++) {
            if (!e->parts[i] || (!first && !more[i]))
                continue;
            long n = cmr_store_retention(e->parts[i]->store, now, &more[i]);
            if (n > 0) {
                free_entries(e->parts[i]); /* rebuilt from the store when needed */
                total += n;
            }
            any |= more[i];
        }
    }
    if (behind)
        *behind = any;
    return total;
}

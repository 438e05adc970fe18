/*
 * ingest.h - cmr-ingest: call trees across threads and JVMs, assembled from the
 * EventBatch stream (cmr.events), stored in RocksDB, queried, exported and replayed.
 *
 * Layers (one source file each, see src/):
 *   stored batch   ing_batch.c   an EventBatch as stored: key (trace, agent, segment, seq)
 *   tree           ing_tree.c    assembly of one trace's call tree from its batches (pure)
 *   trace state    ing_state.c   per-trace incremental summary (dedup, root, completeness)
 *   http data      ing_attrs.c   EventBatch.attributes validated, the http filters (globs)
 *   store          ing_store.c   one RocksDB per cmr.events partition + the meta store
 *   engine         ing_engine.c  applies batches to stores, group-commits durably
 *   names          ing_names.c   method and agent tables (cmr.methods, cmr.registrations)
 *   agents         ing_agents.c  agent status over time (cmr.agent-events)
 *   metrics        met_*.c       time series, threshold rules, Prometheus (cmr/metrics.h)
 *   query          ing_query.c   list with filters, show (text), JSON tree
 *   diagnosis      ing_diag.c    the traces a diagnosis tagged, per-method statistics
 *   export         ing_export.c  Chrome trace-event JSON, OTLP JSON
 *   http           ing_http.c    loopback HTTP/1.1 JSON API
 *   worker         ing_worker.c  the consumer-group worker (run)
 *   restore        ing_restore.c a newly assigned partition's store caught up from the topic
 *   peers          ing_peers.c   who owns which partition (cmr.ingest-workers), query fan-out
 *   replay         ing_replay.c  rebuild a fresh store from the topic
 *
 * See docs/INGEST.md for the store layout, the CLI and the HTTP API.
 */
#ifndef CMR_INGEST_H
#define CMR_INGEST_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cmr/conf.h"
#include "cmr/histogram.h"
#include "cmr/map.h"
#include "cmr/reader.h"
#include "cmr/topics.h"
#include "cmr/buf.h"
#include "cmr/event.h"
#include "cmr/msg.h"

/* --- transaction data (ing_attrs.c) ---------------------------------------------------- */

/* The transaction data a trace keeps: that of its root segment's incoming HTTP request
 * (EventBatch.attributes http.method, http.path, http.status; docs/INGEST.md). */
#define CMR_TRACE_HTTP_MAX 256 /* bytes of a method or a path at most (the agent cuts there) */

typedef struct cmr_trace_http {
    char method[CMR_TRACE_HTTP_MAX + 1]; /* an RFC 9110 token; "" = not known */
    char path[CMR_TRACE_HTTP_MAX + 1];   /* printable UTF-8, no control characters; "" = not known */
    uint16_t status;                     /* 100..999; 0 = not known */
} cmr_trace_http_t;

/* The attribute keys the trace keeps (others are ignored). */
typedef enum cmr_http_key { CMR_HTTP_METHOD, CMR_HTTP_PATH, CMR_HTTP_STATUS, CMR_HTTP__KEYS } cmr_http_key_t;

/* Checks one value of key k (len bytes, NUL-terminated): NULL when it may be kept, else
 * why not (a static string). Empty values are not checked here: they mean "not known". */
const char *cmr_http_value_check(cmr_http_key_t k, const char *v, size_t len);
/* The same rules on a decoded summary's values (a corrupt store shows nothing else). */
bool cmr_trace_http_valid(const cmr_trace_http_t *h);
bool cmr_trace_http_known(const cmr_trace_http_t *h);

/* Filters on the transaction data: globs as a diagnosis' conditions are (docs/DIAGNOSIS.md,
 * the agent's Probe.glob): '*' any run of characters, '?' one character, everything else
 * itself. NULL = no filter. A trace without the value never matches a filter on it. */
typedef struct cmr_http_filter {
    const char *method; /* glob on the method ("GET" matches exactly) */
    const char *path;   /* glob on the path */
    const char *status; /* glob on the status' three digits ("5*") */
} cmr_http_filter_t;

#define CMR_HTTP_FILTER_MAX 1024 /* bytes of a filter's glob */

/* Sets one filter from a key (http-method / http_method, http-path / http_path,
 * http-status / http_status) and a value (kept by pointer: the caller's). 1 set, 0 not an
 * http key, -1 a bad value (empty, longer than CMR_HTTP_FILTER_MAX, not UTF-8, a control
 * character; a status glob of other than digits, '*' and '?') with err. */
int cmr_http_filter_set(cmr_http_filter_t *f, const char *key, const char *value, char *err, size_t errlen);
bool cmr_http_filter_any(const cmr_http_filter_t *f);
bool cmr_http_filter_match(const cmr_http_filter_t *f, const cmr_trace_http_t *h);
/* Glob match on UTF-8 text ('?' is one character). */
bool cmr_http_glob(const char *pattern, const char *s);

/* --- stored batch ------------------------------------------------------------------- */

#define CMR_INGEST_BATCH_KEY_LEN 36 /* trace(16) agent(8) segment(8) batch_seq(4), big endian */

/* One EventBatch, flattened. Points into memory it does not own (a decoded message or a
 * stored value). */
typedef struct cmr_ingest_batch {
    uint8_t trace_id[16];
    uint64_t agent_id;
    uint64_t segment_id;
    int64_t thread_id;
    const char *thread_name; /* not NUL-terminated: name_len bytes */
    size_t name_len;
    bool has_parent;
    uint64_t parent_agent;
    uint64_t parent_segment;
    int64_t parent_seq;
    int32_t batch_seq;
    int64_t first_event_seq;
    bool last;
    int32_t dropped;
    uint32_t event_count;
    const uint8_t *events; /* event_count events in the compact encoding (cmr/event.h):
                            * read them with cmr_events_decoder_next */
    size_t events_len;
    uint64_t diagnosis_id; /* EventBatch.diagnosis_id, 0 = none. Not part of the stored
                            * batch (decoded batches have 0): the trace summary keeps it */
    /* EventBatch.attributes, validated: the values the trace may keep (NULL / 0 when the
     * batch carried none, an empty one, or an invalid one). Like diagnosis_id, not part of
     * the stored batch; they point into the message. */
    const char *http_method, *http_path;
    uint16_t http_status;
    /* EventBatch.calls_not_recorded / truncated_by (cmr_ingest_batch_loss): what the segment
     * did not record. Like diagnosis_id, not part of the stored batch: the summary keeps it */
    uint64_t calls_not_recorded;
    uint32_t truncated_by;      /* CMR_TRUNCATED_BY_* */
    uint32_t attrs_dropped;     /* invalid values refused (counted by the engine) */
    const char *attrs_drop_key; /* the first one's key and why (static strings) */
    const char *attrs_drop_why;
    /* Call attributes (EventBatch node_attrs: a JDBC call's db.statement...), stored with
     * the batch: from a message msg_attrs (invalid ones are skipped and counted in
     * attrs_dropped), from the store attrs_block (ing_batch.c). Read either with
     * cmr_ingest_batch_attr_next. */
    const cmr_node_attrs_t *msg_attrs;
    uint64_t msg_attrs_ok[CMR_SEGS_MAX_NODE_ATTRS / 64]; /* which of them are valid: checked
                                                           * once, when the batch is made */
    const uint8_t *attrs_block;
    size_t attrs_len;
} cmr_ingest_batch_t;

/* One call attribute of a batch: key and value are not NUL-terminated. */
typedef struct cmr_ingest_attr {
    int64_t event_seq; /* the call's ENTER in its segment */
    const char *key, *value;
    size_t key_len, value_len;
} cmr_ingest_attr_t;

/* The batch's next valid call attribute from *cursor (start at 0): 1 with it in *a, 0
 * after the last. */
int cmr_ingest_batch_attr_next(const cmr_ingest_batch_t *b, size_t *cursor, cmr_ingest_attr_t *a);

/* Checks a decoded EventBatch (sizes, counts, sequence numbers) and flattens it.
 * 0, or -1 with the reason in err. Invalid attribute values do not refuse the batch: they
 * are left out and counted in attrs_dropped. */
int cmr_ingest_batch_from_msg(const cmr_event_batch_t *m, cmr_ingest_batch_t *out, char *err, size_t errlen);
/* The same for a segment batch whose events a cmr_segs_reader checked and re-encoded. */
int cmr_ingest_batch_from_segment(const cmr_event_batch_t *m, cmr_ingest_batch_t *out, char *err, size_t errlen);
/* Copies what the batch says its segment did not record (a negative count, unknown reason
 * bits: left out). */
void cmr_ingest_batch_loss(const cmr_event_batch_t *m, cmr_ingest_batch_t *out);
void cmr_ingest_batch_key(const cmr_ingest_batch_t *b, uint8_t key[CMR_INGEST_BATCH_KEY_LEN]);
/* The stored value is header | thread name | [attributes length (4, LE) | attributes] |
 * events: the header alone (its length is returned; `attrs`: the value has attributes),
 * so that a writer can hand the parts to RocksDB without a copy. */
#define CMR_INGEST_BATCH_HDR_LEN 52
size_t cmr_ingest_batch_header(const cmr_ingest_batch_t *b, bool attrs, uint8_t out[CMR_INGEST_BATCH_HDR_LEN]);
/* The stored form of b's valid call attributes, appended to o (nothing when it has none). */
void cmr_ingest_batch_attrs(const cmr_ingest_batch_t *b, cmr_buf_t *o);
/* Stored value: a malloc'd buffer (*out, *len) the caller frees. 0 or -1. */
int cmr_ingest_batch_encode(const cmr_ingest_batch_t *b, uint8_t **out, size_t *len);
/* Parses a stored key and value; out points into val. 0, or -1 when corrupt. */
int cmr_ingest_batch_decode(const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen, cmr_ingest_batch_t *out);

/* --- tree --------------------------------------------------------------------------- */

typedef enum cmr_tree_node_kind {
    CMR_NODE_CALL = 0,    /* a method invocation */
    CMR_NODE_REMOTE = 1,  /* a caller outside the CMR (foreign traceparent) */
    CMR_NODE_MISSING = 2, /* the parent of a segment that has not arrived (or was lost) */
} cmr_tree_node_kind_t;

#define CMR_NODE_NONE UINT32_MAX

typedef struct cmr_tree_node {
    cmr_tree_node_kind_t kind;
    uint64_t method_id;
    uint64_t agent_id;
    uint64_t segment_id;
    int64_t thread_id;
    uint32_t thread_name; /* index into the tree's names, CMR_NODE_NONE when unknown */
    int64_t event_seq;    /* index of the enter event in its segment; -1 for synthetic nodes */
    int64_t start_ns;
    int64_t end_ns; /* for a running call: the latest timestamp seen in its segment */
    bool running;   /* no exit yet */
    bool exception; /* exceptional exit */
    bool lost_exit; /* closed because a later event showed its exit was lost */
    bool async;     /* first node of a segment linked under a node of another segment that
                     * runs on its own: not subtracted from its parent's self time */
    bool remote;    /* first node of a segment of another JVM (agent) hung under a call:
                     * the callee of a remote call. With async false, a synchronous remote
                     * child: its parent waited for it (wait_ns) */
    int64_t total_ns;
    int64_t wait_ns; /* time this call waited for its synchronous remote children: the
                      * union of their intervals clipped to this call's (0 for others) */
    int64_t self_ns; /* total minus the synchronous same-segment children and wait_ns,
                      * never negative */
    uint32_t parent, first_child, next_sibling, depth;
    uint32_t attrs, nattrs; /* its call attributes: the tree's attrs[attrs .. attrs + nattrs) */
} cmr_tree_node_t;

/* A call attribute of a node (db.statement: the SQL of a JDBC call). */
typedef struct cmr_tree_attr {
    uint32_t node;
    uint32_t key, value; /* indexes into the tree's names */
} cmr_tree_attr_t;

typedef struct cmr_tree {
    uint8_t trace_id[16];
    cmr_tree_node_t *nodes;
    size_t count, cap;
    uint32_t first_root; /* roots linked through next_sibling */
    char **names;        /* thread names and call attributes' keys and values, owned */
    size_t nnames, names_cap;
    cmr_tree_attr_t *attrs; /* sorted by node, owned */
    size_t nattrs, attrs_cap;
    int64_t start_ns, end_ns;
    uint64_t events, dropped;
    uint32_t segments, batches, gaps, unmatched; /* gaps: missing batches; unmatched exits */
    uint32_t agents, threads;
    bool complete;
    cmr_trace_http_t http;       /* the trace's transaction data: from its stored summary
                            * (cmr_ingest_view_tree), not from the batches */
    uint64_t calls_not_recorded; /* truncated: from the stored summary, as http */
    uint32_t truncated_by;
} cmr_tree_t;

/* Assembles the tree of one trace from its batches, in any order, duplicates allowed
 * (the same (agent, segment, batch_seq) counts once). Batches of other traces are
 * ignored (the trace is that of batches[0]). 0, or -1 on out of memory. */
int cmr_tree_build(const cmr_ingest_batch_t *batches, size_t n, cmr_tree_t *out);
void cmr_tree_free(cmr_tree_t *t);

/* --- trace summary ------------------------------------------------------------------ */

enum {
    CMR_TRACE_COMPLETE = 1,    /* every segment ended, no batch missing, every parent present */
    CMR_TRACE_HAS_ROOT = 2,    /* the root segment (no parent) has arrived */
    CMR_TRACE_REMOTE_ROOT = 4, /* the trace started outside the CMR */
    CMR_TRACE_TRUNCATED = 8,   /* segments did not record calls (calls_not_recorded, truncated_by) */
    CMR_TRACE_ROOT_LOST = 16,  /* the root segment arrived without its root call (its first
                                * batch was lost, or an agent before whole-trace loss dropped
                                * the root enter): root_method is 0, and is shown as such */
};

/* Diagnoses a trace remembers at most (docs/DIAGNOSIS.md): the smallest ids when its
 * batches carried more, so that the set does not depend on the batches' order. */
#define CMR_TRACE_MAX_DIAGNOSES 4

typedef struct cmr_trace_summary {
    uint8_t trace_id[16];
    int64_t start_ns, end_ns;
    uint64_t root_method;
    uint64_t root_agent;
    int64_t root_thread;
    uint64_t events, dropped;
    uint32_t segments, agents;
    uint32_t flags;
    uint64_t calls_not_recorded;                 /* CMR_TRACE_TRUNCATED: calls its segments did not record */
    uint32_t truncated_by;                       /* CMR_TRUNCATED_BY_* bits */
    uint32_t ndiagnoses;                         /* 0..CMR_TRACE_MAX_DIAGNOSES */
    uint64_t diagnoses[CMR_TRACE_MAX_DIAGNOSES]; /* ascending; the diagnosis ids its batches carried */
    cmr_trace_http_t http;                       /* the root segment's transaction data */
} cmr_trace_summary_t;

/* Stored summary: CMR_TRACE_SUMMARY_LEN bytes without diagnoses and http data (the format
 * of every summary written before diagnoses existed), then, only when its flags say
 * CMR_TRACE_TRUNCATED, calls_not_recorded(8) | truncated_by(4) (CMR_TRACE_SUMMARY_LOSS_LEN:
 * no summary written before had that flag), then ndiagnoses(4) | ids(8 each)
 * when the trace has diagnoses or http data (the format before http data: the length is
 * exactly that), then, with http data, version(1)=1 | status(2) | method length(2) |
 * method | path length(2) | path; at most CMR_TRACE_SUMMARY_MAX_LEN bytes. */
#define CMR_TRACE_SUMMARY_LEN 84
#define CMR_TRACE_SUMMARY_HTTP_MAX_LEN (1 + 2 + 2 + CMR_TRACE_HTTP_MAX + 2 + CMR_TRACE_HTTP_MAX)
#define CMR_TRACE_SUMMARY_LOSS_LEN 12
#define CMR_TRACE_SUMMARY_MAX_LEN                                                           \
    (CMR_TRACE_SUMMARY_LEN + CMR_TRACE_SUMMARY_LOSS_LEN + 4 + 8 * CMR_TRACE_MAX_DIAGNOSES + \
     CMR_TRACE_SUMMARY_HTTP_MAX_LEN)
/* Returns the encoded length. */
size_t cmr_trace_summary_encode(const cmr_trace_summary_t *s, uint8_t out[CMR_TRACE_SUMMARY_MAX_LEN]);
/* Either length; 0, or -1 when v is not a summary. */
int cmr_trace_summary_decode(const uint8_t *v, size_t len, cmr_trace_summary_t *s);

/* Per-trace incremental state: which batches were seen (duplicates are refused), time
 * range, segments, agents and methods. Every derived value depends only on the set of
 * batches, never on their order: a replay gives the same summary. */
typedef struct cmr_trace_state cmr_trace_state_t;

cmr_trace_state_t *cmr_trace_state_new(const uint8_t trace_id[16]);
void cmr_trace_state_free(cmr_trace_state_t *s);
/* 1 when the batch is new (applied), 0 for a duplicate, -1 on out of memory. New agents
 * and methods are reported through the callbacks (may be NULL). */
typedef void(cmr_trace_new_id_fn)(void *opaque, uint64_t id);
int cmr_trace_state_apply(cmr_trace_state_t *s, const cmr_ingest_batch_t *b, cmr_trace_new_id_fn *on_agent,
                          cmr_trace_new_id_fn *on_method, void *opaque);
void cmr_trace_state_summary(const cmr_trace_state_t *s, cmr_trace_summary_t *out);
/* Adds a diagnosis id to the trace's set (what cmr_trace_state_apply does with a batch's
 * diagnosis_id; the engine gives back the stored summary's ids when it rebuilds a state
 * from stored batches, which do not carry them). 1 when the set changed, 0 otherwise
 * (0 = none, known, or larger than every one of a full set). */
int cmr_trace_state_add_diagnosis(cmr_trace_state_t *s, uint64_t id);
/* Gives the trace's root segment (as the summary names it now) the known values of h, as
 * if they came before any of its batches: what the engine does with the stored summary's
 * http data when it rebuilds a state from stored batches. 0, or -1 out of memory. */
int cmr_trace_state_seed_http(cmr_trace_state_t *s, const cmr_trace_http_t *h);
/* Gives the state the stored summary's loss (calls not recorded, why), which stored batches
 * do not carry: what the engine does when it rebuilds a state from stored batches. */
void cmr_trace_state_seed_loss(cmr_trace_state_t *s, const cmr_trace_summary_t *sum);
size_t cmr_trace_state_bytes(const cmr_trace_state_t *s);
/* Calls on_agent for every JVM and on_method for every method of the trace so far (the
 * ids cmr_trace_state_apply reported as new, all of them again). */
void cmr_trace_state_each_id(const cmr_trace_state_t *s, cmr_trace_new_id_fn *on_agent, cmr_trace_new_id_fn *on_method,
                             void *opaque);
/* Whether the trace has more hand-offs (FORK events) than segments that continue one of
 * them: a child segment may still come (from another JVM's next send), or never (a
 * hand-off to a thread or service that records nothing). */
bool cmr_trace_state_awaits_children(const cmr_trace_state_t *s);

/* --- names (methods and agents) ----------------------------------------------------- */

typedef struct cmr_names cmr_names_t;

cmr_names_t *cmr_names_new(void);
void cmr_names_free(cmr_names_t *n);
/* Stored value formats, shared with the meta store. 0 or -1. */
int cmr_names_put_method(cmr_names_t *n, const cmr_method_entry_t *m);
int cmr_names_put_agent(cmr_names_t *n, const cmr_agent_registration_t *r);
int cmr_names_load_method(cmr_names_t *n, uint64_t id, const void *val, size_t len);
int cmr_names_load_agent(cmr_names_t *n, uint64_t id, const void *val, size_t len);
/* Serialized values for the meta store (malloc'd). */
char *cmr_names_method_value(const cmr_method_entry_t *m, size_t *len);
char *cmr_names_agent_value(const cmr_agent_registration_t *r, size_t *len);
/* "com.example.Foo.bar(I)V", or "method#<hex>" when unknown; into buf. */
const char *cmr_names_method(const cmr_names_t *n, uint64_t id, char *buf, size_t len);
/* The same, or NULL when id is not in the table. */
const char *cmr_names_method_known(const cmr_names_t *n, uint64_t id, char *buf, size_t len);
/* "name@host pid N", or "agent#<hex>"; into buf. */
const char *cmr_names_agent(const cmr_names_t *n, uint64_t id, char *buf, size_t len);
/* Ids of methods whose display name contains `pattern` (or equals it as 16 hex digits).
 * Returns the count; *ids malloc'd. */
size_t cmr_names_find_methods(const cmr_names_t *n, const char *pattern, uint64_t **ids);
/* Methods plus agents known (grows as tables arrive: a render cache key). */
size_t cmr_names_count(const cmr_names_t *n);
size_t cmr_names_find_agents(const cmr_names_t *n, const char *pattern, uint64_t **ids);

/* --- store -------------------------------------------------------------------------- */

/* A store root holds one RocksDB per cmr.events partition (p000, p001, ...), so a
 * partition's history moves with the partition from worker to worker, and meta stores
 * (meta/0, meta/1, ...: one per running worker) with the method and agent tables. */
typedef struct cmr_store cmr_store_t;

typedef struct cmr_store_opts {
    bool read_only;
    bool sync;                  /* fsync the WAL at every group commit (default true) */
    int64_t retention_age_ms;   /* 0: keep forever */
    int64_t retention_bytes;    /* per partition; 0: no bound */
    int64_t write_buffer_bytes; /* memtable of `batches`, and of `traces`; 0: 16 MiB */
    /* the engine: complete traces' states kept in memory for late segments of other JVMs
     * (ing_engine.c), at most trace_keep_max per partition for trace_keep_ms; 0: the
     * default (below), negative: none kept */
    int64_t trace_keep_ms, trace_keep_max;
} cmr_store_opts_t;

#define CMR_INGEST_TRACE_KEEP_MS 3000
#define CMR_INGEST_TRACE_KEEP_MAX 4096

enum {
    CMR_CF_BATCHES,
    CMR_CF_TRACES,
    CMR_CF_IDX_TIME,
    CMR_CF_IDX_DURATION,
    CMR_CF_IDX_ROOT,
    CMR_CF_IDX_AGENT,
    CMR_CF_IDX_METHOD,
    CMR_CF_IDX_DIAGNOSIS,
    CMR_CF__COUNT
};

/* Opens (creating it unless read-only) the store of `partition` under root. When the
 * store is locked by another process (a worker giving the partition up), retries for up
 * to wait_ms. NULL with err filled. */
cmr_store_t *cmr_store_open_partition(const char *root, int partition, const cmr_store_opts_t *o, int wait_ms,
                                      char *err, size_t errlen);
/* Opens the first free meta slot (or, read-only, slot `slot`). */
cmr_store_t *cmr_store_open_meta(const char *root, int slot, const cmr_store_opts_t *o, char *err, size_t errlen);
void cmr_store_close(cmr_store_t *s);
int cmr_store_partition(const cmr_store_t *s);
/* Partitions present under root (sorted); returns the count, *parts malloc'd. */
size_t cmr_store_list_partitions(const char *root, int **parts);
size_t cmr_store_list_meta(const char *root, int **slots);

/* Raw access for the engine and queries. */
void *cmr_store_db(cmr_store_t *s);         /* rocksdb_t* */
void *cmr_store_cf(cmr_store_t *s, int cf); /* rocksdb_column_family_handle_t* */
/* Writes a rocksdb_writebatch_t durably (WAL, fsync when opts.sync). 0 or -1. */
int cmr_store_write(cmr_store_t *s, void *writebatch, char *err, size_t errlen);
/* Every batch of a trace. *batches (malloc'd) point into *vals (malloc'd, free both with
 * cmr_store_batches_free). Returns the count, -1 on error. */
int cmr_store_trace_batches(cmr_store_t *s, const uint8_t trace_id[16], cmr_ingest_batch_t **batches, void **vals);
void cmr_store_batches_free(cmr_ingest_batch_t *batches, void *vals);
int cmr_store_get_summary(cmr_store_t *s, const uint8_t trace_id[16], cmr_trace_summary_t *out); /* 1, 0, -1 */
/* The offset of the last cmr.events record of the partition the store has applied
 * (*offset -1 when none is recorded: a new store, or one written before offsets were).
 * 1 found, 0 none, -1 read error or corrupt value. */
int cmr_store_get_applied(cmr_store_t *s, int64_t *offset);
/* Puts the applied offset into a rocksdb_writebatch_t: written with the effects. */
void cmr_store_put_applied(cmr_store_t *s, void *writebatch, int64_t offset);
/* The group key of the last postings written to the store (0 when none), and the put of
 * a new one into a rocksdb_writebatch_t, written with those postings: group keys are
 * strictly increasing per store, across restarts (ing_store.c, "postings"). */
int64_t cmr_store_last_group(cmr_store_t *s);
void cmr_store_put_group(cmr_store_t *s, void *writebatch, int64_t group);
/* Loads every method and agent of a meta store into names. */
int cmr_store_load_names(cmr_store_t *meta, cmr_names_t *names);
/* One step of retention: deletes traces older than the age bound, then the oldest until
 * under the size bound; about a thousand traces (whole time groups), in one write.
 * Returns the number of traces deleted; *more says the step stopped at its size with
 * old traces possibly left (another step now would go on). */
long cmr_store_retention(cmr_store_t *s, int64_t now_ns, bool *more);
/* Deletes one trace: batches, summary and per-trace index keys (its postings and time
 * group entries go with retention and compaction, ing_store.c). */
int cmr_store_delete_trace(cmr_store_t *s, const uint8_t trace_id[16]);

/* Index keys (big endian so that byte order is numeric order): the duration key of a
 * trace, and the per-trace time and root keys of stores written before time groups
 * (cmr_store_time_legacy). */
void cmr_store_index_keys(const cmr_trace_summary_t *s, uint8_t time_key[24], uint8_t dur_key[24],
                          uint8_t root_key[32]);
/* Whether the (writable) store may hold per-trace idx_time / idx_root keys of the format
 * before time groups: the engine then keeps a changed trace's time key per trace (and
 * posts its root when its root key changes), and retention deletes them. */
bool cmr_store_time_legacy(const cmr_store_t *s);

/* A time group of idx_time (ing_store.c): key CMR_TIME_GROUP_TAG | group | written (the
 * wall clock's ms when the group was written; both big endian), value the group's new
 * traces, CMR_TIME_REC bytes each: trace id | start ns (big endian, ordered) as the trace
 * began when it was posted. Its key sorts after every per-trace key of the older format
 * (start | trace: the first byte is below 0xFF for any start before the year 2260). */
#define CMR_TIME_GROUP_TAG 0xFF
#define CMR_TIME_GROUP_KEY 17
#define CMR_TIME_REC 24
void cmr_store_time_group_key(uint8_t key[CMR_TIME_GROUP_KEY], int64_t group, int64_t written_ms);
/* Whether an idx_time key is a time group's (else a per-trace key of the older format). */
static inline bool cmr_store_is_time_group_key(const uint8_t *key, size_t len)
{
    return len == CMR_TIME_GROUP_KEY && key[0] == CMR_TIME_GROUP_TAG;
}
/* The last nanosecond of a group key's millisecond: every trace of the group, and of the
 * groups before it, started at or before it (saturating). */
int64_t cmr_store_time_group_end_ns(int64_t group);

/* --- engine ------------------------------------------------------------------------- */

/* Applies batches to partition stores and commits them in groups: everything added
 * since the last cmr_ingest_engine_flush() becomes durable at the next flush. */
typedef struct cmr_ingest_engine cmr_ingest_engine_t;

typedef struct cmr_ingest_stats {
    uint64_t messages; /* EventBatch messages read (cmr_ingest_engine_add; not those to come again: -2) */
    /* segment batches: applied, seen before, refused (and damaged messages, once each) */
    uint64_t batches, events, duplicates, rejected, flushes, traces_touched;
    uint64_t traces_reloaded; /* trace states rebuilt from the store (a segment after the trace left memory) */
    uint64_t event_bytes;     /* of the applied batches' encoded events as stored (cmr/event.h) */
    uint64_t methods, agents;
    uint64_t attributes_rejected; /* invalid attribute values left out of applied batches */
    uint64_t restored;            /* records read back from the topics for newly assigned partitions */
    uint64_t restore_missing;     /* offsets a restore needed that the topics no longer had */
} cmr_ingest_stats_t;

cmr_ingest_engine_t *cmr_ingest_engine_new(const char *root, const cmr_store_opts_t *o, char *err, size_t errlen);
void cmr_ingest_engine_free(cmr_ingest_engine_t *e);
/* Opens / closes the store of a partition (close flushes first). 0 or -1. */
int cmr_ingest_engine_open_partition(cmr_ingest_engine_t *e, int partition, int wait_ms);
int cmr_ingest_engine_close_partition(cmr_ingest_engine_t *e, int partition);
/* Notes that the record at `offset` of `partition` has been handled (applied, found a
 * duplicate, or rejected): the next flush writes the offset into the partition's store in
 * the same atomic write as the record's effects. Offsets never go back. */
void cmr_ingest_engine_set_applied(cmr_ingest_engine_t *e, int partition, int64_t offset);
/* The applied offset the partition's store holds durably: -1 when none (or the partition
 * is not open). */
int64_t cmr_ingest_engine_applied(const cmr_ingest_engine_t *e, int partition);
/* Adds to the restore counters of the stats (the worker restores; the engine counts). */
struct cmr_restore_stats;
void cmr_ingest_engine_count_restore(cmr_ingest_engine_t *e, const struct cmr_restore_stats *st);
/* Adds one segment batch (its events a block of their own) received on `partition`. 1 applied, 0 duplicate, -1 rejected as
 * malformed (err says why; nothing changed), -2 cannot be stored (partition not open,
 * out of memory): the caller must not mark the record done. With 1 or 0, err is empty
 * unless attribute values were left out as invalid: then it says which and why (counted
 * in attributes_rejected; the caller reports it, cmr/rejects.h "bad_attribute"). */
int cmr_ingest_engine_add_batch(cmr_ingest_engine_t *e, int partition, const cmr_event_batch_t *m, char *err,
                                size_t errlen);
/* An EventBatch message: its segment batches, each as cmr_ingest_engine_add_batch, read
 * and checked in one pass (cmr_segs_reader). 1 when one was applied, 0 when every one was
 * a duplicate, -1 when one was rejected or the message is corrupt (err: the first reason,
 * "segment N: ..."; the whole segment batches before the damage stay applied), -2 as
 * above (what came before stays applied; the record comes again, its duplicates are
 * found). Counters (cmr_ingest_stats_t) count segment batches. */
int cmr_ingest_engine_add(cmr_ingest_engine_t *e, int partition, const cmr_event_msg_t *m, char *err, size_t errlen);
int cmr_ingest_engine_add_method(cmr_ingest_engine_t *e, const cmr_method_entry_t *m);
int cmr_ingest_engine_add_agent(cmr_ingest_engine_t *e, const cmr_agent_registration_t *r);
/* Decodes a record of cmr.methods or cmr.registrations (rec, read from `topic`) and adds
 * it: 1 added, 0 skipped. A record that does not decode, or is not of the topic's type, is
 * rejected: counted and logged (cmr/rejects.h), never applied. */
int cmr_ingest_engine_add_table_record(cmr_ingest_engine_t *e, const char *topic, const cmr_reader_rec_t *rec);
/* Writes everything added since the last flush, durably. 0 or -1 (then nothing may be
 * marked done: the caller exits and the records come again). */
int cmr_ingest_engine_flush(cmr_ingest_engine_t *e);
size_t cmr_ingest_engine_pending(const cmr_ingest_engine_t *e);
void cmr_ingest_engine_stats(const cmr_ingest_engine_t *e, cmr_ingest_stats_t *out);
/* SST files and memtables of the open stores (partitions and meta), in bytes. */
uint64_t cmr_ingest_engine_disk_bytes(const cmr_ingest_engine_t *e);
const char *cmr_ingest_engine_root(const cmr_ingest_engine_t *e);
/* The method and agent tables as read so far (kept current by the table records). */
const cmr_names_t *cmr_ingest_engine_names(const cmr_ingest_engine_t *e);
/* Runs retention on every open partition (after a group commit of what is pending): a
 * step each, then further steps on those with more old traces, in turn, for up to half a
 * second. Returns the traces deleted, -1 when the group commit failed; *behind (when not
 * NULL) says old traces were left for the next call. */
long cmr_ingest_engine_retention(cmr_ingest_engine_t *e, bool *behind);

/* --- agent status (ing_agents.c) ------------------------------------------------------- */

/* Queues an AgentStatus (payload: the record as received) into the meta store's write
 * batch: the first of each minute and every change of state are kept; within a minute the
 * newest replaces the one before (deleted in the same batch), so the newest is always
 * there. last: agent id -> what was kept (the engine's). 1 queued, 0 not (older than the
 * newest kept, or a replay of it). */
int cmr_ingest_status_add(cmr_store_t *meta, void *writebatch, cmr_u64map_t *last, const cmr_agent_status_t *st,
                          const void *payload, size_t len);
void cmr_ingest_status_forget(cmr_u64map_t *last);
/* Deletes the statuses older than cutoff_ms of every agent in last. */
void cmr_ingest_status_retention(cmr_store_t *meta, const cmr_u64map_t *last, int64_t cutoff_ms);
/* agent 0: the latest status of every agent ({"agents": [...]}); else that agent's
 * statuses in [from_ms, to_ms) ({"history": [...]}, to_ms 0 = open). JSON into *json
 * (malloc'd); a table into text when not NULL. 0, or -1 with err. */
int cmr_ingest_agents(const char *root, uint64_t agent, int64_t from_ms, int64_t to_ms, char **json, FILE *text,
                      char *err, size_t errlen);
/* The agents whose latest status (the newest over every meta store given, by time_ms)
 * names environment env exactly: *ids malloc'd (sorted), the count; -1 out of memory. */
long cmr_ingest_status_env_agents(cmr_store_t *const *metas, size_t nmetas, const char *env, uint64_t **ids);

/* --- query -------------------------------------------------------------------------- */

/* A read view over a store root: every partition (read-only) plus the names. */
typedef struct cmr_ingest_view cmr_ingest_view_t;

typedef struct cmr_trace_filter {
    int64_t from_ns, to_ns; /* start time range, 0 = open */
    int64_t min_duration_ns;
    const char *root_method; /* substring of the root method's name, or its hex id */
    const char *agent;       /* substring of "name@host", or the hex agent id */
    const char *contains;    /* a method in the trace: substring or hex id */
    const char *env;         /* an environment id: a JVM that last reported it took part */
    cmr_http_filter_t http;  /* the root's transaction data */
    bool slowest;            /* order by duration, longest first (default: newest first) */
    size_t limit;            /* 0 = 50 */
    /* only the stores of these cmr.events partitions (partitions[p] true), when set: a
     * worker answers for the partitions it owns (ing_peers.c) */
    const bool *partitions;
    size_t npartitions;
} cmr_trace_filter_t;

cmr_ingest_view_t *cmr_ingest_view_open(const char *root, char *err, size_t errlen);
void cmr_ingest_view_free(cmr_ingest_view_t *v);
const cmr_names_t *cmr_ingest_view_names(const cmr_ingest_view_t *v);
/* The meta stores of the view (read-only, open while the view is): the count; *metas
 * points into the view. */
size_t cmr_ingest_view_metas(cmr_ingest_view_t *v, cmr_store_t *const **metas);
/* Matching summaries, sorted; *out malloc'd. Returns the count or -1. */
long cmr_ingest_view_list(cmr_ingest_view_t *v, const cmr_trace_filter_t *f, cmr_trace_summary_t **out);
/* The stored summary of a trace: 1 found, 0 unknown, -1 error. */
int cmr_ingest_view_summary(cmr_ingest_view_t *v, const uint8_t trace_id[16], cmr_trace_summary_t *out);
/* The tree of a trace: 1 found, 0 unknown, -1 error. */
int cmr_ingest_view_tree(cmr_ingest_view_t *v, const uint8_t trace_id[16], cmr_tree_t *out);

/* The traces tagged with a diagnosis id (idx_diagnosis) whose transaction data matches
 * http (NULL: all), newest first (ties: trace id), at most limit; *found: how many the
 * store holds. *out malloc'd. The count, or -1. */
long cmr_ingest_view_diagnosis_traces(cmr_ingest_view_t *v, uint64_t diagnosis, const cmr_http_filter_t *http,
                                      size_t limit, cmr_trace_summary_t **out, size_t *found);

/* --- diagnosis report (ing_diag.c) ---------------------------------------------------- */

#define CMR_DIAG_DEFAULT_LIMIT 1000
#define CMR_DIAG_MAX_LIMIT 100000

/* One method over the call trees of a diagnosis' traces. */
typedef struct cmr_diag_method {
    uint64_t method_id;
    uint64_t calls;
    uint32_t traces;      /* traces it was called in */
    int64_t total_ns;     /* sum of its calls' total times (a recursive call counts at every level) */
    int64_t self_ns;      /* sum of its calls' self times */
    cmr_hist_t durations; /* its calls' total times: percentiles (owned) */
} cmr_diag_method_t;

typedef struct cmr_diag_report {
    uint64_t diagnosis_id;
    cmr_http_filter_t http; /* the filter applied (strings: the caller's) */
    size_t limit;
    size_t found;                /* traces tagged (and matching) in the store; `traces` holds the newest `limit` */
    cmr_trace_summary_t *traces; /* newest first (owned) */
    size_t ntraces;
    size_t unreadable;          /* listed traces whose tree could not be read (deleted meanwhile) */
    cmr_diag_method_t *methods; /* by total time, longest first, ties by method id (owned) */
    size_t nmethods;
} cmr_diag_report_t;

/* "dd857cc97ac20a14": 16 hex digits, not all zero (0 means no diagnosis). 0 or -1. */
int cmr_ingest_parse_diagnosis_id(const char *s, uint64_t *id);
/* The report of one diagnosis: its newest traces whose transaction data matches http
 * (NULL: all; limit 0 = CMR_DIAG_DEFAULT_LIMIT) and the per-method statistics over their
 * call trees (cmr_ingest_view_tree). 0, or -1 (out of memory, store error); free with
 * cmr_diag_report_free. */
int cmr_ingest_view_diagnosis(cmr_ingest_view_t *v, uint64_t diagnosis, const cmr_http_filter_t *http, size_t limit,
                              cmr_diag_report_t *out);
void cmr_diag_report_free(cmr_diag_report_t *r);
/* The id and parameters of a diagnosis query (keys: limit, 1..CMR_DIAG_MAX_LIMIT, and the
 * http filters of cmr_http_filter_set; http may be NULL: checked only). 0, or -1
 * with err. */
int cmr_ingest_diagnosis_params(const char *id, const char *const *keys, const char *const *values, size_t n,
                                uint64_t *diag, size_t *limit, cmr_http_filter_t *http, char *err, size_t errlen);
/* GET /api/diagnoses/<id>?limit=N&http_status=5* and `cmr-ingest diagnosis ID [--limit N]
 * [--http-method M] [--http-path GLOB] [--http-status GLOB]`: parses id and parameters,
 * runs the report and renders it: JSON into *json (malloc'd), or a table into text when
 * not NULL. 0; 2 on bad input (err says why); 1 on failure. */
int cmr_ingest_diagnosis_query(cmr_ingest_view_t *v, const char *id, const char *const *keys, const char *const *values,
                               size_t n, char **json, FILE *text, char *err, size_t errlen);

/* Output (deterministic: the same store content gives the same bytes). */
void cmr_ingest_print_list(FILE *f, const cmr_names_t *n, const cmr_trace_summary_t *s, size_t count);
void cmr_ingest_print_tree(FILE *f, const cmr_names_t *n, const cmr_tree_t *t);
/* JSON texts (malloc'd). */
char *cmr_ingest_list_json(const cmr_names_t *n, const cmr_trace_summary_t *s, size_t count);
char *cmr_ingest_tree_json(const cmr_names_t *n, const cmr_tree_t *t);
/* The same JSON in pieces, for answers that are sent as they are written (a tree of any
 * size costs the server one node's rendering at a time, not the whole document): the
 * stream borrows t and n, which must outlive it (and t not change). read writes up to max
 * bytes into buf: the count, 0 at the end, -1 out of memory. */
typedef struct cmr_tree_json_stream cmr_tree_json_stream_t;
cmr_tree_json_stream_t *cmr_tree_json_stream_over(const cmr_names_t *n, const cmr_tree_t *t);
long cmr_tree_json_stream_read(cmr_tree_json_stream_t *s, char *buf, size_t max);
void cmr_tree_json_stream_free(cmr_tree_json_stream_t *s);
/* A diagnosis report as a table, and as JSON (malloc'd; docs/INGEST.md). */
void cmr_ingest_print_diagnosis(FILE *f, const cmr_names_t *n, const cmr_diag_report_t *r);
char *cmr_ingest_diagnosis_json(const cmr_names_t *n, const cmr_diag_report_t *r);
#define CMR_ENV_ID_MAX 64 /* bytes of an environment id (cmr-config: 1-64 of A-Z a-z 0-9 - _ .) */
/* Sets one filter (an HTTP query parameter or a CLI option): 0, or -1 with err on an
 * unknown key or a bad value (env: empty, longer than CMR_ENV_ID_MAX, a control
 * character). */
int cmr_trace_filter_set(cmr_trace_filter_t *f, const char *key, const char *value, char *err, size_t errlen);
/* "2026-11-21T21:40:00Z", "...123Z", unix seconds/ms/ns, or "-10m" (relative). */
int cmr_ingest_parse_time(const char *s, int64_t *ns);
int cmr_ingest_parse_duration(const char *s, int64_t *ns); /* "12ms", "1.5s", "300us", "10ns" */

/* --- export ------------------------------------------------------------------------- */

char *cmr_ingest_export_chrome(const cmr_names_t *n, const cmr_tree_t *t);
char *cmr_ingest_export_otlp(const cmr_names_t *n, const cmr_tree_t *t);

/* --- reader, worker, replay, http --------------------------------------------------- */

/* The reader of whole topics is common/include/cmr/reader.h. */

/* Store options from ingest.sync / ingest.retention.*: 0, or -1 with err filled. */
int cmr_ingest_store_opts(const cmr_conf_t *conf, cmr_store_opts_t *o, char *err, size_t errlen);
int cmr_ingest_worker_run(const cmr_conf_t *conf, volatile sig_atomic_t *stop);
int cmr_ingest_replay(const cmr_conf_t *conf, const char *since, FILE *progress);

/* --- restore (ing_restore.c) ------------------------------------------------------- */

/* The offsets a store that applied up to `applied` (-1: nothing) lacks when the group has
 * committed `committed` (the next offset to consume; negative: nothing committed, the
 * consumer reads from the start itself). true with *out set when there is something to
 * read back. */
bool cmr_restore_range(int32_t partition, int64_t applied, int64_t committed, cmr_reader_range_t *out);

/* Which offsets of a range were handed out, in order: the rest is missing. */
typedef struct cmr_restore_gaps {
    cmr_reader_range_t range;
    int64_t next;    /* the next offset expected */
    uint64_t seen;   /* records of the range seen */
    int64_t missing; /* offsets skipped so far (all of them after _end) */
} cmr_restore_gaps_t;
void cmr_restore_gaps_init(cmr_restore_gaps_t *g, const cmr_reader_range_t *r);
void cmr_restore_gaps_see(cmr_restore_gaps_t *g, int64_t offset);
/* The range is over: counts what was never seen up to its end. Returns the missing. */
int64_t cmr_restore_gaps_end(cmr_restore_gaps_t *g);

typedef struct cmr_restore_stats {
    uint64_t records; /* read back and applied (duplicates included) */
    uint64_t missing; /* offsets of the ranges the topic did not hand out */
} cmr_restore_stats_t;

/* What the restore does with what it reads back (the worker's callbacks). apply: one
 * decoded record; skipped: a record that did not decode (rejected; may be NULL); flush:
 * makes what was applied durable, called every flush_every records and at the end (may be
 * NULL). Each returns 0, or -1 when it cannot store (the restore fails). */
typedef struct cmr_restore_cb {
    int (*apply)(void *opaque, const char *topic, int32_t partition, int64_t offset, const cmr_msg_t *msg);
    int (*skipped)(void *opaque, const char *topic, int32_t partition, int64_t offset);
    int (*flush)(void *opaque);
    void *opaque;
    int64_t flush_every;
    int64_t idle_timeout_ms;     /* fail when nothing arrives for this long */
    volatile sig_atomic_t *stop; /* may be NULL */
} cmr_restore_cb_t;

/* Reads the ranges of topic back and applies them; logs each range's end
 * (event=ingest.partition_restored) and its missing offsets (event=ingest.restore_gap),
 * adds to *st. 0, or -1 (logged). */
int cmr_ingest_restore(const cmr_conf_t *conf, const char *topic, const cmr_reader_range_t *ranges, size_t n,
                       const cmr_restore_cb_t *cb, cmr_restore_stats_t *st);

/* --- peers: partition owners and the queries' fan-out (ing_peers.c) ---------------- */

typedef struct cmr_ingest_peers cmr_ingest_peers_t;
typedef struct cmr_ingest_peers_opts {
    const cmr_conf_t *conf;          /* kafka.partitioner (the trace id's partition); kept, not owned */
    const char *worker_id;           /* ingest.worker_id */
    const char *url;                 /* ingest.http.advertise_url: this worker's HTTP base URL */
    const char *token;               /* sent to peers as a bearer token (ingest.http.token_file), or NULL */
    int timeout_ms;                  /* ingest.fanout.timeout_ms: a fanned-out query's time bound */
    int64_t stale_ms;                /* an announcement older than this does not count */
    int32_t partition_count;         /* of cmr.events */
    int32_t metrics_partition_count; /* of cmr.metrics */
} cmr_ingest_peers_opts_t;
/* NULL with err filled (an invalid worker id or URL). */
cmr_ingest_peers_t *cmr_ingest_peers_new(const cmr_ingest_peers_opts_t *o, char *err, size_t errlen);
void cmr_ingest_peers_free(cmr_ingest_peers_t *p);
bool cmr_ingest_peers_id_valid(const char *id);
bool cmr_ingest_peers_url_valid(const char *url);
/* This worker owns (and has restored) the partition of topic (CMR_TOPIC_EVENTS or
 * CMR_TOPIC_METRICS), or not any more. */
void cmr_ingest_peers_set_owned(cmr_ingest_peers_t *p, cmr_topic_t topic, int32_t partition, bool owned);
void cmr_ingest_peers_set_partition_count(cmr_ingest_peers_t *p, cmr_topic_t topic, int32_t count);
/* The partitions of topic this worker owns, sorted: the count, *parts malloc'd (NULL: out
 * of memory). */
size_t cmr_ingest_peers_owned(cmr_ingest_peers_t *p, cmr_topic_t topic, int32_t **parts);
/* This worker's announcement (free with cmr_msg_body_free(CMR_MSG_INGEST_WORKER, out)). 0 or -1. */
int cmr_ingest_peers_announcement(cmr_ingest_peers_t *p, bool leaving, cmr_ingest_worker_t *out);
/* A record of cmr.ingest-workers: 0 kept (or ours: ignored), -1 rejected with err (does
 * not decode, or a field out of bounds). */
int cmr_ingest_peers_add(cmr_ingest_peers_t *p, const void *payload, size_t len, char *err, size_t errlen);

/* Who answers for which partition now. */
typedef struct cmr_ingest_plan_group {
    char url[512];
    int32_t *partitions; /* owned */
    size_t npartitions;
} cmr_ingest_plan_group_t;
typedef struct cmr_ingest_plan {
    int32_t partition_count;
    bool local[4096];                /* this worker's */
    cmr_ingest_plan_group_t *groups; /* the other owners' */
    size_t ngroups;
    int32_t *unowned; /* no owner known */
    size_t nunowned;
} cmr_ingest_plan_t;
/* Who answers for the partitions of topic: every one, or (key not NULL) only the one the
 * producers' partitioner puts key in (an environment's metrics). 0 or -1. */
int cmr_ingest_peers_plan(cmr_ingest_peers_t *p, cmr_topic_t topic, const char *key, cmr_ingest_plan_t *plan);
void cmr_ingest_plan_free(cmr_ingest_plan_t *plan);
/* The cmr.events partition a trace id was written to, -1 when not known. */
int32_t cmr_ingest_peers_trace_partition(cmr_ingest_peers_t *p, const uint8_t trace_id[16]);
/* GET url within timeout_ms (the bearer token sent): the status, 0 when there was no
 * answer (err says why); the body into *body (at most 64 MiB). */
long cmr_ingest_peers_get(cmr_ingest_peers_t *p, const char *url, int timeout_ms, struct cmr_buf *body, char *err,
                          size_t errlen);
/* A list query across owners: local_json is this worker's answer for plan->local; the
 * other groups are asked `path?query&local=1&partitions=...` in parallel. The merged
 * answer (malloc'd JSON), with "partial", "partitions_unreachable" and "errors" when
 * something is missing; NULL when out of memory. */
char *cmr_ingest_peers_gather(cmr_ingest_peers_t *p, const cmr_ingest_plan_t *plan, const char *path, const char *query,
                              const char *local_json, bool slowest, size_t limit);
/* A metrics query (GET /api/metrics/<what>) across the owners of cmr.metrics partitions:
 * local_status and local_json are this worker's answer for plan->local, the other groups
 * are asked as above. top, alerts and stalled: the lists merged (top by its "value",
 * highest first, cut to limit; alerts and stalled by environment), "partial" as above.
 * series and jvms: the answer of the one owner that found the series; 400 when several
 * did (the name matches in several environments), 503 when none did and some partition
 * could not be asked, else the local answer. The status; *out the answer (malloc'd). */
int cmr_ingest_peers_gather_metrics(cmr_ingest_peers_t *p, const cmr_ingest_plan_t *plan, const char *what,
                                    const char *query, int local_status, const char *local_json, size_t limit,
                                    char **out);

typedef struct cmr_ingest_http cmr_ingest_http_t;
typedef struct cmr_ingest_http_source {
    /* Runs a query with a fresh view; the server owns no store. */
    const char *root;
} cmr_ingest_http_source_t;
/* Serves the JSON API on addr:port (port 0 picks one; addr an IPv4 or IPv6 literal, "::",
 * "localhost") on the common HTTP server (cmr/http_server.h: a thread pool, keep-alive).
 * token: required as a bearer token on every request (NULL: none, loopback only). */
cmr_ingest_http_t *cmr_ingest_http_start(const char *root, const char *addr, int port, const char *token, char *err,
                                         size_t errlen);
/* The same from the configuration: ingest.http.address, and the token in
 * ingest.http.token_file when it is set. */
cmr_ingest_http_t *cmr_ingest_http_start_conf(const cmr_conf_t *conf, const char *root, int port, char *err,
                                              size_t errlen);
int cmr_ingest_http_port(const cmr_ingest_http_t *h);
/* From now on list queries fan out to the owners of the partitions this worker does not
 * own, and a trace goes to its partition's owner (ing_peers.c). peers stays the caller's
 * and must outlive the server (or be set back to NULL first). */
void cmr_ingest_http_set_peers(cmr_ingest_http_t *h, cmr_ingest_peers_t *peers);
void cmr_ingest_http_stop(cmr_ingest_http_t *h);
/* Answers one request (method, target) -> status, body (malloc'd JSON). For tests. */
int cmr_ingest_http_answer(const char *root, const char *method, const char *target, char **body);

#endif

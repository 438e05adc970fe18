/*
 * probe_publisher.c - the publisher thread: drains every ring continuously (every send
 * interval, and early when a ring is half full), cuts the records into thread segments
 * and ships them as EventBatch messages; aggregates timer samples and completed
 * invocation-sequence calls per method, the root calls of traces per transaction, and
 * ships them with the calls still running past the stall threshold as MetricBatch
 * messages once per metric interval (call_stacks.h keeps the threads' shadow stacks).
 *
 * Messages: the segment batches a pass cuts go into one EventBatch message per partition
 * of cmr.events (cmr_segs_writer, cmr/event.h: one method dictionary and clock base per
 * message, compact segment headers), sent once a message is full, or at the end of the
 * first pass after its first segment waited agent.events.linger.ms (200 ms: over 20
 * passes, a message carries each method's 8-byte id once where 20 would; the events
 * reach the cluster at most that much later), and at the JVM's exit; the partition is the one the producers' partitioner (kafka.partitioner) gives the trace id's
 * key, set explicitly, so a trace's segments from every JVM meet in one partition. Until
 * the partition count is known, each segment batch is a message of its own.
 *
 * Segments: a thread's root invocation (call depth 1) starts a segment with a new trace
 * id; its events go out in batches while it runs (continuous sending: a long call is
 * visible before it ends), the batch that holds its final exit says last = true.
 * (Context hand-over between threads and JVMs builds on this in the invocation-sequence
 * work: a segment then names its parent instead of starting a new trace.)
 *
 * Nothing here blocks an application thread: the rings are read lock-free, and when the
 * producer's queue is full a batch is dropped and its events counted as dropped.
 */
#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "cmr/buf.h"
#include "cmr/bytes.h"
#include "cmr/event.h"
#include "cmr/ids.h"
#include "cmr/kafka.h"
#include "cmr/log.h"
#include "cmr/topics.h"
#include "cmr/utf8.h"
#include "metric_agg.h"
#include "probe_rings.h"
#include "sql_text.h"

#define MAX_RINGS_PER_PASS 8192
#define MAX_DEAD_PER_PASS 8192      /* ended threads' rings freed per pass (virtual threads end by the thousand) */
#define MAX_STALLED 64              /* stalled calls per MetricBatch; more are counted in a log line */
#define MAX_PARTITIONS 256          /* partitions of cmr.events one message each; more: one per segment */
#define MSG_MAX_EVENTS 16384        /* events per EventBatch message at most */
#define MSG_MAX_BYTES (256 * 1024)  /* its segments' bytes: sent once past this */
#define PARTITIONS_REFRESH_MS 30000 /* how often the partition count is asked again */

typedef struct publisher {
    cmr_agent_t *a;
    cmr_probe_rings_t *rings;
    int64_t clock_offset_ns; /* realtime - monotonic */
    _Atomic int64_t next_segment;
    uint64_t rng[2];
    /* timer aggregation of the current interval (count, sum, min, max and a latency
     * histogram per method, bounded to CMR_METRIC_MAX_METHODS methods); owned, emptied
     * (memory kept) when the interval is sent */
    cmr_metric_agg_t agg;
    /* shadow stacks' shared state: transactions and in-flight counters (call_stacks.h);
     * each ring keeps its own stack (cmr_ring_t.cs) */
    cmr_call_stacks_t cs;
    int64_t interval_start_ms;
    /* calls the probes ran this interval that were not recorded (segments skipped whole,
     * calls left out of truncated segments, records lost to a full ring): the overhead
     * budget scales the interval's counts by them (MetricBatch.calls_dropped) */
    int64_t interval_calls_dropped;
    /* the publisher thread's CPU time at its last MetricBatch (0: none yet): each batch
     * says what the thread spent since (agent_cpu_ns); read on that thread only */
    int64_t thread_cpu_ns;
    /* the stalled calls of the batch being sent: their stacks live here */
    cmr_stalled_call_t stalled[MAX_STALLED];
    uint8_t stall_stacks[MAX_STALLED + 1][CMR_CS_STACK_BYTES]; /* the last one: scratch */
    cmr_log_limiter_t stall_log;
    /* the messages being built, one per partition of cmr.events (cmr_segs_writer: several
     * segment batches, one dictionary and clock base), created on first use, owned; sent
     * once full or at the end of the first pass past the linger (wr_since_ms), and all at
     * the JVM's exit. partitions: the topic's partition count
     * (0: not known yet, then every segment batch is a message of its own, keyed by its
     * trace id for librdkafka's partitioner as before), refreshed every
     * PARTITIONS_REFRESH_MS */
    cmr_segs_writer_t *wr[MAX_PARTITIONS];
    int64_t wr_since_ms[MAX_PARTITIONS]; /* monotonic ms of the first segment of wr[i]'s message */
    cmr_segs_writer_t *lone;             /* a lone segment batch's message */
    int32_t partitions;
    int64_t partitions_ms;
    cmr_trace_partitioner_t partitioner; /* kafka.partitioner's, resolved once at start */
    cmr_probe_stats_t n;                 /* counters of this pass, added to the rings' totals after it */
    cmr_log_limiter_t loss_log;
    cmr_ring_t *pass[MAX_RINGS_PER_PASS];
    cmr_ring_t *dead[MAX_DEAD_PER_PASS]; /* the rings of ended threads a pass frees */
    size_t npass;                        /* rings of the last pass: valid until the next one */
} publisher_t;

static publisher_t pub;

static uint64_t rng_next(publisher_t *p)
{
    /* xorshift128+: trace ids need uniqueness, not secrecy; seeded from the kernel */
    uint64_t s1 = p->rng[0];
    const uint64_t s0 = p->rng[1];
    p->rng[0] = s0;
    s1 ^= s1 << 23;
    p->rng[1] = s1 ^ s0 ^ (s1 >> 17) ^ (s0 >> 26);
    return p->rng[1] + s0;
}

/* The probes stamp System.nanoTime() (CLOCK_MONOTONIC); events leave with wall time. */
static void refresh_clock(publisher_t *p)
{
    p->clock_offset_ns = cmr_wall_ns() - cmr_mono_ns();
}

/* --- event batches ------------------------------------------------------------------------- */

/* Opens a segment with the identity the probes announced (records 5-7), or, when those
 * records were lost to a full ring, with a fresh one of the publisher's. Trace ids are
 * kept as two 64-bit halves by the probes; on the wire they are 16 bytes, high half
 * first, each big endian: the same digits as a W3C traceparent trace-id. */
static void segment_open(publisher_t *p, cmr_ring_t *ring)
{
    ring->segment_open = true;
    if (ring->next_valid) {
        ring->segment_id = ring->next_segment;
        memcpy(ring->trace_id, ring->next_trace, 16);
        ring->has_parent = ring->next_has_parent;
        ring->parent = ring->next_parent;
        ring->next_valid = false;
    } else {
        ring->segment_id = ++p->next_segment;
        uint64_t hi = rng_next(p), lo = rng_next(p);
        if (!hi && !lo)
            lo = 1;
        cmr_put_be64(ring->trace_id, hi);
        cmr_put_be64(ring->trace_id + 8, lo);
        ring->has_parent = false;
    }
    ring->batch_seq = 0;
    ring->event_seq = 0;
    ring->open_depth = 0;
    ring->batch_count = 0;
    ring->diagnosis_id = 0;
    memset(ring->data_unsent, 0, sizeof ring->data_unsent);
    ring->method_known = false;
}

static const char *const node_keys[CMR_RING_NODE_KEYS] = {
    CMR_NODE_ATTR_DB_STATEMENT, CMR_NODE_ATTR_HTTP_METHOD,     CMR_NODE_ATTR_URL,        CMR_NODE_ATTR_HTTP_STATUS,
    CMR_NODE_ATTR_DB_ROWS,      NULL /* named by its value */, CMR_NODE_ATTR_HTTP_ROUTE, CMR_NODE_ATTR_DB_SYSTEM};
static void batch_send(publisher_t *p, cmr_ring_t *ring, bool last);

/* The request's method as a transaction name takes it: RFC 9110's and PATCH, any other
 * "_OTHER" (as OpenTelemetry's http.request.method), since a client chooses it and each
 * would be a transaction of its own. */
static const char *known_method(const char *m)
{
    static const char *const known[] = {"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (!strcmp(m, known[i]))
            return m;
    return "_OTHER";
}

/* The route of the segment's root call (an incoming request) names its transaction, with
 * the request's method: "GET /shop/checkout" (call_stacks.h). */
static void name_transaction(publisher_t *p, cmr_ring_t *ring, const char *route)
{
    if (ring->open_depth != 1 || !ring->method_known || !*route)
        return;
    char name[CMR_CS_NAME_MAX + 1];
    int n = snprintf(name, sizeof name, "%s %s", known_method(ring->data[CMR_RING_DATA_HTTP_METHOD]), route);
    if (n <= 0 || (size_t)n >= sizeof name || cmr_utf8_text_check(name, (size_t)n))
        return; /* a longer one, or one that is not text (a route can be the request's own
                   path, decoded), names nothing (call_stacks.h) */
    uint64_t unnamed = p->cs.unnamed;
    cmr_cs_name_transaction(&p->cs, &ring->cs, name, (size_t)n);
    if (unnamed == 0 && p->cs.unnamed > 0) {
        char er[200];
        cmr_log(CMR_LOG_WARN, "agent.transaction_names_full",
                "names=%d route=\"%s\" (from now on new routes keep their root method's name)", CMR_CS_MAX_NAMES,
                cmr_log_escape(route, er, sizeof er));
    }
}

/* A complete call attribute: normalised (SQL: literals masked) and kept for the next batch. */
static void node_attr_done(publisher_t *p, cmr_ring_t *ring)
{
    if (ring->node_n == CMR_RING_NODE_PENDING) /* many calls in one pass: send what is there */
        batch_send(p, ring, false);
    assert(ring->node_n < CMR_RING_NODE_PENDING); /* batch_send sent them, events or not */
    char masked[CMR_RING_NODE_DATA_MAX + 1];
    const char *v = ring->node_raw;
    if (ring->node_key == CMR_RING_NODE_DB_STATEMENT) {
        cmr_sql_normalise(ring->node_raw, ring->node_len, masked, sizeof masked);
        v = masked;
    } else {
        ring->node_raw[ring->node_len] = '\0';
        if (ring->node_key == CMR_RING_NODE_HTTP_ROUTE)
            name_transaction(p, ring, v);
    }
    const char *k = node_keys[ring->node_key - CMR_RING_NODE_KEY0];
    char header_key[sizeof CMR_NODE_ATTR_HTTP_HEADER + CMR_MAX_REQUEST_HEADER_NAME];
    if (!k) { /* a request header: "name\nvalue" */
        char *nl = memchr(v, '\n', strlen(v));
        size_t nlen = nl ? (size_t)(nl - v) : 0;
        if (!nl || nlen == 0 || nlen > CMR_MAX_REQUEST_HEADER_NAME)
            return; /* not written by Probe.httpIn: dropped */
        snprintf(header_key, sizeof header_key, "%s%.*s", CMR_NODE_ATTR_HTTP_HEADER, (int)nlen, v);
        k = header_key;
        v = nl + 1;
    }
    cmr_buf_put(&ring->node_out, k, strlen(k) + 1);
    cmr_buf_put(&ring->node_out, v, strlen(v) + 1);
    if (!cmr_buf_ok(&ring->node_out)) { /* out of memory: the batch goes without them */
        cmr_buf_free(&ring->node_out);
        ring->node_n = 0;
        p->n.dropped++;
        return;
    }
    ring->node_seq[ring->node_n++] = ring->node_call;
}

/* A DATA record of a call attribute, of the innermost open call: its chunks come in order
 * (Probe.data writes the whole value or nothing). */
static void node_chunk(publisher_t *p, cmr_ring_t *ring, const uint8_t *rec, uint32_t key, uint32_t chunk, uint32_t len)
{
    if (key - CMR_RING_NODE_KEY0 >= CMR_RING_NODE_KEYS || len > CMR_RING_NODE_DATA_MAX ||
        chunk * 16 > (len ? len - 1 : 0) || ring->open_depth == 0 || ring->open_depth > CMR_RING_OPEN_CALLS)
        return; /* garbage, or of a call whose enter was not recorded: dropped */
    if (chunk == 0) {
        if (!ring->node_raw && !(ring->node_raw = malloc(CMR_RING_NODE_DATA_MAX + 1)))
            return;
        ring->node_key = key;
        ring->node_len = len;
        ring->node_next = 0;
        ring->node_call = ring->open_seq[ring->open_depth];
    }
    if (!ring->node_raw || chunk != ring->node_next || key != ring->node_key || len != ring->node_len)
        return; /* a chunk of a value whose beginning was not seen */
    size_t n = len - chunk * 16 < 16 ? len - chunk * 16 : 16;
    memcpy(ring->node_raw + chunk * 16, rec, n);
    ring->node_next++;
    if (ring->node_next == (len ? (len + 15) / 16 : 1))
        node_attr_done(p, ring);
}

static const char *const data_keys[CMR_RING_DATA_KEYS] = {NULL, "http.method", "http.path", "http.status"};

/* A DATA record: one chunk of a value of the open segment's transaction data. */
static void data_chunk(publisher_t *p, cmr_ring_t *ring, const uint8_t *rec, uint32_t aux)
{
    uint32_t key = aux >> 24, chunk = (aux >> 16) & 0xFF, len = aux & 0xFFFF;
    if (key >= CMR_RING_NODE_KEY0) {
        if (ring->segment_open)
            node_chunk(p, ring, rec, key, chunk, len);
        return;
    }
    if (!ring->segment_open || key == 0 || key >= CMR_RING_DATA_KEYS || len > CMR_RING_DATA_MAX ||
        chunk * 16 > (len ? len - 1 : 0))
        return; /* a value of another segment's, or garbage: dropped */
    size_t n = len - chunk * 16 < 16 ? len - chunk * 16 : 16;
    if (chunk == 0) {
        ring->data_seen[key] = 0; /* a new value */
        if (key == CMR_RING_DATA_HTTP_METHOD)
            ring->method_known = false; /* until it is whole */
    }
    memcpy(ring->data[key] + chunk * 16, rec, n);
    ring->data_seen[key] |= (uint16_t)(1u << chunk);
    uint32_t chunks = len ? (len + 15) / 16 : 1;
    if (chunk + 1 == chunks) { /* the last chunk: whole only if none was lost (a full ring) */
        if (ring->data_seen[key] == (uint16_t)((1u << chunks) - 1)) {
            ring->data[key][len] = '\0';
            ring->data_len[key] = (uint16_t)len;
            ring->data_unsent[key] = true;
            if (key == CMR_RING_DATA_HTTP_METHOD)
                ring->method_known = len > 0 && ring->segment_open;
        }
        ring->data_seen[key] = 0;
    }
}

/* What the open segment did not record (its LOSS record), on the batch being sent. */
static void loss_take(cmr_ring_t *ring, cmr_event_batch_t *b)
{
    b->calls_not_recorded = ring->loss_calls;
    b->truncated_by = ring->loss_why;
    ring->loss_calls = 0;
    ring->loss_why = 0;
}

/* Sends the message of partition `part` (RD_KAFKA_PARTITION_UA: a single segment batch's,
 * keyed for librdkafka's partitioner) and empties its writer. */
static void msg_send(publisher_t *p, cmr_segs_writer_t *w, int32_t part)
{
    cmr_agent_t *a = p->a;
    if (!w->segments)
        return;
    cmr_event_msg_t m;
    cmr_segs_writer_msg(w, &m);
    char err[256];
    /* the delivery report counts the events of a message the cluster never took as
     * dropped: an odd opaque value tells it apart from the class entries (pointers) */
    void *tag = (void *)(((uintptr_t)w->events << 1) | 1);
    int rc = !a->producer ? CMR_SEND_ERROR
             : part >= 0  ? cmr_producer_send_to(a->producer, CMR_MSG_EVENT_BATCH, &m, part, tag, err, sizeof err)
                          : cmr_producer_send(a->producer, CMR_MSG_EVENT_BATCH, &m, NULL, tag, err, sizeof err);
    if (rc == CMR_SEND_OK) {
        p->n.messages++;
        p->n.batches += w->segments;
        p->n.events_sent += w->events;
        p->n.event_bytes += m.segments.len;
    } else {
        p->n.dropped += w->events;
    }
    cmr_segs_writer_begin(w, a->agent_id);
}

/* The partition of the trace's segments: the one the producers' partitioner
 * (kafka.partitioner, as every producer and cmr-ingest's fan-out use it) maps its key (the
 * trace id in hex, as cmr_msg_key writes it) to; -1 while the partition count is unknown,
 * or with a partitioner that is not librdkafka's (each segment batch then goes alone,
 * partitioned by the producer). */
static int32_t trace_partition(publisher_t *p, const uint8_t trace_id[16])
{
    if (p->partitions <= 0 || p->partitions > MAX_PARTITIONS)
        return -1;
    return cmr_trace_partitioner_pick(&p->partitioner, trace_id, p->partitions);
}

/* The writer of a partition's message (or of a lone segment batch: part -1), NULL out of
 * memory. */
static cmr_segs_writer_t *writer_of(publisher_t *p, int32_t part)
{
    cmr_segs_writer_t **slot = part < 0 || part >= MAX_PARTITIONS ? &p->lone : &p->wr[part];
    if (!*slot && (*slot = calloc(1, sizeof **slot)))
        cmr_segs_writer_begin(*slot, p->a->agent_id);
    return *slot;
}

/* Adds the ring's batch to its partition's message (sending that first when the batch
 * would take it past its bounds); counts its events as dropped when it cannot. */
static void batch_route(publisher_t *p, const cmr_event_batch_t *b, const uint8_t *records, uint32_t count)
{
    int32_t part = trace_partition(p, b->trace_id);
    cmr_segs_writer_t *w = writer_of(p, part);
    if (!w) {
        p->n.dropped += count;
        return;
    }
    if (w->segments && (w->events + count > MSG_MAX_EVENTS || w->out.len >= MSG_MAX_BYTES))
        msg_send(p, w, part);
    if (cmr_segs_writer_add(w, b, records, count) != 0) { /* out of memory: the message is lost */
        p->n.dropped += w->events + count;
        cmr_segs_writer_begin(w, p->a->agent_id);
        return;
    }
    if (part < 0)
        msg_send(p, w, part);
    else if (w->segments == 1)
        p->wr_since_ms[part] = cmr_mono_ms();
}

/* Sends the partitions' messages whose first segment waited the linger (every one with
 * `all`: at the JVM's exit, or when the partition count changed). */
static void msgs_flush(publisher_t *p, bool all)
{
    int64_t now = cmr_mono_ms(), linger = p->a->settings.events_linger_ms;
    for (int32_t i = 0; i < MAX_PARTITIONS; i++)
        if (p->wr[i] && p->wr[i]->segments && (all || now - p->wr_since_ms[i] >= linger))
            msg_send(p, p->wr[i], i);
}

/* Asks the cluster for cmr.events' partition count now and then (the publisher's thread
 * waits for the answer, never an application thread). A changed count takes effect for
 * the next segment batches; until one is known, each is a message of its own. */
static void partitions_refresh(publisher_t *p)
{
    int64_t now = cmr_mono_ms();
    if (!p->a->producer || (p->partitions_ms && now - p->partitions_ms < PARTITIONS_REFRESH_MS))
        return;
    p->partitions_ms = now;
    int n = cmr_producer_partitions(p->a->producer, cmr_topic_name(CMR_TOPIC_EVENTS), 500);
    if (n > 0 && n != p->partitions) {
        msgs_flush(p, true); /* built for the old count */
        p->partitions = n;
    }
}

static void batch_send(publisher_t *p, cmr_ring_t *ring, bool last)
{
    cmr_agent_t *a = p->a;
    if (ring->batch_count == 0 && !last && ring->node_n == 0)
        return; /* (a batch of call attributes alone may go: their calls went before) */
    cmr_event_batch_t b = {
        .agent_id = a->agent_id,
        .thread_id = ring->thread_id,
        .thread_name = ring->thread_name,
        .segment_id = ring->segment_id,
        .parent = ring->has_parent ? &ring->parent : NULL,
        .batch_seq = ring->batch_seq,
        .first_event_seq = ring->event_seq,
        .last = last,
        .dropped = ring->dropped_pending,
        .event_count = (int32_t)ring->batch_count,
        .diagnosis_id = ring->diagnosis_id,
    };
    memcpy(b.trace_id, ring->trace_id, 16);
    loss_take(ring, &b);
    cmr_kv_t attrs[CMR_RING_DATA_KEYS];
    b.attributes.items = attrs;
    for (int k = 1; k < CMR_RING_DATA_KEYS; k++)
        if (ring->data_unsent[k]) {
            attrs[b.attributes.count++] = (cmr_kv_t){(char *)data_keys[k], ring->data[k]};
            ring->data_unsent[k] = false;
        }
    cmr_node_attr_t nattrs[CMR_RING_NODE_PENDING];
    const char *at = (const char *)ring->node_out.data;
    for (uint32_t i = 0; i < ring->node_n; i++) {
        const char *k = at, *v = k + strlen(k) + 1;
        nattrs[i] = (cmr_node_attr_t){ring->node_seq[i], (char *)k, (char *)v};
        at = v + strlen(v) + 1;
    }
    b.node_attrs = (cmr_node_attrs_t){nattrs, ring->node_n};
    /* the drain loop appends kinds 1-4 only, the ones the encoding has */
    batch_route(p, &b, ring->batch, ring->batch_count);
    ring->node_n = 0;
    cmr_buf_reset(&ring->node_out);
    ring->batch_seq++;
    ring->event_seq += ring->batch_count;
    ring->batch_count = 0;
    ring->dropped_pending = 0;
    if (last)
        ring->segment_open = false;
}

static void batch_append(publisher_t *p, cmr_ring_t *ring, const uint8_t *rec, uint32_t kind, uint32_t depth)
{
    if (!ring->segment_open)
        segment_open(p, ring);
    /* the open calls, for the call attributes (given to the innermost) */
    if (kind == CMR_EVENT_ENTER) {
        ring->open_depth = depth;
        if (depth <= CMR_RING_OPEN_CALLS)
            ring->open_seq[depth] = ring->event_seq + ring->batch_count;
    } else if (kind != CMR_EVENT_FORK) {
        ring->open_depth = depth - 1;
    }
    /* the record as the probe wrote it, its time made wall-clock time */
    uint8_t *out = ring->batch + (size_t)ring->batch_count++ * CMR_EVENT_RECORD_SIZE;
    memcpy(out, rec, CMR_EVENT_RECORD_SIZE);
    cmr_put_le64(out + 8, cmr_le64(rec + 8) + (uint64_t)p->clock_offset_ns);
    if (ring->batch_count == ring->batch_cap)
        batch_send(p, ring, false);
    if ((kind == CMR_EVENT_EXIT || kind == CMR_EVENT_EXCEPTION_EXIT) && depth == 1)
        batch_send(p, ring, true);
}

/* --- timer aggregation --------------------------------------------------------------------- */

/* Adds one timer sample of method_id to the interval's aggregate. Runs on the publisher
 * thread (never an application thread), once per sample: one map lookup and one histogram
 * record (a binary search over the method's few dozen bins). A sample the aggregate cannot
 * keep (more methods than its bound, or no memory) counts as dropped. */
static void metric_add(publisher_t *p, uint64_t method_id, int64_t ns, bool thrown)
{
    if (cmr_metric_agg_add(&p->agg, method_id, ns, thrown) != 0)
        p->n.dropped++;
}

/* The calls of the last pass's threads that run longer than the stall threshold, at
 * most MAX_STALLED (the rest counted in a rate-limited log line), into p->stalled. */
static size_t stalled_scan(publisher_t *p)
{
    int64_t threshold_ms = cmr_probe_rings_stall_threshold(p->rings);
    if (threshold_ms <= 0)
        return 0;
    int64_t now = cmr_mono_ns();
    size_t n = 0, more = 0;
    for (size_t i = 0; i < p->npass; i++) {
        cmr_ring_t *ring = p->pass[i];
        size_t k = n < MAX_STALLED ? n : MAX_STALLED; /* MAX_STALLED: the scratch slot */
        cmr_stalled_call_t scratch, *sc = k < MAX_STALLED ? &p->stalled[k] : &scratch;
        if (ring->final_drained ||
            !cmr_cs_stalled(&ring->cs, now, threshold_ms * 1000000, p->clock_offset_ns, sc, p->stall_stacks[k]))
            continue;
        if (k == MAX_STALLED) {
            more++;
            continue;
        }
        sc->thread_id = ring->thread_id;
        sc->thread_name = ring->thread_name;
        n++;
    }
    unsigned long long suppressed = 0;
    if (more && cmr_log_allow(&p->stall_log, 1, &suppressed))
        cmr_log(CMR_LOG_WARN, "agent.stalled_overflow",
                "reported=%zu not_reported=%zu threshold_ms=%lld suppressed=%llu", n, more, (long long)threshold_ms,
                suppressed);
    return n;
}

/* The publisher thread's CPU time since its previous MetricBatch: the agent's own work for
 * what the probes recorded (MetricBatch.agent_cpu_ns). 0 the first time, and when called
 * on another thread (!on_publisher: the last batch, sent by the thread that stops the
 * agent, counts none; that thread's clock would say that thread's time). */
static int64_t publisher_cpu_since(publisher_t *p, bool on_publisher)
{
    struct timespec ts;
    if (!on_publisher || clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return 0;
    int64_t now = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec, before = p->thread_cpu_ns;
    p->thread_cpu_ns = now;
    return before > 0 && now > before ? now - before : 0;
}

static void metrics_send(publisher_t *p, int64_t now_ms, bool on_publisher)
{
    cmr_agent_t *a = p->a;
    cmr_metric_agg_t *g = &p->agg;
    if (g->overflow) /* once per interval at most */
        cmr_log(CMR_LOG_WARN, "agent.metrics_overflow", "samples=%" PRIu64 " methods=%zu max_methods=%zu", g->overflow,
                g->n, g->max_methods);
    cmr_metric_batch_t mb;
    if (a->producer && cmr_metric_agg_batch(g, a->agent_id, p->interval_start_ms,
                                            (int32_t)(now_ms - p->interval_start_ms), &mb) == 0) {
        cmr_cs_batch(&p->cs, &mb); /* on failure: no transactions this time */
        mb.samples_dropped += (int64_t)p->cs.not_kept;
        mb.stalled.items = p->stalled;
        mb.stalled.count = stalled_scan(p);
        mb.environment_id = a->environment_id;
        mb.calls_dropped = p->interval_calls_dropped;
        mb.probe_ps = a->probe_ps; /* every batch: a budget window may start at any of them */
        mb.agent_cpu_ns = publisher_cpu_since(p, on_publisher);
        char err[256];
        if ((mb.metrics.count || mb.transactions.count || mb.stalled.count) &&
            cmr_producer_send(a->producer, CMR_MSG_METRIC_BATCH, &mb, NULL, NULL, err, sizeof err) == CMR_SEND_OK)
            p->n.metric_batches++;
    }
    cmr_metric_agg_reset(g);
    cmr_cs_interval_reset(&p->cs);
    p->interval_start_ms = now_ms;
    p->interval_calls_dropped = 0;
}

/* --- draining -------------------------------------------------------------------------------- */

/* A LOSS record: the open segment did not record `calls` calls (the probes write it right
 * before the root exit, so the segment's last batch carries it). */
static void loss_record(publisher_t *p, cmr_ring_t *ring, uint64_t calls, uint32_t why)
{
    if (!ring->segment_open)
        return;
    ring->loss_calls += (int64_t)(calls > INT64_MAX / 2 ? INT64_MAX / 2 : calls);
    ring->loss_why |= (int32_t)(why & (CMR_TRUNCATED_BY_LIMIT | CMR_TRUNCATED_BY_RING));
    p->n.dropped += 2 * calls; /* the enter and the exit of each */
    p->n.calls_not_recorded += calls;
    p->interval_calls_dropped += (int64_t)(calls > INT64_MAX / 2 ? INT64_MAX / 2 : calls);
}

/* Segments the thread skipped whole since the last pass (header 40, 48). */
static void traces_dropped(publisher_t *p, cmr_ring_t *ring)
{
    uint64_t t = __atomic_load_n((uint64_t *)(ring->mem + CMR_RING_TRACES_DROPPED), __ATOMIC_RELAXED);
    uint64_t c = __atomic_load_n((uint64_t *)(ring->mem + CMR_RING_DROPPED_CALLS), __ATOMIC_RELAXED);
    if (t != ring->traces_dropped_seen) {
        unsigned long long suppressed = 0;
        if (cmr_log_allow(&p->loss_log, 1, &suppressed))
            cmr_log(CMR_LOG_WARN, "agent.traces_dropped",
                    "thread=\"%s\" traces=%" PRIu64 " ring_records=%" PRIu64
                    " reason=ring_full hint=\"the publisher drains slower than the thread records: a larger "
                    "ring_records or fewer recorded methods\" suppressed=%llu",
                    ring->thread_name, t - ring->traces_dropped_seen, ring->cap, suppressed);
        p->n.traces_dropped += t - ring->traces_dropped_seen;
        ring->traces_dropped_seen = t;
    }
    if (c != ring->dropped_calls_seen) {
        p->n.dropped += 2 * (c - ring->dropped_calls_seen);
        p->interval_calls_dropped += (int64_t)(c - ring->dropped_calls_seen);
        ring->dropped_calls_seen = c;
    }
}

static void drain_ring(publisher_t *p, cmr_ring_t *ring)
{
    /* Seen before reading anything: once the thread ended, this pass reads its last
     * records and its last drop count, and the ring may go. */
    bool closed = ring->closed;
    uint64_t w = __atomic_load_n((uint64_t *)(ring->mem + CMR_RING_WRITE), __ATOMIC_ACQUIRE);
    uint64_t r = ring->read, mask = ring->cap - 1;
    assert(ring->cap && (ring->cap & mask) == 0); /* pow2_at_least() made it */
    for (; r < w; r++) {
        const uint8_t *rec = ring->mem + CMR_RING_HEADER + (r & mask) * CMR_EVENT_RECORD_SIZE;
        uint32_t kind = cmr_le32(rec + 16), aux = cmr_le32(rec + 20);
        switch (kind) {
        case CMR_EVENT_ENTER:
            if (aux <= 1 && ring->segment_open) /* the exit of the last root was lost */
                batch_send(p, ring, true);
            if (aux > 1 && !ring->segment_open) { /* its segment's root was never seen: no */
                p->n.dropped++;                   /* segment without its root call */
                break;
            }
            batch_append(p, ring, rec, kind, aux);
            /* after the append: a root enter opened its segment (trace, parent). Its root is a
             * transaction when the trace starts here or came from outside this JVM (another
             * JVM, another tracer): an entry point of this JVM. A hand-off from one of this
             * JVM's threads continues its transaction. */
            cmr_cs_enter(&p->cs, &ring->cs, cmr_le64(rec), (int64_t)cmr_le64(rec + 8), aux, ring->trace_id,
                         !ring->has_parent || ring->parent.agent_id != p->a->agent_id);
            break;
        case CMR_EVENT_EXIT:
        case CMR_EVENT_EXCEPTION_EXIT:
            if (aux == 0) /* an exit without its entry (the method was redefined meanwhile) */
                break;
            if (!ring->segment_open) { /* of a segment whose root was never seen */
                p->n.dropped++;
                break;
            }
            batch_append(p, ring, rec, kind, aux);
            cmr_cs_exit(&p->cs, &ring->cs, cmr_le64(rec), (int64_t)cmr_le64(rec + 8), aux,
                        kind == CMR_EVENT_EXCEPTION_EXIT);
            break;
        case CMR_EVENT_FORK:
            if (ring->segment_open)
                batch_append(p, ring, rec, kind, UINT32_MAX);
            break;
        case CMR_RING_SEG_BEGIN: /* the probes name the next segment */
            ring->next_valid = true;
            ring->next_segment = (int64_t)cmr_le64(rec);
            cmr_put_be64(ring->next_trace, cmr_le64(rec + 8));
            ring->next_has_parent = aux & 1;
            ring->next_parent.agent_id = p->a->agent_id; /* a local parent unless record 7 says */
            break;
        case CMR_RING_SEG_TRACE:
            cmr_put_be64(ring->next_trace + 8, cmr_le64(rec));
            ring->next_parent.segment_id = (int64_t)cmr_le64(rec + 8);
            ring->next_parent.event_seq = (int32_t)aux; /* -1: the fork event was lost */
            break;
        case CMR_RING_SEG_PARENT_AGENT: ring->next_parent.agent_id = (int64_t)cmr_le64(rec); break;
        case CMR_RING_DIAG: /* the anchor's enter came right before: its segment is open */
            if (ring->segment_open && !ring->diagnosis_id)
                ring->diagnosis_id = (int64_t)cmr_le64(rec);
            ring->diag_start_ns = (int64_t)cmr_le64(rec + 8);
            cmr_agent_diags_hit(p->a->diags, (int64_t)cmr_le64(rec));
            break;
        case CMR_RING_DIAG_END:
            /* without its DIAG (lost to a full ring) the context's time is unknown: its calls
             * are not counted either, or they would inflate the overhead estimate */
            if (ring->diag_start_ns)
                cmr_agent_diags_done(p->a->diags, (int64_t)cmr_le64(rec), aux,
                                     (int64_t)cmr_le64(rec + 8) - ring->diag_start_ns);
            ring->diag_start_ns = 0;
            break;
        case CMR_RING_DATA: data_chunk(p, ring, rec, aux); break;
        case CMR_RING_LOSS: loss_record(p, ring, cmr_le64(rec), aux); break;
        case CMR_RING_TIMER:
        case CMR_RING_TIMER_THROW:
            metric_add(p, cmr_le64(rec), (int64_t)cmr_le64(rec + 8), kind == CMR_RING_TIMER_THROW);
            break;
        default: break; /* unknown kind: skip */
        }
        p->n.recorded++;
    }
    ring->read = r;
    __atomic_store_n((uint64_t *)(ring->mem + CMR_RING_READ), r, __ATOMIC_RELEASE);
    traces_dropped(p, ring);
    uint64_t dropped = __atomic_load_n((uint64_t *)(ring->mem + CMR_RING_DROPPED), __ATOMIC_RELAXED);
    if (dropped != ring->dropped_seen) {
        uint64_t d = dropped - ring->dropped_seen;
        ring->dropped_seen = dropped;
        p->n.dropped += d;
        p->interval_calls_dropped += (int64_t)(d / 2); /* records: an enter and an exit per call */
        ring->dropped_pending += (int32_t)(d > INT32_MAX ? INT32_MAX : d);
        /* the thread lost records: its shadow stack may hold calls whose exits were lost,
         * which would read as stalled forever; it is rebuilt from the next enters */
        cmr_cs_thread_end(&p->cs, &ring->cs);
    }
    /* continuous sending: what the open segment has so far goes out now */
    if (ring->batch_count)
        batch_send(p, ring, false);
    if (closed && ring->segment_open) /* the thread ended inside a call */
        batch_send(p, ring, true);
    if (closed) {
        cmr_cs_thread_end(&p->cs, &ring->cs); /* calls it ended inside no longer run */
        ring->final_drained = true;
    }
}

/* Adds this pass's counters to the rings' totals (what AgentStatus reports) and zeroes them. */
static void counts_flush(publisher_t *p)
{
    cmr_probe_rings_count(p->rings, &p->n);
    memset(&p->n, 0, sizeof p->n);
}

/* One drain of every ring; `final`: the last, at the JVM's exit (every message goes). */
static void pass_once(publisher_t *p, bool final)
{
    cmr_ring_t **dead = p->dead;
    size_t ndead;
    refresh_clock(p);
    size_t n = cmr_probe_rings_snapshot(p->rings, p->pass, MAX_RINGS_PER_PASS, dead, &ndead, MAX_DEAD_PER_PASS);
    p->npass = n;
    partitions_refresh(p);
    for (size_t i = 0; i < n; i++)
        drain_ring(p, p->pass[i]);
    msgs_flush(p, final);
    for (size_t i = 0; i < ndead; i++)
        cmr_ring_free(dead[i]);
    counts_flush(p);
}

static void *publisher_main(void *arg)
{
    publisher_t *p = arg;
    cmr_agent_t *a = p->a;
    /* named for whoever looks at the JVM's threads (top -H, perf, jstack's native ids) */
    pthread_setname_np(pthread_self(), "cmr-publisher");
    while (!a->stopping) {
        int64_t send_ms, metric_ms;
        cmr_probe_rings_intervals(p->rings, &send_ms, &metric_ms);
        cmr_probe_rings_wait(p->rings, (int)send_ms);
        if (a->mode != CMR_MODE_FULL && a->mode != CMR_MODE_STOPPED) {
            p->interval_start_ms = cmr_wall_ms(); /* the first interval starts once configured */
            continue; /* no agent id yet: events wait in the rings (or are dropped when full) */
        }
        pass_once(p, false);
        int64_t now = cmr_wall_ms();
        if (now - p->interval_start_ms >= metric_ms) {
            metrics_send(p, now, true);
            counts_flush(p);
        }
    }
    return NULL;
}

int cmr_probe_publisher_start(cmr_agent_t *a)
{
    if (a->publisher_started)
        return 0;
    memset(&pub, 0, sizeof pub);
    pub.a = a;
    pub.rings = a->rings;
    pub.interval_start_ms = cmr_wall_ms();
    cmr_trace_partitioner_init(&pub.partitioner, cmr_conf_get(a->conf, "kafka.partitioner", NULL));
    cmr_metric_agg_init(&pub.agg, 0);
    cmr_cs_init(&pub.cs, &pub.agg);
    if (cmr_random_bytes(pub.rng, sizeof pub.rng) != 0)
        pub.rng[0] = (uint64_t)cmr_mono_ns() | 1;
    /* segment ids never repeat, also across restarts of the same agent: a random base
     * per run (62 bits, low 24 bits free for the counter) */
    pub.next_segment = (int64_t)((rng_next(&pub) >> 2) & ~(uint64_t)0xFFFFFF);
    /* the probes count their segment ids from the same random base, far from ours */
    cmr_probe_rings_set_segment_base(a->rings, (uint64_t)pub.next_segment + (UINT64_C(1) << 40));
    refresh_clock(&pub);
    if (pthread_create(&a->publisher_thread, NULL, publisher_main, &pub) != 0)
        return -1;
    a->publisher_started = true;
    return 0;
}

void cmr_probe_publisher_stop(cmr_agent_t *a)
{
    if (!a->publisher_started)
        return;
    a->stopping = true;
    cmr_probe_rings_wake(a->rings);
    pthread_join(a->publisher_thread, NULL);
    a->publisher_started = false;
    if (a->mode == CMR_MODE_FULL) {
        pass_once(&pub, true); /* what the threads recorded until now, and every message held */
        metrics_send(&pub, cmr_wall_ms(), false);
        counts_flush(&pub);
    } else { /* messages held from before the agent stopped (sent, or counted as dropped) */
        msgs_flush(&pub, true);
        counts_flush(&pub);
    }
    cmr_cs_free(&pub.cs);
    cmr_metric_agg_free(&pub.agg);
    for (size_t i = 0; i <= MAX_PARTITIONS; i++) {
        cmr_segs_writer_t **w = i < MAX_PARTITIONS ? &pub.wr[i] : &pub.lone;
        if (*w)
            cmr_segs_writer_free(*w);
        free(*w);
        *w = NULL;
    }
}

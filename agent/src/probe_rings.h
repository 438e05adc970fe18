/*
 * probe_rings.h - per-thread event rings shared by the Java probes and the agent.
 *
 * A ring is native memory the agent allocates when a thread first runs a probe, handed to
 * Java as a direct ByteBuffer. Layout (little endian):
 *
 *   0   u64 write index  records written; the thread's probes advance it (release store)
 *   8   u64 dropped      records the thread could not write because the ring was full
 *   16  u64 agent id     written by the agent once the CMR has given it (0 before)
 *   24  u64 segment base first segment id of this agent run (random, see the publisher)
 *   32  u64 max events   events one segment may hold (the strategy's max_segment_events;
 *                        written by the agent, read by the probes when a segment begins)
 *   40  u64 traces dropped  segments the thread skipped whole: their root call found no
 *                        room (written by the thread)
 *   48  u64 dropped calls   the calls of those segments (written by the thread when each
 *                        ends)
 *   64  u64 read index   records consumed; the publisher advances it (release store). On
 *                        its own cache line: the thread and the publisher never write the
 *                        same line.
 *   128 records          capacity (a power of two) x 24 bytes, as in cmr/event.h, except
 *                        that the timestamp is the JVM's System.nanoTime() (CLOCK_MONOTONIC)
 *                        and, for ring-internal kinds, other meanings (below)
 *
 * One writer (the thread), one reader (the publisher): no locks, no JNI per event. It
 * never blocks the thread. Loss is whole (Probe.java): an enter is written only with room
 * for the exits of every open recorded call, so a recorded segment is always well formed;
 * a segment whose root does not fit is skipped whole (header 40, 48), a deeper call that
 * does not fit (or passes the size limit) is not recorded with everything below it, and the
 * segment's root exit is preceded by a LOSS record.
 *
 * Record kinds in a ring: 1 enter, 2 exit, 3 exceptional exit (aux = call depth of the
 * invocation, 1 for the thread's root call), 4 fork (a hand-off), and ring-internal ones:
 *   5  segment begin   id = segment id, timestamp = trace id high, aux = 1 has a parent,
 *                      | 2 the parent is remote
 *   6  segment trace   id = trace id low, timestamp = parent segment, aux = parent event
 *   7  parent agent    id = the remote parent's agent id (0: another tracer)
 *   8  diagnosis       the anchor of a running diagnosis opened its context on this thread:
 *                      id = diagnosis id (the segment is tagged with it, one hit)
 *   9  diagnosis end   that context closed: id = diagnosis id, aux = conditional calls
 *                      recorded in it
 *   10 data            transaction data of the open segment (Probe.data): 16 bytes of a
 *                      value's UTF-8 in id and timestamp, aux = key << 24 | chunk << 16 |
 *                      the value's length (at most CMR_RING_DATA_MAX); keys: 1 http.method,
 *                      2 http.path, 3 http.status. Keys from 16 on are attributes of the
 *                      innermost open call (values up to CMR_RING_NODE_DATA_MAX bytes):
 *                      16 db.statement, a JDBC call's raw SQL (the publisher normalises it
 *                      and masks its literals, sql_text.h); 17 http.request.method, 18
 *                      url.full, 19 http.response.status_code (an outgoing HTTP call),
 *                      20 db.response.affected_rows (a JDBC update's count), 21 a
 *                      request header an entry call keeps, "name\nvalue" (the publisher
 *                      names it http.request.header.<name>), 22 http.route (the
 *                      servlet mapping or HttpServer context an entry call matched),
 *                      23 db.system (the JDBC URL's subprotocol of a statement's driver)
 *   11 loss            the open segment did not record calls (written right before its
 *                      root exit): id = calls not recorded (each with everything below
 *                      it), aux = why (1 the size limit, 2 the ring was full)
 *   16 / 17 timer sample (normal / exceptional), timestamp = duration in ns
 * Records 5-7 come right before the root enter of the segment they describe.
 */
#ifndef CMR_PROBE_RINGS_H
#define CMR_PROBE_RINGS_H

#include <jni.h>
#include <jvmti.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "call_stacks.h"
#include "cmr/buf.h"
#include "cmr/msg.h"

#define CMR_RING_HEADER 128
#define CMR_RING_WRITE 0
#define CMR_RING_DROPPED 8
#define CMR_RING_READ 64
#define CMR_RING_AGENT_ID 16
#define CMR_RING_SEGMENT_BASE 24
#define CMR_RING_MAX_EVENTS 32
#define CMR_RING_TRACES_DROPPED 40
#define CMR_RING_DROPPED_CALLS 48
#define CMR_RING_LOSS 11
#define CMR_RING_SEG_BEGIN 5
#define CMR_RING_SEG_TRACE 6
#define CMR_RING_SEG_PARENT_AGENT 7
#define CMR_RING_DIAG 8
#define CMR_RING_DIAG_END 9
#define CMR_RING_DATA 10
#define CMR_RING_DATA_MAX 256
#define CMR_RING_DATA_KEYS 4 /* keys 1..3 */
#define CMR_RING_NODE_KEY0 16
#define CMR_RING_NODE_DB_STATEMENT 16
#define CMR_RING_NODE_HTTP_HEADER 21 /* "name\nvalue": attribute http.request.header.<name> */
#define CMR_RING_NODE_HTTP_ROUTE 22  /* the route an entry call matched: names its transaction */
#define CMR_RING_DATA_HTTP_METHOD 1
#define CMR_RING_NODE_KEYS 8        /* keys 16..23 */
#define CMR_RING_NODE_DATA_MAX 2048 /* as Probe.NODE_DATA_MAX */
#define CMR_RING_NODE_PENDING 64    /* call attributes a batch carries: more send it early */
#define CMR_RING_OPEN_CALLS 256     /* call depths a call attribute can be given to */
#define CMR_RING_TIMER 16
#define CMR_RING_TIMER_THROW 17

struct cmr_agent;

typedef struct cmr_ring {
    uint8_t *mem;
    uint64_t cap; /* records, power of two */
    int64_t thread_id;
    char thread_name[96];
    atomic_bool closed; /* the thread ended */
    bool is_virtual;    /* a virtual thread's (smaller; closed by VirtualThreadEnd) */
    bool final_drained; /* drained completely after `closed` was seen: may be freed */
    /* publisher state (publisher thread only) */
    uint64_t read;
    uint64_t dropped_seen;
    bool segment_open;
    int64_t segment_id;
    uint8_t trace_id[16];
    int32_t batch_seq;
    int64_t event_seq;
    int32_t dropped_pending;
    int64_t loss_calls;                               /* the open segment's LOSS: calls not recorded (not sent yet) */
    int32_t loss_why;                                 /* CMR_TRUNCATED_BY_* */
    uint64_t traces_dropped_seen, dropped_calls_seen; /* header 40, 48 as last read */
    bool has_parent;
    cmr_parent_link_t parent;
    /* identity announced by records 5-7 for the next segment */
    bool next_valid, next_has_parent;
    int64_t next_segment;
    uint8_t next_trace[16];
    cmr_parent_link_t next_parent;
    int64_t diagnosis_id; /* the open segment ran in this diagnosis' context (0: none) */
    /* the open segment's transaction data, per key: value, length, sent yet */
    char data[CMR_RING_DATA_KEYS][CMR_RING_DATA_MAX + 1];
    uint16_t data_len[CMR_RING_DATA_KEYS];
    uint16_t data_seen[CMR_RING_DATA_KEYS]; /* chunks of the value being put together */
    bool data_unsent[CMR_RING_DATA_KEYS];
    bool method_known;     /* the open segment's http.method arrived whole (data[1]) */
    int64_t diag_start_ns; /* when that context opened (probe clock) */
    /* call attributes: the open segment's open calls (open_seq[d]: the event seq of the
     * enter of the open call at depth d, 1 .. open_depth), the value being put together
     * (node_raw: CMR_RING_NODE_DATA_MAX + 1 bytes, made on first use, owned), and the
     * complete ones not sent yet (node_out: per attribute its key's NUL-terminated name and
     * value, owned; node_seq: their calls) */
    int64_t open_seq[CMR_RING_OPEN_CALLS + 1];
    uint32_t open_depth;
    char *node_raw;
    uint32_t node_key, node_len, node_next;
    int64_t node_call;
    cmr_buf_t node_out;
    int64_t node_seq[CMR_RING_NODE_PENDING];
    uint32_t node_n;
    uint8_t *batch; /* events of the open segment not yet sent */
    uint32_t batch_count, batch_cap;
    cmr_cs_thread_t cs; /* the thread's open invocations (call_stacks.h) */
} cmr_ring_t;

typedef struct cmr_probe_stats {
    uint64_t recorded;    /* events drained from rings */
    uint64_t dropped;     /* events lost: ring full, or the producer refused the batch */
    uint64_t messages;    /* EventBatch messages queued */
    uint64_t batches;     /* segment batches in them */
    uint64_t events_sent; /* events in them */
    uint64_t event_bytes; /* the messages' `segments` bytes: segment headers and encoded events */
    uint64_t metric_batches;
    uint64_t rings_live, rings_refused;
    uint64_t traces_dropped;     /* segments skipped whole (their calls are in `dropped`) */
    uint64_t calls_not_recorded; /* calls left out of truncated segments */
} cmr_probe_stats_t;

typedef struct cmr_probe_rings cmr_probe_rings_t;

cmr_probe_rings_t *cmr_probe_rings_new(struct cmr_agent *a);
/* Registers the natives of cmr/agent/Probe (called when that class is prepared). */
void cmr_probe_rings_bind_natives(cmr_probe_rings_t *r, JNIEnv *env, jclass probe_class);
/* What the probes of one recorded call cost this JVM, in picoseconds (Probe.calibrate: the
 * JIT-compiled probes of an empty method timed against the same loop without them, the
 * median of CMR_PROBE_CALIBRATION_ROUNDS rounds after CMR_PROBE_CALIBRATION_WARMUP), or 0
 * when it could not be measured (logged). Runs Java code on the calling thread, which must
 * be attached to the live JVM: tens to hundreds of milliseconds of its CPU each
 * time. Logs agent.probe_cost. */
#define CMR_PROBE_CALIBRATION_WARMUP 300
#define CMR_PROBE_CALIBRATION_ROUNDS 101
int64_t cmr_probe_measure_cost(JNIEnv *env);
/* JVMTI ThreadEnd (thread NULL: the ending thread) or VirtualThreadEnd (the virtual
 * thread): its ring is drained one last time and freed. */
void cmr_probe_rings_thread_end(cmr_probe_rings_t *r, jvmtiEnv *jvmti, jthread thread);
/* Whether the JVM reports virtual threads' ends (JDK 21+ with the capability): only then do
 * virtual threads get rings, since nothing else would free them. */
void cmr_probe_rings_virtual_ends(cmr_probe_rings_t *r, bool reported);
/* The agent id the CMR gave, for every ring (probes put it in outgoing HTTP headers). */
void cmr_probe_rings_set_agent(cmr_probe_rings_t *r, int64_t agent_id);
/* The environment's trace-context policy (cmr_trace_context_policy_t) and MAC key, which
 * the probe fetches (traceContext0) for the cmr-parent header. */
void cmr_probe_rings_set_trace_context(cmr_probe_rings_t *r, int policy, const uint8_t *key, size_t key_len);
/* The request headers entry traces keep (the configuration's names): the valid ones, at
 * most CMR_MAX_REQUEST_HEADERS, which the probe fetches (requestHeaders0); how many. */
size_t cmr_probe_rings_set_request_headers(cmr_probe_rings_t *r, char *const *names, size_t n);
/* The first segment id of this run (random; the probes count up from it). */
void cmr_probe_rings_set_segment_base(cmr_probe_rings_t *r, uint64_t base);
/* Strategy from the CMR: ring size for new threads, send and metric intervals, batch size,
 * stall threshold. */
void cmr_probe_rings_configure(cmr_probe_rings_t *r, const cmr_strategy_t *s);
void cmr_probe_rings_stats(cmr_probe_rings_t *r, cmr_probe_stats_t *out);

/* The publisher thread (probe_publisher.c). */
int cmr_probe_publisher_start(struct cmr_agent *a);
/* Drains every ring one last time (bounded by agent.shutdown.flush.ms) and stops. */
void cmr_probe_publisher_stop(struct cmr_agent *a);

/* --- shared between probe_rings.c and probe_publisher.c ------------------------------------ */
/* Copies the live rings into out (up to max); closed and fully drained rings are removed
 * and handed back through *dead (the caller frees them with cmr_ring_free). */
size_t cmr_probe_rings_snapshot(cmr_probe_rings_t *r, cmr_ring_t **out, size_t max, cmr_ring_t **dead, size_t *ndead,
                                size_t max_dead);
void cmr_ring_free(cmr_ring_t *ring);
/* Adds d's counters (all but rings_live / rings_refused, which the rings keep) to the totals
 * cmr_probe_rings_stats reports. */
void cmr_probe_rings_count(cmr_probe_rings_t *r, const cmr_probe_stats_t *d);
/* Waits until woken (a ring half full, or stop) or timeout_ms. */
void cmr_probe_rings_wait(cmr_probe_rings_t *r, int timeout_ms);
void cmr_probe_rings_wake(cmr_probe_rings_t *r);
/* The publisher's intervals as the strategy sets them now. */
void cmr_probe_rings_intervals(cmr_probe_rings_t *r, int64_t *send_ms, int64_t *metric_ms);
/* Calls running longer than this are reported as stalled (0: never): the strategy's
 * stall_threshold_ms, or agent.stall.threshold.ms when the CMR sends none. */
int64_t cmr_probe_rings_stall_threshold(cmr_probe_rings_t *r);

#endif

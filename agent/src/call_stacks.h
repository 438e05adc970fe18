/*
 * call_stacks.h - per-method metrics, transactions, concurrency and stalled calls from
 * the invocation-sequence records (enter / exit with the call depth) the publisher drains
 * from the rings.
 *
 * How it fits: the publisher thread (probe_publisher.c) keeps one cmr_cs_thread_t per
 * ring (a shadow stack of the thread's open frames) and one cmr_call_stacks_t for the
 * agent. For each enter and exit record it calls cmr_cs_enter / cmr_cs_exit: a matching
 * exit records the call's duration into the per-method aggregate (metric_agg.h, the same
 * one the timer samples feed), with its self time (the duration less the durations of the
 * callees completed inside it), and, for the root call of a segment that starts a trace,
 * into the per-transaction aggregate. Every open frame counts in its method's in-flight
 * counter, whose maximum over the interval is MethodMetric.max_in_flight. At the end of
 * a metric interval the publisher asks each thread for a stalled call (cmr_cs_stalled),
 * fills the batch (cmr_cs_batch) and starts the next interval (cmr_cs_interval_reset).
 *
 * Lost records (a full ring drops them) are survived through the depth: an enter at
 * depth d discards the frames at depth >= d, an exit without its frame is ignored, an
 * exit at depth 0 (the method was redefined while the call ran) is ignored. A thread that
 * ends inside calls has its frames discarded (cmr_cs_thread_end).
 *
 * Memory is bounded: at most CMR_CS_MAX_DEPTH frames per thread (deeper frames are
 * counted, not kept), at most max_tracked methods with open frames at once for the
 * in-flight counters (frames of further methods are not counted in flight), and the
 * aggregates' own bounds (metric_agg.h).
 *
 * Transactions are keyed by their root method, or, once the publisher names one
 * (cmr_cs_name_transaction: an incoming request's method and route, "GET /shop/checkout"), by
 * the hash of the name: the batch reports it with the name and the root method it was
 * first seen with.
 *
 * Ownership: a cmr_call_stacks_t owns its transaction aggregate, its in-flight maps, the
 * names and the transaction items of the last batch; the per-method aggregate is the caller's. A
 * cmr_cs_thread_t owns its frames (released by cmr_cs_thread_end). Nothing here is
 * thread-safe or calls the JVM: the publisher thread only.
 */
#ifndef CMR_CALL_STACKS_H
#define CMR_CALL_STACKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cmr/map.h"
#include "cmr/msg.h"
#include "metric_agg.h"

#define CMR_CS_MAX_DEPTH 256    /* frames kept per thread */
#define CMR_CS_MAX_TRACKED 8192 /* methods with open frames counted in flight at once */
#define CMR_CS_STACK_BYTES (CMR_CS_MAX_DEPTH * 8)

#define CMR_CS_MAX_NAMES 1024 /* transaction names (HTTP routes) an agent gives, ever */
#define CMR_CS_NAME_MAX 256   /* bytes of a transaction name, "GET /shop/checkout" (as cmr-ingest takes) */

enum {
    CMR_CS_TX = 1,         /* the root frame of a segment that starts a trace */
    CMR_CS_TRACKED = 2,    /* counted in its method's in-flight counter */
    CMR_CS_TX_TRACKED = 4, /* counted in its transaction's in-flight counter */
    CMR_CS_NAMED = 8,      /* its transaction has a name: tx_key is the name's */
};

/* A transaction's name (an HTTP route and method) and the root method it was seen with
 * first. Owned by cs->names, keyed by the name's hash, kept until cmr_cs_free: names are
 * few (an application's routes), and a bound on the names ever given, not at once, keeps
 * requests that make up their own routes (a Servlet 3.1 default servlet's paths) from
 * making a series each in cmr-ingest. */
typedef struct cmr_cs_name {
    uint64_t root_method_id;
    char text[]; /* NUL-terminated */
} cmr_cs_name_t;

/* A method with open frames: its in-flight counter and where its item is in the
 * per-method aggregate this interval. Owned by cs->open; kept until the interval reset
 * after its last frame ended (a tracked frame points at it, so it is not pruned before
 * that frame ends), or cmr_cs_free. */
typedef struct cmr_cs_method {
    uint32_t cur, max; /* frames open now, and the most at once this interval */
    cmr_metric_hint_t item;
} cmr_cs_method_t;

typedef struct cmr_cs_frame {
    uint64_t method_id;
    uint64_t tx_key;    /* CMR_CS_TX: the transaction's key, its root method id or its name's hash */
    cmr_cs_method_t *m; /* its method's record when CMR_CS_TRACKED (not owned) */
    int64_t enter_ns;   /* monotonic, as the ring stamps it */
    uint32_t depth;     /* 1: the thread's root call */
    uint32_t flags;     /* CMR_CS_* */
    int64_t child_ns;   /* time of its completed recorded callees: the rest is its self time */
} cmr_cs_frame_t;

typedef struct cmr_cs_thread {
    cmr_cs_frame_t *frames; /* owned; depths strictly increasing, root first */
    uint32_t n;
    size_t cap;
    uint32_t deep;     /* frames open deeper than CMR_CS_MAX_DEPTH (not kept) */
    uint8_t trace[16]; /* the trace of the segment the frames belong to (all zero: none) */
} cmr_cs_thread_t;

typedef struct cmr_call_stacks {
    cmr_metric_agg_t *methods; /* not owned: per-method aggregate (shared with timer samples) */
    cmr_metric_agg_t tx;       /* owned: per transaction root method */
    cmr_u64map_t open;         /* method id -> cmr_cs_method_t (owned): one lookup per call, at its enter */
    cmr_u64map_t tx_open;      /* transaction key -> in-flight counter of its transactions */
    cmr_u64map_t names;        /* name hash -> cmr_cs_name_t (owned): the named transactions */
    uint64_t unnamed;          /* transactions left by their root method: names full, or no memory */
    size_t max_tracked;
    uint64_t untracked; /* frames not counted in flight (too many methods, or memory) */
    uint64_t not_kept;  /* frames deeper than CMR_CS_MAX_DEPTH, or no memory (interval) */
    uint64_t *prune;    /* owned scratch: keys removed by cmr_cs_interval_reset */
    size_t prune_cap;
    cmr_transaction_metric_t *tx_items; /* owned; the transactions of the last batch */
    size_t tx_cap;
} cmr_call_stacks_t;

/* methods: the per-method aggregate durations go to (the caller keeps it alive). */
void cmr_cs_init(cmr_call_stacks_t *cs, cmr_metric_agg_t *methods);
/* Frees cs and its method records: no thread's frames may be ended (cmr_cs_thread_end)
 * or touched after it, they point at those records; their frames arrays are the rings'. */
void cmr_cs_free(cmr_call_stacks_t *cs);

/* An enter record: method_id entered at ts_ns at call depth `depth` (1: root). trace: the
 * segment's trace id (16 bytes, or NULL); transaction: this root call starts a trace
 * (its segment has no parent). Frames at depth >= depth are discarded first. */
void cmr_cs_enter(cmr_call_stacks_t *cs, cmr_cs_thread_t *t, uint64_t method_id, int64_t ts_ns, uint32_t depth,
                  const uint8_t *trace, bool transaction);
/* An exit record (thrown: an exceptional exit). Returns true when it matched an open
 * frame and its duration was recorded; false when it was ignored. */
bool cmr_cs_exit(cmr_call_stacks_t *cs, cmr_cs_thread_t *t, uint64_t method_id, int64_t ts_ns, uint32_t depth,
                 bool thrown);
/* Names the transaction t's root frame is (an open root frame that starts a trace;
 * nothing otherwise, or when it has a name already): from then on it is counted in flight,
 * timed and reported under the name, with its root method; transactions of several root
 * methods may share a name. name: len bytes of UTF-8 text; longer than CMR_CS_NAME_MAX it
 * names nothing (a cut could end inside a character, which cmr-ingest refuses). When
 * CMR_CS_MAX_NAMES other names were given already (or memory runs out) it stays under its
 * root method, counted in cs->unnamed. */
void cmr_cs_name_transaction(cmr_call_stacks_t *cs, cmr_cs_thread_t *t, const char *name, size_t len);

/* The thread ended (or its ring goes): discards its frames, frees them. */
void cmr_cs_thread_end(cmr_call_stacks_t *cs, cmr_cs_thread_t *t);

/* When t's innermost open frame started more than threshold_ns before now_ns (both
 * monotonic; threshold 0: never), fills *out (trace, method, started_ms as wall time
 * through wall_offset_ns = wall - monotonic, running_ms, stack written into `stack`,
 * CMR_CS_STACK_BYTES, root first) and returns true. Thread id and name are the caller's. */
bool cmr_cs_stalled(const cmr_cs_thread_t *t, int64_t now_ns, int64_t threshold_ns, int64_t wall_offset_ns,
                    cmr_stalled_call_t *out, uint8_t *stack);

/* Completes a batch filled by cmr_metric_agg_batch from cs->methods: max_in_flight of its
 * methods, and the interval's transactions (pointing into cs, valid until the next call
 * or reset). 0, or -1 when memory ran out (the batch then has no transactions). */
int cmr_cs_batch(cmr_call_stacks_t *cs, cmr_metric_batch_t *mb);
/* The next interval: transactions emptied, every in-flight maximum set to the current
 * level; methods with nothing open forgotten. */
void cmr_cs_interval_reset(cmr_call_stacks_t *cs);

/* Frames open now of a method (in-flight counter), and its maximum this interval. */
uint32_t cmr_cs_in_flight(const cmr_call_stacks_t *cs, uint64_t method_id, uint32_t *max);

#endif

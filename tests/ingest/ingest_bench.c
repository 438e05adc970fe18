/*
 * ingest_bench.c - how many events per second cmr-ingest assembles and stores.
 *
 *  1. store stage alone, in process: pre-decoded EventBatches through the engine
 *     (validation, trace state, RocksDB write batch, one fsync'ed write per group of
 *     64 batches) - no Kafka, no Avro; 4 times the data of the broker runs;
 *  2. the real worker (`cmr-ingest run` processes) consuming a pre-filled cmr.events on
 *     the embedded broker, with 1 and then 2 workers in a fresh group each: events
 *     divided by the time from the first record received to the last group committed
 *     (each worker logs both at exit; ingest.exit_idle_ms makes them exit when caught up).
 *
 * The pre-filled topic stays within the mock broker's retention (about 5 MiB per
 * partition): by default 16 partitions x ~32 batches x 4096 events.
 *
 * Small traces (`small` instead of BATCH_EVENTS): traces of 4, 50 and 5,000 events, one
 * EventBatch each, decoded from Avro and applied in process with the CPU time measured,
 * then through one worker from a pre-filled topic.
 *
 * Hosts (`hosts` instead of BATCH_EVENTS): 1 worker, then 2 workers, each with its own
 * store root (as on separate hosts), joined first, then the topic filled; traces per
 * second of each, the ratio, and the CPU seconds of every process (workers, broker, this
 * producer), since on a small machine they share the cores. With CMR_BENCH_PIN=1 worker i
 * runs on core i alone (taskset -c i): one worker gets one core, two workers two, which
 * shows how ingest scales per core when the machine has fewer cores than a worker would use.
 *
 * Fleet (`fleet`): traces of the fleet test's shape (three JVMs, eight segments, 51 events
 * a request), each JVM's segments of a pass (PASS requests) packed per partition and
 * arriving in a poll round of its own, as the three agents' sends do; decoded and applied
 * in process, CPU time per trace, for three arrival orders of the JVMs' passes, with and
 * without the engine keeping complete traces in memory for late segments.
 *
 * CMR_BENCH_MALLOC_KEEP_MB=N: the freed memory kept for reuse, in this process and by the
 * workers (ingest.malloc.keep_mb, default 256; 0: the C library's defaults, as before).
 * CMR_BENCH_SMALL=4x64,50x16: only these in-process rows of `small` (events x traces per
 * message), e.g. to profile one of them; the worker rows are skipped too.
 * CMR_BENCH_QUERIES=0: no list queries after the rows of several traces per message.
 * CMR_BENCH_RETENTION=1: after each in-process row, retention by age (every trace of the
 *   row is an hour old; the age bound is a minute), calls of the worker's retention back
 *   to back until the store is empty: traces deleted per call, the calls needed, and the
 *   wall and CPU time per trace deleted.
 *
 * Usage: cmr-ingest-bench PATH-TO-cmr-broker PATH-TO-cmr-ingest [BATCH_EVENTS [BATCHES]]
 *        cmr-ingest-bench PATH-TO-cmr-broker PATH-TO-cmr-ingest small [SCALE]
 *        cmr-ingest-bench PATH-TO-cmr-broker PATH-TO-cmr-ingest fleet [TRACES [PASS]]
 *        cmr-ingest-bench PATH-TO-cmr-broker PATH-TO-cmr-ingest hosts [BATCH_EVENTS [BATCHES]]
 */
#include <inttypes.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "broker_proc.h"
#include "proc_cpu.h"
#include "cmr/buf.h"
#include "cmr/event.h"
#include "cmr/clock.h"
#include "cmr/ids.h"
#include "cmr/ingest.h"
#include "cmr/kafka.h"
#include "cmr/log.h"
#include "cmr/program.h"
#include "cmr/reader.h"
#include "cmr/wire.h"
#include "cp_support.h"
#include "ing_synth.h"

#define BATCHES_PER_TRACE 4

/* CMR_BENCH_MALLOC_KEEP_MB: freed memory kept for reuse, in process and by the workers
 * (ingest.malloc.keep_mb; default the worker's, 256; 0: the C library's defaults) */
static long long malloc_keep_mb = 256;

static double now_s(void)
{
    return (double)cmr_mono_ns() / 1e9;
}

/* One trace: one segment of BATCHES_PER_TRACE * batch events, calls nested 3 deep over a
 * pool of 200 methods, a FORK now and then. */
static void make_segment(synth_seg_t *s, uint64_t k, size_t events, uint64_t base)
{
    uint8_t tid[16];
    cmr_random_bytes(tid, 16);
    synth_seg_init(s, tid, cmr_agent_id("bench", "host", NULL), k + 1, (int64_t)(k % 64), "worker", NULL);
    uint64_t t = base + k * 1000000;
    synth_enter(s, 1, t++);
    while (s->count + 6 <= events - 1) {
        uint64_t m = 2 + (s->count * 7 + k) % 200;
        synth_enter(s, m, t++);
        synth_enter(s, m + 1, t++);
        if (s->count % 97 == 0)
            synth_fork(s, t++);
        synth_exit(s, m + 1, t++);
        synth_exit(s, m, t++);
    }
    synth_exit(s, 1, t++);
}

typedef struct data {
    synth_seg_t *segs;
    size_t ntraces;
    size_t batch;     /* events per batch */
    size_t per_trace; /* batches per trace */
    size_t pack;      /* small traces per message (1: each its own) */
    uint64_t events;
} data_t;

/* A small trace, as a web request makes it: one segment whose root calls a few methods,
 * events in all (even: calls of one, two and three levels), sent as one batch. */
static void make_small(synth_seg_t *s, uint64_t k, size_t events, uint64_t base)
{
    uint8_t tid[16];
    cmr_random_bytes(tid, 16);
    synth_seg_init(s, tid, cmr_agent_id("bench", "host", NULL), k + 1, (int64_t)(k % 64), "http-nio-8080-exec-1", NULL);
    uint64_t t = base + k * 20000;
    synth_enter(s, 1, t += 3);
    for (uint64_t c = 0; s->count + 1 < events; c++) {
        uint64_t m = 2 + (c * 7 + k) % 200;
        size_t room = events - 1 - s->count, depth = room >= 6 && c % 3 == 2 ? 3 : room >= 4 && c % 3 == 1 ? 2 : 1;
        for (size_t i = 0; i < depth; i++)
            synth_enter(s, m + i, t += 40);
        for (size_t i = depth; i-- > 0;)
            synth_exit(s, m + i, t += 90);
    }
    synth_exit(s, 1, t += 5);
}

static void make_small_data(data_t *d, size_t events, size_t ntraces)
{
    d->batch = events;
    d->per_trace = 1;
    d->pack = 1;
    d->ntraces = ntraces;
    d->segs = calloc(ntraces, sizeof *d->segs);
    uint64_t base = (uint64_t)cmr_wall_ns() - 3600ull * 1000000000ull;
    d->events = 0;
    for (size_t k = 0; k < ntraces; k++) {
        make_small(&d->segs[k], k, events, base);
        d->events += d->segs[k].count;
    }
}

static void free_data(data_t *d)
{
    for (size_t k = 0; k < d->ntraces; k++)
        synth_seg_free(&d->segs[k]);
    free(d->segs);
}

static void make_data(data_t *d, size_t batch, size_t nbatches)
{
    d->batch = batch;
    d->per_trace = BATCHES_PER_TRACE;
    d->pack = 1;
    d->ntraces = nbatches / BATCHES_PER_TRACE;
    d->segs = calloc(d->ntraces, sizeof *d->segs);
    uint64_t base = (uint64_t)cmr_wall_ns() / 1000000000ull * 1000000000ull - 3600ull * 1000000000ull;
    d->events = 0;
    for (size_t k = 0; k < d->ntraces; k++) {
        make_segment(&d->segs[k], k, batch * BATCHES_PER_TRACE, base);
        d->events += d->segs[k].count;
    }
}

static void bench_store(const data_t *d, bool sync)
{
    char dir[256], err[512];
    if (cp_tmpdir(dir, sizeof dir) != 0)
        return;
    cmr_store_opts_t o = {.sync = sync};
    cmr_ingest_engine_t *e = cmr_ingest_engine_new(dir, &o, err, sizeof err);
    for (int p = 0; p < 16; p++)
        cmr_ingest_engine_open_partition(e, p, 0);
    /* decoded batches prepared before the clock starts */
    size_t nb = 0;
    cmr_event_batch_t **b = calloc(d->ntraces, sizeof *b);
    size_t *cnt = calloc(d->ntraces, sizeof *cnt);
    for (size_t k = 0; k < d->ntraces; k++)
        nb += cnt[k] = synth_batches(&d->segs[k], d->batch, &b[k]);
    double t0 = now_s();
    size_t in_group = 0;
    for (size_t i = 0; i < d->per_trace; i++) /* interleaved traces, like a live stream */
        for (size_t k = 0; k < d->ntraces; k++) {
            if (i >= cnt[k])
                continue;
            cmr_ingest_engine_add_batch(e, (int)(k % 16), &b[k][i], err, sizeof err);
            if (++in_group == 64) {
                cmr_ingest_engine_flush(e);
                in_group = 0;
            }
        }
    cmr_ingest_engine_flush(e);
    double dt = now_s() - t0;
    cmr_ingest_stats_t s;
    cmr_ingest_engine_stats(e, &s);
    printf("store stage (in process, %s per 64 batches): %" PRIu64 " events in %zu batches of %zu, %.3f s: "
           "%.2f M events/s\n",
           sync ? "WAL fsync" : "WAL write, no fsync", s.events, nb, d->batch, dt, (double)s.events / dt / 1e6);
    cmr_ingest_engine_free(e);
    for (size_t k = 0; k < d->ntraces; k++)
        synth_batches_free(b[k], cnt[k]);
    free(b);
    free(cnt);
    cp_rmrf(dir);
}

static double cpu_s(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + (double)u.ru_stime.tv_sec +
           ((double)u.ru_utime.tv_usec + (double)u.ru_stime.tv_usec) / 1e6;
}

/* Small traces (one batch each) packed per_msg to a message per partition (trace k to
 * partition k % 16), as the publisher packs a pass's segments; emit gets each message. */
static void pack_small(const data_t *d, size_t per_msg, void (*emit)(void *, int, const cmr_event_msg_t *), void *ctx)
{
    cmr_event_batch_t *all = calloc(per_msg, sizeof *all), **held = calloc(per_msg, sizeof *held);
    cmr_segs_writer_t *w = calloc(1, sizeof *w);
    for (int part = 0; part < 16; part++) {
        size_t nb = 0;
        for (size_t k = (size_t)part; k < d->ntraces; k += 16) {
            synth_batches(&d->segs[k], d->batch, &held[nb]); /* one batch: the trace */
            all[nb] = held[nb][0];
            if (++nb < per_msg && k + 16 < d->ntraces)
                continue;
            cmr_event_msg_t m;
            if (cmr_segs_join(w, all[0].agent_id, all, nb, &m) == 0)
                emit(ctx, part, &m);
            for (size_t i = 0; i < nb; i++)
                synth_batches_free(held[i], 1);
            nb = 0;
        }
    }
    cmr_segs_writer_free(w);
    free(w);
    free(all);
    free(held);
}

typedef struct encode_ctx {
    cmr_buf_t *msgs; /* Avro EventBatch messages */
    int *part;       /* the partition of each */
    size_t n, bytes;
} encode_ctx_t;

static void encode_one(void *ctx, int part, const cmr_event_msg_t *m)
{
    encode_ctx_t *c = ctx;
    char err[256];
    cmr_msg_encode(CMR_MSG_EVENT_BATCH, m, &c->msgs[c->n], err, sizeof err);
    c->part[c->n] = part;
    c->bytes += c->msgs[c->n++].len;
}

/* The read side of what bench_small stored: a view opened on the store root (as the
 * HTTP API's), then the lists a person asks for, each the median of 5 runs. Printed
 * after the ingest figures of the same run, the writer still open. */
static void bench_queries(const char *dir)
{
    char err[512];
    double t0 = now_s();
    cmr_ingest_view_t *v = cmr_ingest_view_open(dir, err, sizeof err);
    if (!v) {
        printf("  view: %s\n", err);
        return;
    }
    double open_ms = (now_s() - t0) * 1e3;
    static const struct {
        const char *name;
        cmr_trace_filter_t f;
    } qs[] = {
        {"newest 50", {.limit = 50}},
        {"newest 1000", {.limit = 1000}},
        {"slowest 50", {.slowest = true, .limit = 50}},
        {"calling one method, newest 50", {.contains = "0000000000000007", .limit = 50}},
    };
    printf("  queries (view opened in %.1f ms):", open_ms);
    for (size_t i = 0; i < sizeof qs / sizeof qs[0]; i++) {
        double ms[5];
        long n = 0;
        for (int r = 0; r < 5; r++) {
            cmr_trace_summary_t *out;
            double q0 = now_s();
            n = cmr_ingest_view_list(v, &qs[i].f, &out);
            ms[r] = (now_s() - q0) * 1e3;
            free(out);
        }
        for (int a = 0; a < 5; a++) /* the median */
            for (int b = a + 1; b < 5; b++)
                if (ms[b] < ms[a]) {
                    double x = ms[a];
                    ms[a] = ms[b];
                    ms[b] = x;
                }
        printf("%s %s: %.1f ms (%ld)", i ? "," : "", qs[i].name, ms[2], n);
    }
    printf("\n");
    cmr_ingest_view_free(v);
}

/* Whether CMR_BENCH_SMALL (unset: every row) names the row EVENTSxPER_MSG. */
static bool small_row_wanted(size_t events, size_t per_msg)
{
    const char *rows = getenv("CMR_BENCH_SMALL");
    if (!rows)
        return true;
    char row[48];
    snprintf(row, sizeof row, "%zux%zu", events, per_msg);
    for (const char *p = rows; (p = strstr(p, row)); p += strlen(row))
        if ((p == rows || p[-1] == ',') && (p[strlen(row)] == ',' || !p[strlen(row)]))
            return true;
    return false;
}

/* Retention of a store that every trace has aged out of: the engine reopened with an age
 * bound of a minute, retention called until nothing is left. Takes the engine (frees it). */
static void bench_retention(const char *dir, cmr_ingest_engine_t *e, size_t ntraces)
{
    char err[512];
    cmr_ingest_engine_free(e);
    cmr_store_opts_t o = {.sync = true, .retention_age_ms = 60000};
    e = cmr_ingest_engine_new(dir, &o, err, sizeof err);
    if (!e) {
        printf("  retention: %s\n", err);
        return;
    }
    for (int p = 0; p < 16; p++)
        cmr_ingest_engine_open_partition(e, p, 0);
    double t0 = now_s(), c0 = cpu_s(), first = 0;
    long total = 0, calls = 0, first_n = 0, n;
    while ((n = cmr_ingest_engine_retention(e, NULL)) > 0 && calls < 100000) {
        if (!calls) {
            first = now_s() - t0;
            first_n = n;
        }
        total += n;
        calls++;
    }
    double dt = now_s() - t0, dc = cpu_s() - c0;
    printf("  retention: %ld of %zu traces deleted in %ld calls (the first: %ld traces in %.3f s), %.3f s, CPU "
           "%.3f s: %.2f us of CPU per trace deleted%s\n",
           total, ntraces, calls, first_n, first, dt, dc, total ? dc * 1e6 / (double)total : 0.0,
           n < 0 ? " (a call FAILED)" : "");
    cmr_ingest_engine_free(e);
}

/* Small traces as Avro messages decoded and applied in process (what the worker does per
 * record, without the Kafka fetch): traces per second of wall time and per second of this
 * process's CPU (its RocksDB threads included). `per_msg` traces per message: 1 (a trace
 * alone, as an agent sends one that ends alone in a send interval), or more of one
 * partition (as the publisher packs a pass's segments per cmr.events partition). */
static void bench_small(size_t events, size_t ntraces, size_t per_msg)
{
    char dir[256], err[512];
    if (!small_row_wanted(events, per_msg))
        return;
    if (cp_tmpdir(dir, sizeof dir) != 0)
        return;
    data_t d;
    make_small_data(&d, events, ntraces);
    encode_ctx_t ec = {.msgs = calloc(ntraces / per_msg + 17, sizeof *ec.msgs),
                       .part = calloc(ntraces / per_msg + 17, sizeof *ec.part)};
    pack_small(&d, per_msg, encode_one, &ec);
    cmr_buf_t *msgs = ec.msgs;
    int *part = ec.part;
    size_t nmsgs = ec.n, bytes = ec.bytes;
    cmr_store_opts_t o = {.sync = true};
    cmr_ingest_engine_t *e = cmr_ingest_engine_new(dir, &o, err, sizeof err);
    for (int p = 0; p < 16; p++)
        cmr_ingest_engine_open_partition(e, p, 0);
    /* messages interleaved across partitions, like a live stream */
    size_t *order = calloc(nmsgs, sizeof *order), per_part = (nmsgs + 15) / 16, o_at = 0;
    for (size_t i = 0; i < per_part; i++)
        for (size_t j = i; j < nmsgs; j += per_part)
            order[o_at++] = j;
    double t0 = now_s(), c0 = cpu_s();
    size_t in_group = 0, bad = 0;
    for (size_t i = 0; i < o_at; i++) {
        size_t k = order[i];
        cmr_msg_t m;
        if (cmr_msg_decode(msgs[k].data, msgs[k].len, &m, err, sizeof err) != CMR_WIRE_OK ||
            cmr_ingest_engine_add(e, part[k], &m.u.event_batch, err, sizeof err) != 1)
            bad++;
        cmr_msg_free(&m);
        if ((in_group += per_msg) >= 1024) { /* the worker commits a group per poll round */
            cmr_ingest_engine_flush(e);
            in_group = 0;
        }
    }
    cmr_ingest_engine_flush(e);
    double dt = now_s() - t0, dc = cpu_s() - c0;
    printf("small traces of %zu events (%zu per message, %.0f bytes per trace, %.2f bytes per call), decode and "
           "store in process: %zu traces in %.3f s, CPU %.3f s: %.0f traces/s, %.0f traces per CPU-second "
           "(%.2f us of CPU per trace)%s\n",
           events, per_msg, (double)bytes / (double)ntraces, 2.0 * (double)bytes / (double)d.events, ntraces, dt, dc,
           (double)ntraces / dt, (double)ntraces / dc, dc * 1e6 / (double)ntraces, bad ? " SOME FAILED" : "");
    if (per_msg > 1 && !(getenv("CMR_BENCH_QUERIES") && !strcmp(getenv("CMR_BENCH_QUERIES"), "0")))
        bench_queries(dir);
    if (getenv("CMR_BENCH_RETENTION") && strcmp(getenv("CMR_BENCH_RETENTION"), "0"))
        bench_retention(dir, e, ntraces);
    else
        cmr_ingest_engine_free(e);
    for (size_t k = 0; k < nmsgs; k++)
        cmr_buf_free(&msgs[k]);
    free(msgs);
    free(part);
    free(order);
    free_data(&d);
    cp_rmrf(dir);
}

/* --- traces of a fleet: three JVMs, eight segments a request -------------------------- */

enum { FLEET_SEGS = 8 };

/* The request k of the fleet benchmark's shape (tests/fleet): the front JVM's servlet calls
 * the stock service (a remote child), which queries its database and hands three prices
 * to a pool, each of which calls the price JVM. segs[0] front, [1] stock, [2..4] its pool
 * threads, [5..7] the price service: 51 events. */
static void make_fleet_trace(synth_seg_t segs[FLEET_SEGS], uint64_t k, uint64_t base)
{
    static const char *names[3] = {"front", "stock", "price"};
    uint64_t agent[3];
    for (int a = 0; a < 3; a++)
        agent[a] = cmr_agent_id(names[a], "host", NULL);
    uint8_t tid[16];
    cmr_random_bytes(tid, 16);
    uint64_t t = base + k * 20000, seg = k * FLEET_SEGS;
    synth_seg_t *f = &segs[0], *st = &segs[1];
    synth_seg_init(f, tid, agent[0], seg + 1, (int64_t)(k % 8), "http-nio-8080-exec-1", NULL);
    synth_enter(f, 101, t += 3);
    synth_enter(f, 102, t += 10);
    synth_enter(f, 103, t += 10);
    synth_exit(f, 103, t += 10);
    synth_enter(f, 104, t += 10);
    cmr_parent_link_t to_stock = {(int64_t)agent[0], (int64_t)f->segment_id, synth_fork(f, t += 5)};
    synth_seg_init(st, tid, agent[1], seg + 2, (int64_t)(k % 8), "qtp-1", &to_stock);
    synth_enter(st, 201, t += 50);
    synth_enter(st, 202, t += 10);
    synth_enter(st, 203, t += 10);
    synth_exit(st, 203, t += 200);
    synth_exit(st, 202, t += 10);
    for (int i = 0; i < 3; i++) {
        cmr_parent_link_t to_pool = {(int64_t)agent[1], (int64_t)st->segment_id, synth_fork(st, t += 5)};
        synth_seg_t *pool = &segs[2 + i], *price = &segs[5 + i];
        synth_seg_init(pool, tid, agent[1], seg + 3 + (uint64_t)i, 100 + i, "pricing-1", &to_pool);
        uint64_t tp = t + 20;
        synth_enter(pool, 210, tp += 5);
        synth_enter(pool, 211, tp += 5);
        cmr_parent_link_t to_price = {(int64_t)agent[1], (int64_t)pool->segment_id, synth_fork(pool, tp += 5)};
        synth_seg_init(price, tid, agent[2], seg + 6 + (uint64_t)i, (int64_t)(k % 4), "HTTP-Dispatcher", &to_price);
        uint64_t tq = tp + 30;
        synth_enter(price, 301, tq += 5);
        synth_enter(price, 302, tq += 5);
        synth_exit(price, 302, tq += 1000);
        synth_enter(price, 303, tq += 5);
        synth_exit(price, 303, tq += 5);
        synth_exit(price, 301, tq += 5);
        synth_exit(pool, 211, tq += 30);
        synth_exit(pool, 210, tq += 5);
    }
    t += 1500;
    synth_exit(st, 201, t += 10);
    synth_exit(f, 104, t += 50);
    synth_exit(f, 102, t += 10);
    synth_exit(f, 101, t += 10);
}

/* The order the three JVMs' passes arrive in: all in one poll round, or each in a round
 * of its own, callers first (front, stock, price) or callees first. */
typedef enum { FLEET_TOGETHER, FLEET_CALLERS_FIRST, FLEET_CALLEES_FIRST } fleet_order_t;

/* Traces of the fleet's shape, `pass` requests per agent pass: each JVM packs its
 * segments of a pass per partition into one message (as the publisher does), and each
 * JVM's messages of a pass arrive in a poll round of their own (one group commit), in
 * `order`. Decoded from Avro and applied in process, CPU time measured; with `keep` false
 * the engine keeps no complete trace in memory (ingest.trace.keep_ms=0: as before it did). */
static void bench_fleet(size_t ntraces, size_t pass, fleet_order_t order, bool keep)
{
    static const char *order_names[] = {"all three JVMs in one poll round", "callers first (front, stock, price)",
                                        "callees first (price, stock, front)"};
    char dir[256], err[512];
    if (cp_tmpdir(dir, sizeof dir) != 0)
        return;
    synth_seg_t *segs = calloc(ntraces * FLEET_SEGS, sizeof *segs);
    uint64_t base = (uint64_t)cmr_wall_ns() - 3600ull * 1000000000ull, events = 0;
    for (size_t k = 0; k < ntraces; k++) {
        make_fleet_trace(&segs[k * FLEET_SEGS], k, base);
        for (int j = 0; j < FLEET_SEGS; j++)
            events += segs[k * FLEET_SEGS + j].count;
    }
    /* the segments of each JVM: front {0}, stock {1,2,3,4}, price {5,6,7} */
    static const int first[3] = {0, 1, 5}, nsegs[3] = {1, 4, 3};
    static const int arrival[3][3] = {{0, 1, 2}, {0, 1, 2}, {2, 1, 0}};
    size_t cap = ((pass < ntraces ? pass : ntraces) / 16 + 2) * 4; /* one JVM's segments of a pass in a partition */
    cmr_event_batch_t *all = calloc(cap, sizeof *all), **held = calloc(cap, sizeof *held);
    cmr_segs_writer_t *w = calloc(1, sizeof *w);
    size_t nrounds = 0, nmsgs = 0, bytes = 0;
    size_t mcap = (ntraces / pass + 1) * 3 * 16;
    cmr_buf_t *msgs = calloc(mcap, sizeof *msgs);
    int *part = calloc(mcap, sizeof *part);
    size_t *round_end = calloc((ntraces / pass + 1) * 3, sizeof *round_end);
    for (size_t from = 0; from < ntraces; from += pass) {
        size_t to = from + pass < ntraces ? from + pass : ntraces;
        for (int ai = 0; ai < 3; ai++) {
            int a = arrival[order][ai];
            for (int p = 0; p < 16; p++) {
                size_t nb = 0;
                for (size_t k = from + ((size_t)p + 16 - from % 16) % 16; k < to; k += 16)
                    for (int j = 0; j < nsegs[a]; j++) {
                        synth_batches(&segs[k * FLEET_SEGS + (size_t)(first[a] + j)], 4096, &held[nb]);
                        all[nb] = held[nb][0];
                        nb++;
                    }
                cmr_event_msg_t m;
                if (nb && cmr_segs_join(w, all[0].agent_id, all, nb, &m) == 0) {
                    cmr_msg_encode(CMR_MSG_EVENT_BATCH, &m, &msgs[nmsgs], err, sizeof err);
                    part[nmsgs] = p;
                    bytes += msgs[nmsgs++].len;
                }
                for (size_t i = 0; i < nb; i++)
                    synth_batches_free(held[i], 1);
            }
            if (order != FLEET_TOGETHER || ai == 2)
                round_end[nrounds++] = nmsgs;
        }
    }
    cmr_segs_writer_free(w);
    free(w);
    free(all);
    free(held);
    cmr_store_opts_t o = {.sync = true, .trace_keep_ms = keep ? 0 : -1};
    cmr_ingest_engine_t *e = cmr_ingest_engine_new(dir, &o, err, sizeof err);
    for (int p = 0; p < 16; p++)
        cmr_ingest_engine_open_partition(e, p, 0);
    double t0 = now_s(), c0 = cpu_s();
    size_t bad = 0;
    for (size_t r = 0, i = 0; r < nrounds; r++) {
        for (; i < round_end[r]; i++) {
            cmr_msg_t m;
            if (cmr_msg_decode(msgs[i].data, msgs[i].len, &m, err, sizeof err) != CMR_WIRE_OK ||
                cmr_ingest_engine_add(e, part[i], &m.u.event_batch, err, sizeof err) != 1)
                bad++;
            cmr_msg_free(&m);
        }
        cmr_ingest_engine_flush(e); /* one group commit per poll round */
    }
    double dt = now_s() - t0, dc = cpu_s() - c0;
    cmr_ingest_stats_t st;
    cmr_ingest_engine_stats(e, &st);
    printf("fleet traces (3 JVMs, %d segments, %.0f events each; %zu requests a pass), %s, complete traces %s: %zu "
           "traces in %.3f s, CPU %.3f s: %.2f us of CPU per trace, %.0f traces per CPU-second; %zu messages, %.0f "
           "bytes per trace; trace states rebuilt from the store %" PRIu64 "%s\n",
           FLEET_SEGS, (double)events / (double)ntraces, pass, order_names[order],
           keep ? "kept for late segments" : "not kept (before)", ntraces, dt, dc, dc * 1e6 / (double)ntraces,
           (double)ntraces / dc, nmsgs, (double)bytes / (double)ntraces, st.traces_reloaded, bad ? " SOME FAILED" : "");
    fflush(stdout);
    cmr_ingest_engine_free(e);
    for (size_t i = 0; i < nmsgs; i++)
        cmr_buf_free(&msgs[i]);
    free(msgs);
    free(part);
    free(round_end);
    for (size_t k = 0; k < ntraces * FLEET_SEGS; k++)
        synth_seg_free(&segs[k]);
    free(segs);
    cp_rmrf(dir);
}

/* Query-side assembly: the full tree of one big trace from its stored batches. */
static void bench_assembly(void)
{
    char err[256];
    uint8_t tid[16];
    cmr_random_bytes(tid, 16);
    uint64_t agent = cmr_agent_id("bench", "host", NULL);
    /* a root that hands 10,000 tasks to pool threads, each task 10 calls */
    enum { TASKS = 10000 };
    synth_seg_t *segs = calloc(TASKS + 1, sizeof *segs);
    synth_seg_init(&segs[0], tid, agent, 1, 1, "main", NULL);
    synth_enter(&segs[0], 1, 1000);
    int64_t *forks = calloc(TASKS, sizeof *forks);
    for (int i = 0; i < TASKS; i++)
        forks[i] = synth_fork(&segs[0], 1000 + (uint64_t)i);
    synth_exit(&segs[0], 1, 100000000);
    for (int i = 0; i < TASKS; i++) {
        cmr_parent_link_t l = {(int64_t)agent, 1, forks[i]};
        synth_seg_init(&segs[i + 1], tid, agent, 2 + (uint64_t)i, 10 + i % 32, "pool", &l);
        uint64_t t = 2000 + (uint64_t)i * 100;
        synth_enter(&segs[i + 1], 2, t);
        for (int k = 0; k < 4; k++) {
            synth_enter(&segs[i + 1], 3 + (uint64_t)k, t + 1 + (uint64_t)k * 2);
            synth_exit(&segs[i + 1], 3 + (uint64_t)k, t + 2 + (uint64_t)k * 2);
        }
        synth_exit(&segs[i + 1], 2, t + 50);
    }
    size_t nflat = 0, cap = 0;
    cmr_ingest_batch_t *flat = NULL;
    cmr_event_batch_t **msgs = calloc(TASKS + 1, sizeof *msgs);
    size_t *cnt = calloc(TASKS + 1, sizeof *cnt);
    uint64_t events = 0;
    for (int i = 0; i <= TASKS; i++) {
        cnt[i] = synth_batches(&segs[i], 4096, &msgs[i]);
        for (size_t k = 0; k < cnt[i]; k++) {
            if (CMR_ARRAY_GROW(flat, cap, nflat + 1) != 0)
                abort();
            cmr_ingest_batch_from_msg(&msgs[i][k], &flat[nflat++], err, sizeof err);
            events += (uint64_t)msgs[i][k].event_count;
        }
    }
    double t0 = now_s();
    cmr_tree_t t;
    cmr_tree_build(flat, nflat, &t);
    double dt = now_s() - t0;
    printf("assembly of one trace (1 root forking %d pool tasks, %zu segments, %" PRIu64
           " events) into its full tree: %.1f ms (%.1f M events/s)\n",
           TASKS, (size_t)t.segments, events, dt * 1e3, (double)events / dt / 1e6);
    cmr_tree_free(&t);
    for (int i = 0; i <= TASKS; i++) {
        synth_batches_free(msgs[i], cnt[i]);
        synth_seg_free(&segs[i]);
    }
    free(msgs);
    free(cnt);
    free(flat);
    free(forks);
    free(segs);
}

typedef struct send_ctx {
    cmr_producer_t *p;
    size_t sent;
} send_ctx_t;

static void send_one(void *ctx, int part, const cmr_event_msg_t *m)
{
    send_ctx_t *c = ctx;
    char err[512];
    while (cmr_producer_send_to(c->p, CMR_MSG_EVENT_BATCH, m, part, NULL, err, sizeof err) == CMR_SEND_QUEUE_FULL)
        cmr_producer_flush(c->p, 100);
    c->sent++;
}

/* Fills cmr.events with d: true when the topic holds every message sent. */
static bool fill(const char *bootstrap, const data_t *d)
{
    cmr_conf_t *conf = cmr_conf_new();
    cmr_conf_set(conf, "kafka.bootstrap.servers", bootstrap, "bench");
    char err[512];
    cmr_producer_t *p = cmr_producer_new(conf, "bench", NULL, NULL, err, sizeof err);
    double t0 = now_s();
    size_t sent = 0;
    if (d->pack > 1) {
        send_ctx_t c = {p, 0};
        pack_small(d, d->pack, send_one, &c);
        sent = c.sent;
    } else
        for (size_t k = 0; k < d->ntraces; k++) {
            cmr_event_batch_t *b;
            size_t n = synth_batches(&d->segs[k], d->batch, &b);
            for (size_t i = 0; i < n; i++, sent++)
                while (cmr_producer_send_batch(p, &b[i], NULL, err, sizeof err) == CMR_SEND_QUEUE_FULL)
                    cmr_producer_flush(p, 100);
            synth_batches_free(b, n);
        }
    cmr_producer_flush(p, 60000);
    double dt = now_s() - t0;
    cmr_reader_t *r = cmr_reader_new(conf, "cmr.events", 0, err, sizeof err); /* counts what the topic holds */
    int64_t total = r ? cmr_reader_total(r) : 0;
    cmr_reader_free(r);
    printf("pre-filled cmr.events: %zu batches (%" PRIu64 " events) in %zu messages in %.2f s; the topic holds %" PRId64
           " messages\n",
           d->ntraces * d->per_trace, d->events, sent, dt, total);
    cmr_producer_destroy(p, 5000);
    cmr_conf_destroy(conf);
    return total == (int64_t)sent;
}

static int64_t log_value(const char *text, const char *key)
{
    const char *last = NULL;
    for (const char *p = text; p && (p = strstr(p, "event=ingest.stats")); p++)
        last = p;
    const char *v = last ? strstr(last, key) : NULL;
    return v ? strtoll(v + strlen(key), NULL, 10) : -1;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    size_t r = fread(b, 1, (size_t)n, f);
    b[r] = '\0';
    fclose(f);
    return b;
}

/* Starts n workers in a fresh group on a fresh store (separate: one store root each). */
static void start_workers(cp_proc_t *w, int n, const char *ingest_bin, const char *bootstrap, const char *store,
                          char logs[2][320], const char *dir, bool separate)
{
    char group[64], setgroup[96], keep[64];
    cp_unique("bench", group, sizeof group);
    snprintf(setgroup, sizeof setgroup, "ingest.group=%s", group);
    snprintf(keep, sizeof keep, "ingest.malloc.keep_mb=%lld", malloc_keep_mb);
    for (int i = 0; i < n; i++) {
        snprintf(logs[i], sizeof logs[i], "%s/w%d.log", dir, i);
        char own[340];
        snprintf(own, sizeof own, "%s%d", store, i);
        char core[16];
        snprintf(core, sizeof core, "%d", i);
        const char *argv[] = {ingest_bin,    "run",
                              "--bootstrap", bootstrap,
                              "--store",     separate ? own : store,
                              "--http-port", "-1",
                              "-X",          setgroup,
                              "-X",          "ingest.exit_idle_ms=5000",
                              "-X",          "kafka.session.timeout.ms=6000",
                              "-X",          "kafka.heartbeat.interval.ms=500",
                              "-X",          keep,
                              "--log-level", "info",
                              NULL};
        const char *pinned[32] = {"/usr/bin/taskset", "-c", core};
        for (size_t k = 0; argv[k]; k++)
            pinned[3 + k] = argv[k];
        cp_proc_start(&w[i], getenv("CMR_BENCH_PIN") ? pinned : argv, logs[i]);
    }
}

/* Waits until the workers share all 16 partitions and the assignment held for 3 s. */
static void wait_assigned(cp_proc_t *w, int n)
{
    int stable = 0;
    for (int t = 0; t < 600 && stable < 30; t++) {
        int opened = 0, closed = 0;
        for (int i = 0; i < n; i++) {
            opened += cp_proc_count_log(&w[i], "event=ingest.partition_opened");
            closed += cp_proc_count_log(&w[i], "event=ingest.partition_closed");
        }
        bool all_in = true;
        for (int i = 0; i < n; i++)
            all_in = all_in && cp_proc_count_log(&w[i], "event=ingest.partition_opened") > 0;
        stable = opened - closed == 16 && all_in ? stable + 1 : 0;
        cmr_sleep_ms(100);
    }
}

/* Throughput over the union of the workers' busy spans (first record received to last
 * group committed). When the workers' spans do not overlap (a rebalance parked one of
 * them), that is said, with each worker's own rate. */
static double report(int n, char logs[2][320], uint64_t expect, const char *how)
{
    int64_t first = INT64_MAX, last = 0, events = 0, f[2] = {0}, l[2] = {0}, ev[2] = {0};
    for (int i = 0; i < n; i++) {
        char *text = slurp(logs[i]);
        ev[i] = text ? log_value(text, " events=") : -1;
        f[i] = text ? log_value(text, "first_record_ms=") : -1;
        l[i] = text ? log_value(text, "last_commit_ms=") : -1;
        free(text);
        if (ev[i] > 0) {
            events += ev[i];
            first = f[i] < first ? f[i] : first;
            last = l[i] > last ? l[i] : last;
        }
        double own = (double)(l[i] - f[i]) / 1000.0;
        printf("  worker %d: %" PRId64 " events in %.3f s (%.2f M events/s)\n", i + 1, ev[i], own,
               own > 0 ? (double)ev[i] / own / 1e6 : 0.0);
    }
    double dt = (double)(last - first) / 1000.0;
    bool apart = n == 2 && ev[0] > 0 && ev[1] > 0 && (f[0] > l[1] || f[1] > l[0]);
    printf("%d worker%s, %s: %" PRId64 " of %" PRIu64 " events in %.3f s: %.2f M events/s%s\n", n, n > 1 ? "s" : "",
           how, events, expect, dt, dt > 0 ? (double)events / dt / 1e6 : 0.0,
           apart ? " (the workers did not run at the same time: group join/rebalance in between)" : "");
    return dt > 0 ? (double)events / dt : 0.0;
}

static double worker_cpu[2]; /* CPU seconds of the workers that exited by themselves */
static double idle_cpu;      /* of a worker that ingested 16 small traces: its fixed cost */

static void wait_exit(cp_proc_t *w, int n)
{
    for (int i = 0; i < n; i++) {
        int status;
        int t = 0;
        struct rusage u = {0};
        worker_cpu[i] = 0;
        for (; t < 1800 && wait4(w[i].pid, &status, WNOHANG, &u) == 0; t++)
            cmr_sleep_ms(100);
        if (t == 1800) {
            cp_proc_stop(&w[i]);
        } else {
            cp_proc_forget(&w[i]);
            worker_cpu[i] = (double)u.ru_utime.tv_sec + (double)u.ru_stime.tv_sec +
                            ((double)u.ru_utime.tv_usec + (double)u.ru_stime.tv_usec) / 1e6;
        }
    }
}

/* mode 0: the topic is filled first, then the workers (started together) catch up; with
 *         two, the measured time includes their group join and any rebalance.
 * mode 1: the workers join first and share the partitions, then the topic is filled at
 *         full speed (>10 M events/s, faster than ingest): the workers consume a backlog
 *         that grows under them, with no rebalance in the measured time. */
static double bench_workers(const char *broker_bin, const char *ingest_bin, const data_t *d, int n, int mode,
                            bool separate)
{
    char dir[256], store[300], logs[2][320];
    cp_tmpdir(dir, sizeof dir);
    snprintf(store, sizeof store, "%s/store", dir);
    broker_proc_t b;
    if (broker_proc_start(&b, broker_bin, NULL) != 0)
        return 0;
    cp_proc_t w[2];
    bool held = false;
    double self0 = cpu_s(), broker0 = proc_cpu_s(b.pid);
    if (mode == 0) {
        held = fill(b.bootstrap, d);
        start_workers(w, n, ingest_bin, b.bootstrap, store, logs, dir, separate);
    } else {
        start_workers(w, n, ingest_bin, b.bootstrap, store, logs, dir, separate);
        wait_assigned(w, n);
        broker0 = proc_cpu_s(b.pid);
        self0 = cpu_s();
        held = fill(b.bootstrap, d);
    }
    double self1 = cpu_s();
    wait_exit(w, n);
    double broker1 = proc_cpu_s(b.pid);
    uint64_t expect = held ? d->events : 0;
    double rate = report(n, logs, expect,
                         mode == 0  ? "pre-filled topic"
                         : separate ? "separate store roots, joined, then topic filled"
                                    : "joined, then topic filled");
    if (separate) {
        double per_trace = d->ntraces ? (double)d->events / (double)d->ntraces : 1;
        printf("  %.0f traces/s (%zu traces of %.0f events in %zu batches each)\n", rate / per_trace, d->ntraces,
               per_trace, d->per_trace);
        printf("  CPU seconds: worker 1 %.2f, worker 2 %.2f (their 5 s idle wait included), broker %.2f, producer "
               "%.2f (this process, while filling); %ld cores online\n",
               worker_cpu[0], n > 1 ? worker_cpu[1] : 0.0, broker1 - broker0, self1 - self0,
               sysconf(_SC_NPROCESSORS_ONLN));
    }
    if (d->per_trace == 1 && worker_cpu[0] > 0) { /* small traces */
        double cpu = worker_cpu[0] + worker_cpu[1];
        printf("  %zu traces of %zu events, %zu per message; worker CPU %.2f s in all (its 5 s idle wait "
               "included): %.2f us per trace",
               d->ntraces, d->batch, d->pack, cpu, cpu * 1e6 / (double)d->ntraces);
        if (d->ntraces <= 16)
            idle_cpu = cpu;
        else if (idle_cpu > 0)
            printf("; %.2f us per trace above a run of 16 traces (%.2f s: start, tables, idle wait)",
                   (cpu - idle_cpu) * 1e6 / (double)d->ntraces, idle_cpu);
        printf("\n");
    }
    broker_proc_stop(&b);
    if (getenv("CMR_BENCH_KEEP"))
        printf("  logs kept in %s\n", dir);
    else
        cp_rmrf(dir);
    return rate;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s PATH-TO-cmr-broker PATH-TO-cmr-ingest [BATCH_EVENTS [BATCHES]]\n", argv[0]);
        return 2;
    }
    cmr_log_set_level(CMR_LOG_WARN);
    const char *keep = getenv("CMR_BENCH_MALLOC_KEEP_MB");
    if (keep && ((malloc_keep_mb = atoll(keep)) < 0 || malloc_keep_mb > (1 << 20))) {
        fprintf(stderr, "CMR_BENCH_MALLOC_KEEP_MB: 0..1048576, not \"%s\"\n", keep);
        return 2;
    }
    cmr_program_keep_freed_memory(malloc_keep_mb << 20); /* as the worker does */
    size_t batch = argc > 3 ? strtoul(argv[3], NULL, 10) : 4096;
    size_t nbatches = argc > 4 ? strtoul(argv[4], NULL, 10) : 512;
    if (argc > 3 && !strcmp(argv[3], "small")) { /* small traces: 4, 50 and 5,000 events */
        size_t scale = argc > 4 ? strtoul(argv[4], NULL, 10) : 1;
        bench_small(4, 200000 * scale, 1);
        bench_small(4, 200000 * scale, 64);
        bench_small(50, 50000 * scale, 1);
        bench_small(50, 50000 * scale, 16);
        bench_small(5000, 500 * scale, 1);
        if (getenv("CMR_BENCH_IN_PROCESS") || getenv("CMR_BENCH_SMALL")) /* the in-process rows only */
            return 0;
        static const size_t worker_runs[][3] = {
            {4, 16, 1}, {4, 100000, 1}, {4, 400000, 64}, {50, 20000, 1}, {50, 80000, 16}};
        for (size_t i = 0; i < 5; i++) {
            data_t d;
            make_small_data(&d, worker_runs[i][0], worker_runs[i][1] * (i ? scale : 1));
            d.pack = worker_runs[i][2];
            bench_workers(argv[1], argv[2], &d, 1, 0, false);
            free_data(&d);
        }
        return 0;
    }
    if (argc > 3 && !strcmp(argv[3], "fleet")) { /* traces of three JVMs, passes in three orders */
        size_t n = argc > 4 ? strtoul(argv[4], NULL, 10) : 60000, pass = argc > 5 ? strtoul(argv[5], NULL, 10) : 600;
        if (!n || !pass) {
            fprintf(stderr, "fleet: TRACES and PASS must be positive\n");
            return 2;
        }
        for (int order = FLEET_TOGETHER; order <= FLEET_CALLEES_FIRST; order++) {
            bench_fleet(n, pass, (fleet_order_t)order, false);
            bench_fleet(n, pass, (fleet_order_t)order, true);
        }
        return 0;
    }
    if (argc > 3 && !strcmp(argv[3], "hosts")) { /* workers in separate store roots: 1, then 2 */
        data_t d;
        make_data(&d, argc > 4 ? strtoul(argv[4], NULL, 10) : 64, argc > 5 ? strtoul(argv[5], NULL, 10) : 16000);
        double one = bench_workers(argv[1], argv[2], &d, 1, 1, true);
        double two = bench_workers(argv[1], argv[2], &d, 2, 1, true);
        printf("2 workers / 1 worker (separate store roots): %.2fx\n", one > 0 ? two / one : 0.0);
        free_data(&d);
        return 0;
    }
    data_t big, d;
    make_data(&big, batch, nbatches * 4); /* the store stage is not bound by the broker */
    bench_assembly();
    bench_store(&big, true);
    bench_store(&big, false);
    for (size_t k = 0; k < big.ntraces; k++)
        synth_seg_free(&big.segs[k]);
    free(big.segs);
    make_data(&d, batch, nbatches);
    bench_workers(argv[1], argv[2], &d, 1, 0, false);
    bench_workers(argv[1], argv[2], &d, 2, 0, false);
    bench_workers(argv[1], argv[2], &d, 1, 1, false);
    bench_workers(argv[1], argv[2], &d, 2, 1, false);
    for (size_t k = 0; k < d.ntraces; k++)
        synth_seg_free(&d.segs[k]);
    free(d.segs);
    return 0;
}

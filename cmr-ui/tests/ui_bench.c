/*
 * ui_bench.c - requests per second and latency of cmr-ui's JSON API (issue #14): the
 * trace list and one large trace, under concurrent keep-alive clients, while a worker
 * ingests at full speed and 1,000 idle connections stay open on cmr-ui; the same requests
 * straight to cmr-ingest's HTTP API (the server cmr-ui passes them to) are the peer
 * measured in the same run. Not a test: it prints a table (docs/benchmarks.md, "Web UI
 * and JSON API").
 *
 *  1. the embedded broker (a cmr-broker process); cmr.events pre-filled with SMALL_TRACES
 *     small traces (5 calls each, spread over the last 10 minutes) and one large trace
 *     of 100,000 calls (200,000 events, one segment, batches of 4,096 events);
 *  2. one `cmr-ingest run` worker process (HTTP API and /metrics on free ports), waited
 *     for until it stored all of it (the large trace answers with its 200,000 events);
 *  3. cmr-ui in this process (cmr_ui_start, free port, ui.ingest_url = the worker);
 *  4. IDLE connections to cmr-ui opened and left idle until the end (checked at the end);
 *  5. a producer thread sending more small traces to cmr.events as fast as the broker
 *     takes them, for the whole measurement; per scenario, the events it produced and the
 *     events the worker applied (its /metrics) per second, and its consumer lag;
 *  6. per scenario, CLIENTS threads, each with its own keep-alive connection, GET one
 *     target for SECONDS: every request's latency; non-200 answers and failed
 *     connections are counted as errors; meanwhile one more connection asks GET /health
 *     of the same server every 20 ms (is the server still responsive?);
 *  7. GET /health on a fresh connection to cmr-ui with the idle connections open, before
 *     the load;
 *  8. once the producer stopped and the worker caught up, the four scenarios again (the
 *     worker idle): what the ingest costs the queries.
 *
 * Usage: cmr-ui-bench CMR-BROKER CMR-INGEST [SECONDS [CLIENTS [IDLE [SMALL_TRACES]]]]
 *        defaults 10 s, 50 clients, 1,000 idle connections, 3,000 small traces
 * Everything binds 127.0.0.1 on free ports; the temporary store is removed at exit
 * (CMR_BENCH_KEEP=1 keeps it and the worker's log).
 */
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <arpa/inet.h>

#include "broker_proc.h"
#include "cmr/buf.h"
#include "cmr/clock.h"
#include "cmr/ids.h"
#include "cmr/kafka.h"
#include "cmr/log.h"
#include "cmr/msg.h"
#include "cmr/ui.h"
#include "cp_support.h"
#include "ing_synth.h"

#define LARGE_CALLS 100000
#define LARGE_BATCH 4096
#define SMALL_CALLS 5

static int fail(const char *why);

/* --- a small HTTP/1.1 keep-alive client ------------------------------------------------ */

typedef struct conn {
    int fd;
    int port;
    char *buf; /* the head (and whatever came with it) */
    size_t cap, len;
} conn_t;

static int tcp_connect(int port, int timeout_s)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct timeval tv = {timeout_s, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void conn_close(conn_t *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->len = 0;
}

static void conn_free(conn_t *c)
{
    conn_close(c);
    free(c->buf);
    c->buf = NULL;
}

/* Makes at least n bytes available at c->buf + *pos, moving what is left to the front of
 * the buffer first (*pos becomes 0 then). false when the connection ended or failed. */
static bool fill(conn_t *c, size_t *pos, size_t n)
{
    while (c->len - *pos < n) {
        if (*pos) {
            memmove(c->buf, c->buf + *pos, c->len - *pos);
            c->len -= *pos;
            *pos = 0;
        }
        if (c->len == c->cap)
            return false;
        ssize_t r = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
        if (r <= 0)
            return false;
        c->len += (size_t)r;
    }
    return true;
}

/* Reads a chunked body from c->buf + *pos on ("<hex>\r\n<bytes>\r\n" ... "0\r\n\r\n"),
 * into body when not NULL; *total its length. 0, or -1. */
static int read_chunked(conn_t *c, size_t *pos, cmr_buf_t *body, size_t *total)
{
    for (;;) {
        char *eol;
        while (!(eol = c->len > *pos ? memmem(c->buf + *pos, c->len - *pos, "\r\n", 2) : NULL))
            if (!fill(c, pos, c->len - *pos + 1))
                return -1;
        size_t size = strtoul(c->buf + *pos, NULL, 16);
        *pos = (size_t)(eol - c->buf) + 2;
        if (size == 0)
            break;
        while (size) {
            if (c->len == *pos && !fill(c, pos, 1))
                return -1;
            size_t take = c->len - *pos < size ? c->len - *pos : size;
            if (body)
                cmr_buf_put(body, c->buf + *pos, take);
            *pos += take;
            size -= take;
            *total += take;
        }
        if (!fill(c, pos, 2))
            return -1;
        *pos += 2;
    }
    if (!fill(c, pos, 2)) /* the empty trailer */
        return -1;
    *pos += 2;
    return 0;
}

/* GET target on c (connecting when needed; answers time out after 120 s). The status, or
 * -1 when the connection failed (then closed: the next call reconnects). The body goes to
 * `body` when not NULL, else it is read and dropped; *body_len its length either way. */
static int http_get(conn_t *c, const char *target, cmr_buf_t *body, size_t *body_len)
{
    *body_len = 0;
    if (c->fd < 0 && (c->fd = tcp_connect(c->port, 120)) < 0)
        return -1;
    if (!c->buf) {
        c->cap = 1 << 16;
        if (!(c->buf = malloc(c->cap)))
            return -1;
    }
    char req[2048];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nAccept: application/json\r\n\r\n",
                     target, c->port);
    if (n < 0 || (size_t)n >= sizeof req || send(c->fd, req, (size_t)n, MSG_NOSIGNAL) != n)
        goto fail;
    char *end = NULL;
    while (!(end = c->len ? memmem(c->buf, c->len, "\r\n\r\n", 4) : NULL)) {
        if (c->len == c->cap)
            goto fail; /* a head over 64 KiB */
        ssize_t r = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
        if (r <= 0)
            goto fail;
        c->len += (size_t)r;
    }
    size_t head = (size_t)(end + 4 - c->buf);
    *end = '\0'; /* the head as a string (the "\r\n\r\n" is not needed any more) */
    int status = -1;
    const char *cl = NULL;
    if (sscanf(c->buf, "HTTP/1.%*d %d", &status) != 1)
        goto fail;
    bool chunked = false;
    for (const char *line = strstr(c->buf, "\r\n"); line; line = strstr(line + 2, "\r\n")) {
        if (!strncasecmp(line + 2, "Content-Length:", 15))
            cl = line + 17;
        if (!strncasecmp(line + 2, "Transfer-Encoding: chunked", 26))
            chunked = true;
    }
    if (chunked) { /* cmr-ingest sends a large tree as it writes it */
        bool closing_c = strcasestr(c->buf, "\r\nConnection: close") != NULL;
        size_t pos = head, total = 0;
        if (read_chunked(c, &pos, body, &total) != 0)
            goto fail;
        memmove(c->buf, c->buf + pos, c->len - pos);
        c->len -= pos;
        *body_len = total;
        if (closing_c)
            conn_close(c);
        return status;
    }
    if (!cl)
        goto fail; /* neither a length nor chunks */
    bool closing = strcasestr(c->buf, "\r\nConnection: close") != NULL;
    size_t want = strtoull(cl, NULL, 10), have = c->len - head;
    size_t first = have < want ? have : want;
    if (body)
        cmr_buf_put(body, c->buf + head, first);
    size_t got = first;
    char scratch[1 << 16];
    while (got < want) {
        size_t room = want - got;
        ssize_t r = body ? (!cmr_buf_reserve(body, room) ? -1 : recv(c->fd, body->data + body->len, room, 0))
                         : recv(c->fd, scratch, room < sizeof scratch ? room : sizeof scratch, 0);
        if (r <= 0)
            goto fail;
        if (body)
            body->len += (size_t)r;
        got += (size_t)r;
    }
    /* anything after the body belongs to the next answer (never happens without pipelining) */
    size_t rest = c->len - head - first;
    memmove(c->buf, c->buf + head + first, rest);
    c->len = rest;
    *body_len = want;
    if (closing)
        conn_close(c);
    return status;
fail:
    conn_close(c);
    return -1;
}

/* GET on a fresh connection; the body (malloc'd, NUL-terminated) into *out. */
static int http_get_once(int port, const char *target, char **out)
{
    conn_t c = {.fd = -1, .port = port};
    cmr_buf_t b = {0};
    size_t len;
    int st = http_get(&c, target, &b, &len);
    conn_free(&c);
    cmr_buf_putc(&b, '\0');
    *out = cmr_buf_take(&b);
    return st;
}

/* --- data ---------------------------------------------------------------------------------- */

/* The producer keeps at most BACKLOG events ahead of what the worker applied (its
 * /metrics, scraped every 50 ms by the monitor thread): the worker never runs dry, and the
 * producer takes no more of the two cores than feeding it needs. Unbounded, the producer
 * (several M events/s into the broker) starved the worker and every server on this
 * machine. */
#define BACKLOG 300000

static uint64_t agent;
static int metrics_port;
static atomic_bool producing, monitoring;
static atomic_uint_fast64_t produced_events, produced_batches, produce_errors, producer_wait_ns;
static atomic_uint_fast64_t applied_events; /* the worker's cmr_ingest_events_total, last scraped */
static uint64_t prefilled;

/* A small trace: a root and 4 calls below it (A > B, C > D), 1 us apart, one batch. */
static void small_trace(synth_seg_t *s, uint64_t k, uint64_t start_ns)
{
    uint8_t tid[16];
    cmr_random_bytes(tid, 16);
    synth_seg_init(s, tid, agent, k + 1, (int64_t)(k % 64), "http-worker", NULL);
    uint64_t t = start_ns, m = 10 + (k % 50) * 4;
    synth_enter(s, 1 + k % 5, t);
    synth_enter(s, m, t += 1000);
    synth_enter(s, m + 1, t += 1000);
    synth_exit(s, m + 1, t += 5000);
    synth_exit(s, m, t += 1000);
    synth_enter(s, m + 2, t += 1000);
    synth_enter(s, m + 3, t += 1000);
    synth_exit(s, m + 3, t += 20000);
    synth_exit(s, m + 2, t += 1000);
    synth_exit(s, 1 + k % 5, t += 1000);
}

/* The large trace: one segment, a root and 99,999 calls below it in groups of 3 (A, with B
 * then C under it), over 300 methods, 1 us per event. */
static void large_trace(synth_seg_t *s, const uint8_t tid[16], uint64_t start_ns)
{
    synth_seg_init(s, tid, agent, 1000000, 7, "batch-job", NULL);
    uint64_t t = start_ns, calls = 1;
    synth_enter(s, 500, t);
    for (uint64_t g = 0; calls + 3 <= LARGE_CALLS; g++, calls += 3) {
        uint64_t m = 1000 + g % 100 * 4;
        synth_enter(s, m, t += 1000);
        synth_enter(s, m + 1, t += 1000);
        synth_exit(s, m + 1, t += 1000);
        synth_enter(s, m + 2, t += 1000);
        synth_exit(s, m + 2, t += 1000);
        synth_exit(s, m, t += 1000);
    }
    for (; calls < LARGE_CALLS; calls++) {
        synth_enter(s, 1003, t += 1000);
        synth_exit(s, 1003, t += 1000);
    }
    synth_exit(s, 500, t += 1000);
}

static int send_batches(cmr_producer_t *p, const synth_seg_t *s, size_t per_batch)
{
    char err[512];
    cmr_event_batch_t *b;
    size_t n = synth_batches(s, per_batch, &b);
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        int r;
        while ((r = cmr_producer_send_batch(p, &b[i], NULL, err, sizeof err)) == CMR_SEND_QUEUE_FULL)
            cmr_producer_flush(p, 10);
        if (r != CMR_SEND_OK) {
            fprintf(stderr, "send: %s\n", err);
            rc = -1;
        }
    }
    synth_batches_free(b, n);
    return rc;
}

/* Pre-fills cmr.events. The number of events sent. */
static uint64_t prefill(const cmr_conf_t *conf, size_t nsmall, const uint8_t large_id[16])
{
    char err[512];
    cmr_producer_t *p = cmr_producer_new(conf, "ui-bench-fill", NULL, NULL, err, sizeof err);
    if (!p) {
        exit(fail(err));
    }
    uint64_t now = (uint64_t)cmr_wall_ns(), events = 0;
    synth_seg_t s;
    for (size_t k = 0; k < nsmall; k++) {
        small_trace(&s, k, now - 600000000000ull + k * (600000000000ull / nsmall));
        events += s.count;
        send_batches(p, &s, 4096);
        synth_seg_free(&s);
    }
    large_trace(&s, large_id, now - 120000000000ull);
    events += s.count;
    send_batches(p, &s, LARGE_BATCH);
    synth_seg_free(&s);
    cmr_producer_flush(p, 60000);
    cmr_producer_destroy(p, 10000);
    return events;
}

/* The producer thread: small traces, stamped now, as fast as the broker takes them. */
static void *produce(void *opaque)
{
    const cmr_conf_t *conf = opaque;
    char err[512];
    cmr_producer_t *p = cmr_producer_new(conf, "ui-bench-live", NULL, NULL, err, sizeof err);
    if (!p) {
        fprintf(stderr, "producer: %s\n", err);
        atomic_fetch_add(&produce_errors, 1);
        return NULL;
    }
    synth_seg_t s;
    for (uint64_t k = 1000000; atomic_load(&producing); k++) {
        if (k % 64 == 0 && prefilled + atomic_load(&produced_events) > atomic_load(&applied_events) + BACKLOG) {
            int64_t t0 = cmr_mono_ns();
            while (atomic_load(&producing) &&
                   prefilled + atomic_load(&produced_events) > atomic_load(&applied_events) + BACKLOG / 2)
                cmr_sleep_ms(2);
            atomic_fetch_add(&producer_wait_ns, (uint64_t)(cmr_mono_ns() - t0));
        }
        small_trace(&s, k, (uint64_t)cmr_wall_ns());
        if (send_batches(p, &s, 4096) != 0)
            atomic_fetch_add(&produce_errors, 1);
        atomic_fetch_add(&produced_events, s.count);
        atomic_fetch_add(&produced_batches, 1);
        synth_seg_free(&s);
    }
    cmr_producer_flush(p, 30000);
    cmr_producer_destroy(p, 10000);
    return NULL;
}

/* --- the worker ---------------------------------------------------------------------------- */

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    cmr_buf_t b = {0};
    char chunk[8192];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        cmr_buf_put(&b, chunk, n);
    fclose(f);
    cmr_buf_putc(&b, '\0');
    return cmr_buf_take(&b);
}

/* The port of `event=NAME ... port=N` in the log, waiting up to 30 s; -1 when none. */
static int log_port(const cp_proc_t *w, const char *event)
{
    char needle[128];
    snprintf(needle, sizeof needle, "event=%s", event);
    if (cp_proc_wait_log(w, needle, 30000) != 0)
        return -1;
    char *text = slurp(w->log);
    const char *e = text ? strstr(text, needle) : NULL;
    const char *eol = e ? strchr(e, '\n') : NULL;
    const char *p = e ? strstr(e, " port=") : NULL;
    int port = p && (!eol || p < eol) ? atoi(p + 6) : -1;
    free(text);
    return port;
}

typedef struct worker_stats {
    uint64_t events;    /* cmr_ingest_events_total */
    uint64_t lag;       /* sum of cmr_consumer_lag_messages over cmr.events */
    uint64_t lag_parts; /* partitions in it */
    int ok;
} worker_stats_t;

static worker_stats_t scrape(void)
{
    worker_stats_t s = {0};
    char *text = NULL;
    if (http_get_once(metrics_port, "/metrics", &text) == 200) {
        s.ok = 1;
        for (char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
            if (!strncmp(line, "cmr_ingest_events_total ", 24))
                s.events = strtoull(line + 24, NULL, 10);
            else if (!strncmp(line, "cmr_consumer_lag_messages{", 26)) {
                char *close = strchr(line, '}');
                char *nl = strchr(line, '\n');
                if (close && (!nl || close < nl) && memmem(line, (size_t)(close - line), "cmr.events", 10)) {
                    s.lag += strtoull(close + 1, NULL, 10);
                    s.lag_parts++;
                }
            }
        }
    }
    free(text);
    return s;
}

/* The monitor thread: the worker's applied events every 50 ms. */
static void *monitor(void *opaque)
{
    (void)opaque;
    while (atomic_load(&monitoring)) {
        worker_stats_t w = scrape();
        if (w.ok)
            atomic_store(&applied_events, w.events);
        cmr_sleep_ms(50);
    }
    return NULL;
}

/* --- scenarios ----------------------------------------------------------------------------- */

typedef struct lat {
    int64_t *ns;
    size_t n, cap;
} lat_t;

static void lat_add(lat_t *l, int64_t ns)
{
    if (cmr_array_grow(&l->ns, &l->cap, l->n + 1, sizeof *l->ns, 1024) != 0)
        abort();
    l->ns[l->n++] = ns;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static double pct_ms(lat_t *l, double p)
{
    if (!l->n)
        return 0;
    size_t i = (size_t)(p * (double)l->n);
    if (i >= l->n)
        i = l->n - 1;
    return (double)l->ns[i] / 1e6;
}

typedef struct client {
    pthread_t th;
    int port;
    const char *target;
    lat_t lat;
    uint64_t ok, non200, failed, bytes;
    int last_bad_status;
} client_t;

static atomic_int started;
static _Atomic int64_t deadline_ns; /* 0 until every client is connected */

static void *client_run(void *opaque)
{
    client_t *c = opaque;
    conn_t conn = {.fd = -1, .port = c->port};
    /* connect before the clock starts; a failure here is counted at the first request */
    conn.fd = tcp_connect(c->port, 120);
    atomic_fetch_add(&started, 1);
    int64_t deadline;
    while (!(deadline = atomic_load(&deadline_ns)))
        cmr_sleep_ms(1);
    while (cmr_mono_ns() < deadline) {
        size_t len;
        int64_t t0 = cmr_mono_ns();
        int st = http_get(&conn, c->target, NULL, &len);
        int64_t dt = cmr_mono_ns() - t0;
        lat_add(&c->lat, dt);
        if (st == 200) {
            c->ok++;
            c->bytes += len;
        } else if (st < 0) {
            c->failed++;
            cmr_sleep_ms(10); /* no busy loop against a refusing server */
        } else {
            c->non200++;
            c->last_bad_status = st;
        }
    }
    conn_free(&conn);
    return NULL;
}

typedef struct probe {
    pthread_t th;
    int port;
    atomic_bool stop;
    lat_t lat;
    uint64_t errors;
} probe_t;

static void *probe_run(void *opaque)
{
    probe_t *p = opaque;
    conn_t conn = {.fd = -1, .port = p->port};
    while (!atomic_load(&p->stop)) {
        size_t len;
        int64_t t0 = cmr_mono_ns();
        int st = http_get(&conn, "/health", NULL, &len);
        lat_add(&p->lat, cmr_mono_ns() - t0);
        if (st != 200)
            p->errors++;
        cmr_sleep_ms(20);
    }
    conn_free(&conn);
    return NULL;
}

typedef struct result {
    const char *server, *what;
    int clients;
    double seconds, rps, p50, p99, max, bytes;
    uint64_t requests, ok, non200, failed;
    int last_bad_status;
    double health_p50, health_p99, health_max;
    size_t health_n;
    uint64_t health_errors;
    double produced_eps, ingested_eps, producer_waited;
    uint64_t lag_end;
    int worker_ok;
} result_t;

static result_t run_scenario(const char *server, const char *what, int port, const char *target, int seconds,
                             int nclients)
{
    result_t r = {.server = server, .what = what, .clients = nclients};
    client_t *cs = calloc((size_t)nclients, sizeof *cs);
    probe_t pr = {.port = port};
    atomic_store(&started, 0);
    atomic_store(&deadline_ns, 0);
    for (int i = 0; i < nclients; i++) {
        cs[i].port = port;
        cs[i].target = target;
    }
    /* the clients connect first; the clock starts when all are connected */
    for (int i = 0; i < nclients; i++)
        pthread_create(&cs[i].th, NULL, client_run, &cs[i]);
    while (atomic_load(&started) < nclients)
        cmr_sleep_ms(1);
    worker_stats_t w0 = scrape();
    int64_t t0 = cmr_mono_ns();
    atomic_store(&deadline_ns, t0 + (int64_t)seconds * 1000000000);
    uint64_t p0 = atomic_load(&produced_events), pw0 = atomic_load(&producer_wait_ns);
    pthread_create(&pr.th, NULL, probe_run, &pr);
    for (int i = 0; i < nclients; i++)
        pthread_join(cs[i].th, NULL);
    int64_t t1 = cmr_mono_ns();
    uint64_t p1 = atomic_load(&produced_events), pw1 = atomic_load(&producer_wait_ns);
    worker_stats_t w1 = scrape();
    atomic_store(&pr.stop, true);
    pthread_join(pr.th, NULL);
    r.seconds = (double)(t1 - t0) / 1e9;
    lat_t all = {0};
    for (int i = 0; i < nclients; i++) {
        for (size_t k = 0; k < cs[i].lat.n; k++)
            lat_add(&all, cs[i].lat.ns[k]);
        r.ok += cs[i].ok;
        r.non200 += cs[i].non200;
        r.failed += cs[i].failed;
        r.bytes += (double)cs[i].bytes;
        if (cs[i].last_bad_status)
            r.last_bad_status = cs[i].last_bad_status;
        free(cs[i].lat.ns);
    }
    free(cs);
    r.requests = all.n;
    r.bytes = r.ok ? r.bytes / (double)r.ok : 0;
    r.rps = (double)r.ok / r.seconds;
    qsort(all.ns, all.n, sizeof *all.ns, cmp_i64);
    r.p50 = pct_ms(&all, 0.50);
    r.p99 = pct_ms(&all, 0.99);
    r.max = all.n ? (double)all.ns[all.n - 1] / 1e6 : 0;
    free(all.ns);
    qsort(pr.lat.ns, pr.lat.n, sizeof *pr.lat.ns, cmp_i64);
    r.health_n = pr.lat.n;
    r.health_p50 = pct_ms(&pr.lat, 0.50);
    r.health_p99 = pct_ms(&pr.lat, 0.99);
    r.health_max = pr.lat.n ? (double)pr.lat.ns[pr.lat.n - 1] / 1e6 : 0;
    r.health_errors = pr.errors;
    free(pr.lat.ns);
    r.worker_ok = w0.ok && w1.ok;
    r.produced_eps = (double)(p1 - p0) / r.seconds;
    r.ingested_eps = (double)(w1.events - w0.events) / r.seconds;
    r.lag_end = w1.lag;
    r.producer_waited = (double)(pw1 - pw0) / 1e9 / r.seconds;
    printf("  %-10s %-28s %6.1f req/s  p50 %8.2f ms  p99 %8.2f ms  max %8.2f ms  %10.0f B  errors %" PRIu64
           " (non-200 %" PRIu64 ", failed %" PRIu64 ")  /health p99 %.2f ms  produced %.0f ev/s, ingested %.0f ev/s, "
           "lag %" PRIu64 " batches, the producer waited for the worker %.0f%% of the time\n",
           server, what, r.rps, r.p50, r.p99, r.max, r.bytes, r.non200 + r.failed, r.non200, r.failed, r.health_p99,
           r.produced_eps, r.ingested_eps, r.lag_end, r.producer_waited * 100);
    fflush(stdout);
    return r;
}

/* --- main ---------------------------------------------------------------------------------- */

/* What a failed run leaves behind: stopped here (the broker holds the caller's stdout). */
static broker_proc_t broker;
static cp_proc_t worker = {.pid = -1};
static char dir[256]; /* the run's temporary directory (store, worker log) */

static int fail(const char *why)
{
    fprintf(stderr, "cmr-ui-bench: %s\n", why);
    if (worker.pid > 0) {
        cp_proc_dump_log(&worker, 30);
        cp_proc_stop(&worker);
    }
    broker_proc_stop(&broker);
    if (*dir && !getenv("CMR_BENCH_KEEP"))
        cp_rmrf(dir);
    return 1;
}

static void raise_fd_limit(size_t need)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < need) {
        rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need ? need : rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur < need)
            fprintf(stderr, "warning: open files limited to %llu, %zu wanted\n", (unsigned long long)rl.rlim_cur, need);
    }
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s CMR-BROKER CMR-INGEST [SECONDS [CLIENTS [IDLE [SMALL_TRACES]]]]\n", argv[0]);
        return 2;
    }
    int seconds = argc > 3 ? atoi(argv[3]) : 10;
    int nclients = argc > 4 ? atoi(argv[4]) : 50;
    int nidle = argc > 5 ? atoi(argv[5]) : 1000;
    size_t nsmall = argc > 6 ? strtoul(argv[6], NULL, 10) : 3000;
    if (seconds < 1 || nclients < 1 || nidle < 0 || nsmall < 1) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    raise_fd_limit((size_t)nidle * 2 + (size_t)nclients * 4 + 512); /* both ends of the idle ones live here */
    setvbuf(stdout, NULL, _IOLBF, 0);
    cmr_log_set_level(CMR_LOG_WARN);
    agent = cmr_agent_id("ui-bench", "host", NULL);

    cmr_conf_t *conf = broker_proc_start_conf(&broker, argv[1]);
    if (!conf) {
        fprintf(stderr, "the broker did not start\n");
        return 1;
    }
    char store[300], log[320], err[1024];
    if (cp_tmpdir(dir, sizeof dir) != 0) {
        *dir = '\0';
        return fail("no temporary directory");
    }
    snprintf(store, sizeof store, "%s/store", dir);
    snprintf(log, sizeof log, "%s/worker.log", dir);

    /* 1. the data, then the worker */
    uint8_t large_id[16];
    cmr_random_bytes(large_id, 16);
    char large_hex[33];
    cmr_hex(large_id, 16, large_hex);
    int64_t t = cmr_mono_ms();
    prefilled = prefill(conf, nsmall, large_id);
    printf("pre-filled cmr.events: %zu small traces (%d calls each) and one of %d calls (%s), %" PRIu64
           " events, in %.1f s\n",
           nsmall, SMALL_CALLS, LARGE_CALLS, large_hex, prefilled, (double)(cmr_mono_ms() - t) / 1e3);
    char group[64], setgroup[96];
    cp_unique("ui-bench", group, sizeof group);
    snprintf(setgroup, sizeof setgroup, "ingest.group=%s", group);
    const char *wargv[] = {argv[2],       "run",  "--bootstrap", broker.bootstrap, "--store", store,
                           "--http-port", "0",    "-X",          setgroup,         "-X",      "metrics.port=0",
                           "--log-level", "info", NULL};
    if (cp_proc_start(&worker, wargv, log) != 0)
        return fail("the worker did not start");
    int ingest_port = log_port(&worker, "ingest.http_listening");
    metrics_port = log_port(&worker, "metrics.listening");
    if (ingest_port <= 0 || metrics_port <= 0)
        return fail("the worker's ports are not in its log");
    char large_target[64];
    snprintf(large_target, sizeof large_target, "/api/traces/%s", large_hex);
    char want_events[48];
    snprintf(want_events, sizeof want_events, "\"events\":%d,", 2 * LARGE_CALLS);
    t = cmr_mono_ms();
    bool stored = false;
    size_t large_bytes = 0;
    while (!stored && cmr_mono_ms() - t < 300000) {
        worker_stats_t ws = scrape();
        char *body = NULL;
        if (ws.events >= prefilled && http_get_once(ingest_port, large_target, &body) == 200 &&
            strstr(body, want_events)) {
            stored = true;
            large_bytes = strlen(body);
        }
        free(body);
        if (!stored)
            cmr_sleep_ms(200);
    }
    if (!stored)
        return fail("the worker did not store the pre-filled traces within 300 s");
    char *list = NULL;
    int lst = http_get_once(ingest_port, "/api/traces?limit=1000", &list);
    size_t listed = 0;
    for (const char *p = list; p && (p = strstr(p, "\"trace_id\"")); p++)
        listed++;
    printf("worker stored them in %.1f s (HTTP API port %d); the large trace answers %zu bytes; "
           "/api/traces?limit=1000: %d, %zu traces\n",
           (double)(cmr_mono_ms() - t) / 1e3, ingest_port, large_bytes, lst, listed);
    free(list);

    /* 2. cmr-ui in this process */
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", ingest_port);
    cmr_conf_set(conf, "ui.ingest_url", url, "bench");
    cmr_conf_set(conf, "ui.port", "0", "bench");
    cmr_conf_set(conf, "ui.timeout_s", "3600", "bench"); /* the idle connections stay for the whole run */
    cmr_ui_t *ui = cmr_ui_start(conf, err, sizeof err);
    if (!ui)
        return fail(err);
    int ui_port = cmr_ui_port(ui);

    /* 3. the idle connections */
    int *idle = calloc((size_t)nidle + 1, sizeof *idle);
    int idle_open = 0;
    for (int i = 0; i < nidle; i++)
        if ((idle[i] = tcp_connect(ui_port, 5)) >= 0)
            idle_open++;
    cmr_sleep_ms(500); /* accepted by the server */
    printf("cmr-ui on port %d (ui.threads and ui.connections at their defaults: 8, 1100); %d of %d idle connections "
           "open\n",
           ui_port, idle_open, nidle);

    /* 4. /health on a fresh connection with the idle ones open, no other load */
    lat_t h = {0};
    uint64_t herr = 0;
    for (int i = 0; i < 200; i++) {
        char *b = NULL;
        int64_t t0 = cmr_mono_ns();
        if (http_get_once(ui_port, "/health", &b) != 200)
            herr++;
        lat_add(&h, cmr_mono_ns() - t0);
        free(b);
    }
    qsort(h.ns, h.n, sizeof *h.ns, cmp_i64);
    printf("GET /health on cmr-ui (fresh connection each, %d idle open, no load), 200 times: p50 %.3f ms, p99 %.3f "
           "ms, max %.3f ms, errors %" PRIu64 "\n",
           idle_open, pct_ms(&h, 0.5), pct_ms(&h, 0.99), (double)h.ns[h.n - 1] / 1e6, herr);

    /* 5. the producer, then the scenarios */
    atomic_store(&monitoring, true);
    pthread_t mon;
    pthread_create(&mon, NULL, monitor, NULL);
    atomic_store(&producing, true);
    pthread_t prod;
    pthread_create(&prod, NULL, produce, conf);
    cmr_sleep_ms(2000); /* the worker is busy before the clock starts */
    printf("scenarios (%d s each, %d clients with a keep-alive connection each; the producer sends small traces "
           "throughout):\n",
           seconds, nclients);
    result_t res[8];
    res[0] = run_scenario("cmr-ui", "/api/traces?limit=1000", ui_port, "/api/traces?limit=1000", seconds, nclients);
    res[1] =
        run_scenario("cmr-ingest", "/api/traces?limit=1000", ingest_port, "/api/traces?limit=1000", seconds, nclients);
    res[2] = run_scenario("cmr-ui", "/api/traces/<large>", ui_port, large_target, seconds, nclients);
    res[3] = run_scenario("cmr-ingest", "/api/traces/<large>", ingest_port, large_target, seconds, nclients);
    atomic_store(&producing, false);
    int64_t prod_stop = cmr_mono_ms();
    pthread_join(prod, NULL);
    atomic_store(&monitoring, false);
    pthread_join(mon, NULL);
    uint64_t total = prefilled + atomic_load(&produced_events);

    /* did the worker keep up? the backlog when the producer stopped, and how long it took to drain */
    worker_stats_t ws = scrape();
    uint64_t backlog_events = total > ws.events ? total - ws.events : 0;
    while (ws.events < total && cmr_mono_ms() - prod_stop < 120000) {
        cmr_sleep_ms(200);
        ws = scrape();
    }
    double drain = (double)(cmr_mono_ms() - prod_stop) / 1e3;

    /* the same with the worker idle (nothing produced): what the ingest costs the queries */
    printf("the same with the worker idle:\n");
    res[4] = run_scenario("cmr-ui", "/api/traces?limit=1000", ui_port, "/api/traces?limit=1000", seconds, nclients);
    res[5] =
        run_scenario("cmr-ingest", "/api/traces?limit=1000", ingest_port, "/api/traces?limit=1000", seconds, nclients);
    res[6] = run_scenario("cmr-ui", "/api/traces/<large>", ui_port, large_target, seconds, nclients);
    res[7] = run_scenario("cmr-ingest", "/api/traces/<large>", ingest_port, large_target, seconds, nclients);

    /* idle connections still open? */
    int still = 0;
    for (int i = 0; i < nidle; i++) {
        if (idle[i] < 0)
            continue;
        struct pollfd p = {idle[i], POLLIN, 0};
        char c;
        if (poll(&p, 1, 0) == 0 || recv(idle[i], &c, 1, MSG_DONTWAIT) > 0)
            still++;
    }

    printf(
        "\n| worker | server | request | clients | requests/s | p50 ms | p99 ms | max ms | bytes per answer | errors | "
        "/health p50 / p99 / max ms during |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < 8; i++) {
        result_t *r = &res[i];
        char errs[96];
        if (r->non200 + r->failed == 0)
            snprintf(errs, sizeof errs, "0 of %" PRIu64, r->requests);
        else
            snprintf(errs, sizeof errs, "%" PRIu64 " of %" PRIu64 " (non-200 %" PRIu64 " last %d, failed %" PRIu64 ")",
                     r->non200 + r->failed, r->requests, r->non200, r->last_bad_status, r->failed);
        printf("| %s | %s | `%s` | %d | %.1f | %.1f | %.1f | %.1f | %.0f | %s | %.2f / %.2f / %.2f (%zu, %" PRIu64
               " errors) |\n",
               i < 4 ? "ingesting" : "idle", r->server, r->what, r->clients, r->rps, r->p50, r->p99, r->max, r->bytes,
               errs, r->health_p50, r->health_p99, r->health_max, r->health_n, r->health_errors);
    }
    printf("\n| during | events produced/s | events applied by the worker/s | producer waiting for the worker | "
           "consumer lag at end (batches) |\n|---|---|---|---|---|\n");
    for (int i = 0; i < 4; i++)
        printf("| %s `%s` | %.0f | %.0f | %.0f %% | %s%" PRIu64 " |\n", res[i].server, res[i].what, res[i].produced_eps,
               res[i].ingested_eps, res[i].producer_waited * 100, res[i].worker_ok ? "" : "(scrape failed) ",
               res[i].lag_end);
    printf("\nproducer: %" PRIu64 " events (%" PRIu64 " traces) during the scenarios, %" PRIu64
           " send errors; when it stopped the worker was %" PRIu64 " events behind; %s after %.1f s (%" PRIu64
           " of %" PRIu64 " events applied)\n",
           atomic_load(&produced_events), atomic_load(&produced_batches), atomic_load(&produce_errors), backlog_events,
           ws.events >= total ? "caught up" : "NOT caught up", drain, ws.events, total);
    printf("idle connections to cmr-ui still open at the end: %d of %d\n", still, idle_open);

    for (int i = 0; i < nidle; i++)
        if (idle[i] >= 0)
            close(idle[i]);
    free(idle);
    free(h.ns);
    cmr_ui_stop(ui);
    cp_proc_stop(&worker);
    broker_proc_stop(&broker);
    cmr_conf_destroy(conf);
    if (getenv("CMR_BENCH_KEEP"))
        printf("store and worker log kept in %s\n", dir);
    else
        cp_rmrf(dir);
    return 0;
}

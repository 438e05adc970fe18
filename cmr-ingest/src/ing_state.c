/*
 * ing_state.c - per-trace incremental state kept by the engine while a trace receives
 * batches, and the summary derived from it (what the trace index stores).
 *
 * The state knows every (agent, segment, batch_seq) it has seen, so a redelivered batch
 * is recognised and changes nothing. Every derived value (time range, root, counts,
 * completeness, the sets of agents and methods) is a function of the set of batches
 * seen, not of their order: a replay in another order ends in the same summary.
 *
 * Summary encoding (little endian): trace(16) start(8) end(8) root_method(8)
 * root_agent(8) root_thread(8) events(8) dropped(8) segments(4) agents(4) flags(4)
 * (CMR_TRACE_SUMMARY_LEN bytes: every summary written before diagnoses existed, and every
 * trace without diagnoses and http data), then, only when flags has CMR_TRACE_TRUNCATED,
 * calls_not_recorded(8) truncated_by(4) (no summary written before had that flag, so the
 * parts after it are where they were), then, when the trace carries diagnosis ids or
 * http data: ndiagnoses(4) (0 allowed only before http data) and the ids (8 each,
 * ascending) -- exactly that length is a summary written before http data existed --,
 * then, only with http data: version(1)=1 status(2) method_len(2) method path_len(2) path.
 * The length tells which: old stores read unchanged. Decoding checks every value as the
 * batches' were checked (ing_attrs.c).
 *
 * Loss: what the segments did not record (EventBatch.calls_not_recorded, truncated_by) is
 * summed over the batches (each counted once), like events and dropped; a state rebuilt
 * from stored batches, which do not carry it, gets the stored summary's back
 * (cmr_trace_state_seed_loss). The root segment arrived without its root call (its first
 * batch lost): CMR_TRACE_ROOT_LOST, never a root method of 0 shown as a method.
 *
 * Diagnoses: a batch's diagnosis_id (EventBatch, 0 = none) goes into a set of at most
 * CMR_TRACE_MAX_DIAGNOSES ids, the smallest ones (a function of the set of batches).
 *
 * Http data (EventBatch.attributes, validated by cmr_ingest_batch_from_msg): kept per
 * segment that may be the trace's root (no parent, or a foreign one), per key from the
 * batch with the lowest batch_seq that carried it, so that the values are a function of
 * the set of batches; the summary takes its root segment's. A state rebuilt from stored
 * batches (which do not carry them) gets the stored summary's back on its root segment
 * (cmr_trace_state_seed_http): a segment's batches come in order on one partition, so a
 * segment that becomes the root later brings its values with its own new batches.
 *
 * Ownership: the state owns its arrays and its method set; cmr_trace_state_free()
 * releases them.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/buf.h"
#include "cmr/event.h"
#include "cmr/ids.h"
#include "cmr/ingest.h"
#include "cmr/map.h"

typedef struct st_seg {
    uint64_t agent, segment;
    bool has_parent;
    uint64_t parent_agent, parent_segment;
    int64_t parent_seq;
    int64_t thread_id;
    uint64_t root_method;
    int64_t root_start;
    bool have_first;
    int32_t last_seq; /* -1 until the last batch arrived */
    uint32_t nseen;
    uint8_t *bits; /* seen batch_seq bitmap */
    size_t nbytes;
    cmr_trace_http_t *http;           /* owned, NULL until a root candidate carries data */
    int32_t http_seq[CMR_HTTP__KEYS]; /* the batch each value came from (-1: seeded) */
} st_seg_t;

struct cmr_trace_state {
    uint8_t trace_id[16];
    int64_t start_ns, end_ns;
    uint64_t events, dropped;
    uint64_t not_recorded; /* calls the segments did not record */
    uint32_t truncated_by;
    st_seg_t *segs; /* sorted by (agent, segment) */
    size_t nsegs, capsegs;
    cmr_u64map_t methods; /* set of the methods entered (values unused) */
    uint64_t *agents;     /* few: a linear list */
    size_t nagents, capagents;
    uint64_t diags[CMR_TRACE_MAX_DIAGNOSES]; /* ascending */
    uint32_t ndiags;
    uint64_t forks; /* FORK events of the batches seen: hand-offs a child segment may name */
};

cmr_trace_state_t *cmr_trace_state_new(const uint8_t trace_id[16])
{
    cmr_trace_state_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    memcpy(s->trace_id, trace_id, 16);
    s->start_ns = INT64_MAX;
    s->end_ns = INT64_MIN;
    return s;
}

void cmr_trace_state_free(cmr_trace_state_t *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->nsegs; i++) {
        free(s->segs[i].bits);
        free(s->segs[i].http);
    }
    free(s->segs);
    cmr_u64map_free(&s->methods);
    free(s->agents);
    free(s);
}

void cmr_trace_state_each_id(const cmr_trace_state_t *s, cmr_trace_new_id_fn *on_agent, cmr_trace_new_id_fn *on_method,
                             void *opaque)
{
    for (size_t i = 0; i < s->nagents; i++)
        on_agent(opaque, s->agents[i]);
    size_t it = 0;
    uint64_t id;
    void *v;
    while (cmr_u64map_next(&s->methods, &it, &id, &v))
        on_method(opaque, id);
}

size_t cmr_trace_state_bytes(const cmr_trace_state_t *s)
{
    size_t n = sizeof *s + s->capsegs * sizeof(st_seg_t) + s->methods.cap * sizeof(cmr_u64map_slot_t) +
               s->capagents * sizeof *s->agents;
    for (size_t i = 0; i < s->nsegs; i++)
        n += s->segs[i].nbytes + (s->segs[i].http ? sizeof *s->segs[i].http : 0);
    return n;
}

/* Index of the first segment not before (agent, segment): segs are sorted. */
static size_t seg_lower_bound(const cmr_trace_state_t *s, uint64_t agent, uint64_t segment)
{
    size_t lo = 0, hi = s->nsegs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const st_seg_t *m = &s->segs[mid];
        if (m->agent < agent || (m->agent == agent && m->segment < segment))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static bool seg_at(const cmr_trace_state_t *s, size_t i, uint64_t agent, uint64_t segment)
{
    return i < s->nsegs && s->segs[i].agent == agent && s->segs[i].segment == segment;
}

static st_seg_t *get_seg(cmr_trace_state_t *s, uint64_t agent, uint64_t segment, bool *created)
{
    size_t lo = seg_lower_bound(s, agent, segment);
    *created = false;
    if (seg_at(s, lo, agent, segment))
        return &s->segs[lo];
    if (CMR_ARRAY_GROW(s->segs, s->capsegs, s->nsegs + 1) != 0)
        return NULL;
    memmove(&s->segs[lo + 1], &s->segs[lo], (s->nsegs - lo) * sizeof *s->segs);
    s->nsegs++;
    st_seg_t *g = &s->segs[lo];
    memset(g, 0, sizeof *g);
    g->agent = agent;
    g->segment = segment;
    g->last_seq = -1;
    *created = true;
    return g;
}

/* 1 when seq was not seen before (and is now marked), 0 when it was, -1 out of memory. */
static int mark_seen(st_seg_t *g, int32_t seq)
{
    assert(seq >= 0); /* checked by cmr_ingest_batch_from_msg / _decode */
    size_t byte = (size_t)seq / 8, old = g->nbytes;
    if (cmr_array_grow(&g->bits, &g->nbytes, byte + 1, 1, 8) != 0)
        return -1;
    if (g->nbytes > old)
        memset(g->bits + old, 0, g->nbytes - old);
    uint8_t bit = (uint8_t)(1u << (seq % 8));
    if (g->bits[byte] & bit)
        return 0;
    g->bits[byte] |= bit;
    g->nseen++;
    return 1;
}

/* 1 when the method is new to the trace, 0 when known (or 0: no method), -1 out of memory. */
static int add_method(cmr_trace_state_t *s, uint64_t id)
{
    if (!id)
        return 0;
    bool created;
    if (!cmr_u64map_get_slot(&s->methods, id, &created))
        return -1;
    return created;
}

static int add_agent(cmr_trace_state_t *s, uint64_t id)
{
    for (size_t i = 0; i < s->nagents; i++)
        if (s->agents[i] == id)
            return 0;
    if (CMR_ARRAY_GROW(s->agents, s->capagents, s->nagents + 1) != 0)
        return -1;
    s->agents[s->nagents++] = id;
    return 1;
}

/* A segment whose data the trace may keep: no parent in this trace, or a foreign one. */
static bool root_candidate(const st_seg_t *g)
{
    return !g->has_parent || (g->parent_agent == 0 && g->parent_seq == -1);
}

/* Sets key k of the segment's data from batch seq unless a batch before it gave one. */
static int put_http(st_seg_t *g, cmr_http_key_t k, int32_t seq, const char *v, uint16_t status)
{
    if (!g->http) {
        if (!(g->http = calloc(1, sizeof *g->http)))
            return -1;
        for (int i = 0; i < CMR_HTTP__KEYS; i++)
            g->http_seq[i] = INT32_MAX;
    }
    if (seq >= g->http_seq[k])
        return 0;
    g->http_seq[k] = seq;
    if (k == CMR_HTTP_STATUS) {
        g->http->status = status;
        return 0;
    }
    char *dst = k == CMR_HTTP_METHOD ? g->http->method : g->http->path;
    size_t len = strnlen(v, CMR_TRACE_HTTP_MAX); /* checked: at most that */
    memset(dst, 0, CMR_TRACE_HTTP_MAX + 1);
    memcpy(dst, v, len);
    return 0;
}

/* The segment of an async request's completion (cmr/ids.h): its status is the request's. */
static bool completes_request(const st_seg_t *g)
{
    return g->has_parent && g->have_first && cmr_method_is_async_completion(g->root_method);
}

static int take_http(st_seg_t *g, const cmr_ingest_batch_t *b)
{
    if (!root_candidate(g) && !completes_request(g))
        return 0; /* a child segment's request is not the trace's */
    if ((b->http_method && put_http(g, CMR_HTTP_METHOD, b->batch_seq, b->http_method, 0) != 0) ||
        (b->http_path && put_http(g, CMR_HTTP_PATH, b->batch_seq, b->http_path, 0) != 0) ||
        (b->http_status && put_http(g, CMR_HTTP_STATUS, b->batch_seq, NULL, b->http_status) != 0))
        return -1;
    return 0;
}

int cmr_trace_state_add_diagnosis(cmr_trace_state_t *s, uint64_t id)
{
    if (!id)
        return 0;
    uint32_t i = 0;
    while (i < s->ndiags && s->diags[i] < id)
        i++;
    if (i == CMR_TRACE_MAX_DIAGNOSES || (i < s->ndiags && s->diags[i] == id))
        return 0;
    uint32_t keep = s->ndiags < CMR_TRACE_MAX_DIAGNOSES ? s->ndiags : CMR_TRACE_MAX_DIAGNOSES - 1;
    memmove(&s->diags[i + 1], &s->diags[i], (keep - i) * sizeof *s->diags);
    s->diags[i] = id;
    s->ndiags = keep + 1;
    return 1;
}

int cmr_trace_state_apply(cmr_trace_state_t *s, const cmr_ingest_batch_t *b, cmr_trace_new_id_fn *on_agent,
                          cmr_trace_new_id_fn *on_method, void *opaque)
{
    bool created;
    st_seg_t *g = get_seg(s, b->agent_id, b->segment_id, &created);
    if (!g)
        return -1;
    int r = mark_seen(g, b->batch_seq);
    if (r <= 0)
        return r;
    if (created || b->batch_seq == 0) {
        g->has_parent = b->has_parent;
        g->parent_agent = b->parent_agent;
        g->parent_segment = b->parent_segment;
        g->parent_seq = b->parent_seq;
        g->thread_id = b->thread_id;
    }
    if (b->last)
        g->last_seq = b->batch_seq;
    s->events += b->event_count;
    s->dropped += (uint64_t)b->dropped;
    s->not_recorded += b->calls_not_recorded;
    s->truncated_by |= b->truncated_by;
    cmr_trace_state_add_diagnosis(s, b->diagnosis_id);
    int ra = add_agent(s, b->agent_id);
    if (ra < 0)
        return -1;
    if (ra && on_agent)
        on_agent(opaque, b->agent_id);
    /* a new trace's set of methods gets room for its first batch's at once (at most one
     * per two events), up to a table of 64 slots; beyond that it grows as it fills */
    size_t room = b->event_count / 2 + 1;
    if (!s->methods.count && cmr_u64map_reserve(&s->methods, room < 44 ? room : 44))
        return -1;
    uint64_t last_method = 0;
    cmr_events_decoder_t d; /* the block was checked when the batch arrived */
    cmr_events_decoder_init(&d, b->events, b->events_len, b->event_count);
    cmr_event_t ev;
    for (uint32_t i = 0; cmr_events_decoder_next(&d, &ev) == 1; i++) {
        int64_t ts = (int64_t)ev.timestamp_ns;
        if (ts < s->start_ns)
            s->start_ns = ts;
        if (ts > s->end_ns)
            s->end_ns = ts;
        s->forks += ev.kind == CMR_EVENT_FORK;
        if (i == 0 && b->first_event_seq == 0 && ev.kind == CMR_EVENT_ENTER) {
            g->have_first = true;
            g->root_method = ev.method_id;
            g->root_start = ts;
        }
        if (ev.method_id == last_method || ev.kind != CMR_EVENT_ENTER)
            continue;
        last_method = ev.method_id;
        int rm = add_method(s, ev.method_id);
        if (rm < 0)
            return -1;
        if (rm && on_method)
            on_method(opaque, ev.method_id);
    }
    if (take_http(g, b) != 0) /* after the events: the segment's root call is known */
        return -1;
    return 1;
}

bool cmr_trace_state_awaits_children(const cmr_trace_state_t *s)
{
    uint64_t children = 0;
    for (size_t i = 0; i < s->nsegs; i++)
        children += !root_candidate(&s->segs[i]); /* continues a hand-off of this trace */
    return s->forks > children;
}

/* The completion of root's request when it was answered asynchronously: the latest
 * completion segment under root that carries a status; NULL when none. */
static const st_seg_t *completion_of(const cmr_trace_state_t *s, const st_seg_t *root)
{
    const st_seg_t *c = NULL;
    for (size_t i = 0; i < s->nsegs; i++) {
        const st_seg_t *g = &s->segs[i];
        if (g->parent_segment == root->segment && g->parent_agent == root->agent && g->http && g->http->status &&
            completes_request(g) && (!c || g->root_start > c->root_start))
            c = g;
    }
    return c;
}

static bool better_root(const st_seg_t *a, const st_seg_t *b)
{
    if (a->have_first != b->have_first)
        return a->have_first;
    if (a->have_first && a->root_start != b->root_start)
        return a->root_start < b->root_start;
    return a->agent < b->agent || (a->agent == b->agent && a->segment < b->segment);
}

static bool has_seg(const cmr_trace_state_t *s, uint64_t agent, uint64_t segment)
{
    return seg_at(s, seg_lower_bound(s, agent, segment), agent, segment);
}

/* The trace's root segment (NULL when none arrived); *remote_root, *complete as the
 * summary says them. */
static st_seg_t *find_root(const cmr_trace_state_t *s, bool *remote_root, bool *complete_out)
{
    const st_seg_t *root = NULL, *remote = NULL;
    bool complete = true;
    for (size_t i = 0; i < s->nsegs; i++) {
        const st_seg_t *g = &s->segs[i];
        if (g->last_seq < 0 || g->nseen != (uint32_t)g->last_seq + 1)
            complete = false;
        if (!g->has_parent) {
            if (!root || better_root(g, root))
                root = g;
        } else if (g->parent_agent == 0 && g->parent_seq == -1) {
            if (!remote || better_root(g, remote))
                remote = g;
        } else if (!has_seg(s, g->parent_agent, g->parent_segment)) {
            complete = false;
        }
    }
    *remote_root = !root && remote;
    *complete_out = complete;
    return (st_seg_t *)(root ? root : remote);
}

void cmr_trace_state_summary(const cmr_trace_state_t *s, cmr_trace_summary_t *out)
{
    memset(out, 0, sizeof *out);
    memcpy(out->trace_id, s->trace_id, 16);
    out->start_ns = s->nsegs && s->start_ns != INT64_MAX ? s->start_ns : 0;
    out->end_ns = s->nsegs && s->end_ns != INT64_MIN ? s->end_ns : out->start_ns;
    out->events = s->events;
    out->dropped = s->dropped;
    out->segments = (uint32_t)s->nsegs;
    out->agents = (uint32_t)s->nagents;
    out->ndiagnoses = s->ndiags;
    memcpy(out->diagnoses, s->diags, s->ndiags * sizeof *s->diags);
    bool remote, complete;
    const st_seg_t *root = find_root(s, &remote, &complete);
    if (remote)
        out->flags |= CMR_TRACE_REMOTE_ROOT;
    if (s->not_recorded || s->truncated_by) {
        out->flags |= CMR_TRACE_TRUNCATED;
        out->calls_not_recorded = s->not_recorded;
        out->truncated_by = s->truncated_by;
    }
    if (root) {
        out->flags |= CMR_TRACE_HAS_ROOT;
        if (!root->have_first)
            out->flags |= CMR_TRACE_ROOT_LOST;
        out->root_method = root->root_method;
        out->root_agent = root->agent;
        out->root_thread = root->thread_id;
        if (root->http)
            out->http = *root->http;
        const st_seg_t *c = completion_of(s, root);
        if (c) /* an async request: answered when it completed, not when service returned */
            out->http.status = c->http->status;
    }
    if (complete && root)
        out->flags |= CMR_TRACE_COMPLETE;
}

int cmr_trace_state_seed_http(cmr_trace_state_t *s, const cmr_trace_http_t *h)
{
    bool remote, complete;
    st_seg_t *root = find_root(s, &remote, &complete);
    if (!root || !cmr_trace_http_known(h))
        return 0;
    if ((h->method[0] && put_http(root, CMR_HTTP_METHOD, -1, h->method, 0) != 0) ||
        (h->path[0] && put_http(root, CMR_HTTP_PATH, -1, h->path, 0) != 0) ||
        (h->status && put_http(root, CMR_HTTP_STATUS, -1, NULL, h->status) != 0))
        return -1;
    return 0;
}

void cmr_ingest_batch_loss(const cmr_event_batch_t *m, cmr_ingest_batch_t *out)
{
    out->calls_not_recorded = m->calls_not_recorded > 0 ? (uint64_t)m->calls_not_recorded : 0;
    out->truncated_by = (uint32_t)m->truncated_by & (CMR_TRUNCATED_BY_LIMIT | CMR_TRUNCATED_BY_RING);
}

void cmr_trace_state_seed_loss(cmr_trace_state_t *s, const cmr_trace_summary_t *sum)
{
    if (!(sum->flags & CMR_TRACE_TRUNCATED))
        return;
    s->not_recorded = sum->calls_not_recorded;
    s->truncated_by = sum->truncated_by;
}

static void put_le16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static uint16_t get_le16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static void put64(uint8_t **p, uint64_t v)
{
    cmr_put_le64(*p, v);
    *p += 8;
}

size_t cmr_trace_summary_encode(const cmr_trace_summary_t *s, uint8_t out[CMR_TRACE_SUMMARY_MAX_LEN])
{
    uint8_t *p = out;
    memcpy(p, s->trace_id, 16);
    p += 16;
    put64(&p, (uint64_t)s->start_ns);
    put64(&p, (uint64_t)s->end_ns);
    put64(&p, s->root_method);
    put64(&p, s->root_agent);
    put64(&p, (uint64_t)s->root_thread);
    put64(&p, s->events);
    put64(&p, s->dropped);
    cmr_put_le32(p, s->segments);
    cmr_put_le32(p + 4, s->agents);
    cmr_put_le32(p + 8, s->flags);
    p = out + CMR_TRACE_SUMMARY_LEN;
    if (s->flags & CMR_TRACE_TRUNCATED) {
        put64(&p, s->calls_not_recorded);
        cmr_put_le32(p, s->truncated_by);
        p += 4;
    }
    size_t base = (size_t)(p - out);
    assert(s->ndiagnoses <= CMR_TRACE_MAX_DIAGNOSES);
    bool http = cmr_trace_http_known(&s->http);
    if (!s->ndiagnoses && !http)
        return base;
    cmr_put_le32(p, s->ndiagnoses);
    p += 4;
    for (uint32_t i = 0; i < s->ndiagnoses; i++)
        put64(&p, s->diagnoses[i]);
    if (!http)
        return (size_t)(p - out);
    size_t ml = strnlen(s->http.method, CMR_TRACE_HTTP_MAX), pl = strnlen(s->http.path, CMR_TRACE_HTTP_MAX);
    *p++ = 1; /* version */
    put_le16(p, s->http.status);
    put_le16(p + 2, (uint16_t)ml);
    memcpy(p + 4, s->http.method, ml);
    p += 4 + ml;
    put_le16(p, (uint16_t)pl);
    memcpy(p + 2, s->http.path, pl);
    p += 2 + pl;
    assert((size_t)(p - out) <= CMR_TRACE_SUMMARY_MAX_LEN);
    return (size_t)(p - out);
}

/* The http part of a stored summary (v, len bytes, after the diagnoses). 0 or -1. */
static int decode_http(const uint8_t *v, size_t len, cmr_trace_http_t *h)
{
    if (len < 7 || v[0] != 1)
        return -1;
    uint16_t status = get_le16(v + 1);
    size_t ml = get_le16(v + 3);
    if (ml > CMR_TRACE_HTTP_MAX || 5 + ml + 2 > len)
        return -1;
    size_t pl = get_le16(v + 5 + ml);
    if (pl > CMR_TRACE_HTTP_MAX || 7 + ml + pl != len)
        return -1;
    memcpy(h->method, v + 5, ml);
    memcpy(h->path, v + 7 + ml, pl);
    h->status = status;
    if (memchr(h->method, 0, ml) || memchr(h->path, 0, pl) || !cmr_trace_http_known(h) || !cmr_trace_http_valid(h))
        return -1; /* never written */
    return 0;
}

int cmr_trace_summary_decode(const uint8_t *v, size_t len, cmr_trace_summary_t *s)
{
    memset(s, 0, sizeof *s);
    if (len < CMR_TRACE_SUMMARY_LEN)
        return -1;
    size_t base = CMR_TRACE_SUMMARY_LEN;
    if (cmr_le32(v + 80) & CMR_TRACE_TRUNCATED) { /* flags */
        if (len < base + CMR_TRACE_SUMMARY_LOSS_LEN)
            return -1;
        s->calls_not_recorded = cmr_le64(v + base);
        s->truncated_by = cmr_le32(v + base + 8);
        base += CMR_TRACE_SUMMARY_LOSS_LEN;
    }
    if (len != base) {
        if (len < base + 4)
            return -1;
        uint32_t n = cmr_le32(v + base);
        size_t diag_end = base + 4 + 8 * (size_t)n;
        if (n > CMR_TRACE_MAX_DIAGNOSES || len < diag_end || (len == diag_end && n < 1))
            return -1; /* never written: a count without ids nor http data after it */
        if (len > diag_end && decode_http(v + diag_end, len - diag_end, &s->http) != 0)
            return -1;
        for (uint32_t i = 0; i < n; i++) {
            uint64_t id = cmr_le64(v + base + 4 + 8 * i);
            if (!id || (i && id <= s->diagnoses[i - 1]))
                return -1; /* never written: ascending, non-zero */
            s->diagnoses[i] = id;
        }
        s->ndiagnoses = n;
    }
    memcpy(s->trace_id, v, 16);
    const uint8_t *p = v + 16;
    s->start_ns = (int64_t)cmr_le64(p);
    s->end_ns = (int64_t)cmr_le64(p + 8);
    s->root_method = cmr_le64(p + 16);
    s->root_agent = cmr_le64(p + 24);
    s->root_thread = (int64_t)cmr_le64(p + 32);
    s->events = cmr_le64(p + 40);
    s->dropped = cmr_le64(p + 48);
    s->segments = cmr_le32(p + 56);
    s->agents = cmr_le32(p + 60);
    s->flags = cmr_le32(p + 64);
    return 0;
}

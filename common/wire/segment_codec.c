/*
 * segment_codec.c - several segment batches in one EventBatch message (the layout is in
 * cmr/event.h, "several segment batches in one message"; the reasons in
 * docs/ARCHITECTURE.md, "Event encoding").
 *
 * The agent's publisher writes one message per Kafka partition and pass with a
 * cmr_segs_writer: each segment's header coded against the previous one's (a segment id
 * difference, the trace and thread only when they change — a trace id that follows the
 * previous one as the probe makes them, the same random prefix and the next counter, as a
 * small step — sequence numbers only past a segment's first batch), and its events with the event codec, whose dictionary spans the
 * message. cmr-ingest reads it with a cmr_segs_reader, which checks every rule in one pass
 * and hands each segment batch out re-encoded on its own, as the store keeps it (a stored
 * batch decodes without its message).
 *
 * Ownership: writer and reader own their buffers; what they hand out points into them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/event.h"

enum {
    F_LAST = 1,
    F_PARENT = 2,
    F_TRACE = 4,
    F_THREAD = 8,
    F_SEQ = 16,
    F_EXTRAS = 32,
    F_PARENT_AGENT = 64,
    F_TRACE_NEXT = 128, /* the trace id follows the previous one: same first 8 bytes, the
                           last 8 (big endian) a varint step above the previous's */
};

/* The largest step F_TRACE_NEXT codes (3 varint bytes); beyond it the 16 bytes go. */
#define TRACE_STEP_MAX ((uint64_t)1 << 21)

enum {
    X_DROPPED = 1,
    X_DIAGNOSIS = 2,
    X_NOT_RECORDED = 4,
    X_TRUNCATED_BY = 8,
    X_ATTRS = 16,
    X_NODE_ATTRS = 32,
};

static inline uint64_t zigzag(int64_t v)
{
    return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

static inline int64_t unzigzag(uint64_t v)
{
    return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

/* --- writer -------------------------------------------------------------------------------- */

void cmr_segs_writer_begin_layout(cmr_segs_writer_t *w, int64_t agent_id, uint32_t layout)
{
    cmr_events_encoder_begin_layout(&w->enc, layout);
    cmr_buf_reset(&w->out);
    w->segments = w->events = 0;
    w->agent_id = agent_id;
    w->prev_segment = w->prev_thread = 0;
    w->prev_base = 0;
    free(w->prev_name);
    w->prev_name = NULL;
}

void cmr_segs_writer_begin(cmr_segs_writer_t *w, int64_t agent_id)
{
    cmr_segs_writer_begin_layout(w, agent_id, CMR_EVENTS_LAYOUT_PACKED);
}

void cmr_segs_writer_free(cmr_segs_writer_t *w)
{
    cmr_buf_free(&w->out);
    free(w->prev_name);
    w->prev_name = NULL;
}

static void put_bytes(cmr_buf_t *o, const char *s, size_t n)
{
    cmr_buf_put_varint(o, n);
    cmr_buf_put(o, s, n);
}

static void put_le64(cmr_buf_t *o, uint64_t v)
{
    uint8_t b[8];
    cmr_put_le64(b, v);
    cmr_buf_put(o, b, 8);
}

static unsigned extras_of(const cmr_event_batch_t *b)
{
    return (b->dropped > 0 ? X_DROPPED : 0) | (b->diagnosis_id ? X_DIAGNOSIS : 0) |
           (b->calls_not_recorded > 0 ? X_NOT_RECORDED : 0) | (b->truncated_by > 0 ? X_TRUNCATED_BY : 0) |
           (b->attributes.count ? X_ATTRS : 0) | (b->node_attrs.count ? X_NODE_ATTRS : 0);
}

/* The thread name as the writer keeps it (NULL: none yet), compared with b's. */
static bool same_thread(const cmr_segs_writer_t *w, const cmr_event_batch_t *b)
{
    const char *name = b->thread_name ? b->thread_name : "";
    return w->segments && w->prev_thread == b->thread_id && w->prev_name && !strcmp(w->prev_name, name);
}

/* A string cut at max bytes, on a UTF-8 character's start. */
static void put_cut(cmr_buf_t *o, const char *s, size_t max)
{
    size_t n = s ? strlen(s) : 0;
    if (n > max) {
        n = max;
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--;
    }
    put_bytes(o, s ? s : "", n);
}

static void put_node_attrs(cmr_buf_t *o, const cmr_event_batch_t *b)
{
    size_t n = b->node_attrs.count < CMR_SEGS_MAX_NODE_ATTRS ? b->node_attrs.count : CMR_SEGS_MAX_NODE_ATTRS;
    cmr_buf_put_varint(o, n);
    for (size_t i = 0; i < n; i++) {
        const cmr_node_attr_t *a = &b->node_attrs.items[i];
        cmr_buf_put_varint(o, zigzag((int64_t)((uint64_t)a->event_seq - (uint64_t)b->first_event_seq)));
        put_cut(o, a->key, CMR_SEGS_MAX_NAME);
        put_cut(o, a->value, CMR_SEGS_MAX_NODE_VALUE);
    }
}

static void put_extras(cmr_buf_t *o, const cmr_event_batch_t *b, unsigned x)
{
    cmr_buf_putc(o, (char)x);
    if (x & X_DROPPED)
        cmr_buf_put_varint(o, (uint64_t)b->dropped);
    if (x & X_DIAGNOSIS)
        put_le64(o, (uint64_t)b->diagnosis_id);
    if (x & X_NOT_RECORDED)
        cmr_buf_put_varint(o, (uint64_t)b->calls_not_recorded);
    if (x & X_TRUNCATED_BY)
        cmr_buf_put_varint(o, (uint64_t)b->truncated_by);
    if (x & X_ATTRS) {
        size_t n = b->attributes.count < CMR_SEGS_MAX_ATTRS ? b->attributes.count : CMR_SEGS_MAX_ATTRS;
        cmr_buf_put_varint(o, n);
        for (size_t i = 0; i < n; i++) {
            const char *k = b->attributes.items[i].key ? b->attributes.items[i].key : "";
            const char *v = b->attributes.items[i].value ? b->attributes.items[i].value : "";
            size_t kl = strlen(k), vl = strlen(v);
            put_bytes(o, k, kl < CMR_SEGS_MAX_NAME ? kl : CMR_SEGS_MAX_NAME);
            put_bytes(o, v, vl < CMR_SEGS_MAX_NAME ? vl : CMR_SEGS_MAX_NAME);
        }
    }
    if (x & X_NODE_ATTRS)
        put_node_attrs(o, b);
}

static int put_header(cmr_segs_writer_t *w, const cmr_event_batch_t *b, uint32_t count, uint64_t base)
{
    cmr_buf_t *o = &w->out;
    bool thread = !same_thread(w, b), trace = !w->segments || memcmp(w->prev_trace, b->trace_id, 16);
    /* a local trace id is the thread's random prefix and a counter (the probe's
     * beginSegment): the next trace of the same thread is a small step */
    uint64_t step = trace && w->segments && !memcmp(w->prev_trace, b->trace_id, 8)
                        ? cmr_be64(b->trace_id + 8) - cmr_be64(w->prev_trace + 8)
                        : 0;
    bool next = step > 0 && step < TRACE_STEP_MAX;
    bool seq = b->batch_seq != 0 || b->first_event_seq != 0;
    unsigned x = extras_of(b);
    bool pagent = b->parent && b->parent->agent_id != w->agent_id;
    cmr_buf_putc(o, (char)((b->last ? F_LAST : 0) | (b->parent ? F_PARENT : 0) | (trace && !next ? F_TRACE : 0) |
                           (thread ? F_THREAD : 0) | (seq ? F_SEQ : 0) | (x ? F_EXTRAS : 0) |
                           (pagent ? F_PARENT_AGENT : 0) | (next ? F_TRACE_NEXT : 0)));
    cmr_buf_put_varint(o, zigzag((int64_t)((uint64_t)b->segment_id - (uint64_t)w->prev_segment)));
    if (seq) {
        cmr_buf_put_varint(o, (uint64_t)(uint32_t)b->batch_seq);
        cmr_buf_put_varint(o, (uint64_t)b->first_event_seq);
    }
    if (thread) {
        const char *name = b->thread_name ? b->thread_name : "";
        size_t len = strlen(name);
        if (len > CMR_SEGS_MAX_NAME)
            len = CMR_SEGS_MAX_NAME;
        cmr_buf_put_varint(o, zigzag(b->thread_id));
        put_bytes(o, name, len);
        char *copy = malloc(len + 1);
        if (!copy)
            return -1;
        memcpy(copy, name, len);
        copy[len] = '\0';
        free(w->prev_name);
        w->prev_name = copy;
        w->prev_thread = b->thread_id;
    }
    if (next)
        cmr_buf_put_varint(o, step);
    else if (trace)
        cmr_buf_put(o, b->trace_id, 16);
    if (b->parent) {
        if (pagent)
            put_le64(o, (uint64_t)b->parent->agent_id);
        cmr_buf_put_varint(o, zigzag((int64_t)((uint64_t)b->parent->segment_id - (uint64_t)b->segment_id)));
        cmr_buf_put_varint(o, zigzag(b->parent->event_seq));
    }
    if (x)
        put_extras(o, b, x);
    cmr_buf_put_varint(o, count);
    if (count)
        cmr_buf_put_varint(o, zigzag((int64_t)(base - w->prev_base)));
    if (!w->segments)
        memcpy(w->first_trace, b->trace_id, 16);
    memcpy(w->prev_trace, b->trace_id, 16);
    w->prev_segment = b->segment_id;
    return 0;
}

int cmr_segs_writer_add(cmr_segs_writer_t *w, const cmr_event_batch_t *b, const uint8_t *records, uint32_t count)
{
    uint64_t base = count ? cmr_le64(records + 8) : w->prev_base;
    if (put_header(w, b, count, base) != 0)
        return -1;
    if (count) {
        w->prev_base = base;
        cmr_events_encoder_segment(&w->enc, base);
        uint8_t *q = cmr_buf_append(&w->out, (size_t)count * CMR_EVENTS_MAX_ENCODED);
        if (!q)
            return -1;
        size_t n = 0;
        for (uint32_t i = 0; i < count; i++) {
            cmr_event_t ev;
            cmr_event_read(records, i, &ev);
            size_t one = cmr_events_encoder_put(&w->enc, &ev, q + n);
            if (!one)
                return -1;
            n += one;
        }
        cmr_buf_truncate(&w->out, w->out.len - (size_t)count * CMR_EVENTS_MAX_ENCODED + n);
    }
    if (!cmr_buf_ok(&w->out))
        return -1;
    w->segments++;
    w->events += count;
    return 0;
}

void cmr_segs_writer_msg(const cmr_segs_writer_t *w, cmr_event_msg_t *m)
{
    memset(m, 0, sizeof *m);
    m->agent_id = w->agent_id;
    m->segment_count = (int32_t)w->segments;
    m->event_count = (int32_t)w->events;
    m->segments.data = w->out.data;
    m->segments.len = w->out.len;
    m->event_layout = (int32_t)w->enc.layout;
    memcpy(m->key_trace_id, w->first_trace, 16);
}

/* --- reader -------------------------------------------------------------------------------- */

void cmr_segs_reader_init(cmr_segs_reader_t *r, const cmr_event_msg_t *m)
{
    r->p = m->segments.data;
    r->end = m->segments.data + m->segments.len;
    if (!r->p)
        r->p = r->end = (const uint8_t *)"";
    r->left = m->segment_count < 0 ? 0 : (uint32_t)m->segment_count;
    r->events_left = m->event_count < 0 ? 0 : (uint32_t)m->event_count;
    r->agent_id = m->agent_id;
    r->prev_segment = r->prev_thread = 0;
    r->prev_base = 0;
    r->first = true;
    r->error[0] = '\0';
    cmr_events_decoder_init(&r->dec, r->p, 0, 0);
    r->dec.layout = (uint32_t)m->event_layout;
    if (m->segment_count < 0 || m->event_count < 0)
        snprintf(r->error, sizeof r->error, "negative segment_count %d or event_count %d", m->segment_count,
                 m->event_count);
    else if (m->event_layout != CMR_EVENTS_LAYOUT_BASIC && m->event_layout != CMR_EVENTS_LAYOUT_PACKED)
        snprintf(r->error, sizeof r->error, "unknown event_layout %d", m->event_layout);
}

void cmr_segs_reader_free(cmr_segs_reader_t *r)
{
    cmr_buf_free(&r->name);
    cmr_buf_free(&r->strings);
    cmr_buf_free(&r->block);
}

static int bad(cmr_segs_reader_t *r, const char *why)
{
    if (!r->error[0])
        snprintf(r->error, sizeof r->error, "segment %u from the end: %s", r->left, why);
    return -1;
}

/* A varint length and that many bytes, appended to buf with a NUL; the offset in *at. */
static int get_string(cmr_segs_reader_t *r, cmr_buf_t *buf, size_t *at)
{
    uint64_t len;
    if (cmr_get_varint(&r->p, r->end, &len) || len > CMR_SEGS_MAX_NAME || len > (uint64_t)(r->end - r->p))
        return bad(r, "truncated or oversized string");
    *at = buf->len;
    cmr_buf_put(buf, r->p, (size_t)len);
    cmr_buf_putc(buf, '\0');
    r->p += len;
    return cmr_buf_ok(buf) ? 0 : bad(r, "out of memory");
}

static int get_u64(cmr_segs_reader_t *r, uint64_t *v, uint64_t max)
{
    return cmr_get_varint(&r->p, r->end, v) || *v > max ? -1 : 0;
}

static int get_le64(cmr_segs_reader_t *r, uint64_t *v)
{
    if (r->end - r->p < 8)
        return -1;
    *v = cmr_le64(r->p);
    r->p += 8;
    return 0;
}

/* The strings of the extras go into r->strings, which may move while they are read: their
 * offsets are kept (r->at) and made pointers once all are in (point_extras). */
static int get_attrs(cmr_segs_reader_t *r, cmr_event_batch_t *b)
{
    uint64_t n;
    if (get_u64(r, &n, CMR_SEGS_MAX_ATTRS) || !n)
        return bad(r, "bad attribute count");
    for (uint64_t i = 0; i < 2 * n; i++)
        if (get_string(r, &r->strings, &r->at[i]))
            return -1;
    b->attributes.items = r->attrs;
    b->attributes.count = (size_t)n;
    return 0;
}

static int get_node_attrs(cmr_segs_reader_t *r, cmr_event_batch_t *b)
{
    uint64_t n, d;
    if (get_u64(r, &n, CMR_SEGS_MAX_NODE_ATTRS) || !n)
        return bad(r, "bad call attribute count");
    size_t *at = r->at + 2 * CMR_SEGS_MAX_ATTRS;
    for (uint64_t i = 0; i < n; i++) {
        if (cmr_get_varint(&r->p, r->end, &d))
            return bad(r, "truncated call attribute");
        int64_t seq = (int64_t)((uint64_t)b->first_event_seq + (uint64_t)unzigzag(d));
        if (seq < 0)
            return bad(r, "call attribute before the segment's first event");
        r->node_attrs[i].event_seq = seq;
        if (get_string(r, &r->strings, &at[2 * i]) || get_string(r, &r->strings, &at[2 * i + 1]))
            return -1;
        if (r->strings.len - at[2 * i + 1] - 1 > CMR_SEGS_MAX_NODE_VALUE)
            return bad(r, "oversized call attribute value");
    }
    b->node_attrs.items = r->node_attrs;
    b->node_attrs.count = (size_t)n;
    return 0;
}

/* The extras' strings, read: their pointers (the buffer no longer moves). */
static void point_extras(cmr_segs_reader_t *r, cmr_event_batch_t *b)
{
    char *base = (char *)r->strings.data;
    for (size_t i = 0; i < b->attributes.count; i++)
        r->attrs[i] = (cmr_kv_t){base + r->at[2 * i], base + r->at[2 * i + 1]};
    const size_t *at = r->at + 2 * CMR_SEGS_MAX_ATTRS;
    for (size_t i = 0; i < b->node_attrs.count; i++) {
        r->node_attrs[i].key = base + at[2 * i];
        r->node_attrs[i].value = base + at[2 * i + 1];
    }
}

static int get_extras(cmr_segs_reader_t *r, cmr_event_batch_t *b)
{
    if (r->p == r->end)
        return bad(r, "truncated extras");
    unsigned x = *r->p++;
    uint64_t v;
    if (!x || x > 63)
        return bad(r, "bad extras byte");
    if (x & X_DROPPED) {
        if (get_u64(r, &v, INT32_MAX))
            return bad(r, "bad dropped count");
        b->dropped = (int32_t)v;
    }
    if (x & X_DIAGNOSIS) {
        if (get_le64(r, &v))
            return bad(r, "truncated diagnosis id");
        b->diagnosis_id = (int64_t)v;
    }
    if (x & X_NOT_RECORDED) {
        if (get_u64(r, &v, INT64_MAX))
            return bad(r, "bad calls_not_recorded");
        b->calls_not_recorded = (int64_t)v;
    }
    if (x & X_TRUNCATED_BY) {
        if (get_u64(r, &v, INT32_MAX))
            return bad(r, "bad truncated_by");
        b->truncated_by = (int32_t)v;
    }
    if (((x & X_ATTRS) && get_attrs(r, b)) || ((x & X_NODE_ATTRS) && get_node_attrs(r, b)))
        return -1;
    point_extras(r, b);
    return 0;
}

static int get_thread(cmr_segs_reader_t *r)
{
    uint64_t v;
    size_t at;
    if (cmr_get_varint(&r->p, r->end, &v))
        return bad(r, "truncated thread id");
    r->prev_thread = unzigzag(v);
    cmr_buf_reset(&r->name);
    return get_string(r, &r->name, &at);
}

static int get_parent(cmr_segs_reader_t *r, uint8_t flags, cmr_event_batch_t *b)
{
    uint64_t agent = (uint64_t)r->agent_id, seg, seq;
    if ((flags & F_PARENT_AGENT) && get_le64(r, &agent))
        return bad(r, "truncated parent agent");
    if (cmr_get_varint(&r->p, r->end, &seg) || cmr_get_varint(&r->p, r->end, &seq))
        return bad(r, "truncated parent link");
    r->parent.agent_id = (int64_t)agent;
    r->parent.segment_id = (int64_t)((uint64_t)b->segment_id + (uint64_t)unzigzag(seg));
    r->parent.event_seq = unzigzag(seq);
    b->parent = &r->parent;
    return 0;
}

static int get_header(cmr_segs_reader_t *r, cmr_event_batch_t *b, uint32_t *count)
{
    if (r->p == r->end)
        return bad(r, "fewer segments than segment_count");
    uint8_t flags = *r->p++;
    uint64_t v, v2;
    if ((flags & (F_TRACE | F_TRACE_NEXT)) == (F_TRACE | F_TRACE_NEXT))
        return bad(r, "a trace id both whole and as a step");
    if (r->first && (flags & (F_TRACE | F_THREAD)) != (F_TRACE | F_THREAD))
        return bad(r, "the first segment names no trace or thread");
    if (!(flags & F_PARENT) && (flags & F_PARENT_AGENT))
        return bad(r, "a parent agent without a parent");
    if (cmr_get_varint(&r->p, r->end, &v))
        return bad(r, "truncated segment id");
    b->segment_id = (int64_t)((uint64_t)r->prev_segment + (uint64_t)unzigzag(v));
    if (flags & F_SEQ) {
        if (get_u64(r, &v, 1 << 24) || get_u64(r, &v2, INT64_MAX))
            return bad(r, "bad batch_seq or first_event_seq");
        b->batch_seq = (int32_t)v;
        b->first_event_seq = (int64_t)v2;
    }
    if ((flags & F_THREAD) && get_thread(r))
        return -1;
    if (flags & F_TRACE) {
        if (r->end - r->p < 16)
            return bad(r, "truncated trace id");
        memcpy(r->prev_trace, r->p, 16);
        r->p += 16;
    } else if (flags & F_TRACE_NEXT) {
        if (get_u64(r, &v, TRACE_STEP_MAX - 1) || v == 0)
            return bad(r, "bad trace id step");
        cmr_put_be64(r->prev_trace + 8, cmr_be64(r->prev_trace + 8) + v);
    }
    if ((flags & F_PARENT) && get_parent(r, flags, b))
        return -1;
    if ((flags & F_EXTRAS) && get_extras(r, b))
        return -1;
    if (get_u64(r, &v, r->events_left))
        return bad(r, "bad event count (more than event_count left)");
    *count = (uint32_t)v;
    if (*count) {
        if (cmr_get_varint(&r->p, r->end, &v2))
            return bad(r, "truncated time base");
        r->prev_base += (uint64_t)unzigzag(v2);
    }
    b->last = flags & F_LAST;
    b->thread_id = r->prev_thread;
    b->thread_name = (char *)cmr_buf_str(&r->name);
    memcpy(b->trace_id, r->prev_trace, 16);
    r->prev_segment = b->segment_id;
    r->first = false;
    return 0;
}

/* Decodes the segment's count events with the message's dictionary and encodes them again
 * on their own into r->block. */
static int get_events(cmr_segs_reader_t *r, uint32_t count, cmr_event_batch_t *b)
{
    cmr_buf_reset(&r->block);
    uint8_t *q = count ? cmr_buf_append(&r->block, (size_t)count * CMR_EVENTS_MAX_ENCODED) : NULL;
    if (count && !q)
        return bad(r, "out of memory");
    cmr_events_decoder_segment(&r->dec, r->p, r->end, count, r->prev_base);
    cmr_events_encoder_begin(&r->enc);
    size_t n = 0;
    for (uint32_t i = 0; i < count; i++) {
        cmr_event_t ev;
        if (cmr_events_decoder_next(&r->dec, &ev) != 1) {
            char why[96];
            snprintf(why, sizeof why, "events: %s", r->dec.error ? r->dec.error : "?");
            return bad(r, why);
        }
        n += cmr_events_encoder_put(&r->enc, &ev, q + n); /* kinds 1-4: never 0 */
    }
    if (count)
        r->p = r->dec.p;
    b->event_count = (int32_t)count;
    b->packed_events.data = q;
    b->packed_events.len = n;
    r->events_left -= count;
    return 0;
}

int cmr_segs_reader_next(cmr_segs_reader_t *r, cmr_event_batch_t *b)
{
    if (r->error[0])
        return -1;
    if (!r->left) {
        if (r->p != r->end)
            return bad(r, "bytes after the last segment");
        if (r->events_left)
            return bad(r, "fewer events than event_count");
        return 0;
    }
    memset(b, 0, sizeof *b);
    b->agent_id = r->agent_id;
    cmr_buf_reset(&r->strings);
    uint32_t count;
    if (get_header(r, b, &count) || get_events(r, count, b))
        return -1;
    r->left--;
    return 1;
}

/* --- conveniences ---------------------------------------------------------------------------- */

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *c = malloc(n);
    if (c)
        memcpy(c, s, n);
    return c;
}

/* A deep copy of a reader's segment batch into d (owned by d: cmr_segs_batches_free). */
static int copy_batch(cmr_event_batch_t *d, const cmr_event_batch_t *s)
{
    *d = *s;
    d->thread_name = dup_str(s->thread_name);
    d->parent = NULL;
    d->node_attrs = (cmr_node_attrs_t){NULL, 0}; /* set below: never the reader's */
    d->packed_events.data = malloc(s->packed_events.len + 1);
    d->attributes.items = s->attributes.count ? calloc(s->attributes.count, sizeof(cmr_kv_t)) : NULL;
    if (s->parent && (d->parent = malloc(sizeof *d->parent)))
        *d->parent = *s->parent;
    if (!d->thread_name || !d->packed_events.data || (s->parent && !d->parent) ||
        (s->attributes.count && !d->attributes.items))
        return -1;
    if (s->packed_events.len)
        memcpy(d->packed_events.data, s->packed_events.data, s->packed_events.len);
    for (size_t i = 0; i < s->attributes.count; i++) {
        d->attributes.items[i].key = dup_str(s->attributes.items[i].key);
        d->attributes.items[i].value = dup_str(s->attributes.items[i].value);
        if (!d->attributes.items[i].key || !d->attributes.items[i].value)
            return -1;
    }
    if (s->node_attrs.count && !(d->node_attrs.items = calloc(s->node_attrs.count, sizeof(cmr_node_attr_t))))
        return -1;
    d->node_attrs.count = s->node_attrs.count;
    for (size_t i = 0; i < s->node_attrs.count; i++) {
        d->node_attrs.items[i].event_seq = s->node_attrs.items[i].event_seq;
        d->node_attrs.items[i].key = dup_str(s->node_attrs.items[i].key);
        d->node_attrs.items[i].value = dup_str(s->node_attrs.items[i].value);
        if (!d->node_attrs.items[i].key || !d->node_attrs.items[i].value)
            return -1;
    }
    return 0;
}

void cmr_segs_batches_free(cmr_event_batch_t *b, size_t n)
{
    for (size_t i = 0; b && i < n; i++) {
        free(b[i].thread_name);
        free(b[i].parent);
        free(b[i].packed_events.data);
        for (size_t k = 0; k < b[i].attributes.count && b[i].attributes.items; k++) {
            free(b[i].attributes.items[k].key);
            free(b[i].attributes.items[k].value);
        }
        free(b[i].attributes.items);
        for (size_t k = 0; k < b[i].node_attrs.count && b[i].node_attrs.items; k++) {
            free(b[i].node_attrs.items[k].key);
            free(b[i].node_attrs.items[k].value);
        }
        free(b[i].node_attrs.items);
    }
    free(b);
}

long cmr_segs_split(const cmr_event_msg_t *m, cmr_event_batch_t **out, char *err, size_t errlen)
{
    cmr_segs_reader_t *r = calloc(1, sizeof *r);
    size_t n = 0, cap = m->segment_count > 0 ? (size_t)m->segment_count : 1;
    cmr_event_batch_t *v = r && cap <= (size_t)m->segments.len + 1 ? calloc(cap, sizeof *v) : NULL;
    int rc = v ? 1 : -1;
    if (v) {
        cmr_segs_reader_init(r, m);
        cmr_event_batch_t b;
        while ((rc = cmr_segs_reader_next(r, &b)) == 1)
            if (copy_batch(&v[n++], &b) != 0) {
                snprintf(r->error, sizeof r->error, "out of memory");
                rc = -1;
                break;
            }
    }
    snprintf(err, errlen, "%s", !r ? "out of memory" : r->error[0] ? r->error : v ? "" : "bad segment_count");
    if (r)
        cmr_segs_reader_free(r);
    free(r);
    if (rc != 0) {
        cmr_segs_batches_free(v, n);
        return -1;
    }
    *out = v;
    return (long)n;
}

int cmr_segs_join(cmr_segs_writer_t *w, int64_t agent_id, const cmr_event_batch_t *b, size_t n, cmr_event_msg_t *m)
{
    cmr_segs_writer_begin(w, agent_id);
    for (size_t i = 0; i < n; i++) {
        uint32_t count = b[i].event_count > 0 ? (uint32_t)b[i].event_count : 0;
        uint8_t *rec = malloc((size_t)count * CMR_EVENT_RECORD_SIZE + 1);
        char err[128];
        int rc =
            rec && cmr_events_unpack(b[i].packed_events.data, b[i].packed_events.len, count, rec, err, sizeof err) == 0
                ? cmr_segs_writer_add(w, &b[i], rec, count)
                : -1;
        free(rec);
        if (rc)
            return -1;
    }
    cmr_segs_writer_msg(w, m);
    return 0;
}

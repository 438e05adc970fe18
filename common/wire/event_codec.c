/*
 * event_codec.c - the compact encoding of invocation events (the layout is described in
 * cmr/event.h; the reasons in docs/ARCHITECTURE.md, "Event encoding").
 *
 * The agent's publisher encodes each batch as it sends it (cmr_events_pack over the
 * batch's 24-byte records); cmr-ingest checks every received block once
 * (cmr_events_check), stores it as it came and decodes it where it reads events
 * (cmr_events_decoder_next). What makes it small: a call's enter and exit are consecutive
 * or close, so their timestamps differ by little (one or two varint bytes); an exit's
 * method is the open call's (implied); a method seen in the batch before is a dictionary
 * entry (in the tag byte for the first 28); depths follow from the order of the events.
 * EventBatch messages use the packed layout of the same rules (an exit's time in its tag,
 * 96 entries inline, no time for a segment's first event); cmr-ingest reads it with
 * cmr_segs_reader and stores every segment batch in the basic one.
 *
 * Everything an encoder can write, the decoder reads back exactly (the tests check this
 * for any event sequence); a block from anywhere else is checked against every rule, so a
 * corrupt or hostile one is refused with a reason, never read past its end.
 */
#include <assert.h>
#include <stdbool.h>
#include <stdio.h>

#include "cmr/event.h"

#define M_IMPLIED 0
#define M_DICT_FIRST 1 /* 1..28: dictionary entries 0..27 */
#define M_DICT_INLINE 28
#define M_DICT_VARINT 29
#define M_LITERAL 30
#define M_LITERAL_ADD 31
#define TAG_DEPTH 4

/* The packed layout's tags (cmr/event.h). */
#define P_EXIT 0x80       /* 128-255: an exit of the open call, time bits in the tag */
#define P_EXIT_MORE 0x40  /* the time difference's bits past the low 6 follow */
#define P_EXIT_BITS 6     /* time bits in the tag */
#define P_ENTER_INLINE 96 /* 0-95: an enter of dictionary entry 0-95 */
#define P_OTHER 96        /* 96-127: kind, depth flag and method form in tag - 96 */
#define P_M_IMPLIED 0
#define P_M_DICT 1
#define P_M_LITERAL 2
#define P_M_LITERAL_ADD 3

static inline size_t put_varint(uint8_t *out, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        out[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (uint8_t)v;
    return n;
}

static inline bool stack_has(const uint64_t *set, uint32_t depth)
{
    return (set[depth >> 6] >> (depth & 63)) & 1;
}

static inline void stack_mark(uint64_t *set, uint32_t depth)
{
    set[depth >> 6] |= 1ULL << (depth & 63);
}

/* The depth an event has when its tag carries none. */
static inline uint32_t implied_depth(uint32_t kind, uint32_t open)
{
    return kind == CMR_EVENT_ENTER ? open + 1 : kind == CMR_EVENT_FORK ? 0 : open;
}

/* The open depth after an event of this kind and depth. */
static inline uint32_t depth_after(uint32_t kind, uint32_t depth, uint32_t open)
{
    if (kind == CMR_EVENT_ENTER)
        return depth;
    if (kind == CMR_EVENT_FORK)
        return open;
    return depth ? depth - 1 : 0;
}

/* --- encoder ------------------------------------------------------------------------------- */

void cmr_events_encoder_begin_layout(cmr_events_encoder_t *e, uint32_t layout)
{
    if (++e->gen == 0) { /* wrapped: slots of 2^32 batches ago would look current */
        memset(e->slot, 0, sizeof e->slot);
        e->gen = 1;
    }
    e->layout = layout;
    e->seg_first = false;
    e->dict_n = 0;
    e->depth = 0;
    e->prev_ts = 0;
    memset(e->stack_set, 0, sizeof e->stack_set);
}

void cmr_events_encoder_begin(cmr_events_encoder_t *e)
{
    cmr_events_encoder_begin_layout(e, CMR_EVENTS_LAYOUT_BASIC);
}

void cmr_events_encoder_segment(cmr_events_encoder_t *e, uint64_t base_ts)
{
    e->depth = 0;
    e->prev_ts = base_ts;
    e->seg_first = e->layout == CMR_EVENTS_LAYOUT_PACKED;
    memset(e->stack_set, 0, sizeof e->stack_set);
}

/* The method's dictionary entry in this batch, or -1 (then *slot is where it would go,
 * or -1 when the table has no room). */
static int64_t dict_find(cmr_events_encoder_t *e, uint64_t id, int *slot)
{
    uint32_t mask = CMR_EVENTS_SLOTS - 1, i = (uint32_t)(id ^ (id >> 32)) & mask;
    for (uint32_t probe = 0; probe < CMR_EVENTS_SLOTS; probe++, i = (i + 1) & mask) {
        if (e->slot[i].gen != e->gen) {
            *slot = (int)i;
            return -1;
        }
        if (e->slot[i].id == id)
            return e->slot[i].index;
    }
    *slot = -1;
    return -1;
}

/* Whether an exit at `depth` closes the open call of the same method (its method implied). */
static inline bool exit_of_open_call(const cmr_events_encoder_t *e, const cmr_event_t *ev, uint32_t depth)
{
    return (ev->kind == CMR_EVENT_EXIT || ev->kind == CMR_EVENT_EXCEPTION_EXIT) && depth >= 1 &&
           depth <= CMR_EVENTS_STACK && stack_has(e->stack_set, depth) && e->stack[depth] == ev->method_id;
}

/* The open calls and the clock after the event (both layouts). */
static inline void encoder_follow(cmr_events_encoder_t *e, const cmr_event_t *ev, uint32_t depth)
{
    if (ev->kind == CMR_EVENT_ENTER && depth >= 1 && depth <= CMR_EVENTS_STACK) {
        e->stack[depth] = ev->method_id;
        stack_mark(e->stack_set, depth);
    }
    e->depth = depth_after(ev->kind, depth, e->depth);
    e->prev_ts = ev->timestamp_ns;
    e->seg_first = false;
}

/* The method's dictionary entry, made when it has none and there is room: the entry, or
 * -1 (*added: it was made now; -1 with room left cannot happen). */
static int64_t dict_entry(cmr_events_encoder_t *e, uint64_t id, bool *added)
{
    int slot;
    int64_t index = dict_find(e, id, &slot);
    *added = false;
    if (index >= 0 || slot < 0 || e->dict_n >= CMR_EVENTS_DICT_MAX)
        return index;
    e->slot[slot].id = id;
    e->slot[slot].gen = e->gen;
    e->slot[slot].index = e->dict_n++;
    *added = true;
    return e->slot[slot].index;
}

/* The packed layout (cmr/event.h): 1 byte for most exits' tags and times, the first 96
 * methods of a message in an enter's tag, no time for a segment's first event. */
static size_t put_packed(cmr_events_encoder_t *e, const cmr_event_t *ev, uint8_t *out)
{
    uint32_t kind = ev->kind, depth = ev->aux;
    uint64_t delta = ev->timestamp_ns - e->prev_ts; /* modulo 2^64: back in time takes 10 bytes */
    bool first = e->seg_first, implied = depth == implied_depth(kind, e->depth);
    bool open_exit = exit_of_open_call(e, ev, depth);
    if (first && delta)
        return 0; /* the segment's base is its first event's time */
    uint8_t *q = out + 1;
    unsigned tag;
    if (kind == CMR_EVENT_EXIT && implied && open_exit) {
        tag = P_EXIT | (unsigned)(delta & ((1u << P_EXIT_BITS) - 1));
        if (delta >> P_EXIT_BITS) {
            tag |= P_EXIT_MORE;
            q += put_varint(q, delta >> P_EXIT_BITS);
        }
        out[0] = (uint8_t)tag;
        encoder_follow(e, ev, depth);
        return (size_t)(q - out);
    }
    bool added = false;
    int64_t index = open_exit ? -1 : dict_entry(e, ev->method_id, &added);
    if (kind == CMR_EVENT_ENTER && implied && index >= 0 && index < P_ENTER_INLINE && !added) {
        tag = (unsigned)index;
    } else {
        tag = kind - 1;
        if (!implied) {
            tag |= TAG_DEPTH;
            q += put_varint(q, depth);
        }
        if (open_exit) {
            tag |= P_M_IMPLIED << 3;
        } else if (added || index < 0) {
            tag |= (added ? P_M_LITERAL_ADD : P_M_LITERAL) << 3;
            cmr_put_le64(q, ev->method_id), q += 8;
        } else {
            tag |= P_M_DICT << 3;
            q += put_varint(q, (uint64_t)index);
        }
        tag += P_OTHER;
    }
    if (!first)
        q += put_varint(q, delta);
    out[0] = (uint8_t)tag;
    encoder_follow(e, ev, depth);
    assert((size_t)(q - out) <= CMR_EVENTS_MAX_ENCODED);
    return (size_t)(q - out);
}

size_t cmr_events_encoder_put(cmr_events_encoder_t *e, const cmr_event_t *ev, uint8_t *out)
{
    uint32_t kind = ev->kind, depth = ev->aux;
    if (kind < CMR_EVENT_ENTER || kind > CMR_EVENT_FORK)
        return 0;
    if (e->layout == CMR_EVENTS_LAYOUT_PACKED)
        return put_packed(e, ev, out);
    uint8_t *q = out + 1;
    unsigned tag = kind - 1;
    if (depth != implied_depth(kind, e->depth)) {
        tag |= TAG_DEPTH;
        q += put_varint(q, depth);
    }
    if (exit_of_open_call(e, ev, depth)) {
        tag |= M_IMPLIED << 3;
    } else {
        bool added;
        int64_t index = dict_entry(e, ev->method_id, &added);
        if (index >= 0 && !added && index < M_DICT_INLINE) {
            tag |= (unsigned)(M_DICT_FIRST + index) << 3;
        } else if (index >= 0 && !added) {
            tag |= M_DICT_VARINT << 3;
            q += put_varint(q, (uint64_t)index);
        } else {
            tag |= (added ? M_LITERAL_ADD : M_LITERAL) << 3;
            cmr_put_le64(q, ev->method_id), q += 8;
        }
    }
    q += put_varint(q, ev->timestamp_ns - e->prev_ts); /* modulo 2^64: back in time takes 10 bytes */
    encoder_follow(e, ev, depth);
    out[0] = (uint8_t)tag;
    assert((size_t)(q - out) <= CMR_EVENTS_MAX_ENCODED);
    return (size_t)(q - out);
}

int cmr_events_pack(cmr_events_encoder_t *enc, const uint8_t *records, uint32_t count, uint8_t *out, size_t *len)
{
    cmr_events_encoder_begin(enc);
    size_t n = 0;
    for (uint32_t i = 0; i < count; i++) {
        cmr_event_t ev;
        cmr_event_read(records, i, &ev);
        size_t one = cmr_events_encoder_put(enc, &ev, out + n);
        if (!one)
            return -1;
        n += one;
    }
    *len = n;
    return 0;
}

/* --- decoder ------------------------------------------------------------------------------- */

void cmr_events_decoder_init(cmr_events_decoder_t *d, const uint8_t *p, size_t len, uint32_t count)
{
    d->p = p;
    d->end = len ? p + len : p; /* an empty block may have no buffer (NULL + 0 is undefined) */
    d->left = count;
    d->dict_n = 0;
    d->depth = 0;
    d->layout = CMR_EVENTS_LAYOUT_BASIC;
    d->seg_first = false;
    d->prev_ts = 0;
    d->error = NULL;
    memset(d->stack_set, 0, sizeof d->stack_set);
}

void cmr_events_decoder_segment(cmr_events_decoder_t *d, const uint8_t *p, const uint8_t *end, uint32_t count,
                                uint64_t base_ts)
{
    if (d->error)
        return;
    d->p = p;
    d->end = end;
    d->left = count;
    d->depth = 0;
    d->prev_ts = base_ts;
    d->seg_first = d->layout == CMR_EVENTS_LAYOUT_PACKED;
    memset(d->stack_set, 0, sizeof d->stack_set);
}

static int corrupt(cmr_events_decoder_t *d, const char *why)
{
    d->error = why;
    d->left = 0;
    d->p = d->end = NULL;
    return -1;
}

/* The rest of an event whose kind, depth and method are known: open calls, clock, out. */
static int decoded(cmr_events_decoder_t *d, cmr_event_t *ev, uint32_t kind, uint32_t depth, uint64_t delta)
{
    if (kind == CMR_EVENT_ENTER && depth >= 1 && depth <= CMR_EVENTS_STACK) {
        d->stack[depth] = ev->method_id;
        stack_mark(d->stack_set, depth);
    }
    d->depth = depth_after(kind, depth, d->depth);
    d->prev_ts += delta;
    d->seg_first = false;
    ev->timestamp_ns = d->prev_ts;
    ev->kind = kind;
    ev->aux = depth;
    d->left--;
    return 1;
}

/* The open call's method at depth, which an exit leaves implied; -1 when there is none. */
static int implied_method(cmr_events_decoder_t *d, uint32_t kind, uint32_t depth, cmr_event_t *ev)
{
    bool exit = kind == CMR_EVENT_EXIT || kind == CMR_EVENT_EXCEPTION_EXIT;
    if (!exit || depth < 1 || depth > CMR_EVENTS_STACK || !stack_has(d->stack_set, depth))
        return corrupt(d, "implied method without an open call");
    ev->method_id = d->stack[depth];
    return 0;
}

static int dict_method(cmr_events_decoder_t *d, uint64_t index, cmr_event_t *ev)
{
    if (index >= d->dict_n)
        return corrupt(d, "dictionary entry not defined");
    ev->method_id = d->dict[index];
    return 0;
}

static int literal_method(cmr_events_decoder_t *d, bool add, cmr_event_t *ev)
{
    if (d->end - d->p < 8)
        return corrupt(d, "truncated method id");
    ev->method_id = cmr_le64(d->p);
    d->p += 8;
    if (add) {
        if (d->dict_n == CMR_EVENTS_DICT_MAX)
            return corrupt(d, "dictionary over its size");
        d->dict[d->dict_n++] = ev->method_id;
    }
    return 0;
}

/* The time difference that ends an event (none for a packed segment's first event). */
static int get_delta(cmr_events_decoder_t *d, uint64_t *v)
{
    if (d->seg_first) {
        *v = 0;
        return 0;
    }
    return cmr_get_varint(&d->p, d->end, v) ? corrupt(d, "truncated timestamp") : 0;
}

/* An event whose tag said its kind, whether a depth follows, and the method as the basic
 * layout's bits 3-7 give it (cmr/event.h): the rest of it. */
static int next_general(cmr_events_decoder_t *d, cmr_event_t *ev, uint32_t kind, bool has_depth, unsigned method)
{
    uint64_t v;
    uint32_t depth;
    if (has_depth) {
        if (cmr_get_varint(&d->p, d->end, &v) || v > UINT32_MAX)
            return corrupt(d, "bad depth");
        depth = (uint32_t)v;
    } else {
        depth = implied_depth(kind, d->depth);
    }
    int rc;
    if (method == M_IMPLIED)
        rc = implied_method(d, kind, depth, ev);
    else if (method <= M_DICT_INLINE)
        rc = dict_method(d, method - M_DICT_FIRST, ev);
    else if (method == M_DICT_VARINT)
        rc = cmr_get_varint(&d->p, d->end, &v) ? corrupt(d, "truncated dictionary entry") : dict_method(d, v, ev);
    else
        rc = literal_method(d, method == M_LITERAL_ADD, ev);
    if (rc || get_delta(d, &v))
        return -1;
    return decoded(d, ev, kind, depth, v);
}

/* One event of the packed layout (cmr/event.h), its tag read. */
static int next_packed(cmr_events_decoder_t *d, cmr_event_t *ev, unsigned tag)
{
    uint64_t v;
    if (tag & P_EXIT) {
        uint32_t depth = d->depth;
        if (implied_method(d, CMR_EVENT_EXIT, depth, ev))
            return -1;
        uint64_t delta = tag & ((1u << P_EXIT_BITS) - 1);
        if (tag & P_EXIT_MORE) {
            if (cmr_get_varint(&d->p, d->end, &v) || v > (UINT64_MAX >> P_EXIT_BITS))
                return corrupt(d, "truncated or oversized time");
            delta |= v << P_EXIT_BITS;
        }
        return decoded(d, ev, CMR_EVENT_EXIT, depth, delta); /* never a segment's first: no call is open */
    }
    if (tag < P_ENTER_INLINE) {
        if (dict_method(d, tag, ev) || get_delta(d, &v))
            return -1;
        return decoded(d, ev, CMR_EVENT_ENTER, implied_depth(CMR_EVENT_ENTER, d->depth), v);
    }
    /* 96-127: the basic layout's general tag, with the method forms it has past the inline entries */
    static const uint8_t form_method[4] = {[P_M_IMPLIED] = M_IMPLIED,
                                           [P_M_DICT] = M_DICT_VARINT,
                                           [P_M_LITERAL] = M_LITERAL,
                                           [P_M_LITERAL_ADD] = M_LITERAL_ADD};
    tag -= P_OTHER;
    return next_general(d, ev, (tag & 3) + 1, tag & TAG_DEPTH, form_method[tag >> 3]);
}

int cmr_events_decoder_next(cmr_events_decoder_t *d, cmr_event_t *ev)
{
    if (d->error)
        return -1;
    if (!d->left)
        return d->p == d->end ? 0 : corrupt(d, "bytes after the last event");
    if (d->p == d->end)
        return corrupt(d, "fewer events than event_count");
    unsigned tag = *d->p++;
    if (d->layout == CMR_EVENTS_LAYOUT_PACKED)
        return next_packed(d, ev, tag);
    return next_general(d, ev, (tag & 3) + 1, tag & TAG_DEPTH, tag >> 3);
}

static int unpack_into(const uint8_t *p, size_t len, uint32_t count, uint8_t *out, char *err, size_t errlen)
{
    cmr_events_decoder_t d;
    cmr_events_decoder_init(&d, p, len, count);
    cmr_event_t ev;
    int rc;
    for (uint32_t i = 0; (rc = cmr_events_decoder_next(&d, &ev)) == 1; i++)
        if (out)
            cmr_event_write(out, i, &ev);
    if (rc < 0) {
        snprintf(err, errlen, "events: %s", d.error);
        return -1;
    }
    return 0;
}

int cmr_events_unpack(const uint8_t *p, size_t len, uint32_t count, uint8_t *out, char *err, size_t errlen)
{
    return unpack_into(p, len, count, out, err, errlen);
}

int cmr_events_check(const uint8_t *p, size_t len, uint32_t count, char *err, size_t errlen)
{
    return unpack_into(p, len, count, NULL, err, errlen);
}

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

void cmr_events_encoder_begin(cmr_events_encoder_t *e)
{
    if (++e->gen == 0) { /* wrapped: slots of 2^32 batches ago would look current */
        memset(e->slot, 0, sizeof e->slot);
        e->gen = 1;
    }
    e->dict_n = 0;
    e->depth = 0;
    e->prev_ts = 0;
    memset(e->stack_set, 0, sizeof e->stack_set);
}

void cmr_events_encoder_segment(cmr_events_encoder_t *e, uint64_t base_ts)
{
    e->depth = 0;
    e->prev_ts = base_ts;
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

size_t cmr_events_encoder_put(cmr_events_encoder_t *e, const cmr_event_t *ev, uint8_t *out)
{
    uint32_t kind = ev->kind, depth = ev->aux;
    if (kind < CMR_EVENT_ENTER || kind > CMR_EVENT_FORK)
        return 0;
    uint8_t *q = out + 1;
    unsigned tag = kind - 1;
    if (depth != implied_depth(kind, e->depth)) {
        tag |= TAG_DEPTH;
        q += put_varint(q, depth);
    }
    bool exit = kind == CMR_EVENT_EXIT || kind == CMR_EVENT_EXCEPTION_EXIT;
    if (exit && depth >= 1 && depth <= CMR_EVENTS_STACK && stack_has(e->stack_set, depth) &&
        e->stack[depth] == ev->method_id) {
        tag |= M_IMPLIED << 3;
    } else {
        int slot;
        int64_t index = dict_find(e, ev->method_id, &slot);
        if (index >= 0 && index < M_DICT_INLINE) {
            tag |= (unsigned)(M_DICT_FIRST + index) << 3;
        } else if (index >= 0) {
            tag |= M_DICT_VARINT << 3;
            q += put_varint(q, (uint64_t)index);
        } else if (slot >= 0 && e->dict_n < CMR_EVENTS_DICT_MAX) {
            e->slot[slot].id = ev->method_id;
            e->slot[slot].gen = e->gen;
            e->slot[slot].index = e->dict_n++;
            tag |= M_LITERAL_ADD << 3;
            cmr_put_le64(q, ev->method_id), q += 8;
        } else {
            tag |= M_LITERAL << 3;
            cmr_put_le64(q, ev->method_id), q += 8;
        }
    }
    if (kind == CMR_EVENT_ENTER && depth >= 1 && depth <= CMR_EVENTS_STACK) {
        e->stack[depth] = ev->method_id;
        stack_mark(e->stack_set, depth);
    }
    e->depth = depth_after(kind, depth, e->depth);
    q += put_varint(q, ev->timestamp_ns - e->prev_ts); /* modulo 2^64: back in time takes 10 bytes */
    e->prev_ts = ev->timestamp_ns;
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
    memset(d->stack_set, 0, sizeof d->stack_set);
}

static int corrupt(cmr_events_decoder_t *d, const char *why)
{
    d->error = why;
    d->left = 0;
    d->p = d->end = NULL;
    return -1;
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
    uint32_t kind = (tag & 3) + 1, method = tag >> 3, depth;
    uint64_t v;
    if (tag & TAG_DEPTH) {
        if (cmr_get_varint(&d->p, d->end, &v) || v > UINT32_MAX)
            return corrupt(d, "bad depth");
        depth = (uint32_t)v;
    } else {
        depth = implied_depth(kind, d->depth);
    }
    bool exit = kind == CMR_EVENT_EXIT || kind == CMR_EVENT_EXCEPTION_EXIT;
    if (method == M_IMPLIED) {
        if (!exit || depth < 1 || depth > CMR_EVENTS_STACK || !stack_has(d->stack_set, depth))
            return corrupt(d, "implied method without an open call");
        ev->method_id = d->stack[depth];
    } else if (method <= M_DICT_INLINE || method == M_DICT_VARINT) {
        uint64_t index = method - M_DICT_FIRST;
        if (method == M_DICT_VARINT && cmr_get_varint(&d->p, d->end, &index))
            return corrupt(d, "truncated dictionary entry");
        if (index >= d->dict_n)
            return corrupt(d, "dictionary entry not defined");
        ev->method_id = d->dict[index];
    } else {
        if (d->end - d->p < 8)
            return corrupt(d, "truncated method id");
        ev->method_id = cmr_le64(d->p);
        d->p += 8;
        if (method == M_LITERAL_ADD) {
            if (d->dict_n == CMR_EVENTS_DICT_MAX)
                return corrupt(d, "dictionary over its size");
            d->dict[d->dict_n++] = ev->method_id;
        }
    }
    if (cmr_get_varint(&d->p, d->end, &v))
        return corrupt(d, "truncated timestamp");
    if (kind == CMR_EVENT_ENTER && depth >= 1 && depth <= CMR_EVENTS_STACK) {
        d->stack[depth] = ev->method_id;
        stack_mark(d->stack_set, depth);
    }
    d->depth = depth_after(kind, depth, d->depth);
    d->prev_ts += v;
    ev->timestamp_ns = d->prev_ts;
    ev->kind = kind;
    ev->aux = depth;
    d->left--;
    return 1;
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

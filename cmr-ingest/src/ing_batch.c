/*
 * ing_batch.c - an EventBatch as cmr-ingest stores it.
 *
 * Key (36 bytes, big endian): trace id | agent id | segment id | batch_seq. All batches of
 * a trace are adjacent and in (agent, segment, sequence) order, and a redelivered batch
 * overwrites itself: the write is idempotent.
 *
 * Value (little endian): version(1)=2 | thread id(8) | first_event_seq(8) | flags(1:
 * bit0 last, bit1 parent) | parent agent(8) | parent segment(8) | parent seq(8) |
 * dropped(4) | event_count(4) | name length(2) | name | events (the rest: event_count
 * events in the compact encoding of cmr/event.h). Version 3 (a batch with call
 * attributes) puts after the name: attributes length(4) | attributes: a varint count, then
 * per attribute its call's event_seq (varint), key and value (each a varint length and
 * bytes); then the events. Readers take both versions. The events bytes are the agent's,
 * checked once when the batch arrives and stored unchanged; readers decode them with
 * cmr_events_decoder_next. (Version 1 held 24-byte records; such stores are rebuilt by
 * `cmr-ingest replay`.) The batch's diagnosis id and transaction data (attributes) are
 * not stored with it: the trace summary keeps them.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/buf.h"
#include "cmr/bytes.h"
#include "cmr/event.h"
#include "cmr/ingest.h"
#include "cmr/utf8.h"

#define HDR_LEN CMR_INGEST_BATCH_HDR_LEN
_Static_assert(HDR_LEN == 1 + 8 + 8 + 1 + 8 + 8 + 8 + 4 + 4 + 2, "stored batch header");
#define MAX_NAME 65535u

static const char *const attr_keys[CMR_HTTP__KEYS] = {"http.method", "http.path", "http.status"};
#define MAX_ATTR_KEY 128 /* http.request.header. and a name of up to 64 bytes fit */

/* A call attribute worth keeping: a key of [a-z0-9._-] (at most MAX_ATTR_KEY), a valid
 * UTF-8 value (at most CMR_SEGS_MAX_NODE_VALUE bytes) of a call the segment has reached.
 * NULL, or why not (a static string). */
static const char *node_attr_check(const cmr_event_batch_t *m, const cmr_node_attr_t *a)
{
    size_t kl = a->key ? strlen(a->key) : 0, vl = a->value ? strlen(a->value) : 0;
    if (!kl || kl > MAX_ATTR_KEY)
        return "empty or long key";
    for (size_t i = 0; i < kl; i++)
        if (!((a->key[i] >= 'a' && a->key[i] <= 'z') || (a->key[i] >= '0' && a->key[i] <= '9') || a->key[i] == '.' ||
              a->key[i] == '_' || a->key[i] == '-'))
            return "key not of [a-z0-9._-]";
    if (vl > CMR_SEGS_MAX_NODE_VALUE)
        return "value too long";
    for (size_t i = 0, n; i < vl; i += n)
        if (!(n = cmr_utf8_seq((const uint8_t *)a->value + i, vl - i, NULL)))
            return "value not UTF-8";
    if (a->event_seq < 0 || a->event_seq >= m->first_event_seq + m->event_count)
        return "names a call the segment has not reached";
    return NULL;
}

/* Checks m's call attributes once: the valid ones are marked in out->msg_attrs_ok, the
 * others (left out when stored) counted. */
static void check_node_attrs(const cmr_event_batch_t *m, cmr_ingest_batch_t *out)
{
    for (size_t i = 0; i < m->node_attrs.count; i++) {
        const char *why = i < CMR_SEGS_MAX_NODE_ATTRS ? node_attr_check(m, &m->node_attrs.items[i])
                                                      : "more call attributes than a batch carries";
        if (!why)
            out->msg_attrs_ok[i / 64] |= (uint64_t)1 << (i % 64);
        else if (!out->attrs_dropped++) {
            out->attrs_drop_key = "call attribute";
            out->attrs_drop_why = why;
        }
    }
}

/* The transaction data of a batch (ing_attrs.c says what is kept): known keys with valid,
 * non-empty values; a key repeated in one batch keeps its first value (the others count
 * as invalid); unknown keys are ignored. */
static void take_attributes(const cmr_kvs_t *a, cmr_ingest_batch_t *out)
{
    bool seen[CMR_HTTP__KEYS] = {false};
    for (size_t i = 0; i < a->count; i++) {
        const char *k = a->items[i].key, *v = a->items[i].value;
        int key = 0;
        while (key < CMR_HTTP__KEYS && (!k || strcmp(k, attr_keys[key])))
            key++;
        if (key == CMR_HTTP__KEYS)
            continue;
        size_t len = v ? strlen(v) : 0;
        const char *why = seen[key] ? "repeated in one batch" : len ? cmr_http_value_check(key, v, len) : NULL;
        seen[key] = true;
        if (why) {
            if (!out->attrs_dropped++) {
                out->attrs_drop_key = attr_keys[key];
                out->attrs_drop_why = why;
            }
            continue;
        }
        if (!len)
            continue; /* not known */
        if (key == CMR_HTTP_METHOD)
            out->http_method = v;
        else if (key == CMR_HTTP_PATH)
            out->http_path = v;
        else
            out->http_status = (uint16_t)((v[0] - '0') * 100 + (v[1] - '0') * 10 + (v[2] - '0'));
    }
}

int cmr_ingest_batch_from_msg(const cmr_event_batch_t *m, cmr_ingest_batch_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (m->event_count < 0 || (size_t)m->event_count * CMR_EVENTS_MAX_ENCODED < m->packed_events.len) {
        snprintf(err, errlen, "event_count %d does not match %zu bytes of events", m->event_count,
                 m->packed_events.len);
        return -1;
    }
    if (cmr_events_check(m->packed_events.data, m->packed_events.len, (uint32_t)m->event_count, err, errlen) != 0)
        return -1;
    return cmr_ingest_batch_from_segment(m, out, err, errlen);
}

int cmr_ingest_batch_from_segment(const cmr_event_batch_t *m, cmr_ingest_batch_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (m->batch_seq < 0 || m->batch_seq > (1 << 24) || m->first_event_seq < 0) {
        snprintf(err, errlen, "batch_seq %d (0..16777216) or first_event_seq %lld out of range", m->batch_seq,
                 (long long)m->first_event_seq);
        return -1;
    }
    static const uint8_t zero[16];
    if (!memcmp(m->trace_id, zero, 16)) {
        snprintf(err, errlen, "trace id is all zero");
        return -1;
    }
    memcpy(out->trace_id, m->trace_id, 16);
    out->agent_id = (uint64_t)m->agent_id;
    out->segment_id = (uint64_t)m->segment_id;
    out->thread_id = m->thread_id;
    out->thread_name = m->thread_name ? m->thread_name : "";
    out->name_len = strlen(out->thread_name);
    if (out->name_len > MAX_NAME)
        out->name_len = MAX_NAME;
    if (m->parent) {
        out->has_parent = true;
        out->parent_agent = (uint64_t)m->parent->agent_id;
        out->parent_segment = (uint64_t)m->parent->segment_id;
        out->parent_seq = m->parent->event_seq;
        if (out->parent_agent == out->agent_id && out->parent_segment == out->segment_id) {
            snprintf(err, errlen, "segment names itself as its parent");
            return -1;
        }
    }
    out->batch_seq = m->batch_seq;
    out->first_event_seq = m->first_event_seq;
    out->last = m->last;
    out->dropped = m->dropped < 0 ? 0 : m->dropped;
    out->event_count = (uint32_t)m->event_count;
    out->events = m->packed_events.data;
    out->events_len = m->packed_events.len;
    out->diagnosis_id = (uint64_t)m->diagnosis_id;
    take_attributes(&m->attributes, out);
    if (m->node_attrs.count) {
        out->msg_attrs = &m->node_attrs;
        check_node_attrs(m, out);
    }
    return 0;
}

/* The message's call attributes' next valid one (check_node_attrs marked them). */
static int msg_attr_next(const cmr_ingest_batch_t *b, size_t *cursor, cmr_ingest_attr_t *a)
{
    while (*cursor < b->msg_attrs->count && *cursor < CMR_SEGS_MAX_NODE_ATTRS) {
        size_t i = (*cursor)++;
        if (!(b->msg_attrs_ok[i / 64] >> (i % 64) & 1))
            continue;
        const cmr_node_attr_t *x = &b->msg_attrs->items[i];
        *a = (cmr_ingest_attr_t){x->event_seq, x->key, x->value, strlen(x->key), strlen(x->value)};
        return 1;
    }
    return 0;
}

/* A varint length and bytes of the block at *p; -1 when it runs past end. */
static int block_string(const uint8_t **p, const uint8_t *end, const char **s, size_t *len)
{
    uint64_t n;
    if (cmr_get_varint(p, end, &n) || n > (uint64_t)(end - *p))
        return -1;
    *s = (const char *)*p;
    *len = (size_t)n;
    *p += n;
    return 0;
}

/* The stored block's next attribute; the cursor is the offset after the count. A corrupt
 * block ends the walk (cmr_ingest_batch_decode checked it). */
static int block_attr_next(const cmr_ingest_batch_t *b, size_t *cursor, cmr_ingest_attr_t *a)
{
    const uint8_t *p = b->attrs_block, *end = p + b->attrs_len;
    uint64_t count, seq;
    if (cmr_get_varint(&p, end, &count) || count == 0)
        return 0;
    if (*cursor == 0)
        *cursor = (size_t)(p - b->attrs_block);
    p = b->attrs_block + *cursor;
    if (p >= end || cmr_get_varint(&p, end, &seq) || seq > INT64_MAX || block_string(&p, end, &a->key, &a->key_len) ||
        block_string(&p, end, &a->value, &a->value_len))
        return 0;
    a->event_seq = (int64_t)seq;
    *cursor = (size_t)(p - b->attrs_block);
    return 1;
}

int cmr_ingest_batch_attr_next(const cmr_ingest_batch_t *b, size_t *cursor, cmr_ingest_attr_t *a)
{
    if (b->msg_attrs)
        return msg_attr_next(b, cursor, a);
    return b->attrs_block ? block_attr_next(b, cursor, a) : 0;
}

void cmr_ingest_batch_attrs(const cmr_ingest_batch_t *b, cmr_buf_t *o)
{
    size_t n = 0, cur = 0;
    cmr_ingest_attr_t a;
    while (cmr_ingest_batch_attr_next(b, &cur, &a) == 1)
        n++;
    if (!n)
        return;
    cmr_buf_put_varint(o, n);
    for (cur = 0; cmr_ingest_batch_attr_next(b, &cur, &a) == 1;) {
        cmr_buf_put_varint(o, (uint64_t)a.event_seq);
        cmr_buf_put_varint(o, a.key_len);
        cmr_buf_put(o, a.key, a.key_len);
        cmr_buf_put_varint(o, a.value_len);
        cmr_buf_put(o, a.value, a.value_len);
    }
}

void cmr_ingest_batch_key(const cmr_ingest_batch_t *b, uint8_t key[CMR_INGEST_BATCH_KEY_LEN])
{
    memcpy(key, b->trace_id, 16);
    cmr_put_be64(key + 16, b->agent_id);
    cmr_put_be64(key + 24, b->segment_id);
    cmr_put_be32(key + 32, (uint32_t)b->batch_seq);
}

size_t cmr_ingest_batch_header(const cmr_ingest_batch_t *b, bool attrs, uint8_t out[CMR_INGEST_BATCH_HDR_LEN])
{
    assert(b->name_len <= MAX_NAME);
    uint8_t *q = out;
    *q++ = attrs ? 3 : 2;
    cmr_put_le64(q, (uint64_t)b->thread_id), q += 8;
    cmr_put_le64(q, (uint64_t)b->first_event_seq), q += 8;
    *q++ = (uint8_t)((b->last ? 1 : 0) | (b->has_parent ? 2 : 0));
    cmr_put_le64(q, b->parent_agent), q += 8;
    cmr_put_le64(q, b->parent_segment), q += 8;
    cmr_put_le64(q, (uint64_t)b->parent_seq), q += 8;
    cmr_put_le32(q, (uint32_t)b->dropped), q += 4;
    cmr_put_le32(q, b->event_count), q += 4;
    *q++ = (uint8_t)(b->name_len & 0xff);
    *q++ = (uint8_t)(b->name_len >> 8);
    assert((size_t)(q - out) == HDR_LEN);
    return HDR_LEN;
}

int cmr_ingest_batch_encode(const cmr_ingest_batch_t *b, uint8_t **out, size_t *len)
{
    cmr_buf_t attrs = {0};
    cmr_ingest_batch_attrs(b, &attrs);
    if (!cmr_buf_ok(&attrs))
        return -1;
    size_t ev = b->events_len;
    size_t n = HDR_LEN + b->name_len + (attrs.len ? 4 + attrs.len : 0) + ev;
    uint8_t *p = malloc(n);
    if (!p) {
        cmr_buf_free(&attrs);
        return -1;
    }
    uint8_t *q = p + cmr_ingest_batch_header(b, attrs.len > 0, p);
    memcpy(q, b->thread_name, b->name_len), q += b->name_len;
    if (attrs.len) {
        cmr_put_le32(q, (uint32_t)attrs.len), q += 4;
        memcpy(q, attrs.data, attrs.len), q += attrs.len;
    }
    if (ev)
        memcpy(q, b->events, ev);
    cmr_buf_free(&attrs);
    *out = p;
    *len = n;
    return 0;
}

/* Checks a stored attributes block whole: every entry within it, nothing after. */
static int check_block(const uint8_t *p, size_t len)
{
    const uint8_t *end = p + len;
    uint64_t count, seq;
    if (cmr_get_varint(&p, end, &count) || count == 0 || count > CMR_SEGS_MAX_NODE_ATTRS)
        return -1;
    for (uint64_t i = 0; i < count; i++) {
        const char *s;
        size_t l;
        if (cmr_get_varint(&p, end, &seq) || seq > INT64_MAX || block_string(&p, end, &s, &l) ||
            block_string(&p, end, &s, &l))
            return -1;
    }
    return p == end ? 0 : -1;
}

int cmr_ingest_batch_decode(const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen, cmr_ingest_batch_t *out)
{
    memset(out, 0, sizeof *out);
    if (klen != CMR_INGEST_BATCH_KEY_LEN || vlen < HDR_LEN || (val[0] != 2 && val[0] != 3))
        return -1;
    memcpy(out->trace_id, key, 16);
    out->agent_id = cmr_be64(key + 16);
    out->segment_id = cmr_be64(key + 24);
    out->batch_seq = (int32_t)cmr_be32(key + 32);
    if (out->batch_seq < 0)
        return -1; /* never written (cmr_ingest_batch_from_msg refuses it): corrupt */
    const uint8_t *q = val + 1;
    out->thread_id = (int64_t)cmr_le64(q), q += 8;
    out->first_event_seq = (int64_t)cmr_le64(q), q += 8;
    uint8_t flags = *q++;
    out->last = flags & 1;
    out->has_parent = (flags & 2) != 0;
    out->parent_agent = cmr_le64(q), q += 8;
    out->parent_segment = cmr_le64(q), q += 8;
    out->parent_seq = (int64_t)cmr_le64(q), q += 8;
    out->dropped = (int32_t)cmr_le32(q), q += 4;
    out->event_count = cmr_le32(q), q += 4;
    out->name_len = (size_t)q[0] | (size_t)q[1] << 8;
    q += 2;
    size_t rest = vlen - HDR_LEN;
    if (out->name_len > rest)
        return -1;
    out->thread_name = (const char *)q;
    q += out->name_len, rest -= out->name_len;
    if (val[0] == 3) {
        if (rest < 4 || cmr_le32(q) > rest - 4 || check_block(q + 4, cmr_le32(q)) != 0)
            return -1;
        out->attrs_block = q + 4;
        out->attrs_len = cmr_le32(q);
        q += 4 + out->attrs_len, rest -= 4 + out->attrs_len;
    }
    if (rest > (size_t)out->event_count * CMR_EVENTS_MAX_ENCODED)
        return -1;
    out->events = q;
    out->events_len = rest;
    return 0;
}

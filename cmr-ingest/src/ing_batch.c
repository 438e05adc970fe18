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
 * events in the compact encoding of cmr/event.h). The events bytes are the agent's,
 * checked once when the batch arrives and stored unchanged; readers decode them with
 * cmr_events_decoder_next. (Version 1 held 24-byte records; such stores are rebuilt by
 * `cmr-ingest replay`.) The batch's diagnosis id and transaction data (attributes) are
 * not stored with it: the trace summary keeps them.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/event.h"
#include "cmr/ingest.h"
#include "cmr/bytes.h"

#define HDR_LEN CMR_INGEST_BATCH_HDR_LEN
_Static_assert(HDR_LEN == 1 + 8 + 8 + 1 + 8 + 8 + 8 + 4 + 4 + 2, "stored batch header");
#define MAX_NAME 65535u

static const char *const attr_keys[CMR_HTTP__KEYS] = {"http.method", "http.path", "http.status"};

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
    return 0;
}

void cmr_ingest_batch_key(const cmr_ingest_batch_t *b, uint8_t key[CMR_INGEST_BATCH_KEY_LEN])
{
    memcpy(key, b->trace_id, 16);
    cmr_put_be64(key + 16, b->agent_id);
    cmr_put_be64(key + 24, b->segment_id);
    cmr_put_be32(key + 32, (uint32_t)b->batch_seq);
}

size_t cmr_ingest_batch_header(const cmr_ingest_batch_t *b, uint8_t out[CMR_INGEST_BATCH_HDR_LEN])
{
    assert(b->name_len <= MAX_NAME);
    uint8_t *q = out;
    *q++ = 2;
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
    size_t ev = b->events_len;
    size_t n = HDR_LEN + b->name_len + ev;
    uint8_t *p = malloc(n);
    if (!p)
        return -1;
    uint8_t *q = p + cmr_ingest_batch_header(b, p);
    memcpy(q, b->thread_name, b->name_len), q += b->name_len;
    if (ev)
        memcpy(q, b->events, ev);
    *out = p;
    *len = n;
    return 0;
}

int cmr_ingest_batch_decode(const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen, cmr_ingest_batch_t *out)
{
    memset(out, 0, sizeof *out);
    if (klen != CMR_INGEST_BATCH_KEY_LEN || vlen < HDR_LEN || val[0] != 2)
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
    if (out->name_len > rest || (rest - out->name_len) > (size_t)out->event_count * CMR_EVENTS_MAX_ENCODED)
        return -1;
    out->thread_name = (const char *)q;
    out->events = q + out->name_len;
    out->events_len = rest - out->name_len;
    return 0;
}

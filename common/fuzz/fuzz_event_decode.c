/*
 * fuzz_event_decode.c - libFuzzer target: any bytes given to the compact event decoder
 * (cmr/event.h) are refused cleanly or read as events; never a crash, an out-of-bounds
 * access or UB. Events that decode encode again and decode to the same events.
 * Input: a 2-byte little-endian event count, then the block. With the count's top bit set,
 * the rest is an EventBatch message body instead (cmr_segs_reader): the first byte's bit 6
 * its event_layout (basic or packed), its low 6 bits segment_count, the second byte's value
 * times 4 event_count; every segment
 * batch it reads back must be a standalone block the plain decoder accepts, and its
 * attributes' strings readable (ASan sees a pointer into a buffer that moved).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/event.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_segments(const uint8_t *data, size_t size)
{
    static cmr_segs_reader_t r;
    cmr_event_msg_t m = {.agent_id = 7,
                         .segment_count = data[0] & 0x3f,
                         .event_count = data[1] * 4,
                         .segments = {(uint8_t *)data + 2, size - 2},
                         .event_layout = data[0] & 0x40 ? CMR_EVENTS_LAYOUT_PACKED : CMR_EVENTS_LAYOUT_BASIC};
    cmr_segs_reader_init(&r, &m);
    cmr_event_batch_t b;
    char err[128];
    while (cmr_segs_reader_next(&r, &b) == 1) {
        if (cmr_events_check(b.packed_events.data, b.packed_events.len, (uint32_t)b.event_count, err, sizeof err))
            abort();
        size_t n = 0;
        for (size_t i = 0; i < b.attributes.count; i++)
            n += strlen(b.attributes.items[i].key) + strlen(b.attributes.items[i].value);
        for (size_t i = 0; i < b.node_attrs.count; i++) {
            if (b.node_attrs.items[i].event_seq < 0 || strlen(b.node_attrs.items[i].value) > CMR_SEGS_MAX_NODE_VALUE)
                abort();
            n += strlen(b.node_attrs.items[i].key);
        }
        if (n == SIZE_MAX)
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static cmr_events_encoder_t enc;
    if (size < 2)
        return 0;
    if (data[0] & 0x80) {
        fuzz_segments(data, size);
        return 0;
    }
    uint32_t count = (uint32_t)data[0] | (uint32_t)data[1] << 8;
    data += 2;
    size -= 2;
    uint8_t *rec = malloc((size_t)count * CMR_EVENT_RECORD_SIZE + 1);
    char err[128];
    if (!rec)
        return 0;
    if (cmr_events_unpack(data, size, count, rec, err, sizeof err) == 0) {
        uint8_t *packed = malloc((size_t)count * CMR_EVENTS_MAX_ENCODED + 1);
        uint8_t *back = malloc((size_t)count * CMR_EVENT_RECORD_SIZE + 1);
        size_t len;
        if (!packed || !back || cmr_events_pack(&enc, rec, count, packed, &len) != 0 ||
            cmr_events_unpack(packed, len, count, back, err, sizeof err) != 0 ||
            memcmp(back, rec, (size_t)count * CMR_EVENT_RECORD_SIZE) != 0)
            abort();
        free(packed);
        free(back);
    }
    free(rec);
    return 0;
}

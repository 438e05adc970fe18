/*
 * event.h - invocation events: the 24-byte records the probes write into their rings, and
 * the compact encoding they travel in (an EventBatch's `events` bytes) and are stored in.
 *
 * The record (CMR_EVENT_RECORD_SIZE bytes, little endian; the rings' layout):
 *
 *   offset 0   u64  method id (XXH3-64 of the method's signature), 0 when not a method
 *   offset 8   u64  timestamp, nanoseconds since the Unix epoch
 *   offset 16  u32  kind (cmr_event_kind_t)
 *   offset 20  u32  aux: for ENTER / EXIT / EXCEPTION_EXIT the call depth of the
 *                   invocation on its thread (1 = the segment's root call); for FORK 0
 *
 * The compact encoding (event_codec.c; docs/ARCHITECTURE.md, "Event encoding") packs the
 * events of one batch into 1 to 24 bytes each, about 2 to 3 for a call's enter or exit:
 *
 *   tag byte   bits 0-1  kind - 1
 *              bit 2     an explicit depth follows (a varint); without it the depth is
 *                        the one the previous events imply: enter = open depth + 1,
 *                        exit = open depth, fork = 0
 *              bits 3-7  the method: 0 = the method of the open call at that depth (exits
 *                        only), 1-28 = dictionary entry 0-27, 29 = dictionary entry
 *                        (a varint) follows, 30 = a method id follows (8 bytes, little
 *                        endian), 31 = the same, and it becomes the next dictionary entry
 *   then       the depth varint (bit 2), the dictionary entry or method id (29-31), and the
 *              timestamp as a varint of its difference from the previous event's, modulo
 *              2^64 (from 0 for a batch's first event; a clock going back costs 10 bytes)
 *
 * The dictionary (at most CMR_EVENTS_DICT_MAX method ids) and the open calls' methods (at
 * most CMR_EVENTS_STACK deep) start empty in every batch, so a batch decodes on its own.
 */
#ifndef CMR_EVENT_H
#define CMR_EVENT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cmr/bytes.h"

#define CMR_EVENT_RECORD_SIZE 24

typedef enum cmr_event_kind {
    CMR_EVENT_ENTER = 1,          /* method entry */
    CMR_EVENT_EXIT = 2,           /* normal return */
    CMR_EVENT_EXCEPTION_EXIT = 3, /* exit by a thrown exception */
    CMR_EVENT_FORK = 4,           /* the trace context was handed to another thread or JVM:
                                   * method_id = the hand-off point's method id (or 0), and
                                   * a child segment names this event in its ParentLink */
} cmr_event_kind_t;

typedef struct cmr_event {
    uint64_t method_id;
    uint64_t timestamp_ns;
    uint32_t kind;
    uint32_t aux;
} cmr_event_t;

/* Reads record i of a block (the caller checks i < count and the block's length). */
static inline void cmr_event_read(const uint8_t *block, size_t i, cmr_event_t *ev)
{
    const uint8_t *p = block + i * CMR_EVENT_RECORD_SIZE;
    ev->method_id = cmr_le64(p);
    ev->timestamp_ns = cmr_le64(p + 8);
    ev->kind = cmr_le32(p + 16);
    ev->aux = cmr_le32(p + 20);
}

static inline void cmr_event_write(uint8_t *block, size_t i, const cmr_event_t *ev)
{
    uint8_t *p = block + i * CMR_EVENT_RECORD_SIZE;
    cmr_put_le64(p, ev->method_id);
    cmr_put_le64(p + 8, ev->timestamp_ns);
    cmr_put_le32(p + 16, ev->kind);
    cmr_put_le32(p + 20, ev->aux);
}

/* --- compact encoding -------------------------------------------------------------------- */

#define CMR_EVENTS_MAX_ENCODED 24 /* bytes one event takes at most */
#define CMR_EVENTS_DICT_MAX 1024  /* method ids a batch's dictionary holds */
#define CMR_EVENTS_STACK 256      /* call depths whose method an exit may leave implied */
#define CMR_EVENTS_SLOTS 2048     /* the encoder's dictionary hash table */

/* One batch's encoder state. Large (about 36 KiB): one per producing thread, reused; begin
 * every batch with cmr_events_encoder_begin. */
typedef struct cmr_events_encoder {
    struct {
        uint64_t id;
        uint32_t gen; /* the batch it belongs to: a slot of another batch is empty */
        uint32_t index;
    } slot[CMR_EVENTS_SLOTS];
    uint32_t gen, dict_n, depth;
    uint64_t prev_ts;
    uint64_t stack[CMR_EVENTS_STACK + 1];
    uint64_t stack_set[(CMR_EVENTS_STACK + 1 + 63) / 64];
} cmr_events_encoder_t;

void cmr_events_encoder_begin(cmr_events_encoder_t *e);
/* Appends one event at out, which has room for CMR_EVENTS_MAX_ENCODED bytes. Returns the
 * bytes written, or 0 when the event cannot be encoded (a kind other than 1-4). */
size_t cmr_events_encoder_put(cmr_events_encoder_t *e, const cmr_event_t *ev, uint8_t *out);

/* Reads an encoded block event by event (about 10 KiB: keep it off small stacks). */
typedef struct cmr_events_decoder {
    const uint8_t *p, *end;
    uint32_t left, dict_n, depth;
    uint64_t prev_ts;
    const char *error; /* why the block is corrupt (a static string), after -1 */
    uint64_t dict[CMR_EVENTS_DICT_MAX];
    uint64_t stack[CMR_EVENTS_STACK + 1];
    uint64_t stack_set[(CMR_EVENTS_STACK + 1 + 63) / 64];
} cmr_events_decoder_t;

/* count: the events the block holds (EventBatch.event_count). */
void cmr_events_decoder_init(cmr_events_decoder_t *d, const uint8_t *p, size_t len, uint32_t count);
/* 1 with the next event in *ev; 0 once all count events were read and no byte is left;
 * -1 when the block is corrupt (d->error says why; every later call returns -1 too). */
int cmr_events_decoder_next(cmr_events_decoder_t *d, cmr_event_t *ev);

/* Whole blocks. Packs count records (the 24-byte layout) into out, which has room for
 * count * CMR_EVENTS_MAX_ENCODED bytes, its length into *len: 0, or -1 when a record has a
 * kind other than 1-4. enc is scratch state. */
int cmr_events_pack(cmr_events_encoder_t *enc, const uint8_t *records, uint32_t count, uint8_t *out, size_t *len);
/* Unpacks a block of count events into out (count * CMR_EVENT_RECORD_SIZE bytes):
 * 0, or -1 with the reason in err when the block is corrupt. */
int cmr_events_unpack(const uint8_t *p, size_t len, uint32_t count, uint8_t *out, char *err, size_t errlen);
/* Checks a block without keeping its events: 0, or -1 with the reason in err. */
int cmr_events_check(const uint8_t *p, size_t len, uint32_t count, char *err, size_t errlen);

#endif

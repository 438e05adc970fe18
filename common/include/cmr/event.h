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
 *
 * That is the basic layout (CMR_EVENTS_LAYOUT_BASIC): stored batches and standalone blocks
 * use it, and so did EventBatch messages before event_layout. Messages now use the packed
 * layout (CMR_EVENTS_LAYOUT_PACKED, EventBatch.event_layout = 1), the same rules with the
 * tag byte spent where a message's events are:
 *
 *   tag 128-255  an exit (kind EXIT) at the implied depth of the implied method: bits 0-5
 *                the low 6 bits of its time difference, bit 6 set when the rest follows
 *                (a varint of the difference shifted right by 6)
 *   tag 0-95     an enter at the implied depth of dictionary entry 0-95, then the time
 *   tag 96-127   any other event: tag - 96 has the kind - 1 in bits 0-1, bit 2 an explicit
 *                depth follows, bits 3-4 the method: 0 = the open call's (exits only),
 *                1 = a dictionary entry (a varint), 2 = a method id (8 bytes, LE), 3 = the
 *                same, and it becomes the next entry; then depth, method and time as above
 *
 * and the first event of every segment carries no time: it is the segment's base. An exit
 * less than 64 ns after the event before it takes one byte, less than 8 µs two; an enter
 * of one of a message's first 96 methods two below 128 ns.
 */
#ifndef CMR_EVENT_H
#define CMR_EVENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cmr/buf.h"
#include "cmr/bytes.h"
#include "cmr/msg.h"

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

#define CMR_EVENTS_LAYOUT_BASIC 0  /* stored and standalone blocks (and messages before 2026-11-29) */
#define CMR_EVENTS_LAYOUT_PACKED 1 /* EventBatch messages: event_layout 1 */

/* One batch's encoder state. Large (about 36 KiB): one per producing thread, reused; begin
 * every batch with cmr_events_encoder_begin. */
typedef struct cmr_events_encoder {
    struct {
        uint64_t id;
        uint32_t gen; /* the batch it belongs to: a slot of another batch is empty */
        uint32_t index;
    } slot[CMR_EVENTS_SLOTS];
    uint32_t gen, dict_n, depth;
    uint32_t layout; /* CMR_EVENTS_LAYOUT_*, set by begin */
    bool seg_first;  /* packed: the next event is its segment's first (no time) */
    uint64_t prev_ts;
    uint64_t stack[CMR_EVENTS_STACK + 1];
    uint64_t stack_set[(CMR_EVENTS_STACK + 1 + 63) / 64];
} cmr_events_encoder_t;

/* Begins a block in the basic layout (cmr_events_encoder_begin) or in `layout`. */
void cmr_events_encoder_begin(cmr_events_encoder_t *e);
void cmr_events_encoder_begin_layout(cmr_events_encoder_t *e, uint32_t layout);
/* The next segment of a message: open calls empty, the clock from base_ts, the
 * dictionary kept (begin the message with cmr_events_encoder_begin). */
void cmr_events_encoder_segment(cmr_events_encoder_t *e, uint64_t base_ts);
/* Appends one event at out, which has room for CMR_EVENTS_MAX_ENCODED bytes. Returns the
 * bytes written, or 0 when the event cannot be encoded (a kind other than 1-4, or in the
 * packed layout a segment's first event at another time than the segment's base). */
size_t cmr_events_encoder_put(cmr_events_encoder_t *e, const cmr_event_t *ev, uint8_t *out);

/* Reads an encoded block event by event (about 10 KiB: keep it off small stacks). */
typedef struct cmr_events_decoder {
    const uint8_t *p, *end;
    uint32_t left, dict_n, depth;
    uint32_t layout; /* CMR_EVENTS_LAYOUT_*: basic after init; set it before reading */
    bool seg_first;
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
/* The next segment of a message, count events from p (before end, where the message's
 * body ends: read them with exactly count calls of cmr_events_decoder_next, then d->p is
 * past them): open calls empty, the clock from base_ts, the dictionary kept. */
void cmr_events_decoder_segment(cmr_events_decoder_t *d, const uint8_t *p, const uint8_t *end, uint32_t count,
                                uint64_t base_ts);

/* Whole blocks. Packs count records (the 24-byte layout) into out, which has room for
 * count * CMR_EVENTS_MAX_ENCODED bytes, its length into *len: 0, or -1 when a record has a
 * kind other than 1-4. enc is scratch state. */
int cmr_events_pack(cmr_events_encoder_t *enc, const uint8_t *records, uint32_t count, uint8_t *out, size_t *len);
/* Unpacks a block of count events into out (count * CMR_EVENT_RECORD_SIZE bytes):
 * 0, or -1 with the reason in err when the block is corrupt. */
int cmr_events_unpack(const uint8_t *p, size_t len, uint32_t count, uint8_t *out, char *err, size_t errlen);
/* Checks a block without keeping its events: 0, or -1 with the reason in err. */
int cmr_events_check(const uint8_t *p, size_t len, uint32_t count, char *err, size_t errlen);

/* --- several segment batches in one message ---------------------------------------------
 *
 * An EventBatch message (cmr_event_msg_t) carries segment_count segment batches, possibly
 * of several traces (all of one Kafka partition), in `segments`: one after the other, each
 * a header coded against the previous segment's, then its events in the compact encoding
 * above. The method dictionary is the message's (it grows across its segments); the open
 * calls start empty in every segment; each segment's timestamps start from its own base.
 *
 *   segment   := flags(1) segment-id [seq] [thread] [trace] [parent] [extras]
 *                event-count [base] events
 *   flags     bit 0 last (the segment ended with this batch)
 *             bit 1 a parent link follows
 *             bit 2 a trace id follows (16 bytes); else the previous segment's (the first
 *                   segment of a message always has one)
 *             bit 3 a thread follows: its id (zigzag varint) and name (varint length,
 *                   bytes); else the previous segment's (the first always has one)
 *             bit 4 batch_seq and first_event_seq follow (varints); else both are 0
 *             bit 5 an extras byte follows
 *             bit 6 the parent's agent id follows (8 bytes); else it is the message's
 *             bit 7 the trace id is the previous segment's stepped: its first 8 bytes the
 *                   same, its last 8 (big endian) a varint (1 .. 2^21 - 1) above the
 *                   previous's (a thread's next local trace: the probe makes a thread's
 *                   trace ids from a random prefix and a counter); not with bit 2
 *   segment-id  zigzag varint of its difference from the previous segment's (from 0)
 *   parent    [agent(8, LE)] segment id as a zigzag varint of its difference from this
 *             segment's id, event_seq as a zigzag varint
 *   extras    bits: 0 dropped (varint), 1 diagnosis id (8 bytes, LE), 2 calls not
 *             recorded (varint), 3 truncated_by (varint), 4 attributes (a varint count,
 *             then per entry key and value, each a varint length and bytes), 5 call
 *             attributes (a varint count, then per entry the call's ENTER event_seq as a
 *             zigzag varint of its difference from the batch's first_event_seq, key and
 *             value as above, the value at most CMR_SEGS_MAX_NODE_VALUE bytes); others 0
 *   base      (when event-count > 0) zigzag varint of the segment's first timestamp minus
 *             the previous segment's (from 0): the clock the events' deltas start from
 *
 * Everything the writer writes, the reader reads back exactly; anything else is refused
 * with a reason, and so is a message whose counts differ from what its body holds. */

#define CMR_SEGS_MAX_NAME 65535u      /* a thread name's bytes at most */
#define CMR_SEGS_MAX_ATTRS 16         /* attributes per segment batch at most */
#define CMR_SEGS_MAX_NODE_ATTRS 256   /* call attributes per segment batch at most */
#define CMR_SEGS_MAX_NODE_VALUE 4096u /* a call attribute's value's bytes at most */

/* Call attributes' keys (cmr_node_attr_t): what the probes capture about one call. */
#define CMR_NODE_ATTR_DB_STATEMENT "db.statement"             /* SQL, normalised, literals masked */
#define CMR_NODE_ATTR_DB_SYSTEM "db.system"                   /* the JDBC URL's subprotocol: h2, postgresql */
#define CMR_NODE_ATTR_HTTP_METHOD "http.request.method"       /* an outgoing HTTP call's method */
#define CMR_NODE_ATTR_URL "url.full"                          /* its URL, without query or user */
#define CMR_NODE_ATTR_HTTP_STATUS "http.response.status_code" /* the status it was answered with */
#define CMR_NODE_ATTR_DB_ROWS "db.response.affected_rows"     /* a JDBC update's row count */
#define CMR_NODE_ATTR_HTTP_HEADER "http.request.header."      /* + a lower-case name: an entry call's request header */
#define CMR_NODE_ATTR_HTTP_ROUTE "http.route"                 /* the route an entry call's request matched */

/* Builds a message's `segments` bytes. Owns `out` (free with cmr_segs_writer_free). */
typedef struct cmr_segs_writer {
    cmr_events_encoder_t enc; /* its dictionary spans the message; its layout the message's */
    cmr_buf_t out;
    uint32_t segments, events;
    int64_t agent_id;
    int64_t prev_segment, prev_thread;
    uint64_t prev_base;
    uint8_t prev_trace[16], first_trace[16];
    char *prev_name; /* owned copy */
} cmr_segs_writer_t;

/* Starts a message of agent_id's (memory of the previous one is kept), its events in the
 * packed layout (cmr_segs_writer_begin) or in `layout` (a message as older agents wrote
 * it: CMR_EVENTS_LAYOUT_BASIC). */
void cmr_segs_writer_begin(cmr_segs_writer_t *w, int64_t agent_id);
void cmr_segs_writer_begin_layout(cmr_segs_writer_t *w, int64_t agent_id, uint32_t layout);
/* Appends one segment batch: its header from b (agent_id, packed_events and event_count
 * are ignored) and count records (the 24-byte layout). 0, or -1 when memory ran out or a
 * record has a kind other than 1-4: the message is then unusable (begin a new one). */
int cmr_segs_writer_add(cmr_segs_writer_t *w, const cmr_event_batch_t *b, const uint8_t *records, uint32_t count);
/* The message so far (pointing into the writer: valid until the next add or begin). */
void cmr_segs_writer_msg(const cmr_segs_writer_t *w, cmr_event_msg_t *m);
void cmr_segs_writer_free(cmr_segs_writer_t *w);

/* Reads a message's segment batches one by one, checking every rule (a message in a
 * layout it does not know is refused), and hands each out as a standalone batch: its
 * events re-encoded on their own in the basic layout (a dictionary and clock of their
 * own), as an EventBatch of one segment had them. Large (two event decoders and an
 * encoder): keep it off small stacks. Owns its buffers (free with cmr_segs_reader_free). */
typedef struct cmr_segs_reader {
    cmr_events_decoder_t dec;
    cmr_events_encoder_t enc;
    const uint8_t *p, *end;
    uint32_t left, events_left;
    int64_t agent_id;
    int64_t prev_segment, prev_thread;
    uint64_t prev_base;
    uint8_t prev_trace[16];
    bool first;
    cmr_buf_t name, strings, block;
    cmr_parent_link_t parent;
    cmr_kv_t attrs[CMR_SEGS_MAX_ATTRS];
    cmr_node_attr_t node_attrs[CMR_SEGS_MAX_NODE_ATTRS];
    size_t at[2 * (CMR_SEGS_MAX_ATTRS + CMR_SEGS_MAX_NODE_ATTRS)]; /* their strings' offsets */
    char error[160];
} cmr_segs_reader_t;

void cmr_segs_reader_init(cmr_segs_reader_t *r, const cmr_event_msg_t *m);
/* 1 with the next segment batch in *b (its pointers into the reader: valid until the next
 * call); 0 after the last one, when the body and the counts agree; -1 when the message is
 * corrupt (r->error says why; every later call returns -1 too). */
int cmr_segs_reader_next(cmr_segs_reader_t *r, cmr_event_batch_t *b);
void cmr_segs_reader_free(cmr_segs_reader_t *r);

/* Conveniences for tools and tests. cmr_segs_split: every segment batch of a message, as
 * standalone batches in an array the caller frees with cmr_segs_batches_free (deep
 * copies): the count, or -1 with err. cmr_segs_join: one message from n standalone
 * batches (their packed_events unpacked), into w (its `out` holds the bytes): 0 or -1. */
long cmr_segs_split(const cmr_event_msg_t *m, cmr_event_batch_t **out, char *err, size_t errlen);
void cmr_segs_batches_free(cmr_event_batch_t *b, size_t n);
int cmr_segs_join(cmr_segs_writer_t *w, int64_t agent_id, const cmr_event_batch_t *b, size_t n, cmr_event_msg_t *m);

#endif

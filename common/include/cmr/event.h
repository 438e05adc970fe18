/*
 * event.h - the packed invocation-event records inside an EventBatch's `events` bytes.
 *
 * Each record is CMR_EVENT_RECORD_SIZE (24) bytes, little endian:
 *
 *   offset 0   u64  method id (XXH3-64 of the method's signature), 0 when not a method
 *   offset 8   u64  timestamp, nanoseconds since the Unix epoch
 *   offset 16  u32  kind (cmr_event_kind_t)
 *   offset 20  u32  aux: for ENTER / EXIT / EXCEPTION_EXIT the call depth of the
 *                   invocation on its thread (1 = the segment's root call); for FORK 0
 *
 * The probe runtime writes exactly this layout into its per-thread rings, so the agent
 * ships records without re-encoding them and the ingest worker reads them in place.
 */
#ifndef CMR_EVENT_H
#define CMR_EVENT_H

#include <stddef.h>
#include <stdint.h>

#include "cmr/bytes.h"
#include <string.h>

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

#endif

/*
 * ing_synth.h - builds synthetic EventBatch streams for the tests and the benchmark:
 * one segment at a time (enter / exit / fork with correct depths and sequence numbers),
 * cut into batches of a chosen size. Shared by the unit tests, the broker integration
 * tests and the benchmark.
 */
#ifndef ING_SYNTH_H
#define ING_SYNTH_H

#include <stddef.h>
#include <stdint.h>

#include "cmr/msg.h"

typedef struct synth_seg {
    uint8_t trace_id[16];
    uint64_t agent_id, segment_id;
    int64_t thread_id;
    char thread_name[64];
    int has_parent;
    cmr_parent_link_t parent;
    uint8_t *events;
    size_t count, cap;
    uint32_t depth;
    int ended; /* the root call exited */
} synth_seg_t;

void synth_seg_init(synth_seg_t *s, const uint8_t trace_id[16], uint64_t agent, uint64_t segment, int64_t thread,
                    const char *thread_name, const cmr_parent_link_t *parent);
void synth_seg_free(synth_seg_t *s);
void synth_enter(synth_seg_t *s, uint64_t method, uint64_t ts);
void synth_exit(synth_seg_t *s, uint64_t method, uint64_t ts);
void synth_throw(synth_seg_t *s, uint64_t method, uint64_t ts);
/* Records a FORK; returns its event sequence number (for the child's parent link). */
int64_t synth_fork(synth_seg_t *s, uint64_t ts);

/* Cuts events [0, upto) (all when upto = 0) into batches of at most per_batch events.
 * The batch holding the root's exit gets last = true. Batches hold their events encoded
 * (cmr/event.h) and a per-call copy of the thread name / parent (free with synth_batches_free). */
size_t synth_batches(const synth_seg_t *s, size_t per_batch, cmr_event_batch_t **out);
void synth_batches_free(cmr_event_batch_t *b, size_t n);

/* A fixed trace id from a small number (tests) */
void synth_trace_id(uint64_t n, uint8_t out[16]);

#endif

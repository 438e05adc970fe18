/*
 * ing_synth.c - synthetic EventBatch streams (see ing_synth.h).
 */
#include "ing_synth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/buf.h"
#include "cmr/event.h"

void synth_seg_init(synth_seg_t *s, const uint8_t trace_id[16], uint64_t agent, uint64_t segment, int64_t thread,
                    const char *thread_name, const cmr_parent_link_t *parent)
{
    memset(s, 0, sizeof *s);
    memcpy(s->trace_id, trace_id, 16);
    s->agent_id = agent;
    s->segment_id = segment;
    s->thread_id = thread;
    snprintf(s->thread_name, sizeof s->thread_name, "%s", thread_name);
    if (parent) {
        s->has_parent = 1;
        s->parent = *parent;
    }
}

void synth_seg_free(synth_seg_t *s)
{
    free(s->events);
    s->events = NULL;
}

static void add(synth_seg_t *s, uint64_t method, uint64_t ts, uint32_t kind, uint32_t aux)
{
    if (cmr_array_grow(&s->events, &s->cap, s->count + 1, CMR_EVENT_RECORD_SIZE, 64) != 0)
        abort();
    cmr_event_t ev = {method, ts, kind, aux};
    cmr_event_write(s->events, s->count++, &ev);
}

void synth_enter(synth_seg_t *s, uint64_t method, uint64_t ts)
{
    add(s, method, ts, CMR_EVENT_ENTER, ++s->depth);
}

void synth_exit(synth_seg_t *s, uint64_t method, uint64_t ts)
{
    add(s, method, ts, CMR_EVENT_EXIT, s->depth);
    if (--s->depth == 0)
        s->ended = 1;
}

void synth_throw(synth_seg_t *s, uint64_t method, uint64_t ts)
{
    add(s, method, ts, CMR_EVENT_EXCEPTION_EXIT, s->depth);
    if (--s->depth == 0)
        s->ended = 1;
}

int64_t synth_fork(synth_seg_t *s, uint64_t ts)
{
    add(s, 0, ts, CMR_EVENT_FORK, 0);
    return (int64_t)s->count - 1;
}

size_t synth_batches(const synth_seg_t *s, size_t per_batch, cmr_event_batch_t **out)
{
    size_t n = s->count ? (s->count + per_batch - 1) / per_batch : 1;
    cmr_event_batch_t *b = calloc(n, sizeof *b);
    cmr_events_encoder_t *enc = calloc(1, sizeof *enc); /* per call: callers may be threads */
    if (!b || !enc)
        abort();
    for (size_t i = 0; i < n; i++) {
        size_t first = i * per_batch, cnt = s->count - first < per_batch ? s->count - first : per_batch;
        if (!s->count)
            cnt = 0;
        b[i].agent_id = (int64_t)s->agent_id;
        b[i].thread_id = s->thread_id;
        b[i].thread_name = strdup(s->thread_name);
        b[i].segment_id = (int64_t)s->segment_id;
        memcpy(b[i].trace_id, s->trace_id, 16);
        if (s->has_parent) {
            b[i].parent = malloc(sizeof *b[i].parent);
            *b[i].parent = s->parent;
        }
        b[i].batch_seq = (int32_t)i;
        b[i].first_event_seq = (int64_t)first;
        b[i].last = s->ended && i == n - 1;
        b[i].event_count = (int32_t)cnt;
        /* each batch is encoded on its own, as the agent sends it */
        b[i].packed_events.data = malloc(cnt * CMR_EVENTS_MAX_ENCODED + 1);
        if (!b[i].packed_events.data || cmr_events_pack(enc, s->events + first * CMR_EVENT_RECORD_SIZE, (uint32_t)cnt,
                                                        b[i].packed_events.data, &b[i].packed_events.len) != 0)
            abort();
    }
    free(enc);
    *out = b;
    return n;
}

void synth_batches_free(cmr_event_batch_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(b[i].thread_name);
        free(b[i].parent);
        free(b[i].packed_events.data);
    }
    free(b);
}

void synth_trace_id(uint64_t n, uint8_t out[16])
{
    memset(out, 0, 16);
    out[0] = 0x7a;
    for (int i = 0; i < 8; i++)
        out[15 - i] = (uint8_t)(n >> (8 * i));
}

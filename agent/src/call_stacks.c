/*
 * call_stacks.c - shadow stacks of the threads' open invocations, and what the publisher
 * derives from them: per-method durations, transactions, in-flight maxima and stalled
 * calls (call_stacks.h). Pure C, no JVM: unit tested in agent/tests/test_call_stacks.c.
 */
#include "call_stacks.h"

#include <stdlib.h>
#include <string.h>

#include "cmr/buf.h"
#include "cmr/bytes.h"

static const uint8_t no_trace[16];

void cmr_cs_init(cmr_call_stacks_t *cs, cmr_metric_agg_t *methods)
{
    memset(cs, 0, sizeof *cs);
    cs->methods = methods;
    cs->max_tracked = CMR_CS_MAX_TRACKED;
    cmr_metric_agg_init(&cs->tx, 0);
}

void cmr_cs_free(cmr_call_stacks_t *cs)
{
    cmr_metric_agg_free(&cs->tx);
    size_t it = 0;
    uint64_t key;
    void *val;
    while (cmr_u64map_next(&cs->open, &it, &key, &val))
        free(val);
    it = 0;
    while (cmr_u64map_next(&cs->names, &it, &key, &val))
        free(val);
    cmr_u64map_free(&cs->open);
    cmr_u64map_free(&cs->tx_open);
    cmr_u64map_free(&cs->names);
    free(cs->prune);
    free(cs->tx_items);
    memset(cs, 0, sizeof *cs);
}

/* --- in-flight counters: current level in the low 32 bits, interval maximum above ------- */

static uint32_t cur_of(uint64_t v)
{
    return (uint32_t)v;
}

static uint32_t max_of(uint64_t v)
{
    return (uint32_t)(v >> 32);
}

static uint64_t counter(uint32_t cur, uint32_t max)
{
    return (uint64_t)cur | (uint64_t)max << 32;
}

/* The slot of key in a map of open frames (made when new: *created), or NULL when the map
 * holds cs->max_tracked keys already and not this one, or memory ran out. */
static void **tracked_slot(cmr_call_stacks_t *cs, cmr_u64map_t *m, uint64_t key, bool *created)
{
    if (cmr_u64map_count(m) >= cs->max_tracked && !cmr_u64map_has(m, key))
        return NULL;
    return cmr_u64map_get_slot(m, key, created);
}

/* One more frame of method_id open: its record, or NULL when cs->open is full (or memory
 * ran out): the frame is then not counted, and must not be uncounted either. */
static cmr_cs_method_t *method_open(cmr_call_stacks_t *cs, uint64_t method_id)
{
    cmr_u64map_t *m = &cs->open;
    bool created;
    void **slot = tracked_slot(cs, m, method_id, &created);
    if (!slot)
        return NULL;
    if (created && !(*slot = calloc(1, sizeof(cmr_cs_method_t)))) {
        cmr_u64map_del(m, method_id, NULL);
        return NULL;
    }
    cmr_cs_method_t *r = *slot;
    if (++r->cur > r->max)
        r->max = r->cur;
    return r;
}

/* One more frame of key open (transactions' counters). False when the map is full (or
 * memory ran out): the frame is then not counted, and must not be uncounted either. */
static bool in_flight_inc(cmr_call_stacks_t *cs, cmr_u64map_t *m, uint64_t key)
{
    bool created;
    void **slot = tracked_slot(cs, m, key, &created);
    if (!slot)
        return false;
    uint64_t v = (uint64_t)(uintptr_t)*slot;
    uint32_t cur = cur_of(v) + 1, max = max_of(v);
    *slot = (void *)(uintptr_t)counter(cur, cur > max ? cur : max);
    return true;
}

static void in_flight_dec(cmr_u64map_t *m, uint64_t key)
{
    bool created;
    void **slot = cmr_u64map_get_slot(m, key, &created); /* present: never allocates */
    if (!slot)
        return;
    uint64_t v = (uint64_t)(uintptr_t)*slot;
    uint32_t cur = cur_of(v);
    *slot = (void *)(uintptr_t)counter(cur ? cur - 1 : 0, max_of(v));
}

uint32_t cmr_cs_in_flight(const cmr_call_stacks_t *cs, uint64_t method_id, uint32_t *max)
{
    const cmr_cs_method_t *r = cmr_u64map_get(&cs->open, method_id);
    if (max)
        *max = r ? r->max : 0;
    return r ? r->cur : 0;
}

/* --- frames --------------------------------------------------------------------------------- */

/* Removes the innermost frame without recording it (its exit was lost, or the thread
 * ended): it no longer counts in flight. */
static void frame_discard(cmr_call_stacks_t *cs, cmr_cs_thread_t *t)
{
    const cmr_cs_frame_t *f = &t->frames[--t->n];
    if ((f->flags & CMR_CS_TRACKED) && f->m->cur)
        f->m->cur--;
    if (f->flags & CMR_CS_TX_TRACKED)
        in_flight_dec(&cs->tx_open, f->tx_key);
}

/* Discards the frames at depth >= depth. */
static void discard_from(cmr_call_stacks_t *cs, cmr_cs_thread_t *t, uint32_t depth)
{
    while (t->n > 0 && t->frames[t->n - 1].depth >= depth)
        frame_discard(cs, t);
}

/* Frames beyond the bound: only their number is known, from the depths that go by. */
static void deep_frames_at(cmr_cs_thread_t *t, uint32_t depth)
{
    t->deep = depth > CMR_CS_MAX_DEPTH ? depth - CMR_CS_MAX_DEPTH : 0;
}

void cmr_cs_enter(cmr_call_stacks_t *cs, cmr_cs_thread_t *t, uint64_t method_id, int64_t ts_ns, uint32_t depth,
                  const uint8_t *trace, bool transaction)
{
    if (depth == 0)
        depth = 1;
    discard_from(cs, t, depth);
    memcpy(t->trace, trace ? trace : no_trace, 16);
    if (depth > CMR_CS_MAX_DEPTH) {
        deep_frames_at(t, depth); /* this one included */
        cs->not_kept++;
        return;
    }
    t->deep = 0;
    if (t->n == t->cap && (t->cap >= CMR_CS_MAX_DEPTH || CMR_ARRAY_GROW(t->frames, t->cap, t->n + 1) != 0)) {
        cs->not_kept++;
        return;
    }
    cmr_cs_frame_t *f = &t->frames[t->n++];
    *f = (cmr_cs_frame_t){.method_id = method_id, .tx_key = method_id, .enter_ns = ts_ns, .depth = depth};
    if ((f->m = method_open(cs, method_id)))
        f->flags |= CMR_CS_TRACKED;
    else
        cs->untracked++;
    if (transaction && depth == 1) {
        f->flags |= CMR_CS_TX;
        if (in_flight_inc(cs, &cs->tx_open, method_id))
            f->flags |= CMR_CS_TX_TRACKED;
        else
            cs->untracked++;
    }
}

/* Records the innermost frame's call, which ended at ts_ns, and pops it. */
static void frame_complete(cmr_call_stacks_t *cs, cmr_cs_thread_t *t, int64_t ts_ns, bool thrown)
{
    const cmr_cs_frame_t *f = &t->frames[t->n - 1];
    const uint8_t *trace = memcmp(t->trace, no_trace, 16) != 0 ? t->trace : NULL;
    int64_t ns = ts_ns - f->enter_ns;
    if (t->n >= 2) /* the enclosing open frame: this call is not its self time */
        t->frames[t->n - 2].child_ns += ns > 0 ? ns : 0;
    cmr_metric_agg_add_hinted(cs->methods, f->m ? &f->m->item : NULL, f->method_id, ns, ns - f->child_ns, thrown,
                              trace); /* overflow counted there */
    if (f->flags & CMR_CS_TX)
        cmr_metric_agg_add_traced(&cs->tx, f->tx_key, ns, thrown, trace);
    frame_discard(cs, t);
}

bool cmr_cs_exit(cmr_call_stacks_t *cs, cmr_cs_thread_t *t, uint64_t method_id, int64_t ts_ns, uint32_t depth,
                 bool thrown)
{
    if (depth == 0) /* an exit without its entry: the method was redefined during the call */
        return false;
    if (depth > CMR_CS_MAX_DEPTH) { /* a frame that was not kept; the ones below it stay */
        deep_frames_at(t, depth - 1);
        return false;
    }
    t->deep = 0;
    discard_from(cs, t, depth + 1); /* their exits were lost */
    if (t->n == 0 || t->frames[t->n - 1].depth != depth)
        return false; /* its enter was lost */
    if (t->frames[t->n - 1].method_id != method_id) {
        frame_discard(cs, t); /* records of both were lost: neither can be timed */
        return false;
    }
    frame_complete(cs, t, ts_ns, thrown);
    return true;
}

/* The record of a name (made when new), or NULL when CMR_CS_MAX_NAMES were given already
 * or memory ran out. */
static cmr_cs_name_t *name_record(cmr_call_stacks_t *cs, uint64_t key, const char *name, size_t len,
                                  uint64_t root_method_id)
{
    cmr_cs_name_t *n = cmr_u64map_get(&cs->names, key);
    if (n || cmr_u64map_count(&cs->names) >= CMR_CS_MAX_NAMES)
        return n;
    if (!(n = malloc(sizeof *n + len + 1)))
        return NULL;
    n->root_method_id = root_method_id;
    memcpy(n->text, name, len);
    n->text[len] = '\0';
    if (cmr_u64map_put(&cs->names, key, n) != 0) {
        free(n);
        return NULL;
    }
    return n;
}

void cmr_cs_name_transaction(cmr_call_stacks_t *cs, cmr_cs_thread_t *t, const char *name, size_t len)
{
    cmr_cs_frame_t *f = t->n ? &t->frames[0] : NULL;
    if (!f || f->depth != 1 || !(f->flags & CMR_CS_TX) || (f->flags & CMR_CS_NAMED) || len == 0 ||
        len > CMR_CS_NAME_MAX)
        return;
    uint64_t key = cmr_hash_bytes(name, len);
    cmr_cs_name_t *n = name_record(cs, key, name, len, f->method_id);
    if (!n) {
        cs->unnamed++;
        return;
    }
    if (f->flags & CMR_CS_TX_TRACKED) { /* in flight under the name from now on */
        in_flight_dec(&cs->tx_open, f->tx_key);
        f->flags &= ~(uint32_t)CMR_CS_TX_TRACKED;
    }
    f->tx_key = key;
    f->flags |= CMR_CS_NAMED;
    if (in_flight_inc(cs, &cs->tx_open, key))
        f->flags |= CMR_CS_TX_TRACKED;
    else
        cs->untracked++;
}

void cmr_cs_thread_end(cmr_call_stacks_t *cs, cmr_cs_thread_t *t)
{
    while (t->n > 0)
        frame_discard(cs, t);
    free(t->frames);
    memset(t, 0, sizeof *t);
}

/* --- interval end ------------------------------------------------------------------------- */

bool cmr_cs_stalled(const cmr_cs_thread_t *t, int64_t now_ns, int64_t threshold_ns, int64_t wall_offset_ns,
                    cmr_stalled_call_t *out, uint8_t *stack)
{
    if (threshold_ns <= 0 || t->n == 0)
        return false;
    const cmr_cs_frame_t *inner = &t->frames[t->n - 1];
    int64_t running = now_ns - inner->enter_ns;
    if (running <= threshold_ns)
        return false;
    for (uint32_t i = 0; i < t->n; i++)
        cmr_put_be64(stack + (size_t)i * 8, t->frames[i].method_id);
    bool traced = memcmp(t->trace, no_trace, 16) != 0;
    *out = (cmr_stalled_call_t){
        .trace_id = {traced ? (uint8_t *)t->trace : NULL, traced ? 16 : 0},
        .method_id = (int64_t)inner->method_id,
        .started_ms = (inner->enter_ns + wall_offset_ns) / 1000000,
        .running_ms = running / 1000000,
        .stack = {stack, (size_t)t->n * 8},
    };
    return true;
}

int cmr_cs_batch(cmr_call_stacks_t *cs, cmr_metric_batch_t *mb)
{
    for (size_t i = 0; i < mb->metrics.count; i++) {
        uint32_t max;
        cmr_cs_in_flight(cs, (uint64_t)mb->metrics.items[i].method_id, &max);
        mb->metrics.items[i].max_in_flight = max;
    }
    mb->transactions.items = NULL;
    mb->transactions.count = 0;
    mb->samples_dropped += (int64_t)cs->tx.overflow;
    cmr_metric_batch_t tb;
    if (cmr_metric_agg_batch(&cs->tx, mb->agent_id, mb->interval_start_ms, mb->interval_ms, &tb) != 0 ||
        (tb.metrics.count > cs->tx_cap && CMR_ARRAY_GROW(cs->tx_items, cs->tx_cap, tb.metrics.count) != 0))
        return -1;
    for (size_t i = 0; i < tb.metrics.count; i++) {
        const cmr_method_metric_t *m = &tb.metrics.items[i];
        uint64_t v = (uint64_t)(uintptr_t)cmr_u64map_get(&cs->tx_open, (uint64_t)m->method_id);
        const cmr_cs_name_t *n = cmr_u64map_get(&cs->names, (uint64_t)m->method_id); /* the key */
        cs->tx_items[i] = (cmr_transaction_metric_t){
            .root_method_id = n ? (int64_t)n->root_method_id : m->method_id,
            .name = n ? (char *)n->text : "",
            .count = m->count,
            .exceptions = m->exceptions,
            .sum_ns = m->sum_ns,
            .min_ns = m->min_ns,
            .max_ns = m->max_ns,
            .histogram = m->histogram,
            .max_in_flight = max_of(v),
            .slowest_trace = m->slowest_trace,
        };
    }
    mb->transactions.items = cs->tx_items;
    mb->transactions.count = tb.metrics.count;
    return 0;
}

/* Every maximum back to the current level; counters at zero removed (a method whose
 * frames all ended costs nothing until it is entered again). */
static void in_flight_reset(cmr_call_stacks_t *cs, cmr_u64map_t *m)
{
    size_t it = 0, n = 0;
    uint64_t key;
    void *val;
    if (cmr_u64map_count(m) > cs->prune_cap && CMR_ARRAY_GROW(cs->prune, cs->prune_cap, cmr_u64map_count(m)) != 0)
        cs->prune_cap = 0; /* no memory: nothing is removed this time */
    while (cmr_u64map_next(m, &it, &key, &val)) {
        uint32_t cur = cur_of((uint64_t)(uintptr_t)val);
        if (cur == 0 && n < cs->prune_cap) {
            cs->prune[n++] = key;
        } else {
            bool created;
            void **slot = cmr_u64map_get_slot(m, key, &created); /* the entry just returned */
            *slot = (void *)(uintptr_t)counter(cur, cur);
        }
    }
    for (size_t i = 0; i < n; i++)
        cmr_u64map_del(m, cs->prune[i], NULL);
}

/* The same for the methods' records: those without open frames are freed. */
static void methods_reset(cmr_call_stacks_t *cs)
{
    size_t it = 0, n = 0;
    uint64_t key;
    void *val;
    if (cmr_u64map_count(&cs->open) > cs->prune_cap &&
        CMR_ARRAY_GROW(cs->prune, cs->prune_cap, cmr_u64map_count(&cs->open)) != 0)
        cs->prune_cap = 0; /* no memory: nothing is removed this time */
    while (cmr_u64map_next(&cs->open, &it, &key, &val)) {
        cmr_cs_method_t *r = val;
        r->max = r->cur;
        if (r->cur == 0 && n < cs->prune_cap)
            cs->prune[n++] = key;
    }
    for (size_t i = 0; i < n; i++) {
        void *old = NULL;
        cmr_u64map_del(&cs->open, cs->prune[i], &old);
        free(old);
    }
}

void cmr_cs_interval_reset(cmr_call_stacks_t *cs)
{
    cmr_metric_agg_reset(&cs->tx);
    methods_reset(cs);
    in_flight_reset(cs, &cs->tx_open);
    cs->not_kept = 0;
    cs->untracked = 0;
}

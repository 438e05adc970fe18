/*
 * ing_tree.c - assembles the call tree of one trace from its stored batches.
 *
 * Pure: no I/O, and the result depends only on the set of batches (sorted and
 * de-duplicated here), never on the order they arrived in.
 *
 *  1. Batches are sorted by (agent, segment, batch_seq); a repeated key counts once.
 *  2. Each segment's events are walked in order with a stack. The depth in `aux` makes
 *     the walk robust: an enter at depth d closes anything open at depth >= d (their
 *     exits were lost), an exit closes the open call of its depth. Missing batches are
 *     counted as gaps (batch_seq or first_event_seq discontinuities). FORK events remember
 *     which call was open when the context was handed over.
 *  3. A segment with a parent link hangs under the call that was open at the parent's
 *     FORK event (async). A segment of another JVM under a call is remote: the callee of
 *     a remote call (HTTP). It is synchronous (not async) when its duration fits within
 *     the caller's (a skewed clock shifts an interval, it does not stretch it): the
 *     caller waited for it; so is any remote child of an HTTP client library's call node
 *     (one with a url.full attribute), which returns with the response. A foreign parent (agent 0, event_seq -1) hangs under a
 *     "remote caller" node; a parent that has not arrived under a "missing" node.
 *     Call attributes (a JDBC call's SQL) go to the call whose ENTER they name; one that
 *     names no recorded call of its segment is left out.
 *  4. Children are ordered by start time (ties: agent, segment, event), totals and self
 *     times computed: wait is the union of the synchronous remote children's intervals
 *     clipped to the caller's; self is total minus the synchronous children of the same
 *     segment minus wait, never negative. Async children are not subtracted.
 *
 * Ownership: the tree owns its nodes and names; cmr_tree_free() releases them.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/buf.h"
#include "cmr/event.h"
#include "cmr/ingest.h"

typedef struct fork_ref {
    int64_t seq;
    uint32_t node; /* CMR_NODE_NONE: no call was open */
} fork_ref_t;

typedef struct seg {
    uint64_t agent, segment;
    const cmr_ingest_batch_t *first; /* first batch (for the parent link and thread) */
    uint32_t name;
    int64_t thread_id;
    bool has_last;
    uint32_t first_top; /* top-level calls, linked through next_sibling */
    fork_ref_t *forks;
    size_t nforks, capforks;
    int64_t max_ts;
} seg_t;

static int cmp_batch(const void *a, const void *b)
{
    const cmr_ingest_batch_t *x = *(const cmr_ingest_batch_t *const *)a, *y = *(const cmr_ingest_batch_t *const *)b;
    if (x->agent_id != y->agent_id)
        return x->agent_id < y->agent_id ? -1 : 1;
    if (x->segment_id != y->segment_id)
        return x->segment_id < y->segment_id ? -1 : 1;
    if (x->batch_seq != y->batch_seq)
        return x->batch_seq < y->batch_seq ? -1 : 1;
    /* same key twice: keep a deterministic one (the larger content first) */
    if (x->event_count != y->event_count)
        return x->event_count > y->event_count ? -1 : 1;
    return 0;
}

static uint32_t new_node(cmr_tree_t *t)
{
    if (t->count >= CMR_NODE_NONE || CMR_ARRAY_GROW(t->nodes, t->cap, t->count + 1) != 0)
        return CMR_NODE_NONE;
    cmr_tree_node_t *n = &t->nodes[t->count];
    memset(n, 0, sizeof *n);
    n->parent = n->first_child = n->next_sibling = CMR_NODE_NONE;
    n->thread_name = CMR_NODE_NONE;
    n->event_seq = -1;
    return (uint32_t)t->count++;
}

static void add_child(cmr_tree_t *t, uint32_t parent, uint32_t child)
{
    t->nodes[child].parent = parent;
    t->nodes[child].next_sibling = t->nodes[parent].first_child;
    t->nodes[parent].first_child = child;
}

static int add_name(cmr_tree_t *t, const char *s, size_t len, uint32_t *idx)
{
    if (CMR_ARRAY_GROW(t->names, t->names_cap, t->nnames + 1) != 0 || !(t->names[t->nnames] = strndup(s, len)))
        return -1;
    *idx = (uint32_t)t->nnames++;
    return 0;
}

static int add_fork(seg_t *s, int64_t seq, uint32_t node)
{
    if (CMR_ARRAY_GROW(s->forks, s->capforks, s->nforks + 1) != 0)
        return -1;
    s->forks[s->nforks++] = (fork_ref_t){seq, node};
    return 0;
}

/* Closes the call on top of the stack whose exit was lost. */
static void close_lost(cmr_tree_t *t, uint32_t n, int64_t end)
{
    cmr_tree_node_t *x = &t->nodes[n];
    x->lost_exit = true;
    x->end_ns = end > x->start_ns ? end : x->start_ns;
}

typedef struct walk {
    uint32_t *stack;
    size_t depth, cap;
    cmr_events_decoder_t dec; /* the batch being read */
} walk_t;

static int push(walk_t *w, uint32_t n)
{
    if (CMR_ARRAY_GROW(w->stack, w->cap, w->depth + 1) != 0)
        return -1;
    w->stack[w->depth++] = n;
    return 0;
}

static int walk_event(cmr_tree_t *t, seg_t *s, walk_t *w, const cmr_event_t *ev, int64_t seq, int64_t prev_ts)
{
    if ((int64_t)ev->timestamp_ns > s->max_ts)
        s->max_ts = (int64_t)ev->timestamp_ns;
    switch (ev->kind) {
    case CMR_EVENT_ENTER: {
        uint32_t d = ev->aux ? ev->aux : 1;
        while (w->depth && t->nodes[w->stack[w->depth - 1]].depth >= d)
            close_lost(t, w->stack[--w->depth], prev_ts);
        uint32_t n = new_node(t);
        if (n == CMR_NODE_NONE)
            return -1;
        cmr_tree_node_t *x = &t->nodes[n];
        x->kind = CMR_NODE_CALL;
        x->method_id = ev->method_id;
        x->agent_id = s->agent;
        x->segment_id = s->segment;
        x->thread_id = s->thread_id;
        x->thread_name = s->name;
        x->event_seq = seq;
        x->start_ns = x->end_ns = (int64_t)ev->timestamp_ns;
        x->running = true;
        x->depth = d;
        if (w->depth)
            add_child(t, w->stack[w->depth - 1], n);
        else {
            x->next_sibling = s->first_top;
            s->first_top = n;
        }
        return push(w, n);
    }
    case CMR_EVENT_EXIT:
    case CMR_EVENT_EXCEPTION_EXIT: {
        uint32_t d = ev->aux ? ev->aux : 1;
        size_t i = w->depth;
        while (i && t->nodes[w->stack[i - 1]].depth > d)
            i--;
        if (!i || t->nodes[w->stack[i - 1]].depth != d) {
            t->unmatched++; /* its enter is in a missing batch, or was dropped */
            return 0;
        }
        while (w->depth > i)
            close_lost(t, w->stack[--w->depth], (int64_t)ev->timestamp_ns);
        if (ev->method_id && t->nodes[w->stack[i - 1]].method_id != ev->method_id) {
            /* the exit of another call at this depth: the open one lost its exit, and
             * this exit's enter is in a missing batch */
            close_lost(t, w->stack[--w->depth], prev_ts);
            t->unmatched++;
            return 0;
        }
        cmr_tree_node_t *x = &t->nodes[w->stack[--w->depth]];
        x->running = false;
        x->end_ns = (int64_t)ev->timestamp_ns > x->start_ns ? (int64_t)ev->timestamp_ns : x->start_ns;
        x->exception = ev->kind == CMR_EVENT_EXCEPTION_EXIT;
        return 0;
    }
    case CMR_EVENT_FORK: return add_fork(s, seq, w->depth ? w->stack[w->depth - 1] : CMR_NODE_NONE);
    default: return 0; /* unknown kinds are skipped: a newer agent may send more */
    }
}

/* The call of nodes [from, t->count) (one segment's, made in event order) whose ENTER is
 * event seq; CMR_NODE_NONE when none. */
static uint32_t find_call(const cmr_tree_t *t, uint32_t from, int64_t seq)
{
    size_t lo = from, hi = t->count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (t->nodes[mid].event_seq < seq)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < t->count && t->nodes[lo].event_seq == seq ? (uint32_t)lo : CMR_NODE_NONE;
}

/* Gives the call attributes of a segment's batches to its calls (nodes from `from` on). */
static int attach_attrs(cmr_tree_t *t, uint32_t from, const cmr_ingest_batch_t *const *b, size_t nb)
{
    for (size_t k = 0; k < nb; k++) {
        size_t cur = 0;
        cmr_ingest_attr_t a;
        while (cmr_ingest_batch_attr_next(b[k], &cur, &a) == 1) {
            uint32_t n = find_call(t, from, a.event_seq);
            if (n == CMR_NODE_NONE)
                continue;
            if (CMR_ARRAY_GROW(t->attrs, t->attrs_cap, t->nattrs + 1) != 0)
                return -1;
            cmr_tree_attr_t *x = &t->attrs[t->nattrs];
            x->node = n;
            if (add_name(t, a.key, a.key_len, &x->key) != 0 || add_name(t, a.value, a.value_len, &x->value) != 0)
                return -1;
            t->nattrs++;
        }
    }
    return 0;
}

static int cmp_attr(const void *a, const void *b)
{
    const cmr_tree_attr_t *x = a, *y = b;
    if (x->node != y->node)
        return x->node < y->node ? -1 : 1;
    return x->key < y->key ? -1 : x->key > y->key; /* names are added in order: arrival order */
}

/* Sorts the attributes by node and points each node at its own. */
static void index_attrs(cmr_tree_t *t)
{
    if (t->nattrs > 1)
        qsort(t->attrs, t->nattrs, sizeof *t->attrs, cmp_attr);
    for (size_t i = 0; i < t->nattrs; i++) {
        cmr_tree_node_t *x = &t->nodes[t->attrs[i].node];
        if (!x->nattrs)
            x->attrs = (uint32_t)i;
        x->nattrs++;
    }
}

/* Walks one segment's batches [b, e). */
static int walk_segment(cmr_tree_t *t, seg_t *s, const cmr_ingest_batch_t *const *b, size_t nb, walk_t *w)
{
    uint32_t from = (uint32_t)t->count;
    w->depth = 0;
    int32_t expect_seq = 0;
    int64_t expect_ev = 0, prev_ts = 0;
    for (size_t k = 0; k < nb; k++) {
        const cmr_ingest_batch_t *x = b[k];
        if (x->batch_seq != expect_seq || x->first_event_seq != expect_ev)
            t->gaps++;
        expect_seq = x->batch_seq + 1;
        expect_ev = x->first_event_seq + x->event_count;
        t->events += x->event_count;
        t->dropped += (uint64_t)x->dropped;
        if (x->last)
            s->has_last = true;
        cmr_events_decoder_init(&w->dec, x->events, x->events_len, x->event_count);
        cmr_event_t ev;
        for (uint32_t i = 0; cmr_events_decoder_next(&w->dec, &ev) == 1; i++) {
            if (walk_event(t, s, w, &ev, x->first_event_seq + i, prev_ts) != 0)
                return -1;
            prev_ts = (int64_t)ev.timestamp_ns;
        }
    }
    /* still open: running (or, in an ended segment, their exits were lost) */
    while (w->depth) {
        cmr_tree_node_t *x = &t->nodes[w->stack[--w->depth]];
        x->end_ns = s->max_ts > x->start_ns ? s->max_ts : x->start_ns;
        if (s->has_last) {
            x->running = false;
            x->lost_exit = true;
        }
    }
    return attach_attrs(t, from, b, nb);
}

static seg_t *find_seg(seg_t *segs, size_t n, uint64_t agent, uint64_t segment)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (segs[mid].agent < agent || (segs[mid].agent == agent && segs[mid].segment < segment))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && segs[lo].agent == agent && segs[lo].segment == segment ? &segs[lo] : NULL;
}

static const fork_ref_t *find_fork(const seg_t *s, int64_t seq)
{
    size_t lo = 0, hi = s->nforks;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (s->forks[mid].seq < seq)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < s->nforks && s->forks[lo].seq == seq ? &s->forks[lo] : NULL;
}

/* A synthetic top-level node (remote caller / missing parent), one per distinct key. */
static uint32_t synthetic(cmr_tree_t *t, cmr_tree_node_kind_t kind, uint64_t agent, uint64_t segment, int64_t seq)
{
    for (uint32_t r = t->first_root; r != CMR_NODE_NONE; r = t->nodes[r].next_sibling) {
        cmr_tree_node_t *x = &t->nodes[r];
        if (x->kind == kind && x->agent_id == agent && x->segment_id == segment && x->event_seq == seq)
            return r;
    }
    uint32_t n = new_node(t);
    if (n == CMR_NODE_NONE)
        return n;
    cmr_tree_node_t *x = &t->nodes[n];
    x->kind = kind;
    x->agent_id = agent;
    x->segment_id = segment;
    x->event_seq = seq;
    x->start_ns = INT64_MAX;
    x->end_ns = INT64_MIN;
    x->next_sibling = t->first_root;
    t->first_root = n;
    return n;
}

/* Whether a remote child (the callee of a call to another JVM) was waited for: its
 * duration fits within the caller's. Its interval is not compared: the two JVMs' clocks
 * may be skewed, and the callee's method often returns just after the caller was
 * released (the response is sent before it returns); wait_ns clips instead. */
static bool remote_sync(const cmr_tree_node_t *caller, const cmr_tree_node_t *child)
{
    return child->end_ns - child->start_ns <= caller->end_ns - caller->start_ns;
}

/* Whether x is an HTTP client library's call (it has a url.full attribute: Probe.httpCall):
 * it returns with the response, so the callee under it was waited for, however long the
 * callee's method ran on after answering (closing the exchange on a loaded machine). */
static bool client_call(const cmr_tree_t *t, const cmr_tree_node_t *x)
{
    for (uint32_t a = 0; a < x->nattrs; a++)
        if (!strcmp(t->names[t->attrs[x->attrs + a].key], CMR_NODE_ATTR_URL))
            return true;
    return false;
}

/* Hangs a segment's top-level calls under parent (CMR_NODE_NONE: as roots). remote: the
 * parent is a call in another JVM; such a child is async only when it was not waited for. */
static void move_tops(cmr_tree_t *t, seg_t *s, uint32_t parent, bool async, bool remote)
{
    uint32_t n = s->first_top;
    while (n != CMR_NODE_NONE) {
        uint32_t next = t->nodes[n].next_sibling;
        bool r = remote && parent != CMR_NODE_NONE;
        t->nodes[n].remote = r;
        t->nodes[n].async =
            async && !(r && (client_call(t, &t->nodes[parent]) || remote_sync(&t->nodes[parent], &t->nodes[n])));
        if (parent == CMR_NODE_NONE) {
            t->nodes[n].parent = CMR_NODE_NONE;
            t->nodes[n].next_sibling = t->first_root;
            t->first_root = n;
        } else {
            add_child(t, parent, n);
        }
        n = next;
    }
    s->first_top = CMR_NODE_NONE;
}

static int link_segment(cmr_tree_t *t, seg_t *segs, size_t nsegs, seg_t *s, bool *missing)
{
    const cmr_ingest_batch_t *b = s->first;
    if (!b->has_parent) {
        move_tops(t, s, CMR_NODE_NONE, false, false);
        return 0;
    }
    if (b->parent_agent == 0 && b->parent_seq == -1) {
        uint32_t r = synthetic(t, CMR_NODE_REMOTE, 0, b->parent_segment, -1);
        if (r == CMR_NODE_NONE)
            return -1;
        move_tops(t, s, r, true, false);
        return 0;
    }
    seg_t *p = find_seg(segs, nsegs, b->parent_agent, b->parent_segment);
    const fork_ref_t *f = p ? find_fork(p, b->parent_seq) : NULL;
    if (f) {
        /* NONE: no call was open, a root of its own */
        move_tops(t, s, f->node, true, p->agent != s->agent);
        return 0;
    }
    *missing = true;
    uint32_t r = synthetic(t, CMR_NODE_MISSING, b->parent_agent, b->parent_segment, b->parent_seq);
    if (r == CMR_NODE_NONE)
        return -1;
    move_tops(t, s, r, true, false);
    return 0;
}

static int cmp_node_order(const cmr_tree_node_t *x, const cmr_tree_node_t *y)
{
    if (x->start_ns != y->start_ns)
        return x->start_ns < y->start_ns ? -1 : 1;
    if (x->kind != y->kind)
        return x->kind < y->kind ? -1 : 1;
    if (x->agent_id != y->agent_id)
        return x->agent_id < y->agent_id ? -1 : 1;
    if (x->segment_id != y->segment_id)
        return x->segment_id < y->segment_id ? -1 : 1;
    if (x->event_seq != y->event_seq)
        return x->event_seq < y->event_seq ? -1 : 1;
    return 0;
}

static int cmp_idx(const void *a, const void *b, void *tree)
{
    const cmr_tree_t *t = tree;
    return cmp_node_order(&t->nodes[*(const uint32_t *)a], &t->nodes[*(const uint32_t *)b]);
}

/* Sorts a sibling list; returns the new head. tmp holds at least count entries. */
static uint32_t sort_list(cmr_tree_t *t, uint32_t head, uint32_t *tmp)
{
    size_t n = 0;
    for (uint32_t c = head; c != CMR_NODE_NONE; c = t->nodes[c].next_sibling)
        tmp[n++] = c;
    if (n < 2)
        return head;
    qsort_r(tmp, n, sizeof *tmp, cmp_idx, t);
    for (size_t i = 0; i + 1 < n; i++)
        t->nodes[tmp[i]].next_sibling = tmp[i + 1];
    t->nodes[tmp[n - 1]].next_sibling = CMR_NODE_NONE;
    return tmp[0];
}

typedef struct interval {
    int64_t start, end;
} interval_t;

static int cmp_interval(const void *a, const void *b)
{
    const interval_t *x = a, *y = b;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* The time call x waited for its synchronous remote children: the union of their
 * intervals, each clipped to x's (overlapping calls count once; a skewed clock may put
 * a child partly or wholly outside x). iv holds at least as many entries as x has
 * children. */
static int64_t wait_time(const cmr_tree_t *t, const cmr_tree_node_t *x, interval_t *iv)
{
    size_t n = 0;
    for (uint32_t c = x->first_child; c != CMR_NODE_NONE; c = t->nodes[c].next_sibling) {
        const cmr_tree_node_t *y = &t->nodes[c];
        if (!y->remote || y->async)
            continue;
        int64_t a = y->start_ns > x->start_ns ? y->start_ns : x->start_ns;
        int64_t b = y->end_ns < x->end_ns ? y->end_ns : x->end_ns;
        if (a < b)
            iv[n++] = (interval_t){a, b};
    }
    if (n > 1)
        qsort(iv, n, sizeof *iv, cmp_interval);
    int64_t sum = 0;
    for (size_t i = 0; i < n;) {
        int64_t a = iv[i].start, b = iv[i].end;
        for (i++; i < n && iv[i].start <= b; i++)
            if (iv[i].end > b)
                b = iv[i].end;
        sum += b - a;
    }
    return sum;
}

/* Synthetic nodes span their children; totals, wait and self times, depths. Iterative
 * post-order over everything reachable from the roots. */
static int finish(cmr_tree_t *t)
{
    uint32_t *tmp = malloc((t->count + 1) * sizeof *tmp);
    uint32_t *order = malloc((t->count + 1) * sizeof *order);
    uint32_t *stack = malloc((t->count + 1) * sizeof *stack);
    interval_t *iv = malloc((t->count + 1) * sizeof *iv);
    if (!tmp || !order || !stack || !iv) {
        free(tmp), free(order), free(stack), free(iv);
        return -1;
    }
    size_t no = 0, ns = 0;
    for (uint32_t r = t->first_root; r != CMR_NODE_NONE; r = t->nodes[r].next_sibling) {
        t->nodes[r].depth = 0;
        stack[ns++] = r;
    }
    while (ns) { /* pre-order: parents before children */
        uint32_t n = stack[--ns];
        order[no++] = n;
        for (uint32_t c = t->nodes[n].first_child; c != CMR_NODE_NONE; c = t->nodes[c].next_sibling) {
            t->nodes[c].depth = t->nodes[n].depth + 1;
            stack[ns++] = c;
        }
    }
    for (size_t i = no; i-- > 0;) { /* children before parents */
        cmr_tree_node_t *x = &t->nodes[order[i]];
        int64_t sync = 0;
        for (uint32_t c = x->first_child; c != CMR_NODE_NONE; c = t->nodes[c].next_sibling) {
            cmr_tree_node_t *y = &t->nodes[c];
            if (x->kind != CMR_NODE_CALL) {
                if (y->start_ns < x->start_ns)
                    x->start_ns = y->start_ns;
                if (y->end_ns > x->end_ns)
                    x->end_ns = y->end_ns;
                if (y->running)
                    x->running = true;
            } else if (!y->async && !y->remote) {
                sync += y->total_ns;
            }
        }
        if (x->kind != CMR_NODE_CALL && x->start_ns > x->end_ns)
            x->start_ns = x->end_ns = 0;
        x->total_ns = x->end_ns - x->start_ns;
        x->wait_ns = x->kind == CMR_NODE_CALL ? wait_time(t, x, iv) : 0;
        x->self_ns = x->kind == CMR_NODE_CALL ? x->total_ns - sync - x->wait_ns : 0;
        if (x->self_ns < 0)
            x->self_ns = 0;
        x->first_child = sort_list(t, x->first_child, tmp);
    }
    t->first_root = sort_list(t, t->first_root, tmp);
    t->start_ns = INT64_MAX;
    t->end_ns = INT64_MIN;
    for (size_t i = 0; i < no; i++) {
        cmr_tree_node_t *x = &t->nodes[order[i]];
        if (x->start_ns < t->start_ns)
            t->start_ns = x->start_ns;
        if (x->end_ns > t->end_ns)
            t->end_ns = x->end_ns;
    }
    if (!no)
        t->start_ns = t->end_ns = 0;
    free(tmp), free(order), free(stack), free(iv);
    return 0;
}

typedef struct agent_thread {
    uint64_t agent;
    int64_t thread;
} agent_thread_t;

static int cmp_agent_thread(const void *a, const void *b)
{
    const agent_thread_t *x = a, *y = b;
    if (x->agent != y->agent)
        return x->agent < y->agent ? -1 : 1;
    return x->thread < y->thread ? -1 : x->thread > y->thread;
}

/* Distinct JVMs and distinct (JVM, thread) pairs among the segments. */
static int count_agents_threads(cmr_tree_t *t, const seg_t *segs, size_t n)
{
    t->agents = t->threads = 0;
    agent_thread_t *v = malloc((n + 1) * sizeof *v);
    if (!v)
        return -1;
    for (size_t i = 0; i < n; i++)
        v[i] = (agent_thread_t){segs[i].agent, segs[i].thread_id};
    qsort(v, n, sizeof *v, cmp_agent_thread);
    for (size_t i = 0; i < n; i++) {
        t->agents += i == 0 || v[i].agent != v[i - 1].agent;
        t->threads += i == 0 || cmp_agent_thread(&v[i], &v[i - 1]) != 0;
    }
    free(v);
    return 0;
}

int cmr_tree_build(const cmr_ingest_batch_t *batches, size_t n, cmr_tree_t *t)
{
    memset(t, 0, sizeof *t);
    t->first_root = CMR_NODE_NONE;
    if (!n)
        return 0;
    memcpy(t->trace_id, batches[0].trace_id, 16);
    const cmr_ingest_batch_t **v = malloc(n * sizeof *v);
    seg_t *segs = calloc(n, sizeof *segs);
    walk_t w = {0};
    int rc = -1;
    size_t nv = 0, nsegs = 0;
    if (!v || !segs)
        goto out;
    for (size_t i = 0; i < n; i++)
        if (!memcmp(batches[i].trace_id, t->trace_id, 16))
            v[nv++] = &batches[i];
    qsort(v, nv, sizeof *v, cmp_batch);
    size_t u = 0; /* drop repeated keys */
    for (size_t i = 0; i < nv; i++)
        if (!u || v[u - 1]->agent_id != v[i]->agent_id || v[u - 1]->segment_id != v[i]->segment_id ||
            v[u - 1]->batch_seq != v[i]->batch_seq)
            v[u++] = v[i];
    nv = u;
    t->batches = (uint32_t)nv;
    for (size_t i = 0; i < nv;) {
        size_t j = i;
        while (j < nv && v[j]->agent_id == v[i]->agent_id && v[j]->segment_id == v[i]->segment_id)
            j++;
        seg_t *s = &segs[nsegs++];
        s->agent = v[i]->agent_id;
        s->segment = v[i]->segment_id;
        s->first = v[i];
        s->thread_id = v[i]->thread_id;
        s->first_top = CMR_NODE_NONE;
        s->name = CMR_NODE_NONE;
        s->max_ts = INT64_MIN;
        for (size_t k = i; k < j; k++) /* the first batch that names the thread */
            if (v[k]->name_len) {
                if (add_name(t, v[k]->thread_name, v[k]->name_len, &s->name) != 0)
                    goto out;
                break;
            }
        if (walk_segment(t, s, v + i, j - i, &w) != 0)
            goto out;
        i = j;
    }
    t->segments = (uint32_t)nsegs;
    index_attrs(t); /* before the links: a client call's callee is synchronous (move_tops) */
    bool missing = false, ended = true, root = false;
    for (size_t i = 0; i < nsegs; i++) {
        if (link_segment(t, segs, nsegs, &segs[i], &missing) != 0)
            goto out;
        ended = ended && segs[i].has_last;
        root =
            root || !segs[i].first->has_parent || (segs[i].first->parent_agent == 0 && segs[i].first->parent_seq == -1);
    }
    if (count_agents_threads(t, segs, nsegs) != 0)
        goto out;
    t->complete = ended && root && !missing && t->gaps == 0;
    rc = finish(t);
out:
    for (size_t i = 0; i < nsegs; i++)
        free(segs[i].forks);
    free(segs);
    free(v);
    free(w.stack);
    if (rc != 0)
        cmr_tree_free(t);
    return rc;
}

void cmr_tree_free(cmr_tree_t *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->nnames; i++)
        free(t->names[i]);
    free(t->names);
    free(t->attrs);
    free(t->nodes);
    memset(t, 0, sizeof *t);
    t->first_root = CMR_NODE_NONE;
}

/*
 * probe_rings.c - allocation and registry of the per-thread rings, and the JNI natives of
 * cmr/agent/Probe (see probe_rings.h for the memory layout).
 *
 * A thread's first probe call runs Probe.register0() once: the agent allocates the ring,
 * wraps it in a direct ByteBuffer and remembers it in the thread's JVMTI thread-local
 * storage so that ThreadEnd can close it. After that no probe crosses JNI, except a rare
 * wake0() when a ring is half full and the publisher should drain it early.
 *
 * Virtual threads (JDK 21+) are many and short: each gets a small ring of its own
 * (agent.virtual.ring.records), at most agent.max.virtual.threads at once, and only when
 * the JVM posts VirtualThreadEnd (which frees it; JVMTI's ThreadEnd is not posted for
 * them). A virtual thread that gets no ring records nothing and is counted as refused.
 */
#include "probe_rings.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "cmr/buf.h"
#include "cmr/event.h"
#include "cmr/ids.h"
#include "cmr/log.h"
#include "cmr/msg.h"
#include "request_headers.h"

struct cmr_probe_rings {
    cmr_agent_t *agent;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    bool woken;
    cmr_ring_t **rings;
    size_t count, cap;
    uint64_t ring_records; /* for new threads */
    uint64_t max_segment_events;
    int64_t send_interval_ms, metric_interval_ms;
    int64_t stall_threshold_ms;
    uint32_t max_batch;
    size_t max_threads;
    /* virtual threads: ring size, how many may hold one, how many do, how many of those
     * ended and wait for the publisher; whether the JVM reports their ends at all */
    uint64_t virtual_ring_records;
    size_t max_virtual, virtual_count, virtual_closed;
    bool virtual_ends;
    int64_t agent_id;
    uint64_t segment_base;
    cmr_probe_stats_t stats;
    /* trace-context settings from the configuration, handed to the probe by traceContext0 */
    bool context_set;
    int context_policy;
    uint8_t context_key[32];
    size_t context_key_len;
    /* the request headers entry traces keep: valid names joined by '\n', for requestHeaders0 */
    char request_headers[CMR_REQUEST_HEADERS_JOINED];
};

static uint64_t pow2_at_least(uint64_t n)
{
    uint64_t p = 64;
    while (p < n)
        p <<= 1;
    return p;
}

cmr_probe_rings_t *cmr_probe_rings_new(cmr_agent_t *a)
{
    cmr_probe_rings_t *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->agent = a;
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->wake, NULL);
    r->ring_records = pow2_at_least((uint64_t)a->settings.ring_records);
    r->send_interval_ms = a->settings.send_interval_ms;
    r->metric_interval_ms = a->settings.metric_interval_ms;
    r->stall_threshold_ms = a->settings.stall_threshold_ms;
    r->max_batch = 4096;
    r->max_threads = (size_t)a->settings.max_threads;
    r->virtual_ring_records = pow2_at_least((uint64_t)a->settings.virtual_ring_records);
    r->max_virtual = (size_t)a->settings.max_virtual_threads;
    r->max_segment_events = (uint64_t)a->settings.max_segment_events;
    return r;
}

void cmr_probe_rings_configure(cmr_probe_rings_t *r, const cmr_strategy_t *s)
{
    pthread_mutex_lock(&r->lock);
    if (s->ring_records > 0)
        r->ring_records = pow2_at_least((uint64_t)s->ring_records);
    if (s->send_interval_ms > 0)
        r->send_interval_ms = s->send_interval_ms;
    if (s->metric_interval_ms > 0)
        r->metric_interval_ms = s->metric_interval_ms;
    if (s->max_batch_events > 0)
        r->max_batch = (uint32_t)s->max_batch_events;
    if (s->max_threads > 0)
        r->max_threads = (size_t)s->max_threads;
    if (s->max_segment_events > 0 && (uint64_t)s->max_segment_events != r->max_segment_events) {
        r->max_segment_events = (uint64_t)s->max_segment_events; /* segments that begin from now on */
        for (size_t i = 0; i < r->count; i++)
            __atomic_store_n((uint64_t *)(r->rings[i]->mem + CMR_RING_MAX_EVENTS), r->max_segment_events,
                             __ATOMIC_RELAXED);
    }
    /* the environment decides (0: no stalled-call reports); a negative value is no decision */
    r->stall_threshold_ms = s->stall_threshold_ms >= 0 ? s->stall_threshold_ms : r->agent->settings.stall_threshold_ms;
    pthread_mutex_unlock(&r->lock);
}

void cmr_probe_rings_set_agent(cmr_probe_rings_t *r, int64_t agent_id)
{
    pthread_mutex_lock(&r->lock);
    r->agent_id = agent_id;
    for (size_t i = 0; i < r->count; i++)
        __atomic_store_n((uint64_t *)(r->rings[i]->mem + CMR_RING_AGENT_ID), (uint64_t)agent_id, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&r->lock);
}

void cmr_probe_rings_set_trace_context(cmr_probe_rings_t *r, int policy, const uint8_t *key, size_t key_len)
{
    pthread_mutex_lock(&r->lock);
    r->context_set = true;
    r->context_policy = policy;
    r->context_key_len = key_len <= sizeof r->context_key ? key_len : 0; /* a key of another size: none */
    if (r->context_key_len)
        memcpy(r->context_key, key, r->context_key_len);
    pthread_mutex_unlock(&r->lock);
}

size_t cmr_probe_rings_set_request_headers(cmr_probe_rings_t *r, char *const *names, size_t n)
{
    char joined[CMR_REQUEST_HEADERS_JOINED];
    size_t kept = cmr_request_headers_join(joined, names, n);
    pthread_mutex_lock(&r->lock);
    memcpy(r->request_headers, joined, sizeof joined);
    pthread_mutex_unlock(&r->lock);
    return kept;
}

void cmr_probe_rings_set_segment_base(cmr_probe_rings_t *r, uint64_t base)
{
    pthread_mutex_lock(&r->lock);
    r->segment_base = base;
    pthread_mutex_unlock(&r->lock);
}

void cmr_ring_free(cmr_ring_t *ring)
{
    if (!ring)
        return;
    free(ring->mem);
    free(ring->batch);
    free(ring->node_raw);
    cmr_buf_free(&ring->node_out);
    free(ring->cs.frames); /* NULL once the publisher saw the thread end */
    free(ring);
}

/* --- natives ------------------------------------------------------------------------------ */

static cmr_probe_rings_t *natives_rings; /* the rings the natives serve */

/* Gives back a virtual thread's place counted by register0 when it got no ring after all. */
static void virtual_release(cmr_probe_rings_t *r, bool is_virtual)
{
    if (!is_virtual)
        return;
    pthread_mutex_lock(&r->lock);
    r->virtual_count--;
    pthread_mutex_unlock(&r->lock);
}

void cmr_probe_rings_virtual_ends(cmr_probe_rings_t *r, bool reported)
{
    pthread_mutex_lock(&r->lock);
    r->virtual_ends = reported;
    pthread_mutex_unlock(&r->lock);
}

/* static native ByteBuffer register0(long threadId, String threadName, boolean virtual) */
static jobject JNICALL probe_register0(JNIEnv *env, jclass cls, jlong thread_id, jstring thread_name,
                                       jboolean is_virtual)
{
    (void)cls;
    cmr_probe_rings_t *r = natives_rings;
    cmr_agent_t *a = r->agent;
    pthread_mutex_lock(&r->lock);
    bool full = r->count >= r->max_threads || (is_virtual && (!r->virtual_ends || r->virtual_count >= r->max_virtual));
    uint64_t records = is_virtual ? r->virtual_ring_records : r->ring_records;
    uint32_t max_batch = r->max_batch;
    if (full)
        r->stats.rings_refused++;
    else if (is_virtual)
        r->virtual_count++; /* taken now, so that racing threads cannot pass the limit */
    pthread_mutex_unlock(&r->lock);
    if (full || a->mode == CMR_MODE_STOPPED) {
        if (!full)
            virtual_release(r, is_virtual);
        return NULL;
    }
    if (is_virtual && max_batch > records)
        max_batch = (uint32_t)records; /* a batch never holds more than the ring */
    cmr_ring_t *ring = calloc(1, sizeof *ring);
    size_t bytes = CMR_RING_HEADER + records * CMR_EVENT_RECORD_SIZE;
    if (!ring || posix_memalign((void **)&ring->mem, 64, bytes) != 0 ||
        !(ring->batch = malloc((size_t)max_batch * CMR_EVENT_RECORD_SIZE))) {
        cmr_ring_free(ring);
        virtual_release(r, is_virtual);
        return NULL;
    }
    ring->is_virtual = is_virtual;
    memset(ring->mem, 0, CMR_RING_HEADER);
    pthread_mutex_lock(&r->lock);
    cmr_put_le64(ring->mem + CMR_RING_AGENT_ID, (uint64_t)r->agent_id);
    cmr_put_le64(ring->mem + CMR_RING_SEGMENT_BASE, r->segment_base);
    cmr_put_le64(ring->mem + CMR_RING_MAX_EVENTS, r->max_segment_events);
    pthread_mutex_unlock(&r->lock);
    ring->cap = records;
    ring->batch_cap = max_batch;
    ring->thread_id = thread_id;
    const char *name = thread_name ? (*env)->GetStringUTFChars(env, thread_name, NULL) : NULL;
    snprintf(ring->thread_name, sizeof ring->thread_name, "%s", name ? name : "?");
    if (name)
        (*env)->ReleaseStringUTFChars(env, thread_name, name);
    jobject buf = (*env)->NewDirectByteBuffer(env, ring->mem, (jlong)bytes);
    if (!buf || (*a->jvmti)->SetThreadLocalStorage(a->jvmti, NULL, ring) != JVMTI_ERROR_NONE) {
        cmr_ring_free(ring);
        virtual_release(r, is_virtual);
        return NULL;
    }
    pthread_mutex_lock(&r->lock);
    if (CMR_ARRAY_GROW(r->rings, r->cap, r->count + 1) != 0) {
        pthread_mutex_unlock(&r->lock);
        (*a->jvmti)->SetThreadLocalStorage(a->jvmti, NULL, NULL);
        cmr_ring_free(ring);
        virtual_release(r, is_virtual);
        return NULL;
    }
    r->rings[r->count++] = ring;
    r->stats.rings_live = r->count;
    pthread_mutex_unlock(&r->lock);
    return buf;
}

/* static native void wake0() */
static void JNICALL probe_wake0(JNIEnv *env, jclass cls)
{
    (void)env;
    (void)cls;
    cmr_probe_rings_wake(natives_rings);
}

/* static native byte[] traceContext0(): {policy, key...}, or null before a configuration. */
static jbyteArray JNICALL probe_trace_context0(JNIEnv *env, jclass cls)
{
    (void)cls;
    cmr_probe_rings_t *r = natives_rings;
    jbyte buf[1 + sizeof r->context_key];
    jsize n = 0;
    pthread_mutex_lock(&r->lock);
    if (r->context_set) {
        buf[0] = (jbyte)r->context_policy;
        memcpy(buf + 1, r->context_key, r->context_key_len);
        n = (jsize)(1 + r->context_key_len);
    }
    pthread_mutex_unlock(&r->lock);
    if (n == 0)
        return NULL;
    jbyteArray out = (*env)->NewByteArray(env, n);
    if (out)
        (*env)->SetByteArrayRegion(env, out, 0, n, buf);
    return out; /* NULL with an OutOfMemoryError pending: the probe catches it */
}

/* static native String requestHeaders0(): the request headers entry traces keep, names
 * joined by '\n' ("" for none). */
static jstring JNICALL probe_request_headers0(JNIEnv *env, jclass cls)
{
    (void)cls;
    cmr_probe_rings_t *r = natives_rings;
    char names[sizeof r->request_headers];
    pthread_mutex_lock(&r->lock);
    memcpy(names, r->request_headers, sizeof names);
    pthread_mutex_unlock(&r->lock);
    return (*env)->NewStringUTF(env, names); /* NULL with an OutOfMemoryError pending: caught */
}

/* static native long asyncCompletionId0(boolean jakarta): the method id of the node an
 * async servlet request's completion is (cmr/ids.h). */
static jlong JNICALL probe_async_completion_id0(JNIEnv *env, jclass cls, jboolean jakarta)
{
    (void)env;
    (void)cls;
    return (jlong)cmr_async_completion_id(jakarta == JNI_TRUE);
}

/* static native ByteBuffer control0(): the diagnoses' control block (agent_diagnoses.h). */
static jobject JNICALL probe_control0(JNIEnv *env, jclass cls)
{
    (void)cls;
    cmr_agent_diags_t *d = natives_rings->agent->diags;
    return (*env)->NewDirectByteBuffer(env, cmr_agent_diags_control(d), 64);
}

/* static native String anchors0(): the anchors in force, as agent_diagnoses.h writes them. */
static jstring JNICALL probe_anchors0(JNIEnv *env, jclass cls)
{
    (void)cls;
    char *text = cmr_agent_diags_anchors_text(natives_rings->agent->diags);
    if (!text)
        return NULL;
    jstring s = (*env)->NewStringUTF(env, text); /* ASCII and the conditions' UTF-8 */
    free(text);
    return s;
}

void cmr_probe_rings_bind_natives(cmr_probe_rings_t *r, JNIEnv *env, jclass probe_class)
{
    natives_rings = r;
    JNINativeMethod methods[] = {
        {"register0", "(JLjava/lang/String;Z)Ljava/nio/ByteBuffer;", (void *)probe_register0},
        {"wake0", "()V", (void *)probe_wake0},
        {"traceContext0", "()[B", (void *)probe_trace_context0},
        {"requestHeaders0", "()Ljava/lang/String;", (void *)probe_request_headers0},
        {"asyncCompletionId0", "(Z)J", (void *)probe_async_completion_id0},
        {"control0", "()Ljava/nio/ByteBuffer;", (void *)probe_control0},
        {"anchors0", "()Ljava/lang/String;", (void *)probe_anchors0},
    };
    if ((*env)->RegisterNatives(env, probe_class, methods, sizeof methods / sizeof methods[0]) != 0) {
        (*env)->ExceptionClear(env);
        cmr_log(CMR_LOG_ERROR, "agent.probe_natives_failed", "class=%s action=\"probes record nothing\"",
                CMR_PROBE_CLASS);
    }
}

int64_t cmr_probe_measure_cost(JNIEnv *env)
{
    int64_t t0 = cmr_mono_ns();
    jclass cls = (*env)->FindClass(env, CMR_PROBE_CLASS);
    jmethodID calibrate = cls ? (*env)->GetStaticMethodID(env, cls, "calibrate", "(II)J") : NULL;
    jlong ps = -1;
    if (calibrate)
        ps = (*env)->CallStaticLongMethod(env, cls, calibrate, (jint)CMR_PROBE_CALIBRATION_WARMUP,
                                          (jint)CMR_PROBE_CALIBRATION_ROUNDS);
    bool thrown = (*env)->ExceptionCheck(env);
    if (thrown)
        (*env)->ExceptionClear(env);
    if (cls)
        (*env)->DeleteLocalRef(env, cls);
    long long took_ms = (long long)((cmr_mono_ns() - t0) / 1000000);
    if (!calibrate || thrown || ps <= 0) {
        cmr_log(CMR_LOG_WARN, "agent.probe_cost_unmeasured",
                "reason=\"%s\" took_ms=%lld action=\"the overhead budget takes the CMR's setting "
                "(instrumenter.budget.probe_ns)\"",
                !calibrate ? "no Probe.calibrate"
                : thrown   ? "it threw"
                           : "the clock went backwards",
                took_ms);
        return 0;
    }
    cmr_log(CMR_LOG_INFO, "agent.probe_cost", "probe_ns=%.1f rounds=%d calls_per_round=1000 took_ms=%lld",
            (double)ps / 1000.0, CMR_PROBE_CALIBRATION_ROUNDS, took_ms);
    return (int64_t)ps;
}

void cmr_probe_rings_thread_end(cmr_probe_rings_t *r, jvmtiEnv *jvmti, jthread thread)
{
    cmr_ring_t *ring = NULL;
    if ((*jvmti)->GetThreadLocalStorage(jvmti, thread, (void **)&ring) != JVMTI_ERROR_NONE || !ring)
        return;
    (*jvmti)->SetThreadLocalStorage(jvmti, thread, NULL);
    ring->closed = true;
    if (!ring->is_virtual) {
        cmr_probe_rings_wake(r);
        return;
    }
    /* virtual threads end by the thousand: the next pass frees their rings, an early one
     * only once half the places they may hold wait for it */
    pthread_mutex_lock(&r->lock);
    bool wake = ++r->virtual_closed >= r->max_virtual / 2;
    pthread_mutex_unlock(&r->lock);
    if (wake)
        cmr_probe_rings_wake(r);
}

/* --- publisher side ------------------------------------------------------------------------ */

size_t cmr_probe_rings_snapshot(cmr_probe_rings_t *r, cmr_ring_t **out, size_t max, cmr_ring_t **dead, size_t *ndead,
                                size_t max_dead)
{
    size_t n = 0, keep = 0;
    *ndead = 0;
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < r->count; i++) {
        cmr_ring_t *ring = r->rings[i];
        if (ring->final_drained && !ring->segment_open && ring->batch_count == 0 && *ndead < max_dead) {
            dead[(*ndead)++] = ring;
            if (ring->is_virtual) {
                r->virtual_count--;
                r->virtual_closed--;
            }
            continue;
        }
        r->rings[keep++] = ring;
        if (n < max)
            out[n++] = ring;
    }
    r->count = keep;
    r->stats.rings_live = keep;
    pthread_mutex_unlock(&r->lock);
    return n;
}

void cmr_probe_rings_count(cmr_probe_rings_t *r, const cmr_probe_stats_t *d)
{
    pthread_mutex_lock(&r->lock);
    r->stats.recorded += d->recorded;
    r->stats.dropped += d->dropped;
    r->stats.messages += d->messages;
    r->stats.batches += d->batches;
    r->stats.events_sent += d->events_sent;
    r->stats.event_bytes += d->event_bytes;
    r->stats.metric_batches += d->metric_batches;
    r->stats.traces_dropped += d->traces_dropped;
    r->stats.calls_not_recorded += d->calls_not_recorded;
    pthread_mutex_unlock(&r->lock);
}

void cmr_probe_rings_stats(cmr_probe_rings_t *r, cmr_probe_stats_t *out)
{
    pthread_mutex_lock(&r->lock);
    *out = r->stats;
    pthread_mutex_unlock(&r->lock);
}

void cmr_probe_rings_wake(cmr_probe_rings_t *r)
{
    pthread_mutex_lock(&r->lock);
    r->woken = true;
    pthread_cond_signal(&r->wake);
    pthread_mutex_unlock(&r->lock);
}

void cmr_probe_rings_wait(cmr_probe_rings_t *r, int timeout_ms)
{
    struct timespec ts = cmr_wall_deadline(timeout_ms);
    pthread_mutex_lock(&r->lock);
    if (!r->woken)
        pthread_cond_timedwait(&r->wake, &r->lock, &ts);
    r->woken = false;
    pthread_mutex_unlock(&r->lock);
}

void cmr_probe_rings_intervals(cmr_probe_rings_t *r, int64_t *send_ms, int64_t *metric_ms)
{
    pthread_mutex_lock(&r->lock);
    *send_ms = r->send_interval_ms;
    *metric_ms = r->metric_interval_ms;
    pthread_mutex_unlock(&r->lock);
}

int64_t cmr_probe_rings_stall_threshold(cmr_probe_rings_t *r)
{
    pthread_mutex_lock(&r->lock);
    int64_t ms = r->stall_threshold_ms;
    pthread_mutex_unlock(&r->lock);
    return ms;
}

/*
 * agent_entry.c - how the JVM enters the agent: Agent_OnLoad (-agentpath), Agent_OnAttach
 * (dynamic attach), Agent_OnUnload, and the JVMTI event callbacks.
 *
 * Phases, as the JVMTI specification orders them:
 *   OnLoad   read options, get the JVMTI environment, add capabilities, install event
 *            callbacks, put the probe jar on the bootstrap class path, start the control
 *            thread (registration needs no JVM: it can run while the JVM starts)
 *   start    ClassFileLoadHook already hashes and records classes (no JNI calls)
 *   live     (VMInit) JNI is usable: start the publisher, let the control thread
 *            attach and apply commands
 *   dead     (VMDeath) flush within the configured time, stop our threads, go quiet
 *
 * The JVM must never be harmed: a bad option or a JVMTI failure disables the agent's
 * features with a clear log line and the JVM runs on, unless the user asked for
 * strict=true. Every JVMTI error is checked and reported with what was being done.
 */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"
#include "cmr/ids.h"
#include "cmr/log.h"
#include "probe_rings.h"

cmr_agent_t *cmr_agent_self;

jvmtiError cmr_agent_check(jvmtiError err, const char *what)
{
    if (err != JVMTI_ERROR_NONE) {
        char *name = NULL;
        jvmtiEnv *jvmti = cmr_agent_self ? cmr_agent_self->jvmti : NULL;
        if (jvmti)
            (*jvmti)->GetErrorName(jvmti, err, &name);
        cmr_log(CMR_LOG_ERROR, "agent.jvmti_error", "call=\"%s\" error=%s code=%d", what, name ? name : "?", err);
        if (name)
            (*jvmti)->Deallocate(jvmti, (unsigned char *)name);
    }
    return err;
}

/* --- class loaders ---------------------------------------------------------------------- */

int64_t cmr_agent_loader_id(jvmtiEnv *jvmti, jobject loader)
{
    if (!loader)
        return 0; /* bootstrap */
    jlong tag = 0;
    if ((*jvmti)->GetTag(jvmti, loader, &tag) != JVMTI_ERROR_NONE)
        return -1;
    if (tag)
        return tag;
    cmr_agent_t *a = cmr_agent_self;
    pthread_mutex_lock(&a->tag_lock);
    if ((*jvmti)->GetTag(jvmti, loader, &tag) == JVMTI_ERROR_NONE && tag == 0) {
        tag = ++a->next_loader_id;
        if ((*jvmti)->SetTag(jvmti, loader, tag) != JVMTI_ERROR_NONE)
            tag = -1;
    }
    pthread_mutex_unlock(&a->tag_lock);
    return tag;
}

/* --- event callbacks -------------------------------------------------------------------- */

/* --- the cache of instrumented classes ------------------------------------------------------ */

static pthread_mutex_t cache_log_lock = PTHREAD_MUTEX_INITIALIZER;

static void log_cache_refusal(const char *name, cmr_grant_verdict_t why)
{
    static cmr_log_limiter_t limiter;
    unsigned long long suppressed = 0;
    pthread_mutex_lock(&cache_log_lock);
    bool allow = cmr_log_allow(&limiter, 5, &suppressed);
    pthread_mutex_unlock(&cache_log_lock);
    if (!allow)
        return;
    char ename[256];
    cmr_log(CMR_LOG_WARN, "agent.cache_refused",
            "class=\"%s\" reason=%s suppressed=%llu action=\"the cached file is not used; the class loads its original "
            "bytes and the CMR instruments it\"",
            cmr_log_escape(name, ename, sizeof ename), cmr_grant_verdict_name(why), suppressed);
}

/* Hands the JVM a copy of len bytes (JVMTI Allocate); false when it cannot. */
static bool hand_over(jvmtiEnv *jvmti, uint8_t *bytes, size_t len, jint *new_len, unsigned char **new_data)
{
    unsigned char *out = NULL;
    if (len > INT32_MAX || cmr_agent_check((*jvmti)->Allocate(jvmti, (jlong)len, &out),
                                           "Allocate (an instrumented class)") != JVMTI_ERROR_NONE)
        return false;
    memcpy(out, bytes, len);
    *new_data = out;
    *new_len = (jint)len;
    return true;
}

bool cmr_agent_serve_cached(cmr_agent_t *a, jvmtiEnv *jvmti, const char *name, const uint8_t digest[32], jint *new_len,
                            unsigned char **new_data, uint8_t applied[32], bool *ahead)
{
    /* Only once the JVM is live: instrumented bytes call cmr/agent/Probe, which the
     * bootstrap loader cannot load while the JVM is still starting (a JDK class such as
     * java/lang/Thread, whose start() carries a hand-off probe, served then would end the
     * JVM with NoClassDefFoundError). Classes loaded before VMInit get their original bytes
     * and are redefined as without the cache. */
    *ahead = false;
    if (!atomic_load(&a->live))
        return false;
    uint8_t *bytes = NULL;
    size_t len = 0;
    int64_t revision = 0;
    const char *from = "granted_ahead";
    /* classes granted ahead (verified as they arrived, for the configured environment)
     * first; then the cache of grants on disk */
    if (a->preload &&
        cmr_grant_preload_lookup(a->preload, name, digest, cmr_wall_ms(), &bytes, &len, applied, &revision)) {
        *ahead = true;
    } else {
        if (!a->grants || !a->grants_on)
            return false;
        cmr_grant_t g;
        cmr_grant_verdict_t why;
        cmr_grant_lookup_t r = cmr_grant_store_lookup(a->grants, name, digest, cmr_wall_ms(), &bytes, &len, &g, &why);
        if (r == CMR_GRANT_LOOKUP_REFUSED)
            log_cache_refusal(name, why);
        if (r != CMR_GRANT_LOOKUP_HIT)
            return false;
        memcpy(applied, g.instrumented_digest, sizeof g.instrumented_digest);
        revision = g.revision;
        from = "cache";
    }
    bool ok = hand_over(jvmti, bytes, len, new_len, new_data);
    free(bytes);
    if (!ok)
        return false;
    char ename[256];
    cmr_log(CMR_LOG_DEBUG, "agent.cache_applied", "class=\"%s\" revision=%lld bytes=%zu from=%s",
            cmr_log_escape(name, ename, sizeof ename), (long long)revision, len, from);
    return true;
}

static void JNICALL on_class_file_load(jvmtiEnv *jvmti, JNIEnv *env, jclass class_being_redefined, jobject loader,
                                       const char *name, jobject protection_domain, jint len, const unsigned char *data,
                                       jint *new_len, unsigned char **new_data)
{
    (void)env;
    (void)protection_domain;
    /* new_data is set only with instrumented bytes from the grant cache, verified here
     * (cmr_agent_serve_cached); otherwise the JVM gets the original bytes */
    cmr_agent_t *a = cmr_agent_self;
    int mode = a->mode;
    if (!name || mode == CMR_MODE_NO_ENVIRONMENT || mode == CMR_MODE_STOPPED || len <= 0)
        return;
    if (strncmp(name, "cmr/agent/", 10) == 0)
        return;
    int64_t t0 = cmr_mono_ns();
    int64_t loader_id = cmr_agent_loader_id(jvmti, loader);
    if (loader_id < 0)
        return;
    if (class_being_redefined) {
        /* Our own RedefineClasses, or a RetransformClasses asked for to capture bytes: a
         * class that ran cached bytes keeps them (the JVM hands over the original bytes) */
        uint8_t applied[CMR_TRUST_DIGEST_BYTES];
        if (cmr_agent_capture_hook(a, name, loader_id, data, (size_t)len) &&
            cmr_class_cache_applied_of(a->classes, name, loader_id, applied)) {
            uint8_t digest[CMR_TRUST_DIGEST_BYTES];
            bool ahead;
            cmr_trust_digest(data, (size_t)len, digest);
            if (!cmr_agent_serve_cached(a, jvmti, name, digest, new_len, new_data, applied, &ahead))
                cmr_class_cache_set_applied(a->classes, name, loader_id, NULL);
        }
    } else {
        /* XXH3 finds the class in caches; the BLAKE2b digest is what a signed Redefine must
         * name to be applied to it (docs/SECURITY.md) */
        uint64_t hash = cmr_class_hash(data, (size_t)len);
        uint8_t digest[CMR_TRUST_DIGEST_BYTES];
        cmr_trust_digest(data, (size_t)len, digest);
        uint8_t applied[CMR_TRUST_DIGEST_BYTES];
        bool ahead;
        bool cached = cmr_agent_serve_cached(a, jvmti, name, digest, new_len, new_data, applied, &ahead);
        cmr_class_cause_t cause = mode == CMR_MODE_FULL ? CMR_CLASS_LOADED : CMR_CLASS_LOADED_BEFORE_REGISTRATION;
        cmr_class_cache_offer(a->classes, name, loader_id, hash, digest, data, (size_t)len, cause, t0);
        if (cached) {
            cmr_class_cache_set_applied(a->classes, name, loader_id, applied);
            uint64_t ns = (uint64_t)(cmr_mono_ns() - t0);
            if (ahead) {
                a->preload_load_hits++;
                a->preload_hit_ns_total += ns;
            } else {
                a->cache_load_hits++;
                a->cache_hit_ns_total += ns;
                uint64_t max = atomic_load(&a->cache_hit_ns_max);
                while (ns > max && !atomic_compare_exchange_weak(&a->cache_hit_ns_max, &max, ns))
                    ;
            }
        }
    }
    a->hook_ns_total += (uint64_t)(cmr_mono_ns() - t0);
    a->hook_calls++;
}

/* Internal name of a class from its signature "Lpkg/Name;" (malloc'd), NULL for arrays
 * and primitives. */
static char *internal_name(const char *sig)
{
    size_t n = strlen(sig);
    if (n < 3 || sig[0] != 'L' || sig[n - 1] != ';')
        return NULL;
    return strndup(sig + 1, n - 2);
}

static void JNICALL on_class_prepare(jvmtiEnv *jvmti, JNIEnv *env, jthread thread, jclass klass)
{
    (void)thread;
    cmr_agent_t *a = cmr_agent_self;
    if (a->mode == CMR_MODE_STOPPED)
        return;
    char *sig = NULL;
    if ((*jvmti)->GetClassSignature(jvmti, klass, &sig, NULL) != JVMTI_ERROR_NONE)
        return;
    char *name = internal_name(sig);
    (*jvmti)->Deallocate(jvmti, (unsigned char *)sig);
    if (!name)
        return;
    if (strcmp(name, CMR_PROBE_CLASS) == 0) {
        cmr_probe_rings_bind_natives(a->rings, env, klass);
    } else {
        jobject loader = NULL;
        if ((*jvmti)->GetClassLoader(jvmti, klass, &loader) == JVMTI_ERROR_NONE) {
            int64_t loader_id = cmr_agent_loader_id(jvmti, loader);
            if (loader_id >= 0)
                cmr_agent_keep_handle(a, env, klass, name, loader_id);
            if (loader)
                (*env)->DeleteLocalRef(env, loader);
        }
    }
    free(name);
}

static void JNICALL on_thread_end(jvmtiEnv *jvmti, JNIEnv *env, jthread thread)
{
    (void)env;
    (void)thread;
    cmr_probe_rings_thread_end(cmr_agent_self->rings, jvmti, NULL);
}

static void JNICALL on_virtual_thread_end(jvmtiEnv *jvmti, JNIEnv *env, jthread virtual_thread)
{
    (void)env;
    cmr_probe_rings_thread_end(cmr_agent_self->rings, jvmti, virtual_thread);
}

static void JNICALL on_vm_init(jvmtiEnv *jvmti, JNIEnv *env, jthread thread)
{
    (void)jvmti;
    (void)env;
    (void)thread;
    cmr_agent_t *a = cmr_agent_self;
    a->live = true;
    if (a->mode != CMR_MODE_STOPPED)
        cmr_agent_record_loaded_classes(a, true);
    if (cmr_probe_publisher_start(a) != 0)
        cmr_log(CMR_LOG_ERROR, "agent.publisher_failed", "probes will record nothing");
    cmr_log(CMR_LOG_DEBUG, "agent.vm_init", "instance=%s", a->instance_id);
}

static void JNICALL on_vm_death(jvmtiEnv *jvmti, JNIEnv *env)
{
    (void)env;
    cmr_agent_t *a = cmr_agent_self;
    int64_t t0 = cmr_mono_ms();
    /* Stop reacting to the JVM first: no new work while we flush. */
    (*jvmti)->SetEventNotificationMode(jvmti, JVMTI_DISABLE, JVMTI_EVENT_CLASS_FILE_LOAD_HOOK, NULL);
    (*jvmti)->SetEventNotificationMode(jvmti, JVMTI_DISABLE, JVMTI_EVENT_CLASS_PREPARE, NULL);
    cmr_probe_publisher_stop(a); /* final drain of every ring, bounded */
    cmr_agent_control_stop(a);   /* SHUTDOWN status, flush, bounded */
    a->mode = CMR_MODE_STOPPED;
    cmr_class_cache_stats_t cs;
    cmr_class_cache_stats(a->classes, &cs);
    cmr_probe_stats_t ps;
    cmr_probe_rings_stats(a->rings, &ps);
    uint64_t calls = a->hook_calls, refused = 0;
    for (int v = 0; v < CMR_TRUST_VERDICT__COUNT; v++)
        refused += v == CMR_TRUST_OK ? 0 : a->trust_counts[v];
    cmr_log(CMR_LOG_INFO, "agent.stopped",
            "instance=%s flush_ms=%lld hook_calls=%llu hook_ns_avg=%llu hook_ms_total=%.1f classes_seen=%llu "
            "classes_sent=%llu events_recorded=%llu events_dropped=%llu event_messages=%llu event_batches=%llu "
            "events_sent=%llu event_bytes=%llu traces_dropped=%llu calls_not_recorded=%llu "
            "commands_applied=%llu commands_failed=%llu commands_accepted=%llu commands_refused=%llu",
            a->instance_id, (long long)(cmr_mono_ms() - t0), (unsigned long long)calls,
            (unsigned long long)(calls ? a->hook_ns_total / calls : 0), (double)a->hook_ns_total / 1e6,
            (unsigned long long)cs.seen, (unsigned long long)cs.sent, (unsigned long long)ps.recorded,
            (unsigned long long)ps.dropped, (unsigned long long)ps.messages, (unsigned long long)ps.batches,
            (unsigned long long)ps.events_sent, (unsigned long long)ps.event_bytes,
            (unsigned long long)ps.traces_dropped, (unsigned long long)ps.calls_not_recorded,
            (unsigned long long)a->commands_applied, (unsigned long long)a->commands_failed,
            (unsigned long long)a->trust_counts[CMR_TRUST_OK], (unsigned long long)refused);
    cmr_agent_log_redefine_latency(a);
    if (a->preload) {
        cmr_grant_preload_stats_t ps2;
        cmr_grant_preload_stats(a->preload, &ps2);
        cmr_log(
            CMR_LOG_INFO, "agent.granted_ahead_stats",
            "received=%llu kept=%llu refused=%llu over_budget=%llu load_hits=%llu hit_hook_us_avg=%.1f expired=%llu "
            "classes=%zu bytes=%zu",
            (unsigned long long)ps2.received, (unsigned long long)ps2.kept, (unsigned long long)ps2.refused,
            (unsigned long long)ps2.over_budget, (unsigned long long)a->preload_load_hits,
            a->preload_load_hits ? (double)a->preload_hit_ns_total / (double)a->preload_load_hits / 1e3 : 0.0,
            (unsigned long long)ps2.expired, ps2.classes, ps2.bytes);
    }
    if (a->grants) {
        cmr_grant_store_stats_t gs;
        cmr_grant_store_stats(a->grants, &gs);
        /* load_hits: classes instrumented as they loaded; hit_hook_us_*: the whole load-hook
         * call of such a class (hashing, lookup, reading and verifying its file, copy) */
        uint64_t lh = a->cache_load_hits;
        cmr_log(CMR_LOG_INFO, "agent.cache_stats",
                "hits=%llu load_hits=%llu hit_hook_us_avg=%.1f hit_hook_us_max=%.1f hit_hook_ms_total=%.1f misses=%llu "
                "refused=%llu written=%llu write_failures=%llu evicted=%llu files=%zu bytes=%zu preverified=%llu "
                "preverified_hits=%llu",
                (unsigned long long)gs.hits, (unsigned long long)lh,
                lh ? (double)a->cache_hit_ns_total / (double)lh / 1e3 : 0.0, (double)a->cache_hit_ns_max / 1e3,
                (double)a->cache_hit_ns_total / 1e6, (unsigned long long)gs.misses, (unsigned long long)gs.refused,
                (unsigned long long)gs.written, (unsigned long long)gs.write_failures, (unsigned long long)gs.evicted,
                gs.files, gs.bytes, (unsigned long long)gs.preverified, (unsigned long long)gs.preverified_hits);
    }
}

/* --- set-up ----------------------------------------------------------------------------- */

static void host_identity(cmr_agent_t *a)
{
    if (gethostname(a->hostname, sizeof a->hostname) != 0)
        snprintf(a->hostname, sizeof a->hostname, "unknown");
    a->hostname[sizeof a->hostname - 1] = '\0';
    struct ifaddrs *ifs = NULL, *i;
    size_t cap = 8;
    a->addresses.items = calloc(cap, sizeof(char *));
    if (a->addresses.items && getifaddrs(&ifs) == 0) {
        for (i = ifs; i; i = i->ifa_next) {
            if (!i->ifa_addr || (i->ifa_flags & IFF_LOOPBACK) || a->addresses.count == cap)
                continue;
            char buf[INET6_ADDRSTRLEN] = "";
            if (i->ifa_addr->sa_family == AF_INET)
                inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, buf, sizeof buf);
            else if (i->ifa_addr->sa_family == AF_INET6)
                inet_ntop(AF_INET6, &((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, buf, sizeof buf);
            if (buf[0])
                a->addresses.items[a->addresses.count++] = strdup(buf);
        }
        freeifaddrs(ifs);
    }
    if (a->addresses.items && a->addresses.count == 0)
        a->addresses.items[a->addresses.count++] = strdup("127.0.0.1");
}

static void system_property(jvmtiEnv *jvmti, const char *key, char *out, size_t len)
{
    char *v = NULL;
    if ((*jvmti)->GetSystemProperty(jvmti, key, &v) == JVMTI_ERROR_NONE && v) {
        snprintf(out, len, "%s", v);
        (*jvmti)->Deallocate(jvmti, (unsigned char *)v);
    } else {
        snprintf(out, len, "unknown");
    }
}

/* The probe jar sits next to libcmragent.so unless agent.probe.jar says otherwise. */
static int probe_jar_path(char *out, size_t len)
{
    Dl_info info;
    if (!dladdr((void *)probe_jar_path, &info) || !info.dli_fname)
        return -1;
    const char *slash = strrchr(info.dli_fname, '/');
    int dir = slash ? (int)(slash - info.dli_fname) : 1;
    snprintf(out, len, "%.*s/cmr-agent-probe.jar", dir, slash ? info.dli_fname : ".");
    return access(out, R_OK) == 0 ? 0 : -1;
}

/* Virtual threads (JDK 21+) in an agent built with the JDK 17 headers, which name neither
 * the capability nor the event: can_support_virtual_threads is the capability bit right
 * after can_generate_sampled_object_alloc_events, and VirtualThreadEnd is event 88, whose
 * callback is the slot for event 88 in the callbacks table (one function pointer per event
 * from JVMTI_MIN_EVENT_TYPE_VAL on). */
#define VIRTUAL_THREAD_END_EVENT 88
typedef void(JNICALL *jvmti_callback_t)(void);

/* Sets can_support_virtual_threads in want when the JVM offers it (have); false if not. */
static bool want_virtual_threads(jvmtiCapabilities *want, const jvmtiCapabilities *have)
{
    jvmtiCapabilities marker = {0};
    marker.can_generate_sampled_object_alloc_events = 1;
    unsigned char m[sizeof marker], h[sizeof *have], w[sizeof *want];
    memcpy(m, &marker, sizeof m);
    memcpy(h, have, sizeof h);
    memcpy(w, want, sizeof w);
    for (size_t bit = 0; bit + 1 < sizeof m * 8; bit++) {
        if (!(m[bit / 8] >> (bit % 8) & 1))
            continue;
        size_t vt = bit + 1; /* bit fields are allocated from the low bit on this ABI */
        if (!(h[vt / 8] >> (vt % 8) & 1))
            return false;
        w[vt / 8] |= (unsigned char)(1u << (vt % 8));
        memcpy(want, w, sizeof w);
        return true;
    }
    return false;
}

static int setup_jvmti(cmr_agent_t *a)
{
    jvmtiEnv *jvmti = a->jvmti;
    jvmtiCapabilities want = {0}, have = {0};
    (*jvmti)->GetPotentialCapabilities(jvmti, &have);
    want.can_redefine_classes = 1;
    want.can_retransform_classes = 1;
    want.can_tag_objects = 1;
    want.can_generate_all_class_hook_events = 1;
    if (have.can_generate_early_class_hook_events)
        want.can_generate_early_class_hook_events = 1;
    bool virtual_threads = want_virtual_threads(&want, &have);
    if (cmr_agent_check((*jvmti)->AddCapabilities(jvmti, &want), "AddCapabilities") != JVMTI_ERROR_NONE)
        return -1;
    jvmtiEventCallbacks cb = {0};
    cb.VMInit = on_vm_init;
    cb.VMDeath = on_vm_death;
    cb.ClassFileLoadHook = on_class_file_load;
    cb.ClassPrepare = on_class_prepare;
    cb.ThreadEnd = on_thread_end;
    jvmti_callback_t table[VIRTUAL_THREAD_END_EVENT - JVMTI_MIN_EVENT_TYPE_VAL + 1] = {0};
    _Static_assert(sizeof cb <= sizeof table, "the JVMTI headers have more events than the agent knows");
    memcpy(table, &cb, sizeof cb);
    table[VIRTUAL_THREAD_END_EVENT - JVMTI_MIN_EVENT_TYPE_VAL] = (jvmti_callback_t)on_virtual_thread_end;
    if (cmr_agent_check((*jvmti)->SetEventCallbacks(jvmti, (jvmtiEventCallbacks *)(void *)table,
                                                    virtual_threads ? (jint)sizeof table : (jint)sizeof cb),
                        "SetEventCallbacks"))
        return -1;
    const jvmtiEvent events[] = {JVMTI_EVENT_VM_INIT, JVMTI_EVENT_VM_DEATH, JVMTI_EVENT_CLASS_FILE_LOAD_HOOK,
                                 JVMTI_EVENT_CLASS_PREPARE, JVMTI_EVENT_THREAD_END};
    for (size_t i = 0; i < sizeof events / sizeof events[0]; i++)
        if (cmr_agent_check((*jvmti)->SetEventNotificationMode(jvmti, JVMTI_ENABLE, events[i], NULL),
                            "SetEventNotificationMode"))
            return -1;
    if (virtual_threads && cmr_agent_check((*jvmti)->SetEventNotificationMode(
                                               jvmti, JVMTI_ENABLE, (jvmtiEvent)VIRTUAL_THREAD_END_EVENT, NULL),
                                           "SetEventNotificationMode(VirtualThreadEnd)") != JVMTI_ERROR_NONE)
        virtual_threads = false; /* they record nothing, as on a JVM without them */
    cmr_probe_rings_virtual_ends(a->rings, virtual_threads);
    cmr_log(CMR_LOG_DEBUG, "agent.virtual_threads", "recorded=%s", virtual_threads ? "true" : "false");
    return 0;
}

static void agent_free(cmr_agent_t *a)
{
    if (!a)
        return;
    cmr_conf_destroy(a->conf);
    cmr_grant_store_close(a->grants);
    cmr_grant_preload_free(a->preload);
    cmr_verifier_free(a->verifier);
    cmr_u64map_free(&a->instrumented_classes);
    for (size_t i = 0; i < a->addresses.count; i++)
        free(a->addresses.items[i]);
    free(a->addresses.items);
    free(a);
}

/* The verifier of commands, with the keys of trust.keys pinned (docs/SECURITY.md). Without
 * a usable key the agent runs and records classes, but accepts no command: it says so
 * once, here, with what to do. Returns -1 when a key file failed (strict=true then stops
 * the JVM); a->verifier is NULL only when memory ran out. */
static int trust_setup(cmr_agent_t *a)
{
    char err[700], eerr[900];
    int n = cmr_agent_verifier_new(&a->settings, a->instance_id, &a->verifier, err, sizeof err);
    if (n < 0) {
        cmr_log(CMR_LOG_ERROR, "agent.trust_keys_failed",
                "error=\"%s\" action=\"no command is accepted: fix trust.keys (the CMR's public key files, "
                "PUB[:PUB]) and restart the JVM%s\"",
                cmr_log_escape(err, eerr, sizeof eerr), a->settings.strict ? "; aborting the JVM (strict=true)" : "");
        return -1;
    }
    if (n == 0)
        cmr_log(CMR_LOG_WARN, "agent.no_trusted_keys",
                "action=\"no command is accepted (no configuration, no instrumentation): give the CMR's public key "
                "with trust.keys=PUB in the agent options, CMR_AGENT_TRUST_KEYS or the config file (cmr-config keygen "
                "makes one)\"");
    else
        cmr_log(CMR_LOG_INFO, "agent.trusted_keys", "keys=%d", n);
    return 0;
}

/* The cache of instrumented classes (agent.cache.dir): opened, and its index read, here in
 * OnLoad, before the application loads a class. Its grants are used for agent.environment,
 * or else for the environment the CMR gave the previous run of this agent name; without
 * either, only once the CMR has configured the agent. A directory that cannot be used is
 * logged and the agent runs without the cache. */
static void grants_setup(cmr_agent_t *a)
{
    const cmr_agent_settings_t *st = &a->settings;
    if (!st->cache_dir[0] || !a->verifier || cmr_verifier_key_count(a->verifier) == 0)
        return;
    cmr_grant_store_recorded_environment(st->cache_dir, st->name, a->recorded_environment,
                                         sizeof a->recorded_environment);
    const char *env = st->environment[0] ? st->environment : a->recorded_environment;
    char err[600], eerr[800], edir[1200], eenv[300];
    a->grants = cmr_grant_store_open(st->cache_dir, env, a->verifier, (size_t)st->cache_max_bytes,
                                     (size_t)st->cache_max_files, err, sizeof err);
    if (!a->grants) {
        cmr_log(CMR_LOG_ERROR, "agent.cache_unusable",
                "error=\"%s\" action=\"no cache of instrumented classes: classes are instrumented by redefinition\"",
                cmr_log_escape(err, eerr, sizeof eerr));
        return;
    }
    a->grants_on = true;
    cmr_grant_store_stats_t gs;
    cmr_grant_store_stats(a->grants, &gs);
    cmr_log(CMR_LOG_INFO, "agent.cache_opened", "dir=\"%s\" environment=\"%s\" from=%s files=%zu bytes=%zu",
            cmr_log_escape(st->cache_dir, edir, sizeof edir), cmr_log_escape(env, eenv, sizeof eenv),
            st->environment[0] ? "agent.environment"
            : env[0]           ? "previous_run"
                               : "none",
            gs.files, gs.bytes);
}

/* Common to OnLoad and OnAttach. Returns JNI_OK when the JVM should go on (with or
 * without the agent's features), JNI_ERR only in strict mode. */
static jint agent_start(JavaVM *vm, char *options, int attach)
{
    cmr_log_set_program("cmr-agent");
    if (cmr_agent_self) {
        cmr_log(CMR_LOG_WARN, "agent.already_loaded", "the agent is loaded once per JVM; ignoring");
        return JNI_OK;
    }
    cmr_agent_t *a = calloc(1, sizeof *a);
    char err[512] = "";
    if (!a || !(a->conf = cmr_conf_new())) {
        fprintf(stderr, "cmr-agent: out of memory; the JVM runs without the agent\n");
        agent_free(a);
        return JNI_OK;
    }
    bool strict = options && strstr(options, "strict=true");
    if (cmr_agent_options_load(options, NULL, a->conf, err, sizeof err) != 0 ||
        cmr_agent_settings_from_conf(a->conf, &a->settings, err, sizeof err) != 0) {
        char eerr[700];
        cmr_log(CMR_LOG_ERROR, "agent.bad_options", "error=\"%s\" action=\"%s\"",
                cmr_log_escape(err, eerr, sizeof eerr),
                strict ? "aborting the JVM (strict=true)" : "the JVM runs without the agent's features");
        agent_free(a);
        return strict ? JNI_ERR : JNI_OK;
    }
    strict = a->settings.strict;
    cmr_log_set_level((cmr_log_level_t)cmr_log_level_parse(cmr_conf_get(a->conf, "log.level", "info")));
    if (cmr_topics_set_prefix(cmr_conf_get(a->conf, "topic.prefix", "cmr")) != 0) {
        cmr_log(CMR_LOG_ERROR, "agent.bad_options", "error=\"bad topic.prefix\"");
        agent_free(a);
        return strict ? JNI_ERR : JNI_OK;
    }
    a->jvm = vm;
    if ((*vm)->GetEnv(vm, (void **)&a->jvmti, JVMTI_VERSION_11) != JNI_OK) {
        cmr_log(CMR_LOG_ERROR, "agent.no_jvmti", "error=\"JVMTI 11 is not available\"");
        agent_free(a);
        return strict ? JNI_ERR : JNI_OK;
    }
    cmr_instance_id_new(a->instance_id, sizeof a->instance_id);
    if (trust_setup(a) != 0 && strict) {
        agent_free(a);
        return JNI_ERR;
    }
    pthread_mutex_init(&a->config_lock, NULL);
    pthread_mutex_init(&a->tag_lock, NULL);
    cmr_agent_self = a;
    a->mode = CMR_MODE_MINIMAL;
    a->start_time_ms = cmr_wall_ms();
    cmr_topic_command(a->instance_id, a->cmd_topic, sizeof a->cmd_topic);
    host_identity(a);
    system_property(a->jvmti, "java.vm.vendor", a->jvm_vendor, sizeof a->jvm_vendor);
    system_property(a->jvmti, "java.runtime.version", a->jvm_version, sizeof a->jvm_version);
    if (strcmp(a->jvm_version, "unknown") == 0) /* not a VM property when attaching */
        system_property(a->jvmti, "java.vm.version", a->jvm_version, sizeof a->jvm_version);
    a->classes = cmr_class_cache_new((size_t)a->settings.class_buffer_bytes);
    a->rings = cmr_probe_rings_new(a);
    a->diags = cmr_agent_diags_new();
    grants_setup(a);
    if (a->verifier && cmr_verifier_key_count(a->verifier) > 0 && a->settings.preload_max_bytes > 0)
        a->preload = cmr_grant_preload_new(a->verifier, (size_t)a->settings.preload_max_bytes);
    char jar[4096];
    const char *jar_opt = cmr_conf_get(a->conf, "agent.probe.jar", NULL);
    if (jar_opt)
        snprintf(jar, sizeof jar, "%s", jar_opt);
    if (!a->verifier || !a->classes || !a->rings || !a->diags || (!jar_opt && probe_jar_path(jar, sizeof jar) != 0) ||
        setup_jvmti(a) != 0 ||
        cmr_agent_check((*a->jvmti)->AddToBootstrapClassLoaderSearch(a->jvmti, jar),
                        "AddToBootstrapClassLoaderSearch") != JVMTI_ERROR_NONE) {
        char ejar[600];
        cmr_log(CMR_LOG_ERROR, "agent.setup_failed", "probe_jar=\"%s\" action=\"%s\"",
                cmr_log_escape(jar, ejar, sizeof ejar),
                strict ? "aborting the JVM (strict=true)" : "the JVM runs without the agent's features");
        (*a->jvmti)->SetEventNotificationMode(a->jvmti, JVMTI_DISABLE, JVMTI_EVENT_CLASS_FILE_LOAD_HOOK, NULL);
        a->mode = CMR_MODE_STOPPED;
        return strict ? JNI_ERR : JNI_OK;
    }
    char ename[300], ehost[300], ecmr[300], evendor[160], eversion[160];
    cmr_log(CMR_LOG_INFO, "agent.started", "name=\"%s\" host=\"%s\" instance=%s cmr=\"%s\" jvm=\"%s %s\" attach=%d",
            cmr_log_escape(a->settings.name, ename, sizeof ename), cmr_log_escape(a->hostname, ehost, sizeof ehost),
            a->instance_id, cmr_log_escape(a->settings.bootstrap, ecmr, sizeof ecmr),
            cmr_log_escape(a->jvm_vendor, evendor, sizeof evendor),
            cmr_log_escape(a->jvm_version, eversion, sizeof eversion), attach);
    if (attach) { /* the JVM is live already */
        a->live = true;
        cmr_probe_publisher_start(a);
    }
    if (cmr_agent_control_start(a) != 0) {
        cmr_log(CMR_LOG_ERROR, "agent.control_failed", "action=\"the JVM runs without the agent's features\"");
        a->mode = CMR_MODE_STOPPED;
        return strict ? JNI_ERR : JNI_OK;
    }
    return JNI_OK;
}

JNIEXPORT jint JNICALL Agent_OnLoad(JavaVM *vm, char *options, void *reserved)
{
    (void)reserved;
    return agent_start(vm, options, 0);
}

JNIEXPORT jint JNICALL Agent_OnAttach(JavaVM *vm, char *options, void *reserved)
{
    (void)reserved;
    jint rc = agent_start(vm, options, 1);
    if (rc == JNI_OK && cmr_agent_self && cmr_agent_self->mode != CMR_MODE_STOPPED)
        cmr_agent_record_loaded_classes(cmr_agent_self, false);
    return rc;
}

JNIEXPORT void JNICALL Agent_OnUnload(JavaVM *vm)
{
    (void)vm;
    /* VMDeath did the work; the memory goes with the process. */
}

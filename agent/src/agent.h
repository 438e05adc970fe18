/*
 * agent.h - the state of the one agent inside a JVM, shared by the agent's files.
 *
 *   agent_entry.c     Agent_OnLoad / Agent_OnAttach / Agent_OnUnload, JVMTI set-up and
 *                     the event callbacks (VMInit, VMDeath, ClassFileLoadHook,
 *                     ClassPrepare, ThreadEnd): the JVMTI phases, kept apart
 *   agent_control.c   the control thread: registration, commands, class shipping, status
 *   agent_commands.c  Redefine and BytecodeResend applied through JVMTI
 *   agent_diagnoses.c the diagnoses running in this JVM: anchors, restore bytes, limits
 *   probe_rings.c     per-thread event rings and the JNI natives of cmr/agent/Probe
 *   probe_publisher.c the publisher thread: drains rings into EventBatch / MetricBatch
 *   class_cache.c     never-send set, pending classes, registry (no JVM calls)
 *   agent_options.c   options from the option string, environment and file
 *
 * Threads: application threads run only the load hook and the probes; the control and
 * publisher threads are native threads attached to the JVM as daemons, so they never
 * keep it alive, and they run no Java code but one: the control thread times the probes
 * (Probe.calibrate, cmr_probe_measure_cost) 1, 10 and 60 s after the configuration.
 */
#ifndef CMR_AGENT_H
#define CMR_AGENT_H

#include <jni.h>
#include <jvmti.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "agent_diagnoses.h"
#include "agent_options.h"
#include "class_cache.h"
#include "grant_preload.h"
#include "grant_store.h"
#include "cmr/clock.h"
#include "cmr/kafka.h"
#include "cmr/map.h"
#include "cmr/msg.h"
#include "cmr/topics.h"
#include "cmr/trust.h"

#define CMR_AGENT_VERSION "0.1.0"
#define CMR_PROBE_CLASS "cmr/agent/Probe"

typedef enum cmr_agent_mode {
    CMR_MODE_MINIMAL,        /* registering; classes are recorded, not sent */
    CMR_MODE_FULL,           /* configured */
    CMR_MODE_NO_ENVIRONMENT, /* the CMR has no environment for us: idle until restart */
    CMR_MODE_STOPPED,
} cmr_agent_mode_t;

typedef struct cmr_probe_rings cmr_probe_rings_t;

typedef struct cmr_agent {
    JavaVM *jvm;
    jvmtiEnv *jvmti;
    cmr_conf_t *conf;
    cmr_agent_settings_t settings;
    char instance_id[33];
    char hostname[256];
    cmr_strings_t addresses; /* this host's IP addresses */
    char cmd_topic[CMR_TOPIC_NAME_MAX];
    int64_t start_time_ms;
    _Atomic int64_t configured_ns; /* cmr_mono_ns() when the first configuration arrived, 0 before */
    _Atomic int64_t probe_ps;      /* one recorded call's probes, the least measured (0: none yet) */
    char jvm_vendor[128], jvm_version[128];

    _Atomic int mode;      /* cmr_agent_mode_t */
    atomic_bool connected; /* the cluster answers */
    atomic_bool stopping;
    atomic_bool live; /* VMInit seen: JNI calls allowed */
    _Atomic int64_t agent_id;
    pthread_mutex_t config_lock; /* guards the fields below */
    char environment_id[128];
    int64_t revision;
    cmr_strategy_t strategy;

    cmr_class_cache_t *classes;
    _Atomic int64_t next_loader_id;
    pthread_mutex_t tag_lock;

    cmr_producer_t *producer;
    cmr_probe_rings_t *rings;

    /* Commands are verified against the keys of trust.keys (none: every command is
     * refused). The verifier is used by the control thread only; the verdicts are counted
     * here too, for AgentStatus from any thread. */
    cmr_verifier_t *verifier;
    _Atomic uint64_t trust_counts[CMR_TRUST_VERDICT__COUNT];

    pthread_t control_thread, publisher_thread;
    bool control_started, publisher_started;

    /* counters reported in AgentStatus */
    _Atomic uint64_t commands_applied, commands_failed, hook_ns_total, hook_calls;
    /* classes whose instrumented bytes are in effect now (redefinitions to instrumented
     * bytes minus restorations of original bytes, per class and loader), and the
     * redefinitions the JVM refused */
    _Atomic int64_t classes_instrumented;
    _Atomic uint64_t redefine_failures;
    cmr_u64map_t instrumented_classes; /* keys of those classes; control thread only */

    cmr_agent_diags_t *diags; /* the diagnoses running in this JVM (agent_diagnoses.h) */

    /* The cache of instrumented classes (grant_store.h; NULL: agent.cache.dir unset or
     * unusable). The load hook serves classes from it while grants_on; the control thread
     * turns it off and sets grants_revert when the CMR names another environment than the
     * one the cache was used for (or none): the classes served are then given their
     * original bytes back (RetransformClasses) before anything else is shipped. */
    cmr_grant_store_t *grants;
    atomic_bool grants_on, grants_revert;
    /* classes the load hook served from the cache as they loaded (not at a retransform), and
     * the time of those hook calls (agent.cache_stats) */
    _Atomic uint64_t cache_load_hits, cache_hit_ns_total, cache_hit_ns_max;
    char recorded_environment[128]; /* what the cache directory says the previous run had */
    /* Classes granted ahead of their load (grant_preload.h; NULL: agent.preload.max.bytes
     * is 0 or no key is trusted): filled by the control thread from ClassGrants, read by
     * the load hook before the cache, for the environment the agent is configured with.
     * preload_load_hits: classes instrumented as they loaded from it, and the time of
     * those hook calls (agent.granted_ahead_stats). */
    cmr_grant_preload_t *preload;
    _Atomic uint64_t preload_load_hits, preload_hit_ns_total;
    int64_t preload_trim_ms; /* when the unused ones go (control thread; 0: nothing to trim) */
} cmr_agent_t;

extern cmr_agent_t *cmr_agent_self;

/* agent_entry.c: the loader id of a class loader object (tags it on first sight). */
int64_t cmr_agent_loader_id(jvmtiEnv *jvmti, jobject loader);
/* Logs a JVMTI error with what was being done; returns err. */
jvmtiError cmr_agent_check(jvmtiError err, const char *what);

/* agent_control.c */
int cmr_agent_control_start(cmr_agent_t *a);
void cmr_agent_control_stop(cmr_agent_t *a);
/* Sends an AgentStatus now (any thread). */
void cmr_agent_send_status(cmr_agent_t *a, cmr_agent_state_t state);

/* agent_commands.c (control thread, attached to the JVM) */
void cmr_agent_apply_redefine(cmr_agent_t *a, JNIEnv *env, const cmr_redefine_t *cmd);
/* Applies several Redefine commands with one RedefineClasses call (one safepoint); if the
 * JVM refuses the batch, each command is applied alone so that a bad one fails alone.
 * waits: NULL, or one flag per command: on entry whether it may wait for its class, on
 * return whether it does. A command waits when the class of the loader it names is being
 * defined: the JVM handed the agent its bytes (ClassFileLoadHook) with the original digest
 * the command names, but it is no loaded class yet (its superclass still loading, say); a
 * later command of the same class waits behind it. Such a command is neither applied nor
 * answered: the caller keeps it and passes it again (agent_control.c). */
void cmr_agent_apply_redefines(cmr_agent_t *a, JNIEnv *env, const cmr_redefine_t *const *cmds, int n, bool *waits);
/* Whether two Redefines name the same class (name and loader). */
bool cmr_agent_same_class(const cmr_redefine_t *x, const cmr_redefine_t *y);
/* Ends the diagnoses whose end time, hits or budget are reached: their classes get their
 * restore bytes back (docs/DIAGNOSIS.md, "Remove"). Returns how many ended. */
int cmr_agent_end_due_diagnoses(cmr_agent_t *a, JNIEnv *env);
void cmr_agent_apply_resend(cmr_agent_t *a, JNIEnv *env, const cmr_bytecode_resend_t *cmd);
/* Captures the bytes of classes whose bytes the cache had to drop (retransform). */
void cmr_agent_capture_byteless(cmr_agent_t *a, JNIEnv *env);
/* Load -> redefined latency of instrumented classes: recorded per Redefine, logged as a
 * distribution (event=agent.redefine_latency) when the JVM stops. */
void cmr_agent_record_redefine_latency(cmr_agent_t *a, int64_t loaded_ns);
void cmr_agent_log_redefine_latency(cmr_agent_t *a);
/* Grant cache (agent_commands.c): a class served from it is counted as instrumented (control
 * thread, when it is shipped); an applied Redefine with a grant is written to it; the
 * classes served from it get their original bytes back (grants_revert). */
void cmr_agent_note_cached(cmr_agent_t *a, const char *name, int64_t loader_id, const uint8_t digest[32]);
/* A ClassGrants (signed, for this instance): its classes are verified and kept for the
 * load hook (grant_preload.h); what was kept and refused is logged. Control thread. */
void cmr_agent_take_grants(cmr_agent_t *a, const cmr_class_grants_t *cg);
/* A class that loaded with bytes granted ahead goes to the cache on disk as well (when
 * there is one and it lacks the class), for a restart of this JVM. Control thread. */
void cmr_agent_keep_ahead(cmr_agent_t *a, const char *name, int64_t loader_id);
/* agent.preload.keep.ms after the last ClassGrants, the classes granted ahead that no load
 * used are dropped (logged). Control thread. */
void cmr_agent_trim_ahead(cmr_agent_t *a, int64_t now_ms);
void cmr_agent_revert_cached(cmr_agent_t *a, JNIEnv *env);
/* The load hook's part (agent_entry.c): the instrumented bytes granted for a class being
 * loaded (or captured again), from the classes granted ahead or the cache, verified, in
 * JVMTI memory. true when *new_data was set; applied gets the digest of those bytes and
 * *ahead whether they were granted ahead. */
bool cmr_agent_serve_cached(cmr_agent_t *a, jvmtiEnv *jvmti, const char *name, const uint8_t digest[32], jint *new_len,
                            unsigned char **new_data, uint8_t applied[32], bool *ahead);
/* Puts a weak handle of cls in the class registry, replacing (and freeing) an older one. */
void cmr_agent_keep_handle(cmr_agent_t *a, JNIEnv *env, jclass cls, const char *name, int64_t loader_id);
/* Records loaded classes for capture: all of them (after a dynamic attach), or only those
 * whose bytes the load hook never saw (only_unseen: at VMInit). */
void cmr_agent_record_loaded_classes(cmr_agent_t *a, bool only_unseen);
/* The load hook's part of a resend: if a capture is pending for this class, take the
 * bytes. Returns true when the class was captured. */
bool cmr_agent_capture_hook(cmr_agent_t *a, const char *name, int64_t loader_id, const uint8_t *bytes, size_t len);

#endif

/*
 * agent_commands.c - what the CMR asks of the JVM: Redefine (RedefineClasses) and
 * BytecodeResend (RetransformClasses, with the load hook capturing the bytes), plus the
 * same capture for classes whose bytes the agent could not keep (budget) or never saw
 * (loaded before a dynamic attach).
 *
 * Runs on the control thread, attached to the JVM. Every command fails alone: an unknown
 * class or bytes the JVM rejects produce a RedefineResult with the JVMTI error, and the
 * JVM goes on unchanged (RedefineClasses installs all classes of a call or none).
 *
 * Commands reach this file only once their signature was verified (agent_control.c).
  * A Redefine is moreover bound to the class it was made from: it changes only loaded
 * classes of its name for which the JVM handed the agent bytes with the BLAKE2b-256
 * digest it names (original_digest, under the signature: the original bytes, or those of
 * the latest capture, see class_cache.h), and answers DIGEST_MISMATCH otherwise. A class
 * whose digest the agent never computed (loaded before an attach, bytes not captured
 * yet) is a mismatch too.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "cmr/ids.h"
#include "cmr/log.h"

#define CAPTURE_BATCH 64

/* --- instrumented classes ------------------------------------------------------------------ */

static uint64_t installed_key(const char *name, int64_t loader_id)
{
    return cmr_hash_bytes(name, strlen(name)) ^ cmr_hash_u64((uint64_t)loader_id);
}

/* Bytes of class `name` of loader_id were installed: instrumented ones or the originals.
 * Keeps the set of classes whose instrumented bytes are in effect and its count
 * (AgentStatus.classes_instrumented): a second instrumented redefinition of a class
 * counts once, a restoration of one that was not instrumented not at all. The map keeps
 * the digest8 (agent_diagnoses.h) of the instrumented bytes in effect (1 stands for 0). */
static void note_installed(cmr_agent_t *a, const char *name, int64_t loader_id, bool instrumented, uint64_t digest)
{
    uint64_t key = installed_key(name, loader_id);
    if (!instrumented) {
        if (cmr_u64map_del(&a->instrumented_classes, key, NULL))
            a->classes_instrumented--;
        return;
    }
    bool had = cmr_u64map_has(&a->instrumented_classes, key);
    if (cmr_u64map_put(&a->instrumented_classes, key, (void *)(uintptr_t)(digest ? digest : 1)) == 0 && !had)
        a->classes_instrumented++;
}

/* digest8 of the bytes a class runs now: the instrumented ones installed last, or else
 * the original ones (whose digest a command names). */
static uint64_t digest_in_effect(cmr_agent_t *a, const char *name, int64_t loader_id, const cmr_bytes_t *original)
{
    void *v = cmr_u64map_get(&a->instrumented_classes, installed_key(name, loader_id));
    if (v)
        return (uint64_t)(uintptr_t)v;
    return original->len == CMR_TRUST_DIGEST_BYTES ? cmr_agent_digest8_of(original->data) : 0;
}

/* --- finding the JVM's classes ------------------------------------------------------------ */

typedef struct find_ctx {
    JNIEnv *env;
    int64_t loader_id; /* the loader asked for */
    uint64_t hash;     /* also take same-named classes of other loaders with these bytes */
    bool any_same_hash;
    /* Redefine: only classes whose original bytes have this digest (then same-named
     * classes of other loaders are taken by digest, not by hash) */
    const uint8_t *digest;
    int mismatched; /* classes of the loader asked for, refused for their digest */
    jclass found[32];
    int64_t loaders[32];
    uint64_t before[32]; /* digest8 of the bytes each ran before a batch (apply_redefines) */
    int n;
} find_ctx_t;

/* Whether the JVM handed the agent bytes with this digest for the class. */
static bool has_digest(const cmr_class_digests_t *d, const uint8_t *want)
{
    for (int i = 0; i < d->n; i++)
        if (memcmp(d->d[i], want, CMR_TRUST_DIGEST_BYTES) == 0)
            return true;
    return false;
}

static int find_visit(const char *name, int64_t loader_id, uint64_t hash, const cmr_class_digests_t *digests,
                      void *handle, void *opaque)
{
    (void)name;
    find_ctx_t *f = opaque;
    if (!handle || f->n == (int)(sizeof f->found / sizeof f->found[0]))
        return 0;
    bool asked = loader_id == f->loader_id;
    if (f->digest) {
        if (!has_digest(digests, f->digest)) {
            f->mismatched += asked;
            return 0;
        }
        if (!asked && !f->any_same_hash)
            return 0;
    } else if (!asked && !(f->any_same_hash && hash == f->hash)) {
        return 0;
    }
    jclass k = (*f->env)->NewLocalRef(f->env, (jweak)handle);
    if (k) { /* NULL: the class was unloaded */
        f->loaders[f->n] = loader_id;
        f->found[f->n++] = k;
    }
    return 0;
}

static void find_release(find_ctx_t *f)
{
    for (int i = 0; i < f->n; i++)
        (*f->env)->DeleteLocalRef(f->env, f->found[i]);
    f->n = 0;
}

/* Calls fn for every loaded class (only the modifiable ones when asked) with its internal
 * name and loader id; array and primitive classes are skipped. The name and the local
 * references are freed after fn returns. Returns the number of classes loaded. */
typedef void loaded_class_fn(cmr_agent_t *a, JNIEnv *env, jclass cls, const char *name, int64_t loader_id, void *ud);

static jint each_loaded_class(cmr_agent_t *a, JNIEnv *env, bool modifiable_only, loaded_class_fn *fn, void *ud)
{
    jint count = 0;
    jclass *classes = NULL;
    if (cmr_agent_check((*a->jvmti)->GetLoadedClasses(a->jvmti, &count, &classes), "GetLoadedClasses"))
        return 0;
    for (jint i = 0; i < count; i++) {
        char *sig = NULL;
        jobject loader = NULL;
        jboolean modifiable = JNI_TRUE;
        if ((!modifiable_only ||
             ((*a->jvmti)->IsModifiableClass(a->jvmti, classes[i], &modifiable) == JVMTI_ERROR_NONE && modifiable)) &&
            (*a->jvmti)->GetClassSignature(a->jvmti, classes[i], &sig, NULL) == JVMTI_ERROR_NONE && sig[0] == 'L' &&
            (*a->jvmti)->GetClassLoader(a->jvmti, classes[i], &loader) == JVMTI_ERROR_NONE) {
            char *name = strndup(sig + 1, strlen(sig) - 2);
            int64_t loader_id = cmr_agent_loader_id(a->jvmti, loader);
            if (name && loader_id >= 0)
                fn(a, env, classes[i], name, loader_id, ud);
            free(name);
        }
        if (sig)
            (*a->jvmti)->Deallocate(a->jvmti, (unsigned char *)sig);
        if (loader)
            (*env)->DeleteLocalRef(env, loader);
        (*env)->DeleteLocalRef(env, classes[i]);
    }
    (*a->jvmti)->Deallocate(a->jvmti, (unsigned char *)classes);
    return count;
}

void cmr_agent_keep_handle(cmr_agent_t *a, JNIEnv *env, jclass cls, const char *name, int64_t loader_id)
{
    jweak weak = (*env)->NewWeakGlobalRef(env, cls);
    jweak old = weak ? cmr_class_cache_set_handle(a->classes, name, loader_id, weak) : NULL;
    if (old)
        (*env)->DeleteWeakGlobalRef(env, old);
}

/* Classes loaded but not yet linked have had no ClassPrepare event, so the registry has no
 * handle for them. On a miss, the loaded classes are scanned once for handles the registry
 * lacks, but only if classes were loaded since the last scan. */
static uint64_t scanned_at_hook_calls;

static void add_missing_handle(cmr_agent_t *a, JNIEnv *env, jclass cls, const char *name, int64_t loader_id, void *ud)
{
    if (cmr_class_cache_has_handle(a->classes, name, loader_id))
        return;
    cmr_agent_keep_handle(a, env, cls, name, loader_id);
    ++*(int *)ud;
}

static void register_unprepared(cmr_agent_t *a, JNIEnv *env)
{
    uint64_t calls = a->hook_calls;
    if (calls == scanned_at_hook_calls)
        return;
    scanned_at_hook_calls = calls;
    int added = 0;
    jint count = each_loaded_class(a, env, false, add_missing_handle, &added);
    cmr_log(CMR_LOG_DEBUG, "agent.classes_scanned", "loaded=%d handles_added=%d", count, added);
}

/* Finds the classes of a command: the registry first, the loaded classes on a miss. */
static void find_classes(cmr_agent_t *a, JNIEnv *env, const char *name, find_ctx_t *f)
{
    cmr_class_cache_visit(a->classes, name, find_visit, f);
    if (f->n == 0) {
        register_unprepared(a, env);
        f->mismatched = 0; /* counted again */
        cmr_class_cache_visit(a->classes, name, find_visit, f);
    }
}

/* --- results ---------------------------------------------------------------------------- */

static void report(cmr_agent_t *a, int64_t request_id, const char *class_name, int64_t loader_id, int64_t hash,
                   cmr_command_status_t status, jvmtiError jerr, const char *message)
{
    char *jname = NULL;
    if (jerr)
        (*a->jvmti)->GetErrorName(a->jvmti, jerr, &jname);
    char text[512];
    snprintf(text, sizeof text, "%s%s%s", message, jname ? ": " : "", jname ? jname : "");
    if (jname)
        (*a->jvmti)->Deallocate(a->jvmti, (unsigned char *)jname);
    cmr_redefine_result_t r = {
        .agent_id = a->agent_id,
        .instance_id = a->instance_id,
        .request_id = request_id,
        .class_name = (char *)class_name,
        .loader_id = loader_id,
        .class_hash = hash,
        .status = status,
        .jvmti_error = (int32_t)jerr,
        .message = text,
        .time_ms = cmr_wall_ms(),
    };
    if (status == CMR_COMMAND_APPLIED)
        a->commands_applied++;
    else
        a->commands_failed++;
    static const char *const names[] = {"APPLIED", "FAILED", "UNKNOWN_CLASS", "DIGEST_MISMATCH"};
    char ename[256], etext[600];
    cmr_log(status == CMR_COMMAND_APPLIED ? CMR_LOG_DEBUG : CMR_LOG_WARN, "agent.command_result",
            "request=%lld class=\"%s\" loader=%lld status=%s message=\"%s\"", (long long)request_id,
            cmr_log_escape(class_name, ename, sizeof ename), (long long)loader_id,
            (unsigned)status < sizeof names / sizeof names[0] ? names[status] : "?",
            cmr_log_escape(text, etext, sizeof etext));
    char err[256];
    cmr_producer_send(a->producer, CMR_MSG_REDEFINE_RESULT, &r, NULL, NULL, err, sizeof err);
}

/* --- Redefine --------------------------------------------------------------------------- */

/* What a Redefine's search for its classes came to. */
typedef enum { TARGETS_FOUND, TARGETS_ANSWERED, TARGETS_WAIT } targets_t;

/* Whether the JVM handed the agent the bytes a Redefine names (ClassFileLoadHook: the
 * digest it names, for the loader it names). */
static bool seen_loading(cmr_agent_t *a, const cmr_redefine_t *cmd)
{
    uint8_t seen[CMR_TRUST_DIGEST_BYTES];
    return cmr_class_cache_digest_of(a->classes, cmd->class_name, cmd->loader_id, seen) &&
           memcmp(seen, cmd->original_digest.data, CMR_TRUST_DIGEST_BYTES) == 0;
}

static bool found_loader(const find_ctx_t *f, int64_t loader_id)
{
    for (int i = 0; i < f->n; i++)
        if (f->loaders[i] == loader_id)
            return true;
    return false;
}

/* Finds the loaded classes a Redefine may change: its name, and original bytes with the
 * digest it names (TARGETS_FOUND, in f). When the class of the loader it names is being
 * defined (the JVM handed the agent its bytes, but it is no loaded class yet: its
 * superclass still loading, say) and may_wait, nothing is done (TARGETS_WAIT): the caller
 * keeps the command for later. When there is no class to change, reports why
 * (UNKNOWN_CLASS or DIGEST_MISMATCH; TARGETS_ANSWERED): the JVM is left as it is. */
static targets_t find_redefine_targets(cmr_agent_t *a, JNIEnv *env, const cmr_redefine_t *cmd, bool may_wait,
                                       find_ctx_t *f)
{
    *f = (find_ctx_t){.env = env,
                      .loader_id = cmd->loader_id,
                      .hash = (uint64_t)cmd->class_hash,
                      .any_same_hash = true,
                      .digest = cmd->original_digest.data};
    if (cmd->original_digest.len != CMR_TRUST_DIGEST_BYTES || !cmd->original_digest.data) {
        report(a, cmd->request_id, cmd->class_name, cmd->loader_id, cmd->class_hash, CMR_COMMAND_DIGEST_MISMATCH, 0,
               "the command names no digest of the original class bytes (32 bytes); the class is unchanged");
        return TARGETS_ANSWERED;
    }
    find_classes(a, env, cmd->class_name, f);
    if (may_wait && f->mismatched == 0 && !found_loader(f, cmd->loader_id) && seen_loading(a, cmd)) {
        find_release(f); /* (its twins of other loaders wait with it: one command, one batch) */
        return TARGETS_WAIT;
    }
    if (f->n > 0)
        return TARGETS_FOUND;
    if (f->mismatched > 0)
        report(a, cmd->request_id, cmd->class_name, cmd->loader_id, cmd->class_hash, CMR_COMMAND_DIGEST_MISMATCH, 0,
               "the loaded class's original bytes do not have the digest the command names (or were never read); "
               "the class is unchanged");
    else
        report(a, cmd->request_id, cmd->class_name, cmd->loader_id, cmd->class_hash, CMR_COMMAND_UNKNOWN_CLASS, 0,
               "no loaded class of that name and loader");
    return TARGETS_ANSWERED;
}

/* --- diagnoses (agent_diagnoses.h) ------------------------------------------------------- */

/* Before a command's bytes go in: a diagnosis' command starts or updates it (its anchors in
 * force before its bytes run). false when it is refused (answered here). */
static bool diag_before(cmr_agent_t *a, const cmr_redefine_t *cmd)
{
    if (!cmd->diagnosis)
        return true;
    char why[256];
    if (cmr_agent_diags_begin(a->diags, cmd, cmr_wall_ms(), why, sizeof why) == 0)
        return true;
    report(a, cmd->request_id, cmd->class_name, cmd->loader_id, cmd->class_hash, CMR_COMMAND_FAILED, 0, why);
    return false;
}

/* After a command's bytes (digest8 `digest`) went in, in the classes of loaders[0..n)
 * that ran bytes with digest8 before[i]: they carry its diagnosis now, and no other; the
 * set of instrumented classes is updated. */
static void installed(cmr_agent_t *a, const cmr_redefine_t *cmd, const int64_t *loaders, const uint64_t *before, int n,
                      uint64_t digest, bool restoring)
{
    int64_t now = cmr_wall_ms();
    for (int i = 0; i < n; i++) {
        note_installed(a, cmd->class_name, loaders[i], !cmd->original, digest);
        cmr_class_cache_set_applied(a->classes, cmd->class_name, loaders[i], NULL); /* cached bytes replaced */
        if (restoring) /* the agent's own restore: the caller updates the diagnoses */
            continue;
        cmr_agent_diags_replaced(a->diags, cmd->class_name, loaders[i], cmd->diagnosis ? cmd->diagnosis->id : 0, digest,
                                 now);
        if (!cmd->diagnosis)
            continue;
        char ename[256];
        cmr_log(CMR_LOG_INFO, "agent.diagnosis_class",
                "diagnosis=%016" PRIx64 " action=installed class=\"%s\" loader=%lld digest=%016" PRIx64
                " before=%016" PRIx64 " restore=%016" PRIx64,
                (uint64_t)cmd->diagnosis->id, cmr_log_escape(cmd->class_name, ename, sizeof ename),
                (long long)loaders[i], digest, before[i],
                cmr_agent_digest8(cmd->diagnosis->restore_bytecode.data, cmd->diagnosis->restore_bytecode.len));
        if (cmr_agent_diags_installed(a->diags, cmd, loaders[i], before[i]) != 0)
            cmr_log(CMR_LOG_WARN, "agent.diagnosis_restore_not_kept",
                    "diagnosis=%016" PRIx64
                    " loader=%lld action=\"the CMR restores this class when the diagnosis ends\"",
                    (uint64_t)cmd->diagnosis->id, (long long)loaders[i]);
    }
}

static void apply_redefine(cmr_agent_t *a, JNIEnv *env, const cmr_redefine_t *cmd, bool restoring, bool *waits);
static void apply_redefines(cmr_agent_t *a, JNIEnv *env, const cmr_redefine_t *const *cmds, int n, bool restoring,
                            bool *waits);

/* The Redefine that gives a diagnosis' class its restore bytes back (pointing into r). */
static cmr_redefine_t restore_command(const cmr_agent_t *a, const cmr_agent_diag_restore_t *r)
{
    return (cmr_redefine_t){.request_id = 0,
                            .agent_id = a->agent_id,
                            .class_name = r->class_name,
                            .loader_id = r->loader_id,
                            .class_hash = r->class_hash,
                            .original = r->original,
                            .revision = a->revision,
                            .bytecode = {r->bytes, r->len},
                            .original_digest = {(uint8_t *)r->digest, sizeof r->digest}};
}

int cmr_agent_end_due_diagnoses(cmr_agent_t *a, JNIEnv *env)
{
    static const char *const reasons[] = {"none",   "stopped",        "time_to_live",    "hits",
                                          "budget", "back_to_normal", "environment_gone"};
    int ended = 0;
    int64_t id;
    cmr_diag_end_reason_t reason;
    while (cmr_agent_diags_due(a->diags, cmr_wall_ms(), &id, &reason) == 1) {
        const cmr_agent_diag_restore_t *r;
        size_t n = cmr_agent_diags_restores(a->diags, id, &r);
        /* the table is changed by the control thread only, and a restore leaves it alone: r
         * stays; every class in one RedefineClasses (one safepoint) */
        cmr_redefine_t *cmds = calloc(n ? n : 1, sizeof *cmds);
        const cmr_redefine_t **ptrs = calloc(n ? n : 1, sizeof *ptrs);
        for (size_t i = 0; cmds && ptrs && i < n; i++) {
            cmds[i] = restore_command(a, &r[i]);
            ptrs[i] = &cmds[i];
        }
        for (size_t off = 0; cmds && ptrs && off < n; off += 256) /* the control loop's batch size */
            apply_redefines(a, env, ptrs + off, (int)(n - off < 256 ? n - off : 256), true, NULL);
        for (size_t i = 0; i < n; i++) {
            cmr_bytes_t od = {(uint8_t *)r[i].digest, sizeof r[i].digest};
            if (!cmds || !ptrs) { /* no memory for the batch: one by one */
                cmr_redefine_t one = restore_command(a, &r[i]);
                apply_redefine(a, env, &one, true, NULL);
            }
            uint64_t now = digest_in_effect(a, r[i].class_name, r[i].loader_id, &od);
            char ename[256];
            cmr_log(CMR_LOG_INFO, "agent.diagnosis_class",
                    "diagnosis=%016" PRIx64 " action=removed by=agent class=\"%s\" loader=%lld digest=%016" PRIx64
                    " before=%016" PRIx64 " matches_before=%s",
                    (uint64_t)id, cmr_log_escape(r[i].class_name, ename, sizeof ename), (long long)r[i].loader_id, now,
                    r[i].before, now == r[i].before ? "true" : "false");
        }
        free(cmds);
        free(ptrs);
        cmr_diagnosis_run_t runs[CMR_DIAG_MAX_RUNS];
        size_t nr = cmr_agent_diags_runs(a->diags, runs, CMR_DIAG_MAX_RUNS);
        cmr_agent_diags_ended(a->diags, id, reason, cmr_wall_ms());
        for (size_t i = 0; i < nr; i++)
            if (runs[i].id == id)
                cmr_log(CMR_LOG_INFO, "agent.diagnosis_ended",
                        "diagnosis=%016" PRIx64 " by=agent reason=%s classes_restored=%zu hits=%" PRId64
                        " calls=%" PRId64 " overhead_pct=%.3f",
                        (uint64_t)id, (unsigned)reason < 7 ? reasons[reason] : "?", n, runs[i].hits, runs[i].events,
                        runs[i].overhead_pct);
        ended++;
    }
    return ended;
}

/* --- the cache of instrumented classes (grant_store.h) ------------------------------------ */

/* Writes a grant and its bytes to the cache (verified there first); a failure is logged,
 * rate-limited (control thread only). */
static void cache_put(cmr_agent_t *a, const char *name, const void *grant, size_t glen, const uint8_t *original,
                      const uint8_t *bytes, size_t len)
{
    char err[300];
    if (cmr_grant_store_put(a->grants, grant, glen, original, bytes, len, cmr_wall_ms(), err, sizeof err) == 0)
        return;
    static cmr_log_limiter_t limiter;
    unsigned long long suppressed = 0;
    char ename[256], eerr[400];
    if (cmr_log_allow(&limiter, 5, &suppressed))
        cmr_log(
            CMR_LOG_WARN, "agent.cache_not_written",
            "class=\"%s\" error=\"%s\" suppressed=%llu action=\"a restart of this JVM gets the class from the CMR\"",
            cmr_log_escape(name, ename, sizeof ename), cmr_log_escape(err, eerr, sizeof eerr), suppressed);
}

/* An applied Redefine with a class grant: the grant and its bytes go to the cache, for the
 * next JVM of the environment (never a diagnosis' bytes: they do not outlive it). */
static void keep_grant(cmr_agent_t *a, const cmr_redefine_t *cmd)
{
    if (!a->grants || cmd->original || cmd->diagnosis || cmd->grant.len == 0 ||
        cmd->original_digest.len != CMR_TRUST_DIGEST_BYTES)
        return;
    cache_put(a, cmd->class_name, cmd->grant.data, cmd->grant.len, cmd->original_digest.data, cmd->bytecode.data,
              cmd->bytecode.len);
}

/* --- classes granted ahead (grant_preload.h) ---------------------------------------------- */

void cmr_agent_take_grants(cmr_agent_t *a, const cmr_class_grants_t *cg)
{
    char eenv[300];
    if (!a->preload) {
        static bool told; /* control thread only */
        if (!told)
            cmr_log(CMR_LOG_INFO, "agent.granted_ahead_ignored",
                    "environment=\"%s\" reason=\"agent.preload.max.bytes is 0\" consequence=\"classes are "
                    "instrumented by redefinition\"",
                    cmr_log_escape(cg->environment_id, eenv, sizeof eenv));
        told = true;
        return;
    }
    int64_t t0 = cmr_mono_ns(), now_ms = cmr_wall_ms();
    size_t kept = 0, refused = 0, over = 0;
    cmr_grant_verdict_t why = CMR_GRANT_OK, first_why = CMR_GRANT_OK;
    const char *first_class = "";
    for (size_t i = 0; i < cg->classes.count; i++) {
        const cmr_granted_class_t *g = &cg->classes.items[i];
        cmr_grant_preload_add_t r =
            cmr_grant_preload_add(a->preload, g->class_name, g->original_digest.data, g->original_digest.len,
                                  g->grant.data, g->grant.len, g->bytecode.data, g->bytecode.len, now_ms, &why);
        kept += r == CMR_GRANT_PRELOAD_KEPT;
        over += r == CMR_GRANT_PRELOAD_OVER_BUDGET;
        if (r == CMR_GRANT_PRELOAD_REFUSED && refused++ == 0) {
            first_why = why;
            first_class = g->class_name ? g->class_name : "";
        }
    }
    a->preload_trim_ms = cmr_mono_ms() + a->settings.preload_keep_ms;
    cmr_log(CMR_LOG_INFO, "agent.granted_ahead",
            "environment=\"%s\" revision=%lld part=%d parts=%d classes=%zu kept=%zu refused=%zu over_budget=%zu "
            "took_us=%lld",
            cmr_log_escape(cg->environment_id, eenv, sizeof eenv), (long long)cg->revision, cg->part, cg->parts,
            cg->classes.count, kept, refused, over, (long long)((cmr_mono_ns() - t0) / 1000));
    if (refused) {
        char ename[256];
        cmr_log(CMR_LOG_WARN, "agent.granted_ahead_refused",
                "refused=%zu first_class=\"%s\" reason=%s consequence=\"those classes are instrumented by "
                "redefinition\"",
                refused, cmr_log_escape(first_class, ename, sizeof ename), cmr_grant_verdict_name(first_why));
    }
}

void cmr_agent_trim_ahead(cmr_agent_t *a, int64_t now_ms)
{
    if (!a->preload || !a->preload_trim_ms || now_ms < a->preload_trim_ms)
        return;
    a->preload_trim_ms = 0;
    size_t dropped = cmr_grant_preload_trim(a->preload);
    cmr_grant_preload_stats_t st;
    cmr_grant_preload_stats(a->preload, &st);
    cmr_log(CMR_LOG_INFO, "agent.granted_ahead_trimmed", "dropped=%zu kept=%zu bytes=%zu", dropped, st.classes,
            st.bytes);
}

void cmr_agent_keep_ahead(cmr_agent_t *a, const char *name, int64_t loader_id)
{
    uint8_t original[CMR_TRUST_DIGEST_BYTES], *grant = NULL, *bytes = NULL;
    size_t glen = 0, len = 0;
    if (!a->grants || !a->preload || !cmr_class_cache_digest_of(a->classes, name, loader_id, original) ||
        cmr_grant_store_has(a->grants, original) ||
        !cmr_grant_preload_copy(a->preload, original, &grant, &glen, &bytes, &len))
        return;
    cache_put(a, name, grant, glen, original, bytes, len);
    free(grant);
    free(bytes);
}

void cmr_agent_note_cached(cmr_agent_t *a, const char *name, int64_t loader_id, const uint8_t digest[32])
{
    note_installed(a, name, loader_id, true, cmr_agent_digest8_of(digest));
}

typedef struct revert_ctx {
    JNIEnv *env;
    jclass classes[256];
    char *names[256];
    int64_t loaders[256];
    int n, unloaded;
} revert_ctx_t;

static int collect_cached(const char *name, int64_t loader_id, uint64_t hash, const cmr_class_digests_t *digests,
                          void *handle, void *opaque)
{
    (void)hash;
    (void)digests;
    revert_ctx_t *r = opaque;
    if (r->n == (int)(sizeof r->classes / sizeof r->classes[0]))
        return 1;
    jclass k = handle ? (*r->env)->NewLocalRef(r->env, (jweak)handle) : NULL;
    char *copy = strdup(name);
    if (!copy) {
        if (k)
            (*r->env)->DeleteLocalRef(r->env, k);
        return 1;
    }
    r->classes[r->n] = k; /* NULL: unloaded (nothing to restore) */
    r->names[r->n] = copy;
    r->loaders[r->n++] = loader_id;
    return 0;
}

/* A class the JVM would not give its original bytes back to: it keeps the cached bytes
 * (and their mark), so its ClassLoaded names them and the CMR's Redefine replaces them. */
typedef struct revert_failed {
    char *name;
    int64_t loader_id;
    uint8_t digest[CMR_TRUST_DIGEST_BYTES];
} revert_failed_t;

/* RetransformClasses of one class, again, after its batch failed; the error otherwise. */
static jvmtiError retransform_one(cmr_agent_t *a, jclass k)
{
    return (*a->jvmti)->RetransformClasses(a->jvmti, 1, &k);
}

static void log_revert_failure(cmr_agent_t *a, const char *name, jvmtiError first, jvmtiError again, int logged)
{
    if (logged >= 20) /* the count is in agent.cache_reverted */
        return;
    char *n1 = NULL, *n2 = NULL, ename[256];
    (*a->jvmti)->GetErrorName(a->jvmti, first, &n1);
    (*a->jvmti)->GetErrorName(a->jvmti, again, &n2);
    cmr_log(CMR_LOG_ERROR, "agent.cache_revert_failed",
            "class=\"%s\" error=%s retry_error=%s consequence=\"the class still runs the instrumented bytes of the "
            "environment the cache was used for (its probes record for it)\" action=\"it is reported to the CMR with "
            "those bytes (ClassLoaded.applied_digest), whose Redefine replaces them; else restart the JVM\"",
            cmr_log_escape(name, ename, sizeof ename), n1 ? n1 : "?", n2 ? n2 : "?");
    if (n1)
        (*a->jvmti)->Deallocate(a->jvmti, (unsigned char *)n1);
    if (n2)
        (*a->jvmti)->Deallocate(a->jvmti, (unsigned char *)n2);
}

/* Gives every class served from the cache its original bytes back: RetransformClasses
 * with the hook serving nothing (the mark is cleared first), in batches. A batch the JVM
 * refuses is retried once class by class (one class it cannot retransform must not keep
 * the others instrumented); a class that fails again is logged (agent.cache_revert_failed),
 * counted as a refused redefinition in AgentStatus, and keeps its mark: it is shipped with
 * the digest of the bytes it really runs, and the CMR's answer (new bytes, or the original
 * ones) replaces them by RedefineClasses. */
void cmr_agent_revert_cached(cmr_agent_t *a, JNIEnv *env)
{
    register_unprepared(a, env);
    int total = 0, failed = 0, retried = 0, logged = 0;
    revert_failed_t *kept = NULL;
    size_t nkept = 0, capkept = 0;
    for (;;) {
        revert_ctx_t r = {.env = env};
        cmr_class_cache_visit_applied(a->classes, collect_cached, &r);
        if (r.n == 0)
            break;
        jclass live[256];
        int idx[256];
        uint8_t digests[256][CMR_TRUST_DIGEST_BYTES];
        int nlive = 0;
        for (int i = 0; i < r.n; i++) {
            if (r.classes[i]) {
                if (!cmr_class_cache_applied_of(a->classes, r.names[i], r.loaders[i], digests[nlive]))
                    memset(digests[nlive], 0, CMR_TRUST_DIGEST_BYTES);
                idx[nlive] = i;
                live[nlive++] = r.classes[i];
            }
            cmr_class_cache_set_applied(a->classes, r.names[i], r.loaders[i], NULL);
        }
        jvmtiError jerr = nlive ? (*a->jvmti)->RetransformClasses(a->jvmti, nlive, live) : JVMTI_ERROR_NONE;
        if (jerr != JVMTI_ERROR_NONE) {
            cmr_agent_check(jerr,
                            "RetransformClasses (restoring classes served from the cache; retried class by class)");
            retried += nlive;
        }
        for (int j = 0; j < nlive; j++) {
            int i = idx[j];
            jvmtiError again = jerr == JVMTI_ERROR_NONE ? JVMTI_ERROR_NONE : retransform_one(a, live[j]);
            if (again == JVMTI_ERROR_NONE) {
                note_installed(a, r.names[i], r.loaders[i], false, 0);
                continue;
            }
            failed++;
            a->redefine_failures++;
            log_revert_failure(a, r.names[i], jerr, again, logged++);
            if (nkept == capkept) {
                size_t cap = capkept ? capkept * 2 : 16;
                revert_failed_t *grown = realloc(kept, cap * sizeof *kept);
                if (!grown)
                    continue; /* no memory: the class is not marked (the CMR sends it bytes as to any class) */
                kept = grown;
                capkept = cap;
            }
            kept[nkept].name = r.names[i];
            r.names[i] = NULL;
            kept[nkept].loader_id = r.loaders[i];
            memcpy(kept[nkept].digest, digests[j], CMR_TRUST_DIGEST_BYTES);
            nkept++;
        }
        total += nlive;
        for (int i = 0; i < r.n; i++)
            free(r.names[i]);
        for (int i = 0; i < nlive; i++)
            (*env)->DeleteLocalRef(env, live[i]);
    }
    /* marked again only now: the loop above runs until no class is marked */
    static const uint8_t none[CMR_TRUST_DIGEST_BYTES];
    for (size_t i = 0; i < nkept; i++) {
        if (memcmp(kept[i].digest, none, sizeof none) != 0)
            cmr_class_cache_set_applied(a->classes, kept[i].name, kept[i].loader_id, kept[i].digest);
        free(kept[i].name);
    }
    free(kept);
    cmr_log(failed ? CMR_LOG_ERROR : CMR_LOG_INFO, "agent.cache_reverted",
            "classes=%d restored=%d failed=%d retried_one_by_one=%d%s", total, total - failed, failed, retried,
            failed ? " action=\"see agent.cache_revert_failed: those classes still run the cached bytes until the "
                     "CMR's Redefine replaces them or the JVM restarts\""
                   : "");
}

void cmr_agent_apply_redefine(cmr_agent_t *a, JNIEnv *env, const cmr_redefine_t *cmd)
{
    apply_redefine(a, env, cmd, false, NULL);
}

/* restoring: the agent gives a class its restore bytes back (the diagnosis' table is
 * updated by the caller, not here). waits: as cmr_agent_apply_redefines', for one command. */
static void apply_redefine(cmr_agent_t *a, JNIEnv *env, const cmr_redefine_t *cmd, bool restoring, bool *waits)
{
    find_ctx_t f;
    targets_t t = find_redefine_targets(a, env, cmd, waits && *waits, &f);
    if (waits)
        *waits = t == TARGETS_WAIT;
    if (t != TARGETS_FOUND)
        return;
    if (!restoring && !diag_before(a, cmd)) {
        find_release(&f);
        return;
    }
    jvmtiClassDefinition defs[32];
    uint64_t before[32];
    for (int i = 0; i < f.n; i++) {
        defs[i] = (jvmtiClassDefinition){f.found[i], (jint)cmd->bytecode.len, cmd->bytecode.data};
        before[i] = digest_in_effect(a, cmd->class_name, f.loaders[i], &cmd->original_digest);
    }
    int64_t t0 = cmr_mono_ns();
    jvmtiError jerr = (*a->jvmti)->RedefineClasses(a->jvmti, f.n, defs);
    int64_t took_us = (cmr_mono_ns() - t0) / 1000;
    if (jerr != JVMTI_ERROR_NONE) {
        a->redefine_failures++;
        if (cmd->diagnosis && !restoring)
            cmr_agent_diags_abandon(a->diags, cmd->diagnosis->id, cmr_wall_ms());
        report(a, cmd->request_id, cmd->class_name, cmd->loader_id, cmd->class_hash, CMR_COMMAND_FAILED, jerr,
               "RedefineClasses refused the bytes; the class is unchanged");
    } else {
        installed(a, cmd, f.loaders, before, f.n, cmr_agent_digest8(cmd->bytecode.data, cmd->bytecode.len), restoring);
        if (!restoring)
            keep_grant(a, cmd);
        /* seed: original bytes -> "not needed", instrumented bytes -> "needed" */
        if (cmd->original) {
            cmr_class_cache_mark_never_send(a->classes, (uint64_t)cmd->class_hash);
        } else {
            cmr_class_cache_unmark_never_send(a->classes, (uint64_t)cmd->class_hash);
            for (int i = 0; i < f.n; i++)
                cmr_agent_record_redefine_latency(a,
                                                  cmr_class_cache_loaded_ns(a->classes, cmd->class_name, f.loaders[i]));
        }
        char msg[160];
        snprintf(msg, sizeof msg, "%s%s bytes installed in %d class%s in %lld us",
                 restoring ? "diagnosis ended by the agent: " : "", cmd->original ? "original" : "instrumented", f.n,
                 f.n == 1 ? "" : "es", (long long)took_us);
        report(a, cmd->request_id, cmd->class_name, cmd->loader_id, cmd->class_hash, CMR_COMMAND_APPLIED, 0, msg);
    }
    find_release(&f);
}

/* A batch: every command's classes in one call. The classes found per command are kept to
 * report and to update the cache once the JVM has answered. */
#define BATCH_DEFS 1024

void cmr_agent_apply_redefines(cmr_agent_t *a, JNIEnv *env, const cmr_redefine_t *const *cmds, int n, bool *waits)
{
    apply_redefines(a, env, cmds, n, false, waits);
}

bool cmr_agent_same_class(const cmr_redefine_t *x, const cmr_redefine_t *y)
{
    return x->loader_id == y->loader_id && strcmp(x->class_name, y->class_name) == 0;
}

/* Whether a command of cmds[0..i) of the same class as cmds[i] waits for its class. */
static bool behind_waiting(const cmr_redefine_t *const *cmds, const bool *waits, int i)
{
    for (int k = 0; k < i; k++)
        if (waits[k] && cmr_agent_same_class(cmds[k], cmds[i]))
            return true;
    return false;
}

/* restoring: the agent's own restore of a diagnosis' classes (see apply_redefine). */
static void apply_redefines(cmr_agent_t *a, JNIEnv *env, const cmr_redefine_t *const *cmds, int n, bool restoring,
                            bool *waits)
{
    if (n == 1) {
        apply_redefine(a, env, cmds[0], restoring, waits);
        return;
    }
    find_ctx_t *found = calloc((size_t)n, sizeof *found);
    jvmtiClassDefinition *defs = calloc(BATCH_DEFS, sizeof *defs);
    if (!found || !defs) {
        free(found);
        free(defs);
        for (int i = 0; i < n; i++)
            if (!(waits && waits[i] && behind_waiting(cmds, waits, i)))
                apply_redefine(a, env, cmds[i], restoring, waits ? &waits[i] : NULL);
        return;
    }
    int ndefs = 0;
    bool fits = true;
    for (int i = 0; i < n; i++) {
        if (waits && waits[i] && behind_waiting(cmds, waits, i))
            continue; /* the commands of a class apply in order: this one waits too */
        /* a command with no class to change is answered now and left out of the batch, one
         * whose class is being defined is left to wait */
        targets_t t = find_redefine_targets(a, env, cmds[i], waits && waits[i], &found[i]);
        if (waits)
            waits[i] = t == TARGETS_WAIT;
        if (t != TARGETS_FOUND)
            continue;
        if (!restoring && !diag_before(a, cmds[i])) {
            find_release(&found[i]);
            continue;
        }
        for (int k = 0; k < found[i].n; k++) {
            if (ndefs == BATCH_DEFS) {
                fits = false;
                break;
            }
            defs[ndefs++] =
                (jvmtiClassDefinition){found[i].found[k], (jint)cmds[i]->bytecode.len, cmds[i]->bytecode.data};
            found[i].before[k] =
                digest_in_effect(a, cmds[i]->class_name, found[i].loaders[k], &cmds[i]->original_digest);
        }
    }
    int64_t t0 = cmr_mono_ns();
    jvmtiError jerr = fits && ndefs ? (*a->jvmti)->RedefineClasses(a->jvmti, ndefs, defs) : JVMTI_ERROR_INTERNAL;
    int64_t took_us = (cmr_mono_ns() - t0) / 1000;
    free(defs);
    if (jerr != JVMTI_ERROR_NONE) {
        /* one bad class (or the same class twice) fails the whole call: one by one, in
         * order, except the commands answered already or waiting (nothing to change now) */
        for (int i = 0; i < n; i++) {
            bool answered = found[i].n == 0;
            find_release(&found[i]);
            if (!answered) /* (a diagnosis' begin again: harmless, it updates the same) */
                apply_redefine(a, env, cmds[i], restoring, NULL);
        }
        free(found);
        return;
    }
    for (int i = 0; i < n; i++) {
        const cmr_redefine_t *cmd = cmds[i];
        if (found[i].n == 0)
            continue; /* answered above */
        installed(a, cmd, found[i].loaders, found[i].before, found[i].n,
                  cmr_agent_digest8(cmd->bytecode.data, cmd->bytecode.len), restoring);
        if (!restoring)
            keep_grant(a, cmd);
        if (cmd->original) {
            cmr_class_cache_mark_never_send(a->classes, (uint64_t)cmd->class_hash);
        } else {
            cmr_class_cache_unmark_never_send(a->classes, (uint64_t)cmd->class_hash);
            for (int k = 0; k < found[i].n; k++)
                cmr_agent_record_redefine_latency(
                    a, cmr_class_cache_loaded_ns(a->classes, cmd->class_name, found[i].loaders[k]));
        }
        char msg[160];
        snprintf(msg, sizeof msg, "%s bytes installed with %d other class%s in %lld us",
                 cmd->original ? "original" : "instrumented", ndefs - 1, ndefs == 2 ? "" : "es", (long long)took_us);
        report(a, cmd->request_id, cmd->class_name, cmd->loader_id, cmd->class_hash, CMR_COMMAND_APPLIED, 0, msg);
    }
    for (int i = 0; i < n; i++) /* local references, after their counts were used above */
        find_release(&found[i]);
    free(found);
}

/* --- load -> redefined latency ---------------------------------------------------------- */

#define LATENCY_SAMPLES 65536
static int64_t latency_us[LATENCY_SAMPLES];
/* the same, counted from the agent being configured for classes loaded before it */
static int64_t since_configured_us[LATENCY_SAMPLES];
static size_t latency_n;

void cmr_agent_record_redefine_latency(cmr_agent_t *a, int64_t loaded_ns)
{
    if (loaded_ns <= 0 || latency_n == LATENCY_SAMPLES) /* unknown load time (attach, resend) */
        return;
    int64_t now = cmr_mono_ns(), configured = a->configured_ns;
    since_configured_us[latency_n] = (now - (configured > loaded_ns ? configured : loaded_ns)) / 1000;
    latency_us[latency_n++] = (now - loaded_ns) / 1000;
}

static int cmp_i64(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return (a > b) - (a < b);
}

/* The value at rank k of the sorted samples v[0..n) preceded by z zeros (classes
 * instrumented as they loaded: nothing to wait for), in ms. */
static double rank_ms(const int64_t *v, size_t z, size_t k)
{
    return k < z ? 0.0 : v[k - z] / 1000.0;
}

void cmr_agent_log_redefine_latency(cmr_agent_t *a)
{
    size_t n = latency_n, z = (size_t)(a->cache_load_hits + a->preload_load_hits);
    if (n == 0 && z == 0)
        return;
    qsort(latency_us, n, sizeof latency_us[0], cmp_i64);
    qsort(since_configured_us, n, sizeof since_configured_us[0], cmp_i64);
    /* classes=: redefined ones; at_load=: instrumented as they loaded (granted ahead or
     * from the cache); instrumented_*: both, since the agent was configured (0 at load) */
    size_t t = n + z;
    const int64_t *s = since_configured_us;
    if (n == 0) {
        cmr_log(CMR_LOG_INFO, "agent.redefine_latency",
                "classes=0 at_load=%zu instrumented=%zu instrumented_p50_ms=0.0 instrumented_p99_ms=0.0 "
                "instrumented_max_ms=0.0",
                z, t);
        return;
    }
    cmr_log(CMR_LOG_INFO, "agent.redefine_latency",
            "classes=%zu p50_ms=%.1f p90_ms=%.1f p99_ms=%.1f max_ms=%.1f since_configured_p50_ms=%.1f "
            "since_configured_p90_ms=%.1f since_configured_p99_ms=%.1f since_configured_max_ms=%.1f at_load=%zu "
            "instrumented=%zu instrumented_p50_ms=%.1f instrumented_p90_ms=%.1f instrumented_p99_ms=%.1f "
            "instrumented_max_ms=%.1f",
            n, latency_us[n / 2] / 1000.0, latency_us[n * 9 / 10] / 1000.0, latency_us[(n * 99) / 100] / 1000.0,
            latency_us[n - 1] / 1000.0, s[n / 2] / 1000.0, s[n * 9 / 10] / 1000.0, s[(n * 99) / 100] / 1000.0,
            s[n - 1] / 1000.0, z, t, rank_ms(s, z, t / 2), rank_ms(s, z, t * 9 / 10), rank_ms(s, z, (t * 99) / 100),
            rank_ms(s, z, t - 1));
}

/* --- captures (resend, dropped bytes, attach) ------------------------------------------------ */

typedef struct capture {
    const char *name;
    int64_t loader_id;
    int64_t request_id;       /* resend */
    cmr_class_entry_t *entry; /* byteless entry */
    bool done;
} capture_t;

static pthread_mutex_t capture_lock = PTHREAD_MUTEX_INITIALIZER;
static capture_t *captures;
static int ncaptures;

bool cmr_agent_capture_hook(cmr_agent_t *a, const char *name, int64_t loader_id, const uint8_t *bytes, size_t len)
{
    bool hit = false;
    pthread_mutex_lock(&capture_lock);
    for (int i = 0; i < ncaptures; i++) {
        capture_t *c = &captures[i];
        if (c->done || c->loader_id != loader_id || strcmp(c->name, name) != 0)
            continue;
        uint64_t hash = cmr_class_hash(bytes, len);
        uint8_t digest[CMR_TRUST_DIGEST_BYTES]; /* kept only for a class that has none yet */
        cmr_trust_digest(bytes, len, digest);
        if (c->entry)
            cmr_class_cache_attach_bytes(a->classes, c->entry, hash, digest, bytes, len);
        else
            cmr_class_cache_offer_resend(a->classes, name, loader_id, hash, digest, bytes, len, c->request_id);
        c->done = true;
        hit = true;
    }
    pthread_mutex_unlock(&capture_lock);
    return hit;
}

/* Retransforms `n` classes with the captures set; the hook fills them in, on this thread. */
static jvmtiError capture_run(cmr_agent_t *a, capture_t *set, int n, jclass *classes, int nclasses)
{
    pthread_mutex_lock(&capture_lock);
    captures = set;
    ncaptures = n;
    pthread_mutex_unlock(&capture_lock);
    jvmtiError jerr = nclasses ? (*a->jvmti)->RetransformClasses(a->jvmti, nclasses, classes) : JVMTI_ERROR_NONE;
    pthread_mutex_lock(&capture_lock);
    captures = NULL;
    ncaptures = 0;
    pthread_mutex_unlock(&capture_lock);
    return jerr;
}

static bool is_instrumented(const char *name, int64_t loader_id, void *ud)
{
    cmr_agent_t *a = ud;
    return cmr_u64map_has(&a->instrumented_classes, installed_key(name, loader_id));
}

/* A BytecodeResend without a class name: the CMR lost ClassLoaded messages of this agent
 * (records of cmr.classes gone before it read them: retention, an outage) and asks for
 * every class again. Each registered class is queued without bytes; the control loop
 * captures them in batches of CAPTURE_BATCH (cmr_agent_capture_byteless), as it does for
 * the classes loaded before the agent. Classes whose instrumented bytes are in effect are
 * left out: the CMR made those, and the JVM would hand out the instrumented bytes. */
static void resend_all(cmr_agent_t *a, const cmr_bytecode_resend_t *cmd)
{
    size_t n = cmr_class_cache_requeue_all(a->classes, is_instrumented, a, cmd->request_id);
    cmr_log(CMR_LOG_INFO, "agent.classes_requeued", "classes=%zu instrumented_left_out=%lld request=%016" PRIx64, n,
            (long long)a->classes_instrumented, (uint64_t)cmd->request_id);
    report(a, cmd->request_id, "", 0, 0, CMR_COMMAND_APPLIED, 0, "every class queued for the CMR again");
}

void cmr_agent_apply_resend(cmr_agent_t *a, JNIEnv *env, const cmr_bytecode_resend_t *cmd)
{
    if (!cmd->class_name || !cmd->class_name[0]) {
        resend_all(a, cmd);
        return;
    }
    find_ctx_t f = {.env = env, .loader_id = cmd->loader_id};
    find_classes(a, env, cmd->class_name, &f);
    uint64_t hash = 0;
    if (cmr_class_cache_hash_of(a->classes, cmd->class_name, cmd->loader_id, &hash))
        cmr_class_cache_unmark_never_send(a->classes, hash); /* seed: mark it "to be sent" */
    if (f.n == 0) {
        report(a, cmd->request_id, cmd->class_name, cmd->loader_id, cmd->class_hash, CMR_COMMAND_UNKNOWN_CLASS, 0,
               "no loaded class of that name and loader");
        return;
    }
    if (is_instrumented(cmd->class_name, cmd->loader_id, a)) { /* the JVM would hand out those bytes */
        report(a, cmd->request_id, cmd->class_name, cmd->loader_id, (int64_t)hash, CMR_COMMAND_FAILED, 0,
               "instrumented bytes are in effect: only original bytes are sent");
        find_release(&f);
        return;
    }
    capture_t cap = {cmd->class_name, cmd->loader_id, cmd->request_id, NULL, false};
    jvmtiError jerr = capture_run(a, &cap, 1, f.found, 1);
    if (jerr != JVMTI_ERROR_NONE)
        report(a, cmd->request_id, cmd->class_name, cmd->loader_id, (int64_t)hash, CMR_COMMAND_FAILED, jerr,
               "RetransformClasses could not give the class bytes");
    else if (!cap.done)
        report(a, cmd->request_id, cmd->class_name, cmd->loader_id, (int64_t)hash, CMR_COMMAND_FAILED, 0,
               "the JVM did not hand the class bytes to the agent");
    else
        report(a, cmd->request_id, cmd->class_name, cmd->loader_id, (int64_t)hash, CMR_COMMAND_APPLIED, 0,
               "bytes queued for the CMR");
    find_release(&f);
}

void cmr_agent_capture_byteless(cmr_agent_t *a, JNIEnv *env)
{
    cmr_class_entry_t *entries[CAPTURE_BATCH];
    size_t n = cmr_class_cache_take_byteless(a->classes, entries, CAPTURE_BATCH);
    if (n == 0)
        return;
    capture_t caps[CAPTURE_BATCH];
    jclass classes[CAPTURE_BATCH];
    int nclasses = 0;
    for (size_t i = 0; i < n; i++) {
        caps[i] = (capture_t){entries[i]->name, entries[i]->loader_id, 0, entries[i], false};
        /* instrumented since it was queued: the JVM would hand out the instrumented bytes,
         * and the CMR has the originals (it made them from those) */
        if (is_instrumented(entries[i]->name, entries[i]->loader_id, a))
            continue;
        find_ctx_t f = {.env = env, .loader_id = entries[i]->loader_id};
        find_classes(a, env, entries[i]->name, &f);
        jboolean modifiable = JNI_FALSE;
        if (f.n > 0 && (*a->jvmti)->IsModifiableClass(a->jvmti, f.found[0], &modifiable) == JVMTI_ERROR_NONE &&
            modifiable)
            classes[nclasses++] = (*env)->NewLocalRef(env, f.found[0]);
        find_release(&f);
    }
    jvmtiError jerr = capture_run(a, caps, (int)n, classes, nclasses);
    if (jerr != JVMTI_ERROR_NONE)
        cmr_agent_check(jerr, "RetransformClasses (capturing class bytes)");
    size_t lost = 0;
    for (size_t i = 0; i < n; i++) {
        if (!caps[i].done) { /* unloaded or not modifiable: nothing to instrument anyway */
            char ename[256];
            cmr_log(CMR_LOG_DEBUG, "agent.class_not_captured", "class=\"%s\" loader=%lld",
                    cmr_log_escape(entries[i]->name, ename, sizeof ename), (long long)entries[i]->loader_id);
            cmr_class_cache_drop(a->classes, entries[i]);
            lost++;
        }
    }
    for (int i = 0; i < nclasses; i++)
        (*env)->DeleteLocalRef(env, classes[i]);
    cmr_log(CMR_LOG_DEBUG, "agent.classes_captured", "captured=%zu not_capturable=%zu", n - lost, lost);
}

/* --- classes the load hook never saw --------------------------------------------------------
 * After a dynamic attach, every loaded class; at VMInit of a normal start, the few the JVM
 * defined before the hook was armed (java.lang.Object, String, Thread ...: vmClasses). Their
 * bytes are captured later, on the control thread, like a resend. */

typedef struct record_ctx {
    bool only_unseen;
    int recorded;
} record_ctx_t;

static void record_class(cmr_agent_t *a, JNIEnv *env, jclass cls, const char *name, int64_t loader_id, void *ud)
{
    record_ctx_t *r = ud;
    if (strncmp(name, "cmr/agent/", 10) == 0 || (r->only_unseen && cmr_class_cache_knows(a->classes, name, loader_id)))
        return;
    cmr_agent_keep_handle(a, env, cls, name, loader_id);
    cmr_class_cache_offer_unread(a->classes, name, loader_id, CMR_CLASS_LOADED_BEFORE_REGISTRATION);
    r->recorded++;
}

void cmr_agent_record_loaded_classes(cmr_agent_t *a, bool only_unseen)
{
    JNIEnv *env = NULL;
    if ((*a->jvm)->GetEnv(a->jvm, (void **)&env, JNI_VERSION_1_8) != JNI_OK)
        return;
    record_ctx_t r = {only_unseen, 0};
    jint count = each_loaded_class(a, env, true, record_class, &r);
    cmr_log(CMR_LOG_INFO, only_unseen ? "agent.early_classes" : "agent.attached", "loaded_classes=%d recorded=%d",
            count, r.recorded);
}

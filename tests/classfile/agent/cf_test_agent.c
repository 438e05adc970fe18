/*
 * cf_test_agent.c - throwaway JVMTI transformer used only by the class-file engine's JVM
 * tests (not the product agent). Every class the JVM hands to ClassFileLoadHook (except the
 * probe helper) is instrumented with every probe kind of cf_testprobes.c, one pass after the
 * other. The helper class cmrtest/Probes is appended to the bootstrap class path.
 *
 * At VM death the agent suspends the other threads, reads the probe counters through JNI,
 * and counts the frames of instrumented methods still on every thread's stack: for each
 * kind, enters - (normal exits + exceptional exits) must equal those live frames.
 * The report goes to the file given by report=PATH (key=value lines).
 *
 *   -agentpath:libcf_test_agent.so=helper=DIR_OR_JAR,report=PATH[,retransform]
 * retransform: at VM init, also retransform (instrument) every modifiable class loaded
 * before the hook could see it (java.lang.Object, String ...).
 * noobject: with retransform, leave java.lang.Object alone.
 *
 * The probes count through one native method, Probes.count, registered here when
 * cmrtest/Probes is prepared (before any of its methods can run): an atomic add, no monitor.
 * When a native thread attaches (DestroyJavaVM at exit, AttachCurrentThread) HotSpot runs
 * Thread's constructor, and the instrumented code it calls, before the thread has its Thread
 * object; a probe that met a contended monitor there crashed HotSpot 25 (SIGSEGV in
 * java_lang_Thread::set_thread_status), which is why the product's probes take no monitor on
 * their path either.
 */
#include "cf_testprobes.h"
#include "cmr/map.h"

#include <jvmti.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static jvmtiEnv *jvmti;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char report_path[1024] = "cf_agent_report.txt";
static unsigned long n_seen, n_instrumented_classes, n_methods, n_errors, n_refused[CF_REFUSE__COUNT];
static unsigned long n_pass_mismatch;
static FILE *errlog;

/* ids of the instrumented methods (values unused); guarded by mu */
static cmr_u64map_t ids;

/* Per class: what the passes of cf_instrument_stacked report (on_pass). */
typedef struct passes {
    unsigned long first_count; /* methods instrumented by the first pass */
    uint64_t *mids;            /* their ids (malloc'ed) */
    uint32_t nm;
} passes;

static void on_pass(unsigned pass, const cf_instrument_result *r, void *ud)
{
    passes *ps = ud;
    pthread_mutex_lock(&mu);
    if (pass == 0) {
        ps->first_count = r->n_instrumented;
        ps->mids = malloc(sizeof(uint64_t) * (r->n_methods + 1));
        for (uint32_t m = 0; m < r->n_methods; m++) {
            n_refused[r->methods[m].refusal]++;
            if (r->methods[m].refusal == CF_REFUSE_NONE && ps->mids)
                ps->mids[ps->nm++] = r->methods[m].method_id;
        }
    } else if (r->n_instrumented != ps->first_count) {
        n_pass_mismatch++;
    }
    pthread_mutex_unlock(&mu);
}

static void JNICALL on_load_hook(jvmtiEnv *env, JNIEnv *jni, jclass redefined, jobject loader, const char *name,
                                 jobject pd, jint len, const unsigned char *data, jint *new_len,
                                 unsigned char **new_data)
{
    (void)jni;
    (void)redefined;
    (void)loader;
    (void)pd;
    if (name && strncmp(name, "cmrtest/Probes", 14) == 0)
        return;
    cf_error err;
    passes ps = {0};
    cf_instrument_result r;
    int failed =
        cf_instrument_stacked(data, (size_t)len, cf_test_probes, CF_PROBE_KIND_COUNT, on_pass, &ps, &r, &err) != CF_OK;
    pthread_mutex_lock(&mu);
    n_seen++;
    if (failed) {
        n_errors++;
        if (errlog)
            fprintf(errlog, "error %s: %s\n", name ? name : "?", err.msg);
    } else if (r.bytes) {
        n_instrumented_classes++;
        n_methods += ps.first_count;
        for (uint32_t i = 0; i < ps.nm; i++)
            cmr_u64map_put(&ids, ps.mids[i], NULL);
    }
    pthread_mutex_unlock(&mu);
    free(ps.mids);
    if (failed)
        return;
    unsigned char *out;
    if (r.bytes && (*env)->Allocate(env, (jlong)r.len, &out) == JVMTI_ERROR_NONE) {
        memcpy(out, r.bytes, r.len);
        *new_data = out;
        *new_len = (jint)r.len;
    }
    cf_instrument_result_free(&r);
}

/* retransform: classes loaded before the hook saw them (primordial phase) are
 * retransformed at VM init, one by one, so that they are instrumented too. */
static unsigned long n_retransformed, n_retransform_failed;
static int skip_object; /* option noobject: do not retransform java.lang.Object */
static void JNICALL on_vm_init(jvmtiEnv *env, JNIEnv *jni, jthread thread)
{
    (void)jni;
    (void)thread;
    jint n = 0;
    jclass *cls = NULL;
    if ((*env)->GetLoadedClasses(env, &n, &cls) != JVMTI_ERROR_NONE)
        return;
    for (jint i = 0; i < n; i++) {
        jboolean mod = 0;
        char *sig = NULL;
        (*env)->IsModifiableClass(env, cls[i], &mod);
        (*env)->GetClassSignature(env, cls[i], &sig, NULL);
        /* java.lang.Object is retransformed too: the engine refuses Object.<init> (a
     * retransformed Object.<init> with handlers crashes HotSpot's JIT), its other methods
     * are instrumented. Option `noobject` leaves the class alone. */
        if (mod && sig && strncmp(sig, "Lcmrtest/", 9) != 0 &&
            (!skip_object || strcmp(sig, "Ljava/lang/Object;") != 0)) {
            jvmtiError e = (*env)->RetransformClasses(env, 1, &cls[i]);
            if (e == JVMTI_ERROR_NONE)
                n_retransformed++;
            else {
                n_retransform_failed++;
                if (errlog)
                    fprintf(errlog, "retransform %s failed: %d\n", sig, e);
            }
        }
        if (sig)
            (*env)->Deallocate(env, (unsigned char *)sig);
    }
    (*env)->Deallocate(env, (unsigned char *)cls);
}

/* Counts frames of instrumented methods on one thread's stack (frames still running an
 * obsolete, pre-retransformation version of a method have no probes and are skipped). */
static long live_frames(JNIEnv *jni, jthread t, int *in_probe, int *top_instrumented)
{
    jvmtiFrameInfo frames[2048];
    jint count = 0;
    long live = 0;
    if ((*jvmti)->GetStackTrace(jvmti, t, 0, 2048, frames, &count) != JVMTI_ERROR_NONE)
        return 0;
    for (jint i = 0; i < count; i++) {
        jclass k;
        char *sig = NULL, *mname = NULL, *msig = NULL;
        jboolean obsolete = 0;
        (*jvmti)->IsMethodObsolete(jvmti, frames[i].method, &obsolete);
        if (obsolete)
            continue;
        if ((*jvmti)->GetMethodDeclaringClass(jvmti, frames[i].method, &k) != JVMTI_ERROR_NONE)
            continue;
        if ((*jvmti)->GetClassSignature(jvmti, k, &sig, NULL) == JVMTI_ERROR_NONE &&
            (*jvmti)->GetMethodName(jvmti, frames[i].method, &mname, &msig, NULL) == JVMTI_ERROR_NONE &&
            sig[0] == 'L') {
            size_t sl = strlen(sig);
            cf_str owner = {sig + 1, (uint32_t)(sl - 2)};
            if ((owner.len == 14 && !memcmp(owner.p, "cmrtest/Probes", 14)))
                *in_probe = 1;
            cf_str n = {mname, (uint32_t)strlen(mname)}, d = {msig, (uint32_t)strlen(msig)};
            if (cmr_u64map_has(&ids, cf_method_id_of(owner, n, d))) {
                live++;
                if (i == 0)
                    *top_instrumented = 1;
            }
        }
        if (sig)
            (*jvmti)->Deallocate(jvmti, (unsigned char *)sig);
        if (mname)
            (*jvmti)->Deallocate(jvmti, (unsigned char *)mname);
        if (msig)
            (*jvmti)->Deallocate(jvmti, (unsigned char *)msig);
        (*jni)->DeleteLocalRef(jni, k);
    }
    return live;
}

/* The probes' counters, numbered as in cmrtest/Probes.java. */
enum {
    C_ENTER,
    C_EXIT,
    C_EXC,
    C_ANCHOR_ENTER,
    C_ANCHOR_EXIT,
    C_ANCHOR_EXC,
    C_COND_ENTER,
    C_COND_EXIT,
    C_COND_EXC,
    C_BAD_ARGS,
    C__COUNT
};
static long counts[C__COUNT];
static int probes_registered;

/* Probes.count(int): the only code the probes run. */
JNIEXPORT void JNICALL Java_cmrtest_Probes_count(JNIEnv *jni, jclass cls, jint which)
{
    (void)jni;
    (void)cls;
    if (which >= 0 && which < C__COUNT)
        __atomic_fetch_add(&counts[which], 1, __ATOMIC_RELAXED);
}

static void JNICALL on_class_prepare(jvmtiEnv *env, JNIEnv *jni, jthread thread, jclass klass)
{
    (void)thread;
    char *sig = NULL;
    if ((*env)->GetClassSignature(env, klass, &sig, NULL) != JVMTI_ERROR_NONE)
        return;
    if (strcmp(sig, "Lcmrtest/Probes;") == 0) {
        JNINativeMethod m = {"count", "(I)V", (void *)Java_cmrtest_Probes_count};
        if ((*jni)->RegisterNatives(jni, klass, &m, 1) == 0)
            probes_registered = 1;
        else
            (*jni)->ExceptionClear(jni);
    }
    (*env)->Deallocate(env, (unsigned char *)sig);
}

static long counter(int which)
{
    return __atomic_load_n(&counts[which], __ATOMIC_RELAXED);
}

static void JNICALL on_vm_death(jvmtiEnv *env, JNIEnv *jni)
{
    (void)env;
    jthread self;
    (*jvmti)->GetCurrentThread(jvmti, &self);
    jint nt = 0;
    jthread *ts = NULL;
    (*jvmti)->GetAllThreads(jvmti, &nt, &ts);
    for (jint i = 0; i < nt; i++)
        if (!(*jni)->IsSameObject(jni, ts[i], self))
            (*jvmti)->SuspendThread(jvmti, ts[i]);
    long live = 0;
    int threads_in_probe = 0, mid_sequence = 0;
    for (jint i = 0; i < nt; i++) {
        int in_probe = 0, top = 0;
        jint state = 0;
        live += live_frames(jni, ts[i], &in_probe, &top);
        threads_in_probe += in_probe;
        /* A thread suspended while running an instrumented method's own code may stand between
     * two stacked probe calls (one kind's enter done, the next kind's not yet): each kind
     * may then be off by one for it. */
        if (top && (*jvmti)->GetThreadState(jvmti, ts[i], &state) == JVMTI_ERROR_NONE &&
            (state & JVMTI_THREAD_STATE_RUNNABLE))
            mid_sequence++;
    }
    FILE *f = fopen(report_path, "w");
    if (f) {
        pthread_mutex_lock(&mu);
        fprintf(f,
                "classes_seen=%lu\nclasses_instrumented=%lu\nmethods_instrumented=%lu\n"
                "errors=%lu\npass_mismatch=%lu\nlive_frames=%ld\nthreads_in_probe=%d\nunbalanced_tolerance=%d\n"
                "retransformed=%lu\nretransform_failed=%lu\n",
                n_seen, n_instrumented_classes, n_methods, n_errors, n_pass_mismatch, live, threads_in_probe,
                mid_sequence, n_retransformed, n_retransform_failed);
        for (int r = 1; r < CF_REFUSE__COUNT; r++)
            fprintf(f, "refused_%s=%lu\n", cf_refusal_name((cf_refusal)r), n_refused[r]);
        pthread_mutex_unlock(&mu);
        if (probes_registered) {
            static const char *kinds[3] = {"timer", "anchor", "conditional"};
            for (int k = 0; k < 3; k++) {
                long e = counter(3 * k), x = counter(3 * k + 1), t = counter(3 * k + 2);
                fprintf(f, "%s_enter=%ld\n%s_exit=%ld\n%s_exc=%ld\n%s_unbalanced=%ld\n", kinds[k], e, kinds[k], x,
                        kinds[k], t, kinds[k], e - x - t - live);
            }
            fprintf(f, "bad_args=%ld\n", counter(C_BAD_ARGS));
        } else {
            fprintf(f, "helper_missing=1\n");
        }
        fclose(f);
    }
    for (jint i = 0; i < nt; i++)
        if (!(*jni)->IsSameObject(jni, ts[i], self))
            (*jvmti)->ResumeThread(jvmti, ts[i]);
    if (errlog)
        fclose(errlog);
    errlog = NULL;
}

JNIEXPORT jint JNICALL Agent_OnLoad(JavaVM *vm, char *options, void *reserved)
{
    (void)reserved;
    if ((*vm)->GetEnv(vm, (void **)&jvmti, JVMTI_VERSION_11) != JNI_OK)
        return JNI_ERR;
    char helper[1024] = "";
    int retransform = 0;
    char opts[4096];
    snprintf(opts, sizeof opts, "%s", options ? options : "");
    for (char *save = NULL, *tok = strtok_r(opts, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (!strncmp(tok, "helper=", 7))
            snprintf(helper, sizeof helper, "%s", tok + 7);
        else if (!strncmp(tok, "report=", 7))
            snprintf(report_path, sizeof report_path, "%s", tok + 7);
        else if (!strcmp(tok, "retransform"))
            retransform = 1;
        else if (!strcmp(tok, "noobject"))
            skip_object = 1;
    }
    if (!*helper) {
        fprintf(stderr, "cf_test_agent: helper=PATH required\n");
        return JNI_ERR;
    }
    char errpath[1100];
    snprintf(errpath, sizeof errpath, "%s.errors", report_path);
    errlog = fopen(errpath, "w");
    jvmtiCapabilities caps;
    memset(&caps, 0, sizeof caps);
    caps.can_generate_all_class_hook_events = 1;
    caps.can_suspend = 1;
    if (retransform)
        caps.can_retransform_classes = 1;
    if ((*jvmti)->AddCapabilities(jvmti, &caps) != JVMTI_ERROR_NONE)
        return JNI_ERR;
    if ((*jvmti)->AddToBootstrapClassLoaderSearch(jvmti, helper) != JVMTI_ERROR_NONE) {
        fprintf(stderr, "cf_test_agent: cannot add %s to the bootstrap class path\n", helper);
        return JNI_ERR;
    }
    jvmtiEventCallbacks cb;
    memset(&cb, 0, sizeof cb);
    cb.ClassFileLoadHook = on_load_hook;
    cb.VMDeath = on_vm_death;
    cb.ClassPrepare = on_class_prepare;
    if (retransform) {
        cb.VMInit = on_vm_init;
        (*jvmti)->SetEventNotificationMode(jvmti, JVMTI_ENABLE, JVMTI_EVENT_VM_INIT, NULL);
    }
    (*jvmti)->SetEventCallbacks(jvmti, &cb, sizeof cb);
    (*jvmti)->SetEventNotificationMode(jvmti, JVMTI_ENABLE, JVMTI_EVENT_CLASS_FILE_LOAD_HOOK, NULL);
    (*jvmti)->SetEventNotificationMode(jvmti, JVMTI_ENABLE, JVMTI_EVENT_VM_DEATH, NULL);
    (*jvmti)->SetEventNotificationMode(jvmti, JVMTI_ENABLE, JVMTI_EVENT_CLASS_PREPARE, NULL);
    return JNI_OK;
}

/*
 * instr_rules.c - rule matching (see instr_rules.h). Hierarchy walks are bounded (depth
 * and visited-set size) so that hostile or cyclic hierarchies cannot loop.
 */
#include "cmr/instr_rules.h"

#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "cmr/instr_exclude.h"

#define MAX_DEPTH 64
#define MAX_TYPES 512

enum { NO = 0, YES = 1, UNKNOWN = 2 };

typedef struct ctx {
    const cmr_instr_meta_t *cls;
    cmr_instr_lookup_fn *lookup;
    void *ud;
    cmr_instr_decision_t *out;
    int oom;
} ctx_t;

static int glob(const char *pattern, const char *s)
{
    return fnmatch(pattern, s, 0) == 0;
}

static void note_missing(ctx_t *c, const char *type)
{
    cmr_instr_names_t *m = &c->out->missing;
    for (size_t i = 0; i < m->count; i++)
        if (strcmp(m->items[i], type) == 0)
            return;
    if (cmr_instr_names_add(m, strdup(type)) != 0)
        c->oom = 1;
}

/* java/lang/Object is the root of every chain: known without being sent. */
static const cmr_instr_meta_t object_meta = {.name = "java/lang/Object"};

static const cmr_instr_meta_t *resolve(ctx_t *c, const char *type)
{
    if (strcmp(type, c->cls->name) == 0)
        return c->cls;
    if (strcmp(type, "java/lang/Object") == 0)
        return &object_meta;
    const cmr_instr_meta_t *m = c->lookup ? c->lookup(type, c->ud) : NULL;
    if (!m)
        note_missing(c, type);
    return m;
}

static int has_superclass(ctx_t *c, const char *want)
{
    const char *s = c->cls->super_name;
    for (int depth = 0; s && depth < MAX_DEPTH; depth++) {
        if (strcmp(s, want) == 0)
            return YES;
        const cmr_instr_meta_t *m = resolve(c, s);
        if (!m)
            return UNKNOWN;
        s = m->super_name;
    }
    return NO;
}

/* Breadth-first over the class, its superclasses and every interface they reach. */
static int has_interface(ctx_t *c, const char *want)
{
    const char *queue[MAX_TYPES];
    size_t head = 0, tail = 0;
    int unknown = 0;
    queue[tail++] = c->cls->name;
    while (head < tail) {
        const char *t = queue[head++];
        const cmr_instr_meta_t *m = head == 1 ? c->cls : resolve(c, t);
        if (!m) {
            unknown = 1;
            continue;
        }
        for (size_t i = 0; i < m->interfaces.count; i++)
            if (strcmp(m->interfaces.items[i], want) == 0)
                return YES;
        const char *next[1 + 64];
        size_t nn = 0;
        if (m->super_name)
            next[nn++] = m->super_name;
        for (size_t i = 0; i < m->interfaces.count && nn < 65; i++)
            next[nn++] = m->interfaces.items[i];
        for (size_t i = 0; i < nn; i++) {
            int seen = 0;
            for (size_t j = 0; j < tail && !seen; j++)
                seen = strcmp(queue[j], next[i]) == 0;
            if (!seen && tail < MAX_TYPES)
                queue[tail++] = next[i];
        }
    }
    return unknown ? UNKNOWN : NO;
}

static int has_name(const cmr_instr_names_t *n, const char *want)
{
    for (size_t i = 0; i < n->count; i++)
        if (strcmp(n->items[i], want) == 0)
            return 1;
    return 0;
}

/* Class-level criteria of one assignment: YES, NO or UNKNOWN (hierarchy not resolved). */
static int class_matches(ctx_t *c, const cmr_sensor_assignment_t *a)
{
    if (!glob(a->class_pattern, c->cls->name))
        return NO;
    int r = YES;
    if (a->superclass) {
        r = has_superclass(c, a->superclass);
        if (r == NO)
            return NO;
    }
    if (a->interface) {
        int i = has_interface(c, a->interface);
        if (i == NO)
            return NO;
        if (i == UNKNOWN)
            r = UNKNOWN;
    }
    return r;
}

/* 1 when the assignment matches the method, 2 when it would but for the method being trivial,
 * 0 otherwise. */
static int method_matches(const cmr_sensor_assignment_t *a, const cmr_instr_meta_t *cls, const cmr_instr_method_t *m)
{
    if (m->access & (0x0400 | 0x0100)) /* abstract, native: no code */
        return 0;
    if ((m->access & 0x0040) && !(a->modifiers_required & 0x0040)) /* bridge: javac's forwarder to */
        return 0; /* the real method, which is matched by itself; only asked-for bridges */
    if (strcmp(m->name, "<clinit>") == 0)
        return 0;
    if (strcmp(m->name, "<init>") == 0 && !a->constructors)
        return 0;
    if (!glob(a->method_pattern, m->name))
        return 0;
    if (a->descriptor_pattern && !glob(a->descriptor_pattern, m->desc))
        return 0;
    if ((m->access & a->modifiers_required) != a->modifiers_required || (m->access & a->modifiers_excluded))
        return 0;
    if (a->annotation && !has_name(&cls->annotations, a->annotation) && !has_name(&m->annotations, a->annotation))
        return 0;
    return m->trivial && !a->trivial ? 2 : 1;
}

/* The hand-off points of the JDK that pass work to another thread or another JVM. They are
 * instrumented even in classes of the exclusion list (Thread, sun/, jdk/internal/): their
 * probes only move a context, and run no instrumented code. */
#define TPE "java/util/concurrent/ThreadPoolExecutor"
#define FJT "java/util/concurrent/ForkJoinTask"
#define HUC "sun/net/www/protocol/http/HttpURLConnection"
#define TOMCAT_TPE "org/apache/tomcat/util/threads/ThreadPoolExecutor"
#define JETTY_QTP "org/eclipse/jetty/util/thread/QueuedThreadPool"
static const struct {
    const char *cls, *name, *desc; /* desc NULL: any descriptor (it differs between JDKs) */
    cmr_instr_handoff_t role;
    uint8_t arg;
} handoffs[] = {
    /* Executors: the pool's own hooks around each task, so every executor built on it
     * (Executors.*, ScheduledThreadPoolExecutor, submit()'s FutureTask) is covered */
    {TPE, "execute", "(Ljava/lang/Runnable;)V", CMR_HANDOFF_CAPTURE, 0},
    {TPE, "beforeExecute", "(Ljava/lang/Thread;Ljava/lang/Runnable;)V", CMR_HANDOFF_BEGIN, 1},
    {TPE, "afterExecute", "(Ljava/lang/Runnable;Ljava/lang/Throwable;)V", CMR_HANDOFF_END, 0},
    /* Tomcat's own pool (a copy of the JDK's, with the same hooks): its request threads,
     * and what a servlet hands over with AsyncContext.start */
    {TOMCAT_TPE, "execute", "(Ljava/lang/Runnable;)V", CMR_HANDOFF_CAPTURE, 0},
    {TOMCAT_TPE, "beforeExecute", "(Ljava/lang/Thread;Ljava/lang/Runnable;)V", CMR_HANDOFF_BEGIN, 1},
    {TOMCAT_TPE, "afterExecute", "(Ljava/lang/Runnable;Ljava/lang/Throwable;)V", CMR_HANDOFF_END, 0},
    /* Jetty's pool (9.4; its request threads, and what a servlet hands over with
     * AsyncContext.start or completes with complete()): execute queues a job, runJob runs
     * it on a pool thread */
    {JETTY_QTP, "execute", "(Ljava/lang/Runnable;)V", CMR_HANDOFF_CAPTURE, 0},
    {JETTY_QTP, "runJob", "(Ljava/lang/Runnable;)V", CMR_HANDOFF_SPAN, 0},
    /* ... whose server loops are jobs too, queued while the server starts (inside a trace,
     * when the code that starts it is recorded) and running for the server's life: each
     * ends the segment its job opened, so that they carry no trace (the requests they
     * serve are transactions of their own, Probe.httpIn) */
    {"org/eclipse/jetty/server/AbstractConnector$Acceptor", "run", "()V", CMR_HANDOFF_DETACH, 0},
    {"org/eclipse/jetty/util/thread/strategy/EatWhatYouKill", "produce", "()V", CMR_HANDOFF_DETACH, 0},
    {"org/eclipse/jetty/util/thread/ReservedThreadExecutor$ReservedThread", "run", "()V", CMR_HANDOFF_DETACH, 0},
    /* scheduled pools queue their tasks without execute() (first run of a periodic task) */
    {"java/util/concurrent/ScheduledThreadPoolExecutor", "delayedExecute",
     "(Ljava/util/concurrent/RunnableScheduledFuture;)V", CMR_HANDOFF_CAPTURE, 0},
    /* java.util.Timer: a task scheduled carries the context (its run: see subclass_handoffs) */
    {"java/util/Timer", "sched", "(Ljava/util/TimerTask;JJ)V", CMR_HANDOFF_CAPTURE, 0},
    /* Threads: the started thread's first recorded call continues the trace */
    {"java/lang/Thread", "start", "()V", CMR_HANDOFF_CAPTURE, CMR_HANDOFF_ARG_THIS},
    /* ... a virtual thread's too (JDK 21+: Thread.start, Thread.ofVirtual, the
     * thread-per-task executor and structured concurrency all start it here), while the
     * ForkJoinTasks that schedule its continuation (at start and at every unpark, JDK 21
     * and 25 name them alike) carry no context: the virtual thread records for itself,
     * its carrier nothing */
    {"java/lang/VirtualThread", "start", "(Ljdk/internal/vm/ThreadContainer;)V", CMR_HANDOFF_CAPTURE,
     CMR_HANDOFF_ARG_THIS},
    {"java/lang/VirtualThread", "submitRunContinuation", NULL, CMR_HANDOFF_QUIET, 0},
    {"java/lang/VirtualThread", "lazySubmitRunContinuation", NULL, CMR_HANDOFF_QUIET, 0},
    {"java/lang/VirtualThread", "externalSubmitRunContinuation", NULL, CMR_HANDOFF_QUIET, 0},
    {"java/lang/VirtualThread", "externalSubmitRunContinuationOrThrow", NULL, CMR_HANDOFF_QUIET, 0},
    /* ... and the timer that wakes a sleeping or timed-parked one (JDK 21: scheduleUnpark,
     * 25: schedule) is its own business too */
    {"java/lang/VirtualThread", "scheduleUnpark", NULL, CMR_HANDOFF_QUIET, 0},
    {"java/lang/VirtualThread", "schedule", NULL, CMR_HANDOFF_QUIET, 0},
    /* ForkJoin: a task carries the context of the code that made it (fork(), invoke(),
     * submit() and CompletableFuture's async stages all make one, wrappers included) and
     * continues it wherever the pool runs it */
    {FJT, "<init>", "()V", CMR_HANDOFF_CAPTURE, CMR_HANDOFF_ARG_THIS},
    {FJT, "doExec", NULL, CMR_HANDOFF_SPAN, CMR_HANDOFF_ARG_THIS},
    /* CompletableFuture's async tasks are ForkJoinTasks, but an executor that is not a
     * ForkJoinPool (the thread-per-task one used when the common pool has one thread, any
     * ThreadPoolExecutor) runs them through run() */
    {"java/util/concurrent/CompletableFuture$AsyncSupply", "run", "()V", CMR_HANDOFF_SPAN, CMR_HANDOFF_ARG_THIS},
    {"java/util/concurrent/CompletableFuture$AsyncRun", "run", "()V", CMR_HANDOFF_SPAN, CMR_HANDOFF_ARG_THIS},
    {"java/util/concurrent/CompletableFuture$Completion", "run", "()V", CMR_HANDOFF_SPAN, CMR_HANDOFF_ARG_THIS},
    /* HTTP out: the JDK's HttpURLConnection exchanges in getInputStream (getResponseCode
     * and the header getters call it): a node with method, URL and status, the headers put
     * on at its entry; an application that calls connect() or getOutputStream() first (a
     * POST's body) gets them there, before the node (the later ones find it connected and
     * add nothing) */
    {HUC, "getInputStream", "()Ljava/io/InputStream;", CMR_HANDOFF_HTTP_URL_CALL, CMR_HANDOFF_ARG_THIS},
    {HUC, "connect", "()V", CMR_HANDOFF_HTTP_OUT, CMR_HANDOFF_ARG_THIS},
    {HUC, "getOutputStream", "()Ljava/io/OutputStream;", CMR_HANDOFF_HTTP_OUT, CMR_HANDOFF_ARG_THIS},
    /* the JDK HttpClient (JDK 11+; every client, HttpClient.newHttpClient() included, is an
     * HttpClientImpl behind a facade): the call is a node with method, URL and status, the
     * context taken when the request is sent: its request is immutable, so the probe sends
     * a copy with the headers. send waits for the response; sendAsync's node spans the send
     * to the response and is written by whichever thread completes it (a sendAsync inside
     * send, and the overloads calling each other, add nothing) */
    {"jdk/internal/net/http/HttpClientImpl", "send", NULL, CMR_HANDOFF_HTTP_SEND, 0},
    {"jdk/internal/net/http/HttpClientImpl", "sendAsync", NULL, CMR_HANDOFF_HTTP_SEND_ASYNC, 0},
    /* HTTP clients of the class path: the call is a node with the request's method, URL and
     * the response's status (Apache HttpClient 4 and 5: every execute() ends in doExecute,
     * parameter 1 the request; OkHttp 3: the call itself, whose request is immutable: the
     * one its BridgeInterceptor builds inside the call gets the headers) */
    {"org/apache/http/impl/client/InternalHttpClient", "doExecute", NULL, CMR_HANDOFF_HTTP_CALL, 1},
    {"org/apache/http/impl/client/MinimalHttpClient", "doExecute", NULL, CMR_HANDOFF_HTTP_CALL, 1},
    {"org/apache/hc/client5/http/impl/classic/InternalHttpClient", "doExecute", NULL, CMR_HANDOFF_HTTP_CALL, 1},
    {"org/apache/hc/client5/http/impl/classic/MinimalHttpClient", "doExecute", NULL, CMR_HANDOFF_HTTP_CALL, 1},
    {"okhttp3/RealCall", "execute", "()Lokhttp3/Response;", CMR_HANDOFF_HTTP_CALL, CMR_HANDOFF_ARG_THIS},
    {"okhttp3/RealCall$AsyncCall", "execute", "()V", CMR_HANDOFF_HTTP_CALL_VOID, CMR_HANDOFF_ARG_THIS},
    /* ... whose status comes from the exchange inside it (sync execute's too: ignored there) */
    {"okhttp3/RealCall", "getResponseWithInterceptorChain", "()Lokhttp3/Response;", CMR_HANDOFF_HTTP_CALL_RESPONSE,
     CMR_HANDOFF_ARG_THIS},
    {"okhttp3/Request$Builder", "build", "()Lokhttp3/Request;", CMR_HANDOFF_HTTP_OUT_IN_CALL, CMR_HANDOFF_ARG_THIS},
    /* HTTP in: a servlet's service continues the caller's trace */
    {"jakarta/servlet/http/HttpServlet", "service",
     "(Ljakarta/servlet/ServletRequest;Ljakarta/servlet/ServletResponse;)V", CMR_HANDOFF_HTTP_IN_SERVLET, 0},
    {"javax/servlet/http/HttpServlet", "service", "(Ljavax/servlet/ServletRequest;Ljavax/servlet/ServletResponse;)V",
     CMR_HANDOFF_HTTP_IN_SERVLET, 0},
    /* ... and the JDK's own HTTP server (jdk.httpserver): every exchange passes its filter chain */
    {"com/sun/net/httpserver/Filter$Chain", "doFilter", "(Lcom/sun/net/httpserver/HttpExchange;)V", CMR_HANDOFF_HTTP_IN,
     0},
};
#undef TPE
#undef FJT
#undef HUC
#undef TOMCAT_TPE
#undef JETTY_QTP

static bool is_handoff_class(const char *name)
{
    for (size_t h = 0; h < sizeof handoffs / sizeof handoffs[0]; h++)
        if (strcmp(name, handoffs[h].cls) == 0)
            return true;
    return false;
}

/* Puts (or puts in place of a sensor's pick) one probe role on method m. */
static void put_role(cmr_instr_decision_t *out, size_t m, cmr_instr_handoff_t role, uint8_t arg)
{
    size_t at = out->n_picks;
    for (size_t i = 0; i < out->n_picks; i++)
        if (out->picks[i].method == m)
            at = i;
    out->picks[at] = (cmr_instr_pick_t){(uint16_t)m, CMR_SENSOR_INVOCATION_SEQUENCE, role, arg};
    if (at == out->n_picks)
        out->n_picks++;
}

/* Whether me is a hand-off rule's method: its name, its descriptor (NULL: any), and code. */
static bool handoff_method(const cmr_instr_method_t *me, const char *name, const char *desc)
{
    return strcmp(me->name, name) == 0 && (!desc || strcmp(me->desc, desc) == 0) && !(me->access & (0x0400 | 0x0100));
}

/* Adds (or puts in place of a sensor's pick) the hand-off probes of cls. */
static void add_handoffs(const cmr_instr_meta_t *cls, cmr_instr_decision_t *out)
{
    for (size_t h = 0; h < sizeof handoffs / sizeof handoffs[0]; h++) {
        if (strcmp(cls->name, handoffs[h].cls) != 0)
            continue;
        for (size_t m = 0; m < cls->n_methods; m++)
            if (handoff_method(&cls->methods[m], handoffs[h].name, handoffs[h].desc))
                put_role(out, m, handoffs[h].role, handoffs[h].arg);
    }
}

/* Hand-off points that are the application's own methods: a JDK class's subclasses
 * implement them and the JDK runs them (java.util.Timer's thread runs TimerTask.run). The
 * method becomes the hand-off's node: it continues the context its object carries (the
 * first run of a periodic task; later runs carry none and record only what they call). */
static const struct {
    const char *super, *name, *desc;
    cmr_instr_handoff_t role;
    uint8_t arg;
} subclass_handoffs[] = {
    {"java/util/TimerTask", "run", "()V", CMR_HANDOFF_SPAN, CMR_HANDOFF_ARG_THIS},
};

/* The hand-offs of cls as a subclass: only a class that declares such a method and does
 * not extend Object directly has its superclasses looked at. */
static void add_subclass_handoffs(ctx_t *c, cmr_instr_decision_t *out)
{
    const cmr_instr_meta_t *cls = c->cls;
    if (!cls->super_name || strcmp(cls->super_name, "java/lang/Object") == 0)
        return;
    for (size_t h = 0; h < sizeof subclass_handoffs / sizeof subclass_handoffs[0]; h++)
        for (size_t m = 0; m < cls->n_methods; m++)
            if (handoff_method(&cls->methods[m], subclass_handoffs[h].name, subclass_handoffs[h].desc) &&
                !(cls->methods[m].access & 0x0008) && has_superclass(c, subclass_handoffs[h].super) == YES)
                put_role(out, m, subclass_handoffs[h].role, subclass_handoffs[h].arg);
}

/* JDBC: the calls that run SQL are nodes with their statement's text, whatever the driver
 * (or a pool's proxy around it): matched by the java.sql interface the class implements.
 * A DataSource's getConnection is a node too (a pool's wait for a connection).
 * A PreparedStatement's SQL is given when it is prepared, so its class's constructors
 * bind it to the object made inside Connection.prepareStatement / prepareCall. */
#define SQL_ARG "(Ljava/lang/String;"
enum { JDBC_DATA_SOURCE, JDBC_CONNECTION, JDBC_STATEMENT, JDBC__TYPES };
static const char *const jdbc_types[JDBC__TYPES] = {"javax/sql/DataSource", "java/sql/Connection",
                                                    "java/sql/Statement"};
static const struct {
    int type; /* the interface the class implements (JDBC_*) */
    const char *name, *desc_prefix;
    cmr_instr_handoff_t role;
    uint8_t arg;
} jdbc_rules[] = {
    {JDBC_DATA_SOURCE, "getConnection", "(", CMR_HANDOFF_SQL, CMR_HANDOFF_ARG_THIS},
    {JDBC_CONNECTION, "prepareStatement", SQL_ARG, CMR_HANDOFF_SQL_PREPARE, 0},
    {JDBC_CONNECTION, "prepareCall", SQL_ARG, CMR_HANDOFF_SQL_PREPARE, 0},
    {JDBC_STATEMENT, "execute", SQL_ARG, CMR_HANDOFF_SQL, 0},
    {JDBC_STATEMENT, "executeQuery", SQL_ARG, CMR_HANDOFF_SQL, 0},
    {JDBC_STATEMENT, "executeUpdate", SQL_ARG, CMR_HANDOFF_SQL_UPDATE, 0},
    {JDBC_STATEMENT, "executeLargeUpdate", SQL_ARG, CMR_HANDOFF_SQL_LARGE_UPDATE, 0},
    {JDBC_STATEMENT, "execute", "()", CMR_HANDOFF_SQL, CMR_HANDOFF_ARG_THIS},
    {JDBC_STATEMENT, "executeQuery", "()", CMR_HANDOFF_SQL, CMR_HANDOFF_ARG_THIS},
    {JDBC_STATEMENT, "executeUpdate", "()", CMR_HANDOFF_SQL_UPDATE, CMR_HANDOFF_ARG_THIS},
    {JDBC_STATEMENT, "executeLargeUpdate", "()", CMR_HANDOFF_SQL_LARGE_UPDATE, CMR_HANDOFF_ARG_THIS},
    {JDBC_STATEMENT, "executeBatch", "()", CMR_HANDOFF_SQL_BATCH, CMR_HANDOFF_ARG_THIS},
    {JDBC_STATEMENT, "executeLargeBatch", "()", CMR_HANDOFF_SQL_BATCH, CMR_HANDOFF_ARG_THIS},
};
#undef SQL_ARG

static bool jdbc_method(const cmr_instr_method_t *me, size_t r)
{
    return !(me->access & (0x0400 | 0x0100 | 0x0040)) && strcmp(me->name, jdbc_rules[r].name) == 0 &&
           strncmp(me->desc, jdbc_rules[r].desc_prefix, strlen(jdbc_rules[r].desc_prefix)) == 0;
}

/* The JDBC probes of a class: only a class that declares one of the rules' methods has its
 * hierarchy looked at (most classes declare none, and are decided without a lookup). */
static void add_jdbc(ctx_t *c, cmr_instr_decision_t *out)
{
    const cmr_instr_meta_t *cls = c->cls;
    const size_t nr = sizeof jdbc_rules / sizeof jdbc_rules[0];
    int implements[JDBC__TYPES] = {-1, -1, -1}; /* not looked at yet */
    bool executes = false;                      /* declares a parameterless execute: a statement class */
    for (size_t m = 0; m < cls->n_methods; m++)
        for (size_t r = 0; r < nr; r++) {
            if (!jdbc_method(&cls->methods[m], r))
                continue;
            int k = jdbc_rules[r].type;
            if (implements[k] < 0)
                implements[k] = has_interface(c, jdbc_types[k]);
            if (implements[k] != YES)
                continue;
            put_role(out, m, jdbc_rules[r].role, jdbc_rules[r].arg);
            executes |= k == JDBC_STATEMENT && jdbc_rules[r].arg == CMR_HANDOFF_ARG_THIS;
            break;
        }
    if (!executes || has_interface(c, "java/sql/PreparedStatement") != YES)
        return;
    for (size_t m = 0; m < cls->n_methods; m++)
        if (strcmp(cls->methods[m].name, "<init>") == 0)
            put_role(out, m, CMR_HANDOFF_SQL_BIND, CMR_HANDOFF_ARG_THIS);
}

int cmr_instr_decide(const cmr_environment_t *env, const cmr_instr_meta_t *cls, cmr_instr_lookup_fn *lookup, void *ud,
                     cmr_instr_decision_t *out)
{
    memset(out, 0, sizeof *out);
    if (!env || env->assignments.count == 0 || cls->n_methods == 0) {
        out->excluded = cmr_instr_excluded(cls->name);
        return 0;
    }
    bool sequences = false;
    for (size_t i = 0; i < env->assignments.count; i++)
        sequences |= env->assignments.items[i].sensor == CMR_SENSOR_INVOCATION_SEQUENCE;
    if (cmr_instr_excluded(cls->name)) { /* only its hand-off points, if any */
        out->excluded = 1;
        if (!sequences || !is_handoff_class(cls->name))
            return 0;
        if (!(out->picks = calloc(cls->n_methods, sizeof *out->picks)))
            return -1;
        add_handoffs(cls, out);
        return 0;
    }
    ctx_t c = {cls, lookup, ud, out, 0};
    size_t na = env->assignments.count;
    int *applies = calloc(na, sizeof *applies);
    out->picks = calloc(cls->n_methods, sizeof *out->picks);
    if (!applies || !out->picks) {
        free(applies);
        cmr_instr_decision_free(out);
        return -1;
    }
    for (size_t i = 0; i < na; i++)
        applies[i] = class_matches(&c, &env->assignments.items[i]);
    for (size_t m = 0; m < cls->n_methods; m++) {
        bool trivial = false, picked = false;
        for (size_t i = 0; i < na && !picked; i++) {
            int r = applies[i] == YES ? method_matches(&env->assignments.items[i], cls, &cls->methods[m]) : 0;
            trivial |= r == 2;
            if (r != 1)
                continue;
            out->picks[out->n_picks++] =
                (cmr_instr_pick_t){(uint16_t)m, env->assignments.items[i].sensor, CMR_HANDOFF_NONE, 0};
            picked = true;
        }
        if (trivial && !picked) {
            if (!out->trivial && !(out->trivial = calloc(cls->n_methods, sizeof *out->trivial)))
                c.oom = 1;
            else
                out->trivial[out->n_trivial++] = (uint16_t)m;
        }
    }
    if (sequences) {
        add_handoffs(cls, out);
        add_subclass_handoffs(&c, out);
        add_jdbc(&c, out);
    }
    free(applies);
    if (c.oom) {
        cmr_instr_decision_free(out);
        return -1;
    }
    return 0;
}

void cmr_instr_decision_free(cmr_instr_decision_t *d)
{
    free(d->picks);
    free(d->trivial);
    for (size_t i = 0; i < d->missing.count; i++)
        free(d->missing.items[i]);
    free(d->missing.items);
    memset(d, 0, sizeof *d);
}

uint64_t cmr_instr_decision_signature(const cmr_instr_meta_t *cls, const cmr_instr_decision_t *d)
{
    if (d->n_picks == 0)
        return 0;
    XXH3_state_t *st = XXH3_createState();
    if (!st)
        return 1;
    XXH3_64bits_reset(st);
    for (size_t i = 0; i < d->n_picks; i++) {
        const cmr_instr_method_t *m = &cls->methods[d->picks[i].method];
        uint32_t sensor =
            (uint32_t)d->picks[i].sensor | (uint32_t)d->picks[i].handoff << 8 | (uint32_t)d->picks[i].arg << 16;
        XXH3_64bits_update(st, m->name, strlen(m->name) + 1);
        XXH3_64bits_update(st, m->desc, strlen(m->desc) + 1);
        XXH3_64bits_update(st, &sensor, sizeof sensor);
    }
    uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h ? h : 1;
}

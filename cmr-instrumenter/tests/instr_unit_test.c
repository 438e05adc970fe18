/*
 * instr_unit_test.c - the instrumenter without Kafka: rule matching (class globs,
 * superclass chains, interfaces inherited through superclasses and super-interfaces,
 * types not seen yet, annotations, method name / descriptor / modifiers, constructors,
 * first-match order, exclusions), decision signatures, the metadata cache encoding, and
 * the RocksDB class cache (batch reads, commit, rollback, eviction past the budget).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmr/instr_budget.h"
#include "cmr/instr_cache.h"
#include "cmr/instr_exclude.h"
#include "cmr/instr_probe.h"
#include "cmr/instr_resync.h"
#include "cmr/instr_rules.h"
#include "cmr/classfile.h"

/* --- a tiny type universe ------------------------------------------------------------- */

typedef struct universe {
    cmr_instr_meta_t types[16];
    size_t n;
    int lookups;
} universe_t;

static char **names(const char *const *v, size_t *n)
{
    size_t c = 0;
    while (v && v[c])
        c++;
    char **out = calloc(c ? c : 1, sizeof *out);
    for (size_t i = 0; i < c; i++)
        out[i] = strdup(v[i]);
    *n = c;
    return out;
}

/* methods: "name desc access" triples */
static cmr_instr_meta_t *add_type(universe_t *u, const char *name, const char *super, const char *const *ifaces,
                                  const char *const *annotations)
{
    cmr_instr_meta_t *m = &u->types[u->n++];
    memset(m, 0, sizeof *m);
    m->name = strdup(name);
    m->super_name = super ? strdup(super) : NULL;
    m->access = 0x0001;
    m->interfaces.items = names(ifaces, &m->interfaces.count);
    m->annotations.items = names(annotations, &m->annotations.count);
    return m;
}

static void add_method(cmr_instr_meta_t *m, const char *name, const char *desc, uint16_t access, const char *ann)
{
    m->methods = realloc(m->methods, (m->n_methods + 1) * sizeof *m->methods);
    cmr_instr_method_t *x = &m->methods[m->n_methods];
    memset(x, 0, sizeof *x);
    x->name = strdup(name);
    x->desc = strdup(desc);
    x->access = access;
    x->index = (uint16_t)m->n_methods;
    if (ann) {
        const char *v[] = {ann, NULL};
        x->annotations.items = names(v, &x->annotations.count);
    }
    m->n_methods++;
}

static const cmr_instr_meta_t *lookup(const char *type, void *ud)
{
    universe_t *u = ud;
    u->lookups++;
    for (size_t i = 0; i < u->n; i++)
        if (strcmp(u->types[i].name, type) == 0)
            return &u->types[i];
    return NULL;
}

static void universe_free(universe_t *u)
{
    for (size_t i = 0; i < u->n; i++)
        cmr_instr_meta_free(&u->types[i]);
}

static cmr_sensor_assignment_t rule(cmr_sensor_kind_t k, const char *cls, const char *method)
{
    cmr_sensor_assignment_t a = {0};
    a.sensor = k;
    a.class_pattern = (char *)cls;
    a.method_pattern = (char *)method;
    return a;
}

static cmr_environment_t env_of(cmr_sensor_assignment_t *a, size_t n)
{
    cmr_environment_t e = {0};
    e.id = "e";
    e.name = "e";
    e.description = "";
    e.assignments.items = a;
    e.assignments.count = n;
    return e;
}

/* Sensor picked for method `name` (-1 when none). */
static int picked(const cmr_instr_meta_t *m, const cmr_instr_decision_t *d, const char *name)
{
    for (size_t i = 0; i < d->n_picks; i++)
        if (strcmp(m->methods[d->picks[i].method].name, name) == 0)
            return (int)d->picks[i].sensor;
    return -1;
}

static int has_missing(const cmr_instr_decision_t *d, const char *type)
{
    for (size_t i = 0; i < d->missing.count; i++)
        if (strcmp(d->missing.items[i], type) == 0)
            return 1;
    return 0;
}

static void test_class_glob_and_methods(void **state)
{
    (void)state;
    universe_t u = {0};
    cmr_instr_meta_t *c = add_type(&u, "com/shop/Cart", "java/lang/Object", NULL, NULL);
    add_method(c, "<init>", "()V", 0x0001, NULL);
    add_method(c, "<clinit>", "()V", 0x0008, NULL);
    add_method(c, "getTotal", "()J", 0x0001, NULL);
    add_method(c, "getItems", "(I)Ljava/util/List;", 0x0001, NULL);
    add_method(c, "helper", "()V", 0x0002 | 0x0008, NULL);
    add_method(c, "abstractOne", "()V", 0x0001 | 0x0400, NULL);
    add_method(c, "nativeOne", "()V", 0x0001 | 0x0100, NULL);
    add_type(&u, "java/lang/Object", NULL, NULL, NULL);

    cmr_sensor_assignment_t a[3];
    a[0] = rule(CMR_SENSOR_TIMER, "com/shop/*", "get*");
    a[0].descriptor_pattern = "()*";
    a[1] = rule(CMR_SENSOR_INVOCATION_SEQUENCE, "com/*", "*");
    a[1].modifiers_required = 0x0001;
    a[2] = rule(CMR_SENSOR_ANCHOR, "com/shop/Cart", "*");
    a[2].modifiers_required = 0x0008;
    a[2].modifiers_excluded = 0x0001;
    cmr_environment_t e = env_of(a, 3);
    cmr_instr_decision_t d;
    assert_int_equal(cmr_instr_decide(&e, c, lookup, &u, &d), 0);
    assert_int_equal(picked(c, &d, "getTotal"), CMR_SENSOR_TIMER);               /* first match wins */
    assert_int_equal(picked(c, &d, "getItems"), CMR_SENSOR_INVOCATION_SEQUENCE); /* descriptor rules out a[0] */
    assert_int_equal(picked(c, &d, "helper"), CMR_SENSOR_ANCHOR);                /* static, not public */
    assert_int_equal(picked(c, &d, "<init>"), -1);                               /* constructors: false */
    assert_int_equal(picked(c, &d, "<clinit>"), -1);
    assert_int_equal(picked(c, &d, "abstractOne"), -1);
    assert_int_equal(picked(c, &d, "nativeOne"), -1);
    assert_int_equal(d.missing.count, 0);
    uint64_t sig1 = cmr_instr_decision_signature(c, &d);
    assert_int_not_equal(sig1, 0);
    cmr_instr_decision_free(&d);

    a[1].constructors = true;
    assert_int_equal(cmr_instr_decide(&e, c, lookup, &u, &d), 0);
    assert_int_equal(picked(c, &d, "<init>"), CMR_SENSOR_INVOCATION_SEQUENCE);
    assert_int_equal(picked(c, &d, "<clinit>"), -1); /* never */
    assert_int_not_equal(cmr_instr_decision_signature(c, &d), sig1);
    cmr_instr_decision_free(&d);

    cmr_sensor_assignment_t none = rule(CMR_SENSOR_TIMER, "org/*", "*");
    cmr_environment_t e2 = env_of(&none, 1);
    assert_int_equal(cmr_instr_decide(&e2, c, lookup, &u, &d), 0);
    assert_int_equal(d.n_picks, 0);
    assert_int_equal(cmr_instr_decision_signature(c, &d), 0);
    cmr_instr_decision_free(&d);
    assert_int_equal(cmr_instr_decide(NULL, c, lookup, &u, &d), 0); /* unknown environment */
    assert_int_equal(d.n_picks, 0);
    cmr_instr_decision_free(&d);
    universe_free(&u);
}

/*  Impl extends Base; Base implements Service; Service extends Marker (interface);
 *  Other implements Unrelated. */
static void build_hierarchy(universe_t *u, int with_base, int with_service)
{
    add_type(u, "java/lang/Object", NULL, NULL, NULL);
    cmr_instr_meta_t *impl = add_type(u, "app/Impl", "app/Base", NULL, NULL);
    add_method(impl, "handle", "(Ljava/lang/String;)V", 0x0001, NULL);
    add_method(impl, "other", "()V", 0x0001, "app/Traced");
    if (with_base) {
        const char *bi[] = {"app/Service", NULL};
        cmr_instr_meta_t *b = add_type(u, "app/Base", "java/lang/Object", bi, NULL);
        add_method(b, "handle", "(Ljava/lang/String;)V", 0x0001, NULL);
    }
    if (with_service) {
        const char *si[] = {"app/Marker", NULL};
        add_type(u, "app/Service", "java/lang/Object", si, NULL);
        add_type(u, "app/Marker", "java/lang/Object", NULL, NULL);
    }
}

static void test_inherited_interfaces(void **state)
{
    (void)state;
    universe_t u = {0};
    build_hierarchy(&u, 1, 1);
    const cmr_instr_meta_t *impl = lookup("app/Impl", &u);
    cmr_sensor_assignment_t a[1];
    cmr_environment_t e = env_of(a, 1);
    cmr_instr_decision_t d;

    a[0] = rule(CMR_SENSOR_TIMER, "*", "handle");
    a[0].interface = "app/Service"; /* through the superclass */
    assert_int_equal(cmr_instr_decide(&e, impl, lookup, &u, &d), 0);
    assert_int_equal(picked(impl, &d, "handle"), CMR_SENSOR_TIMER);
    assert_int_equal(picked(impl, &d, "other"), -1);
    cmr_instr_decision_free(&d);

    a[0].interface = "app/Marker"; /* super-interface of an inherited interface */
    assert_int_equal(cmr_instr_decide(&e, impl, lookup, &u, &d), 0);
    assert_int_equal(picked(impl, &d, "handle"), CMR_SENSOR_TIMER);
    assert_int_equal(d.missing.count, 0);
    cmr_instr_decision_free(&d);

    a[0].interface = "app/Unrelated";
    assert_int_equal(cmr_instr_decide(&e, impl, lookup, &u, &d), 0);
    assert_int_equal(d.n_picks, 0);
    assert_int_equal(d.missing.count, 0); /* everything resolved: a definite no */
    cmr_instr_decision_free(&d);

    a[0].interface = NULL;
    a[0].superclass = "app/Base";
    assert_int_equal(cmr_instr_decide(&e, impl, lookup, &u, &d), 0);
    assert_int_equal(picked(impl, &d, "handle"), CMR_SENSOR_TIMER);
    cmr_instr_decision_free(&d);
    a[0].superclass = "app/Impl"; /* proper superclasses only */
    assert_int_equal(cmr_instr_decide(&e, impl, lookup, &u, &d), 0);
    assert_int_equal(d.n_picks, 0);
    cmr_instr_decision_free(&d);

    /* annotation on the method */
    a[0] = rule(CMR_SENSOR_ANCHOR, "app/*", "*");
    a[0].annotation = "app/Traced";
    assert_int_equal(cmr_instr_decide(&e, impl, lookup, &u, &d), 0);
    assert_int_equal(d.n_picks, 1);
    assert_int_equal(picked(impl, &d, "other"), CMR_SENSOR_ANCHOR);
    cmr_instr_decision_free(&d);
    universe_free(&u);
}

static void test_types_not_seen_yet(void **state)
{
    (void)state;
    cmr_sensor_assignment_t a[1];
    a[0] = rule(CMR_SENSOR_TIMER, "*", "handle");
    a[0].interface = "app/Marker";
    cmr_environment_t e = env_of(a, 1);
    cmr_instr_decision_t d;

    /* Base not sent yet: no decision possible, Base reported missing */
    universe_t u = {0};
    build_hierarchy(&u, 0, 0);
    const cmr_instr_meta_t *impl = lookup("app/Impl", &u);
    assert_int_equal(cmr_instr_decide(&e, impl, lookup, &u, &d), 0);
    assert_int_equal(d.n_picks, 0);
    assert_true(has_missing(&d, "app/Base"));
    cmr_instr_decision_free(&d);
    universe_free(&u);

    /* Base arrived, Service not yet: now Service is the missing one */
    universe_t u2 = {0};
    build_hierarchy(&u2, 1, 0);
    impl = lookup("app/Impl", &u2);
    assert_int_equal(cmr_instr_decide(&e, impl, lookup, &u2, &d), 0);
    assert_int_equal(d.n_picks, 0);
    assert_true(has_missing(&d, "app/Service"));
    assert_false(has_missing(&d, "app/Base"));
    cmr_instr_decision_free(&d);

    /* a match found elsewhere in the hierarchy does not wait for the unknown parts */
    a[0].interface = "app/Service";
    assert_int_equal(cmr_instr_decide(&e, impl, lookup, &u2, &d), 0);
    assert_int_equal(picked(impl, &d, "handle"), CMR_SENSOR_TIMER);
    cmr_instr_decision_free(&d);
    universe_free(&u2);

    /* superclass chain with a gap */
    universe_t u3 = {0};
    build_hierarchy(&u3, 0, 0);
    impl = lookup("app/Impl", &u3);
    a[0].interface = NULL;
    a[0].superclass = "java/lang/Object";
    assert_int_equal(cmr_instr_decide(&e, impl, lookup, &u3, &d), 0);
    assert_int_equal(d.n_picks, 0);
    assert_true(has_missing(&d, "app/Base"));
    cmr_instr_decision_free(&d);
    /* a class-only rule needs no hierarchy: no lookups at all */
    a[0].superclass = NULL;
    u3.lookups = 0;
    assert_int_equal(cmr_instr_decide(&e, impl, lookup, &u3, &d), 0);
    assert_int_equal(d.n_picks, 1);
    assert_int_equal(u3.lookups, 0);
    cmr_instr_decision_free(&d);
    universe_free(&u3);
}

static void test_cyclic_hierarchy_terminates(void **state)
{
    (void)state;
    universe_t u = {0};
    const char *ia[] = {"x/B", NULL}, *ib[] = {"x/A", NULL};
    cmr_instr_meta_t *a = add_type(&u, "x/A", "x/B", ia, NULL);
    add_type(&u, "x/B", "x/A", ib, NULL);
    add_method(a, "m", "()V", 1, NULL);
    cmr_sensor_assignment_t r[1];
    r[0] = rule(CMR_SENSOR_TIMER, "*", "*");
    r[0].interface = "x/Nope";
    r[0].superclass = "x/Nope2";
    cmr_environment_t e = env_of(r, 1);
    cmr_instr_decision_t d;
    assert_int_equal(cmr_instr_decide(&e, a, lookup, &u, &d), 0);
    assert_int_equal(d.n_picks, 0);
    cmr_instr_decision_free(&d);
    universe_free(&u);
}

/* Asking an agent again for all its classes after lost records (instr_resync.h): once per
 * gap; a gap found right after an ask is asked when the wait is over (not forgotten), the
 * wait doubling with each ask; at most CMR_RESYNC_MAX asks per window, then a new window. */
static void test_resync_after_lost_records(void **state)
{
    (void)state;
    int64_t due = -1, t = 1000000;
    uint64_t mark = 0;
    assert_int_equal(cmr_resync_decide(mark, t, t, &due), CMR_RESYNC_ASK); /* never asked */
    mark = cmr_resync_asked(mark, t);
    assert_int_equal(cmr_resync_asks(mark), 1);
    /* the same gap (found before the ask) does not ask again, however late */
    assert_int_equal(cmr_resync_decide(mark, t, t + 5000, &due), CMR_RESYNC_SKIP);
    /* a later gap found 300 ms after the ask: due 1 s after the ask */
    assert_int_equal(cmr_resync_decide(mark, t + 300, t + 300, &due), CMR_RESYNC_LATER);
    assert_int_equal(due, t + CMR_RESYNC_RETRY_MS);
    assert_int_equal(cmr_resync_decide(mark, t + 300, due, &due), CMR_RESYNC_ASK);
    int64_t last = t + CMR_RESYNC_RETRY_MS;
    mark = cmr_resync_asked(mark, last);
    assert_int_equal(cmr_resync_asks(mark), 2);
    /* each further ask of the window waits twice as long as the one before */
    for (unsigned asks = 2; asks < CMR_RESYNC_MAX; asks++) {
        int64_t wait = (int64_t)CMR_RESYNC_RETRY_MS << (asks - 1);
        assert_int_equal(cmr_resync_decide(mark, last + 1, last + 1, &due), CMR_RESYNC_LATER);
        assert_int_equal(due, last + wait);
        assert_int_equal(cmr_resync_decide(mark, last + 1, last + wait - 1, &due), CMR_RESYNC_LATER);
        assert_int_equal(cmr_resync_decide(mark, last + 1, last + wait, &due), CMR_RESYNC_ASK);
        last += wait;
        mark = cmr_resync_asked(mark, last);
        assert_int_equal(cmr_resync_asks(mark), asks + 1);
    }
    /* CMR_RESYNC_MAX asks in the window: a later gap is not asked for, not even later ... */
    assert_int_equal(cmr_resync_decide(mark, last + 1, last + 60000, &due), CMR_RESYNC_SKIP);
    /* ... until the window since the last ask is over: a new window, asked at once */
    int64_t later = last + CMR_RESYNC_WINDOW_MS;
    assert_int_equal(cmr_resync_decide(mark, later - 10, later, &due), CMR_RESYNC_ASK);
    mark = cmr_resync_asked(mark, later);
    assert_int_equal(cmr_resync_asks(mark), 1);
}

static void test_exclusions(void **state)
{
    (void)state;
    const char *never[] = {"cmr/agent/Probe",
                           "cmr/agent/x/Y",
                           "java/lang/Object",
                           "java/lang/Thread",
                           "java/lang/ThreadLocal$ThreadLocalMap",
                           "java/lang/ThreadGroup",
                           "java/lang/invoke/MethodHandle",
                           "java/lang/ref/Reference",
                           "jdk/internal/misc/Unsafe",
                           "sun/misc/Signal",
                           "java/nio/DirectByteBuffer",
                           "com/app/Foo$$Lambda$14/0x0000000800c0b000",
                           NULL};
    for (int i = 0; never[i]; i++)
        if (!cmr_instr_excluded(never[i]))
            fail_msg("%s should be excluded", never[i]);
    const char *fine[] = {"java/util/HashMap", "com/shop/Cart", "java/lang/Objects", "cmr/agentx/Z", NULL};
    for (int i = 0; fine[i]; i++)
        if (cmr_instr_excluded(fine[i]))
            fail_msg("%s should not be excluded", fine[i]);
    universe_t u = {0};
    cmr_instr_meta_t *p = add_type(&u, "cmr/agent/Probe", "java/lang/Object", NULL, NULL);
    add_method(p, "enter", "(J)V", 0x0009, NULL);
    cmr_sensor_assignment_t r[1];
    r[0] = rule(CMR_SENSOR_TIMER, "*", "*");
    cmr_environment_t e = env_of(r, 1);
    cmr_instr_decision_t d;
    assert_int_equal(cmr_instr_decide(&e, p, lookup, &u, &d), 0);
    assert_true(d.excluded);
    assert_int_equal(d.n_picks, 0);
    cmr_instr_decision_free(&d);
    universe_free(&u);
}

/* The JDK's hand-off points get the context probes when the environment records
 * invocation sequences, whatever the user's rules say about that class. */
static void test_handoff_points(void **state)
{
    (void)state;
    universe_t u = {0};
    cmr_instr_meta_t *tpe = add_type(&u, "java/util/concurrent/ThreadPoolExecutor",
                                     "java/util/concurrent/AbstractExecutorService", NULL, NULL);
    add_method(tpe, "execute", "(Ljava/lang/Runnable;)V", 0x0001, NULL);
    add_method(tpe, "beforeExecute", "(Ljava/lang/Thread;Ljava/lang/Runnable;)V", 0x0004, NULL);
    add_method(tpe, "afterExecute", "(Ljava/lang/Runnable;Ljava/lang/Throwable;)V", 0x0004, NULL);
    add_method(tpe, "shutdown", "()V", 0x0001, NULL);
    cmr_sensor_assignment_t seq[] = {rule(CMR_SENSOR_INVOCATION_SEQUENCE, "com/shop/*", "*")};
    cmr_environment_t env = env_of(seq, 1);
    cmr_instr_decision_t d;
    assert_int_equal(cmr_instr_decide(&env, tpe, lookup, &u, &d), 0);
    assert_int_equal(d.n_picks, 3);
    for (size_t i = 0; i < d.n_picks; i++) {
        const char *name = tpe->methods[d.picks[i].method].name;
        if (strcmp(name, "execute") == 0)
            assert_true(d.picks[i].handoff == CMR_HANDOFF_CAPTURE && d.picks[i].arg == 0);
        else if (strcmp(name, "beforeExecute") == 0)
            assert_true(d.picks[i].handoff == CMR_HANDOFF_BEGIN && d.picks[i].arg == 1);
        else
            assert_true(strcmp(name, "afterExecute") == 0 && d.picks[i].handoff == CMR_HANDOFF_END);
    }
    uint64_t with = cmr_instr_decision_signature(tpe, &d);
    cmr_instr_decision_free(&d);

    /* a user rule on the same class: the hand-off probe wins on its methods, the others keep theirs */
    cmr_sensor_assignment_t both[] = {rule(CMR_SENSOR_TIMER, "java/util/concurrent/ThreadPoolExecutor", "*"),
                                      rule(CMR_SENSOR_INVOCATION_SEQUENCE, "com/shop/*", "*")};
    env = env_of(both, 2);
    assert_int_equal(cmr_instr_decide(&env, tpe, lookup, &u, &d), 0);
    assert_int_equal(d.n_picks, 4);
    assert_int_equal(picked(tpe, &d, "shutdown"), CMR_SENSOR_TIMER);
    assert_true(cmr_instr_decision_signature(tpe, &d) != with);
    cmr_instr_decision_free(&d);

    /* timers only: no context to hand over, no hand-off probes */
    cmr_sensor_assignment_t timer_only[] = {rule(CMR_SENSOR_TIMER, "com/shop/*", "*")};
    env = env_of(timer_only, 1);
    assert_int_equal(cmr_instr_decide(&env, tpe, lookup, &u, &d), 0);
    assert_int_equal(d.n_picks, 0);
    cmr_instr_decision_free(&d);
    universe_free(&u);
}

/* The role a decision gives method `name` (`desc` when several share the name), or -1. */
static int role_of(const cmr_instr_meta_t *m, const cmr_instr_decision_t *d, const char *name, const char *desc,
                   uint8_t *arg)
{
    for (size_t i = 0; i < d->n_picks; i++) {
        const cmr_instr_method_t *x = &m->methods[d->picks[i].method];
        if (strcmp(x->name, name) == 0 && (!desc || strcmp(x->desc, desc) == 0)) {
            *arg = d->picks[i].arg;
            return (int)d->picks[i].handoff;
        }
    }
    return -1;
}

/* Jetty's server loops (pool jobs queued while the server starts, running for its life)
 * end the segment their job opened where they begin: ctxDetach at entry, nothing at the
 * exits. EatWhatYouKill's run(), which also runs inside other work, is left alone. */
static void test_handoff_server_loops(void **state)
{
    (void)state;
    universe_t u = {0};
    cmr_instr_meta_t *acceptor =
        add_type(&u, "org/eclipse/jetty/server/AbstractConnector$Acceptor", "java/lang/Object", NULL, NULL);
    add_method(acceptor, "run", "()V", 0x0001, NULL);
    cmr_instr_meta_t *ewyk = add_type(&u, "org/eclipse/jetty/util/thread/strategy/EatWhatYouKill",
                                      "org/eclipse/jetty/util/component/ContainerLifeCycle", NULL, NULL);
    add_method(ewyk, "run", "()V", 0x0001, NULL);
    add_method(ewyk, "produce", "()V", 0x0001, NULL);
    cmr_instr_meta_t *reserved = add_type(&u, "org/eclipse/jetty/util/thread/ReservedThreadExecutor$ReservedThread",
                                          "java/lang/Object", NULL, NULL);
    add_method(reserved, "run", "()V", 0x0001, NULL);
    cmr_sensor_assignment_t seq[] = {rule(CMR_SENSOR_INVOCATION_SEQUENCE, "com/shop/*", "*")};
    cmr_environment_t env = env_of(seq, 1);
    const cmr_instr_meta_t *loops[] = {acceptor, ewyk, reserved};
    const char *loop_method[] = {"run", "produce", "run"};
    for (size_t k = 0; k < 3; k++) {
        cmr_instr_decision_t d;
        assert_int_equal(cmr_instr_decide(&env, loops[k], lookup, &u, &d), 0);
        assert_int_equal(d.n_picks, 1);
        uint8_t arg = 0;
        assert_int_equal(role_of(loops[k], &d, loop_method[k], "()V", &arg), CMR_HANDOFF_DETACH);
        const cf_probe *probe = cmr_instr_pick_probe(&d.picks[0]);
        assert_string_equal(probe->enter.name, "ctxDetach");
        assert_string_equal(probe->enter.desc, "(J)V");
        assert_null(probe->normal_exit.owner);
        assert_null(probe->exc_exit.owner);
        cmr_instr_decision_free(&d);
    }
    universe_free(&u);
}

/* JDBC: whatever the driver, a class that implements java.sql.Statement (through its
 * superclasses and interfaces) gets the SQL probes on its executes, a Connection on its
 * prepares, a PreparedStatement's constructors bind; a class that only has the same method
 * names gets nothing, and one whose hierarchy is unknown waits for it. */
static void test_jdbc_rules(void **state)
{
    (void)state;
    universe_t u = {0};
    const char *stmt_if[] = {"java/sql/Statement", NULL}, *ps_if[] = {"java/sql/PreparedStatement", NULL};
    const char *conn_if[] = {"java/sql/Connection", NULL};
    add_type(&u, "java/sql/Statement", "java/lang/Object", NULL, NULL);
    add_type(&u, "java/sql/PreparedStatement", "java/lang/Object", stmt_if, NULL);
    add_type(&u, "java/sql/Connection", "java/lang/Object", NULL, NULL);
    cmr_instr_meta_t *st = add_type(&u, "org/db/JdbcStatement", "java/lang/Object", stmt_if, NULL);
    add_method(st, "<init>", "()V", 0x0001, NULL);
    add_method(st, "executeQuery", "(Ljava/lang/String;)Ljava/sql/ResultSet;", 0x0001, NULL);
    add_method(st, "execute", "(Ljava/lang/String;I)Z", 0x0001, NULL);
    add_method(st, "executeBatch", "()[I", 0x0001, NULL);
    add_method(st, "executeUpdate", "(Ljava/lang/String;)I", 0x0001, NULL);
    add_method(st, "close", "()V", 0x0001, NULL);
    cmr_instr_meta_t *ps = add_type(&u, "org/db/JdbcPreparedStatement", "org/db/JdbcStatement", ps_if, NULL);
    add_method(ps, "<init>", "(Ljava/lang/String;)V", 0x0001, NULL);
    add_method(ps, "executeQuery", "()Ljava/sql/ResultSet;", 0x0001, NULL);
    add_method(ps, "setInt", "(II)V", 0x0001, NULL);
    add_method(ps, "executeLargeUpdate", "()J", 0x0001, NULL);
    cmr_instr_meta_t *conn = add_type(&u, "org/db/JdbcConnection", "java/lang/Object", conn_if, NULL);
    add_method(conn, "prepareStatement", "(Ljava/lang/String;II)Ljava/sql/PreparedStatement;", 0x0001, NULL);
    add_method(conn, "createStatement", "()Ljava/sql/Statement;", 0x0001, NULL);
    const char *ds_if[] = {"javax/sql/DataSource", NULL};
    add_type(&u, "javax/sql/DataSource", "java/lang/Object", NULL, NULL);
    cmr_instr_meta_t *pool = add_type(&u, "org/db/PoolDataSource", "java/lang/Object", ds_if, NULL);
    add_method(pool, "getConnection", "()Ljava/sql/Connection;", 0x0001, NULL);
    add_method(pool, "getConnection", "(Ljava/lang/String;Ljava/lang/String;)Ljava/sql/Connection;", 0x0001, NULL);
    add_method(pool, "close", "()V", 0x0001, NULL);
    cmr_instr_meta_t *other = add_type(&u, "com/shop/Job", "java/lang/Object", NULL, NULL);
    add_method(other, "execute", "()V", 0x0001, NULL);
    cmr_instr_meta_t *orphan = add_type(&u, "org/db/Proxy", "org/db/NotSent", NULL, NULL);
    add_method(orphan, "executeQuery", "()Ljava/sql/ResultSet;", 0x0001, NULL);

    cmr_sensor_assignment_t seq[] = {rule(CMR_SENSOR_INVOCATION_SEQUENCE, "com/shop/*", "*")};
    cmr_environment_t env = env_of(seq, 1);
    cmr_instr_decision_t d;
    uint8_t arg = 0;
    assert_int_equal(cmr_instr_decide(&env, st, lookup, &u, &d), 0);
    assert_int_equal(d.n_picks, 4);
    assert_int_equal(role_of(st, &d, "executeQuery", NULL, &arg), CMR_HANDOFF_SQL);
    assert_int_equal(arg, 0);
    assert_int_equal(role_of(st, &d, "execute", NULL, &arg), CMR_HANDOFF_SQL);
    assert_int_equal(role_of(st, &d, "executeBatch", NULL, &arg),
                     CMR_HANDOFF_SQL_BATCH); /* the node gets the counts' sum */
    assert_int_equal(arg, CMR_HANDOFF_ARG_THIS);
    assert_int_equal(role_of(st, &d, "executeUpdate", NULL, &arg), CMR_HANDOFF_SQL_UPDATE); /* and the count */
    assert_int_equal(arg, 0);
    assert_int_equal(role_of(st, &d, "<init>", NULL, &arg), -1); /* not a PreparedStatement */
    cmr_instr_decision_free(&d);

    assert_int_equal(cmr_instr_decide(&env, ps, lookup, &u, &d), 0);
    assert_int_equal(d.n_picks, 3);
    assert_int_equal(role_of(ps, &d, "executeQuery", NULL, &arg), CMR_HANDOFF_SQL);
    assert_int_equal(arg, CMR_HANDOFF_ARG_THIS);
    assert_int_equal(role_of(ps, &d, "executeLargeUpdate", NULL, &arg), CMR_HANDOFF_SQL_LARGE_UPDATE);
    assert_int_equal(arg, CMR_HANDOFF_ARG_THIS);
    assert_int_equal(role_of(ps, &d, "<init>", NULL, &arg), CMR_HANDOFF_SQL_BIND);
    assert_int_equal(arg, CMR_HANDOFF_ARG_THIS);
    cmr_instr_decision_free(&d);

    assert_int_equal(cmr_instr_decide(&env, conn, lookup, &u, &d), 0);
    assert_int_equal(d.n_picks, 1);
    assert_int_equal(role_of(conn, &d, "prepareStatement", NULL, &arg), CMR_HANDOFF_SQL_PREPARE);
    assert_int_equal(arg, 0);
    cmr_instr_decision_free(&d);

    /* a pool's wait for a connection: a node (no SQL) */
    assert_int_equal(cmr_instr_decide(&env, pool, lookup, &u, &d), 0);
    assert_int_equal(d.n_picks, 2);
    assert_int_equal(role_of(pool, &d, "getConnection", "()Ljava/sql/Connection;", &arg), CMR_HANDOFF_SQL);
    assert_int_equal(arg, CMR_HANDOFF_ARG_THIS);
    assert_int_equal(role_of(pool, &d, "close", NULL, &arg), -1);
    cmr_instr_decision_free(&d);

    /* the user's rule on a class with an execute(): its own sensor, no SQL probe */
    assert_int_equal(cmr_instr_decide(&env, other, lookup, &u, &d), 0);
    assert_int_equal(d.n_picks, 1);
    assert_int_equal(role_of(other, &d, "execute", NULL, &arg), CMR_HANDOFF_NONE);
    cmr_instr_decision_free(&d);

    /* a hierarchy not sent yet: nothing now, and the decision names the type it waits for */
    assert_int_equal(cmr_instr_decide(&env, orphan, lookup, &u, &d), 0);
    assert_int_equal(d.n_picks, 0);
    assert_int_equal(d.missing.count, 1);
    assert_string_equal(d.missing.items[0], "org/db/NotSent");
    cmr_instr_decision_free(&d);

    /* timers only: no trace for a JDBC node to be in */
    cmr_sensor_assignment_t timers[] = {rule(CMR_SENSOR_TIMER, "org/db/*", "*")};
    env = env_of(timers, 1);
    assert_int_equal(cmr_instr_decide(&env, ps, lookup, &u, &d), 0);
    assert_int_equal(role_of(ps, &d, "executeQuery", NULL, &arg), CMR_HANDOFF_NONE);
    cmr_instr_decision_free(&d);
    universe_free(&u);
}

/* Every hand-off role has a probe whatever its object's source, and the probes are valid
 * descriptions; the HTTP client libraries' calls get theirs (Apache HttpClient 4 and 5:
 * the request is parameter 1 of doExecute; OkHttp: the call itself, the builder of the
 * request it sends, and the exchange whose response gives an async call its status). */
static void test_handoff_probes_and_clients(void **state)
{
    (void)state;
    const uint8_t from[] = {0, 1, CMR_HANDOFF_ARG_THIS};
    for (int role = CMR_HANDOFF_NONE + 1; role < CMR_HANDOFF__COUNT; role++)
        for (size_t k = 0; k < sizeof from; k++) {
            cmr_instr_pick_t p = {0, CMR_SENSOR_INVOCATION_SEQUENCE, (cmr_instr_handoff_t)role, from[k]};
            const cf_probe *probe = cmr_instr_pick_probe(&p);
            cf_error e;
            if (!probe || cf_probe_check(probe, &e) != CF_OK)
                fail_msg("role %d from %u: no valid probe", role, from[k]);
            if (!probe->enter.owner && role != CMR_HANDOFF_HTTP_CALL_RESPONSE) /* exit only, by design */
                fail_msg("role %d from %u: no entry probe", role, from[k]);
            if (role == CMR_HANDOFF_HTTP_CALL_RESPONSE && (probe->enter.owner || !probe->normal_exit.owner))
                fail_msg("the response role is its normal exit alone");
        }
    universe_t u = {0};
    cmr_instr_meta_t *a4 = add_type(&u, "org/apache/http/impl/client/InternalHttpClient",
                                    "org/apache/http/impl/client/CloseableHttpClient", NULL, NULL);
    add_method(a4, "doExecute",
               "(Lorg/apache/http/HttpHost;Lorg/apache/http/HttpRequest;Lorg/apache/http/protocol/HttpContext;)"
               "Lorg/apache/http/client/methods/CloseableHttpResponse;",
               0x0004, NULL);
    add_method(a4, "close", "()V", 0x0001, NULL);
    cmr_instr_meta_t *ok = add_type(&u, "okhttp3/RealCall", "java/lang/Object", NULL, NULL);
    add_method(ok, "execute", "()Lokhttp3/Response;", 0x0001, NULL);
    add_method(ok, "enqueue", "(Lokhttp3/Callback;)V", 0x0001, NULL);
    add_method(ok, "getResponseWithInterceptorChain", "()Lokhttp3/Response;", 0x0000, NULL);
    cmr_sensor_assignment_t seq[] = {rule(CMR_SENSOR_INVOCATION_SEQUENCE, "com/shop/*", "*")};
    cmr_environment_t env = env_of(seq, 1);
    cmr_instr_decision_t d;
    uint8_t arg = 0;
    assert_int_equal(cmr_instr_decide(&env, a4, lookup, &u, &d), 0);
    assert_int_equal(d.n_picks, 1);
    assert_int_equal(role_of(a4, &d, "doExecute", NULL, &arg), CMR_HANDOFF_HTTP_CALL);
    assert_int_equal(arg, 1);
    cmr_instr_decision_free(&d);
    assert_int_equal(cmr_instr_decide(&env, ok, lookup, &u, &d), 0);
    assert_int_equal(d.n_picks, 2);
    assert_int_equal(role_of(ok, &d, "execute", NULL, &arg), CMR_HANDOFF_HTTP_CALL);
    assert_int_equal(arg, CMR_HANDOFF_ARG_THIS);
    assert_int_equal(role_of(ok, &d, "getResponseWithInterceptorChain", NULL, &arg), CMR_HANDOFF_HTTP_CALL_RESPONSE);
    cmr_instr_decision_free(&d);
    universe_free(&u);
}

/* Classes of the exclusion list get their hand-off probes and nothing else, even under a
 * rule that matches everything; a hand-off without a descriptor matches any (doExec's
 * differs between JDKs), and `this` is the object of Thread.start and doExec. */
static void test_handoff_points_in_excluded_classes(void **state)
{
    (void)state;
    universe_t u = {0};
    cmr_instr_meta_t *th = add_type(&u, "java/lang/Thread", "java/lang/Object", NULL, NULL);
    add_method(th, "start", "()V", 0x0001, NULL);
    add_method(th, "run", "()V", 0x0001, NULL);
    add_method(th, "getName", "()Ljava/lang/String;", 0x0011, NULL);
    cmr_instr_meta_t *fjt = add_type(&u, "java/util/concurrent/ForkJoinTask", "java/lang/Object", NULL, NULL);
    add_method(fjt, "<init>", "()V", 0x0001, NULL);
    add_method(fjt, "doExec", "()I", 0x0010, NULL);
    add_method(fjt, "fork", "()Ljava/util/concurrent/ForkJoinTask;", 0x0011, NULL);
    cmr_instr_meta_t *huc =
        add_type(&u, "sun/net/www/protocol/http/HttpURLConnection", "java/net/HttpURLConnection", NULL, NULL);
    add_method(huc, "getInputStream", "()Ljava/io/InputStream;", 0x0001, NULL);
    add_method(huc, "getHeaderField", "(I)Ljava/lang/String;", 0x0001, NULL);
    cmr_instr_meta_t *hc = add_type(&u, "jdk/internal/net/http/HttpClientImpl", "java/net/http/HttpClient", NULL, NULL);
    add_method(hc, "send",
               "(Ljava/net/http/HttpRequest;Ljava/net/http/HttpResponse$BodyHandler;)Ljava/net/http/HttpResponse;",
               0x0001, NULL);
    add_method(
        hc, "sendAsync",
        "(Ljava/net/http/HttpRequest;Ljava/net/http/HttpResponse$BodyHandler;)Ljava/util/concurrent/CompletableFuture;",
        0x0001, NULL);
    add_method(
        hc, "sendAsync",
        "(Ljava/net/http/HttpRequest;Ljava/net/http/HttpResponse$BodyHandler;Ljava/net/http/"
        "HttpResponse$PushPromiseHandler;Ljava/util/concurrent/Executor;)Ljava/util/concurrent/CompletableFuture;",
        0x0002, NULL);
    add_method(hc, "version", "()Ljava/net/http/HttpClient$Version;", 0x0001, NULL);

    cmr_sensor_assignment_t all[] = {rule(CMR_SENSOR_INVOCATION_SEQUENCE, "*", "*")};
    cmr_environment_t env = env_of(all, 1);
    cmr_instr_decision_t d;
    assert_int_equal(cmr_instr_decide(&env, th, lookup, &u, &d), 0);
    assert_true(d.excluded);
    assert_int_equal(d.n_picks, 1);
    assert_string_equal(th->methods[d.picks[0].method].name, "start");
    assert_true(d.picks[0].handoff == CMR_HANDOFF_CAPTURE && d.picks[0].arg == CMR_HANDOFF_ARG_THIS);
    cmr_instr_decision_free(&d);

    assert_int_equal(cmr_instr_decide(&env, huc, lookup, &u, &d), 0);
    assert_true(d.excluded);
    assert_int_equal(d.n_picks, 1);
    assert_true(d.picks[0].handoff == CMR_HANDOFF_HTTP_URL_CALL); /* getInputStream: the exchange, a node */
    const cf_probe *url_call = cmr_instr_pick_probe(&d.picks[0]);
    assert_string_equal(url_call->enter.name, "httpUrlCall");
    assert_int_equal(url_call->enter.args[1].kind, CF_PARG_THIS_INT_FIELD);
    assert_string_equal(url_call->enter.args[1].s, "responseCode");
    cmr_instr_decision_free(&d);

    /* the JDK HttpClient: send and every sendAsync, the request (parameter 0) replaced */
    assert_int_equal(cmr_instr_decide(&env, hc, lookup, &u, &d), 0);
    assert_true(d.excluded);
    assert_int_equal(d.n_picks, 3);
    for (size_t i = 0; i < d.n_picks; i++) {
        const char *name = hc->methods[d.picks[i].method].name;
        assert_int_equal(d.picks[i].handoff,
                         strcmp(name, "send") == 0 ? CMR_HANDOFF_HTTP_SEND : CMR_HANDOFF_HTTP_SEND_ASYNC);
        assert_int_equal(d.picks[i].arg, 0);
        assert_int_equal(cmr_instr_pick_probe(&d.picks[i])->enter.args[0].kind, CF_PARG_ARG_REPLACED);
    }
    cmr_instr_decision_free(&d);

    /* not excluded: the user's rule instruments fork(), the hand-offs take <init> and doExec */
    assert_int_equal(cmr_instr_decide(&env, fjt, lookup, &u, &d), 0);
    assert_false(d.excluded);
    assert_int_equal(d.n_picks, 3);
    for (size_t i = 0; i < d.n_picks; i++) {
        const char *name = fjt->methods[d.picks[i].method].name;
        cmr_instr_handoff_t want = strcmp(name, "<init>") == 0   ? CMR_HANDOFF_CAPTURE
                                   : strcmp(name, "doExec") == 0 ? CMR_HANDOFF_SPAN
                                                                 : CMR_HANDOFF_NONE;
        assert_int_equal(d.picks[i].handoff, want);
    }
    cmr_instr_decision_free(&d);

    /* no invocation sequences: an excluded class gets nothing */
    cmr_sensor_assignment_t timers[] = {rule(CMR_SENSOR_TIMER, "*", "*")};
    env = env_of(timers, 1);
    assert_int_equal(cmr_instr_decide(&env, th, lookup, &u, &d), 0);
    assert_int_equal(d.n_picks, 0);
    cmr_instr_decision_free(&d);
    universe_free(&u);
}

/* java.util.Timer: its sched captures the task; a TimerTask's run, in the application's
 * own class (directly or further down), is the hand-off's span on `this`, in place of the
 * sensor's pick; a run of a class that is no TimerTask is left to the sensor, and a class
 * that extends Object directly costs no lookup. */
static void test_timer_tasks(void **state)
{
    (void)state;
    universe_t u = {0};
    cmr_instr_meta_t *timer = add_type(&u, "java/util/Timer", "java/lang/Object", NULL, NULL);
    add_method(timer, "sched", "(Ljava/util/TimerTask;JJ)V", 0x0002, NULL);
    add_method(timer, "cancel", "()V", 0x0001, NULL);
    add_type(&u, "java/util/TimerTask", "java/lang/Object", NULL, NULL);
    cmr_instr_meta_t *tick = add_type(&u, "com/shop/Tick", "java/util/TimerTask", NULL, NULL);
    add_method(tick, "run", "()V", 0x0001, NULL);
    add_method(tick, "size", "()I", 0x0001, NULL);
    cmr_instr_meta_t *sub = add_type(&u, "com/shop/SubTick", "com/shop/Tick", NULL, NULL);
    add_method(sub, "run", "()V", 0x0001, NULL);
    static const char *const runnable[] = {"java/lang/Runnable", NULL};
    cmr_instr_meta_t *plain = add_type(&u, "com/shop/Job", "java/lang/Object", runnable, NULL);
    add_method(plain, "run", "()V", 0x0001, NULL);

    cmr_sensor_assignment_t all[] = {rule(CMR_SENSOR_INVOCATION_SEQUENCE, "*", "*")};
    cmr_environment_t env = env_of(all, 1);
    cmr_instr_decision_t d;
    assert_int_equal(cmr_instr_decide(&env, timer, lookup, &u, &d), 0);
    assert_int_equal(d.n_picks, 2); /* java/util/ is not excluded: the rule takes cancel too */
    for (size_t i = 0; i < d.n_picks; i++)
        if (strcmp(timer->methods[d.picks[i].method].name, "sched") == 0)
            assert_true(d.picks[i].handoff == CMR_HANDOFF_CAPTURE && d.picks[i].arg == 0);
        else
            assert_true(d.picks[i].handoff == CMR_HANDOFF_NONE);
    cmr_instr_decision_free(&d);

    const cmr_instr_meta_t *tasks[] = {tick, sub};
    for (int t = 0; t < 2; t++) {
        assert_int_equal(cmr_instr_decide(&env, tasks[t], lookup, &u, &d), 0);
        int spans = 0;
        for (size_t i = 0; i < d.n_picks; i++)
            if (strcmp(tasks[t]->methods[d.picks[i].method].name, "run") == 0) {
                assert_true(d.picks[i].handoff == CMR_HANDOFF_SPAN && d.picks[i].arg == CMR_HANDOFF_ARG_THIS);
                spans++;
            } else {
                assert_true(d.picks[i].handoff == CMR_HANDOFF_NONE);
            }
        assert_int_equal(spans, 1);
        assert_int_equal(d.n_picks, t == 0 ? 2 : 1);
        cmr_instr_decision_free(&d);
    }

    int before = u.lookups;
    assert_int_equal(cmr_instr_decide(&env, plain, lookup, &u, &d), 0);
    assert_int_equal(d.n_picks, 1);
    assert_true(d.picks[0].handoff == CMR_HANDOFF_NONE);
    assert_int_equal(u.lookups, before);
    cmr_instr_decision_free(&d);
    universe_free(&u);
}

static void test_bridges_only_when_asked(void **state)
{
    (void)state;
    universe_t u = {0};
    cmr_instr_meta_t *t = add_type(&u, "com/shop/Sum", "java/util/concurrent/RecursiveTask", NULL, NULL);
    add_method(t, "compute", "()Ljava/lang/Long;", 0x0004, NULL);
    add_method(t, "compute", "()Ljava/lang/Object;", 0x1044, NULL); /* protected synthetic bridge */
    cmr_sensor_assignment_t r[] = {rule(CMR_SENSOR_INVOCATION_SEQUENCE, "com/shop/*", "*")};
    cmr_environment_t env = env_of(r, 1);
    cmr_instr_decision_t d;
    assert_int_equal(cmr_instr_decide(&env, t, lookup, &u, &d), 0);
    assert_int_equal(d.n_picks, 1);
    assert_string_equal(t->methods[d.picks[0].method].desc, "()Ljava/lang/Long;");
    cmr_instr_decision_free(&d);
    r[0].modifiers_required = 0x0040;
    assert_int_equal(cmr_instr_decide(&env, t, lookup, &u, &d), 0);
    assert_int_equal(d.n_picks, 1);
    assert_string_equal(t->methods[d.picks[0].method].desc, "()Ljava/lang/Object;");
    cmr_instr_decision_free(&d);
    universe_free(&u);
}

/* Trivial methods (accessors, tiny leaves) are left out and listed, unless an assignment
 * says trivial: true; a later assignment that does may still pick them. */
static void test_trivial_methods(void **state)
{
    (void)state;
    universe_t u = {0};
    cmr_instr_meta_t *t = add_type(&u, "org/h2/Value", "java/lang/Object", NULL, NULL);
    add_method(t, "getType", "()I", 0x0001, NULL);
    t->methods[0].trivial = CF_TRIVIAL_GETTER;
    add_method(t, "compare", "(II)I", 0x0009, NULL);
    t->methods[1].trivial = CF_TRIVIAL_LEAF;
    add_method(t, "convertTo", "(I)Lorg/h2/Value;", 0x0001, NULL);
    cmr_sensor_assignment_t r[] = {rule(CMR_SENSOR_INVOCATION_SEQUENCE, "org/h2/*", "*"),
                                   rule(CMR_SENSOR_TIMER, "org/h2/*", "compare")};
    cmr_environment_t env = env_of(r, 1);
    cmr_instr_decision_t d;
    assert_int_equal(cmr_instr_decide(&env, t, lookup, &u, &d), 0);
    assert_int_equal(d.n_picks, 1);
    assert_int_equal(picked(t, &d, "convertTo"), CMR_SENSOR_INVOCATION_SEQUENCE);
    assert_int_equal(d.n_trivial, 2);
    assert_int_equal(d.trivial[0], 0);
    assert_int_equal(d.trivial[1], 1);
    cmr_instr_decision_free(&d);
    /* a later assignment that asks for trivial methods picks them */
    r[1].trivial = true;
    env = env_of(r, 2);
    assert_int_equal(cmr_instr_decide(&env, t, lookup, &u, &d), 0);
    assert_int_equal(d.n_picks, 2);
    assert_int_equal(picked(t, &d, "compare"), CMR_SENSOR_TIMER);
    assert_int_equal(picked(t, &d, "getType"), -1);
    assert_int_equal(d.n_trivial, 1);
    cmr_instr_decision_free(&d);
    /* trivial: true on the broad assignment: everything, nothing listed */
    r[0].trivial = true;
    assert_int_equal(cmr_instr_decide(&env, t, lookup, &u, &d), 0);
    assert_int_equal(d.n_picks, 3);
    assert_int_equal(d.n_trivial, 0);
    assert_null(d.trivial);
    cmr_instr_decision_free(&d);
    /* a method no assignment names is not "left out as trivial" */
    cmr_sensor_assignment_t only[] = {rule(CMR_SENSOR_TIMER, "org/h2/*", "convert*")};
    env = env_of(only, 1);
    assert_int_equal(cmr_instr_decide(&env, t, lookup, &u, &d), 0);
    assert_int_equal(d.n_picks, 1);
    assert_int_equal(d.n_trivial, 0);
    cmr_instr_decision_free(&d);
    universe_free(&u);
}

/* The overhead budget: nothing while under it; over it, the methods whose probes cost more
 * than they measure first (most expensive first), then those they distort by > 10 %. */
static void test_overhead_budget(void **state)
{
    (void)state;
    /* 1 s of CPU; probes 40 ns per call */
    cmr_budget_method_t m[] = {
        {1, 1000000, 5000000}, /* getter-like: 5 ns self, 1 M calls: 4 % of CPU */
        {2, 500000, 10000000}, /* 20 ns self, 0.5 M calls: 2 % */
        {3, 200000, 40000000}, /* 200 ns self: distorted by 20 %: 0.8 % */
        {4, 1000, 1000000000}, /* 1 ms self: never removed */
        {5, 10000, 100000},    /* 10 ns self, 10 k calls: 0.04 % */
    };
    cmr_budget_input_t in = {.methods = m, .n = 5, .cpu_ns = 1000000000, .probe_ns = 40.0, .budget_pct = 3.0};
    cmr_budget_result_t r;
    assert_int_equal(cmr_budget_select(&in, &r), 0);
    assert_true(r.before_pct > 6.8 && r.before_pct < 6.9);
    assert_int_equal(r.n_removed, 1); /* 6.84 % -> 2.84 % */
    assert_int_equal(r.removed[0].method_id, 1);
    assert_true(r.after_pct > 2.8 && r.after_pct < 2.9);
    assert_false(r.over_budget);
    assert_non_null(strstr(r.removed[0].reason, "probes 40 ns per call > self time 5.0 ns"));
    cmr_budget_result_free(&r);
    /* a tighter budget: every cheaper-than-probes method (by cost), then the distorted one */
    in.budget_pct = 0.5;
    assert_int_equal(cmr_budget_select(&in, &r), 0);
    assert_int_equal(r.n_removed, 4);
    assert_int_equal(r.removed[1].method_id, 2);
    assert_int_equal(r.removed[2].method_id, 5);
    assert_int_equal(r.removed[3].method_id, 3);
    assert_non_null(strstr(r.removed[3].reason, "1/10"));
    assert_false(r.over_budget);
    cmr_budget_result_free(&r);
    /* below what the method that measures 1 ms costs: it stays, the budget is not reached */
    in.budget_pct = 0.001;
    assert_int_equal(cmr_budget_select(&in, &r), 0);
    assert_int_equal(r.n_removed, 4);
    assert_true(r.over_budget);
    cmr_budget_result_free(&r);
    /* under the budget: nothing */
    in.budget_pct = 10;
    assert_int_equal(cmr_budget_select(&in, &r), 0);
    assert_int_equal(r.n_removed, 0);
    assert_null(r.removed);
    /* the JVM dropped as many calls as it recorded: each counts twice (13.7 %), so the
     * first two go at once, and the reason says why the figures are above the counts */
    in.budget_pct = 3.0;
    in.scale = 2.0;
    assert_int_equal(cmr_budget_select(&in, &r), 0);
    assert_true(r.before_pct > 13.6 && r.before_pct < 13.7);
    assert_int_equal(r.n_removed, 2); /* 13.68 % -> 5.68 % -> 1.68 % */
    assert_int_equal(r.removed[0].method_id, 1);
    assert_int_equal(r.removed[1].method_id, 2);
    assert_int_equal(r.removed[0].calls, 2000000);
    assert_non_null(strstr(r.removed[0].reason, "x2.00 for those dropped"));
    cmr_budget_result_free(&r);
    /* method 1 was removed already (a window from before its Redefine landed): it is not
     * counted, so nothing more goes (2.84 % is within 3 %) */
    in.scale = 0;
    uint64_t gone[] = {1};
    in.removed = gone;
    in.n_removed = 1;
    assert_int_equal(cmr_budget_select(&in, &r), 0);
    assert_true(r.before_pct > 2.8 && r.before_pct < 2.9);
    assert_int_equal(r.n_removed, 0);
    assert_null(r.removed);
    in.cpu_ns = 0;
    assert_int_equal(cmr_budget_select(&in, &r), -1);
}

/* A window of MetricBatches: batches without CPU time are left out, self time falls back
 * on the whole time for agents that do not send it, and the window feeds the choice. */
static void test_budget_window(void **state)
{
    (void)state;
    cmr_method_metric_t a[] = {{.method_id = 7, .count = 1000000, .sum_ns = 9000000, .self_ns = 6000000},
                               {.method_id = 8, .count = 10, .sum_ns = 900000000}};
    cmr_metric_batch_t mb = {.agent_id = 1, .cpu_ns = 0};
    mb.metrics.items = a;
    mb.metrics.count = 2;
    cmr_budget_window_t w = {0};
    assert_int_equal(cmr_budget_window_add(&w, &mb), 0); /* first batch: no CPU time */
    assert_int_equal(w.n, 0);
    mb.cpu_ns = 500000000;
    assert_int_equal(cmr_budget_window_add(&w, &mb), 0);
    assert_int_equal(cmr_budget_window_add(&w, &mb), 0);
    assert_int_equal(w.intervals, 2);
    assert_int_equal(w.n, 2);
    assert_int_equal(w.cpu_ns, 1000000000);
    assert_int_equal(w.methods[0].calls, 2000000);
    assert_int_equal(w.methods[0].self_ns, 12000000);
    assert_int_equal(w.methods[1].self_ns, 1800000000); /* no self_ns: the whole time */
    assert_int_equal(w.calls_recorded, 2000020);
    assert_true(cmr_budget_window_scale(&w) == 1.0); /* nothing dropped */
    cmr_budget_result_t r;
    cmr_budget_input_t in = cmr_budget_window_input(&w, 50.0, 0);
    assert_int_equal(cmr_budget_select(&in, &r), 0);
    assert_true(r.before_pct > 10.0 && r.before_pct < 10.1); /* 2 M calls x 50 ns of 1 s */
    assert_int_equal(r.n_removed, 1);
    assert_int_equal(r.removed[0].method_id, 7); /* 6 ns of its own, 50 ns of probes */
    assert_false(r.over_budget);
    cmr_budget_result_free(&r);
    cmr_budget_window_reset(&w);
    assert_int_equal(w.n, 0);
    mb.calls_dropped = 3000030; /* three calls ran for each one recorded */
    assert_int_equal(cmr_budget_window_add(&w, &mb), 0);
    assert_int_equal(w.methods[0].calls, 1000000);
    assert_true(cmr_budget_window_scale(&w) > 3.999 && cmr_budget_window_scale(&w) < 4.001);
    in = cmr_budget_window_input(&w, 50.0, 0);
    assert_int_equal(cmr_budget_select(&in, &r), 0);
    assert_true(r.before_pct > 40.0 && r.before_pct < 40.1); /* 4 x 1 M calls x 50 ns of 0.5 s */
    cmr_budget_result_free(&r);
    mb.calls_dropped = INT64_MAX / 4; /* an absurd count is bounded */
    assert_int_equal(cmr_budget_window_add(&w, &mb), 0);
    assert_true(cmr_budget_window_scale(&w) == CMR_BUDGET_MAX_SCALE);
    mb.calls_dropped = INT64_MAX; /* and sums saturate instead of overflowing */
    assert_int_equal(cmr_budget_window_add(&w, &mb), 0);
    assert_true(w.calls_dropped == INT64_MAX);
    cmr_budget_window_free(&w);
}

/* The probes' cost is the JVM's own when it sent one (MetricBatch.probe_ps), bounded, kept
 * across windows; the setting otherwise. The same calls judged with each. */
static void test_budget_probe_cost(void **state)
{
    (void)state;
    cmr_method_metric_t a[] = {{.method_id = 9, .count = 1000000, .sum_ns = 80000000, .self_ns = 80000000}};
    cmr_metric_batch_t mb = {.agent_id = 1, .cpu_ns = 2000000000};
    mb.metrics.items = a;
    mb.metrics.count = 1;
    cmr_budget_window_t w = {0};
    assert_int_equal(cmr_budget_window_add(&w, &mb), 0);
    assert_true(cmr_budget_window_probe_ns(&w, 10.0) == 10.0); /* nothing measured: the setting */
    cmr_budget_result_t r;
    cmr_budget_input_t in = cmr_budget_window_input(&w, 10.0, 0);
    assert_int_equal(cmr_budget_select(&in, &r), 0);
    assert_true(r.before_pct > 0.49 && r.before_pct < 0.51); /* 1 M x 10 ns of 2 s */
    assert_int_equal(r.n_removed, 0);
    cmr_budget_result_free(&r);

    cmr_budget_window_reset(&w);
    mb.probe_ps = 100000; /* this JVM measured 100 ns */
    mb.cpu_ns = 0;        /* a batch without CPU time still tells it */
    assert_int_equal(cmr_budget_window_add(&w, &mb), 0);
    assert_int_equal(w.n, 0);
    assert_int_equal(w.probe_ps, 100000);
    mb.cpu_ns = 2000000000;
    mb.probe_ps = 0; /* a batch without it keeps the last one */
    assert_int_equal(cmr_budget_window_add(&w, &mb), 0);
    in = cmr_budget_window_input(&w, 10.0, 0);
    assert_true(in.probe_ns == 100.0);
    assert_int_equal(cmr_budget_select(&in, &r), 0);
    assert_true(r.before_pct > 4.99 && r.before_pct < 5.01); /* 1 M x 100 ns of 2 s */
    assert_int_equal(r.n_removed, 1);
    assert_int_equal(r.removed[0].method_id, 9); /* 80 ns of its own, 100 ns of probes */
    assert_non_null(strstr(r.removed[0].reason, "probes 100 ns per call > self time 80.0 ns"));
    cmr_budget_result_free(&r);
    cmr_budget_window_reset(&w);
    assert_int_equal(w.probe_ps, 100000); /* the JVM's, not the window's */

    mb.probe_ps = 1; /* figures off a topic are bounded */
    assert_int_equal(cmr_budget_window_add(&w, &mb), 0);
    assert_true(cmr_budget_window_probe_ns(&w, 10.0) == CMR_BUDGET_MIN_PROBE_PS / 1000.0);
    mb.probe_ps = INT64_MAX;
    assert_int_equal(cmr_budget_window_add(&w, &mb), 0);
    assert_true(cmr_budget_window_probe_ns(&w, 10.0) == CMR_BUDGET_MAX_PROBE_PS / 1000.0);
    mb.probe_ps = -5; /* nonsense is ignored */
    assert_int_equal(cmr_budget_window_add(&w, &mb), 0);
    assert_int_equal(w.probe_ps, CMR_BUDGET_MAX_PROBE_PS);
    cmr_budget_window_free(&w);
}

/* The agent's own work (its publisher thread's CPU, MetricBatch.agent_cpu_ns) counts per
 * recorded call, on top of the probes: not scaled by the dropped calls, which it never saw. */
static void test_budget_agent_cost(void **state)
{
    (void)state;
    cmr_method_metric_t a[] = {{.method_id = 11, .count = 1000000, .sum_ns = 120000000, .self_ns = 120000000}};
    cmr_metric_batch_t mb = {.agent_id = 1, .cpu_ns = 2000000000, .probe_ps = 100000, .agent_cpu_ns = 40000000};
    mb.metrics.items = a;
    mb.metrics.count = 1;
    cmr_budget_window_t w = {0};
    assert_int_equal(cmr_budget_window_add(&w, &mb), 0);
    assert_true(cmr_budget_window_agent_ns(&w) == 40.0); /* 40 ms over 1 M recorded calls */
    cmr_budget_input_t in = cmr_budget_window_input(&w, 10.0, 0);
    assert_true(in.agent_ns == 40.0);
    cmr_budget_result_t r;
    assert_int_equal(cmr_budget_select(&in, &r), 0);
    assert_true(r.before_pct > 6.99 && r.before_pct < 7.01); /* 1 M x (100 + 40) ns of 2 s */
    assert_int_equal(r.n_removed, 1); /* 120 ns of its own: less than its probes and the agent's work */
    assert_non_null(strstr(r.removed[0].reason, "probes 100 ns + agent 40 ns per call > self time 120.0 ns"));
    cmr_budget_result_free(&r);
    in.agent_ns = 0; /* without the agent's work its probes cost less than it measures: second pass */
    assert_int_equal(cmr_budget_select(&in, &r), 0);
    assert_true(r.removed[0].method_id == 11 && strstr(r.removed[0].reason, "1/10 of self time"));
    cmr_budget_result_free(&r);
    cmr_budget_window_reset(&w);
    mb.calls_dropped = 3000000; /* the dropped calls scale the probes, not the agent's work */
    assert_int_equal(cmr_budget_window_add(&w, &mb), 0);
    in = cmr_budget_window_input(&w, 10.0, 0);
    assert_int_equal(cmr_budget_select(&in, &r), 0);
    assert_true(r.before_pct > 21.99 && r.before_pct < 22.01); /* 1 M x (4 x 100 + 40) ns of 2 s */
    cmr_budget_result_free(&r);
    cmr_budget_window_reset(&w);
    mb.agent_cpu_ns = INT64_MAX; /* the agent's work is part of the process's CPU: bounded by it */
    assert_int_equal(cmr_budget_window_add(&w, &mb), 0);
    assert_int_equal(w.agent_cpu_ns, mb.cpu_ns);
    cmr_budget_window_reset(&w);
    /* a quiet JVM: 200 ms of its publisher's own work over 1,000 calls (10 % of its CPU if
     * it were theirs) is no cost per call, since removing them would not lower it: the
     * probes alone count, and nothing is removed */
    a[0].count = 1000;
    a[0].sum_ns = a[0].self_ns = 120000;
    mb.calls_dropped = 0;
    mb.agent_cpu_ns = 200000000;
    assert_int_equal(cmr_budget_window_add(&w, &mb), 0);
    assert_true(cmr_budget_window_agent_ns(&w) == 0);
    in = cmr_budget_window_input(&w, 10.0, 0);
    assert_int_equal(cmr_budget_select(&in, &r), 0);
    assert_int_equal(r.n_removed, 0);
    cmr_budget_result_free(&r);
    cmr_budget_window_free(&w);
}

/* Dropping removed methods from a decision keeps the hand-off points. */
static void test_decision_drop(void **state)
{
    (void)state;
    universe_t u = {0};
    cmr_instr_meta_t *t = add_type(&u, "org/h2/Row", "java/lang/Object", NULL, NULL);
    add_method(t, "get", "(I)Lorg/h2/Value;", 0x0001, NULL);
    add_method(t, "size", "()I", 0x0001, NULL);
    cmr_sensor_assignment_t r[] = {rule(CMR_SENSOR_INVOCATION_SEQUENCE, "org/h2/*", "*")};
    cmr_environment_t env = env_of(r, 1);
    cmr_instr_decision_t d;
    assert_int_equal(cmr_instr_decide(&env, t, lookup, &u, &d), 0);
    assert_int_equal(d.n_picks, 2);
    uint64_t ids[2] = {cf_method_id_of((cf_str){"org/h2/Row", 10}, (cf_str){"size", 4}, (cf_str){"()I", 3}), 0};
    ids[1] = ids[0] + 1; /* sorted, one unknown id */
    assert_int_equal(cmr_instr_decision_drop(t, &d, ids, 2), 1);
    assert_int_equal(d.n_picks, 1);
    assert_int_equal(picked(t, &d, "get"), CMR_SENSOR_INVOCATION_SEQUENCE);
    d.picks[0].handoff = CMR_HANDOFF_CAPTURE; /* a hand-off point is never dropped */
    ids[0] = cf_method_id_of((cf_str){"org/h2/Row", 10}, (cf_str){"get", 3}, (cf_str){"(I)Lorg/h2/Value;", 17});
    ids[1] = ids[0];
    assert_int_equal(cmr_instr_decision_drop(t, &d, ids, 1), 0);
    cmr_instr_decision_free(&d);
    universe_free(&u);
}

static void test_meta_encoding(void **state)
{
    (void)state;
    universe_t u = {0};
    build_hierarchy(&u, 1, 1);
    cmr_instr_meta_t *impl = &u.types[1];
    impl->source_file = strdup("Impl.java");
    impl->methods[0].first_line = 42;
    impl->methods[1].trivial = CF_TRIVIAL_SETTER;
    cmr_buf_t b = {0};
    assert_int_equal(cmr_instr_meta_encode(impl, &b), 0);
    cmr_instr_meta_t back;
    assert_int_equal(cmr_instr_meta_decode(b.data, b.len, &back), 0);
    assert_string_equal(back.name, "app/Impl");
    assert_string_equal(back.super_name, "app/Base");
    assert_string_equal(back.source_file, "Impl.java");
    assert_int_equal(back.n_methods, 2);
    assert_int_equal(back.methods[0].first_line, 42);
    assert_string_equal(back.methods[1].annotations.items[0], "app/Traced");
    assert_int_equal(back.methods[0].trivial, CF_TRIVIAL_NO);
    assert_int_equal(back.methods[1].trivial, CF_TRIVIAL_SETTER);
    cmr_instr_meta_free(&back);
    /* every truncation is rejected, never read past the end */
    for (size_t n = 0; n < b.len; n++) {
        uint8_t *copy = malloc(n ? n : 1);
        memcpy(copy, b.data, n);
        assert_int_equal(cmr_instr_meta_decode(copy, n, &back), -1);
        free(copy);
    }
    cmr_buf_free(&b);
    universe_free(&u);
}

static void test_cache(void **state)
{
    (void)state;
    char dir[] = "/tmp/instr-cache-XXXXXX", err[256];
    assert_non_null(mkdtemp(dir));
    cmr_instr_cache_t *c = cmr_instr_cache_open(dir, 100, 0, err, sizeof err);
    assert_non_null(c);
    char big[60];
    memset(big, 'x', sizeof big);
    /* pending writes are visible before commit, gone after rollback */
    assert_int_equal(cmr_instr_cache_put_bytes(c, 1, big, sizeof big, 0), 0);
    cmr_buf_t b = {0};
    assert_int_equal(cmr_instr_cache_bytes(c, 1, &b), 1);
    cmr_instr_cache_rollback(c);
    assert_int_equal(cmr_instr_cache_bytes(c, 1, &b), 0);
    assert_int_equal(cmr_instr_cache_unpinned_bytes(c), 0);
    /* eviction: unpinned bytes beyond 100 go, oldest first; pinned ones stay */
    cmr_instr_cache_put_bytes(c, 1, big, sizeof big, 0);
    assert_int_equal(cmr_instr_cache_commit(c, err, sizeof err), 0);
    cmr_instr_cache_put_bytes(c, 2, big, sizeof big, 1);
    assert_int_equal(cmr_instr_cache_commit(c, err, sizeof err), 0);
    cmr_instr_cache_put_bytes(c, 3, big, sizeof big, 0);
    assert_int_equal(cmr_instr_cache_commit(c, err, sizeof err), 0);
    assert_int_equal(cmr_instr_cache_unpinned_bytes(c), 60); /* 120 > 100: hash 1 evicted */
    cmr_instr_cache_put_bytes(c, 4, big, 10, 0);
    assert_int_equal(cmr_instr_cache_commit(c, err, sizeof err), 0);
    assert_int_equal(cmr_instr_cache_bytes(c, 1, &b), 0);
    assert_int_equal(cmr_instr_cache_bytes(c, 2, &b), 1);
    assert_int_equal(cmr_instr_cache_bytes(c, 3, &b), 1);
    assert_int_equal(cmr_instr_cache_bytes(c, 4, &b), 1);
    cmr_buf_free(&b);
    /* records survive a reopen */
    cmr_instr_class_rec_t r = {7, 9, 3, 1, "inst", "env"}, r2;
    cmr_instr_cache_put_class(c, 5, 2, "a/B", &r);
    cmr_instr_agent_rec_t ar = {4, 3, "inst", "env"}, ar2;
    cmr_instr_cache_put_agent(c, 5, &ar);
    cmr_instr_cache_put_waiting(c, 5, "a/Base", 2, "a/B");
    assert_int_equal(cmr_instr_cache_commit(c, err, sizeof err), 0);
    cmr_instr_cache_close(c);
    c = cmr_instr_cache_open(dir, 100, 0, err, sizeof err);
    assert_non_null(c);
    assert_int_equal(cmr_instr_cache_unpinned_bytes(c), 70);
    assert_int_equal(cmr_instr_cache_class(c, 5, 2, "a/B", &r2), 1);
    assert_int_equal(r2.hash, 7);
    assert_int_equal(r2.signature, 9);
    assert_int_equal(r2.revision, 3);
    assert_int_equal(r2.resend, 1);
    assert_string_equal(r2.env_id, "env");
    assert_int_equal(cmr_instr_cache_agent(c, 5, &ar2), 1);
    assert_int_equal(ar2.partition, 3);
    assert_int_equal(ar2.revision, 4);
    assert_string_equal(ar2.instance_id, "inst");
    cmr_instr_cache_close(c);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* Long class names: keys are exact, so two names that share their first kilobytes are
 * two classes (the cache once cut keys at 1 KB, and read one back with the other's hash). */
typedef struct seen_names {
    char *names[4];
    uint64_t hashes[4];
    size_t n;
} seen_names_t;

static int collect_class(int64_t loader, const char *name, const cmr_instr_class_rec_t *r, void *ud)
{
    seen_names_t *s = ud;
    assert_int_equal(loader, 2);
    assert_true(s->n < 4);
    s->names[s->n] = strdup(name);
    s->hashes[s->n++] = r->hash;
    return 0;
}

static int collect_waiting(int64_t loader, const char *name, void *ud)
{
    seen_names_t *s = ud;
    assert_int_equal(loader, 2);
    assert_true(s->n < 4);
    s->names[s->n++] = strdup(name);
    return 0;
}

static void seen_free(seen_names_t *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->names[i]);
    memset(s, 0, sizeof *s);
}

static void test_cache_long_names(void **state)
{
    (void)state;
    char dir[] = "/tmp/instr-cache-XXXXXX", err[256];
    assert_non_null(mkdtemp(dir));
    cmr_instr_cache_t *c = cmr_instr_cache_open(dir, 100, 0, err, sizeof err);
    assert_non_null(c);
    /* two names of 3000 bytes that differ only in their last character */
    size_t len = 3000;
    char *a = malloc(len + 1), *b = malloc(len + 1), *base = malloc(len + 1);
    memset(a, 'p', len);
    a[len] = '\0';
    memcpy(b, a, len + 1);
    memcpy(base, a, len + 1);
    a[len - 1] = 'A';
    b[len - 1] = 'B';
    base[len - 1] = 'Z';
    cmr_instr_class_rec_t ra = {11, 0, 1, 0, "inst", "env"}, rb = {22, 0, 1, 0, "inst", "env"}, r;
    cmr_instr_cache_put_class(c, 5, 2, a, &ra);
    cmr_instr_cache_put_class(c, 5, 2, b, &rb);
    cmr_instr_cache_put_type(c, 5, a, 11);
    cmr_instr_cache_put_type(c, 5, b, 22);
    cmr_instr_cache_put_waiting(c, 5, base, 2, a);
    cmr_instr_cache_put_waiting(c, 5, base, 2, b);
    assert_int_equal(cmr_instr_cache_commit(c, err, sizeof err), 0);
    for (int pass = 0; pass < 2; pass++) {
        assert_int_equal(cmr_instr_cache_class(c, 5, 2, a, &r), 1);
        assert_int_equal(r.hash, 11);
        assert_int_equal(cmr_instr_cache_class(c, 5, 2, b, &r), 1);
        assert_int_equal(r.hash, 22);
        uint64_t h = 0;
        assert_int_equal(cmr_instr_cache_type(c, 5, a, &h), 1);
        assert_int_equal(h, 11);
        assert_int_equal(cmr_instr_cache_type(c, 5, b, &h), 1);
        assert_int_equal(h, 22);
        /* iterations give back the whole names */
        seen_names_t s = {0};
        assert_int_equal(cmr_instr_cache_each_class(c, 5, collect_class, &s), 0);
        assert_int_equal(s.n, 2);
        assert_string_equal(s.names[0], a);
        assert_int_equal(s.hashes[0], 11);
        assert_string_equal(s.names[1], b);
        assert_int_equal(s.hashes[1], 22);
        seen_free(&s);
        assert_int_equal(cmr_instr_cache_each_waiting(c, 5, base, collect_waiting, &s), 0);
        assert_int_equal(s.n, 2);
        assert_string_equal(s.names[0], a);
        assert_string_equal(s.names[1], b);
        seen_free(&s);
        /* a waiting entry of one long name is deleted alone */
        if (pass == 0) {
            cmr_instr_cache_del_waiting(c, 5, base, 2, a);
            assert_int_equal(cmr_instr_cache_each_waiting(c, 5, base, collect_waiting, &s), 0);
            assert_int_equal(s.n, 1);
            assert_string_equal(s.names[0], b);
            seen_free(&s);
            cmr_instr_cache_rollback(c);
            cmr_instr_cache_close(c);
            c = cmr_instr_cache_open(dir, 100, 0, err, sizeof err);
            assert_non_null(c);
        }
    }
    cmr_instr_cache_close(c);
    /* ids that do not fit a record are refused, never cut */
    assert_int_equal(cmr_instr_class_rec_ids(&r, "inst2", "env2"), 0);
    assert_string_equal(r.env_id, "env2");
    assert_int_equal(cmr_instr_class_rec_ids(&r, "inst3", a), -1);
    assert_string_equal(r.instance_id, "inst2");
    cmr_instr_agent_rec_t ar;
    assert_int_equal(cmr_instr_agent_rec_ids(&ar, a, "env"), -1);
    free(a);
    free(b);
    free(base);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_class_glob_and_methods),
        cmocka_unit_test(test_inherited_interfaces),
        cmocka_unit_test(test_types_not_seen_yet),
        cmocka_unit_test(test_cyclic_hierarchy_terminates),
        cmocka_unit_test(test_exclusions),
        cmocka_unit_test(test_resync_after_lost_records),
        cmocka_unit_test(test_handoff_points),
        cmocka_unit_test(test_handoff_server_loops),
        cmocka_unit_test(test_handoff_points_in_excluded_classes),
        cmocka_unit_test(test_timer_tasks),
        cmocka_unit_test(test_jdbc_rules),
        cmocka_unit_test(test_handoff_probes_and_clients),
        cmocka_unit_test(test_bridges_only_when_asked),
        cmocka_unit_test(test_trivial_methods),
        cmocka_unit_test(test_overhead_budget),
        cmocka_unit_test(test_decision_drop),
        cmocka_unit_test(test_budget_window),
        cmocka_unit_test(test_budget_probe_cost),
        cmocka_unit_test(test_budget_agent_cost),
        cmocka_unit_test(test_meta_encoding),
        cmocka_unit_test(test_cache),
        cmocka_unit_test(test_cache_long_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

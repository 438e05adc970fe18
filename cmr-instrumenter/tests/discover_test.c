/*
 * discover_test.c - the Discover step (instr_discover.h) without a JVM: a fake class source
 * over the .class files compiled at build time from tests/java/disc (argv[1]), listing only
 * the classes a test says were "loaded". Checks each kind of callee (static, private,
 * inherited, interface with one of two implementations loaded, abstract class overrides,
 * lambda, method reference, recursion, JDK, excluded package, malformed bytes), depth limits,
 * max_nodes, determinism, method ids, overload roots, and a discovery over a real jar from
 * /usr/share/java (skipped when unzip or the jar is missing).
 *
 * Ownership: each test frees its trees; the fake source owns nothing but a file list.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cmr/classfile.h"
#include "cmr/instr_discover.h"
#include "cmr/instr_meta.h"
#include "cmr/log.h"

static const char *classes_dir;

/* --- the fake source ------------------------------------------------------------------- */

typedef struct fake {
    const char *dir;
    const char *const *loaded; /* internal names */
    size_t nloaded;
    const char *broken;  /* served as malformed bytes */
    const char *failing; /* the source fails (-1) for this class */
    const char *mutate;  /* served with bytes flipped (seed below) */
    uint32_t seed;
    int lists; /* each_class calls */
} fake_t;

static bool is_loaded(const fake_t *f, const char *name)
{
    for (size_t i = 0; i < f->nloaded; i++)
        if (strcmp(f->loaded[i], name) == 0)
            return true;
    return false;
}

static int read_file(const char *path, cmr_buf_t *out)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return 0;
    char tmp[8192];
    size_t n;
    while ((n = fread(tmp, 1, sizeof tmp, fp)) > 0)
        cmr_buf_put(out, tmp, n);
    fclose(fp);
    return cmr_buf_ok(out) ? 1 : -1;
}

static int fake_bytes(void *ud, const char *name, cmr_buf_t *out)
{
    fake_t *f = ud;
    if (!is_loaded(f, name))
        return 0;
    if (f->failing && strcmp(name, f->failing) == 0)
        return -1;
    if (f->broken && strcmp(name, f->broken) == 0) {
        static const uint8_t junk[] = {0xCA, 0xFE, 0xBA, 0xBE, 0, 0, 0, 55, 0xFF, 0xFF, 7};
        cmr_buf_put(out, junk, sizeof junk);
        return 1;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.class", f->dir, name);
    int r = read_file(path, out);
    if (r == 1 && f->mutate && strcmp(name, f->mutate) == 0 && out->len > 10) {
        uint32_t x = f->seed * 2654435761u + 1;
        for (int k = 0; k < 1 + (int)(f->seed % 4); k++) { /* a few bytes past the magic */
            x = x * 1103515245u + 12345u;
            size_t at = 8 + (x >> 8) % (out->len - 8);
            out->data[at] ^= (uint8_t)(1u << (x % 8)) | (uint8_t)(f->seed & 0x10 ? 0xFF : 0);
        }
    }
    return r;
}

static int fake_each(void *ud, int (*fn)(void *, const char *, const char *, const char *const *, size_t), void *fnud)
{
    fake_t *f = ud;
    f->lists++;
    for (size_t i = 0; i < f->nloaded; i++) {
        cmr_buf_t b = {0};
        if (fake_bytes(f, f->loaded[i], &b) != 1) {
            cmr_buf_free(&b);
            continue;
        }
        cmr_instr_meta_t m;
        char err[200];
        if (cmr_instr_meta_extract(b.data, b.len, &m, err, sizeof err) == 0) {
            int r = fn(fnud, m.name, m.super_name, (const char *const *)m.interfaces.items, m.interfaces.count);
            cmr_instr_meta_free(&m);
            if (r) {
                cmr_buf_free(&b);
                return r;
            }
        }
        cmr_buf_free(&b);
    }
    return 0;
}

static const char *const app_loaded[] = {
    "disc/Service", "disc/BaseService", "disc/Util",    "disc/Repo", "disc/SqlRepo", "disc/Shape",  "disc/Circle",
    "disc/Square",  "disc/Broken",      "disc/ext/Lib", "disc/Task", "disc/Greeter", "disc/Polite",
    /* disc/MemRepo compiled but never loaded */
};

static cmr_disc_source_t source(fake_t *f)
{
    cmr_disc_source_t s = {.ud = f, .class_bytes = fake_bytes, .each_class = fake_each};
    return s;
}

static fake_t app(void)
{
    fake_t f = {.dir = classes_dir, .loaded = app_loaded, .nloaded = sizeof app_loaded / sizeof *app_loaded};
    return f;
}

static const char *const ext_prefix[] = {"disc/ext/"};

static cmr_disc_opts_t opts(int depth)
{
    cmr_disc_opts_t o = {.max_depth = depth, .exclude = ext_prefix, .nexclude = 1};
    return o;
}

#define ROOT_DESC "(I)Ljava/lang/String;"

static void run(fake_t *f, const cmr_disc_opts_t *o, cmr_disc_tree_t *t)
{
    cmr_disc_source_t s = source(f);
    char err[256];
    int r = cmr_disc_discover(&s, "disc/Service", "handle", ROOT_DESC, o, t, err, sizeof err);
    if (r)
        fprintf(stderr, "discover: %s\n", err);
    assert_int_equal(r, 0);
}

/* Index of the first node owner.name (desc NULL: any) whose parent is `parent` (UINT32_MAX
 * - 1: any parent); -1 when absent. */
#define ANY ((uint32_t)UINT32_MAX - 1)
static long find(const cmr_disc_tree_t *t, uint32_t parent, const char *owner, const char *name, const char *desc)
{
    for (size_t i = 0; i < t->n; i++) {
        const cmr_disc_node_t *n = &t->nodes[i];
        if ((parent == ANY || n->parent == parent) && strcmp(n->owner, owner) == 0 && strcmp(n->name, name) == 0 &&
            (!desc || strcmp(n->desc, desc) == 0))
            return (long)i;
    }
    return -1;
}

static void dump(const cmr_disc_tree_t *t)
{
    for (size_t i = 0; i < t->n; i++) {
        const cmr_disc_node_t *n = &t->nodes[i];
        printf("  %3zu %*s%s.%s%s  via=%s status=%s sites=%u parent=%d\n", i, 2 * n->depth, "", n->owner, n->name,
               n->desc, cmr_disc_via_name(n->via), cmr_disc_status_name(n->status), n->call_sites, (int)n->parent);
    }
}

static const cmr_disc_node_t *child(const cmr_disc_tree_t *t, uint32_t parent, const char *owner, const char *name)
{
    long i = find(t, parent, owner, name, NULL);
    if (i < 0) {
        dump(t);
        fprintf(stderr, "missing child %s.%s of node %u\n", owner, name, parent);
    }
    assert_true(i >= 0);
    return &t->nodes[i];
}

/* --- tests ------------------------------------------------------------------------------ */

static void test_kinds(void **st)
{
    (void)st;
    fake_t f = app();
    f.broken = "disc/Broken";
    cmr_disc_opts_t o = opts(3);
    cmr_disc_tree_t t;
    run(&f, &o, &t);
    if (getenv("DISC_DUMP"))
        dump(&t);
    assert_int_equal(t.nodes[0].parent, UINT32_MAX);
    assert_int_equal(t.nodes[0].status, CMR_DISC_FOUND);
    assert_int_equal(t.nodes[0].via, CMR_DISC_ROOT);

    const cmr_disc_node_t *n = child(&t, 0, "disc/Util", "hash");
    assert_int_equal(n->via, CMR_DISC_STATIC);
    assert_int_equal(n->status, CMR_DISC_FOUND);
    n = child(&t, 0, "disc/Service", "prepare"); /* private: invokespecial or (nestmates) invokevirtual */
    assert_true(n->via == CMR_DISC_SPECIAL || n->via == CMR_DISC_VIRTUAL);
    assert_int_equal(n->status, CMR_DISC_FOUND);
    n = child(&t, 0, "disc/BaseService", "base"); /* inherited: called on Service, declared in BaseService */
    assert_int_equal(n->via, CMR_DISC_VIRTUAL);
    assert_int_equal(n->call_sites, 2);
    assert_int_equal(n->status, CMR_DISC_FOUND);
    /* interface: only the loaded implementation */
    n = child(&t, 0, "disc/SqlRepo", "find");
    assert_int_equal(n->via, CMR_DISC_INTERFACE);
    assert_true(find(&t, ANY, "disc/MemRepo", "find", NULL) < 0);
    assert_true(find(&t, ANY, "disc/Repo", "find", NULL) < 0);
    /* abstract class: both overrides, in class-name order, not the abstract declaration */
    long ci = find(&t, 0, "disc/Circle", "area", "()D"), si = find(&t, 0, "disc/Square", "area", "()D");
    assert_true(ci > 0 && si == ci + 1);
    assert_true(find(&t, ANY, "disc/Shape", "area", NULL) < 0);
    /* lambda body and method reference */
    long li = -1;
    for (size_t i = 0; i < t.n; i++)
        if (t.nodes[i].parent == 0 && strncmp(t.nodes[i].name, "lambda$handle$", 14) == 0)
            li = (long)i;
    assert_true(li > 0);
    assert_int_equal(t.nodes[li].via, CMR_DISC_LAMBDA);
    assert_int_equal(t.nodes[li].status, CMR_DISC_FOUND);
    child(&t, (uint32_t)li, "disc/Util", "log");
    n = child(&t, 0, "disc/Util", "twice");
    assert_int_equal(n->via, CMR_DISC_LAMBDA);
    /* a JDK interface: a JDK leaf plus the loaded application implementations, by name */
    long ri = find(&t, 0, "java/lang/Runnable", "run", "()V"), ti = find(&t, 0, "disc/Task", "run", "()V");
    assert_true(ri > 0 && ti == ri - 1);
    assert_int_equal(t.nodes[ri].status, CMR_DISC_JDK);
    assert_int_equal(t.nodes[ti].status, CMR_DISC_FOUND);
    assert_int_equal(t.nodes[ti].via, CMR_DISC_INTERFACE);
    /* a default method inherited by a class whose superclass is a JDK class (Object), called
     * on the class and through the interface: one child, two call sites */
    n = child(&t, 0, "disc/Greeter", "greet");
    assert_int_equal(n->status, CMR_DISC_FOUND);
    assert_int_equal(n->via, CMR_DISC_VIRTUAL);
    assert_int_equal(n->call_sites, 2);
    assert_true(find(&t, ANY, "java/lang/Object", "greet", NULL) < 0);
    /* a constructor, and the JDK constructor it calls */
    long pi = find(&t, 0, "disc/Polite", "<init>", "()V");
    assert_true(pi > 0);
    assert_int_equal(t.nodes[pi].via, CMR_DISC_SPECIAL);
    assert_int_equal(child(&t, (uint32_t)pi, "java/lang/Object", "<init>")->status, CMR_DISC_JDK);
    /* recursion: direct and mutual */
    long fi = find(&t, 0, "disc/Service", "fact", NULL);
    assert_true(fi > 0);
    assert_int_equal(child(&t, (uint32_t)fi, "disc/Service", "fact")->status, CMR_DISC_REPEATED);
    long ei = find(&t, 0, "disc/Service", "isEven", NULL);
    assert_true(ei > 0);
    long oi = find(&t, (uint32_t)ei, "disc/Service", "isOdd", NULL);
    assert_true(oi > 0);
    assert_int_equal(t.nodes[oi].status, CMR_DISC_FOUND);
    assert_int_equal(child(&t, (uint32_t)oi, "disc/Service", "isEven")->status, CMR_DISC_REPEATED);
    /* already expanded elsewhere: Util.hash under BaseService.base */
    long bi = find(&t, 0, "disc/BaseService", "base", NULL);
    assert_int_equal(child(&t, (uint32_t)bi, "disc/Util", "hash")->status, CMR_DISC_REPEATED);
    /* JDK, excluded, malformed */
    n = child(&t, 0, "java/lang/String", "format");
    assert_int_equal(n->status, CMR_DISC_JDK);
    assert_int_equal(n->via, CMR_DISC_STATIC);
    assert_int_equal(child(&t, 0, "disc/ext/Lib", "call")->status, CMR_DISC_EXCLUDED);
    assert_int_equal(child(&t, 0, "disc/Broken", "run")->status, CMR_DISC_NOT_LOADED);
    /* string concatenation (StringConcatFactory) gives no node */
    for (size_t i = 0; i < t.n; i++)
        assert_true(strstr(t.nodes[i].owner, "StringConcatFactory") == NULL);
    /* method ids, parents before children, depths */
    for (size_t i = 0; i < t.n; i++) {
        const cmr_disc_node_t *x = &t.nodes[i];
        cf_str so = {x->owner, (uint32_t)strlen(x->owner)}, sn = {x->name, (uint32_t)strlen(x->name)},
               sd = {x->desc, (uint32_t)strlen(x->desc)};
        assert_int_equal(x->method_id, cf_method_id_of(so, sn, sd));
        if (i > 0) {
            assert_true(x->parent < i);
            assert_int_equal(x->depth, t.nodes[x->parent].depth + 1);
            assert_true(x->call_sites >= 1);
        }
    }
    assert_false(t.truncated);
    assert_int_equal(f.lists, 1); /* the hierarchy is listed once per discovery */
    cmr_disc_tree_free(&t);
}

/* Methods the operator excluded: exact (never a prefix), all overloads or one descriptor,
 * EXCLUDED leaves wherever met, the roots never; class prefixes still work. */
static void test_method_exclude(void **st)
{
    (void)st;
    fake_t f = app();
    static const char *const ex[] = {
        "disc/ext/",                 /* a prefix, as before */
        "disc/Util.hash",            /* every overload */
        "disc/Service.prepare(I)I",  /* one overload */
        "disc/BaseService.base(J)I", /* a descriptor that is not the method's: nothing */
        "disc/Util.twic",            /* not a prefix of twice */
        "disc/Util",                 /* a class prefix of disc/Util: but Util.hash is a method entry first */
        "disc/Service.handle",       /* the root: never excluded */
    };
    cmr_disc_opts_t o = {.max_depth = 3, .exclude = ex, .nexclude = 7};
    /* without the class prefix of disc/Util first */
    o.nexclude = 5;
    cmr_disc_tree_t t;
    run(&f, &o, &t);
    if (getenv("DISC_DUMP"))
        dump(&t);
    assert_int_equal(t.nodes[0].status, CMR_DISC_FOUND);
    const cmr_disc_node_t *n = child(&t, 0, "disc/Util", "hash");
    assert_int_equal(n->status, CMR_DISC_EXCLUDED);
    assert_int_equal(cmr_disc_excluded_by(&o, n->owner, n->name, n->desc), 1);
    /* its callees are not entered through it (Util.mix is reached from nowhere else) */
    assert_true(find(&t, ANY, "disc/Util", "mix", NULL) < 0);
    /* met again under BaseService.base: excluded there too (was REPEATED) */
    long bi = find(&t, 0, "disc/BaseService", "base", NULL);
    assert_true(bi > 0);
    assert_int_equal(t.nodes[bi].status, CMR_DISC_FOUND);
    assert_int_equal(child(&t, (uint32_t)bi, "disc/Util", "hash")->status, CMR_DISC_EXCLUDED);
    n = child(&t, 0, "disc/Service", "prepare");
    assert_int_equal(n->status, CMR_DISC_EXCLUDED);
    assert_int_equal(cmr_disc_excluded_by(&o, n->owner, n->name, n->desc), 2);
    assert_int_equal(child(&t, 0, "disc/Util", "twice")->status, CMR_DISC_FOUND);
    assert_int_equal(child(&t, 0, "disc/ext/Lib", "call")->status, CMR_DISC_EXCLUDED);
    assert_int_equal(cmr_disc_excluded_by(&o, "disc/ext/Lib", "call", "(I)I"), 0);
    assert_int_equal(cmr_disc_excluded_by(&o, "disc/Util", "twice", "(Ljava/lang/Integer;)I"), -1);
    assert_true(cmr_disc_exclude_is_method(ex[1]));
    assert_false(cmr_disc_exclude_is_method(ex[0]));
    cmr_disc_tree_free(&t);
    /* the root's own entry does not exclude it */
    o.nexclude = 7;
    run(&f, &o, &t);
    assert_int_equal(t.nodes[0].status, CMR_DISC_FOUND);
    assert_int_equal(child(&t, 0, "disc/Util", "twice")->status, CMR_DISC_EXCLUDED); /* the prefix disc/Util */
    cmr_disc_tree_free(&t);
}

static void test_second_impl_loaded(void **st)
{
    (void)st;
    const char *loaded[sizeof app_loaded / sizeof *app_loaded + 1];
    memcpy(loaded, app_loaded, sizeof app_loaded);
    loaded[sizeof app_loaded / sizeof *app_loaded] = "disc/MemRepo";
    fake_t f = app();
    f.loaded = loaded;
    f.nloaded = sizeof loaded / sizeof *loaded;
    cmr_disc_opts_t o = opts(3);
    cmr_disc_tree_t t;
    run(&f, &o, &t);
    long mi = find(&t, 0, "disc/MemRepo", "find", NULL), si = find(&t, 0, "disc/SqlRepo", "find", NULL);
    assert_true(mi > 0 && si == mi + 1); /* by class name */
    assert_int_equal(t.nodes[mi].via, CMR_DISC_INTERFACE);
    cmr_disc_tree_free(&t);
}

static void test_broken_vs_good(void **st)
{
    (void)st;
    fake_t f = app();
    f.broken = "disc/Broken";
    cmr_disc_opts_t o = opts(3);
    cmr_disc_tree_t t;
    run(&f, &o, &t);
    assert_int_equal(child(&t, 0, "disc/Broken", "run")->status, CMR_DISC_NOT_LOADED);
    cmr_disc_tree_free(&t);
    f.broken = NULL; /* the same class with its real bytes is found */
    run(&f, &o, &t);
    assert_int_equal(child(&t, 0, "disc/Broken", "run")->status, CMR_DISC_FOUND);
    cmr_disc_tree_free(&t);
}

static int max_depth(const cmr_disc_tree_t *t)
{
    int d = 0;
    for (size_t i = 0; i < t->n; i++)
        if (t->nodes[i].depth > d)
            d = t->nodes[i].depth;
    return d;
}

static void test_depths(void **st)
{
    (void)st;
    fake_t f = app();
    size_t prev = 0;
    for (int d = 1; d <= 4; d++) {
        cmr_disc_opts_t o = opts(d);
        cmr_disc_tree_t t;
        run(&f, &o, &t);
        assert_int_equal(max_depth(&t), d);
        assert_true(t.n > prev);
        prev = t.n;
        for (size_t i = 0; i < t.n; i++) {
            if (t.nodes[i].depth == d)
                assert_true(t.nodes[i].status != CMR_DISC_FOUND);
            if (t.nodes[i].status == CMR_DISC_DEPTH)
                assert_int_equal(t.nodes[i].depth, d);
        }
        /* the chain Util.hash -> mix -> deep -> deeper */
        const char *chain[] = {"hash", "mix", "deep", "deeper"};
        for (int k = 0; k < 4; k++) {
            long i = find(&t, ANY, "disc/Util", chain[k], NULL);
            if (k < d) {
                assert_true(i > 0);
                assert_int_equal(t.nodes[i].depth, k + 1);
                assert_int_equal(t.nodes[i].status, k + 1 == d ? CMR_DISC_DEPTH : CMR_DISC_FOUND);
            } else {
                assert_true(i < 0);
            }
        }
        cmr_disc_tree_free(&t);
    }
}

static void test_max_nodes(void **st)
{
    (void)st;
    fake_t f = app();
    cmr_disc_opts_t o = opts(3);
    o.max_nodes = 6;
    cmr_disc_tree_t t;
    run(&f, &o, &t);
    assert_int_equal(t.n, 6);
    assert_true(t.truncated);
    assert_int_equal(t.nodes[5].status, CMR_DISC_TOO_MANY);
    for (size_t i = 0; i < 5; i++)
        assert_true(t.nodes[i].status != CMR_DISC_TOO_MANY);
    cmr_disc_tree_free(&t);
    o.max_nodes = 0; /* default 2000: not cut */
    run(&f, &o, &t);
    assert_false(t.truncated);
    assert_true(t.n > 6);
    cmr_disc_tree_free(&t);
}

static void test_deterministic(void **st)
{
    (void)st;
    fake_t f = app();
    cmr_disc_opts_t o = opts(3);
    cmr_disc_tree_t a, b;
    run(&f, &o, &a);
    /* the same classes listed in another order give the same tree */
    const char *rev[sizeof app_loaded / sizeof *app_loaded];
    size_t n = sizeof app_loaded / sizeof *app_loaded;
    for (size_t i = 0; i < n; i++)
        rev[i] = app_loaded[n - 1 - i];
    fake_t g = app();
    g.loaded = rev;
    run(&g, &o, &b);
    assert_int_equal(a.n, b.n);
    for (size_t i = 0; i < a.n; i++) {
        assert_string_equal(a.nodes[i].owner, b.nodes[i].owner);
        assert_string_equal(a.nodes[i].name, b.nodes[i].name);
        assert_string_equal(a.nodes[i].desc, b.nodes[i].desc);
        assert_int_equal(a.nodes[i].method_id, b.nodes[i].method_id);
        assert_int_equal(a.nodes[i].parent, b.nodes[i].parent);
        assert_int_equal(a.nodes[i].status, b.nodes[i].status);
        assert_int_equal(a.nodes[i].via, b.nodes[i].via);
        assert_int_equal(a.nodes[i].call_sites, b.nodes[i].call_sites);
    }
    cmr_disc_tree_free(&a);
    cmr_disc_tree_free(&b);
}

static void test_roots_and_errors(void **st)
{
    (void)st;
    fake_t f = app();
    cmr_disc_source_t s = source(&f);
    cmr_disc_opts_t o = opts(1);
    cmr_disc_tree_t t;
    char err[256];
    /* every overload: two roots */
    assert_int_equal(cmr_disc_discover(&s, "disc/Service", "handle", NULL, &o, &t, err, sizeof err), 0);
    size_t roots = 0;
    for (size_t i = 0; i < t.n; i++)
        roots += t.nodes[i].parent == UINT32_MAX;
    assert_int_equal(roots, 2);
    assert_true(find(&t, UINT32_MAX, "disc/Service", "handle", "(Ljava/lang/String;)Ljava/lang/String;") >= 0);
    cmr_disc_tree_free(&t);
    /* an abstract root: NO_CODE, nothing below */
    assert_int_equal(cmr_disc_discover(&s, "disc/Shape", "area", "()D", &o, &t, err, sizeof err), 0);
    assert_int_equal(t.n, 1);
    assert_int_equal(t.nodes[0].status, CMR_DISC_NO_CODE);
    cmr_disc_tree_free(&t);
    /* errors */
    assert_int_equal(cmr_disc_discover(&s, "disc/MemRepo", "find", NULL, &o, &t, err, sizeof err), -1);
    assert_non_null(strstr(err, "not loaded"));
    assert_int_equal(t.n, 0);
    assert_int_equal(cmr_disc_discover(&s, "disc/Service", "nope", NULL, &o, &t, err, sizeof err), -1);
    f.broken = "disc/Service";
    assert_int_equal(cmr_disc_discover(&s, "disc/Service", "handle", NULL, &o, &t, err, sizeof err), -1);
    assert_non_null(strstr(err, "malformed"));
}

static void test_source_failure_and_damaged_bytes(void **st)
{
    (void)st;
    fake_t f = app();
    cmr_disc_source_t s = source(&f);
    cmr_disc_opts_t o = opts(3);
    cmr_disc_tree_t t;
    char err[256];
    /* the source fails below the root: the discovery fails, nothing is left in the tree */
    f.failing = "disc/Util";
    assert_int_equal(cmr_disc_discover(&s, "disc/Service", "handle", ROOT_DESC, &o, &t, err, sizeof err), -1);
    assert_non_null(strstr(err, "disc/Util"));
    assert_int_equal(t.n, 0);
    assert_null(t.nodes);
    f.failing = NULL;
    /* damaged bytes in each class in turn (flipped bytes: often still parseable, with wrong
     * indices, lengths or code): never a crash (ASan run), the root's class aside never an
     * error, always a bounded tree */
    cmr_log_level_t lvl = cmr_log_get_level();
    cmr_log_set_level(CMR_LOG_ERROR);
    size_t nclasses = sizeof app_loaded / sizeof *app_loaded, ok = 0;
    for (size_t c = 0; c < nclasses; c++) {
        for (uint32_t seed = 1; seed <= 60; seed++) {
            f.mutate = app_loaded[c];
            f.seed = seed;
            int r = cmr_disc_discover(&s, "disc/Service", "handle", NULL, &o, &t, err, sizeof err);
            if (r != 0 && strcmp(app_loaded[c], "disc/Service") != 0)
                fprintf(stderr, "%s seed %u: %s\n", app_loaded[c], seed, err);
            if (strcmp(app_loaded[c], "disc/Service") != 0)
                assert_int_equal(r, 0);
            if (r == 0) {
                ok++;
                assert_true(t.n >= 1 && t.n <= 2000);
            }
            cmr_disc_tree_free(&t);
        }
    }
    cmr_log_set_level(lvl);
    printf("damaged bytes: %zu of %zu discoveries completed\n", ok, nclasses * 60);
}

/* --- a real library ---------------------------------------------------------------------- */

typedef struct names {
    char **v;
    size_t n, cap;
} names_t;

static void walk(const char *root, const char *rel, names_t *out)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    DIR *d = opendir(path);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char sub[4096];
        snprintf(sub, sizeof sub, "%s%s%s", rel, *rel ? "/" : "", e->d_name);
        char full[8192];
        snprintf(full, sizeof full, "%s/%s", root, sub);
        struct stat sb;
        if (stat(full, &sb) != 0)
            continue;
        size_t l = strlen(sub);
        if (S_ISDIR(sb.st_mode)) {
            walk(root, sub, out);
        } else if (l > 6 && strcmp(sub + l - 6, ".class") == 0 && strstr(sub, "META-INF") == NULL) {
            if (out->n == out->cap) {
                out->cap = out->cap ? 2 * out->cap : 256;
                out->v = realloc(out->v, out->cap * sizeof *out->v);
            }
            sub[l - 6] = 0;
            out->v[out->n++] = strdup(sub);
        }
    }
    closedir(d);
}

static int count_class(void *ud, const char *name, const char *super, const char *const *ifaces, size_t nifaces)
{
    (void)name, (void)super, (void)ifaces, (void)nifaces;
    ++*(size_t *)ud;
    return 0;
}

static double ms_since(const struct timespec *a)
{
    struct timespec b;
    clock_gettime(CLOCK_MONOTONIC, &b);
    return (double)(b.tv_sec - a->tv_sec) * 1e3 + (double)(b.tv_nsec - a->tv_nsec) / 1e6;
}

static void test_real_jar(void **st)
{
    (void)st;
    const char *jar = getenv("DISC_JAR") ? getenv("DISC_JAR") : "/usr/share/java/asm.jar";
    const char *owner = getenv("DISC_OWNER") ? getenv("DISC_OWNER") : "org/objectweb/asm/ClassReader";
    const char *name = getenv("DISC_NAME") ? getenv("DISC_NAME") : "accept";
    const char *desc = getenv("DISC_DESC") ? getenv("DISC_DESC") : "(Lorg/objectweb/asm/ClassVisitor;I)V";
    if (access(jar, R_OK) != 0 || system("command -v unzip >/dev/null 2>&1") != 0) {
        printf("skipped: %s or unzip missing\n", jar);
        skip();
    }
    char dir[] = "/tmp/discover-jar-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "unzip -q -o '%s' -d '%s' '*.class'", jar, dir);
    assert_int_equal(system(cmd), 0);
    names_t all = {0};
    walk(dir, "", &all);
    assert_true(all.n > 0);
    fake_t f = {.dir = dir, .loaded = (const char *const *)all.v, .nloaded = all.n};
    cmr_disc_source_t s = source(&f);
    cmr_disc_opts_t o = {.max_depth = 3};
    cmr_disc_tree_t t;
    char err[256];
    struct timespec a;
    /* the fake source's own cost of listing the loaded classes (it parses each class file;
     * the instrumenter reads its cached metadata instead) */
    size_t listed = 0;
    clock_gettime(CLOCK_MONOTONIC, &a);
    assert_int_equal(fake_each(&f, count_class, &listed), 0);
    double list_ms = ms_since(&a);
    clock_gettime(CLOCK_MONOTONIC, &a);
    int r = cmr_disc_discover(&s, owner, name, desc, &o, &t, err, sizeof err);
    double ms = ms_since(&a);
    if (r)
        fprintf(stderr, "discover: %s\n", err);
    assert_int_equal(r, 0);
    size_t found = 0, impls = 0;
    for (size_t i = 0; i < t.n; i++) {
        found += t.nodes[i].status == CMR_DISC_FOUND;
        impls += t.nodes[i].via == CMR_DISC_VIRTUAL || t.nodes[i].via == CMR_DISC_INTERFACE;
    }
    printf("real jar %s: %zu classes loaded, %s.%s depth 3: %zu nodes (%zu expanded, %zu virtual/interface), "
           "%zu classes parsed, %zu sites cut at max_impls, %.1f ms (listing the %zu loaded classes alone: %.1f ms)\n",
           jar, all.n, owner, name, t.n, found, impls, t.classes_read, t.truncated_sites, ms, listed, list_ms);
    assert_true(t.n > 1 && t.n <= 2000);
    assert_true(max_depth(&t) <= 3);
    /* determinism on a real graph */
    cmr_disc_tree_t t2;
    assert_int_equal(cmr_disc_discover(&s, owner, name, desc, &o, &t2, err, sizeof err), 0);
    assert_int_equal(t2.n, t.n);
    for (size_t i = 0; i < t.n; i++)
        assert_int_equal(t.nodes[i].method_id, t2.nodes[i].method_id);
    cmr_disc_tree_free(&t2);
    cmr_disc_tree_free(&t);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    for (size_t i = 0; i < all.n; i++)
        free(all.v[i]);
    free(all.v);
}

int main(int argc, char **argv)
{
    classes_dir = argc > 1 ? argv[1] : "discover-classes";
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kinds),
        cmocka_unit_test(test_second_impl_loaded),
        cmocka_unit_test(test_method_exclude),
        cmocka_unit_test(test_broken_vs_good),
        cmocka_unit_test(test_depths),
        cmocka_unit_test(test_max_nodes),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_roots_and_errors),
        cmocka_unit_test(test_source_failure_and_damaged_bytes),
        cmocka_unit_test(test_real_jar),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

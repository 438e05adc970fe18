/*
 * instr_discover.c - the Discover step (see instr_discover.h): a breadth-first walk of the
 * call graph from a selected method, reading call sites with cf_method_callees() and
 * resolving them over the classes one agent loaded (a cmr_disc_source_t).
 *
 * Inside one discovery (a ctx_t, freed before returning):
 *   - classes: name -> cls_t, every class file asked for once, parsed once (the cf_class
 *     borrows the cls_t's buffer), kept until the end;
 *   - the type hierarchy (name -> direct subtypes), built from each_class() the first time a
 *     virtual or interface call is resolved;
 *   - placed: method id -> placed with code, so that a method is expanded at its first place
 *     only (REPEATED elsewhere, recursion included).
 * The tree's nodes own their strings; everything else belongs to the ctx_t.
 */
#include "cmr/instr_discover.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/classfile.h"
#include "cmr/diagnoses.h"
#include "cmr/instr_exclude.h"
#include "cmr/log.h"
#include "cmr/map.h"

#define DEFAULT_DEPTH 3
#define DEFAULT_NODES 2000
#define DEFAULT_IMPLS 64
#define MAX_CHAIN 256 /* superclass levels followed: a cycle in bad class files stops here */

enum { CLS_OK = 1, CLS_ABSENT, CLS_MALFORMED };

typedef struct cls {
    int state;
    cmr_buf_t buf; /* the class file; c borrows it */
    cf_class *c;
} cls_t;

typedef struct htype {
    char *name;
    uint32_t *subs; /* indices of direct subtypes */
    size_t nsubs, cap;
    uint32_t mark;
    bool loaded;
} htype_t;

/* A resolved call target before it becomes a node. Strings owned. */
typedef struct target {
    char *owner, *name, *desc;
    uint64_t id;
    uint8_t via, status;
    uint32_t sites;
    bool no_bytes; /* NOT_LOADED because the bytes of `owner` are unknown */
} target_t;

typedef struct tlist {
    target_t *items;
    size_t count, cap;
} tlist_t;

typedef struct ctx {
    const cmr_disc_source_t *src;
    cmr_disc_opts_t o;
    cmr_disc_tree_t *t;
    cmr_map_t classes; /* name -> cls_t* */
    cmr_u64map_t placed;
    bool hier_built;
    htype_t *h;
    size_t nh, caph;
    cmr_map_t hidx; /* name -> index + 1 */
    uint32_t gen;
    size_t node_cap; /* capacity of t->nodes */
    int failed;      /* the source failed or memory ran out */
    char *err;
    size_t errlen;
} ctx_t;

/* The discovery's values are the wire's (cmr_diag_node_status_t, cmr_diag_via_t). */
_Static_assert(CMR_DISC_TOO_MANY == (int)CMR_DIAG_NODE_TOO_MANY && CMR_DISC_FOUND == (int)CMR_DIAG_NODE_FOUND,
               "discovery statuses are the wire's");
_Static_assert(CMR_DISC_DYNAMIC == (int)CMR_DIAG_VIA_DYNAMIC && CMR_DISC_ROOT == (int)CMR_DIAG_VIA_ROOT,
               "discovery call kinds are the wire's");
const char *cmr_disc_status_name(int s)
{
    return cmr_diag_node_status_name((cmr_diag_node_status_t)s);
}

const char *cmr_disc_via_name(int v)
{
    return cmr_diag_via_name((cmr_diag_via_t)v);
}

bool cmr_disc_is_jdk(const char *c)
{
    static const char *const p[] = {"java/",          "javax/",       "jdk/",         "sun/",     "com/sun/",
                                    "org/ietf/jgss/", "org/w3c/dom/", "org/xml/sax/", "org/omg/", NULL};
    if (c[0] == '[')
        return true; /* arrays: clone() of java/lang/Object */
    for (int i = 0; p[i]; i++)
        if (strncmp(c, p[i], strlen(p[i])) == 0)
            return true;
    return false;
}

static int fail(ctx_t *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(ctx_t *x, const char *fmt, ...)
{
    if (!x->failed && x->err && x->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(x->err, x->errlen, fmt, ap);
        va_end(ap);
    }
    x->failed = 1;
    return -1;
}

static char *dup_str(cf_str s)
{
    char *p = malloc((size_t)s.len + 1);
    if (p) {
        memcpy(p, s.p, s.len);
        p[s.len] = 0;
    }
    return p;
}

static bool str_is(cf_str s, const char *z)
{
    size_t n = strlen(z);
    return s.len == n && memcmp(s.p, z, n) == 0;
}

static cf_str cstr(const char *z)
{
    cf_str s = {z, (uint32_t)strlen(z)};
    return s;
}

/* ------------------------------------------------------------------- classes */

/* The class `name`, asked for once; NULL only when the source failed or memory ran out. */
static cls_t *get_class(ctx_t *x, const char *name)
{
    cls_t *k = cmr_map_get_str(&x->classes, name);
    if (k)
        return k;
    k = calloc(1, sizeof *k);
    if (!k || cmr_map_put(&x->classes, name, strlen(name), k)) {
        free(k);
        fail(x, "%s", "out of memory");
        return NULL;
    }
    int r = x->src->class_bytes(x->src->ud, name, &k->buf);
    if (r < 0) {
        fail(x, "the class source failed for %s", name);
        return NULL;
    }
    if (r == 0 || !cmr_buf_ok(&k->buf)) {
        k->state = CLS_ABSENT;
        return k;
    }
    cf_error e;
    if (cf_class_parse(k->buf.data, k->buf.len, &k->c, &e) != CF_OK) {
        cmr_log(CMR_LOG_WARN, "disc_class", "class=%s malformed: %s", name, e.msg);
        k->state = CLS_MALFORMED;
        k->c = NULL;
        cmr_buf_free(&k->buf);
        return k;
    }
    x->t->classes_read++;
    k->state = CLS_OK;
    return k;
}

static const cf_member *find_method(const cf_class *c, const char *name, const char *desc)
{
    for (uint16_t i = 0; i < c->method_count; i++) {
        const cf_member *m = &c->methods[i];
        if (str_is(cf_cp_utf8(c, m->name), name) && str_is(cf_cp_utf8(c, m->desc), desc))
            return m;
    }
    return NULL;
}

static bool has_code(const cf_member *m)
{
    return !(m->access & (JVM_ACC_ABSTRACT | JVM_ACC_NATIVE));
}

bool cmr_disc_exclude_is_method(const char *entry)
{
    return entry && strchr(entry, '.') != NULL;
}

/* The class-prefix entry of o->exclude that owner starts with, or -1. */
static long prefix_entry(const cmr_disc_opts_t *o, const char *owner)
{
    for (size_t i = 0; i < o->nexclude; i++)
        if (o->exclude[i] && !cmr_disc_exclude_is_method(o->exclude[i]) &&
            strncmp(owner, o->exclude[i], strlen(o->exclude[i])) == 0)
            return (long)i;
    return -1;
}

/* The method entry of o->exclude naming owner.name(desc) exactly, or -1. */
static long method_entry(const cmr_disc_opts_t *o, const char *owner, const char *name, const char *desc)
{
    size_t olen = strlen(owner), nlen = strlen(name);
    for (size_t i = 0; i < o->nexclude; i++) {
        const char *e = o->exclude[i];
        if (!cmr_disc_exclude_is_method(e) || strncmp(e, owner, olen) != 0 || e[olen] != '.' ||
            strncmp(e + olen + 1, name, nlen) != 0)
            continue;
        const char *rest = e + olen + 1 + nlen; /* "" (every overload) or the descriptor */
        if (!*rest || (*rest == '(' && strcmp(rest, desc) == 0))
            return (long)i;
    }
    return -1;
}

long cmr_disc_excluded_by(const cmr_disc_opts_t *o, const char *owner, const char *name, const char *desc)
{
    if (!o || !owner || !name || !desc)
        return -1;
    long i = method_entry(o, owner, name, desc);
    return i >= 0 ? i : prefix_entry(o, owner);
}

/* FOUND, or JDK / EXCLUDED for classes that are leaves whatever they hold. */
static int owner_status(const ctx_t *x, const char *name)
{
    if (!x->o.include_jdk && cmr_disc_is_jdk(name))
        return CMR_DISC_JDK;
    if (prefix_entry(&x->o, name) >= 0)
        return CMR_DISC_EXCLUDED;
    if (cmr_instr_excluded(name))
        return CMR_DISC_EXCLUDED;
    return CMR_DISC_FOUND;
}

/* ------------------------------------------------------------------- targets */

static void target_free(target_t *t)
{
    free(t->owner);
    free(t->name);
    free(t->desc);
    memset(t, 0, sizeof *t);
}

static void tlist_free(tlist_t *l)
{
    for (size_t i = 0; i < l->count; i++)
        target_free(&l->items[i]);
    free(l->items);
    memset(l, 0, sizeof *l);
}

static int set_target(ctx_t *x, target_t *t, const char *owner, const char *name, const char *desc, int status)
{
    target_free(t);
    t->owner = strdup(owner);
    t->name = strdup(name);
    t->desc = strdup(desc);
    if (!t->owner || !t->name || !t->desc)
        return fail(x, "%s", "out of memory");
    t->status = (uint8_t)status;
    t->id = cf_method_id_of(cstr(owner), cstr(name), cstr(desc));
    return 0;
}

/* Adds t (taken over) to l, or counts a call site when l holds its method already. */
static int tlist_add(ctx_t *x, tlist_t *l, target_t *t)
{
    for (size_t i = 0; i < l->count; i++)
        if (l->items[i].id == t->id && strcmp(l->items[i].owner, t->owner) == 0) {
            l->items[i].sites++;
            target_free(t);
            return 0;
        }
    if (CMR_ARRAY_GROW(l->items, l->cap, l->count + 1)) {
        target_free(t);
        return fail(x, "%s", "out of memory");
    }
    t->sites = 1;
    l->items[l->count++] = *t;
    memset(t, 0, sizeof *t);
    return 0;
}

/* A default method name+desc in the superinterfaces of class c (depth first, declaration
 * order; each interface visited once: `seen`). 1 found (out set), 0 not, -1 failed.
 * *jdk_iface: the first JDK interface met. */
static int find_default(ctx_t *x, const cf_class *c, const char *name, const char *desc, target_t *out, int level,
                        char **jdk_iface, cmr_map_t *seen)
{
    if (level > 32)
        return 0;
    for (uint16_t i = 0; i < c->iface_count; i++) {
        uint16_t ci = (uint16_t)(c->ifaces[2 * i] << 8 | c->ifaces[2 * i + 1]);
        char *in = dup_str(cf_cp_class_name(c, ci));
        if (!in)
            return fail(x, "%s", "out of memory");
        bool created;
        if (!cmr_map_get_slot(seen, in, strlen(in), &created)) {
            free(in);
            return fail(x, "%s", "out of memory");
        }
        if (!created) {
            free(in);
            continue;
        }
        int st = owner_status(x, in);
        if (st != CMR_DISC_FOUND) {
            if (!*jdk_iface && st == CMR_DISC_JDK)
                *jdk_iface = in;
            else
                free(in);
            continue;
        }
        cls_t *k = get_class(x, in);
        if (!k) {
            free(in);
            return -1;
        }
        int r = 0;
        if (k->state == CLS_OK) {
            const cf_member *m = find_method(k->c, name, desc);
            if (m && has_code(m) && !(m->access & JVM_ACC_STATIC))
                r = set_target(x, out, in, name, desc, CMR_DISC_FOUND) ? -1 : 1;
            else
                r = find_default(x, k->c, name, desc, out, level + 1, jdk_iface, seen);
        }
        free(in);
        if (r)
            return r;
    }
    return 0;
}

/* The end of resolve_up: a default method in the interfaces of the classes start and its
 * `levels` superclasses implement, or a JDK / NOT_LOADED leaf. nofallback: no leaf, 1 when a
 * default method was found (out set), 0 when not. */
static int resolve_default(ctx_t *x, const char *start, const char *name, const char *desc, int levels, target_t *out,
                           bool nofallback)
{
    char *jdk_iface = NULL;
    cmr_map_t seen = {0};
    char *from = strdup(start);
    int r = from ? 0 : fail(x, "%s", "out of memory");
    for (int l = 0; l <= levels && from && r == 0; l++) {
        cls_t *f = get_class(x, from);
        if (!f) {
            r = -1;
            break;
        }
        if (f->state != CLS_OK)
            break;
        r = find_default(x, f->c, name, desc, out, 0, &jdk_iface, &seen);
        char *nx = r == 0 && f->c->super_class ? dup_str(cf_cp_class_name(f->c, f->c->super_class)) : NULL;
        free(from);
        from = nx;
    }
    free(from);
    cmr_map_free(&seen);
    if (r == 0 && !nofallback && jdk_iface)
        r = set_target(x, out, jdk_iface, name, desc, CMR_DISC_JDK);
    else if (r == 0 && !nofallback)
        r = set_target(x, out, start, name, desc, CMR_DISC_NOT_LOADED); /* no such method */
    free(jdk_iface);
    return r < 0 ? -1 : r == 1 && nofallback ? 1 : 0;
}

/* The method a call of name+desc on class `start` runs: declared in start or the nearest
 * superclass (then a default method). dispatch: skip private and static methods of
 * classes other than start (they do not override). out->status FOUND / NO_CODE / JDK /
 * EXCLUDED / NOT_LOADED. 0, or -1 when the source failed. */
static int resolve_up(ctx_t *x, const char *start, const char *name, const char *desc, bool dispatch, target_t *out)
{
    char *cur = strdup(start);
    if (!cur)
        return fail(x, "%s", "out of memory");
    int rc = 0;
    for (int level = 0;; level++) {
        int st = owner_status(x, cur);
        if (st != CMR_DISC_FOUND) {
            /* a JDK / excluded superclass: a default method of the application's interfaces
             * first (an inherited JDK method would win at run time, but JDK superclasses of
             * application classes rarely declare the application interfaces' methods) */
            rc = level > 0 ? resolve_default(x, start, name, desc, level - 1, out, true) : 0;
            if (rc == 0)
                rc = set_target(x, out, cur, name, desc, st);
            else if (rc == 1)
                rc = 0;
            break;
        }
        cls_t *k = get_class(x, cur);
        if (!k) {
            rc = -1;
            break;
        }
        if (k->state != CLS_OK) {
            rc = set_target(x, out, cur, name, desc, CMR_DISC_NOT_LOADED);
            out->no_bytes = true;
            break;
        }
        const cf_member *m = find_method(k->c, name, desc);
        if (m && !(dispatch && level > 0 && (m->access & (JVM_ACC_PRIVATE | JVM_ACC_STATIC)))) {
            rc = set_target(x, out, cur, name, desc, has_code(m) ? CMR_DISC_FOUND : CMR_DISC_NO_CODE);
            break;
        }
        cf_str sup = cf_cp_class_name(k->c, k->c->super_class);
        if (k->c->super_class == 0 || sup.len == 0 || level >= MAX_CHAIN || strcmp(name, "<init>") == 0) {
            rc = resolve_default(x, start, name, desc, level, out, false);
            break;
        }
        char *next = dup_str(sup);
        if (!next) {
            rc = fail(x, "%s", "out of memory");
            break;
        }
        free(cur);
        cur = next;
    }
    free(cur);
    return rc;
}

/* ------------------------------------------------------------------ hierarchy */

static int htype_of(ctx_t *x, const char *name, uint32_t *idx)
{
    bool created;
    void **slot = cmr_map_get_slot(&x->hidx, name, strlen(name), &created);
    if (!slot)
        return fail(x, "%s", "out of memory");
    if (!created) {
        *idx = (uint32_t)((uintptr_t)*slot - 1);
        return 0;
    }
    char *copy = strdup(name);
    if (!copy || CMR_ARRAY_GROW(x->h, x->caph, x->nh + 1)) {
        free(copy);
        cmr_map_del(&x->hidx, name, strlen(name), NULL);
        return fail(x, "%s", "out of memory");
    }
    memset(&x->h[x->nh], 0, sizeof x->h[x->nh]);
    x->h[x->nh].name = copy;
    *idx = (uint32_t)x->nh++;
    *slot = (void *)(uintptr_t)(*idx + 1);
    return 0;
}

static int add_sub(ctx_t *x, const char *super, uint32_t sub)
{
    uint32_t s;
    if (htype_of(x, super, &s))
        return -1;
    htype_t *h = &x->h[s];
    if (CMR_ARRAY_GROW(h->subs, h->cap, h->nsubs + 1))
        return fail(x, "%s", "out of memory");
    h->subs[h->nsubs++] = sub;
    return 0;
}

static int on_class(void *ud, const char *name, const char *super, const char *const *ifaces, size_t nifaces)
{
    ctx_t *x = ud;
    uint32_t me;
    if (!name || htype_of(x, name, &me))
        return x->failed ? -1 : 0;
    x->h[me].loaded = true;
    if (super && add_sub(x, super, me))
        return -1;
    for (size_t i = 0; i < nifaces; i++)
        if (ifaces[i] && add_sub(x, ifaces[i], me))
            return -1;
    return 0;
}

static int build_hierarchy(ctx_t *x)
{
    if (x->hier_built)
        return 0;
    x->hier_built = true;
    if (!x->src->each_class)
        return 0;
    if (x->src->each_class(x->src->ud, on_class, x) != 0 || x->failed)
        return fail(x, "%s", "the class source failed to list the loaded classes");
    return 0;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The loaded subtypes of `name` (transitively), sorted by name; *out malloc'ed, strings
 * borrowed from the hierarchy. */
static int subtypes(ctx_t *x, const char *name, const char ***out, size_t *n)
{
    *out = NULL;
    *n = 0;
    uintptr_t v = (uintptr_t)cmr_map_get_str(&x->hidx, name);
    if (!v)
        return 0;
    x->gen++;
    uint32_t *stack = NULL;
    size_t ns = 0, caps = 0, cap = 0;
    const char **res = NULL;
    if (CMR_ARRAY_GROW(stack, caps, 1))
        return fail(x, "%s", "out of memory");
    stack[ns++] = (uint32_t)(v - 1);
    x->h[v - 1].mark = x->gen;
    while (ns) {
        htype_t *h = &x->h[stack[--ns]];
        for (size_t i = 0; i < h->nsubs; i++) {
            htype_t *s = &x->h[h->subs[i]];
            if (s->mark == x->gen)
                continue;
            s->mark = x->gen;
            if (CMR_ARRAY_GROW(stack, caps, ns + 1) || (s->loaded && CMR_ARRAY_GROW(res, cap, *n + 1))) {
                free(stack);
                free(res);
                *n = 0;
                return fail(x, "%s", "out of memory");
            }
            stack[ns++] = h->subs[i];
            if (s->loaded)
                res[(*n)++] = s->name;
        }
    }
    free(stack);
    if (*n)
        qsort(res, *n, sizeof *res, cmp_name);
    *out = res;
    return 0;
}

static int cmp_target(const void *a, const void *b)
{
    const target_t *p = a, *q = b;
    int c = strcmp(p->owner, q->owner);
    return c ? c : strcmp(p->name, q->name);
}

/* The implementations of a virtual / interface call of owner.name(desc), appended to l. */
static int dispatch(ctx_t *x, const char *owner, const char *name, const char *desc, uint8_t via, tlist_t *l)
{
    tlist_t found = {0};
    target_t fallback = {0}, t = {0};
    int rc = 0;
    const char **subs = NULL;
    size_t nsubs = 0;
    if (resolve_up(x, owner, name, desc, false, &fallback))
        goto out;
    if (fallback.status == CMR_DISC_FOUND || fallback.status == CMR_DISC_JDK || fallback.status == CMR_DISC_EXCLUDED) {
        if (tlist_add(x, &found, &fallback))
            goto out;
    }
    bool object = strcmp(owner, "java/lang/Object") == 0 || owner[0] == '[';
    if (!object && (build_hierarchy(x) || subtypes(x, owner, &subs, &nsubs)))
        goto out;
    for (size_t i = 0; i < nsubs; i++) {
        if (owner_status(x, subs[i]) != CMR_DISC_FOUND)
            continue; /* JDK implementations of JDK interfaces, excluded classes */
        if (resolve_up(x, subs[i], name, desc, true, &t))
            goto out;
        if (t.status == CMR_DISC_FOUND) {
            bool dup = false;
            for (size_t j = 0; j < found.count && !dup; j++)
                dup = found.items[j].id == t.id;
            if (!dup && tlist_add(x, &found, &t))
                goto out;
        } else if (t.no_bytes && strcmp(t.owner, subs[i]) == 0) {
            x->t->unknown_subtypes++;
        }
        target_free(&t);
    }
    if (found.count == 0 && fallback.owner) {
        if (tlist_add(x, &found, &fallback))
            goto out;
    }
    if (found.count > 1)
        qsort(found.items, found.count, sizeof *found.items, cmp_target);
    size_t limit = found.count;
    if (limit > x->o.max_impls) {
        limit = x->o.max_impls;
        x->t->truncated_sites++;
    }
    for (size_t i = 0; i < limit; i++) {
        found.items[i].via = via;
        if (tlist_add(x, l, &found.items[i]))
            goto out;
    }
out:
    rc = x->failed ? -1 : 0;
    free(subs);
    target_free(&t);
    target_free(&fallback);
    tlist_free(&found);
    return rc;
}

/* One direct target (static, special, lambda body ...) appended to l. */
static int direct(ctx_t *x, const char *owner, const char *name, const char *desc, uint8_t via, tlist_t *l)
{
    target_t t = {0};
    if (resolve_up(x, owner, name, desc, false, &t)) {
        target_free(&t);
        return -1;
    }
    t.via = via;
    return tlist_add(x, l, &t);
}

static int site(ctx_t *x, const cf_callee *cl, tlist_t *l)
{
    char *owner = NULL, *name = NULL, *desc = NULL;
    int rc = 0;
    uint8_t op = cl->opcode;
    if (op == JVM_OPC_invokedynamic) {
        if (str_is(cl->bsm_owner, "java/lang/invoke/StringConcatFactory"))
            return 0;
        bool lambda = str_is(cl->bsm_owner, "java/lang/invoke/LambdaMetafactory") && cl->impl_kind;
        cf_str o = lambda ? cl->impl_owner : cl->bsm_owner, n = lambda ? cl->impl_name : cl->bsm_name,
               d = lambda ? cl->impl_desc : cl->bsm_desc;
        owner = dup_str(o);
        name = dup_str(n);
        desc = dup_str(d);
        if (!owner || !name || !desc)
            rc = fail(x, "%s", "out of memory");
        else if (lambda && (cl->impl_kind == 5 || cl->impl_kind == 9))
            rc = dispatch(x, owner, name, desc, CMR_DISC_LAMBDA, l);
        else
            rc = direct(x, owner, name, desc, lambda ? CMR_DISC_LAMBDA : CMR_DISC_DYNAMIC, l);
    } else {
        owner = dup_str(cl->owner);
        name = dup_str(cl->name);
        desc = dup_str(cl->desc);
        if (!owner || !name || !desc)
            rc = fail(x, "%s", "out of memory");
        else if (op == JVM_OPC_invokestatic)
            rc = direct(x, owner, name, desc, CMR_DISC_STATIC, l);
        else if (op == JVM_OPC_invokespecial)
            rc = direct(x, owner, name, desc, CMR_DISC_SPECIAL, l);
        else
            rc = dispatch(x, owner, name, desc, op == JVM_OPC_invokeinterface ? CMR_DISC_INTERFACE : CMR_DISC_VIRTUAL,
                          l);
    }
    free(owner);
    free(name);
    free(desc);
    return rc;
}

/* ------------------------------------------------------------------ the tree */

/* Appends a node for t (strings taken over). 1 when the tree is full (stop), 0, -1. */
static int add_node(ctx_t *x, uint32_t parent, uint16_t depth, target_t *t)
{
    cmr_disc_tree_t *tr = x->t;
    if (CMR_ARRAY_GROW(tr->nodes, x->node_cap, tr->n + 1))
        return fail(x, "%s", "out of memory");
    cmr_disc_node_t *nd = &tr->nodes[tr->n];
    memset(nd, 0, sizeof *nd);
    nd->method_id = t->id;
    nd->owner = t->owner;
    nd->name = t->name;
    nd->desc = t->desc;
    t->owner = t->name = t->desc = NULL;
    nd->parent = parent;
    nd->depth = depth;
    nd->via = t->via;
    nd->call_sites = parent == UINT32_MAX ? 0 : t->sites;
    uint8_t st = t->status;
    bool full = parent != UINT32_MAX && tr->n + 1 >= x->o.max_nodes; /* roots always fit */
    if (full) {
        st = CMR_DISC_TOO_MANY;
        tr->truncated = true;
    } else if (parent != UINT32_MAX && x->o.nexclude && method_entry(&x->o, nd->owner, nd->name, nd->desc) >= 0) {
        st = CMR_DISC_EXCLUDED; /* the operator's: a leaf, not placed (met elsewhere, excluded again) */
    } else if (st == CMR_DISC_FOUND) {
        if (cmr_u64map_has(&x->placed, t->id))
            st = CMR_DISC_REPEATED;
        else if (cmr_u64map_put(&x->placed, t->id, (void *)1))
            return fail(x, "%s", "out of memory");
        else if (depth >= x->o.max_depth)
            st = CMR_DISC_DEPTH;
    }
    nd->status = st;
    tr->n++;
    return full ? 1 : 0;
}

/* Lists the targets of node i's call sites and appends them. 1 stop, 0, -1. */
static int expand(ctx_t *x, size_t i)
{
    const cmr_disc_node_t *nd = &x->t->nodes[i];
    uint16_t depth = (uint16_t)(nd->depth + 1);
    cls_t *k = get_class(x, nd->owner);
    if (!k)
        return -1;
    if (k->state != CLS_OK)
        return 0;
    const cf_member *m = find_method(k->c, nd->name, nd->desc);
    if (!m)
        return 0;
    cf_callee *cv = NULL;
    size_t ncv = 0;
    cf_error e;
    if (cf_method_callees(k->c, m, &cv, &ncv, &e) != CF_OK) {
        cmr_log(CMR_LOG_WARN, "disc_class", "class=%s method=%s%s callees: %s", nd->owner, nd->name, nd->desc, e.msg);
        return 0;
    }
    tlist_t l = {0};
    int rc = 0;
    for (size_t j = 0; j < ncv && rc == 0; j++)
        rc = site(x, &cv[j], &l);
    free(cv);
    for (size_t j = 0; j < l.count && rc == 0; j++)
        rc = add_node(x, (uint32_t)i, depth, &l.items[j]);
    tlist_free(&l);
    return rc;
}

void cmr_disc_tree_free(cmr_disc_tree_t *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n; i++) {
        free(t->nodes[i].owner);
        free(t->nodes[i].name);
        free(t->nodes[i].desc);
    }
    free(t->nodes);
    memset(t, 0, sizeof *t);
}

static void ctx_free(ctx_t *x)
{
    size_t it = 0;
    const void *key;
    size_t klen;
    void *v;
    while (cmr_map_next(&x->classes, &it, &key, &klen, &v)) {
        cls_t *k = v;
        cf_class_free(k->c);
        cmr_buf_free(&k->buf);
        free(k);
    }
    cmr_map_free(&x->classes);
    cmr_u64map_free(&x->placed);
    for (size_t i = 0; i < x->nh; i++) {
        free(x->h[i].name);
        free(x->h[i].subs);
    }
    free(x->h);
    cmr_map_free(&x->hidx);
}

int cmr_disc_discover(const cmr_disc_source_t *src, const char *owner, const char *name, const char *desc,
                      const cmr_disc_opts_t *o, cmr_disc_tree_t *out, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = 0;
    if (out)
        memset(out, 0, sizeof *out);
    if (!src || !src->class_bytes || !owner || !name || !out) {
        if (err && errlen)
            snprintf(err, errlen, "bad arguments");
        return -1;
    }
    ctx_t x = {0};
    x.src = src;
    if (o)
        x.o = *o;
    if (x.o.max_depth <= 0)
        x.o.max_depth = DEFAULT_DEPTH;
    if (x.o.max_depth > UINT16_MAX - 1)
        x.o.max_depth = UINT16_MAX - 1;
    if (x.o.max_nodes == 0)
        x.o.max_nodes = DEFAULT_NODES;
    if (x.o.max_nodes > UINT32_MAX - 1)
        x.o.max_nodes = UINT32_MAX - 1;
    if (x.o.max_impls == 0)
        x.o.max_impls = DEFAULT_IMPLS;
    x.t = out;
    x.err = err;
    x.errlen = errlen;

    int rc = 0;
    cls_t *k = get_class(&x, owner);
    if (!k)
        goto done;
    if (k->state != CLS_OK) {
        fail(&x,
             k->state == CLS_ABSENT ? "class %s is not loaded by this agent (or its bytes are not kept)"
                                    : "class %s is malformed",
             owner);
        goto done;
    }
    for (uint16_t i = 0; i < k->c->method_count && rc == 0; i++) {
        const cf_member *m = &k->c->methods[i];
        if (!str_is(cf_cp_utf8(k->c, m->name), name) || (desc && !str_is(cf_cp_utf8(k->c, m->desc), desc)))
            continue;
        target_t t = {0};
        char *d = dup_str(cf_cp_utf8(k->c, m->desc));
        if (!d || set_target(&x, &t, owner, name, d, has_code(m) ? CMR_DISC_FOUND : CMR_DISC_NO_CODE)) {
            free(d);
            target_free(&t);
            fail(&x, "%s", "out of memory");
            goto done;
        }
        free(d);
        t.via = CMR_DISC_ROOT;
        rc = add_node(&x, UINT32_MAX, 0, &t);
        target_free(&t);
    }
    if (out->n == 0 && !x.failed) {
        fail(&x, "no method %s in the class", name);
        goto done;
    }
    for (size_t i = 0; i < out->n && rc == 0; i++)
        if (out->nodes[i].status == CMR_DISC_FOUND)
            rc = expand(&x, i);
done:
    ctx_free(&x);
    if (x.failed) {
        cmr_disc_tree_free(out);
        return -1;
    }
    return 0;
}

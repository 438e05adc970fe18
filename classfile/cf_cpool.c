/*
 * cf_cpool.c - constant pool: validation of cross references after parsing, typed
 * accessors, and the find-or-add helpers the instrumenter uses to add the constants its
 * probe calls need. Added entries (and their string bytes) are owned by the class arena.
 * The instrumenter rolls additions back by restoring cp_count.
 *
 * Find-or-add searches the pool linearly for a class's first CF_CP_SCANS_BEFORE_INDEX
 * searches, then through a hash index of the pool (cp_index) built then: instrumenting
 * method by method adds constants per method (the probes' method references, the classes
 * in the frames of its handlers), and a linear search of the pool for each made a class
 * with a large pool quadratic to instrument (org/h2/command/Parser, 400 methods over a
 * pool of thousands of entries, took 100-200 ms in cmr-instrumenter). Instrumenting a
 * class at once searches a handful of times, and hashing its whole pool for them cost
 * more than the searches (a quarter of the engine's instrumentation throughput). The index
 * gives what the linear search gave, the lowest index holding the constant: it is built
 * in index order and takes every appended entry, keeping the first of equal entries;
 * after a rollback its slots may name indexes past cp_count or, appended again since,
 * other constants, so a lookup checks each candidate against the pool.
 */
#include "cf_internal.h"

#include <stdlib.h>
#include <xxhash.h>

/* Searches of a class's pool made linearly before its index is built: a linear search
 * reads the pool's tags, the index hashes every constant once. On cf_bench's corpus 8 was
 * the best of 4, 8 and 32 (4: most classes still built the index; 32: method-by-method
 * instrumentation slower). */
#define CF_CP_SCANS_BEFORE_INDEX 8

bool cf_str_eq(cf_str s, const char *z)
{
    size_t n = strlen(z);
    return s.len == n && (n == 0 || memcmp(s.p, z, n) == 0);
}

static bool is_tag(const cf_class *c, uint16_t i, uint8_t tag)
{
    return i != 0 && i < c->cp_count && c->cp[i].tag == tag;
}

cf_err cf_cp_validate(const cf_class *c, cf_error *err)
{
    for (uint32_t i = 1; i < c->cp_count; i++) {
        const cf_const *k = &c->cp[i];
        bool ok = true;
        switch (k->tag) {
        case 0: /* second slot of Long/Double */
        case JVM_CONSTANT_Utf8:
        case JVM_CONSTANT_Integer:
        case JVM_CONSTANT_Float:
        case JVM_CONSTANT_Long:
        case JVM_CONSTANT_Double: break;
        case JVM_CONSTANT_Class:
        case JVM_CONSTANT_String:
        case JVM_CONSTANT_MethodType:
        case JVM_CONSTANT_Module:
        case JVM_CONSTANT_Package: ok = is_tag(c, k->a, JVM_CONSTANT_Utf8); break;
        case JVM_CONSTANT_Fieldref:
        case JVM_CONSTANT_Methodref:
        case JVM_CONSTANT_InterfaceMethodref:
            ok = is_tag(c, k->a, JVM_CONSTANT_Class) && is_tag(c, k->b, JVM_CONSTANT_NameAndType);
            break;
        case JVM_CONSTANT_NameAndType:
            ok = is_tag(c, k->a, JVM_CONSTANT_Utf8) && is_tag(c, k->b, JVM_CONSTANT_Utf8);
            break;
        case JVM_CONSTANT_Dynamic:
        case JVM_CONSTANT_InvokeDynamic: ok = is_tag(c, k->b, JVM_CONSTANT_NameAndType); break;
        case JVM_CONSTANT_MethodHandle:
            if (k->kind < JVM_REF_getField || k->kind > JVM_REF_invokeInterface)
                return cf_fail(err, CF_ERR_CPOOL_VALUE, "constant #%u: method-handle kind %u", i, k->kind);
            if (k->kind <= JVM_REF_putStatic) /* field access */
                ok = is_tag(c, k->a, JVM_CONSTANT_Fieldref);
            else if (k->kind == JVM_REF_invokeInterface)
                ok = is_tag(c, k->a, JVM_CONSTANT_InterfaceMethodref);
            else
                ok = is_tag(c, k->a, JVM_CONSTANT_Methodref) || is_tag(c, k->a, JVM_CONSTANT_InterfaceMethodref);
            break;
        default: return cf_fail(err, CF_ERR_CPOOL_TAG, "constant #%u: tag %u", i, k->tag);
        }
        if (!ok)
            return cf_fail(err, CF_ERR_CPOOL_INDEX,
                           "constant #%u (tag %u) refers to a missing or wrong-kind entry (#%u/#%u)", i, k->tag, k->a,
                           k->b);
    }
    return CF_OK;
}

cf_str cf_cp_utf8(const cf_class *c, uint16_t idx)
{
    cf_str s = {"", 0};
    if (is_tag(c, idx, JVM_CONSTANT_Utf8)) {
        s.p = (const char *)c->cp[idx].data;
        s.len = c->cp[idx].len;
    }
    return s;
}

cf_str cf_cp_class_name(const cf_class *c, uint16_t idx)
{
    if (!is_tag(c, idx, JVM_CONSTANT_Class))
        return (cf_str){"", 0};
    return cf_cp_utf8(c, c->cp[idx].a);
}

cf_str cf_class_name(const cf_class *c)
{
    return cf_cp_class_name(c, c->this_class);
}

bool cf_cp_nat(const cf_class *c, uint16_t idx, cf_str *name, cf_str *desc)
{
    if (!is_tag(c, idx, JVM_CONSTANT_NameAndType))
        return false;
    *name = cf_cp_utf8(c, c->cp[idx].a);
    *desc = cf_cp_utf8(c, c->cp[idx].b);
    return true;
}

bool cf_cp_ref(const cf_class *c, uint16_t idx, cf_str *owner, cf_str *name, cf_str *desc)
{
    if (idx == 0 || idx >= c->cp_count)
        return false;
    uint8_t t = c->cp[idx].tag;
    if (t != JVM_CONSTANT_Fieldref && t != JVM_CONSTANT_Methodref && t != JVM_CONSTANT_InterfaceMethodref)
        return false;
    *owner = cf_cp_class_name(c, c->cp[idx].a);
    return cf_cp_nat(c, c->cp[idx].b, name, desc);
}

/* ---- additions ---- */

static cf_const *cp_append(cf_class *c, uint32_t slots)
{
    if ((uint32_t)c->cp_count + slots > 65535)
        return NULL;
    if (CF_GROW(c->cp, c->cp_cap, (size_t)c->cp_count + slots, 8))
        return NULL;
    cf_const *k = &c->cp[c->cp_count];
    memset(k, 0, sizeof(cf_const) * slots);
    c->cp_count = (uint16_t)(c->cp_count + slots);
    return k;
}

/* ---- the index ---- */

/* The constants find-or-add looks for: by value (Utf8, Integer) or by the indexes they
 * hold (every other kind added through add_ref). */
static bool by_value(uint8_t tag)
{
    return tag == JVM_CONSTANT_Utf8 || tag == JVM_CONSTANT_Integer;
}

static bool indexed(uint8_t tag)
{
    return by_value(tag) || tag == JVM_CONSTANT_Class || tag == JVM_CONSTANT_String || tag == JVM_CONSTANT_MethodType ||
           tag == JVM_CONSTANT_Module || tag == JVM_CONSTANT_Package || tag == JVM_CONSTANT_NameAndType ||
           tag == JVM_CONSTANT_Fieldref || tag == JVM_CONSTANT_Methodref || tag == JVM_CONSTANT_InterfaceMethodref;
}

/* A constant as looked for: tag and value bytes, or tag and indexes. */
typedef struct cp_key {
    uint8_t tag;
    const void *data;
    uint32_t len;
    uint16_t a, b;
} cp_key;

static uint64_t key_hash(const cp_key *k)
{
    if (by_value(k->tag))
        return XXH3_64bits_withSeed(k->data, k->len, k->tag);
    uint64_t x = ((uint64_t)k->tag << 32 | (uint64_t)k->a << 16 | k->b) * 0x9E3779B97F4A7C15ull;
    return x ^ x >> 29;
}

static bool key_is(const cf_class *c, uint32_t i, const cp_key *k)
{
    const cf_const *e = &c->cp[i];
    if (i >= c->cp_count || e->tag != k->tag)
        return false;
    if (by_value(k->tag))
        return e->len == k->len && memcmp(e->data, k->data, k->len) == 0;
    return e->a == k->a && e->b == k->b;
}

static cp_key key_of(const cf_class *c, uint32_t i)
{
    const cf_const *e = &c->cp[i];
    return (cp_key){e->tag, e->data, e->len, e->a, e->b};
}

/* The lowest index holding k, 0 when none. */
static uint16_t index_find(const cf_class *c, const cp_key *k)
{
    uint32_t best = 0;
    for (uint32_t s = (uint32_t)key_hash(k) & c->cp_index_mask; c->cp_index[s]; s = (s + 1) & c->cp_index_mask)
        if ((!best || c->cp_index[s] < best) && key_is(c, c->cp_index[s], k))
            best = c->cp_index[s];
    return (uint16_t)best;
}

/* The index takes entry i unless it holds an equal entry already (a lower one: entries
 * go in in index order), so that a lookup finds the first of equal entries. One hash. */
static void index_put(cf_class *c, uint32_t i)
{
    cp_key k = key_of(c, i);
    uint32_t s = (uint32_t)key_hash(&k) & c->cp_index_mask;
    while (c->cp_index[s]) {
        if (key_is(c, c->cp_index[s], &k))
            return;
        s = (s + 1) & c->cp_index_mask;
    }
    c->cp_index[s] = (uint16_t)i;
    c->cp_index_used++;
}

/* (Re)builds the index over the pool as it is, with room to grow: at most half full. */
static bool index_build(cf_class *c, uint32_t want)
{
    uint32_t cap = 64;
    while (cap < 2 * want)
        cap *= 2;
    uint16_t *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return false;
    free(c->cp_index);
    c->cp_index = slots;
    c->cp_index_mask = cap - 1;
    c->cp_index_used = 0;
    for (uint32_t i = 1; i < c->cp_count; i++)
        if (indexed(c->cp[i].tag))
            index_put(c, i);
    return true;
}

/* Ready for a search, and for one more entry. false when memory ran out. */
static bool index_ready(cf_class *c)
{
    if (c->cp_index && 2 * (c->cp_index_used + 1) <= c->cp_index_mask + 1)
        return true;
    return index_build(c, (uint32_t)c->cp_count + 64);
}

/* Find k: linearly for a class's first searches, then through the index (linearly again
 * when memory for it ran out). */
static uint16_t cp_find(cf_class *c, const cp_key *k)
{
    if ((c->cp_index || ++c->cp_scans > CF_CP_SCANS_BEFORE_INDEX) && index_ready(c))
        return index_find(c, k);
    for (uint32_t i = 1; i < c->cp_count; i++)
        if (key_is(c, i, k))
            return (uint16_t)i;
    return 0;
}

/* An entry was appended at i: the index takes it (a later search rebuilds it when it
 * could not). */
static void cp_indexed(cf_class *c, uint32_t i)
{
    if (!c->cp_index || !indexed(c->cp[i].tag))
        return;
    if (index_ready(c))
        index_put(c, i);
}

uint16_t cf_cp_find_utf8(cf_class *c, const char *s, size_t len)
{
    cp_key k = {JVM_CONSTANT_Utf8, s, (uint32_t)len, 0, 0};
    return len > 65535 ? 0 : cp_find(c, &k);
}

void cf_cp_find_utf8_multi(cf_class *c, const char *const *s, const size_t *len, uint16_t *out, int n)
{
    for (int k = 0; k < n; k++)
        out[k] = cf_cp_find_utf8(c, s[k], len[k]);
}

/* Appends a constant whose value is bytes (Utf8, Integer, Long: `slots` 1 or 2); the bytes
 * are copied into the arena, followed by a NUL. */
static uint16_t append_value(cf_class *c, uint8_t tag, const void *v, size_t len, uint32_t slots)
{
    uint8_t *copy = cf_arena_alloc(c->arena, len + 1); /* zeroed: the NUL */
    if (!copy)
        return 0;
    memcpy(copy, v, len);
    uint16_t idx = c->cp_count;
    cf_const *k = cp_append(c, slots);
    if (!k)
        return 0;
    k->tag = tag;
    k->data = copy;
    k->len = (uint32_t)len;
    cp_indexed(c, idx);
    return idx;
}

uint16_t cf_cp_append_utf8(cf_class *c, const char *s, size_t len)
{
    return len > 65535 ? 0 : append_value(c, JVM_CONSTANT_Utf8, s, len, 1);
}

uint16_t cf_cp_add_utf8(cf_class *c, const char *s, size_t len)
{
    if (len > 65535)
        return 0;
    uint16_t i = cf_cp_find_utf8(c, s, len);
    return i ? i : cf_cp_append_utf8(c, s, len);
}

/* Constants that refer to one Utf8 entry (2 bytes after the tag). */
static bool one_index_tag(uint8_t tag)
{
    return tag == JVM_CONSTANT_Class || tag == JVM_CONSTANT_String || tag == JVM_CONSTANT_MethodType ||
           tag == JVM_CONSTANT_Module || tag == JVM_CONSTANT_Package;
}

uint16_t cf_cp_append_ref(cf_class *c, uint8_t tag, uint16_t a, uint16_t b)
{
    assert(tag >= JVM_CONSTANT_Class && tag != JVM_CONSTANT_MethodHandle); /* an index-only constant */
    uint16_t idx = c->cp_count;
    cf_const *k = cp_append(c, 1);
    if (!k)
        return 0;
    k->tag = tag;
    k->a = a;
    k->b = b;
    k->len = one_index_tag(tag) ? 2 : 4;
    cp_indexed(c, idx);
    return idx;
}

/* Find-or-append of an index-only constant. One-index constants always have b == 0. */
static uint16_t add_ref(cf_class *c, uint8_t tag, uint16_t a, uint16_t b)
{
    cp_key k = {tag, NULL, 0, a, b};
    uint16_t i = cp_find(c, &k);
    return i ? i : cf_cp_append_ref(c, tag, a, b);
}

uint16_t cf_cp_add_ref1(cf_class *c, uint8_t tag, uint16_t a)
{
    assert(one_index_tag(tag));
    return add_ref(c, tag, a, 0);
}

uint16_t cf_cp_add_class(cf_class *c, const char *name)
{
    uint16_t u = cf_cp_add_utf8(c, name, strlen(name));
    return u ? cf_cp_add_ref1(c, JVM_CONSTANT_Class, u) : 0;
}

uint16_t cf_cp_add_string(cf_class *c, const char *s, size_t len)
{
    uint16_t u = cf_cp_add_utf8(c, s, len);
    return u ? cf_cp_add_ref1(c, JVM_CONSTANT_String, u) : 0;
}

/* A Methodref or Fieldref (tag) of the class at class_index: name and desc. */
static uint16_t add_member_ref(cf_class *c, uint8_t tag, uint16_t class_index, const char *name, const char *desc)
{
    uint16_t n = cf_cp_add_utf8(c, name, strlen(name));
    uint16_t d = cf_cp_add_utf8(c, desc, strlen(desc));
    if (!class_index || !n || !d)
        return 0;
    uint16_t nat = add_ref(c, JVM_CONSTANT_NameAndType, n, d);
    return nat ? add_ref(c, tag, class_index, nat) : 0;
}

uint16_t cf_cp_add_methodref(cf_class *c, const char *owner, const char *name, const char *desc)
{
    return add_member_ref(c, JVM_CONSTANT_Methodref, cf_cp_add_class(c, owner), name, desc);
}

uint16_t cf_cp_add_fieldref(cf_class *c, uint16_t class_index, const char *name, const char *desc)
{
    return add_member_ref(c, JVM_CONSTANT_Fieldref, class_index, name, desc);
}

uint16_t cf_cp_add_long(cf_class *c, int64_t v)
{
    uint8_t d[8];
    cmr_put_be64(d, (uint64_t)v);
    return append_value(c, JVM_CONSTANT_Long, d, sizeof d, 2);
}

uint16_t cf_cp_add_int(cf_class *c, int32_t v)
{
    uint8_t d[4];
    cmr_put_be32(d, (uint32_t)v);
    cp_key k = {JVM_CONSTANT_Integer, d, sizeof d, 0, 0};
    uint16_t i = cp_find(c, &k);
    return i ? i : append_value(c, JVM_CONSTANT_Integer, d, sizeof d, 1);
}

/*
 * cf_parse.c - reads a class file into a cf_class.
 *
 * Every structure is bounds checked; constant-pool cross references are validated by
 * cf_cp_validate (cf_cpool.c). Attributes are kept as raw slices of the input (so unknown
 * attributes survive byte for byte); the Code attribute is decoded on demand by cf_code.c.
 * Ownership: the returned cf_class borrows `bytes` and owns its arena.
 */
#include "cf_internal.h"

#include <stdlib.h>

static cf_err parse_cpool(cf_class *c, cf_rd *r, cf_error *err)
{
    c->cp_count = cf_rd_u2(r);
    if (r->bad)
        return cf_fail(err, CF_ERR_TRUNCATED, "truncated before constant_pool_count");
    if (c->cp_count == 0)
        return cf_fail(err, CF_ERR_LENGTH, "constant_pool_count is 0");
    size_t raw_start = r->pos;
    /* room for the constants an instrumentation adds; not zeroed: every parsed slot is fully
     * set below, appended slots are cleared when added */
    size_t cap = (size_t)c->cp_count + 32;
    if (CF_GROW(c->cp, c->cp_cap, cap, cap))
        return cf_fail(err, CF_ERR_NOMEM, "out of memory (constant pool)");
    memset(&c->cp[0], 0, sizeof(cf_const));
    for (uint32_t i = 1; i < c->cp_count; i++) {
        cf_const *k = &c->cp[i];
        size_t at = r->pos;
        k->kind = 0;
        k->a = k->b = 0;
        k->data = NULL;
        k->len = 0;
        k->tag = cf_rd_u1(r);
        switch (k->tag) {
        case JVM_CONSTANT_Utf8:
            k->len = cf_rd_u2(r);
            k->data = cf_rd_skip(r, k->len);
            break;
        case JVM_CONSTANT_Integer:
        case JVM_CONSTANT_Float:
            k->len = 4;
            k->data = cf_rd_skip(r, 4);
            break;
        case JVM_CONSTANT_Long:
        case JVM_CONSTANT_Double:
            k->len = 8;
            k->data = cf_rd_skip(r, 8);
            if (i + 1 >= c->cp_count)
                return cf_fail(err, CF_ERR_CPOOL_INDEX, "constant #%u: 8-byte constant in last slot", i);
            i++; /* the next slot is unusable (tag 0) */
            memset(&c->cp[i], 0, sizeof(cf_const));
            break;
        case JVM_CONSTANT_Class:
        case JVM_CONSTANT_String:
        case JVM_CONSTANT_MethodType:
        case JVM_CONSTANT_Module:
        case JVM_CONSTANT_Package:
            k->len = 2;
            k->data = r->p + r->pos;
            k->a = cf_rd_u2(r);
            break;
        case JVM_CONSTANT_Fieldref:
        case JVM_CONSTANT_Methodref:
        case JVM_CONSTANT_InterfaceMethodref:
        case JVM_CONSTANT_NameAndType:
        case JVM_CONSTANT_Dynamic:
        case JVM_CONSTANT_InvokeDynamic:
            k->len = 4;
            k->data = r->p + r->pos;
            k->a = cf_rd_u2(r);
            k->b = cf_rd_u2(r);
            break;
        case JVM_CONSTANT_MethodHandle:
            k->len = 3;
            k->data = r->p + r->pos;
            k->kind = cf_rd_u1(r);
            k->a = cf_rd_u2(r);
            break;
        default:
            if (r->bad)
                break;
            return cf_fail(err, CF_ERR_CPOOL_TAG, "constant #%u at offset %zu: unknown tag %u", i, at, k->tag);
        }
        if (r->bad)
            return cf_fail(err, CF_ERR_TRUNCATED, "truncated in constant #%u", i);
    }
    c->cp_raw = r->p + raw_start;
    c->cp_raw_len = (uint32_t)(r->pos - raw_start);
    c->cp_raw_count = c->cp_count;
    return CF_OK;
}

static cf_err parse_attrs(cf_class *c, cf_rd *r, uint16_t *count, cf_attr **attrs, const char *where, cf_error *err)
{
    *count = cf_rd_u2(r);
    if (r->bad)
        return cf_fail(err, CF_ERR_TRUNCATED, "truncated before %s attributes_count", where);
    if (*count == 0) {
        *attrs = NULL;
        return CF_OK;
    }
    /* each attribute takes at least 6 bytes: reject absurd counts before allocating */
    if ((size_t)*count * 6 > r->len - r->pos)
        return cf_fail(err, CF_ERR_LENGTH, "%s attributes_count %u exceeds the remaining bytes", where, *count);
    *attrs = cf_arena_alloc(c->arena, sizeof(cf_attr) * *count);
    if (!*attrs)
        return cf_fail(err, CF_ERR_NOMEM, "out of memory (attributes)");
    for (uint16_t i = 0; i < *count; i++) {
        cf_attr *a = &(*attrs)[i];
        a->name = cf_rd_u2(r);
        a->len = cf_rd_u4(r);
        a->data = cf_rd_skip(r, a->len);
        if (r->bad)
            return cf_fail(err, CF_ERR_TRUNCATED, "%s attribute %u: length %u past end of class", where, i, a->len);
        if (a->name == 0 || a->name >= c->cp_count || c->cp[a->name].tag != JVM_CONSTANT_Utf8)
            return cf_fail(err, CF_ERR_CPOOL_INDEX, "%s attribute %u: name index %u is not Utf8", where, i, a->name);
    }
    return CF_OK;
}

static cf_err parse_members(cf_class *c, cf_rd *r, uint16_t *count, cf_member **out, const char *what, cf_error *err)
{
    *count = cf_rd_u2(r);
    if (r->bad)
        return cf_fail(err, CF_ERR_TRUNCATED, "truncated before %s_count", what);
    if ((size_t)*count * 8 > r->len - r->pos)
        return cf_fail(err, CF_ERR_LENGTH, "%s_count %u exceeds the remaining bytes", what, *count);
    *out = *count ? cf_arena_alloc(c->arena, sizeof(cf_member) * *count) : NULL;
    if (*count && !*out)
        return cf_fail(err, CF_ERR_NOMEM, "out of memory (%ss)", what);
    for (uint16_t i = 0; i < *count; i++) {
        cf_member *m = &(*out)[i];
        m->access = cf_rd_u2(r);
        m->name = cf_rd_u2(r);
        m->desc = cf_rd_u2(r);
        if (r->bad)
            return cf_fail(err, CF_ERR_TRUNCATED, "truncated in %s %u", what, i);
        if (m->name == 0 || m->name >= c->cp_count || c->cp[m->name].tag != JVM_CONSTANT_Utf8 || m->desc == 0 ||
            m->desc >= c->cp_count || c->cp[m->desc].tag != JVM_CONSTANT_Utf8)
            return cf_fail(err, CF_ERR_CPOOL_INDEX, "%s %u: name/descriptor index is not Utf8", what, i);
        cf_err e = parse_attrs(c, r, &m->attr_count, &m->attrs, what, err);
        if (e)
            return e;
    }
    return CF_OK;
}

static cf_err parse_class(cf_class *c, const uint8_t *bytes, size_t len, cf_error *err)
{
    cf_rd r;
    cf_rd_init(&r, bytes, len);
    uint32_t magic = cf_rd_u4(&r);
    c->minor = cf_rd_u2(&r);
    c->major = cf_rd_u2(&r);
    if (r.bad)
        return cf_fail(err, CF_ERR_TRUNCATED, "truncated header (%zu bytes)", len);
    if (magic != JVM_CLASSFILE_MAGIC)
        return cf_fail(err, CF_ERR_MAGIC, "bad magic 0x%08X", magic);
    if (c->major < JVM_CLASSFILE_MAJOR_MIN || c->major > JVM_CLASSFILE_MAJOR_MAX)
        return cf_fail(err, CF_ERR_VERSION, "class-file version %u.%u not in 45..69", c->major, c->minor);
    cf_err e = parse_cpool(c, &r, err);
    if (e)
        return e;
    e = cf_cp_validate(c, err);
    if (e)
        return e;
    c->access = cf_rd_u2(&r);
    c->this_class = cf_rd_u2(&r);
    c->super_class = cf_rd_u2(&r);
    c->iface_count = cf_rd_u2(&r);
    c->ifaces = cf_rd_skip(&r, (size_t)c->iface_count * 2);
    if (r.bad)
        return cf_fail(err, CF_ERR_TRUNCATED, "truncated in class header or interfaces");
    if (c->this_class == 0 || c->this_class >= c->cp_count || c->cp[c->this_class].tag != JVM_CONSTANT_Class)
        return cf_fail(err, CF_ERR_CPOOL_INDEX, "this_class #%u is not a Class", c->this_class);
    if (c->super_class != 0 && (c->super_class >= c->cp_count || c->cp[c->super_class].tag != JVM_CONSTANT_Class))
        return cf_fail(err, CF_ERR_CPOOL_INDEX, "super_class #%u is not a Class", c->super_class);
    for (uint16_t i = 0; i < c->iface_count; i++) {
        uint16_t x = cmr_be16(c->ifaces + 2 * i);
        if (x == 0 || x >= c->cp_count || c->cp[x].tag != JVM_CONSTANT_Class)
            return cf_fail(err, CF_ERR_CPOOL_INDEX, "interface %u: #%u is not a Class", i, x);
    }
    e = parse_members(c, &r, &c->field_count, &c->fields, "field", err);
    if (e)
        return e;
    e = parse_members(c, &r, &c->method_count, &c->methods, "method", err);
    if (e)
        return e;
    e = parse_attrs(c, &r, &c->attr_count, &c->attrs, "class", err);
    if (e)
        return e;
    if (r.pos != len)
        return cf_fail(err, CF_ERR_TRAILING, "%zu trailing bytes after the class", len - r.pos);
    return CF_OK;
}

cf_err cf_class_parse(const uint8_t *bytes, size_t len, cf_class **out, cf_error *err)
{
    *out = NULL;
    if (!bytes && len)
        return cf_fail(err, CF_ERR_ARG, "NULL input");
    cf_arena *a = cf_arena_new();
    if (!a)
        return cf_fail(err, CF_ERR_NOMEM, "out of memory");
    cf_class *c = cf_arena_alloc(a, sizeof *c);
    if (!c) {
        cf_arena_free(a);
        return cf_fail(err, CF_ERR_NOMEM, "out of memory");
    }
    c->arena = a;
    cf_err e = parse_class(c, bytes, len, err);
    if (e) {
        cf_class_free(c);
        return e;
    }
    if (err) {
        err->code = CF_OK;
        err->msg[0] = 0;
    }
    *out = c;
    return CF_OK;
}

void cf_class_free(cf_class *c)
{
    if (!c)
        return;
    free(c->cp);
    free(c->cp_index);
    cf_arena_free(c->arena); /* c itself lives in its arena */
}

const cf_attr *cf_attr_find(const cf_class *c, const cf_attr *attrs, uint16_t n, const char *name)
{
    for (uint16_t i = 0; i < n; i++)
        if (cf_str_eq(cf_cp_utf8(c, attrs[i].name), name))
            return &attrs[i];
    return NULL;
}

/*
 * cf_write.c - writes a cf_class back to class-file bytes.
 *
 * The parsed part of the constant pool is copied from the input (entries are only appended),
 * appended constants are encoded from their decoded fields (tag, kind, a, b) or value bytes;
 * with CF_WRITE_REENCODE every constant is encoded from its fields. Attributes are written
 * from their (possibly replaced) data. A class that was parsed and not modified is written
 * back byte-identical both ways, which the corpus test checks. The output is malloc'ed and
 * owned by the caller.
 */
#include "cf_internal.h"

#include <stdlib.h>

static size_t attrs_size(const cf_attr *a, uint16_t n)
{
    size_t s = 2;
    for (uint16_t i = 0; i < n; i++)
        s += 6 + (size_t)a[i].len;
    return s;
}

static size_t const_size(const cf_const *k)
{
    switch (k->tag) {
    case 0: return 0;
    case JVM_CONSTANT_Utf8: return 3 + (size_t)k->len;
    case JVM_CONSTANT_MethodHandle: return 4;
    case JVM_CONSTANT_Class:
    case JVM_CONSTANT_String:
    case JVM_CONSTANT_MethodType:
    case JVM_CONSTANT_Module:
    case JVM_CONSTANT_Package: return 3;
    case JVM_CONSTANT_Long:
    case JVM_CONSTANT_Double: return 9;
    default: return 5;
    }
}

static bool use_raw(const cf_class *c, unsigned flags)
{
    return !(flags & CF_WRITE_REENCODE) && c->cp_raw && c->cp_count >= c->cp_raw_count;
}

static size_t class_size(const cf_class *c, unsigned flags)
{
    size_t s = 10;
    uint32_t first = 1;
    if (use_raw(c, flags)) {
        s += c->cp_raw_len;
        first = c->cp_raw_count;
    }
    for (uint32_t i = first; i < c->cp_count; i++)
        s += const_size(&c->cp[i]);
    s += 8 + 2 * (size_t)c->iface_count;
    s += 2;
    for (uint16_t i = 0; i < c->field_count; i++)
        s += 6 + attrs_size(c->fields[i].attrs, c->fields[i].attr_count);
    s += 2;
    for (uint16_t i = 0; i < c->method_count; i++)
        s += 6 + attrs_size(c->methods[i].attrs, c->methods[i].attr_count);
    s += attrs_size(c->attrs, c->attr_count);
    return s;
}

size_t cf_class_size(const cf_class *c)
{
    return class_size(c, 0);
}

static uint8_t *put_attrs(uint8_t *o, const cf_attr *a, uint16_t n)
{
    cmr_put_be16(o, n);
    o += 2;
    for (uint16_t i = 0; i < n; i++) {
        cmr_put_be16(o, a[i].name);
        cmr_put_be32(o + 2, a[i].len);
        if (a[i].len)
            memcpy(o + 6, a[i].data, a[i].len);
        o += 6 + (size_t)a[i].len;
    }
    return o;
}

static uint8_t *put_members(uint8_t *o, const cf_member *m, uint16_t n)
{
    cmr_put_be16(o, n);
    o += 2;
    for (uint16_t i = 0; i < n; i++) {
        cmr_put_be16(o, m[i].access);
        cmr_put_be16(o + 2, m[i].name);
        cmr_put_be16(o + 4, m[i].desc);
        o = put_attrs(o + 6, m[i].attrs, m[i].attr_count);
    }
    return o;
}

static uint8_t *put_const(uint8_t *o, const cf_const *k)
{
    if (k->tag == 0)
        return o;
    *o++ = k->tag;
    switch (k->tag) {
    case JVM_CONSTANT_Utf8:
        cmr_put_be16(o, (uint16_t)k->len);
        if (k->len)
            memcpy(o + 2, k->data, k->len);
        return o + 2 + k->len;
    case JVM_CONSTANT_Integer:
    case JVM_CONSTANT_Float: memcpy(o, k->data, 4); return o + 4;
    case JVM_CONSTANT_Long:
    case JVM_CONSTANT_Double: memcpy(o, k->data, 8); return o + 8;
    case JVM_CONSTANT_MethodHandle:
        *o = k->kind;
        cmr_put_be16(o + 1, k->a);
        return o + 3;
    case JVM_CONSTANT_Class:
    case JVM_CONSTANT_String:
    case JVM_CONSTANT_MethodType:
    case JVM_CONSTANT_Module:
    case JVM_CONSTANT_Package: cmr_put_be16(o, k->a); return o + 2;
    default:
        cmr_put_be16(o, k->a);
        cmr_put_be16(o + 2, k->b);
        return o + 4;
    }
}

cf_err cf_class_write(const cf_class *c, uint8_t **out, size_t *out_len, cf_error *err)
{
    return cf_class_write_flags(c, 0, out, out_len, err);
}

cf_err cf_class_write_flags(const cf_class *c, unsigned flags, uint8_t **out, size_t *out_len, cf_error *err)
{
    size_t n = class_size(c, flags);
    uint8_t *b = malloc(n);
    if (!b)
        return cf_fail(err, CF_ERR_NOMEM, "out of memory (%zu bytes)", n);
    uint8_t *o = b;
    cmr_put_be32(o, JVM_CLASSFILE_MAGIC);
    cmr_put_be16(o + 4, c->minor);
    cmr_put_be16(o + 6, c->major);
    cmr_put_be16(o + 8, c->cp_count);
    o += 10;
    uint32_t first = 1;
    if (use_raw(c, flags)) {
        memcpy(o, c->cp_raw, c->cp_raw_len);
        o += c->cp_raw_len;
        first = c->cp_raw_count;
    }
    for (uint32_t i = first; i < c->cp_count; i++)
        o = put_const(o, &c->cp[i]);
    cmr_put_be16(o, c->access);
    cmr_put_be16(o + 2, c->this_class);
    cmr_put_be16(o + 4, c->super_class);
    cmr_put_be16(o + 6, c->iface_count);
    o += 8;
    if (c->iface_count)
        memcpy(o, c->ifaces, 2 * (size_t)c->iface_count);
    o += 2 * (size_t)c->iface_count;
    o = put_members(o, c->fields, c->field_count);
    o = put_members(o, c->methods, c->method_count);
    o = put_attrs(o, c->attrs, c->attr_count);
    assert((size_t)(o - b) == n); /* class_size and the writers agree */
    if ((size_t)(o - b) != n) {
        free(b);
        return cf_fail(err, CF_ERR_LIMIT, "internal size mismatch");
    }
    *out = b;
    *out_len = n;
    return CF_OK;
}

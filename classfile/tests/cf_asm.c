/* cf_asm.c - see cf_asm.h. Test-only; no deduplication, no validation. */
#include "cf_asm.h"

#include <stdlib.h>

void a_init(asm_cls *a, uint16_t major)
{
    memset(a, 0, sizeof *a);
    a->major = major;
    a->cp_count = 1;
}

void a_free(asm_cls *a)
{
    cf_buf_free(&a->cp);
    cf_buf_free(&a->fields);
    cf_buf_free(&a->methods);
    cf_buf_free(&a->attrs);
}

uint16_t a_utf8n(asm_cls *a, const char *s, size_t n)
{
    cf_buf_u1(&a->cp, JVM_CONSTANT_Utf8);
    cf_buf_u2(&a->cp, (uint16_t)n);
    cf_buf_bytes(&a->cp, s, n);
    return a->cp_count++;
}
uint16_t a_utf8(asm_cls *a, const char *s)
{
    return a_utf8n(a, s, strlen(s));
}

static uint16_t one(asm_cls *a, uint8_t tag, uint16_t x)
{
    cf_buf_u1(&a->cp, tag);
    cf_buf_u2(&a->cp, x);
    return a->cp_count++;
}
static uint16_t two(asm_cls *a, uint8_t tag, uint16_t x, uint16_t y)
{
    cf_buf_u1(&a->cp, tag);
    cf_buf_u2(&a->cp, x);
    cf_buf_u2(&a->cp, y);
    return a->cp_count++;
}

uint16_t a_class(asm_cls *a, const char *name)
{
    return one(a, JVM_CONSTANT_Class, a_utf8(a, name));
}
uint16_t a_string(asm_cls *a, const char *s)
{
    return one(a, JVM_CONSTANT_String, a_utf8(a, s));
}
uint16_t a_int(asm_cls *a, int32_t v)
{
    cf_buf_u1(&a->cp, JVM_CONSTANT_Integer);
    cf_buf_u4(&a->cp, (uint32_t)v);
    return a->cp_count++;
}
uint16_t a_float(asm_cls *a, uint32_t bits)
{
    cf_buf_u1(&a->cp, JVM_CONSTANT_Float);
    cf_buf_u4(&a->cp, bits);
    return a->cp_count++;
}
static uint16_t eight(asm_cls *a, uint8_t tag, uint64_t v)
{
    cf_buf_u1(&a->cp, tag);
    cf_buf_u4(&a->cp, (uint32_t)(v >> 32));
    cf_buf_u4(&a->cp, (uint32_t)v);
    uint16_t i = a->cp_count;
    a->cp_count += 2;
    return i;
}
uint16_t a_long(asm_cls *a, int64_t v)
{
    return eight(a, JVM_CONSTANT_Long, (uint64_t)v);
}
uint16_t a_double(asm_cls *a, uint64_t bits)
{
    return eight(a, JVM_CONSTANT_Double, bits);
}
uint16_t a_nat(asm_cls *a, const char *name, const char *desc)
{
    uint16_t n = a_utf8(a, name), d = a_utf8(a, desc);
    return two(a, JVM_CONSTANT_NameAndType, n, d);
}
uint16_t a_ref(asm_cls *a, uint8_t tag, const char *owner, const char *name, const char *desc)
{
    uint16_t c = a_class(a, owner), nt = a_nat(a, name, desc);
    return two(a, tag, c, nt);
}
uint16_t a_mh(asm_cls *a, uint8_t kind, uint16_t ref)
{
    cf_buf_u1(&a->cp, JVM_CONSTANT_MethodHandle);
    cf_buf_u1(&a->cp, kind);
    cf_buf_u2(&a->cp, ref);
    return a->cp_count++;
}
uint16_t a_mt(asm_cls *a, const char *desc)
{
    return one(a, JVM_CONSTANT_MethodType, a_utf8(a, desc));
}
uint16_t a_dyn(asm_cls *a, uint8_t tag, uint16_t bsm, const char *name, const char *desc)
{
    uint16_t nt = a_nat(a, name, desc);
    return two(a, tag, bsm, nt);
}
uint16_t a_modpkg(asm_cls *a, uint8_t tag, const char *name)
{
    return one(a, tag, a_utf8(a, name));
}

void aa_add(asm_cls *a, asm_attrs *x, const char *name, const void *data, uint32_t len)
{
    cf_buf_u2(&x->b, a_utf8(a, name));
    cf_buf_u4(&x->b, len);
    cf_buf_bytes(&x->b, data, len);
    x->n++;
}

void a_method(asm_cls *a, uint16_t access, const char *name, const char *desc, const uint8_t *code, uint32_t code_len,
              uint16_t max_stack, uint16_t max_locals, const uint16_t *exc, uint16_t nexc, asm_attrs *code_attrs)
{
    uint16_t n = a_utf8(a, name), d = a_utf8(a, desc), ca = a_utf8(a, "Code");
    cf_buf *m = &a->methods;
    cf_buf_u2(m, access);
    cf_buf_u2(m, n);
    cf_buf_u2(m, d);
    cf_buf_u2(m, 1);
    cf_buf_u2(m, ca);
    uint32_t alen = 2 + 2 + 4 + code_len + 2 + 8u * nexc + 2 + (code_attrs ? (uint32_t)code_attrs->b.len : 0);
    cf_buf_u4(m, alen);
    cf_buf_u2(m, max_stack);
    cf_buf_u2(m, max_locals);
    cf_buf_u4(m, code_len);
    cf_buf_bytes(m, code, code_len);
    cf_buf_u2(m, nexc);
    for (uint16_t i = 0; i < 4u * nexc; i++)
        cf_buf_u2(m, exc[i]);
    cf_buf_u2(m, code_attrs ? code_attrs->n : 0);
    if (code_attrs) {
        cf_buf_bytes(m, code_attrs->b.data, code_attrs->b.len);
        cf_buf_free(&code_attrs->b);
    }
    a->nmethods++;
}

void a_method_code_body(asm_cls *a, uint16_t access, const char *name, const char *desc, const uint8_t *body,
                        uint32_t len)
{
    uint16_t n = a_utf8(a, name), d = a_utf8(a, desc), ca = a_utf8(a, "Code");
    cf_buf *m = &a->methods;
    cf_buf_u2(m, access);
    cf_buf_u2(m, n);
    cf_buf_u2(m, d);
    cf_buf_u2(m, 1);
    cf_buf_u2(m, ca);
    cf_buf_u4(m, len);
    cf_buf_bytes(m, body, len);
    a->nmethods++;
}

void a_method_nocode(asm_cls *a, uint16_t access, const char *name, const char *desc)
{
    cf_buf *m = &a->methods;
    cf_buf_u2(m, access);
    cf_buf_u2(m, a_utf8(a, name));
    cf_buf_u2(m, a_utf8(a, desc));
    cf_buf_u2(m, 0);
    a->nmethods++;
}

void a_field(asm_cls *a, uint16_t access, const char *name, const char *desc)
{
    cf_buf *f = &a->fields;
    cf_buf_u2(f, access);
    cf_buf_u2(f, a_utf8(a, name));
    cf_buf_u2(f, a_utf8(a, desc));
    cf_buf_u2(f, 0);
    a->nfields++;
}

void a_class_attr(asm_cls *a, const char *name, const void *data, uint32_t len)
{
    cf_buf_u2(&a->attrs, a_utf8(a, name));
    cf_buf_u4(&a->attrs, len);
    cf_buf_bytes(&a->attrs, data, len);
    a->nattrs++;
}

uint8_t *a_finish(asm_cls *a, const char *this_name, const char *super_name, size_t *len)
{
    uint16_t t = a_class(a, this_name);
    uint16_t s = super_name ? a_class(a, super_name) : 0;
    cf_buf o = {0};
    cf_buf_u4(&o, JVM_CLASSFILE_MAGIC);
    cf_buf_u2(&o, 0);
    cf_buf_u2(&o, a->major);
    cf_buf_u2(&o, a->cp_count);
    cf_buf_bytes(&o, a->cp.data, a->cp.len);
    cf_buf_u2(&o, JVM_ACC_PUBLIC | JVM_ACC_SUPER);
    cf_buf_u2(&o, t);
    cf_buf_u2(&o, s);
    cf_buf_u2(&o, 0);
    cf_buf_u2(&o, a->nfields);
    cf_buf_bytes(&o, a->fields.data, a->fields.len);
    cf_buf_u2(&o, a->nmethods);
    cf_buf_bytes(&o, a->methods.data, a->methods.len);
    cf_buf_u2(&o, a->nattrs);
    cf_buf_bytes(&o, a->attrs.data, a->attrs.len);
    a_free(a);
    *len = o.len;
    return o.data;
}

/*
 * cf_unit_test.c - unit tests of the class-file engine on classes crafted with cf_asm:
 * round trip of every constant-pool tag, method ids, callees, probe insertion, relocation of
 * branches (with widening), switches, exception tables, StackMapTable (including
 * Uninitialized offsets), LineNumberTable/LocalVariableTable, constructors, refusals.
 * No JVM needed (label unit); the JVM tests in tests/classfile judge with the real verifier.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "cf_asm.h"
#include "cf_stackmap.h"
#include "cf_testprobes.h"

static const cf_probe *timer(void)
{
    return cf_test_probe(CF_PROBE_TIMER);
}

static cf_class *parse_ok(const uint8_t *b, size_t n)
{
    cf_class *c = NULL;
    cf_error e;
    cf_err r = cf_class_parse(b, n, &c, &e);
    if (r)
        fprintf(stderr, "parse: %s\n", e.msg);
    assert_int_equal(r, CF_OK);
    return c;
}

static int method_index(const cf_class *c, const char *name)
{
    for (uint16_t i = 0; i < c->method_count; i++)
        if (cf_str_eq(cf_cp_utf8(c, c->methods[i].name), name))
            return i;
    fail_msg("no method %s", name);
    return -1;
}

static void code_of(const cf_class *c, const char *name, cf_code *code)
{
    const cf_attr *a = cf_method_code_attr(c, &c->methods[method_index(c, name)]);
    assert_non_null(a);
    cf_error e;
    assert_int_equal(cf_code_parse(c, a, code, &e), CF_OK);
}

static const cf_attr *sub_attr(const cf_class *c, const cf_code *code, const char *name)
{
    for (uint16_t i = 0; i < code->attr_count; i++)
        if (cf_str_eq(cf_cp_utf8(c, code->attrs[i].name), name))
            return &code->attrs[i];
    return NULL;
}

/* Instruments every method with the timer kind; returns the new class (must change). */
static cf_class *instrument_ok(const uint8_t *b, size_t n, uint8_t **out, cf_instrument_result *r)
{
    cf_error e;
    cf_err rc = cf_instrument_class(b, n, timer(), NULL, NULL, r, &e);
    if (rc)
        fprintf(stderr, "instrument: %s\n", e.msg);
    assert_int_equal(rc, CF_OK);
    assert_non_null(r->bytes);
    assert_int_equal(cf_class_check(r->bytes, r->len, &e), CF_OK);
    *out = r->bytes;
    return parse_ok(r->bytes, r->len);
}

/* ------------------------------------------------------------------ round trip */

static void test_roundtrip_all_tags(void **st)
{
    (void)st;
    asm_cls a;
    a_init(&a, 61);
    a_int(&a, -5);
    a_float(&a, 0x3fc00000u);
    a_long(&a, INT64_C(0x123456789abcdef));
    a_double(&a, UINT64_C(0x400921fb54442d18));
    a_string(&a, "hello");
    uint16_t fr = a_ref(&a, JVM_CONSTANT_Fieldref, "p/A", "f", "I");
    uint16_t mr = a_ref(&a, JVM_CONSTANT_Methodref, "p/A", "m", "()V");
    uint16_t imr = a_ref(&a, JVM_CONSTANT_InterfaceMethodref, "p/I", "i", "()V");
    uint16_t bsm = a_ref(&a, JVM_CONSTANT_Methodref, "p/Boot", "bsm",
                         "(Ljava/lang/invoke/MethodHandles$Lookup;Ljava/lang/String;Ljava/lang/invoke/"
                         "MethodType;)Ljava/lang/invoke/CallSite;");
    uint16_t mh1 = a_mh(&a, JVM_REF_getField, fr);
    uint16_t mh5 = a_mh(&a, JVM_REF_invokeVirtual, mr);
    a_mh(&a, JVM_REF_invokeInterface, imr);
    uint16_t mh6 = a_mh(&a, JVM_REF_invokeStatic, bsm);
    a_mt(&a, "(I)J");
    a_dyn(&a, JVM_CONSTANT_Dynamic, 0, "c", "J");
    uint16_t indy = a_dyn(&a, JVM_CONSTANT_InvokeDynamic, 0, "run", "()Ljava/lang/Runnable;");
    a_modpkg(&a, JVM_CONSTANT_Module, "my.mod");
    a_modpkg(&a, JVM_CONSTANT_Package, "p");
    /* static arguments: a field handle (not a call: skipped), then the implementation */
    uint8_t bsm_attr[] = {
        0,           1, (uint8_t)(mh6 >> 8), (uint8_t)mh6, 0, 2, (uint8_t)(mh1 >> 8), (uint8_t)mh1, (uint8_t)(mh5 >> 8),
        (uint8_t)mh5};
    a_class_attr(&a, "BootstrapMethods", bsm_attr, sizeof bsm_attr);
    a_class_attr(&a, "ZzUnknown", "\x01\x02\x03\xff", 4);
    a_field(&a, JVM_ACC_PRIVATE, "f", "I");
    uint8_t code[] = {JVM_OPC_invokedynamic, (uint8_t)(indy >> 8), (uint8_t)indy, 0, 0, JVM_OPC_pop, JVM_OPC_return};
    asm_attrs ca = {0};
    uint8_t lnt[] = {0, 1, 0, 0, 0, 42};
    aa_add(&a, &ca, "LineNumberTable", lnt, sizeof lnt);
    aa_add(&a, &ca, "XyzCodeAttr", "abc", 3);
    a_method(&a, JVM_ACC_PUBLIC | JVM_ACC_STATIC, "run", "()V", code, sizeof code, 1, 0, NULL, 0, &ca);
    size_t n;
    uint8_t *b = a_finish(&a, "p/A", "java/lang/Object", &n);
    cf_class *c = parse_ok(b, n);
    assert_int_equal(c->major, 61);
    assert_int_equal(c->cp[1].tag, JVM_CONSTANT_Integer);
    assert_int_equal(c->cp[4].tag, 0); /* second slot of the Long */
    uint8_t *o;
    size_t ol;
    cf_error e;
    assert_int_equal(cf_class_write(c, &o, &ol, &e), CF_OK);
    assert_int_equal(ol, n);
    assert_memory_equal(o, b, n);
    assert_int_equal(cf_class_size(c), n);
    free(o);
    assert_int_equal(cf_class_write_flags(c, CF_WRITE_REENCODE, &o, &ol, &e), CF_OK);
    assert_int_equal(ol, n);
    assert_memory_equal(o, b, n);
    /* callees: invokedynamic resolved with its bootstrap method */
    cf_callee *v;
    size_t k;
    assert_int_equal(cf_method_callees(c, &c->methods[0], &v, &k, &e), CF_OK);
    assert_int_equal(k, 1);
    assert_int_equal(v[0].opcode, JVM_OPC_invokedynamic);
    assert_true(cf_str_eq(v[0].name, "run"));
    assert_true(cf_str_eq(v[0].bsm_owner, "p/Boot"));
    assert_true(cf_str_eq(v[0].bsm_name, "bsm"));
    assert_int_equal(v[0].impl_kind, JVM_REF_invokeVirtual);
    assert_true(cf_str_eq(v[0].impl_owner, "p/A"));
    assert_true(cf_str_eq(v[0].impl_name, "m"));
    assert_true(cf_str_eq(v[0].impl_desc, "()V"));
    free(v);
    free(o);
    cf_class_free(c);
    free(b);
}

/* ------------------------------------------------------------------ method ids */

static void test_method_id(void **st)
{
    (void)st;
    const char *s = "java/lang/String.length()I";
    cf_str o = {"java/lang/String", 16}, n = {"length", 6}, d = {"()I", 3};
    assert_int_equal(cf_method_id_of(o, n, d), XXH3_64bits(s, strlen(s)));
    /* modified UTF-8: encoded NUL and a surrogate pair (U+1F600) become standard UTF-8 */
    cf_str n2 = {"a\xC0\x80"
                 "b\xED\xA0\xBD\xED\xB8\x80",
                 10};
    const char want[] = "java/lang/String.a\0b\xF0\x9F\x98\x80()I";
    assert_int_equal(cf_method_id_of(o, n2, d), XXH3_64bits(want, sizeof want - 1));
}

/* ------------------------------------------------------------------ callees */

static void test_callees(void **st)
{
    (void)st;
    asm_cls a;
    a_init(&a, 52);
    uint16_t v = a_ref(&a, JVM_CONSTANT_Methodref, "p/A", "v", "()V");
    uint16_t s = a_ref(&a, JVM_CONSTANT_Methodref, "p/B", "s", "(I)J");
    uint16_t sp = a_ref(&a, JVM_CONSTANT_Methodref, "java/lang/Object", "<init>", "()V");
    uint16_t it = a_ref(&a, JVM_CONSTANT_InterfaceMethodref, "java/util/List", "size", "()I");
    uint8_t code[] = {JVM_OPC_aload_0,
                      JVM_OPC_invokevirtual,
                      0,
                      (uint8_t)v,
                      JVM_OPC_aload_0,
                      JVM_OPC_invokespecial,
                      0,
                      (uint8_t)sp,
                      JVM_OPC_iconst_1,
                      JVM_OPC_invokestatic,
                      0,
                      (uint8_t)s,
                      JVM_OPC_pop2,
                      JVM_OPC_aload_0,
                      JVM_OPC_invokeinterface,
                      0,
                      (uint8_t)it,
                      1,
                      0,
                      JVM_OPC_pop,
                      JVM_OPC_return};
    a_method(&a, JVM_ACC_PUBLIC, "m", "()V", code, sizeof code, 2, 1, NULL, 0, NULL);
    size_t n;
    uint8_t *b = a_finish(&a, "p/A", "java/lang/Object", &n);
    cf_class *c = parse_ok(b, n);
    cf_callee *cv;
    size_t k;
    cf_error e;
    assert_int_equal(cf_method_callees(c, &c->methods[0], &cv, &k, &e), CF_OK);
    assert_int_equal(k, 4);
    assert_int_equal(cv[0].opcode, JVM_OPC_invokevirtual);
    assert_true(cf_str_eq(cv[0].owner, "p/A") && cf_str_eq(cv[0].name, "v"));
    assert_int_equal(cv[1].opcode, JVM_OPC_invokespecial);
    assert_true(cf_str_eq(cv[1].name, "<init>"));
    assert_int_equal(cv[2].pc, 9);
    assert_true(cf_str_eq(cv[2].owner, "p/B") && cf_str_eq(cv[2].desc, "(I)J"));
    assert_int_equal(cv[3].opcode, JVM_OPC_invokeinterface);
    assert_true(cv[3].is_interface);
    free(cv);
    cf_class_free(c);
    free(b);
}

/* ------------------------------------------------------------------ instrumentation */

static void test_instrument_basic(void **st)
{
    (void)st;
    asm_cls a;
    a_init(&a, 52);
    uint8_t code[] = {JVM_OPC_iconst_1, JVM_OPC_ireturn}; /* iconst_1; ireturn */
    a_method(&a, JVM_ACC_PUBLIC | JVM_ACC_STATIC, "one", "()I", code, sizeof code, 1, 0, NULL, 0, NULL);
    size_t n;
    uint8_t *b = a_finish(&a, "p/A", "java/lang/Object", &n);
    uint8_t *o;
    cf_instrument_result r;
    cf_class *c = instrument_ok(b, n, &o, &r);
    assert_int_equal(r.n_instrumented, 1);
    cf_str on = {"p/A", 3}, nn = {"one", 3}, dd = {"()I", 3};
    assert_int_equal(r.methods[0].method_id, cf_method_id_of(on, nn, dd));
    cf_code k;
    code_of(c, "one", &k);
    const uint8_t *p = k.code;
    /* entry: ldc2_w id; invokestatic enter */
    assert_int_equal(p[0], JVM_OPC_ldc2_w);
    uint16_t lidx = cmr_be16(p + 1);
    assert_int_equal(c->cp[lidx].tag, JVM_CONSTANT_Long);
    uint64_t v = (uint64_t)cmr_be32(c->cp[lidx].data) << 32 | cmr_be32(c->cp[lidx].data + 4);
    assert_int_equal(v, r.methods[0].method_id);
    assert_int_equal(p[3], JVM_OPC_invokestatic);
    cf_str ow, nm, ds;
    assert_true(cf_cp_ref(c, cmr_be16(p + 4), &ow, &nm, &ds));
    assert_true(cf_str_eq(ow, "cmrtest/Probes") && cf_str_eq(nm, "enter") && cf_str_eq(ds, "(J)V"));
    assert_int_equal(p[6], JVM_OPC_iconst_1); /* original iconst_1 */
    assert_int_equal(p[7], JVM_OPC_ldc2_w);   /* exit probe before ireturn */
    assert_true(cf_cp_ref(c, cmr_be16(p + 11), &ow, &nm, &ds));
    assert_true(cf_str_eq(nm, "exit"));
    assert_int_equal(p[13], JVM_OPC_ireturn);
    /* handler: dup; ldc2_w; invokestatic excExit; athrow */
    assert_int_equal(p[14], JVM_OPC_dup);
    assert_int_equal(p[15], JVM_OPC_ldc2_w);
    assert_int_equal(p[18], JVM_OPC_invokestatic);
    assert_int_equal(p[21], JVM_OPC_athrow);
    assert_int_equal(k.code_len, 22);
    assert_int_equal(k.exc_count, 1);
    assert_int_equal(k.exc[0].start, 6);
    assert_int_equal(k.exc[0].end, 14);
    assert_int_equal(k.exc[0].handler, 14);
    assert_int_equal(k.exc[0].type, 0);
    assert_true(k.max_stack >= 3);
    /* the one frame: full_frame at 14, no locals, stack [java/lang/Throwable] */
    const cf_attr *smt = sub_attr(c, &k, "StackMapTable");
    assert_non_null(smt);
    cf_frame *fr;
    uint32_t nf;
    cf_error e;
    assert_int_equal(cf_stackmap_decode(smt, k.code_len, &fr, &nf, &e), CF_OK);
    assert_int_equal(nf, 1);
    assert_int_equal(fr[0].pc, 14);
    assert_int_equal(fr[0].type, CF_FRAME_FULL);
    assert_int_equal(cmr_be16(fr[0].body), 0);     /* locals */
    assert_int_equal(cmr_be16(fr[0].body + 2), 1); /* stack */
    assert_int_equal(fr[0].body[4], JVM_ITEM_Object);
    assert_true(cf_str_eq(cf_cp_class_name(c, cmr_be16(fr[0].body + 5)), "java/lang/Throwable"));
    free(fr);
    cf_code_release(&k);
    cf_class_free(c);
    cf_instrument_result_free(&r);
    free(b);
}

/* Branch targets: to a plain instruction lands on it; to a return lands on its probe. */
static void test_branch_targets(void **st)
{
    (void)st;
    asm_cls a;
    a_init(&a, 52);
    /* 0 iload_0; 1 ifeq +6 (->7); 4 iconst_1; 5 ifeq +4 (->9)... keep simple: */
    uint8_t code[] = {JVM_OPC_iload_0,
                      JVM_OPC_ifeq,
                      0,
                      7,
                      JVM_OPC_iload_0,
                      JVM_OPC_ifeq,
                      0,
                      5,
                      JVM_OPC_return,
                      /* 8 */ JVM_OPC_iconst_2,
                      JVM_OPC_pop,
                      JVM_OPC_return};
    /* 1: ifeq -> 8 (return); 5: ifeq -> 10? recompute below */
    code[2] = 0;
    code[3] = 7; /* pc1 + 7 = 8: return */
    code[6] = 0;
    code[7] = 4; /* pc5 + 4 = 9: iconst_2 */
    uint8_t smt[] = {0, 2, 8 /* same at 8 */, 0 /* same at 9 */};
    asm_attrs ca = {0};
    aa_add(&a, &ca, "StackMapTable", smt, sizeof smt);
    a_method(&a, JVM_ACC_PUBLIC | JVM_ACC_STATIC, "m", "(I)V", code, sizeof code, 2, 1, NULL, 0, &ca);
    size_t n;
    uint8_t *b = a_finish(&a, "p/A", "java/lang/Object", &n);
    uint8_t *o;
    cf_instrument_result r;
    cf_class *c = instrument_ok(b, n, &o, &r);
    cf_code k;
    code_of(c, "m", &k);
    cf_insn in1, in2;
    assert_true(cf_insn_decode(k.code, k.code_len, 7, &in1)); /* after 6-byte entry + iload */
    assert_int_equal(in1.op, JVM_OPC_ifeq);
    assert_int_equal(k.code[7 + in1.branch], JVM_OPC_ldc2_w); /* probe before the return */
    assert_true(cf_insn_decode(k.code, k.code_len, 11, &in2));
    assert_int_equal(in2.op, JVM_OPC_ifeq);
    assert_int_equal(k.code[11 + in2.branch], JVM_OPC_iconst_2); /* iconst_2 itself */
    cf_frame *fr;
    uint32_t nf;
    cf_error e;
    assert_int_equal(cf_stackmap_decode(sub_attr(c, &k, "StackMapTable"), k.code_len, &fr, &nf, &e), CF_OK);
    assert_int_equal(nf, 3);
    assert_int_equal(fr[0].pc, (uint32_t)(7 + in1.branch));
    assert_int_equal(fr[1].pc, (uint32_t)(11 + in2.branch));
    free(fr);
    cf_code_release(&k);
    cf_class_free(c);
    cf_instrument_result_free(&r);
    free(b);
}

/* goto and if spanning > 32 KiB after probes go in: widened, or refused without a frame. */
static uint8_t *wide_class(int with_frame, size_t *n)
{
    enum { FILL = 5500 };
    uint32_t len = 7 + FILL + 1;
    uint8_t *code = malloc(len);
    uint32_t end = len - 1;
    code[0] = JVM_OPC_iload_0; /* iload_0 */
    code[1] = JVM_OPC_ifeq;    /* ifeq end */
    cmr_put_be16(code + 2, (uint16_t)(end - 1));
    code[4] = JVM_OPC_goto; /* goto end */
    cmr_put_be16(code + 5, (uint16_t)(end - 4));
    memset(code + 7, JVM_OPC_return, FILL); /* many returns: each gets an exit probe */
    code[end] = JVM_OPC_return;
    asm_cls a;
    a_init(&a, 52);
    asm_attrs ca = {0};
    uint8_t smt[16];
    size_t sl = 0;
    cmr_put_be16(smt, with_frame ? 2 : 1);
    sl = 2;
    if (with_frame)
        smt[sl++] = 4;                  /* same_frame at 4 */
    smt[sl++] = CF_FRAME_SAME_EXTENDED; /* at end */
    cmr_put_be16(smt + sl, (uint16_t)(with_frame ? end - 4 - 1 : end));
    sl += 2;
    aa_add(&a, &ca, "StackMapTable", smt, (uint32_t)sl);
    a_method(&a, JVM_ACC_PUBLIC | JVM_ACC_STATIC, "w", "(I)V", code, len, 1, 1, NULL, 0, &ca);
    free(code);
    return a_finish(&a, "p/W", "java/lang/Object", n);
}

static void test_widening(void **st)
{
    (void)st;
    size_t n;
    uint8_t *b = wide_class(1, &n);
    uint8_t *o;
    cf_instrument_result r;
    cf_class *c = instrument_ok(b, n, &o, &r);
    cf_code k;
    code_of(c, "w", &k);
    /* 6: iload_0; 7: ifne +8; 10: goto_w end; 15: goto_w end */
    assert_int_equal(k.code[6], JVM_OPC_iload_0);
    assert_int_equal(k.code[7], JVM_OPC_ifne);
    assert_int_equal(cmr_be16(k.code + 8), 8);
    assert_int_equal(k.code[10], JVM_OPC_goto_w);
    assert_int_equal(k.code[15], JVM_OPC_goto_w);
    int32_t t1 = 10 + (int32_t)cmr_be32(k.code + 11), t2 = 15 + (int32_t)cmr_be32(k.code + 16);
    assert_int_equal(t1, t2);
    assert_true(t1 > 32767);
    assert_int_equal(k.code[t1], JVM_OPC_ldc2_w); /* exit probe of the final return */
    cf_code_release(&k);
    cf_class_free(c);
    cf_instrument_result_free(&r);
    free(b);

    /* no frame at the if's fall-through: refused, class untouched */
    b = wide_class(0, &n);
    c = parse_ok(b, n);
    uint16_t cp_before = c->cp_count;
    cf_method_result mr;
    cf_error e;
    assert_int_equal(cf_instrument_method(c, 0, timer(), &mr, &e), CF_ERR_REFUSED);
    assert_int_equal(mr.refusal, CF_REFUSE_BRANCH_NEEDS_FRAME);
    assert_int_equal(c->cp_count, cp_before);
    size_t ol;
    assert_int_equal(cf_class_write(c, &o, &ol, &e), CF_OK);
    assert_int_equal(ol, n);
    assert_memory_equal(o, b, n);
    free(o);
    cf_class_free(c);
    free(b);
}

/* A far conditional branch without a fall-through frame goes through a goto_w trampoline
 * placed after a return, with the target's frame written in full. */
static void test_trampoline(void **st)
{
    (void)st;
    enum { FILL = 5500 };
    uint32_t len = 7 + FILL + 1, end = len - 1;
    uint8_t *code = malloc(len);
    code[0] = JVM_OPC_iload_0; /* 0 iload_0 */
    code[1] = JVM_OPC_ifeq;    /* 1 ifeq end */
    cmr_put_be16(code + 2, (uint16_t)(end - 1));
    code[4] = JVM_OPC_return;  /* 4 return */
    code[5] = JVM_OPC_iload_0; /* 5 iload_0 (frame) */
    code[6] = JVM_OPC_pop;     /* 6 pop */
    memset(code + 7, JVM_OPC_return, FILL);
    code[end] = JVM_OPC_return;
    uint8_t smt[] = {0, 2, 5, CF_FRAME_SAME_EXTENDED, 0, 0}; /* same@5, same_extended@end */
    cmr_put_be16(smt + 4, (uint16_t)(end - 5 - 1));
    asm_cls a;
    a_init(&a, 52);
    asm_attrs ca = {0};
    aa_add(&a, &ca, "StackMapTable", smt, sizeof smt);
    a_method(&a, JVM_ACC_PUBLIC | JVM_ACC_STATIC, "t", "(I)V", code, len, 1, 1, NULL, 0, &ca);
    free(code);
    size_t n;
    uint8_t *b = a_finish(&a, "p/T", "java/lang/Object", &n);
    uint8_t *o;
    cf_instrument_result r;
    cf_class *c = instrument_ok(b, n, &o, &r);
    assert_int_equal(r.methods[0].refusal, CF_REFUSE_NONE);
    cf_code k;
    code_of(c, "t", &k);
    assert_int_equal(k.code[7], JVM_OPC_ifeq); /* ifeq kept, now to the trampoline */
    uint32_t tp = 7 + (uint32_t)(int16_t)cmr_be16(k.code + 8);
    assert_int_equal(tp, 17); /* after the return and its probe */
    assert_int_equal(k.code[16], JVM_OPC_return);
    assert_int_equal(k.code[tp], JVM_OPC_goto_w); /* goto_w end */
    uint32_t tgt = tp + (uint32_t)(int32_t)cmr_be32(k.code + tp + 1);
    assert_true(tgt > 32767);
    assert_int_equal(k.code[tgt], JVM_OPC_ldc2_w); /* the final return's probe */
    assert_int_equal(k.code[22], JVM_OPC_iload_0); /* original pc 5 */
    cf_frame *fr;
    uint32_t nf;
    cf_error e;
    assert_int_equal(cf_stackmap_decode(sub_attr(c, &k, "StackMapTable"), k.code_len, &fr, &nf, &e), CF_OK);
    assert_int_equal(nf, 4);
    assert_int_equal(fr[0].pc, 17);
    assert_int_equal(fr[0].type, CF_FRAME_FULL); /* locals [int], stack [] */
    assert_int_equal(cmr_be16(fr[0].body), 1);
    assert_int_equal(fr[0].body[2], JVM_ITEM_Integer);
    assert_int_equal(cmr_be16(fr[0].body + 3), 0);
    assert_int_equal(fr[1].pc, 22);
    assert_int_equal(fr[1].type, CF_FRAME_FULL); /* rewritten in full */
    assert_int_equal(fr[2].pc, tgt);
    free(fr);
    cf_code_release(&k);
    cf_class_free(c);
    cf_instrument_result_free(&r);
    free(b);
}

/* tableswitch / lookupswitch at every alignment */
static void test_switch_padding(void **st)
{
    (void)st;
    for (int pre = 0; pre < 4; pre++) {
        for (int kind = 0; kind < 2; kind++) {
            uint8_t code[64];
            uint32_t pc = 0;
            for (int i = 0; i < pre; i++)
                code[pc++] = JVM_OPC_nop;
            code[pc++] = JVM_OPC_iload_0;
            uint32_t sw = pc;
            code[pc++] = kind ? JVM_OPC_lookupswitch : JVM_OPC_tableswitch;
            while (pc % 4)
                code[pc++] = 0;
            uint32_t body = pc;
            uint32_t len_sw = kind ? 8 + 2 * 8 : 12 + 2 * 4;
            uint32_t t_ret = body + len_sw, t_one = t_ret + 1; /* return ; iconst_1 pop return */
            cmr_put_be32(code + pc, t_one - sw);
            pc += 4; /* default */
            if (kind) {
                cmr_put_be32(code + pc, 2);
                pc += 4;
                cmr_put_be32(code + pc, 5);
                pc += 4;
                cmr_put_be32(code + pc, t_ret - sw);
                pc += 4;
                cmr_put_be32(code + pc, 9);
                pc += 4;
                cmr_put_be32(code + pc, t_one - sw);
                pc += 4;
            } else {
                cmr_put_be32(code + pc, 0);
                pc += 4;
                cmr_put_be32(code + pc, 1);
                pc += 4;
                cmr_put_be32(code + pc, t_ret - sw);
                pc += 4;
                cmr_put_be32(code + pc, t_one - sw);
                pc += 4;
            }
            code[pc++] = JVM_OPC_return;
            code[pc++] = JVM_OPC_iconst_1;
            code[pc++] = JVM_OPC_pop;
            code[pc++] = JVM_OPC_return;
            asm_cls a;
            a_init(&a, 50);
            a_method(&a, JVM_ACC_PUBLIC | JVM_ACC_STATIC, "s", "(I)V", code, pc, 1, 1, NULL, 0, NULL);
            size_t n;
            uint8_t *b = a_finish(&a, "p/S", "java/lang/Object", &n);
            uint8_t *o;
            cf_instrument_result r;
            cf_class *c = instrument_ok(b, n, &o, &r);
            cf_code k;
            code_of(c, "s", &k);
            uint32_t npc = 6 + (uint32_t)pre + 1;
            cf_insn in;
            assert_true(cf_insn_decode(k.code, k.code_len, npc, &in));
            assert_int_equal(in.op, kind ? JVM_OPC_lookupswitch : JVM_OPC_tableswitch);
            assert_int_equal(in.npairs, 2);
            assert_int_equal(k.code[npc + in.branch], JVM_OPC_iconst_1);                            /* default */
            assert_int_equal(k.code[npc + cf_switch_target(k.code, &in, 0, NULL)], JVM_OPC_ldc2_w); /* return's probe */
            assert_int_equal(k.code[npc + cf_switch_target(k.code, &in, 1, NULL)], JVM_OPC_iconst_1);
            cf_code_release(&k);
            cf_class_free(c);
            cf_instrument_result_free(&r);
            free(b);
        }
    }
}

static void test_code_too_large(void **st)
{
    (void)st;
    uint8_t *code = malloc(60000);
    memset(code, JVM_OPC_return, 60000);
    asm_cls a;
    a_init(&a, 52);
    a_method(&a, JVM_ACC_PUBLIC | JVM_ACC_STATIC, "big", "()V", code, 60000, 0, 0, NULL, 0, NULL);
    free(code);
    size_t n;
    uint8_t *b = a_finish(&a, "p/L", "java/lang/Object", &n);
    cf_instrument_result r;
    cf_error e;
    assert_int_equal(cf_instrument_class(b, n, timer(), NULL, NULL, &r, &e), CF_OK);
    assert_null(r.bytes); /* nothing instrumented: caller keeps the original */
    assert_int_equal(r.n_methods, 1);
    assert_int_equal(r.methods[0].refusal, CF_REFUSE_CODE_TOO_LARGE);
    assert_true(strstr(r.methods[0].why, "65535") != NULL);
    cf_instrument_result_free(&r);
    free(b);
}

static void test_constructors(void **st)
{
    (void)st;
    asm_cls a;
    a_init(&a, 52);
    uint16_t sup = a_ref(&a, JVM_CONSTANT_Methodref, "java/lang/Object", "<init>", "()V");
    uint8_t c1[] = {JVM_OPC_aload_0, JVM_OPC_invokespecial, (uint8_t)(sup >> 8), (uint8_t)sup, JVM_OPC_return};
    a_method(&a, JVM_ACC_PUBLIC, "<init>", "()V", c1, sizeof c1, 1, 1, NULL, 0, NULL);
    /* two super() calls in two branches (Groovy style) */
    uint8_t c2[] = {JVM_OPC_iload_1, JVM_OPC_ifeq,  0, 10, JVM_OPC_aload_0, JVM_OPC_invokespecial, (uint8_t)(sup >> 8),
                    (uint8_t)sup,    JVM_OPC_goto,  0, 7,  JVM_OPC_aload_0, JVM_OPC_invokespecial, (uint8_t)(sup >> 8),
                    (uint8_t)sup,    JVM_OPC_return};
    uint8_t smt2[] = {0, 2, /* full at 11: [uninitThis, int] [] */
                      CF_FRAME_FULL, 0, 11, 0, 2, JVM_ITEM_UninitializedThis, JVM_ITEM_Integer, 0, 0,
                      /* full at 15: [p/C, int] [] */
                      CF_FRAME_FULL, 0, 3, 0, 2, JVM_ITEM_Object, 0, 0, JVM_ITEM_Integer, 0, 0};
    uint16_t self = a_class(&a, "p/C");
    smt2[17] = (uint8_t)(self >> 8);
    smt2[18] = (uint8_t)self;
    asm_attrs ca = {0};
    aa_add(&a, &ca, "StackMapTable", smt2, sizeof smt2);
    a_method(&a, JVM_ACC_PUBLIC, "<init>", "(I)V", c2, sizeof c2, 1, 2, NULL, 0, &ca);
    /* no super() call at all: refused */
    uint8_t c3[] = {JVM_OPC_return};
    a_method(&a, JVM_ACC_PUBLIC, "<init>", "(J)V", c3, sizeof c3, 0, 3, NULL, 0, NULL);
    size_t n;
    uint8_t *b = a_finish(&a, "p/C", "java/lang/Object", &n);
    uint8_t *o;
    cf_instrument_result r;
    cf_class *c = instrument_ok(b, n, &o, &r);
    assert_int_equal(r.n_instrumented, 2);
    assert_int_equal(r.methods[2].refusal, CF_REFUSE_CTOR_INIT);
    cf_code k;
    const cf_attr *ka = cf_method_code_attr(c, &c->methods[0]);
    cf_error e;
    assert_int_equal(cf_code_parse(c, ka, &k, &e), CF_OK);
    assert_int_equal(k.code[0], JVM_OPC_aload_0);
    assert_int_equal(k.code[1], JVM_OPC_invokespecial);
    assert_int_equal(k.code[4], JVM_OPC_ldc2_w); /* entry probe after super() */
    assert_int_equal(k.exc[k.exc_count - 1].start, 10);
    cf_code_release(&k);
    ka = cf_method_code_attr(c, &c->methods[1]);
    assert_int_equal(cf_code_parse(c, ka, &k, &e), CF_OK);
    assert_int_equal(k.exc_count, 2);            /* two catch-all ranges, around the pre-init code */
    assert_int_equal(k.code[8], JVM_OPC_ldc2_w); /* entry probe after the first super() */
    for (int i = 0; i < 2; i++) {
        assert_int_equal(k.exc[i].type, 0);
        assert_int_equal(k.exc[i].handler, k.code_len - 8); /* dup ldc2_w invokestatic athrow */
    }
    cf_code_release(&k);
    cf_class_free(c);
    cf_instrument_result_free(&r);
    free(b);
}

static void test_refusals(void **st)
{
    (void)st;
    asm_cls a;
    a_init(&a, 50); /* jsr/ret with a StackMapTable-era class file: refused */
    uint8_t jsr[] = {JVM_OPC_jsr, 0, 4, JVM_OPC_return, JVM_OPC_astore_1, JVM_OPC_ret, 1};
    a_method(&a, JVM_ACC_PUBLIC | JVM_ACC_STATIC, "j", "()V", jsr, sizeof jsr, 1, 2, NULL, 0, NULL);
    a_method_nocode(&a, JVM_ACC_PUBLIC | JVM_ACC_ABSTRACT, "abs", "()V");
    a_method_nocode(&a, JVM_ACC_PUBLIC | JVM_ACC_STATIC | JVM_ACC_NATIVE, "nat", "()V");
    size_t n;
    uint8_t *b = a_finish(&a, "p/R", "java/lang/Object", &n);
    cf_instrument_result r;
    cf_error e;
    assert_int_equal(cf_instrument_class(b, n, timer(), NULL, NULL, &r, &e), CF_OK);
    assert_null(r.bytes);
    assert_int_equal(r.methods[0].refusal, CF_REFUSE_JSR_RET);
    assert_int_equal(r.methods[1].refusal, CF_REFUSE_ABSTRACT_OR_NATIVE);
    assert_int_equal(r.methods[2].refusal, CF_REFUSE_ABSTRACT_OR_NATIVE);
    cf_instrument_result_free(&r);
    free(b);

    /* the same subroutine in a version-49 class (type-inference verifier): instrumented, the
   * jsr relocated past the entry probe and ret left as is */
    a_init(&a, 49);
    a_method(&a, JVM_ACC_PUBLIC | JVM_ACC_STATIC, "j", "()V", jsr, sizeof jsr, 1, 2, NULL, 0, NULL);
    b = a_finish(&a, "p/R", "java/lang/Object", &n);
    uint8_t *o;
    cf_class *c = instrument_ok(b, n, &o, &r);
    cf_code k;
    code_of(c, "j", &k);
    assert_int_equal(k.code[6], JVM_OPC_jsr);                                      /* jsr */
    assert_int_equal(k.code[6 + (int16_t)cmr_be16(k.code + 7)], JVM_OPC_astore_1); /* -> astore_1 */
    assert_int_equal(k.code[9], JVM_OPC_ldc2_w);                                   /* exit probe before return */
    assert_int_equal(k.code[16], JVM_OPC_astore_1);
    assert_int_equal(k.code[17], JVM_OPC_ret);     /* ret 1 */
    assert_null(sub_attr(c, &k, "StackMapTable")); /* none before version 50 */
    cf_code_release(&k);
    cf_class_free(c);
    cf_instrument_result_free(&r);
    free(b);
}

/* Probes that take the method's own object or a parameter (the agent's context hand-off):
 * loaded from the right local, and refused where that local cannot be trusted. */
static void test_object_arguments(void **st)
{
    (void)st;
    static const cf_probe capture = {"capture",
                                     {"p/P",
                                      "capture",
                                      "(Ljava/lang/Object;Ljava/lang/Object;J)V",
                                      3,
                                      {{CF_PARG_THIS, 0, NULL}, {CF_PARG_ARG, 1, NULL}, {CF_PARG_METHOD_ID, 0, NULL}}},
                                     {"p/P", "leave", "(Ljava/lang/Object;)V", 1, {{CF_PARG_THIS, 0, NULL}}},
                                     {0}};
    asm_cls a;
    a_init(&a, 52);
    uint8_t ret[] = {JVM_OPC_return};                                            /* return */
    uint8_t clobber[] = {JVM_OPC_aconst_null, JVM_OPC_astore_0, JVM_OPC_return}; /* aconst_null; astore_0; return */
    a_method(&a, JVM_ACC_PUBLIC, "run", "(JLjava/lang/Runnable;)V", ret, sizeof ret, 0, 4, NULL, 0, NULL);
    a_method(&a, JVM_ACC_PUBLIC | JVM_ACC_STATIC, "stat", "(JLjava/lang/Runnable;)V", ret, sizeof ret, 0, 3, NULL, 0,
             NULL);
    a_method(&a, JVM_ACC_PUBLIC, "prim", "(JI)V", ret, sizeof ret, 0, 4, NULL, 0, NULL);
    a_method(&a, JVM_ACC_PUBLIC, "clob", "(JLjava/lang/Runnable;)V", clobber, sizeof clobber, 1, 4, NULL, 0, NULL);
    size_t n;
    uint8_t *b = a_finish(&a, "p/O", "java/lang/Object", &n);
    cf_instrument_result r;
    cf_error e;
    assert_int_equal(cf_instrument_class(b, n, &capture, NULL, NULL, &r, &e), CF_OK);
    assert_int_equal(r.methods[0].refusal, CF_REFUSE_NONE);
    assert_int_equal(r.methods[1].refusal, CF_REFUSE_PROBE_ARGS); /* static: no `this` */
    assert_int_equal(r.methods[2].refusal, CF_REFUSE_PROBE_ARGS); /* int parameter */
    assert_int_equal(r.methods[3].refusal, CF_REFUSE_PROBE_ARGS); /* `this` reassigned */
    assert_non_null(strstr(r.methods[3].why, "assigned"));
    assert_int_equal(cf_class_check(r.bytes, r.len, &e), CF_OK);
    cf_class *c = parse_ok(r.bytes, r.len);
    cf_code k;
    code_of(c, "run", &k);
    assert_int_equal(k.code[0], JVM_OPC_aload_0);      /* aload_0: this */
    assert_int_equal(k.code[1], JVM_OPC_aload_3);      /* aload_3: the Runnable (slots: this, long x2, Runnable) */
    assert_int_equal(k.code[2], JVM_OPC_ldc2_w);       /* ldc2_w method id */
    assert_int_equal(k.code[5], JVM_OPC_invokestatic); /* invokestatic capture */
    assert_int_equal(k.code[8], JVM_OPC_aload_0);      /* exit: aload_0 */
    assert_int_equal(k.code[9], JVM_OPC_invokestatic); /* invokestatic leave */
    assert_int_equal(k.code[12], JVM_OPC_return);
    assert_true(k.max_stack >= 4);
    cf_code_release(&k);
    cf_class_free(c);
    cf_instrument_result_free(&r);
    free(b);

    /* where the objects cannot be: the exceptional exit (no locals), a parameter at exits */
    cf_probe bad = capture;
    bad.exc_exit = bad.normal_exit;
    assert_int_equal(cf_probe_check(&bad, &e), CF_ERR_ARG);
    bad = capture;
    bad.normal_exit.args[0].kind = CF_PARG_ARG;
    assert_int_equal(cf_probe_check(&bad, &e), CF_ERR_ARG);
}

/* A probe that takes an int field of the method's own object (the agent's
 * HttpURLConnection: its responseCode, a protected field of its superclass): aload_0;
 * getfield through the instrumented class; refused in static methods, at the exceptional
 * exit and for a name that is no field name. */
static void test_this_int_field(void **st)
{
    (void)st;
    static const cf_probe field = {
        "field",
        {"p/P",
         "enter",
         "(Ljava/lang/Object;IJ)V",
         3,
         {{CF_PARG_THIS, 0, NULL}, {CF_PARG_THIS_INT_FIELD, 0, "code"}, {CF_PARG_METHOD_ID, 0, NULL}}},
        {"p/P", "leave", "(I)V", 1, {{CF_PARG_THIS_INT_FIELD, 0, "code"}}},
        {0}};
    asm_cls a;
    a_init(&a, 52);
    uint8_t ret[] = {JVM_OPC_return};
    a_method(&a, JVM_ACC_PUBLIC, "run", "()V", ret, sizeof ret, 0, 1, NULL, 0, NULL);
    a_method(&a, JVM_ACC_PUBLIC | JVM_ACC_STATIC, "stat", "()V", ret, sizeof ret, 0, 0, NULL, 0, NULL);
    size_t n;
    uint8_t *b = a_finish(&a, "p/F", "java/lang/Object", &n);
    cf_instrument_result r;
    cf_error e;
    assert_int_equal(cf_instrument_class(b, n, &field, NULL, NULL, &r, &e), CF_OK);
    assert_int_equal(r.methods[0].refusal, CF_REFUSE_NONE);
    assert_int_equal(r.methods[1].refusal, CF_REFUSE_PROBE_ARGS); /* static: no `this` */
    assert_int_equal(cf_class_check(r.bytes, r.len, &e), CF_OK);
    cf_class *c = parse_ok(r.bytes, r.len);
    cf_code k;
    code_of(c, "run", &k);
    assert_int_equal(k.code[0], JVM_OPC_aload_0); /* this */
    assert_int_equal(k.code[1], JVM_OPC_aload_0); /* this.code */
    assert_int_equal(k.code[2], JVM_OPC_getfield);
    uint16_t ref = cmr_be16(k.code + 3);
    assert_int_equal(c->cp[ref].tag, JVM_CONSTANT_Fieldref);
    assert_int_equal(c->cp[ref].a, c->this_class); /* resolved through the class itself */
    assert_int_equal(k.code[5], JVM_OPC_ldc2_w);
    assert_int_equal(k.code[8], JVM_OPC_invokestatic);
    assert_int_equal(k.code[11], JVM_OPC_aload_0); /* exit: this.code */
    assert_int_equal(k.code[12], JVM_OPC_getfield);
    assert_int_equal(cmr_be16(k.code + 13), ref); /* one constant for both */
    assert_int_equal(k.code[15], JVM_OPC_invokestatic);
    assert_int_equal(k.code[18], JVM_OPC_return);
    assert_true(k.max_stack >= 4);
    cf_code_release(&k);
    cf_class_free(c);
    cf_instrument_result_free(&r);
    free(b);

    cf_probe bad = field; /* not at the exceptional exit (no locals there) */
    bad.exc_exit = bad.normal_exit;
    assert_int_equal(cf_probe_check(&bad, &e), CF_ERR_ARG);
    const char *names[] = {NULL, "", "a.b", "java/lang/X", "<init>", "x;"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        bad = field;
        bad.normal_exit.args[0].s = names[i];
        assert_int_equal(cf_probe_check(&bad, &e), CF_ERR_ARG);
    }
    bad = field; /* an int, nothing else */
    bad.normal_exit.desc = "(J)V";
    assert_int_equal(cf_probe_check(&bad, &e), CF_ERR_ARG);
}

/* An entry probe whose result replaces a parameter (the agent's JDK HttpClient send: a copy
 * of the request with the context headers): checkcast to the parameter's type and astore
 * into its local; refused for a primitive parameter, a parameter the method assigns, a
 * probe that returns no reference, and anywhere but the entry. */
static void test_replaced_argument(void **st)
{
    (void)st;
    static const cf_probe swap = {"swap",
                                  {"p/P",
                                   "swap",
                                   "(Ljava/lang/Object;J)Ljava/lang/Object;",
                                   2,
                                   {{CF_PARG_ARG_REPLACED, 1, NULL}, {CF_PARG_METHOD_ID, 0, NULL}}},
                                  {0},
                                  {0}};
    asm_cls a;
    a_init(&a, 52);
    uint8_t ret[] = {JVM_OPC_return};
    uint8_t clobber[] = {JVM_OPC_aconst_null, JVM_OPC_astore_3, JVM_OPC_return};
    a_method(&a, JVM_ACC_PUBLIC, "send", "(JLjava/lang/Runnable;)V", ret, sizeof ret, 0, 4, NULL, 0, NULL);
    a_method(&a, JVM_ACC_PUBLIC | JVM_ACC_STATIC, "arr", "(J[[I)V", ret, sizeof ret, 0, 3, NULL, 0, NULL);
    a_method(&a, JVM_ACC_PUBLIC, "prim", "(JI)V", ret, sizeof ret, 0, 4, NULL, 0, NULL);
    a_method(&a, JVM_ACC_PUBLIC, "clob", "(JLjava/lang/Runnable;)V", clobber, sizeof clobber, 1, 4, NULL, 0, NULL);
    size_t n;
    uint8_t *b = a_finish(&a, "p/S", "java/lang/Object", &n);
    cf_instrument_result r;
    cf_error e;
    assert_int_equal(cf_instrument_class(b, n, &swap, NULL, NULL, &r, &e), CF_OK);
    assert_int_equal(r.methods[0].refusal, CF_REFUSE_NONE);
    assert_int_equal(r.methods[1].refusal, CF_REFUSE_NONE);
    assert_int_equal(r.methods[2].refusal, CF_REFUSE_PROBE_ARGS); /* int parameter */
    assert_int_equal(r.methods[3].refusal, CF_REFUSE_PROBE_ARGS); /* the method assigns it */
    assert_non_null(strstr(r.methods[3].why, "assigned"));
    assert_int_equal(cf_class_check(r.bytes, r.len, &e), CF_OK);
    cf_class *c = parse_ok(r.bytes, r.len);
    cf_code k;
    code_of(c, "send", &k);
    assert_int_equal(k.code[0], JVM_OPC_aload_3);      /* the Runnable (this, long x2, Runnable) */
    assert_int_equal(k.code[1], JVM_OPC_ldc2_w);       /* method id */
    assert_int_equal(k.code[4], JVM_OPC_invokestatic); /* swap */
    assert_int_equal(k.code[7], JVM_OPC_checkcast);
    cf_str cls = cf_cp_class_name(c, cmr_be16(k.code + 8));
    assert_true(cf_str_eq(cls, "java/lang/Runnable"));
    assert_int_equal(k.code[10], JVM_OPC_astore_3); /* back into the parameter's local */
    assert_int_equal(k.code[11], JVM_OPC_return);
    cf_code_release(&k);
    code_of(c, "arr", &k); /* static: the array in slot 2, its class named by its descriptor */
    assert_int_equal(k.code[0], JVM_OPC_aload_2);
    assert_int_equal(k.code[7], JVM_OPC_checkcast);
    assert_true(cf_str_eq(cf_cp_class_name(c, cmr_be16(k.code + 8)), "[[I"));
    assert_int_equal(k.code[10], JVM_OPC_astore_2);
    cf_code_release(&k);
    cf_class_free(c);
    cf_instrument_result_free(&r);
    free(b);

    cf_probe bad = swap; /* a void probe's result, or at an exit */
    bad.enter.desc = "(Ljava/lang/Object;J)V";
    assert_int_equal(cf_probe_check(&bad, &e), CF_ERR_ARG);
    bad = swap;
    bad.normal_exit =
        (cf_probe_call){"p/P", "x", "(Ljava/lang/Object;)Ljava/lang/Object;", 1, {{CF_PARG_ARG_REPLACED, 1, NULL}}};
    assert_int_equal(cf_probe_check(&bad, &e), CF_ERR_ARG);
    bad = swap; /* two parameters replaced by one result */
    bad.enter = (cf_probe_call){"p/P",
                                "x",
                                "(Ljava/lang/Object;Ljava/lang/Object;)Ljava/lang/Object;",
                                2,
                                {{CF_PARG_ARG_REPLACED, 1, NULL}, {CF_PARG_ARG_REPLACED, 0, NULL}}};
    assert_int_equal(cf_probe_check(&bad, &e), CF_ERR_ARG);
}

/* A normal-exit probe that takes the returned object (the agent's HTTP client calls: the
 * response): a copy of the value on top of the stack before each areturn; a method that
 * returns no reference is refused, and RETURN is refused anywhere but as the normal exit's
 * first argument. */
static void test_returned_object(void **st)
{
    (void)st;
    static const cf_probe watch = {
        "watch",
        {"p/P", "enter", "(J)V", 1, {{CF_PARG_METHOD_ID, 0, NULL}}},
        {"p/P", "done", "(Ljava/lang/Object;J)V", 2, {{CF_PARG_RETURN, 0, NULL}, {CF_PARG_METHOD_ID, 0, NULL}}},
        {0}};
    asm_cls a;
    a_init(&a, 52);
    uint8_t get[] = {JVM_OPC_aload_1, JVM_OPC_areturn}; /* aload_1; areturn */
    uint8_t num[] = {JVM_OPC_iconst_1, JVM_OPC_ireturn};
    a_method(&a, JVM_ACC_PUBLIC, "get", "(Ljava/lang/String;)Ljava/lang/String;", get, sizeof get, 1, 2, NULL, 0, NULL);
    a_method(&a, JVM_ACC_PUBLIC, "arr", "(Ljava/lang/String;)[I", get, sizeof get, 1, 2, NULL, 0, NULL);
    a_method(&a, JVM_ACC_PUBLIC, "num", "()I", num, sizeof num, 1, 1, NULL, 0, NULL);
    size_t n;
    uint8_t *b = a_finish(&a, "p/R", "java/lang/Object", &n);
    cf_instrument_result r;
    cf_error e;
    assert_int_equal(cf_instrument_class(b, n, &watch, NULL, NULL, &r, &e), CF_OK);
    assert_int_equal(r.methods[0].refusal, CF_REFUSE_NONE);
    assert_int_equal(r.methods[1].refusal, CF_REFUSE_NONE);
    assert_int_equal(r.methods[2].refusal, CF_REFUSE_PROBE_ARGS); /* returns an int */
    assert_non_null(strstr(r.methods[2].why, "returned object"));
    assert_int_equal(cf_class_check(r.bytes, r.len, &e), CF_OK);
    cf_class *c = parse_ok(r.bytes, r.len);
    cf_code k;
    code_of(c, "get", &k);
    /* 0 ldc2_w id; 3 invokestatic enter; 6 aload_1; 7 dup; 8 ldc2_w id; 11 invokestatic done; 14 areturn */
    assert_int_equal(k.code[6], JVM_OPC_aload_1);
    assert_int_equal(k.code[7], JVM_OPC_dup);
    assert_int_equal(k.code[8], JVM_OPC_ldc2_w);
    assert_int_equal(k.code[11], JVM_OPC_invokestatic);
    assert_int_equal(k.code[14], JVM_OPC_areturn);
    assert_true(k.max_stack >= 4);
    cf_code_release(&k);
    cf_class_free(c);
    cf_instrument_result_free(&r);
    free(b);

    cf_probe bad = watch;
    bad.enter = watch.normal_exit; /* at the entry */
    assert_int_equal(cf_probe_check(&bad, &e), CF_ERR_ARG);
    bad = watch;
    bad.normal_exit.args[0] = (cf_parg){CF_PARG_METHOD_ID, 0, NULL};
    bad.normal_exit.args[1] = (cf_parg){CF_PARG_RETURN, 0, NULL};
    bad.normal_exit.desc = "(JLjava/lang/Object;)V"; /* not first */
    assert_int_equal(cf_probe_check(&bad, &e), CF_ERR_ARG);
}

/* A normal-exit probe that takes a returned int or long (the agent's JDBC updates: the row
 * count): dup or dup2 before each return, max_stack grown for the long; a method returning
 * anything else is refused. */
static void test_returned_number(void **st)
{
    (void)st;
    static const cf_probe ints = {
        "ints", {0}, {"p/P", "rows", "(IJ)V", 2, {{CF_PARG_RETURN, 0, NULL}, {CF_PARG_METHOD_ID, 0, NULL}}}, {0}};
    static const cf_probe longs = {
        "longs",
        {0},
        {"p/P", "rows", "(JJ)V", 2, {{CF_PARG_RETURN, 0, NULL}, {CF_PARG_METHOD_ID, 0, NULL}}},
        {"p/P",
         "thrown",
         "(Ljava/lang/Throwable;J)V",
         2,
         {{CF_PARG_THROWABLE, 0, NULL}, {CF_PARG_METHOD_ID, 0, NULL}}}};
    asm_cls a;
    a_init(&a, 52);
    uint8_t num[] = {JVM_OPC_iconst_1, JVM_OPC_ireturn};
    uint8_t flag[] = {JVM_OPC_iconst_0, JVM_OPC_ireturn};
    uint8_t lng[] = {JVM_OPC_lconst_1, JVM_OPC_lreturn};
    a_method(&a, JVM_ACC_PUBLIC, "num", "()I", num, sizeof num, 1, 1, NULL, 0, NULL);
    a_method(&a, JVM_ACC_PUBLIC, "flag", "()Z", flag, sizeof flag, 1, 1, NULL, 0, NULL);
    a_method(&a, JVM_ACC_PUBLIC, "lng", "()J", lng, sizeof lng, 2, 1, NULL, 0, NULL);
    size_t n;
    uint8_t *b = a_finish(&a, "p/N", "java/lang/Object", &n);
    cf_instrument_result r;
    cf_error e;
    assert_int_equal(cf_probe_check(&ints, &e), CF_OK);
    assert_int_equal(cf_instrument_class(b, n, &ints, NULL, NULL, &r, &e), CF_OK);
    assert_int_equal(r.methods[0].refusal, CF_REFUSE_NONE);
    assert_int_equal(r.methods[1].refusal, CF_REFUSE_NONE); /* a boolean is an int */
    assert_int_equal(r.methods[2].refusal, CF_REFUSE_PROBE_ARGS);
    assert_non_null(strstr(r.methods[2].why, "returned int"));
    assert_int_equal(cf_class_check(r.bytes, r.len, &e), CF_OK);
    cf_class *c = parse_ok(r.bytes, r.len);
    cf_code k;
    code_of(c, "num", &k); /* 0 iconst_1; 1 dup; 2 ldc2_w id; 5 invokestatic; 8 ireturn */
    assert_int_equal(k.code[1], JVM_OPC_dup);
    assert_int_equal(k.code[8], JVM_OPC_ireturn);
    assert_true(k.max_stack >= 4);
    cf_code_release(&k);
    cf_class_free(c);
    cf_instrument_result_free(&r);

    assert_int_equal(cf_instrument_class(b, n, &longs, NULL, NULL, &r, &e), CF_OK);
    assert_int_equal(r.methods[0].refusal, CF_REFUSE_PROBE_ARGS);
    assert_int_equal(r.methods[2].refusal, CF_REFUSE_NONE);
    assert_int_equal(cf_class_check(r.bytes, r.len, &e), CF_OK);
    c = parse_ok(r.bytes, r.len);
    code_of(c, "lng", &k); /* 0 lconst_1; 1 dup2; 2 ldc2_w id; 5 invokestatic; 8 lreturn */
    assert_int_equal(k.code[1], JVM_OPC_dup2);
    assert_int_equal(k.code[8], JVM_OPC_lreturn);
    /* the handler copies the exception (one word), whatever the method returns:
     * dup; ldc2_w id; invokestatic thrown; athrow */
    assert_int_equal(k.code[k.code_len - 8], JVM_OPC_dup);
    assert_int_equal(k.code[k.code_len - 1], JVM_OPC_athrow);
    assert_true(k.max_stack >= 6); /* the long, its copy, the id */
    cf_code_release(&k);
    cf_class_free(c);
    cf_instrument_result_free(&r);
    free(b);
}

static void test_tables_and_uninitialized(void **st)
{
    (void)st;
    asm_cls a;
    a_init(&a, 52);
    uint16_t obj = a_class(&a, "java/lang/Object");
    uint16_t init = a_ref(&a, JVM_CONSTANT_Methodref, "java/lang/Object", "<init>", "()V");
    /* 0 new Object; 3 dup; 4 iload_0; 5 ifeq +3 (8); 8 invokespecial; 11 pop; 12 return */
    uint8_t code[] = {
        JVM_OPC_new, (uint8_t)(obj >> 8),   (uint8_t)obj,         JVM_OPC_dup,   JVM_OPC_iload_0, JVM_OPC_ifeq,  0,
        3,           JVM_OPC_invokespecial, (uint8_t)(init >> 8), (uint8_t)init, JVM_OPC_pop,     JVM_OPC_return};
    /* frame at 8: full [int] [Uninitialized(0), Uninitialized(0)] */
    uint8_t smt[] = {0, 1, CF_FRAME_FULL,          0, 8, 0, 1, JVM_ITEM_Integer, 0, 2, JVM_ITEM_Uninitialized,
                     0, 0, JVM_ITEM_Uninitialized, 0, 0};
    uint8_t lnt[] = {0, 2, 0, 0, 0, 10, 0, 12, 0, 11};
    uint16_t nm = a_utf8(&a, "x"), ds = a_utf8(&a, "I");
    uint8_t lvt[] = {0, 1, 0, 0, 0, 13, (uint8_t)(nm >> 8), (uint8_t)nm, (uint8_t)(ds >> 8), (uint8_t)ds, 0, 0};
    /* type annotations: new at pc 0 (offset_target) and local 0 over [0, 13) (localvar_target) */
    uint16_t tn = a_utf8(&a, "Lp/T;");
    uint8_t ta[] = {0,
                    2,
                    CF_TARGET_NEW,
                    0,
                    0,
                    0,
                    (uint8_t)(tn >> 8),
                    (uint8_t)tn,
                    0,
                    0,
                    CF_TARGET_LOCAL_VARIABLE,
                    0,
                    1,
                    0,
                    4,
                    0,
                    9,
                    0,
                    0,
                    0,
                    (uint8_t)(tn >> 8),
                    (uint8_t)tn,
                    0,
                    0};
    asm_attrs ca = {0};
    aa_add(&a, &ca, "StackMapTable", smt, sizeof smt);
    aa_add(&a, &ca, "LineNumberTable", lnt, sizeof lnt);
    aa_add(&a, &ca, "LocalVariableTable", lvt, sizeof lvt);
    aa_add(&a, &ca, "RuntimeInvisibleTypeAnnotations", ta, sizeof ta);
    a_method(&a, JVM_ACC_PUBLIC | JVM_ACC_STATIC, "u", "(I)V", code, sizeof code, 3, 1, NULL, 0, &ca);
    size_t n;
    uint8_t *b = a_finish(&a, "p/U", "java/lang/Object", &n);
    uint8_t *o;
    cf_instrument_result r;
    cf_class *c = instrument_ok(b, n, &o, &r);
    cf_code k;
    code_of(c, "u", &k);
    cf_frame *fr;
    uint32_t nf;
    cf_error e;
    assert_int_equal(cf_stackmap_decode(sub_attr(c, &k, "StackMapTable"), k.code_len, &fr, &nf, &e), CF_OK);
    assert_int_equal(nf, 2);
    assert_int_equal(fr[0].pc, 14);
    /* body: nlocals(2) int(1) nstack(2) U(3) U(3) */
    assert_int_equal(fr[0].body[5], JVM_ITEM_Uninitialized);
    assert_int_equal(cmr_be16(fr[0].body + 6), 6); /* `new` moved from 0 to 6 */
    assert_int_equal(cmr_be16(fr[0].body + 9), 6);
    assert_int_equal(k.code[6], JVM_OPC_new);
    free(fr);
    const cf_attr *l = sub_attr(c, &k, "LineNumberTable");
    assert_int_equal(cmr_be16(l->data + 2), 0);  /* line 10 still starts at 0 */
    assert_int_equal(cmr_be16(l->data + 6), 18); /* line 11: the exit probe before return */
    assert_int_equal(k.code[18], JVM_OPC_ldc2_w);
    const cf_attr *v = sub_attr(c, &k, "LocalVariableTable");
    assert_int_equal(cmr_be16(v->data + 2), 0);
    assert_int_equal(cmr_be16(v->data + 4), 25); /* whole original code, not the handler */
    assert_int_equal(k.exc[0].end, 25);
    const cf_attr *t = sub_attr(c, &k, "RuntimeInvisibleTypeAnnotations");
    assert_non_null(t);
    assert_int_equal(t->len, sizeof ta);
    assert_int_equal(t->data[2], CF_TARGET_NEW);
    assert_int_equal(cmr_be16(t->data + 3), 6); /* the `new` moved from 0 to 6 */
    assert_int_equal(t->data[10], CF_TARGET_LOCAL_VARIABLE);
    assert_int_equal(cmr_be16(t->data + 13), 10); /* local range [4, 13=end) -> [10, 25=end) */
    assert_int_equal(cmr_be16(t->data + 15), 15);
    cf_code_release(&k);
    cf_class_free(c);
    cf_instrument_result_free(&r);
    free(b);
}

/* limits: a full constant pool and a max_stack that cannot grow are refused, class untouched */
static void test_limits(void **st)
{
    (void)st;
    asm_cls a;
    a_init(&a, 52);
    char name[16];
    for (int i = 0; i < 65525; i++) { /* 65532 entries with the others */
        snprintf(name, sizeof name, "u%d", i);
        a_utf8(&a, name);
    }
    uint8_t code[] = {JVM_OPC_return};
    a_method(&a, JVM_ACC_PUBLIC | JVM_ACC_STATIC, "m", "()V", code, sizeof code, 0, 0, NULL, 0, NULL);
    size_t n;
    uint8_t *b = a_finish(&a, "p/F", "java/lang/Object", &n);
    cf_class *c = parse_ok(b, n);
    uint16_t before = c->cp_count;
    cf_method_result mr;
    cf_error e;
    assert_int_equal(cf_instrument_method(c, 0, timer(), &mr, &e), CF_ERR_REFUSED);
    assert_int_equal(mr.refusal, CF_REFUSE_CONSTANT_POOL_FULL);
    assert_int_equal(c->cp_count, before);
    uint8_t *o;
    size_t ol;
    assert_int_equal(cf_class_write(c, &o, &ol, &e), CF_OK);
    assert_int_equal(ol, n);
    assert_memory_equal(o, b, n);
    free(o);
    cf_class_free(c);
    free(b);

    a_init(&a, 52);
    a_method(&a, JVM_ACC_PUBLIC | JVM_ACC_STATIC, "s", "()V", code, sizeof code, 65534, 0, NULL, 0, NULL);
    b = a_finish(&a, "p/S", "java/lang/Object", &n);
    cf_instrument_result r;
    assert_int_equal(cf_instrument_class(b, n, timer(), NULL, NULL, &r, &e), CF_OK);
    assert_null(r.bytes);
    assert_int_equal(r.methods[0].refusal, CF_REFUSE_STACK_TOO_LARGE);
    cf_instrument_result_free(&r);
    free(b);
}

/* The constant pool grows (cmr_array_grow) from its parsed size to the format's limit: every
 * entry, old and appended, stays readable, a full pool refuses more, and the class writes
 * back with all of them. */
static void test_cpool_growth(void **st)
{
    (void)st;
    asm_cls a;
    a_init(&a, 52);
    uint8_t code[] = {JVM_OPC_return};
    a_method(&a, JVM_ACC_PUBLIC | JVM_ACC_STATIC, "m", "()V", code, sizeof code, 0, 0, NULL, 0, NULL);
    size_t n;
    uint8_t *b = a_finish(&a, "p/G", "java/lang/Object", &n);
    cf_class *c = parse_ok(b, n);
    uint16_t first = c->cp_count;
    char name[16];
    for (uint32_t i = first; i < 65535; i++) {
        snprintf(name, sizeof name, "g%u", i);
        assert_int_equal(cf_cp_append_utf8(c, name, strlen(name)), i);
    }
    assert_int_equal(c->cp_count, 65535);
    assert_true(c->cp_cap >= 65535);
    assert_int_equal(cf_cp_append_utf8(c, "x", 1), 0); /* full */
    assert_int_equal(cf_cp_add_long(c, 1), 0);
    assert_true(cf_str_eq(cf_class_name(c), "p/G"));
    uint8_t *o;
    size_t ol;
    cf_error e;
    assert_int_equal(cf_class_write(c, &o, &ol, &e), CF_OK);
    cf_class *c2 = parse_ok(o, ol);
    assert_int_equal(c2->cp_count, 65535);
    for (uint32_t i = first; i < 65535; i += 997) {
        snprintf(name, sizeof name, "g%u", i);
        assert_true(cf_str_eq(cf_cp_utf8(c2, (uint16_t)i), name));
    }
    assert_true(cf_str_eq(cf_cp_utf8(c2, 65534), "g65534"));
    cf_class_free(c2);
    free(o);
    cf_class_free(c);
    free(b);
}

/* Find-or-add, linear for a class's first searches and through the pool's index after
 * (cf_cpool.c), gives what a linear search gives: the lowest index holding the constant,
 * for entries parsed (duplicates included), appended, rolled back and appended again,
 * across the index's growth. */
static void test_cpool_index(void **st)
{
    (void)st;
    asm_cls a;
    a_init(&a, 52);
    uint16_t dup1 = a_utf8(&a, "dup"), dup2 = a_utf8(&a, "dup"); /* equal entries: legal */
    uint16_t seven = a_int(&a, 7000000);
    uint16_t str = a_class(&a, "java/lang/String");
    uint8_t code[] = {JVM_OPC_return};
    a_method(&a, JVM_ACC_PUBLIC | JVM_ACC_STATIC, "m", "()V", code, sizeof code, 0, 0, NULL, 0, NULL);
    size_t n;
    uint8_t *b = a_finish(&a, "p/I", "java/lang/Object", &n);
    cf_class *c = parse_ok(b, n);
    assert_true(dup1 < dup2);
    assert_int_equal(cf_cp_find_utf8(c, "dup", 3), dup1);
    assert_int_equal(cf_cp_add_utf8(c, "dup", 3), dup1);
    assert_int_equal(cf_cp_add_int(c, 7000000), seven);
    assert_int_equal(cf_cp_add_class(c, "java/lang/String"), str);
    assert_int_equal(cf_cp_find_utf8(c, "absent", 6), 0);
    assert_null(c->cp_index); /* a class's first searches are linear: no index yet */

    /* appended, then found (the index is built on the way: the same answers) */
    uint16_t mark = c->cp_count;
    uint16_t x = cf_cp_add_utf8(c, "x", 1);
    assert_int_equal(x, mark);
    assert_int_equal(cf_cp_add_utf8(c, "x", 1), x);
    uint16_t mref = cf_cp_add_methodref(c, "p/Probe", "enter", "(J)V");
    assert_int_equal(cf_cp_add_methodref(c, "p/Probe", "enter", "(J)V"), mref);
    assert_int_equal(cf_cp_add_int(c, 123456789), cf_cp_add_int(c, 123456789));

    /* rolled back: gone; their indexes reused by other constants */
    c->cp_count = mark;
    assert_int_equal(cf_cp_find_utf8(c, "x", 1), 0);
    uint16_t y = cf_cp_add_utf8(c, "y", 1);
    assert_int_equal(y, mark); /* where "x" was */
    assert_int_equal(cf_cp_find_utf8(c, "x", 1), 0);
    assert_int_equal(cf_cp_find_utf8(c, "y", 1), y);
    uint16_t x2 = cf_cp_add_utf8(c, "x", 1);
    assert_int_equal(x2, mark + 1);
    uint16_t mref2 = cf_cp_add_methodref(c, "p/Probe", "enter", "(J)V");
    assert_true(mref2 > x2);
    assert_int_equal(cf_cp_add_methodref(c, "p/Probe", "enter", "(J)V"), mref2);

    /* thousands more: the index grows, every one is found where it was put */
    char name[16];
    uint16_t first = c->cp_count;
    for (int i = 0; i < 20000; i++) {
        snprintf(name, sizeof name, "k%d", i);
        assert_int_equal(cf_cp_add_utf8(c, name, strlen(name)), first + i);
    }
    for (int i = 0; i < 20000; i += 7) {
        snprintf(name, sizeof name, "k%d", i);
        assert_int_equal(cf_cp_find_utf8(c, name, strlen(name)), first + i);
    }
    assert_int_equal(cf_cp_find_utf8(c, "dup", 3), dup1);
    assert_int_equal(cf_cp_find_utf8(c, "y", 1), y);
    assert_non_null(c->cp_index);
    cf_class_free(c);
    free(b);
}

static void test_probe_check(void **st)
{
    (void)st;
    cf_error e;
    assert_int_equal(cf_probe_check(timer(), &e), CF_OK);
    cf_probe p = *timer();
    p.enter.desc = "(I)V";
    assert_int_equal(cf_probe_check(&p, &e), CF_ERR_ARG);
    p = *timer();
    p.enter.args[0].kind = CF_PARG_THROWABLE;
    p.enter.desc = "(Ljava/lang/Throwable;)V";
    assert_int_equal(cf_probe_check(&p, &e), CF_ERR_ARG);
    p = *timer();
    p.normal_exit.desc = "(JI)V";
    p.normal_exit.nargs = 2;
    p.normal_exit.args[1] = (cf_parg){CF_PARG_INT, INT64_C(1) << 40, NULL};
    assert_int_equal(cf_probe_check(&p, &e), CF_ERR_ARG); /* int out of range */
    p = *timer();
    p.normal_exit.desc = "(JLjava/lang/String;)V";
    p.normal_exit.nargs = 2;
    p.normal_exit.args[1] = (cf_parg){CF_PARG_STRING, 0, "smile \xF0\x9F\x98\x80"};
    assert_int_equal(cf_probe_check(&p, &e), CF_ERR_ARG); /* not modified UTF-8 */
    p.normal_exit.args[1].s = "ok \xC3\xA9";
    assert_int_equal(cf_probe_check(&p, &e), CF_OK);
    cf_probe none = {0};
    assert_int_equal(cf_probe_check(&none, &e), CF_ERR_ARG);
    /* a probe with only an exceptional-exit call is fine (entry/exit sites get no call) */
    cf_probe only_exc = {.kind = "x", .exc_exit = timer()->exc_exit};
    assert_int_equal(cf_probe_check(&only_exc, &e), CF_OK);
}

/* --- annotations ------------------------------------------------------------------ */

static int collect_type(uint16_t type, void *ud)
{
    uint16_t *seen = ud;
    seen[++seen[0]] = type;
    return seen[0] == 8 ? 7 : 0; /* the 8th stops the walk with 7 */
}

static void test_annotation_types(void **state)
{
    (void)state;
    /* two annotations: @T5(x = "s") and @T8(v = {@T9, E.C}) */
    static const uint8_t data[] = {0,   2,                           /* num_annotations */
                                   0,   5, 0, 1, 0, 6,   's', 0,  7, /* @T5(x = "s") */
                                   0,   8, 0, 1, 0, 6,   '[', 0,  2, /* @T8(v = {...}) */
                                   '@', 0, 9, 0, 0, 'e', 0,   10, 0, 11};
    uint16_t seen[16] = {0};
    cf_attr a = {0, sizeof data, data};
    assert_int_equal(cf_annotation_types(&a, collect_type, seen), 0);
    assert_int_equal(seen[0], 2);
    assert_int_equal(seen[1], 5);
    assert_int_equal(seen[2], 8); /* the nested @T9 is an element, not one of the attribute's */
    /* cut anywhere: -1, with the annotations before the damage reported */
    for (uint32_t len = 2; len < sizeof data; len++) {
        memset(seen, 0, sizeof seen);
        cf_attr cut = {0, len, data};
        assert_int_equal(cf_annotation_types(&cut, collect_type, seen), -1);
        assert_true(seen[0] <= 2);
    }
    /* nesting deeper than the bound is refused, not followed down the stack */
    uint8_t deep[2 + 7 * 80];
    size_t n = 0;
    deep[n++] = 0, deep[n++] = 1; /* one annotation */
    for (int d = 0; d < 80; d++) {
        deep[n++] = 0, deep[n++] = 5, deep[n++] = 0, deep[n++] = 1; /* type, one pair */
        deep[n++] = 0, deep[n++] = 6, deep[n++] = '@';              /* name, nested annotation */
    }
    assert_true(n <= sizeof deep);
    memset(seen, 0, sizeof seen);
    cf_attr d = {0, (uint32_t)n, deep};
    assert_int_equal(cf_annotation_types(&d, collect_type, seen), -1);
    /* fn stops the walk */
    uint8_t many[2 + 10 * 4];
    many[0] = 0, many[1] = 10;
    for (int k = 0; k < 10; k++)
        many[2 + 4 * k] = 0, many[3 + 4 * k] = (uint8_t)(20 + k), many[4 + 4 * k] = 0, many[5 + 4 * k] = 0;
    memset(seen, 0, sizeof seen);
    cf_attr m = {0, sizeof many, many};
    assert_int_equal(cf_annotation_types(&m, collect_type, seen), 7);
    assert_int_equal(seen[0], 8);
}

/* ------------------------------------------------------------------ trivial methods */

static void test_trivial(void **st)
{
    (void)st;
    asm_cls a;
    a_init(&a, 52);
    uint16_t f = a_ref(&a, JVM_CONSTANT_Fieldref, "p/T", "x", "I");
    uint16_t sf = a_ref(&a, JVM_CONSTANT_Fieldref, "p/T", "s", "J");
    uint16_t call = a_ref(&a, JVM_CONSTANT_Methodref, "p/T", "get", "()I");
    uint16_t cls = a_class(&a, "p/T");
    const uint8_t get[] = {JVM_OPC_aload_0, JVM_OPC_getfield, 0, (uint8_t)f, JVM_OPC_ireturn};
    const uint8_t set[] = {JVM_OPC_aload_0, JVM_OPC_iload_1, JVM_OPC_putfield, 0, (uint8_t)f, JVM_OPC_return};
    const uint8_t sget[] = {JVM_OPC_getstatic, 0, (uint8_t)sf, JVM_OPC_lreturn};
    const uint8_t sset[] = {JVM_OPC_lload_0, JVM_OPC_putstatic, 0, (uint8_t)sf, JVM_OPC_return};
    /* max(a, b): a forward branch, no call */
    const uint8_t max[] = {JVM_OPC_iload_0, JVM_OPC_iload_1, JVM_OPC_if_icmplt, 0, 5, JVM_OPC_iload_0,
                           JVM_OPC_ireturn, JVM_OPC_iload_1, JVM_OPC_ireturn};
    const uint8_t empty[] = {JVM_OPC_return};
    const uint8_t calls[] = {JVM_OPC_aload_0, JVM_OPC_invokevirtual, 0, (uint8_t)call, JVM_OPC_ireturn};
    /* for (;;) i++ : a backward branch */
    const uint8_t loop[] = {JVM_OPC_iinc, 1, 1, JVM_OPC_goto, 0xff, 0xfd};
    const uint8_t alloc[] = {JVM_OPC_new, 0, (uint8_t)cls, JVM_OPC_areturn};
    const uint8_t thrw[] = {JVM_OPC_aconst_null, JVM_OPC_athrow};
    const uint8_t lock[] = {JVM_OPC_aload_0, JVM_OPC_monitorenter, JVM_OPC_return};
    uint8_t big[CF_TRIVIAL_MAX_CODE + 1];
    memset(big, JVM_OPC_nop, sizeof big);
    big[sizeof big - 1] = JVM_OPC_return;
    uint8_t fits[CF_TRIVIAL_MAX_CODE];
    memset(fits, JVM_OPC_nop, sizeof fits);
    fits[sizeof fits - 1] = JVM_OPC_return;
    const uint16_t exc[] = {0, 1, 1, 0};
    a_method(&a, JVM_ACC_PUBLIC, "getX", "()I", get, sizeof get, 1, 1, NULL, 0, NULL);
    a_method(&a, JVM_ACC_PUBLIC, "setX", "(I)V", set, sizeof set, 2, 2, NULL, 0, NULL);
    a_method(&a, JVM_ACC_PUBLIC | JVM_ACC_STATIC, "getS", "()J", sget, sizeof sget, 2, 0, NULL, 0, NULL);
    a_method(&a, JVM_ACC_PUBLIC | JVM_ACC_STATIC, "setS", "(J)V", sset, sizeof sset, 2, 2, NULL, 0, NULL);
    a_method(&a, JVM_ACC_PUBLIC | JVM_ACC_STATIC, "max", "(II)I", max, sizeof max, 2, 2, NULL, 0, NULL);
    a_method(&a, JVM_ACC_PUBLIC, "empty", "()V", empty, sizeof empty, 0, 1, NULL, 0, NULL);
    a_method(&a, JVM_ACC_PUBLIC, "calls", "()I", calls, sizeof calls, 1, 1, NULL, 0, NULL);
    a_method(&a, JVM_ACC_PUBLIC, "loop", "()V", loop, sizeof loop, 0, 2, NULL, 0, NULL);
    a_method(&a, JVM_ACC_PUBLIC, "alloc", "()Ljava/lang/Object;", alloc, sizeof alloc, 1, 1, NULL, 0, NULL);
    a_method(&a, JVM_ACC_PUBLIC, "thrw", "()V", thrw, sizeof thrw, 1, 1, NULL, 0, NULL);
    a_method(&a, JVM_ACC_PUBLIC, "lock", "()V", lock, sizeof lock, 1, 1, NULL, 0, NULL);
    a_method(&a, JVM_ACC_PUBLIC, "big", "()V", big, sizeof big, 0, 1, NULL, 0, NULL);
    a_method(&a, JVM_ACC_PUBLIC, "fits", "()V", fits, sizeof fits, 0, 1, NULL, 0, NULL);
    a_method(&a, JVM_ACC_PUBLIC | JVM_ACC_SYNCHRONIZED, "syncGet", "()I", get, sizeof get, 1, 1, NULL, 0, NULL);
    a_method(&a, JVM_ACC_PUBLIC, "<init>", "()V", empty, sizeof empty, 0, 1, NULL, 0, NULL);
    a_method(&a, JVM_ACC_PUBLIC, "guarded", "()V", empty, sizeof empty, 0, 1, exc, 1, NULL);
    a_method_nocode(&a, JVM_ACC_PUBLIC | JVM_ACC_ABSTRACT, "abs", "()V");
    size_t n;
    uint8_t *b = a_finish(&a, "p/T", "java/lang/Object", &n);
    cf_class *c = parse_ok(b, n);
    static const struct {
        const char *name;
        cf_trivial_kind want;
    } cases[] = {
        {"getX", CF_TRIVIAL_GETTER}, {"setX", CF_TRIVIAL_SETTER}, {"getS", CF_TRIVIAL_GETTER},
        {"setS", CF_TRIVIAL_SETTER}, {"max", CF_TRIVIAL_LEAF},    {"empty", CF_TRIVIAL_LEAF},
        {"calls", CF_TRIVIAL_NO},    {"loop", CF_TRIVIAL_NO},     {"alloc", CF_TRIVIAL_NO},
        {"thrw", CF_TRIVIAL_NO},     {"lock", CF_TRIVIAL_NO},     {"big", CF_TRIVIAL_NO},
        {"fits", CF_TRIVIAL_LEAF},   {"syncGet", CF_TRIVIAL_NO},  {"<init>", CF_TRIVIAL_NO},
        {"guarded", CF_TRIVIAL_NO},  {"abs", CF_TRIVIAL_NO},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cf_trivial_kind k = cf_method_trivial(c, &c->methods[method_index(c, cases[i].name)]);
        if (k != cases[i].want)
            fail_msg("%s: %s, want %s", cases[i].name, cf_trivial_name(k), cf_trivial_name(cases[i].want));
    }
    assert_string_equal(cf_trivial_name(CF_TRIVIAL_LEAF), "leaf");
    cf_class_free(c);
    free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_all_tags),
        cmocka_unit_test(test_method_id),
        cmocka_unit_test(test_callees),
        cmocka_unit_test(test_instrument_basic),
        cmocka_unit_test(test_branch_targets),
        cmocka_unit_test(test_widening),
        cmocka_unit_test(test_trampoline),
        cmocka_unit_test(test_switch_padding),
        cmocka_unit_test(test_code_too_large),
        cmocka_unit_test(test_constructors),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_object_arguments),
        cmocka_unit_test(test_this_int_field),
        cmocka_unit_test(test_replaced_argument),
        cmocka_unit_test(test_returned_object),
        cmocka_unit_test(test_returned_number),
        cmocka_unit_test(test_tables_and_uninitialized),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_cpool_growth),
        cmocka_unit_test(test_cpool_index),
        cmocka_unit_test(test_probe_check),
        cmocka_unit_test(test_annotation_types),
        cmocka_unit_test(test_trivial),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

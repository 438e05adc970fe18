/*
 * cf_malformed_test.c - crafted-malformed corpus: truncations at every length, byte
 * mutations at every position, count/length/index corruptions, cyclic and wrong-kind
 * constant references, oversized lengths, broken bytecode, broken StackMapTable. Every
 * input must yield an error code with a message (or a valid result), never a crash or an
 * out-of-bounds read: CI runs this under ASan + UBSan (label unit).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>

#include "cf_asm.h"
#include "cf_testprobes.h"

/* Drives every entry point over one input. Returns the parse result. */
static cf_err exercise(const uint8_t *b, size_t n)
{
    cf_class *c;
    cf_error e;
    memset(&e, 0, sizeof e);
    cf_err r = cf_class_parse(b, n, &c, &e);
    if (r) {
        assert_true(e.msg[0] != 0); /* every error has a message */
        return r;
    }
    uint8_t *o;
    size_t ol;
    if (cf_class_write_flags(c, CF_WRITE_REENCODE, &o, &ol, &e) == CF_OK) {
        assert_int_equal(ol, n);
        assert_memory_equal(o, b, n); /* whatever parses round-trips */
        free(o);
    }
    for (uint16_t i = 0; i < c->method_count; i++) {
        cf_callee *v;
        size_t k;
        if (cf_method_callees(c, &c->methods[i], &v, &k, &e) == CF_OK)
            free(v);
        else
            assert_true(e.msg[0] != 0);
        (void)cf_method_id(c, &c->methods[i]);
    }
    cf_class_free(c);
    /* refused methods stay as they were: the output must pass the structural check whenever
   * the input does */
    bool input_ok = cf_class_check(b, n, &e) == CF_OK;
    for (int k = 0; k < CF_PROBE_KIND_COUNT; k++) {
        cf_instrument_result ir;
        if (cf_instrument_class(b, n, cf_test_probe(k), NULL, NULL, &ir, &e) == CF_OK) {
            if (ir.bytes && input_ok && cf_class_check(ir.bytes, ir.len, &e) != CF_OK)
                fail_msg("instrumented output fails the check: %s", e.msg);
            cf_instrument_result_free(&ir);
        }
    }
    cf_instrument_result all;
    if (cf_instrument_stacked(b, n, cf_test_probes, CF_PROBE_KIND_COUNT, NULL, NULL, &all, &e) == CF_OK) {
        if (all.bytes && input_ok && cf_class_check(all.bytes, all.len, &e) != CF_OK)
            fail_msg("stacked instrumented output fails the check: %s", e.msg);
        cf_instrument_result_free(&all);
    }
    return CF_OK;
}

/* A valid class that uses most structures the parser and the instrumenter know. */
static uint8_t *base_class(size_t *n)
{
    asm_cls a;
    a_init(&a, 55);
    uint16_t mr = a_ref(&a, JVM_CONSTANT_Methodref, "p/A", "m", "(I)I");
    uint16_t bsm = a_ref(&a, JVM_CONSTANT_Methodref, "p/Boot", "bsm", "()V");
    uint16_t mh = a_mh(&a, JVM_REF_invokeStatic, bsm);
    uint16_t indy = a_dyn(&a, JVM_CONSTANT_InvokeDynamic, 0, "run", "()Ljava/lang/Runnable;");
    a_dyn(&a, JVM_CONSTANT_Dynamic, 0, "k", "I");
    a_long(&a, 77);
    a_modpkg(&a, JVM_CONSTANT_Package, "p");
    uint16_t exc = a_class(&a, "java/lang/Exception");
    /* m(I)I: 0 iload_0; 1 tableswitch(pad 2) ... ; try/catch; invokedynamic */
    uint8_t code[] = {
        JVM_OPC_iload_0, /* 0 iload_0 */
        JVM_OPC_tableswitch,
        0,
        0, /* 1 tableswitch, pad to 4 */
        0,
        0,
        0,
        31, /* default -> 32 */
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        1, /* 0..1 */
        0,
        0,
        0,
        23,
        0,
        0,
        0,
        27, /* -> 24, 28 */
        JVM_OPC_iconst_1,
        JVM_OPC_ireturn,
        0,
        0, /* 24 iconst_1 ireturn nop nop */
        JVM_OPC_iconst_2,
        JVM_OPC_ireturn,
        0,
        0, /* 28 iconst_2 ireturn nop nop */
        JVM_OPC_invokedynamic,
        (uint8_t)(indy >> 8),
        (uint8_t)indy,
        0,
        0,           /* 32 invokedynamic */
        JVM_OPC_pop, /* 37 pop */
        JVM_OPC_iload_0,
        JVM_OPC_invokestatic,
        (uint8_t)(mr >> 8),
        (uint8_t)mr,     /* 38 iload_0 invokestatic m */
        JVM_OPC_ireturn, /* 42 ireturn */
        JVM_OPC_astore_1,
        JVM_OPC_iconst_0,
        JVM_OPC_ireturn, /* 43 astore_1 iconst_0 ireturn (handler) */
    };
    uint16_t exct[] = {32, 43, 43, exc};
    uint16_t self = a_class(&a, "p/A");
    (void)self;
    uint8_t smt[] = {
        0, 4, 24, 3, 3, CF_FRAME_SAME_LOCALS_1_STACK_ITEM + 10, JVM_ITEM_Object, (uint8_t)(exc >> 8), (uint8_t)exc};
    /* frames: same@24, same@28, same@32, same_locals_1_stack_item@43 [Exception] */
    asm_attrs ca = {0};
    aa_add(&a, &ca, "StackMapTable", smt, sizeof smt);
    uint8_t lnt[] = {0, 2, 0, 0, 0, 1, 0, 32, 0, 2};
    aa_add(&a, &ca, "LineNumberTable", lnt, sizeof lnt);
    uint16_t vn = a_utf8(&a, "x"), vd = a_utf8(&a, "I");
    uint8_t lvt[] = {0, 1, 0, 0, 0, 46, (uint8_t)(vn >> 8), (uint8_t)vn, (uint8_t)(vd >> 8), (uint8_t)vd, 0, 0};
    aa_add(&a, &ca, "LocalVariableTable", lvt, sizeof lvt);
    /* type annotation: offset_target (instanceof) at pc 38, empty path, annotation p/T with 0 pairs */
    uint16_t tn = a_utf8(&a, "Lp/T;");
    uint8_t ta[] = {0, 1, CF_TARGET_INSTANCEOF, 0, 38, 0, (uint8_t)(tn >> 8), (uint8_t)tn, 0, 0};
    aa_add(&a, &ca, "RuntimeVisibleTypeAnnotations", ta, sizeof ta);
    a_method(&a, JVM_ACC_PUBLIC | JVM_ACC_STATIC, "m", "(I)I", code, sizeof code, 2, 2, exct, 1, &ca);
    uint16_t sup = a_ref(&a, JVM_CONSTANT_Methodref, "java/lang/Object", "<init>", "()V");
    uint8_t ctor[] = {JVM_OPC_aload_0, JVM_OPC_invokespecial, (uint8_t)(sup >> 8), (uint8_t)sup, JVM_OPC_return};
    a_method(&a, JVM_ACC_PUBLIC, "<init>", "()V", ctor, sizeof ctor, 1, 1, NULL, 0, NULL);
    a_method_nocode(&a, JVM_ACC_PUBLIC | JVM_ACC_ABSTRACT, "abs", "()V");
    a_field(&a, JVM_ACC_PRIVATE, "f", "J");
    uint8_t bsma[] = {0, 1, (uint8_t)(mh >> 8), (uint8_t)mh, 0, 0};
    a_class_attr(&a, "BootstrapMethods", bsma, sizeof bsma);
    a_class_attr(&a, "SourceFile", "\0\1", 2);
    return a_finish(&a, "p/A", "java/lang/Object", n);
}

/* A version-49 class with a jsr/ret subroutine and an exception handler (old verifier). */
static uint8_t *jsr_class(size_t *n)
{
    asm_cls a;
    a_init(&a, 49);
    uint16_t cnt = a_ref(&a, JVM_CONSTANT_Fieldref, "p/J", "c", "I");
    uint8_t code[] = {JVM_OPC_iload_0,
                      JVM_OPC_ifge,
                      0,
                      5,
                      JVM_OPC_aconst_null,
                      JVM_OPC_athrow, /* iload_0 ifge +5 (6); aconst_null athrow */
                      JVM_OPC_jsr,
                      0,
                      9,
                      JVM_OPC_iload_0,
                      JVM_OPC_ireturn, /* 6 jsr 15; iload_0 ireturn */
                      JVM_OPC_astore_1,
                      JVM_OPC_jsr,
                      0,
                      3,
                      JVM_OPC_aload_1,
                      JVM_OPC_athrow, /* 11 astore_1 jsr 15; aload_1 athrow */
                      JVM_OPC_astore_2,
                      JVM_OPC_getstatic,
                      (uint8_t)(cnt >> 8),
                      (uint8_t)cnt,
                      JVM_OPC_pop,
                      JVM_OPC_ret,
                      2};
    /* fix offsets: jsr at 6 -> 17, jsr at 12 -> 17 */
    code[7] = 0;
    code[8] = 11;
    code[13] = 0;
    code[14] = 5;
    uint16_t exc[] = {0, 9, 11, 0};
    a_method(&a, JVM_ACC_PUBLIC | JVM_ACC_STATIC, "f", "(I)I", code, sizeof code, 2, 3, exc, 1, NULL);
    return a_finish(&a, "p/J", "java/lang/Object", n);
}

static void test_jsr_class(void **st)
{
    (void)st;
    size_t n;
    uint8_t *b = jsr_class(&n);
    assert_int_equal(exercise(b, n), CF_OK);
    cf_instrument_result r;
    cf_error e;
    assert_int_equal(cf_instrument_class(b, n, cf_test_probe(0), NULL, NULL, &r, &e), CF_OK);
    assert_int_equal(r.n_instrumented, 1);
    cf_instrument_result_free(&r);
    for (size_t pos = 0; pos < n; pos++)
        for (int v = 0; v < 256; v += 17) {
            uint8_t *t = malloc(n);
            memcpy(t, b, n);
            t[pos] = (uint8_t)v;
            (void)exercise(t, n);
            free(t);
        }
    for (size_t len = 0; len < n; len++) {
        uint8_t *t = malloc(len ? len : 1);
        memcpy(t, b, len);
        assert_int_not_equal(exercise(t, len), CF_OK);
        free(t);
    }
    free(b);
}

static void test_base_is_valid(void **st)
{
    (void)st;
    size_t n;
    uint8_t *b = base_class(&n);
    assert_int_equal(exercise(b, n), CF_OK);
    cf_instrument_result r;
    cf_error e;
    assert_int_equal(cf_instrument_class(b, n, cf_test_probe(0), NULL, NULL, &r, &e), CF_OK);
    assert_int_equal(r.n_instrumented, 2); /* m and <init>; abs refused */
    cf_instrument_result_free(&r);
    free(b);
}

static void test_truncations(void **st)
{
    (void)st;
    size_t n;
    uint8_t *b = base_class(&n);
    for (size_t len = 0; len < n; len++) {
        uint8_t *t = malloc(len ? len : 1); /* exact-size copy: ASan catches any overread */
        memcpy(t, b, len);
        assert_int_not_equal(exercise(t, len), CF_OK);
        free(t);
    }
    free(b);
}

static void test_byte_mutations(void **st)
{
    (void)st;
    size_t n;
    uint8_t *b = base_class(&n);
    static const int deltas[] = {0x00, 0xff, 0x7f, 0x80, 0x01, -1, +1, 0x10};
    unsigned ok = 0, bad = 0;
    for (size_t pos = 0; pos < n; pos++) {
        for (size_t d = 0; d < sizeof deltas / sizeof *deltas; d++) {
            uint8_t *t = malloc(n);
            memcpy(t, b, n);
            if (d < 5)
                t[pos] = (uint8_t)deltas[d];
            else
                t[pos] = (uint8_t)(t[pos] + deltas[d]);
            if (exercise(t, n) == CF_OK)
                ok++;
            else
                bad++;
            free(t);
        }
    }
    printf("byte mutations: %u parsed, %u rejected\n", ok, bad);
    assert_true(bad > 0 && ok > 0);
    free(b);
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)rng;
}

static void test_random_mutations(void **st)
{
    (void)st;
    size_t n;
    uint8_t *b = base_class(&n);
    for (int it = 0; it < 20000; it++) {
        size_t len = n;
        uint8_t *t = malloc(n + 8);
        memcpy(t, b, n);
        int k = 1 + (int)(rnd() % 4);
        for (int j = 0; j < k; j++)
            t[rnd() % n] = (uint8_t)rnd();
        if (rnd() % 8 == 0)
            len = rnd() % n;
        uint8_t *exact = malloc(len ? len : 1);
        memcpy(exact, t, len);
        (void)exercise(exact, len);
        free(exact);
        free(t);
    }
    free(b);
}

/* ---- crafted cases with the expected error code ---- */

typedef struct hdr {
    cf_buf b;
} hdr;

static uint8_t *raw_class(const uint8_t *cp, size_t cplen, uint16_t cp_count, uint16_t major, uint16_t this_idx,
                          const uint8_t *tail, size_t tail_len, size_t *n)
{
    cf_buf o = {0};
    cf_buf_u4(&o, JVM_CLASSFILE_MAGIC);
    cf_buf_u2(&o, 0);
    cf_buf_u2(&o, major);
    cf_buf_u2(&o, cp_count);
    cf_buf_bytes(&o, cp, cplen);
    cf_buf_u2(&o, JVM_ACC_PUBLIC | JVM_ACC_SUPER);
    cf_buf_u2(&o, this_idx);
    cf_buf_u2(&o, 0);
    cf_buf_u2(&o, 0);
    cf_buf_bytes(&o, tail, tail_len);
    *n = o.len;
    return o.data;
}

static void expect(const uint8_t *b, size_t n, cf_err want, const char *what)
{
    cf_class *c;
    cf_error e;
    cf_err r = cf_class_parse(b, n, &c, &e);
    if (r != want)
        fail_msg("%s: got %s (%s), want %s", what, cf_err_name(r), r ? e.msg : "", cf_err_name(want));
    printf("%-34s -> %s: %s\n", what, cf_err_name(r), r ? e.msg : "");
    if (r == CF_OK)
        cf_class_free(c);
    (void)exercise(b, n);
}

static void test_crafted(void **st)
{
    (void)st;
    /* #1 Utf8 "A", #2 Class #1 */
    static const uint8_t cp_ok[] = {1, 0, 1, 'A', 7, 0, 1};
    static const uint8_t tail0[] = {0, 0, 0, 0, 0, 0}; /* fields, methods, attributes */
    size_t n;
    uint8_t *b;

    b = raw_class(cp_ok, sizeof cp_ok, 3, 52, 2, tail0, sizeof tail0, &n);
    expect(b, n, CF_OK, "minimal valid class");
    b[0] = 0xCA;
    b[1] = 0xFE;
    b[2] = 0xBA;
    b[3] = 0xBF;
    expect(b, n, CF_ERR_MAGIC, "bad magic");
    free(b);

    b = raw_class(cp_ok, sizeof cp_ok, 3, 70, 2, tail0, sizeof tail0, &n);
    expect(b, n, CF_ERR_VERSION, "version 70");
    free(b);
    b = raw_class(cp_ok, sizeof cp_ok, 3, 44, 2, tail0, sizeof tail0, &n);
    expect(b, n, CF_ERR_VERSION, "version 44");
    free(b);

    b = raw_class(cp_ok, sizeof cp_ok, 0, 52, 2, tail0, sizeof tail0, &n);
    expect(b, n, CF_ERR_LENGTH, "constant_pool_count 0");
    free(b);
    b = raw_class(cp_ok, sizeof cp_ok, 60000, 52, 2, tail0, sizeof tail0, &n);
    expect(b, n, CF_ERR_CPOOL_TAG, "constant_pool_count too large");
    free(b);

    static const uint8_t cp_tag[] = {JVM_CONSTANT_Utf8, 0, 1, 'A', JVM_CONSTANT_Unicode, 0, 1};
    b = raw_class(cp_tag, sizeof cp_tag, 3, 52, 2, tail0, sizeof tail0, &n);
    expect(b, n, CF_ERR_CPOOL_TAG, "unknown tag 2");
    free(b);

    static const uint8_t cp_self[] = {7, 0, 1, 7, 0, 2}; /* cyclic: Class -> itself */
    b = raw_class(cp_self, sizeof cp_self, 3, 52, 1, tail0, sizeof tail0, &n);
    expect(b, n, CF_ERR_CPOOL_INDEX, "cyclic Class reference");
    free(b);

    static const uint8_t cp_oob[] = {1, 0, 1, 'A', 7, 0, 9};
    b = raw_class(cp_oob, sizeof cp_oob, 3, 52, 2, tail0, sizeof tail0, &n);
    expect(b, n, CF_ERR_CPOOL_INDEX, "Class index out of range");
    free(b);

    static const uint8_t cp_nat[] = {1, 0, 1, 'A', 7, 0, 1, 12, 0, 2, 0, 1}; /* NAT name -> Class */
    b = raw_class(cp_nat, sizeof cp_nat, 4, 52, 2, tail0, sizeof tail0, &n);
    expect(b, n, CF_ERR_CPOOL_INDEX, "NameAndType name is a Class");
    free(b);

    static const uint8_t cp_mh[] = {1, 0, 1, 'A', 7, 0, 1, 15, 10, 0, 2};
    b = raw_class(cp_mh, sizeof cp_mh, 4, 52, 2, tail0, sizeof tail0, &n);
    expect(b, n, CF_ERR_CPOOL_VALUE, "MethodHandle kind 10");
    free(b);

    static const uint8_t cp_long[] = {1, 0, 1, 'A', 7, 0, 1, 5, 0, 0, 0, 0, 0, 0, 0, 1};
    b = raw_class(cp_long, sizeof cp_long, 4, 52, 2, tail0, sizeof tail0, &n);
    expect(b, n, CF_ERR_CPOOL_INDEX, "Long in the last slot");
    free(b);

    static const uint8_t cp_utf[] = {JVM_CONSTANT_Utf8, 0xff, 0xff, 'A'};
    b = raw_class(cp_utf, sizeof cp_utf, 2, 52, 1, tail0, sizeof tail0, &n);
    expect(b, n, CF_ERR_TRUNCATED, "Utf8 length past the end");
    free(b);

    b = raw_class(cp_ok, sizeof cp_ok, 3, 52, 1, tail0, sizeof tail0, &n);
    expect(b, n, CF_ERR_CPOOL_INDEX, "this_class is a Utf8");
    free(b);

    static const uint8_t tail_methods[] = {0, 0, 0xff, 0xff, 0, 0};
    b = raw_class(cp_ok, sizeof cp_ok, 3, 52, 2, tail_methods, sizeof tail_methods, &n);
    expect(b, n, CF_ERR_LENGTH, "methods_count 65535");
    free(b);

    static const uint8_t tail_attr[] = {0, 0, 0, 0, 0, 1, 0, 1, 0x7f, 0xff, 0xff, 0xff, 0};
    b = raw_class(cp_ok, sizeof cp_ok, 3, 52, 2, tail_attr, sizeof tail_attr, &n);
    expect(b, n, CF_ERR_TRUNCATED, "attribute length 2 GiB");
    free(b);

    static const uint8_t tail_attr_name[] = {0, 0, 0, 0, 0, 1, 0, 2, 0, 0, 0, 0};
    b = raw_class(cp_ok, sizeof cp_ok, 3, 52, 2, tail_attr_name, sizeof tail_attr_name, &n);
    expect(b, n, CF_ERR_CPOOL_INDEX, "attribute name is a Class");
    free(b);

    static const uint8_t tail_trailing[] = {0, 0, 0, 0, 0, 0, 0x42};
    b = raw_class(cp_ok, sizeof cp_ok, 3, 52, 2, tail_trailing, sizeof tail_trailing, &n);
    expect(b, n, CF_ERR_TRAILING, "trailing byte");
    free(b);
}

/* Broken bytecode inside a well-formed class: refusal/error with a reason, never a crash. */
static void check_bad_code(const uint8_t *code, uint32_t len, const uint16_t *exc, uint16_t nexc, const uint8_t *smt,
                           uint32_t smt_len, const char *what)
{
    asm_cls a;
    a_init(&a, 52);
    asm_attrs ca = {0};
    if (smt)
        aa_add(&a, &ca, "StackMapTable", smt, smt_len);
    a_method(&a, JVM_ACC_PUBLIC | JVM_ACC_STATIC, "m", "()V", code, len, 2, 2, exc, nexc, smt ? &ca : NULL);
    size_t n;
    uint8_t *b = a_finish(&a, "p/B", "java/lang/Object", &n);
    cf_instrument_result r;
    cf_error e;
    cf_err rc = cf_instrument_class(b, n, cf_test_probe(0), NULL, NULL, &r, &e);
    if (rc == CF_OK) {
        if (r.n_methods != 1 || r.methods[0].refusal == CF_REFUSE_NONE)
            fail_msg("%s: instrumented broken code", what);
        printf("%-34s -> refused %s: %s\n", what, cf_refusal_name(r.methods[0].refusal), r.methods[0].why);
        assert_null(r.bytes);
        cf_instrument_result_free(&r);
    } else {
        printf("%-34s -> %s: %s\n", what, cf_err_name(rc), e.msg);
    }
    (void)exercise(b, n);
    free(b);
}

static void test_bad_code(void **st)
{
    (void)st;
    static const uint8_t mid[] = {JVM_OPC_goto, 0, 2, JVM_OPC_return}; /* goto into the middle */
    check_bad_code(mid, sizeof mid, NULL, 0, NULL, 0, "branch into an instruction");
    static const uint8_t out[] = {JVM_OPC_goto, 0x7f, 0xff}; /* goto outside */
    check_bad_code(out, sizeof out, NULL, 0, NULL, 0, "branch outside the code");
    static const uint8_t ts[] = {JVM_OPC_tableswitch, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 1,
                                 JVM_OPC_return}; /* lo > hi */
    check_bad_code(ts, sizeof ts, NULL, 0, NULL, 0, "tableswitch low > high");
    static const uint8_t ls[] = {JVM_OPC_lookupswitch, 0, 0, 0, 0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff};
    check_bad_code(ls, sizeof ls, NULL, 0, NULL, 0, "lookupswitch npairs huge");
    static const uint8_t bad_op[] = {JVM_OPC_MAX + 2, JVM_OPC_return}; /* 0xcb */
    check_bad_code(bad_op, sizeof bad_op, NULL, 0, NULL, 0, "undefined opcode 0xcb");
    static const uint8_t wide[] = {JVM_OPC_wide, JVM_OPC_bipush, 0, JVM_OPC_return};
    check_bad_code(wide, sizeof wide, NULL, 0, NULL, 0, "wide bipush");
    static const uint8_t trunc[] = {JVM_OPC_sipush, 0};
    check_bad_code(trunc, sizeof trunc, NULL, 0, NULL, 0, "truncated sipush");
    static const uint8_t ok[] = {JVM_OPC_nop, JVM_OPC_nop, JVM_OPC_return};
    static const uint16_t exc_bad[] = {0, 9, 0, 0};
    check_bad_code(ok, sizeof ok, exc_bad, 1, NULL, 0, "exception range past the end");
    static const uint16_t exc_mid[] = {0, 2, 1, 0};
    static const uint8_t ok2[] = {JVM_OPC_bipush, 1, JVM_OPC_pop, JVM_OPC_return};
    check_bad_code(ok2, sizeof ok2, exc_mid, 1, NULL, 0, "handler inside an instruction");
    static const uint8_t smt_bad[] = {0, 1, 200};
    check_bad_code(ok, sizeof ok, NULL, 0, smt_bad, sizeof smt_bad, "reserved frame type 200");
    static const uint8_t smt_far[] = {0, 1, CF_FRAME_SAME_EXTENDED, 0x10, 0};
    check_bad_code(ok, sizeof ok, NULL, 0, smt_far, sizeof smt_far, "frame past the code end");
    static const uint8_t smt_vt[] = {0, 1, CF_FRAME_FULL, 0, 1, 0, 1, JVM_ITEM_Uninitialized + 1, 0, 0};
    check_bad_code(ok, sizeof ok, NULL, 0, smt_vt, sizeof smt_vt, "verification type tag 9");
    static const uint8_t smt_cnt[] = {0xff, 0xff, 0};
    check_bad_code(ok, sizeof ok, NULL, 0, smt_cnt, sizeof smt_cnt, "frame count 65535");
    static const uint8_t smt_mid[] = {0, 1, 1};
    check_bad_code(ok2, sizeof ok2, NULL, 0, smt_mid, sizeof smt_mid, "frame inside an instruction");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_base_is_valid),    cmocka_unit_test(test_jsr_class),
        cmocka_unit_test(test_truncations),      cmocka_unit_test(test_byte_mutations),
        cmocka_unit_test(test_random_mutations), cmocka_unit_test(test_crafted),
        cmocka_unit_test(test_bad_code),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

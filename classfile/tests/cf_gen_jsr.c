/*
 * cf_gen_jsr - writes JsrDemo.class (class-file version 49, no StackMapTable) whose method
 * f(int) uses a jsr/ret "finally" subroutine the way javac 1.4 compiled try/finally. The JVM
 * test runs it under -Xverify:all (old type-inference verifier) with and without the
 * engine's instrumentation:   cf_gen_jsr OUT_DIR   -> OUT_DIR/JsrDemo.class
 * Expected output: 10, -100, 2.
 * It also writes OUT_DIR/Old45.class, class-file version 45.0 (what JDK 1.0 compilers
 * wrote); main prints "old 45.0".
 */
#include "cf_asm.h"

#include <stdio.h>
#include <stdlib.h>

static uint8_t code[128];
static uint32_t pc;
static void u1(uint8_t v)
{
    code[pc++] = v;
}
static void u2(uint16_t v)
{
    u1((uint8_t)(v >> 8));
    u1((uint8_t)v);
}

static int write_class(const char *dir, const char *name, const uint8_t *b, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.class", dir, name);
    FILE *fo = fopen(path, "wb");
    if (!fo || fwrite(b, 1, n, fo) != n) {
        perror(path);
        if (fo)
            fclose(fo);
        return 1;
    }
    fclose(fo);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: cf_gen_jsr OUT_DIR\n");
        return 2;
    }
    asm_cls a;
    a_init(&a, 49);
    uint16_t ise = a_class(&a, "java/lang/IllegalStateException");
    uint16_t ise_init = a_ref(&a, JVM_CONSTANT_Methodref, "java/lang/IllegalStateException", "<init>", "()V");
    uint16_t counter = a_ref(&a, JVM_CONSTANT_Fieldref, "JsrDemo", "counter", "I");
    uint16_t out = a_ref(&a, JVM_CONSTANT_Fieldref, "java/lang/System", "out", "Ljava/io/PrintStream;");
    uint16_t println = a_ref(&a, JVM_CONSTANT_Methodref, "java/io/PrintStream", "println", "(I)V");
    uint16_t f = a_ref(&a, JVM_CONSTANT_Methodref, "JsrDemo", "f", "(I)I");
    uint16_t p = a_ref(&a, JVM_CONSTANT_Methodref, "JsrDemo", "p", "(I)V");
    uint16_t obj_init = a_ref(&a, JVM_CONSTANT_Methodref, "java/lang/Object", "<init>", "()V");
    a_field(&a, JVM_ACC_STATIC, "counter", "I");

    /* static int f(int x) { try { if (x < 0) throw new ISE(); return x * 2; } finally { counter++; } } */
    pc = 0;
    u1(JVM_OPC_iload_0); /* 0 iload_0 */
    u1(JVM_OPC_ifge);
    u2(11); /* 1 ifge 12 */
    u1(JVM_OPC_new);
    u2(ise);         /* 4 new ISE */
    u1(JVM_OPC_dup); /* 7 dup */
    u1(JVM_OPC_invokespecial);
    u2(ise_init);       /* 8 invokespecial */
    u1(JVM_OPC_athrow); /* 11 athrow */
    u1(JVM_OPC_iload_0);
    u1(JVM_OPC_iconst_2);
    u1(JVM_OPC_imul);     /* 12 iload_0 iconst_2 imul */
    u1(JVM_OPC_istore_1); /* 15 istore_1 */
    u1(JVM_OPC_jsr);
    u2(27 - 16); /* 16 jsr 27 */
    u1(JVM_OPC_iload_1);
    u1(JVM_OPC_ireturn);  /* 19 iload_1 ireturn */
    u1(JVM_OPC_astore_2); /* 21 astore_2   (catch any) */
    u1(JVM_OPC_jsr);
    u2(27 - 22); /* 22 jsr 27 */
    u1(JVM_OPC_aload_2);
    u1(JVM_OPC_athrow);   /* 25 aload_2 athrow */
    u1(JVM_OPC_astore_3); /* 27 astore_3 (return address) */
    u1(JVM_OPC_getstatic);
    u2(counter); /* 28 getstatic counter */
    u1(JVM_OPC_iconst_1);
    u1(JVM_OPC_iadd); /* 31 iconst_1 iadd */
    u1(JVM_OPC_putstatic);
    u2(counter); /* 33 putstatic counter */
    u1(JVM_OPC_ret);
    u1(3); /* 36 ret 3 */
    uint16_t exc_f[] = {0, 19, 21, 0};
    a_method(&a, JVM_ACC_PUBLIC | JVM_ACC_STATIC, "f", "(I)I", code, pc, 2, 4, exc_f, 1, NULL);

    /* static void p(int v) { System.out.println(v); } */
    pc = 0;
    u1(JVM_OPC_getstatic);
    u2(out);
    u1(JVM_OPC_iload_0);
    u1(JVM_OPC_invokevirtual);
    u2(println);
    u1(JVM_OPC_return);
    a_method(&a, JVM_ACC_PUBLIC | JVM_ACC_STATIC, "p", "(I)V", code, pc, 2, 1, NULL, 0, NULL);

    /* main: p(f(5)); try { p(f(-1)); } catch (ISE e) { p(-100); } p(counter); */
    pc = 0;
    u1(JVM_OPC_iconst_5);
    u1(JVM_OPC_invokestatic);
    u2(f);
    u1(JVM_OPC_invokestatic);
    u2(p); /* 0..6 */
    u1(JVM_OPC_iconst_m1);
    u1(JVM_OPC_invokestatic);
    u2(f);
    u1(JVM_OPC_invokestatic);
    u2(p); /* 7..13 */
    u1(JVM_OPC_goto);
    u2(24 - 14); /* 14 goto 24 */
    u1(JVM_OPC_pop);
    u1(JVM_OPC_bipush);
    u1((uint8_t)-100);
    u1(JVM_OPC_invokestatic);
    u2(p);           /* 17 pop; bipush -100; p */
    u1(JVM_OPC_nop); /* 23 nop */
    u1(JVM_OPC_getstatic);
    u2(counter);
    u1(JVM_OPC_invokestatic);
    u2(p);
    u1(JVM_OPC_return); /* 24 */
    uint16_t exc_m[] = {7, 14, 17, ise};
    a_method(&a, JVM_ACC_PUBLIC | JVM_ACC_STATIC, "main", "([Ljava/lang/String;)V", code, pc, 2, 1, exc_m, 1, NULL);

    pc = 0;
    u1(JVM_OPC_aload_0);
    u1(JVM_OPC_invokespecial);
    u2(obj_init);
    u1(JVM_OPC_return);
    a_method(&a, JVM_ACC_PUBLIC, "<init>", "()V", code, pc, 1, 1, NULL, 0, NULL);

    size_t n;
    uint8_t *b = a_finish(&a, "JsrDemo", "java/lang/Object", &n);
    if (write_class(argv[1], "JsrDemo", b, n))
        return 1;
    free(b);

    /* Old45: version 45.0, old Code header */
    a_init(&a, 45);
    uint16_t out2 = a_ref(&a, JVM_CONSTANT_Fieldref, "java/lang/System", "out", "Ljava/io/PrintStream;");
    uint16_t pr = a_ref(&a, JVM_CONSTANT_Methodref, "java/io/PrintStream", "println", "(Ljava/lang/String;)V");
    uint16_t str = a_string(&a, "old 45.0");
    uint16_t oinit = a_ref(&a, JVM_CONSTANT_Methodref, "java/lang/Object", "<init>", "()V");
    uint8_t mc[] = {JVM_OPC_getstatic,     (uint8_t)(out2 >> 8), (uint8_t)out2, JVM_OPC_ldc,   (uint8_t)str,
                    JVM_OPC_invokevirtual, (uint8_t)(pr >> 8),   (uint8_t)pr,   JVM_OPC_return};
    a_method(&a, JVM_ACC_PUBLIC | JVM_ACC_STATIC, "main", "([Ljava/lang/String;)V", mc, sizeof mc, 2, 1, NULL, 0, NULL);
    uint8_t ic[] = {JVM_OPC_aload_0, JVM_OPC_invokespecial, (uint8_t)(oinit >> 8), (uint8_t)oinit, JVM_OPC_return};
    a_method(&a, JVM_ACC_PUBLIC, "<init>", "()V", ic, sizeof ic, 1, 1, NULL, 0, NULL);
    b = a_finish(&a, "Old45", "java/lang/Object", &n);
    if (write_class(argv[1], "Old45", b, n))
        return 1;
    free(b);
    return 0;
}

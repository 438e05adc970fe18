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
    uint16_t ise_init = a_ref(&a, 10, "java/lang/IllegalStateException", "<init>", "()V");
    uint16_t counter = a_ref(&a, 9, "JsrDemo", "counter", "I");
    uint16_t out = a_ref(&a, 9, "java/lang/System", "out", "Ljava/io/PrintStream;");
    uint16_t println = a_ref(&a, 10, "java/io/PrintStream", "println", "(I)V");
    uint16_t f = a_ref(&a, 10, "JsrDemo", "f", "(I)I");
    uint16_t p = a_ref(&a, 10, "JsrDemo", "p", "(I)V");
    uint16_t obj_init = a_ref(&a, 10, "java/lang/Object", "<init>", "()V");
    a_field(&a, 0x8, "counter", "I");

    /* static int f(int x) { try { if (x < 0) throw new ISE(); return x * 2; } finally { counter++; } } */
    pc = 0;
    u1(0x1a); /* 0 iload_0 */
    u1(0x9c);
    u2(11); /* 1 ifge 12 */
    u1(0xbb);
    u2(ise);  /* 4 new ISE */
    u1(0x59); /* 7 dup */
    u1(0xb7);
    u2(ise_init); /* 8 invokespecial */
    u1(0xbf);     /* 11 athrow */
    u1(0x1a);
    u1(0x05);
    u1(0x68); /* 12 iload_0 iconst_2 imul */
    u1(0x3c); /* 15 istore_1 */
    u1(0xa8);
    u2(27 - 16); /* 16 jsr 27 */
    u1(0x1b);
    u1(0xac); /* 19 iload_1 ireturn */
    u1(0x4d); /* 21 astore_2   (catch any) */
    u1(0xa8);
    u2(27 - 22); /* 22 jsr 27 */
    u1(0x2c);
    u1(0xbf); /* 25 aload_2 athrow */
    u1(0x4e); /* 27 astore_3 (return address) */
    u1(0xb2);
    u2(counter); /* 28 getstatic counter */
    u1(0x04);
    u1(0x60); /* 31 iconst_1 iadd */
    u1(0xb3);
    u2(counter); /* 33 putstatic counter */
    u1(0xa9);
    u1(3); /* 36 ret 3 */
    uint16_t exc_f[] = {0, 19, 21, 0};
    a_method(&a, 0x9, "f", "(I)I", code, pc, 2, 4, exc_f, 1, NULL);

    /* static void p(int v) { System.out.println(v); } */
    pc = 0;
    u1(0xb2);
    u2(out);
    u1(0x1a);
    u1(0xb6);
    u2(println);
    u1(0xb1);
    a_method(&a, 0x9, "p", "(I)V", code, pc, 2, 1, NULL, 0, NULL);

    /* main: p(f(5)); try { p(f(-1)); } catch (ISE e) { p(-100); } p(counter); */
    pc = 0;
    u1(0x08);
    u1(0xb8);
    u2(f);
    u1(0xb8);
    u2(p); /* 0..6 */
    u1(0x02);
    u1(0xb8);
    u2(f);
    u1(0xb8);
    u2(p); /* 7..13 */
    u1(0xa7);
    u2(24 - 14); /* 14 goto 24 */
    u1(0x57);
    u1(0x10);
    u1((uint8_t)-100);
    u1(0xb8);
    u2(p);    /* 17 pop; bipush -100; p */
    u1(0x00); /* 23 nop */
    u1(0xb2);
    u2(counter);
    u1(0xb8);
    u2(p);
    u1(0xb1); /* 24 */
    uint16_t exc_m[] = {7, 14, 17, ise};
    a_method(&a, 0x9, "main", "([Ljava/lang/String;)V", code, pc, 2, 1, exc_m, 1, NULL);

    pc = 0;
    u1(0x2a);
    u1(0xb7);
    u2(obj_init);
    u1(0xb1);
    a_method(&a, 0x1, "<init>", "()V", code, pc, 1, 1, NULL, 0, NULL);

    size_t n;
    uint8_t *b = a_finish(&a, "JsrDemo", "java/lang/Object", &n);
    if (write_class(argv[1], "JsrDemo", b, n))
        return 1;
    free(b);

    /* Old45: version 45.0, old Code header */
    a_init(&a, 45);
    uint16_t out2 = a_ref(&a, 9, "java/lang/System", "out", "Ljava/io/PrintStream;");
    uint16_t pr = a_ref(&a, 10, "java/io/PrintStream", "println", "(Ljava/lang/String;)V");
    uint16_t str = a_string(&a, "old 45.0");
    uint16_t oinit = a_ref(&a, 10, "java/lang/Object", "<init>", "()V");
    uint8_t mc[] = {0xb2, (uint8_t)(out2 >> 8), (uint8_t)out2, 0x12, (uint8_t)str,
                    0xb6, (uint8_t)(pr >> 8),   (uint8_t)pr,   0xb1};
    a_method(&a, 0x9, "main", "([Ljava/lang/String;)V", mc, sizeof mc, 2, 1, NULL, 0, NULL);
    uint8_t ic[] = {0x2a, 0xb7, (uint8_t)(oinit >> 8), (uint8_t)oinit, 0xb1};
    a_method(&a, 0x1, "<init>", "()V", ic, sizeof ic, 1, 1, NULL, 0, NULL);
    b = a_finish(&a, "Old45", "java/lang/Object", &n);
    if (write_class(argv[1], "Old45", b, n))
        return 1;
    free(b);
    return 0;
}

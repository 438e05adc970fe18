/*
 * cf_trivial.c - is a method too small to be worth a probe? (see classfile.h,
 * cf_method_trivial). Read-only: decodes the method's code once, looks at opcodes and
 * branch directions, never at other classes.
 */
#include "cf_internal.h"

const char *cf_trivial_name(cf_trivial_kind k)
{
    switch (k) {
    case CF_TRIVIAL_NO: return "no";
    case CF_TRIVIAL_GETTER: return "getter";
    case CF_TRIVIAL_SETTER: return "setter";
    case CF_TRIVIAL_LEAF: return "leaf";
    }
    return "?";
}

/* xload_<n> of any type: iload_n lload_n fload_n dload_n aload_n, or xload n */
static bool load_of(const uint8_t *code, uint32_t len, uint32_t pc, unsigned slot, uint32_t *next)
{
    if (pc >= len)
        return false;
    uint8_t op = code[pc];
    if (op >= JVM_OPC_iload_0 && op <= JVM_OPC_aload_3 && (unsigned)(op - JVM_OPC_iload_0) % 4 == slot) {
        *next = pc + 1;
        return true;
    }
    if (op >= JVM_OPC_iload && op <= JVM_OPC_aload && pc + 1 < len && code[pc + 1] == slot) {
        *next = pc + 2;
        return true;
    }
    return false;
}

/* Exact accessor shapes (javac's, Kotlin's and Scala's plain properties):
 *   getter:  aload_0 getfield #f xreturn        |  getstatic #f xreturn
 *   setter:  aload_0 xload_1 putfield #f return  |  xload_0 putstatic #f return */
static cf_trivial_kind accessor(const uint8_t *code, uint32_t len, bool is_static)
{
    uint32_t pc = 0;
    if (!is_static) {
        if (len < 1 || code[0] != JVM_OPC_aload_0)
            return CF_TRIVIAL_NO;
        pc = 1;
    }
    uint8_t get = is_static ? JVM_OPC_getstatic : JVM_OPC_getfield;
    uint8_t put = is_static ? JVM_OPC_putstatic : JVM_OPC_putfield;
    if (pc + 4 == len && code[pc] == get && code[pc + 3] >= JVM_OPC_ireturn && code[pc + 3] <= JVM_OPC_areturn)
        return CF_TRIVIAL_GETTER;
    uint32_t at;
    if (load_of(code, len, pc, is_static ? 0 : 1, &at) && at + 4 == len && code[at] == put &&
        code[at + 3] == JVM_OPC_return)
        return CF_TRIVIAL_SETTER;
    return CF_TRIVIAL_NO;
}

/* Opcodes a tiny leaf may not contain: calls, allocation, monitors, explicit throws and
 * subroutines. */
static bool forbidden(uint8_t op)
{
    switch (op) {
    case JVM_OPC_invokevirtual:
    case JVM_OPC_invokespecial:
    case JVM_OPC_invokestatic:
    case JVM_OPC_invokeinterface:
    case JVM_OPC_invokedynamic:
    case JVM_OPC_new:
    case JVM_OPC_newarray:
    case JVM_OPC_anewarray:
    case JVM_OPC_multianewarray:
    case JVM_OPC_monitorenter:
    case JVM_OPC_monitorexit:
    case JVM_OPC_athrow:
    case JVM_OPC_jsr:
    case JVM_OPC_jsr_w:
    case JVM_OPC_ret: return true;
    default: return false;
    }
}

cf_trivial_kind cf_method_trivial(const cf_class *c, const cf_member *m)
{
    if (m->access & (JVM_ACC_SYNCHRONIZED | JVM_ACC_ABSTRACT | JVM_ACC_NATIVE))
        return CF_TRIVIAL_NO;
    cf_str name = cf_cp_utf8(c, m->name);
    if (name.len > 0 && name.p[0] == '<') /* <init> calls super(), <clinit> runs once */
        return CF_TRIVIAL_NO;
    const cf_attr *a = cf_method_code_attr(c, m);
    if (!a)
        return CF_TRIVIAL_NO;
    cf_code code;
    cf_error err;
    if (cf_code_parse(c, a, &code, &err) != CF_OK)
        return CF_TRIVIAL_NO;
    cf_trivial_kind k = CF_TRIVIAL_NO;
    if (code.exc_count != 0 || code.code_len == 0 || code.code_len > CF_TRIVIAL_MAX_CODE)
        goto out;
    k = accessor(code.code, code.code_len, (m->access & JVM_ACC_STATIC) != 0);
    if (k != CF_TRIVIAL_NO)
        goto out;
    for (uint32_t pc = 0; pc < code.code_len;) {
        cf_insn in;
        if (!cf_insn_decode(code.code, code.code_len, pc, &in) || forbidden(in.op))
            goto out; /* k is still CF_TRIVIAL_NO */
        if ((in.kind == CF_K_BRANCH16 || in.kind == CF_K_BRANCH32) && in.branch <= 0)
            goto out; /* a loop (or a jump to itself) */
        if (in.kind == CF_K_TABLESWITCH || in.kind == CF_K_LOOKUPSWITCH) {
            if (in.branch <= 0)
                goto out;
            for (uint32_t i = 0; i < in.npairs; i++) {
                int32_t key;
                if (cf_switch_target(code.code, &in, i, &key) <= 0)
                    goto out;
            }
        }
        pc += in.len;
    }
    k = CF_TRIVIAL_LEAF;
out:
    cf_code_release(&code);
    return k;
}

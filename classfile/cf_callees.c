/*
 * cf_callees.c - "discover callable methods" (the first step of conditional
 * instrumentation): lists every invokevirtual/invokespecial/invokestatic/invokeinterface
 * target of a method and every invokedynamic call site with its bootstrap method, resolved
 * through the constant pool (and the BootstrapMethods attribute) to owner, name, descriptor,
 * and for invokedynamic the implementation method handle among the bootstrap's static
 * arguments (the lambda body or method reference target of LambdaMetafactory).
 * Read-only; the returned array is malloc'ed and owned by the caller, its strings point into
 * the class.
 */
#include "cf_internal.h"

#include <stdlib.h>

/* Finds bootstrap method `idx` and resolves its method handle's target. */
static bool resolve_bsm(const cf_class *c, uint16_t idx, cf_callee *out)
{
    const cf_attr *a = cf_attr_find(c, c->attrs, c->attr_count, "BootstrapMethods");
    if (!a)
        return false;
    cf_rd r;
    cf_rd_init(&r, a->data, a->len);
    uint16_t n = cf_rd_u2(&r);
    if (idx >= n)
        return false;
    for (uint16_t i = 0; i < idx; i++) {
        cf_rd_u2(&r);
        uint16_t nargs = cf_rd_u2(&r);
        cf_rd_skip(&r, (size_t)nargs * 2);
    }
    uint16_t mh = cf_rd_u2(&r);
    if (r.bad || mh == 0 || mh >= c->cp_count || c->cp[mh].tag != JVM_CONSTANT_MethodHandle)
        return false;
    if (!cf_cp_ref(c, c->cp[mh].a, &out->bsm_owner, &out->bsm_name, &out->bsm_desc))
        return false;
    /* the static arguments: the first method-call handle is the implementation method */
    uint16_t nargs = cf_rd_u2(&r);
    for (uint16_t i = 0; i < nargs && !r.bad; i++) {
        uint16_t arg = cf_rd_u2(&r);
        if (r.bad || arg == 0 || arg >= c->cp_count || c->cp[arg].tag != JVM_CONSTANT_MethodHandle)
            continue;
        uint8_t kind = c->cp[arg].kind;
        if (kind < 5 || kind > 9)
            continue;
        if (cf_cp_ref(c, c->cp[arg].a, &out->impl_owner, &out->impl_name, &out->impl_desc)) {
            out->impl_kind = kind;
            break;
        }
    }
    return true;
}

static cf_err callee_at(const cf_class *c, const cf_code *code, const cf_insn *in, cf_callee *out, cf_error *err)
{
    memset(out, 0, sizeof *out);
    out->pc = in->pc;
    out->opcode = in->op;
    uint16_t idx = cmr_be16(code->code + in->pc + 1);
    if (in->op == JVM_OPC_invokedynamic) {
        if (idx == 0 || idx >= c->cp_count || c->cp[idx].tag != JVM_CONSTANT_InvokeDynamic ||
            !cf_cp_nat(c, c->cp[idx].b, &out->name, &out->desc))
            return cf_fail(err, CF_ERR_CPOOL_INDEX, "invokedynamic at pc %u: #%u is not InvokeDynamic", in->pc, idx);
        if (!resolve_bsm(c, c->cp[idx].a, out))
            return cf_fail(err, CF_ERR_ATTRIBUTE, "invokedynamic at pc %u: bootstrap method %u missing", in->pc,
                           c->cp[idx].a);
        return CF_OK;
    }
    if (idx == 0 || idx >= c->cp_count ||
        (c->cp[idx].tag != JVM_CONSTANT_Methodref && c->cp[idx].tag != JVM_CONSTANT_InterfaceMethodref) ||
        !cf_cp_ref(c, idx, &out->owner, &out->name, &out->desc))
        return cf_fail(err, CF_ERR_CPOOL_INDEX, "invoke at pc %u: #%u is not a method reference", in->pc, idx);
    out->is_interface = c->cp[idx].tag == JVM_CONSTANT_InterfaceMethodref;
    return CF_OK;
}

cf_err cf_method_callees(const cf_class *c, const cf_member *m, cf_callee **out, size_t *n, cf_error *err)
{
    *out = NULL;
    *n = 0;
    const cf_attr *a = cf_method_code_attr(c, m);
    if (!a)
        return CF_OK; /* abstract or native: calls nothing */
    cf_code code;
    cf_err e = cf_code_parse(c, a, &code, err);
    if (e)
        return e;
    cf_callee *v = NULL;
    size_t cnt = 0, cap = 0;
    for (uint32_t pc = 0; pc < code.code_len;) {
        cf_insn in;
        if (!cf_insn_decode(code.code, code.code_len, pc, &in)) {
            e = cf_fail(err, CF_ERR_CODE, "bad instruction at pc %u", pc);
            break;
        }
        pc += in.len;
        if (in.kind != CF_K_INVOKE)
            continue;
        if (CF_GROW(v, cap, cnt + 1, 16)) {
            e = cf_fail(err, CF_ERR_NOMEM, "out of memory");
            break;
        }
        e = callee_at(c, &code, &in, &v[cnt], err);
        if (e)
            break;
        cnt++;
    }
    cf_code_release(&code);
    if (e) {
        free(v);
        return e;
    }
    *out = v;
    *n = cnt;
    return CF_OK;
}

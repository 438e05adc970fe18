/*
 * cf_check.c - structural self-check of a class file, independent of how it was produced:
 * every Code attribute decodes, branch and switch targets, exception ranges, StackMapTable
 * frames, LineNumberTable and LocalVariable(Type)Table entries sit on instruction
 * boundaries. The corpus test and the fuzzers run it on instrumented output; the JVM's
 * verifier (tests/classfile) is the real judge of types.
 */
#include "cf_stackmap.h"

#include <stdio.h>
#include <stdlib.h>

static cf_err check_table(const cf_class *c, const cf_attr *a, const uint8_t *starts, uint32_t code_len, int kind,
                          cf_error *err)
{
    cf_rd r;
    cf_rd_init(&r, a->data, a->len);
    uint16_t n = cf_rd_u2(&r);
    for (uint16_t i = 0; i < n; i++) {
        uint32_t pc = cf_rd_u2(&r);
        if (kind == 0) {
            cf_rd_u2(&r);
            if (!r.bad && (pc >= code_len || !starts[pc]))
                return cf_fail(err, CF_ERR_ATTRIBUTE, "LineNumberTable entry %u: pc %u", i, pc);
        } else {
            uint32_t len = cf_rd_u2(&r);
            cf_rd_skip(&r, 6);
            uint32_t end = pc + len;
            if (!r.bad &&
                (pc > code_len || end > code_len || (pc < code_len && !starts[pc]) || (end < code_len && !starts[end])))
                return cf_fail(err, CF_ERR_ATTRIBUTE, "LocalVariable table entry %u: %u+%u", i, pc, len);
        }
    }
    (void)c;
    if (r.bad || r.pos != r.len)
        return cf_fail(err, CF_ERR_ATTRIBUTE, "table length mismatch");
    return CF_OK;
}

static cf_err check_method(const cf_class *c, const cf_member *m, cf_error *err)
{
    const cf_attr *ca = cf_method_code_attr(c, m);
    if (!ca)
        return CF_OK;
    cf_code code;
    cf_err e = cf_code_parse(c, ca, &code, err);
    if (e)
        return e;
    cf_insn *in = NULL;
    uint32_t n;
    uint8_t *starts = NULL;
    cf_frame *fr = NULL;
    uint32_t nf = 0;
    e = cf_code_decode_all(&code, &in, &n, err);
    if (!e) {
        starts = calloc(code.code_len + 1, 1);
        if (!starts)
            e = cf_fail(err, CF_ERR_NOMEM, "out of memory");
    }
    if (!e) {
        for (uint32_t i = 0; i < n; i++)
            starts[in[i].pc] = 1;
        for (uint16_t k = 0; k < code.attr_count && !e; k++) {
            const cf_attr *a = &code.attrs[k];
            cf_str name = cf_cp_utf8(c, a->name);
            if (cf_str_eq(name, "StackMapTable") && c->major >= JVM_CLASSFILE_MAJOR_STACKMAP) {
                e = cf_stackmap_decode(a, code.code_len, &fr, &nf, err);
                for (uint32_t f = 0; !e && f < nf; f++)
                    if (!starts[fr[f].pc])
                        e = cf_fail(err, CF_ERR_ATTRIBUTE, "frame at pc %u not on an instruction", fr[f].pc);
                free(fr);
                fr = NULL;
            } else if (cf_str_eq(name, "LineNumberTable")) {
                e = check_table(c, a, starts, code.code_len, 0, err);
            } else if (cf_str_eq(name, "LocalVariableTable") || cf_str_eq(name, "LocalVariableTypeTable")) {
                e = check_table(c, a, starts, code.code_len, 1, err);
            }
        }
    }
    free(starts);
    free(in);
    cf_code_release(&code);
    return e;
}

cf_err cf_class_check(const uint8_t *bytes, size_t len, cf_error *err)
{
    cf_class *c;
    cf_err e = cf_class_parse(bytes, len, &c, err);
    if (e)
        return e;
    for (uint16_t i = 0; i < c->method_count && !e; i++) {
        e = check_method(c, &c->methods[i], err);
        if (e) {
            cf_str n = cf_cp_utf8(c, c->methods[i].name);
            char msg[CF_ERROR_MSG_MAX];
            snprintf(msg, sizeof msg, "%s", err->msg);
            cf_fail(err, e, "method %.*s: %s", (int)(n.len > 60 ? 60 : n.len), n.p, msg);
        }
    }
    cf_class_free(c);
    return e;
}

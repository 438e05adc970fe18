/*
 * cf_tool - command-line access to the class-file engine, for debugging and demos:
 *   cf_tool instrument IN.class OUT.class   every probe kind, stacked; prints refusals
 *   cf_tool callees IN.class                 method ids and callees of every method
 */
#include "cf_testprobes.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(n > 0 ? (size_t)n : 1);
    if (b && n > 0 && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = (size_t)(n > 0 ? n : 0);
    return b;
}

static int cmd_instrument(const char *in, const char *outp)
{
    size_t len;
    uint8_t *b = slurp(in, &len);
    if (!b)
        return perror(in), 1;
    cf_instrument_result r;
    cf_error err;
    if (cf_instrument_class(b, len, cf_test_probe(CF_PROBE_TIMER), NULL, NULL, &r, &err)) {
        fprintf(stderr, "%s: %s\n", cf_err_name(err.code), err.msg);
        return 1;
    }
    for (uint32_t i = 0; i < r.n_methods; i++) {
        cf_method_result *m = &r.methods[i];
        printf("%016" PRIx64 " %.*s%.*s %s%s%s\n", m->method_id, (int)m->name.len, m->name.p, (int)m->desc.len,
               m->desc.p, m->refusal ? "refused " : "instrumented", m->refusal ? cf_refusal_name(m->refusal) : "",
               m->refusal ? "" : "");
        if (m->refusal && m->refusal != CF_REFUSE_ABSTRACT_OR_NATIVE)
            printf("    why: %s\n", m->why);
    }
    cf_instrument_result_free(&r);
    size_t ol;
    uint8_t *o = cf_test_instrument_all(b, len, &ol, NULL, &err);
    if (!o && err.code) {
        fprintf(stderr, "%s: %s\n", cf_err_name(err.code), err.msg);
        return 1;
    }
    FILE *f = fopen(outp, "wb");
    if (!f)
        return perror(outp), 1;
    fwrite(o ? o : b, 1, o ? ol : len, f);
    fclose(f);
    free(o);
    free(b);
    return 0;
}

static int cmd_callees(const char *in)
{
    size_t len;
    uint8_t *b = slurp(in, &len);
    if (!b)
        return perror(in), 1;
    cf_class *c;
    cf_error err;
    if (cf_class_parse(b, len, &c, &err)) {
        fprintf(stderr, "%s: %s\n", cf_err_name(err.code), err.msg);
        return 1;
    }
    cf_str cn = cf_class_name(c);
    for (uint16_t i = 0; i < c->method_count; i++) {
        cf_str n = cf_cp_utf8(c, c->methods[i].name), d = cf_cp_utf8(c, c->methods[i].desc);
        printf("%016" PRIx64 " %.*s.%.*s%.*s\n", cf_method_id(c, &c->methods[i]), (int)cn.len, cn.p, (int)n.len, n.p,
               (int)d.len, d.p);
        cf_callee *v;
        size_t k;
        if (cf_method_callees(c, &c->methods[i], &v, &k, &err)) {
            printf("  error: %s\n", err.msg);
            continue;
        }
        for (size_t j = 0; j < k; j++) {
            if (v[j].opcode == JVM_OPC_invokedynamic)
                printf("  pc %u invokedynamic %.*s%.*s bootstrap %.*s.%.*s%.*s\n", v[j].pc, (int)v[j].name.len,
                       v[j].name.p, (int)v[j].desc.len, v[j].desc.p, (int)v[j].bsm_owner.len, v[j].bsm_owner.p,
                       (int)v[j].bsm_name.len, v[j].bsm_name.p, (int)v[j].bsm_desc.len, v[j].bsm_desc.p);
            else
                printf("  pc %u %s %.*s.%.*s%.*s\n", v[j].pc,
                       v[j].opcode == JVM_OPC_invokevirtual   ? "invokevirtual"
                       : v[j].opcode == JVM_OPC_invokespecial ? "invokespecial"
                       : v[j].opcode == JVM_OPC_invokestatic  ? "invokestatic"
                                                              : "invokeinterface",
                       (int)v[j].owner.len, v[j].owner.p, (int)v[j].name.len, v[j].name.p, (int)v[j].desc.len,
                       v[j].desc.p);
        }
        free(v);
    }
    cf_class_free(c);
    free(b);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "instrument"))
        return cmd_instrument(argv[2], argv[3]);
    if (argc == 3 && !strcmp(argv[1], "callees"))
        return cmd_callees(argv[2]);
    fprintf(stderr, "usage: cf_tool instrument IN OUT | cf_tool callees IN\n");
    return 2;
}

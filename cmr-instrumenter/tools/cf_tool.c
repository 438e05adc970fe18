/*
 * cf_tool - command-line access to the class-file engine for operators (debugging, demos):
 *   cf_tool instrument [--sensor KIND] IN.class OUT.class
 *       instruments every method with the product's probe of that sensor (the probe
 *       contract of cmr-instrumenter, instr_probe.h: timer, invocation-sequence or anchor;
 *       default timer), prints each method's id and result, writes the class
 *   cf_tool callees IN.class
 *       method ids and callees of every method, and which methods are trivial (accessors,
 *       tiny leaves: left out unless a sensor assignment says trivial: true)
 * A product tool: it links the engine and the instrumenter's probe descriptions, no test
 * support code.
 */
#include "cmr/buf.h"
#include "cmr/file.h"
#include "cmr/classfile.h"
#include "cmr/instr_probe.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Class files are at most a few MiB; anything larger is not one. */
#define CF_TOOL_MAX_FILE ((size_t)256 << 20)

/* The product probe whose kind is `name` ("timer" ...); NULL when there is none. */
static const cf_probe *sensor_probe(const char *name)
{
    for (int k = CMR_SENSOR_TIMER; k <= CMR_SENSOR_CONDITIONAL; k++) {
        const cf_probe *p = cmr_instr_probe((cmr_sensor_kind_t)k);
        if (p && !strcmp(p->kind, name))
            return p;
    }
    return NULL;
}

static int cmd_instrument(const cf_probe *probe, const char *in, const char *outp)
{
    cmr_buf_t b = {0};
    char ferr[512];
    if (cmr_file_read(in, CF_TOOL_MAX_FILE, &b, ferr, sizeof ferr))
        return fprintf(stderr, "%s\n", ferr), 1;
    cf_instrument_result r;
    cf_error err;
    if (cf_instrument_class(b.data, b.len, probe, NULL, NULL, &r, &err)) {
        fprintf(stderr, "%s: %s\n", cf_err_name(err.code), err.msg);
        cmr_buf_free(&b);
        return 1;
    }
    for (uint32_t i = 0; i < r.n_methods; i++) {
        cf_method_result *m = &r.methods[i];
        printf("%016" PRIx64 " %.*s%.*s %s%s\n", m->method_id, (int)m->name.len, m->name.p, (int)m->desc.len, m->desc.p,
               m->refusal ? "refused " : "instrumented", m->refusal ? cf_refusal_name(m->refusal) : "");
        if (m->refusal && m->refusal != CF_REFUSE_ABSTRACT_OR_NATIVE)
            printf("    why: %s\n", m->why);
    }
    int rc = 0;
    FILE *f = fopen(outp, "wb");
    if (!f) {
        perror(outp);
        rc = 1;
    } else {
        if (r.bytes)
            fwrite(r.bytes, 1, r.len, f);
        else
            fwrite(b.data, 1, b.len, f); /* nothing instrumented: the class as it was */
        fclose(f);
    }
    cf_instrument_result_free(&r);
    cmr_buf_free(&b);
    return rc;
}

static int cmd_callees(const char *in)
{
    cmr_buf_t b = {0};
    char ferr[512];
    if (cmr_file_read(in, CF_TOOL_MAX_FILE, &b, ferr, sizeof ferr))
        return fprintf(stderr, "%s\n", ferr), 1;
    cf_class *c;
    cf_error err;
    if (cf_class_parse(b.data, b.len, &c, &err)) {
        fprintf(stderr, "%s: %s\n", cf_err_name(err.code), err.msg);
        cmr_buf_free(&b);
        return 1;
    }
    cf_str cn = cf_class_name(c);
    for (uint16_t i = 0; i < c->method_count; i++) {
        cf_str n = cf_cp_utf8(c, c->methods[i].name), d = cf_cp_utf8(c, c->methods[i].desc);
        cf_trivial_kind tk = cf_method_trivial(c, &c->methods[i]);
        printf("%016" PRIx64 " %.*s.%.*s%.*s%s%s\n", cf_method_id(c, &c->methods[i]), (int)cn.len, cn.p, (int)n.len,
               n.p, (int)d.len, d.p, tk ? " trivial: " : "", tk ? cf_trivial_name(tk) : "");
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
    cmr_buf_free(&b);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 4 && !strcmp(argv[1], "instrument")) {
        const char *sensor = "timer";
        int a = 2;
        if (!strcmp(argv[a], "--sensor") && argc == 6) {
            sensor = argv[a + 1];
            a += 2;
        }
        const cf_probe *p = sensor_probe(sensor);
        if (!p) {
            fprintf(stderr, "cf_tool: unknown sensor %s (timer, invocation-sequence, anchor)\n", sensor);
            return 2;
        }
        if (argc == a + 2)
            return cmd_instrument(p, argv[a], argv[a + 1]);
    }
    if (argc == 3 && !strcmp(argv[1], "callees"))
        return cmd_callees(argv[2]);
    fprintf(stderr, "usage: cf_tool instrument [--sensor timer|invocation-sequence|anchor] IN OUT | "
                    "cf_tool callees IN\n");
    return 2;
}

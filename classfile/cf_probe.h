/* cf_probe.h - probe description to bytecode (cf_probe.c). */
#ifndef CF_PROBE_H
#define CF_PROBE_H
#include "cf_internal.h"

#define CF_PROBE_CONST_CACHE 8
/* Per-method cache of constants already added for the probe calls. */
typedef struct cf_probe_consts {
    uint64_t method_id;
    int nlongs;
    int64_t long_vals[CF_PROBE_CONST_CACHE];
    uint16_t long_idx[CF_PROBE_CONST_CACHE];
    uint16_t name_str;
} cf_probe_consts;

/* Methodref for the call (find-or-add); 0 when the pool is full. */
uint16_t cf_probe_methodref(cf_class *c, const cf_probe_call *pc);
/* Operand-stack words the call needs above what is already on the stack. */
int cf_probe_stack_words(const cf_probe_call *pc);
/* Whether method m can give the probe the objects it asks for (CF_PARG_THIS / CF_PARG_ARG):
 * an instance method for `this`, a reference-typed parameter, and a local slot that the
 * code never stores into where the probe reads it after the method has run some of its
 * code (normal exits; a constructor's entry probe, which follows super()). */
bool cf_probe_args_fit(const cf_class *c, const cf_member *m, const cf_probe *p, const cf_insn *in, uint32_t n,
                       const uint8_t *code, bool is_ctor, char *why, size_t whylen);
/* Appends the bytecode of the call to b. false when the constant pool is full / OOM. */
bool cf_probe_emit(cf_class *c, const cf_member *m, const cf_probe_call *pc, uint16_t mref, cf_probe_consts *pk,
                   cf_buf *b);
#endif

/*
 * cf_asm.h - a tiny class-file assembler for the engine's unit and malformed-input tests:
 * builds constant pools, methods with raw code / exception tables / sub-attributes, and
 * class-level attributes, so tests can craft exactly the bytes they need.
 */
#ifndef CF_ASM_H
#define CF_ASM_H
#include "cf_internal.h"

typedef struct asm_cls {
    uint16_t major;
    cf_buf cp, fields, methods, attrs;
    uint16_t cp_count, nfields, nmethods, nattrs;
} asm_cls;

void a_init(asm_cls *a, uint16_t major);
void a_free(asm_cls *a);
uint16_t a_utf8(asm_cls *a, const char *s);
uint16_t a_utf8n(asm_cls *a, const char *s, size_t n);
uint16_t a_class(asm_cls *a, const char *name);
uint16_t a_string(asm_cls *a, const char *s);
uint16_t a_int(asm_cls *a, int32_t v);
uint16_t a_float(asm_cls *a, uint32_t bits);
uint16_t a_long(asm_cls *a, int64_t v);
uint16_t a_double(asm_cls *a, uint64_t bits);
uint16_t a_nat(asm_cls *a, const char *name, const char *desc);
uint16_t a_ref(asm_cls *a, uint8_t tag, const char *owner, const char *name, const char *desc);
uint16_t a_mh(asm_cls *a, uint8_t kind, uint16_t ref);
uint16_t a_mt(asm_cls *a, const char *desc);
uint16_t a_dyn(asm_cls *a, uint8_t tag, uint16_t bsm, const char *name, const char *desc);
uint16_t a_modpkg(asm_cls *a, uint8_t tag, const char *name);

/* Code sub-attributes are passed pre-encoded: count + bytes. */
typedef struct asm_attrs {
    cf_buf b;
    uint16_t n;
} asm_attrs;
void aa_add(asm_cls *a, asm_attrs *x, const char *name, const void *data, uint32_t len);

void a_method(asm_cls *a, uint16_t access, const char *name, const char *desc, const uint8_t *code, uint32_t code_len,
              uint16_t max_stack, uint16_t max_locals, const uint16_t *exc, uint16_t nexc, asm_attrs *code_attrs);
void a_method_nocode(asm_cls *a, uint16_t access, const char *name, const char *desc);
/* A method whose Code attribute body is given as is (e.g. the pre-45.3 layout). */
void a_method_code_body(asm_cls *a, uint16_t access, const char *name, const char *desc, const uint8_t *body,
                        uint32_t len);
void a_field(asm_cls *a, uint16_t access, const char *name, const char *desc);
void a_class_attr(asm_cls *a, const char *name, const void *data, uint32_t len);
/* Returns malloc'ed class bytes. */
uint8_t *a_finish(asm_cls *a, const char *this_name, const char *super_name, size_t *len);
#endif

/*
 * cf_internal.h - shared internals of the class-file engine: arena allocator, bounds-checked
 * big-endian reader, byte buffer writer (on the toolbox's cmr_buf_t), error helpers, Code
 * attribute and instruction model.
 * Not installed; only the engine's .c files include it.
 */
#ifndef CF_INTERNAL_H
#define CF_INTERNAL_H

#include "cmr/buf.h"
#include "cmr/bytes.h"
#include "cmr/classfile.h"

#include <assert.h>
#include <stdarg.h>
#include <stdbool.h>
#include <string.h>

/* ---------------------------------------------------------------- arena (cf_arena.c)
 * A cf_arena owns every block it hands out; cf_arena_free releases them all at once. */
cf_arena *cf_arena_new(void);
void cf_arena_free(cf_arena *a);
void *cf_arena_alloc(cf_arena *a, size_t n);     /* zeroed, 16-aligned; NULL on OOM */
void *cf_arena_alloc_raw(cf_arena *a, size_t n); /* same, not zeroed */

/* ---------------------------------------------------------------- errors (cf_error.c) */
cf_err cf_fail(cf_error *err, cf_err code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---------------------------------------------------------------- reader
 * Bounds-checked big-endian reads over borrowed bytes (byte order: cmr/bytes.h). */
typedef struct cf_rd {
    const uint8_t *p;
    size_t len, pos;
    bool bad; /* sticky: set when a read went past the end */
} cf_rd;

static inline void cf_rd_init(cf_rd *r, const uint8_t *p, size_t len)
{
    r->p = p;
    r->len = len;
    r->pos = 0;
    r->bad = false;
}
static inline bool cf_rd_has(const cf_rd *r, size_t n)
{
    return !r->bad && r->len - r->pos >= n;
}
/* Returns where the next n bytes start and moves past them; NULL (and bad set) when fewer
 * than n are left. */
static inline const uint8_t *cf_rd_skip(cf_rd *r, size_t n)
{
    if (!cf_rd_has(r, n)) {
        r->bad = true;
        return NULL;
    }
    const uint8_t *q = r->p + r->pos;
    r->pos += n;
    return q;
}
/* Moves past one annotation structure (JVMS 4.7.16) at depth `depth` of nesting (0 for
 * an attribute's own); false when it is malformed or nested too deep (cf_annotations.c). */
bool cf_skip_annotation(cf_rd *r, int depth);

static inline uint8_t cf_rd_u1(cf_rd *r)
{
    const uint8_t *q = cf_rd_skip(r, 1);
    return q ? q[0] : 0;
}
static inline uint16_t cf_rd_u2(cf_rd *r)
{
    const uint8_t *q = cf_rd_skip(r, 2);
    return q ? cmr_be16(q) : 0;
}
static inline uint32_t cf_rd_u4(cf_rd *r)
{
    const uint8_t *q = cf_rd_skip(r, 4);
    return q ? cmr_be32(q) : 0;
}

/* ---------------------------------------------------------------- growable buffer
 * cf_buf is the toolbox's cmr_buf_t (cmr/buf.h: zeroed = empty, owner frees with
 * cf_buf_free, sticky oom). The appenders below are its inline fast path for the engine's
 * many small big-endian writes: a capacity check and a store, falling back to
 * cmr_buf_reserve to grow. They do not keep the NUL after the bytes (the engine's buffers
 * hold binary class-file data, never read as strings: do not use cmr_buf_str on them). */
typedef cmr_buf_t cf_buf;

static inline bool cf_buf_reserve(cf_buf *b, size_t extra)
{
    return (!b->oom && b->cap - b->len > extra) || cmr_buf_reserve(b, extra);
}
static inline void cf_buf_u1(cf_buf *b, uint8_t v)
{
    if (cf_buf_reserve(b, 1)) {
        b->data[b->len++] = v;
    }
}
static inline void cf_buf_u2(cf_buf *b, uint16_t v)
{
    if (cf_buf_reserve(b, 2)) {
        cmr_put_be16(b->data + b->len, v);
        b->len += 2;
    }
}
static inline void cf_buf_u4(cf_buf *b, uint32_t v)
{
    if (cf_buf_reserve(b, 4)) {
        cmr_put_be32(b->data + b->len, v);
        b->len += 4;
    }
}
static inline void cf_buf_bytes(cf_buf *b, const void *p, size_t n)
{
    if (n && cf_buf_reserve(b, n)) {
        memcpy(b->data + b->len, p, n);
        b->len += n;
    }
}
static inline void cf_buf_free(cf_buf *b)
{
    cmr_buf_free(b);
}

/* ---------------------------------------------------------------- growable arrays
 * CF_GROW(items, cap, need, min_cap): the toolbox's cmr_array_grow (at least min_cap
 * elements, doubling) with the common case, room already there, checked inline: the engine
 * asks for room several times per method. 0, or -1 with the array unchanged. `need` is
 * evaluated twice. */
#define CF_GROW(items, cap, need, min_cap) \
    ((size_t)(need) <= (cap) ? 0 : cmr_array_grow(&(items), &(cap), (need), sizeof *(items), (min_cap)))

/* ---------------------------------------------------------------- instructions */
/* Instructions after which control never falls through to the next one (goto, switches,
 * returns, athrow). */
static inline bool cf_op_ends_flow(uint8_t op)
{
    return op == JVM_OPC_goto || op == JVM_OPC_goto_w || op == JVM_OPC_tableswitch || op == JVM_OPC_lookupswitch ||
           (op >= JVM_OPC_ireturn && op <= JVM_OPC_return) || op == JVM_OPC_athrow;
}

/* ---------------------------------------------------------------- constant pool (cf_cpool.c) */
bool cf_str_eq(cf_str s, const char *z);
cf_err cf_cp_validate(const cf_class *c, cf_error *err);
/* Find-or-add helpers used by the instrumenter. Return 0 when the pool is full or on OOM.
 * Added entries are owned by c->arena. */
uint16_t cf_cp_add_utf8(cf_class *c, const char *s, size_t len);
uint16_t cf_cp_add_class(cf_class *c, const char *name);
uint16_t cf_cp_add_string(cf_class *c, const char *s, size_t len);
uint16_t cf_cp_add_methodref(cf_class *c, const char *owner, const char *name, const char *desc);
/* A Fieldref of the class at class_index (a Class constant of c). */
uint16_t cf_cp_add_fieldref(cf_class *c, uint16_t class_index, const char *name, const char *desc);
uint16_t cf_cp_add_long(cf_class *c, int64_t v); /* always appends (2 slots) */
uint16_t cf_cp_add_int(cf_class *c, int32_t v);
uint16_t cf_cp_find_utf8(cf_class *c, const char *s, size_t len);
/* out[k] = index of Utf8 s[k] or 0 (through the pool's index, cf_cpool.c). */
void cf_cp_find_utf8_multi(cf_class *c, const char *const *s, const size_t *len, uint16_t *out, int n);
/* Append without looking for an existing equal entry (duplicates are legal). */
uint16_t cf_cp_append_utf8(cf_class *c, const char *s, size_t len);
uint16_t cf_cp_append_ref(cf_class *c, uint8_t tag, uint16_t a, uint16_t b);
/* Find-or-add of a one-index entry (Class, String ...) referring to Utf8 `a`. */
uint16_t cf_cp_add_ref1(cf_class *c, uint8_t tag, uint16_t a);
/* Ref (Fieldref/Methodref/InterfaceMethodref) -> owner, name, desc. false if bad. */
bool cf_cp_ref(const cf_class *c, uint16_t idx, cf_str *owner, cf_str *name, cf_str *desc);
bool cf_cp_nat(const cf_class *c, uint16_t idx, cf_str *name, cf_str *desc);

/* ---------------------------------------------------------------- Code attribute (cf_code.c) */
typedef struct cf_exc {
    uint32_t start, end, handler;
    uint16_t type;
} cf_exc;

typedef struct cf_code {
    uint16_t max_stack, max_locals;
    uint32_t code_len;
    const uint8_t *code;
    uint16_t exc_count;
    cf_exc *exc; /* exc_small or malloc'ed by cf_code_parse; cf_code_release frees */
    uint16_t attr_count;
    cf_attr *attrs;      /* attrs_small or malloc'ed by cf_code_parse; cf_code_release frees */
    cf_exc exc_small[8]; /* in-place storage for the usual sizes (a cf_code is not copied) */
    cf_attr attrs_small[6];
} cf_code;

cf_err cf_code_parse(const cf_class *c, const cf_attr *code_attr, cf_code *out, cf_error *err);
void cf_code_release(cf_code *code);
const cf_attr *cf_method_code_attr(const cf_class *c, const cf_member *m);

enum cf_insn_kind {
    CF_K_PLAIN = 0,
    CF_K_BRANCH16, /* if*, goto, jsr */
    CF_K_BRANCH32, /* goto_w, jsr_w */
    CF_K_TABLESWITCH,
    CF_K_LOOKUPSWITCH,
    CF_K_RETURN, /* ireturn..return */
    CF_K_INVOKE,
};

typedef struct cf_insn {
    uint32_t pc;
    uint32_t len;
    uint8_t op;
    uint8_t kind;
    uint8_t wide;    /* prefixed by wide */
    int32_t branch;  /* relative offset for branches / switch default */
    uint32_t npairs; /* switch: number of targets excluding default */
} cf_insn;

/* Decodes the instruction at pc (bounds checked, switch padding/targets decoded).
 * Returns false on a malformed/unknown instruction. */
bool cf_insn_decode(const uint8_t *code, uint32_t code_len, uint32_t pc, cf_insn *out);
/* Switch target i (0 <= i < npairs) relative offset; for lookupswitch also the key. */
int32_t cf_switch_target(const uint8_t *code, const cf_insn *in, uint32_t i, int32_t *key);
/* Decodes the whole code array into a malloc'ed insn array (caller frees) and checks every
 * branch/switch target lands on an instruction start. */
cf_err cf_code_decode_all(const cf_code *code, cf_insn **out, uint32_t *n, cf_error *err);
/* Same, decoding into caller-owned buffers that are grown (realloc) as needed: *insns holds
 * *insn_cap entries, *starts *starts_cap bytes. The caller frees both. */
cf_err cf_code_decode_reuse(const cf_code *code, cf_insn **insns, size_t *insn_cap, uint8_t **starts,
                            size_t *starts_cap, uint32_t *n, cf_error *err);
/* Same, and also fills pc2i[pc] = instruction index for every instruction start plus
 * pc2i[code_len] = n (pc2i: code_len + 1 entries) and lists the indices of all non-plain
 * instructions (branches, switches, returns, invokes) in special (code_len entries). */
cf_err cf_code_decode_ex(const cf_code *code, cf_insn **insns, size_t *insn_cap, uint8_t **starts, size_t *starts_cap,
                         uint32_t *pc2i, uint32_t *special, uint32_t *nspecial, uint32_t *n, cf_error *err);

/* ---------------------------------------------------------------- descriptors */
/* Words taken by the arguments of a method descriptor (no receiver); -1 if malformed.
 * *ret_words gets 0/1/2. */
int cf_desc_arg_words(cf_str desc, int *ret_words);
int cf_field_words(cf_str desc);

/* ---------------------------------------------------------------- modified UTF-8 -> UTF-8 */
/* Appends the standard UTF-8 form of modified UTF-8 `s` to b. */
void cf_mutf8_to_utf8(cf_buf *b, cf_str s);

#endif

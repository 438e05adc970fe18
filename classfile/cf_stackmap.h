/*
 * cf_stackmap.h - StackMapTable decoding and re-encoding (cf_stackmap.c).
 */
#ifndef CF_STACKMAP_H
#define CF_STACKMAP_H
#include "cf_internal.h"

typedef struct cf_frame {
    uint32_t pc;         /* absolute code offset */
    uint8_t type;        /* original frame_type */
    const uint8_t *body; /* verification types after frame_type and the u2 delta (if any) */
    uint32_t body_len;
} cf_frame;

/* Decodes a StackMapTable attribute. *out is malloc'ed (caller frees). Checks frame offsets
 * are increasing and inside code_len; verification types are checked for shape only. */
cf_err cf_stackmap_decode(const cf_attr *a, uint32_t code_len, cf_frame **out, uint32_t *n, cf_error *err);

/* Same, into a caller-owned buffer grown with realloc (*buf of *cap frames; caller frees). */
cf_err cf_stackmap_decode_into(const cf_attr *a, uint32_t code_len, cf_frame **buf, size_t *cap, uint32_t *n,
                               cf_error *err);

/* Maps an old pc (of a `new` instruction) to its new pc; returns false if unknown. */
typedef bool (*cf_pc_map)(void *ud, uint32_t old_pc, uint32_t *new_pc);

/* Appends one frame at new_pc (prev_pc = -1 for the first frame) to b, keeping the original
 * frame form where the new delta allows it (short forms become their _extended forms when
 * the delta no longer fits) and remapping Uninitialized(offset) through `map`. */
bool cf_stackmap_put_frame(cf_buf *b, const cf_frame *f, int64_t prev_pc, uint32_t new_pc, cf_pc_map map, void *ud);

/* ---- expanded (absolute) frames, used when a frame must be written in full ---- */
typedef struct cf_vtype {
    uint8_t tag; /* JVM_ITEM_* */
    uint16_t v;  /* Object: class index; Uninitialized: offset of the `new` */
} cf_vtype;

typedef struct cf_xframe {
    uint16_t nl, ns;
    cf_vtype *v; /* nl locals followed by ns stack entries */
} cf_xframe;

/* Expands frames[0..n) to absolute states, starting from the implicit initial frame `init`
 * (ninit locals). *out is one malloc'ed block (caller frees) holding n cf_xframe. */
bool cf_stackmap_expand(const cf_frame *frames, uint32_t n, const cf_vtype *init, uint16_t ninit, cf_xframe **out);

/* Appends a full_frame with state x at new_pc, remapping Uninitialized offsets. */
bool cf_stackmap_put_full(cf_buf *b, const cf_xframe *x, int64_t prev_pc, uint32_t new_pc, cf_pc_map map, void *ud);
#endif

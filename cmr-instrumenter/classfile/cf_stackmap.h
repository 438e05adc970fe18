/*
 * cf_stackmap.h - StackMapTable decoding and re-encoding (cf_stackmap.c).
 */
#ifndef CF_STACKMAP_H
#define CF_STACKMAP_H
#include "cf_internal.h"

typedef struct cf_frame {
  uint32_t pc;          /* absolute code offset */
  uint8_t type;         /* original frame_type */
  const uint8_t *body;  /* verification types after frame_type and the u2 delta (if any) */
  uint32_t body_len;
} cf_frame;

/* Decodes a StackMapTable attribute. *out is malloc'ed (caller frees). Checks frame offsets
 * are increasing and inside code_len; verification types are checked for shape only. */
cf_err cf_stackmap_decode(const cf_attr *a, uint32_t code_len, cf_frame **out, uint32_t *n,
                          cf_error *err);

/* Maps an old pc (of a `new` instruction) to its new pc; returns false if unknown. */
typedef bool (*cf_pc_map)(void *ud, uint32_t old_pc, uint32_t *new_pc);

/* Appends one frame at new_pc (prev_pc = -1 for the first frame) to b, keeping the original
 * frame form where the new delta allows it (short forms become their _extended forms when
 * the delta no longer fits) and remapping Uninitialized(offset) through `map`. */
bool cf_stackmap_put_frame(cf_buf *b, const cf_frame *f, int64_t prev_pc, uint32_t new_pc,
                           cf_pc_map map, void *ud);
#endif

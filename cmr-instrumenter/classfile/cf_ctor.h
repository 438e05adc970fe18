/* cf_ctor.h - constructor analysis (cf_ctor.c). */
#ifndef CF_CTOR_H
#define CF_CTOR_H
#include "cf_internal.h"
#include <stdio.h>

/* On success *init_index is the index (in insns) of the invokespecial that initializes
 * `this`. pc2i maps an instruction-start pc to its index. On failure `why` says why. */
bool cf_ctor_find_init(const cf_class *c, const cf_code *code, const cf_insn *insns, uint32_t n,
                       const uint32_t *pc2i, uint32_t *init_index, char *why, size_t why_len);
#endif

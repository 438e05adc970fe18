/* cf_ctor.h - constructor analysis (cf_ctor.c). */
#ifndef CF_CTOR_H
#define CF_CTOR_H
#include "cf_internal.h"
#include <stdio.h>

/* On success is_site[i] = 1 for every invokespecial that initializes `this` and
 * covered[i] = 1 for every instruction reached only after initialization (both arrays have
 * n entries). pc2i maps an instruction-start pc to its index. On failure `why` says why. */
bool cf_ctor_analyse(const cf_class *c, const cf_code *code, const cf_insn *insns, uint32_t n, const uint32_t *pc2i,
                     uint8_t *is_site, uint8_t *covered, char *why, size_t why_len);
#endif

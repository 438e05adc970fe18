/*
 * instr_meta.h - what the instrumenter needs to know about a class to match rules: its
 * name, superclass, interfaces, annotations, and per method name, descriptor, access,
 * annotations and first line. Extracted once per class hash with the class-file engine
 * (cmr_instr_meta_extract) and kept in the class cache in a compact binary form
 * (cmr_instr_meta_encode / _decode), so a cached class is never parsed again to be matched.
 *
 * Names are JVM internal names ("java/lang/String"); annotations are internal names of
 * the annotation types (from the "Lcom/x/Ann;" descriptors of RuntimeVisible/Invisible
 * Annotations).
 *
 * Ownership: a cmr_instr_meta_t owns everything it points to; cmr_instr_meta_free().
 */
#ifndef CMR_INSTR_META_H
#define CMR_INSTR_META_H

#include <stddef.h>
#include <stdint.h>

#include "cmr/wire.h"

typedef struct cmr_instr_names {
    char **items; /* owned, each owned */
    size_t count, cap;
} cmr_instr_names_t;

/* Appends s, taking it over (freed here when it cannot be added). 0, or -1 when s is NULL
 * or memory ran out. */
int cmr_instr_names_add(cmr_instr_names_t *n, char *s);

typedef struct cmr_instr_method {
    char *name;
    char *desc;
    uint16_t access;
    uint16_t index;     /* method_info index in the class */
    int32_t first_line; /* lowest LineNumberTable line, 0 when none */
    uint8_t trivial;    /* cf_trivial_kind (classfile.h): an accessor or a tiny leaf; 0 when not
                           (and in cache entries of format 1, written before it was known) */
    cmr_instr_names_t annotations;
} cmr_instr_method_t;

typedef struct cmr_instr_meta {
    char *name;
    char *super_name;  /* NULL for java/lang/Object and module-info */
    char *source_file; /* NULL when absent */
    uint16_t access;
    cmr_instr_names_t interfaces;
    cmr_instr_names_t annotations;
    cmr_instr_method_t *methods;
    size_t n_methods;
} cmr_instr_meta_t;

/* Parses class bytes. 0, or -1 with the engine's reason in err. */
int cmr_instr_meta_extract(const uint8_t *bytes, size_t len, cmr_instr_meta_t *out, char *err, size_t errlen);
void cmr_instr_meta_free(cmr_instr_meta_t *m);
/* The index of the method name + desc in m->methods, or -1. */
long cmr_instr_meta_find_method(const cmr_instr_meta_t *m, const char *name, const char *desc);

/* Compact binary form for the cache. encode: 0 or -1 (out of memory); decode: 0 or -1
 * when the bytes are not a valid encoding. */
int cmr_instr_meta_encode(const cmr_instr_meta_t *m, cmr_buf_t *out);
int cmr_instr_meta_decode(const void *data, size_t len, cmr_instr_meta_t *out);

#endif

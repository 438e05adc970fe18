/*
 * cf_annotations.c - walking annotation structures (JVMS 4.7.16): skipping one whole
 * annotation, for the engine's rewriting of type annotations (cf_instrument.c), and the
 * type of every annotation of a Runtime(In)VisibleAnnotations attribute, for the
 * instrumenter's rules that match annotations.
 *
 * Nesting is bounded (an annotation inside an array inside an annotation ... at most 64
 * deep): a hostile class cannot exhaust the stack.
 */
#include "cf_internal.h"

#define CF_ANNOTATION_MAX_DEPTH 64

static bool skip_element(cf_rd *r, int depth)
{
    if (depth > CF_ANNOTATION_MAX_DEPTH)
        return false;
    uint8_t tag = cf_rd_u1(r);
    switch (tag) {
    case 'B':
    case 'C':
    case 'D':
    case 'F':
    case 'I':
    case 'J':
    case 'S':
    case 'Z':
    case 's':
    case 'c': cf_rd_u2(r); return !r->bad;
    case 'e':
        cf_rd_u2(r);
        cf_rd_u2(r);
        return !r->bad;
    case '@': return cf_skip_annotation(r, depth + 1);
    case '[': {
        uint16_t n = cf_rd_u2(r);
        for (uint16_t i = 0; i < n && !r->bad; i++)
            if (!skip_element(r, depth + 1))
                return false;
        return !r->bad;
    }
    default: return false;
    }
}

bool cf_skip_annotation(cf_rd *r, int depth)
{
    cf_rd_u2(r); /* type_index */
    uint16_t n = cf_rd_u2(r);
    for (uint16_t i = 0; i < n && !r->bad; i++) {
        cf_rd_u2(r); /* element_name_index */
        if (!skip_element(r, depth))
            return false;
    }
    return !r->bad;
}

int cf_annotation_types(const cf_attr *a, cf_annotation_type_fn *fn, void *ud)
{
    cf_rd r;
    cf_rd_init(&r, a->data, a->len);
    uint16_t n = cf_rd_u2(&r);
    for (uint16_t i = 0; i < n && !r.bad; i++) {
        if (!cf_rd_has(&r, 2))
            return -1;
        int rc = fn(cmr_be16(r.p + r.pos), ud);
        if (rc != 0)
            return rc;
        if (!cf_skip_annotation(&r, 0))
            return -1;
    }
    return r.bad ? -1 : 0;
}

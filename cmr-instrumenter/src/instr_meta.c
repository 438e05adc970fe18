/*
 * instr_meta.c - class metadata for rule matching (see instr_meta.h): extraction with the
 * class-file engine (constant pool, annotations attributes walked with bounds checks) and
 * the cache encoding (little-endian lengths + bytes, version byte first), built in a
 * cmr_buf_t and read back with the same bounded reader as the attributes.
 */
#include "cmr/instr_meta.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/buf.h"
#include "cmr/bytes.h"
#include "cmr/classfile.h"

/* 2: a trivial kind per method (format 1 is still read, as "not trivial") */
#define META_FORMAT 2

static char *dup_str(cf_str s)
{
    char *d = malloc((size_t)s.len + 1);
    if (d) {
        memcpy(d, s.p, s.len);
        d[s.len] = '\0';
    }
    return d;
}

int cmr_instr_names_add(cmr_instr_names_t *n, char *s)
{
    if (!s)
        return -1;
    if (CMR_ARRAY_GROW(n->items, n->cap, n->count + 1) != 0) {
        free(s);
        return -1;
    }
    n->items[n->count++] = s;
    return 0;
}

static void names_free(cmr_instr_names_t *n)
{
    for (size_t i = 0; i < n->count; i++)
        free(n->items[i]);
    free(n->items);
    n->items = NULL;
    n->count = 0;
}

long cmr_instr_meta_find_method(const cmr_instr_meta_t *m, const char *name, const char *desc)
{
    for (size_t i = 0; i < m->n_methods; i++)
        if (strcmp(m->methods[i].name, name) == 0 && strcmp(m->methods[i].desc, desc) == 0)
            return (long)i;
    return -1;
}

void cmr_instr_meta_free(cmr_instr_meta_t *m)
{
    if (!m)
        return;
    free(m->name);
    free(m->super_name);
    free(m->source_file);
    names_free(&m->interfaces);
    names_free(&m->annotations);
    for (size_t i = 0; i < m->n_methods; i++) {
        free(m->methods[i].name);
        free(m->methods[i].desc);
        names_free(&m->methods[i].annotations);
    }
    free(m->methods);
    memset(m, 0, sizeof *m);
}

/* --- a bounded reader ---------------------------------------------------------------- */

/* Reads class-file attributes (big-endian) and the cache encoding (little-endian). Reading
 * past the end sets bad, moves to the end and reads zeros. */
typedef struct rd {
    const uint8_t *p, *end;
    int bad;
} rd_t;

/* The next n bytes, or NULL (bad set) when fewer are left. */
static const uint8_t *take(rd_t *r, size_t n)
{
    if ((size_t)(r->end - r->p) < n) {
        r->bad = 1;
        r->p = r->end;
        return NULL;
    }
    const uint8_t *at = r->p;
    r->p += n;
    return at;
}

static unsigned u2(rd_t *r)
{
    const uint8_t *p = take(r, 2);
    return p ? cmr_be16(p) : 0;
}

static uint32_t u4(rd_t *r)
{
    const uint8_t *p = take(r, 4);
    return p ? cmr_be32(p) : 0;
}

static uint32_t le4(rd_t *r)
{
    const uint8_t *p = take(r, 4);
    return p ? cmr_le32(p) : 0;
}

/* --- annotations attributes --------------------------------------------------------- */

typedef struct annotations_ctx {
    const cf_class *c;
    cmr_instr_names_t *out;
} annotations_ctx_t;

static int add_annotation(uint16_t type, void *ud)
{
    annotations_ctx_t *x = ud;
    cf_str d = cf_cp_utf8(x->c, type);
    if (d.len >= 3 && d.p[0] == 'L' && d.p[d.len - 1] == ';') {
        cf_str inner = {d.p + 1, d.len - 2};
        if (cmr_instr_names_add(x->out, dup_str(inner)) != 0)
            return 1; /* out of memory */
    }
    return 0;
}

/* Adds the annotation types of one Runtime(In)VisibleAnnotations attribute. */
static int read_annotations(const cf_class *c, const cf_attr *a, cmr_instr_names_t *out)
{
    annotations_ctx_t x = {c, out};
    /* a malformed attribute only loses its annotations from the damage on */
    return cf_annotation_types(a, add_annotation, &x) == 1 ? -1 : 0;
}

static int member_annotations(const cf_class *c, const cf_attr *attrs, uint16_t n, cmr_instr_names_t *out)
{
    const char *names[] = {"RuntimeVisibleAnnotations", "RuntimeInvisibleAnnotations"};
    for (int i = 0; i < 2; i++) {
        const cf_attr *a = cf_attr_find(c, attrs, n, names[i]);
        if (a && read_annotations(c, a, out) != 0)
            return -1;
    }
    return 0;
}

/* Lowest line of the method's LineNumberTable (0 when none). */
static int32_t first_line(const cf_class *c, const cf_member *m)
{
    const cf_attr *code = cf_attr_find(c, m->attrs, m->attr_count, "Code");
    if (!code)
        return 0;
    rd_t r = {code->data, code->data + code->len, 0};
    u2(&r); /* max_stack */
    u2(&r); /* max_locals */
    uint32_t code_len = u4(&r);
    if (r.bad || (size_t)(r.end - r.p) < code_len)
        return 0;
    r.p += code_len;
    unsigned exc = u2(&r);
    if ((size_t)(r.end - r.p) < (size_t)exc * 8)
        return 0;
    r.p += exc * 8;
    unsigned nattr = u2(&r);
    int32_t best = 0;
    for (unsigned i = 0; i < nattr && !r.bad; i++) {
        cf_str name = cf_cp_utf8(c, (uint16_t)u2(&r));
        uint32_t len = u4(&r);
        if (r.bad || (size_t)(r.end - r.p) < len)
            break;
        rd_t a = {r.p, r.p + len, 0};
        r.p += len;
        if (name.len != 15 || memcmp(name.p, "LineNumberTable", 15) != 0)
            continue;
        unsigned n = u2(&a);
        for (unsigned j = 0; j < n && !a.bad; j++) {
            u2(&a);
            int32_t line = (int32_t)u2(&a);
            if (!a.bad && line > 0 && (best == 0 || line < best))
                best = line;
        }
    }
    return best;
}

static int extract_methods(const cf_class *c, cmr_instr_meta_t *out)
{
    out->methods = calloc(c->method_count ? c->method_count : 1, sizeof *out->methods);
    if (!out->methods)
        return -1;
    for (uint16_t i = 0; i < c->method_count; i++) {
        const cf_member *m = &c->methods[i];
        cmr_instr_method_t *im = &out->methods[i];
        out->n_methods = (size_t)i + 1;
        im->name = dup_str(cf_cp_utf8(c, m->name));
        im->desc = dup_str(cf_cp_utf8(c, m->desc));
        im->access = m->access;
        im->index = i;
        im->first_line = first_line(c, m);
        im->trivial = (uint8_t)cf_method_trivial(c, m);
        if (!im->name || !im->desc || member_annotations(c, m->attrs, m->attr_count, &im->annotations) != 0)
            return -1;
    }
    return 0;
}

int cmr_instr_meta_extract(const uint8_t *bytes, size_t len, cmr_instr_meta_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    cf_class *c = NULL;
    cf_error e;
    if (cf_class_parse(bytes, len, &c, &e) != CF_OK) {
        snprintf(err, errlen, "class file does not parse: %s: %s", cf_err_name(e.code), e.msg);
        return -1;
    }
    int rc = 0;
    out->name = dup_str(cf_class_name(c));
    out->access = c->access;
    if (c->super_class)
        out->super_name = dup_str(cf_cp_class_name(c, c->super_class));
    const cf_attr *sf = cf_attr_find(c, c->attrs, c->attr_count, "SourceFile");
    if (sf && sf->len == 2)
        out->source_file = dup_str(cf_cp_utf8(c, cmr_be16(sf->data)));
    for (uint16_t i = 0; i < c->iface_count && rc == 0; i++) {
        uint16_t idx = cmr_be16(c->ifaces + 2 * i);
        rc = cmr_instr_names_add(&out->interfaces, dup_str(cf_cp_class_name(c, idx)));
    }
    if (rc == 0)
        rc = member_annotations(c, c->attrs, c->attr_count, &out->annotations);
    if (rc == 0)
        rc = extract_methods(c, out);
    if (rc == 0 && (!out->name || (c->super_class && !out->super_name)))
        rc = -1;
    cf_class_free(c);
    if (rc != 0) {
        snprintf(err, errlen, "out of memory reading class metadata");
        cmr_instr_meta_free(out);
    }
    return rc;
}

/* --- cache encoding ----------------------------------------------------------------- */

static void put_u32(cmr_buf_t *b, uint32_t v)
{
    uint8_t *p = cmr_buf_append(b, 4);
    if (p)
        cmr_put_le32(p, v);
}

/* NULL is written as 0xffffffff. */
static void put_str(cmr_buf_t *b, const char *s)
{
    if (!s) {
        put_u32(b, 0xffffffffu);
        return;
    }
    size_t n = strlen(s);
    put_u32(b, (uint32_t)n);
    cmr_buf_put(b, s, n);
}

static void put_names(cmr_buf_t *b, const cmr_instr_names_t *n)
{
    put_u32(b, (uint32_t)n->count);
    for (size_t i = 0; i < n->count; i++)
        put_str(b, n->items[i]);
}

int cmr_instr_meta_encode(const cmr_instr_meta_t *m, cmr_buf_t *out)
{
    cmr_buf_reset(out);
    cmr_buf_putc(out, META_FORMAT);
    put_str(out, m->name);
    put_str(out, m->super_name);
    put_str(out, m->source_file);
    put_u32(out, m->access);
    put_names(out, &m->interfaces);
    put_names(out, &m->annotations);
    put_u32(out, (uint32_t)m->n_methods);
    for (size_t i = 0; i < m->n_methods; i++) {
        const cmr_instr_method_t *x = &m->methods[i];
        put_str(out, x->name);
        put_str(out, x->desc);
        put_u32(out, x->access);
        put_u32(out, x->index);
        put_u32(out, (uint32_t)x->first_line);
        cmr_buf_putc(out, (char)x->trivial);
        put_names(out, &x->annotations);
    }
    return cmr_buf_ok(out) ? 0 : -1;
}

static char *get_str(rd_t *r, int *null)
{
    uint32_t n = le4(r);
    *null = n == 0xffffffffu;
    if (r->bad || *null)
        return NULL;
    cf_str bytes = {(const char *)take(r, n), n};
    char *s = bytes.p ? dup_str(bytes) : NULL;
    r->bad |= !s;
    return s;
}

static char *get_req(rd_t *r)
{
    int null;
    char *s = get_str(r, &null);
    if (null)
        r->bad = 1;
    return s;
}

static void get_names(rd_t *r, cmr_instr_names_t *n)
{
    uint32_t count = le4(r);
    if (count > (size_t)(r->end - r->p) / 4) {
        r->bad = 1;
        return;
    }
    for (uint32_t i = 0; i < count && !r->bad; i++) {
        char *s = get_req(r);
        if (!s || cmr_instr_names_add(n, s) != 0)
            r->bad = 1;
    }
}

int cmr_instr_meta_decode(const void *data, size_t len, cmr_instr_meta_t *out)
{
    memset(out, 0, sizeof *out);
    rd_t r = {data, (const uint8_t *)data + len, 0};
    int null;
    if (len < 1 || (r.p[0] != 1 && r.p[0] != META_FORMAT))
        return -1;
    int format = *r.p++;
    out->name = get_req(&r);
    out->super_name = get_str(&r, &null);
    out->source_file = get_str(&r, &null);
    out->access = (uint16_t)le4(&r);
    get_names(&r, &out->interfaces);
    get_names(&r, &out->annotations);
    uint32_t n = le4(&r);
    if (!r.bad && n <= (size_t)(r.end - r.p) / 16) {
        out->methods = calloc(n ? n : 1, sizeof *out->methods);
        r.bad |= !out->methods;
        for (uint32_t i = 0; i < n && !r.bad; i++) {
            cmr_instr_method_t *x = &out->methods[i];
            out->n_methods = (size_t)i + 1;
            x->name = get_req(&r);
            x->desc = get_req(&r);
            x->access = (uint16_t)le4(&r);
            x->index = (uint16_t)le4(&r);
            x->first_line = (int32_t)le4(&r);
            if (format >= 2) {
                const uint8_t *t = take(&r, 1);
                x->trivial = t && *t <= CF_TRIVIAL_LEAF ? *t : 0;
            }
            get_names(&r, &x->annotations);
        }
    } else {
        r.bad = 1;
    }
    if (r.bad || r.p != r.end) {
        cmr_instr_meta_free(out);
        return -1;
    }
    return 0;
}

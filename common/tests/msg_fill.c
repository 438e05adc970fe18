/*
 * msg_fill.c - test values for every message type (see msg_fill.h).
 */
#include "msg_fill.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "msg_desc.h"

typedef struct fill {
    msg_fill_variant_t variant;
    uint64_t rng;
    int depth;
} fill_t;

static uint64_t next(fill_t *f)
{
    f->rng ^= f->rng << 13;
    f->rng ^= f->rng >> 7;
    f->rng ^= f->rng << 17;
    return f->rng;
}

static char *make_string(fill_t *f)
{
    if (f->variant == MSG_FILL_EMPTY)
        return strdup("");
    /* UTF-8 text with multi-byte characters, quotes and backslashes. */
    static const char *const parts[] = {"java/lang/", "Ärger", "\"q\"", "\\", "日本語", "x", "€"};
    /* maximal: long strings at the top level, shorter ones inside arrays to stay well
     * under the message size limit */
    size_t n = f->variant == MSG_FILL_MAXIMAL ? (f->depth > 1 ? 40 : 2000) : 1 + next(f) % 12;
    size_t cap = n * 10 + 1, len = 0;
    char *s = malloc(cap);
    for (size_t i = 0; i < n; i++) {
        const char *p = parts[next(f) % (sizeof parts / sizeof parts[0])];
        memcpy(s + len, p, strlen(p));
        len += strlen(p);
    }
    s[len] = '\0';
    return s;
}

static size_t make_count(fill_t *f, size_t max_items)
{
    if (f->variant == MSG_FILL_EMPTY)
        return 0;
    if (f->variant == MSG_FILL_MAXIMAL)
        return f->depth > 1 ? 20 : max_items;
    return next(f) % 5;
}

static void fill_record(fill_t *f, const cmr_record_desc_t *d, void *p);

static int enum_count(const cmr_field_desc_t *fd)
{
    int n = 0;
    while (fd->symbols[n])
        n++;
    return n;
}

static void fill_field(fill_t *f, const cmr_field_desc_t *fd, char *p)
{
    int maximal = f->variant == MSG_FILL_MAXIMAL, empty = f->variant == MSG_FILL_EMPTY;
    switch (fd->type) {
    case CMR_F_INT:
        *(int32_t *)p = empty ? 0 : maximal ? ((next(f) & 1) ? INT32_MAX : INT32_MIN) : (int32_t)next(f);
        break;
    case CMR_F_LONG:
        *(int64_t *)p = empty ? 0 : maximal ? ((next(f) & 1) ? INT64_MAX : INT64_MIN) : (int64_t)next(f);
        break;
    case CMR_F_DOUBLE:
        *(double *)p = empty     ? 0.0
                       : maximal ? ((next(f) & 1) ? 1.7976931348623157e308 : -4.9e-324)
                                 : (double)(int64_t)next(f) / 1024.0;
        break;
    case CMR_F_BOOL: *(bool *)p = !empty && (maximal || (next(f) & 1)); break;
    case CMR_F_ENUM:
        *(int *)p = empty ? 0 : maximal ? enum_count(fd) - 1 : (int)(next(f) % (uint64_t)enum_count(fd));
        break;
    case CMR_F_STRING: *(char **)p = make_string(f); break;
    case CMR_F_OPT_STRING: *(char **)p = empty ? NULL : make_string(f); break;
    case CMR_F_BYTES: {
        cmr_bytes_t *b = (cmr_bytes_t *)p;
        /* maximal: 1 MiB at the top level, less inside arrays (under the size limit) */
        b->len = empty ? 0 : maximal ? (f->depth > 1 ? 4096 : 1024 * 1024) : next(f) % 300;
        b->data = b->len ? malloc(b->len) : NULL;
        for (size_t i = 0; i < b->len; i++)
            b->data[i] = (uint8_t)next(f);
        break;
    }
    case CMR_F_FIXED16:
        for (int i = 0; i < 16; i++)
            p[i] = empty ? 0 : (char)next(f);
        break;
    case CMR_F_RECORD: fill_record(f, fd->rec, p); break;
    case CMR_F_OPT_RECORD:
        if (empty) {
            *(void **)p = NULL;
        } else {
            *(void **)p = calloc(1, fd->rec->size);
            fill_record(f, fd->rec, *(void **)p);
        }
        break;
    case CMR_F_STRINGS: {
        cmr_strings_t *a = (cmr_strings_t *)p;
        a->count = make_count(f, 300);
        a->items = a->count ? calloc(a->count, sizeof(char *)) : NULL;
        for (size_t i = 0; i < a->count; i++)
            a->items[i] = make_string(f);
        break;
    }
    case CMR_F_MAP: {
        cmr_kvs_t *m = (cmr_kvs_t *)p;
        m->count = make_count(f, 50);
        m->items = m->count ? calloc(m->count, sizeof(cmr_kv_t)) : NULL;
        for (size_t i = 0; i < m->count; i++) {
            /* keys must be distinct: a map keeps one value per key */
            char *k = make_string(f);
            size_t kl = strlen(k);
            m->items[i].key = realloc(k, kl + 24);
            snprintf(m->items[i].key + kl, 24, "#%zu", i);
            m->items[i].value = make_string(f);
        }
        break;
    }
    case CMR_F_RECORDS: {
        cmr_array_any_t *a = (cmr_array_any_t *)p;
        a->count = make_count(f, 300);
        a->items = a->count ? calloc(a->count, fd->rec->size) : NULL;
        for (size_t i = 0; i < a->count; i++)
            fill_record(f, fd->rec, (char *)a->items + i * fd->rec->size);
        break;
    }
    }
}

static void fill_record(fill_t *f, const cmr_record_desc_t *d, void *p)
{
    f->depth++;
    for (size_t i = 0; i < d->nfields; i++)
        fill_field(f, &d->fields[i], (char *)p + d->fields[i].offset);
    f->depth--;
}

void msg_fill(cmr_msg_type_t type, msg_fill_variant_t variant, uint64_t seed, cmr_msg_t *out)
{
    memset(out, 0, sizeof *out);
    out->type = type;
    fill_t f = {variant, seed * 0x9E3779B97F4A7C15ULL + 1, 0};
    fill_record(&f, cmr_msg_descs[type], &out->u);
}

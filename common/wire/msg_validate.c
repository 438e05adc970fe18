/*
 * msg_validate.c - checks an Avro binary body before avro-c reads it.
 *
 * avro-c trusts the lengths and counts it reads: a corrupt or hostile length can make it
 * allocate gigabytes or read past the buffer. This walk runs first, over the same
 * schema, with every length and count held against the bytes actually left, so that the
 * decoder only ever sees well-formed input. It is O(body size) and allocates nothing.
 */
#include "msg_validate.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

typedef struct walk {
    const uint8_t *p;
    const uint8_t *end;
    char *errbuf;
    size_t errlen;
    const char *field; /* innermost field name, for messages */
} walk_t;

static cmr_wire_err_t walk_fail(walk_t *w, cmr_wire_err_t err, const char *what)
{
    if (w->errbuf && w->errlen)
        snprintf(w->errbuf, w->errlen, "%s%s%s", what, w->field ? " in field " : "", w->field ? w->field : "");
    return err;
}

/* Reads a zig-zag varint of at most `max_bytes` bytes. */
static cmr_wire_err_t read_varint(walk_t *w, int max_bytes, int64_t *out)
{
    uint64_t v = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (w->p >= w->end)
            return walk_fail(w, CMR_WIRE_ERR_TRUNCATED, "body ends inside a number");
        uint8_t b = *w->p++;
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *out = (int64_t)((v >> 1) ^ (0 - (v & 1)));
            return CMR_WIRE_OK;
        }
    }
    return walk_fail(w, CMR_WIRE_ERR_CORRUPT, "number longer than its type allows");
}

static cmr_wire_err_t read_length(walk_t *w, int64_t *len)
{
    cmr_wire_err_t rc = read_varint(w, 10, len);
    if (rc != CMR_WIRE_OK)
        return rc;
    if (*len < 0)
        return walk_fail(w, CMR_WIRE_ERR_CORRUPT, "negative length");
    if ((uint64_t)*len > (uint64_t)(w->end - w->p))
        return walk_fail(w, CMR_WIRE_ERR_TRUNCATED, "length runs past the end of the body");
    return CMR_WIRE_OK;
}

static cmr_wire_err_t skip(walk_t *w, size_t n)
{
    if (n > (size_t)(w->end - w->p))
        return walk_fail(w, CMR_WIRE_ERR_TRUNCATED, "body ends early");
    w->p += n;
    return CMR_WIRE_OK;
}

static cmr_wire_err_t walk_datum(walk_t *w, avro_schema_t s);

/* Arrays and maps: blocks of (count, [byte size,] items) ended by a zero count. */
static cmr_wire_err_t walk_blocks(walk_t *w, avro_schema_t items, bool is_map)
{
    for (;;) {
        int64_t count;
        cmr_wire_err_t rc = read_varint(w, 10, &count);
        if (rc != CMR_WIRE_OK)
            return rc;
        if (count == 0)
            return CMR_WIRE_OK;
        if (count < 0) {
            int64_t block_bytes;
            if (count == INT64_MIN)
                return walk_fail(w, CMR_WIRE_ERR_CORRUPT, "bad block count");
            count = -count;
            if ((rc = read_length(w, &block_bytes)) != CMR_WIRE_OK)
                return rc;
        }
        /* Every item of our schemas takes at least one byte: a count larger than the
         * bytes left cannot be honest. */
        if ((uint64_t)count > (uint64_t)(w->end - w->p))
            return walk_fail(w, CMR_WIRE_ERR_TRUNCATED, "item count runs past the end of the body");
        for (int64_t i = 0; i < count; i++) {
            if (is_map) {
                int64_t klen;
                if ((rc = read_length(w, &klen)) != CMR_WIRE_OK)
                    return rc;
                if (memchr(w->p, 0, (size_t)klen))
                    return walk_fail(w, CMR_WIRE_ERR_CORRUPT, "map key holds a NUL byte");
                w->p += klen;
            }
            if ((rc = walk_datum(w, items)) != CMR_WIRE_OK)
                return rc;
        }
    }
}

static cmr_wire_err_t walk_datum(walk_t *w, avro_schema_t s)
{
    int64_t v;
    cmr_wire_err_t rc;
    while (s && avro_typeof(s) == AVRO_LINK)
        s = avro_schema_link_target(s);
    if (!s)
        return walk_fail(w, CMR_WIRE_ERR_INTERNAL, "schema missing");
    switch (avro_typeof(s)) {
    case AVRO_NULL: return CMR_WIRE_OK;
    case AVRO_BOOLEAN:
        if (w->p >= w->end)
            return walk_fail(w, CMR_WIRE_ERR_TRUNCATED, "body ends inside a boolean");
        if (*w->p > 1)
            return walk_fail(w, CMR_WIRE_ERR_CORRUPT, "boolean is neither 0 nor 1");
        w->p++;
        return CMR_WIRE_OK;
    case AVRO_INT32:
        if ((rc = read_varint(w, 5, &v)) != CMR_WIRE_OK)
            return rc;
        return v < INT32_MIN || v > INT32_MAX ? walk_fail(w, CMR_WIRE_ERR_CORRUPT, "int out of range") : CMR_WIRE_OK;
    case AVRO_INT64: return read_varint(w, 10, &v);
    case AVRO_FLOAT: return skip(w, 4);
    case AVRO_DOUBLE: return skip(w, 8);
    case AVRO_STRING:
    case AVRO_BYTES:
        if ((rc = read_length(w, &v)) != CMR_WIRE_OK)
            return rc;
        if (avro_typeof(s) == AVRO_STRING && memchr(w->p, 0, (size_t)v))
            return walk_fail(w, CMR_WIRE_ERR_CORRUPT, "string holds a NUL byte");
        w->p += v;
        return CMR_WIRE_OK;
    case AVRO_FIXED: return skip(w, (size_t)avro_schema_fixed_size(s));
    case AVRO_ENUM:
        if ((rc = read_varint(w, 5, &v)) != CMR_WIRE_OK)
            return rc;
        return v < 0 || v >= avro_schema_enum_number_of_symbols(s)
                   ? walk_fail(w, CMR_WIRE_ERR_CORRUPT, "enum symbol out of range")
                   : CMR_WIRE_OK;
    case AVRO_UNION:
        if ((rc = read_varint(w, 5, &v)) != CMR_WIRE_OK)
            return rc;
        if (v < 0 || (uint64_t)v >= avro_schema_union_size(s))
            return walk_fail(w, CMR_WIRE_ERR_CORRUPT, "union branch out of range");
        return walk_datum(w, avro_schema_union_branch(s, (int)v));
    case AVRO_RECORD: {
        const char *outer = w->field;
        size_t n = avro_schema_record_size(s);
        for (size_t i = 0; i < n; i++) {
            w->field = avro_schema_record_field_name(s, (int)i);
            if ((rc = walk_datum(w, avro_schema_record_field_get_by_index(s, (int)i))) != CMR_WIRE_OK)
                return rc;
        }
        w->field = outer;
        return CMR_WIRE_OK;
    }
    case AVRO_ARRAY: return walk_blocks(w, avro_schema_array_items(s), false);
    case AVRO_MAP: return walk_blocks(w, avro_schema_map_values(s), true);
    default: return walk_fail(w, CMR_WIRE_ERR_INTERNAL, "unsupported schema type");
    }
}

cmr_wire_err_t cmr_wire_validate(avro_schema_t schema, const uint8_t *body, size_t len, size_t *used, char *errbuf,
                                 size_t errlen)
{
    walk_t w = {body, body + len, errbuf, errlen, NULL};
    cmr_wire_err_t rc = walk_datum(&w, schema);
    *used = (size_t)(w.p - body);
    return rc;
}

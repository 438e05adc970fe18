/*
 * wire_fingerprint.c - schema fingerprints for Avro single-object encoding.
 *
 * The header of every message names its schema by the CRC-64-AVRO (Rabin) fingerprint of
 * the schema's Parsing Canonical Form, as the Avro specification defines both. avro-c does
 * not compute the canonical form, so it is done here on the schema's JSON (jansson):
 * primitives in short form, full names, only name/type/fields/symbols/items/values/size
 * kept in that order, no white space. A Python test checks the result against the
 * reference implementation.
 */
#include <assert.h>
#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/wire.h"
#include "cmr/buf.h"

#define CRC64_AVRO_EMPTY 0xc15d213aa4d7a795ULL

static uint64_t crc64_table[256];
static pthread_once_t crc64_once = PTHREAD_ONCE_INIT;

static void crc64_table_init(void)
{
    for (int i = 0; i < 256; i++) {
        uint64_t fp = (uint64_t)i;
        for (int j = 0; j < 8; j++)
            fp = (fp >> 1) ^ (CRC64_AVRO_EMPTY & (0 - (fp & 1)));
        crc64_table[i] = fp;
    }
}

uint64_t cmr_wire_crc64_avro(const void *data, size_t len)
{
    pthread_once(&crc64_once, crc64_table_init);
    const uint8_t *p = data;
    uint64_t fp = CRC64_AVRO_EMPTY;
    for (size_t i = 0; i < len; i++)
        fp = (fp >> 8) ^ crc64_table[(fp ^ p[i]) & 0xff];
    return fp;
}

static const char *const primitives[] = {
    "null", "boolean", "int", "long", "float", "double", "bytes", "string", NULL,
};

static bool is_primitive(const char *name)
{
    for (int i = 0; primitives[i]; i++)
        if (strcmp(name, primitives[i]) == 0)
            return true;
    return false;
}

/* Writes a JSON string literal: only '"', '\\' and control characters are escaped. */
static void put_json_string(cmr_buf_t *sb, const char *s)
{
    cmr_buf_putc(sb, '"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            cmr_buf_putc(sb, '\\');
            cmr_buf_putc(sb, (char)*p);
        } else if (*p < 0x20) {
            cmr_buf_printf(sb, "\\u%04x", *p);
        } else {
            cmr_buf_putc(sb, (char)*p);
        }
    }
    cmr_buf_putc(sb, '"');
}

/* The full name of `name` seen inside namespace `ns` (may be NULL or ""). Malloc'd. */
static char *full_name(const char *name, const char *ns)
{
    if (strchr(name, '.') || !ns || !*ns)
        return strdup(name);
    size_t n = strlen(ns) + 1 + strlen(name) + 1;
    char *out = malloc(n);
    if (out)
        snprintf(out, n, "%s.%s", ns, name);
    return out;
}

/* The namespace a full name defines for what it encloses ("a.b.C" -> "a.b"). Malloc'd. */
static char *namespace_of(const char *fullname)
{
    const char *dot = strrchr(fullname, '.');
    return dot ? strndup(fullname, (size_t)(dot - fullname)) : strdup("");
}

static int canon(cmr_buf_t *sb, json_t *node, const char *ns, char *err, size_t errlen);

/* The array member `key` of a named schema, or NULL with err filled. */
static json_t *member_array(json_t *node, const char *key, const char *type, const char *full, char *err, size_t errlen)
{
    json_t *a = json_object_get(node, key);
    if (!json_is_array(a))
        snprintf(err, errlen, "%s %s without %s", type, full, key);
    return json_is_array(a) ? a : NULL;
}

/* ,"fields":[{"name":..,"type":..},...] of a record, field types in namespace inner_ns. */
static int canon_fields(cmr_buf_t *sb, json_t *node, const char *full, const char *inner_ns, char *err, size_t errlen)
{
    json_t *fields = member_array(node, "fields", "record", full, err, errlen);
    if (!fields)
        return -1;
    cmr_buf_puts(sb, ",\"fields\":[");
    size_t i;
    json_t *f;
    json_array_foreach(fields, i, f)
    {
        const char *fname = json_string_value(json_object_get(f, "name"));
        json_t *ftype = json_object_get(f, "type");
        if (!fname || !ftype) {
            snprintf(err, errlen, "record %s: field %zu lacks name or type", full, i);
            return -1;
        }
        cmr_buf_puts(sb, i ? ",{\"name\":" : "{\"name\":");
        put_json_string(sb, fname);
        cmr_buf_puts(sb, ",\"type\":");
        if (canon(sb, ftype, inner_ns, err, errlen) != 0)
            return -1;
        cmr_buf_putc(sb, '}');
    }
    cmr_buf_putc(sb, ']');
    return 0;
}

/* ,"symbols":[...] of an enum. */
static int canon_symbols(cmr_buf_t *sb, json_t *node, const char *full, char *err, size_t errlen)
{
    json_t *symbols = member_array(node, "symbols", "enum", full, err, errlen);
    if (!symbols)
        return -1;
    cmr_buf_puts(sb, ",\"symbols\":[");
    size_t i;
    json_t *sym;
    json_array_foreach(symbols, i, sym)
    {
        if (i)
            cmr_buf_putc(sb, ',');
        put_json_string(sb, json_string_value(sym) ? json_string_value(sym) : "");
    }
    cmr_buf_putc(sb, ']');
    return 0;
}

/* ,"size":N of a fixed. */
static int canon_size(cmr_buf_t *sb, json_t *node, const char *full, char *err, size_t errlen)
{
    json_t *size = json_object_get(node, "size");
    if (!json_is_integer(size)) {
        snprintf(err, errlen, "fixed %s without size", full);
        return -1;
    }
    cmr_buf_printf(sb, ",\"size\":%lld", (long long)json_integer_value(size));
    return 0;
}

/* A record, error, enum or fixed: {"name":full,"type":..., then what the kind has}. */
static int canon_named(cmr_buf_t *sb, json_t *node, const char *type, const char *ns, char *err, size_t errlen)
{
    const char *name = json_string_value(json_object_get(node, "name"));
    if (!name) {
        snprintf(err, errlen, "%s schema without a name", type);
        return -1;
    }
    const char *own_ns = json_string_value(json_object_get(node, "namespace"));
    char *full = full_name(name, own_ns ? own_ns : ns);
    char *inner_ns = full ? namespace_of(full) : NULL;
    int rc = -1;
    if (full && inner_ns) {
        cmr_buf_puts(sb, "{\"name\":");
        put_json_string(sb, full);
        cmr_buf_puts(sb, ",\"type\":");
        put_json_string(sb, type);
        if (strcmp(type, "record") == 0 || strcmp(type, "error") == 0)
            rc = canon_fields(sb, node, full, inner_ns, err, errlen);
        else if (strcmp(type, "enum") == 0)
            rc = canon_symbols(sb, node, full, err, errlen);
        else {
            assert(strcmp(type, "fixed") == 0); /* canon() hands over only these four */
            rc = canon_size(sb, node, full, err, errlen);
        }
    }
    if (rc == 0)
        cmr_buf_putc(sb, '}');
    free(full);
    free(inner_ns);
    return rc;
}

static int canon(cmr_buf_t *sb, json_t *node, const char *ns, char *err, size_t errlen)
{
    if (json_is_string(node)) {
        const char *name = json_string_value(node);
        if (is_primitive(name)) {
            put_json_string(sb, name);
            return 0;
        }
        char *full = full_name(name, ns);
        if (!full)
            return -1;
        put_json_string(sb, full);
        free(full);
        return 0;
    }
    if (json_is_array(node)) { /* union */
        cmr_buf_putc(sb, '[');
        size_t i;
        json_t *branch;
        json_array_foreach(node, i, branch)
        {
            if (i)
                cmr_buf_putc(sb, ',');
            if (canon(sb, branch, ns, err, errlen) != 0)
                return -1;
        }
        cmr_buf_putc(sb, ']');
        return 0;
    }
    if (!json_is_object(node)) {
        snprintf(err, errlen, "schema node is neither string, array nor object");
        return -1;
    }
    json_t *type = json_object_get(node, "type");
    if (!json_is_string(type)) /* {"type": {...}} or {"type": [...]} */
        return type ? canon(sb, type, ns, err, errlen) : (snprintf(err, errlen, "object without type"), -1);
    const char *t = json_string_value(type);
    if (is_primitive(t)) {
        put_json_string(sb, t);
        return 0;
    }
    if (strcmp(t, "record") == 0 || strcmp(t, "error") == 0 || strcmp(t, "enum") == 0 || strcmp(t, "fixed") == 0)
        return canon_named(sb, node, t, ns, err, errlen);
    if (strcmp(t, "array") == 0 || strcmp(t, "map") == 0) {
        const char *attr = t[0] == 'a' ? "items" : "values";
        json_t *inner = json_object_get(node, attr);
        if (!inner) {
            snprintf(err, errlen, "%s without %s", t, attr);
            return -1;
        }
        cmr_buf_printf(sb, "{\"type\":\"%s\",\"%s\":", t, attr);
        if (canon(sb, inner, ns, err, errlen) != 0)
            return -1;
        cmr_buf_putc(sb, '}');
        return 0;
    }
    /* A reference to a named type written as {"type": "Name"}. */
    return canon(sb, type, ns, err, errlen);
}

char *cmr_wire_canonical_form(const char *schema_json, char *errbuf, size_t errlen)
{
    char scratch[1];
    if (!errbuf) {
        errbuf = scratch;
        errlen = sizeof scratch;
    }
    json_error_t jerr;
    json_t *root = json_loads(schema_json, JSON_DECODE_ANY, &jerr);
    if (!root) {
        snprintf(errbuf, errlen, "schema JSON, line %d: %s", jerr.line, jerr.text);
        return NULL;
    }
    cmr_buf_t sb = {0};
    int rc = canon(&sb, root, "", errbuf, errlen);
    json_decref(root);
    if (rc != 0 || sb.oom) {
        if (sb.oom)
            snprintf(errbuf, errlen, "out of memory");
        cmr_buf_free(&sb);
        return NULL;
    }
    return cmr_buf_take(&sb);
}

/*
 * msg_defaults.c - field defaults of the current schemas, for records of past versions.
 *
 * On first use every compiled-in schema text (cmr_schema_texts) is parsed with jansson and
 * each named record's "fields" array is remembered by the record's short name, the name
 * the C tables (msg_desc.c) use. A default is then applied to a C field by its type:
 *
 *   int, long, double, boolean   a JSON number or boolean, range-checked
 *   enum                         the symbol, looked up in the C table's symbols
 *   string / bytes               a JSON string (bytes: code points below 128 only)
 *   ["null", ...]                null (Avro: a union's default is of its first branch)
 *   record                       an object; its missing members take their own defaults
 *   array, map                   an array or object of the above
 *
 * A fixed has no usable default here; a past version that lacks such a field is refused
 * when the codec loads it (msg_codec.c, past_load), not when a message arrives.
 *
 * Ownership: the parsed JSON lives for the process (read-only after the pthread_once).
 * What a default allocates (strings, arrays, records) belongs to the struct it fills.
 */
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cmr/log.h"
#include "msg_defaults.h"

#define DEFAULTS_MAX_RECORDS 128

static struct {
    int type;             /* the message type whose schema defines it */
    const char *name;     /* short record name, inside the JSON below */
    const json_t *fields; /* the record's "fields" array */
} known[DEFAULTS_MAX_RECORDS];
static size_t known_count;
static json_t *docs[CMR_MSG__COUNT];
static pthread_once_t defaults_once = PTHREAD_ONCE_INIT;

static const char *short_name(const char *name)
{
    const char *dot = strrchr(name, '.');
    return dot ? dot + 1 : name;
}

/* Remembers every record defined inside a schema's JSON (types nest in fields, arrays,
 * maps and unions). */
static void collect_records(int t, const json_t *type)
{
    if (json_is_array(type)) { /* a union */
        size_t i;
        const json_t *branch;
        json_array_foreach(type, i, branch)
        {
            collect_records(t, branch);
        }
        return;
    }
    if (!json_is_object(type))
        return; /* a primitive or a reference by name */
    const char *kind = json_string_value(json_object_get(type, "type"));
    if (!kind)
        return;
    if (strcmp(kind, "record") == 0) {
        const char *name = json_string_value(json_object_get(type, "name"));
        const json_t *fields = json_object_get(type, "fields");
        if (name && json_is_array(fields) && known_count < DEFAULTS_MAX_RECORDS) {
            known[known_count].type = t;
            known[known_count].name = short_name(name);
            known[known_count].fields = fields;
            known_count++;
        } else if (name && known_count >= DEFAULTS_MAX_RECORDS) {
            cmr_log(CMR_LOG_ERROR, "wire.defaults_full", "record=%s max=%d", name, DEFAULTS_MAX_RECORDS);
        }
        size_t i;
        const json_t *field;
        json_array_foreach(fields, i, field)
        {
            collect_records(t, json_object_get(field, "type"));
        }
    } else if (strcmp(kind, "array") == 0) {
        collect_records(t, json_object_get(type, "items"));
    } else if (strcmp(kind, "map") == 0) {
        collect_records(t, json_object_get(type, "values"));
    }
}

static void defaults_load(void)
{
    for (int t = 0; t < CMR_MSG__COUNT; t++) {
        json_error_t err;
        docs[t] = json_loads(cmr_schema_texts[t], 0, &err);
        if (!docs[t]) {
            cmr_log(CMR_LOG_ERROR, "wire.defaults_unreadable", "schema=%d line=%d error=\"%s\"", t, err.line, err.text);
            continue;
        }
        collect_records(t, docs[t]);
    }
}

/* The "default" of field `name` of record `record` in the schema of message type `t`
 * (two schemas may each define a record of the same name); NULL when it has none. */
static const json_t *field_default(int t, const char *record, const char *name)
{
    for (size_t r = 0; r < known_count; r++) {
        if (known[r].type != t || strcmp(known[r].name, record) != 0)
            continue;
        size_t i;
        const json_t *field;
        json_array_foreach(known[r].fields, i, field)
        {
            const char *fname = json_string_value(json_object_get(field, "name"));
            if (fname && strcmp(fname, name) == 0)
                return json_object_get(field, "default");
        }
        return NULL;
    }
    return NULL;
}

/* Says why in `why` (may be NULL) and returns -1. */
__attribute__((format(printf, 3, 4))) static int fail(char *why, size_t whylen, const char *fmt, ...)
{
    if (why && whylen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, whylen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static int apply_record(int t, const cmr_record_desc_t *d, const json_t *obj, char *dst, char *why, size_t whylen);

static int apply_string(const json_t *v, char **out)
{
    *out = strdup(json_string_value(v));
    return *out ? 0 : -1;
}

static int apply_value(int t, const cmr_field_desc_t *f, const json_t *v, char *p, char *why, size_t whylen)
{
    switch (f->type) {
    case CMR_F_INT:
        if (!json_is_integer(v) || json_integer_value(v) < INT32_MIN || json_integer_value(v) > INT32_MAX)
            break;
        *(int32_t *)p = (int32_t)json_integer_value(v);
        return 0;
    case CMR_F_LONG:
        if (!json_is_integer(v))
            break;
        *(int64_t *)p = (int64_t)json_integer_value(v);
        return 0;
    case CMR_F_DOUBLE:
        if (!json_is_number(v))
            break;
        *(double *)p = json_number_value(v);
        return 0;
    case CMR_F_BOOL:
        if (!json_is_boolean(v))
            break;
        *(bool *)p = json_is_true(v);
        return 0;
    case CMR_F_ENUM:
        for (int i = 0; json_is_string(v) && f->symbols[i]; i++) {
            if (strcmp(f->symbols[i], json_string_value(v)) == 0) {
                *(int *)p = i;
                return 0;
            }
        }
        break;
    case CMR_F_STRING:
        if (!json_is_string(v))
            break;
        return apply_string(v, (char **)p);
    case CMR_F_OPT_STRING:
    case CMR_F_OPT_RECORD:
        if (!json_is_null(v))
            break;
        *(void **)p = NULL;
        return 0;
    case CMR_F_BYTES: {
        const char *s = json_string_value(v);
        size_t n = s ? strlen(s) : 0;
        for (size_t i = 0; s && i < n; i++)
            if ((unsigned char)s[i] >= 0x80)
                s = NULL;
        if (!s)
            break;
        cmr_bytes_t *b = (cmr_bytes_t *)p;
        if (!(b->data = malloc(n ? n : 1)))
            return -1;
        memcpy(b->data, s, n);
        b->len = n;
        return 0;
    }
    case CMR_F_RECORD: return apply_record(t, f->rec, v, p, why, whylen);
    case CMR_F_STRINGS: {
        cmr_strings_t *a = (cmr_strings_t *)p;
        size_t n = json_array_size(v);
        if (!json_is_array(v) || !(a->items = calloc(n ? n : 1, sizeof(char *))))
            break;
        a->count = n;
        for (size_t i = 0; i < n; i++)
            if (!json_is_string(json_array_get(v, i)) || apply_string(json_array_get(v, i), &a->items[i]) != 0)
                return fail(why, whylen, "field %s: default item %zu is not a string", f->name, i);
        return 0;
    }
    case CMR_F_MAP: {
        cmr_kvs_t *m = (cmr_kvs_t *)p;
        size_t n = json_object_size(v), i = 0;
        const char *key;
        const json_t *val;
        if (!json_is_object(v) || !(m->items = calloc(n ? n : 1, sizeof(cmr_kv_t))))
            break;
        m->count = n;
        json_object_foreach((json_t *)v, key, val)
        {
            if (!json_is_string(val) || !(m->items[i].key = strdup(key)) || apply_string(val, &m->items[i].value))
                return fail(why, whylen, "field %s: default value of %s is not a string", f->name, key);
            i++;
        }
        return 0;
    }
    case CMR_F_RECORDS: {
        cmr_array_any_t *a = (cmr_array_any_t *)p;
        size_t n = json_array_size(v);
        if (!json_is_array(v) || !(a->items = calloc(n ? n : 1, f->rec->size)))
            break;
        a->count = n;
        for (size_t i = 0; i < n; i++)
            if (apply_record(t, f->rec, json_array_get(v, i), (char *)a->items + i * f->rec->size, why, whylen) != 0)
                return -1;
        return 0;
    }
    case CMR_F_FIXED16: break;
    }
    return fail(why, whylen, "field %s: no usable default in the current schema", f->name);
}

/* Fills record `d` from a JSON object: members it has, the fields' own defaults for the
 * others (Avro: a record's default need not list fields that have defaults). */
static int apply_record(int t, const cmr_record_desc_t *d, const json_t *obj, char *dst, char *why, size_t whylen)
{
    if (!json_is_object(obj))
        return fail(why, whylen, "record %s: default is not an object", d->name);
    for (size_t i = 0; i < d->nfields; i++) {
        const cmr_field_desc_t *f = &d->fields[i];
        const json_t *v = json_object_get(obj, f->name);
        if (!v)
            v = field_default(t, d->name, f->name);
        if (!v)
            return fail(why, whylen, "field %s.%s has no default", d->name, f->name);
        if (apply_value(t, f, v, dst + f->offset, why, whylen) != 0)
            return -1;
    }
    return 0;
}

int cmr_wire_default_apply(cmr_msg_type_t type, const cmr_record_desc_t *d, const cmr_field_desc_t *f, void *dst,
                           char *why, size_t whylen)
{
    pthread_once(&defaults_once, defaults_load);
    const json_t *v = field_default((int)type, d->name, f->name);
    if (!v)
        return fail(why, whylen, "field %s.%s is not in the message and has no default in the current schema", d->name,
                    f->name);
    return apply_value((int)type, f, v, dst, why, whylen);
}

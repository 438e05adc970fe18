/*
 * msg_codec.c - C structs <-> Avro single-object encoded messages, through avro-c.
 *
 * Encoding fills an avro-c generic value from the struct (walking the field table of
 * msg_desc.c) and writes it after the 10-byte header. Decoding checks the header, lets
 * msg_validate.c walk the body against the schema with bounds checks, has avro-c read the
 * body into a generic value, and copies it into a freshly allocated struct.
 *
 * Past versions. schemas/past/ holds older versions of some schemas (docs/ARCHITECTURE.md,
 * "Schema versions"). They are parsed on the first message whose fingerprint is not a
 * current one (so a process that only meets current messages never pays for them), each
 * checked once to be readable as the current struct: every field of the C table is in the
 * old schema with the same shape (an enum's old symbols a prefix of the new ones), or has
 * a default in the current schema. A message of a past version is validated against its
 * own schema, read by field name, and the fields it lacks take their defaults
 * (msg_defaults.c); the caller gets the current struct and type.
 *
 * Thread safety: after cmr_wire_init() (run once, under pthread_once) the schemas and
 * value interfaces are read-only; each call creates its own generic value. The past
 * versions are loaded under a pthread_once of their own and are read-only afterwards.
 */
#include <assert.h>
#include <avro.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/log.h"
#include "cmr/wire.h"
#include "msg_defaults.h"
#include "msg_desc.h"
#include "msg_validate.h"
#include "cmr/json.h"

static const uint8_t wire_magic[2] = {0xC3, 0x01};

static struct {
    avro_schema_t schema;
    avro_value_iface_t *iface;
    uint64_t fingerprint;
} wire_types[CMR_MSG__COUNT];

/* Past versions (schemas/past/), loaded on first need: past_load(). */
typedef struct wire_past {
    cmr_msg_type_t type; /* the current type a message of this version decodes into */
    avro_schema_t schema;
    avro_value_iface_t *iface;
    uint64_t fingerprint;
} wire_past_t;
static wire_past_t *wire_past;
static size_t wire_past_count;
static int wire_past_rc = -1;
static pthread_once_t wire_past_once = PTHREAD_ONCE_INIT;
static _Atomic uint64_t wire_past_reads;

static pthread_once_t wire_once = PTHREAD_ONCE_INIT;
static int wire_init_rc = -1;
static _Atomic size_t wire_max_message = CMR_WIRE_DEFAULT_MAX_MESSAGE;
static _Atomic uint64_t wire_rejects[CMR_WIRE_ERR__COUNT];

static const char *const wire_errors[CMR_WIRE_ERR__COUNT] = {
    [CMR_WIRE_OK] = "ok",
    [CMR_WIRE_ERR_TRUNCATED] = "truncated message",
    [CMR_WIRE_ERR_BAD_MAGIC] = "not an Avro single-object message (bad magic)",
    [CMR_WIRE_ERR_UNKNOWN_FINGERPRINT] = "unknown schema fingerprint",
    [CMR_WIRE_ERR_OVERSIZED] = "message larger than the configured maximum",
    [CMR_WIRE_ERR_CORRUPT] = "message body does not match its schema",
    [CMR_WIRE_ERR_TRAILING] = "trailing bytes after the message body",
    [CMR_WIRE_ERR_INVALID] = "message violates its schema",
    [CMR_WIRE_ERR_INTERNAL] = "internal Avro error",
};

const char *cmr_wire_err_name(cmr_wire_err_t err)
{
    static const char *const names[CMR_WIRE_ERR__COUNT] = {
        [CMR_WIRE_OK] = "ok",
        [CMR_WIRE_ERR_TRUNCATED] = "truncated",
        [CMR_WIRE_ERR_BAD_MAGIC] = "bad_magic",
        [CMR_WIRE_ERR_UNKNOWN_FINGERPRINT] = "unknown_schema",
        [CMR_WIRE_ERR_OVERSIZED] = "oversized",
        [CMR_WIRE_ERR_CORRUPT] = "corrupt",
        [CMR_WIRE_ERR_TRAILING] = "trailing_bytes",
        [CMR_WIRE_ERR_INVALID] = "invalid",
        [CMR_WIRE_ERR_INTERNAL] = "internal",
    };
    return (unsigned)err < CMR_WIRE_ERR__COUNT ? names[err] : "unknown";
}

const char *cmr_wire_strerror(cmr_wire_err_t err)
{
    return (unsigned)err < CMR_WIRE_ERR__COUNT ? wire_errors[err] : "unknown error";
}

#define ERRF(...)                                  \
    do {                                           \
        if (errbuf && errlen)                      \
            snprintf(errbuf, errlen, __VA_ARGS__); \
    } while (0)

/* --- start-up: schemas, fingerprints, table check ---------------------------------- */

static avro_schema_t schema_resolve(avro_schema_t s)
{
    while (s && avro_typeof(s) == AVRO_LINK)
        s = avro_schema_link_target(s);
    return s;
}

/* Does the schema of one field have the shape the C table expects? `past` is -1 for a
 * current schema (exact match), or the message type of a past version being checked
 * (fields by name, missing ones must have a default; see the top of this file). */
static int field_matches(const cmr_field_desc_t *f, avro_schema_t s, int past, char *why, size_t whylen);

/* The index of field `name` in record schema `s`, or -1. */
static int schema_field_index(avro_schema_t s, const char *name)
{
    for (size_t i = 0; i < avro_schema_record_size(s); i++)
        if (strcmp(avro_schema_record_field_name(s, (int)i), name) == 0)
            return (int)i;
    return -1;
}

/* A past version lacks field f of record d: can its current default be applied? Tried
 * on a scratch struct. */
static int default_applies(int past, const cmr_record_desc_t *d, const cmr_field_desc_t *f, char *why, size_t whylen)
{
    char *scratch = calloc(1, d->size);
    if (!scratch) {
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    int rc = cmr_wire_default_apply((cmr_msg_type_t)past, d, f, scratch + f->offset, why, whylen);
    cmr_wire_record_free(d, scratch);
    free(scratch);
    return rc;
}

static int past_record_matches(const cmr_record_desc_t *d, avro_schema_t s, int past, char *why, size_t whylen)
{
    for (size_t i = 0; i < d->nfields; i++) {
        int w = schema_field_index(s, d->fields[i].name);
        int rc = w < 0 ? default_applies(past, d, &d->fields[i], why, whylen)
                       : field_matches(&d->fields[i], avro_schema_record_field_get_by_index(s, w), past, why, whylen);
        if (rc != 0)
            return -1;
    }
    return 0;
}

static int record_matches(const cmr_record_desc_t *d, avro_schema_t s, int past, char *why, size_t whylen)
{
    s = schema_resolve(s);
    if (!is_avro_record(s) || strcmp(avro_schema_name(s), d->name) != 0) {
        snprintf(why, whylen, "%s: schema is not record %s", d->name, d->name);
        return -1;
    }
    if (past >= 0)
        return past_record_matches(d, s, past, why, whylen);
    if (avro_schema_record_size(s) != d->nfields) {
        snprintf(why, whylen, "%s: schema has %zu fields, the C table %zu", d->name, avro_schema_record_size(s),
                 d->nfields);
        return -1;
    }
    for (size_t i = 0; i < d->nfields; i++) {
        const char *name = avro_schema_record_field_name(s, (int)i);
        if (strcmp(name, d->fields[i].name) != 0) {
            snprintf(why, whylen, "%s: field %zu is %s in the schema, %s in the C table", d->name, i, name,
                     d->fields[i].name);
            return -1;
        }
        if (field_matches(&d->fields[i], avro_schema_record_field_get_by_index(s, (int)i), past, why, whylen) != 0)
            return -1;
    }
    return 0;
}

static bool is_null_or(avro_schema_t s, avro_type_t other, avro_schema_t *branch)
{
    s = schema_resolve(s);
    if (!is_avro_union(s) || avro_schema_union_size(s) != 2)
        return false;
    avro_schema_t b0 = schema_resolve(avro_schema_union_branch(s, 0));
    avro_schema_t b1 = schema_resolve(avro_schema_union_branch(s, 1));
    if (!is_avro_null(b0) || avro_typeof(b1) != other)
        return false;
    *branch = b1;
    return true;
}

/* Are the enum's symbols those of the C table (a past version: its first ones)? */
static bool enum_matches(const cmr_field_desc_t *f, avro_schema_t s, int past)
{
    int n = avro_schema_enum_number_of_symbols(s), known = 0;
    while (f->symbols[known])
        known++;
    if (past < 0 ? n != known : n > known)
        return false;
    for (int i = 0; i < n; i++)
        if (!avro_schema_enum_get(s, i) || strcmp(avro_schema_enum_get(s, i), f->symbols[i]) != 0)
            return false;
    return true;
}

static int field_matches(const cmr_field_desc_t *f, avro_schema_t s, int past, char *why, size_t whylen)
{
    s = schema_resolve(s);
    avro_schema_t inner = NULL;
    bool ok;
    switch (f->type) {
    case CMR_F_INT: ok = is_avro_int32(s); break;
    case CMR_F_LONG: ok = is_avro_int64(s); break;
    case CMR_F_DOUBLE: ok = is_avro_double(s); break;
    case CMR_F_BOOL: ok = is_avro_boolean(s); break;
    case CMR_F_ENUM: ok = is_avro_enum(s) && enum_matches(f, s, past); break;
    case CMR_F_STRING: ok = is_avro_string(s); break;
    case CMR_F_BYTES: ok = is_avro_bytes(s); break;
    case CMR_F_FIXED16: ok = is_avro_fixed(s) && avro_schema_fixed_size(s) == 16; break;
    case CMR_F_OPT_STRING: ok = is_null_or(s, AVRO_STRING, &inner); break;
    case CMR_F_RECORD: return record_matches(f->rec, s, past, why, whylen);
    case CMR_F_OPT_RECORD:
        ok = is_null_or(s, AVRO_RECORD, &inner);
        return ok ? record_matches(f->rec, inner, past, why, whylen)
                  : (snprintf(why, whylen, "field %s: expected [null, record]", f->name), -1);
    case CMR_F_STRINGS: ok = is_avro_array(s) && is_avro_string(schema_resolve(avro_schema_array_items(s))); break;
    case CMR_F_MAP: ok = is_avro_map(s) && is_avro_string(schema_resolve(avro_schema_map_values(s))); break;
    case CMR_F_RECORDS:
        if (!is_avro_array(s)) {
            ok = false;
            break;
        }
        return record_matches(f->rec, avro_schema_array_items(s), past, why, whylen);
    default: /* the descriptor tables (msg_desc.c) use only the types above */
        assert(!"field type outside cmr_field_type_t");
        ok = false;
    }
    if (!ok)
        snprintf(why, whylen, "field %s: schema type %s does not fit the C table", f->name, avro_schema_type_name(s));
    return ok ? 0 : -1;
}

static void wire_init_once(void)
{
    for (int t = 0; t < CMR_MSG__COUNT; t++) {
        const char *text = cmr_schema_texts[t];
        char why[256];
        if (avro_schema_from_json_length(text, strlen(text), &wire_types[t].schema) != 0) {
            cmr_log(CMR_LOG_ERROR, "wire.schema_invalid", "type=%s error=\"%s\"", cmr_msg_descs[t]->name,
                    avro_strerror());
            return;
        }
        if (record_matches(cmr_msg_descs[t], wire_types[t].schema, -1, why, sizeof why) != 0) {
            cmr_log(CMR_LOG_ERROR, "wire.schema_mismatch", "error=\"%s\"", why);
            return;
        }
        char *canonical = cmr_wire_canonical_form(text, why, sizeof why);
        if (!canonical) {
            cmr_log(CMR_LOG_ERROR, "wire.schema_invalid", "type=%s error=\"%s\"", cmr_msg_descs[t]->name, why);
            return;
        }
        wire_types[t].fingerprint = cmr_wire_crc64_avro(canonical, strlen(canonical));
        free(canonical);
        wire_types[t].iface = avro_generic_class_from_schema(wire_types[t].schema);
        if (!wire_types[t].iface) {
            cmr_log(CMR_LOG_ERROR, "wire.schema_invalid", "type=%s error=\"%s\"", cmr_msg_descs[t]->name,
                    avro_strerror());
            return;
        }
    }
    wire_init_rc = 0;
}

int cmr_wire_init(void)
{
    pthread_once(&wire_once, wire_init_once);
    return wire_init_rc;
}

/* Parses one past version and checks that it reads as the current struct of its type.
 * 0 and *out filled, or -1 with `why`. */
static int past_load_one(const char *text, wire_past_t *out, char *why, size_t whylen)
{
    char *canonical = NULL;
    memset(out, 0, sizeof *out);
    if (avro_schema_from_json_length(text, strlen(text), &out->schema) != 0) {
        snprintf(why, whylen, "avro: %s", avro_strerror());
        return -1;
    }
    int type = is_avro_record(out->schema) ? cmr_msg_type_by_name(avro_schema_name(out->schema)) : -1;
    int rc = -1;
    if (type < 0) {
        snprintf(why, whylen, "not the record of a current message type");
    } else if (!(canonical = cmr_wire_canonical_form(text, why, whylen))) {
        /* why filled */
    } else if ((out->fingerprint = cmr_wire_crc64_avro(canonical, strlen(canonical))) == wire_types[type].fingerprint) {
        snprintf(why, whylen, "%s: the same as the current schema", cmr_msg_descs[type]->name);
    } else if (record_matches(cmr_msg_descs[type], out->schema, type, why, whylen) != 0) {
        /* why filled */
    } else if (!(out->iface = avro_generic_class_from_schema(out->schema))) {
        snprintf(why, whylen, "avro: %s", avro_strerror());
    } else {
        out->type = (cmr_msg_type_t)type;
        rc = 0;
    }
    free(canonical);
    if (rc != 0)
        avro_schema_decref(out->schema);
    return rc;
}

static void past_load(void)
{
    if (cmr_wire_init() != 0 || !(wire_past = calloc(cmr_past_schema_count + 1, sizeof *wire_past)))
        return;
    int rc = 0;
    for (size_t i = 0; i < cmr_past_schema_count; i++) {
        char why[256];
        wire_past_t *p = &wire_past[wire_past_count];
        if (past_load_one(cmr_past_schema_texts[i], p, why, sizeof why) != 0) {
            cmr_log(CMR_LOG_ERROR, "wire.past_schema_refused", "index=%zu error=\"%s\"", i, why);
            rc = -1;
            continue;
        }
        bool twice = false;
        for (size_t j = 0; j < wire_past_count; j++)
            twice = twice || wire_past[j].fingerprint == p->fingerprint;
        if (twice) {
            cmr_log(CMR_LOG_ERROR, "wire.past_schema_refused", "index=%zu error=\"fingerprint %016llx twice\"", i,
                    (unsigned long long)p->fingerprint);
            avro_value_iface_decref(p->iface);
            avro_schema_decref(p->schema);
            rc = -1;
            continue;
        }
        wire_past_count++;
    }
    wire_past_rc = rc;
}

int cmr_wire_past_init(void)
{
    pthread_once(&wire_past_once, past_load);
    return wire_past_rc;
}

size_t cmr_wire_past_count(void)
{
    cmr_wire_past_init();
    return wire_past_count;
}

int cmr_wire_past_version(size_t i, cmr_msg_type_t *type, uint64_t *fingerprint)
{
    if (i >= cmr_wire_past_count())
        return -1;
    *type = wire_past[i].type;
    *fingerprint = wire_past[i].fingerprint;
    return 0;
}

uint64_t cmr_wire_past_reads(void)
{
    return wire_past_reads;
}

const char *cmr_msg_type_name(cmr_msg_type_t type)
{
    return (unsigned)type < CMR_MSG__COUNT ? cmr_msg_descs[type]->name : "Unknown";
}

int cmr_msg_type_by_name(const char *name)
{
    for (int t = 0; t < CMR_MSG__COUNT; t++)
        if (strcmp(cmr_msg_descs[t]->name, name) == 0)
            return t;
    return -1;
}

const char *cmr_msg_schema_json(cmr_msg_type_t type)
{
    return (unsigned)type < CMR_MSG__COUNT ? cmr_schema_texts[type] : NULL;
}

uint64_t cmr_msg_fingerprint(cmr_msg_type_t type)
{
    if (cmr_wire_init() != 0 || (unsigned)type >= CMR_MSG__COUNT)
        return 0;
    return wire_types[type].fingerprint;
}

void cmr_wire_set_max_message(size_t max_bytes)
{
    wire_max_message = max_bytes ? max_bytes : CMR_WIRE_DEFAULT_MAX_MESSAGE;
}

size_t cmr_wire_max_message(void)
{
    return wire_max_message;
}

uint64_t cmr_wire_rejected(cmr_wire_err_t reason)
{
    return (unsigned)reason < CMR_WIRE_ERR__COUNT ? wire_rejects[reason] : 0;
}

uint64_t cmr_wire_rejected_total(void)
{
    uint64_t n = 0;
    for (int i = 1; i < CMR_WIRE_ERR__COUNT; i++)
        n += wire_rejects[i];
    return n;
}

/* --- encode: struct -> generic value ----------------------------------------------- */

#define AV_CHECK(call)                    \
    do {                                  \
        if ((call) != 0)                  \
            return CMR_WIRE_ERR_INTERNAL; \
    } while (0)

static cmr_wire_err_t fill_record(const cmr_record_desc_t *d, const void *src, avro_value_t *rec, char *errbuf,
                                  size_t errlen);

static cmr_wire_err_t fill_string(avro_value_t *v, const char *s, const char *field, char *errbuf, size_t errlen)
{
    if (!s) {
        ERRF("field %s is NULL but the schema requires a string", field);
        return CMR_WIRE_ERR_INVALID;
    }
    AV_CHECK(avro_value_set_string_len(v, s, strlen(s) + 1));
    return CMR_WIRE_OK;
}

static cmr_wire_err_t fill_field(const cmr_field_desc_t *f, const char *p, avro_value_t *v, char *errbuf, size_t errlen)
{
    avro_value_t branch, elem;
    cmr_wire_err_t rc;
    switch (f->type) {
    case CMR_F_INT: AV_CHECK(avro_value_set_int(v, *(const int32_t *)p)); return CMR_WIRE_OK;
    case CMR_F_LONG: AV_CHECK(avro_value_set_long(v, *(const int64_t *)p)); return CMR_WIRE_OK;
    case CMR_F_DOUBLE: AV_CHECK(avro_value_set_double(v, *(const double *)p)); return CMR_WIRE_OK;
    case CMR_F_BOOL: AV_CHECK(avro_value_set_boolean(v, *(const bool *)p)); return CMR_WIRE_OK;
    case CMR_F_ENUM: {
        int sym = *(const int *)p;
        int nsym = avro_schema_enum_number_of_symbols(schema_resolve(avro_value_get_schema(v)));
        if (sym < 0 || sym >= nsym) {
            ERRF("field %s: enum value %d out of range 0..%d", f->name, sym, nsym - 1);
            return CMR_WIRE_ERR_INVALID;
        }
        AV_CHECK(avro_value_set_enum(v, sym));
        return CMR_WIRE_OK;
    }
    case CMR_F_STRING: return fill_string(v, *(char *const *)p, f->name, errbuf, errlen);
    case CMR_F_OPT_STRING: {
        const char *s = *(char *const *)p;
        AV_CHECK(avro_value_set_branch(v, s ? 1 : 0, &branch));
        if (!s) {
            AV_CHECK(avro_value_set_null(&branch));
            return CMR_WIRE_OK;
        }
        return fill_string(&branch, s, f->name, errbuf, errlen);
    }
    case CMR_F_BYTES: {
        const cmr_bytes_t *b = (const cmr_bytes_t *)p;
        if (!b->data && b->len) {
            ERRF("field %s: NULL data with length %zu", f->name, b->len);
            return CMR_WIRE_ERR_INVALID;
        }
        AV_CHECK(avro_value_set_bytes(v, b->data ? (void *)b->data : (void *)"", b->len));
        return CMR_WIRE_OK;
    }
    case CMR_F_FIXED16: AV_CHECK(avro_value_set_fixed(v, (void *)p, 16)); return CMR_WIRE_OK;
    case CMR_F_RECORD: return fill_record(f->rec, p, v, errbuf, errlen);
    case CMR_F_OPT_RECORD: {
        const void *sub = *(const void *const *)p;
        AV_CHECK(avro_value_set_branch(v, sub ? 1 : 0, &branch));
        if (!sub) {
            AV_CHECK(avro_value_set_null(&branch));
            return CMR_WIRE_OK;
        }
        return fill_record(f->rec, sub, &branch, errbuf, errlen);
    }
    case CMR_F_STRINGS: {
        const cmr_strings_t *a = (const cmr_strings_t *)p;
        for (size_t i = 0; i < a->count; i++) {
            AV_CHECK(avro_value_append(v, &elem, NULL));
            if ((rc = fill_string(&elem, a->items[i], f->name, errbuf, errlen)) != CMR_WIRE_OK)
                return rc;
        }
        return CMR_WIRE_OK;
    }
    case CMR_F_MAP: {
        const cmr_kvs_t *m = (const cmr_kvs_t *)p;
        for (size_t i = 0; i < m->count; i++) {
            if (!m->items[i].key) {
                ERRF("field %s: map key %zu is NULL", f->name, i);
                return CMR_WIRE_ERR_INVALID;
            }
            AV_CHECK(avro_value_add(v, m->items[i].key, &elem, NULL, NULL));
            if ((rc = fill_string(&elem, m->items[i].value, f->name, errbuf, errlen)) != CMR_WIRE_OK)
                return rc;
        }
        return CMR_WIRE_OK;
    }
    case CMR_F_RECORDS: {
        const cmr_array_any_t *a = (const cmr_array_any_t *)p;
        if (!a->items && a->count) {
            ERRF("field %s: NULL items with count %zu", f->name, a->count);
            return CMR_WIRE_ERR_INVALID;
        }
        for (size_t i = 0; i < a->count; i++) {
            AV_CHECK(avro_value_append(v, &elem, NULL));
            rc = fill_record(f->rec, (const char *)a->items + i * f->rec->size, &elem, errbuf, errlen);
            if (rc != CMR_WIRE_OK)
                return rc;
        }
        return CMR_WIRE_OK;
    }
    }
    assert(!"field type outside cmr_field_type_t"); /* every type returns above */
    return CMR_WIRE_ERR_INTERNAL;
}

static cmr_wire_err_t fill_record(const cmr_record_desc_t *d, const void *src, avro_value_t *rec, char *errbuf,
                                  size_t errlen)
{
    for (size_t i = 0; i < d->nfields; i++) {
        avro_value_t field;
        AV_CHECK(avro_value_get_by_index(rec, i, &field, NULL));
        cmr_wire_err_t rc = fill_field(&d->fields[i], (const char *)src + d->fields[i].offset, &field, errbuf, errlen);
        if (rc != CMR_WIRE_OK)
            return rc;
    }
    return CMR_WIRE_OK;
}

/* Builds the generic value of a struct. On success *value must be released by the caller
 * with avro_value_decref(). */
static cmr_wire_err_t value_from_struct(cmr_msg_type_t type, const void *msg, avro_value_t *value, char *errbuf,
                                        size_t errlen)
{
    if (cmr_wire_init() != 0) {
        ERRF("wire contracts failed to initialize (see log)");
        return CMR_WIRE_ERR_INTERNAL;
    }
    if ((unsigned)type >= CMR_MSG__COUNT || !msg) {
        ERRF("no such message type %d", (int)type);
        return CMR_WIRE_ERR_INVALID;
    }
    if (avro_generic_value_new(wire_types[type].iface, value) != 0) {
        ERRF("avro: %s", avro_strerror());
        return CMR_WIRE_ERR_INTERNAL;
    }
    cmr_wire_err_t rc = fill_record(cmr_msg_descs[type], msg, value, errbuf, errlen);
    if (rc != CMR_WIRE_OK) {
        if (rc == CMR_WIRE_ERR_INTERNAL)
            ERRF("%s: avro: %s", cmr_msg_descs[type]->name, avro_strerror());
        avro_value_decref(value);
    }
    return rc;
}

static void put_header(uint8_t *out, uint64_t fingerprint)
{
    out[0] = wire_magic[0];
    out[1] = wire_magic[1];
    for (int i = 0; i < 8; i++)
        out[2 + i] = (uint8_t)(fingerprint >> (8 * i));
}

cmr_wire_err_t cmr_msg_encode(cmr_msg_type_t type, const void *msg, cmr_buf_t *out, char *errbuf, size_t errlen)
{
    avro_value_t value;
    cmr_wire_err_t rc = value_from_struct(type, msg, &value, errbuf, errlen);
    if (rc != CMR_WIRE_OK)
        return rc;
    size_t body = 0;
    if (avro_value_sizeof(&value, &body) != 0) {
        ERRF("avro sizeof: %s", avro_strerror());
        rc = CMR_WIRE_ERR_INTERNAL;
    } else if (body + CMR_WIRE_HEADER_SIZE > wire_max_message) {
        ERRF("%s of %zu bytes exceeds the %zu-byte maximum", cmr_msg_descs[type]->name, body + CMR_WIRE_HEADER_SIZE,
             (size_t)wire_max_message);
        rc = CMR_WIRE_ERR_OVERSIZED;
    } else {
        cmr_buf_reset(out);
        uint8_t *at = cmr_buf_append(out, body + CMR_WIRE_HEADER_SIZE);
        avro_writer_t w = NULL;
        if (!at) {
            ERRF("out of memory for %zu bytes", body + CMR_WIRE_HEADER_SIZE);
            rc = CMR_WIRE_ERR_INTERNAL;
        } else {
            put_header(at, wire_types[type].fingerprint);
            w = avro_writer_memory((const char *)at + CMR_WIRE_HEADER_SIZE, (int64_t)body);
            if (!w || avro_value_write(w, &value) != 0) {
                ERRF("avro write: %s", avro_strerror());
                rc = CMR_WIRE_ERR_INTERNAL;
            }
        }
        if (rc != CMR_WIRE_OK)
            cmr_buf_reset(out);
        if (w)
            avro_writer_free(w);
    }
    avro_value_decref(&value);
    return rc;
}

/* --- decode: generic value -> struct ----------------------------------------------- */

/* `past` is -1 for a value of the current schema (fields by index), or the message type
 * of a past version's value (fields by name, missing ones from their defaults). */
static int take_record(const cmr_record_desc_t *d, avro_value_t *rec, void *dst, int past);

static int take_string(avro_value_t *v, char **out)
{
    const char *s;
    size_t size;
    if (avro_value_get_string(v, &s, &size) != 0)
        return -1;
    size_t n = size && s[size - 1] == '\0' ? size - 1 : size;
    *out = strndup(s, n);
    return *out ? 0 : -1;
}

static int take_field(const cmr_field_desc_t *f, avro_value_t *v, char *p, int past)
{
    avro_value_t branch, elem;
    int disc, ival;
    size_t n;
    switch (f->type) {
    case CMR_F_INT: return avro_value_get_int(v, (int32_t *)p);
    case CMR_F_LONG: return avro_value_get_long(v, (int64_t *)p);
    case CMR_F_DOUBLE: return avro_value_get_double(v, (double *)p);
    case CMR_F_BOOL:
        if (avro_value_get_boolean(v, &ival) != 0)
            return -1;
        *(bool *)p = ival != 0;
        return 0;
    case CMR_F_ENUM: return avro_value_get_enum(v, (int *)p);
    case CMR_F_STRING: return take_string(v, (char **)p);
    case CMR_F_OPT_STRING:
        if (avro_value_get_discriminant(v, &disc) != 0)
            return -1;
        *(char **)p = NULL;
        if (disc == 0)
            return 0;
        return avro_value_get_current_branch(v, &branch) || take_string(&branch, (char **)p) ? -1 : 0;
    case CMR_F_BYTES: {
        const void *data;
        cmr_bytes_t *b = (cmr_bytes_t *)p;
        if (avro_value_get_bytes(v, &data, &n) != 0)
            return -1;
        b->data = malloc(n ? n : 1);
        if (!b->data)
            return -1;
        memcpy(b->data, data, n);
        b->len = n;
        return 0;
    }
    case CMR_F_FIXED16: {
        const void *data;
        if (avro_value_get_fixed(v, &data, &n) != 0 || n != 16)
            return -1;
        memcpy(p, data, 16);
        return 0;
    }
    case CMR_F_RECORD: return take_record(f->rec, v, p, past);
    case CMR_F_OPT_RECORD: {
        if (avro_value_get_discriminant(v, &disc) != 0)
            return -1;
        *(void **)p = NULL;
        if (disc == 0)
            return 0;
        void *sub = calloc(1, f->rec->size);
        if (!sub)
            return -1;
        *(void **)p = sub;
        return avro_value_get_current_branch(v, &branch) || take_record(f->rec, &branch, sub, past) ? -1 : 0;
    }
    case CMR_F_STRINGS: {
        cmr_strings_t *a = (cmr_strings_t *)p;
        if (avro_value_get_size(v, &n) != 0 || !(a->items = calloc(n ? n : 1, sizeof(char *))))
            return -1;
        a->count = n;
        for (size_t i = 0; i < n; i++)
            if (avro_value_get_by_index(v, i, &elem, NULL) || take_string(&elem, &a->items[i]))
                return -1;
        return 0;
    }
    case CMR_F_MAP: {
        cmr_kvs_t *m = (cmr_kvs_t *)p;
        const char *key;
        if (avro_value_get_size(v, &n) != 0 || !(m->items = calloc(n ? n : 1, sizeof(cmr_kv_t))))
            return -1;
        m->count = n;
        for (size_t i = 0; i < n; i++) {
            if (avro_value_get_by_index(v, i, &elem, &key) || !(m->items[i].key = strdup(key)) ||
                take_string(&elem, &m->items[i].value))
                return -1;
        }
        return 0;
    }
    case CMR_F_RECORDS: {
        cmr_array_any_t *a = (cmr_array_any_t *)p;
        if (avro_value_get_size(v, &n) != 0 || !(a->items = calloc(n ? n : 1, f->rec->size)))
            return -1;
        a->count = n;
        for (size_t i = 0; i < n; i++)
            if (avro_value_get_by_index(v, i, &elem, NULL) ||
                take_record(f->rec, &elem, (char *)a->items + i * f->rec->size, past))
                return -1;
        return 0;
    }
    }
    assert(!"field type outside cmr_field_type_t"); /* every type returns above */
    return -1;
}

static int take_record(const cmr_record_desc_t *d, avro_value_t *rec, void *dst, int past)
{
    for (size_t i = 0; i < d->nfields; i++) {
        const cmr_field_desc_t *f = &d->fields[i];
        char *at = (char *)dst + f->offset;
        /* a past version's field by name: its place in the old schema, -1 when it has none */
        int w = past < 0 ? (int)i : schema_field_index(schema_resolve(avro_value_get_schema(rec)), f->name);
        avro_value_t field;
        int rc = w < 0 ? cmr_wire_default_apply((cmr_msg_type_t)past, d, f, at, NULL, 0)
                       : avro_value_get_by_index(rec, (size_t)w, &field, NULL) || take_field(f, &field, at, past);
        if (rc != 0)
            return -1;
    }
    return 0;
}

/* --- free -------------------------------------------------------------------------- */


static void free_field(const cmr_field_desc_t *f, char *p)
{
    switch (f->type) {
    case CMR_F_STRING:
    case CMR_F_OPT_STRING: free(*(char **)p); break;
    case CMR_F_BYTES: free(((cmr_bytes_t *)p)->data); break;
    case CMR_F_RECORD: cmr_wire_record_free(f->rec, p); break;
    case CMR_F_OPT_RECORD:
        if (*(void **)p)
            cmr_wire_record_free(f->rec, *(void **)p);
        free(*(void **)p);
        break;
    case CMR_F_STRINGS: {
        cmr_strings_t *a = (cmr_strings_t *)p;
        for (size_t i = 0; a->items && i < a->count; i++)
            free(a->items[i]);
        free(a->items);
        break;
    }
    case CMR_F_MAP: {
        cmr_kvs_t *m = (cmr_kvs_t *)p;
        for (size_t i = 0; m->items && i < m->count; i++) {
            free(m->items[i].key);
            free(m->items[i].value);
        }
        free(m->items);
        break;
    }
    case CMR_F_RECORDS: {
        cmr_array_any_t *a = (cmr_array_any_t *)p;
        for (size_t i = 0; a->items && i < a->count; i++)
            cmr_wire_record_free(f->rec, (char *)a->items + i * f->rec->size);
        free(a->items);
        break;
    }
    default: break;
    }
}

void cmr_wire_record_free(const cmr_record_desc_t *d, void *p)
{
    for (size_t i = 0; i < d->nfields; i++)
        free_field(&d->fields[i], (char *)p + d->fields[i].offset);
}

void cmr_msg_body_free(cmr_msg_type_t type, void *body)
{
    if (body && (unsigned)type < CMR_MSG__COUNT) {
        cmr_wire_record_free(cmr_msg_descs[type], body);
        memset(body, 0, cmr_msg_descs[type]->size);
    }
}

void *cmr_msg_body(cmr_msg_t *msg)
{
    return &msg->u;
}

const void *cmr_msg_body_const(const cmr_msg_t *msg)
{
    return &msg->u;
}

void cmr_msg_free(cmr_msg_t *msg)
{
    if (msg)
        cmr_msg_body_free(msg->type, &msg->u);
}

/* --- decode ------------------------------------------------------------------------ */

static cmr_wire_err_t reject(cmr_wire_err_t err)
{
    if ((unsigned)err < CMR_WIRE_ERR__COUNT)
        wire_rejects[err]++;
    return err;
}

/* The schema a message's header names: a current one (past = -1), or a past version of
 * `type` (past = type; loads the past versions on first need). */
typedef struct wire_version {
    cmr_msg_type_t type;
    avro_schema_t schema;
    avro_value_iface_t *iface;
    int past;
} wire_version_t;

static cmr_wire_err_t find_version(const void *data, size_t len, wire_version_t *v, uint64_t *fp_out)
{
    const uint8_t *p = data;
    if (cmr_wire_init() != 0)
        return CMR_WIRE_ERR_INTERNAL;
    if (!p || len < CMR_WIRE_HEADER_SIZE)
        return CMR_WIRE_ERR_TRUNCATED;
    if (p[0] != wire_magic[0] || p[1] != wire_magic[1])
        return CMR_WIRE_ERR_BAD_MAGIC;
    uint64_t fp = 0;
    for (int i = 0; i < 8; i++)
        fp |= (uint64_t)p[2 + i] << (8 * i);
    *fp_out = fp;
    for (int t = 0; t < CMR_MSG__COUNT; t++) {
        if (wire_types[t].fingerprint == fp) {
            *v = (wire_version_t){(cmr_msg_type_t)t, wire_types[t].schema, wire_types[t].iface, -1};
            return CMR_WIRE_OK;
        }
    }
    cmr_wire_past_init();
    for (size_t i = 0; i < wire_past_count; i++) {
        if (wire_past[i].fingerprint == fp) {
            *v = (wire_version_t){wire_past[i].type, wire_past[i].schema, wire_past[i].iface, (int)wire_past[i].type};
            return CMR_WIRE_OK;
        }
    }
    return CMR_WIRE_ERR_UNKNOWN_FINGERPRINT;
}

cmr_wire_err_t cmr_wire_peek_type(const void *data, size_t len, cmr_msg_type_t *type)
{
    wire_version_t v;
    uint64_t fp;
    cmr_wire_err_t rc = find_version(data, len, &v, &fp);
    if (rc == CMR_WIRE_OK)
        *type = v.type;
    return rc;
}

cmr_wire_err_t cmr_msg_decode(const void *data, size_t len, cmr_msg_t *out, char *errbuf, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (len > wire_max_message) {
        ERRF("message of %zu bytes exceeds the %zu-byte maximum", len, (size_t)wire_max_message);
        return reject(CMR_WIRE_ERR_OVERSIZED);
    }
    wire_version_t v;
    uint64_t fp = 0;
    cmr_wire_err_t rc = find_version(data, len, &v, &fp);
    if (rc != CMR_WIRE_OK) {
        if (rc == CMR_WIRE_ERR_UNKNOWN_FINGERPRINT)
            ERRF("unknown schema fingerprint %016llx", (unsigned long long)fp);
        else
            ERRF("%s (%zu bytes)", cmr_wire_strerror(rc), len);
        return reject(rc);
    }
    const char *name = cmr_msg_descs[v.type]->name;
    const uint8_t *body = (const uint8_t *)data + CMR_WIRE_HEADER_SIZE;
    size_t body_len = len - CMR_WIRE_HEADER_SIZE;
    size_t used = 0;
    rc = cmr_wire_validate(v.schema, body, body_len, &used, errbuf, errlen);
    if (rc == CMR_WIRE_OK && used != body_len) {
        ERRF("%s: %zu trailing bytes after the body", name, body_len - used);
        rc = CMR_WIRE_ERR_TRAILING;
    }
    if (rc != CMR_WIRE_OK)
        return reject(rc);

    avro_value_t value;
    if (avro_generic_value_new(v.iface, &value) != 0) {
        ERRF("avro: %s", avro_strerror());
        return reject(CMR_WIRE_ERR_INTERNAL);
    }
    avro_reader_t r = avro_reader_memory((const char *)body, (int64_t)body_len);
    if (!r || avro_value_read(r, &value) != 0) {
        ERRF("%s: avro read: %s", name, avro_strerror());
        rc = CMR_WIRE_ERR_CORRUPT;
    } else {
        out->type = v.type;
        if (take_record(cmr_msg_descs[v.type], &value, &out->u, v.past) != 0) {
            ERRF("%s: out of memory or avro error: %s", name, avro_strerror());
            cmr_msg_free(out);
            rc = CMR_WIRE_ERR_INTERNAL;
        } else if (v.past >= 0) {
            wire_past_reads++;
        }
    }
    if (r)
        avro_reader_free(r);
    avro_value_decref(&value);
    return rc == CMR_WIRE_OK ? CMR_WIRE_OK : reject(rc);
}

/* --- JSON rendering (for tools and logs) ------------------------------------------- */

static json_t *json_record(const cmr_record_desc_t *d, const void *p);

static json_t *json_field(const cmr_field_desc_t *f, const char *p)
{
    switch (f->type) {
    case CMR_F_INT: return json_integer(*(const int32_t *)p);
    case CMR_F_LONG: return json_integer(*(const int64_t *)p);
    case CMR_F_DOUBLE: return json_real(*(const double *)p);
    case CMR_F_BOOL: return json_boolean(*(const bool *)p);
    case CMR_F_ENUM: {
        int sym = *(const int *)p, n = 0;
        while (f->symbols[n])
            n++;
        return sym >= 0 && sym < n ? json_string(f->symbols[sym]) : json_integer(sym);
    }
    case CMR_F_STRING:
    case CMR_F_OPT_STRING: return cmr_json_str(*(char *const *)p);
    case CMR_F_BYTES: {
        const cmr_bytes_t *b = (const cmr_bytes_t *)p;
        return json_pack("{s:I,s:o}", "length", (json_int_t)b->len, "head",
                         cmr_json_hex(b->data, b->len < 16 ? b->len : 16));
    }
    case CMR_F_FIXED16: return cmr_json_hex(p, 16);
    case CMR_F_RECORD: return json_record(f->rec, p);
    case CMR_F_OPT_RECORD: return *(void *const *)p ? json_record(f->rec, *(void *const *)p) : json_null();
    case CMR_F_STRINGS: {
        const cmr_strings_t *a = (const cmr_strings_t *)p;
        json_t *arr = json_array();
        for (size_t i = 0; arr && i < a->count; i++)
            json_array_append_new(arr, cmr_json_str(a->items[i] ? a->items[i] : ""));
        return arr;
    }
    case CMR_F_MAP: {
        const cmr_kvs_t *m = (const cmr_kvs_t *)p;
        json_t *obj = json_object();
        for (size_t i = 0; obj && i < m->count; i++) {
            json_t *key = cmr_json_str(m->items[i].key ? m->items[i].key : "");
            if (key)
                json_object_set_new(obj, json_string_value(key),
                                    cmr_json_str(m->items[i].value ? m->items[i].value : ""));
            json_decref(key);
        }
        return obj;
    }
    case CMR_F_RECORDS: {
        const cmr_array_any_t *a = (const cmr_array_any_t *)p;
        json_t *arr = json_array();
        for (size_t i = 0; arr && i < a->count; i++)
            json_array_append_new(arr, json_record(f->rec, (const char *)a->items + i * f->rec->size));
        return arr;
    }
    }
    return json_null();
}

static json_t *json_record(const cmr_record_desc_t *d, const void *p)
{
    json_t *obj = json_object();
    for (size_t i = 0; obj && i < d->nfields; i++)
        json_object_set_new(obj, d->fields[i].name, json_field(&d->fields[i], (const char *)p + d->fields[i].offset));
    return obj;
}

char *cmr_msg_to_json(const cmr_msg_t *msg)
{
    if (!msg || (unsigned)msg->type >= CMR_MSG__COUNT)
        return NULL;
    json_t *doc = json_pack("{s:s,s:o}", "type", cmr_msg_descs[msg->type]->name, "body",
                            json_record(cmr_msg_descs[msg->type], &msg->u));
    return cmr_json_take(doc, CMR_JSON_COMPACT);
}

/*
 * msg_desc.h - field tables that tie each C struct of msg.h to its Avro schema (internal).
 *
 * The codec walks these tables instead of carrying one hand-written encoder and decoder
 * per message. A table lists the record's fields in schema order with the C type that
 * holds each; cmr_wire_init() checks every table against its parsed schema (names,
 * order, kinds) and refuses to run if they differ.
 */
#ifndef CMR_MSG_DESC_H
#define CMR_MSG_DESC_H

#include <stddef.h>

#include "cmr/msg.h"

typedef enum cmr_ftype {
    CMR_F_INT,        /* int32_t            <- "int"                         */
    CMR_F_DOUBLE,     /* double             <- "double"                      */
    CMR_F_LONG,       /* int64_t            <- "long"                        */
    CMR_F_BOOL,       /* bool               <- "boolean"                     */
    CMR_F_ENUM,       /* C enum (int)       <- enum                          */
    CMR_F_STRING,     /* char *, never NULL <- "string"                      */
    CMR_F_OPT_STRING, /* char * or NULL     <- ["null","string"]             */
    CMR_F_BYTES,      /* cmr_bytes_t        <- "bytes"                       */
    CMR_F_FIXED16,    /* uint8_t[16]        <- fixed of size 16              */
    CMR_F_RECORD,     /* inline struct      <- record                        */
    CMR_F_OPT_RECORD, /* struct * or NULL   <- ["null", record]              */
    CMR_F_STRINGS,    /* cmr_strings_t      <- array of string               */
    CMR_F_RECORDS,    /* {T *items; size_t count} <- array of record         */
    CMR_F_MAP,        /* cmr_kvs_t          <- map of string                 */
} cmr_ftype_t;

struct cmr_record_desc;

typedef struct cmr_field_desc {
    const char *name;
    cmr_ftype_t type;
    size_t offset;
    const struct cmr_record_desc *rec; /* RECORD, OPT_RECORD, RECORDS */
    const char *const *symbols;        /* ENUM: the C enum's names in value order, NULL-ended */
} cmr_field_desc_t;

typedef struct cmr_record_desc {
    const char *name; /* Avro record name, without namespace */
    size_t size;      /* sizeof the C struct */
    const cmr_field_desc_t *fields;
    size_t nfields;
} cmr_record_desc_t;

/* The generic shape of every {T *items; size_t count} array member. */
typedef struct cmr_array_any {
    void *items;
    size_t count;
} cmr_array_any_t;

extern const cmr_record_desc_t *const cmr_msg_descs[CMR_MSG__COUNT];

/* Generated at build time from schemas/ *.avsc (see cmake/EmbedSchemas.cmake). */
extern const char *const cmr_schema_texts[CMR_MSG__COUNT];
/* The same for schemas/past/ *.avsc: older versions the codec still reads. */
extern const char *const cmr_past_schema_texts[];
extern const size_t cmr_past_schema_count;

/* Releases what a struct described by `d` owns (not the struct itself); NULL members are
 * skipped, so a struct filled part way is freed as well (msg_codec.c). */
void cmr_wire_record_free(const cmr_record_desc_t *d, void *p);

#endif

/*
 * msg_validate.h - bounds-checked walk of an Avro binary body against its schema (internal).
 */
#ifndef CMR_MSG_VALIDATE_H
#define CMR_MSG_VALIDATE_H

#include <avro.h>
#include <stddef.h>
#include <stdint.h>

#include "cmr/wire.h"

/* Walks one datum of `schema` at the start of body[0..len). On success *used is the
 * number of bytes the datum takes. Checks every varint, length, count, union branch and
 * enum symbol against the schema and the bytes left, and that strings hold no NUL, so
 * that a datum it accepts can be materialized without surprises. */
cmr_wire_err_t cmr_wire_validate(avro_schema_t schema, const uint8_t *body, size_t len, size_t *used, char *errbuf,
                                 size_t errlen);

#endif

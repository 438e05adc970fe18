/*
 * msg_defaults.h - the field defaults of the current schemas, applied to C structs (internal).
 *
 * A message written under a past version of its schema (schemas/past/) lacks the fields
 * added since. The codec reads the fields it has by name and asks this module for the
 * others: the value is the field's "default" in the current .avsc, as Avro's schema
 * resolution prescribes. avro-c does not keep defaults, so they are read from the schema
 * texts with jansson.
 */
#ifndef CMR_MSG_DEFAULTS_H
#define CMR_MSG_DEFAULTS_H

#include <stddef.h>

#include "msg_desc.h"

/* Fills field `f` of record `d` (a record of message type `type`'s schema), at `dst` (the
 * field's own address inside the struct), with the field's default from the current schema. Returns 0, or -1 with `why` filled
 * when the schema gives the field no default or one this codec cannot hold (a fixed, a
 * number out of range, an unknown enum symbol). On -1 the field may own partial
 * allocations: the caller frees the whole struct (cmr_wire_record_free). Thread safe: the
 * schema texts are parsed once, on first use. */
int cmr_wire_default_apply(cmr_msg_type_t type, const cmr_record_desc_t *d, const cmr_field_desc_t *f, void *dst,
                           char *why, size_t whylen);

#endif

/*
 * wire.h - encoding of messages on the wire: Avro single-object encoding.
 *
 * A message is   C3 01 | CRC-64-AVRO fingerprint of the schema (8 bytes, little endian)
 *              | Avro binary body
 * so any Avro library that has the .avsc file can decode it without a schema registry.
 * The schemas are compiled into the library from schemas/ *.avsc; the fingerprint of
 * each is computed at start-up from its Parsing Canonical Form.
 *
 * Decoding checks, in this order: length (header present, not over the size limit),
 * magic, fingerprint (must name one of our schemas), then walks the body against the
 * schema with bounds checks before avro-c materializes it, and rejects trailing bytes.
 * Every rejection returns an error code, fills a message, and is counted per reason
 * (cmr_wire_rejected()): a bad message never crashes the reader.
 */
#ifndef CMR_WIRE_H
#define CMR_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "cmr/buf.h"
#include "cmr/msg.h"

#define CMR_WIRE_HEADER_SIZE 10
/* Default upper bound of one encoded message (class files and event batches included). */
#define CMR_WIRE_DEFAULT_MAX_MESSAGE (16u * 1024u * 1024u)

typedef enum cmr_wire_err {
    CMR_WIRE_OK = 0,
    CMR_WIRE_ERR_TRUNCATED,           /* shorter than the header, or the body ends early */
    CMR_WIRE_ERR_BAD_MAGIC,           /* does not start with C3 01 */
    CMR_WIRE_ERR_UNKNOWN_FINGERPRINT, /* a schema this build does not know */
    CMR_WIRE_ERR_OVERSIZED,           /* larger than the configured maximum */
    CMR_WIRE_ERR_CORRUPT,             /* body does not decode against the schema */
    CMR_WIRE_ERR_TRAILING,            /* bytes left after the record */
    CMR_WIRE_ERR_INVALID,             /* encode: the struct breaks the schema (NULL string, bad enum) */
    CMR_WIRE_ERR_INTERNAL,            /* avro-c failed (out of memory, ...) */
    CMR_WIRE_ERR__COUNT
} cmr_wire_err_t;

/* Parses the compiled-in schemas and computes their fingerprints. Called implicitly by
 * every function below; safe to call from several threads. Returns 0, or -1 when the
 * build itself is broken (a schema that avro-c rejects), with the reason logged. */
int cmr_wire_init(void);

const char *cmr_wire_strerror(cmr_wire_err_t err);
/* A short stable name of the error ("truncated", "bad_magic", "unknown_schema", ...): the
 * reason of a rejected message in counters and logs (cmr/rejects.h). */
const char *cmr_wire_err_name(cmr_wire_err_t err);
const char *cmr_msg_type_name(cmr_msg_type_t type);   /* "AgentRegistration" */
const char *cmr_msg_schema_json(cmr_msg_type_t type); /* the .avsc text */
uint64_t cmr_msg_fingerprint(cmr_msg_type_t type);    /* CRC-64-AVRO of the canonical form */
/* Finds a type by its name (as cmr_msg_type_name() gives it); -1 when unknown. */
int cmr_msg_type_by_name(const char *name);

/* Past versions of the schemas (schemas/past/) that this build still reads: a message
 * written under one decodes into the current struct and type, the fields added since
 * taking their defaults from the current schema (docs/ARCHITECTURE.md, "Schema versions").
 * They are loaded on the first message of an unknown fingerprint, or by the first call
 * below. cmr_wire_past_init() returns -1 when one of them cannot be read as the current
 * struct (logged; the others still are): a broken build, which the unit tests catch.
 * cmr_wire_past_version() names the i-th readable one (0 <= i < cmr_wire_past_count()).
 * cmr_wire_past_reads() counts the messages of past versions decoded in this process. */
int cmr_wire_past_init(void);
size_t cmr_wire_past_count(void);
int cmr_wire_past_version(size_t i, cmr_msg_type_t *type, uint64_t *fingerprint);
uint64_t cmr_wire_past_reads(void);

/* Limit for decoding (and encoding); 0 restores the default. Process wide. */
void cmr_wire_set_max_message(size_t max_bytes);
size_t cmr_wire_max_message(void);

/* Encodes `msg` (a pointer to the struct of `type`, e.g. cmr_redefine_t) into `out`,
 * replacing its content. On error `errbuf` (may be NULL) says why. */
cmr_wire_err_t cmr_msg_encode(cmr_msg_type_t type, const void *msg, cmr_buf_t *out, char *errbuf, size_t errlen);

/* Reads only the header: which message type is this? (A past version's current type.) */
cmr_wire_err_t cmr_wire_peek_type(const void *data, size_t len, cmr_msg_type_t *type);

/* Decodes a message of any known type into `out` (which then owns its pointers;
 * release with cmr_msg_free()). On error `out` holds nothing to free, the rejection is
 * counted and `errbuf` says why. */
cmr_wire_err_t cmr_msg_decode(const void *data, size_t len, cmr_msg_t *out, char *errbuf, size_t errlen);

/* Releases what a decoded message owns (not `msg` itself). NULL-safe. */
void cmr_msg_free(cmr_msg_t *msg);
/* Same for one struct of a given type, as filled by cmr_msg_decode(). */
void cmr_msg_body_free(cmr_msg_type_t type, void *body);

/* Pointer to the type-specific struct inside a cmr_msg_t. */
void *cmr_msg_body(cmr_msg_t *msg);
const void *cmr_msg_body_const(const cmr_msg_t *msg);

/* Renders a decoded message as one line of JSON (malloc'd; the caller frees). */
char *cmr_msg_to_json(const cmr_msg_t *msg);

/* Messages rejected by cmr_msg_decode() in this process, per reason. */
uint64_t cmr_wire_rejected(cmr_wire_err_t reason);
uint64_t cmr_wire_rejected_total(void);

/* CRC-64-AVRO (Rabin) fingerprint of arbitrary bytes, and the Parsing Canonical Form of
 * a schema's JSON text (malloc'd; NULL with errbuf filled when the JSON is unusable). */
uint64_t cmr_wire_crc64_avro(const void *data, size_t len);
char *cmr_wire_canonical_form(const char *schema_json, char *errbuf, size_t errlen);

#endif /* CMR_WIRE_H */

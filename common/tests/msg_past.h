/*
 * msg_past.h - writes a message as an old writer would have, under a past version of its
 * schema (test helper): the struct is encoded with the current schema, avro-c's resolved
 * reader presents it under the past schema (the fields added since dropped), and that
 * value is written after a header naming the past version's fingerprint.
 */
#ifndef CMR_TEST_MSG_PAST_H
#define CMR_TEST_MSG_PAST_H

#include <stdint.h>

#include "cmr/buf.h"
#include "cmr/msg.h"

/* The first ConfigChange schema (2026-11-21, schemas/past/): no trace context, thresholds,
 * stall threshold, segment limit, trivial flag, request headers or overhead budget. */
#define MSG_PAST_CONFIG_CHANGE_FIRST 0x2540f3ee2846fdb9ULL

/* The schema file of past version `fingerprint` in $CMR_SOURCE_DIR/schemas/past/
 * (<stem>.<fingerprint>.avsc) into `path`; 0, or -1 when there is none. */
int msg_past_file(uint64_t fingerprint, char *path, size_t len);

/* Encodes `body`, a struct of `type`, as past version `fingerprint` into `out` (replacing
 * its content). 0, or -1 with the reason on stderr. */
int msg_encode_past(cmr_msg_type_t type, const void *body, uint64_t fingerprint, cmr_buf_t *out);

#endif

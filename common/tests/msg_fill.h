/*
 * msg_fill.h - fills any message struct with test values, driven by the field tables
 * (test helper). The result is heap-owned like a decoded message: cmr_msg_free() it.
 */
#ifndef CMR_TEST_MSG_FILL_H
#define CMR_TEST_MSG_FILL_H

#include <stdint.h>

#include "cmr/msg.h"

typedef enum msg_fill_variant {
    MSG_FILL_EMPTY,   /* zeros, empty strings, empty arrays, absent optionals */
    MSG_FILL_MAXIMAL, /* extreme numbers, long UTF-8 strings, large bytes, many items */
    MSG_FILL_RANDOM,  /* pseudo-random values from the seed */
} msg_fill_variant_t;

void msg_fill(cmr_msg_type_t type, msg_fill_variant_t variant, uint64_t seed, cmr_msg_t *out);

#endif

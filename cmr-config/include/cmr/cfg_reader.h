/*
 * cfg_reader.h - reads a whole topic from its beginning, every partition, outside any
 * consumer group: how a worker rebuilds a projection (cmr.config, cmr.registrations).
 *
 * It knows when it has caught up (every partition reached its end once), after which it
 * keeps following the topic. Records that do not decode as our messages are logged with
 * topic/partition/offset and skipped. Nothing is committed: a reader always starts over.
 */
#ifndef CMR_CFG_READER_H
#define CMR_CFG_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cmr/conf.h"

typedef struct cmr_cfg_reader cmr_cfg_reader_t;

typedef struct cmr_cfg_rec {
    const void *payload; /* valid until the next poll */
    size_t len;
    const char *key;     /* NUL-terminated, "" when none */
    int32_t partition;
    int64_t offset;
} cmr_cfg_rec_t;

/* Assigns every partition of `topic` at its beginning. NULL with err filled. */
cmr_cfg_reader_t *cmr_cfg_reader_new(const cmr_conf_t *conf, const char *topic, char *err, size_t errlen);
void cmr_cfg_reader_free(cmr_cfg_reader_t *r);
/* 1 with *out set, 0 when nothing arrived within timeout_ms, -1 on a fatal error. */
int cmr_cfg_reader_poll(cmr_cfg_reader_t *r, int timeout_ms, cmr_cfg_rec_t *out);
/* Every partition has reached the end it had at some point after the reader started. */
bool cmr_cfg_reader_caught_up(const cmr_cfg_reader_t *r);
int cmr_cfg_reader_partitions(const cmr_cfg_reader_t *r);

#endif

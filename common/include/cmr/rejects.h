/*
 * rejects.h - every message a program rejects, counted per topic and reason, logged
 * rate-limited, and reported.
 *
 * Anyone who can write to a topic can send anything; a message that does not decode, is
 * of the wrong type, fails a check (a class whose bytes do not hash to its class_hash, a
 * registration with an impossible instance id) or is refused (a command that does not
 * verify) must never vanish silently. The transport's consumer reports what does not
 * decode; workers report what they refuse after decoding, and what they decode
 * themselves from a topic reader.
 *
 * Each (topic, reason) pair has a counter; at most CMR_REJECTS_MAX_KEYS pairs are kept
 * (per-agent topics could otherwise grow the table without bound), and further pairs
 * count under topic "(other)". Log lines (event wire.message_rejected) are limited to a
 * few per second in all, each carrying the number suppressed before it; every value from
 * the message is escaped. cmr_rejects_log_summary() writes one line per pair that changed
 * since the last summary (event wire.rejected_total): what workers call with their
 * periodic statistics. Thread safe.
 */
#ifndef CMR_REJECTS_H
#define CMR_REJECTS_H

#include <stddef.h>
#include <stdint.h>

#include "cmr/wire.h"

#define CMR_REJECTS_MAX_KEYS 256

/* Counts and logs one rejected message. reason is a short stable name ("corrupt",
 * "hash_mismatch", "bad_signature", ...); detail may be NULL. */
void cmr_reject(const char *topic, const char *reason, int32_t partition, int64_t offset, const char *detail);

/* Counts one rejected message without logging it: for a worker that logs its refusals
 * with more context itself (still rate-limited, with every value escaped). */
void cmr_reject_count(const char *topic, const char *reason);

/* Decodes a message read from a topic reader; one that does not decode is rejected (and
 * counted) here. 0 with *out filled (caller frees with cmr_msg_free), or -1. */
int cmr_reject_decode(const char *topic, int32_t partition, int64_t offset, const void *payload, size_t len,
                      cmr_msg_t *out);

/* The count of one pair (0 when never seen), and of everything. */
uint64_t cmr_rejects_count(const char *topic, const char *reason);
uint64_t cmr_rejects_total(void);
/* Calls fn for every pair, in no particular order. */
typedef void(cmr_rejects_fn)(const char *topic, const char *reason, uint64_t count, void *opaque);
void cmr_rejects_each(cmr_rejects_fn *fn, void *opaque);
/* Logs one line per pair whose count changed since the last summary. */
void cmr_rejects_log_summary(void);

#endif

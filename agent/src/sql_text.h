/*
 * sql_text.h - the agent's SQL text normaliser: one statement's text, as a JDBC probe
 * captured it, made fit for display and grouping with every literal value masked (`?`),
 * comments removed and whitespace collapsed. The publisher thread calls it before a
 * db.statement attribute is put on the wire, so the literal values a statement carries
 * (passwords, personal data) never leave the JVM. The rules are in sql_text.c's top comment.
 *
 * Pure C, no JVM, no allocation, no state: thread-safe. Unit tested
 * (agent/tests/test_sql_text.c) and fuzzed (common/fuzz/fuzz_sql_text.c).
 */
#ifndef CMR_AGENT_SQL_TEXT_H
#define CMR_AGENT_SQL_TEXT_H

#include <stddef.h>

/* Normalises one SQL statement's text for display and grouping, masking its literals.
 * in: in_len bytes (not NUL-terminated, may be any bytes, may be cut mid-statement or mid-UTF-8;
 * NULL is allowed when in_len is 0).
 * out: room for out_cap bytes (out_cap >= 1); writes a NUL-terminated result, cut at out_cap - 1 bytes on a
 * UTF-8 character boundary (and without a trailing space). The result is valid UTF-8 with no control
 * characters. Returns the length written (excluding NUL). Never reads past in_len, never writes past
 * out_cap (out_cap 0: writes nothing, returns 0). Pure, no allocation, thread-safe.
 * The result never has more than 3 x in_len bytes (an invalid byte becomes U+FFFD). */
size_t cmr_sql_normalise(const char *in, size_t in_len, char *out, size_t out_cap);

#endif

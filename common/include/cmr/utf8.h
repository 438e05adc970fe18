/*
 * utf8.h - one UTF-8 sequence at a time, strictly (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF).
 *
 * Part of the toolbox (cmr_base). Used wherever bytes from outside become text that must be
 * valid UTF-8: JSON answers (json.h), transaction data stored on traces (cmr-ingest).
 */
#ifndef CMR_UTF8_H
#define CMR_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* The length of the valid UTF-8 sequence at p (at most n bytes, n > 0), 0 when it is not
 * one; *cp (when cp is not NULL) gets its code point. */
size_t cmr_utf8_seq(const uint8_t *p, size_t n, uint32_t *cp);

/* NULL when s[0..len) is text: valid UTF-8 without control characters (C0, DEL, C1);
 * else why not ("not UTF-8", "a control character"). What cmr-ingest keeps as a trace's
 * http.path and a transaction's name, and what the agent names transactions with. */
const char *cmr_utf8_text_check(const char *s, size_t len);

#endif

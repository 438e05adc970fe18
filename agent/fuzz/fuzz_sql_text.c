/*
 * fuzz_sql_text.c - libFuzzer target: any bytes given to the agent's SQL text normaliser
 * (agent/src/sql_text.h) as a statement's text; never a crash, a read past the input, a
 * write past the output or UB. The result must be:
 *   - as long as returned, NUL-terminated, and never cut when out_cap is 3 x the input + 2;
 *   - valid UTF-8 (RFC 3629) without control characters;
 *   - without a space at either end or two in a row, outside quoted identifiers;
 *   - without a string literal's quote (') or a comment marker (-- or slash-star) outside
 *     quoted identifiers: a literal or a comment was masked or dropped whole;
 *   - its own normalisation (the rules are stable);
 *   - with a smaller buffer (chosen from the input's first byte), the longest prefix of
 *     that result that fits, cut on a character boundary, less a space left at the cut.
 * Any violation aborts.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sql_text.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The length of the valid UTF-8 character at p (n bytes), or 0; written apart from the
 * normaliser's on purpose, so that one mistake is not in both. */
static size_t utf8_len(const unsigned char *p, size_t n)
{
    uint32_t c = p[0];
    size_t len = c < 0x80                 ? 1
                 : c >= 0xc2 && c <= 0xdf ? 2
                 : c >= 0xe0 && c <= 0xef ? 3
                 : c >= 0xf0 && c <= 0xf4 ? 4
                                          : 0;
    if (len == 0 || n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        c = c << 6 | (p[i] & 0x3f);
    }
    c &= len == 2 ? 0x7ff : len == 3 ? 0xffff : 0x1fffff;
    uint32_t min = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
    if (len > 1 && (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)))
        return 0;
    return len;
}

static void check_utf8(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t len = utf8_len(p + i, n - i);
        if (len == 0 || (len == 1 && (p[i] < 0x20 || p[i] == 0x7f)))
            abort();
        i += len;
    }
}

/* Spacing and what may appear only inside a quoted identifier ("..." or `...`, the last
 * one possibly unterminated). */
static void check_outside_quotes(const char *s, size_t n)
{
    char open = 0;
    if (n > 0 && s[0] == ' ')
        abort();
    for (size_t i = 0; i < n; i++) {
        char c = s[i], next = i + 1 < n ? s[i + 1] : 0;
        if (open) {
            if (c == open)
                open = 0; /* a doubled quote closes and opens again: the same */
            continue;
        }
        if (c == '"' || c == '`')
            open = c;
        else if (c == '\'' || (c == '-' && next == '-') || (c == '/' && next == '*') || (c == ' ' && next == ' '))
            abort();
        else if (c == ' ' && i + 1 == n)
            abort();
    }
}

/* What a buffer of cap bytes must get of the full result (len bytes). */
static size_t expected_cut(const char *full, size_t len, size_t cap)
{
    if (cap - 1 >= len)
        return len;
    size_t k = cap - 1;
    while (k > 0 && ((unsigned char)full[k] & 0xc0) == 0x80)
        k--;
    if (k > 0 && full[k - 1] == ' ')
        k--;
    return k;
}

/* Normalises into a buffer of exactly cap bytes (AddressSanitizer sees a write past it). */
static char *normalise(const char *in, size_t in_len, size_t cap, size_t *len)
{
    char *out = malloc(cap);
    if (!out)
        abort();
    *len = cmr_sql_normalise(in, in_len, out, cap);
    if (*len >= cap || out[*len] != '\0' || strlen(out) != *len)
        abort();
    return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *in = (const char *)data; /* libFuzzer's copy has exactly size bytes */
    size_t cap = 3 * size + 2, len;
    char *full = normalise(in, size, cap, &len);
    if (len > 3 * size)
        abort(); /* cut: the bound in sql_text.h does not hold */
    check_utf8(full, len);
    check_outside_quotes(full, len);

    size_t again_len;
    char *again = normalise(full, len, 3 * len + 2, &again_len);
    if (again_len != len || memcmp(again, full, len) != 0)
        abort();
    free(again);

    size_t small_cap = 1 + (size ? data[0] : 0) % (len + 2), small_len;
    char *small = normalise(in, size, small_cap, &small_len);
    if (small_len != expected_cut(full, len, small_cap) || memcmp(small, full, small_len) != 0)
        abort();
    free(small);
    free(full);
    return 0;
}

/*
 * utf8.c - strict UTF-8 decoding of one sequence, and the text check built on it (utf8.h).
 */
#include "cmr/utf8.h"

size_t cmr_utf8_seq(const uint8_t *p, size_t n, uint32_t *cp)
{
    unsigned c = p[0];
    size_t len;
    uint32_t v;
    if (c < 0x80) {
        len = 1;
        v = c;
    } else if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
        v = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        v = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        v = c & 0x07;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        v = v << 6 | (p[i] & 0x3f);
    }
    if ((len == 3 && v < 0x800) || (len == 4 && (v < 0x10000 || v > 0x10ffff)) || (v >= 0xd800 && v <= 0xdfff))
        return 0;
    if (cp)
        *cp = v;
    return len;
}

const char *cmr_utf8_text_check(const char *s, size_t len)
{
    const uint8_t *p = (const uint8_t *)s;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t l = cmr_utf8_seq(p + i, len - i, &cp);
        if (!l)
            return "not UTF-8";
        if (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f))
            return "a control character";
        i += l;
    }
    return NULL;
}

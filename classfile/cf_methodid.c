/*
 * cf_methodid.c - method ids: XXH3-64 of the UTF-8 string "owner.name(desc)", for example
 * "java/lang/String.length()I". Class files store modified UTF-8; names that contain NUL or
 * supplementary characters are converted to standard UTF-8 first so the id equals what a
 * Java agent computes from String.getBytes(UTF_8).
 */
#include "cf_internal.h"

#include <stdlib.h>
#include <xxhash.h>

static bool needs_conversion(cf_str s)
{ /* encoded NUL or surrogate present */
    return s.len && (memchr(s.p, 0xC0, s.len) || memchr(s.p, 0xED, s.len));
}

void cf_mutf8_to_utf8(cf_buf *b, cf_str s)
{
    const uint8_t *p = (const uint8_t *)s.p;
    uint32_t n = s.len;
    for (uint32_t i = 0; i < n;) {
        if (p[i] == 0xC0 && i + 1 < n && p[i + 1] == 0x80) {
            cf_buf_u1(b, 0);
            i += 2;
        } else if (p[i] == 0xED && i + 5 < n && (p[i + 1] & 0xF0) == 0xA0 && p[i + 3] == 0xED &&
                   (p[i + 4] & 0xF0) == 0xB0) {
            uint32_t hi = 0xD000u | (uint32_t)(p[i + 1] & 0x3F) << 6 | (p[i + 2] & 0x3F);
            uint32_t lo = 0xD000u | (uint32_t)(p[i + 4] & 0x3F) << 6 | (p[i + 5] & 0x3F);
            uint32_t cp = 0x10000u + ((hi - 0xD800u) << 10) + (lo - 0xDC00u);
            cf_buf_u1(b, (uint8_t)(0xF0 | cp >> 18));
            cf_buf_u1(b, (uint8_t)(0x80 | ((cp >> 12) & 0x3F)));
            cf_buf_u1(b, (uint8_t)(0x80 | ((cp >> 6) & 0x3F)));
            cf_buf_u1(b, (uint8_t)(0x80 | (cp & 0x3F)));
            i += 6;
        } else {
            cf_buf_u1(b, p[i]);
            i++;
        }
    }
}

uint64_t cf_method_id_of(cf_str owner, cf_str name, cf_str desc)
{
    char stack[512];
    size_t n = (size_t)owner.len + 1 + name.len + desc.len;
    if (!needs_conversion(owner) && !needs_conversion(name) && !needs_conversion(desc)) {
        char *s = n <= sizeof stack ? stack : malloc(n);
        if (!s)
            return 0;
        memcpy(s, owner.p, owner.len);
        s[owner.len] = '.';
        memcpy(s + owner.len + 1, name.p, name.len);
        memcpy(s + owner.len + 1 + name.len, desc.p, desc.len);
        uint64_t h = XXH3_64bits(s, n);
        if (s != stack)
            free(s);
        return h;
    }
    cf_buf b = {0};
    cf_mutf8_to_utf8(&b, owner);
    cf_buf_u1(&b, '.');
    cf_mutf8_to_utf8(&b, name);
    cf_mutf8_to_utf8(&b, desc);
    uint64_t h = b.oom ? 0 : XXH3_64bits(b.data, b.len);
    cf_buf_free(&b);
    return h;
}

uint64_t cf_method_id(const cf_class *c, const cf_member *m)
{
    return cf_method_id_of(cf_class_name(c), cf_cp_utf8(c, m->name), cf_cp_utf8(c, m->desc));
}

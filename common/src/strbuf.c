/*
 * strbuf.c - growable strings for JSON rendering and log lines. See strbuf.h.
 */
#include "strbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool strbuf_reserve(cmr_strbuf_t *sb, size_t extra)
{
    if (sb->oom)
        return false;
    if (sb->len + extra + 1 <= sb->cap)
        return true;
    size_t cap = sb->cap ? sb->cap : 64;
    while (cap < sb->len + extra + 1)
        cap *= 2;
    char *s = realloc(sb->s, cap);
    if (!s) {
        sb->oom = true;
        return false;
    }
    sb->s = s;
    sb->cap = cap;
    return true;
}

void cmr_strbuf_put(cmr_strbuf_t *sb, const char *s, size_t n)
{
    if (!strbuf_reserve(sb, n))
        return;
    memcpy(sb->s + sb->len, s, n);
    sb->len += n;
    sb->s[sb->len] = '\0';
}

void cmr_strbuf_putc(cmr_strbuf_t *sb, char c)
{
    cmr_strbuf_put(sb, &c, 1);
}

void cmr_strbuf_puts(cmr_strbuf_t *sb, const char *s)
{
    cmr_strbuf_put(sb, s, strlen(s));
}

void cmr_strbuf_vprintf(cmr_strbuf_t *sb, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0 || !strbuf_reserve(sb, (size_t)n))
        return;
    vsnprintf(sb->s + sb->len, (size_t)n + 1, fmt, ap);
    sb->len += (size_t)n;
}

void cmr_strbuf_printf(cmr_strbuf_t *sb, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cmr_strbuf_vprintf(sb, fmt, ap);
    va_end(ap);
}

char *cmr_strbuf_take(cmr_strbuf_t *sb)
{
    char *s = sb->s;
    if (!s && !sb->oom)
        s = strdup("");
    *sb = (cmr_strbuf_t){0};
    return s;
}

void cmr_strbuf_free(cmr_strbuf_t *sb)
{
    free(sb->s);
    *sb = (cmr_strbuf_t){0};
}

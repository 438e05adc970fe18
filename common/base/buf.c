/*
 * buf.c - growable byte/string buffers and arrays. See cmr/buf.h.
 */
#include "cmr/buf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/bytes.h"

bool cmr_buf_reserve(cmr_buf_t *b, size_t extra)
{
    if (b->oom)
        return false;
    if (extra >= SIZE_MAX - b->len) {
        b->oom = true;
        return false;
    }
    size_t need = b->len + extra + 1; /* the trailing NUL */
    if (need <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    uint8_t *d = realloc(b->data, cap);
    if (!d) {
        b->oom = true;
        return false;
    }
    b->data = d;
    b->cap = cap;
    return true;
}

uint8_t *cmr_buf_append(cmr_buf_t *b, size_t n)
{
    if (!cmr_buf_reserve(b, n))
        return NULL;
    uint8_t *at = b->data + b->len;
    memset(at, 0, n);
    b->len += n;
    b->data[b->len] = '\0';
    return at;
}

void cmr_buf_put(cmr_buf_t *b, const void *p, size_t n)
{
    if (!cmr_buf_reserve(b, n))
        return;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void cmr_buf_putc(cmr_buf_t *b, char c)
{
    cmr_buf_put(b, &c, 1);
}

void cmr_buf_puts(cmr_buf_t *b, const char *s)
{
    cmr_buf_put(b, s, strlen(s));
}

void cmr_buf_vprintf(cmr_buf_t *b, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0) {
        b->oom = true;
        return;
    }
    if (!cmr_buf_reserve(b, (size_t)n))
        return;
    vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
}

void cmr_buf_printf(cmr_buf_t *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cmr_buf_vprintf(b, fmt, ap);
    va_end(ap);
}

void cmr_buf_put_be16(cmr_buf_t *b, uint16_t v)
{
    uint8_t p[2];
    cmr_put_be16(p, v);
    cmr_buf_put(b, p, sizeof p);
}

void cmr_buf_put_be32(cmr_buf_t *b, uint32_t v)
{
    uint8_t p[4];
    cmr_put_be32(p, v);
    cmr_buf_put(b, p, sizeof p);
}

void cmr_buf_put_be64(cmr_buf_t *b, uint64_t v)
{
    uint8_t p[8];
    cmr_put_be64(p, v);
    cmr_buf_put(b, p, sizeof p);
}

void cmr_buf_put_varint(cmr_buf_t *b, uint64_t v)
{
    uint8_t enc[10];
    size_t n = 0;
    do {
        enc[n] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v)
            enc[n] |= 0x80;
        n++;
    } while (v);
    cmr_buf_put(b, enc, n);
}

void cmr_buf_reset(cmr_buf_t *b)
{
    b->len = 0;
    b->oom = false;
    if (b->data)
        b->data[0] = '\0';
}

void cmr_buf_truncate(cmr_buf_t *b, size_t len)
{
    if (len < b->len) {
        b->len = len;
        b->data[len] = '\0';
    }
}

char *cmr_buf_take(cmr_buf_t *b)
{
    char *s = (char *)b->data;
    if (b->oom) {
        free(s);
        s = NULL;
    } else if (!s) {
        s = strdup("");
    }
    *b = (cmr_buf_t){0};
    return s;
}

void cmr_buf_free(cmr_buf_t *b)
{
    if (!b)
        return;
    free(b->data);
    *b = (cmr_buf_t){0};
}

int cmr_array_grow(void *items, size_t *cap, size_t need, size_t size, size_t min_cap)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap > min_cap ? *cap : min_cap;
    while (n < need) {
        if (n > SIZE_MAX / 2)
            return -1;
        n *= 2;
    }
    if (size && n > SIZE_MAX / size)
        return -1;
    void **pp = items;
    void *p = realloc(*pp, n * size);
    if (!p)
        return -1;
    *pp = p;
    *cap = n;
    return 0;
}

int cmr_u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

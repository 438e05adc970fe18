/*
 * buf.h - growable memory: a byte/string buffer and a helper that grows arrays.
 *
 * Part of the toolbox (cmr_base): the one place the project doubles a buffer. Every
 * component that builds bytes (encoded messages, store keys, class files), text (log
 * lines, reports) or an array of structs grows it through these functions, which check
 * for size overflow and allocation failure in one place.
 *
 * cmr_buf_t
 *   - A zeroed cmr_buf_t is empty and valid. Whoever declared it owns the memory and
 *     releases it with cmr_buf_free() (or takes it with cmr_buf_take()).
 *   - The bytes are always followed by a NUL (not counted in len), so a buffer of text
 *     can be used as a C string through cmr_buf_str().
 *   - An allocation failure sets `oom` and turns every later append into a no-op, so a
 *     caller that appends many pieces checks once, at the end (cmr_buf_ok()).
 *
 * cmr_array_grow
 *   - Makes room for `need` elements in a realloc'd array, doubling its capacity; the
 *     caller keeps the count. -1 (array untouched) when the size would overflow or the
 *     allocation fails.
 */
#ifndef CMR_BUF_H
#define CMR_BUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cmr_buf {
    uint8_t *data; /* owned; NULL while empty */
    size_t len;    /* bytes in use, not counting the trailing NUL */
    size_t cap;    /* bytes allocated */
    bool oom;      /* an allocation failed: the content is incomplete */
} cmr_buf_t;

/* Makes room for `extra` more bytes (and the NUL). false when that failed (oom set). */
bool cmr_buf_reserve(cmr_buf_t *b, size_t extra);
void cmr_buf_put(cmr_buf_t *b, const void *p, size_t n);
void cmr_buf_putc(cmr_buf_t *b, char c);
void cmr_buf_puts(cmr_buf_t *b, const char *s);
void cmr_buf_printf(cmr_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cmr_buf_vprintf(cmr_buf_t *b, const char *fmt, va_list ap);
/* Big-endian integers, as class files, store keys and network headers want them. */
void cmr_buf_put_be16(cmr_buf_t *b, uint16_t v);
void cmr_buf_put_be32(cmr_buf_t *b, uint32_t v);
void cmr_buf_put_be64(cmr_buf_t *b, uint64_t v);
/* An unsigned LEB128 varint (7 bits a byte, low first; 1..10 bytes). Read with
 * cmr_get_varint (cmr/bytes.h). */
void cmr_buf_put_varint(cmr_buf_t *b, uint64_t v);
/* Appends n zero bytes and returns where they start, for the caller to fill in (NULL on
 * oom). The pointer is valid until the next append. */
uint8_t *cmr_buf_append(cmr_buf_t *b, size_t n);
/* Empties the buffer but keeps its memory (and clears oom). */
void cmr_buf_reset(cmr_buf_t *b);
/* Cuts the content to len bytes (len <= b->len). */
void cmr_buf_truncate(cmr_buf_t *b, size_t len);
/* true when no append has failed. */
static inline bool cmr_buf_ok(const cmr_buf_t *b)
{
    return !b->oom;
}
/* The content as a NUL-terminated string ("" when empty); valid until the next append. */
static inline const char *cmr_buf_str(const cmr_buf_t *b)
{
    return b->data ? (const char *)b->data : "";
}
/* Hands the NUL-terminated content to the caller, who frees it, and resets `b`. NULL
 * when an append had failed (the partial content is freed) or memory ran out. */
char *cmr_buf_take(cmr_buf_t *b);
void cmr_buf_free(cmr_buf_t *b);

/* Ensures *items has room for `need` elements of `size` bytes; *cap is its capacity in
 * elements (0 for a NULL array). Grows to at least twice the old capacity and at least
 * `min_cap`. 0, or -1 with *items and *cap unchanged. */
int cmr_array_grow(void *items, size_t *cap, size_t need, size_t size, size_t min_cap);

/* The usual call: CMR_ARRAY_GROW(list.items, list.cap, list.count + 1). */
#define CMR_ARRAY_GROW(items, cap, need) cmr_array_grow(&(items), &(cap), (need), sizeof *(items), 8)

/* qsort / bsearch comparator of uint64_t elements, ascending. */
int cmr_u64_cmp(const void *a, const void *b);

#endif

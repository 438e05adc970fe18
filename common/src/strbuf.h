/*
 * strbuf.h - a small growable string used to build JSON and log lines (internal).
 * A zeroed cmr_strbuf_t is empty and valid. Allocation failure sets `oom` and turns
 * further appends into no-ops, so callers check once at the end.
 */
#ifndef CMR_STRBUF_H
#define CMR_STRBUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct cmr_strbuf {
    char *s;
    size_t len;
    size_t cap;
    bool oom;
} cmr_strbuf_t;

void cmr_strbuf_putc(cmr_strbuf_t *sb, char c);
void cmr_strbuf_put(cmr_strbuf_t *sb, const char *s, size_t n);
void cmr_strbuf_puts(cmr_strbuf_t *sb, const char *s);
void cmr_strbuf_printf(cmr_strbuf_t *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cmr_strbuf_vprintf(cmr_strbuf_t *sb, const char *fmt, va_list ap);
/* Hands the NUL-terminated string to the caller (who frees it) and resets `sb`. */
char *cmr_strbuf_take(cmr_strbuf_t *sb);
void cmr_strbuf_free(cmr_strbuf_t *sb);

#endif

/*
 * json.c - JSON output through jansson. See cmr/json.h.
 */
#include "cmr/json.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/buf.h"
#include "cmr/utf8.h"

json_t *cmr_json_strn(const char *s, size_t n)
{
    if (!s)
        return json_null();
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        size_t l = cmr_utf8_seq(p + i, n - i, NULL);
        if (!l)
            break;
        i += l;
    }
    if (i == n)
        return json_stringn(s, n);
    /* Invalid bytes: rebuild with U+FFFD in their place. */
    cmr_buf_t b = {0};
    cmr_buf_put(&b, s, i);
    while (i < n) {
        size_t l = cmr_utf8_seq(p + i, n - i, NULL);
        if (l) {
            cmr_buf_put(&b, p + i, l);
            i += l;
        } else {
            cmr_buf_put(&b, "\xef\xbf\xbd", 3);
            i++;
        }
    }
    json_t *j = cmr_buf_ok(&b) ? json_stringn((const char *)b.data, b.len) : NULL;
    cmr_buf_free(&b);
    return j;
}

json_t *cmr_json_str(const char *s)
{
    return s ? cmr_json_strn(s, strlen(s)) : json_null();
}

json_t *cmr_json_hex(const void *p, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    const uint8_t *b = p;
    if (n > (SIZE_MAX - 1) / 2)
        return NULL;
    char *s = malloc(2 * n + 1);
    if (!s)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        s[2 * i] = digits[b[i] >> 4];
        s[2 * i + 1] = digits[b[i] & 15];
    }
    json_t *j = json_stringn(s, 2 * n);
    free(s);
    return j;
}

json_t *cmr_json_id64(uint64_t v)
{
    char s[17];
    snprintf(s, sizeof s, "%016" PRIx64, v);
    return json_string(s);
}

static int dump_to_buf(const char *chunk, size_t n, void *data)
{
    cmr_buf_t *b = data;
    cmr_buf_put(b, chunk, n);
    return cmr_buf_ok(b) ? 0 : -1;
}

int cmr_json_append(cmr_buf_t *b, const json_t *j, size_t flags)
{
    if (!j)
        return -1;
    return json_dump_callback(j, dump_to_buf, b, flags) == 0 && cmr_buf_ok(b) ? 0 : -1;
}

char *cmr_json_take(json_t *j, size_t flags)
{
    char *s = j ? json_dumps(j, flags) : NULL;
    json_decref(j);
    return s;
}

int cmr_json_write(FILE *f, const json_t *j, size_t flags)
{
    if (!j || json_dumpf(j, f, flags) != 0 || fputc('\n', f) == EOF)
        return -1;
    return 0;
}

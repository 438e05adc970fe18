/*
 * request_headers.c - the configuration's request header names, checked and joined for
 * the probe (see request_headers.h).
 */
#include "request_headers.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cmr/http_token.h"

/* 1..CMR_MAX_REQUEST_HEADER_NAME lower-case token characters. */
static bool name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > CMR_MAX_REQUEST_HEADER_NAME)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!cmr_http_tchar(c) || (c >= 'A' && c <= 'Z'))
            return false;
    }
    return true;
}

size_t cmr_request_headers_join(char out[CMR_REQUEST_HEADERS_JOINED], char *const *names, size_t n)
{
    size_t len = 0, kept = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n && kept < CMR_MAX_REQUEST_HEADERS; i++) {
        if (!names[i] || !name_ok(names[i]))
            continue;
        len += (size_t)snprintf(out + len, CMR_REQUEST_HEADERS_JOINED - len, "%s%s", kept ? "\n" : "", names[i]);
        kept++;
    }
    return kept;
}

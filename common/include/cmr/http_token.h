/*
 * http_token.h - the characters of an RFC 9110 token (a method, a header field name).
 *
 * Part of the toolbox (cmr_base). Used wherever a name travels into or out of HTTP: the
 * methods cmr-ingest keeps on traces, the request header names an environment lists
 * (cmr-config) and the agent asks requests for.
 */
#ifndef CMR_HTTP_TOKEN_H
#define CMR_HTTP_TOKEN_H

#include <stdbool.h>
#include <string.h>

/* Whether c is a token character: a letter, a digit or one of !#$%&'*+-.^_`|~ (never NUL). */
static inline bool cmr_http_tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

#endif

/*
 * cf_error.c - error codes, their names, and the formatted error helper every parser and
 * writer of the engine uses to fail with a code plus a human-readable message.
 */
#include "cf_internal.h"

#include <stdio.h>

const char *cf_err_name(cf_err e)
{
    switch (e) {
    case CF_OK: return "ok";
    case CF_ERR_TRUNCATED: return "truncated";
    case CF_ERR_MAGIC: return "bad-magic";
    case CF_ERR_VERSION: return "unsupported-version";
    case CF_ERR_CPOOL_TAG: return "bad-constant-tag";
    case CF_ERR_CPOOL_INDEX: return "bad-constant-index";
    case CF_ERR_CPOOL_VALUE: return "bad-constant-value";
    case CF_ERR_LENGTH: return "bad-length";
    case CF_ERR_TRAILING: return "trailing-bytes";
    case CF_ERR_CODE: return "bad-code";
    case CF_ERR_ATTRIBUTE: return "bad-attribute";
    case CF_ERR_LIMIT: return "limit-exceeded";
    case CF_ERR_ARG: return "bad-argument";
    case CF_ERR_NOMEM: return "out-of-memory";
    case CF_ERR_REFUSED: return "refused";
    }
    return "unknown-error";
}

cf_err cf_fail(cf_error *err, cf_err code, const char *fmt, ...)
{
    if (err) {
        err->code = code;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

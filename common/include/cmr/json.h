/*
 * json.h - JSON output through jansson: strings from untrusted bytes, hex identifiers,
 * and dumping a tree to a string, a buffer or a file.
 *
 * Part of the toolbox (cmr_base). Every JSON document the project writes (HTTP answers,
 * exports, `--json` output, message dumps) is built as a jansson tree and dumped by these
 * functions, never escaped by hand.
 *
 * Names of classes, methods, JVMs and hosts come from agents, so from outside: jansson
 * refuses a string that is not valid UTF-8 (json_string() returns NULL, and the member
 * silently disappears from its object). cmr_json_str() never drops a value: it replaces
 * each invalid byte with U+FFFD.
 *
 * Ownership follows jansson: constructors return a new reference; *_set_new-style use
 * steals it.
 */
#ifndef CMR_JSON_H
#define CMR_JSON_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cmr/buf.h"

/* A JSON string of s (n bytes; may contain anything). NULL s gives JSON null. NULL only
 * when memory ran out. */
json_t *cmr_json_strn(const char *s, size_t n);
json_t *cmr_json_str(const char *s);
/* Lower-case hex of n bytes, as a JSON string. */
json_t *cmr_json_hex(const void *p, size_t n);
/* A 64-bit identifier as 16 lower-case hex digits (JSON numbers lose precision above 2^53). */
json_t *cmr_json_id64(uint64_t v);

/* The dump flags the project uses: member order as built, compact or indented by 1. */
#define CMR_JSON_COMPACT (JSON_PRESERVE_ORDER | JSON_COMPACT | JSON_ENCODE_ANY)
#define CMR_JSON_PRETTY (JSON_PRESERVE_ORDER | JSON_INDENT(1) | JSON_ENCODE_ANY)

/* Appends the dump of j to b. 0, or -1 when the dump failed (b->oom set on memory). */
int cmr_json_append(cmr_buf_t *b, const json_t *j, size_t flags);
/* The dump as a new string (caller frees), NULL on failure; j is released (decref) either
 * way, so that `return cmr_json_take(obj, CMR_JSON_COMPACT);` ends a builder. */
char *cmr_json_take(json_t *j, size_t flags);
/* Writes the dump of j to f, followed by a newline. 0, or -1 on a write error. */
int cmr_json_write(FILE *f, const json_t *j, size_t flags);

#endif

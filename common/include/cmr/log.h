/*
 * log.h - structured log lines shared by every program and the agent.
 *
 * One line per event, logfmt style, on stderr (or a sink the host installs):
 *
 *   ts=2026-11-21T21:40:00.123Z level=info prog=cmr-config event=agent.registered agent=...
 *
 * `event` is a stable dotted name that operators can grep and alert on; the rest are
 * key=value pairs written by the caller's format string. Thread safe.
 */
#ifndef CMR_LOG_H
#define CMR_LOG_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

typedef enum cmr_log_level {
    CMR_LOG_DEBUG,
    CMR_LOG_INFO,
    CMR_LOG_WARN,
    CMR_LOG_ERROR,
    CMR_LOG_OFF,
} cmr_log_level_t;

/* Program name printed as prog=...; the string must outlive the program. */
void cmr_log_set_program(const char *prog);
void cmr_log_set_level(cmr_log_level_t level);
cmr_log_level_t cmr_log_get_level(void);
/* "debug", "info", "warn", "error", "off" -> level; -1 when unknown. */
int cmr_log_level_parse(const char *name);

/* Replaces the output (default: stderr). The sink gets the full line without newline. */
typedef void(cmr_log_sink_t)(cmr_log_level_t level, const char *line, void *opaque);
void cmr_log_set_sink(cmr_log_sink_t *sink, void *opaque);

/* Values from outside (agent, host, class and method names, header values, file names)
 * go into a line through cmr_log_escape, inside double quotes: `name=\"%s\"`. Quotes,
 * backslashes and control characters (a newline would forge a whole line) become escapes
 * (\", \\, \n, \r, \t, \xHH), bytes >= 0x80 are kept (UTF-8 names stay readable),
 * and a value longer than the buffer is cut with "..." at the end. Returns out, always
 * NUL-terminated (n >= 4). NULL s gives "(null)". */
const char *cmr_log_escape(const char *s, char *out, size_t n);

/* Rate limiting for events that an outsider can trigger at will (rejected messages, refused
 * commands): true at most `per_second` times per second for one limiter, counting what it
 * suppressed in *suppressed (reset to 0 whenever it lets one through, after the caller read
 * it). A zeroed limiter is ready; thread safe. */
typedef struct cmr_log_limiter {
    long long window_s; /* the second being counted */
    unsigned in_window; /* lines let through in it */
    unsigned long long suppressed;
} cmr_log_limiter_t;
bool cmr_log_allow(cmr_log_limiter_t *l, unsigned per_second, unsigned long long *suppressed);

void cmr_log(cmr_log_level_t level, const char *event, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void cmr_logv(cmr_log_level_t level, const char *event, const char *fmt, va_list ap);

#endif

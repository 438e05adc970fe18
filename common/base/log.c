/*
 * log.c - structured log lines (see log.h).
 */
#include "cmr/log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cmr/buf.h"
#include "cmr/clock.h"

static const char *log_program = "cmr";
static _Atomic int log_level = CMR_LOG_INFO;
static cmr_log_sink_t *log_sink;
static void *log_sink_opaque;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *const level_names[] = {"debug", "info", "warn", "error", "off"};

void cmr_log_set_program(const char *prog)
{
    log_program = prog;
}

void cmr_log_set_level(cmr_log_level_t level)
{
    log_level = (int)level;
}

cmr_log_level_t cmr_log_get_level(void)
{
    return (cmr_log_level_t)log_level;
}

int cmr_log_level_parse(const char *name)
{
    for (int i = 0; i <= CMR_LOG_OFF; i++)
        if (strcmp(name, level_names[i]) == 0)
            return i;
    return -1;
}

void cmr_log_set_sink(cmr_log_sink_t *sink, void *opaque)
{
    pthread_mutex_lock(&log_lock);
    log_sink = sink;
    log_sink_opaque = opaque;
    pthread_mutex_unlock(&log_lock);
}

void cmr_logv(cmr_log_level_t level, const char *event, const char *fmt, va_list ap)
{
    if ((int)level < log_level || level >= CMR_LOG_OFF)
        return;
    int64_t now_ns = cmr_wall_ns();
    time_t secs = (time_t)(now_ns / 1000000000);
    struct tm tm;
    char when[32];
    gmtime_r(&secs, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);

    char stack[512];
    cmr_buf_t sb = {0};
    cmr_buf_printf(&sb, "ts=%s.%03dZ level=%s prog=%s event=%s", when, (int)(now_ns / 1000000 % 1000),
                   level_names[level], log_program, event);
    if (fmt && *fmt) {
        cmr_buf_putc(&sb, ' ');
        cmr_buf_vprintf(&sb, fmt, ap);
    }
    const char *line = cmr_buf_ok(&sb) ? cmr_buf_str(&sb) : NULL;
    if (!line) { /* out of memory: still say something */
        snprintf(stack, sizeof stack, "level=%s prog=%s event=%s (log line lost: out of memory)", level_names[level],
                 log_program, event);
        line = stack;
    }
    pthread_mutex_lock(&log_lock);
    if (log_sink) {
        log_sink(level, line, log_sink_opaque);
    } else {
        fputs(line, stderr);
        fputc('\n', stderr);
        fflush(stderr);
    }
    pthread_mutex_unlock(&log_lock);
    cmr_buf_free(&sb);
}

void cmr_log(cmr_log_level_t level, const char *event, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cmr_logv(level, event, fmt, ap);
    va_end(ap);
}

/* The escape of one byte into e (at most 4 bytes); returns its length. */
static size_t escape_byte(unsigned char c, char e[4])
{
    static const char hex[] = "0123456789abcdef";
    const char *named = c == '"'    ? "\\\""
                        : c == '\\' ? "\\\\"
                        : c == '\n' ? "\\n"
                        : c == '\r' ? "\\r"
                        : c == '\t' ? "\\t"
                                    : NULL;
    if (named) {
        memcpy(e, named, 2);
        return 2;
    }
    if (c < 0x20 || c == 0x7f) {
        e[0] = '\\', e[1] = 'x', e[2] = hex[c >> 4], e[3] = hex[c & 15];
        return 4;
    }
    e[0] = (char)c;
    return 1;
}

const char *cmr_log_escape(const char *s, char *out, size_t n)
{
    if (n < 4) {
        if (n)
            out[0] = '\0';
        return out;
    }
    if (!s)
        s = "(null)";
    char e[4];
    size_t total = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        total += escape_byte(*p, e);
    /* Everything when it fits; otherwise as much as leaves room for "..." and the NUL. */
    size_t limit = total + 1 <= n ? n : n - 3, o = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        size_t len = escape_byte(*p, e);
        if (o + len + 1 > limit)
            break;
        memcpy(out + o, e, len);
        o += len;
    }
    if (total + 1 > n)
        memcpy(out + o, "...", 3), o += 3;
    out[o] = '\0';
    return out;
}

bool cmr_log_allow(cmr_log_limiter_t *l, unsigned per_second, unsigned long long *suppressed)
{
    static pthread_mutex_t limit_lock = PTHREAD_MUTEX_INITIALIZER;
    long long now_s = (long long)(cmr_mono_ns() / 1000000000);
    bool allow;
    pthread_mutex_lock(&limit_lock);
    if (l->window_s != now_s) {
        l->window_s = now_s;
        l->in_window = 0;
    }
    allow = l->in_window < per_second;
    if (allow) {
        l->in_window++;
        if (suppressed)
            *suppressed = l->suppressed;
        l->suppressed = 0;
    } else {
        l->suppressed++;
    }
    pthread_mutex_unlock(&limit_lock);
    return allow;
}

/*
 * metrics_http.c - GET /metrics in the Prometheus text exposition format on the common
 * HTTP server (cmr/http_server.h, libmicrohttpd), and the writer of that format. See
 * cmr/metrics_http.h.
 */
#include "cmr/metrics_http.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/clock.h"
#include "cmr/http_server.h"
#include "cmr/log.h"
#include "cmr/rejects.h"
#include "cmr/wire.h"

#ifndef CMR_VERSION
#define CMR_VERSION "unknown"
#endif

#define METRICS_THREADS 2
#define METRICS_CONNECTIONS 64
#define METRICS_TIMEOUT_S 10

struct cmr_metrics_http {
    cmr_http_server_t *server; /* owned */
    cmr_metrics_fill_fn *fill;
    void *opaque; /* the caller's */
    int port;
};

/* Wall clock when the process started (well enough: before main runs). */
static int64_t process_start_ms;

__attribute__((constructor)) static void record_start(void)
{
    process_start_ms = cmr_wall_ms();
}

/* --- the writer ------------------------------------------------------------------------- */

void cmr_prom_escape_label(cmr_buf_t *out, const char *value)
{
    for (const char *p = value ? value : ""; *p; p++) {
        if (*p == '\\')
            cmr_buf_puts(out, "\\\\");
        else if (*p == '"')
            cmr_buf_puts(out, "\\\"");
        else if (*p == '\n')
            cmr_buf_puts(out, "\\n");
        else
            cmr_buf_putc(out, *p);
    }
}

/* HELP text: backslash and newline escaped (quotes stay). */
static void escape_help(cmr_buf_t *out, const char *help)
{
    for (const char *p = help ? help : ""; *p; p++) {
        if (*p == '\\')
            cmr_buf_puts(out, "\\\\");
        else if (*p == '\n')
            cmr_buf_puts(out, "\\n");
        else
            cmr_buf_putc(out, *p);
    }
}

void cmr_prom_family(cmr_buf_t *out, const char *name, const char *type, const char *help)
{
    assert(name && type);
    cmr_buf_printf(out, "# HELP %s ", name);
    escape_help(out, help);
    cmr_buf_printf(out, "\n# TYPE %s %s\n", name, type);
}

static void sample_head(cmr_buf_t *out, const char *name, const cmr_prom_label_t *labels, size_t nlabels)
{
    cmr_buf_puts(out, name);
    if (!nlabels)
        return;
    cmr_buf_putc(out, '{');
    for (size_t i = 0; i < nlabels; i++) {
        cmr_buf_printf(out, "%s%s=\"", i ? "," : "", labels[i].name);
        cmr_prom_escape_label(out, labels[i].value);
        cmr_buf_putc(out, '"');
    }
    cmr_buf_putc(out, '}');
}

void cmr_prom_sample_u64(cmr_buf_t *out, const char *name, const cmr_prom_label_t *labels, size_t nlabels,
                         uint64_t value)
{
    sample_head(out, name, labels, nlabels);
    cmr_buf_printf(out, " %llu\n", (unsigned long long)value);
}

void cmr_prom_rows(cmr_buf_t *out, const cmr_prom_row_t *rows, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        cmr_prom_family(out, rows[i].name, rows[i].type, rows[i].help);
        cmr_prom_sample_u64(out, rows[i].name, NULL, 0, rows[i].value);
    }
}

void cmr_prom_sample_double(cmr_buf_t *out, const char *name, const cmr_prom_label_t *labels, size_t nlabels,
                            double value)
{
    sample_head(out, name, labels, nlabels);
    if (isnan(value))
        cmr_buf_puts(out, " NaN\n");
    else if (isinf(value))
        cmr_buf_puts(out, value > 0 ? " +Inf\n" : " -Inf\n");
    else
        cmr_buf_printf(out, " %.17g\n", value);
}

static void reject_sample(const char *topic, const char *reason, uint64_t count, void *opaque)
{
    cmr_prom_label_t l[2] = {{"topic", topic}, {"reason", reason}};
    cmr_prom_sample_u64(opaque, "cmr_messages_rejected_total", l, 2, count);
}

void cmr_metrics_common(cmr_buf_t *out)
{
    cmr_prom_family(out, "cmr_messages_rejected_total", "counter",
                    "messages rejected (undecodable, wrong type, failed check, refused), per topic and reason");
    cmr_rejects_each(reject_sample, out);
    cmr_prom_family(out, "cmr_messages_past_schema_total", "counter",
                    "messages read under a past version of their schema (schemas/past/), the fields added since at "
                    "their defaults");
    cmr_prom_sample_u64(out, "cmr_messages_past_schema_total", NULL, 0, cmr_wire_past_reads());
    cmr_prom_family(out, "cmr_process_start_time_seconds", "gauge", "start time of the process since the Unix epoch");
    cmr_prom_sample_double(out, "cmr_process_start_time_seconds", NULL, 0, (double)process_start_ms / 1000.0);
    cmr_prom_family(out, "cmr_build_info", "gauge", "always 1; the version of the CMR build in a label");
    cmr_prom_label_t v = {"version", CMR_VERSION};
    cmr_prom_sample_u64(out, "cmr_build_info", &v, 1, 1);
}

/* --- the server ---------------------------------------------------------------------- */

static void on_request(void *opaque, const cmr_http_request_t *req, cmr_http_response_t *res)
{
    cmr_metrics_http_t *m = opaque;
    if (strcmp(req->path, "/metrics") != 0) {
        cmr_http_respond(res, 404, "text/plain; charset=utf-8", "not found: only GET /metrics\n");
        return;
    }
    cmr_buf_t body = {0};
    if (m->fill)
        m->fill(&body, m->opaque);
    cmr_metrics_common(&body);
    size_t len = body.len;
    char *data = cmr_buf_take(&body);
    if (!data) {
        cmr_http_respond(res, 500, "text/plain; charset=utf-8", "out of memory\n");
        return;
    }
    res->status = 200;
    res->content_type = "text/plain; version=0.0.4; charset=utf-8";
    res->body = data; /* the server's now */
    res->len = len;
}

int cmr_metrics_http_start(const cmr_conf_t *conf, cmr_metrics_fill_fn *fill, void *opaque, cmr_metrics_http_t **out,
                           char *errbuf, size_t errlen)
{
    *out = NULL;
    int64_t port;
    if (cmr_conf_get_int(conf, "metrics.port", -1, -1, 65535, &port, errbuf, errlen) != 0)
        return -1;
    if (port < 0)
        return 0;
    const char *addr = cmr_conf_get(conf, "metrics.listen", "127.0.0.1");
    if (!cmr_http_address_valid(addr)) {
        char shown[128];
        snprintf(errbuf, errlen, "metrics.listen: %s is not an IPv4 or IPv6 address (or localhost)",
                 cmr_conf_shown(conf, "metrics.listen", shown, sizeof shown));
        return -1;
    }
    const char *file = cmr_conf_get(conf, "metrics.token_file", "");
    char token[300] = "";
    if (file[0] && cmr_http_token_load(file, token, sizeof token, errbuf, errlen) != 0)
        return -1;
    cmr_metrics_http_t *m = calloc(1, sizeof *m);
    if (!m) {
        snprintf(errbuf, errlen, "out of memory");
        return -1;
    }
    m->fill = fill;
    m->opaque = opaque;
    cmr_http_server_opts_t o = {
        .name = "metrics",
        .address = addr,
        .port = (int)port,
        .threads = METRICS_THREADS,
        .connections = METRICS_CONNECTIONS,
        .timeout_s = METRICS_TIMEOUT_S,
        .not_allowed_type = "text/plain; charset=utf-8",
        .not_allowed_body = "method not allowed: only GET /metrics\n",
        .token = token[0] ? token : NULL,
    };
    int rc = cmr_http_server_start(&o, on_request, m, &m->server, errbuf, errlen);
    explicit_bzero(token, sizeof token);
    if (rc != 0) {
        free(m);
        return -1;
    }
    m->port = cmr_http_server_port(m->server);
    char a[128];
    cmr_log(CMR_LOG_INFO, "metrics.listening", "port=%d address=\"%s\"", m->port, cmr_log_escape(addr, a, sizeof a));
    *out = m;
    return 0;
}

int cmr_metrics_http_port(const cmr_metrics_http_t *m)
{
    return m ? m->port : -1;
}

/* --- consumer lag ---------------------------------------------------------------------- */

void cmr_lag_gauge_init(cmr_lag_gauge_t *g, const char *group)
{
    memset(g, 0, sizeof *g);
    pthread_mutex_init(&g->lock, NULL);
    snprintf(g->group, sizeof g->group, "%s", group ? group : "");
}

void cmr_lag_gauge_refresh(cmr_lag_gauge_t *g, cmr_consumer_t *c)
{
    int64_t now = cmr_mono_ms();
    if (!c || (g->refreshed_ms && now - g->refreshed_ms < 1000))
        return;
    g->refreshed_ms = now;
    cmr_partition_t *parts = NULL;
    size_t n = 0;
    if (cmr_consumer_lag(c, &parts, &n) != 0)
        return;
    pthread_mutex_lock(&g->lock);
    cmr_partition_t *old = g->parts;
    g->parts = parts;
    g->n = n;
    pthread_mutex_unlock(&g->lock);
    free(old);
}

void cmr_lag_gauge_write(cmr_lag_gauge_t *g, cmr_buf_t *out)
{
    cmr_prom_family(out, "cmr_consumer_lag_messages", "gauge",
                    "records of an assigned partition not consumed yet (high watermark minus position)");
    pthread_mutex_lock(&g->lock);
    for (size_t i = 0; i < g->n; i++) {
        if (g->parts[i].offset < 0)
            continue; /* unknown yet */
        char partition[16];
        snprintf(partition, sizeof partition, "%d", (int)g->parts[i].partition);
        cmr_prom_label_t l[] = {{"group", g->group}, {"topic", g->parts[i].topic}, {"partition", partition}};
        cmr_prom_sample_u64(out, "cmr_consumer_lag_messages", l, 3, (uint64_t)g->parts[i].offset);
    }
    pthread_mutex_unlock(&g->lock);
}

void cmr_lag_gauge_free(cmr_lag_gauge_t *g)
{
    free(g->parts);
    g->parts = NULL;
    g->n = 0;
    pthread_mutex_destroy(&g->lock);
}

void cmr_metrics_http_stop(cmr_metrics_http_t *m)
{
    if (!m)
        return;
    cmr_http_server_stop(m->server);
    free(m);
}

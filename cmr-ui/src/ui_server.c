/*
 * ui_server.c - cmr-ui's HTTP server: the routes of docs/UI.md over the common server
 * (cmr/http_server.h, libmicrohttpd), the checks every write passes, the session and the
 * login of a UI bound beyond loopback.
 *
 *   GET  /, /index.html, /css/..., /js/..., /vendor/uplot/...   the front end (ui_static.c)
 *   GET  /health                                             {"status":"ok"}
 *   GET  /api/session                                        what the page shows in its corner
 *   GET  /api/traces..., /api/metrics/..., /api/agents...,
 *        /api/methods?ids=                                   cmr-ingest's answers (ui_ingest.c)
 *   GET  /api/diagnoses/<id>/report?...                      cmr-ingest's /api/diagnoses/<id>
 *   GET  /api/diagnoses[/<id>], /api/environments[/<id>]     the projections (ui_state.c)
 *   POST /api/diagnoses, /api/diagnoses/<id>/stop|exclude,
 *        /api/environments/plan|apply                        the writes (ui_actions.c)
 *   GET  /login, POST /login                                 the token as a cookie (beyond loopback)
 *
 * Writes: refused (403) unless ui.writable, the request carries "X-CMR-Request: 1" (a page of
 * another site cannot add it without a CORS pre-flight, which is never granted) and its
 * Origin, when present, is this server's. Every answer carries a Content-Security-Policy
 * that allows the page's own scripts and nothing else, nosniff and no framing.
 *
 * Ownership: the UI owns everything it starts; see cmr/ui.h.
 */
#include "cmr/ui.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cmr/clock.h"
#include "cmr/diagnoses.h"
#include "cmr/http_server.h"
#include "cmr/ids.h"
#include "cmr/json.h"
#include "cmr/log.h"
#include "ui_internal.h"

#ifndef CMR_UI_WEB_ROOT
#define CMR_UI_WEB_ROOT "cmr-ui/web"
#endif
#define UI_VERSION "1"
#define TOKEN_COOKIE "cmr_token"
#define POST_MAX (1u << 20)
#define UI_TARGET_MAX 4096 /* a passed request's target (path and query) at most */

struct cmr_ui {
    cmr_conf_t *conf; /* owned copy */
    cmr_http_server_t *server;
    ui_state_t *state;
    ui_ingest_t *ingest;
    char web_root[4096];
    char token[260];  /* "" when none */
    char session[65]; /* the sign-in cookie's value: random per process, never the token */
    bool writable;
    pthread_mutex_t health_lock; /* cmr-ingest's health, asked at most every 2 s */
    int64_t health_ms;
    bool health_ok;
};

static const char *const security_headers[] = {
    "Content-Security-Policy",
    "default-src 'self'; img-src 'self' data:; style-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options",
    "nosniff",
    "X-Frame-Options",
    "DENY",
    "Referrer-Policy",
    "no-referrer",
    NULL,
};

/* --- answers ------------------------------------------------------------------------------- */

void ui_error(cmr_http_response_t *res, int status, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ui_json(res, status, json_pack("{s:o}", "error", cmr_json_str(msg)));
}

void ui_json(cmr_http_response_t *res, int status, void *json)
{
    char *text = json ? cmr_json_take(json, CMR_JSON_COMPACT) : NULL;
    free(res->body);
    res->body = text;
    res->len = text ? strlen(text) : 0;
    res->status = text ? status : 500;
    res->content_type = UI_JSON;
    res->cache_control = "no-store";
}

/* --- the checks ---------------------------------------------------------------------------- */

/* The request's Origin, when it has one, names this server (the Host it was sent to). */
static bool same_origin(const cmr_http_request_t *req)
{
    const char *origin = cmr_http_header(req, "Origin"), *host = cmr_http_header(req, "Host");
    if (!origin)
        return true; /* not a browser's cross-site request: those always carry it */
    if (!host)
        return false;
    const char *rest = !strncmp(origin, "http://", 7)    ? origin + 7
                       : !strncmp(origin, "https://", 8) ? origin + 8
                                                         : NULL;
    return rest && !strcmp(rest, host);
}

/* Without a token, cmr-ui answers only requests addressed to a loopback name: a page of
 * another site whose name was made to resolve to 127.0.0.1 (DNS rebinding) sends its own
 * name as Host, and is refused. */
static bool loopback_host(const cmr_http_request_t *req)
{
    const char *host = cmr_http_header(req, "Host");
    if (!host)
        return false;
    char name[300];
    size_t n;
    if (host[0] == '[') { /* [::1]:port */
        n = strcspn(host + 1, "]");
        snprintf(name, sizeof name, "%.*s", (int)n, host + 1);
    } else {
        n = strcspn(host, ":");
        snprintf(name, sizeof name, "%.*s", (int)n, host);
    }
    return cmr_http_address_is_loopback(name);
}

/* 0 when a write may go on; else res is the refusal. */
static int check_write(cmr_ui_t *ui, const cmr_http_request_t *req, cmr_http_response_t *res)
{
    const char *marker = cmr_http_header(req, "X-CMR-Request");
    if (!ui->writable)
        ui_error(res, 403, "this cmr-ui is read-only (ui.writable = false)");
    else if (!marker || strcmp(marker, "1") != 0)
        ui_error(res, 403, "a write must carry the header X-CMR-Request: 1");
    else if (!same_origin(req))
        ui_error(res, 403, "a write must come from this server's own page (Origin)");
    else
        return 0;
    return -1;
}

/* "cmr-ui (127.0.0.1)": who a write is recorded as. */
static void author_of(const cmr_http_request_t *req, char *buf, size_t len)
{
    char addr[INET6_ADDRSTRLEN + 8];
    if (cmr_http_client_address(req, addr, sizeof addr) != 0)
        snprintf(addr, sizeof addr, "?");
    snprintf(buf, len, "cmr-ui (%s)", addr);
}

/* --- routes --------------------------------------------------------------------------------- */

/* cmr-ingest's health, asked at most every 2 s (every open page asks every 10 s). */
static bool ingest_healthy(cmr_ui_t *ui)
{
    pthread_mutex_lock(&ui->health_lock);
    int64_t now = cmr_mono_ms();
    bool ask = now - ui->health_ms > 2000;
    if (ask)
        ui->health_ms = now; /* one asks; the others use the last answer meanwhile */
    bool ok = ui->health_ok;
    pthread_mutex_unlock(&ui->health_lock);
    if (ask) {
        ok = ui_ingest_ok(ui->ingest);
        pthread_mutex_lock(&ui->health_lock);
        ui->health_ok = ok;
        pthread_mutex_unlock(&ui->health_lock);
    }
    return ok;
}

static void session(cmr_ui_t *ui, cmr_http_response_t *res)
{
    ui_json(res, 200,
            json_pack("{s:s,s:I,s:b,s:{s:o,s:b},s:{s:b}}", "version", UI_VERSION, "now_ms", (json_int_t)cmr_wall_ms(),
                      "writable", ui->writable, "ingest", "url", cmr_json_str(ui_ingest_url(ui->ingest)), "ok",
                      ingest_healthy(ui), "topics", "caught_up", ui_state_caught_up(ui->state)));
}

/* The query part of a request-target, with its '?', or "". */
static const char *query_of(const char *target)
{
    const char *q = strchr(target, '?');
    return q ? q : "";
}

/* /api/diagnoses/<id>[/<what>]: copies id (16 hex digits) and points *what at the rest. */
static bool diagnosis_path(const char *path, char id[17], const char **what)
{
    const char *p = path + strlen("/api/diagnoses/");
    size_t n = strcspn(p, "/");
    if (n != 16)
        return false;
    memcpy(id, p, 16);
    id[16] = '\0';
    if (!cmr_diag_id_valid(id))
        return false;
    *what = p[16] == '/' ? p + 17 : p + 16;
    return true;
}

static void get_diagnoses(cmr_ui_t *ui, const cmr_http_request_t *req, cmr_http_response_t *res)
{
    char id[17];
    const char *what;
    if (!strcmp(req->path, "/api/diagnoses")) {
        ui_state_diagnoses(ui->state, res);
    } else if (!diagnosis_path(req->path, id, &what)) {
        ui_error(res, 404, "a diagnosis id is 16 hex digits: /api/diagnoses/<id>");
    } else if (!*what) {
        ui_state_diagnosis(ui->state, id, res);
    } else if (!strcmp(what, "report")) {
        char target[8192];
        snprintf(target, sizeof target, "/api/diagnoses/%s%s", id, query_of(req->target));
        ui_ingest_get(ui->ingest, target, res);
    } else {
        ui_error(res, 404, "no such route: /api/diagnoses/<id>/%s", what);
    }
}

static bool starts(const char *path, const char *prefix)
{
    size_t n = strlen(prefix);
    return !strncmp(path, prefix, n) && (path[n] == '\0' || path[n] == '/');
}

static void route_get(cmr_ui_t *ui, const cmr_http_request_t *req, cmr_http_response_t *res)
{
    const char *p = req->path;
    if (strlen(req->target) > UI_TARGET_MAX)
        ui_error(res, 414, "the request target is longer than %d bytes", UI_TARGET_MAX);
    else if (strstr(p, "/.") || strstr(p, "//"))
        ui_error(res, 404, "no such path: dot segments and empty segments are never served");
    else if (!strcmp(p, "/health"))
        ui_json(res, 200, json_pack("{s:s}", "status", "ok"));
    else if (!strcmp(p, "/api/session"))
        session(ui, res);
    else if (starts(p, "/api/traces") || starts(p, "/api/metrics") || starts(p, "/api/agents") ||
             !strcmp(p, "/api/methods"))
        ui_ingest_get(ui->ingest, req->target, res);
    else if (starts(p, "/api/diagnoses"))
        get_diagnoses(ui, req, res);
    else if (!strcmp(p, "/api/environments"))
        ui_state_environments(ui->state, res);
    else if (!strncmp(p, "/api/environments/", 18) && p[18] && !strchr(p + 18, '/'))
        ui_state_environment(ui->state, p + 18, res);
    else if (starts(p, "/api"))
        ui_error(res, 404, "no such route: %s (docs/UI.md)", p);
    else if (!ui_static_serve(ui->web_root, p, res))
        cmr_http_respond(res, 404, "text/plain; charset=utf-8", "not found\n");
}

static void route_post(cmr_ui_t *ui, const cmr_http_request_t *req, cmr_http_response_t *res)
{
    if (check_write(ui, req, res) != 0)
        return;
    char author[128], id[17];
    const char *what;
    author_of(req, author, sizeof author);
    const char *p = req->path;
    if (!strcmp(p, "/api/diagnoses"))
        ui_action_diagnosis_start(ui->conf, ui->state, author, req->body, res);
    else if (starts(p, "/api/diagnoses") && diagnosis_path(p, id, &what) && !strcmp(what, "stop"))
        ui_action_diagnosis_stop(ui->conf, ui->state, author, id, res);
    else if (starts(p, "/api/diagnoses") && diagnosis_path(p, id, &what) && !strcmp(what, "exclude"))
        ui_action_diagnosis_exclude(ui->conf, ui->state, author, id, req->body, res);
    else if (!strcmp(p, "/api/environments/plan") || !strcmp(p, "/api/environments/apply"))
        ui_action_environments(ui->conf, ui->state, author, req->body, req->body_len, p[18] == 'a', res);
    else
        ui_error(res, 404, "no such write: POST %s (docs/UI.md)", p);
}

/* POST /login with token=...: a session cookie (a random value of this process, never the
 * token); GET /login: the form. */
static void login(cmr_ui_t *ui, const cmr_http_request_t *req, cmr_http_response_t *res)
{
    if (strcmp(req->method, "POST") != 0) {
        if (!ui_static_serve(ui->web_root, "/login.html", res))
            cmr_http_respond(res, 404, "text/plain; charset=utf-8", "not found\n");
        return;
    }
    const char *v = !strncmp(req->body, "token=", 6) ? req->body + 6 : "";
    char given[300];
    snprintf(given, sizeof given, "%.*s", (int)strcspn(v, "&\r\n"), v);
    bool decoded = cmr_http_url_decode(given) == 0;
    if (!*ui->token || !decoded || !same_origin(req) || !cmr_http_token_equal(ui->token, given)) {
        cmr_log(CMR_LOG_WARN, "ui.login_refused", "note=\"a wrong token or another origin\"");
        cmr_http_respond(res, 403, "text/plain; charset=utf-8", "wrong token\n");
        return;
    }
    char cookie[400];
    snprintf(cookie, sizeof cookie, "%s=%s; Path=/; HttpOnly; SameSite=Strict", TOKEN_COOKIE, ui->session);
    cmr_http_respond(res, 303, "text/plain; charset=utf-8", "signed in\n");
    res->set_cookie = strdup(cookie);
    res->location = "/";
}

static void handle(void *opaque, const cmr_http_request_t *req, cmr_http_response_t *res)
{
    cmr_ui_t *ui = opaque;
    if (!*ui->token && !loopback_host(req))
        ui_error(res, 403, "this cmr-ui answers requests to 127.0.0.1, ::1 or localhost only (it has no access token)");
    else if (!strcmp(req->path, "/login"))
        login(ui, req, res);
    else if (!req->authorized) /* an open path (the sign-in page's style sheet) */
        route_get(ui, req, res);
    else if (!strcmp(req->method, "POST"))
        route_post(ui, req, res);
    else
        route_get(ui, req, res);
}

/* --- start and stop ------------------------------------------------------------------------ */

static int load_token(const cmr_conf_t *conf, const char *key, char *out, size_t outlen, char *err, size_t errlen)
{
    const char *path = cmr_conf_get(conf, key, "");
    *out = '\0';
    if (!*path)
        return 0;
    char terr[512];
    if (cmr_http_token_load(path, out, outlen, terr, sizeof terr) != 0) {
        snprintf(err, errlen, "%s: %s", key, terr);
        return -1;
    }
    return 0;
}

static int start_server(cmr_ui_t *ui, char *err, size_t errlen)
{
    int64_t port, threads, conns, timeout;
    if (cmr_conf_get_int(ui->conf, "ui.port", 8480, 0, 65535, &port, err, errlen) ||
        cmr_conf_get_int(ui->conf, "ui.threads", 8, 1, 64, &threads, err, errlen) ||
        cmr_conf_get_int(ui->conf, "ui.connections", 1100, 1, 100000, &conns, err, errlen) ||
        cmr_conf_get_int(ui->conf, "ui.timeout_s", 60, 1, 3600, &timeout, err, errlen))
        return -1;
    static const char *const open_paths[] = {"/css/app.css", NULL};
    cmr_http_server_opts_t o = CMR_HTTP_SERVER_DEFAULTS;
    o.name = "ui";
    o.address = cmr_conf_get(ui->conf, "ui.address", "127.0.0.1");
    o.port = (int)port;
    o.threads = (unsigned)threads;
    o.connections = (unsigned)conns;
    o.timeout_s = (unsigned)timeout;
    o.not_allowed_type = UI_JSON;
    o.not_allowed_body = "{\"error\":\"method not allowed\"}";
    o.token = *ui->token ? ui->token : NULL;
    o.token_cookie = TOKEN_COOKIE;
    o.cookie_secret = ui->session;
    o.login_path = "/login";
    o.open_paths = open_paths;
    o.post_max = POST_MAX;
    o.headers = security_headers;
    return cmr_http_server_start(&o, handle, ui, &ui->server, err, errlen);
}

cmr_ui_t *cmr_ui_start(const cmr_conf_t *conf, char *err, size_t errlen)
{
    cmr_ui_t *ui = calloc(1, sizeof *ui);
    if (!ui || !(ui->conf = cmr_conf_dup(conf))) {
        free(ui);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    snprintf(ui->web_root, sizeof ui->web_root, "%s", cmr_conf_get(conf, "ui.web_root", CMR_UI_WEB_ROOT));
    pthread_mutex_init(&ui->health_lock, NULL);
    uint8_t rnd[32];
    if (cmr_random_bytes(rnd, sizeof rnd) != 0) {
        snprintf(err, errlen, "no randomness for the sign-in cookie");
        cmr_ui_stop(ui);
        return NULL;
    }
    cmr_hex(rnd, sizeof rnd, ui->session);
    /* a transactional id of its own: an apply from the page fences neither one from the CLI
     * nor one from another cmr-ui */
    if (!cmr_conf_get(ui->conf, "config.transactional_id", NULL)) {
        char txn[64];
        snprintf(txn, sizeof txn, "cmr-ui-apply-%.8s", ui->session + 32);
        cmr_conf_set(ui->conf, "config.transactional_id", txn, "cmr-ui");
    }
    char ingest_token[260];
    int64_t ingest_timeout;
    if (cmr_conf_get_bool(conf, "ui.writable", true, &ui->writable, err, errlen) ||
        cmr_conf_get_int(conf, "ui.ingest_timeout_ms", 30000, 100, 600000, &ingest_timeout, err, errlen) ||
        load_token(conf, "ui.token_file", ui->token, sizeof ui->token, err, errlen) ||
        load_token(conf, "ui.ingest_token_file", ingest_token, sizeof ingest_token, err, errlen) ||
        ui_static_check(ui->web_root, err, errlen) ||
        !(ui->ingest = ui_ingest_new(cmr_conf_get(conf, "ui.ingest_url", "http://127.0.0.1:8470"),
                                     *ingest_token ? ingest_token : NULL, (int)ingest_timeout, err, errlen)) ||
        !(ui->state = ui_state_start(conf, err, errlen)) || start_server(ui, err, errlen) != 0) {
        cmr_ui_stop(ui);
        return NULL;
    }
    char a[128];
    cmr_log(CMR_LOG_INFO, "ui.listening", "address=\"%s\" port=%d ingest=\"%s\" writable=%s web_root=\"%s\"",
            cmr_log_escape(cmr_conf_get(conf, "ui.address", "127.0.0.1"), a, sizeof a),
            cmr_http_server_port(ui->server), ui_ingest_url(ui->ingest), ui->writable ? "true" : "false", ui->web_root);
    return ui;
}

int cmr_ui_port(const cmr_ui_t *ui)
{
    return cmr_http_server_port(ui->server);
}

void cmr_ui_stop(cmr_ui_t *ui)
{
    if (!ui)
        return;
    cmr_http_server_stop(ui->server);
    ui_state_stop(ui->state);
    ui_ingest_free(ui->ingest);
    cmr_conf_destroy(ui->conf);
    pthread_mutex_destroy(&ui->health_lock);
    free(ui);
}

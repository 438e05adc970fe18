/*
 * http_server.c - the wrapper over libmicrohttpd every CMR HTTP endpoint runs on: address
 * handling (IPv4, IPv6, dual stack, localhost), MHD's internal thread pool (epoll where
 * available), connection limit and timeout, GET/HEAD (and POST with a bounded body when
 * the server takes it), the access token (header or cookie), response bodies owned here.
 * See cmr/http_server.h.
 */
#include "cmr/http_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <microhttpd.h>

#include "cmr/buf.h"
#include "cmr/file.h"
#include "cmr/log.h"

struct cmr_http_server {
    struct MHD_Daemon *daemon; /* owned */
    cmr_http_handler_fn *handler;
    void *opaque; /* the caller's */
    char name[64];
    char not_allowed_type[128];
    char *not_allowed_body;        /* owned */
    char *token;                   /* owned; NULL: no authentication (loopback only) */
    char *token_cookie;            /* owned; NULL: the header only */
    char *cookie_secret;           /* owned; NULL: no cookie */
    char *login_path;              /* owned; NULL: none */
    const char *const *open_paths; /* the caller's */
    const char *const *headers;
    size_t post_max;
    int port;
};

/* --- requests ----------------------------------------------------------------------------- */

const char *cmr_http_query(const cmr_http_request_t *req, const char *key)
{
    const char *v = MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, key);
    if (v)
        return v;
    /* "?k" (no '='): MHD keeps the key with a NULL value, which the lookup cannot tell
     * from an absent key; the exists variant can. */
    const char *vv = NULL;
    return MHD_lookup_connection_value_n(req->conn, MHD_GET_ARGUMENT_KIND, key, strlen(key), &vv, NULL) == MHD_YES
               ? ""
               : NULL;
}

typedef struct each_ctx {
    cmr_http_query_fn *fn;
    void *opaque;
    size_t visited;
} each_ctx_t;

static enum MHD_Result each_value(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void)kind;
    each_ctx_t *c = cls;
    c->visited++;
    return c->fn(c->opaque, key, value ? value : "") ? MHD_NO : MHD_YES;
}

size_t cmr_http_query_each(const cmr_http_request_t *req, cmr_http_query_fn *fn, void *opaque)
{
    each_ctx_t c = {fn, opaque, 0};
    MHD_get_connection_values(req->conn, MHD_GET_ARGUMENT_KIND, each_value, &c);
    return c.visited;
}

const char *cmr_http_header(const cmr_http_request_t *req, const char *name)
{
    return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

const char *cmr_http_cookie(const cmr_http_request_t *req, const char *name)
{
    return MHD_lookup_connection_value(req->conn, MHD_COOKIE_KIND, name);
}

int cmr_http_client_address(const cmr_http_request_t *req, char *buf, size_t len)
{
    const union MHD_ConnectionInfo *i = MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = i ? i->client_addr : NULL;
    if (sa && sa->sa_family == AF_INET &&
        inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, buf, (socklen_t)len))
        return 0;
    if (sa && sa->sa_family == AF_INET6 &&
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, buf, (socklen_t)len))
        return 0;
    return -1;
}

bool cmr_http_token_equal(const char *a, const char *b)
{
    size_t n = strlen(a), m = strlen(b);
    unsigned diff = (unsigned)(n ^ m);
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned)(unsigned char)a[i] ^ (unsigned char)(i < m ? b[i] : 0);
    return diff == 0;
}

static bool is_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static int hex_value(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c - 'A' + 10;
}

int cmr_http_url_decode(char *s)
{
    char *o = s;
    for (; *s; s++) {
        if (*s == '+') {
            *o++ = ' ';
        } else if (*s == '%') {
            if (!is_hex(s[1]) || !is_hex(s[2]))
                return -1;
            *o++ = (char)(hex_value(s[1]) * 16 + hex_value(s[2]));
            s += 2;
        } else {
            *o++ = *s;
        }
    }
    *o = '\0';
    return 0;
}

bool cmr_http_target_bad_escape(const char *target)
{
    for (const char *p = target ? target : ""; *p; p++)
        if (*p == '%' && (!is_hex(p[1]) || !is_hex(p[2])))
            return true;
    return false;
}

void cmr_http_respond(cmr_http_response_t *res, int status, const char *content_type, const char *text)
{
    free(res->body);
    res->status = status;
    res->content_type = content_type;
    res->body = text ? strdup(text) : NULL;
    res->len = res->body ? strlen(res->body) : 0;
}

/* --- MHD callbacks ---------------------------------------------------------------------- */

/* Per request: the request-target as received (MHD hands the handler only the decoded
 * path) and whether MHD already called on_request once. Made by on_uri (it becomes the
 * request's context), freed by on_completed. */
typedef struct req_ctx {
    bool called;
    bool too_big;   /* the body went beyond post_max: the rest is read and dropped, 413 */
    size_t dropped; /* bytes read and dropped since */
    cmr_buf_t body; /* POST: the body so far (owned) */
    char target[];  /* owned */
} req_ctx_t;

static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
    (void)cls;
    (void)c;
    size_t n = strlen(uri ? uri : "");
    req_ctx_t *x = malloc(sizeof *x + n + 1);
    if (x) {
        x->called = false;
        x->too_big = false;
        x->dropped = 0;
        x->body = (cmr_buf_t){0};
        memcpy(x->target, uri ? uri : "", n + 1);
    }
    return x;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **req_cls, enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)c;
    (void)toe;
    req_ctx_t *x = *req_cls;
    if (x)
        cmr_buf_free(&x->body);
    free(x);
    *req_cls = NULL;
}

/* A streamed answer's callbacks, as MHD calls them. */
typedef struct stream {
    long (*read)(void *ctx, char *buf, size_t max);
    void (*free)(void *ctx);
    void *ctx;
} stream_t;

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    stream_t *st = cls;
    long n = st->read(st->ctx, buf, max);
    return n > 0 ? (ssize_t)n : n == 0 ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
}

static void stream_free(void *cls)
{
    stream_t *st = cls;
    if (st->free)
        st->free(st->ctx);
    free(st);
}

/* The MHD response of a handler's answer: its body, or its stream. NULL on no memory (what
 * the answer owned is freed). */
static struct MHD_Response *make_response(cmr_http_response_t *res)
{
    if (res->stream_read) {
        free(res->body);
        res->body = NULL;
        stream_t *st = malloc(sizeof *st);
        struct MHD_Response *r =
            st ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, stream_read, st, stream_free) : NULL;
        if (st && r) {
            *st = (stream_t){res->stream_read, res->stream_free, res->stream_ctx};
            return r;
        }
        free(st);
        if (res->stream_free)
            res->stream_free(res->stream_ctx);
        return NULL;
    }
    struct MHD_Response *r =
        MHD_create_response_from_buffer(res->body ? res->len : 0, res->body ? res->body : (void *)"",
                                        res->body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!r)
        free(res->body);
    return r;
}

/* An answer (the handler's, or the server's own): status, type, body or stream, the headers
 * it asks for, Allow on a 405, WWW-Authenticate on a 401, and the server's headers on every
 * one. Takes res's body (or stream) and cookie. */
static enum MHD_Result queue_res(const cmr_http_server_t *s, struct MHD_Connection *c, cmr_http_response_t *res)
{
    if (res->status < 100 || res->status > 999)
        res->status = MHD_HTTP_INTERNAL_SERVER_ERROR;
    struct MHD_Response *r = make_response(res);
    if (!r) {
        free(res->set_cookie);
        return MHD_NO;
    }
    if (res->content_type)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, res->content_type);
    if (res->status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, s->post_max ? "GET, HEAD, POST" : "GET, HEAD");
    if (res->status == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"cmr\"");
    if (res->cache_control)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, res->cache_control);
    if (res->set_cookie)
        MHD_add_response_header(r, MHD_HTTP_HEADER_SET_COOKIE, res->set_cookie);
    if (res->location)
        MHD_add_response_header(r, MHD_HTTP_HEADER_LOCATION, res->location);
    free(res->set_cookie);
    for (const char *const *h = s->headers; h && h[0] && h[1]; h += 2)
        MHD_add_response_header(r, h[0], h[1]);
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)res->status, r);
    MHD_destroy_response(r);
    return rc;
}

/* An answer of the server's own, before any handler: a copy of text (a literal type). */
static enum MHD_Result answer_own(const cmr_http_server_t *s, struct MHD_Connection *c, int status, const char *type,
                                  const char *text, const char *location)
{
    cmr_http_response_t res = {.status = status, .content_type = type, .location = location};
    res.body = strdup(text);
    res.len = res.body ? strlen(res.body) : 0;
    return queue_res(s, c, &res);
}

/* Whether the request carries the server's token ("Authorization: Bearer <token>"), in
 * time that does not depend on where it differs. */
static bool authorized(const cmr_http_server_t *s, struct MHD_Connection *c)
{
    if (!s->token)
        return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (h && strncmp(h, "Bearer ", 7) == 0 && cmr_http_token_equal(s->token, h + 7))
        return true;
    const char *k =
        s->token_cookie && s->cookie_secret ? MHD_lookup_connection_value(c, MHD_COOKIE_KIND, s->token_cookie) : NULL;
    return k && cmr_http_token_equal(s->cookie_secret, k);
}

/* Paths served without the token: the login path and the open ones. */
static bool open_path(const cmr_http_server_t *s, const char *url)
{
    if (s->login_path && !strcmp(url, s->login_path))
        return true;
    for (const char *const *p = s->open_paths; p && *p; p++)
        if (!strcmp(url, *p))
            return true;
    return false;
}

static enum MHD_Result unauthorized(const cmr_http_server_t *s, struct MHD_Connection *c, const char *method)
{
    const char *accept = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT);
    if (s->login_path && !strcmp(method, MHD_HTTP_METHOD_GET) && accept && strstr(accept, "text/html"))
        return answer_own(s, c, MHD_HTTP_SEE_OTHER, "text/plain; charset=utf-8", "sign in first\n",
                          s->login_path); /* a person's browser: to the sign-in page */
    return answer_own(s, c, MHD_HTTP_UNAUTHORIZED, "text/plain; charset=utf-8",
                      "an access token is required: Authorization: Bearer <token>\n", NULL);
}

/* Reads a POST body chunk into x (or drops it once beyond post_max). */
static bool take_upload(const cmr_http_server_t *s, req_ctx_t *x, const char *upload, size_t *upload_size)
{
    if (!x->too_big && x->body.len + *upload_size <= s->post_max) {
        cmr_buf_put(&x->body, upload, *upload_size);
        if (x->body.oom)
            x->too_big = true;
    } else {
        x->too_big = true;
        x->dropped += *upload_size;
    }
    *upload_size = 0;
    /* a chunked body far past the limit: not read to its end, the connection is closed */
    return x->dropped <= 8 * s->post_max;
}

/* A POST whose Content-Length says it is too big: answered at once (MHD then closes). */
static bool declared_too_big(const cmr_http_server_t *s, struct MHD_Connection *c)
{
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    return cl && strtoull(cl, NULL, 10) > s->post_max;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **req_cls)
{
    (void)version;
    cmr_http_server_t *s = cls;
    req_ctx_t *x = *req_cls;
    bool ok = authorized(s, c);
    if (!ok && !open_path(s, url))
        return unauthorized(s, c, method); /* before the method, the path, anything */
    bool post = s->post_max && !strcmp(method, MHD_HTTP_METHOD_POST);
    if (!post && strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
        /* at once, body unread: MHD closes the connection after this answer */
        return answer_own(s, c, MHD_HTTP_METHOD_NOT_ALLOWED, s->not_allowed_type, s->not_allowed_body, NULL);
    }
    if (!x)
        return MHD_NO; /* out of memory in on_uri: drop the connection */
    if (!x->called) {
        /* MHD's first call comes before it knows the request is complete; a response
         * queued now makes it close the connection. Answer at the second call: keep-alive. */
        x->called = true;
        if (post && declared_too_big(s, c))
            return answer_own(s, c, MHD_HTTP_CONTENT_TOO_LARGE, "text/plain; charset=utf-8", "request body too large\n",
                              NULL);
        return MHD_YES;
    }
    if (*upload_size) {
        if (post && !take_upload(s, x, upload, upload_size))
            return MHD_NO;
        if (!post)
            *upload_size = 0; /* a GET with a body: ignored */
        return MHD_YES;
    }
    if (x->too_big)
        return answer_own(s, c, MHD_HTTP_CONTENT_TOO_LARGE, "text/plain; charset=utf-8", "request body too large\n",
                          NULL);
    /* a cmr_buf keeps a NUL after its bytes: the handler's body is a string too */
    cmr_http_request_t req = {
        method, url, x->target, post && x->body.data ? (const char *)x->body.data : "", post ? x->body.len : 0, ok, c};
    cmr_http_response_t res = {0};
    s->handler(s->opaque, &req, &res);
    return queue_res(s, c, &res);
}

/* --- addresses ----------------------------------------------------------------------------- */

bool cmr_http_address_is_loopback(const char *address)
{
    if (!address)
        return true; /* the default */
    if (!strcmp(address, "localhost"))
        return true;
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, address, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, address, &a6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&a6) || (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
    return false;
}

/* Fills *ss from an address (see the header). *flags gets the MHD address-family flags.
 * 0, or -1 when it is neither. */
static int parse_address(const char *addr, int port, struct sockaddr_storage *ss, unsigned *flags)
{
    memset(ss, 0, sizeof *ss);
    struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
    if (!strcmp(addr, "localhost"))
        addr = "127.0.0.1";
    if (inet_pton(AF_INET, addr, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        *flags = 0;
        return 0;
    }
    if (inet_pton(AF_INET6, addr, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        /* "::" is every interface: IPv4 too (IPV6_V6ONLY off); any other literal just itself */
        *flags = IN6_IS_ADDR_UNSPECIFIED(&a6->sin6_addr) ? MHD_USE_DUAL_STACK : MHD_USE_IPv6;
        return 0;
    }
    return -1;
}

bool cmr_http_address_valid(const char *address)
{
    struct sockaddr_storage ss;
    unsigned flags;
    return address && parse_address(address, 0, &ss, &flags) == 0;
}

/* MHD's own messages (bind failures, clients gone mid-request) go to the CMR log at debug:
 * the caller reports what matters (errbuf). */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[512], esc[600];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    cmr_log(CMR_LOG_DEBUG, "http.server_message", "server=%s message=\"%s\"", (const char *)cls,
            cmr_log_escape(msg, esc, sizeof esc));
}

int cmr_http_server_start(const cmr_http_server_opts_t *opts, cmr_http_handler_fn *handler, void *opaque,
                          cmr_http_server_t **out, char *errbuf, size_t errlen)
{
    *out = NULL;
    const char *addr = opts->address ? opts->address : "127.0.0.1";
    const char *name = opts->name ? opts->name : "http";
    if (opts->port < 0 || opts->port > 65535) {
        snprintf(errbuf, errlen, "%s: port %d is not 0..65535", name, opts->port);
        return -1;
    }
    struct sockaddr_storage ss;
    unsigned family_flags;
    if (parse_address(addr, opts->port, &ss, &family_flags) != 0) {
        snprintf(errbuf, errlen, "%s: \"%.200s\" is not an IPv4 or IPv6 address (or localhost)", name, addr);
        return -1;
    }
    bool loopback = cmr_http_address_is_loopback(addr);
    if (!loopback && (!opts->token || strlen(opts->token) < 16)) {
        snprintf(errbuf, errlen,
                 "%s: %.200s is beyond loopback: an access token is required (at least 16 characters; see "
                 "docs/SECURITY.md, \"Ports\")",
                 name, addr);
        return -1;
    }
    cmr_http_server_t *s = calloc(1, sizeof *s);
    if (!s ||
        !(s->not_allowed_body = strdup(opts->not_allowed_body ? opts->not_allowed_body : "method not allowed\n")) ||
        (opts->token && !(s->token = strdup(opts->token))) ||
        (opts->token_cookie && !(s->token_cookie = strdup(opts->token_cookie))) ||
        (opts->cookie_secret && !(s->cookie_secret = strdup(opts->cookie_secret))) ||
        (opts->login_path && !(s->login_path = strdup(opts->login_path)))) {
        if (s) {
            free(s->not_allowed_body);
            free(s->token);
            free(s->token_cookie);
            free(s->cookie_secret);
        }
        free(s);
        snprintf(errbuf, errlen, "out of memory");
        return -1;
    }
    s->handler = handler;
    s->opaque = opaque;
    s->headers = opts->headers;
    s->open_paths = opts->open_paths;
    s->post_max = opts->post_max;
    snprintf(s->name, sizeof s->name, "%s", name);
    snprintf(s->not_allowed_type, sizeof s->not_allowed_type, "%s",
             opts->not_allowed_type ? opts->not_allowed_type : "text/plain; charset=utf-8");
    unsigned threads = opts->threads ? opts->threads : 2;
    unsigned connections = opts->connections ? opts->connections : 64;
    unsigned timeout_s = opts->timeout_s ? opts->timeout_s : 10;
    /* MHD_USE_AUTO: epoll on Linux, poll or select elsewhere; the internal threads. */
    unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG | family_flags;
    s->daemon = MHD_start_daemon(flags, (uint16_t)opts->port, NULL, NULL, on_request, s,
                                 /* first, so that MHD's messages all go to the CMR log */
                                 MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s->name, MHD_OPTION_THREAD_POOL_SIZE, threads,
                                 MHD_OPTION_CONNECTION_LIMIT, connections, MHD_OPTION_CONNECTION_TIMEOUT, timeout_s,
                                 MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss, MHD_OPTION_URI_LOG_CALLBACK, on_uri,
                                 NULL, MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL, MHD_OPTION_END);
    if (!s->daemon) {
        int e = errno;
        snprintf(errbuf, errlen, "%s: cannot listen on %.200s port %d (%s)", name, addr, opts->port,
                 e ? strerror(e) : "address in use or not available");
        free(s->not_allowed_body);
        free(s->token);
        free(s->token_cookie);
        free(s->cookie_secret);
        free(s->login_path);
        free(s);
        return -1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info && info->port ? info->port : opts->port;
    if (!loopback) {
        char a[128];
        cmr_log(CMR_LOG_INFO, "http.not_loopback",
                "server=%s address=\"%s\" port=%d note=\"every request needs the access token\"", s->name,
                cmr_log_escape(addr, a, sizeof a), s->port);
    }
    *out = s;
    return 0;
}

int cmr_http_server_port(const cmr_http_server_t *s)
{
    return s ? s->port : -1;
}

void cmr_http_server_stop(cmr_http_server_t *s)
{
    if (!s)
        return;
    MHD_stop_daemon(s->daemon);
    free(s->not_allowed_body);
    free(s->token);
    free(s->token_cookie);
    free(s->cookie_secret);
    free(s->login_path);
    free(s);
}

int cmr_http_token_load(const char *path, char *out, size_t outlen, char *err, size_t errlen)
{
    cmr_buf_t b = {0};
    char ferr[256];
    unsigned mode = 0;
    if (!path || cmr_file_read_mode(path, 4096, &b, &mode, ferr, sizeof ferr) != 0) {
        snprintf(err, errlen, "access token file: %s", path ? ferr : "no path");
        cmr_buf_free(&b);
        return -1;
    }
    if (mode & 077) {
        snprintf(err, errlen, "access token file %.200s: readable by others (chmod 600 it)", path);
        cmr_buf_free(&b);
        return -1;
    }
    size_t n = b.len;
    while (n && (b.data[n - 1] == '\n' || b.data[n - 1] == '\r'))
        n--;
    bool ok = n >= 16 && n <= 256 && n < outlen;
    for (size_t i = 0; ok && i < n; i++)
        ok = b.data[i] > 0x20 && b.data[i] < 0x7f;
    if (ok) {
        memcpy(out, b.data, n);
        out[n] = '\0';
    } else {
        snprintf(err, errlen,
                 "access token file %.200s: the token must be 16 to 256 printable ASCII characters without spaces",
                 path);
    }
    cmr_buf_free(&b);
    return ok ? 0 : -1;
}

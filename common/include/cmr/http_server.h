/*
 * http_server.h - the CMR's one HTTP server: a thin wrapper over libmicrohttpd that every
 * HTTP endpoint (a worker's GET /metrics, cmr-ingest's JSON API) is built on.
 *
 *   static void handle(void *opaque, const cmr_http_request_t *req, cmr_http_response_t *res) {
 *       if (strcmp(req->path, "/hello")) { cmr_http_respond(res, 404, "text/plain", "no\n"); return; }
 *       const char *who = cmr_http_query(req, "who");         // decoded; NULL when absent
 *       res->status = 200;
 *       res->content_type = "text/plain";
 *       res->body = strdup(who ? who : "world");              // the server frees it
 *       res->len = res->body ? strlen(res->body) : 0;
 *   }
 *   cmr_http_server_opts_t o = CMR_HTTP_SERVER_DEFAULTS;      // 127.0.0.1, any free port
 *   o.name = "hello";
 *   cmr_http_server_t *s;
 *   if (cmr_http_server_start(&o, handle, NULL, &s, err, sizeof err) != 0) ...
 *   ... cmr_http_server_port(s) ...
 *   cmr_http_server_stop(s);
 *
 * What MHD does, not us: parsing requests (request line, headers, %-decoding of the path and
 * the query parameters), HTTP/1.1 keep-alive and pipelining, Content-Length, HEAD (the body
 * is dropped), request size limits (431/414 from MHD), malformed requests (400 from MHD).
 * The wrapper adds: address handling (IPv4, IPv6, "localhost", dual stack on "::"), the
 * threading mode (MHD_USE_AUTO with an internal thread pool: epoll on Linux), the
 * connection limit and idle timeout, GET/HEAD only (every other method 405 with
 * "Allow: GET, HEAD" and the server's own body) unless the server takes POST
 * (opts.post_max: bodies of at most that many bytes, 413 beyond, read whole before the
 * handler runs), headers every answer carries (opts.headers), and owning the handler's body.
 *
 * Addresses: an IPv4 literal, an IPv6 literal (bound IPv6 only), "::" (dual stack: IPv4
 * and IPv6 on every interface), or "localhost" (= 127.0.0.1). Loopback is 127.0.0.0/8 and
 * ::1 (cmr_http_address_is_loopback). A server bound elsewhere needs an access token
 * (opts.token, cmr_http_token_load): every request must then carry it as a bearer token,
 * compared in constant time; others get 401 before anything else is looked at. A server a
 * browser uses may also take a session cookie instead (opts.token_cookie named, holding
 * opts.cookie_secret: a value of the caller's, never the token itself) and leave a few paths
 * open (opts.login_path, where the handler sets that cookie, and opts.open_paths; the handler
 * sees req->authorized false there); a browser asking for a page without either (GET with
 * Accept: text/html) is sent to the login path (303) instead of a 401.
 *
 * Threads: the handler runs on one of the server's threads, concurrently with the caller
 * and with other requests: it must touch only what is synchronised. Idle connections cost
 * no thread: a connection that sends nothing is closed after timeout_s, and at most
 * max_connections are open (further ones are accepted and closed at once).
 *
 * Ownership: the server owns its daemon and every response body handed to it (freed with
 * free() once sent); opts strings are copied at start; `opaque` stays the caller's and must
 * outlive cmr_http_server_stop().
 */
#ifndef CMR_HTTP_SERVER_H
#define CMR_HTTP_SERVER_H

#include <stdbool.h>
#include <stddef.h>

typedef struct cmr_http_server cmr_http_server_t;

/* One request as the handler sees it. Valid during the handler call only. */
typedef struct cmr_http_request {
    const char *method; /* "GET" or "HEAD" (HEAD: MHD sends the headers only), or "POST" */
    const char *path;   /* %-decoded by MHD, without the query: "/api/traces" */
    const char *target; /* the request-target as received (path and query, not decoded) */
    const char *body;   /* POST: the whole body, NUL-terminated after body_len bytes; else "" */
    size_t body_len;
    bool authorized; /* carried the token (always true on a server without one) */
    void *conn;      /* private: the MHD connection */
} cmr_http_request_t;

/* What the handler answers. body: malloc'd (or NULL = empty), owned by the server after
 * the handler returns, len bytes; content_type a string that outlives the server (a
 * literal). status 0 (not set) is answered 500. */
typedef struct cmr_http_response {
    int status;
    const char *content_type;
    char *body;
    size_t len;
    const char *cache_control; /* a literal, or NULL: none */
    char *set_cookie;          /* malloc'd (freed by the server), or NULL: none */
    const char *location;      /* a literal (a redirect's target), or NULL: none */
    /* Instead of body: an answer written while it is sent (chunked transfer encoding), for
     * answers too large to build whole. stream_read(stream_ctx, buf, max) writes up to max
     * bytes into buf and returns the count, 0 at the end, -1 on an error (the connection is
     * closed); it runs on a server thread whenever the client can take more. stream_free
     * (stream_ctx) is called once the answer is sent or abandoned; the server owns ctx
     * from the handler's return. */
    long (*stream_read)(void *ctx, char *buf, size_t max);
    void (*stream_free)(void *ctx);
    void *stream_ctx;
} cmr_http_response_t;

typedef void(cmr_http_handler_fn)(void *opaque, const cmr_http_request_t *req, cmr_http_response_t *res);

typedef struct cmr_http_server_opts {
    const char *name;             /* for logs and errors ("metrics", "ingest.http"); copied */
    const char *address;          /* see above; NULL = 127.0.0.1 */
    int port;                     /* 0 = any free port (cmr_http_server_port tells which) */
    unsigned threads;             /* the pool; 0 = 2 */
    unsigned connections;         /* open connections at most; 0 = 64 */
    unsigned timeout_s;           /* an idle connection is closed after this; 0 = 10 */
    const char *not_allowed_type; /* the 405 answer's Content-Type and body; literals */
    const char *not_allowed_body;
    const char *token;             /* every request must carry "Authorization: Bearer <token>" (401
                          otherwise); NULL = none, which only a loopback address may have;
                          copied */
    size_t post_max;               /* 0: POST is refused (405); else the largest body taken */
    const char *token_cookie;      /* a cookie of this name holding cookie_secret authorizes too */
    const char *cookie_secret;     /* the cookie's value (16+ characters); NULL = no cookie */
    const char *login_path;        /* this exact path is served without the token; NULL = none */
    const char *const *open_paths; /* NULL-terminated: more exact paths served without it */
    const char *const *headers;    /* name, value, ..., NULL: added to every answer; literals */
} cmr_http_server_opts_t;

#define CMR_HTTP_SERVER_DEFAULTS                                                                             \
    {                                                                                                        \
        .name = "http", .address = "127.0.0.1", .port = 0, .threads = 2, .connections = 64, .timeout_s = 10, \
        .not_allowed_type = "text/plain; charset=utf-8", .not_allowed_body = "method not allowed\n"          \
    }

/* Starts serving. 0 with *out set, or -1 with errbuf filled (bad address, port in use, an
 * address beyond loopback without a token).
 * Logs event=NAME.listening address=A port=P (the log line scripts and tests look for
 * is the caller's, if it wants another). */
int cmr_http_server_start(const cmr_http_server_opts_t *opts, cmr_http_handler_fn *handler, void *opaque,
                          cmr_http_server_t **out, char *errbuf, size_t errlen);
/* The bound port. */
int cmr_http_server_port(const cmr_http_server_t *s);
/* Stops accepting, waits for the threads (requests in flight finish), frees. NULL is a no-op. */
void cmr_http_server_stop(cmr_http_server_t *s);

/* One decoded query parameter (the first of that name), NULL when absent; "" for "?k". */
const char *cmr_http_query(const cmr_http_request_t *req, const char *key);
/* Every query parameter in request order (repeated names too); stops early when fn returns
 * non-zero. Returns how many were visited. */
typedef int(cmr_http_query_fn)(void *opaque, const char *key, const char *value);
size_t cmr_http_query_each(const cmr_http_request_t *req, cmr_http_query_fn *fn, void *opaque);
/* Decodes a query or form value in place ('+' is a space, %XX a byte): 0, or -1 on a '%'
 * not followed by two hex digits (s is then partly decoded). */
int cmr_http_url_decode(char *s);
/* true when the target holds a '%' not followed by two hex digits (MHD keeps those as
 * they are; a server that wants to refuse them answers 400). */
bool cmr_http_target_bad_escape(const char *target);

/* A request header (the first of that name, case-insensitive), NULL when absent. */
const char *cmr_http_header(const cmr_http_request_t *req, const char *name);
/* A cookie of the request, NULL when absent. */
const char *cmr_http_cookie(const cmr_http_request_t *req, const char *name);
/* The client's address as text ("127.0.0.1", "::1"): 0, or -1 when unknown. */
int cmr_http_client_address(const cmr_http_request_t *req, char *buf, size_t len);
/* a and b are equal, in time that depends on their lengths only. */
bool cmr_http_token_equal(const char *a, const char *b);

/* Sets res to status with a copy of text (content_type a literal). */
void cmr_http_respond(cmr_http_response_t *res, int status, const char *content_type, const char *text);

/* Reads an access token from a file (the token, a line end optional): at least 16 and at
 * most 256 printable ASCII characters, no spaces; the file readable by its owner only
 * (like trust.signing_key). 0 with the token in out, or -1 with err. */
int cmr_http_token_load(const char *path, char *out, size_t outlen, char *err, size_t errlen);

/* true for what cmr_http_server_start accepts as an address (see above). */
bool cmr_http_address_valid(const char *address);
/* true for 127.0.0.0/8, ::1, ::ffff:127.x and "localhost". */
bool cmr_http_address_is_loopback(const char *address);

#endif

/*
 * ui_ingest.c - the reads cmr-ui passes to cmr-ingest's HTTP API (docs/INGEST.md): traces,
 * trees, exports, metrics, agents and diagnosis reports come from there unchanged, so the
 * UI and `curl` see the same answers, and cmr-ui does not open any store. libcurl does the
 * HTTP; each of the server's threads keeps its own easy handle (a pthread key), so its
 * connection to cmr-ingest stays open between requests.
 *
 * Bounds: an answer larger than UI_INGEST_MAX bytes is refused (502), every request has a
 * timeout, and only http:// and https:// URLs are taken.
 *
 * Ownership: the forwarder owns its URL, token and the key; each thread's handle is freed
 * when the thread ends (the key's destructor).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "cmr/buf.h"
#include "cmr/log.h"
#include "ui_internal.h"

#define UI_INGEST_MAX (512u << 20)

struct ui_ingest {
    char url[1024]; /* without a trailing '/' */
    char auth[320]; /* "Authorization: Bearer ..." or "" */
    int timeout_ms;
    pthread_key_t key; /* CURL * per thread */
};

static void curl_init_once(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void handle_free(void *h)
{
    curl_easy_cleanup(h);
}

ui_ingest_t *ui_ingest_new(const char *base_url, const char *token, int timeout_ms, char *err, size_t errlen)
{
    if (strncmp(base_url, "http://", 7) && strncmp(base_url, "https://", 8)) {
        snprintf(err, errlen, "ui.ingest_url: \"%.200s\" is not an http:// or https:// URL", base_url);
        return NULL;
    }
    size_t n = strlen(base_url);
    while (n && base_url[n - 1] == '/')
        n--;
    if (n >= sizeof((ui_ingest_t *)0)->url) {
        snprintf(err, errlen, "ui.ingest_url: too long");
        return NULL;
    }
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, curl_init_once);
    ui_ingest_t *g = calloc(1, sizeof *g);
    if (!g || pthread_key_create(&g->key, handle_free) != 0) {
        free(g);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    memcpy(g->url, base_url, n);
    g->url[n] = '\0';
    if (token)
        snprintf(g->auth, sizeof g->auth, "Authorization: Bearer %s", token);
    g->timeout_ms = timeout_ms;
    return g;
}

void ui_ingest_free(ui_ingest_t *g)
{
    if (!g)
        return;
    CURL *h = pthread_getspecific(g->key);
    if (h) {
        curl_easy_cleanup(h);
        pthread_setspecific(g->key, NULL);
    }
    pthread_key_delete(g->key);
    free(g);
}

const char *ui_ingest_url(const ui_ingest_t *g)
{
    return g->url;
}

static size_t on_data(char *p, size_t size, size_t n, void *ud)
{
    cmr_buf_t *b = ud;
    if (b->len + n > UI_INGEST_MAX)
        return 0; /* too big: curl ends the transfer with CURLE_WRITE_ERROR */
    cmr_buf_put(b, p, size * n);
    return b->oom ? 0 : size * n;
}

static CURL *thread_handle(ui_ingest_t *g)
{
    CURL *h = pthread_getspecific(g->key);
    if (!h && (h = curl_easy_init()) != NULL)
        pthread_setspecific(g->key, h);
    return h;
}

/* GET url: the status (0 when no answer), the body into b, the content type into type. */
static long get(ui_ingest_t *g, const char *target, int timeout_ms, cmr_buf_t *b, char *type, size_t typelen,
                CURLcode *rc)
{
    CURL *h = thread_handle(g);
    if (!h) {
        *rc = CURLE_OUT_OF_MEMORY;
        return 0;
    }
    char url[8192];
    if ((size_t)snprintf(url, sizeof url, "%s%s", g->url, target) >= sizeof url) {
        *rc = CURLE_URL_MALFORMAT;
        return 0;
    }
    struct curl_slist *hdrs = *g->auth ? curl_slist_append(NULL, g->auth) : NULL;
    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, b);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 2000L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_ACCEPT_ENCODING, "");
    *rc = curl_easy_perform(h);
    long status = 0;
    char *ct = NULL;
    if (*rc == CURLE_OK) {
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_getinfo(h, CURLINFO_CONTENT_TYPE, &ct);
    }
    snprintf(type, typelen, "%s", ct ? ct : "application/json");
    curl_slist_free_all(hdrs);
    return status;
}

/* Content types cmr-ingest answers with; anything else is passed as octets. */
static const char *known_type(const char *t)
{
    static const char *const types[] = {"application/json", "text/plain; charset=utf-8", "application/x-protobuf"};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        if (!strncmp(t, types[i], strlen(types[i])))
            return types[i];
    return "application/octet-stream";
}

void ui_ingest_get(ui_ingest_t *g, const char *target, cmr_http_response_t *res)
{
    cmr_buf_t b = {0};
    char type[128];
    CURLcode rc;
    long status = get(g, target, g->timeout_ms, &b, type, sizeof type, &rc);
    if (status == 0) {
        cmr_buf_free(&b);
        cmr_log(CMR_LOG_WARN, "ui.ingest_unreachable", "url=\"%s\" error=\"%s\"", g->url, curl_easy_strerror(rc));
        if (rc == CURLE_OPERATION_TIMEDOUT)
            ui_error(res, 504, "cmr-ingest did not answer in time (%s)", g->url);
        else if (rc == CURLE_WRITE_ERROR)
            ui_error(res, 502, "cmr-ingest's answer is larger than %u MiB", UI_INGEST_MAX >> 20);
        else
            ui_error(res, 502, "cmr-ingest cannot be reached at %s: %s", g->url, curl_easy_strerror(rc));
        return;
    }
    res->status = (int)status;
    res->content_type = known_type(type);
    res->len = b.len;
    res->body = b.len ? (char *)b.data : NULL; /* taken */
    if (!b.len)
        cmr_buf_free(&b);
}

bool ui_ingest_ok(ui_ingest_t *g)
{
    cmr_buf_t b = {0};
    char type[128];
    CURLcode rc;
    long status = get(g, "/health", 1000, &b, type, sizeof type, &rc);
    cmr_buf_free(&b);
    return status == 200;
}

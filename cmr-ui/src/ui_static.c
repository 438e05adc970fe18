/*
 * ui_static.c - the front end's files: everything under the web root (index.html, css/,
 * js/), served as they are (no build step), and uPlot's distribution from the web root's
 * node_modules (installed from the lockfile by scripts/lib.sh) under /vendor/uplot/.
 *
 * Only names made of [A-Za-z0-9._-] segments are served, none starting with '.', so
 * nothing outside the web root (no "..", no hidden files) and nothing of node_modules but
 * uPlot's dist/ is reachable. Files are read at each request (they are small; an edit shows
 * at once) with Cache-Control: no-cache.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmr/buf.h"
#include "cmr/file.h"
#include "ui_internal.h"

#define STATIC_MAX (8u << 20)

static const struct {
    const char *ext, *type;
} types[] = {
    {".html", "text/html; charset=utf-8"},
    {".js", "text/javascript; charset=utf-8"},
    {".css", "text/css; charset=utf-8"},
    {".svg", "image/svg+xml"},
    {".png", "image/png"},
    {".json", "application/json"},
};

static const char *type_of(const char *path)
{
    const char *dot = strrchr(path, '.');
    for (size_t i = 0; dot && i < sizeof types / sizeof *types; i++)
        if (!strcmp(dot, types[i].ext))
            return types[i].type;
    return NULL;
}

/* Each '/'-separated segment is [A-Za-z0-9._-]+ and does not start with '.'. */
static bool safe_path(const char *p)
{
    if (*p != '/')
        return false;
    bool seg_start = true;
    for (p++; *p; p++) {
        char c = *p;
        if (c == '/') {
            if (seg_start)
                return false; /* "//" or a trailing '/' */
            seg_start = true;
            continue;
        }
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
                  c == '-';
        if (!ok || (seg_start && c == '.'))
            return false;
        seg_start = false;
    }
    return !seg_start;
}

static bool serve_file(const char *file, const char *type, cmr_http_response_t *res)
{
    cmr_buf_t b = {0};
    char err[256];
    if (cmr_file_read(file, STATIC_MAX, &b, err, sizeof err) != 0) {
        cmr_buf_free(&b);
        return false;
    }
    res->status = 200;
    res->content_type = type;
    res->cache_control = "no-cache";
    res->len = b.len;
    res->body = (char *)b.data;
    if (!res->body)
        res->body = calloc(1, 1);
    return true;
}

bool ui_static_serve(const char *web_root, const char *path, cmr_http_response_t *res)
{
    char file[4096];
    if (!strcmp(path, "/"))
        path = "/index.html";
    if (!safe_path(path) || !strncmp(path, "/node_modules/", 14))
        return false;
    const char *type = type_of(path);
    if (!type)
        return false;
    int n;
    if (!strncmp(path, "/vendor/uplot/", 14))
        n = snprintf(file, sizeof file, "%s/node_modules/uplot/dist/%s", web_root, path + 14);
    else if (!strncmp(path, "/vendor/", 8))
        return false;
    else
        n = snprintf(file, sizeof file, "%s%s", web_root, path);
    return n > 0 && (size_t)n < sizeof file && serve_file(file, type, res);
}

int ui_static_check(const char *web_root, char *err, size_t errlen)
{
    char file[4096];
    snprintf(file, sizeof file, "%s/index.html", web_root);
    if (access(file, R_OK) != 0) {
        snprintf(err, errlen, "ui.web_root: %.200s has no index.html (the front end is cmr-ui/web)", web_root);
        return -1;
    }
    snprintf(file, sizeof file, "%s/node_modules/uplot/dist/uPlot.esm.js", web_root);
    if (access(file, R_OK) != 0) {
        snprintf(err, errlen,
                 "ui.web_root: %.200s has no node_modules/uplot (install it: npm ci --prefix %.200s, which "
                 "scripts/lib.sh does)",
                 web_root, web_root);
        return -1;
    }
    return 0;
}

/*
 * ui_internal.h - the parts of cmr-ui and how they meet (see cmr/ui.h for the whole):
 *
 *   ui_server.c   the HTTP server: routes, security checks, session, login
 *   ui_static.c   the front end's files (web root) and uPlot from its npm package
 *   ui_ingest.c   reads passed to cmr-ingest's HTTP API (libcurl)
 *   ui_state.c    projections of cmr.config, cmr.diagnoses, cmr.diagnosis-trees and
 *                 cmr.budget, followed by one thread, rendered as JSON
 *   ui_actions.c  the writes: diagnoses started, stopped, narrowed; environments planned
 *                 and applied (cmr-config's own functions, so the checks are the CLI's)
 *
 * Every handler below fills a cmr_http_response_t (body malloc'd, owned by the server).
 */
#ifndef CMR_UI_INTERNAL_H
#define CMR_UI_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cmr/conf.h"
#include "cmr/http_server.h"

#define UI_JSON "application/json"

/* {"error": msg} with status. */
void ui_error(cmr_http_response_t *res, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A jansson value as the body (taken: freed here). 500 when it cannot be rendered. */
void ui_json(cmr_http_response_t *res, int status, void *json /* json_t * */);

/* --- ui_static.c --------------------------------------------------------------------------- */

/* Serves GET path from the web root (index.html for "/"), /vendor/uplot/... from its npm
 * package under the web root's node_modules. false when the path is not a file we serve. */
bool ui_static_serve(const char *web_root, const char *path, cmr_http_response_t *res);
/* The web root holds index.html and uPlot: 0, or -1 with err (how to install it). */
int ui_static_check(const char *web_root, char *err, size_t errlen);

/* --- ui_ingest.c --------------------------------------------------------------------------- */

typedef struct ui_ingest ui_ingest_t;
/* base_url: "http://127.0.0.1:8470"; token: NULL or the ingest API's access token. NULL with
 * err on a bad URL or no memory. */
ui_ingest_t *ui_ingest_new(const char *base_url, const char *token, int timeout_ms, char *err, size_t errlen);
void ui_ingest_free(ui_ingest_t *g);
const char *ui_ingest_url(const ui_ingest_t *g);
/* GET base_url + target (a path and query, already encoded): the answer's status, type and
 * body into res, or 502 / 504 when cmr-ingest cannot be reached. Thread-safe. */
void ui_ingest_get(ui_ingest_t *g, const char *target, cmr_http_response_t *res);
/* GET /health answered 200 within a second. */
bool ui_ingest_ok(ui_ingest_t *g);

/* --- ui_state.c ---------------------------------------------------------------------------- */

typedef struct ui_state ui_state_t;
/* Starts following the three topics (from their beginning). NULL with err. */
ui_state_t *ui_state_start(const cmr_conf_t *conf, char *err, size_t errlen);
void ui_state_stop(ui_state_t *s);
/* Every topic was read to the end it had once. */
bool ui_state_caught_up(ui_state_t *s);
/* Waits (at most timeout_ms) until diagnosis id is at revision or newer: true when it is. */
bool ui_state_wait_diagnosis(ui_state_t *s, const char *id, int64_t revision, int timeout_ms);
/* Waits until diagnosis id has ended. */
bool ui_state_wait_ended(ui_state_t *s, const char *id, int timeout_ms);
/* How many records changed the configuration since the start; waits until more than
 * `before` did. */
int64_t ui_state_config_changes(ui_state_t *s);
bool ui_state_wait_config_changes(ui_state_t *s, int64_t before, int timeout_ms);

void ui_state_diagnoses(ui_state_t *s, cmr_http_response_t *res);
void ui_state_diagnosis(ui_state_t *s, const char *id, cmr_http_response_t *res);
void ui_state_environments(ui_state_t *s, cmr_http_response_t *res);
void ui_state_environment(ui_state_t *s, const char *id, cmr_http_response_t *res);

/* --- ui_actions.c -------------------------------------------------------------------------- */

/* author: who the change is recorded as ("cmr-ui (127.0.0.1)"). */
void ui_action_diagnosis_start(const cmr_conf_t *conf, ui_state_t *st, const char *author, const char *body,
                               cmr_http_response_t *res);
void ui_action_diagnosis_stop(const cmr_conf_t *conf, ui_state_t *st, const char *author, const char *id,
                              cmr_http_response_t *res);
void ui_action_diagnosis_exclude(const cmr_conf_t *conf, ui_state_t *st, const char *author, const char *id,
                                 const char *body, cmr_http_response_t *res);
void ui_action_environments(const cmr_conf_t *conf, ui_state_t *st, const char *author, const char *yaml, size_t len,
                            bool apply, cmr_http_response_t *res);

#endif

/*
 * ui_actions.c - the writes a person makes on the page, done by cmr-config's own functions
 * (cmr/cfg_diagnose.h, cmr/cfg_cli.h) so that the page and the CLI check the same things
 * and write the same messages:
 *
 *   start a diagnosis      the body's fields become the diag.* options of
 *                          `cmr-config diagnose start` (cmr_cfg_diag_from_options), then
 *                          cmr_cfg_diag_start: one new revision on cmr.diagnoses
 *   stop a diagnosis       cmr_cfg_diag_stop
 *   untick / tick methods  cmr_cfg_diag_exclude: a revision with the exclude list changed
 *   plan / apply           cmr_cfg_apply_text: the YAML `cmr-config apply` reads, validated
 *                          whole, published in one transaction (or only planned)
 *
 * A write answers once cmr-ui's own projection shows it (or after 5 s), so the page's next
 * read sees what it just did. Writes run one at a time.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cmr/buf.h"
#include "cmr/cfg_cli.h"
#include "cmr/cfg_diagnose.h"
#include "cmr/json.h"
#include "cmr/log.h"
#include "ui_internal.h"

#define SEEN_WAIT_MS 5000
#define MAX_LIST 256

static pthread_mutex_t write_lock = PTHREAD_MUTEX_INITIALIZER;

/* Writes run one at a time; one that finds another under way is refused at once (503)
 * rather than holding a server thread while it waits. true when the caller has the lock. */
static bool write_begin(cmr_http_response_t *res)
{
    if (pthread_mutex_trylock(&write_lock) == 0)
        return true;
    ui_error(res, 503, "another change is being written; try again in a moment");
    return false;
}

/* The HTTP status of a cmr-config result. */
static int status_of(int rc)
{
    switch (rc) {
    case 0:
    case CMR_CFG_DIAG_UNCHANGED: return 200;
    case CMR_CFG_DIAG_BAD: return 400;
    case CMR_CFG_DIAG_NOT_FOUND: return 404;
    case CMR_CFG_DIAG_ENDED:
    case CMR_CFG_DIAG_CONFLICT: return 409;
    default: /* UNREADABLE, PUBLISH: the cluster did not answer */ return 503;
    }
}

/* --- reading the body -------------------------------------------------------------------- */

static json_t *parse_object(const char *body, cmr_http_response_t *res)
{
    json_error_t je;
    json_t *j = json_loads(body, JSON_REJECT_DUPLICATES, &je);
    if (!j || !json_is_object(j)) {
        if (j)
            ui_error(res, 400, "the body must be a JSON object");
        else
            ui_error(res, 400, "the body is not JSON: %s (line %d)", je.text, je.line);
        json_decref(j);
        return NULL;
    }
    return j;
}

/* A field that is a string, a number or a list of strings, as an option's text
 * ("a,b" for a list). -1 with res on another type or a list item with a comma. */
static int option_text(const char *key, json_t *v, cmr_buf_t *out, cmr_http_response_t *res)
{
    if (json_is_string(v)) {
        cmr_buf_puts(out, json_string_value(v));
    } else if (json_is_integer(v)) {
        cmr_buf_printf(out, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    } else if (json_is_real(v)) {
        cmr_buf_printf(out, "%g", json_real_value(v));
    } else if (json_is_boolean(v)) {
        cmr_buf_puts(out, json_is_true(v) ? "true" : "false");
    } else if (json_is_array(v)) {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x)
        {
            if (!json_is_string(x) || strchr(json_string_value(x), ',')) {
                ui_error(res, 400, "%s: a list of strings without commas", key);
                return -1;
            }
            if (i)
                cmr_buf_putc(out, ',');
            cmr_buf_puts(out, json_string_value(x));
        }
    } else {
        ui_error(res, 400, "%s: a string, a number or a list", key);
        return -1;
    }
    return 0;
}

/* The fields POST /api/diagnoses takes and the diag.* options they are. */
static const struct {
    const char *field, *key;
} start_fields[] = {
    {"environment", "diag.env"}, {"method", "diag.method"}, {"agents", "diag.agents"},
    {"when", "diag.when"},       {"ttl", "diag.ttl"},       {"max_hits", "diag.max_hits"},
    {"budget", "diag.budget"},   {"depth", "diag.depth"},   {"include_jdk", "diag.include_jdk"},
    {"exclude", "diag.exclude"}, {"trace", "diag.trace"},   {"until_normal", "diag.until_normal"},
};

/* The body as diag.* options in a copy of conf. NULL with res. */
static cmr_conf_t *start_options(const cmr_conf_t *conf, json_t *body, cmr_http_response_t *res)
{
    cmr_conf_t *c = cmr_conf_dup(conf);
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v)
    {
        const char *opt = NULL;
        for (size_t i = 0; i < sizeof start_fields / sizeof *start_fields && !opt; i++)
            if (!strcmp(key, start_fields[i].field))
                opt = start_fields[i].key;
        cmr_buf_t text = {0};
        int bad =
            !opt ? (ui_error(res, 400, "unknown field \"%s\" (docs/UI.md)", key), -1) : option_text(key, v, &text, res);
        if (!bad && (!c || cmr_conf_set(c, opt, text.len ? (const char *)text.data : "", "ui") != 0)) {
            ui_error(res, 500, "out of memory");
            bad = -1;
        }
        cmr_buf_free(&text);
        if (bad) {
            cmr_conf_destroy(c);
            return NULL;
        }
    }
    return c;
}

/* --- diagnoses ------------------------------------------------------------------------------ */

void ui_action_diagnosis_start(const cmr_conf_t *conf, ui_state_t *st, const char *author, const char *body,
                               cmr_http_response_t *res)
{
    json_t *j = parse_object(body, res);
    cmr_conf_t *c = j ? start_options(conf, j, res) : NULL;
    json_decref(j);
    if (!c)
        return;
    cmr_diagnosis_t d;
    cmr_cfg_diag_mem_t mem;
    char err[512];
    if (cmr_cfg_diag_from_options(c, author, &d, &mem, err, sizeof err) != 0) {
        ui_error(res, 400, "%s", err);
    } else {
        int rc = CMR_CFG_DIAG_PUBLISH;
        if (write_begin(res)) {
            rc = cmr_cfg_diag_start(c, &d, err, sizeof err);
            pthread_mutex_unlock(&write_lock);
        } else {
            cmr_cfg_diag_mem_free(&mem);
            cmr_conf_destroy(c);
            return;
        }
        if (rc != 0) {
            ui_error(res, status_of(rc), "%s", err);
        } else {
            cmr_log(CMR_LOG_INFO, "ui.diagnosis_started", "id=%s author=\"%s\"", d.id, author);
            ui_state_wait_diagnosis(st, d.id, 1, SEEN_WAIT_MS);
            ui_json(res, 201, json_pack("{s:s,s:I}", "id", d.id, "revision", (json_int_t)1));
        }
    }
    cmr_cfg_diag_mem_free(&mem);
    cmr_conf_destroy(c);
}

void ui_action_diagnosis_stop(const cmr_conf_t *conf, ui_state_t *st, const char *author, const char *id,
                              cmr_http_response_t *res)
{
    char err[512];
    if (!write_begin(res))
        return;
    int rc = cmr_cfg_diag_stop(conf, id, author, err, sizeof err);
    pthread_mutex_unlock(&write_lock);
    if (rc != 0) {
        ui_error(res, status_of(rc), "%s", err);
        return;
    }
    cmr_log(CMR_LOG_INFO, "ui.diagnosis_stopped", "id=%s author=\"%s\"", id, author);
    ui_state_wait_ended(st, id, SEEN_WAIT_MS);
    ui_json(res, 200, json_pack("{s:s,s:s}", "id", id, "state", "ended"));
}

/* A list field of strings into v (pointers into the JSON). -1 with res. */
static int string_list(json_t *body, const char *key, const char **v, size_t *n, cmr_http_response_t *res)
{
    json_t *a = json_object_get(body, key);
    *n = 0;
    if (!a)
        return 0;
    if (!json_is_array(a) || json_array_size(a) > MAX_LIST) {
        ui_error(res, 400, "%s: a list of at most %d methods", key, MAX_LIST);
        return -1;
    }
    size_t i;
    json_t *x;
    json_array_foreach(a, i, x)
    {
        if (!json_is_string(x)) {
            ui_error(res, 400, "%s: a list of methods (strings)", key);
            return -1;
        }
        v[(*n)++] = json_string_value(x);
    }
    return 0;
}

void ui_action_diagnosis_exclude(const cmr_conf_t *conf, ui_state_t *st, const char *author, const char *id,
                                 const char *body, cmr_http_response_t *res)
{
    json_t *j = parse_object(body, res);
    if (!j)
        return;
    const char *add[MAX_LIST], *remove[MAX_LIST];
    size_t nadd, nremove;
    const char *key;
    json_t *v;
    json_object_foreach(j, key, v)
    {
        if (strcmp(key, "exclude") && strcmp(key, "include")) {
            ui_error(res, 400, "unknown field \"%s\": the body is {exclude:[methods], include:[methods]}", key);
            json_decref(j);
            return;
        }
    }
    if (string_list(j, "exclude", add, &nadd, res) || string_list(j, "include", remove, &nremove, res)) {
        json_decref(j);
        return;
    }
    char err[512];
    int64_t revision = 0;
    if (!write_begin(res)) {
        json_decref(j);
        return;
    }
    int rc = cmr_cfg_diag_exclude(conf, id, add, nadd, remove, nremove, author, &revision, err, sizeof err);
    pthread_mutex_unlock(&write_lock);
    json_decref(j);
    if (rc != 0 && rc != CMR_CFG_DIAG_UNCHANGED) {
        ui_error(res, status_of(rc), "%s", err);
        return;
    }
    cmr_log(CMR_LOG_INFO, "ui.diagnosis_revised", "id=%s revision=%" PRId64 " excluded=%zu included=%zu author=\"%s\"",
            id, revision, nadd, nremove, author);
    ui_state_wait_diagnosis(st, id, revision, SEEN_WAIT_MS);
    ui_json(res, 200,
            json_pack("{s:s,s:I,s:b}", "id", id, "revision", (json_int_t)revision, "unchanged",
                      rc == CMR_CFG_DIAG_UNCHANGED));
}

/* --- environments --------------------------------------------------------------------------- */

void ui_action_environments(const cmr_conf_t *conf, ui_state_t *st, const char *author, const char *yaml, size_t len,
                            bool apply, cmr_http_response_t *res)
{
    (void)st;
    cmr_conf_t *c = cmr_conf_dup(conf);
    if (!c || cmr_conf_set(c, "config.author", author, "ui") != 0) {
        cmr_conf_destroy(c);
        ui_error(res, 500, "out of memory");
        return;
    }
    char *out = NULL, *errs = NULL;
    size_t outlen = 0, errlen = 0;
    FILE *fo = open_memstream(&out, &outlen), *fe = open_memstream(&errs, &errlen);
    int rc = -1;
    int64_t before = ui_state_config_changes(st);
    if (fo && fe && write_begin(res)) {
        rc = cmr_cfg_apply_text(c, yaml, len, "the page", !apply, fo, fe);
        pthread_mutex_unlock(&write_lock);
    } else if (fo && fe) { /* busy: res says so */
        fclose(fo);
        fclose(fe);
        free(out);
        free(errs);
        cmr_conf_destroy(c);
        return;
    }
    if (fo)
        fclose(fo);
    if (fe)
        fclose(fe);
    cmr_conf_destroy(c);
    if (!fo || !fe) {
        free(out);
        free(errs);
        ui_error(res, 500, "out of memory");
        return;
    }
    cmr_log(CMR_LOG_INFO, apply ? "ui.environments_applied" : "ui.environments_planned", "ok=%s author=\"%s\"",
            rc == 0 ? "true" : "false", author);
    /* applied changes: answer once the page's next read shows them */
    if (apply && rc == 0 && out && !strstr(out, "no changes"))
        ui_state_wait_config_changes(st, before, SEEN_WAIT_MS);
    /* 422: the document was refused, nothing was sent; 503: the cluster failed (the output
     * says what was or was not published) */
    ui_json(res,
            rc == 0   ? 200
            : rc == 1 ? 422
                      : 503,
            json_pack("{s:b,s:b,s:o,s:o}", "ok", rc == 0, "applied", apply && rc == 0, "output",
                      cmr_json_str(out ? out : ""), "error", errs && *errs ? cmr_json_str(errs) : json_null()));
    free(out);
    free(errs);
}

/*
 * diagnoses.c - the projection of cmr.diagnoses (see diagnoses.h).
 *
 * Each diagnosis is an entry with all its revisions (decoded messages, owned), oldest
 * first; a map finds the entry of an id. Revisions are few per diagnosis (start, an end,
 * perhaps a change), and diagnoses are few: the whole history is kept in memory.
 */
#include "cmr/diagnoses.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/buf.h"
#include "cmr/bytes.h"
#include "cmr/ids.h"
#include "cmr/map.h"
#include "cmr/wire.h"

typedef struct entry {
    cmr_msg_t **revs; /* owned; revs[n - 1] is the latest */
    size_t n, cap;
} entry_t;

struct cmr_diagnoses {
    entry_t *entries; /* in the order first seen */
    size_t n, cap;
    cmr_map_t index; /* id -> position + 1 */
};

cmr_diagnoses_t *cmr_diagnoses_new(void)
{
    return calloc(1, sizeof(cmr_diagnoses_t));
}

void cmr_diagnoses_free(cmr_diagnoses_t *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++) {
        for (size_t k = 0; k < s->entries[i].n; k++) {
            cmr_msg_free(s->entries[i].revs[k]);
            free(s->entries[i].revs[k]);
        }
        free(s->entries[i].revs);
    }
    free(s->entries);
    cmr_map_free(&s->index);
    free(s);
}

bool cmr_diag_id_valid(const char *s)
{
    if (!s || strlen(s) != 16)
        return false;
    for (const char *p = s; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return false;
    return true;
}

uint64_t cmr_diag_id_number(const char *s)
{
    uint64_t id;
    return cmr_diag_id_valid(s) && cmr_id64_parse(s, 16, &id) == 0 ? id : 0;
}

static entry_t *entry_of(const cmr_diagnoses_t *s, const char *id)
{
    void *v = cmr_map_get(&s->index, id, strlen(id));
    return v ? &s->entries[(uintptr_t)v - 1] : NULL;
}

/* Takes m (a decoded Diagnosis): 1 kept, 0 not newer (freed), -1 out of memory (freed). */
static int take(cmr_diagnoses_t *s, cmr_msg_t *m)
{
    const cmr_diagnosis_t *d = &m->u.diagnosis;
    entry_t *e = entry_of(s, d->id);
    if (e && e->revs[e->n - 1]->u.diagnosis.revision >= d->revision) {
        cmr_msg_free(m);
        free(m);
        return 0;
    }
    if (!e) {
        if (CMR_ARRAY_GROW(s->entries, s->cap, s->n + 1) != 0 ||
            cmr_map_put(&s->index, d->id, strlen(d->id), (void *)(uintptr_t)(s->n + 1)) != 0) {
            cmr_msg_free(m);
            free(m);
            return -1;
        }
        e = &s->entries[s->n++];
        memset(e, 0, sizeof *e);
    }
    if (CMR_ARRAY_GROW(e->revs, e->cap, e->n + 1) != 0) {
        cmr_msg_free(m);
        free(m);
        return -1;
    }
    e->revs[e->n++] = m;
    return 1;
}

int cmr_diagnoses_apply(cmr_diagnoses_t *s, const void *payload, size_t len, char *err, size_t errlen)
{
    cmr_msg_t *m = malloc(sizeof *m);
    if (!m)
        return -1;
    if (cmr_msg_decode(payload, len, m, err, errlen) != CMR_WIRE_OK) {
        free(m);
        return -1;
    }
    if (m->type != CMR_MSG_DIAGNOSIS || !cmr_diag_id_valid(m->u.diagnosis.id) || m->u.diagnosis.revision < 1) {
        snprintf(err, errlen, "not a Diagnosis with a valid id and revision");
        cmr_msg_free(m);
        free(m);
        return -1;
    }
    return take(s, m);
}

int cmr_diagnoses_apply_msg(cmr_diagnoses_t *s, const cmr_diagnosis_t *d)
{
    cmr_buf_t enc = {0};
    char err[256];
    int rc = -1;
    if (cmr_msg_encode(CMR_MSG_DIAGNOSIS, d, &enc, err, sizeof err) == CMR_WIRE_OK)
        rc = cmr_diagnoses_apply(s, enc.data, enc.len, err, sizeof err);
    cmr_buf_free(&enc);
    return rc;
}

const cmr_diagnosis_t *cmr_diagnoses_get(const cmr_diagnoses_t *s, const char *id)
{
    const entry_t *e = entry_of(s, id);
    return e ? &e->revs[e->n - 1]->u.diagnosis : NULL;
}

size_t cmr_diagnoses_count(const cmr_diagnoses_t *s)
{
    return s->n;
}

const cmr_diagnosis_t *cmr_diagnoses_at(const cmr_diagnoses_t *s, size_t i)
{
    return i < s->n ? &s->entries[i].revs[s->entries[i].n - 1]->u.diagnosis : NULL;
}

size_t cmr_diagnoses_history(const cmr_diagnoses_t *s, const char *id, const cmr_diagnosis_t **out, size_t max)
{
    const entry_t *e = entry_of(s, id);
    if (!e)
        return 0;
    for (size_t k = 0; k < e->n && k < max; k++)
        out[k] = &e->revs[k]->u.diagnosis;
    return e->n;
}

const cmr_diagnosis_t *cmr_diagnoses_active_for(const cmr_diagnoses_t *s, const char *env, int64_t method_id)
{
    for (size_t i = 0; i < s->n; i++) {
        const cmr_diagnosis_t *d = cmr_diagnoses_at(s, i);
        if (d->state == CMR_DIAG_ACTIVE && d->method_id == method_id && !strcmp(d->environment_id, env))
            return d;
    }
    return NULL;
}

const char *cmr_diag_state_name(cmr_diag_state_t st)
{
    return st == CMR_DIAG_ACTIVE ? "active" : st == CMR_DIAG_ENDED ? "ended" : "?";
}

const char *cmr_diag_end_reason_name(cmr_diag_end_reason_t r)
{
    static const char *const names[] = {"none",   "stopped",        "time_to_live",    "hits",
                                        "budget", "back_to_normal", "environment_gone"};
    return (unsigned)r < sizeof names / sizeof names[0] ? names[r] : "?";
}

#define NAME_OF(names, v) ((unsigned)(v) < sizeof names / sizeof names[0] ? names[v] : "?")

const char *cmr_diag_cause_name(cmr_diag_cause_t c)
{
    static const char *const names[] = {"user", "threshold"};
    return NAME_OF(names, c);
}

const char *cmr_diag_condition_name(cmr_diag_condition_kind_t k)
{
    static const char *const names[] = {"http.method", "http.path", "http.status", "http.header",
                                        "http.param",  "sql",       "arg"};
    return NAME_OF(names, k);
}

const char *cmr_diag_via_name(cmr_diag_via_t v)
{
    static const char *const names[] = {"root", "static", "special", "virtual", "interface", "lambda", "dynamic"};
    return NAME_OF(names, v);
}

const char *cmr_diag_node_status_name(cmr_diag_node_status_t st)
{
    static const char *const names[] = {"found",   "not_loaded", "jdk",   "excluded",
                                        "no_code", "repeated",   "depth", "too_many"};
    return NAME_OF(names, st);
}

const char *cmr_diag_probe_name(cmr_diag_probe_t p)
{
    static const char *const names[] = {"none", "environment", "anchor", "conditional"};
    return NAME_OF(names, p);
}

char *cmr_diag_dotted(char *s)
{
    for (char *c = s; *c && *c != '('; c++)
        if (*c == '/')
            *c = '.';
    return s;
}

const char *cmr_diag_method_text(const char *cls, const char *name, const char *desc, char *buf, size_t len)
{
    snprintf(buf, len, "%s.%s%s", cls ? cls : "", name ? name : "", desc ? desc : "");
    return cmr_diag_dotted(buf);
}

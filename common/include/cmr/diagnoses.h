/*
 * diagnoses.h - the diagnoses, as a projection of the cmr.diagnoses topic: every
 * revision of every diagnosis, the latest of each being its state (docs/DIAGNOSIS.md).
 *
 * Reading the topic from the beginning and applying each record in order gives the current
 * diagnoses and their history; a revision of an id that is not newer than the one held is
 * ignored, so duplicates (two cmr-config workers ending the same diagnosis) and replays
 * change nothing. Used by cmr-config (CLI and worker) and, for the instrumentation, by
 * cmr-instrumenter (library cmr_envstate, common/config/).
 *
 * Ownership: the state owns the decoded revisions; pointers it returns live until
 * cmr_diagnoses_free(). Not thread-safe.
 */
#ifndef CMR_DIAGNOSES_H
#define CMR_DIAGNOSES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cmr/msg.h"

typedef struct cmr_diagnoses cmr_diagnoses_t;

cmr_diagnoses_t *cmr_diagnoses_new(void);
void cmr_diagnoses_free(cmr_diagnoses_t *s);

/* Applies one encoded Diagnosis (the raw record value): 1 applied (a new id or a newer
 * revision), 0 ignored (not newer), -1 not a valid Diagnosis (err filled). */
int cmr_diagnoses_apply(cmr_diagnoses_t *s, const void *payload, size_t len, char *err, size_t errlen);
/* The same for a decoded one (copied). */
int cmr_diagnoses_apply_msg(cmr_diagnoses_t *s, const cmr_diagnosis_t *d);

/* The latest revision of id, or NULL. */
const cmr_diagnosis_t *cmr_diagnoses_get(const cmr_diagnoses_t *s, const char *id);
/* Diagnoses in the order they were first seen: the latest revision of the i-th. */
size_t cmr_diagnoses_count(const cmr_diagnoses_t *s);
const cmr_diagnosis_t *cmr_diagnoses_at(const cmr_diagnoses_t *s, size_t i);
/* The revisions of id, oldest first: up to max of them into out; returns how many there
 * are (0 when id is unknown). */
size_t cmr_diagnoses_history(const cmr_diagnoses_t *s, const char *id, const cmr_diagnosis_t **out, size_t max);
/* The active diagnosis of an environment's method (by id), or NULL. */
const cmr_diagnosis_t *cmr_diagnoses_active_for(const cmr_diagnoses_t *s, const char *env, int64_t method_id);

/* Names people read and type: "active", "ended"; "stopped", "time_to_live", ... */
const char *cmr_diag_state_name(cmr_diag_state_t st);
const char *cmr_diag_end_reason_name(cmr_diag_end_reason_t r);
/* The other enums of diagnoses and their trees, as the CLI's options, the JSON of the web
 * UI and the discovery's logs name them ("?" for a value the wire does not define):
 * "user" / "threshold"; "http.method" ... "arg"; "root", "static", ... "dynamic";
 * "found", "not_loaded", ... "too_many"; "none", "environment", "anchor", "conditional". */
const char *cmr_diag_cause_name(cmr_diag_cause_t c);
const char *cmr_diag_condition_name(cmr_diag_condition_kind_t k);
const char *cmr_diag_via_name(cmr_diag_via_t v);
const char *cmr_diag_node_status_name(cmr_diag_node_status_t st);
const char *cmr_diag_probe_name(cmr_diag_probe_t p);
/* A method as people read it, "pkg.Class.name(desc)", from its internal class name
 * ("pkg/Class"), name and descriptor, into buf; returns buf. */
const char *cmr_diag_method_text(const char *cls, const char *name, const char *desc, char *buf, size_t len);
/* The slashes of an internal name before its descriptor become dots ("pkg/Class.m(Lx/Y;)V"
 * -> "pkg.Class.m(Lx/Y;)V"), in place; returns s. */
char *cmr_diag_dotted(char *s);
/* A diagnosis' id: 16 hex digits, and whether s is one. */
bool cmr_diag_id_valid(const char *s);
/* A valid id's 16 hex digits as a number, as the wire carries it to the agents
 * (Redefine.diagnosis.id, EventBatch.diagnosis_id); 0 for an invalid id. */
uint64_t cmr_diag_id_number(const char *s);

#endif

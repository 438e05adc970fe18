/*
 * cfg_diagnose.h - diagnoses in cmr-config (docs/DIAGNOSIS.md): started and stopped by
 * operators (`cmr-config diagnose start|stop|list|show`), started by threshold events that
 * ask for one, and ended by the worker when their time to live is over or their threshold
 * has been back to normal long enough. Every change is a new revision on cmr.diagnoses,
 * whose projection (cmr/diagnoses.h) is the diagnoses' state and history.
 *
 * The worker part (cmr_cfg_diag_*) is a set of steps the worker loop calls with what it
 * read; it owns nothing but its memory of back-to-normal times.
 */
#ifndef CMR_CFG_DIAGNOSE_H
#define CMR_CFG_DIAGNOSE_H

#include <stdint.h>
#include <stdio.h>

#include "cmr/buf.h"
#include "cmr/conf.h"
#include "cmr/diagnoses.h"
#include "cmr/kafka.h"
#include "cmr/map.h"

/* `cmr-config diagnose start|stop|list|show ...`: the diag.* options (--env --method
 * --agent --depth --ttl --max-hits --budget --until-normal --include-jdk --exclude --when
 * --trace --all). 0 done, 1 failed, 2 bad usage (reasons on stderr). */
int cmr_cfg_cli_diagnose(const cmr_conf_t *conf, int nargs, char **args, FILE *out);

/* Builds a new diagnosis (revision 1, ACTIVE) from the diag.* options and `author`; its
 * strings point into conf or into *mem (the caller frees it with cmr_cfg_diag_mem_free).
 * 0, or -1 with err (a bad option: exit status 2). */
typedef struct cmr_cfg_diag_mem {
    char id[17], class_name[1024], method_name[256], descriptor[1024];
    cmr_buf_t agents;
    char **exclude;
    size_t nexclude;
    cmr_diag_condition_t *conds;
    size_t nconds;
    char *strings; /* the condition and exclude texts */
} cmr_cfg_diag_mem_t;
int cmr_cfg_diag_from_options(const cmr_conf_t *conf, const char *author, cmr_diagnosis_t *d, cmr_cfg_diag_mem_t *mem,
                              char *err, size_t errlen);
void cmr_cfg_diag_mem_free(cmr_cfg_diag_mem_t *mem);

/* --- the worker's steps ----------------------------------------------------------------- */

typedef struct cmr_cfg_diag_worker {
    cmr_diagnoses_t *state; /* the projection (owned) */
    cmr_map_t normal_since; /* diagnosis id -> wall ms its threshold turned normal (as uintptr_t) */
    int64_t auto_ttl_ms, auto_normal_ms;
    int32_t auto_depth;
    uint64_t started, ended; /* revisions written */
} cmr_cfg_diag_worker_t;

int cmr_cfg_diag_worker_init(cmr_cfg_diag_worker_t *w, const cmr_conf_t *conf, char *err, size_t errlen);
void cmr_cfg_diag_worker_free(cmr_cfg_diag_worker_t *w);
/* A record of cmr.diagnoses: into the state. */
void cmr_cfg_diag_on_record(cmr_cfg_diag_worker_t *w, const void *payload, size_t len);
/* A ThresholdEvent: ABNORMAL with diagnose set starts a diagnosis of its subject (unless
 * one is active); NORMAL notes when the threshold of an active one turned normal. Writes
 * through p. Returns the number of revisions written. */
int cmr_cfg_diag_on_threshold(cmr_cfg_diag_worker_t *w, cmr_producer_t *p, const cmr_threshold_event_t *ev,
                              int64_t now_ms);
/* An AgentStatus (cmr.agent-events): a diagnosis an agent ended by itself because it
 * reached its hits or its overhead budget ends for the whole fleet, with that reason (the
 * agent that says so must run in the diagnosis' environment). Returns the number of
 * revisions written. */
int cmr_cfg_diag_on_agent_status(cmr_cfg_diag_worker_t *w, cmr_producer_t *p, const cmr_agent_status_t *st,
                                 int64_t now_ms);
/* Ends the active diagnoses whose time to live is over or whose threshold has been normal
 * for end_after_normal_ms. Returns the number of revisions written. */
int cmr_cfg_diag_tick(cmr_cfg_diag_worker_t *w, cmr_producer_t *p, int64_t now_ms);

#endif

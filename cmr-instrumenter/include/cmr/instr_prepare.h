/*
 * instr_prepare.h - the pure part of answering one class: its bytes instrumented for a
 * decision, the digests that bind them to the original bytes, and the class grant or the
 * diagnosis' scope that goes with them.
 *
 * No cache, no Kafka, no log line: cmr_instr_prepare() runs on any thread. The worker
 * (instr_worker.c) prepares the classes of a unit side by side on its pool of threads
 * (cmr/workpool.h), then sends what was prepared, logs it and writes its cache on its own
 * thread, in the order the classes came.
 *
 * Ownership: the input belongs to the caller and must outlive the preparation (scope and
 * built methods point into the original bytes and the metadata); the preparation owns
 * its built bytes and grant, freed by cmr_instr_prep_free().
 */
#ifndef CMR_INSTR_PREPARE_H
#define CMR_INSTR_PREPARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cmr/buf.h"
#include "cmr/diagnoses.h"
#include "cmr/instr_meta.h"
#include "cmr/instr_probe.h"
#include "cmr/instr_rules.h"
#include "cmr/msg.h"
#include "cmr/trust.h"

typedef struct cmr_instr_prep_in {
    const char *class_name;
    const uint8_t *bytes; /* the original class */
    size_t len;
    const cmr_instr_meta_t *meta;
    const cmr_instr_decision_t *d;     /* what to instrument (the environment's, or with a diagnosis' probes) */
    const cmr_instr_decision_t *env_d; /* the environment's decision alone */
    const cmr_diagnosis_t *diag;       /* whose probes d carries, or NULL */
    uint64_t sig_env;                  /* cmr_instr_decision_signature of env_d (the fallback) */
    const cmr_bytes_t *applied;        /* ClassLoaded.applied_digest (the agent's cached bytes), or NULL */
    const cmr_signer_t *signer;        /* signs class grants; NULL: none */
    int64_t grant_lifetime_ms;         /* 0: no class grant */
    const char *env_id;
    int64_t revision;
} cmr_instr_prep_in_t;

typedef enum cmr_instr_prep_status {
    CMR_PREP_NONE,    /* nothing to send: the diagnosis' probes did not fit, the environment wants none */
    CMR_PREP_FAILED,  /* the class could not be instrumented (err) */
    CMR_PREP_REFUSED, /* every method was refused: the class stays original */
    CMR_PREP_READY,   /* built: send it (or only its method entries, when agent_runs) */
} cmr_instr_prep_status_t;

typedef struct cmr_instr_prep {
    cmr_instr_prep_status_t status;
    uint64_t sig;                 /* what the agent will run: the decision's, the fallback's, or 0 */
    const cmr_diagnosis_t *diag;  /* the diagnosis the built bytes carry (NULL after a fallback) */
    const cmr_diagnosis_t *asked; /* the diagnosis whose probes were asked for (in->diag) */
    bool diag_failed;             /* its probes did not fit: fell back to the environment's */
    char diag_error[256];         /* why */
    bool agent_runs;              /* the agent runs exactly the built bytes already */
    cmr_instr_built_t built;      /* owned */
    cmr_instr_built_t restore;    /* owned: the environment's bytes a diagnosis restores (scope) */
    cmr_diagnosis_scope_t scope;  /* when diag */
    uint8_t original_digest[CMR_TRUST_DIGEST_BYTES];
    cmr_buf_t grant;       /* owned: the signed class grant; empty when none was made */
    char grant_error[256]; /* why none was made ("" when grants are off or one was made) */
    char err[256];         /* CMR_PREP_FAILED: why */
} cmr_instr_prep_t;

/* Prepares the answer for the decision whose signature is `sig` (non-zero). */
void cmr_instr_prepare(const cmr_instr_prep_in_t *in, uint64_t sig, cmr_instr_prep_t *out);
void cmr_instr_prep_free(cmr_instr_prep_t *p);

#endif

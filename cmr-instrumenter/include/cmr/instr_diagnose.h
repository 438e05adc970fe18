/*
 * instr_diagnose.h - the Discover step of diagnoses wired to the instrumenter: the class
 * cache of one agent as a discovery source (instr_discover.h), one agent's DiagnosisTree
 * for a diagnosis, and the queue of work the worker runs one agent per loop step.
 *
 * How it fits: the worker reads cmr.diagnoses from the beginning into the queue
 * (cmr_instr_diag_apply). Each ACTIVE revision not handled yet becomes one job per agent
 * (the listed agents, or every agent of its environment the cache knows and this worker
 * owns); cmr_instr_diag_step runs one job and gives the tree the worker sends on
 * cmr.diagnosis-trees. Handled revisions are remembered in memory only: a restart may send
 * the trees again (the topic keeps every tree; readers take the latest revision).
 *
 * The source: class_bytes finds the class of that name the agent loaded, preferring the loader
 * of the selected method's class, then any loader; bytes evicted from the cache are unknown
 * (NOT_LOADED nodes). each_class lists the agent's classes (one per name) with the superclass
 * and interfaces from their cached metadata.
 *
 * Ownership: the queue owns its projection of the diagnoses and its jobs; trees filled here
 * are released with cmr_instr_diag_tree_free. The cache is borrowed and only read.
 */
#ifndef CMR_INSTR_DIAGNOSE_H
#define CMR_INSTR_DIAGNOSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cmr/instr_cache.h"
#include "cmr/instr_discover.h"
#include "cmr/msg.h"

/* The discovery source over the cache for one agent. */
typedef struct cmr_instr_diag_src {
    cmr_instr_cache_t *cache;
    uint64_t agent;
    int64_t loader; /* preferred loader */
    bool have_loader;
} cmr_instr_diag_src_t;

/* Fills *out (a source reading through s, which must outlive it). */
void cmr_instr_diag_source(cmr_instr_diag_src_t *s, cmr_disc_source_t *out);

/* Runs the discovery of diagnosis d for agent `agent` over the cache and fills *out (every
 * field; error set and no nodes when there is no tree). 0, or -1 out of memory (the source
 * failing is reported in error, not here). */
int cmr_instr_diag_tree(cmr_instr_cache_t *cache, uint64_t agent, const cmr_diagnosis_t *d, int64_t now_ms,
                        cmr_diagnosis_tree_t *out);
void cmr_instr_diag_tree_free(cmr_diagnosis_tree_t *t);

typedef struct cmr_instr_diag cmr_instr_diag_t;

cmr_instr_diag_t *cmr_instr_diag_new(void);
void cmr_instr_diag_free(cmr_instr_diag_t *q);
/* Applies one cmr.diagnoses record (its raw value): 1 applied, 0 not newer, -1 invalid. */
int cmr_instr_diag_apply(cmr_instr_diag_t *q, const void *payload, size_t len, char *err, size_t errlen);

/* Whether this worker makes trees for an agent of the cache (its classes partition owned). */
typedef bool(cmr_instr_diag_owned_fn)(uint64_t agent, const cmr_instr_agent_rec_t *r, void *ud);

/* One step: plans the jobs of new ACTIVE revisions when no job is left, then runs at most one
 * job. 1 with *out filled (send it, then cmr_instr_diag_tree_free), 0 nothing to do, -1 out
 * of memory. */
int cmr_instr_diag_step(cmr_instr_diag_t *q, cmr_instr_cache_t *cache, cmr_instr_diag_owned_fn *owned, void *ud,
                        int64_t now_ms, cmr_diagnosis_tree_t *out);

#endif

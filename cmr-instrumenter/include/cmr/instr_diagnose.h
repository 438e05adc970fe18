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
#include "cmr/instr_meta.h"
#include "cmr/instr_rules.h"
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

/* The note of a node the operator excluded by naming its method (a method entry of the
 * diagnosis' exclude list: `cmr-config diagnose exclude`); EXCLUDED nodes of a class-prefix
 * entry say which prefix. */
#define CMR_INSTR_DIAG_NOTE_OPERATOR "excluded by the operator"

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

/* --- the overlay: a diagnosis' probes on top of the environment's ----------------------
 *
 * Once an agent's tree is made, its found methods are the overlay of (diagnosis, agent):
 * the roots (the selected method) get ANCHOR, the other found methods CONDITIONAL; a
 * method the environment instruments already keeps its sensor (it records anyway), except
 * a root, whose sensor becomes ANCHOR (it records like an invocation sequence as well);
 * hand-off points keep their context probes; excluded classes get nothing. The worker
 * decides a class as before and adds the overlay (cmr_instr_diag_overlay), so that an
 * environment change keeps a running diagnosis' probes; the bytes it sends then carry the
 * diagnosis' scope with the bytes of the environment's decision alone (restore bytes).
 * A new revision of an ACTIVE diagnosis (an operator excluding or including a method)
 * replaces the overlay of (diagnosis, agent) once its tree is made: the classes of the old
 * overlay and of the new one are decided again, so a method no longer FOUND (EXCLUDED) loses
 * its probe, and a class left with none of the diagnosis' methods gets the environment's
 * bytes back (without the diagnosis' scope).
 * When a diagnosis is no longer ACTIVE its overlay goes, and its classes are decided again:
 * they get the environment's bytes back (docs/DIAGNOSIS.md, "Remove"). One diagnosis per
 * class: when two overlays meet in a class, the one of the lower id applies.
 * The overlay lives in memory: a restarted worker makes the trees of active diagnoses again. */

typedef struct cmr_instr_diag_class {
    uint64_t agent;
    char *name; /* owned */
} cmr_instr_diag_class_t;

typedef struct cmr_instr_diag_classes {
    cmr_instr_diag_class_t *items; /* owned */
    size_t n, cap;
} cmr_instr_diag_classes_t;

void cmr_instr_diag_classes_free(cmr_instr_diag_classes_t *l);

/* full = env's picks plus the overlay's for this agent's class. *diag: the diagnosis whose
 * picks were added (borrowed from the projection: valid until the next apply), NULL when
 * none. full owns its picks (cmr_instr_decision_free); its `missing` is empty. 0 or -1. */
int cmr_instr_diag_overlay(cmr_instr_diag_t *q, uint64_t agent, const cmr_instr_meta_t *meta,
                           const cmr_instr_decision_t *env, cmr_instr_decision_t *full, const cmr_diagnosis_t **diag);
/* Records the overlay of a tree cmr_instr_diag_step gave (none when it has an error);
 * adds the classes to decide again (the old overlay's and the new one's) to changed. 0 or -1. */
int cmr_instr_diag_set_overlay(cmr_instr_diag_t *q, const cmr_diagnosis_tree_t *t, cmr_instr_diag_classes_t *changed);
/* Drops the overlays of diagnoses no longer ACTIVE; adds their classes to changed. 0 or -1. */
int cmr_instr_diag_take_ended(cmr_instr_diag_t *q, cmr_instr_diag_classes_t *changed);
/* The latest revision of diagnosis id (borrowed: valid until the next apply), or NULL. */
const cmr_diagnosis_t *cmr_instr_diag_get(cmr_instr_diag_t *q, const char *id);
/* The tree just made for (id, agent) is not final (bytes were asked for): a replan makes
 * it again within 2 s. */
void cmr_instr_diag_retry(cmr_instr_diag_t *q, const char *id, uint64_t agent, int64_t now_ms);
/* Calls fn for each environment with a diagnosis active or ended since since_ms (an
 * environment may come more than once). A worker that starts runs those environments once
 * its trees are made again: classes that kept the probes of a diagnosis that ended while it
 * was away get their bytes back. Returns fn's first non-zero value, or 0. */
int cmr_instr_diag_each_recent_env(cmr_instr_diag_t *q, int64_t since_ms, int (*fn)(const char *env_id, void *ud),
                                   void *ud);

#endif

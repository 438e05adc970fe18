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

/* `cmr-config diagnose start|stop|exclude|include|list|show ...`: the diag.* options (--env
 * --method --agent --depth --ttl --max-hits --budget --until-normal --include-jdk --exclude
 * --when --trace --all). 0 done, 1 failed, 2 bad usage (reasons on stderr). */
int cmr_cfg_cli_diagnose(const cmr_conf_t *conf, int nargs, char **args, FILE *out);

/* Builds a new diagnosis (revision 1, ACTIVE) from the diag.* options and `author`; its
 * strings point into conf or into *mem (the caller frees it with cmr_cfg_diag_mem_free).
 * 0, or -1 with err (a bad option: exit status 2).
 *
 * diag.exclude (--exclude) is a comma-separated list of at most CMR_CFG_DIAG_MAX_EXCLUDE
 * entries, each a class-name prefix (com.shop.generated, com/shop/generated) or one method:
 * an entry with a descriptor (com.shop.Cart.add(I)V: that overload; a bad descriptor is an
 * error), one with both '/' and '.' (com/shop/Cart.add), or a dotted name whose last two
 * parts read Class.method (the one before the last dot starts with a capital letter, the
 * last one does not: com.shop.Cart.add, every overload). A prefix that would read like a
 * method is written with slashes. On the wire (Diagnosis.exclude) a prefix is an internal
 * name (no '.') and a method is "com/shop/Cart.add" or "com/shop/Cart.add(I)V". */
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

/* How many entries a diagnosis' exclude list may have (prefixes and methods). */
#define CMR_CFG_DIAG_MAX_EXCLUDE 256

/* --- changing diagnoses (the CLI, and programs that link cmr_config: a web UI) ----------
 *
 * The results of the functions below: 0 done, or one of these. err gets a sentence for a
 * person (the CLI prints it after "cmr-config: "). Each function that reads or writes
 * cmr.diagnoses reads it to its end first (config.timeout_ms), and writes one revision and
 * waits for the cluster to have it (30 s). Each call makes its own Kafka clients and keeps
 * nothing once it returns; conf and the arguments are borrowed and only read. */
#define CMR_CFG_DIAG_UNCHANGED 1     /* revise / exclude: nothing changes, no revision written */
#define CMR_CFG_DIAG_BAD (-1)        /* a bad argument: a diagnosis id, a method, the list too long */
#define CMR_CFG_DIAG_NOT_FOUND (-2)  /* no diagnosis of that id */
#define CMR_CFG_DIAG_ENDED (-3)      /* the diagnosis has ended: it changes no more */
#define CMR_CFG_DIAG_CONFLICT (-4)   /* start: a diagnosis of that method is active in that environment */
#define CMR_CFG_DIAG_UNREADABLE (-5) /* cmr.diagnoses could not be read to its end */
#define CMR_CFG_DIAG_PUBLISH (-6)    /* the revision could not be written (not acknowledged) */

/* One method as an exclude entry, the form the wire carries: "com.shop.Cart.add",
 * "com/shop/Cart.add" -> "com/shop/Cart.add"; "com.shop.Cart.add(ILjava/lang/String;)V"
 * keeps its descriptor (which must be a JVM method descriptor). out: at least
 * CMR_CFG_DIAG_ENTRY_MAX bytes. 0, or CMR_CFG_DIAG_BAD with err. */
#define CMR_CFG_DIAG_ENTRY_MAX 2304
int cmr_cfg_diag_method_entry(const char *method, char *out, size_t outlen, char *err, size_t errlen);

/* The next revision of diagnosis `cur` with methods added to its exclude list (`add`) and
 * taken out of it (`remove`), each a method as cmr_cfg_diag_method_entry takes it. Adding
 * a method that is excluded already (or whose every overload is) changes nothing; adding
 * every overload replaces the entries of single overloads of that method; removing every
 * overload removes those too; removing one overload of a method excluded with every
 * overload is refused (remove that entry instead). Class-prefix entries stay as they are.
 * The selected method itself cannot be excluded.
 *
 * Writes nothing: *next is cur with revision + 1, the new exclude list, author and time_ms =
 * now_ms. next's strings point into cur (which must outlive next), at author, and into
 * *mem (the new list and its entries: cmr_cfg_diag_mem_free, whatever the result; next is
 * invalid once it is freed). Returns 0 (next
 * filled), CMR_CFG_DIAG_UNCHANGED (next is a copy of cur), CMR_CFG_DIAG_ENDED (cur is not
 * ACTIVE) or CMR_CFG_DIAG_BAD (a bad method, the selected method, the list past
 * CMR_CFG_DIAG_MAX_EXCLUDE, out of memory), with err. */
int cmr_cfg_diag_revise_exclude(const cmr_diagnosis_t *cur, const char *const *add, size_t nadd,
                                const char *const *remove, size_t nremove, const char *author, int64_t now_ms,
                                cmr_diagnosis_t *next, cmr_cfg_diag_mem_t *mem, char *err, size_t errlen);

/* Starts diagnosis d (revision 1, ACTIVE, say from cmr_cfg_diag_from_options): refused
 * when a diagnosis of the same method (class, name, descriptor) is active in d's
 * environment. d is borrowed. 0, CMR_CFG_DIAG_BAD (d not a new active diagnosis),
 * CMR_CFG_DIAG_CONFLICT, CMR_CFG_DIAG_UNREADABLE or CMR_CFG_DIAG_PUBLISH, with err. */
int cmr_cfg_diag_start(const cmr_conf_t *conf, const cmr_diagnosis_t *d, char *err, size_t errlen);

/* Stops diagnosis id (a revision ENDED, STOPPED, by author). 0, CMR_CFG_DIAG_BAD (not an
 * id), CMR_CFG_DIAG_NOT_FOUND, CMR_CFG_DIAG_ENDED, CMR_CFG_DIAG_UNREADABLE or
 * CMR_CFG_DIAG_PUBLISH, with err. */
int cmr_cfg_diag_stop(const cmr_conf_t *conf, const char *id, const char *author, char *err, size_t errlen);

/* Excludes the methods `add` from the active diagnosis id and includes `remove` again
 * (cmr_cfg_diag_revise_exclude over its latest revision), writing the new revision; the
 * instrumenter then makes the trees again and drops (or brings back) those methods' probes.
 * *revision (may be NULL): the revision written, or the current one when nothing changes.
 * 0, CMR_CFG_DIAG_UNCHANGED, CMR_CFG_DIAG_BAD, CMR_CFG_DIAG_NOT_FOUND, CMR_CFG_DIAG_ENDED,
 * CMR_CFG_DIAG_UNREADABLE or CMR_CFG_DIAG_PUBLISH, with err. */
int cmr_cfg_diag_exclude(const cmr_conf_t *conf, const char *id, const char *const *add, size_t nadd,
                         const char *const *remove, size_t nremove, const char *author, int64_t *revision, char *err,
                         size_t errlen);

/* --- the worker's steps ----------------------------------------------------------------- */

typedef struct cmr_cfg_diag_worker {
    cmr_diagnoses_t *state; /* the projection (owned) */
    cmr_map_t normal_since; /* diagnosis id -> wall ms its threshold turned normal (as uintptr_t) */
    cmr_map_t abnormal;     /* diagnosis id '\n' subject name -> NULL: the series of its rule that
                               are abnormal now (routes sharing a root method share its diagnosis) */
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

/*
 * agent_diagnoses.h - the diagnoses running in this JVM (docs/DIAGNOSIS.md, "Instrument
 * conditionally" and "Remove").
 *
 * A Redefine whose `diagnosis` scope is set installs a diagnosis' probes in one class: the
 * anchor probes of the selected method, the conditional probes of the methods discovered
 * under it. The scope carries the diagnosis' limits and the bytes the class had before
 * (the environment's instrumentation, or the original bytes), signed with the command.
 * This table keeps, per diagnosis:
 *   - its anchors (method id -> diagnosis, conditions), which the probe reads through
 *     anchors0 whenever the generation in the control block changes;
 *   - the classes that carry its probes now, each with its restore bytes, so that the
 *     agent can end the diagnosis by itself: at its end time, at its maximum hits, or when
 *     its measured overhead exceeds its budget, also while the CMR is unreachable;
 *   - its run: hits (anchor calls in its context), calls recorded under it, the anchor
 *     time they ran in, state and end reason, reported in AgentStatus.diagnoses.
 * A diagnosis the agent ended refuses further commands of it for the JVM's life (the last
 * 1024 such ids: a late or replayed command cannot bring its probes back), as does one
 * whose end time has passed; one the CMR ended (every class got other bytes) may be started
 * again by the CMR.
 *
 * Threads: the control thread changes the table; the publisher counts hits and calls;
 * application threads read the anchors (anchors0). One mutex guards it all; none of these
 * calls blocks on anything but that mutex.
 *
 * Ownership: the table owns copies of everything it keeps; cmr_agent_diags_free releases it.
 */
#ifndef CMR_AGENT_DIAGNOSES_H
#define CMR_AGENT_DIAGNOSES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cmr/msg.h"

/* What one probe pair that records costs, in ns (enter and exit of a conditional call in
 * its context, JIT-compiled): the budget's estimate of a diagnosis' overhead is
 * calls x this / the anchors' time (agent/bench, docs/benchmarks.md). */
#define CMR_DIAG_PROBE_PAIR_NS 60
/* Restore bytes kept for all diagnoses together; a command over it is refused. */
#define CMR_DIAG_RESTORE_BUDGET ((size_t)64 << 20)
/* Runs kept for AgentStatus (the oldest ended one goes first). */
#define CMR_DIAG_MAX_RUNS 16
/* The budget is judged once the anchors ran this long in the diagnosis' context. */
#define CMR_DIAG_BUDGET_MIN_NS (50 * 1000000LL)

typedef struct cmr_agent_diags cmr_agent_diags_t;

/* One class to give back its bytes when the agent ends a diagnosis (borrowed from the
 * table until cmr_agent_diags_ended). */
typedef struct cmr_agent_diag_restore {
    char *class_name;
    int64_t loader_id;
    int64_t class_hash;
    uint8_t digest[32]; /* original_digest of the command that installed the probes */
    uint8_t *bytes;
    size_t len;
    bool original;
    uint64_t before; /* digest8 of the bytes in effect before the diagnosis' bytes went in */
} cmr_agent_diag_restore_t;

/* The first 8 bytes of the BLAKE2b-256 digest of class bytes (cmr_trust_digest), as a
 * number: how the agent names the bytes it installs in its log lines, and checks that a
 * diagnosis' class got back the bytes it had before. */
uint64_t cmr_agent_digest8(const uint8_t *bytes, size_t len);
uint64_t cmr_agent_digest8_of(const uint8_t digest[32]);

cmr_agent_diags_t *cmr_agent_diags_new(void);
void cmr_agent_diags_free(cmr_agent_diags_t *d);

/* The control block the probe maps (control0): 64 bytes, the anchors' generation at 0. */
void *cmr_agent_diags_control(cmr_agent_diags_t *d);

/* Before the bytes of cmd (scope set) are installed: the diagnosis is started or updated
 * and its anchors are in force (generation bumped). 0, or -1 with why when the command
 * must be refused (the agent ended that diagnosis already, restore budget, memory). */
int cmr_agent_diags_begin(cmr_agent_diags_t *d, const cmr_redefine_t *cmd, int64_t now_ms, char *why, size_t whylen);
/* After cmd's bytes were installed in the class of loader_id: that class now carries the
 * diagnosis (its restore bytes kept). 0 or -1 (memory: the class is then restored by the
 * CMR only). */
int cmr_agent_diags_installed(cmr_agent_diags_t *d, const cmr_redefine_t *cmd, int64_t loader_id, uint64_t before);
/* Other bytes were installed in that class (a command without scope, or the agent's own
 * restore) with digest8 `digest`: it leaves every diagnosis other than keep_id (0: all),
 * logged with whether those are the bytes it had before that diagnosis. A diagnosis left
 * without classes has ended (by the CMR, unless the agent is ending it). */
void cmr_agent_diags_replaced(cmr_agent_diags_t *d, const char *class_name, int64_t loader_id, int64_t keep_id,
                              uint64_t digest, int64_t now_ms);

/* Publisher: a DIAG record (the anchor opened the context: one hit) and a DIAG_END record
 * (the context closed after `calls` conditional calls over ns). */
void cmr_agent_diags_hit(cmr_agent_diags_t *d, int64_t id);
void cmr_agent_diags_done(cmr_agent_diags_t *d, int64_t id, uint32_t calls, int64_t ns);

/* The next active diagnosis that must end now (end time, hits, budget): 1 with its id and
 * reason, and its anchors out of force already; 0 when none. */
int cmr_agent_diags_due(cmr_agent_diags_t *d, int64_t now_ms, int64_t *id, cmr_diag_end_reason_t *reason);
/* The classes of diagnosis id to restore (borrowed, valid until cmr_agent_diags_ended). */
size_t cmr_agent_diags_restores(cmr_agent_diags_t *d, int64_t id, const cmr_agent_diag_restore_t **out);
/* The agent ended diagnosis id: state ENDED with reason, restore bytes freed, commands of
 * it refused from now on. */
void cmr_agent_diags_ended(cmr_agent_diags_t *d, int64_t id, cmr_diag_end_reason_t reason, int64_t now_ms);

/* A command of diagnosis id could not be installed: a run left without any class ends
 * (it would hold a slot and its anchors until its end time). */
void cmr_agent_diags_abandon(cmr_agent_diags_t *d, int64_t id, int64_t now_ms);
/* The anchors in force as the probe's anchors0 text (malloc'd; NULL on no memory). */
char *cmr_agent_diags_anchors_text(cmr_agent_diags_t *d);
/* The runs, newest last, into out (at most max); returns how many. */
size_t cmr_agent_diags_runs(cmr_agent_diags_t *d, cmr_diagnosis_run_t *out, size_t max);
/* Whether something changed since the last call (a run started or ended): the control
 * thread then sends an AgentStatus at once. */
bool cmr_agent_diags_take_changed(cmr_agent_diags_t *d);

#endif

/*
 * cp_support.h - helpers of the control-plane integration tests, written to be reused by
 * the end-to-end tests with a real JVM later:
 *
 *  - cp_proc: start a CMR program (cmr-config run, cmr-instrumenter) as a child process
 *    with its log in a file, stop it (SIGTERM) or kill it (SIGKILL);
 *  - cp_keys: the harness's command signing key pair, made with `cmr-config keygen`; the
 *    workers get the secret key (cp_signing_key_option), the peers pin the public one;
 *  - cp_peer: a scripted agent that plays the agent's side of the protocol
 *    (docs/ARCHITECTURE.md) through the real transport: registers, reads its command
 *    topic (opening every signed envelope like the agent does), sends ClassLoaded with
 *    real class bytes;
 *  - cp_java: compiles Java sources with javac into a temporary directory and reads the
 *    class files back;
 *  - cp_apply: writes an environment file and runs `cmr-config apply` on it.
 */
#ifndef CP_SUPPORT_H
#define CP_SUPPORT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cmr/conf.h"
#include "cmr/kafka.h"
#include "cmr/msg.h"
#include "cmr/trust.h"

/* Monotonic milliseconds: cmr_mono_ms() (kept for the ingest tests that use it). */
int64_t cp_mono_ms(void);
/* snprintf into a fixed buffer that must hold the whole text (a path, a name, an id): the
 * test aborts, with the text's start on stderr, rather than go on with a cut one. */
void cp_fmt(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A random hex suffix for names (groups, agents). */
void cp_unique(const char *prefix, char *buf, size_t len);
/* A fresh temporary directory (mkdtemp) and its removal. */
int cp_tmpdir(char *buf, size_t len);
void cp_rmrf(const char *dir);

/* --- processes ---------------------------------------------------------------------- */

typedef struct cp_proc {
    pid_t pid;
    char log[512];
} cp_proc_t;

/* argv NULL-ended; stdout and stderr go to `log` (a path). 0 or -1. */
int cp_proc_start(cp_proc_t *p, const char *const *argv, const char *log);
/* SIGTERM and wait (SIGKILL after 10 s); returns the exit status or -1. */
int cp_proc_stop(cp_proc_t *p);
/* The caller reaped p itself (waitpid): forget it (it is no longer killed at exit). */
void cp_proc_forget(cp_proc_t *p);
void cp_proc_kill(cp_proc_t *p);
/* Starts a CMR worker for a benchmark: bin --bootstrap BOOTSTRAP, the harness's signing
 * key, consumers at kafka.fetch.wait.max.ms=5 (the embedded broker answers a fetch only
 * when that wait expires; a real broker answers as soon as data arrives), the log level of
 * CP_LOG_LEVEL (default info), `-X $CP_WORKER_X` when that is set (one KEY=VALUE), then
 * `extra` (NULL-ended, may be NULL: --db DIR, "run").
 * 0 or -1 (as cp_proc_start). */
int cp_bench_worker_start(cp_proc_t *p, const char *bin, const char *bootstrap, const char *const *extra,
                          const char *log);
/* Waits until `needle` appears in the process's log. 0, or -1 on timeout. */
int cp_proc_wait_log(const cp_proc_t *p, const char *needle, int timeout_ms);
/* Copies the last `lines` lines of the process's log to stderr (diagnostics on failure). */
void cp_proc_dump_log(const cp_proc_t *p, int lines);
/* How many times `needle` appears in the process's log so far. */
int cp_proc_count_log(const cp_proc_t *p, const char *needle);
/* Runs a program to completion, output into *out (malloc'd, may be NULL). Exit status. */
int cp_run(const char *const *argv, char **out);

/* --- keys ------------------------------------------------------------------------------ */

/* Makes the harness's key pair in dir (an existing directory, e.g. the test's cp_tmpdir)
 * with `cmr_config_bin keygen --dir dir --name harness` and remembers its paths for the
 * rest of the process: peers opened afterwards pin the public key. 0, or -1 with the
 * reason on stderr. */
int cp_keys_make(const char *cmr_config_bin, const char *dir);
/* The secret key's path, the public key's, and "trust.signing_key=<secret key path>" (for
 * a worker's -X). Empty strings before cp_keys_make. */
const char *cp_signing_key(void);
const char *cp_public_key(void);
const char *cp_signing_key_option(void);

/* --- the scripted agent ------------------------------------------------------------- */

typedef struct cp_peer {
    const cmr_conf_t *conf;
    char instance_id[33];
    char name[128];
    char host[128];
    char ip[64];
    char cmd_topic[256];
    int64_t start_time_ms; /* wall clock at open: a later run registers a later start */
    cmr_producer_t *producer;
    cmr_consumer_t *commands;
    cmr_verifier_t *verifier; /* owned: for this instance, pinned to cp_public_key() */
    int refused;              /* commands whose envelope did not verify (each is reported) */
    /* from AgentConfiguration */
    int64_t agent_id;
    char env_id[128];
    int64_t revision;
    int64_t agent_features; /* ClassLoaded.agent_features of its classes; 0 (as an agent from before them) */
} cp_peer_t;

/* Draws an instance id, creates the command topic and joins it as group
 * cmr-agent-<instance id> (from the earliest offset), like the agent does. Needs
 * cp_keys_make first (its verifier pins the harness's public key). */
int cp_peer_open(cp_peer_t *p, const cmr_conf_t *conf, const char *name, const char *host, const char *ip);
void cp_peer_close(cp_peer_t *p);
/* Sends AgentRegistration (attempt n) and waits for its delivery. */
int cp_peer_register(cp_peer_t *p, int attempt);
/* The same, queued only: cp_peer_flush delivers it. */
int cp_peer_register_queued(cp_peer_t *p, int attempt);
/* Next command within timeout_ms: 1 with *out filled (free with cmr_msg_free): the command
 * inside a signed envelope that verified (cmr_command_open); 0 none; -1 a record whose
 * envelope was refused (reported on stderr, counted in p->refused). */
int cp_peer_next(cp_peer_t *p, int timeout_ms, cmr_msg_t *out);
/* Waits for a command of `type` (others are freed and counted in *skipped when not NULL). */
int cp_peer_expect(cp_peer_t *p, cmr_msg_type_t type, int timeout_ms, cmr_msg_t *out);
/* Applies an AgentConfiguration (agent id, environment, revision). */
void cp_peer_configure(cp_peer_t *p, const cmr_agent_configuration_t *c);
/* Sends one class (hash computed here). agent id defaults to cmr_agent_id(name, host, instance id). */
int cp_peer_send_class(cp_peer_t *p, const char *class_name, int64_t loader, const uint8_t *bytes, size_t len,
                       cmr_class_cause_t cause, int64_t request_id);
int cp_peer_flush(cp_peer_t *p);

/* --- Java classes ------------------------------------------------------------------- */

typedef struct cp_class {
    char name[256]; /* internal name */
    uint8_t *bytes;
    size_t len;
} cp_class_t;

typedef struct cp_classes {
    cp_class_t *items;
    size_t count;
    char dir[256];
} cp_classes_t;

/* Writes each (file name, source) pair into a temporary directory, runs javac and reads
 * every produced class. sources is NULL-ended pairs. 0, or -1 with the reason on stderr. */
int cp_java_compile(const char *const *sources, cp_classes_t *out);
/* Extracts classes of a JDK module (jimage extract), up to `max` whose names match the
 * prefix (e.g. "java/util/"). 0 or -1. */
int cp_jdk_classes(const char *module, const char *prefix, size_t max, cp_classes_t *out);
const cp_class_t *cp_classes_find(const cp_classes_t *c, const char *name);
void cp_classes_free(cp_classes_t *c);

/* --- configuration ------------------------------------------------------------------ */

/* Writes `yaml` to a temporary file and runs `cmr_config_bin --bootstrap B apply FILE`.
 * Returns the exit status; its output into *out when out is not NULL. */
int cp_apply(const char *cmr_config_bin, const char *bootstrap, const char *yaml, char **out);

#endif

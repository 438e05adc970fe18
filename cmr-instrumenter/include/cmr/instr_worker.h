/*
 * instr_worker.h - `cmr-instrumenter`: the instrumenter worker.
 *
 *  - Rebuilds the configuration from cmr.config (cfg_state.h) before consuming classes.
 *  - Consumes cmr.classes as a member of consumer group `instrumenter.group` (the topic is
 *    keyed by agent id: one worker owns all classes of an agent and resolves its types).
 *  - Per ClassLoaded: caches metadata and bytes (instr_cache.h), decides with the agent's
 *    environment (instr_rules.h), instruments (instr_probe.h), publishes Redefine to
 *    cmr.cmd.<instance id> and MethodEntry to cmr.methods; re-decides classes that were
 *    waiting for this type. A record is marked done only after its commands are delivered
 *    and the cache write is committed (WAL).
 *  - Per environment change: runs the environment against the cached classes of its agents
 *    (owned partitions only): Redefine with new bytes, BytecodeResend when the bytes are not
 *    held, Redefine with the original bytes (original = true) when instrumentation is gone.
 */
#ifndef CMR_INSTR_WORKER_H
#define CMR_INSTR_WORKER_H

#include <signal.h>

#include "cmr/conf.h"

/* Runs until *stop becomes non-zero. 0, 1 on a fatal error (logged), 2 on a bad
 * configuration value (printed on stderr). */
int cmr_instr_worker_run(const cmr_conf_t *conf, volatile sig_atomic_t *stop);

#endif

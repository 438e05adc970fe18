/*
 * cfg_worker.h - `cmr-config run`: the configuration worker.
 *
 *  1. Rebuilds the configuration from cmr.config (from the beginning; cfg_state.h) and
 *     waits until it has caught up before answering anything.
 *  2. Keeps a registry of agents: the latest registration per agent id, rebuilt at start
 *     from cmr.registrations (every partition, reader.h) and kept current. Nothing is
 *     persisted: the topic is the store.
 *  3. Answers registrations as a member of consumer group `config.group` (AgentConfiguration
 *     or NoEnvironment on cmr.cmd.<instance id>); an offset is stored after the answer was
 *     delivered.
 *  4. Follows cmr.config: a changed environment sends a new AgentConfiguration to every
 *     registered agent of that environment; a changed mapping table sends one to every
 *     agent whose environment changed. Each worker handles the agents whose registration
 *     partition it owns in the group, so several workers never answer twice.
 */
#ifndef CMR_CFG_WORKER_H
#define CMR_CFG_WORKER_H

#include <signal.h>

#include "cmr/conf.h"

/* Runs until *stop becomes non-zero. Returns 0, 1 on a fatal error (logged), 2 on a bad
 * configuration value (printed on stderr). */
int cmr_cfg_worker_run(const cmr_conf_t *conf, volatile sig_atomic_t *stop);

#endif

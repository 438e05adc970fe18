/*
 * cfg_answer.h - what cmr-config answers to one registration (pure function of the
 * configuration state; no Kafka). See docs/ARCHITECTURE.md, "The agent <-> CMR protocol".
 */
#ifndef CMR_CFG_ANSWER_H
#define CMR_CFG_ANSWER_H

#include <stddef.h>

#include "cmr/cfg_state.h"
#include "cmr/msg.h"

typedef struct cmr_cfg_answer {
    int configured; /* 1: cfg is the answer; 0: no_env is */
    cmr_agent_configuration_t cfg;
    cmr_sensor_setting_t sensors[3]; /* storage for cfg.sensors */
    cmr_no_environment_t no_env;
    char reason[512];      /* storage for no_env.reason */
    uint8_t trace_key[32]; /* storage for cfg.trace_context.key (filled by the worker, which holds the key) */
} cmr_cfg_answer_t;

/* Fills *a for `reg`. Strings point into reg, the state and *a itself: the answer is valid
 * while those are. agent id = cmr_agent_id(name, host, instance id). */
void cmr_cfg_answer(const cmr_cfg_state_t *s, const cmr_agent_registration_t *reg, int64_t now_ms, cmr_cfg_answer_t *a);

/* The environment id an agent maps to now (NULL: none, or the mapping names an
 * environment that does not exist). */
const char *cmr_cfg_agent_env(const cmr_cfg_state_t *s, const char *name, const cmr_strings_t *ips);

#endif

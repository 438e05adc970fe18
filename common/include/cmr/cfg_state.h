/*
 * cfg_state.h - the CMR configuration as the projection of the compacted cmr.config topic.
 *
 * The state is the latest ConfigChange per key: one per environment id (ENVIRONMENT, or
 * ENVIRONMENT_DELETED which removes it) and one for the key "mappings" (MAPPINGS). Feeding
 * every record of cmr.config, in order, from the beginning, yields the current
 * configuration; an older revision of a key than the one held is ignored, so replays and
 * duplicates change nothing. Used by cmr-config (worker and CLI) and cmr-instrumenter
 * (library cmr_envstate in common/config/: it needs only the wire codec).
 *
 * Ownership: the state owns the decoded messages; pointers it returns live until the next
 * cmr_cfg_state_apply() of the same key or cmr_cfg_state_free().
 */
#ifndef CMR_CFG_STATE_H
#define CMR_CFG_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "cmr/msg.h"

typedef struct cmr_cfg_state cmr_cfg_state_t;

cmr_cfg_state_t *cmr_cfg_state_new(void);
void cmr_cfg_state_free(cmr_cfg_state_t *s);

typedef enum cmr_cfg_effect {
    CMR_CFG_IGNORED,     /* stale revision or duplicate */
    CMR_CFG_ENV_CHANGED, /* environment created or updated: *changed_id set */
    CMR_CFG_ENV_DELETED,
    CMR_CFG_MAPPINGS_CHANGED,
} cmr_cfg_effect_t;

/* Applies one encoded ConfigChange (the raw record value). Returns the effect, or -1 when
 * the bytes are not a ConfigChange (err filled). *changed_id (may be NULL) points at the
 * environment id inside the state. */
int cmr_cfg_state_apply(cmr_cfg_state_t *s, const void *payload, size_t len, const char **changed_id, char *err,
                        size_t errlen);

/* Environment by id (NULL when unknown); *revision set when not NULL. */
const cmr_environment_t *cmr_cfg_state_env(const cmr_cfg_state_t *s, const char *id, int64_t *revision);
/* i-th environment in id order (NULL past the end). */
const cmr_environment_t *cmr_cfg_state_env_at(const cmr_cfg_state_t *s, size_t i, int64_t *revision);
size_t cmr_cfg_state_env_count(const cmr_cfg_state_t *s);
const cmr_agent_mapping_t *cmr_cfg_state_mappings(const cmr_cfg_state_t *s, size_t *n, int64_t *revision);

/* Revision held for a key (environment id or "mappings"), also for deleted ones; 0 when
 * never seen. A new change of that key carries this + 1. */
int64_t cmr_cfg_state_key_revision(const cmr_cfg_state_t *s, const char *id);

/* Two environments carry the same content (id, name, description, assignments, strategy). */
int cmr_cfg_env_equal(const cmr_environment_t *a, const cmr_environment_t *b);

#endif

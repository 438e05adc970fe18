/*
 * cfg_doc.h - the environment file: what users edit and `cmr-config apply` reads.
 *
 * A YAML document (format version 1, described in docs/ENVIRONMENTS.md) with a list of
 * environments (sensor assignments + strategy settings) and an optional list of agent
 * mappings. The parser checks everything it can without the CMR's current state (types,
 * names, ranges, duplicates, address syntax) and reports the first problem as
 * "FILE:LINE: where: reason". It knows nothing about Kafka: cfg_cli.c turns a document into
 * ConfigChange messages.
 *
 * Ownership: a cmr_cfg_doc_t owns every string and array it points to (allocated from the
 * document's pool) and is released with cmr_cfg_doc_free().
 */
#ifndef CMR_CFG_DOC_H
#define CMR_CFG_DOC_H

#include <stdbool.h>
#include <stddef.h>

#include "cmr/msg.h"

#define CMR_CFG_FORMAT_VERSION 1

typedef struct cmr_cfg_pool cmr_cfg_pool_t;

typedef struct cmr_cfg_doc {
    cmr_environment_t *envs;
    int *env_lines; /* line of each environment in the file (1-based) */
    size_t n_envs;
    cmr_agent_mapping_t *mappings;
    int *mapping_lines;
    size_t n_mappings;
    bool has_mappings; /* the file has a `mappings:` key (it then replaces the table) */
    cmr_cfg_pool_t *pool;
} cmr_cfg_doc_t;

/* Parses `len` bytes of YAML. `origin` names the source in messages (a path). Returns 0,
 * or -1 with "origin:line: reason" in err (doc then holds nothing to free). */
int cmr_cfg_doc_parse(const char *text, size_t len, const char *origin, cmr_cfg_doc_t *doc, char *err, size_t errlen);
/* Reads and parses a file ("-" = stdin). */
int cmr_cfg_doc_load(const char *path, cmr_cfg_doc_t *doc, char *err, size_t errlen);
void cmr_cfg_doc_free(cmr_cfg_doc_t *doc);

/* Default strategy settings of an environment that names none. */
void cmr_cfg_default_strategy(cmr_strategy_t *s);

/* Names used by the file format: "timer", "invocation-sequence", "anchor". */
const char *cmr_cfg_sensor_name(cmr_sensor_kind_t k);
int cmr_cfg_sensor_parse(const char *name); /* -1 when unknown */
/* An environment's trace-context policy: "authenticated", "any", "none". */
const char *cmr_cfg_trace_context_name(cmr_trace_context_policy_t p);
int cmr_cfg_trace_context_parse(const char *name); /* -1 when unknown */
/* JVM access flag of a modifier name ("public" -> 0x0001); 0 when unknown. */
int cmr_cfg_modifier_flag(const char *name);
/* Writes the names of `flags` separated by ", " into buf (prefix each with `neg` if set,
 * at most one character); buf holds CMR_CFG_MODIFIERS_MAX bytes or more (all twelve names
 * negated take 122). */
#define CMR_CFG_MODIFIERS_MAX 128
void cmr_cfg_modifiers_str(int flags, const char *neg, char *buf, size_t len);

/* Writes an environment / the mappings back in the file format (YAML), so that
 * `cmr-config show ID > f.yaml` can be edited and applied again. */
void cmr_cfg_write_env(const cmr_environment_t *env, void *stream /* FILE * */);
void cmr_cfg_write_mappings(const cmr_agent_mapping_t *m, size_t n, void *stream);

#endif

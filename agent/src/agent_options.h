/*
 * agent_options.h - the agent's options: from the -agentpath option string, environment
 * variables and an optional configuration file, into one cmr_conf_t.
 *
 *   -agentpath:/opt/cmr/libcmragent.so=bootstrap=kafka1:9092,kafka2:9092,name=shop
 *
 * The option string is a comma-separated list of key=value. A piece without '=' belongs
 * to the value before it, so broker lists need no quoting ("bootstrap=a:1,b:2"). Keys:
 *
 *   bootstrap=HOST:PORT[,...]   the CMR's Kafka cluster (kafka.bootstrap.servers)
 *   name=NAME                   agent name (default: "jvm")
 *   config=FILE                 configuration file ("key = value" lines, like the workers')
 *   log=LEVEL                   debug | info | warn | error | off (default info)
 *   strict=true                 abort the JVM on bad options instead of running without
 *                               the agent's features
 *   trust.keys=PUB[:PUB]        the CMR's public key file(s): commands must be signed by
 *                               one of them (docs/SECURITY.md); without it, no command
 *                               is accepted
 *   kafka.<property>=VALUE      any librdkafka property (security, timeouts...)
 *   any other key of the agent's table (agent_options.c, printed in docs/AGENT.md)
 *
 * Environment: CMR_AGENT_OPTIONS (same syntax), CMR_AGENT_BOOTSTRAP, CMR_AGENT_NAME,
 * CMR_AGENT_CONFIG, CMR_AGENT_TRUST_KEYS. Precedence, lowest first: file, environment,
 * option string.
 *
 * The file is read with cmr_file_read (regular files of at most 1 MiB; a FIFO or a device
 * fails at once) and an error in it names path:line and the reason, never its contents.
 */
#ifndef CMR_AGENT_OPTIONS_H
#define CMR_AGENT_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cmr/conf.h"
#include "cmr/trust.h"

/* Largest configuration file read (config=). */
#define CMR_AGENT_CONFIG_MAX_BYTES CMR_CONF_FILE_MAX

/* Settings the agent runs with, read from the configuration. */
typedef struct cmr_agent_settings {
    char name[128];
    char bootstrap[1024];
    bool strict;
    int64_t register_backoff_ms;     /* agent.register.backoff.ms, default 100 */
    int64_t register_backoff_max_ms; /* agent.register.backoff.max.ms, default 30000 */
    int64_t class_buffer_bytes;      /* agent.class.buffer.bytes: bytecode kept while not
                                         connected, default 64 MiB */
    int64_t ring_records;            /* agent.ring.records: per-thread ring, default 16384 */
    int64_t max_segment_events;      /* agent.segment.max.events: until the strategy says, default 100000 */
    int64_t send_interval_ms;        /* agent.send.interval.ms, default 10 */
    int64_t events_linger_ms;        /* agent.events.linger.ms: a partition's EventBatch
                                         message waits this long for more segments, default 200 */
    int64_t shutdown_flush_ms;       /* agent.shutdown.flush.ms, default 3000 */
    int64_t metric_interval_ms;      /* agent.metric.interval.ms, default 10000 */
    int64_t max_threads;             /* agent.max.threads with a ring at once, default 4096 */
    int64_t virtual_ring_records;    /* agent.virtual.ring.records: a virtual thread's ring, default 1024 */
    int64_t max_virtual_threads;     /* agent.max.virtual.threads with a ring at once, default 1024
                                         (0: virtual threads record nothing) */
    int64_t stall_threshold_ms;      /* agent.stall.threshold.ms, default 10000, 0: off */
    int64_t status_interval_ms;      /* agent.status.interval.ms, default 30000, 0: on changes */
    /* trust.keys: the CMR's public key files, in the order given (none: no command is
     * accepted) */
    char trust_keys[CMR_TRUST_MAX_KEYS][1024];
    int n_trust_keys;
    char cache_dir[1024];      /* agent.cache.dir: the grant cache ("" : none) */
    int64_t cache_max_bytes;   /* agent.cache.max.bytes, default 64 MiB */
    int64_t cache_max_files;   /* agent.cache.max.files, default 20000 */
    int64_t preload_max_bytes; /* agent.preload.max.bytes, default 64 MiB (0: no class granted ahead is kept) */
    int64_t preload_keep_ms;   /* agent.preload.keep.ms, default 10 min: unused classes granted ahead */
    char environment[128];     /* agent.environment: cached classes of it may run before configuration */
} cmr_agent_settings_t;

/* Parses one option string into conf. 0, or -1 with errbuf filled. */
int cmr_agent_options_parse(const char *options, const char *origin, cmr_conf_t *conf, char *errbuf, size_t errlen);

/* Builds the complete configuration: file (from config= in options or environment),
 * environment, then the option string. `getenv_fn` lets tests supply an environment
 * (NULL: the process's). 0, or -1 with errbuf filled. */
int cmr_agent_options_load(const char *options, const char *(*getenv_fn)(const char *), cmr_conf_t *conf, char *errbuf,
                           size_t errlen);

/* Reads a configuration file ("key = value" lines, '#' comments) into conf; only the
 * agent's keys are accepted. 0, or -1 with "path: reason" / "path:line: reason" in
 * errbuf (never the file's contents). */
int cmr_agent_config_file_load(cmr_conf_t *conf, const char *path, char *errbuf, size_t errlen);

/* Checks every key and fills settings. 0, or -1 with errbuf naming key and origin. */
int cmr_agent_settings_from_conf(const cmr_conf_t *conf, cmr_agent_settings_t *out, char *errbuf, size_t errlen);

/* The verifier of commands for this agent instance, with the keys of trust.keys pinned.
 * Returns the number of keys pinned (0: none configured), or -1 with errbuf saying which
 * key file failed and why; then *out has no key at all (no command is accepted: a key
 * list that is half right is a mistake to fix, not to run with). *out is NULL only when
 * memory ran out. The caller frees *out with cmr_verifier_free. */
int cmr_agent_verifier_new(const cmr_agent_settings_t *s, const char *instance_id, cmr_verifier_t **out, char *errbuf,
                           size_t errlen);

/* The keys the agent accepts (key, default, description; ended by {0}). */
const cmr_conf_key_t *cmr_agent_keys(void);
/* Prints them as a Markdown table (key, option string alias, environment variable,
 * default, meaning): docs/AGENT.md's table, see agent/tests/agent_keys.c. */
void cmr_agent_keys_markdown(FILE *out);

#endif

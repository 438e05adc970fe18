/*
 * agent_options.c - agent options from option string, environment and file
 * (see agent_options.h). Pure C, no JVM: unit tested in agent/tests.
 */
#include "agent_options.h"

#include "cmr/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ERRF(...)                                  \
    do {                                           \
        if (errbuf && errlen)                      \
            snprintf(errbuf, errlen, __VA_ARGS__); \
    } while (0)

/* Short option names and the configuration keys they stand for. */
static const struct {
    const char *alias, *key;
} option_aliases[] = {
    {"bootstrap", "kafka.bootstrap.servers"},
    {"name", "agent.name"},
    {"log", "log.level"},
    {"strict", "agent.strict"},
    {"config", "agent.config"},
};

static const char *const known_keys[] = {
    "kafka.bootstrap.servers",
    "agent.name",
    "log.level",
    "agent.strict",
    "agent.config",
    "topic.prefix",
    "agent.register.backoff.max.ms",
    "agent.class.buffer.bytes",
    "agent.ring.records",
    "agent.send.interval.ms",
    "agent.shutdown.flush.ms",
    "agent.metric.interval.ms",
    "agent.max.threads",
    NULL,
};
static const char *const known_prefixes[] = {"kafka.", NULL};

static const char *canonical_key(const char *key)
{
    for (size_t i = 0; i < sizeof option_aliases / sizeof option_aliases[0]; i++)
        if (strcmp(key, option_aliases[i].alias) == 0)
            return option_aliases[i].key;
    return key;
}

int cmr_agent_options_parse(const char *options, const char *origin, cmr_conf_t *conf, char *errbuf, size_t errlen)
{
    if (!options || !*options)
        return 0;
    char *copy = strdup(options);
    if (!copy) {
        ERRF("out of memory");
        return -1;
    }
    /* Split on ',' and glue pieces without '=' to the value before them. */
    char *key = NULL, *value = NULL;
    size_t cap = strlen(options) + 1;
    char *joined = malloc(cap);
    int rc = 0;
    char *save = NULL;
    for (char *piece = strtok_r(copy, ",", &save);; piece = strtok_r(NULL, ",", &save)) {
        char *eq = piece ? strchr(piece, '=') : NULL;
        if (piece && !eq) {
            if (!key) {
                ERRF("%s: \"%s\" is not key=value", origin, piece);
                rc = -1;
                break;
            }
            size_t n = strlen(joined);
            snprintf(joined + n, cap - n, ",%s", piece);
            continue;
        }
        if (key) { /* the previous key is complete */
            char assignment[4096];
            snprintf(assignment, sizeof assignment, "%s=%s", canonical_key(key), joined);
            if ((rc = cmr_conf_set_assignment(conf, assignment, origin, errbuf, errlen)) != 0)
                break;
        }
        if (!piece)
            break;
        *eq = '\0';
        key = piece;
        value = eq + 1;
        snprintf(joined, cap, "%s", value);
    }
    free(joined);
    free(copy);
    return rc;
}

static int copy_one(const char *key, const char *value, const char *origin, void *opaque)
{
    return cmr_conf_set((cmr_conf_t *)opaque, key, value, origin);
}

static const char *process_getenv(const char *name)
{
    return getenv(name);
}

int cmr_agent_options_load(const char *options, const char *(*getenv_fn)(const char *), cmr_conf_t *conf, char *errbuf,
                           size_t errlen)
{
    if (!getenv_fn)
        getenv_fn = process_getenv;
    /* Parse environment and options into scratch confs first to learn the file. */
    cmr_conf_t *env = cmr_conf_new(), *opts = cmr_conf_new();
    int rc = -1;
    if (!env || !opts) {
        ERRF("out of memory");
        goto out;
    }
    const char *v;
    if ((v = getenv_fn("CMR_AGENT_OPTIONS")) &&
        cmr_agent_options_parse(v, "CMR_AGENT_OPTIONS", env, errbuf, errlen) != 0)
        goto out;
    if ((v = getenv_fn("CMR_AGENT_BOOTSTRAP")))
        cmr_conf_set(env, "kafka.bootstrap.servers", v, "CMR_AGENT_BOOTSTRAP");
    if ((v = getenv_fn("CMR_AGENT_NAME")))
        cmr_conf_set(env, "agent.name", v, "CMR_AGENT_NAME");
    if ((v = getenv_fn("CMR_AGENT_CONFIG")))
        cmr_conf_set(env, "agent.config", v, "CMR_AGENT_CONFIG");
    if (cmr_agent_options_parse(options, "agent options", opts, errbuf, errlen) != 0)
        goto out;

    const char *file = cmr_conf_get(opts, "agent.config", cmr_conf_get(env, "agent.config", NULL));
    if (file && cmr_conf_load_file(conf, file, errbuf, errlen) != 0)
        goto out;
    rc = 0;
    /* environment over file, options over environment */
    cmr_conf_t *layers[2] = {env, opts};
    for (int l = 0; l < 2 && rc == 0; l++) {
        if (cmr_conf_foreach(layers[l], "", copy_one, conf) != 0) {
            ERRF("out of memory");
            rc = -1;
        }
    }
out:
    cmr_conf_destroy(env);
    cmr_conf_destroy(opts);
    return rc;
}

int cmr_agent_settings_from_conf(const cmr_conf_t *conf, cmr_agent_settings_t *out, char *errbuf, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (cmr_conf_check_known(conf, known_keys, known_prefixes, errbuf, errlen) != 0)
        return -1;
    const char *name = cmr_conf_get(conf, "agent.name", "jvm");
    const char *bootstrap = cmr_conf_get(conf, "kafka.bootstrap.servers", NULL);
    if (!*name || strlen(name) >= sizeof out->name) {
        ERRF("%s: agent.name must be 1..%zu characters", cmr_conf_origin(conf, "agent.name"), sizeof out->name - 1);
        return -1;
    }
    if (!bootstrap || !*bootstrap) {
        ERRF("no CMR address: give bootstrap=HOST:PORT in the agent options or CMR_AGENT_BOOTSTRAP");
        return -1;
    }
    if (strlen(bootstrap) >= sizeof out->bootstrap) {
        ERRF("%s: bootstrap list too long", cmr_conf_origin(conf, "kafka.bootstrap.servers"));
        return -1;
    }
    snprintf(out->name, sizeof out->name, "%s", name);
    snprintf(out->bootstrap, sizeof out->bootstrap, "%s", bootstrap);
    if (cmr_conf_get_bool(conf, "agent.strict", false, &out->strict, errbuf, errlen) ||
        cmr_conf_get_int(conf, "agent.register.backoff.max.ms", 30000, 100, 3600000, &out->register_backoff_max_ms,
                         errbuf, errlen) ||
        cmr_conf_get_int(conf, "agent.class.buffer.bytes", 64 << 20, 0, INT64_C(1) << 34, &out->class_buffer_bytes,
                         errbuf, errlen) ||
        cmr_conf_get_int(conf, "agent.ring.records", 16384, 64, 1 << 24, &out->ring_records, errbuf, errlen) ||
        cmr_conf_get_int(conf, "agent.send.interval.ms", 10, 1, 60000, &out->send_interval_ms, errbuf, errlen) ||
        cmr_conf_get_int(conf, "agent.shutdown.flush.ms", 3000, 0, 600000, &out->shutdown_flush_ms, errbuf, errlen) ||
        cmr_conf_get_int(conf, "agent.metric.interval.ms", 10000, 100, 3600000, &out->metric_interval_ms, errbuf,
                         errlen) ||
        cmr_conf_get_int(conf, "agent.max.threads", 4096, 1, 1 << 20, &out->max_threads, errbuf, errlen))
        return -1;
    const char *level = cmr_conf_get(conf, "log.level", "info");
    if (cmr_log_level_parse(level) < 0) {
        ERRF("%s: log.level = \"%s\" is not one of debug, info, warn, error, off", cmr_conf_origin(conf, "log.level"),
             level);
        return -1;
    }
    return 0;
}

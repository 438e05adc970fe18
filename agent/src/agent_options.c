/*
 * agent_options.c - agent options from option string, environment and file
 * (see agent_options.h). Pure C, no JVM: unit tested in agent/tests.
 */
#include "agent_options.h"

#include "cmr/buf.h"
#include "cmr/file.h"
#include "cmr/log.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ERRF(...)                                  \
    do {                                           \
        if (errbuf && errlen)                      \
            snprintf(errbuf, errlen, __VA_ARGS__); \
    } while (0)

/* Every key the agent accepts: cmr_agent_settings_from_conf rejects any other, and
 * docs/AGENT.md's table is generated from it (cmr-agent-keys --help-keys). */
static const cmr_conf_key_t agent_keys[] = {
    {"kafka.bootstrap.servers", NULL, "the CMR's Kafka cluster, HOST:PORT[,...] (required)"},
    {"agent.name", "jvm", "agent name; with the host it selects the environment"},
    {"agent.config", NULL, "configuration file (\"key = value\" lines)"},
    {"log.level", "info", "debug, info, warn, error or off"},
    {"agent.strict", "false", "abort the JVM on bad options (false: the JVM runs without the agent's features)"},
    {"agent.probe.jar", NULL,
     "the probe jar to put on the bootstrap class path (default: cmr-agent-probe.jar next to libcmragent.so)"},
    CMR_CONF_KEY_TOPIC_PREFIX,
    {"agent.register.backoff.ms", "100",
     "wait before the second registration attempt; it doubles with every attempt up to agent.register.backoff.max.ms"},
    {"agent.register.backoff.max.ms", "30000", "longest wait between registration attempts"},
    {"agent.class.buffer.bytes", "67108864",
     "bytecode kept while not connected (64 MiB); past it only names are kept and the bytes are fetched from the JVM "
     "again later"},
    {"agent.ring.records", "16384",
     "events a thread's ring holds (rounded up to a power of two); the CMR's strategy may change it for new threads"},
    {"agent.segment.max.events", "100000",
     "events one thread segment of a trace may hold: deeper calls past it are not recorded and the trace is marked "
     "truncated (the CMR's strategy, max_segment_events, overrides it)"},
    {"agent.send.interval.ms", "10", "how often the rings are drained"},
    {"agent.events.linger.ms", "200",
     "how long a partition's EventBatch message may wait for more segments before it is sent (sooner once full, "
     "and at the JVM's exit): fewer, larger messages carry each method id once for more calls (0: sent at the end "
     "of every drain)"},
    {"agent.metric.interval.ms", "10000",
     "metric interval: per-method and per-transaction aggregates, stalled calls (the CMR's strategy overrides it)"},
    {"agent.max.threads", "4096",
     "threads that may hold a ring at once; probes of more threads record nothing and are counted"},
    {"agent.virtual.ring.records", "1024",
     "records in a virtual thread's ring (JDK 21+), rounded up to a power of two; 64 .. 1048576"},
    {"agent.max.virtual.threads", "1024",
     "virtual threads that may hold a ring at once (each freed when the virtual thread ends); more record nothing "
     "and are counted as refused rings; 0: virtual threads record nothing"},
    {"agent.stall.threshold.ms", "10000",
     "a call still running after this long is reported as stalled at each metric interval's end (0: never); the "
     "CMR's strategy overrides it"},
    {"agent.status.interval.ms", "30000",
     "how often the agent reports its status while configured (0: only when its state changes)"},
    {"agent.shutdown.flush.ms", "3000",
     "how long the JVM's exit may wait for the last events (500 when the cluster does not answer)"},
    {"agent.cache.dir", NULL,
     "directory of the cache of instrumented classes (class grants signed by the CMR, docs/AGENT.md): a restarted JVM "
     "of the same environment gets them at load time, without redefinition; created with mode 0700, refused when "
     "others may use it; unset: no cache"},
    {"agent.cache.max.bytes", "67108864", "largest total size of the cache's files (64 MiB); the oldest go first"},
    {"agent.cache.max.files", "20000", "most files in the cache; the oldest go first"},
    {"agent.preload.max.bytes", "67108864",
     "most instrumented bytes the agent keeps of the classes the CMR grants ahead of their load (64 MiB; "
     "docs/AGENT.md, "
     "\"Classes granted ahead\"): such a class is instrumented as it loads, without redefinition; 0: none kept, every "
     "class is instrumented by redefinition"},
    {"agent.preload.keep.ms", "600000",
     "how long after the last classes granted ahead arrived those that no class load used are kept (10 min); those "
     "used stay for the JVM's life"},
    {"agent.environment", NULL,
     "the environment id whose cached classes this JVM may use before the CMR configures it (default: the one the CMR "
     "gave the previous run of this agent name, recorded in agent.cache.dir); a different answer from the CMR "
     "restores the original bytes"},
    {"trust.keys", NULL,
     "the CMR's public key files (`cmr-config keygen`), one or two (rotation) separated by ':'; commands are "
     "accepted only when signed by one of them, none at all without it"},
    CMR_CONF_KEY_KAFKA,
    {0},
};

/* Short names in the option string, and environment variables, for some of the keys. */
static const struct {
    const char *alias, *env, *key;
} option_aliases[] = {
    {"bootstrap", "CMR_AGENT_BOOTSTRAP", "kafka.bootstrap.servers"},
    {"name", "CMR_AGENT_NAME", "agent.name"},
    {"log", NULL, "log.level"},
    {"strict", NULL, "agent.strict"},
    {"config", "CMR_AGENT_CONFIG", "agent.config"},
    {NULL, "CMR_AGENT_TRUST_KEYS", "trust.keys"}, /* no short name: trust.keys=... */
};
#define N_ALIASES (sizeof option_aliases / sizeof option_aliases[0])

static const char *canonical_key(const char *key)
{
    for (size_t i = 0; i < N_ALIASES; i++)
        if (option_aliases[i].alias && strcmp(key, option_aliases[i].alias) == 0)
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

/* --- the configuration file ------------------------------------------------------------
 * Read by cmr_conf_load_file (regular files only, at most CMR_CONF_FILE_MAX bytes, never
 * blocking on a FIFO or a device). Whatever file config= names (it may be the wrong one,
 * and a secret one), an error names the path, the line number and the reason, never a
 * byte of the contents: not even an unknown key's name. */

typedef struct config_check {
    char *errbuf;
    size_t errlen;
} config_check_t;

static int config_key(const char *key, const char *value, const char *origin, void *opaque)
{
    (void)value;
    config_check_t *c = opaque;
    char *errbuf = c->errbuf;
    size_t errlen = c->errlen;
    if (!cmr_conf_key_find(agent_keys, key)) {
        ERRF("%s: unknown configuration key (the line is not shown; see docs/AGENT.md for the keys)", origin);
        return -1;
    }
    return 0;
}

int cmr_agent_config_file_load(cmr_conf_t *conf, const char *path, char *errbuf, size_t errlen)
{
    cmr_conf_t *file = cmr_conf_new();
    if (!file) {
        ERRF("%s: out of memory", path);
        return -1;
    }
    config_check_t c = {errbuf, errlen};
    int rc = cmr_conf_load_file(file, path, errbuf, errlen);
    if (rc == 0)
        rc = cmr_conf_foreach(file, "", config_key, &c);
    if (rc == 0 && cmr_conf_merge(conf, file) != 0) {
        ERRF("%s: out of memory", path);
        rc = -1;
    }
    cmr_conf_destroy(file);
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
    for (size_t i = 0; i < N_ALIASES; i++)
        if (option_aliases[i].env && (v = getenv_fn(option_aliases[i].env)))
            cmr_conf_set(env, option_aliases[i].key, v, option_aliases[i].env);
    if (cmr_agent_options_parse(options, "agent options", opts, errbuf, errlen) != 0)
        goto out;

    const char *file = cmr_conf_get(opts, "agent.config", cmr_conf_get(env, "agent.config", NULL));
    if (file && cmr_agent_config_file_load(conf, file, errbuf, errlen) != 0)
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

/* trust.keys: one or two paths separated by ':'. */
static int parse_trust_keys(const cmr_conf_t *conf, cmr_agent_settings_t *out, char *errbuf, size_t errlen)
{
    const char *list = cmr_conf_get(conf, "trust.keys", NULL);
    out->n_trust_keys = 0;
    if (!list || !*list)
        return 0;
    const char *origin = cmr_conf_origin(conf, "trust.keys");
    for (const char *p = list;;) {
        const char *end = strchr(p, ':');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n == 0) {
            ERRF("%s: trust.keys has an empty key file name (PUB or PUB:PUB)", origin);
            return -1;
        }
        if (out->n_trust_keys == CMR_TRUST_MAX_KEYS) {
            ERRF("%s: trust.keys names more than %d key files (the current key and the next one)", origin,
                 CMR_TRUST_MAX_KEYS);
            return -1;
        }
        if (n >= sizeof out->trust_keys[0]) {
            ERRF("%s: trust.keys: a key file name is longer than %zu characters", origin,
                 sizeof out->trust_keys[0] - 1);
            return -1;
        }
        snprintf(out->trust_keys[out->n_trust_keys++], sizeof out->trust_keys[0], "%.*s", (int)n, p);
        if (!end)
            return 0;
        p = end + 1;
    }
}

int cmr_agent_settings_from_conf(const cmr_conf_t *conf, cmr_agent_settings_t *out, char *errbuf, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (cmr_conf_check_known(conf, agent_keys, errbuf, errlen) != 0)
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
        cmr_conf_get_int(conf, "agent.register.backoff.ms", 100, 10, 3600000, &out->register_backoff_ms, errbuf,
                         errlen) ||
        cmr_conf_get_int(conf, "agent.register.backoff.max.ms", 30000, 100, 3600000, &out->register_backoff_max_ms,
                         errbuf, errlen) ||
        cmr_conf_get_int(conf, "agent.class.buffer.bytes", 64 << 20, 0, INT64_C(1) << 34, &out->class_buffer_bytes,
                         errbuf, errlen) ||
        cmr_conf_get_int(conf, "agent.ring.records", 16384, 64, 1 << 24, &out->ring_records, errbuf, errlen) ||
        cmr_conf_get_int(conf, "agent.segment.max.events", 100000, 100, 1 << 30, &out->max_segment_events, errbuf,
                         errlen) ||
        cmr_conf_get_int(conf, "agent.send.interval.ms", 10, 1, 60000, &out->send_interval_ms, errbuf, errlen) ||
        cmr_conf_get_int(conf, "agent.events.linger.ms", 200, 0, 10000, &out->events_linger_ms, errbuf, errlen) ||
        cmr_conf_get_int(conf, "agent.shutdown.flush.ms", 3000, 0, 600000, &out->shutdown_flush_ms, errbuf, errlen) ||
        cmr_conf_get_int(conf, "agent.metric.interval.ms", 10000, 100, 3600000, &out->metric_interval_ms, errbuf,
                         errlen) ||
        cmr_conf_get_int(conf, "agent.max.threads", 4096, 1, 1 << 20, &out->max_threads, errbuf, errlen) ||
        cmr_conf_get_int(conf, "agent.virtual.ring.records", 1024, 64, 1 << 20, &out->virtual_ring_records, errbuf,
                         errlen) ||
        cmr_conf_get_int(conf, "agent.max.virtual.threads", 1024, 0, 1 << 20, &out->max_virtual_threads, errbuf,
                         errlen) ||
        cmr_conf_get_int(conf, "agent.stall.threshold.ms", 10000, 0, 86400000, &out->stall_threshold_ms, errbuf,
                         errlen) ||
        cmr_conf_get_int(conf, "agent.status.interval.ms", 30000, 0, 86400000, &out->status_interval_ms, errbuf,
                         errlen) ||
        cmr_conf_get_int(conf, "agent.cache.max.bytes", 64 << 20, 0, INT64_C(1) << 40, &out->cache_max_bytes, errbuf,
                         errlen) ||
        cmr_conf_get_int(conf, "agent.cache.max.files", 20000, 0, 10000000, &out->cache_max_files, errbuf, errlen) ||
        cmr_conf_get_int(conf, "agent.preload.max.bytes", 64 << 20, 0, INT64_C(1) << 40, &out->preload_max_bytes,
                         errbuf, errlen) ||
        cmr_conf_get_int(conf, "agent.preload.keep.ms", 600000, 1000, INT64_C(7) * 86400000, &out->preload_keep_ms,
                         errbuf, errlen))
        return -1;
    if (parse_trust_keys(conf, out, errbuf, errlen) != 0)
        return -1;
    const char *cache_dir = cmr_conf_get(conf, "agent.cache.dir", NULL);
    const char *environment = cmr_conf_get(conf, "agent.environment", NULL);
    if ((cache_dir && strlen(cache_dir) >= sizeof out->cache_dir) ||
        (environment && strlen(environment) >= sizeof out->environment)) {
        ERRF("%s: agent.cache.dir (at most %zu characters) or agent.environment (at most %zu) too long",
             cmr_conf_origin(conf, cache_dir && strlen(cache_dir) >= sizeof out->cache_dir ? "agent.cache.dir"
                                                                                           : "agent.environment"),
             sizeof out->cache_dir - 1, sizeof out->environment - 1);
        return -1;
    }
    snprintf(out->cache_dir, sizeof out->cache_dir, "%s", cache_dir ? cache_dir : "");
    snprintf(out->environment, sizeof out->environment, "%s", environment ? environment : "");
    const char *level = cmr_conf_get(conf, "log.level", "info");
    if (cmr_log_level_parse(level) < 0) {
        char shown[300];
        ERRF("%s: log.level = %s is not one of debug, info, warn, error, off", cmr_conf_origin(conf, "log.level"),
             cmr_conf_shown(conf, "log.level", shown, sizeof shown));
        return -1;
    }
    return 0;
}

int cmr_agent_verifier_new(const cmr_agent_settings_t *s, const char *instance_id, cmr_verifier_t **out, char *errbuf,
                           size_t errlen)
{
    *out = NULL;
    if (cmr_trust_init() != 0) {
        ERRF("libsodium cannot run here: no signature can be checked");
        *out = cmr_verifier_new(instance_id, NULL);
        return -1;
    }
    cmr_verifier_t *v = cmr_verifier_new(instance_id, NULL);
    if (!v) {
        ERRF("out of memory");
        return -1;
    }
    for (int i = 0; i < s->n_trust_keys; i++) {
        char why[512];
        if (cmr_verifier_add_key_file(v, s->trust_keys[i], why, sizeof why) != 0) {
            ERRF("trust.keys: %s", why);
            cmr_verifier_free(v); /* none pinned rather than some */
            *out = cmr_verifier_new(instance_id, NULL);
            return -1;
        }
    }
    *out = v;
    return s->n_trust_keys;
}

const cmr_conf_key_t *cmr_agent_keys(void)
{
    return agent_keys;
}

void cmr_agent_keys_markdown(FILE *out)
{
    const char *head[] = {"key", "option string", "environment", "default", "meaning"};
    const char *rule[] = {"---", "---", "---", "---", "---"};
    cmr_markdown_row(out, head, 5);
    cmr_markdown_row(out, rule, 5);
    for (const cmr_conf_key_t *k = agent_keys; k->key; k++) {
        char key[160], alias[64] = "", env[64] = "", def[160] = "";
        snprintf(key, sizeof key, "`%s`", k->key);
        for (size_t i = 0; i < N_ALIASES; i++) {
            if (strcmp(option_aliases[i].key, k->key) != 0)
                continue;
            if (option_aliases[i].alias)
                snprintf(alias, sizeof alias, "`%s`", option_aliases[i].alias);
            if (option_aliases[i].env)
                snprintf(env, sizeof env, "`%s`", option_aliases[i].env);
        }
        if (k->def)
            snprintf(def, sizeof def, "`%s`", k->def);
        const char *cells[] = {key, alias, env, def, k->description};
        cmr_markdown_row(out, cells, 5);
    }
}

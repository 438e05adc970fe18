/*
 * conf.h - configuration shared by every program: one file format plus command-line
 * overrides, and the command-line conventions (--help, -c, -X, clear errors).
 *
 * File format (Java-properties style, like Kafka's own client files):
 *
 *     # comment
 *     kafka.bootstrap.servers = broker1:9092,broker2:9092
 *     kafka.security.protocol = SASL_SSL
 *     log.level               = info
 *
 * Keys starting with "kafka." are handed to librdkafka with the prefix removed, so every
 * librdkafka property (SASL, TLS, timeouts, ...) can be set. Later settings win: files
 * in the order given, then command-line options in the order given.
 *
 * Every program accepts:
 *   -c, --config FILE      read a configuration file (may repeat)
 *   -X, --set KEY=VALUE    set any configuration key
 *       --bootstrap ADDR   shorthand for -X kafka.bootstrap.servers=ADDR
 *       --log-level LEVEL  debug | info | warn | error
 *   -h, --help             usage
 *       --help-keys        the configuration keys, as a Markdown table
 *
 * Every program lists the keys it accepts in ONE table of cmr_conf_key_t (key, default,
 * description): the unknown-key check accepts exactly those (plus the keys its options
 * set and the common ones), --help-keys prints them, and scripts/gen-docs.sh writes that
 * output into docs/CONFIGURATION.md (tests/docs checks the docs and the code agree).
 */
#ifndef CMR_CONF_H
#define CMR_CONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cmr_conf cmr_conf_t;

cmr_conf_t *cmr_conf_new(void);
void cmr_conf_destroy(cmr_conf_t *conf);
/* Sets every key of src in dst (later wins), keeping where each came from. 0, or -1 on out
 * of memory. */
int cmr_conf_merge(cmr_conf_t *dst, const cmr_conf_t *src);
/* Deep copy (NULL on out of memory). */
cmr_conf_t *cmr_conf_dup(const cmr_conf_t *conf);

/* Sets key to value (both copied). `origin` names where it came from, for messages
 * ("file.conf:12", "command line"); may be NULL. Returns 0, -1 on out of memory. */
int cmr_conf_set(cmr_conf_t *conf, const char *key, const char *value, const char *origin);
/* Parses "key=value". Returns 0, or -1 with errbuf filled. */
int cmr_conf_set_assignment(cmr_conf_t *conf, const char *assignment, const char *origin, char *errbuf, size_t errlen);
/* Reads a file in the format above: a regular file of at most CMR_CONF_FILE_MAX bytes (a
 * FIFO or a device is refused at once). Returns 0, or -1 with "path:line: reason" in
 * errbuf; the file's text is never quoted in the reason. */
#define CMR_CONF_FILE_MAX ((size_t)1 << 20)
int cmr_conf_load_file(cmr_conf_t *conf, const char *path, char *errbuf, size_t errlen);

/* The value of key, or `def` when unset. The pointer lives until the key is set again. */
const char *cmr_conf_get(const cmr_conf_t *conf, const char *key, const char *def);
const char *cmr_conf_origin(const cmr_conf_t *conf, const char *key);
/* How an error shows key's value: quoted and escaped when it was typed (command line,
 * agent option string, environment), "(the value in the file)" when a file set it (a file
 * may hold secrets), "(unset)". Writes into buf and returns it. */
const char *cmr_conf_shown(const cmr_conf_t *conf, const char *key, char *buf, size_t n);
/* Typed getters: 0 with *out set (to def when unset), or -1 with errbuf saying which key,
 * where it was set and what is wrong. */
int cmr_conf_get_int(const cmr_conf_t *conf, const char *key, int64_t def, int64_t min, int64_t max, int64_t *out,
                     char *errbuf, size_t errlen);
int cmr_conf_get_bool(const cmr_conf_t *conf, const char *key, bool def, bool *out, char *errbuf, size_t errlen);

/* Calls fn for every key that starts with prefix (in first-set order), with the prefix
 * stripped from the key. Stops and returns fn's value when it is non-zero. */
typedef int(cmr_conf_each_fn)(const char *key, const char *value, const char *origin, void *opaque);
int cmr_conf_foreach(const cmr_conf_t *conf, const char *prefix, cmr_conf_each_fn *fn, void *opaque);

/* One configuration key a program accepts. A key ending in ".*" stands for every key
 * with that prefix ("kafka.*"). Tables end with {0}. */
typedef struct cmr_conf_key {
    const char *key;
    const char *def;         /* the default the code uses, as text; NULL: none, or computed
                              * (then the description says how) */
    const char *description; /* one line; NULL only when a command-line option sets the key
                              * (its help text is used) */
} cmr_conf_key_t;

/* Rows several programs share. */
#define CMR_CONF_KEY_TOPIC_PREFIX                                                                         \
    {                                                                                                     \
        "topic.prefix", "cmr", "prefix of every topic name, so several installations can share a cluster" \
    }
#define CMR_CONF_KEY_KAFKA                                                                                       \
    {                                                                                                            \
        "kafka.*", NULL,                                                                                         \
            "handed to librdkafka without the prefix: every librdkafka property works (security, timeouts, ...)" \
    }

/* The row of `keys` that accepts key (exactly, or by a ".*" prefix), or NULL. */
const cmr_conf_key_t *cmr_conf_key_find(const cmr_conf_key_t *keys, const char *key);

/* Fails on the first key of conf that `keys` does not accept, with "origin: unknown
 * configuration key" in errbuf: catches typos in files. */
int cmr_conf_check_known(const cmr_conf_t *conf, const cmr_conf_key_t *keys, char *errbuf, size_t errlen);

/* Writes one Markdown table row "| a | b |" to stream (a FILE *): cells as given, with '|'
 * escaped; NULL cells are empty. */
void cmr_markdown_row(void *stream, const char *const *cells, size_t ncells);

/* --- command line ------------------------------------------------------------------ */

typedef struct cmr_cli_option {
    const char *name; /* long name without dashes */
    char short_name;  /* 0 when none */
    const char *key;  /* configuration key the option sets */
    const char *arg;  /* name of the argument in --help; NULL: a flag that sets "true" */
    const char *help;
} cmr_cli_option_t;

typedef struct cmr_cli {
    const char *program;
    const char *synopsis;            /* e.g. "[options] apply FILE" */
    const char *summary;             /* one paragraph shown by --help */
    const cmr_cli_option_t *options; /* program's own options, ended by {0} */
    const cmr_conf_key_t *keys;      /* every key the program accepts (ended by {0}), with
                                        * the keys its options set; log.level and
                                        * kafka.bootstrap.servers are added for every program */
} cmr_cli_t;

enum { CMR_CLI_OK = 0, CMR_CLI_HELP = 1, CMR_CLI_ERROR = 2 };

/* Parses argv into conf (files first, then options in order) and applies log.level.
 * Returns CMR_CLI_OK with *first_arg at the first positional argument, CMR_CLI_HELP
 * after printing usage on stdout, or CMR_CLI_ERROR after printing a clear message on
 * stderr (callers exit with 2). */
int cmr_cli_parse(const cmr_cli_t *cli, int argc, char **argv, cmr_conf_t *conf, int *first_arg);
void cmr_cli_usage(const cmr_cli_t *cli, void *stream /* FILE * */);
/* --help-keys: prints the keys the program accepts as a Markdown table (key, option,
 * default, meaning): the program's rows, then the common ones. Returns 0, or -1 with a
 * message on stderr when one of the program's options sets a key that has no row. */
int cmr_cli_print_keys(const cmr_cli_t *cli, void *stream /* FILE * */);

#endif

/*
 * conf.c - configuration files, key/value store and command-line parsing (see conf.h).
 *
 * The store is a small array kept in first-set order: programs hold a few dozen keys at
 * most, and deterministic order keeps librdkafka configuration and --help stable.
 */
#include "cmr/conf.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/buf.h"
#include "cmr/file.h"
#include "cmr/log.h"

typedef struct conf_entry {
    char *key;
    char *value;
    char *origin;
    bool from_file; /* set by a configuration file: the value is never quoted in an error */
} conf_entry_t;

struct cmr_conf {
    conf_entry_t *items;
    size_t count;
    size_t cap;
};

#define ERRF(...)                                  \
    do {                                           \
        if (errbuf && errlen)                      \
            snprintf(errbuf, errlen, __VA_ARGS__); \
    } while (0)

cmr_conf_t *cmr_conf_new(void)
{
    return calloc(1, sizeof(cmr_conf_t));
}

void cmr_conf_destroy(cmr_conf_t *conf)
{
    if (!conf)
        return;
    for (size_t i = 0; i < conf->count; i++) {
        free(conf->items[i].key);
        free(conf->items[i].value);
        free(conf->items[i].origin);
    }
    free(conf->items);
    free(conf);
}

static conf_entry_t *conf_find(const cmr_conf_t *conf, const char *key)
{
    for (size_t i = 0; i < conf->count; i++)
        if (strcmp(conf->items[i].key, key) == 0)
            return &conf->items[i];
    return NULL;
}

static int conf_set(cmr_conf_t *conf, const char *key, const char *value, const char *origin, bool from_file)
{
    char *v = strdup(value);
    char *o = strdup(origin ? origin : "program");
    if (!v || !o)
        goto oom;
    conf_entry_t *e = conf_find(conf, key);
    if (e) {
        free(e->value);
        free(e->origin);
        e->value = v;
        e->origin = o;
        e->from_file = from_file;
        return 0;
    }
    if (CMR_ARRAY_GROW(conf->items, conf->cap, conf->count + 1) != 0)
        goto oom;
    char *k = strdup(key);
    if (!k)
        goto oom;
    conf->items[conf->count++] = (conf_entry_t){k, v, o, from_file};
    return 0;
oom:
    free(v);
    free(o);
    return -1;
}

int cmr_conf_set(cmr_conf_t *conf, const char *key, const char *value, const char *origin)
{
    return conf_set(conf, key, value, origin, false);
}

const char *cmr_conf_shown(const cmr_conf_t *conf, const char *key, char *buf, size_t n)
{
    const conf_entry_t *e = conf ? conf_find(conf, key) : NULL;
    if (!e)
        snprintf(buf, n, "(unset)");
    else if (e->from_file)
        snprintf(buf, n, "(the value in the file)");
    else {
        char esc[256];
        snprintf(buf, n, "\"%s\"", cmr_log_escape(e->value, esc, sizeof esc));
    }
    return buf;
}

int cmr_conf_merge(cmr_conf_t *dst, const cmr_conf_t *src)
{
    for (size_t i = 0; i < src->count; i++) {
        const conf_entry_t *e = &src->items[i];
        if (conf_set(dst, e->key, e->value, e->origin, e->from_file) != 0)
            return -1;
    }
    return 0;
}

cmr_conf_t *cmr_conf_dup(const cmr_conf_t *conf)
{
    cmr_conf_t *copy = cmr_conf_new();
    if (copy && cmr_conf_merge(copy, conf) != 0) {
        cmr_conf_destroy(copy);
        return NULL;
    }
    return copy;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *end = s + strlen(s);
    while (end > s && isspace((unsigned char)end[-1]))
        *--end = '\0';
    return s;
}

static int valid_key(const char *key)
{
    if (!*key)
        return 0;
    for (const char *p = key; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("._-", *p))
            return 0;
    return 1;
}

/* Sets "key=value". Text from a file is never quoted back in an error (the file may be
 * anything: a password database given by mistake); what a person typed on the command
 * line is. */
static int set_assignment(cmr_conf_t *conf, const char *assignment, const char *origin, bool quote, char *errbuf,
                          size_t errlen)
{
    char *copy = strdup(assignment);
    if (!copy) {
        ERRF("%s: out of memory", origin);
        return -1;
    }
    int rc = -1;
    char *eq = strchr(copy, '=');
    if (!eq) {
        if (quote)
            ERRF("%s: expected KEY=VALUE, got \"%s\"", origin, assignment);
        else
            ERRF("%s: expected \"key = value\"", origin);
    } else {
        *eq = '\0';
        char *key = trim(copy), *value = trim(eq + 1);
        if (!valid_key(key) && quote)
            ERRF("%s: \"%s\" is not a valid key (letters, digits, '.', '_', '-')", origin, key);
        else if (!valid_key(key))
            ERRF("%s: not a valid key (letters, digits, '.', '_', '-')", origin);
        else if (conf_set(conf, key, value, origin, !quote) != 0)
            ERRF("%s: out of memory", origin);
        else
            rc = 0;
    }
    free(copy);
    return rc;
}

int cmr_conf_set_assignment(cmr_conf_t *conf, const char *assignment, const char *origin, char *errbuf, size_t errlen)
{
    return set_assignment(conf, assignment, origin, true, errbuf, errlen);
}

int cmr_conf_load_file(cmr_conf_t *conf, const char *path, char *errbuf, size_t errlen)
{
    cmr_buf_t text = {0};
    char err[512];
    if (cmr_file_read(path, CMR_CONF_FILE_MAX, &text, err, sizeof err) != 0) {
        ERRF("%s", err);
        cmr_buf_free(&text);
        return -1;
    }
    if (text.len && memchr(text.data, '\0', text.len)) {
        ERRF("%s: NUL bytes: not a configuration file", path);
        cmr_buf_free(&text);
        return -1;
    }
    int lineno = 0, rc = 0;
    char *next = (char *)text.data;
    while (rc == 0 && next && *next) {
        char *line = next;
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        lineno++;
        char *s = trim(line);
        if (!*s || *s == '#' || *s == '!')
            continue;
        char origin[512];
        snprintf(origin, sizeof origin, "%s:%d", path, lineno);
        rc = set_assignment(conf, s, origin, false, errbuf, errlen);
    }
    cmr_buf_free(&text);
    return rc;
}

const char *cmr_conf_get(const cmr_conf_t *conf, const char *key, const char *def)
{
    const conf_entry_t *e = conf ? conf_find(conf, key) : NULL;
    return e ? e->value : def;
}

const char *cmr_conf_origin(const cmr_conf_t *conf, const char *key)
{
    const conf_entry_t *e = conf ? conf_find(conf, key) : NULL;
    return e ? e->origin : "default";
}

int cmr_conf_get_int(const cmr_conf_t *conf, const char *key, int64_t def, int64_t min, int64_t max, int64_t *out,
                     char *errbuf, size_t errlen)
{
    const char *v = cmr_conf_get(conf, key, NULL);
    if (!v) {
        *out = def;
        return 0;
    }
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 0);
    if (errno || end == v || *trim(end) != '\0') {
        char shown[300];
        ERRF("%s: %s = %s is not an integer", cmr_conf_origin(conf, key), key,
             cmr_conf_shown(conf, key, shown, sizeof shown));
        return -1;
    }
    if (n < min || n > max) {
        ERRF("%s: %s is outside %lld..%lld", cmr_conf_origin(conf, key), key, (long long)min, (long long)max);
        return -1;
    }
    *out = n;
    return 0;
}

int cmr_conf_get_bool(const cmr_conf_t *conf, const char *key, bool def, bool *out, char *errbuf, size_t errlen)
{
    const char *v = cmr_conf_get(conf, key, NULL);
    if (!v) {
        *out = def;
        return 0;
    }
    if (!strcmp(v, "true") || !strcmp(v, "1") || !strcmp(v, "yes") || !strcmp(v, "on")) {
        *out = true;
    } else if (!strcmp(v, "false") || !strcmp(v, "0") || !strcmp(v, "no") || !strcmp(v, "off")) {
        *out = false;
    } else {
        char shown[300];
        ERRF("%s: %s = %s is not a boolean (true/false)", cmr_conf_origin(conf, key), key,
             cmr_conf_shown(conf, key, shown, sizeof shown));
        return -1;
    }
    return 0;
}

int cmr_conf_foreach(const cmr_conf_t *conf, const char *prefix, cmr_conf_each_fn *fn, void *opaque)
{
    size_t plen = prefix ? strlen(prefix) : 0;
    for (size_t i = 0; i < conf->count; i++) {
        const conf_entry_t *e = &conf->items[i];
        if (plen && strncmp(e->key, prefix, plen) != 0)
            continue;
        int rc = fn(e->key + plen, e->value, e->origin, opaque);
        if (rc)
            return rc;
    }
    return 0;
}

const cmr_conf_key_t *cmr_conf_key_find(const cmr_conf_key_t *keys, const char *key)
{
    for (const cmr_conf_key_t *k = keys; k && k->key; k++) {
        size_t n = strlen(k->key);
        bool prefix = n >= 2 && strcmp(k->key + n - 2, ".*") == 0;
        if (prefix ? strncmp(key, k->key, n - 1) == 0 : strcmp(key, k->key) == 0)
            return k;
    }
    return NULL;
}

/* The unknown-key check over cmr_conf_foreach: `known` says whether a key is accepted. */
typedef struct known_ctx {
    bool (*known)(const struct known_ctx *ctx, const char *key);
    const void *table; /* what `known` looks in */
    char *errbuf;
    size_t errlen;
} known_ctx_t;

static int check_one(const char *key, const char *value, const char *origin, void *opaque)
{
    (void)value;
    const known_ctx_t *ctx = opaque;
    if (ctx->known(ctx, key))
        return 0;
    char *errbuf = ctx->errbuf;
    size_t errlen = ctx->errlen;
    ERRF("%s: unknown configuration key \"%s\"", origin, key);
    return -1;
}

static bool in_key_table(const known_ctx_t *ctx, const char *key)
{
    return cmr_conf_key_find(ctx->table, key) != NULL;
}

int cmr_conf_check_known(const cmr_conf_t *conf, const cmr_conf_key_t *keys, char *errbuf, size_t errlen)
{
    known_ctx_t ctx = {in_key_table, keys, errbuf, errlen};
    return cmr_conf_foreach(conf, "", check_one, &ctx) ? -1 : 0;
}

void cmr_markdown_row(void *stream, const char *const *cells, size_t ncells)
{
    FILE *out = stream;
    fputc('|', out);
    for (size_t i = 0; i < ncells; i++) {
        fputc(' ', out);
        for (const char *p = cells[i] ? cells[i] : ""; *p; p++) {
            if (*p == '|')
                fputc('\\', out);
            fputc(*p, out);
        }
        fputs(cells[i] && *cells[i] ? " |" : "|", out);
    }
    fputc('\n', out);
}

/* --- command line ------------------------------------------------------------------ */

static const cmr_cli_option_t common_options[] = {
    {"config", 'c', NULL, "FILE", "read configuration from FILE (may repeat; later wins)"},
    {"set", 'X', NULL, "KEY=VALUE", "set a configuration key (kafka.* goes to librdkafka)"},
    {"bootstrap", 0, "kafka.bootstrap.servers", "HOST:PORT", "Kafka bootstrap servers"},
    {"log-level", 0, "log.level", "LEVEL", "debug, info, warn or error (default info)"},
    {"help", 'h', NULL, NULL, "show this help and exit"},
    {"help-keys", 0, NULL, NULL, "print the configuration keys as a Markdown table and exit"},
    {0},
};

/* Keys every program accepts besides its own table (the common options set them). */
static const cmr_conf_key_t common_keys[] = {
    {"log.level", "info", "debug, info, warn, error or off"},
    {"kafka.bootstrap.servers", NULL, "the Kafka cluster (HOST:PORT[,...])"},
    {0},
};

/* The option of `opts` that sets key, or NULL. */
static const cmr_cli_option_t *option_for_key(const cmr_cli_option_t *opts, const char *key)
{
    for (const cmr_cli_option_t *o = opts; o && o->name; o++)
        if (o->key && strcmp(o->key, key) == 0)
            return o;
    return NULL;
}

/* A program accepts its table's keys, the common keys and the keys its options set. */
static bool cli_key_known(const known_ctx_t *ctx, const char *key)
{
    const cmr_cli_t *cli = ctx->table;
    return cmr_conf_key_find(cli->keys, key) || cmr_conf_key_find(common_keys, key) ||
           option_for_key(cli->options, key);
}

/* "-s, --store DIR" for the option that sets key, in `code` Markdown; "" when none. */
static void option_cell(char *buf, size_t len, const cmr_cli_t *cli, const char *key)
{
    const cmr_cli_option_t *o = option_for_key(cli->options, key);
    if (!o)
        o = option_for_key(common_options, key);
    if (!o) {
        snprintf(buf, len, "%s", "");
        return;
    }
    char shrt[8] = "";
    if (o->short_name)
        snprintf(shrt, sizeof shrt, "-%c, ", o->short_name);
    snprintf(buf, len, "`%s--%s%s%s`", shrt, o->name, o->arg ? " " : "", o->arg ? o->arg : "");
}

static void key_row(FILE *out, const cmr_cli_t *cli, const cmr_conf_key_t *k)
{
    char key[160], opt[160], def[160];
    snprintf(key, sizeof key, "`%s`", k->key);
    option_cell(opt, sizeof opt, cli, k->key);
    snprintf(def, sizeof def, k->def ? "`%s`" : "%s", k->def ? k->def : "");
    const char *meaning = k->description;
    if (!meaning) {
        const cmr_cli_option_t *o = option_for_key(cli->options, k->key);
        assert(o); /* checked by cmr_cli_print_keys */
        meaning = o->help;
    }
    const char *cells[] = {key, opt, def, meaning};
    cmr_markdown_row(out, cells, 4);
}

int cmr_cli_print_keys(const cmr_cli_t *cli, void *stream)
{
    for (const cmr_cli_option_t *o = cli->options; o && o->name; o++) {
        if (o->key && !cmr_conf_key_find(cli->keys, o->key) && !cmr_conf_key_find(common_keys, o->key)) {
            fprintf(stderr, "%s: option --%s sets \"%s\", which is not in the program's key table\n", cli->program,
                    o->name, o->key);
            return -1;
        }
    }
    for (const cmr_conf_key_t *k = cli->keys; k && k->key; k++) {
        if (!k->description && !option_for_key(cli->options, k->key)) {
            fprintf(stderr, "%s: key \"%s\" has no description\n", cli->program, k->key);
            return -1;
        }
    }
    FILE *out = stream;
    const char *head[] = {"key", "option", "default", "meaning"}, *rule[] = {"---", "---", "---", "---"};
    cmr_markdown_row(out, head, 4);
    cmr_markdown_row(out, rule, 4);
    for (const cmr_conf_key_t *k = cli->keys; k && k->key; k++)
        key_row(out, cli, k);
    for (const cmr_conf_key_t *k = common_keys; k->key; k++)
        key_row(out, cli, k);
    return 0;
}

static void usage_options(FILE *out, const cmr_cli_option_t *opts)
{
    for (const cmr_cli_option_t *o = opts; o && o->name; o++) {
        char left[64];
        if (o->short_name)
            snprintf(left, sizeof left, "-%c, --%s%s%s", o->short_name, o->name, o->arg ? " " : "",
                     o->arg ? o->arg : "");
        else
            snprintf(left, sizeof left, "    --%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
        fprintf(out, "  %-28s %s\n", left, o->help);
    }
}

void cmr_cli_usage(const cmr_cli_t *cli, void *stream)
{
    FILE *out = stream;
    fprintf(out, "Usage: %s %s\n\n", cli->program, cli->synopsis ? cli->synopsis : "[options]");
    if (cli->summary)
        fprintf(out, "%s\n\n", cli->summary);
    fprintf(out, "Options:\n");
    usage_options(out, cli->options);
    usage_options(out, common_options);
    fprintf(out, "\nConfiguration files hold \"key = value\" lines; see docs/CONFIGURATION.md.\n");
}

/* Finds the option `arg` names: "--name", "--name=value", "-x". */
static const cmr_cli_option_t *cli_match(const cmr_cli_t *cli, const char *arg, const char **inline_value)
{
    *inline_value = NULL;
    const cmr_cli_option_t *sets[2] = {cli->options, common_options};
    for (int s = 0; s < 2; s++) {
        for (const cmr_cli_option_t *o = sets[s]; o && o->name; o++) {
            if (arg[1] == '-') {
                size_t n = strlen(o->name);
                if (strncmp(arg + 2, o->name, n) == 0 && (arg[2 + n] == '\0' || arg[2 + n] == '=')) {
                    if (arg[2 + n] == '=')
                        *inline_value = arg + 3 + n;
                    return o;
                }
            } else if (o->short_name && arg[1] == o->short_name) {
                if (arg[2])
                    *inline_value = arg + 2;
                return o;
            }
        }
    }
    return NULL;
}

static int cli_fail(const cmr_cli_t *cli, const char *fmt, const char *what)
{
    fprintf(stderr, "%s: ", cli->program);
    fprintf(stderr, fmt, what);
    fprintf(stderr, "\nTry '%s --help'.\n", cli->program);
    return CMR_CLI_ERROR;
}

/* Moves the positional arguments after the options, keeping both in order (as GNU
 * getopt does), so that "prog run --bootstrap x" works like "prog --bootstrap x run".
 * Everything after "--" is positional. Returns the index of the first positional
 * argument, or -1 after printing an error. */
static int cli_permute(const cmr_cli_t *cli, int argc, char **argv)
{
    char **opts = calloc((size_t)argc + 1, sizeof *opts), **pos = calloc((size_t)argc + 1, sizeof *pos);
    int nopts = 0, npos = 0, rc = -1;
    if (!opts || !pos) {
        cli_fail(cli, "%s", "out of memory");
        goto out;
    }
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *value;
        if (strcmp(arg, "--") == 0) {
            while (++i < argc)
                pos[npos++] = argv[i];
            break;
        }
        if (arg[0] != '-' || arg[1] == '\0') {
            pos[npos++] = argv[i];
            continue;
        }
        const cmr_cli_option_t *o = cli_match(cli, arg, &value);
        opts[nopts++] = argv[i];
        if (o && o->arg && !value && i + 1 < argc)
            opts[nopts++] = argv[++i];
    }
    memcpy(argv + 1, opts, (size_t)nopts * sizeof *argv);
    memcpy(argv + 1 + nopts, pos, (size_t)npos * sizeof *argv);
    rc = 1 + nopts;
out:
    free(opts);
    free(pos);
    return rc;
}

int cmr_cli_parse(const cmr_cli_t *cli, int argc, char **argv, cmr_conf_t *conf, int *first_arg)
{
    char err[512];
    int pass, i;
    int nopt_end = cli_permute(cli, argc, argv);
    if (nopt_end < 0)
        return CMR_CLI_ERROR;
    /* Pass 0 reads the files, pass 1 applies the options over them. */
    for (pass = 0; pass < 2; pass++) {
        for (i = 1; i < nopt_end; i++) {
            const char *arg = argv[i];
            const char *value;
            const cmr_cli_option_t *o = cli_match(cli, arg, &value);
            if (!o)
                return cli_fail(cli, "unknown option %s", arg);
            if (o->arg && !value) {
                if (i + 1 >= nopt_end)
                    return cli_fail(cli, "option %s needs an argument", arg);
                value = argv[++i];
            } else if (!o->arg && value) {
                return cli_fail(cli, "option %s takes no argument", arg);
            }
            if (strcmp(o->name, "help") == 0) {
                cmr_cli_usage(cli, stdout);
                return CMR_CLI_HELP;
            }
            if (strcmp(o->name, "help-keys") == 0)
                return cmr_cli_print_keys(cli, stdout) == 0 ? CMR_CLI_HELP : CMR_CLI_ERROR;
            if (strcmp(o->name, "config") == 0) {
                if (pass == 0 && cmr_conf_load_file(conf, value, err, sizeof err) != 0)
                    return cli_fail(cli, "%s", err);
            } else if (pass == 1 && strcmp(o->name, "set") == 0) {
                if (cmr_conf_set_assignment(conf, value, "command line (-X)", err, sizeof err) != 0)
                    return cli_fail(cli, "%s", err);
            } else if (pass == 1 && o->key) {
                char origin[80];
                snprintf(origin, sizeof origin, "command line (--%s)", o->name);
                if (cmr_conf_set(conf, o->key, o->arg ? value : "true", origin) != 0)
                    return cli_fail(cli, "%s", "out of memory");
            }
        }
    }
    *first_arg = i;

    /* Every key must be one the program knows: a typo is an error, not a silent default. */
    known_ctx_t ctx = {cli_key_known, cli, err, sizeof err};
    if (cmr_conf_foreach(conf, "", check_one, &ctx) != 0)
        return cli_fail(cli, "%s", err);

    const char *level = cmr_conf_get(conf, "log.level", "info");
    int lvl = cmr_log_level_parse(level);
    if (lvl < 0) {
        char shown[300];
        snprintf(err, sizeof err, "%s: log.level = %s is not one of debug, info, warn, error, off",
                 cmr_conf_origin(conf, "log.level"), cmr_conf_shown(conf, "log.level", shown, sizeof shown));
        return cli_fail(cli, "%s", err);
    }
    cmr_log_set_level((cmr_log_level_t)lvl);
    return CMR_CLI_OK;
}

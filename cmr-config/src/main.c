/*
 * main.c - cmr-config: the configuration worker and its operator commands.
 * Thin: options (cmr_cli_parse conventions), then one call into the library.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cmr/cfg_cli.h"
#include "cmr/cfg_diagnose.h"
#include "cmr/cfg_worker.h"
#include "cmr/kafka.h"
#include "cmr/program.h"
#include "cmr/metrics_http.h"

static const cmr_cli_option_t options[] = {
    {"group", 0, "config.group", "ID", "run: consumer group of the workers (default cmr-config)"},
    {"author", 0, "config.author", "NAME", "apply/delete: author recorded in the change (default $USER@host)"},
    {"timeout-ms", 0, "config.timeout_ms", "MS", "how long to wait for the configuration topic (default 30000)"},
    {"dir", 0, "keygen.dir", "DIR", "keygen: directory of the new key pair"},
    {"name", 0, "keygen.name", "NAME", "keygen: file names NAME.key and NAME.pub (default cmr)"},
    {"env", 0, "diag.env", "ENV", "diagnose start: the environment"},
    {"method", 0, "diag.method", "METHOD", "diagnose start: Class.method or Class.method(descriptor)"},
    {"agent", 0, "diag.agents", "IDS", "diagnose start: only these agents (hex ids, comma-separated; default all)"},
    {"depth", 0, "diag.depth", "N", "diagnose start: how deep callees are discovered (1..10, default 3)"},
    {"ttl", 0, "diag.ttl", "DUR", "diagnose start: ends after this long (default 10m, at most 7d)"},
    {"max-hits", 0, "diag.max_hits", "N", "diagnose start: ends after N recorded calls (default 0: no bound)"},
    {"budget", 0, "diag.budget", "PCT",
     "diagnose start: ends when the callees cost more than PCT% (default 0: no bound)"},
    {"until-normal", 0, "diag.until_normal", "DUR", "diagnose start: ends when back to normal this long (threshold)"},
    {"include-jdk", 0, "diag.include_jdk", NULL, "diagnose start: discover JDK callees too"},
    {"exclude", 0, "diag.exclude", "PREFIXES",
     "diagnose start: class-name prefixes never discovered (comma-separated)"},
    {"when", 0, "diag.when", "CONDS", "diagnose start: record only when KIND[:NAME]=GLOB,... (docs/DIAGNOSIS.md)"},
    {"trace", 0, "diag.trace", "TRACE", "diagnose start: the slow trace it starts from"},
    {"all", 0, "diag.all", NULL, "diagnose list: ended diagnoses too"},
    {0},
};
/* Every key cmr-config accepts (docs/CONFIGURATION.md is generated from it: --help-keys). */
static const cmr_conf_key_t keys[] = {
    {"config.group", "cmr-config", "run: consumer group of the workers on cmr.registrations"},
    {"config.catchup_timeout_ms", "60000",
     "run: how long to wait for cmr.config to be read to its end at start; the worker answers nothing before (it exits "
     "with status 1 when the time is up)"},
    {"config.timeout_ms", "30000", "apply, diff, list, show, delete: how long to wait for cmr.config"},
    {"config.author", NULL, "apply, delete: recorded in every ConfigChange (default $USER@host)"},
    {"trust.signing_key", NULL,
     "run: the CMR's Ed25519 secret key file (mode 0600) that signs every command; required (make one with "
     "'cmr-config keygen --dir DIR', docs/SECURITY.md)"},
    {"trust.command.lifetime.ms", "600000",
     "run: how long a signed command stays valid after it is issued (1000 .. 3600000; agents refuse longer)"},
    {"keygen.dir", NULL, "keygen: directory of the new key pair"},
    {"keygen.name", "cmr", "keygen: file names NAME.key and NAME.pub"},
    {"diag.env", NULL, NULL},
    {"diag.method", NULL, NULL},
    {"diag.agents", "", NULL},
    {"diag.depth", "3", NULL},
    {"diag.ttl", "10m", NULL},
    {"diag.max_hits", "0", NULL},
    {"diag.budget", "0", NULL},
    {"diag.until_normal", "0", NULL},
    {"diag.include_jdk", "false", NULL},
    {"diag.exclude", "", NULL},
    {"diag.when", "", NULL},
    {"diag.trace", "", NULL},
    {"diag.all", "false", NULL},
    {"diag.auto.ttl_ms", "600000", "run: time to live of a diagnosis a threshold event starts"},
    {"diag.auto.end_after_normal_ms", "60000",
     "run: a diagnosis a threshold event started ends when the threshold has been back to normal this long; 0: not"},
    {"diag.auto.depth", "3", "run: discovery depth of a diagnosis a threshold event starts"},
    {"config.transactional_id", "cmr-config-apply",
     "apply, delete: Kafka transactional.id under which apply publishes all its changes in one transaction (all or "
     "nothing); empty: without a transaction, each change with its own delivery report"},
    CMR_CONF_KEY_METRICS_LISTEN,
    CMR_CONF_KEY_METRICS_PORT,
    CMR_CONF_KEY_METRICS_TOKEN_FILE,
    CMR_CONF_KEY_TOPIC_PREFIX,
    CMR_CONF_KEY_KAFKA,
    {0},
};

static const cmr_cli_t cli = {
    .program = "cmr-config",
    .synopsis = "[options] apply FILE | diff FILE | list | show ID|mappings | delete ID | run | keygen --dir DIR | "
                "diagnose start|stop ID|exclude ID METHOD...|include ID METHOD...|list|show ID",
    .summary = "Environments (sensor assignments, strategy) and agent mappings of the CMR.\n"
               "  apply FILE   publish the environments and mappings of FILE (YAML, docs/ENVIRONMENTS.md)\n"
               "  diff FILE    show what apply would change, change nothing\n"
               "  list         environments and the mapping table\n"
               "  show ID      one environment (or 'mappings') in the file format\n"
               "  delete ID    delete an environment no mapping names\n"
               "  run          the worker: answers registrations, pushes environment updates; signs every\n"
               "               command with the key of -X trust.signing_key=PATH (required)\n"
               "  keygen --dir DIR [--name NAME]\n"
               "               write a new command signing key pair: DIR/NAME.key (secret, mode 0600,\n"
               "               for the workers' trust.signing_key) and DIR/NAME.pub (for the agents'\n"
               "               trust.keys); NAME defaults to cmr; never overwrites\n"
               "  diagnose start --env ENV --method Class.method [--ttl 10m] [--depth 3] [--when ...]\n"
               "               look into a method's callees for a while (docs/DIAGNOSIS.md); prints its id\n"
               "  diagnose stop ID | list [--all] | show ID\n"
               "               end one; the active (or all) diagnoses; one with its history and, per\n"
               "               agent, the callees the instrumenter discovered\n"
               "  diagnose exclude ID METHOD... | include ID METHOD...\n"
               "               stop probing these discovered methods of an active diagnosis, or probe\n"
               "               them again (Class.method: every overload; Class.method(desc): one)",
    .options = options,
    .keys = keys,
};

static volatile sig_atomic_t stop_flag;

static int dispatch(const cmr_conf_t *conf, const char *cmd, int nargs, char **args)
{
    if (!strcmp(cmd, "apply") && nargs == 1)
        return cmr_cfg_cli_apply(conf, args[0], 0, stdout);
    if (!strcmp(cmd, "diagnose"))
        return cmr_cfg_cli_diagnose(conf, nargs, args, stdout);
    if (!strcmp(cmd, "diff") && nargs == 1)
        return cmr_cfg_cli_apply(conf, args[0], 1, stdout);
    if (!strcmp(cmd, "list") && nargs == 0)
        return cmr_cfg_cli_list(conf, stdout);
    if (!strcmp(cmd, "show") && nargs == 1)
        return cmr_cfg_cli_show(conf, args[0], stdout);
    if (!strcmp(cmd, "delete") && nargs == 1)
        return cmr_cfg_cli_delete(conf, args[0], stdout);
    if (!strcmp(cmd, "keygen") && nargs == 0)
        return cmr_cfg_cli_keygen(conf, stdout);
    if (!strcmp(cmd, "run") && nargs == 0) {
        cmr_program_stop_on_signals(&stop_flag);
        return cmr_cfg_worker_run(conf, &stop_flag);
    }
    fprintf(stderr, "cmr-config: bad command or arguments: %s\nTry 'cmr-config --help'.\n", cmd);
    return 2;
}

int main(int argc, char **argv)
{
    cmr_conf_t *conf;
    int first, rc = cmr_program_start(&cli, argc, argv, &conf, &first);
    if (rc != CMR_PROGRAM_RUN)
        return rc;
    if (first >= argc) {
        cmr_cli_usage(&cli, stderr);
        rc = 2;
    } else {
        rc = dispatch(conf, argv[first], argc - first - 1, argv + first + 1);
    }
    cmr_conf_destroy(conf);
    return cmr_kafka_process_end(rc);
}

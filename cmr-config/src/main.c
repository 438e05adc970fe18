/*
 * main.c - cmr-config: the configuration worker and its operator commands.
 * Thin: options (cmr_cli_parse conventions), then one call into the library.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cmr/cfg_cli.h"
#include "cmr/cfg_worker.h"
#include "cmr/program.h"
#include "cmr/metrics_http.h"

static const cmr_cli_option_t options[] = {
    {"group", 0, "config.group", "ID", "run: consumer group of the workers (default cmr-config)"},
    {"author", 0, "config.author", "NAME", "apply/delete: author recorded in the change (default $USER@host)"},
    {"timeout-ms", 0, "config.timeout_ms", "MS", "how long to wait for the configuration topic (default 30000)"},
    {"dir", 0, "keygen.dir", "DIR", "keygen: directory of the new key pair"},
    {"name", 0, "keygen.name", "NAME", "keygen: file names NAME.key and NAME.pub (default cmr)"},
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
    {"config.transactional_id", "cmr-config-apply",
     "apply, delete: Kafka transactional.id under which apply publishes all its changes in one transaction (all or "
     "nothing); empty: without a transaction, each change with its own delivery report"},
    CMR_CONF_KEY_METRICS_LISTEN,
    CMR_CONF_KEY_METRICS_PORT,
    CMR_CONF_KEY_TOPIC_PREFIX,
    CMR_CONF_KEY_KAFKA,
    {0},
};

static const cmr_cli_t cli = {
    .program = "cmr-config",
    .synopsis = "[options] apply FILE | diff FILE | list | show ID|mappings | delete ID | run | keygen --dir DIR",
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
               "               trust.keys); NAME defaults to cmr; never overwrites",
    .options = options,
    .keys = keys,
};

static volatile sig_atomic_t stop_flag;

static int dispatch(const cmr_conf_t *conf, const char *cmd, int nargs, char **args)
{
    if (!strcmp(cmd, "apply") && nargs == 1)
        return cmr_cfg_cli_apply(conf, args[0], 0, stdout);
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
    return rc;
}

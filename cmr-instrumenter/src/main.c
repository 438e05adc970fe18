/*
 * main.c - cmr-instrumenter: the instrumenter worker (thin main: options, then the loop).
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cmr/conf.h"
#include "cmr/instr_worker.h"
#include "cmr/log.h"
#include "cmr/topics.h"
#include "cmr/wire.h"

static const cmr_cli_option_t options[] = {
    {"db", 'd', "instrumenter.db", "DIR", "class cache directory (RocksDB; default /var/lib/cmr/instrumenter)"},
    {"group", 0, "instrumenter.group", "ID", "consumer group of the instrumenters (default cmr-instrumenter)"},
    {"cache-budget", 0, "instrumenter.cache_budget_bytes", "BYTES",
     "bytes of uninstrumented class files kept (default 268435456)"},
    {0},
};
static const char *const known_keys[] = {"topic.prefix", "instrumenter.sync", "instrumenter.catchup_timeout_ms", NULL};
static const char *const known_prefixes[] = {"kafka.", NULL};

static const cmr_cli_t cli = {
    .program = "cmr-instrumenter",
    .synopsis = "[options] [run]",
    .summary = "Consumes the classes agents send (cmr.classes), caches them, matches the sensor\n"
               "assignments of the agent's environment, instruments with the class-file engine and\n"
               "sends Redefine / BytecodeResend commands; reruns changed environments against its cache.",
    .options = options,
    .known_keys = known_keys,
    .known_prefixes = known_prefixes,
};

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

int main(int argc, char **argv)
{
    cmr_log_set_program("cmr-instrumenter");
    cmr_conf_t *conf = cmr_conf_new();
    int first;
    int rc = cmr_cli_parse(&cli, argc, argv, conf, &first);
    if (rc != CMR_CLI_OK) {
        cmr_conf_destroy(conf);
        return rc == CMR_CLI_HELP ? 0 : 2;
    }
    if (cmr_wire_init() != 0 || cmr_topics_set_prefix(cmr_conf_get(conf, "topic.prefix", "cmr")) != 0) {
        fprintf(stderr, "cmr-instrumenter: bad topic.prefix or broken schemas\n");
        cmr_conf_destroy(conf);
        return 2;
    }
    if (first < argc && (strcmp(argv[first], "run") != 0 || first + 1 < argc)) {
        fprintf(stderr, "cmr-instrumenter: unexpected argument %s\nTry 'cmr-instrumenter --help'.\n", argv[first]);
        cmr_conf_destroy(conf);
        return 2;
    }
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    rc = cmr_instr_worker_run(conf, &stop_flag);
    cmr_conf_destroy(conf);
    return rc;
}

/*
 * main.c - cmr-instrumenter: the instrumenter worker (thin main: options, then the loop).
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cmr/instr_worker.h"
#include "cmr/program.h"

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

int main(int argc, char **argv)
{
    cmr_conf_t *conf;
    int first, rc = cmr_program_start(&cli, argc, argv, &conf, &first);
    if (rc != CMR_PROGRAM_RUN)
        return rc;
    if (first < argc && (strcmp(argv[first], "run") != 0 || first + 1 < argc)) {
        fprintf(stderr, "cmr-instrumenter: unexpected argument %s\nTry 'cmr-instrumenter --help'.\n", argv[first]);
        cmr_conf_destroy(conf);
        return 2;
    }
    cmr_program_stop_on_signals(&stop_flag);
    rc = cmr_instr_worker_run(conf, &stop_flag);
    cmr_conf_destroy(conf);
    return rc;
}

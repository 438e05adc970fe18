/*
 * main.c - cmr-instrumenter: the instrumenter worker (thin main: options, then the loop).
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cmr/instr_worker.h"
#include "cmr/kafka.h"
#include "cmr/program.h"
#include "cmr/metrics_http.h"

static const cmr_cli_option_t options[] = {
    {"db", 'd', "instrumenter.db", "DIR", "class cache directory (RocksDB; default /var/lib/cmr/instrumenter)"},
    {"group", 0, "instrumenter.group", "ID", "consumer group of the instrumenters (default cmr-instrumenter)"},
    {"cache-budget", 0, "instrumenter.cache_budget_bytes", "BYTES",
     "bytes of uninstrumented class files kept (default 268435456)"},
    {0},
};
/* Every key cmr-instrumenter accepts (docs/CONFIGURATION.md is generated from it: --help-keys). */
static const cmr_conf_key_t keys[] = {
    {"instrumenter.db", "/var/lib/cmr/instrumenter", "the class cache (RocksDB, one per worker process)"},
    {"instrumenter.group", "cmr-instrumenter", "consumer group on cmr.classes"},
    {"instrumenter.cache_budget_bytes", "268435456",
     "bytes of class files kept for classes that need no instrumentation (256 MiB); beyond it the oldest are evicted "
     "(their metadata stays; they get a BytecodeResend when a change needs them); 0 keeps none"},
    {"instrumenter.sync", "false",
     "fsync every cache commit; the WAL is always on: false survives a process crash, true also a machine crash"},
    {"instrumenter.catchup_timeout_ms", "60000", "how long to wait for cmr.config at start"},
    {"instrumenter.threads", NULL,
     "threads that instrument, digest and sign the new classes of a unit side by side, the worker's own included "
     "(1 .. 65; default: the CPUs online, at most 8; 1 does it all on the worker's thread)"},
    {"instrumenter.budget.pct", "3",
     "overhead budget of the environments that set none (overhead_budget_pct, docs/ENVIRONMENTS.md): when a JVM's "
     "monitoring costs more than this % of its CPU time, the methods whose probes cost more than they measure lose "
     "them (docs/ARCHITECTURE.md, 'The overhead budget'); 0 = off for those environments"},
    {"instrumenter.budget.probe_ns", "50",
     "overhead budget: the cost of one call's probes (entry + exit), in ns, for agents that do not measure it "
     "(MetricBatch.probe_ps)"},
    {"instrumenter.budget.intervals", "3", "overhead budget: metric intervals of a JVM judged together"},
    {"trust.signing_key", NULL,
     "the CMR's Ed25519 secret key file (mode 0600) that signs every command; required (make one with "
     "'cmr-config keygen --dir DIR', docs/SECURITY.md)"},
    {"trust.command.lifetime.ms", "600000",
     "how long a signed command stays valid after it is issued (1000 .. 3600000; agents refuse longer)"},
    {"trust.grant.lifetime.ms", "604800000",
     "how long a class grant stays valid (7 days; at most 30): sent with every Redefine of an environment's "
     "instrumentation, it lets a restarted JVM of the environment take those bytes from its agent's cache at load "
     "time (docs/SECURITY.md, 'Class grants'); 0 sends none"},
    {"instrumenter.ahead.max_bytes", "67108864",
     "most bytes (instrumented classes and their grants, all environments) kept to send ahead to new JVMs: a JVM of "
     "an environment gets the classes granted for it as soon as this worker first hears from it, and instruments them "
     "as they load, without redefinition (docs/AGENT.md, 'Classes granted ahead'; needs trust.grant.lifetime.ms); 0: "
     "none"},
    {"instrumenter.ahead.max_bytes_per_jvm", "16777216",
     "most bytes sent ahead to one new JVM (16 MiB): the classes most JVMs of the environment loaded go first"},
    CMR_CONF_KEY_METRICS_LISTEN,
    CMR_CONF_KEY_METRICS_PORT,
    CMR_CONF_KEY_METRICS_TOKEN_FILE,
    CMR_CONF_KEY_TOPIC_PREFIX,
    CMR_CONF_KEY_KAFKA,
    {0},
};

static const cmr_cli_t cli = {
    .program = "cmr-instrumenter",
    .synopsis = "[options] [run]",
    .summary = "Consumes the classes agents send (cmr.classes), caches them, matches the sensor\n"
               "assignments of the agent's environment, instruments with the class-file engine and\n"
               "sends Redefine / BytecodeResend commands; reruns changed environments against its cache.\n"
               "Every command is signed with the key of -X trust.signing_key=PATH (required; make one\n"
               "with 'cmr-config keygen --dir DIR'). A class whose bytes do not hash to its class_hash\n"
               "is refused (instr.hash_mismatch).",
    .options = options,
    .keys = keys,
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
    return cmr_kafka_process_end(rc);
}

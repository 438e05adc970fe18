/*
 * main.c - cmr-broker: run the embedded Kafka broker until SIGINT or SIGTERM.
 *
 * Prints "bootstrap=127.0.0.1:PORT" on stdout once the topics exist, so scripts and
 * tests can start it and read where to connect. SIGUSR1 takes the brokers down (clients
 * see an outage, the data stays), SIGUSR2 brings them back: for outage tests.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/broker.h"
#include "cmr/conf.h"
#include "cmr/log.h"
#include "cmr/topics.h"

static const cmr_cli_option_t broker_options[] = {
    {"port", 'p', "broker.port", "PORT", "bootstrap port on 127.0.0.1 (default 0: a free port)"},
    {"brokers", 0, "broker.count", "N", "number of brokers in the cluster (default 1)"},
    {"partitions", 0, "broker.partitions", "N", "partitions of every topic (default: per topic)"},
    {"bootstrap-file", 0, "broker.bootstrap_file", "FILE", "also write the bootstrap address to FILE"},
    {"topic-prefix", 0, "topic.prefix", "PREFIX", "prefix of every topic name (default cmr)"},
    {0},
};

/* Every key cmr-broker accepts (docs/CONFIGURATION.md is generated from it: --help-keys).
 * A NULL description: the option's help says it. No kafka.*: the broker is no client. */
static const cmr_conf_key_t broker_keys[] = {
    {"broker.port", "0", NULL},
    {"broker.count", "1", NULL},
    {"broker.partitions", "0", "partitions of every topic; 0 = each topic's own count"},
    {"broker.bootstrap_file", NULL, NULL},
    CMR_CONF_KEY_TOPIC_PREFIX,
    {0},
};

static const cmr_cli_t broker_cli = {
    .program = "cmr-broker",
    .synopsis = "[options]",
    .summary = "Serves the Kafka protocol on loopback for the demo and the tests, with the CMR's\n"
               "topics created. In memory and not durable (librdkafka's mock cluster, which keeps\n"
               "only a few MiB per partition): production runs on Apache Kafka, see deploy/.",
    .options = broker_options,
    .keys = broker_keys,
};

int main(int argc, char **argv)
{
    cmr_log_set_program("cmr-broker");
    cmr_conf_t *conf = cmr_conf_new();
    int first;
    int rc = cmr_cli_parse(&broker_cli, argc, argv, conf, &first);
    if (rc != CMR_CLI_OK) {
        cmr_conf_destroy(conf);
        return rc == CMR_CLI_HELP ? 0 : 2;
    }
    if (first < argc) {
        fprintf(stderr, "cmr-broker: unexpected argument %s\nTry 'cmr-broker --help'.\n", argv[first]);
        cmr_conf_destroy(conf);
        return 2;
    }
    char err[512];
    int64_t port, brokers, partitions;
    if (cmr_conf_get_int(conf, "broker.port", 0, 0, 65535, &port, err, sizeof err) ||
        cmr_conf_get_int(conf, "broker.count", 1, 1, 9, &brokers, err, sizeof err) ||
        cmr_conf_get_int(conf, "broker.partitions", 0, 0, 1000, &partitions, err, sizeof err) ||
        cmr_topics_set_prefix(cmr_conf_get(conf, "topic.prefix", "cmr")) != 0) {
        if (!err[0] || strstr(err, "topic.prefix"))
            snprintf(err, sizeof err, "topic.prefix must be letters, digits, '.', '-', '_'");
        fprintf(stderr, "cmr-broker: %s\n", err);
        cmr_conf_destroy(conf);
        return 2;
    }

    /* Block the stop signals before any thread starts, then wait for one. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGUSR1);
    sigaddset(&stop, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);

    cmr_broker_options_t opts = {(int)brokers, (int)port, (int)partitions};
    err[0] = '\0';
    cmr_broker_t *b = cmr_broker_start(&opts, err, sizeof err);
    if (!b) {
        fprintf(stderr, "cmr-broker: %s\n", err);
        cmr_conf_destroy(conf);
        return 1;
    }
    const char *file = cmr_conf_get(conf, "broker.bootstrap_file", NULL);
    if (file) {
        FILE *f = fopen(file, "w");
        if (!f || fprintf(f, "%s\n", cmr_broker_bootstrap(b)) < 0 || fclose(f) != 0) {
            fprintf(stderr, "cmr-broker: cannot write %s\n", file);
            cmr_broker_stop(b);
            cmr_conf_destroy(conf);
            return 1;
        }
    }
    printf("bootstrap=%s\n", cmr_broker_bootstrap(b));
    fflush(stdout);

    int sig = 0;
    for (;;) {
        sigwait(&stop, &sig);
        if (sig == SIGUSR1 || sig == SIGUSR2)
            cmr_broker_set_available(b, sig == SIGUSR2);
        else
            break;
    }
    cmr_log(CMR_LOG_INFO, "broker.stopping", "signal=%s", sig == SIGINT ? "SIGINT" : "SIGTERM");
    cmr_broker_stop(b);
    cmr_conf_destroy(conf);
    cmr_log(CMR_LOG_INFO, "broker.stopped", NULL);
    return 0;
}

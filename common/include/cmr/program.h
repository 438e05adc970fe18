/*
 * program.h - how every CMR program's main begins: its name in the logs, its options
 * (configuration files, -X key=value, command-line options; see conf.h), the wire schemas
 * and the topic prefix; and the signals that ask a worker loop to stop.
 *
 *   cmr_conf_t *conf;
 *   int first, rc = cmr_program_start(&cli, argc, argv, &conf, &first);
 *   if (rc != CMR_PROGRAM_RUN)
 *       return rc;                       // --help (0) or a bad start (2), already reported
 *   ... argv[first] is the first operand ...
 *   cmr_conf_destroy(conf);
 */
#ifndef CMR_PROGRAM_H
#define CMR_PROGRAM_H

#include <signal.h>

#include "cmr/conf.h"

#define CMR_PROGRAM_RUN (-1)

/* Sets the log's program name, parses the options into a new configuration, loads the wire
 * schemas and sets the topic prefix (topic.prefix, default "cmr"). Returns CMR_PROGRAM_RUN
 * with *conf owned by the caller (cmr_conf_destroy), or the exit status to return (0 after
 * --help, 2 on bad options, schemas or prefix, reported on stderr) with *conf NULL. */
int cmr_program_start(const cmr_cli_t *cli, int argc, char **argv, cmr_conf_t **conf, int *first);

/* SIGINT and SIGTERM set *flag to 1 (the worker loops poll it). One flag per process. */
void cmr_program_stop_on_signals(volatile sig_atomic_t *flag);

#endif

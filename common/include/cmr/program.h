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

/* Keeps up to `bytes` of freed heap memory in the process instead of giving it back to
 * the system at once, and serves allocations of up to 32 MiB from the heap (glibc's
 * M_TRIM_THRESHOLD and M_MMAP_THRESHOLD): a worker that allocates and frees large blocks
 * at a high rate (RocksDB memtable arenas, write batches, trace states) otherwise has the
 * kernel fault in and zero fresh pages for them again and again. The price is a resident
 * size that stays near its peak. 0 leaves the C library's defaults. Call it before the
 * worker's threads start. Returns 0, or -1 when the C library refused (logged). */
int cmr_program_keep_freed_memory(int64_t bytes);

#endif

/*
 * broker_proc.h - integration tests start the embedded broker as a separate process,
 * exactly as operators do, and talk to it only through its bootstrap address.
 */
#ifndef CMR_TEST_BROKER_PROC_H
#define CMR_TEST_BROKER_PROC_H

#include <sys/types.h>

#include "cmr/conf.h"

typedef struct broker_proc {
    pid_t pid;
    char bootstrap[256];
} broker_proc_t;

/* Starts `binary` (path of cmr-broker) with extra arguments (NULL-ended, may be NULL)
 * and waits up to 20 s for its bootstrap line. 0 or -1. */
int broker_proc_start(broker_proc_t *b, const char *binary, const char *const *extra_args);
/* broker_proc_start() without extra arguments, log level set to warnings, and a new
 * configuration with kafka.bootstrap.servers pointing at the broker (the caller destroys
 * it). NULL when the broker did not start. */
cmr_conf_t *broker_proc_start_conf(broker_proc_t *b, const char *binary);
/* SIGTERM, then wait (SIGKILL after 10 s). */
void broker_proc_stop(broker_proc_t *b);

#endif

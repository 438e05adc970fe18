/*
 * program.c - the common start of the CMR programs' mains (see program.h).
 */
#include "cmr/program.h"

#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cmr/log.h"
#include "cmr/topics.h"
#include "cmr/wire.h"

int cmr_program_start(const cmr_cli_t *cli, int argc, char **argv, cmr_conf_t **conf, int *first)
{
    cmr_log_set_program(cli->program);
    *conf = cmr_conf_new();
    if (!*conf) {
        fprintf(stderr, "%s: out of memory\n", cli->program);
        return 2;
    }
    int rc = cmr_cli_parse(cli, argc, argv, *conf, first);
    if (rc != CMR_CLI_OK) {
        cmr_conf_destroy(*conf);
        *conf = NULL;
        return rc == CMR_CLI_HELP ? 0 : 2;
    }
    if (cmr_wire_init() != 0) {
        fprintf(stderr, "%s: the embedded wire schemas do not load (a broken build)\n", cli->program);
    } else if (cmr_topics_set_prefix(cmr_conf_get(*conf, "topic.prefix", "cmr")) != 0) {
        fprintf(stderr, "%s: bad topic.prefix \"%s\"\n", cli->program, cmr_conf_get(*conf, "topic.prefix", ""));
    } else {
        return CMR_PROGRAM_RUN;
    }
    cmr_conf_destroy(*conf);
    *conf = NULL;
    return 2;
}

int cmr_program_keep_freed_memory(int64_t bytes)
{
    if (bytes <= 0)
        return 0;
    int keep = bytes > INT32_MAX ? INT32_MAX : (int)bytes;
    if (!mallopt(M_MMAP_THRESHOLD, 32 << 20) || !mallopt(M_TRIM_THRESHOLD, keep)) {
        cmr_log(CMR_LOG_WARN, "program.malloc_refused", "keep_bytes=%d", keep);
        return -1;
    }
    return 0;
}

static volatile sig_atomic_t *stop_flag;

static void on_stop_signal(int sig)
{
    (void)sig;
    if (stop_flag)
        *stop_flag = 1;
}

void cmr_program_stop_on_signals(volatile sig_atomic_t *flag)
{
    stop_flag = flag;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

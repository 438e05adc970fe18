/*
 * broker_proc.c - start and stop cmr-broker as a child process (see broker_proc.h).
 */
#include "broker_proc.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cmr/clock.h"
#include "cmr/log.h"

extern char **environ;

int broker_proc_start(broker_proc_t *b, const char *binary, const char *const *extra_args)
{
    int out[2];
    memset(b, 0, sizeof *b);
    if (pipe(out) != 0)
        return -1;
    const char *argv[16] = {binary};
    int n = 1;
    for (int i = 0; extra_args && extra_args[i] && n < 15; i++)
        argv[n++] = extra_args[i];
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    int rc = posix_spawn(&b->pid, binary, &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(out[1]);
    if (rc != 0) {
        fprintf(stderr, "cannot start %s: %s\n", binary, strerror(rc));
        close(out[0]);
        return -1;
    }
    char line[256];
    size_t len = 0;
    struct pollfd pfd = {out[0], POLLIN, 0};
    int64_t deadline = cmr_mono_ms() + 20000;
    while (cmr_mono_ms() < deadline && len < sizeof line - 1) {
        if (poll(&pfd, 1, 500) <= 0)
            continue;
        ssize_t r = read(out[0], line + len, 1);
        if (r <= 0)
            break;
        if (line[len] == '\n') {
            line[len] = '\0';
            if (strncmp(line, "bootstrap=", 10) == 0) {
                snprintf(b->bootstrap, sizeof b->bootstrap, "%s", line + 10);
                close(out[0]);
                return 0;
            }
            len = 0;
            continue;
        }
        len++;
    }
    close(out[0]);
    fprintf(stderr, "%s did not print its bootstrap address\n", binary);
    broker_proc_stop(b);
    return -1;
}

cmr_conf_t *broker_proc_start_conf(broker_proc_t *b, const char *binary)
{
    cmr_log_set_level(CMR_LOG_WARN);
    if (broker_proc_start(b, binary, NULL) != 0)
        return NULL;
    cmr_conf_t *conf = cmr_conf_new();
    if (conf)
        cmr_conf_set(conf, "kafka.bootstrap.servers", b->bootstrap, "test");
    return conf;
}

void broker_proc_stop(broker_proc_t *b)
{
    if (b->pid <= 0)
        return;
    kill(b->pid, SIGTERM);
    for (int i = 0; i < 100; i++) {
        if (waitpid(b->pid, NULL, WNOHANG) == b->pid) {
            b->pid = 0;
            return;
        }
        cmr_sleep_ms(100);
    }
    kill(b->pid, SIGKILL);
    waitpid(b->pid, NULL, 0);
    b->pid = 0;
}

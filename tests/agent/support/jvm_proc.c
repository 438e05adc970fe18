/*
 * jvm_proc.c - a JVM child process driven over pipes (see jvm_proc.h).
 */
#include "jvm_proc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cmr/clock.h"

extern char **environ;

int jvm_proc_start(jvm_proc_t *j, const char *const *argv)
{
    memset(j, 0, sizeof *j);
    int in[2], out[2];
    snprintf(j->stderr_path, sizeof j->stderr_path, "/tmp/cmr-jvm-stderr-XXXXXX");
    int err_fd = mkstemp(j->stderr_path);
    if (err_fd < 0 || pipe(in) != 0 || pipe(out) != 0)
        return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_adddup2(&fa, err_fd, 2);
    posix_spawn_file_actions_addclose(&fa, in[1]);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    int rc = posix_spawn(&j->pid, argv[0], &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    close(out[1]);
    close(err_fd);
    if (rc != 0) {
        fprintf(stderr, "cannot start %s: %s\n", argv[0], strerror(rc));
        close(in[1]);
        close(out[0]);
        return -1;
    }
    j->in_fd = in[1];
    j->out_fd = out[0];
    return 0;
}

int jvm_proc_send(jvm_proc_t *j, const char *line)
{
    size_t n = strlen(line);
    if (write(j->in_fd, line, n) != (ssize_t)n || write(j->in_fd, "\n", 1) != 1)
        return -1;
    return 0;
}

int jvm_proc_expect(jvm_proc_t *j, const char *prefix, char *out, size_t outlen, int timeout_ms)
{
    int64_t deadline = cmr_mono_ms() + timeout_ms;
    for (;;) {
        char *nl;
        while ((nl = memchr(j->buf, '\n', j->len))) {
            *nl = '\0';
            size_t used = (size_t)(nl - j->buf) + 1;
            int hit = strncmp(j->buf, prefix, strlen(prefix)) == 0;
            if (hit && out)
                snprintf(out, outlen, "%s", j->buf);
            memmove(j->buf, j->buf + used, j->len - used);
            j->len -= used;
            if (hit)
                return 0;
        }
        int64_t left = deadline - cmr_mono_ms();
        if (left <= 0 || j->len == sizeof j->buf)
            return -1;
        struct pollfd p = {j->out_fd, POLLIN, 0};
        if (poll(&p, 1, (int)left) <= 0)
            continue;
        ssize_t r = read(j->out_fd, j->buf + j->len, sizeof j->buf - j->len);
        if (r <= 0)
            return -1;
        j->len += (size_t)r;
    }
}

int jvm_proc_wait(jvm_proc_t *j, int timeout_ms)
{
    int64_t deadline = cmr_mono_ms() + timeout_ms;
    int status;
    while (cmr_mono_ms() < deadline) {
        pid_t r = waitpid(j->pid, &status, WNOHANG);
        if (r == j->pid) {
            j->pid = 0;
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
        cmr_sleep_ms(20);
    }
    kill(j->pid, SIGKILL);
    waitpid(j->pid, NULL, 0);
    j->pid = 0;
    return -1;
}

void jvm_proc_print_stderr_tail(jvm_proc_t *j)
{
    FILE *f = fopen(j->stderr_path, "r");
    char last[40][512];
    size_t n = 0;
    while (f && fgets(last[n % 40], sizeof last[0], f)) /* (a longer line: its rest is a line of its own) */
        n++;
    if (f)
        fclose(f);
    fprintf(stderr, "# the JVM's stderr, last %zu lines:\n", n < 40 ? n : 40);
    for (size_t i = n > 40 ? n - 40 : 0; i < n; i++)
        fprintf(stderr, "#   %s", last[i % 40]);
    fprintf(stderr, "# its stdout not yet read: %.*s\n", (int)(j->len < 2000 ? j->len : 2000), j->buf);
}

bool jvm_proc_stderr_has(jvm_proc_t *j, const char *text)
{
    FILE *f = fopen(j->stderr_path, "r");
    if (!f)
        return false;
    char line[8192];
    bool hit = false;
    while (!hit && fgets(line, sizeof line, f))
        hit = strstr(line, text) != NULL;
    fclose(f);
    return hit;
}

void jvm_proc_cleanup(jvm_proc_t *j)
{
    if (j->pid > 0) {
        kill(j->pid, SIGKILL);
        waitpid(j->pid, NULL, 0);
        j->pid = 0;
    }
    if (j->in_fd > 0)
        close(j->in_fd);
    if (j->out_fd > 0)
        close(j->out_fd);
    j->in_fd = j->out_fd = 0;
    if (j->stderr_path[0] && !getenv("CMR_KEEP_JVM_LOGS"))
        unlink(j->stderr_path);
}

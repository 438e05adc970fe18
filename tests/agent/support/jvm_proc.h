/*
 * jvm_proc.h - start a JVM as a child process and talk to it line by line (tests).
 */
#ifndef CMR_TEST_JVM_PROC_H
#define CMR_TEST_JVM_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct jvm_proc {
    pid_t pid;
    int in_fd, out_fd;
    char buf[65536];
    size_t len;
    char stderr_path[256];
} jvm_proc_t;

/* Starts argv[0] (a java binary) with argv; stderr goes to a temporary file. 0 or -1. */
int jvm_proc_start(jvm_proc_t *j, const char *const *argv);
/* Sends one line (a newline is added). */
int jvm_proc_send(jvm_proc_t *j, const char *line);
/* Reads lines until one starts with prefix; copies it into out. 0, or -1 on timeout/EOF. */
int jvm_proc_expect(jvm_proc_t *j, const char *prefix, char *out, size_t outlen, int timeout_ms);
/* Waits for the exit; returns the exit status, or -1 after killing it at the timeout. */
int jvm_proc_wait(jvm_proc_t *j, int timeout_ms);
/* The last 40 lines of the JVM's stderr and what is left of its stdout, to the test's
 * stderr as "# " lines: why a JVM did not print what was expected. */
void jvm_proc_print_stderr_tail(jvm_proc_t *j);
/* Whether the JVM's stderr so far contains `text`. */
bool jvm_proc_stderr_has(jvm_proc_t *j, const char *text);
/* Kills (if still running), reaps, removes the stderr file. */
void jvm_proc_cleanup(jvm_proc_t *j);

#endif

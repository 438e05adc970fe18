/*
 * proc_cpu.h - the CPU time another process has used so far, for benchmarks that report
 * the cost of the processes they start (a worker, the broker, a JVM) next to their own.
 */
#ifndef CMR_TEST_PROC_CPU_H
#define CMR_TEST_PROC_CPU_H

#include <sys/types.h>

/* CPU seconds (user + system, every thread) a running process has used so far, from
 * /proc/PID/stat; 0 when unknown. */
double proc_cpu_s(pid_t pid);
/* The same for the process's threads named `comm` (their /proc/PID/task/TID/comm, as
 * pthread_setname_np set it), summed; 0 when there is none. */
double proc_thread_cpu_s(pid_t pid, const char *comm);

#endif

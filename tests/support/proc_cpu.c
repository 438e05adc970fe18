/*
 * proc_cpu.c - see proc_cpu.h.
 */
#include "proc_cpu.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* user + system seconds from a /proc stat file (a process's or a thread's) */
static double stat_cpu_s(const char *path)
{
    char buf[1024];
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* after the command name (it may hold spaces): state is field 3 */
    unsigned long long ut = 0, st = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return 0;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

double proc_cpu_s(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    return stat_cpu_s(path);
}

double proc_thread_cpu_s(pid_t pid, const char *comm)
{
    char dir[64];
    snprintf(dir, sizeof dir, "/proc/%d/task", (int)pid);
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    double sum = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        char path[384], name[64] = "";
        snprintf(path, sizeof path, "/proc/%d/task/%s/comm", (int)pid, e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t n = fread(name, 1, sizeof name - 1, f);
        fclose(f);
        name[n] = '\0';
        name[strcspn(name, "\n")] = '\0';
        if (strcmp(name, comm) != 0)
            continue;
        snprintf(path, sizeof path, "/proc/%d/task/%s/stat", (int)pid, e->d_name);
        sum += stat_cpu_s(path);
    }
    closedir(d);
    return sum;
}

/*
 * instr_exclude.c - the exclusion list (see instr_exclude.h). Entries ending in '/' or
 * '*' are prefixes, the others exact names.
 */
#include "cmr/instr_exclude.h"

#include <string.h>

static const char *const excluded[] = {
    "cmr/agent/",       /* the agent's own classes, Probe included */
    "java/lang/Object", /* every constructor chain ends here */
    "java/lang/Thread", /* on the probe path; and its constructors run while a native
                                    thread attaches, before it has a Thread object (a probe
                                    that meets a contended monitor there crashes HotSpot) */
    "java/lang/Thread$*",
    "java/lang/ThreadGroup",  /* also run by Thread's constructor while a thread attaches */
    "java/lang/ThreadLocal*", /* per-thread ring lookup */
    "java/lang/Class",
    "java/lang/ClassLoader",
    "java/lang/System",
    "java/lang/Runtime",
    "java/lang/String*", /* String, StringBuilder, StringLatin1, StringUTF16 ... */
    "java/lang/AbstractStringBuilder",
    "java/lang/Math",
    "java/lang/StrictMath",
    "java/lang/Integer*", /* boxing on the probe path */
    "java/lang/Long*",
    "java/lang/Throwable", /* exceptional exits */
    "java/lang/invoke/",   /* method handles, lambdas, string concatenation */
    "java/lang/ref/",      /* reference processing */
    "java/lang/reflect/",
    "java/util/concurrent/atomic/",
    "java/util/concurrent/ThreadLocalRandom", /* trace ids of new segments */
    "java/util/IdentityHashMap*",             /* the probes' hand-off table */
    "java/util/ArrayDeque*",
    "java/util/concurrent/locks/",
    "java/nio/",     /* direct buffers of the rings */
    "jdk/internal/", /* Unsafe, misc, VM internals */
    "sun/",
    "com/sun/",
    NULL,
};

static bool entry_matches(const char *e, const char *name)
{
    size_t n = strlen(e);
    if (e[n - 1] == '/')
        return strncmp(name, e, n) == 0;
    if (e[n - 1] == '*')
        return strncmp(name, e, n - 1) == 0;
    return strcmp(name, e) == 0;
}

bool cmr_instr_excluded(const char *class_name)
{
    /* hidden classes (lambdas, proxies spun at run time) cannot be redefined */
    if (strstr(class_name, "$$Lambda") || strstr(class_name, "/0x"))
        return true;
    for (int i = 0; excluded[i]; i++)
        if (entry_matches(excluded[i], class_name))
            return true;
    return false;
}

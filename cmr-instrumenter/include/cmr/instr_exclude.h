/*
 * instr_exclude.h - classes the instrumenter never instruments: the agent's own classes
 * (everything under cmr/agent/) and the JDK classes the probe path runs through, whose instrumentation
 * would recurse into the probe or break the JVM. The list and the reasons are in
 * docs/ENVIRONMENTS.md ("Classes never instrumented").
 */
#ifndef CMR_INSTR_EXCLUDE_H
#define CMR_INSTR_EXCLUDE_H

#include <stdbool.h>

/* true when the class (internal name) must not be instrumented. */
bool cmr_instr_excluded(const char *class_name);

#endif

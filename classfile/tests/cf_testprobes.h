/*
 * cf_testprobes.h - test support: the probe descriptions the engine's tests, test tools
 * (cf_corpus, cf_bench), fuzzers and the JVMTI test agent use: three kinds (timer, anchor,
 * conditional) on the Java helper class cmrtest/Probes (tests/classfile/java), all expressed
 * through the one generic cf_probe description. Not for product code: the product's probes
 * are the instrumenter's (cmr-instrumenter, instr_probe.h).
 */
#ifndef CF_TESTPROBES_H
#define CF_TESTPROBES_H
#include "cmr/classfile.h"

enum { CF_PROBE_TIMER = 0, CF_PROBE_ANCHOR, CF_PROBE_CONDITIONAL, CF_PROBE_KIND_COUNT };
#define CF_TEST_HELPER "cmrtest/Probes"

const cf_probe *cf_test_probe(int kind);
/* Every kind, in order: cf_instrument_stacked(b, len, cf_test_probes, CF_PROBE_KIND_COUNT, ...)
 * instruments with each kind in turn (what the JVM tests load). */
extern const cf_probe *const cf_test_probes[CF_PROBE_KIND_COUNT];
#endif

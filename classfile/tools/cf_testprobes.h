/*
 * cf_testprobes.h - the probe descriptions the tests and tools use: three kinds (timer,
 * anchor, conditional) on the Java helper class cmrtest/Probes (tests/classfile/java), all
 * expressed through the one generic cf_probe description.
 */
#ifndef CF_TESTPROBES_H
#define CF_TESTPROBES_H
#include "cmr/classfile.h"

enum { CF_PROBE_TIMER = 0, CF_PROBE_ANCHOR, CF_PROBE_CONDITIONAL, CF_PROBE_KIND_COUNT };
#define CF_TEST_HELPER "cmrtest/Probes"

const cf_probe *cf_test_probe(int kind);
/* Instruments with every kind in turn (each pass on the previous output).
 * Returns malloc'ed bytes or NULL if nothing changed / error (*err set on error). */
uint8_t *cf_test_instrument_all(const uint8_t *b, size_t len, size_t *out_len, uint32_t *n_instrumented, cf_error *err);
#endif

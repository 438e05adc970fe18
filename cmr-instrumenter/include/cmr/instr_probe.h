/*
 * instr_probe.h - sensors as probe descriptions for the class-file engine, per the probe
 * contract (docs/ARCHITECTURE.md, "The probe contract"): static methods of cmr/agent/Probe,
 * descriptor (J)V, argument = the method id.
 *
 *   TIMER                enter: timerEnter   exit: timerExit   exception: timerExitThrow
 *   INVOCATION_SEQUENCE  enter: enter        exit: exit        exception: exitThrow
 *   ANCHOR               enter: anchorEnter  exit: anchorExit  exception: anchorExitThrow
 *   CONDITIONAL          enter: condEnter    exit: condExit    exception: condExitThrow
 *                        (a diagnosis' discovered methods: they record only inside an anchor
 *                        of that diagnosis on the same thread, docs/DIAGNOSIS.md)
 *
 * cmr_instr_build() applies a decision (instr_rules.h) to class bytes: each picked method
 * gets its sensor's probes; a method the engine refuses is left as it is and reported.
 */
#ifndef CMR_INSTR_PROBE_H
#define CMR_INSTR_PROBE_H

#include <stddef.h>
#include <stdint.h>

#include "cmr/classfile.h"
#include "cmr/instr_meta.h"
#include "cmr/instr_rules.h"
#include "cmr/msg.h"

#define CMR_PROBE_CLASS "cmr/agent/Probe"

const cf_probe *cmr_instr_probe(cmr_sensor_kind_t sensor);
/* The probe a decision's pick gets: its hand-off role's (with the object from the pick's
 * parameter or `this`), an anchor's with its argument, else its sensor's. */
const cf_probe *cmr_instr_pick_probe(const cmr_instr_pick_t *p);

typedef struct cmr_instr_built {
    uint8_t *bytes; /* malloc'd instrumented class; NULL when no method could be */
    size_t len;
    cmr_instrumented_method_t *methods; /* malloc'd, n_methods; strings point into the meta */
    uint16_t *meta_index;               /* per method: index into meta->methods */
    size_t n_methods;
    size_t n_refused;
} cmr_instr_built_t;

/* 0 (possibly with nothing instrumented: every pick refused), or -1 with err when the class
 * cannot be processed at all. */
int cmr_instr_build(const uint8_t *bytes, size_t len, const cmr_instr_meta_t *meta, const cmr_instr_decision_t *d,
                    cmr_instr_built_t *out, char *err, size_t errlen);
void cmr_instr_built_free(cmr_instr_built_t *b);

#endif

/*
 * agent_probes.h - the probe calls the agent's tests and benchmark instrument classes with,
 * as the instrumenter's built-in probes call cmr/agent/Probe: the invocation sequence
 * (every enter and exit), the timer (per-method aggregates), a diagnosis' anchor and
 * conditional probes. Header only: constants.
 */
#ifndef CMR_TEST_AGENT_PROBES_H
#define CMR_TEST_AGENT_PROBES_H

#include "cmr/classfile.h"

/* A static method of cmr/agent/Probe taking the method id: (J)V. */
#define AGENT_PROBE_CALL(n)                \
    {                                      \
        "cmr/agent/Probe", n, "(J)V", 1,   \
        {                                  \
            {                              \
                CF_PARG_METHOD_ID, 0, NULL \
            }                              \
        }                                  \
    }

static const cf_probe agent_sequence_probe = {"invocation-sequence", AGENT_PROBE_CALL("enter"),
                                              AGENT_PROBE_CALL("exit"), AGENT_PROBE_CALL("exitThrow")};
/* A diagnosis' probes (docs/DIAGNOSIS.md): the selected method's anchor, and the
 * conditional probes of its callees, which record only inside the anchor. */
static const cf_probe agent_anchor_probe = {"anchor", AGENT_PROBE_CALL("anchorEnter"), AGENT_PROBE_CALL("anchorExit"),
                                            AGENT_PROBE_CALL("anchorExitThrow")};
static const cf_probe agent_conditional_probe = {"conditional", AGENT_PROBE_CALL("condEnter"),
                                                 AGENT_PROBE_CALL("condExit"), AGENT_PROBE_CALL("condExitThrow")};
static const cf_probe agent_timer_probe = {"timer", AGENT_PROBE_CALL("timerEnter"), AGENT_PROBE_CALL("timerExit"),
                                           AGENT_PROBE_CALL("timerExitThrow")};

#endif

/*
 * cf_testprobes.c - test probe kinds (test support, see cf_testprobes.h). Signatures must match
 * tests/classfile/java/cmrtest/Probes.java.
 */
#include "cf_testprobes.h"

static const cf_probe probes[CF_PROBE_KIND_COUNT] = {
    [CF_PROBE_TIMER] =
        {
            .kind = "timer",
            .enter = {CF_TEST_HELPER, "enter", "(J)V", 1, {{CF_PARG_METHOD_ID, 0, 0}}},
            .normal_exit = {CF_TEST_HELPER, "exit", "(J)V", 1, {{CF_PARG_METHOD_ID, 0, 0}}},
            .exc_exit = {CF_TEST_HELPER,
                         "excExit",
                         "(Ljava/lang/Throwable;J)V",
                         2,
                         {{CF_PARG_THROWABLE, 0, 0}, {CF_PARG_METHOD_ID, 0, 0}}},
        },
    [CF_PROBE_ANCHOR] =
        {
            .kind = "anchor",
            .enter = {CF_TEST_HELPER,
                      "anchorEnter",
                      "(JLjava/lang/String;)V",
                      2,
                      {{CF_PARG_METHOD_ID, 0, 0}, {CF_PARG_METHOD_NAME, 0, 0}}},
            .normal_exit = {CF_TEST_HELPER, "anchorExit", "(J)V", 1, {{CF_PARG_METHOD_ID, 0, 0}}},
            .exc_exit = {CF_TEST_HELPER, "anchorExc", "(J)V", 1, {{CF_PARG_METHOD_ID, 0, 0}}},
        },
    [CF_PROBE_CONDITIONAL] =
        {
            .kind = "conditional",
            .enter = {CF_TEST_HELPER, "condEnter", "(JI)Z", 2, {{CF_PARG_METHOD_ID, 0, 0}, {CF_PARG_INT, 123456, 0}}},
            .normal_exit = {CF_TEST_HELPER,
                            "condExit",
                            "(JLjava/lang/String;)J",
                            2,
                            {{CF_PARG_LONG, 7, 0}, {CF_PARG_STRING, 0, "ctx"}}},
            .exc_exit = {CF_TEST_HELPER,
                         "condExc",
                         "(Ljava/lang/Object;I)V",
                         2,
                         {{CF_PARG_THROWABLE, 0, 0}, {CF_PARG_INT, -1, 0}}},
        },
};

const cf_probe *const cf_test_probes[CF_PROBE_KIND_COUNT] = {
    &probes[CF_PROBE_TIMER],
    &probes[CF_PROBE_ANCHOR],
    &probes[CF_PROBE_CONDITIONAL],
};

const cf_probe *cf_test_probe(int kind)
{
    return kind >= 0 && kind < CF_PROBE_KIND_COUNT ? &probes[kind] : NULL;
}

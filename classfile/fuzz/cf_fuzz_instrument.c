/*
 * cf_fuzz_instrument - libFuzzer target for the instrumenter: every probe kind, alone and
 * stacked; when the input passes the structural check, so must every output. Built with
 * CMR_FUZZ=ON (clang).
 *   cf_fuzz_instrument -max_total_time=60 CORPUS_DIR
 */
#include "cf_testprobes.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cf_error e;
    int input_ok = cf_class_check(data, size, &e) == CF_OK;
    for (int k = 0; k < CF_PROBE_KIND_COUNT; k++) {
        cf_instrument_result r;
        if (cf_instrument_class(data, size, cf_test_probe(k), NULL, NULL, &r, &e) != CF_OK)
            continue;
        if (r.bytes && input_ok && cf_class_check(r.bytes, r.len, &e) != CF_OK)
            abort();
        cf_instrument_result_free(&r);
    }
    cf_instrument_result all;
    if (cf_instrument_stacked(data, size, cf_test_probes, CF_PROBE_KIND_COUNT, NULL, NULL, &all, &e) == CF_OK) {
        if (all.bytes && input_ok && cf_class_check(all.bytes, all.len, &e) != CF_OK)
            abort();
        cf_instrument_result_free(&all);
    }
    return 0;
}

/*
 * cf_fuzz_parse - libFuzzer target for the parser side: parse, round-trip write (must be
 * byte-identical), callees, method ids, structural check. Built with CMR_FUZZ=ON (clang).
 *   cf_fuzz_parse -max_total_time=60 CORPUS_DIR
 */
#include "cmr/classfile.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cf_class *c;
    cf_error e;
    if (cf_class_parse(data, size, &c, &e) != CF_OK)
        return 0;
    uint8_t *o;
    size_t ol;
    if (cf_class_write_flags(c, CF_WRITE_REENCODE, &o, &ol, &e) == CF_OK) {
        if (ol != size || memcmp(o, data, size) != 0)
            abort();
        free(o);
    }
    for (uint16_t i = 0; i < c->method_count; i++) {
        cf_callee *v;
        size_t n;
        if (cf_method_callees(c, &c->methods[i], &v, &n, &e) == CF_OK)
            free(v);
        (void)cf_method_id(c, &c->methods[i]);
    }
    cf_class_free(c);
    (void)cf_class_check(data, size, &e);
    return 0;
}

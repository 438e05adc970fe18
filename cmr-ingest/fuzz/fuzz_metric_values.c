/*
 * fuzz_metric_values.c - libFuzzer target for what the metrics store reads back from disk
 * and what agents send: any bytes given to the stored-value decoder (which holds a latency
 * histogram) and to the histogram decoder get a clean refusal or a value; never a crash,
 * an out-of-bounds access or a leak. What decodes re-encodes to bytes that decode to the
 * same counts, and merging it into itself doubles them (the merge operator's path).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/histogram.h"
#include "cmr/log.h"
#include "cmr/metrics_store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_hist(const uint8_t *data, size_t size)
{
    cmr_hist_t h = {0}, back = {0};
    if (cmr_hist_decode(&h, data, size) != 0) {
        cmr_hist_free(&h);
        return;
    }
    cmr_buf_t enc = {0};
    cmr_hist_encode(&h, &enc);
    if (cmr_hist_decode(&back, enc.data, enc.len) != 0 || back.count != h.count || back.n != h.n ||
        (h.count && (back.min != h.min || back.max != h.max)))
        abort();
    (void)cmr_hist_quantile(&h, 0.99);
    cmr_buf_free(&enc);
    cmr_hist_free(&back);
    cmr_hist_free(&h);
}

static void check_value(const uint8_t *data, size_t size)
{
    cmr_met_value_t v, back, twice;
    cmr_met_value_init(&v);
    cmr_met_value_init(&back);
    cmr_met_value_init(&twice);
    if (cmr_met_value_decode(&v, data, size) == 0) {
        cmr_buf_t enc = {0};
        cmr_met_value_encode(&v, &enc);
        if (cmr_met_value_decode(&back, enc.data, enc.len) != 0 || back.count != v.count || back.errors != v.errors ||
            back.hist.count != v.hist.count)
            abort();
        if (cmr_met_value_copy(&twice, &v) == 0 && cmr_met_value_merge(&twice, &v) == 0 &&
            twice.hist.count != 2 * v.hist.count && v.hist.count < UINT64_MAX / 2)
            abort();
        for (int s = CMR_MET_P50; s <= CMR_MET_ERROR_RATE; s++)
            (void)cmr_met_stat(&v, (cmr_met_stat_t)s);
        cmr_buf_free(&enc);
    }
    cmr_met_value_free(&twice);
    cmr_met_value_free(&back);
    cmr_met_value_free(&v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready) {
        cmr_log_set_level(CMR_LOG_OFF);
        ready = 1;
    }
    check_hist(data, size);
    check_value(data, size);
    return 0;
}

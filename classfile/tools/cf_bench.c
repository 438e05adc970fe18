/*
 * cf_bench - single-core throughput of the class-file engine over a corpus held in memory:
 *   parse+write              (cf_class_parse + cf_class_write)
 *   parse+instrument+write   (cf_instrument_class with the timer probe: entry, every
 *                             normal exit, catch-all exceptional exit, all methods)
 *   per method               (parse, cf_instrument_method for each method, write: what
 *                             cmr-instrumenter's cmr_instr_build does with a decision)
 * Prints classes/s and MB/s (input bytes). Compare with tests/classfile/java/AsmBench.java
 * (tests/classfile/bench.sh runs both).
 *   cf_bench [--seconds S] [--only 1|2] PATH...
 */
#include "cf_testprobes.h"
#include "cmr/buf.h"
#include "cmr/clock.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct item {
    uint8_t *b;
    size_t n;
} item;
static item *items;
static size_t n_items, cap_items, total_bytes;

static int visit(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)ftw;
    size_t l = strlen(path);
    if (type != FTW_F || l < 6 || strcmp(path + l - 6, ".class") != 0)
        return 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    uint8_t *b = malloc((size_t)st->st_size + 1);
    if (!b || CMR_ARRAY_GROW(items, cap_items, n_items + 1)) {
        fclose(f);
        free(b);
        return 1; /* out of memory: stop the walk */
    }
    size_t n = fread(b, 1, (size_t)st->st_size, f);
    fclose(f);
    items[n_items++] = (item){b, n};
    total_bytes += n;
    return 0;
}

static double now(void)
{
    return (double)cmr_mono_ns() / 1e9;
}

static size_t sink;

/* Writes c (its length into sink) and frees it. */
static void write_and_free(cf_class *c)
{
    uint8_t *o;
    size_t ol;
    cf_error e;
    if (cf_class_write(c, &o, &ol, &e) == CF_OK) {
        sink += ol;
        free(o);
    }
    cf_class_free(c);
}

static void pass_roundtrip(void)
{
    for (size_t i = 0; i < n_items; i++) {
        cf_class *c;
        cf_error e;
        if (cf_class_parse(items[i].b, items[i].n, &c, &e) == CF_OK)
            write_and_free(c);
    }
}

static void pass_instrument(void)
{
    for (size_t i = 0; i < n_items; i++) {
        cf_instrument_result r;
        cf_error e;
        if (cf_instrument_class(items[i].b, items[i].n, cf_test_probe(CF_PROBE_TIMER), NULL, NULL, &r, &e) == CF_OK) {
            sink += r.len + r.n_instrumented;
            cf_instrument_result_free(&r);
        }
    }
}

static void pass_per_method(void)
{
    for (size_t i = 0; i < n_items; i++) {
        cf_class *c;
        cf_error e;
        if (cf_class_parse(items[i].b, items[i].n, &c, &e))
            continue;
        for (uint16_t m = 0; m < c->method_count; m++) {
            cf_method_result r;
            if (cf_instrument_method(c, m, cf_test_probe(CF_PROBE_TIMER), &r, &e) == CF_OK)
                sink++;
        }
        write_and_free(c);
    }
}

/* Five rounds of seconds/5 each; the best round is reported (the machine is shared, so
 * the best round is the one least disturbed by other processes). */
static void bench(const char *name, void (*pass)(void), double seconds)
{
    pass(); /* warm-up: caches, page faults */
    double best = 0;
    int best_passes = 0, total_passes = 0;
    for (int round = 0; round < 5; round++) {
        int passes = 0;
        double t0 = now(), t;
        do {
            pass();
            passes++;
            t = now() - t0;
        } while (t < seconds / 5);
        total_passes += passes;
        if (passes / t > best) {
            best = passes / t;
            best_passes = passes;
        }
    }
    double cps = (double)n_items * best, mbs = (double)total_bytes * best / 1e6;
    printf("C engine  %-24s %10.0f classes/s %8.1f MB/s  (best of 5 rounds, %d passes in it, %d "
           "in all)\n",
           name, cps, mbs, best_passes, total_passes);
}

int main(int argc, char **argv)
{
    double seconds = 5;
    int i = 1, only = 0; /* --only 1|2|3: run one mode (for profiling) */
    for (; i + 1 < argc && !strncmp(argv[i], "--", 2); i += 2) {
        if (!strcmp(argv[i], "--seconds"))
            seconds = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--only"))
            only = atoi(argv[i + 1]);
    }
    for (; i < argc; i++)
        nftw(argv[i], visit, 32, FTW_PHYS);
    if (!n_items) {
        fprintf(stderr, "usage: cf_bench [--seconds S] PATH...\n");
        return 2;
    }
    printf("corpus: %zu classes, %.1f MB\n", n_items, total_bytes / 1e6);
    if (!only || only == 1)
        bench("parse+write", pass_roundtrip, seconds);
    if (!only || only == 2)
        bench("parse+instrument+write", pass_instrument, seconds);
    if (!only || only == 3)
        bench("per method", pass_per_method, seconds);
    return sink == 0;
}

/*
 * digest_bench.c - what binding Redefines to classes costs the load hook: the agent
 * computes, for every class the JVM loads, the XXH3 hash it always computed (cache key,
 * cmr_class_hash) and now also the BLAKE2b-256 digest of the original bytes
 * (cmr_trust_digest). This times both over the classes of real jars, in the same run.
 *
 *   digest_bench [-r ROUNDS] DIR...
 *
 * DIR: directories holding .class files (a jar unpacked), walked recursively, e.g.
 *
 *   mkdir /tmp/g && cd /tmp/g && unzip -q /usr/share/java/guava.jar
 *   build/agent/digest_bench /tmp/g
 *
 * Prints classes, bytes, and for each function MB/s, mean and p99 us per class. Not a
 * test: nothing here can fail except reading the files.
 */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/buf.h"
#include "cmr/clock.h"
#include "cmr/file.h"
#include "cmr/ids.h"
#include "cmr/trust.h"

typedef struct class_file {
    uint8_t *bytes; /* owned */
    size_t len;
} class_file_t;

static class_file_t *files;
static size_t nfiles, cap;

static int add_file(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    size_t n = strlen(path);
    if (flag != FTW_F || n < 6 || strcmp(path + n - 6, ".class") != 0)
        return 0;
    cmr_buf_t b = {0};
    char err[512];
    if (cmr_file_read(path, 64u << 20, &b, err, sizeof err) != 0) {
        fprintf(stderr, "digest_bench: %s\n", err);
        cmr_buf_free(&b);
        return 0;
    }
    if (CMR_ARRAY_GROW(files, cap, nfiles + 1) != 0) {
        cmr_buf_free(&b);
        return -1;
    }
    files[nfiles].len = b.len;
    files[nfiles++].bytes = (uint8_t *)cmr_buf_take(&b);
    return 0;
}

static int cmp_i64(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return (a > b) - (a < b);
}

static volatile uint64_t sink; /* keeps the work from being optimised away */

/* Times fn over every class, `rounds` times; prints throughput and per-class figures. */
static void bench(const char *label, int which, int rounds, size_t total)
{
    int64_t *per = calloc(nfiles, sizeof *per); /* best of the rounds, per class */
    if (!per) {
        fprintf(stderr, "digest_bench: out of memory\n");
        return;
    }
    int64_t all_ns = 0;
    for (int r = 0; r < rounds; r++) {
        int64_t t_round = cmr_mono_ns();
        for (size_t i = 0; i < nfiles; i++) {
            int64_t t0 = cmr_mono_ns();
            if (which == 0) {
                sink += cmr_class_hash(files[i].bytes, files[i].len);
            } else {
                uint8_t d[CMR_TRUST_DIGEST_BYTES];
                cmr_trust_digest(files[i].bytes, files[i].len, d);
                sink += d[0];
            }
            int64_t ns = cmr_mono_ns() - t0;
            if (r == 0 || ns < per[i])
                per[i] = ns;
        }
        all_ns += cmr_mono_ns() - t_round;
    }
    qsort(per, nfiles, sizeof *per, cmp_i64);
    double mean_us = (double)all_ns / rounds / (double)nfiles / 1000.0;
    double mbps = (double)total * rounds / ((double)all_ns / 1e9) / 1e6;
    printf("%-8s %9.1f MB/s   mean %7.2f us/class   p50 %7.2f us   p99 %7.2f us   max %7.2f us\n", label, mbps, mean_us,
           per[nfiles / 2] / 1000.0, per[nfiles * 99 / 100] / 1000.0, per[nfiles - 1] / 1000.0);
    free(per);
}

int main(int argc, char **argv)
{
    int rounds = 20, first = 1;
    if (argc > 2 && strcmp(argv[1], "-r") == 0) {
        rounds = atoi(argv[2]);
        first = 3;
    }
    if (first >= argc || rounds < 1) {
        fprintf(stderr, "usage: %s [-r ROUNDS] DIR...\n", argv[0]);
        return 2;
    }
    if (cmr_trust_init() != 0) {
        fprintf(stderr, "digest_bench: libsodium cannot run here\n");
        return 1;
    }
    for (int i = first; i < argc; i++)
        if (nftw(argv[i], add_file, 32, FTW_PHYS) != 0) {
            fprintf(stderr, "digest_bench: cannot walk %s\n", argv[i]);
            return 1;
        }
    if (nfiles == 0) {
        fprintf(stderr, "digest_bench: no .class file found\n");
        return 1;
    }
    size_t total = 0;
    for (size_t i = 0; i < nfiles; i++)
        total += files[i].len;
    printf("%zu classes, %zu bytes (mean %zu bytes), %d rounds\n", nfiles, total, total / nfiles, rounds);
    bench("XXH3", 0, rounds, total);
    bench("BLAKE2b", 1, rounds, total);
    for (size_t i = 0; i < nfiles; i++)
        free(files[i].bytes);
    free(files);
    return 0;
}

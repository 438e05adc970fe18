/*
 * cf_corpus - runs the class-file engine over a corpus of .class files (directories are
 * walked recursively): every class must parse and write back byte-identical; callees and
 * method ids are listed for every method; with --instrument every method is instrumented
 * with every probe kind (tests/cf_testprobes.c), the result re-parsed and checked structurally.
 * Prints counts of classes, methods instrumented and refusals by reason. Exit status 1 on
 * any round-trip mismatch, parse failure or instrumentation error.
 *
 *   cf_corpus [--instrument] [--show-refusals] [--sample N] [--max-fail N] PATH...
 * --sample N keeps one class in N (deterministic, by file order).
 */
#include "cf_testprobes.h"
#include "cmr/buf.h"
#include "cmr/file.h"
#include "cmr/classfile.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int opt_show_refusals, opt_instrument, opt_sample = 1, opt_max_fail = 20;
static unsigned long n_files, n_seen, n_classes, n_parse_fail, n_rt_fail, n_methods, n_callees, n_instr_ok, n_instr_err,
    n_reparse_fail;
static unsigned long refusals[CF_REFUSE__COUNT];
static unsigned long n_fail_printed;

static void fail(const char *path, const char *what, const char *msg)
{
    if (n_fail_printed++ < (unsigned long)opt_max_fail)
        fprintf(stderr, "FAIL %s: %s: %s\n", path, what, msg);
}

static void do_class(const char *path)
{
    cmr_buf_t file = {0};
    char ferr[512];
    if (cmr_file_read(path, (size_t)1 << 30, &file, ferr, sizeof ferr)) {
        cmr_buf_free(&file);
        return;
    }
    const uint8_t *bytes = file.data;
    size_t len = file.len;
    n_classes++;
    cf_class *c;
    cf_error err;
    if (cf_class_parse(bytes, len, &c, &err)) {
        n_parse_fail++;
        fail(path, "parse", err.msg);
        cmr_buf_free(&file);
        return;
    }
    uint8_t *out;
    size_t out_len;
    if (cf_class_write(c, &out, &out_len, &err)) {
        n_rt_fail++;
        fail(path, "write", err.msg);
    } else {
        if (out_len != len || memcmp(out, bytes, len) != 0) {
            n_rt_fail++;
            fail(path, "round-trip", "bytes differ");
        }
        free(out);
    }
    /* and with every constant re-encoded from its decoded fields */
    if (cf_class_write_flags(c, CF_WRITE_REENCODE, &out, &out_len, &err)) {
        n_rt_fail++;
        fail(path, "write (re-encode)", err.msg);
    } else {
        if (out_len != len || memcmp(out, bytes, len) != 0) {
            n_rt_fail++;
            fail(path, "round-trip (re-encode)", "bytes differ");
        }
        free(out);
    }
    for (uint16_t i = 0; i < c->method_count; i++) {
        n_methods++;
        cf_callee *v;
        size_t n;
        if (cf_method_callees(c, &c->methods[i], &v, &n, &err)) {
            n_rt_fail++;
            fail(path, "callees", err.msg);
        } else {
            n_callees += n;
            free(v);
        }
        (void)cf_method_id(c, &c->methods[i]);
    }
    cf_class_free(c);
    if (opt_instrument) {
        for (int k = 0; k < CF_PROBE_KIND_COUNT; k++) {
            cf_instrument_result r;
            if (cf_instrument_class(bytes, len, cf_test_probe(k), NULL, NULL, &r, &err)) {
                n_instr_err++;
                fail(path, "instrument", err.msg);
                continue;
            }
            if (k == 0) {
                for (uint32_t m = 0; m < r.n_methods; m++) {
                    cf_method_result *mr = &r.methods[m];
                    refusals[mr->refusal]++;
                    if (opt_show_refusals && mr->refusal != CF_REFUSE_NONE &&
                        mr->refusal != CF_REFUSE_ABSTRACT_OR_NATIVE)
                        printf("refused %s %.*s%.*s: %s: %s\n", path, (int)mr->name.len, mr->name.p, (int)mr->desc.len,
                               mr->desc.p, cf_refusal_name(mr->refusal), mr->why);
                }
                n_instr_ok += r.n_instrumented;
            }
            if (r.bytes && cf_class_check(r.bytes, r.len, &err)) {
                n_reparse_fail++;
                fail(path, "instrumented class check", err.msg);
            }
            cf_instrument_result_free(&r);
        }
        /* all kinds stacked on each other (what the JVM tests load) */
        cf_instrument_result all;
        if (cf_instrument_stacked(bytes, len, cf_test_probes, CF_PROBE_KIND_COUNT, NULL, NULL, &all, &err)) {
            n_instr_err++;
            fail(path, "instrument (all kinds)", err.msg);
        } else {
            if (all.bytes && cf_class_check(all.bytes, all.len, &err)) {
                n_reparse_fail++;
                fail(path, "stacked instrumented class check", err.msg);
            }
            cf_instrument_result_free(&all);
        }
    }
    cmr_buf_free(&file);
}

static int visit(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (type != FTW_F)
        return 0;
    size_t n = strlen(path);
    if (n < 6 || strcmp(path + n - 6, ".class") != 0)
        return 0;
    n_files++;
    if ((n_files - 1) % (unsigned long)opt_sample != 0)
        return 0;
    n_seen++;
    do_class(path);
    return 0;
}

int main(int argc, char **argv)
{
    int first = 1;
    for (; first < argc && strncmp(argv[first], "--", 2) == 0; first++) {
        if (!strcmp(argv[first], "--instrument"))
            opt_instrument = 1;
        else if (!strcmp(argv[first], "--show-refusals"))
            opt_show_refusals = 1;
        else if (!strcmp(argv[first], "--sample") && first + 1 < argc)
            opt_sample = atoi(argv[++first]);
        else if (!strcmp(argv[first], "--max-fail") && first + 1 < argc)
            opt_max_fail = atoi(argv[++first]);
        else {
            fprintf(stderr, "usage: cf_corpus [--instrument] [--sample N] PATH...\n");
            return 2;
        }
    }
    if (opt_sample < 1)
        opt_sample = 1;
    for (int i = first; i < argc; i++)
        nftw(argv[i], visit, 32, FTW_PHYS);
    printf("classes: %lu (of %lu files)\n", n_classes, n_files);
    printf("parse failures: %lu\nround-trip/callee failures: %lu\n", n_parse_fail, n_rt_fail);
    printf("methods: %lu, callees listed: %lu\n", n_methods, n_callees);
    if (opt_instrument) {
        printf("methods instrumented (timer kind): %lu\n", n_instr_ok);
        printf("instrumentation errors: %lu, instrumented classes failing the check: %lu\n", n_instr_err,
               n_reparse_fail);
        for (int r = 1; r < CF_REFUSE__COUNT; r++)
            printf("refused %-24s %lu\n", cf_refusal_name((cf_refusal)r), refusals[r]);
    }
    return (n_parse_fail || n_rt_fail || n_instr_err || n_reparse_fail || n_classes == 0) ? 1 : 0;
}

/*
 * prepare_test.c - the pure part of answering a class (instr_prepare.h), on real classes
 * (compiled from tests/java/disc at build time; their directory is the argument):
 *
 *  - prepared on a pool of threads (cmr/workpool.h), every class gives the same bytes,
 *    methods, signature and digests as prepared alone, and a class grant each;
 *  - the digest of the original bytes is the one the agent checks; a class whose built
 *    bytes the agent runs already (its applied digest) needs no digest and no grant;
 *  - every method refused (abstract methods): the class stays original;
 *  - a diagnosis whose probes do not fit falls back to the environment's decision, and
 *    to nothing when the environment wants nothing there; a diagnosis that fits gets its
 *    scope, restoring the environment's bytes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/file.h"
#include "cmr/instr_prepare.h"
#include "cmr/workpool.h"

static const char *classes_dir;
static char keydir[64];
static cmr_signer_t *signer;

typedef struct one_class {
    cmr_buf_t bytes;
    cmr_instr_meta_t meta;
    cmr_instr_decision_t d; /* every method, TIMER */
    uint64_t sig;
    cmr_instr_prep_t alone, pooled;
} one_class_t;

static one_class_t classes[64];
static size_t nclasses;

/* A decision that picks every method with a body-or-not (the engine refuses those without). */
static void decide_all(const cmr_instr_meta_t *m, cmr_instr_decision_t *d)
{
    memset(d, 0, sizeof *d);
    d->picks = calloc(m->n_methods ? m->n_methods : 1, sizeof *d->picks);
    for (size_t i = 0; i < m->n_methods; i++)
        d->picks[d->n_picks++] = (cmr_instr_pick_t){.method = (uint16_t)i, .sensor = CMR_SENSOR_TIMER};
}

static cmr_instr_prep_in_t input(const one_class_t *c, const cmr_instr_decision_t *d, const cmr_instr_decision_t *env_d,
                                 const cmr_diagnosis_t *diag)
{
    return (cmr_instr_prep_in_t){.class_name = c->meta.name,
                                 .bytes = c->bytes.data,
                                 .len = c->bytes.len,
                                 .meta = &c->meta,
                                 .d = d,
                                 .env_d = env_d,
                                 .diag = diag,
                                 .sig_env = diag ? cmr_instr_decision_signature(&c->meta, env_d) : 0,
                                 .signer = signer,
                                 .grant_lifetime_ms = 60000,
                                 .env_id = "shop",
                                 .revision = 3};
}

static int setup(void **state)
{
    (void)state;
    char err[256], path[512];
    strcpy(keydir, "/tmp/cmr-prep-XXXXXX");
    if (!mkdtemp(keydir) || cmr_trust_keygen(keydir, "cmr", err, sizeof err) != 0)
        return -1;
    snprintf(path, sizeof path, "%s/cmr.key", keydir);
    if (!(signer = cmr_signer_load(path, err, sizeof err)))
        return -1;
    snprintf(path, sizeof path, "%s/disc", classes_dir);
    DIR *dir = opendir(path);
    struct dirent *e;
    while (dir && (e = readdir(dir)) && nclasses < 64) {
        size_t n = strlen(e->d_name);
        if (n < 7 || strcmp(e->d_name + n - 6, ".class") != 0)
            continue;
        one_class_t *c = &classes[nclasses];
        snprintf(path, sizeof path, "%s/disc/%s", classes_dir, e->d_name);
        if (cmr_file_read(path, 1 << 20, &c->bytes, err, sizeof err) != 0 ||
            cmr_instr_meta_extract(c->bytes.data, c->bytes.len, &c->meta, err, sizeof err) != 0) {
            fprintf(stderr, "%s: %s\n", path, err);
            return -1;
        }
        decide_all(&c->meta, &c->d);
        c->sig = cmr_instr_decision_signature(&c->meta, &c->d);
        nclasses++;
    }
    if (dir)
        closedir(dir);
    return nclasses >= 10 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    for (size_t i = 0; i < nclasses; i++) {
        cmr_buf_free(&classes[i].bytes);
        cmr_instr_meta_free(&classes[i].meta);
        cmr_instr_decision_free(&classes[i].d);
        cmr_instr_prep_free(&classes[i].alone);
        cmr_instr_prep_free(&classes[i].pooled);
    }
    cmr_signer_free(signer);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", keydir);
    return system(cmd) == 0 ? 0 : -1;
}

static void prepare_pooled(void *ctx, size_t i)
{
    (void)ctx;
    one_class_t *c = &classes[i];
    cmr_instr_decision_t none = {0};
    cmr_instr_prep_in_t in = input(c, &c->d, &none, NULL);
    cmr_instr_prepare(&in, c->sig, &c->pooled);
}

static void test_pool_prepares_as_alone(void **state)
{
    (void)state;
    cmr_instr_decision_t none = {0};
    size_t ready = 0, refused = 0;
    for (size_t i = 0; i < nclasses; i++) {
        one_class_t *c = &classes[i];
        cmr_instr_prep_in_t in = input(c, &c->d, &none, NULL);
        cmr_instr_prepare(&in, c->sig, &c->alone);
    }
    cmr_workpool_t *pool = cmr_workpool_new(4);
    cmr_workpool_run(pool, nclasses, prepare_pooled, NULL);
    cmr_workpool_free(pool);
    for (size_t i = 0; i < nclasses; i++) {
        const cmr_instr_prep_t *a = &classes[i].alone, *p = &classes[i].pooled;
        assert_int_equal(a->status, p->status);
        assert_int_equal(a->sig, p->sig);
        assert_int_equal(a->built.len, p->built.len);
        assert_int_equal(a->built.n_methods, p->built.n_methods);
        if (a->built.len)
            assert_memory_equal(a->built.bytes, p->built.bytes, a->built.len);
        assert_memory_equal(a->original_digest, p->original_digest, sizeof a->original_digest);
        if (a->status == CMR_PREP_READY) {
            ready++;
            uint8_t digest[CMR_TRUST_DIGEST_BYTES];
            cmr_trust_digest(classes[i].bytes.data, classes[i].bytes.len, digest);
            assert_memory_equal(p->original_digest, digest, sizeof digest);
            assert_true(p->grant.len > 0 && p->grant.len == a->grant.len);
            assert_int_equal(p->sig, classes[i].sig);
        } else {
            refused++;
            assert_int_equal(a->status, CMR_PREP_REFUSED); /* interfaces: abstract methods only */
            assert_int_equal(p->sig, 0);
            assert_int_equal(p->grant.len, 0);
        }
    }
    assert_true(ready >= 8);
    assert_true(refused >= 1);
}

static one_class_t *find_class(const char *name)
{
    for (size_t i = 0; i < nclasses; i++)
        if (strcmp(classes[i].meta.name, name) == 0)
            return &classes[i];
    fail_msg("no class %s", name);
    return NULL;
}

static void test_agent_runs_its_cached_bytes(void **state)
{
    (void)state;
    one_class_t *c = find_class("disc/Service");
    cmr_instr_decision_t none = {0};
    cmr_instr_prep_in_t in = input(c, &c->d, &none, NULL);
    cmr_instr_prep_t first, again;
    cmr_instr_prepare(&in, c->sig, &first);
    assert_int_equal(first.status, CMR_PREP_READY);
    assert_false(first.agent_runs);
    uint8_t applied[CMR_TRUST_DIGEST_BYTES];
    cmr_trust_digest(first.built.bytes, first.built.len, applied);
    cmr_bytes_t a = {applied, sizeof applied};
    in.applied = &a;
    cmr_instr_prepare(&in, c->sig, &again);
    assert_int_equal(again.status, CMR_PREP_READY);
    assert_true(again.agent_runs);
    assert_int_equal(again.grant.len, 0);
    cmr_instr_prep_free(&again);
    applied[0] ^= 1; /* other bytes: a Redefine again */
    cmr_instr_prepare(&in, c->sig, &again);
    assert_false(again.agent_runs);
    assert_true(again.grant.len > 0);
    cmr_instr_prep_free(&again);
    in.grant_lifetime_ms = 0; /* grants off */
    cmr_instr_prepare(&in, c->sig, &again);
    assert_int_equal(again.grant.len, 0);
    assert_string_equal(again.grant_error, "");
    cmr_instr_prep_free(&again);
    cmr_instr_prep_free(&first);
}

static void test_diagnosis_that_does_not_fit(void **state)
{
    (void)state;
    cmr_diagnosis_t diag = {.id = "d-000000000000000000000000000000000000001",
                            .revision = 2,
                            .ttl_ms = 60000,
                            .started_ms = 1000,
                            .max_hits = 10};
    /* an interface: every method refused, and the environment wants nothing there */
    one_class_t *shape = find_class("disc/Repo");
    cmr_instr_decision_t none = {0};
    cmr_instr_prep_in_t in = input(shape, &shape->d, &none, &diag);
    cmr_instr_prep_t p;
    cmr_instr_prepare(&in, shape->sig | 1, &p);
    assert_int_equal(p.status, CMR_PREP_NONE);
    assert_true(p.diag_failed);
    assert_ptr_equal(p.asked, &diag);
    assert_null(p.diag);
    assert_string_equal(p.diag_error, "every method refused");
    assert_int_equal(p.sig, 0);
    cmr_instr_prep_free(&p);

    /* an abstract class whose diagnosis picks only its abstract method (refused) falls back
     * to the environment's decision (its constructor) */
    one_class_t *abs = find_class("disc/Shape");
    long area = cmr_instr_meta_find_method(&abs->meta, "area", "()D");
    assert_true(area >= 0);
    cmr_instr_decision_t only_abstract = {0};
    cmr_instr_pick_t pick = {.method = (uint16_t)area, .sensor = CMR_SENSOR_TIMER};
    only_abstract.picks = &pick;
    only_abstract.n_picks = 1;
    in = input(abs, &only_abstract, &abs->d, &diag);
    cmr_instr_prepare(&in, 77, &p);
    assert_true(p.diag_failed);
    assert_int_equal(p.status, CMR_PREP_READY);
    assert_int_equal(p.sig, abs->sig);
    assert_null(p.diag);
    assert_true(p.built.n_methods >= 1);
    assert_true(p.grant.len > 0); /* the environment's bytes: granted as usual */
    cmr_instr_prep_free(&p);

    one_class_t *svc = find_class("disc/Service");
    /* a diagnosis that fits: its scope, restoring the environment's bytes (here: none) */
    in = input(svc, &svc->d, &none, &diag);
    cmr_instr_prepare(&in, 99, &p);
    assert_int_equal(p.status, CMR_PREP_READY);
    assert_false(p.diag_failed);
    assert_ptr_equal(p.diag, &diag);
    assert_int_equal(p.sig, 99);
    assert_int_equal(p.scope.revision, 2);
    assert_int_equal(p.scope.end_ms, 61000);
    assert_true(p.scope.restore_original);
    assert_int_equal(p.scope.restore_bytecode.len, svc->bytes.len);
    assert_int_equal(p.grant.len, 0); /* a diagnosis' bytes are never granted */
    cmr_instr_prep_free(&p);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s CLASSES-DIR\n", argv[0]);
        return 2;
    }
    classes_dir = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_prepares_as_alone),
        cmocka_unit_test(test_agent_runs_its_cached_bytes),
        cmocka_unit_test(test_diagnosis_that_does_not_fit),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

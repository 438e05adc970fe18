/*
 * diagnose_test.c - the Discover step over the instrumenter's class cache (instr_diagnose.h),
 * without Kafka: classes compiled from tests/java/disc at build time are put in a RocksDB
 * cache the way the worker does (meta, bytes, type, class record, agent record), then
 *  - the cache source gives the tree of disc/Service.handle: the interface call reaches the
 *    loaded implementation only (SqlRepo, not MemRepo), the static helper is found;
 *  - a diagnosis naming only the method id (a threshold's) gives the same tree;
 *  - a class the agent never loaded, an unknown method id, and bytes evicted from the cache
 *    give an error and no nodes;
 *  - the queue makes one tree per ACTIVE revision and agent of the environment (listed agents
 *    only when listed; agents of partitions not owned skipped), once; an ENDED revision none.
 *
 * Usage: diagnose_test CLASS-DIR
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmr/bytes.h"
#include "cmr/ids.h"
#include "cmr/instr_diagnose.h"
#include "cmr/wire.h"

static const char *class_dir;
static char db_dir[] = "/tmp/instr-diag-XXXXXX";
static cmr_instr_cache_t *cache;

static const char *const loaded[] = {"disc/Service", "disc/BaseService", "disc/Repo",   "disc/SqlRepo", "disc/Util",
                                     "disc/Shape",   "disc/Circle",      "disc/Square", "disc/Greeter", "disc/Polite"};

static uint8_t *read_class(const char *name, size_t *len)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.class", class_dir, name);
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    uint8_t *b = malloc(1 << 20);
    *len = b ? fread(b, 1, 1 << 20, f) : 0;
    fclose(f);
    return b;
}

/* Puts a class of agent into the cache like the worker's on_class (bytes kept or not). */
static void put_class(uint64_t agent, int32_t partition, const char *env, const char *name, int keep_bytes)
{
    size_t len = 0;
    uint8_t *b = read_class(name, &len);
    assert_non_null(b);
    uint64_t hash = cmr_class_hash(b, len);
    cmr_instr_meta_t m;
    char err[256];
    assert_int_equal(cmr_instr_meta_extract(b, len, &m, err, sizeof err), 0);
    assert_int_equal(cmr_instr_cache_put_meta(cache, hash, &m), 0);
    assert_int_equal(cmr_instr_cache_put_type(cache, agent, m.name, hash), 0);
    if (keep_bytes)
        assert_int_equal(cmr_instr_cache_put_bytes(cache, hash, b, len, 1), 0);
    cmr_instr_class_rec_t rec = {.hash = hash};
    assert_int_equal(cmr_instr_class_rec_ids(&rec, "0123456789abcdef0123456789abcdef", env), 0);
    assert_int_equal(cmr_instr_cache_put_class(cache, agent, 5, name, &rec), 0);
    cmr_instr_agent_rec_t ar = {1, partition, "", ""};
    assert_int_equal(cmr_instr_agent_rec_ids(&ar, "0123456789abcdef0123456789abcdef", env), 0);
    assert_int_equal(cmr_instr_cache_put_agent(cache, agent, &ar), 0);
    assert_int_equal(cmr_instr_cache_commit(cache, err, sizeof err), 0);
    cmr_instr_meta_free(&m);
    free(b);
}

static int setup(void **state)
{
    (void)state;
    char err[256];
    if (!mkdtemp(db_dir))
        return -1;
    cache = cmr_instr_cache_open(db_dir, 64u << 20, 0, err, sizeof err);
    if (!cache)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    cmr_instr_cache_close(cache);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", db_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static cmr_diagnosis_t diagnosis(const char *id, const char *env, const char *cls, const char *method, const char *desc,
                                 int64_t method_id)
{
    return (cmr_diagnosis_t){.id = (char *)id,
                             .revision = 1,
                             .environment_id = (char *)env,
                             .method_id = method_id,
                             .class_name = (char *)cls,
                             .method_name = (char *)method,
                             .descriptor = (char *)desc,
                             .depth = 2,
                             .state = CMR_DIAG_ACTIVE,
                             .rule = "",
                             .trace_id = "",
                             .author = "test"};
}

static const cmr_diag_node_t *node(const cmr_diagnosis_tree_t *t, const char *cls, const char *method)
{
    for (size_t i = 0; i < t->nodes.count; i++)
        if (!strcmp(t->nodes.items[i].class_name, cls) && !strcmp(t->nodes.items[i].method_name, method))
            return &t->nodes.items[i];
    return NULL;
}

static void check_service_tree(const cmr_diagnosis_tree_t *t)
{
    assert_string_equal(t->error, "");
    assert_true(t->nodes.count > 5);
    assert_true(t->classes_read > 3);
    assert_string_equal(t->nodes.items[0].class_name, "disc/Service");
    assert_string_equal(t->nodes.items[0].method_name, "handle");
    assert_int_equal(t->nodes.items[0].parent, -1);
    assert_int_equal(t->nodes.items[0].via, CMR_DIAG_VIA_ROOT);
    assert_int_equal(t->nodes.items[0].status, CMR_DIAG_NODE_FOUND);
    const cmr_diag_node_t *sql = node(t, "disc/SqlRepo", "find");
    assert_non_null(sql);
    assert_int_equal(sql->parent, 0);
    assert_int_equal(sql->via, CMR_DIAG_VIA_INTERFACE);
    assert_int_equal(sql->status, CMR_DIAG_NODE_FOUND);
    assert_null(node(t, "disc/MemRepo", "find"));
    const cmr_diag_node_t *hash = node(t, "disc/Util", "hash");
    assert_non_null(hash);
    assert_int_equal(hash->via, CMR_DIAG_VIA_STATIC);
    const cmr_diag_node_t *fmt = node(t, "java/lang/String", "format");
    assert_non_null(fmt);
    assert_int_equal(fmt->status, CMR_DIAG_NODE_JDK);
    for (size_t i = 1; i < t->nodes.count; i++) { /* breadth first, depth bounded */
        assert_true(t->nodes.items[i].parent >= 0 && (size_t)t->nodes.items[i].parent < i);
        assert_true(t->nodes.items[i].depth <= 2);
    }
}

static void test_cache_source(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof loaded / sizeof *loaded; i++)
        put_class(0xA1, 0, "shop", loaded[i], 1);
    /* by name */
    cmr_diagnosis_t d = diagnosis("00000000000000d1", "shop", "disc/Service", "handle", "(I)Ljava/lang/String;", 0);
    cmr_diagnosis_tree_t t;
    assert_int_equal(cmr_instr_diag_tree(cache, 0xA1, &d, 1234, &t), 0);
    check_service_tree(&t);
    assert_int_equal(t.agent_id, 0xA1);
    assert_int_equal(t.time_ms, 1234);
    assert_string_equal(t.diagnosis_id, "00000000000000d1");
    /* the tree encodes (the wire's checks) */
    cmr_buf_t enc = {0};
    char err[256];
    assert_int_equal(cmr_msg_encode(CMR_MSG_DIAGNOSIS_TREE, &t, &enc, err, sizeof err), CMR_WIRE_OK);
    cmr_buf_free(&enc);
    size_t n = t.nodes.count;
    cmr_instr_diag_tree_free(&t);
    /* a method the operator excluded, and a class prefix: EXCLUDED, with who excluded them */
    char *ex[] = {"disc/Util.hash", "disc/ext/"};
    d.exclude = (cmr_strings_t){ex, 2};
    assert_int_equal(cmr_instr_diag_tree(cache, 0xA1, &d, 1234, &t), 0);
    const cmr_diag_node_t *hash = node(&t, "disc/Util", "hash");
    assert_non_null(hash);
    assert_int_equal(hash->status, CMR_DIAG_NODE_EXCLUDED);
    assert_string_equal(hash->note, CMR_INSTR_DIAG_NOTE_OPERATOR);
    const cmr_diag_node_t *lib = node(&t, "disc/ext/Lib", "call");
    assert_non_null(lib);
    assert_int_equal(lib->status, CMR_DIAG_NODE_EXCLUDED);
    assert_string_equal(lib->note, "its class is on the diagnosis' exclude list (disc/ext/)");
    assert_int_equal(cmr_msg_encode(CMR_MSG_DIAGNOSIS_TREE, &t, &enc, err, sizeof err), CMR_WIRE_OK);
    cmr_buf_free(&enc);
    cmr_instr_diag_tree_free(&t);
    d.exclude = (cmr_strings_t){0};
    /* by method id only */
    d = diagnosis("00000000000000d2", "shop", "", "", "",
                  (int64_t)cmr_method_id("disc/Service", "handle", "(I)Ljava/lang/String;"));
    assert_int_equal(cmr_instr_diag_tree(cache, 0xA1, &d, 1, &t), 0);
    check_service_tree(&t);
    assert_int_equal(t.nodes.count, n);
    cmr_instr_diag_tree_free(&t);
    /* an unknown method id; a class never loaded */
    d.method_id = 42;
    assert_int_equal(cmr_instr_diag_tree(cache, 0xA1, &d, 1, &t), 0);
    assert_string_equal(t.error, "method not found");
    assert_int_equal(t.nodes.count, 0);
    cmr_instr_diag_tree_free(&t);
    d = diagnosis("00000000000000d3", "shop", "disc/MemRepo", "find", "", 0);
    assert_int_equal(cmr_instr_diag_tree(cache, 0xA1, &d, 1, &t), 0);
    assert_string_equal(t.error, "the selected method's class was never loaded by this agent");
    cmr_instr_diag_tree_free(&t);
    /* another agent whose bytes of MemRepo were not kept (bytes are shared by hash: no other
     * agent has them) */
    put_class(0xB2, 0, "shop", "disc/MemRepo", 0);
    d = diagnosis("00000000000000d4", "shop", "disc/MemRepo", "find", "", 0);
    assert_int_equal(cmr_instr_diag_tree(cache, 0xB2, &d, 1, &t), 0);
    assert_true(t.error[0] != '\0');
    assert_int_equal(t.nodes.count, 0);
    cmr_instr_diag_tree_free(&t);
}

static bool owned_partition_0(uint64_t agent, const cmr_instr_agent_rec_t *r, void *ud)
{
    (void)agent;
    (void)ud;
    return r->partition == 0;
}

static void apply(cmr_instr_diag_t *q, const cmr_diagnosis_t *d)
{
    cmr_buf_t enc = {0};
    char err[256];
    assert_int_equal(cmr_msg_encode(CMR_MSG_DIAGNOSIS, d, &enc, err, sizeof err), CMR_WIRE_OK);
    assert_int_equal(cmr_instr_diag_apply(q, enc.data, enc.len, err, sizeof err), 1);
    cmr_buf_free(&enc);
}

static void test_queue(void **state)
{
    (void)state;
    /* agents 0xA1 and 0xB2 of "shop" (partition 0, from the test before); 0xC3 of "shop" on
     * partition 1 (not owned); 0xD4 of "other" */
    put_class(0xC3, 1, "shop", "disc/Service", 1);
    put_class(0xD4, 0, "other", "disc/Service", 1);
    cmr_instr_diag_t *q = cmr_instr_diag_new();
    assert_non_null(q);
    cmr_diagnosis_tree_t t;
    assert_int_equal(cmr_instr_diag_step(q, cache, owned_partition_0, NULL, 1, &t), 0);
    cmr_diagnosis_t d = diagnosis("00000000000000e1", "shop", "disc/Service", "handle", "", 0);
    apply(q, &d);
    uint64_t seen[4];
    size_t n = 0;
    int rc;
    while ((rc = cmr_instr_diag_step(q, cache, owned_partition_0, NULL, 1, &t)) == 1) {
        assert_true(n < 4);
        assert_string_equal(t.diagnosis_id, "00000000000000e1");
        seen[n++] = (uint64_t)t.agent_id;
        cmr_instr_diag_tree_free(&t);
    }
    assert_int_equal(rc, 0);
    assert_int_equal(n, 2); /* A1 and B2: C3 is not owned, D4 is of another environment */
    assert_true((seen[0] == 0xA1 && seen[1] == 0xB2) || (seen[0] == 0xB2 && seen[1] == 0xA1));
    /* once per revision */
    assert_int_equal(cmr_instr_diag_step(q, cache, owned_partition_0, NULL, 1, &t), 0);
    /* a new revision that lists one agent */
    uint8_t agents[8];
    cmr_put_be64(agents, 0xB2);
    d.revision = 2;
    d.agents = (cmr_bytes_t){agents, 8};
    apply(q, &d);
    assert_int_equal(cmr_instr_diag_step(q, cache, owned_partition_0, NULL, 1, &t), 1);
    assert_int_equal(t.agent_id, 0xB2);
    assert_int_equal(t.revision, 2);
    cmr_instr_diag_tree_free(&t);
    assert_int_equal(cmr_instr_diag_step(q, cache, owned_partition_0, NULL, 1, &t), 0);
    /* ended: nothing */
    d.revision = 3;
    d.state = CMR_DIAG_ENDED;
    d.end_reason = CMR_DIAG_END_STOPPED;
    apply(q, &d);
    assert_int_equal(cmr_instr_diag_step(q, cache, owned_partition_0, NULL, 1, &t), 0);
    cmr_instr_diag_free(q);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s CLASS-DIR\n", argv[0]);
        return 2;
    }
    class_dir = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cache_source),
        cmocka_unit_test(test_queue),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

/*
 * trust_bench.c - what the trust model costs the CMR, per class and per command
 * (docs/benchmarks.md, "Trust"): over every class of a jar (default Guava), in one run,
 *
 *   instrument  metadata extraction + rule decision (invocation sequence on every method)
 *               + building the instrumented class: the work the instrumenter does anyway;
 *   class hash  XXH3 of the bytes (cmr_class_hash), the instrumenter's check that a
 *               ClassLoaded's bytes are its class_hash;
 *   digest      BLAKE2b-256 of the original bytes (the Redefine's original_digest; the
 *               agent computes the same once per loaded class);
 *   encode      the Redefine encoded (what an unsigned command cost on the wire side);
 *   sign        the Redefine encoded, its payload digested and Ed25519-signed
 *               (cmr_command_wrap; sign - encode = the signature's own cost);
 *   verify      the agent's check of that envelope (cmr_verifier_check: payload digest,
 *               Ed25519 verification, replay window).
 *
 * Not a test (no pass/fail): prints microseconds per operation. Not part of CI.
 *
 * Usage: cp_trust_bench CMR-CONFIG [JAR] [REPEAT]
 *   CMR-CONFIG makes the key pair (cmr-config keygen); JAR defaults to
 *   /usr/share/java/guava.jar; every operation is repeated REPEAT times (default 3).
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cmr/buf.h"
#include "cmr/clock.h"
#include "cmr/command.h"
#include "cmr/ids.h"
#include "cmr/instr_meta.h"
#include "cmr/instr_probe.h"
#include "cmr/instr_rules.h"
#include "cmr/log.h"
#include "cmr/trust.h"
#include "cmr/wire.h"
#include "cp_support.h"

typedef struct totals {
    double instrument, hash, digest, encode, sign, verify; /* ns */
    size_t classes, instrumented, bytes, commands;
} totals_t;

static double now_ns(void)
{
    return (double)cmr_mono_ns();
}

static const cmr_instr_meta_t *no_types(const char *type, void *ud)
{
    (void)type;
    (void)ud;
    return NULL;
}

/* Reads a whole (small) file. malloc'd, NULL on failure. */
static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    cmr_buf_t b = {0};
    size_t got;
    do {
        got = cmr_buf_reserve(&b, 65536) ? fread(b.data + b.len, 1, b.cap - b.len - 1, f) : 0;
        b.len += got;
    } while (got > 0);
    fclose(f);
    *len = b.len;
    return (uint8_t *)cmr_buf_take(&b);
}

typedef struct bench {
    const cmr_environment_t *env;
    const cmr_signer_t *signer;
    cmr_verifier_t *verifier;
    int repeat;
    totals_t t;
} bench_t;

/* The trust operations on one instrumented class (its Redefine). */
static void bench_command(bench_t *b, const uint8_t *orig, size_t orig_len, const cmr_instr_built_t *built,
                          const char *name)
{
    uint8_t digest[CMR_TRUST_DIGEST_BYTES];
    cmr_trust_digest(orig, orig_len, digest);
    cmr_redefine_t r = {.request_id = 1,
                        .agent_id = 2,
                        .class_name = (char *)name,
                        .loader_id = 3,
                        .class_hash = (int64_t)cmr_class_hash(orig, orig_len),
                        .revision = 1,
                        .bytecode = {built->bytes, built->len},
                        .original_digest = {digest, sizeof digest}};
    r.methods.items = built->methods;
    r.methods.count = built->n_methods;
    char err[256], key_id[CMR_TRUST_KEY_ID_CHARS + 1];
    uint8_t sig[CMR_TRUST_SIGNATURE_BYTES];
    for (int i = 0; i < b->repeat; i++) {
        cmr_buf_t payload = {0};
        double t0 = now_ns();
        int ok = cmr_msg_encode(CMR_MSG_REDEFINE, &r, &payload, err, sizeof err) == CMR_WIRE_OK;
        double t1 = now_ns();
        cmr_buf_free(&payload);
        cmr_signed_command_t sc;
        double t2 = now_ns();
        ok = ok && cmr_command_wrap(b->signer, "bench", 600000, CMR_MSG_REDEFINE, &r, &payload, &sc, key_id, sig, err,
                                    sizeof err) == 0;
        double t3 = now_ns();
        cmr_envelope_t env = {
            .target_instance = sc.target_instance, .issued_ms = sc.issued_ms, .not_after_ms = sc.not_after_ms};
        memcpy(env.command_id, sc.command_id, sizeof env.command_id);
        memcpy(env.key_id, sc.key_id, sizeof env.key_id);
        memcpy(env.signature, sc.signature.data, sizeof env.signature);
        double t4 = now_ns();
        ok =
            ok && cmr_verifier_check(b->verifier, &env, sc.payload.data, sc.payload.len, cmr_wall_ms()) == CMR_TRUST_OK;
        double t5 = now_ns();
        cmr_buf_free(&payload);
        if (!ok) {
            fprintf(stderr, "trust_bench: %s: encode, sign or verify failed: %s\n", name, err);
            exit(1);
        }
        b->t.encode += t1 - t0;
        b->t.sign += t3 - t2;
        b->t.verify += t5 - t4;
        b->t.commands++;
    }
}

static void bench_class(bench_t *b, const uint8_t *bytes, size_t len)
{
    char err[256];
    volatile uint64_t sink = 0;
    uint8_t digest[CMR_TRUST_DIGEST_BYTES];
    b->t.classes++;
    b->t.bytes += len;
    for (int i = 0; i < b->repeat; i++) {
        double t0 = now_ns();
        sink ^= cmr_class_hash(bytes, len);
        double t1 = now_ns();
        cmr_trust_digest(bytes, len, digest);
        double t2 = now_ns();
        b->t.hash += t1 - t0;
        b->t.digest += t2 - t1;
    }
    (void)sink;
    cmr_instr_meta_t meta;
    cmr_instr_decision_t d;
    cmr_instr_built_t built = {0};
    double t0 = now_ns();
    for (int i = 0; i < b->repeat; i++) {
        if (cmr_instr_meta_extract(bytes, len, &meta, err, sizeof err) != 0)
            return;
        if (cmr_instr_decide(b->env, &meta, no_types, NULL, &d) != 0) {
            cmr_instr_meta_free(&meta);
            return;
        }
        int rc = cmr_instr_build(bytes, len, &meta, &d, &built, err, sizeof err);
        int usable = rc == 0 && built.n_methods > 0;
        if (i + 1 == b->repeat && usable)
            break; /* the last run's result is kept for the command */
        if (rc == 0)
            cmr_instr_built_free(&built);
        cmr_instr_decision_free(&d);
        cmr_instr_meta_free(&meta);
        if (!usable)
            return;
    }
    b->t.instrument += now_ns() - t0;
    b->t.instrumented++;
    bench_command(b, bytes, len, &built, meta.name);
    cmr_instr_built_free(&built);
    cmr_instr_decision_free(&d);
    cmr_instr_meta_free(&meta);
}

/* Every .class under dir, recursively. */
static void walk(bench_t *b, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[2048];
        cp_fmt(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(path, &st) != 0)
            continue;
        size_t n = strlen(e->d_name);
        if (S_ISDIR(st.st_mode)) {
            walk(b, path);
        } else if (n > 6 && strcmp(e->d_name + n - 6, ".class") == 0 && strcmp(e->d_name, "module-info.class")) {
            size_t len;
            uint8_t *bytes = slurp(path, &len);
            if (bytes)
                bench_class(b, bytes, len);
            free(bytes);
        }
    }
    closedir(d);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s CMR-CONFIG [JAR] [REPEAT]\n", argv[0]);
        return 2;
    }
    const char *jar = argc > 2 ? argv[2] : "/usr/share/java/guava.jar";
    int repeat = argc > 3 ? atoi(argv[3]) : 3;
    cmr_log_set_level(CMR_LOG_ERROR);
    char tmp[256], classes[300], key[300], err[256];
    if (cp_tmpdir(tmp, sizeof tmp) != 0 || cp_keys_make(argv[1], tmp) != 0)
        return 1;
    cp_fmt(classes, sizeof classes, "%s/classes", tmp);
    const char *unzip[] = {"/usr/bin/unzip", "-q", "-o", jar, "*.class", "-d", classes, NULL};
    if (cp_run(unzip, NULL) != 0) {
        fprintf(stderr, "trust_bench: cannot unzip %s\n", jar);
        cp_rmrf(tmp);
        return 1;
    }
    cp_fmt(key, sizeof key, "%s", cp_signing_key());
    cmr_signer_t *signer = cmr_signer_load(key, err, sizeof err);
    cmr_verifier_limits_t lim = {.max_skew_ms = 60000, .max_lifetime_ms = 3600000, .max_remembered = 10000000};
    cmr_verifier_t *verifier = cmr_verifier_new("bench", &lim);
    if (!signer || !verifier || cmr_verifier_add_key_file(verifier, cp_public_key(), err, sizeof err) != 0) {
        fprintf(stderr, "trust_bench: keys: %s\n", err);
        return 1;
    }
    cmr_sensor_assignment_t every = {
        .sensor = CMR_SENSOR_INVOCATION_SEQUENCE, .class_pattern = "*", .method_pattern = "*"};
    cmr_environment_t env = {.id = "bench", .name = "bench", .description = ""};
    env.assignments.items = &every;
    env.assignments.count = 1;
    bench_t b = {.env = &env, .signer = signer, .verifier = verifier, .repeat = repeat > 0 ? repeat : 1};
    walk(&b, classes);
    const totals_t *t = &b.t;
    double per_class = (double)t->classes * b.repeat, per_instr = (double)t->instrumented * b.repeat;
    double per_cmd = t->commands ? (double)t->commands : 1;
    printf("%s: %zu classes (%.1f KiB mean), %zu instrumented (invocation sequence on every method), %d runs each\n",
           jar, t->classes, t->classes ? (double)t->bytes / (double)t->classes / 1024 : 0, t->instrumented, b.repeat);
    printf("  per class:   instrument %8.1f us | class hash (XXH3) %6.2f us | digest (BLAKE2b-256) %6.2f us\n",
           per_instr ? t->instrument / per_instr / 1e3 : 0, t->hash / per_class / 1e3, t->digest / per_class / 1e3);
    printf("  per Redefine: encode %6.1f us | encode + sign (Ed25519) %6.1f us | verify %6.1f us\n",
           t->encode / per_cmd / 1e3, t->sign / per_cmd / 1e3, t->verify / per_cmd / 1e3);
    printf("  added by trust per instrumented class: %.1f us at the CMR (hash + digest + signature), %.1f us at the "
           "agent (digest + verify), against %.1f us to instrument\n",
           (t->hash + t->digest) / per_class / 1e3 + (t->sign - t->encode) / per_cmd / 1e3,
           t->digest / per_class / 1e3 + t->verify / per_cmd / 1e3, per_instr ? t->instrument / per_instr / 1e3 : 0);
    cmr_signer_free(signer);
    cmr_verifier_free(verifier);
    cp_rmrf(tmp);
    return 0;
}

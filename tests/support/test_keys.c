/*
 * test_keys.c - key pairs for tests (see test_keys.h).
 */
#include "test_keys.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int test_keys_make(test_keys_t *k)
{
    memset(k, 0, sizeof *k);
    char err[256], path[128];
    snprintf(k->dir, sizeof k->dir, "/tmp/cmr-test-keys-XXXXXX");
    if (!mkdtemp(k->dir) || cmr_trust_keygen(k->dir, "cmr", err, sizeof err) != 0) {
        fprintf(stderr, "test_keys: %s\n", k->dir[0] ? err : "mkdtemp failed");
        return -1;
    }
    snprintf(path, sizeof path, "%s/cmr.key", k->dir);
    k->signer = cmr_signer_load(path, err, sizeof err);
    k->verifier = cmr_verifier_new("instance", NULL);
    snprintf(path, sizeof path, "%s/cmr.pub", k->dir);
    if (!k->signer || !k->verifier || cmr_verifier_add_key_file(k->verifier, path, err, sizeof err) != 0) {
        fprintf(stderr, "test_keys: %s\n", err);
        test_keys_free(k);
        return -1;
    }
    return 0;
}

void test_keys_free(test_keys_t *k)
{
    cmr_signer_free(k->signer);
    cmr_verifier_free(k->verifier);
    k->signer = NULL;
    k->verifier = NULL;
    if (k->dir[0]) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", k->dir);
        if (system(cmd) != 0)
            fprintf(stderr, "test_keys: could not remove %s\n", k->dir);
        k->dir[0] = '\0';
    }
}

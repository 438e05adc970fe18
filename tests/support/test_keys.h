/*
 * test_keys.h - key pairs for tests of signed things (commands, class grants): each in a
 * new temporary directory, made with the project's own keygen, with its signer and a
 * verifier that pins only it.
 *
 * Ownership: test_keys_free removes the directory and frees the signer and verifier.
 */
#ifndef CMR_TEST_KEYS_H
#define CMR_TEST_KEYS_H

#include "cmr/trust.h"

typedef struct test_keys {
    char dir[64];
    cmr_signer_t *signer;
    cmr_verifier_t *verifier; /* for instance "instance", pinning this key alone */
} test_keys_t;

/* 0, or -1 with the reason on stderr. */
int test_keys_make(test_keys_t *k);
void test_keys_free(test_keys_t *k);

#endif

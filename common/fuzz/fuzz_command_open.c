/*
 * fuzz_command_open.c - libFuzzer target: what an attacker writes to an agent's command
 * topic goes through the agent's decoder and envelope verifier (cmr_command_open) without
 * a crash, an out-of-bounds access or a leak, and is never accepted: the fuzzer does not
 * know the secret key, so every input must be refused (a verdict other than OK).
 */
#include <stdint.h>
#include <stdlib.h>

#include "cmr/command.h"
#include "cmr/log.h"
#include "cmr/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A public key whose secret half nobody has (random bytes, fixed). */
#define PINNED "cmr-ed25519-public 3q2+7wAAAAD/////AAAAAN6tvu8AAAAA/////wAAAAA="
#define INSTANCE "0123456789abcdef0123456789abcdef"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static cmr_verifier_t *v;
    if (!v) {
        char err[256];
        cmr_log_set_level(CMR_LOG_OFF);
        cmr_wire_init();
        v = cmr_verifier_new(INSTANCE, NULL);
        if (!v || cmr_verifier_add_key_text(v, PINNED, err, sizeof err) != 0)
            abort();
    }
    cmr_msg_t msg;
    char err[256];
    if (cmr_msg_decode(data, size, &msg, err, sizeof err) != CMR_WIRE_OK)
        return 0;
    if (cmr_command_open(v, &msg, 1700000000000LL) == CMR_TRUST_OK)
        abort(); /* forged without the key: must never verify */
    cmr_msg_free(&msg);
    return 0;
}

/*
 * fuzz_wire_decode.c - libFuzzer target: any bytes given to the message decoder get a
 * clean rejection or a message; never a crash, an out-of-bounds access or a leak. A
 * message that decodes re-encodes to a canonical form that decodes to the same value.
 * (The input itself may be a valid but non-canonical encoding: over-long varints,
 * arrays split in several blocks.)
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/log.h"
#include "cmr/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready) {
        cmr_log_set_level(CMR_LOG_OFF);
        cmr_wire_init();
        ready = 1;
    }
    cmr_msg_t msg;
    char err[256];
    if (cmr_msg_decode(data, size, &msg, err, sizeof err) != CMR_WIRE_OK)
        return 0;
    cmr_buf_t once = {0}, twice = {0};
    cmr_msg_t back;
    if (cmr_msg_encode(msg.type, &msg.u, &once, err, sizeof err) != CMR_WIRE_OK ||
        cmr_msg_decode(once.data, once.len, &back, err, sizeof err) != CMR_WIRE_OK)
        abort();
    if (back.type != msg.type || cmr_msg_encode(back.type, &back.u, &twice, err, sizeof err) != CMR_WIRE_OK ||
        twice.len != once.len || memcmp(twice.data, once.data, once.len) != 0)
        abort();
    cmr_buf_free(&once);
    cmr_buf_free(&twice);
    cmr_msg_free(&back);
    cmr_msg_free(&msg);
    return 0;
}

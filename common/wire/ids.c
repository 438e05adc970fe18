/*
 * ids.c - hashes and random identifiers (see ids.h). Hashes are xxHash's XXH3-64.
 */
#include "cmr/ids.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include <errno.h>

uint64_t cmr_class_hash(const void *bytes, size_t len)
{
    return XXH3_64bits(bytes, len);
}

/* Hashes "a<sep1>b<sep2>c" without building the string. */
static uint64_t hash_parts(const char *a, const char *sep1, const char *b, const char *sep2, const char *c)
{
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, a, strlen(a));
    XXH3_64bits_update(&st, sep1, strlen(sep1));
    XXH3_64bits_update(&st, b, strlen(b));
    if (sep2) {
        XXH3_64bits_update(&st, sep2, strlen(sep2));
        XXH3_64bits_update(&st, c, strlen(c));
    }
    return XXH3_64bits_digest(&st);
}

uint64_t cmr_method_id(const char *class_name, const char *method_name, const char *descriptor)
{
    return hash_parts(class_name, ".", method_name, "", descriptor);
}

void cmr_async_completion_name(bool jakarta, const char **class_name, const char **method_name, const char **descriptor)
{
    *class_name = jakarta ? "jakarta/servlet/AsyncListener" : "javax/servlet/AsyncListener";
    *method_name = "onComplete";
    *descriptor = jakarta ? "(Ljakarta/servlet/AsyncEvent;)V" : "(Ljavax/servlet/AsyncEvent;)V";
}

uint64_t cmr_async_completion_id(bool jakarta)
{
    const char *c, *m, *d;
    cmr_async_completion_name(jakarta, &c, &m, &d);
    return cmr_method_id(c, m, d);
}

bool cmr_method_is_async_completion(uint64_t method_id)
{
    static _Atomic uint64_t ids[2]; /* computed once (a race computes the same value twice) */
    for (int jakarta = 0; jakarta < 2; jakarta++) {
        uint64_t id = atomic_load_explicit(&ids[jakarta], memory_order_relaxed);
        if (!id) {
            id = cmr_async_completion_id(jakarta);
            atomic_store_explicit(&ids[jakarta], id, memory_order_relaxed);
        }
        if (method_id == id)
            return true;
    }
    return false;
}

uint64_t cmr_agent_id(const char *agent_name, const char *hostname, const char *instance_id)
{
    return hash_parts(agent_name ? agent_name : "", "@", hostname ? hostname : "", "/", instance_id ? instance_id : "");
}

int cmr_random_bytes(void *out, size_t len)
{
    uint8_t *p = out;
    size_t got = 0;
    while (got < len) {
        ssize_t n = getrandom(p + got, len - got, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        got += (size_t)n;
    }
    for (size_t i = 0; i < len; i++)
        if (p[i])
            return 0;
    p[len - 1] = 1; /* all zero is the "invalid" id of W3C trace context */
    return 0;
}

void cmr_hex(const void *bytes, size_t len, char *buf)
{
    static const char digits[] = "0123456789abcdef";
    const uint8_t *p = bytes;
    for (size_t i = 0; i < len; i++) {
        buf[2 * i] = digits[p[i] >> 4];
        buf[2 * i + 1] = digits[p[i] & 15];
    }
    buf[2 * len] = '\0';
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int cmr_unhex(const char *hex, void *bytes, size_t len)
{
    uint8_t *p = bytes;
    if (strlen(hex) != 2 * len)
        return -1;
    for (size_t i = 0; i < len; i++) {
        int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        p[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

int cmr_id64_parse(const char *hex, size_t n, uint64_t *id)
{
    if (n != 16)
        return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < 16; i++) {
        int d = hexval(hex[i]);
        if (d < 0)
            return -1;
        v = v << 4 | (uint64_t)d;
    }
    *id = v;
    return 0;
}

int cmr_instance_id_new(char *buf, size_t len)
{
    uint8_t raw[16];
    if (len < 33 || cmr_random_bytes(raw, sizeof raw) != 0)
        return -1;
    cmr_hex(raw, sizeof raw, buf);
    return 0;
}

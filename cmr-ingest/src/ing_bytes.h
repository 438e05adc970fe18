/*
 * ing_bytes.h - big-endian key helpers (store keys sort numerically) and little-endian
 * value helpers shared by the cmr-ingest sources. Internal.
 */
#ifndef CMR_ING_BYTES_H
#define CMR_ING_BYTES_H

#include <stdint.h>

#include "cmr/event.h"

static inline void ing_put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

static inline uint64_t ing_be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return v;
}

static inline void ing_put_be32(uint8_t *p, uint32_t v)
{
    for (int i = 3; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

static inline uint32_t ing_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Signed values sort correctly when the sign bit is flipped. */
static inline void ing_put_be64s(uint8_t *p, int64_t v)
{
    ing_put_be64(p, (uint64_t)v ^ 0x8000000000000000ull);
}

static inline int64_t ing_be64s(const uint8_t *p)
{
    return (int64_t)(ing_be64(p) ^ 0x8000000000000000ull);
}

#endif

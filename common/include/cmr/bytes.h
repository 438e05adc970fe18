/*
 * bytes.h - byte order: load and store 16/32/64-bit integers at any address.
 *
 * Part of the toolbox (cmr_base). Big-endian for class files, store keys (so that keys
 * sort by their numbers) and network headers; little-endian for the event records the
 * probes write (event.h). Byte by byte, so they work at any alignment and compile to a
 * single load or store with a byte swap where the machine allows.
 */
#ifndef CMR_BYTES_H
#define CMR_BYTES_H

#include <stdint.h>

static inline uint16_t cmr_be16(const uint8_t *p)
{
    return (uint16_t)((unsigned)p[0] << 8 | p[1]);
}

static inline uint32_t cmr_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline uint64_t cmr_be64(const uint8_t *p)
{
    return (uint64_t)cmr_be32(p) << 32 | cmr_be32(p + 4);
}

static inline void cmr_put_be16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static inline void cmr_put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static inline void cmr_put_be64(uint8_t *p, uint64_t v)
{
    cmr_put_be32(p, (uint32_t)(v >> 32));
    cmr_put_be32(p + 4, (uint32_t)v);
}

static inline uint32_t cmr_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t cmr_le64(const uint8_t *p)
{
    return (uint64_t)cmr_le32(p) | (uint64_t)cmr_le32(p + 4) << 32;
}

static inline void cmr_put_le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static inline void cmr_put_le64(uint8_t *p, uint64_t v)
{
    cmr_put_le32(p, (uint32_t)v);
    cmr_put_le32(p + 4, (uint32_t)(v >> 32));
}

/* Signed 64-bit values stored big-endian so that they sort by value (sign bit flipped):
 * timestamps in store keys. */
static inline void cmr_put_be64_ordered(uint8_t *p, int64_t v)
{
    cmr_put_be64(p, (uint64_t)v ^ (1ULL << 63));
}

static inline int64_t cmr_be64_ordered(const uint8_t *p)
{
    return (int64_t)(cmr_be64(p) ^ (1ULL << 63));
}

/* Reads an unsigned LEB128 varint at *p (before end) and moves *p past it: 0, or -1 when
 * it is cut short or holds more than 64 bits (*p then undefined). cmr_buf_put_varint
 * writes them. */
static inline int cmr_get_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    uint64_t r = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
        if (*p == end)
            return -1;
        uint8_t b = *(*p)++;
        if (shift == 63 && (b & 0x7e))
            return -1; /* more than 64 bits */
        r |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = r;
            return 0;
        }
    }
    return -1;
}

#endif

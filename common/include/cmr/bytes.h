/*
 * bytes.h - byte order: load and store 16/32/64-bit integers at any address.
 *
 * Part of the toolbox (cmr_base). Big-endian for class files, store keys (so that keys
 * sort by their numbers) and network headers; little-endian for the event records the
 * probes write (event.h). They work at any alignment.
 */
#ifndef CMR_BYTES_H
#define CMR_BYTES_H

#include <stdint.h>
#include <string.h>

/* On a little-endian machine with GCC or Clang, a load or store is a memcpy (one unaligned
 * move) and, for big endian, a byte swap: spelled byte by byte, GCC 12 assembled some of
 * them from single bytes and stored partial words that a wider load then had to wait for. */
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define CMR_BYTES_NATIVE_LE 1
#endif

static inline uint16_t cmr_be16(const uint8_t *p)
{
#ifdef CMR_BYTES_NATIVE_LE
    uint16_t v;
    memcpy(&v, p, 2);
    return __builtin_bswap16(v);
#else
    return (uint16_t)((unsigned)p[0] << 8 | p[1]);
#endif
}

static inline uint32_t cmr_be32(const uint8_t *p)
{
#ifdef CMR_BYTES_NATIVE_LE
    uint32_t v;
    memcpy(&v, p, 4);
    return __builtin_bswap32(v);
#else
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
#endif
}

static inline uint64_t cmr_be64(const uint8_t *p)
{
#ifdef CMR_BYTES_NATIVE_LE
    uint64_t v;
    memcpy(&v, p, 8);
    return __builtin_bswap64(v);
#else
    return (uint64_t)cmr_be32(p) << 32 | cmr_be32(p + 4);
#endif
}

static inline void cmr_put_be16(uint8_t *p, uint16_t v)
{
#ifdef CMR_BYTES_NATIVE_LE
    v = __builtin_bswap16(v);
    memcpy(p, &v, 2);
#else
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
#endif
}

static inline void cmr_put_be32(uint8_t *p, uint32_t v)
{
#ifdef CMR_BYTES_NATIVE_LE
    v = __builtin_bswap32(v);
    memcpy(p, &v, 4);
#else
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
#endif
}

static inline void cmr_put_be64(uint8_t *p, uint64_t v)
{
#ifdef CMR_BYTES_NATIVE_LE
    v = __builtin_bswap64(v);
    memcpy(p, &v, 8);
#else
    cmr_put_be32(p, (uint32_t)(v >> 32));
    cmr_put_be32(p + 4, (uint32_t)v);
#endif
}

static inline uint32_t cmr_le32(const uint8_t *p)
{
#ifdef CMR_BYTES_NATIVE_LE
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
#else
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
#endif
}

static inline uint64_t cmr_le64(const uint8_t *p)
{
#ifdef CMR_BYTES_NATIVE_LE
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
#else
    return (uint64_t)cmr_le32(p) | (uint64_t)cmr_le32(p + 4) << 32;
#endif
}

static inline void cmr_put_le32(uint8_t *p, uint32_t v)
{
#ifdef CMR_BYTES_NATIVE_LE
    memcpy(p, &v, 4);
#else
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
#endif
}

static inline void cmr_put_le64(uint8_t *p, uint64_t v)
{
#ifdef CMR_BYTES_NATIVE_LE
    memcpy(p, &v, 8);
#else
    cmr_put_le32(p, (uint32_t)v);
    cmr_put_le32(p + 4, (uint32_t)(v >> 32));
#endif
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

/*
 * histogram.c - log-linear histograms with sparse storage. See cmr/histogram.h.
 */
#include "cmr/histogram.h"

#include <stdlib.h>
#include <string.h>

#include "cmr/bytes.h"

#define SUB (1u << CMR_HIST_SUB_BITS) /* buckets per power of two */

uint16_t cmr_hist_bucket(uint64_t v)
{
    if (v < 2 * SUB)
        return (uint16_t)v;
    unsigned e = 63u - (unsigned)__builtin_clzll(v); /* >= CMR_HIST_SUB_BITS + 1 */
    unsigned shift = e - CMR_HIST_SUB_BITS;
    return (uint16_t)(shift * SUB + (unsigned)(v >> shift));
}

uint64_t cmr_hist_bucket_low(uint16_t bucket)
{
    if (bucket < 2 * SUB)
        return bucket;
    unsigned shift = bucket / SUB - 1, sub = bucket % SUB + SUB;
    return (uint64_t)sub << shift;
}

uint64_t cmr_hist_bucket_high(uint16_t bucket)
{
    if (bucket < 2 * SUB)
        return bucket;
    unsigned shift = bucket / SUB - 1, sub = bucket % SUB + SUB;
    return (((uint64_t)sub + 1) << shift) - 1; /* sub + 1 <= 128: no overflow below 2^64 */
}

/* Index of the first bin whose bucket is >= b. */
static size_t find_bin(const cmr_hist_t *h, uint16_t b)
{
    size_t lo = 0, hi = h->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (h->bins[mid].bucket < b)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void note_value(cmr_hist_t *h, uint64_t v, uint64_t n)
{
    if (h->count == 0 || v < h->min)
        h->min = v;
    if (h->count == 0 || v > h->max)
        h->max = v;
    h->count += n;
    h->sum += (double)v * (double)n;
}

int cmr_hist_record(cmr_hist_t *h, uint64_t v, uint64_t n)
{
    if (n == 0)
        return 0;
    uint16_t b = cmr_hist_bucket(v);
    size_t i = h->last < h->n && h->bins[h->last].bucket == b ? h->last : find_bin(h, b);
    if (i == h->n || h->bins[i].bucket != b) {
        if (CMR_ARRAY_GROW(h->bins, h->cap, h->n + 1) != 0)
            return -1;
        memmove(h->bins + i + 1, h->bins + i, (h->n - i) * sizeof *h->bins);
        h->bins[i] = (cmr_hist_bin_t){b, 0};
        h->n++;
    }
    h->bins[i].count += n;
    h->last = i;
    note_value(h, v, n);
    return 0;
}

int cmr_hist_reserve(cmr_hist_t *h, size_t extra)
{
    return CMR_ARRAY_GROW(h->bins, h->cap, h->n + extra);
}

int cmr_hist_record_sorted(cmr_hist_t *h, const uint64_t *v, size_t n)
{
    if (n == 0)
        return 0;
    /* Room for a new bin per value first, so that nothing below can fail half way. */
    cmr_hist_bin_t stack_new[32], *fresh = n <= 32 ? stack_new : malloc(n * sizeof *fresh);
    if (!fresh || cmr_hist_reserve(h, n) != 0) {
        if (fresh != stack_new)
            free(fresh);
        return -1;
    }
    /* Forward: counts of buckets that have a bin are added in place; the others are noted
     * and inserted from the back afterwards, so that only the bins above the lowest new
     * bucket move. */
    size_t nfresh = 0, i = 0;
    double sum = 0;
    for (size_t k = 0; k < n;) {
        uint16_t b = cmr_hist_bucket(v[k]);
        uint64_t c = 0;
        for (uint64_t high = cmr_hist_bucket_high(b); k < n && v[k] <= high; k++, c++)
            sum += (double)v[k];
        while (i < h->n && h->bins[i].bucket < b)
            i++;
        if (i < h->n && h->bins[i].bucket == b)
            h->bins[i].count += c;
        else
            fresh[nfresh++] = (cmr_hist_bin_t){b, c};
    }
    size_t old = h->n, w = h->n + nfresh;
    for (size_t f = nfresh; f-- > 0;) {
        while (old > 0 && h->bins[old - 1].bucket > fresh[f].bucket)
            h->bins[--w] = h->bins[--old];
        h->bins[--w] = fresh[f];
    }
    h->n += nfresh;
    if (fresh != stack_new)
        free(fresh);
    if (h->count == 0 || v[0] < h->min)
        h->min = v[0];
    if (h->count == 0 || v[n - 1] > h->max)
        h->max = v[n - 1];
    h->count += n;
    h->sum += sum;
    h->last = 0;
    return 0;
}

int cmr_hist_merge(cmr_hist_t *dst, const cmr_hist_t *src)
{
    if (src->count == 0)
        return 0;
    /* Merge the two sorted bin lists into a new array. */
    size_t cap = dst->n + src->n;
    cmr_hist_bin_t *out = NULL;
    size_t ocap = 0;
    if (cmr_array_grow(&out, &ocap, cap, sizeof *out, 8) != 0)
        return -1;
    size_t i = 0, j = 0, n = 0;
    while (i < dst->n || j < src->n) {
        if (j == src->n || (i < dst->n && dst->bins[i].bucket < src->bins[j].bucket))
            out[n++] = dst->bins[i++];
        else if (i == dst->n || src->bins[j].bucket < dst->bins[i].bucket)
            out[n++] = src->bins[j++];
        else {
            out[n] = dst->bins[i++];
            out[n++].count += src->bins[j++].count;
        }
    }
    free(dst->bins);
    dst->bins = out;
    dst->n = n;
    dst->cap = ocap;
    if (dst->count == 0 || src->min < dst->min)
        dst->min = src->min;
    if (dst->count == 0 || src->max > dst->max)
        dst->max = src->max;
    dst->count += src->count;
    dst->sum += src->sum;
    return 0;
}

uint64_t cmr_hist_quantile(const cmr_hist_t *h, double q)
{
    if (h->count == 0)
        return 0;
    if (q <= 0)
        return h->min;
    if (q >= 1)
        return h->max;
    uint64_t rank = (uint64_t)(q * (double)h->count);
    if ((double)rank < q * (double)h->count)
        rank++; /* ceil */
    if (rank == 0)
        rank = 1;
    uint64_t seen = 0;
    for (size_t i = 0; i < h->n; i++) {
        seen += h->bins[i].count;
        if (seen >= rank) {
            uint64_t lo = cmr_hist_bucket_low(h->bins[i].bucket), hi = cmr_hist_bucket_high(h->bins[i].bucket);
            uint64_t v = lo + (hi - lo) / 2;
            return v < h->min ? h->min : v > h->max ? h->max : v;
        }
    }
    return h->max;
}

void cmr_hist_reset(cmr_hist_t *h)
{
    h->n = 0;
    h->count = h->min = h->max = 0;
    h->sum = 0;
}

void cmr_hist_free(cmr_hist_t *h)
{
    free(h->bins);
    *h = (cmr_hist_t){0};
}

/* --- encoding ----------------------------------------------------------------------- */


void cmr_hist_encode(const cmr_hist_t *h, cmr_buf_t *out)
{
    cmr_buf_put_varint(out, h->count);
    cmr_buf_put_varint(out, h->count ? h->min : 0);
    cmr_buf_put_varint(out, h->count ? h->max : 0);
    uint64_t bits;
    memcpy(&bits, &h->sum, sizeof bits);
    uint8_t sum[8];
    cmr_put_le64(sum, bits);
    cmr_buf_put(out, sum, sizeof sum);
    cmr_buf_put_varint(out, h->n);
    uint16_t prev = 0;
    for (size_t i = 0; i < h->n; i++) {
        cmr_buf_put_varint(out, (uint64_t)(h->bins[i].bucket - prev));
        cmr_buf_put_varint(out, h->bins[i].count);
        prev = h->bins[i].bucket;
    }
}

int cmr_hist_decode(cmr_hist_t *h, const uint8_t *p, size_t len)
{
    const uint8_t *end = p + len;
    uint64_t count, min, max, nbins;
    cmr_hist_reset(h);
    if (cmr_get_varint(&p, end, &count) || cmr_get_varint(&p, end, &min) || cmr_get_varint(&p, end, &max) ||
        (size_t)(end - p) < 8)
        goto bad;
    uint64_t bits = cmr_le64(p);
    p += 8;
    double sum;
    memcpy(&sum, &bits, sizeof sum);
    if (cmr_get_varint(&p, end, &nbins) || nbins > CMR_HIST_BUCKETS || nbins > (uint64_t)(end - p) / 2 ||
        (count == 0) != (nbins == 0) || min > max)
        goto bad;
    if (cmr_array_grow(&h->bins, &h->cap, (size_t)nbins, sizeof *h->bins, 8) != 0)
        goto bad;
    uint64_t bucket = 0, total = 0;
    for (uint64_t i = 0; i < nbins; i++) {
        uint64_t delta, c;
        if (cmr_get_varint(&p, end, &delta) || cmr_get_varint(&p, end, &c) || c == 0 || (i > 0 && delta == 0))
            goto bad;
        if (delta >= CMR_HIST_BUCKETS - bucket || total + c < total) /* also: no wrap-around */
            goto bad;
        bucket += delta;
        total += c;
        h->bins[h->n++] = (cmr_hist_bin_t){(uint16_t)bucket, c};
    }
    if (p != end || total != count ||
        (count && (cmr_hist_bucket(min) != h->bins[0].bucket || cmr_hist_bucket(max) != h->bins[h->n - 1].bucket)))
        goto bad;
    h->count = count;
    h->min = min;
    h->max = max;
    h->sum = sum;
    return 0;
bad:
    cmr_hist_reset(h);
    return -1;
}

/* bitset.h: a set of small integers in 64-bit words, walked in time proportional to its words and members, not to what it could hold: the server's functions with calls queued or batches in flight. */
#ifndef SRPC_BITSET_H
#define SRPC_BITSET_H

#include <stdint.h>

#define SRPC_BITSET_WORDS(n) (((n) + 63u) / 64u)

static inline void srpc_bitset_add(uint64_t *w, uint32_t i) { w[i >> 6] |= 1ull << (i & 63); }
static inline void srpc_bitset_del(uint64_t *w, uint32_t i) { w[i >> 6] &= ~(1ull << (i & 63)); }
static inline int srpc_bitset_has(const uint64_t *w, uint32_t i) { return (int)(w[i >> 6] >> (i & 63)) & 1; }
/* Adds i when on, else removes it. */
static inline void srpc_bitset_put(uint64_t *w, uint32_t i, int on)
{
    if (on)
        srpc_bitset_add(w, i);
    else
        srpc_bitset_del(w, i);
}

/* The smallest member >= from and < end (end <= 64 * the set's words), or -1. */
static inline int64_t srpc_bitset_next(const uint64_t *w, uint32_t from, uint32_t end)
{
    if (from >= end)
        return -1;
    uint32_t wi = from >> 6;
    uint64_t bits = w[wi] & (~0ull << (from & 63));
    for (;;) {
        if (bits) {
            const uint32_t i = (wi << 6) + (uint32_t)__builtin_ctzll(bits);
            return i < end ? (int64_t)i : -1;
        }
        if ((++wi << 6) >= end)
            return -1;
        bits = w[wi];
    }
}

/* Walks the members i of w in [0, n) starting at `start` and wrapping around: start, start + 1,
 * ..., n - 1, 0, ..., start - 1 (start < n, or 0). The body may remove members (one it adds may
 * or may not be visited), `continue` and `return`; it may not `break` (that acts as continue). */
#define SRPC_BITSET_FOR_FROM(w, n, start, i)                                                        \
    for (uint32_t i##_pass = 0, i##_lo = (start), i##_hi = (n); i##_pass < 2;                       \
         i##_pass++, i##_hi = i##_lo, i##_lo = 0)                                                   \
        for (int64_t i##_at = srpc_bitset_next((w), i##_lo, i##_hi); i##_at >= 0;                  \
             i##_at = srpc_bitset_next((w), (uint32_t)i##_at + 1, i##_hi))                          \
            for (uint32_t i = (uint32_t)i##_at, i##_once = 1; i##_once; i##_once = 0)

#endif /* SRPC_BITSET_H */

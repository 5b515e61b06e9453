/* replay.h: a window of counters taken (versions 4 and 5: a sender's, a session's direction): the highest counter taken and the SRPC_AUTH_WINDOW - 1 below it, a bit each, in a ring. The owner's thread alone. */
#ifndef SRPC_REPLAY_H
#define SRPC_REPLAY_H

#include <stdint.h>
#include <string.h>

#include "core/tunables.h"

#define SRPC_REPLAY_WORDS (SRPC_AUTH_WINDOW / 64)
_Static_assert(SRPC_AUTH_WINDOW % 64 == 0 && SRPC_AUTH_WINDOW >= 64, "the window is whole 64-bit words");

/* A ring, as RFC 6479 has it: counter c's bit is c mod SRPC_AUTH_WINDOW, set when taken; moving
 * the top up clears the places it passes, so a datagram in order costs a word or two, never a
 * shift of the whole window. All zero: nothing taken (counter 0 is never sent). */
typedef struct srpc_replay {
    uint64_t top;
    uint64_t bits[SRPC_REPLAY_WORDS];
} srpc_replay_t;

/* A ring of bits by counter: c's bit is c mod nbits (a multiple of 64). Shared by this window and a
 * line's req_ids (server/sessions.h). */
static inline int srpc_ring_bit(const uint64_t *bits, uint32_t nbits, uint64_t c)
{
    const unsigned i = (unsigned)(c % nbits);
    return (int)((bits[i / 64] >> (i % 64)) & 1);
}

static inline void srpc_ring_set(uint64_t *bits, uint32_t nbits, uint64_t c)
{
    const unsigned i = (unsigned)(c % nbits);
    bits[i / 64] |= 1ull << (i % 64);
}

/* Clears the places of the n counters from first on (n >= nbits: all of them), a word at a time. */
static inline void srpc_ring_clear(uint64_t *bits, uint32_t nbits, uint64_t first, uint64_t n)
{
    if (n >= nbits) {
        memset(bits, 0, nbits / 8);
        return;
    }
    while (n) {
        const unsigned i = (unsigned)(first % nbits), b = i % 64;
        const uint64_t take = 64 - b < n ? 64 - b : n;
        bits[i / 64] &= ~(take == 64 ? ~0ull : ((1ull << take) - 1) << b);
        first += take;
        n -= take;
    }
}

/* 1 when counter c may still be taken: not 0, not taken, not behind the window. */
static inline int srpc_replay_fresh(const srpc_replay_t *w, uint64_t c)
{
    if (c == 0)
        return 0;
    if (c > w->top)
        return 1;
    return w->top - c < SRPC_AUTH_WINDOW && !srpc_ring_bit(w->bits, SRPC_AUTH_WINDOW, c);
}

/* Takes counter c: 0, or -1 when it may not be (srpc_replay_fresh). */
static inline int srpc_replay_take(srpc_replay_t *w, uint64_t c)
{
    if (!srpc_replay_fresh(w, c))
        return -1;
    if (c > w->top) {
        srpc_ring_clear(w->bits, SRPC_AUTH_WINDOW, w->top + 1, c - w->top);
        w->top = c;
    }
    srpc_ring_set(w->bits, SRPC_AUTH_WINDOW, c);
    return 0;
}

#endif

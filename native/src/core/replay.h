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

static inline int srpc_replay_bit(const uint64_t *bits, uint64_t c)
{
    const unsigned i = (unsigned)(c % SRPC_AUTH_WINDOW);
    return (int)((bits[i / 64] >> (i % 64)) & 1);
}

/* Clears the places of the n counters from first on (n >= the window: all of them). */
static inline void srpc_replay_clear(uint64_t *bits, uint64_t first, uint64_t n)
{
    if (n >= SRPC_AUTH_WINDOW) {
        memset(bits, 0, SRPC_REPLAY_WORDS * sizeof(uint64_t));
        return;
    }
    while (n) {
        const unsigned i = (unsigned)(first % SRPC_AUTH_WINDOW), b = i % 64;
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
    return w->top - c < SRPC_AUTH_WINDOW && !srpc_replay_bit(w->bits, c);
}

/* Takes counter c: 0, or -1 when it may not be (srpc_replay_fresh). */
static inline int srpc_replay_take(srpc_replay_t *w, uint64_t c)
{
    if (!srpc_replay_fresh(w, c))
        return -1;
    if (c > w->top) {
        srpc_replay_clear(w->bits, w->top + 1, c - w->top);
        w->top = c;
    }
    const unsigned i = (unsigned)(c % SRPC_AUTH_WINDOW);
    w->bits[i / 64] |= 1ull << (i % 64);
    return 0;
}

#endif

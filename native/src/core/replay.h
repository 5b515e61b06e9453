/* replay.h: a window of counters taken (versions 4 and 5: a sender's, a session's direction): the highest counter taken and the SRPC_AUTH_WINDOW - 1 below it, a bit each. The owner's thread alone. */
#ifndef SRPC_REPLAY_H
#define SRPC_REPLAY_H

#include <stdint.h>
#include <string.h>

#include "core/tunables.h"

#define SRPC_REPLAY_WORDS (SRPC_AUTH_WINDOW / 64)
_Static_assert(SRPC_AUTH_WINDOW % 64 == 0 && SRPC_AUTH_WINDOW >= 64, "the window is whole 64-bit words");

/* Bit i of bits is counter top - i (i < SRPC_AUTH_WINDOW), set when taken. All zero: nothing
 * taken (counter 0 is never sent). */
typedef struct srpc_replay {
    uint64_t top;
    uint64_t bits[SRPC_REPLAY_WORDS];
} srpc_replay_t;

/* Moves the window up by s (the new top is s above the old): bit i becomes bit i + s. */
static inline void srpc_replay_shift(uint64_t *bits, uint64_t s)
{
    if (s >= SRPC_AUTH_WINDOW) {
        memset(bits, 0, SRPC_REPLAY_WORDS * sizeof(uint64_t));
        return;
    }
    const unsigned w = (unsigned)(s / 64), b = (unsigned)(s % 64);
    for (int i = SRPC_REPLAY_WORDS - 1; i >= 0; i--) {
        uint64_t v = i - (int)w >= 0 ? bits[i - w] << b : 0;
        if (b && i - (int)w - 1 >= 0)
            v |= bits[i - w - 1] >> (64 - b);
        bits[i] = v;
    }
}

/* 1 when counter c may still be taken: not 0, not taken, not behind the window. */
static inline int srpc_replay_fresh(const srpc_replay_t *w, uint64_t c)
{
    if (c == 0)
        return 0;
    if (c > w->top)
        return 1;
    const uint64_t off = w->top - c;
    return off < SRPC_AUTH_WINDOW && !(w->bits[off / 64] & (1ull << (off % 64)));
}

/* Takes counter c: 0, or -1 when it may not be (srpc_replay_fresh). */
static inline int srpc_replay_take(srpc_replay_t *w, uint64_t c)
{
    if (!srpc_replay_fresh(w, c))
        return -1;
    if (c > w->top) {
        srpc_replay_shift(w->bits, c - w->top);
        w->top = c;
        w->bits[0] |= 1;
        return 0;
    }
    const uint64_t off = w->top - c;
    w->bits[off / 64] |= 1ull << (off % 64);
    return 0;
}

#endif

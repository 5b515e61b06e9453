/* faults.h: a fault injector for one direction of a socket (testing builds): drops, duplicates, holds back and corrupts datagrams with set probabilities. */
#ifndef SRPC_FAULTS_H
#define SRPC_FAULTS_H

#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "splitrpc_tools.h"

/* The injector is a pipe: datagrams go in (push), each is drawn a fate, and what comes out
 * waits in a FIFO of private copies until taken (pop). Per datagram, four independent draws
 * from a seeded PRNG (splitmix64, the same sequence for the same seed), in this order:
 *   drop     (p drop):    it never comes out;
 *   corrupt  (p corrupt): one random bit of its first min(len, SRPC_HDR_LEN) bytes (the
 *                         control header) is flipped in the copy; the caller's bytes are kept;
 *   reorder  (p reorder): when nothing is held back already, it is held back and comes out
 *                         right after the next datagram pushed, or at srpc_faults_release();
 *   dup      (p dup):     (not when held back) it comes out twice in a row.
 * A datagram held back is never lost: release() puts it out, discard() frees and counts it.
 * Thread rules: every function but create/destroy takes the injector's mutex, so a TX
 * injector may be shared by all the threads that send on a socket. */

typedef struct srpc_faults srpc_faults_t;

/* A datagram that came out: its bytes (header, then data), and the address and flags that
 * went in with it. Owned by whoever popped it: free() it. */
typedef struct srpc_fault_dgram {
    struct srpc_fault_dgram *next; /* the FIFO's link */
    uint32_t len;
    int flags;                     /* msg_flags as received (MSG_TRUNC), 0 for TX */
    socklen_t addrlen;             /* 0: no address (a connected socket) */
    struct sockaddr_storage addr;
    uint8_t bytes[];
} srpc_fault_dgram_t;

/* 0 when every probability is a number in [0, 1], else -EINVAL (also for NULL). */
int srpc_faults_cfg_check(const srpc_faults_cfg_t *cfg);

/* Creates an injector with cfg's probabilities (copied) and the PRNG seeded with seed.
 * Returns 0, -EINVAL (srpc_faults_cfg_check, NULL out) or -ENOMEM. */
int srpc_faults_create(const srpc_faults_cfg_t *cfg, uint64_t seed, srpc_faults_t **out);

/* Frees the injector and what it still holds, with no counting (see discard). NULL is fine.
 * No other call may be running on it. */
void srpc_faults_destroy(srpc_faults_t *f);

/* Pushes one datagram of len bytes, gathered from iov (n pieces, at least len bytes in all),
 * with its address (addr NULL or addrlen 0: none; at most sizeof(struct sockaddr_storage))
 * and flags. Copies what it keeps; the caller's buffers are only read. Returns 0, or -ENOMEM
 * (the datagram is then counted as discarded). Any thread. */
int srpc_faults_push(srpc_faults_t *f, const struct iovec *iov, int n, uint32_t len,
                     const struct sockaddr *addr, socklen_t addrlen, int flags);

/* Takes the oldest datagram that came out, or NULL when none waits. The caller frees it.
 * Any thread. */
srpc_fault_dgram_t *srpc_faults_pop(srpc_faults_t *f);

/* 1 when the next send is refused as by a full queue (probability cfg.full, counted), else 0;
 * draws nothing where cfg.full is 0. Any thread. */
int srpc_faults_refuse(srpc_faults_t *f);

/* Puts the datagram held back (if any) out at the end of the FIFO. Any thread. */
void srpc_faults_release(srpc_faults_t *f);

/* How many datagrams wait to be popped (the one held back not included). Any thread. */
unsigned srpc_faults_pending(srpc_faults_t *f);

/* Frees the datagram held back and every one waiting in the FIFO, counting them as
 * discarded (a socket that closes). Any thread. */
void srpc_faults_discard(srpc_faults_t *f);

/* Counts n datagrams as discarded (popped but the socket would not take them). Any thread. */
void srpc_faults_count_discarded(srpc_faults_t *f, uint64_t n);

/* Copies the counters. Any thread. */
void srpc_faults_counts(srpc_faults_t *f, srpc_fault_counts_t *out);

#endif

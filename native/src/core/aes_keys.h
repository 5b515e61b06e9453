/* aes_keys.h: AES-256-GCM keys expanded once (libsodium's beforenm: the key schedule and GHASH's powers of H) and kept per thread for the next datagrams of their session, so that a version 5 datagram pays only for its bytes. */
#ifndef SRPC_AES_KEYS_H
#define SRPC_AES_KEYS_H

#include <stdint.h>

#define SRPC_AES_KEYS_PER_THREAD 8 /* a client's few sessions (two directions each), a server's busiest */

/* The expanded state of key (32 bytes), from this thread's cache, expanded now when it is not
 * there (the least recently used one is wiped and replaced). NULL when AES-256-GCM cannot be used
 * (core/sodium.h's aes) or memory runs out.
 * Thread rules: the cache is the calling thread's own (no lock); the pointer is valid until this
 * thread's next call. An expanded key stays in the thread's memory until it is replaced or
 * srpc_aes_keys_wipe is called, and is wiped when the thread ends. */
const void *srpc_aes_state(const uint8_t key[32]);

/* Wipes and empties the calling thread's cache. */
void srpc_aes_keys_wipe(void);

#endif

/* session_data.h: what version 5's handshake (session.c) and its data datagrams' sealing (session_data.c) share, private to core/: the tag and nonce sizes of the suites, and the COOKIE's tag (made with the data path's pieced AEAD). */
#ifndef SRPC_SESSION_DATA_H
#define SRPC_SESSION_DATA_H

#include <stdint.h>

#include "core/session.h"

#define TAG_LEN 16
#define NONCE_LEN 12
#define FLAGS_KNOWN SRPC_V5_FLAGS_KNOWN
#define AEGIS_TAG_LEN 32
#define AEGIS_NONCE_LEN 16
#define AEGIS_KEY_LEN 16

/* The COOKIE's tag: ChaCha20-Poly1305 under k and nonce, associated data the INIT's mac1 (16
 * bytes), ciphertext the SRPC_V5_COOKIE_LEN_RAW bytes at box. Any thread. */
void srpc_v5_cookie_tag(const uint8_t k[SRPC_V5_KEY_LEN], const uint8_t nonce[NONCE_LEN], const uint8_t mac1[TAG_LEN],
                        const uint8_t *box, uint8_t tag[TAG_LEN]);

#endif

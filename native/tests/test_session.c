/* test_session.c: protocol version 5's handshake and data datagrams (core/session.c) against docs/PROTOCOL-v5.md's worked example (its bytes made by tests/foreign_v5.py over OpenSSL's ChaCha20-Poly1305 and AES-256-GCM, through the `cryptography` package), libsodium's own AEADs (AES-256-GCM's expanded keys kept per thread, core/aes_keys.c), and hostile input: every one-bit change refused, replays, low-order keys, wrong answers. */
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "core/aes_keys.h"
#include "core/replay.h"
#include "core/session.h"

/* The worked example (docs/PROTOCOL-v5.md), as tests/foreign_v5.py makes it (psk 00..1f, key 7,
 * e_c_priv 40..5f, e_s_priv 60..7f, time 1764331200000; EX_INIT_COOKIE: handshake id
 * 0x010203040508 with the cookie a0..af; EX_INIT_RESUME: handshake id 0x010203040509 following
 * the first session). */
static const uint8_t EX_INIT[126] = {0xa5, 0x53, 0x00, 0x00, 0x66, 0x98, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x68, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07, 0x79, 0xa6, 0x31, 0xee, 0xde, 0x1b, 0xf9, 0xc9, 0x8f, 0x12, 0x03, 0x2c, 0xde, 0xad, 0xd0, 0xe7, 0xa0, 0x79, 0x39, 0x8f, 0xc7, 0x86, 0xb8, 0x8c, 0xc8, 0x46, 0xec, 0x89, 0xaf, 0x85, 0xa5, 0x1a, 0x00, 0x00, 0x01, 0x9a, 0xca, 0x55, 0x9e, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xb0, 0xfe, 0x18, 0x42, 0x6a, 0x51, 0xa9, 0xc3, 0x25, 0xa4, 0xdc, 0x69, 0x5e, 0x73, 0x39, 0xd9, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
static const uint8_t EX_ACCEPT[86] = {0xa5, 0x54, 0x00, 0x00, 0x40, 0x7f, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x67, 0x5d, 0xd5, 0x74, 0xed, 0x77, 0x89, 0x31, 0x0b, 0x3d, 0x2e, 0x76, 0x81, 0xf3, 0x79, 0x0b, 0x46, 0x6c, 0x77, 0x3b, 0x15, 0x21, 0xfe, 0xcf, 0x36, 0x57, 0x79, 0x58, 0x37, 0x1e, 0xa5, 0x2f, 0x00, 0x00, 0x00, 0x00, 0xe3, 0xee, 0xf9, 0xe0, 0x60, 0xd0, 0x27, 0xab, 0x66, 0x1a, 0xdf, 0x61, 0xf9, 0x25, 0xa3, 0x94};
static const uint8_t EX_C2S[32] = {0xd3, 0x45, 0xbd, 0x70, 0xc6, 0xac, 0x76, 0x79, 0x17, 0x6d, 0xc5, 0xeb, 0xd8, 0x1a, 0x0f, 0xc3, 0xb4, 0xf1, 0xa4, 0xa6, 0xb1, 0xa8, 0x8a, 0x46, 0x32, 0xf5, 0x9b, 0xf6, 0x15, 0xc4, 0x6b, 0x18};
static const uint8_t EX_S2C[32] = {0xaf, 0x3e, 0x77, 0x76, 0x30, 0xf5, 0xc6, 0xe1, 0x42, 0x8e, 0x95, 0xfe, 0xb5, 0x63, 0x18, 0x65, 0xf1, 0x7f, 0x67, 0x32, 0x94, 0x55, 0x63, 0x41, 0x01, 0x4f, 0x13, 0xe1, 0x01, 0x2f, 0xf0, 0xe0};
static const uint8_t EX_REQ[58] = {0xa5, 0x50, 0x00, 0x01, 0x72, 0x59, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x01, 0x02, 0x03, 0x04, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xe5, 0xe4, 0x06, 0x57, 0xe7, 0xeb, 0x2a, 0x8c, 0x84, 0x88, 0x1d, 0x93, 0x68, 0x61, 0xeb, 0xc7};
static const uint8_t EX_RESP[58] = {0xa5, 0x51, 0x00, 0x01, 0xa7, 0xaf, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x02, 0x03, 0x04, 0x05, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x77, 0x95, 0x7f, 0xf9, 0x6a, 0x33, 0xd1, 0x65, 0x41, 0xa0, 0x64, 0xb9, 0x03, 0x72, 0x30, 0x48};
static const uint8_t EX_INIT_ENC[126] = {0xa5, 0x53, 0x00, 0x00, 0xbe, 0xd1, 0x01, 0x02, 0x03, 0x04, 0x05, 0x07, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x68, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07, 0x79, 0xa6, 0x31, 0xee, 0xde, 0x1b, 0xf9, 0xc9, 0x8f, 0x12, 0x03, 0x2c, 0xde, 0xad, 0xd0, 0xe7, 0xa0, 0x79, 0x39, 0x8f, 0xc7, 0x86, 0xb8, 0x8c, 0xc8, 0x46, 0xec, 0x89, 0xaf, 0x85, 0xa5, 0x1a, 0x00, 0x00, 0x01, 0x9a, 0xca, 0x55, 0x9e, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x42, 0x5f, 0x2f, 0x0d, 0xb9, 0xa1, 0x60, 0xe7, 0xd3, 0x52, 0x84, 0x6b, 0x6c, 0x1a, 0x8f, 0xb4, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
static const uint8_t EX_ACCEPT_ENC[86] = {0xa5, 0x54, 0x00, 0x00, 0x98, 0x36, 0x01, 0x02, 0x03, 0x04, 0x05, 0x07, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x89, 0x67, 0x5d, 0xd5, 0x74, 0xed, 0x77, 0x89, 0x31, 0x0b, 0x3d, 0x2e, 0x76, 0x81, 0xf3, 0x79, 0x0b, 0x46, 0x6c, 0x77, 0x3b, 0x15, 0x21, 0xfe, 0xcf, 0x36, 0x57, 0x79, 0x58, 0x37, 0x1e, 0xa5, 0x2f, 0x00, 0x00, 0x00, 0x01, 0x9b, 0xbc, 0x88, 0x8a, 0x60, 0xef, 0xd0, 0x60, 0x8d, 0x9e, 0xdd, 0x78, 0xc2, 0x38, 0x69, 0xd1};
static const uint8_t EX_REQ_ENC[58] = {0xa5, 0x50, 0x00, 0x01, 0x72, 0x59, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x8d, 0x64, 0x3a, 0x1b, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x89, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xd4, 0x03, 0xd1, 0x4e, 0x33, 0x94, 0xe3, 0x48, 0x01, 0x5f, 0x1e, 0x57, 0x15, 0xb0, 0x69, 0xb4};
static const uint8_t EX_INIT_COOKIE[126] = {0xa5, 0x53, 0x00, 0x00, 0x35, 0xe2, 0x01, 0x02, 0x03, 0x04, 0x05, 0x08, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x68, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07, 0x79, 0xa6, 0x31, 0xee, 0xde, 0x1b, 0xf9, 0xc9, 0x8f, 0x12, 0x03, 0x2c, 0xde, 0xad, 0xd0, 0xe7, 0xa0, 0x79, 0x39, 0x8f, 0xc7, 0x86, 0xb8, 0x8c, 0xc8, 0x46, 0xec, 0x89, 0xaf, 0x85, 0xa5, 0x1a, 0x00, 0x00, 0x01, 0x9a, 0xca, 0x55, 0x9e, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x7c, 0x4c, 0x85, 0xcc, 0x1e, 0xef, 0xef, 0x89, 0x7b, 0x3f, 0xaa, 0x39, 0x36, 0x50, 0xf4, 0x6f, 0xe9, 0x82, 0xd1, 0x63, 0xf6, 0x2e, 0x2b, 0x77, 0x87, 0xe8, 0x01, 0x61, 0xab, 0xdc, 0xdc, 0x3d};
static const uint8_t EX_INIT_RESUME[126] = {0xa5, 0x53, 0x00, 0x00, 0xed, 0xab, 0x01, 0x02, 0x03, 0x04, 0x05, 0x09, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x68, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07, 0x79, 0xa6, 0x31, 0xee, 0xde, 0x1b, 0xf9, 0xc9, 0x8f, 0x12, 0x03, 0x2c, 0xde, 0xad, 0xd0, 0xe7, 0xa0, 0x79, 0x39, 0x8f, 0xc7, 0x86, 0xb8, 0x8c, 0xc8, 0x46, 0xec, 0x89, 0xaf, 0x85, 0xa5, 0x1a, 0x00, 0x00, 0x01, 0x9a, 0xca, 0x55, 0x9e, 0x00, 0x00, 0x00, 0x00, 0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0xd3, 0xb2, 0x46, 0xa9, 0x64, 0xd2, 0x36, 0x4a, 0x82, 0x1a, 0x02, 0x73, 0x1d, 0xe1, 0xd3, 0x8b, 0xea, 0x2d, 0x18, 0x5b, 0x73, 0x6d, 0xab, 0x0a, 0xc5, 0x44, 0xd0, 0x91, 0x51, 0x35, 0xc9, 0x6f, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};

/* The page's AES-256-GCM example (flags 2: handshake id 0x010203040508, session 0x112233445566778a;
 * flags 3: 0x01020304050b, 0x112233445566778b). */
static const uint8_t EX_AES_INIT[126] = {0xa5, 0x53, 0x00, 0x00, 0x35, 0xe2, 0x01, 0x02, 0x03, 0x04, 0x05, 0x08, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x68, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07, 0x79, 0xa6, 0x31, 0xee, 0xde, 0x1b, 0xf9, 0xc9, 0x8f, 0x12, 0x03, 0x2c, 0xde, 0xad, 0xd0, 0xe7, 0xa0, 0x79, 0x39, 0x8f, 0xc7, 0x86, 0xb8, 0x8c, 0xc8, 0x46, 0xec, 0x89, 0xaf, 0x85, 0xa5, 0x1a, 0x00, 0x00, 0x01, 0x9a, 0xca, 0x55, 0x9e, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x92, 0x4d, 0x5b, 0x81, 0xd6, 0x82, 0x00, 0x3e, 0xac, 0xe7, 0x17, 0xda, 0x1e, 0x8a, 0xb6, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
static const uint8_t EX_AES_ACCEPT[86] = {0xa5, 0x54, 0x00, 0x00, 0x13, 0x05, 0x01, 0x02, 0x03, 0x04, 0x05, 0x08, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x8a, 0x67, 0x5d, 0xd5, 0x74, 0xed, 0x77, 0x89, 0x31, 0x0b, 0x3d, 0x2e, 0x76, 0x81, 0xf3, 0x79, 0x0b, 0x46, 0x6c, 0x77, 0x3b, 0x15, 0x21, 0xfe, 0xcf, 0x36, 0x57, 0x79, 0x58, 0x37, 0x1e, 0xa5, 0x2f, 0x00, 0x00, 0x00, 0x02, 0x78, 0x1d, 0x26, 0x08, 0x62, 0xe9, 0x3b, 0x28, 0xd9, 0x23, 0xad, 0xf1, 0xfd, 0x63, 0xf4, 0x02};
static const uint8_t EX_AES_REQ[58] = {0xa5, 0x50, 0x00, 0x01, 0x72, 0x59, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x01, 0x02, 0x03, 0x04, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x8a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xd4, 0x2e, 0x27, 0x43, 0x9d, 0x98, 0x6f, 0xc4, 0x57, 0xf9, 0xf1, 0x7d, 0x76, 0x04, 0xb8, 0x3d};
static const uint8_t EX_AES_RESP[58] = {0xa5, 0x51, 0x00, 0x01, 0xa7, 0xaf, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x02, 0x03, 0x04, 0x05, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x8a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xbf, 0xa7, 0xe3, 0xd1, 0xe9, 0x5f, 0xb3, 0x49, 0x00, 0x0a, 0x7e, 0xcc, 0x27, 0x11, 0x51, 0xfd};
static const uint8_t EX_AES_ENC_REQ[58] = {0xa5, 0x50, 0x00, 0x01, 0x72, 0x59, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x98, 0x2c, 0x7b, 0x89, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x8b, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x10, 0x97, 0x90, 0xae, 0x90, 0xc9, 0x71, 0xf9, 0xad, 0x0b, 0xc9, 0xa4, 0xe5, 0x2a, 0xa8, 0xac};
static const uint8_t EX_AES_ENC_RESP[58] = {0xa5, 0x51, 0x00, 0x01, 0xa7, 0xaf, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x86, 0xd6, 0x47, 0x7e, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x8b, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x96, 0x62, 0x02, 0xa1, 0xac, 0xd8, 0x68, 0x22, 0x6d, 0x16, 0x95, 0x54, 0x45, 0x20, 0x6f, 0xa2};
/* The page's AEGIS-128L example (74-byte data datagrams: the tag's first half before the trailer). */
static const uint8_t EX_AEGIS_INIT[126] = {0xa5, 0x53, 0x00, 0x00, 0xc2, 0x51, 0x01, 0x02, 0x03, 0x04, 0x05, 0x10, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x68, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07, 0x79, 0xa6, 0x31, 0xee, 0xde, 0x1b, 0xf9, 0xc9, 0x8f, 0x12, 0x03, 0x2c, 0xde, 0xad, 0xd0, 0xe7, 0xa0, 0x79, 0x39, 0x8f, 0xc7, 0x86, 0xb8, 0x8c, 0xc8, 0x46, 0xec, 0x89, 0xaf, 0x85, 0xa5, 0x1a, 0x00, 0x00, 0x01, 0x9a, 0xca, 0x55, 0x9e, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x74, 0x44, 0x3b, 0x82, 0xe2, 0x61, 0x65, 0x79, 0xcd, 0xaa, 0xc6, 0x89, 0x3f, 0x95, 0x25, 0x1a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
static const uint8_t EX_AEGIS_ACCEPT[86] = {0xa5, 0x54, 0x00, 0x00, 0xe4, 0xb6, 0x01, 0x02, 0x03, 0x04, 0x05, 0x10, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x90, 0x67, 0x5d, 0xd5, 0x74, 0xed, 0x77, 0x89, 0x31, 0x0b, 0x3d, 0x2e, 0x76, 0x81, 0xf3, 0x79, 0x0b, 0x46, 0x6c, 0x77, 0x3b, 0x15, 0x21, 0xfe, 0xcf, 0x36, 0x57, 0x79, 0x58, 0x37, 0x1e, 0xa5, 0x2f, 0x00, 0x00, 0x00, 0x04, 0x12, 0x95, 0xef, 0x58, 0x6d, 0x36, 0xf2, 0x0b, 0x68, 0xfe, 0x43, 0xf9, 0x17, 0xf3, 0xc8, 0x9d};
static const uint8_t EX_AEGIS_REQ[74] = {0xa5, 0x50, 0x00, 0x01, 0x72, 0x59, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x01, 0x02, 0x03, 0x04, 0x04, 0x1f, 0x9c, 0x9c, 0x89, 0x15, 0x36, 0x72, 0x9e, 0x2a, 0x29, 0xf1, 0xab, 0x46, 0xd3, 0x61, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x90, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x65, 0xfb, 0x9b, 0x73, 0x3d, 0x51, 0xc0, 0x1c, 0x32, 0x11, 0xb4, 0x0a, 0x1e, 0x7a, 0xe7, 0x51};
static const uint8_t EX_AEGIS_RESP[74] = {0xa5, 0x51, 0x00, 0x01, 0xa7, 0xaf, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x02, 0x03, 0x04, 0x05, 0xa5, 0x3a, 0xb2, 0xc4, 0x4f, 0x0d, 0x8b, 0x27, 0x35, 0xfe, 0x84, 0xa8, 0xd7, 0x47, 0x6a, 0xfb, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x90, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xd2, 0x19, 0xb9, 0x97, 0x09, 0xa0, 0x96, 0xd9, 0x87, 0xee, 0x64, 0x7d, 0x16, 0x7b, 0x6a, 0xff};
static const uint8_t EX_AEGIS_ENC_REQ[74] = {0xa5, 0x50, 0x00, 0x01, 0x72, 0x59, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x0c, 0x75, 0x16, 0x46, 0xbc, 0x6c, 0xd1, 0xd1, 0x1c, 0xf9, 0x66, 0x6f, 0x8b, 0x26, 0xf3, 0x70, 0xbe, 0xa8, 0xad, 0x0b, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x91, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x7b, 0xb2, 0x6a, 0x0f, 0xc6, 0x62, 0xd6, 0x14, 0x28, 0x4e, 0xd9, 0xb4, 0x76, 0xd5, 0x39, 0x57};
static const uint8_t EX_AEGIS_ENC_RESP[74] = {0xa5, 0x51, 0x00, 0x01, 0xa7, 0xaf, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x4f, 0x1a, 0xd4, 0xea, 0x43, 0xcf, 0x31, 0x6d, 0x19, 0x95, 0x50, 0x79, 0x0a, 0xa1, 0x3f, 0x77, 0xee, 0xa0, 0x46, 0x09, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x91, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x2b, 0x3d, 0x15, 0xe9, 0xc8, 0x80, 0xe6, 0xd7, 0xea, 0xb3, 0xf8, 0x1a, 0x9e, 0x4d, 0x39, 0x75};

static uint8_t PSK[32], EC[32], ES[32];

static void test_example(void)
{
    uint8_t init[SRPC_V5_INIT_LEN], acc[SRPC_V5_ACCEPT_LEN];
    CHECK(srpc_v5_init_make(init, PSK, 7, 0x010203040506ull, EC, 1764331200000ull, 0, NULL, NULL) == 0 &&
              memcmp(init, EX_INIT, sizeof(init)) == 0,
          "the example's INIT");
    srpc_v5_init_t f;
    CHECK(srpc_v5_init_parse(init, sizeof(init), &f) == 0 && f.key_id == 7 && f.hs_id == 0x010203040506ull &&
              f.time_ms == 1764331200000ull && f.flags == 0 && memcmp(f.e, EX_INIT + 26, 32) == 0,
          "its fields");
    CHECK(srpc_v5_init_mac1_ok(init, PSK) == 1, "its mac1");
    srpc_v5_keys_t s, c;
    CHECK(srpc_v5_accept_make(acc, &s, init, PSK, ES, 0x1122334455667788ull, 0) == 0 &&
              memcmp(acc, EX_ACCEPT, sizeof(acc)) == 0,
          "the example's ACCEPT");
    CHECK(memcmp(s.c2s, EX_C2S, 32) == 0 && memcmp(s.s2c, EX_S2C, 32) == 0 && !s.encrypt &&
              s.session == 0x1122334455667788ull,
          "the server's keys");
    CHECK(srpc_v5_accept_open(&c, init, EC, PSK, acc, sizeof(acc)) == 0 && c.session == s.session &&
              memcmp(c.c2s, s.c2s, 32) == 0 && memcmp(c.s2c, s.s2c, 32) == 0 && c.encrypt == s.encrypt,
          "the client's keys are the server's");
    /* The REQUEST, sealed and opened. */
    uint8_t req[sizeof(EX_REQ)];
    memcpy(req, EX_REQ, SRPC_HDR_LEN + 4); /* header and data */
    CHECK(srpc_v5_seal(&c, 1, 1, req, req + SRPC_HDR_LEN, 4, req + SRPC_HDR_LEN + 4) == 0 &&
              memcmp(req, EX_REQ, sizeof(req)) == 0,
          "the example's REQUEST");
    CHECK(srpc_v5_open(&s, 1, req, req + SRPC_HDR_LEN, 4, req + SRPC_HDR_LEN + 4) == 0, "opened by the server");
    CHECK(srpc_v5_open(&s, 0, req, req + SRPC_HDR_LEN, 4, req + SRPC_HDR_LEN + 4) == -EBADMSG,
          "not as a reply: the directions have their own keys");
    uint8_t resp[sizeof(EX_RESP)];
    memcpy(resp, EX_RESP, sizeof(resp));
    CHECK(srpc_v5_open(&c, 0, resp, resp + SRPC_HDR_LEN, 4, resp + SRPC_HDR_LEN + 4) == 0 &&
              memcmp(resp, EX_RESP, sizeof(resp)) == 0,
          "the example's RESPONSE opened by the client");
    /* The encrypting session. */
    CHECK(srpc_v5_init_make(init, PSK, 7, 0x010203040507ull, EC, 1764331200000ull, SRPC_V5_FLAG_ENCRYPT, NULL, NULL) == 0 &&
              memcmp(init, EX_INIT_ENC, sizeof(init)) == 0,
          "INIT asking for encryption");
    CHECK(srpc_v5_accept_make(acc, &s, init, PSK, ES, 0x1122334455667789ull, SRPC_V5_FLAG_ENCRYPT) == 0 &&
              memcmp(acc, EX_ACCEPT_ENC, sizeof(acc)) == 0 && s.encrypt,
          "ACCEPT of an encrypting session");
    CHECK(srpc_v5_accept_open(&c, init, EC, PSK, acc, sizeof(acc)) == 0 && c.encrypt, "the client's");
    uint8_t enc[sizeof(EX_REQ_ENC)];
    memcpy(enc, EX_REQ, SRPC_HDR_LEN + 4);
    CHECK(srpc_v5_seal(&c, 1, 1, enc, enc + SRPC_HDR_LEN, 4, enc + SRPC_HDR_LEN + 4) == 0 &&
              memcmp(enc, EX_REQ_ENC, sizeof(enc)) == 0,
          "the example's encrypted REQUEST");
    CHECK(srpc_v5_open(&s, 1, enc, enc + SRPC_HDR_LEN, 4, enc + SRPC_HDR_LEN + 4) == 0 &&
              memcmp(enc + SRPC_HDR_LEN, EX_REQ + SRPC_HDR_LEN, 4) == 0,
          "decrypted by the server to the data");
    static const uint8_t cookie[16] = {0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7,
                                       0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf};
    uint8_t res[SRPC_V5_INIT_LEN];
    srpc_v5_keys_t first;
    srpc_v5_init_make(res, PSK, 7, 0x010203040506ull, EC, 1764331200000ull, 0, NULL, NULL);
    CHECK(srpc_v5_accept_open(&first, res, EC, PSK, EX_ACCEPT, sizeof(EX_ACCEPT)) == 0, "the first session again");
    CHECK(srpc_v5_init_make(res, PSK, 7, 0x010203040509ull, EC, 1764331200000ull, 0, &first, NULL) == 0 &&
              memcmp(res, EX_INIT_RESUME, sizeof(res)) == 0,
          "the example's INIT following the first session (resume)");
    CHECK(srpc_v5_init_parse(res, sizeof(res), &f) == 0 && f.prev_session == 0x1122334455667788ull &&
              srpc_v5_init_resume_ok(res, first.c2s) == 1 && srpc_v5_init_resume_ok(res, first.s2c) == 0 &&
              srpc_v5_init_resume_ok(EX_INIT, first.c2s) == 0,
          "its resume: right only with the session's k_c2s; none in an INIT that follows nothing");
    CHECK(srpc_v5_init_make(init, PSK, 7, 0x010203040508ull, EC, 1764331200000ull, 0, NULL, cookie) == 0 &&
              memcmp(init, EX_INIT_COOKIE, sizeof(init)) == 0 && srpc_v5_init_cookie_ok(init, cookie) == 1 &&
              srpc_v5_init_mac1_ok(init, PSK) == 1,
          "INIT with a cookie");
}

/* One suite's two sessions of the page's example (authenticating, then encrypting): each made and
 * sealed here byte for byte (the data datagrams n bytes long), and opened; every one-bit change of
 * the REQUEST refused; the REQUEST's tail the same when sealed from pieces (what a transport does). */
typedef struct {
    uint64_t hs, session;
    uint32_t flags;
    const uint8_t *req, *resp;
} suite_example_t;

static void check_suite_example(const char *name, const suite_example_t ex[2], const uint8_t *ex_init,
                                const uint8_t *ex_accept, uint32_t n)
{
    for (int i = 0; i < 2; i++) {
        uint8_t init[SRPC_V5_INIT_LEN], acc[SRPC_V5_ACCEPT_LEN], d[SRPC_HDR_LEN + 4 + SRPC_V5_TAIL_MAX];
        srpc_v5_keys_t s, c;
        const uint32_t f = ex[i].flags;
        CHECK(srpc_v5_init_make(init, PSK, 7, ex[i].hs, EC, 1764331200000ull, f, NULL, NULL) == 0 &&
                  (i || memcmp(init, ex_init, sizeof(init)) == 0),
              "%s flags %u: the INIT", name, f);
        CHECK(srpc_v5_accept_make(acc, &s, init, PSK, ES, ex[i].session, f) == 0 &&
                  (i || memcmp(acc, ex_accept, sizeof(acc)) == 0) && s.encrypt == f &&
                  srpc_v5_accept_open(&c, init, EC, PSK, acc, sizeof(acc)) == 0 && c.encrypt == f,
              "%s flags %u: the ACCEPT, taken", name, f);
        memcpy(d, EX_REQ, SRPC_HDR_LEN + 4); /* the example's header and data */
        CHECK(srpc_v5_seal(&c, 1, 1, d, d + SRPC_HDR_LEN, 4, d + SRPC_HDR_LEN + 4) == 0 && memcmp(d, ex[i].req, n) == 0,
              "%s flags %u: the page's REQUEST", name, f);
        int bad = 0;
        for (uint32_t at = 0; at < n; at++) { /* any one bit changed (tag, session, counter, header, data) */
            uint8_t x[sizeof(d)];
            memcpy(x, ex[i].req, n);
            x[at] ^= (uint8_t)(1u << (at % 8));
            bad += srpc_v5_open(&s, 1, x, x + SRPC_HDR_LEN, 4, x + SRPC_HDR_LEN + 4) != -EBADMSG;
        }
        CHECK(bad == 0, "%s flags %u: every one-bit change refused", name, f);
        CHECK(srpc_v5_open(&s, 1, d, d + SRPC_HDR_LEN, 4, d + SRPC_HDR_LEN + 4) == 0 &&
                  memcmp(d + SRPC_HDR_LEN, EX_REQ + SRPC_HDR_LEN, 4) == 0,
              "%s flags %u: opened by the server", name, f);
        memcpy(d, EX_RESP, SRPC_HDR_LEN + 4);
        CHECK(srpc_v5_seal(&s, 0, 1, d, d + SRPC_HDR_LEN, 4, d + SRPC_HDR_LEN + 4) == 0 && memcmp(d, ex[i].resp, n) == 0,
              "%s flags %u: the page's RESPONSE", name, f);
        CHECK(srpc_v5_open(&c, 0, d, d + SRPC_HDR_LEN, 4, d + SRPC_HDR_LEN + 4) == 0 &&
                  memcmp(d + SRPC_HDR_LEN, EX_RESP + SRPC_HDR_LEN, 4) == 0,
              "%s flags %u: opened by the client", name, f);
        uint8_t tail[SRPC_V5_TAIL_MAX], enc[4];
        const uint8_t data[4] = {1, 2, 3, 4};
        const struct iovec pieces[2] = {{(void *)data, 1}, {(void *)(data + 1), 3}};
        CHECK(srpc_v5_seal_key(c.c2s, c.session, (int)c.encrypt, 1, EX_REQ, pieces, 2, enc, tail) == 0 &&
                  memcmp(tail, ex[i].req + SRPC_HDR_LEN + 4, n - SRPC_HDR_LEN - 4) == 0 &&
                  (!(f & SRPC_V5_FLAG_ENCRYPT) || memcmp(enc, ex[i].req + SRPC_HDR_LEN, 4) == 0),
              "%s flags %u: sealed from pieces, the same bytes", name, f);
    }
}

/* The page's AES-256-GCM example. */
static void test_aes_example(void)
{
    if (!srpc_v5_aes_available()) {
        printf("# AES-256-GCM not available here: the page's AES example not tested\n");
        return;
    }
    static const suite_example_t ex[2] = {
        {0x010203040508ull, 0x112233445566778aull, SRPC_V5_FLAG_AES, EX_AES_REQ, EX_AES_RESP},
        {0x01020304050bull, 0x112233445566778bull, SRPC_V5_FLAG_AES | SRPC_V5_FLAG_ENCRYPT, EX_AES_ENC_REQ,
         EX_AES_ENC_RESP}};
    check_suite_example("AES", ex, EX_AES_INIT, EX_AES_ACCEPT, 58);
}

/* The page's AEGIS-128L example (74-byte data datagrams: the tag's first half before the trailer);
 * the suite taken only where offered, and picked over AES where both are offered. */
static void test_aegis_example(void)
{
    if (!srpc_v5_aegis_available()) {
        printf("# AEGIS-128L not available here (libsodium before 1.0.19, or no AES-NI): the page's AEGIS example not tested\n");
        CHECK(srpc_v5_suite_pick(SRPC_V5_FLAG_AEGIS | SRPC_V5_FLAG_ENCRYPT) == SRPC_V5_FLAG_ENCRYPT,
              "without AEGIS-128L here, an offer of it alone gets ChaCha20-Poly1305");
        return;
    }
    printf("# AEGIS-128L available: the page's AEGIS example tested\n");
    CHECK(srpc_v5_suite_pick(SRPC_V5_FLAG_AES | SRPC_V5_FLAG_AEGIS) == SRPC_V5_FLAG_AEGIS &&
              srpc_v5_suite_pick(SRPC_V5_FLAG_AEGIS | SRPC_V5_FLAG_ENCRYPT) == (SRPC_V5_FLAG_AEGIS | SRPC_V5_FLAG_ENCRYPT) &&
              srpc_v5_suite_pick(SRPC_V5_FLAG_ENCRYPT) == SRPC_V5_FLAG_ENCRYPT,
          "the server picks AEGIS-128L where offered, over AES-256-GCM; nothing not offered");
    CHECK(srpc_v5_tail_len(SRPC_V5_FLAG_AEGIS) == 48 && srpc_v5_tail_len(SRPC_V5_FLAG_AES) == 32 &&
              srpc_v5_tail_len(0) == 32,
          "an AEGIS-128L datagram's tail is 48 bytes, the others' 32");
    static const suite_example_t ex[2] = {
        {0x010203040510ull, 0x1122334455667790ull, SRPC_V5_FLAG_AEGIS, EX_AEGIS_REQ, EX_AEGIS_RESP},
        {0x010203040511ull, 0x1122334455667791ull, SRPC_V5_FLAG_AEGIS | SRPC_V5_FLAG_ENCRYPT, EX_AEGIS_ENC_REQ,
         EX_AEGIS_ENC_RESP}};
    check_suite_example("AEGIS", ex, EX_AEGIS_INIT, EX_AEGIS_ACCEPT, 74);
    uint8_t init[SRPC_V5_INIT_LEN], acc[SRPC_V5_ACCEPT_LEN];
    srpc_v5_keys_t s, c;
    CHECK(srpc_v5_init_make(init, PSK, 7, 0x010203040512ull, EC, 1764331200000ull, SRPC_V5_FLAG_AES, NULL, NULL) == 0 &&
              srpc_v5_accept_make(acc, &s, init, PSK, ES, 0x1122334455667792ull, SRPC_V5_FLAG_AEGIS) == 0 &&
              srpc_v5_accept_open(&c, init, EC, PSK, acc, sizeof(acc)) == -EBADMSG,
          "an ACCEPT granting AEGIS-128L to an INIT that did not offer it: refused");
    CHECK(srpc_v5_accept_make(acc, &s, init, PSK, ES, 0x1122334455667792ull, SRPC_V5_FLAG_AEGIS | SRPC_V5_FLAG_AES) ==
              -EINVAL,
          "no ACCEPT is made with two suites");
}

/* Data datagrams against libsodium's own ChaCha20-Poly1305 (one call, whole associated data):
 * the pieces-wise construction is RFC 8439's, for lengths around every padding boundary. */
static void test_aead_as_libsodium(void)
{
    void *h = dlopen("libsodium.so.23", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        h = dlopen("libsodium.so", RTLD_NOW | RTLD_LOCAL);
    typedef int (*enc_fn)(unsigned char *, unsigned char *, unsigned long long *, const unsigned char *,
                          unsigned long long, const unsigned char *, unsigned long long, const unsigned char *,
                          const unsigned char *, const unsigned char *);
    enc_fn enc = h ? (enc_fn)dlsym(h, "crypto_aead_chacha20poly1305_ietf_encrypt_detached") : NULL;
    CHECK(enc != NULL, "libsodium's AEAD");
    if (!enc)
        return;
    srpc_v5_keys_t k = {.session = 0x0102030405060708ull};
    for (int i = 0; i < 32; i++)
        k.c2s[i] = (uint8_t)(3 * i + 1), k.s2c[i] = (uint8_t)(5 * i + 2);
    static uint8_t buf[SRPC_HDR_LEN + 2000 + SRPC_V5_TRAILER_LEN], ad[SRPC_HDR_LEN + 2000 + 16], data[2000],
        out[2000];
    unsigned bad = 0;
    for (uint32_t len = 0; len < 200; len++)
        for (int encrypting = 0; encrypting < 2; encrypting++) {
            k.encrypt = (uint8_t)encrypting;
            for (uint32_t i = 0; i < SRPC_HDR_LEN + len; i++)
                buf[i] = (uint8_t)(i * 7 + len);
            memcpy(data, buf + SRPC_HDR_LEN, len);
            uint8_t *tr = buf + SRPC_HDR_LEN + len;
            const uint64_t counter = 1000 + len;
            srpc_v5_seal(&k, 1, counter, buf, buf + SRPC_HDR_LEN, len, tr);
            uint8_t nonce[12] = {0}, tag[16];
            for (int b = 0; b < 8; b++)
                nonce[4 + b] = (uint8_t)(counter >> (56 - 8 * b));
            unsigned long long tl = 0;
            if (encrypting) {
                memcpy(ad, buf, SRPC_HDR_LEN);
                memcpy(ad + SRPC_HDR_LEN, tr, 16);
                enc(out, tag, &tl, data, len, ad, SRPC_HDR_LEN + 16, NULL, nonce, k.c2s);
                bad += memcmp(out, buf + SRPC_HDR_LEN, len) != 0 || memcmp(tag, tr + 16, 16) != 0;
            } else {
                memcpy(ad, buf, SRPC_HDR_LEN + len);
                memcpy(ad + SRPC_HDR_LEN + len, tr, 16);
                enc(out, tag, &tl, NULL, 0, ad, SRPC_HDR_LEN + len + 16, NULL, nonce, k.c2s);
                bad += memcmp(tag, tr + 16, 16) != 0 || memcmp(data, buf + SRPC_HDR_LEN, len) != 0;
            }
            bad += srpc_v5_open(&k, 1, buf, buf + SRPC_HDR_LEN, len, tr) != 0 ||
                   memcmp(data, buf + SRPC_HDR_LEN, len) != 0;
        }
    CHECK(bad == 0, "%u of 400 datagrams differ from libsodium's AEAD or do not open", bad);
}

/* The AES-256-GCM suite against libsodium's own one-call AEAD (the key expanded for each call),
 * with more keys in turn than a thread keeps expanded (core/aes_keys.h: each is replaced and
 * expanded again), on two threads at once, and after the thread's keys are wiped. */
typedef int (*aes_fn)(unsigned char *, unsigned char *, unsigned long long *, const unsigned char *,
                      unsigned long long, const unsigned char *, unsigned long long, const unsigned char *,
                      const unsigned char *, const unsigned char *);
static aes_fn aes_one;

static void *aes_rounds(void *arg)
{
    unsigned *bad = arg;
    enum { KEYS = 3 * SRPC_AES_KEYS_PER_THREAD + 1 };
    static _Thread_local uint8_t buf[SRPC_HDR_LEN + 1500 + SRPC_V5_TRAILER_LEN], ad[SRPC_HDR_LEN + 1500 + 16],
        data[1500], out[1500];
    for (int round = 0; round < 3; round++) {
        if (round == 2)
            srpc_aes_keys_wipe();
        for (int key = 0; key < KEYS; key++)
            for (int encrypting = 0; encrypting < 2; encrypting++) {
                srpc_v5_keys_t k = {.session = 0x99 + (uint64_t)key,
                                    .encrypt = (uint8_t)(SRPC_V5_FLAG_AES | (encrypting ? SRPC_V5_FLAG_ENCRYPT : 0))};
                for (int i = 0; i < 32; i++)
                    k.c2s[i] = (uint8_t)(key * 11 + i), k.s2c[i] = (uint8_t)(key * 13 + 3 * i);
                const uint32_t len = (uint32_t)(key * 97 + round * 31) % 1500;
                for (uint32_t i = 0; i < SRPC_HDR_LEN + len; i++)
                    buf[i] = (uint8_t)(i * 5 + key);
                memcpy(data, buf + SRPC_HDR_LEN, len);
                uint8_t *tr = buf + SRPC_HDR_LEN + len, nonce[12] = {0}, tag[16];
                const uint64_t counter = 7 + (uint64_t)round;
                const int to_server = key & 1;
                srpc_v5_seal(&k, to_server, counter, buf, buf + SRPC_HDR_LEN, len, tr);
                nonce[11] = (uint8_t)counter;
                unsigned long long tl = 0;
                if (encrypting) {
                    memcpy(ad, buf, SRPC_HDR_LEN);
                    memcpy(ad + SRPC_HDR_LEN, tr, 16);
                    aes_one(out, tag, &tl, data, len, ad, SRPC_HDR_LEN + 16, NULL, nonce, to_server ? k.c2s : k.s2c);
                    *bad += memcmp(out, buf + SRPC_HDR_LEN, len) != 0 || memcmp(tag, tr + 16, 16) != 0;
                } else {
                    memcpy(ad, buf, SRPC_HDR_LEN + len);
                    memcpy(ad + SRPC_HDR_LEN + len, tr, 16);
                    aes_one(NULL, tag, &tl, NULL, 0, ad, SRPC_HDR_LEN + len + 16, NULL, nonce, to_server ? k.c2s : k.s2c);
                    *bad += memcmp(tag, tr + 16, 16) != 0;
                }
                if (key % 3 == 2) { /* the datagram's pieces apart (not as it came): gathered first */
                    static _Thread_local uint8_t apart[1500 + SRPC_V5_TRAILER_LEN + 7];
                    memcpy(apart + 7, buf + SRPC_HDR_LEN, len + SRPC_V5_TRAILER_LEN);
                    *bad += srpc_v5_open(&k, to_server, buf, apart + 7, len, apart + 7 + len) != 0 ||
                            memcmp(data, apart + 7, len) != 0;
                    apart[7 + len + 16] ^= 1;
                    *bad += srpc_v5_open(&k, to_server, buf, apart + 7, len, apart + 7 + len) != -EBADMSG;
                    continue;
                }
                *bad += srpc_v5_open(&k, to_server, buf, buf + SRPC_HDR_LEN, len, tr) != 0 ||
                        memcmp(data, buf + SRPC_HDR_LEN, len) != 0;
                tr[16] ^= 1;
                *bad += srpc_v5_open(&k, to_server, buf, buf + SRPC_HDR_LEN, len, tr) != -EBADMSG;
            }
    }
    return NULL;
}

static void test_aes_as_libsodium(void)
{
    if (!srpc_v5_aes_available()) {
        printf("# AES-256-GCM not available here (libsodium or the CPU): its suite not tested\n");
        return;
    }
    void *h = dlopen("libsodium.so.23", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        h = dlopen("libsodium.so", RTLD_NOW | RTLD_LOCAL);
    aes_one = h ? (aes_fn)dlsym(h, "crypto_aead_aes256gcm_encrypt_detached") : NULL;
    CHECK(aes_one != NULL, "libsodium's AES-256-GCM");
    if (!aes_one)
        return;
    unsigned bad[2] = {0, 0};
    pthread_t other;
    CHECK(pthread_create(&other, NULL, aes_rounds, &bad[1]) == 0, "a second thread");
    aes_rounds(&bad[0]);
    pthread_join(other, NULL);
    CHECK(bad[0] == 0 && bad[1] == 0, "%u and %u datagrams (of 150 on each thread) differ from libsodium's AES-256-GCM, "
          "do not open, or open with a changed tag", bad[0], bad[1]);
}

/* Hostile input: every one-bit change of a datagram, an INIT or an ACCEPT is refused. */
static void test_every_bit(void)
{
    srpc_v5_keys_t s, c;
    uint8_t init[SRPC_V5_INIT_LEN], acc[SRPC_V5_ACCEPT_LEN];
    srpc_v5_init_make(init, PSK, 7, 0x010203040506ull, EC, 1764331200000ull, 0, NULL, NULL);
    srpc_v5_accept_make(acc, &s, init, PSK, ES, 0x1122334455667788ull, 0);
    unsigned missed = 0;
    for (size_t i = 0; i < sizeof(acc); i++)
        for (int b = 0; b < 8; b++) {
            acc[i] ^= (uint8_t)(1u << b);
            missed += srpc_v5_accept_open(&c, init, EC, PSK, acc, sizeof(acc)) != -EBADMSG;
            acc[i] ^= (uint8_t)(1u << b);
        }
    CHECK(missed == 0, "%u one-bit changes of an ACCEPT taken", missed);
    missed = 0;
    srpc_v5_init_t f;
    for (size_t i = 0; i < sizeof(init); i++)
        for (int b = 0; b < 8; b++) {
            init[i] ^= (uint8_t)(1u << b);
            /* a change of the cookie_mac (no cookie asked for) is the one mac1 does not cover */
            missed += i < SRPC_HDR_LEN + 88 && srpc_v5_init_parse(init, sizeof(init), &f) == 0 &&
                      srpc_v5_init_mac1_ok(init, PSK) == 1;
            init[i] ^= (uint8_t)(1u << b);
        }
    CHECK(missed == 0, "%u one-bit changes of an INIT passed its mac1", missed);
    CHECK(srpc_v5_init_parse(init, sizeof(init) - 1, &f) == -EBADMSG &&
              srpc_v5_init_parse(init, sizeof(init) + 0, &f) == 0,
          "an INIT of another length");
    uint8_t other[32];
    memcpy(other, PSK, 32);
    other[0] ^= 1;
    CHECK(srpc_v5_init_mac1_ok(init, other) == 0, "mac1 of another key");
    CHECK(srpc_v5_accept_open(&c, init, EC, other, acc, sizeof(acc)) == -EBADMSG,
          "an ACCEPT made with another key's psk");
    for (unsigned flags = 0; flags < 4; flags++) { /* both suites, authenticating and encrypting */
        if ((flags & SRPC_V5_FLAG_AES) && !srpc_v5_aes_available())
            continue;
        const int encrypting = flags & SRPC_V5_FLAG_ENCRYPT;
        s.encrypt = (uint8_t)flags;
        uint8_t d[SRPC_HDR_LEN + 40 + SRPC_V5_TRAILER_LEN], keep[sizeof(d)];
        for (size_t i = 0; i < SRPC_HDR_LEN + 40; i++)
            d[i] = (uint8_t)i;
        srpc_v5_seal(&s, 0, 9, d, d + SRPC_HDR_LEN, 40, d + SRPC_HDR_LEN + 40);
        memcpy(keep, d, sizeof(d));
        missed = 0;
        for (size_t i = 0; i < sizeof(d); i++)
            for (int b = 0; b < 8; b++) {
                memcpy(d, keep, sizeof(d));
                d[i] ^= (uint8_t)(1u << b);
                missed += srpc_v5_open(&s, 0, d, d + SRPC_HDR_LEN, 40, d + SRPC_HDR_LEN + 40) != -EBADMSG;
            }
        memcpy(d, keep, sizeof(d));
        d[SRPC_HDR_LEN + 40 + 20] ^= 1; /* the tag */
        CHECK(srpc_v5_open(&s, 0, d, d + SRPC_HDR_LEN, 40, d + SRPC_HDR_LEN + 40) == -EBADMSG &&
                  (flags == (SRPC_V5_FLAG_AES | SRPC_V5_FLAG_ENCRYPT) ||
                   memcmp(d + SRPC_HDR_LEN, keep + SRPC_HDR_LEN, 40) == 0),
              "flags %u: a refused datagram's data is left as it came (AES-256-GCM's decryption zeroes it)", flags);
        CHECK(missed == 0, "%u one-bit changes of a %s datagram (flags %u) taken", missed,
              encrypting ? "encrypted" : "signed", flags);
        memcpy(d, keep, sizeof(d));
        CHECK(srpc_v5_open(&s, 0, d, d + SRPC_HDR_LEN, 39, d + SRPC_HDR_LEN + 39) == -EBADMSG,
              "a datagram one byte short");
    }
    uint8_t t[SRPC_V5_TRAILER_LEN] = {0};
    CHECK(srpc_v5_seal(&s, 0, 0, EX_REQ, NULL, 0, t) == -EINVAL &&
              srpc_v5_seal(&s, 0, SRPC_V5_MAX_COUNTER, EX_REQ, NULL, 0, t) == -EINVAL,
          "counter 0 and 2^62 are never sent");
}

/* A low-order point as e_c or e_s gives an all-zero secret: no session. */
static void test_low_order_keys(void)
{
    uint8_t init[SRPC_V5_INIT_LEN], acc[SRPC_V5_ACCEPT_LEN];
    srpc_v5_keys_t s, c;
    srpc_v5_init_make(init, PSK, 7, 5, EC, 1, 0, NULL, NULL);
    memset(init + SRPC_HDR_LEN + 4, 0, 32); /* e_c = 0, the point of order 1 (mac1 is not checked here) */
    CHECK(srpc_v5_accept_make(acc, &s, init, PSK, ES, 9, 0) == -EPROTO, "e_c of order 1 refused");
    init[SRPC_HDR_LEN + 4] = 1; /* e_c = 1: order 4 */
    CHECK(srpc_v5_accept_make(acc, &s, init, PSK, ES, 9, 0) == -EPROTO, "e_c of small order refused");
    srpc_v5_init_make(init, PSK, 7, 5, EC, 1, 0, NULL, NULL);
    CHECK(srpc_v5_accept_make(acc, &s, init, PSK, ES, 9, 0) == 0, "a good INIT");
    memset(acc + SRPC_HDR_LEN + 12, 0, 32);
    CHECK(srpc_v5_accept_open(&c, init, EC, PSK, acc, sizeof(acc)) == -EBADMSG, "e_s of order 1 refused");
}

/* The server's other answers: COOKIE and NO_SESSION, and what a client takes of them. */
static void test_cookie_and_no_session(void)
{
    uint8_t init[SRPC_V5_INIT_LEN], ck[SRPC_V5_COOKIE_LEN], secret[32] = {9}, cookie[16], got[16];
    srpc_v5_init_make(init, PSK, 7, 77, EC, 1764331200000ull, 0, NULL, NULL);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(5000), .sin_addr = {htonl(0x7f000001)}};
    struct sockaddr_in b = a;
    b.sin_port = htons(5001);
    srpc_v5_cookie_value(cookie, secret, (struct sockaddr *)&a);
    srpc_v5_cookie_value(got, secret, (struct sockaddr *)&b);
    CHECK(memcmp(cookie, got, 16) != 0, "another port, another cookie");
    struct sockaddr_in6 l1 = {.sin6_family = AF_INET6, .sin6_port = htons(5000), .sin6_scope_id = 2}, l2 = l1;
    l1.sin6_addr.s6_addr[0] = l2.sin6_addr.s6_addr[0] = 0xfe;
    l1.sin6_addr.s6_addr[1] = l2.sin6_addr.s6_addr[1] = 0x80;
    l1.sin6_addr.s6_addr[15] = l2.sin6_addr.s6_addr[15] = 1;
    l2.sin6_scope_id = 3;
    uint8_t x1[SRPC_V5_ADDR_MAX], x2[SRPC_V5_ADDR_MAX];
    const size_t n1 = srpc_v5_addr_bytes((struct sockaddr *)&l1, x1), n2 = srpc_v5_addr_bytes((struct sockaddr *)&l2, x2);
    srpc_v5_cookie_value(cookie, secret, (struct sockaddr *)&l1);
    srpc_v5_cookie_value(got, secret, (struct sockaddr *)&l2);
    CHECK(n1 == n2 && (n1 != n2 || memcmp(x1, x2, n1) != 0) && memcmp(cookie, got, 16) != 0,
          "fe80::1 on another link (scope id): another address, another cookie");
    srpc_v5_cookie_value(cookie, secret, (struct sockaddr *)&a);
    CHECK(srpc_v5_cookie_make(ck, init, PSK, cookie) == 0 && srpc_v5_cookie_open(got, init, PSK, ck, sizeof(ck)) == 0 &&
              memcmp(got, cookie, 16) == 0,
          "a COOKIE opened by its client");
    uint8_t init2[SRPC_V5_INIT_LEN];
    srpc_v5_init_make(init2, PSK, 7, 77, ES, 1764331200000ull, 0, NULL, NULL); /* same id, another mac1 */
    CHECK(srpc_v5_cookie_open(got, init2, PSK, ck, sizeof(ck)) == -EBADMSG, "not for another INIT");
    uint8_t other[32];
    memcpy(other, PSK, 32);
    other[31] ^= 0x80;
    CHECK(srpc_v5_cookie_open(got, init, other, ck, sizeof(ck)) == -EBADMSG, "not with another key");
    uint8_t withc[SRPC_V5_INIT_LEN];
    srpc_v5_init_make(withc, PSK, 7, 78, EC, 1764331200000ull, 0, NULL, cookie);
    CHECK(srpc_v5_init_cookie_ok(withc, cookie) == 1 && srpc_v5_init_cookie_ok(init, cookie) == 0,
          "an INIT with the cookie passes, one without does not");
    srpc_hdr_t h = {.version = 5, .type = SRPC_REQUEST, .func_id = 12, .req_id = 0xabcdef, .nseg = 1};
    uint8_t ns[SRPC_V5_NO_SESSION_LEN];
    srpc_v5_no_session_make(ns, &h, 0x55aa);
    uint64_t sess = 0, rid = 0;
    uint16_t fid = 0;
    CHECK(srpc_v5_no_session_parse(ns, sizeof(ns), &sess, &fid, &rid) == 0 && sess == 0x55aa && fid == 12 &&
              rid == 0xabcdef,
          "NO_SESSION names the session and the call");
    ns[5] ^= 1;
    CHECK(srpc_v5_no_session_parse(ns, sizeof(ns), &sess, &fid, &rid) == -EBADMSG, "its header check");
}

/* A session's replay window (core/replay.h). */
static void test_window(void)
{
    srpc_replay_t w;
    memset(&w, 0, sizeof(w));
    CHECK(srpc_replay_take(&w, 0) == -1, "counter 0");
    CHECK(srpc_replay_take(&w, 1) == 0 && srpc_replay_take(&w, 1) == -1, "1, then 1 again");
    CHECK(srpc_replay_take(&w, 3) == 0 && srpc_replay_take(&w, 2) == 0 && srpc_replay_take(&w, 2) == -1,
          "overtaken within the window");
    CHECK(srpc_replay_take(&w, 3 + SRPC_AUTH_WINDOW) == 0 && srpc_replay_fresh(&w, 3) == 0 &&
              srpc_replay_fresh(&w, 4) == 1,
          "behind the window: refused; its last place: fresh");
    /* Against a model written from the definition (the highest taken and the window below it): a
     * walk of counters in order, a little out of order, repeated, and jumping ahead by up to two
     * windows, each answer the model's. */
    enum { SPAN = 64 * SRPC_AUTH_WINDOW };
    static uint8_t taken[SPAN + 1];
    memset(taken, 0, sizeof(taken));
    memset(&w, 0, sizeof(w));
    uint64_t top = 0, c = 0, seed = 0x9e3779b97f4a7c15ull;
    int agree = 1, steps = 0;
    while (agree && steps++ < 200000) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        const unsigned r = (unsigned)(seed >> 33);
        const uint64_t back = r % 7 == 0 ? r % (SRPC_AUTH_WINDOW + 64) : r % 3;
        c = r % 997 == 0 ? top + 1 + r % (2 * SRPC_AUTH_WINDOW) : top + 1 > back ? top + 1 - back : 1;
        if (c > SPAN)
            break;
        const int fresh = c > top || (top - c < SRPC_AUTH_WINDOW && !taken[c]);
        agree = srpc_replay_fresh(&w, c) == fresh && srpc_replay_take(&w, c) == (fresh ? 0 : -1);
        if (fresh) {
            taken[c] = 1;
            top = c > top ? c : top;
        }
    }
    CHECK(agree && top > 32 * SRPC_AUTH_WINDOW, "the ring answers as the window's definition does");
    /* Jumps of W - 1, W and W + 1 (an outside review: the walk above has none) from a top that is
     * not on a word's edge, and from near the largest counter: the old top refused exactly while
     * it is within the window, every place passed over fresh. */
    const uint64_t W = SRPC_AUTH_WINDOW, starts[] = {5, 70 + 3 * W, (1ull << 62) - 3 * W - 7};
    for (unsigned si = 0; si < sizeof(starts) / sizeof(starts[0]); si++) {
        for (uint64_t jump = W - 1; jump <= W + 1; jump++) {
            const uint64_t t0 = starts[si];
            memset(&w, 0, sizeof(w));
            int ok = srpc_replay_take(&w, t0 - 2) == 0 && srpc_replay_take(&w, t0) == 0 &&
                     srpc_replay_take(&w, t0 + jump) == 0;
            ok = ok && srpc_replay_fresh(&w, t0) == 0 && srpc_replay_fresh(&w, t0 - 2) == 0 &&
                 srpc_replay_fresh(&w, t0 + jump) == 0 && srpc_replay_take(&w, t0) == -1;
            const uint64_t low = t0 + jump - W; /* the window's lowest place: top - (W - 1) */
            for (uint64_t c = t0 + 1; ok && c < t0 + jump; c++)
                ok = srpc_replay_fresh(&w, c) == (c > low);
            CHECK(ok, "a jump of W%+d from %llu: the old top refused (%s), the places passed fresh within the window",
                  (int)(jump - W), (unsigned long long)t0, jump >= W ? "behind the window" : "taken");
        }
    }
}

int main(void)
{
    for (int i = 0; i < 32; i++)
        PSK[i] = (uint8_t)i, EC[i] = (uint8_t)(0x40 + i), ES[i] = (uint8_t)(0x60 + i);
    if (srpc_v5_available() < 0) {
        printf("# libsodium (with X25519, ChaCha20 and Poly1305) not found: version 5 not tested\n");
        printf("1 passed, 0 failed\n");
        return 0;
    }
    test_example();
    test_aes_example();
    test_aegis_example();
    test_aead_as_libsodium();
    test_aes_as_libsodium();
    test_every_bit();
    test_low_order_keys();
    test_cookie_and_no_session();
    test_window();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}

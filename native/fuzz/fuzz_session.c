/* fuzz_session.c: libFuzzer harness over protocol version 5's parsing (core/session.c, docs/PROTOCOL-v5.md): an INIT as a server reads it (fields, mac1, cookie_mac, the ACCEPT it makes; and a server's table of sessions, server/sessions.c, answering it), an ACCEPT, a COOKIE and a NO_SESSION as a client reads them, and data datagrams opened by both sides of an authenticating and an encrypting session; a client's sessions (client/sessions.c) taking the ACCEPTs, COOKIEs and replies; the input's first byte picks the reader (its low 3 bits) and its options (bits 3 to 6: the session's kind, the side, the AES or AEGIS-128L suite), the rest is the datagram. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <netinet/in.h>

#include "core/session.h"
#include "client/sessions.h"
#include "server/sessions.h"

static uint8_t psk[32], e_c[32], e_s[32], init[SRPC_V5_INIT_LEN];
static srpc_v5_keys_t keys[6]; /* authenticating, encrypting; the same with AES-256-GCM (where the CPU has it), and
                                   with AEGIS-128L (where libsodium has it) */
static srpc_sessions_t table;   /* a server's sessions (server/sessions.c), fed INITs */
static srpc_keytab_t *keytab;
static uint64_t mono = 1000;
static srpc_cl_v5_t client; /* a client (client/sessions.c) holding both sessions, its handshake under way */

/* The client's handshake under way is the one of init (re-armed before each input). */
static void arm_client(void)
{
    memcpy(client.init, init, sizeof(init));
    memcpy(client.e_priv, e_c, sizeof(e_c));
    client.hs_id = 0x010203040506ull;
    client.hs_on = 1;
    client.hs_cookies = 0;
    client.cur = 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    for (int i = 0; i < 32; i++)
        psk[i] = (uint8_t)i, e_c[i] = (uint8_t)(0x40 + i), e_s[i] = (uint8_t)(0x60 + i);
    if (srpc_v5_available() < 0 || srpc_v5_init_make(init, psk, 7, 0x010203040506ull, e_c, 1764331200000ull, 0, NULL, NULL))
        abort();
    uint8_t acc[SRPC_V5_ACCEPT_LEN];
    if (srpc_v5_accept_make(acc, &keys[0], init, psk, e_s, 0x1122334455667788ull, 0) ||
        srpc_v5_accept_make(acc, &keys[1], init, psk, e_s, 0x1122334455667789ull, SRPC_V5_FLAG_ENCRYPT))
        abort();
    for (int i = 0; i < 2; i++) { /* (an AES or AEGIS session's keys: as made, with its flag) */
        keys[2 + i] = keys[4 + i] = keys[i];
        keys[2 + i].session += 2;
        keys[4 + i].session += 4;
        if (srpc_v5_aes_available())
            keys[2 + i].encrypt |= SRPC_V5_FLAG_AES;
        if (srpc_v5_aegis_available())
            keys[4 + i].encrypt |= SRPC_V5_FLAG_AEGIS;
    }
    if (srpc_sessions_init(&table, 64, 4) || srpc_keytab_create(0, 0, &keytab) ||
        srpc_keytab_add(keytab, 7, psk, 32, 0, 1, NULL, 0) || srpc_keytab_seal(keytab))
        abort();
    if (srpc_cl_v5_init(&client, 7, psk, 0, 0))
        abort();
    fprintf(stderr, "fuzz_session: AEGIS-128L sessions %s\n", srpc_v5_aegis_available() ? "on" : "off");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t n)
{
    if (n < 1 || n > 1 + 65535)
        return 0;
    const unsigned op = in[0];
    const uint8_t *d = in + 1;
    const size_t len = n - 1;
    uint8_t *copy = malloc(len ? len : 1); /* exactly the datagram: ASan sees any read past it */
    if (!copy)
        return 0;
    memcpy(copy, d, len);
    arm_client();
    for (int i = 0; i < SRPC_CL_SESSIONS; i++) { /* (an ACCEPT taken below may have replaced one) */
        memset(&client.s[i], 0, sizeof(client.s[i]));
        client.s[i].keys = keys[op & 0x40 ? (i & 1) + 4 : i]; /* bit 6: its AEGIS sessions in place of AES */
        client.s[i].used = 1;
    }
    switch (op & 7) { /* 0..3 and 5: the readers above; 4, 6, 7: a data datagram; bits 3 and 4 choose within */
    case 0: { /* an INIT, as a server reads it */
        srpc_v5_init_t f;
        if (srpc_v5_init_parse(copy, len, &f) == 0) {
            uint8_t cookie[16] = {1}, acc[SRPC_V5_ACCEPT_LEN];
            srpc_v5_keys_t k;
            (void)srpc_v5_init_cookie_ok(copy, cookie);
            if (srpc_v5_init_mac1_ok(copy, psk) || (op & 8))
                (void)srpc_v5_accept_make(acc, &k, copy, psk, e_s, 42, f.flags);
        }
        break;
    }
    case 1: { /* an ACCEPT answering our INIT */
        srpc_v5_keys_t k;
        (void)srpc_v5_accept_open(&k, init, e_c, psk, copy, len);
        if (len <= UINT32_MAX)
            (void)srpc_cl_v5_on_accept(&client, copy, (uint32_t)len, mono);
        break;
    }
    case 2: { /* a COOKIE answering it */
        uint8_t cookie[16];
        (void)srpc_v5_cookie_open(cookie, init, psk, copy, len);
        uint8_t again[SRPC_V5_INIT_LEN];
        if (len <= UINT32_MAX)
            (void)srpc_cl_v5_on_cookie(&client, copy, (uint32_t)len, mono, again);
        break;
    }
    case 3: { /* a NO_SESSION */
        uint64_t s, r;
        uint16_t f;
        (void)srpc_v5_no_session_parse(copy, len, &s, &f, &r);
        break;
    }
    case 5: { /* an INIT at a server's table of sessions (cookies after 4 a second; 64 places) */
        uint8_t out[SRPC_V5_INIT_LEN];
        size_t out_len = 0;
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = (uint16_t)(op << 4)};
        mono += 7;
        (void)srpc_sessions_on_init(&table, keytab, copy, len, (struct sockaddr *)&a, 1764331200000ull, mono, out,
                                    &out_len);
        if (out_len > len)
            abort(); /* an answer larger than its INIT: amplification */
        srpc_session_t *s = srpc_sessions_find(&table, keytab, len >= 8 ? (uint64_t)copy[0] << 56 | copy[1] : 0, mono);
        (void)s;
        (void)srpc_sessions_may_refuse(&table, (struct sockaddr *)&a, mono);
        break;
    }
    default: /* 4, 6, 7: a data datagram of either session, to either side */
        if (len >= SRPC_HDR_LEN + SRPC_V5_TRAILER_LEN) {
            /* bit 5: the AES suite, bit 6 the AEGIS suite (its tail 16 bytes longer) */
            const srpc_v5_keys_t *k = &keys[((op >> 3) & 1) | (op & 0x40 ? 4 : (op >> 4) & 2)];
            const uint32_t tail = srpc_v5_tail_len(k->encrypt);
            if (len >= SRPC_HDR_LEN + tail) {
                const uint32_t dl = (uint32_t)(len - SRPC_HDR_LEN - tail);
                (void)srpc_v5_open(k, (op >> 4) & 1, copy, copy + SRPC_HDR_LEN, dl, copy + SRPC_HDR_LEN + dl);
            }
            uint32_t cl = (uint32_t)(len - SRPC_HDR_LEN); /* as the client opens a reply (client/sessions.c) */
            (void)srpc_cl_v5_open(&client, copy, copy + SRPC_HDR_LEN, &cl);
        }
        break;
    }
    free(copy);
    return 0;
}

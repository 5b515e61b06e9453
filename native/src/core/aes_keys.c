/* aes_keys.c: AES-256-GCM keys expanded once and kept per thread (aes_keys.h). */
#include "core/aes_keys.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/sodium.h"

typedef struct {
    _Alignas(64) unsigned char st[SRPC_SODIUM_AES_STATE_MAX]; /* libsodium's state: 16-aligned */
    uint8_t key[32];
    uint64_t used; /* 0: empty */
} slot_t;

typedef struct {
    slot_t s[SRPC_AES_KEYS_PER_THREAD];
    uint64_t clock;
} cache_t;

static pthread_key_t tls_key;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;
static _Thread_local cache_t *mine;

static void wipe(cache_t *c)
{
    srpc_sodium()->memzero(c, sizeof(*c));
}

static void at_exit(void *p) /* the thread ends: its expanded keys are wiped */
{
    wipe(p);
    free(p);
    mine = NULL; /* a later destructor of this thread that seals makes a new cache (wiped in turn) */
}

static void tls_init(void)
{
    (void)pthread_key_create(&tls_key, at_exit);
}

const void *srpc_aes_state(const uint8_t key[32])
{
    const srpc_sodium_t *so = srpc_sodium();
    if (!so || !so->aes)
        return NULL;
    cache_t *c = mine;
    if (!c) {
        pthread_once(&tls_once, tls_init);
        if (!(c = aligned_alloc(64, sizeof(*c))))
            return NULL;
        memset(c, 0, sizeof(*c));
        if (pthread_setspecific(tls_key, c) != 0) {
            free(c);
            return NULL;
        }
        mine = c;
    }
    slot_t *old = &c->s[0];
    for (int i = 0; i < SRPC_AES_KEYS_PER_THREAD; i++) {
        slot_t *s = &c->s[i];
        if (s->used && memcmp(s->key, key, 32) == 0) { /* keys are ours, never an attacker's: no timing to hide */
            s->used = ++c->clock;
            return s->st;
        }
        if (s->used < old->used)
            old = s;
    }
    so->memzero(old, sizeof(*old));
    if (so->aes_beforenm(old->st, key) != 0)
        return NULL;
    memcpy(old->key, key, 32);
    old->used = ++c->clock;
    return old->st;
}

void srpc_aes_keys_wipe(void)
{
    if (mine)
        wipe(mine);
}

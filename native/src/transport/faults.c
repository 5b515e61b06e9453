/* faults.c: the fault injector of testing builds (see faults.h). */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "transport/faults.h"

#ifdef SRPC_FAULT_INJECTION

struct srpc_faults {
    pthread_mutex_t lock;
    srpc_faults_cfg_t cfg;
    uint64_t rng;                   /* splitmix64 state */
    srpc_fault_dgram_t *head, *tail; /* what came out, oldest first */
    unsigned pending;
    srpc_fault_dgram_t *held;       /* held back until the next datagram comes out */
    srpc_fault_counts_t n;
};

/* splitmix64 (Steele, Lea, Flood 2014): one 64-bit state, passes BigCrush. Lock held. */
static uint64_t next_u64(srpc_faults_t *f)
{
    uint64_t z = (f->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A uniform draw in [0, 1): p = 0 never hits, p = 1 always does. Lock held. */
static int hit(srpc_faults_t *f, double p) { return (double)(next_u64(f) >> 11) * 0x1.0p-53 < p; }

static int prob_ok(double p) { return !isnan(p) && p >= 0.0 && p <= 1.0; }

int srpc_faults_cfg_check(const srpc_faults_cfg_t *c)
{
    return c && prob_ok(c->drop) && prob_ok(c->dup) && prob_ok(c->reorder) && prob_ok(c->corrupt) && prob_ok(c->full)
               ? 0 : -EINVAL;
}

int srpc_faults_create(const srpc_faults_cfg_t *cfg, uint64_t seed, srpc_faults_t **out)
{
    if (!out || srpc_faults_cfg_check(cfg) != 0)
        return -EINVAL;
    srpc_faults_t *f = calloc(1, sizeof(*f));
    if (!f)
        return -ENOMEM;
    pthread_mutex_init(&f->lock, NULL);
    f->cfg = *cfg;
    f->rng = seed;
    *out = f;
    return 0;
}

static void free_all(srpc_faults_t *f)
{
    for (srpc_fault_dgram_t *d = f->head, *nx; d; d = nx) {
        nx = d->next;
        free(d);
    }
    free(f->held);
    f->head = f->tail = f->held = NULL;
    f->pending = 0;
}

void srpc_faults_destroy(srpc_faults_t *f)
{
    if (!f)
        return;
    free_all(f);
    pthread_mutex_destroy(&f->lock);
    free(f);
}

/* Appends d to the FIFO. Lock held. */
static void put_out(srpc_faults_t *f, srpc_fault_dgram_t *d)
{
    d->next = NULL;
    if (f->tail)
        f->tail->next = d;
    else
        f->head = d;
    f->tail = d;
    f->pending++;
}

/* A private copy of the datagram, or NULL. */
static srpc_fault_dgram_t *copy_in(const struct iovec *iov, int n, uint32_t len, const struct sockaddr *addr,
                                   socklen_t addrlen, int flags)
{
    srpc_fault_dgram_t *d = malloc(sizeof(*d) + (len ? len : 1));
    if (!d)
        return NULL;
    memset(d, 0, sizeof(*d));
    d->len = len;
    d->flags = flags;
    if (addr && addrlen > 0 && addrlen <= (socklen_t)sizeof(d->addr)) {
        memcpy(&d->addr, addr, addrlen);
        d->addrlen = addrlen;
    }
    uint32_t off = 0;
    for (int i = 0; i < n && off < len; i++) {
        size_t take = iov[i].iov_len < len - off ? iov[i].iov_len : len - off;
        memcpy(d->bytes + off, iov[i].iov_base, take);
        off += (uint32_t)take;
    }
    if (off < len) /* the pieces were shorter than len: keep what there was */
        d->len = off;
    return d;
}

/* Flips one random bit of the datagram's header bytes. Lock held. */
static void corrupt(srpc_faults_t *f, srpc_fault_dgram_t *d)
{
    uint32_t span = d->len < SRPC_HDR_LEN ? d->len : SRPC_HDR_LEN;
    uint64_t bit = next_u64(f) % ((uint64_t)span * 8);
    d->bytes[bit / 8] ^= (uint8_t)(1u << (bit % 8));
}

int srpc_faults_refuse(srpc_faults_t *f)
{
    if (!(f->cfg.full > 0)) /* no draw: the other faults' sequence stays as without it */
        return 0;
    pthread_mutex_lock(&f->lock);
    int r = hit(f, f->cfg.full);
    f->n.refused += (uint64_t)r;
    pthread_mutex_unlock(&f->lock);
    return r;
}

int srpc_faults_push(srpc_faults_t *f, const struct iovec *iov, int n, uint32_t len,
                     const struct sockaddr *addr, socklen_t addrlen, int flags)
{
    pthread_mutex_lock(&f->lock);
    f->n.in++;
    /* Always four draws, so the fates of later datagrams do not depend on earlier ones. */
    int drop = hit(f, f->cfg.drop), bad = hit(f, f->cfg.corrupt), hold = hit(f, f->cfg.reorder),
        dup = hit(f, f->cfg.dup);
    int r = 0;
    srpc_fault_dgram_t *d = NULL, *d2 = NULL;
    if (drop) {
        f->n.dropped++;
        goto out;
    }
    if (!(d = copy_in(iov, n, len, addr, addrlen, flags))) {
        f->n.discarded++;
        r = -ENOMEM;
        goto out;
    }
    if (bad && d->len) {
        corrupt(f, d);
        f->n.corrupted++;
    }
    if (hold && !f->held) {
        f->held = d;
        f->n.reordered++;
        goto out;
    }
    put_out(f, d);
    if (dup && (d2 = malloc(sizeof(*d) + (d->len ? d->len : 1))) != NULL) {
        memcpy(d2, d, sizeof(*d) + d->len);
        put_out(f, d2);
        f->n.duplicated++;
    }
    if (f->held) { /* held back until this one came out */
        put_out(f, f->held);
        f->held = NULL;
    }
out:
    pthread_mutex_unlock(&f->lock);
    return r;
}

srpc_fault_dgram_t *srpc_faults_pop(srpc_faults_t *f)
{
    pthread_mutex_lock(&f->lock);
    srpc_fault_dgram_t *d = f->head;
    if (d) {
        f->head = d->next;
        if (!f->head)
            f->tail = NULL;
        f->pending--;
        d->next = NULL;
    }
    pthread_mutex_unlock(&f->lock);
    return d;
}

void srpc_faults_release(srpc_faults_t *f)
{
    pthread_mutex_lock(&f->lock);
    if (f->held) {
        put_out(f, f->held);
        f->held = NULL;
    }
    pthread_mutex_unlock(&f->lock);
}

unsigned srpc_faults_pending(srpc_faults_t *f)
{
    pthread_mutex_lock(&f->lock);
    unsigned n = f->pending;
    pthread_mutex_unlock(&f->lock);
    return n;
}

void srpc_faults_discard(srpc_faults_t *f)
{
    pthread_mutex_lock(&f->lock);
    f->n.discarded += f->pending + (f->held ? 1 : 0);
    free_all(f);
    pthread_mutex_unlock(&f->lock);
}

void srpc_faults_count_discarded(srpc_faults_t *f, uint64_t n)
{
    pthread_mutex_lock(&f->lock);
    f->n.discarded += n;
    pthread_mutex_unlock(&f->lock);
}

void srpc_faults_counts(srpc_faults_t *f, srpc_fault_counts_t *out)
{
    pthread_mutex_lock(&f->lock);
    *out = f->n;
    pthread_mutex_unlock(&f->lock);
}

#endif

/* udp_inject.c: the fault injectors (transport/faults.h) on a kernel UDP socket, in testing builds: what arrives passes the RX injector before the datapath sees it, what leaves passes the TX injector before the socket; setting them and reading their counters (-ENOTSUP in other builds). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/wire.h"
#include "transport/faults.h"
#include "transport/udp_sock.h"

#ifdef SRPC_FAULT_INJECTION

/* Moves what came out of the RX injector into slots [0, max): header slot, data slot, source,
 * length and truncation, as recvmmsg would have left them. Returns the count. */
static unsigned rx_deliver(srpc_faults_t *f, srpc_rx_t *rx, unsigned max)
{
    unsigned out = 0;
    srpc_fault_dgram_t *d;
    while (out < max && (d = srpc_faults_pop(f)) != NULL) {
        uint32_t h = d->len < SRPC_HDR_LEN ? d->len : SRPC_HDR_LEN, dl = d->len - h;
        int trunc = (d->flags & MSG_TRUNC) != 0;
        if (dl > rx->data_cap) { /* cannot happen: it came from a slot of this size */
            dl = (uint32_t)rx->data_cap;
            trunc = 1;
        }
        memcpy(srpc_rx_hdr(rx, out), d->bytes, h);
        memcpy(srpc_rx_data(rx, out), d->bytes + h, dl);
        memset(&rx->src[out], 0, sizeof(rx->src[out]));
        memcpy(&rx->src[out], &d->addr, d->addrlen);
        rx->srclen[out] = d->addrlen;
        rx->len[out] = h + dl;
        rx->trunc[out] = (uint8_t)trunc;
        rx->dev[out] = 0;
        rx->gso[out] = 0;
        free(d);
        out++;
    }
    return out;
}

/* Pushes the n datagrams received into slots [0, n) through the RX injector. */
static void rx_push(srpc_faults_t *f, srpc_rx_t *rx, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        for (unsigned j = 0; j < srpc_rx_dgrams(rx, i); j++) { /* coalesced ones one by one */
            const srpc_rx_dg_t d = srpc_rx_dgram(rx, i, j);
            struct iovec iv[2] = {{(void *)d.hdr, d.len < SRPC_HDR_LEN ? d.len : SRPC_HDR_LEN},
                                  {(void *)d.data, d.len > SRPC_HDR_LEN ? d.len - SRPC_HDR_LEN : 0}};
            (void)srpc_faults_push(f, iv, 2, d.len, (const struct sockaddr *)&rx->src[i], rx->srclen[i],
                                   rx->trunc[i] ? MSG_TRUNC : 0); /* -ENOMEM: counted as discarded */
        }
}

/* srpc_udp_rx_burst through the RX injector: what it still has to give out goes first; else the
 * socket is read until something comes out (a few rounds at most, in case all were dropped),
 * and the datagram held back is let out once the socket has nothing more. */
int srpc_udp_rx_burst_faulty(srpc_udp_t *u, srpc_rx_t *rx, unsigned max)
{
    srpc_faults_t *f = u->rx_faults;
    int err = 0;
    for (int round = 0; round < 8 && srpc_faults_pending(f) == 0; round++) {
        int n = srpc_udp_recv_socket(u, rx, max);
        if (n < 0) {
            if (n == -EAGAIN)
                srpc_faults_release(f);
            else
                err = n;
            break;
        }
        rx_push(f, rx, (unsigned)n);
    }
    unsigned out = rx_deliver(f, rx, max);
    return out ? (int)out : err ? err : -EAGAIN;
}

/* Sends what came out of the TX injector, up to TX_BURST datagrams per sendmmsg; what the
 * socket refuses is counted as discarded. Returns 0 or the last -errno. */
static int tx_drain(srpc_udp_t *u)
{
    srpc_faults_t *f = u->tx_faults;
    int rc = 0;
    for (;;) {
        srpc_fault_dgram_t *d[TX_BURST];
        struct iovec iov[TX_BURST];
        struct mmsghdr m[TX_BURST];
        unsigned k = 0;
        while (k < TX_BURST && (d[k] = srpc_faults_pop(f)) != NULL) {
            iov[k] = (struct iovec){d[k]->bytes, d[k]->len};
            m[k].msg_hdr = (struct msghdr){.msg_name = d[k]->addrlen ? &d[k]->addr : NULL,
                                           .msg_namelen = d[k]->addrlen, .msg_iov = &iov[k], .msg_iovlen = 1};
            m[k].msg_len = 0;
            k++;
        }
        if (k == 0)
            return rc;
        unsigned done;
        int r = srpc_udp_send_socket(u->fd, m, k, &done);
        if (r < 0) {
            srpc_faults_count_discarded(f, k - done);
            rc = r;
        }
        for (unsigned i = 0; i < k; i++)
            free(d[i]);
    }
}

/* The sending half of srpc_udp_send through the TX injector. The datagrams are copied in, so
 * whatever comes out (possibly another thread's) is sent from the injector's copies; every
 * datagram the injector takes counts as sent, dropped or not, as on a lossy wire. */
int srpc_udp_send_faulty(srpc_udp_t *u, struct mmsghdr *msgs, unsigned cnt, unsigned *done)
{
    unsigned take = 0;
    while (take < cnt && !srpc_faults_refuse(u->tx_faults)) /* a refusal ends the burst, as EAGAIN would */
        take++;
    for (unsigned i = 0; i < take; i++) {
        const struct msghdr *h = &msgs[i].msg_hdr;
        size_t len = 0;
        for (size_t k = 0; k < h->msg_iovlen; k++)
            len += h->msg_iov[k].iov_len;
        (void)srpc_faults_push(u->tx_faults, h->msg_iov, (int)h->msg_iovlen, (uint32_t)len, h->msg_name,
                               h->msg_namelen, 0); /* -ENOMEM: counted as discarded */
    }
    int r = tx_drain(u);
    *done = r < 0 ? 0 : take; /* what the socket refused fails the messages, as without faults */
    return r < 0 ? r : take < cnt ? -EAGAIN : 0;
}

/* Lets the TX datagram held back go out: called on every receive, so that a held reply or
 * request waits at most until the socket's owner looks for what came back. */
void srpc_udp_tx_release_held(srpc_udp_t *u)
{
    srpc_faults_release(u->tx_faults);
    (void)tx_drain(u); /* a refusal is counted as discarded */
}

int srpc_udp_set_faults(srpc_udp_t *u, const srpc_faults_cfg_t *rx, const srpc_faults_cfg_t *tx, uint64_t seed)
{
    if (!u || (rx && srpc_faults_cfg_check(rx) != 0) || (tx && srpc_faults_cfg_check(tx) != 0))
        return -EINVAL;
    srpc_faults_t *nr = NULL, *nt = NULL;
    /* Two streams from one seed: distinct starting points of splitmix64. */
    if ((rx && srpc_faults_create(rx, seed, &nr) != 0) ||
        (tx && srpc_faults_create(tx, seed ^ 0x5bd1e9955bd1e995ull, &nt) != 0)) {
        srpc_faults_destroy(nr);
        return -ENOMEM;
    }
    srpc_faults_destroy(u->rx_faults);
    srpc_faults_destroy(u->tx_faults);
    u->rx_faults = nr;
    u->tx_faults = nt;
    return 0;
}

int srpc_udp_fault_counts(const srpc_udp_t *u, srpc_fault_counts_t *rx, srpc_fault_counts_t *tx)
{
    if (!u)
        return -EINVAL;
    if (rx) {
        memset(rx, 0, sizeof(*rx));
        if (u->rx_faults)
            srpc_faults_counts(u->rx_faults, rx);
    }
    if (tx) {
        memset(tx, 0, sizeof(*tx));
        if (u->tx_faults)
            srpc_faults_counts(u->tx_faults, tx);
    }
    return 0;
}

#else /* no fault injection in this build: the hooks above are absent */

int srpc_udp_set_faults(srpc_udp_t *u, const srpc_faults_cfg_t *rx, const srpc_faults_cfg_t *tx, uint64_t seed)
{
    (void)u, (void)rx, (void)tx, (void)seed;
    return -ENOTSUP;
}

int srpc_udp_fault_counts(const srpc_udp_t *u, srpc_fault_counts_t *rx, srpc_fault_counts_t *tx)
{
    (void)u, (void)rx, (void)tx;
    return -ENOTSUP;
}

#endif

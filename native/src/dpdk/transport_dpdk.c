/* transport_dpdk.c: the transport (transport/transport.h) of a server or a client on a DPDK port (see transport_dpdk.h): opening it (a server's address and payload memory, a client's peer, its MAC given or asked by ARP), a client's receive kept to its peer, sends routed to the port. The port itself is dpdk_port.c (control) and dpdk_rx.c / dpdk_tx.c (datapath). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "core/clock.h"
#include "core/wire.h"
#include "dpdk/dpdk_port.h"
#include "gpu/gpu_driver.h"
#include "splitrpc_gpu.h"

typedef struct dpdk_transport {
    srpc_transport_t t;
    srpc_dpdk_port_t *port;
    uint16_t udp_port;       /* ours */
    int connected;           /* a client: peer is where sends with no dst go and all that is taken */
    struct sockaddr_in peer;
} dpdk_transport_t;

static dpdk_transport_t *dt_of(srpc_transport_t *t) { return (dpdk_transport_t *)t; }

/* Whether datagram i of rx came from the connected peer. */
static int from_peer(const dpdk_transport_t *d, const srpc_rx_t *rx, unsigned i)
{
    const struct sockaddr_in *s = (const struct sockaddr_in *)&rx->src[i];
    return s->sin_family == AF_INET && s->sin_addr.s_addr == d->peer.sin_addr.s_addr &&
           s->sin_port == d->peer.sin_port;
}

/* Moves datagram j of rx into slot i (i < j). */
static void move_slot(srpc_rx_t *rx, unsigned i, unsigned j)
{
    memcpy(srpc_rx_hdr(rx, i), srpc_rx_hdr(rx, j), SRPC_HDR_LEN);
    if (!rx->dev[j] && rx->len[j] > SRPC_HDR_LEN) {
        size_t dl = rx->len[j] - SRPC_HDR_LEN;
        memcpy(srpc_rx_data(rx, i), srpc_rx_data(rx, j), dl < rx->data_cap ? dl : rx->data_cap);
    }
    rx->len[i] = rx->len[j];
    rx->trunc[i] = rx->trunc[j];
    rx->src[i] = rx->src[j];
    rx->srclen[i] = rx->srclen[j];
    rx->dev[i] = rx->dev[j];
}

/* The caller made the payload device's context current where there is one (transport.h). */
static int op_rx_burst(srpc_transport_t *t, srpc_rx_t *rx, unsigned max)
{
    dpdk_transport_t *d = dt_of(t);
    srpc_dpdk_rx_release(d->port);
    int n = srpc_dpdk_rx_burst_current(d->port, rx, max);
    if (n <= 0 || !d->connected)
        return n;
    unsigned kept = 0;
    for (unsigned j = 0; j < (unsigned)n; j++) {
        if (!from_peer(d, rx, j)) {
            d->port->st.drops[SRPC_FRAME_NOT_OURS]++;
            continue;
        }
        if (kept != j)
            move_slot(rx, kept, j);
        kept++;
    }
    return (int)kept;
}

static void op_rx_release(srpc_transport_t *t) { srpc_dpdk_rx_release(dt_of(t)->port); }

static int op_send(srpc_transport_t *t, srpc_tx_msg_t *msgs, unsigned n)
{
    dpdk_transport_t *d = dt_of(t);
    int whole = 0;
    for (unsigned i = 0; i < n; i++) {
        srpc_tx_msg_t *m = &msgs[i];
        const struct sockaddr *dst = m->dst ? m->dst : (const struct sockaddr *)&d->peer;
        socklen_t dl = m->dst ? m->dstlen : (socklen_t)sizeof(d->peer);
        if (!m->dst && !d->connected)
            m->result = -EDESTADDRREQ;
        else if (m->npieces > SRPC_TX_MAX_PIECES)
            m->result = -EINVAL;
        else
            m->result = srpc_dpdk_send_tx_msg(d->port, dst, dl, m);
        whole += m->result >= 0;
    }
    return whole;
}

static int op_local_port(const srpc_transport_t *t) { return ((const dpdk_transport_t *)t)->udp_port; }

static void op_close(srpc_transport_t *t)
{
    srpc_dpdk_port_close(dt_of(t)->port);
    free(t);
}

static const srpc_transport_ops_t dpdk_ops = {
    .name = "dpdk",
    .rx_burst = op_rx_burst,
    .rx_release = op_rx_release,
    .send = op_send,
    .local_port = op_local_port,
    .close = op_close,
};

int srpc_dpdk_transport_stats(const srpc_transport_t *t, srpc_dpdk_stats_t *st)
{
    if (!t || !st || t->ops != &dpdk_ops)
        return -EINVAL;
    srpc_dpdk_port_stats(((const dpdk_transport_t *)t)->port, st);
    return 0;
}

static int parse_mac(const char *s, uint8_t mac[6])
{
    unsigned v[6];
    char tail;
    if (sscanf(s, "%x:%x:%x:%x:%x:%x%c", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &tail) != 6)
        return -EINVAL;
    for (int i = 0; i < 6; i++) {
        if (v[i] > 255)
            return -EINVAL;
        mac[i] = (uint8_t)v[i];
    }
    return 0;
}

/* Asks who has ip until the answer is learned (2 s at most): a client's server. */
static int arp_resolve(srpc_dpdk_port_t *p, uint32_t ip, uint16_t our_port)
{
    srpc_endpoint_t self = {.ip = p->self.ip, .port = our_port};
    memcpy(self.mac, p->self.mac, 6);
    uint8_t f[SRPC_ARP_FRAME_LEN];
    srpc_frame_build_arp(f, 0, &self, NULL, ip);
    srpc_rx_t rx; /* ARP replies are learned inside the burst; nothing else is expected yet */
    int rc = srpc_rx_init(&rx, 16, 2048);
    for (int tries = 0; rc == 0 && tries < 20; tries++) {
        srpc_dpdk_send_frame(p, f, sizeof(f));
        for (uint64_t until = srpc_now_ns() + 100000000ull; srpc_now_ns() < until;) {
            srpc_dpdk_rx_burst(p, &rx, 0);
            if (srpc_dpdk_neighbour_known(p, ip)) {
                srpc_rx_free(&rx);
                return 0;
            }
        }
    }
    srpc_rx_free(&rx);
    return rc ? rc : -EHOSTUNREACH;
}

int srpc_dpdk_transport_open(const srpc_transport_spec_t *spec, srpc_transport_t **out)
{
    struct in_addr host, local;
    if (!spec || !out || !spec->dpdk_dev || !spec->host || spec->port == 0 ||
        (spec->dpdk_mtu && spec->dpdk_mtu < 576) || inet_pton(AF_INET, spec->host, &host) != 1 ||
        (spec->bind && (spec->dpdk_payload_gpu < SRPC_DPDK_PAYLOAD_AUTO || spec->dpdk_payload_gpu >= SRPC_GPU_MAX_DEVICES)) ||
        (!spec->bind && (!spec->dpdk_local_ip || inet_pton(AF_INET, spec->dpdk_local_ip, &local) != 1)))
        return -EINVAL;
    dpdk_transport_t *d = calloc(1, sizeof(*d));
    if (!d)
        return -ENOMEM;
    srpc_dpdk_port_config_t pc = {.dev = spec->dpdk_dev, .mtu = spec->dpdk_mtu, .gpu_device = -1};
    if (spec->bind) {
        int gpu = spec->dpdk_payload_gpu;
        if (gpu == SRPC_DPDK_PAYLOAD_AUTO) /* quietly host memory on a machine without a GPU */
            gpu = srpc_gpu_device_count() > 0 ? 0 : -1;
        pc.ip = ntohl(host.s_addr);
        pc.udp_port = d->udp_port = spec->port;
        pc.payload_on_gpu = gpu >= 0;
        pc.gpu_device = gpu;
        pc.emulate_split = spec->dpdk_emulate_split;
    } else {
        uint16_t lport = spec->dpdk_local_port;
        if (!lport) {
            uint16_t rnd = 0;
            if (getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd))
                rnd = (uint16_t)srpc_now_ns();
            lport = (uint16_t)(49152 + rnd % 16384);
        }
        pc.ip = ntohl(local.s_addr);
        pc.udp_port = d->udp_port = lport;
        d->connected = 1;
        d->peer = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons(spec->port), .sin_addr = host};
    }
    int rc = srpc_dpdk_port_open(&pc, &d->port);
    if (rc == 0 && d->connected) {
        uint8_t mac[6];
        if (spec->dpdk_peer_mac) {
            rc = parse_mac(spec->dpdk_peer_mac, mac);
            if (rc == 0)
                rc = srpc_dpdk_neighbour_add(d->port, ntohl(host.s_addr), mac);
        } else
            rc = arp_resolve(d->port, ntohl(host.s_addr), d->udp_port);
    }
    if (rc) {
        srpc_dpdk_port_close(d->port);
        free(d);
        return rc;
    }
    const uint16_t mtu = spec->dpdk_mtu ? spec->dpdk_mtu : 1500;
    d->t = (srpc_transport_t){.ops = &dpdk_ops, .wait_fd = -1,
                              .max_seg = (uint32_t)(mtu - SRPC_IP4_HLEN - SRPC_UDP_HLEN - SRPC_HDR_LEN),
                              .payload_device = srpc_dpdk_payload_device(d->port),
                              .peer_loopback = d->connected && ntohl(d->peer.sin_addr.s_addr) >> 24 == 127};
    *out = &d->t;
    return 0;
}

/* transport_dpdk.c: kernel-bypass UDP on one DPDK port (see transport_dpdk.h): header/payload split on receive (by the NIC into a header pool and a payload pool where it can, else in software), chained mbufs on send, ARP. */
#include "dpdk/transport_dpdk.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include "core/auth.h"
#include "core/clock.h"
#include "core/session.h"
#include "core/tunables.h"
#include "dpdk/dpdk_payload_pool.h"
#include "dpdk/dpdk_split_emulation.h"
#include "gpu/gpu_driver.h"
#include "splitrpc_gpu.h"
#include "core/wire.h"

#define NEIGH_SLOTS 256 /* open addressing, keyed by IPv4 address */
#define RX_CHUNK 32
#define TX_CHUNK 32
#define MAX_FRAME_SEGS 8 /* mbufs of one received frame we look through */
#define TX_RETRIES 1000  /* tx_burst calls that take nothing before waiting for room */

struct neigh {
    uint32_t ip; /* 0: free */
    uint8_t mac[6];
};

struct srpc_dpdk_port {
    uint16_t port_id;
    srpc_endpoint_t self;
    uint16_t mtu;
    int started;
    int tx_csum;   /* the port computes IPv4 and UDP checksums */
    int rx_csum;   /* the port verifies them and says so in ol_flags */
    int multi_seg; /* the port sends chained mbufs */
    /* The TX queue, the neighbour table, ip_id and the tx counters are shared by the threads
     * that send (replies, errors) and the one that receives (ARP answers, learning). */
    pthread_mutex_t tx_lock;
    uint16_t ip_id;
    struct rte_mempool *pool;     /* TX mbufs, and RX without a hardware split */
    struct rte_mempool *hdr_pool; /* hardware split: the first 64 bytes of each frame */
    struct rte_mempool *data_pool; /* hardware split: the rest (payload) */
    srpc_payload_pool_t *payload;  /* data_pool's external memory, when it has some (else NULL:
                                      data_pool is DPDK memory, or there is no split) */
    int gpu;         /* the CUDA device data_pool's memory is on, or -1 (host memory) */
    uint64_t stream; /* gpu: the receiving thread's copies (emulation, device to host) */
    struct rte_mbuf **held; /* gpu: frames whose data was handed on as device addresses */
    unsigned n_held, held_cap;
    struct neigh neigh[NEIGH_SLOTS];
    struct neigh last_learned; /* the receiving thread's: the sender it last put in the table */
    srpc_dpdk_port_stats_t st;
};

/* ------------------------------------------------------------------ neighbours */

static unsigned neigh_hash(uint32_t ip)
{
    return (ip * 2654435761u) >> 24; /* 8 bits */
}

static struct neigh *neigh_find(srpc_dpdk_port_t *p, uint32_t ip)
{
    for (unsigned i = 0, h = neigh_hash(ip); i < NEIGH_SLOTS; i++) {
        struct neigh *n = &p->neigh[(h + i) % NEIGH_SLOTS];
        if (n->ip == ip || n->ip == 0)
            return n;
    }
    return NULL;
}

/* tx_lock held. */
static int neigh_set(srpc_dpdk_port_t *p, uint32_t ip, const uint8_t mac[6])
{
    struct neigh *n = neigh_find(p, ip);
    if (!n)
        return -ENOSPC;
    if (n->ip != ip || memcmp(n->mac, mac, 6) != 0) {
        n->ip = ip;
        memcpy(n->mac, mac, 6);
    }
    return 0;
}

int srpc_dpdk_neighbour_add(srpc_dpdk_port_t *p, uint32_t ip, const uint8_t mac[6])
{
    if (!p || !mac || ip == 0)
        return -EINVAL;
    pthread_mutex_lock(&p->tx_lock);
    int rc = neigh_set(p, ip, mac);
    pthread_mutex_unlock(&p->tx_lock);
    return rc;
}

int srpc_dpdk_neighbour_known(srpc_dpdk_port_t *p, uint32_t ip)
{
    pthread_mutex_lock(&p->tx_lock);
    const struct neigh *n = neigh_find(p, ip);
    int known = n && n->ip == ip && ip != 0;
    pthread_mutex_unlock(&p->tx_lock);
    return known;
}

/* ------------------------------------------------------------------ open / close */

/* The payload pool of a hardware split, in order of preference: GPU memory when asked for
 * and the driver has the device; host memory of our own, registered and DMA-mapped like it;
 * a pool of DPDK's own memory (e.g. under IOVA-as-PA). What was not made and why is logged.
 * Sets p->data_pool (and p->payload) and the payload_pool counter. */
static int make_payload_pool(srpc_dpdk_port_t *p, const srpc_dpdk_port_config_t *cfg, unsigned n, uint16_t room,
                             int socket)
{
    char name[RTE_MEMPOOL_NAMESIZE];
    snprintf(name, sizeof(name), "srpc_d%u", p->port_id);
    srpc_payload_pool_config_t pc = {.name = name, .port_id = p->port_id, .n = n, .data_room = room,
                                     .socket = socket, .on_gpu = cfg->payload_on_gpu != 0,
                                     .gpu_device = cfg->gpu_device};
    if (pc.on_gpu && !p->rx_csum && !p->st.rx_split_emulated) {
        fprintf(stderr, "splitrpc: %s: the port does not verify UDP checksums, and payloads in GPU memory "
                        "cannot be summed on the host: payloads go to host memory instead\n", cfg->dev);
        pc.on_gpu = 0;
    }
    for (;;) {
        if (srpc_payload_pool_create(&pc, &p->payload) == 0) {
            p->data_pool = srpc_payload_pool_mempool(p->payload);
            p->st.payload_pool = (uint64_t)srpc_payload_pool_kind(p->payload);
            if (p->st.payload_pool != SRPC_DPDK_PAYLOAD_GPU)
                return 0;
            p->gpu = pc.gpu_device;
            int rc = srpc_gpu_stream_create(p->gpu, &p->stream);
            if (rc)
                fprintf(stderr, "splitrpc: %s: %s\n", cfg->dev, srpc_gpu_last_error());
            return rc;
        }
        fprintf(stderr, "splitrpc: %s: %s; %s\n", cfg->dev, srpc_payload_pool_last_error(),
                pc.on_gpu ? "payloads go to host memory instead" : "payloads go to DPDK memory instead");
        if (!pc.on_gpu)
            break;
        pc.on_gpu = 0;
    }
    p->data_pool = rte_pktmbuf_pool_create(name, n, 256, 0, room, socket);
    p->st.payload_pool = SRPC_DPDK_PAYLOAD_DPDK;
    return p->data_pool ? 0 : -rte_errno;
}

static void free_split_pools(srpc_dpdk_port_t *p)
{
    srpc_gpu_stream_destroy(p->stream);
    p->stream = 0;
    p->gpu = -1;
    rte_mempool_free(p->hdr_pool);
    if (p->payload)
        srpc_payload_pool_destroy(p->payload); /* frees data_pool, its mempool */
    else
        rte_mempool_free(p->data_pool);
    p->hdr_pool = p->data_pool = NULL;
    p->payload = NULL;
    p->st.payload_pool = SRPC_DPDK_PAYLOAD_NONE;
}

/* The RX queue. Where the port can split frames into two mempools (mlx5 and others with
 * RTE_ETH_RX_OFFLOAD_BUFFER_SPLIT), segment 0 takes the 64-byte control part (Ethernet, IPv4,
 * UDP, splitrpc header) from a small host pool and segment 1 the payload from the payload
 * pool (make_payload_pool); take_frame reads the chain either way, but never one in GPU memory.
 * Elsewhere, or if the port refuses the split, whole frames land in p->pool. */
static int setup_rx(srpc_dpdk_port_t *p, const srpc_dpdk_port_config_t *cfg, const struct rte_eth_dev_info *info,
                    uint16_t nb_rxd, int socket, uint64_t offloads)
{
    const uint16_t ctl = SRPC_FRAME_HLEN + SRPC_HDR_LEN;
    if ((info->rx_offload_capa & RTE_ETH_RX_OFFLOAD_BUFFER_SPLIT) && info->rx_seg_capa.multi_pools &&
        info->rx_seg_capa.max_nseg >= 2) {
        char name[RTE_MEMPOOL_NAMESIZE];
        unsigned n = 2 * nb_rxd + 1023;
        snprintf(name, sizeof(name), "srpc_h%u", p->port_id);
        p->hdr_pool = rte_pktmbuf_pool_create(name, n, 256, 0, RTE_PKTMBUF_HEADROOM + 128, socket);
        if (p->hdr_pool && make_payload_pool(p, cfg, n, RTE_PKTMBUF_HEADROOM + p->mtu + 64, socket) == 0) {
            union rte_eth_rxseg seg[2];
            memset(seg, 0, sizeof(seg));
            seg[0].split = (struct rte_eth_rxseg_split){.mp = p->hdr_pool, .length = ctl};
            seg[1].split = (struct rte_eth_rxseg_split){.mp = p->data_pool, .length = 0};
            struct rte_eth_rxconf rxc = info->default_rxconf;
            rxc.offloads = offloads | RTE_ETH_RX_OFFLOAD_BUFFER_SPLIT;
            rxc.rx_seg = seg;
            rxc.rx_nseg = 2;
            int rc = rte_eth_rx_queue_setup(p->port_id, 0, nb_rxd, (unsigned)socket, &rxc, NULL);
            if (rc == 0) {
                p->st.rx_buffer_split = 1;
                return 0;
            }
            fprintf(stderr, "splitrpc: %s: the port refused the RX buffer split (%s): split in software\n",
                    cfg->dev, rte_strerror(-rc));
        }
        free_split_pools(p); /* refused: split in software instead */
    }
    if (cfg->emulate_split) { /* whole frames land in p->pool; rx_burst splits them into data_pool */
        p->st.rx_split_emulated = 1; /* also tells make_payload_pool the checksums get verified */
        int rc = make_payload_pool(p, cfg, 2 * nb_rxd + 1023, RTE_PKTMBUF_HEADROOM + p->mtu + 64, socket);
        if (rc) {
            free_split_pools(p);
            return rc;
        }
    }
    return rte_eth_rx_queue_setup(p->port_id, 0, nb_rxd, (unsigned)socket, NULL, p->pool);
}

int srpc_dpdk_port_open(const srpc_dpdk_port_config_t *cfg, srpc_dpdk_port_t **out)
{
    if (!cfg || !cfg->dev || !out || cfg->ip == 0 || cfg->udp_port == 0)
        return -EINVAL;
    *out = NULL;
    uint16_t mtu = cfg->mtu ? cfg->mtu : 1500;
    if (mtu < SRPC_IP4_HLEN + SRPC_UDP_HLEN + SRPC_HDR_LEN + 1 || mtu > 9600)
        return -EINVAL;
    uint16_t port_id;
    if (rte_eth_dev_get_port_by_name(cfg->dev, &port_id) != 0)
        return -ENODEV;
    srpc_dpdk_port_t *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    pthread_mutex_init(&p->tx_lock, NULL);
    p->port_id = port_id;
    p->gpu = -1;
    p->mtu = mtu;
    p->self.ip = cfg->ip;
    p->self.port = cfg->udp_port;

    struct rte_eth_dev_info info;
    int rc = rte_eth_dev_info_get(port_id, &info);
    if (rc != 0)
        goto fail;
    char name[RTE_MEMPOOL_NAMESIZE];
    snprintf(name, sizeof(name), "srpc_%u", port_id);
    /* A frame of mtu bytes fits one mbuf, so received frames are rarely chained. */
    uint32_t room = RTE_PKTMBUF_HEADROOM + (mtu + SRPC_ETH_HLEN + 4 > 2048 ? mtu + SRPC_ETH_HLEN + 4 : 2048);
    p->pool = rte_pktmbuf_pool_create(name, cfg->n_mbufs ? cfg->n_mbufs : 8191, 256, 0, (uint16_t)room,
                                      rte_eth_dev_socket_id(port_id) < 0 ? 0 : rte_eth_dev_socket_id(port_id));
    if (!p->pool) {
        rc = -rte_errno;
        goto fail;
    }
    struct rte_eth_conf conf;
    memset(&conf, 0, sizeof(conf));
    const uint64_t rx_ck = RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | RTE_ETH_RX_OFFLOAD_UDP_CKSUM;
    const uint64_t tx_ck = RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | RTE_ETH_TX_OFFLOAD_UDP_CKSUM;
    p->rx_csum = (info.rx_offload_capa & rx_ck) == rx_ck;
    p->tx_csum = (info.tx_offload_capa & tx_ck) == tx_ck;
    p->multi_seg = cfg->tx_chain ? cfg->tx_chain > 0 : (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS) != 0;
    conf.rxmode.offloads = p->rx_csum ? rx_ck : 0;
    conf.txmode.offloads = (p->tx_csum ? tx_ck : 0) |
                           (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS && p->multi_seg ? RTE_ETH_TX_OFFLOAD_MULTI_SEGS : 0);
    if ((rc = rte_eth_dev_configure(port_id, 1, 1, &conf)) != 0)
        goto fail;
    uint16_t nb_rxd = 1024, nb_txd = 1024;
    if ((rc = rte_eth_dev_adjust_nb_rx_tx_desc(port_id, &nb_rxd, &nb_txd)) != 0)
        goto fail;
    int socket = rte_eth_dev_socket_id(port_id);
    socket = socket < 0 ? 0 : socket;
    if ((rc = setup_rx(p, cfg, &info, nb_rxd, socket, conf.rxmode.offloads)) != 0)
        goto fail;
    struct rte_eth_txconf txc = info.default_txconf;
    txc.offloads = conf.txmode.offloads;
    if ((rc = rte_eth_tx_queue_setup(port_id, 0, nb_txd, (unsigned)socket, &txc)) != 0)
        goto fail;
    if ((rc = rte_eth_dev_start(port_id)) != 0)
        goto fail;
    p->started = 1;
    struct rte_ether_addr mac;
    if ((rc = rte_eth_macaddr_get(port_id, &mac)) != 0)
        goto fail;
    memcpy(p->self.mac, mac.addr_bytes, 6);
    *out = p;
    return 0;
fail:
    srpc_dpdk_port_close(p);
    return rc < 0 ? rc : -EIO;
}

void srpc_dpdk_port_close(srpc_dpdk_port_t *p)
{
    if (!p)
        return;
    if (p->started)
        rte_eth_dev_stop(p->port_id);
    srpc_dpdk_rx_release(p);
    free(p->held);
    rte_eth_dev_close(p->port_id); /* releases the queues' mbufs before the pool goes */
    rte_mempool_free(p->pool);
    free_split_pools(p); /* after the close: the mbufs are back in their pools */
    pthread_mutex_destroy(&p->tx_lock);
    free(p);
}

void srpc_dpdk_port_mac(const srpc_dpdk_port_t *p, uint8_t mac[6])
{
    memcpy(mac, p->self.mac, 6);
}

void srpc_dpdk_port_stats(const srpc_dpdk_port_t *p, srpc_dpdk_port_stats_t *st)
{
    *st = p->st;
}

/* ------------------------------------------------------------------ send */

/* Hands n mbufs to the port; frees and counts what it does not take. */
static int tx_all(srpc_dpdk_port_t *p, struct rte_mbuf **m, unsigned n)
{
    unsigned done = 0;
    uint64_t give_up = 0;
    for (int idle = 0; done < n;) {
        uint16_t k = rte_eth_tx_burst(p->port_id, 0, m + done, (uint16_t)(n - done));
        done += k;
        idle = k ? 0 : idle + 1;
        if (idle < TX_RETRIES)
            continue;
        /* The queue stays full: a slow peer (a memif whose other end is busy), not a lost one.
         * Wait for room a while, 20 us at a time, before failing the send. */
        uint64_t now = srpc_now_ns();
        if (!give_up)
            give_up = now + SRPC_TX_FULL_WAIT_US * 1000ull;
        else if (now >= give_up)
            break;
        struct timespec ts = {0, 20000};
        nanosleep(&ts, NULL);
        idle = TX_RETRIES - 1; /* one try after each pause */
    }
    p->st.tx_frames += done;
    if (done < n) {
        p->st.tx_failed += n - done;
        rte_pktmbuf_free_bulk(m + done, n - done);
        return -EAGAIN;
    }
    return 0;
}

/* tx_lock held. */
static int send_frame(srpc_dpdk_port_t *p, const void *frame, size_t len)
{
    struct rte_mbuf *m = rte_pktmbuf_alloc(p->pool);
    if (!m)
        return -ENOBUFS;
    char *d = len <= UINT16_MAX ? rte_pktmbuf_append(m, (uint16_t)len) : NULL;
    if (!d) {
        rte_pktmbuf_free(m);
        return -EMSGSIZE;
    }
    memcpy(d, frame, len);
    return tx_all(p, &m, 1);
}

int srpc_dpdk_send_frame(srpc_dpdk_port_t *p, const void *frame, size_t len)
{
    if (!p || !frame)
        return -EINVAL;
    pthread_mutex_lock(&p->tx_lock);
    int rc = send_frame(p, frame, len);
    pthread_mutex_unlock(&p->tx_lock);
    return rc;
}

/* Copies the next len bytes of the pieces (cursor *pi, *poff) to dst. */
static int gather(uint8_t *dst, uint32_t len, const struct iovec *pieces, int n, int *pi, size_t *poff)
{
    while (len) {
        if (*pi >= n)
            return -EINVAL; /* pieces shorter than msg_len */
        size_t avail = pieces[*pi].iov_len - *poff;
        size_t take = avail < len ? avail : len;
        memcpy(dst, (const uint8_t *)pieces[*pi].iov_base + *poff, take);
        dst += take;
        len -= (uint32_t)take;
        *poff += take;
        if (*poff == pieces[*pi].iov_len) {
            (*pi)++;
            *poff = 0;
        }
    }
    return 0;
}

/* Asks the port to compute frame h's IPv4 and UDP checksums, where it can (p->tx_csum). */
static void tx_offload(const srpc_dpdk_port_t *p, struct rte_mbuf *h)
{
    if (p->tx_csum) {
        h->ol_flags |= RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM | RTE_MBUF_F_TX_UDP_CKSUM;
        h->l2_len = SRPC_ETH_HLEN;
        h->l3_len = SRPC_IP4_HLEN;
    }
}

/* Builds one frame and returns its head, or NULL after freeing h and d: the 64-byte control
 * part (Ethernet, IPv4, UDP, srpc header) in h, chained to d holding the segment's data and, for
 * version 3, its data check, for version 4 its trailer signed as auth says, for version 5 its
 * session's trailer (the data encrypted in place in an encrypting session) (or all in h when
 * d == h, for a port that cannot send chains). *rc gets the error. */
static struct rte_mbuf *fill_frame(srpc_dpdk_port_t *p, struct rte_mbuf *h, struct rte_mbuf *d,
                                   const srpc_endpoint_t *dst, const srpc_hdr_t *sh, uint32_t len,
                                   const struct iovec *pieces, int n, int *pi, size_t *poff,
                                   const srpc_tx_auth_t *auth, int *rc)
{
    const uint32_t check = sh->version == SRPC_VERSION_5 && auth ? srpc_v5_tail_len(auth->encrypt)
                                                                  : srpc_tail_len(sh->version);
    const uint32_t wire = len + check; /* after the header */
    if (d != h && wire == 0) { /* no data: no payload mbuf */
        rte_pktmbuf_free(d);
        d = h;
    }
    uint8_t *ctl = (uint8_t *)rte_pktmbuf_append(h, SRPC_FRAME_HLEN + SRPC_HDR_LEN);
    uint8_t *data = wire ? (uint8_t *)rte_pktmbuf_append(d, (uint16_t)wire) : NULL;
    *rc = !ctl || (wire && !data) ? -EMSGSIZE : 0;
    if (!*rc) {
        srpc_hdr_encode(sh, ctl + SRPC_FRAME_HLEN);
        *rc = gather(data, len, pieces, n, pi, poff);
    }
    if (!*rc && sh->version == SRPC_VERSION_3) /* the CRC-32C of the header and the data, after the data */
        srpc_put_data_check(data + len, srpc_crc32c(srpc_crc32c(0, ctl + SRPC_FRAME_HLEN, SRPC_HDR_LEN), data, len));
    if (!*rc && sh->version == SRPC_VERSION_4) { /* the trailer: key, sender, counter, time, tag */
        const struct iovec signed_part[2] = {{ctl + SRPC_FRAME_HLEN, SRPC_HDR_LEN}, {data, len}};
        *rc = srpc_auth_sign_iov(auth->key_id, auth->secret, auth->sender, auth->counter, signed_part, 2, data + len);
    }
    if (!*rc && sh->version == SRPC_VERSION_5) { /* session, counter and tag after the data (docs/PROTOCOL-v5.md) */
        const struct iovec plain = {data, len};
        *rc = srpc_v5_seal_key(auth->secret, auth->sender, auth->encrypt,
                               __atomic_add_fetch(auth->counter, 1, __ATOMIC_RELAXED), ctl + SRPC_FRAME_HLEN, &plain,
                               len ? 1 : 0, data, data + len);
    }
    if (!*rc) {
        struct iovec payload[2] = {{ctl + SRPC_FRAME_HLEN, SRPC_HDR_LEN}, {data, wire}};
        *rc = srpc_frame_build_udp(ctl, &p->self, dst, payload, 2, p->ip_id++,
                                   p->tx_csum ? SRPC_FRAME_CSUM_OFFLOAD : 0);
    }
    if (!*rc && d != h && rte_pktmbuf_chain(h, d) != 0)
        *rc = -EMSGSIZE;
    if (*rc) {
        rte_pktmbuf_free(h);
        if (d != h)
            rte_pktmbuf_free(d);
        return NULL;
    }
    tx_offload(p, h);
    return h;
}

/* One frame whose UDP payload is the msg_len bytes of the pieces as they are (SRPC_TX_RAW:
 * version 5's handshake datagrams and NO_SESSION, all small): 1, or the error. tx_lock held. */
static int send_raw(srpc_dpdk_port_t *p, const srpc_endpoint_t *to, const struct iovec *pieces, int n,
                    uint32_t msg_len)
{
    if (msg_len == 0 || SRPC_IP4_HLEN + SRPC_UDP_HLEN + (uint64_t)msg_len > p->mtu ||
        SRPC_FRAME_HLEN + (uint64_t)msg_len > UINT16_MAX)
        return -EMSGSIZE;
    struct rte_mbuf *h = rte_pktmbuf_alloc(p->pool);
    if (!h)
        return -ENOBUFS;
    uint8_t *ctl = (uint8_t *)rte_pktmbuf_append(h, (uint16_t)(SRPC_FRAME_HLEN + msg_len));
    int pi = 0, rc = ctl ? 0 : -EMSGSIZE;
    size_t poff = 0;
    if (!rc)
        rc = gather(ctl + SRPC_FRAME_HLEN, msg_len, pieces, n, &pi, &poff);
    if (!rc) {
        const struct iovec payload = {ctl + SRPC_FRAME_HLEN, msg_len};
        rc = srpc_frame_build_udp(ctl, &p->self, to, &payload, 1, p->ip_id++, p->tx_csum ? SRPC_FRAME_CSUM_OFFLOAD : 0);
    }
    if (rc) {
        rte_pktmbuf_free(h);
        return rc;
    }
    tx_offload(p, h);
    rc = tx_all(p, &h, 1);
    return rc ? rc : 1;
}

/* tx_lock held. auth: how a version 4 message is signed or a version 5 one sealed (NULL: neither). */
static int send_msg(srpc_dpdk_port_t *p, const struct sockaddr_in *sin, const srpc_hdr_t *tmpl,
                    const struct iovec *pieces, int n, uint32_t msg_len, uint32_t seg_size,
                    const srpc_tx_auth_t *auth)
{
    if ((tmpl->version == SRPC_VERSION_4 || tmpl->version == SRPC_VERSION_5) &&
        (!auth || !auth->secret || !auth->counter))
        return -EINVAL; /* never sent unsigned or unsealed */
    srpc_endpoint_t to = {.ip = ntohl(sin->sin_addr.s_addr), .port = ntohs(sin->sin_port)};
    struct neigh *nb = neigh_find(p, to.ip);
    if (!nb || nb->ip != to.ip) {
        p->st.no_neighbour++;
        return -EHOSTUNREACH;
    }
    memcpy(to.mac, nb->mac, 6);
    if (tmpl->type == SRPC_TX_RAW)
        return send_raw(p, &to, pieces, n, msg_len);
    seg_size = srpc_seg_data_max(tmpl->version, seg_size);
    const int aegis = tmpl->version == SRPC_VERSION_5 && (auth->encrypt & SRPC_V5_FLAG_AEGIS);
    if (aegis) /* AEGIS-128L's tag is 16 bytes longer */
        seg_size = seg_size > SRPC_V5_AEGIS_TAG_HEAD + 1 ? seg_size - SRPC_V5_AEGIS_TAG_HEAD : 1;
    uint32_t nseg = srpc_seg_count(msg_len, seg_size);
    if (nseg > UINT16_MAX)
        return -EMSGSIZE;
    uint64_t biggest = (nseg > 1 ? seg_size : msg_len) + srpc_tail_len(tmpl->version) +
                       (aegis ? SRPC_V5_AEGIS_TAG_HEAD : 0);
    if (SRPC_IP4_HLEN + SRPC_UDP_HLEN + SRPC_HDR_LEN + biggest > p->mtu)
        return -EMSGSIZE;

    srpc_hdr_t sh = *tmpl;
    sh.nseg = (uint16_t)nseg;
    sh.msg_len = msg_len;
    const unsigned per = p->multi_seg ? 2 : 1; /* mbufs per frame */
    struct rte_mbuf *m[TX_CHUNK * 2], *frames[TX_CHUNK];
    int pi = 0, rc = 0;
    size_t poff = 0;
    uint32_t sent = 0;
    while (sent < nseg) {
        unsigned cnt = nseg - sent < TX_CHUNK ? nseg - sent : TX_CHUNK;
        if (rte_pktmbuf_alloc_bulk(p->pool, m, cnt * per) != 0)
            return sent ? -EAGAIN : -ENOBUFS;
        for (unsigned i = 0; i < cnt; i++) {
            uint32_t seq = sent + i;
            sh.seq = (uint16_t)seq;
            frames[i] = fill_frame(p, m[i * per], m[i * per + per - 1], &to, &sh,
                                   srpc_seg_len(msg_len, seg_size, seq), pieces, n, &pi, &poff, auth, &rc);
            if (!frames[i]) { /* built frames own their payload mbufs; the unused ones are loose */
                rte_pktmbuf_free_bulk(frames, i);
                if ((i + 1) * per < cnt * per)
                    rte_pktmbuf_free_bulk(m + (i + 1) * per, cnt * per - (i + 1) * per);
                return rc;
            }
        }
        rc = tx_all(p, frames, cnt);
        sent += cnt;
        if (rc)
            return rc;
    }
    return (int)nseg;
}

int srpc_dpdk_send_msg(srpc_dpdk_port_t *p, const struct sockaddr *dst, socklen_t dstlen, const srpc_hdr_t *tmpl,
                       const struct iovec *pieces, int n, uint32_t msg_len, uint32_t seg_size)
{
    if (!p || !dst || !tmpl || (n && !pieces) || n < 0 || seg_size == 0 || seg_size > SRPC_MAX_SEG_DATA)
        return -EINVAL;
    if (dst->sa_family != AF_INET || dstlen < (socklen_t)sizeof(struct sockaddr_in))
        return -EAFNOSUPPORT;
    pthread_mutex_lock(&p->tx_lock);
    int rc = send_msg(p, (const struct sockaddr_in *)dst, tmpl, pieces, n, msg_len, seg_size, NULL);
    pthread_mutex_unlock(&p->tx_lock);
    return rc;
}

/* srpc_dpdk_send_msg of a transport's message, version 4's signing and version 5's sealing included,
 * or a whole datagram (SRPC_TX_RAW). */
static int send_tx_msg(srpc_dpdk_port_t *p, const struct sockaddr *dst, socklen_t dstlen, const srpc_tx_msg_t *m)
{
    const int raw = m->hdr.type == SRPC_TX_RAW; /* one datagram as it is: not cut, no seg_size */
    if (!p || !dst || (m->npieces && !m->pieces) || m->npieces < 0 ||
        (!raw && (m->seg_size == 0 || m->seg_size > SRPC_MAX_SEG_DATA)))
        return -EINVAL;
    if (dst->sa_family != AF_INET || dstlen < (socklen_t)sizeof(struct sockaddr_in))
        return -EAFNOSUPPORT;
    pthread_mutex_lock(&p->tx_lock);
    int rc = send_msg(p, (const struct sockaddr_in *)dst, &m->hdr, m->pieces, m->npieces, m->len, m->seg_size,
                      &m->auth);
    pthread_mutex_unlock(&p->tx_lock);
    return rc;
}

/* ------------------------------------------------------------------ receive */

#define ALL_ON_HOST MAX_FRAME_SEGS /* copy_out's dev_from for a frame wholly in host memory */

/* Copies frame bytes [off, off + len) out of the segments to dst (host). Segments from index
 * dev_from on lie in GPU memory: copied device to host on the port's stream (complete after
 * rx_burst's synchronisation). 0, or -EIO when such a copy failed. */
static int copy_out(const srpc_dpdk_port_t *p, unsigned dev_from, uint8_t *dst, const struct iovec *seg,
                    unsigned nseg, size_t off, size_t len)
{
    for (unsigned i = 0; i < nseg && len; i++) {
        if (off >= seg[i].iov_len) {
            off -= seg[i].iov_len;
            continue;
        }
        size_t take = seg[i].iov_len - off < len ? seg[i].iov_len - off : len;
        const uint8_t *src = (const uint8_t *)seg[i].iov_base + off;
        if (i < dev_from)
            memcpy(dst, src, take);
        else if (srpc_gpu_copy_dtoh(dst, (uint64_t)(uintptr_t)src, take, p->stream) != 0)
            return -EIO;
        dst += take;
        len -= take;
        off = 0;
    }
    return 0;
}

static void answer_arp(srpc_dpdk_port_t *p, const srpc_frame_info_t *info)
{
    uint8_t f[SRPC_ARP_FRAME_LEN];
    if (srpc_frame_build_arp(f, 1, &p->self, info->peer.mac, info->peer.ip) != 0)
        return;
    pthread_mutex_lock(&p->tx_lock);
    if (send_frame(p, f, sizeof(f)) == 0)
        p->st.arp_replies++;
    pthread_mutex_unlock(&p->tx_lock);
}

/* Where the data of a datagram whose payload lies in GPU memory (segments 1 on) goes, its
 * splitrpc header already in the header slot: 1 when its address is handed on (rx->dev[i], the
 * frame to be held), 0 when it was copied to the data slot, -1 when the copy failed. Only the
 * raw type and nseg fields decide it; the engine decodes and checks the header once, and
 * drops a bad one without reading the data. */
static int place_dev_data(srpc_dpdk_port_t *p, srpc_rx_t *rx, unsigned i, const struct iovec *seg, unsigned nseg,
                          const srpc_frame_info_t *info, uint32_t dlen)
{
    const size_t data_off = info->payload_off + SRPC_HDR_LEN;
    const uint8_t *hb = srpc_rx_hdr(rx, i);
    /* Version 3's data check and version 4's tag are read on the host: such data is copied there
     * (no GPU-side check yet). */
    if (dlen && (hb[SRPC_OFF_VER_TYPE] & 0x0f) == SRPC_REQUEST && (hb[SRPC_OFF_VER_TYPE] >> 4) < SRPC_VERSION_3 &&
        hb[SRPC_OFF_NSEG] == 0 &&
        hb[SRPC_OFF_NSEG + 1] == 1 && nseg == 2 && data_off == seg[0].iov_len && seg[1].iov_len == dlen) {
        rx->dev[i] = (uint64_t)(uintptr_t)seg[1].iov_base; /* a whole request, in one device buffer */
        p->st.rx_device_payloads++;
        return 1;
    }
    /* Segments of larger messages (reassembled on the host), and whatever the engine will drop. */
    uint32_t n = dlen > rx->data_cap ? (uint32_t)rx->data_cap : dlen;
    if (n && copy_out(p, 1, srpc_rx_data(rx, i), seg, nseg, data_off, n) != 0)
        return -1;
    p->st.rx_device_to_host += n != 0;
    return 0;
}

/* One received frame: 1 when it filled slot i of rx, else 0 (dropped, or ARP). *hold: the frame
 * must stay until srpc_dpdk_rx_release (its data is handed on as a device address). */
static int take_frame(srpc_dpdk_port_t *p, struct rte_mbuf *m, srpc_rx_t *rx, unsigned i, int *hold)
{
    struct iovec seg[MAX_FRAME_SEGS];
    unsigned nseg = 0;
    for (struct rte_mbuf *s = m; s; s = s->next) {
        if (nseg == MAX_FRAME_SEGS) {
            p->st.drops[SRPC_FRAME_SHORT]++; /* a chain longer than any frame we accept */
            return 0;
        }
        seg[nseg++] = (struct iovec){rte_pktmbuf_mtod(s, void *), s->data_len};
    }
    unsigned flags = 0;
    if ((p->rx_csum || p->st.rx_split_emulated) && (m->ol_flags & RTE_MBUF_F_RX_IP_CKSUM_MASK) == RTE_MBUF_F_RX_IP_CKSUM_GOOD &&
        (m->ol_flags & RTE_MBUF_F_RX_L4_CKSUM_MASK) == RTE_MBUF_F_RX_L4_CKSUM_GOOD)
        flags |= SRPC_FRAME_CSUM_CHECKED;
    /* Payload bytes in GPU memory: the host reads the first segment only, and cannot sum them. */
    const int on_dev = p->gpu >= 0 && m->pkt_len > m->data_len;
    if (on_dev && !(flags & SRPC_FRAME_CSUM_CHECKED)) {
        p->st.drops[SRPC_FRAME_UDP_CHECKSUM]++;
        return 0;
    }
    srpc_frame_info_t info;
    int kind = srpc_frame_parse(seg, nseg, &p->self, flags, &info);
    if (kind < 0) {
        p->st.drops[-kind < SRPC_FRAME_DROP_MAX ? -kind : 0]++;
        return 0;
    }
    if (kind != SRPC_FRAME_UDP) { /* ARP: learn the sender, answer a question */
        srpc_dpdk_neighbour_add(p, info.peer.ip, info.peer.mac);
        p->last_learned.ip = 0; /* the table may have changed under the next datagram's sender */
        if (kind == SRPC_FRAME_ARP_REQUEST)
            answer_arp(p, &info);
        return 0;
    }
    /* Learn the sender (the reply goes to its MAC). The lock is taken only when the sender is
     * not the one learned last, so a stream of requests from one client takes none. */
    if (info.peer.ip != p->last_learned.ip || memcmp(info.peer.mac, p->last_learned.mac, 6) != 0) {
        pthread_mutex_lock(&p->tx_lock);
        if (neigh_set(p, info.peer.ip, info.peer.mac) == 0) {
            p->last_learned.ip = info.peer.ip;
            memcpy(p->last_learned.mac, info.peer.mac, 6);
        }
        pthread_mutex_unlock(&p->tx_lock);
    }
    uint32_t len = info.payload_len;
    uint32_t hlen = len < SRPC_HDR_LEN ? len : SRPC_HDR_LEN;
    uint32_t dlen = len - hlen;
    int trunc = dlen > rx->data_cap;
    rx->dev[i] = 0;
    if (on_dev && info.payload_off + hlen > seg[0].iov_len) { /* a split that cut the splitrpc header */
        p->st.drops[SRPC_FRAME_SHORT]++;
        return 0;
    }
    copy_out(p, ALL_ON_HOST, srpc_rx_hdr(rx, i), seg, nseg, info.payload_off, hlen);
    if (on_dev) {
        int r = place_dev_data(p, rx, i, seg, nseg, &info, dlen);
        if (r < 0)
            return 0; /* the copy's error is in srpc_gpu_last_error; the client retransmits */
        *hold = r;
    } else {
        copy_out(p, ALL_ON_HOST, srpc_rx_data(rx, i), seg, nseg, info.payload_off + hlen, trunc ? rx->data_cap : dlen);
    }
    if (trunc)
        p->st.rx_too_big++;
    struct sockaddr_in *src = (struct sockaddr_in *)&rx->src[i];
    memset(src, 0, sizeof(*src));
    src->sin_family = AF_INET;
    src->sin_addr.s_addr = htonl(info.peer.ip);
    src->sin_port = htons(info.peer.port);
    rx->srclen[i] = sizeof(*src);
    rx->len[i] = len;
    rx->trunc[i] = (uint8_t)trunc;
    return 1;
}

void srpc_dpdk_rx_release(srpc_dpdk_port_t *p)
{
    if (p && p->n_held) {
        rte_pktmbuf_free_bulk(p->held, p->n_held);
        p->n_held = 0;
    }
}

int srpc_dpdk_payload_device(const srpc_dpdk_port_t *p)
{
    return p ? p->gpu : -1;
}

static int rx_burst(srpc_dpdk_port_t *p, srpc_rx_t *rx, unsigned max);

int srpc_dpdk_rx_burst(srpc_dpdk_port_t *p, srpc_rx_t *rx, unsigned max)
{
    if (!p || !rx)
        return -EINVAL;
    srpc_dpdk_rx_release(p);
    if (p->gpu < 0)
        return rx_burst(p, rx, max);
    srpc_CUcontext saved; /* the receiving thread may be a worker with a context of its own */
    int rc = srpc_gpu_enter(p->gpu, &saved);
    if (rc == 0)
        rc = rx_burst(p, rx, max);
    srpc_gpu_leave(saved);
    return rc;
}

/* srpc_dpdk_rx_burst, the previous burst released and, with a GPU payload pool, its device's
 * context current. */
static int rx_burst(srpc_dpdk_port_t *p, srpc_rx_t *rx, unsigned max)
{
    if (max == 0 || max > rx->burst)
        max = rx->burst;
    if (p->gpu >= 0 && p->held_cap < max) {
        struct rte_mbuf **h = realloc(p->held, max * sizeof(*h));
        if (!h)
            return -ENOMEM;
        p->held = h;
        p->held_cap = max;
    }
    const uint16_t ctl = SRPC_FRAME_HLEN + SRPC_HDR_LEN;
    unsigned got = 0;
    struct rte_mbuf *m[RX_CHUNK];
    while (got < max) {
        unsigned want = max - got < RX_CHUNK ? max - got : RX_CHUNK;
        uint16_t k = rte_eth_rx_burst(p->port_id, 0, m, (uint16_t)want);
        p->st.rx_frames += k;
        if (p->st.rx_split_emulated) {
            for (uint16_t j = 0; j < k; j++)
                srpc_split_emulate(m[j], p->data_pool, ctl, p->gpu >= 0, p->stream, &p->self);
            if (p->gpu >= 0 && k && srpc_gpu_stream_drain(p->stream) != 0) { /* the mbufs are freed after it */
                rte_pktmbuf_free_bulk(m, k);
                return -EIO; /* srpc_gpu_last_error says why */
            }
        }
        for (uint16_t j = 0; j < k; j++) {
            int hold = 0;
            got += (unsigned)take_frame(p, m[j], rx, got, &hold);
            if (hold)
                p->held[p->n_held++] = m[j];
            else
                rte_pktmbuf_free(m[j]);
        }
        if (k < want)
            break;
    }
    if (p->gpu >= 0 && got && srpc_gpu_stream_drain(p->stream) != 0) /* the device-to-host copies */
        return -EIO;
    return (int)got;
}

/* ------------------------------------------------------------------ the transport */

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
    int n = rx_burst(d->port, rx, max);
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
            m->result = send_tx_msg(d->port, dst, dl, m);
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

/* dpdk_port.c: a DPDK port's control path: open (queues, checksum and split offloads, the header and payload pools: GPU memory, host memory of our own, or DPDK's), close, its MAC and counters, and the neighbour table's public face. The datapath is dpdk_rx.c and dpdk_tx.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/tunables.h"
#include "dpdk/dpdk_port.h"
#include "dpdk/dpdk_split_emulation.h"
#include "gpu/gpu_driver.h"
#include "splitrpc_gpu.h"

/* ------------------------------------------------------------------ neighbours */

int srpc_dpdk_neighbour_add(srpc_dpdk_port_t *p, uint32_t ip, const uint8_t mac[6])
{
    if (!p || !mac || ip == 0)
        return -EINVAL;
    pthread_mutex_lock(&p->tx_lock);
    int rc = srpc_neigh_set(p, ip, mac);
    pthread_mutex_unlock(&p->tx_lock);
    return rc;
}

int srpc_dpdk_neighbour_known(srpc_dpdk_port_t *p, uint32_t ip)
{
    pthread_mutex_lock(&p->tx_lock);
    const struct neigh *n = srpc_neigh_find(p, ip);
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

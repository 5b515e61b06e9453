/* transport.h: the seam between the datapath and the wire: a transport receives bursts of datagrams into transport-neutral slots and sends whole messages cut into segments; kernel UDP (transport/udp.c) and DPDK (dpdk/transport_dpdk.c) implement it, and nothing above this header knows which one runs. */
#ifndef SRPC_TRANSPORT_H
#define SRPC_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "splitrpc_core.h"
#include "splitrpc_tools.h" /* srpc_faults_cfg_t, srpc_fault_counts_t */

#define SRPC_HDR_SLOT 64 /* one cache line of host memory per control header */

/* A receive burst: for datagram i, its first SRPC_HDR_LEN bytes in header slot i (host memory)
 * and the rest in data slot i (the payload region), or, where the transport left the data in
 * device memory, at dev[i]. Transport-neutral: kernel UDP and DPDK fill the same fields.
 * Owned by the thread that receives (the caller serialises receives). */
typedef struct srpc_rx {
    unsigned burst;
    size_t data_cap;                /* bytes of each data slot */
    uint8_t *hdr;                   /* burst * SRPC_HDR_SLOT */
    uint8_t *data;                  /* burst * data_cap */
    uint32_t *len;                  /* datagram i's length (its UDP payload), header included */
    uint8_t *trunc;                 /* 1: longer than SRPC_HDR_LEN + data_cap: only that much is here */
    struct sockaddr_storage *src;   /* its sender */
    socklen_t *srclen;
    uint64_t *dev;                  /* 0, or the device address of its data (then the data slot is
                                       unused): a DPDK port whose payloads land in GPU memory */
    uint32_t *gso;                  /* 0, or entry i holds several datagrams of one sender that a
                                       receive offload coalesced (UDP GRO), each gso[i] bytes, the
                                       last one shorter: read them with srpc_rx_dgram */
} srpc_rx_t;

int srpc_rx_init(srpc_rx_t *rx, unsigned burst, size_t data_cap);
/* Datagram i of a scattered receive (rx_into) with place: its data made whole in data slot i,
 * as rx_burst would have left it (place is not changed). */
void srpc_rx_unscatter(srpc_rx_t *rx, unsigned i, const struct iovec *place);
/* Where rx_run puts the tail (version 3's data check) of datagram j: in header slot j, after
 * the header. */
#define SRPC_RX_TAIL_OFF 32
static inline uint8_t *srpc_rx_tail(const srpc_rx_t *rx, unsigned j)
{
    return rx->hdr + (size_t)j * SRPC_HDR_SLOT + SRPC_RX_TAIL_OFF;
}
/* The entry of a run receive (rx_run) with its n places and tail_len: made whole, header slot 0
 * then data slot 0, as rx_burst would have left it (the places are not changed). */
void srpc_rx_unrun(srpc_rx_t *rx, unsigned n, const struct iovec *place, uint32_t tail_len);
void srpc_rx_free(srpc_rx_t *rx);
static inline uint8_t *srpc_rx_hdr(const srpc_rx_t *rx, unsigned i) { return rx->hdr + (size_t)i * SRPC_HDR_SLOT; }
static inline uint8_t *srpc_rx_data(const srpc_rx_t *rx, unsigned i) { return rx->data + (size_t)i * rx->data_cap; }

/* How many datagrams entry i of a burst holds: one, or those coalesced into it (rx->gso[i]; a
 * truncated entry counts as one, and fails its checks). */
static inline unsigned srpc_rx_dgrams(const srpc_rx_t *rx, unsigned i)
{
    const uint32_t g = rx->gso[i];
    return g && rx->len[i] > g && !rx->trunc[i] ? (rx->len[i] + g - 1) / g : 1;
}

/* Datagram j (< srpc_rx_dgrams) of entry i: its header, its data and its length, header
 * included. The entry's bytes run on from the header slot into the data slot, so datagram j
 * (j > 0) lies whole in the data slot, its header right before its data. Datagrams shorter
 * than a header (coalesced at gso < SRPC_HDR_LEN) get only their length right: they are
 * dropped as short, never read. */
typedef struct srpc_rx_dg {
    const uint8_t *hdr, *data;
    uint32_t len;
} srpc_rx_dg_t;
static inline srpc_rx_dg_t srpc_rx_dgram(const srpc_rx_t *rx, unsigned i, unsigned j)
{
    const uint32_t g = rx->gso[i], len = rx->len[i];
    if (srpc_rx_dgrams(rx, i) == 1)
        return (srpc_rx_dg_t){srpc_rx_hdr(rx, i), srpc_rx_data(rx, i), len};
    const uint32_t off = j * g, n = len - off < g ? len - off : g; /* its first byte in the entry, its length */
    if (j == 0 || g < SRPC_HDR_LEN)
        return (srpc_rx_dg_t){srpc_rx_hdr(rx, i), srpc_rx_data(rx, i), n};
    const uint8_t *p = srpc_rx_data(rx, i) + off - SRPC_HDR_LEN;
    return (srpc_rx_dg_t){p, n >= SRPC_HDR_LEN ? p + SRPC_HDR_LEN : p, n}; /* (a short one's data: never read) */
}

/* One message to send: the header template (type, version, func_id, req_id, aux; seq, nseg and
 * msg_len are filled in), its data as the concatenation of npieces pieces (len bytes in all),
 * cut into segments of seg_size (1..the transport's max_seg). dst NULL: the transport's
 * connected peer (a client's server). result gets the datagrams sent, or -errno. */
/* How a version 4 message is signed (docs/PROTOCOL-v4.md): key key_id's secret, as sender
 * `sender`, its counter advanced at *counter for each datagram. Version 5 (docs/PROTOCOL-v5.md):
 * secret is the direction's session key, sender the session's id, the counter as in version 4
 * (any counter that never repeats under the key), encrypt the session's ACCEPT flags (core/session.h:
 * SRPC_V5_FLAG_ENCRYPT, and the suite: SRPC_V5_FLAG_AES or SRPC_V5_FLAG_AEGIS). */
typedef struct srpc_tx_auth {
    uint32_t key_id;
    const uint8_t *secret;
    uint64_t sender;
    uint64_t *counter;
    uint8_t encrypt;
} srpc_tx_auth_t;

/* hdr.type of a message sent as it is: its pieces are one whole datagram's bytes (len of them),
 * no header made, not cut (version 5's handshake answers and NO_SESSION). */
#define SRPC_TX_RAW 0xF

typedef struct srpc_tx_msg {
    const struct sockaddr *dst;
    socklen_t dstlen;
    srpc_hdr_t hdr;
    const struct iovec *pieces;
    int npieces;
    uint32_t len;
    uint32_t seg_size;
    int result;
    srpc_tx_auth_t auth; /* version 4 (hdr.version): how each datagram is signed; unused otherwise */
} srpc_tx_msg_t;

#define SRPC_TX_MAX_PIECES (SRPC_MAX_TENSORS + 1) /* pieces of one message a transport takes */

typedef struct srpc_transport srpc_transport_t;

/* A transport's verbs. Receive-side verbs (rx_burst, rx_release, peek, recv_into) run on one
 * thread at a time, the caller serialising them (the server's rx lock, the client's receiving
 * owner); send is thread-safe; set_faults runs before any traffic. */
typedef struct srpc_transport_ops {
    const char *name;
    /* Receives up to max (<= rx->burst; 0: rx->burst) datagrams without blocking. Returns the
     * count (0 when none waits) or -errno. Datagrams not meant for the datapath (ARP, frames of
     * other hosts) are handled or dropped and counted inside. */
    int (*rx_burst)(srpc_transport_t *t, srpc_rx_t *rx, unsigned max);
    /* Gives back what the last burst held for its dev[] addresses (NULL: nothing ever held).
     * The caller's copies from them must be complete. */
    void (*rx_release)(srpc_transport_t *t);
    /* Scattered receive (NULL where the transport cannot, e.g. DPDK): like rx_burst for up to n
     * (1..rx->burst) datagrams, but datagram i's data goes first to place[i] (iov_len <=
     * rx->data_cap bytes of the caller's memory) and only what follows it to data slot i, from
     * where it would lie had the datagram come whole (offset iov_len): segments a receiver
     * expects land in their places, one system call for all. A datagram that turns out to be
     * another is made whole in its data slot with srpc_rx_unscatter. Returns the count (0 when
     * none waits), -ENOTSUP when it cannot now (a fault injector is set), or -errno. */
    int (*rx_into)(srpc_transport_t *t, srpc_rx_t *rx, unsigned n, const struct iovec *place);
    /* Receives one entry (NULL where the transport cannot): a datagram, or a run of them that
     * the kernel coalesced (rx->gso[0]), laid out as the n (1..rx->burst, at most
     * SRPC_SCATTER_MAX) datagrams expected: datagram j's header to header slot j, its data to
     * place[j], then tail_len bytes (0 or SRPC_DATA_CHECK_LEN) to srpc_rx_tail(rx, j); what
     * follows all of them to data slot 0 from where it would lie had the entry come whole
     * (srpc_rx_unrun makes it whole). Returns 1, 0 when none waits, -ENOTSUP when it cannot
     * now (a fault injector is set), or -errno. */
    int (*rx_run)(srpc_transport_t *t, srpc_rx_t *rx, unsigned n, const struct iovec *place, uint32_t tail_len);
    /* In-place receive (NULL where the transport cannot, e.g. DPDK): peek copies the next
     * datagram's first SRPC_HDR_LEN bytes to hdr and its sender to src without taking it and
     * returns its whole length (>= 0), -EAGAIN when none waits, -ENOTSUP when it cannot now (a
     * fault injector is set); recv_into then takes that datagram, its header to hdr, at most dlen
     * data bytes to dst and the next tail_len bytes (0 or version 3's SRPC_DATA_CHECK_LEN) to
     * tail, and returns the bytes taken or -errno. */
    int (*peek)(srpc_transport_t *t, uint8_t hdr[SRPC_HDR_LEN], struct sockaddr_storage *src);
    int (*recv_into)(srpc_transport_t *t, uint8_t hdr[SRPC_HDR_LEN], void *dst, uint32_t dlen, uint8_t *tail,
                     uint32_t tail_len);
    /* Sends n messages with as few system calls as it can (one sendmmsg for all their
     * datagrams on kernel UDP). Returns how many were sent whole; each one's result says. */
    int (*send)(srpc_transport_t *t, srpc_tx_msg_t *msgs, unsigned n);
    int (*local_port)(const srpc_transport_t *t);
    /* Testing builds: fault injectors per direction (NULL ops: -ENOTSUP). */
    int (*set_faults)(srpc_transport_t *t, const srpc_faults_cfg_t *rx, const srpc_faults_cfg_t *tx, uint64_t seed);
    int (*fault_counts)(const srpc_transport_t *t, srpc_fault_counts_t *rx, srpc_fault_counts_t *tx);
    void (*close)(srpc_transport_t *t);
} srpc_transport_ops_t;

/* What every transport is (its implementation's struct starts with it). Read-only once open. */
struct srpc_transport {
    const srpc_transport_ops_t *ops;
    int wait_fd;          /* readable when a datagram waits; -1: none, the transport is polled */
    uint32_t max_seg;     /* the largest segment data one datagram carries on this transport */
    int payload_device;   /* -1: received data lands in host memory; else the CUDA device whose
                             memory rx->dev addresses point into: the caller of rx_burst then
                             makes that device's context current around it (srpc_gpu_enter) */
    int peer_loopback;    /* a client's transport: its server is on this machine (127/8, ::1) */
    uint32_t path_seg;    /* a client's transport: the segment data bytes one datagram carries whole
                             (unfragmented) on the route to its server, from the route's MTU; 0: unknown */
    int rcvbuf, sndbuf;   /* effective socket buffer sizes (0: none) */
    const uint64_t *tx_coalesced; /* datagrams sent in runs the kernel cut (UDP segmentation offload),
                                     read with a relaxed atomic load; NULL: a transport without it */
};

/* How to open a transport. A server binds host:port; a client connects to host:port. */
typedef struct srpc_transport_spec {
    const char *host;
    uint16_t port;
    int bind;                  /* 1: serve on host:port; 0: a client of host:port */
    int reuse_port;            /* serving, kernel UDP: SO_REUSEPORT (several processes on one port) */
    int sock_buf_bytes;        /* kernel UDP: SO_RCVBUF/SO_SNDBUF wanted */
    const char *dpdk_dev;      /* NULL: kernel UDP. Else the DPDK port (the EAL initialised); host is
                                  then an IPv4 literal: ours when serving, the server's for a client */
    uint16_t dpdk_mtu;         /* 0: 1500 */
    int dpdk_payload_gpu;      /* serving: SRPC_DPDK_PAYLOAD_AUTO, -1 (host) or a CUDA device */
    int dpdk_emulate_split;    /* serving: split frames in software the way the NIC would */
    const char *dpdk_local_ip; /* client: our IPv4 address on the port */
    uint16_t dpdk_local_port;  /* client: our UDP port (0: one from 49152-65535) */
    const char *dpdk_peer_mac; /* client: the server's MAC, or NULL to ask by ARP */
} srpc_transport_spec_t;

/* Opens kernel UDP or DPDK as spec says (transport/open.c). Returns 0, or -errno (-EINVAL for a bad spec,
 * -ENOTSUP for DPDK in a build without it, -EHOSTUNREACH when ARP finds no server). */
int srpc_transport_open(const srpc_transport_spec_t *spec, srpc_transport_t **out);
static inline void srpc_transport_close(srpc_transport_t *t)
{
    if (t)
        t->ops->close(t);
}

static inline int srpc_tp_rx_burst(srpc_transport_t *t, srpc_rx_t *rx, unsigned max)
{
    return t->ops->rx_burst(t, rx, max);
}
static inline void srpc_tp_rx_release(srpc_transport_t *t)
{
    if (t->ops->rx_release)
        t->ops->rx_release(t);
}
static inline int srpc_tp_send(srpc_transport_t *t, srpc_tx_msg_t *msgs, unsigned n)
{
    return t->ops->send(t, msgs, n);
}
/* 1 when the transport has fault injectors: a testing build (SRPC_FAULT_INJECTION) and a
 * transport that implements them (kernel UDP). */
static inline int srpc_tp_has_faults(const srpc_transport_t *t)
{
#ifdef SRPC_FAULT_INJECTION
    return t->ops->set_faults != NULL;
#else
    (void)t;
    return 0;
#endif
}
/* The fault injectors of a client's or server's transport (srpc_client_set_faults and
 * srpc_server_set_faults; before any traffic): -ENOTSUP in a build without fault injection or
 * for a transport without injectors (DPDK), else the transport's answer. */
int srpc_tp_set_faults(srpc_transport_t *t, const srpc_faults_cfg_t *rx, const srpc_faults_cfg_t *tx, uint64_t seed);
int srpc_tp_fault_counts(const srpc_transport_t *t, srpc_fault_counts_t *rx, srpc_fault_counts_t *tx);
/* 1 when this transport can receive scattered (rx_into). */
static inline int srpc_tp_can_rx_into(const srpc_transport_t *t) { return t->ops->rx_into != NULL; }
/* 1 when this transport can receive in place now (peek and recv_into). */
static inline int srpc_tp_can_recv_into(const srpc_transport_t *t) { return t->ops->peek != NULL; }

/* 1 if the address is loopback (127/8, ::1, or IPv4-mapped 127/8). */
static inline int srpc_sockaddr_is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a))
            return 1;
        return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127;
    }
    return 0;
}

#endif /* SRPC_TRANSPORT_H */

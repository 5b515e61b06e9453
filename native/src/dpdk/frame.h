/* frame.h: Ethernet II / IPv4 / UDP frames and ARP for the kernel-bypass transport, built and checked over plain byte buffers (no DPDK here, so they are tested everywhere). */
#ifndef SRPC_FRAME_H
#define SRPC_FRAME_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define SRPC_ETH_HLEN 14
#define SRPC_IP4_HLEN 20 /* no options: a frame with IP options is dropped */
#define SRPC_UDP_HLEN 8
#define SRPC_FRAME_HLEN (SRPC_ETH_HLEN + SRPC_IP4_HLEN + SRPC_UDP_HLEN) /* 42 */
#define SRPC_ARP_FRAME_LEN (SRPC_ETH_HLEN + 28)                        /* 42 */
#define SRPC_ETHERTYPE_IPV4 0x0800
#define SRPC_ETHERTYPE_ARP 0x0806
#define SRPC_UDP_MAX_PAYLOAD (65535 - SRPC_IP4_HLEN - SRPC_UDP_HLEN) /* 65507 */

/* One end of a UDP flow as a frame names it. ip and port in host byte order. */
typedef struct srpc_endpoint {
    uint8_t mac[6];
    uint32_t ip;
    uint16_t port;
} srpc_endpoint_t;

/* What srpc_frame_parse found (returned as a positive number). */
enum srpc_frame_kind {
    SRPC_FRAME_UDP = 1,     /* a UDP datagram to our address and port: info filled */
    SRPC_FRAME_ARP_REQUEST, /* who-has our address: info.peer = the asker's MAC and IP */
    SRPC_FRAME_ARP_REPLY,   /* is-at, sent to us: info.peer = the answer, for the neighbour table */
};

/* Why srpc_frame_parse dropped a frame (returned negated). Counted by the transport. */
enum srpc_frame_drop {
    SRPC_FRAME_SHORT = 1,     /* shorter than its headers say, or than the headers themselves */
    SRPC_FRAME_ETHERTYPE,     /* neither IPv4 nor ARP (a VLAN tag included) */
    SRPC_FRAME_NOT_OURS,      /* destination MAC, IP address or port not ours; ARP about another host */
    SRPC_FRAME_IP_HEADER,     /* version not 4, header length not 20 (IP options), total length < 28 */
    SRPC_FRAME_IP_FRAGMENT,   /* more-fragments set or a fragment offset: not reassembled here */
    SRPC_FRAME_IP_CHECKSUM,
    SRPC_FRAME_PROTOCOL,      /* an IP protocol other than UDP */
    SRPC_FRAME_UDP_LENGTH,    /* UDP length below 8 or not the IP payload length */
    SRPC_FRAME_UDP_CHECKSUM,
    SRPC_FRAME_ARP_FORMAT,    /* not Ethernet/IPv4 ARP, or an operation other than request/reply */
    SRPC_FRAME_DROP_MAX
};

/* What a parsed frame says. For a UDP frame the payload is bytes [payload_off, payload_off +
 * payload_len) of the frame, counted across its segments. */
typedef struct srpc_frame_info {
    srpc_endpoint_t peer; /* the sender: source MAC, IP and (UDP) port */
    uint32_t payload_off;
    uint32_t payload_len;
} srpc_frame_info_t;

#define SRPC_FRAME_CSUM_CHECKED 1u /* parse: the NIC verified the IP and UDP checksums: skip them */
#define SRPC_FRAME_CSUM_OFFLOAD 1u /* build: the NIC computes them: write what it expects instead */

/* Checks a received frame against `self` (our MAC, address and UDP port). The frame is the
 * concatenation of nseg segments (two with a header/payload buffer split); its Ethernet, IP and
 * UDP headers must lie in the first. Trailing bytes past the IP total length (Ethernet padding)
 * are ignored. Accepts unicast to our MAC, and broadcast for ARP only. A zero UDP checksum
 * means none was sent. Returns an srpc_frame_kind (> 0), or minus an srpc_frame_drop (NULL
 * arguments count as SRPC_FRAME_SHORT). Pure function, any thread. */
int srpc_frame_parse(const struct iovec *seg, unsigned nseg, const srpc_endpoint_t *self, unsigned flags,
                     srpc_frame_info_t *info);

/* Writes the 42 bytes of Ethernet, IPv4 and UDP header for a datagram from src to dst whose
 * payload is the concatenation of the n payload segments (to be sent after these bytes, in the
 * same buffer or chained). ip_id: the IP identification. flags SRPC_FRAME_CSUM_OFFLOAD: IP
 * checksum 0 and the UDP checksum field holds the pseudo-header sum, as NICs with checksum
 * offload expect (the payload is then not read); else both checksums are computed. Returns 0,
 * or -EMSGSIZE when the payload exceeds SRPC_UDP_MAX_PAYLOAD, -EINVAL for NULL arguments. */
int srpc_frame_build_udp(uint8_t hdr[SRPC_FRAME_HLEN], const srpc_endpoint_t *src, const srpc_endpoint_t *dst,
                         const struct iovec *payload, unsigned n, uint16_t ip_id, unsigned flags);

/* Writes a 42-byte ARP frame from `self`: a reply (is-at self->mac) to target_mac/target_ip,
 * or, when reply is 0, a broadcast request for target_ip (target_mac ignored). Returns 0 or
 * -EINVAL. */
int srpc_frame_build_arp(uint8_t frame[SRPC_ARP_FRAME_LEN], int reply, const srpc_endpoint_t *self,
                         const uint8_t target_mac[6], uint32_t target_ip);

/* The Internet checksum (RFC 1071) of the concatenation of n segments, plus `initial` (a sum in
 * host order, unfolded), folded and complemented, in host order. Segments of any length and
 * alignment. */
uint16_t srpc_inet_checksum(const struct iovec *seg, unsigned n, uint32_t initial);

/* A short name for a drop reason ("short", "ethertype", ...), for counters and logs. */
const char *srpc_frame_drop_name(int reason);

#endif /* SRPC_FRAME_H */

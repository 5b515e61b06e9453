/* frame.c: Ethernet II / IPv4 / UDP frames and ARP (see frame.h): parsing with the transport's filter, building, the Internet checksum. */
#include "dpdk/frame.h"

#include <errno.h>
#include <string.h>

static inline uint16_t rd16(const uint8_t *p)
{
    return (uint16_t)(p[0] << 8 | p[1]);
}

static inline uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline void wr16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static inline void wr32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* ------------------------------------------------------------------ checksum */

/* A running sum of big-endian 16-bit words over a byte stream cut anywhere. */
struct csum {
    uint64_t sum; /* big-endian word order, unfolded */
    int odd;      /* the stream so far has an odd length: the next byte is a low byte */
};

static uint64_t fold(uint64_t s)
{
    while (s >> 16)
        s = (s & 0xffff) + (s >> 16);
    return s;
}

/* Sums 32-bit loads in native order (2^16 = 1 mod 0xffff, so their words add up the same),
 * then swaps the folded sum into big-endian word order where the machine is little-endian. */
static void csum_add(struct csum *c, const uint8_t *p, size_t len)
{
    if (len && c->odd) {
        c->sum += p[0];
        p++;
        len--;
        c->odd = 0;
    }
    uint64_t acc = 0;
    for (; len >= 8; p += 8, len -= 8) {
        uint32_t a, b;
        memcpy(&a, p, 4);
        memcpy(&b, p + 4, 4);
        acc += (uint64_t)a + b;
    }
    for (; len >= 2; p += 2, len -= 2) {
        uint16_t w;
        memcpy(&w, p, 2);
        acc += w;
    }
    acc = fold(acc);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    acc = ((acc & 0xff) << 8) | (acc >> 8);
#endif
    c->sum += acc;
    if (len) {
        c->sum += (uint32_t)p[0] << 8;
        c->odd = 1;
    }
}

static uint16_t csum_finish(const struct csum *c)
{
    return (uint16_t)~fold(c->sum);
}

uint16_t srpc_inet_checksum(const struct iovec *seg, unsigned n, uint32_t initial)
{
    struct csum c = {initial, 0};
    for (unsigned i = 0; seg && i < n; i++)
        csum_add(&c, seg[i].iov_base, seg[i].iov_len);
    return csum_finish(&c);
}

/* Adds bytes [off, off + len) of the frame made of the segments. */
static void csum_range(struct csum *c, const struct iovec *seg, unsigned nseg, size_t off, size_t len)
{
    for (unsigned i = 0; i < nseg && len; i++) {
        size_t l = seg[i].iov_len;
        if (off >= l) {
            off -= l;
            continue;
        }
        size_t take = l - off < len ? l - off : len;
        csum_add(c, (const uint8_t *)seg[i].iov_base + off, take);
        len -= take;
        off = 0;
    }
}

static uint32_t pseudo_sum(uint32_t src, uint32_t dst, uint16_t udp_len)
{
    return (src >> 16) + (src & 0xffff) + (dst >> 16) + (dst & 0xffff) + 17u + udp_len;
}

/* ------------------------------------------------------------------ parse */

static const uint8_t BROADCAST[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};

static int parse_arp(const uint8_t *f, size_t have, const srpc_endpoint_t *self, srpc_frame_info_t *info)
{
    if (have < SRPC_ARP_FRAME_LEN)
        return -SRPC_FRAME_SHORT;
    const uint8_t *a = f + SRPC_ETH_HLEN;
    if (rd16(a) != 1 || rd16(a + 2) != SRPC_ETHERTYPE_IPV4 || a[4] != 6 || a[5] != 4)
        return -SRPC_FRAME_ARP_FORMAT;
    uint16_t op = rd16(a + 6);
    if (op != 1 && op != 2)
        return -SRPC_FRAME_ARP_FORMAT;
    int to_me = memcmp(f, self->mac, 6) == 0;
    if (rd32(a + 24) != self->ip || !(to_me || (op == 1 && memcmp(f, BROADCAST, 6) == 0)))
        return -SRPC_FRAME_NOT_OURS;
    memcpy(info->peer.mac, a + 8, 6);
    info->peer.ip = rd32(a + 14);
    info->peer.port = 0;
    info->payload_off = info->payload_len = 0;
    return op == 1 ? SRPC_FRAME_ARP_REQUEST : SRPC_FRAME_ARP_REPLY;
}

int srpc_frame_parse(const struct iovec *seg, unsigned nseg, const srpc_endpoint_t *self, unsigned flags,
                     srpc_frame_info_t *info)
{
    if (!seg || nseg == 0 || !self || !info || !seg[0].iov_base)
        return -SRPC_FRAME_SHORT;
    size_t total = 0;
    for (unsigned i = 0; i < nseg; i++)
        total += seg[i].iov_len;
    const uint8_t *f = seg[0].iov_base;
    const size_t have = seg[0].iov_len; /* the headers must lie here */
    if (have < SRPC_ETH_HLEN)
        return -SRPC_FRAME_SHORT;
    uint16_t type = rd16(f + 12);
    if (type == SRPC_ETHERTYPE_ARP)
        return parse_arp(f, have, self, info);
    if (type != SRPC_ETHERTYPE_IPV4)
        return -SRPC_FRAME_ETHERTYPE;
    if (memcmp(f, self->mac, 6) != 0)
        return -SRPC_FRAME_NOT_OURS;
    if (have < SRPC_FRAME_HLEN)
        return -SRPC_FRAME_SHORT;

    const uint8_t *ip = f + SRPC_ETH_HLEN;
    if (ip[0] != 0x45) /* version 4, 5 words: no options */
        return -SRPC_FRAME_IP_HEADER;
    uint16_t ip_len = rd16(ip + 2);
    if (ip_len < SRPC_IP4_HLEN + SRPC_UDP_HLEN)
        return -SRPC_FRAME_IP_HEADER;
    if (ip_len > total - SRPC_ETH_HLEN)
        return -SRPC_FRAME_SHORT;
    if (rd16(ip + 6) & 0x3fff) /* more fragments, or an offset */
        return -SRPC_FRAME_IP_FRAGMENT;
    if (ip[9] != 17)
        return -SRPC_FRAME_PROTOCOL;
    if (!(flags & SRPC_FRAME_CSUM_CHECKED)) {
        struct iovec h = {(void *)ip, SRPC_IP4_HLEN};
        if (srpc_inet_checksum(&h, 1, 0) != 0)
            return -SRPC_FRAME_IP_CHECKSUM;
    }
    if (rd32(ip + 16) != self->ip)
        return -SRPC_FRAME_NOT_OURS;

    const uint8_t *udp = ip + SRPC_IP4_HLEN;
    uint16_t udp_len = rd16(udp + 4);
    if (udp_len < SRPC_UDP_HLEN || udp_len != ip_len - SRPC_IP4_HLEN)
        return -SRPC_FRAME_UDP_LENGTH;
    if (rd16(udp + 2) != self->port)
        return -SRPC_FRAME_NOT_OURS;
    if (!(flags & SRPC_FRAME_CSUM_CHECKED) && rd16(udp + 6) != 0) {
        struct csum c = {pseudo_sum(rd32(ip + 12), rd32(ip + 16), udp_len), 0};
        csum_range(&c, seg, nseg, SRPC_ETH_HLEN + SRPC_IP4_HLEN, udp_len);
        if (csum_finish(&c) != 0)
            return -SRPC_FRAME_UDP_CHECKSUM;
    }
    memcpy(info->peer.mac, f + 6, 6);
    info->peer.ip = rd32(ip + 12);
    info->peer.port = rd16(udp);
    info->payload_off = SRPC_FRAME_HLEN;
    info->payload_len = udp_len - SRPC_UDP_HLEN;
    return SRPC_FRAME_UDP;
}

/* ------------------------------------------------------------------ build */

int srpc_frame_build_udp(uint8_t hdr[SRPC_FRAME_HLEN], const srpc_endpoint_t *src, const srpc_endpoint_t *dst,
                         const struct iovec *payload, unsigned n, uint16_t ip_id, unsigned flags)
{
    if (!hdr || !src || !dst || (n && !payload))
        return -EINVAL;
    size_t plen = 0;
    for (unsigned i = 0; i < n; i++)
        plen += payload[i].iov_len;
    if (plen > SRPC_UDP_MAX_PAYLOAD)
        return -EMSGSIZE;
    const uint16_t udp_len = (uint16_t)(SRPC_UDP_HLEN + plen);

    memcpy(hdr, dst->mac, 6);
    memcpy(hdr + 6, src->mac, 6);
    wr16(hdr + 12, SRPC_ETHERTYPE_IPV4);

    uint8_t *ip = hdr + SRPC_ETH_HLEN;
    ip[0] = 0x45;
    ip[1] = 0;
    wr16(ip + 2, (uint16_t)(SRPC_IP4_HLEN + udp_len));
    wr16(ip + 4, ip_id);
    wr16(ip + 6, 0x4000); /* don't fragment: segments are cut to the MTU above us */
    ip[8] = 64;           /* TTL */
    ip[9] = 17;           /* UDP */
    wr16(ip + 10, 0);
    wr32(ip + 12, src->ip);
    wr32(ip + 16, dst->ip);

    uint8_t *udp = ip + SRPC_IP4_HLEN;
    wr16(udp, src->port);
    wr16(udp + 2, dst->port);
    wr16(udp + 4, udp_len);
    wr16(udp + 6, 0);

    uint32_t pseudo = pseudo_sum(src->ip, dst->ip, udp_len);
    if (flags & SRPC_FRAME_CSUM_OFFLOAD) {
        wr16(udp + 6, (uint16_t)fold(pseudo)); /* the NIC adds the rest and complements */
        return 0;
    }
    struct iovec h = {ip, SRPC_IP4_HLEN};
    wr16(ip + 10, srpc_inet_checksum(&h, 1, 0));
    struct csum c = {pseudo, 0};
    csum_add(&c, udp, SRPC_UDP_HLEN);
    for (unsigned i = 0; i < n; i++)
        csum_add(&c, payload[i].iov_base, payload[i].iov_len);
    uint16_t sum = csum_finish(&c);
    wr16(udp + 6, sum ? sum : 0xffff); /* 0 would mean "no checksum" */
    return 0;
}

int srpc_frame_build_arp(uint8_t frame[SRPC_ARP_FRAME_LEN], int reply, const srpc_endpoint_t *self,
                         const uint8_t target_mac[6], uint32_t target_ip)
{
    if (!frame || !self || (reply && !target_mac))
        return -EINVAL;
    memcpy(frame, reply ? target_mac : BROADCAST, 6);
    memcpy(frame + 6, self->mac, 6);
    wr16(frame + 12, SRPC_ETHERTYPE_ARP);
    uint8_t *a = frame + SRPC_ETH_HLEN;
    wr16(a, 1); /* Ethernet */
    wr16(a + 2, SRPC_ETHERTYPE_IPV4);
    a[4] = 6;
    a[5] = 4;
    wr16(a + 6, reply ? 2 : 1);
    memcpy(a + 8, self->mac, 6);
    wr32(a + 14, self->ip);
    if (reply)
        memcpy(a + 18, target_mac, 6);
    else
        memset(a + 18, 0, 6);
    wr32(a + 24, target_ip);
    return 0;
}

const char *srpc_frame_drop_name(int reason)
{
    static const char *const names[SRPC_FRAME_DROP_MAX] = {
        [SRPC_FRAME_SHORT] = "short",
        [SRPC_FRAME_ETHERTYPE] = "ethertype",
        [SRPC_FRAME_NOT_OURS] = "not_ours",
        [SRPC_FRAME_IP_HEADER] = "ip_header",
        [SRPC_FRAME_IP_FRAGMENT] = "ip_fragment",
        [SRPC_FRAME_IP_CHECKSUM] = "ip_checksum",
        [SRPC_FRAME_PROTOCOL] = "protocol",
        [SRPC_FRAME_UDP_LENGTH] = "udp_length",
        [SRPC_FRAME_UDP_CHECKSUM] = "udp_checksum",
        [SRPC_FRAME_ARP_FORMAT] = "arp_format",
    };
    if (reason < 0)
        reason = -reason;
    return reason > 0 && reason < SRPC_FRAME_DROP_MAX ? names[reason] : "unknown";
}

/* test_frame.c: Ethernet/IPv4/UDP and ARP frames: checksums against a reference, build/parse round trips across segment splits, every drop reason, and random garbage. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpdk/frame.h"

#include "check.h"

static const srpc_endpoint_t SERVER = {{0x02, 0, 0, 0, 0, 0x01}, 0x0a000001, 9000}; /* 10.0.0.1 */
static const srpc_endpoint_t PEER = {{0x02, 0, 0, 0, 0, 0x02}, 0x0a000002, 40000};  /* 10.0.0.2 */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

/* RFC 1071 one word at a time: the reference the fast sum is checked against. */
static uint16_t ref_checksum(const uint8_t *p, size_t len, uint32_t initial)
{
    uint64_t s = initial;
    for (size_t i = 0; i + 1 < len; i += 2)
        s += (uint32_t)p[i] << 8 | p[i + 1];
    if (len & 1)
        s += (uint32_t)p[len - 1] << 8;
    while (s >> 16)
        s = (s & 0xffff) + (s >> 16);
    return (uint16_t)~s;
}

static void test_checksum(void)
{
    /* RFC 1071 §3's example words sum to ddf2. */
    uint8_t rfc[] = {0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7};
    struct iovec v = {rfc, sizeof(rfc)};
    CHECK(srpc_inet_checksum(&v, 1, 0) == (uint16_t)~0xddf2, "RFC 1071 example: %#x", srpc_inet_checksum(&v, 1, 0));
    /* A real IPv4 header (192.168.0.1 -> 192.168.0.199) whose checksum is b861. */
    uint8_t ip[20] = {0x45, 0, 0, 0x73, 0, 0, 0x40, 0, 0x40, 0x11, 0, 0, 0xc0, 0xa8, 0, 1, 0xc0, 0xa8, 0, 0xc7};
    v = (struct iovec){ip, 20};
    CHECK(srpc_inet_checksum(&v, 1, 0) == 0xb861, "IPv4 header example: %#x", srpc_inet_checksum(&v, 1, 0));
    ip[10] = 0xb8;
    ip[11] = 0x61;
    CHECK(srpc_inet_checksum(&v, 1, 0) == 0, "a header with its checksum sums to zero");

    /* Random data cut into random segments (odd lengths and offsets) vs the reference. */
    static uint8_t buf[70000];
    int bad = 0;
    for (int t = 0; t < 400; t++) {
        size_t len = t < 20 ? (size_t)t : rnd() % (t % 4 == 0 ? sizeof(buf) : 200);
        size_t start = rnd() % 8;
        for (size_t i = 0; i < len; i++)
            buf[start + i] = (uint8_t)rnd();
        uint32_t initial = rnd() % 0x40000;
        struct iovec segs[6];
        unsigned n = 0;
        size_t at = 0;
        while (at < len && n < 5) {
            size_t l = 1 + rnd() % (len - at);
            segs[n++] = (struct iovec){buf + start + at, l};
            at += l;
        }
        if (at < len || n == 0)
            segs[n++] = (struct iovec){buf + start + at, len - at};
        bad += srpc_inet_checksum(segs, n, initial) != ref_checksum(buf + start, len, initial);
    }
    CHECK(bad == 0, "%d of 400 random sums differ from the reference", bad);
    CHECK(srpc_inet_checksum(NULL, 0, 0) == 0xffff, "empty");
}

/* Builds a frame from PEER to SERVER carrying plen bytes; returns its length. */
static size_t make_frame(uint8_t *f, size_t plen, unsigned flags)
{
    for (size_t i = 0; i < plen; i++)
        f[SRPC_FRAME_HLEN + i] = (uint8_t)(i * 7 + 3);
    struct iovec p = {f + SRPC_FRAME_HLEN, plen};
    int rc = srpc_frame_build_udp(f, &PEER, &SERVER, &p, 1, 0x1234, flags);
    CHECK(rc == 0, "build %zu: %d", plen, rc);
    return SRPC_FRAME_HLEN + plen;
}

static int parse1(const uint8_t *f, size_t len, unsigned flags, srpc_frame_info_t *info)
{
    struct iovec v = {(void *)f, len};
    return srpc_frame_parse(&v, 1, &SERVER, flags, info);
}

static void fix_ip_checksum(uint8_t *f)
{
    uint8_t *ip = f + SRPC_ETH_HLEN;
    ip[10] = ip[11] = 0;
    struct iovec v = {ip, SRPC_IP4_HLEN};
    uint16_t s = srpc_inet_checksum(&v, 1, 0);
    ip[10] = (uint8_t)(s >> 8);
    ip[11] = (uint8_t)s;
}

static void test_roundtrip(void)
{
    static uint8_t f[SRPC_FRAME_HLEN + SRPC_UDP_MAX_PAYLOAD + 1];
    const size_t sizes[] = {0, 1, 22, 23, 1472 - 0, 8950, SRPC_UDP_MAX_PAYLOAD};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t plen = sizes[k], len = make_frame(f, plen, 0);
        srpc_frame_info_t info;
        int rc = parse1(f, len, 0, &info);
        CHECK(rc == SRPC_FRAME_UDP, "parse %zu: %d (%s)", plen, rc, srpc_frame_drop_name(rc));
        CHECK(info.payload_off == SRPC_FRAME_HLEN && info.payload_len == plen, "payload %zu", plen);
        CHECK(memcmp(info.peer.mac, PEER.mac, 6) == 0 && info.peer.ip == PEER.ip && info.peer.port == PEER.port,
              "peer %zu", plen);
        /* The same frame split as a header/payload buffer split would cut it, and at odd places. */
        const size_t cuts[] = {64, SRPC_FRAME_HLEN, SRPC_FRAME_HLEN + 1, 63};
        for (size_t c = 0; c < 4; c++) {
            size_t cut = cuts[c] < len ? cuts[c] : len;
            struct iovec v[3] = {{f, cut}, {f + cut, (len - cut) / 2}, {f + cut + (len - cut) / 2, len - cut - (len - cut) / 2}};
            rc = srpc_frame_parse(v, 3, &SERVER, 0, &info);
            CHECK(rc == SRPC_FRAME_UDP && info.payload_len == plen, "split at %zu, %zu bytes: %d", cut, plen, rc);
        }
    }
    /* Payload given to the builder in pieces checksums the same as in one. */
    uint8_t one[SRPC_FRAME_HLEN], pieces[SRPC_FRAME_HLEN];
    uint8_t data[999];
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (uint8_t)rnd();
    struct iovec whole = {data, sizeof(data)};
    struct iovec parts[3] = {{data, 1}, {data + 1, 500}, {data + 501, 498}};
    CHECK(srpc_frame_build_udp(one, &SERVER, &PEER, &whole, 1, 7, 0) == 0, "build whole");
    CHECK(srpc_frame_build_udp(pieces, &SERVER, &PEER, parts, 3, 7, 0) == 0, "build pieces");
    CHECK(memcmp(one, pieces, SRPC_FRAME_HLEN) == 0, "headers differ with a scattered payload");
    CHECK(one[14 + 6] == 0x40 && one[14 + 8] == 64 && one[14 + 9] == 17, "DF, TTL 64, UDP");

    CHECK(srpc_frame_build_udp(f, &PEER, &SERVER, &(struct iovec){f, SRPC_UDP_MAX_PAYLOAD + 1}, 1, 0, 0) == -EMSGSIZE,
          "a payload over 65507 bytes");
    CHECK(srpc_frame_build_udp(NULL, &PEER, &SERVER, NULL, 0, 0, 0) == -EINVAL, "NULL header");
    CHECK(srpc_frame_build_udp(f, &PEER, &SERVER, NULL, 1, 0, 0) == -EINVAL, "NULL payload list");

    /* Ethernet padding past the IP total length is ignored. */
    size_t len = make_frame(f, 4, 0);
    memset(f + len, 0xee, 60 - len);
    srpc_frame_info_t info;
    CHECK(parse1(f, 60, 0, &info) == SRPC_FRAME_UDP && info.payload_len == 4, "padded to 60 bytes");

    /* Checksum offload: IP checksum left 0, UDP field = the pseudo-header sum. */
    len = make_frame(f, 100, SRPC_FRAME_CSUM_OFFLOAD);
    CHECK(f[14 + 10] == 0 && f[14 + 11] == 0, "offload: IP checksum left to the NIC");
    uint32_t ps = (PEER.ip >> 16) + (PEER.ip & 0xffff) + (SERVER.ip >> 16) + (SERVER.ip & 0xffff) + 17 + 108;
    while (ps >> 16)
        ps = (ps & 0xffff) + (ps >> 16);
    CHECK(((uint32_t)f[40] << 8 | f[41]) == ps, "offload: UDP field holds the pseudo-header sum");
    CHECK(parse1(f, len, SRPC_FRAME_CSUM_CHECKED, &info) == SRPC_FRAME_UDP, "offloaded frame, NIC-checked");
    CHECK(parse1(f, len, 0, &info) == -SRPC_FRAME_IP_CHECKSUM, "offloaded frame checked in software");
}

#define EXPECT_DROP(f, len, why, what)                                                              \
    do {                                                                                            \
        srpc_frame_info_t i_;                                                                       \
        int r_ = parse1(f, len, 0, &i_);                                                            \
        CHECK(r_ == -(why), "%s: got %d (%s), want %s", what, r_, srpc_frame_drop_name(r_),          \
              srpc_frame_drop_name(why));                                                           \
    } while (0)

static void test_malformed(void)
{
    uint8_t f[2048];
    size_t len = make_frame(f, 64, 0);
    uint8_t g[2048];
#define FRESH() memcpy(g, f, len)

    FRESH();
    EXPECT_DROP(g, 10, SRPC_FRAME_SHORT, "10 bytes");
    EXPECT_DROP(g, 41, SRPC_FRAME_SHORT, "41 bytes");
    EXPECT_DROP(g, len - 1, SRPC_FRAME_SHORT, "truncated payload");
    CHECK(srpc_frame_parse(NULL, 1, &SERVER, 0, NULL) == -SRPC_FRAME_SHORT, "NULL");

    FRESH();
    g[12] = 0x86, g[13] = 0xdd;
    EXPECT_DROP(g, len, SRPC_FRAME_ETHERTYPE, "IPv6");
    g[12] = 0x81, g[13] = 0x00;
    EXPECT_DROP(g, len, SRPC_FRAME_ETHERTYPE, "VLAN tag");

    FRESH();
    g[5] ^= 1;
    EXPECT_DROP(g, len, SRPC_FRAME_NOT_OURS, "another MAC");
    memset(g, 0xff, 6);
    EXPECT_DROP(g, len, SRPC_FRAME_NOT_OURS, "UDP to broadcast");
    FRESH();
    g[14 + 19] ^= 1;
    fix_ip_checksum(g);
    EXPECT_DROP(g, len, SRPC_FRAME_NOT_OURS, "another IP address");
    FRESH();
    g[14 + 20 + 3] ^= 1;
    EXPECT_DROP(g, len, SRPC_FRAME_NOT_OURS, "another port");

    FRESH();
    g[14] = 0x65;
    EXPECT_DROP(g, len, SRPC_FRAME_IP_HEADER, "IP version 6 in an IPv4 frame");
    g[14] = 0x46;
    EXPECT_DROP(g, len, SRPC_FRAME_IP_HEADER, "IP options");
    FRESH();
    g[14 + 2] = 0, g[14 + 3] = 27;
    fix_ip_checksum(g);
    EXPECT_DROP(g, len, SRPC_FRAME_IP_HEADER, "IP total length 27");
    FRESH();
    g[14 + 2] = 0x05, g[14 + 3] = 0xdc; /* 1500 > what the frame holds */
    fix_ip_checksum(g);
    EXPECT_DROP(g, len, SRPC_FRAME_SHORT, "IP total length past the frame");

    FRESH();
    g[14 + 6] |= 0x20;
    fix_ip_checksum(g);
    EXPECT_DROP(g, len, SRPC_FRAME_IP_FRAGMENT, "more fragments");
    FRESH();
    g[14 + 7] = 8;
    fix_ip_checksum(g);
    EXPECT_DROP(g, len, SRPC_FRAME_IP_FRAGMENT, "fragment offset");

    FRESH();
    g[14 + 8] ^= 0x10; /* TTL, checksum left stale */
    EXPECT_DROP(g, len, SRPC_FRAME_IP_CHECKSUM, "IP checksum");
    FRESH();
    g[14 + 9] = 6;
    fix_ip_checksum(g);
    EXPECT_DROP(g, len, SRPC_FRAME_PROTOCOL, "TCP");

    FRESH();
    g[14 + 20 + 4] = 0, g[14 + 20 + 5] = 7;
    EXPECT_DROP(g, len, SRPC_FRAME_UDP_LENGTH, "UDP length 7");
    FRESH();
    g[14 + 20 + 5] -= 1;
    EXPECT_DROP(g, len, SRPC_FRAME_UDP_LENGTH, "UDP length shorter than the IP payload");

    FRESH();
    g[SRPC_FRAME_HLEN + 10] ^= 0x40;
    EXPECT_DROP(g, len, SRPC_FRAME_UDP_CHECKSUM, "a payload bit flipped");
    srpc_frame_info_t info;
    CHECK(parse1(g, len, SRPC_FRAME_CSUM_CHECKED, &info) == SRPC_FRAME_UDP, "NIC-checked: not recomputed");
    g[40] = g[41] = 0;
    CHECK(parse1(g, len, 0, &info) == SRPC_FRAME_UDP, "a zero UDP checksum means none");
#undef FRESH
}

static void test_arp(void)
{
    uint8_t req[SRPC_ARP_FRAME_LEN], rep[SRPC_ARP_FRAME_LEN];
    srpc_frame_info_t info;
    /* PEER asks who has SERVER's address. */
    CHECK(srpc_frame_build_arp(req, 0, &PEER, NULL, SERVER.ip) == 0, "build request");
    CHECK(memcmp(req, "\xff\xff\xff\xff\xff\xff", 6) == 0, "request is broadcast");
    CHECK(parse1(req, sizeof(req), 0, &info) == SRPC_FRAME_ARP_REQUEST, "request parsed");
    CHECK(memcmp(info.peer.mac, PEER.mac, 6) == 0 && info.peer.ip == PEER.ip, "asker");
    /* SERVER answers; PEER's view of the answer. */
    CHECK(srpc_frame_build_arp(rep, 1, &SERVER, info.peer.mac, info.peer.ip) == 0, "build reply");
    CHECK(memcmp(rep, PEER.mac, 6) == 0, "reply is unicast to the asker");
    struct iovec v = {rep, sizeof(rep)};
    CHECK(srpc_frame_parse(&v, 1, &PEER, 0, &info) == SRPC_FRAME_ARP_REPLY, "reply parsed by the asker");
    CHECK(memcmp(info.peer.mac, SERVER.mac, 6) == 0 && info.peer.ip == SERVER.ip, "answer");

    uint8_t g[SRPC_ARP_FRAME_LEN + 18];
    memcpy(g, req, sizeof(req));
    memset(g + sizeof(req), 0, 18);
    CHECK(parse1(g, sizeof(g), 0, &info) == SRPC_FRAME_ARP_REQUEST, "padded ARP");
    EXPECT_DROP(g, 41, SRPC_FRAME_SHORT, "ARP cut short");
    g[14 + 27] ^= 1;
    EXPECT_DROP(g, sizeof(g), SRPC_FRAME_NOT_OURS, "ARP for another address");
    memcpy(g, req, sizeof(req));
    g[14 + 1] = 6;
    EXPECT_DROP(g, sizeof(g), SRPC_FRAME_ARP_FORMAT, "hardware type 6");
    memcpy(g, req, sizeof(req));
    g[14 + 7] = 3;
    EXPECT_DROP(g, sizeof(g), SRPC_FRAME_ARP_FORMAT, "operation 3");
    memcpy(g, rep, sizeof(rep));
    memset(g, 0xff, 6); /* a reply to broadcast, about our address */
    g[14 + 24] = (uint8_t)(SERVER.ip >> 24), g[14 + 25] = (uint8_t)(SERVER.ip >> 16);
    g[14 + 26] = (uint8_t)(SERVER.ip >> 8), g[14 + 27] = (uint8_t)SERVER.ip;
    EXPECT_DROP(g, sizeof(g), SRPC_FRAME_NOT_OURS, "broadcast reply");
    CHECK(srpc_frame_build_arp(rep, 1, &SERVER, NULL, 1) == -EINVAL, "reply without a target MAC");
}

/* Garbage and mutated frames: every verdict is a kind or a known reason, and an accepted
 * payload lies inside the frame. */
static void test_random(void)
{
    uint8_t valid[600], g[600];
    size_t vlen = make_frame(valid, 500, 0);
    int odd = 0, accepted = 0;
    for (int t = 0; t < 200000; t++) {
        size_t len;
        if (t % 2) {
            len = rnd() % sizeof(g);
            for (size_t i = 0; i < len; i++)
                g[i] = (uint8_t)rnd();
            if (t % 4 == 1)
                memcpy(g, SERVER.mac, 6), g[12] = 0x08, g[13] = t % 8 == 1 ? 0x06 : 0x00;
        } else {
            len = vlen - (t % 16 == 0 ? rnd() % vlen : 0);
            memcpy(g, valid, vlen);
            for (int k = 1 + (int)(rnd() % 3); k > 0; k--)
                g[rnd() % vlen] ^= (uint8_t)(1u << (rnd() % 8));
        }
        srpc_frame_info_t info;
        size_t cut = len > SRPC_FRAME_HLEN ? SRPC_FRAME_HLEN + rnd() % (len - SRPC_FRAME_HLEN) : len;
        struct iovec v[2] = {{g, cut}, {g + cut, len - cut}};
        int rc = srpc_frame_parse(v, 2, &SERVER, 0, &info);
        if (rc == SRPC_FRAME_UDP) {
            accepted++;
            odd += info.payload_off + info.payload_len > len;
        } else if (!(rc == SRPC_FRAME_ARP_REQUEST || rc == SRPC_FRAME_ARP_REPLY ||
                     (rc < 0 && -rc < SRPC_FRAME_DROP_MAX))) {
            odd++;
        }
    }
    CHECK(odd == 0, "%d verdicts out of range or payloads past the frame", odd);
    CHECK(accepted > 0, "no mutated frame was accepted (flips of the source MAC only should be)");
    CHECK(strcmp(srpc_frame_drop_name(-SRPC_FRAME_UDP_CHECKSUM), "udp_checksum") == 0 &&
              strcmp(srpc_frame_drop_name(99), "unknown") == 0,
          "drop names");
}

int main(void)
{
    test_checksum();
    test_roundtrip();
    test_malformed();
    test_arp();
    test_random();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}

/* test_dpdk.c: the DPDK transport on a net_ring port (what it sends comes back to it): messages of every size through send and the software split, malformed frames dropped and counted, ARP answered and learned; the same with the NIC's buffer split emulated into a host payload pool and, with a CUDA driver (the stand-in fake_libcuda.c on LD_LIBRARY_PATH will do), into GPU memory, where requests are handed on as device addresses. Needs no NIC and no hugepages. */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpdk/frame.h"
#include "splitrpc_dpdk.h"
#include "splitrpc_gpu.h"
#include "dpdk/transport_dpdk.h"
#include "core/wire.h"

#include "check.h"

#define IP_SELF 0x0a000001u  /* 10.0.0.1 */
#define IP_OTHER 0x0a000009u /* 10.0.0.9 */
#define PORT 9000
#define DATA_CAP 1472

static srpc_dpdk_port_t *port;
static srpc_rx_t rx;
static void *(*fake_shadow)(unsigned long long); /* the stand-in libcuda's view of its device memory */
static int (*cu_set_current)(void *), (*cu_get_current)(void **); /* the driver's, when loaded */

/* Datagram i's data: its data slot, or where it stayed in (stand-in) GPU memory. */
static const uint8_t *data_of(unsigned i)
{
    if (!rx.dev[i])
        return srpc_rx_data(&rx, i);
    return fake_shadow ? fake_shadow(rx.dev[i]) : NULL;
}

static struct sockaddr_in addr(uint32_t ip, uint16_t p)
{
    struct sockaddr_in s = {.sin_family = AF_INET, .sin_port = htons(p), .sin_addr.s_addr = htonl(ip)};
    return s;
}

/* Receives until `want` datagrams came or nothing more arrives. */
static int receive(unsigned want, srpc_hdr_t *hdrs, uint8_t *msg, size_t msg_cap)
{
    unsigned got = 0;
    for (int idle = 0; got < want && idle < 1000;) {
        int n = srpc_dpdk_rx_burst(port, &rx, 0);
        idle = n > 0 ? 0 : idle + 1;
        for (int i = 0; i < n; i++, got++) {
            srpc_hdr_t h;
            uint32_t len = rx.len[i], seg;
            CHECK(len >= SRPC_HDR_LEN && srpc_hdr_decode(srpc_rx_hdr(&rx, i), SRPC_HDR_LEN, &h) == 0, "header");
            CHECK(srpc_seg_check(&h, len - SRPC_HDR_LEN, &seg) == 0, "segment %u", h.seq);
            const struct sockaddr_in *src = (const struct sockaddr_in *)&rx.src[i];
            CHECK(src->sin_family == AF_INET && ntohl(src->sin_addr.s_addr) == IP_SELF && ntohs(src->sin_port) == PORT,
                  "source");
            if (hdrs && got < want)
                hdrs[got] = h;
            const uint8_t *d = data_of((unsigned)i);
            CHECK(d != NULL, "device data without a stand-in driver to read it");
            if (d && msg && (uint64_t)h.seq * seg + (len - SRPC_HDR_LEN) <= msg_cap)
                memcpy(msg + (size_t)h.seq * seg, d, len - SRPC_HDR_LEN);
        }
    }
    return (int)got;
}

static void test_messages(void)
{
    static uint8_t in[200000], out[200000];
    for (size_t i = 0; i < sizeof(in); i++)
        in[i] = (uint8_t)(i * 131 + 7);
    const uint32_t sizes[] = {0, 1, 1400, 1401, 4096, 100000, 200000};
    struct sockaddr_in self = addr(IP_SELF, PORT);
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        uint32_t len = sizes[k], seg = 1400;
        /* The message in three pieces, as a reply's tensors would be. */
        struct iovec pieces[3] = {{in, len / 3}, {in + len / 3, len / 3}, {in + 2 * (len / 3), len - 2 * (len / 3)}};
        srpc_hdr_t t = {.type = SRPC_RESPONSE, .func_id = 7, .req_id = 1000 + k, .aux = 0};
        int sent = srpc_dpdk_send_msg(port, (struct sockaddr *)&self, sizeof(self), &t, pieces, 3, len, seg);
        uint32_t nseg = srpc_seg_count(len, seg);
        CHECK(sent == (int)nseg, "send %u bytes: %d (want %u)", len, sent, nseg);
        memset(out, 0xee, sizeof(out));
        static srpc_hdr_t hdrs[200];
        int got = receive(nseg, hdrs, out, sizeof(out));
        CHECK(got == (int)nseg, "%u bytes: %d of %u datagrams back", len, got, nseg);
        int ok = 1;
        for (int i = 0; i < got && i < 200; i++)
            ok &= hdrs[i].req_id == 1000 + k && hdrs[i].func_id == 7 && hdrs[i].nseg == nseg && hdrs[i].msg_len == len;
        CHECK(ok, "%u bytes: headers", len);
        CHECK(memcmp(in, out, len) == 0, "%u bytes: data differs", len);
    }
    srpc_hdr_t t = {.type = SRPC_RESPONSE, .func_id = 1, .req_id = 1};
    struct iovec one = {in, 1500};
    CHECK(srpc_dpdk_send_msg(port, (struct sockaddr *)&self, sizeof(self), &t, &one, 1, 1500, 1451) == -EMSGSIZE,
          "a segment over the MTU");
    struct sockaddr_in stranger = addr(0x0a0000feu, PORT);
    CHECK(srpc_dpdk_send_msg(port, (struct sockaddr *)&stranger, sizeof(stranger), &t, &one, 1, 10, 1400) ==
              -EHOSTUNREACH, "a destination with no known MAC");
    struct sockaddr_in6 v6 = {.sin6_family = AF_INET6};
    CHECK(srpc_dpdk_send_msg(port, (struct sockaddr *)&v6, sizeof(v6), &t, &one, 1, 10, 1400) == -EAFNOSUPPORT, "IPv6");
    CHECK(srpc_dpdk_send_msg(port, (struct sockaddr *)&self, sizeof(self), &t, &one, 1, 3000, 1400) == -EINVAL,
          "pieces shorter than the message");
    CHECK(receive(1, NULL, NULL, 0) == 0, "nothing left over from refused sends");
}

/* Requests on a port whose payloads land in GPU memory: a one-segment request is handed on as
 * the device address of its data (held until the next burst), a larger one copied to the
 * host; thousands of them, more than the payload pool has buffers, so a held buffer that was
 * never given back would show. */
static void test_device_requests(void)
{
    static uint8_t in[6000], out[6000];
    for (size_t i = 0; i < sizeof(in); i++)
        in[i] = (uint8_t)(i * 7 + 1);
    struct sockaddr_in self = addr(IP_SELF, PORT);
    srpc_dpdk_port_stats_t st0, st1;
    srpc_dpdk_port_stats(port, &st0);
    int bad = 0;
    const uint32_t sizes[] = {1, 700, 1400, 5000};
    for (int r = 0; r < 4000; r++) {
        uint32_t len = sizes[r % 4], nseg = srpc_seg_count(len, 1400);
        srpc_hdr_t t = {.type = SRPC_REQUEST, .func_id = 3, .req_id = 50000 + (uint64_t)r};
        struct iovec one = {in + r % 97, len};
        if (srpc_dpdk_send_msg(port, (struct sockaddr *)&self, sizeof(self), &t, &one, 1, len, 1400) != (int)nseg) {
            bad++;
            continue;
        }
        memset(out, 0xee, len);
        bad += receive(nseg, NULL, out, sizeof(out)) != (int)nseg || memcmp(out, in + r % 97, len) != 0;
        bad += (nseg == 1) != (rx.dev[0] != 0); /* the last datagram received sits in slot 0 */
    }
    srpc_dpdk_rx_release(port);
    srpc_dpdk_port_stats(port, &st1);
    CHECK(bad == 0, "device requests: %d of 4000 wrong", bad);
    /* The receiving thread's own context (none here) is what it finds after a burst. */
    void *cur = &cur;
    cu_set_current(NULL);
    srpc_hdr_t t = {.type = SRPC_REQUEST, .func_id = 3, .req_id = 1};
    struct iovec one = {in, 100};
    CHECK(srpc_dpdk_send_msg(port, (struct sockaddr *)&self, sizeof(self), &t, &one, 1, 100, 1400) == 1 &&
              receive(1, NULL, NULL, 0) == 1 && cu_get_current(&cur) == 0 && cur == NULL,
          "a burst leaves the receiving thread's CUDA context as it found it");
    CHECK(st1.rx_device_payloads - st0.rx_device_payloads == 3000 &&
              st1.rx_device_to_host - st0.rx_device_to_host == 1000 * 4,
          "3000 handed on as device addresses (%llu), 4000 segments copied to the host (%llu)",
          (unsigned long long)(st1.rx_device_payloads - st0.rx_device_payloads),
          (unsigned long long)(st1.rx_device_to_host - st0.rx_device_to_host));
}

/* A frame from our own MAC to our own MAC carrying `len` payload bytes, checksums right. */
static size_t udp_frame(uint8_t *f, uint16_t dport, size_t len)
{
    srpc_endpoint_t self = {.ip = IP_SELF, .port = PORT}, to = {.ip = IP_SELF, .port = dport};
    srpc_dpdk_port_mac(port, self.mac);
    memcpy(to.mac, self.mac, 6);
    memset(f + SRPC_FRAME_HLEN, 0x5a, len);
    struct iovec p = {f + SRPC_FRAME_HLEN, len};
    CHECK(srpc_frame_build_udp(f, &self, &to, &p, 1, 1, 0) == 0, "build");
    return SRPC_FRAME_HLEN + len;
}

static void expect_drop(const uint8_t *f, size_t len, int reason, const char *what)
{
    srpc_dpdk_port_stats_t a, b;
    srpc_dpdk_port_stats(port, &a);
    CHECK(srpc_dpdk_send_frame(port, f, len) == 0, "%s: sent", what);
    CHECK(receive(1, NULL, NULL, 0) == 0, "%s: accepted", what);
    srpc_dpdk_port_stats(port, &b);
    CHECK(b.drops[reason] == a.drops[reason] + 1, "%s: not counted as %s", what, srpc_frame_drop_name(reason));
}

static void test_malformed(void)
{
    uint8_t f[2000];
    size_t len = udp_frame(f, PORT, 100);
    f[12] = 0x86, f[13] = 0xdd;
    expect_drop(f, len, SRPC_FRAME_ETHERTYPE, "IPv6 ethertype");
    len = udp_frame(f, PORT, 100);
    f[14] = 0x46;
    expect_drop(f, len, SRPC_FRAME_IP_HEADER, "IP options");
    len = udp_frame(f, PORT, 100);
    expect_drop(f, len - 10, SRPC_FRAME_SHORT, "truncated UDP");
    len = udp_frame(f, PORT + 1, 100);
    expect_drop(f, len, SRPC_FRAME_NOT_OURS, "another port");
    len = udp_frame(f, PORT, 100);
    f[SRPC_FRAME_HLEN + 50] ^= 1;
    expect_drop(f, len, SRPC_FRAME_UDP_CHECKSUM, "corrupted payload");
    expect_drop(f, 12, SRPC_FRAME_SHORT, "12 bytes");

    /* A datagram larger than the receive slot: flagged, not overrun. */
    len = udp_frame(f, PORT, SRPC_HDR_LEN + DATA_CAP + 5);
    CHECK(srpc_dpdk_send_frame(port, f, len) == 0, "big frame sent");
    int n = srpc_dpdk_rx_burst(port, &rx, 0);
    CHECK(n == 1 && rx.trunc[0] && rx.len[0] == SRPC_HDR_LEN + DATA_CAP + 5,
          "a payload over the slot is marked truncated (%d)", n);
}

static void test_arp(void)
{
    uint8_t other_mac[6] = {0x02, 0, 0, 0, 0, 0x09}, f[SRPC_ARP_FRAME_LEN];
    srpc_endpoint_t other = {.ip = IP_OTHER};
    memcpy(other.mac, other_mac, 6);
    srpc_dpdk_port_stats_t a, b;
    srpc_dpdk_port_stats(port, &a);
    CHECK(srpc_frame_build_arp(f, 0, &other, NULL, IP_SELF) == 0, "ARP request");
    CHECK(srpc_dpdk_send_frame(port, f, sizeof(f)) == 0, "ARP request sent");
    CHECK(receive(1, NULL, NULL, 0) == 0, "no datagram from ARP");
    srpc_dpdk_port_stats(port, &b);
    CHECK(b.arp_replies == a.arp_replies + 1, "the request was answered");
    /* Our reply came back round the ring: addressed to the other MAC, so not ours. */
    CHECK(b.drops[SRPC_FRAME_NOT_OURS] == a.drops[SRPC_FRAME_NOT_OURS] + 1, "our reply seen and dropped");
    /* The asker was learned: a message to it goes out (and comes back to a MAC not ours). */
    struct sockaddr_in to = addr(IP_OTHER, PORT);
    srpc_hdr_t t = {.type = SRPC_RESPONSE, .func_id = 1, .req_id = 2};
    CHECK(srpc_dpdk_send_msg(port, (struct sockaddr *)&to, sizeof(to), &t, NULL, 0, 0, 1400) == 1,
          "send to the learned neighbour");
    CHECK(receive(1, NULL, NULL, 0) == 0, "its frame is not for us");
}

int main(void)
{
    const char *args[] = {"--no-huge", "--no-shconf", "-m", "256", "--no-pci", "--no-telemetry", "-l", "0",
                          "--log-level=*:error", "--vdev=net_ring0", "--vdev=net_ring1", "--vdev=net_ring2",
                          "--vdev=net_ring3"};
    int rc = srpc_dpdk_init(args, (int)(sizeof(args) / sizeof(args[0])));
    if (rc != 0) {
        printf("DPDK EAL: %s\n", srpc_dpdk_last_error());
        CHECK(rc == 0, "srpc_dpdk_init: %d", rc);
        printf("%d passed, %d failed\n", passed, failed);
        return 1;
    }
    srpc_dpdk_port_config_t bad = {.dev = "net_nothing9", .ip = IP_SELF, .udp_port = PORT};
    CHECK(srpc_dpdk_port_open(&bad, &port) == -ENODEV && !port, "no such port");
    bad.dev = "net_ring0";
    bad.udp_port = 0;
    CHECK(srpc_dpdk_port_open(&bad, &port) == -EINVAL && !port, "port 0");
    CHECK(srpc_rx_init(&rx, 32, DATA_CAP) == 0, "rx slots");
    /* net_ring0: frames of two chained mbufs (64-byte control part, then the data), as a
     * header/payload buffer split would deliver them; net_ring1: one mbuf per frame; then
     * one mbuf per frame with the buffer split emulated into a host payload pool, and into GPU memory
     * where a CUDA driver answers (the stand-in's device memory is read through its shadow). */
    const srpc_dpdk_port_config_t cfgs[4] = {
        {.dev = "net_ring0", .ip = IP_SELF, .udp_port = PORT, .tx_chain = 1},
        {.dev = "net_ring1", .ip = IP_SELF, .udp_port = PORT, .tx_chain = -1},
        {.dev = "net_ring2", .ip = IP_SELF, .udp_port = PORT, .tx_chain = -1, .emulate_split = 1},
        {.dev = "net_ring3", .ip = IP_SELF, .udp_port = PORT, .tx_chain = -1, .emulate_split = 1,
         .payload_on_gpu = 1, .gpu_device = 0}};
    const char *names[4] = {"chained", "one mbuf per frame", "split emulated, host payload pool",
                            "split emulated, GPU payload pool"};
    int have_gpu = srpc_gpu_init(0) == 0;
    void *cuda = have_gpu ? dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD) : NULL;
    *(void **)&fake_shadow = cuda ? dlsym(cuda, "fake_cuda_shadow") : NULL;
    *(void **)&cu_set_current = cuda ? dlsym(cuda, "cuCtxSetCurrent") : NULL;
    *(void **)&cu_get_current = cuda ? dlsym(cuda, "cuCtxGetCurrent") : NULL;
    if (!have_gpu)
        printf("no CUDA driver: %s (the GPU payload pool is not tried)\n", srpc_gpu_last_error());
    for (int c = 0; c < 4 - !have_gpu; c++) {
        port = NULL;
        rc = srpc_dpdk_port_open(&cfgs[c], &port);
        CHECK(rc == 0 && port, "open %s: %d", cfgs[c].dev, rc);
        if (!port)
            continue;
        uint8_t mac[6];
        srpc_dpdk_port_mac(port, mac);
        CHECK(srpc_dpdk_neighbour_add(port, IP_SELF, mac) == 0, "neighbour: ourselves");
        int before = failed;
        srpc_dpdk_port_stats_t st;
        srpc_dpdk_port_stats(port, &st);
        CHECK(st.rx_split_emulated == (c >= 2) && (c < 2 || st.payload_pool != SRPC_DPDK_PAYLOAD_NONE) &&
                  (c == 3) == (st.payload_pool == SRPC_DPDK_PAYLOAD_GPU) &&
                  (c == 3) == (srpc_dpdk_payload_device(port) == 0),
              "%s: emulated %llu, payload pool %s", names[c], (unsigned long long)st.rx_split_emulated,
              srpc_dpdk_payload_pool_name((int)st.payload_pool));
        test_messages();
        test_malformed();
        test_arp();
        if (c == 3 && fake_shadow && cu_set_current && cu_get_current)
            test_device_requests();
        srpc_dpdk_port_stats(port, &st);
        CHECK(st.rx_buffer_split == 0, "net_ring has no hardware buffer split");
        CHECK(c != 3 || st.rx_device_to_host > 0, "replies copied from GPU memory to the host");
        CHECK(st.tx_failed == 0 && st.rx_frames > 100, "tx_failed %llu, rx_frames %llu",
              (unsigned long long)st.tx_failed, (unsigned long long)st.rx_frames);
        printf("%s (%s): %llu frames received, %s\n", cfgs[c].dev, names[c],
               (unsigned long long)st.rx_frames, failed == before ? "ok" : "FAILED");
        srpc_dpdk_port_close(port);
    }
    srpc_rx_free(&rx);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}

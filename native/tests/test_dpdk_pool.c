/* test_dpdk_pool.c: the payload pools of the RX buffer split (dpdk_payload_pool.h) under an EAL without hugepages: the host pool made, its mbufs checked against the registered region, torn down and made again until a leaked registration would show; the GPU pool's error without a GPU, or the same checks with one or with the stand-in driver (fake_libcuda.c on LD_LIBRARY_PATH); the transport on a port without buffer split. Needs no NIC. Arguments: extra EAL arguments. */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rte_config.h>
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_memory.h>
#include <rte_mempool.h>

#include "dpdk/dpdk_payload_pool.h"
#include "splitrpc_dpdk.h"
#include "dpdk/transport_dpdk.h"

#include "check.h"

#define ROOM (RTE_PKTMBUF_HEADROOM + 1500 + 64) /* what the transport asks for at MTU 1500 */
#define ELT ((ROOM + RTE_CACHE_LINE_SIZE - 1) / RTE_CACHE_LINE_SIZE * RTE_CACHE_LINE_SIZE)

static uint16_t port_id;

static srpc_payload_pool_config_t config(const char *name, unsigned n, int on_gpu)
{
    srpc_payload_pool_config_t c = {.name = name, .port_id = port_id, .n = n, .data_room = ROOM,
                                    .socket = SOCKET_ID_ANY, .on_gpu = on_gpu, .gpu_device = 0};
    return c;
}

/* Takes every mbuf of the pool and checks where its buffer lies; host memory is written and
 * read back, GPU memory never touched. */
static void check_mbufs(srpc_payload_pool_t *pp, unsigned n, const char *what)
{
    struct rte_mempool *mp = srpc_payload_pool_mempool(pp);
    uint8_t *base = srpc_payload_pool_base(pp);
    size_t len = srpc_payload_pool_len(pp);
    const int gpu = srpc_payload_pool_kind(pp) == SRPC_DPDK_PAYLOAD_GPU;
    CHECK(mp && rte_mempool_avail_count(mp) == n, "%s: %u mbufs available, want %u", what,
          mp ? rte_mempool_avail_count(mp) : 0, n);
    const struct rte_memseg_list *msl = rte_mem_virt2memseg_list(base);
    CHECK(msl && msl->external && msl->base_va == base && msl->len == len,
          "%s: the region is not registered as external memory", what);
    CHECK(len >= (size_t)n * ELT && ((uintptr_t)base % (gpu ? 65536 : 4096)) == 0, "%s: region %p + %zu", what,
          (void *)base, len);

    struct rte_mbuf **m = calloc(n, sizeof(*m));
    uint8_t *seen = calloc(n, 1);
    if (!m || !seen || rte_pktmbuf_alloc_bulk(mp, m, n) != 0) {
        CHECK(0, "%s: could not take all %u mbufs", what, n);
        free(m);
        free(seen);
        return;
    }
    CHECK(rte_pktmbuf_alloc(mp) == NULL, "%s: an mbuf beyond the %u", what, n);
    int in_region = 1, iova_ok = 1, layout_ok = 1, distinct = 1;
    const int va = rte_eal_iova_mode() == RTE_IOVA_VA;
    for (unsigned i = 0; i < n; i++) {
        uint8_t *b = m[i]->buf_addr;
        in_region &= b >= base && b + m[i]->buf_len <= base + len;
        rte_iova_t io = rte_mbuf_iova_get(m[i]);
        iova_ok &= va ? io == (rte_iova_t)(uintptr_t)b : io == RTE_BAD_IOVA;
        layout_ok &= m[i]->buf_len == ROOM && m[i]->data_off == RTE_PKTMBUF_HEADROOM &&
                     (m[i]->ol_flags & RTE_MBUF_F_EXTERNAL) && (size_t)(b - base) % ELT == 0;
        size_t k = (size_t)(b - base) / ELT;
        if (k < n && !seen[k])
            seen[k] = 1;
        else
            distinct = 0;
    }
    CHECK(in_region, "%s: a buffer outside the registered region", what);
    CHECK(iova_ok, "%s: a buffer's IOVA is not its address (IOVA as VA) / RTE_BAD_IOVA (as PA)", what);
    CHECK(layout_ok, "%s: a buffer's length, headroom, flags or alignment", what);
    CHECK(distinct, "%s: two mbufs share a buffer", what);
    if (!gpu) { /* real host memory: every buffer holds what is written to it */
        for (unsigned i = 0; i < n; i++)
            memset(rte_pktmbuf_mtod(m[i], uint8_t *), (int)(i & 0xff), 1500);
        int same = 1;
        for (unsigned i = 0; i < n; i++)
            same &= rte_pktmbuf_mtod(m[i], uint8_t *)[0] == (uint8_t)i && rte_pktmbuf_mtod(m[i], uint8_t *)[1499] == (uint8_t)i;
        CHECK(same, "%s: buffers overlap", what);
    }
    rte_pktmbuf_free_bulk(m, n);
    CHECK(rte_mempool_avail_count(mp) == n, "%s: the mbufs went back", what);
    free(m);
    free(seen);
}

/* Made, checked, destroyed, and nothing of it left: neither the mempool nor the registration. */
static void host_pool_round(int round)
{
    char what[64];
    snprintf(what, sizeof(what), "host pool, round %d", round);
    srpc_payload_pool_config_t c = config("pp_test", 1023, 0);
    srpc_payload_pool_t *pp = NULL;
    int rc = srpc_payload_pool_create(&c, &pp);
    CHECK(rc == 0 && pp, "%s: %d (%s)", what, rc, srpc_payload_pool_last_error());
    if (!pp)
        return;
    CHECK(srpc_payload_pool_kind(pp) == SRPC_DPDK_PAYLOAD_HOST, "%s: kind", what);
    check_mbufs(pp, c.n, what);
    void *base = srpc_payload_pool_base(pp);
    printf("%s: %zu bytes at %p, %s\n", what, srpc_payload_pool_len(pp), base,
           srpc_payload_pool_locked(pp) ? "locked" : "not locked (memory lock limit)");
    srpc_payload_pool_destroy(pp);
    CHECK(rte_mem_virt2memseg_list(base) == NULL, "%s: still registered after destroy", what);
    CHECK(rte_mempool_lookup("pp_test") == NULL, "%s: mempool left after destroy", what);
}

static void test_host_pool(void)
{
    host_pool_round(1);
    host_pool_round(2);
    /* More rounds than the EAL has memseg lists: one registration leaked per round would run
     * out of them (ENOSPC) before the end. */
    int bad = 0, first_rc = 0;
    for (int i = 0; i < RTE_MAX_MEMSEG_LISTS + 8; i++) {
        srpc_payload_pool_config_t c = config("pp_loop", 63, 0);
        srpc_payload_pool_t *pp = NULL;
        int rc = srpc_payload_pool_create(&c, &pp);
        if (rc && !bad++)
            first_rc = rc;
        srpc_payload_pool_destroy(pp);
    }
    CHECK(bad == 0, "%d of %d create/destroy rounds failed, first %d (%s)", bad, RTE_MAX_MEMSEG_LISTS + 8, first_rc,
          srpc_payload_pool_last_error());
}

static void test_bad_arguments(void)
{
    srpc_payload_pool_t *pp = (srpc_payload_pool_t *)1;
    srpc_payload_pool_config_t c = config("pp_bad", 0, 0);
    CHECK(srpc_payload_pool_create(&c, &pp) == -EINVAL && pp == NULL, "no mbufs");
    c = config("pp_bad", 63, 0);
    c.data_room = RTE_PKTMBUF_HEADROOM;
    CHECK(srpc_payload_pool_create(&c, &pp) == -EINVAL, "no room after the headroom");
    c = config(NULL, 63, 0);
    CHECK(srpc_payload_pool_create(&c, &pp) == -EINVAL, "no name");
    c = config("pp_bad", 63, 1);
    c.gpu_device = -1;
    CHECK(srpc_payload_pool_create(&c, &pp) == -EINVAL, "GPU -1");
    c = config("pp_bad", 63, 0);
    c.port_id = RTE_MAX_ETHPORTS - 1;
    CHECK(srpc_payload_pool_create(&c, &pp) == -ENODEV && pp == NULL, "no such port");
    CHECK(strstr(srpc_payload_pool_last_error(), "no port") != NULL, "reason: %s", srpc_payload_pool_last_error());
    CHECK(rte_mempool_lookup("pp_bad") == NULL, "nothing left by refused calls");
}

/* The stand-in driver (fake_libcuda.c), when it is the libcuda.so.1 loaded. */
static int (*fake_live)(void), (*fake_sync_memops)(void);

static void find_fake_driver(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!h)
        return;
    *(void **)&fake_live = dlsym(h, "fake_cuda_live_allocations");
    *(void **)&fake_sync_memops = dlsym(h, "fake_cuda_sync_memops_set");
    dlclose(h);
}

/* Without a GPU (or a CUDA driver): a clear -ENODEV/-ENOTSUP and nothing left behind. With
 * one, or with the stand-in driver (whose "GPU memory" faults if touched): the same checks as
 * the host pool, the buffers never touched, twice, nothing left. */
static void test_gpu_pool(void)
{
    for (int round = 1; round <= 2; round++) {
        srpc_payload_pool_config_t c = config("pp_gpu", 1023, 1);
        srpc_payload_pool_t *pp = (srpc_payload_pool_t *)1;
        int rc = srpc_payload_pool_create(&c, &pp);
        if (round == 1)
            find_fake_driver();
        if (rc == 0) {
            printf("GPU pool, round %d: made on cuda:0%s (%zu bytes at %p)\n", round,
                   fake_live ? " of the stand-in driver" : "", srpc_payload_pool_len(pp), srpc_payload_pool_base(pp));
            CHECK(srpc_payload_pool_kind(pp) == SRPC_DPDK_PAYLOAD_GPU, "GPU pool: kind");
            check_mbufs(pp, c.n, "GPU pool");
            void *base = srpc_payload_pool_base(pp);
            srpc_payload_pool_destroy(pp);
            CHECK(rte_mem_virt2memseg_list(base) == NULL, "GPU pool: still registered after destroy");
            if (fake_live) {
                CHECK(fake_sync_memops && fake_sync_memops() == round, "GPU pool: SYNC_MEMOPS set %d times",
                      fake_sync_memops ? fake_sync_memops() : -1);
                CHECK(fake_live() == 0, "GPU pool: %d device allocations left after destroy", fake_live());
            }
        } else {
            const char *why = srpc_payload_pool_last_error();
            printf("GPU pool: %d (%s)\n", rc, why);
            CHECK(!fake_live, "GPU pool on the stand-in driver: %d (%s)", rc, why);
            CHECK(rc == -ENODEV || rc == -ENOTSUP, "GPU pool without a GPU: %d (%s)", rc, why);
            CHECK(pp == NULL, "GPU pool: *out cleared on failure");
            CHECK(strstr(why, "cuda:0") != NULL, "GPU pool: the reason names the device: %s", why);
        }
        CHECK(rte_mempool_lookup("pp_gpu") == NULL, "GPU pool: nothing left");
        if (rc)
            break;
    }
}

/* IOVA as PA: host memory of our own is refused (the transport then uses DPDK memory). */
static void test_host_pool_pa(void)
{
    srpc_payload_pool_config_t c = config("pp_pa", 63, 0);
    srpc_payload_pool_t *pp = NULL;
    int rc = srpc_payload_pool_create(&c, &pp);
    CHECK(rc == -ENOTSUP && !pp, "host pool under IOVA as PA: %d", rc);
    CHECK(strstr(srpc_payload_pool_last_error(), "IOVA as PA") != NULL, "reason: %s", srpc_payload_pool_last_error());
    CHECK(rte_mempool_lookup("pp_pa") == NULL, "nothing left");
}

/* A virtual port has no buffer split: asked for a GPU payload pool, it splits in software and
 * receives as ever. */
static void test_port_without_split(void)
{
    srpc_dpdk_port_config_t pc = {.dev = "net_ring0", .ip = 0x0a000001u, .udp_port = 9000, .payload_on_gpu = 1};
    srpc_dpdk_port_t *p = NULL;
    int rc = srpc_dpdk_port_open(&pc, &p);
    CHECK(rc == 0 && p, "open net_ring0: %d", rc);
    if (!p)
        return;
    srpc_dpdk_stats_t st;
    srpc_dpdk_port_stats(p, &st);
    CHECK(st.rx_buffer_split == 0 && st.payload_pool == SRPC_DPDK_PAYLOAD_NONE, "net_ring0: split %llu, pool %llu",
          (unsigned long long)st.rx_buffer_split, (unsigned long long)st.payload_pool);
    srpc_rx_t rx;
    CHECK(srpc_rx_init(&rx, 8, 1472) == 0, "rx slots");
    CHECK(srpc_dpdk_rx_burst(p, &rx, 0) == 0, "net_ring0 receives (nothing waits)");
    srpc_rx_free(&rx);
    srpc_dpdk_port_close(p);
}

int main(int argc, char **argv)
{
    const char *args[64] = {"--no-huge", "--no-shconf", "-m", "256", "--no-pci", "--no-telemetry", "-l", "0",
                            "--log-level=*:error", "--vdev=net_ring0"};
    int n = 10;
    for (int i = 1; i < argc && n < 63; i++)
        args[n++] = argv[i];
    int rc = srpc_dpdk_init(args, n);
    if (rc != 0) {
        printf("DPDK EAL: %s\n", srpc_dpdk_last_error());
        CHECK(rc == 0, "srpc_dpdk_init: %d", rc);
        printf("%d passed, %d failed\n", passed, failed);
        return 1;
    }
    CHECK(rte_eth_dev_get_port_by_name("net_ring0", &port_id) == 0, "net_ring0");
    const int va = rte_eal_iova_mode() == RTE_IOVA_VA;
    printf("IOVA as %s\n", va ? "VA" : "PA");
    test_bad_arguments();
    if (va)
        test_host_pool();
    else
        test_host_pool_pa();
    test_gpu_pool();
    test_port_without_split();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}

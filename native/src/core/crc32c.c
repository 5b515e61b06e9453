/* crc32c.c: CRC-32C (Castagnoli) of the version 3 data check (docs/PROTOCOL-v3.md): the CPU's CRC instruction (SSE4.2, ARMv8 CRC) where present, three streams at once on long buffers, slicing-by-8 tables otherwise. */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "splitrpc_core.h"

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_CRC32
#define HWCAP_CRC32 (1 << 7)
#endif
#endif

#define POLY 0x82f63b78u /* CRC-32C, reflected */

/* Three-stream blocks: the CRC instruction has a latency of three cycles and a throughput of
 * one, so three independent streams keep it busy; their registers are joined by shifting one
 * over the next block's length of zeros (a linear map, applied through 4 tables of 256). */
#define LONG_BLOCK 8192
#define SHORT_BLOCK 256

static uint32_t sw_tab[8][256];     /* slicing by 8 */
static uint32_t long_shift[4][256]; /* the register shifted over LONG_BLOCK zero bytes */
static uint32_t short_shift[4][256];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

/* mat applied to vec: mat[i] is the image of bit i. */
static uint32_t gf2_apply(const uint32_t mat[32], uint32_t vec)
{
    uint32_t sum = 0;
    for (int i = 0; vec; i++, vec >>= 1)
        if (vec & 1)
            sum ^= mat[i];
    return sum;
}

/* out = a after b (out may not alias a or b). */
static void gf2_compose(uint32_t out[32], const uint32_t a[32], const uint32_t b[32])
{
    for (int i = 0; i < 32; i++)
        out[i] = gf2_apply(a, b[i]);
}

/* The map taking a CRC register to the register after n zero bytes, as 4 byte tables. */
static void zeros_tables(uint32_t tab[4][256], size_t n)
{
    uint32_t bit[32], byte[32], acc[32], t[32];
    bit[0] = POLY; /* one zero bit: shift right, folding the polynomial in for bit 0 */
    for (int i = 1; i < 32; i++)
        bit[i] = 1u << (i - 1);
    memcpy(byte, bit, sizeof(bit));
    for (int k = 0; k < 7; k++) { /* eight zero bits */
        gf2_compose(t, bit, byte);
        memcpy(byte, t, sizeof(t));
    }
    for (int i = 0; i < 32; i++)
        acc[i] = 1u << i; /* identity */
    for (uint32_t sq[32]; n; n >>= 1) { /* acc = byte^n by squaring */
        if (n & 1) {
            gf2_compose(t, byte, acc);
            memcpy(acc, t, sizeof(t));
        }
        gf2_compose(sq, byte, byte);
        memcpy(byte, sq, sizeof(sq));
    }
    for (int k = 0; k < 4; k++)
        for (uint32_t b = 0; b < 256; b++)
            tab[k][b] = gf2_apply(acc, b << (8 * k));
}

static void make_tables(void)
{
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t c = b;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? c >> 1 ^ POLY : c >> 1;
        sw_tab[0][b] = c;
    }
    for (uint32_t b = 0; b < 256; b++)
        for (int k = 1; k < 8; k++)
            sw_tab[k][b] = sw_tab[k - 1][b] >> 8 ^ sw_tab[0][sw_tab[k - 1][b] & 0xff];
    zeros_tables(long_shift, LONG_BLOCK);
    zeros_tables(short_shift, SHORT_BLOCK);
}

static inline uint32_t shift(uint32_t tab[4][256], uint32_t c)
{
    return tab[0][c & 0xff] ^ tab[1][c >> 8 & 0xff] ^ tab[2][c >> 16 & 0xff] ^ tab[3][c >> 24];
}

static inline uint64_t load64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

/* The register (not inverted) over n bytes, by tables. */
static uint32_t sw_run(uint32_t c, const uint8_t *p, size_t n)
{
    while (n && ((uintptr_t)p & 7)) {
        c = sw_tab[0][(c ^ *p++) & 0xff] ^ c >> 8;
        n--;
    }
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t w = load64(p) ^ c;
        c = sw_tab[7][w & 0xff] ^ sw_tab[6][w >> 8 & 0xff] ^ sw_tab[5][w >> 16 & 0xff] ^
            sw_tab[4][w >> 24 & 0xff] ^ sw_tab[3][w >> 32 & 0xff] ^ sw_tab[2][w >> 40 & 0xff] ^
            sw_tab[1][w >> 48 & 0xff] ^ sw_tab[0][w >> 56];
    }
    while (n--)
        c = sw_tab[0][(c ^ *p++) & 0xff] ^ c >> 8;
    return c;
}

#if defined(__x86_64__)
#define HW_TARGET __attribute__((target("sse4.2")))
#define CRC8(c, b) __builtin_ia32_crc32qi((c), (b))
#define CRC64(c, w) ((uint32_t)__builtin_ia32_crc32di((c), (w)))
#define HAVE_HW 1
#elif defined(__aarch64__) && defined(__linux__) /* never run here (an x86 machine): untested */
#define HW_TARGET __attribute__((target("+crc")))
#ifdef __clang__
#define CRC8(c, b) __builtin_arm_crc32cb((c), (b))
#define CRC64(c, w) __builtin_arm_crc32cd((c), (w))
#else
#define CRC8(c, b) __builtin_aarch64_crc32cb((c), (b))
#define CRC64(c, w) __builtin_aarch64_crc32cx((c), (w))
#endif
#define HAVE_HW 1
#else
#define HAVE_HW 0
#endif

#if HAVE_HW
/* Three streams of block bytes each while 3 * block bytes remain. */
#define THREE_STREAMS(block, tab)                                                                    \
    while (n >= 3 * (block)) {                                                                       \
        uint32_t c1 = 0, c2 = 0;                                                                     \
        for (const uint8_t *end = p + (block); p < end; p += 8) {                                   \
            c = CRC64(c, load64(p));                                                                 \
            c1 = CRC64(c1, load64(p + (block)));                                                     \
            c2 = CRC64(c2, load64(p + 2 * (block)));                                                 \
        }                                                                                            \
        c = shift(tab, c) ^ c1;                                                                      \
        c = shift(tab, c) ^ c2;                                                                      \
        p += 2 * (block);                                                                            \
        n -= 3 * (block);                                                                            \
    }

HW_TARGET static uint32_t hw_run(uint32_t c, const uint8_t *p, size_t n)
{
    while (n && ((uintptr_t)p & 7)) {
        c = CRC8(c, *p++);
        n--;
    }
    THREE_STREAMS(LONG_BLOCK, long_shift)
    THREE_STREAMS(SHORT_BLOCK, short_shift)
    for (; n >= 8; n -= 8, p += 8)
        c = CRC64(c, load64(p));
    while (n--)
        c = CRC8(c, *p++);
    return c;
}

static int hw_present(void)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2") != 0;
#else
    return (getauxval(AT_HWCAP) & HWCAP_CRC32) != 0;
#endif
}
#endif

static int use_hw = -1; /* set once, under tables_once */

static void init(void)
{
    make_tables();
#if HAVE_HW
    use_hw = hw_present();
#else
    use_hw = 0;
#endif
}

uint32_t srpc_crc32c(uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&tables_once, init);
    uint32_t c = ~crc;
    if (!len)
        return crc;
#if HAVE_HW
    if (use_hw)
        return ~hw_run(c, buf, len);
#endif
    return ~sw_run(c, buf, len);
}

uint32_t srpc_crc32c_tables(uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&tables_once, init);
    return len ? ~sw_run(~crc, buf, len) : crc;
}

int srpc_crc32c_hardware(void)
{
    pthread_once(&tables_once, init);
    return use_hw;
}

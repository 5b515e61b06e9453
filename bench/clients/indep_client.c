/* indep_client.c: an independent closed-loop benchmark client of the SplitRPC UDP wire protocol, version 1 -- written from docs/PROTOCOL.md alone, without reading the server's code or its own load generator. */
/*
 * Build:  cc -O2 -std=gnu11 -Wall -Wextra -o indep_client indep_client.c
 * Run:    ./indep_client --port 9230 [--host ADDR] [--func ID] [--size BYTES]
 *             [--fill vecadd|zero] [--check] [--outstanding N] [--calls N]
 *             [--warmup N] [--mode spin|block] [--seg S] [--timeout-ms MS] [--json]
 *
 * Discipline (closed loop): N calls in flight; each call's datagrams leave in ONE
 * sendmmsg(); as soon as a call's reply is complete (or the call ends as an error or
 * lost) the next call is sent from the same slot.  Replies are read with recvmmsg()
 * into a batch of buffers: spin = MSG_DONTWAIT in a tight loop, block = MSG_WAITFORONE
 * (with SO_RCVTIMEO so that retransmission timers still fire when nothing arrives).
 *
 * Accounting (what each number means):
 *   calls       measured calls that ended: ok + errors + lost (== --calls)
 *   errors      measured calls answered by an ERROR datagram (by code), plus replies that
 *               failed --check (key "mismatch" in error_codes)
 *   resends     retransmissions of measured calls
 *   lost        measured calls unanswered after 1 send + 5 resends (then replaced)
 *   calls_per_s measured calls answered by a (checked, if --check) RESPONSE per second of
 *               the measured part; latencies are those calls' latencies, from the first
 *               send of the call to the arrival of its complete reply
 *   elapsed_s   from the first send of the first measured call to the completion of the
 *               last measured call; getrusage() deltas cover the same interval
 *   malformed / stray / dup_segments / dropped_msgs / multiseg_replies count over the
 *               whole run (warm-up included): they cannot be attributed to one phase.
 * Percentiles are nearest-rank over the sorted latencies of the ok measured calls.
 * Exit: 0 ran (even with errors), 2 bad usage, 1 could not run.
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define HDR 22                     /* control header bytes */
#define MAGIC 0xA5
#define VERSION 1
#define T_REQUEST 0
#define T_RESPONSE 1
#define T_ERROR 2
#define MAX_OUTSTANDING 1024
#define MAX_SEG 65485              /* 65507 - 22, the page's loopback maximum */
#define MAX_SEND_SEGS 1024         /* UIO_MAXIOV: what one sendmmsg() may carry */
#define MAX_ERR_DATA 256           /* an ERROR's message is at most 256 bytes */
#define MAX_RESENDS 5
#define MAX_REPLY (64u << 20)      /* a reply announcing more is not reassembled */
#define RX_BATCH 64
#define RX_BUFSZ 65536             /* > the largest UDP payload (65507 / 65527) */
#define NO_REPLY_EXIT_NS (5ull * 1000000000ull)
#define STALL_EXIT_NS (10ull * 1000000000ull)
#define HT_BITS 12                 /* req_id -> slot table, 4096 >= 4 * MAX_OUTSTANDING */
#define HT_SIZE (1u << HT_BITS)
#define HT_MASK (HT_SIZE - 1)
#define MAX_ERR_MSGS 16

/* ---------------------------------------------------------------- options */
static struct {
    const char *host;
    unsigned port;
    unsigned func;
    uint64_t size;
    int fill_vecadd;
    int check;
    unsigned outstanding;
    uint64_t calls;
    uint64_t warmup;
    int spin;
    unsigned seg;
    uint64_t timeout_ms;
    int json;
} cfg;

/* ---------------------------------------------------------------- state */
struct slot {
    int active;
    int measured;
    uint64_t req_id;
    uint64_t t_first;              /* first send of this call, ns */
    uint64_t t_last;               /* latest send, ns */
    unsigned resends;
    /* reply reassembly */
    int rs_started;
    uint32_t rs_nseg, rs_msglen, rs_S, rs_have;
    uint8_t *buf;
    size_t cap;
    uint8_t *bits;
    size_t bits_cap;
};

static struct slot slots[MAX_OUTSTANDING];
static unsigned active_count;
static int sock = -1;

static uint64_t next_req_id;
static uint64_t issued, total_to_issue, done_measured;
static int finished;

static uint8_t *req_data;          /* the request message (identical for every call) */
static uint32_t req_nseg;
static uint8_t *tx_hdrs;           /* req_nseg headers; only req_id changes per call */
static struct iovec *tx_iov;
static struct mmsghdr *tx_msgs;

static uint64_t *lat_ns;           /* latencies of ok measured calls */
static uint64_t n_lat;

static uint64_t c_ok, c_errors, c_mismatch, c_resends, c_lost;
static uint64_t c_multiseg;          /* replies reassembled from >1 segment (whole run) */
static uint64_t c_malformed, c_stray, c_dup, c_dropped_msgs, c_refused, c_send_splits;
static uint64_t err_by_code[65536];
static struct { unsigned code; unsigned len; char msg[MAX_ERR_DATA + 1]; } err_msgs[MAX_ERR_MSGS];
static unsigned n_err_msgs;

static uint64_t t_start, t_meas_start, t_end, last_rx;
static int any_rx;
static struct rusage ru_start, ru_end;
static uint64_t next_check;

/* ---------------------------------------------------------------- helpers */
static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static void put32(uint8_t *p, uint32_t v) { put16(p, (uint16_t)(v >> 16)); put16(p + 2, (uint16_t)v); }
static void put64(uint8_t *p, uint64_t v) { put32(p, (uint32_t)(v >> 32)); put32(p + 4, (uint32_t)v); }
static uint16_t get16(const uint8_t *p) { return (uint16_t)((p[0] << 8) | p[1]); }
static uint32_t get32(const uint8_t *p) { return ((uint32_t)get16(p) << 16) | get16(p + 2); }
static uint64_t get64(const uint8_t *p) { return ((uint64_t)get32(p) << 32) | get32(p + 4); }

static float get_f32le(const uint8_t *p)
{
    uint32_t u;
    float f;
    memcpy(&u, p, 4);
    u = le32toh(u);
    memcpy(&f, &u, 4);
    return f;
}

static void put_f32le(uint8_t *p, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u = htole32(u);
    memcpy(p, &u, 4);
}

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("indep_client: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static void usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("indep_client: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\n(try --help)\n", stderr);
    va_end(ap);
    exit(2);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        die("out of memory (%zu bytes)", n);
    return p;
}

static uint64_t parse_u64(const char *s, uint64_t min, uint64_t max, const char *name)
{
    char *end;
    unsigned long long v;
    if (!s || !*s || *s == '-' || *s == '+')
        usage_error("--%s: not a number: '%s'", name, s ? s : "");
    errno = 0;
    v = strtoull(s, &end, 0);
    if (errno || *end)
        usage_error("--%s: not a number: '%s'", name, s);
    if (v < min || v > max)
        usage_error("--%s: %llu is outside %" PRIu64 "..%" PRIu64, name, v, min, max);
    return (uint64_t)v;
}

/* ---------------------------------------------------------------- req_id -> slot */
static uint64_t ht_key[HT_SIZE];
static int16_t ht_val[HT_SIZE];

static unsigned ht_home(uint64_t k) { return (unsigned)((k * 0x9E3779B97F4A7C15ull) >> (64 - HT_BITS)); }

static int ht_find(uint64_t k)
{
    unsigned i = ht_home(k);
    while (ht_val[i] >= 0) {
        if (ht_key[i] == k)
            return ht_val[i];
        i = (i + 1) & HT_MASK;
    }
    return -1;
}

static void ht_insert(uint64_t k, int v)
{
    unsigned i = ht_home(k);
    while (ht_val[i] >= 0)
        i = (i + 1) & HT_MASK;
    ht_key[i] = k;
    ht_val[i] = (int16_t)v;
}

static void ht_delete(uint64_t k)
{
    unsigned i = ht_home(k), j;
    while (ht_val[i] >= 0 && ht_key[i] != k)
        i = (i + 1) & HT_MASK;
    if (ht_val[i] < 0)
        return;
    ht_val[i] = -1;
    j = i;
    for (;;) {                      /* backward-shift deletion (linear probing) */
        unsigned h;
        int move;
        j = (j + 1) & HT_MASK;
        if (ht_val[j] < 0)
            break;
        h = ht_home(ht_key[j]);
        move = (j > i) ? (h <= i || h > j) : (h <= i && h > j);
        if (move) {
            ht_key[i] = ht_key[j];
            ht_val[i] = ht_val[j];
            ht_val[j] = -1;
            i = j;
        }
    }
}

/* ---------------------------------------------------------------- sending */
static void send_call(struct slot *s)
{
    uint32_t i, off = 0;
    for (i = 0; i < req_nseg; i++)
        put64(tx_hdrs + (size_t)i * HDR + 4, s->req_id);
    uint64_t t = now_ns();
    if (!s->t_first)
        s->t_first = t;
    s->t_last = t;
    int retried_refused = 0;
    while (off < req_nseg) {
        int r = sendmmsg(sock, tx_msgs + off, req_nseg - off, 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno == ECONNREFUSED && !retried_refused) {
                /* a pending ICMP port-unreachable from an earlier datagram */
                c_refused++;
                retried_refused = 1;
                continue;
            }
            if (errno == ECONNREFUSED || errno == ENOBUFS || errno == EAGAIN) {
                /* not sent now; the retransmission timer sends it again */
                if (errno == ECONNREFUSED)
                    c_refused++;
                break;
            }
            die("sendmmsg: %s", strerror(errno));
        }
        off += (uint32_t)r;
        if (off < req_nseg)
            c_send_splits++;        /* the kernel took only part: the rest follows */
    }
    if (s->t_last + cfg.timeout_ms * 1000000ull < next_check)
        next_check = s->t_last + cfg.timeout_ms * 1000000ull;
}

static void issue_call(int idx)
{
    struct slot *s = &slots[idx];
    uint64_t k = issued++;
    s->active = 1;
    s->measured = (k >= cfg.warmup);
    s->req_id = next_req_id++;
    s->t_first = 0;
    s->resends = 0;
    s->rs_started = 0;
    ht_insert(s->req_id, idx);
    active_count++;
    if (k == cfg.warmup) {
        getrusage(RUSAGE_SELF, &ru_start);
        t_meas_start = now_ns();
    }
    send_call(s);
}

/* a call has ended (ok, error or lost): free its slot, start the next call */
static void complete_call(int idx, uint64_t now)
{
    struct slot *s = &slots[idx];
    ht_delete(s->req_id);
    s->active = 0;
    s->rs_started = 0;
    active_count--;
    if (s->measured && ++done_measured == cfg.calls) {
        t_end = now;
        getrusage(RUSAGE_SELF, &ru_end);
        finished = 1;
        return;
    }
    if (issued < total_to_issue)
        issue_call(idx);
}

/* ---------------------------------------------------------------- replies */
static int reply_ok(const uint8_t *d, uint32_t len)
{
    if (!cfg.check)
        return 1;
    if (len != cfg.size)
        return 0;
    if (cfg.func == 3)              /* echo: the same bytes */
        return memcmp(d, req_data, len) == 0;
    /* vecadd: float32 request + 1, exactly; trailing bytes (size % 4) are not floats */
    for (uint64_t i = 0; i + 4 <= len; i += 4) {
        float want = get_f32le(req_data + i) + 1.0f;
        float got = get_f32le(d + i);
        if (memcmp(&want, &got, 4) != 0)
            return 0;
    }
    return 1;
}

static void finish_response(int idx, const uint8_t *d, uint32_t len, uint64_t now)
{
    struct slot *s = &slots[idx];
    if (s->measured) {
        if (reply_ok(d, len)) {
            c_ok++;
            lat_ns[n_lat++] = now - s->t_first;
        } else {
            c_mismatch++;
            c_errors++;
        }
    }
    complete_call(idx, now);
}

static void finish_error(int idx, unsigned code, const uint8_t *d, uint32_t len, uint64_t now)
{
    struct slot *s = &slots[idx];
    if (s->measured) {
        c_errors++;
        err_by_code[code]++;
    }
    /* keep the first message seen for each code, for the report */
    unsigned i;
    for (i = 0; i < n_err_msgs; i++)
        if (err_msgs[i].code == code)
            break;
    if (i == n_err_msgs && n_err_msgs < MAX_ERR_MSGS) {
        err_msgs[i].code = code;
        err_msgs[i].len = len > MAX_ERR_DATA ? MAX_ERR_DATA : len;
        memcpy(err_msgs[i].msg, d, err_msgs[i].len);
        err_msgs[i].msg[err_msgs[i].len] = 0;
        n_err_msgs++;
    }
    complete_call(idx, now);
}

static int ensure_buffers(struct slot *s, uint32_t msg_len, uint32_t nseg)
{
    if (s->cap < msg_len) {
        uint8_t *b = realloc(s->buf, msg_len);
        if (!b)
            return 0;
        s->buf = b;
        s->cap = msg_len;
    }
    size_t nb = ((size_t)nseg + 7) / 8;
    if (s->bits_cap < nb) {
        uint8_t *b = realloc(s->bits, nb);
        if (!b)
            return 0;
        s->bits = b;
        s->bits_cap = nb;
    }
    memset(s->bits, 0, nb);
    return 1;
}

/* check one received datagram against the page; use it if it belongs to a call */
static void on_datagram(const uint8_t *p, size_t len, int truncated, uint64_t now)
{
    if (truncated || len < HDR || p[0] != MAGIC || (p[1] >> 4) != VERSION) {
        c_malformed++;
        return;
    }
    unsigned type = p[1] & 0x0F;
    if (type != T_RESPONSE && type != T_ERROR) {  /* REQUEST at a client, or unknown */
        c_malformed++;
        return;
    }
    unsigned func = get16(p + 2);
    uint64_t id = get64(p + 4);
    uint32_t seq = get16(p + 12), nseg = get16(p + 14), msg_len = get32(p + 16);
    unsigned aux = get16(p + 20);
    uint64_t dlen = len - HDR;
    uint64_t S = 0;

    if (nseg == 0 || seq >= nseg) {
        c_malformed++;
        return;
    }
    if (nseg == 1) {
        if (dlen != msg_len) {
            c_malformed++;
            return;
        }
    } else {
        if (dlen == 0) {            /* no segment of a multi-segment message is empty */
            c_malformed++;
            return;
        }
        if (seq < nseg - 1) {
            S = dlen;
        } else {
            if (dlen > msg_len || (msg_len - dlen) % (nseg - 1) != 0) {
                c_malformed++;
                return;
            }
            S = (msg_len - dlen) / (nseg - 1);
        }
        /* (nseg-1)*S < msg_len <= nseg*S; for the last segment: 1 <= its length <= S */
        if (S == 0 || (uint64_t)(nseg - 1) * S >= msg_len || (uint64_t)nseg * S < msg_len) {
            c_malformed++;
            return;
        }
    }
    if (type == T_ERROR) {
        if (nseg != 1 || msg_len > MAX_ERR_DATA) {
            c_malformed++;
            return;
        }
    } else {
        if (aux != 0 || msg_len > MAX_REPLY) {      /* RESPONSE: aux 0 */
            c_malformed++;
            return;
        }
    }

    /* match by (func_id, req_id) */
    int idx = ht_find(id);
    if (idx < 0 || func != cfg.func) {
        c_stray++;                  /* a late duplicate, or not ours */
        return;
    }
    struct slot *s = &slots[idx];
    any_rx = 1;
    last_rx = now;

    if (type == T_ERROR) {
        finish_error(idx, aux, p + HDR, msg_len, now);
        return;
    }
    if (nseg == 1) {
        if (s->rs_started) {        /* disagrees with the message being reassembled */
            s->rs_started = 0;
            c_dropped_msgs++;
            return;
        }
        finish_response(idx, p + HDR, msg_len, now);
        return;
    }
    if (!s->rs_started) {
        if (!ensure_buffers(s, msg_len, nseg)) {
            c_dropped_msgs++;
            return;
        }
        s->rs_started = 1;
        s->rs_nseg = nseg;
        s->rs_msglen = msg_len;
        s->rs_S = (uint32_t)S;
        s->rs_have = 0;
    } else if (s->rs_nseg != nseg || s->rs_msglen != msg_len || s->rs_S != S) {
        s->rs_started = 0;          /* "drops the whole message if a later segment disagrees" */
        c_dropped_msgs++;
        return;
    }
    uint8_t bit = (uint8_t)(1u << (seq & 7));
    if (s->bits[seq >> 3] & bit) {
        c_dup++;
        return;
    }
    s->bits[seq >> 3] |= bit;
    /* seq*S + dlen <= msg_len <= cap, by the checks above */
    memcpy(s->buf + (size_t)seq * S, p + HDR, dlen);
    if (++s->rs_have == s->rs_nseg) {
        c_multiseg++;
        finish_response(idx, s->buf, s->rs_msglen, now);
    }
}

/* resend calls unanswered for timeout_ms; after MAX_RESENDS resends, lost and replaced */
static void check_timeouts(uint64_t now)
{
    uint64_t to = cfg.timeout_ms * 1000000ull;
    next_check = UINT64_MAX;
    for (unsigned i = 0; i < cfg.outstanding && !finished; i++) {
        struct slot *s = &slots[i];
        if (!s->active)
            continue;
        /* t_last may be later than now: a call sent after now was read */
        if (now > s->t_last && now - s->t_last >= to) {
            if (s->resends < MAX_RESENDS) {
                s->resends++;
                if (s->measured)
                    c_resends++;
                send_call(s);       /* same req_id, all segments, one sendmmsg */
            } else {
                if (s->measured)
                    c_lost++;
                complete_call((int)i, now);   /* issues the replacement */
                continue;
            }
        }
        if (s->active && s->t_last + to < next_check)
            next_check = s->t_last + to;
    }
}

/* ---------------------------------------------------------------- report */
static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static double pct_us(double p)
{
    if (n_lat == 0)
        return 0.0;
    double r = p / 100.0 * (double)n_lat;
    uint64_t k = (uint64_t)r;
    if ((double)k < r)
        k++;                        /* nearest rank: ceil(p*n) */
    if (k < 1)
        k = 1;
    if (k > n_lat)
        k = n_lat;
    return (double)lat_ns[k - 1] / 1000.0;
}

static double tv_s(struct timeval a, struct timeval b)
{
    return (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_usec - a.tv_usec) / 1e6;
}

static void json_str(const char *s, unsigned len)
{
    putchar('"');
    for (unsigned i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20 || c >= 0x7F)
            printf("\\u%04x", c < 0x20 ? c : '?');
        else
            putchar(c);
    }
    putchar('"');
}

static void report(void)
{
    qsort(lat_ns, n_lat, sizeof lat_ns[0], cmp_u64);
    double elapsed = (double)(t_end - t_meas_start) / 1e9;
    double cps = elapsed > 0 ? (double)c_ok / elapsed : 0.0;
    double p50 = pct_us(50), p90 = pct_us(90), p99 = pct_us(99), p999 = pct_us(99.9);
    double mx = n_lat ? (double)lat_ns[n_lat - 1] / 1000.0 : 0.0;
    double cu = tv_s(ru_start.ru_utime, ru_end.ru_utime);
    double cs = tv_s(ru_start.ru_stime, ru_end.ru_stime);
    long cv = ru_end.ru_nvcsw - ru_start.ru_nvcsw;
    long ci = ru_end.ru_nivcsw - ru_start.ru_nivcsw;

    if (cfg.json) {
        printf("{\"mode\":\"%s\",\"outstanding\":%u,\"func\":%u,\"size\":%" PRIu64
               ",\"calls\":%" PRIu64 ",\"ok\":%" PRIu64 ",\"errors\":%" PRIu64 ",\"error_codes\":{",
               cfg.spin ? "spin" : "block", cfg.outstanding, cfg.func, cfg.size,
               done_measured, c_ok, c_errors);
        int first = 1;
        for (unsigned c = 0; c < 65536; c++)
            if (err_by_code[c]) {
                printf("%s\"%u\":%" PRIu64, first ? "" : ",", c, err_by_code[c]);
                first = 0;
            }
        if (c_mismatch)
            printf("%s\"mismatch\":%" PRIu64, first ? "" : ",", c_mismatch);
        printf("},\"error_messages\":{");
        for (unsigned i = 0; i < n_err_msgs; i++) {
            printf("%s\"%u\":", i ? "," : "", err_msgs[i].code);
            json_str(err_msgs[i].msg, err_msgs[i].len);
        }
        printf("},\"resends\":%" PRIu64 ",\"lost\":%" PRIu64 ",\"malformed\":%" PRIu64
               ",\"stray\":%" PRIu64 ",\"dup_segments\":%" PRIu64 ",\"dropped_msgs\":%" PRIu64
               ",\"icmp_refused\":%" PRIu64 ",\"send_splits\":%" PRIu64 ",\"multiseg_replies\":%" PRIu64
               ",\"elapsed_s\":%.6f,\"calls_per_s\":%.1f"
               ",\"p50_us\":%.3f,\"p90_us\":%.3f,\"p99_us\":%.3f,\"p999_us\":%.3f,\"max_us\":%.3f"
               ",\"cpu_user_s\":%.6f,\"cpu_sys_s\":%.6f,\"ctx_vol\":%ld,\"ctx_invol\":%ld"
               ",\"seg\":%u,\"req_segments\":%u,\"warmup\":%" PRIu64 ",\"timeout_ms\":%" PRIu64
               ",\"check\":%s}\n",
               c_resends, c_lost, c_malformed, c_stray, c_dup, c_dropped_msgs, c_refused,
               c_send_splits, c_multiseg, elapsed, cps, p50, p90, p99, p999, mx, cu, cs, cv, ci,
               cfg.seg, req_nseg, cfg.warmup, cfg.timeout_ms, cfg.check ? "true" : "false");
    } else {
        printf("indep_client: mode=%s outstanding=%u func=%u size=%" PRIu64 " (%u segment%s of <=%u)%s\n",
               cfg.spin ? "spin" : "block", cfg.outstanding, cfg.func, cfg.size, req_nseg,
               req_nseg == 1 ? "" : "s", cfg.seg, cfg.check ? " check" : "");
        printf("calls       %" PRIu64 " (ok %" PRIu64 ", errors %" PRIu64 ", lost %" PRIu64 "), resends %" PRIu64 "\n",
               done_measured, c_ok, c_errors, c_lost, c_resends);
        if (c_errors) {
            printf("errors by code:");
            for (unsigned c = 0; c < 65536; c++)
                if (err_by_code[c])
                    printf(" %u:%" PRIu64, c, err_by_code[c]);
            if (c_mismatch)
                printf(" mismatch:%" PRIu64, c_mismatch);
            printf("\n");
            for (unsigned i = 0; i < n_err_msgs; i++) {
                printf("  code %u message: \"", err_msgs[i].code);
                for (unsigned j = 0; j < err_msgs[i].len; j++) {
                    unsigned char c = (unsigned char)err_msgs[i].msg[j];
                    putchar(c >= 0x20 && c < 0x7F ? c : '?');
                }
                printf("\"\n");
            }
        }
        printf("elapsed     %.3f s, %.1f calls/s (ok replies)\n", elapsed, cps);
        printf("latency us  p50 %.1f  p90 %.1f  p99 %.1f  p99.9 %.1f  max %.1f\n", p50, p90, p99, p999, mx);
        printf("client cpu  user %.3f s  sys %.3f s  ctx switches: voluntary %ld, involuntary %ld\n", cu, cs, cv, ci);
        printf("received    malformed %" PRIu64 ", stray %" PRIu64 ", duplicate segments %" PRIu64
               ", dropped messages %" PRIu64 ", icmp refused %" PRIu64 "; multi-segment replies %" PRIu64 "\n",
               c_malformed, c_stray, c_dup, c_dropped_msgs, c_refused, c_multiseg);
    }
}

/* ---------------------------------------------------------------- main */
static void usage(FILE *f)
{
    fprintf(f,
        "usage: indep_client --port PORT [options]\n"
        "  --host ADDR          server address, IPv4 or IPv6 literal (default 127.0.0.1)\n"
        "  --port PORT          server UDP port (required)\n"
        "  --func ID            func_id (default 1)\n"
        "  --size BYTES         request data bytes (default 1024)\n"
        "  --fill vecadd|zero   float32 i*0.5, or zero bytes (default vecadd for func 1, else zero)\n"
        "  --check              verify replies: func 1 = request+1, func 3 = same bytes\n"
        "  --outstanding N      calls in flight (default 1, max %d)\n"
        "  --calls N            measured calls (default 20000)\n"
        "  --warmup N           calls before measuring (default 2000)\n"
        "  --mode spin|block    recvmmsg MSG_DONTWAIT loop, or MSG_WAITFORONE (default block)\n"
        "  --seg S              request segment size (default 1450, max %d)\n"
        "  --timeout-ms MS      resend after MS; lost after %d resends (default 200)\n"
        "  --json               one JSON object on stdout\n",
        MAX_OUTSTANDING, MAX_SEG, MAX_RESENDS);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"host", required_argument, 0, 'h'},
        {"port", required_argument, 0, 'p'},
        {"func", required_argument, 0, 'f'},
        {"size", required_argument, 0, 's'},
        {"fill", required_argument, 0, 'F'},
        {"check", no_argument, 0, 'c'},
        {"outstanding", required_argument, 0, 'o'},
        {"calls", required_argument, 0, 'n'},
        {"warmup", required_argument, 0, 'w'},
        {"mode", required_argument, 0, 'm'},
        {"seg", required_argument, 0, 'S'},
        {"timeout-ms", required_argument, 0, 't'},
        {"json", no_argument, 0, 'j'},
        {"help", no_argument, 0, 'H'},
        {0, 0, 0, 0},
    };
    int have_port = 0, fill_set = -1, opt;
    cfg.host = "127.0.0.1";
    cfg.func = 1;
    cfg.size = 1024;
    cfg.outstanding = 1;
    cfg.calls = 20000;
    cfg.warmup = 2000;
    cfg.spin = 0;
    cfg.seg = 1450;
    cfg.timeout_ms = 200;

    opterr = 0;
    while ((opt = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        switch (opt) {
        case 'h': cfg.host = optarg; break;
        case 'p': cfg.port = (unsigned)parse_u64(optarg, 1, 65535, "port"); have_port = 1; break;
        case 'f': cfg.func = (unsigned)parse_u64(optarg, 0, 65535, "func"); break;
        case 's': cfg.size = parse_u64(optarg, 0, UINT32_MAX, "size"); break;
        case 'F':
            if (!strcmp(optarg, "vecadd")) fill_set = 1;
            else if (!strcmp(optarg, "zero")) fill_set = 0;
            else usage_error("--fill: vecadd or zero, not '%s'", optarg);
            break;
        case 'c': cfg.check = 1; break;
        case 'o': cfg.outstanding = (unsigned)parse_u64(optarg, 1, MAX_OUTSTANDING, "outstanding"); break;
        case 'n': cfg.calls = parse_u64(optarg, 1, 1000000000ull, "calls"); break;
        case 'w': cfg.warmup = parse_u64(optarg, 0, 1000000000ull, "warmup"); break;
        case 'm':
            if (!strcmp(optarg, "spin")) cfg.spin = 1;
            else if (!strcmp(optarg, "block")) cfg.spin = 0;
            else usage_error("--mode: spin or block, not '%s'", optarg);
            break;
        case 'S': cfg.seg = (unsigned)parse_u64(optarg, 1, MAX_SEG, "seg"); break;
        case 't': cfg.timeout_ms = parse_u64(optarg, 1, 3600000, "timeout-ms"); break;
        case 'j': cfg.json = 1; break;
        case 'H': usage(stdout); return 0;
        case ':': usage_error("%s needs a value", argv[optind - 1]); break;
        default:  usage_error("unknown option '%s'", argv[optind - 1]); break;
        }
    }
    if (optind < argc)
        usage_error("unexpected argument '%s'", argv[optind]);
    if (!have_port)
        usage_error("--port is required");
    cfg.fill_vecadd = fill_set >= 0 ? fill_set : (cfg.func == 1);
    if (cfg.check && cfg.func != 1 && cfg.func != 3)
        usage_error("--check knows func 1 (vecadd: reply = request + 1) and func 3 (echo) only");
    uint64_t nseg = cfg.size <= cfg.seg ? 1 : (cfg.size + cfg.seg - 1) / cfg.seg;
    if (nseg > MAX_SEND_SEGS)
        usage_error("--size %" PRIu64 " in segments of %u is %" PRIu64
                    " datagrams; one sendmmsg carries at most %d: use a larger --seg",
                    cfg.size, cfg.seg, nseg, MAX_SEND_SEGS);
    req_nseg = (uint32_t)nseg;
    total_to_issue = cfg.warmup + cfg.calls;

    /* ---- request message and its segments */
    req_data = xmalloc((size_t)cfg.size);
    memset(req_data, 0, (size_t)cfg.size);
    if (cfg.fill_vecadd)
        for (uint64_t i = 0; i + 4 <= cfg.size; i += 4)
            put_f32le(req_data + i, (float)(i / 4) * 0.5f);
    tx_hdrs = xmalloc((size_t)req_nseg * HDR);
    tx_iov = xmalloc((size_t)req_nseg * 2 * sizeof *tx_iov);
    tx_msgs = xmalloc((size_t)req_nseg * sizeof *tx_msgs);
    memset(tx_msgs, 0, (size_t)req_nseg * sizeof *tx_msgs);
    for (uint32_t i = 0; i < req_nseg; i++) {
        uint8_t *h = tx_hdrs + (size_t)i * HDR;
        uint64_t off = (uint64_t)i * cfg.seg;
        uint64_t len = (req_nseg == 1) ? cfg.size : (i + 1 < req_nseg ? cfg.seg : cfg.size - off);
        h[0] = MAGIC;
        h[1] = (VERSION << 4) | T_REQUEST;
        put16(h + 2, (uint16_t)cfg.func);
        put64(h + 4, 0);
        put16(h + 12, (uint16_t)i);
        put16(h + 14, (uint16_t)req_nseg);
        put32(h + 16, (uint32_t)cfg.size);
        put16(h + 20, 0);                           /* aux: no scheduling hint */
        tx_iov[2 * i].iov_base = h;
        tx_iov[2 * i].iov_len = HDR;
        tx_iov[2 * i + 1].iov_base = req_data + off;
        tx_iov[2 * i + 1].iov_len = (size_t)len;
        tx_msgs[i].msg_hdr.msg_iov = &tx_iov[2 * i];
        tx_msgs[i].msg_hdr.msg_iovlen = len ? 2 : 1;
    }

    /* ---- receive batch */
    uint8_t *rx_bufs = xmalloc((size_t)RX_BATCH * RX_BUFSZ);
    struct iovec rx_iov[RX_BATCH];
    struct mmsghdr rx_msgs[RX_BATCH];
    memset(rx_msgs, 0, sizeof rx_msgs);
    for (int i = 0; i < RX_BATCH; i++) {
        rx_iov[i].iov_base = rx_bufs + (size_t)i * RX_BUFSZ;
        rx_iov[i].iov_len = RX_BUFSZ;
        rx_msgs[i].msg_hdr.msg_iov = &rx_iov[i];
        rx_msgs[i].msg_hdr.msg_iovlen = 1;
    }

    lat_ns = xmalloc((size_t)cfg.calls * sizeof *lat_ns);
    for (unsigned i = 0; i < HT_SIZE; i++)
        ht_val[i] = -1;

    /* ---- socket: resolve, connect */
    char hostbuf[256];
    const char *host = cfg.host;
    size_t hl = strlen(host);
    if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']' && hl - 2 < sizeof hostbuf) {
        memcpy(hostbuf, host + 1, hl - 2);
        hostbuf[hl - 2] = 0;
        host = hostbuf;
    }
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%u", cfg.port);
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_DGRAM;
    hints.ai_protocol = IPPROTO_UDP;
    hints.ai_flags = AI_NUMERICSERV;
    int gai = getaddrinfo(host, portstr, &hints, &ai);
    if (gai != 0 || !ai)
        die("cannot resolve '%s': %s", cfg.host, gai_strerror(gai));
    sock = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, IPPROTO_UDP);
    if (sock < 0)
        die("socket: %s", strerror(errno));
    int bufsz = 8 << 20;
    if (setsockopt(sock, SOL_SOCKET, SO_RCVBUFFORCE, &bufsz, sizeof bufsz) < 0)
        setsockopt(sock, SOL_SOCKET, SO_RCVBUF, &bufsz, sizeof bufsz);
    if (setsockopt(sock, SOL_SOCKET, SO_SNDBUFFORCE, &bufsz, sizeof bufsz) < 0)
        setsockopt(sock, SOL_SOCKET, SO_SNDBUF, &bufsz, sizeof bufsz);
    if (connect(sock, ai->ai_addr, ai->ai_addrlen) < 0)
        die("connect to %s port %u: %s", cfg.host, cfg.port, strerror(errno));
    freeaddrinfo(ai);
    if (!cfg.spin) {
        /* MSG_WAITFORONE blocks for the first datagram; wake up anyway to run timers */
        uint64_t ms = cfg.timeout_ms / 10;
        if (ms < 1) ms = 1;
        if (ms > 20) ms = 20;
        struct timeval tv = { .tv_sec = 0, .tv_usec = (suseconds_t)(ms * 1000) };
        if (setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0)
            die("setsockopt SO_RCVTIMEO: %s", strerror(errno));
    }

    /* ---- req_ids: a 64-bit counter from a random start */
    if (getrandom(&next_req_id, sizeof next_req_id, 0) != (ssize_t)sizeof next_req_id)
        next_req_id = now_ns() ^ ((uint64_t)getpid() << 32);

    /* ---- run */
    next_check = UINT64_MAX;
    t_start = now_ns();
    for (unsigned i = 0; i < cfg.outstanding && issued < total_to_issue; i++)
        issue_call((int)i);

    int rflags = cfg.spin ? MSG_DONTWAIT : MSG_WAITFORONE;
    uint64_t stall_ns = STALL_EXIT_NS;
    if ((MAX_RESENDS + 2) * cfg.timeout_ms * 1000000ull > stall_ns)
        stall_ns = (MAX_RESENDS + 2) * cfg.timeout_ms * 1000000ull;
    while (!finished) {
        int n = recvmmsg(sock, rx_msgs, RX_BATCH, rflags, NULL);
        uint64_t now = now_ns();
        if (n < 0) {
            if (errno == ECONNREFUSED)
                c_refused++;        /* ICMP port unreachable: nobody listening (yet) */
            else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                die("recvmmsg: %s", strerror(errno));
        } else {
            for (int i = 0; i < n && !finished; i++)
                on_datagram(rx_bufs + (size_t)i * RX_BUFSZ, rx_msgs[i].msg_len,
                            (rx_msgs[i].msg_hdr.msg_flags & MSG_TRUNC) != 0, now);
        }
        if (finished)
            break;
        if (now >= next_check)
            check_timeouts(now);
        if (!any_rx && now - t_start > NO_REPLY_EXIT_NS)
            die("no reply at all from %s port %u within 5 s of the first call%s: is a "
                "protocol-1 server listening there?", cfg.host, cfg.port,
                c_refused ? " (ICMP port unreachable: nothing listens on that port)" : "");
        if (any_rx && now - last_rx > stall_ns)
            die("the server stopped answering: no reply for %.0f s (%" PRIu64 " of %" PRIu64
                " measured calls done)", (double)stall_ns / 1e9, done_measured, cfg.calls);
        if (active_count == 0 && !finished)
            die("internal error: no call in flight");
    }
    report();
    free(rx_bufs);
    return 0;
}

/* tunables.h: every default and limit of the native core in one place, each with its reason. */
#ifndef SRPC_TUNABLES_H
#define SRPC_TUNABLES_H

#include <stdint.h>

/* Where a server listens when not told: loopback keeps it on this machine; 9230 is the
 * project's port (the client's default peer). */
#define SRPC_DEF_HOST "127.0.0.1"
#define SRPC_DEF_PORT 9230

/* Calls handed to a callback at once when the function does not say: enough to amortise the
 * callback's fixed cost, few enough that a batch of small tensors stays in cache. */
#define SRPC_DEF_MAX_BATCH 8

/* Datagrams per recvmmsg/sendmmsg: amortises the syscall without holding a burst so long
 * that the first datagram waits behind the last. */
#define SRPC_DEF_RX_BURST 32
#define SRPC_MAX_RX_BURST 256

/* Reply segment size: 1450 fits a 1500-byte Ethernet MTU (docs/PROTOCOL.md); loopback takes a
 * whole 64 KiB datagram, and a 588 KiB message costs about 2x more in 8950-byte pieces. */
#define SRPC_DEF_SEG_SIZE 1450
#define SRPC_DEF_SEG_SIZE_LOOPBACK 65000
/* A route whose MTU leaves less segment data than this is taken as unknown (the default
 * segment size applies; IP fragments it). */
#define SRPC_MIN_PATH_SEG 512

/* A send that finds the transmit queue full waits this long at most for room before it fails
 * with -EAGAIN: a slow peer is not a lost one (the kernel socket path waits 20 x 50 ms likewise
 * for a full send buffer). */
#define SRPC_TX_FULL_WAIT_US 1000000

/* A segment of at least this many data bytes that belongs to a message already being
 * reassembled is received straight into its place (a header peek costs one syscall, a copy
 * of 64 KiB several microseconds). */
#define SRPC_DIRECT_MIN 8192

/* Segments expected next are received with one scattered burst of at most this many (the
 * rest of the message, capped), each straight into its place. After a burst with a datagram
 * that was another segment, this many datagrams take the one-at-a-time peek path before the
 * next prediction (interleaved messages would otherwise be copied twice). */
#define SRPC_SCATTER_MAX 32
#define SRPC_SCATTER_BACKOFF 32
/* After a coalesced run of datagrams, expected segments are received as runs (one system call
 * per run, each datagram still in its place) until this many entries in a row came alone. */
#define SRPC_RUN_MODE_HOLD 8

/* Largest request: the built-in echo takes up to 1 MiB; anything larger is TOO_LARGE. */
#define SRPC_DEF_MAX_MESSAGE (1u << 20)

/* A partial message older than this is dropped: long enough for a retransmission round. */
#define SRPC_DEF_REASM_TIMEOUT_US 500000
/* All partial messages together: bounds what a flood of first segments can pin. */
#define SRPC_DEF_REASM_MEM_CAP (256ull << 20)
/* ... and of one client address: a quarter, so that one sender cannot take it all. */
#define SRPC_DEF_REASM_MEM_CAP_CLIENT (64ull << 20)

/* Freed reassembly buffers kept for reuse, so large messages do not fault in fresh pages. */
#define SRPC_DEF_REASM_POOL_BYTES (16ull << 20)

/* docs/PROTOCOL.md: the reply-cache lifetime is a documented server setting, default 10 s. */
#define SRPC_DEF_REPLY_CACHE_US 10000000
#define SRPC_DEF_REPLY_CACHE_BYTES (64ull << 20)

/* Call-table entries (partial, in progress, cached, rejected): bounds the hash memory. */
#define SRPC_DEF_MAX_CALLS 65536

/* Adaptive wait: spin this long before sleeping; waking a sleeper costs ~40-50 us here. */
#define SRPC_DEF_SPIN_US 200

/* A callback running longer than this lets the engine thread take over receiving, so a
 * long batch delays RX (and BUSY answers) by about this much at most. */
#define SRPC_DEF_RX_TAKEOVER_US 1000

/* srpc_server_complete_next holds a batch's replies to send them with the next batches' in one
 * system call (one pass down the stack per run to a client, with UDP GSO) while more batches are
 * ready and fewer than SRPC_REPLY_HOLD_CALLS replies are held, and the oldest would not wait
 * longer than reply_hold_us (its age plus the next callback's expected time): a receive burst of
 * up to 8 calls is then one receive and one send (run to completion), and batches of one call
 * (many functions, the load spread over them) cost a send per 8 calls, not per call, while
 * batches of 8 or more go out at once, so that a client with many calls outstanding gets its
 * replies as soon as it did. Holding more starves a closed-loop client's pipeline (its window
 * moves in lockstep with the server's): issue 34 saw one busy function serve about half the
 * calls/s holding 16; issue 51 held a whole burst (up to 32) and measured, with the independent
 * client, no gain in any of 20 cells and one loss, marginal: 0.79x the calls/s for a Python
 * function under --wait block at 16 outstanding (95% interval 0.69-0.99;
 * bench/results/indep/hold_burst_ab.md). */
#define SRPC_REPLY_HOLD_CALLS 8
/* ... and while they hold less than this: large replies are many datagrams each already, and
 * holding several of them sent a burst that overran the client's receive buffer (588 KiB
 * replies at 16 outstanding: p99 3.7x in bench/results/ab_batching_hold_head_before_fix). */
#define SRPC_REPLY_HOLD_BYTES (64u << 10)
#define SRPC_DEF_REPLY_HOLD_US 50 /* srpc_server_config_t.reply_hold_us */
#define SRPC_MAX_REPLY_HOLD_US 1000000

/* Socket buffers: a 1 MiB message in flight is 16 datagrams of 64 KiB, times truesize. */
#define SRPC_DEF_SOCK_BUF (32 << 20)

/* Elements per Tensor Queue when the caller does not say. */
#define SRPC_DEF_TQ_CAPACITY 256

/* Multi-segment requests are reassembled straight into their Tensor Queue element while fewer
 * than capacity / SRPC_PLACE_MAX_FRACTION elements are reserved that way: a flood of first
 * segments that never complete cannot take a whole queue (the others use pool buffers). */
#define SRPC_PLACE_MAX_FRACTION 2
/* Calls completed behind such a message wait for it at most this long: then it moves to a pool
 * buffer (a copy) and gives its element up. Longer than a healthy message takes to arrive. */
#define SRPC_UNPLACE_AFTER_US 2000

/* How often the expiry timers run while messages are partial (their expiry, and the queues
 * they hold back: SRPC_UNPLACE_AFTER_US). */
#define SRPC_TIMER_PERIOD_US 1000
/* ... and at least this often otherwise (cached replies and rejections expire at their own
 * time; one cached by the worker after the timers looked is expired this much late at most). */
#define SRPC_TIMER_IDLE_US 100000

/* While the worker receives, the engine thread looks at it this often. A worker that leaves for
 * a function's first batch, or for one whose last callback was slow, tells it at once, so this
 * bounds only how late a callback that turned slow is noticed; each look wakes a thread, which
 * costs the spinning ones their tail latency (1000 looks a second showed in a 1-outstanding p99). */
#define SRPC_ENGINE_CHECK_US 100000

/* A worker asleep in block mode while a host function's batches are in flight looks at their
 * done words this often: srpc_server_finish wakes it at once, a word written directly (the
 * deferral API's other way) is seen this late at most. */
#define SRPC_DEFER_CHECK_US 1000

/* Earliest-deadline-first scheduling: a function without a deadline ranks as if it had this
 * one, so its calls still run as they age behind functions that have one. */
#define SRPC_EDF_NO_DEADLINE_US 1000000
/* Fair share: the virtual time a unit of work costs a function of weight 1 (weight w: 1/w of
 * it). lcm(1..16), so that shares of weights up to 16 are exact. */
#define SRPC_FAIR_SCALE 720720

/* Client retransmission (RFC 6298 per function): a request is sent again until its reply comes
 * or its deadline (the call's timeout) passes, the timeout doubling each time up to rto_max, so
 * a call gives up only when its caller does (UINT32_MAX: no cap on the count); 5 ms is above a
 * loopback round trip with a small batch; a first call waits 200 ms (no sample yet); 1 s caps
 * the backoff. Load runs (splitrpc load, bench-overload) set retries to 0 so that losses show
 * in measurements. */
#define SRPC_DEF_RETRIES UINT32_MAX
#define SRPC_DEF_RTO_MIN_US 5000
#define SRPC_DEF_RTO_INITIAL_US 200000
#define SRPC_DEF_RTO_MAX_US 1000000

/* Client flow control: at most this many calls of one client are outstanding at its server
 * (sent and unanswered); the others wait in the client, in order. Half a default Tensor Queue,
 * so that one client's burst never fills a function's queue on its own. */
#define SRPC_DEF_CLIENT_WINDOW (SRPC_DEF_TQ_CAPACITY / 2)
/* A BUSY answer is retried after this long, doubling with each BUSY of the call (capped at
 * rto_max), drawn between half and all of it so that clients turned away together do not come
 * back together: a full default queue of small calls drains in about a millisecond. */
#define SRPC_DEF_BUSY_BACKOFF_US 1000

/* Client: largest reply accepted by default (the echo service's limit). */
#define SRPC_DEF_MAX_REPLY (1u << 20)

/* Load generator: stop sleeping this long before a due send and spin instead; waking a
 * sleeping thread costs ~50 us on the 2-vCPU VMs we measure on. */
#define SRPC_LOAD_WAKE_EARLY_NS 60000ull

/* UDP segmentation offload on the kernel transport's sends (udp.c): datagrams of one send to
 * the same destination and of the same length (the last of a run may be shorter) go to the
 * kernel as one buffer cut by it (UDP_SEGMENT), where it takes them: up to SRPC_GSO_MAX_SEGS
 * datagrams and SRPC_GSO_MAX_BYTES bytes per buffer. The environment variable named by
 * SRPC_ENV_UDP_GSO set to "0" turns it off for the sockets opened after (for A/B runs and for a
 * path that mishandles it); a send the kernel refuses turns it off for that socket. */
#define SRPC_GSO_MAX_SEGS 64
#define SRPC_GSO_MAX_BYTES 65507
#define SRPC_ENV_UDP_GSO "SPLITRPC_UDP_GSO"

/* UDP receive offload on the kernel transport's sockets (udp.c): the kernel may hand over
 * datagrams of one sender coalesced into one buffer (UDP_GRO: on loopback, a run sent with
 * UDP_SEGMENT stays one buffer end to end, so neither side pays per datagram in the stack);
 * each receive takes them apart again. SRPC_ENV_UDP_GRO set to "0" turns it off for the
 * sockets opened after. */
#define SRPC_ENV_UDP_GRO "SPLITRPC_UDP_GRO"

/* Authenticated calls (docs/PROTOCOL-v4.md, server/keytab.c). A datagram's time may be this far
 * from the server's clock: hosts kept by NTP agree within milliseconds, and 30 s leaves room for
 * one whose clock drifted, while a captured datagram can be sent again for at most this long
 * (the replay window drops it meanwhile). */
#define SRPC_DEF_AUTH_SKEW_MS 30000u
#define SRPC_MAX_AUTH_SKEW_MS 86400000u
/* Senders one key may have at once (client objects, each with its own sender number; every
 * `splitrpc call` is one): the places of a key's replay windows, 160 bytes each. A key starts
 * with SRPC_AUTH_SENDERS_FIRST at its first datagram and doubles them while more than half hold
 * a sender, up to this (5 MiB at 32768): memory follows the senders a key has, not the limit. A
 * sender silent for twice the skew gives its place to a new one only once the table is as large
 * as it may be (its old datagrams are refused by then: the time check, and the key's floor).
 * 32768 holds the senders of 10,000 short-lived clients a minute with the default skew, whose
 * windows live for a minute (keytab's churn test). A new sender finds a place among
 * SRPC_AUTH_PROBE (open addressing, double hashing), so a full-sized table refuses new senders
 * (auth_no_room) somewhat before all its places are taken: its first refusal came at 79% of
 * them (25,940 of 32,768) in test_senders_churn, none silent. */
#define SRPC_DEF_AUTH_SENDERS 32768u
#define SRPC_MAX_AUTH_SENDERS (1u << 20)
#define SRPC_AUTH_SENDERS_FIRST 64u
/* Datagrams of one sender that may overtake each other and still all be taken: the highest
 * counter seen and the SRPC_AUTH_WINDOW - 1 below it (a bitmap; older counters are dropped as
 * replays). A client signs a send's datagrams (up to 64) before it sends them, and several
 * threads may send at once, each a message of many segments: 1024 leaves room for that. */
#define SRPC_AUTH_WINDOW 1024u
/* Protocol version 5's sessions (docs/PROTOCOL-v5.md, server/sessions.c). A server answers
 * NO_SESSION to a session older than this, or silent this long (the page's 180 s); a client
 * rekeys at two thirds of it and sends nothing under a session past 170 s. */
#define SRPC_V5_REJECT_AFTER_MS 180000u
/* Sessions a server holds at once (about 330 bytes each: 1.3 MiB). A full table answers no INIT
 * and drops no session with calls or still young. */
#define SRPC_V5_MAX_SESSIONS 4096u
/* Once a server's table of sessions is half full, one key may hold at most a quarter of its
 * places: a new session of a key at its quota takes the place of that key's longest-silent session
 * without calls (silent SRPC_V5_QUOTA_IDLE_MS at least: the once-a-second sweep has marked its
 * calls), so one key holder cannot fill the table for every other key. */
#define SRPC_V5_QUOTA_IDLE_MS 2000u
/* Handshakes a second a server pays for (an X25519 each, about 50 us on a 2 GHz core: 1000 a
 * second is 5% of one) before it answers INITs with COOKIEs, so the expensive step is paid only
 * for addresses that can receive. */
#define SRPC_V5_HANDSHAKES_PER_S 1000u
/* The cookie secret is replaced this often (the page's 120 s); the previous one is still taken. */
#define SRPC_V5_COOKIE_ROTATE_MS 120000u
/* NO_SESSION: at most one per address every SRPC_V5_NO_SESSION_GAP_MS (a table of this many
 * address buckets, fixed: spoofed sources cannot grow it), and SRPC_V5_NO_SESSIONS_PER_S in all. */
#define SRPC_V5_NS_BUCKETS 4096u
#define SRPC_V5_NO_SESSION_GAP_MS 100u
#define SRPC_V5_NO_SESSIONS_PER_S 1000u
/* A client's side of version 5 (client/sessions.c): it starts a new session that follows its
 * session at SRPC_V5_CLIENT_REKEY_MS of age (two thirds of the server's SRPC_V5_REJECT_AFTER_MS;
 * srpc_client_config_t's rekey_ms may make it sooner) and sends nothing under one older than
 * SRPC_V5_CLIENT_STOP_MS. An INIT unanswered is sent again after SRPC_V5_INIT_RESEND_MS, then after
 * twice as long each time, SRPC_V5_INIT_SENDS sends in all (the page: the first and five more);
 * the handshake fails when the last one's wait (as long again) passes unanswered: 12.6 s. A
 * handshake takes at most SRPC_V5_CLIENT_COOKIES COOKIEs (a server under load asks once), and a
 * cookie is used for SRPC_V5_COOKIE_ROTATE_MS. */
#define SRPC_V5_CLIENT_REKEY_MS 120000u
#define SRPC_V5_CLIENT_STOP_MS 170000u
#define SRPC_V5_INIT_RESEND_MS 200u
#define SRPC_V5_INIT_SENDS 6u
#define SRPC_V5_CLIENT_COOKIES 4u
/* A client acts on a NO_SESSION (not authenticated: anyone on the path can forge one) for a
 * session younger than this only when the session reaches this age with no reply taken under it
 * since: a forger makes it handshake at most 10 times a second, not once per forgery, and a server
 * that did restart right after the handshake costs the client this long at most. */
#define SRPC_V5_NO_SESSION_MIN_AGE_MS 100u
_Static_assert(SRPC_V5_CLIENT_REKEY_MS < SRPC_V5_CLIENT_STOP_MS && SRPC_V5_CLIENT_STOP_MS < SRPC_V5_REJECT_AFTER_MS,
               "a client rekeys before it stops using a session, and stops before the server forgets it");
/* A client names as prev (resume) only a session younger than this by its own clock (the server's
 * age of it is at least as large: the ACCEPT left before the client took it); with none such, its
 * line has ended, and calls it sent under it fail (they may have run) rather than being sent again
 * as new calls. A server keeps what a resume naming a session forgotten with a line that ran calls
 * needs (a tombstone) until SRPC_V5_PREV_MAX_MS + 2 x its key table's skew after its ACCEPT: an
 * INIT made before the client's limit arrives by then, or is refused as stale (its time more than
 * the skew from the server's clock, from which the client's own is at most the skew apart). */
#define SRPC_V5_PREV_MAX_MS 175000u
/* The longest a client's handshake waits for its ACCEPT: its INIT's sends (SRPC_V5_INIT_RESEND_MS,
 * doubling, SRPC_V5_INIT_SENDS of them, the last one's wait as long again: 12.6 s), again after
 * each COOKIE it takes: 63 s. The client counts a session's age from the ACCEPT it took, the
 * server from the one it sent, so an ACCEPT held back on the way makes the server's count ahead
 * of the client's by up to this; the server keeps a tombstone this much longer too (an outside
 * attacker measured it: with a skew of 5 s, a resume INIT arrived 195 s after the ACCEPT left). */
#define SRPC_V5_HANDSHAKE_MAX_MS (SRPC_V5_INIT_RESEND_MS * ((1u << SRPC_V5_INIT_SENDS) - 1u) * (1u + SRPC_V5_CLIENT_COOKIES))
/* Tombstone places per session place (server/sessions.h): a tombstone lasts up to 298 s (175 s +
 * 63 s + 2 skews, above), so short-lived clients (one call each, then gone: their sessions
 * forgotten for room leave one) are served at first INIT up to about places x this / 298 s a
 * second. Once half of them are taken, one key may hold at most a quarter of them (as the
 * sessions' quota), so one key's holder cannot take them all from every other key (an outside
 * attacker did, stop 65): one key's clients alone, 4096 x 64 / 4 / 298 = 220 new a second,
 * sustained (the churn, 10,000 a minute, is 167). About 110 bytes each, plus a line (528 bytes) while it
 * is the last to hold one; allocated zeroed and handed out below a high-water mark, so only the
 * places used take memory (the table: 6.6 MB resident at start, its buckets most of it). */
#define SRPC_V5_TOMBS_PER_PLACE 64u
_Static_assert(SRPC_V5_CLIENT_STOP_MS < SRPC_V5_PREV_MAX_MS && SRPC_V5_PREV_MAX_MS < SRPC_V5_REJECT_AFTER_MS,
               "a client names a session it stopped using for a while, not past the server's time for it");

/* Places tried in a key's table of senders (open addressing) before a new sender is refused:
 * 32 with double hashing refuses first at 79% full (16: 58%); a key holder's worst datagram
 * reads 32 places. */
#define SRPC_AUTH_PROBE 32u

/* A wait for a stream's work (the copies of a batch, a callback's kernels, the O2 kernel's end at
 * srpc_o2_stop, which then reports the kernel's counters) gives up, or says so
 * and waits on where memory its copies target would be handed back (srpc_gpu_stream_drain),
 * after this long: such work takes micro- to milliseconds; a wait this long is a hang. The wait
 * polls without sleeping for the first SRPC_GPU_WAIT_SPIN_NS, so a wait of up to that long
 * returns as soon as cuStreamSynchronize's would (it spins too); a sleep of 1 us takes ~55 us. */
#define SRPC_GPU_WAIT_TIMEOUT_MS 5000
#define SRPC_GPU_WAIT_SPIN_NS 2000000

#endif

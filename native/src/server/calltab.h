/* calltab.h: the server's table of known calls (partial, queued, answered, rejected) keyed by
 * (client address, port, protocol version, req_id, func_id), with FIFO expiry lists. Owned by one thread at a
 * time: the server lock serialises every call. */
#ifndef SRPC_CALLTAB_H
#define SRPC_CALLTAB_H

#include <stdint.h>
#include <sys/socket.h>

#include "core/reassembly.h"
#include "splitrpc_auth.h"

#define CT_NONE UINT32_MAX

/* A client endpoint in comparable form. */
typedef struct srpc_addr {
    uint16_t family; /* AF_INET or AF_INET6 */
    uint16_t port;   /* network order, as in the sockaddr */
    uint8_t ip[16];
    uint32_t scope;  /* IPv6: the scope id (a link-local address's interface), else 0 */
} srpc_addr_t;

typedef struct srpc_call_key {
    srpc_addr_t addr;
    uint64_t req_id;
    uint16_t func_id;
    uint8_t version; /* the request's protocol version: replies are sent in it */
    uint32_t key_id; /* versions 4 and 5: the key it was signed with (calls of two keys never match); else 0 */
    uint64_t session; /* version 5: its line of sessions (docs/PROTOCOL-v5.md: a call is its session's,
                         or of the session that session follows); else 0 */
    /* Not its identity: how its replies are sealed (version 5). */
    uint64_t seal_session; /* the session of its latest datagram taken (while it is not running) */
    uint8_t encrypt;       /* that session encrypts (its replies are encrypted too) */
} srpc_call_key_t;

enum ct_state { CT_FREE = 0, CT_PARTIAL, CT_QUEUED, CT_DONE, CT_REJECTED };
enum ct_list { CT_LIST_PARTIAL = 0, CT_LIST_DONE, CT_LIST_REJECTED, CT_NLISTS };

typedef struct ct_entry {
    srpc_call_key_t key;
    uint8_t state;     /* enum ct_state */
    uint8_t list;      /* enum ct_list it is on, or CT_NLISTS */
    uint16_t code;     /* DONE/REJECTED: 0 = RESPONSE, else the error code sent */
    uint8_t placed;    /* PARTIAL: reassembled straight into TQ element placed_seq */
    uint16_t aux;      /* PARTIAL: the request header's aux (of the first segment received) */
    uint64_t placed_seq;
    uint32_t lprev, lnext;
    uint32_t gen;      /* PARTIAL: which partial message this is (the server's count when it started,
                          partial.c): a buffer pointer may come back for another within one burst */
    uint64_t expires_ns;
    uint8_t secret[SRPC_AUTH_SECRET_LEN]; /* version 4: what its reply is signed with (the key of its
                                             request's last datagram; rx writes it only while the
                                             call is not QUEUED, when the worker reads it) */
    union {
        srpc_reasm_t partial;
        struct { uint64_t off; uint32_t len; } done;    /* cached reply: its place in the reply log */
        struct { uint64_t seq; } queued;                /* TQ element of the call */
        struct { uint16_t seq; } rejected;              /* the segment that showed the error */
    } u;
} ct_entry_t;

typedef struct calltab {
    ct_entry_t *e;
    /* The hash chains apart from the entries, 4 bytes each per entry: a lookup walks them and
     * compares the keys' hashes without touching an entry (a cache miss each) unless the hash
     * matches, and a removal finds its bucket from the hash kept. hnext also links the free
     * entries. */
    uint32_t *hnext;
    uint32_t *hash;
    uint32_t *buckets;
    uint32_t nbuckets_mask;
    uint32_t max_entries, used, free_head;
    uint32_t head[CT_NLISTS], tail[CT_NLISTS], count[CT_NLISTS]; /* count: entries on each list */
} calltab_t;

int ct_init(calltab_t *ct, uint32_t max_entries);
void ct_destroy(calltab_t *ct); /* frees the table only; callers free entry payloads first */

void ct_key_from_sockaddr(srpc_call_key_t *k, const struct sockaddr *sa, const srpc_hdr_t *h);
/* Writes the sockaddr of a key's address (for replies); returns its length. */
socklen_t ct_key_to_sockaddr(const srpc_call_key_t *k, struct sockaddr_storage *ss);

uint32_t ct_find(const calltab_t *ct, const srpc_call_key_t *k);
/* New entry in `state`, on no list. CT_NONE when the table is full. */
uint32_t ct_insert(calltab_t *ct, const srpc_call_key_t *k, uint8_t state);
/* Unlinks from hash and list and frees the slot; the payload must be freed before. */
void ct_remove(calltab_t *ct, uint32_t idx);

/* Appends to the tail of an expiry list (off any list it was on). */
void ct_list_push(calltab_t *ct, uint32_t idx, uint8_t list, uint64_t expires_ns);
void ct_list_unlink(calltab_t *ct, uint32_t idx);
static inline uint32_t ct_list_head(const calltab_t *ct, uint8_t list) { return ct->head[list]; }

#endif

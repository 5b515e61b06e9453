/* allowlist.h: the networks a server takes datagrams from (CIDR prefixes, IPv4 and IPv6), parsed once and matched per datagram. */
#ifndef SRPC_ALLOWLIST_H
#define SRPC_ALLOWLIST_H

#include <stdint.h>
#include <sys/socket.h>

#define SRPC_ALLOW_MAX 32

typedef struct srpc_allow_net {
    int family;         /* AF_INET or AF_INET6 */
    uint8_t addr[16];   /* network byte order; IPv4 in the first 4 */
    unsigned prefix;    /* leading bits that must match */
} srpc_allow_net_t;

typedef struct srpc_allowlist {
    unsigned n;         /* 0: every source is allowed */
    srpc_allow_net_t net[SRPC_ALLOW_MAX];
} srpc_allowlist_t;

/* Parses "10.0.0.0/8, 127.0.0.1, ::1/128" (commas or spaces; a bare address is a host).
 * NULL or an empty string: an empty list (everyone). Returns 0, or -EINVAL for a malformed
 * entry (a prefix too long, host bits set are fine and ignored), -E2BIG past SRPC_ALLOW_MAX. */
int srpc_allowlist_parse(srpc_allowlist_t *l, const char *text);
/* 1 when sa may send (an IPv4-mapped IPv6 source is matched as IPv4), else 0. Any thread. */
int srpc_allowlist_match(const srpc_allowlist_t *l, const struct sockaddr *sa);

#endif /* SRPC_ALLOWLIST_H */

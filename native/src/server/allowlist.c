/* allowlist.c: CIDR allow-lists of client networks (see allowlist.h). */
#include "server/allowlist.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

static int parse_one(srpc_allow_net_t *n, const char *s, size_t len)
{
    char buf[64];
    if (len == 0 || len >= sizeof(buf))
        return -EINVAL;
    memcpy(buf, s, len);
    buf[len] = '\0';
    char *slash = strchr(buf, '/');
    long prefix = -1;
    if (slash) {
        char *end;
        *slash = '\0';
        if (!slash[1] || slash[1] == '-' || slash[1] == '+')
            return -EINVAL;
        prefix = strtol(slash + 1, &end, 10);
        if (*end)
            return -EINVAL;
    }
    memset(n, 0, sizeof(*n));
    if (inet_pton(AF_INET, buf, n->addr) == 1) {
        n->family = AF_INET;
        if (prefix > 32)
            return -EINVAL;
        n->prefix = prefix < 0 ? 32 : (unsigned)prefix;
    } else if (inet_pton(AF_INET6, buf, n->addr) == 1) {
        n->family = AF_INET6;
        if (prefix > 128)
            return -EINVAL;
        n->prefix = prefix < 0 ? 128 : (unsigned)prefix;
    } else {
        return -EINVAL;
    }
    return 0;
}

int srpc_allowlist_parse(srpc_allowlist_t *l, const char *text)
{
    if (!l)
        return -EINVAL;
    l->n = 0;
    for (const char *p = text; p && *p;) {
        while (*p == ',' || *p == ' ')
            p++;
        size_t len = strcspn(p, ", ");
        if (!len)
            break;
        if (l->n == SRPC_ALLOW_MAX)
            return -E2BIG;
        int rc = parse_one(&l->net[l->n], p, len);
        if (rc) {
            l->n = 0;
            return rc;
        }
        l->n++;
        p += len;
    }
    return 0;
}

static int prefix_match(const uint8_t *a, const uint8_t *net, unsigned bits)
{
    unsigned bytes = bits / 8, rest = bits % 8;
    if (memcmp(a, net, bytes) != 0)
        return 0;
    if (rest) {
        uint8_t mask = (uint8_t)(0xff << (8 - rest));
        return (a[bytes] & mask) == (net[bytes] & mask);
    }
    return 1;
}

int srpc_allowlist_match(const srpc_allowlist_t *l, const struct sockaddr *sa)
{
    if (!l || l->n == 0)
        return 1;
    if (!sa)
        return 0;
    uint8_t a[16];
    int family;
    if (sa->sa_family == AF_INET) {
        memcpy(a, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        family = AF_INET;
    } else if (sa->sa_family == AF_INET6) {
        const struct in6_addr *v6 = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(v6)) {
            memcpy(a, v6->s6_addr + 12, 4);
            family = AF_INET;
        } else {
            memcpy(a, v6->s6_addr, 16);
            family = AF_INET6;
        }
    } else {
        return 0;
    }
    for (unsigned i = 0; i < l->n; i++)
        if (l->net[i].family == family && prefix_match(a, l->net[i].addr, l->net[i].prefix))
            return 1;
    return 0;
}

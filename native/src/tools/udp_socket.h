/* udp_socket.h: the kernel UDP socket of the benchmark tools (raw-UDP baseline, minimal protocol server): resolved, with large buffers, bound or connected. */
#ifndef SRPC_TOOLS_UDP_SOCKET_H
#define SRPC_TOOLS_UDP_SOCKET_H

#include <stdint.h>

/* Resolves host:port (a server may pass host NULL: the wildcard address) and returns a UDP
 * socket with SO_RCVBUF / SO_SNDBUF as large as splitrpc asks for, bound (server != 0) or
 * connected (client) to the first address that works, or -errno. Any thread. */
int srpc_tool_udp_socket(const char *host, uint16_t port, int server);

#endif /* SRPC_TOOLS_UDP_SOCKET_H */

/* splitrpc.h: the whole C API of the splitrpc native core in one include: one header per component (core, server, client, GPU, DPDK, GNN sampling, embedding cache, tools, authentication); every int function returns 0 (or a count) or -errno. */
#ifndef SPLITRPC_H
#define SPLITRPC_H

#include "splitrpc_core.h"
#include "splitrpc_server.h"
#include "splitrpc_client.h"
#include "splitrpc_gpu.h"
#include "splitrpc_dpdk.h"
#include "splitrpc_gnn.h"
#include "splitrpc_embed.h"
#include "splitrpc_tools.h"
#include "splitrpc_auth.h"

#endif /* SPLITRPC_H */

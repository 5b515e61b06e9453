/* features.c: what this build of the native core contains, and its version. */
#include "splitrpc_core.h"

#ifndef SPLITRPC_VERSION_STR
#define SPLITRPC_VERSION_STR "0.0.0"
#endif

unsigned srpc_features(void)
{
    unsigned f = 0;
#ifdef SPLITRPC_HAVE_CUDA
    f |= SRPC_FEATURE_CUDA;
#endif
#ifdef SPLITRPC_HAVE_DPDK
    f |= SRPC_FEATURE_DPDK;
#endif
#ifdef SPLITRPC_SANITIZED
    f |= SRPC_FEATURE_SANITIZE;
#endif
#ifdef SRPC_FAULT_INJECTION
    f |= SRPC_FEATURE_FAULTS;
#endif
    return f;
}

const char *srpc_version(void) { return SPLITRPC_VERSION_STR; }

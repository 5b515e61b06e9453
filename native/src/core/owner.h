/* owner.h: which thread holds a lock or a role, recorded and asserted in debug builds (the tests' builds) and compiled out under NDEBUG; the server's and the client's lock rules are checked with these. */
#ifndef SRPC_OWNER_H
#define SRPC_OWNER_H

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>

/* field: an _Atomic unsigned long, 0 when no thread holds what it records. */
#ifndef NDEBUG
#define SRPC_OWNER_SET(field) atomic_store_explicit(&(field), (unsigned long)pthread_self(), memory_order_relaxed)
#define SRPC_OWNER_CLEAR(field) atomic_store_explicit(&(field), 0ul, memory_order_relaxed)
#define SRPC_ASSERT_OWNER(field) \
    assert(atomic_load_explicit(&(field), memory_order_relaxed) == (unsigned long)pthread_self())
#else
#define SRPC_OWNER_SET(field) ((void)0)
#define SRPC_OWNER_CLEAR(field) ((void)0)
#define SRPC_ASSERT_OWNER(field) ((void)sizeof(field))
#endif

#endif

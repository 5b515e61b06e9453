/* client_lib.c: the one source of libsplitrpc_client.so's target (CMake needs one); the library's code is the core's (client.c, client_load.c, schedule.c and what they use), linked whole, with client_lib.map saying what is exported. */
#include "splitrpc_client.h"

typedef int srpc_client_lib_unit; /* ISO C wants a translation unit to declare something */

/* calltab.c: a micro-benchmark of the server's call table in its steady state (full, 65,536 entries): per call, a lookup that misses, an insert, the oldest cached reply evicted, and now and then a lookup that hits (a retransmission). Build and run from the repository root:
 *   cc -O2 -std=gnu11 -D_GNU_SOURCE -Inative/src -Inative/include -o /tmp/ctb bench/micro/calltab.c native/src/server/calltab.c native/src/core/auth.c && /tmp/ctb
 * Results: bench/results/calltab_lookup.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "server/calltab.h"
static uint64_t now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1000000000ull+t.tv_nsec;}
int main(void){
  calltab_t ct; if (ct_init(&ct, 65536)) return 1;
  srpc_call_key_t k; memset(&k,0,sizeof k); k.addr.family=2; k.addr.port=1234; k.addr.ip[0]=127; k.addr.ip[3]=1; k.func_id=1; k.version=1;
  uint64_t id=0x1234567;
  double best=1e18;
  for (int rep=0; rep<7; rep++) {
    uint64_t t0=now(); const int N=2000000;
    for (int i=0;i<N;i++){
      k.req_id=id++;
      if (ct_find(&ct,&k)!=CT_NONE) {fprintf(stderr,"dup at %d\n",i);abort();}
      uint32_t e=ct_insert(&ct,&k,CT_QUEUED);
      if (e==CT_NONE){ uint32_t o=ct_list_head(&ct,CT_LIST_DONE); ct_remove(&ct,o); e=ct_insert(&ct,&k,CT_QUEUED);} 
      ct_list_push(&ct,e,CT_LIST_DONE,0);
      /* a lookup of a recent call (a retransmission) now and then */
      if (i >= 3 && (i & 15)==0){ srpc_call_key_t q=k; q.req_id=id-3; if(ct_find(&ct,&q)==CT_NONE){fprintf(stderr,"miss at %d\n",i);abort();} }
    }
    double ns=(double)(now()-t0)/N; if(ns<best)best=ns;
  }
  printf("%.1f ns per call (find miss + insert + evict oldest), best of 7\n", best);
  return 0;
}

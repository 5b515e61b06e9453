/* emb_gpu_abi.h: the one argument of the embedding cache's kernels (native/cuda/embed_cache.cuh), one definition for the kernels, the host side that launches them (native/src/embed/device_cache.c) and the emulated driver's host implementations (native/tests/fake_libcuda.c). */
#ifndef SRPC_EMB_GPU_ABI_H
#define SRPC_EMB_GPU_ABI_H

#include <stdint.h>

/* Threads per block of every embedding kernel: SRPC_EMB_WARPS warps, one key per warp. */
#define SRPC_EMB_WARPS 8
#define SRPC_EMB_THREADS (SRPC_EMB_WARPS * 32)

/* Passed by value (cuLaunchKernel's params[0] points at it). Device addresses as u64; fixed
 * widths only, so that C and CUDA lay it out alike (checked by a static assert on each side).
 *
 * The cache's state in device memory (the layout of splitrpc_embed.h's host cache):
 *   keys      int64  [sets * per_set]
 *   counters  uint64 [sets * per_set]   0: empty, else the key's last touch (LRU order)
 *   vectors   float  [sets * per_set * dim]
 *   locks     uint32 [sets]             0 free, 1 held (replace takes them)
 * A batch's key i gets the counter clock + i + 1: later in the batch is more recent, and every
 * counter of a batch is above every earlier batch's (the host advances clock by n per batch).
 * Key i is handled by warp i (blocks of SRPC_EMB_WARPS warps), so a batch is applied in any
 * order; the rules below make its outcome the one of applying its keys in index order, as the
 * host cache does: a set's content after a batch is its SRPC_EMB_SLAB * slabs_per_set keys of
 * the highest counters, a key touched twice keeps its higher counter, and a key whose counter
 * is below every counter of its full set is not inserted (in index order it would have been
 * evicted by the later keys already there). Replace runs in two launches: phase 0 touches the
 * keys already cached (and marks them in hit), phase 1 inserts the others, so that no key cached
 * before the batch is evicted and counted before its own turn. Update takes no lock: each key
 * must come once (the host side's contract). */
struct srpc_emb_kargs {
    uint64_t keys, counters, vectors, locks; /* the cache */
    uint64_t in_keys;  /* int64 [n]: the batch's keys (dump: its output, room for cap keys) */
    uint64_t in_vecs;  /* float [n * dim]: replace, update */
    uint64_t out_vecs; /* float [n * dim]: query (a hit's row written, a miss's left alone) */
    uint64_t hit;      /* uint8 [n]: query's output; replace's marks (phase 0 sets, phase 1 reads) */
    uint64_t count;    /* uint64 [2]: query {hits, 0}; replace {evicted, inserted};
                        * update {updated, 0}; dump {written, more than cap}; zeroed by the host */
    uint64_t sets;
    uint64_t clock;    /* dump: the first slot of the range dumped */
    uint64_t cap;      /* dump: room in in_keys */
    uint32_t n;        /* keys in the batch (dump: slots in the range; clear: sets) */
    uint32_t dim;
    uint32_t per_set;  /* slots per slabset: slabs_per_set * 32 */
    uint32_t phase;    /* replace: 0 or 1 */
};

#define SRPC_EMB_KARGS_SIZE 112

#endif /* SRPC_EMB_GPU_ABI_H */

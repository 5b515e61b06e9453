"""check_sections.py: the embedding capability's section of `splitrpc check` (its Capability's check_sections(), plugin.py): the GPU embedding cache's kernels against the C cache in host memory, key for key and vector for vector, on batches of the sizes a DLRM table sees, and the time of a batch through each (bench-embedding's GPU rows, trimmed, are bench/suites/gpu_check.py's)."""
from __future__ import annotations

import time

import numpy as np

from splitrpc.check import Context, Result, Section, Skipped, expect
from splitrpc.check.probes import EMULATED_LABEL, driver_emulated, need_gpu

# (dim, capacity, slabs per set, key range, largest batch): a DLRM table's L1 at 5% (400,000
# rows), a wide one, and a tiny one whose sets evict inside every batch.
CASES = ((32, 20_000, 2, 400_000, 16_384), (128, 4_000, 1, 20_000, 4_096), (8, 96, 1, 400, 300))
STEPS = 60                   # random operations per case
TIMED = (1_024, 16_384)      # unique keys per timed query batch
REPS = 15                    # timed batches per size (the median reported)


def _zipf(rng: np.random.Generator, key_range: int, n: int) -> np.ndarray:
    """n keys with a hot head (as DLRM's): Zipf 1.2 ranks, scattered over the key range."""
    r = np.minimum(rng.zipf(1.2, n), key_range) - 1
    return ((r * 2654435761) % key_range).astype(np.int64)


def _agree(device: int, dim: int, capacity: int, slabs: int, key_range: int, largest: int,
           rng: np.random.Generator) -> dict:
    from splitrpc.embedding_cache import DeviceEmbeddingCache, EmbeddingCache

    g = DeviceEmbeddingCache(dim, capacity, slabs, device=device)
    h = EmbeddingCache(dim, capacity, slabs)
    n_keys = n_vectors = evict_gap = 0
    try:
        for step in range(STEPS):
            n = int(rng.integers(1, largest + 1))
            op = ("query", "replace", "replace", "update", "dump")[step % 5] if step else "replace"
            keys = _zipf(rng, key_range, n)
            if op == "query":
                (a, ha), (b, hb) = g.query(keys), h.query(keys)
                expect(np.array_equal(ha, hb), f"dim {dim}: query of {n} keys: the hits differ "
                                               f"({int(ha.sum())} on the device, {int(hb.sum())} on the host)")
                expect(np.array_equal(a, b), f"dim {dim}: query of {n} keys: a hit's vector differs")
                n_keys, n_vectors = n_keys + n, n_vectors + int(ha.sum())
            elif op == "replace":
                keys = rng.permutation(np.unique(keys))
                vecs = rng.standard_normal((keys.size, dim)).astype(np.float32)
                was = int(np.isin(keys, h.dump()).sum())
                want, got = h.replace(keys, vecs), g.replace(keys, vecs)
                expect(want - was <= got <= want, f"dim {dim}: replace of {keys.size} keys: {got} evictions on the "
                                                  f"device, {want} on the host ({was} cached before)")
                evict_gap += want - got
            elif op == "update":
                keys = np.unique(keys)
                vecs = rng.standard_normal((keys.size, dim)).astype(np.float32)
                expect(g.update(keys, vecs) == h.update(keys, vecs), f"dim {dim}: update of {keys.size} keys: counts differ")
            expect(len(g) == len(h), f"dim {dim}: {len(g)} keys cached on the device, {len(h)} on the host")
            expect(np.array_equal(np.sort(g.dump()), np.sort(h.dump())), f"dim {dim}: step {step} ({op}): the caches "
                                                                          "hold different keys")
        every = h.dump()
        (a, ha), (b, _) = g.query(every), h.query(every)
        expect(bool(ha.all()) and np.array_equal(a, b), f"dim {dim}: a cached key's vector differs at the end")
        return {"dim": dim, "capacity": capacity, "slots": g.slots, "keys_compared": n_keys + every.size,
                "vectors_compared": n_vectors + every.size, "cached_at_end": int(every.size), "eviction_gap": evict_gap}
    finally:
        g.close()
        h.close()


def _timed(device: int, rng: np.random.Generator, cupy) -> list[dict]:
    """The median time of a query batch of unique keys (about 86% cached, as the benchmark's
    warm L1 at 5%) through each cache: host C cache, device cache with vectors back to the host,
    and (with CuPy) device cache with vectors left in device memory."""
    from splitrpc.embedding_cache import DeviceEmbeddingCache, EmbeddingCache

    dim, capacity = 32, 20_000
    rows = []
    g = DeviceEmbeddingCache(dim, capacity, 2, device=device, max_batch=max(TIMED))
    h = EmbeddingCache(dim, capacity, 2)
    try:
        fill = rng.permutation(400_000)[:capacity].astype(np.int64)
        vecs = rng.standard_normal((fill.size, dim)).astype(np.float32)
        g.replace(fill, vecs)
        h.replace(fill, vecs)
        cached = h.dump()
        for n in TIMED:
            hot = rng.choice(cached, int(0.86 * n), replace=False)
            cold = 400_000 + rng.choice(10**6, n - hot.size, replace=False)
            keys = rng.permutation(np.concatenate([hot, cold]).astype(np.int64))
            out = np.zeros((n, dim), np.float32)
            ways = [("host", lambda: h.query(keys, out)), ("device", lambda: g.query(keys, out))]
            if cupy is not None:
                with cupy.cuda.Device(device):  # the output on the cache's device
                    out_dev = cupy.empty((n, dim), np.float32)
                    cupy.cuda.get_current_stream().synchronize()
                ways.append(("device, vectors stay", lambda: g.query_device(keys, out_dev.data.ptr)))
            t: dict[str, list] = {name: [] for name, _ in ways}
            for _ in range(REPS):  # alternated
                for name, fn in ways:
                    t0 = time.perf_counter()
                    fn()
                    t[name].append(time.perf_counter() - t0)
            rows.append({"keys": n, "device, vectors stay": None, **{k: float(np.median(v)) * 1e6 for k, v in t.items()}})
    finally:
        g.close()
        h.close()
    return rows


def run_device_embedding(ctx: Context) -> Result:
    ordinal = need_gpu(ctx.device)
    from splitrpc import gpu

    if not gpu.kernel_archs():
        raise Skipped("splitrpc was built without a CUDA compiler: no GPU kernels (the device cache needs them)")
    try:
        cupy = gpu.import_cupy()
    except ImportError:
        cupy = None  # the agreement needs none; the device-output timing does
    label = f"{EMULATED_LABEL}: " if driver_emulated() else ""
    rng = np.random.default_rng(ctx.seed)
    cases = [_agree(ordinal, *c, rng) for c in CASES]
    timed = _timed(ordinal, rng, cupy)
    keys = sum(c["keys_compared"] for c in cases)
    vecs = sum(c["vectors_compared"] for c in cases)
    md = [f"- {label}the GPU embedding cache's kernels against the C cache: {len(CASES)} caches x {STEPS} random "
          f"batches (query, replace, update, dump; Zipf keys), {keys:,} keys and {vecs:,} vectors compared, every one "
          "equal; evictions counted on the device below the host's by "
          f"{sum(c['eviction_gap'] for c in cases)} (keys evicted and put back within one batch, as splitrpc_embed.h allows)",
          "", "| unique keys per query | host C cache µs | device, vectors to the host µs | device, vectors stay µs |",
          "|---:|---:|---:|---:|"]
    def us(v) -> str:
        return "-" if v is None else f"{v:,.0f}"

    for r in timed:
        md.append(f"| {r['keys']:,} | {us(r['host'])} | {us(r['device'])} | {us(r['device, vectors stay'])} |")
    md.append(f"\nMedians of {REPS} alternated batches, dim 32, a cache of 20,000 keys (a 400,000-row table at 5%), "
              f"86% of each batch cached{' (the emulated driver: these times are the emulation, not a GPU)' if label else ''}.")
    big = timed[-1]
    return Result(summary=f"{label}kernels = C cache on {keys:,} keys and {vecs:,} vectors; a {big['keys']:,}-key query "
                          f"{big['device']:,.0f} µs on the device ({us(big['device, vectors stay'])} µs leaving the "
                          f"vectors there), {big['host']:,.0f} µs on the host",
                  facts={"cases": cases, "timed_us": timed, "emulated": bool(label)}, markdown=md)


SECTIONS = [
    Section("device-embedding", "the GPU embedding cache (HPS's L1): its kernels against the C cache key for key and "
            "vector for vector, and a query batch's time on each", run_device_embedding, cap_s=60, stage="device"),
]

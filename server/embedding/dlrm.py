"""dlrm.py: a DLRM-style recommendation service over the embedding store: 13 dense features and 26 categorical keys per request, a bottom MLP, 26 lookups (one per table; a batch's keys of one table deduplicated in one store lookup), pairwise dot-product interaction, a top MLP and a click probability. Random weights from a seed; served as a batched tensor function (after HPS, Wei et al., RecSys 2022).

Request: float32 dense[13], int64 keys[26] (key j indexes table c{j}); reply: float32 prob[1].
An unknown key (outside its table) gets the table's default vector, or, for tables configured
with unknown="error", fails that call alone with BAD_REQUEST.

The store comes from a JSON configuration (store_from_config) or is embedded: a RocksDB copy of
the tables in a temporary directory filled at start (a clone of the filled tables kept once:
l3_cache.py), the host hash map as L2, L1 at 5% of each
table, synchronous lookups (threshold 1.0), so replies are exact.
"""
from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass

import numpy as np

from splitrpc.executor import stage_result
from splitrpc.services.embedding.tables import TableSpec, UnknownKey, truth, zipf_keys

FUNC_ID = 17
DENSE, SPARSE = 13, 26
PRESETS = {  # rows per table, dimension, bottom MLP, top MLP
    "small": dict(rows=40_000, dim=32, bottom=(128, 64), top=(128, 64)),      # 1.04 M keys: CI
    "default": dict(rows=400_000, dim=32, bottom=(512, 256), top=(512, 256)),  # 10.4 M keys
}
CONFIG_KEYS = {"l3", "fill", "l2", "redis_port", "l2_capacity", "l1_fraction", "l1_device", "hit_rate_threshold",
               "refresh_interval", "rows", "dim", "unknown", "whole_tables", "updates"}
UPDATE_KEYS = {"redis_port", "stream", "rate", "batch"}


def table_specs(rows: int, dim: int, unknown: str = "default") -> list[TableSpec]:
    return [TableSpec(f"c{j}", rows, dim, unknown=unknown, seed=j) for j in range(SPARSE)]


def build_model(dim: int, bottom, top, seed: int = 0):
    import torch

    def mlp(sizes, last_act):
        layers = []
        for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
            layers.append(torch.nn.Linear(a, b))
            if i < len(sizes) - 2 or last_act:
                layers.append(torch.nn.ReLU())
        return torch.nn.Sequential(*layers)

    n = SPARSE + 1
    iu = torch.triu_indices(n, n, offset=1)

    class DLRM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bottom = mlp([DENSE, *bottom, dim], True)
            self.top = mlp([dim + n * (n - 1) // 2, *top, 1], False)
            self.register_buffer("iu", iu, persistent=False)

        def forward(self, dense, emb):
            x = self.bottom(dense)
            z = torch.cat([x[:, None, :], emb], 1)
            inter = torch.bmm(z, z.transpose(1, 2))[:, self.iu[0], self.iu[1]]
            return torch.sigmoid(self.top(torch.cat([x, inter], 1)))

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return DLRM().eval()


@dataclass
class StoreConfig:
    l3: str | None = None            # RocksDB path (None: a temporary directory)
    fill: bool = True                # write the tables' ground truth into L3 at start
    l2: str = "hashmap"              # "hashmap", "redis" or "none"
    redis_port: int = 6379
    l2_capacity: int | None = None   # keys per table (default: 20% of the rows)
    l1_fraction: float = 0.05
    l1_device: str = "cpu"           # "cpu" or "cuda:N": the L1 caches (or the whole tables) and the MLPs on that GPU
    hit_rate_threshold: float = 1.0
    refresh_interval: float | None = None
    rows: int | None = None          # per table (default: the preset's)
    dim: int | None = None
    unknown: str = "default"
    whole_tables: bool = False       # the baseline: every table whole in memory, no tiers
    updates: dict | None = None      # consume online updates: {"redis_port", "stream", "rate", "batch"}


def load_config(path: str) -> StoreConfig:
    """A StoreConfig from a JSON object with any of CONFIG_KEYS; ValueError names a bad key."""
    with open(path) as f:
        raw = json.load(f)
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: the embedding store configuration must be a JSON object")
    bad = set(raw) - CONFIG_KEYS
    if bad:
        raise ValueError(f"{path}: unknown key(s) {', '.join(sorted(bad))}; known: {', '.join(sorted(CONFIG_KEYS))}")
    cfg = StoreConfig(**raw)
    if cfg.l2 not in ("hashmap", "redis", "none"):
        raise ValueError(f"{path}: l2 must be hashmap, redis or none, got {cfg.l2!r}")
    if not isinstance(cfg.l1_device, str) or not re.fullmatch(r"cpu|cuda(:\d+)?", cfg.l1_device):
        raise ValueError(f"{path}: l1_device must be cpu, cuda or cuda:N, got {cfg.l1_device!r}")
    if cfg.updates is not None and (not isinstance(cfg.updates, dict) or set(cfg.updates) - UPDATE_KEYS):
        raise ValueError(f"{path}: updates must be an object with keys among {', '.join(sorted(UPDATE_KEYS))}")
    return cfg


class DLRM:
    """The model and its tables without a store: example requests and exact reference replies
    (what `splitrpc call dlrm` checks against)."""

    def __init__(self, *, small: bool = False, rows: int | None = None, dim: int | None = None,
                 unknown: str = "default", seed: int = 0):
        p = PRESETS["small" if small else "default"]
        self.rows, self.dim = rows or p["rows"], dim or p["dim"]
        self.specs = table_specs(self.rows, self.dim, unknown)
        self.model = build_model(self.dim, p["bottom"], p["top"], seed)

    # ------------------------------------------------------------------ requests and checks

    def example(self, rng: np.random.Generator, n: int = 1) -> bytes:
        """n requests (concatenated): normal dense features, Zipf keys per table (alpha 1.2)."""
        dense = rng.standard_normal((n, DENSE)).astype("<f4")
        seed = int(rng.integers(2**31))
        keys = np.stack([zipf_keys(self.rows, n, seed=seed + j, hot_seed=j) for j in range(SPARSE)], 1).astype("<i8")
        return b"".join(dense[i].tobytes() + keys[i].tobytes() for i in range(n))

    def reference(self, dense: np.ndarray, keys: np.ndarray) -> np.ndarray:
        """The exact probabilities: the ground-truth tables, no store."""
        import torch

        emb = np.empty((keys.shape[0], SPARSE, self.dim), np.float32)
        for j, spec in enumerate(self.specs):
            col = keys[:, j]
            ok = spec.known(col)
            emb[:, j] = spec.default_vector()
            if ok.any():
                emb[ok, j] = truth(spec, col[ok])
        with torch.inference_mode():
            return self.model(torch.from_numpy(dense), torch.from_numpy(emb)).numpy()

    def check_reply(self, request: bytes, reply: bytes) -> bool:
        if len(request) != 4 * DENSE + 8 * SPARSE or len(reply) != 4:
            return False
        dense = np.frombuffer(request[:4 * DENSE], "<f4").reshape(1, DENSE).copy()
        keys = np.frombuffer(request[4 * DENSE:], "<i8").reshape(1, SPARSE).copy()
        want = self.reference(dense, keys)[0, 0]
        got = np.frombuffer(reply, "<f4")[0]
        return bool(np.isfinite(got) and abs(got - want) <= 1e-5 + 1e-4 * abs(want))


def _bad_key(spec: TableSpec, key) -> Exception:
    """The BadRequest that fails a call whose key an error-table does not know."""
    from splitrpc.errors import BadRequest

    return BadRequest(f"key {int(key)} of table {spec.name} is not in 0 .. {spec.rows - 1}")


class DeviceDLRM:
    """The DLRM's MLPs and feature interaction in CuPy on a GPU (the device of the store's L1),
    weights copied from the torch model: the same arithmetic in float32 (cuBLAS, no TF32)."""

    def __init__(self, model, ordinal: int, cupy):
        import torch

        self.cp, self.ordinal = cupy, ordinal
        with cupy.cuda.Device(ordinal):
            self.bottom, self.top = self._layers(model.bottom, torch), self._layers(model.top, torch)
        n = SPARSE + 1
        iu = np.triu_indices(n, 1)  # the order of torch.triu_indices(n, n, 1): row by row
        with cupy.cuda.Device(ordinal):
            self.n, self.iu_flat = n, cupy.asarray((iu[0] * n + iu[1]).astype(np.int64))

    def _layers(self, seq, torch) -> list:
        out: list = []
        for m in seq:
            if isinstance(m, torch.nn.Linear):
                w = m.weight.detach().numpy().T.astype(np.float32)  # (in, out): x @ w
                out.append([self.cp.asarray(np.ascontiguousarray(w)), self.cp.asarray(m.bias.detach().numpy()), False])
            elif isinstance(m, torch.nn.ReLU):
                out[-1][2] = True
            else:
                raise TypeError(f"DeviceDLRM knows Linear and ReLU layers, not {type(m).__name__}")
        return out

    def _mlp(self, x, layers):
        for w, b, relu in layers:
            x = x @ w + b
            if relu:
                x = self.cp.maximum(x, 0)
        return x

    def __call__(self, dense: np.ndarray, emb) -> np.ndarray:
        """prob (B, 1) on the host, of dense (B, 13) host features and emb (B, 26, dim) on the device
        (complete when given). Returns after its stream is done with emb (asnumpy waits), so emb
        may be freed and its memory reused at once."""
        cp = self.cp
        with cp.cuda.Device(self.ordinal):
            b, dim = dense.shape[0], emb.shape[2]
            x = self._mlp(cp.asarray(np.ascontiguousarray(dense, np.float32)), self.bottom)
            z = cp.concatenate([x.reshape(b, 1, dim), emb], axis=1)
            inter = cp.matmul(z, cp.swapaxes(z, 1, 2)).reshape(b, self.n * self.n)[:, self.iu_flat]
            t = self._mlp(cp.concatenate([x, inter], axis=1), self.top)
            return cp.asnumpy(1 / (1 + cp.exp(-t)))


def fill_new(path: str, specs: list[TableSpec], progress: bool) -> None:
    """A new L3 at path with every table's ground truth, compacted and closed."""
    from splitrpc.services.embedding.rocks import RocksTier

    l3 = RocksTier(path, specs)
    try:
        l3.fill_all(progress=progress)
    finally:
        l3.close()


class DLRMService(DLRM):
    """The model served over an embedding store (config, or the embedded default). close() stops
    the store and removes a temporary L3."""

    def __init__(self, *, small: bool = False, config: StoreConfig | None = None, seed: int = 0,
                 progress: bool = False):
        from splitrpc.services.embedding import l3_cache
        from splitrpc.services.embedding.hashmap import HashMapTier
        from splitrpc.services.embedding.rocks import RocksTier
        from splitrpc.services.embedding.store import EmbeddingStore

        cfg = config or StoreConfig()
        super().__init__(small=small, rows=cfg.rows, dim=cfg.dim, unknown=cfg.unknown, seed=seed)
        self._tmp, self.updater, self.l2, self.l3, self.device_model = None, None, None, None, None
        if cfg.l1_device != "cpu":  # the MLPs beside the embeddings, on that GPU
            from splitrpc.gpu import import_cupy, parse_device

            self.device_model = DeviceDLRM(self.model, parse_device(cfg.l1_device), import_cupy())
        if cfg.whole_tables:
            from splitrpc.services.embedding.store import WholeTables
            self.store = WholeTables(self.specs, device=cfg.l1_device)
            return
        if cfg.l3 is None:  # a temporary L3: a clone of the filled tables kept once (l3_cache.py)
            self._tmp = l3_cache.filled_temporary(self.specs, lambda p: fill_new(p, self.specs, progress),
                                                  prefix="splitrpc-dlrm-l3-")
            self.l3 = RocksTier(self._tmp, self.specs)
        else:
            self.l3 = RocksTier(cfg.l3, self.specs)
            if cfg.fill:
                self.l3.fill_all(progress=progress)
        if cfg.l2 == "hashmap":
            self.l2 = HashMapTier(self.specs, cfg.l2_capacity or max(1, self.rows // 5))
        elif cfg.l2 == "redis":
            from splitrpc.services.embedding.redis_tier import RedisTier
            self.l2 = RedisTier(self.specs, port=cfg.redis_port)
        else:
            self.l2 = None
        self.store = EmbeddingStore(self.specs, self.l3, l2=self.l2, l1_fraction=cfg.l1_fraction,
                                    hit_rate_threshold=cfg.hit_rate_threshold, refresh_interval=cfg.refresh_interval,
                                    device=cfg.l1_device)
        if cfg.updates:  # consumed in a process of its own (update_process.py)
            from splitrpc.services.embedding.update_process import UpdateProcess
            u = cfg.updates
            src = {"kind": "redis", "port": u.get("redis_port", 6379), "stream": u.get("stream", "splitrpc:updates")}
            self.updater = UpdateProcess(self.store, src, rate=u.get("rate"), batch=u.get("batch", 1000))

    # ------------------------------------------------------------------ serving

    def inputs_outputs(self):
        from splitrpc.spec import TensorSpec

        return ([TensorSpec("dense", "float32", (DENSE,)), TensorSpec("keys", "int64", (SPARSE,))],
                [TensorSpec("prob", "float32", (1,))])

    def embeddings(self, keys: np.ndarray) -> tuple[np.ndarray, dict]:
        """(B, 26, dim) vectors of a batch's keys through the store, and {row: BadRequest} for rows
        with a key an error-table does not know (their vectors are the defaults)."""
        b = keys.shape[0]
        emb = np.empty((b, SPARSE, self.dim), np.float32)
        bad: dict = {}
        for j, spec in enumerate(self.specs):
            col = keys[:, j]
            try:
                emb[:, j] = self.store.lookup(spec.name, col)
            except UnknownKey:
                ok = spec.known(col)
                for i in np.flatnonzero(~ok):
                    bad.setdefault(int(i), _bad_key(spec, col[i]))
                emb[:, j] = spec.default_vector()
                emb[ok, j] = self.store.lookup(spec.name, col[ok])
        return emb, bad

    def embeddings_device(self, keys: np.ndarray):
        """As embeddings(), the vectors gathered on the L1's device: (CuPy (B, 26, dim), bad rows).
        A key an error-table does not know fails its row (BadRequest); the row is looked up with
        key 0 instead, for a reply nobody gets."""
        bad: dict = {}
        cols = {}
        for j, spec in enumerate(self.specs):
            col = keys[:, j]
            if spec.unknown == "error":
                ok = spec.known(col)
                if not ok.all():
                    for i in np.flatnonzero(~ok):
                        bad.setdefault(int(i), _bad_key(spec, col[i]))
                    col = np.where(ok, col, 0)
                    self.store.stats_by_table[spec.name].add(unknown=int((~ok).sum()))  # as embeddings() counts them
            cols[spec.name] = col
        with self.device_model.cp.cuda.Device(self.device_model.ordinal):
            return self.store.lookup_device(cols, self.device_model.cp), bad

    def sparse_stage(self, job) -> tuple[np.ndarray, dict]:
        """The SparseNet of a batch, as a StagePipeline's first stage: embeddings(keys) of the
        BatchJob's keys (its second tensor argument)."""
        keys = np.asarray(job.call_args[1])
        return self.embeddings_device(keys) if self.device_model is not None else self.embeddings(keys)

    def callback(self, dense, keys, prob):
        """The batched tensor callback: (B, 13), (B, 26) in; (B, 1) out. Under a sparse-dense
        pipeline (register(pipeline=)) the embeddings come from the first stage, and this is the
        DenseNet alone."""
        import torch

        got = stage_result()
        if self.device_model is not None:  # the lookups and the MLPs on the L1's GPU
            emb, bad = got if got is not None else self.embeddings_device(np.asarray(keys))
            prob[:] = self.device_model(np.asarray(dense), emb)
            return bad or None
        emb, bad = got if got is not None else self.embeddings(np.asarray(keys))
        with torch.inference_mode():
            out = self.model(torch.from_numpy(np.ascontiguousarray(dense, np.float32)), torch.from_numpy(emb))
        prob[:] = out.numpy()
        return bad or None

    def register(self, server, *, max_batch: int | None = 1024, max_delay_us: int | None = None,
                 capacity: int = 4096, pipeline: tuple[int, int] | None = None) -> None:
        """Registers the service as FUNC_ID (and its counters as server.stats()["embedding"]);
        capacity: calls its queues hold (more outstanding get BUSY). pipeline=(sparse, dense):
        Hercules's sparse-dense pipeline scheduling, a batch's lookups (SparseNet) on one of
        `sparse` threads and its MLPs (DenseNet) on one of `dense` threads, the two pipelined
        (splitrpc.StagePipeline); None: model-based scheduling, the whole model inline on the
        server's worker."""
        from splitrpc.executor import INLINE, StagePipeline

        executor = INLINE
        if pipeline is not None:
            sparse, dense = pipeline
            executor = StagePipeline(self.sparse_stage, sparse, dense, name="dlrm-sd")
        ins, outs = self.inputs_outputs()
        server.add_function(self.callback, FUNC_ID, "dlrm", ins, outs, max_batch=max_batch, max_delay_us=max_delay_us,
                            capacity=capacity, executor=executor)
        server.add_stats_source("embedding", self.stats)

    def stats(self) -> dict:
        """The store's counters summed over the tables, and the updates applied: stats()["embedding"]."""
        st = self.store.stats()
        u = self.updater.stats() if self.updater else {}
        return {**{k: sum(t[k] for t in st.values())
                   for k in ("lookups", "unique", "l1_hits", "l3_hits", "defaults_missing", "l1_size", "l1_slots")},
                "applied": u.get("applied", 0), "l1_updated": u.get("l1_updated", 0),
                "update_child_cpu_s": u.get("child_cpu_s", 0.0), "update_apply_cpu_s": u.get("apply_cpu_s", 0.0)}

    def close(self) -> None:
        if self.updater is not None:
            self.updater.stop()
        self.store.close()
        if self.l2 is not None:
            self.l2.close()
        if self.l3 is not None:
            self.l3.close()
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)


def serve_banner(svc: DLRMService) -> str:
    if svc.l3 is None:
        where = f"whole in memory and on {svc.store.device}" if svc.store.device != "cpu" else "whole in memory"
        return f", dlrm: {SPARSE} tables x {svc.rows} keys x {svc.dim} {where} (no tiers)"
    l2 = svc.l2.name if svc.l2 is not None else "none"
    l1 = svc.store.l1["c0"]
    return (f", dlrm: {SPARSE} tables x {svc.rows} keys x {svc.dim} (L1 {l1.slots if l1 else 0} slots per table "
            f"on {svc.store.device}, "
            f"L2 {l2}, L3 rocksdb at {svc.l3.path}, threshold {svc.store.threshold:g})")

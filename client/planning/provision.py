"""provision.py: Hercules's cluster provisioning: from efficiency tuples (latency-bounded QPS and power per model and server kind), an inventory (servers of each kind) and a load per model over time, how many servers of each kind to give each model at each step: the integer program (scipy.optimize.milp) against the greedy baseline (after Hercules, Ke et al., HPCA 2022).

At a step with loads L_m, over-provision R:
  minimise   sum_{h,m} N[h,m] * Power[h,m]
  subject to sum_h N[h,m] * QPS[h,m] >= L_m * (1 + R)   for every model m
             sum_m N[h,m] <= N_h                         for every kind h
             N[h,m] integer >= 0
The paper solves a relaxation and does not say how it rounds; this solves the integer program.
Where no allocation serves every load, the step is infeasible: a first program minimises the
load left unserved (per model: the shortfall, reported), a second the power of serving the rest.

Greedy (the baseline of [8, 9] in the paper): each model in turn, in the order given, takes the
available servers of its most efficient kind (QPS per watt) first, then the next, until its
load is served; it never weighs one model's need of a kind against another's.

R from the trace's own history: a high quantile (0.95 by default) of the relative rises of the
models' loads from one step to the next (the load can grow about that much before the next
re-plan).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Tuple:
    """One efficiency tuple: model served on a server kind at its latency-bounded QPS, drawing
    power watts (None where unknown: then the program minimises servers, not watts)."""
    model: str
    kind: str
    qps: float
    power: float | None


class ProvisionError(ValueError):
    """Tuples, inventory or loads that do not describe a problem (a model with no tuple, ...)."""


@dataclass
class Allocation:
    """Servers per (kind, model), the power they draw, and per model the load left unserved."""
    servers: dict          # {(kind, model): n}
    power: float
    shortfall: dict        # {model: QPS not served}; all 0 when feasible
    feasible: bool

    def by_kind(self) -> dict:
        out: dict = {}
        for (h, _), n in self.servers.items():
            out[h] = out.get(h, 0) + n
        return out


class Problem:
    """The tuples and inventory as arrays: kinds (H), models (M), QPS[h, m] and POWER[h, m]
    (nan where a model has no tuple on a kind: it cannot run there), AVAIL[h]."""

    def __init__(self, tuples: list[Tuple], inventory: dict):
        self.kinds = list(inventory)
        self.models = sorted({t.model for t in tuples}, key=[t.model for t in tuples].index)
        if not self.kinds or not self.models:
            raise ProvisionError("an inventory of at least one kind and tuples of at least one model are needed")
        H, M = len(self.kinds), len(self.models)
        self.qps = np.full((H, M), np.nan)
        self.power = np.full((H, M), np.nan)
        watts_known = all(t.power is not None for t in tuples)
        seen = set()
        for t in tuples:
            if (t.model, t.kind) in seen:
                raise ProvisionError(f"two tuples for {t.model} on {t.kind}")
            seen.add((t.model, t.kind))
            if t.kind not in inventory:
                raise ProvisionError(f"tuple for kind {t.kind!r}, which the inventory does not have")
            if not (t.qps > 0 and math.isfinite(t.qps)) or (t.power is not None and not t.power > 0):
                raise ProvisionError(f"tuple {t}: qps and power must be positive")
            h, m = self.kinds.index(t.kind), self.models.index(t.model)
            self.qps[h, m] = t.qps
            self.power[h, m] = t.power if watts_known else 1.0  # no watts known: count servers
        self.watts = watts_known
        self.avail = np.array([int(inventory[k]) for k in self.kinds], float)
        if (self.avail < 0).any():
            raise ProvisionError("inventory counts must be >= 0")

    def _loads(self, loads: dict) -> np.ndarray:
        missing = set(self.models) - set(loads)
        if missing:
            raise ProvisionError(f"no load given for {sorted(missing)}")
        v = np.array([float(loads[m]) for m in self.models])
        if (v < 0).any() or not np.isfinite(v).all():
            raise ProvisionError(f"loads must be finite and >= 0, got {loads}")
        return v

    def _allocation(self, n: np.ndarray, need: np.ndarray) -> Allocation:
        n = np.rint(n).astype(int)
        served = np.nansum(n * np.nan_to_num(self.qps), axis=0)
        short = np.maximum(0.0, need - served)
        short[short < 1e-6 * np.maximum(1.0, need)] = 0.0
        power = float(np.nansum(n * np.nan_to_num(self.power)))
        return Allocation({(self.kinds[h], self.models[m]): int(n[h, m]) for h in range(n.shape[0])
                           for m in range(n.shape[1]) if n[h, m]}, power,
                          {self.models[m]: float(short[m]) for m in range(len(self.models))}, not short.any())

    # ------------------------------------------------------------------ the integer program

    def milp(self, loads: dict, over: float = 0.0) -> Allocation:
        """The least-power integer allocation serving loads * (1 + over); where none serves them
        all, the one leaving the least load unserved (in QPS summed over models), then the least
        power for that."""
        from scipy.optimize import Bounds, LinearConstraint, milp

        need = self._loads(loads) * (1 + over)
        H, M = self.qps.shape
        ok = ~np.isnan(self.qps)
        idx = [(h, m) for h in range(H) for m in range(M) if ok[h, m]]
        nv = len(idx)
        q = np.array([self.qps[h, m] for h, m in idx])
        w = np.array([self.power[h, m] for h, m in idx])
        # variables: N (nv, integer) then slack s_m (M, continuous: load not served)
        A_dem = np.zeros((M, nv + M))
        A_cap = np.zeros((H, nv + M))
        for j, (h, m) in enumerate(idx):
            A_dem[m, j] = q[j]
            A_cap[h, j] = 1.0
        A_dem[np.arange(M), nv + np.arange(M)] = 1.0
        cons = [LinearConstraint(A_dem, need, np.inf), LinearConstraint(A_cap, -np.inf, self.avail)]
        integ = np.r_[np.ones(nv), np.zeros(M)]
        ub = np.r_[[self.avail[h] for h, _ in idx], need]
        bounds = Bounds(np.zeros(nv + M), ub)
        # 1. the least load unserved
        exact = {"mip_rel_gap": 0.0}  # the optimum, not HiGHS's default 1e-4 of it
        r1 = milp(np.r_[np.zeros(nv), np.ones(M)], constraints=cons, integrality=integ, bounds=bounds, options=exact)
        if not r1.success:
            raise ProvisionError(f"the solver failed: {r1.message}")
        short = float(r1.x[nv:].sum())
        # 2. the least power serving all but that: no slack at all when everything can be served
        # (else a hair of it, for the solver's tolerance)
        if short <= 1e-9 * max(1.0, need.sum()):
            bounds = Bounds(np.zeros(nv + M), np.r_[ub[:nv], np.zeros(M)])
            cons2 = cons
        else:
            cons2 = cons + [LinearConstraint(np.r_[np.zeros(nv), np.ones(M)][None, :], -np.inf,
                                             short + 1e-6 * max(1.0, need.sum()))]
        r2 = milp(np.r_[w, np.zeros(M)], constraints=cons2, integrality=integ, bounds=bounds, options=exact)
        if not r2.success:
            raise ProvisionError(f"the solver failed: {r2.message}")
        n = np.zeros((H, M))
        for j, (h, m) in enumerate(idx):
            n[h, m] = r2.x[j]
        return self._allocation(n, need)

    # ------------------------------------------------------------------ greedy

    def greedy(self, loads: dict, over: float = 0.0) -> Allocation:
        """Each model in turn (the order of the tuples) fills its load from its most efficient
        kind (QPS per watt) down, with what the models before it left."""
        need = self._loads(loads) * (1 + over)
        H, M = self.qps.shape
        left = self.avail.copy()
        n = np.zeros((H, M))
        for m in range(M):
            rest = need[m]
            for h in sorted((h for h in range(H) if not np.isnan(self.qps[h, m])),
                            key=lambda h: -self.qps[h, m] / self.power[h, m]):
                if rest <= 0:
                    break
                k = min(left[h], math.ceil(rest / self.qps[h, m] - 1e-9))
                n[h, m] = k
                left[h] -= k
                rest -= k * self.qps[h, m]
        return self._allocation(n, need)


def over_provision(loads: np.ndarray, quantile: float = 0.95) -> float:
    """R from a load history (steps x models): the given quantile of the relative rises of the
    models' loads from one step to the next (falls count as 0; 0 for a history of one step)."""
    if not 0 < quantile <= 1:
        raise ProvisionError(f"quantile must be in (0, 1], got {quantile}")
    a = np.asarray(loads, float)
    if a.ndim == 1:
        a = a[:, None]
    prev, nxt = a[:-1], a[1:]
    with np.errstate(divide="ignore", invalid="ignore"):
        rise = np.where(prev > 0, np.maximum(0.0, (nxt - prev) / prev), 0.0)
    return float(np.quantile(rise, quantile)) if rise.size else 0.0


def plan(problem: Problem, times: np.ndarray, loads: np.ndarray, over: float) -> list[dict]:
    """Both allocations at every step of a trace (loads: steps x models, the problem's order)."""
    out = []
    for t, row in zip(times, loads):
        ld = dict(zip(problem.models, map(float, row)))
        mi, gr = problem.milp(ld, over), problem.greedy(ld, over)
        out.append({"time_s": float(t), "loads": ld, "milp": mi, "greedy": gr})
    return out


# ---------------------------------------------------------------------- the paper's example

# Section III-C: three kinds (CPU-only T2, CPU+NMP T3, CPU+GPU T7) with 70 / 15 / 5 available;
# DLRM-RMC1 (SLA 20 ms) and RMC2 (SLA 50 ms), peaks of 50k QPS each, ranked by QPS/W
# CPU+NMP > CPU+GPU > CPU for both, NMP's gain larger on RMC2. The paper gives no numbers for
# these tuples: the ones below are SYNTHETIC, chosen only to have that shape.
EXAMPLE_INVENTORY = {"cpu": 70, "cpu+nmp": 15, "cpu+gpu": 5}
EXAMPLE_TUPLES = [
    Tuple("rmc1", "cpu", 1000, 250), Tuple("rmc1", "cpu+nmp", 1600, 280), Tuple("rmc1", "cpu+gpu", 4000, 750),
    Tuple("rmc2", "cpu", 900, 250), Tuple("rmc2", "cpu+nmp", 2400, 280), Tuple("rmc2", "cpu+gpu", 3000, 750),
]
EXAMPLE_PEAK = 50_000.0

"""validate.py: the validation phase of a load run: varied inputs through the Python client,
every reply compared with the service's expected output."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from splitrpc.client import Client
from splitrpc.errors import SplitRPCError


@dataclass
class Validation:
    calls: int = 0
    ok: int = 0
    invalid: int = 0
    errors: int = 0
    problems: list[str] = field(default_factory=list)  # the first few, for the report

    @property
    def passed(self) -> bool:
        return self.calls > 0 and self.ok == self.calls

    def as_dict(self) -> dict:
        return {"calls": self.calls, "ok": self.ok, "invalid": self.invalid, "errors": self.errors,
                "passed": self.passed, "problems": self.problems}


def validate(client: Client, service, calls: int = 32, seed: int = 1, keep: int = 5) -> Validation:
    """Calls `service` (a splitrpc.services Service) `calls` times, each with a fresh example
    input, and checks each reply against service.expected(request)."""
    v = Validation()
    rng = np.random.default_rng(seed)
    for i in range(calls):
        req = service.example(rng)
        v.calls += 1
        try:
            reply = client.call(service.func_id, req)
        except SplitRPCError as e:
            v.errors += 1
            if len(v.problems) < keep:
                v.problems.append(f"call {i}: {type(e).__name__}: {e}")
            continue
        want = service.expected(req)
        if reply == want:
            v.ok += 1
        else:
            v.invalid += 1
            if len(v.problems) < keep:
                v.problems.append(f"call {i}: reply of {len(reply)} B differs from the expected {len(want)} B")
    return v

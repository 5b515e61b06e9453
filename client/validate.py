"""validate.py: the validation phase of a load run: varied inputs (or a request set's requests)
through the Python client, every reply compared with the expected output."""
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


def validate_set(client: Client, func_id: int, requests, expects, calls: int = 32, keep: int = 5) -> Validation:
    """Calls func_id `calls` times cycling through a request set's requests (call i sends
    requests[i % len]) and checks each reply against that request's expected reply."""
    if len(requests) == 0 or len(expects) != len(requests):
        raise ValueError("validate_set needs one expected reply per request")
    v = Validation()
    for i in range(calls):
        k = i % len(requests)
        v.calls += 1
        try:
            reply = client.call(func_id, requests[k])
        except SplitRPCError as e:
            v.errors += 1
            if len(v.problems) < keep:
                v.problems.append(f"call {i} (request {k}): {type(e).__name__}: {e}")
            continue
        if reply == bytes(expects[k]):
            v.ok += 1
        else:
            v.invalid += 1
            if len(v.problems) < keep:
                v.problems.append(f"call {i} (request {k}): reply of {len(reply)} B differs from the expected "
                                  f"{len(expects[k])} B")
    return v

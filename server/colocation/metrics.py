"""metrics.py: co-location's Prometheus metrics, by service and for the scheduler, from its stats() (given to Server.add_stats_source with it: /metrics shows them where co-location runs)."""
from __future__ import annotations

from typing import Any, Iterator

from prometheus_client.core import Metric

from splitrpc.metrics import family


def families(c: dict[str, Any], prefix: str) -> Iterator[Metric]:
    """The families of a Colocator.stats() dict: calls, QoS violations and refusals by service;
    groups run, the memory budget and reservation, calls queued."""
    svcs = c["services"]
    for name, key, help_ in (("colocation_calls", "calls", "Calls that reached a co-located service, by service."),
                             ("colocation_qos_violations", "violations",
                              "Calls answered after their service's QoS target."),
                             ("colocation_too_large", "too_large",
                              "Calls refused: their PMC estimate exceeds the budget.")):
        f = family(prefix, "counter", name, help_, ("service",))
        for n, v in svcs.items():
            f.add_metric([str(n)], int(v[key]))
        yield f
    for kind, name, key, help_ in (("counter", "colocation_groups", "groups", "Groups of co-located calls run."),
                                   ("gauge", "colocation_budget_bytes", "budget",
                                    "Memory budget of the co-located services."),
                                   ("gauge", "colocation_reserved_bytes", "reserved",
                                    "Memory reserved by the running group."),
                                   ("gauge", "colocation_queued_calls", "queued", "Calls waiting for a group.")):
        f = family(prefix, kind, name, help_)
        f.add_metric([], int(c[key]))
        yield f

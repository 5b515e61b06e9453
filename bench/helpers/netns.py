"""netns.py: two network namespaces joined by a veth pair, made and removed by the tests and benchmarks of the DPDK transport (needs root, iproute2 and ethtool)."""
from __future__ import annotations

import itertools
import os
import shutil
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass


_pairs = itertools.count()  # names differ between pairs of one process


class NetnsUnavailable(RuntimeError):
    """This machine cannot make the namespaces (not root, tools missing, or refused)."""


@dataclass(frozen=True)
class VethPair:
    a: str        # namespace of the DPDK side: its end has no kernel address
    b: str        # namespace of the kernel side: client_ip/24 on its end
    a_if: str     # interface names
    b_if: str
    client_ip: str

    def exec_argv(self, ns: str, argv: list[str]) -> list[str]:
        """argv run inside namespace ns."""
        return ["ip", "netns", "exec", ns, *argv]


def _run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=30)


def why_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces and veth pairs need root"
    for tool in ("ip", "ethtool"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (iproute2, ethtool)"
    return None


def run_in(ns: str, *cmd: str) -> subprocess.CompletedProcess:
    """Runs a short command inside namespace ns (ip, ethtool...)."""
    return _run("ip", "netns", "exec", ns, *cmd)


@contextmanager
def veth_pair(client_ip: str = "10.99.0.2", tag: str | None = None):
    """Yields a VethPair and removes both namespaces afterwards. The kernel side's transmit
    checksum offload is off: over veth the kernel leaves UDP checksums for a NIC to finish, and
    the DPDK side verifies them. Raises NetnsUnavailable with the reason."""
    why = why_unavailable()
    if why:
        raise NetnsUnavailable(why)
    tag = tag or f"{os.getpid() % 100000}x{next(_pairs)}"
    p = VethPair(f"srpcA{tag}", f"srpcB{tag}", f"sa{tag}", f"sb{tag}", client_ip)
    steps = [("ip", "netns", "add", p.a), ("ip", "netns", "add", p.b),
             ("ip", "link", "add", p.a_if, "type", "veth", "peer", "name", p.b_if),
             ("ip", "link", "set", p.a_if, "netns", p.a), ("ip", "link", "set", p.b_if, "netns", p.b),
             ("ip", "-n", p.a, "link", "set", "lo", "up"), ("ip", "-n", p.a, "link", "set", p.a_if, "up"),
             ("ip", "-n", p.b, "link", "set", "lo", "up"),
             ("ip", "-n", p.b, "addr", "add", f"{client_ip}/24", "dev", p.b_if),
             ("ip", "-n", p.b, "link", "set", p.b_if, "up"),
             ("ip", "netns", "exec", p.b, "ethtool", "-K", p.b_if, "tx", "off")]
    try:
        for step in steps:
            r = _run(*step)
            if r.returncode != 0:
                raise NetnsUnavailable(f"{' '.join(step)}: {r.stderr.strip()}")
        yield p
    finally:
        _run("ip", "netns", "del", p.a)
        _run("ip", "netns", "del", p.b)

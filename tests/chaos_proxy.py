"""chaos_proxy.py: a UDP proxy for end-to-end fault tests: between clients and one server it drops, duplicates, reorders and corrupts datagrams with given probabilities, each direction on its own, from a seed."""
from __future__ import annotations

import random
import select
import socket
import threading
from dataclasses import dataclass, field


@dataclass
class Faults:
    """Probabilities for one direction. corrupt changes one random byte of the 22-byte header
    (XOR with a random nonzero value) after the sender's UDP checksum: the damage a faulty
    middlebox does, which UDP's checksum cannot see. corrupt_data does the same to one random
    byte after the header (offset >= 22: the data, or version 3's data check), counted as
    "data_corrupted"; a datagram of 22 bytes or fewer has none and passes unchanged. With
    corrupt_data 0 no random number is drawn for it, so a seed gives the same faults as before."""
    loss: float = 0.0
    dup: float = 0.0
    reorder: float = 0.0
    corrupt: float = 0.0
    corrupt_data: float = 0.0
    counts: dict = field(default_factory=lambda: {"in": 0, "lost": 0, "dup": 0, "reordered": 0, "corrupted": 0,
                                                  "data_corrupted": 0})


class ChaosProxy:
    """Listens on 127.0.0.1:port; what a client sends there goes to `server` and the replies
    come back, both through their Faults. A reordered datagram is held back and sent after the
    next one of its direction (or after 2 ms with none). Use as a context manager."""

    def __init__(self, server: tuple[str, int], *, to_server: Faults | None = None,
                 to_client: Faults | None = None, seed: int = 0):
        self.server = server
        self.up = to_server or Faults()
        self.down = to_client or Faults()
        self.rng = random.Random(seed)
        self.front = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.front.bind(("127.0.0.1", 0))
        self.port = self.front.getsockname()[1]
        self.back: dict[tuple, socket.socket] = {}  # one socket toward the server per client
        self.held: dict[int, tuple] = {}  # direction id -> (bytes, send, deadline)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-proxy", daemon=True)

    def __enter__(self) -> "ChaosProxy":
        for s in (self.front,):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        for s in [self.front, *self.back.values()]:
            s.close()

    def _pass(self, data: bytes, faults: Faults, send, key: int) -> None:
        rng = self.rng
        faults.counts["in"] += 1
        if rng.random() < faults.loss:
            faults.counts["lost"] += 1
            return
        if data and rng.random() < faults.corrupt:
            b = bytearray(data)
            i = rng.randrange(min(len(b), 22))
            b[i] ^= rng.randrange(1, 256)
            data = bytes(b)
            faults.counts["corrupted"] += 1
        if faults.corrupt_data and len(data) > 22 and rng.random() < faults.corrupt_data:
            b = bytearray(data)
            b[rng.randrange(22, len(b))] ^= rng.randrange(1, 256)
            data = bytes(b)
            faults.counts["data_corrupted"] += 1
        copies = 2 if rng.random() < faults.dup else 1
        faults.counts["dup"] += copies - 1
        if key not in self.held and rng.random() < faults.reorder:
            faults.counts["reordered"] += 1
            self.held[key] = (data, send, copies)
            return
        for _ in range(copies):
            send(data)
        if key in self.held:  # the held one goes after this one: they swapped
            old, old_send, n = self.held.pop(key)
            for _ in range(n):
                old_send(old)

    def _flush_held(self) -> None:
        for key in list(self.held):
            data, send, n = self.held.pop(key)
            for _ in range(n):
                send(data)

    def _run(self) -> None:
        while not self._stop.is_set():
            socks = [self.front, *self.back.values()]
            ready, _, _ = select.select(socks, [], [], 0.002)
            if not ready:
                self._flush_held()
                continue
            for s in ready:
                # what has queued, up to 64 at a time (a select per datagram held the proxy back);
                # MSG_DONTWAIT for the receive only: a send still waits for room, as before
                for _ in range(64):
                    try:
                        data, addr = s.recvfrom(65535, socket.MSG_DONTWAIT)
                    except OSError:  # BlockingIOError included: nothing more queued
                        break
                    self._route(s, data, addr)

    def _route(self, s: socket.socket, data: bytes, addr) -> None:
        """One datagram received on s: from a client (front) toward the server, or back."""
        if s is self.front:
            b = self.back.get(addr)
            if b is None:
                b = self.back[addr] = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
                b.connect(self.server)
            self._pass(data, self.up, b.send, 0)
        else:
            client = next(a for a, b in self.back.items() if b is s)
            self._pass(data, self.down, lambda d, c=client: self.front.sendto(d, c), 1)

"""screenshots.py: the screenshots in docs/operations.md, made again: `splitrpc top` in a real terminal (tmux) while a load runs, and tshark's view of a captured call through the dissector (tools/wireshark/splitrpc.lua), each saved as an SVG.

    python tools/screenshots.py [--out docs/img]     (needs tmux; the tshark one needs tshark and
                                                       capture rights on lo, e.g. root)
"""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.text import Text

import splitrpc
from splitrpc.admin import AdminServer
from splitrpc.services import register_builtin_services

ROOT = Path(__file__).resolve().parents[1]
LUA = ROOT / "tools" / "wireshark" / "splitrpc.lua"


def _svg(ansi: str, path: Path, title: str, width: int) -> None:
    con = Console(record=True, width=width, file=open(os.devnull, "w"), force_terminal=True)
    con.print(Text.from_ansi(ansi.rstrip("\n")))
    con.save_svg(str(path), title=title)
    print(f"wrote {path}")


def _server() -> splitrpc.Server:
    srv = splitrpc.Server("127.0.0.1", 0, wait="block")
    register_builtin_services(srv)

    @srv.function(20, "classify", raw=True, max_request=4096, max_response=16, executor=2)
    def classify(reqs, resps):  # a pooled function, so the executors' rows have something to show
        time.sleep(0.0002)
        return [0 for _ in reqs]

    return srv.start()


def _load(port: int, stop: threading.Event, func: int, data: bytes) -> None:
    with splitrpc.Client("127.0.0.1", port, timeout=5) as c:
        while not stop.is_set():
            c.call(func, data)


def top(out: Path) -> None:
    srv = _server()
    stop = threading.Event()
    with AdminServer(srv, 0) as admin:
        loads = [threading.Thread(target=_load, args=(srv.port, stop, 1, np.zeros(256, np.float32).tobytes())),
                 threading.Thread(target=_load, args=(srv.port, stop, 20, b"x" * 64))]
        for t in loads:
            t.start()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:  # a few damaged datagrams: drops by reason
            for i in range(12):
                s.sendto(b"\xa5\x20" + b"\0" * 20 if i % 2 else b"\0" * 30, ("127.0.0.1", srv.port))
        session = f"shot-{os.getpid()}"
        cmd = f"{sys.executable} -m splitrpc top 127.0.0.1:{admin.port}"
        # from a folder outside the repository: the installed splitrpc, not the source tree's
        subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "110", "-y", "18", "-c",
                        tempfile.gettempdir(), cmd], check=True)
        try:
            time.sleep(4)
            pane = subprocess.run(["tmux", "capture-pane", "-p", "-e", "-t", session], capture_output=True,
                                  text=True, check=True).stdout
        finally:
            subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
            stop.set()
            for t in loads:
                t.join()
    srv.close()
    _svg(pane, out / "top.svg", "splitrpc top (tmux, under load)", 110)


def tshark(out: Path) -> None:
    """A version 2 vecadd call and its reply, captured on lo, decoded by the dissector."""
    srv = _server()
    with tempfile.TemporaryDirectory() as tmp:
        pcap = Path(tmp) / "call.pcapng"
        cap = subprocess.Popen(["dumpcap", "-q", "-i", "lo", "-f", f"udp port {srv.port}", "-w", str(pcap)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(1.0)  # dumpcap opens the device
        with splitrpc.Client("127.0.0.1", srv.port, timeout=5) as c:
            c.describe()
            c.call(1, np.zeros(256, np.float32))
        time.sleep(0.5)
        cap.terminate()
        cap.wait(10)
        srv.close()
        text = subprocess.run(["tshark", "-2", "-r", str(pcap), "-X", f"lua_script:{LUA}", "-O", "splitrpc",
                               "-Y", "splitrpc.func_id == 1"], capture_output=True, text=True, check=True).stdout
    _svg(text, out / "tshark.svg", "tshark -O splitrpc: a vecadd call and its reply", 110)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=str(ROOT / "docs" / "img"))
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if shutil.which("tmux"):
        top(out)
    else:
        print("no tmux: top.svg not made", file=sys.stderr)
    if shutil.which("tshark") and shutil.which("dumpcap"):
        tshark(out)
    else:
        print("no tshark/dumpcap: tshark.svg not made", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

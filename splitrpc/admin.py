"""admin.py: the admin HTTP endpoint of a server (`splitrpc serve --admin-port`): /metrics (prometheus-client, text or OpenMetrics as the scraper asks), /healthz (the engine and worker are alive) and /readyz (serving, not draining, every function loaded).

/healthz and /readyz answer 200 with a one-line JSON body when true and 503 with the same body
when false, as Kubernetes probes expect; the body says the server's state and calls pending.
"""
from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from prometheus_client.exposition import choose_encoder

from splitrpc.metrics import registry_for

if TYPE_CHECKING:
    from splitrpc.server import Server

ROUTES = ("/metrics", "/healthz", "/readyz")


class AdminServer:
    """Serves ROUTES for a splitrpc.Server (or several: `servers`, a list, where one process
    serves several; healthy and ready when all are) on host:port from a thread of its own (port
    0 picks one, see .port). Anything else is 404. A context manager, or call close()."""

    def __init__(self, server: Server | list[Server] | tuple[Server, ...], port: int, host: str = "127.0.0.1") -> None:
        servers = list(server) if isinstance(server, (list, tuple)) else [server]
        registry = registry_for(servers[0]) if len(servers) == 1 else None

        def state() -> dict[str, Any]:
            return {"state": ",".join(sorted({s.state for s in servers})),
                    "pending": sum(s.pending() for s in servers)}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server API
                path = self.path.split("?", 1)[0]
                try:
                    if path == "/metrics":
                        if registry is None:
                            self._send(404, b"one server per admin endpoint serves /metrics\n", "text/plain")
                            return
                        encoder, ctype = choose_encoder(self.headers.get("Accept", ""))
                        self._send(200, encoder(registry), ctype)
                    elif path in ("/healthz", "/readyz"):
                        ok = all(s.healthy() if path == "/healthz" else s.ready() for s in servers)
                        body = json.dumps({"ok": ok, **state()}).encode() + b"\n"
                        self._send(200 if ok else 503, body, "application/json")
                    else:
                        self._send(404, f"not found; routes: {' '.join(ROUTES)}\n".encode(), "text/plain")
                except Exception as e:  # noqa: BLE001 - a closed server: say so, keep serving
                    self._send(503, f"unavailable: {type(e).__name__}: {e}\n".encode(), "text/plain")

            def _send(self, code: int, body: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:  # quiet: the access log is not ours to print
                pass

        cls: type[ThreadingHTTPServer] = ThreadingHTTPServer
        if ":" in host:  # an IPv6 address (::1)
            cls = type("ThreadingHTTPServer6", (ThreadingHTTPServer,), {"address_family": socket.AF_INET6})
        self._http = cls((host, port), Handler)
        self._http.daemon_threads = True
        self.host, self.port = host, self._http.server_address[1]
        self._thread = threading.Thread(target=self._http.serve_forever, name="splitrpc-admin", daemon=True)
        self._thread.start()

    def url(self, route: str = "") -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{route}"

    def close(self) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._thread.join()

    def __enter__(self) -> "AdminServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

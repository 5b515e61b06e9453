"""fake_admin.py MODE PORT: a hostile 'admin endpoint' on 127.0.0.1:PORT.
hang: accepts, never answers. garbage: HTTP 200 with junk /metrics. notihttp: answers non-HTTP bytes.
deepjson: valid splitrpc-looking /metrics, /readyz a 100000-deep JSON array. drip: 1 byte/s forever.
badlabels: /metrics with executor_threads lacking the lane label. nan: counters NaN/Inf/negative."""
import socket, sys, threading, time
mode, port = sys.argv[1], int(sys.argv[2])
M = b"# TYPE splitrpc_rx_datagrams_total counter\nsplitrpc_rx_datagrams_total 5\n"
bodies = {
    "garbage": b"\x00\xff this is { not prometheus\n\n}}}",
    "badlabels": M + b"splitrpc_executor_threads{function=\"f\"} 2\nsplitrpc_function_calls_total{function=\"f\",x=\"y\"} 3\n",
    "nan": M + b"splitrpc_calls_total NaN\nsplitrpc_drops_total{reason=\"crc\"} +Inf\nsplitrpc_errors_total{code=\"BUSY\"} -5\n"
           b"splitrpc_executor_threads{function=\"f\",lane=\"\"} 0\nsplitrpc_function_calls_total{function=\"f\"} 1e308\n"
           b"splitrpc_function_batch_size_count{function=\"f\"} NaN\nsplitrpc_host_cpus NaN\n",
    "deepjson": M,
}
def serve(c):
    try:
        if mode == "hang":
            time.sleep(3600)
        req = c.recv(4096)
        if mode == "nothttp":
            c.sendall(b"SSH-2.0-OpenSSH_9.0\r\n" + b"x" * 100); c.close(); return
        if mode == "drip":
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n")
            while True:
                c.sendall(b"#"); time.sleep(1)
        body = bodies[mode]
        if mode == "deepjson" and b"/readyz" in req:
            body = b"[" * 100000 + b"]" * 100000
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        c.close()
    except OSError:
        pass
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", port)); s.listen(16)
while True:
    c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()

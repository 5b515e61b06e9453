"""raw_udp.py: the C baselines that the benchmarks set splitrpc against: the raw-UDP echo server with ping-pong and closed-loop clients (no header, no processing: the kernel socket path's limit), the minimal single-threaded server of the protocol (min_serve: the protocol's own limit), and a closed-loop client of the protocol over many sockets (multi_closed_loop: cost as clients grow). The public face of splitrpc._native.raw."""
from splitrpc._native.raw import StopFlag, closed_loop, echo_serve, min_serve, multi_closed_loop, pingpong

__all__ = ["echo_serve", "pingpong", "closed_loop", "min_serve", "StopFlag", "multi_closed_loop"]

"""raw_udp.py: the raw-UDP baseline in C (a plain echo server, ping-pong and closed-loop clients, no header and no processing): the kernel socket path's limit that the benchmarks set splitrpc against. The public face of splitrpc._native.raw."""
from splitrpc._native.raw import closed_loop, echo_serve, pingpong

__all__ = ["echo_serve", "pingpong", "closed_loop"]

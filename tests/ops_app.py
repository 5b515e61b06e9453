"""ops_app.py: a user's server module for the operations tests (`splitrpc serve ops_app:server`): a tensor function, a raw one and a slow one, registered the way a user would, and the other shapes MODULE:ATTR may take."""
import threading
import time

import numpy as np

import splitrpc
from splitrpc import TensorSpec

server = splitrpc.Server("127.0.0.1", 0, wait="block")
RELEASE = threading.Event()  # the "stuck" function waits for this (never set by the CLI tests)


@server.function(200, "scale", [TensorSpec("x", "float32", (8,)), TensorSpec("k", "int64", (2,))],
                 [TensorSpec("y", "float32", (8,)), TensorSpec("n", "int64", (1,))], max_batch=16, version="2026-11")
def scale(x, k, y, n):
    """y = x * 2, n = the sum of k: a function with two inputs and two outputs of different types."""
    time.sleep(0.002)  # some work per batch, so a drain has calls in the queue
    np.multiply(x, 2, out=y)
    n[:, 0] = k.sum(axis=1)


@server.function(201, "upper", raw=True, max_request=4096, max_response=4096)
def upper(requests, responses):
    out = []
    for r, w in zip(requests, responses):
        b = bytes(r).upper()
        w[:len(b)] = b
        out.append(len(b))
    return out


@server.function(202, "stuck", [TensorSpec("x", "float32", (1,))], [TensorSpec("y", "float32", (1,))], max_batch=1)
def stuck(x, y):
    RELEASE.wait(60)
    y[:] = x


def make_server():
    """A factory: MODULE:ATTR may name a function returning a Server."""
    return server


def setup(srv):
    """A setup function: MODULE:ATTR may name a function taking the Server to register on."""
    srv.add_function(scale, 200, "scale", [TensorSpec("x", "float32", (8,)), TensorSpec("k", "int64", (2,))],
                     [TensorSpec("y", "float32", (8,)), TensorSpec("n", "int64", (1,))], max_batch=16)


not_a_server = 42

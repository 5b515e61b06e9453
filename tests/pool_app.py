"""pool_app.py: a replica for the Pool tests (`splitrpc serve pool_app:server`): "work" takes 16 float32 and answers them + 1 after POOL_APP_SLEEP_MS milliseconds per batch (a replica's capacity), with a queue of POOL_APP_CAPACITY calls (BUSY past it)."""
import os
import time

import numpy as np

import splitrpc
from splitrpc import TensorSpec

SLEEP_S = float(os.environ.get("POOL_APP_SLEEP_MS", "1")) / 1e3
CAPACITY = int(os.environ.get("POOL_APP_CAPACITY", "32"))
MAX_BATCH = int(os.environ.get("POOL_APP_MAX_BATCH", "4"))

server = splitrpc.Server("127.0.0.1", 0, wait="block")


@server.function(300, "work", [TensorSpec("x", "float32", (16,))], [TensorSpec("y", "float32", (16,))],
                 max_batch=MAX_BATCH, capacity=CAPACITY, max_delay_us=0)
def work(x, y):
    time.sleep(SLEEP_S)
    np.add(x, 1, out=y)

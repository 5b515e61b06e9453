"""stand_in.py: a timed stand-in model for fleet experiments (`splitrpc serve splitrpc.services.fleet.stand_in:setup`): "work" takes 16 float32 and answers them + 1, sleeping FLEET_APP_BATCH_MS per batch of up to FLEET_APP_MAX_BATCH calls, with a queue of FLEET_APP_CAPACITY calls (BUSY past it) (after Hercules, Ke et al., HPCA 2022).

EMULATED: the sleep stands for a model's compute (as on an accelerator: the CPU idles), so a
replica's capacity is about FLEET_APP_MAX_BATCH * 1000 / FLEET_APP_BATCH_MS calls/s however many
replicas share this machine's cores. Server kinds of different capacity are simulated by giving
each kind other settings; nothing here measures a real model.
"""
import os
import time

import numpy as np

from splitrpc import TensorSpec

WORK_ID = 300


def setup(server) -> None:
    """Registers "work" on server, with the settings of the environment (read now)."""
    batch_s = float(os.environ.get("FLEET_APP_BATCH_MS", "2")) / 1e3
    max_batch = int(os.environ.get("FLEET_APP_MAX_BATCH", "4"))
    capacity = int(os.environ.get("FLEET_APP_CAPACITY", "64"))

    @server.function(WORK_ID, "work", [TensorSpec("x", "float32", (16,))], [TensorSpec("y", "float32", (16,))],
                     max_batch=max_batch, capacity=capacity, max_delay_us=0)
    def work(x, y):
        time.sleep(batch_s)
        np.add(x, 1, out=y)

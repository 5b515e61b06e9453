"""gpu.py (binding layer): the cffi half of splitrpc.gpu: device probes, the driver's last error, the O2 kernel's start and stop, and a GPU batch's stage-in and submits."""
from __future__ import annotations

from splitrpc._native import EBUSY, ffi, lib, text
from splitrpc.errors import GPUError, GPUUnavailable


def last_error() -> str:
    """Why the last GPU call of this thread failed ("" when none did)."""
    return text(lib.srpc_gpu_last_error(), "replace")


def init(ordinal: int) -> bool:
    """Loads the CUDA driver (once) and checks that device `ordinal` exists."""
    return lib.srpc_gpu_init(ordinal) == 0


def device_count() -> int:
    """CUDA devices the driver sees; -errno (-ENODEV) without a driver."""
    return lib.srpc_gpu_device_count()


def device_name(ordinal: int) -> str:
    buf = ffi.new("char[]", 256)
    if lib.srpc_gpu_device_name(ordinal, buf, 256) != 0:
        raise GPUUnavailable(last_error())
    return text(buf)


def o2_start(ordinal: int, n_floats: int):
    """Launches the persistent vecadd kernel on cuda:ordinal; returns its srpc_o2_t handle."""
    out = ffi.new("srpc_o2_t **")
    rc = lib.srpc_o2_start(ordinal, n_floats, out)
    if rc != 0:
        raise GPUError(f"cannot start the O2 kernel on cuda:{ordinal} ({rc}): {last_error()}")
    return out[0]


def o2_stop(o2) -> None:
    """Serves what was submitted, ends the kernel and frees it."""
    if lib.srpc_o2_stop(o2) != 0:
        raise GPUError(f"stopping the O2 kernel failed: {last_error()}")


def device_pointers(b, n_in: int, n_out: int) -> tuple[list, list]:
    """The device addresses of a GPU batch's first input and output elements (din, dout)."""
    return [b.din[k] for k in range(n_in)], [b.dout[k] for k in range(n_out)]


def stage_in(srv, b, stream: int) -> None:
    """Queues on `stream` the batch's requests' copies from host staging to the device Tensor Queues."""
    rc = lib.srpc_server_stage_in(srv, b, stream)
    if rc != 0:
        raise GPUError(f"staging the batch in failed ({rc}): {last_error()}")


def submit(srv, b, stream: int) -> None:
    """Queues on `stream`, after the callback's work, the outputs' copies back and the batch's
    done word, and hands the batch back in flight."""
    rc = lib.srpc_server_submit(srv, b, stream)
    if rc != 0:
        raise GPUError(f"queueing the replies failed ({rc}): {last_error()}")


def submit_o2(srv, b, o2, stream: int) -> None:
    """Hands the batch to the O2 kernel (after stage_in on `stream`), waiting while its ring is full."""
    rc = lib.srpc_server_submit_o2(srv, b, o2, stream)
    while rc == -EBUSY:  # the kernel's ring is full: it frees slots on its own
        lib.srpc_server_poll(srv)
        rc = lib.srpc_server_submit_o2(srv, b, o2, stream)
    if rc != 0:
        raise GPUError(f"handing the batch to the O2 kernel failed ({rc}): {last_error()}")

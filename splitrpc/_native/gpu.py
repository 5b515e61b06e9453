"""gpu.py (binding layer): the cffi half of splitrpc.gpu: device probes and facts, the driver's last error, the O2 kernel's start and stop, a GPU batch's stage-in and submits, and device Tensor Queues, pinned buffers, copies and flags of their own (for splitrpc check)."""
from __future__ import annotations

from splitrpc._native import EBUSY, ENODEV, ffi, lib, text
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


# ------------------------------------------------------------------ what a device offers (splitrpc check)


def kernel_archs() -> str:
    """What the embedded kernels were compiled for ("sm_80 sm_90 compute_90"; "" without them)."""
    return text(lib.srpc_gpu_kernel_archs())


def device_info(ordinal: int) -> dict:
    """srpc_gpu_device_info as a dict (-1: the driver cannot say; 0 bytes: unknown). Raises
    GPUUnavailable without a driver or device, GPUError when the driver fails the query."""
    info = ffi.new("srpc_gpu_info_t *")
    rc = lib.srpc_gpu_device_info(ordinal, info)
    if rc != 0:
        raise (GPUUnavailable if rc == -ENODEV else GPUError)(f"cuda:{ordinal}: {last_error()}")
    d = {f: getattr(info, f) for f in ("driver_version", "cc_major", "cc_minor", "multiprocessors", "total_memory",
                                       "vmm", "granularity", "map_host_memory", "unified_addressing",
                                       "host_register", "stream_memops", "memops_v2", "gpudirect_rdma",
                                       "pci_domain", "pci_bus", "pci_device")}
    d["name"] = text(info.name, "replace")
    return d


def mem_info(ordinal: int) -> tuple[int, int]:
    """(free, total) bytes of device memory now."""
    free, total = ffi.new("uint64_t *"), ffi.new("uint64_t *")
    rc = lib.srpc_gpu_mem_info(ordinal, free, total)
    if rc != 0:
        raise GPUError(f"cuda:{ordinal} memory: {last_error()}")
    return int(free[0]), int(total[0])


def _ok(rc: int, what: str) -> None:
    if rc != 0:
        raise GPUError(f"{what} ({rc}): {last_error()}")


class DeviceQueue:
    """A device Tensor Queue of its own (srpc_dtq_*), for probing the double mapping outside a
    server: create, element addresses, the mirror self-test, destroy. Owned by its creator."""

    def __init__(self, ordinal: int, elem_size: int, capacity: int):
        out = ffi.new("srpc_dtq_t **")
        _ok(lib.srpc_dtq_create(ordinal, elem_size, capacity, out), f"srpc_dtq_create(cuda:{ordinal}, {elem_size} B x {capacity})")
        self._q = out[0]
        self.base = int(lib.srpc_dtq_base(self._q))
        self.ring_bytes = int(lib.srpc_dtq_ring_bytes(self._q))
        self.elem_size, self.capacity = elem_size, capacity

    def elem(self, seq: int) -> int:
        return int(lib.srpc_dtq_elem(self._q, seq))

    def check_mirror(self) -> None:
        """The GPU self-test of the double mapping; GPUError when a byte differs or it cannot run."""
        _ok(lib.srpc_dtq_check_mirror(self._q), "the mirror self-test")

    def close(self) -> None:
        if self._q is not None:
            lib.srpc_dtq_destroy(self._q)
            self._q = None


class PinnedBuffer:
    """Pinned, device-mapped host memory (srpc_gpu_host_alloc): .host (a writable memoryview),
    .dev (its device address), .ptr (its host address); free with close()."""

    def __init__(self, nbytes: int):
        host, dev = ffi.new("void **"), ffi.new("uint64_t *")
        _ok(lib.srpc_gpu_host_alloc(nbytes, host, dev), f"srpc_gpu_host_alloc({nbytes} B)")
        self._p, self.dev, self.nbytes = host[0], int(dev[0]), nbytes
        self.ptr = int(ffi.cast("uintptr_t", self._p))
        self.host = memoryview(ffi.buffer(self._p, nbytes))

    def close(self) -> None:
        if self._p is not None:
            self.host.release()
            lib.srpc_gpu_host_free(self._p)
            self._p = None


def copy_htod(dst: int, src: PinnedBuffer, offset: int, nbytes: int, stream: int = 0) -> None:
    _ok(lib.srpc_gpu_copy_htod(dst, ffi.cast("void *", src.ptr + offset), nbytes, stream), "cuMemcpyHtoDAsync")


def copy_dtoh(dst: PinnedBuffer, offset: int, src: int, nbytes: int, stream: int = 0) -> None:
    _ok(lib.srpc_gpu_copy_dtoh(ffi.cast("void *", dst.ptr + offset), src, nbytes, stream), "cuMemcpyDtoHAsync")


def stream_sync(stream: int = 0) -> None:
    """Waits for the stream's work, SRPC_GPU_WAIT_TIMEOUT_MS at most (GPUError then)."""
    _ok(lib.srpc_gpu_stream_sync(stream), "waiting for the stream")


def signal(stream: int, flag: PinnedBuffer, index: int, by_store: bool, value: int) -> None:
    """Makes 32-bit word `index` of `flag` become `value` after the stream's queued work: by a
    stream store (cuStreamWriteValue32, where the device has them) or by a host function."""
    p = ffi.cast("uint32_t *", flag.ptr) + index
    _ok(lib.srpc_gpu_signal(stream, p, flag.dev + 4 * index if by_store else 0, value), "srpc_gpu_signal")


def live() -> dict:
    """What this process holds of the driver through the library (srpc_gpu_live): dtqs,
    host_allocs, host_registrations, streams, o2_kernels."""
    out = ffi.new("srpc_gpu_live_t *")
    lib.srpc_gpu_live(out)
    return {f: getattr(out, f) for f in ("dtqs", "host_allocs", "host_registrations", "streams", "o2_kernels")}

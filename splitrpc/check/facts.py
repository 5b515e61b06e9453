"""facts.py: the first two sections of `splitrpc check`: what was built (kernels and their architectures, DPDK, sanitizers, the Python packages around it) and what the machine offers (driver, device, VMM, stream memory operations, host memory registration, a GPUDirect-capable NIC)."""
from __future__ import annotations

import os
import platform
from typing import Any

import splitrpc
from splitrpc import gpu
from splitrpc.check.probes import EMULATED_LABEL, driver_emulated
from splitrpc.check.section import Context, Failed, Result, Section

_GIB = 1 << 30


def _module_version(name: str) -> dict[str, Any]:
    """{"version", and what else matters of it} for an optional package; {"missing": why} if absent."""
    try:
        mod = __import__(name)
    except Exception as e:  # noqa: BLE001 - a broken install is reported, not raised
        return {"missing": f"{type(e).__name__}: {e}"}
    out: dict[str, Any] = {"version": getattr(mod, "__version__", "?")}
    if getattr(mod, "EMULATED", False):
        out["emulated"] = True
    if name == "torch":
        out["cuda"] = mod.version.cuda  # None for a CPU build
        out["cuda_available"] = bool(mod.cuda.is_available())
    if name == "cupy" and not out.get("emulated"):
        try:  # the CUDA runtime CuPy was built for (it needs no GPU to say)
            v = int(mod.cuda.runtime.runtimeGetVersion())
            out["cuda_runtime"] = f"{v // 1000}.{v % 1000 // 10}"
        except Exception as e:  # noqa: BLE001 - reported, not raised
            out["cuda_runtime"] = f"unknown ({type(e).__name__})"
    return out


def _package_text(name: str, v: dict[str, Any]) -> str:
    if "missing" in v:
        return f"{name} not installed"
    text = name if v["version"] == "?" else f"{name} {v['version']}"
    if v.get("emulated"):
        text += f" ({EMULATED_LABEL}: the tests' stand-in)"
    if name == "torch":
        text += f" (CUDA {v['cuda']}{', no device' if not v['cuda_available'] else ''})" if v["cuda"] else " (CPU build)"
    if v.get("cuda_runtime"):
        text += f" (CUDA runtime {v['cuda_runtime']})"
    return text


def run_build(ctx: Context) -> Result:
    feats = splitrpc.features()
    archs = gpu.kernel_archs()
    if feats["cuda"] and not archs:
        raise Failed("the build says CUDA kernels are compiled in but names no architecture")
    if archs and not feats["cuda"]:
        raise Failed(f"kernel architectures {archs!r} without the CUDA feature")
    pkgs = {n: _module_version(n) for n in ("numpy", "cupy", "torch")}
    facts = {"version": splitrpc.__version__, "features": feats, "kernel_archs": archs,
             "python": platform.python_version(), "packages": pkgs}
    kernels = f"kernels {archs}" if archs else "no CUDA kernels (built without nvcc: O2 and the mirror self-test say ENOTSUP)"
    md = [f"- splitrpc {splitrpc.__version__}, Python {platform.python_version()}",
          f"- CUDA kernels: {archs or 'not compiled in (no CUDA compiler at build time)'}; the data path loads "
          "libcuda.so.1 at run time (no CUDA link)",
          f"- DPDK transport: {'compiled in' if feats['dpdk'] else 'not compiled in'}; sanitizers: "
          f"{'yes' if feats['sanitizers'] else 'no'}; fault injection: {'yes' if feats['fault_injection'] else 'no'}",
          "- " + ", ".join(_package_text(n, v) for n, v in pkgs.items())]
    return Result(summary=f"splitrpc {splitrpc.__version__}; {kernels}; DPDK {'yes' if feats['dpdk'] else 'no'}; "
                          + ", ".join(_package_text(n, v) for n, v in pkgs.items()),
                  facts=facts, markdown=md)


# ------------------------------------------------------------------ the machine


def _rdma_nics() -> list[dict[str, str]]:
    """The RDMA devices the kernel lists (/sys/class/infiniband), each with its PCI address."""
    root = "/sys/class/infiniband"
    nics: list[dict[str, str]] = []
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return nics
    for n in names:
        pci = os.path.basename(os.path.realpath(os.path.join(root, n, "device")))
        nics.append({"name": n, "pci": pci})
    return nics


def _peer_memory_module() -> str | None:
    """The loaded kernel module that lets a NIC DMA into GPU memory, if any."""
    for m in ("nvidia_peermem", "nv_peer_mem"):
        if os.path.isdir(f"/sys/module/{m}"):
            return m
    return None


def gpudirect(info: dict[str, Any] | None) -> dict[str, Any]:
    """Whether a NIC could write GPU memory directly: the device's GPUDirect RDMA attribute, the
    RDMA NICs, and the peer-memory module."""
    nics, mod = _rdma_nics(), _peer_memory_module()
    dev = info["gpudirect_rdma"] if info else None
    capable = bool(nics) and mod is not None and dev == 1
    if capable:
        why = f"{', '.join(n['name'] for n in nics)} with {mod}"
    elif not nics:
        why = "no RDMA NIC (/sys/class/infiniband is empty or absent)"
    elif mod is None:
        why = f"RDMA NICs {', '.join(n['name'] for n in nics)}, but no peer-memory module (nvidia_peermem) loaded"
    else:
        why = "the GPU does not report GPUDirect RDMA support"
    return {"capable": capable, "why": why, "rdma_nics": nics, "peer_memory_module": mod, "device_attribute": dev}


def _version(v: int) -> str:
    """cuDriverGetVersion's number as text: 13000 -> "13.0"."""
    return f"{v // 1000}.{v % 1000 // 10}"


def _yes(v: int) -> str:
    return {1: "yes", 0: "no"}.get(v, "unknown")


def _cc_has_code(archs: str, cc: int) -> bool:
    """Whether kernels built for `archs` load on compute capability cc (e.g. 90): SASS of the same
    major version and no newer minor, or PTX of an older or equal architecture."""
    for a in archs.split():
        kind, _, num = a.partition("_")
        digits = int("".join(ch for ch in num if ch.isdigit()) or 0)
        if kind == "sm" and digits // 10 == cc // 10 and digits <= cc:
            return True
        if kind == "compute" and digits <= cc:
            return True
    return False


def device_line(info: dict[str, Any] | None, ordinal: int, emulated: bool, reason: str = "") -> str:
    """The report's first line: which device ran the check."""
    if info is None:
        return f"Device: none: no GPU ({reason})"
    mem = f", {info['total_memory'] / _GIB:.1f} GiB" if info["total_memory"] else ""
    sms = f", {info['multiprocessors']} SMs" if info["multiprocessors"] > 0 else ""
    text = (f"{info['name']} (cuda:{ordinal}, compute capability {info['cc_major']}.{info['cc_minor']}{sms}{mem}), "
            f"CUDA driver {_version(info['driver_version'])}")
    if emulated:
        return (f"Device: {EMULATED_LABEL}: {text}, the tests' emulated libcuda.so.1 "
                "(native/tests/fake_libcuda.c): nothing here ran on a GPU")
    return f"Device: {text}"


def run_machine(ctx: Context) -> Result:
    ordinal = gpu.parse_device(ctx.device)
    usable = ordinal >= 0 and gpu.available(ordinal)
    reason = "" if usable else (gpu.last_error() or "no CUDA driver") if ordinal >= 0 else "--device cpu"
    count = gpu.device_count()
    info = gpu.device_info(ordinal) if usable else None
    emulated = driver_emulated()
    gd = gpudirect(info)
    facts = {"device": ctx.device, "usable": usable, "reason": reason, "device_count": count,
             "info": info, "emulated": emulated, "gpudirect": gd, "kernel_archs": gpu.kernel_archs(),
             "line": device_line(info, ordinal, emulated, reason)}
    md = [f"- {facts['line']}"]
    if info is None:
        md.append(f"- GPUDirect-capable NIC: {'yes' if gd['capable'] else 'no'} ({gd['why']})")
        return Result(summary=f"no GPU: {reason}", facts=facts, markdown=md)
    others = [gpu.device_name(i) for i in range(count) if i != ordinal]
    gran = f", granularity {info['granularity'] // 1024} KiB" if info["granularity"] else ""
    memops = ("yes: cuStreamWriteValue32 (v2 entry points)" if info["stream_memops"] and info["memops_v2"]
              else "yes: cuStreamWriteValue32 (v1, CAN_USE_STREAM_MEM_OPS)" if info["stream_memops"]
              else "no: completion flags are set by host functions (cuLaunchHostFunc)")
    md += [f"- devices: {count}" + (f" (the others: {', '.join(others)})" if others else ""),
           f"- virtual memory management (device Tensor Queues): {_yes(info['vmm'])}{gran}",
           f"- stream memory operations: {memops}",
           f"- host memory registration: {_yes(info['host_register'])}; mapped pinned host memory: "
           f"{_yes(info['map_host_memory'])}; unified addressing: {_yes(info['unified_addressing'])}",
           f"- GPUDirect RDMA on the GPU: {_yes(info['gpudirect_rdma'])}; GPUDirect-capable NIC: "
           f"{'yes' if gd['capable'] else 'no'} ({gd['why']})",
           f"- PCI {info['pci_domain']:04x}:{info['pci_bus']:02x}:{info['pci_device']:02x}"
           if min(info["pci_domain"], info["pci_bus"], info["pci_device"]) >= 0 else "- PCI address: unknown"]
    cc = 10 * info["cc_major"] + info["cc_minor"]
    archs = gpu.kernel_archs()
    if archs and not _cc_has_code(archs, cc):
        raise Failed(f"the kernels were built for {archs}, which has no code for this GPU's compute capability "
                     f"{info['cc_major']}.{info['cc_minor']} (rebuild with -C cmake.define.SPLITRPC_CUDA_ARCHS={cc})")
    if info["vmm"] != 1:
        raise Failed(f"{info['name']} has no virtual memory management: device Tensor Queues cannot be double-mapped")
    summary = (f"{EMULATED_LABEL} " if emulated else "") + (
        f"{info['name']}, CC {info['cc_major']}.{info['cc_minor']}, driver {_version(info['driver_version'])}, "
        f"VMM {_yes(info['vmm'])}{gran}, stream memory ops {_yes(info['stream_memops'])}, host registration "
        f"{_yes(info['host_register'])}, GPUDirect NIC {'yes' if gd['capable'] else 'no'}")
    return Result(summary=summary, facts=facts, markdown=md)


SECTIONS = [
    Section("build", "what was built: CUDA kernels and their architectures, DPDK, sanitizers, CuPy, PyTorch",
            run_build, cap_s=20, stage="facts", tier="core"),
    Section("machine", "what the machine offers: driver, device, VMM, stream memory operations, host registration, "
            "GPUDirect NIC", run_machine, cap_s=10, stage="facts", tier="core"),
]

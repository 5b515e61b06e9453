"""check: `splitrpc check`, the self-test of an installed splitrpc: what was built, what the machine offers, and every path it can exercise (host, device Tensor Queues, device callbacks in O1 / O1 + CUDA graph / O2, the GPU tests), each section passed, failed or skipped with its reason; `--bench` adds trimmed benchmarks. Sections of plug-ins come from the `splitrpc.check` entry point group (registry.py)."""
from splitrpc.check.section import FAILED, PASSED, SKIPPED, Context, Failed, Result, Section, Skipped, expect

__all__ = ["FAILED", "PASSED", "SKIPPED", "Context", "Failed", "Result", "Section", "Skipped", "expect"]

"""check: `splitrpc check`, the self-test of an installed splitrpc: what was built, what the machine offers, and every path it can exercise (host, device Tensor Queues, device callbacks in O1 / O1 + CUDA graph / O2, the GPU tests), each section passed, failed, skipped or cut with its reason; `--bench` adds trimmed benchmarks. The capabilities' sections come from each one's Capability.check_sections() (registry.py)."""
from splitrpc.check.section import (CUT, FAILED, PASSED, SKIPPED, Context, Cut, Failed, Result, Section, Skipped, done,
                                    expect)

__all__ = ["CUT", "FAILED", "PASSED", "SKIPPED", "Context", "Cut", "Failed", "Result", "Section", "Skipped", "done",
           "expect"]

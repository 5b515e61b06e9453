"""wire.py: the C message codec of docs/PROTOCOL.md (control header, segmenting, reassembly) and the host Tensor Queue, as prepared native calls, for tests, micro-benchmarks and tools that must time or check exactly the C code. The public face of splitrpc._native.wire: see it for each object's contract."""
from splitrpc._native.wire import (ERROR, HDR_LEN, HEADER_FIELDS, PROTOCOLS, REQUEST, RESPONSE, Crc32c, Header,
                                   HostTensorQueue, Reassembler, Segments, decode)

__all__ = ["HDR_LEN", "PROTOCOLS", "REQUEST", "RESPONSE", "ERROR", "HEADER_FIELDS", "Header", "decode", "Segments",
           "Reassembler", "HostTensorQueue", "Crc32c"]

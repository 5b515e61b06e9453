"""wire.py (binding layer): the C message codec (control header, segmenting, reassembly) and the host Tensor Queue as prepared native calls, so that micro-benchmarks and tools time exactly the C call.

Each object holds its cffi structs and buffers; a `*_call` attribute is (C function, *args),
run as ``fn(*args)`` with nothing in between, and the other methods read the results back as
Python values.
"""
from __future__ import annotations

import errno
from typing import Callable

import numpy as np

from splitrpc._native import check, ffi, lib
from splitrpc.errors import NativeError

HDR_LEN = lib.SRPC_HDR_LEN
PROTOCOLS = (lib.SRPC_VERSION, lib.SRPC_VERSION_2, lib.SRPC_VERSION_3)  # the wire versions this build speaks
REQUEST, RESPONSE, ERROR = lib.SRPC_REQUEST, lib.SRPC_RESPONSE, lib.SRPC_ERROR
HEADER_FIELDS = ("type", "version", "func_id", "req_id", "seq", "nseg", "msg_len", "aux")


def _fields(h, keys) -> dict:
    return {k: getattr(h, k) for k in (keys or HEADER_FIELDS)}


class Header:
    """One decoded header (srpc_hdr_t, from `fields`) and one 22-byte wire header (from `data`)."""

    def __init__(self, fields: dict | None = None, data: bytes | None = None):
        self.hdr = ffi.new("srpc_hdr_t *", fields or {})
        self.buf = ffi.new("uint8_t[]", bytes(data)) if data is not None else ffi.new("uint8_t[]", HDR_LEN)
        self.encode_call = (lib.srpc_hdr_encode, self.hdr, self.buf)              # fields -> wire bytes
        self.decode_call = (lib.srpc_hdr_decode, self.buf, len(self.buf), self.hdr)  # wire bytes -> fields

    def encode(self) -> int:
        """srpc_hdr_encode: 0 or -errno."""
        return lib.srpc_hdr_encode(self.hdr, self.buf)

    def decode(self) -> int:
        """srpc_hdr_decode: 0 or -errno."""
        return lib.srpc_hdr_decode(self.buf, len(self.buf), self.hdr)

    def wire(self) -> bytes:
        return ffi.buffer(self.buf)[:]

    def fields(self, keys=None) -> dict:
        return _fields(self.hdr, keys)

    def check16(self) -> int:
        """The version 2 header check of the wire header (srpc_hdr_check16)."""
        return lib.srpc_hdr_check16(self.buf)


def decode(dgram: bytes, keys=None) -> tuple[int, dict]:
    """srpc_hdr_decode of a whole datagram: (0 or -errno, the header's fields)."""
    h = ffi.new("srpc_hdr_t *")
    rc = lib.srpc_hdr_decode(ffi.from_buffer(dgram), len(dgram), h)
    return rc, _fields(h, keys)


class Segments:
    """A message cut into datagrams by srpc_msg_segment, back to back in one buffer: `call`
    does the cutting; `template` gives type, func_id, req_id, version, aux."""

    def __init__(self, message: bytes, seg_size: int, template: dict):
        version = template.get("version") or lib.SRPC_VERSION
        self.count = lib.srpc_seg_count(len(message), lib.srpc_seg_data_max(version, seg_size))
        check = lib.SRPC_DATA_CHECK_LEN if version == lib.SRPC_VERSION_3 else 0
        self.cap = len(message) + self.count * (HDR_LEN + check)
        self.out = ffi.new("uint8_t[]", self.cap)
        self.lens = ffi.new("uint32_t[]", self.count)
        self.tmpl = ffi.new("srpc_hdr_t *", template)
        self._message = message
        self._src = ffi.from_buffer(message)
        self.call = (lib.srpc_msg_segment, self.tmpl, self._src, len(message), seg_size, self.out, self.cap,
                     self.lens, self.count)

    def segment(self) -> int:
        """Cuts the message: the count of datagrams, or -errno."""
        fn, *args = self.call
        return fn(*args)

    def lengths(self) -> list[int]:
        return [self.lens[i] for i in range(self.count)]

    def datagrams(self) -> list[bytes]:
        """Each datagram's bytes (header and data), after segment()."""
        raw, off, out = ffi.buffer(self.out), 0, []
        for n in self.lengths():
            out.append(raw[off:off + n])
            off += n
        return out

    def _pointers(self) -> list:
        out, off = [], 0
        for n in self.lengths():
            out.append((self.out + off, n))
            off += n
        return out


class Crc32c:
    """Version 3's data check (srpc_crc32c, docs/PROTOCOL-v3.md) of `data`: `call` computes it
    (the CPU's instruction where present), `tables()` the same by tables alone."""

    def __init__(self, data: bytes):
        self._data = data
        self._buf = ffi.from_buffer(data)
        self.call = (lib.srpc_crc32c, 0, self._buf, len(data))

    def tables(self) -> int:
        return lib.srpc_crc32c_tables(0, self._buf, len(self._data))

    @staticmethod
    def hardware() -> bool:
        """True when srpc_crc32c uses the CPU's CRC instruction."""
        return bool(lib.srpc_crc32c_hardware())


class Reassembler:
    """A srpc_reassembler_t for messages of up to max_msg bytes; close() frees it."""

    def __init__(self, max_msg: int):
        out = ffi.new("srpc_reassembler_t **")
        check(lib.srpc_reassembler_create(max_msg, out), "srpc_reassembler_create")
        self._r = out[0]

    def close(self) -> None:
        if self._r is not None:
            lib.srpc_reassembler_destroy(self._r)
            self._r = None

    def push(self, dgram: bytes) -> int:
        """srpc_reassembler_push: 1 complete, 0 more needed, or -errno."""
        return lib.srpc_reassembler_push(self._r, ffi.from_buffer(dgram), len(dgram))

    def reset(self) -> None:
        lib.srpc_reassembler_reset(self._r)

    def round(self, segments: Segments) -> Callable[[], list]:
        """A function that resets the reassembler and pushes every datagram of `segments` (after
        their segment()) from their buffer, returning each push's code: one reassembly, with
        the native calls bound to locals."""
        push, reset, r = lib.srpc_reassembler_push, lib.srpc_reassembler_reset, self._r
        dgrams = segments._pointers()

        def reassemble():
            reset(r)  # the previous round's message; its buffer is reused
            return [push(r, p, n) for p, n in dgrams]

        return reassemble

    def message(self, keys=None) -> tuple[bytes | None, dict]:
        """The completed message's bytes (None while none is complete) and its header's fields."""
        h, n = ffi.new("srpc_hdr_t *"), ffi.new("uint32_t *")
        m = lib.srpc_reassembler_message(self._r, h, n)
        return (None if m == ffi.NULL else ffi.buffer(m, n[0])[:]), _fields(h, keys)


class HostTensorQueue:
    """A host Tensor Queue (srpc_tq_t): `capacity` elements of `elem_size` bytes, mapped twice so
    that any run of consecutive elements is contiguous; close() frees it."""

    def __init__(self, elem_size: int, capacity: int):
        out = ffi.new("srpc_tq_t **")
        check(lib.srpc_tq_create(elem_size, capacity, out), "srpc_tq_create")
        self._tq = out[0]
        self.elem_size = elem_size

    def close(self) -> None:
        if self._tq is not None:
            lib.srpc_tq_destroy(self._tq)
            self._tq = None

    @property
    def ring_bytes(self) -> int:
        return lib.srpc_tq_ring_bytes(self._tq)

    @property
    def base(self) -> int:
        """The address of the ring's lower mapping."""
        return int(ffi.cast("uintptr_t", lib.srpc_tq_base(self._tq)))

    def elem(self, seq: int) -> int:
        """The address of element seq (in the lower mapping)."""
        return int(ffi.cast("uintptr_t", lib.srpc_tq_elem(self._tq, seq)))

    def batch_former(self, first: int, rows: np.ndarray) -> Callable[[], np.ndarray]:
        """A function that scatters each row of `rows` (one request each, elem_size bytes) into
        elements first, first + 1, ... as the server does for every call, then returns the
        (len(rows), ...) numpy view of those elements the worker hands a function (no copy)."""
        count, elem, dtype, shape = len(rows), self.elem_size, rows.dtype, rows.shape[1:]
        tq = self._tq
        tqs = ffi.new("srpc_tq_t *[1]", [tq])
        sizes = ffi.new("uint32_t[1]", [elem])
        ptrs = [ffi.from_buffer(rows[i]) for i in range(count)]
        scatter, tq_elem = lib.srpc_tq_scatter, lib.srpc_tq_elem

        def form_batch():
            for i, p in enumerate(ptrs):
                if scatter(tqs, sizes, 1, first + i, p, elem):
                    raise NativeError(errno.EINVAL, "srpc_tq_scatter failed")
            buf = ffi.buffer(tq_elem(tq, first), count * elem)
            return np.frombuffer(buf, dtype=dtype).reshape(count, *shape)

        return form_batch

"""Host Tensor Queue (srpc_tq_*): page-rounded ring size, the double mapping, and contiguous runs across the ring end."""
import errno
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from splitrpc._native import ffi, lib

PAGE = os.sysconf("SC_PAGE_SIZE")


def round_up(n: int, to: int) -> int:
    return -(-n // to) * to


def addr(p) -> int:
    return int(ffi.cast("uintptr_t", p))


@pytest.fixture
def make_tq():
    made = []

    def make(elem_size: int, capacity: int):
        out = ffi.new("srpc_tq_t **")
        rc = lib.srpc_tq_create(elem_size, capacity, out)
        assert rc == 0, rc
        made.append(out[0])
        return out[0]

    try:
        yield make
    finally:
        for tq in made:
            lib.srpc_tq_destroy(tq)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3 * PAGE), st.integers(1, 40))
def test_ring_bytes_is_capacity_times_elem_rounded_to_pages(elem, cap):
    out = ffi.new("srpc_tq_t **")
    assert lib.srpc_tq_create(elem, cap, out) == 0
    tq = out[0]
    try:
        ring = lib.srpc_tq_ring_bytes(tq)
        assert ring == round_up(elem * cap, PAGE)
        assert lib.srpc_tq_elem_size(tq) == elem and lib.srpc_tq_capacity(tq) == cap
        assert addr(lib.srpc_tq_base(tq)) % PAGE == 0
        assert addr(lib.srpc_tq_elem(tq, 0)) == addr(lib.srpc_tq_base(tq))
        for seq in (1, cap - 1, cap, 2 * cap + 1, 2**40 + 3, 2**64 - 1):
            assert addr(lib.srpc_tq_elem(tq, seq)) == addr(lib.srpc_tq_base(tq)) + (seq * elem) % ring
    finally:
        lib.srpc_tq_destroy(tq)


@pytest.mark.parametrize("elem,cap", [(1000, 3), (1000, 5), (602112, 3), (1024, 5), (24, 7)])
def test_ring_is_not_lcm_sized(make_tq, elem, cap):
    tq = make_tq(elem, cap)
    assert lib.srpc_tq_ring_bytes(tq) == round_up(elem * cap, PAGE)
    if elem == 1000 and cap == 3 and PAGE == 4096:
        assert lib.srpc_tq_ring_bytes(tq) == 4096  # lcm(1000, 4096) would be 512000


@pytest.mark.parametrize("elem,cap", [(1000, 3), (4096, 2), (24, 7)])
def test_upper_and_lower_mappings_alias(make_tq, elem, cap):
    tq = make_tq(elem, cap)
    ring = lib.srpc_tq_ring_bytes(tq)
    base = lib.srpc_tq_base(tq)
    both = np.frombuffer(ffi.buffer(base, 2 * ring), dtype=np.uint8)
    lower, upper = both[:ring], both[ring:]
    rng = np.random.default_rng(7)

    a = rng.integers(0, 256, ring, dtype=np.uint8)
    upper[:] = a  # written through base + ring_bytes + off ...
    assert np.array_equal(lower, a)  # ... read through base + off
    b = rng.integers(0, 256, ring, dtype=np.uint8)
    lower[:] = b
    assert np.array_equal(upper, b)
    for off in (0, 1, ring // 2, ring - 1):
        lower[off] = 0x5A
        assert upper[off] == 0x5A
        upper[off] = 0xA5
        assert lower[off] == 0xA5


@pytest.mark.parametrize("elem", [1024, 1000, 602112])
def test_any_run_of_capacity_elements_is_one_contiguous_array(make_tq, elem):
    cap = 3 if elem > PAGE * 8 else 5
    tq = make_tq(elem, cap)
    ring = lib.srpc_tq_ring_bytes(tq)
    base = addr(lib.srpc_tq_base(tq))
    for first in range(2 * cap):
        want = np.empty((cap, elem), dtype=np.uint8)
        for i in range(cap):
            seq = first + i
            row = np.frombuffer(ffi.buffer(lib.srpc_tq_elem(tq, seq), elem), dtype=np.uint8)
            # a different, position-dependent pattern per element and per run
            val = (np.arange(elem, dtype=np.uint32) * (seq + 3) + first * 31 + i) % 251
            row[:] = val.astype(np.uint8)
            want[i] = row
        p = lib.srpc_tq_elem(tq, first)
        assert base <= addr(p) < base + ring
        assert addr(p) + cap * elem <= base + 2 * ring  # the run fits in the two mappings
        run = np.frombuffer(ffi.buffer(p, cap * elem), dtype=np.uint8).reshape(cap, elem)
        assert np.array_equal(run, want), f"run starting at seq {first}"


def test_a_run_that_wraps_really_crosses_the_ring_end(make_tq):
    cap, elem = 4, PAGE  # ring_bytes == cap * elem exactly: seq cap-1.. wraps
    tq = make_tq(elem, cap)
    ring = lib.srpc_tq_ring_bytes(tq)
    assert ring == cap * elem
    base = addr(lib.srpc_tq_base(tq))
    first = cap - 1
    assert addr(lib.srpc_tq_elem(tq, first)) == base + (cap - 1) * elem
    assert addr(lib.srpc_tq_elem(tq, first + 1)) == base  # element cap lives at offset 0 ...
    for i in range(cap):
        ffi.buffer(lib.srpc_tq_elem(tq, first + i), elem)[:] = bytes([i + 1]) * elem
    run = np.frombuffer(ffi.buffer(lib.srpc_tq_elem(tq, first), cap * elem), dtype=np.uint8)
    # ... and is read, through the upper mapping, right behind element cap-1
    assert [int(run[i * elem]) for i in range(cap)] == [1, 2, 3, 4]
    assert all(np.all(run[i * elem:(i + 1) * elem] == i + 1) for i in range(cap))


@pytest.mark.parametrize("elem,cap", [(0, 4), (16, 0), (0, 0)])
def test_invalid_sizes_are_einval(elem, cap):
    out = ffi.new("srpc_tq_t **")
    assert lib.srpc_tq_create(elem, cap, out) == -errno.EINVAL


def test_null_out_is_einval():
    assert lib.srpc_tq_create(16, 4, ffi.NULL) == -errno.EINVAL


def test_overflowing_size_fails_cleanly():
    out = ffi.new("srpc_tq_t **")
    rc = lib.srpc_tq_create(2**63, 4, out)  # 2**65 bytes: the size itself overflows
    assert rc in (-errno.EOVERFLOW, -errno.ENOMEM, -errno.EINVAL)
    assert out[0] == ffi.NULL


def test_destroy_null_is_a_no_op():
    lib.srpc_tq_destroy(ffi.NULL)

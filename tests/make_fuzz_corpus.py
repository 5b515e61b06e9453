"""make_fuzz_corpus.py: writes the seed corpus of the libFuzzer harness (native/fuzz/fuzz_datagrams.c) into tests/fuzz_corpus/: valid calls, multi-segment messages in and out of order, duplicates, errors and near-misses, in its record format."""
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import wire_ref  # noqa: E402  the reference encoder of both protocol versions


def hdr(typ, func, req, seq, nseg, msg_len, aux=0, version=1):
    return wire_ref.encode(typ, func, req, seq, nseg, msg_len, aux, version=version)


def flipped(b, i, x=0x10):
    d = bytearray(b)
    d[i] ^= x
    return bytes(d)


def rec(op, dgram):
    return struct.pack(">BH", op, len(dgram)) + dgram


def segments(func, req, data, s, order=None, version=1):
    """Request datagrams of data cut at s data bytes (version 3: each with its data check)."""
    n = max(1, -(-len(data) // s))
    idx = order if order is not None else range(n)
    out = [hdr(0, func, req, i, n, len(data), version=version) + data[i * s:(i + 1) * s] for i in idx]
    return [wire_ref.add_data_check(d) for d in out] if version == 3 else out


def v3(typ, func, req, data, aux=0):
    """One whole version 3 datagram (docs/PROTOCOL-v3.md): header, data, data check."""
    return wire_ref.add_data_check(hdr(typ, func, req, 0, 1, len(data), aux, version=3) + data)


def main(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    vec = bytes(range(256)) * 4
    big = bytes((i * 7) & 0xFF for i in range(200000))
    seeds = {
        "vecadd": rec(4, hdr(0, 1, 1, 0, 1, 1024) + vec),
        "vecadd_dup_then_drain": rec(0, hdr(0, 1, 2, 0, 1, 1024) + vec) + rec(1, hdr(0, 1, 2, 0, 1, 1024) + vec)
        + rec(4, hdr(0, 1, 2, 0, 1, 1024) + vec),
        "raw_echo": rec(4, hdr(0, 3, 3, 0, 1, 5) + b"hello") + rec(12, hdr(0, 3, 4, 0, 1, 0)),
        "unknown_function": rec(4, hdr(0, 77, 5, 0, 1, 3) + b"abc"),
        "wrong_size": rec(4, hdr(0, 1, 6, 0, 1, 10) + b"0123456789"),
        "response_to_server": rec(0, hdr(1, 1, 7, 0, 1, 0)),
        "big_in_order": b"".join(rec(0, d) for d in segments(5, 8, big, 1400)) + rec(4, b""),
        "big_reversed_partial": b"".join(rec(1, d) for d in segments(5, 9, big, 8000, order=range(24, 0, -1)))
        + rec(16, b""),
        "big_inconsistent": rec(0, segments(5, 10, big, 1400)[0]) + rec(0, hdr(0, 5, 10, 1, 143, 200000) + b"x" * 900),
        "short_and_bad_magic": rec(0, b"\xa5\x10") + rec(0, b"\x00" * 22) + rec(0, hdr(0, 1, 11, 0, 0, 0)),
        "seq_past_nseg": rec(0, hdr(0, 1, 12, 3, 2, 2048) + vec),
        "two_clients_same_id": rec(0, hdr(0, 1, 13, 0, 1, 1024) + vec) + rec(2, hdr(0, 1, 13, 0, 1, 1024) + vec)
        + rec(4, b""),
        "v2_vecadd": rec(4, hdr(0, 1, 14, 0, 1, 1024, version=2) + vec),
        "v2_and_v1_same_id": rec(0, hdr(0, 1, 15, 0, 1, 1024, version=2) + vec) + rec(0, hdr(0, 1, 15, 0, 1, 1024) + vec)
        + rec(4, b""),
        "v2_damaged_seq": rec(0, flipped(segments(5, 16, big, 1400, version=2)[3], 13, 0x01)) + rec(4, b""),
        "v2_big_in_order": b"".join(rec(0, d) for d in segments(5, 17, big, 1400, version=2)) + rec(4, b""),
        # version 3: a right call, one with a data byte changed (dropped) then its good copy, a damaged
        # segment of a big message then the rest in order, a datagram too short for its check, and the
        # same req_id in versions 2 and 3 (two calls)
        "v3_vecadd": rec(4, v3(0, 1, 100, vec)),
        "v3_damaged_then_good": rec(0, flipped(v3(0, 1, 101, vec), 22 + 500)) + rec(4, v3(0, 1, 101, vec)),
        "v3_big_damaged_segment": rec(0, flipped(segments(5, 102, big, 8000, version=3)[2], 22 + 7)) + b"".join(
            rec(0, d) for d in segments(5, 102, big, 8000, version=3)) + rec(4, b""),
        "v3_short_and_v2_same_id": rec(0, hdr(0, 1, 103, 0, 1, 0, version=3) + b"\x01\x02")
        + rec(0, v3(0, 1, 104, vec)) + rec(0, hdr(0, 1, 104, 0, 1, 1024, version=2) + vec) + rec(4, b""),
        # admission costs (keys of F_VEC: two int32 at byte 0; F_BIG: one int64 at byte 8; F_RAW: aux),
        # batches bounded by cost, deferred and finished (op & 64)
        "cost_keys_deferred": b"".join(rec(0, hdr(0, 1, 18 + i, 0, 1, 1024) + struct.pack("<ii", k0, k1) + vec[8:])
                                       for i, (k0, k1) in enumerate([(1, 2), (30, 20), (5, 5), (49, 0), (-1, 3)]))
        + rec(4 | 64, b""),
        "raw_aux_deferred": rec(0, hdr(0, 3, 23, 0, 1, 5, aux=500) + b"hello") + rec(4 | 64 | 32, b""),
        "aux_classes": b"".join(rec(i & 3, hdr(0, 7, 30 + i, 0, 1, 16, aux=a) + bytes(range(16)))
                                for i, a in enumerate([0, 1, 2, 9, 65535, 1])) + rec(4 | 64, b"") + rec(4 | 32, b""),
        "big_key": b"".join(rec(0, d) for d in segments(5, 24, big[:8] + struct.pack("<q", 7) + big[16:], 8000))
        + rec(4 | 64, b""),
        # F_LIST: a raw list of int32 keys to the end (a GNN seed list): none, some, a bad one, a ragged end
        "key_lists": b"".join(rec(i & 3, hdr(0, 9, 40 + i, 0, 1, len(p)) + p) for i, p in enumerate(
            [b"", struct.pack("<3i", 1, 2, 49), struct.pack("<2i", 3, 50), struct.pack("<i", 4) + b"xy"]))
        + rec(4 | 32, b""),
        # F_COST (11): classes by cost (int32 keys to the end, bounds 20 and 60): one-segment calls of each
        # class, a bad key, a ragged end, and multi-segment requests (one per class, one bad, one out of order)
        "cost_classes": b"".join(rec(i & 3, hdr(0, 11, 70 + i, 0, 1, len(p)) + p) for i, p in enumerate(
            [struct.pack("<2i", 1, 2), struct.pack("<2i", 10, 15), struct.pack("<3i", 40, 30, 49), b"",
             struct.pack("<2i", 3, 50), struct.pack("<i", 4) + b"xy"]))
        + b"".join(rec(1, d) for d in segments(11, 80, struct.pack("<2000i", *([0] * 2000)), 1400))
        + b"".join(rec(2, d) for d in segments(11, 81, struct.pack("<2000i", *([1] * 30 + [0] * 1970)), 1400,
                                                 order=range(5, -1, -1)))
        + b"".join(rec(3, d) for d in segments(11, 82, struct.pack("<2000i", *([49] * 2000)), 1400))
        + b"".join(rec(0, d) for d in segments(11, 83, struct.pack("<2000i", *([7] * 1999 + [99])), 1400))
        + rec(4 | 64, b"") + rec(4 | 32, b""),
        # F_SPILL (13): F_COST's classes, class 0 spilling at 1 call not yet answered, class 1 at 2
        "cost_class_spill": b"".join(rec(i & 3, hdr(0, 13, 90 + i, 0, 1, len(p)) + p) for i, p in enumerate(
            [struct.pack("<i", 1), struct.pack("<i", 2), struct.pack("<i", 3), struct.pack("<2i", 10, 15),
             struct.pack("<2i", 10, 15), struct.pack("<2i", 10, 15), struct.pack("<3i", 40, 30, 49)]))
        + rec(4 | 64, b"") + rec(0, hdr(0, 13, 99, 0, 1, 4) + struct.pack("<i", 1)) + rec(4, b""),
        # the server functions of Amendment 1 (ping 0xFFFF, describe 0xFFFE: raw, requests of up to 64 B):
        # good and bad requests, an oversize one, a reserved id not defined
        "server_functions": rec(0, hdr(0, 0xFFFF, 50, 0, 1, 9) + b"SRPC-PING")
        + rec(1, hdr(0, 0xFFFE, 51, 0, 1, 13) + b"SRPC-DESCRIBE") + rec(2, hdr(0, 0xFFFE, 52, 0, 1, 65) + bytes(65))
        + rec(3, hdr(0, 0xFF00, 53, 0, 1, 9) + b"SRPC-PING") + rec(0, hdr(0, 0xFFFF, 54, 0, 1, 0)) + rec(4 | 32, b""),
        # a drain (op & 128): a call queued before it, a multi-segment one half received, then new calls
        # (DRAINING), a duplicate of the queued one, the rest of the half-received one; drain off again
        "drain": rec(0, hdr(0, 1, 60, 0, 1, 1024) + vec) + rec(1, segments(5, 61, big, 8000)[0])
        + rec(128, b"") + rec(2, hdr(0, 1, 62, 0, 1, 1024) + vec) + rec(3, hdr(0, 0xFFFF, 63, 0, 1, 9) + b"SRPC-PING")
        + rec(0, hdr(0, 1, 60, 0, 1, 1024) + vec) + b"".join(rec(1, d) for d in segments(5, 61, big, 8000)[1:])
        + rec(4 | 128, b"") + rec(4, hdr(0, 1, 64, 0, 1, 1024) + vec),
    }
    for name, blob in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(blob)
    print(f"wrote {len(seeds)} seeds to {out}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "fuzz_corpus"))

"""auth.py (binding layer): version 4's keys in C (docs/PROTOCOL-v4.md): whether libsodium is there, a server's key table built from splitrpc.KeyTable and handed to the server, a sealed datagram for tests and tools."""
from __future__ import annotations

from typing import Iterable

from splitrpc._native import ENOTSUP, check, ffi, lib
from splitrpc.errors import AuthUnavailable, NativeError

SECRET_LEN = lib.SRPC_AUTH_SECRET_LEN
TAG_LEN = lib.SRPC_AUTH_TAG_LEN
TRAILER_LEN = lib.SRPC_AUTH_TRAILER_LEN
VERSION = lib.SRPC_VERSION_4  # signed datagrams (legacy: docs/PROTOCOL-v4.md's limits)
SESSIONS = lib.SRPC_VERSION_5  # sessions (docs/PROTOCOL-v5.md): a keyed client's default
MAX_KEYS = lib.SRPC_AUTH_MAX_KEYS

_NO_LIBRARY = ("authenticated calls need libsodium's shared library (Debian and Ubuntu: apt-get install "
               "libsodium23; Fedora: dnf install libsodium), which was not found")


def available() -> bool:
    """Whether libsodium could be loaded (the C core loads it at first use)."""
    return lib.srpc_auth_available() == 0


def library() -> str | None:
    """The name or path libsodium was loaded from (loading it now), or None without one."""
    p = lib.srpc_auth_library()
    return None if p == ffi.NULL else ffi.string(p).decode("utf-8", "replace")


# Version 5's suites by name, fastest first, with their INIT flag bits (ChaCha20-Poly1305: none, always there).
SUITES = {"aegis-128l": lib.SRPC_AUTH_SUITE_AEGIS, "aes-256-gcm": lib.SRPC_AUTH_SUITE_AES, "chacha20-poly1305": 0}


def suites() -> list[str]:
    """The AEADs of version 5 this process can use, fastest first: "aegis-128l" (libsodium 1.0.19 on,
    AES-NI), "aes-256-gcm" (AES-NI and PCLMULQDQ), "chacha20-poly1305" (always, with libsodium);
    empty without libsodium. A server grants the first of these that the client offers."""
    if not available():
        return []
    mask = lib.srpc_auth_v5_suites()
    return [name for name, bit in SUITES.items() if not bit or mask & bit]


def suite_mask(names) -> int:
    """The flag bits of suite names (SUITES) a client offers; ValueError for a name not there, or a
    list without "chacha20-poly1305" (every peer has it: the one a client cannot refuse)."""
    names = list(names)
    bad = [n for n in names if n not in SUITES]
    if bad or "chacha20-poly1305" not in names:
        raise ValueError(f"suites: some of {', '.join(SUITES)}, chacha20-poly1305 among them; got {names!r}")
    mask = 0
    for n in names:
        mask |= SUITES[n]
    return mask


def require() -> None:
    """Raises AuthUnavailable without libsodium."""
    if not available():
        raise AuthUnavailable(_NO_LIBRARY)


def build_table(keys: Iterable[tuple[int, bytes, int, list[int] | None]], *, skew_ms: int = 0,
                max_senders: int = 0, legacy_v4: bool = False):
    """A srpc_keytab_t of keys given as (id, secret, expires_ms or 0, function ids or None for all);
    0: the C core's default skew and senders per key (native/src/core/tunables.h). The caller hands
    it to a server (set_keys) or frees it (free_table)."""
    require()
    out = ffi.new("srpc_keytab_t **")
    check(lib.srpc_keytab_create(max_senders, skew_ms, out), "srpc_keytab_create")
    t = out[0]
    try:
        check(lib.srpc_keytab_legacy_v4(t, int(legacy_v4)), "srpc_keytab_legacy_v4")
        for key_id, secret, expires_ms, funcs in keys:
            ids = ffi.new("uint16_t[]", list(funcs or [])) if funcs is not None else ffi.NULL
            check(lib.srpc_keytab_add(t, key_id, secret, len(secret), expires_ms, int(funcs is None), ids,
                                      len(funcs or [])), f"key {key_id}")
    except BaseException:
        lib.srpc_keytab_destroy(t)
        raise
    return t


def free_table(t) -> None:
    lib.srpc_keytab_destroy(t)


def set_keys(srv, t) -> None:
    """srpc_server_set_keys: the server owns t from here on, also when this raises."""
    rc = lib.srpc_server_set_keys(srv, t)
    if rc == -ENOTSUP:
        raise NativeError(ENOTSUP, "authenticated calls are not built for this transport (DPDK) yet")
    check(rc, "srpc_server_set_keys")


def seal(key_id: int, secret: bytes, datagram: bytes) -> bytes:
    """The datagram (a version 4 header and its data) with its trailer, signed by a fresh sender
    of key key_id (srpc_auth_seal): for tests and tools. splitrpc's own senders sign in C."""
    require()
    s = ffi.new("srpc_auth_sender_t *")
    check(lib.srpc_auth_sender_init(s, key_id, secret, len(secret)), "srpc_auth_sender_init")
    buf = ffi.new("uint8_t[]", len(datagram) + TRAILER_LEN)
    ffi.memmove(buf, datagram, len(datagram))
    n = check(lib.srpc_auth_seal(s, buf, len(datagram), len(buf)), "srpc_auth_seal")
    return ffi.buffer(buf, n)[:]


def tag_ok(secret: bytes, datagram: bytes) -> bool:
    """Whether the version 4 datagram's tag is right for secret (srpc_auth_tag_ok)."""
    require()
    return check(lib.srpc_auth_tag_ok(secret, datagram, len(datagram)), "srpc_auth_tag_ok") == 1


class TagCheck:
    """A version 4 datagram of `data` (a header and data bytes) sealed with key 1 of `secret`:
    `call` checks its tag (srpc_auth_tag_ok: one keyed BLAKE2b over it), as a server does for
    each datagram; for micro-benchmarks."""

    def __init__(self, secret: bytes, data: bytes):
        self.datagram = seal(1, secret, data)
        self._secret = ffi.new("uint8_t[]", secret)
        self._buf = ffi.from_buffer(self.datagram)
        self.call = (lib.srpc_auth_tag_ok, self._secret, self._buf, len(self.datagram))

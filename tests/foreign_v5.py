"""foreign_v5.py: protocol version 5 (sessions) written from docs/PROTOCOL-v5.md alone: the handshake, the session keys, data datagrams and the server's small answers, over hashlib's BLAKE2b, the `cryptography` package's X25519, ChaCha20-Poly1305 (RFC 7748, RFC 8439) and AES-256-GCM (the AES suite), and PyNaCl's AEGIS-128L (the AEGIS suite: a 32-byte tag split around the session and counter)."""
import hashlib
import hmac
import os
import time

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat, PrivateFormat, NoEncryption
from nacl.bindings import crypto_aead_aegis128l_decrypt, crypto_aead_aegis128l_encrypt
from nacl.exceptions import CryptoError

from foreign_client import HDR, pack, unpack

VERSION = 5
REQUEST, RESPONSE, ERROR, INIT, ACCEPT, COOKIE, NO_SESSION = range(7)
HDR_LEN = 22
INIT_BODY, ACCEPT_BODY, COOKIE_BODY, NO_SESSION_BODY = 104, 64, 44, 8
INIT_MAC1 = HDR_LEN + 72           # an INIT's mac1: what a COOKIE is bound to
TRAILER = 32                       # session 8, counter 8, tag 16
AEGIS_EXTRA = 16                   # an AEGIS-128L datagram's first 16 tag bytes, before the trailer
FLAG_ENCRYPT = 1
FLAG_AES = 2
FLAG_AEGIS = 4
FLAGS_KNOWN = FLAG_ENCRYPT | FLAG_AES | FLAG_AEGIS
WINDOW = 1024


def h(key: bytes | None, msg: bytes, n: int) -> bytes:
    """BLAKE2b with a digest of n bytes, keyed with key (None: unkeyed)."""
    return hashlib.blake2b(msg, key=key or b"", digest_size=n).digest()


def x25519_public(priv: bytes) -> bytes:
    return X25519PrivateKey.from_private_bytes(priv).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def x25519(priv: bytes, pub: bytes) -> bytes:
    """The shared secret; ValueError for a peer key whose result is all zero (a low-order point)."""
    return X25519PrivateKey.from_private_bytes(priv).exchange(X25519PublicKey.from_public_bytes(pub))


def mac1_key(psk: bytes) -> bytes:
    return h(psk, b"splitrpc v5 mac1", 32)


def cookie_key(psk: bytes) -> bytes:
    return h(psk, b"splitrpc v5 cookie", 32)


def header(typ: int, func_id: int, req_id: int, msg_len: int, seq: int = 0, nseg: int = 1, aux: int = 0) -> bytes:
    return pack(VERSION, typ, func_id, req_id, seq, nseg, msg_len, aux)


def make_init(psk: bytes, key_id: int, e_priv: bytes, hs_id: int, time_ms: int | None = None,
              flags: int = 0, cookie: bytes | None = None, prev: "Session | None" = None) -> bytes:
    """The 126-byte INIT: header, key_id, e_c, time, flags, prev_session, resume, mac1, cookie_mac.
    prev: the session this one follows (its calls go on under the new one)."""
    t = int(time.time() * 1000) if time_ms is None else time_ms
    d = header(INIT, 0, hs_id, INIT_BODY) + key_id.to_bytes(4, "big") + x25519_public(e_priv) + \
        t.to_bytes(8, "big") + flags.to_bytes(4, "big") + (prev.id if prev else 0).to_bytes(8, "big")
    d += h(prev.k_c2s, b"splitrpc v5 resume" + d, 16) if prev else bytes(16)
    d += h(mac1_key(psk), d, 16)
    return d + (h(cookie, d, 16) if cookie else bytes(16))


class Session:
    """One side's keys of a session: k_c2s, k_s2c, its id, whether it encrypts, its suite (aes: AES-256-GCM,
    aegis: AEGIS-128L, neither: ChaCha20-Poly1305)."""

    def __init__(self, session_id: int, k_c2s: bytes, k_s2c: bytes, encrypt: bool, aes: bool = False,
                 aegis: bool = False):
        self.id, self.k_c2s, self.k_s2c, self.encrypt, self.aes = session_id, k_c2s, k_s2c, encrypt, aes
        self.aegis = aegis
        self.sent = 0            # this side's counter (the last used)
        self.seen: set = set()   # counters taken from the other side (a test's window: a set)
        self.top = 0


def derive(psk: bytes, dh: bytes, th: bytes) -> tuple[bytes, bytes, bytes]:
    prk = h(psk, b"splitrpc v5 prk" + dh + th, 32)
    return h(prk, b"splitrpc v5 c2s", 32), h(prk, b"splitrpc v5 s2c", 32), h(prk, b"splitrpc v5 confirm", 32)


def make_accept(psk: bytes, init: bytes, e_priv: bytes, session_id: int, flags: int) -> tuple[bytes, Session]:
    """The server's 86-byte ACCEPT of a checked INIT, and its session (flags as given: a test may grant what
    the INIT did not offer, to see a client drop it)."""
    fields = unpack(init, VERSION)
    key_id = init[HDR_LEN:HDR_LEN + 4]
    e_c = init[HDR_LEN + 4:HDR_LEN + 36]
    d = header(ACCEPT, 0, fields[3], ACCEPT_BODY) + key_id + session_id.to_bytes(8, "big") + \
        x25519_public(e_priv) + flags.to_bytes(4, "big")
    th = h(None, init + d, 32)
    k_c2s, k_s2c, k_conf = derive(psk, x25519(e_priv, e_c), th)
    return d + h(k_conf, th, 16), Session(session_id, k_c2s, k_s2c, bool(flags & FLAG_ENCRYPT), bool(flags & FLAG_AES),
                                          bool(flags & FLAG_AEGIS))


def open_accept(psk: bytes, init: bytes, e_priv: bytes, accept: bytes) -> Session | None:
    """The client's session from the server's ACCEPT of its INIT, or None when it is not one."""
    if len(accept) != HDR_LEN + ACCEPT_BODY:
        return None
    f = unpack(accept, VERSION)
    fi = unpack(init, VERSION)
    if f is None or f[0] != 0xA5 or f[1] != (VERSION << 4 | ACCEPT) or f[3] != fi[3] or f[6] != ACCEPT_BODY or \
            accept[HDR_LEN:HDR_LEN + 4] != init[HDR_LEN:HDR_LEN + 4]:
        return None
    session_id = int.from_bytes(accept[HDR_LEN + 4:HDR_LEN + 12], "big")
    e_s = accept[HDR_LEN + 12:HDR_LEN + 44]
    flags = int.from_bytes(accept[HDR_LEN + 44:HDR_LEN + 48], "big")
    th = h(None, init + accept[:HDR_LEN + 48], 32)
    try:
        k_c2s, k_s2c, k_conf = derive(psk, x25519(e_priv, e_s), th)
    except ValueError:
        return None
    if session_id == 0 or not hmac.compare_digest(h(k_conf, th, 16), accept[-16:]):
        return None
    offered = int.from_bytes(init[HDR_LEN + 44:HDR_LEN + 48], "big")
    if flags & ~FLAGS_KNOWN or flags & (FLAG_AES | FLAG_AEGIS) & ~offered:
        return None  # bits the page does not define; AES-256-GCM or AEGIS-128L only where the INIT offered it
    if flags & FLAG_AES and flags & FLAG_AEGIS:
        return None  # never both suites
    return Session(session_id, k_c2s, k_s2c, bool(flags & FLAG_ENCRYPT), bool(flags & FLAG_AES),
                   bool(flags & FLAG_AEGIS))


def _aead(s: Session, key: bytes):
    return AESGCM(key) if s.aes else ChaCha20Poly1305(key)


def nonce(counter: int) -> bytes:
    return bytes(4) + counter.to_bytes(8, "big")


def aegis_nonce(counter: int) -> bytes:
    """AEGIS-128L's 16-byte nonce: 8 zero bytes, then the counter."""
    return bytes(8) + counter.to_bytes(8, "big")


def seal(s: Session, hdr: bytes, data: bytes, to_server: bool, counter: int | None = None) -> bytes:
    """A data datagram of session s: header, body (the data, or its ciphertext), session, counter, tag
    (AEGIS-128L: header, body, the tag's first 16 bytes, session, counter, its last 16)."""
    if counter is None:
        s.sent += 1
        counter = s.sent
    key = s.k_c2s if to_server else s.k_s2c
    ids = s.id.to_bytes(8, "big") + counter.to_bytes(8, "big")
    if s.aegis:
        k, n = key[:16], aegis_nonce(counter)
        if s.encrypt:
            ct = crypto_aead_aegis128l_encrypt(data, hdr + ids, n, k)
            body, t = ct[:-32], ct[-32:]
        else:
            body, t = data, crypto_aead_aegis128l_encrypt(b"", hdr + data + ids, n, k)
        return hdr + body + t[:16] + ids + t[16:]
    aead = _aead(s, key)
    if s.encrypt:
        ct = aead.encrypt(nonce(counter), data, hdr + ids)
        return hdr + ct[:-16] + ids + ct[-16:]
    return hdr + data + ids + aead.encrypt(nonce(counter), b"", hdr + data + ids)


def open_(s: Session, dgram: bytes, to_server: bool) -> bytes | None:
    """The data of a datagram of session s (tag right, counter new: taken), or None."""
    extra = AEGIS_EXTRA if s.aegis else 0
    if len(dgram) < HDR_LEN + extra + TRAILER or int.from_bytes(dgram[-32:-24], "big") != s.id:
        return None
    counter = int.from_bytes(dgram[-24:-16], "big")
    if counter == 0 or counter in s.seen or counter + WINDOW <= s.top:
        return None
    key = s.k_c2s if to_server else s.k_s2c
    hdr, ids = dgram[:HDR_LEN], dgram[-32:-16]
    if s.aegis:
        body, tag = dgram[HDR_LEN:-48], dgram[-48:-32] + dgram[-16:]
        k, n = key[:16], aegis_nonce(counter)
        try:
            if s.encrypt:
                data = crypto_aead_aegis128l_decrypt(body + tag, hdr + ids, n, k)
            else:
                crypto_aead_aegis128l_decrypt(tag, hdr + body + ids, n, k)
                data = body
        except CryptoError:
            return None
    else:
        body, tag = dgram[HDR_LEN:-32], dgram[-16:]
        aead = _aead(s, key)
        try:
            if s.encrypt:
                data = aead.decrypt(nonce(counter), body + tag, hdr + ids)
            else:
                aead.decrypt(nonce(counter), tag, hdr + body + ids)
                data = body
        except InvalidTag:
            return None
    s.seen.add(counter)
    s.top = max(s.top, counter)
    return data


def open_cookie(psk: bytes, init: bytes, reply: bytes) -> bytes | None:
    """The 16-byte cookie of a COOKIE answering init, or None."""
    if len(reply) != HDR_LEN + COOKIE_BODY:
        return None
    f = unpack(reply, VERSION)
    if f is None or f[1] != (VERSION << 4 | COOKIE) or f[3] != unpack(init, VERSION)[3]:
        return None
    n, box = reply[HDR_LEN:HDR_LEN + 12], reply[HDR_LEN + 12:]
    try:
        return ChaCha20Poly1305(cookie_key(psk)).decrypt(n, box, init[INIT_MAC1:INIT_MAC1 + 16])
    except InvalidTag:
        return None


def private_key() -> bytes:
    return X25519PrivateKey.generate().private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())


def random_id() -> int:
    """A 48-bit handshake id, never 0."""
    return int.from_bytes(os.urandom(6), "big") or 1


__all__ = ["HDR", "VERSION", "REQUEST", "RESPONSE", "ERROR", "INIT", "ACCEPT", "COOKIE", "NO_SESSION", "make_init",
           "make_accept", "open_accept", "seal", "open_", "open_cookie", "private_key", "random_id", "Session"]

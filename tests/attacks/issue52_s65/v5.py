"""A splitrpc protocol-5 client written from docs/PROTOCOL*.md only (raw UDP)."""
import binascii, hashlib, hmac, json, os, socket, struct, time
import nacl.bindings as nb

MAGIC = 0xA5
T_REQ, T_RESP, T_ERR, T_INIT, T_ACCEPT, T_COOKIE, T_NOSESS = range(7)
F_ENC, F_AES, F_AEGIS = 1, 2, 4
M48 = (1 << 48) - 1


def H(k, m, n):
    return hashlib.blake2b(m, key=k, digest_size=n).digest()


def crc16(b):
    return binascii.crc_hqx(b, 0xFFFF)


def hdr(typ, func, req_id, seq, nseg, msg_len, aux, ver=5):
    h = bytearray(struct.pack(">BBHH6sHHIH", MAGIC, (ver << 4) | typ, func, 0,
                              (req_id & M48).to_bytes(6, "big"), seq, nseg, msg_len, aux))
    struct.pack_into(">H", h, 4, crc16(bytes(h)))
    return bytes(h)


def parse_hdr(d):
    if len(d) < 22:
        return None
    magic, vt, func, chk, rid, seq, nseg, ml, aux = struct.unpack(">BBHH6sHHIH", d[:22])
    z = bytearray(d[:22]); z[4:6] = b"\0\0"
    return dict(ok=(magic == MAGIC and crc16(bytes(z)) == chk), ver=vt >> 4, typ=vt & 15, func=func,
                req_id=int.from_bytes(rid, "big"), seq=seq, nseg=nseg, msg_len=ml, aux=aux)


def x25519_pub(priv):
    return nb.crypto_scalarmult_base(priv)


def make_init(psk, key_id, hid, e_priv, t_ms, flags=0, prev=0, prev_kc2s=None, cookie=None):
    e_c = x25519_pub(e_priv)
    d = bytearray(hdr(T_INIT, 0, hid, 0, 1, 104, 0))
    d += struct.pack(">I", key_id) + e_c + struct.pack(">QIQ", t_ms, flags, prev)
    # resume over datagram bytes 0..77 (78 bytes)
    if prev:
        d += H(prev_kc2s, b"splitrpc v5 resume" + bytes(d[:78]), 16)
    else:
        d += bytes(16)
    d += H(H(psk, b"splitrpc v5 mac1", 32), bytes(d[:94]), 16)
    if cookie is not None:
        d += H(cookie, bytes(d[:110]), 16)
    else:
        d += bytes(16)
    assert len(d) == 126
    return bytes(d)


def derive(psk, init, accept, dh):
    th = H(b"", init + accept[:70], 32)
    prk = H(psk, b"splitrpc v5 prk" + dh + th, 32)
    return (H(prk, b"splitrpc v5 c2s", 32), H(prk, b"splitrpc v5 s2c", 32),
            H(prk, b"splitrpc v5 confirm", 32), th)


def make_accept(psk, init, sess, e_s_priv, flags):
    """server side, for the self-test only"""
    key_id = init[22:26]
    e_c = init[26:58]
    hid = int.from_bytes(init[6:12], "big")
    a = bytearray(hdr(T_ACCEPT, 0, hid, 0, 1, 64, 0))
    a += key_id + struct.pack(">Q", sess) + x25519_pub(e_s_priv) + struct.pack(">I", flags)
    dh = nb.crypto_scalarmult(e_s_priv, e_c)
    kc, ks, kconf, th = derive(psk, init, bytes(a) + bytes(16), dh)
    a += H(kconf, th, 16)
    return bytes(a), kc, ks


class Sess:
    def __init__(self, sid, kc, ks, flags):
        self.sid, self.kc, self.ks, self.flags = sid, kc, ks, flags
        self.ctr = 0

    @property
    def tlen(self):
        return 48 if self.flags & F_AEGIS else 32

    def _aead(self, key, ctr, pt, ad, enc=True, ct=None):
        f = self.flags
        if f & F_AEGIS:
            n = bytes(8) + ctr.to_bytes(8, "big")
            if enc:
                return nb.crypto_aead_aegis128l_encrypt(pt, ad, n, key[:16])
            return nb.crypto_aead_aegis128l_decrypt(ct, ad, n, key[:16])
        n = bytes(4) + ctr.to_bytes(8, "big")
        if f & F_AES:
            if enc:
                return nb.crypto_aead_aes256gcm_encrypt(pt, ad, n, key)
            return nb.crypto_aead_aes256gcm_decrypt(ct, ad, n, key)
        if enc:
            return nb.crypto_aead_chacha20poly1305_ietf_encrypt(pt, ad, n, key)
        return nb.crypto_aead_chacha20poly1305_ietf_decrypt(ct, ad, n, key)

    def seal(self, typ, func, req_id, seq, nseg, msg_len, aux, data, ctr=None, key=None, sid=None):
        if ctr is None:
            self.ctr += 1
            ctr = self.ctr
        if key is None:
            key = self.kc if typ == T_REQ else self.ks
        sid = self.sid if sid is None else sid
        h = hdr(typ, func, req_id, seq, nseg, msg_len, aux)
        tr = struct.pack(">QQ", sid, ctr)
        if self.flags & F_ENC:
            out = self._aead(key, ctr, data, h + tr)
            body, tag = out[:len(data)], out[len(data):]
        else:
            tag = self._aead(key, ctr, b"", h + data + tr)
            body = data
        if self.flags & F_AEGIS:
            return h + body + tag[:16] + tr + tag[16:]
        return h + body + tr + tag

    def open(self, d, key=None):
        """open a data datagram; returns (hdr, data, ctr) or None"""
        if key is None:
            key = self.ks
        h = d[:22]
        tl = self.tlen
        if len(d) < 22 + tl:
            return None
        L = len(d) - 22 - tl
        body = d[22:22 + L]
        if self.flags & F_AEGIS:
            tag = d[22 + L:22 + L + 16] + d[-16:]
            tr = d[-32:-16]
        else:
            tr = d[-32:-16]
            tag = d[-16:]
        sid, ctr = struct.unpack(">QQ", tr)
        if sid != self.sid:
            return None
        try:
            if self.flags & F_ENC:
                data = self._aead(key, ctr, None, h + tr, enc=False, ct=body + tag)
            else:
                self._aead(key, ctr, None, h + body + tr, enc=False, ct=tag)
                data = body
        except Exception:
            return None
        return parse_hdr(d), bytes(data), ctr


def load_client(path=os.path.join(os.environ.get("ATTACK_DIR", "/tmp/attack"), "client.json")):
    c = json.load(open(path))
    return c["id"], bytes.fromhex(c["secret"])


def segments(data, S):
    if len(data) <= S:
        return [(0, 1, data)]
    n = (len(data) + S - 1) // S
    return [(i, n, data[i * S:(i + 1) * S]) for i in range(n)]


class Client:
    def __init__(self, port, host="127.0.0.1", key=None, flags=0, sock=None, bind_port=0):
        self.addr = (host, port)
        self.key_id, self.psk = key or load_client()
        self.flags = flags
        self.sock = sock or socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        if sock is None:
            self.sock.bind(("127.0.0.1", bind_port))
        self.sess = None
        self.last_init = None
        self.last_accept = None

    def send(self, d, addr=None):
        self.sock.sendto(d, addr or self.addr)

    def recv(self, timeout=0.5):
        self.sock.settimeout(timeout)
        try:
            d, a = self.sock.recvfrom(70000)
            return d
        except socket.timeout:
            return None

    def recv_all(self, timeout=0.3):
        out = []
        end = time.time() + timeout
        while True:
            t = end - time.time()
            if t <= 0:
                break
            d = self.recv(t)
            if d is None:
                break
            out.append(d)
        return out

    def handshake(self, prev=None, hid=None, t_ms=None, flags=None, cookie=None, e_priv=None, timeout=1.0):
        flags = self.flags if flags is None else flags
        hid = hid or (int.from_bytes(os.urandom(6), "big") or 1)
        e_priv = e_priv or os.urandom(32)
        t_ms = t_ms if t_ms is not None else int(time.time() * 1000)
        init = make_init(self.psk, self.key_id, hid, e_priv, t_ms, flags,
                         prev.sid if prev else 0, prev.kc if prev else None, cookie)
        self.last_init = init
        self.send(init)
        end = time.time() + timeout
        while time.time() < end:
            d = self.recv(end - time.time())
            if d is None:
                break
            h = parse_hdr(d)
            if not h or h["typ"] != T_ACCEPT or h["req_id"] != hid or len(d) != 86:
                if h and h["typ"] == T_COOKIE:
                    self.last_cookie = d
                continue
            sid = struct.unpack(">Q", d[26:34])[0]
            e_s = d[34:66]
            af = struct.unpack(">I", d[66:70])[0]
            dh = nb.crypto_scalarmult(e_priv, e_s)
            kc, ks, kconf, th = derive(self.psk, init, d, dh)
            if not hmac.compare_digest(H(kconf, th, 16), d[70:86]):
                raise RuntimeError("bad confirm")
            self.last_accept = d
            self.sess = Sess(sid, kc, ks, af)
            return self.sess
        raise TimeoutError("no ACCEPT")

    def req_dgrams(self, func, req_id, data, S=1400, sess=None, aux=0):
        s = sess or self.sess
        return [s.seal(T_REQ, func, req_id, seq, n, len(data), aux, chunk)
                for seq, n, chunk in segments(data, S)]

    def classify(self, d, sess=None):
        s = sess or self.sess
        h = parse_hdr(d)
        if h is None:
            return ("short", None)
        if h["typ"] == T_NOSESS:
            return ("NO_SESSION", h)
        if h["typ"] in (T_RESP, T_ERR):
            r = s.open(d) if s else None
            if r is None:
                return ("badreply", h)
            hh, data, ctr = r
            return ("RESP" if hh["typ"] == T_RESP else "ERR", (hh, data, ctr))
        return (("type%d" % h["typ"]), h)

    def call(self, func, req_id, data, timeout=0.5, S=1400):
        for d in self.req_dgrams(func, req_id, data, S):
            self.send(d)
        return [self.classify(x) for x in self.recv_all(timeout)]

"""auth.py: keys of authenticated calls (docs/PROTOCOL-v4.md, docs/security.md): splitrpc.Key (an id, a 32-byte secret, the functions it may call, an expiry) and splitrpc.KeyTable (a server's keys, from a JSON file or Python); a secret is never in a repr, a log line or an error message."""
from __future__ import annotations

import json
import math
import os
import secrets
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from splitrpc._native import auth as _auth
from splitrpc.errors import KeyFileError

SECRET_LEN = _auth.SECRET_LEN  # bytes of a secret (docs/PROTOCOL-v4.md)
# The binding layer's public faces, for tools and benchmarks: whether libsodium is there, a tag
# check of one datagram (TagCheck.call, for micro-benchmarks), a datagram sealed or checked.
available, TagCheck, seal, tag_ok = _auth.available, _auth.TagCheck, _auth.seal, _auth.tag_ok
ALL = "*"                      # a key's functions: every function of the server
MAX_KEY_ID = 2**32 - 1
KEY_FILE_MODE = 0o600          # what splitrpc writes a key file with: its owner's only
# A key file with any of these mode bits (group or others may read, write or run it) is refused,
# as ssh refuses such a private key: anyone who can read it can make its calls.
KEY_FILE_OPEN_BITS = 0o077


def _expiry_text(t: float | None) -> str | None:
    return None if t is None else datetime.fromtimestamp(t, timezone.utc).isoformat().replace("+00:00", "Z")


def _parse_expiry(v: Any, where: str) -> float | None:
    if v is None:
        return None
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    if isinstance(v, str):
        try:
            dt = datetime.fromisoformat(v.replace("Z", "+00:00"))
        except ValueError:
            raise KeyFileError(f"{where}: expires {v!r} is not an ISO 8601 time") from None
        if dt.tzinfo is None:
            raise KeyFileError(f"{where}: expires {v!r} has no time zone (write Z for UTC)")
        return dt.timestamp()
    raise KeyFileError(f"{where}: expires must be an ISO 8601 time, seconds since the epoch or null")


@dataclass(frozen=True)
class Key:
    """One key: its id (1 .. 2^32-1, sent in every datagram), its secret (32 bytes, never sent),
    the functions it may call (names or ids; None: every one) and when it expires (seconds since
    the epoch; None: never). A client needs the id and the secret only."""
    id: int
    secret: bytes = field(repr=False)
    functions: tuple[str | int, ...] | None = None
    expires: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.id, bool) or not isinstance(self.id, int) or not 1 <= self.id <= MAX_KEY_ID:
            raise KeyFileError(f"a key id is a number from 1 to {MAX_KEY_ID}, got {self.id!r}")
        if not isinstance(self.secret, (bytes, bytearray)) or len(self.secret) != SECRET_LEN:
            raise KeyFileError(f"key {self.id}: the secret must be {SECRET_LEN} bytes")
        object.__setattr__(self, "secret", bytes(self.secret))
        if self.functions is not None:
            funcs = tuple(self.functions)
            for f in funcs:
                if isinstance(f, bool) or not isinstance(f, (str, int)) or (isinstance(f, int) and not 0 <= f < 65536):
                    raise KeyFileError(f"key {self.id}: a function is a name or an id from 0 to 65535, got {f!r}")
            object.__setattr__(self, "functions", funcs)
        if self.expires is not None and not math.isfinite(self.expires):
            raise KeyFileError(f"key {self.id}: expires must be a finite time")

    @classmethod
    def generate(cls, id: int, functions: Iterable[str | int] | None = None, expires: float | None = None) -> "Key":
        """A new key with a random secret (the operating system's generator)."""
        return cls(id, secrets.token_bytes(SECRET_LEN), None if functions is None else tuple(functions), expires)

    def expired(self, now: float | None = None) -> bool:
        return self.expires is not None and (time.time() if now is None else now) >= self.expires

    def to_dict(self, *, client: bool = False) -> dict[str, Any]:
        """Its JSON form (the secret in hex); client=True: the id and secret only (what a client holds)."""
        d: dict[str, Any] = {"id": self.id, "secret": self.secret.hex()}
        if not client:
            d["functions"] = ALL if self.functions is None else list(self.functions)
            d["expires"] = _expiry_text(self.expires)
        return d

    @classmethod
    def from_dict(cls, d: Any, where: str = "key") -> "Key":
        if not isinstance(d, Mapping):
            raise KeyFileError(f"{where}: a key is an object with id and secret")
        unknown = set(d) - {"id", "secret", "functions", "expires"}
        if unknown:
            raise KeyFileError(f"{where}: unknown fields {sorted(unknown)}")
        kid, sec = d.get("id"), d.get("secret")
        if not isinstance(kid, int) or isinstance(kid, bool):
            raise KeyFileError(f"{where}: a key id is a number from 1 to {MAX_KEY_ID}, got {kid!r}")
        if not isinstance(sec, str):
            raise KeyFileError(f"{where}: secret must be {SECRET_LEN * 2} hexadecimal digits")
        try:
            raw = bytes.fromhex(sec)
        except ValueError:
            raise KeyFileError(f"{where}: secret must be {SECRET_LEN * 2} hexadecimal digits") from None
        funcs = d.get("functions", ALL)
        if funcs != ALL and not isinstance(funcs, list):
            raise KeyFileError(f"{where}: functions must be \"*\" or a list of names or ids")
        try:
            return cls(kid, raw, None if funcs == ALL else tuple(funcs), _parse_expiry(d.get("expires"), where))
        except KeyFileError as e:
            raise KeyFileError(f"{where}: {e}") from None


def check_private(st: os.stat_result, path: str | os.PathLike[str]) -> None:
    """Raises KeyFileError unless the file of st (os.fstat of the open file: the file read, not
    whatever the path names a moment later) is its owner's only and owned by this user or root:
    another user who can read a key file holds its keys, one who owns it can change them."""
    if st.st_mode & KEY_FILE_OPEN_BITS:
        raise KeyFileError(f"{path}: mode {st.st_mode & 0o777:04o} lets other users read or change its keys; "
                           f"make it its owner's only: chmod {KEY_FILE_MODE:o} {path}")
    if st.st_uid not in (os.geteuid(), 0):  # as sshd's StrictModes: root may own it too
        raise KeyFileError(f"{path}: owned by uid {st.st_uid}, not by this user (uid {os.geteuid()}) or root, "
                           f"so its owner can change its keys; make it this user's: chown {os.geteuid()} {path}")


def _read_json(path: str | os.PathLike[str]) -> Any:
    """The JSON of a key file, once check_private has passed it."""
    try:
        with open(path, encoding="utf-8") as f:
            check_private(os.fstat(f.fileno()), path)
            return json.load(f)
    except OSError as e:
        raise KeyFileError(f"{path}: cannot read ({e.strerror})") from None
    except json.JSONDecodeError as e:
        raise KeyFileError(f"{path}: not JSON (line {e.lineno}: {e.msg})") from None


def _write_private(path: str | os.PathLike[str], doc: Any) -> None:
    """Writes doc as JSON to path, readable by its owner only, replacing it whole (never half-written)."""
    p = Path(path)
    fd, tmp = tempfile.mkstemp(dir=p.parent or ".", prefix=f".{p.name}.")
    try:
        os.fchmod(fd, KEY_FILE_MODE)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
        os.replace(tmp, p)
    except BaseException:
        os.unlink(tmp)
        raise


class KeyTable:
    """A server's keys. ``skew`` (seconds): how far a datagram's time may be from the server's
    clock; ``max_senders``: client objects one key may have at once (a power of two). None: the C
    core's defaults (native/src/core/tunables.h: 30 s, 32768).

    ``removed_ids``: the ids of keys taken out of it (without()), never given to another key: a
    client file of a removed key may still exist, and must not name a new key's id.

    File form (JSON, mode 0600, refused when open to other users): ``{"keys": [{"id": 7, "secret":
    "<64 hex>", "functions": ["vecadd"] or "*", "expires": "2027-01-01T00:00:00Z" or null}, ...],
    "skew_s": 30, "removed_ids": [3]}`` (skew_s, max_senders and removed_ids optional).
    """

    def __init__(self, keys: Iterable[Key] = (), *, skew: float | None = None, max_senders: int | None = None,
                 removed_ids: Iterable[int] = (), source: str | None = None) -> None:
        self.keys = list(keys)
        seen: set[int] = set()
        for k in self.keys:
            if not isinstance(k, Key):
                raise TypeError(f"a KeyTable holds splitrpc.Key objects, got {type(k).__name__}")
            if k.id in seen:
                raise KeyFileError(f"{source or 'key table'}: key id {k.id} twice")
            seen.add(k.id)
        removed: set[int] = set()
        for i in removed_ids:
            if isinstance(i, bool) or not isinstance(i, int) or not 1 <= i <= MAX_KEY_ID:
                raise KeyFileError(f"{source or 'key table'}: a removed id is a number from 1 to {MAX_KEY_ID}, "
                                   f"got {i!r}")
            if i in seen:
                raise KeyFileError(f"{source or 'key table'}: key id {i} was removed before: an id is never "
                                   "given to a second key")
            removed.add(i)
        self.removed_ids = tuple(sorted(removed))
        if len(self.keys) > _auth.MAX_KEYS:
            raise KeyFileError(f"{source or 'key table'}: at most {_auth.MAX_KEYS} keys")
        if skew is not None and (isinstance(skew, bool) or not isinstance(skew, (int, float)) or
                                 not 0.001 <= skew <= 86400):
            raise KeyFileError(f"skew must be from 0.001 to 86400 seconds, got {skew!r}")
        if max_senders is not None and (isinstance(max_senders, bool) or not isinstance(max_senders, int) or
                                        max_senders < 1 or max_senders & (max_senders - 1) or max_senders > 1 << 20):
            raise KeyFileError(f"max_senders must be a power of two up to 2^20, got {max_senders!r}")
        self.skew, self.max_senders, self.source = skew, max_senders, source

    def __len__(self) -> int:
        return len(self.keys)

    def __iter__(self) -> Iterator[Key]:
        return iter(self.keys)

    def __repr__(self) -> str:
        return f"KeyTable(ids={[k.id for k in self.keys]}, skew={self.skew}, source={self.source!r})"

    def get(self, key_id: int) -> Key:
        for k in self.keys:
            if k.id == key_id:
                return k
        raise KeyError(key_id)

    def next_id(self) -> int:
        """One more than every id the table has held, its keys' and its removed ones (what
        `splitrpc keys new` gives): an id is never given twice, even after the highest is removed."""
        taken = {k.id for k in self.keys} | set(self.removed_ids)
        top = max(taken, default=0) + 1
        if top <= MAX_KEY_ID:
            return top
        free = next((i for i in range(1, MAX_KEY_ID + 1) if i not in taken), None)  # the highest was issued
        if free is None:
            raise KeyFileError(f"{self.source or 'key table'}: every key id from 1 to {MAX_KEY_ID} was issued")
        return free

    def with_key(self, key: Key) -> "KeyTable":
        """The table and key (KeyFileError if its id is in the table or among the removed ones)."""
        return KeyTable([*self.keys, key], skew=self.skew, max_senders=self.max_senders,
                        removed_ids=self.removed_ids, source=self.source)

    def without(self, key_id: int) -> "KeyTable":
        """The table less key key_id, its id kept among the removed ones. KeyError if it has no such key."""
        self.get(key_id)
        return KeyTable([k for k in self.keys if k.id != key_id], skew=self.skew, max_senders=self.max_senders,
                        removed_ids=(*self.removed_ids, key_id), source=self.source)

    @classmethod
    def from_dict(cls, doc: Any, source: str = "key table") -> "KeyTable":
        if not isinstance(doc, Mapping) or not isinstance(doc.get("keys"), list):
            raise KeyFileError(f"{source}: a key table is an object with a list of keys under \"keys\"")
        unknown = set(doc) - {"keys", "skew_s", "max_senders", "removed_ids"}
        if unknown:
            raise KeyFileError(f"{source}: unknown fields {sorted(unknown)}")
        keys = [Key.from_dict(k, f"{source}: keys[{i}]") for i, k in enumerate(doc["keys"])]
        removed = doc.get("removed_ids", [])  # absent from tables that never had a key removed
        if not isinstance(removed, list):
            raise KeyFileError(f"{source}: removed_ids must be a list of key ids")
        return cls(keys, skew=doc.get("skew_s"), max_senders=doc.get("max_senders"), removed_ids=removed,
                   source=source)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "KeyTable":
        """The table in a JSON file (see the class). Raises KeyFileError naming the entry at fault,
        or when the file is open to other users (check_private)."""
        return cls.from_dict(_read_json(path), str(path))

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"keys": [k.to_dict() for k in self.keys]}
        if self.skew is not None:
            doc["skew_s"] = self.skew
        if self.max_senders is not None:
            doc["max_senders"] = self.max_senders
        if self.removed_ids:  # only then: a table without it stays readable by splitrpc before removed_ids
            doc["removed_ids"] = list(self.removed_ids)
        return doc

    def save(self, path: str | os.PathLike[str]) -> None:
        """Writes the table (mode 0600, replaced whole)."""
        _write_private(path, self.to_dict())


def native_table(table: KeyTable, function_ids: Mapping[str, int], legacy_v4: bool = False) -> Any:
    """The C key table of table, each key's function names made ids by function_ids (name -> id;
    ids given as numbers pass as they are); legacy_v4: version 4's signed datagrams are taken too.
    Raises KeyFileError for a name the server lacks."""
    rows = []
    for k in table:
        ids = None
        if k.functions is not None:
            ids = []
            for f in k.functions:
                if isinstance(f, str):
                    if f not in function_ids:
                        raise KeyFileError(f"{table.source or 'key table'}: key {k.id} names a function the server "
                                           f"does not have: {f!r}")
                    ids.append(function_ids[f])
                else:
                    ids.append(f)
        rows.append((k.id, k.secret, 0 if k.expires is None else max(1, int(k.expires * 1000)), ids))
    return _auth.build_table(rows, skew_ms=0 if table.skew is None else max(1, round(table.skew * 1000)),
                             max_senders=table.max_senders or 0, legacy_v4=legacy_v4)


def save_client_key(key: Key, path: str | os.PathLike[str]) -> None:
    """Writes what a client holds of key (its id and secret) to path (mode 0600)."""
    _write_private(path, key.to_dict(client=True))


def load_key(spec: "Key | tuple[int, bytes] | str | os.PathLike[str]") -> Key:
    """A client's key: a Key, an (id, secret) pair, or a JSON file holding one key ({"id", "secret"})
    or a key table; ``FILE:ID`` picks key ID from a table of several. A file open to other users is
    refused (check_private)."""
    if isinstance(spec, Key):
        return spec
    if isinstance(spec, tuple):
        return Key(*spec)
    text = os.fspath(spec)
    head, sep, tail = text.rpartition(":")
    path, pick = (head, tail) if sep and head and tail.isdigit() else (text, "")
    doc = _read_json(path)
    if isinstance(doc, Mapping) and "keys" in doc:
        table = KeyTable.from_dict(doc, path)
        if pick:
            try:
                return table.get(int(pick))
            except KeyError:
                raise KeyFileError(f"{path}: no key {pick}") from None
        if len(table) != 1:
            raise KeyFileError(f"{path}: holds {len(table)} keys: name one as {path}:ID")
        return table.keys[0]
    return Key.from_dict(doc, path)


def sodium_library() -> str | None:
    """The name or path this process's libsodium was loaded from (loading it now), or None without
    one: the system's, or the newer one inside PyNaCl (docs/security.md, "Requirements")."""
    return _auth.library()


def pynacl_sodium() -> str | None:
    """The path of the libsodium inside PyNaCl 1.6 or later, when it is installed; else None."""
    from splitrpc._native import sodium_pick

    return sodium_pick.pynacl_library()

"""l3_cache.py: a temporary L3 without a fill at every start: the first fill of a set of tables is kept, compacted and closed, in a per-user cache folder, and each temporary L3 of the same tables is a clone of it: its SST files hard links (RocksDB never changes an SST once written and deletes one by unlinking it, so a clone's writes never reach the kept copy), every other file a copy; RocksDB's own checkpoints are made the same way.

The kept copy is named by a hash of the tables' specs and of the code that writes them (tables.py's
ground truth, rocks.py's encoding): a change to either fills anew. SPLITRPC_L3_CACHE names the
folder (default: <tmp>/splitrpc-l3-cache-<uid>), or "off": fill every temporary L3 as before. The
folder must be the user's own and not writable by others, else it is not used (a warning says
why). At most KEEP sets of tables are kept; the least recently used goes first.

Thread and process safety: one fill per set of tables at a time, across processes (an flock on
<key>.lock); a kept copy is complete once renamed into place, never changed after.
"""
from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import stat
import tempfile
import time
from typing import Callable, Sequence

from splitrpc.services.embedding.tables import TableSpec

log = logging.getLogger("splitrpc.embedding")

CACHE_ENV = "SPLITRPC_L3_CACHE"
KEEP = 4            # sets of tables kept at most
FORMAT = b"l3-cache 1"
DONE = "SPLITRPC-FILLED"  # written last into a kept copy, before it is renamed into place
_LINKED = (".sst", ".blob")  # immutable once written: shared by hard link
_SKIPPED = ("LOCK", "LOG", DONE)  # a process's lock, its info log (LOG, LOG.old.*), the marker


def cache_root() -> str | None:
    """The cache folder, or None when SPLITRPC_L3_CACHE=off."""
    v = os.environ.get(CACHE_ENV, "")
    if v.lower() == "off":
        return None
    return v or os.path.join(tempfile.gettempdir(), f"splitrpc-l3-cache-{os.getuid()}")


def key(specs: Sequence[TableSpec]) -> str:
    """The kept copy's name: the specs, and the source of the code that writes the tables."""
    from splitrpc.services.embedding import rocks, tables

    h = hashlib.sha256(FORMAT)
    for mod in (tables, rocks):
        with open(mod.__file__, "rb") as f:  # type: ignore[arg-type]
            h.update(f.read())
    h.update(repr(sorted(specs, key=lambda s: s.name)).encode())
    return "tables-" + h.hexdigest()[:24]


def _own_folder(root: str) -> None:
    os.makedirs(root, mode=0o700, exist_ok=True)
    st = os.lstat(root)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise PermissionError(f"{root} is not a folder of this user's that only it can write")


def _kept(root: str, specs: Sequence[TableSpec], fill: Callable[[str], None]) -> str:
    """The kept copy of specs' tables, filled (by fill(path)) if it is not there yet."""
    _own_folder(root)
    name = key(specs)
    final = os.path.join(root, name)
    if not os.path.exists(os.path.join(final, DONE)):
        with open(os.path.join(root, name + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be filling the same tables
            if not os.path.exists(os.path.join(final, DONE)):
                shutil.rmtree(final, ignore_errors=True)  # a copy without its marker is incomplete
                work = tempfile.mkdtemp(dir=root, prefix=name + ".filling-")
                try:
                    fill(work)
                    with open(os.path.join(work, DONE), "w") as f:
                        f.write(repr(list(specs)) + "\n")
                    os.rename(work, final)
                except BaseException:
                    shutil.rmtree(work, ignore_errors=True)
                    raise
                _evict(root, keep=name)
    os.utime(os.path.join(final, DONE))  # used now: the least recently used goes first
    return final


def _evict(root: str, keep: str) -> None:
    """Removes the least recently used kept copies beyond KEEP (never `keep`)."""
    kept = []
    for n in os.listdir(root):
        marker = os.path.join(root, n, DONE)
        if n != keep and os.path.exists(marker):
            kept.append((os.stat(marker).st_mtime, n))
    for _, n in sorted(kept)[:max(0, len(kept) - (KEEP - 1))]:
        shutil.rmtree(os.path.join(root, n), ignore_errors=True)
        try:
            os.unlink(os.path.join(root, n + ".lock"))
        except OSError:
            pass


def clone(src: str, dst: str) -> None:
    """dst (an empty folder) becomes a RocksDB that starts as src: SSTs linked (copied where a link
    cannot be made, e.g. across file systems), the rest copied."""
    for n in os.listdir(src):
        if n.startswith(_SKIPPED):
            continue
        s, d = os.path.join(src, n), os.path.join(dst, n)
        if n.endswith(_LINKED):
            try:
                os.link(s, d)
                continue
            except OSError:
                pass
        shutil.copy2(s, d)


def filled_temporary(specs: Sequence[TableSpec], fill: Callable[[str], None], *, prefix: str) -> str:
    """A new temporary folder (the caller removes it) holding an L3 with every table filled:
    a clone of the kept copy, or, with the cache off or unusable, filled by fill(path) itself."""
    dst = tempfile.mkdtemp(prefix=prefix)
    root = cache_root()
    if root is not None:
        t0 = time.monotonic()
        try:
            src = _kept(root, specs, fill)
            clone(src, dst)
            log.info("L3: a clone of the filled tables kept in %s (%.1f s; %s=off fills each time)", src,
                     time.monotonic() - t0, CACHE_ENV)
            return dst
        except OSError as e:
            log.warning("L3: the cache of filled tables in %s cannot be used (%s): filling this one", root, e)
            shutil.rmtree(dst, ignore_errors=True)
            dst = tempfile.mkdtemp(prefix=prefix)
    fill(dst)
    return dst

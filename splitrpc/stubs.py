"""stubs.py: what a module written by `splitrpc stub` runs on: StubBase, whose typed methods call a blocking Client or Pool through its typed functions (typed.py), and which checks on first use that the server's description is still the one the stub was written from (its digest, docs/PROTOCOL.md Amendment 2); ArrayIn, the inputs a method takes.

Thread rules: a stub may be shared by threads, as its client is; the first-use check may run
more than once when threads race to it (each reads the same description).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Union

import numpy.typing as npt

from splitrpc import describe as describe_
from splitrpc import typed
from splitrpc.errors import DescriptionChanged, NoSuchFunction

if TYPE_CHECKING:
    from typing import TypeAlias

    from splitrpc.client import Client
    from splitrpc.pool import Pool


class _DeviceArray(Protocol):  # CuPy and any array with the CUDA array interface (copied to the host)
    @property
    def __cuda_array_interface__(self) -> dict[str, Any]: ...


class _DLPack(Protocol):  # PyTorch tensors, and any DLPack exporter on the CPU
    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any: ...


ArrayIn: TypeAlias = Union[npt.ArrayLike, _DeviceArray, _DLPack]


class StubOutOfDate(DescriptionChanged):
    """The server's functions are not those the stub was written from: write it again
    (`splitrpc stub`), or make the stub with check=False to call what still matches."""


class StubBase:
    """The base of a generated stub: Service(client) with client a splitrpc.Client or
    splitrpc.Pool. On first use it reads the server's description and raises StubOutOfDate when
    its digest is not the stub's (check=False: no check; a call whose function changed still
    raises DescriptionChanged then)."""

    digest: ClassVar[str]          # of the description the stub was written from
    functions: ClassVar[dict[str, int]]  # name -> id, as written

    def __init__(self, client: "Client | Pool", *, check: bool = True):
        self.client = client
        self._checked = not check

    def check(self) -> None:
        """Reads the server's description now: StubOutOfDate when it is not the stub's."""
        d = self.client.describe()
        live = d.digest if d.digest is not None else describe_.digest(d.functions)  # an older server: its functions
        typed.directory_of(self.client).adopt(d)  # the client's typed functions start from this reading
        if live != self.digest:
            have = {f.name: f.func_id for f in d.functions}
            gone = sorted(set(self.functions) - set(have))
            moved = sorted(n for n in self.functions if n in have and have[n] != self.functions[n])
            new = sorted(set(have) - set(self.functions))
            what = "; ".join(x for x in (f"gone: {', '.join(gone)}" if gone else "",
                                         f"other ids: {', '.join(moved)}" if moved else "",
                                         f"new: {', '.join(new)}" if new else "") if x) or "specs or settings differ"
            raise StubOutOfDate(f"{type(self).__module__}.{type(self).__name__} was written from description "
                                f"{self.digest}; the server's is {live} ({what}): write the stub again with "
                                "`splitrpc stub`")
        self._checked = True

    def _function(self, name: str) -> Any:
        if not self._checked:
            self.check()
        try:
            return self.client.function(name)
        except NoSuchFunction as e:  # check=False, or the server changed since the check
            raise DescriptionChanged(f"{name!r} is gone from the server since {type(self).__name__} was written "
                                     f"(description {self.digest}): write the stub again with `splitrpc stub`",
                                     function=name) from e

    def _call(self, name: str, *inputs: Any, timeout: float | None) -> tuple[Any, ...]:
        """A tensor function's outputs, in their order."""
        return tuple(self._function(name).invoke(inputs, timeout=timeout))

    def _raw(self, name: str, data: Any, *, timeout: float | None) -> bytes:
        return self._function(name)(data, timeout)  # type: ignore[no-any-return]

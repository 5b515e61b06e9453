"""errors.py: the exceptions of splitrpc: one class per protocol error code, plus local ones."""


class SplitRPCError(Exception):
    """Base class of every splitrpc error."""


class NativeError(SplitRPCError, OSError):
    """A native call failed with an errno (e.g. the address could not be bound)."""


class CallTimeout(SplitRPCError, TimeoutError):
    """No reply arrived within the call's timeout."""


class Unavailable(SplitRPCError, ConnectionError):
    """The server could not be reached: its host answered "port unreachable" (nothing listens on
    the port) or "host unreachable". Raised at once, as gRPC's UNAVAILABLE, instead of waiting for
    the call's timeout (wait_for_ready=True waits). A call failed this way before it was sent to a
    running server never ran; one sent earlier, to a server that then went away, may have."""


class GPUError(SplitRPCError):
    """A CUDA driver call of the GPU data path failed."""


class GPUUnavailable(GPUError):
    """No usable CUDA driver or device (a function then falls back to host memory)."""


class DPDKError(SplitRPCError):
    """The EAL could not be initialised or used; the message is DPDK's reason."""


class DPDKUnavailable(DPDKError):
    """This build of splitrpc has no DPDK (libdpdk was not found when it was built)."""


class AuthUnavailable(SplitRPCError):
    """Authenticated calls need libsodium's shared library (Debian: libsodium23), which was not found."""


class KeyFileError(SplitRPCError, ValueError):
    """A key file or key table is malformed, open to other users (chmod 600 it) or would reuse a
    removed key's id: which file and entry, never a secret."""


class NoSuchFunction(SplitRPCError, LookupError):
    """A function name the server does not describe (client.function(name)): the message lists
    the names it does."""


class InputError(SplitRPCError, ValueError):
    """Inputs of a typed call that do not match the function's specs, found before anything is
    sent. ``function`` and ``input`` name them; ``expected`` and ``given`` say what each was."""

    def __init__(self, message: str, *, function: str, input: str | None = None, expected: object = None,
                 given: object = None):
        super().__init__(message)
        self.function, self.input, self.expected, self.given = function, input, expected, given


class MissingInput(InputError):
    """An input the function declares was not given."""


class UnexpectedInput(InputError):
    """An input given that the function does not declare (a name it lacks, or one too many)."""


class DtypeMismatch(InputError):
    """An input of another dtype than its spec's (cast=True casts where no value can change)."""


class ShapeMismatch(InputError):
    """An input of another shape than its spec's, or than [N, *shape] for a batch of N."""


class NotContiguous(InputError):
    """An input that is not in C order (cast=True makes a C-ordered copy)."""


class ReplyMismatch(SplitRPCError):
    """A reply whose size is not the function's declared outputs' (the server's word is checked
    too)."""


class DescriptionChanged(SplitRPCError):
    """The server's functions changed since the description a typed function or a stub was made
    from (its digest, docs/PROTOCOL.md Amendment 2): ``function`` names the one called, if any."""

    def __init__(self, message: str, *, function: str | None = None):
        super().__init__(message)
        self.function = function


class RemoteError(SplitRPCError):
    """The server answered with an ERROR datagram (docs/PROTOCOL.md, Calls)."""

    code = 0
    name = "ERROR"

    def __init__(self, message: str = "", code: int | None = None):
        if code is not None:
            self.code = code
        self.message = message
        super().__init__(f"{self.name} ({self.code}): {message}" if message else f"{self.name} ({self.code})")


class UnknownFunction(RemoteError):
    code, name = 1, "UNKNOWN_FUNCTION"


class BadRequest(RemoteError):
    code, name = 2, "BAD_REQUEST"


class Busy(RemoteError):
    code, name = 3, "BUSY"


class DeadlineExceeded(RemoteError):
    code, name = 4, "DEADLINE"


class InternalError(RemoteError):
    code, name = 5, "INTERNAL"


class TooLarge(RemoteError):
    code, name = 6, "TOO_LARGE"


class Draining(RemoteError):
    """The server is stopping and takes no new calls (docs/PROTOCOL.md, Amendment 1): try another
    replica, or later."""
    code, name = 7, "DRAINING"


class Forbidden(RemoteError):
    """The call's key may not call this function, or has expired (docs/PROTOCOL-v4.md)."""
    code, name = 8, "FORBIDDEN"


ERROR_CLASSES = {c.code: c for c in (UnknownFunction, BadRequest, Busy, DeadlineExceeded, InternalError, TooLarge,
                                     Draining, Forbidden)}


def remote_error(code: int, message: bytes | str = b"") -> RemoteError:
    """The exception for an ERROR datagram's code and UTF-8 text."""
    if isinstance(message, bytes):
        message = message.decode("utf-8", errors="replace")
    cls = ERROR_CLASSES.get(code)
    return cls(message) if cls else RemoteError(message, code=code)

"""Result codes and the exceptions they become."""

from __future__ import annotations

import enum

from ._library import ffi, lib, text


class Code(enum.IntEnum):
    """Every ``lock_result`` of the C library, by its C name.

    Spelled out so that type checkers know the members; the tests check it
    against the declarations cffi reads. Below 100 outcomes, 1xx misuse,
    2xx spec, 3xx file system, 900 internal.
    """

    LOCK_OK = 0
    LOCK_EXPIRED = 1
    LOCK_LOST = 2
    LOCK_BUSY = 3
    LOCK_TIMEOUT = 4
    LOCK_CANCELLED = 5
    LOCK_ERR_NULL_ARGUMENT = 100
    LOCK_ERR_NOT_HELD = 101
    LOCK_ERR_ALREADY_HELD = 102
    LOCK_ERR_FORKED = 103
    LOCK_ERR_HANDLE_IN_USE = 104
    LOCK_ERR_UNSUPPORTED = 105
    LOCK_ERR_BUFFER_TOO_SMALL = 106
    LOCK_ERR_INVALID_ARGUMENT = 107
    LOCK_ERR_SPEC_SYNTAX = 200
    LOCK_ERR_SPEC_UNKNOWN_SCHEME = 201
    LOCK_ERR_SPEC_UNKNOWN_KEY = 202
    LOCK_ERR_SPEC_BAD_VALUE = 203
    LOCK_ERR_SPEC_DUPLICATE_KEY = 204
    LOCK_ERR_PATH_TOO_LONG = 205
    LOCK_ERR_SPEC_BAD_URL = 206
    LOCK_ERR_NOT_FOUND = 300
    LOCK_ERR_PERMISSION = 301
    LOCK_ERR_SYMLINK = 302
    LOCK_ERR_NOT_A_LOCK = 303
    LOCK_ERR_CORRUPT_RECORD = 304
    LOCK_ERR_RECORD_TOO_LONG = 305
    LOCK_ERR_CORRUPT_GUARD = 306
    LOCK_ERR_SYSTEM = 307
    LOCK_ERR_COMMIT = 308
    LOCK_ERR_NOT_A_DIRECTORY = 309
    LOCK_ERR_UNTRUSTED = 310
    LOCK_ERR_SERVER_UNKNOWN_HOST = 400
    LOCK_ERR_SERVER_UNREACHABLE = 401
    LOCK_ERR_SERVER_NO_ANSWER = 402
    LOCK_ERR_SERVER_DISCONNECTED = 403
    LOCK_ERR_SERVER_AUTH = 404
    LOCK_ERR_SERVER_NOT_READY = 405
    LOCK_ERR_SERVER_READ_ONLY = 406
    LOCK_ERR_SERVER_NO_WRITES = 407
    LOCK_ERR_SERVER_REFUSED = 408
    LOCK_ERR_SERVER_FOREIGN_KEYS = 409
    LOCK_ERR_SERVER_PROTOCOL = 410
    LOCK_ERR_SERVER_NOT_REPLICATED = 411
    LOCK_ERR_PANIC = 900


class LockError(Exception):
    """A ``lock_*`` call that did not succeed.

    ``code`` is the result (a :class:`Code` member, which is an int; a plain
    int for a code newer than these declarations), ``name`` its C name, and
    ``message`` the library's description of this failure: the call, the
    lock's path, the cause, and the holder of a lock that was busy.
    """

    code: int
    message: str

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def name(self) -> str:
        return self.code.name if isinstance(self.code, Code) else f"lock_result {self.code}"

    def __str__(self) -> str:
        return f"{self.name}: {self.message}"


class LockExpired(LockError):
    """Release, prolong or commit: the lock was held past its TTL, but nobody took it.

    A release has released it; a prolong holds it again; a commit did not
    commit. What ran after the expiry was not protected.
    """


class LockLost(LockError):
    """Release, prolong or commit: someone else holds the lock now; this handle holds nothing."""


class LockBusy(LockError):
    """Another process kept the lock's guard file locked for the call's whole patience; nothing changed."""


class LockTimeout(LockError):
    """Acquire: the wait ran out; the message names what stood in the way (the holder, a cooldown, the queue)."""


class LockCancelled(LockError):
    """Acquire: the caller's cancel callback ended the wait; nothing is held."""


class LockUsageError(LockError):
    """1xx: the call does not fit the handle's state or scheme (not held, already held, forked, unsupported, ...)."""


class SpecError(LockError):
    """2xx: the spec does not parse; the message names the key and the reason."""


class LockFileError(LockError):
    """3xx: the lock's files: missing directory, permission, symlink, not a lock, untrusted owner, ..."""


class LockServerError(LockError):
    """4xx: the lock's server: unreachable, silent past the deadline, refusing the login or writes, ..."""


class LockInternalError(LockError):
    """900: a bug inside the library, caught before it reached Python."""


_OUTCOMES: dict[int, type[LockError]] = {
    Code.LOCK_EXPIRED: LockExpired,
    Code.LOCK_LOST: LockLost,
    Code.LOCK_BUSY: LockBusy,
    Code.LOCK_TIMEOUT: LockTimeout,
    Code.LOCK_CANCELLED: LockCancelled,
}

_ERROR_HUNDREDS: dict[int, type[LockError]] = {
    1: LockUsageError,
    2: SpecError,
    3: LockFileError,
    4: LockServerError,
    9: LockInternalError,
}


def error_class(code: int) -> type[LockError]:
    """The exception raised for ``code``: outcomes each have their own, errors go by their hundred."""
    return _OUTCOMES.get(code) or _ERROR_HUNDREDS.get(code // 100, LockError)


def last_error(code: int) -> LockError:
    """The exception for ``code``, with this thread's message: call it right after the failing call."""
    length = lib.lock_last_error_message(ffi.NULL, 0)
    buffer = ffi.new("char[]", length + 1)
    lib.lock_last_error_message(buffer, len(buffer))
    # Outcomes such as LOCK_EXPIRED leave no message: the code's own text stands in.
    message = text(buffer) or text(lib.lock_strerror(code))
    try:
        code = Code(code)
    except ValueError:
        pass
    return error_class(code)(code, message)


def check(code: int) -> None:
    """Raises the exception for ``code`` unless it is ``LOCK_OK``."""
    if code != Code.LOCK_OK:
        raise last_error(code)

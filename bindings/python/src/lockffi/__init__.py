"""Python binding of liblockffi: one process at a time, on any Unix file system.

Loads the library named by the environment variable ``LOCKFFI_LIBRARY``, or
else ``liblockffi.so.0`` from the loader's path; importing this package
raises ImportError, naming both, when that fails.

    from lockffi import Lock

    with Lock("lockfile:/srv/board/data.txt?ttl=30s", timeout=5) as fence:
        ...  # read data.txt, change it, write it back
"""

from ._errors import (
    Code,
    LockBusy,
    LockCancelled,
    LockError,
    LockExpired,
    LockFileError,
    LockInternalError,
    LockLost,
    LockServerError,
    LockTimeout,
    LockUsageError,
    SpecError,
    error_class,
)
from ._library import DEFAULT_LIBRARY, LIBRARY_VARIABLE, lib, text
from ._lock import Liveness, Lock, LockInfo

__all__ = [
    "DEFAULT_LIBRARY",
    "LIBRARY_VARIABLE",
    "Code",
    "Liveness",
    "Lock",
    "LockBusy",
    "LockCancelled",
    "LockError",
    "LockExpired",
    "LockFileError",
    "LockInfo",
    "LockInternalError",
    "LockLost",
    "LockServerError",
    "LockTimeout",
    "LockUsageError",
    "SpecError",
    "error_class",
    "library_version",
]


def library_version() -> str:
    """The loaded C library's version, ``MAJOR.MINOR.PATCH``."""
    return text(lib.lock_version())

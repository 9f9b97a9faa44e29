"""The C library, loaded with cffi in ABI mode from the declarations it ships.

Every prototype, constant and the layout of ``lock_info`` come from
``lockffi_plain.h``, a verbatim copy of the repository's
``include/lockffi_plain.h`` carried inside this package (a wheel cannot
reach the repository); the repository's tests fail when the two differ.
"""

from __future__ import annotations

import os
from importlib.resources import files
from typing import Any, cast

from cffi import FFI

LIBRARY_VARIABLE = "LOCKFFI_LIBRARY"
"""The environment variable naming the library to load instead of the default."""

DEFAULT_LIBRARY = "liblockffi.so.0"
"""The library's SONAME, found on the loader's path once ``make install`` has run."""

WAIT_FOREVER = 2**64 - 1
"""``LOCK_WAIT_FOREVER``: UINT64_MAX, a macro, so absent from the plain header."""


def _load(ffi: FFI) -> Any:  # cffi's library object has no static type
    chosen = os.environ.get(LIBRARY_VARIABLE)
    try:
        return ffi.dlopen(chosen or DEFAULT_LIBRARY)
    except OSError as error:
        if chosen:
            where = (
                f"{LIBRARY_VARIABLE}={chosen} cannot be loaded ({error}); "
                f"unset {LIBRARY_VARIABLE} to load {DEFAULT_LIBRARY} from the loader's path"
            )
        else:
            where = (
                f"{DEFAULT_LIBRARY} is not on the loader's path ({error}); install the library "
                f"(make install) or set {LIBRARY_VARIABLE} to the path of liblockffi.so"
            )
        raise ImportError(f"lockffi: cannot load the lock library: {where}") from error


ffi = FFI()
ffi.cdef(files(__package__).joinpath("lockffi_plain.h").read_text(encoding="utf-8"))
lib = _load(ffi)


def text(chars: Any) -> str:
    """A NUL-terminated ``char`` array or pointer as text, undecodable bytes replaced."""
    return cast(bytes, ffi.string(chars)).decode("utf-8", "replace")

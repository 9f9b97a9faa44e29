"""Errors: their classes, codes and messages, from the spec to the library itself."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SCHEMES, SERVER_SCHEMES, spec_for

import lockffi
from lockffi import (
    Code,
    Lock,
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
)
from lockffi._library import ffi

BAD_SPECS = [
    ("no scheme here", Code.LOCK_ERR_SPEC_SYNTAX, "scheme:target"),
    ("nosuch:/tmp/lock", Code.LOCK_ERR_SPEC_UNKNOWN_SCHEME, "nosuch"),
    ("lease:/tmp/lock?colour=red", Code.LOCK_ERR_SPEC_UNKNOWN_KEY, "colour"),
    ("lease:/tmp/lock?ttl=soon", Code.LOCK_ERR_SPEC_BAD_VALUE, "ttl"),
    ("lease:/tmp/lock?ttl=1s&hold=2s", Code.LOCK_ERR_SPEC_DUPLICATE_KEY, "hold"),
    ("lease:/" + "x" * 5000, Code.LOCK_ERR_PATH_TOO_LONG, "too long"),
]


@pytest.mark.parametrize(("spec", "code", "named"), BAD_SPECS, ids=[code.name for _, code, _ in BAD_SPECS])
def test_a_bad_spec_raises_spec_error_naming_the_fault(spec: str, code: Code, named: str) -> None:
    with pytest.raises(SpecError) as refused:
        Lock(spec)
    assert refused.value.code == code
    assert refused.value.name == code.name
    assert named in refused.value.message
    assert str(refused.value) == f"{code.name}: {refused.value.message}"


def test_the_schemes_tested_are_the_librarys() -> None:
    with pytest.raises(SpecError) as refused:
        Lock("nosuch:/tmp/lock")
    listed = re.search(r"this build has ([a-z, ]+)", refused.value.message)
    assert listed, f"the library's message lists no schemes: {refused.value.message}"
    assert tuple(listed.group(1).split(", ")) == SCHEMES + SERVER_SCHEMES


def test_a_missing_directory_is_a_file_error_naming_the_path(scheme: str, tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(LockFileError) as refused:
        Lock(spec_for(scheme, missing)).acquire(timeout=0)
    assert refused.value.code == Code.LOCK_ERR_NOT_FOUND
    assert str(missing) in refused.value.message


def test_acquiring_twice_is_a_usage_error(scheme: str, tmp_path: Path) -> None:
    lock = Lock(spec_for(scheme, tmp_path))
    lock.acquire()
    with pytest.raises(LockUsageError) as twice:
        lock.acquire()
    assert twice.value.code == Code.LOCK_ERR_ALREADY_HELD
    assert "lock_acquire" in twice.value.message
    lock.release()
    with pytest.raises(LockUsageError) as not_held:
        lock.release()
    assert not_held.value.code == Code.LOCK_ERR_NOT_HELD


def test_arguments_c_cannot_take_are_refused_before_the_call(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="NUL"):
        Lock(f"lease:{tmp_path}/lock\0?ttl=1s")
    lock = Lock(f"lease:{tmp_path}/lock")
    for negative in (lambda: lock.acquire(timeout=-1), lambda: lock.release(cooldown=-1), lambda: lock.prolong(-1)):
        with pytest.raises(ValueError, match="0 or more"):
            negative()
    with pytest.raises(ValueError, match="finite"):
        lock.acquire(timeout=float("nan"))


def test_the_library_refuses_durations_beyond_its_range(tmp_path: Path) -> None:
    lock = Lock(f"lease:{tmp_path}/lock")
    lock.acquire()
    with pytest.raises(LockUsageError) as refused:
        lock.release(cooldown=200 * 365 * 24 * 3600)
    assert refused.value.code == Code.LOCK_ERR_INVALID_ARGUMENT
    lock.release()


def test_every_code_has_its_exception() -> None:
    outcomes = {
        Code.LOCK_EXPIRED: LockExpired,
        Code.LOCK_LOST: LockLost,
        Code.LOCK_BUSY: LockBusy,
        Code.LOCK_TIMEOUT: LockTimeout,
        Code.LOCK_CANCELLED: LockCancelled,
    }
    hundreds = {1: LockUsageError, 2: SpecError, 3: LockFileError, 4: LockServerError, 9: LockInternalError}
    for code in Code:
        if code == Code.LOCK_OK:
            continue
        expected = outcomes[code] if code < 100 else hundreds[code // 100]
        assert lockffi.error_class(code) is expected, code.name
    # A code newer than these declarations still gets its family's class.
    assert lockffi.error_class(399) is LockFileError
    assert lockffi.error_class(77) is LockError


def import_lockffi(environment: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "import lockffi"], env=environment, capture_output=True, text=True, timeout=60
    )


def test_a_library_that_does_not_load_is_named_with_the_variable() -> None:
    missing = "/nonexistent/liblockffi.so"
    failed = import_lockffi({**os.environ, lockffi.LIBRARY_VARIABLE: missing})
    assert failed.returncode != 0
    assert f"ImportError: lockffi: cannot load the lock library: LOCKFFI_LIBRARY={missing}" in failed.stderr
    assert "liblockffi.so.0" in failed.stderr


def test_without_the_variable_the_soname_is_loaded() -> None:
    environment = {name: value for name, value in os.environ.items() if name != lockffi.LIBRARY_VARIABLE}
    imported = import_lockffi(environment)
    if imported.returncode == 0:
        pytest.skip("liblockffi.so.0 is installed here, so its absence cannot be shown")
    assert "liblockffi.so.0 is not on the loader's path" in imported.stderr
    assert "set LOCKFFI_LIBRARY" in imported.stderr


def test_the_library_version_is_reported() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", lockffi.library_version())


def test_the_enums_are_the_declarations_cffi_reads() -> None:
    assert {code.name: code.value for code in Code} == ffi.typeof("lock_result").relements
    assert {f"LOCK_OWNER_{liveness.name}": liveness.value for liveness in lockffi.Liveness} == ffi.typeof(
        "lock_liveness"
    ).relements

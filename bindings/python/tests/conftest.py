"""What every test shares: the schemes, a spec per scheme in a private directory, waiting for a condition."""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Callable

import pytest

# Every scheme the library implements; test_errors checks this list against
# the one the library names when it refuses an unknown scheme.
SCHEMES = ("lockfile", "mkdir", "flock", "symlink", "lease", "toplock", "shm")
# Locks on a server, which these tests (about files) leave to the library's own suites.
SERVER_SCHEMES = ("redis",)


@pytest.fixture(autouse=True)
def collect_garbage() -> Iterator[None]:
    """Collects after each test, so that what a Lock's destructor reports is charged to that test."""
    yield
    gc.collect()


@pytest.fixture(params=SCHEMES)
def scheme(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def data_file(directory: Path) -> Path:
    """The file the lock protects: what the holder reads, changes and writes back."""
    return directory / "data.txt"


def lock_target(scheme: str, directory: Path) -> Path:
    """The spec's target: the protected file for ``lockfile``, the lock's own path for the others."""
    return data_file(directory) if scheme == "lockfile" else directory / "lock"


def spec_for(scheme: str, directory: Path, **keys: str) -> str:
    """A spec of ``scheme`` in ``directory`` (pytest makes it 0700: a private lock trusts it)."""
    spec = f"{scheme}:{lock_target(scheme, directory)}"
    if keys:
        spec += "?" + "&".join(f"{key}={value}" for key, value in keys.items())
    return spec


def wait_until(condition: Callable[[], bool], what: str, seconds: float = 10.0) -> None:
    """Polls ``condition`` until it holds; fails naming ``what`` after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"still not {what} after {seconds} s")
        time.sleep(0.01)
